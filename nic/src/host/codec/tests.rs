//! The codec: every message round-trips, descriptors cross beside the bytes and are matched to
//! the fields that name them, and bytes that are no message are a clean error within a bounded
//! allocation, never a panic.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use proptest::prelude::*;
use roce_hostmem::{Access, MrKeys, VaBase};
use roce_wire::EthernetAddress;

use super::*;
use crate::control::{DeviceInfo, QpStatus, Request, Response, RingMap};
use crate::counters::Snapshot;
use crate::cq::{EventLine, Woken};
use crate::host::fdpass::{self, Limit, MAX_MESSAGE};
use crate::host::messages::{self, greeting_version, FromNic, ToNic, Welcome, PROTOCOL_VERSION};
use crate::host::wire_error::WireError;
use crate::limits::Limits;
use crate::ring::Geometry;
use crate::types::{AddressVector, Gid, Mtu, QpAttr, QpCap, QpState, QpType};

// ---- allocation, measured per thread ---------------------------------------------------------

/// Counts the bytes the measuring thread holds, and their peak.
struct Counting;

thread_local! {
    /// (measuring, bytes held now, peak) of this thread.
    static HELD: Cell<(bool, isize, isize)> = const { Cell::new((false, 0, 0)) };
}

fn note(delta: isize) {
    let _ = HELD.try_with(|held| {
        let (on, now, peak) = held.get();
        if on {
            held.set((on, now + delta, peak.max(now + delta)));
        }
    });
}

// SAFETY: forwards every call to the system allocator; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        // SAFETY: the caller's layout, as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        // SAFETY: allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        // SAFETY: allocated by `System` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The most bytes `f` held at once on this thread.
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    HELD.set((true, 0, 0));
    let result = f();
    let (_, _, peak) = HELD.replace((false, 0, 0));
    (result, peak as usize)
}

/// What decoding any message may allocate: its strings (at most its own size, so the largest
/// message's) and its lists (each with a cap of a few KiB).
const DECODE_BUDGET: usize = MAX_MESSAGE + (16 << 10);

// ---- samples of every message -----------------------------------------------------------------

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
        Request::OpenGsi {
            pd: 1,
            send_cq: 2,
            recv_cq: 3,
            cap: QpCap::default(),
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
        Request::QpStatus { qpn: 0x12 },
        Request::DestroyQp { qpn: 0x11 },
        Request::CreateAh {
            pd: 1,
            av: AddressVector::to(Gid([0xfe; 16]), 0),
        },
        Request::DestroyAh { ah: 9 },
        Request::Counters,
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
        Request::Disconnect,
        Request::BindHost { host: 7 },
        Request::CmListen {
            addr: "0.0.0.0:7174".parse().unwrap(),
        },
        Request::CmConnect {
            qpn: 0x11,
            dst: "10.0.0.1:7174".parse().unwrap(),
            param: crate::cm::ConnParam {
                private_data: b"hello".to_vec(),
                responder_resources: 4,
                initiator_depth: 2,
                retry_count: 6,
                rnr_retry_count: 7,
            },
        },
        Request::CmAccept {
            id: 0x1234_5678,
            qpn: 0x12,
            param: crate::cm::ConnParam::default(),
        },
        Request::CmReject {
            id: 3,
            private_data: vec![1, 2, 3],
        },
        Request::CmDisconnect { id: 3 },
        Request::CmDestroyId { id: 3 },
        Request::CmGetEvent {
            timeout: Some(Duration::from_millis(1500)),
        },
        Request::CmGetEvent { timeout: None },
        Request::CmListenUdp {
            addr: "10.0.0.1:7174".parse().unwrap(),
        },
        Request::CreateSrq {
            pd: 3,
            max_wr: 500,
            max_sge: 1,
        },
        Request::ModifySrq {
            srq: 1,
            srq_limit: 10,
        },
        Request::QuerySrq { srq: 1 },
        Request::DestroySrq { srq: 1 },
        Request::CreateQpWithSrq {
            pd: 3,
            qp_type: QpType::Rc,
            send_cq: 1,
            recv_cq: 2,
            srq: 1,
            cap: QpCap::default(),
            sq_sig_all: false,
        },
        Request::CmEventLine,
    ]
}

fn device_info() -> DeviceInfo {
    DeviceInfo {
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
        pkeys: "0x7fff,0x8001".parse().unwrap(),
    }
}

/// Every answer without descriptors.
fn plain_answers() -> Vec<Response> {
    vec![
        Response::Device(device_info()),
        Response::Pd(4),
        Response::Mr(MrKeys {
            lkey: 0x101,
            rkey: 0x101,
            va: 4096,
            len: 1 << 20,
        }),
        Response::QpAttr(all_attrs()),
        Response::QpStatus(QpStatus {
            sends_outstanding: 3,
            reads_outstanding: 1,
            replies_pending: 2,
            receive_in_progress: true,
            retransmit_timer_armed: false,
            rnr_waiting: true,
        }),
        Response::Ah(3),
        Response::Counters(Box::new(Snapshot {
            rx_frames: 5,
            cq_overflows: 9,
            ..Snapshot::default()
        })),
        Response::Listening { port: 18515 },
        Response::Done,
        Response::CmId(0xdead_beef),
        Response::SrqAttr(crate::srq::SrqAttr {
            max_wr: 512,
            max_sge: 1,
            srq_limit: 10,
        }),
        Response::CmEvent(Box::new(crate::cm::CmEvent {
            kind: crate::cm::CmEventKind::Rejected { reason: 8 },
            id: 7,
            listen_id: Some(3),
            local: "10.0.0.2:40000".parse().unwrap(),
            peer: "[fe80::1]:7174".parse().unwrap(),
            private_data: vec![9; 148],
            responder_resources: 1,
            initiator_depth: 1,
            peer_qpn: 0x11,
            q_key: 0x0123_4567,
        })),
    ]
}

fn cq_answer(region: Arc<Region>, event: Arc<EventLine>) -> Response {
    Response::Cq {
        cq: 0,
        ring: RingMap {
            region,
            geometry: Geometry::new(0, 16, 64),
        },
        event,
    }
}

fn qp_answer(region: Arc<Region>) -> Response {
    Response::Qp {
        qpn: 17,
        cap: QpCap::default(),
        sq: RingMap {
            region: Arc::clone(&region),
            geometry: Geometry::new(0, 128, 128),
        },
        rq: RingMap {
            region,
            geometry: Geometry::new(16512, 128, 128),
        },
    }
}

/// Every answer, those with descriptors too.
fn answers() -> Vec<Response> {
    let mut all = plain_answers();
    all.push(cq_answer(
        Arc::new(Region::shared(8192).unwrap()),
        EventLine::new().unwrap(),
    ));
    all.push(qp_answer(Arc::new(Region::shared(65536).unwrap())));
    all.push(Response::Srq {
        srq: 1,
        attr: crate::srq::SrqAttr {
            max_wr: 512,
            max_sge: 1,
            srq_limit: 0,
        },
        ring: RingMap {
            region: Arc::new(Region::shared(65536).unwrap()),
            geometry: Geometry::new(0, 512, 64),
        },
    });
    all.push(Response::CmEventLine {
        line: EventLine::new().unwrap(),
    });
    all.push(Response::TcpStream {
        stream: UnixStream::pair().unwrap().0,
        peer: "10.0.0.2:18515".parse().unwrap(),
    });
    all
}

fn errors() -> Vec<VerbsError> {
    vec![
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
    ]
}

// ---- helpers ------------------------------------------------------------------------------------

/// Descriptors as a socket passes them: new ones for the same files.
fn passed(encoded: &Encoded) -> Received {
    Received {
        bytes: encoded.bytes.clone(),
        fds: encoded
            .fds
            .iter()
            .map(|fd| fd.try_clone().unwrap())
            .collect(),
    }
}

fn map_passed(fd: OwnedFd) -> Result<Arc<Region>, VerbsError> {
    Ok(Arc::new(Region::from_fd(
        fd,
        rustix::process::geteuid().as_raw(),
    )?))
}

fn no_regions(_: OwnedFd) -> Result<Arc<Region>, VerbsError> {
    Err(VerbsError::Invalid("no memory expected here".into()))
}

fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> T {
    decode(passed(&encode(value).unwrap()), map_passed).unwrap()
}

fn bytes(received: &[u8]) -> Received {
    Received {
        bytes: received.to_vec(),
        fds: Vec::new(),
    }
}

fn malformed<T: DeserializeOwned + fmt::Debug>(received: Received) -> Malformed {
    match decode::<T>(received, map_passed) {
        Err(DecodeError::Malformed(m)) => m,
        other => panic!("not malformed: {other:?}"),
    }
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

// ---- round trips ----------------------------------------------------------------------------------

#[test]
fn every_request_round_trips_inside_its_call() {
    for request in requests() {
        let call = ToNic::Call {
            client: 0x1_0000_0001,
            request,
        };
        let ToNic::Call { client, request } = round_trip(&call) else {
            panic!("not a call")
        };
        let ToNic::Call { request: sent, .. } = &call else {
            unreachable!()
        };
        assert_eq!(client, 0x1_0000_0001);
        assert_eq!(shown(&request), shown(sent));
    }
}

#[test]
fn every_plain_answer_round_trips() {
    for answer in plain_answers() {
        // Sent as the NIC sends it (borrowed), read as a host reads it.
        let sent = encode(&FromNic::Answer(Ok::<_, WireError>(&answer))).unwrap();
        let FromNic::Answer(Ok(decoded)) = decode::<FromNic>(passed(&sent), no_regions).unwrap()
        else {
            panic!("not an answer")
        };
        assert_eq!(format!("{decoded:?}"), format!("{answer:?}"));
    }
}

#[test]
fn errors_keep_their_kind_or_their_sentence() {
    for error in errors() {
        let message = FromNic::<Response>::Answer(Err(WireError::from(&error)));
        let FromNic::Answer(Err(wire)) = round_trip(&message) else {
            panic!("not an error")
        };
        let decoded = VerbsError::from(wire);
        assert_eq!(decoded.to_string(), error.to_string());
        assert_eq!(decoded.errno(), error.errno(), "{error:?}");
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

/// The variants serde knows of an enum, in wire order (it hands them to `deserialize_enum`).
fn variants<T: DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{self, Visitor};

    struct Names(Cell<&'static [&'static str]>);

    impl<'de> serde::Deserializer<'de> for &Names {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not an enum"))
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.set(variants);
            Err(de::Error::custom("names taken"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
            ignored_any
        }
    }

    let names = Names(Cell::new(&[]));
    let _ = T::deserialize(&names);
    names.0.get()
}

/// A new request or answer fails here until the samples above have one of it (and then the pin
/// below asks for a new protocol version).
#[test]
fn every_request_and_answer_has_a_sample() {
    fn check(kind: &str, names: &[&str], samples: Vec<Encoded>) {
        assert!(names.len() > 8 && names.len() < 128, "{kind}: {names:?}");
        for (tag, name) in names.iter().enumerate() {
            assert!(
                samples.iter().any(|s| usize::from(s.bytes[0]) == tag),
                "no sample of {kind}::{name}: add one to this file's samples"
            );
        }
    }
    let requests = requests().iter().map(|r| encode(r).unwrap()).collect();
    check("Request", variants::<Request>(), requests);
    let answers = answers().iter().map(|a| encode(a).unwrap()).collect();
    check("Response", variants::<Response>(), answers);
}

// ---- descriptors beside the bytes --------------------------------------------------------------------

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
    let encoded = encode(&request(Arc::clone(&shared))).unwrap();
    assert_eq!(encoded.fds.len(), 1);
    let Request::RegMr { region, .. } = decode(passed(&encoded), map_passed).unwrap() else {
        panic!("not a registration")
    };
    region.write(10, b"same pages").unwrap();
    let mut seen = [0u8; 10];
    shared.read(10, &mut seen).unwrap();
    assert_eq!(&seen, b"same pages");
    // What the receiver's check refuses is refused, as that refusal, not as a malformed message.
    let refuse = |_: OwnedFd| Err(VerbsError::Invalid("not this one".into()));
    match decode::<Request>(passed(&encoded), refuse) {
        Err(DecodeError::Refused(e)) => assert_eq!(e.to_string(), "not this one"),
        other => panic!("{other:?}"),
    }
    let private = request(Arc::new(Region::anonymous(4096).unwrap()));
    let err = encode(&private).unwrap_err();
    assert!(err.to_string().contains("only shared memory"), "{err}");
}

#[test]
fn queue_answers_carry_their_memory_and_the_event_line() {
    let cq_region = Arc::new(Region::device_memory("codec-cq0", 8192).unwrap());
    let event = EventLine::new().unwrap();
    let mapped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counting = |mapped: &Arc<std::sync::atomic::AtomicUsize>| {
        let mapped = Arc::clone(mapped);
        move |fd| {
            mapped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            map_passed(fd)
        }
    };
    let cq = cq_answer(Arc::clone(&cq_region), Arc::clone(&event));
    let encoded = encode(&FromNic::Answer(Ok::<_, WireError>(&cq))).unwrap();
    assert_eq!(encoded.fds.len(), 2, "the ring's memory and the event line");
    let FromNic::Answer(Ok(Response::Cq {
        cq: 0,
        ring,
        event: received,
    })) = decode::<FromNic>(passed(&encoded), counting(&mapped)).unwrap()
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

    let qp = qp_answer(Arc::new(
        Region::device_memory("codec-qp17", 65536).unwrap(),
    ));
    let encoded = encode(&qp).unwrap();
    assert_eq!(encoded.fds.len(), 1, "one region named twice crosses once");
    let Response::Qp {
        qpn: 17, sq, rq, ..
    } = decode(passed(&encoded), counting(&mapped)).unwrap()
    else {
        panic!("not a QP answer")
    };
    assert!(Arc::ptr_eq(&sq.region, &rq.region));
    assert_eq!(rq.geometry.offset, 16512);
    assert_eq!(mapped.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[test]
fn a_tcp_stream_crosses_as_a_descriptor_beside_its_peer_address() {
    use std::io::{Read, Write};
    let (ours, engine_end) = UnixStream::pair().unwrap();
    let answer = Response::TcpStream {
        stream: ours,
        peer: "[fe80::2%5]:18515".parse().unwrap(),
    };
    let Response::TcpStream { stream, peer } = round_trip(&answer) else {
        panic!("not a TCP stream")
    };
    drop(answer);
    assert_eq!(peer, "[fe80::2%5]:18515".parse().unwrap());
    // The received descriptor is the same stream: bytes reach the engine's end.
    (&stream).write_all(b"0000:000011").unwrap();
    let mut got = [0u8; 11];
    (&engine_end).read_exact(&mut got).unwrap();
    assert_eq!(&got, b"0000:000011");
}

#[test]
fn an_answer_that_cannot_cross_arrives_as_the_error_saying_why() {
    let (nic, host) = UnixStream::pair().unwrap();
    let private = cq_answer(
        Arc::new(Region::anonymous(4096).unwrap()),
        EventLine::new().unwrap(),
    );
    messages::answer(&nic, &Ok(private), Limit::default()).unwrap();
    let received = fdpass::recv(&host, Limit::default()).unwrap().unwrap();
    let FromNic::Answer(Err(e)) = decode::<FromNic>(received, no_regions).unwrap() else {
        panic!("not an error")
    };
    assert!(VerbsError::from(e)
        .to_string()
        .contains("only shared memory"));
}

#[test]
fn descriptors_are_matched_to_the_fields_that_name_them() {
    let cq = cq_answer(
        Arc::new(Region::shared(4096).unwrap()),
        EventLine::new().unwrap(),
    );
    let encoded = encode(&cq).unwrap();
    // Named but not sent.
    let m = malformed::<Response>(bytes(&encoded.bytes));
    assert!(m.reason.contains("descriptor 0"), "{m}");
    // Sent but not named.
    let mut extra = passed(&encoded);
    extra.fds.push(
        EventLine::new()
            .unwrap()
            .as_fd()
            .try_clone_to_owned()
            .unwrap(),
    );
    let m = malformed::<Response>(extra);
    assert!(
        m.reason
            .contains("1 descriptors came with it that it does not name"),
        "{m}"
    );
    // One descriptor named as two things: the ring's memory and the event line.
    let mut twice = passed(&encoded);
    let event_index = twice.bytes.len() - 1;
    twice.bytes[event_index] = 0;
    twice.fds.pop();
    let m = match decode::<Response>(twice, map_passed) {
        Err(DecodeError::Malformed(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(m.reason.contains("descriptor 0"), "{m}");
}

// ---- malformed input ------------------------------------------------------------------------------

#[test]
fn every_cut_short_message_is_malformed() {
    fn check<T: DeserializeOwned + fmt::Debug>(message: Encoded) {
        for end in 0..message.bytes.len() {
            let mut cut = passed(&message);
            cut.bytes.truncate(end);
            let m = malformed::<T>(cut);
            assert!(m.reason.contains("ends early"), "{m}");
        }
    }
    for request in requests() {
        check::<Request>(encode(&request).unwrap());
    }
    for answer in answers() {
        check::<Response>(encode(&answer).unwrap());
    }
}

#[test]
fn out_of_range_codes_are_refused_where_they_are() {
    // A registration with an access bit no verbs knows, spelled out field by field: tag 3,
    // pd 1, descriptor 0, offset 0, length 4096, access 0x40, VA base 0.
    let region = Region::shared(4096).unwrap();
    let bytes_of = |access: u32| postcard::to_stdvec(&(3u8, 1u8, 0u8, 0u8, 4096u16, access, 0u8));
    let with_fd = |access| Received {
        bytes: bytes_of(access).unwrap(),
        fds: vec![region.fd().unwrap().try_clone_to_owned().unwrap()],
    };
    // The spelling is right: with known bits it is a registration.
    let Request::RegMr { access, len, .. } = decode(with_fd(6), map_passed).unwrap() else {
        panic!("not a registration")
    };
    assert_eq!(
        (access, len),
        (Access::REMOTE_WRITE | Access::REMOTE_READ, 4096)
    );
    let m = match decode::<Request>(with_fd(0x40), map_passed) {
        Err(DecodeError::Malformed(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(m.reason.contains("it does not know"), "{m}");
    assert_eq!(m.at, 7, "{m}");
    // A QP type and a request tag no one knows.
    let mut create = encode(&requests()[8]).unwrap().bytes;
    assert_eq!(create[..3], [7, 1, 2], "CreateQp, pd 1, UD");
    create[2] = 9;
    assert_eq!(malformed::<Request>(bytes(&create)).at, 3);
    let m = malformed::<Request>(bytes(&[99]));
    assert!(m.to_string().contains("not valid"), "{m}");
    // Trailing bytes.
    let m = malformed::<Request>(bytes(&[0, 0]));
    assert!(m.reason.contains("1 bytes follow its end"), "{m}");
}

/// A device description claiming more GIDs than the cap, or than the message holds.
#[test]
fn lists_over_their_cap_are_refused_before_they_are_allocated() {
    let mut info = device_info();
    info.gids = vec![Gid([7; 16]); crate::control::MAX_GIDS + 1];
    let encoded = encode(&Response::Device(info)).unwrap();
    let (m, peak) = peak_of(|| malformed::<Response>(passed(&encoded)));
    assert!(m.reason.contains("longer than 64"), "{m}");
    assert!(peak < 4096, "{peak} bytes for a refused list");
    // A claimed length far beyond the message: tag 0, an empty name, a MAC, 2^32 - 1 GIDs.
    let mut lying = vec![0, 0, 2, 0, 10, 0, 0, 1];
    lying.extend([0xff, 0xff, 0xff, 0xff, 0x0f]);
    lying.extend([1; 64]);
    let (_, peak) = peak_of(|| malformed::<Response>(bytes(&lying)));
    assert!(peak < 4096, "{peak} bytes for a lying length");
    // The same for a string.
    let (_, peak) = peak_of(|| malformed::<Response>(bytes(&[0, 0xff, 0xff, 0xff, 0xff, 0x0f])));
    assert!(peak < 4096, "{peak} bytes for a lying string length");
}

/// Every encoding the tests know, for the fuzzing below and the pin.
fn sample_encodings() -> Vec<Encoded> {
    let mut all: Vec<Encoded> = requests()
        .into_iter()
        .map(|request| encode(&ToNic::Call { client: 1, request }).unwrap())
        .collect();
    for answer in answers() {
        all.push(encode(&FromNic::Answer(Ok::<_, WireError>(&answer))).unwrap());
    }
    for error in errors() {
        all.push(encode(&FromNic::<Response>::Answer(Err(WireError::from(&error)))).unwrap());
    }
    all.push(encode(&ToNic::Hello { version: 3 }).unwrap());
    all.push(encode(&ToNic::Open).unwrap());
    all.push(encode(&FromNic::<Response>::Opened(5)).unwrap());
    all
}

/// Decodes `received` as each kind of message the NIC and a host read, within the budget.
fn decode_everything(received: Received) -> usize {
    let copy = Received {
        bytes: received.bytes.clone(),
        fds: received
            .fds
            .iter()
            .map(|f| f.try_clone().unwrap())
            .collect(),
    };
    let ((), to_nic) = peak_of(|| drop(decode::<ToNic>(copy, map_passed)));
    let ((), from_nic) = peak_of(|| drop(decode::<FromNic>(received, map_passed)));
    to_nic.max(from_nic)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_nor_allocate_beyond_the_budget(
        input in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        let peak = decode_everything(bytes(&input));
        prop_assert!(peak <= DECODE_BUDGET, "{} bytes allocated", peak);
    }

    #[test]
    fn damaged_messages_never_panic_nor_allocate_beyond_the_budget(
        pick in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..6),
    ) {
        let samples = sample_encodings();
        let sample = &samples[pick.index(samples.len())];
        let mut damaged = passed(sample);
        for (at, byte, how) in edits {
            let len = damaged.bytes.len();
            match how {
                0 if len > 0 => damaged.bytes[at.index(len)] = byte,
                1 => damaged.bytes.insert(at.index(len + 1), byte),
                _ => damaged.bytes.truncate(at.index(len + 1)),
            }
        }
        let peak = decode_everything(damaged);
        prop_assert!(peak <= DECODE_BUDGET, "{} bytes allocated", peak);
    }
}

#[test]
fn the_largest_message_stays_within_the_budget() {
    // A device description whose name fills the message.
    let mut info = device_info();
    info.name = "n".repeat(MAX_MESSAGE - 1024);
    let encoded = encode(&Response::Device(info)).unwrap();
    assert!(encoded.bytes.len() <= MAX_MESSAGE);
    let received = passed(&encoded);
    let (decoded, peak) = peak_of(|| decode::<Response>(received, no_regions));
    assert!(decoded.is_ok());
    drop(decoded);
    assert!(peak <= DECODE_BUDGET, "{peak} bytes allocated");
}

// ---- the greeting and the version ---------------------------------------------------------------------

#[test]
fn the_greetings_start_as_in_every_version() {
    let hello = encode(&ToNic::Hello {
        version: 0x0102_0304,
    })
    .unwrap();
    assert_eq!(hello.bytes, [0, 4, 3, 2, 1]);
    assert_eq!(greeting_version(&hello.bytes), Some(0x0102_0304));
    let word = Region::shared(64).unwrap();
    let line = EventLine::new().unwrap();
    let welcome = FromNic::<Response>::Welcome(Welcome {
        version: PROTOCOL_VERSION,
        nic: "nic0".into(),
        doorbell_word: word.fd().unwrap().try_clone_to_owned().unwrap(),
        doorbell: line.as_fd().try_clone_to_owned().unwrap(),
        doorbell_qpns: 273,
    });
    let encoded = encode(&welcome).unwrap();
    assert_eq!(greeting_version(&encoded.bytes), Some(PROTOCOL_VERSION));
    assert_eq!(encoded.fds.len(), 2);
    let FromNic::Welcome(w) = decode::<FromNic>(passed(&encoded), no_regions).unwrap() else {
        panic!("not a welcome")
    };
    assert_eq!((w.version, w.nic.as_str()), (PROTOCOL_VERSION, "nic0"));
    assert_eq!(greeting_version(&encode(&ToNic::Open).unwrap().bytes), None);
}

#[test]
fn a_nic_of_another_version_is_named_with_its_version() {
    let dir = std::env::temp_dir().join(format!("roce-codec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("old.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let nic = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let hello = fdpass::recv(&stream, Limit::default()).unwrap().unwrap();
        assert_eq!(greeting_version(&hello.bytes), Some(PROTOCOL_VERSION));
        // A welcome of version 99, whose rest this library could not read.
        let future = [0, 99, 0, 0, 0, 0xff, 0xff];
        fdpass::send(&stream, &future, &[], Limit::default()).unwrap();
    });
    let err = crate::host::SocketBackend::connect_at("old", &path)
        .err()
        .unwrap();
    nic.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        err.to_string().contains(&format!(
            "speaks control protocol version 99, this library version {PROTOCOL_VERSION}"
        )),
        "{err}"
    );
}

/// The encoding of every sample, pinned with the protocol version: a change of what goes on
/// the wire must come with a new version.
#[test]
fn the_encoding_is_pinned_to_the_protocol_version() {
    // FNV-1a: stable across Rust releases, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for encoded in sample_encodings() {
        for byte in encoded.bytes.iter().chain(&[0xff]) {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    assert_eq!(
        (PROTOCOL_VERSION, hash),
        (13, 0xddbf_7d05_54d8_8bc5),
        "the control messages' encoding changed: give messages::PROTOCOL_VERSION a new number, \
         and pin it here with the new hash ({hash:#018x})"
    );
}

// ---- a NIC's socket, end to end ------------------------------------------------------------------------

#[test]
fn a_host_that_sends_what_is_no_message_is_answered_then_hung_up_on() {
    use std::io::{Read, Write};
    let nic = format!("codec{}", std::process::id());
    let mut config = crate::DeviceConfig::new(&nic, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    config.rings = crate::RingMemory::Shared {
        prefix: nic.clone(),
    };
    let device = crate::Device::start(config, crate::link::mem::pair().0).unwrap();
    let dir = std::env::temp_dir().join(format!("roce-codec-nic-{}", std::process::id()));
    let server = crate::host::Server::start(&device, &dir.join("nic.sock")).unwrap();
    let mut raw = UnixStream::connect(server.path()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = encode(&ToNic::Hello {
        version: PROTOCOL_VERSION,
    })
    .unwrap();
    fdpass::send(&raw, &hello.bytes, &[], Limit::default()).unwrap();
    let welcome = fdpass::recv(&raw, Limit::default()).unwrap().unwrap();
    assert!(matches!(
        decode::<FromNic>(welcome, no_regions),
        Ok(FromNic::Welcome(_))
    ));
    // A message with a tag no one knows: the error, then the end, though the host stays.
    fdpass::send(&raw, &[0x77, 1, 2], &[], Limit::default()).unwrap();
    let answer = fdpass::recv(&raw, Limit::default()).unwrap().unwrap();
    let FromNic::Answer(Err(e)) = decode::<FromNic>(answer, no_regions).unwrap() else {
        panic!("not an error")
    };
    assert!(VerbsError::from(e).to_string().contains("not valid"));
    // A well-formed request after it is not served: the NIC has hung up.
    let open = encode(&ToNic::Open).unwrap();
    raw.write_all(&(open.bytes.len() as u32).to_le_bytes())
        .unwrap();
    raw.write_all(&open.bytes).unwrap();
    let mut rest = Vec::new();
    assert_eq!(raw.read_to_end(&mut rest).unwrap(), 0);
    drop(server);
    device.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
