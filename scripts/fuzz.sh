#!/usr/bin/env bash
# Bounded fuzz run of every cargo-fuzz target (parse, demux, control): SECS seconds each.
# cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain
# accept them (the only toolchain these machines have).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
export RUSTC_BOOTSTRAP=1
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz from crates.io"
  cargo install --locked cargo-fuzz >/dev/null
fi
for t in parse demux control; do
  echo "fuzz: target $t for ${SECS}s"
  mkdir -p "fuzz/corpus/$t"
  seeds=(); [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
  cargo fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" "${seeds[@]}" -- -max_total_time="$SECS" -rss_limit_mb=2048 2>&1 | tail -n 3
done
