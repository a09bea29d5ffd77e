/* json_read: a small JSON reader for the files the engine reads back (the
 * safetensors header, the checkpoint manifest and train state).
 *
 * jsonr_parse builds a tree of nodes in one allocation owned by the returned
 * root; free it with jsonr_free. Strings are unescaped UTF-8 copies (\uXXXX
 * escapes decoded, surrogate pairs joined, a lone surrogate U+FFFD), NUL
 * terminated, with their length in bytes beside them (a string may hold \u0000).
 * Depth is bounded so a hostile header cannot exhaust the stack. */
#ifndef ATOLL_ENGINE_JSON_READ_H
#define ATOLL_ENGINE_JSON_READ_H

#include <stddef.h>

typedef enum { JSONR_NULL, JSONR_BOOL, JSONR_NUM, JSONR_STR, JSONR_ARR, JSONR_OBJ } jsonr_type;

typedef struct jsonr {
    jsonr_type type;
    double num;           /* NUM, BOOL (0/1) */
    char *str;            /* STR */
    size_t len;           /* STR: bytes in str */
    char *key;            /* member name when inside an object */
    struct jsonr *child;  /* first element / member */
    struct jsonr *next;   /* next sibling */
    int count;            /* number of children */
} jsonr;

/* Parses `len` bytes; NULL on error with a message (byte offset) in err. */
jsonr *jsonr_parse(const char *text, size_t len, char *err, size_t errlen);
void jsonr_free(jsonr *root);
/* The file at `path` (at most `max` bytes) parsed; NULL with why in err: what
 * kept it from being read (strerror) or the parse error. */
jsonr *jsonr_read_file(const char *path, size_t max, char *err, size_t errlen);

/* Member of an object by key; NULL when absent or `o` is not an object. */
const jsonr *jsonr_get(const jsonr *o, const char *key);
/* Element i of an array; NULL when out of range. */
const jsonr *jsonr_at(const jsonr *a, int i);

#endif
