//! `Client::open_owned` (issue 20's ownership shape for the quinn
//! adapter): an `OwnedSocket` borrows nothing of its `Client`, so it moves
//! to another thread and receives there while a `SocketHandle` watches its
//! ring from a third; the client detaches while it still receives, which
//! leaves the EAL up for it (`detach` says `false`), and when it is
//! closed and its handle (the last owner) dropped, the socket is given
//! back and the engine told the client leaves.
//! The engine's exit JSON: the books balanced, the socket's client
//! consumption exactly what the thread received, nothing reaped. Its
//! receive and free allocate nothing (the counting allocator of
//! app/tests/no_alloc.rs, on the reader thread).
//! One test in this file: a process attaches once.
mod common;
use common::*;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use udpdemux::runtime::alloc_guard::{allocations_in, CountingAlloc};
use udpdemux_client::Client;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn an_owned_socket_receives_on_another_thread_after_its_client_detached() {
    let mut engine = Engine::start("owned", &endless_pcap(), "net_pcap0", Opts::default());
    let client = Client::attach(&engine.prefix).expect("attach");
    let owned = client.open_owned("dns4").expect("open dns4");
    let handle = owned.handle();
    assert_eq!(handle.name(), "dns4");
    let (go_on, detached) = mpsc::channel::<()>();
    let (tally_tx, tally) = mpsc::channel::<u64>();
    let reader = std::thread::spawn(move || {
        let mut owned = owned;
        // Until `n` datagrams more have come (the replay never ends).
        let read = |owned: &mut udpdemux_client::OwnedSocket, n: u64| {
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut got = 0;
            while got < n {
                assert!(Instant::now() < deadline, "only {got} of {n} datagrams");
                let k = owned.recv_burst() as u64;
                assert_eq!(owned.batch().len() as u64, k);
                assert!(owned.batch().iter().all(|d| d.dst().port() == 53));
                got += k;
                if k == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            owned.clear();
            got
        };
        // Receiving and freeing allocate nothing (the counter counts:
        // one box is one allocation).
        assert_eq!(allocations_in(|| Box::new(7u64)).1, 1);
        let (mut total, allocs) = allocations_in(|| read(&mut owned, 500));
        assert_eq!(allocs, 0, "the owned socket's receive allocated");
        tally_tx.send(total).unwrap();
        detached.recv().unwrap();
        // The client is gone: the EAL it left up still serves this socket.
        let (more, allocs) = allocations_in(|| read(&mut owned, 500));
        assert_eq!(allocs, 0, "the owned socket's receive allocated");
        total += more;
        owned.close().expect("close dns4");
        total
    });
    let first = tally
        .recv_timeout(Duration::from_secs(30))
        .expect("first 500");
    assert!(first >= 500);
    // The handle looks at the ring from this thread meanwhile.
    let _ = (handle.pending(), handle.looks_empty());
    assert!(
        !client.detach(),
        "the EAL must stay up while an owned socket lives"
    );
    go_on.send(()).unwrap();
    let total = reader.join().expect("the reader thread");
    assert!(total >= first + 500);
    assert!(dpdk_sys::eal::is_up(), "left up, never cleaned up");
    // The handle outlived the owned socket: dropping it closes the
    // socket, then, as the attachment's last owner, tells the engine
    // this client leaves.
    drop(handle);
    let pid = std::process::id();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !engine
        .log_text()
        .contains(&format!("client pid {pid} detached"))
    {
        assert!(Instant::now() < deadline, "{}", engine.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let c = &j["clients"];
    assert_eq!(c["attached"], 0, "{c}");
    assert_eq!(c["reaped"], 0, "{c}");
    assert_eq!(c["open"], 0, "{c}");
    let s = socket_named(&j, "dns4");
    assert_eq!(s["client_consumed"], total, "{s}");
}
