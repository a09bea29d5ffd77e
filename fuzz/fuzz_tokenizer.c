/* Fuzzes the SentencePiece tokenizer: its reader of tokenizer.model (a
 * protobuf file) and its encoder and decoder on what it accepts.
 *
 * Input: byte 0 picks the type (even: GPTSentencePieceTokenizer, odd:
 * Llama2Tokenizer), byte 1 the length L of the text at the end; the bytes
 * between are the model file. Invariants: nothing crashes or overflows (ASan,
 * UBSan); a refused model has a message naming the file; an accepted one
 * encodes the text into ids of its vocab, and those ids decode. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static int fd = -1;
    static char path[64];
    if (n < 2) return 0;
    if (fd < 0) {
        if ((fd = memfd_create("tokenizer.model", 0)) < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    size_t L = d[1] < n - 2 ? d[1] : n - 2, mlen = n - 2 - L;
    if (ftruncate(fd, 0) || (mlen && pwrite(fd, d + 2, mlen, 0) != (ssize_t)mlen)) abort();
    char err[1200] = "";
    tokenizer *t = tok_open(d[0] & 1 ? TOK_LLAMA2 : TOK_GPTSPM, NULL, NULL, path, err, sizeof err);
    if (!t) {
        if (!strstr(err, path)) abort();
        return 0;
    }
    tok_buf b = { 0 };
    if (tok_encode(t, (const char *)d + n - L, L, &b) < 0) abort();
    for (size_t i = 0; i < b.n; i++)
        if (b.ids[i] < 0 || b.ids[i] >= tok_vocab_size(t)) abort();
    size_t len;
    char *back = tok_decode(t, b.ids, b.n, &len, err, sizeof err);
    if (!back) abort();
    free(back);
    free(b.ids);
    tok_free(t);
    return 0;
}
