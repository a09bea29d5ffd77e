/* slurm_watch: Slurm's own failure handling, respected. Inside a Slurm job (or
 * with --slurm-poll) the coordinator asks Slurm every --slurm-poll seconds for the
 * states of the nodes its agents registered under (`scontrol -o show node LIST`:
 * a child process whose output is read by the event loop, one at a time, killed
 * after SLURM_WATCH_TIMEOUT_MS). A node Slurm drains (DRAIN, DRAINING, DRAINED),
 * downs or fails is treated as lost: an event `node.slurm_lost` with Slurm's
 * state and reason, its jobs restart elsewhere (jobs_node_lost, as after a
 * heartbeat timeout), and nothing new is placed on it while Slurm keeps it so,
 * even while its agent heartbeats. When Slurm returns it to service
 * (`node.slurm_returned`) it is placeable again, so a job running below its
 * data-parallel size grows back at its next checkpoint. An atoll node's name is
 * its Slurm NodeName (workerd takes SLURMD_NODENAME); nodes Slurm does not know
 * are left alone. Slurm's states live in memory only: after a coordinator restart
 * the first poll finds them again. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "coord.h"
#include "jobs.h"
#include "log.h"
#include "scheduler.h"
#include "slurm.h"

#define SLURM_WATCH_TIMEOUT_MS 20000
#define SLURM_WATCH_MAX_OUTPUT (16u << 20)

/* One event in its own transaction. */
static void node_event(coord *c, const char *kind, const char *node, const char *msg)
{
    if (store_begin(c->st)) return;
    if (events_add(c, kind, node, "%s", msg) || store_commit(c->st)) store_rollback(c->st);
}

void slurm_watch_apply(coord *c, const slurm_node *v, int n)
{
    for (int i = 0; i < n; i++) {
        reg_node *rn = registry_find(&c->reg, v[i].name);
        if (!rn) continue;
        char desc[sizeof rn->slurm_state], msg[512];
        snprintf(desc, sizeof desc, "%s%s%s%s", v[i].state, v[i].reason[0] ? " (reason: " : "", v[i].reason,
                 v[i].reason[0] ? ")" : "");
        if (v[i].out && !rn->slurm_out) {
            rn->slurm_out = 1;
            snprintf(rn->slurm_state, sizeof rn->slurm_state, "%s", desc);
            snprintf(msg, sizeof msg, "Slurm state %s: treated as lost; no new work here until Slurm returns it to "
                     "service", desc);
            node_event(c, "node.slurm_lost", rn->name, msg);
            snprintf(msg, sizeof msg, "Slurm state %s", desc);
            jobs_node_lost(c, rn->name, c->now(), msg);
        } else if (v[i].out && strcmp(rn->slurm_state, desc)) {
            log_info("node %s: Slurm state now %s", rn->name, desc);
            snprintf(rn->slurm_state, sizeof rn->slurm_state, "%s", desc);
        } else if (!v[i].out && rn->slurm_out) {
            rn->slurm_out = 0;
            rn->slurm_state[0] = 0;
            snprintf(msg, sizeof msg, "Slurm state %s: open for new work again", desc);
            node_event(c, "node.slurm_returned", rn->name, msg);
            sched_capacity_changed(c);
        }
    }
}

/* ---- the poll: a child process read by the loop ---- */

typedef struct slurm_watch {
    coord *c;
    uv_loop_t *loop;
    uv_timer_t tick, deadline;
    uv_process_t proc;
    uv_pipe_t out, err;
    int open;                /* the poll's handles (process, two pipes) not yet closed; 0 = none in flight */
    int exited, eofs, timed_out, stopping;
    int64_t status;
    int term_signal;
    char *buf;               /* stdout */
    size_t len, cap;
    char ebuf[256];          /* the start of stderr */
    size_t elen;
    int nasked;
    char last_err[512];      /* the error last logged (logged again only when it changes) */
} slurm_watch;

static void report(slurm_watch *w, const char *err)
{
    if (!err) {
        if (w->last_err[0]) log_info("Slurm node states readable again");
        w->last_err[0] = 0;
        return;
    }
    if (strcmp(err, w->last_err))
        log_warn("Slurm node states: %s (trying again every %.1f s)", err, w->c->o.slurm_poll_ms / 1000.0);
    snprintf(w->last_err, sizeof w->last_err, "%s", err);
}

static void on_closed(uv_handle_t *h)
{
    slurm_watch *w = h->data;
    w->open--;
}

static void close_poll(slurm_watch *w)
{
    uv_timer_stop(&w->deadline);
    uv_handle_t *hs[] = { (uv_handle_t *)&w->proc, (uv_handle_t *)&w->out, (uv_handle_t *)&w->err };
    for (int i = 0; i < 3; i++)
        if (!uv_is_closing(hs[i])) uv_close(hs[i], on_closed);
}

/* The child has exited and both pipes are at their end: judge what it said. */
static void finish(slurm_watch *w)
{
    char err[600] = "";
    w->ebuf[w->elen] = 0;
    w->ebuf[strcspn(w->ebuf, "\n")] = 0;
    if (w->timed_out) {
        snprintf(err, sizeof err, "scontrol -o show node did not answer in %d s; killed it",
                 SLURM_WATCH_TIMEOUT_MS / 1000);
    } else if (w->len >= SLURM_WATCH_MAX_OUTPUT) {
        snprintf(err, sizeof err, "scontrol -o show node wrote more than %u bytes; killed it", SLURM_WATCH_MAX_OUTPUT);
    } else {
        slurm_node *v = calloc((size_t)w->nasked, sizeof *v);
        char perr[400] = "";
        int n = v ? slurm_parse_nodes(w->buf ? w->buf : "", v, w->nasked, perr, sizeof perr) : -1;
        if (n < 0) {
            snprintf(err, sizeof err, "%s", v ? perr : "out of memory");
        } else if (n == 0 && (w->status || w->term_signal)) {
            /* some nodes unknown to Slurm make scontrol exit 1 after the others: only no node at all is an error */
            snprintf(err, sizeof err, "scontrol -o show node exited %s %d: %s", w->term_signal ? "on signal" : "with",
                     w->term_signal ? w->term_signal : (int)w->status, w->ebuf[0] ? w->ebuf : "(nothing on stderr)");
        } else {
            slurm_watch_apply(w->c, v, n);
        }
        free(v);
    }
    report(w, err[0] ? err : NULL);
    close_poll(w);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int term_signal)
{
    slurm_watch *w = p->data;
    w->exited = 1;
    w->status = status;
    w->term_signal = term_signal;
    if (w->eofs == 2 && !w->stopping) finish(w);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    slurm_watch *w = h->data;
    (void)suggested;
    if ((uv_pipe_t *)h == &w->err) {
        static char scratch[4096]; /* what does not fit in ebuf is dropped */
        size_t room = sizeof w->ebuf - 1 - w->elen;
        *b = room ? uv_buf_init(w->ebuf + w->elen, (unsigned)room) : uv_buf_init(scratch, sizeof scratch);
        return;
    }
    if (w->cap - w->len < 65537) {
        size_t cap = w->cap ? w->cap * 2 : 131072;
        char *nb = realloc(w->buf, cap);
        if (!nb) {
            *b = uv_buf_init(NULL, 0);
            return;
        }
        w->buf = nb;
        w->cap = cap;
    }
    *b = uv_buf_init(w->buf + w->len, (unsigned)(w->cap - w->len - 1));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    slurm_watch *w = s->data;
    (void)b;
    if (nread > 0) {
        if ((uv_pipe_t *)s == &w->err) {
            if (b->base == w->ebuf + w->elen) w->elen += (size_t)nread;
            return;
        }
        w->len += (size_t)nread;
        w->buf[w->len] = 0;
        if (w->len < SLURM_WATCH_MAX_OUTPUT) return;
        uv_process_kill(&w->proc, SIGKILL);
        nread = UV_EOF; /* read no more: judged when it has exited */
    }
    if (nread < 0) {
        uv_read_stop(s);
        w->eofs++;
        if (w->eofs == 2 && w->exited && !w->stopping) finish(w);
    }
}

static void on_deadline(uv_timer_t *t)
{
    slurm_watch *w = t->data;
    w->timed_out = 1;
    uv_process_kill(&w->proc, SIGKILL);
}

static void on_tick(uv_timer_t *t)
{
    slurm_watch *w = t->data;
    coord *c = w->c;
    if (w->open) return; /* the previous poll is still in flight (its deadline kills it) */
    size_t need = 1;
    for (size_t i = 0; i < c->reg.n; i++) need += strlen(c->reg.nodes[i]->name) + 1;
    if (c->reg.n == 0) return;
    char *list = malloc(need);
    if (!list) return;
    list[0] = 0;
    for (size_t i = 0, at = 0; i < c->reg.n; i++)
        at += (size_t)sprintf(list + at, "%s%s", i ? "," : "", c->reg.nodes[i]->name);
    w->nasked = (int)c->reg.n;
    w->exited = w->eofs = w->timed_out = 0;
    w->status = w->term_signal = 0;
    w->len = w->elen = 0;
    if (w->buf) w->buf[0] = 0;
    uv_pipe_init(w->loop, &w->out, 0);
    uv_pipe_init(w->loop, &w->err, 0);
    w->out.data = w->err.data = w->proc.data = w;
    char *args[] = { "scontrol", "-o", "show", "node", list, NULL };
    uv_stdio_container_t io[3];
    io[0].flags = UV_IGNORE;
    io[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    io[1].data.stream = (uv_stream_t *)&w->out;
    io[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    io[2].data.stream = (uv_stream_t *)&w->err;
    uv_process_options_t po;
    memset(&po, 0, sizeof po);
    po.file = "scontrol";
    po.args = args;
    po.exit_cb = on_exit_cb;
    po.stdio = io;
    po.stdio_count = 3;
    w->open = 3;
    int rc = uv_spawn(w->loop, &w->proc, &po);
    free(list);
    if (rc) {
        char err[200];
        snprintf(err, sizeof err, "cannot run scontrol: %s (is Slurm's scontrol on PATH?)", uv_strerror(rc));
        report(w, err);
        close_poll(w);
        return;
    }
    uv_read_start((uv_stream_t *)&w->out, on_alloc, on_read);
    uv_read_start((uv_stream_t *)&w->err, on_alloc, on_read);
    uv_timer_start(&w->deadline, on_deadline, SLURM_WATCH_TIMEOUT_MS, 0);
}

int slurm_watch_start(coord *c, void *uv_loop)
{
    if (c->o.slurm_poll_ms <= 0) return 0;
    slurm_watch *w = calloc(1, sizeof *w);
    if (!w) return -1;
    w->c = c;
    w->loop = uv_loop;
    uv_timer_init(w->loop, &w->tick);
    uv_timer_init(w->loop, &w->deadline);
    w->tick.data = w->deadline.data = w;
    uv_timer_start(&w->tick, on_tick, (uint64_t)c->o.slurm_poll_ms, (uint64_t)c->o.slurm_poll_ms);
    c->slurm_watch = w;
    log_info("watching Slurm's node states every %.1f s (scontrol -o show node): a node Slurm drains, downs or "
             "fails is treated as lost", c->o.slurm_poll_ms / 1000.0);
    return 0;
}

void slurm_watch_stop(coord *c)
{
    slurm_watch *w = c->slurm_watch;
    if (!w || w->stopping) return;
    w->stopping = 1;
    uv_close((uv_handle_t *)&w->tick, NULL);
    if (w->open) {
        uv_process_kill(&w->proc, SIGKILL);
        close_poll(w);
    }
    uv_close((uv_handle_t *)&w->deadline, NULL);
}

void slurm_watch_free(coord *c)
{
    slurm_watch *w = c->slurm_watch;
    if (!w) return;
    free(w->buf);
    free(w);
    c->slurm_watch = NULL;
}
