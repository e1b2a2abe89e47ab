//! What the tests of a finite replay share (client/tests/open.rs and
//! client/capi/tests/c_example.rs): the engine config that replays
//! conf/default.pcap once with two sockets left for a client, the replay's
//! manifest, and readers of the exit JSON and of the recv examples' tallies.
use super::repo;
use serde_json::Value;

/// conf/default.pcap.json: what the replay holds, per destination.
pub fn manifest() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(repo().join("conf/default.pcap.json")).expect("manifest"),
    )
    .expect("manifest parses")
}

/// The exit JSON's socket named `name`.
pub fn sock<'a>(j: &'a Value, name: &str) -> &'a Value {
    j["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no socket {name} in {j}"))
}

/// `socket NAME received N bytes B ...` of the recv example: (N, B).
pub fn received(out: &str, name: &str) -> (u64, u64) {
    let l = out
        .lines()
        .find(|l| l.starts_with(&format!("socket {name} received ")))
        .unwrap_or_else(|| panic!("no tally for {name}: {out}"));
    let w: Vec<&str> = l.split(' ').collect();
    (w[3].parse().unwrap(), w[5].parse().unwrap())
}

/// conf/default.pcap replayed once: three sockets counted by the engine,
/// two (`handler = "none"`) left for a client, whose datagrams wait in
/// their rings until it opens them.
pub const FINITE: &str = r#"[engine]
duration_secs = 60
stop_when_idle_ms = 0

[mempool]
mbufs = 4095
cache = 128

[[port]]
name = "{port}"

[[lcore]]
id = 1
role = "rx"
queues = ["{port}:0"]

[[socket]]
name = "dns4"
local = "198.18.1.1:53"
rcvbuf = 4194304

[[socket]]
name = "echo4"
local = "198.18.1.2:7"
rcvbuf = 4194304

[[socket]]
name = "app4"
local = "198.18.1.3:5000"
rcvbuf = 4194304

[[socket]]
name = "dns6"
local = "[fd00::1]:53"
handler = "none"
rcvbuf = 4194304

[[socket]]
name = "app6"
local = "[fd00::2]:5000"
handler = "none"
rcvbuf = 4194304
"#;
