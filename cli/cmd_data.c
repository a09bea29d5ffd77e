/* atoll data prepare: text or JSON lines into Megatron's indexed dataset (byte-level or GPT-2 BPE).
 * Runs locally (no coordinator); the engine does the work (atoll-train data prepare,
 * engine/data_prepare.c). */
#include <string.h>

#include "cli.h"

int cmd_data(cli_ctx *c, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "prepare")) {
        if (cli_wants_help(c, argc, argv)) return CLI_OK;
        return cli_usage(c, "data", "unknown data command '%s'", argc < 2 ? "" : argv[1]);
    }
    return cli_run_local(c, argc, argv);
}
