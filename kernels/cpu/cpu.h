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
void kc_position_forward(float *out, const float *wpe, int B, int T, int C);
void kc_position_backward(float *dwpe, const float *dout, int B, int T, int C);

void kc_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C);
void kc_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C);

void kc_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC);
void kc_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC);

void kc_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int HD);
void kc_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int NH, int HD);

void kc_gelu_forward(float *out, const float *inp, size_t n);
void kc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
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

double kc_sumsq(const float *x, size_t n);
void kc_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
              float beta1, float beta2, float eps, float wd, float grad_scale, int t);

#endif
