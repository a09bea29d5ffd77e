#include "jsonw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jsonw_init(jsonw *w) { memset(w, 0, sizeof *w); }

void jsonw_free(jsonw *w)
{
    free(w->buf);
    jsonw_init(w);
}

char *jsonw_take(jsonw *w)
{
    char *b = w->buf;
    jsonw_init(w);
    return b ? b : calloc(1, 1);
}

void jsonw_print_free(char *json)
{
    if (json) {
        fputs(json, stdout);
        fputc('\n', stdout);
    }
    free(json);
}

static void put(jsonw *w, const char *s, size_t n)
{
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n + 1) cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) abort();
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}

static void puts_(jsonw *w, const char *s) { put(w, s, strlen(s)); }

/* Every value (and key) starts here: a comma when it follows a sibling. */
static void value_start(jsonw *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->depth > 0) {
        if (w->need_comma[w->depth - 1]) put(w, ",", 1);
        w->need_comma[w->depth - 1] = 1;
    }
}

static void open_(jsonw *w, const char *c)
{
    value_start(w);
    puts_(w, c);
    if (w->depth < JSONW_DEPTH) w->need_comma[w->depth] = 0;
    w->depth++;
}

static void close_(jsonw *w, const char *c)
{
    w->depth--;
    puts_(w, c);
}

void jsonw_obj(jsonw *w) { open_(w, "{"); }
void jsonw_obj_end(jsonw *w) { close_(w, "}"); }
void jsonw_arr(jsonw *w) { open_(w, "["); }
void jsonw_arr_end(jsonw *w) { close_(w, "]"); }

static void quoted(jsonw *w, const char *s)
{
    put(w, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': puts_(w, "\\\""); break;
        case '\\': puts_(w, "\\\\"); break;
        case '\n': puts_(w, "\\n"); break;
        case '\r': puts_(w, "\\r"); break;
        case '\t': puts_(w, "\\t"); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                puts_(w, esc);
            } else {
                put(w, (const char *)p, 1);
            }
        }
    }
    put(w, "\"", 1);
}

void jsonw_key(jsonw *w, const char *k)
{
    value_start(w);
    quoted(w, k);
    put(w, ":", 1);
    w->after_key = 1;
}

void jsonw_str(jsonw *w, const char *s) { value_start(w); quoted(w, s); }

void jsonw_int(jsonw *w, long long v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    value_start(w);
    puts_(w, b);
}

void jsonw_uint(jsonw *w, unsigned long long v)
{
    char b[32];
    snprintf(b, sizeof b, "%llu", v);
    value_start(w);
    puts_(w, b);
}

void jsonw_num(jsonw *w, double v)
{
    char b[40];
    if (!isfinite(v)) snprintf(b, sizeof b, "null");
    else if (snprintf(b, sizeof b, "%.15g", v), strtod(b, NULL) != v)
        snprintf(b, sizeof b, "%.17g", v); /* the shortest text that reads back as the same double */
    value_start(w);
    puts_(w, b);
}

void jsonw_bool(jsonw *w, int v) { value_start(w); puts_(w, v ? "true" : "false"); }
void jsonw_null(jsonw *w) { value_start(w); puts_(w, "null"); }

void jsonw_kstr(jsonw *w, const char *k, const char *s) { jsonw_key(w, k); jsonw_str(w, s); }
void jsonw_kint(jsonw *w, const char *k, long long v) { jsonw_key(w, k); jsonw_int(w, v); }
void jsonw_knum(jsonw *w, const char *k, double v) { jsonw_key(w, k); jsonw_num(w, v); }
void jsonw_kbool(jsonw *w, const char *k, int v) { jsonw_key(w, k); jsonw_bool(w, v); }
