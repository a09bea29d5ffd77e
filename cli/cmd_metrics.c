/* atoll metrics JOB | atoll logs JOB */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "jsonw.h"
#include "msg.h"
#include "msg_json.h"

static int int_flag(cli_ctx *c, const char *cmd, const char *flag, const char *v, long long lo, long long *out)
{
    char *end;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo) return cli_usage(c, cmd, "%s needs an integer >= %lld, not '%s'", flag, lo, v ? v : "");
    *out = x;
    return 0;
}

int cmd_metrics(cli_ctx *c, int argc, char **argv)
{
    uint64_t id = 0;
    long long after = 0, limit = 0;
    for (int i = 1; i < argc; i++) {
        int rc = 0;
        if (!strcmp(argv[i], "--after")) rc = int_flag(c, "metrics", "--after", i + 1 < argc ? argv[++i] : NULL, 0, &after);
        else if (!strcmp(argv[i], "--limit")) rc = int_flag(c, "metrics", "--limit", i + 1 < argc ? argv[++i] : NULL, 1, &limit);
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
        cli_print_json_and_free(jsonw_take(&w));
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

int cmd_logs(cli_ctx *c, int argc, char **argv)
{
    uint64_t id = 0;
    long long rank = 0, tail = 65536;
    int follow = 0;
    for (int i = 1; i < argc; i++) {
        int rc = 0;
        if (!strcmp(argv[i], "--rank")) rc = int_flag(c, "logs", "--rank", i + 1 < argc ? argv[++i] : NULL, 0, &rank);
        else if (!strcmp(argv[i], "--tail")) rc = int_flag(c, "logs", "--tail", i + 1 < argc ? argv[++i] : NULL, 0, &tail);
        else if (!strcmp(argv[i], "--follow") || !strcmp(argv[i], "-f")) follow = 1;
        else if (!id && !cli_job_id(argv[i], &id)) continue;
        else return cli_usage(c, "logs", "unexpected argument '%s'", argv[i]);
        if (rc) return rc;
    }
    if (!id) return cli_usage(c, "logs", "expected a job id");
    if (c->json && follow) return cli_usage(c, "logs", "--follow streams text; use it without --json");
    int64_t offset = tail ? -tail : 0;
    for (;;) {
        Atoll__LogsRequest req = ATOLL__LOGS_REQUEST__INIT;
        req.job = id;
        req.rank = (int32_t)rank;
        req.offset = offset;
        req.max_bytes = 1u << 20;
        Atoll__LogsReply *r;
        int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_LOGS, &req.base, ATOLL__MSG_TYPE__MSG_LOGS_REPLY,
                          (ProtobufCMessage **)&r);
        if (rc) return rc;
        if (c->json) {
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
                memcpy(text, r->data.data, r->data.len);
                text[r->data.len] = 0;
            }
            jsonw_kstr(&w, "data", text ? text : "");
            free(text);
            jsonw_obj_end(&w);
            cli_print_json_and_free(jsonw_take(&w));
        } else {
            fwrite(r->data.data, 1, r->data.len, stdout);
            fflush(stdout);
        }
        int more = (int64_t)(r->offset + (int64_t)r->data.len) < r->size, running = r->running;
        offset = r->offset + (int64_t)r->data.len;
        atoll__logs_reply__free_unpacked(r, NULL);
        if (c->json) return 0; /* one object: at most 1 MiB of the log */
        if (more) continue; /* larger than one reply: the rest */
        if (!follow || !running) return 0;
        poll(NULL, 0, 500); /* then whatever the rank wrote since */
    }
}
