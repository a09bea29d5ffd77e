/* data: training samples for the engine.
 *
 * The token stream is the train split of an indexed dataset (documents
 * [0, d1) by --split, their sequences back to back, each ending in the
 * end-of-document token) or, without --data-path, the built-in corpus (a short
 * English text, one document). Sample j of an epoch is tokens [j*T, j*T + T + 1):
 * inputs are the first T, targets the last T. The order of samples in epoch e is
 * a keyed permutation of (seed, e), so global sample g (the g-th sample the job
 * ever consumes) is a pure function of (seed, g): any data-parallel layout,
 * and a resumed run, see the same global batches.
 *
 * Ownership: eng_data owns the mapped dataset. */
#ifndef ATOLL_ENGINE_DATA_H
#define ATOLL_ENGINE_DATA_H

#include "indexed_dataset.h"

#include <stdint.h>

#define ENG_EOD_TOKEN 0 /* byte-level vocab: NUL ends a document */

typedef struct eng_data {
    idx_dataset ds;
    int have_ds;
    const unsigned char *builtin;
    uint64_t first_token, ntokens; /* the train split's token range */
    uint64_t nsamples;             /* per epoch */
    int T, vocab;
    uint64_t seed;
    char source[1100];             /* for messages */
} eng_data;

/* Opens PREFIX (or the built-in corpus when prefix is empty), selects the train
 * split and checks it holds at least one sample of seq_len + 1 tokens. */
int eng_data_open(eng_data *d, const char *prefix, const char *split, int seq_len, int vocab,
                  uint64_t seed, char *err, size_t errlen);
/* The same for split `which` (0 train, 1 validation, 2 test), with Megatron's
 * document boundaries: cumulative rounded fractions, the last one moved so they
 * end at the document count. The built-in corpus has only a train split. */
enum { ENG_SPLIT_TRAIN = 0, ENG_SPLIT_VALID = 1, ENG_SPLIT_TEST = 2 };
int eng_data_open_split(eng_data *d, const char *prefix, const char *split, int which, int seq_len,
                        int vocab, uint64_t seed, char *err, size_t errlen);
void eng_data_close(eng_data *d);

/* Index within the epoch of global sample g. */
uint64_t eng_data_order(const eng_data *d, uint64_t g);

/* Writes global sample g: tokens[T] inputs and targets[T]. Fails (err names the
 * file) on a token outside [0, vocab). */
int eng_data_sample(const eng_data *d, uint64_t g, int32_t *tokens, int32_t *targets,
                    char *err, size_t errlen);

/* The built-in corpus text. */
const char *eng_builtin_corpus(void);

#endif
