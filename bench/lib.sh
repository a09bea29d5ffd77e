# Shared by the benchmark scripts that run a real coordinatord: `bench_setup NAME
# TARGET...` checks the built binaries (BIN=$BUILD/bin), makes TMP on tmpfs when
# there is one (base says where), kills a coordinator left in COORD and removes
# TMP on exit, and raises the open-files limit to the hard one.
bench_setup() {
  local name=$1; shift
  BIN=$BUILD/bin
  for t in "$@"; do
    [ -x "$BIN/$t" ] || { echo "build first: cmake --build $BUILD --target $*" >&2; exit 2; }
  done
  base=/dev/shm; [ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
  TMP=$(mktemp -d "$base/atoll-bench-$name.XXXXXX")
  COORD=
  trap 'if [ -n "$COORD" ]; then kill -9 "$COORD" 2>/dev/null; fi; wait 2>/dev/null; rm -rf "$TMP"' EXIT
  ulimit -n "$(ulimit -Hn)"
}
