/* emu_device: the emulated device's size, one figure for the emulated kernels'
 * runtime (emu_cuda.h, C++) and atoll-train-emu's (cudart_emu.c, C). Its
 * memory is the host's; cudaMemGetInfo reports all of it free. */
#ifndef ATOLL_EMU_DEVICE_H
#define ATOLL_EMU_DEVICE_H

#define EMU_DEVICE_BYTES ((size_t)16 << 30)

#endif
