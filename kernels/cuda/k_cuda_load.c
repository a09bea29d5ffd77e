/* k_cuda_load: the k_cuda.h API for programs, forwarded to the CUDA backend
 * (the .cu files here), which is built as its own library, libatoll-cuda.so,
 * beside the programs, and opened the first time one of these is called.
 *
 * Why: the backend links cuBLAS and cuBLASLt, and libcublasLt's initialisation
 * alone costs about 0.4 s of CPU in every process that loads it (an empty
 * program linked to it: 0.39 s). A CPU run, every test rank and every rank an
 * elastic restart starts on CPU nodes paid it without using it; now only a
 * process that asks for the CUDA backend does.
 *
 * The library is looked for in the directory of the running program, then by
 * the dynamic linker's own search (LD_LIBRARY_PATH). When it cannot be opened,
 * k_cuda() returns NULL and k_cuda_status() says why, as for a missing device. */
#include "k_cuda.h"
#include "kernels.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define K_CUDA_LIB "libatoll-cuda.so"

static struct {
    void *h;
    char why[PATH_MAX + 512];
    const k_ops *(*k_cuda)(void);
    const char *(*status)(void);
    void *(*stream)(void);
    int (*fused_attention)(int, char *, size_t);
    void (*attention_calls)(long *, long *);
    size_t (*ws_need)(int, int, int, int, int, float, int);
    void (*atomic_dq)(int);
    long (*atomic_plans)(void);
    size_t (*ws_held)(void);
    void *(*host_alloc)(size_t);
    void (*host_free)(void *);
    void (*timer_begin)(void);
    float (*timer_end_ms)(void);
    size_t (*reserved)(void);
    size_t (*device_used)(void);
    void (*gemm_tuning)(int);
    char *(*gemm_text)(void);
    int (*gemm_load)(const char *, char *, size_t);
    void (*gemm_choices)(k_cuda_gemm_stats *);
    char *(*gemm_report)(void);
    long (*host_waits)(void);
    int (*graph_begin)(char *, size_t);
    k_cuda_graph *(*graph_end)(char *, size_t);
    int (*graph_launch)(k_cuda_graph *);
    void (*graph_free)(k_cuda_graph *);
    int (*overlap_wgrad)(int);
    long (*overlap_wgrad_calls)(void);
} M;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void open_backend(void)
{
    char path[PATH_MAX], first[PATH_MAX + 256] = "";
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    void *h = NULL;
    if (n > 0) {
        path[n] = '\0';
        char *dir_end = strrchr(path, '/');
        if (dir_end && (size_t)(dir_end + 1 - path) + sizeof K_CUDA_LIB <= sizeof path) {
            memcpy(dir_end + 1, K_CUDA_LIB, sizeof K_CUDA_LIB);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (!h) snprintf(first, sizeof first, "%s", dlerror());
        }
    }
    if (!h) h = dlopen(K_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(M.why, sizeof M.why, "the CUDA backend could not be loaded (%s); it is built beside atoll-train as "
                 K_CUDA_LIB, first[0] ? first : dlerror());
        return;
    }
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        { (void **)&M.k_cuda, "k_cuda" },
        { (void **)&M.status, "k_cuda_status" },
        { (void **)&M.stream, "k_cuda_stream" },
        { (void **)&M.fused_attention, "k_cuda_fused_attention" },
        { (void **)&M.attention_calls, "k_cuda_attention_calls" },
        { (void **)&M.ws_need, "k_cuda_attention_workspace_need" },
        { (void **)&M.atomic_dq, "k_cuda_attention_atomic_dq" },
        { (void **)&M.atomic_plans, "k_cuda_attention_atomic_plans" },
        { (void **)&M.ws_held, "k_cuda_attention_workspace_held" },
        { (void **)&M.host_alloc, "k_cuda_host_alloc" },
        { (void **)&M.host_free, "k_cuda_host_free" },
        { (void **)&M.timer_begin, "k_cuda_timer_begin" },
        { (void **)&M.timer_end_ms, "k_cuda_timer_end_ms" },
        { (void **)&M.reserved, "k_cuda_reserved_bytes" },
        { (void **)&M.device_used, "k_cuda_device_used_bytes" },
        { (void **)&M.gemm_tuning, "k_cuda_gemm_tuning" },
        { (void **)&M.gemm_text, "k_cuda_gemm_choices_text" },
        { (void **)&M.gemm_load, "k_cuda_gemm_choices_load" },
        { (void **)&M.gemm_choices, "k_cuda_gemm_choices" },
        { (void **)&M.gemm_report, "k_cuda_gemm_tuning_report" },
        { (void **)&M.host_waits, "k_cuda_host_waits" },
        { (void **)&M.graph_begin, "k_cuda_graph_begin" },
        { (void **)&M.graph_end, "k_cuda_graph_end" },
        { (void **)&M.graph_launch, "k_cuda_graph_launch" },
        { (void **)&M.graph_free, "k_cuda_graph_free" },
        { (void **)&M.overlap_wgrad, "k_cuda_overlap_wgrad" },
        { (void **)&M.overlap_wgrad_calls, "k_cuda_overlap_wgrad_calls" },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(h, syms[i].name);
        if (!*syms[i].fn) {
            snprintf(M.why, sizeof M.why, "the CUDA backend " K_CUDA_LIB " lacks %s: it is from another build",
                     syms[i].name);
            dlclose(h);
            return;
        }
    }
    M.h = h;
}

static int backend(void)
{
    pthread_once(&once, open_backend);
    return M.h != NULL;
}

/* Without the backend: why, into a caller's err; -1. */
static int no_backend(char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", M.why);
    return -1;
}

const k_ops *k_cuda(void) { return backend() ? M.k_cuda() : NULL; }
const char *k_cuda_status(void) { return backend() ? M.status() : M.why; }
void *k_cuda_stream(void) { return backend() ? M.stream() : NULL; }

int k_cuda_fused_attention(int mode, char *err, size_t errlen)
{
    return backend() ? M.fused_attention(mode, err, errlen) : no_backend(err, errlen);
}

void k_cuda_attention_calls(long *fused, long *flash)
{
    if (backend()) {
        M.attention_calls(fused, flash);
        return;
    }
    *fused = *flash = 0;
}

size_t k_cuda_attention_workspace_need(int B, int T, int NH, int NG, int HD, float attention_dropout, int atomic_dq)
{
    return backend() ? M.ws_need(B, T, NH, NG, HD, attention_dropout, atomic_dq) : 0;
}
void k_cuda_attention_atomic_dq(int on)
{
    if (backend()) M.atomic_dq(on);
}
long k_cuda_attention_atomic_plans(void) { return backend() ? M.atomic_plans() : 0; }
size_t k_cuda_attention_workspace_held(void) { return backend() ? M.ws_held() : 0; }
void *k_cuda_host_alloc(size_t bytes) { return backend() ? M.host_alloc(bytes) : NULL; }
void k_cuda_host_free(void *p)
{
    if (p && backend()) M.host_free(p);
}
void k_cuda_timer_begin(void)
{
    if (backend()) M.timer_begin();
}
float k_cuda_timer_end_ms(void) { return backend() ? M.timer_end_ms() : 0.0f; }
long k_cuda_host_waits(void) { return backend() ? M.host_waits() : 0; }
int k_cuda_graph_begin(char *err, size_t errlen)
{
    return backend() ? M.graph_begin(err, errlen) : no_backend(err, errlen);
}
k_cuda_graph *k_cuda_graph_end(char *err, size_t errlen)
{
    if (backend()) return M.graph_end(err, errlen);
    no_backend(err, errlen);
    return NULL;
}
int k_cuda_graph_launch(k_cuda_graph *g) { return backend() ? M.graph_launch(g) : 1; }
void k_cuda_graph_free(k_cuda_graph *g)
{
    if (g && backend()) M.graph_free(g);
}
int k_cuda_overlap_wgrad(int on) { return backend() ? M.overlap_wgrad(on) : 0; }
long k_cuda_overlap_wgrad_calls(void) { return backend() ? M.overlap_wgrad_calls() : 0; }
size_t k_cuda_reserved_bytes(void) { return backend() ? M.reserved() : 0; }
size_t k_cuda_device_used_bytes(void) { return backend() ? M.device_used() : 0; }
void k_cuda_gemm_tuning(int on)
{
    if (backend()) M.gemm_tuning(on);
}
char *k_cuda_gemm_choices_text(void) { return backend() ? M.gemm_text() : NULL; }
char *k_cuda_gemm_tuning_report(void) { return backend() ? M.gemm_report() : NULL; }
int k_cuda_gemm_choices_load(const char *path, char *err, size_t errlen)
{
    return backend() ? M.gemm_load(path, err, errlen) : no_backend(err, errlen);
}
void k_cuda_gemm_choices(k_cuda_gemm_stats *s)
{
    if (backend()) {
        M.gemm_choices(s);
        return;
    }
    memset(s, 0, sizeof *s);
}
