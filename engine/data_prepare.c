/* `atoll data prepare`: text into a Megatron indexed dataset, as Megatron's
 * tools/preprocess_data.py does at document level.
 *
 * Input: plain text files (each file one document) or JSON lines (a file
 * named *.json / *.jsonl, or any file with --json-keys: one JSON object per
 * line, the document's text under the key). Tokenizer: byte-level (vocab 256,
 * token 0 ends every document), GPT-2's BPE (--tokenizer-type
 * GPT2BPETokenizer --vocab-file --merge-file), a Hugging Face tokenizer.json
 * of LLaMA-3's, Qwen2's or LLaMA-2's kind (--tokenizer-type HuggingFaceTokenizer
 * --tokenizer-model) or a SentencePiece tokenizer.model of LLaMA-2's kind
 * (--tokenizer-type Llama2Tokenizer or GPTSentencePieceTokenizer
 * --tokenizer-model);
 * for the BPEs the end-of-document token only with --append-eod, as in Megatron. Documents are tokenised and written as
 * they are read; the dataset appears under its name only when every input was
 * read and written, so a failed run leaves nothing new behind. */
#include "data.h"
#include "errf.h"
#include "json_read.h"
#include "tokenizer.h"
#include "train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: atoll data prepare --input FILE... --output-prefix PREFIX\n"
            "           [--tokenizer-type ByteLevel|GPT2BPETokenizer --vocab-file F --merge-file F]\n"
            "           [--tokenizer-type HuggingFaceTokenizer|Llama2Tokenizer|GPTSentencePieceTokenizer\n"
            "            --tokenizer-model F]\n"
            "           [--append-eod] [--json-keys KEY] [--workers N]\n"
            "  Writes PREFIX.bin and PREFIX.idx (Megatron's indexed dataset; uint16 tokens,\n"
            "  int32 for vocabs of 65500 or more). A *.json/*.jsonl input (or any input with\n"
            "  --json-keys) is JSON lines, one document per line under KEY (default text);\n"
            "  any other input is one document per file.\n"
            "  ByteLevel (default): a token per byte, vocab 256, token 0 ends each document.\n"
            "  GPT2BPETokenizer: GPT-2's BPE from encoder.json/vocab.json and vocab.bpe/merges.txt;\n"
            "  --append-eod ends each document with <|endoftext|>.\n"
            "  HuggingFaceTokenizer: a tokenizer.json of LLaMA-3's, Qwen2's or LLaMA-2's kind (the file, or its directory\n"
            "  with tokenizer_config.json), its template's tokens (<|begin_of_text|>) added to each\n"
            "  document; --append-eod ends each with the eos_token.\n"
            "  Llama2Tokenizer, GPTSentencePieceTokenizer: a SentencePiece tokenizer.model of LLaMA-2's\n"
            "  kind (BPE); Llama2Tokenizer starts each document with <s>; --append-eod ends each with\n"
            "  </s> (the model's eos). Invalid UTF-8 is replaced\n"
            "  by U+FFFD (counted in the summary). Megatron's --workers, --partitions,\n"
            "  --chunk-size, --log-interval, --keep-newlines, --keep-sequential-samples and\n"
            "  --dataset-impl mmap are accepted for its command lines; atoll tokenises on one\n"
            "  thread into one file pair.\n");
}

typedef struct prep {
    tokenizer *tok;
    idx_writer w;
    int append_eod;
    const char *json_key;
    tok_buf buf;
    long replaced;
    char first_replaced[1100];
    unsigned long long docs, bytes;
} prep;

static int add_doc(prep *p, const char *text, size_t n, const char *where, char *err, size_t errlen)
{
    p->buf.n = 0;
    long bad = tok_encode(p->tok, text, n, &p->buf);
    if (bad < 0) { atoll_errf(err, errlen, "%s: out of memory", where); return -1; }
    if (bad && !p->replaced) snprintf(p->first_replaced, sizeof p->first_replaced, "%s", where);
    p->replaced += bad;
    p->bytes += n;
    int eod = tok_kind(p->tok) == TOK_BYTE || p->append_eod;
    if (eod && (p->buf.n == p->buf.cap || !p->buf.ids)) {
        int32_t *ids = realloc(p->buf.ids, (p->buf.cap + 1) * sizeof *ids);
        if (!ids) { atoll_errf(err, errlen, "%s: out of memory", where); return -1; }
        p->buf.ids = ids;
        p->buf.cap++;
    }
    if (eod) p->buf.ids[p->buf.n++] = tok_eod(p->tok);
    p->docs++;
    return idx_writer_add(&p->w, p->buf.ids, p->buf.n, err, errlen);
}

static int is_json_name(const char *path)
{
    size_t n = strlen(path);
    return (n > 5 && !strcmp(path + n - 5, ".json")) || (n > 6 && !strcmp(path + n - 6, ".jsonl"));
}

static int add_json_lines(prep *p, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) { atoll_errf(err, errlen, "--input %s: %s", path, strerror(errno)); return -1; }
    char *line = NULL, where[1100];
    size_t cap = 0;
    ssize_t len;
    long long lineno = 0;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        size_t i = 0;
        while (i < (size_t)len && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i == (size_t)len) continue; /* blank line */
        char jerr[200];
        jsonr *doc = jsonr_parse(line, (size_t)len, jerr, sizeof jerr);
        const jsonr *v = jsonr_get(doc, p->json_key);
        snprintf(where, sizeof where, "%s:%lld", path, lineno);
        if (!doc) {
            atoll_errf(err, errlen, "--input %s: %s (JSON lines: one object per line)", where, jerr);
            rc = -1;
        } else if (!v || v->type != JSONR_STR) {
            atoll_errf(err, errlen, "--input %s: no string under the key \"%s\" (--json-keys names the key of "
                       "the document's text)", where, p->json_key);
            rc = -1;
        } else {
            rc = add_doc(p, v->str, v->len, where, err, errlen);
        }
        jsonr_free(doc);
    }
    if (!rc && ferror(f)) {
        atoll_errf(err, errlen, "--input %s: read error", path);
        rc = -1;
    }
    free(line);
    fclose(f);
    return rc;
}

static int add_text_file(prep *p, const char *path, char *err, size_t errlen)
{
    size_t n;
    char *text = atoll_read_file(path, (size_t)1 << 40, &n);
    if (!text) { atoll_errf(err, errlen, "--input %s: %s", path, strerror(errno)); return -1; }
    int rc = add_doc(p, text, n, path, err, errlen);
    free(text);
    return rc;
}

int data_prepare_main(int argc, char **argv)
{
    const char *prefix = NULL, *tok_name = "ByteLevel", *vocab = NULL, *merges = NULL, *model = NULL, *key = NULL;
    int json = 0, append_eod = 0;
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    int ninputs = 0;
    char err[1400] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc && strncmp(argv[i + 1], "--", 2);
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(inputs);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--append-eod")) {
            append_eod = 1;
        } else if (!strcmp(a, "--input")) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) inputs[ninputs++] = argv[++i];
        } else if (has_value && !strcmp(a, "--output-prefix")) {
            prefix = argv[++i];
        } else if (has_value && !strcmp(a, "--tokenizer-type")) {
            tok_name = argv[++i];
        } else if (has_value && !strcmp(a, "--vocab-file")) {
            vocab = argv[++i];
        } else if (has_value && !strcmp(a, "--merge-file")) {
            merges = argv[++i];
        } else if (has_value && !strcmp(a, "--tokenizer-model")) {
            model = argv[++i];
        } else if (has_value && !strcmp(a, "--json-keys")) {
            key = argv[++i];
            if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                fprintf(stderr, "atoll data prepare: --json-keys takes one key (got '%s' and '%s'); run once per key\n",
                        key, argv[i + 1]);
                free(inputs);
                return 2;
            }
        } else if (has_value && (!strcmp(a, "--workers") || !strcmp(a, "--partitions") || !strcmp(a, "--log-interval") ||
                                 !strcmp(a, "--chunk-size"))) {
            i++; /* Megatron's preprocess_data.py: how it spreads the work, not what it writes */
        } else if (!strcmp(a, "--keep-newlines") || !strcmp(a, "--keep-sequential-samples")) {
            /* newlines are kept, documents stay in input order */
        } else if (has_value && !strcmp(a, "--dataset-impl") && !strcmp(argv[i + 1], "mmap")) {
            i++; /* the one format written (and Megatron's only one now) */
        } else if (!strcmp(a, "--dataset-impl") || !strcmp(a, "--split-sentences")) {
            fprintf(stderr, "atoll data prepare: %s: %s\n", a, !strcmp(a, "--dataset-impl")
                    ? "only mmap, Megatron's indexed dataset, is written"
                    : "documents are written whole; splitting them into sentences (for BERT) is not implemented");
            free(inputs);
            return 2;
        } else {
            fprintf(stderr, "atoll data prepare: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            free(inputs);
            return 2;
        }
    }
    tok_type type;
    if (!prefix || !ninputs) {
        fprintf(stderr, "atoll data prepare: needs --input FILE... and --output-prefix PREFIX\n");
        free(inputs);
        return 2;
    }
    if (tok_type_parse(tok_name, &type, err, sizeof err)) {
        fprintf(stderr, "atoll data prepare: %s\n", err);
        free(inputs);
        return 2;
    }
    if (tok_check_files(type, vocab, merges, model, err, sizeof err)) {
        fprintf(stderr, "atoll data prepare: %s\n", err);
        free(inputs);
        return 2;
    }
    prep p;
    memset(&p, 0, sizeof p);
    p.append_eod = append_eod;
    p.json_key = key ? key : "text";
    int rc = 1, opened = 0;
    double t0 = atoll_mono_s();
    if (!(p.tok = tok_open(type, vocab, merges, model, err, sizeof err))) goto out;
    if (idx_writer_open(&p.w, prefix, idx_dtype_for_vocab(tok_vocab_size(p.tok)), err, sizeof err)) goto out;
    opened = 1;
    for (int i = 0; i < ninputs; i++)
        if (key || is_json_name(inputs[i]) ? add_json_lines(&p, inputs[i], err, sizeof err)
                                           : add_text_file(&p, inputs[i], err, sizeof err))
            goto out;
    unsigned long long total = p.w.tokens;
    opened = 0;
    if (idx_writer_finish(&p.w, err, sizeof err)) goto out;
    double dt = atoll_mono_s() - t0;
    if (p.replaced)
        fprintf(stderr, "atoll data prepare: note: %ld invalid UTF-8 sequences were replaced by U+FFFD (the first in %s)\n",
                p.replaced, p.first_replaced);
    if (json)
        printf("{\"bin\":\"%s.bin\",\"idx\":\"%s.idx\",\"tokenizer\":\"%s\",\"documents\":%llu,\"tokens\":%llu,"
               "\"bytes\":%llu,\"seconds\":%.3f,\"invalid_utf8\":%ld}\n", prefix, prefix, tok_type_name(type), p.docs,
               total, p.bytes, dt, p.replaced);
    else
        printf("wrote %s.bin and %s.idx: %llu documents, %llu tokens (%s) from %.2f MB in %.2f s\n", prefix, prefix,
               p.docs, total, tok_type_name(type), (double)p.bytes / 1e6, dt);
    rc = 0;
out:
    if (opened) idx_writer_abort(&p.w);
    if (rc) fprintf(stderr, "atoll data prepare: %s\n", err);
    tok_free(p.tok);
    free(p.buf.ids);
    free(inputs);
    return rc;
}
