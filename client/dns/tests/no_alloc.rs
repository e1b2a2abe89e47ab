//! Proves the DNS example answers without allocating: `Zone::respond`
//! (what both modes run per query) over a few thousand queries of every
//! outcome, and the kernel-socket mode's whole serving loop (`recvmmsg`,
//! answer, `sendmmsg`) over loopback. The engine mode's loop is checked by
//! the binary itself: it installs the same counting allocator and reports
//! `hot_path_allocations` in its exit JSON, which tests/dig.rs requires to
//! be 0.
//!
//! The counting allocator counts what the current thread allocates while
//! it is marked hot (the harness's other threads are not counted), as in
//! app/tests/no_alloc.rs.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use udpdemux::runtime::alloc_guard::{allocations_in as armed, CountingAlloc};
use udpdemux_dns::wire::{rtype, Name, Outcome, Rcode, CLASS_IN};
use udpdemux_dns::zone::Zone;
use udpdemux_dns::{kernel, Counters};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn zone() -> Zone {
    Zone::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../conf/dns-zone.toml"
    )))
    .unwrap()
}

/// A query: `edns` is (advertised size, version).
fn query(id: u16, name: &str, qtype: u16, edns: Option<(u16, u8)>) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    q.extend_from_slice(Name::from_text(name).unwrap().as_wire());
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    if let Some((size, version)) = edns {
        q.extend_from_slice(&[0, 0, 41]);
        q.extend_from_slice(&size.to_be_bytes());
        q.extend_from_slice(&[0, version, 0, 0, 0, 0]);
    }
    q
}

/// What a response must say: (RCODE, answer records, TC); `None`: no response.
type Want = Option<(Rcode, u16, bool)>;

/// Every kind of query, each with the outcome it must get (with the conf
/// zone: www has 2 A and 1 AAAA, big 40 A, b.a only A, a is an empty
/// non-terminal); `None`: not answered.
fn kinds() -> Vec<(Vec<u8>, Want)> {
    let ok = |n| Some((Rcode::NoError, n, false));
    let mut formerr = query(0, "www.example.test", rtype::A, None);
    formerr.push(0); // a trailing byte
    let mut response = query(0, "www.example.test", rtype::A, None);
    response[2] |= 0x80;
    let mut notimp = query(0, "www.example.test", rtype::A, None);
    notimp[2] |= 2 << 3;
    vec![
        (query(0, "www.example.test", rtype::A, None), ok(2)),
        (query(0, "WWW.Example.TEST", rtype::AAAA, None), ok(1)),
        (
            query(0, "www.example.test", rtype::ANY, Some((1232, 0))),
            ok(3),
        ),
        (query(0, "example.test", rtype::ANY, None), ok(2)),
        (
            query(0, "nope.example.test", rtype::A, None),
            Some((Rcode::NxDomain, 0, false)),
        ),
        (
            query(0, "x.b.a.example.test", rtype::AAAA, Some((1232, 0))),
            Some((Rcode::NxDomain, 0, false)),
        ),
        // NODATA: a name without that type, an empty non-terminal, another type.
        (query(0, "b.a.example.test", rtype::AAAA, None), ok(0)),
        (query(0, "a.example.test", rtype::A, None), ok(0)),
        (query(0, "www.example.test", 15, None), ok(0)),
        // Truncated without EDNS and with a small EDNS size; whole with 4096.
        (
            query(0, "big.example.test", rtype::A, None),
            Some((Rcode::NoError, 0, true)),
        ),
        (
            query(0, "Big.example.test", rtype::A, Some((600, 0))),
            Some((Rcode::NoError, 0, true)),
        ),
        (
            query(0, "big.example.test", rtype::ANY, Some((4096, 0))),
            ok(40),
        ),
        (
            query(0, "example.org", rtype::A, None),
            Some((Rcode::Refused, 0, false)),
        ),
        (
            query(0, "www.example.test", rtype::A, Some((1232, 1))),
            Some((Rcode::BadVers, 0, false)),
        ),
        (notimp, Some((Rcode::NotImp, 0, false))),
        (formerr, Some((Rcode::FormErr, 0, false))),
        (
            vec![0x12, 0x34, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0],
            Some((Rcode::FormErr, 0, false)),
        ),
        (response, None),
        (vec![1, 2, 3], None),
    ]
}

/// A few thousand queries, cycling through [`kinds`] with distinct IDs.
fn queries() -> Vec<(Vec<u8>, Want)> {
    let k = kinds();
    (0..4000u16)
        .map(|i| {
            let (mut q, want) = k[usize::from(i) % k.len()].clone();
            if q.len() >= 2 {
                q[..2].copy_from_slice(&i.to_be_bytes());
            }
            (q, want)
        })
        .collect()
}

#[test]
fn the_counter_can_fail() {
    let (_, n) = armed(|| std::hint::black_box(Box::new(7u64)));
    assert_eq!(n, 1, "the counting allocator must see a Box");
    let (_, n) = armed(|| std::hint::black_box(Name::from_text("a.b").unwrap().to_string()));
    assert!(n >= 1, "and a String");
}

#[test]
fn answering_allocates_nothing() {
    let z = zone();
    let qs = queries();
    // The response buffer is the caller's, made once with room for the
    // largest response (as both modes do).
    let mut out = Vec::with_capacity(1500);
    let mut c = Counters::default();
    let (got, allocs) = armed(|| {
        let mut got = 0u64;
        for (q, want) in &qs {
            let o = z.respond(q, 1472, &mut out);
            c.count(o);
            let o = o.map(|o: Outcome| (o.rcode, o.answers, o.truncated));
            got += u64::from(o == *want);
        }
        got
    });
    assert_eq!(got, qs.len() as u64, "every query got its outcome");
    assert_eq!(allocs, 0, "Zone::respond allocated {allocs} times");
    // Every outcome was exercised.
    assert!(c.noerror > 0 && c.nxdomain > 0 && c.refused > 0 && c.formerr > 0);
    assert!(c.truncated > 0 && c.ignored > 0 && c.other_rcode > 0);
}

#[test]
fn the_kernel_mode_serving_loop_allocates_nothing() {
    let z = zone();
    let qs = queries();
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    let counters = std::thread::scope(|s| {
        let server = s.spawn(|| {
            kernel::serve_until(
                &["127.0.0.1:0".parse().unwrap()],
                &z,
                |bound| tx.send(bound[0]).unwrap(),
                || stop.load(Ordering::Relaxed),
            )
            .unwrap()
        });
        let addr = rx.recv().unwrap();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 2048];
        let mut want_bytes = Vec::new();
        // One at a time (the loopback socket buffers cannot drop), each
        // answer byte for byte what Zone::respond says.
        for (q, want) in &qs {
            sock.send_to(q, addr).unwrap();
            if want.is_none() {
                continue;
            }
            let (n, from) = sock.recv_from(&mut buf).unwrap();
            assert_eq!(from, addr);
            z.respond(q, kernel::MAX_UDP, &mut want_bytes).unwrap();
            assert_eq!(&buf[..n], &want_bytes[..], "the answer to {q:02x?}");
        }
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap()
    });
    let answered = qs.iter().filter(|(_, w)| w.is_some()).count() as u64;
    assert_eq!(counters.queries, qs.len() as u64, "{counters:?}");
    assert_eq!(counters.responses, answered, "{counters:?}");
    assert_eq!(counters.ignored, qs.len() as u64 - answered);
    assert_eq!(
        counters.hot_path_allocations, 0,
        "the kernel-mode loop allocated: {counters:?}"
    );
}
