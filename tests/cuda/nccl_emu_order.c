/* nccl_emu_order: engine/comm_nccl.c on two ranks of the emulated NCCL
 * (emu/nccl_emu.c, ATOLL_EMU_GPUS=2) and the emulated kernels, started by the
 * launcher as par_comm is. What engine_nccl_emu's layouts rely on:
 * - the emulation runs a collective behind the host, as a GPU runs NCCL's
 *   kernels: right after comm_allreduce_async (and comm_reduce_async) what the
 *   kernels' stream reads is still this rank's own values, so a kernel queued
 *   without waiting for a collective reads what it has not written yet (on a
 *   GPU, a race); after comm_wait, the sum;
 * - each ordered call (all-reduce, reduce-scatter, all-gather, broadcast, a
 *   send/receive batch, on the world and on a split) leaves its result for what
 *   the kernels' stream runs next, read here by the backend's own to_host;
 * - sizes past one round of the emulation's slots (1 MiB a rank) and its
 *   send rings (256 KiB), and two messages to one peer in a batch, in order;
 * - comm_device_stalls (the pipeline's idle time): send/receive batches and
 *   barriers are timed on the device, by events; a rank whose peer comes 300 ms
 *   late to a batch stood still about that long, the late one did not, and a
 *   reading forgets what it summed. */
#include "check.h"
#include "comm.h"
#include "cuda/k_cuda.h"
#include "kernels.h"
#include "launcher.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 300007 /* floats: more than one 1 MiB slot */

static const k_ops *K;
static int R;

static float mine(int rank, size_t i) { return (float)(i % 13) + 100.0f * (float)rank; }

/* The device buffer as the kernels' stream sees it now. */
static float *read_back(const float *dev, size_t n)
{
    float *h = malloc(n * sizeof *h);
    K->to_host(h, dev, n * sizeof *h);
    return h;
}

static float *upload(size_t n, int rank, int salt)
{
    float *h = malloc(n * sizeof *h), *d = K->alloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) h[i] = mine(rank, i + (size_t)salt);
    K->to_device(d, h, n * sizeof *h);
    free(h);
    return d;
}

static float *W; /* expected values, filled by EXPECT */
#define EXPECT(n, expr)                                          \
    do {                                                         \
        W = realloc(W, (size_t)(n) * sizeof *W);                 \
        for (size_t i = 0; i < (size_t)(n); i++) W[i] = (expr); \
    } while (0)

/* Where got[0..n) differs from W. */
static size_t mismatches(const float *got, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != W[i];
    return bad;
}

static int rank_main(void)
{
    char err[512];
    K = k_cuda();
    CHECK(K && k_cuda_stream(), "the emulated backend and its kernels' stream: %s", k_cuda_status());
    if (!K) return 1;
    comm_world *w;
    if (comm_world_init_env(&w, COMM_BACKEND_NCCL, COMM_DEVICE_BUFFERS, err, sizeof err)) {
        fprintf(stderr, "rank: %s\n", err);
        return 1;
    }
    R = comm_world_rank(w);
    CHECK(comm_world_size(w) == 2 && comm_world_backend(w) == COMM_BACKEND_NCCL, "two ranks on NCCL");
    comm *world = comm_world_comm(w), *pair;
    int both[2] = { 0, 1 }, other = 1 - R;
    CHECK(comm_group_new(w, "pair", both, 2, &pair) == 0, "split: %s", comm_error(w));

    /* queued, not waited for: the kernels' stream still sees this rank's values */
    float *d = upload(N, R, 0);
    CHECK(comm_allreduce_async(world, d, N, COMM_SUM) == 0, "%s", comm_error(w));
    float *h = read_back(d, N);
    EXPECT(N, mine(R, i));
    size_t stale = mismatches(h, N);
    CHECK(stale == 0, "right after comm_allreduce_async the buffer is this rank's still (%zu of %d differ): the "
          "emulated NCCL runs behind the host", stale, N);
    free(h);
    CHECK(comm_wait(world) == 0, "%s", comm_error(w));
    h = read_back(d, N);
    EXPECT(N, mine(0, i) + mine(1, i));
    CHECK(mismatches(h, N) == 0, "after comm_wait: the sum of both ranks");
    free(h);

    /* ordered: the result is there for the next thing the kernels' stream runs */
    for (int g = 0; g < 2; g++) {
        comm *c = g ? pair : world;
        const char *name = g ? "a split" : "the world";
        float *a = upload(N, R, 1);
        CHECK(comm_allreduce(c, a, N, COMM_AVG) == 0, "%s", comm_error(w));
        h = read_back(a, N);
        EXPECT(N, (mine(0, i + 1) + mine(1, i + 1)) / 2.0f);
        CHECK(mismatches(h, N) == 0, "all-reduce (average) on %s", name);
        free(h);
        float *in = upload(2 * (size_t)N, R, 2), *out = K->alloc(N * sizeof(float));
        CHECK(comm_reduce_scatter(c, in, out, N, COMM_SUM) == 0, "%s", comm_error(w));
        h = read_back(out, N);
        EXPECT(N, mine(0, (size_t)R * N + i + 2) + mine(1, (size_t)R * N + i + 2));
        CHECK(mismatches(h, N) == 0,
              "reduce-scatter on %s: this rank's chunk summed", name);
        free(h);
        float *part = upload(N, R, 3);
        CHECK(comm_allgather(c, part, in, N) == 0, "%s", comm_error(w));
        h = read_back(in, 2 * (size_t)N);
        EXPECT(2 * (size_t)N, mine((int)(i / N), i % N + 3));
        CHECK(mismatches(h, 2 * (size_t)N) == 0, "all-gather on %s", name);
        free(h);
        float *b = upload(N, R, 4);
        CHECK(comm_broadcast(c, b, N * sizeof(float), 1) == 0, "%s", comm_error(w));
        h = read_back(b, N);
        EXPECT(N, mine(1, i + 4));
        CHECK(mismatches(h, N) == 0, "broadcast from position 1 on %s", name);
        free(h);
        K->free(a);
        K->free(in);
        K->free(out);
        K->free(part);
        K->free(b);
    }

    /* reduce to one owner, queued; the owner has the sum after comm_wait */
    float *r = upload(N, R, 5);
    CHECK(comm_reduce_async(world, r, N, COMM_SUM, 1) == 0, "%s", comm_error(w));
    h = read_back(r, N);
    EXPECT(N, mine(R, i + 5));
    CHECK(mismatches(h, N) == 0, "right after comm_reduce_async the buffer is this rank's still");
    free(h);
    CHECK(comm_wait(world) == 0, "%s", comm_error(w));
    if (R == 1) {
        h = read_back(r, N);
        EXPECT(N, mine(0, i + 5) + mine(1, i + 5));
        CHECK(mismatches(h, N) == 0, "reduce: position 1 has the sum after comm_wait");
        free(h);
    }

    /* both ends send two messages and receive two, in one batch */
    float *s1 = upload(N, R, 6), *s2 = upload(1000, R, 7), *r1 = K->alloc(N * sizeof(float)),
          *r2 = K->alloc(1000 * sizeof(float));
    comm_p2p ops[4] = { { 0, r1, N * sizeof(float), other, 1 }, { 0, r2, 1000 * sizeof(float), other, 2 },
                        { 1, s1, N * sizeof(float), other, 1 }, { 1, s2, 1000 * sizeof(float), other, 2 } };
    CHECK(comm_p2p_batch(world, ops, 4) == 0, "%s", comm_error(w));
    h = read_back(r1, N);
    EXPECT(N, mine(other, i + 6));
    CHECK(mismatches(h, N) == 0, "send/receive batch: the first message from the other rank");
    free(h);
    h = read_back(r2, 1000);
    EXPECT(1000, mine(other, i + 7));
    CHECK(mismatches(h, 1000) == 0, "send/receive batch: the second message, after it");
    free(h);
    CHECK(comm_barrier(world) == 0, "%s", comm_error(w));

    /* the device's stalls: rank 1 comes to a batch 300 ms after rank 0 */
    double s = -1.0;
    CHECK(comm_device_stalls(world, &s) == 1 && s >= 0.0,
          "send/receive batches and barriers on NCCL are timed on the device (%.3f s so far)", s);
    CHECK(comm_barrier(world) == 0 && comm_device_stalls(world, NULL) == 1, "%s", comm_error(w));
    if (R == 1) nanosleep(&(struct timespec){ 0, 300000000L }, NULL);
    comm_p2p late[2] = { { 0, r2, 1000 * sizeof(float), other, 3 }, { 1, s2, 1000 * sizeof(float), other, 3 } };
    CHECK(comm_p2p_batch(world, late, 2) == 0, "%s", comm_error(w));
    CHECK(comm_device_stalls(world, &s) == 1, "%s", comm_error(w));
    if (R == 0)
        CHECK(s >= 0.25 && s < 5.0, "rank 0's kernels' stream stood still ~0.3 s waiting for rank 1's batch: %.3f s",
              s);
    else
        CHECK(s < 0.25, "rank 1, 300 ms late, found its peer waiting: it stood still %.3f s, under 0.25", s);
    CHECK(comm_device_stalls(world, &s) == 1 && s == 0.0, "a reading forgets what it summed (%.3f s)", s);
    K->free(d);
    K->free(r);
    K->free(s1);
    K->free(s2);
    K->free(r1);
    K->free(r2);
    comm_world_free(w);
    free(W);
    return check_summary("nccl_emu_order rank") ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (getenv("RANK")) return rank_main();
    (void)argc;
    setenv("ATOLL_EMU_GPUS", "2", 1);
    char *args[] = { argv[0], NULL };
    launcher_opts o = { .nproc = 2, .argc = 1, .argv = args };
    launcher_result res;
    CHECK(launcher_spawn(&o, &res) == 0, "two ranks: %s", res.message);
    return check_summary(argv[0]);
}
