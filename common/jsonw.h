/* jsonw: a small streaming JSON writer into a growable buffer, for `--json`
 * output and the coordinator's /api endpoints. Commas are placed automatically.
 * Ownership: the writer owns `buf` until jsonw_free (or take it with jsonw_take). */
#ifndef ATOLL_JSONW_H
#define ATOLL_JSONW_H

#include <stddef.h>
#include <stdint.h>

#define JSONW_DEPTH 32

typedef struct jsonw {
    char *buf;
    size_t len, cap;
    int depth;
    int need_comma[JSONW_DEPTH];
    int after_key;
} jsonw;

void jsonw_init(jsonw *w);
void jsonw_free(jsonw *w);
char *jsonw_take(jsonw *w); /* caller frees; writer is reset */
/* Prints a taken document and a newline on stdout (a command's --json answer)
 * and frees it; NULL prints nothing. */
void jsonw_print_free(char *json);

void jsonw_obj(jsonw *w);
void jsonw_obj_end(jsonw *w);
void jsonw_arr(jsonw *w);
void jsonw_arr_end(jsonw *w);
void jsonw_key(jsonw *w, const char *k);
void jsonw_str(jsonw *w, const char *s);
void jsonw_int(jsonw *w, long long v);
void jsonw_uint(jsonw *w, unsigned long long v);
void jsonw_num(jsonw *w, double v); /* non-finite values are written as null */
void jsonw_bool(jsonw *w, int v);
void jsonw_null(jsonw *w);

/* key + value shorthands */
void jsonw_kstr(jsonw *w, const char *k, const char *s);
void jsonw_kint(jsonw *w, const char *k, long long v);
void jsonw_knum(jsonw *w, const char *k, double v);
void jsonw_kbool(jsonw *w, const char *k, int v);

#endif
