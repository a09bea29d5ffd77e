/* coordinatord: the cluster's coordinator daemon. Flags: INTERFACES.md. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coord.h"
#include "log.h"
#include "slurm.h"

static const char USAGE[] =
    "usage: coordinatord [flags]\n"
    "  --listen HOST:PORT         RPC listener for workers and the CLI (default 127.0.0.1:7420; port 0 = any)\n"
    "  --http HOST:PORT           /metrics, /api/..., / (default 127.0.0.1:7421; 'off' to disable)\n"
    "  --http-token FILE          require 'Authorization: Bearer <the file's text>' on /metrics and /api\n"
    "  --http-max-conns N         concurrent HTTP connections (default 512; more wait in the listen queue)\n"
    "  --state-dir DIR            SQLite state and the cluster token (default ./atoll-state)\n"
    "  --token-file FILE          shared secret (default STATE_DIR/token; created 0600 on first start)\n"
    "  --heartbeat-interval SEC   interval workers are told to use (default 1)\n"
    "  --node-timeout SEC         silence after which a node is dead (default 5)\n"
    "  --suspect-after SEC        silence after which a node is suspect (default: min(2 x interval, timeout/2))\n"
    "  --max-frame BYTES          largest accepted frame payload (default 16777216)\n"
    "  --fabric FILE              Slurm topology.conf describing the switch tree (placement keeps jobs under few\n"
    "                             leaves); in a Slurm job without it: `scontrol show topology` or topology.conf\n"
    "  --stop-grace SEC           on SIGTERM, keep serving while jobs are active and 2 s after, at most SEC\n"
    "                             (default 0: stop)\n"
    "  --hang-floor SEC           a running job with no step for max(this, factor x step time) is hung (default 10)\n"
    "  --hang-factor F            ... the step-time factor of that bound (default 3)\n"
    "  --straggler-threshold R    a rank computing R x its peers' median is a straggler (default 1.5)\n"
    "  --exclude-stragglers SEC   drain the node of a rank that stays a straggler this long (default: never)\n"
    "  --max-restarts N           restarts after failures for jobs that do not say (default 3)\n"
    "  --slurm-poll SEC           ask Slurm for its nodes' states every SEC (`scontrol -o show node`); a node Slurm\n"
    "                             drains, downs or fails is lost to atoll until Slurm returns it (default 10 in a\n"
    "                             Slurm job, else 0 = never)\n"
    "  --log-level LEVEL          debug, info, warn, error (default info)\n"
    "The bound addresses are written to STATE_DIR/coordinatord.addr and STATE_DIR/http.addr.\n";

static int seconds(const char *flag, const char *v, int *ms)
{
    char *end;
    errno = 0;
    double s = strtod(v, &end);
    if (errno || end == v || *end || !(s > 0) || s > 86400) {
        fprintf(stderr, "coordinatord: %s '%s': expected seconds > 0 (e.g. 1 or 0.5)\n", flag, v);
        return -1;
    }
    *ms = (int)(s * 1000 + 0.5);
    if (*ms < 1) *ms = 1;
    return 0;
}

int main(int argc, char **argv)
{
    coord_opts o;
    coord_opts_defaults(&o);
    log_level level = LOG_INFO;
    int slurm_poll_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "coordinatord: %s needs a value (or is unknown)\n%s", a, USAGE);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--listen")) snprintf(o.listen, sizeof o.listen, "%s", v);
        else if (!strcmp(a, "--http")) snprintf(o.http, sizeof o.http, "%s", strcmp(v, "off") ? v : "");
        else if (!strcmp(a, "--state-dir")) snprintf(o.state_dir, sizeof o.state_dir, "%s", v);
        else if (!strcmp(a, "--token-file")) snprintf(o.token_file, sizeof o.token_file, "%s", v);
        else if (!strcmp(a, "--heartbeat-interval")) bad = seconds(a, v, &o.heartbeat_ms);
        else if (!strcmp(a, "--node-timeout")) bad = seconds(a, v, &o.node_timeout_ms);
        else if (!strcmp(a, "--suspect-after")) bad = seconds(a, v, &o.suspect_ms);
        else if (!strcmp(a, "--fabric")) snprintf(o.fabric, sizeof o.fabric, "%s", v);
        else if (!strcmp(a, "--hang-floor")) bad = seconds(a, v, &o.hang_floor_ms);
        else if (!strcmp(a, "--exclude-stragglers")) bad = seconds(a, v, &o.straggler_exclude_ms);
        else if (!strcmp(a, "--hang-factor") || !strcmp(a, "--straggler-threshold")) {
            char *end;
            errno = 0;
            double x = strtod(v, &end);
            if (errno || end == v || *end || !(x >= 1) || x > 1000) {
                fprintf(stderr, "coordinatord: %s '%s': expected a factor from 1 to 1000 (e.g. 3)\n", a, v);
                bad = 1;
            }
            if (!strcmp(a, "--hang-factor")) o.hang_factor = x;
            else o.straggler_threshold = x;
        } else if (!strcmp(a, "--max-restarts")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 0 || n > 1000000) {
                fprintf(stderr, "coordinatord: --max-restarts '%s': expected 0..1000000\n", v);
                bad = 1;
            }
            o.max_restarts = (int)n;
        }
        else if (!strcmp(a, "--stop-grace")) bad = seconds(a, v, &o.stop_grace_ms);
        else if (!strcmp(a, "--slurm-poll")) {
            slurm_poll_given = 1;
            if (strcmp(v, "0")) bad = seconds(a, v, &o.slurm_poll_ms);
            else o.slurm_poll_ms = 0;
        }
        else if (!strcmp(a, "--http-token")) snprintf(o.http_token_file, sizeof o.http_token_file, "%s", v);
        else if (!strcmp(a, "--http-max-conns")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 100000) {
                fprintf(stderr, "coordinatord: --http-max-conns '%s': expected 1..100000\n", v);
                bad = 1;
            }
            o.http_max_conns = (int)n;
        }
        else if (!strcmp(a, "--max-frame")) {
            char *end;
            unsigned long n = strtoul(v, &end, 10);
            if (*end || n < 1024 || n > (1ul << 30)) {
                fprintf(stderr, "coordinatord: --max-frame '%s': expected 1024..1073741824 bytes\n", v);
                bad = 1;
            }
            o.max_frame = (uint32_t)n;
        } else if (!strcmp(a, "--log-level")) {
            if (log_level_parse(v, &level)) {
                fprintf(stderr, "coordinatord: --log-level '%s': expected debug, info, warn or error\n", v);
                bad = 1;
            }
        } else {
            fprintf(stderr, "coordinatord: unknown flag '%s'\n%s", a, USAGE);
            return 2;
        }
        if (bad) return 2;
    }
    if (!o.suspect_ms) {
        o.suspect_ms = 2 * o.heartbeat_ms;
        if (o.suspect_ms > o.node_timeout_ms / 2) o.suspect_ms = o.node_timeout_ms / 2;
    }
    if (o.suspect_ms >= o.node_timeout_ms || o.heartbeat_ms >= o.node_timeout_ms) {
        fprintf(stderr, "coordinatord: --node-timeout (%d ms) must exceed --heartbeat-interval (%d ms) "
                "and --suspect-after (%d ms)\n", o.node_timeout_ms, o.heartbeat_ms, o.suspect_ms);
        return 2;
    }
    log_init("coordinatord", level);
    o.fabric_from_slurm = slurm_in_job(getenv);
    if (!slurm_poll_given && !o.fabric_from_slurm) o.slurm_poll_ms = 0;
    /* A peer that goes away mid-write must cost us that connection (EPIPE), not the process. */
    signal(SIGPIPE, SIG_IGN);

    if (mkdir(o.state_dir, 0700) && errno != EEXIST) {
        log_error("--state-dir %s: %s", o.state_dir, strerror(errno));
        return 1;
    }
    /* One coordinator per state directory: a second would fight over the database. */
    char path[700];
    snprintf(path, sizeof path, "%s/lock", o.state_dir);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB)) {
        log_error("--state-dir %s is in use by another coordinatord (%s is locked)", o.state_dir, path);
        return 1;
    }
    if (!o.token_file[0]) snprintf(o.token_file, sizeof o.token_file, "%s/token", o.state_dir);

    coord c;
    char err[512];
    snprintf(path, sizeof path, "%s/state.db", o.state_dir);
    if (coord_init(&c, &o, path, err, sizeof err)) {
        log_error("%s", err);
        return 1;
    }
    int created = 0;
    if (auth_token_load(&c.token, o.token_file, 1, &created, err, sizeof err)) {
        log_error("%s", err);
        coord_free(&c);
        return 1;
    }
    if (created) log_info("created cluster token %s (mode 0600); give it to workers and the CLI", o.token_file);
    if (o.http_token_file[0] && auth_token_load(&c.http_token, o.http_token_file, 0, NULL, err, sizeof err)) {
        log_error("--http-token: %s", err);
        coord_free(&c);
        return 1;
    }
    if (store_begin(c.st) == 0) {
        events_add(&c, "coordinator.started", "coordinator", "listening on %s, state in %s", o.listen, o.state_dir);
        if (store_commit(c.st)) store_rollback(c.st);
    }
    int rc = server_run(&c, err, sizeof err);
    if (rc) log_error("%s", err);
    coord_free(&c);
    close(lock);
    log_info("stopped");
    return rc ? 1 : 0;
}
