#!/usr/bin/env bash
# Builds what the last two steps of scripts/test.sh run, the loom models and
# then the fuzz targets, while the earlier steps (build, clippy, tests) run.
# scripts/test.sh starts it at idle priority (SCHED_IDLE), so it only takes
# CPU time those steps leave unused and cannot slow a timed test.
#
# Writes target/prebuild/{loom,fuzz}.log and, when each build ends, its exit
# status to target/prebuild/{loom,fuzz}.rc (test.sh waits for these).
set -uo pipefail
cd "$(dirname "$0")/.."
dir=target/prebuild
mkdir -p "$dir"
if [ -f app/tests/loom_stage.rs ]; then
  rc=0
  timeout -k 30 "${T_LOOM:-30}m" bash scripts/loom.sh --no-run >"$dir/loom.log" 2>&1 || rc=$?
  echo "$rc" >"$dir/loom.rc"
fi
if [ -d fuzz ]; then
  rc=0
  timeout -k 30 "${T_FUZZ:-20}m" bash scripts/fuzz.sh --build >"$dir/fuzz.log" 2>&1 || rc=$?
  echo "$rc" >"$dir/fuzz.rc"
fi
