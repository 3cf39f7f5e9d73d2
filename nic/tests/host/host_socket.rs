//! Host programs reaching a NIC through its control socket and shared rings, as they would from
//! another process (here from the same one, so failures are easy to read; the cross-process
//! tests live with the `roce` binary).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{all_access, host_on, ip, pattern, Dir, Host};
use roce_hostmem::Region;
use roce_nic::host::{Server, ServerError, SocketBackend};
use roce_nic::link::mem;
use roce_nic::verbs::*;
use roce_nic::{Device, DeviceConfig, RingMemory};

/// Two NICs with shared rings on an in-process cable, each serving a socket in `dir`.
struct Nics {
    a: (Device, Server),
    b: (Device, Server),
}

fn nic_name(label: &str, end: char) -> String {
    format!("t{}{label}{end}", std::process::id())
}

fn nics(dir: &Path, label: &str) -> Nics {
    let (la, lb) = mem::pair();
    let config = |end, n| {
        let mut c = DeviceConfig::new(&nic_name(label, end), ip(n));
        c.threads = roce_nic::testbed::test_threads();
        c.rings = RingMemory::Shared {
            prefix: c.name.clone(),
        };
        c
    };
    let (mut ca, mut cb) = (config('a', 1), config('b', 2));
    ca.neighbours.push((ip(2), cb.mac));
    cb.neighbours.push((ip(1), ca.mac));
    let serve = |device: Device| {
        let path = dir.join(format!("{}.sock", device.config().name));
        let server = Server::start(&device, &path).unwrap();
        (device, server)
    };
    Nics {
        a: serve(Device::start(ca, la).unwrap()),
        b: serve(Device::start(cb, lb).unwrap()),
    }
}

fn connect(nic: &(Device, Server)) -> Context {
    let backend = SocketBackend::connect_at(&nic.0.config().name, nic.1.path()).unwrap();
    Context::open(backend).unwrap()
}

/// A host through its context `ctx`, with a named region other processes can map.
fn host(ctx: Context, region: &str) -> Host {
    let region = Arc::new(Region::create(region, 1 << 20).unwrap());
    host_on(ctx, QpType::Rc, region, QpCap::default()).unwrap()
}

fn connect_qps(a: &Host, b: &Host) {
    for (me, peer, n) in [(a, b, 2), (b, a, 1)] {
        me.qp.modify(&QpAttr::init(all_access())).unwrap();
        let av = AddressVector::to(Gid::from_ip(ip(n)), 1);
        me.qp
            .modify(&QpAttr::rtr(av, peer.qp.qp_num(), 0, Mtu::M4096))
            .unwrap();
        me.qp.modify(&QpAttr::rts(0)).unwrap();
    }
}

fn completion(host: &Host) -> Wc {
    let mut wc = [Wc::default()];
    let n = host
        .cq
        .try_wait(&mut wc, Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(n, 1, "no completion within 10 s");
    wc[0]
}

fn post(host: &Host, wr_id: u64, op: SendOp, sge: Sge) {
    host.qp
        .post_send(&[SendWr {
            wr_id,
            op,
            sg_list: &[sge],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
}

#[test]
fn write_read_and_atomics_through_sockets_and_shared_rings() {
    let dir = Dir::new("data");
    let nics = nics(&dir.0, "data");
    let a = host(connect(&nics.a), &nic_name("data", 'x'));
    let b = host(connect(&nics.b), &nic_name("data", 'y'));
    connect_qps(&a, &b);

    let data = pattern(300_000, 1);
    a.region.write(0, &data).unwrap();
    let remote = |offset: u64| (b.mr.va + offset, b.mr.rkey);
    let (addr, rkey) = remote(4096);
    post(
        &a,
        1,
        SendOp::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        a.mr.sge(0, 300_000),
    );
    assert_eq!(completion(&a).status, WcStatus::Success);
    let mut landed = vec![0; data.len()];
    b.region.read(4096, &mut landed).unwrap();
    assert!(landed == data, "written bytes differ");

    let (addr, rkey) = remote(4096 + 1000);
    post(
        &a,
        2,
        SendOp::RdmaRead {
            remote_addr: addr,
            rkey,
        },
        a.mr.sge(500_000, 5000),
    );
    assert_eq!(completion(&a).status, WcStatus::Success);
    let mut read = vec![0; 5000];
    a.region.read(500_000, &mut read).unwrap();
    assert_eq!(read, data[1000..6000]);

    b.region.write(900_000, &40u64.to_ne_bytes()).unwrap();
    let (addr, rkey) = remote(900_000);
    post(
        &a,
        3,
        SendOp::AtomicFetchAndAdd {
            remote_addr: addr,
            rkey,
            add: 2,
        },
        a.mr.sge(800_000, 8),
    );
    let wc = completion(&a);
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::Success));
    let mut value = [0u8; 8];
    b.region.read(900_000, &mut value).unwrap();
    assert_eq!(u64::from_ne_bytes(value), 42);
    a.region.read(800_000, &mut value).unwrap();
    assert_eq!(u64::from_ne_bytes(value), 40);
    assert!(a.ctx.counters().unwrap().tx_frames > 70);
}

#[test]
fn a_host_cannot_touch_another_hosts_objects() {
    let dir = Dir::new("own");
    let nics = nics(&dir.0, "own");
    let owner = host(connect(&nics.a), &nic_name("own", 'x'));
    let other = connect(&nics.a);
    let pd = other.alloc_pd().unwrap();
    let cq = other.create_cq(4).unwrap();
    let qp = pd
        .create_qp(QpType::Rc, &cq, &cq, QpCap::default())
        .unwrap();
    // The other host's QP number is not the owner's; modifying by the owner's number through
    // the other context is refused by the engine.
    assert_ne!(qp.qp_num(), owner.qp.qp_num());
    let backend = SocketBackend::connect_at(&nics.a.0.config().name, nics.a.1.path()).unwrap();
    let stranger = backend.connect().unwrap();
    let err = backend
        .call(
            stranger,
            roce_nic::control::Request::DestroyQp {
                qpn: owner.qp.qp_num(),
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, VerbsError::NoSuchObject { kind: "QP", .. }),
        "{err}"
    );
    // A context id this connection did not open is refused before the engine sees it.
    let err = backend
        .call(stranger + 1000, roce_nic::control::Request::AllocPd)
        .unwrap_err();
    assert!(
        err.to_string().contains("not opened on this connection"),
        "{err}"
    );
    assert_eq!(owner.qp.query().unwrap().qp_state, Some(QpState::Reset));
}

#[test]
fn a_stopped_nic_fails_the_next_verb_instead_of_hanging() {
    let dir = Dir::new("stop");
    let nics = nics(&dir.0, "stop");
    let nic = nics.a.0.config().name.clone();
    let a = host(connect(&nics.a), &nic_name("stop", 'x'));
    let b = host(connect(&nics.b), &nic_name("stop", 'y'));
    connect_qps(&a, &b);
    let Nics {
        a: (device, server),
        b: other_nic,
    } = nics;
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        tid_tx
            .send(rustix::thread::gettid().as_raw_nonzero())
            .unwrap();
        let mut wc = [Wc::default()];
        let started = Instant::now();
        let result = a.cq.try_wait(&mut wc, Some(Duration::from_secs(30)));
        (a, result, started.elapsed())
    });
    // The NIC stops while the waiter is asleep in its wait (not before it begins waiting,
    // which would test only the refusal of a new verb).
    let tid = tid_rx.recv().unwrap();
    let stat = format!("/proc/self/task/{tid}/stat");
    roce_testkit::eventually("the waiter asleep in its wait", || {
        std::fs::read_to_string(&stat)
            .is_ok_and(|s| s[s.rfind(')').unwrap() + 2..].starts_with('S'))
    });
    device.stop();
    server.stop();
    let (a, result, waited) = waiter.join().unwrap();
    // (The in-process cable's other end holds this NIC's waker, and so its doorbell.)
    drop(other_nic);
    // The NIC's rings and doorbells are memfds: nothing of it is left in /dev/shm (the hosts
    // keep their mappings).
    let prefix = format!("roce-{nic}-");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let gone = |e: &VerbsError| matches!(e, VerbsError::DeviceGone { nic: n } if *n == nic);
    assert!(result.as_ref().is_err_and(gone), "{result:?}");
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    let sge = a.mr.sge(0, 8);
    let posted = a.qp.post_send(&[SendWr {
        wr_id: 9,
        op: SendOp::Send,
        sg_list: &[sge],
        flags: SendFlags::SIGNALED,
        ud: None,
    }]);
    assert!(posted.as_ref().is_err_and(gone), "{posted:?}");
    let queried = a.qp.query();
    assert!(queried.as_ref().is_err_and(gone), "{queried:?}");
    assert_eq!(
        queried.unwrap_err().to_string(),
        format!("the NIC {nic} has stopped")
    );
}

#[test]
fn a_live_name_is_refused_and_a_stale_socket_replaced() {
    let dir = Dir::new("claim");
    let nics = nics(&dir.0, "claim");
    let path = nics.a.1.path().to_owned();
    let err = Server::start(&nics.a.0, &path).err().unwrap();
    assert!(matches!(err, ServerError::InUse { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "a NIC named {} is already running (its socket is {})",
            nics.a.0.config().name,
            path.display()
        )
    );
    // A socket file nobody listens on, as a crashed NIC leaves it.
    let stale = dir.0.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let server = Server::start(&nics.b.0, &stale).unwrap();
    assert!(SocketBackend::connect_at("stale", &stale).is_ok());
    server.stop();
    assert!(!stale.exists(), "the socket is removed at stop");
    let err = SocketBackend::connect_at("stale", &stale).err().unwrap();
    assert!(matches!(err, VerbsError::NoDevice { .. }), "{err}");
}

#[test]
fn private_rings_and_anonymous_regions_cannot_cross() {
    let dir = Dir::new("priv");
    let (la, _lb) = mem::pair();
    let device = Device::start(DeviceConfig::new("private", ip(1)), la).unwrap();
    let err = Server::start(&device, &dir.0.join("p.sock")).err().unwrap();
    assert!(matches!(err, ServerError::PrivateRings(_)), "{err}");

    let nics = nics(&dir.0, "priv");
    let ctx = connect(&nics.a);
    let pd = ctx.alloc_pd().unwrap();
    let anonymous = Arc::new(Region::anonymous(4096).unwrap());
    let err = pd.register(&anonymous, 0, 4096, all_access()).unwrap_err();
    assert!(err.to_string().contains("only shared memory"), "{err}");
}

#[test]
fn garbage_on_the_socket_gets_an_error_and_the_nic_carries_on() {
    let dir = Dir::new("junk");
    let nics = nics(&dir.0, "junk");
    let mut raw = UnixStream::connect(nics.a.1.path()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // A well-framed message that is no message; then a length far over the limit.
    raw.write_all(&3u32.to_le_bytes()).unwrap();
    raw.write_all(&[0x77, 1, 2]).unwrap();
    let mut header = [0u8; 4];
    std::io::Read::read_exact(&mut raw, &mut header).unwrap();
    assert!(u32::from_le_bytes(header) > 0, "an answer came");
    let mut body = vec![0; u32::from_le_bytes(header) as usize];
    std::io::Read::read_exact(&mut raw, &mut body).unwrap();
    assert!(String::from_utf8_lossy(&body).contains("not valid"));
    raw.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let mut rest = Vec::new();
    let n = std::io::Read::read_to_end(&mut raw, &mut rest).unwrap();
    assert_eq!(n, 0, "the connection is closed");
    // Others are served as before.
    let ctx = connect(&nics.a);
    assert!(ctx.alloc_pd().is_ok());
}

#[test]
fn tcp_streams_of_the_port_reach_hosts_in_other_processes_as_descriptors() {
    use std::io::{Read, Write};
    use std::net::SocketAddr;
    let dir = Dir::new("tcp");
    let nics = nics(&dir.0, "tcp");
    let (server_ctx, client_ctx) = (connect(&nics.a), connect(&nics.b));
    let listener = server_ctx.tcp_listen(18515).unwrap();
    let dialer = std::thread::spawn(move || client_ctx.tcp_connect(SocketAddr::new(ip(1), 18515)));
    let (server, peer) = listener.accept_timeout(Duration::from_secs(10)).unwrap();
    let client = dialer.join().unwrap().unwrap();
    assert_eq!(peer.ip(), ip(2));
    for s in [&server, &client] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    let record = b"0000:000011:8fe4ca:00000000000000000000ffff0a000002\0";
    (&client).write_all(record).unwrap();
    let mut got = [0u8; 52];
    (&server).read_exact(&mut got).unwrap();
    assert_eq!(&got, record);
    // Errors keep their kind across the socket: nobody listens on this port.
    let refused = connect(&nics.b)
        .tcp_connect(SocketAddr::new(ip(1), 9))
        .unwrap_err();
    assert!(
        matches!(&refused, VerbsError::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
        "{refused:?}"
    );
}

#[test]
fn the_rdma_cm_connects_hosts_of_nics_behind_sockets() {
    use roce_nic::cm::{CmEventKind, ConnParam};
    let dir = Dir::new("cm");
    let nics = nics(&dir.0, "cm");
    let a = host(connect(&nics.a), &nic_name("cm", 'x'));
    let b = host(connect(&nics.b), &nic_name("cm", 'y'));
    let wait = Some(Duration::from_secs(10));
    let listener = a.ctx.cm_listen("0.0.0.0:7174".parse().unwrap()).unwrap();
    // No event yet: the wait times out as asked.
    let quiet = a.ctx.cm_event(Some(Duration::from_millis(1)));
    assert!(quiet.is_err_and(|e| e.to_string().contains("no CM event")));
    let param = |data: &[u8]| ConnParam {
        private_data: data.to_vec(),
        ..ConnParam::default()
    };
    let active = b
        .ctx
        .cm_connect(&b.qp, (ip(1), 7174).into(), &param(b"ping"))
        .unwrap();
    let request = a.ctx.cm_event(wait).unwrap();
    assert_eq!(request.kind, CmEventKind::ConnectRequest);
    assert_eq!(request.listen_id, Some(listener.id()));
    assert_eq!(&request.private_data[..4], b"ping");
    let passive = a.ctx.cm_request_id(&request);
    passive.accept(&a.qp, &param(b"pong")).unwrap();
    let established = b.ctx.cm_event(wait).unwrap();
    assert_eq!(established.kind, CmEventKind::Established);
    assert_eq!(&established.private_data[..4], b"pong");
    assert_eq!(a.ctx.cm_event(wait).unwrap().kind, CmEventKind::Established);

    a.region.write(0, b"over the CM").unwrap();
    post(
        &a,
        1,
        SendOp::RdmaWrite {
            remote_addr: b.mr.va + 64,
            rkey: b.mr.rkey,
        },
        a.mr.sge(0, 11),
    );
    assert_eq!(completion(&a).status, WcStatus::Success);
    let mut landed = [0u8; 11];
    b.region.read(64, &mut landed).unwrap();
    assert_eq!(&landed, b"over the CM");

    passive.disconnect().unwrap();
    assert_eq!(
        b.ctx.cm_event(wait).unwrap().kind,
        CmEventKind::Disconnected
    );
    assert_eq!(
        a.ctx.cm_event(wait).unwrap().kind,
        CmEventKind::Disconnected
    );
    drop(active);
}

/// A thread waiting for CM events (a program's CM thread, as rping's) holds nothing of the
/// context's control connection: another thread's verbs (a teardown) go on meanwhile, and the
/// next event wakes the wait. Waiting inside the NIC (`cm_event` with a timeout) held the
/// connection, so that a rping server's teardown queued behind its CM thread's waits and, on a
/// loaded machine, did not exit for many seconds.
#[test]
fn waiting_for_cm_events_leaves_the_control_connection_to_other_threads() {
    use roce_nic::cm::{CmEventKind, ConnParam};
    let patience = Duration::from_secs(20);
    let dir = Dir::new("cmwait");
    let nics = nics(&dir.0, "cmwait");
    let a = host(connect(&nics.a), &nic_name("cmwait", 'x'));
    let b = host(connect(&nics.b), &nic_name("cmwait", 'y'));
    let listener = a.ctx.cm_listen("0.0.0.0:7175".parse().unwrap()).unwrap();
    let waiter = {
        let ctx = a.ctx.clone();
        std::thread::spawn(move || {
            let woke = ctx.cm_wait(Some(patience)).unwrap();
            (woke, ctx.cm_event(Some(Duration::ZERO)))
        })
    };
    // Twenty verbs over the same connection while the CM thread waits.
    let worker = {
        let ctx = a.ctx.clone();
        std::thread::spawn(move || {
            for _ in 0..20 {
                drop(ctx.alloc_pd().unwrap());
            }
        })
    };
    let deadline = Instant::now() + patience;
    while !worker.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the verbs queued behind the wait for CM events"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    worker.join().unwrap();
    // Nothing happened to A's IDs yet: the wait goes on.
    assert!(!waiter.is_finished());

    let _active = b
        .ctx
        .cm_connect(&b.qp, (ip(1), 7175).into(), &ConnParam::default())
        .unwrap();
    let (woke, event) = waiter.join().unwrap();
    assert!(woke, "the connect request wakes the wait");
    let event = event.expect("the event is there to take at once");
    assert_eq!(event.kind, CmEventKind::ConnectRequest);
    assert_eq!(event.listen_id, Some(listener.id()));
    // B's first wait (its line is made then, perhaps after the REJ came): woken all the same.
    a.ctx.cm_request_id(&event).reject(&[]).unwrap();
    assert!(b.ctx.cm_wait(Some(patience)).unwrap());
    assert!(matches!(
        b.ctx.cm_event(Some(Duration::ZERO)).unwrap().kind,
        CmEventKind::Rejected { .. }
    ));
    // Nothing more: the wait times out as asked.
    assert!(!b.ctx.cm_wait(Some(Duration::from_millis(1))).unwrap());
}
