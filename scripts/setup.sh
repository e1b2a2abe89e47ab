#!/usr/bin/env bash
# Prepare a Debian 12 machine to build and run udpdemux. Idempotent: it only
# does what is missing and says what it did.
#   - apt packages: DPDK 22.11 (libdpdk-dev, dpdk, dpdk-dev for dpdk-testpmd),
#     libclang-dev + clang (bindgen), pkg-config, build tools (build-essential:
#     cc, c++ and nm also build and check the C API, client/capi), and the tools the
#     tests drive (tshark, iproute2, iputils-ping, socat, netsniff-ng, valgrind,
#     promtool from prometheus, systemd-analyze from systemd, bind9-dnsutils:
#     dig queries the DNS example, client/dns; nftables: the exception-path
#     test keeps the host kernel off the veth end the engine owns)
#   - 2 MB hugepages (HUGEPAGES, default 512) and a hugetlbfs mount on /dev/hugepages
# Without root it changes nothing and prints what to run.
set -euo pipefail

HUGEPAGES=${HUGEPAGES:-512}
PKGS=(libdpdk-dev dpdk dpdk-dev libclang-dev clang pkg-config build-essential libpcap-dev
      tshark iproute2 iputils-ping socat netcat-openbsd netsniff-ng valgrind python3 jq ethtool
      prometheus systemd bind9-dnsutils nftables)

say() { echo "setup: $*"; }

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "$(id -u)" -ne 0 ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    say "missing packages: ${missing[*]}"
    say "run as root: bash scripts/setup.sh   (or, as root: apt-get install ${missing[*]})"
  fi
  total=$(awk '/HugePages_Total/ {print $2}' /proc/meminfo)
  if [ "${total:-0}" -lt "$HUGEPAGES" ] || ! grep -q hugetlbfs /proc/mounts; then
    say "hugepages: ${total:-0} reserved; as root: echo $HUGEPAGES > /proc/sys/vm/nr_hugepages && mount -t hugetlbfs nodev /dev/hugepages"
    say "or run without hugepages: set eal.no_huge = true in the config (slower, still needs root for the EAL)"
  fi
  [ ${#missing[@]} -eq 0 ] && exit 0 || exit 1
fi

if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; the default (no) is what we want.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  say "installed ${#missing[@]} package(s)"
else
  say "packages: all present"
fi

if ! pkg-config --atleast-version=22.11 libdpdk; then
  say "error: pkg-config does not find libdpdk >= 22.11 after install" >&2
  exit 1
fi
say "DPDK $(pkg-config --modversion libdpdk)"

if ! command -v cargo >/dev/null 2>&1; then
  say "error: no Rust toolchain (cargo) on PATH: install one with rustup (https://rustup.rs), Debian's cargo is too old" >&2
  exit 1
fi

total=$(awk '/HugePages_Total/ {print $2}' /proc/meminfo)
if [ "${total:-0}" -lt "$HUGEPAGES" ]; then
  echo "$HUGEPAGES" > /proc/sys/vm/nr_hugepages 2>/dev/null || true
  total=$(awk '/HugePages_Total/ {print $2}' /proc/meminfo)
  if [ "${total:-0}" -lt "$HUGEPAGES" ]; then
    say "warning: could reserve only ${total:-0} of $HUGEPAGES hugepages (memory fragmented or a container without the right): configs can use eal.no_huge = true"
  else
    say "reserved $total 2 MB hugepages"
  fi
else
  say "hugepages: $total reserved"
fi
if ! grep -q hugetlbfs /proc/mounts; then
  mkdir -p /dev/hugepages
  if mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null; then
    say "mounted hugetlbfs on /dev/hugepages"
  else
    say "warning: cannot mount hugetlbfs: configs can use eal.no_huge = true"
  fi
else
  say "hugetlbfs: mounted"
fi
