#!/usr/bin/env bash
# Set up (packages, hugepages), build the release binary and run the default
# config: a net_pcap vdev replays conf/default.pcap (shipped, made by
# `udpdemux gen` from conf/traffic/default.toml) through the whole pipeline,
# prints stats and the per-socket books, and stops when the replay is done.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/as-root.sh
bash scripts/setup.sh
echo "=== cargo build --release"
cargo build --release -p udpdemux
echo "=== ./target/release/udpdemux run --config conf/default.toml $*"
exec ./target/release/udpdemux run --config conf/default.toml "$@"
