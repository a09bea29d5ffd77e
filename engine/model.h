/* model: a GPT-2 decoder as the shard one rank holds.
 *
 * A rank holds one or more model chunks (a pipeline stage holds one; with the
 * interleaved schedule it holds several), each a contiguous range of layers; the
 * chunk with layer 0 also holds the embeddings (wte, wpe), the chunk with the
 * last layer holds ln_f and the output layer. Inside every layer the rank holds
 * heads/tp heads, ffn/tp FFN columns and, for the embedding and output layer,
 * V/tp vocab rows (vocab-parallel). tp = pp = 1 with one chunk is the plain model.
 *
 * Memory: all parameters of all chunks live in ONE backend allocation (`params`)
 * and their gradients in a second one of the same layout (`grads`), each tensor
 * 64-byte aligned; the padding between tensors is zero and stays zero (nothing
 * writes it), so a sum over a run of tensors may cover it; the param
 * table says where each tensor sits, what its full logical shape is and which
 * slice of it this rank holds, and drives init, checkpoints and the optimizer.
 * With tied embeddings the output layer reads wte; when the output layer is on a
 * different stage than the embedding, that stage holds its own copy of wte
 * (marked `tied_copy`), whose gradient the parallel layer all-reduces with the
 * first stage's, as Megatron does.
 *
 * Weight layout (see engine/README.md): linear weights are [out, in]; the rows of
 * h.N.attn.c_attn.weight are grouped per head as [head][q,k,v][head_dim], so a
 * tensor-parallel rank's heads are one contiguous block of rows.
 *
 * Ownership: eng_model owns its allocations and the table; eng_acts owns one
 * micro-batch's activations. Not thread-safe; one thread drives a model.
 */
#ifndef ATOLL_ENGINE_MODEL_H
#define ATOLL_ENGINE_MODEL_H

#include "config.h"
#include "kernels.h"

#include <stddef.h>
#include <stdint.h>

#define ENG_NAME 64
#define ENG_MAX_CHUNKS 16

/* Tensor-parallel collectives at the points Megatron puts them. For tp = 1 the
 * engine uses an identity table (eng_tp_identity). Each returns 0 or -1. */
typedef struct eng_tp_comm {
    void *ctx;
    int (*allreduce_sum)(void *ctx, float *buf, size_t n);
    int (*allreduce_max)(void *ctx, float *buf, size_t n);
    /* Sequence parallel only (NULL otherwise). allgather: in n floats -> out
     * tp*n (rank i's at i*n; in may equal out + rank*n). reduce_scatter: in tp*n
     * -> out n, the sum of every rank's chunk `rank`. */
    int (*allgather)(void *ctx, const float *in, float *out, size_t n);
    int (*reduce_scatter)(void *ctx, const float *in, float *out, size_t n);
} eng_tp_comm;

extern const eng_tp_comm eng_tp_identity;

/* One tensor of the param table. Shapes have 1 or 2 dims. */
typedef struct eng_param {
    char name[ENG_NAME];       /* GPT-2 name: "h.3.attn.c_attn.weight" */
    int ndim;
    int64_t full[2];           /* logical shape of the whole tensor */
    int shard_dim;             /* -1: replicated; 0 or 1: dimension split by TP */
    int64_t shard_off;         /* first index of this rank's slice along shard_dim */
    int64_t local[2];          /* shape held here */
    size_t numel;              /* local elements */
    size_t offset;             /* in floats, into params / grads */
    float init_std;            /* 0: constant init_value */
    float init_value;
    int decay;                 /* weight decay applies (2-D weights, not biases/LN) */
    int tied_copy;             /* the last stage's copy of wte: not saved, grad shared */
    int norm;                  /* a LayerNorm/RMSNorm weight or bias (sequence-parallel partial grads) */
    int head_norm;             /* a norm over each head (--qk-layernorm): a TP rank's grad covers its heads */
    int decoupled;             /* the token embedding or output layer: --decoupled-lr's rate (Megatron's
                                  is_embedding_or_output_parameter) */
    int plus_one;              /* a LayerNorm weight under --apply-layernorm-1p: stored w, applied as 1 + w */
    size_t plus_one_at;        /* then its place in the model's norm1p buffer, in elements */
    int layer;                 /* the transformer layer it belongs to; -1: embeddings, final norm, head */
    int chunk;
} eng_param;

/* A layer's tensors: weights in the model's activation type (fp32, or the bf16
 * copy under --bf16), or gradients (always fp32; cast with (float *)). NULL
 * where the model has no such tensor (biases under --disable-bias-linear, the
 * norms' biases under RMSNorm). GPT-2 family: the fused qkv (c_attn), fc = c_fc,
 * fcproj = mlp.c_proj. LLaMA family: q, k, v separate (q_proj, k_proj,
 * v_proj), proj = o_proj, gate = gate_proj, fc = up_proj, fcproj = down_proj. */
typedef struct eng_layer_w {
    void *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    void *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
    void *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *gate_w, *gate_b;
    void *qn_w, *kn_w;          /* --qk-layernorm: the query and key heads' RMSNorm weights [head dim] */
} eng_layer_w;

/* Views of one chunk's tensors into params16/params (w) or grads (g). */
typedef struct eng_views {
    void *wte, *wpe;           /* first chunk only */
    eng_layer_w *layers;       /* [layer_end - layer_begin] */
    void *lnf_w, *lnf_b, *head; /* last chunk only; head = wte when tied */
} eng_views;

typedef struct eng_chunk {
    int layer_begin, layer_end; /* global layer indexes [begin, end) */
    int first, last;            /* holds the embeddings / holds ln_f and the head */
    eng_views w, g;
} eng_chunk;

/* Mixed precision (--bf16): weights, activations and activation gradients are
 * bf16 (`act_bytes` 2); `params` stay the fp32 master weights the optimizer
 * updates and checkpoints save, `params16` is their bf16 copy the model runs
 * on (refreshed by eng_params_updated), gradients, LayerNorm statistics,
 * softmax partials and losses are fp32. Without --bf16 act_bytes is 4 and the
 * model runs on `params` directly. */
typedef struct eng_model {
    atoll_config cfg;
    const k_ops *k;
    eng_tp_comm tp;
    int tp_rank, tp_size;
    int C, NH, HD, F, V, T, P;  /* hidden, local heads, head dim, local ffn, local vocab, seq, max pos */
    int NG;                     /* local key/value groups (NH with plain multi-head attention) */
    int llama;                  /* the LLaMA family: RMSNorm, SwiGLU, q/k/v apart, Hugging Face names */
    int rope;                   /* rotary positions (no wpe) */
    int RD;                     /* rope: the rotated dims of each head (--rotary-percent times HD) */
    float eps;                  /* every norm's epsilon (--norm-epsilon) */
    int qk_norm;                /* --qk-layernorm: RMSNorm on each query and key head before rope */
    /* dropout of the current training step (eng_set_step); off in evaluation */
    int drop_on;
    uint64_t drop_key;          /* (seed, iteration) mixed */
    int vocab_offset;           /* first vocab row held here */
    int B;                      /* micro-batch size the buffers are sized for */
    int bf16;                   /* activations and weights in bf16 */
    size_t act_bytes;           /* 2 (bf16) or 4 (fp32) */
    /* Sequence parallel (--sequence-parallel with tp > 1): the residual stream,
     * LayerNorms and everything between them hold R = B*T/tp token rows, this
     * rank's contiguous block of the micro-batch's B*T rows; all-gather before
     * the column-parallel GEMMs, reduce-scatter after the row-parallel ones.
     * Otherwise R = B*T. Pipeline stages exchange [R, C]. */
    int sp, R;
    /* Documents packed in a sample (--reset-attention-mask, --reset-position-ids
     * with learned positions): eng_forward splits each sample after every
     * doc_eod token (the caller sets it; -1, the default, splits nothing) into
     * a->doc, the first position of each token's document, and a->pos, its
     * position inside it (Megatron's get_ltor_masks_and_position_ids). */
    int doc_mask, doc_pos;
    int32_t doc_eod;
    int32_t *doc_host;          /* [2 * B*T] host staging for doc and pos */
    /* A decode step (eng_decode) runs while dec_pos >= 0: the one row at
     * position dec_pos, its keys from dec_k0 on; -1 otherwise. */
    int dec_pos, dec_k0, dec_wpe;
    int logits_pos;             /* eng_set_logits_position; -1: every position */
    cfg_recompute recompute;    /* selective: attention probabilities; full: whole layers */
    int recompute_first;        /* the first so many layers of each chunk are rebuilt (full recompute: INT_MAX
                                 * for all, --recompute-num-layers with block; 0 otherwise) */
    int nchunks;
    eng_chunk chunks[ENG_MAX_CHUNKS];
    eng_param *table;
    int nparams;
    size_t num_floats;          /* length of params and grads */
    float *params, *grads;      /* backend memory */
    uint16_t *params16;         /* --bf16: the bf16 copy of params; NULL otherwise */
    /* backward workspace shared by all chunks (one backward runs at a time),
     * in the activation type */
    void *ws;
    void *ws_dres, *ws_dln, *ws_dqkv, *ws_datty, *ws_dfc;
    void *ws_ddrop;             /* hidden dropout: the masked copy of an output gradient [R, C] */
    void *ws_q, *ws_k, *ws_v;   /* LLaMA: q, k, v projections [N, NH*HD], [N, NG*HD] (and their gradients) */
    void *ws_dtmp;              /* LLaMA: a second projection's input gradient [N, C] */
    void *ws_dgate, *ws_dup;    /* SwiGLU: gradients of gate and up [N, F] */
    void *ws_full, *ws_dlnl;    /* sequence parallel: gathered [B*T, C], scattered [R, C] */
    void *ws_gath;              /* sequence parallel: a LayerNorm output gathered to [B*T, C] */
    float *ws_datt;             /* fp32 attention backward scratch [B, NH, T, T] */
    float *ws_att;              /* selective recompute (fp32): the recomputed probabilities */
    float *ws_cvt;              /* bf16 with tp > 1: fp32 staging for the TP collectives */
    void *ws_layer_mem;         /* full recompute: a group's layers' activations, rebuilt, and the
                                 * group's inner boundaries */
    int recompute_group;        /* full recompute: layers rebuilt together from the input of the group's first
                                 * (--recompute-method uniform --recompute-num-layers G, at most a chunk; else 1) */
    /* --apply-layernorm-1p: the LayerNorm weights as the kernels read them, 1 + w
     * (in the activation type), refreshed from params by eng_params_updated and
     * after each optimizer step; the layer views point here, the gradients stay
     * those of the stored w (the same: d(1 + w) = dw). */
    void *norm1p;
    float *norm1p_f32, *norm1p_ones; /* 1 + w in fp32 before the bf16 rounding; ones to add */
    size_t norm1p_n;                 /* elements */
    struct eng_layer_acts *ws_layer; /* [recompute_group] */
    void **ws_res;                   /* [recompute_group - 1]: the layer boundaries inside a group, [R, C] each */
    /* Called by eng_backward after each layer's backward when set (chunk and
     * global layer index): the data-parallel overlap hooks in here. */
    void (*layer_done)(void *ctx, int chunk, int layer);
    void *layer_done_ctx;
} eng_model;

/* Per micro-batch, per chunk activations kept from forward to backward, in the
 * activation type except the fp32 statistics (means, rstds, att, lse). With
 * sequence parallel the residual stream and the LayerNorm outputs (ln1, ln2,
 * lnf) hold this rank's [R, C] rows; the GEMMs' [B*T, C] inputs are gathered
 * again in backward. fp32 attention keeps the probabilities `att` (none under
 * selective recompute); bf16 attention keeps lse [B, NH, T] instead. Full
 * recompute keeps only res[] (the layer inputs) of the layers it rebuilds
 * (with --recompute-method block, the first --recompute-num-layers of the chunk);
 * with --recompute-method uniform and G = --recompute-num-layers > 1 only the
 * input of each group of G layers (and the chunk's output): res[] of the other
 * boundaries point into the model's shared ws_res, rebuilt in backward. */
typedef struct eng_layer_acts {
    void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fcg;
    void *fcu;                  /* SwiGLU: the up projection (fch is the gate, fcg silu(gate)*up) */
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att, *lse;
    void *qpre, *kpre;          /* --qk-layernorm: queries and keys before their norms, and the norms' */
    float *q_rstd, *k_rstd;     /* 1/rms per token and head */
} eng_layer_acts;

typedef struct eng_acts {
    int chunk;
    int64_t sample0;            /* global index of the micro-batch's first sample (dropout masks) */
    void *mem;                  /* one backend allocation */
    size_t bytes;               /* its size */
    int32_t *tokens, *targets;  /* [B*T] in backend memory (first / last chunk) */
    int32_t *doc, *pos;         /* [B*T] in backend memory with documents (eng_model.doc_mask, doc_pos), else NULL */
    void **res;                 /* res[0] = chunk input, res[l+1] = layer l output */
    eng_layer_acts *layers;
    void *lnf, *logits;
    float *lnf_mean, *lnf_rstd, *rowmax, *sumexp, *tlogit, *losses;
    int dlogits_ready;          /* the forward left dloss * dlogits over the logits */
    void *dinput;               /* gradient of the chunk input (not on the first chunk) */
} eng_acts;

/* Which layers a rank holds: `nchunks` ranges; the chunk that starts at layer 0
 * is first, the one that ends at num_layers is last. */
typedef struct eng_layout {
    int tp_rank, tp_size;
    int nchunks;
    int layer_begin[ENG_MAX_CHUNKS], layer_end[ENG_MAX_CHUNKS];
    int forward_only; /* no gradients are allocated (atoll generate): backward and eng_zero_grads must not run */
} eng_layout;

/* The single-rank layout: tp = 1, one chunk with every layer. */
eng_layout eng_layout_single(const atoll_config *c);

/* Builds the param table and allocates params, grads and the workspace for
 * micro-batches of `cfg->micro_batch_size`, in bf16 when cfg->bf16 (the backend
 * must have the bf16 entries, and cuda's flash attention head dim 64 or 128).
 * Parameters are left zero; call eng_init_params. Returns NULL with `err` set
 * on a bad shape, an unsupported precision or no memory. */
eng_model *eng_model_create(const atoll_config *cfg, const eng_layout *lay, const k_ops *k,
                            char *err, size_t errlen);
void eng_model_free(eng_model *m);

/* The param table of the full model (tp = 1, all layers, no tied copy), in
 * checkpoint order. This is what a checkpoint holds, whatever the layout.
 * Caller frees the returned array with free(). */
eng_param *eng_full_table(const atoll_config *cfg, int *n, char *err, size_t errlen);

/* The cores this rank may use: those of its affinity mask shared with the
 * node's other ranks (LOCAL_WORLD_SIZE, which every launcher sets), at least 1.
 * The CPU backend's BLAS threads and the initialisation's draws take this many. */
int eng_cpu_share(void);

/* Fills parameters from the counter-based RNG: a shard gets exactly the values
 * of its slice of the full tensor. Needs host scratch of the largest tensor. */
int eng_init_params(eng_model *m, uint64_t seed);

eng_acts *eng_acts_create(eng_model *m, int chunk);
void eng_acts_free(eng_model *m, eng_acts *a);

/* Forward of one micro-batch through one chunk.
 * First chunk: `tokens` [B*T] (host memory) are the inputs; otherwise `input`
 * [B*T, C] (backend memory) is copied into the acts. With documents
 * (doc_mask) every chunk reads `tokens` for the attention mask. Last chunk: `targets` [B*T]
 * (host) give the loss; *loss_sum receives the sum of the B*T token losses.
 * targets NULL (loss_sum NULL, dloss 0) leaves the logits alone, no loss.
 * dloss != 0 on a training step's last chunk with tp = 1 fuses the classifier's
 * backward into the forward (xent_fused: the logits are read once and their
 * gradient, weighted by dloss, written over them); eng_backward must then get
 * the same dloss. 0 (evaluation, or when the logits are wanted) keeps them.
 * Other chunks: the output is a->res[nlayers] ([B*T, C], backend memory). */
int eng_forward(eng_model *m, eng_acts *a, const int32_t *tokens, const void *input,
                const int32_t *targets, float dloss, double *loss_sum);
/* eng_forward in its two parts: the inputs' uploads (tokens, targets, the
 * documents' bounds), then the kernels (`targets`: whether the inputs had
 * them). The second part neither reads host memory nor waits for the device
 * (unless loss_sum is asked for), so it can be recorded as a CUDA graph. */
int eng_forward_inputs(eng_model *m, eng_acts *a, const int32_t *tokens, const int32_t *targets);
int eng_forward_run(eng_model *m, eng_acts *a, const void *input, int targets, float dloss, double *loss_sum);
/* The last chunk's loss sum of the micro-batch in `a`, read later: reading it
 * waits for the device, so a training step reads it after its backward is
 * queued (backward leaves the losses alone) and the device never idles for it. */
int eng_loss_sum(eng_model *m, const eng_acts *a, double *loss_sum);
/* The same without waiting: the micro-batch's per-token losses are copied into
 * host[B*T] once the backend next waits for the device (k_ops to_host_later:
 * a step's gradient norm), and eng_losses_sum then adds nmicro such rows of
 * host, micro-batch by micro-batch, each weighted by scale[k] (NULL: 1): the
 * order, and so the bits, eng_loss_sum's per micro-batch would give. */
void eng_losses_to_host_later(eng_model *m, const eng_acts *a, float *host);
double eng_losses_sum(const eng_model *m, const float *host, int nmicro, const float *scale);

/* The chunk's output activations (not for the last chunk): eng_boundary_bytes. */
void *eng_output(eng_model *m, eng_acts *a);
/* Bytes a pipeline stage sends per micro-batch: R * hidden activations. */
size_t eng_boundary_bytes(const eng_model *m);
/* Rows [row0, row0 + nrows) of the last chunk's logits of the micro-batch
 * ([B*T, V], row b*T + t for sample b, position t) as fp32 [nrows, V] in host
 * memory. */
void eng_logits_to_host(eng_model *m, const eng_acts *a, int row0, int nrows, float *host);
/* 1 for tensors whose gradient is a partial sum per TP rank: the LayerNorms
 * under sequence parallel, the heads' norms (--qk-layernorm) whenever tp > 1.
 * The trainer all-reduces them over TP. */
int eng_param_tp_partial(const eng_model *m, const eng_param *p);

/* Backward of one micro-batch through one chunk; parameter gradients accumulate
 * into m->grads. Last chunk: each token loss is weighted by `dloss` (1/tokens of
 * the global batch for a mean). Other chunks: `dout` [B*T, C] (backend memory)
 * is the gradient of the output. Non-first chunks leave the input's gradient in
 * a->dinput. */
int eng_backward(eng_model *m, eng_acts *a, const void *dout, float dloss);

/* After anything wrote m->params (init, a checkpoint load, an optimizer step
 * without the fused bf16 update): refreshes the bf16 copy and the weights
 * derived from them (eng_norms_updated). */
void eng_params_updated(eng_model *m);

/* After an optimizer step that wrote the bf16 copy itself: refreshes the
 * LayerNorm weights --apply-layernorm-1p applies (1 + w); no-op without it. */
void eng_norms_updated(eng_model *m);

/* Zeroes every gradient. */
void eng_zero_grads(eng_model *m);

/* Dropout for the step about to run: training iteration `iteration` (1-based)
 * with the masks of (seed, iteration); training 0 (evaluation, sampling) turns
 * dropout off. Masks also depend on each micro-batch's global samples
 * (eng_acts.sample0), the layer and the site, never on the layout. */
void eng_set_step(eng_model *m, uint64_t seed, long long iteration, int training);

/* The forward passes of a model built forward_only (atoll generate) cover the
 * first T positions of each sample from now on, 1 <= T <= --seq-length: with
 * causal attention no position's output depends on a later one, so a context
 * of n tokens costs n positions, not --seq-length (the logits are [B*T, V]
 * then). Activations are sized for --seq-length: eng_acts_create returns NULL
 * while T is shorter. Not under sequence parallelism. 0, or -1 with nothing
 * changed when T is out of range or the model trains. */
int eng_set_seq_length(eng_model *m, int T);

/* From now on a forward pass with no targets computes the logits at position
 * `t` of each sample only (row b*T + t; -1: every position, the default); the
 * other rows keep what they held. Sampling reads no other: the output layer's
 * [T, C] x [C, V] product, about a third of a GPT-2 124M pass, becomes one
 * row's. A pass whose length is t or less fails; a decode step computes its
 * one row as always. For a forward_only model (atoll generate); 0, or -1 with
 * nothing changed when the model trains or t is past --seq-length. */
int eng_set_logits_position(eng_model *m, int t);

/* A decode step with a key/value cache (atoll generate): the logits of
 * `token` at position `pos` of the one sample, the earlier positions' keys and
 * values kept from before, in each layer's qkv activations: a forward pass
 * over at least `pos` positions (eng_set_seq_length) filled them, and each
 * decode step adds its own row. Costs one position, not pos + 1. `doc0` is
 * the first position of the token's document (0 without documents): with
 * --reset-attention-mask it attends keys from there, with learned positions
 * and --reset-position-ids its position counts from there. Leaves the model
 * at length 1 (the logits [1, V]). Needs eng_can_decode. 0, or -1 with
 * nothing run when pos or doc0 is out of range. */
int eng_decode(eng_model *m, eng_acts *a, int32_t token, int pos, int doc0);
/* Whether eng_decode runs on this model: forward_only, one sample, the whole
 * model on this rank (no tp, one chunk), no layer recomputed, and a backend
 * with attention_decode (attention_decode_bf16 under --bf16). */
int eng_can_decode(const eng_model *m);

/* The name of the token embedding ("wte.weight", or "model.embed_tokens.weight"
 * in the LLaMA family). */
const char *eng_embed_name(const atoll_config *c);

/* Looks a tensor up by name; NULL when this rank does not hold it. */
const eng_param *eng_find_param(const eng_model *m, const char *name);

/* 64-bit FNV-1a of a string (tensor keys of the RNG, checksums of names). */
uint64_t eng_fnv1a(const void *data, size_t n, uint64_t h);
#define ENG_FNV_INIT 0xcbf29ce484222325ULL

#endif
