/* safetensors: the file format of checkpoints (https://github.com/huggingface/safetensors):
 * 8-byte little-endian header length, a JSON header {name: {dtype, shape,
 * data_offsets:[begin,end]}, "__metadata__": {...}}, then the raw little-endian
 * tensor bytes. The header here is padded with spaces to a multiple of 8 bytes.
 *
 * Writing: the layout (header and every tensor's offset) is a pure function of
 * the tensor list, which comes from the config alone, so each rank computes it,
 * opens the same file and pwrites only its slice of each tensor at that slice's
 * offset. Reading: the header is parsed and checked against the file length
 * before any byte of data is trusted.
 *
 * Ownership: st_file owns its tensor array and header text; st_close frees them. */
#ifndef ATOLL_ENGINE_SAFETENSORS_H
#define ATOLL_ENGINE_SAFETENSORS_H

#include "model.h"

#include <stddef.h>
#include <stdint.h>

/* Checkpoints hold F32 and I32; atoll export writes BF16 too, and Hugging Face
 * models are read in BF16 and F16 as well (st_read_f32). */
typedef enum { ST_F32 = 0, ST_I32 = 1, ST_BF16 = 2, ST_F16 = 3 } st_dtype;

typedef struct st_tensor {
    char name[ENG_NAME + 16];
    st_dtype dtype;
    int ndim;         /* 1 or 2 written; up to 4 read (a Hugging Face buffer, skipped) */
    int64_t shape[4];
    uint64_t begin, end;   /* absolute file offsets of the data */
} st_tensor;

typedef struct st_file {
    st_tensor *t;
    int n;
    char *header;          /* the 8-byte length + JSON + padding */
    size_t header_len;
    uint64_t total_size;   /* file size */
    int fd;                /* when opened for reading/writing; -1 otherwise */
} st_file;

/* Lays out `n` tensors in the given order; `metadata` (may be NULL) is a JSON
 * object body such as "\"format\":\"pt\"". Returns 0 or -1 (out of memory). */
int st_layout(st_file *f, const st_tensor *tensors, int n, const char *metadata);

/* Creates (or reuses) `path` at the laid-out size; writes the header when
 * `write_header` (one rank does). Returns 0 or -1 with err naming the file. */
int st_create(st_file *f, const char *path, int write_header, char *err, size_t errlen);

/* Writes this rank's slice of tensor `t` (full logical shape t->shape) from
 * `local` (host floats of shape p->local, sliced as p describes). */
int st_write_slice(st_file *f, const st_tensor *t, const eng_param *p, const float *local,
                   char *err, size_t errlen);
/* Writes local elements [a, b) (row-major in p->local) of this rank's slice of
 * `t` from `src` (element a at src[0]): a ZeRO-1 shard's part of a tensor. */
int st_write_range(st_file *f, const st_tensor *t, const eng_param *p, const float *src, size_t a,
                   size_t b, char *err, size_t errlen);
/* Writes a whole tensor from host memory, its bytes in t's dtype. */
int st_write_all(st_file *f, const st_tensor *t, const void *data, char *err, size_t errlen);

/* Opens and validates a file: header length, JSON, dtypes, shapes matching the
 * byte ranges, ranges inside the file and not overlapping the header. */
int st_open(st_file *f, const char *path, char *err, size_t errlen);
const st_tensor *st_find(const st_file *f, const char *name);
/* The whole of `t` (F32, BF16 or F16) into `out` as floats (its elements). */
int st_read_f32(st_file *f, const st_tensor *t, float *out, char *err, size_t errlen);
/* Elements of `t`. */
uint64_t st_numel(const st_tensor *t);
/* A shape as "[a, b]" for messages (ndim 1 to 4). */
void st_shape_str(char *out, size_t n, int ndim, const int64_t *shape);
/* Reads this rank's slice of F32 tensor `t` into `local`. */
int st_read_slice(st_file *f, const st_tensor *t, const eng_param *p, float *local,
                  char *err, size_t errlen);

/* fsyncs and closes the descriptor, frees the layout. */
int st_close(st_file *f);

#endif
