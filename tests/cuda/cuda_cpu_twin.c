/* CPU twin of cuda_kernels_fp32: the same checks (fresh random inputs of
 * several shapes, outputs poisoned with NaN first, no NaN, norm-wise relative
 * error <= 1e-5) applied to the CPU reference k_cpu() against plain loops in
 * double. Runs in every build, so the reference the GPU tests trust is itself
 * checked where no GPU is. */
#include "check.h"
#include "kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

static const k_ops *K;
static uint64_t rng = 0x2545f4914f6cdd1dull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static float *rnd(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

static float *poison(size_t n)
{
    float *v = malloc(n * sizeof(float) + 1);
    memset(v, 0xff, n * sizeof(float));
    return v;
}

static double *dbl(const float *x, size_t n)
{
    double *d = malloc(n * sizeof(double) + 1);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* Frees ref. */
static void compare(const char *what, const float *got, double *ref, size_t n)
{
    double num = 0, den = 0;
    size_t nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) nan++;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    double rel = sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
    CHECK(nan == 0, "%s: %zu of %zu elements NaN/inf (unwritten)", what, nan, n);
    CHECK(rel <= TOL, "%s: relative error %.3g > %.0e", what, rel, TOL);
    free(ref);
}

static void test_layernorm(int N, int C)
{
    size_t n = (size_t)N * C;
    float *x = rnd(n, 2), *w = rnd(C, 1), *b = rnd(C, 1), *out = poison(n), *mean = poison(N), *rstd = poison(N);
    float *g = rnd(n, 1), *dx = rnd(n, 1), *dw = rnd(C, 1), *db = rnd(C, 1), *ds = rnd(C, 1);
    double *rout = dbl(out, n), *rmean = dbl(mean, N), *rrstd = dbl(rstd, N);
    double *rdx = dbl(dx, n), *rdw = dbl(dw, C), *rdb = dbl(db, C), *rds = dbl(ds, C);
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C, *gr = g + (size_t)r * C;
        double m = 0, v = 0, gm = 0, gx = 0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        rmean[r] = m;
        rrstd[r] = s;
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - m) * s;
            rout[(size_t)r * C + c] = xh * w[c] + b[c];
            gm += gr[c] * (double)w[c];
            gx += gr[c] * (double)w[c] * xh;
        }
        gm /= C;
        gx /= C;
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - m) * s;
            rdb[c] += gr[c];
            rdw[c] += gr[c] * xh;
            rdx[(size_t)r * C + c] += s * (gr[c] * (double)w[c] - gm - xh * gx);
            rds[c] += rdx[(size_t)r * C + c]; /* the bias sum: dinp after the update */
        }
    }
    K->layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    compare("layernorm_forward out", out, rout, n);
    compare("layernorm_forward mean", mean, rmean, N);
    compare("layernorm_forward rstd", rstd, rrstd, N);
    K->layernorm_backward(dx, dw, db, ds, g, x, w, mean, rstd, N, C);
    compare("layernorm_backward dinp", dx, rdx, n);
    compare("layernorm_backward dw", dw, rdw, C);
    compare("layernorm_backward db", db, rdb, C);
    compare("layernorm_backward dsum", ds, rds, C);
    free(x); free(w); free(b); free(out); free(mean); free(rstd); free(g); free(dx); free(dw); free(db); free(ds);
}

static void test_matmul(int N, int C, int OC)
{
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *x = rnd(ni, 1), *w = rnd(nw, 1), *bias = rnd(OC, 1), *out = poison(no);
    float *g = rnd(no, 1), *dx = poison(ni), *dw = rnd(nw, 1), *db = rnd(OC, 1);
    double *rout = dbl(out, no), *rdx = dbl(dx, ni), *rdw = dbl(dw, nw), *rdb = dbl(db, OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o];
            for (int c = 0; c < C; c++) s += (double)x[(size_t)n * C + c] * w[(size_t)o * C + c];
            rout[(size_t)n * OC + o] = s;
            rdb[o] += g[(size_t)n * OC + o];
        }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += (double)g[(size_t)n * OC + o] * w[(size_t)o * C + c];
            rdx[(size_t)n * C + c] = s;
        }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += (double)g[(size_t)n * OC + o] * x[(size_t)n * C + c];
            rdw[(size_t)o * C + c] += s;
        }
    K->matmul_forward(out, x, w, bias, N, C, OC);
    compare("matmul_forward", out, rout, no);
    K->matmul_backward(dx, dw, db, g, x, w, N, C, OC);
    compare("matmul_backward dinp", dx, rdx, ni);
    compare("matmul_backward dw", dw, rdw, nw);
    compare("matmul_backward dbias", db, rdb, OC);
    free(x); free(w); free(bias); free(out); free(g); free(dx); free(dw); free(db);
}

/* docs: samples split into documents at random (about one position in five
 * ends one); query t then attends keys doc[t] .. t only */
static void test_attention(int B, int T, int NH, int HD, int docs)
{
    int ld = 3 * NH * HD, C = NH * HD;
    int32_t *doc = docs ? malloc(sizeof(int32_t) * (size_t)B * T) : NULL;
    for (int b = 0; docs && b < B; b++)
        for (int t = 0, start = 0; t < T; t++) {
            doc[(size_t)b * T + t] = start;
            if (frand() > 0.6f) start = t + 1; /* frand is uniform in [-1, 1) */
        }
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = rnd(nq, 2), *out = poison(no), *att = poison(na), *g = rnd(no, 1);
    float *dqkv = poison(nq), *scratch = poison(na);
    double *rout = dbl(out, no), *ratt = dbl(att, na), *rd = calloc(nq + 1, sizeof(double));
    double sc = 1.0 / sqrt((double)HD), *dp = malloc(sizeof(double) * T + 1);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * ld + h * 3 * HD;
                double *p = ratt + (((size_t)b * NH + h) * T + t) * T, mx = -1e300, sum = 0, dot = 0;
                int lo = doc ? doc[(size_t)b * T + t] : 0;
                for (int j = 0; j < T; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * ld + h * 3 * HD + HD;
                    double s = 0;
                    for (int e = 0; e < HD; e++) s += (double)q[e] * k[e];
                    p[j] = j >= lo && j <= t ? s * sc : 0.0;
                    if (j >= lo && j <= t && p[j] > mx) mx = p[j];
                }
                for (int j = lo; j <= t; j++) sum += p[j] = exp(p[j] - mx);
                for (int j = lo; j <= t; j++) p[j] /= sum;
                const float *go = g + ((size_t)b * T + t) * C + h * HD;
                for (int e = 0; e < HD; e++) {
                    double o = 0;
                    for (int j = lo; j <= t; j++) o += p[j] * qkv[((size_t)b * T + j) * ld + h * 3 * HD + 2 * HD + e];
                    rout[((size_t)b * T + t) * C + h * HD + e] = o;
                }
                /* backward of this row: dP, dS, then q, k, v gradients */
                for (int j = lo; j <= t; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * ld + h * 3 * HD + 2 * HD;
                    double s = 0;
                    for (int e = 0; e < HD; e++) s += (double)go[e] * v[e];
                    dp[j] = s;
                    dot += p[j] * s;
                }
                for (int j = lo; j <= t; j++) {
                    double ds = p[j] * (dp[j] - dot) * sc;
                    size_t kj = ((size_t)b * T + j) * ld + h * 3 * HD;
                    size_t qt = ((size_t)b * T + t) * ld + h * 3 * HD;
                    for (int e = 0; e < HD; e++) {
                        rd[qt + e] += ds * qkv[kj + HD + e];
                        rd[kj + HD + e] += ds * q[e];
                        rd[kj + 2 * HD + e] += p[j] * go[e];
                    }
                }
            }
    K->attention_forward(out, att, qkv, doc, B, T, NH, NH, HD, NULL);
    compare(docs ? "attention_forward out (documents)" : "attention_forward out", out, rout, no);
    compare(docs ? "attention_forward att (documents)" : "attention_forward att", att, ratt, na);
    K->attention_backward(dqkv, scratch, g, qkv, att, B, T, NH, NH, HD, NULL);
    compare(docs ? "attention_backward dqkv (documents)" : "attention_backward dqkv", dqkv, rd, nq);
    free(qkv); free(out); free(att); free(g); free(dqkv); free(scratch); free(dp); free(doc);
}

static void test_xent(int N, int Vfull, int off, int V)
{
    size_t nl = (size_t)N * V;
    float *lg = rnd(nl, 4), *mx = poison(N), *se = poison(N), *tl = poison(N), *loss = poison(N), *d = poison(nl);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : (int32_t)((frand() + 1.0f) * 0.5f * Vfull) % Vfull;
    double *rmx = dbl(mx, N), *rse = dbl(se, N), *rtl = dbl(tl, N), *rloss = dbl(loss, N), *rd = dbl(d, nl);
    for (int n = 0; n < N; n++) {
        const float *l = lg + (size_t)n * V;
        double m = -1e300, s = 0;
        for (int j = 0; j < V; j++) m = l[j] > m ? l[j] : m;
        for (int j = 0; j < V; j++) s += exp(l[j] - m);
        int r = tg[n] - off;
        rmx[n] = m;
        rse[n] = s;
        rtl[n] = (tg[n] >= 0 && r >= 0 && r < V) ? l[r] : 0.0;
        rloss[n] = tg[n] < 0 ? 0.0 : log(s) + m - rtl[n];
        for (int j = 0; j < V; j++)
            rd[(size_t)n * V + j] = tg[n] < 0 ? 0.0 : 0.5 * (exp(l[j] - m) / s - (j == r ? 1.0 : 0.0));
    }
    K->xent_max(mx, lg, N, V);
    compare("xent_max", mx, rmx, N);
    K->xent_sumexp_target(se, tl, lg, mx, tg, N, V, off);
    compare("xent_sumexp_target sumexp", se, rse, N);
    compare("xent_sumexp_target target_logit", tl, rtl, N);
    /* the loss of a slice alone is not the full loss; compare it on the whole vocab only */
    if (V == Vfull) {
        K->xent_loss(loss, mx, se, tl, tg, N);
        compare("xent_loss", loss, rloss, N);
    } else {
        free(rloss);
    }
    K->xent_backward(d, lg, mx, se, tg, 0.5f, N, V, off);
    compare("xent_backward", d, rd, nl);
    free(lg); free(mx); free(se); free(tl); free(loss); free(d); free(tg);
}

static void test_small_ops(size_t n, int N, int C, int V, int off)
{
    float *x = rnd(n, 3), *y = rnd(n, 1), *out = poison(n);
    double *r = dbl(out, n);
    for (size_t i = 0; i < n; i++) r[i] = 0.5 * x[i] * (1 + tanh(sqrt(2 / M_PI) * (x[i] + 0.044715 * pow(x[i], 3))));
    K->gelu_forward(out, x, n);
    compare("gelu_forward", out, r, n);
    r = dbl(out, n);
    for (size_t i = 0; i < n; i++) {
        double u = sqrt(2 / M_PI) * (x[i] + 0.044715 * pow(x[i], 3)), th = tanh(u);
        r[i] = (0.5 * (1 + th) + 0.5 * x[i] * (1 - th * th) * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x[i] * x[i])) * y[i];
    }
    K->gelu_backward(out, x, y, n);
    compare("gelu_backward", out, r, n);
    r = dbl(out, n);
    for (size_t i = 0; i < n; i++) r[i] = (double)x[i] + y[i];
    K->residual_forward(out, x, y, n);
    compare("residual_forward", out, r, n);

    /* embeddings over a vocab slice [off, off+V) */
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((frand() + 1.0f) * 0.5f * (off + V + 5)) % (off + V + 5);
    float *wte = rnd((size_t)V * C, 1), *e = poison((size_t)N * C), *g = rnd((size_t)N * C, 1), *dw = rnd((size_t)V * C, 1);
    double *re = dbl(e, (size_t)N * C), *rdw = dbl(dw, (size_t)V * C);
    for (int i = 0; i < N; i++) {
        int row = tok[i] - off;
        for (int c = 0; c < C; c++) {
            re[(size_t)i * C + c] = (row >= 0 && row < V) ? wte[(size_t)row * C + c] : 0.0;
            if (row >= 0 && row < V) rdw[(size_t)row * C + c] += g[(size_t)i * C + c];
        }
    }
    K->embedding_forward(e, tok, wte, N, C, off, V);
    compare("embedding_forward", e, re, (size_t)N * C);
    K->embedding_backward(dw, g, tok, N, C, off, V);
    compare("embedding_backward", dw, rdw, (size_t)V * C);

    /* adamw + sumsq */
    float *p = rnd(n, 1), *gr = rnd(n, 0.1f), *m = rnd(n, 0.01f), *v = rnd(n, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]) * 0.01f;
    double *rp = dbl(p, n), *rm = dbl(m, n), *rv = dbl(v, n), ss = 0;
    double bc1 = 1 - pow(0.9, 3), bc2 = 1 - pow(0.95, 3);
    for (size_t i = 0; i < n; i++) {
        double gi = gr[i] * 0.7;
        ss += (double)gr[i] * gr[i];
        rm[i] = 0.9 * rm[i] + 0.1 * gi;
        rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
        rp[i] -= 3e-3 * ((rm[i] / bc1) / (sqrt(rv[i] / bc2) + 1e-8) + 0.1 * rp[i]);
    }
    double got = K->sumsq(gr, n);
    CHECK(fabs(got - ss) <= 1e-12 * ss, "sumsq %.17g vs %.17g", got, ss);
    K->adamw(p, gr, m, v, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3);
    compare("adamw param", p, rp, n);
    compare("adamw m", m, rm, n);
    compare("adamw v", v, rv, n);
    free(x); free(y); free(out); free(tok); free(wte); free(e); free(g); free(dw);
    free(p); free(gr); free(m); free(v);
}

int main(int argc, char **argv)
{
    (void)argc;
    K = k_cpu();
    test_layernorm(5, 37);
    test_layernorm(64, 200);
    test_matmul(7, 13, 11);
    test_matmul(64, 96, 80);
    test_attention(2, 5, 2, 3, 0);
    test_attention(1, 40, 2, 16, 0);
    test_attention(2, 40, 2, 16, 1);
    test_xent(9, 50, 0, 50);
    test_xent(32, 1000, 500, 500);
    test_small_ops(1, 3, 5, 4, 0);
    test_small_ops(10007, 64, 48, 30, 20);
    return check_summary(argv[0]);
}
