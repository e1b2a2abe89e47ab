-- Pktgen-DPDK: replay the udpdemux "mix" traffic (conf/traffic/mix.toml) on
-- port 0 and stop after a fixed time. A size mix over both families, half
-- VLAN-tagged (VID 100): the receiving port must accept VLAN 100 frames
-- (promiscuous, no VLAN filter or stripping).
--
-- The frames come from a pcap made by udpdemux itself, so the receiver's
-- counts can be checked against its manifest:
--   udpdemux gen --config conf/traffic/mix.toml --out /tmp/udpdemux-mix.pcap
--   pktgen -l 0-2 -n 4 -a <PCI> -- -P -m "[1:2].0" \
--          -s 0:/tmp/udpdemux-mix.pcap -f scripts/pktgen/mix.lua
-- (see README.md beside this file).

-- replay.lua sits beside this file; find it from this script's own path.
local dir = debug.getinfo(1, "S").source:match("^@?(.*/)") or "./"
local replay = dofile(dir .. "replay.lua")
replay("mix", "0", 50, 30)   -- port, percent of line rate, seconds
