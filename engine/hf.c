/* Hugging Face model directories, out and in.
 *
 * `atoll export`: a committed checkpoint step as a Hugging Face model
 * directory (config.json, model.safetensors, the tokenizer's files), for
 * transformers' from_pretrained and the tools built on it (evaluation
 * harnesses, serving). `atoll import` (below export_main) reads such a
 * directory back as a step of the weights alone, through the same tensor
 * map run the other way, to fine-tune from.
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
#include "json_read.h"
#include "jsonw.h"
#include "k_rope.h"
#include "model.h"
#include "safetensors.h"
#include "tokenizer.h"
#include "train.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: atoll export --load DIR --output DIR [--ckpt-step N] [--dtype fp32|bf16] [--json]\n"
               "  Writes the newest committed checkpoint of DIR (or step N) as a Hugging Face model directory:\n"
               "  config.json, model.safetensors (fp32, or bf16 rounded to nearest) and the tokenizer's files when\n"
               "  the manifest names them\n"
               "  (GPT-2 BPE: vocab.json and merges.txt; tokenizer.json; tokenizer.model). GPT models become\n"
               "  GPT2LMHeadModel, the LLaMA family LlamaForCausalLM (Qwen2/Qwen3 with their biases or head\n"
               "  norms). The output directory is created if needed and must not hold a model already.\n"
               "  --json: what was written as one JSON object.\n");
}

/* Both commands' flags: two directories (export: --load, --output; import:
 * --hf, --save), --ckpt-step (-1 when not given) and --json. */
typedef struct hf_opts {
    const char *dir[2];
    long long step;
    int json;
    st_dtype dtype; /* export's --dtype: ST_F32 or ST_BF16 */
} hf_opts;

static int parse_opts(hf_opts *o, int argc, char **argv, const char *cmd, const char *const flag[2],
                      void (*use)(FILE *))
{
    memset(o, 0, sizeof *o);
    o->step = -1;
    o->dtype = ST_F32;
    for (int i = 1; i < argc; i += 2) { /* flags and their values */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            use(stdout);
            return 1;
        } else if (!strcmp(a, "--json")) { /* the one flag without a value */
            o->json = 1;
            i--;
        } else if (!v) {
            fprintf(stderr, "atoll %s: %s needs a value\n", cmd, a);
            return -1;
        } else if (!strcmp(a, flag[0]) || !strcmp(a, flag[1])) {
            o->dir[strcmp(a, flag[0]) != 0] = v;
        } else if (!strcmp(a, "--ckpt-step")) {
            char *end;
            long long s = strtoll(v, &end, 10);
            if (end == v || *end || s < 0) {
                fprintf(stderr, "atoll %s: --ckpt-step '%s': expected an iteration (0 or more)\n", cmd, v);
                return -1;
            }
            o->step = s;
        } else if (!strcmp(a, "--dtype") && !strcmp(cmd, "export")) {
            if (!strcmp(v, "fp32") || !strcmp(v, "float32")) {
                o->dtype = ST_F32;
            } else if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) {
                o->dtype = ST_BF16;
            } else {
                fprintf(stderr, "atoll %s: --dtype '%s': expected fp32 or bf16\n", cmd, v);
                return -1;
            }
        } else {
            fprintf(stderr, "atoll %s: unknown flag '%s'\n", cmd, a);
            use(stderr);
            return -1;
        }
    }
    if (!o->dir[0] || !o->dir[1]) {
        fprintf(stderr, "atoll %s: needs %s DIR and %s DIR\n", cmd, flag[0], flag[1]);
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
static char *gpt2_config(const atoll_config *c, int64_t V, const char *torch_dtype)
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
    jsonw_kstr(&w, "torch_dtype", torch_dtype);
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

/* c_attn: GPT-2's output o = part * C + head * hd + j (part q, k, v) is the
 * engine's row (head * 3 + part) * hd + j, Megatron's [head][q, k, v][head dim]. */
static int64_t qkv_row(int64_t o, int64_t C, int64_t hd)
{
    int64_t part = o / C, head = o % C / hd, j = o % hd;
    return (head * 3 + part) * hd + j;
}

/* The map between an engine tensor `eng` and its Hugging Face form `hf`, moved
 * one way (to_hf) or the other: EX_T transposes [out, in] to Conv1D's [in, out],
 * EX_QKV_* move c_attn's rows (qkv_row). EX_COPY is a plain copy (not here). */
static void ex_move(const ex_src *s, float *eng, float *hf, int to_hf)
{
#define EX_MOVE(e, h) (to_hf ? (void)(hf[h] = eng[e]) : (void)(eng[e] = hf[h]))
    int64_t C = s->in, hd = s->out;
    if (s->kind == EX_T)
        for (int64_t o = 0; o < s->out; o++)
            for (int64_t i = 0; i < s->in; i++) EX_MOVE(o * s->in + i, i * s->out + o);
    if (s->kind == EX_QKV_W || s->kind == EX_QKV_B)
        for (int64_t o = 0; o < 3 * C; o++) {
            int64_t r = qkv_row(o, C, hd);
            if (s->kind == EX_QKV_B) EX_MOVE(r, o);
            else
                for (int64_t i = 0; i < C; i++) EX_MOVE(r * C + i, i * 3 * C + o);
        }
#undef EX_MOVE
}

/* The tensor's data into out (ex_numel floats), `in` scratch of as many. */
static int ex_fill(ex_model *m, const ex_src *s, float *out, float *in, char *err, size_t errlen)
{
    const st_tensor *t = st_find(&m->f, s->from->name);
    if (!t || t->shape[0] != s->from->full[0] || (s->from->ndim == 2 && t->shape[1] != s->from->full[1])) {
        atoll_errf(err, errlen, "the checkpoint's %s is missing or not of the model's shape", s->from->name);
        return -1;
    }
    if (st_read_slice(&m->f, t, s->from, s->kind == EX_COPY ? out : in, err, errlen)) return -1;
    if (s->kind != EX_COPY) ex_move(s, in, out, 1);
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
    static const char *const flags[2] = { "--load", "--output" };
    hf_opts opt;
    int prc = parse_opts(&opt, argc, argv, "export", flags, usage);
    if (prc) return prc > 0 ? 0 : 2;
    const char *load = opt.dir[0], *output = opt.dir[1];
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
    long long it = opt.step;
    if (it < 0) {
        int latest = ckpt_latest(load, CKPT_WEIGHTS, &it, err, sizeof err);
        if (latest == 1) atoll_errf(err, sizeof err, "--load %s: no committed checkpoint there", load);
        if (latest) goto out;
    } else if (ckpt_step_check(load, CKPT_WEIGHTS, it, note, sizeof note)) {
        atoll_errf(err, sizeof err, "--ckpt-step %lld: %s", it, note);
        goto out;
    }
    ex_tok tok;
    if (ckpt_read_model(load, it, &c, err, sizeof err) || tokenizer_files(&c, &tok, note, sizeof note, err, sizeof err))
        goto out;
    int llama = cfg_rmsnorm(&c);
    const char *no = llama ? NULL : gpt2_refusal(&c);
    if (no) {
        atoll_errf(err, sizeof err, "%s/iter_%07lld: a GPT model with %s has no Hugging Face GPT-2 form; atoll "
                   "exports GPT-2's architecture (learned positions, LayerNorm, GELU, biases, a key and value per "
                   "head) and the LLaMA family", load, it, no);
        goto out;
    }
    if (mkdir(output, 0755) && errno != EEXIST) {
        atoll_errf(err, sizeof err, "--output %s: cannot create: %s", output, strerror(errno));
        goto out;
    }
    static const char *const kept[2] = { "config.json", "model.safetensors" };
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", output, kept[i]);
        if (!access(path, F_OK)) {
            atoll_errf(err, sizeof err, "--output %s already holds %s: give an empty or new directory (nothing "
                       "is overwritten)", output, kept[i]);
            goto out;
        }
    }
    c.micro_batch_size = c.global_batch_size = 1;
    c.tensor_model_parallel_size = c.pipeline_model_parallel_size = 1;
    char step[1024];
    ckpt_step_dir(step, sizeof step, load, it);
    snprintf(path, sizeof path, "%s/model.safetensors", step);
    if (!(m.tab = eng_full_table(&c, &m.n, err, sizeof err)) || st_open(&m.f, path, err, sizeof err)) goto out;
    if (llama ? llama_tensors(&l, &m) : gpt2_tensors(&l, &m, &c)) {
        atoll_errf(err, sizeof err, "out of memory, or a tensor missing from the model");
        goto out;
    }
    const eng_param *wte = ex_find(&m, llama ? "model.embed_tokens.weight" : "wte.weight", 0);
    const char *torch_dtype = opt.dtype == ST_BF16 ? "bfloat16" : "float32";
    config = llama ? ckpt_hf_llama_config(&c, torch_dtype) : gpt2_config(&c, wte ? wte->full[0] : c.vocab_size, torch_dtype);
    for (int i = 0; i < l.n; i++) l.t[i].dtype = opt.dtype;
    const k_ops *cpu = opt.dtype == ST_BF16 ? eng_backend("cpu", err, sizeof err) : NULL;
    if (opt.dtype == ST_BF16 && !cpu) goto out;
    snprintf(path, sizeof path, "%s/model.safetensors", output);
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
    for (int i = 0; i < l.n; i++) {
        if (ex_fill(&m, &l.s[i], buf, scratch, err, sizeof err)) goto out;
        if (cpu) cpu->to_bf16((uint16_t *)scratch, buf, ex_numel(&l.t[i])); /* rounded to nearest even */
        if (st_write_all(&f, &f.t[i], cpu ? (const void *)scratch : buf, err, sizeof err)) goto out;
    }
    if (st_close(&f) || rename(tmp, path)) {
        atoll_errf(err, sizeof err, "%s: cannot write: %s", path, strerror(errno));
        goto out;
    }
    snprintf(path, sizeof path, "%s/config.json", output);
    if (ckpt_write_text(output, path, config, err, sizeof err)) goto out;
    for (int i = 0; i < tok.n; i++)
        if (copy_file(tok.from[i], output, tok.name[i], err, sizeof err)) goto out;
    const char *arch = llama ? "LLaMA family" : "GPT2LMHeadModel", *dt = opt.dtype == ST_BF16 ? "BF16" : "F32";
    if (opt.json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_kstr(&w, "load", load);
        jsonw_kint(&w, "step", it);
        jsonw_kstr(&w, "output", output);
        jsonw_kstr(&w, "model", arch);
        jsonw_kint(&w, "tensors", l.n);
        jsonw_kstr(&w, "dtype", dt);
        jsonw_key(&w, "tokenizer_files");
        jsonw_arr(&w);
        for (int i = 0; i < tok.n; i++) jsonw_str(&w, tok.name[i]);
        jsonw_arr_end(&w);
        if (note[0]) jsonw_kstr(&w, "note", note + 2); /* why none, without its "; " */
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
    } else {
        printf("exported %s/iter_%07lld to %s: %s, %d tensors in %s%s\n", load, it, output, arch, l.n, dt, note);
    }
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

/* ---- atoll import ---------------------------------------------------------------
 *
 * A Hugging Face model directory (config.json, model.safetensors or the shards
 * model.safetensors.index.json names, in F32, BF16 or F16, and its tokenizer)
 * becomes step `--ckpt-step` (0) of --save, holding the weights alone in fp32:
 * the model's settings from config.json through the config's own parser (as
 * flags are), each tensor placed by export's map run backwards. Everything is
 * checked (architecture, every setting atoll would have to ignore, every
 * tensor's presence and shape, no tensor left over) before a byte is written. */

static void im_usage(FILE *f)
{
    fprintf(f, "usage: atoll import --hf DIR --save DIR [--ckpt-step N] [--json]\n"
               "  Reads a Hugging Face model directory (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,\n"
               "  Qwen3ForCausalLM or GPT2LMHeadModel: config.json, model.safetensors or its shards in F32, BF16\n"
               "  or F16, and the tokenizer: tokenizer.json, tokenizer.model, or GPT-2's vocab.json and merges.txt)\n"
               "  and writes it to --save as step N (default 0) of the weights alone, in fp32. Train from it with\n"
               "  atoll-train --load DIR --finetune --use-checkpoint-args (and a --save of the run's own).\n"
               "  --json: what was written as one JSON object.\n");
}

/* One setting through the config's parser, its value printed from fmt. */
static int im_set(atoll_config *c, char *err, size_t errlen, const char *key, const char *fmt, ...)
{
    char val[PATH_MAX + 64], why[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val, sizeof val, fmt, ap);
    va_end(ap);
    if (cfg_set(c, key, val, why, sizeof why) == CFG_OK) return 0;
    atoll_errf(err, errlen, "config.json gives --%s %s, which atoll refuses: %s", key, val, why[0] ? why : "unknown");
    return -1;
}

/* config.json's member k: a number (*v), absent (dflt, or an error when dflt is NAN) */
static int im_num(const jsonr *j, const char *k, double dflt, double *v, char *err, size_t errlen)
{
    const jsonr *x = jsonr_get(j, k);
    if (x && x->type == JSONR_NUM) {
        *v = x->num;
        return 0;
    }
    if ((!x || x->type == JSONR_NULL) && !isnan(dflt)) {
        *v = dflt;
        return 0;
    }
    atoll_errf(err, errlen, "config.json: \"%s\" %s, expected a number", k, x ? "is not a number" : "is missing");
    return -1;
}

static int im_int(const jsonr *j, const char *k, double dflt, int *v, char *err, size_t errlen)
{
    double d;
    if (im_num(j, k, dflt, &d, err, errlen)) return -1;
    if (d != floor(d) || d < 0 || d > 2147483647.0) {
        atoll_errf(err, errlen, "config.json: \"%s\" is %g, expected a whole number", k, d);
        return -1;
    }
    *v = (int)d;
    return 0;
}

static int im_bool(const jsonr *j, const char *k, int dflt)
{
    const jsonr *x = jsonr_get(j, k);
    return x && x->type == JSONR_BOOL ? (int)x->num : dflt;
}

static const char *im_str(const jsonr *j, const char *k)
{
    const jsonr *x = jsonr_get(j, k);
    return x && x->type == JSONR_STR ? x->str : "";
}

/* rope_scaling: none, LLaMA-3's bands (k_rope.h's, the only ones atoll turns by)
 * or linear position interpolation by a whole factor. */
static int im_rope_scaling(const jsonr *j, atoll_config *c, char *err, size_t errlen)
{
    const jsonr *rs = jsonr_get(j, "rope_scaling");
    if (!rs || rs->type == JSONR_NULL) return 0;
    const char *type = im_str(rs, "rope_type")[0] ? im_str(rs, "rope_type") : im_str(rs, "type");
    double f, lo, hi, orig;
    if (im_num(rs, "factor", NAN, &f, err, errlen)) return -1;
    if (!strcmp(type, "llama3")) {
        if (im_num(rs, "low_freq_factor", NAN, &lo, err, errlen) || im_num(rs, "high_freq_factor", NAN, &hi, err, errlen) ||
            im_num(rs, "original_max_position_embeddings", NAN, &orig, err, errlen))
            return -1;
        if (lo != K_ROPE_LLAMA3_LOW_FREQ_FACTOR || hi != K_ROPE_LLAMA3_HIGH_FREQ_FACTOR ||
            orig != K_ROPE_LLAMA3_ORIGINAL_MAX_POSITIONS) {
            atoll_errf(err, errlen, "config.json: rope_scaling llama3 with low_freq_factor %g, high_freq_factor %g, "
                       "original_max_position_embeddings %g; atoll's --use-rope-scaling turns by LLaMA-3.1's %g, %g "
                       "and %g", lo, hi, orig, K_ROPE_LLAMA3_LOW_FREQ_FACTOR, K_ROPE_LLAMA3_HIGH_FREQ_FACTOR,
                       K_ROPE_LLAMA3_ORIGINAL_MAX_POSITIONS);
            return -1;
        }
        return im_set(c, err, errlen, "use_rope_scaling", "true") ||
               im_set(c, err, errlen, "rope_scaling_factor", "%.17g", f);
    }
    if (!strcmp(type, "linear")) {
        if (f != floor(f) || f < 1) {
            atoll_errf(err, errlen, "config.json: rope_scaling linear with factor %g; atoll's "
                       "--rotary-seq-len-interpolation-factor takes a whole number", f);
            return -1;
        }
        return im_set(c, err, errlen, "rotary_seq_len_interpolation_factor", "%d", (int)f);
    }
    atoll_errf(err, errlen, "config.json: rope_scaling of type '%s'; atoll turns rope by LLaMA-3.1's bands (llama3) "
               "or position interpolation (linear) only", type);
    return -1;
}

typedef enum { IM_LLAMA, IM_MISTRAL, IM_QWEN2, IM_QWEN3, IM_GPT2 } im_arch;
static const char *const IM_ARCH_NAMES[] = { "llama", "mistral", "qwen2", "qwen3", "gpt2" };

/* The LLaMA family's settings from config.json. */
static int im_llama(const jsonr *j, im_arch a, atoll_config *c, char *err, size_t errlen)
{
    int L, H, F, NH, KV, pos, hd;
    double eps, theta;
    if (im_int(j, "num_hidden_layers", NAN, &L, err, errlen) || im_int(j, "hidden_size", NAN, &H, err, errlen) ||
        im_int(j, "intermediate_size", NAN, &F, err, errlen) ||
        im_int(j, "num_attention_heads", NAN, &NH, err, errlen) ||
        im_int(j, "num_key_value_heads", NH, &KV, err, errlen) ||
        im_int(j, "max_position_embeddings", NAN, &pos, err, errlen) ||
        im_int(j, "head_dim", NH ? H / NH : 0, &hd, err, errlen) ||
        im_num(j, "rms_norm_eps", 1e-6, &eps, err, errlen) || im_num(j, "rope_theta", 10000, &theta, err, errlen))
        return -1;
    const char *act = im_str(j, "hidden_act");
    if (strcmp(act, "silu")) {
        atoll_errf(err, errlen, "config.json: hidden_act '%s'; the LLaMA family's MLP in atoll is SwiGLU (silu)", act);
        return -1;
    }
    if (theta != floor(theta)) {
        atoll_errf(err, errlen, "config.json: rope_theta %g; atoll's --rotary-base is a whole number", theta);
        return -1;
    }
    const jsonr *sw = jsonr_get(j, "sliding_window");
    if ((a == IM_MISTRAL && sw && sw->type == JSONR_NUM && sw->num < pos) ||
        ((a == IM_QWEN2 || a == IM_QWEN3) && im_bool(j, "use_sliding_window", 0))) {
        atoll_errf(err, errlen, "config.json: a sliding attention window; atoll's attention is causal over the whole "
                   "sequence");
        return -1;
    }
    const jsonr *prf = jsonr_get(j, "partial_rotary_factor");
    if (prf && prf->type == JSONR_NUM && prf->num != 1) {
        atoll_errf(err, errlen, "config.json: partial_rotary_factor %g; the LLaMA family in atoll turns whole heads",
                   prf->num);
        return -1;
    }
    int attn_bias = im_bool(j, "attention_bias", 0), mlp_bias = im_bool(j, "mlp_bias", 0);
    if (a == IM_QWEN2) attn_bias = mlp_bias = 0; /* q, k, v biases alone: --add-qkv-bias */
    if (attn_bias != mlp_bias) {
        atoll_errf(err, errlen, "config.json: attention_bias %s with mlp_bias %s; atoll's linear layers have biases "
                   "all or none (--disable-bias-linear)", attn_bias ? "true" : "false", mlp_bias ? "true" : "false");
        return -1;
    }
    if (im_set(c, err, errlen, "num_layers", "%d", L) || im_set(c, err, errlen, "hidden_size", "%d", H) ||
        im_set(c, err, errlen, "ffn_hidden_size", "%d", F) || im_set(c, err, errlen, "num_attention_heads", "%d", NH) ||
        im_set(c, err, errlen, "max_position_embeddings", "%d", pos) ||
        im_set(c, err, errlen, "seq_length", "%d", pos) || im_set(c, err, errlen, "normalization", "RMSNorm") ||
        im_set(c, err, errlen, "swiglu", "true") || im_set(c, err, errlen, "position_embedding_type", "rope") ||
        im_set(c, err, errlen, "rotary_base", "%.0f", theta) || im_set(c, err, errlen, "norm_epsilon", "%.17g", eps) ||
        im_set(c, err, errlen, "disable_bias_linear", attn_bias ? "false" : "true") ||
        im_set(c, err, errlen, "untie_embeddings_and_output_weights", im_bool(j, "tie_word_embeddings", 0) ? "false" : "true") ||
        (a == IM_QWEN2 && im_set(c, err, errlen, "add_qkv_bias", "true")) ||
        (a == IM_QWEN3 && im_set(c, err, errlen, "qk_layernorm", "true")) ||
        (KV != NH && (im_set(c, err, errlen, "group_query_attention", "true") ||
                      im_set(c, err, errlen, "num_query_groups", "%d", KV))) ||
        (NH && hd != H / NH && im_set(c, err, errlen, "kv_channels", "%d", hd)))
        return -1;
    return im_rope_scaling(j, c, err, errlen);
}

/* GPT2LMHeadModel's settings from config.json. */
static int im_gpt2(const jsonr *j, atoll_config *c, char *err, size_t errlen)
{
    int L, H, NH, pos, F;
    double eps;
    if (im_int(j, "n_layer", NAN, &L, err, errlen) || im_int(j, "n_embd", NAN, &H, err, errlen) ||
        im_int(j, "n_head", NAN, &NH, err, errlen) || im_int(j, "n_positions", NAN, &pos, err, errlen) ||
        im_int(j, "n_inner", 4.0 * H, &F, err, errlen) || im_num(j, "layer_norm_epsilon", 1e-5, &eps, err, errlen))
        return -1;
    const char *act = im_str(j, "activation_function");
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh")) {
        atoll_errf(err, errlen, "config.json: activation_function '%s'; atoll's GELU is the tanh form (gelu_new)",
                   act[0] ? act : "(none)");
        return -1;
    }
    if (im_bool(j, "scale_attn_by_inverse_layer_idx", 0) || im_bool(j, "reorder_and_upcast_attn", 0) ||
        !im_bool(j, "scale_attn_weights", 1)) {
        atoll_errf(err, errlen, "config.json: GPT-2's attention scaled other than by 1/sqrt(head dim) "
                   "(scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn or scale_attn_weights false)");
        return -1;
    }
    return im_set(c, err, errlen, "num_layers", "%d", L) || im_set(c, err, errlen, "hidden_size", "%d", H) ||
           im_set(c, err, errlen, "num_attention_heads", "%d", NH) || im_set(c, err, errlen, "ffn_hidden_size", "%d", F) ||
           im_set(c, err, errlen, "max_position_embeddings", "%d", pos) ||
           im_set(c, err, errlen, "seq_length", "%d", pos) || im_set(c, err, errlen, "normalization", "LayerNorm") ||
           im_set(c, err, errlen, "position_embedding_type", "learned_absolute") ||
           im_set(c, err, errlen, "norm_epsilon", "%.17g", eps) ||
           im_set(c, err, errlen, "untie_embeddings_and_output_weights",
                  im_bool(j, "tie_word_embeddings", 1) ? "false" : "true") ? -1 : 0;
}

/* The tokenizer in dir: GPT-2's vocab.json and merges.txt (GPT-2's first, any
 * model's without a tokenizer.json), tokenizer.json, or a SentencePiece
 * tokenizer.model (LLaMA-2's). */
static int im_tokenizer(const char *dir, im_arch a, atoll_config *c, char *err, size_t errlen)
{
    char abs[PATH_MAX], p1[PATH_MAX + 32], p2[PATH_MAX + 32];
    if (!realpath(dir, abs)) {
        atoll_errf(err, errlen, "--hf %s: %s", dir, strerror(errno));
        return -1;
    }
    char json[PATH_MAX + 32], spm[PATH_MAX + 32];
    snprintf(p1, sizeof p1, "%s/vocab.json", abs);
    snprintf(p2, sizeof p2, "%s/merges.txt", abs);
    snprintf(json, sizeof json, "%s/tokenizer.json", abs);
    snprintf(spm, sizeof spm, "%s/tokenizer.model", abs);
    int bpe = !access(p1, R_OK) && !access(p2, R_OK);
    if (bpe && (a == IM_GPT2 || access(json, R_OK))) /* GPT-2's own files first for GPT-2 */
        return im_set(c, err, errlen, "tokenizer_type", "GPT2BPETokenizer") || im_set(c, err, errlen, "vocab_file", "%s", p1) ||
               im_set(c, err, errlen, "merge_file", "%s", p2) ? -1 : 0;
    if (!access(json, R_OK))
        return im_set(c, err, errlen, "tokenizer_type", "HuggingFaceTokenizer") ||
               im_set(c, err, errlen, "tokenizer_model", "%s", abs) ? -1 : 0;
    if (a != IM_GPT2 && !access(spm, R_OK))
        return im_set(c, err, errlen, "tokenizer_type", "Llama2Tokenizer") ||
               im_set(c, err, errlen, "tokenizer_model", "%s", spm) ? -1 : 0;
    atoll_errf(err, errlen, "--hf %s holds no tokenizer atoll reads (tokenizer.json, a SentencePiece tokenizer.model, "
               "or GPT-2's vocab.json and merges.txt); the checkpoint records the tokenizer its data needs", dir);
    return -1;
}

/* The model's settings and tokenizer from dir/config.json. */
static int im_config(const char *dir, atoll_config *c, im_arch *arch, char *err, size_t errlen)
{
    char path[PATH_MAX + 32], jerr[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    jsonr *j = jsonr_read_file(path, 1u << 20, jerr, sizeof jerr);
    if (!j || j->type != JSONR_OBJ) {
        atoll_errf(err, errlen, "%s: %s", path, j ? "not a JSON object" : jerr);
        jsonr_free(j);
        return -1;
    }
    const char *type = im_str(j, "model_type");
    int a = -1;
    for (int i = 0; i < (int)(sizeof IM_ARCH_NAMES / sizeof IM_ARCH_NAMES[0]); i++)
        if (!strcmp(type, IM_ARCH_NAMES[i])) a = i;
    int vocab, rc = -1;
    if (a < 0) {
        atoll_errf(err, errlen, "%s: model_type '%s'; atoll imports llama, mistral, qwen2, qwen3 and gpt2", path,
                   type[0] ? type : "(none)");
    } else if (!(a == IM_GPT2 ? im_gpt2(j, c, err, errlen) : im_llama(j, (im_arch)a, c, err, errlen)) &&
               !im_int(j, "vocab_size", NAN, &vocab, err, errlen) && !im_tokenizer(dir, (im_arch)a, c, err, errlen) &&
               !tok_config_vocab(c, err, errlen)) {
        /* the model's rows, padded as atoll pads a vocabulary; recorded as --padded-vocab-size where the
         * tokenizer's own padding (what a run derives) differs */
        int mult = cfg_vocab_multiple(c), rows = (vocab + mult - 1) / mult * mult;
        if (vocab < 1) {
            atoll_errf(err, errlen, "%s: vocab_size %d", path, vocab);
        } else if (rows == c->vocab_size || !im_set(c, err, errlen, "padded_vocab_size", "%d", rows)) {
            c->vocab_size = rows;
            *arch = (im_arch)a;
            rc = cfg_validate_model(c, err, errlen);
        }
    }
    jsonr_free(j);
    return rc;
}

/* The directory's tensors: every file's, with which were placed. */
typedef struct im_shards {
    st_file *f;
    int nf;
    char (*name)[256]; /* each file's name in dir */
    unsigned char **used; /* [file][tensor] */
} im_shards;

static void im_shards_free(im_shards *s)
{
    for (int i = 0; i < s->nf; i++) {
        st_close(&s->f[i]);
        free(s->used[i]);
    }
    free(s->f);
    free(s->name);
    free(s->used);
}

static int im_open_file(im_shards *s, const char *dir, const char *name, char *err, size_t errlen)
{
    for (int i = 0; i < s->nf; i++)
        if (!strcmp(s->name[i], name)) return 0;
    if (strchr(name, '/') || strlen(name) >= sizeof s->name[0]) {
        atoll_errf(err, errlen, "%s/model.safetensors.index.json names '%s', not a file of that directory", dir, name);
        return -1;
    }
    st_file *f = realloc(s->f, (size_t)(s->nf + 1) * sizeof *f);
    if (f) s->f = f;
    char(*nm)[256] = f ? realloc(s->name, (size_t)(s->nf + 1) * sizeof *nm) : NULL;
    if (nm) s->name = nm;
    unsigned char **u = nm ? realloc(s->used, (size_t)(s->nf + 1) * sizeof *u) : NULL;
    if (!u) {
        atoll_errf(err, errlen, "out of memory");
        return -1;
    }
    s->used = u;
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (st_open(&s->f[s->nf], path, err, errlen)) return -1;
    snprintf(s->name[s->nf], sizeof s->name[0], "%s", name);
    if (!(s->used[s->nf] = calloc((size_t)s->f[s->nf].n + 1, 1))) {
        st_close(&s->f[s->nf]);
        atoll_errf(err, errlen, "out of memory");
        return -1;
    }
    s->nf++;
    return 0;
}

/* model.safetensors, or every shard model.safetensors.index.json's weight_map names. */
static int im_open(im_shards *s, const char *dir, char *err, size_t errlen)
{
    char path[PATH_MAX + 64], jerr[256];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK)) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (access(path, F_OK)) {
            atoll_errf(err, errlen, "--hf %s holds neither model.safetensors nor model.safetensors.index.json (atoll "
                       "reads safetensors files, not pytorch_model.bin)", dir);
            return -1;
        }
        return im_open_file(s, dir, "model.safetensors", err, errlen);
    }
    jsonr *j = jsonr_read_file(path, 64u << 20, jerr, sizeof jerr);
    const jsonr *map = jsonr_get(j, "weight_map");
    int rc = 0;
    if (!map || map->type != JSONR_OBJ) {
        atoll_errf(err, errlen, "%s: %s", path, j ? "no \"weight_map\" object" : jerr);
        rc = -1;
    }
    for (const jsonr *e = map ? map->child : NULL; e && !rc; e = e->next)
        if (e->type != JSONR_STR) {
            atoll_errf(err, errlen, "%s: weight_map's %s is not a file name", path, e->key);
            rc = -1;
        } else {
            rc = im_open_file(s, dir, e->str, err, errlen);
        }
    jsonr_free(j);
    return rc;
}

/* The tensor `name` (or, for GPT-2, the same without "transformer.", as the
 * hub's GPT-2 files keep it), marked used; NULL when no file has it. */
static const st_tensor *im_find(im_shards *s, const char *name, int *file)
{
    const char *names[2] = { name, !strncmp(name, "transformer.", 12) ? name + 12 : NULL };
    for (int k = 0; k < 2 && names[k]; k++)
        for (int i = 0; i < s->nf; i++) {
            const st_tensor *t = st_find(&s->f[i], names[k]);
            if (t) {
                s->used[i][t - s->f[i].t] = 1;
                *file = i;
                return t;
            }
        }
    return NULL;
}

/* Rows a tensor may hold fewer of than the model: the vocabulary's, padded with zeros */
static int im_vocab_rows(const eng_param *p)
{
    return !strcmp(p->name, "wte.weight") || !strcmp(p->name, "model.embed_tokens.weight") ||
           !strcmp(p->name, "lm_head.weight");
}

/* Export's map run backwards: a Hugging Face tensor `hf` (shape of the export's
 * entry, rows up to hf_rows) into the engine's tensor `out` (s->from's shape). */
static void im_place(const ex_src *s, float *hf, int64_t hf_rows, float *out)
{
    const eng_param *p = s->from;
    if (s->kind == EX_COPY) {
        size_t cols = p->ndim == 2 ? (size_t)p->full[1] : 1, have = (size_t)hf_rows * cols;
        memcpy(out, hf, have * sizeof(float));
        memset(out + have, 0, (p->numel - have) * sizeof(float)); /* padded vocabulary rows */
    } else {
        ex_move(s, out, hf, 0);
    }
    if (p->plus_one)
        for (size_t i = 0; i < p->numel; i++) out[i] -= 1.0f;
}

/* A tensor a Hugging Face file may hold that is not a weight: rope's inverse
 * frequencies, GPT-2's causal-mask buffers, a tied output layer's copy. */
static int im_ignorable(const char *name, const atoll_config *c)
{
    size_t n = strlen(name);
    static const char *const tails[3] = { ".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias" };
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(tails[i]);
        if (n >= k && !strcmp(name + n - k, tails[i]) && (i == 0 || !cfg_rmsnorm(c))) return 1;
    }
    return !c->untie_embeddings_and_output_weights && !strcmp(name, "lm_head.weight");
}

int import_main(int argc, char **argv)
{
    static const char *const flags[2] = { "--hf", "--save" };
    hf_opts opt;
    int prc = parse_opts(&opt, argc, argv, "import", flags, im_usage);
    if (prc) return prc > 0 ? 0 : 2;
    const char *hf_dir = opt.dir[0], *save = opt.dir[1];
    long long at = opt.step < 0 ? 0 : opt.step;
    char err[1400] = "", step[1024] = "", path[1100];
    atoll_config c;
    cfg_defaults(&c);
    im_arch arch = IM_LLAMA;
    im_shards sh = { 0 };
    ex_model m = { 0 };
    m.f.fd = -1;
    ex_list l = { 0 };
    st_file out = { 0 };
    out.fd = -1;
    const st_tensor **src = NULL;
    float *hf = NULL, *buf = NULL;
    int rc = 1, created = 0, dtypes = 0;
    long long newest;
    if (im_config(hf_dir, &c, &arch, err, sizeof err) || im_open(&sh, hf_dir, err, sizeof err)) goto out;
    c.micro_batch_size = c.global_batch_size = 1;
    c.tensor_model_parallel_size = c.pipeline_model_parallel_size = 1;
    int llama = arch != IM_GPT2;
    if (!(m.tab = eng_full_table(&c, &m.n, err, sizeof err))) goto out;
    if (llama ? llama_tensors(&l, &m) : gpt2_tensors(&l, &m, &c)) {
        atoll_errf(err, sizeof err, "out of memory, or a tensor missing from the model");
        goto out;
    }
    /* every tensor there at its shape, and nothing left over, before anything is written */
    src = calloc((size_t)l.n + 1, sizeof *src);
    size_t most = 1;
    for (int i = 0; src && i < l.n; i++) {
        const st_tensor *want = &l.t[i];
        int file;
        const st_tensor *t = im_find(&sh, want->name, &file);
        char ws[64], ts[64];
        st_shape_str(ws, sizeof ws, want->ndim, want->shape);
        if (!t) {
            atoll_errf(err, sizeof err, "--hf %s: tensor '%s' (%s) is in none of its files; config.json describes a "
                       "model that has it", hf_dir, want->name, ws);
            goto out;
        }
        st_shape_str(ts, sizeof ts, t->ndim, t->shape);
        int rows_ok = t->shape[0] == want->shape[0] ||
                      (l.s[i].kind == EX_COPY && im_vocab_rows(l.s[i].from) && t->shape[0] < want->shape[0]);
        if (t->ndim != want->ndim || !rows_ok || (want->ndim == 2 && t->shape[1] != want->shape[1]) ||
            t->dtype == ST_I32) {
            atoll_errf(err, sizeof err, "--hf %s: %s's '%s' is %s %s; config.json's model needs %s (a float type)",
                       hf_dir, sh.name[file], want->name, ts, t->dtype == ST_I32 ? "I32" : "", ws);
            goto out;
        }
        dtypes |= 1 << t->dtype;
        src[i] = t;
        most = ex_numel(want) > most ? ex_numel(want) : most;
    }
    if (!src) {
        atoll_errf(err, sizeof err, "out of memory");
        goto out;
    }
    for (int i = 0; i < sh.nf; i++)
        for (int k = 0; k < sh.f[i].n; k++)
            if (!sh.used[i][k] && !im_ignorable(sh.f[i].t[k].name, &c)) {
                atoll_errf(err, sizeof err, "--hf %s: %s holds '%s', which the model config.json describes has no "
                           "place for (nothing written)", hf_dir, sh.name[i], sh.f[i].t[k].name);
                goto out;
            }
    if (ckpt_latest(save, CKPT_MANIFEST, &newest, err, sizeof err) != 1) {
        if (!err[0] || strstr(err, "none of its"))
            atoll_errf(err, sizeof err, "--save %s already holds checkpoint steps: give a new directory (nothing is "
                       "overwritten)", save);
        goto out;
    }
    ckpt_step_dir(step, sizeof step, save, at);
    if (!access(step, F_OK)) {
        atoll_errf(err, sizeof err, "--save %s already holds %s: give a new directory (nothing is overwritten)",
                   save, step);
        step[0] = 0;
        goto out;
    }
    if (!(hf = malloc(most * sizeof(float))) || !(buf = malloc(most * sizeof(float)))) {
        atoll_errf(err, sizeof err, "out of memory for two tensors of %zu floats", most);
        goto out;
    }
    created = 1;
    if (ckpt_weights_create(save, at, &c, &out, err, sizeof err)) goto out;
    int written = 0;
    for (int i = 0; i < l.n; i++) {
        int file = 0;
        for (int k = 0; k < sh.nf; k++)
            if (src[i] >= sh.f[k].t && src[i] < sh.f[k].t + sh.f[k].n) file = k;
        const st_tensor *dst = st_find(&out, l.s[i].from->name);
        if (!dst || st_read_f32(&sh.f[file], src[i], hf, err, sizeof err)) {
            if (!dst) atoll_errf(err, sizeof err, "the checkpoint has no tensor %s", l.s[i].from->name);
            goto out;
        }
        im_place(&l.s[i], hf, src[i]->shape[0], buf);
        if (st_write_all(&out, dst, buf, err, sizeof err)) goto out;
        written++;
    }
    if (written != out.n) {
        atoll_errf(err, sizeof err, "%d of the model's %d tensors have no Hugging Face counterpart", out.n - written,
                   out.n);
        goto out;
    }
    if (st_close(&out) || ckpt_commit_weights(save, at, &c, err, sizeof err)) {
        if (!err[0]) atoll_errf(err, sizeof err, "%s: cannot write: %s", step, strerror(errno));
        goto out;
    }
    char from[64] = "";
    static const char *const dn[4] = { "F32", "I32", "BF16", "F16" };
    for (int d = 0; d < 4; d++)
        if (dtypes >> d & 1) snprintf(from + strlen(from), sizeof from - strlen(from), "%s%s", from[0] ? "+" : "", dn[d]);
    if (opt.json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_kstr(&w, "hf", hf_dir);
        jsonw_kstr(&w, "architecture", IM_ARCH_NAMES[arch]);
        jsonw_kint(&w, "tensors", l.n);
        jsonw_kint(&w, "files", sh.nf);
        jsonw_kstr(&w, "from", from);
        jsonw_kstr(&w, "save", save);
        jsonw_kint(&w, "step", at);
        jsonw_kstr(&w, "step_dir", step);
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
    } else {
        printf("imported %s (%s, %d tensors from %d file%s, %s to F32) as %s: train from it with atoll-train --load "
               "%s --finetune --use-checkpoint-args and a --save of its own\n", hf_dir, IM_ARCH_NAMES[arch], l.n,
               sh.nf, sh.nf > 1 ? "s" : "", from, step, save);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "atoll import: %s\n", err);
    if (rc && created && step[0]) { /* a step written in part: its files go, the directory with them */
        st_close(&out);
        snprintf(path, sizeof path, "%s/model.safetensors", step);
        unlink(path);
        rmdir(step);
    }
    st_close(&out);
    free(src);
    free(hf);
    free(buf);
    ex_free(&l);
    free(m.tab);
    im_shards_free(&sh);
    return rc;
}
