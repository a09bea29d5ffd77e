#include "checkpoint.h"
#include "errf.h"
#include "json_read.h"
#include "k_rope.h"
#include "jsonw.h"
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *OPT_SUFFIX[3] = { "master", "exp_avg", "exp_avg_sq" };
static const char *STEP_FILES[3] = { "model.safetensors", "optim.safetensors", "train_state.json" };

void ckpt_step_dir(char *out, size_t n, const char *dir, long long iteration)
{
    snprintf(out, n, "%s/iter_%07lld", dir, iteration);
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Takes a step's manifest away, durably: the step is no longer committed. 0, also
 * when it had none; -1 with errno when it cannot be removed. */
static int uncommit_step(const char *step)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/manifest.json", step);
    if (unlink(path)) return errno == ENOENT ? 0 : -1;
    fsync_dir(step);
    return 0;
}

/* ---- the placement that writes a --save directory (checkpoint.h) ---- */

static struct {
    uint64_t job; /* 0: no job's: never claims, never refused */
    uint32_t epoch;
} owner;

void ckpt_set_owner(uint64_t job, uint32_t epoch)
{
    owner.job = job;
    owner.epoch = epoch;
}

/* DIR/placement.txt opened (created with `create`), flock'ed with `lockop` (0: not
 * locked), and read: *job, *epoch (0, 0 while empty). The descriptor; -2 when it
 * does not exist and !create; -1 with err. */
static int placement_open(const char *dir, int create, int lockop, uint64_t *job, uint32_t *epoch, char *err,
                          size_t errlen)
{
    char path[1100], text[96];
    snprintf(path, sizeof path, "%s/placement.txt", dir);
    /* (read and write for a lock: NFS takes an exclusive flock only on a file open for writing) */
    int fd = open(path, (lockop || create ? O_RDWR : O_RDONLY) | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    if (fd < 0) {
        if (!create && errno == ENOENT) return -2;
        atoll_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    while (lockop && (rc = flock(fd, lockop)) && errno == EINTR) {}
    if (rc && errno != ENOSYS && errno != EOPNOTSUPP && errno != ENOLCK) { /* no flock here: unlocked */
        atoll_errf(err, errlen, "%s: cannot lock: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    unsigned long long j = 0;
    unsigned e = 0;
    if (n < 0 || (n > 0 && sscanf(text, "job %llu epoch %u", &j, &e) != 2)) {
        atoll_errf(err, errlen, "%s: %s", path, n < 0 ? strerror(errno) :
                   "not \"job J epoch E\" (the placement of the job that writes this directory); remove it when "
                   "no job writes here");
        close(fd);
        return -1;
    }
    *job = j;
    *epoch = e;
    return fd;
}

/* 0 when this process may write steps where placement.txt says (job, epoch):
 * its own placement, or none; else CKPT_SUPERSEDED with err saying which holds it. */
static int placement_check(uint64_t job, uint32_t epoch, char *err, size_t errlen)
{
    if (!job || (job == owner.job && epoch == owner.epoch)) return 0;
    if (job == owner.job)
        atoll_errf(err, errlen, "job %llu was placed again: its epoch %u holds this directory (placement.txt), and "
                   "this process, of epoch %u, is superseded: it writes nothing more here",
                   (unsigned long long)job, epoch, owner.epoch);
    else
        atoll_errf(err, errlen, "job %llu holds this directory now (placement.txt): this process, of job %llu "
                   "epoch %u, is superseded: it writes nothing more here",
                   (unsigned long long)job, (unsigned long long)owner.job, owner.epoch);
    return CKPT_SUPERSEDED;
}

/* Whether this process may write a step of dir now (a read, unlocked: the commit
 * checks again under the lock). */
int ckpt_may_write(const char *dir, char *err, size_t errlen)
{
    if (!owner.job) return 0;
    uint64_t job;
    uint32_t epoch;
    int fd = placement_open(dir, 0, 0, &job, &epoch, err, errlen);
    if (fd == -2) return 0;
    if (fd < 0) return -1;
    close(fd);
    return placement_check(job, epoch, err, errlen);
}

int ckpt_claim(const char *dir, char *err, size_t errlen)
{
    if (!owner.job) return 0;
    uint64_t job;
    uint32_t epoch;
    int fd = placement_open(dir, 1, LOCK_EX, &job, &epoch, err, errlen);
    if (fd < 0) return -1;
    int rc = 0;
    if (job == owner.job && epoch > owner.epoch) {
        rc = placement_check(job, epoch, err, errlen);
    } else if (job != owner.job || epoch != owner.epoch) {
        char text[64];
        int n = snprintf(text, sizeof text, "job %llu epoch %u\n", (unsigned long long)owner.job, owner.epoch);
        if (ftruncate(fd, 0) || pwrite(fd, text, (size_t)n, 0) != n || fsync(fd)) {
            atoll_errf(err, errlen, "%s/placement.txt: cannot write: %s", dir, strerror(errno));
            rc = -1;
        } else {
            fsync_dir(dir);
        }
    }
    close(fd); /* (and the lock with it) */
    return rc;
}

/* The tensors of the two files, from the full table: model has each tensor,
 * optim has three per tensor. */
static int layouts(const atoll_config *c, st_file *model, st_file *optim, char *err, size_t errlen)
{
    int n;
    eng_param *full = eng_full_table(c, &n, err, errlen);
    if (!full) return -1;
    st_tensor *mt = calloc((size_t)n, sizeof *mt), *ot = calloc(3 * (size_t)n, sizeof *ot);
    int rc = -1;
    if (!mt || !ot) { atoll_errf(err, errlen, "out of memory"); goto out; }
    for (int i = 0; i < n; i++) {
        st_tensor t = { .dtype = ST_F32, .ndim = full[i].ndim,
                        .shape = { full[i].full[0], full[i].ndim == 2 ? full[i].full[1] : 1 } };
        snprintf(t.name, sizeof t.name, "%s", full[i].name);
        mt[i] = t;
        for (int s = 0; s < 3; s++) {
            ot[3 * i + s] = t;
            snprintf(ot[3 * i + s].name, sizeof t.name, "%s.%s", full[i].name, OPT_SUFFIX[s]);
        }
    }
    if (st_layout(model, mt, n, "\"format\":\"pt\",\"producer\":\"atoll\"") ||
        st_layout(optim, ot, 3 * n, "\"format\":\"pt\",\"producer\":\"atoll\"")) {
        atoll_errf(err, errlen, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(full);
    free(mt);
    free(ot);
    return rc;
}

int ckpt_weights_create(const char *dir, long long iteration, const atoll_config *c, st_file *f, char *err,
                        size_t errlen)
{
    st_file optim;
    char step[1024], path[1100];
    if (layouts(c, f, &optim, err, errlen)) return -1;
    st_close(&optim);
    ckpt_step_dir(step, sizeof step, dir, iteration);
    if (atoll_mkdir_p(step, 0755)) {
        atoll_errf(err, errlen, "%s: cannot create: %s", step, strerror(errno));
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", step);
        if (!st_create(f, path, 1, err, errlen)) return 0;
    }
    st_close(f);
    return -1;
}

int ckpt_write_shards(const char *dir, long long iteration, const eng_model *m,
                      const eng_optim *o, int write_headers, char *err, size_t errlen)
{
    ckpt_part all = { 1, { m->params, o->m, o->v }, 0, m->num_floats, NULL, 0 };
    return ckpt_write_part(dir, iteration, m, &all, write_headers, err, errlen);
}

static void host_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

/* A save that failed: says which step of which --save, that it is not committed
 * and that the committed ones are untouched, and what to do when the disk is full. */
static void save_failed(const char *dir, long long iteration, char *err, size_t errlen)
{
    char why[1024];
    snprintf(why, sizeof why, "%s", err);
    int full = strstr(why, strerror(ENOSPC)) || strstr(why, strerror(EDQUOT));
    atoll_errf(err, errlen, "--save %s: step %lld not saved: %s; it is not committed, and the steps committed before "
               "it are untouched%s", dir, iteration, why,
               full ? " (the disk is full: free space there, or keep fewer steps with --save-keep N)" : "");
}

static int write_part(const char *dir, long long iteration, const eng_model *m, const ckpt_part *part,
                      int write_headers, char *err, size_t errlen);
static int remove_step(const char *step, char *err, size_t errlen);

int ckpt_write_part(const char *dir, long long iteration, const eng_model *m, const ckpt_part *part,
                    int write_headers, char *err, size_t errlen)
{
    int rc = write_part(dir, iteration, m, part, write_headers, err, errlen);
    if (rc) save_failed(dir, iteration, err, errlen);
    return rc;
}

static int write_part(const char *dir, long long iteration, const eng_model *m, const ckpt_part *part,
                      int write_headers, char *err, size_t errlen)
{
    char step[1024], path[1100];
    int may = ckpt_may_write(dir, err, errlen);
    if (may) return may;
    ckpt_step_dir(step, sizeof step, dir, iteration);
    if (atoll_mkdir_p(step, 0755)) {
        atoll_errf(err, errlen, "--save %s: cannot create %s: %s", dir, step, strerror(errno));
        return -1;
    }
    /* Re-saving a step uncommits it first, so a crash midway never leaves a
     * manifest describing files that changed under it. */
    uncommit_step(step);

    st_file mf, of;
    if (layouts(&m->cfg, &mf, &of, err, errlen)) return -1;
    size_t maxn = 1;
    for (int i = 0; i < m->nparams; i++)
        if (m->table[i].numel > maxn) maxn = m->table[i].numel;
    float *host = malloc(sizeof(float) * maxn);
    int rc = -1;
    snprintf(path, sizeof path, "%s/model.safetensors", step);
    if (!host || st_create(&mf, path, write_headers, err, errlen)) goto out;
    snprintf(path, sizeof path, "%s/optim.safetensors", step);
    if (st_create(&of, path, write_headers, err, errlen)) goto out;
    /* a snapshot is host memory already; the backend's needs its copy out */
    void (*copy)(void *, const void *, size_t) = part->host ? host_copy : m->k->to_host;
    const float *params = part->params_src ? part->params_src : m->params;
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        if (p->tied_copy) continue; /* the first stage writes wte */
        if (part->params) {
            copy(host, params + p->offset, p->numel * sizeof(float));
            if (st_write_slice(&mf, st_find(&mf, p->name), p, host, err, errlen)) goto out;
        }
        size_t lo = p->offset > part->lo ? p->offset : part->lo;
        size_t hi = p->offset + p->numel < part->hi ? p->offset + p->numel : part->hi;
        for (int s = 0; s < 3 && lo < hi; s++) {
            char nm[ENG_NAME + 16];
            snprintf(nm, sizeof nm, "%s.%s", p->name, OPT_SUFFIX[s]);
            copy(host, part->opt[s] + (lo - part->lo), (hi - lo) * sizeof(float));
            if (st_write_range(&of, st_find(&of, nm), p, host, lo - p->offset, hi - p->offset, err, errlen))
                goto out;
        }
    }
    rc = 0;
out:
    free(host);
    if (st_close(&mf) && !rc) { atoll_errf(err, errlen, "%s/model.safetensors: fsync failed", step); rc = -1; }
    if (st_close(&of) && !rc) { atoll_errf(err, errlen, "%s/optim.safetensors: fsync failed", step); rc = -1; }
    return rc;
}

/* ---- atoll64, the checksum of a step's files ----
 *
 * The data as little-endian 64-bit words; word i goes into lane i % 4 by
 *     lane = rotl(lane ^ word, 31) * P
 * (P odd). The last 1-31 bytes are zero-padded to a whole block. The byte count and
 * the four lanes are then folded into one word, h = (h ^ x) * P, and mixed (fmix64).
 * Every step is a bijection of the lane or of h, so changing any one word of a file
 * always changes its sum, and the four lanes' chains are independent: about 5 cycles
 * per 32 bytes, several times the rate a page-cache read delivers, where FNV-1a's
 * byte-serial multiply gives about 1 GB/s. tests/ckpt_sum.py is its Python twin. */
#define SUM_P 0x9e3779b97f4a7c15ULL

typedef struct {
    uint64_t lane[4], bytes;
    unsigned char part[32];
    size_t npart;
} sum_state;

static uint64_t le64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8); /* one load */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

static uint64_t rotl31(uint64_t x) { return x << 31 | x >> 33; }

static void sum_blocks(sum_state *s, const unsigned char *p, size_t nblocks)
{
    uint64_t a = s->lane[0], b = s->lane[1], c = s->lane[2], d = s->lane[3];
    for (size_t i = 0; i < nblocks; i++, p += 32) {
        a = rotl31(a ^ le64(p)) * SUM_P;
        b = rotl31(b ^ le64(p + 8)) * SUM_P;
        c = rotl31(c ^ le64(p + 16)) * SUM_P;
        d = rotl31(d ^ le64(p + 24)) * SUM_P;
    }
    s->lane[0] = a, s->lane[1] = b, s->lane[2] = c, s->lane[3] = d;
}

static void sum_init(sum_state *s)
{
    memset(s, 0, sizeof *s);
    for (int j = 0; j < 4; j++) s->lane[j] = 0x243f6a8885a308d3ULL + (uint64_t)j; /* pi's first hex digits */
}

static void sum_update(sum_state *s, const unsigned char *p, size_t n)
{
    s->bytes += n;
    if (s->npart) {
        size_t take = 32 - s->npart < n ? 32 - s->npart : n;
        memcpy(s->part + s->npart, p, take);
        s->npart += take, p += take, n -= take;
        if (s->npart < 32) return;
        sum_blocks(s, s->part, 1);
        s->npart = 0;
    }
    sum_blocks(s, p, n / 32);
    memcpy(s->part, p + n / 32 * 32, n % 32);
    s->npart = n % 32;
}

static uint64_t sum_final(sum_state *s)
{
    if (s->npart) {
        memset(s->part + s->npart, 0, 32 - s->npart);
        sum_blocks(s, s->part, 1);
    }
    uint64_t h = s->bytes;
    for (int j = 0; j < 4; j++) h = (h ^ s->lane[j]) * SUM_P;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ h >> 33;
}

/* The whole file's atoll64 (fnv 0) or, for manifests written before it, FNV-1a-64
 * (fnv 1); -1 when it cannot be read. */
static int file_sum(const char *path, int fnv, uint64_t *sum, uint64_t *bytes)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    sum_state s;
    sum_init(&s);
    uint64_t h = ENG_FNV_INIT;
    ssize_t r = -1;
    while (buf && ((r = read(fd, buf, CHUNK)) > 0 || (r < 0 && errno == EINTR))) {
        if (r < 0) continue;
        if (fnv) {
            h = eng_fnv1a(buf, (size_t)r, h);
            s.bytes += (uint64_t)r;
        } else {
            sum_update(&s, buf, (size_t)r);
        }
    }
    int bad = !buf || r < 0;
    free(buf);
    close(fd);
    if (bad) return -1;
    *bytes = s.bytes;
    *sum = fnv ? h : sum_final(&s);
    return 0;
}

int ckpt_file_checksum(const char *path, uint64_t *sum, uint64_t *bytes)
{
    return file_sum(path, 0, sum, bytes);
}

/* Writes len bytes to path via path.tmp + fsync + rename + directory fsync. */
int ckpt_write_file(const char *dir, const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const char *p = data;
    size_t left = len;
    while (fd >= 0 && left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w;
        left -= (size_t)w;
    }
    if (fd < 0 || left || fsync(fd)) {
        atoll_errf(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return -1;
    }
    close(fd);
    if (rename(tmp, path)) {
        atoll_errf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    fsync_dir(dir);
    return 0;
}

int ckpt_write_text(const char *dir, const char *path, const char *text, char *err, size_t errlen)
{
    return ckpt_write_file(dir, path, text, strlen(text), err, errlen);
}

void ckpt_note_step(eng_train_state *st, long long iteration, double loss, double lr, double grad_norm)
{
    if (st->nsteps == CKPT_STEPS) {
        memmove(st->steps, st->steps + 1, sizeof st->steps[0] * (CKPT_STEPS - 1));
        st->nsteps--;
    }
    st->steps[st->nsteps++] = (ckpt_step){ iteration, loss, lr, grad_norm };
}

/* The settings that rebuild the model, by Megatron's flag names (underscores),
 * and the tokenizer the data was prepared with (absolute paths and checksums
 * of its files, so a later reader can tell a changed file). */
static void model_info(jsonw *w, const atoll_config *c)
{
    jsonw_key(w, "model");
    jsonw_obj(w);
    jsonw_kint(w, "num_layers", c->num_layers);
    jsonw_kint(w, "hidden_size", c->hidden_size);
    jsonw_kint(w, "num_attention_heads", c->num_attention_heads);
    if (c->kv_channels) jsonw_kint(w, "kv_channels", c->kv_channels); /* a head dim other than hidden / heads */
    jsonw_kint(w, "ffn_hidden_size", cfg_ffn(c));
    jsonw_kint(w, "seq_length", c->seq_length);
    jsonw_kint(w, "max_position_embeddings", cfg_max_pos(c));
    jsonw_kint(w, "vocab_size", c->vocab_size);
    /* given (Megatron's flag): the vocabulary a run with this tokenizer takes, not the tokenizer's own padding */
    if (c->padded_vocab_size) jsonw_kint(w, "padded_vocab_size", c->padded_vocab_size);
    jsonw_kbool(w, "untie_embeddings_and_output_weights", c->untie_embeddings_and_output_weights);
    jsonw_kstr(w, "normalization", c->normalization);
    jsonw_kbool(w, "swiglu", c->swiglu);
    jsonw_kbool(w, "squared_relu", c->squared_relu);
    jsonw_kbool(w, "apply_layernorm_1p", c->apply_layernorm_1p);
    jsonw_kstr(w, "position_embedding_type", c->position_embedding_type);
    jsonw_kint(w, "rotary_base", cfg_rotary_base(c));
    jsonw_knum(w, "rotary_percent", cfg_rotary_percent(c));
    jsonw_kbool(w, "use_rope_scaling", c->use_rope_scaling);
    jsonw_knum(w, "rope_scaling_factor", cfg_rope_factor(c));
    jsonw_kint(w, "rotary_seq_len_interpolation_factor", (int)cfg_rope_interp(c));
    jsonw_knum(w, "norm_epsilon", cfg_norm_eps(c));
    jsonw_kbool(w, "disable_bias_linear", c->disable_bias_linear);
    jsonw_kbool(w, "add_qkv_bias", c->add_qkv_bias);
    jsonw_kbool(w, "qk_layernorm", c->qk_layernorm);
    jsonw_kbool(w, "group_query_attention", c->group_query_attention);
    jsonw_kint(w, "num_query_groups", cfg_kv_groups(c));
    jsonw_obj_end(w);
    jsonw_key(w, "tokenizer");
    jsonw_obj(w);
    jsonw_kstr(w, "type", c->tokenizer_type[0] ? c->tokenizer_type : "ByteLevel");
    const char *files[3][2] = { { "vocab_file", c->vocab_file }, { "merge_file", c->merge_file },
                                { "tokenizer_model", c->tokenizer_model } };
    for (int i = 0; i < 3; i++) {
        if (!files[i][1][0]) continue;
        char abs[PATH_MAX], key[32];
        uint64_t sum = 0, bytes = 0;
        jsonw_kstr(w, files[i][0], realpath(files[i][1], abs) ? abs : files[i][1]);
        if (!ckpt_file_checksum(files[i][1], &sum, &bytes)) {
            char hex[24];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)sum);
            snprintf(key, sizeof key, "%s_fnv1a64", files[i][0]);
            jsonw_kstr(w, key, hex);
        }
    }
    jsonw_obj_end(w);
}

/* See checkpoint.h. Biases on q, k and v alone (--disable-bias-linear
 * --add-qkv-bias) are Qwen2's architecture, and the query and key heads' norms
 * (--qk-layernorm) Qwen3's, with the same tensor names (q_norm, k_norm besides). */
char *ckpt_hf_llama_config(const atoll_config *c, const char *torch_dtype)
{
    int qwen3 = c->qk_layernorm, qwen2 = !qwen3 && c->disable_bias_linear && c->add_qkv_bias;
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "architectures");
    jsonw_arr(&w);
    jsonw_str(&w, qwen3 ? "Qwen3ForCausalLM" : qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    jsonw_arr_end(&w);
    jsonw_kstr(&w, "model_type", qwen3 ? "qwen3" : qwen2 ? "qwen2" : "llama");
    if (qwen3 || c->kv_channels) jsonw_kint(&w, "head_dim", cfg_head_dim(c));
    jsonw_kint(&w, "hidden_size", c->hidden_size);
    jsonw_kint(&w, "intermediate_size", cfg_ffn(c));
    jsonw_kint(&w, "num_hidden_layers", c->num_layers);
    jsonw_kint(&w, "num_attention_heads", c->num_attention_heads);
    jsonw_kint(&w, "num_key_value_heads", cfg_kv_groups(c));
    jsonw_kint(&w, "max_position_embeddings", cfg_max_pos(c));
    jsonw_kint(&w, "vocab_size", c->vocab_size);
    jsonw_knum(&w, "rms_norm_eps", cfg_norm_eps(c));
    jsonw_knum(&w, "rope_theta", cfg_rotary_base(c));
    if (c->use_rope_scaling) { /* Hugging Face's "llama3" rope type, with k_rope.h's fixed bands */
        jsonw_key(&w, "rope_scaling");
        jsonw_obj(&w);
        jsonw_kstr(&w, "rope_type", "llama3");
        jsonw_knum(&w, "factor", cfg_rope_scale(c));
        jsonw_knum(&w, "low_freq_factor", K_ROPE_LLAMA3_LOW_FREQ_FACTOR);
        jsonw_knum(&w, "high_freq_factor", K_ROPE_LLAMA3_HIGH_FREQ_FACTOR);
        jsonw_kint(&w, "original_max_position_embeddings", (int)K_ROPE_LLAMA3_ORIGINAL_MAX_POSITIONS);
        jsonw_obj_end(&w);
    } else if (cfg_rope_interp(c) != 1.0) { /* position interpolation: Hugging Face's "linear" rope type */
        jsonw_key(&w, "rope_scaling");
        jsonw_obj(&w);
        jsonw_kstr(&w, "rope_type", "linear");
        jsonw_knum(&w, "factor", cfg_rope_interp(c));
        jsonw_obj_end(&w);
    }
    jsonw_kstr(&w, "hidden_act", "silu");
    jsonw_kbool(&w, "tie_word_embeddings", !c->untie_embeddings_and_output_weights);
    jsonw_kbool(&w, "attention_bias", !c->disable_bias_linear);
    jsonw_kbool(&w, "mlp_bias", !c->disable_bias_linear);
    if (qwen2 || qwen3) jsonw_kbool(&w, "use_sliding_window", 0);
    jsonw_kstr(&w, "torch_dtype", torch_dtype);
    jsonw_obj_end(&w);
    return jsonw_take(&w);
}

static int commit_step(const char *dir, const eng_train_state *st, const atoll_config *c, int weights_only,
                       char *err, size_t errlen);

int ckpt_commit(const char *dir, const eng_train_state *st, const atoll_config *c, char *err, size_t errlen)
{
    int rc = commit_step(dir, st, c, 0, err, errlen);
    if (rc) save_failed(dir, st->iteration, err, errlen);
    return rc;
}

int ckpt_commit_weights(const char *dir, long long iteration, const atoll_config *c, char *err, size_t errlen)
{
    eng_train_state st = { .iteration = iteration };
    return commit_step(dir, &st, c, 1, err, errlen);
}

static int commit_owned(const char *dir, const eng_train_state *st, const atoll_config *c, int weights_only,
                        char *err, size_t errlen);

/* A job's commit holds placement.txt's lock from its check to the end (checkpoint.h). */
static int commit_step(const char *dir, const eng_train_state *st, const atoll_config *c, int weights_only,
                       char *err, size_t errlen)
{
    int lock = -2, rc = 0;
    uint64_t job;
    uint32_t epoch;
    if (owner.job && (lock = placement_open(dir, 0, LOCK_EX, &job, &epoch, err, errlen)) == -1) return -1;
    if (lock >= 0) rc = placement_check(job, epoch, err, errlen);
    if (!rc) rc = commit_owned(dir, st, c, weights_only, err, errlen);
    if (lock >= 0) close(lock);
    return rc;
}

/* Commits a step: its train_state.json (not for the weights alone), config.json for the
 * LLaMA family, then manifest.json listing the files with their sums (and the job's
 * placement that wrote them), and the newest step's number in
 * latest_checkpointed_iteration.txt. */
static int commit_owned(const char *dir, const eng_train_state *st, const atoll_config *c, int weights_only,
                        char *err, size_t errlen)
{
    char step[1024], path[1100], text[2048 + CKPT_STEPS * 96];
    ckpt_step_dir(step, sizeof step, dir, st->iteration);
    snprintf(path, sizeof path, "%s/train_state.json", step);
    size_t at = (size_t)snprintf(text, sizeof text,
             "{\"iteration\":%lld,\"consumed_samples\":%lld,\"seed\":%llu,"
             "\"rng\":{\"kind\":\"counter\",\"seed\":%llu},\"data\":{\"position\":%lld},\"adam_from\":%lld,"
             "\"steps\":[", st->iteration, st->consumed_samples, (unsigned long long)st->seed,
             (unsigned long long)st->seed, st->consumed_samples, st->adam_from);
    for (int i = 0; i < st->nsteps && at < sizeof text; i++) /* [iteration, loss, lr, grad norm], bit-exact */
        at += (size_t)snprintf(text + at, sizeof text - at, "%s[%lld,%.17g,%.17g,%.17g]", i ? "," : "",
                               st->steps[i].iteration, st->steps[i].loss, st->steps[i].lr, st->steps[i].grad_norm);
    if (at < sizeof text) snprintf(text + at, sizeof text - at, "]}\n");
    if (!weights_only && ckpt_write_text(step, path, text, err, errlen)) return -1;
    if (c && cfg_rmsnorm(c) && !c->apply_layernorm_1p) { /* 1p's norms hold w, not Hugging Face's 1 + w */
        char *hf = ckpt_hf_llama_config(c, "float32");
        snprintf(path, sizeof path, "%s/config.json", step);
        int rc = hf ? ckpt_write_text(step, path, hf, err, errlen) : -1;
        free(hf);
        if (rc) return -1;
    }

    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_kint(&w, "iteration", st->iteration);
    if (weights_only) jsonw_kbool(&w, "weights_only", 1);
    if (owner.job) {
        jsonw_kint(&w, "job", (long long)owner.job);
        jsonw_kint(&w, "epoch", owner.epoch);
    }
    jsonw_key(&w, "files");
    jsonw_obj(&w);
    for (int i = 0; i < (weights_only ? 1 : 3); i++) {
        uint64_t sum, bytes;
        snprintf(path, sizeof path, "%s/%s", step, STEP_FILES[i]);
        if (ckpt_file_checksum(path, &sum, &bytes)) {
            atoll_errf(err, errlen, "%s: cannot read back for its checksum: %s", path, strerror(errno));
            jsonw_free(&w);
            return -1;
        }
        char hex[24];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)sum);
        jsonw_key(&w, STEP_FILES[i]);
        jsonw_obj(&w);
        jsonw_kint(&w, "bytes", (long long)bytes);
        jsonw_kstr(&w, "atoll64", hex);
        jsonw_obj_end(&w);
    }
    jsonw_obj_end(&w);
    if (c) model_info(&w, c);
    jsonw_obj_end(&w);
    char *manifest = jsonw_take(&w);
    snprintf(path, sizeof path, "%s/manifest.json", step);
    int rc = manifest ? ckpt_write_text(step, path, manifest, err, errlen) : -1;
    free(manifest);
    if (rc) return -1;

    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    snprintf(text, sizeof text, "%lld\n", st->iteration);
    if (ckpt_write_text(dir, path, text, err, errlen)) return -1;
    /* --save-keep: the step is durable; older ones beyond the newest N go. A failure
     * to delete leaves more on disk than asked, not less: reported, not fatal. */
    if (c && c->save_keep > 0 && ckpt_prune(dir, c->save_keep, st->iteration, text, sizeof text) < 0)
        fprintf(stderr, "atoll-train: --save-keep %d: %s\n", c->save_keep, text);
    return 0;
}

int ckpt_save(const char *dir, const eng_model *m, const eng_optim *o,
              const eng_train_state *st, char *err, size_t errlen)
{
    int rc = ckpt_write_shards(dir, st->iteration, m, o, 1, err, errlen);
    if (!rc) rc = ckpt_commit(dir, st, &m->cfg, err, errlen);
    if (!rc) return 0;
    if (rc == CKPT_SUPERSEDED) return rc; /* the step is the other placement's to write, or to remove */
    /* one rank wrote all of it: its partial files go, giving back the space they hold */
    char step[1024], rmerr[256];
    ckpt_step_dir(step, sizeof step, dir, st->iteration);
    if (!remove_step(step, rmerr, sizeof rmerr) && strlen(err) + 40 < errlen)
        snprintf(err + strlen(err), errlen - strlen(err), "; its partial files were removed");
    return -1;
}

/* A step's JSON file parsed; NULL with why in jerr (why it is unreadable, or the parse error). */
static jsonr *read_json(const char *path, char *jerr, size_t n)
{
    return jsonr_read_file(path, 1u << 24, jerr, n);
}

/* Why step `step` is not usable, or NULL when it is committed and intact. */
static const char UNCOMMITTED[] = "not committed (no manifest.json: the save was interrupted)";
static const char WEIGHTS_ONLY[] = "the weights alone (no optimizer or train state: an imported model)";

static int file_size(const char *path, uint64_t *bytes)
{
    struct stat st;
    if (stat(path, &st)) return -1;
    *bytes = (uint64_t)st.st_size;
    return 0;
}

static const char *step_problem(const char *step, ckpt_need need, char *why, size_t n)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/manifest.json", step);
    if (access(path, F_OK)) return UNCOMMITTED;
    char jerr[128];
    jsonr *root = read_json(path, jerr, sizeof jerr);
    const jsonr *files = jsonr_get(root, "files");
    if (!files) {
        jsonr_free(root);
        return "corrupt (manifest.json does not parse)";
    }
    const jsonr *wo = jsonr_get(root, "weights_only");
    int weights_only = wo && wo->type == JSONR_BOOL && wo->num;
    for (int i = 0; i < 3; i++) {
        if ((need == CKPT_WEIGHTS || weights_only) && i > 0) break; /* STEP_FILES[0] is model.safetensors */
        const jsonr *e = jsonr_get(files, STEP_FILES[i]);
        /* atoll64, or FNV-1a-64 in a manifest written before it */
        const jsonr *b = jsonr_get(e, "bytes"), *s = jsonr_get(e, "atoll64"), *f = jsonr_get(e, "fnv1a64");
        int fnv = !s && f;
        if (fnv) s = f;
        uint64_t sum = 0, bytes = 0;
        snprintf(path, sizeof path, "%s/%s", step, STEP_FILES[i]);
        if (b && !s) {
            snprintf(why, n, "unreadable by this atoll (manifest.json sums %s with neither atoll64 nor fnv1a64: "
                     "written by a newer atoll?)", STEP_FILES[i]);
        } else if (!b || !s || s->type != JSONR_STR) {
            snprintf(why, n, "corrupt (manifest.json lacks an entry for %s)", STEP_FILES[i]);
        } else if (need == CKPT_MANIFEST ? file_size(path, &bytes) : file_sum(path, fnv, &sum, &bytes)) {
            snprintf(why, n, "torn (%s is missing)", STEP_FILES[i]);
        } else if (bytes != (uint64_t)b->num) {
            snprintf(why, n, "torn (%s has %llu bytes, the manifest says %.0f)", STEP_FILES[i],
                     (unsigned long long)bytes, b->num);
        } else if (need != CKPT_MANIFEST && strtoull(s->str, NULL, 16) != sum) {
            snprintf(why, n, "corrupt (%s fails its checksum)", STEP_FILES[i]);
        } else {
            continue;
        }
        jsonr_free(root);
        return why;
    }
    jsonr_free(root);
    return weights_only && need == CKPT_RESUME ? WEIGHTS_ONLY : NULL;
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The iterations of the step directories (iter_NNNNNNN) under dir, newest first,
 * in *its (caller frees; NULL when there are none). -1 with errno when dir cannot
 * be read. */
static int list_steps(const char *dir, long long **its, size_t *n)
{
    *its = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "iter_", 5)) continue;
        long long it = strtoll(e->d_name + 5, &end, 10);
        if (*end || end == e->d_name + 5 || it < 0) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            long long *ni = realloc(*its, cap * sizeof *ni);
            if (!ni) break;
            *its = ni;
        }
        (*its)[(*n)++] = it;
    }
    closedir(d);
    if (*n) qsort(*its, *n, sizeof **its, cmp_desc);
    return 0;
}

int ckpt_step_check(const char *dir, ckpt_need need, long long iteration, char *err, size_t errlen)
{
    char step[1024], why[256];
    ckpt_step_dir(step, sizeof step, dir, iteration);
    struct stat st;
    if (stat(step, &st)) {
        atoll_errf(err, errlen, "%s: %s", step, strerror(errno));
        return -1;
    }
    const char *problem = step_problem(step, need, why, sizeof why);
    if (problem) atoll_errf(err, errlen, "%s %s %s%s", step, problem == WEIGHTS_ONLY ? "holds" : "is", problem,
                            problem == WEIGHTS_ONLY ? ": train from it with --finetune and a --save of its own" : "");
    return problem ? -1 : 0;
}

int ckpt_latest(const char *dir, ckpt_need need, long long *iteration, char *err, size_t errlen)
{
    long long *its;
    size_t n;
    if (list_steps(dir, &its, &n)) {
        if (errno == ENOENT) return 1;
        atoll_errf(err, errlen, "--load %s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 1;
    size_t damaged = 0; /* committed steps whose files no longer match their manifest */
    char newest[300] = "";
    for (size_t i = 0; i < n; i++) {
        char step[1024], why[256];
        ckpt_step_dir(step, sizeof step, dir, its[i]);
        const char *problem = step_problem(step, need, why, sizeof why);
        if (!problem) {
            *iteration = its[i];
            rc = 0;
            break;
        }
        if (problem == WEIGHTS_ONLY) { /* not damaged, and an older step is not what was meant */
            atoll_errf(err, errlen, "--load %s: iter_%07lld holds %s: train from it with --finetune and a --save of "
                       "its own (its weights, a fresh optimizer, iteration 0)", dir, its[i], WEIGHTS_ONLY);
            rc = -1;
            break;
        }
        if (problem != UNCOMMITTED && !damaged++)
            snprintf(newest, sizeof newest, "iter_%07lld is %s", its[i], problem);
        fprintf(stderr, "%s: checkpoint %s is %s; trying an older step\n", program_invocation_short_name, step, problem);
    }
    /* A step that was committed and is now damaged, with nothing intact before it:
     * starting over from iteration 0 would throw the run's progress away without a
     * word, so refuse. Steps that were never committed (a save interrupted by a
     * crash, a kill or a preemption) held nothing durable: a fresh start loses
     * nothing, so a restart after a fault during the first save goes on. */
    if (rc == 1 && damaged) {
        atoll_errf(err, errlen, "--load %s: none of its %zu checkpoint step%s is intact (the newest committed one, %s); "
             "remove the damaged step directories to start from iteration 0, or point --load at an intact "
             "checkpoint", dir, n, n > 1 ? "s" : "", newest);
        rc = -1;
    }
    free(its);
    return rc;
}

/* Removes one step directory: its manifest first (so a removal cut short leaves an
 * uncommitted step, never a committed one with files missing), then the rest. */
static int remove_step(const char *step, char *err, size_t errlen)
{
    char path[1024 + 300];
    if (uncommit_step(step)) {
        atoll_errf(err, errlen, "%s/manifest.json: %s", step, strerror(errno));
        return -1;
    }
    DIR *d = opendir(step);
    if (!d) {
        atoll_errf(err, errlen, "%s: %s", step, strerror(errno));
        return -1;
    }
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", step, e->d_name);
        if (unlink(path) && errno != ENOENT && !rc) {
            atoll_errf(err, errlen, "%s: %s", path, strerror(errno));
            rc = -1;
        }
    }
    closedir(d);
    if (!rc && rmdir(step)) {
        atoll_errf(err, errlen, "%s: %s", step, strerror(errno));
        rc = -1;
    }
    return rc;
}

int ckpt_prune(const char *dir, int keep, long long newest, char *err, size_t errlen)
{
    long long *its;
    size_t n;
    if (keep < 1) return 0;
    if (list_steps(dir, &its, &n)) {
        atoll_errf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    int kept = 0, removed = 0, rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (its[i] > newest) continue; /* not this commit's business */
        char step[1024], path[1100];
        ckpt_step_dir(step, sizeof step, dir, its[i]);
        if (kept < keep) {
            snprintf(path, sizeof path, "%s/manifest.json", step);
            kept += access(path, F_OK) == 0; /* an uncommitted step between kept ones stays: it may be in progress */
            continue;
        }
        if (remove_step(step, err, errlen)) {
            rc = -1;
            break;
        }
        removed++;
    }
    free(its);
    if (removed) fsync_dir(dir);
    return rc ? -1 : removed;
}

/* Every tensor of the full model is in `f` with its shape, and nothing else is. */
static int check_file(const st_file *f, const st_file *want, const char *path, char *err, size_t errlen)
{
    for (int i = 0; i < want->n; i++) {
        const st_tensor *w = &want->t[i], *t = st_find(f, w->name);
        char ws[64], ts[64];
        st_shape_str(ws, sizeof ws, w->ndim, w->shape);
        if (!t) {
            atoll_errf(err, errlen, "%s: tensor '%s' is missing (the model needs shape %s)", path, w->name, ws);
            return -1;
        }
        st_shape_str(ts, sizeof ts, t->ndim, t->shape);
        if (t->ndim != w->ndim || t->shape[0] != w->shape[0] || (w->ndim == 2 && t->shape[1] != w->shape[1]) ||
            t->dtype != ST_F32) {
            atoll_errf(err, errlen, "%s: tensor '%s' has shape %s, the model needs %s (F32)", path, w->name, ts, ws);
            return -1;
        }
    }
    for (int i = 0; i < f->n; i++)
        if (!st_find(want, f->t[i].name)) {
            atoll_errf(err, errlen, "%s: tensor '%s' is not part of this model (different --num-layers or "
                 "--untie-embeddings-and-output-weights?)", path, f->t[i].name);
            return -1;
        }
    return 0;
}

static int load_state(const char *step, eng_train_state *st, char *err, size_t errlen)
{
    char path[1100], jerr[128];
    snprintf(path, sizeof path, "%s/train_state.json", step);
    jsonr *root = read_json(path, jerr, sizeof jerr);
    const jsonr *it = jsonr_get(root, "iteration"), *cs = jsonr_get(root, "consumed_samples"),
                *sd = jsonr_get(root, "seed");
    if (!it || !cs || !sd) {
        atoll_errf(err, errlen, "%s: needs iteration, consumed_samples and seed (%s)", path, jerr);
        jsonr_free(root);
        return -1;
    }
    st->iteration = (long long)it->num;
    st->consumed_samples = (long long)cs->num;
    st->seed = (uint64_t)sd->num;
    const jsonr *af = jsonr_get(root, "adam_from"); /* absent in older checkpoints: the moments are the run's */
    st->adam_from = af && af->num >= 0 && af->num <= st->iteration ? (long long)af->num : 0;
    st->nsteps = 0;
    const jsonr *steps = jsonr_get(root, "steps"); /* absent in older checkpoints */
    for (int i = 0; steps && i < steps->count && st->nsteps < CKPT_STEPS; i++) {
        const jsonr *e = jsonr_at(steps, i);
        const jsonr *v[4] = { jsonr_at(e, 0), jsonr_at(e, 1), jsonr_at(e, 2), jsonr_at(e, 3) };
        if (!v[0] || !v[1] || !v[2] || !v[3]) continue;
        st->steps[st->nsteps++] = (ckpt_step){ (long long)v[0]->num, v[1]->num, v[2]->num, v[3]->num };
    }
    jsonr_free(root);
    return 0;
}

int ckpt_load(const char *dir, long long iteration, eng_model *m, eng_optim *o,
              eng_train_state *st, char *err, size_t errlen)
{
    char step[1024], mpath[1100], opath[1100];
    ckpt_step_dir(step, sizeof step, dir, iteration);
    snprintf(mpath, sizeof mpath, "%s/model.safetensors", step);
    snprintf(opath, sizeof opath, "%s/optim.safetensors", step);
    st_file wm, wo, fm = { .fd = -1 }, fo = { .fd = -1 };
    if (layouts(&m->cfg, &wm, &wo, err, errlen)) return -1;
    int rc = -1;
    float *host = NULL;
    eng_train_state tmp;
    if (st_open(&fm, mpath, err, errlen) || (o && st_open(&fo, opath, err, errlen))) goto out;
    if (check_file(&fm, &wm, mpath, err, errlen) || (o && check_file(&fo, &wo, opath, err, errlen))) {
        rc = CKPT_MISMATCH;
        goto out;
    }
    if (o && load_state(step, &tmp, err, errlen)) goto out;
    size_t maxn = 1;
    for (int i = 0; i < m->nparams; i++)
        if (m->table[i].numel > maxn) maxn = m->table[i].numel;
    host = malloc(sizeof(float) * maxn);
    if (!host) { atoll_errf(err, errlen, "out of memory"); goto out; }
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        if (!o) { /* the weights alone: model.safetensors */
            if (st_read_slice(&fm, st_find(&fm, p->name), p, host, err, errlen)) goto out;
            m->k->to_device(m->params + p->offset, host, p->numel * sizeof(float));
            continue;
        }
        float *dst[3] = { m->params, o->m, o->v };
        for (int s = 0; s < 3; s++) {
            char nm[ENG_NAME + 16];
            snprintf(nm, sizeof nm, "%s.%s", p->name, OPT_SUFFIX[s]);
            if (st_read_slice(&fo, st_find(&fo, nm), p, host, err, errlen)) goto out;
            m->k->to_device(dst[s] + p->offset, host, p->numel * sizeof(float));
        }
    }
    if (o) *st = tmp;
    rc = 0;
out:
    free(host);
    st_close(&wm);
    st_close(&wo);
    st_close(&fm);
    st_close(&fo);
    return rc;
}

/* The manifest's model and tokenizer into c; with `keep_given`, a setting c
 * already holds other than its default is kept (the command line wins), and
 * what was taken is listed in `taken` as flags. */
static int read_model(const char *dir, long long iteration, atoll_config *c, int keep_given, char *taken,
                      size_t takenlen, char *err, size_t errlen)
{
    char step[1024], path[1100], jerr[128];
    size_t at = 0;
    if (takenlen) taken[0] = 0;
    ckpt_step_dir(step, sizeof step, dir, iteration);
    snprintf(path, sizeof path, "%s/manifest.json", step);
    jsonr *root = read_json(path, jerr, sizeof jerr);
    const jsonr *m = jsonr_get(root, "model"), *t = jsonr_get(root, "tokenizer");
    if (!m || !t) {
        atoll_errf(err, errlen, "%s: %s", path, root ? "no \"model\" and \"tokenizer\" (a checkpoint written before atoll "
             "recorded them)" : jerr);
        jsonr_free(root);
        return -1;
    }
    /* every member through the config's own parser, as flags are */
    int rc = 0;
    for (const jsonr *v = m->child; v && !rc; v = v->next) {
        char val[64], inner[256] = "";
        const char *s = v->type == JSONR_STR ? v->str : val;
        if (v->type == JSONR_BOOL) snprintf(val, sizeof val, "%s", v->num ? "true" : "false");
        else if (v->type == JSONR_NUM) snprintf(val, sizeof val, "%.17g", v->num);
        else if (v->type != JSONR_STR) continue;
        if (keep_given && cfg_is_default(c, v->key) == 0) continue;
        atoll_config before = *c;
        if (cfg_set(c, v->key, s, inner, sizeof inner) != CFG_OK) {
            atoll_errf(err, errlen, "%s: model.%s: %s", path, v->key, inner[0] ? inner : "not a setting atoll knows");
            rc = -1;
        } else if (at < takenlen && memcmp(&before, c, sizeof before)) {
            int n = snprintf(taken + at, takenlen - at, "%s--%s", at ? " " : "", v->key);
            for (size_t k = at; n > 0 && k < takenlen && taken[k]; k++)
                if (taken[k] == '_') taken[k] = '-';
            if (n > 0) at += (size_t)n;
            if (n > 0 && at < takenlen && v->type != JSONR_BOOL) at += (size_t)snprintf(taken + at, takenlen - at, " %s", s);
        }
    }
    static const char *const tok_keys[4] = { "type", "vocab_file", "merge_file", "tokenizer_model" };
    char *tok[4] = { c->tokenizer_type, c->vocab_file, c->merge_file, c->tokenizer_model };
    const size_t toklen[4] = { sizeof c->tokenizer_type, sizeof c->vocab_file, sizeof c->merge_file,
                               sizeof c->tokenizer_model };
    for (int i = 0; i < 4 && !rc; i++) {
        const jsonr *from = jsonr_get(t, tok_keys[i]);
        if (!from || from->type != JSONR_STR || (keep_given && tok[i][0])) continue;
        if (keep_given && i == 0 && !strcmp(from->str, "ByteLevel")) continue; /* "" is byte-level */
        snprintf(tok[i], toklen[i], "%s", from->str);
        if (keep_given && at < takenlen) {
            static const char *const flags[4] = { "tokenizer-type", "vocab-file", "merge-file", "tokenizer-model" };
            at += (size_t)snprintf(taken + at, takenlen - at, "%s--%s %s", at ? " " : "", flags[i], from->str);
        }
    }
    jsonr_free(root);
    return rc;
}

int ckpt_read_model(const char *dir, long long iteration, atoll_config *c, char *err, size_t errlen)
{
    return read_model(dir, iteration, c, 0, NULL, 0, err, errlen);
}

int ckpt_use_args(atoll_config *c, char *taken, size_t takenlen, char *err, size_t errlen)
{
    c->use_checkpoint_args = 0;
    if (!c->load[0]) {
        atoll_errf(err, errlen, "--use-checkpoint-args takes the model from the checkpoint in --load: give --load DIR");
        return -1;
    }
    long long it;
    int rc = ckpt_latest(c->load, CKPT_MANIFEST, &it, err, errlen);
    if (rc == 1)
        atoll_errf(err, errlen, "--use-checkpoint-args: --load %s holds no committed checkpoint to take the model from",
                   c->load);
    if (rc) return -1;
    int n = snprintf(taken, takenlen, "iter_%07lld: ", it);
    size_t head = n > 0 && (size_t)n < takenlen ? (size_t)n : 0;
    if (read_model(c->load, it, c, 1, taken + head, takenlen - head, err, errlen)) return -1;
    if (!taken[head]) snprintf(taken + head, takenlen - head, "nothing (every model flag was given)");
    return 0;
}
