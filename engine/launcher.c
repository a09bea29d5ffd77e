#include "launcher.h"

#include "store.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

extern char **environ;

typedef struct launch launch;

typedef struct {
    uv_process_t proc;
    launch *l;
    int rank, running, pid, status, term_signal;
    char **env;
} child;

#define SETTLE_MS 250

struct launch {
    uv_loop_t loop;
    store_server *store;
    child *kids;
    int n, alive, stopping;
    uv_timer_t kill_timer, settle_timer;
    child **failed; /* in the order their exits were reaped */
    int nfailed, interrupted;
    uv_signal_t sigint, sigterm;
    int grace_ms;
    launcher_result *res;
    uint64_t t0;
};

static void kill_all(launch *l, int sig)
{
    for (int i = 0; i < l->n; i++)
        if (l->kids[i].running) uv_process_kill(&l->kids[i].proc, sig);
}

static void on_kill_timer(uv_timer_t *t)
{
    launch *l = t->data;
    kill_all(l, SIGKILL);
}

static void close_loop_handles(launch *l)
{
    store_server_close(l->store);
    uv_close((uv_handle_t *)&l->kill_timer, NULL);
    uv_close((uv_handle_t *)&l->settle_timer, NULL);
    uv_close((uv_handle_t *)&l->sigint, NULL);
    uv_close((uv_handle_t *)&l->sigterm, NULL);
}

/* Stop the job: SIGTERM now, SIGKILL after the grace period. */
static void stop_job(launch *l)
{
    if (l->stopping) return;
    l->stopping = 1;
    kill_all(l, SIGTERM);
    uv_timer_start(&l->kill_timer, on_kill_timer, (uint64_t)l->grace_ms, 0);
}

static void describe(char *buf, size_t len, const child *c)
{
    if (c->term_signal)
        snprintf(buf, len, "rank %d (pid %d) was killed by signal %d (%s)", c->rank, c->pid,
                 c->term_signal, strsignal(c->term_signal));
    else
        snprintf(buf, len, "rank %d (pid %d) exited with status %d", c->rank, c->pid, c->status);
}

/* A rank's death usually makes its peers fail too (their links drop) within
 * milliseconds, and exits can be reaped in any order. So the launcher waits a
 * moment, then blames the first rank killed by a signal, else the first that
 * exited non-zero, and names the others as following it. */
static void on_settle(uv_timer_t *t)
{
    launch *l = t->data;
    child *culprit = NULL;
    for (int i = 0; i < l->nfailed && !culprit; i++)
        if (l->failed[i]->term_signal) culprit = l->failed[i];
    if (!culprit) culprit = l->failed[0];
    launcher_result *r = l->res;
    r->failed_rank = culprit->rank;
    r->exit_code = culprit->status;
    r->term_signal = culprit->term_signal;
    char what[160];
    describe(what, sizeof what, culprit);
    int n = snprintf(r->message, sizeof r->message, "%s", what);
    int others = 0;
    for (int i = 0; i < l->nfailed; i++)
        if (l->failed[i] != culprit && n < (int)sizeof r->message)
            n += snprintf(r->message + n, sizeof r->message - (size_t)n, "%s%d",
                          others++ ? ", " : "; then failed: rank ", l->failed[i]->rank);
    if (n < (int)sizeof r->message)
        snprintf(r->message + n, sizeof r->message - (size_t)n, "; stopping the other %d rank(s)",
                 l->alive);
    fprintf(stderr, "atoll-train: %s\n", r->message);
    stop_job(l);
}

static void on_child_exit(uv_process_t *p, int64_t status, int term_signal)
{
    child *c = (child *)p;
    launch *l = c->l;
    c->running = 0;
    c->status = (int)status;
    c->term_signal = term_signal;
    l->alive--;
    if ((status != 0 || term_signal != 0) && !l->stopping && !l->interrupted) {
        l->failed[l->nfailed++] = c;
        if (l->nfailed == 1) uv_timer_start(&l->settle_timer, on_settle, SETTLE_MS, 0);
    }
    uv_close((uv_handle_t *)p, NULL);
    if (l->alive == 0) {
        if (l->nfailed && !l->stopping) { /* everyone is gone: decide now */
            uv_timer_stop(&l->settle_timer);
            on_settle(&l->settle_timer);
        }
        close_loop_handles(l);
    }
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
    stop_job(l);
}

static char **make_env(int rank, int n, const char *addr, int port)
{
    static const char *const ours[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
                                       "MASTER_ADDR=", "MASTER_PORT=", "GROUP_RANK=", NULL};
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **env = calloc(ne + 8, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < ne; i++) {
        int skip = 0;
        for (int j = 0; ours[j]; j++)
            if (strncmp(environ[i], ours[j], strlen(ours[j])) == 0) skip = 1;
        if (!skip) env[k++] = strdup(environ[i]);
    }
    char buf[320];
    snprintf(buf, sizeof buf, "RANK=%d", rank), env[k++] = strdup(buf);
    snprintf(buf, sizeof buf, "LOCAL_RANK=%d", rank), env[k++] = strdup(buf);
    snprintf(buf, sizeof buf, "WORLD_SIZE=%d", n), env[k++] = strdup(buf);
    snprintf(buf, sizeof buf, "LOCAL_WORLD_SIZE=%d", n), env[k++] = strdup(buf);
    snprintf(buf, sizeof buf, "GROUP_RANK=0"), env[k++] = strdup(buf);
    snprintf(buf, sizeof buf, "MASTER_ADDR=%s", addr), env[k++] = strdup(buf);
    snprintf(buf, sizeof buf, "MASTER_PORT=%d", port), env[k++] = strdup(buf);
    return env;
}

static void free_env(char **env)
{
    for (char **e = env; e && *e; e++) free(*e);
    free(env);
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
    } else {
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (len <= 0) snprintf(exe, sizeof exe, "%s", o->argv[0]);
        else exe[len] = 0;
    }
    const char *addr = getenv("MASTER_ADDR");
    if (!addr || !*addr) addr = "127.0.0.1";
    const char *penv = getenv("MASTER_PORT");
    int port = penv && *penv ? atoi(penv) : 0;

    launch l;
    memset(&l, 0, sizeof l);
    l.res = res;
    l.n = o->nproc;
    l.grace_ms = o->kill_grace_ms > 0 ? o->kill_grace_ms : 2000;
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
    uv_timer_init(&l.loop, &l.kill_timer);
    uv_timer_init(&l.loop, &l.settle_timer);
    l.kill_timer.data = l.settle_timer.data = &l;
    uv_signal_init(&l.loop, &l.sigint);
    uv_signal_init(&l.loop, &l.sigterm);
    l.sigint.data = l.sigterm.data = &l;
    uv_signal_start(&l.sigint, on_signal, SIGINT);
    uv_signal_start(&l.sigterm, on_signal, SIGTERM);

    l.kids = calloc((size_t)o->nproc, sizeof *l.kids);
    l.failed = calloc((size_t)o->nproc, sizeof *l.failed);
    char **args = calloc((size_t)o->argc + 1, sizeof *args);
    for (int i = 0; i < o->argc; i++) args[i] = o->argv[i];
    uv_stdio_container_t stdio[3];
    for (int i = 0; i < 3; i++) {
        stdio[i].flags = UV_INHERIT_FD;
        stdio[i].data.fd = i;
    }
    int launch_failed = 0;
    for (int i = 0; i < o->nproc; i++) {
        child *c = &l.kids[i];
        c->l = &l;
        c->rank = i;
        c->env = make_env(i, o->nproc, addr, port);
        uv_process_options_t po;
        memset(&po, 0, sizeof po);
        po.exit_cb = on_child_exit;
        po.file = exe;
        po.args = args;
        po.env = c->env;
        po.stdio_count = 3;
        po.stdio = stdio;
        int rc = uv_spawn(&l.loop, &c->proc, &po);
        if (rc != 0) {
            snprintf(res->message, sizeof res->message, "cannot start rank %d (%.160s): %s", i,
                     exe, uv_strerror(rc));
            fprintf(stderr, "atoll-train: %s\n", res->message);
            uv_close((uv_handle_t *)&c->proc, NULL); /* libuv: a failed spawn still needs closing */
            launch_failed = 1;
            break;
        }
        c->running = 1;
        c->pid = c->proc.pid;
        l.alive++;
    }
    if (launch_failed) stop_job(&l);
    if (l.alive == 0) close_loop_handles(&l);
    uv_run(&l.loop, UV_RUN_DEFAULT);
    uv_loop_close(&l.loop);
    res->seconds = (uv_hrtime() - l.t0) / 1e9;
    for (int i = 0; i < o->nproc; i++) free_env(l.kids[i].env);
    free(l.kids);
    free(l.failed);
    free(args);
    if (launch_failed) return 2;
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
