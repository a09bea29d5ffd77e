#include "msg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

uint8_t *msg_frame(uint16_t type, const ProtobufCMessage *m, size_t trailer, size_t *len)
{
    size_t n = m ? protobuf_c_message_get_packed_size(m) : 0;
    uint8_t *buf = malloc(FRAME_HEADER_LEN + n + trailer);
    if (!buf) return NULL;
    frame_header_encode(buf, type, (uint32_t)n);
    if (m) protobuf_c_message_pack(m, buf + FRAME_HEADER_LEN);
    *len = FRAME_HEADER_LEN + n;
    return buf;
}

static const struct {
    uint16_t type;
    const char *name;
    const ProtobufCMessageDescriptor *desc;
} TYPES[] = {
    { ATOLL__MSG_TYPE__MSG_CHALLENGE, "Challenge", &atoll__challenge__descriptor },
    { ATOLL__MSG_TYPE__MSG_AUTH, "Auth", &atoll__auth__descriptor },
    { ATOLL__MSG_TYPE__MSG_AUTH_RESULT, "AuthResult", &atoll__auth_result__descriptor },
    { ATOLL__MSG_TYPE__MSG_ERROR, "Error", &atoll__error__descriptor },
    { ATOLL__MSG_TYPE__MSG_REGISTER, "Register", &atoll__register__descriptor },
    { ATOLL__MSG_TYPE__MSG_REGISTER_REPLY, "RegisterReply", &atoll__register_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_HEARTBEAT, "Heartbeat", &atoll__heartbeat__descriptor },
    { ATOLL__MSG_TYPE__MSG_HEARTBEAT_ACK, "HeartbeatAck", &atoll__heartbeat_ack__descriptor },
    { ATOLL__MSG_TYPE__MSG_LAUNCH, "Launch", &atoll__launch__descriptor },
    { ATOLL__MSG_TYPE__MSG_LAUNCH_ACK, "LaunchAck", &atoll__launch_ack__descriptor },
    { ATOLL__MSG_TYPE__MSG_STOP, "Stop", &atoll__stop__descriptor },
    { ATOLL__MSG_TYPE__MSG_NODES, "NodesRequest", &atoll__nodes_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_NODES_REPLY, "NodesReply", &atoll__nodes_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_DRAIN, "DrainRequest", &atoll__drain_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_SUBMIT, "SubmitRequest", &atoll__submit_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY, "SubmitReply", &atoll__submit_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_JOBS, "JobsRequest", &atoll__jobs_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_JOBS_REPLY, "JobsReply", &atoll__jobs_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_CANCEL, "CancelRequest", &atoll__cancel_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_LAYOUT, "LayoutRequest", &atoll__layout_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_LAYOUT_REPLY, "LayoutReply", &atoll__layout_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_EVENTS, "EventsRequest", &atoll__events_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_EVENTS_REPLY, "EventsReply", &atoll__events_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_KV_SET, "KvSet", &atoll__kv_set__descriptor },
    { ATOLL__MSG_TYPE__MSG_KV_GET, "KvGet", &atoll__kv_get__descriptor },
    { ATOLL__MSG_TYPE__MSG_KV_REPLY, "KvReply", &atoll__kv_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_KV_ADD, "KvAdd", &atoll__kv_add__descriptor },
    { ATOLL__MSG_TYPE__MSG_LOG_READ, "LogRead", &atoll__log_read__descriptor },
    { ATOLL__MSG_TYPE__MSG_LOG_DATA, "LogData", &atoll__log_data__descriptor },
    { ATOLL__MSG_TYPE__MSG_REPORT_NOW, "ReportNow", &atoll__report_now__descriptor },
    { ATOLL__MSG_TYPE__MSG_LOGS, "LogsRequest", &atoll__logs_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_LOGS_REPLY, "LogsReply", &atoll__logs_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_METRICS, "MetricsRequest", &atoll__metrics_request__descriptor },
    { ATOLL__MSG_TYPE__MSG_METRICS_REPLY, "MetricsReply", &atoll__metrics_reply__descriptor },
    { ATOLL__MSG_TYPE__MSG_RANK_METRICS, "RankMetrics", &atoll__rank_metrics__descriptor },
    { ATOLL__MSG_TYPE__MSG_RANK_WATCH, "RankWatch", &atoll__rank_watch__descriptor },
};

const ProtobufCMessageDescriptor *msg_descriptor(uint16_t type)
{
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (TYPES[i].type == type) return TYPES[i].desc;
    return NULL;
}

const char *msg_type_name(uint16_t type)
{
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (TYPES[i].type == type) return TYPES[i].name;
    return "unknown";
}

struct msg_chunk {
    struct msg_chunk *next;
    max_align_t data[];
};

void *msg_alloc(msg_arena *a, size_t n)
{
    struct msg_chunk *c = calloc(1, sizeof *c + n);
    if (!c) abort();
    c->next = a->head;
    a->head = c;
    return c->data;
}

void msg_arena_free(msg_arena *a)
{
    while (a->head) {
        struct msg_chunk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

void msg_node_from_topo(Atoll__Node *out, const topo_node *n, int cpu_ranks, msg_arena *a)
{
    atoll__node__init(out);
    out->name = (char *)n->name;
    out->leaf = (char *)n->leaf;
    out->cpu_ranks = cpu_ranks;
    out->n_gpus = (size_t)n->ngpus;
    out->gpus = msg_alloc(a, sizeof(Atoll__Gpu *) * (size_t)(n->ngpus + 1));
    Atoll__Gpu *gpus = msg_alloc(a, sizeof(Atoll__Gpu) * (size_t)(n->ngpus + 1));
    for (int i = 0; i < n->ngpus; i++) {
        const topo_gpu *g = &n->gpus[i];
        atoll__gpu__init(&gpus[i]);
        gpus[i].index = g->index;
        gpus[i].uuid = (char *)g->uuid;
        gpus[i].name = (char *)g->name;
        gpus[i].memory_bytes = g->memory_bytes;
        gpus[i].pci_bus_id = (char *)g->pci_bus_id;
        gpus[i].island = (char *)g->island;
        gpus[i].rail = g->rail;
        out->gpus[i] = &gpus[i];
    }
    out->n_nics = (size_t)n->nnics;
    out->nics = msg_alloc(a, sizeof(Atoll__Nic *) * (size_t)(n->nnics + 1));
    Atoll__Nic *nics = msg_alloc(a, sizeof(Atoll__Nic) * (size_t)(n->nnics + 1));
    for (int i = 0; i < n->nnics; i++) {
        const topo_nic *x = &n->nics[i];
        atoll__nic__init(&nics[i]);
        nics[i].name = (char *)x->name;
        nics[i].gbps = x->gbps;
        nics[i].link_layer = (char *)x->link_layer;
        nics[i].pci_bus_id = (char *)x->pci_bus_id;
        nics[i].rail = x->rail;
        out->nics[i] = &nics[i];
    }
}

static int copy_str(char *dst, size_t cap, const char *src, const char *what, char *err, size_t errlen)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) {
        snprintf(err, errlen, "%s is %zu bytes; at most %zu are accepted", what, n, cap - 1);
        return -1;
    }
    memcpy(dst, src ? src : "", n + 1);
    return 0;
}

int msg_node_to_topo(const Atoll__Node *in, topo_node *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (in->n_gpus > TOPO_MAX_GPUS || in->n_nics > TOPO_MAX_NICS) {
        snprintf(err, errlen, "node has %zu GPUs and %zu NICs; at most %d and %d are accepted",
                 in->n_gpus, in->n_nics, TOPO_MAX_GPUS, TOPO_MAX_NICS);
        return -1;
    }
    if (copy_str(out->name, sizeof out->name, in->name, "node name", err, errlen) ||
        copy_str(out->leaf, sizeof out->leaf, in->leaf, "leaf switch name", err, errlen))
        return -1;
    out->state = (topo_node_state)in->state;
    out->ngpus = (int)in->n_gpus;
    out->nnics = (int)in->n_nics;
    for (size_t i = 0; i < in->n_gpus; i++) {
        const Atoll__Gpu *g = in->gpus[i];
        topo_gpu *o = &out->gpus[i];
        o->index = g->index;
        o->memory_bytes = g->memory_bytes;
        o->rail = g->rail;
        if (copy_str(o->uuid, sizeof o->uuid, g->uuid, "GPU uuid", err, errlen) ||
            copy_str(o->name, sizeof o->name, g->name, "GPU name", err, errlen) ||
            copy_str(o->pci_bus_id, sizeof o->pci_bus_id, g->pci_bus_id, "GPU PCI bus id", err, errlen) ||
            copy_str(o->island, sizeof o->island, g->island, "GPU island", err, errlen))
            return -1;
    }
    for (size_t i = 0; i < in->n_nics; i++) {
        const Atoll__Nic *x = in->nics[i];
        topo_nic *o = &out->nics[i];
        o->gbps = x->gbps;
        o->rail = x->rail;
        if (copy_str(o->name, sizeof o->name, x->name, "NIC name", err, errlen) ||
            copy_str(o->link_layer, sizeof o->link_layer, x->link_layer, "NIC link layer", err, errlen) ||
            copy_str(o->pci_bus_id, sizeof o->pci_bus_id, x->pci_bus_id, "NIC PCI bus id", err, errlen))
            return -1;
    }
    return 0;
}

void msg_spec_from_cfg(Atoll__JobSpec *o, const atoll_config *c, const char *name)
{
    atoll__job_spec__init(o);
    o->name = (char *)(name ? name : "");
    o->num_gpus = c->num_gpus;
    o->num_layers = c->num_layers;
    o->hidden_size = c->hidden_size;
    o->num_attention_heads = c->num_attention_heads;
    o->ffn_hidden_size = c->ffn_hidden_size;
    o->seq_length = c->seq_length;
    o->max_position_embeddings = c->max_position_embeddings;
    o->vocab_size = c->vocab_size;
    o->untie_embeddings_and_output_weights = c->untie_embeddings_and_output_weights;
    o->tensor_model_parallel_size = c->tensor_model_parallel_size;
    o->pipeline_model_parallel_size = c->pipeline_model_parallel_size;
    o->num_layers_per_virtual_pipeline_stage = c->num_layers_per_virtual_pipeline_stage;
    o->decoder_first_pipeline_num_layers = c->decoder_first_pipeline_num_layers;
    o->decoder_last_pipeline_num_layers = c->decoder_last_pipeline_num_layers;
    o->sequence_parallel = c->sequence_parallel;
    o->use_distributed_optimizer = c->use_distributed_optimizer;
    o->recompute_granularity = (char *)(c->recompute_granularity == RECOMPUTE_NONE
                                            ? "" : cfg_recompute_name(c->recompute_granularity));
    o->micro_batch_size = c->micro_batch_size;
    o->global_batch_size = c->global_batch_size;
    o->rank_order = (char *)c->rank_order;
    o->train_iters = c->train_iters;
    o->lr_warmup_iters = c->lr_warmup_iters;
    o->lr_decay_iters = c->lr_decay_iters;
    o->lr = c->lr;
    o->min_lr = c->min_lr;
    o->weight_decay = c->weight_decay;
    o->decoupled_lr = c->decoupled_lr;
    o->decoupled_min_lr = cfg_decoupled_min_lr(c); /* the floor the job trains to, given or not */
    o->adam_beta1 = c->adam_beta1;
    o->adam_beta2 = c->adam_beta2;
    o->adam_eps = c->adam_eps;
    o->clip_grad = c->clip_grad;
    o->lr_decay_style = (char *)cfg_lr_decay_name(c->lr_decay_style);
    o->lr_wsd_decay_style = (char *)cfg_wsd_decay_name(c->lr_wsd_decay_style);
    o->lr_wsd_decay_iters = c->lr_wsd_decay_iters;
    o->weight_decay_incr_style = (char *)cfg_wd_incr_name(c->weight_decay_incr_style);
    o->start_weight_decay = isnan(c->start_weight_decay) ? 0.0 : c->start_weight_decay;
    o->end_weight_decay = isnan(c->end_weight_decay) ? 0.0 : c->end_weight_decay;
    o->ckpt_step = c->ckpt_step;
    o->seed = c->seed;
    o->data_path = (char *)c->data_path;
    o->split = (char *)c->split;
    o->save = (char *)c->save;
    o->load = (char *)c->load;
    o->save_interval = c->save_interval;
    o->log_interval = c->log_interval;
    o->eval_interval = c->eval_interval;
    o->eval_iters = c->eval_iters;
    o->bf16 = c->bf16;
    o->async_save = c->async_save;
    o->save_mtbf = c->save_mtbf;
    o->save_keep = c->save_keep;
    o->deterministic_dp = c->deterministic_dp;
    o->lr_warmup_init = c->lr_warmup_init;
    o->init_method_std = c->init_method_std;
    o->embedding_init_method_std = c->embedding_init_method_std;
    o->exit_interval = c->exit_interval;
    o->eod_mask_loss = c->eod_mask_loss;
    o->reset_position_ids = c->reset_position_ids;
    o->reset_attention_mask = c->reset_attention_mask;
    o->tensorboard_dir = (char *)c->tensorboard_dir;
    o->tensorboard_log_interval = c->tensorboard_log_interval;
    o->log_validation_ppl_to_tensorboard = c->log_validation_ppl_to_tensorboard;
    o->log_timers_to_tensorboard = c->log_timers_to_tensorboard;
    o->train_data_path = (char *)c->train_data_path;
    o->valid_data_path = (char *)c->valid_data_path;
    o->test_data_path = (char *)c->test_data_path;
    o->data_args_path = (char *)c->data_args_path;
    o->per_split_data_args_path = (char *)c->per_split_data_args_path;
    o->add_qkv_bias = c->add_qkv_bias;
    o->rampup_batch_size = (char *)c->rampup_batch_size;
    o->step_batch_size_schedule = (char *)c->step_batch_size_schedule;
    o->log_batch_size_to_tensorboard = c->log_batch_size_to_tensorboard;
    o->log_world_size_to_tensorboard = c->log_world_size_to_tensorboard;
    o->log_memory_to_tensorboard = c->log_memory_to_tensorboard;
    o->qk_layernorm = c->qk_layernorm;
    o->decrease_batch_size_if_needed = c->decrease_batch_size_if_needed;
    o->num_virtual_stages_per_pipeline_rank = c->num_virtual_stages_per_pipeline_rank;
    o->microbatch_group_size_per_virtual_pipeline_stage = c->microbatch_group_size_per_virtual_pipeline_stage;
    o->log_params_norm = c->log_params_norm;
    o->log_num_zeros_in_grad = c->log_num_zeros_in_grad;
    o->no_log_learning_rate_to_tensorboard = c->no_log_learning_rate_to_tensorboard;
    o->finetune = c->finetune;
    o->no_load_optim = c->no_load_optim;
    o->no_load_rng = c->no_load_rng;
    o->exit_on_missing_checkpoint = c->exit_on_missing_checkpoint;
    o->exit_duration_in_mins = c->exit_duration_in_mins;
    o->max_restarts = -1; /* the coordinator's default unless the caller says */
    o->normalization = (char *)c->normalization;
    o->attention_backend = (char *)c->attention_backend;
    o->tune_gemms = c->tune_gemms;
    o->enable_cuda_graph = c->enable_cuda_graph;
    o->nondeterministic_attention = c->nondeterministic_attention;
    o->overlap_wgrad = c->overlap_wgrad;
    o->swiglu = c->swiglu;
    o->squared_relu = c->squared_relu;
    o->apply_layernorm_1p = c->apply_layernorm_1p;
    o->position_embedding_type = (char *)c->position_embedding_type;
    o->rotary_base = c->rotary_base;
    o->rotary_percent = c->rotary_percent;
    o->use_rope_scaling = c->use_rope_scaling;
    o->rope_scaling_factor = c->rope_scaling_factor;
    o->rotary_seq_len_interpolation_factor = c->rotary_seq_len_interpolation_factor;
    o->norm_epsilon = c->norm_epsilon;
    o->disable_bias_linear = c->disable_bias_linear;
    o->group_query_attention = c->group_query_attention;
    o->num_query_groups = c->num_query_groups;
    o->hidden_dropout = c->hidden_dropout;
    o->attention_dropout = c->attention_dropout;
    o->tokenizer_type = (char *)c->tokenizer_type;
    o->vocab_file = (char *)c->vocab_file;
    o->merge_file = (char *)c->merge_file;
    o->tokenizer_model = (char *)c->tokenizer_model;
    o->recompute_method = (char *)c->recompute_method;
    o->recompute_num_layers = c->recompute_num_layers;
    o->make_vocab_size_divisible_by = c->make_vocab_size_divisible_by;
    o->padded_vocab_size = c->padded_vocab_size;
    o->kv_channels = c->kv_channels;
}

/* A JobSpec field's value as config text: numbers printed, booleans "true"/"false",
 * strings as they are. NULL for an empty string or a type the config does not use. */
static const char *spec_field(const Atoll__JobSpec *in, const ProtobufCFieldDescriptor *f, char *val, size_t len)
{
    const char *p = (const char *)in + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) return NULL; /* env: the job's, never a config key */
    /* the decay schedule's ends are read with linear and cosine only: with constant (or a spec from before the
     * schedule) they were not given, and the config refuses them there, as Megatron does */
    if ((!strcmp(f->name, "start_weight_decay") || !strcmp(f->name, "end_weight_decay")) &&
        (!in->weight_decay_incr_style || !*in->weight_decay_incr_style ||
         !strcmp(in->weight_decay_incr_style, "constant")))
        return NULL;
    if (!strcmp(f->name, "decoupled_min_lr") && in->decoupled_lr <= 0) return NULL; /* a floor of no schedule */
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: snprintf(val, len, "%d", *(const int32_t *)p); return val;
    case PROTOBUF_C_TYPE_UINT64: snprintf(val, len, "%llu", (unsigned long long)*(const uint64_t *)p); return val;
    case PROTOBUF_C_TYPE_DOUBLE: snprintf(val, len, "%.17g", *(const double *)p); return val;
    case PROTOBUF_C_TYPE_BOOL: return *(const protobuf_c_boolean *)p ? "true" : "false";
    case PROTOBUF_C_TYPE_STRING: {
        const char *v = *(char *const *)p;
        return v && *v ? v : NULL;
    }
    default: return NULL;
    }
}

/* Walks the JobSpec descriptor so a field added to the .proto with a config key of
 * the same name is carried without touching this function. */
int msg_spec_to_cfg(const Atoll__JobSpec *in, atoll_config *c, char *err, size_t errlen)
{
    cfg_defaults(c);
    const ProtobufCMessageDescriptor *d = &atoll__job_spec__descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (!strcmp(f->name, "name")) continue;
        char val[64];
        const char *v = spec_field(in, f, val, sizeof val);
        if (!v) continue; /* empty string: keep the default */
        char inner[256] = "";
        cfg_status st = cfg_set(c, f->name, v, inner, sizeof inner);
        if (st == CFG_UNKNOWN) continue; /* spec fields the config does not model yet */
        if (st != CFG_OK) {
            snprintf(err, errlen, "job spec: %s", inner);
            return -1;
        }
    }
    return 0;
}

int msg_stage_layers(const Atoll__Job *j, int stage)
{
    atoll_config c;
    char err[256];
    if (!j->spec || j->pp < 1 || stage < 0 || stage >= j->pp || msg_spec_to_cfg(j->spec, &c, err, sizeof err)) return -1;
    c.pipeline_model_parallel_size = j->pp;
    return cfg_stage_num_layers(&c, stage);
}

char **msg_spec_to_argv(const Atoll__JobSpec *in, const char *exe, int *argc)
{
    const ProtobufCMessageDescriptor *d = &atoll__job_spec__descriptor;
    char **argv = calloc(2 * d->n_fields + 2, sizeof *argv);
    if (!argv) return NULL;
    int n = 0;
    argv[n++] = strdup(exe);
    atoll_config scratch; /* asks the config which fields are the engine's */
    cfg_defaults(&scratch);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (!strcmp(f->name, "name") || !strcmp(f->name, "num_gpus")) continue;
        char val[64];
        const char *v = spec_field(in, f, val, sizeof val);
        char why[8];
        if (v && cfg_set(&scratch, f->name, v, why, sizeof why) == CFG_UNKNOWN) continue; /* the job's, not the engine's */
        if (!v || !strcmp(v, "false")) continue; /* booleans: a bare flag when set */
        if (f->type == PROTOBUF_C_TYPE_BOOL) v = NULL;
        char flag[80] = "--";
        size_t k = 2;
        for (const char *c = f->name; *c && k < sizeof flag - 1; c++) flag[k++] = *c == '_' ? '-' : *c;
        flag[k] = 0;
        argv[n++] = strdup(flag);
        if (v) argv[n++] = strdup(v);
    }
    for (int i = 0; i < n; i++)
        if (!argv[i]) {
            msg_argv_free(argv);
            return NULL;
        }
    *argc = n;
    return argv;
}

void msg_argv_free(char **argv)
{
    for (char **a = argv; a && *a; a++) free(*a);
    free(argv);
}

const char *msg_job_state_name(int s)
{
    static const char *n[] = { "pending", "placing", "starting", "running",
                               "restarting", "completed", "failed", "cancelled" };
    return s >= 0 && s < 8 ? n[s] : "unknown";
}

int msg_job_state_ended(int s)
{
    return s == ATOLL__JOB_STATE__JOB_COMPLETED || s == ATOLL__JOB_STATE__JOB_FAILED ||
           s == ATOLL__JOB_STATE__JOB_CANCELLED;
}

const char *msg_node_state_name(int s)
{
    return topo_state_name((topo_node_state)s);
}
