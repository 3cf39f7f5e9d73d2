use super::tables;
use super::*;
use crate::frame::{EthernetRepr, Extensions, FrameRepr, NetworkRepr, VlanTag};
use crate::opcode::{Kind, Transport};
use crate::{aeth, bth, opcode, reth};

fn networks() -> [NetworkRepr; 3] {
    let v6 = |last| Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, last);
    [
        NetworkRepr::Ipv4 {
            src: Ipv4Address::new(10, 0, 0, 1),
            dst: Ipv4Address::new(10, 0, 0, 2),
            dscp: 26,
            ecn: 2,
            ident: 0x1234,
            ttl: 64,
            udp_src_port: 0xc001,
        },
        NetworkRepr::Ipv6 {
            src: v6(1),
            dst: v6(2),
            traffic_class: 0x68,
            flow_label: 0xabcde,
            hop_limit: 64,
            udp_src_port: 0xc001,
        },
        NetworkRepr::Grh {
            sgid: v6(1),
            dgid: v6(2),
            traffic_class: 2,
            flow_label: 0,
            hop_limit: 64,
        },
    ]
}

fn repr(op: Opcode, network: NetworkRepr, vlan: Option<VlanTag>, payload: usize) -> FrameRepr {
    let mut bth = bth::Repr::new(op, 0x12, 0x345);
    bth.ack_req = true;
    FrameRepr {
        ethernet: Some(EthernetRepr {
            dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src: EthernetAddress([2, 0, 0, 0, 0, 1]),
            vlan,
        }),
        network,
        bth,
        ext: Extensions::for_opcode(op),
        payload_len: if op.has_payload() { payload } else { 0 },
    }
}

fn emit(repr: &FrameRepr) -> Vec<u8> {
    let mut buf = vec![0; repr.frame_len()];
    repr.emit_with(&mut buf, |p| p.fill(0x61)).unwrap();
    buf
}

fn find<'x, 'a>(fields: &'x [Field<'a>], key: &str) -> &'x Field<'a> {
    fields
        .iter()
        .find(|f| f.key() == key)
        .unwrap_or_else(|| panic!("no {key}"))
}

#[test]
fn every_field_of_every_opcode_has_a_known_key_and_lies_in_the_frame() {
    let vlan = VlanTag {
        pcp: 5,
        dei: true,
        vid: 100,
    };
    let tshark = tshark_fields();
    for op in Opcode::all() {
        for network in networks() {
            for tag in [None, Some(vlan)] {
                let bytes = emit(&repr(op, network, tag, 5));
                let frame = Frame::parse(&bytes).unwrap();
                let fields = Description::new(&frame).fields();
                let mut last_start = 0;
                for f in &fields {
                    assert!(
                        tshark.contains(&f.key()) || f.key().starts_with(OWN_PREFIX),
                        "{op}: {} has no listed key",
                        f.key()
                    );
                    assert_eq!(!f.key().starts_with(OWN_PREFIX), tshark.contains(&f.key()));
                    assert!(
                        f.bytes.end <= bytes.len() && !f.bytes.is_empty(),
                        "{}",
                        f.key()
                    );
                    assert!(f.bytes.start >= last_start, "{} is out of order", f.key());
                    last_start = f.bytes.start;
                    if let Some(mask) = f.mask() {
                        assert!(f.bytes.len() <= 4);
                        assert_eq!(u64::from(mask) >> (f.bytes.len() * 8), 0, "{}", f.key());
                    }
                }
                // A key appears once: a JSON object of the fields loses nothing.
                for (i, f) in fields.iter().enumerate() {
                    assert!(
                        !fields[..i].iter().any(|g| g.key() == f.key()),
                        "{}",
                        f.key()
                    );
                }
            }
        }
    }
}

#[test]
fn fields_sit_where_the_headers_put_them() {
    let op = Opcode::new(Transport::Rc, Kind::WriteOnlyImm).unwrap();
    let mut r = repr(
        op,
        networks()[0],
        Some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        }),
        5,
    );
    r.ext.reth = Some(reth::Repr {
        va: 0x7f00_0000_1000,
        r_key: 0x2b8,
        dma_len: 5,
    });
    r.ext.immdt = Some(crate::immdt::Repr { imm: 0xdeadbeef });
    let bytes = emit(&r);
    let frame = Frame::parse(&bytes).unwrap();
    let fields = Description::new(&frame).fields();
    // Ethernet 14 + VLAN 4 + IPv4 20 + UDP 8: the BTH starts at 46.
    let opcode = find(&fields, "infiniband.bth.opcode");
    assert_eq!(opcode.bytes, 46..47);
    assert_eq!(opcode.to_string(), "11 (RC RDMA_WRITE_ONLY_WITH_IMMEDIATE)");
    let pad = find(&fields, "infiniband.bth.padcnt");
    assert_eq!((pad.bytes.clone(), pad.mask()), (47..48, Some(0x30)));
    assert_eq!(pad.value, Value::Uint(3, Base::Dec));
    assert_eq!(pad.bit_pattern(&bytes).unwrap().to_string(), "..11 ....");
    assert_eq!(
        find(&fields, "vlan.id")
            .bit_pattern(&bytes)
            .unwrap()
            .to_string(),
        ".... 0000 0110 0100"
    );
    assert_eq!(
        find(&fields, "infiniband.bth.destqp").to_string(),
        "0x000012"
    );
    assert_eq!(find(&fields, "infiniband.reth.va").bytes, 58..66);
    assert_eq!(
        find(&fields, "infiniband.reth.va").to_string(),
        "0x00007f0000001000"
    );
    assert_eq!(
        find(&fields, "infiniband.reth.dmalen").value,
        Value::Uint(5, Base::Dec)
    );
    assert_eq!(find(&fields, "infiniband.immdt").to_string(), "de:ad:be:ef");
    assert_eq!(find(&fields, "infiniband.immdt").bytes, 74..78);
    assert_eq!(find(&fields, "data.len").value, Value::Uint(8, Base::Dec));
    assert_eq!(find(&fields, "roce.payload.len").bytes, 78..83);
    assert_eq!(find(&fields, "roce.pad").to_string(), "00:00:00");
    assert_eq!(find(&fields, "infiniband.invariant.crc").bytes, 86..90);
    assert_eq!(find(&fields, "roce.icrc.status").value, Value::Text("ok"));
    assert_eq!(
        find(&fields, "ip.dsfield.dscp").value,
        Value::Uint(26, Base::Dec)
    );
    assert_eq!(find(&fields, "ip.dsfield.ecn").to_string(), "2 (ECT(0))");
    assert_eq!(find(&fields, "eth.type").to_string(), "0x8100 (802.1Q)");
    assert_eq!(find(&fields, "vlan.etype").to_string(), "0x0800 (IPv4)");
    assert_eq!(find(&fields, "eth.src").to_string(), "02:00:00:00:00:01");
}

#[test]
fn the_syndrome_is_shown_whole_and_in_the_pieces_tshark_shows() {
    let op = Opcode::new(Transport::Rc, Kind::Acknowledge).unwrap();
    let cases = [
        (
            0x1f,
            "infiniband.aeth.syndrome.credit_count",
            "31 (no credit information)",
            "ACK",
        ),
        (
            0x2e,
            "infiniband.aeth.syndrome.timer",
            "14 (1.28 ms)",
            "RNR NAK, retry after 1.28 ms",
        ),
        (
            0x62,
            "infiniband.aeth.syndrome.error_code",
            "2 (remote access error)",
            "NAK, remote access error",
        ),
        (
            0x45,
            "infiniband.aeth.syndrome.reserved_value",
            "5",
            "reserved syndrome 0x45",
        ),
    ];
    for (byte, detail, shown, words) in cases {
        let mut r = repr(op, networks()[0], None, 0);
        r.ext.aeth = Some(aeth::Repr {
            syndrome: Syndrome::from_u8(byte),
            msn: 9,
        });
        let bytes = emit(&r);
        let frame = Frame::parse(&bytes).unwrap();
        let fields = Description::new(&frame).fields();
        assert_eq!(
            find(&fields, "infiniband.aeth.syndrome").to_string(),
            format!("{byte:#04x} ({words})")
        );
        assert_eq!(find(&fields, detail).to_string(), shown);
        assert_eq!(
            find(&fields, "infiniband.aeth.syndrome.opcode").value,
            Value::Uint(u64::from(byte >> 5), Base::Dec)
        );
        assert_eq!(
            find(&fields, "infiniband.aeth.msn").value,
            Value::Uint(9, Base::Dec)
        );
        // Only the piece that fits the kind is there.
        let pieces = fields
            .iter()
            .filter(|f| f.key().starts_with("infiniband.aeth.syndrome."))
            .count();
        assert_eq!(pieces, 3);
    }
}

#[test]
fn the_summary_reads_like_a_line_of_tshark_with_more_said() {
    let op = Opcode::new(Transport::Rc, Kind::ReadRequest).unwrap();
    let mut r = repr(op, networks()[0], None, 0);
    r.ext.reth = Some(reth::Repr {
        va: 0x1000,
        r_key: 0x2b8,
        dma_len: 65536,
    });
    let bytes = emit(&r);
    let frame = Frame::parse(&bytes).unwrap();
    assert_eq!(
        Description::new(&frame).summary().to_string(),
        "10.0.0.1 → 10.0.0.2 DSCP=26 ECN=ECT(0) RC RDMA_READ_REQUEST QP=0x000012 PSN=837 AckReq \
         VA=0x0000000000001000 R_Key=0x000002b8 DMA_len=65536 ICRC ok"
    );

    let op = Opcode::new(Transport::Ud, Kind::SendOnlyImm).unwrap();
    let mut r = repr(
        op,
        networks()[1],
        Some(VlanTag {
            pcp: 0,
            dei: false,
            vid: 7,
        }),
        3,
    );
    r.bth.ack_req = false;
    r.bth.becn = true;
    r.ext.deth = Some(crate::deth::Repr {
        q_key: 0x8001_0000,
        src_qp: 1,
    });
    r.ext.immdt = Some(crate::immdt::Repr { imm: 0x01020304 });
    let mut bytes = emit(&r);
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let frame = Frame::parse(&bytes).unwrap();
    let check = frame.icrc();
    let description = Description::new(&frame);
    assert_eq!(
        description.summary().to_string(),
        format!(
            "fe80::1 → fe80::2 VLAN=7 DSCP=26 UD SEND_ONLY_WITH_IMMEDIATE QP=0x000012 PSN=837 BECN \
             Q_Key=0x80010000 SrcQP=0x000001 Imm=0x01020304 payload=3 \
             ICRC BAD (expected {:#010x}, found {:#010x})",
            check.expected.swap_bytes(),
            check.found.swap_bytes()
        )
    );
    // The found value in wire order is what a hex dump shows.
    assert_eq!(
        check.found.swap_bytes().to_be_bytes(),
        bytes[bytes.len() - 4..]
    );
    let fields = description.fields();
    assert_eq!(find(&fields, "roce.icrc.status").value, Value::Text("bad"));
    assert!(find(&fields, "infiniband.invariant.crc")
        .to_string()
        .contains("BAD, expected"));
}

#[test]
fn ethernet_padding_is_shown_after_the_icrc() {
    let op = Opcode::new(Transport::Rc, Kind::SendOnly).unwrap();
    let mut bytes = emit(&repr(op, networks()[0], None, 0));
    assert!(bytes.len() < 60);
    bytes.resize(60, 0);
    let frame = Frame::parse(&bytes).unwrap();
    let fields = Description::new(&frame).fields();
    let padding = find(&fields, "eth.padding");
    assert_eq!(padding.bytes.end, 60);
    assert!(find(&fields, "infiniband.invariant.crc").bytes.end <= padding.bytes.start);
    assert_eq!(
        find(&fields, "roce.payload.len").value,
        Value::Uint(0, Base::Dec)
    );
    assert!(fields.iter().all(|f| f.key() != "data.len"));
}

#[test]
fn visit_stops_at_the_first_error() {
    let op = Opcode::new(Transport::Rc, Kind::SendOnly).unwrap();
    let bytes = emit(&repr(op, networks()[0], None, 4));
    let frame = Frame::parse(&bytes).unwrap();
    let mut seen = 0;
    let result = Description::new(&frame).visit(|_: &Field| {
        seen += 1;
        if seen == 3 {
            Err("enough")
        } else {
            Ok(())
        }
    });
    assert_eq!((result, seen), (Err("enough"), 3));
}

#[test]
fn the_essential_fields_are_the_ones_marked_so_and_name_the_packet() {
    for (op, network, source) in [
        (Kind::SendOnly, networks()[0], "ip.src"),
        (Kind::ReadRequest, networks()[1], "ipv6.src"),
        (Kind::Acknowledge, networks()[2], "infiniband.grh.sgid"),
    ] {
        let op = Opcode::new(Transport::Rc, op).unwrap();
        let vlan = Some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 7,
        });
        let bytes = emit(&repr(op, network, vlan, 5));
        let frame = Frame::parse(&bytes).unwrap();
        let description = Description::new(&frame);
        let all = description.fields();
        let mut keys = Vec::new();
        let Ok(()) = description.visit_essential(|f: &Field| {
            keys.push(f.key());
            Ok::<(), core::convert::Infallible>(())
        });
        let marked: Vec<_> = all
            .iter()
            .filter(|f| f.essential())
            .map(Field::key)
            .collect();
        assert_eq!(keys, marked);
        assert!(keys.len() < all.len());
        for key in [source, "vlan.id", "vlan.priority", "infiniband.bth.psn"] {
            assert!(keys.contains(&key), "{key} in {keys:?}");
        }
        assert!(!keys.contains(&"ip.checksum") && !keys.contains(&"udp.length"));
        assert!(
            !keys.contains(&"eth.src"),
            "MAC addresses are for the full views"
        );
        // Every transport field is essential but reserved bits and pad bytes.
        let detail = [
            "infiniband.bth.reserved7",
            "infiniband.aeth.syndrome.reserved",
            "roce.pad",
            "eth.padding",
        ];
        assert!(all
            .iter()
            .filter(|f| f.bytes.start >= frame.layout.bth.start)
            .all(|f| f.essential() || detail.contains(&f.key())));
    }
}

#[test]
fn every_key_is_a_plain_name_that_json_never_escapes() {
    for spec in tables::all() {
        let key = spec.key();
        assert!(!key.is_empty());
        assert!(
            key.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_'),
            "{key}"
        );
        assert_eq!(spec.entry, format!(",\"{key}\":"));
    }
}

/// A CM REQ from the RDMA CM, in a frame `cm::frame_repr` builds.
fn cm_req_frame(network: NetworkRepr) -> Vec<u8> {
    use crate::cm::{self, req, Message, Path, ServiceType};
    use crate::cma::{self, PortSpace};
    let header = cma::Repr {
        version: 0,
        src_port: 40000,
        src: crate::IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1)),
        dst: crate::IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2)),
    };
    let message = Message::Req(req::Repr {
        local_comm_id: 0xabcd_0001,
        service_id: PortSpace::Tcp.service_id(7174),
        local_ca_guid: 1,
        local_q_key: 0,
        local_qpn: 0x11,
        responder_resources: 16,
        local_eecn: 0,
        initiator_depth: 16,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport: ServiceType::Rc,
        end_to_end_flow_control: false,
        starting_psn: 0x1234,
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: Path {
            local_gid: Ipv4Address::new(10, 0, 0, 1).to_ipv6_mapped(),
            remote_gid: Ipv4Address::new(10, 0, 0, 2).to_ipv6_mapped(),
            packet_rate: 7,
            flow_label: 0xfffff,
            ..Path::default()
        },
        alternate_path: Path::default(),
        sap_supported: false,
        private_data: header
            .private_data::<{ req::PRIVATE_DATA_LEN }>(b"hi")
            .unwrap(),
    });
    let repr = cm::frame_repr(None, network, 9);
    let mut buf = vec![0; repr.frame_len()];
    let cm = cm::Repr {
        transaction_id: 0x42,
        message,
    };
    repr.emit_with(&mut buf, |mad| cm.emit(mad)).unwrap();
    buf
}

#[test]
fn a_cm_mad_is_shown_field_by_field_instead_of_as_data() {
    for network in networks() {
        let bytes = cm_req_frame(network);
        let frame = Frame::parse_network_layer(&bytes, network_ethertype(&network)).unwrap();
        let description = Description::new(&frame);
        let fields = description.fields();
        let mad = frame.layout.payload.start;
        let data = mad + 24;
        assert!(fields.iter().all(|f| f.key() != "data.len"));
        assert_eq!(
            find(&fields, "infiniband.mad.attributeid").bytes,
            mad + 16..mad + 18
        );
        let qpn = find(&fields, "infiniband.cm.req.localqpn");
        assert_eq!(
            (qpn.bytes.clone(), qpn.value),
            (data + 32..data + 35, Value::Uint(0x11, Base::Hex(6)))
        );
        let rate = find(&fields, "infiniband.cm.req.prim_pktrate");
        assert_eq!(
            (rate.bytes.clone(), rate.to_string()),
            (data + 88..data + 92, "7 (40 Gb/s)".into())
        );
        assert_eq!(
            find(&fields, "infiniband.cm.req.prim_flowlabel").value,
            Value::Uint(0xfffff, Base::Hex(5))
        );
        let service = find(&fields, "infiniband.cm.req.serviceid");
        assert_eq!(
            service.to_string(),
            "0x0000000001061c06 (RDMA CM, TCP port 7174)"
        );
        assert_eq!(
            find(&fields, "infiniband.cm.req.serviceid.dport").value,
            Value::Uint(7174, Base::Dec)
        );
        assert_eq!(
            find(&fields, "infiniband.cm.req.ip_cm.sport").value,
            Value::Uint(40000, Base::Dec)
        );
        assert_eq!(
            find(&fields, "infiniband.cm.req.ip_cm.dip4").value,
            Value::Ipv4(Ipv4Address::new(10, 0, 0, 2))
        );
        // tshark's choice: the path's GIDs as IPv4 addresses in an IPv4 frame only.
        let v4 = matches!(network, NetworkRepr::Ipv4 { .. });
        let gid = fields
            .iter()
            .find(|f| f.key().starts_with("infiniband.cm.req.prim_localgid"))
            .unwrap();
        assert_eq!(gid.key().ends_with("_ipv4"), v4);
        let summary = description.summary().to_string();
        assert!(
            summary.contains("CM REQ comm=0xabcd0001 service=0x1061c06 (TCP port 7174) QPN=0x000011 PSN=4660 from 10.0.0.1:40000 to 10.0.0.2"),
            "{summary}"
        );
    }
}

fn network_ethertype(network: &NetworkRepr) -> u16 {
    match network {
        NetworkRepr::Ipv4 { .. } => 0x0800,
        NetworkRepr::Ipv6 { .. } => 0x86dd,
        NetworkRepr::Grh { .. } => 0x8915,
    }
}

/// What a field is apart from its value: its key, layer and source, and its bytes where the
/// value is read from them (the others lie wherever the frame's payload puts them).
fn shape_of(field: &Field) -> (&'static str, Layer, Source, Option<core::ops::Range<usize>>) {
    let own_bytes = matches!(
        field.source(),
        Source::Number { .. }
            | Source::Flag
            | Source::Mac
            | Source::Ipv4
            | Source::Ipv6
            | Source::Bytes
    );
    (
        field.key(),
        field.layer,
        field.source(),
        own_bytes.then(|| field.bytes.clone()),
    )
}

#[test]
fn frames_with_the_same_layout_key_have_the_same_fields_in_the_same_places() {
    use std::collections::HashMap;
    let vlan = VlanTag {
        pcp: 5,
        dei: false,
        vid: 7,
    };
    // Every kind of syndrome, some twice with other low bits.
    let syndromes = [0x1f, 0x00, 0x05, 0x21, 0x3f, 0x40, 0x60, 0x63, 0x64];
    let mut groups: HashMap<LayoutKey, (Vec<_>, Vec<Vec<u8>>)> = HashMap::new();
    let mut frames = 0;
    for op in Opcode::all() {
        for network in networks() {
            for tag in [None, Some(vlan)] {
                for payload in [0, 1, 2, 3, 4, 7, 8, 65] {
                    for (i, &syndrome) in syndromes.iter().enumerate() {
                        // Only AETH opcodes need every syndrome.
                        if !op.headers().contains(opcode::Headers::AETH) && i > 0 {
                            continue;
                        }
                        let mut r = repr(op, network, tag, payload);
                        r.bth.psn = (payload * 977 + i) as u32;
                        r.bth.dest_qp = 0x100 + i as u32;
                        r.bth.solicited = i % 2 == 1;
                        if let Some(aeth) = &mut r.ext.aeth {
                            aeth.syndrome = aeth::Syndrome::from_u8(syndrome);
                            aeth.msn = i as u32;
                        }
                        let bytes = emit(&r);
                        // Short frames again with Ethernet's minimum-size padding.
                        let padded = (bytes.len() < 60).then(|| {
                            let mut padded = bytes.clone();
                            padded.resize(60, 0);
                            padded
                        });
                        for bytes in core::iter::once(&bytes).chain(padded.as_ref()) {
                            let frame = Frame::parse(bytes).unwrap();
                            let d = Description::new(&frame);
                            let key = d.layout_key().expect("not a MAD");
                            let shapes: Vec<_> = d.fields().iter().map(shape_of).collect();
                            let values: Vec<_> = d.fields().iter().map(|f| f.to_string()).collect();
                            let group = groups
                                .entry(key)
                                .or_insert_with(|| (shapes.clone(), vec![]));
                            assert_eq!(group.0, shapes, "{op} {network:?} {payload} {syndrome:#x}");
                            group.1.push(values.join(" ").into_bytes());
                            frames += 1;
                        }
                    }
                }
            }
        }
    }
    // Not one frame per key: most keys are shared by frames whose values differ.
    let shared = groups
        .values()
        .filter(|(_, values)| values.iter().any(|v| v != &values[0]))
        .count();
    assert!(
        frames > 2 * groups.len(),
        "{frames} frames, {} keys",
        groups.len()
    );
    assert!(
        shared * 2 > groups.len(),
        "{shared} of {} keys",
        groups.len()
    );
}

#[test]
fn a_mad_has_no_layout_key() {
    for network in networks() {
        let bytes = cm_req_frame(network);
        let frame = Frame::parse_network_layer(&bytes, network_ethertype(&network)).unwrap();
        assert_eq!(Description::new(&frame).layout_key(), None);
    }
}
