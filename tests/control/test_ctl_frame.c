/* Framing (header, limits, streaming decoder) and the message conversions. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "frame.h"
#include "jsonw.h"
#include "msg.h"
#include "topo.h"

static void decoder_cases(void)
{
    uint8_t buf[3 * 64];
    size_t off = 0;
    const char *payloads[3] = { "hello", "", "a longer payload of bytes" };
    for (int i = 0; i < 3; i++) {
        uint32_t n = (uint32_t)strlen(payloads[i]);
        frame_header_encode(buf + off, (uint16_t)(100 + i), n);
        memcpy(buf + off + FRAME_HEADER_LEN, payloads[i], n);
        off += FRAME_HEADER_LEN + n;
    }
    /* Byte by byte: frames appear exactly when their last byte arrives. */
    frame_decoder d;
    frame_decoder_init(&d, 1024);
    int got = 0;
    for (size_t i = 0; i < off; i++) {
        CHECK(frame_decoder_feed(&d, buf + i, 1) == 0, "feed");
        frame_header h;
        const uint8_t *p;
        int r;
        while ((r = frame_decoder_next(&d, &h, &p)) == 1) {
            CHECK(h.type == 100 + got, "type %u, want %d", h.type, 100 + got);
            CHECK(h.len == strlen(payloads[got]) && !memcmp(p, payloads[got], h.len), "payload %d", got);
            got++;
        }
        CHECK(r == 0, "decoder error mid-stream: %s", d.err);
    }
    CHECK(got == 3, "decoded %d frames, want 3", got);
    frame_decoder_free(&d);

    /* All at once. */
    frame_decoder_init(&d, 1024);
    frame_decoder_feed(&d, buf, off);
    frame_header h;
    const uint8_t *p;
    got = 0;
    while (frame_decoder_next(&d, &h, &p) == 1) got++;
    CHECK(got == 3, "decoded %d frames in one feed", got);
    frame_decoder_free(&d);

    /* Garbage: refused at the header, with a message naming the magic. */
    frame_decoder_init(&d, 1024);
    frame_decoder_feed(&d, "GET / HTTP/1.1\r\n", 16);
    CHECK(frame_decoder_next(&d, &h, &p) == -1, "garbage accepted");
    CHECK(strstr(d.err, "magic") != NULL, "error does not name the magic: %s", d.err);
    CHECK(frame_decoder_feed(&d, "x", 1) == -1, "a failed decoder must stay failed");
    frame_decoder_free(&d);

    /* Oversized: refused as soon as the header arrives, before any payload. */
    uint8_t hdr[FRAME_HEADER_LEN];
    frame_decoder_init(&d, 1024);
    frame_header_encode(hdr, 20, 1025);
    frame_decoder_feed(&d, hdr, sizeof hdr);
    CHECK(frame_decoder_next(&d, &h, &p) == -1, "oversized frame accepted");
    CHECK(strstr(d.err, "1025") && strstr(d.err, "1024"), "error should give size and limit: %s", d.err);
    frame_decoder_free(&d);
    /* Exactly at the limit is fine. */
    frame_decoder_init(&d, 16);
    uint8_t exact[FRAME_HEADER_LEN + 16] = { 0 };
    frame_header_encode(exact, 7, 16);
    frame_decoder_feed(&d, exact, sizeof exact);
    CHECK(frame_decoder_next(&d, &h, &p) == 1 && h.len == 16, "frame at the limit refused");
    frame_decoder_free(&d);
    /* The default limit is 16 MiB. */
    char err[160];
    frame_header_encode(hdr, 20, FRAME_MAX_DEFAULT + 1);
    CHECK(frame_header_decode(hdr, FRAME_MAX_DEFAULT, &h, err, sizeof err) == -1, "16 MiB + 1 accepted");
    frame_header_encode(hdr, 20, FRAME_MAX_DEFAULT);
    CHECK(frame_header_decode(hdr, FRAME_MAX_DEFAULT, &h, err, sizeof err) == 0, "16 MiB refused");
}

static void message_cases(void)
{
    /* A frame built by msg_frame decodes with the descriptor its type names. */
    Atoll__KvSet kv = ATOLL__KV_SET__INIT;
    kv.job = 42;
    kv.key = "nccl-id";
    kv.value.data = (uint8_t *)"\x01\x02\x03";
    kv.value.len = 3;
    size_t len;
    uint8_t *f = msg_frame(ATOLL__MSG_TYPE__MSG_KV_SET, &kv.base, 0, &len);
    frame_header h;
    char err[160];
    CHECK(frame_header_decode(f, FRAME_MAX_DEFAULT, &h, err, sizeof err) == 0, "%s", err);
    CHECK(h.type == ATOLL__MSG_TYPE__MSG_KV_SET && h.len + FRAME_HEADER_LEN == len, "header of msg_frame");
    ProtobufCMessage *m = protobuf_c_message_unpack(msg_descriptor(h.type), NULL, h.len, f + FRAME_HEADER_LEN);
    CHECK(m && ((Atoll__KvSet *)m)->job == 42 && !strcmp(((Atoll__KvSet *)m)->key, "nccl-id"), "kv roundtrip");
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    free(f);
    CHECK(msg_descriptor(999) == NULL, "unknown type has a descriptor");

    /* topo_node -> Node -> topo_node keeps everything. */
    topo_node t, back;
    CHECK(topo_simulate(&t, "dgx-h100", "node-a", NULL, err, sizeof err) == 0, "%s", err);
    msg_arena a = { 0 };
    Atoll__Node n;
    msg_node_from_topo(&n, &t, 0, &a);
    size_t plen = protobuf_c_message_get_packed_size(&n.base);
    uint8_t *pb = malloc(plen);
    protobuf_c_message_pack(&n.base, pb);
    msg_arena_free(&a);
    Atoll__Node *u = atoll__node__unpack(NULL, plen, pb);
    CHECK(u != NULL, "node unpack");
    CHECK(u && msg_node_to_topo(u, &back, err, sizeof err) == 0, "%s", err);
    CHECK(back.ngpus == 8 && back.nnics == 8, "counts %d %d", back.ngpus, back.nnics);
    CHECK(!memcmp(&back.gpus, &t.gpus, sizeof t.gpus) && !memcmp(&back.nics, &t.nics, sizeof t.nics),
          "GPU/NIC fields changed in the roundtrip");
    /* Oversized strings are refused with the field named. */
    if (u) {
        static char longname[200];
        memset(longname, 'x', sizeof longname - 1);
        char *saved = u->gpus[0]->uuid;
        u->gpus[0]->uuid = longname;
        CHECK(msg_node_to_topo(u, &back, err, sizeof err) == -1 && strstr(err, "uuid"), "long uuid: %s", err);
        u->gpus[0]->uuid = saved;
        atoll__node__free_unpacked(u, NULL);
    }
    free(pb);

    /* atoll_config -> JobSpec -> atoll_config is the identity on every key. */
    atoll_config c, c2;
    cfg_defaults(&c);
    c.num_layers = 24; c.hidden_size = 1024; c.num_attention_heads = 16; c.seq_length = 2048;
    c.tensor_model_parallel_size = 2; c.pipeline_model_parallel_size = 4;
    c.num_layers_per_virtual_pipeline_stage = 3; c.sequence_parallel = 1; c.use_distributed_optimizer = 1;
    c.recompute_granularity = RECOMPUTE_SELECTIVE; c.global_batch_size = 512; c.num_gpus = 64;
    c.lr = 3e-4; c.weight_decay = 0; c.clip_grad = 0; c.seed = 7; c.lr_decay_style = LR_DECAY_LINEAR;
    snprintf(c.data_path, sizeof c.data_path, "/data/web_text_document");
    /* the LLaMA family, dropout and the tokenizer travel too */
    snprintf(c.normalization, sizeof c.normalization, "RMSNorm");
    snprintf(c.position_embedding_type, sizeof c.position_embedding_type, "rope");
    c.swiglu = 1; c.rotary_base = 500000; c.disable_bias_linear = 1; c.group_query_attention = 1;
    c.num_query_groups = 4; c.hidden_dropout = 0.1; c.attention_dropout = 0.05;
    snprintf(c.tokenizer_type, sizeof c.tokenizer_type, "GPT2BPETokenizer");
    snprintf(c.vocab_file, sizeof c.vocab_file, "/data/gpt2-vocab.json");
    snprintf(c.merge_file, sizeof c.merge_file, "/data/gpt2-merges.txt");
    snprintf(c.attention_backend, sizeof c.attention_backend, "fused");
    /* how a foreign --load is taken, the warm-up start and the time limit */
    c.lr_warmup_init = 1e-6; c.finetune = 1; c.no_load_optim = 1; c.no_load_rng = 1;
    c.exit_on_missing_checkpoint = 1; c.exit_duration_in_mins = 230; c.init_method_std = 0.006;
    c.exit_interval = 500; c.eod_mask_loss = 1; c.reset_position_ids = 1; c.reset_attention_mask = 1;
    c.lr_decay_style = LR_DECAY_WSD; c.lr_wsd_decay_style = WSD_COSINE; c.lr_wsd_decay_iters = 100;
    c.ckpt_step = 1200;
    snprintf(c.tensorboard_dir, sizeof c.tensorboard_dir, "/runs/tb");
    c.tensorboard_log_interval = 10; c.log_validation_ppl_to_tensorboard = 1; c.log_timers_to_tensorboard = 1;
    snprintf(c.train_data_path, sizeof c.train_data_path, "0.7 /data/web 0.3 /data/books");
    snprintf(c.valid_data_path, sizeof c.valid_data_path, "/data/valid");
    snprintf(c.test_data_path, sizeof c.test_data_path, "/data/test");
    c.add_qkv_bias = 1;
    snprintf(c.rampup_batch_size, sizeof c.rampup_batch_size, "16 16 5859375");
    snprintf(c.step_batch_size_schedule, sizeof c.step_batch_size_schedule, "0:16 2400000000:320 12000000000:1536");
    c.padded_vocab_size = 152064;
    c.kv_channels = 128;
    c.log_batch_size_to_tensorboard = c.log_world_size_to_tensorboard = c.log_memory_to_tensorboard = 1;
    c.qk_layernorm = c.decrease_batch_size_if_needed = 1;
    c.num_virtual_stages_per_pipeline_rank = 2;
    c.microbatch_group_size_per_virtual_pipeline_stage = 6;
    c.log_params_norm = c.no_log_learning_rate_to_tensorboard = c.log_num_zeros_in_grad = 1;
    c.rotary_seq_len_interpolation_factor = 4;
    snprintf(c.tokenizer_model, sizeof c.tokenizer_model, "/models/llama3");
    snprintf(c.recompute_method, sizeof c.recompute_method, "block");
    c.recompute_num_layers = 2;
    c.squared_relu = c.apply_layernorm_1p = 1;
    c.rotary_percent = 0.5;
    c.norm_epsilon = 1e-6;
    c.embedding_init_method_std = 0.05;
    c.decoupled_lr = 3e-4;
    c.decoupled_min_lr = 0.0; /* given, and 0 */
    c.use_rope_scaling = 1;
    snprintf(c.data_args_path, sizeof c.data_args_path, "/data/blend.txt");
    snprintf(c.per_split_data_args_path, sizeof c.per_split_data_args_path, "/data/splits.json");
    c.rope_scaling_factor = 32.0;
    c.tune_gemms = c.enable_cuda_graph = c.nondeterministic_attention = c.overlap_wgrad = 1; /* the GPU path's switches */
    c.weight_decay_incr_style = WD_INCR_LINEAR;
    c.start_weight_decay = 0.0; /* given, and 0: travels as given, not as absent */
    c.end_weight_decay = 0.1;
    Atoll__JobSpec s;
    msg_spec_from_cfg(&s, &c, "gpt-1b");
    /* the decay schedule's ends reach atoll-train's argv when given, and only then */
    for (int given = 1; given >= 0; given--) {
        atoll_config d;
        cfg_defaults(&d);
        if (given) d.weight_decay_incr_style = WD_INCR_COSINE, d.start_weight_decay = 0.0, d.end_weight_decay = 0.2;
        Atoll__JobSpec ds;
        msg_spec_from_cfg(&ds, &d, "wd");
        int argc2 = 0, named = 0;
        char **av = msg_spec_to_argv(&ds, "atoll-train", &argc2);
        for (int i = 0; av && i + 1 < argc2; i++)
            named += (!strcmp(av[i], "--start-weight-decay") && !strcmp(av[i + 1], "0")) +
                     (!strcmp(av[i], "--end-weight-decay") && !strcmp(av[i + 1], "0.20000000000000001"));
        CHECK(av && named == 2 * given, "weight-decay ends in argv: %d (given %d)", named, given);
        msg_argv_free(av);
    }
    { /* --decoupled-lr without its floor: the ranks train down to --min-lr, as the submitter's config does */
        atoll_config d, d2;
        cfg_defaults(&d);
        d.decoupled_lr = 1e-3, d.min_lr = 1e-5;
        Atoll__JobSpec ds;
        msg_spec_from_cfg(&ds, &d, "dec");
        err[0] = 0;
        CHECK(msg_spec_to_cfg(&ds, &d2, err, sizeof err) == 0 && cfg_decoupled_min_lr(&d2) == 1e-5,
              "decoupled floor after the JobSpec: %g (%s)", cfg_decoupled_min_lr(&d2), err);
    }
    plen = protobuf_c_message_get_packed_size(&s.base);
    pb = malloc(plen);
    protobuf_c_message_pack(&s.base, pb);
    Atoll__JobSpec *su = atoll__job_spec__unpack(NULL, plen, pb);
    CHECK(su && !strcmp(su->name, "gpt-1b"), "spec unpack");
    CHECK(su && msg_spec_to_cfg(su, &c2, err, sizeof err) == 0, "%s", err);
    CHECK(!memcmp(&c, &c2, sizeof c), "config changed in the JobSpec roundtrip");
    /* Values are range-checked like flags. */
    if (su) {
        su->micro_batch_size = -1;
        CHECK(msg_spec_to_cfg(su, &c2, err, sizeof err) == -1 && strstr(err, "micro-batch-size"), "negative: %s", err);
        atoll__job_spec__free_unpacked(su, NULL);
    }
    free(pb);
}

static void json_cases(void)
{
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_kstr(&w, "s", "a\"b\\c\n\x01");
    jsonw_key(&w, "v");
    jsonw_arr(&w);
    jsonw_int(&w, 1);
    jsonw_num(&w, 0.5);
    jsonw_null(&w);
    jsonw_num(&w, 1.0 / 0.0);
    jsonw_arr_end(&w);
    jsonw_kbool(&w, "b", 1);
    jsonw_obj_end(&w);
    char *s = jsonw_take(&w);
    const char *want = "{\"s\":\"a\\\"b\\\\c\\n\\u0001\",\"v\":[1,0.5,null,null],\"b\":true}";
    CHECK(!strcmp(s, want), "json: %s\n want %s", s, want);
    free(s);
}

int main(int argc, char **argv)
{
    (void)argc;
    decoder_cases();
    message_cases();
    json_cases();
    return check_summary(argv[0]);
}
