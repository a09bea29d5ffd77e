#include "supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

extern char **environ;

/* Variables the supervisor sets; inherited values of these are dropped. */
static const char *const OURS[] = {
    "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "GROUP_RANK=", "MASTER_ADDR=", "MASTER_PORT=",
    "ATOLL_JOB_ID=", "ATOLL_JOB_EPOCH=", "ATOLL_JOB_SECRET_FD=", "ATOLL_METRICS_FD=", "ATOLL_SUPERVISOR_PID=",
    NULL,
};

static int ours(const char *kv, int gpu_set)
{
    for (int j = 0; OURS[j]; j++)
        if (!strncmp(kv, OURS[j], strlen(OURS[j]))) return 1;
    return gpu_set && !strncmp(kv, "CUDA_VISIBLE_DEVICES=", 21);
}

static size_t name_len(const char *kv)
{
    const char *eq = strchr(kv, '=');
    return eq ? (size_t)(eq - kv) : strlen(kv);
}

/* 1 when the two NAME=VALUE entries name the same variable. */
static int same_name(const char *a, const char *b)
{
    size_t len = name_len(a);
    return name_len(b) == len && !strncmp(a, b, len);
}

int sup_env_check(char *const *kv, size_t n, char *err, size_t errlen)
{
    if (n > SUP_ENV_COUNT) {
        snprintf(err, errlen, "more than %d environment variables", SUP_ENV_COUNT);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const char *e = kv[i];
        size_t len = name_len(e);
        int ok = len > 0 && e[len] == '=' && !(e[0] >= '0' && e[0] <= '9');
        for (size_t k = 0; ok && k < len; k++)
            ok = (e[k] >= 'A' && e[k] <= 'Z') || (e[k] >= 'a' && e[k] <= 'z') || (e[k] >= '0' && e[k] <= '9') ||
                 e[k] == '_';
        if (!ok) {
            snprintf(err, errlen, "environment variable '%.80s': expected NAME=VALUE, NAME of letters, digits and _ "
                     "not starting with a digit", e);
            return -1;
        }
        if (strlen(e) > SUP_ENV_BYTES) {
            snprintf(err, errlen, "environment variable %.*s: %zu bytes; at most %d", (int)len, e, strlen(e),
                     SUP_ENV_BYTES);
            return -1;
        }
        if (ours(e, 1)) {
            snprintf(err, errlen, "environment variable %.*s is set by atoll for each rank (its rank, rendezvous, "
                     "job or GPU); it cannot be given", (int)len, e);
            return -1;
        }
        for (size_t j = 0; j < i; j++)
            if (same_name(kv[j], e)) {
                snprintf(err, errlen, "environment variable %.*s is given twice", (int)len, e);
                return -1;
            }
    }
    return 0;
}

/* 1 when the job's own variables set the one in kv. */
static int overridden(const sup_set *s, const char *kv)
{
    for (size_t i = 0; i < s->o.n_env; i++)
        if (same_name(s->o.env[i], kv)) return 1;
    return 0;
}

static char **make_env(const sup_set *s, const sup_rank *r)
{
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **env = calloc(ne + s->o.n_env + 20, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (!ours(environ[i], r->gpu >= 0) && !overridden(s, environ[i])) env[k++] = strdup(environ[i]);
    for (size_t i = 0; i < s->o.n_env; i++) env[k++] = strdup(s->o.env[i]);
    char buf[600];
#define PUT(...) (snprintf(buf, sizeof buf, __VA_ARGS__), env[k++] = strdup(buf))
    PUT("RANK=%d", r->rank);
    PUT("WORLD_SIZE=%d", s->o.world);
    PUT("LOCAL_RANK=%d", r->local_rank);
    PUT("LOCAL_WORLD_SIZE=%d", s->n);
    if (s->o.group_rank >= 0) PUT("GROUP_RANK=%d", s->o.group_rank);
    PUT("MASTER_ADDR=%s", s->o.master_addr ? s->o.master_addr : "127.0.0.1");
    PUT("MASTER_PORT=%d", s->o.master_port);
    PUT("ATOLL_JOB_ID=%llu", (unsigned long long)s->o.job);
    PUT("ATOLL_JOB_EPOCH=%u", s->o.epoch);
    if (s->o.secret) PUT("ATOLL_JOB_SECRET_FD=%d", SUP_SECRET_FD);
    if (s->o.channel) PUT("ATOLL_METRICS_FD=%d", SUP_CHANNEL_FD);
    PUT("ATOLL_SUPERVISOR_PID=%d", (int)getpid());
    if (r->gpu >= 0) PUT("CUDA_VISIBLE_DEVICES=%d", r->gpu);
#undef PUT
    for (size_t i = 0; i < k; i++)
        if (!env[i]) { /* strdup failed */
            for (size_t j = 0; j < k; j++) free(env[j]);
            free(env);
            return NULL;
        }
    return env;
}

static void free_env(char **env)
{
    for (char **e = env; e && *e; e++) free(*e);
    free(env);
}

static void maybe_closed(sup_set *s)
{
    if (s->open_handles > 0 || s->alive > 0 || s->closed_reported) return;
    s->closed_reported = 1;
    for (int i = 0; i < s->n; i++) frame_decoder_free(&s->ranks[i].dec);
    if (s->envs) {
        for (int i = 0; i < s->n; i++) free_env(s->envs[i]);
        free(s->envs);
        s->envs = NULL;
    }
    if (s->o.on_closed) s->o.on_closed(s);
}

static void on_handle_closed(uv_handle_t *h)
{
    sup_set *s = h->data;
    s->open_handles--;
    maybe_closed(s);
}

static void close_handle(sup_set *s, uv_handle_t *h)
{
    h->data = s;
    uv_close(h, on_handle_closed);
}

static void on_kill_timer(uv_timer_t *t)
{
    sup_set *s = t->data;
    for (int i = 0; i < s->n; i++)
        if (s->ranks[i].running) kill(-s->ranks[i].pid, SIGKILL);
}

static void on_proc_exit(uv_process_t *p, int64_t status, int term_signal)
{
    sup_rank *r = p->data;
    sup_set *s = r->set;
    r->running = 0;
    r->exit_status = (int)status;
    r->term_signal = term_signal;
    s->alive--;
    /* Whatever the rank started dies with it. */
    kill(-r->pid, SIGKILL);
    r->proc_open = 0;
    close_handle(s, (uv_handle_t *)&r->proc);
    if (s->alive == 0 && !uv_is_closing((uv_handle_t *)&s->kill_timer)) {
        uv_timer_stop(&s->kill_timer);
        close_handle(s, (uv_handle_t *)&s->kill_timer);
    }
    if (s->o.on_exit) s->o.on_exit(s, r);
}

/* ---- the frame channel from each rank ---- */

static void on_chan_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    (void)suggested;
    static char shared[64 * 1024]; /* one loop: consumed before the next alloc */
    *buf = uv_buf_init(shared, sizeof shared);
}

static void close_chan(sup_rank *r)
{
    if (!r->chan_open) return;
    r->chan_open = 0;
    uv_read_stop((uv_stream_t *)&r->chan);
    close_handle(r->set, (uv_handle_t *)&r->chan);
}

static void on_chan_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    sup_rank *r = st->data;
    if (n < 0) {
        close_chan(r);
        return;
    }
    if (n == 0) return;
    if (frame_decoder_feed(&r->dec, buf->base, (size_t)n)) {
        close_chan(r);
        return;
    }
    for (;;) {
        frame_header h;
        const uint8_t *payload;
        int rc = frame_decoder_next(&r->dec, &h, &payload);
        if (rc == 0) break;
        if (rc < 0) { /* the rank wrote something that is not a frame: stop listening */
            fprintf(stderr, "supervise: rank %d: bad frame on its metrics channel: %s\n", r->rank, r->dec.err);
            close_chan(r);
            return;
        }
        if (r->set->o.on_frame) r->set->o.on_frame(r->set, r, h.type, payload, h.len);
    }
}

/* ---- start / stop ---- */

static int secret_fd(const auth_token *t)
{
    int fd = memfd_create("atoll-job-secret", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    if (write(fd, t->bytes, t->len) != (ssize_t)t->len ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) {
        close(fd);
        return -1;
    }
    return fd;
}

int sup_start(sup_set *s, uv_loop_t *loop, const sup_opts *o, sup_rank *ranks, int n, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->o = *o;
    s->ranks = ranks;
    s->n = n;
    if (!s->o.grace_ms) s->o.grace_ms = 2000;
    uv_timer_init(loop, &s->kill_timer);
    s->kill_timer.data = s;
    s->open_handles = 1;
    s->envs = calloc((size_t)n + 1, sizeof *s->envs);
    int sfd = o->secret ? secret_fd(o->secret) : -1;
    int rc = 0;
    if (!s->envs || (o->secret && sfd < 0)) {
        snprintf(err, errlen, "cannot prepare the ranks' environment: %s", strerror(errno ? errno : ENOMEM));
        rc = -1;
    }
    for (int i = 0; i < n && !rc; i++) {
        sup_rank *r = &ranks[i];
        r->set = s;
        r->pid = 0;
        r->running = 0;
        r->log_path[0] = 0;
        frame_decoder_init(&r->dec, 1u << 20);
        int logfd = -1;
        if (o->log_dir) {
            snprintf(r->log_path, sizeof r->log_path, "%s/rank-%d.log", o->log_dir, r->rank);
            logfd = open(r->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
            if (logfd < 0) {
                snprintf(err, errlen, "cannot open the log of rank %d (%s): %s", r->rank, r->log_path, strerror(errno));
                rc = -1;
                break;
            }
        }
        s->envs[i] = make_env(s, r);
        if (!s->envs[i]) {
            if (logfd >= 0) close(logfd);
            snprintf(err, errlen, "out of memory building the environment of rank %d", r->rank);
            rc = -1;
            break;
        }
        uv_stdio_container_t stdio[5];
        memset(stdio, 0, sizeof stdio);
        stdio[0].flags = o->log_dir ? UV_IGNORE : UV_INHERIT_FD;
        stdio[0].data.fd = 0;
        for (int k = 1; k <= 2; k++) {
            stdio[k].flags = UV_INHERIT_FD;
            stdio[k].data.fd = logfd >= 0 ? logfd : k;
        }
        int nstdio = 3;
        if (o->secret || o->channel) {
            stdio[3].flags = sfd >= 0 ? UV_INHERIT_FD : UV_IGNORE;
            stdio[3].data.fd = sfd;
            nstdio = 4;
        }
        if (o->channel) {
            uv_pipe_init(loop, &r->chan, 0);
            r->chan.data = r;
            r->chan_open = 1;
            s->open_handles++;
            stdio[4].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
            stdio[4].data.stream = (uv_stream_t *)&r->chan;
            nstdio = 5;
        }
        uv_process_options_t po;
        memset(&po, 0, sizeof po);
        po.exit_cb = on_proc_exit;
        po.file = o->exe;
        po.args = (char **)o->argv;
        po.env = s->envs[i];
        po.cwd = o->cwd;
        po.flags = UV_PROCESS_DETACHED; /* own session and process group */
        po.stdio_count = nstdio;
        po.stdio = stdio;
        r->proc.data = r;
        int e = uv_spawn(loop, &r->proc, &po);
        if (logfd >= 0) close(logfd);
        s->open_handles++;
        r->proc_open = 1;
        if (e) {
            snprintf(err, errlen, "cannot start rank %d (%.200s): %s", r->rank, o->exe, uv_strerror(e));
            r->proc_open = 0;
            close_handle(s, (uv_handle_t *)&r->proc); /* libuv: a failed spawn still needs closing */
            close_chan(r);
            rc = -1;
            break;
        }
        r->pid = r->proc.pid;
        r->running = 1;
        s->alive++;
        if (r->chan_open) uv_read_start((uv_stream_t *)&r->chan, on_chan_alloc, on_chan_read);
    }
    if (sfd >= 0) close(sfd);
    if (rc) {
        for (int i = 0; i < n; i++) { /* ranks never reached still need their decoders set up */
            if (!ranks[i].set) {
                ranks[i].set = s;
                frame_decoder_init(&ranks[i].dec, 1u << 20);
            }
        }
        sup_stop(s);
        if (s->alive == 0 && !uv_is_closing((uv_handle_t *)&s->kill_timer))
            close_handle(s, (uv_handle_t *)&s->kill_timer);
    }
    return rc;
}

void sup_stop_signal(sup_set *s, int signum, int grace_ms)
{
    for (int i = 0; i < s->n; i++)
        if (s->ranks[i].running) {
            kill(-s->ranks[i].pid, signum);
            kill(-s->ranks[i].pid, SIGCONT); /* a stopped rank (SIGSTOP) acts on it now, not at the SIGKILL */
        }
    if (s->stopping) return;
    s->stopping = 1;
    if (s->alive > 0 && !uv_is_closing((uv_handle_t *)&s->kill_timer))
        uv_timer_start(&s->kill_timer, on_kill_timer, (uint64_t)(grace_ms > 0 ? grace_ms : s->o.grace_ms), 0);
}

void sup_stop(sup_set *s) { sup_stop_signal(s, SIGINT, 0); }

int sup_child_guard(void)
{
    const char *p = getenv("ATOLL_SUPERVISOR_PID");
    if (!p || !*p) return 0;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The supervisor may have died before the line above: then we were re-parented. */
    return getppid() == (pid_t)atoi(p) ? 0 : -1;
}

int sup_exe_path(const char *name, char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (name && slash) *slash = 0;
        int w = name ? snprintf(buf, len, "%s/%s", slash ? self : ".", name) : snprintf(buf, len, "%s", self);
        if (w >= 0 && (size_t)w < len) return 0;
    }
    snprintf(buf, len, "%s", name ? name : "");
    return -1;
}

void sup_describe_exit(char *buf, size_t len, int rank, int pid, int exit_status, int term_signal)
{
    if (term_signal)
        snprintf(buf, len, "rank %d (pid %d) was killed by signal %d (%s)", rank, pid, term_signal,
                 strsignal(term_signal));
    else
        snprintf(buf, len, "rank %d (pid %d) exited with status %d%s", rank, pid, exit_status,
                 exit_status == SUP_EXIT_CONFIG ? " (its configuration was refused)" : "");
}

int sup_blame(const int *exit_status, const int *term_signals, int n)
{
    for (int i = 0; i < n; i++)
        if (!term_signals[i] && exit_status[i] == SUP_EXIT_CONFIG) return i;
    for (int i = 0; i < n; i++)
        if (term_signals[i]) return i;
    return 0;
}
