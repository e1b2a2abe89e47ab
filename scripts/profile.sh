#!/usr/bin/env bash
# Where a datagram's time goes: `perf record -e cpu-clock` of one engine run,
# split by thread (the RX lcore, the main lcore that consumes) and by what the
# samples' symbols belong to, as nanoseconds per delivered datagram. Both
# threads poll without sleeping, so each is one CPU for the whole run and a
# category's share of a thread's samples times (run time / delivered) is its
# cost per datagram.
#
#   bash scripts/profile.sh CONFIG [SECS] [-- extra `udpdemux run` flags]
#   bash scripts/profile.sh target/bench/pipe-4m.toml 3
#   bash scripts/profile.sh target/bench/pipe-4m.toml 3 -- --floor pipeline
#
# BIN (default target/release/udpdemux) chooses the binary, so two builds can
# be profiled on the same config. Needs perf (Debian: linux-perf) and jq.
# Stage, drain and metadata code is inlined into the RX loop, so it shows as
# one row ("rx loop: stage, drain, metadata, counters"; with `--floor
# pipeline`, the floor's own loop); parse, lookup, the PMD, ring operations
# and frees keep their own symbols. On the main lcore, the consumer row holds
# the per-poll work of consuming (burst arrays, registry loads) as well.
set -euo pipefail
cd "$(dirname "$0")/.."
CFG=${1:?usage: profile.sh CONFIG [SECS] [-- run flags]}
SECS=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
[ "${1:-}" = "--" ] && shift
BIN=${BIN:-target/release/udpdemux}
W=$(mktemp -d /tmp/udx-profile.XXXXXX)
trap 'rm -rf "$W"' EXIT
for t in perf jq awk; do command -v "$t" >/dev/null || { echo "profile: $t not found (apt-get install linux-perf jq)" >&2; exit 2; }; done
[ -x "$BIN" ] || { echo "profile: $BIN missing: cargo build --release -p udpdemux" >&2; exit 2; }

perf record -q -e cpu-clock -o "$W/perf.data" -- "$BIN" run --config "$CFG" --duration "$SECS" --stats-json "$W/s.json" "$@" >"$W/run.log" 2>&1
DELIVERED=$(jq '[.sockets[] | .delivered] | add // 0' "$W/s.json")
RX=$(jq '.rx_packets' "$W/s.json")
SEC=$(jq '.seconds' "$W/s.json")
[ "$DELIVERED" -gt 0 ] || DELIVERED=$RX

perf report -i "$W/perf.data" --no-children --sort comm,dso,sym --stdio -F overhead,comm,dso,sym 2>/dev/null |
  awk -v sec="$SEC" -v del="$DELIVERED" -v rx="$RX" '
  /^#/ || NF < 4 { next }
  {
    pct = $1; sub(/%/, "", pct); comm = $2; dso = $3
    sym = ""; for (i = 5; i <= NF; i++) sym = sym " " $i
    thread = (comm ~ /^rte-worker/) ? "RX lcore" : (comm ~ /^(udpdemux|udx)/ ? "main lcore" : "other")
    if (dso ~ /net_pcap|net_null|net_ring|net_memif|af_packet/ || sym ~ /rx_burst|mempool|pktmbuf_alloc/) cat = "PMD receive and buffer allocation"
    else if (sym ~ /udpdemux::parse::/) cat = "parse (headers, checksums)"
    else if (sym ~ /flow_table/) cat = "early-demux lookup"
    else if (sym ~ /ring_enqueue/) cat = "delivery ring enqueue"
    else if (sym ~ /ring_dequeue|looks_empty/) cat = "delivery ring dequeue"
    else if (sym ~ /free_bulk|pktmbuf_free|refcnt/) cat = "mbuf free"
    else if (sym ~ /rx_loop|process_|Elected|drain_node|enqueue_batch|RingSink|receive::|pipeline_floor/ || (thread == "RX lcore" && sym ~ /call_once/)) cat = "rx loop: stage, drain, metadata, counters"
    else if (sym ~ /consum|Consumer|Socket::|memset|arc_swap/) cat = "consumer: dequeue, count, release"
    else if (sym ~ /clock_gettime|Instant|Timespec|main_loop|engine::run/) cat = "main loop (timers, polling)"
    else cat = "other"
    key = thread "\t" cat; share[key] += pct; tot[thread] += pct
  }
  END {
    for (key in share) {
      split(key, k, "\t"); if (k[1] == "other") continue
      s = share[key] / tot[k[1]]
      if (s < 0.01) continue
      printf "%s\t%09.4f\t| %s | %s | %.0f%% | %.1f |\n", k[1], 1 - s, k[1], k[2], s * 100, s * sec * 1e9 / del
    }
    printf "~\tRun: %.2f s, %d received (%.2f Mpps), %d delivered (%.2f Mpps); each thread is one CPU for the run, so its total is %.1f ns per delivered datagram.\n", sec, rx, rx / sec / 1e6, del, del / sec / 1e6, sec * 1e9 / del
  }' | sort | {
    echo "| thread | where | share of the thread | ns per delivered datagram |"
    echo "|---|---|---:|---:|"
    while IFS=$'\t' read -r a b c; do
      if [ "$a" = "~" ]; then echo; echo "$b"; else echo "$c"; fi
    done
  }
