#include "depend.h"
#include "errf.h"
#include "msg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const KIND_NAMES[] = { "afterok", "afternotok", "afterany" };
#define ACCEPTED "accepted: afterok:JOB[:JOB...], afternotok:..., afterany:..., joined by ',' (all must hold)"

const char *dep_kind_name(dep_kind k) { return k >= DEP_AFTEROK && k <= DEP_AFTERANY ? KIND_NAMES[k] : "?"; }

int dep_parse(const char *text, dep_list *out, char *err, size_t errlen)
{
    out->n = 0;
    for (const char *p = text ? text : ""; *p;) {
        size_t cond = strcspn(p, ","), name = strcspn(p, ":,");
        int kind = -1;
        for (int k = 0; k < 3; k++)
            if (name == strlen(KIND_NAMES[k]) && !strncmp(p, KIND_NAMES[k], name)) kind = k;
        if (kind < 0 || p[name] != ':') {
            atoll_errf(err, errlen, "--dependency '%s': '%.*s' is not a condition (%s)", text, (int)(cond < 40 ? cond : 40),
                       p, ACCEPTED);
            return -1;
        }
        for (const char *q = p + name; q < p + cond;) { /* at ':' */
            q++;
            char *end;
            errno = 0;
            unsigned long long id = q[0] >= '0' && q[0] <= '9' ? strtoull(q, &end, 10) : 0;
            if (!id || errno || (end != p + cond && *end != ':')) {
                size_t n = strcspn(q, ":,");
                atoll_errf(err, errlen, "--dependency '%s': '%.*s' after %s: is not a job id (%s)", text,
                           (int)(n < 24 ? n : 24), q, KIND_NAMES[kind], ACCEPTED);
                return -1;
            }
            if (out->n == DEP_MAX) {
                atoll_errf(err, errlen, "--dependency '%s': more than %d jobs", text, DEP_MAX);
                return -1;
            }
            out->item[out->n++] = (dep_item){ (dep_kind)kind, (uint64_t)id };
            q = end;
        }
        p += cond;
        if (*p == ',' && !*++p) {
            atoll_errf(err, errlen, "--dependency '%s' ends with ',' (%s)", text, ACCEPTED);
            return -1;
        }
    }
    return 0;
}

void dep_format(const dep_list *d, char *buf, size_t len)
{
    size_t at = 0;
    if (len) buf[0] = 0;
    for (int k = DEP_AFTEROK; k <= DEP_AFTERANY; k++) {
        int first = 1;
        for (int i = 0; i < d->n && at < len; i++) {
            if (d->item[i].kind != (dep_kind)k) continue;
            int n = first ? snprintf(buf + at, len - at, "%s%s:%llu", at ? "," : "", KIND_NAMES[k],
                                     (unsigned long long)d->item[i].job)
                          : snprintf(buf + at, len - at, ":%llu", (unsigned long long)d->item[i].job);
            if (n < 0) return;
            at += (size_t)n;
            first = 0;
        }
    }
}

int dep_met(dep_kind k, int state)
{
    if (!msg_job_state_ended(state)) return 0;
    int ok = state == ATOLL__JOB_STATE__JOB_COMPLETED;
    switch (k) {
    case DEP_AFTEROK: return ok ? 1 : -1;
    case DEP_AFTERNOTOK: return ok ? -1 : 1;
    case DEP_AFTERANY: return 1;
    }
    return -1;
}
