/* supervise: spawning and supervising the rank processes of one job on this
 * machine. The standalone launcher (`atoll-train --nproc-per-node`) and workerd
 * both run their ranks through it, on their libuv loop (uv_spawn, exit callbacks;
 * no threads).
 *
 * Each rank gets the torchrun-style environment: RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (the rendezvous store),
 * GROUP_RANK when the caller gives one, CUDA_VISIBLE_DEVICES when the rank has a
 * GPU, and atoll's own: ATOLL_JOB_ID and ATOLL_JOB_EPOCH (the rendezvous scope),
 * ATOLL_JOB_SECRET_FD (an inherited, sealed memfd holding the job secret, when
 * given), ATOLL_METRICS_FD (the write end of a channel of frames to the
 * supervisor, when asked for) and ATOLL_SUPERVISOR_PID. Every other variable of
 * the supervisor's environment, NCCL_* included, passes through untouched, and
 * the job's own variables (sup_opts.env) are set over it.
 *
 * Ranks run in their own process group (a session each), so a stop reaches
 * anything a rank started. A rank that calls sup_child_guard() first dies with its
 * supervisor (PR_SET_PDEATHSIG), so killing the supervisor, even with SIGKILL,
 * leaves no orphan. sup_stop sends SIGINT to every rank's group (stop now; with
 * SIGCONT, so a stopped rank acts on it), then
 * SIGKILL after the grace period; sup_stop_signal(SIGTERM) asks ranks that save
 * checkpoints to commit one first and exit with SUP_EXIT_SAVED (the signal Slurm
 * sends before it ends an allocation means the same). Each exit is reported at
 * once through on_exit.
 *
 * Ownership: the caller owns the sup_set and the sup_rank array and keeps both
 * alive until on_closed has been called (every process and channel handle
 * closed); the module owns what it allocates inside them and frees it by then.
 */
#ifndef ATOLL_SUPERVISE_H
#define ATOLL_SUPERVISE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "frame.h"

#define SUP_SECRET_FD 3   /* ATOLL_JOB_SECRET_FD in the rank */
#define SUP_CHANNEL_FD 4  /* ATOLL_METRICS_FD in the rank */
#define SUP_LOG_PATH 512
/* A rank's exit status after it stopped on SIGTERM with its checkpoint committed
 * (EX_TEMPFAIL: resume it with --load). */
#define SUP_EXIT_SAVED 75
/* A rank's exit status when it refused its configuration or inputs before
 * training (EX_CONFIG: a layout or model that cannot work, data that is not
 * there, a directory it cannot write): starting it again the same way fails the
 * same way, so supervisors report it and do not restart. */
#define SUP_EXIT_CONFIG 78

typedef struct sup_set sup_set;

typedef struct sup_rank {
    int rank, local_rank;      /* given */
    int gpu;                   /* given: local GPU index, -1 = none (CUDA_VISIBLE_DEVICES untouched) */
    /* filled by the module */
    int pid;
    int running;
    int exit_status;           /* when it exited */
    int term_signal;           /* when a signal killed it, else 0 */
    char log_path[SUP_LOG_PATH]; /* "" when it logs to the supervisor's stdout/stderr */
    /* private */
    sup_set *set;
    uv_process_t proc;
    uv_pipe_t chan;
    frame_decoder dec;
    int proc_open, chan_open;
} sup_rank;

typedef struct sup_opts {
    const char *exe;           /* the program */
    char *const *argv;         /* its argv, argv[0] included */
    int world;                 /* WORLD_SIZE */
    int group_rank;            /* GROUP_RANK (node index); -1 = not set */
    const char *master_addr;   /* rendezvous store */
    int master_port;
    uint64_t job;              /* rendezvous scope: ATOLL_JOB_ID, ATOLL_JOB_EPOCH */
    uint32_t epoch;
    const auth_token *secret;  /* the job secret handed to every rank; NULL = none */
    const char *log_dir;       /* rank-<R>.log there (stdout and stderr); NULL = inherit */
    const char *cwd;           /* working directory of the ranks; NULL = the supervisor's */
    char *const *env;          /* n_env "KEY=VALUE" set in every rank (a job's --env), over inherited values; */
    size_t n_env;              /* read in sup_start only; entries must pass sup_env_check */
    int channel;               /* 1: a frame channel per rank on SUP_CHANNEL_FD */
    int grace_ms;              /* SIGTERM -> SIGKILL; 0 = 2000 */
    void (*on_exit)(sup_set *s, sup_rank *r);
    void (*on_frame)(sup_set *s, sup_rank *r, uint16_t type, const uint8_t *payload, size_t len);
    void (*on_closed)(sup_set *s);
    void *data;                /* the caller's */
} sup_opts;

struct sup_set {
    uv_loop_t *loop;
    sup_opts o;
    sup_rank *ranks;
    int n;
    int alive;                 /* ranks still running */
    int open_handles;          /* process, channel and timer handles not yet closed */
    int stopping;
    int closed_reported;
    uv_timer_t kill_timer;
    char ***envs;              /* per-rank environment blocks, freed at the end */
};

/* The one rule for a job's own environment (`atoll submit --env`): at most
 * SUP_ENV_COUNT entries, each "KEY=VALUE" of at most SUP_ENV_BYTES with KEY a shell
 * name ([A-Za-z_][A-Za-z0-9_]*), no KEY twice, and none of the variables the
 * supervisor sets itself (the torchrun ones, ATOLL_JOB_ID..., CUDA_VISIBLE_DEVICES).
 * 0, or -1 with err saying which entry and what would be accepted. */
#define SUP_ENV_COUNT 64
#define SUP_ENV_BYTES 4096
int sup_env_check(char *const *kv, size_t n, char *err, size_t errlen);

/* Starts the n ranks. On a spawn failure the ones already started are stopped
 * and -1 is returned with err naming the rank and the reason; on_closed still
 * follows once they are gone. 0 on success. */
int sup_start(sup_set *s, uv_loop_t *loop, const sup_opts *o, sup_rank *ranks, int n, char *err, size_t errlen);

/* SIGINT to every running rank's process group now, SIGKILL after the grace
 * period. Safe to call more than once. */
void sup_stop(sup_set *s);
/* The same with `signum`, and SIGKILL after grace_ms (0: the set's grace). A
 * later call sends its signal but keeps the first SIGKILL deadline. */
void sup_stop_signal(sup_set *s, int signum, int grace_ms);

/* In the rank, first thing: die with the supervisor. 0, or -1 when the
 * supervisor named in ATOLL_SUPERVISOR_PID is already gone (exit then). */
int sup_child_guard(void);

/* The path of this program (name NULL) or of the program NAME in the same
 * directory, as the build and an install put atoll, workerd and atoll-train
 * together. 0, or -1 when /proc/self/exe cannot be read or the path does not fit
 * (buf then holds NAME alone, or "", for a message). */
int sup_exe_path(const char *name, char *buf, size_t len);

/* "rank 3 (pid 1234) exited with status 1" / "... was killed by signal 9 (Killed)" /
 * "... exited with status 78 (its configuration was refused)". */
void sup_describe_exit(char *buf, size_t len, int rank, int pid, int exit_status, int term_signal);

/* Of n failed ranks, in the order their failures were seen, the one to blame:
 * the first that refused its configuration (SUP_EXIT_CONFIG: the cause, and one
 * a restart cannot cure), else the first killed by a signal, else the first. A
 * rank's death makes its peers fail within moments (their links drop), so the
 * signalled one is the cause. */
int sup_blame(const int *exit_status, const int *term_signals, int n);

#endif
