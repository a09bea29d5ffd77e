/* cudnn_sdpa: causal attention (bf16, fp32 softmax statistics) through cuDNN's
 * fused attention engines, reached with the C backend API.
 *
 * The same contract as the table's attention_forward_bf16 /
 * attention_backward_bf16 (kernels.h): qkv [B, T, NH, 3, HD], out and dout
 * [B, T, NH*HD], lse[B, NH, T] = log sum_j exp(score_tj) with the scores scaled
 * by 1/sqrt(HD); dqkv is OVERWRITTEN. What cuDNN is given, per (b, h):
 *
 *   forward   S = Q K^T / sqrt(HD), S_ij = -inf for j > i
 *             lse = max_j S + log sum_j exp(S - max),  P = exp(S - lse)
 *             O = P V
 *   backward  P = exp(S - lse),  D_i = sum_d dO_id O_id
 *             dV = P^T dO,  dP = dO V^T,  dS = P (dP - D) / sqrt(HD)
 *             dQ = dS K,  dK = dS^T Q
 *
 * dQ is a plain product of dS and K (no fp32 accumulator updated by atomics),
 * which cuDNN runs deterministically on Hopper: it writes dS, [B, NH, T, T] in
 * bf16, to its workspace, and a second kernel multiplies it by K. With
 * kcudnn_attention_atomic_dq(1) the backward instead adds each key tile's
 * dS K into an fp32 [B, NH, T, HD] buffer by atomic adds as it goes (what
 * cuDNN's frontend and Transformer Engine do unless asked for determinism):
 * no dS in memory and no second kernel, but the order of the adds, and so the
 * low bits of dQ, change from run to run. Only multi-head attention
 * (NG == NH) without dropout goes this way; anything else returns 1 and the
 * caller uses the project's own flash kernels.
 *
 * libcudnn.so.9 is opened at run time (dlopen): a machine without cuDNN runs
 * the own kernels. Plans are built once per shape and kept for the process.
 * Errors: functions return 0 done, 1 not applicable here (see kcudnn_why()),
 * and print "kernels/cuda/cudnn_sdpa.c:<line>: cuDNN: <call>: <status>:
 * <cuDNN's reason>" before returning 1 on a cuDNN failure. */
#ifndef ATOLL_CUDNN_SDPA_H
#define ATOLL_CUDNN_SDPA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct k_dropout;

/* Queue on `stream` (a cudaStream_t). 0: done; 1: not taken (shape, dropout,
 * no cuDNN, or cuDNN refused the graph: kcudnn_why() says which). */
int kcudnn_attention_forward_bf16(void *stream, uint16_t *out, float *lse, const uint16_t *qkv, int B, int T,
                                  int NH, int NG, int HD, const struct k_dropout *drop);
int kcudnn_attention_backward_bf16(void *stream, uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv,
                                   const uint16_t *out, const float *lse, int B, int T, int NH, int NG, int HD,
                                   const struct k_dropout *drop);

/* Why the last call returned 1 ("" after a 0). Static storage. */
const char *kcudnn_why(void);

/* dQ by atomic adds (on) or by a plain product (off, the default) in the
 * backward calls from now on. A shape whose atomic graph cuDNN refuses takes
 * the plain product, saying so on stderr when its plan is first built. */
void kcudnn_attention_atomic_dq(int on);
/* How many backward plans summing dQ by atomic adds were built (0: every
 * backward so far was deterministic). */
long kcudnn_attention_atomic_plans(void);

/* The device memory a call of this shape will need beside its operands, with
 * dQ by atomic adds (atomic) or not: the larger of the forward's and the
 * backward's plan workspaces (cuDNN's figure, from plans built now and kept),
 * plus the backward's D = rowsum(dO * O) and any dQ sums. 0 with *bytes set;
 * 1 when the shape goes to the flash kernels (*bytes = 0; kcudnn_why() says
 * why). */
int kcudnn_attention_workspace(int B, int T, int NH, int NG, int HD, const struct k_dropout *drop, int atomic,
                               size_t *bytes);

/* Device memory this process holds for cuDNN's attention: the largest
 * workspace a plan has asked for, plus the backward's D = rowsum(dO * O) and
 * dQ sums. */
size_t kcudnn_workspace_bytes(void);
/* How many times those buffers were replaced (a CUDA graph recorded before
 * holds the old ones). */
long kcudnn_buffers_moved(void);

/* The loaded library's version (e.g. 91900), 0 when cuDNN cannot be opened. */
long kcudnn_version(void);

/* Deviceless check, no GPU needed (cuDNN >= 9.8): build the three graphs (the
 * forward, the backward with dQ by a plain product and by atomic adds) for the
 * shape and finalize an execution plan for each against the device described
 * by `deviceprop_json` (cuDNN's own serialisation of a device's properties).
 * 0: both plans finalized, or, on a machine whose libcuda is the toolkit's
 * stub, every step done but loading the compiled kernel; 1: not, with the
 * reason in err. */
int kcudnn_plan_check(const char *deviceprop_json, int B, int T, int NH, int HD, char *err, size_t cap);

/* Deviceless, as above, for one graph (kind 0 the forward, 1 the backward, 2
 * the backward with dQ by atomic adds): each engine config cuDNN's heuristics
 * offer for it, in their order, is made into a plan. Returns how many
 * finalize (-1: no cuDNN 9.8+, or no such kind); `list` gets "config I of N
 * (engine E)" for each, "refused" after those that do not. */
int kcudnn_plan_configs(const char *deviceprop_json, int B, int T, int NH, int HD, int kind, char *list, size_t cap);

/* Which engine config plans built from now on take, for the graph of `kind`
 * (as above): the index-th of the heuristics' list (a plan of its own for
 * each index), or with index -1, the default, the first that finalizes. A
 * config that does not finalize declines the calls it would run (return 1).
 * For measuring each config (bench/gpu/gpu_bench); training takes the
 * default. _plan_desc: the config the last plan built for `kind` runs, "config
 * I of N (engine E)", with " refused" when it did not finalize. */
void kcudnn_attention_pick(int kind, int index);
const char *kcudnn_attention_plan_desc(int kind);

/* The serialised properties of CUDA device `device` (a malloc'd string the
 * caller frees), for kcudnn_plan_check on a machine without it; NULL with err. */
char *kcudnn_deviceprop_json(int device, char *err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
