#include "checkpoint.h"
#include "errf.h"
#include "json_read.h"
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *OPT_SUFFIX[3] = { "master", "exp_avg", "exp_avg_sq" };
static const char *STEP_FILES[3] = { "model.safetensors", "optim.safetensors", "train_state.json" };

static void errf(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

void ckpt_step_dir(char *out, size_t n, const char *dir, long long iteration)
{
    snprintf(out, n, "%s/iter_%07lld", dir, iteration);
}

static int mkdir_p(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
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
    if (!mt || !ot) { errf(err, errlen, "out of memory"); goto out; }
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
        errf(err, errlen, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(full);
    free(mt);
    free(ot);
    return rc;
}

int ckpt_write_shards(const char *dir, long long iteration, const eng_model *m,
                      const eng_optim *o, int write_headers, char *err, size_t errlen)
{
    ckpt_part all = { 1, { m->params, o->m, o->v }, 0, m->num_floats };
    return ckpt_write_part(dir, iteration, m, &all, write_headers, err, errlen);
}

int ckpt_write_part(const char *dir, long long iteration, const eng_model *m, const ckpt_part *part,
                    int write_headers, char *err, size_t errlen)
{
    char step[1024], path[1100];
    ckpt_step_dir(step, sizeof step, dir, iteration);
    if (mkdir_p(step)) {
        errf(err, errlen, "--save %s: cannot create %s: %s", dir, step, strerror(errno));
        return -1;
    }
    /* Re-saving a step uncommits it first, so a crash midway never leaves a
     * manifest describing files that changed under it. */
    snprintf(path, sizeof path, "%s/manifest.json", step);
    if (unlink(path) == 0) fsync_dir(step);

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
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        if (p->tied_copy) continue; /* the first stage writes wte */
        if (part->params) {
            m->k->to_host(host, m->params + p->offset, p->numel * sizeof(float));
            if (st_write_slice(&mf, st_find(&mf, p->name), p, host, err, errlen)) goto out;
        }
        size_t lo = p->offset > part->lo ? p->offset : part->lo;
        size_t hi = p->offset + p->numel < part->hi ? p->offset + p->numel : part->hi;
        for (int s = 0; s < 3 && lo < hi; s++) {
            char nm[ENG_NAME + 16];
            snprintf(nm, sizeof nm, "%s.%s", p->name, OPT_SUFFIX[s]);
            m->k->to_host(host, part->opt[s] + (lo - part->lo), (hi - lo) * sizeof(float));
            if (st_write_range(&of, st_find(&of, nm), p, host, lo - p->offset, hi - p->offset, err, errlen))
                goto out;
        }
    }
    rc = 0;
out:
    free(host);
    if (st_close(&mf) && !rc) { errf(err, errlen, "%s/model.safetensors: fsync failed", step); rc = -1; }
    if (st_close(&of) && !rc) { errf(err, errlen, "%s/optim.safetensors: fsync failed", step); rc = -1; }
    return rc;
}

int ckpt_file_checksum(const char *path, uint64_t *sum, uint64_t *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = malloc(CHUNK);
    uint64_t h = ENG_FNV_INIT, n = 0;
    size_t r;
    while (buf && (r = fread(buf, 1, CHUNK, f)) > 0) {
        h = eng_fnv1a(buf, r, h);
        n += r;
    }
    int bad = !buf || ferror(f);
    free(buf);
    fclose(f);
    if (bad) return -1;
    *sum = h;
    *bytes = n;
    return 0;
}

/* Writes `text` to path via path.tmp + fsync + rename + directory fsync. */
static int write_atomic(const char *dir, const char *path, const char *text, char *err, size_t errlen)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t len = strlen(text);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len || fsync(fd)) {
        errf(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    if (rename(tmp, path)) {
        errf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
        return -1;
    }
    fsync_dir(dir);
    return 0;
}

int ckpt_commit(const char *dir, const eng_train_state *st, char *err, size_t errlen)
{
    char step[1024], path[1100], text[2048];
    ckpt_step_dir(step, sizeof step, dir, st->iteration);
    snprintf(path, sizeof path, "%s/train_state.json", step);
    snprintf(text, sizeof text,
             "{\"iteration\":%lld,\"consumed_samples\":%lld,\"seed\":%llu,"
             "\"rng\":{\"kind\":\"counter\",\"seed\":%llu},\"data\":{\"position\":%lld}}\n",
             st->iteration, st->consumed_samples, (unsigned long long)st->seed,
             (unsigned long long)st->seed, st->consumed_samples);
    if (write_atomic(step, path, text, err, errlen)) return -1;

    size_t len = (size_t)snprintf(text, sizeof text, "{\"iteration\":%lld,\"files\":{", st->iteration);
    for (int i = 0; i < 3; i++) {
        uint64_t sum, bytes;
        snprintf(path, sizeof path, "%s/%s", step, STEP_FILES[i]);
        if (ckpt_file_checksum(path, &sum, &bytes)) {
            errf(err, errlen, "%s: cannot read back for its checksum: %s", path, strerror(errno));
            return -1;
        }
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "%s\"%s\":{\"bytes\":%llu,\"fnv1a64\":\"%016llx\"}", i ? "," : "",
                                STEP_FILES[i], (unsigned long long)bytes, (unsigned long long)sum);
    }
    snprintf(text + len, sizeof text - len, "}}\n");
    snprintf(path, sizeof path, "%s/manifest.json", step);
    if (write_atomic(step, path, text, err, errlen)) return -1;

    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    snprintf(text, sizeof text, "%lld\n", st->iteration);
    return write_atomic(dir, path, text, err, errlen);
}

int ckpt_save(const char *dir, const eng_model *m, const eng_optim *o,
              const eng_train_state *st, char *err, size_t errlen)
{
    if (ckpt_write_shards(dir, st->iteration, m, o, 1, err, errlen)) return -1;
    return ckpt_commit(dir, st, err, errlen);
}

/* Why step `step` is not usable, or NULL when it is committed and intact. */
static const char *step_problem(const char *step, char *why, size_t n)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/manifest.json", step);
    size_t len;
    char *text = atoll_read_file(path, 1u << 24, &len);
    if (!text) return "not committed (no manifest.json: the save was interrupted)";
    char jerr[128];
    jsonr *root = jsonr_parse(text, len, jerr, sizeof jerr);
    free(text);
    const jsonr *files = jsonr_get(root, "files");
    if (!files) {
        jsonr_free(root);
        return "corrupt (manifest.json does not parse)";
    }
    for (int i = 0; i < 3; i++) {
        const jsonr *e = jsonr_get(files, STEP_FILES[i]);
        const jsonr *b = jsonr_get(e, "bytes"), *s = jsonr_get(e, "fnv1a64");
        uint64_t sum, bytes;
        snprintf(path, sizeof path, "%s/%s", step, STEP_FILES[i]);
        if (!b || !s || s->type != JSONR_STR) {
            snprintf(why, n, "corrupt (manifest.json lacks an entry for %s)", STEP_FILES[i]);
        } else if (ckpt_file_checksum(path, &sum, &bytes)) {
            snprintf(why, n, "torn (%s is missing)", STEP_FILES[i]);
        } else if (bytes != (uint64_t)b->num) {
            snprintf(why, n, "torn (%s has %llu bytes, the manifest says %.0f)", STEP_FILES[i],
                     (unsigned long long)bytes, b->num);
        } else if (strtoull(s->str, NULL, 16) != sum) {
            snprintf(why, n, "corrupt (%s fails its checksum)", STEP_FILES[i]);
        } else {
            continue;
        }
        jsonr_free(root);
        return why;
    }
    jsonr_free(root);
    return NULL;
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ckpt_latest(const char *dir, long long *iteration, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 1;
        errf(err, errlen, "--load %s: %s", dir, strerror(errno));
        return -1;
    }
    long long *its = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "iter_", 5)) continue;
        long long it = strtoll(e->d_name + 5, &end, 10);
        if (*end || end == e->d_name + 5 || it < 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            long long *ni = realloc(its, cap * sizeof *its);
            if (!ni) break;
            its = ni;
        }
        its[n++] = it;
    }
    closedir(d);
    qsort(its, n, sizeof *its, cmp_desc);
    int rc = 1;
    for (size_t i = 0; i < n; i++) {
        char step[1024], why[256];
        ckpt_step_dir(step, sizeof step, dir, its[i]);
        const char *problem = step_problem(step, why, sizeof why);
        if (!problem) {
            *iteration = its[i];
            rc = 0;
            break;
        }
        fprintf(stderr, "atoll-train: checkpoint %s is %s; trying an older step\n", step, problem);
    }
    free(its);
    return rc;
}

static void shape_str(char *out, size_t n, int ndim, const int64_t *s)
{
    if (ndim == 2) snprintf(out, n, "[%lld, %lld]", (long long)s[0], (long long)s[1]);
    else snprintf(out, n, "[%lld]", (long long)s[0]);
}

/* Every tensor of the full model is in `f` with its shape, and nothing else is. */
static int check_file(const st_file *f, const st_file *want, const char *path, char *err, size_t errlen)
{
    for (int i = 0; i < want->n; i++) {
        const st_tensor *w = &want->t[i], *t = st_find(f, w->name);
        char ws[64], ts[64];
        shape_str(ws, sizeof ws, w->ndim, w->shape);
        if (!t) {
            errf(err, errlen, "%s: tensor '%s' is missing (the model needs shape %s)", path, w->name, ws);
            return -1;
        }
        shape_str(ts, sizeof ts, t->ndim, t->shape);
        if (t->ndim != w->ndim || t->shape[0] != w->shape[0] || (w->ndim == 2 && t->shape[1] != w->shape[1]) ||
            t->dtype != ST_F32) {
            errf(err, errlen, "%s: tensor '%s' has shape %s, the model needs %s (F32)", path, w->name, ts, ws);
            return -1;
        }
    }
    for (int i = 0; i < f->n; i++)
        if (!st_find(want, f->t[i].name)) {
            errf(err, errlen, "%s: tensor '%s' is not part of this model (different --num-layers or "
                 "--untie-embeddings-and-output-weights?)", path, f->t[i].name);
            return -1;
        }
    return 0;
}

static int load_state(const char *step, eng_train_state *st, char *err, size_t errlen)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/train_state.json", step);
    size_t len;
    char *text = atoll_read_file(path, 1u << 24, &len);
    char jerr[128] = "unreadable";
    jsonr *root = text ? jsonr_parse(text, len, jerr, sizeof jerr) : NULL;
    free(text);
    const jsonr *it = jsonr_get(root, "iteration"), *cs = jsonr_get(root, "consumed_samples"),
                *sd = jsonr_get(root, "seed");
    if (!it || !cs || !sd) {
        errf(err, errlen, "%s: needs iteration, consumed_samples and seed (%s)", path, jerr);
        jsonr_free(root);
        return -1;
    }
    st->iteration = (long long)it->num;
    st->consumed_samples = (long long)cs->num;
    st->seed = (uint64_t)sd->num;
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
    if (st_open(&fm, mpath, err, errlen) || st_open(&fo, opath, err, errlen) ||
        check_file(&fm, &wm, mpath, err, errlen) || check_file(&fo, &wo, opath, err, errlen) ||
        load_state(step, &tmp, err, errlen))
        goto out;
    size_t maxn = 1;
    for (int i = 0; i < m->nparams; i++)
        if (m->table[i].numel > maxn) maxn = m->table[i].numel;
    host = malloc(sizeof(float) * maxn);
    if (!host) { errf(err, errlen, "out of memory"); goto out; }
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        float *dst[3] = { m->params, o->m, o->v };
        for (int s = 0; s < 3; s++) {
            char nm[ENG_NAME + 16];
            snprintf(nm, sizeof nm, "%s.%s", p->name, OPT_SUFFIX[s]);
            if (st_read_slice(&fo, st_find(&fo, nm), p, host, err, errlen)) goto out;
            m->k->to_device(dst[s] + p->offset, host, p->numel * sizeof(float));
        }
    }
    *st = tmp;
    rc = 0;
out:
    free(host);
    st_close(&wm);
    st_close(&wo);
    st_close(&fm);
    st_close(&fo);
    return rc;
}
