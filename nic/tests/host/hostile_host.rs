//! Hostile hosts: programs that speak the NIC's control protocol and touch the memory it shares
//! to break it, crash it, freeze it, or spy on another host. Each test performs one attack from
//! issue 13 and checks that the NIC stays up, that an honest host on the same NIC keeps working,
//! and that nothing is read or written outside what the attacker owns.
//!
//! The NICs run in this process (so a crash fails the test outright), except where a signal or
//! a descriptor limit must hit the NIC alone: there this test binary runs again as the NIC
//! process (the ignored test `nic_process`). Attacks from another user run as uid 65534 in a
//! child when the tests run as root, and are skipped (loudly) otherwise.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{all_access, host_on, ip, pattern, Dir, Host};
use roce_hostmem::{Region, RegionError};
use roce_nic::control::{Request, Response};
use roce_nic::host::{Server, SocketBackend};
use roce_nic::link::mem;
use roce_nic::verbs::*;
use roce_nic::{Device, DeviceConfig, RingMemory};

/// How long anything the NIC should do at once may take before the test calls it stuck.
const PATIENCE: Duration = Duration::from_secs(10);

/// Two NICs with shared rings on an in-process cable, each serving a socket.
struct Nics {
    a: (Device, Server),
    b: (Device, Server),
}

fn name(label: &str, end: char) -> String {
    format!("h{}{label}{end}", std::process::id())
}

fn nics(dir: &Dir, label: &str, limits: &[&str]) -> Nics {
    nics_on(dir, label, limits, roce_nic::testbed::test_threads())
}

/// [`nics`] with `threads` engine threads each.
fn nics_on(dir: &Dir, label: &str, limits: &[&str], threads: usize) -> Nics {
    let (la, lb) = mem::pair();
    let config = |end, n| {
        let mut c = DeviceConfig::new(&name(label, end), ip(n));
        c.threads = threads;
        c.rings = RingMemory::Shared {
            prefix: c.name.clone(),
        };
        for limit in limits {
            c.limits.set(limit).unwrap();
        }
        c
    };
    let (mut ca, mut cb) = (config('a', 1), config('b', 2));
    ca.neighbours.push((ip(2), cb.mac));
    cb.neighbours.push((ip(1), ca.mac));
    let serve = |device: Device| {
        let path = dir.0.join(format!("{}.sock", device.config().name));
        let server = Server::start(&device, &path).unwrap();
        (device, server)
    };
    Nics {
        a: serve(Device::start(ca, la).unwrap()),
        b: serve(Device::start(cb, lb).unwrap()),
    }
}

fn backend(nic: &(Device, Server)) -> Arc<SocketBackend> {
    SocketBackend::connect_at(&nic.0.config().name, nic.1.path()).unwrap()
}

fn context(nic: &(Device, Server)) -> Context {
    Context::open(backend(nic)).unwrap()
}

/// An honest host with 1 MiB of sealed shared memory.
fn honest(nic: &(Device, Server)) -> Host {
    let region = Arc::new(Region::shared(1 << 20).unwrap());
    host_on(context(nic), QpType::Rc, region, QpCap::default()).unwrap()
}

fn connect(a: &Host, b: &Host) {
    for (me, peer, n) in [(a, b, 2), (b, a, 1)] {
        me.qp.modify(&QpAttr::init(all_access())).unwrap();
        let av = AddressVector::to(Gid::from_ip(ip(n)), 1);
        let mut rtr = QpAttr::rtr(av, peer.qp.qp_num(), 0, Mtu::M4096);
        rtr.min_rnr_timer = Some(1);
        me.qp.modify(&rtr).unwrap();
        let mut rts = QpAttr::rts(0);
        // The usual 67 ms timer and seven retries: no test here waits for a retry to run out,
        // and a 1 ms timer with one retry failed honest WRITEs on a loaded machine.
        rts.timeout = Some(14);
        rts.retry_cnt = Some(7);
        me.qp.modify(&rts).unwrap();
    }
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

fn completion(host: &Host) -> Wc {
    host.next_completion(PATIENCE)
        .expect("no completion in time: the NIC is stuck")
}

/// An honest WRITE of a pattern from `a` to `b`, checked byte for byte: the NIC still works.
fn still_works(a: &Host, b: &Host, seed: u8) {
    let data = pattern(20_000, seed);
    a.region.write(0, &data).unwrap();
    let op = SendOp::RdmaWrite {
        remote_addr: b.mr.va + 8192,
        rkey: b.mr.rkey,
    };
    post(a, 0x600d, op, a.mr.sge(0, data.len() as u32));
    let wc = completion(a);
    assert_eq!((wc.wr_id, wc.status), (0x600d, WcStatus::Success), "{wc:?}");
    let mut landed = vec![0; data.len()];
    b.region.read(8192, &mut landed).unwrap();
    assert!(landed == data, "the honest WRITE did not land");
}

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Runs `f` only as root (where another user's process can be made); says so loudly otherwise.
fn as_root(what: &str) -> bool {
    if me() != 0 {
        roce_testkit::skip(&format!("{what}: acting as another user needs root"));
        return false;
    }
    true
}

/// Runs `shell` as user 65534 (nobody), waiting for it to finish.
fn as_nobody(shell: &str) {
    let status = Command::new("sh")
        .args(["-c", shell])
        .uid(65534)
        .gid(65534)
        .status()
        .unwrap();
    assert!(status.success(), "as nobody: {shell}");
}

fn truncate(fd: &impl AsRawFd, len: i64) -> std::io::Result<()> {
    // SAFETY: a valid descriptor.
    match unsafe { libc::ftruncate(fd.as_raw_fd(), len) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[test]
fn a_host_shrinking_its_registered_file_under_a_peers_write_and_a_gather_costs_only_itself() {
    let dir = Dir::new("shrink");
    let nics = nics(&dir, "shrink", &[]);
    let (a, b) = (honest(&nics.a), honest(&nics.b));
    connect(&a, &b);
    // The attacker on NIC b registers a named file (the kind that cannot be sealed).
    let file = name("shrink", 'f');
    let named = Arc::new(Region::create(&file, 1 << 20).unwrap());
    let ctx = context(&nics.b);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register(&named, 0, named.len(), all_access()).unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(QpType::Rc, &cq, &cq, QpCap::default())
        .unwrap();
    drop(qp);
    truncate(&named.fd().unwrap(), 4096).unwrap();

    // A peer's WRITE into the vanished pages: refused with a remote access error.
    a.region.write(0, &[0xee; 8192]).unwrap();
    let op = SendOp::RdmaWrite {
        remote_addr: mr.va + 65536,
        rkey: mr.rkey,
    };
    post(&a, 1, op, a.mr.sge(0, 8192));
    let wc = completion(&a);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemAccessErr), "{wc:?}");
    // A READ from it (the NIC gathers from the shrunk file): refused too, no zeros sent.
    let (a, b) = (honest(&nics.a), honest(&nics.b));
    connect(&a, &b);
    let op = SendOp::RdmaRead {
        remote_addr: mr.va + 65536,
        rkey: mr.rkey,
    };
    post(&a, 2, op, a.mr.sge(0, 4096));
    let wc = completion(&a);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::RemAccessErr), "{wc:?}");
    let (a, b) = honest_pair(&nics);
    still_works(&a, &b, 3);
}

/// Two fresh honest hosts, connected.
fn honest_pair(nics: &Nics) -> (Host, Host) {
    let (a, b) = (honest(&nics.a), honest(&nics.b));
    connect(&a, &b);
    (a, b)
}

#[test]
fn the_nics_rings_and_doorbell_cannot_be_shrunk_nor_registered() {
    let dir = Dir::new("rings");
    let nics = nics(&dir, "rings", &[]);
    let attacker = backend(&nics.a);
    let client = attacker.connect().unwrap();
    let call = |request| attacker.call(client, request);
    let Response::Pd(pd) = call(Request::AllocPd).unwrap() else {
        panic!()
    };
    let Response::Cq { cq, ring, .. } = call(Request::CreateCq { entries: 16 }).unwrap() else {
        panic!()
    };
    let Response::Qp { sq, .. } = call(Request::CreateQp {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: false,
    })
    .unwrap() else {
        panic!()
    };
    // Sealed: neither the CQ ring, nor the QP's rings, can change size.
    for region in [&ring.region, &sq.region] {
        let err = truncate(&region.fd().unwrap(), 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    }
    // Registering them (so that a remote peer could write work requests into the ring) is
    // refused, as is any memory of the NIC's.
    for region in [ring.region, sq.region] {
        let err = call(Request::RegMr {
            pd,
            region,
            offset: 0,
            len: 4096,
            access: all_access(),
            va: roce_hostmem::VaBase::Zero,
        })
        .unwrap_err();
        assert!(err.to_string().contains("the NIC's own"), "{err}");
    }
    let (a, b) = honest_pair(&nics);
    still_works(&a, &b, 4);
}

#[test]
fn a_host_that_clears_its_sleeping_word_or_drains_its_doorbell_freezes_only_itself() {
    let dir = Dir::new("bell");
    let nics = nics(&dir, "bell", &[]);
    let (a, b) = honest_pair(&nics);
    // The attacker's doorbell: its own word and eventfd (the library's Waker over them).
    let attacker = backend(&nics.a);
    let bell = Arc::clone(attacker.doorbell().waker());
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                bell.awake();
                std::hint::spin_loop();
            }
        })
    };
    // With one shared word, the engine would now sleep through the honest host's doorbells.
    for round in 0..20 {
        still_works(&a, &b, round);
        // Let the engine fall asleep between rounds (it sleeps after 50 µs idle).
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    hammer.join().unwrap();
}

/// An honest host in the NIC's own process (so its QPs are another host's than the attacker's,
/// whose connection comes from this process too).
fn in_process(nic: &(Device, Server)) -> Host {
    let region = Arc::new(Region::shared(1 << 20).unwrap());
    host_on(nic.0.open().unwrap(), QpType::Rc, region, QpCap::default()).unwrap()
}

#[test]
fn a_host_ringing_qps_it_does_not_own_or_flooding_or_clearing_its_doorbell_record_costs_only_itself(
) {
    foreign_rings_cost_only_the_ringer("ring", roce_nic::testbed::test_threads());
}

/// The doorbells are checked on the port thread and handed to the QPs' threads: with two, a
/// flood of foreign rings still costs only the ringer.
#[test]
fn with_qps_on_two_threads_a_hosts_foreign_rings_cost_only_itself() {
    foreign_rings_cost_only_the_ringer("ring2", 2);
}

fn foreign_rings_cost_only_the_ringer(label: &str, threads: usize) {
    let dir = Dir::new(label);
    let nics = nics_on(&dir, label, &[], threads);
    let (a, b) = (in_process(&nics.a), in_process(&nics.b));
    connect(&a, &b);
    let attacker = backend(&nics.a);
    let bell = attacker.doorbell().clone();
    let record_bits = bell.ready().words().count() as u64 * 64;
    assert!(
        u64::from(a.qp.qp_num()) < record_bits,
        "the attacker's record covers the honest QP's number"
    );
    // The honest QP's number alone, rung by the attacker: refused, and counted.
    let bad_before = nics.a.0.counters().bad_doorbells;
    assert!(bell.ready().set(a.qp.qp_num()));
    bell.waker().wake();
    let deadline = Instant::now() + PATIENCE;
    while nics.a.0.counters().bad_doorbells == bad_before {
        assert!(
            Instant::now() < deadline,
            "a ring for another host's QP was not refused"
        );
        std::thread::yield_now();
    }
    let bad_before = nics.a.0.counters().bad_doorbells;
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // Every bit: every QP number (the honest host's among them, and numbers of no
                // QP), summary bits past the last leaf; then the doorbell.
                for word in bell.ready().words() {
                    word.store(u64::MAX, Ordering::SeqCst);
                }
                bell.waker().wake();
                std::thread::yield_now();
                // Then nothing at all, as a host that never rings.
                for word in bell.ready().words() {
                    word.store(0, Ordering::SeqCst);
                }
                std::thread::yield_now();
            }
        })
    };
    for round in 0..20 {
        still_works(&a, &b, round);
        // Let the engine fall asleep between rounds (it sleeps after 50 µs idle).
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    hammer.join().unwrap();
    // The engine saw the flood, and took none of it for the honest host's QP.
    let counters = nics.a.0.counters();
    assert!(
        counters.bad_doorbells > bad_before,
        "no bad doorbell counted: {counters:?}"
    );
    // The attacker may ring its own QPs: an honest ring through its own library still works.
    let own = host_on(
        Context::open(attacker).unwrap(),
        QpType::Rc,
        Arc::new(Region::shared(1 << 20).unwrap()),
        QpCap::default(),
    )
    .unwrap();
    let peer = in_process(&nics.b);
    connect(&own, &peer);
    still_works(&own, &peer, 99);
}

#[test]
fn another_users_file_in_dev_shm_is_never_used() {
    if !as_root("a file planted in /dev/shm by another user") {
        return;
    }
    let dir = Dir::new("plant");
    let nics = nics(&dir, "plant", &[]);
    let file = name("plant", 'p');
    let path = format!("/dev/shm/roce-{file}");
    as_nobody(&format!(
        "umask 0; head -c 65536 /dev/zero > {path} && chmod 666 {path}"
    ));
    // A host that looks the name up is told it is not its own...
    let err = Region::attach(&file).unwrap_err();
    assert!(
        matches!(&err, RegionError::Untrusted { reason, .. } if reason.contains("65534")),
        "{err}"
    );
    // ...and a host that opens and passes it anyway is refused by the NIC.
    let region = Arc::new(Region::attach_at(Path::new(&path)).unwrap());
    let ctx = context(&nics.a);
    let pd = ctx.alloc_pd().unwrap();
    let err = pd.register(&region, 0, 4096, all_access()).unwrap_err();
    assert!(err.to_string().contains("65534"), "{err}");
    assert_eq!(err.errno(), libc::EACCES);
    std::fs::remove_file(&path).unwrap();
    let (a, b) = honest_pair(&nics);
    still_works(&a, &b, 5);
}

#[test]
fn a_socket_directory_of_another_user_is_refused() {
    if !as_root("a socket directory made by another user") {
        return;
    }
    let base = Dir::new("sockdir");
    std::fs::set_permissions(&base.0, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let theirs = base.0.join("roce-0");
    as_nobody(&format!("mkdir -m 700 {}", theirs.display()));
    let (la, _lb) = mem::pair();
    let mut config = DeviceConfig::new(&name("sockdir", 'a'), ip(1));
    config.rings = RingMemory::Shared {
        prefix: config.name.clone(),
    };
    let err = Server::claim(&config.name, &theirs.join("x.sock"))
        .err()
        .expect("another user's directory was used");
    assert!(err.to_string().contains("user 65534"), "{err}");
    drop(la);
}

#[test]
fn an_address_handle_of_another_host_or_domain_sends_nothing() {
    let dir = Dir::new("ah");
    let nics = nics(&dir, "ah", &[]);
    let owner = context(&nics.a);
    let owner_pd = owner.alloc_pd().unwrap();
    let theirs = owner_pd
        .create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
        .unwrap();
    let attacker = context(&nics.a);
    let pd = attacker.alloc_pd().unwrap();
    let cq = attacker.create_cq(16).unwrap();
    let qp = pd
        .create_qp(QpType::Ud, &cq, &cq, QpCap::default())
        .unwrap();
    qp.modify(&QpAttr::init_ud(0x1111)).unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ..QpAttr::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        ..QpAttr::default()
    })
    .unwrap();
    let region = Arc::new(Region::shared(4096).unwrap());
    let mr = pd.register(&region, 0, 4096, all_access()).unwrap();
    let sent_before = owner.counters().unwrap().tx_frames;
    qp.post_send(&[SendWr {
        wr_id: 7,
        op: SendOp::Send,
        sg_list: &[mr.sge(0, 64)],
        flags: SendFlags::SIGNALED,
        ud: Some(UdDest {
            ah: theirs.handle(),
            remote_qpn: 0x11,
            remote_qkey: 0x1111,
        }),
    }])
    .unwrap();
    let mut wc = [Wc::default()];
    assert_eq!(cq.wait(&mut wc, Some(PATIENCE)), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::LocQpOpErr));
    assert_eq!(
        owner.counters().unwrap().tx_frames,
        sent_before,
        "a frame left"
    );
}

#[test]
fn a_domain_in_use_cannot_be_freed() {
    let dir = Dir::new("pd");
    let nics = nics(&dir, "pd", &[]);
    let backend = backend(&nics.a);
    let client = backend.connect().unwrap();
    let call = |request| backend.call(client, request);
    let Response::Pd(pd) = call(Request::AllocPd).unwrap() else {
        panic!()
    };
    let Response::Ah(ah) = call(Request::CreateAh {
        pd,
        av: AddressVector::to(Gid::from_ip(ip(2)), 1),
    })
    .unwrap() else {
        panic!()
    };
    let busy = call(Request::DeallocPd { pd }).unwrap_err();
    assert_eq!(busy.errno(), libc::EBUSY, "{busy}");
    call(Request::DestroyAh { ah }).unwrap();
    let region = Arc::new(Region::shared(4096).unwrap());
    let Response::Mr(keys) = call(Request::RegMr {
        pd,
        region,
        offset: 0,
        len: 4096,
        access: all_access(),
        va: roce_hostmem::VaBase::Zero,
    })
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        call(Request::DeallocPd { pd }).unwrap_err().errno(),
        libc::EBUSY
    );
    call(Request::DeregMr { lkey: keys.lkey }).unwrap();
    let Response::Cq { cq, .. } = call(Request::CreateCq { entries: 4 }).unwrap() else {
        panic!()
    };
    let Response::Qp { qpn, .. } = call(Request::CreateQp {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: false,
    })
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        call(Request::DeallocPd { pd }).unwrap_err().errno(),
        libc::EBUSY
    );
    call(Request::DestroyQp { qpn }).unwrap();
    call(Request::DeallocPd { pd }).unwrap();
}

#[test]
fn a_scatter_gather_entry_at_the_top_of_the_address_space_is_an_error_not_a_crash() {
    let dir = Dir::new("sge");
    let nics = nics(&dir, "sge", &[]);
    let (a, b) = honest_pair(&nics);
    let sge = Sge {
        addr: u64::MAX - 8,
        length: 4096,
        lkey: a.mr.lkey,
    };
    let op = SendOp::RdmaWrite {
        remote_addr: b.mr.va,
        rkey: b.mr.rkey,
    };
    post(&a, 9, op, sge);
    let wc = completion(&a);
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::LocProtErr), "{wc:?}");
    let (a, b) = honest_pair(&nics);
    still_works(&a, &b, 6);
}

#[test]
fn objects_contexts_and_connections_are_limited_per_host_and_per_nic() {
    let dir = Dir::new("limits");
    let nics = nics(
        &dir,
        "limits",
        &[
            "host_max_cq=4",
            "host_max_contexts=3",
            "host_max_connections=4",
            "max_qp=6",
        ],
    );
    // What the NIC reports is what it enforces.
    let ctx = context(&nics.a);
    let limits = ctx.query_device().unwrap().limits;
    assert_eq!((limits.host_max_cq, limits.max_qp), (4, 6));
    let cqs: Vec<_> = (0..4).map(|_| ctx.create_cq(16).unwrap()).collect();
    let err = ctx.create_cq(16).err().unwrap();
    assert!(
        matches!(err, VerbsError::LimitReached { scope: "host", .. }),
        "{err}"
    );
    assert_eq!(err.errno(), libc::ENOMEM);
    // A context more, and a connection more, than allowed.
    let b = backend(&nics.a);
    let _two = (b.connect().unwrap(), b.connect().unwrap());
    assert!(matches!(b.connect(), Err(VerbsError::LimitReached { .. })));
    let extra: Vec<_> = (0..2).map(|_| backend(&nics.a)).collect();
    let refused = SocketBackend::connect_at(&nics.a.0.config().name, nics.a.1.path())
        .err()
        .expect("a fifth connection of one host was let in");
    assert!(refused.to_string().contains("connections"), "{refused}");
    drop((cqs, extra, b, ctx));
    // Everything of the host went with its connections: a new host starts from nothing.
    let (a, b) = honest_pair(&nics);
    still_works(&a, &b, 7);
    // The NIC-wide limit holds across hosts (the in-process ones count too).
    let ctx = context(&nics.a);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mut qps = Vec::new();
    let err = loop {
        match pd.create_qp(QpType::Rc, &cq, &cq, QpCap::default()) {
            Ok(qp) => qps.push(qp),
            Err(e) => break e,
        }
        assert!(qps.len() <= 6, "more QPs than max_qp");
    };
    assert!(
        matches!(err, VerbsError::LimitReached { scope: "NIC", .. }),
        "{err}"
    );
}

/// Frames a raw message as the control protocol does.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

#[test]
fn a_host_that_sends_half_a_message_or_never_reads_is_dropped_and_holds_nothing_up() {
    let dir = Dir::new("half");
    let nics = nics(&dir, "half", &[]);
    // Half a message, then silence.
    let mut half = UnixStream::connect(nics.a.1.path()).unwrap();
    half.write_all(&100u32.to_le_bytes()).unwrap();
    half.write_all(&[0; 10]).unwrap();
    // Requests without ever reading the answers: Hello, then calls that each get an answer
    // (an error: context 127 was never opened here) and open nothing that would count against
    // this process's own context limit.
    let mut flood = UnixStream::connect(nics.a.1.path()).unwrap();
    flood.set_nonblocking(true).unwrap();
    let mut hello = vec![0u8];
    hello.extend_from_slice(&roce_nic::host::PROTOCOL_VERSION.to_le_bytes());
    let _ = flood.write_all(&frame(&hello));
    // ToNic::Call (tag 2) { client: 127, request: QueryDevice (tag 0) }, as postcard puts it.
    let query = frame(&[2, 0x7f, 0]);
    for _ in 0..100_000 {
        if flood.write_all(&query).is_err() {
            break;
        }
    }
    // Others are served meanwhile.
    let (a, b) = honest_pair(&nics);
    still_works(&a, &b, 8);
    // Both are hung up on within the deadline (plus patience for a loaded machine).
    half.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut rest = Vec::new();
    let started = Instant::now();
    assert_eq!(half.read_to_end(&mut rest).unwrap(), 0);
    assert!(started.elapsed() < PATIENCE);
    // And stopping the NIC does not wait for them: only for the engine and the socket.
    let Nics { a, b } = nics;
    let started = Instant::now();
    a.0.stop();
    a.1.stop();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopping took {:?}",
        started.elapsed()
    );
    drop((flood, b));
}

// ---- the NIC as a process of its own ------------------------------------------------------

const CHILD_NIC: &str = "ROCE_HOSTILE_CHILD_NIC";
const CHILD_DIR: &str = "ROCE_HOSTILE_CHILD_DIR";
const CHILD_NOFILE: &str = "ROCE_HOSTILE_CHILD_NOFILE";

/// The write end of the pipe SIGTERM is reported on (set before the handler is installed).
static SIGNALLED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_sigterm(_: libc::c_int) {
    let fd = SIGNALLED.load(Ordering::SeqCst);
    // SAFETY: write(2) is async-signal-safe; one byte from a static.
    unsafe { libc::write(fd, b"t".as_ptr().cast(), 1) };
}

/// Not a test: the NIC process of the tests below (this binary run again).
#[test]
#[ignore]
fn nic_process() {
    let (Ok(nic), Ok(dir)) = (std::env::var(CHILD_NIC), std::env::var(CHILD_DIR)) else {
        return;
    };
    let mut fds = [0; 2];
    // SAFETY: a valid array; a handler that only writes to the pipe.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        SIGNALLED.store(fds[1], Ordering::SeqCst);
        libc::signal(libc::SIGTERM, on_sigterm as *const () as libc::sighandler_t);
    }
    let (la, _lb) = mem::pair();
    let mut config = DeviceConfig::new(&nic, ip(1));
    config.rings = RingMemory::Shared {
        prefix: nic.clone(),
    };
    let device = Device::start(config, la).unwrap();
    let server = Server::start(&device, &Path::new(&dir).join(format!("{nic}.sock"))).unwrap();
    if let Ok(n) = std::env::var(CHILD_NOFILE) {
        let n: u64 = n.parse().unwrap();
        let limit = libc::rlimit {
            rlim_cur: n,
            rlim_max: n,
        };
        // SAFETY: a valid rlimit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    }
    println!("ready");
    let mut byte = [0u8];
    // SAFETY: reads one byte into a valid buffer from our pipe.
    while unsafe { libc::read(fds[0], byte.as_mut_ptr().cast(), 1) } != 1 {}
    device.stop();
    server.stop();
    println!("stopped");
}

/// The NIC process, started and ready.
struct NicProcess {
    child: Child,
    nic: String,
    socket: PathBuf,
}

impl NicProcess {
    fn start(dir: &Dir, label: &str, nofile: Option<u32>) -> NicProcess {
        let nic = name(label, 'n');
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "hostile_host::nic_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_NIC, &nic)
        .env(CHILD_DIR, &dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        if let Some(n) = nofile {
            cmd.env(CHILD_NOFILE, n.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut seen = Vec::new();
        let mut byte = [0u8];
        while !String::from_utf8_lossy(&seen).contains("ready") {
            assert_eq!(out.read(&mut byte).unwrap(), 1, "the NIC process died");
            seen.push(byte[0]);
        }
        child.stdout = Some(out);
        let socket = dir.0.join(format!("{nic}.sock"));
        NicProcess { child, nic, socket }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGTERM, then the time it took to exit (killed after `PATIENCE`).
    fn terminate(mut self) -> Duration {
        let started = Instant::now();
        // SAFETY: kill(2) of our own child, by its PID.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the NIC process failed: {status}");
                return started.elapsed();
            }
            if started.elapsed() > PATIENCE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the NIC process did not exit within {PATIENCE:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn sigterm_ends_the_nic_within_seconds_whatever_its_hosts_do() {
    let dir = Dir::new("term");
    let nic = NicProcess::start(&dir, "term", None);
    let backend = SocketBackend::connect_at(&nic.nic, &nic.socket).unwrap();
    let ctx = Context::open(Arc::clone(&backend) as Arc<dyn Backend>).unwrap();
    let _pd = ctx.alloc_pd().unwrap();
    let mut half = UnixStream::connect(&nic.socket).unwrap();
    half.write_all(&1000u32.to_le_bytes()).unwrap();
    half.write_all(&[2; 100]).unwrap();
    let mut flood = UnixStream::connect(&nic.socket).unwrap();
    flood.set_nonblocking(true).unwrap();
    // ToNic::Call (tag 2) { client: 127, request: QueryDevice (tag 0) }, as postcard puts it.
    let query = frame(&[2, 0x7f, 0]);
    for _ in 0..100_000 {
        if flood.write_all(&query).is_err() {
            break;
        }
    }
    let socket = nic.socket.clone();
    let took = nic.terminate();
    assert!(took < Duration::from_secs(5), "SIGTERM took {took:?}");
    assert!(!socket.exists(), "the socket was left behind");
    assert!(matches!(ctx.alloc_pd(), Err(VerbsError::DeviceGone { .. })));
}

/// CPU time (user + system, in clock ticks) of the NIC process's control thread.
fn control_thread_ticks(pid: i32, nic: &str) -> u64 {
    let comm = format!("{nic}-control");
    let comm = &comm[..comm.len().min(15)];
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if name.trim() == comm {
            let stat = std::fs::read_to_string(path.join("stat")).unwrap();
            let fields: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap()
                .split_whitespace()
                .collect();
            return fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        }
    }
    panic!("no control thread {comm} in the NIC process");
}

#[test]
fn out_of_descriptors_the_nic_backs_off_instead_of_spinning() {
    let dir = Dir::new("emfile");
    // Room for what the NIC has open at start and a few hosts, no more.
    let nic = NicProcess::start(&dir, "emfile", Some(48));
    let mut hosts = Vec::new();
    // Connect until the NIC can no longer accept: connections then wait in its backlog.
    for _ in 0..40 {
        match SocketBackend::connect_at(&nic.nic, &nic.socket) {
            Ok(h) => hosts.push(h),
            Err(_) => break,
        }
    }
    let mut waiting: Vec<UnixStream> = (0..4)
        .map(|_| UnixStream::connect(&nic.socket).unwrap())
        .collect();
    let before = control_thread_ticks(nic.pid(), &nic.nic);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let ticks = control_thread_ticks(nic.pid(), &nic.nic) - before;
    let wall = started.elapsed();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let busy = ticks as f64 / hz / wall.as_secs_f64();
    assert!(
        busy < 0.3,
        "the control thread was busy {:.0}% of the time",
        busy * 100.0
    );
    // Once descriptors come back, the waiting connections are served.
    drop(hosts);
    let mut hello = vec![0u8];
    hello.extend_from_slice(&roce_nic::host::PROTOCOL_VERSION.to_le_bytes());
    let first = &mut waiting[0];
    first.write_all(&frame(&hello)).unwrap();
    first.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut header = [0u8; 4];
    first.read_exact(&mut header).unwrap();
    waiting.clear();
    assert!(nic.terminate() < Duration::from_secs(5));
}

#[test]
fn a_host_that_corrupts_its_shared_receive_queue_costs_only_itself() {
    let dir = Dir::new("srq");
    let nics = nics(&dir, "srq", &[]);
    let (a, b) = honest_pair(&nics);
    let backend = backend(&nics.b);
    let client = backend.connect().unwrap();
    let call = |request| backend.call(client, request);
    let Response::Pd(pd) = call(Request::AllocPd).unwrap() else {
        panic!()
    };
    let Response::Cq { cq, .. } = call(Request::CreateCq { entries: 16 }).unwrap() else {
        panic!()
    };
    let Response::Srq { srq, ring, .. } = call(Request::CreateSrq {
        pd,
        max_wr: 4,
        max_sge: 1,
    })
    .unwrap() else {
        panic!()
    };
    let region = Arc::new(Region::shared(4096).unwrap());
    let Response::Mr(keys) = call(Request::RegMr {
        pd,
        region,
        offset: 0,
        len: 4096,
        access: all_access(),
        va: roce_hostmem::VaBase::Zero,
    })
    .unwrap() else {
        panic!()
    };
    let Response::Qp { qpn, .. } = call(Request::CreateQpWithSrq {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap: QpCap::default(),
        sq_sig_all: false,
    })
    .unwrap() else {
        panic!()
    };
    // An honest peer on the other NIC, connected to the attacker's QP.
    let peer = honest(&nics.a);
    peer.qp.modify(&QpAttr::init(all_access())).unwrap();
    let av = |n| AddressVector::to(Gid::from_ip(ip(n)), 1);
    peer.qp
        .modify(&QpAttr::rtr(av(2), qpn, 0, Mtu::M1024))
        .unwrap();
    let mut rts = QpAttr::rts(0);
    rts.retry_cnt = Some(1);
    rts.rnr_retry = Some(1);
    peer.qp.modify(&rts).unwrap();
    for attr in [
        QpAttr::init(all_access()),
        QpAttr::rtr(av(1), peer.qp.qp_num(), 0, Mtu::M1024),
        QpAttr::rts(0),
    ] {
        call(Request::ModifyQp { qpn, attr }).unwrap();
    }
    // The attack: a request naming four billion entries, one naming memory beyond its
    // registration, and a producer index a thousand requests ahead of a ring of four.
    let slot = ring.geometry.slot_size;
    let at = |i: usize| ring.geometry.offset + 128 + i * slot;
    let mut malformed = vec![0u8; 16];
    malformed[0..8].copy_from_slice(&1u64.to_ne_bytes());
    malformed[8..12].copy_from_slice(&u32::MAX.to_ne_bytes());
    ring.region.write(at(0), &malformed).unwrap();
    let mut outside = vec![0u8; 32];
    outside[0..8].copy_from_slice(&2u64.to_ne_bytes());
    outside[8..12].copy_from_slice(&1u32.to_ne_bytes());
    outside[16..24].copy_from_slice(&(1u64 << 40).to_ne_bytes());
    outside[24..28].copy_from_slice(&4096u32.to_ne_bytes());
    outside[28..32].copy_from_slice(&keys.lkey.to_ne_bytes());
    ring.region.write(at(1), &outside).unwrap();
    ring.region
        .write(ring.geometry.offset, &1000u32.to_ne_bytes())
        .unwrap();
    let before = nics.b.0.counters();
    peer.region.write(0, b"into the attacker's queue").unwrap();
    post(&peer, 5, SendOp::Send, peer.mr.sge(0, 25));
    let wc = completion(&peer);
    assert_eq!(
        (wc.wr_id, wc.status),
        (5, WcStatus::RemOpErr),
        "the SEND met the receive beyond the registration: {wc:?}"
    );
    let after = nics.b.0.counters().since(&before);
    assert_eq!(after.malformed_receives, 1, "{after:?}");
    // The SRQ is the attacker's alone, and busy while its QP takes from it.
    let other = backend.connect().unwrap();
    for request in [
        Request::QuerySrq { srq },
        Request::ModifySrq { srq, srq_limit: 1 },
        Request::DestroySrq { srq },
    ] {
        let refused = backend.call(other, request).unwrap_err();
        assert_eq!(refused.errno(), libc::EINVAL, "{refused}");
    }
    let busy = call(Request::DestroySrq { srq }).unwrap_err();
    assert_eq!(busy.errno(), libc::EBUSY, "{busy}");
    let busy = call(Request::DeallocPd { pd }).unwrap_err();
    assert_eq!(busy.errno(), libc::EBUSY, "{busy}");
    still_works(&a, &b, 17);
    call(Request::DestroyQp { qpn }).unwrap();
    call(Request::DestroySrq { srq }).unwrap();
}
