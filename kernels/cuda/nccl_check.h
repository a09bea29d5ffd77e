/* nccl_check: the NCCL member of the cuda_check.h family, in its own header so
 * code without NCCL (the kernels) never needs nccl.h.
 *
 *   ncclCheck(ncclAllReduce(...));
 *
 * A failure prints "file:line: NCCL: <ncclGetErrorString> (<code>)" plus
 * NCCL's last detailed message when there is one, and exits. Code that must
 * report a failure instead of exiting (the comm layer returns error codes)
 * uses ncclGetErrorString directly. */
#ifndef ATOLL_NCCL_CHECK_H
#define ATOLL_NCCL_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <nccl.h>

static inline void atoll_nccl_check_(ncclResult_t r, const char *file, int line)
{
    if (r == ncclSuccess || r == ncclInProgress) return;
    const char *last = ncclGetLastError(NULL);
    fprintf(stderr, "%s:%d: NCCL: %s (code %d)%s%s\n", file, line, ncclGetErrorString(r), (int)r,
            last && *last ? ": " : "", last ? last : "");
    exit(EXIT_FAILURE);
}

#define ncclCheck(call) atoll_nccl_check_((call), __FILE__, __LINE__)

#endif
