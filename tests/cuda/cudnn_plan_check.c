/* cudnn_plan_check: cuDNN's fused-attention graphs of kernels/cuda/cudnn_sdpa.c,
 * checked without a GPU. For each shape the forward and backward graphs are
 * built and handed to cuDNN's heuristics for an H100 described by
 * data/h100_deviceprop.json; an engine must take each graph and compile its
 * kernel (loading the kernel is the one step that needs a driver: with the
 * CUDA stub library in place of libcuda that step, and only that, fails).
 * The same graphs must be refused for a Turing GPU (no fused attention
 * there), and the live entry points must decline what the graphs do not
 * express (grouped-query attention, dropout) so the own kernels run it.
 *
 *   cudnn_plan_check H100_JSON T4_JSON
 *   cudnn_plan_check --deviceprop      (on a GPU machine: device 0's properties
 *                                       as cuDNN serialises them, to stdout)
 * Without cuDNN 9.8+ it prints "SKIP: ..." and exits 0 (ctest: skipped). */
#include "check.h"
#include "cudnn_sdpa.h"
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cudnn_plan_check: cannot open %s\n", path);
        exit(1);
    }
    static char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--deviceprop")) {
        char err[512];
        char *json = kcudnn_deviceprop_json(0, err, sizeof err);
        if (!json) {
            fprintf(stderr, "cudnn_plan_check: %s\n", err);
            return 1;
        }
        printf("%s\n", json);
        free(json);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: cudnn_plan_check H100_JSON T4_JSON\n");
        return 2;
    }
    long v = kcudnn_version();
    if (v < 90800) {
        printf("SKIP: cuDNN 9.8 or newer is needed for deviceless plans (%s)\n",
               v ? "an older cuDNN is installed" : kcudnn_why());
        return 0;
    }
    printf("cuDNN %ld\n", v);
    char *h100 = slurp(argv[1]), *t4 = slurp(argv[2]);
    char err[1024];
    /* GPT-2 124M and the ~1.5B model at micro-batch 8, a head dim of 128, and a
     * short sequence */
    static const int shapes[][4] = {{8, 1024, 12, 64}, {8, 1024, 25, 64}, {4, 2048, 16, 128}, {2, 64, 4, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *s = shapes[i];
        int rc = kcudnn_plan_check(h100, s[0], s[1], s[2], s[3], err, sizeof err);
        if (rc) fprintf(stderr, "  %s\n", err);
        CHECK(rc == 0, "H100: B=%d T=%d heads=%d dim=%d: forward and backward graphs taken", s[0], s[1], s[2], s[3]);
    }
    /* every engine config the heuristics offer for GPT-2's shape: at least the first of each graph finalizes
     * (what training takes); the list is what bench/gpu/gpu_bench times one by one on a GPU */
    static const char *const kinds[] = {"forward", "backward", "backward, dQ by atomic adds"};
    for (int kind = 0; kind < 3; kind++) {
        char list[1024];
        int ok = kcudnn_plan_configs(h100, 8, 1024, 12, 64, kind, list, sizeof list);
        printf("  %s: %s\n", kinds[kind], list);
        CHECK(ok >= 1 && strstr(list, "config 0 of ") && !strstr(list, "config 0 of 1 (engine -1)"),
              "H100, GPT-2's shape, %s: %d engine configs finalize: %s", kinds[kind], ok, list);
    }
    int rc = kcudnn_plan_check(t4, 8, 1024, 12, 64, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "no engine"), "Tesla T4 (sm_75): refused, no engine (%s)", err);

    /* what the graphs do not express is declined before cuDNN sees it */
    k_dropout drop = {.p = 0.1f};
    CHECK(kcudnn_attention_forward_bf16(NULL, NULL, NULL, NULL, 2, 64, 8, 2, 64, NULL) == 1 &&
              strstr(kcudnn_why(), "grouped-query"),
          "grouped-query attention declined");
    CHECK(kcudnn_attention_backward_bf16(NULL, NULL, NULL, NULL, NULL, NULL, 2, 64, 4, 4, 64, &drop) == 1 &&
              strstr(kcudnn_why(), "dropout"),
          "attention dropout declined");
    CHECK(kcudnn_attention_forward_bf16(NULL, NULL, NULL, NULL, 2, 64, 4, 4, 20, NULL) == 1 &&
              strstr(kcudnn_why(), "head dim"),
          "head dim 20 declined");
    static uint16_t buf[64];
    CHECK(kcudnn_attention_forward_bf16(NULL, buf + 1, (float *)(void *)buf, buf, 2, 64, 4, 4, 64, NULL) == 1 &&
              strstr(kcudnn_why(), "aligned"),
          "a buffer off 16-byte alignment declined (%s)", kcudnn_why());
    free(h100);
    free(t4);
    return check_summary("cudnn_plan_check");
}
