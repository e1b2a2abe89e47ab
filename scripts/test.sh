#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: set-up (packages,
# hugepages), build, clippy, unit + EAL-backed integration tests, the loom
# model check of the stage protocol, and a bounded fuzz run of the parser.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo; echo "=== $* ($(date +%T))"; }

step "setup (scripts/setup.sh)"
bash scripts/setup.sh

step "build"
cargo build --workspace --all-targets

step "clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "tests (cargo test --workspace: unit, proptest, EAL-backed subprocess tests)"
cargo test --workspace

if [ -f app/tests/loom_stage.rs ]; then
  step "loom model check of the stage/election/drain protocol"
  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2} \
    cargo test -p udpdemux --release --test loom_stage
fi

if [ -d fuzz ]; then
  step "fuzz the parser and demux (${FUZZ_SECS:-60} s per target)"
  bash scripts/fuzz.sh "${FUZZ_SECS:-60}"
fi

step "all tests passed"
