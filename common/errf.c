#include "errf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

void atoll_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

char *atoll_read_file(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    int failed = 0;
    do {
        if (n == cap) {
            if (cap >= max) { failed = EFBIG; break; }
            cap = cap ? cap * 2 : 4096;
            if (cap > max) cap = max;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { failed = ENOMEM; break; }
            buf = nb;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    if (!failed && ferror(f)) failed = EIO;
    fclose(f);
    if (failed || !buf) {
        free(buf);
        errno = failed ? failed : ENOMEM;
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int atoll_mkdir_p(const char *path, unsigned mode)
{
    char tmp[1024];
    if (strlen(path) >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, (mode_t)mode) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(tmp, (mode_t)mode) && errno != EEXIST ? -1 : 0;
}

double atoll_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
