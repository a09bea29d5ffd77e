/* kernels: every op the engine runs, forward and backward, behind one table.
 *
 * A backend fills a `k_ops` table; the engine calls only through it, so one
 * atoll-train binary can hold the CPU reference (`k_cpu()`, kernels/cpu/, fp32,
 * GEMMs through CBLAS) and the CUDA backend (`k_cuda()`, kernels/cuda/,
 * device pointers, cuBLAS) side by side and pick one with --device.
 *
 * Conventions (every backend):
 * - Tensors are plain row-major float arrays in the backend's memory (host memory
 *   for cpu, device memory for cuda), plus their sizes. Token ids are int32.
 *   Shapes are written [rows, cols] with names: N = rows (B*T tokens), C = input
 *   features, OC = output features, B = micro-batch, T = sequence length,
 *   NH = attention heads held by this rank, HD = head dim, V = vocab entries held
 *   by this rank (a tensor-parallel slice of the full vocab).
 * - Linear weights are [OC, C] (torch.nn.Linear / Megatron layout): y = x W^T + b.
 * - Weight gradients (dw, dbias, dwte, dwpe, layernorm dw/db) ACCUMULATE (+=) so
 *   micro-batches add up; each function states what it does to input gradients.
 * - Scalars (lr, scales) are host values (but the clip scale sumsq_begin leaves on
 *   the device). Only `sumsq`, `nonzeros` and `sumsq_end` return a value to the host.
 * - Calls on one table are ordered; a backend may run them asynchronously as long
 *   as to_host/sumsq/sync see all earlier work finished; to_device and
 *   to_host_later need not wait for it.
 * - The bf16 variant (activations and weights in bf16, fp32 accumulation and fp32
 *   master weights for AdamW) is the extra `*_bf16` entries taking uint16_t
 *   pointers; the fp32 entries stay the reference every backend has.
 *
 * Tensor parallelism reuses these ops unchanged: column-parallel GEMMs run with
 * OC/tp outputs, row-parallel ones with C/tp inputs (the engine all-reduces their
 * outputs), and the cross-entropy is split into partial reductions over the local
 * vocab slice (see xent_* below) that the engine all-reduces between calls.
 *
 * Ownership: tables are static and never freed; memory from `alloc` is freed with
 * the same table's `free`.
 */
#ifndef ATOLL_KERNELS_H
#define ATOLL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "k_rope.h"

/* Dropout by counter-based masks (k_dropout.h): whether element `id` of a
 * site is kept is a pure function of (key, id), so every rank and backend
 * draws the same mask for the same logical element whatever the layout, and a
 * backward pass redraws the forward's mask instead of storing it. Kept
 * elements are scaled by 1/(1-p). A NULL k_dropout (or p == 0) is no dropout.
 * - hidden (the `dropout` entries): element (n, c) of an [N, C] tensor has
 *   id (row0 + n) * C + c: row0 is the global token row of row 0 (global
 *   sample * T + position), C the full hidden size.
 * - attention probabilities: element (b, h, i, j) is id i * T + j under the
 *   key k_dropout_row_key(key, row0 + b, head0 + h): row0 is the global sample
 *   of batch row 0, head0 the global index of the first local head. */
typedef struct k_dropout {
    float p;        /* drop probability, 0 <= p < 1 */
    uint64_t key;   /* the site's key (the engine mixes seed, iteration, layer, site) */
    int64_t row0;
    int head0;
} k_dropout;

typedef struct k_ops {
    const char *name; /* "cpu", "cuda" */

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes);                   /* zero-filled; NULL when out of memory */
    void (*free)(void *p);
    void (*to_device)(void *dst, const void *host_src, size_t bytes);
    void (*to_host)(void *host_dst, const void *src, size_t bytes);
    /* to_host without waiting: host_dst holds the bytes once the next call
     * that waits for earlier work (to_host, sumsq, nonzeros, sync) returns,
     * and must stay valid till then. A backend may copy at once. */
    void (*to_host_later)(void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes); /* within the backend */
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void);

    /* ---- embeddings ----
     * out[N,C] = wte[tokens[n] - vocab_offset] for tokens inside this rank's slice
     * [vocab_offset, vocab_offset+V); rows of other tokens are zero (the engine sums
     * the TP slices with an all-reduce). wte is [V, C]. Overwrites out. */
    void (*embedding_forward)(float *out, const int32_t *tokens, const float *wte,
                              int N, int C, int vocab_offset, int V);
    /* dwte[V,C] += dout rows of the tokens inside the slice. */
    void (*embedding_backward)(float *dwte, const float *dout, const int32_t *tokens,
                               int N, int C, int vocab_offset, int V);
    /* out[B,T,C] += wpe[p] with p = pos[b*T+t] when pos (backend memory, [B,T]) is
     * given, else p = t (wpe is [>= max p + 1, C]). */
    void (*position_forward)(float *out, const float *wpe, const int32_t *pos, int B, int T, int C);
    /* dwpe[t] += sum over b of dout[b,t]. With positions (pos above) the backward
     * is embedding_backward's, pos taking the tokens' place. */
    void (*position_backward)(float *dwpe, const float *dout, int B, int T, int C);

    /* ---- LayerNorm (biased variance) ----
     * out[N,C] = (inp - mean) * rstd * w + b, rstd = 1/sqrt(var + eps) (eps is
     * --norm-epsilon, Megatron's default 1e-5); saves mean[N], rstd[N] for
     * backward, which needs no eps. Every norm forward below takes eps last. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C, float eps);
    /* dinp[N,C] += d/dinp (accumulates: the input is the residual stream, which also
     * receives the skip connection's gradient); dw[C], db[C] accumulate. dsum (NULL:
     * none) [C] += the column sums of dinp after the update, as stored: the bias
     * gradient of the linear layer whose output gradient dinp then is, taken in
     * the pass that writes it (fp32 on the CPU: the bits of matmul_backward's). */
    void (*layernorm_backward)(float *dinp, float *dw, float *db, float *dsum, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);

    /* ---- linear ----
     * out[N,OC] = inp[N,C] w[OC,C]^T + bias[OC] (bias may be NULL). Overwrites out. */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int N, int C, int OC);
    /* dinp[N,C] = dout w (OVERWRITES; dinp may be NULL to skip it);
     * dw[OC,C] += dout^T inp; dbias[OC] += column sums of dout (dbias may be NULL).
     * A backend with wgrad_join may compute dw beside the calls that follow (the
     * cuda backend with k_cuda_overlap_wgrad on), up to the next matmul_backward*
     * call, wgrad_join, or a call that waits for earlier work: until then the
     * caller changes neither dout nor inp and reads or writes no dw. The same for
     * the *_bf16 and gelu entries. */
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC);
    /* Optional (NULL: every call in order): the dw of the last matmul_backward*
     * is complete for the calls after this one, and its dout and inp free. */
    void (*wgrad_join)(void);

    /* ---- causal self-attention, grouped-query ----
     * NH query heads share NG key/value groups (NH % NG == 0; NG == NH is
     * multi-head attention), Q = NH/NG heads per group, head h in group h/Q.
     * qkv is [B, T, NG, Q + 2, HD] (Megatron's query_key_value layout): per
     * group its Q query vectors, then its key, then its value. With NG == NH
     * that is [B, T, NH, 3, HD], the row order of GPT-2's c_attn (engine/README.md).
     * out[B, T, NH*HD] = dropout(softmax(q k^T / sqrt(HD), causal)) v, head-major
     * columns. att[B, NH, T, T] saves the probabilities before dropout (zero
     * above the diagonal). `drop` may be NULL.
     * Documents: with `doc` ([B, T] in backend memory; NULL: one document per
     * sample) query t of sample b attends keys doc[b*T+t] .. t only, the ones of
     * its own document (Megatron's --reset-attention-mask). doc[b*T+t] <= t, and
     * it never decreases along t (documents are runs of positions). */
    void (*attention_forward)(float *out, float *att, const float *qkv, const int32_t *doc,
                              int B, int T, int NH, int NG, int HD, const k_dropout *drop);
    /* dqkv[B, T, NG, Q+2, HD] = gradient (OVERWRITES; a key or value gradient sums
     * the group's heads). scratch is [B, NH, T, T] workspace. Documents need no
     * argument here: att is zero wherever the forward masked. */
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout,
                               const float *qkv, const float *att, int B, int T, int NH, int NG, int HD,
                               const k_dropout *drop);
    /* One query row against the rows before it: a decode step of `atoll
     * generate`, the earlier rows' keys and values kept (a key/value cache).
     * qkv holds n rows of one sample laid out as above; row n-1's queries
     * attend its keys k0 .. n-1 (k0: the first position of its document, 0
     * without documents) and out[NH*HD] = softmax(q k^T / sqrt(HD)) v: row n-1
     * of attention_forward's out, without dropout. NULL where a backend has
     * none (generate then reruns the context's forward pass each step). */
    void (*attention_decode)(float *out, const float *qkv, int n, int k0, int NH, int NG, int HD);

    /* ---- elementwise ----
     * GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    /* dinp = gelu'(inp) * dout (OVERWRITES; dinp may alias dout). */
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    /* out = a + b (out may alias a or b). The backward of a residual add is the
     * identity on both inputs, so it has no kernel of its own; see add_inplace. */
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    /* acc += x. */
    void (*add_inplace)(float *acc, const float *x, size_t n);
    /* x *= s. */
    void (*scale)(float *x, float s, size_t n);

    /* ---- softmax cross-entropy as partial reductions over a vocab slice ----
     * logits[N,V] hold columns [vocab_offset, vocab_offset+V) of the full vocab.
     * Single rank: vocab_offset 0, V = full vocab, and the all-reduces are identity.
     *   1. xent_max: rowmax[N] = max over the local slice.     -> all-reduce MAX
     *   2. xent_sumexp_target with the GLOBAL rowmax:
     *      sumexp[N] = sum_j exp(logit_j - rowmax), target_logit[N] = the target's
     *      logit when the target is in this slice, else 0.     -> all-reduce SUM (both)
     *   3. xent_loss: loss[n] = log(sumexp) + rowmax - target_logit (global values).
     *   4. xent_backward: dlogits = dloss * (softmax - onehot(target)) on the slice,
     *      using the global rowmax and sumexp. OVERWRITES; may alias logits.
     * Targets < 0 are ignored (loss 0, gradient 0). */
    void (*xent_max)(float *rowmax, const float *logits, int N, int V);
    void (*xent_sumexp_target)(float *sumexp, float *target_logit, const float *logits,
                               const float *rowmax, const int32_t *targets,
                               int N, int V, int vocab_offset);
    void (*xent_loss)(float *loss, const float *rowmax, const float *sumexp,
                      const float *target_logit, const int32_t *targets, int N);
    void (*xent_backward)(float *dlogits, const float *logits, const float *rowmax,
                          const float *sumexp, const int32_t *targets, float dloss,
                          int N, int V, int vocab_offset);

    /* ---- optimizer ----
     * Sum of squares of x[n], accumulated in double, returned to the host
     * (global-norm clipping sums these over tensors and ranks). */
    double (*sumsq)(const float *x, size_t n);
    /* How many of x[n] are not exactly 0 (NaN counts), returned to the host
     * (Megatron's --log-num-zeros-in-grad counts the gradient's zeros). */
    uint64_t (*nonzeros)(const float *x, size_t n);
    /* Fused AdamW with decoupled weight decay (Loshchilov & Hutter), step t >= 1:
     *   g = grad * grad_scale            (grad_scale carries clipping / loss scaling)
     *   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
     *   param -= lr * ( (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps) + wd * param )
     * param, m and v are fp32 (master weights when the model runs in bf16). */
    void (*adamw)(float *param, const float *grad, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float wd,
                  float grad_scale, int t);

    /* ---- bf16 extension (mixed precision) ----
     * Added after the fp32 entries so existing tables and initialisers stay valid;
     * a backend without bf16 leaves them NULL, so callers test one entry before
     * choosing the bf16 path. The CPU reference has them (kernels/cpu/bf16.c:
     * widen, run the fp32 op, round), so the bf16 path runs anywhere. bf16 values travel as uint16_t bit patterns (the top
     * 16 bits of an fp32, round-to-nearest-even). Activations, weights and
     * activation gradients are bf16; arithmetic and every reduction are fp32;
     * statistics (mean, rstd, xent partials), weight gradients (dw, dbias, dwte,
     * dwpe, layernorm dw/db: fp32 so micro-batches accumulate without bf16
     * rounding) and optimizer state stay fp32. Shapes and the overwrite /
     * accumulate rule of each entry are those of the fp32 entry of the same name,
     * except attention (below), which keeps no [T, T] matrix. */
    void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
    void (*from_bf16)(float *dst, const uint16_t *src, size_t n);
    void (*embedding_forward_bf16)(uint16_t *out, const int32_t *tokens, const uint16_t *wte,
                                   int N, int C, int vocab_offset, int V);
    void (*embedding_backward_bf16)(float *dwte, const uint16_t *dout, const int32_t *tokens,
                                    int N, int C, int vocab_offset, int V);
    void (*position_forward_bf16)(uint16_t *out, const uint16_t *wpe, const int32_t *pos, int B, int T, int C);
    void (*position_backward_bf16)(float *dwpe, const uint16_t *dout, int B, int T, int C);
    void (*layernorm_forward_bf16)(uint16_t *out, float *mean, float *rstd, const uint16_t *inp,
                                   const uint16_t *w, const uint16_t *b, int N, int C, float eps);
    void (*layernorm_backward_bf16)(uint16_t *dinp, float *dw, float *db, float *dsum, const uint16_t *dout,
                                    const uint16_t *inp, const uint16_t *w, const float *mean,
                                    const float *rstd, int N, int C);
    /* out = inp w^T + bias. With pre_gelu non-NULL (the MLP up-projection):
     * pre_gelu = inp w^T + bias and out = gelu(pre_gelu), fused where the GEMM
     * library allows; gelu_backward_bf16(d, pre_gelu, d, n) is its backward. */
    void (*matmul_forward_bf16)(uint16_t *out, uint16_t *pre_gelu, const uint16_t *inp,
                                const uint16_t *w, const uint16_t *bias, int N, int C, int OC);
    void (*matmul_backward_bf16)(uint16_t *dinp, float *dw, float *dbias, const uint16_t *dout,
                                 const uint16_t *inp, const uint16_t *w, int N, int C, int OC);
    void (*gelu_forward_bf16)(uint16_t *out, const uint16_t *inp, size_t n);
    void (*gelu_backward_bf16)(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout,
                               size_t n);
    void (*residual_forward_bf16)(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n);
    void (*add_inplace_bf16)(uint16_t *acc, const uint16_t *x, size_t n);
    void (*xent_max_bf16)(float *rowmax, const uint16_t *logits, int N, int V);
    void (*xent_sumexp_target_bf16)(float *sumexp, float *target_logit, const uint16_t *logits,
                                    const float *rowmax, const int32_t *targets,
                                    int N, int V, int vocab_offset);
    void (*xent_backward_bf16)(uint16_t *dlogits, const uint16_t *logits, const float *rowmax,
                               const float *sumexp, const int32_t *targets, float dloss,
                               int N, int V, int vocab_offset);
    /* Causal attention that never stores the [B, NH, T, T] probabilities
     * (flash-style): the forward saves lse[B, NH, T] = log sum_j exp(score_tj)
     * (fp32, scores already scaled by 1/sqrt(HD)) and the backward recomputes the
     * probabilities from it, using the forward's out. qkv/out/dout/dqkv layouts
     * are the fp32 entries'; dqkv is OVERWRITTEN. HD must be 64 or 128. `doc`
     * as in attention_forward, the same array for a forward and its backward. */
    void (*attention_forward_bf16)(uint16_t *out, float *lse, const uint16_t *qkv, const int32_t *doc,
                                   int B, int T, int NH, int NG, int HD, const k_dropout *drop);
    void (*attention_backward_bf16)(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv,
                                    const uint16_t *out, const float *lse, const int32_t *doc,
                                    int B, int T, int NH, int NG, int HD, const k_dropout *drop);
    /* attention_decode on bf16 rows, the scores, softmax and sum in fp32 */
    void (*attention_decode_bf16)(uint16_t *out, const uint16_t *qkv, int n, int k0, int NH, int NG, int HD);
    /* AdamW on the fp32 master weights (same update as adamw), then
     * param_bf16 = round(master): the copy the bf16 model runs on. */
    void (*adamw_bf16)(float *master, uint16_t *param_bf16, const float *grad, float *m,
                       float *v, size_t n, float lr, float beta1, float beta2, float eps,
                       float wd, float grad_scale, int t);

    /* ---- the classifier fused, for a rank holding the whole vocab ----
     * Per row n of logits[N, V]: loss[n] = log sum_j exp(logit_j) - logit_target
     * (0 when the target is < 0), and when dloss != 0 the logits are OVERWRITTEN
     * by dloss * (softmax - onehot(target)) (0 for targets < 0). The same values
     * as xent_max, xent_sumexp_target, xent_loss and xent_backward with
     * vocab_offset 0, with one read of the logits and one write. */
    void (*xent_fused)(float *loss, float *logits, const int32_t *targets, float dloss, int N, int V);
    void (*xent_fused_bf16)(float *loss, uint16_t *logits, const int32_t *targets, float dloss,
                            int N, int V);

    /* ---- the MLP's down-projection backward through the GELU, in one GEMM ----
     * dpre[N,C] = gelu'(pre_gelu) * (dout w) (OVERWRITES: the gradient of the
     * up-projection's output, i.e. matmul_backward_bf16's dinp followed by
     * gelu_backward_bf16, rounded once), dw += dout^T inp, dbias += column sums
     * of dout. pre_gelu is [N, C], as matmul_forward_bf16 kept it. */
    void (*matmul_backward_gelu_bf16)(uint16_t *dpre, float *dw, float *dbias, const uint16_t *dout,
                                      const uint16_t *inp, const uint16_t *w, const uint16_t *pre_gelu,
                                      int N, int C, int OC);

    /* ---- the residual add and the LayerNorm after it, in one pass ----
     * res = a + b (rounded to bf16, as residual_forward_bf16), then
     * out/mean/rstd = layernorm_forward_bf16 of res: the same bits as those two
     * calls, with res read back from registers instead of memory. res may alias
     * a or b. */
    void (*residual_layernorm_forward_bf16)(uint16_t *res, uint16_t *out, float *mean, float *rstd,
                                            const uint16_t *a, const uint16_t *b, const uint16_t *w,
                                            const uint16_t *bias, int N, int C, float eps);

    /* ---- AdamW over a whole flat buffer in one call ----
     * Elements [0, n) in nseg segments: segment s covers [seg_end[s-1], seg_end[s])
     * (seg_end[-1] = 0, seg_end[nseg-1] = n, host arrays) with weight decay
     * seg_wd[s]; otherwise the update of adamw, and with param_bf16 non-NULL of
     * adamw_bf16. nseg <= K_ADAMW_MAX_SEGS. One launch where a call per tensor
     * would be hundreds of small ones. */
    void (*adamw_segments)(float *master, uint16_t *param_bf16, const float *grad, float *m, float *v,
                           size_t n, int nseg, const size_t *seg_end, const float *seg_wd, float lr,
                           float beta1, float beta2, float eps, float grad_scale, int t);

    /* ---- the LLaMA family's ops (each with its bf16 entry, same shapes) ----
     * RMSNorm: out[N,C] = inp * rstd * w, rstd[n] = 1/sqrt(mean(inp^2) + eps)
     * saved for backward. */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
    /* dinp += d/dinp (ACCUMULATES, as layernorm_backward); dw accumulates. */
    void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                             const float *rstd, int N, int C);
    void (*rmsnorm_forward_bf16)(uint16_t *out, float *rstd, const uint16_t *inp, const uint16_t *w, int N, int C,
                                 float eps);
    void (*rmsnorm_backward_bf16)(uint16_t *dinp, float *dw, const uint16_t *dout, const uint16_t *inp,
                                  const uint16_t *w, const float *rstd, int N, int C);
    /* SwiGLU: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)). */
    void (*swiglu_forward)(float *out, const float *gate, const float *up, size_t n);
    /* dgate = dout * up * silu'(gate), dup = dout * silu(gate) (OVERWRITE; may alias
     * gate / up, not dout). */
    void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                            size_t n);
    void (*swiglu_forward_bf16)(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n);
    void (*swiglu_backward_bf16)(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                                 const uint16_t *up, size_t n);
    /* Rotary position embedding, in place on the queries and keys of a qkv
     * buffer laid out as attention's ([B, T, NG, Q+2, HD]; values untouched),
     * over the first RD dims of each head (RD even, <= HD; the rest pass
     * through: Megatron's --rotary-percent RD/HD). Position t of each sequence
     * (0..T-1) turns the pair (x_i, x_{i+RD/2}), i < RD/2, by the angle
     * (t / f.interp) * f.base^(-2i/RD) (k_rope_angle: with a LLaMA-3.x
     * f.scale other than 1 the long wavelengths are stretched by it):
     * y_i = x_i cos - x_{i+RD/2} sin,
     * y_{i+RD/2} = x_{i+RD/2} cos + x_i sin (the "rotate half" convention of
     * Megatron's and Hugging Face's LLaMA). rope_backward turns the gradient
     * back (the transpose: the angle negated), in place. */
    void (*rope_forward)(float *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f);
    void (*rope_backward)(float *dqkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f);
    void (*rope_forward_bf16)(uint16_t *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f);
    void (*rope_backward_bf16)(uint16_t *dqkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f);
    /* Separate projections into attention's layout and back: q[N, NH*HD],
     * k[N, NG*HD], v[N, NG*HD] <-> qkv[N, NG, Q+2, HD] (both OVERWRITE). */
    void (*qkv_pack)(float *qkv, const float *q, const float *k, const float *v, int N, int NH, int NG, int HD);
    void (*qkv_unpack)(float *q, float *k, float *v, const float *qkv, int N, int NH, int NG, int HD);
    void (*qkv_pack_bf16)(uint16_t *qkv, const uint16_t *q, const uint16_t *k, const uint16_t *v, int N, int NH,
                          int NG, int HD);
    void (*qkv_unpack_bf16)(uint16_t *q, uint16_t *k, uint16_t *v, const uint16_t *qkv, int N, int NH, int NG,
                            int HD);
    /* Hidden dropout, in place on x[N, C] (see k_dropout): forward on the
     * activations, and the same call on their gradient in backward. */
    void (*dropout)(float *x, int N, int C, const k_dropout *d);
    void (*dropout_bf16)(uint16_t *x, int N, int C, const k_dropout *d);

    /* ---- the residual add and the RMSNorm after it, in one pass ----
     * res = a + b (rounded to bf16, as residual_forward_bf16), then out/rstd =
     * rmsnorm_forward_bf16 of res: the same bits as those two calls (the
     * LLaMA family's residual_layernorm_forward_bf16). res may alias a or b. */
    void (*residual_rmsnorm_forward_bf16)(uint16_t *res, uint16_t *out, float *rstd, const uint16_t *a,
                                          const uint16_t *b, const uint16_t *w, int N, int C, float eps);

    /* ---- squared ReLU, the MLP activation of --squared-relu ----
     * out = max(inp, 0)^2; dinp = 2 max(inp, 0) * dout (OVERWRITES; dinp may
     * alias dout). The bf16 entries compute in fp32 and round once. */
    void (*relu2_forward)(float *out, const float *inp, size_t n);
    void (*relu2_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    void (*relu2_forward_bf16)(uint16_t *out, const uint16_t *inp, size_t n);
    void (*relu2_backward_bf16)(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n);

    /* ---- the gradient's norm and its clipping with no host wait between them ----
     * Optional (NULL: the engine reads sumsq and passes the clip scale itself).
     * sumsq_begin queues sumsq's sum of x[n] (the same order: the same bits) and
     * Megatron's clip scale from it, min(1, clip / (sqrt(sum) + 1e-6)) computed
     * in double as eng_clip_scale does (1 when clip <= 0), kept on the device,
     * where each adamw_segments called with grad_scale K_GRAD_SCALE_FROM_NORM
     * takes it. sumsq_end waits for that sum alone (and for the to_host_later
     * reads queued before it), not for the work queued after it, and returns
     * it. A sumsq_begin is followed by its sumsq_end before the next. */
    void (*sumsq_begin)(const float *x, size_t n, double clip);
    double (*sumsq_end)(void);
} k_ops;

#define K_ADAMW_MAX_SEGS 4096
/* adamw_segments' grad_scale: the clip scale of the last sumsq_begin (a backend that has it) */
#define K_GRAD_SCALE_FROM_NORM (-1.0f)

/* The CPU reference backend (always built). */
const k_ops *k_cpu(void);
/* The CPU backend's BLAS threads in this process: n (> 0) unless the user set
 * OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, whose word stands. Returns the count
 * in effect (n = 0 only asks). */
int k_cpu_blas_threads(int n);

/* The CUDA backend, defined by kernels/cuda/ when it is built (ATOLL_HAVE_CUDA_KERNELS);
 * returns NULL when no device is usable. */
const k_ops *k_cuda(void);

#endif
