/* engine_tok_tool: the tokenizer from the command line, for the tokenizer
 * tests and bench/tokenizer.sh.
 *   engine_tok_tool VOCAB MERGES encode FILE...  one line of ids per file
 *   engine_tok_tool VOCAB MERGES decode          ids on stdin -> bytes on stdout
 *   engine_tok_tool VOCAB MERGES split FILE      the pre-tokenizer's pieces, one per line (JSON strings)
 *   engine_tok_tool VOCAB MERGES time FILE       encode FILE paragraph by paragraph (split after
 *                                                each blank line), print MB/s on stderr
 *   engine_tok_tool VOCAB MERGES timelines FILE  the same line by line, each without its newline
 *                                                (as sentencepiece's spm_encode reads a file)
 *   engine_tok_tool VOCAB MERGES roundtrip FILE...  per file "1" when decode(encode(x)) == x, else "0"
 * "hf MODEL" in place of "VOCAB MERGES" takes a HuggingFaceTokenizer (MODEL: its tokenizer.json or
 * directory); its split prints LLaMA-3's pieces. "TYPE MODEL" takes the --tokenizer-type TYPE that
 * reads --tokenizer-model MODEL (Llama2Tokenizer, GPTSentencePieceTokenizer: a tokenizer.model). */
#include "errf.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int die(const char *msg)
{
    fprintf(stderr, "engine_tok_tool: %s\n", msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) return die("usage: VOCAB MERGES encode|decode|split|time [FILE...]");
    char err[1200];
    /* "hf MODEL" in place of "VOCAB MERGES": a HuggingFaceTokenizer's tokenizer.json (or its directory) */
    tok_type type = TOK_GPT2BPE;
    if (!strcmp(argv[1], "hf")) type = TOK_HF;
    else if (tok_type_parse(argv[1], &type, err, sizeof err) || type == TOK_BYTE) type = TOK_GPT2BPE;
    tokenizer *t = type == TOK_GPT2BPE ? tok_open(type, argv[1], argv[2], NULL, err, sizeof err)
                                       : tok_open(type, NULL, NULL, argv[2], err, sizeof err);
    if (!t) return die(err);
    const char *cmd = argv[3];
    int rc = 0;
    int timed = !strcmp(cmd, "time") || !strcmp(cmd, "timelines"), lines = !strcmp(cmd, "timelines");
    if (!strcmp(cmd, "encode") || timed) {
        for (int i = 4; i < argc && !rc; i++) {
            size_t n;
            char *text = atoll_read_file(argv[i], (size_t)1 << 34, &n);
            if (!text) { rc = die(argv[i]); break; }
            tok_buf b = { 0 };
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            long bad = 0;
            if (timed) {
                for (size_t at = 0, e; at < n && bad >= 0; at = e) {
                    char *nn = lines ? memchr(text + at, '\n', n - at) : memmem(text + at, n - at, "\n\n", 2);
                    e = nn ? (size_t)(nn - text) + (lines ? 1 : 2) : n;
                    bad = tok_encode(t, text + at, e - at - (lines && nn ? 1 : 0), &b);
                }
            } else {
                bad = tok_encode(t, text, n, &b);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (bad < 0) rc = die("out of memory");
            double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            if (timed) {
                fprintf(stderr, "%zu bytes, %zu tokens in %.3f s: %.2f MB/s\n", n, b.n, s, (double)n / 1e6 / s);
            } else {
                for (size_t k = 0; k < b.n; k++) printf(k ? " %d" : "%d", b.ids[k]);
                printf("\n");
            }
            free(b.ids);
            free(text);
        }
    } else if (!strcmp(cmd, "roundtrip")) {
        for (int i = 4; i < argc && !rc; i++) {
            size_t n, m;
            char *text = atoll_read_file(argv[i], (size_t)1 << 34, &n);
            tok_buf b = { 0 };
            if (!text || tok_encode(t, text, n, &b) < 0) { rc = die(argv[i]); break; }
            char *back = tok_decode(t, b.ids, b.n, &m, err, sizeof err);
            printf("%d\n", back && m == n && !memcmp(back, text, n));
            free(back);
            free(b.ids);
            free(text);
        }
    } else if (!strcmp(cmd, "decode")) {
        size_t cap = 1024, n = 0;
        int32_t *ids = malloc(cap * sizeof *ids);
        int v;
        while (ids && scanf("%d", &v) == 1) {
            if (n == cap) ids = realloc(ids, (cap *= 2) * sizeof *ids);
            if (ids) ids[n++] = v;
        }
        size_t len;
        char *text = ids ? tok_decode(t, ids, n, &len, err, sizeof err) : NULL;
        if (!text) rc = die(ids ? err : "out of memory");
        else fwrite(text, 1, len, stdout);
        free(text);
        free(ids);
    } else if (!strcmp(cmd, "split") && argc == 5) {
        size_t n;
        char *text = atoll_read_file(argv[4], (size_t)1 << 34, &n);
        if (!text) rc = die(argv[4]);
        for (size_t i = 0; text && i < n;) {
            size_t e = tok_split(t, text, n, i);
            putchar('"');
            for (size_t k = i; k < e; k++) {
                unsigned char c = (unsigned char)text[k];
                if (c == '"' || c == '\\') printf("\\%c", c);
                else if (c < 0x20) printf("\\u%04x", c);
                else putchar(c);
            }
            printf("\"\n");
            i = e;
        }
        free(text);
    } else {
        rc = die("unknown command");
    }
    tok_free(t);
    return rc;
}
