/* atoll submit | jobs | status JOB | cancel JOB */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tokenizer.h"
#include "config.h"
#include "jsonw.h"
#include "msg.h"
#include "msg_json.h"

typedef struct {
    const char *name;
    int auto_layout;
} submit_extra;

/* `--name NAME` is the job's, not a training flag. */
static int submit_flag(void *ctx, int argc, char **argv, int i, char *err, size_t errlen)
{
    submit_extra *x = ctx;
    if (!strcmp(argv[i], "--auto-layout")) return x->auto_layout = 1; /* the planner picks (cmd_plan.c) */
    if (strcmp(argv[i], "--name")) return 0;
    if (i + 1 >= argc) {
        snprintf(err, errlen, "--name needs a value");
        return -1;
    }
    x->name = argv[i + 1];
    return 2;
}

int cmd_submit(cli_ctx *c, int argc, char **argv)
{
    atoll_config cfg;
    cfg_defaults(&cfg);
    submit_extra x = { NULL, 0 };
    char err[512];
    if (cfg_parse_args(&cfg, argc, argv, 1, submit_flag, &x, err, sizeof err))
        return cli_usage(c, "submit", "%s", err);
    /* the tokenizer's padded vocab, as the ranks will size it, and its files by
     * absolute paths (ranks run in their own work directories) */
    if (tok_config_vocab(&cfg, err, sizeof err)) return cli_usage(c, "submit", "%s", err);
    char *files[2] = { cfg.vocab_file, cfg.merge_file }, abs[PATH_MAX];
    for (int i = 0; i < 2; i++)
        if (files[i][0] && realpath(files[i], abs) && strlen(abs) < CFG_STR) memcpy(files[i], abs, strlen(abs) + 1);
    if (x.auto_layout) {
        int rc = cli_auto_layout(c, &cfg, argc, argv);
        if (rc) return rc;
    }
    /* The coordinator validates against the live cluster (NVLink islands); we only parse. */
    Atoll__JobSpec spec;
    msg_spec_from_cfg(&spec, &cfg, x.name);
    Atoll__SubmitRequest req = ATOLL__SUBMIT_REQUEST__INIT;
    req.spec = &spec;
    Atoll__SubmitReply *r;
    int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_SUBMIT, &req.base, ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY,
                      (ProtobufCMessage **)&r);
    if (rc) return rc;
    if (c->json) printf("{\"job\":%llu}\n", (unsigned long long)r->job);
    else printf("%llu\n", (unsigned long long)r->job);
    atoll__submit_reply__free_unpacked(r, NULL);
    return 0;
}

int cli_fetch_job(cli_ctx *c, uint64_t id, Atoll__JobsReply **out)
{
    Atoll__JobsRequest req = ATOLL__JOBS_REQUEST__INIT;
    req.job = id;
    return cli_call(c, ATOLL__MSG_TYPE__MSG_JOBS, &req.base, ATOLL__MSG_TYPE__MSG_JOBS_REPLY,
                    (ProtobufCMessage **)out);
}

static void metric(char *buf, size_t len, const char *fmt, double v, int have)
{
    if (have) snprintf(buf, len, fmt, v);
    else snprintf(buf, len, "-");
}

int cmd_jobs(cli_ctx *c, int argc, char **argv)
{
    if (argc > 1) return cli_usage(c, "jobs", "unexpected argument '%s'", argv[1]);
    Atoll__JobsReply *r;
    int rc = cli_fetch_job(c, 0, &r);
    if (rc) return rc;
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_key(&w, "jobs");
        jsonw_arr(&w);
        for (size_t i = 0; i < r->n_jobs; i++) msg_json_job(&w, r->jobs[i]);
        jsonw_arr_end(&w);
        jsonw_obj_end(&w);
        cli_print_json_and_free(jsonw_take(&w));
    } else {
        printf("%-6s %-16s %-11s %-5s %-16s %-8s %-9s %-7s %s\n", "JOB", "NAME", "STATE", "GPUS", "TPxPPxDP", "STEP",
               "LOSS", "MFU", "MESSAGE");
        for (size_t i = 0; i < r->n_jobs; i++) {
            const Atoll__Job *j = r->jobs[i];
            const Atoll__JobMetrics *m = j->metrics;
            int have = m && m->step > 0;
            char layout[32], loss[32], mfu[32];
            snprintf(layout, sizeof layout, "%dx%dx%d", j->tp, j->pp, j->dp);
            metric(loss, sizeof loss, "%.4f", have ? m->loss : 0, have);
            if (have && msg_mfu_known(m)) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * m->mfu);
            else snprintf(mfu, sizeof mfu, have ? "n/a" : "-");
            printf("%-6llu %-16s %-11s %-5d %-16s %-8lld %-9s %-7s %s\n", (unsigned long long)j->id, j->name,
                   msg_job_state_name(j->state), j->spec ? j->spec->num_gpus : 0, layout,
                   (long long)(m ? m->step : 0), loss, mfu, j->message);
        }
        if (!r->n_jobs) printf("(no jobs; `atoll submit ... --num-gpus N` queues one)\n");
    }
    atoll__jobs_reply__free_unpacked(r, NULL);
    return 0;
}

static void print_job(const Atoll__Job *j)
{
    const Atoll__JobMetrics *m = j->metrics;
    int have = m && m->step > 0;
    char t1[32], t2[32], line[256];
    cli_time(j->created_ms, t1, sizeof t1);
    cli_time(j->updated_ms, t2, sizeof t2);
    printf("job %llu (%s): %s%s%s\n", (unsigned long long)j->id, j->name, msg_job_state_name(j->state),
           j->message[0] ? " - " : "", j->message);
    printf("  layout: tp=%d pp=%d dp=%d vpp=%d on %d ranks", j->tp, j->pp, j->dp, j->vpp,
           j->spec ? j->spec->num_gpus : 0);
    if (j->spec)
        printf(" (model: %d layers, hidden %d, %d heads, seq %d; micro-batch %d, global batch %d)",
               j->spec->num_layers, j->spec->hidden_size, j->spec->num_attention_heads, j->spec->seq_length,
               j->spec->micro_batch_size, j->spec->global_batch_size);
    printf("\n  restarts: %u, epoch %u; submitted %s UTC, updated %s UTC\n", j->restarts, j->epoch, t1, t2);
    if (!have) {
        printf("  no step reported yet; pipeline bubble theory %.3f\n", m ? m->bubble_theory : 0);
        return;
    }
    printf("  step %lld", (long long)m->step);
    if (j->spec && j->spec->train_iters) printf(" of %d", j->spec->train_iters);
    printf(": loss %.4f", m->loss);
    if (m->n_stages) printf(", lr %.3e, grad norm %.3f", m->lr, m->grad_norm);
    printf("\n");
    if (m->valid_step > 0)
        printf("  validation loss %.4f (perplexity %.2f) at iteration %lld\n", m->valid_loss,
               exp(m->valid_loss < 700 ? m->valid_loss : 700), (long long)m->valid_step);
    cli_format_mfu(line, sizeof line, m);
    printf("  throughput: %.0f tokens/s", m->tokens_per_s);
    if (m->n_stages) printf(", %.1f ms per step, %.3f TFLOP/s per GPU", m->step_ms, m->flops_per_gpu / 1e12);
    printf(", MFU %s\n", line);
    if (m->memory_bytes) printf("  memory: peak %.0f MiB per rank (largest)\n", m->memory_bytes / 1048576.0);
    printf("  pipeline bubble (idle / step time): measured %.3f, theory %.3f ((p-1)/(v*m+p-1))\n",
           m->bubble_measured, m->bubble_theory);
    for (size_t i = 0; i < m->n_stages && j->pp > 1; i++) {
        const Atoll__StageBubble *b = m->stages[i];
        char meas[32], xfer[32];
        if (b->measured >= 0) snprintf(meas, sizeof meas, "%.3f", b->measured);
        else snprintf(meas, sizeof meas, "-");
        if (b->transfer >= 0) snprintf(xfer, sizeof xfer, "%.3f", b->transfer);
        else snprintf(xfer, sizeof xfer, "-");
        printf("    stage %d: measured %s, theory %.3f, transfer %s\n", b->stage, meas, b->theory, xfer);
    }
}

static int one_job(cli_ctx *c, int argc, char **argv, uint64_t *id)
{
    if (argc != 2) return cli_usage(c, argv[0], "expected one job id");
    if (cli_job_id(argv[1], id)) return cli_usage(c, argv[0], "'%s' is not a job id (a positive number)", argv[1]);
    return 0;
}

static void json_one(const Atoll__Job *j)
{
    jsonw w;
    jsonw_init(&w);
    msg_json_job(&w, j);
    cli_print_json_and_free(jsonw_take(&w));
}

int cmd_status(cli_ctx *c, int argc, char **argv)
{
    uint64_t id;
    int rc = one_job(c, argc, argv, &id);
    if (rc) return rc;
    Atoll__JobsReply *r;
    if ((rc = cli_fetch_job(c, id, &r))) return rc;
    if (r->n_jobs == 1) {
        if (c->json) json_one(r->jobs[0]);
        else print_job(r->jobs[0]);
    }
    atoll__jobs_reply__free_unpacked(r, NULL);
    return 0;
}

int cmd_cancel(cli_ctx *c, int argc, char **argv)
{
    uint64_t id;
    int rc = one_job(c, argc, argv, &id);
    if (rc) return rc;
    Atoll__CancelRequest req = ATOLL__CANCEL_REQUEST__INIT;
    req.job = id;
    Atoll__JobsReply *r;
    rc = cli_call(c, ATOLL__MSG_TYPE__MSG_CANCEL, &req.base, ATOLL__MSG_TYPE__MSG_JOBS_REPLY,
                  (ProtobufCMessage **)&r);
    if (rc) return rc;
    if (r->n_jobs == 1) {
        if (c->json) json_one(r->jobs[0]);
        else printf("job %llu %s\n", (unsigned long long)id, msg_job_state_name(r->jobs[0]->state));
    }
    atoll__jobs_reply__free_unpacked(r, NULL);
    return 0;
}
