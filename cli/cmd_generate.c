/* atoll generate: text from a checkpoint. Runs locally (no coordinator); the
 * work is the engine's generate_main. */
#include "cli.h"

int generate_main(int argc, char **argv);

int cmd_generate(cli_ctx *c, int argc, char **argv) { return cli_run_local(c, argc, argv, generate_main); }
