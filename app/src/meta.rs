//! What travels with a packet in its mbuf's private area.
//!
//! The RX lcore fills this once, right after parsing and the early-demux
//! lookup; accounting, the stage link, delivery and the consumer read it and
//! never parse or look up again (the kernel keeps `skb->sk` for the same reason).

/// Bytes reserved after `struct rte_mbuf` in every pool the engine creates
/// (a multiple of RTE_MBUF_PRIV_ALIGN = 8).
pub const PRIV_SIZE: u16 = 64;
