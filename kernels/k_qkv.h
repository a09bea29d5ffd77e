/* k_qkv: where a head's query, key and value sit in a row of the fused qkv
 * activations, one definition for every backend (as k_rope.h is for the
 * rotary frequencies).
 *
 * A row holds (NH + 2 NG) * HD values: the NG key/value groups one after
 * another, each its Q = NH / NG queries, then its key, then its value
 * ([NG, Q + 2, HD], Megatron's layout for grouped-query attention; with
 * NG = NH it is [NH, 3, HD]). Query head h belongs to group h / Q. */
#ifndef ATOLL_K_QKV_H
#define ATOLL_K_QKV_H

#include <stddef.h>

#ifdef __CUDACC__
#define K_QKV_FN static __host__ __device__ __forceinline__
#else
#define K_QKV_FN static inline
#endif

/* Values in one row of qkv. */
K_QKV_FN size_t k_qkv_row(int NH, int NG, int HD) { return (size_t)(NH + 2 * NG) * HD; }

/* Offset in a row of slot j of key/value group g: j < Q its j-th query, j = Q
 * its key, j = Q + 1 its value. */
K_QKV_FN size_t k_qkv_slot(int g, int j, int NH, int NG, int HD)
{
    return ((size_t)g * (NH / NG + 2) + (size_t)j) * HD;
}

/* Offsets in a row of head h's query, and of its group's key and value. */
K_QKV_FN void k_qkv_offsets(int h, int NH, int NG, int HD, size_t *q, size_t *k, size_t *v)
{
    int Q = NH / NG, g = h / Q;
    *q = k_qkv_slot(g, h % Q, NH, NG, HD);
    *k = k_qkv_slot(g, Q, NH, NG, HD);
    *v = *k + HD;
}

#endif
