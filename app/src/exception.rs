//! The exception path to the kernel: what DPDK's KNI did before 23.11, on
//! a `net_tap` (or `virtio_user`) port. Frames that no socket and no
//! responder takes (anything the parser rejected as not IP or not UDP that
//! the control path did not answer: TCP, ICMP other than echo to the
//! engine's addresses, ARP and neighbour discovery for other addresses,
//! ARP replies; and, by config, valid UDP to a port no socket is bound to)
//! are written to the tap by the RX lcore that received them, on its own
//! TX queue of the tap. The kernel's frames on the tap are read by the main
//! lcore and sent out of the data port on the main lcore's TX queue.
//!
//! The tap takes the data port's MAC address (`rte_eth_dev_default_mac_addr_set`,
//! which net_tap passes to the kernel interface): the kernel's ARP replies
//! and neighbour advertisements then name the MAC the NIC receives for, so
//! peers' frames reach the engine's port without promiscuous mode, and the
//! kernel accepts them as addressed to itself without any rewriting of
//! Ethernet headers or of the MACs inside ARP and ND payloads (KNI's
//! examples give the KNI interface the port's MAC for the same reason).
//!
//! A flood of exception traffic is cut by a token bucket per RX lcore (its
//! share of `exception.rate_pps`) before the system call a tap write costs:
//! past the limit a frame costs the RX lcore a TSC compare and a bulk free.
//! Every frame the path takes is in exactly one of [`ToKernelStats`]'s
//! `to_kernel`, `rate_limited` or `tx_errors`, and in the MIB's `exception`.
use dpdk_sys::mbuf::{FreeList, MbufBurst};
use dpdk_sys::{port, Mbuf, Mempool, Port};

use crate::config::Config;
use crate::control::TokenBucket;
use crate::counters::Counter;
use crate::receive::sync::CachePadded;

/// Descriptors per tap queue: the kernel's frames wait here between two
/// passes of the main lcore.
const TAP_DESC: u16 = 512;

/// Frames the main lcore moves per tap burst, and bursts per queue per pass.
const FROM_KERNEL_BURST: usize = 32;
const FROM_KERNEL_BURSTS: usize = 8;

/// The exception device and the data port it serves.
pub struct ExceptionPath {
    /// The tap's port id.
    pub tap: u16,
    pub tap_name: String,
    /// Queue pairs on the tap: TX queue k is RX lcore k's; the main lcore
    /// reads every RX queue (the kernel spreads its frames over all).
    pub queues: u16,
    /// The data port whose frames go to the kernel, and out of which the
    /// kernel's frames are sent.
    pub data_port: u16,
    /// Valid UDP with no socket goes to the kernel too.
    pub unbound_udp: bool,
    /// The main lcore's side (kernel to wire).
    pub from: CachePadded<FromKernelStats>,
}

/// Kernel to wire, counted by the main lcore.
#[derive(Debug, Default)]
pub struct FromKernelStats {
    /// Frames read from the tap and handed to the data port.
    pub sent: Counter,
    /// Frames the data port did not take (freed).
    pub tx_errors: Counter,
}

/// Wire to kernel, per RX lcore.
#[derive(Debug, Default)]
pub struct ToKernelStats {
    /// Written to the tap.
    pub to_kernel: Counter,
    /// Dropped by the token bucket (freed).
    pub rate_limited: Counter,
    /// The tap did not take them (kernel queue full, interface down): freed.
    pub tx_errors: Counter,
    /// Of the three above: valid UDP with no socket (`unbound_udp`), so
    /// the books can tell them from the lookups.
    pub unbound_udp: Counter,
}

impl ToKernelStats {
    /// Frames the path took: each is in exactly one of these.
    pub fn taken(&self) -> u64 {
        self.to_kernel.get() + self.rate_limited.get() + self.tx_errors.get()
    }
}

/// An RX lcore's state for the exception path: its bucket and counters.
#[derive(Debug, Default)]
pub struct LcoreException {
    pub bucket: TokenBucket,
    pub stats: CachePadded<ToKernelStats>,
}

impl LcoreException {
    /// The bucket of one of `rx_lcores` RX lcores: its share of the rate.
    pub fn new(cfg: &Config, rx_lcores: usize, tsc_hz: u64) -> LcoreException {
        let n = rx_lcores.max(1) as u32;
        let e = &cfg.exception;
        LcoreException {
            bucket: TokenBucket::new(tsc_hz, (e.rate_pps / n).max(1), (e.burst / n).max(1)),
            stats: CachePadded::default(),
        }
    }
}

impl ExceptionPath {
    /// Hand `m` (received on the data port) to the kernel on tap TX queue
    /// `queue`, or drop it when the bucket is empty. Always takes it: the
    /// caller counts it once as the MIB's `exception`.
    #[inline]
    pub fn to_kernel(
        &self,
        me: &LcoreException,
        queue: u16,
        mut m: Mbuf,
        now: u64,
        free: &mut FreeList,
        unbound_udp: bool,
    ) {
        let st = &me.stats;
        if unbound_udp {
            st.unbound_udp.add(1);
        }
        if !me.bucket.take(now) {
            st.rate_limited.add(1);
            free.push_mbuf(m);
            return;
        }
        // The RX verdict bits mean nothing to the tap, and no TX offload
        // is asked for: the frame goes to the kernel as it came off the wire.
        m.view_mut().clear_ol_flags();
        match port::tx_one(self.tap, queue, m) {
            Ok(()) => st.to_kernel.add(1),
            Err(m) => {
                st.tx_errors.add(1);
                free.push_mbuf(m);
            }
        }
    }

    /// Main lcore: move what the kernel sent on the tap out of the data
    /// port on `tx_queue`. Returns the frames read.
    pub fn from_kernel(&self, tx_queue: u16) -> usize {
        let mut bufs: MbufBurst<FROM_KERNEL_BURST> = MbufBurst::new();
        let mut total = 0;
        for q in 0..self.queues {
            // A few bursts per queue per pass: a busy kernel cannot keep the
            // main lcore from its timers and signals.
            for _ in 0..FROM_KERNEL_BURSTS {
                let n = port::rx_into(self.tap, q, &mut bufs, FROM_KERNEL_BURST);
                if n == 0 {
                    break;
                }
                total += n;
                let sent = port::tx_from(self.data_port, tx_queue, &mut bufs);
                self.from.sent.add(sent as u64);
                let left = bufs.len() as u64;
                if left != 0 {
                    self.from.tx_errors.add(left);
                    bufs.clear();
                }
                if n < FROM_KERNEL_BURST {
                    break;
                }
            }
        }
        total
    }
}

/// What [`start`] made: the path, and the port and pool the engine owns
/// until teardown (the port goes before the pool).
pub struct Started {
    pub path: ExceptionPath,
    pub port: Port,
    pub pool: Mempool,
}

/// Probe-time setup: find the exception device, give it one queue pair
/// per RX lcore and the data port's MAC, and start it. `Ok(None)`: off.
pub fn start(cfg: &Config, rx_lcores: usize, numa: i32) -> Result<Option<Started>, String> {
    let e = &cfg.exception;
    let Some(name) = e.name() else {
        return Ok(None);
    };
    let tap = port::by_name(name).ok_or_else(|| {
        format!("exception.device {name:?} was not probed: its PMD is missing (apt-get install dpdk) or /dev/net/tun (net_tap) or /dev/vhost-net (virtio_user) is absent")
    })?;
    let data_name = e
        .data_port(&cfg.ports)
        .ok_or("exception: no [[port]] to serve")?;
    let data_port = port::by_name(data_name)
        .ok_or_else(|| format!("exception.port {data_name:?} was not probed"))?;
    let queues = rx_lcores.max(1) as u16;
    let info = port::info(tap).map_err(|e| format!("exception.device {name:?}: {e}"))?;
    if info.max_rx_queues < queues || info.max_tx_queues < queues {
        return Err(format!(
            "exception.device {name:?} ({}): {queues} queue pairs needed (one per RX lcore) but it has at most {} RX / {} TX: for virtio_user set queues={queues}",
            info.driver, info.max_rx_queues, info.max_tx_queues
        ));
    }
    // The tap's RX descriptors each hold an mbuf; the rest is for frames
    // on their way out of the data port.
    let pool = Mempool::new(
        "exc_pool",
        u32::from(queues) * u32::from(TAP_DESC) + 1023,
        32,
        crate::meta::PRIV_SIZE,
        cfg.mempool.data_room,
        numa,
    )
    .map_err(|e| format!("exception pool: {e}: raise eal.memory_mb"))?;
    let conf = dpdk_sys::PortConf {
        rx_queues: queues,
        tx_queues: queues,
        rx_desc: TAP_DESC,
        tx_desc: TAP_DESC,
        rss: false,
        // The tap receives what the kernel sends; it has nothing to filter.
        promiscuous: false,
        allmulticast: false,
        rx_checksum_offload: false,
        tx_checksum_offload: false,
    };
    let pools: Vec<&Mempool> = (0..queues).map(|_| &pool).collect();
    let mut p = Port::configure(tap, &conf, &pools)
        .map_err(|e| format!("exception.device {name:?}: {e}"))?;
    let mac = port::mac(data_port);
    port::set_mac(tap, mac).map_err(|e| {
        format!("exception.device {name:?}: cannot give it port {data_name:?}'s MAC: {e}")
    })?;
    p.start()
        .map_err(|e| format!("exception.device {name:?}: {e}"))?;
    log::info!(
        "exception path: {name} ({}) carries port {data_name}'s frames no socket or responder takes to the kernel, at most {} pps, mac {}",
        info.driver,
        e.rate_pps,
        mac.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    );
    Ok(Some(Started {
        path: ExceptionPath {
            tap,
            tap_name: name.to_string(),
            queues,
            data_port,
            unbound_udp: e.unbound_udp,
            from: CachePadded::default(),
        },
        port: p,
        pool,
    }))
}

/// Whether the exception path takes a frame the parser rejected this way:
/// not IP (ARP and any other ethertype) or IP carrying another protocol.
#[inline]
pub fn wants(err: &crate::parse::ParseError) -> bool {
    matches!(
        err,
        crate::parse::ParseError::NotIp { .. } | crate::parse::ParseError::NotUdp { .. }
    )
}
