/* launcher: `atoll-train --nproc-per-node N`, the local multi-process launcher.
 *
 * Starts N ranks of the same binary on this machine, torchrun-style: each gets
 * RANK = LOCAL_RANK = i, WORLD_SIZE = LOCAL_WORLD_SIZE = N, MASTER_ADDR and
 * MASTER_PORT (the rendezvous store the launcher serves; MASTER_PORT from the
 * launcher's own environment if set, else an ephemeral port). The ranks'
 * command line is the launcher's with `--nproc-per-node N` removed.
 *
 * One libuv loop runs the store server, the child processes and the timers; the
 * ranks are spawned and supervised by common/supervise.h, as workerd's are (own
 * process group, die with the launcher even when it is SIGKILLed). If any rank
 * exits non-zero or by a signal, the launcher sends SIGINT to the others,
 * SIGKILL after a grace period, and fails naming the rank. SIGINT to the launcher
 * stops all ranks the same way; SIGTERM is passed on with 30 s before SIGKILL, so
 * ranks with --save commit a checkpoint and stop, and when all of them did the
 * launcher exits SUP_EXIT_SAVED (75).
 */
#ifndef ATOLL_LAUNCHER_H
#define ATOLL_LAUNCHER_H

typedef struct {
    int nproc;
    int argc;
    char **argv;         /* the ranks' argv (argv[0] included), used as given */
    const char *exe;     /* NULL: this binary (/proc/self/exe) */
    int kill_grace_ms;   /* SIGINT -> SIGKILL; 0 = 2000 */
} launcher_opts;

typedef struct {
    int failed_rank;     /* first rank that failed, -1 if none */
    int exit_code;       /* its exit status (when it exited) */
    int term_signal;     /* its signal (when killed), 0 otherwise */
    double seconds;      /* launch to last rank gone */
    char message[256];   /* one line, also printed to stderr on failure */
} launcher_result;

/* Runs the ranks to completion. Returns 0 when all exit 0, 1 when a rank failed
 * (res says which), SUP_EXIT_CONFIG when the rank blamed refused its
 * configuration, 2 when the launch itself failed (message says why),
 * SUP_EXIT_SAVED when every rank stopped after saving a checkpoint. */
int launcher_spawn(const launcher_opts *o, launcher_result *res);

/* atoll-train's entry: strips --nproc-per-node from argv and runs launcher_spawn.
 * Returns the process exit status. */
int launcher_run(int nproc, int argc, char **argv);

#endif
