#!/usr/bin/env bash
# Discovered topologies through the real daemons: a coordinatord, one workerd reading
# the Azure NDv4 topology file, one discovering a fake machine (stand-in NVML with
# NVLink pairs, a fake sysfs with 4 InfiniBand NICs). `atoll nodes --json` must show
# what discovery found: GPU counts, islands, rails, NIC names and rates.
# usage: discover_e2e.sh BIN_DIR TOPOLOGIES_DIR FAKE_NVML_DIR
set -euo pipefail
bin=$1 topo=$2 fake_nvml=$3
py=/usr/bin/python3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/discover_e2e.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "discover_e2e: $*" >&2; for f in "$tmp"/*.log; do echo "== $f" >&2; tail -5 "$f" >&2; done; exit 1; }

"$bin/coordinatord" --listen 127.0.0.1:0 --http off --state-dir "$tmp/state" >"$tmp/coord.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -s "$tmp/state/coordinatord.addr" ] && break; sleep 0.1; done
[ -s "$tmp/state/coordinatord.addr" ] || fail "coordinatord did not start"
addr=$(cat "$tmp/state/coordinatord.addr")
common=(--coordinator "$addr" --token-file "$tmp/state/token")

# The fake machine: GPU g (bus 18 + 16 g, from the stand-in NVML) shares a PCIe switch
# with the NIC whose bus id falls as g rises, so GPU g's rail is 3 - g.
sys=$tmp/sys
for g in 0 1 2 3; do
  sw=$(printf '0000:00:0%d.0' $((g + 1)))
  gpu=$(printf '0000:%02x:00.0' $((0x18 + 16 * g)))
  nic=$(printf '0000:%02x:00.0' $((0x9f - 16 * g)))
  mkdir -p "$sys/devices/pci0000:00/$sw/$gpu" "$sys/devices/pci0000:00/$sw/$nic" "$sys/bus/pci/devices" \
           "$sys/class/infiniband/mlx5_$g/ports/1"
  ln -s "../../../devices/pci0000:00/$sw/$gpu" "$sys/bus/pci/devices/$gpu"
  ln -s "../../../devices/pci0000:00/$sw/$nic" "$sys/class/infiniband/mlx5_$g/device"
  echo "400 Gb/sec (4X NDR)" >"$sys/class/infiniband/mlx5_$g/ports/1/rate"
  echo "InfiniBand" >"$sys/class/infiniband/mlx5_$g/ports/1/link_layer"
done

"$bin/workerd" "${common[@]}" --name ndv4 --topology-xml "$topo/azure-ndv4-a100.xml" \
  --work-dir "$tmp/w1" >"$tmp/ndv4.log" 2>&1 &
pids+=($!)
LD_LIBRARY_PATH=$fake_nvml FAKE_NVML_MODE=pairs "$bin/workerd" "${common[@]}" --name fake --sysfs-root "$sys" \
  --work-dir "$tmp/w2" >"$tmp/fake.log" 2>&1 &
pids+=($!)
# The same machine as a Slurm step that was given GPUs 1 and 3 (Slurm confining
# devices renumbers CUDA_VISIBLE_DEVICES): only those two are offered.
env -u ATOLL_COORDINATOR LD_LIBRARY_PATH=$fake_nvml FAKE_NVML_MODE=pairs SLURM_JOB_ID=42 SLURMD_NODENAME=slurmstep \
  SLURM_STEP_GPUS=1,3 CUDA_VISIBLE_DEVICES=0,1 "$bin/workerd" "${common[@]}" --sysfs-root "$sys" \
  --work-dir "$tmp/w3" >"$tmp/slurmstep.log" 2>&1 &
pids+=($!)

for _ in $(seq 100); do
  out=$("$bin/atoll" "${common[@]}" nodes --json 2>/dev/null || true)
  [ "$(echo "$out" | grep -o '"state":"alive"' | wc -l)" = 3 ] && break
  sleep 0.1
done
echo "$out" | "$py" -c '
import json, sys
nodes = {n["name"]: n for n in json.load(sys.stdin)["nodes"]}
def need(cond, what):
    if not cond:
        sys.exit("discover_e2e: " + what)
need(set(nodes) == {"ndv4", "fake", "slurmstep"}, "nodes %s" % sorted(nodes))
st = nodes["slurmstep"]
need([g["index"] for g in st["gpus"]] == [1, 3], "the Slurm step offers GPUs %s, not 1 and 3" % [g["index"] for g in st["gpus"]])
a = nodes["ndv4"]
need(len(a["gpus"]) == 8 and len(a["nics"]) == 8, "ndv4: %d GPUs, %d NICs" % (len(a["gpus"]), len(a["nics"])))
need({g["island"] for g in a["gpus"]} == {"ndv4"}, "ndv4 islands")
need(sorted(g["rail"] for g in a["gpus"]) == list(range(8)), "ndv4 rails %s" % [g["rail"] for g in a["gpus"]])
need(all(n["link_layer"] == "InfiniBand" for n in a["nics"]), "ndv4 link layers")
f = nodes["fake"]
need(len(f["gpus"]) == 4 and len(f["nics"]) == 4, "fake: %d GPUs, %d NICs" % (len(f["gpus"]), len(f["nics"])))
need([g["island"] for g in f["gpus"]] == ["fake#0", "fake#0", "fake#1", "fake#1"], "fake islands")
need([g["rail"] for g in f["gpus"]] == [3, 2, 1, 0], "fake rails %s" % [g["rail"] for g in f["gpus"]])
need([n["name"] for n in f["nics"]] == ["mlx5_3", "mlx5_2", "mlx5_1", "mlx5_0"], "fake NIC order (bus order)")
need(all(n["gbps"] == 400 for n in f["nics"]), "fake NIC rates")
need(all(g["name"] == "NVIDIA H100 80GB HBM3" for g in f["gpus"]), "fake GPU names")
print("discover_e2e: the nodes registered with their discovered topology; the Slurm step with its GPUs 1 and 3")
' || fail "atoll nodes --json: $out"
grep -q "Slurm job 42: this step has GPUs 1,3 of the 4 found" "$tmp/slurmstep.log" || fail "the Slurm step's log"
