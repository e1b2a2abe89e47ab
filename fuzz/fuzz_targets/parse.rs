//! Arbitrary bytes (first byte: checksum-offload hints) into `parse`.
//! Besides "no panic", accepted frames must satisfy the Datagram invariants
//! and the reply writer must produce a frame that parses back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use udpdemux::parse::build::{reply_len, write_udp_reply, ReplyOpts};
use udpdemux::parse::{parse, CsumHint, Offload};

fn hint(b: u8) -> CsumHint {
    match b % 3 {
        0 => CsumHint::Unknown,
        1 => CsumHint::Good,
        _ => CsumHint::Bad,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&h, frame)) = data.split_first() else {
        return;
    };
    let hints = Offload {
        ip: hint(h),
        l4: hint(h / 3),
    };
    let Ok(d) = parse(frame, hints) else {
        return;
    };
    assert!(d.l3_off < d.l4_off);
    assert_eq!(usize::from(d.payload_off), usize::from(d.l4_off) + 8);
    let payload = d.payload(frame).expect("payload inside the frame");
    // Trusting the hardware can only accept more, never less.
    let good = Offload {
        ip: CsumHint::Good,
        l4: CsumHint::Good,
    };
    assert_eq!(parse(frame, good), Ok(d));

    // Requests to a multicast group need a caller-chosen unicast source.
    let opts = ReplyOpts {
        src: d.dst.is_multicast().then_some(d.src),
        ..ReplyOpts::default()
    };
    let mut out = vec![0u8; reply_len(&d, payload.len())];
    let n = write_udp_reply(frame, &d, payload, opts, &mut out).expect("reply fits");
    let r = parse(&out[..n], Offload::default()).expect("reply parses");
    assert_eq!((r.dst, r.sport, r.dport), (d.src, d.dport, d.sport));
    assert_eq!(r.payload(&out[..n]), Some(payload));
});
