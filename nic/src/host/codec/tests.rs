use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::cq::Woken;

fn all_attrs() -> QpAttr {
    QpAttr {
        qp_state: Some(QpState::Rtr),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC),
        qkey: Some(0x1111_1111),
        path_mtu: Some(Mtu::M4096),
        dest_qp_num: Some(0x12),
        rq_psn: Some(0xabcdef),
        sq_psn: Some(7),
        av: Some(AddressVector {
            dmac: Some(EthernetAddress([2, 0, 10, 0, 0, 2])),
            flow_label: 0x12345,
            ..AddressVector::to(Gid::from_ip("10.0.0.2".parse().unwrap()), 1)
        }),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(6),
        min_rnr_timer: Some(12),
        max_rd_atomic: Some(16),
        max_dest_rd_atomic: Some(8),
    }
}

fn requests() -> Vec<Request> {
    vec![
        Request::QueryDevice,
        Request::AllocPd,
        Request::DeallocPd { pd: 3 },
        Request::RegMr {
            pd: 1,
            region: Arc::new(Region::shared(2 << 20).unwrap()),
            offset: 4096,
            len: 1 << 20,
            access: Access::LOCAL_WRITE | Access::REMOTE_READ,
            va: VaBase::At(0xdead_0000),
        },
        Request::RegMr {
            pd: 1,
            region: Arc::new(Region::shared(1).unwrap()),
            offset: 0,
            len: 1,
            access: Access::empty(),
            va: VaBase::Zero,
        },
        Request::DeregMr { lkey: 0x105 },
        Request::CreateCq { entries: 4096 },
        Request::DestroyCq { cq: 2 },
        Request::CreateQp {
            pd: 1,
            qp_type: QpType::Ud,
            send_cq: 0,
            recv_cq: 1,
            cap: QpCap::default(),
            sq_sig_all: true,
        },
        Request::ModifyQp {
            qpn: 0x11,
            attr: all_attrs(),
        },
        Request::ModifyQp {
            qpn: 0x11,
            attr: QpAttr::default(),
        },
        Request::QueryQp { qpn: 0x11 },
        Request::DestroyQp { qpn: 0x11 },
        Request::CreateAh {
            pd: 1,
            av: AddressVector::to(Gid([0xfe; 16]), 0),
        },
        Request::DestroyAh { ah: 9 },
        Request::Counters,
        Request::Disconnect,
        Request::OpenGsi {
            pd: 1,
            send_cq: 2,
            recv_cq: 3,
            cap: QpCap::default(),
        },
        Request::QpStatus { qpn: 0x12 },
        Request::TcpConnect {
            addr: "10.0.0.2:18515".parse().unwrap(),
        },
        Request::TcpConnect {
            addr: "[fe80::1%3]:4791".parse().unwrap(),
        },
        Request::TcpListen { port: 18515 },
        Request::TcpAccept {
            port: 18515,
            timeout: Some(Duration::new(3, 500)),
        },
        Request::TcpAccept {
            port: 1,
            timeout: None,
        },
        Request::TcpUnlisten { port: 18515 },
    ]
}

fn encode_request(request: &Request) -> (Vec<u8>, Vec<OwnedFd>) {
    let mut w = Writer::new();
    put_request(&mut w, request).unwrap();
    let (bytes, fds) = w.finish();
    (bytes, dup(&fds))
}

/// Descriptors as a socket passes them: new ones for the same files.
fn dup(fds: &[std::os::fd::BorrowedFd<'_>]) -> Vec<OwnedFd> {
    fds.iter()
        .map(|fd| fd.try_clone_to_owned().unwrap())
        .collect()
}

fn map_passed(fd: OwnedFd) -> Result<Arc<Region>, VerbsError> {
    Ok(Arc::new(Region::from_fd(
        fd,
        rustix::process::geteuid().as_raw(),
    )?))
}

fn decode_request(bytes: &[u8], fds: Vec<OwnedFd>) -> Result<Request, VerbsError> {
    let mut r = Reader::new(bytes, fds);
    let request = get_request(&mut r, &mut map_passed)?;
    r.finish()?;
    Ok(request)
}

/// The request as text, with a region shown by its length (a decoded one is another mapping
/// of the same memory).
fn shown(request: &Request) -> String {
    match request {
        Request::RegMr {
            pd,
            region,
            offset,
            len,
            access,
            va,
        } => format!("RegMr {pd} {} {offset} {len} {access} {va:?}", region.len()),
        other => format!("{other:?}"),
    }
}

#[test]
fn every_request_round_trips() {
    for request in requests() {
        let (bytes, fds) = encode_request(&request);
        let decoded = decode_request(&bytes, fds).unwrap();
        assert_eq!(shown(&decoded), shown(&request));
    }
}

#[test]
fn every_cut_short_request_is_an_error() {
    for request in requests() {
        let (bytes, fds) = encode_request(&request);
        for end in 0..bytes.len() {
            let fds = fds.iter().map(|f| f.try_clone().unwrap()).collect();
            assert!(
                decode_request(&bytes[..end], fds).is_err(),
                "{request:?} cut at {end} decoded"
            );
        }
    }
}

fn invalid_what(result: Result<Request, VerbsError>) -> String {
    result.unwrap_err().to_string()
}

#[test]
fn out_of_range_codes_are_refused() {
    // Unknown access bit, QP type and MTU.
    let (mut bytes, fds) = encode_request(&requests()[3]);
    let access_at = bytes.len() - 9 - 4;
    bytes[access_at] = 0x40;
    assert!(invalid_what(decode_request(&bytes, fds)).contains("access flags"));
    let (mut bytes, fds) = encode_request(&requests()[8]);
    bytes[5] = 9;
    assert!(invalid_what(decode_request(&bytes, fds)).contains("QP type"));
    assert!(invalid_what(decode_request(&[99], Vec::new())).contains("request 99"));
}

#[test]
fn memory_crosses_as_its_descriptor_and_private_memory_cannot() {
    let shared = Arc::new(Region::shared(4096).unwrap());
    let request = |region| Request::RegMr {
        pd: 1,
        region,
        offset: 0,
        len: 4096,
        access: Access::empty(),
        va: VaBase::Offset,
    };
    let (bytes, fds) = encode_request(&request(Arc::clone(&shared)));
    let Request::RegMr { region, .. } = decode_request(&bytes, fds).unwrap() else {
        panic!("not a registration")
    };
    region.write(10, b"same pages").unwrap();
    let mut seen = [0u8; 10];
    shared.read(10, &mut seen).unwrap();
    assert_eq!(&seen, b"same pages");
    // What the receiver's check refuses is refused.
    let (bytes, fds) = encode_request(&request(shared));
    let mut refuse = |_: OwnedFd| Err(VerbsError::Invalid("not this one".into()));
    let err = get_request(&mut Reader::new(&bytes, fds), &mut refuse).unwrap_err();
    assert_eq!(err.to_string(), "not this one");
    let anonymous = Arc::new(Region::anonymous(4096).unwrap());
    let mut w = Writer::new();
    let private = request(anonymous);
    let err = put_request(&mut w, &private).unwrap_err();
    assert!(err.to_string().contains("only shared memory"), "{err}");
}

/// Encodes, passes the descriptors as a socket would (duplicated), decodes.
fn round_trip_response(response: &Response, attach: &mut Map<'_>) -> Result<Response, VerbsError> {
    let mut w = Writer::new();
    put_response(&mut w, response)?;
    let (bytes, fds) = w.finish();
    let fds = dup(&fds);
    let mut r = Reader::new(&bytes, fds);
    let decoded = get_response(&mut r, attach)?;
    r.finish()?;
    Ok(decoded)
}

fn no_regions(_: OwnedFd) -> Result<Arc<Region>, VerbsError> {
    panic!("nothing to attach")
}

#[test]
fn plain_answers_round_trip() {
    let device = DeviceInfo {
        name: "nic0".into(),
        mac: EthernetAddress([2, 0, 10, 0, 0, 1]),
        gids: vec![Gid([1; 16]), Gid::from_ip("10.0.0.1".parse().unwrap())],
        max_mtu: Mtu::M4096,
        max_qp_wr: 16384,
        max_sge: 32,
        max_inline: 256,
        max_cqe: 65536,
        max_qp_rd_atom: 128,
        limits: Limits {
            max_qp: 7,
            host_max_contexts: 3,
            ..Limits::default()
        },
    };
    let snapshot = Snapshot {
        rx_frames: 5,
        cq_overflows: 9,
        ..Snapshot::default()
    };
    let keys = MrKeys {
        lkey: 0x101,
        rkey: 0x101,
        va: 4096,
        len: 1 << 20,
    };
    let answers = [
        Response::Device(device),
        Response::Pd(4),
        Response::Mr(keys),
        Response::QpAttr(all_attrs()),
        Response::Ah(3),
        Response::Counters(Box::new(snapshot)),
        Response::Done,
        Response::QpStatus(crate::control::QpStatus {
            sends_outstanding: 3,
            reads_outstanding: 1,
            replies_pending: 2,
            receive_in_progress: true,
            retransmit_timer_armed: false,
            rnr_waiting: true,
        }),
        Response::Listening { port: 18515 },
    ];
    for answer in answers {
        let decoded = round_trip_response(&answer, &mut no_regions).unwrap();
        assert_eq!(format!("{decoded:?}"), format!("{answer:?}"));
    }
}

#[test]
fn queue_answers_carry_their_memory_and_the_event_line() {
    let cq_region = Arc::new(Region::device_memory("codec-cq0", 8192).unwrap());
    let qp_region = Arc::new(Region::device_memory("codec-qp17", 65536).unwrap());
    let event = EventLine::new().unwrap();
    let cq = Response::Cq {
        cq: 0,
        ring: RingMap {
            region: Arc::clone(&cq_region),
            geometry: Geometry::new(0, 16, 64),
        },
        event: Arc::clone(&event),
    };
    let mut attached = 0;
    let mut attach = |fd| {
        attached += 1;
        map_passed(fd)
    };
    let Response::Cq {
        cq: 0,
        ring,
        event: received,
    } = round_trip_response(&cq, &mut attach).unwrap()
    else {
        panic!("not a CQ answer")
    };
    assert_eq!(ring.geometry, Geometry::new(0, 16, 64));
    // The same memory and the same eventfd, reached through the received copies.
    ring.region.write(100, b"shared").unwrap();
    let mut seen = [0u8; 6];
    cq_region.read(100, &mut seen).unwrap();
    assert_eq!(&seen, b"shared");
    event.signal();
    assert_eq!(
        received.wait(Some(Duration::from_secs(5)), None),
        Woken::Signalled
    );

    let qp = Response::Qp {
        qpn: 17,
        cap: QpCap::default(),
        sq: RingMap {
            region: Arc::clone(&qp_region),
            geometry: Geometry::new(0, 128, 128),
        },
        rq: RingMap {
            region: qp_region,
            geometry: Geometry::new(16512, 128, 128),
        },
    };
    let Response::Qp {
        qpn: 17, sq, rq, ..
    } = round_trip_response(&qp, &mut attach).unwrap()
    else {
        panic!("not a QP answer")
    };
    assert!(Arc::ptr_eq(&sq.region, &rq.region));
    assert_eq!(rq.geometry.offset, 16512);
    assert_eq!(attached, 2, "the QP's region is mapped once");
}

#[test]
fn a_tcp_stream_crosses_as_a_descriptor_beside_its_peer_address() {
    use std::io::{Read, Write};
    let (ours, engine_end) = UnixStream::pair().unwrap();
    let answer = Response::TcpStream {
        stream: ours,
        peer: "10.0.0.2:18515".parse().unwrap(),
    };
    let Response::TcpStream { stream, peer } =
        round_trip_response(&answer, &mut no_regions).unwrap()
    else {
        panic!("not a TCP stream")
    };
    drop(answer);
    assert_eq!(peer, "10.0.0.2:18515".parse().unwrap());
    // The received descriptor is the same stream: bytes reach the engine's end.
    (&stream).write_all(b"0000:000011").unwrap();
    let mut got = [0u8; 11];
    (&engine_end).read_exact(&mut got).unwrap();
    assert_eq!(&got, b"0000:000011");
}

#[test]
fn rings_in_private_memory_cannot_be_served() {
    let cq = Response::Cq {
        cq: 0,
        ring: RingMap {
            region: Arc::new(Region::anonymous(4096).unwrap()),
            geometry: Geometry::new(0, 16, 64),
        },
        event: EventLine::new().unwrap(),
    };
    let err = round_trip_response(&cq, &mut no_regions).unwrap_err();
    assert!(err.to_string().contains("private memory"), "{err}");
}

#[test]
fn a_missing_event_descriptor_is_an_error() {
    let region = Arc::new(Region::shared(4096).unwrap());
    let cq = Response::Cq {
        cq: 0,
        ring: RingMap {
            region,
            geometry: Geometry::new(0, 16, 64),
        },
        event: EventLine::new().unwrap(),
    };
    let mut w = Writer::new();
    put_response(&mut w, &cq).unwrap();
    let (bytes, _) = w.finish();
    let err = get_response(&mut Reader::new(&bytes, Vec::new()), &mut map_passed).unwrap_err();
    assert!(err.to_string().contains("descriptor 0"), "{err}");
}

#[test]
fn errors_keep_their_kind_or_their_sentence() {
    let errors = [
        VerbsError::NoSuchObject {
            kind: "QP",
            id: 0x11,
        },
        VerbsError::Busy("the completion queue"),
        VerbsError::SendQueueFull(128),
        VerbsError::RecvQueueFull(64),
        VerbsError::DeviceGone { nic: "nic0".into() },
        VerbsError::LimitReached {
            what: "QPs",
            scope: "host",
            limit: 64,
        },
        VerbsError::Busy("the protection domain (a QP uses it)"),
        VerbsError::Invalid("a completion queue holds 1 to 65536 entries, not 0".into()),
        VerbsError::Modify(crate::qp::ModifyError::NoGid(9)),
        VerbsError::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "nobody listens on 10.0.0.2:18515",
        )),
    ];
    for error in errors {
        let mut w = Writer::new();
        put_error(&mut w, &error);
        let (bytes, _) = w.finish();
        let mut r = Reader::new(&bytes, Vec::new());
        let decoded = get_error(&mut r).unwrap();
        r.finish().unwrap();
        assert_eq!(decoded.to_string(), error.to_string());
        if let (VerbsError::Io(sent), VerbsError::Io(got)) = (&error, &decoded) {
            assert_eq!(sent.kind(), got.kind());
        }
        assert_eq!(
            std::mem::discriminant(&decoded) == std::mem::discriminant(&error),
            !matches!(error, VerbsError::Modify(_)),
            "{error:?} became {decoded:?}"
        );
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_request(&bytes, Vec::new());
        let _ = get_error(&mut Reader::new(&bytes, Vec::new()));
        let mut attach = |_: OwnedFd| Err(VerbsError::Invalid("no".into()));
        let _ = get_response(&mut Reader::new(&bytes, Vec::new()), &mut attach);
    }
}
