#!/usr/bin/env bash
# Instructions per received datagram on the RX lcore, counted by valgrind's
# callgrind: a figure that does not move with where the two virtual CPUs
# land on the host (the cross-CPU rates here swing 2x between runs), so two
# builds, or the pipeline and its floor, compare exactly.
#
#   bash scripts/instr.sh CONFIG [-- extra `udpdemux run` flags]
#   bash scripts/instr.sh target/bench/instr.toml
#   bash scripts/instr.sh target/bench/instr.toml -- --floor pipeline
#
# Prints one line: received, delivered, and per received datagram the RX
# lcore's instructions in all, in the PMD's rx_burst and in the rest (parse,
# lookup, accounting, staging, ring enqueue, frees). The config must not
# need hugepages (`eal.no_huge = true`: valgrind cannot map hugetlbfs as
# DPDK does) and should give every socket a rcvbuf the valgrind-slowed
# consumer cannot fill, or the count is of the drop path. BIN chooses the
# binary (default target/release/udpdemux), SECS the run (default 2).
# valgrind serialises threads (`--fair-sched=yes` takes turns), so the
# rates it reports mean nothing; only the counts do.
set -euo pipefail
cd "$(dirname "$0")/.."
CFG=${1:?usage: instr.sh CONFIG [-- run flags]}
shift
[ "${1:-}" = "--" ] && shift
BIN=${BIN:-target/release/udpdemux}
SECS=${SECS:-2}
for t in valgrind callgrind_annotate jq awk; do
  command -v "$t" >/dev/null || { echo "instr: $t not found (apt-get install valgrind jq)" >&2; exit 2; }
done
[ -x "$BIN" ] || { echo "instr: $BIN missing: cargo build --release -p udpdemux" >&2; exit 2; }
W=$(mktemp -d /tmp/udx-instr.XXXXXX)
[ -n "${INSTR_KEEP:-}" ] || trap 'rm -rf "$W"' EXIT

valgrind --tool=callgrind --fair-sched=yes --separate-threads=yes \
  --callgrind-out-file="$W/cg.out" \
  "$BIN" run --config "$CFG" --duration "$SECS" --stats-json "$W/s.json" "$@" >"$W/run.log" 2>&1 ||
  { echo "instr: the run failed: $(tail -1 "$W/run.log")" >&2; exit 1; }
RX=$(jq '.rx_packets' "$W/s.json")
DELIVERED=$(jq '[.sockets[] | .delivered] | add // 0' "$W/s.json")
[ "$RX" -gt 0 ] || { echo "instr: nothing received" >&2; exit 1; }

# The RX lcore's file: the thread that called rx_burst most (inclusive count).
best="" best_rx=0 best_total=0
for f in "$W"/cg.out-*; do
  ann=$(callgrind_annotate --auto=no --inclusive=yes "$f" 2>/dev/null || true)
  burst=$(awk '/rte_eth_rx_burst__extern/ { gsub(",", "", $1); print $1; exit }' <<<"$ann")
  [ -n "$burst" ] || continue
  if [ "$burst" -gt "$best_rx" ]; then
    best=$f best_rx=$burst
    best_total=$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }' <<<"$ann")
  fi
done
[ -n "$best" ] || { echo "instr: no thread called rx_burst" >&2; exit 1; }
awk -v rx="$RX" -v del="$DELIVERED" -v tot="$best_total" -v burst="$best_rx" 'BEGIN {
  printf "received %d delivered %d; RX lcore instructions per received datagram: %.0f (rx_burst %.0f, the rest %.0f)\n",
    rx, del, tot / rx, burst / rx, (tot - burst) / rx
}'
