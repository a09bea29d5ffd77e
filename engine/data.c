#include "data.h"
#include "errf.h"
#include "rng.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char CORPUS[] =
    "The harbour master kept a ledger of every boat that came into the lagoon. "
    "Each morning he wrote the name of the boat, the weight of its catch and the "
    "direction of the wind. When the wind came from the east the boats were late, "
    "because the reef turned the water white and the pilots waited for the tide. "
    "When the wind came from the west the boats were early, and the market opened "
    "before the sun was over the palms. Over the years the ledger grew into a map "
    "of the sea: which currents carried fish, which channels silted up after a storm, "
    "and which families mended their nets before the rains. Children learned to read "
    "from it, sounding out the names of boats, and old pilots argued over it in the "
    "evenings, tracing a line with a finger from one page to the next. ";

const char *eng_builtin_corpus(void) { return CORPUS; }

/* Megatron's split: cumulative rounded fractions of the document count. */
static int parse_split(const char *split, double w[3], char *err, size_t errlen)
{
    w[0] = w[1] = w[2] = 0;
    const char *s = split && *split ? split : "969,30,1";
    char *end;
    for (int i = 0; i < 3 && *s; i++) {
        w[i] = strtod(s, &end);
        if (end == s || w[i] < 0 || (*end && *end != ',' && *end != '/')) {
            atoll_errf(err, errlen, "--split '%s': expected up to three non-negative weights like 969,30,1", split);
            return -1;
        }
        s = *end ? end + 1 : end;
    }
    if (w[0] + w[1] + w[2] <= 0 || w[0] <= 0) {
        atoll_errf(err, errlen, "--split '%s': the train weight (first) must be positive", split);
        return -1;
    }
    return 0;
}

/* Megatron's split_index: cumulative rounded fractions of ndocs; the difference
 * of the last from ndocs is taken off every boundary after the first. */
static void split_bounds(const double w[3], uint64_t ndocs, uint64_t b[4])
{
    double total = w[0] + w[1] + w[2];
    int64_t idx[4] = { 0 };
    for (int i = 0; i < 3; i++) idx[i + 1] = idx[i] + llround(w[i] / total * (double)ndocs);
    int64_t diff = idx[3] - (int64_t)ndocs;
    for (int i = 1; i < 4; i++) idx[i] -= diff;
    for (int i = 0; i < 4; i++) b[i] = idx[i] < 0 ? 0 : (uint64_t)idx[i] > ndocs ? ndocs : (uint64_t)idx[i];
}

int eng_data_open_split(eng_data *d, const char *prefix, const char *split, int which, int seq_len,
                        int vocab, uint64_t seed, char *err, size_t errlen)
{
    static const char *NAMES[3] = { "train", "validation", "test" };
    memset(d, 0, sizeof *d);
    d->T = seq_len;
    d->vocab = vocab;
    d->seed = seed;
    if (!prefix || !*prefix) {
        if (which != ENG_SPLIT_TRAIN) {
            atoll_errf(err, errlen, "the built-in corpus has no %s split; give --data-path", NAMES[which]);
            return -1;
        }
        d->builtin = (const unsigned char *)CORPUS;
        d->ntokens = sizeof CORPUS; /* the text and its terminating NUL = end of document */
        snprintf(d->source, sizeof d->source, "the built-in corpus");
    } else {
        double w[3];
        if (parse_split(split, w, err, errlen)) return -1;
        if (idx_open(&d->ds, prefix, err, errlen)) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            atoll_errf(err, errlen, "--data-path %s: %s (expected the prefix of the .bin/.idx "
                       "pair that `atoll data prepare` writes)", prefix, why);
            return -1;
        }
        d->have_ds = 1;
        snprintf(d->source, sizeof d->source, "%s.bin", prefix);
        uint64_t ndocs = d->ds.ndoc ? d->ds.ndoc - 1 : 0, b[4];
        split_bounds(w, ndocs, b);
        uint64_t s0 = ndocs ? (uint64_t)d->ds.doc_idx[b[which]] : 0;
        uint64_t s1 = ndocs ? (uint64_t)d->ds.doc_idx[b[which + 1]] : 0;
        d->first_token = 0;
        for (uint64_t s = 0; s < s0; s++) d->first_token += (uint64_t)d->ds.sizes[s];
        for (uint64_t s = s0; s < s1; s++) d->ntokens += (uint64_t)d->ds.sizes[s];
    }
    if (d->ntokens < (uint64_t)seq_len + 1) {
        atoll_errf(err, errlen, "%s: the %s split (--split %s) has %llu tokens, fewer than one sample of "
             "--seq-length %d + 1", d->source, NAMES[which], split && *split ? split : "969,30,1",
             (unsigned long long)d->ntokens, seq_len);
        eng_data_close(d);
        return -1;
    }
    d->nsamples = (d->ntokens - 1) / (uint64_t)seq_len;
    return 0;
}

int eng_data_open(eng_data *d, const char *prefix, const char *split, int seq_len, int vocab,
                  uint64_t seed, char *err, size_t errlen)
{
    return eng_data_open_split(d, prefix, split, ENG_SPLIT_TRAIN, seq_len, vocab, seed, err, errlen);
}

void eng_data_close(eng_data *d)
{
    if (d->have_ds) idx_close(&d->ds);
    d->have_ds = 0;
}

uint64_t eng_data_order(const eng_data *d, uint64_t g)
{
    uint64_t epoch = g / d->nsamples, j = g % d->nsamples;
    return rng_permute(rng_key(d->seed, 0xda7a0000ULL + epoch), j, d->nsamples);
}

int eng_data_sample(const eng_data *d, uint64_t g, int32_t *tokens, int32_t *targets,
                    char *err, size_t errlen)
{
    uint64_t start = d->first_token + eng_data_order(d, g) * (uint64_t)d->T;
    for (int i = 0; i <= d->T; i++) {
        uint64_t at = start + (uint64_t)i;
        int64_t tok = d->have_ds ? idx_token(&d->ds, at) : d->builtin[at];
        if (tok < 0 || tok >= d->vocab) {
            atoll_errf(err, errlen, "%s: token %lld at position %llu is outside --vocab-size %d",
                 d->source, (long long)tok, (unsigned long long)at, d->vocab);
            return -1;
        }
        if (i < d->T) tokens[i] = (int32_t)tok;
        if (i > 0) targets[i - 1] = (int32_t)tok;
    }
    return 0;
}
