/* msg_json: the JSON shapes of INTERFACES.md, written from wire messages, shared
 * by `atoll ... --json` and the coordinator's /api endpoints so both agree. */
#ifndef ATOLL_MSG_JSON_H
#define ATOLL_MSG_JSON_H

#include "atoll.pb-c.h"
#include "jsonw.h"

/* {"name","state","gpus":[{"index","name","memory_bytes","island","uuid","pci_bus_id","rail"}],
 *  "nics":[{"name","rail","gbps","link_layer"}],"leaf","cpu_ranks","last_seen_ms",...} */
void msg_json_node(jsonw *w, const Atoll__Node *n);
/* The same members without the enclosing braces, for callers that add their own. */
void msg_json_node_fields(jsonw *w, const Atoll__Node *n);
/* {"job","name","state","step","loss","mfu","tokens_per_s","restarts","epoch","num_gpus",
 *  "layout":{"tp","pp","dp","vpp"},"metrics":{...},"message"}; metrics are null until
 * the job reports a step. */
void msg_json_job(jsonw *w, const Atoll__Job *j);
/* One step's metrics: {"iteration","time_ms","loss","lr","grad_norm","tokens_per_s","step_ms",
 * "flops_per_gpu","tflops_per_gpu","peak_flops","mfu" (null when the device's peak is unknown,
 * e.g. CPU ranks),"memory_bytes","bubble_measured","bubble_theory","stages":[{"stage","measured",
 * "theory","transfer"}]}; a stage's measured/transfer is null until its rank reported. */
void msg_json_metrics(jsonw *w, const Atoll__JobMetrics *m);
/* 1 when MFU means something: the ranks' device has a known dense bf16 peak. */
int msg_mfu_known(const Atoll__JobMetrics *m);
void msg_json_event(jsonw *w, const Atoll__Event *e);
void msg_json_layout(jsonw *w, const Atoll__JobLayout *l);

#endif
