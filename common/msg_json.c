#include "msg_json.h"

#include "msg.h"

void msg_json_node(jsonw *w, const Atoll__Node *n)
{
    jsonw_obj(w);
    msg_json_node_fields(w, n);
    jsonw_obj_end(w);
}

void msg_json_node_fields(jsonw *w, const Atoll__Node *n)
{
    jsonw_kstr(w, "name", n->name);
    jsonw_kstr(w, "state", msg_node_state_name(n->state));
    jsonw_key(w, "gpus");
    jsonw_arr(w);
    for (size_t i = 0; i < n->n_gpus; i++) {
        const Atoll__Gpu *g = n->gpus[i];
        jsonw_obj(w);
        jsonw_kint(w, "index", g->index);
        jsonw_kstr(w, "name", g->name);
        jsonw_key(w, "memory_bytes");
        jsonw_uint(w, g->memory_bytes);
        jsonw_kstr(w, "island", g->island);
        jsonw_kstr(w, "uuid", g->uuid);
        jsonw_kstr(w, "pci_bus_id", g->pci_bus_id);
        jsonw_kint(w, "rail", g->rail);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
    jsonw_key(w, "nics");
    jsonw_arr(w);
    for (size_t i = 0; i < n->n_nics; i++) {
        const Atoll__Nic *x = n->nics[i];
        jsonw_obj(w);
        jsonw_kstr(w, "name", x->name);
        jsonw_kint(w, "rail", x->rail);
        jsonw_knum(w, "gbps", x->gbps);
        jsonw_kstr(w, "link_layer", x->link_layer);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
    jsonw_key(w, "leaf");
    if (n->leaf && n->leaf[0]) jsonw_str(w, n->leaf);
    else jsonw_null(w);
    jsonw_kint(w, "cpu_ranks", n->cpu_ranks);
    jsonw_kbool(w, "drained", n->drained);
    jsonw_kstr(w, "slurm_state", n->slurm_state);
    jsonw_kstr(w, "host", n->host);
    jsonw_kstr(w, "address", n->address);
    jsonw_kint(w, "registered_ms", n->registered_ms);
    jsonw_kint(w, "last_seen_ms", n->last_seen_ms);
    jsonw_key(w, "heartbeats");
    jsonw_uint(w, n->heartbeats);
}

static void num_or_null(jsonw *w, const char *k, double v, int have)
{
    jsonw_key(w, k);
    if (have) jsonw_num(w, v);
    else jsonw_null(w);
}

int msg_mfu_known(const Atoll__JobMetrics *m)
{
    return m && (m->peak_flops > 0 || m->mfu > 0);
}

void msg_json_metrics(jsonw *w, const Atoll__JobMetrics *m)
{
    jsonw_obj(w);
    jsonw_kint(w, "iteration", m->step);
    jsonw_kint(w, "time_ms", m->time_ms);
    jsonw_knum(w, "loss", m->loss);
    num_or_null(w, "valid_loss", m->valid_loss, m->valid_step > 0); /* the evaluation after this step, or the newest */
    if (m->valid_step > 0) jsonw_kint(w, "valid_iteration", m->valid_step);
    jsonw_knum(w, "lr", m->lr);
    jsonw_knum(w, "grad_norm", m->grad_norm);
    jsonw_knum(w, "tokens_per_s", m->tokens_per_s);
    jsonw_knum(w, "step_ms", m->step_ms);
    jsonw_knum(w, "flops_per_gpu", m->flops_per_gpu);
    jsonw_knum(w, "tflops_per_gpu", m->flops_per_gpu / 1e12);
    jsonw_knum(w, "peak_flops", m->peak_flops);
    num_or_null(w, "mfu", m->mfu, msg_mfu_known(m));
    jsonw_key(w, "memory_bytes");
    jsonw_uint(w, m->memory_bytes);
    jsonw_knum(w, "bubble_measured", m->bubble_measured);
    jsonw_knum(w, "bubble_theory", m->bubble_theory);
    jsonw_key(w, "stages");
    jsonw_arr(w);
    for (size_t i = 0; i < m->n_stages; i++) {
        const Atoll__StageBubble *b = m->stages[i];
        jsonw_obj(w);
        jsonw_kint(w, "stage", b->stage);
        num_or_null(w, "measured", b->measured, b->measured >= 0);
        jsonw_knum(w, "theory", b->theory);
        num_or_null(w, "transfer", b->transfer, b->transfer >= 0);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
    jsonw_obj_end(w);
}

void msg_json_job(jsonw *w, const Atoll__Job *j)
{
    const Atoll__JobMetrics *m = j->metrics;
    int have = m && m->step > 0;
    jsonw_obj(w);
    jsonw_key(w, "job");
    jsonw_uint(w, j->id);
    jsonw_kstr(w, "name", j->name);
    jsonw_kstr(w, "state", msg_job_state_name(j->state));
    jsonw_kint(w, "step", m ? m->step : 0);
    jsonw_kint(w, "train_iters", j->spec ? j->spec->train_iters : 0);
    jsonw_kint(w, "restarts", j->restarts);
    jsonw_kint(w, "epoch", j->epoch);
    jsonw_kint(w, "num_gpus", j->spec ? j->spec->num_gpus : 0);
    jsonw_key(w, "env"); /* atoll submit --env */
    jsonw_arr(w);
    for (size_t i = 0; j->spec && i < j->spec->n_env; i++) jsonw_str(w, j->spec->env[i]);
    jsonw_arr_end(w);
    jsonw_kstr(w, "dependency", j->spec && j->spec->dependency ? j->spec->dependency : ""); /* --dependency */
    jsonw_kint(w, "time_limit_s", j->spec ? j->spec->time_limit_s : 0);                     /* --time */
    jsonw_key(w, "layout");
    jsonw_obj(w);
    jsonw_kint(w, "tp", j->tp);
    jsonw_kint(w, "pp", j->pp);
    jsonw_kint(w, "dp", j->dp);
    jsonw_kint(w, "vpp", j->vpp);
    jsonw_key(w, "layers_per_stage"); /* null where the spec does not say */
    jsonw_arr(w);
    for (int s = 0; s < j->pp; s++) {
        int n = msg_stage_layers(j, s);
        if (n >= 0) jsonw_int(w, n);
        else jsonw_null(w);
    }
    jsonw_arr_end(w);
    jsonw_obj_end(w);
    num_or_null(w, "loss", m ? m->loss : 0, have);
    num_or_null(w, "mfu", m ? m->mfu : 0, have && msg_mfu_known(m));
    jsonw_key(w, "metrics");
    if (have) {
        msg_json_metrics(w, m);
    } else {
        jsonw_obj(w); /* no step yet: the shape of INTERFACES.md, nulls where nothing is known */
        jsonw_key(w, "loss");
        jsonw_null(w);
        jsonw_key(w, "tokens_per_s");
        jsonw_null(w);
        jsonw_key(w, "mfu");
        jsonw_null(w);
        jsonw_key(w, "bubble_measured");
        jsonw_null(w);
        jsonw_knum(w, "bubble_theory", m ? m->bubble_theory : 0);
        jsonw_obj_end(w);
    }
    jsonw_kstr(w, "message", j->message);
    jsonw_kint(w, "created_ms", j->created_ms);
    jsonw_kint(w, "updated_ms", j->updated_ms);
    jsonw_kint(w, "max_restarts", j->max_restarts);
    jsonw_kint(w, "world", j->world);
    jsonw_key(w, "restart_history");
    jsonw_arr(w);
    for (size_t i = 0; i < j->n_history; i++) {
        const Atoll__RestartRecord *h = j->history[i];
        jsonw_obj(w);
        jsonw_kint(w, "epoch", h->epoch);
        jsonw_kstr(w, "cause", h->cause);
        jsonw_kstr(w, "detail", h->detail);
        jsonw_kstr(w, "node", h->node);
        jsonw_kint(w, "rank", h->rank);
        jsonw_kint(w, "fault_ms", h->fault_ms);
        jsonw_kint(w, "detected_ms", h->detected_ms);
        jsonw_kint(w, "running_ms", h->running_ms);
        num_or_null(w, "detection_s", (h->detected_ms - h->fault_ms) / 1000.0, h->fault_ms > 0);
        num_or_null(w, "to_running_s", (h->running_ms - h->detected_ms) / 1000.0, h->running_ms > 0);
        jsonw_kint(w, "steps_recomputed", h->steps_recomputed);
        jsonw_kint(w, "from_iteration", h->from_iteration);
        jsonw_kint(w, "dp", h->dp);
        jsonw_kbool(w, "counted", h->counted);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
    if (j->goodput) {
        const Atoll__Goodput *g = j->goodput;
        jsonw_key(w, "goodput");
        jsonw_obj(w);
        jsonw_knum(w, "ratio", g->ratio);
        jsonw_knum(w, "wall_s", g->wall_s);
        jsonw_knum(w, "productive_s", g->productive_s);
        jsonw_key(w, "lost_s");
        jsonw_obj(w);
        jsonw_knum(w, "startup", g->startup_s);
        jsonw_knum(w, "checkpoint", g->checkpoint_s);
        jsonw_knum(w, "detection", g->detection_s);
        jsonw_knum(w, "restart", g->restart_s);
        jsonw_knum(w, "recompute", g->recompute_s);
        jsonw_obj_end(w);
        jsonw_obj_end(w);
    }
    jsonw_key(w, "ranks");
    jsonw_arr(w);
    for (size_t i = 0; i < j->n_ranks; i++) {
        const Atoll__RankHealth *h = j->ranks[i];
        jsonw_obj(w);
        jsonw_kint(w, "rank", h->rank);
        jsonw_kstr(w, "node", h->node);
        num_or_null(w, "compute_ms", h->compute_ms, h->compute_ms > 0);
        num_or_null(w, "straggler_score", h->score, h->score > 0);
        jsonw_kbool(w, "straggler", h->straggler);
        jsonw_kstr(w, "watch", h->watch);
        jsonw_kint(w, "watch_age_ms", h->watch_age_ms);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
    jsonw_obj_end(w);
}

void msg_json_event(jsonw *w, const Atoll__Event *e)
{
    jsonw_obj(w);
    jsonw_key(w, "id");
    jsonw_uint(w, e->id);
    jsonw_kint(w, "time_ms", e->time_ms);
    jsonw_kstr(w, "kind", e->kind);
    jsonw_kstr(w, "subject", e->subject);
    jsonw_kstr(w, "message", e->message);
    jsonw_obj_end(w);
}

void msg_json_layout(jsonw *w, const Atoll__JobLayout *l)
{
    jsonw_obj(w);
    jsonw_key(w, "job");
    jsonw_uint(w, l->job);
    jsonw_kint(w, "epoch", l->epoch);
    jsonw_kint(w, "tp", l->tp);
    jsonw_kint(w, "pp", l->pp);
    jsonw_kint(w, "dp", l->dp);
    jsonw_kint(w, "vpp", l->vpp);
    jsonw_key(w, "ranks");
    jsonw_arr(w);
    for (size_t i = 0; i < l->n_ranks; i++) {
        jsonw_obj(w);
        jsonw_kint(w, "rank", l->ranks[i]->rank);
        jsonw_kstr(w, "node", l->ranks[i]->node);
        jsonw_kint(w, "gpu", l->ranks[i]->gpu);
        jsonw_kint(w, "local_rank", l->ranks[i]->local_rank);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
    jsonw_key(w, "groups");
    jsonw_arr(w);
    for (size_t i = 0; i < l->n_groups; i++) {
        jsonw_obj(w);
        jsonw_kstr(w, "kind", l->groups[i]->kind);
        jsonw_key(w, "ranks");
        jsonw_arr(w);
        for (size_t k = 0; k < l->groups[i]->n_ranks; k++) jsonw_int(w, l->groups[i]->ranks[k]);
        jsonw_arr_end(w);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
    jsonw_kstr(w, "checkpoint", l->checkpoint);
    jsonw_obj_end(w);
}
