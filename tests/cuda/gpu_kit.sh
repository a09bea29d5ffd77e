#!/usr/bin/env bash
# The GPU kit (bench/gpu/kit.sh) packed from this build, as a GPU machine will take
# it: that machine has the CUDA toolkit, PyTorch and Python but none of atoll's
# Debian libraries, and no network. Checked here:
# - the kit holds every program bench/gpu/run.sh runs, the CUDA backend with sm_90
#   machine code in every translation unit, the profiler and the commit it was built from;
# - every library a kit program loads from the system's /lib or /usr/lib, but the C
#   and C++ runtimes the GPU machine has, is in libs.tar.xz, and with the unpacked
#   folder first on LD_LIBRARY_PATH (as run.sh puts it) each resolves there;
# - a build without sm_90 is refused, saying what its architectures are.
#   gpu_kit.sh SOURCE_DIR BUILD_DIR WORKDIR
set -euo pipefail
src=$1
build=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

KIT=$work/kit KIT_BUILD=$build PEERS_DIR=$work/no-peers "$src/bench/gpu/kit.sh" > "$work/kit.log" 2>&1 ||
  { cat "$work/kit.log"; echo "FAIL: kit.sh"; exit 1; }
kit=$work/kit
for b in atoll-train atoll cuda_kernels_fp32 cuda_kernels_bf16 gpu_bench cudnn_plan_check libatoll-cuda.so ktrace.so; do
  [ -x "$kit/bin/$b" ] || bad "the kit has no $b"
done
[ -s "$kit/bin/COMMIT" ] || bad "the kit does not say which commit it was built from"
# each CUDA translation unit's fatbin container (.nv_fatbin) holds a kind-2 entry (machine
# code, not PTX) for architecture 90, as the CUDA runtime picks for an H100/H200
objcopy -O binary --only-section=.nv_fatbin "$kit/bin/libatoll-cuda.so" "$work/fatbin"
if sm90=$(python3 - "$work/fatbin" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
units = with90 = 0
off = 0
while off + 16 <= len(d):
    magic, _, hsize, size = struct.unpack_from("<IHHQ", d, off)
    if magic != 0xBA55ED50:
        off += 8
        continue
    units += 1
    e, end, found = off + hsize, off + hsize + size, False
    while e < end:
        kind, _, ehsize, psize = struct.unpack_from("<HHIQ", d, e)
        found |= kind == 2 and struct.unpack_from("<I", d, e + 0x1C)[0] == 90
        e += ehsize + psize
    with90 += found
    off = end
print(f"{with90} of {units}")
sys.exit(0 if units and with90 == units else 1)
PY
); then
  echo "ok: libatoll-cuda.so carries sm_90 machine code in $sm90 translation units"
else
  bad "libatoll-cuda.so: sm_90 machine code in ${sm90:-none} translation units"
fi

mkdir -p "$work/unpacked"
tar -C "$work/unpacked" -xJf "$kit/libs.tar.xz"
runtime='^(libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so'
checked=0
for b in "$kit"/bin/*; do
  case $(basename "$b") in COMMIT) continue ;; esac
  while read -r lib path; do
    [[ $lib =~ $runtime ]] && continue
    checked=$((checked + 1))
    [ -e "$work/unpacked/lib/$lib" ] || { bad "$(basename "$b") loads $lib ($path), which libs.tar.xz lacks"; continue; }
    got=$(LD_LIBRARY_PATH="$work/unpacked/lib" ldd "$b" | awk -v l="$lib" '$1 == l {print $3}')
    [ "$got" = "$work/unpacked/lib/$lib" ] ||
      bad "$(basename "$b"): $lib resolves to '$got' with the kit's libraries first, not the kit's copy"
  done < <(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\/(usr\/)?lib\// {print $1, $3}')
done
[ "$checked" -gt 0 ] || bad "no system library found behind the kit's programs (ldd)"
echo "ok: the kit's programs load system libraries $checked times, each one in libs.tar.xz ($(cat "$kit/libs.list"))"

# a build for other GPUs only is refused, saying so
mkdir -p "$work/sm80"
echo 'ATOLL_CUDA_ARCHS:STRING=80' > "$work/sm80/CMakeCache.txt"
if KIT=$work/kit80 KIT_BUILD=$work/sm80 "$src/bench/gpu/kit.sh" > "$work/sm80.log" 2>&1; then
  bad "kit.sh took a build without sm_90"
elif grep -q 'not a build with sm_90 among ATOLL_CUDA_ARCHS.*=80' "$work/sm80.log"; then
  echo "ok: a build without sm_90 refused: $(head -1 "$work/sm80.log")"
else
  bad "kit.sh refused a build without sm_90 without saying why: $(cat "$work/sm80.log")"
fi

[ "$fail" = 0 ] && echo "gpu_kit: all checks passed"
exit "$fail"
