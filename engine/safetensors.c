#include "safetensors.h"
#include "errf.h"
#include "json_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20) /* the format's own limit */

static const char *DTYPES[] = { "F32", "I32", "BF16", "F16" };
static const unsigned DTYPE_BYTES[] = { 4, 4, 2, 2 };

/* A growable string for the header. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if (b->s && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) { b->oom = 1; return; }
        b->s = s;
        b->cap = cap;
    }
}

int st_layout(st_file *f, const st_tensor *tensors, int n, const char *metadata)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->t = malloc(sizeof(st_tensor) * (size_t)(n ? n : 1));
    if (!f->t) return -1;
    memcpy(f->t, tensors, sizeof(st_tensor) * (size_t)n);
    f->n = n;
    sbuf b = { 0 };
    sb_printf(&b, "%s", "{");
    if (metadata) sb_printf(&b, "\"__metadata__\":{%s}", metadata);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        st_tensor *t = &f->t[i];
        uint64_t bytes = DTYPE_BYTES[t->dtype] * (uint64_t)t->shape[0] * (uint64_t)(t->ndim == 2 ? t->shape[1] : 1);
        sb_printf(&b, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", (metadata || i) ? "," : "", t->name,
                  DTYPES[t->dtype]);
        if (t->ndim == 2) sb_printf(&b, "%lld,%lld", (long long)t->shape[0], (long long)t->shape[1]);
        else sb_printf(&b, "%lld", (long long)t->shape[0]);
        sb_printf(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + bytes));
        t->begin = off;
        t->end = off + bytes;
        off += bytes;
    }
    sb_printf(&b, "%s", "}");
    while (!b.oom && b.len % 8) sb_printf(&b, "%s", " ");
    if (b.oom) { free(b.s); free(f->t); f->t = NULL; return -1; }
    f->header_len = 8 + b.len;
    f->header = malloc(f->header_len);
    if (!f->header) { free(b.s); free(f->t); f->t = NULL; return -1; }
    uint64_t hl = b.len;
    for (int i = 0; i < 8; i++) f->header[i] = (char)(hl >> (8 * i));
    memcpy(f->header + 8, b.s, b.len);
    free(b.s);
    for (int i = 0; i < n; i++) {
        f->t[i].begin += f->header_len;
        f->t[i].end += f->header_len;
    }
    f->total_size = f->header_len + off;
    return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
    const char *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int st_create(st_file *f, const char *path, int write_header, char *err, size_t errlen)
{
    f->fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (f->fd < 0) {
        atoll_errf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    if (ftruncate(f->fd, (off_t)f->total_size) ||
        (write_header && pwrite_all(f->fd, f->header, f->header_len, 0))) {
        atoll_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The slice of a [d0, d1] tensor split along dim 0 is one block of whole rows;
 * split along dim 1 it is a run of local[1] floats in each row. */
int st_write_slice(st_file *f, const st_tensor *t, const eng_param *p, const float *local,
                   char *err, size_t errlen)
{
    int rc = 0;
    if (p->shard_dim == 1) {
        for (int64_t i = 0; i < p->local[0] && !rc; i++)
            rc = pwrite_all(f->fd, local + i * p->local[1], sizeof(float) * (size_t)p->local[1],
                            t->begin + 4ULL * (uint64_t)(i * p->full[1] + p->shard_off));
    } else {
        uint64_t start = p->shard_dim == 0 ? 4ULL * (uint64_t)(p->shard_off * p->full[1]) : 0;
        rc = pwrite_all(f->fd, local, sizeof(float) * p->numel, t->begin + start);
    }
    if (rc) atoll_errf(err, errlen, "writing tensor %s: %s", t->name, strerror(errno));
    return rc;
}

/* Whole rows of a dim-0 or unsplit tensor are contiguous in the file, so the
 * range is one write; a dim-1 split is one write per (part of a) local row. */
int st_write_range(st_file *f, const st_tensor *t, const eng_param *p, const float *src, size_t a,
                   size_t b, char *err, size_t errlen)
{
    int rc = 0;
    size_t w = (size_t)p->local[1];
    if (p->shard_dim == 1) {
        for (size_t e = a; e < b && !rc;) {
            size_t i = e / w, j = e % w, n = w - j < b - e ? w - j : b - e;
            rc = pwrite_all(f->fd, src + (e - a), sizeof(float) * n,
                            t->begin + 4ULL * (uint64_t)((int64_t)i * p->full[1] + p->shard_off + (int64_t)j));
            e += n;
        }
    } else {
        uint64_t start = p->shard_dim == 0 ? 4ULL * (uint64_t)(p->shard_off * p->full[1]) : 0;
        rc = pwrite_all(f->fd, src, sizeof(float) * (b - a), t->begin + start + 4ULL * a);
    }
    if (rc) atoll_errf(err, errlen, "writing tensor %s: %s", t->name, strerror(errno));
    return rc;
}

int st_write_all(st_file *f, const st_tensor *t, const void *data, char *err, size_t errlen)
{
    if (pwrite_all(f->fd, data, (size_t)(t->end - t->begin), t->begin)) {
        atoll_errf(err, errlen, "writing tensor %s: %s", t->name, strerror(errno));
        return -1;
    }
    return 0;
}

static int parse_tensor(st_tensor *t, const jsonr *v, uint64_t data_len, char *err, size_t errlen,
                        const char *path)
{
    snprintf(t->name, sizeof t->name, "%s", v->key);
    if (strlen(v->key) >= sizeof t->name) {
        atoll_errf(err, errlen, "%s: tensor name '%.40s...' is too long", path, v->key);
        return -1;
    }
    const jsonr *dt = jsonr_get(v, "dtype"), *sh = jsonr_get(v, "shape"), *off = jsonr_get(v, "data_offsets");
    if (!dt || dt->type != JSONR_STR || !sh || sh->type != JSONR_ARR || !off || off->type != JSONR_ARR ||
        off->count != 2) {
        atoll_errf(err, errlen, "%s: tensor %s lacks dtype, shape or data_offsets", path, t->name);
        return -1;
    }
    int known = 0;
    for (int i = 0; i < (int)(sizeof DTYPES / sizeof DTYPES[0]) && !known; i++)
        if (!strcmp(dt->str, DTYPES[i])) t->dtype = (st_dtype)i, known = 1;
    if (!known) {
        atoll_errf(err, errlen, "%s: tensor %s has dtype %s; atoll reads F32, BF16, F16 and I32", path, t->name,
                   dt->str);
        return -1;
    }
    if (sh->count < 1 || sh->count > 4) {
        atoll_errf(err, errlen, "%s: tensor %s has %d dimensions; atoll reads 1 to 4", path, t->name, sh->count);
        return -1;
    }
    t->ndim = sh->count;
    uint64_t elems = 1;
    for (int i = 0; i < 4; i++) {
        const jsonr *d = jsonr_at(sh, i);
        t->shape[i] = d ? (int64_t)d->num : 1;
        if (d && (d->type != JSONR_NUM || d->num < 0 || d->num > 1e12)) {
            atoll_errf(err, errlen, "%s: tensor %s has a bad shape", path, t->name);
            return -1;
        }
        elems *= (uint64_t)t->shape[i];
    }
    double b = jsonr_at(off, 0)->num, e = jsonr_at(off, 1)->num;
    if (b < 0 || e < b || e > (double)data_len || (uint64_t)e - (uint64_t)b != DTYPE_BYTES[t->dtype] * elems) {
        atoll_errf(err, errlen, "%s: tensor %s: data_offsets [%.0f, %.0f] do not fit its shape or the "
             "file's %llu data bytes (truncated file?)", path, t->name, b, e, (unsigned long long)data_len);
        return -1;
    }
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    return 0;
}

int st_open(st_file *f, const char *path, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->fd = open(path, O_RDONLY);
    if (f->fd < 0) {
        atoll_errf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    unsigned char len8[8];
    if (fstat(f->fd, &st) || st.st_size < 8 || pread_all(f->fd, len8, 8, 0)) {
        atoll_errf(err, errlen, "%s: shorter than a safetensors header (8 bytes)", path);
        goto fail;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    if (hl > ST_MAX_HEADER || hl + 8 > (uint64_t)st.st_size) {
        atoll_errf(err, errlen, "%s: header length %llu does not fit the file's %lld bytes", path,
             (unsigned long long)hl, (long long)st.st_size);
        goto fail;
    }
    f->header_len = 8 + hl;
    f->header = malloc(hl + 1);
    if (!f->header || pread_all(f->fd, f->header, hl, 8)) {
        atoll_errf(err, errlen, "%s: cannot read the header", path);
        goto fail;
    }
    f->total_size = (uint64_t)st.st_size;
    char jerr[128];
    jsonr *root = jsonr_parse(f->header, hl, jerr, sizeof jerr);
    if (!root || root->type != JSONR_OBJ) {
        atoll_errf(err, errlen, "%s: header is not a JSON object (%s)", path, root ? "wrong type" : jerr);
        jsonr_free(root);
        goto fail;
    }
    f->t = calloc((size_t)root->count + 1, sizeof(st_tensor));
    if (!f->t) { jsonr_free(root); goto fail; }
    for (const jsonr *v = root->child; v; v = v->next) {
        if (!strcmp(v->key, "__metadata__")) continue;
        st_tensor *t = &f->t[f->n];
        if (parse_tensor(t, v, f->total_size - f->header_len, err, errlen, path)) {
            jsonr_free(root);
            goto fail;
        }
        t->begin += f->header_len;
        t->end += f->header_len;
        f->n++;
    }
    jsonr_free(root);
    return 0;
fail:
    st_close(f);
    return -1;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

void st_shape_str(char *out, size_t n, int ndim, const int64_t *shape)
{
    size_t at = 0;
    for (int i = 0; i < ndim && i < 4 && at < n; i++)
        at += (size_t)snprintf(out + at, n - at, "%s%lld", i ? ", " : "[", (long long)shape[i]);
    if (at < n) snprintf(out + at, n - at, "]");
}

uint64_t st_numel(const st_tensor *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return n;
}

/* bf16 is the top half of an fp32; f16 is 1 sign, 5 exponent (bias 15) and 10
 * fraction bits, subnormal below exponent 1. */
static float bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static float f16_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = h >> 10 & 31, frac = h & 1023, u;
    if (e == 31) { /* inf, nan */
        u = sign | 0x7f800000u | frac << 13;
    } else if (e) {
        u = sign | (e + 112) << 23 | frac << 13; /* rebias 15 -> 127 */
    } else {
        float x = (float)frac * 0x1p-24f; /* zero or subnormal: frac * 2^-24 */
        return sign ? -x : x;
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int st_read_f32(st_file *f, const st_tensor *t, float *out, char *err, size_t errlen)
{
    uint64_t n = st_numel(t);
    if (t->dtype == ST_I32) {
        atoll_errf(err, errlen, "tensor %s is I32, not a floating-point tensor", t->name);
        return -1;
    }
    if (t->dtype == ST_F32) {
        if (!pread_all(f->fd, out, 4 * n, t->begin)) return 0;
        atoll_errf(err, errlen, "reading tensor %s: short read", t->name);
        return -1;
    }
    /* 2-byte elements: read into the back half of out, widen front to back */
    uint16_t *half = (uint16_t *)(out + n) - n;
    if (pread_all(f->fd, half, 2 * n, t->begin)) {
        atoll_errf(err, errlen, "reading tensor %s: short read", t->name);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = half[i]; /* read before out[i] (which overlaps half[2i .. 2i+1] at most) is written */
        out[i] = t->dtype == ST_BF16 ? bf16_f32(h) : f16_f32(h);
    }
    return 0;
}

int st_read_slice(st_file *f, const st_tensor *t, const eng_param *p, float *local, char *err,
                  size_t errlen)
{
    int rc = 0;
    if (t->dtype != ST_F32) {
        atoll_errf(err, errlen, "tensor %s is %s; a checkpoint's tensors are F32", t->name, DTYPES[t->dtype]);
        return -1;
    }
    if (p->shard_dim == 1) {
        for (int64_t i = 0; i < p->local[0] && !rc; i++)
            rc = pread_all(f->fd, local + i * p->local[1], sizeof(float) * (size_t)p->local[1],
                           t->begin + 4ULL * (uint64_t)(i * p->full[1] + p->shard_off));
    } else {
        uint64_t start = p->shard_dim == 0 ? 4ULL * (uint64_t)(p->shard_off * p->full[1]) : 0;
        rc = pread_all(f->fd, local, sizeof(float) * p->numel, t->begin + start);
    }
    if (rc) atoll_errf(err, errlen, "reading tensor %s: short read", t->name);
    return rc;
}

int st_close(st_file *f)
{
    int rc = 0;
    if (f->fd >= 0) {
        rc = fsync(f->fd);
        if (rc && errno == EINVAL) rc = 0; /* read-only descriptors of some filesystems */
        close(f->fd);
    }
    free(f->t);
    free(f->header);
    f->t = NULL;
    f->header = NULL;
    f->fd = -1;
    return rc;
}
