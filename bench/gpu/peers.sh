#!/usr/bin/env bash
# Builds the peers bench/gpu/run.sh measures atoll against, from their own
# sources (fetched outside this repository, never committed), into PEERS_DIR
# (default /tmp/peers/out), where bench/gpu/kit.sh picks them up:
#
#   train_gpt2cu   llm.c's GPT-2 trainer: bf16, cuDNN attention through the
#                  cudnn-frontend headers, sm_90, one GPU (no MPI or NCCL)
#   README.txt     the sources' commits and the commands
#
# usage: bench/gpu/peers.sh LLMC_SRC CUDNN_FRONTEND_SRC
#   each a checkout or a bare git directory of https://github.com/karpathy/llm.c
#   and https://github.com/NVIDIA/cudnn-frontend; their HEAD is built.
# Needs nvcc and cuDNN's headers and library (/usr/local/cuda here). The GPU
# machine has no NVML headers' library to link against at build time, and
# this one has no driver: the link takes a stub libnvidia-ml.so.1 defining
# the functions llm.c calls, and the driver's library answers them at run time.
set -euo pipefail
[ $# = 2 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
out=${PEERS_DIR:-/tmp/peers/out}
cuda=${CUDA_HOME:-/usr/local/cuda}
work=$(mktemp -d "${TMPDIR:-/tmp}/atoll-peers.XXXXXX")
trap 'rm -rf "$work"' EXIT

# export SRC DEST: SRC's HEAD (a checkout or a bare repository) as plain files; prints the commit
export_head() {
  local git=$1
  [ -d "$1/.git" ] && git=$1/.git
  mkdir -p "$2"
  git --git-dir="$git" archive HEAD | tar -x -C "$2"
  git --git-dir="$git" rev-parse --short HEAD
}
llmc=$(export_head "$1" "$work/llm.c")
cfe=$(export_head "$2" "$work/llm.c/cudnn-frontend") # where its Makefile looks

# CUDA 13 takes cudaMemAdvise's location as a cudaMemLocation, not a device number: llm.c's one call (its
# fallback to managed memory, preferring the host) is adapted in the build copy
if "$cuda/bin/nvcc" --version | grep -q "release 1[3-9]"; then
  sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
    "$work/llm.c/llmc/cuda_utils.cuh"
  grep -q "cudaMemLocationTypeHost" "$work/llm.c/llmc/cuda_utils.cuh" \
    || { echo "peers.sh: llm.c's cudaMemAdvise call was not where expected; adapt it for CUDA 13" >&2; exit 1; }
fi

mkdir -p "$work/stub"
cat >"$work/stub/nvml_stub.c" <<'EOF'
/* Link-time stand-ins: the driver's libnvidia-ml.so.1 provides these at run time. */
#define STUB(name) int name(void) { return 999; }
STUB(nvmlInit_v2) STUB(nvmlShutdown) STUB(nvmlErrorString) STUB(nvmlDeviceGetHandleByIndex_v2)
STUB(nvmlDeviceGetClockInfo) STUB(nvmlDeviceGetMaxClockInfo) STUB(nvmlDeviceGetCurrentClocksThrottleReasons)
STUB(nvmlDeviceGetCurrentClocksEventReasons) STUB(nvmlDeviceGetFanSpeed) STUB(nvmlDeviceGetPowerManagementLimit)
STUB(nvmlDeviceGetPowerUsage) STUB(nvmlDeviceGetSamples) STUB(nvmlDeviceGetTemperature)
STUB(nvmlDeviceGetTemperatureThreshold)
EOF
cc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o "$work/stub/libnvidia-ml.so" "$work/stub/nvml_stub.c"

cmd=(make -C "$work/llm.c" train_gpt2cu USE_CUDNN=1 CUDNN_FRONTEND_PATH="$work/llm.c/cudnn-frontend/include"
     GPU_COMPUTE_CAPABILITY=90 NO_MULTI_GPU=1 NO_USE_MPI=1 NVCC_LDLIBS="-lnvrtc -lcuda") # cudnn-frontend's runtime kernels
echo "building llm.c $llmc (train_gpt2cu, cudnn-frontend $cfe): ${cmd[*]}"
PATH=$cuda/bin:$PATH LIBRARY_PATH=$work/stub:$cuda/lib64:$cuda/lib64/stubs${LIBRARY_PATH:+:$LIBRARY_PATH} \
  CPATH=$cuda/include${CPATH:+:$CPATH} "${cmd[@]}" >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; echo "peers.sh: llm.c did not build (log above)" >&2; exit 1; }
if readelf -d "$work/llm.c/train_gpt2cu" | grep -q "atoll-peers"; then
  echo "peers.sh: train_gpt2cu records the temporary stub directory" >&2
  exit 1
fi

mkdir -p "$out"
cp "$work/llm.c/train_gpt2cu" "$out/"
cat >"$out/README.txt" <<EOF
train_gpt2cu: llm.c $llmc (https://github.com/karpathy/llm.c), cuDNN attention through
cudnn-frontend $cfe (https://github.com/NVIDIA/cudnn-frontend), for sm_90 with $("$cuda/bin/nvcc" --version | tail -1),
built $(date -u +%F) by bench/gpu/peers.sh: ${cmd[*]}
(libnvidia-ml from a link-time stub, the GPU machine's driver provides it; with CUDA 13 its one cudaMemAdvise
call takes a cudaMemLocation on the host.) Not atoll's code: never committed.
EOF
echo "peers in $out: $(ls "$out" | tr '\n' ' ')"
