/* matmul: the linear layers through cuBLASLt, fp32 (full fp32 math, no TF32,
 * so the fp32 entries match the CPU reference) and bf16 (bf16 operands, fp32
 * accumulation and scaling).
 *
 * Row-major X[r, c] is column-major X^T, so with w [OC, C]:
 *   forward  out^T[OC,N] = w_cm^T inp_cm        (A = w, op T;  B = inp, op N)
 *   dinp     dinp^T[C,N] = w_cm dout_cm         (A = w, op N;  B = dout, op N)
 *   dw       dw^T[C,OC] += inp_cm dout_cm^T     (A = inp, op N; B = dout, op T; beta 1)
 * Epilogues: BIAS (forward bias), GELU_AUX_BIAS (bf16 MLP up-projection:
 * writes gelu(out) and keeps the pre-activation for the backward), DGELU (the
 * down-projection's dinp times gelu' of that pre-activation). The bias
 * gradient is a deterministic column sum of dout (kcu_colsum_acc), fp32 and
 * bf16 alike. Not the BGRADB epilogue: on Hopper cuBLASLt runs it as its own
 * reduction kernel after the GEMM anyway (globalKernelBgradAB_v2, measured at
 * about half the memory's rate, then an add into the accumulated dbias).
 * When the library has no algorithm for a fused epilogue on some shape, the
 * plain GEMM plus the separate kernel is used instead. */
#include "kcuda.cuh"
#include "kcu_entries.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const void *A, *B;
    void *D;
    cudaDataType_t ab, d; /* operand type, output type */
    bool ta, tb;
    int m, n, k, lda, ldb, ldd;
    float alpha, beta;
    cublasLtEpilogue_t epi;
    const void *bias;
    void *aux;
    int ldaux;
    cudaStream_t st; /* where it runs, with workspace ws of ws_bytes: NULL for kcu_stream() and its workspace */
    void *ws;
    size_t ws_bytes;
} lt_call;

/* The heuristic assumes 256-byte aligned pointers unless told: tell it the truth. */
static uint32_t align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al)) al >>= 1;
    return al;
}

/* Heuristic answers by problem: the query costs tens of microseconds of host
 * time, and a training step asks the same few questions every time. */
typedef struct {
    cudaDataType_t ab, d;
    int ta, tb, m, n, k, lda, ldb, ldd, ldaux, has_bias, has_aux;
    cublasLtEpilogue_t epi;
    uint32_t align[4];
} lt_key;

#define LT_CACHE 256
enum { LT_HEURISTIC, LT_TIMED, LT_LOADED, LT_CHECKED }; /* how an entry's algorithm was chosen */
static struct {
    lt_key key;
    int found;
    int how;
    cublasLtMatmulAlgo_t algo;
    /* LT_TIMED: the median ms of the heuristic's first and of the one kept (negative when the first did not
     * run), and whether the one kept came from the heuristic's answers for no workspace, or for K split
     * only in place */
    float first_ms, chosen_ms;
    bool no_ws, in_place;
    int pick, candidates; /* the one kept: its place among the candidates (0: the heuristic's first), of how many */
} lt_cache[LT_CACHE];
static int lt_cached;

/* ---- the choice by time (k_cuda_gemm_tuning) ----
 * On a new problem, each algorithm the heuristic offers (up to LT_CANDIDATES)
 * runs LT_TUNE_REPS times after one warm-up, on the call's own operands (in
 * rounds over the candidates; each timed run queued behind an untimed one, so
 * that it times the device's time and not the host's), and the one with the
 * least median time is kept. The candidates are those it offers with the workspace and those it
 * offers when told there is none (each once): before many kernels it picks
 * with a workspace, cuBLASLt queues a memset of that workspace (~125 a GPT-2
 * step, 4257 a 1.5B step on an H200, 1.3-1.7 us each plus a launch gap),
 * which a kernel that needs none does not have. The timing counts the memset,
 * so the choice weighs it. The workspace is still passed with every call: an
 * algorithm's use of it is fixed by the algorithm, and one chosen without
 * needs none. Third, those it offers when told to split K only with an
 * in-place reduction (the splits add into the output in turn, counters in the
 * workspace keeping their order): its first choices for GPT-2's weight
 * gradients split K and sum the parts in a kernel of its own after the GEMM
 * (`splitKreduce_kernel`, 36 a step at ~11.7 us on an H200, plus a launch gap
 * each), which these do not have.
 * Running a candidate must not change what the call then computes: the
 * output (and the GELU input an epilogue writes) goes to scratch when the
 * call reads it (beta != 0: the weight gradients' +=) or when it overlaps an
 * operand; elsewhere it is written in place and the call itself overwrites it
 * after. Without scratch memory the heuristic's first algorithm is used. */
#define LT_CANDIDATES 8
#define LT_MAX_CANDIDATES (3 * LT_CANDIDATES) /* with the workspace, split K in place, and for none */
#define LT_TUNE_REPS 5
static bool lt_tune;

static size_t dt_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/* bytes from the start of a column-major [rows, cols] matrix with leading dimension ld to its end */
static size_t span(int rows, int cols, int ld, size_t esz)
{
    return rows > 0 && cols > 0 ? ((size_t)(cols - 1) * ld + (size_t)rows) * esz : 0;
}

static bool overlap(const void *p, size_t pn, const void *q, size_t qn)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return p && q && pn && qn && a < b + qn && b < a + pn;
}

static int cmp_ms(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* The index of the fastest of h[0..n) for this call (0 when they cannot be timed), with the median ms of
 * h[0] and of the fastest in ms[0] and ms[1] (negative when not timed). */
static int lt_fastest(const lt_call *c, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                      cublasLtMatrixLayout_t ld, const cublasLtMatmulHeuristicResult_t *h, int n, void *ws,
                      size_t ws_bytes, float ms[2])
{
    ms[0] = ms[1] = -1.0f;
    kcu_wgrad_join(); /* timed alone, on kcu_stream() */
    static cudaEvent_t e0, e1;
    if (!e0) {
        cudaCheck(cudaEventCreate(&e0));
        cudaCheck(cudaEventCreate(&e1));
    }
    size_t ab = dt_bytes(c->ab), db = dt_bytes(c->d);
    size_t A_n = span(c->ta ? c->k : c->m, c->ta ? c->m : c->k, c->lda, ab);
    size_t B_n = span(c->tb ? c->n : c->k, c->tb ? c->k : c->n, c->ldb, ab);
    size_t D_n = span(c->m, c->n, c->ldd, db), aux_n = c->aux ? span(c->m, c->n, c->ldaux, db) : 0;
    size_t bias_n = c->bias ? (size_t)c->m * db : 0;
    bool aux_out = c->epi == CUBLASLT_EPILOGUE_GELU_AUX || c->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool d_scratch = c->beta != 0.0f || overlap(c->D, D_n, c->A, A_n) || overlap(c->D, D_n, c->B, B_n) ||
                     overlap(c->D, D_n, c->bias, bias_n) || overlap(c->D, D_n, c->aux, aux_n);
    bool aux_scratch = aux_out && (overlap(c->aux, aux_n, c->A, A_n) || overlap(c->aux, aux_n, c->B, B_n) ||
                                   overlap(c->aux, aux_n, c->bias, bias_n));
    void *D = c->D, *aux = c->aux;
    if ((d_scratch && cudaMalloc(&D, D_n) != cudaSuccess) || (aux_scratch && cudaMalloc(&aux, aux_n) != cudaSuccess)) {
        (void)cudaGetLastError(); /* out of memory: not an error, the heuristic's choice stands */
        if (D != c->D) cudaCheck(cudaFree(D));
        return 0;
    }
    if (aux != c->aux)
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    /* rounds over the candidates in turn, a warm-up round first: a drift of the GPU's clocks while they
     * are timed (the first step's GEMMs are timed as the GPU comes up from idle) falls on all alike */
    float t[LT_MAX_CANDIDATES][LT_TUNE_REPS];
    bool ok[LT_MAX_CANDIDATES];
    for (int i = 0; i < n; i++) ok[i] = true;
    auto run = [&](int i) {
        return cublasLtMatmul(kcu_cublaslt(), op, &c->alpha, c->A, la, c->B, lb, &c->beta, D, ld, D, ld, &h[i].algo, ws,
                              ws_bytes, kcu_stream()) == CUBLAS_STATUS_SUCCESS;
    };
    for (int r = -1; r < LT_TUNE_REPS; r++)
        for (int i = 0; i < n; i++) {
            if (!ok[i]) continue; /* a candidate that does not run is not chosen */
            /* a run before the timed one, queued ahead of it: the timed run starts as the device finishes this one,
             * as a step's GEMMs start with the host ahead of the device, not after the time the host takes to
             * make the call (which, after the wait below, an idle device would count: a few us a call, and more
             * for a candidate that has cuBLASLt queue a memset before it) */
            ok[i] = run(i);
            cudaCheck(cudaEventRecord(e0, kcu_stream()));
            ok[i] = ok[i] && run(i);
            cudaCheck(cudaEventRecord(e1, kcu_stream()));
            cudaCheck(cudaEventSynchronize(e1));
            if (r >= 0 && ok[i]) cudaCheck(cudaEventElapsedTime(&t[i][r], e0, e1));
        }
    int best = -1; /* the first candidate that runs, then any faster */
    float best_ms = 0.0f;
    for (int i = 0; i < n; i++) {
        if (!ok[i]) continue;
        qsort(t[i], LT_TUNE_REPS, sizeof t[i][0], cmp_ms);
        float med = t[i][LT_TUNE_REPS / 2];
        if (i == 0) ms[0] = med;
        if (best < 0 || med < best_ms) best = i, best_ms = med;
    }
    if (aux != c->aux) {
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c->aux, sizeof c->aux));
        cudaCheck(cudaFree(aux));
    }
    if (D != c->D) cudaCheck(cudaFree(D));
    if (best >= 0) ms[1] = best_ms;
    return best < 0 ? 0 : best;
}

/* What lt_more_candidates asks the heuristic for again. */
enum { LT_IN_PLACE, LT_NO_WORKSPACE };

/* Appends to h[0..n) the heuristic's answers for the same call with K split only in place (LT_IN_PLACE) or
 * without a workspace (LT_NO_WORKSPACE) that are not among them; returns how many. pref is left asking for
 * that (its caller asks in this order, then is done with it). */
static int lt_more_candidates(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                              cublasLtMatrixLayout_t ld, cublasLtMatmulPreference_t pref,
                              cublasLtMatmulHeuristicResult_t *h, int n, int what)
{
    size_t none = 0;
    uint32_t in_place = CUBLASLT_REDUCTION_SCHEME_INPLACE, any = CUBLASLT_REDUCTION_SCHEME_MASK;
    cublasLtMatmulHeuristicResult_t h0[LT_CANDIDATES];
    int found = 0, added = 0;
    if (what == LT_IN_PLACE)
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &in_place,
                                                         sizeof in_place));
    else {
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &any,
                                                         sizeof any));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &none,
                                                         sizeof none));
    }
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(kcu_cublaslt(), op, la, lb, ld, ld, pref, LT_CANDIDATES, h0,
                                                       &found);
    /* more candidates are a choice's extras: a library that refuses the question (other than "none") costs them,
     * said once, not the run */
    static bool said[2];
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED && !said[what]) {
        said[what] = true;
        fprintf(stderr, "atoll-train: --tune-gemms: cuBLASLt refused to offer algorithms %s (%s): the others are "
                "timed without them\n", what == LT_IN_PLACE ? "that split K only in place" : "for no workspace",
                cublasGetStatusString(st));
    }
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; i++) {
        bool seen = false;
        for (int j = 0; j < n + added && !seen; j++) seen = !memcmp(&h[j].algo, &h0[i].algo, sizeof h0[i].algo);
        if (!seen) h[n + added++] = h0[i];
    }
    return added;
}

static lt_key key_of(const lt_call *c)
{
    lt_key k;
    memset(&k, 0, sizeof k); /* padding too: keys are compared with memcmp */
    k.ab = c->ab; k.d = c->d; k.ta = c->ta; k.tb = c->tb;
    k.m = c->m; k.n = c->n; k.k = c->k; k.lda = c->lda; k.ldb = c->ldb; k.ldd = c->ldd;
    k.ldaux = c->ldaux; k.has_bias = c->bias != NULL; k.has_aux = c->aux != NULL; k.epi = c->epi;
    k.align[0] = align_of(c->A); k.align[1] = align_of(c->B); k.align[2] = align_of(c->D);
    k.align[3] = c->aux ? align_of(c->aux) : 0;
    return k;
}

/* Returns false (and does nothing) when no algorithm supports this call. */
static bool lt_matmul(const lt_call *c)
{
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasOperation_t ta = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    size_t ws_bytes = c->ws_bytes;
    void *ws = c->ws ? c->ws : kcu_workspace(&ws_bytes);
    cudaStream_t st = c->st ? c->st : kcu_stream();

    cublasCheck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi));
    if (c->bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c->bias, sizeof c->bias));
    if (c->aux) {
        int64_t ldaux = c->ldaux;
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c->aux, sizeof c->aux));
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux));
    }
    /* Stored shapes (before op): A is m x k (op N) or k x m (op T); likewise B. */
    cublasCheck(cublasLtMatrixLayoutCreate(&la, c->ab, c->ta ? c->k : c->m, c->ta ? c->m : c->k, c->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, c->ab, c->tb ? c->n : c->k, c->tb ? c->k : c->n, c->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, c->d, c->m, c->n, c->ldd));

    lt_key key = key_of(c);
    int slot = -1;
    for (int i = 0; i < lt_cached; i++)
        if (!memcmp(&lt_cache[i].key, &key, sizeof key)) slot = i;
    if (slot >= 0 && lt_cache[slot].how == LT_LOADED) { /* read from a file: still this library's, for this call? */
        cublasLtMatmulHeuristicResult_t r;
        if (cublasLtMatmulAlgoCheck(kcu_cublaslt(), op, la, lb, ld, ld, &lt_cache[slot].algo, &r) ==
            CUBLAS_STATUS_SUCCESS)
            lt_cache[slot].how = LT_CHECKED;
        else
            lt_cache[slot] = lt_cache[--lt_cached], slot = -1; /* chosen anew below */
    }
    bool skip = false; /* a graph is being recorded and this problem would be timed: not recorded (below) */
    if (slot < 0) {
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                         sizeof ws_bytes));
        cublasLtMatmulPreferenceAttributes_t attrs[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES };
        uint32_t als[4] = { key.align[0], key.align[1], key.align[2], key.align[2] };
        for (int i = 0; i < 4; i++)
            cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &als[i], sizeof als[i]));
        cublasLtMatmulHeuristicResult_t h[LT_MAX_CANDIDATES];
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(kcu_cublaslt(), op, la, lb, ld, ld, pref,
                                                           lt_tune ? LT_CANDIDATES : 1, h, &found);
        if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) cublasCheck(st);
        bool have = st == CUBLAS_STATUS_SUCCESS && found > 0;
        /* h[with_ws..in_place) are the answers for K split in place, h[in_place..found) those for no workspace */
        int with_ws = found, in_place = found;
        if (have && lt_tune) {
            in_place = found += lt_more_candidates(op, la, lb, ld, pref, h, found, LT_IN_PLACE);
            found += lt_more_candidates(op, la, lb, ld, pref, h, found, LT_NO_WORKSPACE);
        }
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        bool timed = have && lt_tune && found > 1;
        /* timing waits for the device, which a graph's recording cannot: the recording gives no graph, and the
         * call made again without capture times it */
        skip = timed && kcu_capture_broken("a GEMM problem not yet timed (--tune-gemms)");
        if (!skip) {
            float ms[2] = { -1.0f, -1.0f };
            int pick = timed ? lt_fastest(c, op, la, lb, ld, h, found, ws, ws_bytes, ms) : 0;
            slot = lt_cached < LT_CACHE ? lt_cached++ : (int)(key.m + key.n + key.k) % LT_CACHE;
            lt_cache[slot].key = key;
            lt_cache[slot].found = have;
            lt_cache[slot].how = timed ? LT_TIMED : LT_HEURISTIC;
            if (have) lt_cache[slot].algo = h[pick].algo;
            lt_cache[slot].first_ms = ms[0];
            lt_cache[slot].chosen_ms = ms[1];
            lt_cache[slot].in_place = pick >= with_ws && pick < in_place;
            lt_cache[slot].no_ws = pick >= in_place;
            lt_cache[slot].pick = pick;
            lt_cache[slot].candidates = found;
        }
    }
    bool ok = skip || lt_cache[slot].found;
    if (ok && !skip)
        cublasCheck(cublasLtMatmul(kcu_cublaslt(), op, &c->alpha, c->A, la, c->B, lb, &c->beta, c->D, ld, c->D, ld,
                                   &lt_cache[slot].algo, ws, ws_bytes, st));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatmulDescDestroy(op));
    return ok;
}

/* Without an epilogue, classic cuBLAS takes any shape and alignment. */
static void lt_matmul_or_die(const lt_call *c)
{
    if (lt_matmul(c)) return;
    if (c->epi == CUBLASLT_EPILOGUE_DEFAULT) {
        cublasCheck(cublasGemmEx(kcu_cublas(), c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, c->tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 c->m, c->n, c->k, &c->alpha, c->A, c->ab, c->lda, c->B, c->ab, c->ldb, &c->beta, c->D,
                                 c->d, c->ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    fprintf(stderr, "kernels/cuda: cuBLASLt has no algorithm for m=%d n=%d k=%d (op %c%c, epilogue %d)\n",
            c->m, c->n, c->k, c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', (int)c->epi);
    exit(EXIT_FAILURE);
}

static lt_call forward_call(void *out, const void *inp, const void *w, cudaDataType_t t, int N, int C, int OC)
{
    lt_call c = {};
    c.A = w; c.B = inp; c.D = out; c.ab = t; c.d = t;
    c.ta = true; c.tb = false;
    c.m = OC; c.n = N; c.k = C; c.lda = C; c.ldb = C; c.ldd = OC;
    c.alpha = 1.0f; c.beta = 0.0f;
    c.epi = CUBLASLT_EPILOGUE_DEFAULT;
    return c;
}

/* The input gradient dinp = dout w (overwritten). */
static lt_call dinp_call(void *dinp, const void *dout, const void *w, cudaDataType_t t, int N, int C, int OC)
{
    lt_call c = {};
    c.A = w; c.B = dout; c.D = dinp; c.ab = t; c.d = t;
    c.m = C; c.n = N; c.k = OC; c.lda = C; c.ldb = OC; c.ldd = C;
    c.alpha = 1.0f; c.beta = 0.0f; c.epi = CUBLASLT_EPILOGUE_DEFAULT;
    return c;
}

/* The weight gradient dw += inp^T dout (fp32). */
static lt_call wgrad_call(float *dw, const void *dout, const void *inp, cudaDataType_t t, int N, int C, int OC)
{
    lt_call c = {};
    c.A = inp; c.B = dout; c.D = dw; c.ab = t; c.d = CUDA_R_32F; /* fp32 weight gradient */
    c.ta = false; c.tb = true;
    c.m = C; c.n = OC; c.k = N; c.lda = C; c.ldb = OC; c.ldd = C;
    c.alpha = 1.0f; c.beta = 1.0f; c.epi = CUBLASLT_EPILOGUE_DEFAULT;
    return c;
}

/* With the weight gradients' stream on (k_cuda_overlap_wgrad), queues the weight gradient c there,
 * ordered after everything queued so far, and returns true: the calls after it go on beside it until
 * the next matmul_backward* or a join (kernels.h: wgrad_join). Otherwise (or where cuBLASLt cannot run
 * it there) returns false, and the caller queues it on kcu_stream() with lt_matmul_or_die. Either way
 * it first joins the last one: its dout and inp are the caller's again. */
static bool wgrad_beside(lt_call *c)
{
    kcu_wgrad_join();
    c->st = kcu_wgrad_fork(&c->ws, &c->ws_bytes);
    if (!c->st) return false;
    if (lt_matmul(c)) {
        kcu_wgrad_queued();
        return true;
    }
    c->st = NULL, c->ws = NULL, c->ws_bytes = 0; /* nothing went there */
    return false;
}

/* dinp = dout w, dw += inp^T dout (beside the rest where wgrad_beside puts it), dbias += column sums. */
template <typename T>
static void matmul_backward(T *dinp, float *dw, float *dbias, const T *dout, const T *inp, const T *w,
                            int N, int C, int OC, cudaDataType_t t)
{
    if (N <= 0 || C <= 0 || OC <= 0) return;
    lt_call c = wgrad_call(dw, dout, inp, t, N, C, OC);
    bool beside = wgrad_beside(&c);
    if (dinp) {
        lt_call d = dinp_call(dinp, dout, w, t, N, C, OC);
        lt_matmul_or_die(&d);
    }
    if (!beside) lt_matmul_or_die(&c);
    if (dbias) kcu_colsum_acc(dbias, dout, N, OC);
}

/* ---- fp32 entries ---- */

__global__ void bias_bcast_k(float *out, const float *bias, int N, int OC)
{
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

void kcu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    if (N <= 0 || OC <= 0) return;
    lt_call c = forward_call(out, inp, w, CUDA_R_32F, N, C, OC);
    if (bias) {
        c.epi = CUBLASLT_EPILOGUE_BIAS;
        c.bias = bias;
        if (lt_matmul(&c)) return;
        /* no fused algorithm: broadcast the bias, then accumulate onto it */
        size_t n = (size_t)N * OC;
        bias_bcast_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(out, bias, N, OC);
        kcu_launched();
        c.epi = CUBLASLT_EPILOGUE_DEFAULT;
        c.bias = NULL;
        c.beta = 1.0f;
    }
    lt_matmul_or_die(&c);
}

void kcu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const float *w, int N, int C, int OC)
{
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, CUDA_R_32F);
}

/* ---- bf16 entries ---- */

__global__ void bias_gelu_k(bf16 *out, bf16 *pre, const bf16 *bias, int N, int OC, int gelu)
{
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = __bfloat162float(pre[i]) + (bias ? __bfloat162float(bias[i % OC]) : 0.0f);
        if (!gelu) {
            out[i] = __float2bfloat16_rn(x);
            continue;
        }
        pre[i] = __float2bfloat16_rn(x);
        x = __bfloat162float(pre[i]); /* gelu of the stored pre-activation, as the backward sees it */
        out[i] = __float2bfloat16_rn(0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))));
    }
}

void kcu_matmul_forward_bf16(uint16_t *out, uint16_t *pre_gelu, const uint16_t *inp, const uint16_t *w,
                             const uint16_t *bias, int N, int C, int OC)
{
    if (N <= 0 || OC <= 0) return;
    lt_call c = forward_call(out, inp, w, CUDA_R_16BF, N, C, OC);
    if (pre_gelu) {
        c.epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        c.bias = bias;
        c.aux = pre_gelu;
        c.ldaux = OC;
        if (OC % 8 == 0 && lt_matmul(&c)) return;
        /* unfused: the GEMM into pre_gelu, then bias + GELU in one pass */
        lt_call p = forward_call(pre_gelu, inp, w, CUDA_R_16BF, N, C, OC);
        lt_matmul_or_die(&p);
        size_t n = (size_t)N * OC;
        bias_gelu_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(as_bf(out), as_bf(pre_gelu), as_bf(bias), N, OC, 1);
        kcu_launched();
        return;
    }
    if (bias) {
        c.epi = CUBLASLT_EPILOGUE_BIAS;
        c.bias = bias;
        if (lt_matmul(&c)) return;
        c.epi = CUBLASLT_EPILOGUE_DEFAULT;
        c.bias = NULL;
        lt_matmul_or_die(&c);
        size_t n = (size_t)N * OC;
        bias_gelu_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(as_bf(out), as_bf(out), as_bf(bias), N, OC, 0);
        kcu_launched();
        return;
    }
    lt_matmul_or_die(&c);
}

void kcu_matmul_backward_bf16(uint16_t *dinp, float *dw, float *dbias, const uint16_t *dout, const uint16_t *inp,
                              const uint16_t *w, int N, int C, int OC)
{
    matmul_backward(dinp ? as_bf(dinp) : (bf16 *)NULL, dw, dbias, as_bf(dout), as_bf(inp), as_bf(w), N, C, OC,
                    CUDA_R_16BF);
}

void kcu_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n);

void kcu_matmul_backward_gelu_bf16(uint16_t *dpre, float *dw, float *dbias, const uint16_t *dout, const uint16_t *inp,
                                   const uint16_t *w, const uint16_t *pre_gelu, int N, int C, int OC)
{
    if (N <= 0 || C <= 0 || OC <= 0) return;
    /* dw first: beside, it has the dinp GEMM below to run next to */
    lt_call g = wgrad_call(dw, dout, inp, CUDA_R_16BF, N, C, OC);
    bool beside = wgrad_beside(&g);
    lt_call c = dinp_call(dpre, dout, w, CUDA_R_16BF, N, C, OC);
    c.epi = CUBLASLT_EPILOGUE_DGELU;
    c.aux = (void *)pre_gelu;
    c.ldaux = C;
    if (C % 8 != 0 || !lt_matmul(&c)) { /* unfused: the product, then GELU's gradient in one pass */
        c.epi = CUBLASLT_EPILOGUE_DEFAULT;
        c.aux = NULL;
        c.ldaux = 0;
        lt_matmul_or_die(&c);
        kcu_gelu_backward_bf16(dpre, pre_gelu, dpre, (size_t)N * C);
    }
    if (!beside) lt_matmul_or_die(&g);
    if (dbias) kcu_colsum_acc(dbias, as_bf(dout), N, OC);
}

/* ---- the choices, for k_cuda.h ---- */

extern "C" void k_cuda_gemm_tuning(int on) { lt_tune = on != 0; }

extern "C" void k_cuda_gemm_choices(k_cuda_gemm_stats *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < lt_cached; i++) {
        s->loaded += lt_cache[i].how == LT_LOADED || lt_cache[i].how == LT_CHECKED;
        if (lt_cache[i].how != LT_TIMED) continue;
        s->timed++;
        s->no_workspace += lt_cache[i].no_ws;
        s->in_place += lt_cache[i].in_place;
        if (lt_cache[i].first_ms >= 0 && lt_cache[i].chosen_ms >= 0)
            s->first_ms += lt_cache[i].first_ms, s->chosen_ms += lt_cache[i].chosen_ms;
    }
}

static const char *epilogue_name(cublasLtEpilogue_t e)
{
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "";
    case CUBLASLT_EPILOGUE_BIAS: return " +bias";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return " +bias, GELU";
    case CUBLASLT_EPILOGUE_DGELU: return " DGELU";
    default: return " (another epilogue)";
    }
}

extern "C" char *k_cuda_gemm_tuning_report(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    for (int i = 0; i < lt_cached; i++) {
        const lt_key *k = &lt_cache[i].key;
        float a = lt_cache[i].first_ms, b = lt_cache[i].chosen_ms;
        if (lt_cache[i].how != LT_TIMED) continue;
        /* this file's three set-ups: forward_call (TN), dinp_call (NN), wgrad_call (NT) */
        const char *pass = k->ta && !k->tb ? "forward" : !k->ta && !k->tb ? "input gradient"
                         : !k->ta && k->tb ? "weight gradient" : "GEMM";
        fprintf(f, "%s m %d n %d k %d, %c%c, %s%s%s: ", pass, k->m, k->n, k->k, k->ta ? 'T' : 'N', k->tb ? 'T' : 'N',
                k->ab == CUDA_R_32F ? "fp32" : "bf16", k->d == CUDA_R_32F ? " -> fp32" : "", epilogue_name(k->epi));
        if (a < 0 || b < 0) {
            fprintf(f, "cuBLASLt's first did not run; kept candidate %d of %d\n", lt_cache[i].pick + 1,
                    lt_cache[i].candidates);
            continue;
        }
        fprintf(f, "cuBLASLt's first %.3f ms, kept %.3f ms (%.1f%% less; candidate %d of %d, %s)\n", a, b,
                a > 0 ? 100.0 * (1.0 - b / a) : 0.0, lt_cache[i].pick + 1, lt_cache[i].candidates,
                lt_cache[i].no_ws ? "for no workspace" : lt_cache[i].in_place ? "K split in place" : "with the workspace");
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

void kcu_gemm_choices_clear(void) { lt_cached = 0; }

#define LT_FILE_MAGIC "atoll-gemm-choices 1"
#define LT_KEY_FIELDS 18

static void key_fields(const lt_key *k, long long f[LT_KEY_FIELDS])
{
    long long v[LT_KEY_FIELDS] = { k->ab, k->d, k->ta, k->tb, k->m, k->n, k->k, k->lda, k->ldb, k->ldd, k->ldaux,
                                   k->has_bias, k->has_aux, k->epi, k->align[0], k->align[1], k->align[2],
                                   k->align[3] };
    memcpy(f, v, sizeof v);
}

static lt_key key_from(const long long f[LT_KEY_FIELDS])
{
    lt_key k;
    memset(&k, 0, sizeof k);
    k.ab = (cudaDataType_t)f[0]; k.d = (cudaDataType_t)f[1]; k.ta = (int)f[2]; k.tb = (int)f[3];
    k.m = (int)f[4]; k.n = (int)f[5]; k.k = (int)f[6]; k.lda = (int)f[7]; k.ldb = (int)f[8]; k.ldd = (int)f[9];
    k.ldaux = (int)f[10]; k.has_bias = (int)f[11]; k.has_aux = (int)f[12]; k.epi = (cublasLtEpilogue_t)f[13];
    for (int i = 0; i < 4; i++) k.align[i] = (uint32_t)f[14 + i];
    return k;
}

extern "C" char *k_cuda_gemm_choices_text(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fprintf(f, "%s\ndevice %s\ncublaslt %zu\n", LT_FILE_MAGIC, k_cuda_status(), cublasLtGetVersion());
    fprintf(f, "# ab d ta tb m n k lda ldb ldd ldaux bias aux epilogue align(A B D aux) -: the algorithm's 8 words\n");
    for (int i = 0; i < lt_cached; i++) {
        if (!lt_cache[i].found) continue;
        long long v[LT_KEY_FIELDS];
        key_fields(&lt_cache[i].key, v);
        for (int j = 0; j < LT_KEY_FIELDS; j++) fprintf(f, "%lld ", v[j]);
        fprintf(f, "-");
        for (int j = 0; j < 8; j++) fprintf(f, " %llx", (unsigned long long)lt_cache[i].algo.data[j]);
        fprintf(f, "\n");
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

extern "C" int k_cuda_gemm_choices_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024], dev[512] = "";
    size_t ver = 0;
    int lineno = 0, rc = 0;
    /* the header: this format, and the device and library the algorithms were chosen on */
    if (!fgets(line, sizeof line, f) || strncmp(line, LT_FILE_MAGIC, strlen(LT_FILE_MAGIC)) != 0) {
        snprintf(err, errlen, "%s is not a GEMM choices file (its first line is not \"%s\")", path, LT_FILE_MAGIC);
        fclose(f);
        return -1;
    }
    lineno = 1;
    if (fgets(line, sizeof line, f) && !strncmp(line, "device ", 7)) {
        size_t n = strcspn(line + 7, "\n");
        if (n >= sizeof dev) n = sizeof dev - 1;
        memcpy(dev, line + 7, n);
        dev[n] = '\0';
        lineno++;
    }
    if (fgets(line, sizeof line, f) && sscanf(line, "cublaslt %zu", &ver) == 1) lineno++;
    if (lineno != 3) {
        snprintf(err, errlen, "%s line %d: expected \"device NAME\" then \"cublaslt VERSION\"", path, lineno + 1);
        fclose(f);
        return -1;
    }
    if (strcmp(dev, k_cuda_status()) != 0 || ver != cublasLtGetVersion()) {
        snprintf(err, errlen, "%s holds the choices made on %s with cuBLASLt %zu; this is %s with cuBLASLt %zu", path,
                 dev, ver, k_cuda_status(), cublasLtGetVersion());
        fclose(f);
        return 1;
    }
    /* every line read before any is used: a malformed file changes nothing */
    static struct {
        lt_key key;
        cublasLtMatmulAlgo_t algo;
    } got[LT_CACHE];
    int ngot = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        long long v[LT_KEY_FIELDS] = { 0 };
        unsigned long long a[8];
        int used = 0, n = 0;
        char *p = line;
        for (; n < LT_KEY_FIELDS && sscanf(p, "%lld%n", &v[n], &used) == 1; n++) p += used;
        if (n != LT_KEY_FIELDS || sscanf(p, " - %llx %llx %llx %llx %llx %llx %llx %llx", &a[0], &a[1], &a[2],
                                             &a[3], &a[4], &a[5], &a[6], &a[7]) != 8) {
            snprintf(err, errlen, "%s line %d: expected %d numbers, '-' and 8 hexadecimal words", path, lineno,
                     LT_KEY_FIELDS);
            rc = -1;
            break;
        }
        if (ngot == LT_CACHE) continue; /* more than fit: the rest are chosen anew */
        got[ngot].key = key_from(v);
        for (int j = 0; j < 8; j++) got[ngot].algo.data[j] = (uint64_t)a[j];
        ngot++;
    }
    fclose(f);
    for (int g = 0; rc == 0 && g < ngot; g++) {
        int slot = -1;
        for (int i = 0; i < lt_cached; i++)
            if (!memcmp(&lt_cache[i].key, &got[g].key, sizeof got[g].key)) slot = i;
        if (slot < 0 && lt_cached == LT_CACHE) break;
        if (slot < 0) slot = lt_cached++;
        lt_cache[slot].key = got[g].key;
        lt_cache[slot].found = 1;
        lt_cache[slot].how = LT_LOADED;
        lt_cache[slot].algo = got[g].algo;
    }
    return rc;
}
