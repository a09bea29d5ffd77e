#include "cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Every block starts 64 bytes into its allocation (64-byte alignment keeps every
 * view the engine carves out of one allocation friendly to the BLAS kernels); the
 * 64 bytes before it hold how it was made. Blocks of 1 MiB or more are mapped
 * pages: the kernel hands them out zeroed, on first touch, so a large buffer of
 * which a run uses only the start (generate's activations, sized for the whole
 * sequence) costs neither the time to clear it nor its resident memory. */
#if defined(__SANITIZE_ADDRESS__)
#define ATOLL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATOLL_ASAN 1
#endif
#endif
enum { HEAD = 64, MAP_MIN = 1 << 20 };

/* Under AddressSanitizer every block comes from the heap, where its red zones guard it. */
static int mapped_block(size_t n)
{
#ifdef ATOLL_ASAN
    (void)n;
    return 0;
#else
    return n >= MAP_MIN;
#endif
}

typedef struct {
    size_t mapped; /* bytes mapped, or 0: from aligned_alloc */
} block_head;

void *kc_alloc(size_t bytes)
{
    size_t n = (bytes + 63) / 64 * 64;
    if (n > SIZE_MAX - HEAD) return NULL;
    unsigned char *base;
    size_t mapped = 0;
    if (mapped_block(n)) {
        mapped = n + HEAD;
        void *m = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        base = m;
    } else {
        if (!(base = aligned_alloc(64, n + HEAD))) return NULL;
        memset(base + HEAD, 0, n);
    }
    ((block_head *)base)->mapped = mapped;
    return base + HEAD;
}

void kc_free(void *p)
{
    if (!p) return;
    unsigned char *base = (unsigned char *)p - HEAD;
    size_t mapped = ((block_head *)base)->mapped;
    if (mapped) munmap(base, mapped);
    else free(base);
}
void kc_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
void kc_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
void kc_sync(void) {}
