/* cudnn_sdpa: causal attention through cuDNN's backend graph API (header for
 * the math and the contract). A graph is a list of backend descriptors:
 * tensors (by unique id; "virtual" ones live only inside the fused kernel) and
 * operations on them (matmul, pointwise, reduction, reshape). cuDNN's heuristics
 * name the engines that can run the whole graph as one fused kernel; the first
 * whose execution plan finalizes is kept. */
#include "cudnn_sdpa.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "k_dropout.h"
#include "kernels.h"

/* ---- the library, opened at run time ---- */

static struct {
    int tried, ok;
    long version;
    size_t (*getVersion)(void);
    const char *(*errorString)(cudnnStatus_t);
    void (*lastError)(char *, size_t);
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*setStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*createDesc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroyDesc)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*setAttr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                             int64_t, const void *);
    cudnnStatus_t (*getAttr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                             int64_t, int64_t *, void *);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} L;

static char why_[512];

const char *kcudnn_why(void) { return why_; }

static int not_taken(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why_, sizeof why_, fmt, ap);
    va_end(ap);
    return 1;
}

static int load(void)
{
    if (L.tried) return L.ok;
    L.tried = 1;
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why_, sizeof why_, "cuDNN not found (%s)", dlerror());
        return 0;
    }
#define SYM(field, name)                                                                                           \
    do {                                                                                                           \
        *(void **)&L.field = dlsym(h, name);                                                                       \
        if (!L.field) {                                                                                            \
            snprintf(why_, sizeof why_, "cuDNN has no %s", name);                                                  \
            return 0;                                                                                              \
        }                                                                                                          \
    } while (0)
    SYM(getVersion, "cudnnGetVersion");
    SYM(errorString, "cudnnGetErrorString");
    SYM(lastError, "cudnnGetLastErrorString");
    SYM(create, "cudnnCreate");
    SYM(setStream, "cudnnSetStream");
    SYM(createDesc, "cudnnBackendCreateDescriptor");
    SYM(destroyDesc, "cudnnBackendDestroyDescriptor");
    SYM(setAttr, "cudnnBackendSetAttribute");
    SYM(getAttr, "cudnnBackendGetAttribute");
    SYM(finalize, "cudnnBackendFinalize");
    SYM(execute, "cudnnBackendExecute");
#undef SYM
    L.version = (long)L.getVersion();
    if (L.version < 90000) {
        snprintf(why_, sizeof why_, "cuDNN %ld is older than 9.0", L.version);
        return 0;
    }
    L.ok = 1;
    return 1;
}

long kcudnn_version(void) { return load() ? L.version : 0; }

/* ---- a graph under construction ---- */

enum { MAX_DESC = 96, MAX_OPS = 40, MAX_CONFIGS = 8 };

typedef struct {
    cudnnBackendDescriptor_t all[MAX_DESC]; /* every descriptor made, destroyed together */
    int n;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int nops;
    int64_t next_virtual_uid;
    int failed;
    char *err;
    size_t cap;
} graph;

static void gfail(graph *g, int line, const char *what, cudnnStatus_t s)
{
    if (g->failed) return;
    g->failed = 1;
    char last[256] = "";
    if (L.lastError) L.lastError(last, sizeof last);
    snprintf(g->err, g->cap, "kernels/cuda/cudnn_sdpa.c:%d: cuDNN: %s: %s%s%s", line, what, L.errorString(s),
             last[0] ? ": " : "", last);
}

#define CK(g, call, what)                                                                                          \
    do {                                                                                                           \
        cudnnStatus_t s_ = (call);                                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) gfail((g), __LINE__, (what), s_);                                          \
    } while (0)

static cudnnBackendDescriptor_t gnew(graph *g, cudnnBackendDescriptorType_t type, const char *what)
{
    cudnnBackendDescriptor_t d = NULL;
    if (g->failed) return NULL;
    if (g->n == MAX_DESC) {
        g->failed = 1;
        snprintf(g->err, g->cap, "kernels/cuda/cudnn_sdpa.c: graph larger than %d descriptors", MAX_DESC);
        return NULL;
    }
    CK(g, L.createDesc(type, &d), what);
    if (!g->failed) g->all[g->n++] = d;
    return d;
}

static void gset(graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                 int64_t n, const void *v, const char *what)
{
    if (g->failed) return;
    CK(g, L.setAttr(d, a, t, n, v), what);
}

static void gfin(graph *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->failed) return;
    CK(g, L.finalize(d), what);
}

static void gfree(graph *g)
{
    for (int i = g->n - 1; i >= 0; i--) L.destroyDesc(g->all[i]);
    g->n = g->nops = 0;
}

static void add_op(graph *g, cudnnBackendDescriptor_t op)
{
    if (g->failed) return;
    if (g->nops == MAX_OPS) {
        g->failed = 1;
        snprintf(g->err, g->cap, "kernels/cuda/cudnn_sdpa.c: graph longer than %d operations", MAX_OPS);
        return;
    }
    g->ops[g->nops++] = op;
}

/* A 4-d tensor. uid 0: a new virtual (in-kernel) tensor. by_value: a scalar
 * passed by host pointer in the variant pack. */
static cudnnBackendDescriptor_t tensor(graph *g, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                                       const int64_t stride[4], int by_value)
{
    cudnnBackendDescriptor_t t = gnew(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "create tensor");
    bool virt = uid == 0;
    if (virt) uid = g->next_virtual_uid++;
    int64_t align = 16;
    gset(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
    gset(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dimensions");
    gset(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride, "tensor strides");
    gset(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    gset(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    gset(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    if (by_value) {
        bool yes = true;
        gset(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, "tensor by value");
    }
    gfin(g, t, "finalize tensor");
    return t;
}

static cudnnBackendDescriptor_t scalar(graph *g, int64_t uid)
{
    static const int64_t one[4] = {1, 1, 1, 1};
    return tensor(g, uid, CUDNN_DATA_FLOAT, one, one, 1);
}

/* y = mode(x[, b[, t]]); axis >= 0 for GEN_INDEX */
static void pointwise(graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis)
{
    cudnnBackendDescriptor_t pw = gnew(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "create pointwise");
    gset(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    gset(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0) gset(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    gfin(g, pw, "finalize pointwise");
    cudnnBackendDescriptor_t op = gnew(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "create pointwise op");
    gset(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pw desc");
    gset(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pw x");
    if (b) gset(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pw b");
    if (t) gset(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pw t");
    gset(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pw y");
    gfin(g, op, "finalize pointwise op");
    add_op(g, op);
}

/* c = a b (batched over the first two dimensions), fp32 accumulation */
static void matmul(graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c)
{
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = gnew(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "create matmul");
    gset(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul compute type");
    gfin(g, mm, "finalize matmul");
    cudnnBackendDescriptor_t op = gnew(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "create matmul op");
    gset(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    gset(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
    gset(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    gset(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul desc");
    gfin(g, op, "finalize matmul op");
    add_op(g, op);
}

/* y = reduce(x) over the dimensions where y has extent 1 */
static void reduction(graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = gnew(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "create reduction");
    gset(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
    gset(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction compute type");
    gfin(g, r, "finalize reduction");
    cudnnBackendDescriptor_t op = gnew(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "create reduction op");
    gset(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    gset(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    gset(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, "reduction desc");
    gfin(g, op, "finalize reduction op");
    add_op(g, op);
}

/* y = x viewed with y's dimensions and strides (a transpose here) */
static void reshape(graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t op = gnew(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "create reshape op");
    gset(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
    gset(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
    gfin(g, op, "finalize reshape op");
    add_op(g, op);
}

/* ---- the graphs ---- */

/* tensor uids the variant pack names */
enum {
    U_Q = 1, U_K, U_V, U_O, U_LSE, U_DO, U_DQ, U_DK, U_DV, U_DSUM, U_SCALE, U_NEGINF, U_ONE, U_DQACC,
    U_FIRST_VIRTUAL = 100
};

/* The plans: the forward, the backward with dQ = dS K a plain product, and the
 * backward with dQ summed into an fp32 buffer by atomic adds (atomic_dq). */
enum { FORWARD, BACKWARD, BACKWARD_ATOMIC };

typedef struct {
    int64_t B, T, NH, HD;
} shape;

/* Views of the packed buffers: qkv [B, T, NH, 3, HD] gives Q, K, V as
 * [B, NH, T, HD] with strides (T*row, 3*HD, row, 1), row = 3*NH*HD (K and V
 * start HD and 2*HD further: the pointers carry the offsets); out and dout
 * [B, T, NH*HD] as [B, NH, T, HD]; lse [B, NH, T] as [B, NH, T, 1]. */
static void qkv_view(const shape *s, int transposed, int64_t dim[4], int64_t str[4])
{
    int64_t row = 3 * s->NH * s->HD;
    dim[0] = s->B, dim[1] = s->NH, str[0] = s->T * row, str[1] = 3 * s->HD;
    if (transposed) dim[2] = s->HD, dim[3] = s->T, str[2] = 1, str[3] = row;
    else dim[2] = s->T, dim[3] = s->HD, str[2] = row, str[3] = 1;
}

static void out_view(const shape *s, int64_t dim[4], int64_t str[4])
{
    int64_t d[4] = {s->B, s->NH, s->T, s->HD}, st[4] = {s->T * s->NH * s->HD, s->HD, s->NH * s->HD, 1};
    memcpy(dim, d, sizeof d), memcpy(str, st, sizeof st);
}

static void row_view(const shape *s, int64_t dim[4], int64_t str[4])
{
    int64_t d[4] = {s->B, s->NH, s->T, 1}, st[4] = {s->NH * s->T, s->T, 1, 1};
    memcpy(dim, d, sizeof d), memcpy(str, st, sizeof st);
}

static void scores_view(const shape *s, int transposed, int64_t dim[4], int64_t str[4])
{
    int64_t T = s->T, d[4] = {s->B, s->NH, T, T};
    int64_t st[4] = {s->NH * T * T, T * T, transposed ? 1 : T, transposed ? T : 1};
    memcpy(dim, d, sizeof d), memcpy(str, st, sizeof st);
}

/* S = scale * A B^T with the causal mask applied after `shift` (the backward
 * subtracts lse first, as cuDNN's pattern has it). Returns the masked scores. */
static cudnnBackendDescriptor_t causal_scores(graph *g, const shape *s, cudnnBackendDescriptor_t q,
                                              cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t lse)
{
    int64_t sd[4], ss[4];
    scores_view(s, 0, sd, ss);
    cudnnBackendDescriptor_t raw = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    matmul(g, q, kt, raw);
    cudnnBackendDescriptor_t scaled = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, raw, scalar(g, U_SCALE), NULL, scaled, -1);
    if (lse) { /* backward: S - lse, then the mask */
        cudnnBackendDescriptor_t sub = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
        pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, scaled, lse, NULL, sub, -1);
        scaled = sub;
    }
    cudnnBackendDescriptor_t row = tensor(g, 0, CUDNN_DATA_INT32, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scaled, NULL, NULL, row, 2);
    cudnnBackendDescriptor_t col = tensor(g, 0, CUDNN_DATA_INT32, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scaled, NULL, NULL, col, 3);
    cudnnBackendDescriptor_t keep = tensor(g, 0, CUDNN_DATA_BOOLEAN, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    cudnnBackendDescriptor_t masked = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, scaled, scalar(g, U_NEGINF), keep, masked, -1);
    return masked;
}

static void build_forward(graph *g, const shape *s)
{
    int64_t d[4], st[4], rd[4], rs[4], sd[4], ss[4];
    row_view(s, rd, rs);
    scores_view(s, 0, sd, ss);
    qkv_view(s, 0, d, st);
    cudnnBackendDescriptor_t q = tensor(g, U_Q, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t v = tensor(g, U_V, CUDNN_DATA_BFLOAT16, d, st, 0);
    qkv_view(s, 1, d, st);
    cudnnBackendDescriptor_t kt = tensor(g, U_K, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t sc = causal_scores(g, s, q, kt, NULL);
    /* softmax with its statistics: lse = max + log(sum exp(S - max)) */
    cudnnBackendDescriptor_t mx = tensor(g, 0, CUDNN_DATA_FLOAT, rd, rs, 0);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, sc, mx);
    cudnnBackendDescriptor_t sub = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, sc, mx, NULL, sub, -1);
    cudnnBackendDescriptor_t ex = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sub, NULL, NULL, ex, -1);
    cudnnBackendDescriptor_t sum = tensor(g, 0, CUDNN_DATA_FLOAT, rd, rs, 0);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, ex, sum);
    cudnnBackendDescriptor_t lg = tensor(g, 0, CUDNN_DATA_FLOAT, rd, rs, 0);
    pointwise(g, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, NULL, NULL, lg, -1);
    cudnnBackendDescriptor_t lse = tensor(g, U_LSE, CUDNN_DATA_FLOAT, rd, rs, 0);
    pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, lg, NULL, lse, -1);
    cudnnBackendDescriptor_t p = tensor(g, 0, CUDNN_DATA_BFLOAT16, sd, ss, 0); /* bf16: the P V product's A */
    pointwise(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, ex, sum, NULL, p, -1);
    out_view(s, d, st);
    cudnnBackendDescriptor_t o = tensor(g, U_O, CUDNN_DATA_BFLOAT16, d, st, 0);
    matmul(g, p, v, o);
}

static void build_backward(graph *g, const shape *s, int atomic)
{
    int64_t d[4], st[4], rd[4], rs[4], sd[4], ss[4], td[4], ts[4];
    row_view(s, rd, rs);
    scores_view(s, 0, sd, ss);
    scores_view(s, 1, td, ts);
    qkv_view(s, 0, d, st);
    cudnnBackendDescriptor_t q = tensor(g, U_Q, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t dq = tensor(g, U_DQ, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t dk = tensor(g, U_DK, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t dv = tensor(g, U_DV, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t k = tensor(g, 0, CUDNN_DATA_BFLOAT16, d, st, 0); /* K itself, reshaped from K^T */
    qkv_view(s, 1, d, st);
    cudnnBackendDescriptor_t kt = tensor(g, U_K, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t vt = tensor(g, U_V, CUDNN_DATA_BFLOAT16, d, st, 0);
    out_view(s, d, st);
    cudnnBackendDescriptor_t o = tensor(g, U_O, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t dout = tensor(g, U_DO, CUDNN_DATA_BFLOAT16, d, st, 0);
    cudnnBackendDescriptor_t lse = tensor(g, U_LSE, CUDNN_DATA_FLOAT, rd, rs, 0);

    /* D = rowsum(dO * O), kept in a buffer of ours */
    int64_t hd[4] = {s->B, s->NH, s->T, s->HD}, hs[4] = {s->NH * s->T * s->HD, s->T * s->HD, s->HD, 1};
    cudnnBackendDescriptor_t doo = tensor(g, 0, CUDNN_DATA_FLOAT, hd, hs, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, o, NULL, doo, -1);
    cudnnBackendDescriptor_t dsum0 = tensor(g, 0, CUDNN_DATA_FLOAT, rd, rs, 0);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, doo, dsum0);
    cudnnBackendDescriptor_t dsum = tensor(g, U_DSUM, CUDNN_DATA_FLOAT, rd, rs, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dsum0, scalar(g, U_ONE), NULL, dsum, -1);

    /* P = exp(S - lse) */
    cudnnBackendDescriptor_t sc = causal_scores(g, s, q, kt, lse);
    cudnnBackendDescriptor_t p = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sc, NULL, NULL, p, -1);
    /* dV = P^T dO */
    cudnnBackendDescriptor_t pt = tensor(g, 0, CUDNN_DATA_BFLOAT16, td, ts, 0);
    reshape(g, p, pt);
    matmul(g, pt, dout, dv);
    /* dS = P (dO V^T - D) / sqrt(HD) */
    cudnnBackendDescriptor_t dp = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    matmul(g, dout, vt, dp);
    cudnnBackendDescriptor_t dps = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, dsum, NULL, dps, -1);
    cudnnBackendDescriptor_t dsp = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dps, p, NULL, dsp, -1);
    cudnnBackendDescriptor_t ds = tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dsp, scalar(g, U_SCALE), NULL, ds, -1);
    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dst = tensor(g, 0, CUDNN_DATA_BFLOAT16, td, ts, 0);
    reshape(g, ds, dst);
    matmul(g, dst, q, dk);
    reshape(g, kt, k);
    if (!atomic) { /* dQ = dS K: a plain product (cuDNN keeps dS in its workspace for it) */
        matmul(g, ds, k, dq);
        return;
    }
    /* dQ = dS K summed into an fp32 [B, NH, T, HD] buffer of ours by atomic adds
     * as each key tile's dS is made, then rounded into dq */
    cudnnBackendDescriptor_t acc = tensor(g, U_DQACC, CUDNN_DATA_FLOAT, hd, hs, 0);
    matmul(g, ds, k, acc);
    pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, NULL, NULL, dq, -1);
}

/* The graph of `kind`: the forward, or the backward with dQ by a plain product or by atomic adds. */
static void build(graph *g, const shape *s, int kind)
{
    if (kind == FORWARD) build_forward(g, s);
    else build_backward(g, s, kind == BACKWARD_ATOMIC);
}

/* ---- plans ---- */

typedef struct {
    cudnnBackendDescriptor_t plan;
    int64_t workspace;
    char desc[64]; /* "config I of N (engine E)": which of the heuristics' engine configs it runs */
} plan;

/* The engine an engine config runs (its global index), -1 when cuDNN does not say. */
static int64_t engine_of(cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t eng = NULL;
    int64_t n = 0, id = -1;
    if (L.createDesc(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return -1;
    if (L.getAttr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) != CUDNN_STATUS_SUCCESS ||
        L.getAttr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &id) != CUDNN_STATUS_SUCCESS)
        id = -1;
    L.destroyDesc(eng);
    return id;
}

/* Operation graph, heuristics, and an engine config's plan: with pick < 0 the
 * first config whose plan finalizes, else the pick-th of the heuristics' list
 * only. handle or deviceprop (deviceless) names the device. */
static int make_plan(graph *g, cudnnHandle_t handle, cudnnBackendDescriptor_t deviceprop, int pick, plan *out)
{
    if (g->failed) return 1;
    cudnnBackendDescriptor_t og = gnew(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "create operation graph");
    gset(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops, "graph ops");
    if (handle) gset(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
    gfin(g, og, "finalize operation graph");
    cudnnBackendDescriptor_t heur = gnew(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "create heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    gset(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og, "heur graph");
    gset(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heur mode");
    if (deviceprop)
        gset(g, heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &deviceprop,
             "heur device");
    gfin(g, heur, "finalize heuristics");
    int64_t n = 0;
    if (!g->failed)
        CK(g, L.getAttr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL),
           "count engine configs");
    if (g->failed) return 1;
    if (n <= 0) {
        g->failed = 1;
        snprintf(g->err, g->cap, "kernels/cuda/cudnn_sdpa.c: cuDNN %ld: no engine supports the attention graph",
                 L.version);
        return 1;
    }
    if (n > MAX_CONFIGS) n = MAX_CONFIGS;
    cudnnBackendDescriptor_t cfg[MAX_CONFIGS];
    for (int64_t i = 0; i < n; i++) cfg[i] = gnew(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "create engine config");
    int64_t got = 0;
    if (!g->failed)
        CK(g, L.getAttr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfg),
           "get engine configs");
    if (g->failed) return 1;
    if (pick >= got) {
        g->failed = 1;
        snprintf(g->err, g->cap, "kernels/cuda/cudnn_sdpa.c: cuDNN %ld: config %d asked for, the heuristics offer %lld",
                 L.version, pick, (long long)got);
        return 1;
    }
    char first[512] = "";
    for (int64_t i = pick < 0 ? 0 : pick; i < (pick < 0 ? got : pick + 1); i++) {
        snprintf(out->desc, sizeof out->desc, "config %lld of %lld (engine %lld)", (long long)i, (long long)got,
                 (long long)engine_of(cfg[i]));
        cudnnBackendDescriptor_t p = NULL;
        cudnnStatus_t st = L.createDesc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
        if (st == CUDNN_STATUS_SUCCESS)
            st = L.setAttr(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (st == CUDNN_STATUS_SUCCESS && handle)
            st = L.setAttr(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        if (st == CUDNN_STATUS_SUCCESS && deviceprop)
            st = L.setAttr(p, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &deviceprop);
        if (st == CUDNN_STATUS_SUCCESS) st = L.finalize(p);
        if (st == CUDNN_STATUS_SUCCESS) {
            int64_t ws = 0, cnt = 0;
            L.getAttr(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws);
            out->plan = p, out->workspace = ws;
            return 0;
        }
        if (st == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER && deviceprop && !handle) {
            /* deviceless on a machine without a GPU driver: the engine took the
             * graph and compiled its kernel; only loading it needs a driver */
            out->plan = p, out->workspace = 0;
            return 0;
        }
        if (!first[0]) {
            char last[256] = "";
            L.lastError(last, sizeof last);
            snprintf(first, sizeof first, "%s: %s", L.errorString(st), last);
        }
        if (p) L.destroyDesc(p);
    }
    g->failed = 1;
    if (got == 0) /* the heuristics dropped every engine they had named: a prerequisite is missing */
        snprintf(g->err, g->cap,
                 "kernels/cuda/cudnn_sdpa.c: cuDNN %ld: its %lld attention engines are unusable here; they compile "
                 "their kernels at run time and need libcuda.so.1 (a GPU driver, or for a check without a GPU the "
                 "CUDA toolkit's stubs/libcuda.so)", L.version, (long long)n);
    else if (pick >= 0)
        snprintf(g->err, g->cap, "kernels/cuda/cudnn_sdpa.c: cuDNN %ld: %s does not finalize: %s", L.version,
                 out->desc, first);
    else
        snprintf(g->err, g->cap,
                 "kernels/cuda/cudnn_sdpa.c: cuDNN %ld: none of %lld engine configs finalizes (first: %s)", L.version,
                 (long long)got, first);
    return 1;
}

/* ---- deviceless check ---- */

static cudnnBackendDescriptor_t deviceprop_from(graph *g, const char *json)
{
    cudnnBackendDescriptor_t dp = gnew(g, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "create device properties");
    gset(g, dp, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, (int64_t)strlen(json) + 1, json,
         "device properties json");
    gfin(g, dp, "finalize device properties");
    return dp;
}

/* Deviceless: the graph of `kind` and its plan for engine config `pick` (as
 * make_plan takes it) against the device described, made and let go. 0, or 1
 * with err; desc gets the config's "config I of N (engine E)" ("" when the
 * heuristics' list was not reached or has no such config). */
static int deviceless_plan(const char *deviceprop_json, const shape *s, int kind, int pick, char *desc, size_t dcap,
                           char *err, size_t cap)
{
    graph g = {.next_virtual_uid = U_FIRST_VIRTUAL, .err = err, .cap = cap};
    cudnnBackendDescriptor_t dp = deviceprop_from(&g, deviceprop_json);
    build(&g, s, kind);
    plan p = {0};
    int rc = make_plan(&g, NULL, dp, pick, &p);
    if (!rc) L.destroyDesc(p.plan);
    gfree(&g);
    snprintf(desc, dcap, "%s", p.desc);
    return rc;
}

int kcudnn_plan_check(const char *deviceprop_json, int B, int T, int NH, int HD, char *err, size_t cap)
{
    if (!load()) {
        snprintf(err, cap, "%s", why_);
        return 1;
    }
    if (L.version < 90800) {
        snprintf(err, cap, "cuDNN %ld: deviceless plans need 9.8 or newer", L.version);
        return 1;
    }
    shape s = {B, T, NH, HD};
    static const char *const names[] = {"forward", "backward", "backward (dQ by atomic adds)"};
    for (int kind = FORWARD; kind <= BACKWARD_ATOMIC; kind++) {
        char desc[64];
        if (deviceless_plan(deviceprop_json, &s, kind, -1, desc, sizeof desc, err, cap)) {
            char tmp[600];
            snprintf(tmp, sizeof tmp, "%s", err);
            snprintf(err, cap, "%s graph: %s", names[kind], tmp);
            return 1;
        }
    }
    err[0] = '\0';
    return 0;
}

int kcudnn_plan_configs(const char *deviceprop_json, int B, int T, int NH, int HD, int kind, char *list, size_t cap)
{
    list[0] = '\0';
    if (!load() || L.version < 90800 || kind < FORWARD || kind > BACKWARD_ATOMIC) return -1;
    shape s = {B, T, NH, HD};
    int ok = 0;
    size_t at = 0;
    for (int pick = 0; pick < MAX_CONFIGS; pick++) {
        char err[600], desc[64];
        int rc = deviceless_plan(deviceprop_json, &s, kind, pick, desc, sizeof desc, err, sizeof err);
        if (rc && !desc[0]) break; /* past the heuristics' list (or the graph failed before it) */
        ok += rc == 0;
        if (at < cap) at += (size_t)snprintf(list + at, cap - at, "%s%s%s", at ? "; " : "", desc, rc ? " refused" : "");
    }
    return ok;
}

char *kcudnn_deviceprop_json(int device, char *err, size_t cap)
{
    if (!load()) {
        snprintf(err, cap, "%s", why_);
        return NULL;
    }
    graph g = {.err = err, .cap = cap};
    cudnnBackendDescriptor_t dp = gnew(&g, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "create device properties");
    int32_t id = device;
    gset(&g, dp, CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &id, "device id");
    gfin(&g, dp, "finalize device properties");
    int64_t n = 0;
    char *json = NULL;
    if (!g.failed)
        CK(&g, L.getAttr(dp, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n, NULL), "json size");
    if (!g.failed && n > 0 && (json = calloc((size_t)n + 1, 1)))
        CK(&g, L.getAttr(dp, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &n, json), "json");
    gfree(&g);
    if (g.failed) {
        free(json);
        return NULL;
    }
    return json;
}

/* ---- the live path: plans per shape, kept for the process ---- */

enum { MAX_PLANS = 48 };

static struct {
    cudnnHandle_t handle;
    struct {
        shape s;
        int kind; /* FORWARD, BACKWARD, BACKWARD_ATOMIC */
        int pick; /* the engine config asked for (kcudnn_attention_pick; -1: the first that finalizes) */
        plan p;
        int bad; /* cuDNN refused this shape: the own kernels run it */
    } plans[MAX_PLANS];
    int nplans;
    void *ws;
    size_t ws_bytes;
    void *dsum;
    size_t dsum_bytes;
    void *dqacc; /* BACKWARD_ATOMIC's dQ sums */
    size_t dqacc_bytes;
    int atomic_dq;     /* kcudnn_attention_atomic_dq */
    long atomic_plans; /* BACKWARD_ATOMIC plans built */
    int pick1[3];      /* kcudnn_attention_pick's index + 1, by kind (0: the first that finalizes) */
    char last[3][80];  /* the config the last plan built for each kind runs */
} R;

size_t kcudnn_workspace_bytes(void) { return R.ws_bytes + R.dsum_bytes + R.dqacc_bytes; }

void kcudnn_attention_atomic_dq(int on) { R.atomic_dq = on != 0; }
long kcudnn_attention_atomic_plans(void) { return R.atomic_plans; }

void kcudnn_attention_pick(int kind, int index)
{
    if (kind >= FORWARD && kind <= BACKWARD_ATOMIC) R.pick1[kind] = index < 0 ? 0 : index + 1;
}

const char *kcudnn_attention_plan_desc(int kind)
{
    return kind >= FORWARD && kind <= BACKWARD_ATOMIC ? R.last[kind] : "";
}

static long moves; /* buffers replaced by grow() */
long kcudnn_buffers_moved(void) { return moves; }

/* The backward's D = rowsum(dO * O), [B, NH, T] in fp32, kept in R.dsum. */
static size_t dsum_size(const shape *s) { return (size_t)s->B * s->NH * s->T * sizeof(float); }
/* BACKWARD_ATOMIC's dQ sums, [B, NH, T, HD] in fp32, kept in R.dqacc. */
static size_t dqacc_size(const shape *s) { return (size_t)s->B * s->NH * s->T * s->HD * sizeof(float); }

static int grow(void **p, size_t *have, size_t want)
{
    if (want <= *have) return 0;
    if (*p) cudaFree(*p);
    *p = NULL, *have = 0;
    moves++;
    if (cudaMalloc(p, want) != cudaSuccess) {
        cudaGetLastError();
        return not_taken("cannot allocate %zu bytes of cuDNN workspace", want);
    }
    *have = want;
    return 0;
}

static plan *plan_for(const shape *s, int kind)
{
    int pick = R.pick1[kind] - 1;
    for (int i = 0; i < R.nplans; i++)
        if (!memcmp(&R.plans[i].s, s, sizeof *s) && R.plans[i].kind == kind && R.plans[i].pick == pick)
            return R.plans[i].bad ? NULL : &R.plans[i].p;
    if (R.nplans == MAX_PLANS) {
        not_taken("more than %d attention shapes", MAX_PLANS);
        return NULL;
    }
    if (!R.handle && L.create(&R.handle) != CUDNN_STATUS_SUCCESS) {
        R.handle = NULL;
        not_taken("cudnnCreate failed");
        return NULL;
    }
    char err[600];
    graph g = {.next_virtual_uid = U_FIRST_VIRTUAL, .err = err, .cap = sizeof err};
    build(&g, s, kind);
    int i = R.nplans++;
    R.plans[i].s = *s, R.plans[i].kind = kind, R.plans[i].pick = pick;
    int rc = make_plan(&g, R.handle, NULL, pick, &R.plans[i].p);
    char desc[sizeof R.plans[i].p.desc];
    memcpy(desc, R.plans[i].p.desc, sizeof desc);
    snprintf(R.last[kind], sizeof R.last[kind], "%s%s", desc, rc ? " refused" : "");
    if (rc) {
        gfree(&g);
        R.plans[i].bad = 1;
        fprintf(stderr, "%s\nkernels/cuda: attention %s B=%lld T=%lld heads=%lld dim=%lld %s\n", err,
                kind == FORWARD ? "forward" : "backward", (long long)s->B, (long long)s->T, (long long)s->NH,
                (long long)s->HD,
                kind == BACKWARD_ATOMIC ? "sums dQ by a plain product instead of atomic adds (deterministic)"
                                        : "runs on atoll's flash kernels");
        not_taken("%s", err);
        return NULL;
    }
    R.atomic_plans += kind == BACKWARD_ATOMIC;
    /* The graph's descriptors stay for the process, like the plan that was
     * built from them (cuDNN's frontend keeps them alive beside its plans too). */
    return &R.plans[i].p;
}

/* The backward's plan for this shape: dQ by atomic adds when asked for and
 * cuDNN takes that graph, else by a plain product. */
static plan *backward_plan(const shape *s, int atomic, int *kind)
{
    plan *p = NULL;
    if (atomic && (p = plan_for(s, BACKWARD_ATOMIC))) {
        *kind = BACKWARD_ATOMIC;
        return p;
    }
    *kind = BACKWARD;
    return plan_for(s, BACKWARD);
}

static int applicable(int B, int T, int NH, int NG, int HD, const struct k_dropout *drop)
{
    if (drop && drop->p > 0.0f) return not_taken("dropout on the probabilities (cuDNN's masks differ from ours)");
    if (NG != NH) return not_taken("grouped-query attention (Q, K, V are not strided views of qkv)");
    if (HD % 8 || HD > 256 || B <= 0 || T <= 0 || NH <= 0) return not_taken("head dim %d", HD);
    if (!load()) return 1;
    return 0;
}

/* The tensors are declared 16-byte aligned (what cuDNN's kernels load by). */
static int misaligned(int n, const void *const *ptrs)
{
    for (int i = 0; i < n; i++)
        if ((uintptr_t)ptrs[i] % 16) return not_taken("a buffer not aligned to 16 bytes");
    return 0;
}

static int run(void *stream, plan *p, int n, const int64_t *uids, void **ptrs)
{
    if (p->workspace > 0 && grow(&R.ws, &R.ws_bytes, (size_t)p->workspace)) return 1;
    if (L.setStream(R.handle, (cudaStream_t)stream) != CUDNN_STATUS_SUCCESS) return not_taken("cudnnSetStream failed");
    char err[600];
    graph g = {.err = err, .cap = sizeof err};
    cudnnBackendDescriptor_t vp = gnew(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "create variant pack");
    gset(&g, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "variant uids");
    gset(&g, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs, "variant pointers");
    gset(&g, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &R.ws, "variant workspace");
    gfin(&g, vp, "finalize variant pack");
    if (!g.failed) CK(&g, L.execute(R.handle, p->plan, vp), "execute");
    gfree(&g);
    if (g.failed) {
        fprintf(stderr, "%s\n", err);
        return not_taken("%s", err);
    }
    why_[0] = '\0';
    return 0;
}

int kcudnn_attention_forward_bf16(void *stream, uint16_t *out, float *lse, const uint16_t *qkv, int B, int T,
                                  int NH, int NG, int HD, const struct k_dropout *drop)
{
    if (applicable(B, T, NH, NG, HD, drop)) return 1;
    const void *bufs[] = {qkv, out, lse};
    if (misaligned(3, bufs)) return 1;
    shape s = {B, T, NH, HD};
    plan *p = plan_for(&s, FORWARD);
    if (!p) return 1;
    float scale = 1.0f / sqrtf((float)HD), neginf = -INFINITY;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_LSE, U_SCALE, U_NEGINF};
    void *ptrs[] = {(void *)qkv, (void *)(qkv + HD), (void *)(qkv + 2 * HD), out, lse, &scale, &neginf};
    return run(stream, p, 7, uids, ptrs);
}

int kcudnn_attention_backward_bf16(void *stream, uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv,
                                   const uint16_t *out, const float *lse, int B, int T, int NH, int NG, int HD,
                                   const struct k_dropout *drop)
{
    if (applicable(B, T, NH, NG, HD, drop)) return 1;
    const void *bufs[] = {dqkv, dout, qkv, out, lse};
    if (misaligned(5, bufs)) return 1;
    shape s = {B, T, NH, HD};
    int kind;
    plan *p = backward_plan(&s, R.atomic_dq, &kind);
    if (!p) return 1;
    if (grow(&R.dsum, &R.dsum_bytes, dsum_size(&s))) return 1;
    if (kind == BACKWARD_ATOMIC) {
        if (grow(&R.dqacc, &R.dqacc_bytes, dqacc_size(&s))) return 1;
        /* cuDNN from 9.6 clears the sums itself; before, the caller did */
        if (L.version < 90600 && cudaMemsetAsync(R.dqacc, 0, dqacc_size(&s), (cudaStream_t)stream) != cudaSuccess) {
            (void)cudaGetLastError();
            return not_taken("cudaMemsetAsync of the dQ sums failed");
        }
    }
    float scale = 1.0f / sqrtf((float)HD), neginf = -INFINITY, one = 1.0f;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_DO, U_LSE, U_DQ, U_DK, U_DV, U_DSUM, U_SCALE, U_NEGINF, U_ONE, U_DQACC};
    void *ptrs[] = {(void *)qkv, (void *)(qkv + HD), (void *)(qkv + 2 * HD), (void *)out, (void *)dout,
                    (void *)lse, dqkv, dqkv + HD, dqkv + 2 * HD, R.dsum, &scale, &neginf, &one, R.dqacc};
    return run(stream, p, kind == BACKWARD_ATOMIC ? 14 : 13, uids, ptrs);
}

int kcudnn_attention_workspace(int B, int T, int NH, int NG, int HD, const struct k_dropout *drop, int atomic,
                               size_t *bytes)
{
    *bytes = 0;
    if (applicable(B, T, NH, NG, HD, drop)) return 1;
    shape s = {B, T, NH, HD};
    int kind;
    plan *f = plan_for(&s, FORWARD), *b = f ? backward_plan(&s, atomic, &kind) : NULL;
    if (!b) return 1;
    int64_t ws = f->workspace > b->workspace ? f->workspace : b->workspace;
    *bytes = (size_t)ws + dsum_size(&s) + (kind == BACKWARD_ATOMIC ? dqacc_size(&s) : 0);
    return 0;
}
