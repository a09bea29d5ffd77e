/* utf8: one code point to and from UTF-8, for the JSON reader, the tokenizer
 * and NFC. Neither validates: callers pass valid UTF-8 or code points (see
 * tok_utf8_sanitize for text that may be invalid). */
#ifndef ATOLL_ENGINE_UTF8_H
#define ATOLL_ENGINE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Writes cp (at most U+10FFFF) as 1 to 4 bytes at out; returns how many. */
size_t utf8_encode(uint32_t cp, char *out);

/* The code point at s (n > 0 bytes left) and its length in *len, by its
 * lead byte; a sequence cut short by the end is U+FFFD over what is left. */
uint32_t utf8_decode(const unsigned char *s, size_t n, size_t *len);

#endif
