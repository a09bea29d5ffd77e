# Shared by the integration test scripts (ctl_it.sh, jobs_it.sh): sourced after
# CASE, BIN, TMP and PIDS are set. Every process in PIDS is killed on exit, and
# TMP removed, pass or fail; a script may add its own teardown in it_extra_cleanup.
it_extra_cleanup() { :; }
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  it_extra_cleanup
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL ($CASE): $*" >&2
  for f in "$TMP"/*.log; do echo "--- $f" >&2; tail -n 30 "$f" >&2; done
  exit 1
}
ok() { echo "ok: $*"; }

now() { date +%s.%N; }
# wait_until SECONDS COMMAND...: polls every 100 ms
wait_until() {
  local limit=$1; shift
  local end; end=$(awk -v a="$(now)" -v b="$limit" 'BEGIN { printf "%.3f", a + b }')
  while ! "$@" >/dev/null 2>&1; do
    if awk -v a="$(now)" -v b="$end" 'BEGIN { exit !(a > b) }'; then return 1; fi
    sleep 0.1
  done
}
# json EXPR < input: evaluates a Python expression over the parsed JSON `d`
json() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

atoll() { "$BIN/atoll" "$@"; }
