//! Every message round-trips through emit and parse, its fields land at the offsets of IBTA's
//! tables (checked byte by byte for the fields with bits to place), and a CM MAD travels in the
//! frame `frame_repr` builds.

use super::*;
use crate::cma::{self, PortSpace};
use crate::frame::Frame;
use crate::{EthernetAddress, IpAddress, Ipv4Address, Ipv6Address};

fn path(seed: u8) -> Path {
    Path {
        local_lid: 0xffff,
        remote_lid: 0xfffe,
        local_gid: Ipv6Address::new(0, 0, 0, 0, 0, 0xffff, 0x0a4d, u16::from(seed)),
        remote_gid: Ipv6Address::new(0, 0, 0, 0, 0, 0xffff, 0x0a4d, 0x0001),
        flow_label: 0xabcde,
        packet_rate: 0x3f,
        traffic_class: 0x12,
        hop_limit: 64,
        sl: 0xf,
        subnet_local: true,
        local_ack_timeout: 0x1f,
    }
}

fn req() -> req::Repr {
    let cma = cma::Repr {
        version: cma::VERSION,
        src_port: 0xc001,
        src: IpAddress::Ipv4(Ipv4Address::new(10, 77, 0, 2)),
        dst: IpAddress::Ipv4(Ipv4Address::new(10, 77, 0, 1)),
    };
    req::Repr {
        local_comm_id: 0x1122_3344,
        service_id: PortSpace::Tcp.service_id(7174),
        local_ca_guid: 0x5254_00ff_fe4d_0002,
        local_q_key: 0,
        local_qpn: 0x00_0011,
        responder_resources: 16,
        local_eecn: 0,
        initiator_depth: 16,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport: ServiceType::Rc,
        end_to_end_flow_control: true,
        starting_psn: 0xab_cdef,
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: path(2),
        alternate_path: Path::default(),
        sap_supported: true,
        private_data: cma.private_data(b"rping").unwrap(),
    }
}

fn every_message() -> Vec<Message> {
    vec![
        Message::Req(req()),
        Message::Mra(mra::Repr {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_mraed: MessageKind::Req,
            service_timeout: 23,
            private_data: PrivateData::from_slice(b"mra").unwrap(),
        }),
        Message::Rej(rej::Repr {
            local_comm_id: 3,
            remote_comm_id: 4,
            message_rejected: MessageKind::Rep,
            reason: rej::Reason::INVALID_SERVICE_ID,
            ari: PrivateData::from_slice(&[9, 8, 7]).unwrap(),
            ari_len: 3,
            private_data: PrivateData::from_slice(b"why").unwrap(),
        }),
        Message::Rep(rep::Repr {
            local_comm_id: 5,
            remote_comm_id: 6,
            local_q_key: 7,
            local_qpn: 0x12_3456,
            local_eecn: 0,
            starting_psn: 0x65_4321,
            responder_resources: 4,
            initiator_depth: 3,
            target_ack_delay: 0x1f,
            failover_accepted: 2,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 0x0102_0304_0506_0708,
            private_data: PrivateData::from_slice(&[0xaa; 196]).unwrap(),
        }),
        Message::Rtu(rtu::Repr {
            local_comm_id: 8,
            remote_comm_id: 9,
            private_data: PrivateData::default(),
        }),
        Message::Dreq(dreq::Repr {
            local_comm_id: 10,
            remote_comm_id: 11,
            remote_qpn: 0xfe_dcba,
            private_data: PrivateData::default(),
        }),
        Message::Drep(drep::Repr {
            local_comm_id: 12,
            remote_comm_id: 13,
            private_data: PrivateData::from_slice(&[1; 224]).unwrap(),
        }),
        Message::SidrReq(sidr_req::Repr {
            request_id: 14,
            partition_key: 0xffff,
            service_id: PortSpace::Udp.service_id(7174),
            private_data: PrivateData::from_slice(&[2; 36]).unwrap(),
        }),
        Message::SidrRep(sidr_rep::Repr {
            request_id: 15,
            status: sidr_rep::Status::SUCCESS,
            qpn: 0x00_0042,
            service_id: PortSpace::Udp.service_id(7174),
            q_key: 0x1234_5678,
            additional_info: PrivateData::default(),
            additional_info_len: 0,
            private_data: PrivateData::default(),
        }),
    ]
}

fn emitted(message: Message) -> [u8; MAD_LEN] {
    let mut buf = [0xffu8; MAD_LEN];
    Repr {
        transaction_id: 0x0000_0001_dead_beef,
        message,
    }
    .emit(&mut buf);
    buf
}

#[test]
fn every_message_round_trips() {
    for message in every_message() {
        let buf = emitted(message);
        let packet = mad::Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.mgmt_class(), Class::CM);
        assert_eq!(packet.attribute_id(), message.attribute_id().0);
        let parsed = Repr::parse(&packet).unwrap();
        assert_eq!(parsed.message, message);
        assert_eq!(parsed.transaction_id, 0x0000_0001_dead_beef);
    }
}

#[test]
fn req_fields_sit_where_ibta_table_106_puts_them() {
    let buf = emitted(Message::Req(req()));
    let d = &buf[mad::HEADER_LEN..];
    assert_eq!(
        buf[..4],
        [1, 7, 2, 3],
        "base version, class, class version, method"
    );
    assert_eq!(buf[16..18], [0x00, 0x10], "attribute ID");
    assert_eq!(d[0..4], [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(d[4..8], [0; 4], "reserved");
    assert_eq!(d[8..16], [0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06], "service ID");
    assert_eq!(
        d[32..36],
        [0x00, 0x00, 0x11, 16],
        "QPN, responder resources"
    );
    assert_eq!(d[39], 16, "initiator depth");
    // Remote CM response timeout 20 (10100), RC (00), E2E flow control (1).
    assert_eq!(d[43], 0b1010_0001);
    assert_eq!(d[44..48], [0xab, 0xcd, 0xef, 0b1010_0111]);
    assert_eq!(d[48..52], [0xff, 0xff, 0x37, 0xf0]);
    // Primary path: LIDs, GIDs, then flow label 0xabcde, packet rate 0x3f.
    assert_eq!(d[52..56], [0xff, 0xff, 0xff, 0xfe]);
    assert_eq!(d[56 + 10..56 + 16], [0xff, 0xff, 10, 77, 0, 2]);
    assert_eq!(d[88..92], [0xab, 0xcd, 0xe0, 0x3f]);
    assert_eq!(d[92..96], [0x12, 64, 0xf8, 0xf8]);
    assert_eq!(d[96..139], [0; 43], "no alternate path");
    assert_eq!(d[139], 0x04, "SAP supported");
    assert_eq!(d[140..144], [0x00, 0x40, 0xc0, 0x01], "the RDMA CM header");
    assert_eq!(&d[176..181], b"rping");
}

#[test]
fn bit_fields_of_the_other_messages_sit_where_the_tables_put_them() {
    let d = |m| emitted(m)[mad::HEADER_LEN..].to_vec();
    let all = every_message();
    let mra = d(all[1]);
    assert_eq!(mra[8..10], [0x00, 23 << 3]);
    assert_eq!(&mra[10..13], b"mra");
    let rej = d(all[2]);
    assert_eq!(rej[8..12], [0x40, 3 << 1, 0, 8]);
    assert_eq!(rej[12..15], [9, 8, 7]);
    assert_eq!(&rej[84..87], b"why");
    let rep = d(all[3]);
    assert_eq!(rep[12..16], [0x12, 0x34, 0x56, 0]);
    assert_eq!(rep[20..28], [0x65, 0x43, 0x21, 0, 4, 3, 0xfd, 0xf0]);
    assert_eq!(rep[28..36], [1, 2, 3, 4, 5, 6, 7, 8]);
    let dreq = d(all[5]);
    assert_eq!(dreq[8..12], [0xfe, 0xdc, 0xba, 0]);
    let sidr_req = d(all[7]);
    assert_eq!(
        sidr_req[4..16],
        [0xff, 0xff, 0, 0, 0, 0, 0, 0, 1, 0x11, 0x1c, 0x06]
    );
    let sidr_rep = d(all[8]);
    assert_eq!(sidr_rep[4..12], [0, 0, 0, 0, 0, 0, 0x42, 0]);
    assert_eq!(sidr_rep[20..24], [0x12, 0x34, 0x56, 0x78]);
}

#[test]
fn other_classes_methods_and_attributes_are_refused() {
    let good = emitted(Message::Rtu(rtu::Repr::default()));
    for (at, value) in [(0, 2), (1, 0x04), (2, 1), (3, 0x81), (17, 0x19), (17, 0x01)] {
        let mut bad = good;
        bad[at] = value;
        assert!(
            Repr::parse(&mad::Packet::new_unchecked(&bad[..])).is_err(),
            "byte {at} = {value:#x}"
        );
    }
    assert!(Repr::parse(&mad::Packet::new_unchecked(&good[..MAD_LEN - 1])).is_err());
}

#[test]
fn cm_times_are_4096_ns_times_a_power_of_two() {
    assert_eq!(timeout(0), core::time::Duration::from_nanos(4096));
    // Linux's CMA_CM_RESPONSE_TIMEOUT, 20: about 4.3 s.
    assert_eq!(timeout(20).as_millis(), 4294);
    assert_eq!(timeout(31), timeout(31 + 32));
}

#[test]
fn private_data_that_does_not_fit_is_refused() {
    assert!(PrivateData::<4>::from_slice(&[1; 5]).is_err());
    let data = PrivateData::<4>::from_slice(&[1, 0, 2]).unwrap();
    assert_eq!(data.trimmed(), [1, 0, 2]);
    assert_eq!(format!("{data:?}"), "PrivateData<4>[010002]");
}

#[test]
fn a_cm_mad_travels_as_a_ud_send_only_to_qp1() {
    let network = NetworkRepr::Ipv4 {
        src: Ipv4Address::new(10, 77, 0, 2),
        dst: Ipv4Address::new(10, 77, 0, 1),
        dscp: 0,
        ecn: 0,
        ident: 1,
        ttl: 64,
        udp_src_port: 0xc000,
    };
    let ethernet = EthernetRepr {
        dst: EthernetAddress([0x52, 0x54, 0, 0x4d, 0, 1]),
        src: EthernetAddress([0x52, 0x54, 0, 0x4d, 0, 2]),
        vlan: None,
    };
    let cm = Repr {
        transaction_id: 7,
        message: Message::Req(req()),
    };
    let repr = frame_repr(Some(ethernet), network, 5);
    let mut buf = vec![0u8; repr.frame_len()];
    let len = repr.emit_with(&mut buf, |mad| cm.emit(mad)).unwrap();
    let frame = Frame::parse(&buf[..len]).unwrap();
    assert!(frame.icrc().is_ok());
    assert_eq!(frame.repr.bth.opcode.value(), 0x64);
    assert_eq!(frame.repr.bth.dest_qp, 1);
    assert_eq!(frame.repr.bth.p_key, 0xffff);
    assert_eq!(
        frame.repr.ext.deth,
        Some(deth::Repr {
            q_key: 0x8001_0000,
            src_qp: 1
        })
    );
    let parsed = Repr::parse(&mad::Packet::new_checked(frame.payload()).unwrap()).unwrap();
    assert_eq!(parsed, cm);
    assert_eq!(parse_frame(&frame), Some(Ok(cm)));

    // The same datagram to QP 2 is not the CM's; with another Q_Key, QP1 must drop it.
    let mut other_qp = repr;
    other_qp.bth.dest_qp = 2;
    let len = other_qp.emit_with(&mut buf, |mad| cm.emit(mad)).unwrap();
    assert_eq!(parse_frame(&Frame::parse(&buf[..len]).unwrap()), None);
    let mut other_key = repr;
    other_key.ext.deth = Some(deth::Repr {
        q_key: 0x1234,
        src_qp: 1,
    });
    let len = other_key.emit_with(&mut buf, |mad| cm.emit(mad)).unwrap();
    assert!(matches!(
        parse_frame(&Frame::parse(&buf[..len]).unwrap()),
        Some(Err(Error::Malformed { field: "Q_Key", .. }))
    ));
}
