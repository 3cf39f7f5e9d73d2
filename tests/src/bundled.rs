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
use roce_wire::{
    atomic_ack_eth, atomic_eth, bth, deth, feth, ieth, immdt, reth, EthernetAddress, EthernetRepr,
    Extensions, FrameRepr, Ipv4Address, Ipv6Address, Kind, NetworkRepr, Opcode, Transport, VlanTag,
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
