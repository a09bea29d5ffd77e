/* par_schedule: the 1F1B and interleaved 1F1B action lists.
 *
 * For many (p, m, v):
 *  - each rank runs FWD and BWD of every (mb, chunk) exactly once, the forward
 *    first; a compute needing input has the receive before it on that rank, a
 *    compute producing output has the send after it;
 *  - every send has exactly one matching receive (same tag, the peer names each
 *    other, the receiving chunk is the next/previous virtual stage);
 *  - messages between a pair with the same direction are received in the order
 *    sent (so an executor without tags, e.g. NCCL, matches them too);
 *  - simulated with buffered sends and blocking receives, no rank deadlocks;
 *  - cost model A, forward = backward = 1 unit per chunk, free transfers: the
 *    simulated step time is exactly the ideal m*v*2 plus (p-1)/(v*m) of it;
 *    cost model B, Megatron's backward = 2 x forward: the same holds for 1F1B,
 *    and for interleaving the bubble stays at or under the theory.
 *  - Megatron's warm-up counts, and the bad inputs;
 *  - micro-batches in groups of g through each chunk (--microbatch-group-size-
 *    per-virtual-pipeline-stage): every accepted g for p 2-6, m up to 20, v 2-3
 *    meets the same placement, matching and order checks, runs without deadlock
 *    under both send models at the same bubble, (p-1)/(vm) with forward =
 *    backward as for groups of p, and g = p is the default list; Megatron's PP2 M5
 *    example in groups of 3 runs its forward order; the rules' refusals. */
#include "check.h"
#include "config.h"
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

static int find(const sched_list *s, sched_op op, int mb, int chunk)
{
    for (int i = 0; i < s->n; i++)
        if (s->a[i].op == op && s->a[i].mb == mb && s->a[i].chunk == chunk) return i;
    return -1;
}

static int count(const sched_list *s, sched_op op, int mb, int chunk)
{
    int c = 0;
    for (int i = 0; i < s->n; i++) c += s->a[i].op == op && s->a[i].mb == mb && s->a[i].chunk == chunk;
    return c;
}

static int failures_before;

static double check_one_g(int p, int m, int v, int g);
static void check_one(int p, int m, int v) { check_one_g(p, m, v, 0); }

/* The checks above for (p, m, v) with micro-batches in groups of g through each
 * chunk (0: p). Returns the simulated bubble with forward = backward, free
 * transfers. */
static double check_one_g(int p, int m, int v, int g)
{
    sched_list *L = calloc((size_t)p, sizeof *L);
    char err[256];
    failures_before = check_failed_;
    for (int r = 0; r < p; r++) CHECK(sched_build(p, r, m, v, g, &L[r], err, sizeof err) == 0, "%s", err);
    int S = v * p;
    for (int r = 0; r < p; r++) {
        const sched_list *s = &L[r];
        for (int c = 0; c < v; c++) {
            int st = c * p + r;
            for (int mb = 0; mb < m; mb++) {
                int f = find(s, SCHED_FWD, mb, c), b = find(s, SCHED_BWD, mb, c);
                CHECK(count(s, SCHED_FWD, mb, c) == 1 && count(s, SCHED_BWD, mb, c) == 1,
                      "p%d m%d v%d rank %d: mb %d chunk %d not exactly one F and one B", p, m, v, r, mb, c);
                CHECK(f >= 0 && b > f, "p%d m%d v%d rank %d: BWD(%d,%d) before its FWD", p, m, v, r, mb, c);
                int rf = find(s, SCHED_RECV_FWD, mb, c), sf = find(s, SCHED_SEND_FWD, mb, c);
                int rb = find(s, SCHED_RECV_BWD, mb, c), sb = find(s, SCHED_SEND_BWD, mb, c);
                CHECK(st == 0 ? rf < 0 : (rf >= 0 && rf < f), "p%d m%d v%d r%d: RECV_FWD(%d,%d) placement", p, m, v, r, mb, c);
                CHECK(st == S - 1 ? sf < 0 : sf > f, "p%d m%d v%d r%d: SEND_FWD(%d,%d) placement", p, m, v, r, mb, c);
                CHECK(st == S - 1 ? rb < 0 : (rb >= 0 && rb < b), "p%d m%d v%d r%d: RECV_BWD(%d,%d) placement", p, m, v, r, mb, c);
                CHECK(st == 0 ? sb < 0 : sb > b, "p%d m%d v%d r%d: SEND_BWD(%d,%d) placement", p, m, v, r, mb, c);
            }
        }
        /* every send meets one receive at the peer, from the adjacent stage */
        for (int i = 0; i < s->n; i++) {
            const sched_action *a = &s->a[i];
            if (a->op != SCHED_SEND_FWD && a->op != SCHED_SEND_BWD) continue;
            int fwd = a->op == SCHED_SEND_FWD;
            int to_stage = a->chunk * p + r + (fwd ? 1 : -1);
            int want_peer = to_stage % p, want_chunk = to_stage / p;
            CHECK(a->peer == want_peer, "p%d m%d v%d r%d: send to %d, stage %d lives on %d", p, m, v, r, a->peer, to_stage, want_peer);
            const sched_list *q = &L[a->peer];
            int matches = 0;
            for (int j = 0; j < q->n; j++) {
                const sched_action *b = &q->a[j];
                if (b->op == (fwd ? SCHED_RECV_FWD : SCHED_RECV_BWD) && sched_tag(q, b) == sched_tag(s, a)) {
                    matches++;
                    CHECK(b->peer == r && b->mb == a->mb && b->chunk == want_chunk,
                          "p%d m%d v%d: recv at %d for send from %d disagrees", p, m, v, a->peer, r);
                }
            }
            CHECK(matches == 1, "p%d m%d v%d r%d: %s(%d,%d) has %d receives", p, m, v, r,
                  sched_op_name(a->op), a->mb, a->chunk, matches);
        }
        /* FIFO per (sender, receiver), both directions together: NCCL matches
         * by order alone, and for p = 2 with interleaving one rank sends both
         * activations and gradients to the other */
        for (int q = 0; q < p; q++) {
            if (q == r) continue;
            uint32_t sent[4096], got[4096];
            int ns = 0, ng = 0;
            for (int i = 0; i < s->n; i++)
                if ((s->a[i].op == SCHED_SEND_FWD || s->a[i].op == SCHED_SEND_BWD) && s->a[i].peer == q && ns < 4096)
                    sent[ns++] = sched_tag(s, &s->a[i]);
            for (int i = 0; i < L[q].n; i++)
                if ((L[q].a[i].op == SCHED_RECV_FWD || L[q].a[i].op == SCHED_RECV_BWD) && L[q].a[i].peer == r && ng < 4096)
                    got[ng++] = sched_tag(&L[q], &L[q].a[i]);
            CHECK(ns == ng && memcmp(sent, got, sizeof(uint32_t) * (size_t)ns) == 0,
                  "p%d m%d v%d: messages %d->%d are not received in send order", p, m, v, r, q);
        }
    }

    /* NCCL-style batched rendezvous: no deadlock, same step time when free */
    sched_sim_result nres;
    sched_simulate_lists(L, 1, 1, 0, SCHED_SENDS_BATCHED, &nres);
    if (g) { /* grouped: both send models run it through; its bubble is returned for the caller's checks */
        sched_sim_result bres;
        sched_simulate_lists(L, 1, 1, 0, SCHED_SENDS_BUFFERED, &bres);
        CHECK(!nres.deadlock && !bres.deadlock, "p%d m%d v%d g%d deadlocks: %s%s", p, m, v, g, nres.why, bres.why);
        CHECK(fabs(nres.bubble - bres.bubble) < 1e-12, "p%d m%d v%d g%d: bubble %.6f batched, %.6f buffered", p, m, v,
              g, nres.bubble, bres.bubble);
        for (int r = 0; r < p; r++) sched_free(&L[r]);
        free(L);
        if (check_failed_ > failures_before) fprintf(stderr, "  (in p=%d m=%d v=%d g=%d)\n", p, m, v, g);
        return bres.bubble;
    }
    CHECK(!nres.deadlock, "p%d m%d v%d deadlocks with batched rendezvous sends: %s", p, m, v, nres.why);
    CHECK(fabs(nres.bubble - sched_bubble_theory(p, m, v)) < 1e-12, "p%d m%d v%d batched bubble %.6f", p, m,
          v, nres.bubble);

    sched_sim_result res;
    CHECK(sched_simulate(p, m, v, 1, 1, &res, err, sizeof err) == 0, "%s", err);
    CHECK(!res.deadlock, "p%d m%d v%d deadlocks: %s", p, m, v, res.why);
    double theory = sched_bubble_theory(p, m, v);
    CHECK(res.ideal == 2.0 * m * v, "ideal %g", res.ideal);
    CHECK(res.makespan == res.ideal * (1 + theory) || fabs(res.bubble - theory) < 1e-12,
          "p%d m%d v%d: f=b bubble %.6f, theory (p-1)/(vm) = %.6f", p, m, v, res.bubble, theory);
    CHECK(sched_simulate(p, m, v, 1, 2, &res, err, sizeof err) == 0 && !res.deadlock, "b=2f sim");
    if (v == 1)
        CHECK(fabs(res.bubble - theory) < 1e-12, "p%d m%d 1F1B b=2f bubble %.6f, theory %.6f", p, m,
              res.bubble, theory);
    else
        CHECK(res.bubble <= theory + 1e-12, "p%d m%d v%d b=2f bubble %.6f above theory %.6f", p, m, v,
              res.bubble, theory);
    for (int r = 0; r < p; r++) sched_free(&L[r]);
    free(L);
    if (check_failed_ > failures_before) fprintf(stderr, "  (in p=%d m=%d v=%d)\n", p, m, v);
    return res.bubble;
}

int main(int argc, char **argv)
{
    (void)argc;
    int cases = 0;
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 24; m++) {
            check_one(p, m, 1);
            cases++;
            if (p >= 2 && m % p == 0)
                for (int v = 2; v <= 4; v++) {
                    check_one(p, m, v);
                    cases++;
                }
        }
    check_one(16, 64, 1), check_one(16, 64, 2), check_one(4, 8, 2), cases += 3;
    printf("checked %d (p, m, v) schedules\n", cases);

    /* --microbatch-group-size-per-virtual-pipeline-stage: every group size the
     * rules accept, m not a multiple of p included (Megatron's PP2 N3 M5) */
    int grouped = 0;
    for (int p = 2; p <= 6; p++)
        for (int m = p; m <= 20; m++)
            for (int v = 2; v <= 3; v++)
                for (int g = p; g <= m; g++) {
                    if (m % g && m % g < p) continue;
                    double bubble = check_one_g(p, m, v, g);
                    CHECK(fabs(bubble - sched_bubble_theory(p, m, v)) < 1e-12,
                          "p%d m%d v%d g%d: forward = backward, bubble %.6f, theory (p-1)/(vm) %.6f", p, m, v, g, bubble,
                          sched_bubble_theory(p, m, v));
                    grouped++;
                }
    printf("checked %d grouped (p, m, v, g) schedules\n", grouped);
    {
        sched_list a, b;
        char e[256];
        CHECK(sched_build(4, 1, 8, 2, 4, &a, e, sizeof e) == 0 && sched_build(4, 1, 8, 2, 0, &b, e, sizeof e) == 0 &&
                  a.n == b.n && !memcmp(a.a, b.a, sizeof *a.a * (size_t)a.n),
              "a group of p gives the default list");
        sched_free(&a);
        sched_free(&b);
        /* PP2 N3 M5 VP2, Megatron's example: forwards run (mb, chunk) 0,0 1,0 2,0 0,1 1,1 2,1 3,0 4,0 3,1 4,1 */
        CHECK(sched_build(2, 0, 5, 2, 3, &a, e, sizeof e) == 0, "%s", e);
        static const int want[10][2] = { {0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}, {3, 0}, {4, 0}, {3, 1}, {4, 1} };
        int k = 0, same = 1;
        for (int i = 0; i < a.n; i++)
            if (a.a[i].op == SCHED_FWD) {
                same &= k < 10 && a.a[i].mb == want[k][0] && a.a[i].chunk == want[k][1];
                k++;
            }
        CHECK(same && k == 10, "PP2 M5 in groups of 3: Megatron's forward order");
        CHECK(a.warmup == cfg_pipeline_warmup(2, 0, 5, 2, 3) && a.warmup == 2 + 3, "warm-up 2(p-r-1) + (v-1)g = %d", a.warmup);
        sched_free(&a);
        CHECK(sched_build(2, 0, 5, 2, 4, &a, e, sizeof e) == -1 && strstr(e, "last group of 1"), "%s", e);
        CHECK(sched_build(4, 0, 8, 2, 3, &a, e, sizeof e) == -1 && strstr(e, "between"), "%s", e);
        CHECK(sched_build(4, 0, 8, 2, 9, &a, e, sizeof e) == -1 && strstr(e, "between"), "%s", e);
        CHECK(sched_build(2, 0, 5, 2, 0, &a, e, sizeof e) == -1 && strstr(e, "multiple of"), "%s", e);
    }

    /* Megatron's warm-up counts (1F1B: p-r-1; interleaved: 2(p-r-1) + (v-1)p, capped) */
    CHECK(cfg_pipeline_warmup(4, 0, 8, 1, 0) == 3 && cfg_pipeline_warmup(4, 3, 8, 1, 0) == 0, "1F1B warm-up");
    CHECK(cfg_pipeline_warmup(4, 0, 2, 1, 0) == 2, "1F1B warm-up capped at m");
    CHECK(cfg_pipeline_warmup(4, 0, 8, 2, 0) == 10 && cfg_pipeline_warmup(4, 3, 8, 2, 0) == 4, "interleaved warm-up");
    CHECK(cfg_pipeline_warmup(4, 0, 4, 2, 0) == 8, "interleaved warm-up capped at m*v");
    /* the order of the interleaved forwards: p=2, v=2: mb 0,1 on chunk 0, then on chunk 1, ... */
    sched_list s;
    char err[256];
    sched_build(2, 0, 4, 2, 0, &s, err, sizeof err);
    int seq[16], n = 0;
    for (int i = 0; i < s.n && n < 8; i++)
        if (s.a[i].op == SCHED_FWD) seq[n++] = s.a[i].mb * 10 + s.a[i].chunk;
    int want[8] = {0, 10, 1, 11, 20, 30, 21, 31};
    CHECK(n == 8 && memcmp(seq, want, sizeof want) == 0, "interleaved forward order %d %d %d %d %d %d %d %d",
          seq[0], seq[1], seq[2], seq[3], seq[4], seq[5], seq[6], seq[7]);
    sched_free(&s);

    /* the simulator does catch a deadlock: move rank 1's first RECV_BWD ahead of
     * everything, so it waits for a gradient that needs its own forward first */
    sched_list D[2];
    for (int r = 0; r < 2; r++) sched_build(2, r, 4, 1, 0, &D[r], err, sizeof err);
    int rb = find(&D[0], SCHED_RECV_BWD, 0, 0);
    sched_action moved = D[0].a[rb];
    memmove(D[0].a + 1, D[0].a, sizeof(sched_action) * (size_t)rb);
    D[0].a[0] = moved;
    sched_sim_result res;
    CHECK(sched_simulate_lists(D, 1, 1, 0, SCHED_SENDS_BUFFERED, &res) == 0 && res.deadlock && strstr(res.why, "rank 0 waits"),
          "reordered schedule must deadlock: %s", res.why);
    CHECK(sched_simulate_lists(D, 1, 1, 0, SCHED_SENDS_BATCHED, &res) == 0 && res.deadlock,
          "reordered schedule must deadlock with batched sends too");
    for (int r = 0; r < 2; r++) sched_free(&D[r]);

    CHECK(sched_build(4, 0, 6, 2, 0, &s, err, sizeof err) == -1 && strstr(err, "multiple of"), "%s", err);
    CHECK(sched_build(1, 0, 4, 2, 0, &s, err, sizeof err) == -1 && strstr(err, ">= 2"), "%s", err);
    CHECK(sched_build(4, 4, 8, 1, 0, &s, err, sizeof err) == -1 && strstr(err, "rank"), "%s", err);
    CHECK(sched_build(4, 0, 0, 1, 0, &s, err, sizeof err) == -1, "m = 0 refused");
    return check_summary(argv[0]);
}
