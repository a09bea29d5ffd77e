/* par_launch: the local launcher with this binary as the rank program.
 * Checks the torchrun-style environment and the stripped command line, a clean
 * run of ranks that all-reduce, and failures: a rank killed by a signal while
 * the others block in a collective, a rank exiting non-zero while the others
 * sleep, and ranks that ignore SIGTERM (escalated to SIGKILL). Each failure must
 * stop the whole job within a few seconds, exit non-zero and name the rank. */
#include "check.h"
#include "comm.h"
#include "launcher.h"
#include "supervise.h"

#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int env_is(const char *name, int want)
{
    const char *v = getenv(name);
    return v && atoi(v) == want;
}

static int rank_main(int argc, char **argv)
{
    if (sup_child_guard()) return 1;
    const char *mode = argc > 1 ? argv[1] : "";
    int k = argc > 2 ? atoi(argv[2]) : -1;
    int rank = atoi(getenv("RANK")), world = atoi(getenv("WORLD_SIZE"));
    if (!strcmp(mode, "env")) {
        int ok = env_is("LOCAL_RANK", rank) && env_is("LOCAL_WORLD_SIZE", world) && world == 3 &&
                 getenv("MASTER_ADDR") && atoi(getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "0") > 0 &&
                 argc == 3 && !strcmp(argv[2], "tail");
        if (!ok) fprintf(stderr, "rank %d: bad environment or argv (argc %d)\n", rank, argc);
        return ok ? 0 : 1;
    }
    if (!strcmp(mode, "exit")) {
        if (rank == k) return 7;
        sleep(60);
        return 0;
    }
    if (!strcmp(mode, "pidfile")) { /* argv[2] is a directory: leave our pid there, then wait */
        char path[512];
        snprintf(path, sizeof path, "%s/rank-%d.pid", argv[2], rank);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
        sleep(60);
        return 0;
    }
    if (!strcmp(mode, "stubborn")) {
        signal(SIGTERM, SIG_IGN);
        if (rank == k) {
            usleep(100000);
            return 1;
        }
        sleep(60);
        return 0;
    }
    comm_world *w;
    char err[512];
    if (comm_world_init_env(&w, COMM_BACKEND_HOST, 0, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)(rank + i);
    if (!strcmp(mode, "die") && rank == k) raise(SIGKILL);
    /* in "die" mode the survivors block here until the dead rank's link drops */
    int rc = comm_allreduce(comm_world_comm(w), x, 1000, COMM_SUM);
    if (rc != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, comm_error(w));
        comm_world_free(w);
        return 3;
    }
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += x[i] != (float)(world * (world - 1) / 2 + world * i);
    comm_world_free(w);
    return bad ? 1 : 0;
}

static int run(int nproc, char *mode, char *arg, launcher_result *res)
{
    char *args[] = {"par_launch", mode, arg, NULL};
    launcher_opts o = {.nproc = nproc, .argc = arg ? 3 : 2, .argv = args, .kill_grace_ms = 500};
    return launcher_spawn(&o, res);
}

int main(int argc, char **argv)
{
    if (getenv("RANK")) return rank_main(argc, argv);
    launcher_result res;
    CHECK(run(4, "ok", NULL, &res) == 0 && res.failed_rank == -1, "clean run: %s", res.message);

    CHECK(run(4, "die", "2", &res) == 1, "killed rank fails the run");
    CHECK(res.failed_rank == 2 && res.term_signal == SIGKILL && strstr(res.message, "rank 2"),
          "names the killed rank: %s", res.message);
    CHECK(res.seconds < 5, "stopped in %.2f s", res.seconds);

    CHECK(run(3, "exit", "1", &res) == 1 && res.failed_rank == 1 && res.exit_code == 7 &&
          strstr(res.message, "rank 1") && strstr(res.message, "status 7"), "exit 7: %s", res.message);
    CHECK(res.seconds < 5, "sleeping ranks stopped in %.2f s", res.seconds);

    CHECK(run(3, "stubborn", "0", &res) == 1 && res.failed_rank == 0, "stubborn: %s", res.message);
    CHECK(res.seconds < 4, "SIGTERM-ignoring ranks killed in %.2f s", res.seconds);

    /* launcher_run strips --nproc-per-node (both spellings) and runs this binary */
    char *a1[] = {argv[0], "--nproc-per-node", "3", "env", "tail", NULL};
    CHECK(launcher_run(3, 5, a1) == 0, "launcher_run with --nproc-per-node N");
    char *a2[] = {argv[0], "env", "--nproc-per-node=3", "tail", NULL};
    CHECK(launcher_run(3, 4, a2) == 0, "launcher_run with --nproc-per-node=N");

    /* A supervisor killed with SIGKILL leaves no rank behind (PR_SET_PDEATHSIG). */
    char dir[] = "/tmp/par_launch_orphan.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temporary directory");
    pid_t sup = fork();
    if (sup == 0) {
        launcher_result r2;
        _exit(run(3, "pidfile", dir, &r2));
    }
    int pids[3] = {0, 0, 0}, have = 0;
    for (int t = 0; t < 500 && have < 3; t++) {
        have = 0;
        for (int i = 0; i < 3; i++) {
            char path[600];
            snprintf(path, sizeof path, "%s/rank-%d.pid", dir, i);
            FILE *f = fopen(path, "r");
            if (f) {
                have += fscanf(f, "%d", &pids[i]) == 1;
                fclose(f);
            }
        }
        usleep(10000);
    }
    CHECK(have == 3, "3 ranks started under a supervisor that will be killed");
    kill(sup, SIGKILL);
    waitpid(sup, NULL, 0);
    int alive = 3;
    for (int t = 0; t < 300 && alive; t++) {
        alive = 0;
        for (int i = 0; i < 3; i++) {
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/stat", pids[i]);
            FILE *f = fopen(path, "r");
            char st = 'X';
            if (f) {
                if (fscanf(f, "%*d %*s %c", &st) != 1) st = 'X';
                fclose(f);
            }
            alive += f && st != 'Z' && st != 'X';
        }
        if (alive) usleep(10000);
    }
    CHECK(alive == 0, "no rank outlives its SIGKILLed supervisor (%d still running)", alive);
    for (int i = 0; i < 3; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/rank-%d.pid", dir, i);
        unlink(path);
    }
    rmdir(dir);

    char *bad[] = {"x", NULL};
    launcher_opts o = {.nproc = 2, .argc = 1, .argv = bad, .exe = "/nonexistent/atoll-train"};
    CHECK(launcher_spawn(&o, &res) == 2 && strstr(res.message, "cannot start rank 0"), "missing exe: %s", res.message);
    o.nproc = 0;
    CHECK(launcher_spawn(&o, &res) == 2 && strstr(res.message, "--nproc-per-node"), "nproc 0: %s", res.message);
    return check_summary(argv[0]);
}
