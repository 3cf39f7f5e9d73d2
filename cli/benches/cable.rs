//! RC RDMA WRITE between two `roce nic` processes over the UDP cable on loopback, against the
//! ceilings of that link measured in the same run: the same bytes, in datagrams of the same
//! sizes as the cable's frames, sent by this process to a UDP receiver in another — one
//! datagram per system call (`udp_*`), and batched as the cable batches them, with
//! sendmmsg/recvmmsg with UDP GSO and GRO (`udp_batched_*`). And the same WRITEs between two `roce nic`
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
//! `roce host serve`; the NICs do the work (see `roce_nic::bench::procs`). The UDP baseline is
//! `roce_nic::bench::udp`: flow-controlled as RC is, and charged for any loss.
//! `cargo bench -p roce-cli --bench cable`; `roce bench --all` measures the same pairs.
//!
//! With `ROCE_BENCH_BEFORE=PATH` set to another build's `roce` program (kept from before a
//! change), the cable WRITEs of this build's NICs are also paired with those of that build's,
//! in alternating rounds: a before/after ratio that a loaded machine does not blur.
//! `ROCE_BENCH_PAIRS=TEXT` runs only the paired rounds whose description contains TEXT (say
//! `ROCE_BENCH_BEFORE` or `batched`), to repeat one pair often while the load is the same.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use roce_nic::bench::procs::{Medium, NicPair};
use roce_nic::bench::udp::{self, frames_for, UdpBaseline};
use roce_nic::bench::Initiator;
use roce_nic::link::mem;
use roce_nic::testbed::{self, Pair};
use roce_nic::verbs::*;

const MIB: u64 = 1 << 20;
/// Writes in flight at once, and how often one is signalled.
const DEPTH_1MIB: u64 = 8;
const DEPTH_64B: u64 = 512;
const SIGNAL_EVERY: u64 = 64;

fn main() {
    if let Some((ends, batched)) = udp::sink_requested() {
        udp::run_sink(&ends, batched).expect("the UDP receiver");
        return;
    }
    let roce = Path::new(env!("CARGO_BIN_EXE_roce"));
    let cable = NicPair::start(roce, Medium::Cable, "bench").expect("two NICs on a cable");
    let over_shm = NicPair::start(roce, Medium::Shm, "bench").expect("two NICs on shm");
    let inprocess = InProcess::start();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let sink = || Command::new(std::env::current_exe().expect("this bench's path"));
    let plain = UdpBaseline::start(false, sink()).expect("a UDP receiver");
    let batched = UdpBaseline::start(true, sink()).expect("a UDP receiver");
    let frames_1mib = frames_for(MIB as usize, 4096);
    let frames_64 = frames_for(64, 4096);
    let mut group = c.benchmark_group("cable");
    group.throughput(Throughput::Bytes(MIB));
    group.bench_function("write_1MiB", |b| {
        b.iter_custom(|iters| nic_writes(&cable, iters, MIB as u32, DEPTH_1MIB))
    });
    group.bench_function("udp_1MiB", |b| {
        b.iter_custom(|iters| plain.blast(iters, &frames_1mib).unwrap())
    });
    group.bench_function("udp_batched_1MiB", |b| {
        b.iter_custom(|iters| batched.blast(iters, &frames_1mib).unwrap())
    });
    group.bench_function("shm_1MiB", |b| {
        b.iter_custom(|iters| nic_writes(&over_shm, iters, MIB as u32, DEPTH_1MIB))
    });
    group.bench_function("inprocess_1MiB", |b| {
        b.iter_custom(|iters| inprocess.writes(iters, MIB as u32, DEPTH_1MIB))
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("write_64B", |b| {
        b.iter_custom(|iters| nic_writes(&cable, iters, 64, DEPTH_64B))
    });
    group.bench_function("udp_64B", |b| {
        b.iter_custom(|iters| plain.blast(iters, &frames_64).unwrap())
    });
    group.bench_function("udp_batched_64B", |b| {
        b.iter_custom(|iters| batched.blast(iters, &frames_64).unwrap())
    });
    group.finish();
    c.final_summary();
    paired(
        "1 MiB RDMA WRITE goodput, cable vs one-datagram-per-call UDP",
        || nic_writes(&cable, 64, MIB as u32, DEPTH_1MIB),
        || plain.blast(64, &frames_1mib).unwrap(),
        64.0,
        "MiB/s",
    );
    paired(
        "1 MiB RDMA WRITE goodput, cable vs batched UDP",
        || nic_writes(&cable, 64, MIB as u32, DEPTH_1MIB),
        || batched.blast(64, &frames_1mib).unwrap(),
        64.0,
        "MiB/s",
    );
    paired(
        "1 MiB RDMA WRITE goodput, shm link vs in-process",
        || nic_writes(&over_shm, 64, MIB as u32, DEPTH_1MIB),
        || inprocess.writes(64, MIB as u32, DEPTH_1MIB),
        64.0,
        "MiB/s",
    );
    if let Some(before) = std::env::var_os("ROCE_BENCH_BEFORE").map(PathBuf::from) {
        let old = NicPair::start(&before, Medium::Cable, "before").expect("the other build's NICs");
        let cpu = [cpu_meter(&cable), cpu_meter(&old)];
        paired(
            "1 MiB RDMA WRITE goodput, cable: this build vs ROCE_BENCH_BEFORE",
            || cpu[0].run(|| nic_writes(&cable, 64, MIB as u32, DEPTH_1MIB), 64.0),
            || cpu[1].run(|| nic_writes(&old, 64, MIB as u32, DEPTH_1MIB), 64.0),
            64.0,
            "MiB/s",
        );
        cpu_report(&cpu, "ms per MiB");
        let cpu = [cpu_meter(&cable), cpu_meter(&old)];
        paired(
            "64 B RDMA WRITE rate, cable: this build vs ROCE_BENCH_BEFORE",
            || cpu[0].run(|| nic_writes(&cable, 20_000, 64, DEPTH_64B), 20.0),
            || cpu[1].run(|| nic_writes(&old, 20_000, 64, DEPTH_64B), 20.0),
            20_000.0 / 1e3,
            "k/s",
        );
        cpu_report(&cpu, "µs per write");
    }
    paired(
        "64 B RDMA WRITE rate, cable vs one-datagram-per-call UDP",
        || nic_writes(&cable, 20_000, 64, DEPTH_64B),
        || plain.blast(20_000, &frames_64).unwrap(),
        20_000.0 / 1e3,
        "k/s",
    );
    paired(
        "64 B RDMA WRITE rate, cable vs batched UDP",
        || nic_writes(&cable, 20_000, 64, DEPTH_64B),
        || batched.blast(20_000, &frames_64).unwrap(),
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
    if std::env::var("ROCE_BENCH_PAIRS").is_ok_and(|only| !what.contains(&only)) {
        return;
    }
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

/// The CPU time two NIC processes spend per unit of work over the rounds it measured: each
/// round's difference of [`NicPair::nic_cpu_ns`], summed, with the units of work done.
struct CpuMeter<'a> {
    pair: &'a NicPair,
    spent: std::cell::Cell<([u64; 2], f64)>,
}

fn cpu_meter(pair: &NicPair) -> CpuMeter<'_> {
    CpuMeter {
        pair,
        spent: std::cell::Cell::new(([0; 2], 0.0)),
    }
}

impl CpuMeter<'_> {
    /// Runs `round` (which does `units` of work), adding the NICs' CPU time to the total.
    fn run(&self, round: impl FnOnce() -> Duration, units: f64) -> Duration {
        let before = self.pair.nic_cpu_ns();
        let elapsed = round();
        if let (Some(b), Some(a)) = (before, self.pair.nic_cpu_ns()) {
            let (mut ns, mut done) = self.spent.get();
            ns[0] += a[0] - b[0];
            ns[1] += a[1] - b[1];
            done += units;
            self.spent.set((ns, done));
        }
        elapsed
    }
}

/// Prints the CPU time per unit of this build's NICs and the other build's: sender (the
/// initiator's NIC) and receiver (the target's), in milliseconds per `unit`.
fn cpu_report(meters: &[CpuMeter<'_>; 2], unit: &str) {
    let per = |m: &CpuMeter<'_>| {
        let (ns, done) = m.spent.get();
        let ms = |n: u64| n as f64 / 1e6 / done.max(1.0);
        (ms(ns[0]), ms(ns[1]))
    };
    let ((s, r), (os, or)) = (per(&meters[0]), per(&meters[1]));
    println!(
        "  NIC CPU time, {unit} (sender + receiver): this build {s:.3} + {r:.3}, \
         ROCE_BENCH_BEFORE {os:.3} + {or:.3}; ratio {:.0}%",
        100.0 * (s + r) / (os + or)
    );
}

/// `n` RDMA WRITEs of `len` bytes from two NIC processes' initiator.
fn nic_writes(p: &NicPair, n: u64, len: u32, depth: u64) -> Duration {
    writes(p.initiator(), n, len, depth)
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
        writes(self.0.initiator(), n, len, depth)
    }
}

/// `n` RDMA WRITEs of `len` bytes from `p`, at most `depth` in flight; returns the time until
/// the last one completed.
fn writes(p: Initiator<'_>, n: u64, len: u32, depth: u64) -> Duration {
    let Initiator {
        qp,
        cq,
        mr,
        rkey,
        va,
        ..
    } = p;
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
