/* attention: causal self-attention as cuBLAS strided-batched GEMMs (one
 * batch of NH heads per sequence) around fused causal-softmax kernels.
 *
 * This is the first step the issue allows: it materialises the [T, T]
 * probabilities (the table's att output needs them), computes the masked upper
 * triangle in the GEMMs and throws it away (2x the useful FLOPs), and is fp32.
 * A flash-style kernel (tiles of q against k/v in shared memory, online
 * softmax, never writing [T, T]) is the goal; it needs a table entry without
 * att, so it comes with the engine's bf16 attention path.
 *
 * Column-major views (see matmul.cu): for one (b, h), q_cm/k_cm/v_cm are
 * HD x T with leading dimension (NH + 2 NG)*HD; the row-major [T, T] matrix P
 * is the column-major P^T with leading dimension T. Grouped-query attention
 * batches the heads with the same index j in their group (heads_of). With
 * dropout the masked probabilities go through the backend's scratch. */
#include "kcuda.cuh"
#include "k_dropout.h"
#include "k_qkv.h"

#define SM_BLOCK 128

/* Row t of S (scaled scores) -> probabilities over lo <= j <= t (lo: the
 * first key of t's document, 0 without doc), zeros elsewhere. Rows are
 * (b, h, t), NH heads per sequence. */
__global__ void causal_softmax_k(float *att, const int32_t *doc, int NH, int T)
{
    __shared__ float sh[32];
    size_t row = blockIdx.x;
    int t = (int)(row % T), lo = doc ? doc[row / ((size_t)NH * T) * T + t] : 0;
    float *r = att + row * T;
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, r[j]);
    mx = block_max(mx, sh);
    float s = 0.0f;
    for (int j = lo + threadIdx.x; j <= t; j += blockDim.x) {
        float e = expf(r[j] - mx);
        r[j] = e;
        s += e;
    }
    float inv = 1.0f / block_sum(s, sh);
    for (int j = threadIdx.x; j < T; j += blockDim.x) r[j] = j >= lo && j <= t ? r[j] * inv : 0.0f;
}

/* In place on dS holding dP: dS = P * (dP - rowsum(P * dP)), zero above the diagonal. */
__global__ void causal_softmax_bwd_k(float *dS, const float *att, int T)
{
    __shared__ float sh[32];
    size_t row = blockIdx.x;
    int t = (int)(row % T);
    const float *p = att + row * T;
    float *d = dS + row * T;
    float dot = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) dot += p[j] * d[j];
    dot = block_sum(dot, sh);
    for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

/* Dropout of the probabilities (kernels.h, k_dropout): dst = P * mask of
 * (sample row0 + b, head head0 + h) for each row of att [B, NH, T, T]. */
__global__ void drop_probs_k(float *dst, const float *att, int NH, int T, k_dropout d)
{
    size_t row = blockIdx.x;
    int t = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
    uint64_t key = k_dropout_row_key(d.key, d.row0 + b, d.head0 + h);
    uint32_t th = k_dropout_threshold(d.p);
    float sc = k_dropout_scale(d.p);
    const float *p = att + row * T;
    float *o = dst + row * T;
    for (int j = threadIdx.x; j < T; j += blockDim.x)
        o[j] = j <= t ? p[j] * k_dropout_mul(key, (uint64_t)t * T + j, th, sc) : 0.0f;
}

/* With dropout, on dS holding dP': dS = P M dP' - P rowsum(P M dP'), where
 * PM = P * M is given. */
__global__ void causal_softmax_bwd_drop_k(float *dS, const float *att, const float *pm, int T)
{
    __shared__ float sh[32];
    size_t row = blockIdx.x;
    int t = (int)(row % T);
    const float *p = att + row * T, *q = pm + row * T;
    float *d = dS + row * T;
    float dot = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) dot += q[j] * d[j];
    dot = block_sum(dot, sh);
    for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = j <= t ? q[j] * d[j] - p[j] * dot : 0.0f;
}

/* C = alpha op(A) op(B) + beta C over `batch` matrices; strides in elements. */
static void sgemm_batch(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda, long long sa,
                        const float *B, int ldb, long long sb, float beta, float *C, int ldc, long long sc, int batch)
{
    cublasCheck(cublasSgemmStridedBatched(kcu_cublas(), ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          m, n, k, &alpha, A, lda, sa, B, ldb, sb, &beta, C, ldc, sc, batch));
}

/* Grouped-query layout (kernels.h): per sequence b and query index j within a
 * group, the NG heads h = g*Q + j are one strided batch: their queries are
 * (Q+2)*HD apart, and so are their groups' keys and values; their [T, T]
 * matrices are Q*T*T apart and their output columns Q*HD. */
struct heads_j {
    const float *q, *k, *v; /* first group's, sequence b */
    long long sqkv;         /* (Q+2)*HD */
    size_t att, out;        /* offsets of head j's matrix and output columns in sequence b's */
};

static heads_j heads_of(const float *qkv, int b, int j, int T, int NH, int NG, int HD)
{
    int Q = NH / NG;
    size_t ld = k_qkv_row(NH, NG, HD);
    const float *row = qkv + (size_t)b * T * ld;
    return { row + (size_t)j * HD, row + (size_t)Q * HD, row + (size_t)(Q + 1) * HD, (long long)(Q + 2) * HD,
             (size_t)j * T * T, (size_t)j * HD };
}

static bool dropping(const k_dropout *d) { return d && d->p > 0.0f; }

void kcu_attention_forward(float *out, float *att, const float *qkv, const int32_t *doc, int B, int T, int NH, int NG,
                           int HD, const k_dropout *drop)
{
    if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0 || NG <= 0 || NH % NG) return;
    int Q = NH / NG, ld = (int)k_qkv_row(NH, NG, HD), ldo = NH * HD;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HD);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Q; j++) {
            heads_j hj = heads_of(qkv, b, j, T, NH, NG, HD);
            float *P = att + (size_t)b * NH * TT + hj.att;
            /* P^T = k_cm^T q_cm, scaled */
            sgemm_batch(true, false, T, T, HD, scale, hj.k, ld, hj.sqkv, hj.q, ld, hj.sqkv, 0.0f, P, T, Q * TT, NG);
        }
    causal_softmax_k<<<(unsigned)((size_t)B * NH * T), SM_BLOCK, 0, kcu_stream()>>>(att, doc, NH, T);
    kcu_launched();
    const float *probs = att;
    if (dropping(drop)) {
        float *pm = (float *)kcu_scratch(sizeof(float) * (size_t)B * NH * TT);
        drop_probs_k<<<(unsigned)((size_t)B * NH * T), SM_BLOCK, 0, kcu_stream()>>>(pm, att, NH, T, *drop);
        kcu_launched();
        probs = pm;
    }
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Q; j++) {
            heads_j hj = heads_of(qkv, b, j, T, NH, NG, HD);
            const float *P = probs + (size_t)b * NH * TT + hj.att;
            /* out_cm = v_cm P_cm */
            sgemm_batch(false, false, HD, T, T, 1.0f, hj.v, ld, hj.sqkv, P, T, Q * TT, 0.0f,
                        out + (size_t)b * T * ldo + hj.out, ldo, (long long)Q * HD, NG);
        }
}

void kcu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                            int B, int T, int NH, int NG, int HD, const k_dropout *drop)
{
    if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0 || NG <= 0 || NH % NG) return;
    int Q = NH / NG, ld = (int)k_qkv_row(NH, NG, HD), ldo = NH * HD;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HD);
    const float *pm = att;
    if (dropping(drop)) {
        float *buf = (float *)kcu_scratch(sizeof(float) * (size_t)B * NH * TT);
        drop_probs_k<<<(unsigned)((size_t)B * NH * T), SM_BLOCK, 0, kcu_stream()>>>(buf, att, NH, T, *drop);
        kcu_launched();
        pm = buf;
    }
    /* the j = 0 heads write their groups' dk, dv; the others add */
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Q; j++) {
            heads_j hj = heads_of(qkv, b, j, T, NH, NG, HD);
            const float *dO = dout + (size_t)b * T * ldo + hj.out;
            const float *P = pm + (size_t)b * NH * TT + hj.att;
            float *dS = scratch + (size_t)b * NH * TT + hj.att;
            float *dv = dqkv + (hj.v - qkv);
            /* dP^T = v_cm^T dO_cm  (into scratch, row-major [t][j]) */
            sgemm_batch(true, false, T, T, HD, 1.0f, hj.v, ld, hj.sqkv, dO, ldo, (long long)Q * HD, 0.0f, dS, T,
                        Q * TT, NG);
            /* dv_cm (+)= dO_cm P_cm^T */
            sgemm_batch(false, true, HD, T, T, 1.0f, dO, ldo, (long long)Q * HD, P, T, Q * TT, j ? 1.0f : 0.0f, dv,
                        ld, hj.sqkv, NG);
        }
    if (dropping(drop))
        causal_softmax_bwd_drop_k<<<(unsigned)((size_t)B * NH * T), SM_BLOCK, 0, kcu_stream()>>>(scratch, att, pm, T);
    else
        causal_softmax_bwd_k<<<(unsigned)((size_t)B * NH * T), SM_BLOCK, 0, kcu_stream()>>>(scratch, att, T);
    kcu_launched();
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Q; j++) {
            heads_j hj = heads_of(qkv, b, j, T, NH, NG, HD);
            const float *dS = scratch + (size_t)b * NH * TT + hj.att;
            float *dq = dqkv + (hj.q - qkv), *dk = dqkv + (hj.k - qkv);
            /* dq_cm = scale k_cm dS_cm;  dk_cm (+)= scale q_cm dS_cm^T */
            sgemm_batch(false, false, HD, T, T, scale, hj.k, ld, hj.sqkv, dS, T, Q * TT, 0.0f, dq, ld, hj.sqkv, NG);
            sgemm_batch(false, true, HD, T, T, scale, hj.q, ld, hj.sqkv, dS, T, Q * TT, j ? 1.0f : 0.0f, dk, ld,
                        hj.sqkv, NG);
        }
}

/* ---- a decode step: one query row against the rows before it (kernels.h, attention_decode) ----
 * One block per query head. The keys k0..n-1 go by in chunks of DEC_BLOCK, a
 * thread a key: its score, then the chunk's max and sum of exponentials over
 * the block, folded into a running max m and sum l (online softmax); each
 * thread keeps output dims tid, tid + DEC_BLOCK, ... of the head and adds the
 * chunk's values weighted by their exponentials, rescaled when m grows.
 * out = acc / l. Memory-bound and small: each key and value is read once. */
#define DEC_BLOCK 128
#define DEC_DIMS 4 /* output dims per thread: head dims up to 4 x DEC_BLOCK */

template <typename T>
__global__ void attention_decode_k(T *out, const T *qkv, int n, int k0, int NH, int NG, int HD)
{
    extern __shared__ float dec_smem[]; /* the query [HD], then the chunk's exponentials [DEC_BLOCK] */
    __shared__ float red[32];
    float *qs = dec_smem, *ps = dec_smem + HD;
    int h = blockIdx.x, tid = threadIdx.x;
    size_t ld = k_qkv_row(NH, NG, HD), oq, ok, ov;
    k_qkv_offsets(h, NH, NG, HD, &oq, &ok, &ov);
    float scale = 1.0f / sqrtf((float)HD);
    for (int d = tid; d < HD; d += DEC_BLOCK) qs[d] = ldf(qkv + (size_t)(n - 1) * ld + oq + d);
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc[DEC_DIMS] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int c = k0; c < n; c += DEC_BLOCK) {
        int j = c + tid, cnt = n - c < DEC_BLOCK ? n - c : DEC_BLOCK;
        float s = -INFINITY;
        if (j < n) {
            const T *k = qkv + (size_t)j * ld + ok;
            float dot = 0.0f;
            for (int d = 0; d < HD; d++) dot += qs[d] * ldf(k + d);
            s = dot * scale;
        }
        float mnew = fmaxf(m, block_max(s, red)); /* finite: the chunk holds a key */
        float e = j < n ? expf(s - mnew) : 0.0f;
        ps[tid] = e;
        float corr = expf(m - mnew); /* 0 on the first chunk */
        l = l * corr + block_sum(e, red); /* its barriers also publish ps */
        for (int i = 0; i < DEC_DIMS; i++) {
            int d = tid + i * DEC_BLOCK;
            if (d >= HD) break;
            float a = acc[i] * corr;
            for (int jj = 0; jj < cnt; jj++) a += ps[jj] * ldf(qkv + (size_t)(c + jj) * ld + ov + d);
            acc[i] = a;
        }
        m = mnew;
        __syncthreads(); /* ps is read before the next chunk writes it */
    }
    for (int i = 0; i < DEC_DIMS; i++) {
        int d = tid + i * DEC_BLOCK;
        if (d < HD) stf(out + (size_t)h * HD + d, acc[i] / l);
    }
}

template <typename T> static void attention_decode(T *out, const T *qkv, int n, int k0, int NH, int NG, int HD)
{
    if (n <= 0 || k0 < 0 || k0 >= n || NH <= 0 || NG <= 0 || NH % NG || HD <= 0) return;
    if (HD > DEC_DIMS * DEC_BLOCK) {
        fprintf(stderr, "kernels/cuda: attention_decode takes head dims up to %d, not %d\n", DEC_DIMS * DEC_BLOCK, HD);
        abort();
    }
    attention_decode_k<T><<<(unsigned)NH, DEC_BLOCK, (size_t)(HD + DEC_BLOCK) * sizeof(float), kcu_stream()>>>(
        out, qkv, n, k0, NH, NG, HD);
    kcu_launched();
}

void kcu_attention_decode(float *out, const float *qkv, int n, int k0, int NH, int NG, int HD)
{
    attention_decode(out, qkv, n, k0, NH, NG, HD);
}

void kcu_attention_decode_bf16(uint16_t *out, const uint16_t *qkv, int n, int k0, int NH, int NG, int HD)
{
    attention_decode(as_bf(out), as_bf(qkv), n, k0, NH, NG, HD);
}
