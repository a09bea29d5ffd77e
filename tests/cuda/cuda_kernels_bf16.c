/* Every *_bf16 entry of k_cuda() against the fp32 CPU reference run on the
 * same (bf16-rounded) inputs: norm-wise relative error <= 1e-2 for bf16
 * outputs, outputs poisoned first, no NaN. fp32 outputs of these entries
 * (statistics, weight gradients, master weights) are held to the same bound
 * except where the math is exactly the fp32 path's (AdamW: 1e-5). */
#include "cuda_harness.h"

#define TOL 1e-2

static float *bf_rand(size_t n, float scale)
{
    float *v = h_rand(n, scale);
    h_round_bf(v, n);
    return v;
}

static void test_casts(size_t n)
{
    float *x = h_rand(n, 100), *back = malloc(n * 4);
    float *dx = d_put(x, n * 4);
    uint16_t *db = d_poison(n * 2), *h = malloc(n * 2);
    G->to_bf16(db, dx, n);
    G->to_host(h, db, n * 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != h_f2bf(x[i]);
    CHECK(bad == 0, "to_bf16: %zu of %zu values not rounded to nearest even", bad, n);
    float *df = d_poison(n * 4);
    G->from_bf16(df, db, n);
    G->to_host(back, df, n * 4);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += back[i] != h_bf2f(h[i]);
    CHECK(bad == 0, "from_bf16: %zu of %zu values not exact", bad, n);
    free(x); free(back); free(h);
    G->free(dx); G->free(db); G->free(df);
}

static void test_embedding(int N, int C, int off, int V, int Vfull, int hot)
{
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((h_frand() + 1.0f) * 0.5f * (float)Vfull) % Vfull;
    for (int i = 0; hot && i < N; i++) /* text-like skew: half the positions one id, a sixth another */
        tok[i] = i % 2 ? off + 7 : i % 3 ? tok[i] : off + 130 % V;
    float *wte = bf_rand((size_t)V * C, 1), *out = malloc((size_t)N * C * 4);
    int32_t *dtok = d_put(tok, sizeof(int32_t) * N);
    uint16_t *dwte = d_put_bf(wte, (size_t)V * C), *dout = d_poison((size_t)N * C * 2);
    R->embedding_forward(out, tok, wte, N, C, off, V);
    G->embedding_forward_bf16(dout, dtok, dwte, N, C, off, V);
    h_compare("embedding_forward_bf16", d_get_bf(dout, (size_t)N * C), out, (size_t)N * C, TOL);
    float *g = bf_rand((size_t)N * C, 1), *acc = h_rand((size_t)V * C, 1);
    uint16_t *dg = d_put_bf(g, (size_t)N * C);
    float *dacc = d_put(acc, (size_t)V * C * 4);
    R->embedding_backward(acc, g, tok, N, C, off, V);
    G->embedding_backward_bf16(dacc, dg, dtok, N, C, off, V);
    h_compare("embedding_backward_bf16", d_get(dacc, (size_t)V * C), acc, (size_t)V * C, TOL);

    int B = 2, T = N / 2;
    float *wpe = bf_rand((size_t)T * C, 1), *x = bf_rand((size_t)B * T * C, 1);
    uint16_t *dwpe = d_put_bf(wpe, (size_t)T * C), *dx = d_put_bf(x, (size_t)B * T * C);
    R->position_forward(x, wpe, NULL, B, T, C);
    G->position_forward_bf16(dx, dwpe, NULL, B, T, C);
    h_compare("position_forward_bf16", d_get_bf(dx, (size_t)B * T * C), x, (size_t)B * T * C, TOL);
    int32_t *pos = malloc(sizeof(int32_t) * B * T); /* position ids (packed documents restart them) */
    for (int i = 0; i < B * T; i++) pos[i] = (i * 7 + 3) % T;
    int32_t *dpos = d_put(pos, sizeof(int32_t) * B * T);
    R->position_forward(x, wpe, pos, B, T, C);
    G->position_forward_bf16(dx, dwpe, dpos, B, T, C);
    h_compare("position_forward_bf16 (ids)", d_get_bf(dx, (size_t)B * T * C), x, (size_t)B * T * C, TOL);
    free(pos);
    G->free(dpos);
    float *pacc = h_rand((size_t)T * C, 1), *dpacc = d_put(pacc, (size_t)T * C * 4);
    R->position_backward(pacc, g, B, T, C);
    G->position_backward_bf16(dpacc, dg, B, T, C);
    h_compare("position_backward_bf16", d_get(dpacc, (size_t)T * C), pacc, (size_t)T * C, TOL);
    free(tok); free(wte); free(out); free(g); free(acc); free(wpe); free(x); free(pacc);
    G->free(dtok); G->free(dwte); G->free(dout); G->free(dg); G->free(dacc); G->free(dwpe); G->free(dx);
    G->free(dpacc);
}

/* The residual add fused into the norm after it, in place as the engine calls
 * it (res = a = x), against the CPU's residual_forward_bf16 then the norm on
 * the same bits: LayerNorm with bias b, RMSNorm with b NULL. */
static void check_residual_norm(const float *x, const float *w, const float *b, int N, int C)
{
    size_t n = (size_t)N * C;
    const char *name = b ? "residual_layernorm_forward_bf16" : "residual_rmsnorm_forward_bf16";
    float *y = bf_rand(n, 1), *mean = malloc(N * 4), *rstd = malloc(N * 4), *rf = malloc(n * 4), *of = malloc(n * 4);
    uint16_t *hx = malloc(n * 2), *hy = malloc(n * 2), *hres = malloc(n * 2), *hout = malloc(n * 2),
             *hw = malloc(C * 2), *hb = malloc(C * 2);
    R->to_bf16(hx, x, n); R->to_bf16(hy, y, n); R->to_bf16(hw, w, C);
    if (b) R->to_bf16(hb, b, C);
    uint16_t *dres = d_put_bf(x, n), *dy = d_put_bf(y, n), *dout = d_poison(n * 2), *dw = d_put_bf(w, C);
    uint16_t *db = b ? d_put_bf(b, C) : NULL;
    float *dmean = d_poison(N * 4), *drstd = d_poison(N * 4);
    if (b) {
        R->residual_layernorm_forward_bf16(hres, hout, mean, rstd, hx, hy, hw, hb, N, C, 1e-5f);
        G->residual_layernorm_forward_bf16(dres, dout, dmean, drstd, dres, dy, dw, db, N, C, 1e-5f);
    } else {
        R->residual_rmsnorm_forward_bf16(hres, hout, rstd, hx, hy, hw, N, C, 1e-5f);
        G->residual_rmsnorm_forward_bf16(dres, dout, drstd, dres, dy, dw, N, C, 1e-5f);
    }
    R->from_bf16(rf, hres, n); R->from_bf16(of, hout, n);
    char what[96];
    snprintf(what, sizeof what, "%s res", name);
    h_compare(what, d_get_bf(dres, n), rf, n, 1e-6);
    snprintf(what, sizeof what, "%s out", name);
    h_compare(what, d_get_bf(dout, n), of, n, TOL);
    snprintf(what, sizeof what, "%s rstd", name);
    h_compare(what, d_get(drstd, N), rstd, N, TOL);
    free(y); free(mean); free(rstd); free(rf); free(of); free(hx); free(hy); free(hres); free(hout); free(hw); free(hb);
    G->free(dres); G->free(dy); G->free(dout); G->free(dw); G->free(dmean); G->free(drstd);
    if (db) G->free(db);
}

static void test_layernorm(int N, int C)
{
    size_t n = (size_t)N * C;
    float *x = bf_rand(n, 2), *w = bf_rand(C, 1), *b = bf_rand(C, 1);
    float *out = malloc(n * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    uint16_t *dx = d_put_bf(x, n), *dw = d_put_bf(w, C), *db = d_put_bf(b, C), *dout = d_poison(n * 2);
    float *dmean = d_poison(N * 4), *drstd = d_poison(N * 4);
    R->layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    G->layernorm_forward_bf16(dout, dmean, drstd, dx, dw, db, N, C, 1e-5f);
    h_compare("layernorm_forward_bf16 out", d_get_bf(dout, n), out, n, TOL);
    h_compare("layernorm_forward_bf16 mean", d_get(dmean, N), mean, N, TOL);
    h_compare("layernorm_forward_bf16 rstd", d_get(drstd, N), rstd, N, TOL);
    float *g = bf_rand(n, 1), *dinp = bf_rand(n, 1), *gw = h_rand(C, 1), *gb = h_rand(C, 1), *gs = h_rand(C, 1);
    uint16_t *dg = d_put_bf(g, n), *ddinp = d_put_bf(dinp, n);
    float *dgw = d_put(gw, C * 4), *dgb = d_put(gb, C * 4), *dgs = d_put(gs, C * 4);
    R->layernorm_backward(dinp, gw, gb, gs, g, x, w, mean, rstd, N, C);
    G->layernorm_backward_bf16(ddinp, dgw, dgb, dgs, dg, dx, dw, dmean, drstd, N, C);
    h_compare("layernorm_backward_bf16 dinp", d_get_bf(ddinp, n), dinp, n, TOL);
    h_compare("layernorm_backward_bf16 dw", d_get(dgw, C), gw, C, TOL);
    h_compare("layernorm_backward_bf16 db", d_get(dgb, C), gb, C, TOL);
    h_compare("layernorm_backward_bf16 dsum", d_get(dgs, C), gs, C, TOL);
    check_residual_norm(x, w, b, N, C);
    free(x); free(w); free(b); free(out); free(mean); free(rstd); free(g); free(dinp); free(gw); free(gb); free(gs);
    G->free(dx); G->free(dw); G->free(db); G->free(dout); G->free(dmean); G->free(drstd);
    G->free(dg); G->free(ddinp); G->free(dgw); G->free(dgb); G->free(dgs);
}

/* mode 0: no bias, 1: bias, 2: bias + fused GELU (pre_gelu kept) */
static void test_matmul(int N, int C, int OC, int mode)
{
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *x = bf_rand(ni, 1), *w = bf_rand(nw, 0.1f), *bias = bf_rand(OC, 1), *out = malloc(no * 4);
    uint16_t *dx = d_put_bf(x, ni), *dw = d_put_bf(w, nw), *dbias = d_put_bf(bias, OC);
    uint16_t *dout = d_poison(no * 2), *dpre = mode == 2 ? d_poison(no * 2) : NULL;
    R->matmul_forward(out, x, w, mode ? bias : NULL, N, C, OC);
    G->matmul_forward_bf16(dout, dpre, dx, dw, mode ? dbias : NULL, N, C, OC);
    if (mode == 2) {
        h_compare("matmul_forward_bf16 pre_gelu", d_get_bf(dpre, no), out, no, TOL);
        float *ge = malloc(no * 4);
        R->gelu_forward(ge, out, no);
        h_compare("matmul_forward_bf16 gelu(out)", d_get_bf(dout, no), ge, no, TOL);
        free(ge);
    } else {
        h_compare(mode ? "matmul_forward_bf16 (bias)" : "matmul_forward_bf16", d_get_bf(dout, no), out, no, TOL);
    }
    float *g = bf_rand(no, 1), *dinp = malloc(ni * 4), *gw = h_rand(nw, 1), *gb = h_rand(OC, 1);
    uint16_t *dg = d_put_bf(g, no), *ddinp = d_poison(ni * 2);
    float *dgw = d_put(gw, nw * 4), *dgb = d_put(gb, OC * 4);
    R->matmul_backward(dinp, gw, gb, g, x, w, N, C, OC);
    G->matmul_backward_bf16(ddinp, dgw, dgb, dg, dx, dw, N, C, OC);
    h_compare("matmul_backward_bf16 dinp", d_get_bf(ddinp, ni), dinp, ni, TOL);
    h_compare("matmul_backward_bf16 dw", d_get(dgw, nw), gw, nw, TOL);
    h_compare("matmul_backward_bf16 dbias", d_get(dgb, OC), gb, OC, TOL);
    /* the down-projection backward through GELU (x plays the kept pre-activation):
     * against the CPU twin, which rounds once as the fused epilogue does */
    uint16_t *pre_h = malloc(ni * 2), *want = malloc(ni * 2), *g_h = malloc(no * 2), *w_h = malloc(nw * 2);
    uint16_t *x_h = malloc(ni * 2);
    for (size_t i = 0; i < ni; i++) pre_h[i] = x_h[i] = h_f2bf(x[i]);
    for (size_t i = 0; i < no; i++) g_h[i] = h_f2bf(g[i]);
    for (size_t i = 0; i < nw; i++) w_h[i] = h_f2bf(w[i]);
    /* here dout is [N, OC] and the product is [N, C]: pre-activation x [N, C], inputs out[N, C] = x too */
    R->matmul_backward_gelu_bf16(want, gw, gb, g_h, x_h, w_h, pre_h, N, C, OC);
    G->matmul_backward_gelu_bf16(ddinp, dgw, dgb, dg, dx, dw, dx, N, C, OC);
    float *wantf = malloc(ni * 4);
    for (size_t i = 0; i < ni; i++) wantf[i] = h_bf2f(want[i]);
    h_compare("matmul_backward_gelu_bf16 dpre", d_get_bf(ddinp, ni), wantf, ni, TOL);
    h_compare("matmul_backward_gelu_bf16 dw", d_get(dgw, nw), gw, nw, TOL);
    h_compare("matmul_backward_gelu_bf16 dbias", d_get(dgb, OC), gb, OC, TOL);
    free(pre_h); free(want); free(g_h); free(w_h); free(x_h); free(wantf);
    free(x); free(w); free(bias); free(out); free(g); free(dinp); free(gw); free(gb);
    G->free(dx); G->free(dw); G->free(dbias); G->free(dout); G->free(dpre); G->free(dg); G->free(ddinp);
    G->free(dgw); G->free(dgb);
}

/* The bias gradient with many blocks at once, where the last to arrive add the partials (kcu_arrive_last):
 * GPT-2's fc width (3072: 3 column strips) over rows cut into 256 chunks in 16 groups, as at its 16384 rows,
 * and the 1.5B model's (6400: 7 strips, the last partial) in 128 chunks. Against the host's sum in double
 * (fp32 sums: 1e-5), and the same bits on each of three runs. dw is computed, not checked (test_matmul
 * does); a narrow C keeps its GEMM cheap where the GPU is emulated. */
static void test_bias_sums(int N, int C, int OC)
{
    size_t no = (size_t)N * OC;
    float *g = bf_rand(no, 1), *gb = h_rand(OC, 1), *want = malloc(OC * sizeof(float));
    double *sum = calloc(OC, sizeof(double));
    for (size_t i = 0; i < no; i++) sum[i % OC] += g[i];
    for (int c = 0; c < OC; c++) want[c] = (float)(sum[c] + gb[c]);
    uint16_t *dg = d_put_bf(g, no), *dx = G->alloc((size_t)N * C * 2), *dw = G->alloc((size_t)OC * C * 2);
    float *dgw = G->alloc((size_t)OC * C * 4), *first = NULL;
    char what[96];
    snprintf(what, sizeof what, "bias gradient of %d rows x %d", N, OC);
    for (int rep = 0; rep < 3; rep++) {
        float *dgb = d_put(gb, OC * sizeof(float));
        G->matmul_backward_bf16(NULL, dgw, dgb, dg, dx, dw, N, C, OC);
        float *got = d_get(dgb, OC);
        if (!first) {
            first = got;
            h_compare(what, d_get(dgb, OC), want, OC, 1e-5);
        } else {
            CHECK(!memcmp(got, first, OC * sizeof(float)), "%s: run %d gave other bits than run 1", what, rep + 1);
            free(got);
        }
        G->free(dgb);
    }
    free(g); free(gb); free(want); free(sum); free(first);
    G->free(dg); G->free(dx); G->free(dw); G->free(dgw);
}

/* squared ReLU (--squared-relu) in bf16; n % 8 == 0 takes the 16-byte path */
static void test_relu2(size_t n)
{
    float *x = bf_rand(n, 3), *y = bf_rand(n, 1), *out = malloc(n * 4);
    uint16_t *dx = d_put_bf(x, n), *dy = d_put_bf(y, n), *dout = d_poison(n * 2);
    R->relu2_forward(out, x, n);
    G->relu2_forward_bf16(dout, dx, n);
    h_compare("relu2_forward_bf16", d_get_bf(dout, n), out, n, TOL);
    R->relu2_backward(out, x, y, n);
    G->relu2_backward_bf16(dy, dx, dy, n); /* in place, as the MLP backward runs it */
    h_compare("relu2_backward_bf16 (in place)", d_get_bf(dy, n), out, n, TOL);
    free(x); free(y); free(out);
    G->free(dx); G->free(dy); G->free(dout);
}

static void test_elementwise(size_t n)
{
    float *x = bf_rand(n, 3), *y = bf_rand(n, 1), *out = malloc(n * 4);
    uint16_t *dx = d_put_bf(x, n), *dy = d_put_bf(y, n), *dout = d_poison(n * 2);
    R->gelu_forward(out, x, n);
    G->gelu_forward_bf16(dout, dx, n);
    h_compare("gelu_forward_bf16", d_get_bf(dout, n), out, n, TOL);
    R->gelu_backward(out, x, y, n);
    G->gelu_backward_bf16(dy, dx, dy, n); /* in place, as the MLP backward runs it */
    h_compare("gelu_backward_bf16 (in place)", d_get_bf(dy, n), out, n, TOL);
    G->free(dy);
    dy = d_put_bf(y, n);
    R->residual_forward(out, x, y, n);
    G->residual_forward_bf16(dout, dx, dy, n);
    h_compare("residual_forward_bf16", d_get_bf(dout, n), out, n, TOL);
    R->add_inplace(x, y, n);
    G->add_inplace_bf16(dx, dy, n);
    h_compare("add_inplace_bf16", d_get_bf(dx, n), x, n, TOL);
    free(x); free(y); free(out);
    G->free(dx); G->free(dy); G->free(dout);
}

static void test_xent(int N, int Vfull, int off, int V)
{
    size_t nl = (size_t)N * V;
    float *lg = bf_rand(nl, 4);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tg[i] = i % 5 == 2 ? -1 : (int32_t)((h_frand() + 1.0f) * 0.5f * (float)Vfull) % Vfull;
    float *mx = malloc(N * 4), *se = malloc(N * 4), *tl = malloc(N * 4), *d = malloc(nl * 4);
    uint16_t *dlg = d_put_bf(lg, nl);
    int32_t *dtg = d_put(tg, sizeof(int32_t) * N);
    float *dmx = d_poison(N * 4), *dse = d_poison(N * 4), *dtl = d_poison(N * 4);
    R->xent_max(mx, lg, N, V);
    G->xent_max_bf16(dmx, dlg, N, V);
    h_compare("xent_max_bf16", d_get(dmx, N), mx, N, TOL);
    R->xent_sumexp_target(se, tl, lg, mx, tg, N, V, off);
    G->xent_sumexp_target_bf16(dse, dtl, dlg, dmx, dtg, N, V, off);
    h_compare("xent_sumexp_target_bf16 sumexp", d_get(dse, N), se, N, TOL);
    h_compare("xent_sumexp_target_bf16 target_logit", d_get(dtl, N), tl, N, TOL);
    R->xent_backward(d, lg, mx, se, tg, 1.0f / N, N, V, off);
    G->xent_backward_bf16(dlg, dlg, dmx, dse, dtg, 1.0f / N, N, V, off); /* in place, no second buffer */
    h_compare("xent_backward_bf16 (in place)", d_get_bf(dlg, nl), d, nl, TOL);
    free(lg); free(tg); free(mx); free(se); free(tl); free(d);
    G->free(dlg); G->free(dtg); G->free(dmx); G->free(dse); G->free(dtl);
}

/* The fused classifier against the four-call reference on the same rounded
 * logits: losses, and the gradient written over the logits. */
static void test_xent_fused(int N, int V)
{
    size_t nl = (size_t)N * V;
    float *lg = bf_rand(nl, 4), *d = h_copy(lg, nl), *loss = malloc(N * 4);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tg[i] = i % 5 == 2 ? -1 : (int32_t)((h_frand() + 1.0f) * 0.5f * (float)V) % V;
    uint16_t *dlg = d_put_bf(lg, nl);
    int32_t *dtg = d_put(tg, sizeof(int32_t) * N);
    float *dloss = d_poison(N * 4);
    R->xent_fused(loss, d, tg, 1.0f / N, N, V);
    G->xent_fused_bf16(dloss, dlg, dtg, 1.0f / N, N, V);
    h_compare("xent_fused_bf16 loss", d_get(dloss, N), loss, N, TOL);
    h_compare("xent_fused_bf16 dlogits (in place)", d_get_bf(dlg, nl), d, nl, TOL);
    free(lg); free(d); free(loss); free(tg);
    G->free(dlg); G->free(dtg); G->free(dloss);
}

/* The flash-style entries against the fp32 CPU attention (which stores the
 * probabilities) on the same bf16-rounded qkv; lse against plain loops. NG
 * key/value groups, dropout p on the probabilities. */
static const char *attn_backend = "flash"; /* which kernels the entries run (k_cuda_fused_attention) */
static int attn_deterministic = 1;         /* 0: cuDNN's dQ by atomic adds (k_cuda_attention_atomic_dq) */

static void test_attention_docs(int B, int T, int NH, int NG, int HD, float p, int docs)
{
    char what[3][128];
    snprintf(what[0], sizeof what[0], "attention_forward_bf16 (%s, B=%d T=%d NH=%d NG=%d HD=%d p=%g%s) out",
             attn_backend, B, T, NH, NG, HD, p, docs ? ", documents" : "");
    snprintf(what[1], sizeof what[1], "attention_forward_bf16 (%s) lse", attn_backend);
    snprintf(what[2], sizeof what[2], "attention_backward_bf16 (%s) dqkv", attn_backend);
    size_t nq = (size_t)B * T * (NH + 2 * NG) * HD, no = (size_t)B * T * NH * HD, na = (size_t)B * NH * T * T;
    size_t nl = (size_t)B * NH * T;
    k_dropout drop = { p, 0xbeefULL, 11, 2 };
    float *qkv = bf_rand(nq, 2), *out = malloc(no * 4), *att = malloc(na * 4), *lse = malloc(nl * 4);
    int32_t *doc = docs ? h_docs(B, T) : NULL, *ddoc = doc ? d_put(doc, sizeof(int32_t) * (size_t)B * T) : NULL;
    R->attention_forward(out, att, qkv, doc, B, T, NH, NG, HD, &drop);
    int ld = (NH + 2 * NG) * HD, Q = NH / NG;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                int grp = h / Q;
                const float *q = qkv + ((size_t)b * T + t) * ld + (grp * (Q + 2) + h % Q) * HD;
                double mx = -1e300, s = 0;
                for (int j = doc ? doc[(size_t)b * T + t] : 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * ld + (grp * (Q + 2) + Q) * HD;
                    double d = 0;
                    for (int e = 0; e < HD; e++) d += (double)q[e] * k[e];
                    d /= sqrt((double)HD);
                    if (d > mx) {
                        s = s * exp(mx - d) + 1.0;
                        mx = d;
                    } else {
                        s += exp(d - mx);
                    }
                }
                lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(s));
            }
    uint16_t *dqkv_in = d_put_bf(qkv, nq), *dout = d_poison(no * 2);
    float *dlse = d_poison(nl * 4);
    G->attention_forward_bf16(dout, dlse, dqkv_in, ddoc, B, T, NH, NG, HD, &drop);
    h_compare(what[0], d_get_bf(dout, no), out, no, TOL);
    h_compare(what[1], d_get(dlse, nl), lse, nl, TOL);

    float *g = bf_rand(no, 1), *dqkv = malloc(nq * 4), *scratch = malloc(na * 4);
    R->attention_backward(dqkv, scratch, g, qkv, att, B, T, NH, NG, HD, &drop);
    uint16_t *dg = d_put_bf(g, no), *ddqkv = d_poison(nq * 2);
    G->attention_backward_bf16(ddqkv, dg, dqkv_in, dout, dlse, ddoc, B, T, NH, NG, HD, &drop);
    h_compare(what[2], d_get_bf(ddqkv, nq), dqkv, nq, TOL);
    /* deterministic: a second backward gives the same bits (restarts resume bit for bit); with dQ by atomic adds
     * the second is within the tolerance of the first, and whether its bits moved is said */
    uint16_t *again = d_poison(nq * 2), *h1 = malloc(nq * 2), *h2 = malloc(nq * 2);
    G->attention_backward_bf16(again, dg, dqkv_in, dout, dlse, ddoc, B, T, NH, NG, HD, &drop);
    G->to_host(h1, ddqkv, nq * 2);
    G->to_host(h2, again, nq * 2);
    if (attn_deterministic) {
        CHECK(!memcmp(h1, h2, nq * 2), "attention_backward_bf16 (%s, B=%d T=%d NH=%d): two runs differ", attn_backend,
              B, T, NH);
    } else {
        h_compare(what[2], d_get_bf(again, nq), dqkv, nq, TOL);
        size_t moved = 0;
        for (size_t i = 0; i < nq; i++) moved += h1[i] != h2[i];
        printf("  attention_backward_bf16 (%s, dQ by atomic adds, B=%d T=%d NH=%d): a second run moved %zu of %zu "
               "values\n", attn_backend, B, T, NH, moved, nq);
    }
    free(h1); free(h2); G->free(again);
    free(qkv); free(out); free(att); free(lse); free(g); free(dqkv); free(scratch);
    G->free(dqkv_in); G->free(dout); G->free(dlse); G->free(dg); G->free(ddqkv);
    free(doc);
    if (ddoc) G->free(ddoc);
}
static void test_attention(int B, int T, int NH, int NG, int HD, float p)
{
    test_attention_docs(B, T, NH, NG, HD, p, 0);
}

/* the LLaMA family's bf16 entries against the fp32 CPU ops on bf16-rounded inputs */
static void test_llama(int N, int C, int NH, int NG, int HD)
{
    size_t n = (size_t)N * C;
    float *x = bf_rand(n, 2), *w = bf_rand(C, 1), *g = bf_rand(n, 1), *out = malloc(n * 4), *rstd = malloc(N * 4);
    float *dx = bf_rand(n, 1), *dw = h_rand(C, 1);
    uint16_t *d_x = d_put_bf(x, n), *d_w = d_put_bf(w, C), *d_g = d_put_bf(g, n), *d_out = d_poison(n * 2);
    uint16_t *d_dx = d_put_bf(dx, n);
    float *d_rstd = d_poison(N * 4), *d_dw = d_put(dw, C * 4);
    R->rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    G->rmsnorm_forward_bf16(d_out, d_rstd, d_x, d_w, N, C, 1e-5f);
    h_compare("rmsnorm_forward_bf16 out", d_get_bf(d_out, n), out, n, TOL);
    R->rmsnorm_backward(dx, dw, g, x, w, rstd, N, C);
    G->rmsnorm_backward_bf16(d_dx, d_dw, d_g, d_x, d_w, d_rstd, N, C);
    h_compare("rmsnorm_backward_bf16 dinp", d_get_bf(d_dx, n), dx, n, TOL);
    h_compare("rmsnorm_backward_bf16 dw", d_get(d_dw, C), dw, C, TOL);
    check_residual_norm(x, w, NULL, N, C);
    float *dg2 = malloc(n * 4), *du2 = malloc(n * 4);
    uint16_t *d_dg = d_poison(n * 2), *d_du = d_poison(n * 2);
    R->swiglu_forward(out, x, g, n);
    G->swiglu_forward_bf16(d_out, d_x, d_g, n);
    h_compare("swiglu_forward_bf16", d_get_bf(d_out, n), out, n, TOL);
    R->swiglu_backward(dg2, du2, g, x, g, n); /* up = dout: read only */
    G->swiglu_backward_bf16(d_dg, d_du, d_g, d_x, d_g, n);
    h_compare("swiglu_backward_bf16 dgate", d_get_bf(d_dg, n), dg2, n, TOL);
    h_compare("swiglu_backward_bf16 dup", d_get_bf(d_du, n), du2, n, TOL);
    int B = 2, T = N / 2, M = B * T;
    size_t nq = (size_t)M * (NH + 2 * NG) * HD;
    float *qkv = bf_rand(nq, 2);
    uint16_t *d_qkv = d_put_bf(qkv, nq);
    R->rope_forward(qkv, B, T, NH, NG, HD, HD, (k_rope_freq){500000.0f, 1.0f, 1.0f, 0});
    G->rope_forward_bf16(d_qkv, B, T, NH, NG, HD, HD, (k_rope_freq){500000.0f, 1.0f, 1.0f, 0});
    h_compare("rope_forward_bf16", d_get_bf(d_qkv, nq), qkv, nq, TOL);
    R->rope_forward(qkv, B, T, NH, NG, HD, HD / 2 / 2 * 2, (k_rope_freq){500000.0f, 1.0f, 1.0f, 0}); /* --rotary-percent 0.5, on top */
    G->rope_forward_bf16(d_qkv, B, T, NH, NG, HD, HD / 2 / 2 * 2, (k_rope_freq){500000.0f, 1.0f, 1.0f, 0});
    h_compare("rope_forward_bf16 (partial)", d_get_bf(d_qkv, nq), qkv, nq, TOL);
    k_dropout drop = { 0.2f, 5, 123, 0 };
    R->dropout(x, N, C, &drop);
    G->dropout_bf16(d_x, N, C, &drop);
    h_compare("dropout_bf16", d_get_bf(d_x, n), x, n, TOL);
    free(x); free(w); free(g); free(out); free(rstd); free(dx); free(dw); free(dg2); free(du2); free(qkv);
    void *bufs[] = { d_x, d_w, d_g, d_out, d_dx, d_rstd, d_dw, d_dg, d_du, d_qkv };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) G->free(bufs[i]);
}

/* The one-launch form over segments of different decay (the engine's path)
 * against the CPU's per-segment calls; with an end not a multiple of 4 the
 * CUDA entry takes its per-segment fallback. */
static void test_adamw_segments(size_t n, int misaligned)
{
    size_t ends[5] = { n / 7 * 4, n / 3 * 4 / 4 * 4, n / 2 / 4 * 4 + (misaligned ? 1 : 0), n - 64, n };
    float wd[5] = { 0.1f, 0.0f, 0.1f, 0.0f, 0.05f };
    float *p = h_rand(n, 1), *g = h_rand(n, 0.1f), *m = h_rand(n, 0.01f), *v = h_rand(n, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]) * 0.01f;
    float *dp = d_put(p, n * 4), *dg = d_put(g, n * 4), *dm = d_put(m, n * 4), *dv = d_put(v, n * 4);
    uint16_t *dpb = d_poison(n * 2), *pb = malloc(n * 2);
    R->adamw_segments(p, pb, g, m, v, n, 5, ends, wd, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.8f, 4);
    G->adamw_segments(dp, dpb, dg, dm, dv, n, 5, ends, wd, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.8f, 4);
    h_compare(misaligned ? "adamw_segments master (fallback)" : "adamw_segments master", d_get(dp, n), p, n, 1e-5);
    h_compare("adamw_segments m", d_get(dm, n), m, n, 1e-5);
    h_compare("adamw_segments v", d_get(dv, n), v, n, 1e-5);
    float *want = malloc(n * 4);
    for (size_t i = 0; i < n; i++) want[i] = h_bf2f(pb[i]);
    h_compare("adamw_segments bf16 copy", d_get_bf(dpb, n), want, n, TOL);
    free(p); free(g); free(m); free(v); free(pb); free(want);
    G->free(dp); G->free(dg); G->free(dm); G->free(dv); G->free(dpb);
}

static void test_adamw(size_t n)
{
    float *p = h_rand(n, 1), *g = h_rand(n, 0.1f), *m = h_rand(n, 0.01f), *v = h_rand(n, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]) * 0.01f;
    float *dp = d_put(p, n * 4), *dg = d_put(g, n * 4), *dm = d_put(m, n * 4), *dv = d_put(v, n * 4);
    uint16_t *dpb = d_poison(n * 2);
    R->adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 7);
    G->adamw_bf16(dp, dpb, dg, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 7);
    float *master = d_get(dp, n), *pb = d_get_bf(dpb, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += pb[i] != h_bf2f(h_f2bf(master[i]));
    CHECK(bad == 0, "adamw_bf16: %zu of %zu bf16 params are not the rounded master weight", bad, n);
    h_compare("adamw_bf16 master", master, p, n, 1e-5);
    h_compare("adamw_bf16 param", pb, p, n, TOL);
    h_compare("adamw_bf16 m", d_get(dm, n), m, n, 1e-5);
    h_compare("adamw_bf16 v", d_get(dv, n), v, n, 1e-5);
    free(p); free(g); free(m); free(v);
    G->free(dp); G->free(dg); G->free(dm); G->free(dv); G->free(dpb);
}

int main(int argc, char **argv)
{
    (void)argc;
    if (!h_setup()) return 0;
    test_casts(1);
    test_casts(70001);
    test_embedding(38, 19, 0, 50, 50, 0);
    test_embedding(1024, 768, 1000, 1000, 3000, 0);
    test_embedding(5000, 64, 1000, 1000, 3000, 1); /* several chunks of positions, the last partial; skewed */
    test_embedding(3000, 328, 0, 1000, 1000, 1);   /* two column tiles of the backward, the second partial; skewed */
    test_layernorm(5, 37);
    test_layernorm(512, 768);
    test_layernorm(256, 1600); /* the fused backward holding 8 chunks in registers (fp32: its loop form) */
    /* its registers form at each number of 256-column chunks, and rows that end inside a chunk */
    test_layernorm(96, 200);
    test_layernorm(64, 512);
    test_layernorm(64, 520);
    test_layernorm(64, 1024);
    test_layernorm(64, 1280); /* 5 chunks, in the form for 6 */
    test_layernorm(64, 2048); /* the widest registers form */
    test_layernorm(64, 2056); /* the loop form again */
    for (int mode = 0; mode < 3; mode++) {
        test_matmul(7, 13, 11, mode); /* odd sizes: the unfused fallbacks */
        test_matmul(512, 768, 3072, mode);
    }
    test_matmul(256, 3072, 768, 1);
    test_matmul(77, 64, 40, 1); /* bias gradient on 16-byte rows: a partial last chunk ending in 5 rows */
    test_bias_sums(2048, 8, 3072);
    test_bias_sums(1024, 8, 6400);
    test_elementwise(1);
    test_elementwise(100003);
    test_relu2(1);
    test_relu2(100003);
    test_relu2(4096);
    test_attention(1, 64, 1, 1, 64, 0.0f);   /* one tile */
    test_attention(2, 200, 3, 3, 64, 0.0f);  /* partial last tile */
    test_attention(1, 130, 2, 2, 128, 0.0f);
    test_attention(2, 200, 8, 2, 64, 0.0f);  /* grouped-query: 4 heads per key/value group */
    test_attention(1, 130, 4, 1, 128, 0.0f); /* one group for all heads (multi-query) */
    test_attention(2, 150, 4, 2, 64, 0.1f);  /* and dropout */
    test_attention(1, 100, 2, 1, 128, 0.1f);
    test_attention_docs(2, 150, 2, 1, 64, 0.0f, 1);  /* documents: key tiles skipped */
    test_attention_docs(2, 200, 4, 4, 128, 0.1f, 1); /* documents, dropout, head dim 128 */
#ifdef ATOLL_HAVE_CUDNN
    /* --attention-backend fused: cuDNN's fused attention behind the same
     * entries; grouped-query, dropout and documents are declined to the flash kernels */
    char err[256];
    int rc = k_cuda_fused_attention(1, err, sizeof err);
    CHECK(rc == 0, "fused attention available: %s", rc ? err : "");
    if (rc == 0) {
        long f0, l0, f1, l1, f2, l2;
        attn_backend = "fused";
        k_cuda_attention_calls(&f0, &l0);
        test_attention(1, 64, 1, 1, 64, 0.0f);
        test_attention(2, 200, 3, 3, 64, 0.0f);
        test_attention(1, 130, 2, 2, 128, 0.0f);
        test_attention(4, 1024, 12, 12, 64, 0.0f); /* GPT-2 124M's shape at a small batch */
        k_cuda_attention_calls(&f1, &l1);
        CHECK(f1 - f0 == 12 && l1 == l0, "fused attention: %ld of 12 calls ran on cuDNN, %ld on the flash kernels",
              f1 - f0, l1 - l0);
        test_attention(2, 200, 8, 2, 64, 0.0f);    /* declined: the flash kernels run it */
        test_attention(2, 150, 4, 4, 64, 0.1f);    /* declined */
        test_attention_docs(2, 150, 4, 4, 64, 0.0f, 1); /* declined: documents */
        k_cuda_attention_calls(&f2, &l2);
        CHECK(f2 == f1 && l2 - l1 == 9, "declined shapes: %ld calls on cuDNN, %ld of 9 on the flash kernels",
              f2 - f1, l2 - l1);
        /* --nondeterministic-attention: the backward's dQ summed by atomic adds, against the same CPU reference */
        k_cuda_attention_atomic_dq(1);
        attn_deterministic = 0;
        test_attention(2, 200, 3, 3, 64, 0.0f);
        test_attention(1, 130, 2, 2, 128, 0.0f);
        test_attention(4, 1024, 12, 12, 64, 0.0f);
        CHECK(k_cuda_attention_atomic_plans() == 3, "dQ by atomic adds: cuDNN built %ld of 3 such backward plans",
              k_cuda_attention_atomic_plans());
        k_cuda_attention_atomic_dq(0);
        attn_deterministic = 1;
        k_cuda_fused_attention(0, err, sizeof err);
        attn_backend = "flash";
    }
#endif
    test_llama(64, 768, 12, 4, 64);
    test_llama(32, 2048, 16, 4, 128); /* RMSNorm's backward holding 8 chunks in registers */
    test_llama(10, 37, 4, 2, 8);
    test_xent(9, 50, 0, 50);
    test_xent(256, 50304, 0, 50304);
    test_xent_fused(9, 50);        /* V not a multiple of 8: scalar copies */
    test_xent_fused(256, 50304);   /* GPT-2's padded vocab, row cached in shared memory */
    test_xent_fused(4, 128256);    /* a row larger than shared memory: read from device memory */
    test_adamw(5);
    test_adamw(1000003);
    test_adamw_segments(1 << 20, 0);
    test_adamw_segments(1 << 20, 1);
    return check_summary(argv[0]);
}
