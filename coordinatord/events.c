/* events: the audit log. Every node and job state change writes one row in the
 * same transaction as the change itself, and one log line. */
#include <stdarg.h>
#include <stdio.h>

#include "coord.h"
#include "log.h"

int events_add(coord *c, const char *kind, const char *subject, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_info("event %s %s: %s", kind, subject, msg);
    if (store_event_add(c->st, c->now(), kind, subject, msg, NULL)) {
        log_error("cannot record event %s %s: %s", kind, subject, store_errmsg(c->st));
        return -1;
    }
    return 0;
}
