#!/usr/bin/env bash
# The loom model check of the stage/election/drain protocol
# (app/tests/loom_stage.rs) and the main lcore's wake-up (app/tests/loom_wake.rs).
#
#   scripts/loom.sh                      build and check every model
#   scripts/loom.sh --no-run             build only (scripts/test.sh, before the models run)
#   scripts/loom.sh -- --test-threads=1  one model at a time (scripts/test.sh)
#
# Its own target dir (`--cfg loom` changes every crate) and its own `loom`
# profile (Cargo.toml: optimised where the models spend their time, no LTO,
# dependencies that are only linked unoptimised). LOOM_MAX_PREEMPTIONS sets
# the preemption bound (2 unless set).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2} \
  exec cargo test -p udpdemux --profile loom --test loom_stage --test loom_wake "$@"
