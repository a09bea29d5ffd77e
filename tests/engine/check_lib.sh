# Shared by the engine's end-to-end scripts (engine_cli.sh, engine_generate.sh,
# engine_import.sh): sourced after `cd` into the work directory. ok and bad
# report a check (bad counts it in $failures); losses prints a metrics file's
# losses; finish NAME prints the tally and exits 1 when any check failed.
# TEXT is the sentence the generate and import scripts train small models on.
failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
losses() { grep -o '"loss":[^,]*' "$1"; }
finish() {
    [ "$failures" = 0 ] && echo "$1: all checks passed" || echo "$1: $failures failure(s)"
    exit $((failures > 0))
}
TEXT="Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail about."
