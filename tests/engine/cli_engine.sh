#!/usr/bin/env bash
# The CLI without the engine linked in: atoll needs no CUDA, cuBLAS, NCCL or
# OpenBLAS library (a login node without them runs it), and generate, export,
# import and data prepare reach the engine by exec'ing atoll-train beside it,
# with the command's own usage, exit codes and messages. Copied alone into a
# directory, atoll still plans, and says what is missing for an engine command.
# (The commands' work itself is checked by engine_cli, engine_generate and
# engine_import, which run them through this atoll.)
# usage: cli_engine.sh ATOLL_TRAIN ATOLL WORKDIR
set -u
TRAIN=$(realpath "$1") ATOLL=$(realpath "$2") W=$3
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1
. "$(dirname "$0")/check_lib.sh"

needed=$(readelf -d "$ATOLL" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "atoll needs: $needed"
if grep -qE 'libcuda|libcublas|libnccl|libcudnn|libopenblas|libstdc\+\+' <<<"$needed"; then
    bad "atoll needs a device or BLAS library: $needed"
else
    ok "atoll needs no CUDA, cuBLAS, NCCL, cuDNN or OpenBLAS library"
fi
# a CUDA build's engine does need them: the check above could fail
if readelf -d "$TRAIN" | grep -q 'libcudart'; then
    ok "(atoll-train of this build needs libcudart, as the engine should)"
fi

"$ATOLL" generate --help >help.out 2>&1; rc=$?
[ $rc = 0 ] && grep -q "usage: atoll generate" help.out && ok "atoll generate --help: the engine's usage, exit 0" \
    || bad "atoll generate --help: rc=$rc $(head -3 help.out)"
"$ATOLL" generate --load nowhere --prompt hi --no-such-flag >bad.out 2>&1; rc=$?
[ $rc = 2 ] && grep -q "no-such-flag" bad.out && ok "atoll generate with an unknown flag: exit 2, naming it" \
    || bad "atoll generate --no-such-flag: rc=$rc $(head -3 bad.out)"
"$ATOLL" export --load nowhere --output out >miss.out 2>&1; rc=$?
[ $rc = 1 ] && grep -q "nowhere" miss.out && [ ! -e out ] && ok "atoll export of a missing checkpoint: exit 1, naming it" \
    || bad "atoll export --load nowhere: rc=$rc $(head -3 miss.out)"
printf 'one line\n' >t.txt
"$ATOLL" data prepare --input t.txt --output-prefix t >/dev/null 2>prep.err; rc=$?
[ $rc = 0 ] && [ -s t.bin ] && [ -s t.idx ] && ok "atoll data prepare through atoll-train" \
    || bad "atoll data prepare: rc=$rc $(head -3 prep.err)"
"$ATOLL" data prepare --input t.txt --output-prefix t2 --json >prep.json 2>&1; rc=$?
[ $rc = 0 ] && grep -q '^{' prep.json && ok "the global --json reaches the command" \
    || bad "atoll data prepare --json: rc=$rc $(head -3 prep.json)"
"$TRAIN" frobnicate >fro.out 2>&1; rc=$?
[ $rc = 2 ] && grep -q "unknown command 'frobnicate'" fro.out && ok "atoll-train frobnicate: exit 2, the commands listed" \
    || bad "atoll-train frobnicate: rc=$rc $(head -3 fro.out)"

mkdir alone && cp "$ATOLL" alone/atoll
alone/atoll plan --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --global-batch-size 64 \
    --num-gpus 8 --gpu h100-sxm --top 1 >plan.out 2>&1; rc=$?
[ $rc = 0 ] && ok "atoll alone in a directory plans" || bad "atoll plan alone: rc=$rc $(head -3 plan.out)"
alone/atoll generate --load nowhere --prompt hi >alone.out 2>&1; rc=$?
[ $rc = 1 ] && grep -q "alone/atoll-train" alone.out && grep -q "No such file" alone.out \
    && ok "atoll generate without atoll-train beside it: exit 1, saying where it looked: $(cat alone.out)" \
    || bad "atoll generate alone: rc=$rc $(cat alone.out)"
finish cli_engine
