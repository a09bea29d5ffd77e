#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static const char *g_prog = "atoll";
static log_level g_min = LOG_INFO;
static const char *NAMES[] = { "DEBUG", "INFO", "WARN", "ERROR" };

void log_init(const char *progname, log_level min)
{
    g_prog = progname;
    g_min = min;
}

int log_level_parse(const char *s, log_level *out)
{
    static const char *lower[] = { "debug", "info", "warn", "error" };
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, lower[i])) { *out = (log_level)i; return 0; }
    return -1;
}

void log_msg(log_level lvl, const char *fmt, ...)
{
    if (lvl < g_min) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[1024];
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), g_prog, NAMES[lvl]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per record so lines from several processes sharing a file do not interleave. */
    size_t len = strnlen(line, sizeof line - 2);
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
    fflush(stderr);
}
