/* log: one-line, timestamped log records on stderr for the daemons.
 * "2026-11-20T23:59:01.123Z coordinatord WARN refused 127.0.0.1:5012: wrong token"
 * Not thread-safe by design: each daemon is one event loop. */
#ifndef ATOLL_LOG_H
#define ATOLL_LOG_H

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;

void log_init(const char *progname, log_level min);
/* Parses "debug", "info", "warn", "error"; -1 when unknown. */
int log_level_parse(const char *s, log_level *out);
void log_msg(log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
