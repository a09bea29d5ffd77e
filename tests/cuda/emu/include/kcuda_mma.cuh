/* CPU stand-in for kernels/cuda/kcuda_mma.cuh under emu_cuda.h: the same
 * functions, warp-collective like the instructions. Each lane publishes its
 * operand registers (or its ldmatrix row address) in the warp's exchange
 * (emu_xchg_begin), the warp meets at a barrier, and each lane assembles its
 * own result from the fragment layouts that kcuda_mma.cuh documents (PTX ISA,
 * mma.m16n8k16 .bf16 and ldmatrix .m8n8 .x4). cp.async lands at its wait (below). */
#ifndef ATOLL_EMU_KCUDA_MMA_CUH
#define ATOLL_EMU_KCUDA_MMA_CUH

#include "emu_cuda.h"

inline float emu_bf16_bits(uint32_t h)
{
    uint32_t u = h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float bf16x2_lo(uint32_t x) { return emu_bf16_bits(x & 0xffffu); }
inline float bf16x2_hi(uint32_t x) { return emu_bf16_bits(x >> 16); }
inline uint32_t pack_bf16x2(float x, float y)
{
    return (uint32_t)__float2bfloat16_rn(x).x | (uint32_t)__float2bfloat16_rn(y).x << 16;
}

inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    emu_xchg *w = emu_xchg_begin();
    int lane = threadIdx.x & 31;
    memcpy(w->a[lane], a, sizeof w->a[lane]);
    memcpy(w->b[lane], b, sizeof w->b[lane]);
    w->unpacked = false;
    __syncwarp();
    /* The first lane past the barrier unpacks the warp's A (16 x 16, by row) and B (16 x 8, by
     * column) for all. Row g and g + 8 of A are held by lanes 4g..4g+3 (registers 0, 2: row g;
     * 1, 3: row g + 8), column n of B by lanes 4n..4n+3 (register 0: k 0..7, 1: k 8..15); lane
     * 4r + q holds k = 2q, 2q + 1 (+ 8). */
    if (!w->unpacked) {
        for (int g = 0; g < 8; g++)
            for (int q = 0; q < 4; q++) {
                const uint32_t *ra = w->a[4 * g + q];
                for (int h = 0; h < 2; h++) {
                    w->A[g][2 * q + h] = h ? bf16x2_hi(ra[0]) : bf16x2_lo(ra[0]);
                    w->A[g + 8][2 * q + h] = h ? bf16x2_hi(ra[1]) : bf16x2_lo(ra[1]);
                    w->A[g][2 * q + 8 + h] = h ? bf16x2_hi(ra[2]) : bf16x2_lo(ra[2]);
                    w->A[g + 8][2 * q + 8 + h] = h ? bf16x2_hi(ra[3]) : bf16x2_lo(ra[3]);
                }
            }
        for (int n = 0; n < 8; n++)
            for (int q = 0; q < 4; q++) {
                const uint32_t *rb = w->b[4 * n + q];
                for (int h = 0; h < 2; h++) {
                    w->B[n][2 * q + h] = h ? bf16x2_hi(rb[0]) : bf16x2_lo(rb[0]);
                    w->B[n][2 * q + 8 + h] = h ? bf16x2_hi(rb[1]) : bf16x2_lo(rb[1]);
                }
            }
        w->unpacked = true;
    }
    int g = lane >> 2, c = lane & 3;
    for (int e = 0; e < 4; e++) { /* row g + (e >> 1) * 8, column 2c + (e & 1) */
        const float *A = w->A[g + (e >> 1) * 8], *B = w->B[2 * c + (e & 1)];
        float s = d[e];
        for (int k = 0; k < 16; k++) s += A[k] * B[k];
        d[e] = s;
    }
}

/* trans = 0: register j = matrix j's row g, columns 2c, 2c+1;
 * trans = 1: matrix j's rows 2c, 2c+1 at column g */
inline void emu_ldsm_x4(uint32_t r[4], const void *row, int trans)
{
    emu_xchg *w = emu_xchg_begin();
    int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    w->p[lane] = row;
    __syncwarp();
    for (int j = 0; j < 4; j++) {
        uint16_t x, y;
        if (!trans) {
            const uint16_t *rp = (const uint16_t *)w->p[j * 8 + g];
            x = rp[2 * c], y = rp[2 * c + 1];
        } else {
            x = ((const uint16_t *)w->p[j * 8 + 2 * c])[g];
            y = ((const uint16_t *)w->p[j * 8 + 2 * c + 1])[g];
        }
        r[j] = (uint32_t)x | (uint32_t)y << 16;
    }
}
inline void ldsm_x4(uint32_t r[4], const void *row) { emu_ldsm_x4(r, row, 0); }
inline void ldsm_x4_t(uint32_t r[4], const void *row) { emu_ldsm_x4(r, row, 1); }

/* cp.async as the PTX ISA allows it to behave at its least convenient: the source is read at
 * the issue, the destination holds nothing defined until the thread's cp_async_wait covers the
 * copy's group (here: NaN bytes, 0xff), and only then does the data land. A kernel that reads
 * shared memory before its wait and barrier, or that issues copies into a buffer other threads
 * may still be reading, reads the NaNs. */
inline void cp_async16(void *dst, const void *src, bool valid)
{
    emu_cp c;
    c.dst = dst;
    c.group = emu_cp_commits[threadIdx.x];
    if (valid) memcpy(c.data, src, 16);
    else memset(c.data, 0, 16);
    memset(dst, 0xff, 16);
    emu_cp_pending[threadIdx.x].push_back(c);
}
inline void cp_async_commit(void) { emu_cp_commits[threadIdx.x]++; }
/* Lands every copy of a group older than the N most recent committed ones; copies not yet
 * committed stay in flight, as wait_group leaves them. */
template <int N> inline void cp_async_wait(void)
{
    std::vector<emu_cp> &q = emu_cp_pending[threadIdx.x];
    unsigned commits = emu_cp_commits[threadIdx.x];
    size_t kept = 0;
    for (size_t i = 0; i < q.size(); i++) {
        if (q[i].group + N < commits) memcpy(q[i].dst, q[i].data, 16);
        else q[kept++] = q[i];
    }
    q.resize(kept);
}

#endif
