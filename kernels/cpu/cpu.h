/* cpu: the fp32 CPU reference backend. Each file holds one family of ops; the
 * table in ops_table.c gathers them behind k_cpu(). Plain loops for the
 * elementwise work, CBLAS (OpenBLAS) for every matrix product. */
#ifndef ATOLL_KERNELS_CPU_H
#define ATOLL_KERNELS_CPU_H

#include "kernels.h"

void *kc_alloc(size_t bytes);
void kc_free(void *p);
void kc_copy(void *dst, const void *src, size_t bytes);
void kc_zero(void *p, size_t bytes);
void kc_sync(void);

void kc_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                          int N, int C, int vocab_offset, int V);
void kc_embedding_backward(float *dwte, const float *dout, const int32_t *tokens,
                           int N, int C, int vocab_offset, int V);
void kc_position_forward(float *out, const float *wpe, const int32_t *pos, int B, int T, int C);
void kc_position_backward(float *dwpe, const float *dout, int B, int T, int C);

void kc_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C, float eps);
void kc_layernorm_backward(float *dinp, float *dw, float *db, float *dsum, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C);

void kc_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC);
void kc_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC);

void kc_attention_forward(float *out, float *att, const float *qkv, const int32_t *doc, int B, int T, int NH, int NG,
                          int HD, const k_dropout *drop);
/* The first key query t of sample b attends: doc[b*T+t], 0 without documents. */
static inline int kc_doc_first(const int32_t *doc, int b, int T, int t) { return doc ? doc[(size_t)b * T + t] : 0; }
void kc_attention_decode(float *out, const float *qkv, int n, int k0, int NH, int NG, int HD);
void kc_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int NH, int NG, int HD, const k_dropout *drop);
/* dst[T, T] = P times the dropout mask of one (sample, head) (dst may be P). */
void kc_attention_drop(float *dst, const float *P, int T, const k_dropout *d, int64_t sample, int head);

/* llama.c: RMSNorm, SwiGLU, rotary embeddings, q/k/v packing, hidden dropout */
void kc_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
void kc_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C);
void kc_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void kc_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
void kc_rope_angle(int t, int i, int RD, k_rope_freq f, float *c, float *s);
void kc_rope_forward(float *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f);
void kc_rope_backward(float *dqkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f);
void kc_qkv_move(void *qkv, void *q, void *k, void *v, int N, int NH, int NG, int HD, size_t esz, int pack);
void kc_qkv_pack(float *qkv, const float *q, const float *k, const float *v, int N, int NH, int NG, int HD);
void kc_qkv_unpack(float *q, float *k, float *v, const float *qkv, int N, int NH, int NG, int HD);
void kc_dropout(float *x, int N, int C, const k_dropout *d);

void kc_gelu_forward(float *out, const float *inp, size_t n);
void kc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void kc_relu2_forward(float *out, const float *inp, size_t n);
void kc_relu2_backward(float *dinp, const float *inp, const float *dout, size_t n);
void kc_residual_forward(float *out, const float *a, const float *b, size_t n);
void kc_add_inplace(float *acc, const float *x, size_t n);
void kc_scale(float *x, float s, size_t n);

void kc_xent_max(float *rowmax, const float *logits, int N, int V);
void kc_xent_sumexp_target(float *sumexp, float *target_logit, const float *logits,
                           const float *rowmax, const int32_t *targets, int N, int V,
                           int vocab_offset);
void kc_xent_loss(float *loss, const float *rowmax, const float *sumexp,
                  const float *target_logit, const int32_t *targets, int N);
void kc_xent_backward(float *dlogits, const float *logits, const float *rowmax,
                      const float *sumexp, const int32_t *targets, float dloss,
                      int N, int V, int vocab_offset);

void kc_xent_fused(float *loss, float *logits, const int32_t *targets, float dloss, int N, int V);
void kc_xent_fused_bf16(float *loss, uint16_t *logits, const int32_t *targets, float dloss, int N, int V);

double kc_sumsq(const float *x, size_t n);
uint64_t kc_nonzeros(const float *x, size_t n);
void kc_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
              float beta1, float beta2, float eps, float wd, float grad_scale, int t);

void kc_adamw_segments(float *master, uint16_t *param_bf16, const float *grad, float *m, float *v, size_t n, int nseg,
                       const size_t *seg_end, const float *seg_wd, float lr, float beta1, float beta2, float eps,
                       float grad_scale, int t);

/* bf16 entries (bf16.c): widen, run the fp32 op, round to nearest even. */
float kc_bf16_to_f32(uint16_t h);
uint16_t kc_f32_to_bf16(float f);
void kc_to_bf16(uint16_t *dst, const float *src, size_t n);
void kc_from_bf16(float *dst, const uint16_t *src, size_t n);
void kc_embedding_forward_bf16(uint16_t *out, const int32_t *tokens, const uint16_t *wte, int N, int C,
                               int vocab_offset, int V);
void kc_embedding_backward_bf16(float *dwte, const uint16_t *dout, const int32_t *tokens, int N, int C,
                                int vocab_offset, int V);
void kc_position_forward_bf16(uint16_t *out, const uint16_t *wpe, const int32_t *pos, int B, int T, int C);
void kc_position_backward_bf16(float *dwpe, const uint16_t *dout, int B, int T, int C);
void kc_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const uint16_t *inp, const uint16_t *w,
                               const uint16_t *b, int N, int C, float eps);
void kc_layernorm_backward_bf16(uint16_t *dinp, float *dw, float *db, float *dsum, const uint16_t *dout,
                                const uint16_t *inp, const uint16_t *w, const float *mean, const float *rstd, int N,
                                int C);
void kc_matmul_forward_bf16(uint16_t *out, uint16_t *pre_gelu, const uint16_t *inp, const uint16_t *w,
                            const uint16_t *bias, int N, int C, int OC);
void kc_matmul_backward_bf16(uint16_t *dinp, float *dw, float *dbias, const uint16_t *dout, const uint16_t *inp,
                             const uint16_t *w, int N, int C, int OC);
void kc_matmul_backward_gelu_bf16(uint16_t *dpre, float *dw, float *dbias, const uint16_t *dout, const uint16_t *inp,
                                  const uint16_t *w, const uint16_t *pre_gelu, int N, int C, int OC);
void kc_gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n);
void kc_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n);
void kc_relu2_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n);
void kc_relu2_backward_bf16(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n);
void kc_residual_forward_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n);
void kc_residual_layernorm_forward_bf16(uint16_t *res, uint16_t *out, float *mean, float *rstd, const uint16_t *a,
                                        const uint16_t *b, const uint16_t *w, const uint16_t *bias,
                                        int N, int C, float eps);
void kc_add_inplace_bf16(uint16_t *acc, const uint16_t *x, size_t n);
void kc_xent_max_bf16(float *rowmax, const uint16_t *logits, int N, int V);
void kc_xent_sumexp_target_bf16(float *sumexp, float *target_logit, const uint16_t *logits, const float *rowmax,
                                const int32_t *targets, int N, int V, int vocab_offset);
void kc_xent_backward_bf16(uint16_t *dlogits, const uint16_t *logits, const float *rowmax, const float *sumexp,
                           const int32_t *targets, float dloss, int N, int V, int vocab_offset);
void kc_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *qkv, const int32_t *doc, int B, int T,
                               int NH, int NG, int HD, const k_dropout *drop);
void kc_attention_decode_bf16(uint16_t *out, const uint16_t *qkv, int n, int k0, int NH, int NG, int HD);
void kc_attention_backward_bf16(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const uint16_t *out,
                                const float *lse, const int32_t *doc, int B, int T, int NH, int NG, int HD,
                                const k_dropout *drop);
void kc_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const uint16_t *inp, const uint16_t *w,
                             int N, int C, float eps);
void kc_residual_rmsnorm_forward_bf16(uint16_t *res, uint16_t *out, float *rstd, const uint16_t *a, const uint16_t *b,
                                      const uint16_t *w, int N, int C, float eps);
void kc_rmsnorm_backward_bf16(uint16_t *dinp, float *dw, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                              const float *rstd, int N, int C);
void kc_swiglu_forward_bf16(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n);
void kc_swiglu_backward_bf16(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                             const uint16_t *up, size_t n);
void kc_rope_forward_bf16(uint16_t *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f);
void kc_rope_backward_bf16(uint16_t *dqkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f);
void kc_qkv_pack_bf16(uint16_t *qkv, const uint16_t *q, const uint16_t *k, const uint16_t *v, int N, int NH, int NG,
                      int HD);
void kc_qkv_unpack_bf16(uint16_t *q, uint16_t *k, uint16_t *v, const uint16_t *qkv, int N, int NH, int NG, int HD);
void kc_dropout_bf16(uint16_t *x, int N, int C, const k_dropout *d);
void kc_adamw_bf16(float *master, uint16_t *param_bf16, const float *grad, float *m, float *v, size_t n, float lr,
                   float beta1, float beta2, float eps, float wd, float grad_scale, int t);

#endif
