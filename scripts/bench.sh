#!/usr/bin/env bash
# The whole product measured side by side, in one run, on the same traffic and
# the same cores (issue 8; also the figures issues 3, 4 and 5 ask for):
#
#   - dpdk-testpmd --forward-mode=rxonly: the limit of this vdev (not our code)
#   - udpdemux run --bare: our own rx-and-free loop (the reference for ratios)
#   - udpdemux run: the full pipeline (parse, demux, stage, deliver, consume)
#     at several datagram sizes and for every enqueue strategy
#   - the pipeline against its reference, `udpdemux run --floor pipeline`
#     (the minimal cross-core pipeline on the same config and cores), in
#     alternating pairs with a 4 MiB rcvbuf; the pipeline with the default
#     rcvbuf; the pipeline against the kernel (issue 13)
#   - the delivered rate to an out-of-process client (`udpdemux-client`'s
#     `bench` example, a DPDK secondary on CPU 0 that opens every socket)
#     against the in-process pipeline (the main lcore consuming on CPU 0), on
#     the pipeline section's replay, config and cores, in alternating pairs
#     (issue 16; the client shares CPU 0 with the idle main lcore, said so)
#   - DPDK's capture server (issue 19): the pipeline with `[capture] pdump`
#     on (no capture attached) against off, in alternating pairs; with
#     dpdk-dumpcap capturing every frame to /dev/null against the same run
#     before it attached; and with Prometheus scraped every 100 ms against
#     not scraped, in alternating pairs
#   - the flood scenario (one slow victim socket gets 90%) per strategy, with
#     and without the flood, the small-buffer cache on and off
#   - the flood with two RX lcores pushing into the same victim socket, one
#     per CPU, each its own virtual node: numa-queues against busylock (issue
#     13 item 6; the main lcore shares CPU 0 with one RX lcore there)
#   - memory: peak RSS and mempool sizes, a run 10x longer for the same peak
#   - an external sender: dpdk-testpmd --forward-mode=txonly (and udpdemux gen)
#     feeding the engine over net_memif, books checked against the sender
#   - parse + lookup ns/packet for 16 .. 1 000 000 sockets (udpdemux bench-demux)
#   - a kernel baseline: recvmmsg(2) on a loopback UDP socket, same payloads
#   - the exception path (issue 19): UDP delivered while a flood of TCP frames
#     goes to the kernel through a net_tap port under its rate limit, against
#     the same replay with the path off and against the UDP frames alone
#   - send_burst's rate to one destination, 64-byte payloads, against
#     dpdk-testpmd --forward-mode=txonly on the same port (net_null, no-rx),
#     in alternating pairs (issue 17; the `send_bench` example)
#   - reassembly (issue 18): datagrams delivered per second from a replay of
#     IPv4 datagrams cut into 2 and into 3 fragments, against the unfragmented
#     1400-byte replay (the largest payload one frame holds) on the same config
#     and cores, one RX lcore (so no steering)
#   - the DNS example's answered queries per second, engine mode (queries
#     replayed by net_pcap into the engine, the responder a client process)
#     against kernel mode (recvmmsg/sendmmsg on loopback), the same queries
#     from the same generator (the udpdemux-dns `dns_load` example) (issue 17)
#   - QUIC bulk transfer and handshakes (issue 20): the quic_echo example's
#     quinn server on udpdemux (net_af_packet on a veth) against the same
#     server on quinn's default tokio UDP socket (the kernel's UDP, GRO/GSO)
#     on the same veth, the same kernel-socket quic_client in a network
#     namespace, in alternating pairs; echoed bytes per second, then full
#     handshakes per second (fresh connections, no resumption), and the ratios
#
# Prints Markdown (also written to $BENCH_DIR/bench.md); exits non-zero if the
# books of any run do not balance. A full run (no BENCH_ONLY) whose books
# balance also writes the report into docs/benchmarks.md, between its
# `<!-- bench:begin -->` and `<!-- bench:end -->` lines (scripts/bench-docs.sh);
# the hand-written notes per goal above them stay as they are. Performance runs: main lcore on CPU 0, one
# RX lcore on CPU 1 (eal.lcores = "0,1"); never two busy lcores on one CPU,
# except the memif sender, which must share CPU 0 with the engine's main lcore
# on a 2-CPU machine (its figures are marked as context), and the two-producer
# flood (flood2), whose second RX lcore shares CPU 0 with the main lcore (its
# section says so), and the out-of-process client, which runs on CPU 0 beside
# the engine's main lcore (idle then: the client consumes; its section says so).
#
#   bash scripts/bench.sh            # about 7 minutes after the build
#   BENCH_SECS=5 bash scripts/bench.sh
#   BENCH_ONLY=flood2,pipeline BENCH_SECS=2 bash scripts/bench.sh
#
# Environment:
#   BENCH_SECS     seconds per measured run (default 3)
#   BENCH_ONLY     comma-separated sections to run and report (default: all):
#                    rate      testpmd rxonly, bare loop and pipeline at 64/512/1400 B,
#                              every strategy, small cache off, 1 000 000 sockets
#                    rxcore    --demux-only against --bare and the floors, three rounds;
#                              scripts/tlb_reach.c (a big table's spread, no engine)
#                    pipeline  --floor pipeline / pipeline pairs (4 MiB rcvbuf) and the
#                              pipeline with the default rcvbuf (kernel ratio needs kernel)
#                    instr     instructions per received datagram on the RX lcore (valgrind's
#                              callgrind): pipeline, --floor pipeline, --floor pipeline-demux,
#                              --demux-only; exact, unlike the cross-CPU rates
#                    client    out-of-process client / in-process pipeline pairs (hugepages only)
#                    pdump     [capture] pdump on (no capture) / off pairs, a running
#                              dpdk-dumpcap's cost, Prometheus scraped every 100 ms /
#                              not scraped pairs (hugepages only)
#                    flood     one RX lcore, one slow victim, per strategy
#                    flood2    two RX lcores (one per CPU) into one slow victim
#                    memory    the 10x longer run (peak RSS)
#                    memif     external senders over net_memif (hugepages only)
#                    demux     udpdemux bench-demux (parse + lookup ns/packet)
#                    kernel    recvmmsg(2) baseline
#                    exception UDP delivered under a TCP flood to the exception
#                              port (net_tap, rate-limited), path off, no limit
#                    send      send_burst (send_bench) / testpmd txonly pairs on net_null
#                    reasm     2- and 3-fragment datagrams / the unfragmented 1400 B replay
#                    dns       DNS example: engine mode / kernel mode answered queries per second
#                              (engine mode needs hugepages: the responder is a client process)
#                    quic      QUIC echo bulk transfer, then handshakes per second:
#                              quinn on udpdemux / quinn on kernel UDP
#                              (needs ip, ethtool: a veth pair and a network namespace)
#                  Rows that compare with a section not run show "-" or n/a.
#   BENCH_PAIRS    floor/pipeline pairs in "pipeline" (default 5, at least 1)
#   BENCH_CLIENT_PAIRS  pipeline/client pairs in "client" (default 3, at least 1)
#   BENCH_PDUMP_PAIRS   pdump on/off and scraped/not pairs in "pdump" (default 5)
#   BENCH_PDUMP_CAPTURES  runs with dumpcap attached in "pdump" (default 3)
#   BENCH_FLOOD2_RUNS        runs per strategy in "flood2" (default 3)
#   BENCH_FLOOD2_VICTIM_PPS  the victim's consumer cap in "flood2" (default 1000000)
#   BENCH_MCAST_ROUNDS  rounds (unicast, 1, 4, 16 members) in "mcast" (default 3, at least 1)
#   BENCH_VICTIM_PPS         the victim's consumer cap in "flood" (default 200000)
#   BENCH_EXC_PPS  exception.rate_pps in "exception" (default 10000, the config's default)
#   BENCH_EXC_ROUNDS  rounds (path on with the flood / off / UDP alone) in "exception" (default 5)
#   BENCH_SEND_PAIRS    send_bench/testpmd txonly pairs in "send" (default 3, at least 1)
#   BENCH_QUIC_PAIRS    udpdemux/kernel pairs in "quic" (default 3, at least 1)
#   BENCH_QUIC_BYTES    bytes echoed per stream (100 streams) in "quic" (default 4194304)
#   BENCH_QUIC_HANDSHAKES   fresh connections per handshake run in "quic" (default 2000)
#   BENCH_QUIC_CONCURRENCY  handshakes in flight at once in "quic" (default 16)
#   BENCH_QUIC_SWEEP    further handshake concurrencies in "quic", each its own
#                       BENCH_QUIC_PAIRS pairs (default "1 4"; empty: none)
#   BENCH_QUIC_KERNEL_RCVBUF  SO_RCVBUF of a third bulk server in "quic": the
#                       kernel backend with that receive buffer (default
#                       4194304, this host's rmem_max; 0: no third server)
#   BENCH_FRAMES   frames per replayed pcap (default 8192)
#   BENCH_DIR      output directory (default target/bench)
#   BENCH_DOCS     the file whose bench:begin/bench:end region gets the report of a
#                  full run (default docs/benchmarks.md); set it empty to leave it alone
#   BENCH_NO_BUILD set: do not build first
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

SECS=${BENCH_SECS:-3}                 # seconds per measured run
LONG=$((SECS * 10))                   # the memory run: 10x longer
FRAMES=${BENCH_FRAMES:-8192}          # frames per replayed pcap
W=${BENCH_DIR:-$REPO/target/bench}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
BIN=$TARGET/release/udpdemux
BASELINE=$TARGET/release/examples/recvmmsg_baseline
GAPS=$TARGET/release/examples/cpu_gaps
START=$(date +%s)
FAIL=0
mkdir -p "$W"
rm -f "$W"/*.json "$W"/*.log "$W"/*.toml "$W"/instr-*.txt "$W/demux.md"

log() { echo "bench: $*" >&2; }
die() { log "error: $*"; exit 2; }

SECTIONS="rate rxcore pipeline instr client pdump flood flood2 mcast memory memif demux kernel exception send reasm dns quic"
ONLY=${BENCH_ONLY:-}
for x in ${ONLY//,/ }; do
  [[ " $SECTIONS " == *" $x "* ]] || die "BENCH_ONLY: unknown section \"$x\" (sections: $SECTIONS)"
done
on() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
PAIRS=${BENCH_PAIRS:-5}
[ "$PAIRS" -ge 1 ] || die "BENCH_PAIRS must be at least 1"
CPAIRS=${BENCH_CLIENT_PAIRS:-3}
[ "$CPAIRS" -ge 1 ] || die "BENCH_CLIENT_PAIRS must be at least 1"
SPAIRS=${BENCH_SEND_PAIRS:-3}
[ "$SPAIRS" -ge 1 ] || die "BENCH_SEND_PAIRS must be at least 1"
QPAIRS=${BENCH_QUIC_PAIRS:-3}
[ "$QPAIRS" -ge 1 ] || die "BENCH_QUIC_PAIRS must be at least 1"
QBYTES=${BENCH_QUIC_BYTES:-4194304}
QHS=${BENCH_QUIC_HANDSHAKES:-2000}
[ "$QHS" -ge 1 ] || die "BENCH_QUIC_HANDSHAKES must be at least 1"
QCONC=${BENCH_QUIC_CONCURRENCY:-16}
[ "$QCONC" -ge 1 ] || die "BENCH_QUIC_CONCURRENCY must be at least 1"
QSWEEP=${BENCH_QUIC_SWEEP-1 4}
for x in $QSWEEP; do
  [[ "$x" =~ ^[1-9][0-9]*$ ]] || die "BENCH_QUIC_SWEEP: \"$x\" is not a concurrency (1 or more)"
  [ "$x" != "$QCONC" ] || die "BENCH_QUIC_SWEEP: $x is BENCH_QUIC_CONCURRENCY already (its runs are the main ones)"
done
QRCVBUF=${BENCH_QUIC_KERNEL_RCVBUF:-4194304}
[[ "$QRCVBUF" =~ ^[0-9]+$ ]] || die "BENCH_QUIC_KERNEL_RCVBUF must be a byte count (0: none)"
F2_RUNS=${BENCH_FLOOD2_RUNS:-3}
[ "$F2_RUNS" -ge 1 ] || die "BENCH_FLOOD2_RUNS must be at least 1"
F2_VRATE=${BENCH_FLOOD2_VICTIM_PPS:-1000000}
VRATE=${BENCH_VICTIM_PPS:-200000}
MC_ROUNDS=${BENCH_MCAST_ROUNDS:-3}
[ "$MC_ROUNDS" -ge 1 ] || die "BENCH_MCAST_ROUNDS must be at least 1"
EXC_PPS=${BENCH_EXC_PPS:-10000}
EXC_ROUNDS=${BENCH_EXC_ROUNDS:-5}
[ "$EXC_ROUNDS" -ge 1 ] || die "BENCH_EXC_ROUNDS must be at least 1"

for t in dpdk-testpmd jq awk timeout taskset; do
  command -v "$t" >/dev/null || die "$t not found: run bash scripts/setup.sh as root"
done
[ "$(id -u)" -eq 0 ] || die "the EAL needs root: run bash scripts/bench.sh as root"
[ "$(nproc)" -ge 2 ] || die "needs at least 2 CPUs (main lcore on CPU 0, RX lcore on CPU 1)"

if [ -z "${BENCH_NO_BUILD:-}" ]; then
  log "building (release, fat LTO: about 2 minutes on a fresh machine)"
  cargo build --release -j2 -p udpdemux --bin udpdemux --example recvmmsg_baseline --example cpu_gaps >&2
  if on client; then cargo build --release -j2 -p udpdemux-client --example bench >&2; fi
  if on send; then cargo build --release -j2 -p udpdemux --example send_bench >&2; fi
  if on dns; then cargo build --release -j2 -p udpdemux-dns --bin udpdemux-dns --example dns_load >&2; fi
  if on quic; then cargo build --release -j2 -p udpdemux-quinn --bin quic_echo --bin quic_client >&2; fi
fi
[ -x "$BIN" ] && [ -x "$BASELINE" ] || die "$BIN or $BASELINE missing: build first (unset BENCH_NO_BUILD)"
CLIENT_BENCH=$TARGET/release/examples/bench
SEND_BENCH=$TARGET/release/examples/send_bench
DNS_BIN=$TARGET/release/udpdemux-dns
DNS_LOAD=$TARGET/release/examples/dns_load
if on send; then [ -x "$SEND_BENCH" ] || die "$SEND_BENCH missing: build first (unset BENCH_NO_BUILD)"; fi
if on dns; then [ -x "$DNS_BIN" ] && [ -x "$DNS_LOAD" ] || die "$DNS_BIN or $DNS_LOAD missing: build first (unset BENCH_NO_BUILD)"; fi
if on client; then [ -x "$CLIENT_BENCH" ] || die "$CLIENT_BENCH missing: build first (unset BENCH_NO_BUILD)"; fi
QUIC_ECHO=$TARGET/release/quic_echo
QUIC_CLIENT=$TARGET/release/quic_client
if on quic; then
  [ -x "$QUIC_ECHO" ] && [ -x "$QUIC_CLIENT" ] || die "$QUIC_ECHO or $QUIC_CLIENT missing: build first (unset BENCH_NO_BUILD)"
  for t in ip ethtool; do command -v "$t" >/dev/null || die "$t not found: run sudo bash scripts/setup.sh"; done
fi

# Hugepages when there are enough (memif needs them: it shares memory between
# processes), else --no-huge (memif runs are then skipped and said so).
HP_FREE=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
if grep -q hugetlbfs /proc/mounts && [ "${HP_FREE:-0}" -ge 200 ]; then
  NO_HUGE=false; MEM_MB=256; TP_MEM=(-m 256)
else
  NO_HUGE=true; MEM_MB=512; TP_MEM=(--no-huge -m 512)
  log "fewer than 200 free hugepages: running with --no-huge (slower), memif runs skipped"
fi

# ---------------------------------------------------------------- traffic
# One spec for everything: conf/traffic/flood.toml. The flood's victim
# 198.18.1.9:9999 gets 90%; "no flood" is the same spec with --flood-share 0
# (the four other sockets share every frame), which is also the plain traffic.
SPEC=conf/traffic/flood.toml
gen_pcap() { # NAME SIZE FLOOD_SHARE
  "$BIN" gen --config "$SPEC" --count "$FRAMES" --size "$2" --flood-share "$3" --out "$W/$1.pcap" >/dev/null
}
for s in 64 512 1400; do gen_pcap "plain$s" "$s" 0; done
gen_pcap flood 64 0.9
# 1 000 000 sockets (issue 3): engine.filler_sockets binds 198.19.0.1 + i / 59976,
# port 1024 + i % 59976 (i < N) to one extra socket; this pcap spreads its
# frames over 4096 distinct bindings of the million (a stride coprime to 10^6,
# so no two coincide), so lookups land all over the table as with real sockets.
FILLER=1000000
awk -v frames="$FRAMES" 'BEGIN {
  print "seed = 11"; print "count = " frames; print "size = 64"; print "flows = 1"
  for (j = 0; j < 4096; j++) { i = (j * 244141 + 17) % 1000000
    printf "\n[[dst]]\naddr = \"198.19.0.%d:%d\"\n", 1 + int(i / 59976), 1024 + i % 59976 } }' >"$W/spread.toml"
"$BIN" gen --config "$W/spread.toml" --out "$W/spread64.pcap" >/dev/null
# The same frames to 198.19.1.x, which nothing binds: parse, a lookup that
# misses in the million-entry table, count (no socket), free. The RX core
# without staging and delivery.
sed 's/"198\.19\.0\./"198.19.1./' "$W/spread.toml" >"$W/miss.toml"
"$BIN" gen --config "$W/miss.toml" --out "$W/miss64.pcap" >/dev/null
# The mcast section: 64-byte datagrams to group 239.1.2.3:5000, and the same
# frames to one unicast socket (its baseline).
if on mcast; then
  "$BIN" gen --count "$FRAMES" --size 64 --ipv6-share 0 --malformed-share 0 --dst 239.1.2.3:5000 --out "$W/mcast64.pcap" >/dev/null
  "$BIN" gen --count "$FRAMES" --size 64 --ipv6-share 0 --malformed-share 0 --dst 198.18.1.1:5000 --out "$W/ucast64.pcap" >/dev/null
fi
# The exception section's flood: plain64 with a TCP twin after every frame
# (the same addresses, ports and L4 length; an ACK segment with correct
# checksums), so half the frames are TCP that no socket takes.
if on exception; then
  PYTHONPATH="$REPO/scripts" python3 - "$W/plain64.pcap" "$W/tcpmix64.pcap" <<'PY'
import struct, sys
from bench_wire import csum
data = open(sys.argv[1], "rb").read()
out, off, n = [data[:24]], 24, 0
while off + 16 <= len(data):
    incl = struct.unpack("<I", data[off + 8:off + 12])[0]
    rec, frame = data[off:off + 16], bytearray(data[off + 16:off + 16 + incl])
    off += 16 + incl
    out += [rec, bytes(frame)]
    et = frame[12:14]
    if et == b"\x08\x00":
        l3, l4 = 14, 14 + (frame[14] & 15) * 4
        frame[l3 + 9] = 6
        frame[l3 + 10:l3 + 12] = b"\0\0"
        frame[l3 + 10:l3 + 12] = struct.pack("!H", csum(bytes(frame[l3:l4])))
        pseudo = bytes(frame[l3 + 12:l3 + 20]) + struct.pack("!BBH", 0, 6, len(frame) - l4)
    elif et == b"\x86\xdd":
        l3, l4 = 14, 54
        frame[l3 + 6] = 6
        pseudo = bytes(frame[l3 + 8:l3 + 40]) + struct.pack("!IxxxB", len(frame) - l4, 6)
    else:
        continue
    ports = bytes(frame[l4:l4 + 4])
    seg = bytearray(ports + struct.pack("!IIBBHHH", n, 0, 5 << 4, 0x10, 512, 0, 0)) + frame[l4 + 20:]
    seg[16:18] = struct.pack("!H", csum(pseudo + bytes(seg)))
    frame[l4:] = seg
    n += 1
    out += [rec, bytes(frame)]
open(sys.argv[2], "wb").write(b"".join(out))
PY
fi

# Reassembly's replays: IPv4 datagrams to dns4 (198.18.1.1:53) from 250
# sources, each cut into 2 fragments (2000-byte payloads: 1480 + 528 bytes of
# IP payload) or 3 (2960-byte payloads: 1480 + 1480 + 8), every datagram with
# its own ID, about $FRAMES frames each; the reference is plain1400 (one frame
# per datagram).
if on reasm; then
  for k in 2 3; do
    PYTHONPATH="$REPO/scripts" python3 - "$W/frag$k.pcap" "$k" "$FRAMES" <<'PY'
import struct, sys
from bench_wire import csum
path, k, frames = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = {2: 2000, 3: 2960}[k]
out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
eth = bytes.fromhex("020000000001" "020000000002" "0800")
dst = bytes([198, 18, 1, 1])
for i in range(frames // k):
    src = bytes([198, 18, 0, 2 + i % 250])
    sport = 1024 + i % 4096
    data = bytes((i + j) % 251 for j in range(size))
    udp = struct.pack("!HHHH", sport, 53, 8 + size, 0) + data
    c = csum(src + dst + struct.pack("!BBH", 0, 17, len(udp)) + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    for f in range(k):
        a, b = f * 1480, min((f + 1) * 1480, len(udp))
        more = 0x2000 if b < len(udp) else 0
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + b - a, i & 0xFFFF, more | (a // 8), 64, 17, 0, src, dst)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        frame = eth + ip + udp[a:b]
        out.append(struct.pack("<IIII", 0, 0, len(frame), len(frame)) + frame)
open(path, "wb").write(b"".join(out))
PY
  done
fi

# ---------------------------------------------------------------- configs
# mkcfg NAME VDEV STRATEGY SMALL_CACHE VICTIM_PPS [ENGINE_EXTRA] [RCVBUF] [TOPOLOGY]
# (VICTIM_PPS "unbound": no victim socket at all; RCVBUF: bytes for every
# socket, empty for the default 212992; TOPOLOGY "one-rx" (default): RX lcore 1
# on CPU 1 polls queue 0, or "two-rx": the port has two RX queues, RX lcore 1
# (CPU 1, virtual node 1) polls queue 0 and RX lcore 2 (CPU 0, virtual node 0)
# polls queue 1, eal.lcores = $F2_LCORES: the main lcore 0 shares CPU 0)
F2_LCORES="0@0,1@1,2@0"
mkcfg() {
  local name=$1 vdev=$2 strat=$3 sc=$4 vrate=$5 extra=${6:-} rcvbuf=${7:-} topo=${8:-one-rx}
  local port=${vdev%%,*} lcores="0,1" rxq=1 rcv="" lc
  [ -z "$rcvbuf" ] || rcv="rcvbuf = $rcvbuf"
  lc="[[lcore]]
id = 1
role = \"rx\"
queues = [\"$port:0\"]"
  case $topo in
    one-rx) ;;
    two-rx)
      lcores=$F2_LCORES; rxq=2
      lc="[[lcore]]
id = 1
role = \"rx\"
node = 1
queues = [\"$port:0\"]

[[lcore]]
id = 2
role = \"rx\"
node = 0
queues = [\"$port:1\"]" ;;
    *) die "mkcfg: unknown topology $topo" ;;
  esac
  cat >"$W/$name.toml" <<EOF
[eal]
lcores = "$lcores"
memory_mb = $MEM_MB
no_huge = $NO_HUGE
no_pci = true
file_prefix = "bench-$name-$$"
vdevs = ["$vdev"]

[engine]
burst = 32
strategy = "$strat"
stats_interval_ms = 500
$extra

[mempool]
# net_pcap infinite_rx holds the whole pcap in mbufs of this pool.
mbufs = 32767
cache = 256

[small_cache]
enabled = $sc

[[port]]
name = "$port"
rx_queues = $rxq

$lc

[[socket]]
name = "dns4"
local = "198.18.1.1:53"
$rcv

[[socket]]
name = "echo4"
local = "198.18.1.2:7"
$rcv

[[socket]]
name = "dns6"
local = "[fd00::1]:53"
$rcv

[[socket]]
name = "app6"
local = "[fd00::2]:5000"
$rcv

[[socket]]
name = "victim"
local = "198.18.1.9:9999"
consume_rate_pps = $vrate
$rcv
EOF
  if [ "$vrate" = unbound ]; then
    # No victim socket: its frames are dropped at the RX core as "no socket".
    head -n -5 "$W/$name.toml" >"$W/$name.tmp" && mv "$W/$name.tmp" "$W/$name.toml"
  fi
  echo "$W/$name.toml"
}
pcapdev() { echo "net_pcap0,rx_pcap=$W/$1.pcap,infinite_rx=1"; }
# Two RX queues: net_pcap opens one RX queue per rx_pcap argument, in order
# (queue 0 = the first); with infinite_rx each queue loads its own pcap into
# its own ring of mbufs at setup and replays it from memory.
pcap2dev() { echo "net_pcap0,rx_pcap=$W/$1.pcap,rx_pcap=$W/$2.pcap,infinite_rx=1"; }

# engine NAME CFG SECS [--bare]: run, keep the JSON, note unbalanced books.
# SHIELD_CPU=N engine ...: the run with CPU N kept for it (scripts/shield.sh:
# every other movable thread, IRQ and unbound workqueue on the other CPUs).
engine() {
  local name=$1 cfg=$2 secs=$3; shift 3
  local pre=()
  [ -n "${SHIELD_CPU:-}" ] && pre=(bash "$REPO/scripts/shield.sh" "$SHIELD_CPU")
  log "run $name (${secs}s)${SHIELD_CPU:+, CPU $SHIELD_CPU shielded}"
  if ! "${pre[@]}" "$BIN" run --config "$cfg" --duration "$secs" --stats-json "$W/$name.json" --histograms "$@" >"$W/$name.log" 2>&1; then
    log "run $name FAILED (exit non-zero): $(grep 'udpdemux: error' "$W/$name.log" | tail -1)"
    FAIL=1
  fi
  if [ ! -s "$W/$name.json" ]; then
    log "run $name wrote no JSON"; FAIL=1; echo '{}' >"$W/$name.json"
  elif [ "$(jq -r .books_balanced "$W/$name.json")" != true ]; then
    log "run $name: books do NOT balance: $(jq -c .problems "$W/$name.json")"; FAIL=1
  fi
}
# A run's JSON, or {} for a run this invocation did not make (BENCH_ONLY).
echo '{}' >"$W/none.json"
jf() { if [ -s "$W/$1.json" ]; then echo "$W/$1.json"; else echo "$W/none.json"; fi; }
mpps() { jq -r 'if .rx_packets then (.rx_packets / .seconds / 1e6) else 0 end' "$(jf "$1")"; }
delivered_mpps() { jq -r 'if .sockets then ([.sockets[].delivered] | add) / .seconds / 1e6 else 0 end' "$(jf "$1")"; }
drops() { # every non-zero drop, by reason: socket drops summed over sockets, parse drops, no socket
  jq -r '. as $r
    | [($r.sockets // [])[].drops | to_entries[] | select(.value > 0)]
    | group_by(.key) | map("\(.[0].key) \(map(.value) | add)")
    + [($r.reasons // {}) | to_entries[] | .value | to_entries[] | "\(.key) \(.value)"]
    + [($r.udp // {}) | to_entries[] | select(.key | test("NoPorts")) | select(.value > 0) | "\(.key) \(.value)"]
    | if length == 0 then "0" else join(", ") end' "$(jf "$1")"
}
# offcpu NAME JQPATH: "ms, switches" off the CPU for one loop of a run (its thread summary).
offcpu() { jq -r "($2) as \$t | if \$t.wall_ms then \"\\(\$t.off_cpu_ms * 10 | round / 10), \\(\$t.involuntary_switches)\" else \"-\" end" "$(jf "$1")"; }
# gap NAME JQPATH: a loop's longest gap between polls, µs ("-" where not measured).
gap() { jq -r "($2) as \$t | if \$t.longest_gap_us then (\$t.longest_gap_us | round | tostring) else \"-\" end" "$(jf "$1")"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
# The same unrounded, for a goal's verdict: a ratio of 0.996 prints as 1.00
# and must not pass a goal of > 1 (nor 0.795 one of >= 0.8).
xratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.6f", a / b; else print "-" }'; }
fmt() { awk -v a="$1" 'BEGIN { printf "%.2f", a }'; }
sfmt() { awk -v a="$1" 'BEGIN { printf "%+.2f", a }'; }

# testpmd rxonly on a pcap replay: the mean Rx-pps of the full stats periods.
testpmd_rxonly() { # NAME PCAP
  log "run $1 (dpdk-testpmd rxonly, ${SECS}s)"
  timeout -s INT $((SECS + 2)) dpdk-testpmd -l 0,1 "${TP_MEM[@]}" --no-pci --file-prefix="bench-tp-$$" \
    --vdev="$(pcapdev "$2")" -- --forward-mode=rxonly --stats-period 1 --total-num-mbufs=32768 \
    </dev/null >"$W/$1.log" 2>&1 || true
  awk '/Rx-pps:/ { if ($2 > 0) v[n++] = $2 }
       END { s = 0; c = 0; for (i = 1; i < n; i++) { s += v[i]; c++ }
             if (c == 0 && n > 0) { s = v[n-1]; c = 1 }
             if (c) printf "%.3f", s / c / 1e6; else print 0 }' "$W/$1.log"
}

# alternate K SEP A B...: A B... joined by SEP, in the order given in odd
# rounds K and reversed in even ones, so that no run always goes first.
alternate() {
  local k=$1 sep=$2 i s=""; shift 2
  local -a a=("$@")
  if [ $((k % 2)) -eq 0 ]; then a=(); for ((i = $#; i >= 1; i--)); do a+=("${!i}"); done; fi
  for i in "${a[@]}"; do s+=${s:+$sep}$i; done
  echo "$s"
}
# rounds N FN A B...: N rounds of alternating runs, `FN K R` for each R of
# A B... in round K's order (see alternate).
rounds() {
  local n=$1 fn=$2 k r; shift 2
  for k in $(seq "$n"); do
    for r in $(alternate "$k" " " "$@"); do "$fn" "$k" "$r"; done
  done
}

# ================================================================ runs
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# 1. The vdev's limit, our bare loop, the pipeline: same pcap, same cores.
TP=0
if on rate; then
TP=$(testpmd_rxonly testpmd plain64)
for s in 64 512 1400; do
  engine "bare$s" "$(mkcfg "bare$s" "$(pcapdev "plain$s")" numa-queues true 0)" "$SECS" --bare
  engine "pipe$s" "$(mkcfg "pipe$s" "$(pcapdev "plain$s")" numa-queues true 0)" "$SECS"
done
for st in busylock direct; do
  engine "pipe64-$st" "$(mkcfg "pipe64-$st" "$(pcapdev plain64)" "$st" true 0)" "$SECS"
done
engine pipe64-nocache "$(mkcfg pipe64-nocache "$(pcapdev plain64)" numa-queues false 0)" "$SECS"
engine pipe64-1m-hot "$(mkcfg pipe64-1m-hot "$(pcapdev plain64)" numa-queues true 0 "filler_sockets = $FILLER")" "$SECS"
engine pipe64-1m-spread "$(mkcfg pipe64-1m-spread "$(pcapdev spread64)" numa-queues true 0 "filler_sockets = $FILLER")" "$SECS"
engine pipe64-1m-miss "$(mkcfg pipe64-1m-miss "$(pcapdev miss64)" numa-queues true 0 "filler_sockets = $FILLER")" "$SECS"
fi
# The RX core alone against the bare loop on the same replay (issue 3's
# ratio): `run --demux-only` receives, parses, looks up in the million-entry
# table, stores the result in the mbuf, counts and frees. Three alternating
# bare/demux rounds; the table gives each round and the median. Each round
# also runs the two floors (`run --floor`): the least any RX core can do
# per packet on this replay, without and with the software checksums, so
# the RX core's cost can be read against what no implementation avoids,
# and `--floor rte-hash`: the checksums floor with DPDK's own exact-match
# table over the same million bindings (what a lookup at that size costs
# a DPDK application here, which the port-indexed floors do not pay).
if on rxcore; then
for k in 1 2 3; do
  engine "rxcore-bare-$k" "$(mkcfg "rxcore-bare-$k" "$(pcapdev spread64)" numa-queues true 0)" "$SECS" --bare
  engine "rxcore-floor-$k" "$(mkcfg "rxcore-floor-$k" "$(pcapdev spread64)" numa-queues true 0)" "$SECS" --floor minimal
  engine "rxcore-floorcs-$k" "$(mkcfg "rxcore-floorcs-$k" "$(pcapdev spread64)" numa-queues true 0)" "$SECS" --floor checksums
  engine "rxcore-floorhash-$k" "$(mkcfg "rxcore-floorhash-$k" "$(pcapdev spread64)" numa-queues true 0 "filler_sockets = $FILLER")" "$SECS" --floor rte-hash
  engine "rxcore-1m-$k" "$(mkcfg "rxcore-1m-$k" "$(pcapdev spread64)" numa-queues true 0 "filler_sockets = $FILLER")" "$SECS" --demux-only
done
for k in 1 2 3; do
  engine "rxcore-floorhash5-$k" "$(mkcfg "rxcore-floorhash5-$k" "$(pcapdev plain64)" numa-queues true 0)" "$SECS" --floor rte-hash
  engine "rxcore-5-$k" "$(mkcfg "rxcore-5-$k" "$(pcapdev plain64)" numa-queues true 0)" "$SECS" --demux-only
done
# What a million-entry table's size alone costs on this machine, without the
# engine (scripts/tlb_reach.c, on the RX lcore's CPU): 4096 hot lines spread
# over 128 MB of huge-page-advised memory against the same lines packed into
# 256 KB, each lookup asked for 8 ahead, with and without a replay-like
# stream (two lines copied per lookup from 8192 frames of 2 KiB).
rm -f "$W"/tlb-*.txt
if cc -O2 -o "$W/tlb_reach" "$REPO/scripts/tlb_reach.c" 2>"$W/tlb_reach.log"; then
  for k in 1 2 3; do
    taskset -c 1 "$W/tlb_reach" 128 4096 8 16 >"$W/tlb-$k.txt" 2>>"$W/tlb_reach.log" || { log "tlb_reach failed"; : >"$W/tlb-$k.txt"; }
  done
else
  log "tlb_reach did not build (cc): $(tail -1 "$W/tlb_reach.log")"
fi
fi

# 1b. The pipeline against its reference (issue 13): `run --floor pipeline`
# is the minimal cross-core pipeline (destination port at a fixed offset, the
# socket's delivery ring, the socket's consumer dequeues, reads pkt_len and
# frees in bulk) on the same config, lcores and consumers. Alternating pairs
# on the plain 64-byte replay to 4 sockets, rcvbuf 4 MiB per socket; each
# round also runs the pipeline with the default rcvbuf (212 992 B) and the
# same unlimited consumers, for its rcvbuf_full drops.
RCVBUF_BIG=4194304
# clap lists a documented value as "- pipeline: ...", an undocumented one in
# "[possible values: ..., pipeline]".
FLOOR_PIPE=false
if "$BIN" run --help | grep -Eq -- '^ *- pipeline:|possible values:.*\bpipeline\b'; then FLOOR_PIPE=true; fi
# `--floor pipeline-demux`: the same floor with the engine's parse and lookup
# choosing the ring (the mandatory part of the pipeline's cost).
FLOOR_DEMUX=false
if "$BIN" run --help | grep -Eq -- '^ *- pipeline-demux:|possible values:.*\bpipeline-demux\b'; then FLOOR_DEMUX=true; fi
# `--floor pipeline-checksums`: the port floor plus software checksums (the
# validation any engine must do on a port without checksum offload).
FLOOR_CSUM=false
if "$BIN" run --help | grep -Eq -- '^ *- pipeline-checksums:|possible values:.*\bpipeline-checksums\b'; then FLOOR_CSUM=true; fi
# `--floor pipeline-rte-hash`: the checksums, then DPDK's rte_hash on the
# destination address and port choosing the ring (a DPDK-native exact-match
# demux, next to the engine's parser and table in pipeline-demux).
FLOOR_HASH=false
if "$BIN" run --help | grep -Eq -- '^ *- pipeline-rte-hash:|possible values:.*\bpipeline-rte-hash\b'; then FLOOR_HASH=true; fi
# `run --alternate-floor FLOOR`: the pipeline and that floor take turns every
# 2^27 TSC cycles in one run (`bench::alternate`), so both halves see the
# same host at the same minutes, which separate runs do not (the same binary
# 5.6-17.4 Mpps across rounds on the EPYC host). The ratio still follows the
# host's mode (how fast lines cross between the vCPUs): the report lists it
# per round beside the floor's rate. One run per floor in each round.
ALT_FLOORS=""
if "$BIN" run --help | grep -q -- '--alternate-floor'; then
  ALT_FLOORS="pipeline"
  [ "$FLOOR_CSUM" = true ] && ALT_FLOORS="$ALT_FLOORS pipeline-checksums"
  [ "$FLOOR_HASH" = true ] && ALT_FLOORS="$ALT_FLOORS pipeline-rte-hash"
  [ "$FLOOR_DEMUX" = true ] && ALT_FLOORS="$ALT_FLOORS pipeline-demux"
fi
if on pipeline; then
  [ "$FLOOR_PIPE" = true ] || log "run --floor pipeline: not in this build (pipeline runs only)"
  for k in $(seq "$PAIRS"); do
    for f in $ALT_FLOORS; do
      engine "alt-$f-$k" "$(mkcfg "alt-$f-$k" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")" "$SECS" --alternate-floor "$f"
    done
    if [ "$FLOOR_PIPE" = true ]; then
      engine "pair-floor-$k" "$(mkcfg "pair-floor-$k" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")" "$SECS" --floor pipeline
    fi
    if [ "$FLOOR_CSUM" = true ]; then
      engine "pair-floorcs-$k" "$(mkcfg "pair-floorcs-$k" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")" "$SECS" --floor pipeline-checksums
    fi
    if [ "$FLOOR_HASH" = true ]; then
      engine "pair-floorhash-$k" "$(mkcfg "pair-floorhash-$k" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")" "$SECS" --floor pipeline-rte-hash
    fi
    if [ "$FLOOR_DEMUX" = true ]; then
      engine "pair-floordx-$k" "$(mkcfg "pair-floordx-$k" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")" "$SECS" --floor pipeline-demux
    fi
    engine "pair-pipe-$k" "$(mkcfg "pair-pipe-$k" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")" "$SECS"
    engine "pair-pipedef-$k" "$(mkcfg "pair-pipedef-$k" "$(pcapdev plain64)" numa-queues true 0)" "$SECS"
    # The same with the consumers' CPU (the main lcore's, CPU 0) shielded:
    # what the engine does when nothing else may take that CPU (as
    # isolcpus= would keep it), where the run above shares it with this
    # host's other tasks.
    SHIELD_CPU=0 engine "pair-pipedsh-$k" "$(mkcfg "pair-pipedsh-$k" "$(pcapdev plain64)" numa-queues true 0)" "$SECS"
  done
  # The reference for the default-rcvbuf runs: a thread with nothing of the
  # engine in it, spinning on the TSC on the consumers' CPU, shared and
  # shielded; its gaps are what any consumer there loses at once.
  if [ -x "$GAPS" ]; then
    log "run cpu_gaps on CPU 0 (${SECS}s, shared, then shielded)"
    # CPU 0's local timer interrupts (the tick) during the first run.
    LOC0=$(awk '/^ *LOC:/ { print $2 }' /proc/interrupts)
    taskset -c 0 "$GAPS" --secs "$SECS" --json >"$W/gaps-shared.json" 2>>"$W/gaps.log" || { log "cpu_gaps failed"; echo '{}' >"$W/gaps-shared.json"; }
    GAPS_TICKS=$(( $(awk '/^ *LOC:/ { print $2 }' /proc/interrupts) - LOC0 ))
    bash "$REPO/scripts/shield.sh" 0 taskset -c 0 "$GAPS" --secs "$SECS" --json >"$W/gaps-shielded.json" 2>>"$W/gaps.log" || { log "cpu_gaps (shielded) failed"; echo '{}' >"$W/gaps-shielded.json"; }
  fi
  # What `check` says about the default rcvbuf with this config (one line).
  CHECK_OUT=$("$BIN" check --config "$W/pair-pipedef-1.toml" 2>/dev/null || true)
  PIPEDEF_CHECK=$(grep -m1 -- 'rcvbuf >=' <<<"$CHECK_OUT" || echo "(no rcvbuf warning from this build's check)")
fi

# 1b'. Instructions per received datagram on the RX lcore (issue 13), counted
# by callgrind (scripts/instr.sh): the pipeline config without hugepages
# (valgrind cannot map hugetlbfs as DPDK does) and with a 64 MiB rcvbuf and
# 16 384-entry rings, so that the consumer, which valgrind slows like
# everything else, never lets a socket fill and the count is the delivery
# path's. Repeatable within about 1% (the PMD's share moves by a few
# instructions with how valgrind interleaves the lcores), where the
# cross-CPU rates above swing by half.
INSTR_RUNS="pipeline:|floor pipeline:--floor pipeline|floor pipeline-demux:--floor pipeline-demux|demux-only:--demux-only"
if on instr; then
  if command -v valgrind >/dev/null; then
    cfg=$(mkcfg instr "$(pcapdev plain64)" numa-queues true 0 "" 67108864)
    # Rings of 16 384: under valgrind the consumer falls a few thousand
    # datagrams behind in a run, and a full ring would count the drop path.
    sed -i -e 's/^no_huge = .*/no_huge = true/' -e 's/^memory_mb = .*/memory_mb = 512/' \
      -e 's/^rcvbuf = 67108864$/rcvbuf = 67108864\nring_size = 16384/' "$cfg"
    IFS='|' read -ra runs <<<"$INSTR_RUNS"
    for r in "${runs[@]}"; do
      label=${r%%:*}; flags=${r#*:}
      log "run instr ($label, callgrind, 2 s of replay)"
      # shellcheck disable=SC2086 # the flags, word-split on purpose
      BIN=$BIN bash scripts/instr.sh "$cfg" -- $flags >"$W/instr-${label// /-}.txt" 2>"$W/instr-${label// /-}.log" ||
        { log "instr $label failed: $(tail -1 "$W/instr-${label// /-}.log")"; FAIL=1; }
    done
  else
    log "instr: valgrind not installed (bash scripts/setup.sh installs it)"
  fi
fi

# 1c. An out-of-process client against the in-process pipeline (issue 16):
# the pipeline section's config (plain 64-byte replay, 5 sockets, 4 MiB
# rcvbuf), lcores and RX lcore on CPU 1. In-process: the main lcore (CPU 0)
# consumes every socket. Out-of-process: the same engine, and the client
# (examples/bench.rs, a DPDK secondary pinned to CPU 0 with taskset) opens
# all five sockets, so the main lcore consumes none (it then sleeps 100 us
# between passes: stats, IPC, folding the client's releases) and receives
# for SECS seconds. Alternating pairs; the order flips every round.
CLIENT_SOCKS="dns4 echo4 dns6 app6 victim"
client_run() { # NAME
  local name=$1 cfg prefix epid i rc=0
  cfg=$(mkcfg "$name" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")
  prefix=$(sed -n 's/^file_prefix = "\(.*\)"$/\1/p' "$cfg")
  log "run $name (out-of-process client on CPU 0, ${SECS}s)"
  rm -f "$W/$name.json"
  "$BIN" run --config "$cfg" --duration $((SECS + 60)) --stats-json "$W/$name.json" --histograms >"$W/$name.log" 2>&1 &
  epid=$!
  for i in $(seq 200); do grep -q "port net_pcap0" "$W/$name.log" 2>/dev/null && break; sleep 0.1; done
  sleep 0.5   # the engine registers its client IPC right after its ports
  # shellcheck disable=SC2086 # the socket names, word-split on purpose
  taskset -c 0 "$CLIENT_BENCH" "$prefix" --secs "$SECS" $CLIENT_SOCKS >"$W/$name-client.log" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || { log "run $name: client exited $rc: $(tail -1 "$W/$name-client.log")"; FAIL=1; }
  kill -INT "$epid" 2>/dev/null || true
  wait "$epid" || { log "run $name: engine exited non-zero: $(grep 'udpdemux: error' "$W/$name.log" | tail -1)"; FAIL=1; }
  if [ ! -s "$W/$name.json" ]; then
    log "run $name wrote no JSON"; FAIL=1; echo '{}' >"$W/$name.json"
  elif [ "$(jq -r .books_balanced "$W/$name.json")" != true ]; then
    log "run $name: books do NOT balance: $(jq -c .problems "$W/$name.json")"; FAIL=1
  fi
}
cpair_run() { # K pipe|client
  if [ "$2" = pipe ]; then
    engine "cpair-pipe-$1" "$(mkcfg "cpair-pipe-$1" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")" "$SECS"
  else
    client_run "cpair-client-$1"
  fi
}
if on client; then
  if [ "$NO_HUGE" = true ]; then
    log "client: skipped (a client attaches to shared memory: hugepages needed)"
  else
    rounds "$CPAIRS" cpair_run pipe client
  fi
fi

# 1d. DPDK's capture server and the Prometheus endpoint (issue 19), on the
# pipeline section's config and replay (plain 64-byte, 5 sockets, 4 MiB
# rcvbuf; hugepages only: dpdk-dumpcap attaches to the engine's shared
# memory). Alternating pairs: `[capture] pdump = true` (the default: the
# capture server is up, no capture attached) against `pdump = false`; and
# `[metrics] listen` set, scraped every 100 ms from CPU 0 (a Python loop)
# against the same config not scraped. Capture runs: one engine run, the
# delivered rate over SECS seconds without a capture, then over SECS seconds
# while dpdk-dumpcap (pinned to CPU 0 with the main lcore, which consumes
# every socket) captures every frame of the port to /dev/null, from the
# engine's periodic stats lines.
PDPAIRS=${BENCH_PDUMP_PAIRS:-5}
[ "$PDPAIRS" -ge 1 ] || die "BENCH_PDUMP_PAIRS must be at least 1"
PDCAPS=${BENCH_PDUMP_CAPTURES:-3}
[ "$PDCAPS" -ge 1 ] || die "BENCH_PDUMP_CAPTURES must be at least 1"
# pd_cfg NAME [TOML]: the pipeline pairs' config with TOML tables appended.
pd_cfg() {
  local cfg; cfg=$(mkcfg "$1" "$(pcapdev plain64)" numa-queues true 0 "" "$RCVBUF_BIG")
  [ -z "${2:-}" ] || printf '\n%s\n' "$2" >>"$cfg"
  echo "$cfg"
}
prefix_of() { sed -n 's/^file_prefix = "\(.*\)"$/\1/p' "$1"; }
# check_json NAME: a background run's JSON is there and its books balance.
check_json() {
  if [ ! -s "$W/$1.json" ]; then
    log "run $1 wrote no JSON"; FAIL=1; echo '{}' >"$W/$1.json"
  elif [ "$(jq -r .books_balanced "$W/$1.json")" != true ]; then
    log "run $1: books do NOT balance: $(jq -c .problems "$W/$1.json")"; FAIL=1
  fi
}
# window_mpps LOG T0 T1: delivered Mpps between two instants (epoch seconds),
# from the first and last of the engine's stats lines ("[2026-..Z INFO ..]
# ... total rx R delivered D drops X ...", every 500 ms) inside them.
window_mpps() {
  python3 - "$@" <<'EOF'
import datetime, sys
log, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
pts = []
for line in open(log, errors="replace"):
    if not line.startswith("[") or " total rx " not in line:
        continue
    ts = datetime.datetime.fromisoformat(line[1:line.index("Z")])
    t = ts.replace(tzinfo=datetime.timezone.utc).timestamp()
    w = line.split(" total rx ", 1)[1].split()
    if t0 <= t <= t1:
        pts.append((t, int(w[w.index("delivered") + 1])))
print("%.6f" % ((pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) / 1e6) if len(pts) > 1 and pts[-1][0] > pts[0][0] else 0)
EOF
}
# pdump_capture_run NAME: one engine run: SECS seconds without a capture, then
# SECS with dpdk-dumpcap attached; the engine stops while dumpcap is still
# attached (dumpcap then exits on its own: its primary is gone), so a
# capture's stop, which waits for the RX lcores (docs/operations.md,
# "Capture"), is never inside a measured window.
pdump_capture_run() {
  local name=$1 cfg prefix epid dpid t0 t1 t2 t3 i
  cfg=$(pd_cfg "$name"); prefix=$(prefix_of "$cfg")
  log "run $name (${SECS}s, then ${SECS}s with dpdk-dumpcap on CPU 0 capturing every frame to /dev/null)"
  rm -f "$W/$name.json" "$W/$name-dumpcap.log"
  "$BIN" run --config "$cfg" --duration $((2 * SECS + 60)) --stats-json "$W/$name.json" --histograms >"$W/$name.log" 2>&1 &
  epid=$!
  for i in $(seq 200); do grep -q "port net_pcap0" "$W/$name.log" 2>/dev/null && break; sleep 0.1; done
  sleep 0.6   # at least one stats line inside the window
  t0=$(date +%s.%N); sleep "$SECS"; t1=$(date +%s.%N)
  taskset -c 0 dpdk-dumpcap --file-prefix "$prefix" -p -i net_pcap0 -w /dev/null >/dev/null 2>"$W/$name-dumpcap.log" &
  dpid=$!
  # dumpcap prints "Packets captured:" right after rte_pdump_enable returned.
  for i in $(seq 200); do grep -q "Packets captured:" "$W/$name-dumpcap.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "Packets captured:" "$W/$name-dumpcap.log" || { log "run $name: dumpcap did not attach: $(tail -2 "$W/$name-dumpcap.log")"; FAIL=1; }
  sleep 0.6
  t2=$(date +%s.%N); sleep "$SECS"; t3=$(date +%s.%N)
  kill -INT "$epid" 2>/dev/null || true
  wait "$epid" || { log "run $name: engine exited non-zero: $(grep 'udpdemux: error' "$W/$name.log" | tail -1)"; FAIL=1; }
  for i in $(seq 50); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
  kill -INT "$dpid" 2>/dev/null || true
  wait "$dpid" || true
  window_mpps "$W/$name.log" "$t0" "$t1" >"$W/$name.without"
  window_mpps "$W/$name.log" "$t2" "$t3" >"$W/$name.with"
  check_json "$name"
}
# python3 -c "$SCRAPER" PORT: GET /metrics every 100 ms (on a fixed cadence,
# one connection each) until the endpoint goes away or SIGTERM; prints
# "scrapes bytes-of-the-last".
SCRAPER=$(cat <<'EOF'
import signal, socket, sys, time
port, n, size, t = int(sys.argv[1]), 0, 0, time.monotonic()
def done(*_):
    print(n, size)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            got = b"".join(iter(lambda: c.recv(65536), b""))
        if got.startswith(b"HTTP/1.1 200"):
            n, size = n + 1, len(got)
    except OSError:
        if n:
            break  # the engine stopped
        t = time.monotonic()  # not up yet: the cadence starts at the first answer
    t += 0.1
    time.sleep(max(0.0, t - time.monotonic()))
done()
EOF
)
free_tcp_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# metrics_run NAME yes|no: the endpoint on, scraped every 100 ms or not at all.
metrics_run() {
  local name=$1 scraped=$2 port cfg epid spid i
  port=$(free_tcp_port)
  cfg=$(pd_cfg "$name" "[metrics]
listen = \"127.0.0.1:$port\"")
  if [ "$scraped" = no ]; then engine "$name" "$cfg" "$SECS"; return; fi
  log "run $name (scraped every 100 ms, ${SECS}s)"
  rm -f "$W/$name.json"
  # The scraper first, so it is polling when the endpoint comes up.
  taskset -c 0 python3 -c "$SCRAPER" "$port" >"$W/$name.scrapes" &
  spid=$!
  "$BIN" run --config "$cfg" --duration "$SECS" --stats-json "$W/$name.json" --histograms >"$W/$name.log" 2>&1 &
  epid=$!
  wait "$epid" || { log "run $name: engine exited non-zero: $(grep 'udpdemux: error' "$W/$name.log" | tail -1)"; FAIL=1; }
  for i in $(seq 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  kill -TERM "$spid" 2>/dev/null || true   # it prints its count on SIGTERM
  wait "$spid" || true
  check_json "$name"
}
pdump_run() { # K on|off: the capture server up (no capture) or not
  local v=false; [ "$2" = on ] && v=true
  engine "pdump-$2-$1" "$(pd_cfg "pdump-$2-$1" "[capture]
pdump = $v")" "$SECS"
}
scrape_run() { metrics_run "scrape-$2-$1" "$2"; } # K yes|no
if on pdump; then
  if [ "$NO_HUGE" = true ]; then
    log "pdump: skipped (dpdk-dumpcap attaches to shared memory: hugepages needed)"
  else
    command -v dpdk-dumpcap >/dev/null || die "dpdk-dumpcap not found (package dpdk-dev): run bash scripts/setup.sh as root"
    command -v python3 >/dev/null || die "python3 not found: run bash scripts/setup.sh as root"
    rounds "$PDPAIRS" pdump_run on off
    for k in $(seq "$PDCAPS"); do pdump_capture_run "pdump-cap-$k"; done
    rounds "$PDPAIRS" scrape_run yes no
  fi
fi

# 2. Flood: victim consumer limited to 200 000 datagrams/s, per strategy, with and without flood.
if on flood; then
for st in numa-queues busylock direct; do
  engine "flood-$st" "$(mkcfg "flood-$st" "$(pcapdev flood)" "$st" true "$VRATE")" "$SECS"
  engine "noflood-$st" "$(mkcfg "noflood-$st" "$(pcapdev plain64)" "$st" true "$VRATE")" "$SECS"
  engine "unbound-$st" "$(mkcfg "unbound-$st" "$(pcapdev flood)" "$st" true unbound)" "$SECS"
done
engine flood-numa-queues-nocache "$(mkcfg flood-numa-queues-nocache "$(pcapdev flood)" numa-queues false "$VRATE")" "$SECS"
fi

# 2b. The seed's contention with two producers (issue 13 item 6): one port
# with two RX queues, each replaying the flood pcap; RX lcore 1 on CPU 1
# (virtual node 1) and RX lcore 2 on CPU 0 (virtual node 0) both push into
# the victim, whose consumer (main lcore 0, sharing CPU 0 with RX lcore 2) is
# capped at F2_VRATE/s. numa-queues and busylock alternate, identical configs
# otherwise; each run has a victim-unbound twin (the victim's frames dropped
# as no-socket at the RX core), the others' share without the victim.
f2_run() { # K STRATEGY: the flood and its victim-unbound twin
  engine "f2-$2-$1" "$(mkcfg "f2-$2-$1" "$(pcap2dev flood flood)" "$2" true "$F2_VRATE" "" "" two-rx)" "$SECS"
  engine "f2u-$2-$1" "$(mkcfg "f2u-$2-$1" "$(pcap2dev flood flood)" "$2" true unbound "" "" two-rx)" "$SECS"
}
if on flood2; then
  rounds "$F2_RUNS" f2_run numa-queues busylock
fi

# 2b'. Multicast fan-out (issue 18 part 4): one RX lcore replays 64-byte
# datagrams to 239.1.2.3:5000, which 1, 4 or 16 sockets joined (each gets
# a copy: the original or an indirect mbuf), against the same frames to one
# unicast socket. The main lcore consumes every socket (count handler), as
# in the other sections; rcvbuf 4 MiB each, a clone pool of 65535.
mcfg() { # NAME PCAP MEMBERS (0: the unicast socket)
  local name=$1 pcap=$2 members=$3 i
  cat >"$W/$name.toml" <<EOF
[eal]
lcores = "0,1"
memory_mb = $MEM_MB
no_huge = $NO_HUGE
no_pci = true
file_prefix = "bench-$name-$$"
vdevs = ["$(pcapdev "$pcap")"]

[engine]
burst = 32
stats_interval_ms = 500

[mempool]
mbufs = 32767
cache = 256
clones = 65535

[[port]]
name = "net_pcap0"

[[lcore]]
id = 1
role = "rx"
queues = ["net_pcap0:0"]
EOF
  if [ "$members" -eq 0 ]; then
    printf '\n[[socket]]\nname = "u0"\nlocal = "198.18.1.1:5000"\nrcvbuf = 4194304\n' >>"$W/$name.toml"
  fi
  for i in $(seq 1 "$members"); do
    printf '\n[[socket]]\nname = "m%d"\nlocal = "239.1.2.3:5000"\nmulticast = "239.1.2.3"\nrcvbuf = 4194304\n' "$i" >>"$W/$name.toml"
  done
  echo "$W/$name.toml"
}
if on mcast; then
  for k in $(seq "$MC_ROUNDS"); do
    engine "mc-u-$k" "$(mcfg "mc-u-$k" ucast64 0)" "$SECS"
    for n in 1 4 16; do
      engine "mc-$n-$k" "$(mcfg "mc-$n-$k" mcast64 "$n")" "$SECS"
    done
  done
fi

# 2c. The exception path (issue 19): one RX lcore replays tcpmix64 (every
# UDP frame of plain64 followed by a TCP twin no socket takes) with
# [exception] on a net_tap port and its rate limit; the same replay with the
# path off (the TCP frames dropped at parse as not_udp, what they cost before
# the path existed); the same with the limit lifted (rate_pps 10^9: every
# TCP frame is a write(2) to the tap); the path on at rate_pps 1 (its
# per-frame cost without the writes); and plain64 alone with the path on.
# The tap is a kernel interface of this host named udxb<pid>, with no
# address: the kernel drops what it gets (nothing it receives is for it).
EXC_IFACE="udxb$$"
# net_pcap has one TX queue per tx_pcap; the RX lcore (responder) and the
# main lcore (the kernel's frames) need one each. Same vdev with the path off.
exdev() { echo "$(pcapdev "$1"),tx_pcap=/dev/null,tx_pcap=/dev/null"; }
exc_extra() { # RATE_PPS, or empty for the path off
  [ -n "$1" ] || return 0
  printf '\n[exception]\ndevice = "net_tap0,iface=%s"\nrate_pps = %s\n' "$EXC_IFACE" "$1"
}
if on exception; then
  for k in $(seq "$EXC_ROUNDS"); do
    engine "exc-udp-$k" "$(mkcfg "exc-udp-$k" "$(exdev plain64)" numa-queues true 0 "$(exc_extra "$EXC_PPS")")" "$SECS"
    for r in $(alternate "$k" " " flood off bucket); do
      case $r in
        flood) engine "exc-flood-$k" "$(mkcfg "exc-flood-$k" "$(exdev tcpmix64)" numa-queues true 0 "$(exc_extra "$EXC_PPS")")" "$SECS" ;;
        off) engine "exc-off-$k" "$(mkcfg "exc-off-$k" "$(exdev tcpmix64)" numa-queues true 0)" "$SECS" ;;
        # rate_pps 1: the bucket refuses all but a frame a second, so this
        # is the per-frame cost of the path alone, without the tap writes.
        bucket) engine "exc-bucket-$k" "$(mkcfg "exc-bucket-$k" "$(exdev tcpmix64)" numa-queues true 0 "$(exc_extra 1)")" "$SECS" ;;
      esac
    done
  done
  engine exc-nolimit "$(mkcfg exc-nolimit "$(exdev tcpmix64)" numa-queues true 0 "$(exc_extra 1000000000)")" "$SECS"
fi

# 3. Memory: the same pipeline run 10x longer must reach the same peak.
if on memory; then
  engine mem-long "$(mkcfg mem-long "$(pcapdev plain64)" numa-queues true 0)" "$LONG"
fi

# 4. External senders over memif (hugepages only). The engine is the server
# (started first), the sender the client; the engine stops when its queue has
# been idle for a second after the sender is done.
MEMIF_ROWS=()
# net_memif in DPDK 22.11 unmaps the shared rings when the peer disconnects,
# even while the receiver's lcore is inside rx_burst (seen here: SIGSEGV in
# librte_net_memif about 1 run in 8). testpmd is driven interactively so it
# disconnects only after the engine has stopped; so does gen (--linger). The
# gen row is still retried once if the engine crashes, and the table says so.
memif_run() { # NAME SENDER [ATTEMPT]
  local name=$1 sender=$2 attempt=${3:-1} sock="udpdemux-bench-$$-$1-${3:-1}"
  local cfg; cfg=$(mkcfg "$name" "net_memif0,role=server,socket=/run/$sock" numa-queues true 0 "stop_when_idle_ms = 1000")
  log "run $name ($sender -> net_memif -> udpdemux, ${SECS}s, attempt $attempt)"
  rm -f "$W/$name.json"
  "$BIN" run --config "$cfg" --duration $((SECS + 30)) --stats-json "$W/$name.json" >"$W/$name.log" 2>&1 &
  local epid=$!
  local i; for i in $(seq 100); do grep -q "port net_memif0" "$W/$name.log" 2>/dev/null && break; sleep 0.1; done
  local sent secs rc=0
  if [ "$sender" = testpmd ]; then
    # Interactive through a FIFO: start, send for SECS, stop (prints the totals),
    # wait for the engine to drain and stop, then quit (disconnect).
    rm -f "$W/tp.in"; mkfifo "$W/tp.in"
    # Both sender lcores on CPU 0: CPU 1 stays the engine's RX lcore.
    timeout $((SECS + 60)) dpdk-testpmd --lcores 0@0,1@0 -m 128 --no-pci --file-prefix="bench-tx-$$-$attempt" \
      --vdev="net_memif0,role=client,socket=/run/$sock" -- -i --forward-mode=txonly \
      --txpkts=106 --tx-ip=198.18.0.7,198.18.1.1 --tx-udp=4000,53 --total-num-mbufs=8192 \
      <"$W/tp.in" >"$W/$name-sender.log" 2>&1 &
    local tpid=$!
    exec 7>"$W/tp.in"
    sleep 3   # testpmd's EAL init and the memif handshake
    echo start >&7; sleep "$SECS"; echo stop >&7
    wait "$epid" || rc=$?
    echo quit >&7; exec 7>&-
    wait "$tpid" || true
    rm -f "$W/tp.in"
    sent=$(awk '/Accumulated forward statistics/ { acc = 1 } acc && /TX-packets:/ { print $2; exit }' "$W/$name-sender.log")
    secs=$SECS
  else
    # gen lingers with its port open after sending, so the engine drains the
    # ring and stops first; then gen is told to go (no disconnect mid-read).
    "$BIN" gen --config "$SPEC" --flood-share 0 --size 64 --duration "$SECS" --port net_memif0 --linger 60 \
      --eal "--lcores 0@0 -m 128 --no-pci --file-prefix=bench-gen-$$-$attempt --vdev=net_memif0,role=client,socket=/run/$sock" \
      --stats-json "$W/$name-sender.json" >"$W/$name-sender.log" 2>&1 &
    local gpid=$!
    wait "$epid" || rc=$?
    kill -TERM "$gpid" 2>/dev/null || true
    wait "$gpid" || true
    sent=$(jq -r '.frames // 0' "$W/$name-sender.json" 2>/dev/null || echo 0)
    secs=$(jq -r '.seconds // 0' "$W/$name-sender.json" 2>/dev/null || echo 0)
  fi
  if [ "$rc" -ge 128 ] && [ "$sender" = gen ] && [ "$attempt" -eq 1 ]; then
    log "run $name: engine killed by signal $((rc - 128)) at the sender's disconnect (net_memif race): retrying once"
    MEMIF_NOTE="gen → memif: attempt 1 ended with the engine killed by signal $((rc - 128)) when gen disconnected (the net_memif race above); the row is attempt 2."
    memif_run "$name" "$sender" 2
    return
  fi
  if [ "$rc" -ne 0 ]; then log "run $name: engine exited with $rc"; FAIL=1; fi
  [ -s "$W/$name.json" ] || echo '{}' >"$W/$name.json"
  local got bal lost=""
  got=$(jq -r '.rx_packets // 0' "$W/$name.json")
  bal=$(jq -r '.books_balanced // false' "$W/$name.json")
  if [ -z "$sent" ] || [ "$sent" -eq 0 ] || [ "$bal" != true ]; then
    log "run $name: sender reports ${sent:-nothing} sent, engine received $got, books $bal"; FAIL=1
    bal="NO (sent ${sent:-?}, received $got)"
  elif [ "$got" = "$sent" ]; then
    bal="yes (sent = received)"
  elif [ "$sender" = gen ] && [ "$got" -lt "$sent" ] && [ $((sent - got)) -le 1024 ]; then
    # gen's last frames were still in the 1024-slot memif ring when it disconnected.
    bal="engine's books yes; $((sent - got)) sent frames were still in the memif ring at gen's disconnect"
  else
    log "run $name: sender reports $sent sent, engine received $got"; FAIL=1
    bal="NO (sent $sent, received $got)"
  fi
  MEMIF_ROWS+=("| $sender → memif → pipeline | $(awk -v g="$got" -v s="$secs" 'BEGIN { if (s > 0) printf "%.2f", g / s / 1e6; else print "-" }') | ${sent:-?} | $got | $(drops "$name") | $bal |")
}
MEMIF_NOTE=""
if on memif && [ "$NO_HUGE" = false ]; then
  memif_run memif-testpmd testpmd
  memif_run memif-gen gen
fi

# 5. Parse + lookup ns/packet (no EAL), and the kernel baseline.
echo '[]' >"$W/kernel.json"
if on demux; then
  log "run bench-demux (16 .. 1M sockets)"
  taskset -c 1 "$BIN" bench-demux --packets 1000000 >"$W/demux.md" 2>"$W/demux.log" || { log "bench-demux failed"; FAIL=1; }
fi
if on kernel; then
  log "run kernel recvmmsg baseline"
  "$BASELINE" --sizes 64,512,1400 --secs 2 --json >"$W/kernel.json" 2>"$W/kernel.log" || { log "baseline failed"; FAIL=1; echo '[]' >"$W/kernel.json"; }
fi

# 6. send_burst against testpmd txonly (issue 17), on the same port type:
# net_null with no-rx=1, 106-byte frames (64-byte payload) to one
# destination. testpmd: its forwarding lcore on CPU 1 builds and sends.
# send_bench: an application thread on CPU 1 calls send_burst (bursts of
# 32), the main lcore on CPU 0 drains the TX ring into the port; the RX
# lcore the engine needs (nothing to receive) shares CPU 1 under
# SCHED_IDLE. A static neighbour for the destination: nobody answers ARP
# on net_null.
testpmd_txonly() { # NAME
  log "run $1 (dpdk-testpmd txonly, ${SECS}s)"
  timeout -s INT $((SECS + 2)) dpdk-testpmd -l 0,1 "${TP_MEM[@]}" --no-pci --file-prefix="bench-tp-$$" \
    --vdev=net_null0,no-rx=1 -- --forward-mode=txonly --txpkts=106 --tx-ip=198.18.0.1,198.18.0.2 \
    --tx-udp=5000,9 --stats-period 1 --total-num-mbufs=32768 </dev/null >"$W/$1.log" 2>&1 || true
  awk '/Tx-pps:/ { if ($2 > 0) v[n++] = $2 }
       END { s = 0; c = 0; for (i = 1; i < n; i++) { s += v[i]; c++ }
             if (c == 0 && n > 0) { s = v[n-1]; c = 1 }
             if (c) printf "%.3f", s / c / 1e6; else print 0 }' "$W/$1.log"
}
SEND_TP=(); SEND_UD=(); SEND_REF=(); SEND_BAL=()
if on reasm; then
  for r in frag2 frag3 plain1400; do
    engine "reasm-$r" "$(mkcfg "reasm-$r" "$(pcapdev "$r")" numa-queues true unbound "" 4194304)" "$SECS"
  done
fi

if on send; then
  cat >"$W/send.toml" <<EOF
[eal]
lcores = "0@0,1@1"
no_huge = $NO_HUGE
memory_mb = $MEM_MB
no_pci = true
file_prefix = "bench-send-$$"
vdevs = ["net_null0,no-rx=1"]

[[port]]
name = "net_null0"
tx_queues = 2
addresses = ["198.18.0.1/24"]

[[lcore]]
id = 1
role = "rx"
queues = ["net_null0:0"]

[[neighbour.static]]
ip = "198.18.0.2"
mac = "02:00:00:00:00:02"
EOF
  for i in $(seq "$SPAIRS"); do
    SEND_TP+=("$(testpmd_txonly "send-tp$i")")
    log "run send-ud$i (send_bench, ${SECS}s)"
    "$SEND_BENCH" "$W/send.toml" --local 198.18.0.1:5000 --dst 198.18.0.2:9 --size 64 --burst 32 \
      --secs "$SECS" --cpu 1 >"$W/send-ud$i.out" 2>"$W/send-ud$i.log" || { log "send_bench failed: $(tail -1 "$W/send-ud$i.log")"; FAIL=1; }
    # Its last line is the JSON (the engine's summary comes before it).
    grep '^{' "$W/send-ud$i.out" | tail -1 >"$W/send-ud$i.json" || true
    [ -s "$W/send-ud$i.json" ] || echo '{}' >"$W/send-ud$i.json"
    SEND_UD+=("$(jq -r '.mpps // 0' "$W/send-ud$i.json")")
    SEND_REF+=("$(jq -r '.refused // 0' "$W/send-ud$i.json")")
    SEND_BAL+=("$(jq -r '.books_balanced // false' "$W/send-ud$i.json")")
    [ "${SEND_BAL[-1]}" = true ] || { log "send-ud$i: books do NOT balance"; FAIL=1; }
  done
fi

# 7. The DNS example (issue 17): answered queries per second. The same
# 4096 A queries (dns_load) drive both: engine mode replays them from a pcap
# (net_pcap infinite_rx; RX lcore on CPU 1), the responder is a client
# process on CPU 0 beside the main lcore (which transmits its answers into
# tx_pcap=/dev/null); kernel mode answers on a loopback socket (responder on
# CPU 1, dns_load sending with sendmmsg and counting answers on CPU 0).
DNS_ENG=""; DNS_KER=""; DNS_NOTE=""
wait_line() { # FILE PATTERN TRIES(0.1 s)
  local i; for i in $(seq "$3"); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1
}
if on dns && [ "$NO_HUGE" = true ]; then
  DNS_NOTE="Skipped: the engine-mode responder is a client process (DPDK multi-process needs hugepages) and fewer than 200 were free."
elif on dns; then
  "$DNS_LOAD" pcap "$W/dns.pcap" --dst 198.18.0.1:53 --count 4096
  cat >"$W/dns.toml" <<EOF
[eal]
lcores = "0@0,1@1"
no_huge = false
memory_mb = $MEM_MB
no_pci = true
file_prefix = "bench-dns-$$"
vdevs = ["net_pcap0,rx_pcap=$W/dns.pcap,infinite_rx=1,tx_pcap=/dev/null,tx_pcap=/dev/null"]

[mempool]
mbufs = 16383

[[port]]
name = "net_pcap0"
tx_queues = 2
rx_checksum_offload = false
addresses = ["198.18.0.1/16"]

[[lcore]]
id = 1
role = "rx"
queues = ["net_pcap0:0"]
EOF
  log "run dns-engine (net_pcap replay -> engine -> udpdemux-dns client, ${SECS}s)"
  "$BIN" run --config "$W/dns.toml" --duration $((SECS + 60)) --stats-json "$W/dns-engine.json" >"$W/dns-engine.log" 2>&1 &
  epid=$!
  wait_line "$W/dns-engine.log" "port net_pcap0" 200 || log "dns-engine: port not up: $(tail -1 "$W/dns-engine.log")"
  taskset -c 0 "$DNS_BIN" --zone conf/dns-zone.toml "bench-dns-$$" --bind dns4@198.18.0.1:53 \
    >"$W/dns-engine-srv.log" 2>&1 &
  spid=$!
  if wait_line "$W/dns-engine-srv.log" '^ready' 200; then
    sleep "$SECS"
  else
    log "dns-engine: the responder did not start: $(tail -1 "$W/dns-engine-srv.log")"; FAIL=1
  fi
  kill -INT "$spid" 2>/dev/null || true; wait "$spid" || true
  kill -INT "$epid" 2>/dev/null || true; wait "$epid" || true
  [ -s "$W/dns-engine.json" ] || echo '{}' >"$W/dns-engine.json"
  [ "$(jq -r '.books_balanced // false' "$W/dns-engine.json")" = true ] || { log "dns-engine: books do NOT balance"; FAIL=1; }
  grep '^{' "$W/dns-engine-srv.log" | tail -1 >"$W/dns-engine-srv.json" || echo '{}' >"$W/dns-engine-srv.json"
  DNS_ENG=$(jq -r --argjson s "$SECS" '(.responses // 0) / $s / 1e6' "$W/dns-engine-srv.json")

  log "run dns-kernel (dns_load -> loopback -> udpdemux-dns --kernel, ${SECS}s)"
  taskset -c 1 "$DNS_BIN" --zone conf/dns-zone.toml --kernel 127.0.0.1:5353 >"$W/dns-kernel-srv.log" 2>&1 &
  spid=$!
  if wait_line "$W/dns-kernel-srv.log" '^ready' 100; then
    taskset -c 0 "$DNS_LOAD" kernel --dst 127.0.0.1:5353 --count 4096 --secs "$SECS" >"$W/dns-kernel.json" 2>"$W/dns-kernel.log" ||
      { log "dns-kernel: dns_load exited $?: $(tail -1 "$W/dns-kernel.log")"; FAIL=1; }
  else
    log "dns-kernel: the responder did not start: $(tail -1 "$W/dns-kernel-srv.log")"; FAIL=1
  fi
  kill -INT "$spid" 2>/dev/null || true; wait "$spid" || true
  [ -s "$W/dns-kernel.json" ] || echo '{}' >"$W/dns-kernel.json"
  grep '^{' "$W/dns-kernel-srv.log" | tail -1 >"$W/dns-kernel-srv.json" || echo '{}' >"$W/dns-kernel-srv.json"
  DNS_KER=$(jq -r '.mpps // 0' "$W/dns-kernel.json")
fi

# 8. QUIC bulk transfer and handshakes (issue 20): the quic_echo server on udpdemux
# (net_af_packet on the host end of a veth pair, RX lcore on CPU 1, main
# lcore on CPU 0; quinn on the RX lcore, `--runtime lcore`, the example's
# default) against the same server
# with --kernel (quinn's own tokio UDP socket: the kernel's UDP with
# GRO/GSO) on the same veth end, which then has 198.18.0.1 itself. The same
# quic_client in the namespace: 100 streams at once, BENCH_QUIC_BYTES each,
# every byte checked; bytes/s = bytes echoed back to it / its run time.
# Then handshake pairs the same way (a fresh server each run): the client
# makes BENCH_QUIC_HANDSHAKES fresh connections, BENCH_QUIC_CONCURRENCY at
# once, each a full TLS 1.3 handshake (no resumption), a 32-byte echo and a
# close; handshakes/s = connections completed / its run time. The server
# must have accepted exactly that many, all closed by the client. The
# same again at each concurrency of BENCH_QUIC_SWEEP (fewer in flight: the
# rate bound by round trips, not by the two CPUs). Each client run also
# notes the whole machine's busy and idle CPU time (/proc/stat), reported
# as CPU per handshake: on a saturated machine the rate is its inverse.
# The bulk pairs have a third server when BENCH_QUIC_KERNEL_RCVBUF > 0: the
# kernel backend with that SO_RCVBUF (`--kernel-rcvbuf`), where quinn's own
# socket keeps rmem_default (212 992 B) and the engine's socket has a 16 MiB
# budget; a bulk flight overflows the default (the client's losses).
QUIC_UD=(); QUIC_KER=(); QUIC_KB=(); QUIC_UNUSED=(); QUIC_HS_UD=(); QUIC_HS_KER=(); QUIC_NOTE=""
quic_net_up() {
  QNS="udxbq$$"; QH="ubq$$a"; QP="ubq$$b"
  ip netns add "$QNS"
  ip link add "$QH" type veth peer name "$QP"
  ip link set "$QP" netns "$QNS"
  sysctl -q -w "net.ipv6.conf.$QH.disable_ipv6=1"
  # Real checksums on the wire in both modes (net_af_packet would see
  # veth's unfinished ones), as in the tests' namespaces.
  ethtool -K "$QH" tx off rx off >/dev/null
  ip netns exec "$QNS" ethtool -K "$QP" tx off rx off >/dev/null
  ip link set "$QH" up
  ip -n "$QNS" addr add 198.18.0.2/24 dev "$QP"
  ip -n "$QNS" link set lo up
  ip -n "$QNS" link set "$QP" up
}
quic_net_down() { ip link del "$QH" 2>/dev/null || true; ip netns del "$QNS" 2>/dev/null || true; }
# quic_client_run NAME ARGS...: the client against 198.18.0.1:4433, its
# JSON line in NAME.json, and in NAME.cpu, in USER_HZ ticks over the
# client's run: the whole machine's busy and idle CPU time (/proc/stat:
# client, server and kernel together, what a saturated machine divides
# among them), both summed, and the CPU time of the server's busiest thread
# (its threads' times before and after in NAME.t0 and NAME.t1).
quic_client_run() {
  local name=$1 b0 i0 b1 i1 spid; shift
  spid=$(pgrep -f -- "--cert-out $W/$name.der" | head -1)
  quic_threads "$spid" >"$W/$name.t0"
  read -r b0 i0 < <(cpu_ticks)
  ip netns exec "$QNS" "$QUIC_CLIENT" --connect 198.18.0.1:4433 --cert "$W/$name.der" "$@" \
    >"$W/$name.json" 2>"$W/$name-client.log" || { log "$name: client failed: $(tail -1 "$W/$name-client.log") $(cat "$W/$name.json")"; FAIL=1; }
  read -r b1 i1 < <(cpu_ticks)
  quic_threads "$spid" >"$W/$name.t1"
  echo "$((b1 - b0)) $((i1 - i0)) $((b1 + i1 - b0 - i0)) $(awk 'NR == FNR { t[$1] = $2; next } ($1 in t) && $2 - t[$1] > m { m = $2 - t[$1] } END { print m + 0 }' "$W/$name.t0" "$W/$name.t1")" >"$W/$name.cpu"
  [ -s "$W/$name.json" ] || echo '{}' >"$W/$name.json"
}
# cpu_ticks: the whole machine's busy and idle CPU time so far, "BUSY IDLE"
# in USER_HZ ticks (/proc/stat's first line; iowait counts as idle).
cpu_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6; exit }' /proc/stat; }
# quic_threads PID: each thread of PID and its CPU time so far (ticks).
quic_threads() {
  local t
  [ -n "$1" ] || return 0
  for t in /proc/"$1"/task/*; do
    awk -v id="${t##*/}" '{ sub(/^.*\) /, ""); print id, $12 + $13 }' "$t/stat" 2>/dev/null || true
  done
}
# quic_hs_cpu NAME MODE: medians over NAME's MODE runs of the CPU
# milliseconds (busy, all CPUs) per handshake, the idle share of the
# machine, and the share of the run its busiest server thread was on a CPU,
# "MS IDLE% THREAD%".
quic_hs_cpu() {
  local i f ms=() idle=() thr=() hz; hz=$(getconf CLK_TCK)
  for i in $(seq "$QPAIRS"); do
    f=$W/$1-$2$i
    [ -s "$f.cpu" ] || continue
    ms+=("$(awk -v hz="$hz" -v n="$(jq -r '.handshakes_ok // 0' "$f.json")" '{ if (n > 0) printf "%.3f", $1 * 1000 / hz / n; else print 0 }' "$f.cpu")")
    idle+=("$(awk '{ t = $1 + $2; if (t > 0) printf "%.1f", $2 * 100 / t; else print 0 }' "$f.cpu")")
    # The run's wall time in ticks: all CPUs' ticks over their number.
    thr+=("$(awk -v n="$(nproc)" '{ if ($3 > 0) printf "%.0f", $4 * 100 * n / $3; else print 0 }' "$f.cpu")")
  done
  echo "$(median "${ms[@]}") $(median "${idle[@]}") $(median "${thr[@]}")"
}
quic_hs_check() { # NAME: the server saw and accepted every handshake the client made, each closed by it, none left
  local ok acc
  ok=$(jq -r '.handshakes_ok // 0' "$W/$1.json")
  acc=$(jq -r '[.connections.incoming, .connections.accepted, .connections.closed_by_peer, .connections.open] | map(. // -1) | join(" ")' "$W/$1-srv.json")
  [ "$acc" = "$ok $ok $ok 0" ] || { log "$1: the client completed $ok handshakes; the server's incoming/accepted/closed by peer/open after $(jq -r '.connections.settle_ms // "-"' "$W/$1-srv.json") ms: $acc"; FAIL=1; }
}
quic_server() { # NAME ARGS...: start quic_echo, wait for ready
  local name=$1; shift
  exec {QIN}> >(exec "$QUIC_ECHO" --listen 198.18.0.1:4433 --cert-out "$W/$name.der" "$@" >"$W/$name-srv.log" 2>&1)
  wait_line "$W/$name-srv.log" '^ready' 300 || { log "$name: server did not start: $(tail -1 "$W/$name-srv.log")"; FAIL=1; }
}
quic_server_stop() { # NAME
  echo stop >&"$QIN" 2>/dev/null || true; exec {QIN}>&-
  wait_line "$W/$1-srv.log" '^{' 300 || log "$1: no exit line from the server"
  grep '^{' "$W/$1-srv.log" | tail -1 >"$W/$1-srv.json" || echo '{}' >"$W/$1-srv.json"
  [ "$(jq -r '.books_balanced // false' "$W/$1-srv.json")" = true ] || { log "$1: books do NOT balance"; FAIL=1; }
}
# quic_pairs NAME WHAT FIELD UDARRAY KERARRAY KBARRAY CHECK CLIENTARGS...:
# BENCH_QUIC_PAIRS alternating pairs (udpdemux first in odd pairs, the
# kernel first in even ones; with KBARRAY not "-" and QRCVBUF > 0 a third
# run in each, the kernel with SO_RCVBUF QRCVBUF, last in odd pairs and
# first in even ones), a fresh server each run; the client's FIELD of each
# run appended to UDARRAY / KERARRAY / KBARRAY; CHECK (a function of the
# run's name, or :) after each run's server has stopped.
quic_pairs() {
  local name=$1 what=$2 field=$3 kbname=$6 check=$7 i mode run modes
  local -n ud=$4 ker=$5
  [ "$kbname" != - ] && [ "$QRCVBUF" -gt 0 ] || kbname=QUIC_UNUSED
  local -n kb=$kbname
  shift 7
  modes="ud ker"; [ "$kbname" != QUIC_UNUSED ] && modes="ud ker kb"
  for i in $(seq "$QPAIRS"); do
    for mode in $( [ $((i % 2)) = 1 ] && echo "$modes" || echo "$modes" | tr ' ' '\n' | tac | tr '\n' ' '); do
      run=$name-$mode$i
      if [ "$mode" = ud ]; then
        log "run $run (quinn on udpdemux, $what)"
        quic_server "$run" --iface "$QH" --addr 198.18.0.1/24 --prefix "bench-$name-$$-$i"
      elif [ "$mode" = ker ]; then
        log "run $run (quinn on the kernel's UDP, $what)"
        ip addr add 198.18.0.1/24 dev "$QH"
        quic_server "$run" --kernel
      else
        log "run $run (quinn on the kernel's UDP, SO_RCVBUF $QRCVBUF, $what)"
        ip addr add 198.18.0.1/24 dev "$QH"
        quic_server "$run" --kernel --kernel-rcvbuf "$QRCVBUF"
      fi
      quic_client_run "$run" "$@"
      quic_server_stop "$run"
      "$check" "$run"
      if [ "$mode" = ud ]; then
        ud+=("$(jq -r "$field // 0" "$W/$run.json")")
      else
        if [ "$mode" = ker ]; then
          ker+=("$(jq -r "$field // 0" "$W/$run.json")")
        else
          kb+=("$(jq -r "$field // 0" "$W/$run.json")")
        fi
        ip addr del 198.18.0.1/24 dev "$QH"
        # The namespace forgets the kernel's MAC-to-address binding with
        # the address: the engine answers ARP for it next.
        ip -n "$QNS" neigh flush dev "$QP"
      fi
    done
  done
}
# quic_md UDARRAY KERARRAY UNIT DIVISOR FORMAT [KBARRAY]: the QUIC
# section's table of pairs (udpdemux, kernel, ratio; with KBARRAY non-empty
# also the kernel with SO_RCVBUF QRCVBUF and udpdemux's ratio to it) and its
# median line(s)
quic_md() {
  local -n ud=$1 ker=$2
  local unit=$3 div=$4 f=$5 i u k b
  local -n kb=${6:-QUIC_UNUSED}
  quic_q() { awk -v x="$1" -v d="$div" -v f="$f" 'BEGIN { printf f, x / d }'; }
  if [ "${#kb[@]}" -gt 0 ]; then
    echo "| run | udpdemux $unit | kernel $unit | ratio | kernel, SO_RCVBUF $QRCVBUF, $unit | ratio |"
    echo "|---|---:|---:|---:|---:|---:|"
  else
    echo "| pair | udpdemux $unit | kernel $unit | ratio |"
    echo "|---|---:|---:|---:|"
  fi
  for i in $(seq "$QPAIRS"); do
    u=${ud[$((i - 1))]:-0}; k=${ker[$((i - 1))]:-0}; b=${kb[$((i - 1))]:-0}
    if [ "${#kb[@]}" -gt 0 ]; then
      echo "| $i | $(quic_q "$u") | $(quic_q "$k") | $(ratio "$u" "$k") | $(quic_q "$b") | $(ratio "$u" "$b") |"
    else
      echo "| $i | $(quic_q "$u") | $(quic_q "$k") | $(ratio "$u" "$k") |"
    fi
  done
  echo
  u=$(median "${ud[@]}"); k=$(median "${ker[@]}")
  echo "Median: udpdemux $(quic_q "$u") $unit / kernel $(quic_q "$k") $unit = $(ratio "$u" "$k") (goal > 1: $(goal "$(xratio "$u" "$k")" ">" 1))."
  if [ "${#kb[@]}" -gt 0 ]; then
    b=$(median "${kb[@]}")
    echo "Against the kernel backend with SO_RCVBUF $QRCVBUF (granted $(jq -r '.kernel_rcvbuf[0] // "-"' "$W/quic-kb1-srv.json" 2>/dev/null) B by the kernel, which doubles the request after capping it at rmem_max, $(sysctl -n net.core.rmem_max) B; quinn's own socket has the system default, $(sysctl -n net.core.rmem_default) B, and the engine's socket a 16 MiB budget): udpdemux $(quic_q "$u") $unit / $(quic_q "$b") $unit = $(ratio "$u" "$b")."
  fi
}
# quic_mode_name MODE: how the report names a mode's runs (after the first)
quic_mode_name() {
  case $1 in
    ud) echo "udpdemux" ;;
    ker) echo "; kernel" ;;
    kb) echo "; kernel with SO_RCVBUF $QRCVBUF" ;;
  esac
}
# quic_path_line: the bulk runs' client-side path at their end (quinn's
# PathStats, the client's JSON `path`): medians per mode of the smoothed RTT
# and of the share of the client's packets quinn declared lost (a loss is
# declared when an ACK is late or a later packet is acknowledged first, so
# it also counts ACKs held up on the server's side, not only drops).
quic_path_line() {
  local mode i v rtt=() lost=() out=""
  for mode in ud ker kb; do
    rtt=(); lost=()
    for i in $(seq "$QPAIRS"); do
      [ -s "$W/quic-$mode$i.json" ] || continue
      v=$(jq -r '.path.rtt_us // empty' "$W/quic-$mode$i.json"); [ -n "$v" ] && rtt+=("$v")
      v=$(jq -r '.path | if . == null or .sent_packets == 0 then empty else .lost_packets / .sent_packets * 100 end' "$W/quic-$mode$i.json"); [ -n "$v" ] && lost+=("$v")
    done
    [ "${#rtt[@]}" -gt 0 ] || continue
    out+="$(quic_mode_name "$mode") RTT $(median "${rtt[@]}") µs, $(awk -v x="$(median "${lost[@]}")" 'BEGIN { if (x == "-") print "-"; else printf "%.1f", x }')% of its packets declared lost"
  done
  echo "The client's path at the end of the bulk runs (quinn's \`PathStats\`, medians): $out."
}
# quic_server_line NAME [handshakes]: the server's side of NAME's runs
# (quinn's ConnectionStats summed over the connections, the server's JSON
# `connections`), medians per mode: datagrams sent and per send (a GSO batch
# is one send), ACK frames sent, and DATA_BLOCKED / STREAM_DATA_BLOCKED
# frames sent (the server held back by the client's flow control); per
# handshake when the second argument is given (the handshake runs).
quic_server_line() {
  local name=$1 per=${2:-} mode i f v out="" d=() b=() a=() k=()
  for mode in ud ker kb; do
    d=(); b=(); a=(); k=()
    for i in $(seq "$QPAIRS"); do
      f=$W/$name-$mode$i-srv.json
      [ -s "$f" ] || continue
      v=$(jq -r '.connections | if .udp_tx == null then empty else .udp_tx end' "$f"); [ -n "$v" ] || continue
      if [ -n "$per" ]; then
        d+=("$(jq -r '.connections | .udp_tx / ([.accepted, 1] | max)' "$f")")
        a+=("$(jq -r '.connections | .acks_tx / ([.accepted, 1] | max)' "$f")")
      else
        d+=("$v")
        a+=("$(jq -r '.connections.acks_tx' "$f")")
      fi
      b+=("$(jq -r '.connections | .udp_tx / ([.udp_tx_ios, 1] | max)' "$f")")
      k+=("$(jq -r '.connections.blocked_tx' "$f")")
    done
    [ "${#d[@]}" -gt 0 ] || continue
    local nf=%.0f; [ -n "$per" ] && nf=%.1f
    out+="$(quic_mode_name "$mode") $(awk -v x="$(median "${d[@]}")" -v f="$nf" 'BEGIN { printf f, x }') datagrams sent${per:+ per handshake} ($(awk -v x="$(median "${b[@]}")" 'BEGIN { printf "%.1f", x }') per send), $(awk -v x="$(median "${a[@]}")" -v f="$nf" 'BEGIN { printf f, x }') ACK frames sent${per:+ per handshake}, $(median "${k[@]}") flow-control blocked frames sent"
  done
  if [ -n "$out" ]; then
    echo "The server's side ($name runs, quinn's \`ConnectionStats\` summed over its connections, medians): $out."
  fi
}
if on quic; then
  quic_net_up
  trap quic_net_down EXIT
  quic_pairs quic "100 x $QBYTES B" .bytes_per_sec QUIC_UD QUIC_KER QUIC_KB : --streams 100 --bytes "$QBYTES"
  quic_pairs quic-hs "$QHS handshakes, $QCONC at once" .handshakes_per_sec QUIC_HS_UD QUIC_HS_KER - quic_hs_check \
    --handshakes "$QHS" --concurrency "$QCONC"
  for c in $QSWEEP; do
    declare -a "QUIC_SW_UD_$c=()" "QUIC_SW_KER_$c=()"
    quic_pairs "quic-hs-c$c" "$QHS handshakes, $c at once" .handshakes_per_sec "QUIC_SW_UD_$c" "QUIC_SW_KER_$c" - quic_hs_check \
      --handshakes "$QHS" --concurrency "$c"
  done
  quic_net_down
  trap - EXIT
fi
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ================================================================ report
hist() { # NAME SOCKET: the stage-to-delivery histogram, printed like bpftrace's hist()
  jq -r --arg s "$2" '(.sockets // [])[] | select(.name == $s) | .stage_latency_us | @tsv' "$W/$1.json" | awk -F'\t' '
    { m = 0; lo = 0; hi = -1
      for (i = 1; i <= NF; i++) { if ($i > m) m = $i; if ($i > 0) { if (hi < 0) lo = i; hi = i } }
      if (m == 0) { print "  (no samples)"; exit }
      for (i = lo; i <= hi; i++) {
        b = i - 1
        if (b == 0) l = "[0]"; else if (b == 1) l = "[1]"; else l = sprintf("[%d, %d)", 2 ^ (b - 1), 2 ^ b)
        n = int($i * 50 / m); bar = ""; for (k = 0; k < n; k++) bar = bar "@"
        printf "%-16s %10d |%-50s|\n", l, $i, bar } }'
}
sock() { jq -r --arg s "$2" "(.sockets // [])[] | select(.name == \$s) | $3" "$(jf "$1")"; }
others() { # NAME FIELD: summed over the four non-victim sockets
  jq -r "[(.sockets // [])[] | select(.name != \"victim\") | .$2] | add // 0" "$(jf "$1")"
}
peak() { jq -r '.peak_rss_kb // "n/a"' "$(jf "$1")"; }
pools() { jq -r '(.pools // []) | map("\(.name): \(.size) mbufs") | if length == 0 then "n/a" else join(", ") end' "$(jf "$1")"; }
nspp() { awk -v m="$1" 'BEGIN { if (m > 0) printf "%.1f", 1000 / m; else print "-" }'; }
added() { awk -v b="$1" -v p="$2" 'BEGIN { if (b > 0 && p > 0) printf "%.0f%%", (b / p - 1) * 100; else print "n/a" }'; }
pct() { awk -v b="$1" -v p="$2" 'BEGIN { if (b > 0 && p > 0) printf "%.1f", (b / p - 1) * 100; else print 1e9 }'; }
# median V...: the middle value (mean of the two middle ones for an even count); "-" for none.
median() {
  [ "$#" -gt 0 ] || { echo -; return; }
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# spread V...: "min–max"
spread() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%s–%s", lo, hi; else print "-" }'; }
# The same for raw rates (not yet rounded for the table).
fspread() { local a=() v; for v in "$@"; do a+=("$(fmt "$v")"); done; spread "${a[@]}"; }
# goal V OP G (OP: >=, > or <=): "met" or "**not met**"; V unrounded where it can be.
goal() { if awk -v v="$1" -v op="$2" -v g="$3" 'BEGIN { if (v == "-" || v == "") exit 1; exit !(op == ">=" ? v + 0 >= g + 0 : op == ">" ? v + 0 > g + 0 : v + 0 <= g + 0) }'; then echo "met"; else echo "**not met**"; fi; }
# What a --floor pipeline run delivered: the sockets' delivered if it counts
# them, else what its consumers took (consumed, or the consumers' datagrams).
floor_delivered_mpps() {
  jq -r '([(.sockets // [])[].delivered] | add // 0) as $d
    | ([(.sockets // [])[].consumed] | add // 0) as $c
    | ([(.consumers // [])[].datagrams] | add // 0) as $g
    | if (.seconds // 0) > 0 then ([$d, $c, $g] | map(select(. > 0)) | first // 0) / .seconds / 1e6 else 0 end' "$(jf "$1")"
}
share() { # NAME: the four other sockets' delivered / offered, in percent
  awk -v d="$(others "$1" delivered)" -v o="$(others "$1" offered)" 'BEGIN { printf "%.2f", (o > 0 ? d / o * 100 : 0) }'
}
socks_drop() { jq -r --arg r "$2" '[(.sockets // [])[].drops[$r] // 0] | add // 0' "$(jf "$1")"; }
kernel_mpps() { jq -r --argjson s "$1" '[.[] | select(.payload == $s) | .mpps] | first // 0' "$W/kernel.json"; }
B64=$(mpps bare64)

{
CPU=$(awk -F: '/model name/ { gsub(/^ +/, "", $2); print $2; exit }' /proc/cpuinfo)
echo "## udpdemux benchmark"
echo
echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname): $CPU, $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r), DPDK $(pkg-config --modversion libdpdk 2>/dev/null || echo '?'), $( [ "$NO_HUGE" = true ] && echo 'no hugepages (--no-huge)' || echo '2 MB hugepages')."
echo "Load average before / after: $LOAD0 / $LOAD1 (the figures are only as quiet as the machine was). ${SECS} s per run, pcaps of $FRAMES frames replayed by \`net_pcap\` \`infinite_rx=1\`; main lcore on CPU 0, one RX lcore on CPU 1; consumers on the main lcore."
echo "Command: \`bash scripts/bench.sh\` (as root) (BENCH_SECS=$SECS$( [ -z "$ONLY" ] || echo ", BENCH_ONLY=$ONLY: only these sections ran"))."
echo
if on rate; then
echo "### Receive rate: the vdev's limit, the bare loop, the pipeline"
echo
echo "Traffic: \`$SPEC --flood-share 0\` (four sockets, IPv4 and IPv6, UDP payload as shown). Ratios are to the bare loop at the same size."
echo
echo "| run | payload B | Mpps received | ratio to bare | Mpps delivered | drops by reason | stage p50 / p99 µs (dns4) |"
echo "|---|---:|---:|---:|---:|---|---|"
echo "| dpdk-testpmd rxonly | 64 | $TP | $(ratio "$TP" "$B64") | - | - | - |"
for s in 64 512 1400; do
  B=$(mpps "bare$s")
  echo "| bare rx-and-free | $s | $(fmt "$B") | 1.00 | - | - | - |"
  P=$(mpps "pipe$s")
  echo "| pipeline numa-queues | $s | $(fmt "$P") | $(ratio "$P" "$B") | $(fmt "$(delivered_mpps "pipe$s")") | $(drops "pipe$s") | $(sock "pipe$s" dns4 .stage_p50_us) / $(sock "pipe$s" dns4 .stage_p99_us) |"
done
for st in busylock direct; do
  P=$(mpps "pipe64-$st")
  echo "| pipeline $st | 64 | $(fmt "$P") | $(ratio "$P" "$B64") | $(fmt "$(delivered_mpps "pipe64-$st")") | $(drops "pipe64-$st") | $(sock "pipe64-$st" dns4 .stage_p50_us) / $(sock "pipe64-$st" dns4 .stage_p99_us) |"
done
P=$(mpps pipe64-nocache)
echo "| pipeline numa-queues, small cache off | 64 | $(fmt "$P") | $(ratio "$P" "$B64") | $(fmt "$(delivered_mpps pipe64-nocache)") | $(drops pipe64-nocache) | $(sock pipe64-nocache dns4 .stage_p50_us) / $(sock pipe64-nocache dns4 .stage_p99_us) |"
for r in 1m-hot 1m-spread 1m-miss; do
  P=$(mpps "pipe64-$r")
  case $r in
    1m-hot) what="1 000 000 sockets, traffic to the 5 real ones" ;;
    1m-spread) what="1 000 000 sockets, traffic spread over 4096 of them (IPv4)" ;;
    *) what="1 000 000 sockets, the same frames to unbound addresses (parse, lookup miss, count, free: no stage, no delivery)" ;;
  esac
  echo "| pipeline numa-queues, $what | 64 | $(fmt "$P") | $(ratio "$P" "$B64") | $(fmt "$(delivered_mpps "pipe64-$r")") | $(drops "pipe64-$r") | - |"
done
echo
addcost() { awk -v b="$B64" -v p="$(mpps "$1")" 'BEGIN { if (b > 0 && p > 0) printf "%.0f%%", (b / p - 1) * 100; else print "n/a" }'; }
echo "Added cost of the whole RX core (rx burst, parse, demux, count, stage, free) against the bare loop, as more time per packet, 64-byte payloads: $(addcost pipe64) with 5 sockets, $(addcost pipe64-1m-hot) with 1 000 000 sockets (hot traffic), $(addcost pipe64-1m-spread) with 1 000 000 sockets (spread traffic), $(addcost pipe64-1m-miss) for parse + lookup + count + free alone in the million-entry table; goal < 40% with 1 000 000 sockets. The 1 000 000 sockets are \`engine.filler_sockets\`: a million flow-table bindings delivering to one socket (DPDK's memzone limit allows a few thousand delivery rings), so the lookup is real and the delivery is one socket's."
echo
fi
if on rxcore; then
echo "### The RX core against the bare loop (parse + early demux)"
echo
echo "\`run --demux-only\`: rx burst, parse (software checksums: \`net_pcap\` sets no offload flags), look up, store the result in the mbuf, count, free; nothing staged or delivered. Against \`run --bare\` (rx burst, free) on the same replay, 64-byte payloads (106-byte IPv4 frames), in rounds of alternating runs. Each round also runs the two floors, \`run --floor minimal\` (read the UDP destination port at a fixed offset, one read in a port-indexed table, the result into the mbuf: no validation, no hash) and \`run --floor checksums\` (the same plus the IPv4 header and UDP checksums in software, which the issue asks for when the port does not validate them): what any RX core pays here, whatever its parser and table; and \`run --floor rte-hash\` (the checksums floor with DPDK's \`rte_hash\` over the same 1 000 000 bindings in place of the port table): what a DPDK-native lookup at this size adds."
echo
echo "| round | ns/pkt bare | floor: ns/pkt, added | floor + checksums: ns/pkt, added | floor rte-hash, 1 000 000 bindings: ns/pkt, added | RX core, 1 000 000 sockets: ns/pkt, added | RX core / floor + checksums (ns/pkt) | RX core / floor rte-hash (ns/pkt) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
ADDS=(); FLOORS=(); FLOORCS=(); CSR=(); HR=()
for k in 1 2 3; do
  B=$(mpps "rxcore-bare-$k"); F=$(mpps "rxcore-floor-$k"); C=$(mpps "rxcore-floorcs-$k"); H=$(mpps "rxcore-floorhash-$k"); P=$(mpps "rxcore-1m-$k")
  ADDS+=("$(pct "$B" "$P")"); FLOORS+=("$(pct "$B" "$F")"); FLOORCS+=("$(pct "$B" "$C")")
  # ns/pkt RX core / ns/pkt floor + checksums = Mpps floor + checksums / Mpps RX core.
  R=$(ratio "$C" "$P"); [ "$R" = - ] || CSR+=("$R")
  RH=$(ratio "$H" "$P"); [ "$RH" = - ] || HR+=("$RH")
  echo "| $k | $(nspp "$B") | $(nspp "$F"), $(added "$B" "$F") | $(nspp "$C"), $(added "$B" "$C") | $(nspp "$H"), $(added "$B" "$H") | $(nspp "$P"), $(added "$B" "$P") | ${R}x | ${RH}x |"
done
MED=$(median "${ADDS[@]}")
echo
echo "Medians: floor $(median "${FLOORS[@]}")%, floor + checksums $(median "${FLOORCS[@]}")%, RX core with 1 000 000 sockets ${MED}% (goal: under 40%; the spread pcap sends to 4096 of the million bindings)."
echo
CSM=$(median "${CSR[@]}")
echo "RX core (\`--demux-only\`, 1 000 000 sockets, spread traffic) against \`--floor checksums\`, ns/pkt: median ${CSM}x, spread $(spread "${CSR[@]}")x over ${#CSR[@]} rounds (issue 13's goal: ≤ 1.5x: $(goal "$CSM" "<=" 1.5))."
echo
HM=$(median "${HR[@]}")
CHR=(); for k in 1 2 3; do R=$(ratio "$(mpps "rxcore-floorcs-$k")" "$(mpps "rxcore-floorhash-$k")"); [ "$R" = - ] || CHR+=("$R"); done
CHM=$(median "${CHR[@]}")
echo "What stops that goal: \`--floor rte-hash\` is \`--floor checksums\` with DPDK's own exact-match table (\`rte_hash\`, CRC32, \`rte_hash_lookup_bulk_data\` per burst, one table per family as l3fwd's exact-match mode keeps them) over the same million bindings in place of the port-indexed read. It alone takes median ${CHM}x the checksums floor's time (spread $(spread "${CHR[@]}")x), $(goal "$CHM" "<=" 1.5 | sed 's/^\*\*not met\*\*$/beyond/; s/^met$/within/') the 1.5x the goal allows for the whole RX core, before any header is validated beyond the checksums. The RX core (full parse and validation, one lookup per datagram, metadata, counters) against it: median **${HM}x**, spread $(spread "${HR[@]}")x."
echo
# tlbcase CASE: the medians over the rounds of tlb_reach's ns a lookup.
tlbcase() { local k v=(); for k in 1 2 3; do v+=("$(awk -v c="$1" '$1 == c { print $2 }' "$W/tlb-$k.txt" 2>/dev/null)"); done; median "${v[@]}"; }
if [ -s "$W/tlb-1.txt" ]; then
  TS=$(tlbcase spread+stream); TP=$(tlbcase packed+stream)
  TD=$(awk -v a="$TS" -v b="$TP" 'BEGIN { if (a > 0 && b > 0) printf "%.1f", a - b; else print "-" }')
  CSNS=(); for k in 1 2 3; do CSNS+=("$(nspp "$(mpps "rxcore-floorcs-$k")")"); done
  # What the difference says depends on its size on this machine: the
  # same lines fit the L2 either way, so only their pages differ.
  if [ "$TD" = - ]; then
    TWHY=""
  elif awk -v d="$TD" 'BEGIN { exit !(d + 0 >= 1) }'; then
    TWHY="The same lines fit the L2 either way: what differs is the pages they sit on, spread over more of them than the TLB holds, and the page walks wait with the stream's misses."
  else
    TWHY="The same lines fit the L2 either way and their pages differ, yet the spread costs under a nanosecond here: on this machine the table's pages are not what a big table's lookups pay for."
  fi
  echo "What the table's size alone costs here, without the engine (\`scripts/tlb_reach.c\` on CPU 1, 3 rounds, medians): a load of one of 4096 hot lines, each asked for 8 lookups ahead, takes $(tlbcase spread) ns with the lines spread over 128 MB of huge-page-advised memory (where a million-binding table's hash puts them) against $(tlbcase packed) ns with the same lines packed into 256 KB; with a replay-like stream beside it (two lines of a 2 KiB frame copied per lookup, from 8192 frames, as \`net_pcap\`'s infinite_rx copies), $TS against $TP ns: **$TD ns a lookup** for the spread alone, against the checksums floor's median $(median "${CSNS[@]}") ns a datagram. $TWHY"
  echo
fi
echo "| other RX core runs | pcap | ns/pkt bare | ns/pkt RX core | added |"
echo "|---|---|---:|---:|---:|"
P=$(mpps rxcore-5-1)
echo "| 5 sockets (round 1) | \`flood.toml --flood-share 0\` (IPv4 and IPv6) | $(nspp "$B64") | $(nspp "$P") | $(added "$B64" "$P") |"
P=$(mpps pipe64-1m-miss); B=$(mpps rxcore-bare-1)
echo "| 1 000 000 sockets, every lookup misses (pipeline run, nothing to stage) | the same frames to unbound addresses | $(nspp "$B") | $(nspp "$P") | $(added "$B" "$P") |"
echo
S5=(); for k in 1 2 3; do R=$(ratio "$(mpps "rxcore-floorhash5-$k")" "$(mpps "rxcore-5-$k")"); [ "$R" = - ] || S5+=("$R"); done
echo "With 5 sockets (the plain replay, IPv4 and IPv6), alternating: \`--floor rte-hash\` $(for k in 1 2 3; do printf '%s ' "$(nspp "$(mpps "rxcore-floorhash5-$k")")"; done)ns/pkt, the RX core $(for k in 1 2 3; do printf '%s ' "$(nspp "$(mpps "rxcore-5-$k")")"; done)ns/pkt: RX core / floor rte-hash median **$(median "${S5[@]}")x**, spread $(spread "${S5[@]}")x."
echo
echo "Where the RX core's time goes is in \`udpdemux bench-demux\` below: parse alone, parse + lookup, and parse + lookup when the port has validated the checksums."
echo
fi
if on pipeline; then
echo "### The pipeline against its reference: \`run --floor pipeline\` (issue 13)"
echo
echo "\`run --floor pipeline\` is the minimal cross-core pipeline: the RX lcore reads the UDP destination port at a fixed offset and puts the mbuf into that socket's delivery ring; the socket's consumer dequeues in bursts, reads \`pkt_len\` and frees in bulk. \`run --floor pipeline-demux\` is the same with the engine's own parser (headers validated; checksums in software, since \`net_pcap\` sets no offload flags) and flow-table lookup choosing the ring: what any validating early demux pays here before staging and accounting. \`run --floor pipeline-checksums\` is the port floor plus the IPv4 header and UDP checksums verified in software: validation alone, with no parser or hash. \`run --floor pipeline-rte-hash\` verifies the same checksums and then chooses the ring with DPDK's \`rte_hash\` on the destination address and port (bulk lookups per burst, one table per family): a DPDK-native exact-match demux. Same config, lcores and consumers as the pipeline: RX lcore 1 on CPU 1, every consumer on the main lcore on CPU 0, the plain 64-byte replay to 4 sockets (\`$SPEC --flood-share 0\`), \`rcvbuf = $RCVBUF_BIG\` on every socket. $PAIRS alternating rounds (floor, floor with checksums, floor with rte_hash, floor with demux, pipeline); Mpps delivered = datagrams put into the sockets' delivery rings per second. Cross-CPU figures are bimodal on this machine (see the notes in docs/benchmarks.md): read the median and the spread, not one round."
echo
FR=(); FRX=(); PD=(); PDD=(); XR=(); PXR=(); CR=(); HR=(); PHR=(); FD=(); HD=()
echo "| round | floor pipeline Mpps delivered | floor pipeline-checksums Mpps delivered | floor pipeline-rte-hash Mpps delivered | floor pipeline-demux Mpps delivered | pipeline Mpps received | pipeline Mpps delivered | floor-demux / floor | pipeline / floor | pipeline / floor-demux | pipeline drops by reason | floor drops by reason |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
for k in $(seq "$PAIRS"); do
  P=$(delivered_mpps "pair-pipe-$k"); PD+=("$(fmt "$P")")
  F=-; X=-; R=-; RX=-; RPX=-; C=-; H=-
  if [ "$FLOOR_PIPE" = true ]; then
    F=$(floor_delivered_mpps "pair-floor-$k"); R=$(ratio "$P" "$F"); [ "$R" = - ] || { FR+=("$R"); FRX+=("$(xratio "$P" "$F")"); }; FD+=("$F")
  fi
  if [ "$FLOOR_DEMUX" = true ]; then
    X=$(floor_delivered_mpps "pair-floordx-$k"); RPX=$(ratio "$P" "$X"); [ "$RPX" = - ] || PXR+=("$RPX")
    [ "$F" = - ] || { RX=$(ratio "$X" "$F"); [ "$RX" = - ] || XR+=("$RX"); }
  fi
  if [ "$FLOOR_CSUM" = true ]; then
    C=$(floor_delivered_mpps "pair-floorcs-$k")
    [ "$F" = - ] || { RC=$(ratio "$C" "$F"); [ "$RC" = - ] || CR+=("$RC"); }
  fi
  if [ "$FLOOR_HASH" = true ]; then
    H=$(floor_delivered_mpps "pair-floorhash-$k"); RPH=$(ratio "$P" "$H"); [ "$RPH" = - ] || PHR+=("$RPH"); HD+=("$H")
    [ "$F" = - ] || { RH=$(ratio "$H" "$F"); [ "$RH" = - ] || HR+=("$RH"); }
  fi
  echo "| $k | $( [ "$F" = - ] && echo 'not in this build' || fmt "$F") | $( [ "$C" = - ] && echo 'not in this build' || fmt "$C") | $( [ "$H" = - ] && echo 'not in this build' || fmt "$H") | $( [ "$X" = - ] && echo 'not in this build' || fmt "$X") | $(fmt "$(mpps "pair-pipe-$k")") | $(fmt "$P") | $RX | $R | $RPX | $(drops "pair-pipe-$k") | $( [ "$FLOOR_PIPE" = true ] && drops "pair-floor-$k" || echo -) |"
done
echo
if [ "$FLOOR_PIPE" = true ]; then
  FRM=$(median "${FR[@]}")
  echo "Pipeline / floor pipeline, delivered: median **${FRM}**, spread $(spread "${FR[@]}") over ${#FR[@]} rounds (goal ≥ 0.8: $(goal "$(median "${FRX[@]}")" ">=" 0.8))."
  if [ "$FLOOR_DEMUX" = true ]; then
    echo "Split: the mandatory parse and lookup alone (floor pipeline-demux / floor pipeline) median $(median "${XR[@]}"), spread $(spread "${XR[@]}"); what staging, accounting and delivery add (pipeline / floor pipeline-demux) median $(median "${PXR[@]}"), spread $(spread "${PXR[@]}")."
  fi
  if [ "$FLOOR_CSUM" = true ] && [ ${#CR[@]} -gt 0 ]; then
    CRM=$(median "${CR[@]}")
    echo "Validation alone (floor pipeline-checksums / floor pipeline): median **${CRM}**, spread $(spread "${CR[@]}"). Any engine that verifies checksums on this port (\`net_pcap\` sets no offload flags) delivers at most this fraction of the floor, so the 0.8 goal is $( awk -v r="$CRM" 'BEGIN{print (r < 0.8) ? "out of reach of a validating pipeline here" : "within reach"}')."
  fi
  if [ "$FLOOR_HASH" = true ] && [ ${#HR[@]} -gt 0 ]; then
    HRM=$(median "${HR[@]}")
    echo "Checksums and a DPDK-native exact-match lookup (floor pipeline-rte-hash / floor pipeline): median **${HRM}**, spread $(spread "${HR[@]}"): an engine that validates only the checksums and looks the destination up in \`rte_hash\` delivers this fraction of the floor, so the 0.8 goal is $( awk -v r="$HRM" 'BEGIN{print (r < 0.8) ? "out of reach of a pipeline that verifies the checksums and demuxes with rte_hash here" : "within reach of one"}'). The pipeline (full parse, lookup, staging, accounting, delivery) against it: median **$(median "${PHR[@]}")**, spread $(spread "${PHR[@]}")."
  fi
else
  echo "Pipeline / floor pipeline: \`run --floor pipeline\` is not in this build (\`udpdemux run --help\` lists no such floor): no ratio. Pipeline delivered: median $(fmt "$(median "${PD[@]}")") Mpps, spread $(spread "${PD[@]}")."
fi
echo
if [ -n "$ALT_FLOORS" ]; then
  echo "**In one run** (\`run --alternate-floor FLOOR\`): the pipeline and the floor take turns on the same lcores every 2^27 TSC cycles (about 50 ms), the floor's mbufs marked with a dynamic flag so that the consumers free them as the floor's consumer does; each half's delivered datagrams over the same share of the run's time, so both halves see the same minutes of the host, which separate runs do not. Same config as above; one run of $SECS s per floor in each of the $PAIRS rounds; Mpps = a half's delivered over half the run."
  echo
  echo "| floor | floor Mpps delivered (median) | pipeline Mpps delivered (median) | pipeline / floor, delivered: median | spread | rounds |"
  echo "|---|---:|---:|---:|---|---:|"
  for f in $ALT_FLOORS; do
    AR=(); ARX=(); AF=(); AP=()
    for k in $(seq "$PAIRS"); do
      j=$(jf "alt-$f-$k")
      r=$(jq -r '.lcores[0].floor_alternate.delivered_ratio // empty' "$j"); [ -n "$r" ] || continue
      AR+=("$(fmt "$r")"); ARX+=("$r")
      AF+=("$(jq -r ".lcores[0].floor_alternate.floor_delivered / ($SECS / 2) / 1e6" "$j")")
      AP+=("$(jq -r ".lcores[0].floor_alternate.pipeline_delivered / ($SECS / 2) / 1e6" "$j")")
    done
    [ ${#AR[@]} -gt 0 ] || { echo "| $f | - | - | - | - | 0 |"; continue; }
    echo "| \`$f\` | $(fmt "$(median "${AF[@]}")") | $(fmt "$(median "${AP[@]}")") | **$(median "${AR[@]}")** | $(spread "${AR[@]}") | ${#AR[@]} |"
    if [ "$f" = pipeline ]; then
      ALT_PIPE_MEDIAN=$(median "${AR[@]}") ALT_PIPE_XMEDIAN=$(median "${ARX[@]}")
      ALT_PIPE_ROUNDS=""
      ALT_FAST_R="" ALT_FAST_X="" ALT_FAST_F=0
      for i in "${!AR[@]}"; do
        ALT_PIPE_ROUNDS="$ALT_PIPE_ROUNDS${ALT_PIPE_ROUNDS:+, }${AR[$i]} ($(fmt "${AF[$i]}"))"
        if awk -v a="${AF[$i]}" -v b="$ALT_FAST_F" 'BEGIN { exit !(a > b) }'; then ALT_FAST_F=${AF[$i]} ALT_FAST_R=${AR[$i]} ALT_FAST_X=${ARX[$i]}; fi
      done
    fi
  done
  echo
  if [ -n "${ALT_PIPE_ROUNDS:-}" ]; then
    echo "Pipeline / floor pipeline in one run, per round (the floor half's Mpps): $ALT_PIPE_ROUNDS. The ratio follows, roughly, how fast the floor runs: where cache lines cross between the two vCPUs slowly, both halves wait on the crossing and the ratio nears 1; where they cross fast, the RX lcore's own work decides it."
    echo
  fi
  if [ -n "${ALT_PIPE_MEDIAN:-}" ]; then
    echo "Pipeline / floor pipeline in one run: median **${ALT_PIPE_MEDIAN}** (goal ≥ 0.8: $(goal "$ALT_PIPE_XMEDIAN" ">=" 0.8)); in the round whose floor ran fastest ($(fmt "$ALT_FAST_F") Mpps), where the RX lcore's own work decides: **${ALT_FAST_R}** ($(goal "$ALT_FAST_X" ">=" 0.8)). These are the figures to read for the goal where the separate runs above spread wide."
    echo
  fi
fi
echo "**The default rcvbuf** (212 992 B on every socket) with the same unlimited consumers, two runs in each round, right after the round's 4 MiB pipeline run: one as the others run (CPU 0, the consumers' main lcore's, shared with this host's other tasks), one with CPU 0 shielded (\`scripts/shield.sh 0\`: every other thread, IRQ and unbound workqueue that may move is on CPU 1 for the run, as \`isolcpus=\` would keep it; per-CPU kernel threads stay). Goal: no \`rcvbuf_full\` drops at the pipeline's own delivered rate. \`udpdemux check\` on this config: \`$PIPEDEF_CHECK\` (one line per socket)."
echo
echo "| run | CPU 0 | Mpps received | Mpps delivered | rcvbuf_full | rcvbuf_full_at_drain | all drops by reason | main lcore (the consumers) off its CPU: ms, times switched out | main lcore's longest gap between polls, µs | RX lcore off its CPU: ms, times |"
echo "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|"
RF=0 RFRUNS=0 RFS=0 RFSRUNS=0 PDS=() GAPS=() GAPSS=()
for k in $(seq "$PAIRS"); do
  for v in pipedef pipedsh; do
    n="pair-$v-$k"
    D=$(delivered_mpps "$n")
    F1=$(socks_drop "$n" rcvbuf_full); F2=$(socks_drop "$n" rcvbuf_full_at_drain)
    G=$(gap "$n" .main_lcore)
    if [ "$v" = pipedef ]; then
      PDD+=("$(fmt "$D")"); GAPS+=("$G"); where=shared
      RF=$((RF + F1 + F2)); [ $((F1 + F2)) -eq 0 ] || RFRUNS=$((RFRUNS + 1))
    else
      PDS+=("$(fmt "$D")"); GAPSS+=("$G"); where=shielded
      RFS=$((RFS + F1 + F2)); [ $((F1 + F2)) -eq 0 ] || RFSRUNS=$((RFSRUNS + 1))
    fi
    echo "| $k | $where | $(fmt "$(mpps "$n")") | $(fmt "$D") | $F1 | $F2 | $(drops "$n") | $(offcpu "$n" .main_lcore) | $G | $(offcpu "$n" '.lcores[0].thread') |"
  done
done
echo
# How long the default budget lasts at the fastest socket's delivered rate.
BUDGET_US=$(jq -r 'if .sockets then ((.sockets | map(.delivered) | max) / .seconds) as $r | if $r > 0 then (89 / $r * 1e6 | round) else "-" end else "-" end' "$(jf pair-pipedsh-1)")
echo "Off its CPU: the loop's wall time less the CPU time its thread got (\`getrusage(RUSAGE_THREAD)\`), and the scheduler's switches: neither loop sleeps here, so it is the time other tasks took from it. The longest gap: the longest time between two polls of the sockets (\`main_lcore.longest_gap_us\`, one TSC read a poll), whoever took it. The default budget holds 89 datagrams, ${BUDGET_US} µs of the fastest socket's traffic in the first shielded run: a consumer away for longer drops whatever the engine does (the exit warns of it)."
echo
gapsline() { jq -r 'if .gaps_at_least_us then "\(.gaps_at_least_us["30"]) of 30 µs or more, \(.gaps_at_least_us["50"]) of 50, \(.gaps_at_least_us["100"]) of 100, \(.gaps_at_least_us["500"]) of 500, the longest \(.longest_us | round) µs" else "not run" end' "$(jf "$1")"; }
echo "The reference, with nothing of the engine in it (\`app/examples/cpu_gaps.rs\`: one thread spinning on the TSC, pinned to CPU 0 by \`taskset\`, ${SECS} s, counting the gaps between its reads): shared, $(gapsline gaps-shared); shielded, $(gapsline gaps-shielded). CPU 0 took ${GAPS_TICKS:-?} local timer interrupts (\`/proc/interrupts\` LOC) during the shared run. Any consumer on that CPU loses at least these at once, against the ${BUDGET_US} µs the default budget lasts."
echo
echo "Default rcvbuf: delivered median $(fmt "$(median "${PDD[@]}")") Mpps (spread $(spread "${PDD[@]}")), rcvbuf drops in $RFRUNS of $PAIRS runs, $RF in all, longest gaps ${GAPS[*]} µs; CPU 0 shielded: delivered median $(fmt "$(median "${PDS[@]}")") Mpps, rcvbuf drops in $RFSRUNS of $PAIRS runs, $RFS in all, longest gaps ${GAPSS[*]} µs (goal: none: $( [ "$RF" -eq 0 ] && echo met || { [ "$RFS" -eq 0 ] && echo 'met with CPU 0 shielded only' || echo '**not met**'; })).
"
echo
K64=$(kernel_mpps 64)
if awk -v k="$K64" 'BEGIN { exit !(k > 0) }'; then
  KR=$(ratio "$(median "${PD[@]}")" "$K64"); KRD=$(ratio "$(median "${PDD[@]}")" "$K64")
  echo "Pipeline / kernel \`recvmmsg\` (64-byte payloads, $(fmt "$K64") Mpps received by the kernel baseline below), delivered, per core: **${KR}x** with the 4 MiB rcvbuf (median of the pairs), ${KRD}x with the default rcvbuf (goal ≥ 30x: $(goal "$KR" ">=" 30)). Per core, because both occupy the same two CPUs: the engine's RX lcore on CPU 1 and its consumers on CPU 0; the kernel's receiver on CPU 1 and its sender on CPU 0, where loopback also runs the receive path up to the socket queue (softirq)."
  # The references against the same baseline: what the minimal cross-core
  # pipeline itself reaches on this host bounds what any pipeline can.
  if [ "${#FD[@]}" -gt 0 ]; then
    KF=$(ratio "$(median "${FD[@]}")" "$K64")
    echo
    echo "The references against the same kernel baseline (medians of the rounds above): \`--floor pipeline\` ${KF}x$( [ "${#HD[@]}" -gt 0 ] && echo ", \`--floor pipeline-rte-hash\` $(ratio "$(median "${HD[@]}")" "$K64")x"). $(awk -v r="$KF" 'BEGIN { print (r < 30) ? "The minimal cross-core pipeline, with no validation and no lookup, stays under 30x here: a pipeline that hands datagrams from one of these CPUs to the other does not reach the goal against this baseline." : "The minimal cross-core pipeline reaches 30x here." }')"
  fi
else
  echo "Pipeline / kernel \`recvmmsg\`: the kernel baseline did not run (add \`kernel\` to BENCH_ONLY)."
fi
echo
fi
if on instr; then
echo "### Instructions per datagram on the RX lcore (issue 13)"
echo
echo "Counted by valgrind's callgrind (\`bash scripts/instr.sh CONFIG [-- flags]\`), per received datagram, for the RX lcore's thread: the pipeline section's config and replay without hugepages and with a 64 MiB rcvbuf and 16 384-entry rings (valgrind slows the consumer too; the count is of the delivery path, no drops). Repeatable within about 1%, unlike the cross-CPU rates above, so it shows what a change to the RX path costs or saves; it says nothing of cache misses, which decide most of the PMD's time here."
echo
echo "| run | instructions / datagram | in rx_burst (the PMD) | the rest (ours) | of the floor's |"
echo "|---|---:|---:|---:|---:|"
IFS='|' read -ra runs <<<"$INSTR_RUNS"
FLOOR_I=$(sed -n 's/.*per received datagram: \([0-9]*\) .*/\1/p' "$W/instr-floor-pipeline.txt" 2>/dev/null || true)
for r in "${runs[@]}"; do
  label=${r%%:*}; f="$W/instr-${label// /-}.txt"
  t=$(sed -n 's/.*per received datagram: \([0-9]*\) (rx_burst \([0-9]*\), the rest \([0-9]*\)).*/\1 \2 \3/p' "$f" 2>/dev/null || true)
  if [ -z "$t" ]; then echo "| $label | - | - | - | - |"; continue; fi
  read -r a b c <<<"$t"
  echo "| $label | $a | $b | $c | $( [ -n "$FLOOR_I" ] && ratio "$a" "$FLOOR_I" || echo -) |"
done
echo
fi
if on client; then
echo "### Out-of-process client against the in-process pipeline (issue 16)"
echo
if [ "$NO_HUGE" = true ]; then
  echo "Skipped: a client attaches to the engine's shared memory, which needs hugepages (fewer than 200 were free)."
else
echo "The pipeline section's config and replay (\`$SPEC --flood-share 0\`, 64-byte payloads, 5 sockets, \`rcvbuf = $RCVBUF_BIG\`), \`eal.lcores = \"0,1\"\`: **CPU 1** runs RX lcore 1 alone in both runs. *In-process*: the engine's main lcore 0 consumes every socket (count handler) and has **CPU 0** alone. *Out-of-process*: the same engine; the client (\`client/examples/bench.rs\`, a DPDK secondary process, \`taskset -c 0\`) opens all five sockets and receives round-robin with zero-copy \`recv_burst\` for ${SECS} s, freeing each batch into the engine's pools from its own lcore id; it **shares CPU 0** with the engine's main lcore 0, which then consumes nothing and sleeps 100 µs between passes (stats, IPC, folding the client's releases into the sockets' budgets). In-process Mpps = delivered over the run (as in the pipeline section); out-of-process Mpps = what the client received over its receiving time. $CPAIRS alternating pairs, the order flipped every round."
echo
echo "| round | order | in-process Mpps delivered | out-of-process Mpps received | client lcore | out / in | in-process drops by reason | drops by reason with the client |"
echo "|---:|---|---:|---:|---:|---:|---|---|"
CRR=(); CIN=(); COUT=()
for k in $(seq "$CPAIRS"); do
  order=$(alternate "$k" ", " pipeline client)
  I=$(delivered_mpps "cpair-pipe-$k"); CIN+=("$(fmt "$I")")
  line=$(grep -m1 '^received ' "$W/cpair-client-$k-client.log" 2>/dev/null || true)
  O=$(awk '{ if ($7 > 0) printf "%.6f", $2 / $7 / 1e6; else print 0 }' <<<"${line:-received 0 datagrams bytes 0 in 0 s lcore -}")
  L=$(awk '{ print $NF }' <<<"${line:-?}")
  COUT+=("$(fmt "$O")")
  R=$(ratio "$O" "$I"); [ "$R" = - ] || CRR+=("$R")
  echo "| $k | $order | $(fmt "$I") | $(fmt "$O") | $L | $R | $(drops "cpair-pipe-$k") | $(drops "cpair-client-$k") |"
done
echo
CRM=$(median "${CRR[@]}")
echo "Out-of-process / in-process, delivered: median **${CRM}x**, spread $(spread "${CRR[@]}") over ${#CRR[@]} pairs (goal ≥ 0.9: $(goal "$CRM" ">=" 0.9)); in-process median $(median "${CIN[@]}") Mpps, out-of-process median $(median "${COUT[@]}") Mpps."
fi
echo
fi
if on pdump; then
echo "### Capture server (dpdk-dumpcap) and Prometheus scrapes (issue 19)"
echo
if [ "$NO_HUGE" = true ]; then
  echo "Skipped: dpdk-dumpcap attaches to the engine's shared memory, which needs hugepages (fewer than 200 were free)."
else
echo "The pipeline section's config and replay (\`$SPEC --flood-share 0\`, 64-byte payloads, 5 sockets, \`rcvbuf = $RCVBUF_BIG\`): RX lcore 1 alone on CPU 1, main lcore 0 on CPU 0 consuming every socket. Mpps delivered over each run. $PDPAIRS alternating pairs, the order flipped every round."
echo
echo "| round | order | \`pdump = true\`, no capture: Mpps delivered | \`pdump = false\` | true / false | drops, true | drops, false |"
echo "|---:|---|---:|---:|---:|---|---|"
PDR=(); PDON=(); PDOFF=()
for k in $(seq "$PDPAIRS"); do
  order=$(alternate "$k" ", " true false)
  A=$(delivered_mpps "pdump-on-$k"); B=$(delivered_mpps "pdump-off-$k")
  PDON+=("$(fmt "$A")"); PDOFF+=("$(fmt "$B")")
  R=$(ratio "$A" "$B"); [ "$R" = - ] || PDR+=("$R")
  echo "| $k | $order | $(fmt "$A") | $(fmt "$B") | $R | $(drops "pdump-on-$k") | $(drops "pdump-off-$k") |"
done
echo
echo "Capture server up, no capture / \`pdump = false\`, delivered: median **$(median "${PDR[@]}")x**, spread $(spread "${PDR[@]}") over ${#PDR[@]} pairs (medians $(median "${PDON[@]}") / $(median "${PDOFF[@]}") Mpps)."
echo
echo "Capture running: \`dpdk-dumpcap -p -i net_pcap0 -w /dev/null\` (every frame, both directions, no filter, pcapng; \`taskset -c 0\`, so it shares CPU 0 with the main lcore that consumes every socket) attached to the running engine; Mpps delivered over ${SECS} s before it attached and over ${SECS} s while it captures, in the same engine run, from the engine's stats lines (every 500 ms); the engine stops while dumpcap is attached. dumpcap's own count of the frames it wrote (what its ring could not take is the capture's loss, not the engine's: RX goes on)."
echo
echo "| run | Mpps delivered, capturing | before it attached | capturing / before | frames dumpcap wrote | engine drops by reason (whole run) |"
echo "|---:|---:|---:|---:|---|---|"
CAPR=()
for k in $(seq "$PDCAPS"); do
  n="pdump-cap-$k"
  A=$(cat "$W/$n.with" 2>/dev/null || echo 0); B=$(cat "$W/$n.without" 2>/dev/null || echo 0)
  R=$(ratio "$A" "$B"); [ "$R" = - ] || CAPR+=("$R")
  # dumpcap's running count ("Packets captured: 0 32 64 ...", backspace-separated);
  # its received/dropped summary needs a live primary, which is gone by then.
  D=$(tr '\b' ' ' <"$W/$n-dumpcap.log" 2>/dev/null | sed -n 's/^Packets captured: *//p' | tr ' ' '\n' | grep -E '^[0-9]+$' | tail -1 || true)
  echo "| $k | $(fmt "$A") | $(fmt "$B") | $R | ${D:-?} | $(drops "$n") |"
done
echo
echo "Capturing / not capturing, delivered: median **$(median "${CAPR[@]}")x**, spread $(spread "${CAPR[@]}") over ${#CAPR[@]} runs."
echo
echo "Prometheus: \`[metrics] listen\` set in both runs of a pair; *scraped*: \`GET /metrics\` every 100 ms on a fixed cadence (one connection each, a Python loop under \`taskset -c 0\`) for the whole run; *not scraped*: no request. The endpoint's thread inherits the main lcore's CPU 0."
echo
echo "| round | order | scraped: Mpps delivered | not scraped | scraped / not | scrapes answered (bytes, last), mean interval over the run | drops, scraped | drops, not |"
echo "|---:|---|---:|---:|---:|---|---|---|"
SCR=(); SCY=(); SCN=()
for k in $(seq "$PDPAIRS"); do
  order=$(alternate "$k" ", " scraped not)
  A=$(delivered_mpps "scrape-yes-$k"); B=$(delivered_mpps "scrape-no-$k")
  SCY+=("$(fmt "$A")"); SCN+=("$(fmt "$B")")
  R=$(ratio "$A" "$B"); [ "$R" = - ] || SCR+=("$R")
  read -r NS NB <"$W/scrape-yes-$k.scrapes" 2>/dev/null || { NS=0; NB=0; }
  IV=$(jq -r --argjson n "${NS:-0}" 'if $n > 0 and (.seconds // 0) > 0 then (.seconds / $n * 1000 | floor | tostring) + " ms" else "-" end' "$(jf "scrape-yes-$k")")
  echo "| $k | $order | $(fmt "$A") | $(fmt "$B") | $R | $NS ($NB), every $IV | $(drops "scrape-yes-$k") | $(drops "scrape-no-$k") |"
done
echo
echo "Scraped every 100 ms / not scraped, delivered: median **$(median "${SCR[@]}")x**, spread $(spread "${SCR[@]}") over ${#SCR[@]} pairs (medians $(median "${SCY[@]}") / $(median "${SCN[@]}") Mpps)."
fi
echo
fi
if on kernel; then
echo "### Kernel baseline: recvmmsg(2) on a loopback UDP socket"
echo
echo "\`app/examples/recvmmsg_baseline.rs\`: a sender thread on CPU 0 (\`sendmmsg\`, 64 per call) and a receiver on CPU 1 (\`recvmmsg\`, 64 per call), 2 s per size, SO_RCVBUF 32 MiB."
echo
echo "| payload B | kernel Mpps received | sent | received | kernel RcvbufErrors | engine pipeline Mpps | engine / kernel |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for s in 64 512 1400; do
  K=$(jq -r --argjson s "$s" '.[] | select(.payload == $s) | .mpps' "$W/kernel.json")
  jq -r --argjson s "$s" '.[] | select(.payload == $s) | "\(.payload) | \(.mpps * 1000 | round / 1000) | \(.sent) | \(.received) | \(.rcvbuf_errors)"' "$W/kernel.json" |
    while read -r line; do
      if on rate; then echo "| $line | $(fmt "$(mpps "pipe$s")") | $(ratio "$(mpps "pipe$s")" "${K:-0}") |"; else echo "| $line | - | - |"; fi
    done
done
echo
fi
if on flood; then
echo "### Flood: one victim socket gets 90%, its consumer takes at most $VRATE datagrams/s"
echo
echo "Flood: \`$SPEC\` (victim 198.18.1.9:9999, 64-byte payloads) replayed at the RX core's maximum rate. Two runs without the flood, same config otherwise: *no flood* = the same spec with \`--flood-share 0\` (only the four other sockets; at the replay's maximum rate they then get ten times the frames), and *victim unbound* = the flood pcap with no socket on 198.18.1.9:9999 (the victim's frames are dropped at the RX core as no-socket, so the others are offered what they are offered in the flood run, and only the victim's queueing differs). Others' share = delivered / offered, summed over the four other sockets; the change is flood minus victim unbound, in percentage points (goal: others lose < 5%)."
echo
echo "| strategy | small cache | Mpps received | victim delivered /s | victim drops | others delivered /s | others' share: flood | no flood | victim unbound | change vs unbound | RcvbufErrors | victim stage p50 / p99 µs |"
echo "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"
for r in numa-queues busylock direct numa-queues-nocache; do
  st=${r%-nocache}; sc=on; [ "$r" != "$st" ] && sc=off
  f="flood-$r"; n="noflood-$st"
  sec=$(jq -r '.seconds // 1' "$W/$f.json")
  vd=$(sock "$f" victim .delivered); vdr=$(sock "$f" victim '.drops | to_entries | map(select(.value > 0) | "\(.key) \(.value)") | if length == 0 then "0" else join(", ") end')
  od=$(others "$f" delivered); oo=$(others "$f" offered)
  nd=$(others "$n" delivered); no=$(others "$n" offered)
  ud=$(others "unbound-$st" delivered); uo=$(others "unbound-$st" offered)
  rb=$(jq -r '(.udp.UdpRcvbufErrors // 0) + (.udp.Udp6RcvbufErrors // 0)' "$W/$f.json")
  awk -v st="$st" -v sc="$sc" -v m="$(mpps "$f")" -v vd="${vd:-0}" -v sec="$sec" -v vdr="${vdr:-?}" -v od="$od" -v oo="$oo" -v nd="$nd" -v no="$no" -v ud="$ud" -v uo="$uo" -v rb="$rb" \
      -v p50="$(sock "$f" victim .stage_p50_us)" -v p99="$(sock "$f" victim .stage_p99_us)" 'BEGIN {
    fs = oo > 0 ? od / oo * 100 : 0; ns = no > 0 ? nd / no * 100 : 0; us = uo > 0 ? ud / uo * 100 : 0
    printf "| %s | %s | %.2f | %.0f | %s | %.0f | %.2f%% | %.2f%% | %.2f%% | %+.2f pp | %d | %s / %s |\n", st, sc, m, vd / sec, vdr, od / sec, fs, ns, us, fs - us, rb, p50, p99 }'
done
echo
for r in numa-queues busylock; do
  echo "Victim's stage-to-delivery latency (µs), $r, flood:"
  echo
  echo '```'
  echo "@stage_us[victim]:"
  hist "flood-$r" victim
  echo '```'
  echo
done
samples() { jq -r '(.pool_avail_samples // []) | map(tostring) | if length == 0 then "not in this build'"'"'s JSON" else join(" ") end' "$W/$1.json"; }
echo "Small-buffer cache, flood, numa-queues: victim delivered $(sock flood-numa-queues victim .delivered) (on) vs $(sock flood-numa-queues-nocache victim .delivered) (off); condensed copies $(jq -r '.small_cache.condensed // "n/a"' "$W/flood-numa-queues.json") (on) vs $(jq -r '.small_cache.condensed // "n/a"' "$W/flood-numa-queues-nocache.json") (off); victim rmem high water $(sock flood-numa-queues victim .rmem_high_water) vs $(sock flood-numa-queues-nocache victim .rmem_high_water) B of $(sock flood-numa-queues victim .rcvbuf)."
echo
echo "NIC pool (rx_pool, $(jq -r '[.pools[]? | select(.name | startswith("rx_pool")) | .size] | add // "?"' "$W/flood-numa-queues.json") mbufs, of which $FRAMES hold the replayed pcap) free mbufs every 0.5 s during the flood: cache on: $(samples flood-numa-queues); cache off: $(samples flood-numa-queues-nocache)."
echo
fi
if on mcast; then
echo "### Multicast fan-out: one group, 1 / 4 / 16 member sockets (issue 18)"
echo
echo "64-byte datagrams to 239.1.2.3:5000 replayed at the RX core's maximum rate; every member socket joined the group (count handler, consumed by the main lcore, rcvbuf 4 MiB). Baseline: the same frames to one unicast socket. Delivered = datagrams put in the sockets' rings per second, summed over members (each member's copy counts); ratio = that against the unicast socket's. Medians of $MC_ROUNDS rounds (spread in brackets); Mpps received is the RX core's input rate."
echo
echo "| sockets | Mpps received | delivered Mdgram/s (all members) | per member | ratio vs one unicast socket | member drops | clones unavailable |"
echo "|---|---:|---:|---:|---:|---|---:|"
mcrow() { # LABEL PREFIX MEMBERS
  local rx=() dl=() k f d u nb
  for k in $(seq "$MC_ROUNDS"); do
    f="$2-$k"
    rx+=("$(mpps "$f")"); dl+=("$(fmt "$(delivered_mpps "$f")")")
  done
  d=$(median "${dl[@]}")
  u=$(median "${MCU[@]}")
  nb=$(jq -r '.multicast.nobufs // 0' "$(jf "$2-$MC_ROUNDS")")
  echo "| $1 | $(fmt "$(median "${rx[@]}")") | $(fmt "$d") [$(spread "${dl[@]}")] | $(fmt "$(awk -v d="$d" -v n="$3" 'BEGIN { print d / n }')") | $(ratio "$d" "$u") | $(drops "$2-$MC_ROUNDS") | $nb |"
}
MCU=()
for k in $(seq "$MC_ROUNDS"); do MCU+=("$(delivered_mpps "mc-u-$k")"); done
mcrow "1 unicast (baseline)" mc-u 1
for n in 1 4 16; do mcrow "$n member(s)" "mc-$n" "$n"; done
echo
fi
if on flood2; then
echo "### Flood with two producers: two RX lcores push into one victim (issue 13 item 6)"
echo
echo "The seed's contention needs two producers on one socket at the same time, which one RX lcore cannot show. One \`net_pcap\` port with two RX queues (two \`rx_pcap=\` arguments: net_pcap opens one queue per argument, in order), each replaying the flood pcap (\`$SPEC\`: victim 198.18.1.9:9999 gets 90%, 64-byte payloads) from memory. \`eal.lcores = \"$F2_LCORES\"\`: RX lcore 1 (virtual node 1, queue 0) has **CPU 1** alone; RX lcore 2 (virtual node 0, queue 1) and the main lcore 0 (every socket's consumer, stats) **share CPU 0**, time-sliced by the Linux scheduler. What caps what: the victim's consumer takes at most $F2_VRATE datagrams/s (\`consume_rate_pps\`), so its socket stays full and both RX lcores keep pushing into it (two virtual nodes: two stages with \`numa-queues\`, one spinlock in front of the delivery lock with \`busylock\`); the other four sockets' consumers are capped by the main lcore's share of CPU 0, and RX lcore 2's rate by the rest of it. Fairness: the two strategies run the same config (only \`engine.strategy\` differs), the same pcaps, in alternating order ($F2_RUNS runs each); the rcvbuf is the default on every socket. Each run has a *victim unbound* twin (same setup, no socket on 198.18.1.9:9999: its frames drop at the RX core as no-socket), so the others' change is flood minus unbound, in percentage points. A lock holder on CPU 0 can be preempted by the main lcore mid-section and make RX lcore 1 wait up to a scheduler slice: both strategies face the same scheduler, and it is part of what the extra spinlock costs."
echo
echo "| run | strategy | Mpps received: lcore 1 (CPU 1) / lcore 2 (CPU 0) | victim delivered /s | victim drops | victim delivery lock /s | victim busylock /s | datagrams per delivery lock | others delivered /s | others' share: flood | victim unbound | change | books balance |"
echo "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"
declare -A F2VD F2CH F2OS F2US F2LK F2BK F2VC
for k in $(seq "$F2_RUNS"); do
  for st in $(alternate "$k" " " numa-queues busylock); do
    f="f2-$st-$k"; u="f2u-$st-$k"
    row=$(jq -r '
      def lrx($l): ([(.lcores // [])[] | select(.lcore == $l) | .queues[].packets] | add // 0);
      (.seconds // 0) as $s | if $s <= 0 then "0 0 0 0 0 0 0 0 0" else
      ((.sockets // []) | map(select(.name == "victim")) | first // {}) as $v
      | [lrx(1) / $s / 1e6, lrx(2) / $s / 1e6, ($v.delivered // 0) / $s, ($v.delivery_lock_acquisitions // 0) / $s,
         ($v.busylock_acquisitions // 0) / $s,
         (if ($v.delivery_lock_acquisitions // 0) > 0 then $v.delivered / $v.delivery_lock_acquisitions else 0 end),
         ([(.sockets // [])[] | select(.name != "victim") | .delivered] | add // 0) / $s, $s,
         (.main_lcore.cpu_ms // 0)] | map(tostring) | join(" ") end' "$(jf "$f")")
    read -r l1 l2 vd lk bl per od sec cpu <<<"$row"
    vdr=$(sock "$f" victim '.drops | to_entries | map(select(.value > 0) | "\(.key) \(.value)") | if length == 0 then "0" else join(", ") end')
    fs=$(share "$f"); us=$(share "$u")
    ch=$(awk -v a="$fs" -v b="$us" 'BEGIN { printf "%+.2f", a - b }')
    bk=$(jq -r '.books_balanced // false' "$(jf "$f")")/$(jq -r '.books_balanced // false' "$(jf "$u")")
    F2VD[$st]+="$vd "; F2CH[$st]+="$ch "; F2OS[$st]+="$fs "; F2US[$st]+="$us "; F2LK[$st]+="$lk "; F2BK[$st]+="$bk "
    # The victim's datagrams per second of CPU its consumer (the main lcore) got.
    F2VC[$st]+="$(awk -v v="$vd" -v s="$sec" -v c="$cpu" 'BEGIN { print (c > 0) ? v * s / (c / 1000) : 0 }') "
    echo "| $k | $st | $(fmt "$l1") / $(fmt "$l2") | $(awk -v v="$vd" 'BEGIN { printf "%.0f", v }') | ${vdr:-?} | $(awk -v v="$lk" 'BEGIN { printf "%.0f", v }') | $(awk -v v="$bl" 'BEGIN { printf "%.0f", v }') | $(fmt "$per") | $(awk -v v="$od" 'BEGIN { printf "%.0f", v }') | ${fs}% | ${us}% | $ch pp | $( [ "$bk" = true/true ] && echo yes || echo "**NO** (flood/unbound: $bk)") |"
  done
done
echo
echo "| strategy (medians of $F2_RUNS) | victim delivered /s | victim delivery lock /s | others' share: flood | victim unbound | change | books balance |"
echo "|---|---:|---:|---:|---:|---:|---|"
for st in numa-queues busylock; do
  # shellcheck disable=SC2086 # word-split the space-separated lists on purpose
  echo "| $st | $(awk -v v="$(median ${F2VD[$st]})" 'BEGIN { printf "%.0f", v }') | $(awk -v v="$(median ${F2LK[$st]})" 'BEGIN { printf "%.0f", v }') | $(fmt "$(median ${F2OS[$st]})")% | $(fmt "$(median ${F2US[$st]})")% | $(sfmt "$(median ${F2CH[$st]})") pp | $( [[ " ${F2BK[$st]}" == *" "*false* ]] && echo "**NO**" || echo yes) |"
done
echo
# shellcheck disable=SC2086
NQV=$(median ${F2VD[numa-queues]}); BLV=$(median ${F2VD[busylock]}); NQC=$(sfmt "$(median ${F2CH[numa-queues]})"); BLC=$(sfmt "$(median ${F2CH[busylock]})")
echo "Goal, victim: numa-queues delivers $(awk -v v="$NQV" 'BEGIN { printf "%.0f", v }')/s against busylock's $(awk -v v="$BLV" 'BEGIN { printf "%.0f", v }')/s (medians; at least as much: $(awk -v a="$NQV" -v b="$BLV" 'BEGIN { exit !(a >= b) }' && echo met || echo '**not met**')). That is $(awk -v a="$NQV" -v c="$F2_VRATE" 'BEGIN { printf "%.0f%%", a / c * 100 }') and $(awk -v a="$BLV" -v c="$F2_VRATE" 'BEGIN { printf "%.0f%%", a / c * 100 }') of the victim's cap$(awk -v a="$NQV" -v b="$BLV" -v c="$F2_VRATE" 'BEGIN { if (a < 0.95 * c || b < 0.95 * c) print ": below it, the main lcore'"'"'s share of CPU 0 or the delivery into the socket, not the cap, limits the victim"; else print ": the cap binds in both" }')."
# shellcheck disable=SC2086
NQVC=$(median ${F2VC[numa-queues]}); BLVC=$(median ${F2VC[busylock]})
echo "Per second of CPU the victim's consumer got (the main lcore, which shares CPU 0 with RX lcore 2: \`main_lcore.cpu_ms\` in each run's JSON): numa-queues $(awk -v v="$NQVC" 'BEGIN { printf "%.0f", v }') against busylock's $(awk -v v="$BLVC" 'BEGIN { printf "%.0f", v }') (medians), $(ratio "$NQVC" "$BLVC"). The cap is a token bucket one burst deep, so a consumer that the scheduler keeps off its CPU half the time delivers about half its cap whatever the strategy: the victim's rate follows the main lcore's share of CPU 0, and this per-CPU figure takes that share out."
echo "Goal, others: with numa-queues the other sockets' share changes by $NQC pp against the victim-unbound runs (busylock: $BLC pp) (lose under 5 points: $(goal "$NQC" ">=" -5))."
echo "Books: $(if [[ " ${F2BK[numa-queues]} ${F2BK[busylock]}" == *false* ]]; then echo "**NOT balanced** in at least one run"; else echo "balanced in every flood2 run"; fi)."
echo
fi
if on exception; then
echo "### The exception path under a TCP flood (issue 19)"
echo
echo "One RX lcore; \`tcpmix64\` is \`plain64\` with a TCP twin after every frame (half the frames are TCP no socket takes). With the path on they go to a \`net_tap\` port (the kernel drops them: the tap has no address), at most $EXC_PPS/s (\`exception.rate_pps\`); the rest are dropped and counted at the token bucket. Path off: the TCP frames are dropped at parse (\`not_udp\`). A replay hands the RX lcore frames as fast as it takes them, so UDP frames arrive only half as often in \`tcpmix64\` as in \`plain64\`: the flood's cost to UDP is the ratio against the same replay with the path off; the ratio against \`plain64\` alone is given as well. The goal is read on the UDP the RX lcore hands to the sockets (\`UdpInDatagrams\`): delivery after that is the consumers' (the main lcore, on CPU 0 here), the same in every run; delivered is shown beside it. $EXC_ROUNDS rounds, alternating."
echo
echo "| run | round | Mpps received | UDP Mpps to sockets | UDP Mpps delivered | to kernel | rate limited | tap TX errors | books |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
exc_row() { # WHAT NAME ROUND
  echo "| $1 | $3 | $(fmt "$(mpps "$2")") | $(fmt "$(demuxed_mpps "$2")") | $(fmt "$(delivered_mpps "$2")") | $(jq -r '.exception_path.to_kernel // "-"' "$(jf "$2")") | $(jq -r '.exception_path.rate_limited // "-"' "$(jf "$2")") | $(jq -r '.exception_path.tx_errors // "-"' "$(jf "$2")") | $(jq -r '.books_balanced // "-"' "$(jf "$2")") |"
}
# UDP the RX lcore handed to the sockets (InDatagrams): what the exception
# path can take from; delivery after it depends on the consumers (the main
# lcore on CPU 0 here), the same in every run.
demuxed_mpps() { jq -r 'if .udp then ((.udp.UdpInDatagrams + .udp.Udp6InDatagrams) / .seconds / 1e6) else 0 end' "$(jf "$1")"; }
EXF=(); EXO=(); EXU=(); EXFD=(); EXOD=(); EXPR=(); EXPD=(); EXPB=()
for k in $(seq "$EXC_ROUNDS"); do
  exc_row "plain64, path on ($EXC_PPS pps)" "exc-udp-$k" "$k"
  exc_row "tcpmix64, path on ($EXC_PPS pps)" "exc-flood-$k" "$k"
  exc_row "tcpmix64, path off" "exc-off-$k" "$k"
  exc_row "tcpmix64, path on (1 pps: the bucket alone)" "exc-bucket-$k" "$k"
  EXF+=("$(demuxed_mpps "exc-flood-$k")"); EXO+=("$(demuxed_mpps "exc-off-$k")"); EXU+=("$(demuxed_mpps "exc-udp-$k")")
  EXFD+=("$(delivered_mpps "exc-flood-$k")"); EXOD+=("$(delivered_mpps "exc-off-$k")")
  EXPR+=("$(ratio "$(demuxed_mpps "exc-flood-$k")" "$(demuxed_mpps "exc-off-$k")")")
  EXPD+=("$(ratio "$(delivered_mpps "exc-flood-$k")" "$(delivered_mpps "exc-off-$k")")")
  EXPB+=("$(ratio "$(demuxed_mpps "exc-bucket-$k")" "$(demuxed_mpps "exc-off-$k")")")
done
exc_row "tcpmix64, path on, no limit (10^9 pps)" exc-nolimit 1
echo
EXR=$(median "${EXPR[@]}")
echo "Goal: UDP to the sockets under the flood, path on with its limit, against the same replay with the path off, paired per round: median $EXR, spread $(spread "${EXPR[@]}") over $EXC_ROUNDS rounds (at least 0.9: $(goal "$EXR" ">=" 0.9)); delivered: median $(median "${EXPD[@]}"), spread $(spread "${EXPD[@]}"). The bucket alone (rate_pps 1, no tap writes) against path off: median $(median "${EXPB[@]}"), spread $(spread "${EXPB[@]}") (the path's per-frame cost without the $EXC_PPS tap writes a second, whose cost scales with \`rate_pps\`). Against \`plain64\` alone (the UDP frames arrive half as often in the mix): $(ratio "$(median "${EXF[@]}")" "$(median "${EXU[@]}")"). Without the limit: $(ratio "$(demuxed_mpps exc-nolimit)" "$(median "${EXO[@]}")") of the path-off rate (every TCP frame a write to the tap)."
echo
fi
if on memory; then
echo "### Memory"
echo
echo "| run | seconds | packets received | peak RSS (VmHWM) kB | mempools (rx_pool: 2176 B data room + 128 B mbuf header each; small_pool: 384 B) |"
echo "|---|---:|---:|---:|---|"
for r in pipe64 mem-long; do
  echo "| $r | $(fmt "$(jq -r '.seconds // 0' "$(jf "$r")")") | $(jq -r '.rx_packets // 0' "$(jf "$r")") | $(peak "$r") | $(pools "$r") |"
done
echo
echo "Hugepage-backed pools do not show in RSS; with \`--no-huge\` they do."
echo
fi
if on memif; then
echo "### External senders over net_memif (context: the sender shares CPU 0 with the engine's main lcore)"
echo
echo "The engine is the memif server, the sender the client; Mpps = received / the sender's sending time. testpmd's datagram: IPv4 UDP 198.18.0.7:4000 → 198.18.1.1:53 (dns4), 106-byte frames."
echo
if [ "${#MEMIF_ROWS[@]}" -eq 0 ]; then
  echo "Skipped: memif needs hugepages (multi-process shared memory) and fewer than 200 were free."
else
  echo "| sender | Mpps received | sender reports sent | engine received | drops by reason | books balance |"
  echo "|---|---:|---:|---:|---|---|"
  printf '%s\n' "${MEMIF_ROWS[@]}"
  [ -z "$MEMIF_NOTE" ] || { echo; echo "$MEMIF_NOTE"; }
fi
echo
fi
if on demux; then
echo "### Parse + early demux, ns per packet (no EAL, \`udpdemux bench-demux\`)"
echo
cat "$W/demux.md" 2>/dev/null || echo "(bench-demux wrote nothing: see $W/demux.log)"
echo
fi
if on send; then
echo "### send_burst against testpmd txonly (net_null, 64-byte payloads, one destination)"
echo
echo "testpmd: \`--forward-mode=txonly --txpkts=106\` on \`net_null0,no-rx=1\`, its forwarding lcore on CPU 1 (mean Tx-pps of the full stats periods). send_burst: the \`send_bench\` example on the same port type, an application thread on CPU 1 calling \`send_burst\` (bursts of 32; headers, software checksums and an mbuf of the TX pool per datagram), the main lcore on CPU 0 draining the TX ring through the neighbour table (a static entry) into the port; Mpps = \`UdpOutDatagrams\` over the measured window. So send_burst uses two CPUs where testpmd uses one, and testpmd's txonly re-sends pre-built headers."
echo
echo "| pair | testpmd txonly Mpps | send_burst Mpps | ratio | send_burst refused (ring full / no mbuf) | books |"
echo "|---:|---:|---:|---:|---:|---|"
for i in "${!SEND_UD[@]}"; do
  echo "| $((i + 1)) | ${SEND_TP[$i]} | $(fmt "${SEND_UD[$i]}") | $(ratio "${SEND_UD[$i]}" "${SEND_TP[$i]}") | ${SEND_REF[$i]} | ${SEND_BAL[$i]} |"
done
# shellcheck disable=SC2086
echo
# shellcheck disable=SC2086
echo "Median: send_burst $(fmt "$(median ${SEND_UD[*]})") Mpps (spread $(fspread ${SEND_UD[*]})) / testpmd $(fmt "$(median ${SEND_TP[*]})") Mpps (spread $(fspread ${SEND_TP[*]})) = $(ratio "$(median ${SEND_UD[*]})" "$(median ${SEND_TP[*]})")."
echo
fi
if on reasm; then
echo "### Reassembly: 2- and 3-fragment datagrams / unfragmented"
echo
echo "IPv4 datagrams to one socket replayed by \`net_pcap\` (\`infinite_rx\`), one RX lcore on CPU 1, 4 MiB rcvbuf: cut into 2 fragments (2000-byte payloads) or 3 (2960-byte), against the unfragmented 1400-byte replay (the largest payload one frame holds) on the same config. Datagrams delivered per second (\`IpReasmOKs\` for the fragmented ones)."
echo
echo "| replay | frames received, Mpps | datagrams delivered, M/s | reassembled (IpReasmOKs) | ratio to unfragmented (delivered) |"
echo "|---|---:|---:|---:|---:|"
REF=$(delivered_mpps reasm-plain1400)
for r in frag2 frag3 plain1400; do
  echo "| $r | $(fmt "$(mpps "reasm-$r")") | $(fmt "$(delivered_mpps "reasm-$r")") | $(jq -r '.ip.IpReasmOKs // 0' "$(jf "reasm-$r")") | $(ratio "$(delivered_mpps "reasm-$r")" "$REF") |"
done
echo
fi
if on dns; then
echo "### DNS example: answered queries per second, engine mode / kernel mode"
echo
if [ -n "$DNS_NOTE" ]; then
  echo "$DNS_NOTE"
else
  echo "The same 4096 A queries for www.example.test (from \`dns_load\`, two A records each answer). Engine mode: replayed by \`net_pcap\` (\`infinite_rx\`) into the engine (RX lcore on CPU 1), answered by \`udpdemux-dns\` as a client process on CPU 0 (beside the main lcore, which transmits the answers into \`tx_pcap=/dev/null\`); answered = the responder's responses taken by \`send_burst\` over ${SECS} s. Kernel mode: \`udpdemux-dns --kernel 127.0.0.1:5353\` (recvmmsg/sendmmsg) on CPU 1, \`dns_load kernel\` on CPU 0 sending with sendmmsg from 4 sockets and counting answers; answered = answers it received per second."
  echo
  echo "| mode | answered Mqps | queries in | responses | sent on the wire (UdpOutDatagrams) | dropped before the responder |"
  echo "|---|---:|---:|---:|---:|---|"
  echo "| engine (client process) | $(fmt "$DNS_ENG") | $(jq -r '.queries // 0' "$W/dns-engine-srv.json") | $(jq -r '.responses // 0' "$W/dns-engine-srv.json") | $(jq -r '.udp.UdpOutDatagrams // 0' "$W/dns-engine.json") | $(drops dns-engine) |"
  echo "| kernel (recvmmsg/sendmmsg) | $(fmt "$DNS_KER") | $(jq -r '.queries // 0' "$W/dns-kernel-srv.json") | $(jq -r '.responses // 0' "$W/dns-kernel-srv.json") | - | sent by dns_load $(jq -r '.sent // 0' "$W/dns-kernel.json"), answered $(jq -r '.answered // 0' "$W/dns-kernel.json") |"
  echo
  echo "Ratio engine / kernel: $(ratio "$DNS_ENG" "$DNS_KER") (goal >= 10: $(goal "$(ratio "$DNS_ENG" "$DNS_KER")" ">=" 10))."
fi
echo
fi
if on quic; then
echo "### QUIC bulk transfer: quinn on udpdemux / quinn on the kernel's UDP"
echo
if [ -n "$QUIC_NOTE" ]; then
  echo "$QUIC_NOTE"
else
  echo "The \`quic_echo\` example's server; the same \`quic_client\` (quinn on the kernel's UDP) in a network namespace on the other end of a veth pair opens 100 bidirectional streams at once and echoes $QBYTES bytes on each, checking every byte; bytes/s = bytes echoed back / the client's run time (one direction). *udpdemux*: the engine on \`net_af_packet\` on the host end (RX lcore on CPU 1, main lcore on CPU 0), quinn on \`udpdemux_quinn::UdxSocket\` (GRO-style receive, GSO-style send, ECN) in a current-thread tokio runtime the RX lcore drives between its bursts, its sends leaving from that lcore (\`--runtime lcore\`, the default: \`udpdemux_quinn::run_on_rx_lcore\`). *kernel*: the same server with \`--kernel\` (quinn's tokio UDP socket, GRO/GSO; 2 tokio workers, unpinned) on the same veth end holding 198.18.0.1.$( [ "${#QUIC_KB[@]}" -gt 0 ] && echo " *kernel, SO_RCVBUF $QRCVBUF*: the same with \`--kernel-rcvbuf $QRCVBUF\`, a third run in each round.") Flow control on both sides: 1 MiB a connection, 256 KiB a stream (\`quic/src/echo.rs\`). $QPAIRS alternating rounds."
  echo
  quic_md QUIC_UD QUIC_KER MB/s 1e6 %.1f QUIC_KB
  echo
  quic_path_line
  echo
  quic_server_line quic
fi
echo
echo "### QUIC handshakes per second: quinn on udpdemux / quinn on the kernel's UDP"
echo
if [ -n "$QUIC_NOTE" ]; then
  echo "$QUIC_NOTE"
else
  echo "The same servers and client, a fresh server each run: \`quic_client --handshakes $QHS --concurrency $QCONC\` makes $QHS fresh connections, $QCONC in flight at once, each a full TLS 1.3 handshake (ECDSA P-256 certificate, no session resumption, no 0-RTT), one stream echoing 32 bytes (checked) and a close; handshakes/s = connections completed / the client's run time. The server must have accepted exactly that many, each closed by the client, none left open. $QPAIRS alternating pairs."
  echo
  quic_md QUIC_HS_UD QUIC_HS_KER handshakes/s 1 %.0f
  echo
  quic_server_line quic-hs handshakes
  echo
  read -r cu iu tu < <(quic_hs_cpu quic-hs ud); read -r ck ik tk < <(quic_hs_cpu quic-hs ker)
  echo "The whole machine's CPU over the client's run (\`/proc/stat\`: client, server and kernel together, medians): udpdemux $cu ms a handshake with ${iu}% of the time idle, its busiest server thread (the RX lcore, which runs quinn) on a CPU ${tu}% of the run; kernel $ck ms a handshake with ${ik}% idle, its busiest server thread (of 2 tokio workers) on a CPU ${tk}%. When the two CPUs are nearly all busy, the rate is their time over what a handshake costs in all; a server thread near 100% bounds it too."
  if [ -n "$QSWEEP" ]; then
    echo
    echo "Fewer handshakes in flight, the same servers and client ($QHS handshakes a run, $QPAIRS alternating pairs each): where the rate is bound by the round trips rather than by the CPUs."
    echo
    echo "| at once | udpdemux handshakes/s | kernel handshakes/s | ratio | pairs' ratios | CPU ms a handshake, udpdemux / kernel | idle, udpdemux / kernel | busiest server thread on a CPU, udpdemux / kernel |"
    echo "|---:|---:|---:|---:|---|---:|---:|---:|"
    for c in $QSWEEP $QCONC; do
      if [ "$c" = "$QCONC" ]; then arr_u=QUIC_HS_UD; arr_k=QUIC_HS_KER; nm=quic-hs; else arr_u=QUIC_SW_UD_$c; arr_k=QUIC_SW_KER_$c; nm=quic-hs-c$c; fi
      declare -n su=$arr_u sk=$arr_k
      rs=()
      for i in $(seq "$QPAIRS"); do rs+=("$(ratio "${su[$((i - 1))]:-0}" "${sk[$((i - 1))]:-0}")"); done
      read -r cu iu tu < <(quic_hs_cpu "$nm" ud); read -r ck ik tk < <(quic_hs_cpu "$nm" ker)
      u=$(median "${su[@]}"); k=$(median "${sk[@]}")
      echo "| $c | $(awk -v x="$u" 'BEGIN { printf "%.0f", x }') | $(awk -v x="$k" 'BEGIN { printf "%.0f", x }') | $(ratio "$u" "$k") | ${rs[*]} | $cu / $ck | ${iu}% / ${ik}% | ${tu}% / ${tk}% |"
      unset -n su sk
    done
  fi
fi
echo
fi
echo "Books: $( [ "$FAIL" -eq 0 ] && echo "balanced in every run" || echo "NOT balanced in at least one run (see bench: lines on stderr and $W/*.json)")."
echo "Wall time: $(( $(date +%s) - START )) s."
} | tee "$W/bench.md"

# docs/benchmarks.md keeps the last full run's report (the generated part;
# the notes per goal above it are written by hand). A BENCH_ONLY run or one
# whose books do not balance leaves it as it is.
DOCS=${BENCH_DOCS-$REPO/docs/benchmarks.md}
if [ -z "$DOCS" ]; then
  :
elif [ -n "$ONLY" ]; then
  log "BENCH_ONLY run: $DOCS not updated (only a full run replaces its report)"
elif [ "$FAIL" -ne 0 ]; then
  log "books not balanced: $DOCS not updated"
else
  bash "$REPO/scripts/bench-docs.sh" "$W/bench.md" "$DOCS" || log "could not update $DOCS (the report is in $W/bench.md)"
fi

exit "$FAIL"
