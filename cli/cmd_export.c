/* atoll export: a checkpoint as a Hugging Face model directory. Runs locally
 * (no coordinator); the work is the engine's export_main. */
#include "cli.h"

int export_main(int argc, char **argv);

int cmd_export(cli_ctx *c, int argc, char **argv) { return cli_run_local(c, argc, argv, export_main); }
