/* atoll submit | jobs | status JOB | wait JOB | cancel JOB */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "checkpoint.h"
#include "cli.h"
#include "plan.h"
#include "tokenizer.h"
#include "config.h"
#include "depend.h"
#include "slurm.h"
#include "jsonw.h"
#include "msg.h"
#include "msg_json.h"
#include "supervise.h"

typedef struct {
    const char *name, *request_id;
    int auto_layout;
    int max_restarts;        /* -1: the coordinator's default */
    int wait;                /* --wait: until the job ends, as `atoll wait` */
    char *env[SUP_ENV_COUNT + 1]; /* --env NAME=VALUE (owned) */
    char dependency[DEP_MAX * 24];  /* --dependency, as dep_format writes it */
    int64_t time_limit_s;           /* --time, in seconds; 0 none */
    size_t n_env;
} submit_extra;

static int wait_job(cli_ctx *c, uint64_t id, double max_wait_s);

/* `--name NAME`, `--request-id ID`, `--max-restarts N`, `--env` and `--dependency` are the job's, not
 * training flags. */
static int submit_flag(void *ctx, int argc, char **argv, int i, char *err, size_t errlen)
{
    submit_extra *x = ctx;
    if (!strncmp(argv[i], "--dependency", 12) && (!argv[i][12] || argv[i][12] == '=')) { /* Slurm writes it with = */
        const char *v = argv[i][12] ? argv[i] + 13 : i + 1 < argc ? argv[i + 1] : NULL;
        dep_list d;
        if (!v || !*v) {
            snprintf(err, errlen, "--dependency needs conditions, e.g. afterok:12 (the job starts once job 12 has "
                     "completed)");
            return -1;
        }
        if (dep_parse(v, &d, err, errlen)) return -1;
        dep_format(&d, x->dependency, sizeof x->dependency);
        return argv[i][12] ? 1 : 2;
    }
    if (!strcmp(argv[i], "--env")) { /* NAME=VALUE, or NAME: its value here (as docker run -e) */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL, *here = v && !strchr(v, '=') ? getenv(v) : NULL;
        if (!v || !*v || (!strchr(v, '=') && !here)) {
            snprintf(err, errlen, "--env needs NAME=VALUE, or the NAME of a variable set in this shell%s%s%s",
                     v ? " ('" : "", v ? v : "", v ? "' is not set here)" : "");
            return -1;
        }
        if (x->n_env == SUP_ENV_COUNT + 1) return 2; /* sup_env_check says there are too many */
        char *kv = here ? malloc(strlen(v) + strlen(here) + 2) : strdup(v);
        if (!kv) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (here) sprintf(kv, "%s=%s", v, here);
        x->env[x->n_env++] = kv;
        return 2;
    }
    if (!strncmp(argv[i], "--time", 6) && (!argv[i][6] || argv[i][6] == '=')) { /* sbatch writes it with = too */
        const char *v = argv[i][6] ? argv[i] + 7 : i + 1 < argc ? argv[i + 1] : "";
        if (slurm_parse_time(v, &x->time_limit_s, err, errlen)) return -1;
        return argv[i][6] ? 1 : 2;
    }
    if (!strcmp(argv[i], "--auto-layout")) return x->auto_layout = 1; /* the planner picks (cmd_plan.c) */
    if (!strcmp(argv[i], "--wait")) return x->wait = 1;
    if (!strcmp(argv[i], "--max-restarts")) {
        char *end = NULL;
        long n = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
        if (i + 1 >= argc || !*argv[i + 1] || *end || n < 0 || n > 1000000) {
            snprintf(err, errlen, "--max-restarts needs a count of restarts after failures, 0..1000000 (0: fail at "
                     "the first fault)");
            return -1;
        }
        x->max_restarts = (int)n;
        return 2;
    }
    const char **dst = !strcmp(argv[i], "--name") ? &x->name : !strcmp(argv[i], "--request-id") ? &x->request_id : NULL;
    if (!dst) return 0;
    if (i + 1 >= argc) {
        snprintf(err, errlen, "%s needs a value", argv[i]);
        return -1;
    }
    *dst = argv[i + 1];
    return 2;
}

/* An even pipeline split whose last stage, with the LM head, holds clearly
 * more work than the others: said on stderr with the split that evens it out
 * (the job runs as submitted). */
static void note_pipeline_split(cli_ctx *c, const atoll_config *cfg)
{
    if (cfg->pipeline_model_parallel_size < 2 || cfg->decoder_first_pipeline_num_layers ||
        cfg->decoder_last_pipeline_num_layers || cfg_interleaved(cfg))
        return;
    int first, last;
    double head, gain = plan_split_gain(cfg, &first, &last, &head);
    if (gain < 0.05) return;
    char flags[128] = "";
    if (first) snprintf(flags, sizeof flags, "--decoder-first-pipeline-num-layers %d", first);
    if (last)
        snprintf(flags + strlen(flags), sizeof flags - strlen(flags), "%s--decoder-last-pipeline-num-layers %d",
                 first ? " " : "", last);
    fprintf(stderr, "%s: note: the last pipeline stage also runs the LM head, about %.1f layers of work here, so the "
            "other stages wait on it every micro-batch; %s would take %.0f%% off the slowest stage (`atoll plan` "
            "weighs it against memory and the rest)\n", c->prog, head, flags, 100 * gain);
}

/* A job that a failure would send back to its start: said at submission (the
 * job runs as submitted). */
static void note_no_checkpoint(cli_ctx *c, const atoll_config *cfg)
{
    const char *back = cfg->load[0] ? "its --load checkpoint" : "step 0";
    if (!cfg->save[0])
        fprintf(stderr, "%s: note: no --save DIR: after a node or rank failure the job trains again from %s (with "
                "--save DIR and --save-interval N or --save-mtbf SEC it resumes from its newest checkpoint)\n",
                c->prog, back);
    else if (!cfg->save_interval && !(cfg->save_mtbf > 0))
        fprintf(stderr, "%s: note: --save without --save-interval or --save-mtbf commits a checkpoint only at the end: "
                "after a node or rank failure the job trains again from %s\n", c->prog, back);
}

/* --decrease-batch-size-if-needed on a layout the global batch does not split
 * over: the job trains on less from its first step, said at submission. */
static void note_decreased_batch(cli_ctx *c, const atoll_config *cfg)
{
    int dp = cfg_data_parallel_size(cfg, cfg->num_gpus);
    int whole = dp ? cfg_step_batch(cfg, dp) : 0;
    if (cfg->decrease_batch_size_if_needed && whole && whole < cfg->global_batch_size)
        fprintf(stderr, "%s: note: --global-batch-size %d is not whole micro-batches of %d on %d data-parallel ranks: "
                "with --decrease-batch-size-if-needed each step trains %d\n", c->prog, cfg->global_batch_size,
                cfg->micro_batch_size, dp, whole);
}

/* Sends the spec as a new job and prints its id (--json: {"job":ID}, unless
 * `quiet_json` because more JSON follows). A request id makes the submission
 * safe to send again: if the coordinator stored the job but the reply was lost,
 * the retry gets the same job back; NULL makes a random one. */
static int send_spec(cli_ctx *c, const char *cmd, Atoll__JobSpec *spec, const char *request_id, int quiet_json,
                     uint64_t *id)
{
    Atoll__SubmitRequest req = ATOLL__SUBMIT_REQUEST__INIT;
    req.spec = spec;
    char rid[33];
    if (request_id) {
        req.request_id = (char *)request_id;
    } else {
        uint8_t raw[16];
        if (auth_random(raw, sizeof raw)) return cli_usage(c, cmd, "cannot read random bytes for a request id");
        for (size_t i = 0; i < sizeof raw; i++) snprintf(rid + 2 * i, 3, "%02x", raw[i]);
        req.request_id = rid;
    }
    Atoll__SubmitReply *r;
    int rc = cli_call_retry(c, ATOLL__MSG_TYPE__MSG_SUBMIT, &req.base, ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY,
                            (ProtobufCMessage **)&r, 1);
    if (rc) return rc;
    *id = r->job;
    atoll__submit_reply__free_unpacked(r, NULL);
    if (c->json && !quiet_json) printf("{\"job\":%llu}\n", (unsigned long long)*id);
    else if (!c->json) printf("%llu\n", (unsigned long long)*id);
    fflush(stdout);
    return 0;
}

/* An absolute --save or --load through its symlinks, as this host sees the
 * shared file system: the longest ancestor that exists by realpath(3), the
 * rest appended. Two spellings of one directory (a symlink, "//", ".") then
 * reach the coordinator as one path, and its same --save check (it compares
 * paths; it has no file system to ask) catches them; a --load that is the
 * job's --save stays equal to it. A relative path is the job's own; an
 * ancestor this host cannot read, or a result too long, leaves it as given. */
static void path_canonical(char *path, size_t cap)
{
    char head[PATH_MAX], real[PATH_MAX];
    size_t n = strlen(path);
    if (path[0] != '/' || n >= sizeof head) return;
    memcpy(head, path, n + 1);
    while (!realpath(head, real)) {
        char *slash = strrchr(head, '/');
        if ((errno != ENOENT && errno != ENOTDIR) || !slash) return;
        slash[slash == head] = '\0'; /* "/a" -> "/" */
    }
    const char *rest = path + strlen(head);
    while (*rest == '/') rest++;
    size_t r = strlen(real), t = strlen(rest);
    int sep = *rest && real[r - 1] != '/';
    if (r + (size_t)sep + t >= cap) return;
    if (sep) real[r++] = '/';
    memcpy(real + r, rest, t + 1);
    memcpy(path, real, r + t + 1);
}

static int submit(cli_ctx *c, int argc, char **argv, submit_extra *x)
{
    atoll_config cfg;
    cfg_defaults(&cfg);
    char err[512];
    if (cfg_parse_args(&cfg, argc, argv, 1, submit_flag, x, err, sizeof err))
        return cli_usage(c, "submit", "%s", err);
    if (sup_env_check(x->env, x->n_env, err, sizeof err)) return cli_usage(c, "submit", "--env: %s", err);
    cfg_megatron_notes(&cfg, c->prog, stderr);
    if (cli_checkpoint_args(c, "submit", &cfg)) return CLI_USAGE;
    path_canonical(cfg.save, sizeof cfg.save);
    path_canonical(cfg.load, sizeof cfg.load);
    /* the tokenizer's padded vocab, as the ranks will size it, and its files by
     * absolute paths (ranks run in their own work directories) */
    if (tok_config_vocab(&cfg, err, sizeof err)) return cli_usage(c, "submit", "%s", err);
    char *files[3] = { cfg.vocab_file, cfg.merge_file, cfg.tokenizer_model }, abs[PATH_MAX];
    for (int i = 0; i < 3; i++)
        if (files[i][0] && realpath(files[i], abs) && strlen(abs) < CFG_STR) memcpy(files[i], abs, strlen(abs) + 1);
    if (x->auto_layout) {
        int rc = cli_auto_layout(c, &cfg, argc, argv);
        if (rc) return rc;
    }
    /* The coordinator validates against the live cluster (NVLink islands); we only parse. */
    Atoll__JobSpec spec;
    msg_spec_from_cfg(&spec, &cfg, x->name);
    spec.max_restarts = x->max_restarts;
    spec.env = x->env;
    spec.n_env = x->n_env;
    spec.dependency = x->dependency;
    spec.time_limit_s = x->time_limit_s;
    uint64_t id;
    int rc = send_spec(c, "submit", &spec, x->request_id, x->wait, &id);
    if (rc) return rc;
    if (!x->auto_layout) note_pipeline_split(c, &cfg);
    note_no_checkpoint(c, &cfg);
    note_decreased_batch(c, &cfg);
    return x->wait ? wait_job(c, id, 0) : 0;
}

/* `atoll resubmit JOB [--name NAME]`: the job's spec again as a new job (Slurm's
 * requeue, under a new id), without its --dependency, which it waited for
 * already. A job that committed a checkpoint to its --save goes on from there,
 * as a restart does: --load becomes --save (and --ckpt-step, which chose the
 * first start, is dropped). */
int cmd_resubmit(cli_ctx *c, int argc, char **argv)
{
    uint64_t id;
    const char *name = NULL;
    if (argc == 4 && !strcmp(argv[2], "--name")) name = argv[3];
    else if (argc != 2) return cli_usage(c, argv[0], "expected one job id, then optionally --name NAME");
    if (cli_job_id(argv[1], &id)) return cli_usage(c, argv[0], "'%s' is not a job id (a positive number)", argv[1]);
    Atoll__JobsReply *r;
    int rc = cli_fetch_job(c, id, 0, &r);
    if (rc) return rc;
    if (r->n_jobs != 1 || !r->jobs[0]->spec) {
        atoll__jobs_reply__free_unpacked(r, NULL);
        fprintf(stderr, "%s: job %llu has no stored spec\n", c->prog, (unsigned long long)id);
        return CLI_REFUSED;
    }
    Atoll__JobSpec spec = *r->jobs[0]->spec; /* shallow: r owns the strings until freed below */
    spec.dependency = "";
    if (name) spec.name = (char *)name;
    long long it;
    char err[512];
    if (spec.save && spec.save[0] && ckpt_latest(spec.save, CKPT_MANIFEST, &it, err, sizeof err) == 0) {
        spec.load = spec.save;
        spec.ckpt_step = 0;
        fprintf(stderr, "%s: job %llu committed step %lld to %s: the new job goes on from it\n", c->prog,
                (unsigned long long)id, it, spec.save);
    }
    uint64_t nid;
    rc = send_spec(c, "resubmit", &spec, NULL, 0, &nid);
    atoll__jobs_reply__free_unpacked(r, NULL);
    return rc;
}

int cmd_submit(cli_ctx *c, int argc, char **argv)
{
    submit_extra x = { .max_restarts = -1 };
    int rc = submit(c, argc, argv, &x);
    for (size_t i = 0; i < x.n_env; i++) free(x.env[i]);
    return rc;
}

static int fetch_all(cli_ctx *c, Atoll__JobsReply **out);

int cli_fetch_job(cli_ctx *c, uint64_t id, int retry, Atoll__JobsReply **out)
{
    if (!id) return fetch_all(c, out);
    Atoll__JobsRequest req = ATOLL__JOBS_REQUEST__INIT;
    req.job = id;
    return cli_call_retry(c, ATOLL__MSG_TYPE__MSG_JOBS, &req.base, ATOLL__MSG_TYPE__MSG_JOBS_REPLY,
                          (ProtobufCMessage **)out, retry);
}

static void metric(char *buf, size_t len, const char *fmt, double v, int have)
{
    if (have) snprintf(buf, len, fmt, v);
    else snprintf(buf, len, "-");
}

/* Every job, a page per request (the coordinator bounds each reply), merged into one reply. */
static int fetch_all(cli_ctx *c, Atoll__JobsReply **out)
{
    Atoll__JobsReply *all = NULL;
    uint64_t after = 0;
    for (;;) {
        Atoll__JobsRequest req = ATOLL__JOBS_REQUEST__INIT;
        req.after_id = after;
        Atoll__JobsReply *page;
        int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_JOBS, &req.base, ATOLL__MSG_TYPE__MSG_JOBS_REPLY,
                          (ProtobufCMessage **)&page);
        if (rc) {
            if (all) atoll__jobs_reply__free_unpacked(all, NULL);
            return rc;
        }
        if (!all) {
            all = page;
        } else {
            /* Move the page's jobs over; the page keeps nothing it would free twice. */
            Atoll__Job **v = realloc(all->jobs, (all->n_jobs + page->n_jobs) * sizeof *v);
            if (!v) {
                atoll__jobs_reply__free_unpacked(page, NULL);
                atoll__jobs_reply__free_unpacked(all, NULL);
                fprintf(stderr, "%s: out of memory\n", c->prog);
                return CLI_REFUSED;
            }
            memcpy(v + all->n_jobs, page->jobs, page->n_jobs * sizeof *v);
            all->jobs = v;
            all->n_jobs += page->n_jobs;
            all->next_after_id = page->next_after_id;
            page->n_jobs = 0;
            atoll__jobs_reply__free_unpacked(page, NULL);
        }
        if (!all->next_after_id || all->next_after_id <= after) break;
        after = all->next_after_id;
    }
    *out = all;
    return 0;
}

/* `--state S[,S...]` as squeue's --states: a bit per job state, "active" for
 * pending to restarting, "ended" for completed, failed and cancelled. 0, or -1
 * after a usage message naming what is accepted. */
static int parse_states(cli_ctx *c, const char *list, unsigned *mask)
{
    *mask = 0;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        int active = n == 6 && !strncmp(p, "active", 6), ended = n == 5 && !strncmp(p, "ended", 5);
        unsigned bit = 0;
        for (int s = ATOLL__JOB_STATE__JOB_PENDING; s <= ATOLL__JOB_STATE__JOB_CANCELLED; s++)
            if ((strlen(msg_job_state_name(s)) == n && !strncmp(p, msg_job_state_name(s), n)) ||
                (msg_job_state_ended(s) ? ended : active))
                bit |= 1u << s;
        if (!bit) {
            cli_usage(c, "jobs", "--state: '%.*s' is not a job state (accepted: pending, placing, starting, running, "
                      "restarting, completed, failed, cancelled, active, ended; several joined by ',')", (int)n, p);
            return -1;
        }
        *mask |= bit;
        p += n + (p[n] == ',');
    }
    return 0;
}

int cmd_jobs(cli_ctx *c, int argc, char **argv)
{
    unsigned states = ~0u;
    const char *name = NULL;
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc;
        if (!strcmp(argv[i], "--state") && more) {
            if (parse_states(c, argv[++i], &states)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--name") && more) {
            name = argv[++i];
        } else {
            return cli_usage(c, "jobs", "%s '%s'", !strcmp(argv[i], "--state") || !strcmp(argv[i], "--name")
                             ? "a value is needed after" : "unexpected argument", argv[i]);
        }
    }
    Atoll__JobsReply *r;
    int rc = cli_fetch_job(c, 0, 0, &r);
    if (rc) return rc;
    size_t kept = 0; /* the jobs asked for, first in the reply's order */
    for (size_t i = 0; i < r->n_jobs; i++)
        if (r->jobs[i]->state >= 0 && r->jobs[i]->state < 32 && (states >> r->jobs[i]->state & 1) &&
            (!name || !strcmp(r->jobs[i]->name, name))) {
            Atoll__Job *keep = r->jobs[i];
            r->jobs[i] = r->jobs[kept];
            r->jobs[kept++] = keep;
        }
    size_t all = r->n_jobs;
    r->n_jobs = kept;
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_key(&w, "jobs");
        jsonw_arr(&w);
        for (size_t i = 0; i < r->n_jobs; i++) msg_json_job(&w, r->jobs[i]);
        jsonw_arr_end(&w);
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
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
        if (!all) printf("(no jobs; `atoll submit ... --num-gpus N` queues one)\n");
        else if (!r->n_jobs) printf("(none of the %zu jobs matches)\n", all);
    }
    r->n_jobs = all;
    atoll__jobs_reply__free_unpacked(r, NULL);
    return 0;
}

static void span(char *out, size_t len, double s)
{
    if (s < 120) snprintf(out, len, "%.1f s", s);
    else if (s < 7200) snprintf(out, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(out, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* Restarts, goodput and the ranks' health: what went wrong and what it cost. */
static void print_resilience(const Atoll__Job *j)
{
    if (j->n_history) {
        printf("  restart history (max %d after failures):\n", j->max_restarts);
        for (size_t i = 0; i < j->n_history; i++) {
            const Atoll__RestartRecord *h = j->history[i];
            char when[32], det[32] = "-", run[32] = "-";
            cli_time(h->detected_ms, when, sizeof when);
            if (h->fault_ms > 0) snprintf(det, sizeof det, "%.1f s", (h->detected_ms - h->fault_ms) / 1000.0);
            if (h->running_ms > 0) snprintf(run, sizeof run, "%.1f s", (h->running_ms - h->detected_ms) / 1000.0);
            printf("    epoch %u %s UTC %-9s detected in %s, running again after %s, %lld steps recomputed from "
                   "step %lld, dp %d%s\n      %s\n", h->epoch, when, h->cause, det, run, (long long)h->steps_recomputed,
                   (long long)h->from_iteration, h->dp, h->counted ? "" : " (not counted)", h->detail);
        }
    }
    if (j->goodput && j->goodput->wall_s > 0) {
        const Atoll__Goodput *g = j->goodput;
        char wall[32], a[32], b[32], c[32], d[32], e[32];
        span(wall, sizeof wall, g->wall_s);
        span(a, sizeof a, g->startup_s);
        span(b, sizeof b, g->checkpoint_s);
        span(c, sizeof c, g->detection_s);
        span(d, sizeof d, g->restart_s);
        span(e, sizeof e, g->recompute_s);
        printf("  goodput: %.1f%% of %s productive (lost: start-up %s, checkpoint stalls %s, detection %s, "
               "restarts %s, recomputed steps %s)\n", 100 * g->ratio, wall, a, b, c, d, e);
    }
    int scored = 0, stragglers = 0;
    for (size_t i = 0; i < j->n_ranks; i++) {
        scored += j->ranks[i]->score > 0;
        stragglers += j->ranks[i]->straggler;
    }
    if (!scored) return;
    /* the stragglers (up to 8), else the three slowest, highest score first */
    size_t order[8], n = 0, limit = stragglers ? 8 : 3;
    for (size_t i = 0; i < j->n_ranks; i++) {
        const Atoll__RankHealth *h = j->ranks[i];
        if (h->score <= 0 || (stragglers && !h->straggler)) continue;
        size_t at = n < limit ? n++ : limit;
        while (at > 0 && j->ranks[order[at - 1]]->score < h->score) {
            if (at < limit) order[at] = order[at - 1];
            at--;
        }
        if (at < limit) order[at] = i;
    }
    printf("  stragglers (compute time per step over the median of its peers): %s", stragglers ? "" : "none; slowest ");
    for (size_t k = 0; k < n; k++) {
        const Atoll__RankHealth *h = j->ranks[order[k]];
        printf("%srank %d (%s) %.2fx, %.1f ms", k ? ", " : "", h->rank, h->node, h->score, h->compute_ms);
    }
    printf("\n");
}

/* A schedule's entries as its flag takes them: " by schedule: 16 from 0 tokens,
 * 320 from 2.4B, ..." (tokens in K, M, B or T from a thousand on), read by the
 * config's parser at one token a sample. */
static void print_schedule(const char *normalised)
{
    static const struct { double unit; char suffix; } units[] = { { 1e12, 'T' }, { 1e9, 'B' }, { 1e6, 'M' }, { 1e3, 'K' } };
    atoll_config sc;
    cfg_defaults(&sc);
    sc.seq_length = 1;
    snprintf(sc.step_batch_size_schedule, sizeof sc.step_batch_size_schedule, "%s", normalised);
    uint64_t from[CFG_MAX_SCHEDULE];
    int bs[CFG_MAX_SCHEDULE], n = cfg_batch_schedule(&sc, from, bs);
    for (int i = 0; i < n; i++) {
        printf(i ? ", %d from " : " by schedule: %d from ", bs[i]);
        size_t u = 0;
        while (u < 4 && (double)from[i] < units[u].unit) u++;
        if (u < 4) printf("%.6g%c", (double)from[i] / units[u].unit, units[u].suffix);
        else printf("%llu", (unsigned long long)from[i]);
        if (!i) printf(" tokens");
    }
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
    int full = j->spec ? j->spec->num_gpus : 0;
    if (j->world > 0 && j->world < full)
        printf("  layout: tp=%d pp=%d dp=%d vpp=%d on %d of %d ranks (data parallel shrunk after a fault)", j->tp, j->pp,
               j->dp, j->vpp, j->world, full);
    else
        printf("  layout: tp=%d pp=%d dp=%d vpp=%d on %d ranks", j->tp, j->pp, j->dp, j->vpp, full);
    if (j->spec) {
        printf(" (model: %d layers, hidden %d, %d heads, seq %d; micro-batch %d, global batch %d",
               j->spec->num_layers, j->spec->hidden_size, j->spec->num_attention_heads, j->spec->seq_length,
               j->spec->micro_batch_size, j->spec->global_batch_size);
        atoll_config ramp; /* the ramp's numbers as the config reads them */
        int start, inc;
        uint64_t over;
        char why[8];
        cfg_defaults(&ramp);
        if (j->spec->rampup_batch_size && cfg_set(&ramp, "rampup-batch-size", j->spec->rampup_batch_size, why,
                                                  sizeof why) == CFG_OK && cfg_rampup(&ramp, &start, &inc, &over))
            printf(" from %d, +%d over %llu samples", start, inc, (unsigned long long)over);
        if (j->spec->step_batch_size_schedule && j->spec->step_batch_size_schedule[0])
            print_schedule(j->spec->step_batch_size_schedule);
        printf(")");
    }
    if (j->spec && j->spec->n_env) {
        printf("\n  environment (--env):");
        for (size_t i = 0; i < j->spec->n_env; i++)
            printf(strpbrk(j->spec->env[i], " \t\"'") ? " '%s'" : " %s", j->spec->env[i]);
    }
    if (j->spec && j->spec->dependency && j->spec->dependency[0]) printf("\n  dependency: %s", j->spec->dependency);
    if (j->spec && j->spec->time_limit_s > 0) {
        char lim[32];
        slurm_format_time(j->spec->time_limit_s, lim, sizeof lim);
        printf("\n  time limit (--time): %s from its first start", lim);
    }
    /* scale-ups restart a job too, without counting against --max-restarts */
    unsigned counted = 0;
    for (size_t i = 0; i < j->n_history; i++) counted += j->history[i]->counted;
    printf("\n  restarts: %u", j->restarts);
    if (j->n_history && counted != j->restarts) printf(" (%u after failures, of at most %d)", counted, j->max_restarts);
    printf(", epoch %u; submitted %s UTC, updated %s UTC\n", j->epoch, t1, t2);
    if (!have) {
        printf("  no step reported yet; pipeline bubble theory %.3f\n", m ? m->bubble_theory : 0);
        print_resilience(j);
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
        int layers = msg_stage_layers(j, b->stage);
        printf("    stage %d", b->stage);
        if (layers >= 0) printf(" (%d layer%s)", layers, layers == 1 ? "" : "s");
        printf(": measured %s, theory %.3f, transfer %s\n", meas, b->theory, xfer);
    }
    print_resilience(j);
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
    jsonw_print_free(jsonw_take(&w));
}

int cmd_status(cli_ctx *c, int argc, char **argv)
{
    uint64_t id;
    int rc = one_job(c, argc, argv, &id);
    if (rc) return rc;
    Atoll__JobsReply *r;
    if ((rc = cli_fetch_job(c, id, 0, &r))) return rc;
    if (r->n_jobs == 1) {
        if (c->json) json_one(r->jobs[0]);
        else print_job(r->jobs[0]);
    }
    atoll__jobs_reply__free_unpacked(r, NULL);
    return 0;
}

/* Polls the job once a second (through coordinator restarts, as --timeout allows)
 * until it ends; each state it passes through is a line on stderr, the end is
 * printed as `atoll status` prints it. */
static int wait_job(cli_ctx *c, uint64_t id, double max_wait_s)
{
    long long until = max_wait_s > 0 ? cli_mono_ms() + (long long)(max_wait_s * 1000) : 0;
    int seen = -1;
    for (;;) {
        Atoll__JobsReply *r;
        int rc = cli_fetch_job(c, id, 1, &r);
        if (rc) return rc;
        if (r->n_jobs != 1) {
            atoll__jobs_reply__free_unpacked(r, NULL);
            fprintf(stderr, "%s: no job %llu (`atoll jobs` lists them)\n", c->prog, (unsigned long long)id);
            return CLI_REFUSED;
        }
        const Atoll__Job *j = r->jobs[0];
        int state = (int)j->state;
        if (state != seen) {
            fprintf(stderr, "%s: job %llu %s%s%s\n", c->prog, (unsigned long long)id, msg_job_state_name(state),
                    j->message && *j->message ? ": " : "", j->message ? j->message : "");
            seen = state;
        }
        if (msg_job_state_ended(state)) {
            if (c->json) json_one(j);
            else print_job(j);
            atoll__jobs_reply__free_unpacked(r, NULL);
            return state == ATOLL__JOB_STATE__JOB_COMPLETED ? CLI_OK : CLI_REFUSED;
        }
        atoll__jobs_reply__free_unpacked(r, NULL);
        long long pause = 1000, left = until ? until - cli_mono_ms() : pause;
        if (left <= 0) {
            fprintf(stderr, "%s: job %llu is still %s after --max-wait %g s\n", c->prog, (unsigned long long)id,
                    msg_job_state_name(state), max_wait_s);
            return CLI_REFUSED;
        }
        if (left < pause) pause = left;
        struct timespec ts = { pause / 1000, (long)(pause % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
}

int cmd_wait(cli_ctx *c, int argc, char **argv)
{
    uint64_t id = 0;
    double max_wait = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-wait")) {
            char *end = NULL;
            max_wait = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || end == argv[i + 1] || *end || !(max_wait > 0) || max_wait > 1e9)
                return cli_usage(c, "wait", "--max-wait needs a number of seconds above 0 (without it: until the job "
                                 "ends)");
            i++;
        } else if (!id && !cli_job_id(argv[i], &id)) {
            continue;
        } else {
            return cli_usage(c, "wait", "unexpected argument '%s' (expected one job id and --max-wait SEC)", argv[i]);
        }
    }
    if (!id) return cli_usage(c, "wait", "expected a job id");
    return wait_job(c, id, max_wait);
}

/* `atoll cancel JOB [JOB...] [--checkpoint]`, as scancel takes several: each is
 * cancelled in turn, one that is refused (said on stderr) does not stop the
 * rest, and the exit status is the first refusal's. */
int cmd_cancel(cli_ctx *c, int argc, char **argv)
{
    int checkpoint = 0, n = 0;
    for (int i = 1; i < argc; i++) {
        uint64_t id;
        if (!strcmp(argv[i], "--checkpoint")) checkpoint = 1;
        else if (!strncmp(argv[i], "--", 2)) return cli_usage(c, argv[0], "unknown flag '%s' (accepted: --checkpoint)", argv[i]);
        else if (cli_job_id(argv[i], &id)) return cli_usage(c, argv[0], "'%s' is not a job id (a positive number)", argv[i]);
        else n++;
    }
    if (!n) return cli_usage(c, argv[0], "expected one or more job ids");
    int worst = 0;
    jsonw w;
    jsonw_init(&w);
    if (c->json && n > 1) jsonw_arr(&w);
    for (int i = 1; i < argc; i++) {
        Atoll__CancelRequest req = ATOLL__CANCEL_REQUEST__INIT;
        if (!strcmp(argv[i], "--checkpoint") || cli_job_id(argv[i], &req.job)) continue;
        req.checkpoint = checkpoint;
        Atoll__JobsReply *r;
        int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_CANCEL, &req.base, ATOLL__MSG_TYPE__MSG_JOBS_REPLY,
                          (ProtobufCMessage **)&r);
        if (rc) {
            if (!worst) worst = rc;
            continue;
        }
        if (r->n_jobs == 1) {
            if (c->json) msg_json_job(&w, r->jobs[0]);
            else printf("job %llu %s\n", (unsigned long long)req.job,
                        checkpoint ? r->jobs[0]->message : msg_job_state_name(r->jobs[0]->state));
        }
        atoll__jobs_reply__free_unpacked(r, NULL);
    }
    if (c->json && n > 1) jsonw_arr_end(&w);
    char *json = jsonw_take(&w);
    if (c->json && json && *json) jsonw_print_free(json);
    else free(json);
    return worst;
}
