/* atoll: the command-line client. Global flags may come before or after the command. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "cli.h"
#include "msg_json.h"
#include "rpc.h"
#include "supervise.h"

static const cli_command COMMANDS[] = {
    { "nodes", cmd_nodes, "", "nodes with state, GPUs, NVLink islands, NICs/rails, leaf switch" },
    { "node", cmd_node, "NAME", "one node in detail" },
    { "drain", cmd_drain, "NAME", "keep new work off a node" },
    { "undrain", cmd_drain, "NAME", "allow new work on a node again" },
    { "submit", cmd_submit, "[Megatron-LM flags] [--yaml-cfg FILE] [--name NAME] [--env NAME=VALUE]... [--max-restarts N] "
      "[--dependency afterok:JOB] [--time [D-]HH:MM:SS] [--auto-layout] [--request-id ID] [--wait] --num-gpus N",
      "validate and queue a job; prints its id (--wait: then as `atoll wait`)" },
    { "jobs", cmd_jobs, "[--state S[,S...]] [--name NAME]",
      "jobs with state, step, loss, MFU (--state: pending, running, ..., active, ended)" },
    { "status", cmd_status, "JOB", "one job: state, layout, restarts, latest metrics, bubble" },
    { "wait", cmd_wait, "JOB [--max-wait SEC]",
      "until the job ends (state changes on stderr); exit 0 when it completed, 1 when it failed or was cancelled" },
    { "top", cmd_top, "[JOB] [--once]", "live view refreshed every second: jobs, throughput, MFU, bubble per stage (q quits)" },
    { "metrics", cmd_metrics, "JOB [--after N] [--limit N]", "the job's per-step time series" },
    { "logs", cmd_logs, "JOB [--rank R] [--epoch E] [--follow] [--tail BYTES]",
      "a rank's log (rank 0 of the current placement by default; --follow: on through restarts until the job ends)" },
    { "cancel", cmd_cancel, "JOB [JOB...] [--checkpoint]", "stop jobs (--checkpoint: their ranks commit a checkpoint first)" },
    { "resubmit", cmd_resubmit, "JOB [--name NAME]",
      "queue a job's spec again as a new job, going on from its --save checkpoint if it committed one" },
    { "events", cmd_events, "[--after ID] [--limit N]", "the audit log" },
    { "layout", cmd_layout, "JOB", "rank -> node/GPU map and every process group" },
    { "plan", cmd_plan, "[model flags] (--num-gpus N [--gpus-per-node N] [--gpu TYPE] | --cluster) [--top K] [--explain]",
      "rank layouts by predicted step time, MFU and memory, without running anything" },
    { "generate", cmd_generate, "--load DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--seed S]",
      "sample text from a checkpoint, with the tokenizer its data was prepared with" },
    { "export", cmd_export, "--load DIR --output DIR [--ckpt-step N] [--dtype fp32|bf16]",
      "a checkpoint as a Hugging Face model directory (config.json, model.safetensors, tokenizer files)" },
    { "import", cmd_import, "--hf DIR --save DIR",
      "a Hugging Face model directory (LLaMA, Mistral, Qwen2/3, GPT-2) as a checkpoint of its weights, to --finetune" },
    { "data", cmd_data, "prepare --input FILE... --output-prefix PREFIX [--tokenizer-type GPT2BPETokenizer "
      "--vocab-file F --merge-file F | --tokenizer-type HuggingFaceTokenizer|Llama2Tokenizer|GPTSentencePieceTokenizer "
      "--tokenizer-model F] [--append-eod] "
      "[--json-keys KEY]",
      "text or JSON lines into Megatron's indexed dataset (PREFIX.bin, PREFIX.idx), byte-level, GPT-2 BPE, a "
      "LLaMA-3 or Qwen tokenizer.json or a LLaMA-2 SentencePiece tokenizer.model" },
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

const cli_command *cli_find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(COMMANDS[i].name, name)) return &COMMANDS[i];
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: atoll [--coordinator HOST:PORT] [--token-file FILE] [--json] COMMAND [args]\n\n"
               "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-8s %-10s %s\n", COMMANDS[i].name, strlen(COMMANDS[i].args) > 10 ? "..." : COMMANDS[i].args,
                COMMANDS[i].summary);
    fprintf(f, "\nglobal flags:\n"
               "  --coordinator HOST:PORT  default $ATOLL_COORDINATOR or 127.0.0.1:7420\n"
               "  --token-file FILE        default $ATOLL_TOKEN_FILE or ./atoll-state/token\n"
               "  --json                   machine-readable output on stdout\n"
               "  --timeout SEC            how long to wait for the coordinator (default 10)\n"
               "exit status: 0 ok, 1 refused, 2 bad usage, 3 coordinator unreachable\n");
}

int cli_usage(cli_ctx *c, const char *cmd, const char *fmt, ...)
{
    fprintf(stderr, "%s: ", c->prog);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    const cli_command *k = cmd ? cli_find(cmd) : NULL;
    if (k) fprintf(stderr, "\nusage: atoll %s %s\n", k->name, k->args);
    else fputc('\n', stderr);
    return CLI_USAGE;
}

int cli_wants_help(cli_ctx *c, int argc, char **argv)
{
    (void)c;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            const cli_command *k = cli_find(argv[0]);
            printf("usage: atoll %s %s\n  %s\n", k->name, k->args, k->summary);
            return 1;
        }
    return 0;
}

int cli_run_local(cli_ctx *c, int argc, char **argv)
{
    char *args[argc + 3];
    int n = 0;
    args[n++] = program_invocation_name; /* what the user ran, for the engine's messages */
    for (int i = 0; i < argc; i++) args[n++] = argv[i];
    if (c->json) args[n++] = "--json"; /* taken out as a global flag: hand it back */
    args[n] = NULL;
    char train[PATH_MAX];
    sup_exe_path("atoll-train", train, sizeof train);
    fflush(NULL);
    execv(train, args);
    fprintf(stderr, "%s %s: cannot run the engine %s (%s); `atoll %s` needs atoll-train in the directory of this "
                    "atoll, as the build puts them\n",
            c->prog, argv[0], train, strerror(errno), argv[0]);
    return CLI_REFUSED;
}

int cli_job_id(const char *s, uint64_t *id)
{
    if (!strncmp(s, "job-", 4)) s += 4;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || !v || s[0] == '-') return -1;
    *id = v;
    return 0;
}

void cli_time(int64_t ms, char *buf, unsigned len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

void cli_format_mfu(char *buf, size_t len, const Atoll__JobMetrics *m)
{
    if (msg_mfu_known(m)) snprintf(buf, len, "%.1f%%", 100 * m->mfu);
    else if (m->flops_per_gpu > 0)
        snprintf(buf, len, "n/a (no dense bf16 peak for CPU ranks; %.3g GFLOP/s achieved per rank)",
                 m->flops_per_gpu / 1e9);
    else snprintf(buf, len, "n/a");
}

long long cli_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int cli_call_retry(cli_ctx *c, uint16_t type, const ProtobufCMessage *req, uint16_t reply_type,
                   ProtobufCMessage **reply, int retry)
{
    char err[2048];
    auth_token tok;
    if (auth_token_load(&tok, c->token_file, 0, NULL, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", c->prog, err);
        return CLI_USAGE;
    }
    /* An idempotent request is sent again while the coordinator is unreachable
     * (restarting, say), with backoff, until --timeout has passed. */
    long long deadline = cli_mono_ms() + c->timeout_ms;
    int backoff = 100;
    rpc_status st;
    for (int attempt = 0;; attempt++) {
        rpc_sync s;
        long long left = deadline - cli_mono_ms();
        st = rpc_sync_open(&s, c->coordinator, &tok, ATOLL__ROLE__ROLE_CLI, "atoll",
                           retry && left > 0 ? (int)left : c->timeout_ms, err, sizeof err);
        if (!st) st = rpc_sync_call(&s, type, req, reply_type, reply, err, sizeof err);
        rpc_sync_close(&s);
        if (st != RPC_UNREACHABLE || !retry || cli_mono_ms() + backoff >= deadline) break;
        if (!attempt) fprintf(stderr, "%s: %s; trying again until --timeout (%.0f s) has passed\n", c->prog, err,
                              c->timeout_ms / 1000.0);
        struct timespec ts = { backoff / 1000, (long)(backoff % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
    }
    sodium_memzero(&tok, sizeof tok);
    if (st != RPC_OK) snprintf(c->error, sizeof c->error, "%s", err);
    switch (st) {
    case RPC_OK:
        return CLI_OK;
    case RPC_UNREACHABLE:
        fprintf(stderr, "%s: %s\n  start a coordinator with `coordinatord --listen %s --state-dir DIR`, or point "
                "--coordinator / ATOLL_COORDINATOR at a running one\n", c->prog, err, c->coordinator);
        return CLI_UNREACHABLE;
    default:
        if (!c->quiet_refusals) fprintf(stderr, "%s: %s\n", c->prog, err);
        return CLI_REFUSED;
    }
}

int cli_call(cli_ctx *c, uint16_t type, const ProtobufCMessage *req, uint16_t reply_type, ProtobufCMessage **reply)
{
    return cli_call_retry(c, type, req, reply_type, reply, 0);
}

int main(int argc, char **argv)
{
    cli_ctx c = { .prog = "atoll", .timeout_ms = 10000 };
    c.coordinator = getenv("ATOLL_COORDINATOR");
    c.token_file = getenv("ATOLL_TOKEN_FILE");
    if (!c.coordinator || !*c.coordinator) c.coordinator = "127.0.0.1:7420";
    if (!c.token_file || !*c.token_file) c.token_file = "./atoll-state/token";
    /* Pull the global flags out wherever they are; the rest goes to the command. */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) c.json = 1;
        else if (!strcmp(a, "--coordinator") || !strcmp(a, "--token-file") || !strcmp(a, "--timeout")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "atoll: %s needs a value\n", a);
                free(rest);
                return CLI_USAGE;
            }
            const char *v = argv[++i];
            if (a[2] == 'c') c.coordinator = v;
            else if (a[2] == 't' && a[3] == 'o') c.token_file = v;
            else {
                double s = atof(v);
                if (!(s > 0)) {
                    fprintf(stderr, "atoll: --timeout '%s': expected seconds > 0\n", v);
                    free(rest);
                    return CLI_USAGE;
                }
                c.timeout_ms = (int)(s * 1000);
            }
        } else {
            rest[n++] = argv[i];
        }
    }
    int rc;
    if (n == 0 || !strcmp(rest[0], "--help") || !strcmp(rest[0], "-h") || !strcmp(rest[0], "help")) {
        usage(n ? stdout : stderr);
        rc = n ? CLI_OK : CLI_USAGE;
    } else {
        const cli_command *k = cli_find(rest[0]);
        if (!k) rc = cli_usage(&c, NULL, "unknown command '%s' (see `atoll --help`)", rest[0]);
        else if (cli_wants_help(&c, n, rest)) rc = CLI_OK;
        else rc = k->run(&c, n, rest);
    }
    free(rest);
    return rc;
}
