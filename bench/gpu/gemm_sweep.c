/* gemm_sweep: would timing cuBLASLt's candidates beat its heuristic's first
 * choice on atoll's GEMMs? For every GEMM of a training micro-batch of GPT-2
 * 124M at N = 16384 tokens (16 x 1024, the throughput run's batch) and of the
 * ~1.5B model at 8 x 1024 (the big stage's micro-batch), set up exactly as
 * kernels/cuda/matmul.cu sets it up (operand order, transposes, epilogue, fp32
 * weight-gradient output with beta 1), this asks the heuristic for up to
 * GS_CANDIDATES algorithms and times each on random bf16 data: the
 * heuristic's first (what atoll runs by default) against the fastest. Printed
 * and written as a table, with the micro-batch's total over the layers and
 * the classifier: the most a time-based choice could save. The candidates
 * include those the heuristic offers when told there is no workspace, as
 * --tune-gemms times them: cuBLASLt queues a memset of its own before many of
 * the kernels it picks with one (~125 a GPT-2 step in the H200 profiles, 1.7
 * us each plus a launch gap); a kernel that needs none has no memset. And
 * those it offers when told to split K only in place: its first choices for
 * GPT-2's weight gradients add their K splits in a kernel of their own after
 * the GEMM (36 a step). The last two columns are those lists' firsts, and a
 * column says how the first choice splits K. Nothing here changes what atoll
 * runs.
 * Part of gpu_bench (bench/gpu/run.sh's bench stage). */
#include "gemm_sweep.h"
#include "cuda_check.h" /* cudaCheck, cublasCheck: the project's one macro per API */

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GS_CANDIDATES 16
#define GS_REPS 10

typedef struct {
    const char *name;
    int per_step; /* calls in one micro-batch: one per layer, 1 for the classifier */
    int ta, tb, m, n, k, lda, ldb, ldd;
    int wgrad; /* fp32 output, beta 1 */
    cublasLtEpilogue_t epi;
    int ldaux; /* GELU_AUX_BIAS writes, DGELU reads [n, ldaux] bf16 */
} gs_gemm;

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The L2 cache flush before each run timed cold (none when flush_bytes is 0): a memset of twice the L2,
 * outside the timed span. */
static void *flush;
static size_t flush_bytes;

/* Median ms of GS_REPS runs of algo (after two), or a negative value when it fails to run; each run
 * from an L2 without its operands when cold (see flush), else right after an untimed run of its own. */
static float time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                       cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo,
                       const void *A, const void *B, void *D, float beta, void *ws, size_t ws_bytes, cudaEvent_t e0,
                       cudaEvent_t e1, int cold)
{
    float alpha = 1.0f, t[GS_REPS];
    for (int r = -2; r < GS_REPS; r++) {
        /* something queued ahead of the timed run, as in a step (--tune-gemms does the same): the flush, or a run
         * of the same algorithm; otherwise the device, idle after the wait below, would count the time the host
         * takes to make the call */
        if (cold && flush_bytes) cudaMemsetAsync(flush, r & 0xff, flush_bytes, 0);
        else if (cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, algo, ws, ws_bytes, 0) !=
                 CUBLAS_STATUS_SUCCESS)
            return -1.0f;
        cudaEventRecord(e0, 0);
        if (cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, algo, ws, ws_bytes, 0) !=
            CUBLAS_STATUS_SUCCESS)
            return -1.0f;
        cudaEventRecord(e1, 0);
        if (cudaEventSynchronize(e1) != cudaSuccess) return -1.0f;
        if (r >= 0) cudaEventElapsedTime(&t[r], e0, e1);
    }
    qsort(t, GS_REPS, sizeof t[0], cmpf);
    return t[GS_REPS / 2];
}

/* How algo splits K, as text: "1", or the number of splits and how the parts are added; "?" where
 * the library does not say (NULL: "-"). */
static void algo_split(const cublasLtMatmulAlgo_t *algo, char *buf, size_t len)
{
    int32_t splits = 1;
    uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    size_t got = 0;
    if (!algo) {
        snprintf(buf, len, "-");
        return;
    }
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits, &got) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme,
                                             &got) != CUBLAS_STATUS_SUCCESS) {
        snprintf(buf, len, "?");
        return;
    }
    const char *how = scheme == CUBLASLT_REDUCTION_SCHEME_INPLACE         ? "in place"
                      : scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE  ? "compute type"
                      : scheme == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE   ? "output type"
                                                                          : "none";
    if (splits <= 1) snprintf(buf, len, "1");
    else snprintf(buf, len, "%d, %s", (int)splits, how);
}

/* n random bf16 in [-scale, scale) on the device: a block of distinct values
 * built on the host, repeated (a GEMM's speed does not see the repetition) */
static void *rand_bf16(size_t n, float scale, uint64_t *rng)
{
    size_t blk = n < ((size_t)1 << 24) ? n : ((size_t)1 << 24);
    uint16_t *h = malloc(blk * 2);
    void *d = NULL;
    if (!h) return NULL;
    for (size_t i = 0; i < blk; i++) {
        *rng ^= *rng << 13; *rng ^= *rng >> 7; *rng ^= *rng << 17;
        float f = ((float)((*rng >> 40) & 0xffffff) / 8388608.0f - 1.0f) * scale;
        union { float f; uint32_t u; } v = { f };
        h[i] = (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
    }
    if (cudaMalloc(&d, n * 2) != cudaSuccess) d = NULL;
    for (size_t at = 0; d && at < n; at += blk) {
        size_t len = n - at < blk ? n - at : blk;
        if (cudaMemcpy((uint16_t *)d + at, h, len * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
            cudaFree(d);
            d = NULL;
        }
    }
    free(h);
    return d;
}

/* One model's GEMMs: N tokens a micro-batch, hidden C, MLP width F, L layers. */
static int sweep_model(FILE *md, const char *model, int N, int C, int F, int L);

int gemm_sweep(FILE *md)
{
    /* GPT-2 124M at the throughput run's 16 x 1024; the ~1.5B model (48 x 1600) at its micro-batch of 8 x 1024 */
    if (sweep_model(md, "GPT-2 124M", 16384, 768, 4 * 768, 12)) return -1;
    return sweep_model(md, "~1.5B GPT (48 x 1600), one micro-batch", 8192, 1600, 4 * 1600, 48);
}

static int sweep_model(FILE *md, const char *model, int N, int C, int F, int L)
{
    const int V = 50304;
    /* matmul.cu's three set-ups: forward A = w (T), B = inp; dinp A = w, B = dout;
     * dw A = inp, B = dout (T), fp32 D += */
#define FWD(nm, IC, OC, epi, aux) { nm " forward", L, 1, 0, OC, N, IC, IC, IC, OC, 0, epi, aux }
#define DGRAD(nm, IC, OC, epi, aux) { nm " dinp", L, 0, 0, IC, N, OC, IC, OC, IC, 0, epi, aux }
#define WGRAD(nm, IC, OC) { nm " dw", L, 0, 1, IC, OC, N, IC, OC, IC, 1, CUBLASLT_EPILOGUE_DEFAULT, 0 }
    gs_gemm g[] = {
        FWD("qkv", C, 3 * C, CUBLASLT_EPILOGUE_BIAS, 0),
        FWD("attn proj", C, C, CUBLASLT_EPILOGUE_BIAS, 0),
        FWD("fc (GELU_AUX_BIAS)", C, F, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, F),
        FWD("mlp proj", F, C, CUBLASLT_EPILOGUE_BIAS, 0),
        DGRAD("qkv", C, 3 * C, CUBLASLT_EPILOGUE_DEFAULT, 0),
        DGRAD("attn proj", C, C, CUBLASLT_EPILOGUE_DEFAULT, 0),
        DGRAD("fc", C, F, CUBLASLT_EPILOGUE_DEFAULT, 0),
        DGRAD("mlp proj (DGELU)", F, C, CUBLASLT_EPILOGUE_DGELU, F),
        WGRAD("qkv", C, 3 * C),
        WGRAD("attn proj", C, C),
        WGRAD("fc", C, F),
        WGRAD("mlp proj", F, C),
        { "classifier forward", 1, 1, 0, V, N, C, C, C, V, 0, CUBLASLT_EPILOGUE_DEFAULT, 0 },
        { "classifier dinp", 1, 0, 0, C, N, V, C, V, C, 0, CUBLASLT_EPILOGUE_DEFAULT, 0 },
        { "classifier dw", 1, 0, 1, C, V, N, C, V, C, 1, CUBLASLT_EPILOGUE_DEFAULT, 0 },
        /* what the GELU epilogues cost, and what else could run there: not in a step (0 a micro-batch), not
         * in the totals. The plain forms, against the two epilogue rows above, say what a GELU (or DGELU)
         * kernel of our own would have to beat; DGELU_BGRAD also writes the fc bias gradient (fp32), which
         * kcu_colsum_acc now sums in its own pass (~24 us at GPT-2, 12 a step) */
        { "fc forward, BIAS alone (what-if)", 0, 1, 0, F, N, C, C, C, F, 0, CUBLASLT_EPILOGUE_BIAS, 0 },
        { "mlp proj dinp, no DGELU (what-if)", 0, 0, 0, F, N, C, F, C, F, 0, CUBLASLT_EPILOGUE_DEFAULT, 0 },
        { "mlp proj dinp, DGELU_BGRAD (what-if)", 0, 0, 0, F, N, C, F, C, F, 0, CUBLASLT_EPILOGUE_DGELU_BGRAD, F },
    };
#undef FWD
#undef DGRAD
#undef WGRAD
    int ng = (int)(sizeof g / sizeof g[0]);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    size_t big = (size_t)N * V; /* the largest operand or output, in elements */
    void *A = rand_bf16(big, 1.0f, &rng), *B = rand_bf16(big, 0.05f, &rng), *bias = rand_bf16(V, 1.0f, &rng);
    void *aux = rand_bf16((size_t)N * F, 1.0f, &rng), *D = NULL, *ws = NULL, *dbias = NULL;
    size_t ws_bytes = (size_t)32 << 20; /* matmul.cu's workspace (kcu_workspace) */
    cublasLtHandle_t lt = NULL;
    cudaEvent_t e0, e1;
    if (!A || !B || !bias || !aux) {
        fprintf(stderr, "gemm_sweep: out of device memory\n");
        return -1;
    }
    cudaCheck(cudaMalloc(&D, big * 4));
    cudaCheck(cudaMemset(D, 0, big * 4));
    cudaCheck(cudaMalloc(&ws, ws_bytes));
    cudaCheck(cudaMalloc(&dbias, (size_t)F * 4)); /* DGELU_BGRAD's bias gradient, fp32 */
    int l2 = 0;
    cudaCheck(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    flush_bytes = 2 * (size_t)l2;
    if (flush_bytes && cudaMalloc(&flush, flush_bytes) != cudaSuccess) {
        fprintf(stderr, "gemm_sweep: out of device memory for the L2 flush\n");
        return -1;
    }
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    cublasCheck(cublasLtCreate(&lt));

    printf("\ncuBLASLt candidates at %s, N=%d tokens (heuristic's first vs the fastest of up to %d with the "
           "workspace, %d for K split in place and %d for none)\n", model, N, GS_CANDIDATES, GS_CANDIDATES,
           GS_CANDIDATES);
    fprintf(md, "\n### cuBLASLt's candidates for atoll's GEMMs (%s, N = %d tokens, bf16, random data)\n\n"
                "Each GEMM as kernels/cuda/matmul.cu sets it up; the heuristic's first algorithm (what atoll runs "
                "by default) against the fastest of up to %d it offers with the 32 MiB workspace and as many "
                "each when told to split K only in place and that there is no workspace (as `--tune-gemms` times "
                "them; #iK and #nK are the K-th new one of those lists), median of %d runs each.\n\n"
                "Each is timed run after run, as `--tune-gemms` times them, with up to the whole L2 cache still "
                "holding its operands; the column \"cold\" times the heuristic's first from an L2 (%d MiB) without "
                "them (a memset of twice its size before each run), as a step's GEMMs meet their weights.\n\n"
                "\"K splits\": how the heuristic's first splits K and adds the parts (\"1\": not split; \"in "
                "place\": the splits add into the output in turn; \"compute type\" or \"output type\": a "
                "reduction kernel of cuBLASLt's after the GEMM, `splitKreduce_kernel`). The last two columns: the "
                "heuristic's first when told to split K only in place (#iK among the candidates) and when told "
                "there is no workspace (#nK); \"-1\" where it offers none.\n\n"
                "| GEMM | m x n x k | per micro-batch | candidates | first ms | first ms, cold | K splits "
                "| fastest ms (#) | TFLOP/s first / fastest | first, split in place ms | first, no workspace ms |\n"
                "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n", model, N, GS_CANDIDATES, GS_REPS,
                l2 >> 20);
    double step_first = 0, step_best = 0, step_nows = 0, step_cold = 0, step_inpl = 0;
    for (int i = 0; i < ng; i++) {
        const gs_gemm *c = &g[i];
        cublasOperation_t ta = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        cudaDataType_t dt = c->wgrad ? CUDA_R_32F : CUDA_R_16BF;
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi));
        if (c->epi == CUBLASLT_EPILOGUE_BIAS || c->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
            cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        int refused = 0; /* a what-if this cuBLASLt does not take: its row says so (no algorithms) */
        if (c->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
            cudaDataType_t bt = CUDA_R_32F;
            refused = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias) !=
                          CUBLAS_STATUS_SUCCESS ||
                      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) !=
                          CUBLAS_STATUS_SUCCESS;
        }
        if (c->ldaux) {
            int64_t ldaux = c->ldaux;
            cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
            cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux));
        }
        cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, c->ta ? c->k : c->m, c->ta ? c->m : c->k, c->lda));
        cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, c->tb ? c->n : c->k, c->tb ? c->k : c->n, c->ldb));
        cublasCheck(cublasLtMatrixLayoutCreate(&ld, dt, c->m, c->n, c->ldd));
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                   sizeof ws_bytes));
        /* the candidates: the heuristic's answers with the workspace, then (each algorithm once, as
         * --tune-gemms times them: matmul.cu) those for K split only in place and those for no workspace,
         * the workspace still passed; h[0..found) the first list, h[found..found_i) the second */
        cublasLtMatmulHeuristicResult_t h[3 * GS_CANDIDATES];
        float t[3 * GS_CANDIDATES], first = -1, best = -1, inpl = -1, nows = -1;
        int found = 0, found_i = 0, ncand = 0, best_i = -1;
        float beta = c->wgrad ? 1.0f : 0.0f;
        uint32_t in_place = CUBLASLT_REDUCTION_SCHEME_INPLACE, any = CUBLASLT_REDUCTION_SCHEME_MASK;
        size_t none = 0;
        for (int list = 0; list < 3 && !refused; list++) {
            if (list == 1)
                cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                 &in_place, sizeof in_place));
            if (list == 2) {
                cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &any,
                                                                 sizeof any));
                cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                 &none, sizeof none));
            }
            cublasLtMatmulHeuristicResult_t h0[GS_CANDIDATES];
            int got = 0;
            if (cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, GS_CANDIDATES, h0, &got) !=
                CUBLAS_STATUS_SUCCESS)
                got = 0;
            for (int j = 0; j < got; j++) {
                int seen = -1;
                for (int q = 0; q < ncand && seen < 0; q++)
                    if (!memcmp(&h[q].algo, &h0[j].algo, sizeof h0[j].algo)) seen = q;
                float ms = seen >= 0 ? t[seen]
                                     : time_algo(lt, op, la, lb, ld, &h0[j].algo, A, B, D, beta, ws, ws_bytes, e0, e1, 0);
                if (j == 0) *(list == 0 ? &first : list == 1 ? &inpl : &nows) = ms;
                if (seen >= 0) continue;
                h[ncand] = h0[j], t[ncand] = ms;
                if (ms > 0 && (best < 0 || ms < best)) best = ms, best_i = ncand;
                ncand++;
            }
            if (list == 0) found = ncand;
            if (list == 1) found_i = ncand;
        }
        float cold = found ? time_algo(lt, op, la, lb, ld, &h[0].algo, A, B, D, beta, ws, ws_bytes, e0, e1, 1) : -1;
        char split[32]; /* how the first choice splits K */
        algo_split(found ? &h[0].algo : NULL, split, sizeof split);
        cudaCheck(cudaGetLastError());
        double fl = 2.0 * c->m * (double)c->n * c->k;
        /* the fastest: #K among those offered with the workspace, #iK among those for K split in place, #nK
         * among those for none (K counts the list's own new ones) */
        char which[16];
        snprintf(which, sizeof which, "%s%d", best_i >= found_i ? "n" : best_i >= found ? "i" : "",
                 best_i - (best_i >= found_i ? found_i : best_i >= found ? found : 0));
        printf("%-34s %6d x %6d x %6d  %2d candidates  first %8.3f ms (cold %8.3f; K splits %s)  fastest %8.3f ms "
               "(#%s)  split in place %8.3f ms  no workspace %8.3f ms  x%d\n", c->name, c->m, c->n, c->k, ncand, first,
               cold, split, best, which, inpl, nows, c->per_step);
        fprintf(md, "| %s | %d x %d x %d | %d | %d | %.3f | %.3f | %s | %.3f (#%s) | %.0f / %.0f | %.3f | %.3f |\n",
                c->name, c->m, c->n, c->k, c->per_step, ncand, first, cold, split, best, which,
                first > 0 ? fl / first / 1e9 : 0, best > 0 ? fl / best / 1e9 : 0, inpl, nows);
        if (first > 0 && best > 0) step_first += c->per_step * first, step_best += c->per_step * best;
        step_nows += c->per_step * (nows > 0 ? nows : first); /* none found: the GEMM keeps its workspace */
        step_inpl += c->per_step * (inpl > 0 ? inpl : first);
        step_cold += c->per_step * (cold > 0 ? cold : 0);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulDescDestroy(op);
    }
    printf("%s, a micro-batch's GEMMs: %.2f ms with the heuristic's first choices, %.2f ms with the fastest "
           "(%.1f%% less)\n", model, step_first, step_best, step_first > 0 ? 100.0 * (1 - step_best / step_first) : 0);
    printf("%s, a micro-batch's GEMMs with the first choices for K split in place: %.2f ms; for no workspace: "
           "%.2f ms; the first choices from a cold L2: %.2f ms\n", model, step_inpl, step_nows, step_cold);
    fprintf(md, "\nA micro-batch's GEMMs (%d layers and the classifier): %.2f ms with the heuristic's first choices, "
                "%.2f ms with the fastest candidates (%.1f%% less), %.2f ms with its first choices for K split in "
                "place, %.2f ms with its first choices for no workspace, %.2f ms with the first choices from a cold "
                "L2.\n", L, step_first, step_best, step_first > 0 ? 100.0 * (1 - step_best / step_first) : 0,
            step_inpl, step_nows, step_cold);
    cublasLtDestroy(lt);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(A); cudaFree(B); cudaFree(bias); cudaFree(aux); cudaFree(D); cudaFree(ws); cudaFree(dbias);
    if (flush) cudaFree(flush);
    flush = NULL;
    return 0;
}
