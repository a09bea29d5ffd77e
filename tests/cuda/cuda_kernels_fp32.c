/* Every fp32 entry of k_cuda() against k_cpu() on random inputs of several
 * shapes (odd sizes included, so no kernel leans on multiples of 32):
 * norm-wise relative error <= 1e-5, outputs poisoned first, no NaN. */
#include "cuda_harness.h"

#define TOL 1e-5

static int32_t *h_tokens(int N, int V, int with_ignored)
{
    int32_t *t = malloc(sizeof(int32_t) * (size_t)N + 1);
    for (int i = 0; i < N; i++) {
        /* a small set of ids so repeats (the deterministic backward's case) are common */
        t[i] = (int32_t)((h_frand() + 1.0f) * 0.5f * (float)V) % V;
        if (with_ignored && i % 7 == 3) t[i] = -1;
    }
    return t;
}

static void test_embedding(int N, int C, int Vfull, int off, int V, int hot)
{
    int32_t *tok = h_tokens(N, Vfull, 0);
    for (int i = 0; hot && i < N; i++) /* text-like skew: half the positions one id, a sixth another */
        tok[i] = i % 2 ? off + 7 : i % 3 ? tok[i] : off + 130 % V;
    float *wte = h_rand((size_t)V * C, 1), *ref = h_rand((size_t)N * C, 1);
    int32_t *dtok = d_put(tok, sizeof(int32_t) * N);
    float *dwte = d_put(wte, sizeof(float) * V * C), *dout = d_poison(sizeof(float) * N * C);
    R->embedding_forward(ref, tok, wte, N, C, off, V);
    G->embedding_forward(dout, dtok, dwte, N, C, off, V);
    h_compare("embedding_forward", d_get(dout, (size_t)N * C), ref, (size_t)N * C, TOL);

    /* backward accumulates into a non-zero dwte */
    float *g = h_rand((size_t)N * C, 1), *acc = h_rand((size_t)V * C, 1);
    float *dg = d_put(g, sizeof(float) * N * C), *dacc = d_put(acc, sizeof(float) * V * C);
    R->embedding_backward(acc, g, tok, N, C, off, V);
    G->embedding_backward(dacc, dg, dtok, N, C, off, V);
    h_compare("embedding_backward", d_get(dacc, (size_t)V * C), acc, (size_t)V * C, TOL);
    /* same inputs, same bits: the backward has no atomics */
    float *a1 = d_get(dacc, (size_t)V * C);
    G->embedding_backward(dacc, dg, dtok, N, C, off, V);
    G->embedding_backward(dacc, dg, dtok, N, C, off, V);
    float *a2 = d_get(dacc, (size_t)V * C), *dacc2 = d_put(a1, sizeof(float) * V * C);
    G->embedding_backward(dacc2, dg, dtok, N, C, off, V);
    G->embedding_backward(dacc2, dg, dtok, N, C, off, V);
    float *a3 = d_get(dacc2, (size_t)V * C);
    CHECK(!memcmp(a2, a3, sizeof(float) * V * C), "embedding_backward is not bit-reproducible");
    free(a1); free(a2); free(a3);
    free(tok); free(wte); free(ref); free(g); free(acc);
    G->free(dtok); G->free(dwte); G->free(dout); G->free(dg); G->free(dacc); G->free(dacc2);
}

static void test_position(int B, int T, int C)
{
    size_t n = (size_t)B * T * C;
    float *wpe = h_rand((size_t)T * C, 1), *x = h_rand(n, 1);
    float *dwpe = d_put(wpe, sizeof(float) * T * C), *dx = d_put(x, sizeof(float) * n);
    R->position_forward(x, wpe, NULL, B, T, C);
    G->position_forward(dx, dwpe, NULL, B, T, C);
    h_compare("position_forward", d_get(dx, n), x, n, TOL);
    int32_t *pos = malloc(sizeof(int32_t) * B * T); /* position ids (packed documents restart them) */
    for (int i = 0; i < B * T; i++) pos[i] = (i * 7 + 3) % T;
    int32_t *dpos = d_put(pos, sizeof(int32_t) * B * T);
    R->position_forward(x, wpe, pos, B, T, C);
    G->position_forward(dx, dwpe, dpos, B, T, C);
    h_compare("position_forward (ids)", d_get(dx, n), x, n, TOL);
    free(pos);
    G->free(dpos);
    float *acc = h_rand((size_t)T * C, 1);
    float *dacc = d_put(acc, sizeof(float) * T * C);
    R->position_backward(acc, x, B, T, C);
    G->position_backward(dacc, dx, B, T, C); /* dx holds the same values as x */
    h_compare("position_backward", d_get(dacc, (size_t)T * C), acc, (size_t)T * C, TOL);
    free(wpe); free(x); free(acc);
    G->free(dwpe); G->free(dx); G->free(dacc);
}

static void test_layernorm(int N, int C)
{
    size_t n = (size_t)N * C;
    float *x = h_rand(n, 2), *w = h_rand(C, 1), *b = h_rand(C, 1);
    for (size_t i = 0; i < n; i++) x[i] += 0.5f; /* a non-zero mean */
    float *out = malloc(n * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    float *dx = d_put(x, n * 4), *dw = d_put(w, C * 4), *db = d_put(b, C * 4);
    float *dout = d_poison(n * 4), *dmean = d_poison(N * 4), *drstd = d_poison(N * 4);
    R->layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    G->layernorm_forward(dout, dmean, drstd, dx, dw, db, N, C, 1e-5f);
    h_compare("layernorm_forward out", d_get(dout, n), out, n, TOL);
    h_compare("layernorm_forward mean", d_get(dmean, N), mean, N, TOL);
    h_compare("layernorm_forward rstd", d_get(drstd, N), rstd, N, TOL);

    float *g = h_rand(n, 1), *dinp = h_rand(n, 1), *gw = h_rand(C, 1), *gb = h_rand(C, 1), *gs = h_rand(C, 1);
    float *dg = d_put(g, n * 4), *ddinp = d_put(dinp, n * 4), *dgw = d_put(gw, C * 4), *dgb = d_put(gb, C * 4);
    float *dgs = d_put(gs, C * 4);
    R->layernorm_backward(dinp, gw, gb, gs, g, x, w, mean, rstd, N, C); /* with the bias sum */
    G->layernorm_backward(ddinp, dgw, dgb, dgs, dg, dx, dw, dmean, drstd, N, C);
    h_compare("layernorm_backward dinp", d_get(ddinp, n), dinp, n, TOL);
    h_compare("layernorm_backward dw", d_get(dgw, C), gw, C, TOL);
    h_compare("layernorm_backward db", d_get(dgb, C), gb, C, TOL);
    h_compare("layernorm_backward dsum", d_get(dgs, C), gs, C, TOL);
    R->layernorm_backward(dinp, gw, gb, NULL, g, x, w, mean, rstd, N, C); /* and without */
    G->layernorm_backward(ddinp, dgw, dgb, NULL, dg, dx, dw, dmean, drstd, N, C);
    h_compare("layernorm_backward dinp (no bias sum)", d_get(ddinp, n), dinp, n, TOL);
    h_compare("layernorm_backward db (no bias sum)", d_get(dgb, C), gb, C, TOL);
    free(x); free(w); free(b); free(out); free(mean); free(rstd); free(g); free(dinp); free(gw); free(gb); free(gs);
    G->free(dx); G->free(dw); G->free(db); G->free(dout); G->free(dmean); G->free(drstd);
    G->free(dg); G->free(ddinp); G->free(dgw); G->free(dgb); G->free(dgs);
}

static void test_matmul(int N, int C, int OC, int with_bias)
{
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *x = h_rand(ni, 1), *w = h_rand(nw, 1), *bias = h_rand(OC, 1), *out = malloc(no * 4);
    float *dx = d_put(x, ni * 4), *dw = d_put(w, nw * 4), *dbias = d_put(bias, OC * 4), *dout = d_poison(no * 4);
    R->matmul_forward(out, x, w, with_bias ? bias : NULL, N, C, OC);
    G->matmul_forward(dout, dx, dw, with_bias ? dbias : NULL, N, C, OC);
    h_compare(with_bias ? "matmul_forward (bias)" : "matmul_forward", d_get(dout, no), out, no, TOL);

    float *g = h_rand(no, 1), *dinp = malloc(ni * 4), *gw = h_rand(nw, 1), *gb = h_rand(OC, 1);
    float *dg = d_put(g, no * 4), *ddinp = d_poison(ni * 4), *dgw = d_put(gw, nw * 4), *dgb = d_put(gb, OC * 4);
    R->matmul_backward(dinp, gw, with_bias ? gb : NULL, g, x, w, N, C, OC);
    G->matmul_backward(ddinp, dgw, with_bias ? dgb : NULL, dg, dx, dw, N, C, OC);
    h_compare("matmul_backward dinp", d_get(ddinp, ni), dinp, ni, TOL);
    h_compare("matmul_backward dw", d_get(dgw, nw), gw, nw, TOL);
    if (with_bias) h_compare("matmul_backward dbias", d_get(dgb, OC), gb, OC, TOL);
    /* dinp NULL: only the weight gradients, accumulating again */
    R->matmul_backward(NULL, gw, gb, g, x, w, N, C, OC);
    G->matmul_backward(NULL, dgw, dgb, dg, dx, dw, N, C, OC);
    h_compare("matmul_backward dw (2nd, no dinp)", d_get(dgw, nw), gw, nw, TOL);
    free(x); free(w); free(bias); free(out); free(g); free(dinp); free(gw); free(gb);
    G->free(dx); G->free(dw); G->free(dbias); G->free(dout); G->free(dg); G->free(ddinp); G->free(dgw); G->free(dgb);
}

/* NG key/value groups (NG == NH: multi-head), dropout p on the probabilities,
 * documents (h_docs) when docs */
static void test_attention_docs(int B, int T, int NH, int NG, int HD, float p, int docs)
{
    size_t nq = (size_t)B * T * (NH + 2 * NG) * HD, no = (size_t)B * T * NH * HD, na = (size_t)B * NH * T * T;
    k_dropout drop = { p, 0xfeedULL, 3, 1 };
    float *qkv = h_rand(nq, 2), *out = malloc(no * 4), *att = malloc(na * 4);
    float *dqkv_in = d_put(qkv, nq * 4), *dout = d_poison(no * 4), *datt = d_poison(na * 4);
    int32_t *doc = docs ? h_docs(B, T) : NULL, *ddoc = doc ? d_put(doc, sizeof(int32_t) * (size_t)B * T) : NULL;
    R->attention_forward(out, att, qkv, doc, B, T, NH, NG, HD, &drop);
    G->attention_forward(dout, datt, dqkv_in, ddoc, B, T, NH, NG, HD, &drop);
    h_compare(docs ? "attention_forward out (documents)" : "attention_forward out", d_get(dout, no), out, no, TOL);
    h_compare(docs ? "attention_forward att (documents)" : "attention_forward att", d_get(datt, na), att, na, TOL);
    free(doc);
    if (ddoc) G->free(ddoc);

    float *g = h_rand(no, 1), *dqkv = malloc(nq * 4), *scratch = malloc(na * 4);
    float *dg = d_put(g, no * 4), *ddqkv = d_poison(nq * 4), *dscratch = d_poison(na * 4);
    R->attention_backward(dqkv, scratch, g, qkv, att, B, T, NH, NG, HD, &drop);
    G->attention_backward(ddqkv, dscratch, dg, dqkv_in, datt, B, T, NH, NG, HD, &drop);
    h_compare("attention_backward dqkv", d_get(ddqkv, nq), dqkv, nq, TOL);
    free(qkv); free(out); free(att); free(g); free(dqkv); free(scratch);
    G->free(dqkv_in); G->free(dout); G->free(datt); G->free(dg); G->free(ddqkv); G->free(dscratch);
}
static void test_attention(int B, int T, int NH, int NG, int HD, float p)
{
    test_attention_docs(B, T, NH, NG, HD, p, 0);
}

/* a decode step (n keys, row n-1's document from k0) against the CPU's, fp32 and bf16 */
static void test_attention_decode(int n, int NH, int NG, int HD, int k0)
{
    size_t nq = (size_t)n * (NH + 2 * NG) * HD, no = (size_t)NH * HD;
    float *qkv = h_rand(nq, 2), *out = malloc(no * 4), *dq = d_put(qkv, nq * 4), *dout = d_poison(no * 4);
    R->attention_decode(out, qkv, n, k0, NH, NG, HD);
    G->attention_decode(dout, dq, n, k0, NH, NG, HD);
    h_compare("attention_decode", d_get(dout, no), out, no, TOL);
    uint16_t *bq = d_put_bf(qkv, nq), *bout = d_poison(no * 2);
    G->attention_decode_bf16(bout, bq, n, k0, NH, NG, HD);
    h_compare("attention_decode_bf16", d_get_bf(bout, no), out, no, 2e-2);
    free(qkv); free(out);
    G->free(dq); G->free(dout); G->free(bq); G->free(bout);
}

/* RMSNorm, SwiGLU, rotary embedding, q/k/v packing and hidden dropout */
static void test_llama(int N, int C, int NH, int NG, int HD)
{
    size_t n = (size_t)N * C;
    float *x = h_rand(n, 2), *w = h_rand(C, 1), *g = h_rand(n, 1), *out = malloc(n * 4), *rstd = malloc(N * 4);
    float *dx = h_rand(n, 1), *dw = h_rand(C, 1);
    float *d_x = d_put(x, n * 4), *d_w = d_put(w, C * 4), *d_g = d_put(g, n * 4), *d_out = d_poison(n * 4);
    float *d_rstd = d_poison(N * 4), *d_dx = d_put(dx, n * 4), *d_dw = d_put(dw, C * 4);
    R->rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    G->rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, 1e-5f);
    h_compare("rmsnorm_forward out", d_get(d_out, n), out, n, TOL);
    h_compare("rmsnorm_forward rstd", d_get(d_rstd, N), rstd, N, TOL);
    R->rmsnorm_backward(dx, dw, g, x, w, rstd, N, C);
    G->rmsnorm_backward(d_dx, d_dw, d_g, d_x, d_w, d_rstd, N, C);
    h_compare("rmsnorm_backward dinp", d_get(d_dx, n), dx, n, TOL);
    h_compare("rmsnorm_backward dw", d_get(d_dw, C), dw, C, TOL);

    float *dg2 = malloc(n * 4), *du2 = malloc(n * 4), *d_dg = d_poison(n * 4), *d_du = d_poison(n * 4);
    R->swiglu_forward(out, x, g, n);
    G->swiglu_forward(d_out, d_x, d_g, n);
    h_compare("swiglu_forward", d_get(d_out, n), out, n, TOL);
    R->swiglu_backward(dg2, du2, dx, x, g, n);
    G->swiglu_backward(d_dg, d_du, d_dx, d_x, d_g, n);
    h_compare("swiglu_backward dgate", d_get(d_dg, n), dg2, n, TOL);
    h_compare("swiglu_backward dup", d_get(d_du, n), du2, n, TOL);

    int B = 2, T = N / 2, M = B * T;
    size_t nq = (size_t)M * (NH + 2 * NG) * HD, nh = (size_t)M * NH * HD, nk = (size_t)M * NG * HD;
    float *qkv = h_rand(nq, 2), *d_qkv = d_put(qkv, nq * 4);
    for (int RD = HD; RD >= 2; RD = RD == HD ? HD / 2 / 2 * 2 : 0) { /* the whole head, then --rotary-percent 0.5 */
        R->rope_forward(qkv, B, T, NH, NG, HD, RD, (k_rope_freq){10000.0f, 1.0f, 1.0f, 0});
        G->rope_forward(d_qkv, B, T, NH, NG, HD, RD, (k_rope_freq){10000.0f, 1.0f, 1.0f, 0});
        h_compare(RD == HD ? "rope_forward" : "rope_forward (partial)", d_get(d_qkv, nq), qkv, nq, TOL);
        R->rope_backward(qkv, B, T, NH, NG, HD, RD, (k_rope_freq){10000.0f, 1.0f, 1.0f, 0});
        G->rope_backward(d_qkv, B, T, NH, NG, HD, RD, (k_rope_freq){10000.0f, 1.0f, 1.0f, 0});
        h_compare(RD == HD ? "rope_backward" : "rope_backward (partial)", d_get(d_qkv, nq), qkv, nq, TOL);
    }
    R->rope_forward(qkv, B, T, NH, NG, HD, HD, (k_rope_freq){500000.0f, 8.0f, 1.0f, 0}); /* LLaMA-3.1's scaling */
    G->rope_forward(d_qkv, B, T, NH, NG, HD, HD, (k_rope_freq){500000.0f, 8.0f, 1.0f, 0});
    h_compare("rope_forward (LLaMA-3.1 scaling)", d_get(d_qkv, nq), qkv, nq, TOL);
    R->rope_forward(qkv, B, T, NH, NG, HD, HD, (k_rope_freq){500000.0f, 1.0f, 4.0f, 0}); /* position interpolation */
    G->rope_forward(d_qkv, B, T, NH, NG, HD, HD, (k_rope_freq){500000.0f, 1.0f, 4.0f, 0});
    h_compare("rope_forward (position interpolation 4)", d_get(d_qkv, nq), qkv, nq, TOL);
    float *q = h_rand(nh, 1), *k = h_rand(nk, 1), *v = h_rand(nk, 1);
    float *d_q = d_put(q, nh * 4), *d_k = d_put(k, nk * 4), *d_v = d_put(v, nk * 4), *d_p = d_poison(nq * 4);
    R->qkv_pack(qkv, q, k, v, M, NH, NG, HD);
    G->qkv_pack(d_p, d_q, d_k, d_v, M, NH, NG, HD);
    h_compare("qkv_pack", d_get(d_p, nq), qkv, nq, 0);
    float *d_q2 = d_poison(nh * 4), *d_k2 = d_poison(nk * 4), *d_v2 = d_poison(nk * 4);
    G->qkv_unpack(d_q2, d_k2, d_v2, d_p, M, NH, NG, HD);
    h_compare("qkv_unpack q", d_get(d_q2, nh), q, nh, 0);
    h_compare("qkv_unpack k", d_get(d_k2, nk), k, nk, 0);
    h_compare("qkv_unpack v", d_get(d_v2, nk), v, nk, 0);

    k_dropout drop = { 0.1f, 77, 5000, 0 };
    R->dropout(x, N, C, &drop);
    G->dropout(d_x, N, C, &drop);
    h_compare("dropout", d_get(d_x, n), x, n, 0);
    free(x); free(w); free(g); free(out); free(rstd); free(dx); free(dw); free(dg2); free(du2); free(qkv);
    free(q); free(k); free(v);
    void *bufs[] = { d_x, d_w, d_g, d_out, d_rstd, d_dx, d_dw, d_dg, d_du, d_qkv, d_q, d_k, d_v, d_p, d_q2, d_k2, d_v2 };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) G->free(bufs[i]);
}

/* squared ReLU (--squared-relu): forward, backward, and backward in place as the MLP runs it;
 * n % 8 == 0 takes the 16-byte path */
static void test_relu2(size_t n)
{
    float *x = h_rand(n, 3), *y = h_rand(n, 1), *out = malloc(n * 4);
    float *dx = d_put(x, n * 4), *dy = d_put(y, n * 4), *dout = d_poison(n * 4);
    R->relu2_forward(out, x, n);
    G->relu2_forward(dout, dx, n);
    h_compare("relu2_forward", d_get(dout, n), out, n, TOL);
    G->free(dout);
    dout = d_poison(n * 4);
    R->relu2_backward(out, x, y, n);
    G->relu2_backward(dout, dx, dy, n);
    h_compare("relu2_backward", d_get(dout, n), out, n, TOL);
    G->relu2_backward(dy, dx, dy, n);
    h_compare("relu2_backward (in place)", d_get(dy, n), out, n, TOL);
    free(x); free(y); free(out);
    G->free(dx); G->free(dy); G->free(dout);
}

static void test_elementwise(size_t n)
{
    float *x = h_rand(n, 3), *y = h_rand(n, 1), *out = malloc(n * 4);
    float *dx = d_put(x, n * 4), *dy = d_put(y, n * 4), *dout = d_poison(n * 4);
    R->gelu_forward(out, x, n);
    G->gelu_forward(dout, dx, n);
    h_compare("gelu_forward", d_get(dout, n), out, n, TOL);
    R->gelu_backward(out, x, y, n);
    G->free(dout);
    dout = d_poison(n * 4);
    G->gelu_backward(dout, dx, dy, n);
    h_compare("gelu_backward", d_get(dout, n), out, n, TOL);
    float *ycopy = h_copy(y, n), *dy2 = d_put(y, n * 4);
    R->gelu_backward(ycopy, x, ycopy, n); /* in place: dinp aliases dout */
    G->gelu_backward(dy2, dx, dy2, n);
    h_compare("gelu_backward (in place)", d_get(dy2, n), ycopy, n, TOL);
    R->residual_forward(out, x, y, n);
    G->residual_forward(dout, dx, dy, n);
    h_compare("residual_forward", d_get(dout, n), out, n, TOL);
    R->add_inplace(x, y, n);
    G->add_inplace(dx, dy, n);
    h_compare("add_inplace", d_get(dx, n), x, n, TOL);
    R->scale(x, -0.37f, n);
    G->scale(dx, -0.37f, n);
    h_compare("scale", d_get(dx, n), x, n, TOL);
    free(x); free(y); free(out); free(ycopy);
    G->free(dx); G->free(dy); G->free(dout); G->free(dy2);
}

/* The fused classifier against the four-call reference. */
static void test_xent_fused(int N, int V)
{
    size_t nl = (size_t)N * V;
    float *lg = h_rand(nl, 4), *d = h_copy(lg, nl), *loss = malloc(N * 4);
    int32_t *tg = h_tokens(N, V, 1);
    float *dlg = d_put(lg, nl * 4), *dloss = d_poison(N * 4);
    int32_t *dtg = d_put(tg, sizeof(int32_t) * N);
    R->xent_fused(loss, d, tg, 0.25f, N, V);
    G->xent_fused(dloss, dlg, dtg, 0.25f, N, V);
    h_compare("xent_fused loss", d_get(dloss, N), loss, N, TOL);
    h_compare("xent_fused dlogits (in place)", d_get(dlg, nl), d, nl, TOL);
    float *before = d_get(dlg, nl);
    G->xent_fused(dloss, dlg, dtg, 0.0f, N, V); /* dloss 0: loss only, logits untouched */
    h_compare("xent_fused with dloss 0 keeps the logits", d_get(dlg, nl), before, nl, 0.0);
    free(before);
    free(lg); free(d); free(loss); free(tg);
    G->free(dlg); G->free(dloss); G->free(dtg);
}

static void test_xent(int N, int Vfull, int off, int V)
{
    size_t nl = (size_t)N * V;
    float *lg = h_rand(nl, 4);
    int32_t *tg = h_tokens(N, Vfull, 1);
    float *mx = malloc(N * 4), *se = malloc(N * 4), *tl = malloc(N * 4), *loss = malloc(N * 4), *d = malloc(nl * 4);
    float *dlg = d_put(lg, nl * 4);
    int32_t *dtg = d_put(tg, sizeof(int32_t) * N);
    float *dmx = d_poison(N * 4), *dse = d_poison(N * 4), *dtl = d_poison(N * 4), *dloss = d_poison(N * 4);
    float *dd = d_poison(nl * 4);
    R->xent_max(mx, lg, N, V);
    G->xent_max(dmx, dlg, N, V);
    h_compare("xent_max", d_get(dmx, N), mx, N, TOL);
    R->xent_sumexp_target(se, tl, lg, mx, tg, N, V, off);
    G->xent_sumexp_target(dse, dtl, dlg, dmx, dtg, N, V, off);
    h_compare("xent_sumexp_target sumexp", d_get(dse, N), se, N, TOL);
    h_compare("xent_sumexp_target target_logit", d_get(dtl, N), tl, N, TOL);
    R->xent_loss(loss, mx, se, tl, tg, N);
    G->xent_loss(dloss, dmx, dse, dtl, dtg, N);
    h_compare("xent_loss", d_get(dloss, N), loss, N, TOL);
    R->xent_backward(d, lg, mx, se, tg, 0.25f, N, V, off);
    G->xent_backward(dd, dlg, dmx, dse, dtg, 0.25f, N, V, off);
    h_compare("xent_backward", d_get(dd, nl), d, nl, TOL);
    G->xent_backward(dlg, dlg, dmx, dse, dtg, 0.25f, N, V, off); /* in place over the logits */
    h_compare("xent_backward (in place)", d_get(dlg, nl), d, nl, TOL);
    free(lg); free(tg); free(mx); free(se); free(tl); free(loss); free(d);
    G->free(dlg); G->free(dtg); G->free(dmx); G->free(dse); G->free(dtl); G->free(dloss); G->free(dd);
}

static void test_optimizer(size_t n)
{
    float *p = h_rand(n, 1), *g = h_rand(n, 0.1f), *m = h_rand(n, 0.01f), *v = h_rand(n, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]) * 0.01f; /* a second moment is >= 0 */
    float *dp = d_put(p, n * 4), *dg = d_put(g, n * 4), *dm = d_put(m, n * 4), *dv = d_put(v, n * 4);
    double s_ref = R->sumsq(g, n), s_got = G->sumsq(dg, n);
    CHECK(fabs(s_got - s_ref) <= 1e-9 * s_ref, "sumsq %.17g vs %.17g", s_got, s_ref);
    s_ref = R->sumsq(g + 1, n - 1), s_got = G->sumsq(dg + 1, n - 1); /* a shard not 16-byte aligned */
    CHECK(fabs(s_got - s_ref) <= 1e-9 * s_ref, "sumsq (unaligned) %.17g vs %.17g", s_got, s_ref);
    for (size_t i = 0; i < n; i += 3) g[i] = 0.0f; /* a third of the gradient zero: --log-num-zeros-in-grad */
    G->to_device(dg, g, n * 4);
    uint64_t z_ref = R->nonzeros(g, n), z_got = G->nonzeros(dg, n);
    CHECK(z_got == z_ref && z_ref < n, "nonzeros %llu vs %llu of %zu", (unsigned long long)z_got,
          (unsigned long long)z_ref, n);
    R->adamw(p, g, m, v, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3);
    G->adamw(dp, dg, dm, dv, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3);
    h_compare("adamw param", d_get(dp, n), p, n, TOL);
    h_compare("adamw m", d_get(dm, n), m, n, TOL);
    h_compare("adamw v", d_get(dv, n), v, n, TOL);
    free(p); free(g); free(m); free(v);
    G->free(dp); G->free(dg); G->free(dm); G->free(dv);
}

int main(int argc, char **argv)
{
    (void)argc;
    if (!h_setup()) return 0;
    test_embedding(37, 19, 50, 0, 50, 0);
    test_embedding(1024, 768, 3000, 1000, 1000, 0); /* a vocab slice: tokens outside it give zero rows */
    test_embedding(5000, 64, 3000, 1000, 1000, 1);  /* several chunks of positions, the last partial; skewed */
    test_embedding(2100, 21, 300, 0, 300, 1);       /* the same on columns that are not 16-byte rows */
    test_embedding(2100, 70, 300, 0, 300, 1);       /* three column tiles of the backward, the last partial */
    test_embedding(3000, 328, 300, 0, 300, 1);      /* two 256-column tiles, the second partial; skewed */
    test_position(3, 17, 29);
    test_position(4, 256, 768);
    test_position(6, 40, 64); /* the backward's 8-column form: a batch of 4 loads and 2 more */
    test_layernorm(5, 37);
    test_layernorm(512, 768);
    test_layernorm(256, 1600); /* the fused backward's loop form (768: its registers form) */
    /* its registers form at each number of 256-column chunks, and rows that end inside a chunk */
    test_layernorm(96, 200);
    test_layernorm(64, 512);
    test_layernorm(64, 520);
    test_layernorm(64, 1024);
    test_layernorm(64, 13000); /* warp-per-row kernels at a large C */
    test_layernorm(64, 13001); /* general kernels: dw/db partials above 48 KiB of shared memory */
    test_matmul(7, 13, 11, 1);
    test_matmul(7, 13, 11, 0);
    test_matmul(512, 768, 2304, 1);
    test_matmul(300, 3072, 768, 1);
    test_attention(2, 5, 2, 2, 3, 0.0f);
    test_attention(2, 128, 4, 4, 64, 0.0f);
    test_attention(1, 257, 3, 3, 32, 0.0f);
    test_attention(2, 96, 8, 2, 64, 0.0f);  /* grouped-query: 4 heads per key/value group */
    test_attention(2, 70, 4, 2, 32, 0.1f);  /* and dropout */
    test_attention_docs(2, 150, 4, 2, 32, 0.1f, 1); /* documents */
    test_attention_decode(1, 2, 2, 64, 0);
    test_attention_decode(300, 4, 2, 64, 0);   /* three chunks of keys; grouped-query */
    test_attention_decode(200, 6, 3, 40, 150); /* a document from 150, an odd head dim */
    test_attention_decode(1024, 12, 12, 64, 0); /* GPT-2 124M's heads at its full context */
    test_llama(64, 768, 12, 4, 64);
    test_llama(10, 37, 4, 2, 8);
    test_elementwise(1);
    test_elementwise(100003);
    test_relu2(1);
    test_relu2(100003);
    test_relu2(4096);
    test_xent(9, 50, 0, 50);
    test_xent(256, 50304, 25152, 25152); /* the second half of a tp2 vocab */
    test_xent_fused(9, 50);
    test_xent_fused(64, 50304); /* 201 KB rows: cached in shared memory on sm_90 */
    test_optimizer(5);
    test_optimizer(1000003);
    return check_summary(argv[0]);
}
