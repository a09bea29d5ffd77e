/* gpu_bench: the two ceilings of this GPU (device-to-device copy bandwidth and
 * the cuBLASLt bf16 GEMM rate, both on random data) and the time of each
 * k_cuda() kernel at GPT-2 124M shapes against its floor (FLOPs over the
 * measured GEMM rate or bytes over the measured copy bandwidth, whichever is
 * larger). Built and run by bench/gpu/run.sh; writes OUTDIR/gpu_bench.md.
 *
 *   gpu_bench OUTDIR [B]      (B = sequences of 1024 tokens, default 8) */
#include "gemm_sweep.h"
#include "k_cuda.h"
#include "kernels.h"
#ifdef ATOLL_HAVE_CUDNN
#include "cudnn_sdpa.h"
#endif

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 20

static const k_ops *G;
static uint64_t rng = 88172645463325252ull;

static void *dev_rand(size_t n, float scale) /* n random fp32 on the device */
{
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        h[i] = ((float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f) * scale;
    }
    void *d = G->alloc(n * sizeof(float));
    if (!d) { fprintf(stderr, "gpu_bench: out of device memory (%zu floats)\n", n); exit(1); }
    G->to_device(d, h, n * sizeof(float));
    free(h);
    return d;
}

static uint16_t *dev_rand_bf(size_t n, float scale)
{
    float *f = dev_rand(n, scale);
    uint16_t *b = G->alloc(n * 2);
    G->to_bf16(b, f, n);
    G->sync();
    G->free(f);
    return b;
}

static int32_t *dev_tokens(size_t n, int V)
{
    int32_t *h = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        h[i] = (int32_t)(rng % (uint64_t)V);
    }
    int32_t *d = G->alloc(n * sizeof(int32_t));
    G->to_device(d, h, n * sizeof(int32_t));
    free(h);
    return d;
}

/* n ids as skewed as text's (make_data.py's "text" kind: 23% of positions on
 * GPT-2's 8 most frequent ids, counts per 16384 tokens of the bundled corpus) */
static int32_t *dev_tokens_text(size_t n, int V)
{
    static const int id[8] = { 11, 262, 13, 257, 290, 286, 314, 284 };
    static const int per16k[8] = { 991, 621, 428, 423, 393, 345, 268, 267 };
    int32_t *h = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        int u = (int)((rng >> 20) % 16384), k = 0, edge = per16k[0];
        while (k < 7 && u >= edge) edge += per16k[++k];
        h[i] = u < edge ? id[k] : (int32_t)((rng >> 40) % (uint64_t)V);
    }
    int32_t *d = G->alloc(n * sizeof(int32_t));
    G->to_device(d, h, n * sizeof(int32_t));
    free(h);
    return d;
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median over REPS timed calls after two warm-up calls, in ms. */
#define TIME_MS(out, stmt)                                            \
    do {                                                              \
        float t_[REPS];                                               \
        stmt; stmt;                                                   \
        for (int r_ = 0; r_ < REPS; r_++) {                           \
            k_cuda_timer_begin();                                     \
            stmt;                                                     \
            t_[r_] = k_cuda_timer_end_ms();                           \
        }                                                             \
        qsort(t_, REPS, sizeof(float), cmpf);                         \
        (out) = t_[REPS / 2];                                         \
    } while (0)

static FILE *md;
static double peak_flops, copy_bw;

static void row(const char *op, float ms, double flops, double bytes)
{
    double f_ms = flops / peak_flops * 1e3, b_ms = bytes / copy_bw * 1e3;
    double floor_ms = f_ms > b_ms ? f_ms : b_ms;
    const char *bound = f_ms > b_ms ? "FLOPs" : "bytes";
    printf("%-34s %9.3f ms  floor %8.3f ms (%s)  %5.1f%% of floor speed\n", op, ms, floor_ms, bound,
           100.0 * floor_ms / ms);
    fprintf(md, "| %s | %.3f | %.3f | %s | %.1f%% |\n", op, ms, floor_ms, bound, 100.0 * floor_ms / ms);
}

#ifdef ATOLL_HAVE_CUDNN
/* Each engine config cuDNN's heuristics offer for the attention graphs,
 * timed one by one (kcudnn_attention_pick) at B x T tokens and NH heads of
 * HD: what taking the first config that finalizes (training's rule) leaves.
 * cudnn_sdpa.c is this program's own copy, on the backend's stream. */
static void attention_configs(int B, int T, int NH, int HD)
{
    size_t NC = (size_t)B * T * NH * HD;
    uint16_t *qkv = dev_rand_bf(3 * NC, 1), *out = G->alloc(NC * 2), *dqkv = G->alloc(3 * NC * 2);
    uint16_t *dout = dev_rand_bf(NC, 1);
    float *lse = G->alloc((size_t)B * NH * T * 4);
    void *st = k_cuda_stream();
    double fl_f = 2.0 * B * NH * (double)T * T * HD;
    static const char *const kinds[] = {"forward", "backward", "backward, dQ by atomic adds"};
    kcudnn_attention_forward_bf16(st, out, lse, qkv, B, T, NH, NH, HD, NULL); /* out and lse for the backward */
    for (int kind = 0; kind < 3; kind++) {
        kcudnn_attention_atomic_dq(kind == 2);
        for (int i = 0, n = 1; i < n; i++) {
            kcudnn_attention_pick(kind, i);
#define CALL (kind == 0 ? kcudnn_attention_forward_bf16(st, dqkv, lse, qkv, B, T, NH, NH, HD, NULL)               \
                        : kcudnn_attention_backward_bf16(st, dqkv, dout, qkv, out, lse, B, T, NH, NH, HD, NULL))
            int rc = CALL;
            char desc[96];
            snprintf(desc, sizeof desc, "%s", kcudnn_attention_plan_desc(kind));
            if (sscanf(desc, "config %*d of %d", &n) != 1) break;
            char name[160];
            snprintf(name, sizeof name, "cuDNN attention %s, %d heads: %s", kinds[kind], NH, desc);
            if (rc || strstr(desc, "refused")) {
                printf("%s\n", name);
                fprintf(md, "| %s | | | | |\n", name);
                continue;
            }
            float ms;
            TIME_MS(ms, (void)CALL);
#undef CALL
            row(name, ms, kind ? 2.5 * fl_f : fl_f, kind ? 3.0 * NC * 2 * 2 + NC * 2 * 2 : 3.0 * NC * 2 + NC * 2);
        }
        kcudnn_attention_pick(kind, -1);
    }
    kcudnn_attention_atomic_dq(0);
    G->free(qkv); G->free(out); G->free(dqkv); G->free(dout); G->free(lse);
}
#endif

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: gpu_bench OUTDIR [B]\n"); return 2; }
    int B = argc > 2 ? atoi(argv[2]) : 8;
    G = k_cuda();
    if (!G) { printf("SKIP: %s\n", k_cuda_status()); return 0; }
    char path[4096];
    snprintf(path, sizeof path, "%s/gpu_bench.md", argv[1]);
    md = fopen(path, "w");
    if (!md) { perror(path); return 1; }
    fprintf(md, "# gpu_bench on %s\n\n", k_cuda_status());

    /* ---- ceilings ---- */
    size_t cb = (size_t)1 << 30;
    void *src = dev_rand(cb / 4, 1), *dst = G->alloc(cb);
    float ms;
    TIME_MS(ms, G->copy(dst, src, cb));
    copy_bw = 2.0 * cb / (ms * 1e-3); /* bytes read + written */
    G->free(src); G->free(dst);
    int M = 8192;
    uint16_t *a = dev_rand_bf((size_t)M * M, 1), *w = dev_rand_bf((size_t)M * M, 1), *o = G->alloc((size_t)M * M * 2);
    TIME_MS(ms, G->matmul_forward_bf16(o, NULL, a, w, NULL, M, M, M));
    peak_flops = 2.0 * M * M * (double)M / (ms * 1e-3);
    G->free(a); G->free(w); G->free(o);
    printf("copy bandwidth %.0f GB/s (read + write), cuBLASLt bf16 GEMM %dx%dx%d %.1f TFLOP/s\n", copy_bw / 1e9, M, M,
           M, peak_flops / 1e12);
    fprintf(md, "Ceilings, measured: device-to-device copy %.0f GB/s (read + write); cuBLASLt bf16 GEMM "
                "%dx%dx%d on random data %.1f TFLOP/s.\n\n", copy_bw / 1e9, M, M, M, peak_flops / 1e12);

    /* ---- kernels at GPT-2 124M shapes ---- */
    int T = 1024, C = 768, NH = 12, HD = 64, V = 50304, N = B * T;
    size_t NC = (size_t)N * C;
    fprintf(md, "GPT-2 124M shapes: B=%d T=%d C=%d NH=%d V=%d (N=%d tokens). Floors use the ceilings above.\n\n",
            B, T, C, NH, V, N);
    fprintf(md, "| kernel | median ms | floor ms | bound by | floor/time |\n|---|---|---|---|---|\n");

    int32_t *tok = dev_tokens(N, V);
    float *x = dev_rand(NC, 1), *y = dev_rand(NC, 1), *z = dev_rand(NC, 1), *wte = dev_rand((size_t)V * C, 1);
    float *mean = dev_rand(N, 1), *rstd = dev_rand(N, 1), *lw = dev_rand(C, 1), *lb = dev_rand(C, 1);
    float *dwte = dev_rand((size_t)V * C, 1), *dw = dev_rand(C, 1), *db = dev_rand(C, 1);
    uint16_t *xb = dev_rand_bf(NC, 1), *yb = dev_rand_bf(NC, 1), *zb = dev_rand_bf(NC, 1);
    uint16_t *lwb = dev_rand_bf(C, 1), *lbb = dev_rand_bf(C, 1);

    TIME_MS(ms, G->embedding_forward(x, tok, wte, N, C, 0, V));
    row("embedding_forward fp32", ms, 0, NC * 8.0 + N * 4.0);
    uint16_t *wteb = dev_rand_bf((size_t)V * C, 1);
    TIME_MS(ms, G->embedding_forward_bf16(yb, tok, wteb, N, C, 0, V));
    row("embedding_forward_bf16", ms, 0, NC * 4.0 + N * 4.0);
    G->free(wteb);
    TIME_MS(ms, G->position_forward_bf16(yb, xb, NULL, B, T, C));
    row("position_forward_bf16", ms, NC, NC * 4.0 + T * C * 2.0);
    TIME_MS(ms, G->embedding_backward(dwte, y, tok, N, C, 0, V));
    row("embedding_backward fp32", ms, NC, NC * 4.0 + NC * 8.0);
    TIME_MS(ms, G->embedding_backward_bf16(dwte, yb, tok, N, C, 0, V));
    row("embedding_backward_bf16", ms, NC, NC * 2.0 + NC * 8.0);
    int32_t *tok_text = dev_tokens_text(N, V);
    TIME_MS(ms, G->embedding_backward_bf16(dwte, yb, tok_text, N, C, 0, V));
    row("embedding_backward_bf16 (ids skewed as text's)", ms, NC, NC * 2.0 + NC * 8.0);
    G->free(tok_text);
    TIME_MS(ms, G->layernorm_forward(y, mean, rstd, x, lw, lb, N, C, 1e-5f));
    row("layernorm_forward fp32", ms, 8.0 * NC, NC * 8.0);
    TIME_MS(ms, G->layernorm_forward_bf16(yb, mean, rstd, xb, lwb, lbb, N, C, 1e-5f));
    row("layernorm_forward_bf16", ms, 8.0 * NC, NC * 4.0);
    TIME_MS(ms, G->layernorm_backward(z, dw, db, NULL, y, x, lw, mean, rstd, N, C));
    row("layernorm_backward fp32", ms, 14.0 * NC, NC * 16.0);
    TIME_MS(ms, G->layernorm_backward_bf16(zb, dw, db, NULL, yb, xb, lwb, mean, rstd, N, C));
    row("layernorm_backward_bf16", ms, 14.0 * NC, NC * 8.0);
    float *dsum = dev_rand(C, 1); /* with the following projection's bias gradient summed in its pass */
    TIME_MS(ms, G->layernorm_backward_bf16(zb, dw, db, dsum, yb, xb, lwb, mean, rstd, N, C));
    row("layernorm_backward_bf16 + bias sum", ms, 15.0 * NC, NC * 8.0);
    { /* the ~1.5B model's rows (the fused backward's registers form for 7 chunks, the last one partial);
       * with the bias sum, in its pass where 3 blocks an SM still fit (against a column sum of its own,
       * colsum8_part_k and a finish, 16.8 + 4.4 us in the H200 profile of 2026-11-28) */
        int C2 = 1600;
        size_t NC2 = (size_t)N * C2;
        uint16_t *x2 = dev_rand_bf(NC2, 1), *g2 = dev_rand_bf(NC2, 1), *d2 = dev_rand_bf(NC2, 1);
        uint16_t *w2 = dev_rand_bf(C2, 1);
        float *dw2 = dev_rand(C2, 1), *db2 = dev_rand(C2, 1), *ds2 = dev_rand(C2, 1);
        TIME_MS(ms, G->layernorm_backward_bf16(d2, dw2, db2, NULL, g2, x2, w2, mean, rstd, N, C2));
        row("layernorm_backward_bf16 (C=1600)", ms, 14.0 * NC2, NC2 * 8.0);
        TIME_MS(ms, G->layernorm_backward_bf16(d2, dw2, db2, ds2, g2, x2, w2, mean, rstd, N, C2));
        row("layernorm_backward_bf16 + bias sum (C=1600)", ms, 15.0 * NC2, NC2 * 8.0);
        G->free(x2); G->free(g2); G->free(d2); G->free(w2); G->free(dw2); G->free(db2); G->free(ds2);
    }
    TIME_MS(ms, G->gelu_forward_bf16(yb, xb, NC));
    row("gelu_forward_bf16 (N x C)", ms, 10.0 * NC, NC * 4.0);
    TIME_MS(ms, G->residual_forward_bf16(yb, xb, yb, NC));
    row("residual_forward_bf16", ms, NC, NC * 6.0);

    /* the four GEMMs of a block, bf16 (the fp32 peak is not the bf16 one: fp32 rows use it anyway) */
    int shapes[4][2] = { { C, 3 * C }, { C, C }, { C, 4 * C }, { 4 * C, C } };
    const char *names[4] = { "qkv", "attn proj", "fc (+GELU)", "mlp proj" };
    for (int s = 0; s < 4; s++) {
        int IC = shapes[s][0], OC = shapes[s][1];
        uint16_t *in = dev_rand_bf((size_t)N * IC, 1), *wt = dev_rand_bf((size_t)OC * IC, 0.05f);
        uint16_t *bias = dev_rand_bf(OC, 1), *out = G->alloc((size_t)N * OC * 2);
        uint16_t *pre = s == 2 ? G->alloc((size_t)N * OC * 2) : NULL, *din = G->alloc((size_t)N * IC * 2);
        float *gw = G->alloc((size_t)OC * IC * 4), *gb = G->alloc((size_t)OC * 4);
        double fl = 2.0 * N * IC * OC, by = 2.0 * ((size_t)N * IC + (size_t)OC * IC + (size_t)N * OC);
        char name[80];
        TIME_MS(ms, G->matmul_forward_bf16(out, pre, in, wt, bias, N, IC, OC));
        snprintf(name, sizeof name, "matmul_forward_bf16 %s", names[s]);
        row(name, ms, fl, by + (pre ? 2.0 * N * OC : 0));
        TIME_MS(ms, G->matmul_backward_bf16(din, gw, gb, out, in, wt, N, IC, OC));
        snprintf(name, sizeof name, "matmul_backward_bf16 %s", names[s]);
        row(name, ms, 2 * fl, 2 * by + 8.0 * OC * IC);
        float ms_nb; /* the bias gradient's share: the same backward without it */
        TIME_MS(ms_nb, G->matmul_backward_bf16(din, gw, NULL, out, in, wt, N, IC, OC));
        snprintf(name, sizeof name, "bias gradient %s (backward minus backward without)", names[s]);
        row(name, ms - ms_nb, (double)N * OC, 2.0 * N * OC);
        G->free(in); G->free(wt); G->free(bias); G->free(out); G->free(pre); G->free(din); G->free(gw); G->free(gb);
    }

    /* attention (fp32, materialised [T, T]) */
    float *qkv = dev_rand(3 * NC, 1), *att = G->alloc((size_t)B * NH * T * T * 4), *ao = G->alloc(NC * 4);
    float *dqkv = G->alloc(3 * NC * 4), *scr = G->alloc((size_t)B * NH * T * T * 4);
    double afl = 4.0 * B * NH * (double)T * T * HD; /* causal: half of the two full GEMMs */
    TIME_MS(ms, G->attention_forward(ao, att, qkv, NULL, B, T, NH, NH, HD, NULL));
    row("attention_forward fp32", ms, afl, 16.0 * NC + 4.0 * B * NH * (double)T * T);
    TIME_MS(ms, G->attention_backward(dqkv, scr, ao, qkv, att, B, T, NH, NH, HD, NULL));
    row("attention_backward fp32", ms, 2 * afl, 32.0 * NC + 8.0 * B * NH * (double)T * T);
    G->free(qkv); G->free(att); G->free(ao); G->free(dqkv); G->free(scr);

    /* flash-style bf16 attention: no [T, T] traffic; the backward floor counts the
     * recomputed scores (5 products against the forward's 2) */
    uint16_t *qkvb = dev_rand_bf(3 * NC, 1), *aob = G->alloc(NC * 2), *dqkvb = G->alloc(3 * NC * 2);
    uint16_t *doutb = dev_rand_bf(NC, 1);
    float *lse = G->alloc((size_t)B * NH * T * 4);
    double fl_f = 2.0 * B * NH * (double)T * T * HD; /* QK^T and PV over the causal half */
    TIME_MS(ms, G->attention_forward_bf16(aob, lse, qkvb, NULL, B, T, NH, NH, HD, NULL));
    row("attention_forward_bf16 (flash)", ms, fl_f, 3.0 * NC * 2 + NC * 2);
    TIME_MS(ms, G->attention_backward_bf16(dqkvb, doutb, qkvb, aob, lse, NULL, B, T, NH, NH, HD, NULL));
    row("attention_backward_bf16 (flash)", ms, 2.5 * fl_f, 3.0 * NC * 2 * 2 + NC * 2 * 2);
    /* the same entries on cuDNN's fused attention (--attention-backend fused) */
    char err[256];
    if (k_cuda_fused_attention(1, err, sizeof err) == 0) {
        TIME_MS(ms, G->attention_forward_bf16(aob, lse, qkvb, NULL, B, T, NH, NH, HD, NULL));
        row("attention_forward_bf16 (cuDNN fused)", ms, fl_f, 3.0 * NC * 2 + NC * 2);
        TIME_MS(ms, G->attention_backward_bf16(dqkvb, doutb, qkvb, aob, lse, NULL, B, T, NH, NH, HD, NULL));
        row("attention_backward_bf16 (cuDNN fused)", ms, 2.5 * fl_f, 3.0 * NC * 2 * 2 + NC * 2 * 2);
        k_cuda_fused_attention(0, err, sizeof err);
#ifdef ATOLL_HAVE_CUDNN
        /* every engine config of each graph; the backward with dQ by atomic adds (--nondeterministic-attention)
         * as training runs it is its config 0 */
        attention_configs(B, T, NH, HD);  /* GPT-2 124M's heads */
        attention_configs(B, T, 25, HD);  /* the ~1.5B model's */
#endif
    } else {
        printf("attention (cuDNN fused): not measured: %s\n", err);
    }
    G->free(qkvb); G->free(aob); G->free(dqkvb); G->free(doutb); G->free(lse);

    /* classifier partials on bf16 logits [N, V] */
    uint16_t *lg = dev_rand_bf((size_t)N * V, 4);
    float *mx = G->alloc(N * 4), *se = G->alloc(N * 4), *tl = G->alloc(N * 4);
    double LB = 2.0 * N * (double)V;
    TIME_MS(ms, G->xent_max_bf16(mx, lg, N, V));
    row("xent_max_bf16", ms, (double)N * V, LB);
    TIME_MS(ms, G->xent_sumexp_target_bf16(se, tl, lg, mx, tok, N, V, 0));
    row("xent_sumexp_target_bf16", ms, 2.0 * N * V, LB);
    TIME_MS(ms, G->xent_backward_bf16(lg, lg, mx, se, tok, 1.0f / N, N, V, 0));
    row("xent_backward_bf16 (in place)", ms, 4.0 * N * V, 2 * LB);
    /* the one-rank classifier: one read, one write (from the second call on it reads the gradient
     * the last one wrote: the same bytes and the same exps) */
    float *ls = G->alloc(N * 4);
    TIME_MS(ms, G->xent_fused_bf16(ls, lg, tok, 1.0f / N, N, V));
    row("xent_fused_bf16 (in place)", ms, 5.0 * N * V, 2 * LB);
    G->free(ls);
    G->free(lg); G->free(mx); G->free(se); G->free(tl);

    /* optimizer over the 124M parameters */
    size_t P = 124439808;
    float *p = dev_rand(P, 1), *g = dev_rand(P, 0.01f), *m = G->alloc(P * 4), *v = G->alloc(P * 4);
    uint16_t *pb = G->alloc(P * 2);
    TIME_MS(ms, (void)G->sumsq(g, P));
    row("sumsq (global norm, 124M)", ms, 2.0 * P, 4.0 * P);
    TIME_MS(ms, G->adamw_bf16(p, pb, g, m, v, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 10));
    row("adamw_bf16 (124M)", ms, 15.0 * P, 16.0 * P + 12.0 * P + 2.0 * P);

    G->free(p); G->free(g); G->free(m); G->free(v); G->free(pb);

    /* launch gaps (--enable-cuda-graph): CHAIN dependent kernels (x += y over 8M bf16, ~12 us each, so the
     * host stays ahead) queued one by one, then recorded once and launched as a CUDA graph; the difference
     * a kernel is the idle GPU time a graph saves between dependent launches */
    {
        enum { CHAIN = 500 };
        size_t cn = (size_t)8 << 20;
        uint16_t *cx = dev_rand_bf(cn, 1), *cy = dev_rand_bf(cn, 1e-3f);
        float ms_stream, ms_graph = 0.0f;
        TIME_MS(ms_stream, for (int i = 0; i < CHAIN; i++) G->residual_forward_bf16(cx, cx, cy, cn));
        k_cuda_graph *gr = NULL;
        if (k_cuda_graph_begin(err, sizeof err) == 0) {
            for (int i = 0; i < CHAIN; i++) G->residual_forward_bf16(cx, cx, cy, cn);
            gr = k_cuda_graph_end(err, sizeof err);
        }
        if (gr) {
            TIME_MS(ms_graph, (void)k_cuda_graph_launch(gr));
            k_cuda_graph_free(gr);
            printf("launch gaps: %d dependent kernels of %.1f us: %.2f us a kernel on the stream, %.2f in a graph "
                   "(%.2f us saved a kernel)\n", CHAIN, 1e3 * ms_graph / CHAIN, 1e3 * ms_stream / CHAIN,
                   1e3 * ms_graph / CHAIN, 1e3 * (ms_stream - ms_graph) / CHAIN);
            fprintf(md, "\nLaunch gaps: %d dependent kernels (x += y, 8M bf16): %.2f us a kernel queued one by one, "
                        "%.2f us launched as one CUDA graph: %.2f us of idle GPU saved a kernel.\n\n", CHAIN,
                    1e3 * ms_stream / CHAIN, 1e3 * ms_graph / CHAIN, 1e3 * (ms_stream - ms_graph) / CHAIN);
        } else {
            printf("launch gaps: no graph recorded: %s\n", err);
        }
        G->free(cx); G->free(cy);
    }
    G->free(tok); G->free(x); G->free(y); G->free(z); G->free(wte); G->free(mean); G->free(rstd); G->free(lw);
    G->free(lb); G->free(dwte); G->free(dw); G->free(db); G->free(xb); G->free(yb); G->free(zb); G->free(lwb);
    G->free(dsum);
    G->free(lbb);
    G->sync();
    int rc = gemm_sweep(md); /* would timing cuBLASLt's candidates pay? */
    fclose(md);
    printf("wrote %s\n", path);
    return rc ? 1 : 0;
}
