/* emu_device: the emulated device's cudaMalloc and cudaFree, and the bytes they hold (emu_device.h). */
#include "emu_device.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

static std::mutex lock;
static std::unordered_map<void *, size_t> sizes;
static size_t used;

extern "C" void *emu_device_alloc(size_t bytes)
{
    if (!bytes) bytes = 1;
    void *p = malloc(bytes);
    if (!p) return nullptr;
    memset(p, 0xff, bytes);
    std::lock_guard<std::mutex> g(lock);
    sizes[p] = bytes;
    used += bytes;
    return p;
}

extern "C" void emu_device_free(void *p)
{
    if (!p) return;
    {
        std::lock_guard<std::mutex> g(lock);
        auto it = sizes.find(p);
        if (it != sizes.end()) {
            used -= it->second;
            sizes.erase(it);
        }
    }
    free(p);
}

extern "C" void emu_device_mem_info(size_t *free_b, size_t *total_b)
{
    std::lock_guard<std::mutex> g(lock);
    *total_b = EMU_DEVICE_BYTES;
    *free_b = EMU_DEVICE_BYTES - used;
}
