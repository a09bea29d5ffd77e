/* Fuzzes the tokenizer's file readers and what they accept: a SentencePiece
 * tokenizer.model (protobuf) and a Hugging Face tokenizer.json (JSON), then
 * the encoder and decoder on text.
 *
 * Input: byte 0 picks the reader (mod 4: 0 GPTSentencePieceTokenizer, 1
 * Llama2Tokenizer, 2 and 3 HuggingFaceTokenizer), byte 1 the length L of the
 * text at the end; the bytes between are the file (for HuggingFaceTokenizer,
 * a directory's tokenizer.json beside a tokenizer_config.json naming "</s>"
 * the eos_token). Invariants: nothing crashes or overflows (ASan, UBSan); a
 * refused file has a message naming it; an accepted one encodes the text into
 * ids of its vocab, and those ids decode. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tokenizer.h"

static int write_all(const char *path, const uint8_t *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = n && fwrite(d, 1, n, f) != n;
    return fclose(f) || bad ? -1 : 0;
}

static char dir[64] = "/tmp/fuzz_tokenizer.XXXXXX", json[96], config[96];

static void remove_dir(void)
{
    unlink(json);
    unlink(config);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static int fd = -1;
    static char model[64];
    if (n < 2) return 0;
    if (fd < 0) {
        if ((fd = memfd_create("tokenizer.model", 0)) < 0 || !mkdtemp(dir)) abort();
        atexit(remove_dir);
        snprintf(model, sizeof model, "/proc/self/fd/%d", fd);
        snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
        snprintf(json, sizeof json, "%s/tokenizer.json", dir);
        if (write_all(config, (const uint8_t *)"{\"eos_token\": \"</s>\"}", 21)) abort();
    }
    size_t L = d[1] < n - 2 ? d[1] : n - 2, flen = n - 2 - L;
    tok_type type = (d[0] & 3) == 0 ? TOK_GPTSPM : (d[0] & 3) == 1 ? TOK_LLAMA2 : TOK_HF;
    const char *path = type == TOK_HF ? dir : model;
    if (type == TOK_HF ? write_all(json, d + 2, flen)
                       : ftruncate(fd, 0) || (flen && pwrite(fd, d + 2, flen, 0) != (ssize_t)flen))
        abort();
    char err[1200] = "";
    tokenizer *t = tok_open(type, NULL, NULL, path, err, sizeof err);
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
