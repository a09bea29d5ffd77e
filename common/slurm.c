#include "slurm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *var(slurm_getenv_fn get, const char *name)
{
    const char *v = get(name);
    return v && *v ? v : NULL;
}

int slurm_in_job(slurm_getenv_fn get) { return var(get, "SLURM_JOB_ID") != NULL; }

const char *slurm_node_name(slurm_getenv_fn get) { return var(get, "SLURMD_NODENAME"); }

static int first_host(void *ctx, const char *name)
{
    char *out = ctx;
    if (!out[0]) snprintf(out, 256, "%s", name);
    return 0;
}

int slurm_coordinator(slurm_getenv_fn get, char *out, size_t outlen, char *err, size_t errlen)
{
    if (!slurm_in_job(get)) return 1;
    const char *ps = var(get, "ATOLL_COORDINATOR_PORT");
    long port = SLURM_DEFAULT_PORT;
    if (ps) {
        char *end;
        port = strtol(ps, &end, 10);
        if (*end || port < 1 || port > 65535) {
            snprintf(err, errlen, "ATOLL_COORDINATOR_PORT '%s': expected a TCP port, 1..65535", ps);
            return -1;
        }
    }
    char host[256] = "";
    const char *launch = var(get, "SLURM_LAUNCH_NODE_IPADDR");
    const char *list = var(get, "SLURM_JOB_NODELIST");
    if (!list) list = var(get, "SLURM_NODELIST");
    if (launch) {
        snprintf(host, sizeof host, "%s", launch);
    } else if (list) {
        char sub[200] = "";
        if (fabric_hostlist_expand(list, first_host, host, sub, sizeof sub) < 1 || !host[0]) {
            snprintf(err, errlen, "SLURM_JOB_NODELIST '%s': %s", list, sub[0] ? sub : "names no node");
            return -1;
        }
    } else {
        snprintf(err, errlen, "a Slurm job (SLURM_JOB_ID) without SLURM_LAUNCH_NODE_IPADDR or SLURM_JOB_NODELIST: "
                 "give --coordinator HOST:PORT");
        return -1;
    }
    /* an IPv6 literal needs brackets before the port */
    int v6 = strchr(host, ':') != NULL;
    if ((size_t)snprintf(out, outlen, "%s%s%s:%ld", v6 ? "[" : "", host, v6 ? "]" : "", port) >= outlen) {
        snprintf(err, errlen, "coordinator host '%s' is too long", host);
        return -1;
    }
    return 0;
}

/* "0,1,4" (also "0-3,6": Slurm prints ranges in some versions) into idx[]. */
static int parse_index_list(const char *name, const char *s, int *idx, int max, char *err, size_t errlen)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0 || a > 1023) goto bad;
        p = end;
        if (*p == '-') {
            const char *q = p + 1;
            b = strtol(q, &end, 10);
            if (end == q || b < a || b > 1023) goto bad;
            p = end;
        }
        for (long i = a; i <= b; i++) {
            if (n == max) {
                snprintf(err, errlen, "%s '%s': more than %d GPUs", name, s, max);
                return -2;
            }
            idx[n++] = (int)i;
        }
        if (*p == ',') p++;
        else if (*p) goto bad;
    }
    return n;
bad:
    snprintf(err, errlen, "%s '%s': expected GPU indices like 0,1,4 or 0-3", name, s);
    return -2;
}

int slurm_gpus(slurm_getenv_fn get, int *idx, int *cuda, int max, char *err, size_t errlen)
{
    const char *name = "SLURM_STEP_GPUS";
    const char *v = var(get, name);
    if (!v) v = var(get, name = "SLURM_JOB_GPUS");
    if (!v || !slurm_in_job(get)) return -1;
    int n = parse_index_list(name, v, idx, max, err, errlen);
    if (n < 0) return n;
    /* CUDA_VISIBLE_DEVICES as Slurm set it for this step: entry i is GPU idx[i]
     * when it has as many numeric entries; otherwise the indices are the ordinals. */
    int cvd[SLURM_MAX_GPUS], nc = -1;
    const char *c = var(get, "CUDA_VISIBLE_DEVICES");
    char sub[160];
    if (c) nc = parse_index_list("CUDA_VISIBLE_DEVICES", c, cvd, SLURM_MAX_GPUS, sub, sizeof sub);
    for (int i = 0; i < n; i++) cuda[i] = nc == n ? cvd[i] : idx[i];
    return n;
}

/* A command's whole output; NULL when it cannot run or exits non-zero. */
static char *command_output(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char err[200];
    char *text = fabric_read_text(p, cmd, err, sizeof err);
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        free(text);
        return NULL;
    }
    return text;
}

int slurm_fabric(fabric **out, char *from, size_t fromlen, char *err, size_t errlen)
{
    *out = NULL;
    char *text = command_output("scontrol show topology 2>/dev/null");
    if (text && strstr(text, "SwitchName=")) {
        snprintf(from, fromlen, "scontrol show topology");
        int rc = fabric_parse(out, text, "scontrol show topology", err, errlen);
        free(text);
        return rc;
    }
    free(text);
    char conf[600] = "/etc/slurm/topology.conf";
    const char *sc = getenv("SLURM_CONF");
    const char *slash = sc ? strrchr(sc, '/') : NULL;
    if (slash) snprintf(conf, sizeof conf, "%.*s/topology.conf", (int)(slash - sc), sc);
    if (access(conf, R_OK)) {
        snprintf(from, fromlen, "scontrol show topology (no switches) and %s (absent)", conf);
        return 1;
    }
    snprintf(from, fromlen, "%s", conf);
    return fabric_load(out, conf, err, errlen);
}

int slurm_state_out(const char *state)
{
    static const char *const out[] = { "DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING" };
    const char *p = state;
    while (*p) {
        size_t n = strcspn(p, "+");
        while (n && strchr("*~#%!$@^-", p[n - 1])) n--; /* not responding, powered down, ... */
        for (size_t k = 0; k < sizeof out / sizeof *out; k++)
            if (strlen(out[k]) == n && !strncmp(p, out[k], n)) return 1;
        p += strcspn(p, "+");
        if (*p) p++;
    }
    return 0;
}

/* The value of " KEY=" in line[0..len): its start and length up to the next space. */
static const char *field(const char *line, size_t len, const char *key, size_t *vlen)
{
    size_t k = strlen(key);
    for (const char *p = line; p + k <= line + len; p++) {
        if ((p == line || p[-1] == ' ') && !strncmp(p, key, k)) {
            const char *v = p + k;
            *vlen = strcspn(v, " ");
            if (v + *vlen > line + len) *vlen = (size_t)(line + len - v);
            return v;
        }
    }
    return NULL;
}

int slurm_parse_nodes(const char *text, slurm_node *out, int max, char *err, size_t errlen)
{
    int n = 0, lineno = 0;
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        const char *next = line + len + (line[len] == '\n');
        lineno++;
        while (len && (line[len - 1] == ' ' || line[len - 1] == '\r')) len--;
        if (!len) {
            line = next;
            continue;
        }
        /* Reason= comes last and may hold spaces and '=': the other keys are looked
         * for before it only. */
        const char *reason = NULL;
        for (const char *p = line; p + 7 <= line + len && !reason; p++)
            if ((p == line || p[-1] == ' ') && !strncmp(p, "Reason=", 7)) reason = p;
        size_t head = reason ? (size_t)(reason - line) : len;
        size_t nl = 0, sl = 0;
        const char *name = strncmp(line, "NodeName=", 9) ? NULL : line + 9;
        if (name) nl = strcspn(name, " ") < len - 9 ? strcspn(name, " ") : len - 9;
        const char *state = field(line, head, "State=", &sl);
        if (!name || !nl || !state || !sl) {
            snprintf(err, errlen, "line %d of scontrol -o show node output: expected 'NodeName=NAME ... State=STATE ...', "
                     "got '%.60s%s'", lineno, line, len > 60 ? "..." : "");
            return -1;
        }
        if (nl >= sizeof out->name || sl >= sizeof out->state) {
            snprintf(err, errlen, "line %d of scontrol -o show node output: %s longer than %zu characters", lineno,
                     nl >= sizeof out->name ? "NodeName" : "State", (nl >= sizeof out->name ? sizeof out->name
                                                                                            : sizeof out->state) - 1);
            return -1;
        }
        if (n == max) {
            snprintf(err, errlen, "scontrol -o show node output: more than the %d nodes asked for", max);
            return -1;
        }
        slurm_node *o = &out[n++];
        memset(o, 0, sizeof *o);
        memcpy(o->name, name, nl);
        memcpy(o->state, state, sl);
        o->out = slurm_state_out(o->state);
        if (reason) {
            const char *v = reason + 7;
            size_t vl = (size_t)(line + len - v);
            /* Slurm stamps who set it and when: "text [root@2024-05-01T10:00:00]" */
            const char *stamp = NULL;
            for (const char *p = v; p + 1 < v + vl; p++)
                if (p[0] == ' ' && p[1] == '[' && memchr(p, '@', (size_t)(v + vl - p))) stamp = p;
            if (stamp) vl = (size_t)(stamp - v);
            if (vl >= sizeof o->reason) vl = sizeof o->reason - 1;
            if (vl != 6 || strncmp(v, "(null)", 6)) memcpy(o->reason, v, vl);
        }
        line = next;
    }
    return n;
}

int slurm_parse_time(const char *text, int64_t *seconds, char *err, size_t errlen)
{
    long long f[4] = { 0 }, days = 0;
    int n = 0;
    const char *p = text ? text : "";
    const char *dash = strchr(p, '-');
    if (dash) { /* DAYS-HOURS[:MINUTES[:SECONDS]] */
        char *end;
        days = strtoll(p, &end, 10);
        if (end != dash || p == dash || *p == '+' || *p == '-' || days > 366) goto bad; /* before any product */
        p = dash + 1;
    }
    for (;;) {
        char *end;
        if (n == 3 || *p < '0' || *p > '9') goto bad;
        f[n++] = strtoll(p, &end, 10);
        if (f[n - 1] > 100000000) goto bad;
        if (!*end) break;
        if (*end != ':') goto bad;
        p = end + 1;
    }
    long long s;
    if (dash) s = days * 86400 + f[0] * 3600 + (n > 1 ? f[1] * 60 : 0) + (n > 2 ? f[2] : 0);
    else if (n == 1) s = f[0] * 60;
    else if (n == 2) s = f[0] * 60 + f[1];
    else s = f[0] * 3600 + f[1] * 60 + f[2];
    if (s <= 0 || s > SLURM_TIME_MAX_S) goto bad;
    *seconds = s;
    return 0;
bad:
    snprintf(err, errlen, "--time '%.40s': expected MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, "
             "DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS (as sbatch takes), more than 0 and at most 366 days",
             text ? text : "");
    return -1;
}

void slurm_format_time(int64_t seconds, char *out, size_t len)
{
    long long s = seconds > 0 ? seconds : 0, d = s / 86400;
    if (d) snprintf(out, len, "%lld-%02lld:%02lld:%02lld", d, s / 3600 % 24, s / 60 % 60, s % 60);
    else snprintf(out, len, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}
