#include "json_read.h"
#include "errf.h"
#include "utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSONR_MAX_DEPTH 32

typedef struct parser {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed;
} parser;

static void fail(parser *p, const char *what)
{
    if (p->failed) return;
    p->failed = 1;
    if (p->err && p->errlen) snprintf(p->err, p->errlen, "JSON error at byte %zu: %s", p->pos, what);
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) && p->s[p->pos]) p->pos++;
}

static jsonr *node(jsonr_type t)
{
    jsonr *n = calloc(1, sizeof *n);
    if (n) n->type = t;
    return n;
}

static int hex4(const char *s, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char h = s[i];
        unsigned d = h >= '0' && h <= '9' ? (unsigned)(h - '0')
                   : (h | 32) >= 'a' && (h | 32) <= 'f' ? (unsigned)((h | 32) - 'a' + 10) : 16u;
        if (d > 15) return -1;
        *v = *v * 16 + d;
    }
    return 0;
}

/* \uXXXX escapes become UTF-8 (a surrogate pair one code point, a lone
 * surrogate U+FFFD); an escape is never shorter than what it decodes to, so
 * the raw length bounds the copy. */
static char *parse_string(parser *p, size_t *outlen)
{
    if (p->pos >= p->len || p->s[p->pos] != '"') { fail(p, "expected a string"); return NULL; }
    p->pos++;
    size_t start = p->pos, end = start, n = 0;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) { p->pos = p->len; fail(p, "unterminated string"); return NULL; }
    char *out = malloc(end - start + 1);
    if (!out) { fail(p, "out of memory"); return NULL; }
    while (p->pos < end) {
        char c = p->s[p->pos++];
        if ((unsigned char)c < 0x20) { free(out); fail(p, "control character in string"); return NULL; }
        if (c != '\\') { out[n++] = c; continue; }
        char e = p->s[p->pos++];
        switch (e) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case '"': case '\\': case '/': c = e; break;
        case 'u': {
            unsigned v, lo;
            if (p->pos + 4 > end || hex4(p->s + p->pos, &v)) { free(out); fail(p, "bad \\u escape"); return NULL; }
            p->pos += 4;
            if (v >= 0xD800 && v < 0xDC00 && p->pos + 6 <= end && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u' &&
                !hex4(p->s + p->pos + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                p->pos += 6;
                v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            } else if (v >= 0xD800 && v < 0xE000) {
                v = 0xFFFD;
            }
            n += utf8_encode(v, out + n);
            continue;
        }
        default: free(out); fail(p, "bad escape in string"); return NULL;
        }
        out[n++] = c;
    }
    p->pos++;
    out[n] = 0;
    if (outlen) *outlen = n;
    return out;
}

static jsonr *parse_value(parser *p, int depth);

static jsonr *parse_container(parser *p, int depth, int obj)
{
    jsonr *n = node(obj ? JSONR_OBJ : JSONR_ARR), **tail = n ? &n->child : NULL;
    if (!n) { fail(p, "out of memory"); return NULL; }
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == (obj ? '}' : ']')) { p->pos++; return n; }
    for (;;) {
        char *key = NULL;
        skip_ws(p);
        if (obj) {
            key = parse_string(p, NULL);
            if (!key) break;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') { free(key); fail(p, "expected ':'"); break; }
            p->pos++;
        }
        jsonr *v = parse_value(p, depth + 1);
        if (!v) { free(key); break; }
        v->key = key;
        *tail = v;
        tail = &v->next;
        n->count++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->s[p->pos] == (obj ? '}' : ']')) { p->pos++; return n; }
        fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    jsonr_free(n);
    return NULL;
}

static jsonr *parse_value(parser *p, int depth)
{
    if (depth > JSONR_MAX_DEPTH) { fail(p, "nested too deeply"); return NULL; }
    skip_ws(p);
    if (p->pos >= p->len) { fail(p, "unexpected end"); return NULL; }
    char c = p->s[p->pos];
    if (c == '{' || c == '[') return parse_container(p, depth, c == '{');
    if (c == '"') {
        size_t sl = 0;
        char *s = parse_string(p, &sl);
        jsonr *n = s ? node(JSONR_STR) : NULL;
        if (n) { n->str = s; n->len = sl; }
        else free(s);
        return n;
    }
    static const struct { const char *word; jsonr_type t; double v; } words[] = {
        { "true", JSONR_BOOL, 1 }, { "false", JSONR_BOOL, 0 }, { "null", JSONR_NULL, 0 } };
    for (int i = 0; i < 3; i++) {
        size_t wl = strlen(words[i].word);
        if (p->len - p->pos >= wl && !memcmp(p->s + p->pos, words[i].word, wl)) {
            p->pos += wl;
            jsonr *n = node(words[i].t);
            if (n) n->num = words[i].v;
            return n;
        }
    }
    char buf[64];
    size_t n = 0;
    while (p->pos + n < p->len && n < sizeof buf - 1 && strchr("+-.eE0123456789", p->s[p->pos + n]) &&
           p->s[p->pos + n])
        n++;
    if (!n) { fail(p, "unexpected character"); return NULL; }
    memcpy(buf, p->s + p->pos, n);
    buf[n] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (*end) { fail(p, "bad number"); return NULL; }
    p->pos += n;
    jsonr *nd = node(JSONR_NUM);
    if (nd) nd->num = v;
    return nd;
}

jsonr *jsonr_parse(const char *text, size_t len, char *err, size_t errlen)
{
    parser p = { text, len, 0, err, errlen, 0 };
    jsonr *root = parse_value(&p, 0);
    if (root) {
        skip_ws(&p);
        if (p.pos != p.len) {
            fail(&p, "trailing characters");
            jsonr_free(root);
            return NULL;
        }
    } else if (!p.failed) {
        fail(&p, "out of memory");
    }
    return root;
}

void jsonr_free(jsonr *n)
{
    while (n) {
        jsonr *next = n->next;
        jsonr_free(n->child);
        free(n->str);
        free(n->key);
        free(n);
        n = next;
    }
}

const jsonr *jsonr_get(const jsonr *o, const char *key)
{
    if (!o || o->type != JSONR_OBJ) return NULL;
    for (const jsonr *c = o->child; c; c = c->next)
        if (c->key && !strcmp(c->key, key)) return c;
    return NULL;
}

const jsonr *jsonr_at(const jsonr *a, int i)
{
    if (!a || a->type != JSONR_ARR) return NULL;
    const jsonr *c = a->child;
    while (c && i-- > 0) c = c->next;
    return c;
}

jsonr *jsonr_read_file(const char *path, size_t max, char *err, size_t errlen)
{
    size_t len;
    char *text = atoll_read_file(path, max, &len);
    if (!text) {
        atoll_errf(err, errlen, "%s", strerror(errno));
        return NULL;
    }
    jsonr *root = jsonr_parse(text, len, err, errlen);
    free(text);
    return root;
}
