/* atoll events [--after ID] [--limit N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonw.h"
#include "msg_json.h"

int cmd_events(cli_ctx *c, int argc, char **argv)
{
    Atoll__EventsRequest req = ATOLL__EVENTS_REQUEST__INIT;
    for (int i = 1; i < argc; i += 2) {
        int after = !strcmp(argv[i], "--after");
        if ((!after && strcmp(argv[i], "--limit")) || i + 1 >= argc)
            return cli_usage(c, "events", "unexpected argument '%s'", argv[i]);
        char *end;
        unsigned long long v = strtoull(argv[i + 1], &end, 10);
        if (*end || !argv[i + 1][0] || argv[i + 1][0] == '-')
            return cli_usage(c, "events", "%s '%s': expected a non-negative number", argv[i], argv[i + 1]);
        if (after) req.after_id = v;
        else req.limit = (uint32_t)(v > 100000 ? 100000 : v);
    }
    Atoll__EventsReply *r;
    int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_EVENTS, &req.base, ATOLL__MSG_TYPE__MSG_EVENTS_REPLY,
                      (ProtobufCMessage **)&r);
    if (rc) return rc;
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_key(&w, "events");
        jsonw_arr(&w);
        for (size_t i = 0; i < r->n_events; i++) msg_json_event(&w, r->events[i]);
        jsonw_arr_end(&w);
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
    } else {
        printf("%-6s %-19s %-22s %-14s %s\n", "ID", "TIME (UTC)", "KIND", "SUBJECT", "MESSAGE");
        for (size_t i = 0; i < r->n_events; i++) {
            const Atoll__Event *e = r->events[i];
            char t[32];
            cli_time(e->time_ms, t, sizeof t);
            printf("%-6llu %-19s %-22s %-14s %s\n", (unsigned long long)e->id, t, e->kind, e->subject, e->message);
        }
    }
    atoll__events_reply__free_unpacked(r, NULL);
    return 0;
}
