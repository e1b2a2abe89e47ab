//! SIGHUP: re-read the config's `[[socket]]` section and apply the
//! difference without stopping RX.
use crate::config::Config;
use crate::engine::Engine;

pub fn on_sighup(engine: &Engine) {
    let Some(path) = engine.config_path() else {
        log::warn!("SIGHUP: no config file to re-read");
        return;
    };
    let new = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            log::error!("SIGHUP: {e}; sockets unchanged");
            return;
        }
    };
    let live: Vec<(String, crate::config::SocketConf)> =
        engine.shared().sockets.load().iter().map(|e| (e.sock.name().to_string(), e.sock.conf.clone())).collect();
    let mut removed = 0;
    let mut added = 0;
    for (name, conf) in &live {
        let keep = new.sockets.iter().any(|s| &s.name == name && same(s, conf));
        if !keep {
            match engine.remove_socket(name) {
                Ok(()) => removed += 1,
                Err(e) => log::error!("SIGHUP: removing {name}: {e}"),
            }
        }
    }
    for s in &new.sockets {
        if engine.socket(&s.name).is_none() {
            match engine.add_socket(s.clone()) {
                Ok(_) => added += 1,
                Err(e) => log::error!("SIGHUP: adding {}: {e}", s.name),
            }
        }
    }
    log::info!("SIGHUP: {removed} socket(s) removed, {added} added");
}

fn same(a: &crate::config::SocketConf, b: &crate::config::SocketConf) -> bool {
    a.local == b.local
        && a.remote == b.remote
        && a.reuseport == b.reuseport
        && a.rcvbuf == b.rcvbuf
        && a.handler == b.handler
        && a.ring_size == b.ring_size
        && a.pcap_file == b.pcap_file
        && a.pcap_limit_bytes == b.pcap_limit_bytes
        && a.consume_rate_pps == b.consume_rate_pps
}
