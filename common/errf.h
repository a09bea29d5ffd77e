/* errf: the one way a function fills a caller's error buffer, reads a small
 * file whole, makes a directory with its parents, and reads the monotonic
 * clock.
 *
 * Functions that fail return a code and write one line, naming what was wrong
 * and what would be accepted, into a caller-owned `char *err, size_t errlen`;
 * atoll_errf does the formatting (NULL or zero-length buffers are allowed).
 * atoll_read_file returns a NUL-terminated copy of a file (caller frees), or
 * NULL with errno set when it cannot be read or exceeds `max` bytes (EFBIG). */
#ifndef ATOLL_ERRF_H
#define ATOLL_ERRF_H

#include <stddef.h>

void atoll_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

char *atoll_read_file(const char *path, size_t max, size_t *len);

/* mkdir -p, the directories it makes with `mode`: 0, or -1 with errno
 * (ENAMETOOLONG past 1023 bytes). */
int atoll_mkdir_p(const char *path, unsigned mode);

/* Seconds on CLOCK_MONOTONIC (intervals only: its zero is arbitrary). */
double atoll_mono_s(void);

#endif
