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

extern "C" size_t emu_device_used(void)
{
    std::lock_guard<std::mutex> g(lock);
    return used;
}
