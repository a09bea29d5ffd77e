/* kcuda_mma: the warp-level tensor-core and async-copy instructions the flash
 * attention kernels are written with (sm_80 and later), one function per PTX
 * instruction. tests/cuda/emu/include/kcuda_mma.cuh implements the same
 * functions on the CPU from the fragment layouts described here, so the
 * kernels that use them run under the CPU emulation too.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16 inputs), for lane l of a
 * warp, g = l / 4 (group), c = l % 4 (thread in group); a 32-bit register holds
 * two bf16, the lower-numbered element in the low half:
 *   A 16x16 (row-major):  a[0] = A[g][2c..2c+1]      a[1] = A[g+8][2c..2c+1]
 *                         a[2] = A[g][2c+8..2c+9]    a[3] = A[g+8][2c+8..2c+9]
 *   B 16x8 (k x n):       b[0] = B[2c..2c+1][g]      b[1] = B[2c+8..2c+9][g]
 *   C, D 16x8 (fp32):     d[0..1] = D[g][2c..2c+1]   d[2..3] = D[g+8][2c..2c+1]
 * ldmatrix.x4: lane l gives the shared-memory address of row l % 8 of 8x8
 * matrix l / 8; register j receives matrix j as row g, columns 2c..2c+1
 * (with .trans: column g, rows 2c..2c+1 of the matrix as addressed). */
#ifndef ATOLL_KCUDA_MMA_CUH
#define ATOLL_KCUDA_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* d += a b: m16n8k16, bf16 inputs, fp32 accumulate */
__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* four 8x8 bf16 matrices from shared memory */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *row)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* the same, each matrix transposed */
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *row)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* 16 bytes global -> shared without passing through registers; zeros when
 * !valid (nothing is read then). Completes at cp_async_wait. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
}

/* closes the group of copies issued since the last commit */
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }

/* waits until at most N committed groups are still in flight */
template <int N> __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* two floats -> one register of two bf16 (x in the low half), nearest even */
__device__ __forceinline__ uint32_t pack_bf16x2(float x, float y)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* the low / high bf16 of a packed pair, as fp32 */
__device__ __forceinline__ float bf16x2_lo(uint32_t x) { return __uint_as_float(x << 16); }
__device__ __forceinline__ float bf16x2_hi(uint32_t x) { return __uint_as_float(x & 0xffff0000u); }

#endif
