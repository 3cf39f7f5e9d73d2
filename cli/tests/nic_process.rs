//! NICs as processes, cabled over loopback UDP, with host programs in other processes: the
//! bypass as it can be watched. Host A is this test process (the `roce_nic::host` library);
//! host B is `roce host serve`, which the test stops with SIGSTOP.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::{Access, Region};
use roce_nic::host::SocketBackend;
use roce_nic::testbed::{host_on, Host};
use roce_nic::verbs::*;
use support::*;

/// Host A: a context on NIC `nic` through its socket, with a QP and a registered region.
struct Initiator(Host);

impl std::ops::Deref for Initiator {
    type Target = Host;

    fn deref(&self) -> &Host {
        &self.0
    }
}

impl Initiator {
    fn open(env: &Env, nic: &str, region: &str) -> Initiator {
        let backend = SocketBackend::connect_at(nic, &env.socket(nic)).unwrap();
        let ctx = Context::open(backend).unwrap();
        let region = Arc::new(Region::create(region, 4 << 20).unwrap());
        Initiator(host_on(ctx, QpType::Rc, region, QpCap::default()).unwrap())
    }

    /// `LID:QPN:PSN:GID` of this QP, starting at PSN `psn`.
    fn endpoint(&self, psn: u32) -> String {
        let gid = self.ctx.gid(1).unwrap();
        format!("0000:{:06x}:{psn:06x}:{}", self.qp.qp_num(), gid.to_hex())
    }

    /// Connects to the peer's `LID:QPN:PSN:GID` at path MTU `mtu`; a short retry timeout so a
    /// dead peer shows quickly.
    fn connect(&self, peer: &str, psn: u32, mtu: Mtu) {
        let parts: Vec<&str> = peer.splitn(4, ':').collect();
        let qpn = u32::from_str_radix(parts[1], 16).unwrap();
        let peer_psn = u32::from_str_radix(parts[2], 16).unwrap();
        let gid = Gid::parse(parts[3]).unwrap();
        self.qp.modify(&QpAttr::init(Access::LOCAL_WRITE)).unwrap();
        let rtr = QpAttr::rtr(AddressVector::to(gid, 1), qpn, peer_psn, mtu);
        self.qp.modify(&rtr).unwrap();
        let rts = QpAttr {
            timeout: Some(10),
            retry_cnt: Some(2),
            ..QpAttr::rts(psn)
        };
        self.qp.modify(&rts).unwrap();
    }

    fn post(&self, wr_id: u64, op: SendOp, offset: u64, len: u32) {
        self.qp
            .post_send(&[SendWr {
                wr_id,
                op,
                sg_list: &[self.mr.sge(offset, len)],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
    }

    fn completion(&self) -> Wc {
        let mut wc = [Wc::default()];
        let n = self.cq.try_wait(&mut wc, Some(PATIENCE)).unwrap();
        assert_eq!(n, 1, "no completion within {PATIENCE:?}");
        wc[0]
    }

    fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        self.region.read(offset, &mut buf).unwrap();
        buf
    }
}

/// `roce host serve` on `nic`, with its endpoint line and (rkey, va).
fn serve(env: &Env, nic: &str, region: &str) -> (Proc, String, u32, u64) {
    let cmd = env.roce(&[
        "host", "serve", "--nic", nic, "--region", region, "--size", "2M",
    ]);
    let mut proc = Proc::spawn(cmd, true);
    let local = proc.expect(|l| l.starts_with("local "));
    let memory = proc.expect(|l| l.starts_with("memory "));
    let field = |name: &str| {
        let value = memory
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap();
        u64::from_str_radix(value.trim_start_matches("0x"), 16).unwrap()
    };
    let (rkey, va) = (field("rkey=") as u32, field("va="));
    let endpoint = local.strip_prefix("local ").unwrap().to_owned();
    (proc, endpoint, rkey, va)
}

#[test]
fn one_sided_operations_land_while_the_target_host_is_stopped() {
    let env = Env::new("stop");
    let (a, b) = cabled_pair(&env, 61);
    stopped_target(&env, a, b, Mtu::M4096);
}

#[test]
fn the_same_over_veth_interfaces_in_a_namespace() {
    let env = Env::new("veth");
    let Some(ns) = roce_tests::netns::Netns::create("stopveth") else {
        return;
    };
    let (a, b) = veth_pair(&env, &ns, 62);
    stopped_target(&env, a, b, Mtu::M1024);
}

/// The same with the NICs' QPs sharded over two engine threads each (`--threads 2`; the
/// in-process suites run four too).
#[test]
fn the_same_with_the_qps_sharded_over_engine_threads() {
    let env = Env::new("thrd");
    let (mut a, mut b) = cabled_pair(&env, 84);
    a.extra = vec!["--threads".into(), "2".into()];
    b.extra = vec!["--threads".into(), "2".into()];
    stopped_target(&env, a, b, Mtu::M4096);
}

/// Host B (`roce host serve` on NIC b) is stopped; host A (this process, on NIC a) writes,
/// reads and runs atomics on B's memory; B's memory holds exactly the bytes while its CPU time
/// and context switches stand still; then B runs and finds the data.
fn stopped_target(env: &Env, mut a: Nic, b: Nic, mtu: Mtu) {
    a.pcap = Some(env.dir.join("a.pcap"));
    let mut nic_a = env.nic(&a);
    let mut nic_b = env.nic(&b);
    let target_region = env.name("target");
    let (mut host_b, b_endpoint, rkey, va) = serve(env, &b.name, &target_region);
    let host_a = Initiator::open(env, &a.name, &env.name("init"));
    host_b.say(&host_a.endpoint(0x100));
    host_b.expect(|l| l.starts_with("connected to "));
    host_a.connect(&b_endpoint, 0x100, mtu);

    // Host B stops running: from here only the NICs touch its memory.
    host_b.signal(libc::SIGSTOP);
    let b_pid = host_b.pid();
    eventually("host B stopped", || {
        thread_states(b_pid).iter().all(|s| *s == 'T')
    });
    let cpu_before = cpu_ticks(b_pid);
    let switches_before = context_switches(b_pid);

    let text = b"written while you were stopped";
    host_a.region.write(0, text).unwrap();
    let big: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i * 13 + i / 4096) as u8)
        .collect();
    host_a.region.write(1 << 20, &big).unwrap();
    let write = |remote: u64| SendOp::RdmaWrite {
        remote_addr: va + remote,
        rkey,
    };
    host_a.post(1, write(0), 0, text.len() as u32);
    host_a.post(2, write(1 << 20), 1 << 20, 1 << 20);
    for wr_id in [1, 2] {
        let wc = host_a.completion();
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success));
    }
    let read = SendOp::RdmaRead {
        remote_addr: va,
        rkey,
    };
    host_a.post(3, read, 3 << 20, text.len() as u32);
    assert_eq!(host_a.completion().status, WcStatus::Success);
    assert_eq!(host_a.read(3 << 20, text.len()), text);
    let add = SendOp::AtomicFetchAndAdd {
        remote_addr: va + 8192,
        rkey,
        add: 5,
    };
    host_a.post(4, add, 4096, 8);
    assert_eq!(host_a.completion().status, WcStatus::Success);
    let swap = SendOp::AtomicCmpAndSwp {
        remote_addr: va + 8192,
        rkey,
        compare: 5,
        swap: 1000,
    };
    host_a.post(5, swap, 4104, 8);
    assert_eq!(host_a.completion().status, WcStatus::Success);
    assert_eq!(host_a.read(4096, 8), 0u64.to_ne_bytes(), "fetch-add saw 0");
    assert_eq!(host_a.read(4104, 8), 5u64.to_ne_bytes(), "cmp-swap saw 5");

    // B's memory, looked at from outside while B is still stopped: exactly the bytes.
    let observer = Region::attach(&target_region).unwrap();
    let mut seen = vec![0; 8192 + 16];
    observer.read(0, &mut seen).unwrap();
    assert_eq!(&seen[..text.len()], text);
    assert!(seen[text.len()..8192].iter().all(|b| *b == 0));
    assert_eq!(&seen[8192..8200], &1000u64.to_ne_bytes());
    assert!(seen[8200..].iter().all(|b| *b == 0));
    let mut landed = vec![0; big.len()];
    observer.read(1 << 20, &mut landed).unwrap();
    assert!(landed == big, "the 1 MiB write differs");
    assert!(thread_states(b_pid).iter().all(|s| *s == 'T'));
    assert_eq!(
        cpu_ticks(b_pid),
        cpu_before,
        "host B used CPU while stopped"
    );
    assert_eq!(
        context_switches(b_pid),
        switches_before,
        "host B was scheduled while stopped"
    );

    // B runs again and reads its memory itself.
    host_b.signal(libc::SIGCONT);
    host_b.say(&format!("show 0 {}", text.len()));
    host_b.expect(|l| l.ends_with("|written while yo|"));
    host_b.expect(|l| l.ends_with("|u were stopped|"));
    host_b.say("show 8192 8");
    host_b.expect(|l| l.starts_with("00002000  e8 03 00 00 00 00 00 00"));

    drop(host_a);
    host_b.signal(libc::SIGTERM);
    assert!(host_b.wait(PATIENCE).success(), "{}", host_b.stderr());
    for nic in [&mut nic_a, &mut nic_b] {
        nic.signal(libc::SIGTERM);
        assert!(nic.wait(PATIENCE).success(), "{}", nic.stderr());
    }
    let mtu_packets = (1 << 20) / mtu.bytes() as usize;
    check_capture(env, a.pcap.as_ref().unwrap(), mtu_packets + 6);
}

/// Every RoCE frame in the capture parses with a valid ICRC, there are at least `min_frames`
/// of them (other frames are the port's own: ARP, neighbour discovery), `roce decode --strict`
/// agrees, and so do tshark (every field) and scapy (every ICRC), which share no code with us.
fn check_capture(env: &Env, path: &std::path::Path, min_frames: usize) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = pcap_file::pcap::PcapReader::new(file).unwrap();
    let mut frames = 0;
    while let Some(packet) = reader.next_packet() {
        let packet = packet.unwrap();
        let frame = match roce_wire::Frame::parse(&packet.data) {
            Ok(frame) => frame,
            Err(roce_wire::Error::NotRoce(_)) => continue,
            Err(e) => panic!("frame {frames} does not parse: {e}"),
        };
        assert!(frame.icrc().is_ok(), "frame {frames} has a bad ICRC");
        frames += 1;
    }
    assert!(frames >= min_frames, "only {frames} RoCE frames captured");
    let text = path.display().to_string();
    let decoded = env.run(&["decode", "--strict", &text]);
    assert!(decoded.status.success(), "{}", decoded.stderr);
    // And from outside: tshark field by field, scapy's ICRC for every frame.
    let roce = std::path::Path::new(env!("CARGO_BIN_EXE_roce"));
    if let Some(checked) = roce_tests::oracle::check_from_outside(roce, path) {
        assert_eq!(checked.packets, frames, "tshark sees every RoCE frame");
        assert_eq!(checked.icrcs, frames, "scapy recomputes every ICRC");
    }
}

#[test]
fn a_killed_host_leaves_nothing_the_nic_keeps_using() {
    let env = Env::new("khost");
    let (a, b) = cabled_pair(&env, 62);
    let _nic_a = env.nic(&a);
    let nic_b = env.nic(&b);
    let target = RegionName(env.name("target"));
    let (mut host_b, b_endpoint, rkey, va) = serve(&env, &b.name, &target.0);
    let host_a = Initiator::open(&env, &a.name, &env.name("init"));
    host_b.say(&host_a.endpoint(0));
    host_b.expect(|l| l.starts_with("connected to "));
    host_a.connect(&b_endpoint, 0, Mtu::M4096);
    host_a.post(
        1,
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        0,
        64,
    );
    assert_eq!(host_a.completion().status, WcStatus::Success);

    let qpn = u32::from_str_radix(&b_endpoint[5..11], 16).unwrap();
    let ring = format!("{}-qp{qpn}", b.name);
    assert!(maps_memfd(nic_b.pid(), &ring));
    host_b.signal(libc::SIGKILL);
    host_b.wait(PATIENCE);
    // The NIC noticed the closed connection and destroyed B's QP with its rings...
    eventually("B's rings unmapped", || !maps_memfd(nic_b.pid(), &ring));
    // ...so the next write finds no QP: the NIC drops it and A's retries run out.
    let observer = SocketBackend::connect_at(&b.name, &env.socket(&b.name)).unwrap();
    let observer = Context::open(observer).unwrap();
    let unknown_before = observer.counters().unwrap().rx_unknown_qp;
    host_a.post(
        2,
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        0,
        64,
    );
    let wc = host_a.completion();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::RetryExcErr));
    assert!(observer.counters().unwrap().rx_unknown_qp > unknown_before);
}

#[test]
fn a_killed_nic_fails_the_hosts_next_verb_instead_of_hanging() {
    let env = Env::new("knic");
    let (a, _b) = cabled_pair(&env, 63);
    let mut nic = env.nic(&a);
    let host = Initiator::open(&env, &a.name, &env.name("init"));
    nic.signal(libc::SIGKILL);
    nic.wait(PATIENCE);
    let gone = format!("the NIC {} has stopped", a.name);
    let started = Instant::now();
    let mut wc = [Wc::default()];
    let waited = host.cq.try_wait(&mut wc, Some(Duration::from_secs(60)));
    assert_eq!(waited.unwrap_err().to_string(), gone);
    assert!(started.elapsed() < Duration::from_secs(10));
    let posted = host.qp.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: &[host.mr.sge(0, 8)],
        flags: SendFlags::SIGNALED,
        ud: None,
    }]);
    assert_eq!(posted.unwrap_err().to_string(), gone);
    assert_eq!(host.qp.query().unwrap_err().to_string(), gone);
    assert_eq!(host.ctx.alloc_pd().err().unwrap().to_string(), gone);
    // The socket file is left behind by a killed NIC: nobody answers on it.
    let err = SocketBackend::connect_at(&a.name, &env.socket(&a.name))
        .err()
        .unwrap();
    assert!(matches!(err, VerbsError::NoDevice { .. }), "{err}");
    // Its rings and doorbells were memfds: nothing of it is left in /dev/shm.
    assert_eq!(shm_files(&format!("{}-", a.name)), Vec::<String>::new());
    // A new NIC of the same name replaces the stale socket.
    let _again = env.nic(&a);
    assert!(SocketBackend::connect_at(&a.name, &env.socket(&a.name)).is_ok());
}

#[test]
fn sigterm_flushes_posted_work_and_removes_what_the_nic_made() {
    let env = Env::new("term");
    let (mut a, _b) = cabled_pair(&env, 64);
    a.pcap = Some(env.dir.join("a.pcap"));
    let mut nic = env.nic(&a);
    let host = Initiator::open(&env, &a.name, &env.name("init"));
    let sge = [host.mr.sge(0, 64)];
    let recv = |wr_id| RecvWr {
        wr_id,
        sg_list: &sge,
    };
    host.qp.modify(&QpAttr::init(Access::LOCAL_WRITE)).unwrap();
    host.qp.post_recv(&[recv(7), recv(8)]).unwrap();
    let ring = format!("{}-qp{}", a.name, host.qp.qp_num());
    assert!(maps_memfd(nic.pid(), &ring) && maps_memfd(nic.pid(), &format!("{}-doorbell", a.name)));

    nic.signal(libc::SIGTERM);
    assert!(nic.wait(PATIENCE).success(), "{}", nic.stderr());
    nic.expect(|l| l == format!("{} stopped", a.name));
    // The posted receives come back flushed, read from the rings after the NIC is gone.
    for wr_id in [7, 8] {
        let wc = host.completion();
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::WrFlushErr));
    }
    let mut wc = [Wc::default()];
    let err = host.cq.try_wait(&mut wc, Some(PATIENCE)).unwrap_err();
    assert!(matches!(err, VerbsError::DeviceGone { .. }), "{err}");
    assert!(!env.socket(&a.name).exists(), "socket left behind");
    assert_eq!(shm_files(&format!("{}-", a.name)), Vec::<String>::new());
    // The capture was flushed and closed: it reads to its end.
    let file = std::fs::File::open(a.pcap.as_ref().unwrap()).unwrap();
    let mut reader = pcap_file::pcap::PcapReader::new(file).unwrap();
    while let Some(packet) = reader.next_packet() {
        packet.unwrap();
    }
}

#[test]
fn a_nic_whose_output_pipe_closed_still_stops_cleanly() {
    use std::io::BufRead;
    let env = Env::new("pipe");
    let (a, _b) = cabled_pair(&env, 65);
    let link = a.link.clone();
    let args = ["nic", "--name", &a.name, "--ip", &a.ip, "--link", &link];
    let mut child = env
        .roce(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    out.read_line(&mut ready).unwrap();
    assert!(ready.starts_with(&format!("{} ready", a.name)), "{ready}");
    drop(out);
    // SAFETY: kill(2) of our own child, by its PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let done = child.wait_with_output().unwrap();
    assert!(done.status.success(), "{done:?}");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!env.socket(&a.name).exists());
}

#[test]
fn a_hang_up_stops_a_nic_cleanly_too() {
    let env = Env::new("hup");
    let (a, _b) = cabled_pair(&env, 66);
    let mut nic = env.nic(&a);
    assert!(env.socket(&a.name).exists());
    nic.signal(libc::SIGHUP);
    assert!(nic.wait(PATIENCE).success(), "{}", nic.stderr());
    assert!(!env.socket(&a.name).exists(), "the socket was left behind");
}
