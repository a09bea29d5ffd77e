/* emu_device: the emulated device's size and the memory allocated on it, for
 * the emulated kernels' runtime (emu_cuda.h, C++) and atoll-train-emu's
 * (cudart_emu.c, C). Its memory is the host's; cudaMemGetInfo reports the
 * size less what cudaMalloc holds, so the engine's memory check and its
 * peak-memory figures see an allocating run as on a GPU. */
#ifndef ATOLL_EMU_DEVICE_H
#define ATOLL_EMU_DEVICE_H

#include <stddef.h>

#define EMU_DEVICE_BYTES ((size_t)16 << 30)

#ifdef __cplusplus
extern "C" {
#endif

/* cudaMalloc: `bytes` (at least 1) of NaN bytes, so reads of unwritten memory
 * show; NULL when out of host memory. cudaFree: p (NULL or from here). */
void *emu_device_alloc(size_t bytes);
void emu_device_free(void *p);
/* cudaMemGetInfo's answer, for both runtimes: the device's size, less what
 * cudaMalloc holds now. */
void emu_device_mem_info(size_t *free_b, size_t *total_b);

#ifdef __cplusplus
}
#endif

#endif
