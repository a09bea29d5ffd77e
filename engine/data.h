/* data: training samples for the engine.
 *
 * A source's token stream is the chosen split of an indexed dataset (documents
 * [d0, d1) by --split, their sequences back to back, each ending in the
 * end-of-document token) or, without --data-path, the built-in corpus (a short
 * English text, one document). Sample j of a source's epoch is tokens
 * [j*T, j*T + T + 1): inputs are the first T, targets the last T. The order of
 * samples in epoch e is a keyed permutation of (seed, e), so global sample g (the
 * g-th sample the job ever consumes) is a pure function of (seed, g): any
 * data-parallel layout, and a resumed run, see the same global batches.
 *
 * --data-path may name a blend, as Megatron's does: "W1 PREFIX1 W2 PREFIX2 ..."
 * (weights, any positive numbers) or "PREFIX1 PREFIX2 ..." (weighted by their
 * samples). Every block of ENG_BLEND_BLOCK global samples takes from each source
 * its share of the block, interleaved by Megatron's greedy rule (the next
 * sample goes to the source furthest below its share); each source walks its
 * own epochs in its own order (source 0's is the single-dataset order). A
 * source too light for one sample per block is refused.
 *
 * Ownership: eng_data owns the mapped datasets and the blend tables. */
#ifndef ATOLL_ENGINE_DATA_H
#define ATOLL_ENGINE_DATA_H

#include "indexed_dataset.h"

#include <stdint.h>

#define ENG_EOD_TOKEN 0 /* byte-level vocab: NUL ends a document */
#define ENG_DATA_MAX_SOURCES 256
#define ENG_BLEND_BLOCK 10000

typedef struct eng_source {
    idx_dataset ds;
    int have_ds;
    const unsigned char *builtin;
    uint64_t first_token, ntokens; /* the split's token range */
    uint64_t nsamples;             /* per epoch of this source */
    double weight;                 /* its share of the blend (1 alone) */
    char name[600];                /* "PREFIX.bin", for messages */
} eng_source;

typedef struct eng_data {
    eng_source *src;               /* [nsrc] */
    int nsrc;
    uint16_t *which;               /* blend: the source of each position of a block */
    uint32_t *rank;                /* blend: the position's index among its source's in the block */
    uint64_t per_block[ENG_DATA_MAX_SOURCES]; /* blend: samples of each source in a block */
    uint64_t nsamples;             /* in one epoch of every source together */
    int T, vocab;
    uint64_t seed;
    char source[1100];             /* "PREFIX.bin" or "a blend of N datasets: ...", for messages */
} eng_data;

/* Opens PREFIX, or the blend --data-path names (or the built-in corpus when it
 * is empty), selects the train split and checks that each source's holds at
 * least one sample of seq_len + 1 tokens. */
int eng_data_open(eng_data *d, const char *prefix, const char *split, int seq_len, int vocab,
                  uint64_t seed, char *err, size_t errlen);
/* The same for split `which` (0 train, 1 validation, 2 test), with Megatron's
 * document boundaries: cumulative rounded fractions, the last one moved so they
 * end at the document count. The built-in corpus has only a train split. */
enum { ENG_SPLIT_TRAIN = 0, ENG_SPLIT_VALID = 1, ENG_SPLIT_TEST = 2 };
int eng_data_open_split(eng_data *d, const char *prefix, const char *split, int which, int seq_len,
                        int vocab, uint64_t seed, char *err, size_t errlen);
/* All of each dataset of PREFIX (a prefix or a blend), as split `which` (its
 * sample order): --train-data-path, --valid-data-path, --test-data-path, which
 * `flag` names in messages. */
int eng_data_open_whole(eng_data *d, const char *flag, const char *prefix, int which, int seq_len, int vocab,
                        uint64_t seed, char *err, size_t errlen);
void eng_data_close(eng_data *d);

/* The blends a run opens: --data-path and --train/valid/test-data-path as given,
 * or read as Megatron reads them from --data-args-path (a text file whose words
 * are a --data-path: one prefix, or weights and prefixes) and
 * --per-split-data-args-path (a JSON object whose "train", "valid" and "test"
 * are each a string or a list of words; "valid" and "test" may be absent or
 * null). "" where none. Owns the text it read (eng_data_paths_free). */
typedef struct eng_data_paths {
    const char *blend;    /* --data-path's */
    const char *split[3]; /* ENG_SPLIT_TRAIN, _VALID, _TEST: --train/valid/test-data-path's */
    char *owned[4];
} eng_data_paths;
int eng_data_paths_load(eng_data_paths *p, const char *data_path, const char *const per_split[3],
                        const char *data_args_path, const char *per_split_args_path, char *err, size_t errlen);
void eng_data_paths_free(eng_data_paths *p);
/* 1 when --split gives split `which` a positive weight (a valid split only). */
int eng_split_weighs(const char *split, int which);

/* The source of global sample g and its index within that source's epoch. */
uint64_t eng_data_order(const eng_data *d, uint64_t g, int *source);

/* Writes global sample g: tokens[T] inputs and targets[T]. Fails (err names the
 * file) on a token outside [0, vocab). */
int eng_data_sample(const eng_data *d, uint64_t g, int32_t *tokens, int32_t *targets,
                    char *err, size_t errlen);

/* The built-in corpus text. */
const char *eng_builtin_corpus(void);

#endif
