/* atoll metrics JOB | atoll logs JOB */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "jsonw.h"
#include "msg.h"
#include "msg_json.h"

static int int_flag(cli_ctx *c, const char *cmd, const char *flag, const char *v, long long lo, long long hi,
                    long long *out)
{
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi)
        return cli_usage(c, cmd, "%s needs an integer from %lld to %lld, not '%s'", flag, lo, hi, v ? v : "");
    *out = x;
    return 0;
}

int cmd_metrics(cli_ctx *c, int argc, char **argv)
{
    uint64_t id = 0;
    long long after = 0, limit = 0;
    for (int i = 1; i < argc; i++) {
        int rc = 0;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--after")) rc = int_flag(c, "metrics", "--after", v, 0, INT64_MAX, &after), i++;
        else if (!strcmp(argv[i], "--limit")) rc = int_flag(c, "metrics", "--limit", v, 1, UINT32_MAX, &limit), i++;
        else if (!id && !cli_job_id(argv[i], &id)) continue;
        else return cli_usage(c, "metrics", "unexpected argument '%s'", argv[i]);
        if (rc) return rc;
    }
    if (!id) return cli_usage(c, "metrics", "expected a job id");
    Atoll__MetricsRequest req = ATOLL__METRICS_REQUEST__INIT;
    req.job = id;
    req.after = after;
    req.limit = (uint32_t)limit;
    Atoll__MetricsReply *r;
    int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_METRICS, &req.base, ATOLL__MSG_TYPE__MSG_METRICS_REPLY,
                      (ProtobufCMessage **)&r);
    if (rc) return rc;
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_key(&w, "job");
        jsonw_uint(&w, r->job);
        jsonw_key(&w, "steps");
        jsonw_arr(&w);
        for (size_t i = 0; i < r->n_steps; i++) msg_json_metrics(&w, r->steps[i]);
        jsonw_arr_end(&w);
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
    } else {
        printf("%-9s %-11s %-10s %-9s %-11s %-9s %-10s %-7s %s\n", "STEP", "LOSS", "LR", "GRADNORM", "TOKENS/S",
               "STEP_MS", "TFLOP/GPU", "MFU", "BUBBLE PER STAGE (measured/transfer)");
        for (size_t i = 0; i < r->n_steps; i++) {
            const Atoll__JobMetrics *m = r->steps[i];
            char mfu[32], stages[256] = "";
            if (msg_mfu_known(m)) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * m->mfu);
            else snprintf(mfu, sizeof mfu, "n/a");
            size_t at = 0;
            for (size_t k = 0; k < m->n_stages && at < sizeof stages - 24 && m->n_stages > 1; k++)
                at += (size_t)snprintf(stages + at, sizeof stages - at, "%s%.3f/%.3f", k ? " " : "",
                                       m->stages[k]->measured, m->stages[k]->transfer);
            printf("%-9lld %-11.6f %-10.3e %-9.3f %-11.0f %-9.1f %-10.4f %-7s %s\n", (long long)m->step, m->loss, m->lr,
                   m->grad_norm, m->tokens_per_s, m->step_ms, m->flops_per_gpu / 1e12, mfu, stages[0] ? stages : "-");
        }
        if (!r->n_steps) printf("(no steps reported yet)\n");
    }
    atoll__metrics_reply__free_unpacked(r, NULL);
    return 0;
}

/* Following a log through a restart: the epoch it goes on in and why (the job's
 * restart history), on stderr between the two placements' logs. */
static void say_epoch(cli_ctx *c, const Atoll__Job *j, uint32_t epoch, long long rank)
{
    const Atoll__RestartRecord *h = NULL;
    for (size_t i = 0; i < j->n_history; i++)
        if (j->history[i]->epoch == epoch) h = j->history[i];
    fprintf(stderr, "%s: job %llu epoch %u%s%s%s%s%s: rank %lld's log from here on\n", c->prog,
            (unsigned long long)j->id, epoch, h ? " (" : "", h ? h->cause : "", h && *h->detail ? ": " : "",
            h ? h->detail : "", h ? ")" : "", rank);
}

static void print_logs_json(uint64_t id, long long rank, const Atoll__LogsReply *r)
{
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "job");
    jsonw_uint(&w, id);
    jsonw_kint(&w, "rank", rank);
    jsonw_kint(&w, "epoch", r->epoch);
    jsonw_kstr(&w, "node", r->node);
    jsonw_kint(&w, "offset", r->offset);
    jsonw_kint(&w, "size", r->size);
    jsonw_kbool(&w, "running", r->running);
    char *text = malloc(r->data.len + 1);
    if (text) {
        if (r->data.len) memcpy(text, r->data.data, r->data.len);
        text[r->data.len] = 0;
    }
    jsonw_kstr(&w, "data", text ? text : "");
    free(text);
    jsonw_obj_end(&w);
    jsonw_print_free(jsonw_take(&w));
}

int cmd_logs(cli_ctx *c, int argc, char **argv)
{
    uint64_t id = 0;
    long long rank = 0, tail = 65536, epoch = -1;
    int follow = 0;
    for (int i = 1; i < argc; i++) {
        int rc = 0;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--rank")) rc = int_flag(c, "logs", "--rank", v, 0, INT32_MAX, &rank), i++;
        else if (!strcmp(argv[i], "--epoch")) rc = int_flag(c, "logs", "--epoch", v, 0, UINT32_MAX, &epoch), i++;
        else if (!strcmp(argv[i], "--tail")) rc = int_flag(c, "logs", "--tail", v, 0, INT64_MAX, &tail), i++;
        else if (!strcmp(argv[i], "--follow") || !strcmp(argv[i], "-f")) follow = 1;
        else if (!id && !cli_job_id(argv[i], &id)) continue;
        else return cli_usage(c, "logs", "unexpected argument '%s'", argv[i]);
        if (rc) return rc;
    }
    if (!id) return cli_usage(c, "logs", "expected a job id");
    if (c->json && follow) return cli_usage(c, "logs", "--follow streams text; use it without --json");
    /* --follow follows the job, not one process: when the rank's placement ends
     * (a restart, the job's end) the job says what comes next; a log that cannot be
     * read while the job is between placements is waited for, not an error. */
    c->quiet_refusals = follow;
    int64_t offset = tail ? -tail : 0;
    int pinned = epoch >= 0, read_ok = 0;
    char said[sizeof c->error] = "";
    for (;;) {
        Atoll__LogsRequest req = ATOLL__LOGS_REQUEST__INIT;
        req.job = id;
        req.rank = (int32_t)rank;
        req.offset = offset;
        req.max_bytes = 1u << 20;
        req.epoch = pinned ? (uint32_t)epoch : 0;
        req.by_epoch = pinned;
        Atoll__LogsReply *r;
        int rc = cli_call_retry(c, ATOLL__MSG_TYPE__MSG_LOGS, &req.base, ATOLL__MSG_TYPE__MSG_LOGS_REPLY,
                                (ProtobufCMessage **)&r, follow);
        int running = 0;
        read_ok = rc == CLI_OK;
        if (read_ok) {
            if (!pinned) epoch = r->epoch, pinned = 1;
            if (c->json) {
                print_logs_json(id, rank, r);
            } else {
                if (r->data.len) fwrite(r->data.data, 1, r->data.len, stdout); /* data is NULL when empty */
                fflush(stdout);
            }
            int more = (int64_t)(r->offset + (int64_t)r->data.len) < r->size;
            running = r->running;
            offset = r->offset + (int64_t)r->data.len;
            atoll__logs_reply__free_unpacked(r, NULL);
            if (c->json) return 0; /* one object: at most 1 MiB of the log */
            if (more) continue;    /* larger than one reply: the rest */
            if (!follow) return 0;
            said[0] = 0;
        } else if (!follow || rc != CLI_REFUSED) {
            return rc;
        }
        if (running) { /* then whatever the rank wrote since */
            poll(NULL, 0, 500);
            continue;
        }
        Atoll__JobsReply *jr;
        if ((rc = cli_fetch_job(c, id, 1, &jr))) {
            if (rc == CLI_REFUSED) fprintf(stderr, "%s: %s\n", c->prog, c->error);
            return rc;
        }
        const Atoll__Job *j = jr->n_jobs == 1 ? jr->jobs[0] : NULL;
        int ended = !j || msg_job_state_ended(j->state), next = j && pinned && j->epoch > (uint32_t)epoch;
        /* Between placements (pending, placing, starting, restarting) a log not there yet
         * is expected; while the job runs or after it ended the reason is worth a line. */
        if (!read_ok && !next && (ended || j->state == ATOLL__JOB_STATE__JOB_RUNNING) && strcmp(said, c->error)) {
            fprintf(stderr, "%s: %s\n", c->prog, c->error);
            snprintf(said, sizeof said, "%s", c->error);
        }
        if (next) {
            epoch++;
            offset = 0;
            say_epoch(c, j, (uint32_t)epoch, rank);
        }
        atoll__jobs_reply__free_unpacked(jr, NULL);
        if (next) continue;
        if (ended) return read_ok ? CLI_OK : CLI_REFUSED;
        poll(NULL, 0, 1000);
    }
}
