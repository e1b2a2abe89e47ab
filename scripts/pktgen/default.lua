-- Pktgen-DPDK: replay the udpdemux "default" traffic (conf/traffic/default.toml) on
-- port 0 and stop after a fixed time. A finite capture (1000 frames, every
-- malformed kind) replayed in a loop: compare the receiver's per-socket and
-- per-reason counts as ratios with the manifest, not as absolute numbers.
--
-- The frames come from a pcap made by udpdemux itself, so the receiver's
-- counts can be checked against its manifest:
--   udpdemux gen --config conf/traffic/default.toml --out /tmp/udpdemux-default.pcap
--   pktgen -l 0-2 -n 4 -a <PCI> -- -P -m "[1:2].0" \
--          -s 0:/tmp/udpdemux-default.pcap -f scripts/pktgen/default.lua
-- (see README.md beside this file).

-- replay.lua sits beside this file; find it from this script's own path.
local dir = debug.getinfo(1, "S").source:match("^@?(.*/)") or "./"
local replay = dofile(dir .. "replay.lua")
replay("default", "0", 1, 10)   -- port, percent of line rate, seconds
