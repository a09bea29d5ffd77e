/* CPU kernels against finite differences and plain-loop references.
 * Each backward is checked by perturbing inputs and weights of a scalar
 * objective sum(dout * f(x)); tolerances are for fp32 central differences. */
#include "check.h"
#include "k_dropout.h"
#include "kernels.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const k_ops *K;
static unsigned rng_state = 12345;

static float frand(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return ((float)((rng_state >> 8) & 0xffff) / 65536.0f - 0.5f) * 2.0f;
}

static float *randv(size_t n)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = frand();
    return v;
}

static double dotp(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Central difference of obj() with respect to x[i]. */
typedef double (*objective)(void *ctx);
static double numgrad(float *x, size_t i, objective f, void *ctx)
{
    float h = 1e-2f, save = x[i];
    x[i] = save + h;
    double up = f(ctx);
    x[i] = save - h;
    double down = f(ctx);
    x[i] = save;
    return (up - down) / (2.0 * h);
}

static void check_grad(const char *what, float *x, const float *analytic, size_t n, objective f, void *ctx)
{
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(analytic[i]));
    for (size_t i = 0; i < n; i += (n > 64 ? 7 : 1)) {
        double e = fabs(numgrad(x, i, f, ctx) - analytic[i]);
        worst = fmax(worst, e);
    }
    CHECK(worst <= 2e-2 * fmax(scale, 1e-3), "%s: gradient off by %g (scale %g)", what, worst, scale);
}

/* ---- layernorm ---- */
typedef struct { int N, C; float *x, *w, *b, *out, *mean, *rstd, *dout; } ln_ctx;
static double ln_obj(void *p)
{
    ln_ctx *c = p;
    K->layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, 1e-5f);
    return dotp(c->out, c->dout, (size_t)c->N * c->C);
}
static void test_layernorm(void)
{
    ln_ctx c = { 3, 8, randv(24), randv(8), randv(8), randv(24), randv(3), randv(3), randv(24) };
    float dx[24] = { 0 }, dw[8] = { 0 }, db[8] = { 0 };
    ln_obj(&c);
    double m = 0;
    for (int i = 0; i < 8; i++) m += c.x[i];
    CHECK(fabs(c.mean[0] - m / 8) < 1e-6, "layernorm mean");
    double var = 0;
    for (int i = 0; i < 8; i++) var += (c.x[i] - m / 8) * (c.x[i] - m / 8);
    CHECK(fabs(c.rstd[0] - 1 / sqrt(var / 8 + 1e-5)) < 1e-5 * c.rstd[0], "layernorm rstd, eps 1e-5");
    float o2[24], m2[3], r2[3]; /* --norm-epsilon 0.5 */
    K->layernorm_forward(o2, m2, r2, c.x, c.w, c.b, c.N, c.C, 0.5f);
    CHECK(fabs(r2[0] - 1 / sqrt(var / 8 + 0.5)) < 1e-5 * r2[0] &&
              fabs(o2[3] - ((c.x[3] - m / 8) * r2[0] * c.w[3] + c.b[3])) < 1e-5, "layernorm with eps 0.5");
    float rr[3];
    K->rmsnorm_forward(o2, rr, c.x, c.w, c.N, c.C, 0.5f);
    double ss = 0;
    for (int i = 0; i < 8; i++) ss += (double)c.x[i] * c.x[i];
    CHECK(fabs(rr[0] - 1 / sqrt(ss / 8 + 0.5)) < 1e-5 * rr[0], "rmsnorm with eps 0.5");
    K->layernorm_backward(dx, dw, db, NULL, c.dout, c.x, c.w, c.mean, c.rstd, c.N, c.C);
    check_grad("layernorm dx", c.x, dx, 24, ln_obj, &c);
    check_grad("layernorm dw", c.w, dw, 8, ln_obj, &c);
    check_grad("layernorm db", c.b, db, 8, ln_obj, &c);
    free(c.x); free(c.w); free(c.b); free(c.out); free(c.mean); free(c.rstd); free(c.dout);
}

/* ---- matmul ---- */
typedef struct { int N, C, OC; float *x, *w, *b, *out, *dout; } mm_ctx;
static double mm_obj(void *p)
{
    mm_ctx *c = p;
    K->matmul_forward(c->out, c->x, c->w, c->b, c->N, c->C, c->OC);
    return dotp(c->out, c->dout, (size_t)c->N * c->OC);
}
static void test_matmul(void)
{
    mm_ctx c = { 5, 6, 4, randv(30), randv(24), randv(4), randv(20), randv(20) };
    mm_obj(&c);
    double ref = c.b[1];
    for (int k = 0; k < 6; k++) ref += (double)c.x[2 * 6 + k] * c.w[1 * 6 + k];
    CHECK(fabs(c.out[2 * 4 + 1] - ref) < 1e-5, "matmul out[2,1] = %g, loops give %g", c.out[2 * 4 + 1], ref);
    float dx[30], dw[24] = { 0 }, db[4] = { 0 };
    K->matmul_backward(dx, dw, db, c.dout, c.x, c.w, c.N, c.C, c.OC);
    check_grad("matmul dx", c.x, dx, 30, mm_obj, &c);
    check_grad("matmul dw", c.w, dw, 24, mm_obj, &c);
    check_grad("matmul db", c.b, db, 4, mm_obj, &c);
    /* weight gradients accumulate */
    K->matmul_backward(NULL, dw, db, c.dout, c.x, c.w, c.N, c.C, c.OC);
    float dw1[24] = { 0 }, db1[4] = { 0 };
    K->matmul_backward(NULL, dw1, db1, c.dout, c.x, c.w, c.N, c.C, c.OC);
    CHECK(fabs(dw[3] - 2 * dw1[3]) < 1e-5 && fabs(db[2] - 2 * db1[2]) < 1e-5, "dw/dbias accumulate");
    free(c.x); free(c.w); free(c.b); free(c.out); free(c.dout);
}

/* ---- attention ---- */
typedef struct { int B, T, NH, HD; float *qkv, *out, *att, *dout; } at_ctx;
static double at_obj(void *p)
{
    at_ctx *c = p;
    K->attention_forward(c->out, c->att, c->qkv, NULL, c->B, c->T, c->NH, c->NH, c->HD, NULL);
    return dotp(c->out, c->dout, (size_t)c->B * c->T * c->NH * c->HD);
}
static void test_attention(void)
{
    int B = 2, T = 5, NH = 2, HD = 3, C = NH * HD;
    at_ctx c = { B, T, NH, HD, randv((size_t)B * T * 3 * C), randv((size_t)B * T * C),
                 randv((size_t)B * NH * T * T), randv((size_t)B * T * C) };
    at_obj(&c);
    /* plain-loop reference for batch 1, head 1, position 3 */
    int b = 1, h = 1, t = 3;
    double s[5], mx = -1e30, sum = 0;
    const float *q = c.qkv + ((size_t)b * T + t) * 3 * C + h * 3 * HD;
    for (int j = 0; j <= t; j++) {
        const float *k = c.qkv + ((size_t)b * T + j) * 3 * C + h * 3 * HD + HD;
        s[j] = dotp(q, k, HD) / sqrt(HD);
        mx = fmax(mx, s[j]);
    }
    for (int j = 0; j <= t; j++) sum += s[j] = exp(s[j] - mx);
    for (int d = 0; d < HD; d++) {
        double o = 0;
        for (int j = 0; j <= t; j++) o += s[j] / sum * c.qkv[((size_t)b * T + j) * 3 * C + h * 3 * HD + 2 * HD + d];
        float got = c.out[((size_t)b * T + t) * C + h * HD + d];
        CHECK(fabs(got - o) < 1e-5, "attention out[%d] = %g, loops give %g", d, got, o);
    }
    CHECK(c.att[(((size_t)b * NH + h) * T + 1) * T + 4] == 0.0f, "causal mask: future probability is 0");
    float *dqkv = calloc((size_t)B * T * 3 * C, sizeof(float)), *scratch = calloc((size_t)B * NH * T * T, sizeof(float));
    K->attention_backward(dqkv, scratch, c.dout, c.qkv, c.att, B, T, NH, NH, HD, NULL);
    check_grad("attention dqkv", c.qkv, dqkv, (size_t)B * T * 3 * C, at_obj, &c);
    free(dqkv); free(scratch); free(c.qkv); free(c.out); free(c.att); free(c.dout);
}

/* ---- grouped-query attention with dropout ----
 * 4 heads in 2 key/value groups ([B, T, NG, Q+2, HD] rows), dropout 0.3 on
 * the probabilities: a plain-loop output against k_dropout.h's mask, and the
 * gradient by finite differences (the mask is a fixed function of the key). */
typedef struct { int B, T, NH, NG, HD; float *qkv, *out, *att, *dout; k_dropout d; } gq_ctx;
static double gq_obj(void *p)
{
    gq_ctx *c = p;
    K->attention_forward(c->out, c->att, c->qkv, NULL, c->B, c->T, c->NH, c->NG, c->HD, &c->d);
    return dotp(c->out, c->dout, (size_t)c->B * c->T * c->NH * c->HD);
}
static void test_attention_gqa_dropout(void)
{
    int B = 2, T = 6, NH = 4, NG = 2, HD = 3, Q = NH / NG, W = (NH + 2 * NG) * HD, C = NH * HD;
    gq_ctx c = { B, T, NH, NG, HD, randv((size_t)B * T * W), randv((size_t)B * T * C), randv((size_t)B * NH * T * T),
                 randv((size_t)B * T * C), { 0.3f, 0x1234abcdULL, 17, 8 } };
    gq_obj(&c);
    uint32_t th = k_dropout_threshold(0.3f);
    float sc = k_dropout_scale(0.3f);
    int b = 1, h = 3, t = 5, g = h / Q; /* head 3: the second query of group 1 */
    double s[6], mx = -1e30, sum = 0;
    const float *q = c.qkv + ((size_t)b * T + t) * W + (g * (Q + 2) + h % Q) * HD;
    for (int j = 0; j <= t; j++) {
        s[j] = dotp(q, c.qkv + ((size_t)b * T + j) * W + (g * (Q + 2) + Q) * HD, HD) / sqrt(HD);
        mx = fmax(mx, s[j]);
    }
    for (int j = 0; j <= t; j++) sum += s[j] = exp(s[j] - mx);
    uint64_t key = k_dropout_row_key(c.d.key, c.d.row0 + b, c.d.head0 + h);
    int dropped = 0;
    for (int j = 0; j <= t; j++) dropped += k_dropout_mul(key, (uint64_t)t * T + j, th, sc) == 0.0f;
    for (int d = 0; d < HD; d++) {
        double o = 0;
        for (int j = 0; j <= t; j++)
            o += s[j] / sum * k_dropout_mul(key, (uint64_t)t * T + j, th, sc) *
                 c.qkv[((size_t)b * T + j) * W + (g * (Q + 2) + Q + 1) * HD + d];
        float got = c.out[((size_t)b * T + t) * C + h * HD + d];
        CHECK(fabs(got - o) < 1e-5, "GQA attention with dropout out[%d] = %g, loops give %g (%d of %d dropped)", d, got,
              o, dropped, t + 1);
    }
    float *dqkv = calloc((size_t)B * T * W, sizeof(float)), *scratch = calloc((size_t)B * NH * T * T, sizeof(float));
    K->attention_backward(dqkv, scratch, c.dout, c.qkv, c.att, B, T, NH, NG, HD, &c.d);
    check_grad("GQA attention with dropout dqkv", c.qkv, dqkv, (size_t)B * T * W, gq_obj, &c);
    /* the mask depends on the sample: another row0 gives other outputs */
    float *out0 = malloc((size_t)B * T * C * sizeof(float));
    memcpy(out0, c.out, (size_t)B * T * C * sizeof(float));
    c.d.row0++;
    gq_obj(&c);
    CHECK(memcmp(out0, c.out, (size_t)B * T * C * sizeof(float)) != 0, "attention dropout masks follow the sample");
    free(out0); free(dqkv); free(scratch); free(c.qkv); free(c.out); free(c.att); free(c.dout);
}

/* ---- RMSNorm ---- */
typedef struct { int N, C; float *x, *w, *out, *rstd, *dout; } rn_ctx;
static double rn_obj(void *p)
{
    rn_ctx *c = p;
    K->rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
    return dotp(c->out, c->dout, (size_t)c->N * c->C);
}
static void test_rmsnorm(void)
{
    rn_ctx c = { 3, 8, randv(24), randv(8), randv(24), randv(3), randv(24) };
    rn_obj(&c);
    double ss = 0;
    for (int i = 0; i < 8; i++) ss += (double)c.x[8 + i] * c.x[8 + i];
    double r = 1.0 / sqrt(ss / 8 + 1e-5);
    CHECK(fabs(c.out[8 + 3] - c.x[8 + 3] * r * c.w[3]) < 1e-5 && fabs(c.rstd[1] - r) < 1e-5, "rmsnorm by loops");
    float dx[24] = { 0 }, dw[8] = { 0 };
    K->rmsnorm_backward(dx, dw, c.dout, c.x, c.w, c.rstd, c.N, c.C);
    check_grad("rmsnorm dx", c.x, dx, 24, rn_obj, &c);
    check_grad("rmsnorm dw", c.w, dw, 8, rn_obj, &c);
    free(c.x); free(c.w); free(c.out); free(c.rstd); free(c.dout);
}

/* ---- SwiGLU ---- */
typedef struct { float *g, *u, *out, *dout; } sw_ctx;
static double sw_obj(void *p)
{
    sw_ctx *c = p;
    K->swiglu_forward(c->out, c->g, c->u, 16);
    return dotp(c->out, c->dout, 16);
}
static void test_swiglu(void)
{
    sw_ctx c = { randv(16), randv(16), randv(16), randv(16) };
    sw_obj(&c);
    double x = c.g[4];
    CHECK(fabs(c.out[4] - x / (1 + exp(-x)) * c.u[4]) < 1e-6, "swiglu = silu(gate) * up");
    float dg[16], du[16];
    K->swiglu_backward(dg, du, c.dout, c.g, c.u, 16);
    check_grad("swiglu dgate", c.g, dg, 16, sw_obj, &c);
    check_grad("swiglu dup", c.u, du, 16, sw_obj, &c);
    free(c.g); free(c.u); free(c.out); free(c.dout);
}

/* ---- squared ReLU ---- */
typedef struct { float *x, *out, *dout; } r2_ctx;
static double r2_obj(void *p)
{
    r2_ctx *c = p;
    K->relu2_forward(c->out, c->x, 16);
    return dotp(c->out, c->dout, 16);
}
static void test_relu2(void)
{
    r2_ctx c = { randv(16), randv(16), randv(16) };
    for (int i = 0; i < 16; i++) /* away from the kink at 0, where the finite difference is not the derivative */
        if (fabsf(c.x[i]) < 0.05f) c.x[i] = c.x[i] < 0 ? -0.3f : 0.3f;
    r2_obj(&c);
    int pos = 0, neg = 0;
    for (int i = 0; i < 16; i++) {
        double want = c.x[i] > 0 ? (double)c.x[i] * c.x[i] : 0.0;
        CHECK(fabs(c.out[i] - want) < 1e-6, "relu2[%d] = max(x, 0)^2: %g vs %g", i, c.out[i], want);
        pos += c.x[i] > 0, neg += c.x[i] < 0;
    }
    CHECK(pos && neg, "relu2 inputs of both signs (%d positive, %d negative)", pos, neg);
    float dx[16];
    K->relu2_backward(dx, c.x, c.dout, 16);
    check_grad("relu2 dx", c.x, dx, 16, r2_obj, &c);
    memcpy(dx, c.dout, sizeof dx);
    K->relu2_backward(dx, c.x, dx, 16); /* in place */
    for (int i = 0; i < 16; i++)
        CHECK(dx[i] == (c.x[i] > 0 ? 2.0f * c.x[i] * c.dout[i] : 0.0f), "relu2 backward in place [%d]", i);
    free(c.x); free(c.out); free(c.dout);
}

/* LLaMA-3.1's rope scaling, written out from Hugging Face's rope_type "llama3"
 * (low_freq_factor 1, high_freq_factor 4, 8192 original positions): a
 * frequency whose wavelength is over 8192 divided by the factor, under 2048
 * kept, between blended by s = (8192 / wavelength - 1) / 3. */
static double llama3_freq(double f, double factor)
{
    double wl = 2 * M_PI / f;
    if (wl < 2048) return f;
    if (wl > 8192) return f / factor;
    double s = (8192 / wl - 1) / 3;
    return (1 - s) * f / factor + s * f;
}

/* --use-rope-scaling: a unit vector at each pair turned to (cos, sin) of t x
 * the scaled frequency, at positions up to 16383 and with LLaMA-3's base, so
 * every band (kept, blended, divided) is met; factor 1 is no scaling at all. */
static void test_rope_scaling(void)
{
    int T = 16384, HD = 32, half = HD / 2, W = 3 * HD; /* one query, one key, one value head */
    size_t n = (size_t)T * W;
    float *x = calloc(n, sizeof(float)), *y = malloc(n * sizeof(float));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) x[(size_t)t * W + i] = 1.0f; /* the query's first half */
    memcpy(y, x, n * sizeof(float));
    K->rope_forward(y, 1, T, 1, 1, HD, HD, (k_rope_freq){500000.0f, 8.0f, 1.0f, 0});
    double worst = 0;
    int bands[3] = { 0, 0, 0 };
    for (int i = 0; i < half; i++) {
        double f = pow(500000.0, -2.0 * i / HD), g = llama3_freq(f, 8.0), wl = 2 * M_PI / f;
        bands[wl < 2048 ? 0 : wl > 8192 ? 2 : 1]++;
        for (int t = 0; t < T; t += 127) {
            const float *r = y + (size_t)t * W;
            worst = fmax(worst, fmax(fabs(r[i] - cos(t * g)), fabs(r[i + half] - sin(t * g))));
        }
    }
    CHECK(bands[0] && bands[1] && bands[2], "the pairs meet every band: %d kept, %d blended, %d divided", bands[0],
          bands[1], bands[2]);
    CHECK(worst < 2e-5, "rope with LLaMA-3.1's scaling turns by the scaled frequencies (worst %g)", worst);
    float *z = malloc(n * sizeof(float));
    memcpy(z, x, n * sizeof(float));
    K->rope_forward(z, 1, T, 1, 1, HD, HD, (k_rope_freq){500000.0f, 1.0f, 1.0f, 0});
    worst = 0;
    for (int i = 0; i < half; i++)
        for (int t = 0; t < T; t += 127)
            worst = fmax(worst, fabs(z[(size_t)t * W + i] - cos(t * pow(500000.0, -2.0 * i / HD))));
    CHECK(worst < 2e-5, "factor 1 leaves the frequencies alone (worst %g)", worst);
    /* --rotary-seq-len-interpolation-factor 4: position t turns as t / 4 would, in every band */
    memcpy(z, x, n * sizeof(float));
    K->rope_forward(z, 1, T, 1, 1, HD, HD, (k_rope_freq){500000.0f, 1.0f, 4.0f, 0});
    worst = 0;
    for (int i = 0; i < half; i++)
        for (int t = 0; t < T; t += 127) {
            double a = t / 4.0 * pow(500000.0, -2.0 * i / HD);
            const float *r = z + (size_t)t * W;
            worst = fmax(worst, fmax(fabs(r[i] - cos(a)), fabs(r[i + half] - sin(a))));
        }
    CHECK(worst < 2e-5, "position interpolation 4 turns position t by t/4 (worst %g)", worst);
    free(x); free(y); free(z);
}

/* ---- rotary embedding, q/k/v packing, hidden dropout ---- */
static void test_rope_pack_dropout(void)
{
    int B = 2, T = 5, NH = 4, NG = 2, HD = 6, Q = 2, W = (NH + 2 * NG) * HD, N = B * T;
    size_t n = (size_t)N * W;
    float *x = randv(n), *y = randv(n), *rx = malloc(n * sizeof(float)), *ry = malloc(n * sizeof(float));
    memcpy(rx, x, n * sizeof(float));
    memcpy(ry, y, n * sizeof(float));
    K->rope_forward(rx, B, T, NH, NG, HD, HD, (k_rope_freq){500.0f, 1.0f, 1.0f, 0});
    /* row b=1, t=3: group 1's second query, pair i=1 turned by 3 * 500^(-2/6) */
    double a = 3 * pow(500.0, -2.0 / 6);
    size_t at = ((size_t)1 * T + 3) * W + (1 * (Q + 2) + 1) * HD;
    CHECK(fabs(rx[at + 1] - (x[at + 1] * cos(a) - x[at + 4] * sin(a))) < 1e-5 &&
          fabs(rx[at + 4] - (x[at + 4] * cos(a) + x[at + 1] * sin(a))) < 1e-5, "rope turns a query pair");
    size_t v = ((size_t)1 * T + 3) * W + (1 * (Q + 2) + Q + 1) * HD;
    CHECK(rx[v] == x[v] && rx[v + 5] == x[v + 5], "rope leaves values alone");
    CHECK(fabs(dotp(rx, rx, n) - dotp(x, x, n)) < 1e-3, "rope is a rotation (norm kept)");
    /* backward is the transpose: <rope(x), y> == <x, rope_backward(y)> */
    K->rope_backward(ry, B, T, NH, NG, HD, HD, (k_rope_freq){500.0f, 1.0f, 1.0f, 0});
    CHECK(fabs(dotp(rx, y, n) - dotp(x, ry, n)) < 1e-4, "rope_backward is rope's transpose");
    /* --rotary-percent 2/3: the first RD = 4 dims of each head turn, pairs (i, i + 2) by t * 500^(-2i/4),
     * dims 4 and 5 pass through; backward undoes it */
    int RD = 4;
    float *px = malloc(n * sizeof(float));
    memcpy(px, x, n * sizeof(float));
    K->rope_forward(px, B, T, NH, NG, HD, RD, (k_rope_freq){500.0f, 1.0f, 1.0f, 0});
    double ap = 3 * pow(500.0, -2.0 / RD);
    CHECK(fabs(px[at + 1] - (x[at + 1] * cos(ap) - x[at + 3] * sin(ap))) < 1e-5 &&
          fabs(px[at + 3] - (x[at + 3] * cos(ap) + x[at + 1] * sin(ap))) < 1e-5, "partial rope turns pair (1, 3)");
    CHECK(px[at + 4] == x[at + 4] && px[at + 5] == x[at + 5], "partial rope leaves dims RD.. alone");
    K->rope_backward(px, B, T, NH, NG, HD, RD, (k_rope_freq){500.0f, 1.0f, 1.0f, 0});
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(px[i] - x[i]));
    CHECK(worst < 1e-5, "partial rope_backward undoes the forward (%g)", worst);
    free(px);
    /* pack: q[N, NH*HD], k, v[N, NG*HD] into the rows' groups, unpack back */
    float *q = randv((size_t)N * NH * HD), *k = randv((size_t)N * NG * HD), *vv = randv((size_t)N * NG * HD);
    float *q2 = calloc((size_t)N * NH * HD, 4), *k2 = calloc((size_t)N * NG * HD, 4), *v2 = calloc((size_t)N * NG * HD, 4);
    K->qkv_pack(rx, q, k, vv, N, NH, NG, HD);
    CHECK(rx[(size_t)7 * W + (1 * (Q + 2) + 1) * HD + 2] == q[(size_t)7 * NH * HD + 3 * HD + 2] &&
          rx[(size_t)7 * W + (1 * (Q + 2) + Q) * HD + 2] == k[(size_t)7 * NG * HD + 1 * HD + 2] &&
          rx[(size_t)7 * W + (0 * (Q + 2) + Q + 1) * HD] == vv[(size_t)7 * NG * HD], "qkv_pack places q, k, v");
    K->qkv_unpack(q2, k2, v2, rx, N, NH, NG, HD);
    CHECK(!memcmp(q, q2, (size_t)N * NH * HD * 4) && !memcmp(k, k2, (size_t)N * NG * HD * 4) &&
          !memcmp(vv, v2, (size_t)N * NG * HD * 4), "qkv_unpack undoes qkv_pack");
    /* hidden dropout: the formula, the rate, and the same mask for a row
     * whether it is dropped with its neighbours or on its own (sequence parallel) */
    int R = 40, C = 50;
    float *h = randv((size_t)R * C), *h1 = malloc((size_t)R * C * 4), *h2 = malloc((size_t)R * C * 4);
    memcpy(h1, h, (size_t)R * C * 4);
    memcpy(h2, h, (size_t)R * C * 4);
    k_dropout d = { 0.25f, 99, 1000, 0 }, d2 = d;
    K->dropout(h1, R, C, &d);
    d2.row0 = d.row0 + R / 2;
    K->dropout(h2, R / 2, C, &d);
    K->dropout(h2 + (size_t)R / 2 * C, R / 2, C, &d2);
    CHECK(!memcmp(h1, h2, (size_t)R * C * 4), "dropout of a row block equals the rows dropped apart");
    int zeros = 0, ok = 1;
    for (int i = 0; i < R * C; i++) {
        float m = k_dropout_mul(99, (uint64_t)(1000 + i / C) * C + i % C, k_dropout_threshold(0.25f), 1 / 0.75f);
        ok &= h1[i] == h[i] * m;
        zeros += h1[i] == 0.0f;
    }
    CHECK(ok && zeros > R * C / 5 && zeros < R * C * 3 / 10, "dropout 0.25: mask by k_dropout.h, %d of %d zeroed", zeros,
          R * C);
    free(x); free(y); free(rx); free(ry); free(q); free(k); free(vv); free(q2); free(k2); free(v2);
    free(h); free(h1); free(h2);
}

/* ---- gelu ---- */
typedef struct { float *x, *out, *dout; } ge_ctx;
static double ge_obj(void *p)
{
    ge_ctx *c = p;
    K->gelu_forward(c->out, c->x, 16);
    return dotp(c->out, c->dout, 16);
}
static void test_gelu(void)
{
    ge_ctx c = { randv(16), randv(16), randv(16) };
    ge_obj(&c);
    double x = c.x[5];
    double ref = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    CHECK(fabs(c.out[5] - ref) < 1e-6, "gelu tanh form");
    float dx[16];
    K->gelu_backward(dx, c.x, c.dout, 16);
    check_grad("gelu", c.x, dx, 16, ge_obj, &c);
    free(c.x); free(c.out); free(c.dout);
}

/* ---- cross-entropy: two vocab slices combined == one whole vocab ---- */
static void test_xent_split(void)
{
    int N = 4, V = 10, half = 5;
    float *logits = randv((size_t)N * V);
    for (int i = 0; i < N * V; i++) logits[i] *= 4;
    int32_t targets[4] = { 1, 7, 5, -1 };
    float mx[4], se[8], loss[4], d[40];
    K->xent_max(mx, logits, N, V);
    K->xent_sumexp_target(se, se + 4, logits, mx, targets, N, V, 0);
    K->xent_loss(loss, mx, se, se + 4, targets, N);
    for (int n = 0; n < 3; n++) {
        double z = 0;
        for (int j = 0; j < V; j++) z += exp(logits[n * V + j]);
        CHECK(fabs(loss[n] - (log(z) - logits[n * V + targets[n]])) < 1e-5, "xent loss row %d", n);
    }
    CHECK(loss[3] == 0.0f, "ignored target has zero loss");
    K->xent_backward(d, logits, mx, se, targets, 0.5f, N, V, 0);

    /* slices: columns [0,5) and [5,10), each a [N,5] array */
    float sl[2][20], smx[2][4], sse[2][8], gmx[4], gse[8], sloss[4], sd[2][20];
    for (int s = 0; s < 2; s++) {
        for (int n = 0; n < N; n++) memcpy(sl[s] + n * half, logits + n * V + s * half, sizeof(float) * half);
        K->xent_max(smx[s], sl[s], N, half);
    }
    for (int n = 0; n < N; n++) gmx[n] = fmaxf(smx[0][n], smx[1][n]); /* all-reduce MAX */
    for (int s = 0; s < 2; s++) K->xent_sumexp_target(sse[s], sse[s] + 4, sl[s], gmx, targets, N, half, s * half);
    for (int i = 0; i < 8; i++) gse[i] = sse[0][i] + sse[1][i];         /* all-reduce SUM */
    K->xent_loss(sloss, gmx, gse, gse + 4, targets, N);
    for (int n = 0; n < N; n++) CHECK(fabs(sloss[n] - loss[n]) < 1e-5, "split loss row %d: %g vs %g", n, sloss[n], loss[n]);
    for (int s = 0; s < 2; s++) K->xent_backward(sd[s], sl[s], gmx, gse, targets, 0.5f, N, half, s * half);
    double worst = 0;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) worst = fmax(worst, fabs(sd[j / half][n * half + j % half] - d[n * V + j]));
    CHECK(worst < 1e-6, "split dlogits differ by %g", worst);
    double rowsum = 0;
    for (int j = 0; j < V; j++) rowsum += d[j];
    CHECK(fabs(rowsum) < 1e-6 && d[1] < 0, "softmax - onehot: row sums to 0, target negative");
    free(logits);
}

/* ---- embeddings ---- */
static void test_embedding(void)
{
    int N = 4, C = 3, V = 6;
    float *wte = randv((size_t)V * C), out[12], dwte[18] = { 0 };
    int32_t tok[4] = { 0, 5, 2, 5 };
    K->embedding_forward(out, tok, wte + 3 * C, N, C, 3, 3); /* slice rows [3,6) */
    CHECK(out[0] == 0 && out[C] == wte[5 * C] && out[2 * C] == 0, "vocab slice lookup zeroes other rows");
    float g[12];
    for (int i = 0; i < 12; i++) g[i] = (float)i;
    K->embedding_backward(dwte, g, tok, N, C, 0, V);
    CHECK(dwte[5 * C] == g[C] + g[3 * C] && dwte[2 * C + 1] == g[2 * C + 1], "dwte accumulates repeated tokens");
    free(wte);
}

/* ---- adamw ---- */
static void test_adamw(void)
{
    float p[2] = { 1.0f, -2.0f }, g[2] = { 0.5f, -0.25f }, m[2] = { 0 }, v[2] = { 0 };
    K->adamw(p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2.0f, 1);
    /* step 1: mhat = g', vhat = g'^2 -> update = lr*(sign(g') + wd*p) */
    CHECK(fabs(p[0] - (1.0 - 0.1 * (1.0 + 0.01))) < 1e-6, "adamw p0 = %g", p[0]);
    CHECK(fabs(p[1] - (-2.0 - 0.1 * (-1.0 - 0.02))) < 1e-6, "adamw p1 = %g", p[1]);
    CHECK(fabs(m[0] - 0.1) < 1e-6 && fabs(v[1] - 0.001 * 0.25) < 1e-7 * 0.25, "moments use the scaled grad");
    float x[3] = { 1, 2, 3 };
    CHECK(K->sumsq(x, 3) == 14.0, "sumsq");
    /* nonzeros: -0 is zero; NaN, a subnormal and the largest float are not */
    float z[7] = { 0.0f, 1.0f, -0.0f, NAN, 1e-45f, 0.0f, FLT_MAX };
    CHECK(K->nonzeros(z, 7) == 4 && K->nonzeros(z, 3) == 1 && K->nonzeros(z, 0) == 0, "nonzeros %llu",
          (unsigned long long)K->nonzeros(z, 7));
}

int main(int argc, char **argv)
{
    (void)argc;
    K = k_cpu();
    test_layernorm();
    test_matmul();
    test_attention();
    test_attention_gqa_dropout();
    test_rmsnorm();
    test_swiglu();
    test_relu2();
    test_rope_pack_dropout();
    test_rope_scaling();
    test_gelu();
    test_xent_split();
    test_embedding();
    test_adamw();
    return check_summary(argv[0]);
}
