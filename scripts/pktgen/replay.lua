-- The replay every udpdemux Pktgen script runs: the pcap given with
-- `-s 0:FILE` on a port at a share of line rate for a time, then the port's
-- counters. Loaded by default.lua, flood.lua and mix.lua with their settings.
--
-- API used: pktgen.set/pcap/start/stop/clr/delay/portStats, as registered
-- in Pktgen's app/lpktgenlib.c.

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

return function(name, port, rate_pct, seconds)
    pktgen.stop(port)
    pktgen.clr()
    -- Send the pcap given with -s 0:FILE instead of the single-packet template.
    pktgen.pcap(port, "on")
    pktgen.set(port, "rate", rate_pct)
    pktgen.set(port, "burst", 32)
    -- 0: keep replaying the file until stopped.
    pktgen.set(port, "count", 0)

    print(string.format("udpdemux %s: port %s at %d%% of line rate for %d s", name, port, rate_pct, seconds))
    pktgen.start(port)
    pktgen.delay(seconds * 1000)
    pktgen.stop(port)
    -- Let the last bursts leave and the counters settle.
    pktgen.delay(500)
    dump(pktgen.portStats(port, "port"), "")
end
