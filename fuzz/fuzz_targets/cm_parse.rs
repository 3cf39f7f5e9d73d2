//! Any 256 bytes as the MAD of a CM frame: the CM parser, the describer and the summary must
//! never panic, and a message that parses must come back the same through emit and parse.

#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_wire::describe::Description;
use roce_wire::{cm, mad, Frame, Ipv4Address, NetworkRepr};

fuzz_target!(|data: &[u8]| {
    let mut mad_bytes = [0u8; mad::MAD_LEN];
    let n = data.len().min(mad::MAD_LEN);
    mad_bytes[..n].copy_from_slice(&data[..n]);
    if let Ok(parsed) = cm::Repr::parse(&mad::Packet::new_unchecked(&mad_bytes[..])) {
        let mut again = [0u8; mad::MAD_LEN];
        parsed.emit(&mut again);
        let reparsed = cm::Repr::parse(&mad::Packet::new_unchecked(&again[..]));
        assert_eq!(reparsed, Ok(parsed));
    }
    let network = NetworkRepr::Ipv4 {
        src: Ipv4Address::new(10, 0, 0, 1),
        dst: Ipv4Address::new(10, 0, 0, 2),
        dscp: 0,
        ecn: 0,
        ident: 0,
        ttl: 64,
        udp_src_port: 0xc000,
    };
    let repr = cm::frame_repr(None, network, 0);
    let mut buf = vec![0u8; repr.frame_len()];
    let len = repr
        .emit_with(&mut buf, |payload| payload.copy_from_slice(&mad_bytes))
        .expect("a CM frame fits");
    let frame = Frame::parse_network_layer(&buf[..len], 0x0800).expect("our own frame parses");
    let description = Description::new(&frame);
    for field in description.fields() {
        let _ = field.to_string();
        let _ = field.bit_pattern(frame.bytes()).map(|b| b.to_string());
    }
    let _ = description.summary().to_string();
    let _ = cm::parse_frame(&frame);
});
