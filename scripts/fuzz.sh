#!/usr/bin/env bash
# Fuzz every cargo-fuzz target (parse, demux, control, reload, reasm, learn,
# client_proto).
#
#   scripts/fuzz.sh [SECS]         bounded run: SECS seconds each (CI: 12; the long runs are in docs/testing.md)
#   scripts/fuzz.sh --build        install cargo-fuzz if missing and build every
#                                  target, nothing run (scripts/test.sh does this
#                                  beside the single-threaded loom models)
#   scripts/fuzz.sh --long [RUNS]  each target until it has done RUNS
#                                  executions (default 10 000 000; bounded by
#                                  FUZZ_LONG_MAX_SECS per target, default 3600),
#                                  then a Markdown table of executions, exec/s
#                                  and crashes from libFuzzer's final stats
#                                  (a fuzzer stopped with SIGINT is reported
#                                  as interrupted, with its figures so far)
#
# FUZZ_TARGETS="parse demux" picks targets. cargo-fuzz needs nightly flags;
# RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them (the only toolchain
# these machines have).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
TARGETS=${FUZZ_TARGETS:-parse demux control reload reasm learn client_proto}
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz from crates.io"
  cargo install --locked cargo-fuzz >/dev/null
fi

corpus_args() {
  mkdir -p "fuzz/corpus/$1"
  echo "fuzz/corpus/$1"
  if [ -d "fuzz/seeds/$1" ]; then echo "fuzz/seeds/$1"; fi
}

if [ "${1:-}" = "--build" ]; then
  # One cargo invocation for every target: the library and its
  # dependencies are built once, the targets linked side by side.
  if [ -z "${FUZZ_TARGETS:-}" ]; then exec cargo fuzz build --fuzz-dir fuzz; fi
  for t in $TARGETS; do cargo fuzz build --fuzz-dir fuzz "$t"; done
  exit 0
fi

if [ "${1:-}" != "--long" ]; then
  SECS=${1:-60}
  for t in $TARGETS; do
    echo "fuzz: target $t for ${SECS}s"
    mapfile -t dirs < <(corpus_args "$t")
    cargo fuzz run --fuzz-dir fuzz "$t" "${dirs[@]}" -- -max_total_time="$SECS" -rss_limit_mb=2048 2>&1 | tail -n 3
  done
  exit 0
fi

RUNS=${2:-10000000}
MAX_SECS=${FUZZ_LONG_MAX_SECS:-3600}
LOGS=fuzz/target/long-logs
mkdir -p "$LOGS"
rows=()
failed=0
for t in $TARGETS; do
  echo "fuzz --long: target $t until ${RUNS} executions (at most ${MAX_SECS}s) ($(date -u +%T) UTC)"
  mapfile -t dirs < <(corpus_args "$t")
  # Build first so the time bound covers fuzzing only.
  cargo fuzz build --fuzz-dir fuzz "$t" >/dev/null 2>&1 || cargo fuzz build --fuzz-dir fuzz "$t"
  log="$LOGS/$t.log"
  rc=0
  cargo fuzz run --fuzz-dir fuzz "$t" "${dirs[@]}" -- -runs="$RUNS" -max_total_time="$MAX_SECS" \
    -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
  if [ "$rc" = 0 ]; then
    crashes=none
  elif grep -q "run interrupted" "$log" && [ -z "$artifact" ]; then
    # SIGINT to the fuzzer (e.g. a deadline): libFuzzer still prints its stats.
    crashes="none (interrupted before $RUNS)"
  else
    crashes="1 (exit $rc${artifact:+, $artifact}; see $log)"
    failed=1
  fi
  [ -n "$execs" ] || execs="?"
  [ -n "$rate" ] || rate="?"
  # An interrupted run prints no "Done" line: its seconds from the rate.
  if [ -z "$secs" ] && [ "$execs" != "?" ] && [ "$rate" != "?" ] && [ "$rate" != 0 ]; then secs=$((execs / rate)); fi
  [ -n "$secs" ] || secs="?"
  echo "fuzz --long: $t: $execs executions in ${secs}s, $rate exec/s, crashes: $crashes"
  rows+=("| \`$t\` | $execs | $secs | $rate | $crashes |")
done
echo
echo "\`scripts/fuzz.sh --long $RUNS\`, $(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) CPUs:"
echo
echo "| target | executions | seconds | exec/s | crashes |"
echo "|---|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
exit "$failed"
