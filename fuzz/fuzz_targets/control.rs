//! The ARP / ICMP / ICMPv6 responder on arbitrary frames: what `parse`
//! rejects as not-IP or not-UDP goes to `control::classify`; a planned reply
//! is written in place (with tail room, as in an mbuf) and must be a frame
//! the parser accepts as the same kind, sent back to the requester.
#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use udpdemux::control::{classify, write_reply, Iface, Plan};
use udpdemux::parse::{parse, Offload, ParseError};

fn iface() -> Iface {
    Iface {
        port: 0,
        mac: [0x02, 0, 0, 0, 0, 0x01],
        v4: vec![(Ipv4Addr::new(198, 18, 0, 1), 24)],
        v6: vec![("fd00::1".parse::<Ipv6Addr>().unwrap(), 64)],
        tx_queues: 1,
        lessons: None,
        tx_csum: false,
    }
}

fuzz_target!(|frame: &[u8]| {
    let Err(e) = parse(frame, Offload::default()) else {
        return;
    };
    if !matches!(e, ParseError::NotIp { .. } | ParseError::NotUdp { .. }) {
        return;
    }
    let ifc = iface();
    let Ok(plan) = classify(frame, &e, &ifc) else {
        return;
    };
    let mut room = frame.to_vec();
    room.resize(frame.len() + 256, 0);
    let Some(n) = write_reply(&mut room, frame.len(), &plan, &ifc) else {
        return;
    };
    assert!(n <= room.len());
    let reply = &room[..n];
    // The reply goes back to whoever asked (an NA to the solicitor's
    // link-layer address option, or to all-nodes for DAD, RFC 4861), from our MAC.
    // An ARP reply to the request's sender hardware address (RFC 826, as Linux).
    let want_dst: &[u8] = match &plan {
        Plan::Na { dst_mac, .. } => dst_mac,
        Plan::Arp { l3 } => &frame[l3 + 8..l3 + 14],
        _ => &frame[6..12],
    };
    assert_eq!(&reply[0..6], want_dst, "reply not sent to the requester");
    assert_eq!(&reply[6..12], &ifc.mac, "reply not from our MAC");
    // And it is a well-formed frame of the same kind (parse rejects it the same way).
    match parse(reply, Offload::default()) {
        Err(ParseError::NotIp { ethertype, .. }) => {
            assert!(matches!(e, ParseError::NotIp { ethertype: t, .. } if t == ethertype));
        }
        Err(ParseError::NotUdp { proto, family, .. }) => {
            assert!(
                matches!(e, ParseError::NotUdp { proto: p, family: f, .. } if p == proto && f == family)
            );
        }
        other => panic!("reply parses as {other:?} for a request {e:?}"),
    }
});
