#include "data.h"
#include "errf.h"
#include "json_read.h"
#include "rng.h"

#include <errno.h>
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

int eng_split_weighs(const char *split, int which)
{
    double w[3];
    return which >= 0 && which < 3 && !parse_split(split, w, NULL, 0) && w[which] > 0;
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

/* One source: PREFIX's split `which` (all of it when split is NULL), or the
 * built-in corpus (prefix NULL). `flag` names the setting in messages. */
static int open_source(eng_source *s, const char *flag, const char *prefix, const char *split, const double w[3],
                       int which, int seq_len, char *err, size_t errlen)
{
    static const char *NAMES[3] = { "train", "validation", "test" };
    if (!prefix) {
        if (which != ENG_SPLIT_TRAIN) {
            atoll_errf(err, errlen, "the built-in corpus has no %s split; give --data-path", NAMES[which]);
            return -1;
        }
        s->builtin = (const unsigned char *)CORPUS;
        s->ntokens = sizeof CORPUS; /* the text and its terminating NUL = end of document */
        snprintf(s->name, sizeof s->name, "the built-in corpus");
    } else {
        if (idx_open(&s->ds, prefix, err, errlen)) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            atoll_errf(err, errlen, "%s %s: %s (expected the prefix of the .bin/.idx "
                       "pair that `atoll data prepare` writes)", flag, prefix, why);
            return -1;
        }
        s->have_ds = 1;
        snprintf(s->name, sizeof s->name, "%s.bin", prefix);
        uint64_t ndocs = s->ds.ndoc ? s->ds.ndoc - 1 : 0, b[4];
        split_bounds(w, ndocs, b);
        uint64_t s0 = ndocs ? (uint64_t)s->ds.doc_idx[b[which]] : 0;
        uint64_t s1 = ndocs ? (uint64_t)s->ds.doc_idx[b[which + 1]] : 0;
        for (uint64_t q = 0; q < s0; q++) s->first_token += (uint64_t)s->ds.sizes[q];
        for (uint64_t q = s0; q < s1; q++) s->ntokens += (uint64_t)s->ds.sizes[q];
    }
    if (s->ntokens < (uint64_t)seq_len + 1 && !split && prefix) {
        atoll_errf(err, errlen, "%s %s: %s has %llu tokens, fewer than one sample of --seq-length %d + 1", flag,
                   prefix, s->name, (unsigned long long)s->ntokens, seq_len);
        return -1;
    }
    if (s->ntokens < (uint64_t)seq_len + 1) {
        atoll_errf(err, errlen, "%s: the %s split (--split %s) has %llu tokens, fewer than one sample of "
             "--seq-length %d + 1", s->name, NAMES[which], split && *split ? split : "969,30,1",
             (unsigned long long)s->ntokens, seq_len);
        return -1;
    }
    s->nsamples = (s->ntokens - 1) / (uint64_t)seq_len;
    return 0;
}

/* The words of --data-path: one prefix, "W1 P1 W2 P2 ...", or "P1 P2 ...". Fills
 * prefix[] (pointers into buf) and w[] (0: weighted by size). Returns the count. */
static int parse_blend(const char *flag, char *buf, char **prefix, double *w, char *err, size_t errlen)
{
    char *word[2 * ENG_DATA_MAX_SOURCES + 1];
    int n = 0;
    for (char *t = strtok(buf, " \t\n"); t; t = strtok(NULL, " \t\n")) {
        if (n == 2 * ENG_DATA_MAX_SOURCES) {
            atoll_errf(err, errlen, "%s: more than %d datasets", flag, ENG_DATA_MAX_SOURCES);
            return -1;
        }
        word[n++] = t;
    }
    if (!n) {
        atoll_errf(err, errlen, "%s: no prefix given", flag);
        return -1;
    }
    char *end;
    strtod(word[0], &end);
    int weighted = n > 1 && !*end;
    if (!weighted) {
        if (n > ENG_DATA_MAX_SOURCES) {
            atoll_errf(err, errlen, "%s: more than %d datasets", flag, ENG_DATA_MAX_SOURCES);
            return -1;
        }
        for (int i = 0; i < n; i++) prefix[i] = word[i], w[i] = 0;
        return n;
    }
    if (n % 2) {
        atoll_errf(err, errlen, "%s: %d words; a blend is pairs of a weight and a prefix "
                   "(\"0.3 PREFIX1 0.7 PREFIX2\"), or prefixes alone", flag, n);
        return -1;
    }
    for (int i = 0; i < n / 2; i++) {
        double x = strtod(word[2 * i], &end);
        if (*end || !(x > 0) || !isfinite(x)) {
            atoll_errf(err, errlen, "%s: '%s' (before %s) is not a positive weight; a blend is pairs of a "
                       "weight and a prefix (\"0.3 PREFIX1 0.7 PREFIX2\")", flag, word[2 * i], word[2 * i + 1]);
            return -1;
        }
        w[i] = x;
        prefix[i] = word[2 * i + 1];
    }
    return n / 2;
}

/* Megatron's greedy interleaving over one block: each position goes to the
 * source furthest below its share so far (the lowest index on a tie). */
static int build_blend(eng_data *d, const char *flag, char *err, size_t errlen)
{
    d->which = malloc(ENG_BLEND_BLOCK * sizeof *d->which);
    d->rank = malloc(ENG_BLEND_BLOCK * sizeof *d->rank);
    if (!d->which || !d->rank) {
        atoll_errf(err, errlen, "out of memory for the blend of %d datasets", d->nsrc);
        return -1;
    }
    memset(d->per_block, 0, sizeof d->per_block);
    for (uint32_t p = 0; p < ENG_BLEND_BLOCK; p++) {
        int best = 0;
        double gap = -1e300;
        for (int k = 0; k < d->nsrc; k++) {
            double e = d->src[k].weight * (double)(p + 1) - (double)d->per_block[k];
            if (e > gap) gap = e, best = k;
        }
        d->which[p] = (uint16_t)best;
        d->rank[p] = (uint32_t)d->per_block[best]++;
    }
    for (int k = 0; k < d->nsrc; k++)
        if (!d->per_block[k]) {
            atoll_errf(err, errlen, "%s: %s has %.3g of the blend, less than one sample in %d; give it "
                       "more weight or leave it out", flag, d->src[k].name, d->src[k].weight, ENG_BLEND_BLOCK);
            return -1;
        }
    return 0;
}

/* split NULL: all of each dataset, as split `which` */
static int open_data(eng_data *d, const char *flag, const char *prefix, const char *split, int which, int seq_len,
                     int vocab, uint64_t seed, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->T = seq_len;
    d->vocab = vocab;
    d->seed = seed;
    char *buf = strdup(prefix ? prefix : "");
    char *names[ENG_DATA_MAX_SOURCES];
    double w[ENG_DATA_MAX_SOURCES], sw[3];
    int n = 0, rc = -1;
    if (!buf) {
        atoll_errf(err, errlen, "out of memory");
        return -1;
    }
    if (!buf[strspn(buf, " \t\n")]) { /* empty: the built-in corpus */
        n = 1;
        names[0] = NULL;
        w[0] = 1;
    } else if ((n = parse_blend(flag, buf, names, w, err, errlen)) < 0 ||
               (split && parse_split(split, sw, err, errlen))) {
        goto out;
    }
    if (!split) {
        sw[0] = sw[1] = sw[2] = 0;
        sw[which] = 1;
    }
    if (!(d->src = calloc((size_t)n, sizeof *d->src))) {
        atoll_errf(err, errlen, "out of memory");
        goto out;
    }
    d->nsrc = n;
    double total = 0;
    for (int k = 0; k < n; k++) {
        if (open_source(&d->src[k], flag, names[k], split, sw, which, seq_len, err, errlen)) goto out;
        d->src[k].weight = w[k] > 0 ? w[k] : (double)d->src[k].nsamples;
        total += d->src[k].weight;
        d->nsamples += d->src[k].nsamples;
    }
    for (int k = 0; k < n; k++) d->src[k].weight /= total;
    if (n == 1) {
        snprintf(d->source, sizeof d->source, "%s", d->src[0].name);
    } else {
        size_t at = (size_t)snprintf(d->source, sizeof d->source, "a blend of %d datasets:", n);
        for (int k = 0; k < n && at < sizeof d->source; k++)
            at += (size_t)snprintf(d->source + at, sizeof d->source - at, "%s %s %.1f%%", k ? "," : "",
                                   d->src[k].name, 100 * d->src[k].weight);
        if (build_blend(d, flag, err, errlen)) goto out;
    }
    rc = 0;
out:
    free(buf);
    if (rc) eng_data_close(d);
    return rc;
}

#define DATA_ARGS_MAX (16u << 20) /* bytes of an args file: far more than 256 prefixes take */

/* The words of `text` joined by single spaces, in a new string (NULL: out of memory). */
static char *join_words(const char *text)
{
    char *out = malloc(strlen(text) + 1), *o = out;
    if (!out) return NULL;
    for (const char *t = text; *t;) {
        size_t sp = strspn(t, " \t\r\n"), w;
        t += sp;
        if (!*t) break;
        w = strcspn(t, " \t\r\n");
        if (o != out) *o++ = ' ';
        memcpy(o, t, w);
        o += w;
        t += w;
    }
    *o = 0;
    return out;
}

/* A JSON string or list of words (strings, or numbers for weights) as one blend string. */
static char *json_words(const jsonr *v, const char *path, const char *key, char *err, size_t errlen)
{
    if (!v || v->type == JSONR_NULL) return strdup("");
    if (v->type == JSONR_STR) return join_words(v->str);
    if (v->type != JSONR_ARR) {
        atoll_errf(err, errlen, "--per-split-data-args-path %s: \"%s\" is neither a string nor a list of weights and "
                   "prefixes (e.g. [\"0.3\", \"/data/a\", \"0.7\", \"/data/b\"])", path, key);
        return NULL;
    }
    size_t len = 1;
    for (const jsonr *e = v->child; e; e = e->next) len += (e->type == JSONR_STR ? e->len : 32) + 1;
    char *out = malloc(len), *o = out;
    if (!out) return NULL;
    *o = 0;
    for (const jsonr *e = v->child; e; e = e->next) {
        if (e->type != JSONR_STR && e->type != JSONR_NUM) {
            atoll_errf(err, errlen, "--per-split-data-args-path %s: \"%s\" holds an element that is neither a prefix "
                       "nor a weight", path, key);
            free(out);
            return NULL;
        }
        o += e->type == JSONR_STR ? sprintf(o, "%s%s", o == out ? "" : " ", e->str)
                                  : sprintf(o, "%s%.17g", o == out ? "" : " ", e->num);
    }
    return out;
}

int eng_data_paths_load(eng_data_paths *p, const char *data_path, const char *const per_split[3],
                        const char *data_args_path, const char *per_split_args_path, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    if (err && errlen) err[0] = 0; /* so an empty message below can only mean out of memory */
    p->blend = data_path;
    for (int i = 0; i < 3; i++) p->split[i] = per_split[i];
    if (data_args_path && *data_args_path) {
        size_t n;
        char *text = atoll_read_file(data_args_path, DATA_ARGS_MAX, &n);
        if (!text) {
            atoll_errf(err, errlen, "--data-args-path %s: cannot read it: %s", data_args_path, strerror(errno));
            return -1;
        }
        p->owned[3] = join_words(text);
        free(text);
        if (!p->owned[3]) goto oom;
        if (!*p->owned[3]) {
            atoll_errf(err, errlen, "--data-args-path %s: the file names no prefix; expected a --data-path's words "
                       "(\"PREFIX\" or \"0.3 PREFIX1 0.7 PREFIX2\")", data_args_path);
            eng_data_paths_free(p);
            return -1;
        }
        p->blend = p->owned[3];
    }
    if (per_split_args_path && *per_split_args_path) {
        char why[512];
        jsonr *root = jsonr_read_file(per_split_args_path, DATA_ARGS_MAX, why, sizeof why);
        if (!root || root->type != JSONR_OBJ || !jsonr_get(root, "train")) {
            atoll_errf(err, errlen, "--per-split-data-args-path %s: %s", per_split_args_path,
                       root ? "expected a JSON object with \"train\" (and \"valid\", \"test\"), each a list of "
                              "weights and prefixes or a string" : why);
            jsonr_free(root);
            return -1;
        }
        static const char *const keys[3] = { "train", "valid", "test" };
        for (int i = 0; i < 3; i++) {
            if (!(p->owned[i] = json_words(jsonr_get(root, keys[i]), per_split_args_path, keys[i], err, errlen))) {
                if (!err || !*err) atoll_errf(err, errlen, "out of memory");
                jsonr_free(root);
                eng_data_paths_free(p);
                return -1;
            }
            p->split[i] = p->owned[i];
        }
        jsonr_free(root);
        if (!*p->split[ENG_SPLIT_TRAIN]) {
            atoll_errf(err, errlen, "--per-split-data-args-path %s: \"train\" names no prefix", per_split_args_path);
            eng_data_paths_free(p);
            return -1;
        }
    }
    return 0;
oom:
    atoll_errf(err, errlen, "out of memory");
    eng_data_paths_free(p);
    return -1;
}

void eng_data_paths_free(eng_data_paths *p)
{
    for (int i = 0; i < 4; i++) free(p->owned[i]);
    memset(p, 0, sizeof *p);
}

int eng_data_open_split(eng_data *d, const char *prefix, const char *split, int which, int seq_len,
                        int vocab, uint64_t seed, char *err, size_t errlen)
{
    return open_data(d, "--data-path", prefix, split, which, seq_len, vocab, seed, err, errlen);
}

int eng_data_open_whole(eng_data *d, const char *flag, const char *prefix, int which, int seq_len, int vocab,
                        uint64_t seed, char *err, size_t errlen)
{
    return open_data(d, flag, prefix, NULL, which, seq_len, vocab, seed, err, errlen);
}

int eng_data_open(eng_data *d, const char *prefix, const char *split, int seq_len, int vocab,
                  uint64_t seed, char *err, size_t errlen)
{
    return eng_data_open_split(d, prefix, split, ENG_SPLIT_TRAIN, seq_len, vocab, seed, err, errlen);
}

void eng_data_close(eng_data *d)
{
    for (int k = 0; d->src && k < d->nsrc; k++)
        if (d->src[k].have_ds) idx_close(&d->src[k].ds);
    free(d->src);
    free(d->which);
    free(d->rank);
    d->src = NULL;
    d->which = NULL;
    d->rank = NULL;
    d->nsrc = 0;
}

uint64_t eng_data_order(const eng_data *d, uint64_t g, int *source)
{
    int k = 0;
    uint64_t m = g; /* the sample's index in its source's sequence of samples */
    if (d->nsrc > 1) {
        uint64_t p = g % ENG_BLEND_BLOCK;
        k = d->which[p];
        m = g / ENG_BLEND_BLOCK * d->per_block[k] + d->rank[p];
    }
    if (source) *source = k;
    const eng_source *s = &d->src[k];
    uint64_t epoch = m / s->nsamples, j = m % s->nsamples, key = rng_key(d->seed, 0xda7a0000ULL + epoch);
    if (k) key = rng_key(key, 0xb1e0d000ULL + (uint64_t)k); /* source 0 keeps the single-dataset order */
    return rng_permute(key, j, s->nsamples);
}

int eng_data_sample(const eng_data *d, uint64_t g, int32_t *tokens, int32_t *targets,
                    char *err, size_t errlen)
{
    int k;
    uint64_t j = eng_data_order(d, g, &k);
    const eng_source *s = &d->src[k];
    uint64_t start = s->first_token + j * (uint64_t)d->T;
    for (int i = 0; i <= d->T; i++) {
        uint64_t at = start + (uint64_t)i;
        int64_t tok = s->have_ds ? idx_token(&s->ds, at) : s->builtin[at];
        if (tok < 0 || tok >= d->vocab) {
            atoll_errf(err, errlen, "%s: token %lld at position %llu is outside --vocab-size %d",
                 s->name, (long long)tok, (unsigned long long)at, d->vocab);
            return -1;
        }
        if (i < d->T) tokens[i] = (int32_t)tok;
        if (i > 0) targets[i - 1] = (int32_t)tok;
    }
    return 0;
}
