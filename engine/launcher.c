#include "launcher.h"

#include "store.h"
#include "supervise.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define SETTLE_MS 250
#define SAVE_GRACE_MS 30000 /* SIGTERM to the launcher: how long ranks get to commit a checkpoint */

typedef struct launch {
    uv_loop_t loop;
    store_server *store;
    sup_set set;
    sup_rank *ranks;
    int stopping;
    uv_timer_t settle_timer;
    sup_rank **failed; /* in the order their exits were reaped */
    int nfailed, interrupted;
    int saved; /* ranks that exited SUP_EXIT_SAVED */
    uv_signal_t sigint, sigterm;
    launcher_result *res;
    uint64_t t0;
} launch;

static void close_loop_handles(launch *l)
{
    store_server_close(l->store);
    uv_close((uv_handle_t *)&l->settle_timer, NULL);
    uv_close((uv_handle_t *)&l->sigint, NULL);
    uv_close((uv_handle_t *)&l->sigterm, NULL);
}

/* Stop the job: `signum` now, SIGKILL after the grace period (SIGTERM: after
 * SAVE_GRACE_MS, the ranks commit a checkpoint first). */
static void stop_job(launch *l, int signum)
{
    l->stopping = 1;
    sup_stop_signal(&l->set, signum, signum == SIGTERM ? SAVE_GRACE_MS : 0);
}

/* A rank's death usually makes its peers fail too (their links drop) within
 * milliseconds, and exits can be reaped in any order. So the launcher waits a
 * moment, then blames one (sup_blame) and names the others as following it. */
static void on_settle(uv_timer_t *t)
{
    launch *l = t->data;
    int sigs[l->nfailed > 0 ? l->nfailed : 1], codes[l->nfailed > 0 ? l->nfailed : 1];
    for (int i = 0; i < l->nfailed; i++) {
        sigs[i] = l->failed[i]->term_signal;
        codes[i] = l->failed[i]->exit_status;
    }
    sup_rank *culprit = l->failed[sup_blame(codes, sigs, l->nfailed)];
    launcher_result *r = l->res;
    r->failed_rank = culprit->rank;
    r->exit_code = culprit->exit_status;
    r->term_signal = culprit->term_signal;
    char what[160];
    sup_describe_exit(what, sizeof what, culprit->rank, culprit->pid, culprit->exit_status, culprit->term_signal);
    int n = snprintf(r->message, sizeof r->message, "%s", what);
    int others = 0;
    for (int i = 0; i < l->nfailed; i++)
        if (l->failed[i] != culprit && n < (int)sizeof r->message)
            n += snprintf(r->message + n, sizeof r->message - (size_t)n, "%s%d",
                          others++ ? ", " : "; then failed: rank ", l->failed[i]->rank);
    if (n < (int)sizeof r->message && l->set.alive)
        snprintf(r->message + n, sizeof r->message - (size_t)n, "; stopping the other %d rank%s", l->set.alive,
                 l->set.alive == 1 ? "" : "s");
    fprintf(stderr, "atoll-train: %s\n", r->message);
    stop_job(l, SIGINT);
}

static void on_rank_exit(sup_set *s, sup_rank *r)
{
    launch *l = s->o.data;
    int saved = r->exit_status == SUP_EXIT_SAVED && !r->term_signal;
    l->saved += saved;
    if ((r->exit_status != 0 || r->term_signal != 0) && !saved && !l->stopping && !l->interrupted) {
        l->failed[l->nfailed++] = r;
        if (l->nfailed == 1) uv_timer_start(&l->settle_timer, on_settle, SETTLE_MS, 0);
    }
    if (s->alive == 0 && l->nfailed && !l->stopping) { /* everyone is gone: decide now */
        uv_timer_stop(&l->settle_timer);
        on_settle(&l->settle_timer);
    }
}

static void on_ranks_closed(sup_set *s)
{
    close_loop_handles(s->o.data);
}

static void on_signal(uv_signal_t *s, int signum)
{
    launch *l = s->data;
    if (!l->stopping && !l->nfailed) {
        l->interrupted = 1;
        snprintf(l->res->message, sizeof l->res->message,
                 "launcher got signal %d (%s); stopping all ranks", signum, strsignal(signum));
        fprintf(stderr, "atoll-train: %s\n", l->res->message);
        l->res->term_signal = signum;
    }
    stop_job(l, signum);
}

int launcher_spawn(const launcher_opts *o, launcher_result *res)
{
    memset(res, 0, sizeof *res);
    res->failed_rank = -1;
    if (o->nproc < 1 || o->nproc > 4096) {
        snprintf(res->message, sizeof res->message,
                 "--nproc-per-node must be between 1 and 4096 (got %d)", o->nproc);
        fprintf(stderr, "atoll-train: %s\n", res->message);
        return 2;
    }
    char exe[PATH_MAX];
    if (o->exe) {
        snprintf(exe, sizeof exe, "%s", o->exe);
    } else if (sup_exe_path(NULL, exe, sizeof exe)) {
        snprintf(exe, sizeof exe, "%s", o->argv[0]);
    }
    const char *addr = getenv("MASTER_ADDR");
    if (!addr || !*addr) addr = "127.0.0.1";
    const char *penv = getenv("MASTER_PORT");
    int port = penv && *penv ? atoi(penv) : 0;

    launch l;
    memset(&l, 0, sizeof l);
    l.res = res;
    uv_loop_init(&l.loop);
    l.t0 = uv_hrtime();
    char err[256];
    /* The store listens where ranks will dial it: MASTER_ADDR (all interfaces if
     * that is not a local literal address, the common case being 127.0.0.1). */
    if (store_server_start(&l.loop, addr, port, &l.store, err, sizeof err) != 0 &&
        store_server_start(&l.loop, "0.0.0.0", port, &l.store, err, sizeof err) != 0) {
        snprintf(res->message, sizeof res->message, "%s", err);
        fprintf(stderr, "atoll-train: %s\n", err);
        uv_run(&l.loop, UV_RUN_DEFAULT);
        uv_loop_close(&l.loop);
        return 2;
    }
    port = store_server_port(l.store);
    uv_timer_init(&l.loop, &l.settle_timer);
    l.settle_timer.data = &l;
    uv_signal_init(&l.loop, &l.sigint);
    uv_signal_init(&l.loop, &l.sigterm);
    l.sigint.data = l.sigterm.data = &l;
    uv_signal_start(&l.sigint, on_signal, SIGINT);
    uv_signal_start(&l.sigterm, on_signal, SIGTERM);

    l.ranks = calloc((size_t)o->nproc, sizeof *l.ranks);
    l.failed = calloc((size_t)o->nproc, sizeof *l.failed);
    char **args = calloc((size_t)o->argc + 1, sizeof *args);
    for (int i = 0; i < o->argc; i++) args[i] = o->argv[i];
    for (int i = 0; i < o->nproc; i++) {
        l.ranks[i].rank = l.ranks[i].local_rank = i;
        l.ranks[i].gpu = -1; /* CUDA ranks pick their device by LOCAL_RANK */
    }
    store_auth auth; /* the ranks prove this secret to the store and to each other */
    store_server_auth(l.store, &auth);
    sup_opts so = {
        .exe = exe, .argv = args, .world = o->nproc, .group_rank = 0, .master_addr = addr, .master_port = port,
        .job = auth.job, .epoch = auth.epoch, .secret = &auth.secret,
        .grace_ms = o->kill_grace_ms > 0 ? o->kill_grace_ms : 2000, .on_exit = on_rank_exit,
        .on_closed = on_ranks_closed, .data = &l,
    };
    int launch_failed = sup_start(&l.set, &l.loop, &so, l.ranks, o->nproc, err, sizeof err) != 0;
    if (launch_failed) {
        snprintf(res->message, sizeof res->message, "%s", err);
        fprintf(stderr, "atoll-train: %s\n", res->message);
        l.stopping = 1;
    }
    uv_run(&l.loop, UV_RUN_DEFAULT);
    uv_loop_close(&l.loop);
    store_server_free(l.store);
    res->seconds = (uv_hrtime() - l.t0) / 1e9;
    free(l.ranks);
    free(l.failed);
    free(args);
    if (launch_failed) return 2;
    if (l.saved == o->nproc && res->failed_rank < 0) {
        snprintf(res->message, sizeof res->message, "all %d ranks saved a checkpoint and stopped", o->nproc);
        fprintf(stderr, "atoll-train: %s\n", res->message);
        return SUP_EXIT_SAVED;
    }
    if (res->failed_rank >= 0 && !res->term_signal && res->exit_code == SUP_EXIT_CONFIG) return SUP_EXIT_CONFIG;
    if (res->failed_rank >= 0 || res->term_signal) return 1;
    return 0;
}

int launcher_run(int nproc, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 1, sizeof *args);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--nproc-per-node") == 0 || strcmp(argv[i], "--nproc_per_node") == 0) {
            i++; /* and its value */
            continue;
        }
        if (strncmp(argv[i], "--nproc-per-node=", 17) == 0 ||
            strncmp(argv[i], "--nproc_per_node=", 17) == 0)
            continue;
        args[n++] = argv[i];
    }
    launcher_opts o = {.nproc = nproc, .argc = n, .argv = args};
    launcher_result r;
    int rc = launcher_spawn(&o, &r);
    free(args);
    return rc;
}
