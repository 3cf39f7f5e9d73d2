//! RC RDMA WRITE between two `roce nic` processes over the UDP cable on loopback, against the
//! ceilings of that link measured in the same run: the same bytes, in datagrams of the same
//! sizes as the cable's frames, sent by this process to a UDP receiver in another — one
//! datagram per system call (`udp_*`), and batched as the cable batches them, with
//! sendmmsg/recvmmsg and UDP GSO (`udp_batched_*`). And the same WRITEs between two `roce nic`
//! processes on a shared-memory link (`shm_*`), against two NICs in this process on the
//! in-process cable (`inprocess_*`).
//!
//! - `write_1MiB` / `udp_1MiB` / `udp_batched_1MiB`: goodput of 1 MiB messages at path MTU
//!   4096 (targets: >= 70% of batched UDP).
//! - `write_64B` / `udp_64B` / `udp_batched_64B`: message rate of 64-byte writes.
//! - `shm_1MiB` / `inprocess_1MiB`: goodput over shared memory (target: >= 60% of in-process).
//!
//! After criterion's figures, each pair is also run in alternating rounds and their ratio
//! printed: on a shared two-core machine the load changes between criterion's groups.
//!
//! The initiating host is this process (the `roce_nic::host` library), the target host a
//! `roce host serve`; the NICs do the work. The UDP baseline is flow-controlled by a window
//! and acknowledgements, as RC is; any loss is charged to it (its time is scaled by
//! sent/received), so it is a goodput too. `cargo bench -p roce-cli --bench cable`.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use roce_hostmem::{Access, Region};
use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::host::SocketBackend;
use roce_nic::link::udp_batch::{UdpBatch, MAX_BATCH};
use roce_nic::link::{mem, shm};
use roce_nic::testbed::{self, Pair};
use roce_nic::verbs::*;

/// Set in the environment of the child that plays the UDP receiver.
const SINK_ROLE: &str = "ROCE_CABLE_BENCH_SINK";
/// Set (to anything) when that receiver takes datagrams by the batch.
const SINK_BATCHED: &str = "ROCE_CABLE_BENCH_SINK_BATCHED";
const MIB: u64 = 1 << 20;
/// Bytes a RoCE frame adds to its payload on the cable: Ethernet, IPv4, UDP, BTH, ICRC (a
/// first or only packet also has a 16-byte RETH).
const FRAME_OVERHEAD: usize = 14 + 20 + 8 + 12 + 4;
const RETH: usize = 16;
/// Writes in flight at once, and how often one is signalled.
const DEPTH_1MIB: u64 = 8;
const DEPTH_64B: u64 = 512;
const SIGNAL_EVERY: u64 = 64;
/// Datagrams the UDP baseline sends ahead of the sink's acknowledgements (about 2 MiB of full
/// frames, well inside the socket buffers), and how often the sink acknowledges, like RC's
/// coalesced ACKs.
const UDP_WINDOW: u64 = 512;
const UDP_ACK_EVERY: u64 = 32;

fn main() {
    if let Ok(addrs) = std::env::var(SINK_ROLE) {
        udp_sink(&addrs, std::env::var_os(SINK_BATCHED).is_some());
        return;
    }
    let cable = Setup::start(Medium::Cable);
    let over_shm = Setup::start(Medium::Shm);
    let inprocess = InProcess::start();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let plain = UdpBaseline::start(false);
    let batched = UdpBaseline::start(true);
    let frames_1mib = frames_for(MIB as usize, 4096);
    let frames_64 = frames_for(64, 4096);
    let mut group = c.benchmark_group("cable");
    group.throughput(Throughput::Bytes(MIB));
    group.bench_function("write_1MiB", |b| {
        b.iter_custom(|iters| cable.writes(iters, MIB as u32, DEPTH_1MIB))
    });
    group.bench_function("udp_1MiB", |b| {
        b.iter_custom(|iters| plain.blast(iters, &frames_1mib))
    });
    group.bench_function("udp_batched_1MiB", |b| {
        b.iter_custom(|iters| batched.blast(iters, &frames_1mib))
    });
    group.bench_function("shm_1MiB", |b| {
        b.iter_custom(|iters| over_shm.writes(iters, MIB as u32, DEPTH_1MIB))
    });
    group.bench_function("inprocess_1MiB", |b| {
        b.iter_custom(|iters| inprocess.writes(iters, MIB as u32, DEPTH_1MIB))
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("write_64B", |b| {
        b.iter_custom(|iters| cable.writes(iters, 64, DEPTH_64B))
    });
    group.bench_function("udp_64B", |b| {
        b.iter_custom(|iters| plain.blast(iters, &frames_64))
    });
    group.bench_function("udp_batched_64B", |b| {
        b.iter_custom(|iters| batched.blast(iters, &frames_64))
    });
    group.finish();
    c.final_summary();
    paired(
        "1 MiB RDMA WRITE goodput, cable vs one-datagram-per-call UDP",
        || cable.writes(64, MIB as u32, DEPTH_1MIB),
        || plain.blast(64, &frames_1mib),
        64.0,
        "MiB/s",
    );
    paired(
        "1 MiB RDMA WRITE goodput, cable vs batched UDP",
        || cable.writes(64, MIB as u32, DEPTH_1MIB),
        || batched.blast(64, &frames_1mib),
        64.0,
        "MiB/s",
    );
    paired(
        "1 MiB RDMA WRITE goodput, shm link vs in-process",
        || over_shm.writes(64, MIB as u32, DEPTH_1MIB),
        || inprocess.writes(64, MIB as u32, DEPTH_1MIB),
        64.0,
        "MiB/s",
    );
    paired(
        "64 B RDMA WRITE rate, cable vs one-datagram-per-call UDP",
        || cable.writes(20_000, 64, DEPTH_64B),
        || plain.blast(20_000, &frames_64),
        20_000.0 / 1e3,
        "k/s",
    );
    paired(
        "64 B RDMA WRITE rate, cable vs batched UDP",
        || cable.writes(20_000, 64, DEPTH_64B),
        || batched.blast(20_000, &frames_64),
        20_000.0 / 1e3,
        "k/s",
    );
}

/// Rounds of the RDMA run and the UDP run back to back, so both see the same load on a shared
/// machine; prints the medians and the median of the per-round ratios.
fn paired(
    what: &str,
    rdma: impl Fn() -> Duration,
    udp: impl Fn() -> Duration,
    units: f64,
    unit: &str,
) {
    const ROUNDS: usize = 7;
    let mut rates = Vec::new();
    for _ in 0..ROUNDS {
        let (r, u) = (rdma(), udp());
        rates.push((units / r.as_secs_f64(), units / u.as_secs_f64()));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratio = median(rates.iter().map(|(r, u)| r / u).collect());
    println!(
        "{what}: {:.0} {unit} against {:.0} {unit}; ratio {:.0}% \
         (medians of {ROUNDS} paired rounds)",
        median(rates.iter().map(|p| p.0).collect()),
        median(rates.iter().map(|p| p.1).collect()),
        100.0 * ratio
    );
}

/// The cable datagram sizes of one message of `len` bytes at path MTU `mtu`.
fn frames_for(len: usize, mtu: usize) -> Vec<usize> {
    let packets = len.div_ceil(mtu).max(1);
    (0..packets)
        .map(|i| {
            let payload = (len - i * mtu).min(mtu);
            FRAME_OVERHEAD + payload + if i == 0 { RETH } else { 0 }
        })
        .collect()
}

/// A child process that is killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: kill(2) of our own child, by its PID; SIGTERM lets a NIC clean up.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What joins the two NIC processes.
#[derive(Clone, Copy)]
enum Medium {
    Cable,
    Shm,
}

/// Two NIC processes, a serving target host, and this process's initiating QP.
struct Setup {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
    rkey: u32,
    va: u64,
    _pd: ProtectionDomain,
    _ctx: Context,
    _region: Arc<Region>,
    _target: (Guard, ChildStdin),
    _nics: [Guard; 2],
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn roce(dir: &std::path::Path, args: &[&str], stdin: Stdio) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

fn line_starting(out: &mut BufReader<ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "no {prefix} line");
        if line.starts_with(prefix) {
            return line.trim_end().to_owned();
        }
    }
}

impl Setup {
    fn start(medium: Medium) -> Setup {
        let id = std::process::id();
        let tag = match medium {
            Medium::Cable => "c",
            Medium::Shm => "s",
        };
        let dir = TempDir(std::env::temp_dir().join(format!("roce-bench-{id}{tag}")));
        std::fs::create_dir_all(&dir.0).unwrap();
        let (pa, pb) = (free_port(), free_port());
        let (na, nb) = (format!("bench{id}{tag}a"), format!("bench{id}{tag}b"));
        let shm_name = shm::unique_name("bench");
        let nic = |name: &str, ip: &str, local: u16, remote: u16, peer: &str| {
            let link = match medium {
                Medium::Cable => format!("cable:127.0.0.1:{local},127.0.0.1:{remote}"),
                Medium::Shm => format!("shm:{shm_name}"),
            };
            let (child, mut out) = roce(
                &dir.0,
                &[
                    "nic", "--name", name, "--ip", ip, "--link", &link, "--neigh", peer,
                ],
                Stdio::null(),
            );
            line_starting(&mut out, &format!("{name} ready"));
            Guard(child)
        };
        let nics = [
            nic(&na, "10.99.0.1", pa, pb, "10.99.0.2=02:00:0a:63:00:02"),
            nic(&nb, "10.99.0.2", pb, pa, "10.99.0.1=02:00:0a:63:00:01"),
        ];
        let region_b = format!("bench{id}{tag}target");
        let (mut target, mut out) = roce(
            &dir.0,
            &[
                "host", "serve", "--nic", &nb, "--region", &region_b, "--size", "16M",
            ],
            Stdio::piped(),
        );
        let peer = line_starting(&mut out, "local ");
        let memory = line_starting(&mut out, "memory ");
        let field = |name: &str| {
            let v = memory.split_whitespace().find_map(|w| w.strip_prefix(name));
            u64::from_str_radix(v.unwrap().trim_start_matches("0x"), 16).unwrap()
        };
        let (rkey, va) = (field("rkey=") as u32, field("va="));

        let socket = dir.0.join("roce").join(format!("{na}.sock"));
        let ctx = Context::open(SocketBackend::connect_at(&na, &socket).unwrap()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4096).unwrap();
        let cap = QpCap {
            max_send_wr: 1024,
            ..QpCap::default()
        };
        let qp = pd.create_qp(QpType::Rc, &cq, &cq, cap).unwrap();
        let region = Arc::new(Region::create(&format!("bench{id}{tag}init"), 16 << 20).unwrap());
        region.write(0, &vec![0x5a; region.len()]).unwrap();
        let mr = pd
            .register(&region, 0, region.len(), Access::LOCAL_WRITE)
            .unwrap();
        let gid = ctx.gid(1).unwrap();
        let mut stdin = target.stdin.take().unwrap();
        use std::io::Write;
        writeln!(stdin, "0000:{:06x}:000000:{}", qp.qp_num(), gid.to_hex()).unwrap();
        line_starting(&mut out, "connected to ");
        let fields: Vec<&str> = peer["local ".len()..].splitn(4, ':').collect();
        let qpn = u32::from_str_radix(fields[1], 16).unwrap();
        let psn = u32::from_str_radix(fields[2], 16).unwrap();
        qp.modify(&QpAttr::init(Access::LOCAL_WRITE)).unwrap();
        let av = AddressVector::to(Gid::parse(fields[3]).unwrap(), 1);
        qp.modify(&QpAttr::rtr(av, qpn, psn, Mtu::M4096)).unwrap();
        qp.modify(&QpAttr::rts(0)).unwrap();
        Setup {
            qp,
            cq,
            mr,
            rkey,
            va,
            _pd: pd,
            _ctx: ctx,
            _region: region,
            _target: (Guard(target), stdin),
            _nics: nics,
            _dir: dir,
        }
    }

    /// `n` RDMA WRITEs of `len` bytes, at most `depth` in flight; returns the time until the
    /// last one completed.
    fn writes(&self, n: u64, len: u32, depth: u64) -> Duration {
        writes(
            &self.qp,
            &self.cq,
            &self.mr,
            (self.rkey, self.va),
            n,
            len,
            depth,
        )
    }
}

/// Two NICs in this process on the in-process cable: the ceiling the shm link is held to.
struct InProcess(Pair);

impl InProcess {
    fn start() -> InProcess {
        let (a, b) = mem::pair();
        let pair = testbed::pair_over(a, b, QpType::Rc, Mtu::M4096, 16 << 20, |_| {}, |_| {})
            .expect("in-process test bench");
        InProcess(pair)
    }

    fn writes(&self, n: u64, len: u32, depth: u64) -> Duration {
        let (a, b) = (&self.0.a, &self.0.b);
        writes(&a.qp, &a.cq, &a.mr, (b.mr.rkey, b.mr.va), n, len, depth)
    }
}

/// `n` RDMA WRITEs of `len` bytes from `qp` to `(rkey, va)`, at most `depth` in flight;
/// returns the time until the last one completed.
fn writes(
    qp: &QueuePair,
    cq: &CompletionQueue,
    mr: &MemoryRegion,
    (rkey, va): (u32, u64),
    n: u64,
    len: u32,
    depth: u64,
) -> Duration {
    let slots = (16 * MIB / u64::from(len)).max(1);
    let mut wcs = [Wc::default(); 64];
    let signal_every = SIGNAL_EVERY.min(depth / 2).max(1);
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < n {
        while posted < n && posted - done < depth {
            let offset = (posted % slots) * u64::from(len);
            let last = posted + 1 == n;
            let signaled = last || (posted + 1) % signal_every == 0;
            qp.post_send(&[SendWr {
                wr_id: posted + 1,
                op: SendOp::RdmaWrite {
                    remote_addr: va + offset,
                    rkey,
                },
                sg_list: &[mr.sge(offset, len)],
                flags: if signaled {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty_flags()
                },
                ud: None,
            }])
            .unwrap();
            posted += 1;
        }
        let k = cq
            .try_wait(&mut wcs, Some(Duration::from_secs(10)))
            .unwrap();
        assert!(k > 0, "no completion within 10 s");
        for wc in &wcs[..k] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            // A signalled completion retires every request before it.
            done = done.max(wc.wr_id);
        }
    }
    start.elapsed()
}

/// A UDP receiver in another process (this bench binary in its sink role).
struct UdpBaseline {
    socket: UdpSocket,
    /// Send by the batch, as the cable does.
    batch: Option<std::cell::RefCell<UdpBatch>>,
    _child: Guard,
}

impl UdpBaseline {
    fn start(batched: bool) -> UdpBaseline {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        grow(&socket);
        let sink: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        // Both ends connected, as the cable's sockets are (no route lookup per datagram).
        socket.connect(sink).unwrap();
        let ends = format!("{sink},{}", socket.local_addr().unwrap());
        let mut sink = Command::new(std::env::current_exe().unwrap());
        sink.env(SINK_ROLE, ends).stdout(Stdio::piped());
        if batched {
            sink.env(SINK_BATCHED, "1");
        }
        let child = sink.spawn().unwrap();
        let mut child = Guard(child);
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        line_starting(&mut out, "sink ready");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        UdpBaseline {
            socket,
            batch: batched.then(|| std::cell::RefCell::new(UdpBatch::new(true))),
            _child: child,
        }
    }

    /// Sends `n` messages as datagrams of `frames` sizes, at most [`UDP_WINDOW`] ahead of
    /// what the sink acknowledged (a blast would only measure how fast a 2-core machine
    /// drops datagrams); returns the time until the sink confirmed, scaled up by any loss.
    fn blast(&self, n: u64, frames: &[usize]) -> Duration {
        let buf = vec![0x5au8; frames.iter().copied().max().unwrap_or(0)];
        let mut ack = [0u8; 16];
        let (mut sent, mut acked) = (0u64, 0u64);
        let mut pending: Vec<&[u8]> = Vec::with_capacity(MAX_BATCH);
        let start = Instant::now();
        for _ in 0..n {
            for &size in frames {
                while sent + pending.len() as u64 - acked >= UDP_WINDOW {
                    if !pending.is_empty() {
                        sent += self.send(&mut pending);
                        continue;
                    }
                    match self.socket.recv(&mut ack) {
                        Ok(8) => {
                            acked = acked.max(u64::from_le_bytes(ack[..8].try_into().unwrap()))
                        }
                        Ok(_) => {}
                        // Acknowledgements stopped: what is missing is lost.
                        Err(_) => acked = sent,
                    }
                }
                pending.push(&buf[..size]);
                if self.batch.is_none() || pending.len() == MAX_BATCH {
                    sent += self.send(&mut pending);
                }
            }
        }
        sent += self.send(&mut pending);
        let received = self.count();
        let elapsed = start.elapsed();
        assert!(received > 0, "the UDP sink received nothing");
        elapsed.mul_f64(sent as f64 / received.min(sent) as f64)
    }

    /// Sends what is pending, by the batch or one by one; returns how many were handed over
    /// (a datagram the receiver has no room for is lost, as on the cable, and counted sent).
    fn send(&self, pending: &mut Vec<&[u8]>) -> u64 {
        let n = pending.len() as u64;
        match &self.batch {
            Some(batch) => {
                let _ = batch.borrow_mut().send(self.socket.as_fd(), pending);
            }
            None => {
                for datagram in pending.iter() {
                    let _ = self.socket.send(datagram);
                }
            }
        }
        pending.clear();
        n
    }

    /// Asks the sink how many datagrams arrived since the last question (its answer is the
    /// one 9-byte reply; 8-byte ones are acknowledgements still on their way).
    fn count(&self) -> u64 {
        let mut reply = [0u8; 16];
        for _ in 0..100 {
            let _ = self.socket.send(b"?");
            loop {
                match self.socket.recv(&mut reply) {
                    Ok(9) => return u64::from_le_bytes(reply[1..9].try_into().unwrap()),
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        }
        panic!("the UDP sink does not answer");
    }
}

/// Large socket buffers, as the cable has.
fn grow(socket: &UdpSocket) {
    use rustix::net::sockopt;
    let _ = sockopt::set_socket_recv_buffer_size_force(socket, 8 << 20);
    let _ = sockopt::set_socket_send_buffer_size_force(socket, 8 << 20);
    let _ = sockopt::set_socket_recv_buffer_size(socket, 8 << 20);
    let _ = sockopt::set_socket_send_buffer_size(socket, 8 << 20);
}

/// The receiver, bound to the first address of `ends` and connected to the second: counts
/// datagrams and acknowledges every [`UDP_ACK_EVERY`]; a one-byte datagram asks for the count
/// since the last ask. `batched`: it takes them with recvmmsg, as the cable does.
fn udp_sink(ends: &str, batched: bool) {
    let (local, peer) = ends.split_once(',').unwrap();
    let socket = UdpSocket::bind(local).unwrap();
    socket.connect(peer).unwrap();
    grow(&socket);
    println!("sink ready");
    let pool = BufPool::new(MAX_BATCH);
    let mut bufs: Vec<FrameBuf> = (0..if batched { MAX_BATCH } else { 1 })
        .map(|_| pool.take())
        .collect();
    let mut batch = UdpBatch::new(true);
    let mut count = 0u64;
    let mut acked = 0u64;
    // Ends when its parent kills it; a bound keeps a forgotten sink from living forever.
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        let mut poll = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut poll, 1, 1000) } <= 0 {
            continue;
        }
        let n = if batched {
            batch.recv(socket.as_fd(), &mut bufs).unwrap_or(0)
        } else {
            match socket.recv(bufs[0].space()) {
                Ok(len) => {
                    bufs[0].set_len(len);
                    1
                }
                Err(_) => 0,
            }
        };
        for buf in &bufs[..n] {
            if buf.len() == 1 {
                let mut answer = [1u8; 9];
                answer[1..].copy_from_slice(&count.to_le_bytes());
                let _ = socket.send(&answer);
                count = 0;
                acked = 0;
            } else {
                count += 1;
            }
        }
        if count >= acked + UDP_ACK_EVERY {
            acked = count - count % UDP_ACK_EVERY;
            let _ = socket.send(&acked.to_le_bytes());
        }
    }
}
