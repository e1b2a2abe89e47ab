//! Parse + early demux, differentially: arbitrary frames go through
//! `parse` and the flow table, and every answer is checked against a linear
//! scan of the same sockets with the kernel's precedence (connected, then
//! bound to the exact address, then wildcard). Reuseport members must all
//! share the winning binding.
#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;

#[path = "shared/score.rs"]
mod shared_score;
use shared_score::score;
use udpdemux::flow_table::{Binding, FlowTable};
use udpdemux::parse::{parse, CsumHint, Offload};

fn sockets() -> Vec<Binding> {
    let a = |s: &str| s.parse::<SocketAddr>().unwrap();
    vec![
        Binding::bound(a("0.0.0.0:53")),
        Binding::bound(a("198.18.1.1:53")),
        Binding::connected(a("198.18.1.1:53"), a("198.18.0.9:4000")),
        Binding::bound(a("198.18.1.2:7")).with_reuseport(),
        Binding::bound(a("198.18.1.2:7")).with_reuseport(),
        Binding::bound(a("198.18.1.2:7")).with_reuseport(),
        Binding::bound(a("[::]:53")),
        Binding::bound(a("[fd00::1]:53")),
        Binding::connected(a("[::]:5000"), a("[fd00::9]:4000")),
        Binding::bound(a("0.0.0.0:9")),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Some((&h, frame)) = data.split_first() else {
        return;
    };
    let hint = |b: u8| match b % 3 {
        0 => CsumHint::Unknown,
        1 => CsumHint::Good,
        _ => CsumHint::Bad,
    };
    let Ok(d) = parse(
        frame,
        Offload {
            ip: hint(h),
            l4: hint(h / 3),
        },
    ) else {
        return;
    };
    let binds = sockets();
    let table: FlowTable<usize> = FlowTable::new();
    for (i, b) in binds.iter().enumerate() {
        let _ = table.insert(*b, i);
    }
    let snap = table.snapshot();
    let got = snap.lookup(d.src, d.sport, d.dst, d.dport).copied();
    let best = binds
        .iter()
        .map(|b| score(b, d.src, d.sport, d.dst, d.dport))
        .max()
        .unwrap_or(0);
    match got {
        None => assert_eq!(best, 0, "a socket matches but lookup found none: {d:?}"),
        Some(i) => {
            let s = score(&binds[i], d.src, d.sport, d.dst, d.dport);
            assert!(
                s > 0,
                "lookup returned a socket that does not match: {:?} for {d:?}",
                binds[i]
            );
            assert_eq!(s, best, "lookup ignored a more specific socket for {d:?}");
            // Same flow, same member.
            assert_eq!(
                snap.lookup(d.src, d.sport, d.dst, d.dport).copied(),
                Some(i)
            );
        }
    }
});
