/* cudart_emu: what atoll-train-emu needs beside the emulated backend.
 *
 * atoll-train-emu is atoll-train linked with the CUDA backend compiled for the
 * CPU emulation (tests/cuda/CMakeLists.txt) instead of the real one: its
 * `--device cuda` gets that table. The engine itself makes a few CUDA runtime
 * calls outside the table (picking the rank's device, its free memory for the
 * up-front memory check); they are answered here for one emulated device, so
 * every rank of a layout shares it and stages its buffers through the host
 * transport, as ranks sharing one GPU do. Defined in the program, these take
 * the place of the runtime library's. */
#include <cuda_runtime_api.h>

#include "emu_device.h"
#include "kernels.h"

const k_ops *k_cuda_emu(void);

const k_ops *k_cuda(void) { return k_cuda_emu(); }

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

/* The emulated device's memory (emu_device.h), less what cudaMalloc holds, to
 * the memory check. */
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    emu_device_mem_info(free_b, total_b);
    return cudaSuccess;
}
