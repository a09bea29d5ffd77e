/* Fuzzes job specs the three ways they arrive -- Megatron-style flags (the CLI
 * and atoll-train), a --yaml-cfg file's text, a protobuf JobSpec (the
 * coordinator) -- and the one validator behind them (common/config.c).
 *
 * Input: byte 0 picks the way (mod 3), bytes 1-4 the world size and byte 5 the
 * largest NVLink island; the rest is the flags (NUL-separated), the YAML text or
 * the packed JobSpec. Invariants: nothing crashes or overflows (UBSan); every
 * refusal has a message; a JobSpec's --dependency that parses reads the same
 * after dep_format; an accepted layout is whole (dp >= 1, global batch =
 * micro-batches * micro-batch * dp, every batch of a step schedule whole
 * micro-batches too, layers divisible by pp * virtual stages, its rank order
 * parses), the memory model gives a finite positive figure, and the spec
 * survives the trip through protobuf unchanged. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "depend.h"
#include "msg.h"
#include "plan.h"

static void check_accepted(const atoll_config *c, int world)
{
    int dp = cfg_data_parallel_size(c, world), m = cfg_micro_batches(c, dp);
    if (dp < 1 || m < 1) abort();
    if ((int64_t)m * c->micro_batch_size * dp != cfg_global_batch(c, dp)) abort();
    int bs[CFG_MAX_SCHEDULE], n = cfg_batch_schedule(c, NULL, bs);
    for (int i = 0; i < n; i++)
        if (bs[i] % ((int64_t)c->micro_batch_size * dp) || bs[i] > cfg_batch_max(c, dp)) abort();
    if (c->num_layers % (c->pipeline_model_parallel_size * cfg_virtual_stages(c))) abort();
    cfg_rank_order o;
    char err[256];
    if (cfg_rank_order_parse(c->rank_order, c->tensor_model_parallel_size, dp, c->pipeline_model_parallel_size, &o,
                             err, sizeof err))
        abort();
    plan_memory mem;
    plan_memory_estimate(c, dp, &PLAN_PRECISION_FP32, &mem);
    if (!(mem.total_bytes > 0) || !isfinite(mem.total_bytes)) abort();
    /* protobuf round trip: the coordinator sees what the CLI sent */
    Atoll__JobSpec spec;
    msg_spec_from_cfg(&spec, c, "fuzz");
    size_t len = protobuf_c_message_get_packed_size(&spec.base);
    uint8_t *buf = malloc(len ? len : 1);
    protobuf_c_message_pack(&spec.base, buf);
    Atoll__JobSpec *back = atoll__job_spec__unpack(NULL, len, buf);
    free(buf);
    if (!back) abort();
    atoll_config again;
    if (msg_spec_to_cfg(back, &again, err, sizeof err)) abort();
    atoll__job_spec__free_unpacked(back, NULL);
    Atoll__JobSpec spec2;
    msg_spec_from_cfg(&spec2, &again, "fuzz");
    size_t len2 = protobuf_c_message_get_packed_size(&spec2.base);
    uint8_t *a = malloc(len ? len : 1), *b = malloc(len2 ? len2 : 1);
    protobuf_c_message_pack(&spec.base, a);
    protobuf_c_message_pack(&spec2.base, b);
    if (len != len2 || memcmp(a, b, len)) abort();
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 6 || size > 65536) return 0;
    int way = data[0] % 3;
    int world = (int)((uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 8 | data[4]);
    int island = data[5];
    const uint8_t *body = data + 6;
    size_t n = size - 6;
    atoll_config c;
    cfg_defaults(&c);
    char err[1024] = "";
    int rc;
    if (way == 0) {
        /* argv from NUL-separated tokens; --yaml-cfg would read files, so it is not offered */
        char *text = malloc(n + 1);
        memcpy(text, body, n);
        text[n] = 0;
        char *argv[256];
        int argc = 0;
        for (size_t i = 0; i <= n && argc < 256;) {
            argv[argc++] = text + i;
            i += strlen(text + i) + 1;
        }
        int yaml = 0;
        for (int i = 0; i < argc; i++) yaml |= strstr(argv[i], "yaml") != NULL;
        rc = yaml ? 0 : cfg_parse_args(&c, argc, argv, 0, NULL, NULL, err, sizeof err);
        free(text);
        if (yaml) return 0;
    } else if (way == 1) {
        rc = cfg_parse_yaml(&c, (const char *)body, n, "fuzz.yaml", err, sizeof err);
    } else {
        Atoll__JobSpec *spec = atoll__job_spec__unpack(NULL, n, body);
        if (!spec) return 0;
        rc = msg_spec_to_cfg(spec, &c, err, sizeof err);
        dep_list d, again;
        char text[DEP_MAX * 24], derr[256] = "";
        if (dep_parse(spec->dependency, &d, derr, sizeof derr)) {
            if (!derr[0]) abort();
        } else {
            dep_format(&d, text, sizeof text);
            if (dep_parse(text, &again, derr, sizeof derr) || again.n != d.n) abort();
        }
        atoll__job_spec__free_unpacked(spec, NULL);
    }
    if (rc) {
        if (!err[0]) abort(); /* every refusal says why */
        return 0;
    }
    err[0] = 0;
    if (cfg_validate_layout(&c, world, island, err, sizeof err)) {
        if (!err[0]) abort();
        return 0;
    }
    check_accepted(&c, world);
    return 0;
}
