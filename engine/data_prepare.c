/* `atoll data prepare`: byte-level tokenisation of text files into a Megatron
 * indexed dataset. Each input file is one document: its bytes are the tokens
 * (vocab 256) and the end-of-document token (0) closes it. Nothing is written
 * unless every input can be read; a failed run removes its partial output. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int data_prepare_main(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f, "usage: atoll data prepare --input FILE... --output-prefix PREFIX\n"
               "  Tokenises each FILE as bytes (vocab 256, token 0 ends a document) into\n"
               "  PREFIX.bin and PREFIX.idx (Megatron's indexed dataset, uint16 tokens).\n");
}

static uint16_t *read_doc(const char *path, size_t *n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "--input %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    uint16_t *tok = malloc(cap * sizeof *tok);
    int c;
    while (tok && (c = fgetc(f)) != EOF) {
        if (len + 1 >= cap) {
            uint16_t *t = realloc(tok, (cap *= 2) * sizeof *tok);
            if (!t) { free(tok); tok = NULL; break; }
            tok = t;
        }
        tok[len++] = (uint16_t)c;
    }
    int bad = ferror(f);
    fclose(f);
    if (!tok || bad) {
        snprintf(err, errlen, "--input %s: %s", path, tok ? "read error" : "out of memory");
        free(tok);
        return NULL;
    }
    tok[len++] = ENG_EOD_TOKEN;
    *n = len;
    return tok;
}

int data_prepare_main(int argc, char **argv)
{
    const char *prefix = NULL;
    int json = 0;
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    int ninputs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            free(inputs);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--output-prefix") && i + 1 < argc) {
            prefix = argv[++i];
        } else if (!strcmp(argv[i], "--input")) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) inputs[ninputs++] = argv[++i];
        } else {
            fprintf(stderr, "atoll data prepare: unknown or incomplete argument '%s'\n", argv[i]);
            usage(stderr);
            free(inputs);
            return 2;
        }
    }
    if (!prefix || !ninputs) {
        fprintf(stderr, "atoll data prepare: needs --input FILE... and --output-prefix PREFIX\n");
        free(inputs);
        return 2;
    }
    char err[1200];
    /* Read every input before creating any output. */
    uint16_t **docs = calloc((size_t)ninputs, sizeof *docs);
    size_t *lens = calloc((size_t)ninputs, sizeof *lens);
    int rc = 1;
    for (int i = 0; i < ninputs; i++)
        if (!(docs[i] = read_doc(inputs[i], &lens[i], err, sizeof err))) goto out;
    idx_writer w;
    if (idx_writer_open(&w, prefix, err, sizeof err)) goto out;
    for (int i = 0; i < ninputs; i++)
        if (idx_writer_add(&w, docs[i], lens[i], err, sizeof err)) {
            idx_writer_abort(&w);
            goto out;
        }
    unsigned long long total = w.tokens;
    if (idx_writer_finish(&w, err, sizeof err)) goto out;
    if (json)
        printf("{\"bin\":\"%s.bin\",\"idx\":\"%s.idx\",\"documents\":%d,\"tokens\":%llu}\n", prefix,
               prefix, ninputs, total);
    else
        printf("wrote %s.bin and %s.idx: %d documents, %llu tokens\n", prefix, prefix, ninputs, total);
    rc = 0;
out:
    if (rc) fprintf(stderr, "atoll data prepare: %s\n", err);
    for (int i = 0; i < ninputs; i++) free(docs[i]);
    free(docs);
    free(lens);
    free(inputs);
    return rc;
}
