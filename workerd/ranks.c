#include "ranks.h"
#include "errf.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "msg.h"
#include "supervise.h"

#define GRACE_MS 3000
#define TAIL_BYTES 2048
#define TAIL_LINES 12

typedef struct job_set {
    struct job_set *next;
    agent *a;
    uint64_t job;
    uint32_t epoch;
    sup_set set;
    sup_rank *ranks;
    int n;
    int stopped;             /* a Stop (or workerd stopping) ended it */
    Atoll__RankWatch **watch; /* [n] each rank's newest watchdog report (NULL: none yet) */
    int64_t *watch_at;       /* [n] when it came (monotonic ms) */
    char dir[700];           /* logs: WORK_DIR/job-N/epoch-E */
    char cwd[700];           /* where the ranks run: WORK_DIR/job-N */
    char **argv;
} job_set;

static int64_t mono_ms(void) { return (int64_t)(uv_hrtime() / 1000000); }

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static job_set *find(agent *a, uint64_t job, uint32_t epoch)
{
    for (job_set *js = a->sets; js; js = js->next)
        if (js->job == job && js->epoch == epoch) return js;
    return NULL;
}

/* The last lines of a rank's log, for the coordinator's failure message. */
static char *log_tail(const char *path)
{
    char buf[TAIL_BYTES + 1];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = 0;
    if (fd >= 0) {
        off_t size = lseek(fd, 0, SEEK_END);
        off_t from = size > TAIL_BYTES ? size - TAIL_BYTES : 0;
        n = pread(fd, buf, TAIL_BYTES, from);
        close(fd);
    }
    if (n < 0) n = 0;
    buf[n] = 0;
    while (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
    const char *start = buf;
    int lines = 0;
    for (ssize_t i = n - 1; i >= 0; i--)
        if (buf[i] == '\n' && ++lines == TAIL_LINES) {
            start = buf + i + 1;
            break;
        }
    return strdup(start);
}

static void on_exit_rank(sup_set *s, sup_rank *r)
{
    job_set *js = s->o.data;
    Atoll__RankExit *e = relay_exit_new();
    e->job = js->job;
    e->epoch = js->epoch;
    e->rank = r->rank;
    e->pid = r->pid;
    e->exit_status = r->exit_status;
    e->term_signal = r->term_signal;
    e->stopped = js->stopped;
    e->time_ms = wall_ms();
    e->log_tail = log_tail(r->log_path);
    if (!e->log_tail) e->log_tail = strdup("");
    char what[160];
    sup_describe_exit(what, sizeof what, r->rank, r->pid, r->exit_status, r->term_signal);
    if (js->stopped || (!r->exit_status && !r->term_signal) || (r->exit_status == SUP_EXIT_SAVED && !r->term_signal))
        log_info("job %llu: %s", (unsigned long long)js->job, what);
    else log_warn("job %llu: %s (log %s)", (unsigned long long)js->job, what, r->log_path);
    relay_push_exit(&js->a->relay, e);
    agent_report_now(js->a); /* exits are reported at once, not at the next interval */
}

/* The newest watchdog report of a rank replaces the one before: it is state, not history. */
static void keep_watch(job_set *js, sup_rank *r, const uint8_t *p, size_t len)
{
    Atoll__RankWatch *w = atoll__rank_watch__unpack(NULL, len, p);
    if (!w) {
        log_warn("job %llu rank %d: undecodable watchdog report", (unsigned long long)js->job, r->rank);
        return;
    }
    int i = (int)(r - js->ranks);
    if (i < 0 || i >= js->n) {
        atoll__rank_watch__free_unpacked(w, NULL);
        return;
    }
    w->job = js->job; /* the channel says who it is */
    w->epoch = js->epoch;
    w->rank = r->rank;
    w->pid = r->pid;
    if (js->watch[i]) atoll__rank_watch__free_unpacked(js->watch[i], NULL);
    js->watch[i] = w;
    js->watch_at[i] = mono_ms();
    if (w->urgent) agent_report_now(js->a); /* a wait outlasted the step time: tell the coordinator now */
}

static void free_watches(job_set *js)
{
    for (int i = 0; js->watch && i < js->n; i++)
        if (js->watch[i]) atoll__rank_watch__free_unpacked(js->watch[i], NULL);
    free(js->watch);
    free(js->watch_at);
    js->watch = NULL;
    js->watch_at = NULL;
}

/* 1 when the process is stopped (SIGSTOP) or traced: /proc/PID/stat state T or t. */
static int proc_stopped(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *paren = strrchr(buf, ')'); /* the command name may hold anything */
    return paren && paren[1] == ' ' && (paren[2] == 'T' || paren[2] == 't');
}

size_t ranks_watches(agent *a, Atoll__RankWatch ***out)
{
    size_t n = 0;
    for (job_set *js = a->sets; js; js = js->next)
        for (int i = 0; js->watch && i < js->n; i++) n += js->watch[i] && js->ranks[i].running;
    *out = n ? calloc(n, sizeof **out) : NULL;
    if (!*out) return 0;
    size_t k = 0;
    int64_t now = mono_ms();
    for (job_set *js = a->sets; js; js = js->next)
        for (int i = 0; js->watch && i < js->n; i++) {
            Atoll__RankWatch *w = js->watch[i];
            if (!w || !js->ranks[i].running) continue;
            w->age_ms = now - js->watch_at[i];
            w->stopped = proc_stopped(js->ranks[i].pid);
            (*out)[k++] = w; /* borrowed: the heartbeat is sent before the loop runs again */
        }
    return k;
}

static void on_frame(sup_set *s, sup_rank *r, uint16_t type, const uint8_t *p, size_t len)
{
    job_set *js = s->o.data;
    if (type == ATOLL__MSG_TYPE__MSG_RANK_WATCH) {
        keep_watch(js, r, p, len);
        return;
    }
    if (type != ATOLL__MSG_TYPE__MSG_RANK_METRICS) return;
    Atoll__RankMetrics *m = atoll__rank_metrics__unpack(NULL, len, p);
    if (!m) {
        log_warn("job %llu rank %d: undecodable metrics record", (unsigned long long)js->job, r->rank);
        return;
    }
    /* The channel says who it is; the record cannot claim otherwise. */
    m->job = js->job;
    m->epoch = js->epoch;
    m->rank = r->rank;
    relay_push_metrics(&js->a->relay, m);
}

static void on_closed(sup_set *s)
{
    job_set *js = s->o.data;
    agent *a = js->a;
    for (job_set **pp = &a->sets; *pp; pp = &(*pp)->next)
        if (*pp == js) {
            *pp = js->next;
            break;
        }
    msg_argv_free(js->argv);
    free_watches(js);
    free(js->ranks);
    free(js);
    if (a->stopping && !a->sets) agent_finish_stop(a);
}

/* Where ranks dial the rendezvous store: the layout's address, with the
 * coordinator's host when it names none (a wildcard listener). */
static void master_of(agent *a, const char *rendezvous, char *host, size_t hostlen, int *port)
{
    const char *hp = rendezvous && *rendezvous ? rendezvous : a->coordinator;
    const char *colon = strrchr(hp, ':');
    *port = colon ? atoi(colon + 1) : 0;
    size_t hl = colon ? (size_t)(colon - hp) : strlen(hp);
    if (hl >= hostlen) hl = hostlen - 1;
    memcpy(host, hp, hl);
    host[hl] = 0;
    if (!host[0] || !strcmp(host, "0.0.0.0")) {
        const char *cc = strrchr(a->coordinator, ':');
        size_t cl = cc ? (size_t)(cc - a->coordinator) : strlen(a->coordinator);
        if (cl >= hostlen) cl = hostlen - 1;
        memcpy(host, a->coordinator, cl);
        host[cl] = 0;
    }
}

void ranks_launch(agent *a, const Atoll__Launch *m, Atoll__LaunchAck *ack, char *msg, size_t msglen)
{
    const Atoll__JobLayout *l = m->layout;
    ack->job = l->job;
    ack->epoch = l->epoch;
    ack->message = msg;
    int mine = 0;
    for (size_t i = 0; i < l->n_ranks; i++) mine += !strcmp(l->ranks[i]->node, a->topo.name);
    if (!mine || find(a, l->job, l->epoch)) {
        ack->ok = 1;
        snprintf(msg, msglen, "%s", mine ? "already running" : "no ranks placed here");
        return;
    }
    if (a->stopping) {
        snprintf(msg, msglen, "workerd %s is stopping", a->topo.name);
        return;
    }
    if (!m->spec) {
        snprintf(msg, msglen, "the launch carries no job spec");
        return;
    }
    char why[400];
    if (sup_env_check(m->spec->env, m->spec->n_env, why, sizeof why)) {
        snprintf(msg, msglen, "the job's --env: %s", why);
        return;
    }
    /* An older placement of the same job still here has lost: stop it. */
    if (l->epoch > 0) ranks_stop(a, l->job, l->epoch - 1, "the job was placed again", 0);
    job_set *js = calloc(1, sizeof *js);
    if (!js || !(js->ranks = calloc((size_t)mine, sizeof *js->ranks)) ||
        !(js->watch = calloc((size_t)mine, sizeof *js->watch)) ||
        !(js->watch_at = calloc((size_t)mine, sizeof *js->watch_at))) {
        if (js) free_watches(js);
        if (js) free(js->ranks);
        free(js);
        snprintf(msg, msglen, "out of memory");
        return;
    }
    js->a = a;
    js->job = l->job;
    js->epoch = l->epoch;
    snprintf(js->dir, sizeof js->dir, "%s/job-%llu/epoch-%u", a->work_dir, (unsigned long long)l->job, l->epoch);
    /* Ranks run in the job's directory, so a relative --save is the same one for every epoch. */
    snprintf(js->cwd, sizeof js->cwd, "%s/job-%llu", a->work_dir, (unsigned long long)l->job);
    int gpus = 0;
    for (size_t i = 0; i < l->n_ranks; i++) {
        if (strcmp(l->ranks[i]->node, a->topo.name)) continue;
        sup_rank *r = &js->ranks[js->n++];
        r->rank = l->ranks[i]->rank;
        r->local_rank = l->ranks[i]->local_rank;
        int g = l->ranks[i]->gpu;
        r->gpu = g >= 0 && g < TOPO_MAX_GPUS ? a->cuda_ordinal[g] : g; /* Slurm may renumber the step's GPUs */
        gpus += r->gpu >= 0;
    }
    int argc = 0;
    js->argv = msg_spec_to_argv(m->spec, a->train_bin, &argc);
    char **grown = js->argv ? realloc(js->argv, (size_t)(argc + 5) * sizeof *grown) : NULL;
    if (grown) {
        js->argv = grown;
        /* GPUs of a simulated node are not real: its ranks train on the CPU. */
        js->argv[argc++] = strdup("--device");
        js->argv[argc++] = strdup(gpus && !a->simulated ? "cuda" : "cpu");
        /* A restart resumes from the checkpoint the layout names (later flags win). */
        if (l->checkpoint && *l->checkpoint) {
            js->argv[argc++] = strdup("--load");
            js->argv[argc++] = strdup(l->checkpoint);
        }
        js->argv[argc] = NULL;
    }
    char host[128];
    int port;
    master_of(a, l->rendezvous, host, sizeof host, &port);
    auth_token secret;
    auth_job_secret(&a->token, l->job, l->epoch, &secret);
    char err[400];
    if (!grown || !js->argv[argc - 1] || atoll_mkdir_p(js->dir, 0700)) {
        snprintf(msg, msglen, "cannot prepare %s: %s", js->dir, grown ? strerror(errno) : "out of memory");
        msg_argv_free(js->argv);
        free_watches(js);
        free(js->ranks);
        free(js);
        return;
    }
    sup_opts o = {
        .exe = a->train_bin, .argv = js->argv, .world = (int)l->n_ranks, .group_rank = -1, .master_addr = host,
        .master_port = port, .job = l->job, .epoch = l->epoch, .secret = &secret, .log_dir = js->dir, .cwd = js->cwd,
        .env = m->spec->env, .n_env = m->spec->n_env,
        .channel = 1, .grace_ms = GRACE_MS, .on_exit = on_exit_rank, .on_frame = on_frame, .on_closed = on_closed,
        .data = js,
    };
    js->next = a->sets;
    a->sets = js;
    if (sup_start(&js->set, a->loop, &o, js->ranks, js->n, err, sizeof err)) {
        js->stopped = 1; /* on_closed frees it once whatever started is gone */
        snprintf(msg, msglen, "%s", err);
        log_error("job %llu epoch %u: %s", (unsigned long long)l->job, l->epoch, err);
        return;
    }
    ack->ok = 1;
    snprintf(msg, msglen, "started %d ranks in %s", js->n, js->dir);
    log_info("job %llu epoch %u: started %d of %zu ranks (%s), logs in %s", (unsigned long long)l->job, l->epoch,
             js->n, l->n_ranks, argc > 2 ? js->argv[0] : "?", js->dir);
}

void ranks_stop(agent *a, uint64_t job, uint32_t epoch, const char *reason, int checkpoint)
{
    for (job_set *js = a->sets; js; js = js->next)
        if (js->job == job && js->epoch <= epoch && (js->set.alive > 0)) {
            if (!js->set.stopping)
                log_info("job %llu epoch %u: stopping %d ranks%s: %s", (unsigned long long)job, js->epoch,
                         js->set.alive, checkpoint ? " with a checkpoint (SIGTERM)" : "", reason);
            if (checkpoint) {
                sup_stop_signal(&js->set, SIGTERM, a->stop_grace_ms);
            } else {
                js->stopped = 1;
                sup_stop(&js->set);
            }
        }
}

int ranks_stop_all(agent *a, int signum)
{
    for (job_set *js = a->sets; js; js = js->next) {
        js->stopped = 1;
        sup_stop_signal(&js->set, signum, signum == SIGTERM ? a->stop_grace_ms : 0);
    }
    return a->sets != NULL;
}

size_t ranks_running(agent *a, Atoll__JobRef ***out)
{
    size_t n = 0;
    for (job_set *js = a->sets; js; js = js->next) n += js->set.alive > 0;
    *out = n ? calloc(n, sizeof **out) : NULL;
    size_t k = 0;
    for (job_set *js = a->sets; js && *out; js = js->next) {
        if (js->set.alive <= 0) continue;
        Atoll__JobRef *r = calloc(1, sizeof *r);
        if (!r) break;
        atoll__job_ref__init(r);
        r->job = js->job;
        r->epoch = js->epoch;
        (*out)[k++] = r;
    }
    return k;
}

void ranks_read_log(agent *a, const Atoll__LogRead *m)
{
    Atoll__LogData d = ATOLL__LOG_DATA__INIT;
    d.id = m->id;
    char path[800], err[900] = "";
    snprintf(path, sizeof path, "%s/job-%llu/epoch-%u/rank-%d.log", a->work_dir, (unsigned long long)m->job, m->epoch,
             m->rank);
    uint8_t *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, sizeof err, "cannot open %s: %s", path, strerror(errno));
    } else {
        off_t size = lseek(fd, 0, SEEK_END);
        int64_t from = m->offset < 0 ? (int64_t)size + m->offset : m->offset;
        if (from < 0) from = 0;
        if (from > size) from = size;
        size_t want = (size_t)(size - from) < m->max_bytes ? (size_t)(size - from) : m->max_bytes;
        buf = malloc(want ? want : 1);
        ssize_t got = buf ? pread(fd, buf, want, from) : -1;
        close(fd);
        if (got < 0) {
            snprintf(err, sizeof err, "cannot read %s: %s", path, strerror(errno));
        } else {
            d.data.data = buf;
            d.data.len = (size_t)got;
            d.offset = from;
            d.size = size;
        }
    }
    d.error = err;
    job_set *js = find(a, m->job, m->epoch);
    if (js)
        for (int i = 0; i < js->n; i++) d.running |= js->ranks[i].rank == m->rank && js->ranks[i].running;
    if (a->conn) rpc_send(a->conn, ATOLL__MSG_TYPE__MSG_LOG_DATA, &d.base);
    free(buf);
}
