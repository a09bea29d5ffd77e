/* indexed_dataset: Megatron-LM's memory-mapped indexed dataset (PREFIX.bin + PREFIX.idx).
 *
 * .idx layout (little-endian):
 *   9 bytes  magic "MMIDIDX\0\0"
 *   u64      version (1)
 *   u8       dtype code (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16)
 *   u64      sequence count S
 *   u64      document count D (entries of doc_idx, S + 1 when a document is one sequence)
 *   i32[S]   sizes (tokens per sequence)
 *   i64[S]   pointers (byte offset of each sequence in .bin)
 *   i64[D]   doc_idx (first sequence of each document; the last entry is S)
 * .bin is the token ids of every sequence, back to back.
 *
 * Both files are mapped read-only; every size and pointer is checked against the
 * file lengths when opening, so a truncated file is an error naming it, never a
 * read past the end. Ownership: idx_dataset owns both mappings. */
#ifndef ATOLL_ENGINE_INDEXED_DATASET_H
#define ATOLL_ENGINE_INDEXED_DATASET_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef struct idx_dataset {
    int dtype;                 /* Megatron dtype code */
    int elem;                  /* bytes per token */
    uint64_t nseq, ndoc;
    const int32_t *sizes;      /* [nseq] */
    const int64_t *pointers;   /* [nseq] */
    const int64_t *doc_idx;    /* [ndoc] */
    const unsigned char *bin;
    size_t bin_len, idx_len;
    void *idx_map, *bin_map;
} idx_dataset;

int idx_open(idx_dataset *d, const char *prefix, char *err, size_t errlen);
void idx_close(idx_dataset *d);
/* Token `i` of the .bin (a flat index over all sequences). */
int64_t idx_token(const idx_dataset *d, uint64_t i);

/* Megatron's choice of token type for a vocab: 8 (uint16) below 65500 entries,
 * else 4 (int32). */
int idx_dtype_for_vocab(int vocab);

/* Writer: appends documents (one sequence each) to PREFIX.bin, then writes
 * PREFIX.idx, as Megatron's preprocess_data.py does at document level (doc_idx
 * 0, 1, ..., S). Tokens are stored as `dtype` (8: uint16, 4: int32). Both files
 * are written under temporary names and renamed at the end, so a failed or
 * aborted run leaves any earlier PREFIX.bin/.idx as they were. */
typedef struct idx_writer {
    FILE *bin;
    int dtype;
    int32_t *sizes;
    uint64_t n, cap, tokens;
    char prefix[1024];
} idx_writer;

int idx_writer_open(idx_writer *w, const char *prefix, int dtype, char *err, size_t errlen);
/* A token outside the dtype's range is an error. */
int idx_writer_add(idx_writer *w, const int32_t *tokens, size_t n, char *err, size_t errlen);
/* Closes and removes the temporary files. */
void idx_writer_abort(idx_writer *w);
/* Writes the index, renames both files into place and closes; on failure
 * removes the temporary files. */
int idx_writer_finish(idx_writer *w, char *err, size_t errlen);

#endif
