/* engine_prepare_tool: `atoll data prepare` without the CLI, for the engine's
 * shell tests (the same data_prepare_main the CLI calls). */
int data_prepare_main(int argc, char **argv);

int main(int argc, char **argv) { return data_prepare_main(argc, argv); }
