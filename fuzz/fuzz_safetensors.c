/* Fuzzes the safetensors reader on the bytes of a file as atoll import gets
 * them from a model directory it did not write: the header length, the JSON
 * header (through json_read), dtypes, shapes and byte ranges, then every
 * tensor read whole as floats (F32, BF16 and F16 widened; I32 refused).
 * Invariants: nothing crashes or overflows (ASan, UBSan); a refused file or
 * tensor has a message naming the file; an accepted tensor's bytes lie inside
 * the file after the header and match its shape and dtype, and reading it gives
 * st_numel floats. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        if ((fd = memfd_create("model.safetensors", 0)) < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || (n && pwrite(fd, d, n, 0) != (ssize_t)n)) abort();
    char err[1200] = "";
    st_file f = { 0 };
    f.fd = -1;
    if (st_open(&f, path, err, sizeof err)) {
        if (!strstr(err, path)) abort();
        st_close(&f);
        return 0;
    }
    static const int width[4] = { 4, 4, 2, 2 }; /* F32, I32, BF16, F16 */
    for (int i = 0; i < f.n; i++) {
        const st_tensor *t = &f.t[i];
        uint64_t numel = st_numel(t);
        if (t->begin > t->end || t->end > f.total_size || t->begin < f.header_len || t->dtype < ST_F32 ||
            t->dtype > ST_F16 || t->end - t->begin != numel * (uint64_t)width[t->dtype])
            abort();
        char shape[128];
        st_shape_str(shape, sizeof shape, t->ndim, t->shape);
        if (st_find(&f, t->name) == NULL) abort();
        if (numel > (1u << 20)) continue; /* the bytes are there; a large buffer adds nothing */
        float *out = malloc((numel ? numel : 1) * sizeof *out);
        if (!out) abort();
        int rc = st_read_f32(&f, t, out, err, sizeof err);
        if (rc ? !strstr(err, path) && !strstr(err, t->name) : t->dtype == ST_I32) abort();
        free(out);
    }
    st_close(&f);
    return 0;
}
