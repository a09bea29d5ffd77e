/* atoll export and atoll import: a checkpoint as a Hugging Face model
 * directory, and back. Both run locally (no coordinator); the work is the
 * engine's export_main and import_main (engine/hf.c). */
#include "cli.h"

int export_main(int argc, char **argv);
int import_main(int argc, char **argv);

int cmd_export(cli_ctx *c, int argc, char **argv) { return cli_run_local(c, argc, argv, export_main); }
int cmd_import(cli_ctx *c, int argc, char **argv) { return cli_run_local(c, argc, argv, import_main); }
