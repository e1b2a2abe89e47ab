//! Each lcore loop's share of its CPU in the exit summary, and the warning
//! an operator gets when other tasks take the lcores' CPUs: here the RX
//! lcore and the main lcore are placed on one CPU (`eal.lcores =
//! "0@0,1@0"`), both poll without sleeping, so the scheduler must switch
//! each out for about half of the run, and the two together cannot have
//! had more than that one CPU.
#![cfg(not(loom))]
mod common;

use serde_json::Value;

#[test]
fn two_polling_lcores_on_one_cpu_are_each_preempted_and_told() {
    let dir = common::scratch("preempt");
    let eal =
        common::eal("preempt", &["net_null0"]).replace("lcores = \"0,1\"", "lcores = \"0@0,1@0\"");
    let text = format!(
        r#"{eal}
[[port]]
name = "net_null0"
rx_queues = 1

[[lcore]]
id = 1
role = "rx"
queues = ["net_null0:0"]

# A socket, so that the main lcore polls its ring instead of napping.
[[socket]]
name = "s"
local = "198.18.0.1:9"
"#
    );
    let cfg = common::write(&dir, "c.toml", &text);
    let json = dir.join("s.json");
    let o = common::run(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--duration",
        "1.5",
        "--stats-json",
        json.to_str().unwrap(),
    ]);
    let err = common::stderr(&o);
    assert!(o.status.success(), "{err}");
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let f = |t: &Value, k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"));
    let rx = &j["lcores"][0]["thread"];
    let main = &j["main_lcore"];
    for (who, t) in [("rx", rx), ("main", main)] {
        let (wall, cpu, off) = (f(t, "wall_ms"), f(t, "cpu_ms"), f(t, "off_cpu_ms"));
        // The loop ran for the run's duration (the main lcore's from its
        // start to the stop, the RX lcore's a little longer).
        assert!((1_400.0..3_000.0).contains(&wall), "{who}: {t}");
        assert!((off - (wall - cpu)).abs() < 1.0, "{who}: {t}");
        // Sharing one CPU with another poller: off it for a good share.
        assert!(off > 0.2 * wall, "{who}: {t}");
        assert!(f(t, "involuntary_switches") >= 1.0, "{who}: {t}");
        assert!(
            f(t, "voluntary_switches") < f(t, "involuntary_switches"),
            "{who}: {t}"
        );
    }
    // One CPU between them: their CPU times add up to at most its time
    // (plus getrusage's tick rounding).
    assert!(
        f(rx, "cpu_ms") + f(main, "cpu_ms") < 1.1 * f(rx, "wall_ms"),
        "rx {rx} main {main}"
    );
    assert!(err.contains("lcore 1 (rx) was off its CPU"), "{err}");
    assert!(err.contains("the main lcore was off its CPU"), "{err}");
    assert!(err.contains("isolcpus="), "{err}");
}
