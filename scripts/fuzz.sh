#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 30), starting from
# the committed seeds (fuzz/seeds/<target>/) and the local grown corpus
# (fuzz/corpus/<target>/, ignored by git). Prints each target's executions, coverage
# and corpus size; exits 1 if any target found a crash, panic, timeout or OOM (the
# input is saved under fuzz/artifacts/<target>/). See FUZZING.md.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
#
# What it sets, and why:
#   RUSTC_BOOTSTRAP=1   with a sanitizer, cargo-fuzz passes -Zsanitizer=..., which the
#                       stable toolchain accepts only with this set; `none` needs only
#                       stable -C flags, but it is always set so both modes build alike.
#   TZ                  America/New_York unless set, so `at_time` meets DST gaps and
#                       repeated hours in the local zone.
#   --sanitizer         $FUZZ_SANITIZER, default `none` (our crates deny unsafe code;
#                       `address` builds slower and runs at about half the speed).
#   --target-dir        $LOOPS_FUZZ_TARGET_DIR, default fuzz/target.
#   libFuzzer flags     -max_total_time=SECONDS -timeout=1 (an input slower than 1 s is
#                       a finding) -rss_limit_mb=2048 -max_len=<per target, below>.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-30}"
shift $(($# > 0 ? 1 : 0))
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -eq 0 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 2
fi

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz not installed; skipped"
  exit 0
fi

# Longest input per target: a cron line, a duration, an --at value, a workflow spec
# (several dozen steps), provider output (past the 4 KiB summary bound), a request's
# query, form, JSON body or cookies, a bundle and an OpenLoops database's rows (a dozen
# loops and specs each).
declare -A max_len=(
  [cron]=256
  [duration]=64
  [at_time]=128
  [workflow_spec]=8192
  [provider_output]=16384
  [http_request]=4096
  [bundle_import]=16384
  [openloops_import]=16384
)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(cron duration at_time workflow_spec provider_output http_request bundle_import openloops_import)
fi
for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { echo "fuzz: unknown target $t" >&2; exit 2; }
done

export RUSTC_BOOTSTRAP=1
export TZ="${TZ:-America/New_York}"
sanitizer="${FUZZ_SANITIZER:-none}"
target_dir="${LOOPS_FUZZ_TARGET_DIR:-$PWD/fuzz/target}"
flags=(-O -a --sanitizer "$sanitizer" --target-dir "$target_dir" --fuzz-dir fuzz)
logs="$target_dir/fuzz-logs"
mkdir -p "$logs"

start=$(date +%s)
cargo fuzz build "${flags[@]}"
echo "fuzz: built ${#targets[@]} targets in $(($(date +%s) - start)) s (sanitizer: $sanitizer)"

failed=()
for t in "${targets[@]}"; do
  corpus="fuzz/corpus/$t"
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  log="$logs/$t.log"
  status=0
  cargo fuzz run "${flags[@]}" "$t" "$corpus" "fuzz/seeds/$t" -- \
    -max_total_time="$secs" -timeout=1 -rss_limit_mb=2048 -max_len="${max_len[$t]}" \
    -print_final_stats=1 >"$log" 2>&1 || status=$?
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
  rate=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  files=$(find "$corpus" -type f | wc -l)
  bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  if [ "$status" -eq 0 ]; then
    echo "fuzz: $t ok: ${execs} execs (${rate}/s), ${cov:-cov: ?}, corpus ${files} files / ${bytes} bytes"
  else
    echo "fuzz: $t FAILED (exit $status) after ${execs} execs; log: $log"
    grep -E "panicked|ERROR: libFuzzer|SUMMARY|Test unit written|Base64" "$log" | head -20 || true
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]} (inputs in fuzz/artifacts/)"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${secs} s each, no findings ($(($(date +%s) - start)) s in all)"
