//! What a client process sends the engine, and what the engine sends back,
//! on arbitrary bytes: the engine's side of the IPC (`client_proto`) takes
//! requests from any local process, so a request that decodes must encode
//! back to itself, and a bind's options must go through the same socket
//! table and checks a config file's `[[socket]]` does (`api::socket_conf`,
//! `config::socket_problems`, the binding) without a panic. The client's
//! side: replies and stats reports decode or are refused, and a report that
//! decodes encodes back to itself. The first byte picks the message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use udpdemux::client_proto::{parse_reply, parse_stats_reply, Request, SocketStats};

fuzz_target!(|data: &[u8]| {
    let Some((&which, msg)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            let Ok(r) = Request::decode(msg) else { return };
            assert_eq!(
                Request::decode(r.encode().as_bytes()),
                Ok(r.clone()),
                "{msg:?}"
            );
            if let Request::Bind { opts, .. } = r {
                if let Ok(conf) = udpdemux::api::socket_conf(opts) {
                    let mut problems = Vec::new();
                    udpdemux::config::socket_problems(&conf, &mut problems);
                    if problems.is_empty() {
                        let _ = udpdemux::config::binding_of(&conf);
                    }
                }
            }
        }
        1 => {
            let Ok(s) = SocketStats::decode(msg) else {
                return;
            };
            assert_eq!(
                SocketStats::decode(s.encode().as_bytes()),
                Ok(s.clone()),
                "{msg:?}"
            );
        }
        2 => {
            let _ = parse_reply(msg);
        }
        _ => {
            let _ = parse_stats_reply(msg);
        }
    }
});
