#!/bin/sh
# A rank that only waits: the control-plane tests place jobs on simulated GPU
# nodes but train nothing (`workerd --train-bin` points here). Like an atoll-train
# rank it ends with its supervisor, and on SIGTERM (workerd stops its group).
while kill -0 "$ATOLL_SUPERVISOR_PID" 2>/dev/null; do sleep 0.2; done
