//! Properties of frames over random values: emitting then parsing gives back what was emitted;
//! the ICRC ignores exactly the fields routers may change; and no input makes the parser, the
//! describer or the capture reader panic.

use proptest::prelude::*;
use roce_wire::capture::Reader;
use roce_wire::describe::Description;
use roce_wire::icrc;
use roce_wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, cm, deth, feth, ieth, immdt, mad, reth, EthernetAddress,
    EthernetRepr, Extensions, Frame, FrameRepr, FrameTemplate, Ipv4Address, Ipv6Address,
    NetworkRepr, Opcode, VlanTag,
};

fn opcode() -> impl Strategy<Value = Opcode> {
    prop::sample::select(Opcode::all().collect::<Vec<_>>())
}

fn network() -> impl Strategy<Value = NetworkRepr> {
    let v4 = (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        0..64u8,
        0..4u8,
        any::<u16>(),
        any::<u8>(),
        any::<u16>(),
    )
        .prop_map(|(s, d, dscp, ecn, ident, ttl, port)| NetworkRepr::Ipv4 {
            src: Ipv4Address::from(s),
            dst: Ipv4Address::from(d),
            dscp,
            ecn,
            ident,
            ttl,
            udp_src_port: port,
        });
    let v6 = (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        0..1u32 << 20,
        any::<u8>(),
        any::<u16>(),
    )
        .prop_map(|(s, d, tc, flow, hop, port)| NetworkRepr::Ipv6 {
            src: Ipv6Address::from(s),
            dst: Ipv6Address::from(d),
            traffic_class: tc,
            flow_label: flow,
            hop_limit: hop,
            udp_src_port: port,
        });
    let grh = (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        0..1u32 << 20,
        any::<u8>(),
    )
        .prop_map(|(s, d, tc, flow, hop)| NetworkRepr::Grh {
            sgid: Ipv6Address::from(s),
            dgid: Ipv6Address::from(d),
            traffic_class: tc,
            flow_label: flow,
            hop_limit: hop,
        });
    prop_oneof![v4, v6, grh]
}

fn vlan() -> impl Strategy<Value = Option<VlanTag>> {
    prop::option::of(
        (0..8u8, any::<bool>(), 0..4096u16).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
    )
}

/// Random values for every field of every header the opcode carries.
fn extensions(op: Opcode) -> impl Strategy<Value = Extensions> {
    (any::<[u64; 4]>(), any::<[u32; 4]>(), any::<u8>()).prop_map(move |(w, d, b)| {
        let mut ext = Extensions::for_opcode(op);
        ext.deth = ext.deth.map(|_| deth::Repr {
            q_key: d[0],
            src_qp: d[1] & 0xff_ffff,
        });
        ext.feth = ext.feth.map(|_| feth::Repr {
            selectivity: b & 0x3,
            placement_type: b >> 4,
        });
        ext.reth = ext.reth.map(|_| reth::Repr {
            va: w[0],
            r_key: d[2],
            dma_len: d[3],
        });
        ext.atomic_eth = ext.atomic_eth.map(|_| atomic_eth::Repr {
            va: w[0],
            r_key: d[2],
            swap_add: w[1],
            compare: w[2],
        });
        ext.aeth = ext.aeth.map(|_| aeth::Repr {
            syndrome: aeth::Syndrome::from_u8(b),
            msn: d[1] & 0xff_ffff,
        });
        ext.atomic_ack_eth = ext
            .atomic_ack_eth
            .map(|_| atomic_ack_eth::Repr { original: w[3] });
        ext.immdt = ext.immdt.map(|_| immdt::Repr { imm: d[0] });
        ext.ieth = ext.ieth.map(|_| ieth::Repr { r_key: d[3] });
        ext
    })
}

prop_compose! {
    fn bth_repr(op: Opcode)(
        flags in any::<[bool; 5]>(),
        tver in 0..16u8,
        p_key in any::<u16>(),
        dest_qp in 0..1u32 << 24,
        psn in 0..1u32 << 24,
    ) -> bth::Repr {
        let mut b = bth::Repr::new(op, dest_qp, psn);
        b.solicited = flags[0];
        b.migreq = flags[1];
        b.fecn = flags[2];
        b.becn = flags[3];
        b.ack_req = flags[4];
        b.tver = tver;
        b.p_key = p_key;
        b
    }
}

/// A random valid frame and its payload.
fn frame() -> impl Strategy<Value = (FrameRepr, Vec<u8>)> {
    opcode().prop_flat_map(|op| {
        let payload = if op.has_payload() {
            prop::collection::vec(any::<u8>(), 0..300).boxed()
        } else {
            Just(Vec::new()).boxed()
        };
        (bth_repr(op), extensions(op), network(), vlan(), payload).prop_map(
            |(bth, ext, network, vlan, payload)| {
                let repr = FrameRepr {
                    ethernet: Some(EthernetRepr {
                        dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                        src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                        vlan,
                    }),
                    network,
                    bth,
                    ext,
                    payload_len: payload.len(),
                };
                (repr, payload)
            },
        )
    })
}

fn emit(repr: &FrameRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0; repr.frame_len()];
    let len = repr.emit(&mut buf, payload).expect("a valid repr");
    assert_eq!(len, buf.len());
    buf
}

/// The bits of the ICRC-covered bytes (offsets from the IP header or GRH) that the ICRC masks.
fn masked_bits(frame: &Frame) -> Vec<(usize, u8)> {
    let n = frame.layout.network.start;
    let bth = frame.layout.bth.start - n;
    let mut bits: Vec<(usize, u8)> = vec![(bth + 4, 0xff)]; // FECN, BECN, reserved
    match frame.repr.network {
        NetworkRepr::Ipv4 { .. } => {
            let ihl = frame.layout.network.len();
            // TOS, TTL, header checksum, UDP checksum.
            bits.extend([(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff)]);
            bits.extend([(ihl + 6, 0xff), (ihl + 7, 0xff)]);
        }
        NetworkRepr::Ipv6 { .. } | NetworkRepr::Grh { .. } => {
            // Traffic class and flow label, hop limit.
            bits.extend([(0, 0x0f), (1, 0xff), (2, 0xff), (3, 0xff), (7, 0xff)]);
            if frame.layout.udp.is_some() {
                bits.extend([(46, 0xff), (47, 0xff)]);
            }
        }
    }
    bits
}

fn is_masked(masked: &[(usize, u8)], byte: usize, bit: u8) -> bool {
    masked
        .iter()
        .any(|&(at, mask)| at == byte && mask & bit != 0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn emit_then_parse_is_the_identity((repr, payload) in frame()) {
        let bytes = emit(&repr, &payload);
        let frame = Frame::parse(&bytes).expect("an emitted frame parses");
        let mut expected = repr;
        expected.bth.pad_count = roce_wire::frame::pad_len(payload.len()) as u8;
        prop_assert_eq!(frame.repr, expected);
        prop_assert_eq!(frame.payload(), &payload[..]);
        prop_assert!(frame.icrc().is_ok());
        prop_assert_eq!(frame.layout.icrc.end, bytes.len());
    }

    #[test]
    fn the_icrc_ignores_exactly_the_masked_bits((repr, payload) in frame()) {
        let bytes = emit(&repr, &payload);
        let frame = Frame::parse(&bytes).expect("an emitted frame parses");
        let scope = frame.repr.network.icrc_scope();
        let covered = frame.layout.network.start..frame.layout.icrc.start;
        let original = icrc::compute(scope, &bytes[covered.clone()]);
        prop_assert!(original.is_some());
        let masked = masked_bits(&frame);
        let mut packet = bytes[covered].to_vec();
        for byte in 0..packet.len() {
            for shift in 0..8 {
                let bit = 1u8 << shift;
                packet[byte] ^= bit;
                let flipped = icrc::compute(scope, &packet);
                packet[byte] ^= bit;
                if is_masked(&masked, byte, bit) {
                    prop_assert_eq!(flipped, original, "masked byte {} bit {:#04x}", byte, bit);
                } else {
                    // CRC-32 catches every single-bit error.
                    prop_assert_ne!(flipped, original, "byte {} bit {:#04x}", byte, bit);
                }
            }
        }
    }

    #[test]
    fn a_frame_whose_masked_fields_changed_on_the_way_still_checks(
        (repr, payload) in frame(),
        noise in any::<[u8; 8]>(),
    ) {
        let mut bytes = emit(&repr, &payload);
        let n = Frame::parse(&bytes).expect("an emitted frame parses").layout.network.start;
        let bth = Frame::parse(&bytes).expect("parses").layout.bth.start;
        // What a router or a congested switch may do: ECN marks, TTL, traffic class, flow
        // label; the IPv4 checksum follows.
        bytes[bth + 4] ^= noise[0] & 0xc0;
        match repr.network {
            NetworkRepr::Ipv4 { .. } => {
                bytes[n + 1] ^= noise[1];
                bytes[n + 8] ^= noise[2];
                let mut ip = smoltcp::wire::Ipv4Packet::new_unchecked(&mut bytes[n..n + 20]);
                ip.fill_checksum();
            }
            NetworkRepr::Ipv6 { .. } | NetworkRepr::Grh { .. } => {
                bytes[n] ^= noise[1] & 0x0f;
                bytes[n + 1] ^= noise[2];
                bytes[n + 3] ^= noise[3];
                bytes[n + 7] ^= noise[4];
            }
        }
        let frame = Frame::parse(&bytes).expect("still a valid frame");
        prop_assert!(frame.icrc().is_ok());
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..160)) {
        exercise(&bytes);
        for ethertype in [0x0800, 0x86dd, 0x8915, 0x8100] {
            if let Ok(frame) = Frame::parse_network_layer(&bytes, ethertype) {
                describe(&frame);
            }
            if let Ok(frame) = Frame::parse_network_layer_at(&bytes, 16, ethertype) {
                describe(&frame);
            }
        }
        if let Ok(mut reader) = Reader::new(&bytes[..]) {
            while let Some(Ok(record)) = reader.next_record() {
                if let Ok(frame) = record.frame() {
                    describe(&frame);
                }
            }
        }
    }

    #[test]
    fn damaged_frames_never_panic(
        (repr, payload) in frame(),
        damage in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = emit(&repr, &payload);
        for (at, value) in damage {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        exercise(&bytes);
        let keep = cut.index(bytes.len() + 1);
        exercise(&bytes[..keep]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    // Whatever the path and packet, a `FrameTemplate` (the sender's headers built once)
    // writes what the full emitter writes, with or without Ethernet, whatever identification
    // the template was built from.
    #[test]
    fn a_template_frame_is_the_full_emitters_frame(
        (repr, payload) in frame(),
        with_ethernet in prop::bool::weighted(0.9),
        ident in any::<u16>(),
    ) {
        let ethernet = repr.ethernet.filter(|_| with_ethernet);
        let template = FrameTemplate::new(ethernet, repr.network);
        let repr = template.repr(&repr.bth, &repr.ext, payload.len(), ident);
        prop_assert!(template.fits(&repr));

        let mut full = vec![0xa5u8; 512];
        let mut fast = vec![0x5au8; 512];
        let full_len = repr.emit(&mut full, &payload);
        let fast_len = template.emit_with(&repr.bth, &repr.ext, payload.len(), ident, &mut fast, |dst| {
            dst.copy_from_slice(&payload)
        });
        prop_assert_eq!(&fast_len, &full_len);
        let len = full_len.expect("a valid repr");
        prop_assert_eq!(&fast[..len], &full[..len]);
        let frame = match ethernet {
            Some(_) => Frame::parse(&fast[..len]),
            None => Frame::parse_network_layer(&fast[..len], repr.network.ethertype()),
        };
        let frame = frame.unwrap();
        prop_assert!(frame.icrc().is_ok());
        prop_assert_eq!(frame.payload(), &payload[..]);
    }
}

/// A MAD of random bytes; most often with a CM header and one of the CM's attribute IDs, so
/// that the message parsers see every message with random contents.
fn cm_mad() -> impl Strategy<Value = Vec<u8>> {
    let attributes: Vec<u16> = (0x10..=0x1a).chain([0x01, 0x42]).collect();
    (
        prop::collection::vec(any::<u8>(), mad::MAD_LEN),
        any::<bool>(),
        prop::sample::select(attributes),
    )
        .prop_map(|(mut bytes, as_cm, attribute)| {
            if as_cm {
                bytes[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
                bytes[16..18].copy_from_slice(&attribute.to_be_bytes());
            }
            bytes
        })
}

proptest! {
    #[test]
    fn any_mad_in_a_cm_frame_is_described_and_every_cm_message_round_trips(
        bytes in cm_mad(),
        network in network(),
    ) {
        let packet = mad::Packet::new_checked(&bytes[..]).expect("a whole MAD");
        if let Ok(parsed) = cm::Repr::parse(&packet) {
            let mut again = [0u8; mad::MAD_LEN];
            parsed.emit(&mut again);
            let reparsed = cm::Repr::parse(&mad::Packet::new_unchecked(&again[..]));
            prop_assert_eq!(reparsed, Ok(parsed));
        }
        let repr = cm::frame_repr(None, network, 7);
        let mut buf = vec![0u8; repr.frame_len()];
        let ethertype = match network {
            NetworkRepr::Ipv4 { .. } => 0x0800,
            NetworkRepr::Ipv6 { .. } => 0x86dd,
            NetworkRepr::Grh { .. } => 0x8915,
        };
        let len = repr.emit_with(&mut buf, |p| p.copy_from_slice(&bytes)).expect("it fits");
        let frame = Frame::parse_network_layer(&buf[..len], ethertype).expect("our frame parses");
        describe(&frame);
        prop_assert_eq!(
            cm::parse_frame(&frame).map(|r| r.is_ok()),
            Some(cm::Repr::parse(&packet).is_ok())
        );
    }
}

fn exercise(bytes: &[u8]) {
    if let Ok(frame) = Frame::parse(bytes) {
        describe(&frame);
    }
}

fn describe(frame: &Frame) {
    let description = Description::new(frame);
    let fields = description.fields();
    for field in &fields {
        let _ = field.to_string();
        let _ = field.bit_pattern(frame.bytes()).map(|b| b.to_string());
    }
    let _ = description.summary().to_string();
}
