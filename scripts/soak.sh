#!/usr/bin/env bash
# Soak (issue 14; not in CI): mixed traffic for a long time while an operator
# keeps poking the engine, then a check that nothing drifted.
#
#   bash scripts/soak.sh                  # 30 minutes (SOAK_SECS=1800)
#   SOAK_SECS=180 bash scripts/soak.sh    # a short rehearsal
#
# Traffic: two net_pcap queues polled by one RX lcore, replayed without end:
# the flood (conf/traffic/flood.toml: a victim gets 90%) and the size/VLAN mix
# with malformed frames (conf/traffic/mix.toml). While it runs, every
# SOAK_STEP seconds (default 5) the script samples the process (VmRSS, and
# RssAnon / RssFile apart; ANON_DRIFT_KB bounds the heap's growth) and
# DPDK telemetry (/udpdemux/stats: pool free, memzones, heap; /udpdemux/sockets:
# rmem and delivered per socket), and it alternates operator actions by SIGHUP:
# the victim's consumer paused (consume_rate_pps = 1) and resumed (0 =
# unlimited), an extra socket added and removed, an invalid edit (a colliding
# socket) that must be refused whole. At the end it stops the engine with
# SIGINT and checks:
#   - the books balance (exit JSON) and the engine exited 0;
#   - RSS: the last quarter's mean within SOAK_RSS_DRIFT_PCT (default 5%) of
#     the second quarter's (the first quarter includes warm-up);
#   - memzones and DPDK heap bytes: the same at every sample taken while the
#     extra socket was absent (no reload leaks);
#   - pool free count: the last quarter's minimum not below half the second
#     quarter's minimum;
#   - delivered rate: the last quarter's median within 50% of the second
#     quarter's (a wide band: cross-CPU rates are bimodal on these VMs).
# Writes $SOAK_DIR (default target/soak): samples.csv, soak.png (gnuplot:
# RSS, pool free, rmem per socket, delivered rate over time), engine.log,
# exit.json, and prints a Markdown summary. Exit 0 only if every check holds.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SOAK_SECS:-1800}
STEP=${SOAK_STEP:-5}
DRIFT=${SOAK_RSS_DRIFT_PCT:-5}
W=${SOAK_DIR:-$PWD/target/soak}
BIN=${BIN:-target/release/udpdemux}
PREFIX="udpdemux-soak-$$"
mkdir -p "$W"; rm -f "$W"/*
log() { echo "soak: $*" >&2; }
die() { log "error: $*"; exit 2; }
[ "$(id -u)" -eq 0 ] || die "the EAL needs root: run bash scripts/soak.sh as root"
for t in jq python3 gnuplot awk; do command -v "$t" >/dev/null || die "$t not found (apt-get install jq python3 gnuplot-nox)"; done
[ -x /usr/bin/dpdk-telemetry.py ] || die "/usr/bin/dpdk-telemetry.py missing: apt-get install dpdk"
if [ -z "${SOAK_NO_BUILD:-}" ]; then cargo build --release -p udpdemux --bin udpdemux >&2; fi
[ -x "$BIN" ] || die "$BIN missing"
HP=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
if grep -q hugetlbfs /proc/mounts && [ "${HP:-0}" -ge 200 ]; then NO_HUGE=false; MEM=256; else NO_HUGE=true; MEM=512; fi

"$BIN" gen --config conf/traffic/flood.toml --count 8192 --out "$W/flood.pcap" >/dev/null
"$BIN" gen --config conf/traffic/mix.toml --count 4096 --out "$W/mix.pcap" >/dev/null

write_cfg() { # VICTIM_RATE EXTRA(0|1|bad)
  cat >"$W/soak.toml" <<EOF
[eal]
lcores = "0,1"
memory_mb = $MEM
no_huge = $NO_HUGE
no_pci = true
file_prefix = "$PREFIX"
vdevs = ["net_pcap0,rx_pcap=$W/flood.pcap,rx_pcap=$W/mix.pcap,infinite_rx=1"]

[engine]
stats_interval_ms = 1000

[mempool]
mbufs = 32767
cache = 256

[[port]]
name = "net_pcap0"
rx_queues = 2

[[lcore]]
id = 1
role = "rx"
queues = ["net_pcap0:0", "net_pcap0:1"]

[[socket]]
name = "dns4"
local = "198.18.1.1:53"

[[socket]]
name = "echo4"
local = "198.18.1.2:7"

[[socket]]
name = "app4"
local = "198.18.1.3:5000"

[[socket]]
name = "dns6"
local = "[fd00::1]:53"

[[socket]]
name = "app6"
local = "[fd00::2]:5000"

[[socket]]
name = "victim"
local = "198.18.1.9:9999"
consume_rate_pps = $1
EOF
  case $2 in
    1) printf '\n[[socket]]\nname = "extra"\nlocal = "198.18.1.10:1234"\n' >>"$W/soak.toml" ;;
    bad) printf '\n[[socket]]\nname = "clash"\nlocal = "198.18.1.1:53"\n' >>"$W/soak.toml" ;;
  esac
}
write_cfg 0 0
"$BIN" run --config "$W/soak.toml" --stats-json "$W/exit.json" >"$W/engine.log" 2>&1 &
PID=$!
trap 'kill -INT $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "socket victim" "$W/engine.log" 2>/dev/null && break; sleep 0.1; done
kill -0 "$PID" 2>/dev/null || die "engine did not start: $(tail -3 "$W/engine.log")"
log "engine pid $PID, ${SECS}s, sample every ${STEP}s; samples in $W/samples.csv"

echo "t,rss_kb,pool_free,memzones,heap_bytes,delivered,rmem_dns4,rmem_dns6,rmem_victim,extra,rss_anon_kb,rss_file_kb" >"$W/samples.csv"
START=$(date +%s)
i=0; extra=0
while :; do
  now=$(date +%s); t=$((now - START))
  [ "$t" -ge "$SECS" ] && break
  kill -0 "$PID" 2>/dev/null || die "engine exited during the soak: $(tail -3 "$W/engine.log")"
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
  # Anonymous memory (the heap: what a leak grows) apart from file-backed
  # pages (code of the binary and DPDK's libraries, touched as paths first run).
  anon=$(awk '/RssAnon/ {print $2}' "/proc/$PID/status")
  file=$(awk '/RssFile/ {print $2}' "/proc/$PID/status")
  tel=$(printf '/udpdemux/stats\n/udpdemux/sockets\n' | timeout 10 python3 /usr/bin/dpdk-telemetry.py -f "$PREFIX" 2>/dev/null | grep '^{' || true)
  row=$(printf '%s\n' "$tel" | jq -rs --arg t "$t" --arg rss "$rss" --arg extra "$extra" '
    (map(."/udpdemux/stats" // empty) | .[0] // {}) as $s
    | (map(."/udpdemux/sockets" // empty) | .[0] // {}) as $k
    | [$t, $rss, ($s.pool_free // ""), ($s.memzones // ""), ($s.heap_alloc_bytes // ""),
       ([$k[] | .delivered] | add // ""), ($k.dns4.rmem // ""), ($k.dns6.rmem // ""), ($k.victim.rmem // ""), $extra] | map(tostring) | join(",")')
  echo "$row,$anon,$file" >>"$W/samples.csv"
  # Operator actions, one every other sample, in a fixed rotation.
  case $((i % 8)) in
    1) write_cfg 1 "$extra"; kill -HUP "$PID" ;;              # victim's consumer paused
    3) write_cfg 1 1; extra=1; kill -HUP "$PID" ;;             # extra socket added
    5) write_cfg 1 bad; kill -HUP "$PID" ;;                    # refused whole (collision)
    7) write_cfg 0 0; extra=0; kill -HUP "$PID" ;;             # resumed, extra removed
  esac
  i=$((i + 1))
  sleep "$STEP"
done
# End with the original config applied, then stop.
write_cfg 0 0; kill -HUP "$PID"; sleep 1
trap - EXIT
kill -INT "$PID"
rc=0; wait "$PID" || rc=$?

FAIL=0
check() { if [ "$1" = ok ]; then echo "- ok: $2"; else echo "- **FAILED**: $2"; FAIL=1; fi; }
{
echo "## udpdemux soak"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), ${SECS} s, a sample every ${STEP} s ($(($(wc -l <"$W/samples.csv") - 1)) samples), $(nproc) CPUs, $( [ "$NO_HUGE" = true ] && echo no hugepages || echo 2 MB hugepages). Command: \`SOAK_SECS=$SECS bash scripts/soak.sh\`."
echo
[ "$rc" -eq 0 ] && check ok "engine exited 0 after SIGINT" || check bad "engine exited $rc"
bal=$(jq -r '.books_balanced // false' "$W/exit.json" 2>/dev/null || echo false)
[ "$bal" = true ] && check ok "books balanced at exit ($(jq -r '.rx_packets' "$W/exit.json") frames received)" || check bad "books: $(jq -c '.problems // "no exit JSON"' "$W/exit.json" 2>/dev/null)"
refused=$(grep -c "reload rejected" "$W/engine.log" || true)
echo "- reloads: $(grep -c "SIGHUP" "$W/engine.log" || true) SIGHUP log lines, $refused refused whole (the colliding edit)"
awk -F, -v drift="$DRIFT" -v adrift="${ANON_DRIFT_KB:-64}" '
  NR == 1 { next }
  { n++; t[n] = $1; rss[n] = $2; pf[n] = $3; mz[n] = $4; hp[n] = $5; dl[n] = $6; ex[n] = $10; an[n] = $11; fl[n] = $12 }
  function q(a, b,   i, s, c) { s = 0; c = 0; for (i = a; i <= b; i++) if (rss[i] != "") { s += rss[i]; c++ } return c ? s / c : 0 }
  function qa(a, b,   i, s, c) { s = 0; c = 0; for (i = a; i <= b; i++) if (an[i] != "") { s += an[i]; c++ } return c ? s / c : 0 }
  function qf(a, b,   i, s, c) { s = 0; c = 0; for (i = a; i <= b; i++) if (fl[i] != "") { s += fl[i]; c++ } return c ? s / c : 0 }
  function mn(a, b,   i, m) { m = -1; for (i = a; i <= b; i++) if (pf[i] != "" && (m < 0 || pf[i] + 0 < m)) m = pf[i] + 0; return m }
  function rate(i) { return (dl[i] != "" && dl[i-1] != "" && t[i] > t[i-1]) ? (dl[i] - dl[i-1]) / (t[i] - t[i-1]) : -1 }
  function med(a, b,   i, k, v, x, y, tmp) { k = 0; for (i = (a < 2 ? 2 : a); i <= b; i++) { x = rate(i); if (x >= 0) v[++k] = x }
    for (x = 1; x <= k; x++) for (y = x + 1; y <= k; y++) if (v[y] < v[x]) { tmp = v[x]; v[x] = v[y]; v[y] = tmp }
    return k ? v[int((k + 1) / 2)] : -1 }
  END {
    if (n < 8) { print "- **FAILED**: fewer than 8 samples (" n "): run longer"; exit 1 }
    a = int(n / 4) + 1; b = int(n / 2); c = int(3 * n / 4) + 1
    r2 = q(a, b); r4 = q(c, n); d = r2 > 0 ? (r4 - r2) / r2 * 100 : 0
    printf "- %s: RSS second quarter %.0f kB, last quarter %.0f kB (%+.1f%%, limit %s%%)\n", (d <= drift ? "ok" : "**FAILED**"), r2, r4, d, drift
    bad = (d > drift)
    a2 = qa(a, b); a4 = qa(c, n); f2 = qf(a, b); f4 = qf(c, n)
    if (a2 > 0) {
      # The heap must be flat once the rotation has run its course: at most
      # ANON_DRIFT_KB more in the last quarter than in the second.
      ad = a4 - a2
      printf "- %s: anonymous RSS second quarter %.0f kB, last quarter %.0f kB (%+.0f kB, limit %s kB); file-backed %.0f / %.0f kB\n", (ad <= adrift ? "ok" : "**FAILED**"), a2, a4, ad, adrift, f2, f4
      if (ad > adrift) bad = 1
    }
    m0 = ""; h0 = ""; same = 1
    for (i = 1; i <= n; i++) if (ex[i] == 0 && mz[i] != "") { if (m0 == "") { m0 = mz[i]; h0 = hp[i] } else if (mz[i] != m0 || hp[i] != h0) { same = 0; mi = i } }
    if (same) printf "- ok: memzones %s and DPDK heap %s B at every sample without the extra socket\n", m0, h0
    else { printf "- **FAILED**: memzones/heap drifted: %s / %s at first, %s / %s at t=%s s\n", m0, h0, mz[mi], hp[mi], t[mi]; bad = 1 }
    p2 = mn(a, b); p4 = mn(c, n)
    printf "- %s: pool free minimum second quarter %d, last quarter %d\n", (p4 * 2 >= p2 ? "ok" : "**FAILED**"), p2, p4
    if (p4 * 2 < p2) bad = 1
    m2 = med(a, b); m4 = med(c, n)
    ok = (m2 <= 0) || (m4 >= m2 * 0.5 && m4 <= m2 * 1.5)
    printf "- %s: delivered rate median second quarter %.2f Mpps, last quarter %.2f Mpps\n", (ok ? "ok" : "**FAILED**"), m2 / 1e6, m4 / 1e6
    if (!ok) bad = 1
    exit bad
  }' "$W/samples.csv" || FAIL=1
echo
echo "Plot: \`$W/soak.png\` (RSS, pool free, rmem of dns4/dns6/victim, delivered rate)."
} | tee "$W/soak.md"
grep -q "FAILED" "$W/soak.md" && FAIL=1

gnuplot <<EOF || log "gnuplot failed (plot only)"
set terminal pngcairo size 1200,900 noenhanced
set output "$W/soak.png"
set datafile separator ","
set key autotitle columnhead
set multiplot layout 2,2 title "udpdemux soak: ${SECS} s"
set xlabel "seconds"
set y2tics; set ytics nomirror
set title "RSS (kB): total (left), anonymous (right)"; plot "$W/samples.csv" using 1:2 axes x1y1 with lines title "RSS", "" using 1:11 axes x1y2 with lines title "anonymous"
unset y2tics; set ytics mirror
set title "RX pool free mbufs"; plot "$W/samples.csv" using 1:3 with lines notitle
set title "rmem per socket (bytes)"; plot "$W/samples.csv" using 1:7 with lines title "dns4", "" using 1:8 with lines title "dns6", "" using 1:9 with lines title "victim"
prev = NaN; tprev = NaN
set title "delivered (datagrams/s)"; plot "$W/samples.csv" using 1:(d = (\$6 - prev) / (\$1 - tprev), prev = \$6, tprev = \$1, d) with lines notitle
unset multiplot
EOF
exit "$FAIL"
