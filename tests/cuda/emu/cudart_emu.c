/* cudart_emu: what atoll-train-emu needs beside the emulated backend.
 *
 * atoll-train-emu is atoll-train linked with the CUDA backend compiled for the
 * CPU emulation (tests/cuda/CMakeLists.txt) instead of the real one: its
 * `--device cuda` gets that table. The engine itself makes a few CUDA runtime
 * calls outside the table (picking the rank's device, its free memory for the
 * up-front memory check, and the NCCL backend's streams, events and scratch);
 * they are answered here. Defined in the program, these take the place of the
 * runtime library's.
 *
 * One emulated device by default, so every rank of a layout shares it and
 * stages its buffers through the host transport, as ranks sharing one GPU do.
 * ATOLL_EMU_GPUS=N makes N devices visible, so ranks (processes, each with its
 * own emulated memory) take one each and the engine picks NCCL, here the
 * emulated one (nccl_emu.c). */
#include <cuda_runtime_api.h>

#include "emu_device.h"
#include "emu_stream.h"
#include "errf.h"
#include "kernels.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const k_ops *k_cuda_emu(void);

const k_ops *k_cuda(void) { return k_cuda_emu(); }

cudaError_t cudaGetDeviceCount(int *count)
{
    const char *n = getenv("ATOLL_EMU_GPUS");
    *count = n && atoi(n) > 0 ? atoi(n) : 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    int n;
    cudaGetDeviceCount(&n);
    return device >= 0 && device < n ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

/* The emulated device's memory (emu_device.h), less what cudaMalloc holds, to
 * the memory check. */
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    emu_device_mem_info(free_b, total_b);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = emu_device_alloc(n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
    emu_device_free(p);
    return cudaSuccess;
}

/* ---- streams that run behind the host (emu_stream.h) ---- */

typedef struct emu_work {
    void (*fn)(void *);
    void *arg;
    double due; /* runs by then even if nobody waits for it */
    struct emu_work *next;
} emu_work;

typedef struct emu_astream {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    emu_work *head, *tail;
    uint64_t queued, done, wanted; /* items queued, run, and waited for */
    int stop;
    struct emu_astream *next;
} emu_astream;

typedef struct {
    emu_astream *s; /* NULL: complete (recorded on the kernels' stream, or never) */
    uint64_t seq;   /* complete once s has run this many items */
    unsigned flags;
    int recorded;   /* ever */
    uint64_t gen;   /* records so far: a stamp queued for an earlier one is not this one's */
    double t;       /* when its stream got there (atoll_mono_s); < 0 until then */
} emu_event;

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static emu_astream *streams;

/* One of ours, or NULL (the kernels' stream, or any other). */
static emu_astream *astream(cudaStream_t h)
{
    pthread_mutex_lock(&streams_mu);
    emu_astream *s = streams;
    while (s && (void *)s != (void *)h) s = s->next;
    pthread_mutex_unlock(&streams_mu);
    return s;
}

static void *stream_main(void *arg)
{
    emu_astream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        emu_work *w = s->head;
        uint64_t seq = s->done + 1;
        struct timespec due = { (time_t)w->due, (long)((w->due - (double)(time_t)w->due) * 1e9) };
        while (!s->stop && s->wanted < seq && atoll_mono_s() < w->due) pthread_cond_timedwait(&s->cv, &s->mu, &due);
        pthread_mutex_unlock(&s->mu);
        w->fn(w->arg);
        pthread_mutex_lock(&s->mu);
        s->head = w->next;
        if (!s->head) s->tail = NULL;
        s->done = seq;
        free(w);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The host waits until s has run `seq` items, which run now. */
static void wait_for(emu_astream *s, uint64_t seq)
{
    pthread_mutex_lock(&s->mu);
    if (s->wanted < seq) s->wanted = seq;
    pthread_cond_broadcast(&s->cv);
    while (s->done < seq) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void emu_stream_enqueue(cudaStream_t h, void (*fn)(void *), void *arg)
{
    emu_astream *s = astream(h);
    emu_work *w = s ? malloc(sizeof *w) : NULL;
    if (!w) { /* the kernels' stream (or no memory: run in order now) */
        if (s) emu_stream_drain(h);
        fn(arg);
        return;
    }
    *w = (emu_work){ fn, arg, atoll_mono_s() + EMU_STREAM_LAG_MS * 1e-3, NULL };
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = w;
    else s->head = w;
    s->tail = w;
    s->queued++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void emu_stream_drain(cudaStream_t h)
{
    emu_astream *s = astream(h);
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    uint64_t q = s->queued;
    pthread_mutex_unlock(&s->mu);
    wait_for(s, q);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *h, unsigned flags)
{
    (void)flags;
    emu_astream *s = calloc(1, sizeof *s);
    if (!s) return cudaErrorMemoryAllocation;
    pthread_condattr_t ca; /* timed waits on atoll_mono_s()'s clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&s->thread, NULL, stream_main, s)) {
        free(s);
        return cudaErrorMemoryAllocation;
    }
    pthread_mutex_lock(&streams_mu);
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&streams_mu);
    *h = (cudaStream_t)(void *)s;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    emu_astream *s = astream(h);
    if (!s) return cudaSuccess;
    pthread_mutex_lock(&streams_mu);
    emu_astream **p = &streams;
    while (*p != s) p = &(*p)->next;
    *p = s->next;
    pthread_mutex_unlock(&streams_mu);
    pthread_mutex_lock(&s->mu); /* as CUDA: the work queued still runs */
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    emu_stream_drain(h);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    emu_event *ev = calloc(1, sizeof *ev);
    if (!ev) return cudaErrorMemoryAllocation;
    ev->flags = flags;
    *e = (cudaEvent_t)(void *)ev;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

/* A timing event is stamped when its stream runs the item queued with it:
 * at once on the kernels' stream. The host reads the stamp only once the event
 * is complete, which orders it after the stream thread's write. */
typedef struct {
    emu_event *ev;
    uint64_t gen;
} emu_stamp;

static void stamp_item(void *arg)
{
    emu_stamp *st = arg;
    double now = atoll_mono_s();
    if (__atomic_load_n(&st->ev->gen, __ATOMIC_ACQUIRE) == st->gen) __atomic_store(&st->ev->t, &now, __ATOMIC_RELEASE);
    free(st);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h)
{
    emu_event *ev = (emu_event *)(void *)e;
    emu_astream *s = astream(h);
    ev->s = s;
    ev->recorded = 1;
    __atomic_add_fetch(&ev->gen, 1, __ATOMIC_ACQ_REL); /* a stamp still queued for an earlier record: not this one's */
    double t = s ? -1.0 : atoll_mono_s();
    __atomic_store(&ev->t, &t, __ATOMIC_RELEASE);
    if (!s) return cudaSuccess;
    if (!(ev->flags & cudaEventDisableTiming)) {
        emu_stamp *st = malloc(sizeof *st);
        if (!st) return cudaErrorMemoryAllocation;
        *st = (emu_stamp){ ev, ev->gen };
        emu_stream_enqueue(h, stamp_item, st);
    }
    pthread_mutex_lock(&s->mu);
    ev->seq = s->queued;
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    emu_event *ev = (emu_event *)(void *)e;
    if (ev->s) wait_for(ev->s, ev->seq);
    return cudaSuccess;
}

/* As CUDA: both events recorded, both with timing, both complete. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    emu_event *ea = (emu_event *)(void *)a, *eb = (emu_event *)(void *)b;
    if (!ea->recorded || !eb->recorded || (ea->flags | eb->flags) & cudaEventDisableTiming)
        return cudaErrorInvalidResourceHandle;
    for (int i = 0; i < 2; i++) {
        emu_event *ev = i ? eb : ea;
        if (!ev->s) continue;
        pthread_mutex_lock(&ev->s->mu);
        int done = ev->s->done >= ev->seq;
        pthread_mutex_unlock(&ev->s->mu);
        if (!done) return cudaErrorNotReady;
    }
    *ms = (float)((eb->t - ea->t) * 1e3);
    return cudaSuccess;
}

/* Waits for what the event marks: on one of our streams an item of its own
 * (it starts when the event's stream has got there); on the kernels' stream,
 * whose work runs as it is queued, the host. */
typedef struct {
    emu_astream *s;
    uint64_t seq;
} emu_wait;

static void wait_item(void *arg)
{
    emu_wait *w = arg;
    wait_for(w->s, w->seq);
    free(w);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    emu_event *ev = (emu_event *)(void *)e;
    if (!ev->s || (void *)ev->s == (void *)h) return cudaSuccess;
    emu_astream *s = astream(h);
    if (!s) {
        wait_for(ev->s, ev->seq);
        return cudaSuccess;
    }
    emu_wait *w = malloc(sizeof *w);
    if (!w) return cudaErrorMemoryAllocation;
    *w = (emu_wait){ ev->s, ev->seq };
    emu_stream_enqueue(h, wait_item, w);
    return cudaSuccess;
}
