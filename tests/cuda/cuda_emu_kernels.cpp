/* The CUDA backend's kernels run on the CPU through tests/cuda/emu/emu_cuda.h
 * (cuBLAS calls through emu/cublas_mock.h, so matmul.cu and attention.cu are
 * checked for their shapes, transposes, leading dimensions, epilogues and
 * fallbacks, not for cuBLAS itself) and compared with the CPU reference
 * k_cpu(): the same bounds as the GPU tests
 * (fp32 1e-5, bf16 1e-2), outputs poisoned first (emulated cudaMalloc fills
 * NaN bytes too), no NaN. It checks the kernels' logic on machines without a
 * GPU; cuda_kernels_fp32/bf16 remain the checks of the real thing. */
#include "cublas_mock.h"

extern "C" {
#include "kernels.h"
}

#include <cstdarg>
#include <string>
#include <unistd.h>
#include <csignal>
#include <cerrno>
#include <sys/wait.h>
#include <tuple>

#include "cuda_check.h"
#include "k_cuda.h"
#include "kcu_entries.h"
#include "kcuda.cuh"

typedef std::vector<float> vec;
static const k_ops *R;
static uint64_t rng = 0x853c49e6748fea9bull;
static int passed, failed;

static float fr()
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static vec rv(size_t n, float s = 1)
{
    vec v(n);
    for (auto &x : v) x = fr() * s;
    return v;
}
static vec nanv(size_t n)
{
    vec v(n);
    memset(v.data(), 0xff, n * sizeof(float));
    return v;
}
static uint16_t f2b(float f) { return __nv_bfloat16(f).x; }
static float b2f(uint16_t b)
{
    __nv_bfloat16 x;
    x.x = b;
    return __bfloat162float(x);
}
static vec rv_bf(size_t n, float s, std::vector<uint16_t> &bits) /* bf16-exact values and their bits */
{
    vec v = rv(n, s);
    bits.resize(n);
    for (size_t i = 0; i < n; i++) v[i] = b2f(bits[i] = f2b(v[i]));
    return v;
}
static vec widen(const std::vector<uint16_t> &b)
{
    vec v(b.size());
    for (size_t i = 0; i < b.size(); i++) v[i] = b2f(b[i]);
    return v;
}

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...)
{
    if (ok) {
        passed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void cmp(const char *what, const vec &got, const vec &ref, double tol)
{
    double a = 0, b = 0;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); i++) {
        if (!std::isfinite(got[i])) bad++;
        a += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        b += (double)ref[i] * ref[i];
    }
    double rel = std::sqrt(a) / (b > 0 ? std::sqrt(b) : 1.0);
    if (bad == 0 && rel <= tol) {
        passed++;
        return;
    }
    failed++;
    fprintf(stderr, "%s: relative error %.3g (tol %.0e), %zu of %zu elements NaN/inf\n", what, rel, tol, bad,
            got.size());
}

/* Column sums (bias gradients), accumulated into dst (here at dst_off floats into its buffer: a bias
 * gradient's place in the flat gradients need not be 16-byte aligned). Rows of whole 16-byte chunks are
 * summed and finished in one launch, by the last blocks to arrive (kcu_arrive_last): checked against a
 * sum on the host, for the same bits again from the same start (the emulation runs each launch's blocks in
 * another order), one launch, and every arrival counter left zero for the next kernel. */
static void test_colsum(int N, int C, int dst_off = 0)
{
    vec g = rv((size_t)N * C), start = rv(C + dst_off), cs = start, cs2 = start;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) cs[dst_off + c] += g[(size_t)n * C + c];
    unsigned long launches = emu_launches;
    kcu_colsum_acc<float>(cs2.data() + dst_off, g.data(), N, C);
    unsigned long took = emu_launches - launches;
    char what[96];
    snprintf(what, sizeof what, "colsum (N=%d C=%d, dst %d floats in)", N, C, dst_off);
    cmp(what, cs2, cs, 1e-5);
    vec again = start;
    kcu_colsum_acc<float>(again.data() + dst_off, g.data(), N, C);
    check(!memcmp(again.data(), cs2.data(), cs2.size() * sizeof(float)), "%s: the same bits twice", what);
    check(took == (C % 8 ? 2u : 1u), "%s: %lu launches (want %d)", what, took, C % 8 ? 2 : 1);
    const unsigned *cnt = kcu_counters(16384);
    int left = 0;
    for (int i = 0; cnt && i < 16384; i++) left += cnt[i] != 0;
    check(cnt && left == 0, "%s: %d arrival counters left non-zero", what, left);
}

/* kcu_arrive_last: of a launch's blocks arriving at one counter, exactly one, the last to run, is told so,
 * sees what every block wrote before it arrived, and leaves the counter zero; a block arriving again at a
 * second counter likewise. */
static void emu_arrive_k(int *wrote, int *sums, int *lasts, unsigned *cnt)
{
    if (threadIdx.x == 0) wrote[blockIdx.x] = (int)blockIdx.x + 1;
    if (kcu_arrive_last(cnt, gridDim.x)) {
        if (threadIdx.x == 0) {
            int s = 0;
            for (unsigned b = 0; b < gridDim.x; b++) s += __ldcg(wrote + b);
            sums[0] = s;
            lasts[0]++;
        }
    }
    if (kcu_arrive_last(cnt + 1, gridDim.x) && threadIdx.x == 0) lasts[1]++;
}
static void test_arrive_last()
{
    std::vector<int> wrote(37, 0), sums(1, 0), lasts(2, 0);
    std::vector<unsigned> cnt(2, 0);
    emu_launch(emu_arrive_k, dim3(37), dim3(64), 0, nullptr, wrote.data(), sums.data(), lasts.data(), cnt.data());
    check(lasts[0] == 1 && lasts[1] == 1 && sums[0] == 37 * 38 / 2 && cnt[0] == 0 && cnt[1] == 0,
          "kcu_arrive_last over 37 blocks: %d and %d blocks last (want 1 and 1), the last saw a sum of %d (want %d), "
          "counters left %u %u (want 0 0)", lasts[0], lasts[1], sums[0], 37 * 38 / 2, cnt[0], cnt[1]);
}

/* sum_in_pass: 1 when the backward must take dsum in the pass that writes dinp
 * (no more kernels launched with it than without), 0 when it must sum it after,
 * -1 either */
static void test_layernorm(int N, int C, int sum_in_pass = -1)
{
    vec x = rv((size_t)N * C, 2), w = rv(C), b = rv(C), g = rv((size_t)N * C), dx = rv((size_t)N * C), dw = rv(C),
        db = rv(C);
    vec o1 = nanv((size_t)N * C), m1 = nanv(N), r1 = nanv(N), o2 = o1, m2 = m1, r2 = r1;
    R->layernorm_forward(o1.data(), m1.data(), r1.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    kcu_layernorm_forward(o2.data(), m2.data(), r2.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    cmp("layernorm_forward out", o2, o1, 1e-5);
    cmp("layernorm_forward mean", m2, m1, 1e-5);
    cmp("layernorm_forward rstd", r2, r1, 1e-5);
    { /* --norm-epsilon reaches the kernel: 0.25 against the variance of about 1.3 moves rstd by a tenth */
        vec o3 = nanv((size_t)N * C), m3 = nanv(N), r3 = nanv(N), o4 = o3, m4 = m3, r4 = r3;
        R->layernorm_forward(o3.data(), m3.data(), r3.data(), x.data(), w.data(), b.data(), N, C, 0.25f);
        kcu_layernorm_forward(o4.data(), m4.data(), r4.data(), x.data(), w.data(), b.data(), N, C, 0.25f);
        cmp("layernorm_forward (eps 0.25) out", o4, o3, 1e-5);
        cmp("layernorm_forward (eps 0.25) rstd", r4, r3, 1e-5);
        check(r3[0] < 0.99f * r1[0], "layernorm_forward: eps 0.25 did not lower rstd (%g vs %g)", r3[0], r1[0]);
    }
    vec dx2 = dx, dw2 = dw, db2 = db, ds = rv(C), ds2 = ds, dx3 = dx, dx4 = dx, db3 = db, db4 = db;
    R->layernorm_backward(dx.data(), dw.data(), db.data(), ds.data(), g.data(), x.data(), w.data(), m1.data(),
                          r1.data(), N, C);
    unsigned long l0 = emu_launches;
    kcu_layernorm_backward(dx2.data(), dw2.data(), db2.data(), ds2.data(), g.data(), x.data(), w.data(), m2.data(),
                           r2.data(), N, C);
    unsigned long with_sum = emu_launches - l0;
    cmp("layernorm_backward dinp", dx2, dx, 1e-5);
    cmp("layernorm_backward dw", dw2, dw, 1e-5);
    cmp("layernorm_backward db", db2, db, 1e-5);
    cmp("layernorm_backward dsum (the bias sum of dinp)", ds2, ds, 1e-5);
    R->layernorm_backward(dx3.data(), dw.data(), db3.data(), nullptr, g.data(), x.data(), w.data(), m1.data(),
                          r1.data(), N, C);
    l0 = emu_launches;
    kcu_layernorm_backward(dx4.data(), dw2.data(), db4.data(), nullptr, g.data(), x.data(), w.data(), m2.data(),
                           r2.data(), N, C);
    unsigned long without = emu_launches - l0;
    if (sum_in_pass >= 0)
        check(sum_in_pass ? with_sum == without : with_sum > without,
              "layernorm_backward (C=%d): %lu kernels with the bias sum, %lu without: the sum should be %s", C,
              with_sum, without, sum_in_pass ? "in the norm's pass" : "after it");
    cmp("layernorm_backward dinp (no bias sum)", dx4, dx3, 1e-5);
    cmp("layernorm_backward db (no bias sum)", db4, db3, 1e-5);
    /* bf16 forward on bf16-exact inputs */
    std::vector<uint16_t> xb, wb, bb, ob((size_t)N * C, 0xffff);
    vec xr = rv_bf((size_t)N * C, 2, xb), wr = rv_bf(C, 1, wb), br = rv_bf(C, 1, bb);
    R->layernorm_forward(o1.data(), m1.data(), r1.data(), xr.data(), wr.data(), br.data(), N, C, 1e-5f);
    kcu_layernorm_forward_bf16(ob.data(), m2.data(), r2.data(), xb.data(), wb.data(), bb.data(), N, C, 1e-5f);
    cmp("layernorm_forward_bf16 out", widen(ob), o1, 1e-2);
    /* the residual add fused into it, in place as the engine calls it (res = a):
     * the same bits as the two calls, and against the CPU composition */
    {
        std::vector<uint16_t> ab, b2, ra, rb, o3((size_t)N * C, 0xffff), o4 = o3, o5 = o3;
        rv_bf((size_t)N * C, 2, ab);
        rv_bf((size_t)N * C, 1, b2);
        ra = ab, rb = ab;
        std::vector<uint16_t> rc = ab;
        vec m3 = nanv(N), r3 = nanv(N), m4 = m3, r4 = r3, m5 = m3, r5 = r3;
        kcu_residual_layernorm_forward_bf16(ra.data(), o3.data(), m3.data(), r3.data(), ra.data(), b2.data(),
                                            wb.data(), bb.data(), N, C, 1e-5f);
        kcu_residual_forward_bf16(rb.data(), rb.data(), b2.data(), (size_t)N * C);
        kcu_layernorm_forward_bf16(o4.data(), m4.data(), r4.data(), rb.data(), wb.data(), bb.data(), N, C, 1e-5f);
        R->residual_layernorm_forward_bf16(rc.data(), o5.data(), m5.data(), r5.data(), rc.data(), b2.data(),
                                           wb.data(), bb.data(), N, C, 1e-5f);
        bool same = ra == rb && o3 == o4 && !memcmp(m3.data(), m4.data(), N * 4) && !memcmp(r3.data(), r4.data(), N * 4);
        check(same, "residual_layernorm_forward_bf16 (N=%d C=%d): not the bits of residual then layernorm", N, C);
        check(ra == rc, "residual_layernorm_forward_bf16 (N=%d C=%d): residual differs from the CPU's", N, C);
        cmp("residual_layernorm_forward_bf16 out", widen(o3), widen(o5), 1e-2);
        cmp("residual_layernorm_forward_bf16 rstd", r3, r5, 1e-5);
    }
    test_colsum(N, C); /* bias-gradient column sums at these shapes */
}

static void test_embedding(int N, int C, int off, int V)
{
    std::vector<int32_t> tok(N);
    for (auto &t : tok) t = (int32_t)((fr() + 1) * 0.5f * (off + V + 10)) % (off + V + 10);
    vec wte = rv((size_t)V * C), o1 = nanv((size_t)N * C), o2 = o1;
    R->embedding_forward(o1.data(), tok.data(), wte.data(), N, C, off, V);
    kcu_embedding_forward(o2.data(), tok.data(), wte.data(), N, C, off, V);
    cmp("embedding_forward", o2, o1, 1e-5);
    vec g = rv((size_t)N * C), d1 = rv((size_t)V * C), d2 = d1, d3 = d1;
    R->embedding_backward(d1.data(), g.data(), tok.data(), N, C, off, V);
    kcu_embedding_backward(d2.data(), g.data(), tok.data(), N, C, off, V);
    cmp("embedding_backward", d2, d1, 1e-5);
    std::vector<uint16_t> gb;
    vec gr = rv_bf((size_t)N * C, 1, gb), d4 = d3;
    R->embedding_backward(d3.data(), gr.data(), tok.data(), N, C, off, V);
    kcu_embedding_backward_bf16(d4.data(), gb.data(), tok.data(), N, C, off, V);
    cmp("embedding_backward_bf16", d4, d3, 1e-2);
    int B = 2, T = N / 2;
    vec wpe = rv((size_t)T * C), p1 = rv((size_t)B * T * C), p2 = p1, a1 = rv((size_t)T * C), a2 = a1;
    R->position_forward(p1.data(), wpe.data(), nullptr, B, T, C);
    kcu_position_forward(p2.data(), wpe.data(), nullptr, B, T, C);
    cmp("position_forward", p2, p1, 1e-5);
    R->position_backward(a1.data(), g.data(), B, T, C);
    kcu_position_backward(a2.data(), g.data(), B, T, C);
    cmp("position_backward", a2, a1, 1e-5);
    /* positions inside documents (--reset-position-ids): wpe[pos[n]] */
    std::vector<int32_t> pos((size_t)B * T);
    for (size_t n = 0; n < pos.size(); n++) pos[n] = (int32_t)(n % T % 7);
    vec q1 = p1, q2 = p1;
    R->position_forward(q1.data(), wpe.data(), pos.data(), B, T, C);
    kcu_position_forward(q2.data(), wpe.data(), pos.data(), B, T, C);
    cmp("position_forward (documents)", q2, q1, 1e-5);
    std::vector<uint16_t> pb, wb;
    vec pr = rv_bf((size_t)B * T * C, 1, pb), wr = rv_bf((size_t)T * C, 1, wb), q3 = pr;
    std::vector<uint16_t> pb2 = pb;
    R->position_forward(q3.data(), wr.data(), pos.data(), B, T, C);
    kcu_position_forward_bf16(pb2.data(), wb.data(), pos.data(), B, T, C);
    cmp("position_forward_bf16 (documents)", widen(pb2), q3, 1e-2);
}

/* The fused classifier (fp32 and bf16) against the four-call reference. */
static void test_xent_fused(int N, int V)
{
    vec lg = rv((size_t)N * V, 4), d1 = lg, d2 = lg, l1 = nanv(N), l2 = nanv(N);
    std::vector<int32_t> tg(N);
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : (int32_t)((fr() + 1) * 0.5f * V) % V;
    R->xent_fused(l1.data(), d1.data(), tg.data(), 0.5f, N, V);
    kcu_xent_fused(l2.data(), d2.data(), tg.data(), 0.5f, N, V);
    cmp("xent_fused loss", l2, l1, 1e-5);
    cmp("xent_fused dlogits", d2, d1, 1e-5);
    std::vector<uint16_t> lb((size_t)N * V);
    for (size_t i = 0; i < lb.size(); i++) lg[i] = b2f(lb[i] = f2b(lg[i]));
    d1 = lg;
    R->xent_fused(l1.data(), d1.data(), tg.data(), 0.5f, N, V);
    kcu_xent_fused_bf16(l2.data(), lb.data(), tg.data(), 0.5f, N, V);
    cmp("xent_fused_bf16 loss", l2, l1, 1e-5); /* the same bf16 inputs: only the summation order differs */
    vec wide(lb.size());
    for (size_t i = 0; i < lb.size(); i++) wide[i] = b2f(lb[i]);
    cmp("xent_fused_bf16 dlogits", wide, d1, 1e-2);
    /* dloss 0: the losses alone, the logits left as they were */
    for (size_t i = 0; i < lb.size(); i++) lb[i] = f2b(lg[i]);
    std::vector<uint16_t> kept = lb;
    vec l3 = nanv(N);
    kcu_xent_fused_bf16(l3.data(), lb.data(), tg.data(), 0.0f, N, V);
    cmp("xent_fused_bf16 loss with dloss 0", l3, l1, 1e-5);
    size_t changed = 0;
    for (size_t i = 0; i < lb.size(); i++) changed += lb[i] != kept[i];
    check(changed == 0, "xent_fused_bf16 with dloss 0 keeps the logits (%zu of %zu changed)", changed, lb.size());
}

static void test_xent(int N, int Vfull, int off, int V)
{
    vec lg = rv((size_t)N * V, 4);
    std::vector<int32_t> tg(N);
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : (int32_t)((fr() + 1) * 0.5f * Vfull) % Vfull;
    vec mx1 = nanv(N), mx2 = mx1, se1 = mx1, se2 = mx1, tl1 = mx1, tl2 = mx1, l1 = mx1, l2 = mx1;
    vec d1 = nanv((size_t)N * V), d2 = d1;
    R->xent_max(mx1.data(), lg.data(), N, V);
    kcu_xent_max(mx2.data(), lg.data(), N, V);
    cmp("xent_max", mx2, mx1, 1e-5);
    R->xent_sumexp_target(se1.data(), tl1.data(), lg.data(), mx1.data(), tg.data(), N, V, off);
    kcu_xent_sumexp_target(se2.data(), tl2.data(), lg.data(), mx2.data(), tg.data(), N, V, off);
    cmp("xent_sumexp_target sumexp", se2, se1, 1e-5);
    cmp("xent_sumexp_target target", tl2, tl1, 1e-5);
    R->xent_loss(l1.data(), mx1.data(), se1.data(), tl1.data(), tg.data(), N);
    kcu_xent_loss(l2.data(), mx2.data(), se2.data(), tl2.data(), tg.data(), N);
    cmp("xent_loss", l2, l1, 1e-5);
    R->xent_backward(d1.data(), lg.data(), mx1.data(), se1.data(), tg.data(), 0.5f, N, V, off);
    kcu_xent_backward(d2.data(), lg.data(), mx2.data(), se2.data(), tg.data(), 0.5f, N, V, off);
    cmp("xent_backward", d2, d1, 1e-5);
    std::vector<uint16_t> lb((size_t)N * V);
    for (size_t i = 0; i < lb.size(); i++) lg[i] = b2f(lb[i] = f2b(lg[i]));
    R->xent_max(mx1.data(), lg.data(), N, V);
    R->xent_sumexp_target(se1.data(), tl1.data(), lg.data(), mx1.data(), tg.data(), N, V, off);
    R->xent_backward(d1.data(), lg.data(), mx1.data(), se1.data(), tg.data(), 0.5f, N, V, off);
    kcu_xent_max_bf16(mx2.data(), lb.data(), N, V);
    cmp("xent_max_bf16", mx2, mx1, 1e-6); /* the same bf16 values: the same max */
    kcu_xent_sumexp_target_bf16(se2.data(), tl2.data(), lb.data(), mx1.data(), tg.data(), N, V, off);
    cmp("xent_sumexp_target_bf16 sumexp", se2, se1, 1e-5); /* only the summation order differs */
    cmp("xent_sumexp_target_bf16 target", tl2, tl1, 1e-6);
    kcu_xent_backward_bf16(lb.data(), lb.data(), mx1.data(), se1.data(), tg.data(), 0.5f, N, V, off);
    cmp("xent_backward_bf16 (in place)", widen(lb), d1, 1e-2);
}

static void test_elementwise_optimizer(size_t n)
{
    vec x = rv(n, 3), y = rv(n), o1 = nanv(n), o2 = o1;
    R->gelu_forward(o1.data(), x.data(), n);
    kcu_gelu_forward(o2.data(), x.data(), n);
    /* the CPU's tanh (from exp) and tanhf differ by a few ulp, which 1 + tanh(u)
     * amplifies where it cancels: by up to ~1/(1 + tanh(-3.36)) = 413 at x = -3,
     * the end of this range. A single element (n = 1) there is off by ~2e-5. */
    cmp("gelu_forward", o2, o1, 1e-4);
    R->gelu_backward(o1.data(), x.data(), y.data(), n);
    kcu_gelu_backward(o2.data(), x.data(), y.data(), n);
    cmp("gelu_backward", o2, o1, 1e-4);
    R->relu2_forward(o1.data(), x.data(), n);
    kcu_relu2_forward(o2.data(), x.data(), n);
    cmp("relu2_forward", o2, o1, 1e-5);
    R->relu2_backward(o1.data(), x.data(), y.data(), n);
    kcu_relu2_backward(o2.data(), x.data(), y.data(), n);
    cmp("relu2_backward", o2, o1, 1e-5);
    {
        std::vector<uint16_t> xb, yb, ob(n, 0xffff);
        vec xw = rv_bf(n, 3, xb), yw = rv_bf(n, 1, yb), r1 = nanv(n);
        R->relu2_forward(r1.data(), xw.data(), n);
        kcu_relu2_forward_bf16(ob.data(), xb.data(), n);
        cmp("relu2_forward_bf16", widen(ob), r1, 1e-2);
        R->relu2_backward(r1.data(), xw.data(), yw.data(), n);
        kcu_relu2_backward_bf16(yb.data(), xb.data(), yb.data(), n); /* in place, as the MLP runs it */
        cmp("relu2_backward_bf16 (in place)", widen(yb), r1, 1e-2);
    }
    R->residual_forward(o1.data(), x.data(), y.data(), n);
    kcu_residual_forward(o2.data(), x.data(), y.data(), n);
    cmp("residual_forward", o2, o1, 1e-5);
    vec g = rv(n, 0.1f), p = rv(n), m = rv(n, 0.01f), v = rv(n, 0.01f);
    for (auto &e : v) e = std::fabs(e) * 0.01f;
    double s1 = R->sumsq(g.data(), n), s2 = kcu_sumsq(g.data(), n);
    if (std::fabs(s1 - s2) <= 1e-12 * s1) passed++;
    else failed++, fprintf(stderr, "sumsq %.17g vs %.17g\n", s2, s1);
    { /* nonzeros over several blocks and a part, a third of them 0 or -0 */
        size_t nz_n = (size_t)256 * 5 + 77;
        vec z = rv(nz_n);
        size_t want = 0;
        for (size_t i = 0; i < nz_n; i++) {
            if (i % 3 == 0) z[i] = i % 2 ? -0.0f : 0.0f;
            want += z[i] != 0.0f;
        }
        uint64_t got = kcu_nonzeros(z.data(), nz_n), ref = R->nonzeros(z.data(), nz_n);
        if (got == want && ref == want) passed++;
        else failed++, fprintf(stderr, "nonzeros %llu (cpu %llu) vs %zu\n", (unsigned long long)got,
                               (unsigned long long)ref, want);
    }
    vec p2 = p, m2 = m, v2 = v;
    std::vector<uint16_t> pb(n, 0xffff), pr(n);
    R->adamw(p.data(), g.data(), m.data(), v.data(), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3);
    kcu_adamw_bf16(p2.data(), pb.data(), g.data(), m2.data(), v2.data(), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3);
    cmp("adamw_bf16 master", p2, p, 1e-5);
    cmp("adamw_bf16 m", m2, m, 1e-5);
    cmp("adamw_bf16 v", v2, v, 1e-5);
    kcu_to_bf16(pr.data(), p2.data(), n);
    if (!memcmp(pb.data(), pr.data(), n * 2)) passed++;
    else failed++, fprintf(stderr, "adamw_bf16: the bf16 params are not the rounded master weights\n");
    if (n < 64) return;
    /* the one-launch segmented form: vector path (ends % 4 == 0) and fallback */
    for (int mis = 0; mis < 2; mis++) {
        size_t ends[3] = { n / 4 / 4 * 4, n / 2 / 4 * 4 + (size_t)mis, n };
        float wd[3] = { 0.1f, 0.0f, 0.05f };
        vec a = p, am = m, av = v, b = p, bm = m, bv = v;
        std::vector<uint16_t> ab(n), bb(n, 0xffff);
        R->adamw_segments(a.data(), ab.data(), g.data(), am.data(), av.data(), n, 3, ends, wd, 1e-3f, 0.9f, 0.95f,
                          1e-8f, 0.9f, 5);
        kcu_adamw_segments(b.data(), bb.data(), g.data(), bm.data(), bv.data(), n, 3, ends, wd, 1e-3f, 0.9f, 0.95f,
                           1e-8f, 0.9f, 5);
        cmp(mis ? "adamw_segments master (fallback)" : "adamw_segments master", b, a, 1e-5);
        cmp("adamw_segments m", bm, am, 1e-5);
        cmp("adamw_segments v", bv, av, 1e-5);
        cmp("adamw_segments bf16 copy", widen(bb), widen(ab), 1e-2);
    }
    /* sumsq_begin / sumsq_end: sumsq's bits; AdamW with the clip scale left on the device equals AdamW with the
     * scale the host computes (eng_clip_scale's double arithmetic), both segment paths, clipping or not. A read
     * queued before the begin lands at the end; one queued between stays queued until the next wait. */
    for (int mis = 0; mis < 2; mis++)
        for (double clip : { 1e-2, 1e9, 0.0 }) {
            size_t ends[3] = { n / 4 / 4 * 4, n / 2 / 4 * 4 + (size_t)mis, n };
            float wd[3] = { 0.1f, 0.0f, 0.05f };
            vec a = p, am = m, av = v, b = p, bm = m, bv = v, before = rv(8), between = rv(8);
            vec got_before(8, -7.0f), got_between(8, -7.0f);
            std::vector<uint16_t> ab(n), bb(n);
            double host = kcu_sumsq(g.data(), n), norm = std::sqrt(host), c = clip / (norm + 1e-6);
            float scale = clip <= 0.0 ? 1.0f : c < 1.0 ? (float)c : 1.0f;
            kcu_adamw_segments(a.data(), ab.data(), g.data(), am.data(), av.data(), n, 3, ends, wd, 1e-3f, 0.9f,
                               0.95f, 1e-8f, scale, 5);
            kcu_to_host_later(got_before.data(), before.data(), 8 * sizeof(float));
            kcu_sumsq_begin(g.data(), n, clip);
            kcu_adamw_segments(b.data(), bb.data(), g.data(), bm.data(), bv.data(), n, 3, ends, wd, 1e-3f, 0.9f,
                               0.95f, 1e-8f, K_GRAD_SCALE_FROM_NORM, 5);
            kcu_to_host_later(got_between.data(), between.data(), 8 * sizeof(float));
            double dev = kcu_sumsq_end();
            check(!memcmp(&dev, &host, sizeof dev), "sumsq_end %.17g, sumsq %.17g", dev, host);
            check(!memcmp(a.data(), b.data(), n * 4) && !memcmp(am.data(), bm.data(), n * 4) &&
                      !memcmp(av.data(), bv.data(), n * 4) && !memcmp(ab.data(), bb.data(), n * 2),
                  "adamw_segments (%s) with the clip scale on the device (clip %g, scale %.9g): not the bits of "
                  "the host's scale", mis ? "fallback" : "vector", clip, (double)scale);
            check(got_before == before && got_between[0] == -7.0f,
                  "sumsq_end: the read queued before it %s landed, the one queued after it %s (want: yes, no)",
                  got_before == before ? "has" : "has not", got_between[0] == -7.0f ? "has not" : "has");
            kcu_sync();
            check(got_between == between, "the read queued after sumsq_begin did not land at the next wait");
        }
}

/* The bf16 entries a layer runs, against the CPU: plain, bias, and bias +
 * GELU with the pre-activation kept; the backward with dw += and dbias +=; the
 * down-projection's backward through GELU (the fused DGELU epilogue for even
 * shapes, the fallback for odd), x playing the kept pre-activation [N, C].
 * The device buffers are 256-byte aligned, so calls of one shape always ask
 * the same GEMM problems (alignment is part of a choice's key, matmul.cu). */
template <typename T> struct aligned {
    T *p;
    explicit aligned(const std::vector<T> &v) : p((T *)aligned_alloc(256, (v.size() * sizeof(T) + 255) / 256 * 256))
    {
        memcpy(p, v.data(), v.size() * sizeof(T));
    }
    ~aligned() { free(p); }
    std::vector<T> get(size_t n) const { return std::vector<T>(p, p + n); }
};

static void matmul_bf16(int N, int C, int OC, const char *what)
{
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    std::vector<uint16_t> xb, wb, bb, gb, poison_o(no, 0xffff), poison_i(ni, 0xffff);
    vec xr = rv_bf(ni, 1, xb), wr = rv_bf(nw, 0.2f, wb), br = rv_bf(OC, 1, bb), gr = rv_bf(no, 1, gb);
    vec o1(no), ge(no), d1(ni), gw1 = rv(nw), gb1 = rv(OC);
    aligned<uint16_t> x(xb), w(wb), b(bb), g(gb), out(poison_o), pre(poison_o), din(poison_i), d3(poison_i);
    aligned<float> dw(gw1), db(gb1);
    char name[160];
    auto named = [&](const char *part) { return snprintf(name, sizeof name, "%s %s", what, part), name; };
    R->matmul_forward(o1.data(), xr.data(), wr.data(), nullptr, N, C, OC);
    kcu_matmul_forward_bf16(out.p, nullptr, x.p, w.p, nullptr, N, C, OC);
    cmp(named("forward_bf16"), widen(out.get(no)), o1, 1e-2);
    R->matmul_forward(o1.data(), xr.data(), wr.data(), br.data(), N, C, OC);
    kcu_matmul_forward_bf16(out.p, nullptr, x.p, w.p, b.p, N, C, OC);
    cmp(named("forward_bf16 (bias)"), widen(out.get(no)), o1, 1e-2);
    R->gelu_forward(ge.data(), o1.data(), no);
    kcu_matmul_forward_bf16(out.p, pre.p, x.p, w.p, b.p, N, C, OC);
    cmp(named("forward_bf16 pre_gelu"), widen(pre.get(no)), o1, 1e-2);
    cmp(named("forward_bf16 gelu"), widen(out.get(no)), ge, 1e-2);
    R->matmul_backward(d1.data(), gw1.data(), gb1.data(), gr.data(), xr.data(), wr.data(), N, C, OC);
    kcu_matmul_backward_bf16(din.p, dw.p, db.p, g.p, x.p, w.p, N, C, OC);
    cmp(named("backward_bf16 dinp"), widen(din.get(ni)), d1, 1e-2);
    cmp(named("backward_bf16 dw"), dw.get(nw), gw1, 1e-2);
    cmp(named("backward_bf16 dbias"), db.get(OC), gb1, 1e-2);
    std::vector<uint16_t> r3(ni, 0xffff);
    R->matmul_backward_gelu_bf16(r3.data(), gw1.data(), gb1.data(), gb.data(), xb.data(), wb.data(), xb.data(), N, C, OC);
    kcu_matmul_backward_gelu_bf16(d3.p, dw.p, db.p, g.p, x.p, w.p, x.p, N, C, OC);
    cmp(named("backward_gelu_bf16 dpre"), widen(d3.get(ni)), widen(r3), 1e-2);
    cmp(named("backward_gelu_bf16 dw"), dw.get(nw), gw1, 1e-2);
    cmp(named("backward_gelu_bf16 dbias"), db.get(OC), gb1, 1e-2);
}

static void test_matmul(int N, int C, int OC)
{
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    vec x = rv(ni), w = rv(nw), bias = rv(OC), o1 = nanv(no), o2 = o1, g = rv(no);
    R->matmul_forward(o1.data(), x.data(), w.data(), bias.data(), N, C, OC);
    kcu_matmul_forward(o2.data(), x.data(), w.data(), bias.data(), N, C, OC);
    cmp("matmul_forward (bias)", o2, o1, 1e-5);
    vec d1 = nanv(ni), d2 = d1, gw1 = rv(nw), gw2 = gw1, gb1 = rv(OC), gb2 = gb1;
    R->matmul_backward(d1.data(), gw1.data(), gb1.data(), g.data(), x.data(), w.data(), N, C, OC);
    kcu_matmul_backward(d2.data(), gw2.data(), gb2.data(), g.data(), x.data(), w.data(), N, C, OC);
    cmp("matmul_backward dinp", d2, d1, 1e-5);
    cmp("matmul_backward dw", gw2, gw1, 1e-5);
    cmp("matmul_backward dbias", gb2, gb1, 1e-5);
    matmul_bf16(N, C, OC, "matmul");
}

/* GEMM algorithms chosen by time (k_cuda_gemm_tuning): the mock offers three
 * that compute alike and charge the emulated clock differently. Timing them
 * must leave every result as it was (the weight gradients' += included: the
 * candidates run on scratch there), the fastest must be kept, and a saved
 * choice must come back from its file untimed. */
static void write_text(const char *path, const std::string &text)
{
    FILE *f = fopen(path, "w");
    if (f) fputs(text.c_str(), f), fclose(f);
}
static std::string read_text(const char *path)
{
    std::string t;
    FILE *f = fopen(path, "r");
    for (int ch; f && (ch = fgetc(f)) != EOF;) t += (char)ch;
    if (f) fclose(f);
    return t;
}

static void test_gemm_tuning()
{
    char path[] = "/tmp/atoll-gemm-choices-XXXXXX", err[512];
    int fd = mkstemp(path), timed, loaded;
    k_cuda_gemm_stats g;
    auto counts = [&] { k_cuda_gemm_choices(&g); timed = g.timed, loaded = g.loaded; };
    if (fd >= 0) close(fd);
    auto costs = [](double a0, double a1, double a2) { mock_algo_ms[0] = a0, mock_algo_ms[1] = a1, mock_algo_ms[2] = a2; };

    kcu_gemm_choices_clear();
    k_cuda_gemm_tuning(1);
    costs(3, 1, 2);
    matmul_bf16(16, 24, 32, "gemm tuning:"); /* every result against the CPU, as without tuning */
    check(mock_last_algo == 1, "gemm tuning: the last GEMM ran algorithm %d, not the fastest (1)", mock_last_algo);
    counts();
    check(timed == 6 && loaded == 0, "gemm tuning: %d problems timed, %d loaded (want 6, 0)", timed, loaded);
    /* what the timing found: the heuristic's first (3 ms a call) against the one kept (1 ms), a call a problem */
    check(g.first_ms == 18 && g.chosen_ms == 6 && g.no_workspace == 0, "gemm tuning: timed %g ms with the first "
          "choices, %g with the kept, %d without workspace (want 18, 6, 0)", g.first_ms, g.chosen_ms, g.no_workspace);
    /* and problem by problem: 6 lines, each the first's 3 ms against the kept 1 ms, the second of 3 candidates */
    char *report = k_cuda_gemm_tuning_report();
    std::string rep = report ? report : "";
    free(report);
    size_t lines = 0, said = 0;
    for (size_t at = 0; (at = rep.find('\n', at)) != std::string::npos; at++) lines++;
    for (size_t at = 0; (at = rep.find("first 3.000 ms, kept 1.000 ms (66.7% less; candidate 2 of 3, with the "
                                       "workspace)", at)) != std::string::npos; at++)
        said++;
    check(lines == 6 && said == 6 && rep.find("forward m 32 n 16 k 24, TN, bf16 +bias:") != std::string::npos,
          "gemm tuning report: %zu lines, %zu saying what timing found (want 6, 6):\n%s", lines, said, rep.c_str());
    char *saved = k_cuda_gemm_choices_text();
    check(saved != NULL, "gemm choices: no text");
    write_text(path, saved ? saved : "");
    free(saved);

    /* the host's time to make a call is not the device's: each GEMM that finds nothing queued ahead of it
     * costing 0.5 ms more, the timings are still the algorithms' own (3 and 1 ms a problem) */
    kcu_gemm_choices_clear();
    mock_idle_launch_ms = 0.5;
    matmul_bf16(16, 24, 32, "gemm tuning, the host's time:");
    counts();
    check(g.first_ms == 18 && g.chosen_ms == 6, "gemm tuning with the host's time to make a call: %g ms with the "
          "first choices, %g with the kept (want 18, 6: the device's time alone)", g.first_ms, g.chosen_ms);
    mock_idle_launch_ms = 0;

    /* read back: the saved choices stand though algorithm 2 is now the fastest */
    kcu_gemm_choices_clear();
    costs(3, 2, 1);
    check(k_cuda_gemm_choices_load(path, err, sizeof err) == 0, "gemm choices load: %s", err);
    matmul_bf16(16, 24, 32, "gemm choices loaded:");
    counts();
    check(mock_last_algo == 1 && timed == 0 && loaded == 6,
          "gemm choices loaded: algorithm %d ran (want the saved 1), %d chosen anew (want 0), %d loaded (want 6)",
          mock_last_algo, timed, loaded);

    /* a choice the library refuses (cublasLtMatmulAlgoCheck) is chosen anew, by time */
    std::string text = read_text(path), bad;
    for (size_t at = 0, nl; at < text.size(); at = nl + 1) {
        nl = text.find('\n', at);
        std::string line = text.substr(at, nl - at);
        size_t dash = line.find(" - ");
        if (dash != std::string::npos) line = line.substr(0, dash) + " - 63" + line.substr(line.find(' ', dash + 3));
        bad += line + "\n";
    }
    write_text(path, bad);
    kcu_gemm_choices_clear();
    check(k_cuda_gemm_choices_load(path, err, sizeof err) == 0, "gemm choices load (refused algorithms): %s", err);
    matmul_bf16(16, 24, 32, "gemm choices refused:");
    counts();
    check(mock_last_algo == 2 && timed == 6, "gemm choices refused: algorithm %d ran (want the fastest, 2), %d chosen "
          "anew (want 6)", mock_last_algo, timed);

    /* another device's file is not read; a malformed one is refused with its line */
    write_text(path, "atoll-gemm-choices 1\ndevice NVIDIA H200\ncublaslt 130000\n");
    int rc = k_cuda_gemm_choices_load(path, err, sizeof err);
    check(rc == 1 && strstr(err, "NVIDIA H200") && strstr(err, "this is CPU emulation"),
          "gemm choices of another device: rc %d, \"%s\"", rc, err);
    /* a good line, then a bad one: refused with the bad line's number, nothing read */
    std::string good = text.substr(text.find('\n', text.find("\n#")) + 1);
    good = good.substr(0, good.find('\n') + 1);
    write_text(path, "atoll-gemm-choices 1\ndevice CPU emulation\ncublaslt 130000\n" + good + "1 2 3\n");
    kcu_gemm_choices_clear();
    rc = k_cuda_gemm_choices_load(path, err, sizeof err);
    counts();
    check(rc == -1 && strstr(err, "line 5") && loaded == 0, "malformed gemm choices: rc %d, \"%s\", %d read", rc, err,
          loaded);
    write_text(path, "something else\n");
    rc = k_cuda_gemm_choices_load(path, err, sizeof err);
    check(rc == -1 && strstr(err, "not a GEMM choices file"), "not a gemm choices file: rc %d, \"%s\"", rc, err);

    /* the heuristic's answers for no workspace are candidates too (no memset of the workspace
     * before them), each algorithm timed once though both lists offer it (2 here) */
    kcu_gemm_choices_clear();
    k_cuda_gemm_tuning(1);
    mock_nows_candidates = 3, mock_nows[0] = 2, mock_nows[1] = 4, mock_nows[2] = 5;
    costs(3, 2, 2.5), mock_algo_ms[4] = 1, mock_algo_ms[5] = 4;
    memset(mock_algo_runs, 0, sizeof mock_algo_runs);
    matmul_bf16(16, 24, 32, "gemm tuning, no-workspace candidates:");
    counts();
    check(mock_last_algo == 4 && timed == 6 && g.no_workspace == 6, "gemm tuning with no-workspace candidates: "
          "algorithm %d ran (want the fastest, 4), %d timed, %d of them without workspace (want 6, 6)",
          mock_last_algo, timed, g.no_workspace);
    check(mock_algo_runs[0] > 0 && mock_algo_runs[2] == mock_algo_runs[0] && mock_algo_runs[5] == mock_algo_runs[0] &&
          mock_algo_runs[4] > mock_algo_runs[0], "gemm tuning: algorithms 0, 2, 4, 5 ran %ld, %ld, %ld, %ld times (want "
          "each timed once a problem, 2 too, and 4 also run by the calls)", mock_algo_runs[0], mock_algo_runs[2],
          mock_algo_runs[4], mock_algo_runs[5]);
    /* slower without a workspace: the choice stays with one */
    kcu_gemm_choices_clear();
    mock_algo_ms[4] = 5;
    matmul_bf16(16, 24, 32, "gemm tuning, slower no-workspace candidates:");
    counts();
    check(mock_last_algo == 1 && g.no_workspace == 0, "gemm tuning: algorithm %d ran, %d without workspace kept "
          "(want the fastest, 1, and none)", mock_last_algo, g.no_workspace);
    mock_nows_candidates = 0, mock_algo_ms[4] = mock_algo_ms[5] = 0;

    /* the heuristic's answers for K split only in place (no reduction kernel after the GEMM) are candidates
     * too, counted apart from the no-workspace ones; one it also offers with the workspace (1) is timed once */
    kcu_gemm_choices_clear();
    mock_inplace_candidates = 2, mock_inplace[0] = 1, mock_inplace[1] = 6;
    mock_nows_candidates = 1, mock_nows[0] = 4;
    costs(3, 2, 2.5), mock_algo_ms[4] = 1.5, mock_algo_ms[6] = 1;
    memset(mock_algo_runs, 0, sizeof mock_algo_runs);
    matmul_bf16(16, 24, 32, "gemm tuning, in-place candidates:");
    counts();
    report = k_cuda_gemm_tuning_report();
    rep = report ? report : "";
    free(report);
    check(rep.find("candidate 4 of 5, K split in place)") != std::string::npos, "gemm tuning report: the kept "
          "in-place candidate not named (want the 4th of 5, K split in place):\n%s", rep.c_str());
    check(mock_last_algo == 6 && timed == 6 && g.in_place == 6 && g.no_workspace == 0, "gemm tuning with in-place "
          "candidates: algorithm %d ran (want the fastest, 6), %d timed, %d splitting K in place, %d without "
          "workspace (want 6, 6, 0)", mock_last_algo, timed, g.in_place, g.no_workspace);
    check(mock_algo_runs[0] > 0 && mock_algo_runs[1] == mock_algo_runs[0] && mock_algo_runs[4] == mock_algo_runs[0] &&
          mock_algo_runs[6] > mock_algo_runs[0], "gemm tuning: algorithms 0, 1, 4, 6 ran %ld, %ld, %ld, %ld times (want "
          "each timed once a problem, 1 too, and 6 also run by the calls)", mock_algo_runs[0], mock_algo_runs[1],
          mock_algo_runs[4], mock_algo_runs[6]);
    /* slower in place: the no-workspace answer, next fastest, is kept */
    kcu_gemm_choices_clear();
    mock_algo_ms[6] = 5;
    matmul_bf16(16, 24, 32, "gemm tuning, slower in-place candidates:");
    counts();
    check(mock_last_algo == 4 && g.in_place == 0 && g.no_workspace == 6, "gemm tuning: algorithm %d ran, %d in place "
          "and %d without workspace kept (want 4, 0, 6)", mock_last_algo, g.in_place, g.no_workspace);
    /* a library that answers the question about in place with an error: the run goes on, timing the others */
    kcu_gemm_choices_clear();
    mock_algo_ms[6] = 1, mock_inplace_refused = true;
    memset(mock_algo_runs, 0, sizeof mock_algo_runs);
    matmul_bf16(16, 24, 32, "gemm tuning, in place refused:");
    counts();
    check(mock_last_algo == 4 && timed == 6 && g.in_place == 0 && mock_algo_runs[6] == 0, "gemm tuning with the "
          "in-place question refused: algorithm %d ran (want 4), %d timed (want 6), %d in place, algorithm 6 ran %ld "
          "times (want 0, 0)", mock_last_algo, timed, g.in_place, mock_algo_runs[6]);
    mock_inplace_refused = false;
    mock_inplace_candidates = mock_nows_candidates = 0, mock_algo_ms[4] = mock_algo_ms[6] = 0;

    /* the GPU's clocks still coming up while the candidates are timed: timed one after the other, the
     * later ones would look faster (algorithm 1's median 1.8 against 0's 1.9); in rounds over them, 0 is kept */
    kcu_gemm_choices_clear();
    costs(1.0, 1.5, 3.0), mock_ramp_ms = 1.2, mock_ramp_step = 0.1;
    matmul_bf16(16, 24, 32, "gemm tuning, clocks coming up:");
    check(mock_last_algo == 0, "gemm tuning while the clocks come up: algorithm %d ran, not the fastest (0)",
          mock_last_algo);
    mock_ramp_ms = mock_ramp_step = 0;

    /* tuning off: the heuristic's first */
    k_cuda_gemm_tuning(0);
    kcu_gemm_choices_clear();
    matmul_bf16(16, 24, 32, "gemm tuning off:");
    check(mock_last_algo == 0, "gemm tuning off: algorithm %d ran, not the heuristic's first", mock_last_algo);
    costs(0, 0, 0);
    remove(path);
}

/* grouped-query attention (NG groups) and dropout p on the probabilities */
static k_dropout drop_of(float p)
{
    k_dropout d = { p, 0x5eed5eed12345678ull, 40, 2 };
    return d;
}

/* Documents for --reset-attention-mask: doc[b*T + t] = the first position of
 * t's document. Sample 0 has documents starting at 0, 20, 70, 100 and 140 (so
 * a 128-row query block starts past key tile 0, and rows 140.. see nothing of
 * the tile before their document); the others end one about every 10 tokens. */
static std::vector<int32_t> docs_of(int B, int T)
{
    std::vector<int32_t> doc((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0, start = 0; t < T; t++) {
            if (b == 0 ? t == 20 || t == 70 || t == 100 || t == 140 : fr() > 0.8f) start = t;
            doc[(size_t)b * T + t] = start;
        }
    return doc;
}

/* The copies that do not wait (memory.cu): an upload's source may be reused on
 * return and more uploads than staging slots keep their values; reads later
 * leave their destinations alone until the next wait, then all land; after
 * the first round the arena holds a round's reads without a wait of its own;
 * the waits are counted. (Emulated copies complete at once, so this checks the
 * bookkeeping, not the DMA's timing, which is the GPU run's.) */
static void test_copies()
{
    enum { ROUNDS = 2, READS = 20, N = 20000 };
    float *dev[READS];
    std::vector<vec> want(READS);
    for (int i = 0; i < READS; i++) {
        dev[i] = (float *)kcu_alloc(N * sizeof(float));
        vec src = rv(N);
        want[i] = src;
        kcu_to_device(dev[i], src.data(), N * sizeof(float)); /* 20 uploads through 16 slots */
        for (auto &x : src) x = -7.0f;                       /* the source reused at once */
    }
    for (int round = 0; round < ROUNDS; round++) {
        std::vector<vec> got(READS, vec(N, 42.0f));
        long w0 = k_cuda_host_waits();
        for (int i = 0; i < READS; i++) kcu_to_host_later(got[i].data(), dev[i], N * sizeof(float));
        long w1 = k_cuda_host_waits();
        int untouched = 0;
        for (int i = 0; i < READS; i++) untouched += got[i][0] == 42.0f && got[i][N - 1] == 42.0f;
        if (round > 0)
            check(untouched == READS && w1 == w0, "copies: round %d: %d of %d reads waited for before the sync (%ld "
                  "waits)", round, READS - untouched, READS, w1 - w0);
        kcu_sync();
        check(k_cuda_host_waits() == w1 + 1, "copies: round %d: the sync is one wait (%ld)", round,
              k_cuda_host_waits() - w1);
        for (int i = 0; i < READS; i++) cmp("copies: uploaded through staging, read later", got[i], want[i], 0);
    }
    /* larger than the staging: the upload and the read complete on return */
    size_t big = ((size_t)8 << 20) / sizeof(float) + 1;
    float *d = (float *)kcu_alloc(big * sizeof(float));
    vec src = rv(big), got(big, 42.0f);
    long w = k_cuda_host_waits();
    kcu_to_device(d, src.data(), big * sizeof(float));
    kcu_to_host_later(got.data(), d, big * sizeof(float));
    check(k_cuda_host_waits() == w + 2, "copies: a large upload and read wait (%ld)", k_cuda_host_waits() - w);
    cmp("copies: large, read later", got, src, 0);
    kcu_free(d);
    for (int i = 0; i < READS; i++) kcu_free(dev[i]);
}

/* CUDA graphs (k_cuda_graph_*): what is called between begin and end is
 * recorded, and runs only when the graph is launched, on the buffers of the
 * recording as they are then (a launch after an input changed computes from
 * the new input); a graph launched twice accumulates (+=) twice; a recording
 * that meets a sync, an upload, a read or a buffer that has to grow, or a call
 * CUDA refuses while capturing (which would otherwise exit through cudaCheck),
 * gives no graph, says which, and nothing it recorded runs; a graph recorded before the
 * backend replaced its scratch is stale and is not launched. */
static void test_graph()
{
    enum { N = 64, C = 24, OC = 40 };
    char why[256] = "";
    vec x = rv(N * C), w = rv(OC * C), bias = rv(OC), g = rv(N * OC);
    vec o_ref = nanv(N * OC), d_ref = nanv(N * C), gw_ref(OC * C, 0.0f), gb_ref(OC, 0.0f);
    kcu_matmul_forward(o_ref.data(), x.data(), w.data(), bias.data(), N, C, OC);
    kcu_matmul_backward(d_ref.data(), gw_ref.data(), gb_ref.data(), g.data(), x.data(), w.data(), N, C, OC);
    vec o = nanv(N * OC), d = nanv(N * C), gw(OC * C, 0.0f), gb(OC, 0.0f);
    long waits = k_cuda_host_waits();
    check(k_cuda_graph_begin(why, sizeof why) == 0, "graph: begin: %s", why);
    kcu_matmul_forward(o.data(), x.data(), w.data(), bias.data(), N, C, OC);
    kcu_matmul_backward(d.data(), gw.data(), gb.data(), g.data(), x.data(), w.data(), N, C, OC); /* colsum: scratch */
    k_cuda_graph *gr = k_cuda_graph_end(why, sizeof why);
    check(gr != NULL, "graph: a forward and backward recorded: %s", why);
    if (!gr) return;
    check(std::isnan(o[0]) && std::isnan(d[N * C - 1]) && gw[0] == 0.0f && gb[OC - 1] == 0.0f,
          "graph: ops ran while being recorded");
    check(k_cuda_graph_launch(gr) == 0, "graph: the launch was refused");
    cmp("graph: launched, forward", o, o_ref, 0);
    cmp("graph: launched, dinp", d, d_ref, 0);
    cmp("graph: launched, dw", gw, gw_ref, 0);
    cmp("graph: launched, dbias", gb, gb_ref, 0);
    check(k_cuda_graph_launch(gr) == 0, "graph: the second launch was refused");
    vec gw2 = gw_ref, gb2 = gb_ref;
    for (auto &e : gw2) e += e;
    for (auto &e : gb2) e += e;
    cmp("graph: launched twice, dw accumulates twice", gw, gw2, 0);
    cmp("graph: launched twice, dbias accumulates twice", gb, gb2, 0);
    vec x2 = rv(N * C), o2_ref = nanv(N * OC);
    kcu_matmul_forward(o2_ref.data(), x2.data(), w.data(), bias.data(), N, C, OC);
    x = x2; /* same buffer, new values */
    check(k_cuda_graph_launch(gr) == 0, "graph: the third launch was refused");
    cmp("graph: a launch reads its inputs as they are now", o, o2_ref, 0);
    check(k_cuda_host_waits() == waits, "graph: recording and launching waited for the device (%ld)",
          k_cuda_host_waits() - waits);
    /* recordings that cannot hold what they meet */
    struct {
        const char *name, *want;
    } broken[] = { { "sync", "a read of device memory or a sync" }, { "upload", "an upload" },
                   { "read", "a read of device memory" }, { "read later", "a read of device memory" },
                   { "scratch", "scratch memory grows" },
                   { "CUDA refusal", "CUDA refused while recording at" } };
    for (auto &b : broken) {
        vec keep = o, host(16, 1.0f);
        why[0] = '\0';
        check(k_cuda_graph_begin(why, sizeof why) == 0, "graph: begin (%s): %s", b.name, why);
        kcu_zero(o.data(), o.size() * sizeof(float));
        if (!strcmp(b.name, "sync")) kcu_sync();
        else if (!strcmp(b.name, "upload")) kcu_to_device(d.data(), host.data(), host.size() * sizeof(float));
        else if (!strcmp(b.name, "read")) kcu_to_host(host.data(), d.data(), host.size() * sizeof(float));
        else if (!strcmp(b.name, "read later")) kcu_to_host_later(host.data(), d.data(), host.size() * sizeof(float));
        else if (!strcmp(b.name, "scratch")) kcu_scratch((size_t)1 << 30);
        else cudaCheck(cudaStreamSynchronize((cudaStream_t)k_cuda_stream())); /* CUDA refuses it while capturing: no exit */
        k_cuda_graph *bad = k_cuda_graph_end(why, sizeof why);
        check(!bad && strstr(why, b.want), "graph: a recording with a %s: %s (%s)", b.name, bad ? "a graph" : "none",
              why);
        k_cuda_graph_free(bad);
        cmp("graph: a failed recording runs nothing", o, keep, 0);
        check(host[0] == 1.0f, "graph: a read in a failed recording landed");
    }
    check(k_cuda_graph_launch(gr) == 0, "graph: refused after failed recordings");
    kcu_scratch((size_t)64 << 20); /* the backend replaces its scratch: the graph holds the old one */
    check(k_cuda_graph_launch(gr) == 1, "graph: launched on a replaced scratch buffer");
    k_cuda_graph_free(gr);
}

static void test_attention(int B, int T, int NH, int NG, int HD, float p, bool docs = false)
{
    size_t nq = (size_t)B * T * (NH + 2 * NG) * HD, no = (size_t)B * T * NH * HD, na = (size_t)B * NH * T * T;
    vec qkv = rv(nq, 2), o1 = nanv(no), o2 = o1, a1 = nanv(na), a2 = a1, g = rv(no), d1 = nanv(nq), d2 = d1;
    vec s1 = nanv(na), s2 = s1;
    k_dropout d = drop_of(p);
    std::vector<int32_t> dv = docs_of(B, T);
    const int32_t *doc = docs ? dv.data() : nullptr;
    const char *tag = docs ? " (documents)" : "";
    char what[96];
    R->attention_forward(o1.data(), a1.data(), qkv.data(), doc, B, T, NH, NG, HD, &d);
    kcu_attention_forward(o2.data(), a2.data(), qkv.data(), doc, B, T, NH, NG, HD, &d);
    snprintf(what, sizeof what, "attention_forward out%s", tag);
    cmp(what, o2, o1, 1e-5);
    snprintf(what, sizeof what, "attention_forward att%s", tag);
    cmp(what, a2, a1, 1e-5);
    R->attention_backward(d1.data(), s1.data(), g.data(), qkv.data(), a1.data(), B, T, NH, NG, HD, &d);
    kcu_attention_backward(d2.data(), s2.data(), g.data(), qkv.data(), a2.data(), B, T, NH, NG, HD, &d);
    snprintf(what, sizeof what, "attention_backward dqkv%s", tag);
    cmp(what, d2, d1, 1e-5);
}

/* The flash kernels and the CPU's bf16 entries (the same contract) against the
 * fp32 reference. */
static void test_flash(int B, int T, int NH, int NG, int HD, float p, bool docs = false)
{
    size_t nq = (size_t)B * T * (NH + 2 * NG) * HD, no = (size_t)B * T * NH * HD, na = (size_t)B * NH * T * T;
    std::vector<uint16_t> qb, gb, ob(no, 0xffff), dqb(nq, 0xffff), oc(no, 0xffff), dqc(nq, 0xffff);
    vec qkv = rv_bf(nq, 2, qb), g = rv_bf(no, 1, gb), out(no), att(na), dq(nq), scr(na), lse((size_t)B * NH * T, NAN);
    vec lsec = lse;
    k_dropout d = drop_of(p);
    std::vector<int32_t> dv = docs_of(B, T);
    const int32_t *doc = docs ? dv.data() : nullptr;
    char what[160];
    R->attention_forward(out.data(), att.data(), qkv.data(), doc, B, T, NH, NG, HD, &d);
    R->attention_backward(dq.data(), scr.data(), g.data(), qkv.data(), att.data(), B, T, NH, NG, HD, &d);
    for (int cpu = 0; cpu < 2; cpu++) {
        const char *by = cpu ? "cpu" : "flash";
        std::vector<uint16_t> &o = cpu ? oc : ob, &dqo = cpu ? dqc : dqb;
        vec &l = cpu ? lsec : lse;
        (cpu ? R->attention_forward_bf16 : kcu_attention_forward_bf16)(o.data(), l.data(), qb.data(), doc, B, T, NH, NG,
                                                                       HD, &d);
        snprintf(what, sizeof what, "attention_forward_bf16 (%s, %d heads in %d groups, dropout %g%s) out", by, NH, NG,
                 p, docs ? ", documents" : "");
        cmp(what, widen(o), out, 1e-2);
        (cpu ? R->attention_backward_bf16 : kcu_attention_backward_bf16)(dqo.data(), gb.data(), qb.data(), o.data(),
                                                                         l.data(), doc, B, T, NH, NG, HD, &d);
        snprintf(what, sizeof what, "attention_backward_bf16 (%s, %d heads in %d groups, dropout %g%s) dqkv", by, NH,
                 NG, p, docs ? ", documents" : "");
        cmp(what, widen(dqo), dq, 1e-2);
    }
}

/* A decode step (attention_decode: row n-1's queries against keys k0..n-1),
 * the CPU's and the kernel's, fp32 and bf16, against the last row of the
 * CPU's whole forward with row n-1's document starting at k0. */
static void test_decode(int n, int NH, int NG, int HD, int k0)
{
    size_t nq = (size_t)n * (NH + 2 * NG) * HD, no = (size_t)NH * HD;
    std::vector<uint16_t> qb, ob(no, 0xffff), oc(no, 0xffff);
    vec qkv = rv_bf(nq, 2, qb), full((size_t)n * no), att((size_t)NH * n * n), o1 = nanv(no), o2 = o1;
    std::vector<int32_t> doc(n);
    for (int t = 0; t < n; t++) doc[t] = t < k0 ? 0 : k0;
    R->attention_forward(full.data(), att.data(), qkv.data(), doc.data(), 1, n, NH, NG, HD, nullptr);
    vec want(full.end() - (long)no, full.end());
    char what[128];
    R->attention_decode(o1.data(), qkv.data(), n, k0, NH, NG, HD);
    snprintf(what, sizeof what, "attention_decode (cpu, %d keys from %d, %d heads in %d groups, dim %d)", n, k0, NH, NG, HD);
    cmp(what, o1, want, 1e-5);
    kcu_attention_decode(o2.data(), qkv.data(), n, k0, NH, NG, HD);
    snprintf(what, sizeof what, "attention_decode (kernel, %d keys from %d, %d heads in %d groups, dim %d)", n, k0, NH, NG, HD);
    cmp(what, o2, want, 1e-5);
    R->attention_decode_bf16(oc.data(), qb.data(), n, k0, NH, NG, HD);
    kcu_attention_decode_bf16(ob.data(), qb.data(), n, k0, NH, NG, HD);
    snprintf(what, sizeof what, "attention_decode_bf16 (cpu, %d keys from %d)", n, k0);
    cmp(what, widen(oc), want, 1e-2);
    snprintf(what, sizeof what, "attention_decode_bf16 (kernel, %d keys from %d)", n, k0);
    cmp(what, widen(ob), want, 1e-2);
}

static std::vector<uint16_t> narrow(const vec &v)
{
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); i++) b[i] = f2b(v[i]);
    return b;
}

/* RMSNorm, SwiGLU, rotary embedding, q/k/v packing and hidden dropout, fp32
 * at 1e-5 and bf16 at 1e-2 against the CPU reference */
static void test_llama(int N, int C, int NH, int NG, int HD)
{
    std::vector<uint16_t> xb, wb, gb;
    vec x = rv_bf((size_t)N * C, 2, xb), w = rv_bf(C, 1, wb), g = rv_bf((size_t)N * C, 1, gb);
    vec o1 = nanv((size_t)N * C), o2 = o1, r1 = nanv(N), r2 = r1, dx1 = rv((size_t)N * C), dx2 = dx1, dw1 = rv(C), dw2 = dw1;
    R->rmsnorm_forward(o1.data(), r1.data(), x.data(), w.data(), N, C, 1e-5f);
    kcu_rmsnorm_forward(o2.data(), r2.data(), x.data(), w.data(), N, C, 1e-5f);
    cmp("rmsnorm_forward out", o2, o1, 1e-5);
    cmp("rmsnorm_forward rstd", r2, r1, 1e-5);
    { /* --norm-epsilon reaches the kernel */
        vec o3 = nanv((size_t)N * C), o4 = o3, r3 = nanv(N), r4 = r3;
        R->rmsnorm_forward(o3.data(), r3.data(), x.data(), w.data(), N, C, 0.25f);
        kcu_rmsnorm_forward(o4.data(), r4.data(), x.data(), w.data(), N, C, 0.25f);
        cmp("rmsnorm_forward (eps 0.25) out", o4, o3, 1e-5);
        check(r3[0] < 0.99f * r1[0], "rmsnorm_forward: eps 0.25 did not lower rstd (%g vs %g)", r3[0], r1[0]);
    }
    R->rmsnorm_backward(dx1.data(), dw1.data(), g.data(), x.data(), w.data(), r1.data(), N, C);
    kcu_rmsnorm_backward(dx2.data(), dw2.data(), g.data(), x.data(), w.data(), r2.data(), N, C);
    cmp("rmsnorm_backward dinp", dx2, dx1, 1e-5);
    cmp("rmsnorm_backward dw", dw2, dw1, 1e-5);
    std::vector<uint16_t> ob((size_t)N * C, 0xffff), dxb = narrow(dx1);
    vec rb = nanv(N), dwb = dw1, dx3 = dx1, dw3 = dw1;
    kcu_rmsnorm_forward_bf16(ob.data(), rb.data(), xb.data(), wb.data(), N, C, 1e-5f);
    cmp("rmsnorm_forward_bf16 out", widen(ob), o1, 1e-2);
    vec dxw = widen(dxb);
    R->rmsnorm_backward(dxw.data(), dw3.data(), g.data(), x.data(), w.data(), r1.data(), N, C);
    kcu_rmsnorm_backward_bf16(dxb.data(), dwb.data(), gb.data(), xb.data(), wb.data(), rb.data(), N, C);
    cmp("rmsnorm_backward_bf16 dinp", widen(dxb), dxw, 1e-2);
    cmp("rmsnorm_backward_bf16 dw", dwb, dw3, 1e-2);
    /* the residual add fused in, in place as the engine calls it (res = a): the
     * same bits as the two calls, and against the CPU composition */
    {
        std::vector<uint16_t> ab, b2, o3((size_t)N * C, 0xffff), o4 = o3, o5 = o3;
        rv_bf((size_t)N * C, 2, ab);
        rv_bf((size_t)N * C, 1, b2);
        std::vector<uint16_t> ra = ab, rb = ab, rc = ab;
        vec r3 = nanv(N), r4 = r3, r5 = r3;
        kcu_residual_rmsnorm_forward_bf16(ra.data(), o3.data(), r3.data(), ra.data(), b2.data(), wb.data(), N, C,
                                          1e-5f);
        kcu_residual_forward_bf16(rb.data(), rb.data(), b2.data(), (size_t)N * C);
        kcu_rmsnorm_forward_bf16(o4.data(), r4.data(), rb.data(), wb.data(), N, C, 1e-5f);
        R->residual_rmsnorm_forward_bf16(rc.data(), o5.data(), r5.data(), rc.data(), b2.data(), wb.data(), N, C, 1e-5f);
        check(ra == rb && o3 == o4 && !memcmp(r3.data(), r4.data(), N * 4),
              "residual_rmsnorm_forward_bf16 (N=%d C=%d): not the bits of residual then rmsnorm", N, C);
        check(ra == rc, "residual_rmsnorm_forward_bf16 (N=%d C=%d): residual differs from the CPU's", N, C);
        cmp("residual_rmsnorm_forward_bf16 out", widen(o3), widen(o5), 1e-2);
        cmp("residual_rmsnorm_forward_bf16 rstd", r3, r5, 1e-5);
    }

    size_t n = (size_t)N * C;
    std::vector<uint16_t> ub, sb(n, 0xffff), dgb(n, 0xffff), dub(n, 0xffff);
    vec u = rv_bf(n, 2, ub), s1 = nanv(n), s2 = s1, dg1 = nanv(n), du1 = dg1, dg2 = dg1, du2 = dg1;
    R->swiglu_forward(s1.data(), x.data(), u.data(), n);
    kcu_swiglu_forward(s2.data(), x.data(), u.data(), n);
    cmp("swiglu_forward", s2, s1, 1e-5);
    R->swiglu_backward(dg1.data(), du1.data(), g.data(), x.data(), u.data(), n);
    kcu_swiglu_backward(dg2.data(), du2.data(), g.data(), x.data(), u.data(), n);
    cmp("swiglu_backward dgate", dg2, dg1, 1e-5);
    cmp("swiglu_backward dup", du2, du1, 1e-5);
    kcu_swiglu_forward_bf16(sb.data(), xb.data(), ub.data(), n);
    cmp("swiglu_forward_bf16", widen(sb), s1, 1e-2);
    kcu_swiglu_backward_bf16(dgb.data(), dub.data(), gb.data(), xb.data(), ub.data(), n);
    cmp("swiglu_backward_bf16 dgate", widen(dgb), dg1, 1e-2);
    cmp("swiglu_backward_bf16 dup", widen(dub), du1, 1e-2);

    /* rotary embedding on [B=2, T=N/2, NG, Q+2, HD], and back */
    int B = 2, T = N / 2, M = B * T;
    size_t nq = (size_t)M * (NH + 2 * NG) * HD, nh = (size_t)M * NH * HD, nk = (size_t)M * NG * HD;
    std::vector<uint16_t> qkvb;
    vec qkv = rv_bf(nq, 2, qkvb);
    for (int RD : { HD, HD / 2 / 2 * 2 }) { /* the whole head, and --rotary-percent 0.5 */
        vec a1 = qkv, a2 = qkv;
        R->rope_forward(a1.data(), B, T, NH, NG, HD, RD, k_rope_freq{10000.0f, 1.0f, 1.0f, 0});
        kcu_rope_forward(a2.data(), B, T, NH, NG, HD, RD, k_rope_freq{10000.0f, 1.0f, 1.0f, 0});
        cmp("rope_forward", a2, a1, 1e-5);
        check(RD == HD || a1 != qkv, "rope_forward (RD %d of %d) turned nothing", RD, HD);
        R->rope_backward(a1.data(), B, T, NH, NG, HD, RD, k_rope_freq{10000.0f, 1.0f, 1.0f, 0});
        kcu_rope_backward(a2.data(), B, T, NH, NG, HD, RD, k_rope_freq{10000.0f, 1.0f, 1.0f, 0});
        cmp("rope_backward", a2, a1, 1e-5);
        cmp("rope_backward undoes rope_forward", a2, qkv, 1e-5);
        vec a3 = qkv;
        std::vector<uint16_t> b3 = qkvb;
        R->rope_forward(a3.data(), B, T, NH, NG, HD, RD, k_rope_freq{10000.0f, 1.0f, 1.0f, 0});
        kcu_rope_forward_bf16(b3.data(), B, T, NH, NG, HD, RD, k_rope_freq{10000.0f, 1.0f, 1.0f, 0});
        cmp("rope_forward_bf16", widen(b3), a3, 1e-2);
    }
    { /* LLaMA-3.1's scaling (k_rope.h) with LLaMA-3's base: the CPU's angles, other than unscaled ones */
        vec a0 = qkv, a1 = qkv, a2 = qkv;
        R->rope_forward(a1.data(), B, T, NH, NG, HD, HD, k_rope_freq{500000.0f, 8.0f, 1.0f, 0});
        kcu_rope_forward(a2.data(), B, T, NH, NG, HD, HD, k_rope_freq{500000.0f, 8.0f, 1.0f, 0});
        cmp("rope_forward (scaled)", a2, a1, 1e-5);
        R->rope_forward(a0.data(), B, T, NH, NG, HD, HD, k_rope_freq{500000.0f, 1.0f, 1.0f, 0});
        check(a0 != a1, "rope_forward: the scale changed no angle");
        kcu_rope_backward(a2.data(), B, T, NH, NG, HD, HD, k_rope_freq{500000.0f, 8.0f, 1.0f, 0});
        cmp("rope_backward (scaled) undoes the forward", a2, qkv, 1e-5);
        vec a3 = qkv, a4 = qkv; /* --rotary-seq-len-interpolation-factor 4 */
        R->rope_forward(a3.data(), B, T, NH, NG, HD, HD, k_rope_freq{500000.0f, 1.0f, 4.0f, 0});
        kcu_rope_forward(a4.data(), B, T, NH, NG, HD, HD, k_rope_freq{500000.0f, 1.0f, 4.0f, 0});
        cmp("rope_forward (interpolated positions)", a4, a3, 1e-5);
        check(a3 != a0, "rope_forward: the interpolation factor changed no angle");
    }

    vec q = rv(nh), k = rv(nk), v = rv(nk), p1 = nanv(nq), p2 = p1;
    R->qkv_pack(p1.data(), q.data(), k.data(), v.data(), M, NH, NG, HD);
    kcu_qkv_pack(p2.data(), q.data(), k.data(), v.data(), M, NH, NG, HD);
    cmp("qkv_pack", p2, p1, 0);
    vec q2 = nanv(nh), k2 = nanv(nk), v2 = nanv(nk);
    kcu_qkv_unpack(q2.data(), k2.data(), v2.data(), p1.data(), M, NH, NG, HD);
    cmp("qkv_unpack q", q2, q, 0);
    cmp("qkv_unpack k", k2, k, 0);
    cmp("qkv_unpack v", v2, v, 0);
    std::vector<uint16_t> qb16 = narrow(q), kb16 = narrow(k), vb16 = narrow(v), pb(nq, 0xffff), q3(nh, 0xffff),
                          k3(nk, 0xffff), v3(nk, 0xffff);
    kcu_qkv_pack_bf16(pb.data(), qb16.data(), kb16.data(), vb16.data(), M, NH, NG, HD);
    std::vector<uint16_t> pr(nq);
    R->qkv_pack_bf16(pr.data(), qb16.data(), kb16.data(), vb16.data(), M, NH, NG, HD);
    cmp("qkv_pack_bf16", widen(pb), widen(pr), 0);
    kcu_qkv_unpack_bf16(q3.data(), k3.data(), v3.data(), pb.data(), M, NH, NG, HD);
    cmp("qkv_unpack_bf16", widen(q3), widen(qb16), 0);

    k_dropout d = drop_of(0.3f);
    vec h1 = x, h2 = x;
    R->dropout(h1.data(), N, C, &d);
    kcu_dropout(h2.data(), N, C, &d);
    cmp("dropout", h2, h1, 0);
    size_t zeros = 0;
    for (size_t i = 0; i < n; i++) zeros += h1[i] == 0.0f;
    if (zeros < n / 5 || zeros > n * 2 / 5) {
        failed++;
        fprintf(stderr, "dropout 0.3 zeroed %zu of %zu elements\n", zeros, n);
    }
    std::vector<uint16_t> hb = xb;
    kcu_dropout_bf16(hb.data(), N, C, &d);
    cmp("dropout_bf16", widen(hb), h1, 1e-2);
}

/* The token backward's runs against its 32-entry slices of the sorted ids:
 * runs that fill a slice exactly, end on a slice's edge, cross one edge, span
 * many slices (a hot id), single entries, over three sort chunks, with ids
 * outside the vocab slice mixed in and the positions shuffled. */
static void test_embedding_runs(int C)
{
    const int off = 7, V = 400, runs[] = { 32, 64, 1, 31, 33, 95, 2000, 32, 1, 63, 65 };
    std::vector<int32_t> tok;
    int row = 0;
    for (int len : runs) {
        for (int k = 0; k < len; k++) tok.push_back(off + row);
        row += 2;
    }
    while (tok.size() < 4700) { /* short runs, then ids outside [off, off + V) */
        tok.push_back(tok.size() < 4300 ? off + row + (int)(tok.size() % 3) : (tok.size() % 2 ? off + V : off - 1));
        row += tok.size() % 3 == 0;
    }
    int N = (int)tok.size();
    for (int i = N - 1; i > 0; i--) { /* a fixed shuffle */
        int j = (int)(((unsigned)i * 2654435761u) % (unsigned)(i + 1));
        std::swap(tok[i], tok[j]);
    }
    vec g = rv((size_t)N * C), d1 = rv((size_t)V * C), d2 = d1;
    R->embedding_backward(d1.data(), g.data(), tok.data(), N, C, off, V);
    kcu_embedding_backward(d2.data(), g.data(), tok.data(), N, C, off, V);
    char what[64];
    snprintf(what, sizeof what, "embedding_backward, runs on slice edges (C=%d)", C);
    cmp(what, d2, d1, 1e-5);
}

/* ---- the emulator itself: what every kernel test above relies on ---- */

/* Warp exchanges back to back, mixed, with warps that take different numbers
 * of them between two __syncthreads: each lane's result against the lane
 * arithmetic done here. A shuffle that read a slot its partner had already
 * overwritten for the next exchange (xor 31: the last lane runs on first)
 * would show. */
enum { XW = 3, XR = 6 };
static void emu_exchange_k(float *out, unsigned *ballots)
{
    int t = threadIdx.x, lane = t & 31, w = t / 32;
    float v = (float)t;
    for (int r = 0; r < XR; r++) {
        float a = __shfl_xor_sync(0xffffffffu, v, 31 >> (r % 5));
        int b = __shfl_sync(0xffffffffu, (int)v * 3 + r, (lane + r + 1) & 31);
        unsigned m = __ballot_sync(0xffffffffu, ((int)v + r) % 3 == 0);
        if (w == 1) a = __shfl_xor_sync(0xffffffffu, a, 1); /* one more, in warp 1 only */
        if (lane == 0) ballots[w * XR + r] = m;
        __syncthreads();
        v = a + (float)(b % 1000) + (float)__popc(m);
    }
    out[t] = v;
}
static void test_emu_exchanges()
{
    vec out(XW * 32, -1.0f);
    std::vector<unsigned> ballots(XW * XR), want_ballots(XW * XR);
    emu_launch(emu_exchange_k, dim3(1), dim3(XW * 32), 0, nullptr, out.data(), ballots.data());
    vec v(XW * 32);
    for (int t = 0; t < XW * 32; t++) v[t] = (float)t;
    for (int r = 0; r < XR; r++) {
        vec next(XW * 32);
        for (int w = 0; w < XW; w++) {
            unsigned m = 0;
            for (int l = 0; l < 32; l++) m |= (unsigned)(((int)v[w * 32 + l] + r) % 3 == 0) << l;
            want_ballots[w * XR + r] = m;
            for (int l = 0; l < 32; l++) {
                int src = l ^ (31 >> (r % 5));
                if (w == 1) src ^= 1;
                int b = (int)v[w * 32 + ((l + r + 1) & 31)] * 3 + r;
                next[w * 32 + l] = v[w * 32 + src] + (float)(b % 1000) + (float)__builtin_popcount(m);
            }
        }
        v = next;
    }
    int bad = 0;
    for (int t = 0; t < XW * 32; t++) bad += out[t] != v[t];
    check(bad == 0, "emulated warp exchanges: %d of %d lanes wrong (lane 0: %g, want %g)", bad, XW * 32, out[0], v[0]);
    size_t i = 0;
    while (i < ballots.size() && ballots[i] == want_ballots[i]) i++;
    check(i == ballots.size(), "emulated ballots: warp %zu's round %zu %#x, want %#x", i / XR, i % XR,
          i < ballots.size() ? ballots[i] : 0u, i < ballots.size() ? want_ballots[i] : 0u);
}

/* A block of 1024 threads (the most; their stacks wrap the cache colouring
 * 16 times over) summing through shared memory, over several blocks. */
static void emu_block_sum_k(const float *x, float *out)
{
    __shared__ float sh[1024];
    int t = threadIdx.x;
    sh[t] = x[blockIdx.x * 1024 + t];
    __syncthreads();
    for (int h = 512; h > 0; h /= 2) {
        if (t < h) sh[t] += sh[t + h];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = sh[0];
}
static void test_emu_big_block()
{
    enum { B = 3 };
    vec x(B * 1024), out(B, -1.0f);
    for (size_t i = 0; i < x.size(); i++) x[i] = (float)(i % 97);
    emu_launch(emu_block_sum_k, dim3(B), dim3(1024), 0, nullptr, (const float *)x.data(), out.data());
    for (int b = 0; b < B; b++) {
        float want = 0; /* integers below 2^24: every order gives the same sum */
        for (int i = 0; i < 1024; i++) want += x[b * 1024 + i];
        check(out[b] == want, "emulated 1024-thread block %d: sum %g, want %g", b, out[b], want);
    }
}

/* Shared memory (a kernel's own array, or the launch's dynamic) that only
 * block 0 writes, read by every block: on a GPU block 1 finds whatever was there. The emulation gives each block NaN
 * bytes, so the read is wrong every time, not only where the last block's
 * leftovers happen to differ. */
static void emu_unwritten_smem_k(float *out, int dynamic)
{
    __shared__ float st[32]; /* a kernel's own array: as undefined at a block's start */
    float *s = dynamic ? (float *)emu_dyn_smem : st;
    if (blockIdx.x == 0) s[threadIdx.x] = 1.0f + (float)threadIdx.x;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
}
static void test_emu_unwritten_smem()
{
    for (int dynamic = 0; dynamic < 2; dynamic++) {
        vec out(2 * 32, 0.0f);
        emu_launch(emu_unwritten_smem_k, dim3(2), dim3(32), dynamic ? 32 * sizeof(float) : 0, nullptr, out.data(),
                   dynamic);
        int block0 = 0, nan1 = 0;
        for (int t = 0; t < 32; t++) {
            block0 += out[t] == 1.0f + (float)t;
            nan1 += std::isnan(out[32 + t]);
        }
        check(block0 == 32 && nan1 == 32, "emulated %s shared memory a block did not write: block 0 read back %d of "
              "32 values it wrote, block 1 found %d of 32 NaN (want 32 and 32)", dynamic ? "dynamic" : "static",
              block0, nan1);
    }
}

/* The blocks of a launch run in an order of its own, not in index order, and every block runs once. */
static void emu_order_k(unsigned *seq, unsigned *order)
{
    if (threadIdx.x == 0) order[atomicAdd(seq, 1u)] = blockIdx.y * gridDim.x + blockIdx.x;
}
/* A stream of cudaStreamCreateWithFlags (the backend's second one) keeps its work until something waits for
 * it, then runs it in order up to what is waited for; the kernels' stream runs its work at once. */
static void test_emu_deferred()
{
    cudaStream_t s;
    cudaEvent_t e1, e2;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
    cudaCheck(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
    std::vector<unsigned char> a(64, 0), b(64, 0), c(64, 0);
    cudaCheck(cudaMemsetAsync(a.data(), 1, a.size(), s));
    cudaCheck(cudaEventRecord(e1, s));
    cudaCheck(cudaMemsetAsync(b.data(), 2, b.size(), s));
    cudaCheck(cudaEventRecord(e2, s));
    cudaCheck(cudaMemsetAsync(c.data(), 3, c.size(), nullptr)); /* the kernels' stream: at once */
    check(a[0] == 0 && b[0] == 0 && c[0] == 3, "emulated deferred stream: ran before anything waited (%d %d %d)", a[0],
          b[0], c[0]);
    cudaCheck(cudaStreamWaitEvent(nullptr, e1, 0));
    check(a[63] == 1 && b[0] == 0, "emulated deferred stream: a wait for its first event ran %s",
          a[63] != 1 ? "nothing" : "past it");
    cudaCheck(cudaStreamWaitEvent(s, e1, 0)); /* a stream waiting on its own: nothing to run */
    check(b[0] == 0, "emulated deferred stream: its own wait ran its work");
    cudaCheck(cudaEventSynchronize(e2));
    check(b[63] == 2, "emulated deferred stream: a sync of its second event did not run its work");
    cudaCheck(cudaMemsetAsync(a.data(), 4, a.size(), s));
    cudaCheck(cudaStreamSynchronize(s));
    check(a[0] == 4, "emulated deferred stream: a sync of it did not run its work");
    cudaCheck(cudaMemsetAsync(c.data(), 5, c.size(), s));
    cudaCheck(cudaStreamDestroy(s));
    check(c[0] == 5, "emulated deferred stream: destroyed with its work not run");
    cudaCheck(cudaEventDestroy(e1));
    cudaCheck(cudaEventDestroy(e2));
}

static void test_emu_block_order()
{
    std::vector<unsigned> a(64), b(64), seq(1, 0);
    emu_launch(emu_order_k, dim3(16, 4), dim3(32), 0, nullptr, seq.data(), a.data());
    seq[0] = 0;
    emu_launch(emu_order_k, dim3(16, 4), dim3(32), 0, nullptr, seq.data(), b.data());
    std::vector<int> seen(64, 0);
    int in_place = 0;
    for (unsigned i = 0; i < 64; i++) {
        if (a[i] < 64) seen[a[i]]++;
        in_place += a[i] == i;
    }
    int once = 0;
    for (int n : seen) once += n == 1;
    check(once == 64 && in_place < 16 && a != b, "emulated block order: %d of 64 blocks ran once (want 64), %d in "
          "index order (want few), two launches %s", once, in_place, a != b ? "differ" : "ran in the same order");
}

/* A read of what the thread before wrote, with no barrier between: a race on a GPU, and here a wrong
 * answer in many blocks (run in thread order the reader would always come after the writer and it would
 * pass). */
static void emu_no_barrier_k(float *out)
{
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    out[blockIdx.x * 64 + threadIdx.x] = s[(threadIdx.x + 63) % 64];
}
static void test_emu_thread_order()
{
    vec out(16 * 64, 0.0f);
    emu_launch(emu_no_barrier_k, dim3(16), dim3(64), 0, nullptr, out.data());
    int stale = 0;
    for (float x : out) stale += std::isnan(x);
    check(stale > 16 * 64 / 4 && stale < 16 * 64, "emulated threads' turns: %d of %d reads without a barrier found "
          "nothing written (want many, not all)", stale, 16 * 64);
}

/* A barrier that not all threads of a block reach (thread 5 returns first):
 * undefined on a GPU, here a stop with a message that says so, not a hang. */
static void emu_partial_barrier_k(int *out)
{
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
static void test_emu_partial_barrier()
{
    int fds[2];
    if (pipe(fds) != 0) {
        check(false, "pipe: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        alarm(60); /* a hang instead of the stop ends as SIGALRM */
        std::vector<int> out(64);
        emu_launch(emu_partial_barrier_k, dim3(2), dim3(64), 0, nullptr, out.data());
        _exit(0); /* not reached when the emulator stops the launch */
    }
    close(fds[1]);
    std::string err;
    char buf[512];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, (size_t)n);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    check(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "a launch with a barrier 1 of 64 threads skips: status %#x, want SIGABRT", st);
    check(err.find("block (0, 0) of 64 threads: a barrier that not all of its threads reach (63 still waiting)") !=
              std::string::npos, "a launch with a barrier 1 of 64 threads skips said: %s", err.c_str());
}

/* --overlap-wgrad (k_cuda_overlap_wgrad): matmul_backward's weight gradient on the backend's second stream.
 * The emulation runs that stream's work only when something waits for it (emu_cuda.h: emu_deferred), as
 * late as a GPU may, so: dw is not there after the call and dinp and dbias are; it is after the join (the
 * table's wgrad_join), after the next matmul_backward (which joins before it queues), and after each wait
 * of the backend (a sync, a read, the step timer, k_cuda_stream for the NCCL streams); a graph records the
 * fork and the join; and every result is the bits of the same calls in order. */
static void test_overlap_wgrad()
{
    enum { N = 64, C = 24, OC = 40 };
    vec x = rv(N * C), w = rv(OC * C), g = rv(N * OC), g2 = rv(N * OC);
    vec d_ref = nanv(N * C), gw_ref(OC * C, 0.0f), gb_ref(OC, 0.0f), gw2_ref;
    kcu_matmul_backward(d_ref.data(), gw_ref.data(), gb_ref.data(), g.data(), x.data(), w.data(), N, C, OC);
    gw2_ref = gw_ref;
    kcu_matmul_backward(NULL, gw2_ref.data(), NULL, g2.data(), x.data(), w.data(), N, C, OC);
    long calls = k_cuda_overlap_wgrad_calls();
    check(k_cuda_overlap_wgrad(1) == 1, "overlap: the second stream did not start");
    vec d = nanv(N * C), gw(OC * C, 0.0f), gb(OC, 0.0f), zero(OC * C, 0.0f);
    kcu_matmul_backward(d.data(), gw.data(), gb.data(), g.data(), x.data(), w.data(), N, C, OC);
    cmp("overlap: dinp at once", d, d_ref, 0);
    cmp("overlap: dbias at once", gb, gb_ref, 0);
    cmp("overlap: dw not yet (beside, run when waited for)", gw, zero, 0);
    kcu_wgrad_join(); /* the table's wgrad_join */
    cmp("overlap: dw after wgrad_join", gw, gw_ref, 0);
    /* the next call joins the last before it queues its own: then the caller may change the last one's dout */
    std::fill(gw.begin(), gw.end(), 0.0f);
    vec g1 = g;
    kcu_matmul_backward(NULL, gw.data(), NULL, g1.data(), x.data(), w.data(), N, C, OC);
    kcu_matmul_backward(NULL, gw.data(), NULL, g2.data(), x.data(), w.data(), N, C, OC);
    g1.assign(g1.size(), 7.0f); /* the first call's dout, changed after the second call: too late to matter */
    kcu_wgrad_join();
    cmp("overlap: two calls in a row, the second joining the first", gw, gw2_ref, 0);
    /* and changing it before the next call is what the contract forbids: the emulation shows it */
    std::fill(gw.begin(), gw.end(), 0.0f);
    g1 = g;
    kcu_matmul_backward(NULL, gw.data(), NULL, g1.data(), x.data(), w.data(), N, C, OC);
    g1.assign(g1.size(), 7.0f);
    kcu_wgrad_join();
    double diff = 0;
    for (size_t i = 0; i < gw.size(); i++) diff += std::fabs((double)gw[i] - gw_ref[i]);
    check(diff > 0, "overlap: a dout changed before the join did not reach dw: the emulation ran it in order");
    /* each wait of the backend waits for it too */
    const char *waits[] = { "sync", "read", "timer", "k_cuda_stream" };
    for (const char *wt : waits) {
        std::fill(gw.begin(), gw.end(), 0.0f);
        float host = 0.0f;
        k_cuda_timer_begin();
        kcu_matmul_backward(NULL, gw.data(), NULL, g.data(), x.data(), w.data(), N, C, OC);
        if (!strcmp(wt, "sync")) kcu_sync();
        else if (!strcmp(wt, "read")) kcu_to_host(&host, d.data(), sizeof host);
        else if (!strcmp(wt, "timer")) (void)k_cuda_timer_end_ms();
        else cudaCheck(cudaStreamSynchronize((cudaStream_t)k_cuda_stream()));
        cmp((std::string("overlap: dw after a ") + wt).c_str(), gw, gw_ref, 0);
    }
    /* a graph: the fork and the join are recorded with it */
    char why[256] = "";
    std::fill(gw.begin(), gw.end(), 0.0f);
    d = nanv(N * C);
    check(k_cuda_graph_begin(why, sizeof why) == 0, "overlap: graph begin: %s", why);
    kcu_matmul_backward(d.data(), gw.data(), NULL, g.data(), x.data(), w.data(), N, C, OC);
    k_cuda_graph *gr = k_cuda_graph_end(why, sizeof why);
    check(gr != NULL, "overlap: a backward recorded with its weight gradient beside: %s", why);
    if (gr) {
        check(k_cuda_graph_launch(gr) == 0, "overlap: the graph's launch was refused");
        kcu_sync();
        cmp("overlap: graph, dinp", d, d_ref, 0);
        cmp("overlap: graph, dw", gw, gw_ref, 0);
        k_cuda_graph_free(gr);
    }
    check(k_cuda_overlap_wgrad_calls() - calls == 9, "overlap: %ld weight gradients beside, 9 queued",
          k_cuda_overlap_wgrad_calls() - calls);
    check(k_cuda_overlap_wgrad(0) == 0, "overlap: still on after off");
    std::fill(gw.begin(), gw.end(), 0.0f);
    kcu_matmul_backward(NULL, gw.data(), NULL, g.data(), x.data(), w.data(), N, C, OC);
    cmp("overlap: off, dw at once", gw, gw_ref, 0);
}

int main(int, char **argv)
{
    R = k_cpu();
    test_emu_exchanges();
    test_emu_big_block();
    test_emu_unwritten_smem();
    test_emu_partial_barrier();
    test_emu_block_order();
    test_emu_thread_order();
    test_emu_deferred();
    test_arrive_last();
    kcu_init();
    test_copies();
    test_graph();
    test_overlap_wgrad();
    test_layernorm(5, 37);
    test_layernorm(70, 300);  /* C % 8 != 0: the general kernels */
    test_layernorm(37, 264);  /* the warp-per-row kernels, a partial last block of rows */
    test_layernorm(130, 776, 1); /* fused backward: three 64-row blocks, the last partial; a partial 256-column strip */
    test_layernorm(24, 1280, 1); /* rows past the fused backward's registers (1024 columns): its loop form, bias sum in */
    test_layernorm(24, 1600, 1); /* the loop form; three slices packed to C fit 3 blocks an SM: the bias sum in */
    test_layernorm(24, 2048, 0); /* three slices of 2048 (96 KiB) would cost a block an SM: the bias sum after */
    test_layernorm(9, 3080);  /* rows too wide for the fused backward's slices: the two-pass form */
    test_embedding(37, 19, 0, 50);
    test_embedding(300, 64, 100, 100); /* a vocab slice, many repeats */
    test_colsum(2100, 24);   /* 263 chunks of 8 rows: 16 groups of 17, the last of 8 */
    test_colsum(700, 776, 1); /* 88 chunks of 8 rows: 9 groups of 10; dst not 16-byte aligned */
    test_colsum(300, 2400);  /* 3 column strips, the last partial */
    test_colsum(50, 37);     /* C % 8 != 0: a part kernel and a finish kernel */
    test_embedding_runs(40);            /* 8 columns a lane */
    test_embedding_runs(19);            /* one a lane */
    test_xent(9, 50, 0, 50);
    test_xent(20, 3000, 1500, 1500);
    test_xent(10, 4096, 2048, 2048); /* whole 16-byte chunks: 8 elements an access; a tp2 vocab's second half */
    test_xent_fused(5, 37);   /* scalar path */
    test_xent_fused(6, 1000); /* 16-byte path, fewer chunks than threads */
    test_xent_fused(1, 1000); /* bf16: one row, fewer than the SMs: a block, no next row to request */
    test_xent_fused(7, 2048); /* bf16: 4 rows and 3 over the emulation's 2 SMs, two in flight a block */
    test_xent_fused(3, 50304); /* GPT-2's padded vocab: running max rescaled; bf16 rows two at a time in shared memory */
    test_xent_fused(2, 128256); /* LLaMA-3's vocab: more than shared memory holds, read from device memory */
    test_elementwise_optimizer(1);
    test_elementwise_optimizer(20001);
    test_elementwise_optimizer(4096); /* 16-byte paths */
    test_matmul(7, 13, 11);  /* odd: the mock offers no fused epilogue, fallbacks run */
    test_matmul(16, 24, 32); /* even: fused epilogues */
    test_gemm_tuning();
    test_attention(2, 9, 2, 2, 4, 0.0f);
    test_attention(2, 9, 4, 2, 4, 0.0f);  /* grouped-query: 2 heads per key/value group */
    test_attention(2, 9, 6, 2, 4, 0.25f); /* 3 heads per group, dropout */
    test_attention(2, 150, 4, 2, 4, 0.25f, true); /* documents */
    test_flash(1, 64, 1, 1, 64, 0.0f);  /* one tile */
    test_flash(1, 150, 1, 1, 64, 0.0f); /* a partial last tile */
    test_flash(1, 80, 1, 1, 128, 0.0f);
    test_flash(2, 40, 4, 2, 64, 0.0f);  /* grouped-query, two sequences */
    test_flash(1, 70, 2, 1, 64, 0.2f);  /* one group of two heads, dropout */
    test_flash(1, 40, 2, 2, 128, 0.2f); /* dropout, head dim 128 */
    test_flash(2, 150, 2, 1, 64, 0.0f, true);  /* documents: tiles skipped, rows with none of a tile's keys */
    test_flash(2, 150, 2, 2, 128, 0.2f, true); /* documents, dropout, head dim 128 (64-row query blocks) */
    test_decode(1, 2, 2, 64, 0);      /* the first position: one key */
    test_decode(300, 4, 2, 64, 0);    /* three chunks of keys, the last partial; grouped-query */
    test_decode(200, 6, 3, 40, 150);  /* a document from 150: one partial chunk; an odd head dim */
    test_decode(140, 2, 1, 320, 0);   /* a head dim over the block: three dims a thread */
    test_llama(10, 37, 4, 2, 8);  /* C % 8 != 0 */
    test_llama(64, 256, 6, 3, 16);
    test_llama(130, 264, 4, 2, 8); /* RMSNorm's fused backward: a partial block of rows, a partial column strip */
    test_llama(20, 1280, 10, 5, 128); /* and its loop form (rows past 1024 columns) */
    if (mock_fused_calls == 0 || mock_rejected_calls == 0) {
        failed++;
        fprintf(stderr, "the fused (%d) and the fallback (%d) GEMM paths must both run\n", mock_fused_calls,
                mock_rejected_calls);
    }
    printf("%s: %d passed, %d failed\n", argv[0], passed, failed);
    return failed ? 1 : 0;
}
