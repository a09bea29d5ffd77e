#include "indexed_dataset.h"
#include "errf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[9] = { 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0 };
#define HDR_LEN (9 + 8 + 1 + 8 + 8)

static int elem_size(int code)
{
    switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    case 5: case 6: return 8;
    }
    return 0;
}

static void *map_file(const char *path, size_t *len, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        atoll_errf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        atoll_errf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    *len = (size_t)st.st_size;
    void *p = *len ? mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (*len && p == MAP_FAILED) {
        atoll_errf(err, errlen, "%s: cannot map: %s", path, strerror(errno));
        return NULL;
    }
    return p ? p : (void *)"";
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Header fields, then that the three arrays fit the .idx exactly. */
static int check_idx(idx_dataset *d, const char *path, char *err, size_t errlen)
{
    const unsigned char *p = d->idx_map;
    if (d->idx_len < HDR_LEN) {
        atoll_errf(err, errlen, "%s: truncated: %zu bytes, shorter than the %d-byte header", path, d->idx_len, HDR_LEN);
        return -1;
    }
    if (memcmp(p, MAGIC, 9)) {
        atoll_errf(err, errlen, "%s: not a Megatron indexed dataset index (magic is not MMIDIDX)", path);
        return -1;
    }
    uint64_t version = rd64(p + 9);
    if (version != 1) {
        atoll_errf(err, errlen, "%s: index version %llu; atoll reads version 1", path, (unsigned long long)version);
        return -1;
    }
    d->dtype = p[17];
    d->elem = elem_size(d->dtype);
    if (!d->elem || d->dtype == 6 || d->dtype == 7) {
        atoll_errf(err, errlen, "%s: dtype code %d is not an integer token type (1-5, 8)", path, d->dtype);
        return -1;
    }
    d->nseq = rd64(p + 18);
    d->ndoc = rd64(p + 26);
    uint64_t need = HDR_LEN;
    if (d->nseq > (1ULL << 40) || d->ndoc > (1ULL << 40) ||
        (need += d->nseq * 4 + d->nseq * 8 + d->ndoc * 8) > d->idx_len) {
        atoll_errf(err, errlen, "%s: truncated: %llu sequences and %llu documents need %llu bytes, the file has %zu",
             path, (unsigned long long)d->nseq, (unsigned long long)d->ndoc,
             (unsigned long long)need, d->idx_len);
        return -1;
    }
    /* numpy writes the arrays unaligned after the 34-byte header; copy them out
     * to aligned memory instead of reading through misaligned pointers. */
    size_t a = d->nseq * 4, b = d->nseq * 8, c = d->ndoc * 8;
    unsigned char *copy = malloc(a + b + c + 8);
    if (!copy) {
        atoll_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    memcpy(copy, p + HDR_LEN + a, b);
    memcpy(copy + b, p + HDR_LEN + a + b, c);
    memcpy(copy + b + c, p + HDR_LEN, a);
    d->pointers = (const int64_t *)copy;
    d->doc_idx = (const int64_t *)(copy + b);
    d->sizes = (const int32_t *)(copy + b + c);
    return 0;
}

int idx_open(idx_dataset *d, const char *prefix, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    char ipath[1100], bpath[1100];
    snprintf(ipath, sizeof ipath, "%s.idx", prefix);
    snprintf(bpath, sizeof bpath, "%s.bin", prefix);
    if (!(d->idx_map = map_file(ipath, &d->idx_len, err, errlen))) return -1;
    if (check_idx(d, ipath, err, errlen)) goto fail;
    if (!(d->bin_map = map_file(bpath, &d->bin_len, err, errlen))) goto fail;
    d->bin = d->bin_map;
    for (uint64_t i = 0; i < d->nseq; i++) {
        int64_t ptr = d->pointers[i], sz = d->sizes[i];
        if (sz < 0 || ptr < 0 || (uint64_t)ptr + (uint64_t)sz * (uint64_t)d->elem > d->bin_len) {
            atoll_errf(err, errlen, "%s: sequence %llu ends at byte %llu but the file has %zu bytes "
                 "(truncated .bin, or it does not belong to %s)", bpath, (unsigned long long)i,
                 (unsigned long long)((uint64_t)ptr + (uint64_t)sz * (uint64_t)d->elem), d->bin_len, ipath);
            goto fail;
        }
        if (i && ptr != d->pointers[i - 1] + (int64_t)d->sizes[i - 1] * d->elem) {
            atoll_errf(err, errlen, "%s: sequence %llu does not follow sequence %llu in %s (atoll reads "
                 "contiguous datasets)", ipath, (unsigned long long)i, (unsigned long long)i - 1, bpath);
            goto fail;
        }
    }
    for (uint64_t i = 0; i < d->ndoc; i++)
        if (d->doc_idx[i] < 0 || (uint64_t)d->doc_idx[i] > d->nseq || (i && d->doc_idx[i] < d->doc_idx[i - 1])) {
            atoll_errf(err, errlen, "%s: doc_idx[%llu] = %lld is not a sequence index in [0, %llu] in order",
                 ipath, (unsigned long long)i, (long long)d->doc_idx[i], (unsigned long long)d->nseq);
            goto fail;
        }
    return 0;
fail:
    idx_close(d);
    return -1;
}

void idx_close(idx_dataset *d)
{
    if (d->idx_map && d->idx_len) munmap(d->idx_map, d->idx_len);
    if (d->bin_map && d->bin_len) munmap(d->bin_map, d->bin_len);
    free((void *)d->pointers);
    memset(d, 0, sizeof *d);
}

int64_t idx_token(const idx_dataset *d, uint64_t i)
{
    const unsigned char *p = d->bin + (d->nseq ? (uint64_t)d->pointers[0] : 0) + i * (uint64_t)d->elem;
    switch (d->dtype) {
    case 1: return p[0];
    case 2: return (int8_t)p[0];
    case 3: { int16_t v; memcpy(&v, p, 2); return v; }
    case 8: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { int32_t v; memcpy(&v, p, 4); return v; }
    default: { int64_t v; memcpy(&v, p, 8); return v; }
    }
}

int idx_dtype_for_vocab(int vocab) { return vocab < 65500 ? 8 : 4; }

/* Both files are written under temporary names and renamed into place by
 * idx_writer_finish, so a failed run leaves an earlier dataset untouched. */
static void tmp_path(char *out, size_t n, const char *prefix, const char *ext)
{
    snprintf(out, n, "%s.%s.tmp", prefix, ext);
}

int idx_writer_open(idx_writer *w, const char *prefix, int dtype, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (dtype != 8 && dtype != 4) {
        atoll_errf(err, errlen, "indexed dataset writer: dtype code %d; atoll writes 8 (uint16) or 4 (int32)", dtype);
        return -1;
    }
    w->dtype = dtype;
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix);
    char path[1100];
    tmp_path(path, sizeof path, prefix, "bin");
    w->bin = fopen(path, "wb");
    if (!w->bin) {
        atoll_errf(err, errlen, "--output-prefix %s: cannot create %s: %s", prefix, path, strerror(errno));
        return -1;
    }
    return 0;
}

int idx_writer_add(idx_writer *w, const int32_t *tokens, size_t n, char *err, size_t errlen)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 256;
        int32_t *s = realloc(w->sizes, w->cap * sizeof *s);
        if (!s) { atoll_errf(err, errlen, "out of memory"); return -1; }
        w->sizes = s;
    }
    if (n > INT32_MAX) {
        atoll_errf(err, errlen, "%s.bin: a document of %zu tokens; at most %d per document", w->prefix, n, INT32_MAX);
        return -1;
    }
    size_t done = 0;
    while (done < n) { /* uint16 through a bounce buffer, int32 as it is */
        size_t k = n - done, wrote;
        if (w->dtype == 8) {
            uint16_t b16[4096];
            if (k > 4096) k = 4096;
            for (size_t i = 0; i < k; i++) {
                if (tokens[done + i] < 0 || tokens[done + i] > 65535) {
                    atoll_errf(err, errlen, "%s.bin: token %d does not fit the uint16 dataset", w->prefix, tokens[done + i]);
                    return -1;
                }
                b16[i] = (uint16_t)tokens[done + i];
            }
            wrote = fwrite(b16, 2, k, w->bin);
        } else {
            wrote = fwrite(tokens + done, 4, k, w->bin);
        }
        if (wrote != k) {
            atoll_errf(err, errlen, "%s.bin: write failed: %s", w->prefix, strerror(errno));
            return -1;
        }
        done += k;
    }
    w->sizes[w->n++] = (int32_t)n;
    w->tokens += n;
    return 0;
}

void idx_writer_abort(idx_writer *w)
{
    char path[1100];
    if (w->bin) fclose(w->bin);
    w->bin = NULL;
    free(w->sizes);
    w->sizes = NULL;
    tmp_path(path, sizeof path, w->prefix, "bin");
    unlink(path);
    tmp_path(path, sizeof path, w->prefix, "idx");
    unlink(path);
}

int idx_writer_finish(idx_writer *w, char *err, size_t errlen)
{
    char ipath[1100], bpath[1100], itmp[1100], btmp[1100];
    snprintf(ipath, sizeof ipath, "%s.idx", w->prefix);
    snprintf(bpath, sizeof bpath, "%s.bin", w->prefix);
    tmp_path(itmp, sizeof itmp, w->prefix, "idx");
    tmp_path(btmp, sizeof btmp, w->prefix, "bin");
    int elem = w->dtype == 8 ? 2 : 4;
    int rc = fclose(w->bin) ? -1 : 0;
    w->bin = NULL;
    FILE *f = rc ? NULL : fopen(itmp, "wb");
    if (f) {
        unsigned char hdr[HDR_LEN];
        uint64_t version = 1, ndoc = w->n + 1;
        memcpy(hdr, MAGIC, 9);
        memcpy(hdr + 9, &version, 8);
        hdr[17] = (unsigned char)w->dtype;
        memcpy(hdr + 18, &w->n, 8);
        memcpy(hdr + 26, &ndoc, 8);
        int ok = fwrite(hdr, 1, HDR_LEN, f) == HDR_LEN && fwrite(w->sizes, 4, w->n, f) == w->n;
        int64_t ptr = 0;
        for (uint64_t i = 0; ok && i < w->n; i++) {
            ok = fwrite(&ptr, 8, 1, f) == 1;
            ptr += (int64_t)w->sizes[i] * elem;
        }
        for (uint64_t i = 0; ok && i <= w->n; i++) {
            int64_t di = (int64_t)i;
            ok = fwrite(&di, 8, 1, f) == 1;
        }
        rc = (fclose(f) || !ok) ? -1 : 0;
    } else {
        rc = -1;
    }
    if (!rc && (rename(btmp, bpath) || rename(itmp, ipath))) rc = -1;
    free(w->sizes);
    w->sizes = NULL;
    if (rc) {
        atoll_errf(err, errlen, "%s: write failed: %s", ipath, strerror(errno));
        unlink(itmp);
        unlink(btmp);
    }
    return rc;
}
