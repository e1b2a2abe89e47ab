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
--
-- API used: pktgen.set/pcap/start/stop/clr/delay/portStats, as registered
-- in Pktgen's app/lpktgenlib.c.

local port = "0"
local rate_pct = 1   -- percent of the port's line rate
local seconds = 10

pktgen.stop(port)
pktgen.clr()
-- Send the pcap given with -s 0:FILE instead of the single-packet template.
pktgen.pcap(port, "on")
pktgen.set(port, "rate", rate_pct)
pktgen.set(port, "burst", 32)
-- 0: keep replaying the file until stopped.
pktgen.set(port, "count", 0)

print(string.format("udpdemux default: port %s at %d%% of line rate for %d s", port, rate_pct, seconds))
pktgen.start(port)
pktgen.delay(seconds * 1000)
pktgen.stop(port)
-- Let the last bursts leave and the counters settle.
pktgen.delay(500)

local function dump(t, indent)
    for k, v in pairs(t) do
        if type(v) == "table" then
            print(indent .. tostring(k) .. ":")
            dump(v, indent .. "  ")
        else
            print(indent .. tostring(k) .. " = " .. tostring(v))
        end
    end
end
dump(pktgen.portStats(port, "port"), "")
