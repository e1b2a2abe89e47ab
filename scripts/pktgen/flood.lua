-- Pktgen-DPDK: replay the udpdemux "flood" traffic (conf/traffic/flood.toml) on
-- port 0 and stop after a fixed time. 90% of the frames go to one victim
-- socket: measure what the four other sockets still get at full line rate.
--
-- The frames come from a pcap made by udpdemux itself, so the receiver's
-- counts can be checked against its manifest:
--   udpdemux gen --config conf/traffic/flood.toml --out /tmp/udpdemux-flood.pcap
--   pktgen -l 0-2 -n 4 -a <PCI> -- -P -m "[1:2].0" \
--          -s 0:/tmp/udpdemux-flood.pcap -f scripts/pktgen/flood.lua
-- (see README.md beside this file).

-- replay.lua sits beside this file; find it from this script's own path.
local dir = debug.getinfo(1, "S").source:match("^@?(.*/)") or "./"
local replay = dofile(dir .. "replay.lua")
replay("flood", "0", 100, 30)   -- port, percent of line rate, seconds
