/* Data: `atoll data prepare` output read back through the indexed-dataset
 * reader, the split, sample contents, a sample order that is a permutation
 * depending only on (seed, epoch, index), and every malformed-file check. */
#include "check.h"
#include "data.h"
#include "rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int data_prepare_main(int argc, char **argv);

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static int prepare(const char *a, const char *b, const char *prefix)
{
    char *argv[] = { "prepare", "--input", (char *)a, (char *)b, "--output-prefix", (char *)prefix, NULL };
    return data_prepare_main(b ? 6 : 5, b ? argv : (char *[]){ "prepare", "--input", (char *)a,
                                                                "--output-prefix", (char *)prefix, NULL });
}

static void test_prepare_and_read(void)
{
    write_file("doc1.txt", "abcdefghij");
    write_file("doc2.txt", "0123456789ABCDEFGHIJ");
    CHECK(prepare("doc1.txt", "doc2.txt", "two") == 0, "prepare");
    idx_dataset d;
    char err[512] = "";
    CHECK(idx_open(&d, "two", err, sizeof err) == 0, "open: %s", err);
    CHECK(d.nseq == 2 && d.ndoc == 3 && d.dtype == 8 && d.sizes[0] == 11 && d.sizes[1] == 21,
          "index: %llu seqs, %llu docs, dtype %d", (unsigned long long)d.nseq, (unsigned long long)d.ndoc, d.dtype);
    CHECK(idx_token(&d, 0) == 'a' && idx_token(&d, 10) == ENG_EOD_TOKEN && idx_token(&d, 11) == '0' &&
          idx_token(&d, 31) == ENG_EOD_TOKEN, "tokens are bytes, each document ends with EOD");
    idx_close(&d);

    eng_data dd;
    CHECK(eng_data_open(&dd, "two", "1,1,0", 4, 256, 9, err, sizeof err) == 0, "open split: %s", err);
    CHECK(dd.src[0].ntokens == 11 && dd.nsamples == 2, "split 1,1: train is the first document (%llu tokens)",
          (unsigned long long)dd.src[0].ntokens);
    int32_t tok[4], tgt[4];
    CHECK(eng_data_sample(&dd, 0, tok, tgt, err, sizeof err) == 0, "sample");
    CHECK(tgt[0] == tok[1] && tgt[2] == tok[3] && (tok[0] == 'a' || tok[0] == 'e'), "targets are inputs shifted by one");
    eng_data_close(&dd);
    CHECK(eng_data_open_split(&dd, "two", "1,1,0", ENG_SPLIT_VALID, 4, 256, 9, err, sizeof err) == 0 &&
              dd.src[0].ntokens == 21 && dd.src[0].first_token == 11, "validation split is the second document: %s", err);
    eng_data_close(&dd);
    CHECK(eng_data_open_split(&dd, "two", "969,30,1", ENG_SPLIT_VALID, 4, 256, 9, err, sizeof err) == -1 &&
              strstr(err, "validation split"), "empty validation split: %s", err);
    CHECK(eng_data_open(&dd, "two", "969,30,1", 40, 256, 9, err, sizeof err) == -1 && strstr(err, "--seq-length"),
          "too-long sequence: %s", err);
    CHECK(eng_data_open(&dd, "two", "0,1", 4, 256, 9, err, sizeof err) == -1 && strstr(err, "--split"),
          "zero train weight: %s", err);
    CHECK(eng_data_open(&dd, "two", "", 4, 64, 9, err, sizeof err) == 0, "open vocab 64");
    CHECK(eng_data_sample(&dd, 0, tok, tgt, err, sizeof err) == -1 && strstr(err, "two.bin") &&
          strstr(err, "--vocab-size 64"), "token outside vocab: %s", err);
    eng_data_close(&dd);
}

static void test_order(void)
{
    uint64_t ns[] = { 1, 2, 3, 17, 1000 };
    for (int k = 0; k < 5; k++) {
        uint64_t n = ns[k];
        unsigned char *seen = calloc(n, 1);
        int ok = 1;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t p = rng_permute(77, i, n);
            if (p >= n || seen[p]++) ok = 0;
        }
        CHECK(ok, "rng_permute is a bijection of [0, %llu)", (unsigned long long)n);
        free(seen);
    }
    eng_data a, b;
    char err[256];
    CHECK(eng_data_open(&a, "", "", 16, 256, 1, err, sizeof err) == 0 &&
          eng_data_open(&b, "", "", 16, 256, 2, err, sizeof err) == 0, "builtin corpus: %s", err);
    uint64_t n = a.nsamples;
    int same_epoch = 1, diff_seed = 0, diff_epoch = 0;
    for (uint64_t g = 0; g < n; g++) {
        same_epoch &= eng_data_order(&a, g, NULL) == eng_data_order(&a, g, NULL);
        diff_seed |= eng_data_order(&a, g, NULL) != eng_data_order(&b, g, NULL);
        diff_epoch |= eng_data_order(&a, g, NULL) != eng_data_order(&a, g + n, NULL);
    }
    CHECK(n > 10 && same_epoch && diff_seed && diff_epoch, "order: pure function of (seed, epoch, index)");
    CHECK(strlen(eng_builtin_corpus()) + 1 == a.src[0].ntokens, "builtin corpus is one document with EOD");
    eng_data_close(&a);
    eng_data_close(&b);
}

/* Rewrites bytes [off, off+n) of a copy of two.idx into bad.idx (two.bin copied). */
static void corrupt(const char *what, size_t off, const void *bytes, size_t n, size_t truncate_to,
                    const char *expect)
{
    CHECK(system("cp two.idx bad.idx && cp two.bin bad.bin") == 0, "copy");
    FILE *f = fopen("bad.idx", "r+b");
    if (n) {
        fseek(f, (long)off, SEEK_SET);
        fwrite(bytes, 1, n, f);
    }
    fclose(f);
    if (truncate_to) CHECK(truncate("bad.idx", (off_t)truncate_to) == 0, "truncate");
    idx_dataset d;
    char err[512] = "";
    CHECK(idx_open(&d, "bad", err, sizeof err) == -1 && strstr(err, expect) && !strchr(err, '\n'),
          "%s: '%s' lacks '%s'", what, err, expect);
}

static void test_bad_files(void)
{
    uint64_t v2 = 2, big = 1000;
    unsigned char f32 = 7;
    int64_t gap = 20, docbad = 7;
    corrupt("magic", 0, "XMIDIDX", 7, 0, "bad.idx: not a Megatron indexed dataset");
    corrupt("version", 9, &v2, 8, 0, "version 2");
    corrupt("dtype", 17, &f32, 1, 0, "dtype code 7");
    corrupt("short header", 0, NULL, 0, 20, "bad.idx: truncated");
    corrupt("short arrays", 0, NULL, 0, 50, "bad.idx: truncated");
    corrupt("counts", 18, &big, 8, 0, "bad.idx: truncated");
    corrupt("pointers", 34 + 8 + 8, &gap, 8, 0, "does not follow");
    corrupt("doc_idx", 34 + 8 + 16 + 8, &docbad, 8, 0, "doc_idx[1]");
    CHECK(system("cp two.idx bad.idx && head -c 20 two.bin > bad.bin") == 0, "short bin");
    idx_dataset d;
    char err[512] = "";
    CHECK(idx_open(&d, "bad", err, sizeof err) == -1 && strstr(err, "bad.bin") && strstr(err, "truncated"),
          "short .bin: %s", err);
    unlink("missing.idx");
    CHECK(idx_open(&d, "missing", err, sizeof err) == -1 && strstr(err, "missing.idx"), "missing: %s", err);

    unlink("out.bin");
    unlink("out.idx");
    CHECK(prepare("doc1.txt", "no_such_input.txt", "out") == 1, "prepare with a missing input fails");
    CHECK(access("out.bin", F_OK) != 0 && access("out.idx", F_OK) != 0, "and writes nothing");
}

/* A blend, as Megatron's --data-path "W1 P1 W2 P2": each block of samples takes
 * exactly each source's share, every sample is a whole sample of its source, the
 * order is a pure function of (seed, g), and weights default to sizes. */
static void test_blend(void)
{
    /* source A is all 'a', B all 'b': a sample says where it came from */
    char text[4001];
    memset(text, 'a', 4000);
    text[4000] = 0;
    write_file("blend_a.txt", text);
    memset(text, 'b', 1200);
    text[1200] = 0;
    write_file("blend_b.txt", text);
    CHECK(prepare("blend_a.txt", NULL, "blend_a") == 0 && prepare("blend_b.txt", NULL, "blend_b") == 0, "prepare");
    eng_data d;
    char err[512] = "";
    int T = 8;
    CHECK(eng_data_open(&d, "0.25 blend_a 0.75 blend_b", "1,0,0", T, 256, 5, err, sizeof err) == 0, "open: %s", err);
    CHECK(d.nsrc == 2 && d.per_block[0] == ENG_BLEND_BLOCK / 4 && d.per_block[1] == 3 * ENG_BLEND_BLOCK / 4 &&
              strstr(d.source, "a blend of 2 datasets: blend_a.bin 25.0%, blend_b.bin 75.0%"),
          "shares per block: %llu %llu (%s)", (unsigned long long)d.per_block[0], (unsigned long long)d.per_block[1],
          d.source);
    int32_t tok[8], tgt[8];
    uint64_t from[2] = { 0, 0 }, n = 3 * ENG_BLEND_BLOCK + 123;
    int whole = 1, ordered = 1, interleaved = 1;
    for (uint64_t g = 0; g < n; g++) {
        int k;
        eng_data_order(&d, g, &k);
        if (eng_data_sample(&d, g, tok, tgt, err, sizeof err)) {
            whole = 0;
            break;
        }
        int want = k ? 'b' : 'a';
        for (int i = 0; i < T; i++) whole &= (tok[i] == want || tok[i] == ENG_EOD_TOKEN);
        from[k]++;
        if (g >= 4) interleaved &= !(from[0] == g + 1 || from[1] == g + 1); /* not all from one source */
        int k2;
        ordered &= eng_data_order(&d, g, &k2) == eng_data_order(&d, g, NULL) && k2 == k;
    }
    CHECK(whole, "every sample is one source's tokens: %s", err);
    CHECK(ordered && interleaved, "order is a pure function of g; the sources interleave from the start");
    CHECK(from[0] >= 3 * ENG_BLEND_BLOCK / 4 && from[0] <= 3 * ENG_BLEND_BLOCK / 4 + 31 &&
              from[0] + from[1] == n, "a quarter from A: %llu of %llu", (unsigned long long)from[0],
          (unsigned long long)n);
    /* B has 150 samples per epoch: its 7,500 per block walk its epochs, each a permutation */
    unsigned char seen[150] = { 0 };
    int perm = d.src[1].nsamples == 150;
    for (uint64_t g = 0, got = 0; g < n && got < 150; g++) {
        int k;
        uint64_t j = eng_data_order(&d, g, &k);
        if (k != 1) continue;
        perm &= j < 150 && !seen[j]++;
        got++;
    }
    CHECK(perm, "B's first 150 samples are one epoch, each sample once (%llu per epoch)",
          (unsigned long long)d.src[1].nsamples);
    eng_data_close(&d);
    /* without weights: by size (A has 500 samples, B 150) */
    CHECK(eng_data_open(&d, "blend_a blend_b", "1,0,0", T, 256, 5, err, sizeof err) == 0 &&
              d.per_block[0] == 7692 && d.per_block[1] == 2308 && d.nsamples == 650,
          "weighted by size: %llu %llu (%s)", (unsigned long long)d.per_block[0], (unsigned long long)d.per_block[1], err);
    eng_data_close(&d);
    /* one prefix is the single-dataset order, bit for bit */
    eng_data one, blend1;
    CHECK(eng_data_open(&one, "blend_a", "1,0,0", T, 256, 5, err, sizeof err) == 0 &&
              eng_data_open(&blend1, "1 blend_a", "1,0,0", T, 256, 5, err, sizeof err) == 0, "open: %s", err);
    int same = 1;
    for (uint64_t g = 0; g < 2000; g++) same &= eng_data_order(&one, g, NULL) == eng_data_order(&blend1, g, NULL);
    CHECK(same && one.nsrc == 1 && blend1.nsrc == 1, "\"1 PREFIX\" is PREFIX");
    eng_data_close(&one);
    eng_data_close(&blend1);
    const struct { const char *path, *says; } bad[] = {
        { "0.3 blend_a 0.7", "--data-path: 3 words; a blend is pairs of a weight and a prefix" },
        { "0.3 blend_a -1 blend_b", "'-1' (before blend_b) is not a positive weight" },
        { "0.3 blend_a x blend_b", "'x' (before blend_b) is not a positive weight" },
        { "1 blend_a 1 no_such_prefix", "--data-path no_such_prefix: " },
        { "1 blend_a 0.00001 blend_b", "blend_b.bin has 1e-05 of the blend, less than one sample in 10000" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(eng_data_open(&d, bad[i].path, "1,0,0", T, 256, 5, err, sizeof err) == -1 && strstr(err, bad[i].says),
              "'%s': '%s'", bad[i].path, err);
    /* a source too small for its split names itself */
    CHECK(eng_data_open_split(&d, "1 blend_a 1 blend_b", "1,0,0", ENG_SPLIT_VALID, T, 256, 5, err, sizeof err) == -1 &&
              strstr(err, "blend_a.bin: the validation split"), "validation split of a one-document source: %s", err);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_prepare_and_read();
    test_order();
    test_blend();
    test_bad_files();
    return check_summary(argv[0]);
}
