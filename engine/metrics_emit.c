#include "metrics_emit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "atoll.pb-c.h"
#include "msg.h"

void metrics_emit_open(metrics_emit *e, int rank)
{
    memset(e, 0, sizeof *e);
    e->fd = -1;
    e->rank = rank;
    pthread_mutex_init(&e->mu, NULL);
    const char *v = getenv("ATOLL_METRICS_FD");
    char *end;
    long fd = v && *v ? strtol(v, &end, 10) : -1;
    if (fd >= 0 && !*end) e->fd = (int)fd;
}

void metrics_emit_close(metrics_emit *e)
{
    pthread_mutex_destroy(&e->mu);
    e->fd = -1;
}

void metrics_emit_frame(metrics_emit *e, uint16_t type, const ProtobufCMessage *m)
{
    if (e->fd < 0) return;
    size_t len;
    uint8_t *buf = msg_frame(type, m, 0, &len);
    if (!buf) return;
    pthread_mutex_lock(&e->mu);
    ssize_t n = e->fd < 0 ? -2 : send(e->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0 && (size_t)n < len) {
        /* A frame must not be cut: finish it, blocking (rare: the channel was nearly full). */
        size_t at = (size_t)n;
        while (at < len) {
            ssize_t w = send(e->fd, buf + at, len - at, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            at += (size_t)w;
        }
    } else if (n == -1) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (e->dropped++ == 0)
                fprintf(stderr, "atoll-train: rank %d: the metrics channel is full; dropping reports until it drains\n",
                        e->rank);
        } else {
            fprintf(stderr, "atoll-train: rank %d: metrics channel closed (%s); no more steps reported\n", e->rank,
                    strerror(errno));
            e->fd = -1;
        }
    }
    pthread_mutex_unlock(&e->mu);
    free(buf);
}

void metrics_emit_step(metrics_emit *e, const rank_step *s)
{
    if (e->fd < 0) return;
    Atoll__RankMetrics m = ATOLL__RANK_METRICS__INIT;
    m.rank = e->rank;
    m.iteration = s->iteration;
    m.consumed_samples = s->consumed_samples;
    m.loss = s->loss;
    m.lr = s->lr;
    m.grad_norm = s->grad_norm;
    m.tokens_per_s = s->tokens_per_s;
    m.step_ms = s->step_s * 1e3;
    m.flops_per_gpu = s->flops_per_gpu;
    m.peak_flops = s->peak_flops;
    m.mfu = s->peak_flops > 0 ? s->flops_per_gpu / s->peak_flops : 0;
    m.stage = s->stage;
    m.bubble_measured = s->bubble;
    m.transfer = s->transfer;
    m.bubble_theory = s->bubble_theory;
    m.memory_bytes = s->memory_bytes;
    m.compute_ms = s->compute_s * 1e3;
    m.time_ms = s->time_ms;
    m.checkpoint_iteration = s->checkpoint_iteration;
    m.save_stall_ms = s->save_stall_s * 1e3;
    m.save_ms = s->save_s * 1e3;
    m.start_iteration = s->start_iteration;
    m.startup_ms = s->startup_s * 1e3;
    m.from_checkpoint = s->from_checkpoint;
    m.valid_loss = s->valid_loss;
    metrics_emit_frame(e, ATOLL__MSG_TYPE__MSG_RANK_METRICS, &m.base);
}
