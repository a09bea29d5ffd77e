/* bubble_floor: the pipeline bubble the schedules allow, by simulation.
 *
 *   bubble_floor [--out FILE.md]
 *
 * Runs the 1F1B and interleaved schedules of engine/schedule.c through the
 * simulator at pp=4, m=8, v=1,2 (the layouts the measured CPU bubble will be
 * compared at), under these cost models: a full stage's forward F = 1; backward
 * B = F or B = 2F (Megatron's estimate); a chunk of a v-chunk stage costs 1/v of
 * that; each activation/gradient transfer arrives X after it is sent (X = 0,
 * 0.05 F, 0.2 F). It prints the step time against the ideal m(F+B), the bubble
 * fraction, theory (p-1)/(vm), and per-stage time blocked in receives, which is
 * what the engine measures as "bubble time". */
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

static double step_time(int p, int m, int v, double F, double B, double X, sched_sim_result *res)
{
    sched_list L[64];
    char err[256];
    for (int r = 0; r < p; r++)
        if (sched_build(p, r, m, v, 0, &L[r], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
    sched_simulate_lists(L, F / v, B / v, X, SCHED_SENDS_BUFFERED, res);
    for (int r = 0; r < p; r++) sched_free(&L[r]);
    return res->makespan;
}

static void row(FILE *o, int p, int m, int v, double F, double B, double X)
{
    sched_list L[64];
    char err[256];
    for (int r = 0; r < p; r++)
        if (sched_build(p, r, m, v, 0, &L[r], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
    sched_sim_result res;
    sched_simulate_lists(L, F / v, B / v, X, SCHED_SENDS_BUFFERED, &res);
    double ideal = m * (F + B);
    fprintf(o, "| %d | %d | %d | %g | %g | %.3f | %.3f | %.4f | %.4f | ", p, m, v, B / F, X, res.makespan, ideal,
            (res.makespan - ideal) / ideal, sched_bubble_theory(p, m, v));
    for (int r = 0; r < p; r++) fprintf(o, "%s%.2f", r ? " / " : "", res.wait[r]);
    fprintf(o, " | %s |\n", res.deadlock ? "DEADLOCK" : "ok");
    for (int r = 0; r < p; r++) sched_free(&L[r]);
}

int main(int argc, char **argv)
{
    const char *out = argc == 3 && !strcmp(argv[1], "--out") ? argv[2] : "bench/results/bubble_floor.md";
    FILE *o = fopen(out, "w");
    if (!o) {
        fprintf(stderr, "bubble_floor: cannot write %s\n", out);
        return 1;
    }
    time_t t = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    struct utsname u;
    uname(&u);
    fprintf(o, "# Pipeline bubble floor (simulated schedules)\n\n- date: %s\n- machine: `%s %s %s`\n- command: `%s`\n"
               "- model: full-stage forward F = 1, backward B; a chunk costs 1/v of a stage; a transfer sent at t "
               "arrives at t + X; sends never block (buffered, as on the host transport).\n\n",
            date, u.sysname, u.release, u.machine, argv[0]);
    fprintf(o, "| p | m | v | B/F | X | step | ideal m(F+B) | bubble | theory (p-1)/(vm) | blocked in receives, per stage | |\n"
               "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    double Bs[2] = {1, 2}, Xs[3] = {0, 0.05, 0.2};
    for (int bi = 0; bi < 2; bi++)
        for (int xi = 0; xi < 3; xi++)
            for (int v = 1; v <= 2; v++) row(o, 4, 8, v, 1, Bs[bi], Xs[xi]);

    sched_sim_result r1, r2;
    double s10 = step_time(4, 8, 1, 1, 1, 0, &r1), s20 = step_time(4, 8, 2, 1, 1, 0, &r2);
    double last1 = r1.wait[3], last2 = r2.wait[3];
    double k1 = (step_time(4, 8, 1, 1, 1, 0.2, &r1) - s10) / 0.2;
    double k2 = (step_time(4, 8, 2, 1, 1, 0.2, &r2) - s20) / 0.2;
    double xeq = 0; /* transfer latency at which v=2 loses its advantage (B = F) */
    for (double x = 0; x <= 10; x += 0.01)
        if (step_time(4, 8, 2, 1, 1, x, &r2) >= step_time(4, 8, 1, 1, 1, x, &r1)) {
            xeq = x;
            break;
        }
    fprintf(o, "\n## Floor analysis (pp=4, m=8)\n\n"
               "- With free transfers the simulated bubble is exactly (p-1)/(vm) for B = F and for B = 2F: "
               "%.4f at v=1, %.4f at v=2. With equal stages no measurement can go below it; a measured CPU bubble "
               "is this floor plus transfer and imbalance time.\n"
               "- Per-stage time blocked in receives is not the same on every stage. The first stage waits the "
               "whole bubble (p-1)(F+B)/v inside receives; the last stage waits only (p-1)F/v (%.2f at v=1, %.2f at "
               "v=2, B = F) before its first forward, and is idle (p-1)B/v after its last backward, where no receive "
               "is pending. So a stage's bubble time must count its idle time up to the step's closing "
               "synchronisation (or equal step time minus its own compute); the blocked-in-receive time alone "
               "understates the bubble on every stage but the first.\n"
               "- Transfers: the step grows by %.0f X at v=1 and %.0f X at v=2 (X = one transfer's latency, "
               "B = F): the transfers on the critical path. v=2 has more of them because each slot of Megatron's interleaved structure ends in one batch that also receives the next slot's inputs, so a rank waits for the next forward's activation and the next backward's gradient together. Interleaving "
               "stops paying once X reaches about %.2f F here, i.e. when a boundary transfer costs that fraction of "
               "a full stage's forward. On the host transport a 1 KiB all-reduce of 2 ranks (two ring "
               "messages each way) takes some 30-60 us on loopback (bench/results/comm_allreduce.md), so one small "
               "message costs roughly 15-25 us plus its bytes at about 1-2 GB/s. For the tiny test GPT, whose stage "
               "forward is itself only some hundreds of microseconds, X/F is not negligible and the measured v=2 "
               "gain will fall short of theory; larger micro-batches or models move it towards the floor.\n",
            sched_bubble_theory(4, 8, 1), sched_bubble_theory(4, 8, 2), last1, last2, k1, k2, xeq);
    fclose(o);
    printf("wrote %s\n", out);
    return 0;
}
