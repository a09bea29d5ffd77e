/* atoll layout JOB: where each rank runs (node, GPU) and every process group of the
 * job's current placement, as the coordinator stored it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonw.h"
#include "msg_json.h"

/* "0,1 2,3 ..." for the groups of one kind, so a reader sees the whole partition. */
static void print_groups(const Atoll__JobLayout *l, const char *kind)
{
    int count = 0;
    for (size_t i = 0; i < l->n_groups; i++) count += !strcmp(l->groups[i]->kind, kind);
    if (!count) return;
    printf("%-9s %d group%s:", kind, count, count == 1 ? "" : "s");
    for (size_t i = 0; i < l->n_groups; i++) {
        const Atoll__ProcessGroup *g = l->groups[i];
        if (strcmp(g->kind, kind)) continue;
        printf(" [");
        for (size_t k = 0; k < g->n_ranks; k++) printf("%s%d", k ? "," : "", g->ranks[k]);
        printf("]");
    }
    printf("\n");
}

int cmd_layout(cli_ctx *c, int argc, char **argv)
{
    uint64_t id;
    if (argc != 2) return cli_usage(c, "layout", "expected one job id");
    if (cli_job_id(argv[1], &id)) return cli_usage(c, "layout", "'%s' is not a job id (e.g. 7 or job-7)", argv[1]);
    Atoll__LayoutRequest req = ATOLL__LAYOUT_REQUEST__INIT;
    req.job = id;
    Atoll__LayoutReply *r;
    int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_LAYOUT, &req.base, ATOLL__MSG_TYPE__MSG_LAYOUT_REPLY,
                      (ProtobufCMessage **)&r);
    if (rc) return rc;
    const Atoll__JobLayout *l = r->layout;
    if (!l) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        fprintf(stderr, "%s: job %llu has no layout\n", c->prog, (unsigned long long)id);
        return CLI_REFUSED;
    }
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        msg_json_layout(&w, l);
        jsonw_print_free(jsonw_take(&w));
    } else {
        printf("job %llu epoch %u: tp %d x pp %d x dp %d, vpp %d, %zu ranks%s%s\n", (unsigned long long)l->job,
               l->epoch, l->tp, l->pp, l->dp, l->vpp, l->n_ranks, l->checkpoint && *l->checkpoint ? ", resumes " : "",
               l->checkpoint && *l->checkpoint ? l->checkpoint : "");
        printf("%-6s %-24s %-4s %-6s\n", "RANK", "NODE", "GPU", "LOCAL");
        for (size_t i = 0; i < l->n_ranks; i++) {
            const Atoll__RankPlacement *p = l->ranks[i];
            char gpu[16];
            if (p->gpu >= 0) snprintf(gpu, sizeof gpu, "%d", p->gpu);
            else snprintf(gpu, sizeof gpu, "cpu");
            printf("%-6d %-24s %-4s %-6d\n", p->rank, p->node, gpu, p->local_rank);
        }
        const char *kinds[] = { "tp", "dp", "pp", "embedding" };
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) print_groups(l, kinds[k]);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return CLI_OK;
}
