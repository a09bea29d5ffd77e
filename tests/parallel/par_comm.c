/* par_comm: the host backend over real processes, started by the launcher.
 *
 * Run without RANK set, this binary is the driver: it launches itself as 1..5
 * ranks and fails if any rank fails. Each rank checks every collective against
 * a sequential reference on several group shapes (whole world, pairs, strides,
 * a permuted world, an uneven partition) and sizes (1 to past one transport
 * chunk, most not divisible by the group size); p2p with both ends sending at
 * once, tags received out of order, messages of different groups interleaved
 * on one link, a size mismatch reported, and the barrier actually waiting. */
#include "check.h"
#include "comm.h"
#include "groups.h"
#include "launcher.h"
#include "store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int W, R;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Small integers so every sum is exact in fp32 whatever the order. */
static float ival(int wrank, size_t i, int salt) { return (float)((int)((wrank * 7 + i * 3 + (size_t)salt) % 11) - 5); }
/* Values whose sums round, for AVG against a double reference. */
static float rval(int wrank, size_t i) { return (float)(((wrank + 1) * 2654435761u + i * 40503u) % 100000) / 7919.0f; }

static void check_group(comm_world *w, comm *c)
{
    static const size_t sizes[] = {1, 2, 3, 7, 1000, 262147};
    int P = comm_size(c), pos = comm_rank(c);
    const char *g = comm_name(c);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        float *x = malloc(n * sizeof(float)), *y = malloc(n * P * sizeof(float)), *z = malloc(n * P * sizeof(float));

        /* all-reduce sum, exact */
        for (size_t i = 0; i < n; i++) x[i] = ival(R, i, 0);
        CHECK(comm_allreduce(c, x, n, COMM_SUM) == 0, "allreduce: %s", comm_error(w));
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int q = 0; q < P; q++) want += ival(comm_world_rank_of(c, q), i, 0);
            bad += x[i] != want;
        }
        CHECK(bad == 0, "group %s P=%d n=%zu: %d all-reduce sums wrong", g, P, n, bad);

        /* all-reduce avg vs double reference; identical bits on every member */
        for (size_t i = 0; i < n; i++) x[i] = rval(R, i);
        CHECK(comm_allreduce(c, x, n, COMM_AVG) == 0, "allreduce avg: %s", comm_error(w));
        bad = 0;
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int q = 0; q < P; q++) want += rval(comm_world_rank_of(c, q), i);
            want /= P;
            bad += fabs(x[i] - want) > 1e-5 * fabs(want) + 1e-6;
        }
        CHECK(bad == 0, "group %s P=%d n=%zu: %d all-reduce averages off", g, P, n, bad);
        memcpy(z, x, n * sizeof(float));
        CHECK(comm_broadcast(c, z, n * sizeof(float), 0) == 0, "broadcast: %s", comm_error(w));
        CHECK(memcmp(z, x, n * sizeof(float)) == 0, "group %s n=%zu: members disagree on the all-reduce bits", g, n);

        /* reduce-scatter: chunk q of everyone's input, summed, lands on position q */
        for (size_t i = 0; i < n * P; i++) y[i] = ival(R, i, 1);
        for (int op = 0; op < 2; op++) {
            CHECK(comm_reduce_scatter(c, y, x, n, op ? COMM_AVG : COMM_SUM) == 0, "reduce-scatter: %s", comm_error(w));
            bad = 0;
            for (size_t i = 0; i < n; i++) {
                float want = 0;
                for (int q = 0; q < P; q++) want += ival(comm_world_rank_of(c, q), (size_t)pos * n + i, 1);
                if (op) want /= (float)P;
                bad += fabsf(x[i] - want) > 1e-6f * fabsf(want);
            }
            CHECK(bad == 0, "group %s P=%d n=%zu op %d: %d reduce-scatter values wrong", g, P, n, op, bad);
        }

        /* reduce to every root in turn (sum exact; average); the root alone is defined */
        for (int root = 0; root < P; root++)
            for (int op = 0; op < 2; op++) {
                for (size_t i = 0; i < n; i++) x[i] = ival(R, i, 3 + root);
                CHECK(comm_reduce(c, x, n, op ? COMM_AVG : COMM_SUM, root) == 0, "reduce: %s", comm_error(w));
                if (pos != root) continue;
                bad = 0;
                for (size_t i = 0; i < n; i++) {
                    float want = 0;
                    for (int q = 0; q < P; q++) want += ival(comm_world_rank_of(c, q), i, 3 + root);
                    if (op) want /= (float)P;
                    bad += fabsf(x[i] - want) > (op ? 1e-6f * fabsf(want) : 0.0f);
                }
                CHECK(bad == 0, "group %s P=%d n=%zu root %d op %d: %d reduce values wrong", g, P, n, root, op, bad);
            }
        CHECK(comm_reduce(c, x, n, COMM_SUM, P) == -1 && strstr(comm_error(w), "outside group"),
              "reduce to a root outside the group: %s", comm_error(w));

        /* all-gather, also in place */
        for (size_t i = 0; i < n; i++) x[i] = ival(R, i, 2);
        CHECK(comm_allgather(c, x, y, n) == 0, "allgather: %s", comm_error(w));
        memcpy(z + (size_t)pos * n, x, n * sizeof(float));
        CHECK(comm_allgather(c, z + (size_t)pos * n, z, n) == 0, "allgather in place: %s", comm_error(w));
        bad = 0;
        for (int q = 0; q < P; q++)
            for (size_t i = 0; i < n; i++) {
                float want = ival(comm_world_rank_of(c, q), i, 2);
                bad += y[(size_t)q * n + i] != want;
                bad += z[(size_t)q * n + i] != want;
            }
        CHECK(bad == 0, "group %s P=%d n=%zu: %d all-gather values wrong", g, P, n, bad);

        /* broadcast from every root, odd byte counts */
        size_t bytes = n * sizeof(float) + 1;
        unsigned char *b = malloc(bytes);
        for (int root = 0; root < P; root++) {
            for (size_t i = 0; i < bytes; i++) b[i] = pos == root ? (unsigned char)(i * 7 + (size_t)root) : 0xEE;
            CHECK(comm_broadcast(c, b, bytes, root) == 0, "broadcast: %s", comm_error(w));
            bad = 0;
            for (size_t i = 0; i < bytes; i++) bad += b[i] != (unsigned char)(i * 7 + (size_t)root);
            CHECK(bad == 0, "group %s P=%d bytes=%zu root %d: %d bytes wrong", g, P, bytes, root, bad);
        }
        free(b);
        free(x);
        free(y);
        free(z);
    }
}

static void check_p2p(comm_world *w)
{
    comm *c = comm_world_comm(w);
    int peer = R ^ 1;
    if (peer >= W) return;
    /* both ends send 8 MiB first, then receive: needs sends that do not wait */
    size_t n = 2u << 20;
    float *out = malloc(n * sizeof(float)), *in = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) out[i] = (float)(R * 1000003 + (int)(i % 1000));
    CHECK(comm_send(c, out, n * sizeof(float), peer, 5) == 0, "send: %s", comm_error(w));
    CHECK(comm_recv(c, in, n * sizeof(float), peer, 5) == 0, "recv: %s", comm_error(w));
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += in[i] != (float)(peer * 1000003 + (int)(i % 1000));
    CHECK(bad == 0, "simultaneous exchange: %d values wrong", bad);

    /* tags: sent 2 then 1, received 1 then 2 */
    int a = 100 + R, b2 = 200 + R, ra = 0, rb = 0;
    CHECK(comm_send(c, &b2, sizeof b2, peer, 2) == 0 && comm_send(c, &a, sizeof a, peer, 1) == 0, "send tags");
    CHECK(comm_recv(c, &ra, sizeof ra, peer, 1) == 0 && comm_recv(c, &rb, sizeof rb, peer, 2) == 0, "recv tags");
    CHECK(ra == 100 + peer && rb == 200 + peer, "tag matching: got %d %d", ra, rb);

    /* batch: both directions in one call */
    int s1 = R, r1 = -1;
    comm_p2p ops[2] = {{0, &r1, sizeof r1, peer, 9}, {1, &s1, sizeof s1, peer, 9}};
    CHECK(comm_p2p_batch(c, ops, 2) == 0 && r1 == peer, "batch exchange got %d", r1);

    /* a p2p message and a collective of another group share the link: the
     * lower rank sends first and all-reduces after; the higher does the reverse */
    int pair[2] = {R & ~1, R | 1};
    comm *pc;
    CHECK(comm_group_new(w, "pair", pair, 2, &pc) == 0, "pair group: %s", comm_error(w));
    float v = 1, msg = 0, sent = 42;
    if (R < peer) {
        comm_send(c, &sent, sizeof sent, peer, 3);
        CHECK(comm_allreduce(pc, &v, 1, COMM_SUM) == 0 && v == 2, "allreduce beside p2p: %g", v);
    } else {
        CHECK(comm_allreduce(pc, &v, 1, COMM_SUM) == 0 && v == 2, "allreduce beside p2p: %g", v);
        CHECK(comm_recv(c, &msg, sizeof msg, peer, 3) == 0 && msg == 42, "p2p beside allreduce: %g", msg);
    }

    /* a receive of the wrong size is reported, not silently truncated */
    double big = 1.5;
    float small = 0;
    if (R < peer) {
        comm_send(c, &big, sizeof big, peer, 4);
    } else {
        CHECK(comm_recv(c, &small, sizeof small, peer, 4) == -1 && strstr(comm_error(w), "expects 4"),
              "size mismatch: %s", comm_error(w));
    }
    CHECK(comm_send(c, &small, sizeof small, R, 1) == -1 && strstr(comm_error(w), "peer"), "send to self refused");
    CHECK(comm_send(c, &small, sizeof small, peer, 0x80000001u) == -1 && strstr(comm_error(w), "reserved"), "tag refused");
    free(out);
    free(in);
}

static int copies_to_host, copies_to_device;
static void copy_to_host(void *dst, const void *src, size_t n) { copies_to_host++, memcpy(dst, src, n); }
static int stage_allocs, stage_frees;
static void *stage_alloc(size_t n) { stage_allocs++; return malloc(n); }
static void stage_free(void *p) { stage_frees++; free(p); }
static void copy_to_device(void *dst, const void *src, size_t n) { copies_to_device++, memcpy(dst, src, n); }

static int rank_main(void)
{
    comm_world *w;
    char err[512];
    if (comm_world_init_env(&w, COMM_BACKEND_HOST, 0, err, sizeof err) != 0) {
        fprintf(stderr, "rank: %s\n", err);
        return 1;
    }
    R = comm_world_rank(w);
    W = comm_world_size(w);
    check_group(w, comm_world_comm(w));

    /* pairs and strides (even worlds), a reversed world, an uneven partition */
    comm *c;
    if (W % 2 == 0) {
        int pair[2] = {R & ~1, R | 1};
        CHECK(comm_group_new(w, "tp", pair, 2, &c) == 0, "%s", comm_error(w));
        check_group(w, c);
        int half = W / 2, stride[2] = {R % half, R % half + half};
        CHECK(comm_group_new(w, "dp", stride, 2, &c) == 0, "%s", comm_error(w));
        check_group(w, c);
    }
    int *rev = malloc(sizeof(int) * (size_t)W);
    for (int i = 0; i < W; i++) rev[i] = W - 1 - i;
    CHECK(comm_group_new(w, "reversed", rev, W, &c) == 0 && comm_rank(c) == W - 1 - R, "%s", comm_error(w));
    check_group(w, c);
    free(rev);
    if (W >= 3) {
        int first[64], nf = 0;
        for (int i = 0; i < W - 1; i++) first[nf++] = i;
        int last = W - 1;
        if (R < W - 1) CHECK(comm_group_new(w, "uneven", first, nf, &c) == 0, "%s", comm_error(w));
        else CHECK(comm_group_new(w, "uneven", &last, 1, &c) == 0, "%s", comm_error(w));
        check_group(w, c);
    }
    int bogus[2] = {0, 0};
    if (W >= 2)
        CHECK(comm_group_new(w, "bogus", bogus, 2, &c) == -1 && strstr(comm_error(w), "twice"), "%s", comm_error(w));

    /* a Megatron layout's groups: each all-reduce of world ranks sums its members */
    for (int pp = 1; pp <= W; pp++) {
        if (W % pp) continue;
        rank_groups lg;
        char e[256];
        int tp = W / pp >= 2 && (W / pp) % 2 == 0 ? 2 : 1;
        CHECK(groups_build(&lg, W, tp, pp, NULL, e, sizeof e) == 0, "%s", e);
        comm *gc[GROUP_KINDS];
        CHECK(comm_groups_new(w, &lg, gc) == 0, "layout groups: %s", comm_error(w));
        for (int k = 0; k < GROUP_KINDS; k++) {
            int n = 0, pos = -1;
            const int *mem = groups_find(&lg, (group_kind)k, R, &n, &pos);
            CHECK((mem == NULL) == (gc[k] == NULL), "kind %s presence", groups_kind_name((group_kind)k));
            if (!mem || !gc[k]) continue;
            float x = (float)R, want = 0;
            for (int i = 0; i < n; i++) want += (float)mem[i];
            CHECK(comm_size(gc[k]) == n && comm_rank(gc[k]) == pos, "kind %s shape", groups_kind_name((group_kind)k));
            CHECK(comm_allreduce(gc[k], &x, 1, COMM_SUM) == 0 && x == want, "tp%d pp%d %s sum %g want %g", tp, pp,
                  groups_kind_name((group_kind)k), x, want);
        }
        groups_free(&lg);
    }

    check_p2p(w);

    /* barrier holds everyone until the slowest arrives */
    comm *wc = comm_world_comm(w);
    CHECK(comm_barrier(wc) == 0, "barrier: %s", comm_error(w)); /* everyone starts the clock together */
    double t0 = now();
    if (R == 0) usleep(300000);
    CHECK(comm_barrier(wc) == 0, "barrier: %s", comm_error(w));
    double dt = now() - t0;
    if (R != 0 && W > 1) CHECK(dt > 0.2, "rank %d left the barrier after %.3f s, before rank 0 arrived", R, dt);
    CHECK(comm_barrier(wc) == 0, "second barrier: %s", comm_error(w));

    /* a receive nobody answers fails after the world's timeout, naming the peer */
    if (W >= 2) {
        store_client *sc;
        comm_world *sw;
        char e2[512];
        CHECK(store_connect_env(5000, &sc, e2, sizeof e2) == STORE_OK, "%s", e2);
        /* the rendezvous under a bound a loaded machine meets (ranks under ASan on 2 cores missed 400 ms),
         * then the short bound for the waits: comm_host reads timeout_ms at each wait */
        CHECK(comm_world_init(&sw, COMM_BACKEND_HOST, R, W, sc, "short", 0, 30000, e2, sizeof e2) == 0, "%s", e2);
        sw->timeout_ms = 400;
        if (R == 0) {
            int never;
            double t1 = now();
            CHECK(comm_recv(comm_world_comm(sw), &never, sizeof never, 1, 77) == -1 &&
                  strstr(comm_error(sw), "no message from rank 1 within 400 ms"), "timeout: %s", comm_error(sw));
            CHECK(now() - t1 < 3, "timed out after %.2f s", now() - t1);
        }
        CHECK(comm_barrier(wc) == 0, "barrier after timeout: %s", comm_error(w));
        comm_world_free(sw);
        store_close(sc);
    }
    /* device buffers staged through the host backend (CUDA ranks sharing a
     * GPU): the same checks, with counted memcpys standing for the device copies */
    {
        store_client *sc;
        comm_world *dw;
        char e3[512];
        comm_set_device_copy(copy_to_host, copy_to_device);
        comm_set_stage_memory(stage_alloc, stage_free); /* the engine gives page-locked memory here */
        CHECK(store_connect_env(5000, &sc, e3, sizeof e3) == STORE_OK, "%s", e3);
        CHECK(comm_world_init(&dw, COMM_BACKEND_HOST, R, W, sc, "staged", COMM_DEVICE_BUFFERS, 0, e3, sizeof e3) == 0,
              "%s", e3);
        check_group(dw, comm_world_comm(dw));
        check_p2p(dw);
        if (W > 1) CHECK(copies_to_host > 0 && copies_to_device > 0, "staging copies used (%d, %d)", copies_to_host,
                         copies_to_device);
        comm_world_free(dw);
        if (W > 1)
            CHECK(stage_allocs > 0 && stage_frees == stage_allocs, "staging memory from the given allocator: %d "
                  "allocations, %d frees", stage_allocs, stage_frees);
        comm_set_stage_memory(NULL, NULL);
        store_close(sc);
    }
    comm_world_free(w);
    char name[32];
    snprintf(name, sizeof name, "rank %d/%d", R, W);
    return check_summary(name);
}

int main(int argc, char **argv)
{
    if (getenv("RANK")) return rank_main();
    (void)argc;
    for (int world = 1; world <= 5; world++) {
        char *args[] = {argv[0], NULL};
        launcher_opts o = {.nproc = world, .argc = 1, .argv = args};
        launcher_result res;
        double t0 = now();
        int rc = launcher_spawn(&o, &res);
        CHECK(rc == 0, "world %d: %s", world, res.message);
        printf("world %d: ranks finished in %.2f s\n", world, now() - t0);
    }
    return check_summary(argv[0]);
}
