//! The safe wrappers against a real EAL (no hugepages needed, root needed).
//! The EAL initialises once per process, so this binary holds one test that
//! walks through every wrapper in order.
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use dpdk_sys::{
    eal, lcore, mbuf, memory, port, ring, DpdkError, Eal, Mbuf, MbufBurst, MbufRef, MbufRing,
    Mempool, Port, PortConf, Ring,
};

#[test]
fn wrappers_against_real_eal() {
    let args = [
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
        "--file-prefix=dpdk-sys-test",
        "--lcores",
        "0,1",
        "--vdev=net_null0",
        "--vdev=net_ring0",
    ];
    let eal = Eal::init(&args).expect("EAL init (run as root)");
    assert!(eal.tsc_hz() > 0);
    assert!(eal::version().contains("22.11") || eal::version().contains("DPDK"));

    // A second init is refused, not undefined.
    assert!(matches!(Eal::init(&args), Err(DpdkError::Usage(_))));

    // lcores
    assert_eq!(lcore::current(), Some(lcore::main_lcore()));
    assert_eq!(lcore::workers(), vec![1]);
    assert!(!lcore::is_enabled(7));
    assert!(
        lcore::launch(0, || 0).is_err(),
        "the main lcore cannot be launched on"
    );
    let seen = Arc::new(AtomicU32::new(u32::MAX));
    let s2 = Arc::clone(&seen);
    let h = lcore::launch(1, move || {
        s2.store(lcore::current().unwrap(), Ordering::SeqCst);
        42
    })
    .unwrap();
    assert_eq!(h.join(), 42);
    assert_eq!(seen.load(Ordering::SeqCst), 1, "closure ran on lcore 1");

    // mempool and mbufs
    let mp = Mempool::new("test_pool", 1023, 32, 64, 2176, 0).expect("pool");
    assert_eq!(mp.priv_size(), 64);
    assert_eq!(mp.data_room(), 2176);
    assert_eq!(mp.truesize(), 128 + 64 + 2176);
    let before = mp.avail();
    {
        let mut m = mp.alloc().expect("mbuf");
        let room = m.append(100).expect("append");
        room.fill(0xab);
        assert_eq!(m.pkt_len(), 100);
        assert!(m.data().iter().all(|&b| b == 0xab));
        assert_eq!(m.refcnt(), 1);
        assert_eq!(mp.avail(), before - 1);
    }
    assert_eq!(mp.avail(), before, "Drop returned the mbuf");
    let mut raw = [std::ptr::null_mut(); 16];
    mp.alloc_bulk(&mut raw).unwrap();
    assert_eq!(mp.in_use(), 16);
    // SAFETY: fresh mbufs we own.
    unsafe { mbuf::free_bulk(&mut raw) };
    assert_eq!(mp.in_use(), 0);
    assert!(
        Mempool::new("test_pool", 1023, 32, 64, 2176, 0).is_err(),
        "duplicate name is an error"
    );
    // Per-lcore caches: an mbuf freed on the main lcore stays in its cache;
    // `avail` counts it, `avail_to` leaves it out for the other lcores.
    let main = lcore::main_lcore();
    drop(mp.alloc().expect("mbuf"));
    let cached = mp.cached(main);
    assert!(cached >= 1, "the main lcore's cache holds the freed mbuf");
    assert_eq!(mp.cached(1), 0);
    assert_eq!(mp.cached(u32::MAX), 0);
    assert_eq!(mp.avail_to(&[main]), mp.avail());
    assert_eq!(mp.avail_to(&[1]), mp.avail() - cached);

    // Clones (indirect mbufs, multicast's copies): the data is shared by
    // reference count, the struct and private area are the clone's own; a
    // fresh mbuf "from the pool" of a clone comes from the pool that holds
    // its data (the clone pool has no data room).
    let clones = Mempool::new("test_clones", 63, 0, 64, 0, 0).expect("clone pool");
    let in_use = mp.in_use();
    {
        let mut m = mp.alloc().expect("mbuf");
        m.append(60).expect("append").fill(0x5a);
        // SAFETY: m is live and ours; nobody writes it while the clone lives;
        // both pools have a 64-byte private area.
        let c = unsafe { mbuf::clone_into(m.as_ptr(), &clones) }.expect("clone");
        // SAFETY: a fresh clone only we hold.
        let c = unsafe { Mbuf::from_raw(c) };
        assert_eq!(m.refcnt(), 2, "the clone holds a reference");
        assert!(c.view().is_indirect() && !m.view().is_indirect());
        assert_eq!(c.data(), m.data());
        assert_eq!(c.view().truesize(), m.view().truesize());
        assert_ne!(c.view().priv_area(), m.view().priv_area());
        let r = c.view().alloc_from_pool().expect("a fresh mbuf");
        assert_eq!(
            r.view().buf_len(),
            m.view().buf_len(),
            "from the data's pool"
        );
        drop(r);
        drop(m);
        assert!(
            c.data().len() == 60 && c.data().iter().all(|&b| b == 0x5a),
            "the data outlives the original's free"
        );
        assert_eq!(clones.in_use(), 1);
        assert_eq!(
            mp.in_use(),
            in_use + 1,
            "the data's mbuf waits for the clone"
        );
    }
    assert_eq!(clones.in_use(), 0, "the clone went back");
    assert_eq!(mp.in_use(), in_use, "and the data's mbuf with it");
    drop(clones);

    // ring round trip
    let r = Ring::create("test_ring", 64, 0, ring::SP_ENQ | ring::SC_DEQ).unwrap();
    assert_eq!(r.capacity(), 63);
    let objs: Vec<*mut c_void> = (1..=10usize).map(|i| i as *mut c_void).collect();
    assert_eq!(r.enqueue_burst(&objs), 10);
    assert_eq!(r.count(), 10);
    let found = Ring::lookup("test_ring").unwrap();
    let mut out = [std::ptr::null_mut(); 32];
    assert_eq!(found.dequeue_burst(&mut out), 10);
    assert_eq!(&out[..10], &objs[..]);
    let full: Vec<*mut c_void> = (1..=100usize).map(|i| i as *mut c_void).collect();
    assert_eq!(r.enqueue_burst(&full), 63, "a burst stops at capacity");
    assert!(
        Ring::create("bad_ring", 1000, 0, 0).is_err(),
        "non power of two without EXACT_SZ"
    );
    let err = Ring::lookup("no_such_ring").err().unwrap().to_string();
    assert!(err.contains("no_such_ring"), "{err}");
    drop(found);
    let mut drain = [std::ptr::null_mut(); 64];
    assert_eq!(r.dequeue_burst(&mut drain), 63);
    drop(r);

    // Owned bursts, views and a ring of mbufs: no raw pointer handled here.
    let mut burst: MbufBurst<8> = MbufBurst::new();
    mp.alloc_into(&mut burst, 8).unwrap();
    assert_eq!((burst.len(), mp.in_use()), (8, 8));
    for i in 0..8u8 {
        let mut m = burst.get_mut(usize::from(i)).unwrap();
        m.append(10 + u16::from(i)).unwrap().fill(i);
    }
    assert!(burst.iter().all(|m| m.refcnt() == 1
        && m.priv_size() == 64
        && m.buf_len() == 2176
        && m.nb_segs() == 1));
    assert_eq!(burst.get(3).unwrap().data(), &[3u8; 13][..]);
    assert_eq!(burst.get(3).unwrap().truesize(), mp.truesize());
    assert!(burst.get(8).is_none());
    let mr = MbufRing::create("test_mring", 8, 0, ring::SP_ENQ).unwrap();
    assert_eq!(mr.capacity(), 7);
    assert_eq!(mr.enqueue(&mut burst), 7);
    assert_eq!(burst.len(), 1, "the one that did not fit stays");
    assert_eq!(burst.get(0).unwrap().pkt_len(), 17);
    let mut out: MbufBurst<4> = MbufBurst::new();
    assert_eq!(mr.dequeue(&mut out, 10), 4, "at most the burst's room");
    assert_eq!(out.get(0).unwrap().pkt_len(), 10, "in order");
    let owned: Vec<Mbuf> = out.drain().collect();
    assert!(out.is_empty() && owned.len() == 4);
    assert_eq!(owned[3].data(), &[3u8; 13][..]);
    drop(owned);
    assert_eq!(mr.dequeue(&mut out, 1), 1);
    drop(out.drain()); // the unyielded one is freed
    assert_eq!(mp.in_use(), 3, "two in the ring, one in the burst");
    {
        let mut m = mp.alloc().unwrap();
        let mut v = m.view_mut();
        assert!(!v.set_len(u16::MAX), "past the room");
        assert_eq!(v.room_mut().len(), 2176 - usize::from(mbuf::HEADROOM));
        assert!(v.set_len(60));
        v.set_port(3);
        v.clear_ol_flags();
        assert_eq!(
            (m.pkt_len(), m.view().data_len(), m.view().port()),
            (60, 60, 3)
        );
        let other = m.view().alloc_from_pool().expect("from the same pool");
        assert_eq!(other.view().priv_size(), 64);
        assert_eq!(mp.in_use(), 5);
        let mut fl = mbuf::FreeList::default();
        fl.push_mbuf(other);
        fl.push_mbuf(m);
    }
    drop(mr); // frees what is left in it
    burst.clear();

    // The next-slot hint `prefetch_enqueue` reads: where the last raw
    // enqueue left the head, at the address DPDK put that slot, through a
    // wrap of the ring.
    let mr = MbufRing::create("test_hint", 4, 0, ring::SP_ENQ).unwrap();
    assert_eq!(mr.next_slot().0, 0);
    let mut taken: Vec<*mut mbuf::RawMbuf> = Vec::new();
    for round in 0..5u32 {
        let mut raw = [std::ptr::null_mut(); 2];
        mp.alloc_bulk(&mut raw).unwrap();
        // SAFETY: two live mbufs of our own, handed to the ring.
        let done = unsafe { mr.enqueue_raw(&raw) };
        assert_eq!(done, 2, "room for two: the last round's were taken out");
        let (head, at) = mr.next_slot();
        assert_eq!(head, 2 * (round + 1));
        // SAFETY: `at` is the slot after the two just stored, inside the
        // ring's 4 slots; the one before it holds the second mbuf.
        let last = unsafe { *at.offset(if head % 4 == 0 { 3 } else { -1 }) };
        assert_eq!(last, raw[1], "the slot layout DPDK uses");
        mr.prefetch_enqueue();
        let mut out: MbufBurst<2> = MbufBurst::new();
        assert_eq!(mr.dequeue(&mut out, 2), 2);
        taken.extend(out.take_raw());
    }
    let mut fl = mbuf::FreeList::default();
    for m in taken {
        // SAFETY: each came out of the ring once and is ours.
        unsafe { fl.push(m) };
    }
    drop(fl);
    drop(mr);
    assert_eq!(
        mp.in_use(),
        0,
        "every mbuf of the bursts and the ring came back"
    );

    // Memzones and the heap: a ring is one memzone, given back on drop.
    let (mz0, heap0) = (
        memory::memzone_count().unwrap(),
        memory::heap_stats().unwrap(),
    );
    assert!(
        mz0 >= 2 && heap0.alloc_bytes > 0,
        "the pool's memzones: {mz0} {heap0:?}"
    );
    let r2 = Ring::create("test_ring_mz", 1024, 0, 0).unwrap();
    assert_eq!(memory::memzone_count(), Some(mz0 + 1));
    assert!(memory::heap_stats().unwrap().alloc_bytes > heap0.alloc_bytes);
    let zones = memory::memzones().unwrap();
    assert_eq!(zones.len() as u64, mz0 + 1);
    assert!(
        zones
            .iter()
            .any(|(n, len)| n == "RG_test_ring_mz" && *len >= 1024 * 8),
        "{zones:?}"
    );
    drop(r2);
    assert_eq!(memory::memzone_count(), Some(mz0));
    assert_eq!(
        memory::heap_stats().unwrap(),
        heap0,
        "the heap is back where it was"
    );

    // ports: net_null receives, net_ring loops TX back to RX
    assert_eq!(port::count(), 2);
    let null_id = port::by_name("net_null0").expect("net_null0");
    assert!(port::by_name("net_nope0").is_none());
    let mut p = Port::configure(null_id, &PortConf::default(), &[&mp]).unwrap();
    assert_eq!(p.info().driver, "net_null");
    p.start().unwrap();
    let mut bufs = [std::ptr::null_mut(); 32];
    let n = port::rx_burst(null_id, 0, &mut bufs);
    assert!(n > 0, "net_null always has packets");
    // SAFETY: rx_burst handed us n mbufs.
    unsafe { mbuf::free_bulk(&mut bufs[..n]) };
    assert!(p.stats().ipackets >= n as u64);
    p.stop().unwrap();
    drop(p);

    let ring_id = port::by_name("net_ring0").expect("net_ring0");
    let mut rp = Port::configure(ring_id, &PortConf::default(), &[&mp]).unwrap();
    rp.start().unwrap();
    let mut tx = [std::ptr::null_mut(); 4];
    for t in tx.iter_mut() {
        let mut m = mp.alloc().unwrap();
        m.append(60).unwrap().copy_from_slice(&[0x5a; 60]);
        *t = m.into_raw().as_ptr();
    }
    // SAFETY: four fresh mbufs we own.
    assert_eq!(unsafe { port::tx_burst(ring_id, 0, &mut tx) }, 4);
    let got = port::rx_burst(ring_id, 0, &mut bufs);
    assert_eq!(got, 4, "net_ring loops its TX to its RX");
    // SAFETY: rx_burst handed us `got` valid mbufs, ours alone.
    assert!(unsafe { MbufRef::from_ptr(bufs[0]) }
        .data()
        .iter()
        .all(|&b| b == 0x5a));
    // SAFETY: as above.
    unsafe { mbuf::free_bulk(&mut bufs[..got]) };
    // The same with owned bursts.
    let mut txb: MbufBurst<4> = MbufBurst::new();
    for _ in 0..3 {
        let mut m = mp.alloc().unwrap();
        m.append(64).unwrap().fill(0x77);
        txb.push(m).unwrap();
    }
    assert_eq!(port::tx_from(ring_id, 0, &mut txb), 3);
    assert!(txb.is_empty());
    let mut one = mp.alloc().unwrap();
    one.append(64).unwrap().fill(0x77);
    assert!(port::tx_one(ring_id, 0, one).is_ok());
    let mut rxb: MbufBurst<32> = MbufBurst::new();
    assert_eq!(port::rx_into(ring_id, 0, &mut rxb, 2), 2, "at most max");
    assert_eq!(port::rx_into(ring_id, 0, &mut rxb, 32), 2);
    assert!(rxb.iter().all(|m| m.data() == [0x77; 64]));
    drop(rxb);
    assert!(rp.xstats().iter().any(|(n, _)| n == "rx_good_packets"));
    drop(rp);
    assert_eq!(mp.in_use(), 0, "every mbuf came back");
    drop(mp);
    drop(eal);
    assert_eq!(
        memory::memzone_count(),
        None,
        "no walk once the EAL is gone"
    );
    assert_eq!(memory::heap_stats(), None);
}
