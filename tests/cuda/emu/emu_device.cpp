/* emu_device: the bytes cudaMalloc holds on the emulated device (emu_device.h). */
#include "emu_device.h"

#include <mutex>
#include <unordered_map>

static std::mutex lock;
static std::unordered_map<void *, size_t> sizes;
static size_t used;

extern "C" void emu_device_track(void *p, size_t bytes)
{
    if (!p) return;
    std::lock_guard<std::mutex> g(lock);
    if (bytes) {
        sizes[p] = bytes;
        used += bytes;
        return;
    }
    auto it = sizes.find(p);
    if (it == sizes.end()) return;
    used -= it->second;
    sizes.erase(it);
}

extern "C" void emu_device_mem_info(size_t *free_b, size_t *total_b)
{
    std::lock_guard<std::mutex> g(lock);
    *total_b = EMU_DEVICE_BYTES;
    *free_b = EMU_DEVICE_BYTES - used;
}
