//! The captures in `captures/` that the project makes with its own emitter, from fixed values
//! and fixed timestamps, so that the files are the same on every machine and every run.
//!
//! They are the inputs of the conformance tests: tshark and `roce decode` must agree on every
//! field of every packet in them. Between them they hold every opcode over IPv4, IPv6, 802.1Q
//! and RoCEv1, payloads of every length modulo four (so every pad count), every AETH syndrome
//! kind, RoCE sent from well-known UDP source ports, a frame with Ethernet padding, other
//! traffic that must be skipped, and the Linux cooked and pcapng framings.
//!
//! The test `bundled_captures` checks that the committed files equal what this module makes;
//! `ROCE_REGENERATE_CAPTURES=1` rewrites them after a deliberate change.

use std::borrow::Cow;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness, TsResolution};
use roce_wire::aeth::{self, NakCode, Syndrome};
use roce_wire::capture::Writer;
use roce_wire::cm::{self, Message, MessageKind, Path, PrivateData, ServiceType};
use roce_wire::cma::{self, PortSpace};
use roce_wire::{
    atomic_ack_eth, atomic_eth, bth, deth, feth, ieth, immdt, mad, reth, EthernetAddress,
    EthernetRepr, Extensions, FrameRepr, Ipv4Address, Ipv6Address, Kind, NetworkRepr, Opcode,
    Transport, VlanTag,
};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetFrame, EthernetProtocol, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};

/// One capture file: its path under `captures/` and its bytes.
pub struct Capture {
    pub path: &'static str,
    pub bytes: Vec<u8>,
}

/// Every capture this module makes.
pub fn all() -> Vec<Capture> {
    vec![
        capture("every-opcode-ipv4.pcap", every_opcode_ipv4()),
        capture("every-opcode-ipv6.pcap", every_opcode(|i| (ipv6(i), None))),
        capture("every-opcode-vlan.pcap", every_opcode(vlan_network)),
        capture("every-opcode-rocev1.pcap", every_opcode(|i| (grh(i), None))),
        capture("padding.pcap", padding()),
        capture("aeth-syndromes.pcap", aeth_syndromes()),
        capture("cm-messages.pcap", cm_messages()),
        Capture {
            path: "linux-cooked-sll.pcap",
            bytes: cooked(DataLink::LINUX_SLL),
        },
        Capture {
            path: "linux-cooked-sll2.pcap",
            bytes: cooked(DataLink::LINUX_SLL2),
        },
        Capture {
            path: "two-interfaces.pcapng",
            bytes: two_interfaces(),
        },
    ]
}

/// Every RoCE frame of `every-opcode-ipv4.pcap`, endlessly: the material of big synthetic
/// captures for timing the decoder.
pub fn endless_frames() -> impl Iterator<Item = Vec<u8>> {
    let frames: Vec<Vec<u8>> = Opcode::all()
        .enumerate()
        .map(|(i, op)| emit(&packet(i, op, ipv4(i), None)))
        .collect();
    frames.into_iter().cycle()
}

/// The fixed time of the `i`th frame of a capture: nanoseconds apart, so nanosecond timestamps
/// are exercised too.
pub fn time(i: usize) -> Duration {
    Duration::new(1_700_000_000, 0) + Duration::from_nanos(i as u64 * 1_000_013)
}

fn capture(path: &'static str, frames: Vec<Vec<u8>>) -> Capture {
    let mut writer = Writer::new(Vec::new()).expect("writing to memory");
    for (i, frame) in frames.iter().enumerate() {
        writer.write(time(i), frame).expect("writing to memory");
    }
    Capture {
        path,
        bytes: writer.into_inner(),
    }
}

fn mac(last: u8) -> EthernetAddress {
    EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, last])
}

fn ipv4(i: usize) -> NetworkRepr {
    NetworkRepr::Ipv4 {
        src: Ipv4Address::new(10, 0, 0, 1),
        dst: Ipv4Address::new(10, 0, 0, 2),
        dscp: (i % 64) as u8,
        ecn: (i % 4) as u8,
        ident: 0x4000 + i as u16,
        ttl: 64 - (i % 8) as u8,
        udp_src_port: 0xc000 | ((i as u16 * 0x101) & 0x3fff),
    }
}

fn gid(last: u16) -> Ipv6Address {
    Ipv6Address::new(0xfe80, 0, 0, 0, 0x0200, 0, 0, last)
}

fn ipv6(i: usize) -> NetworkRepr {
    NetworkRepr::Ipv6 {
        src: gid(1),
        dst: Ipv6Address::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10 + i as u16),
        traffic_class: (i * 9 % 256) as u8,
        flow_label: (i as u32 * 0x1_2345) & 0xf_ffff,
        hop_limit: 255 - i as u8,
        udp_src_port: 0xc000 | ((i as u16 * 0x203) & 0x3fff),
    }
}

fn grh(i: usize) -> NetworkRepr {
    NetworkRepr::Grh {
        sgid: gid(1),
        dgid: gid(2),
        traffic_class: (i % 8) as u8,
        flow_label: i as u32,
        hop_limit: 64,
    }
}

fn vlan_network(i: usize) -> (NetworkRepr, Option<VlanTag>) {
    let network = if i % 2 == 0 { ipv4(i) } else { ipv6(i) };
    let tag = VlanTag {
        pcp: (i % 8) as u8,
        dei: i % 5 == 0,
        vid: 1 + (i as u16 * 97) % 4094,
    };
    (network, Some(tag))
}

/// The `i`th packet of a capture: every field takes a value that depends on `i`, so a decoder
/// that mixes fields up disagrees somewhere.
fn packet(i: usize, op: Opcode, network: NetworkRepr, vlan: Option<VlanTag>) -> FrameRepr {
    let n = i as u32;
    let mut bth = bth::Repr::new(op, 0x10 + n * 0x1011, 0xff_fff0u32.wrapping_add(n * 0x1111));
    bth.ack_req = op.position().is_end() || i % 3 == 0;
    bth.solicited = i % 4 == 1;
    bth.migreq = i % 5 == 2;
    bth.fecn = i % 6 == 3;
    bth.becn = i % 7 == 4 || op == Opcode::CNP;
    if i % 9 == 8 {
        bth.p_key = 0x8001;
    }
    let mut ext = Extensions::for_opcode(op);
    let wide = u64::from(n);
    let va = 0x7f00_0000_0000 + wide * 0x1_0008;
    if let Some(d) = &mut ext.deth {
        *d = deth::Repr {
            q_key: 0x1111_0000 + n,
            src_qp: 0x100 + n,
        };
    }
    if let Some(f) = &mut ext.feth {
        *f = feth::Repr {
            selectivity: (n % 2) as u8,
            placement_type: 1 + (n % 3) as u8,
        };
    }
    let payload_len = payload_len(i, op);
    if let Some(r) = &mut ext.reth {
        *r = reth::Repr {
            va,
            r_key: 0x1200 + n,
            dma_len: payload_len as u32 + n * 4096,
        };
    }
    if let Some(a) = &mut ext.atomic_eth {
        *a = atomic_eth::Repr {
            va: va & !7,
            r_key: 0x3400 + n,
            swap_add: 0x0102_0304_0506_0708 * (wide + 1),
            compare: 0x1111_2222_3333_4444 ^ wide,
        };
    }
    if let Some(a) = &mut ext.aeth {
        a.syndrome = Syndrome::Ack {
            credits: (n % 32) as u8,
        };
        a.msn = 0xff_fff8u32.wrapping_add(n) & 0xff_ffff;
    }
    if let Some(a) = &mut ext.atomic_ack_eth {
        *a = atomic_ack_eth::Repr {
            original: 0xdead_beef_0000_0000 | wide,
        };
    }
    if let Some(d) = &mut ext.immdt {
        *d = immdt::Repr {
            imm: 0xcafe_0000 | n,
        };
    }
    if let Some(d) = &mut ext.ieth {
        *d = ieth::Repr { r_key: 0x5600 + n };
    }
    FrameRepr {
        ethernet: Some(EthernetRepr {
            dst: mac(2),
            src: mac(1),
            vlan,
        }),
        network,
        bth,
        ext,
        payload_len,
    }
}

/// Payload lengths that walk through every pad count; a CNP carries 16 reserved bytes.
fn payload_len(i: usize, op: Opcode) -> usize {
    match op {
        Opcode::CNP => 16,
        op if op.has_payload() => 1 + i * 5 % 61,
        _ => 0,
    }
}

fn emit(repr: &FrameRepr) -> Vec<u8> {
    let mut buf = vec![0; repr.frame_len()];
    let seed = repr.bth.psn as usize;
    repr.emit_with(&mut buf, |payload| {
        if repr.bth.opcode == Opcode::CNP {
            return; // reserved: zero
        }
        for (k, b) in payload.iter_mut().enumerate() {
            *b = (seed + k * 7) as u8;
        }
    })
    .expect("the generator describes valid frames");
    buf
}

fn every_opcode(network: impl Fn(usize) -> (NetworkRepr, Option<VlanTag>)) -> Vec<Vec<u8>> {
    Opcode::all()
        .enumerate()
        .map(|(i, op)| {
            let (net, vlan) = network(i);
            emit(&packet(i, op, net, vlan))
        })
        .collect()
}

/// Every opcode over IPv4, after two frames of other traffic (skipped by the decoder) and
/// before two RoCE frames from the well-known UDP source ports 53 and 69, which tshark takes for
/// DNS and TFTP unless told otherwise. Only the destination port says RoCE.
fn every_opcode_ipv4() -> Vec<Vec<u8>> {
    let mut frames = vec![arp_request(), plain_udp()];
    frames.extend(every_opcode(|i| (ipv4(i), None)));
    let send = Opcode::new(Transport::Rc, Kind::SendOnly).expect("RC SEND_ONLY exists");
    for (i, port) in [(100, 53), (101, 69)] {
        let mut repr = packet(i, send, ipv4(i), None);
        if let NetworkRepr::Ipv4 { udp_src_port, .. } = &mut repr.network {
            *udp_src_port = port;
        }
        frames.push(emit(&repr));
    }
    frames
}

/// SEND_ONLY with payloads of 0 to 9 bytes and WRITE_ONLY with 1021 to 1027, over IPv4 and
/// IPv6, then a short frame carrying Ethernet's minimum-size padding after its ICRC.
fn padding() -> Vec<Vec<u8>> {
    let send = Opcode::new(Transport::Rc, Kind::SendOnly).expect("RC SEND_ONLY exists");
    let write = Opcode::new(Transport::Uc, Kind::WriteOnly).expect("UC WRITE_ONLY exists");
    let mut frames = Vec::new();
    let lengths = (0..=9)
        .map(|len| (send, len))
        .chain((1021..=1027).map(|len| (write, len)));
    for (i, (op, len)) in lengths.enumerate() {
        for network in [ipv4(i), ipv6(i)] {
            let mut repr = packet(i, op, network, None);
            repr.payload_len = len;
            if let Some(r) = &mut repr.ext.reth {
                r.dma_len = len as u32;
            }
            frames.push(emit(&repr));
        }
    }
    let mut short = packet(40, send, ipv4(40), None);
    short.payload_len = 0;
    let mut frame = emit(&short);
    frame.resize(60, 0);
    frames.push(frame);
    frames
}

/// ACKNOWLEDGE with every kind of syndrome: ACKs with credit counts, RNR NAKs with timers, every
/// NAK code, and the reserved kind and bit.
fn aeth_syndromes() -> Vec<Vec<u8>> {
    let ack = Opcode::new(Transport::Rc, Kind::Acknowledge).expect("RC ACKNOWLEDGE exists");
    let syndromes = [0u8, 1, 5, 0x1e, 0x1f]
        .into_iter()
        .map(|credits| Syndrome::Ack { credits })
        .chain(
            [0u8, 1, 14, 31]
                .into_iter()
                .map(|timer| Syndrome::RnrNak { timer }),
        )
        .chain((0..=4).map(|code| Syndrome::Nak(NakCode(code))))
        .chain([0x45u8, 0x9f].into_iter().map(Syndrome::Reserved));
    syndromes
        .enumerate()
        .map(|(i, syndrome)| {
            let mut repr = packet(i, ack, ipv4(i), None);
            repr.ext.aeth = Some(aeth::Repr {
                syndrome,
                msn: 1000 + i as u32,
            });
            emit(&repr)
        })
        .collect()
}

/// The GID of an IPv4 address, as RoCE forms it: `::ffff:a.b.c.d`.
fn mapped(ip: Ipv4Address) -> Ipv6Address {
    ip.to_ipv6_mapped()
}

/// The IPv4 endpoints of the CM captures (the Soft-RoCE guests' addresses).
const CM_ACTIVE: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
const CM_PASSIVE: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);

/// The CM frame that travels over IPv6 (the REQ with an IPv6 RDMA CM header); the others go
/// over IPv4.
const CM_OVER_IPV6: usize = 6;

fn cm_network(i: usize, from_active: bool) -> NetworkRepr {
    if i == CM_OVER_IPV6 {
        return NetworkRepr::Ipv6 {
            src: gid(1),
            dst: gid(2),
            traffic_class: 0,
            flow_label: 0x12345,
            hop_limit: 64,
            udp_src_port: 0xc000 + i as u16,
        };
    }
    let (src, dst) = if from_active {
        (CM_ACTIVE, CM_PASSIVE)
    } else {
        (CM_PASSIVE, CM_ACTIVE)
    };
    NetworkRepr::Ipv4 {
        src,
        dst,
        dscp: 0,
        ecn: 0,
        ident: 0x100 + i as u16,
        ttl: 64,
        udp_src_port: 0xc000 + i as u16,
    }
}

/// A primary path whose every field has a value of its own, so a decoder that reads one from
/// the wrong bits disagrees.
fn cm_path(local: Ipv6Address, remote: Ipv6Address, i: u32) -> Path {
    Path {
        local_lid: 0xffff,
        remote_lid: 0xfffe - i as u16,
        local_gid: local,
        remote_gid: remote,
        flow_label: 0x1_2345 + i,
        packet_rate: 0x25,
        traffic_class: 0x60 + i as u8,
        hop_limit: 64,
        sl: 5,
        subnet_local: true,
        local_ack_timeout: 18,
    }
}

fn cm_req(i: u32, service_id: u64, private_data: PrivateData<92>, paths: (Path, Path)) -> Message {
    Message::Req(cm::req::Repr {
        local_comm_id: 0x1a2b_3c00 + i,
        service_id,
        local_ca_guid: 0x5054_00ff_fe4d_0002,
        local_q_key: 0x0101_0000 + i,
        local_qpn: 0x11 + i,
        responder_resources: 3,
        local_eecn: 0x00_0102,
        initiator_depth: 5,
        remote_eecn: 0x00_0304,
        remote_cm_response_timeout: 20,
        transport: ServiceType::Uc,
        end_to_end_flow_control: true,
        starting_psn: 0x4a_bcde + i,
        local_cm_response_timeout: 19,
        retry_count: 6,
        partition_key: 0xffff,
        path_mtu: 3,
        rdc_exists: true,
        rnr_retry_count: 5,
        max_cm_retries: 15,
        srq: true,
        extended_transport_type: 2,
        primary_path: paths.0,
        alternate_path: paths.1,
        sap_supported: true,
        private_data,
    })
}

/// Every CM message a RoCE handshake uses, in MADs on QP1, with every field set: a REQ over
/// IPv4 with the RDMA CM's IP header, MRA, REP, RTU, DREQ, DREP; a REQ with an IPv6 RDMA CM
/// header and one whose service ID is not the RDMA CM's; REJs with three reasons; SIDR_REQ and
/// SIDR_REP; and two MADs that are not messages this decoder reads field by field (a LAP, and a
/// ClassPortInfo Get).
fn cm_messages() -> Vec<Vec<u8>> {
    let ipv4_hdr = cma::Repr {
        version: cma::VERSION,
        src_port: 0xd431,
        src: IpAddress::Ipv4(CM_ACTIVE),
        dst: IpAddress::Ipv4(CM_PASSIVE),
    };
    let ipv6_hdr = cma::Repr {
        version: 0x12,
        src_port: 0x8001,
        src: IpAddress::Ipv6(gid(1)),
        dst: IpAddress::Ipv6(gid(2)),
    };
    let user: Vec<u8> = (1..=56).collect();
    let v4_path = cm_path(mapped(CM_ACTIVE), mapped(CM_PASSIVE), 0);
    let alternate = cm_path(gid(3), gid(4), 1);
    let tcp_7174 = PortSpace::Tcp.service_id(7174);
    let comm = |i: u32| 0x1a2b_3c00 + i;
    let rej = |i: u32, kind, reason, ari: &[u8]| {
        Message::Rej(cm::rej::Repr {
            local_comm_id: 0x5e00_0000 + i,
            remote_comm_id: comm(i),
            message_rejected: kind,
            reason,
            ari: PrivateData::from_slice(ari).expect("fits"),
            ari_len: ari.len() as u8,
            private_data: PrivateData::from_slice(b"rejected").expect("fits"),
        })
    };
    let messages: Vec<(bool, Message)> = vec![
        (
            true,
            cm_req(
                0,
                tcp_7174,
                ipv4_hdr.private_data(&user).expect("fits"),
                (v4_path, Path::default()),
            ),
        ),
        (
            false,
            Message::Mra(cm::mra::Repr {
                local_comm_id: 0x5e00_0000,
                remote_comm_id: comm(0),
                message_mraed: MessageKind::Req,
                service_timeout: 22,
                private_data: PrivateData::from_slice(b"wait").expect("fits"),
            }),
        ),
        (
            false,
            Message::Rep(cm::rep::Repr {
                local_comm_id: 0x5e00_0000,
                remote_comm_id: comm(0),
                local_q_key: 0x0202_0000,
                local_qpn: 0x12,
                local_eecn: 0x00_0506,
                starting_psn: 0x12_3456,
                responder_resources: 4,
                initiator_depth: 6,
                target_ack_delay: 15,
                failover_accepted: 2,
                end_to_end_flow_control: true,
                rnr_retry_count: 6,
                srq: true,
                local_ca_guid: 0x5054_00ff_fe4d_0001,
                private_data: PrivateData::from_slice(&user).expect("fits"),
            }),
        ),
        (
            true,
            Message::Rtu(cm::rtu::Repr {
                local_comm_id: comm(0),
                remote_comm_id: 0x5e00_0000,
                private_data: PrivateData::from_slice(b"ready").expect("fits"),
            }),
        ),
        (
            true,
            Message::Dreq(cm::dreq::Repr {
                local_comm_id: comm(0),
                remote_comm_id: 0x5e00_0000,
                remote_qpn: 0x12,
                private_data: PrivateData::from_slice(b"bye").expect("fits"),
            }),
        ),
        (
            false,
            Message::Drep(cm::drep::Repr {
                local_comm_id: 0x5e00_0000,
                remote_comm_id: comm(0),
                private_data: PrivateData::default(),
            }),
        ),
        (
            true,
            cm_req(
                1,
                PortSpace::Tcp.service_id(18515),
                ipv6_hdr.private_data(&user[..8]).expect("fits"),
                (v4_path, alternate),
            ),
        ),
        (
            true,
            cm_req(
                2,
                0x0002_c903_0000_1234,
                PrivateData::from_slice(&user).expect("fits"),
                (v4_path, Path::default()),
            ),
        ),
        (
            false,
            rej(
                3,
                MessageKind::Req,
                cm::rej::Reason::INVALID_SERVICE_ID,
                &[],
            ),
        ),
        (
            false,
            rej(
                4,
                MessageKind::Rep,
                cm::rej::Reason::CONSUMER_DEFINED,
                &[1, 2, 3, 4, 5],
            ),
        ),
        (
            false,
            rej(5, MessageKind::Other, cm::rej::Reason::INVALID_MTU, &[3]),
        ),
        (
            true,
            Message::SidrReq(cm::sidr_req::Repr {
                request_id: 0x0051_d000,
                partition_key: 0xffff,
                service_id: PortSpace::Udp.service_id(7174),
                private_data: ipv4_hdr.private_data(b"udaddy").expect("fits"),
            }),
        ),
        (
            false,
            Message::SidrRep(cm::sidr_rep::Repr {
                request_id: 0x0051_d000,
                status: cm::sidr_rep::Status::SUCCESS,
                qpn: 0x13,
                service_id: PortSpace::Udp.service_id(7174),
                q_key: 0x0111_1c06,
                additional_info: PrivateData::default(),
                additional_info_len: 0,
                private_data: PrivateData::from_slice(b"resolved").expect("fits"),
            }),
        ),
        (
            false,
            Message::SidrRep(cm::sidr_rep::Repr {
                request_id: 0x0051_d001,
                status: cm::sidr_rep::Status::UNSUPPORTED,
                qpn: 0,
                service_id: PortSpace::Udp.service_id(7175),
                q_key: 0,
                additional_info: PrivateData::from_slice(&[7; 72]).expect("fits"),
                additional_info_len: 72,
                private_data: PrivateData::default(),
            }),
        ),
    ];
    let mut frames: Vec<Vec<u8>> = messages
        .into_iter()
        .enumerate()
        .map(|(i, (from_active, message))| {
            let mad = cm::Repr {
                transaction_id: 0x0000_0001_0000_0a00 + i as u64,
                message,
            };
            cm_frame(i, from_active, |buf| mad.emit(buf))
        })
        .collect();
    // A LAP and a ClassPortInfo Get: CM MADs, but not messages of a RoCE handshake.
    for (i, (method, attribute)) in [
        (mad::Method::SEND, cm::AttributeId::LAP),
        (mad::Method::GET, cm::AttributeId::CLASS_PORT_INFO),
    ]
    .into_iter()
    .enumerate()
    {
        let header = mad::Repr {
            base_version: mad::BASE_VERSION,
            mgmt_class: mad::Class::CM,
            class_version: cm::CLASS_VERSION,
            method,
            status: 0,
            class_specific: 0,
            transaction_id: 0x77 + i as u64,
            attribute_id: attribute.0,
            attribute_modifier: 0x10 * i as u32,
        };
        frames.push(cm_frame(frames.len(), true, |buf| {
            header.emit(&mut mad::Packet::new_unchecked(&mut *buf));
            for (k, b) in buf[mad::HEADER_LEN..].iter_mut().enumerate() {
                *b = k as u8;
            }
        }));
    }
    frames
}

/// The frame that carries one MAD, from one guest's QP1 to the other's.
fn cm_frame(i: usize, from_active: bool, mad: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let (src, dst) = if from_active {
        (mac(2), mac(1))
    } else {
        (mac(1), mac(2))
    };
    let ethernet = EthernetRepr {
        dst,
        src,
        vlan: None,
    };
    let repr = cm::frame_repr(Some(ethernet), cm_network(i, from_active), 0x10 + i as u32);
    let mut buf = vec![0; repr.frame_len()];
    repr.emit_with(&mut buf, mad).expect("a CM frame is valid");
    buf
}

/// An ARP request: other traffic, which the decoder counts and skips.
fn arp_request() -> Vec<u8> {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: mac(1),
        source_protocol_addr: Ipv4Address::new(10, 0, 0, 1),
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: Ipv4Address::new(10, 0, 0, 2),
    };
    let mut frame = vec![0; 14 + arp.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut frame);
    eth.set_dst_addr(EthernetAddress::BROADCAST);
    eth.set_src_addr(mac(1));
    eth.set_ethertype(EthernetProtocol::Arp);
    arp.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
    frame
}

/// A UDP datagram between two ports that are not RoCE's.
fn plain_udp() -> Vec<u8> {
    let payload = b"not RoCE";
    let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
    let udp = UdpRepr {
        src_port: 5000,
        dst_port: 5001,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Udp,
        payload_len: 8 + payload.len(),
        hop_limit: 64,
    };
    let mut frame = vec![0; 14 + 20 + 8 + payload.len()];
    let mut eth = EthernetFrame::new_unchecked(&mut frame);
    eth.set_dst_addr(mac(2));
    eth.set_src_addr(mac(1));
    eth.set_ethertype(EthernetProtocol::Ipv4);
    let caps = ChecksumCapabilities::default();
    let mut packet = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip.emit(&mut packet, &caps);
    udp.emit(
        &mut UdpPacket::new_unchecked(packet.payload_mut()),
        &IpAddress::Ipv4(src),
        &IpAddress::Ipv4(dst),
        payload.len(),
        |p| p.copy_from_slice(payload),
        &caps,
    );
    frame
}

/// The Linux cooked header that stands in for Ethernet in front of an IPv4 packet.
fn cooked_header(link: DataLink, i: usize) -> Vec<u8> {
    let outgoing = if i % 2 == 0 { 4 } else { 0 };
    if link == DataLink::LINUX_SLL2 {
        // Protocol, reserved, interface index, ARPHRD_ETHER, packet type, address length, address.
        let mut h = vec![0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, outgoing, 6];
        h.extend_from_slice(&mac(1).0);
        h.extend_from_slice(&[0, 0]);
        h
    } else {
        // Packet type, ARPHRD_ETHER, address length, address, protocol.
        let mut h = vec![0, outgoing, 0, 1, 0, 6];
        h.extend_from_slice(&mac(1).0);
        h.extend_from_slice(&[0, 0, 0x08, 0x00]);
        h
    }
}

/// The first twelve opcodes over IPv4 in a Linux cooked capture (as `tcpdump -i any` makes).
fn cooked(link: DataLink) -> Vec<u8> {
    let header = PcapHeader {
        datalink: link,
        endianness: Endianness::Little,
        ts_resolution: TsResolution::MicroSecond,
        ..PcapHeader::default()
    };
    let mut writer = PcapWriter::with_header(Vec::new(), header).expect("writing to memory");
    for (i, op) in Opcode::all().take(12).enumerate() {
        let frame = emit(&packet(i, op, ipv4(i), None));
        let mut record = cooked_header(link, i);
        record.extend_from_slice(&frame[14..]);
        let micros = Duration::from_micros(time(i).as_micros() as u64);
        writer
            .write_packet(&PcapPacket::new(micros, record.len() as u32, &record))
            .expect("writing to memory");
    }
    writer.into_writer()
}

/// A pcapng file with two interfaces of different link types and timestamp units: Ethernet in
/// nanoseconds and Linux cooked in microseconds (the pcapng default), packets alternating.
fn two_interfaces() -> Vec<u8> {
    let mut writer =
        PcapNgWriter::with_endianness(Vec::new(), Endianness::Little).expect("writing to memory");
    let mut ethernet = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535);
    ethernet.options = vec![InterfaceDescriptionOption::IfTsResol(9)];
    let cooked = InterfaceDescriptionBlock::new(DataLink::LINUX_SLL, 65535);
    writer
        .write_pcapng_block(ethernet)
        .expect("writing to memory");
    writer
        .write_pcapng_block(cooked)
        .expect("writing to memory");
    for (i, op) in Opcode::all().skip(12).take(12).enumerate() {
        let frame = emit(&packet(i, op, ipv6(i), None));
        let on_cooked = i % 2 == 1;
        let (data, raw_time) = if on_cooked {
            let mut record = cooked_header(DataLink::LINUX_SLL, i);
            // An IPv6 packet: the protocol field says so.
            let protocol_at = record.len() - 2;
            record[protocol_at..].copy_from_slice(&[0x86, 0xdd]);
            record.extend_from_slice(&frame[14..]);
            (record, time(i).as_micros() as u64)
        } else {
            (frame, time(i).as_nanos() as u64)
        };
        writer
            .write_pcapng_block(EnhancedPacketBlock {
                interface_id: u32::from(on_cooked),
                // pcap-file writes the raw count of the interface's units, kept as nanoseconds.
                timestamp: Duration::from_nanos(raw_time),
                original_len: data.len() as u32,
                data: Cow::Borrowed(&data),
                options: vec![],
            })
            .expect("writing to memory");
    }
    writer.into_inner()
}
