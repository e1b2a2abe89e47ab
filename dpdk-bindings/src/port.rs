//! Ethernet ports: configure, queue setup, start/stop, link, MAC, stats.
use std::ffi::{CStr, CString};

use crate::error::{DpdkError, Result};
use crate::ffi;
use crate::mbuf::{Mbuf, MbufBurst, RawMbuf};
use crate::mempool::Mempool;

/// How to configure a port.
#[derive(Clone, Debug)]
pub struct PortConf {
    pub rx_queues: u16,
    pub tx_queues: u16,
    pub rx_desc: u16,
    pub tx_desc: u16,
    /// RSS over IP addresses and UDP ports when there is more than one RX queue.
    pub rss: bool,
    pub promiscuous: bool,
    /// Receive every multicast frame (`rte_eth_allmulticast_enable`), for a
    /// port that is not promiscuous but whose sockets join groups.
    pub allmulticast: bool,
    /// Ask the PMD to verify IPv4/UDP checksums when it can (results in ol_flags).
    pub rx_checksum_offload: bool,
    /// Let the PMD fill IPv4 header and UDP checksums on TX when it can
    /// (`Port::tx_offloads` says what was enabled).
    pub tx_checksum_offload: bool,
}

impl Default for PortConf {
    fn default() -> Self {
        PortConf {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            rss: true,
            promiscuous: true,
            allmulticast: false,
            rx_checksum_offload: true,
            tx_checksum_offload: false,
        }
    }
}

/// Static facts about a port.
#[derive(Clone, Debug)]
pub struct PortInfo {
    pub id: u16,
    pub name: String,
    pub driver: String,
    pub socket: i32,
    pub max_rx_queues: u16,
    pub max_tx_queues: u16,
    pub rx_offload_capa: u64,
    pub tx_offload_capa: u64,
    pub rss_offloads: u64,
}

/// A port's basic counters (`struct rte_eth_stats`, totals only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    /// RX packets dropped by the hardware (RX queues full).
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// A configured port. `Drop` stops and closes it.
pub struct Port {
    id: u16,
    info: PortInfo,
    started: bool,
    /// RX offloads actually enabled (subset of what was asked).
    pub rx_offloads: u64,
    /// TX offloads enabled (IPv4 / UDP checksums, where the device has them).
    pub tx_offloads: u64,
}

/// Number of ports the EAL probed.
pub fn count() -> u16 {
    // SAFETY: plain read of ethdev state.
    unsafe { ffi::rte_eth_dev_count_avail() }
}

/// Port id for a device name (`net_pcap0`, `0000:01:00.0`).
pub fn by_name(name: &str) -> Option<u16> {
    let cname = CString::new(name).ok()?;
    let mut id = 0u16;
    // SAFETY: valid C string and out pointer.
    let ret = unsafe { ffi::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
    (ret == 0).then_some(id)
}

/// Info for a probed port.
pub fn info(id: u16) -> Result<PortInfo> {
    // SAFETY: valid port ids are checked by DPDK (returns 0 if invalid).
    if unsafe { ffi::rte_eth_dev_is_valid_port(id) } == 0 {
        return Err(DpdkError::Usage(format!("port {id} does not exist")));
    }
    let mut di = ffi::rte_eth_dev_info::default();
    // SAFETY: di is a valid out struct.
    let ret = unsafe { ffi::rte_eth_dev_info_get(id, &mut di) };
    if ret != 0 {
        return Err(DpdkError::from_ret(
            format!("rte_eth_dev_info_get(port {id})"),
            ret,
        ));
    }
    let mut name = [0 as std::os::raw::c_char; 64];
    // SAFETY: buffer of RTE_ETH_NAME_MAX_LEN (64) bytes.
    unsafe { ffi::rte_eth_dev_get_name_by_port(id, name.as_mut_ptr()) };
    // SAFETY: DPDK NUL-terminates within the buffer.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let driver = if di.driver_name.is_null() {
        String::new()
    } else {
        // SAFETY: driver_name is a static string owned by the PMD.
        unsafe { CStr::from_ptr(di.driver_name) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: plain read.
    let socket = unsafe { ffi::rte_eth_dev_socket_id(id) };
    Ok(PortInfo {
        id,
        name,
        driver,
        socket,
        max_rx_queues: di.max_rx_queues,
        max_tx_queues: di.max_tx_queues,
        rx_offload_capa: di.rx_offload_capa,
        tx_offload_capa: di.tx_offload_capa,
        rss_offloads: di.flow_type_rss_offloads,
    })
}

impl Port {
    /// Configure queues and offloads; `rx_pools[q]` feeds RX queue q.
    pub fn configure(id: u16, conf: &PortConf, rx_pools: &[&Mempool]) -> Result<Port> {
        let info = info(id)?;
        if conf.rx_queues == 0 || conf.rx_queues > info.max_rx_queues {
            return Err(DpdkError::Usage(format!(
                "port {} ({}): {} RX queues asked, the device has at most {}",
                id, info.name, conf.rx_queues, info.max_rx_queues
            )));
        }
        if conf.tx_queues > info.max_tx_queues {
            return Err(DpdkError::Usage(format!(
                "port {} ({}): {} TX queues asked, the device has at most {}",
                id, info.name, conf.tx_queues, info.max_tx_queues
            )));
        }
        if rx_pools.len() != conf.rx_queues as usize {
            return Err(DpdkError::Usage(format!(
                "port {id}: need one mempool per RX queue"
            )));
        }
        let mut ec = ffi::rte_eth_conf::default();
        // RSS only where the device can hash the fields we ask (as l3fwd masks rss_hf).
        let rss_hf = (ffi::RTE_ETH_RSS_IP | ffi::RTE_ETH_RSS_UDP) & info.rss_offloads;
        if conf.rss && conf.rx_queues > 1 && rss_hf != 0 {
            ec.rxmode.mq_mode = ffi::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            ec.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        }
        let want = ffi::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | ffi::RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
        let rx_offloads = if conf.rx_checksum_offload {
            want & info.rx_offload_capa
        } else {
            0
        };
        ec.rxmode.offloads = rx_offloads;
        let tx_offloads = if conf.tx_checksum_offload {
            (ffi::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | ffi::RTE_ETH_TX_OFFLOAD_UDP_CKSUM)
                & info.tx_offload_capa
        } else {
            0
        };
        ec.txmode.offloads = tx_offloads;
        // SAFETY: ec is a fully initialised config struct.
        let ret = unsafe { ffi::rte_eth_dev_configure(id, conf.rx_queues, conf.tx_queues, &ec) };
        if ret != 0 {
            return Err(DpdkError::from_ret(
                format!("rte_eth_dev_configure(port {id} {})", info.name),
                ret,
            ));
        }
        let mut rx_desc = conf.rx_desc;
        let mut tx_desc = conf.tx_desc;
        // SAFETY: valid out pointers; the PMD clamps to its limits.
        let ret = unsafe { ffi::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut rx_desc, &mut tx_desc) };
        if ret != 0 {
            return Err(DpdkError::from_ret(
                format!("rte_eth_dev_adjust_nb_rx_tx_desc(port {id})"),
                ret,
            ));
        }
        let socket = if info.socket < 0 {
            0
        } else {
            info.socket as u32
        };
        for (q, pool) in rx_pools.iter().enumerate() {
            // SAFETY: pool outlives the port (owner's teardown order); NULL rxconf = defaults + port offloads.
            let ret = unsafe {
                ffi::rte_eth_rx_queue_setup(
                    id,
                    q as u16,
                    rx_desc,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
            if ret != 0 {
                return Err(DpdkError::from_ret(
                    format!("rte_eth_rx_queue_setup(port {id}, queue {q})"),
                    ret,
                ));
            }
        }
        for q in 0..conf.tx_queues {
            // SAFETY: NULL txconf = PMD defaults.
            let ret =
                unsafe { ffi::rte_eth_tx_queue_setup(id, q, tx_desc, socket, std::ptr::null()) };
            if ret != 0 {
                return Err(DpdkError::from_ret(
                    format!("rte_eth_tx_queue_setup(port {id}, queue {q})"),
                    ret,
                ));
            }
        }
        if conf.promiscuous {
            // Some vdevs do not support it; not fatal.
            // SAFETY: configured port.
            let _ = unsafe { ffi::rte_eth_promiscuous_enable(id) };
        }
        if conf.allmulticast {
            // As above: a PMD without it still receives what its filter passes.
            // SAFETY: configured port.
            let _ = unsafe { ffi::rte_eth_allmulticast_enable(id) };
        }
        Ok(Port {
            id,
            info,
            started: false,
            rx_offloads,
            tx_offloads,
        })
    }

    pub fn id(&self) -> u16 {
        self.id
    }
    pub fn info(&self) -> &PortInfo {
        &self.info
    }

    pub fn start(&mut self) -> Result<()> {
        // SAFETY: configured port.
        let ret = unsafe { ffi::rte_eth_dev_start(self.id) };
        if ret != 0 {
            return Err(DpdkError::from_ret(
                format!("rte_eth_dev_start(port {} {})", self.id, self.info.name),
                ret,
            ));
        }
        self.started = true;
        Ok(())
    }

    pub fn stop(&mut self) -> Result<()> {
        if self.started {
            self.started = false;
            // SAFETY: started port; RX/TX lcores have been joined by the caller.
            let ret = unsafe { ffi::rte_eth_dev_stop(self.id) };
            if ret != 0 {
                return Err(DpdkError::from_ret(
                    format!("rte_eth_dev_stop(port {})", self.id),
                    ret,
                ));
            }
        }
        Ok(())
    }

    pub fn mac(&self) -> [u8; 6] {
        mac(self.id)
    }

    /// (up, speed in Mbit/s).
    pub fn link(&self) -> (bool, u32) {
        let mut l = ffi::rte_eth_link::default();
        // SAFETY: valid out struct.
        unsafe { ffi::rte_eth_link_get_nowait(self.id, &mut l) };
        (l.link_status() != 0, l.link_speed)
    }

    pub fn stats(&self) -> PortStats {
        stats(self.id)
    }

    pub fn xstats(&self) -> Vec<(String, u64)> {
        xstats(self.id)
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        let _ = self.stop();
        // SAFETY: the port is stopped; nothing polls it any more.
        unsafe { ffi::rte_eth_dev_close(self.id) };
    }
}

pub fn mac(id: u16) -> [u8; 6] {
    let mut a = ffi::rte_ether_addr::default();
    // SAFETY: valid out struct.
    unsafe { ffi::rte_eth_macaddr_get(id, &mut a) };
    a.addr_bytes
}

/// Set a port's MAC address (`rte_eth_dev_default_mac_addr_set`); on a
/// `net_tap` port this renames the kernel interface's address too.
pub fn set_mac(id: u16, mac: [u8; 6]) -> Result<()> {
    let mut a = ffi::rte_ether_addr { addr_bytes: mac };
    // SAFETY: valid port id checked by DPDK; `a` outlives the call.
    let ret = unsafe { ffi::rte_eth_dev_default_mac_addr_set(id, &mut a) };
    if ret != 0 {
        return Err(DpdkError::from_ret(
            format!("rte_eth_dev_default_mac_addr_set(port {id})"),
            ret,
        ));
    }
    Ok(())
}

pub fn stats(id: u16) -> PortStats {
    let mut s = ffi::rte_eth_stats::default();
    // SAFETY: valid out struct.
    unsafe { ffi::rte_eth_stats_get(id, &mut s) };
    PortStats {
        ipackets: s.ipackets,
        opackets: s.opackets,
        ibytes: s.ibytes,
        obytes: s.obytes,
        imissed: s.imissed,
        ierrors: s.ierrors,
        oerrors: s.oerrors,
        rx_nombuf: s.rx_nombuf,
    }
}

/// The PMD's extended stats, by name.
pub fn xstats(id: u16) -> Vec<(String, u64)> {
    // SAFETY: NULL/0 asks for the count.
    let n = unsafe { ffi::rte_eth_xstats_get_names(id, std::ptr::null_mut(), 0) };
    if n <= 0 {
        return Vec::new();
    }
    let mut names = vec![ffi::rte_eth_xstat_name::default(); n as usize];
    let mut vals = vec![ffi::rte_eth_xstat::default(); n as usize];
    // SAFETY: buffers hold n entries.
    let got_n = unsafe { ffi::rte_eth_xstats_get_names(id, names.as_mut_ptr(), n as u32) };
    // SAFETY: as above.
    let got_v = unsafe { ffi::rte_eth_xstats_get(id, vals.as_mut_ptr(), n as u32) };
    let k = got_n.min(got_v).max(0) as usize;
    vals.iter()
        .take(k)
        .filter_map(|v| {
            let nm = names.get(v.id as usize)?;
            // SAFETY: DPDK NUL-terminates names within 64 bytes.
            let s = unsafe { CStr::from_ptr(nm.name.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            Some((s, v.value))
        })
        .collect()
}

/// Receive up to `out.len()` packets from (port, queue): the first
/// `returned` entries are then mbufs the caller owns (and must free).
#[inline(always)]
pub fn rx_burst(port: u16, queue: u16, out: &mut [*mut RawMbuf]) -> usize {
    // SAFETY: out has room for out.len() pointers (RawMbuf is rte_mbuf);
    // each queue is polled by one lcore (engine invariant).
    unsafe {
        ffi::rte_eth_rx_burst(port, queue, out.as_mut_ptr().cast(), out.len() as u16) as usize
    }
}

/// Receive up to `max` packets from (port, queue) into `out` (appended, as
/// many as it has room for); how many arrived.
#[inline(always)]
pub fn rx_into<const N: usize>(port: u16, queue: u16, out: &mut MbufBurst<N>, max: usize) -> usize {
    let room = out.spare_mut();
    let k = max.min(room.len());
    let n = rx_burst(port, queue, &mut room[..k]);
    // SAFETY: the PMD wrote n mbufs, ours now, into the spare slots.
    unsafe { out.filled(n) };
    n
}

/// Transmit; how many the PMD took (the rest still belong to the caller).
///
/// # Safety
/// Every pointer is a live mbuf the caller owns exclusively; the PMD takes
/// over the first `returned` ones.
#[inline(always)]
pub unsafe fn tx_burst(port: u16, queue: u16, pkts: &mut [*mut RawMbuf]) -> usize {
    // SAFETY: per the contract; each TX queue is used by one lcore at a time (engine invariant).
    unsafe {
        ffi::rte_eth_tx_burst(port, queue, pkts.as_mut_ptr().cast(), pkts.len() as u16) as usize
    }
}

/// Transmit `pkts`' mbufs from the front; how many the PMD took. The rest
/// stay in `pkts`, in order (the caller frees or retries them).
#[inline]
pub fn tx_from<const N: usize>(port: u16, queue: u16, pkts: &mut MbufBurst<N>) -> usize {
    // SAFETY: the burst's mbufs are live and ours.
    let sent = unsafe { tx_burst(port, queue, pkts.as_raw_mut()) };
    // SAFETY: the PMD took exactly the first `sent`.
    unsafe { pkts.consumed(sent) };
    sent
}

/// Transmit one mbuf; given back if the PMD did not take it.
#[inline]
pub fn tx_one(port: u16, queue: u16, m: Mbuf) -> std::result::Result<(), Mbuf> {
    let mut one = [m.as_ptr()];
    // SAFETY: an owned mbuf; if the PMD takes it, we forget our handle below.
    if unsafe { tx_burst(port, queue, &mut one) } == 1 {
        let _ = m.into_raw();
        Ok(())
    } else {
        Err(m)
    }
}
