/* `atoll generate`: text from a checkpoint.
 *
 * The newest committed step under --load gives the model (its manifest
 * records the settings and the tokenizer the data was prepared with) and its
 * weights (model.safetensors); the prompt is encoded with that tokenizer and
 * the model continues it one token at a time: greedy at --temperature 0,
 * otherwise sampling from softmax(logits / temperature) over the --top-k most
 * likely tokens (all with 0), with draws from the counter-based RNG keyed by
 * --seed, so a seed gives the same text on every run. Generation stops after
 * --max-tokens or at the end-of-document token.
 *
 * The prompt runs as one forward pass over its tokens, rounded up to a
 * multiple of GEN_ROUND positions (eng_set_seq_length; fewer distinct lengths
 * for backends that plan per shape), which leaves every layer's keys and
 * values in its activations; each new token then costs one position
 * (eng_decode) against that key/value cache. Once the text outgrows
 * --seq-length the context is its last --seq-length tokens, their positions
 * shift every step, and each step reruns the forward pass over them (so does
 * every step where eng_can_decode says no: a backend without attention_decode). */
#include "checkpoint.h"
#include "errf.h"
#include "model.h"
#include "rng.h"
#include "tokenizer.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GEN_ROUND = 16 };

static void usage(FILE *f)
{
    fprintf(f, "usage: atoll generate --load DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K]\n"
               "           [--seed S] [--device cpu|cuda] [--vocab-file F --merge-file F | --tokenizer-model F]\n"
               "           [--tokenizer-type T] [--json]\n"
               "  Continues TEXT with the model of DIR's newest committed checkpoint, encoded and decoded\n"
               "  with the tokenizer its manifest records (--vocab-file/--merge-file/--tokenizer-model point\n"
               "  elsewhere when those files moved; --tokenizer-type with its files names the tokenizer that\n"
               "  made a NullTokenizer run's ids). --temperature 0 is greedy; --top-k 0 samples from the\n"
               "  whole vocab. --json also gives the time of the prompt's step and the mean of the later ones\n"
               "  (decode steps against the key/value cache, and whole passes once the text outgrows\n"
               "  --seq-length).\n"
               "  Defaults: --max-tokens 64 --temperature 1 --top-k 0 --seed 1234 --device cpu.\n");
}

typedef struct gen_opts {
    const char *load, *prompt, *device, *vocab, *merges, *model, *type;
    long max_tokens, top_k;
    double temperature;
    unsigned long long seed;
    int json;
} gen_opts;

static int parse_num(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "atoll generate: %s '%s': expected a number from %g to %g\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_opts(gen_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->max_tokens = 64;
    o->temperature = 1.0;
    o->seed = 1234;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        } else if (!v) {
            fprintf(stderr, "atoll generate: %s needs a value\n", a);
            return -1;
        } else if (!strcmp(a, "--load")) {
            o->load = v;
        } else if (!strcmp(a, "--prompt")) {
            o->prompt = v;
        } else if (!strcmp(a, "--device")) {
            o->device = v;
        } else if (!strcmp(a, "--vocab-file")) {
            o->vocab = v;
        } else if (!strcmp(a, "--merge-file")) {
            o->merges = v;
        } else if (!strcmp(a, "--tokenizer-model")) {
            o->model = v;
        } else if (!strcmp(a, "--tokenizer-type")) {
            o->type = v;
        } else if (!strcmp(a, "--max-tokens")) {
            if (parse_num(a, v, 1, 1e6, &x)) return -1;
            o->max_tokens = (long)x;
        } else if (!strcmp(a, "--top-k")) {
            if (parse_num(a, v, 0, 1e9, &x)) return -1;
            o->top_k = (long)x;
        } else if (!strcmp(a, "--temperature")) {
            if (parse_num(a, v, 0, 1e6, &o->temperature)) return -1;
        } else if (!strcmp(a, "--seed")) {
            if (parse_num(a, v, 0, 1.8e19, &x)) return -1;
            o->seed = (unsigned long long)x;
        } else {
            fprintf(stderr, "atoll generate: unknown flag '%s'\n", a);
            usage(stderr);
            return -1;
        }
        i++;
    }
    if (!o->load || !o->prompt) {
        fprintf(stderr, "atoll generate: needs --load DIR and --prompt TEXT\n");
        return -1;
    }
    return 0;
}

/* The next token from one row of logits over the tokenizer's `n` entries. */
static int32_t pick(const float *logits, int n, const gen_opts *o, uint64_t key, long step, float *scratch)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (o->temperature == 0.0) return best;
    /* the k-th largest logit bounds what may be drawn (ties at the bound stay) */
    float floor_ = -INFINITY;
    if (o->top_k > 0 && o->top_k < n) {
        memcpy(scratch, logits, (size_t)n * sizeof(float));
        for (long k = 0; k < o->top_k; k++) { /* k passes of selection: top_k is small */
            int m = (int)k;
            for (int i = (int)k + 1; i < n; i++)
                if (scratch[i] > scratch[m]) m = i;
            float t = scratch[k];
            scratch[k] = scratch[m];
            scratch[m] = t;
        }
        floor_ = scratch[o->top_k - 1];
    }
    double sum = 0.0, inv = 1.0 / o->temperature;
    for (int i = 0; i < n; i++)
        if (logits[i] >= floor_) sum += exp((logits[i] - logits[best]) * inv);
    double u = rng_uniform(key, (uint64_t)step) * sum, acc = 0.0;
    for (int i = 0; i < n; i++) {
        if (logits[i] < floor_) continue;
        acc += exp((logits[i] - logits[best]) * inv);
        if (acc >= u) return i;
    }
    return best;
}

static void json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

int generate_main(int argc, char **argv)
{
    gen_opts o;
    int prc = parse_opts(&o, argc, argv);
    if (prc) return prc > 0 ? 0 : 2;
    char err[1400] = "";
    long long it;
    atoll_config c;
    cfg_defaults(&c);
    tokenizer *tok = NULL;
    eng_model *m = NULL;
    eng_acts *a = NULL;
    int32_t *ids = NULL, *ctx = NULL;
    float *logits = NULL, *scratch = NULL;
    int rc = 1;
    int latest = ckpt_latest(o.load, CKPT_WEIGHTS, &it, err, sizeof err);
    if (latest == 1) atoll_errf(err, sizeof err, "--load %s: no committed checkpoint there", o.load);
    if (latest || ckpt_read_model(o.load, it, &c, err, sizeof err)) goto out;
    if (o.vocab) snprintf(c.vocab_file, sizeof c.vocab_file, "%s", o.vocab);
    if (o.merges) snprintf(c.merge_file, sizeof c.merge_file, "%s", o.merges);
    if (o.model) snprintf(c.tokenizer_model, sizeof c.tokenizer_model, "%s", o.model);
    if (o.type) snprintf(c.tokenizer_type, sizeof c.tokenizer_type, "%s", o.type);
    tok_type type;
    if (tok_type_parse(c.tokenizer_type[0] ? c.tokenizer_type : "ByteLevel", &type, err, sizeof err)) goto out;
    if (!(tok = tok_open(type, c.vocab_file, c.merge_file, c.tokenizer_model, err, sizeof err))) {
        size_t l = strlen(err);
        snprintf(err + l, sizeof err - l, type == TOK_NULL ? " (the checkpoint's tokenizer; atoll generate takes "
                 "--tokenizer-type with its files)" : " (the checkpoint's tokenizer; --vocab-file and --merge-file, or "
                 "--tokenizer-model, point elsewhere)");
        goto out;
    }
    if (tok_vocab_size(tok) > c.vocab_size) {
        atoll_errf(err, sizeof err, "the tokenizer has %d entries but the model's vocab is %d", tok_vocab_size(tok),
                   c.vocab_size);
        goto out;
    }
    c.micro_batch_size = c.global_batch_size = 1;
    c.tensor_model_parallel_size = c.pipeline_model_parallel_size = 1;
    c.recompute_granularity = RECOMPUTE_NONE; /* the cache is every layer's kept activations */
    const k_ops *k = eng_backend(o.device, err, sizeof err);
    eng_layout lay = eng_layout_single(&c);
    lay.forward_only = 1; /* sampling runs the forward pass alone: no gradients, half the memory of fp32 weights */
    if (!k || !(m = eng_model_create(&c, &lay, k, err, sizeof err)) ||
        ckpt_load(o.load, it, m, NULL, NULL, err, sizeof err))
        goto out;
    eng_params_updated(m);
    eng_set_step(m, c.seed, it, 0);
    m->doc_eod = tok_eod(tok); /* documents split where training split them (--reset-attention-mask) */
    int T = c.seq_length, V = c.vocab_size, n = tok_vocab_size(tok);
    tok_buf b = { 0 };
    size_t plen = strlen(o.prompt);
    if (tok_encode(tok, o.prompt, plen, &b) < 0) { atoll_errf(err, sizeof err, "out of memory"); goto out; }
    if (!b.n) { /* an empty prompt starts a document */
        free(b.ids);
        b.ids = malloc(sizeof(int32_t));
        if (b.ids) b.ids[b.n++] = tok_eod(tok);
    }
    size_t nprompt = b.n, cap = b.n + (size_t)o.max_tokens;
    ids = realloc(b.ids, cap * sizeof(int32_t));
    ctx = calloc((size_t)T, sizeof(int32_t));
    logits = malloc((size_t)V * sizeof(float)); /* the one row sampled from */
    scratch = malloc((size_t)V * sizeof(float));
    a = eng_acts_create(m, 0);
    if (!ids || !ctx || !logits || !scratch || !a) { atoll_errf(err, sizeof err, "out of memory"); goto out; }
    if (!o.json) {
        fwrite(o.prompt, 1, plen, stdout);
        fflush(stdout);
    }
    size_t len = nprompt;
    uint64_t key = rng_key(o.seed, 0x6e6e0000ULL);
    /* the document of every token generated: it starts after the prompt's last eod (generation stops at an eod) */
    size_t doc0 = 0;
    for (size_t i = 0; i < nprompt; i++)
        if (ids[i] == m->doc_eod) doc0 = i + 1;
    size_t cached = 0; /* positions whose keys and values the layers hold (from position 0) */
    int decode = eng_can_decode(m);
    /* --json's timing: the prompt's step, then decode steps and whole passes apart */
    double prompt_s = 0.0, dec_s = 0.0, pass_s = 0.0;
    long ndec = 0, npass = 0;
    for (long step = 0; step < o.max_tokens; step++) {
        size_t from = len > (size_t)T ? len - (size_t)T : 0, nctx = len - from, last; /* the row sampled from */
        double t0 = atoll_mono_s();
        int decoding = decode && !from && cached && cached + 1 == len;
        if (decoding) { /* one position against the cache */
            if (eng_decode(m, a, ids[len - 1], (int)(len - 1), (int)doc0)) {
                atoll_errf(err, sizeof err, "decode step at position %zu failed", len - 1);
                goto out;
            }
            last = 0;
        } else {
            size_t run = (nctx + GEN_ROUND - 1) / GEN_ROUND * GEN_ROUND; /* positions past nctx: eod, read by none */
            if (run > (size_t)T) run = (size_t)T;
            for (size_t i = 0; i < run; i++) ctx[i] = i < nctx ? ids[from + i] : tok_eod(tok);
            if (eng_set_seq_length(m, (int)run) || eng_set_logits_position(m, (int)nctx - 1) ||
                eng_forward(m, a, ctx, NULL, NULL, 0.0f, NULL)) {
                atoll_errf(err, sizeof err, "forward pass over %zu positions failed", run);
                goto out;
            }
            last = nctx - 1;
        }
        cached = from ? 0 : len;
        eng_logits_to_host(m, a, (int)last, 1, logits);
        int32_t next = pick(logits, n, &o, key, step, scratch);
        double dt = atoll_mono_s() - t0;
        if (!step) prompt_s = dt;
        else if (decoding) dec_s += dt, ndec++;
        else pass_s += dt, npass++;
        if (next == tok_eod(tok)) break;
        ids[len++] = next;
        if (!o.json) {
            size_t pl;
            const char *piece = tok_piece(tok, next, &pl);
            fwrite(piece, 1, pl, stdout);
            fflush(stdout);
        }
    }
    if (o.json) {
        /* the continuation as it reads after the prompt: the whole decoded
         * less the prompt's (a SentencePiece decode drops the space of a
         * document's first word, which the continuation's first word keeps) */
        size_t tl, pl;
        char *text = tok_decode(tok, ids, len, &tl, err, sizeof err);
        char *ptext = text ? tok_decode(tok, ids, nprompt, &pl, err, sizeof err) : NULL;
        int decoded = ptext != NULL;
        free(ptext);
        if (!decoded) {
            free(text);
            goto out;
        }
        printf("{\"checkpoint\":\"%s/iter_%07lld\",\"tokenizer\":\"%s\",\"prompt\":", o.load, it, tok_type_name(type));
        json_string(stdout, o.prompt, plen);
        printf(",\"text\":");
        json_string(stdout, text + pl, tl - pl);
        printf(",\"prompt_tokens\":%zu,\"tokens\":[", nprompt);
        for (size_t i = nprompt; i < len; i++) printf(i > nprompt ? ",%d" : "%d", ids[i]);
        printf("],\"timing\":{\"prompt_ms\":%.3f,\"decode_steps\":%ld,\"decode_ms_per_token\":", prompt_s * 1e3, ndec);
        if (ndec) printf("%.3f", dec_s * 1e3 / (double)ndec);
        else printf("null");
        printf(",\"pass_steps\":%ld,\"pass_ms_per_token\":", npass);
        if (npass) printf("%.3f", pass_s * 1e3 / (double)npass);
        else printf("null");
        printf("}}\n");
        free(text);
    } else {
        printf("\n");
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "atoll generate: %s\n", err);
    if (m) eng_acts_free(m, a);
    eng_model_free(m);
    tok_free(tok);
    free(ids);
    free(ctx);
    free(logits);
    free(scratch);
    return rc;
}
