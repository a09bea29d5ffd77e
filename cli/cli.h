/* cli: the `atoll` command. main.c holds the global flags and the command table;
 * each cmd_<family>.c implements a family of commands against the coordinator.
 * Exit statuses (INTERFACES.md): 0 success, 1 refused (reason on stderr),
 * 2 bad usage, 3 coordinator unreachable. */
#ifndef ATOLL_CLI_H
#define ATOLL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "atoll.pb-c.h"
#include "config.h"

enum { CLI_OK = 0, CLI_REFUSED = 1, CLI_USAGE = 2, CLI_UNREACHABLE = 3 };

typedef struct cli_ctx {
    const char *coordinator;
    const char *token_file;
    int json;
    int timeout_ms;
    const char *prog;
    int quiet_refusals; /* set: cli_call leaves a refusal's reason in `error` without printing it */
    char error[2048];   /* the reason of the last failed call (a refusal with its advice runs long) */
} cli_ctx;

typedef struct cli_command {
    const char *name;
    int (*run)(cli_ctx *c, int argc, char **argv); /* argv[0] is the command name */
    const char *args;
    const char *summary;
} cli_command;

/* One request, one reply; prints the reason and returns the exit status on failure. */
int cli_call(cli_ctx *c, uint16_t type, const ProtobufCMessage *req, uint16_t reply_type, ProtobufCMessage **reply);
/* The same; with `retry` set the request (which must be idempotent) is sent again
 * on a new connection while the coordinator cannot be reached, until --timeout. */
int cli_call_retry(cli_ctx *c, uint16_t type, const ProtobufCMessage *req, uint16_t reply_type,
                   ProtobufCMessage **reply, int retry);

int cli_usage(cli_ctx *c, const char *cmd, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* 1 when argv has --help/-h (after printing the command's usage). */
int cli_wants_help(cli_ctx *c, int argc, char **argv);
/* Runs a command that works locally on a model or data (generate, export,
 * import, data prepare), argv[0] its name: the engine's side of it is
 * atoll-train, beside this atoll, which replaces this process (exec) with argv
 * and the global --json handed back to it, so its exit code (0 ok, 1 failed, 2
 * bad usage), output and signals are the command's. The CLI itself links no
 * engine and so no CUDA, cuBLAS or NCCL. Returns only when atoll-train cannot be
 * run, having said why (1). */
int cli_run_local(cli_ctx *c, int argc, char **argv);
/* Milliseconds of the monotonic clock. */
long long cli_mono_ms(void);
/* Parses a job id ("7" or "job-7"); -1 on error. */
int cli_job_id(const char *s, uint64_t *id);
/* "2026-11-20 23:59:01" (UTC) for an epoch in ms. */
void cli_time(int64_t ms, char *buf, unsigned len);

int cmd_nodes(cli_ctx *c, int argc, char **argv);
int cmd_node(cli_ctx *c, int argc, char **argv);
int cmd_drain(cli_ctx *c, int argc, char **argv);
int cmd_submit(cli_ctx *c, int argc, char **argv);
int cmd_jobs(cli_ctx *c, int argc, char **argv);
int cmd_status(cli_ctx *c, int argc, char **argv);
int cmd_wait(cli_ctx *c, int argc, char **argv);
int cmd_cancel(cli_ctx *c, int argc, char **argv);
int cmd_resubmit(cli_ctx *c, int argc, char **argv);
int cmd_events(cli_ctx *c, int argc, char **argv);
int cmd_data(cli_ctx *c, int argc, char **argv);
int cmd_generate(cli_ctx *c, int argc, char **argv);
int cmd_export(cli_ctx *c, int argc, char **argv);
int cmd_import(cli_ctx *c, int argc, char **argv);
int cmd_plan(cli_ctx *c, int argc, char **argv);
int cmd_layout(cli_ctx *c, int argc, char **argv);
int cmd_metrics(cli_ctx *c, int argc, char **argv);
int cmd_logs(cli_ctx *c, int argc, char **argv);
int cmd_top(cli_ctx *c, int argc, char **argv);
/* "41.2%", or "n/a (CPU ranks: no dense bf16 peak; 3.2 GFLOP/s achieved per rank)". */
void cli_format_mfu(char *buf, size_t len, const Atoll__JobMetrics *m);
/* One job with its latest step in full (JobsRequest for one id; id 0: every job);
 * with `retry`, through a coordinator restart as cli_call_retry. */
int cli_fetch_job(cli_ctx *c, uint64_t id, int retry, Atoll__JobsReply **out);
/* `submit --auto-layout`: sets cfg's layout to the planner's best on the live
 * cluster; parallel flags present in argv stay as given. Prints the choice on stderr. */
int cli_auto_layout(cli_ctx *c, atoll_config *cfg, int argc, char **argv);
/* --use-checkpoint-args: the model from --load's newest step (ckpt_use_args),
 * said on stderr; -1 after a usage message for `cmd` when it cannot be read. */
int cli_checkpoint_args(cli_ctx *c, const char *cmd, atoll_config *cfg);

const cli_command *cli_find(const char *name);

#endif
