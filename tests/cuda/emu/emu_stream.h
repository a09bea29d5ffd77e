/* emu_stream: the streams atoll-train-emu's C runtime makes (cudart_emu.c),
 * which the NCCL backend creates for its collectives, and the work the
 * emulated NCCL (nccl_emu.c) queues on them.
 *
 * Such a stream runs its work on a thread of its own, in order, and later than
 * the host queues it, as a GPU runs a stream behind the host: an item runs when
 * the host waits for it (an event recorded after it that another stream or the
 * host waits on, or a synchronisation of the stream) or EMU_STREAM_LAG_MS after
 * it was queued, whichever is first. So a kernel queued on the kernels' stream
 * without waiting for a collective it depends on runs before the collective
 * does, and reads or overwrites what the collective has not yet handled, where
 * on a GPU it would race. The kernels' stream (emu_cuda.h) runs its work as it
 * is queued: an event recorded on it is complete at once. */
#ifndef ATOLL_EMU_STREAM_H
#define ATOLL_EMU_STREAM_H

#include <cuda_runtime_api.h>

#define EMU_STREAM_LAG_MS 20

#ifdef __cplusplus
extern "C" {
#endif

/* Queues fn(arg) on s. A stream not made by cudaStreamCreateWithFlags here
 * (the kernels') runs it now. fn owns arg. */
void emu_stream_enqueue(cudaStream_t s, void (*fn)(void *), void *arg);
/* Returns when everything queued on s so far has run. */
void emu_stream_drain(cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
