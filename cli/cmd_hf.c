/* atoll export and atoll import: a checkpoint as a Hugging Face model
 * directory, and back. Both run locally (no coordinator); the engine does the
 * work (atoll-train export / import, engine/hf.c). */
#include "cli.h"

int cmd_export(cli_ctx *c, int argc, char **argv) { return cli_run_local(c, argc, argv); }
int cmd_import(cli_ctx *c, int argc, char **argv) { return cli_run_local(c, argc, argv); }
