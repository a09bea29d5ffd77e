/* `atoll export`: a committed checkpoint step as a Hugging Face model
 * directory (config.json, model.safetensors, the tokenizer's files), for
 * transformers' from_pretrained and the tools built on it (evaluation
 * harnesses, serving).
 *
 * The LLaMA family's checkpoints already hold Hugging Face's tensor names and
 * a config.json (checkpoint.c): their tensors are written as they are. The GPT
 * family becomes GPT2LMHeadModel: names under "transformer.", each linear
 * layer's weight transposed to Conv1D's [in, out], and c_attn's output rows,
 * Megatron's [head][q, k, v][head dim], reordered to GPT-2's [q | k | v], each
 * [head][head dim]. GPT-family variants GPT-2 cannot express (rotary
 * positions, squared ReLU, 1 + w LayerNorms, grouped keys, no biases) are
 * refused by name rather than written as a different model.
 *
 * Nothing is overwritten: the output directory must not hold a config.json or
 * model.safetensors already; each file is written under a temporary name and
 * renamed into place. */
#include "checkpoint.h"
#include "errf.h"
#include "jsonw.h"
#include "model.h"
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int export_main(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f, "usage: atoll export --load DIR --output DIR [--ckpt-step N]\n"
               "  Writes the newest committed checkpoint of DIR (or step N) as a Hugging Face model directory:\n"
               "  config.json, model.safetensors (fp32) and the tokenizer's files when the manifest names them\n"
               "  (GPT-2 BPE: vocab.json and merges.txt; tokenizer.json; tokenizer.model). GPT models become\n"
               "  GPT2LMHeadModel, the LLaMA family LlamaForCausalLM (Qwen2/Qwen3 with their biases or head\n"
               "  norms). The output directory is created if needed and must not hold a model already.\n");
}

typedef struct ex_opts {
    const char *load, *output;
    long long step; /* -1: the newest committed */
} ex_opts;

static int parse_opts(ex_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->step = -1;
    for (int i = 1; i < argc; i += 2) { /* flags and their values */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!v) {
            fprintf(stderr, "atoll export: %s needs a value\n", a);
            return -1;
        } else if (!strcmp(a, "--load")) {
            o->load = v;
        } else if (!strcmp(a, "--output")) {
            o->output = v;
        } else if (!strcmp(a, "--ckpt-step")) {
            char *end;
            long long s = strtoll(v, &end, 10);
            if (end == v || *end || s < 0) {
                fprintf(stderr, "atoll export: --ckpt-step '%s': expected an iteration (0 or more)\n", v);
                return -1;
            }
            o->step = s;
        } else {
            fprintf(stderr, "atoll export: unknown flag '%s'\n", a);
            usage(stderr);
            return -1;
        }
    }
    if (!o->load || !o->output) {
        fprintf(stderr, "atoll export: needs --load DIR and --output DIR\n");
        return -1;
    }
    return 0;
}

/* What of a GPT-family model GPT2LMHeadModel cannot hold, or NULL. */
static const char *gpt2_refusal(const atoll_config *c)
{
    if (cfg_rope(c)) return "rotary positions (GPT-2 learns its positions)";
    if (c->squared_relu) return "--squared-relu (GPT-2's MLP is GELU)";
    if (cfg_kv_groups(c) != c->num_attention_heads) return "grouped keys and values (GPT-2 has one per head)";
    if (c->kv_channels) return "--kv-channels (GPT-2's heads are hidden / heads wide)";
    if (c->disable_bias_linear) return "--disable-bias-linear (GPT-2's linear layers have biases)";
    return NULL;
}

/* GPT2Config for the model; V the (padded) vocabulary the embedding holds. */
static char *gpt2_config(const atoll_config *c, int64_t V)
{
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "architectures");
    jsonw_arr(&w);
    jsonw_str(&w, "GPT2LMHeadModel");
    jsonw_arr_end(&w);
    jsonw_kstr(&w, "model_type", "gpt2");
    jsonw_kint(&w, "vocab_size", V);
    jsonw_kint(&w, "n_positions", cfg_max_pos(c));
    jsonw_kint(&w, "n_ctx", cfg_max_pos(c));
    jsonw_kint(&w, "n_embd", c->hidden_size);
    jsonw_kint(&w, "n_layer", c->num_layers);
    jsonw_kint(&w, "n_head", c->num_attention_heads);
    jsonw_kint(&w, "n_inner", cfg_ffn(c));
    jsonw_kstr(&w, "activation_function", "gelu_new"); /* the tanh form, as the engine's GELU */
    jsonw_knum(&w, "layer_norm_epsilon", cfg_norm_eps(c));
    jsonw_knum(&w, "resid_pdrop", c->hidden_dropout);
    jsonw_knum(&w, "embd_pdrop", c->hidden_dropout);
    jsonw_knum(&w, "attn_pdrop", c->attention_dropout);
    jsonw_kbool(&w, "scale_attn_weights", 1);
    jsonw_kbool(&w, "tie_word_embeddings", !c->untie_embeddings_and_output_weights);
    if (!strcmp(c->tokenizer_type, "GPT2BPETokenizer")) { /* <|endoftext|> */
        jsonw_kint(&w, "bos_token_id", 50256);
        jsonw_kint(&w, "eos_token_id", 50256);
    }
    jsonw_kstr(&w, "torch_dtype", "float32");
    jsonw_obj_end(&w);
    return jsonw_take(&w);
}

/* How an exported tensor comes from a checkpoint tensor: copied, transposed
 * from [out, in] to [in, out], or c_attn's weight or bias reordered (below);
 * a norm's weight stored zero-centred (--apply-layernorm-1p) written as 1 + w.
 * Each is read from the step's model.safetensors and made just before it is
 * written, so the export holds two buffers of the largest tensor, never the
 * model. */
typedef enum { EX_COPY, EX_T, EX_QKV_W, EX_QKV_B } ex_kind;

typedef struct ex_src {
    ex_kind kind;
    const eng_param *from; /* in the full model's table (eng_full_table): the checkpoint's tensor */
    int64_t out, in; /* EX_T: the source's [out, in]; EX_QKV_*: in = hidden, out = head dim */
} ex_src;

typedef struct ex_list {
    st_tensor *t;
    ex_src *s;
    int n, cap;
} ex_list;

static int ex_add(ex_list *l, const char *name, int64_t rows, int64_t cols, ex_src src)
{
    if (!src.from) return -1; /* a tensor the model lacks */
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        st_tensor *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (t) l->t = t;
        ex_src *sv = t ? realloc(l->s, (size_t)cap * sizeof *sv) : NULL;
        if (!sv) return -1;
        l->s = sv;
        l->cap = cap;
    }
    st_tensor *t = &l->t[l->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = ST_F32;
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    l->s[l->n++] = src;
    return 0;
}

static void ex_free(ex_list *l)
{
    free(l->t);
    free(l->s);
}

static size_t ex_numel(const st_tensor *t) { return (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1); }

/* The checkpoint's tensors: the full model's table and the step's model.safetensors. */
typedef struct ex_model {
    eng_param *tab;
    int n;
    st_file f;
} ex_model;

static const eng_param *ex_find(const ex_model *m, const char *fmt, int layer)
{
    char name[ENG_NAME];
    snprintf(name, sizeof name, fmt, layer);
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->tab[i].name, name)) return &m->tab[i];
    return NULL;
}

/* The tensor's data into out (ex_numel floats), `in` scratch of as many. c_attn:
 * GPT-2's output o = part * C + head * hd + j (part q, k, v) is the engine's
 * row (head * 3 + part) * hd + j, Megatron's [head][q, k, v][head dim]. */
static int ex_fill(ex_model *m, const ex_src *s, float *out, float *in, char *err, size_t errlen)
{
    const st_tensor *t = st_find(&m->f, s->from->name);
    if (!t || t->shape[0] != s->from->full[0] || (s->from->ndim == 2 && t->shape[1] != s->from->full[1])) {
        atoll_errf(err, errlen, "the checkpoint's %s is missing or not of the model's shape", s->from->name);
        return -1;
    }
    if (st_read_slice(&m->f, t, s->from, s->kind == EX_COPY ? out : in, err, errlen)) return -1;
    int64_t C = s->in, hd = s->out;
    switch (s->kind) {
    case EX_COPY: break;
    case EX_T: /* out[i][o] = in[o][i] */
        for (int64_t o = 0; o < s->out; o++)
            for (int64_t i = 0; i < s->in; i++) out[i * s->out + o] = in[o * s->in + i];
        break;
    case EX_QKV_W:
    case EX_QKV_B:
        for (int64_t o = 0; o < 3 * C; o++) {
            int64_t part = o / C, head = o % C / hd, j = o % hd, r = (head * 3 + part) * hd + j;
            if (s->kind == EX_QKV_B) out[o] = in[r];
            else
                for (int64_t i = 0; i < C; i++) out[i * 3 * C + o] = in[r * C + i];
        }
        break;
    }
    if (s->from->plus_one) /* --apply-layernorm-1p stores w; Hugging Face's norms apply their weight as is */
        for (size_t i = 0; i < s->from->numel; i++) out[i] += 1.0f;
    return 0;
}

/* The whole tensor `from` under `name` (NULL from: a tensor the model lacks, an error). */
static int copy_as(ex_list *l, const char *name, const eng_param *from)
{
    if (!from) return -1;
    return ex_add(l, name, from->full[0], from->ndim == 2 ? from->full[1] : 0, (ex_src){ EX_COPY, from, 0, 0 });
}

/* GPT2LMHeadModel's tensors from the engine's GPT-2 family ones. */
static int gpt2_tensors(ex_list *l, const ex_model *m, const atoll_config *c)
{
    int64_t C = c->hidden_size, F = cfg_ffn(c), NH = c->num_attention_heads, hd = C / NH;
    if (copy_as(l, "transformer.wte.weight", ex_find(m, "wte.weight", 0)) ||
        copy_as(l, "transformer.wpe.weight", ex_find(m, "wpe.weight", 0)))
        return -1;
    char name[96], from[ENG_NAME];
    for (int layer = 0; layer < c->num_layers; layer++) {
        static const char *const norms[4] = { "ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias" };
        for (int i = 0; i < 4; i++) {
            snprintf(from, sizeof from, "h.%d.%s", layer, norms[i]);
            snprintf(name, sizeof name, "transformer.h.%d.%s", layer, norms[i]);
            if (copy_as(l, name, ex_find(m, from, 0))) return -1;
        }
        snprintf(name, sizeof name, "transformer.h.%d.attn.c_attn.weight", layer);
        if (ex_add(l, name, C, 3 * C, (ex_src){ EX_QKV_W, ex_find(m, "h.%d.attn.c_attn.weight", layer), hd, C }))
            return -1;
        snprintf(name, sizeof name, "transformer.h.%d.attn.c_attn.bias", layer);
        if (ex_add(l, name, 3 * C, 0, (ex_src){ EX_QKV_B, ex_find(m, "h.%d.attn.c_attn.bias", layer), hd, C }))
            return -1;
        static const struct { const char *name; int wide_out, wide_in; } lin[3] = {
            { "attn.c_proj", 0, 0 }, { "mlp.c_fc", 1, 0 }, { "mlp.c_proj", 0, 1 },
        };
        for (int i = 0; i < 3; i++) { /* Conv1D keeps [in, out] */
            int64_t out = lin[i].wide_out ? F : C, in = lin[i].wide_in ? F : C;
            snprintf(from, sizeof from, "h.%%d.%s.weight", lin[i].name);
            snprintf(name, sizeof name, "transformer.h.%d.%s.weight", layer, lin[i].name);
            if (ex_add(l, name, in, out, (ex_src){ EX_T, ex_find(m, from, layer), out, in })) return -1;
            snprintf(from, sizeof from, "h.%d.%s.bias", layer, lin[i].name);
            snprintf(name, sizeof name, "transformer.h.%d.%s.bias", layer, lin[i].name);
            if (copy_as(l, name, ex_find(m, from, 0))) return -1;
        }
    }
    if (copy_as(l, "transformer.ln_f.weight", ex_find(m, "ln_f.weight", 0)) ||
        copy_as(l, "transformer.ln_f.bias", ex_find(m, "ln_f.bias", 0)))
        return -1;
    if (c->untie_embeddings_and_output_weights && copy_as(l, "lm_head.weight", ex_find(m, "lm_head.weight", 0)))
        return -1;
    return 0;
}

/* The LLaMA family's tensors under the names they already have. */
static int llama_tensors(ex_list *l, const ex_model *m)
{
    for (int i = 0; i < m->n; i++)
        if (copy_as(l, m->tab[i].name, &m->tab[i])) return -1;
    return 0;
}

/* Copies file `from` (a tokenizer's: at most 64 MiB) to dir/name, as the checkpoint writes its files. */
static int copy_file(const char *from, const char *dir, const char *name, char *err, size_t errlen)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len;
    char *data = atoll_read_file(from, (size_t)64 << 20, &len);
    if (!data) {
        atoll_errf(err, errlen, "cannot copy %s to %s: %s", from, path, strerror(errno));
        return -1;
    }
    int rc = ckpt_write_file(dir, path, data, len, err, errlen);
    free(data);
    return rc;
}

/* The tokenizer files the manifest names, under Hugging Face's names: up to
 * three (from, name) pairs into tok, each checked readable before anything is
 * written; a byte-level model has none, and says so in note. */
typedef struct ex_tok {
    char from[3][1100];
    const char *name[3];
    int n;
} ex_tok;

static int tokenizer_files(const atoll_config *c, ex_tok *t, char *note, size_t notelen, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    note[0] = 0;
    if (!strcmp(c->tokenizer_type, "GPT2BPETokenizer")) {
        snprintf(t->from[0], sizeof t->from[0], "%s", c->vocab_file);
        snprintf(t->from[1], sizeof t->from[1], "%s", c->merge_file);
        t->name[0] = "vocab.json", t->name[1] = "merges.txt", t->n = 2;
    } else if (c->tokenizer_model[0]) {
        struct stat st;
        int is_dir = !stat(c->tokenizer_model, &st) && S_ISDIR(st.st_mode);
        const char *base = strrchr(c->tokenizer_model, '/');
        base = base ? base + 1 : c->tokenizer_model;
        t->name[0] = strstr(base, ".model") ? "tokenizer.model" : "tokenizer.json";
        snprintf(t->from[0], sizeof t->from[0], is_dir ? "%s/%s" : "%s", c->tokenizer_model, t->name[0]);
        t->n = 1;
        if (is_dir) { /* its tokenizer_config.json, when there is one, says the special tokens */
            snprintf(t->from[1], sizeof t->from[1], "%s/tokenizer_config.json", c->tokenizer_model);
            if (!access(t->from[1], R_OK)) t->name[t->n++] = "tokenizer_config.json";
        }
    } else if (!strcmp(c->tokenizer_type, "NullTokenizer")) {
        snprintf(note, notelen, "; no tokenizer written: the run's NullTokenizer took the data's ids as they were; "
                 "add the files of the tokenizer that made them");
    } else {
        snprintf(note, notelen, "; no tokenizer written: the model reads bytes (token = byte value), which no "
                 "Hugging Face tokenizer file describes");
    }
    for (int i = 0; i < t->n; i++)
        if (access(t->from[i], R_OK)) {
            atoll_errf(err, errlen, "the checkpoint's tokenizer file %s: %s (nothing written; a tokenizer that moved "
                       "needs the manifest's path back)", t->from[i], strerror(errno));
            return -1;
        }
    return 0;
}

int export_main(int argc, char **argv)
{
    ex_opts o;
    int prc = parse_opts(&o, argc, argv);
    if (prc) return prc > 0 ? 0 : 2;
    char err[1400] = "", note[1024] = "", path[1200], tmp[1300] = "";
    atoll_config c;
    cfg_defaults(&c);
    ex_model m = { 0 };
    m.f.fd = -1;
    ex_list l = { 0 };
    st_file f = { 0 };
    f.fd = -1;
    char *config = NULL;
    float *buf = NULL, *scratch = NULL;
    int rc = 1;
    long long it = o.step;
    if (it < 0) {
        int latest = ckpt_latest(o.load, CKPT_WEIGHTS, &it, err, sizeof err);
        if (latest == 1) atoll_errf(err, sizeof err, "--load %s: no committed checkpoint there", o.load);
        if (latest) goto out;
    } else if (ckpt_step_check(o.load, CKPT_WEIGHTS, it, note, sizeof note)) {
        atoll_errf(err, sizeof err, "--ckpt-step %lld: %s", it, note);
        goto out;
    }
    ex_tok tok;
    if (ckpt_read_model(o.load, it, &c, err, sizeof err) || tokenizer_files(&c, &tok, note, sizeof note, err, sizeof err))
        goto out;
    int llama = cfg_rmsnorm(&c);
    const char *no = llama ? NULL : gpt2_refusal(&c);
    if (no) {
        atoll_errf(err, sizeof err, "%s/iter_%07lld: a GPT model with %s has no Hugging Face GPT-2 form; atoll "
                   "exports GPT-2's architecture (learned positions, LayerNorm, GELU, biases, a key and value per "
                   "head) and the LLaMA family", o.load, it, no);
        goto out;
    }
    if (mkdir(o.output, 0755) && errno != EEXIST) {
        atoll_errf(err, sizeof err, "--output %s: cannot create: %s", o.output, strerror(errno));
        goto out;
    }
    static const char *const kept[2] = { "config.json", "model.safetensors" };
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", o.output, kept[i]);
        if (!access(path, F_OK)) {
            atoll_errf(err, sizeof err, "--output %s already holds %s: give an empty or new directory (nothing "
                       "is overwritten)", o.output, kept[i]);
            goto out;
        }
    }
    c.micro_batch_size = c.global_batch_size = 1;
    c.tensor_model_parallel_size = c.pipeline_model_parallel_size = 1;
    char step[1024];
    ckpt_step_dir(step, sizeof step, o.load, it);
    snprintf(path, sizeof path, "%s/model.safetensors", step);
    if (!(m.tab = eng_full_table(&c, &m.n, err, sizeof err)) || st_open(&m.f, path, err, sizeof err)) goto out;
    if (llama ? llama_tensors(&l, &m) : gpt2_tensors(&l, &m, &c)) {
        atoll_errf(err, sizeof err, "out of memory, or a tensor missing from the model");
        goto out;
    }
    const eng_param *wte = ex_find(&m, llama ? "model.embed_tokens.weight" : "wte.weight", 0);
    config = llama ? ckpt_hf_llama_config(&c) : gpt2_config(&c, wte ? wte->full[0] : c.vocab_size);
    snprintf(path, sizeof path, "%s/model.safetensors", o.output);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!config || st_layout(&f, l.t, l.n, "\"format\":\"pt\"")) {
        atoll_errf(err, sizeof err, "out of memory");
        goto out;
    }
    if (st_create(&f, tmp, 1, err, sizeof err)) goto out;
    size_t most = 0;
    for (int i = 0; i < l.n; i++) most = ex_numel(&l.t[i]) > most ? ex_numel(&l.t[i]) : most;
    if (!(buf = malloc(most * sizeof(float))) || !(scratch = malloc(most * sizeof(float)))) {
        atoll_errf(err, sizeof err, "out of memory for two tensors of %zu floats", most);
        goto out;
    }
    for (int i = 0; i < l.n; i++)
        if (ex_fill(&m, &l.s[i], buf, scratch, err, sizeof err) || st_write_all(&f, &f.t[i], buf, err, sizeof err))
            goto out;
    if (st_close(&f) || rename(tmp, path)) {
        atoll_errf(err, sizeof err, "%s: cannot write: %s", path, strerror(errno));
        goto out;
    }
    snprintf(path, sizeof path, "%s/config.json", o.output);
    if (ckpt_write_text(o.output, path, config, err, sizeof err)) goto out;
    for (int i = 0; i < tok.n; i++)
        if (copy_file(tok.from[i], o.output, tok.name[i], err, sizeof err)) goto out;
    printf("exported %s/iter_%07lld to %s: %s, %d tensors%s\n", o.load, it, o.output,
           llama ? "LLaMA family" : "GPT2LMHeadModel", l.n, note);
    rc = 0;
out:
    if (rc) fprintf(stderr, "atoll export: %s\n", err);
    if (f.fd >= 0 || f.t) {
        st_close(&f);
        unlink(tmp); /* a model.safetensors written in part */
    }
    free(config);
    free(buf);
    free(scratch);
    ex_free(&l);
    st_close(&m.f);
    free(m.tab);
    return rc;
}
