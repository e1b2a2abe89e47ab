#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: set-up (packages,
# hugepages), build, clippy, unit + EAL-backed integration tests, the loom
# model check of the stage protocol, and a bounded fuzz run of the parser.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/as-root.sh
step() { echo; echo "=== $* ($(date +%T))"; }
# Every step runs under `timeout` (generous limits, minutes, overridable), so
# a hung test fails the run with a message instead of holding CI until its
# own limit. `timeout -k` kills what ignores the TERM.
limit() {
  local mins=$1; shift
  local rc=0
  timeout -k 30 "${mins}m" "$@" || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "=== TIMEOUT after ${mins} min: $*" >&2
  fi
  return "$rc"
}

step "setup (scripts/setup.sh)"
limit "${T_SETUP:-15}" bash scripts/setup.sh

step "formatting (cargo fmt --check: the workspace and fuzz/)"
command -v rustfmt >/dev/null || { echo "test: rustfmt missing: rustup component add rustfmt" >&2; exit 1; }
limit 5 cargo fmt --all --check
if [ -d fuzz ]; then (cd fuzz && limit 5 cargo fmt --check); fi

step "build"
limit "${T_BUILD:-30}" cargo build --workspace --all-targets

step "clippy -D warnings"
limit "${T_CLIPPY:-20}" cargo clippy --workspace --all-targets -- -D warnings

step "tests (cargo test --workspace: unit, proptest, EAL-backed subprocess tests)"
# The QUIC echo test moves 100 streams x QUIC_ECHO_BYTES each way: 2 MiB per
# stream here keeps it near 30 s on two CPUs; the example's full 10 MB per
# stream (about 2 minutes): QUIC_ECHO_BYTES=10485760 cargo test -p udpdemux-quinn
export QUIC_ECHO_BYTES="${QUIC_ECHO_BYTES:-2097152}"
limit "${T_TEST:-45}" cargo test --workspace

if [ -f app/tests/loom_stage.rs ]; then
  step "loom model check of the stage/election/drain protocol and the main lcore's wake-up"
  # scripts/loom.sh: the `loom` profile and target dir.
  loom() { limit "${T_LOOM:-30}" bash scripts/loom.sh "$@"; }
  loom --no-run
  # One model at a time: two at once on two CPUs took longer than both in
  # a row (loom_stage: 290 s with two test threads, 167 s with one, on the
  # 2-CPU VM; loom maps a coroutine stack per modelled thread). The other
  # CPU builds the fuzz targets meanwhile: the models are deterministic
  # (no timing in them), so sharing the machine cannot fail them.
  fuzz_build=""
  if [ -d fuzz ]; then
    echo "(building the fuzz targets beside the models: target/fuzz-build.log)"
    mkdir -p target
    timeout -k 30 "${T_FUZZ:-20}m" bash scripts/fuzz.sh --build >target/fuzz-build.log 2>&1 &
    fuzz_build=$!
  fi
  loom -- --test-threads=1
fi

if [ -d fuzz ]; then
  step "fuzz the parser and demux (${FUZZ_SECS:-12} s per target)"
  if [ -n "${fuzz_build:-}" ]; then
    if ! wait "$fuzz_build"; then
      tail -n 40 target/fuzz-build.log >&2
      echo "=== the fuzz targets did not build (target/fuzz-build.log)" >&2
      exit 1
    fi
  fi
  limit "${T_FUZZ:-20}" bash scripts/fuzz.sh "${FUZZ_SECS:-12}"
fi

step "all tests passed"
