/* atoll generate: text from a checkpoint, locally (no coordinator). The engine
 * does it (atoll-train generate, engine/generate.c). */
#include "cli.h"

int cmd_generate(cli_ctx *c, int argc, char **argv) { return cli_run_local(c, argc, argv); }
