/* Checkpoints are layout-independent:
 *  - two TP ranks (and two PP stages) writing their slices into one step give
 *    files byte-identical to the single rank's;
 *  - a TP rank loading a single-rank checkpoint gets exactly its slices;
 *  - the header is valid safetensors (8-byte length, JSON, aligned data);
 *  - a missing or renamed tensor and a truncated file are one-line errors;
 *  - a background save (ckpt_async) writes the same bytes, from a snapshot taken
 *    when it starts, and commits only when told every part is durable. */
#include "check.h"
#include "checkpoint.h"
#include "ckpt_async.h"
#include "errf.h"
#include "json_read.h"
#include "safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static atoll_config cfg(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 2; c.hidden_size = 32; c.num_attention_heads = 4; c.seq_length = 8;
    c.vocab_size = 64; c.micro_batch_size = 1;
    return c;
}

typedef struct rank { eng_model *m; eng_optim *o; } rank;

/* A model with init weights and optimizer moments that are functions of the weights,
 * so every layout holds consistent values. */
static rank make(const atoll_config *c, eng_layout lay)
{
    char err[256];
    rank r = { eng_model_create(c, &lay, k_cpu(), err, sizeof err), NULL };
    CHECK(r.m != NULL, "model: %s", err);
    eng_init_params(r.m, 5);
    r.o = eng_optim_create(r.m);
    for (size_t i = 0; i < r.m->num_floats; i++) {
        r.o->m[i] = 0.5f * r.m->params[i];
        r.o->v[i] = r.m->params[i] * r.m->params[i];
    }
    return r;
}

static void drop(rank r)
{
    eng_optim_free(r.o);
    eng_model_free(r.m);
}

static int same_file(const char *a, const char *b)
{
    uint64_t sa, sb, na, nb;
    return !ckpt_file_checksum(a, &sa, &na) && !ckpt_file_checksum(b, &sb, &nb) && sa == sb && na == nb;
}

static void rmrf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
}

static void test_layout_independent_writes(void)
{
    atoll_config c = cfg();
    char err[512] = "";
    rmrf("ck_one");
    rmrf("ck_tp");
    rmrf("ck_pp");
    rank one = make(&c, eng_layout_single(&c));
    eng_train_state st = { .iteration = 3, .consumed_samples = 24, .seed = 5 };
    CHECK(ckpt_save("ck_one", one.m, one.o, &st, err, sizeof err) == 0, "save: %s", err);

    for (int r = 0; r < 2; r++) {
        eng_layout lay = eng_layout_single(&c);
        lay.tp_rank = r;
        lay.tp_size = 2;
        rank t = make(&c, lay);
        CHECK(ckpt_write_shards("ck_tp", 3, t.m, t.o, r == 0, err, sizeof err) == 0, "tp shards: %s", err);
        drop(t);
    }
    CHECK(ckpt_commit("ck_tp", &st, &c, err, sizeof err) == 0, "commit: %s", err);
    for (int s = 0; s < 2; s++) {
        eng_layout lay = eng_layout_single(&c);
        lay.layer_begin[0] = s;
        lay.layer_end[0] = s + 1;
        rank p = make(&c, lay);
        CHECK(ckpt_write_shards("ck_pp", 3, p.m, p.o, s == 1, err, sizeof err) == 0, "pp shards: %s", err);
        drop(p);
    }
    const char *files[2] = { "model.safetensors", "optim.safetensors" };
    for (int i = 0; i < 2; i++) {
        char a[256], b[256], p[256];
        snprintf(a, sizeof a, "ck_one/iter_0000003/%s", files[i]);
        snprintf(b, sizeof b, "ck_tp/iter_0000003/%s", files[i]);
        snprintf(p, sizeof p, "ck_pp/iter_0000003/%s", files[i]);
        CHECK(same_file(a, b), "tp=2 %s differs from tp=1", files[i]);
        CHECK(same_file(a, p), "pp=2 %s differs from pp=1", files[i]);
    }
    long long it = -1;
    CHECK(ckpt_latest("ck_tp", CKPT_RESUME, &it, err, sizeof err) == 0 && it == 3, "tp checkpoint committed (%lld)", it);
    CHECK(ckpt_latest("ck_pp", CKPT_RESUME, &it, err, sizeof err) == 1,
          "a step never committed (a save a fault interrupted) holds nothing: a fresh start");
    CHECK(ckpt_latest("no_such_dir", CKPT_RESUME, &it, err, sizeof err) == 1, "missing dir: nothing to resume");

    /* a TP rank reads its slices back from the single-rank checkpoint */
    eng_layout lay = eng_layout_single(&c);
    lay.tp_rank = 1;
    lay.tp_size = 2;
    rank want = make(&c, lay);
    char e2[256];
    eng_model *got = eng_model_create(&c, &lay, k_cpu(), e2, sizeof e2);
    eng_optim *go = eng_optim_create(got);
    eng_train_state st2;
    CHECK(ckpt_load("ck_one", 3, got, go, &st2, err, sizeof err) == 0, "tp load: %s", err);
    CHECK(!memcmp(got->params, want.m->params, got->num_floats * 4) &&
          !memcmp(go->m, want.o->m, got->num_floats * 4) && !memcmp(go->v, want.o->v, got->num_floats * 4),
          "tp=2 rank 1 loads exactly its slices");
    CHECK(st2.iteration == 3 && st2.consumed_samples == 24 && st2.seed == 5, "train state round trip");
    eng_optim_free(go);
    eng_model_free(got);
    drop(want);
    drop(one);
}

static void test_header(void)
{
    FILE *f = fopen("ck_one/iter_0000003/model.safetensors", "rb");
    unsigned char len8[8];
    CHECK(f && fread(len8, 1, 8, f) == 8, "read header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    CHECK(n % 8 == 0, "data starts 8-byte aligned (header %llu)", (unsigned long long)n);
    char *h = malloc(n);
    CHECK(fread(h, 1, n, f) == n, "read header");
    fclose(f);
    char err[128];
    jsonr *root = jsonr_parse(h, n, err, sizeof err);
    const jsonr *t = jsonr_get(root, "h.1.attn.c_attn.weight");
    CHECK(t && jsonr_at(jsonr_get(t, "shape"), 0)->num == 96 && jsonr_at(jsonr_get(t, "shape"), 1)->num == 32,
          "c_attn is [3h, h]");
    CHECK(!strcmp(jsonr_get(t, "dtype")->str, "F32"), "F32");
    CHECK(jsonr_get(root, "wte.weight") && !jsonr_get(root, "lm_head.weight"), "tied: wte only");
    CHECK(jsonr_get(jsonr_get(root, "__metadata__"), "format") != NULL, "metadata");
    jsonr_free(root);
    free(h);
}

static void test_bad_files(void)
{
    atoll_config c = cfg();
    char err[512] = "";
    rmrf("ck_bad");
    CHECK(system("cp -r ck_one ck_bad") == 0, "copy");
    rank r = make(&c, eng_layout_single(&c));
    eng_train_state st;
    /* rename a tensor in place (same length): the model's tensor is then missing */
    FILE *f = fopen("ck_bad/iter_0000003/optim.safetensors", "r+b");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    char *at = memmem(buf, n, "h.1.ln_2.bias.exp_avg\"", 22);
    CHECK(at != NULL, "find tensor in header");
    if (at) {
        memcpy(at, "h.1.ln_2.bias.exp_bvg", 21);
        fseek(f, at - buf, SEEK_SET);
        fwrite(at, 1, 21, f);
    }
    fclose(f);
    CHECK(ckpt_load("ck_bad", 3, r.m, r.o, &st, err, sizeof err) == CKPT_MISMATCH &&
          strstr(err, "tensor 'h.1.ln_2.bias.exp_avg' is missing") && strstr(err, "optim.safetensors") &&
          !strchr(err, '\n'), "missing tensor: %s", err);
    long long it;
    CHECK(ckpt_latest("ck_bad", CKPT_RESUME, &it, err, sizeof err) == -1 && strstr(err, "iter_0000003 is corrupt"),
          "a corrupt only step is refused: %s", err);

    CHECK(truncate("ck_bad/iter_0000003/model.safetensors", 3000) == 0, "truncate");
    CHECK(ckpt_load("ck_bad", 3, r.m, r.o, &st, err, sizeof err) == -1 && strstr(err, "model.safetensors") &&
          strstr(err, "truncated"), "truncated: %s", err);
    CHECK(truncate("ck_bad/iter_0000003/model.safetensors", 4) == 0, "truncate");
    CHECK(ckpt_load("ck_bad", 3, r.m, r.o, &st, err, sizeof err) == -1 && strstr(err, "shorter"), "tiny: %s", err);
    drop(r);
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void test_async(void)
{
    atoll_config c = cfg();
    char err[512] = "";
    rmrf("ck_async");
    rank one = make(&c, eng_layout_single(&c));
    eng_train_state st = { .iteration = 3, .consumed_samples = 24, .seed = 5 };
    ckpt_note_step(&st, 3, 2.5, 1e-3, 0.75);
    /* two TP ranks in the background, not alone: nothing commits until rank 0 is told */
    ckpt_async *a[2];
    rank t[2];
    for (int r = 0; r < 2; r++) {
        eng_layout lay = eng_layout_single(&c);
        lay.tp_rank = r;
        lay.tp_size = 2;
        t[r] = make(&c, lay);
        ckpt_part part = { 1, { t[r].m->params, t[r].o->m, t[r].o->v }, 0, t[r].m->num_floats, NULL, 0 };
        a[r] = ckpt_async_start("ck_async", t[r].m, &part, r == 0, &st, 0, err, sizeof err);
        CHECK(a[r] != NULL, "async start: %s", err);
        /* training goes on: the live weights change, the snapshot does not */
        for (size_t i = 0; a[r] && i < t[r].m->num_floats; i++) t[r].m->params[i] += 1.0f;
    }
    for (int r = 0; r < 2; r++)
        while (a[r] && !ckpt_async_durable(a[r])) usleep(1000);
    CHECK(!exists("ck_async/iter_0000003/manifest.json"), "a manifest before every part was declared durable");
    long long it = -1;
    CHECK(ckpt_latest("ck_async", CKPT_RESUME, &it, err, sizeof err) == 1, "an uncommitted background save was taken");
    ckpt_async_commit(a[0]);
    CHECK(ckpt_async_wait(a[0], err, sizeof err) == 0 && ckpt_async_committed(a[0]), "commit: %s", err);
    CHECK(ckpt_async_iteration(a[0]) == 3 && ckpt_async_seconds(a[0]) > 0, "commit time");
    CHECK(ckpt_latest("ck_async", CKPT_RESUME, &it, err, sizeof err) == 0 && it == 3, "committed step: %lld", it);
    for (int r = 0; r < 2; r++) {
        ckpt_async_free(a[r]);
        drop(t[r]);
    }
    const char *files[2] = { "model.safetensors", "optim.safetensors" };
    for (int i = 0; i < 2; i++) {
        char x[256], y[256];
        snprintf(x, sizeof x, "ck_one/iter_0000003/%s", files[i]);
        snprintf(y, sizeof y, "ck_async/iter_0000003/%s", files[i]);
        CHECK(same_file(x, y), "background tp=2 %s differs from the single rank's", files[i]);
    }
    /* a single rank commits by itself; the recorded steps come back on load */
    rmrf("ck_async1");
    ckpt_part all = { 1, { one.m->params, one.o->m, one.o->v }, 0, one.m->num_floats, NULL, 0 };
    ckpt_async *s1 = ckpt_async_start("ck_async1", one.m, &all, 1, &st, 1, err, sizeof err);
    CHECK(s1 && ckpt_async_wait(s1, err, sizeof err) == 0 && ckpt_async_committed(s1), "alone: %s", err);
    ckpt_async_free(s1);
    rank back = make(&c, eng_layout_single(&c));
    eng_train_state got;
    memset(&got, 0, sizeof got);
    CHECK(ckpt_load("ck_async1", 3, back.m, back.o, &got, err, sizeof err) == 0, "load: %s", err);
    CHECK(got.iteration == 3 && got.nsteps == 1 && got.steps[0].iteration == 3 && got.steps[0].loss == 2.5 &&
          got.steps[0].grad_norm == 0.75, "recorded steps: %d", got.nsteps);
    CHECK(memcmp(back.m->params, one.m->params, one.m->num_floats * sizeof(float)) == 0, "loaded weights");
    drop(back);
    drop(one);
}

/* Makes DIR/iter_N holding one file and no manifest: a save that never committed. */
static void torn_step(const char *dir, long long it)
{
    char step[256], path[300];
    ckpt_step_dir(step, sizeof step, dir, it);
    CHECK(mkdir(step, 0755) == 0, "mkdir %s", step);
    snprintf(path, sizeof path, "%s/model.safetensors", step);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("partial", f) >= 0 && fclose(f) == 0, "write %s", path);
}

static int has_step(const char *dir, long long it)
{
    char step[256];
    ckpt_step_dir(step, sizeof step, dir, it);
    return exists(step);
}

/* --save-keep N: a commit removes the steps older than the N newest committed ones. */
static void test_keep(void)
{
    atoll_config c = cfg();
    char err[512] = "";
    rmrf("ck_keep");
    rank one = make(&c, eng_layout_single(&c));
    eng_train_state st = { .seed = 5 };
    st.iteration = 10;
    CHECK(ckpt_save("ck_keep", one.m, one.o, &st, err, sizeof err) == 0, "save 10: %s", err);
    st.iteration = 20;
    CHECK(ckpt_save("ck_keep", one.m, one.o, &st, err, sizeof err) == 0, "save 20: %s", err);
    CHECK(has_step("ck_keep", 10) && has_step("ck_keep", 20), "without --save-keep every step stays");
    torn_step("ck_keep", 15);
    one.m->cfg.save_keep = 2;
    st.iteration = 30;
    CHECK(ckpt_save("ck_keep", one.m, one.o, &st, err, sizeof err) == 0, "save 30: %s", err);
    CHECK(has_step("ck_keep", 30) && has_step("ck_keep", 20) && !has_step("ck_keep", 15) && !has_step("ck_keep", 10),
          "keep 2 after committing 30: 20 and 30 stay, the torn 15 and 10 go");
    torn_step("ck_keep", 35); /* between kept steps: may be a save in progress */
    torn_step("ck_keep", 50); /* newer than the step committed: not its business */
    st.iteration = 40;
    CHECK(ckpt_save("ck_keep", one.m, one.o, &st, err, sizeof err) == 0, "save 40: %s", err);
    CHECK(has_step("ck_keep", 40) && has_step("ck_keep", 35) && has_step("ck_keep", 30) && !has_step("ck_keep", 20) &&
          has_step("ck_keep", 50), "keep 2 after committing 40: 30, 35, 40 and 50 stay, 20 goes");
    long long it = -1;
    CHECK(ckpt_latest("ck_keep", CKPT_RESUME, &it, err, sizeof err) == 0 && it == 40, "newest committed step after pruning: %lld", it);
    CHECK(ckpt_prune("ck_keep", 1, 40, err, sizeof err) == 2 && !has_step("ck_keep", 35) && !has_step("ck_keep", 30) &&
          has_step("ck_keep", 40) && has_step("ck_keep", 50), "keep 1: removed 30 and 35: %s", err);
    CHECK(ckpt_prune("no_such_dir", 1, 40, err, sizeof err) == -1 && strstr(err, "no_such_dir"), "missing dir: %s", err);
    rank r = make(&c, eng_layout_single(&c));
    eng_train_state got;
    CHECK(ckpt_load("ck_keep", 40, r.m, r.o, &got, err, sizeof err) == 0 && got.iteration == 40, "kept step loads: %s",
          err);
    drop(r);
    drop(one);
    /* the one validator: --save-keep needs --save */
    atoll_config v = cfg();
    v.save_keep = 3;
    CHECK(cfg_validate_training(&v, err, sizeof err) == -1 && strstr(err, "--save-keep 3 needs --save DIR"),
          "--save-keep without --save: %s", err);
    rmrf("ck_keep");
}


/* Flips one byte of `path` at `off` (from the end when negative). */
static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
    long at = ftell(f);
    int b = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(b ^ 0x10, f);
    fclose(f);
}

/* FNV-1a-64 of a whole file, the sum manifests held before atoll64 */
static uint64_t fnv_file(const char *path)
{
    size_t n;
    char *data = atoll_read_file(path, 1u << 26, &n);
    CHECK(data != NULL, "%s: %s", path, strerror(errno));
    uint64_t h = data ? eng_fnv1a(data, n, ENG_FNV_INIT) : 0;
    free(data);
    return h;
}

/* atoll64 catches one flipped byte wherever it sits (first word, a lane's last
 * word, the next block, the middle, the zero-padded tail); CKPT_WEIGHTS checks
 * model.safetensors alone; a manifest written with FNV-1a-64 sums still verifies,
 * and still catches a flipped byte. */
static void test_checksums(void)
{
    char err[512] = "";
    long long it;
    const char *model = "ck_sum/iter_0000003/model.safetensors", *optim = "ck_sum/iter_0000003/optim.safetensors";
    rmrf("ck_sum");
    CHECK(system("cp -r ck_one ck_sum") == 0, "copy");
    struct stat sb, ts;
    CHECK(stat(model, &sb) == 0 && stat("ck_sum/iter_0000003/train_state.json", &ts) == 0 && ts.st_size % 32 != 0,
          "train_state.json ends in a partial block (%lld bytes)", (long long)ts.st_size);
    CHECK(ckpt_latest("ck_sum", CKPT_RESUME, &it, err, sizeof err) == 0 && it == 3, "intact: %s", err);
    /* a sum this version does not know (a newer atoll's): said so, not called corrupt */
    CHECK(system("sed -i 's/\"atoll64\"/\"later64\"/' ck_sum/iter_0000003/manifest.json") == 0, "sed");
    CHECK(ckpt_step_check("ck_sum", CKPT_RESUME, 3, err, sizeof err) == -1 &&
              strstr(err, "is unreadable by this atoll (manifest.json sums model.safetensors with neither atoll64 nor "
                          "fnv1a64: written by a newer atoll?)"), "an unknown sum: %s", err);
    CHECK(system("sed -i 's/\"later64\"/\"atoll64\"/' ck_sum/iter_0000003/manifest.json") == 0, "sed back");
    const long offs[] = { 0, 7, 24, 31, 32, 4096, (long)sb.st_size / 2, -1 };
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        flip_byte(model, offs[i]);
        CHECK(ckpt_step_check("ck_sum", CKPT_WEIGHTS, 3, err, sizeof err) == -1 &&
              strstr(err, "model.safetensors fails its checksum"), "a byte flipped at %ld: %s", offs[i], err);
        flip_byte(model, offs[i]);
        CHECK(ckpt_step_check("ck_sum", CKPT_WEIGHTS, 3, err, sizeof err) == 0, "flipped back at %ld: %s", offs[i],
              err);
    }
    flip_byte("ck_sum/iter_0000003/train_state.json", -1);
    CHECK(ckpt_latest("ck_sum", CKPT_RESUME, &it, err, sizeof err) == -1 &&
          strstr(err, "train_state.json fails its checksum"), "the last byte of a partial block: %s", err);
    flip_byte("ck_sum/iter_0000003/train_state.json", -1);
    flip_byte(optim, -3);
    CHECK(ckpt_latest("ck_sum", CKPT_RESUME, &it, err, sizeof err) == -1 &&
          strstr(err, "optim.safetensors fails its checksum"), "a resume needs the optimizer intact: %s", err);
    CHECK(ckpt_latest("ck_sum", CKPT_WEIGHTS, &it, err, sizeof err) == 0 && it == 3,
          "the weights alone are intact: %s", err);
    /* CKPT_MANIFEST reads no sums: a flipped byte passes, a file of the wrong size
     * or a missing one does not */
    CHECK(ckpt_latest("ck_sum", CKPT_MANIFEST, &it, err, sizeof err) == 0 && it == 3,
          "the manifest and sizes alone: %s", err);
    flip_byte(optim, -3);
    struct stat os;
    CHECK(stat(optim, &os) == 0, "stat optim");
    CHECK(truncate(optim, os.st_size + 1) == 0, "grow optim by a byte");
    CHECK(ckpt_step_check("ck_sum", CKPT_MANIFEST, 3, err, sizeof err) == -1 &&
          strstr(err, "torn (optim.safetensors has"), "a file longer than its manifest says: %s", err);
    CHECK(truncate(optim, os.st_size) == 0, "back to its size");
    CHECK(rename(optim, "ck_sum/optim.away") == 0, "move optim away");
    CHECK(ckpt_step_check("ck_sum", CKPT_MANIFEST, 3, err, sizeof err) == -1 &&
          strstr(err, "torn (optim.safetensors is missing)"), "a missing file: %s", err);
    CHECK(rename("ck_sum/optim.away", optim) == 0, "move optim back");

    /* the manifest as atoll wrote it before atoll64: "fnv1a64" sums */
    static const char *files[3] = { "model.safetensors", "optim.safetensors", "train_state.json" };
    size_t tlen;
    char *text = atoll_read_file("ck_sum/iter_0000003/manifest.json", 1u << 20, &tlen);
    CHECK(text != NULL, "manifest.json: %s", strerror(errno));
    if (!text) return;
    for (int i = 0; i < 3; i++) {
        char path[256], want[64], *at;
        snprintf(path, sizeof path, "ck_sum/iter_0000003/%s", files[i]);
        snprintf(want, sizeof want, "\"%s\":{", files[i]);
        CHECK((at = strstr(text, want)) && (at = strstr(at, "\"atoll64\":\"")), "%s's entry", files[i]);
        if (!at) break;
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv_file(path));
        memcpy(at, "\"fnv1a64\":\"", 11);
        memcpy(at + 11, hex, 16);
    }
    FILE *f = fopen("ck_sum/iter_0000003/manifest.json", "w");
    fputs(text, f);
    fclose(f);
    free(text);
    CHECK(ckpt_latest("ck_sum", CKPT_RESUME, &it, err, sizeof err) == 0 && it == 3,
          "a manifest of FNV-1a-64 sums verifies: %s", err);
    flip_byte(optim, 100);
    CHECK(ckpt_latest("ck_sum", CKPT_RESUME, &it, err, sizeof err) == -1 &&
          strstr(err, "optim.safetensors fails its checksum"), "FNV-1a-64 still catches a flipped byte: %s", err);
}

/* st_read_f32 widens a Hugging Face file's 2-byte floats: F16's zero, negative
 * zero, smallest subnormal (2^-24), a subnormal with more bits, one, a third
 * rounded, largest finite (65504) and infinity; BF16's top halves of fp32
 * (1, -2.5, the fp32 minimum normal, a subnormal); and refuses I32. The
 * expected values are built with ldexpf, not from the bit patterns. */
static void test_half_reads(void)
{
    static const unsigned short f16[8] = { 0x0000, 0x8000, 0x0001, 0x03ff, 0x3c00, 0x3555, 0x7bff, 0x7c00 };
    static const unsigned short bf16[4] = { 0x3f80, 0xc020, 0x0080, 0x0001 };
    const float want16[8] = { 0.0f, -0.0f, ldexpf(1, -24), ldexpf(1023, -24), 1.0f, ldexpf(1365, -12),
                              65504.0f, INFINITY };
    const float wantb[4] = { 1.0f, -2.5f, ldexpf(1, -126), ldexpf(1, -133) };
    const char *json = "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,16]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[16,24]},"
                       "\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[24,28]}}";
    unsigned long long hl = strlen(json);
    FILE *f = fopen("half.safetensors", "wb");
    CHECK(f != NULL, "create half.safetensors");
    if (!f) return;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hl >> (8 * i));
    int one = 1;
    fwrite(len8, 1, 8, f);
    fwrite(json, 1, hl, f);
    fwrite(f16, 2, 8, f); /* little-endian host */
    fwrite(bf16, 2, 4, f);
    fwrite(&one, 4, 1, f);
    fclose(f);
    st_file st;
    char err[256];
    CHECK(st_open(&st, "half.safetensors", err, sizeof err) == 0, "open: %s", err);
    float out[8];
    const st_tensor *h = st_find(&st, "h"), *b = st_find(&st, "b"), *i32 = st_find(&st, "i");
    CHECK(h && b && i32 && h->dtype == ST_F16 && b->dtype == ST_BF16 && st_numel(h) == 8, "the three tensors");
    if (h && st_read_f32(&st, h, out, err, sizeof err) == 0)
        for (int i = 0; i < 8; i++)
            CHECK(out[i] == want16[i] && signbit(out[i]) == signbit(want16[i]), "F16 %04x: %g, want %g", f16[i],
                  out[i], want16[i]);
    if (b && st_read_f32(&st, b, out, err, sizeof err) == 0)
        for (int i = 0; i < 4; i++) CHECK(out[i] == wantb[i], "BF16 %04x: %g, want %g", bf16[i], out[i], wantb[i]);
    CHECK(i32 && st_read_f32(&st, i32, out, err, sizeof err) == -1 && strstr(err, "I32"), "I32 refused: %s", err);
    CHECK(h && st_read_slice(&st, h, &(eng_param){ .numel = 8, .ndim = 1, .full = { 8, 1 } }, out, err, sizeof err) == -1 &&
              strstr(err, "a checkpoint's tensors are F32"), "a checkpoint read of F16 refused: %s", err);
    st_close(&st);
}

static int file_has(const char *path, const char *text)
{
    char buf[4096] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, text) != NULL;
}

/* placement.txt: a job's placement claims its --save; an older placement (or another
 * job's, once a newer job took the directory over) writes nothing there any more, and
 * removes nothing; a run that is no job's is never refused. */
static void test_placement(void)
{
    atoll_config c = cfg();
    char err[1024] = "";
    long long it = -1;
    rmrf("ck_place");
    CHECK(mkdir("ck_place", 0755) == 0, "mkdir ck_place");
    rank one = make(&c, eng_layout_single(&c));
    eng_train_state st = { .seed = 5, .iteration = 10 };

    ckpt_set_owner(7, 1);
    CHECK(ckpt_claim("ck_place", err, sizeof err) == 0 && file_has("ck_place/placement.txt", "job 7 epoch 1\n"),
          "epoch 1 claims: %s", err);
    CHECK(ckpt_save("ck_place", one.m, one.o, &st, err, sizeof err) == 0, "epoch 1 saves 10: %s", err);
    CHECK(file_has("ck_place/iter_0000010/manifest.json", "\"job\":7,\"epoch\":1"),
          "the manifest names the placement that wrote the step");
    st.iteration = 30; /* epoch 1's shards of 30, then the commit after a newer claim (below) */
    CHECK(ckpt_write_shards("ck_place", 30, one.m, one.o, 1, err, sizeof err) == 0, "shards of 30: %s", err);

    /* epoch 0, still running where it was not stopped */
    ckpt_set_owner(7, 0);
    err[0] = '\0';
    CHECK(ckpt_claim("ck_place", err, sizeof err) == CKPT_SUPERSEDED &&
          strstr(err, "job 7 was placed again: its epoch 1 holds this directory (placement.txt), and this process, "
                      "of epoch 0, is superseded") && file_has("ck_place/placement.txt", "job 7 epoch 1\n"),
          "an older epoch's claim: %s", err);
    st.iteration = 20;
    err[0] = '\0';
    CHECK(ckpt_save("ck_place", one.m, one.o, &st, err, sizeof err) == CKPT_SUPERSEDED && !has_step("ck_place", 20) &&
          strstr(err, "--save ck_place: step 20 not saved: job 7 was placed again"), "epoch 0 saves 20: %s", err);
    st.iteration = 10; /* a step the newer placement committed: not overwritten, not removed */
    CHECK(ckpt_save("ck_place", one.m, one.o, &st, err, sizeof err) == CKPT_SUPERSEDED &&
          file_has("ck_place/iter_0000010/manifest.json", "\"epoch\":1") &&
          ckpt_step_check("ck_place", CKPT_RESUME, 10, err, sizeof err) == 0, "epoch 0 re-saving 10: %s", err);

    /* epoch 2 claims while epoch 1's step 30 waits for its commit: that commit is refused */
    ckpt_set_owner(7, 2);
    CHECK(ckpt_claim("ck_place", err, sizeof err) == 0 && file_has("ck_place/placement.txt", "job 7 epoch 2\n"),
          "epoch 2 claims: %s", err);
    ckpt_set_owner(7, 1);
    st.iteration = 30;
    err[0] = '\0';
    CHECK(ckpt_commit("ck_place", &st, &c, err, sizeof err) == CKPT_SUPERSEDED &&
          !exists("ck_place/iter_0000030/manifest.json") && strstr(err, "its epoch 2 holds"),
          "epoch 1 commits 30 after epoch 2's claim: %s", err);
    CHECK(ckpt_latest("ck_place", CKPT_RESUME, &it, err, sizeof err) == 0 && it == 10,
          "the newest committed step is still 10: %lld %s", it, err);

    /* a claim waits for a commit in flight (which holds placement.txt's lock) */
    int held = open("ck_place/placement.txt", O_RDWR);
    CHECK(held >= 0 && flock(held, LOCK_EX) == 0, "lock placement.txt as a commit does");
    pid_t child = fork();
    if (child == 0) {
        close(held); /* the lock belongs to the open file, which this copy would keep locked */
        ckpt_set_owner(7, 3);
        _exit(ckpt_claim("ck_place", err, sizeof err) == 0 ? 0 : 1);
    }
    usleep(300 * 1000);
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, WNOHANG) == 0 && file_has("ck_place/placement.txt", "job 7 epoch 2\n"),
          "epoch 3's claim waits while a commit holds the lock");
    close(held);
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
          file_has("ck_place/placement.txt", "job 7 epoch 3\n"), "then it claims (status %d)", status);

    /* a job submitted with --load of this directory takes it over */
    ckpt_set_owner(9, 0);
    CHECK(ckpt_claim("ck_place", err, sizeof err) == 0 && file_has("ck_place/placement.txt", "job 9 epoch 0\n"),
          "job 9 claims: %s", err);
    ckpt_set_owner(7, 2);
    st.iteration = 40;
    err[0] = '\0';
    CHECK(ckpt_save("ck_place", one.m, one.o, &st, err, sizeof err) == CKPT_SUPERSEDED &&
          strstr(err, "job 9 holds this directory now (placement.txt): this process, of job 7 epoch 2, is superseded"),
          "job 7 after job 9's claim: %s", err);

    /* a run that is no job's (atoll-train by hand) is never refused and claims nothing */
    ckpt_set_owner(0, 0);
    CHECK(ckpt_claim("ck_place", err, sizeof err) == 0 && file_has("ck_place/placement.txt", "job 9 epoch 0\n") &&
          ckpt_save("ck_place", one.m, one.o, &st, err, sizeof err) == 0 &&
          !file_has("ck_place/iter_0000040/manifest.json", "\"job\""), "no job's save of 40: %s", err);

    /* a placement.txt that is not one: said, nothing written */
    FILE *f = fopen("ck_place/placement.txt", "w");
    CHECK(f && fputs("garbage\n", f) >= 0 && fclose(f) == 0, "write placement.txt");
    ckpt_set_owner(9, 0);
    st.iteration = 50;
    err[0] = '\0';
    CHECK(ckpt_save("ck_place", one.m, one.o, &st, err, sizeof err) == -1 && !has_step("ck_place", 50) &&
          strstr(err, "ck_place/placement.txt: not \"job J epoch E\""), "a bad placement.txt: %s", err);
    CHECK(ckpt_claim("ck_place", err, sizeof err) == -1 && strstr(err, "placement.txt: not"), "claim: %s", err);
    ckpt_set_owner(0, 0);
    drop(one);
    rmrf("ck_place");
}

int main(int argc, char **argv)
{
    (void)argc;
    test_keep();
    test_layout_independent_writes();
    test_async();
    test_header();
    test_bad_files();
    test_checksums();
    test_half_reads();
    test_placement();
    return check_summary(argv[0]);
}
