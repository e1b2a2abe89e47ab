#!/usr/bin/env bash
# The RX lcore's hot spots, per source function and per instruction address,
# in nanoseconds per received datagram: `perf record -e cpu-clock` of one
# engine run, the RX thread's samples mapped through `addr2line -i` to the
# innermost frame of our own source (scripts/hotspots.py says how, and how
# to read a hot address). What `scripts/profile.sh` cannot show, since the
# whole RX path is inlined into one symbol.
#
#   bash scripts/hotspots.sh CONFIG [-- extra `udpdemux run` flags]
#   bash scripts/hotspots.sh target/bench/pair-pipe-1.toml
#   BIN=/tmp/other-build bash scripts/hotspots.sh CONFIG -- --floor pipeline
#
# BIN (default target/release/udpdemux), SECS (default 4), THREAD (default
# rte-worker-1, the first RX lcore's thread), TOP_FN and TOP_ADDR (rows).
# Needs root, perf (linux-perf), jq, binutils and python3. The RX lcore polls
# without sleeping, so its samples cover the run: a sample is (run time /
# received datagrams) / samples nanoseconds of each datagram.
set -euo pipefail
cd "$(dirname "$0")/.."
CFG=${1:?usage: hotspots.sh CONFIG [-- run flags]}
shift
[ "${1:-}" = "--" ] && shift
BIN=$(realpath "${BIN:-target/release/udpdemux}")
SECS=${SECS:-4}
THREAD=${THREAD:-rte-worker-1}
for t in perf jq python3 addr2line objdump readelf; do
  command -v "$t" >/dev/null || { echo "hotspots: $t not found (apt-get install linux-perf jq python3 binutils)" >&2; exit 2; }
done
[ -x "$BIN" ] || { echo "hotspots: $BIN missing: cargo build --release -p udpdemux" >&2; exit 2; }
W=$(mktemp -d /tmp/udx-hotspots.XXXXXX)
[ -n "${HOTSPOTS_KEEP:-}" ] || trap 'rm -rf "$W"' EXIT
perf record -q -e cpu-clock -F 4999 -o "$W/perf.data" -- \
  "$BIN" run --config "$CFG" --duration "$SECS" --stats-json "$W/s.json" "$@" >"$W/run.log" 2>&1 ||
  { echo "hotspots: the run failed: $(tail -1 "$W/run.log")" >&2; exit 1; }
RX=$(jq '.rx_packets' "$W/s.json")
[ "$RX" -gt 0 ] || { echo "hotspots: nothing received" >&2; exit 1; }
N=$(perf script -i "$W/perf.data" -F comm 2>/dev/null | awk -v t="$THREAD" '$1 == t { n++ } END { print n + 0 }')
[ "$N" -gt 0 ] || { echo "hotspots: no samples of thread $THREAD" >&2; exit 1; }
NS=$(awk -v s="$SECS" -v rx="$RX" -v n="$N" 'BEGIN { printf "%.9f", s * 1e9 / rx / n }')
echo "received $RX in $SECS s: $(awk -v s="$SECS" -v rx="$RX" 'BEGIN { printf "%.1f", s * 1e9 / rx }') ns per datagram on the RX lcore"
python3 scripts/hotspots.py "$W/perf.data" "$THREAD" "$BIN" "$NS" "${TOP_FN:-25}" "${TOP_ADDR:-20}"
