//! `roce bench --all` and `roce bench --qps`: every figure beside a baseline measured in the
//! same run, as a ratio, so that a regression shows at a glance on any machine (a shared one
//! moves both sides of a ratio together more than either alone).
//!
//! - in one process: 1 MiB WRITE goodput against memcpy, crc32fast, and one copy plus one CRC
//!   of every byte (the limit model of issue 16: one core per side can carry at most that);
//!   64 B message rate and latency;
//! - two `roce nic` processes over the UDP cable on loopback, against UDP carrying the same
//!   frames between two processes, one datagram per system call and batched;
//! - two `roce nic` processes over `shm:`, against two NICs in this process;
//! - many QPs sharing the load, against one QP; memory per idle QP;
//! - `roce decode --json` of a synthetic capture, against `tshark -T fields`.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use roce_nic::bench::procs::{Medium, NicPair};
use roce_nic::bench::qps::ManyQps;
use roce_nic::bench::udp::{frames_for, UdpBaseline};
use roce_nic::bench::{self, Initiator, Throughput, Until};
use roce_nic::link::mem;
use roce_nic::testbed;
use roce_nic::verbs::{Mtu, QpType, VerbsError};
use roce_wire::capture::{Reader, Writer};
use serde::Serialize;

use crate::Failure;

/// The QP counts of `--all` without `--qps` (8192 takes a while and memory: ask for it).
pub const DEFAULT_QPS: [usize; 3] = [1, 64, 1024];
/// Writes in flight, and per signalled batch, of the goodput and message-rate runs (as
/// `roce bench`).
const BIG: (usize, usize) = (16, 1);
const SMALL: (usize, usize) = (512, 32);
/// The fields `tshark -T fields` prints: like `roce decode --json`, it dissects every packet.
const TSHARK_FIELDS: [&str; 4] = [
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
];
/// The frames the synthetic capture repeats: every opcode over IPv4.
const EVERY_OPCODE: &[u8] = include_bytes!("../../../captures/every-opcode-ipv4.pcap");

/// What to run.
pub struct Plan {
    pub duration: Duration,
    pub mtu: Mtu,
    pub size: usize,
    /// Everything, or only the QP figures.
    pub all: bool,
    pub qps: Vec<usize>,
    /// Engine threads of the many-QP figures beside one thread (1: one thread alone).
    pub threads: usize,
    pub packets: usize,
    pub json: bool,
}

/// One figure beside its baseline.
#[derive(Serialize)]
struct Row {
    figure: String,
    value: f64,
    unit: &'static str,
    baseline: String,
    baseline_value: f64,
    /// figure / baseline.
    ratio: f64,
    /// The ratio issue 16 asks for, where it asks for one.
    target: Option<f64>,
}

/// The figures of one QP count.
#[derive(Serialize)]
struct QpFigures {
    qps: usize,
    threads: usize,
    gbit_per_s: f64,
    messages_per_s: f64,
    rss_bytes_per_idle_qp: u64,
    mapped_bytes_per_idle_qp: u64,
}

/// What prints, as lines or as one JSON object.
struct Report {
    json: bool,
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Report {
    /// Adds (and prints, unless JSON) a row.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        figure: impl Into<String>,
        value: f64,
        unit: &'static str,
        baseline: impl Into<String>,
        baseline_value: f64,
        target: Option<f64>,
    ) -> Result<(), Failure> {
        let row = Row {
            figure: figure.into(),
            value,
            unit,
            baseline: baseline.into(),
            baseline_value,
            ratio: value / baseline_value.max(f64::MIN_POSITIVE),
            target,
        };
        if !self.json {
            out!(
                "{:<34} {:>9} {:<7} vs {:<34} {:>9}  {:>7}{}",
                row.figure,
                figure_value(row.value),
                row.unit,
                row.baseline,
                figure_value(row.baseline_value),
                format!("{:.3}×", row.ratio),
                match row.target {
                    Some(t) => format!("  (target ≥ {t}×)"),
                    None => String::new(),
                }
            )?;
        }
        self.rows.push(row);
        Ok(())
    }

    /// A line of its own (a heading or a figure without a baseline), kept for the JSON too.
    fn note(&mut self, line: String) -> Result<(), Failure> {
        if !self.json {
            out!("{line}")?;
        }
        self.notes.push(line);
        Ok(())
    }
}

/// Three or four significant digits, always with a decimal point (the README's test compares
/// the shape of numbers).
fn figure_value(v: f64) -> String {
    match v {
        v if v >= 100.0 => format!("{v:.1}"),
        v if v >= 10.0 => format!("{v:.2}"),
        v => format!("{v:.3}"),
    }
}

fn verbs(e: VerbsError) -> Failure {
    Failure::new(format!("benchmark failed: {e}"))
}

fn io(what: &str) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure::new(format!("{what}: {e}"))
}

pub fn run(plan: Plan) -> Result<ExitCode, Failure> {
    let d = plan.duration;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default();
    let mut r = Report {
        json: plan.json,
        rows: Vec::new(),
        notes: Vec::new(),
    };
    r.note(format!(
        "every figure beside its baseline in this run; ratio = figure / baseline \
         ({cores} cores, load average {load}, {:.2} s per figure, path MTU {})",
        d.as_secs_f64(),
        plan.mtu
    ))?;
    let mut extra = serde_json::Map::new();
    if plan.all {
        in_process(&plan, cores, &mut r, &mut extra)?;
        between_processes(&plan, &mut r)?;
    }
    let qps = many_qps(&plan, &mut r)?;
    extra.insert("qps".into(), serde_json::to_value(&qps).unwrap_or_default());
    if plan.all {
        decode(&plan, &mut r, &mut extra)?;
    }
    if plan.json {
        let figures = serde_json::json!({
            "setup": {
                "cores": cores,
                "load_average": load,
                "seconds_per_figure": d.as_secs_f64(),
                "path_mtu": plan.mtu.bytes(),
                "size": plan.size,
            },
            "rows": r.rows,
            "extra": extra,
            "notes": r.notes,
        });
        out!("{figures}")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn in_process_pair(plan: &Plan) -> Result<testbed::Pair, Failure> {
    let (la, lb) = mem::pair();
    testbed::pair_over(la, lb, QpType::Rc, plan.mtu, 64 << 20, |_| {}, |_| {})
        .map_err(|e| Failure::new(format!("could not set up the test bench: {e}")))
}

fn writes(
    p: Initiator<'_>,
    size: usize,
    (depth, batch): (usize, usize),
    d: Duration,
) -> Result<Throughput, Failure> {
    bench::write_throughput(p, size, depth, batch, d).map_err(verbs)
}

fn in_process(
    plan: &Plan,
    cores: usize,
    r: &mut Report,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<(), Failure> {
    let (d, size, mtu) = (plan.duration, plan.size, plan.mtu.bytes() as usize);
    let pair = in_process_pair(plan)?;
    let copy = bench::memcpy_throughput(size, d);
    let crc = bench::crc32_throughput(size, mtu, d);
    let copy_crc = bench::copy_crc_throughput(size, mtu, d);
    let big = writes(pair.initiator(), size, BIG, d)?;
    let name = format!("in-process WRITE {}", super::human(size));
    r.row(
        &name,
        big.gbit_per_s(),
        "Gbit/s",
        format!("memcpy {}", super::human(size)),
        copy.gbit_per_s(),
        None,
    )?;
    r.row(
        &name,
        big.gbit_per_s(),
        "Gbit/s",
        "crc32fast",
        crc.gbit_per_s(),
        None,
    )?;
    r.row(
        &name,
        big.gbit_per_s(),
        "Gbit/s",
        "one copy + one CRC, one core",
        copy_crc.gbit_per_s(),
        None,
    )?;
    let sides = cores.min(2) as f64;
    r.row(
        &name,
        big.gbit_per_s(),
        "Gbit/s",
        format!("the limit: that on {sides} cores"),
        copy_crc.gbit_per_s() * sides,
        None,
    )?;
    let small = writes(pair.initiator(), 64, SMALL, d)?;
    let lat = bench::write_latency(pair.initiator(), 64, 20_000, d).map_err(verbs)?;
    let c = pair.dev_a.counters();
    r.note(format!(
        "in-process WRITE 64 B: {:.3} M messages/s (against one QP in the QP rows); latency median {:.2} µs, p99 {:.2} µs, min {:.2} µs ({} samples); {} retransmitted, {} tail probes",
        small.messages_per_s() / 1e6,
        super::us(lat.median),
        super::us(lat.p99),
        super::us(lat.min),
        lat.samples,
        c.retransmitted_packets,
        c.tail_probes,
    ))?;
    extra.insert(
        "in_process".into(),
        serde_json::json!({
            "write_gbit_per_s": big.gbit_per_s(),
            "small_write_messages_per_s": small.messages_per_s(),
            "latency": {
                "size": 64,
                "median_us": super::us(lat.median),
                "p99_us": super::us(lat.p99),
                "min_us": super::us(lat.min),
                "samples": lat.samples,
            },
            "recovery": {
                "retransmitted_packets": c.retransmitted_packets,
                "retransmit_timeouts": c.retransmit_timeouts,
                "tail_probes": c.tail_probes,
            },
        }),
    );
    Ok(())
}

/// This program, to start NICs, the UDP receiver and the decoder with.
fn roce() -> Result<PathBuf, Failure> {
    std::env::current_exe().map_err(io("finding this program"))
}

fn between_processes(plan: &Plan, r: &mut Report) -> Result<(), Failure> {
    let (d, size) = (plan.duration, plan.size);
    let roce = roce()?;
    let sink = || {
        let mut c = Command::new(&roce);
        c.arg("bench-udp-sink");
        c
    };
    let cable = NicPair::start(&roce, Medium::Cable, "bench").map_err(io("two NICs on a cable"))?;
    let plain = UdpBaseline::start(false, sink()).map_err(io("a UDP receiver"))?;
    let batched = UdpBaseline::start(true, sink()).map_err(io("a UDP receiver"))?;
    let udp = |u: &UdpBaseline, len: usize| {
        u.run(&frames_for(len, 4096), d)
            .map_err(io("the UDP baseline"))
    };
    let mib_per_s =
        |t: &Throughput, len: usize| t.messages_per_s() * len as f64 / f64::from(1 << 20);
    let nic_before = cable.nic_cpu_ns();
    let big = writes(cable.initiator(), size, BIG, d)?;
    let nic_cpu = spent(nic_before, cable.nic_cpu_ns());
    let p = udp(&plain, size)?;
    let udp_before = batched.cpu_ns();
    let b = udp(&batched, size)?;
    let udp_cpu = spent(udp_before, batched.cpu_ns());
    let name = format!("cable WRITE {}", super::human(size));
    r.row(
        &name,
        mib_per_s(&big, size),
        "MiB/s",
        "UDP, same frames, 1 per call",
        mib_per_s(&p, size),
        None,
    )?;
    r.row(
        &name,
        mib_per_s(&big, size),
        "MiB/s",
        "UDP, same frames, batched",
        mib_per_s(&b, size),
        Some(0.7),
    )?;
    if let (Some(nic), Some(udp)) = (nic_cpu, udp_cpu) {
        cpu_rows(r, &name, (nic, big.bytes), (udp, b.messages * size as u64))?;
    }
    let small = writes(cable.initiator(), 64, SMALL, d)?;
    let (p, b) = (udp(&plain, 64)?, udp(&batched, 64)?);
    let k = |t: &Throughput| t.messages_per_s() / 1e3;
    r.row(
        "cable WRITE 64 B",
        k(&small),
        "k/s",
        "UDP, same frames, 1 per call",
        k(&p),
        None,
    )?;
    r.row(
        "cable WRITE 64 B",
        k(&small),
        "k/s",
        "UDP, same frames, batched",
        k(&b),
        None,
    )?;
    drop((cable, plain, batched));

    let shm = NicPair::start(&roce, Medium::Shm, "bench").map_err(io("two NICs on shm"))?;
    let over_shm = writes(shm.initiator(), size, BIG, d)?;
    let pair = in_process_pair(plan)?;
    let inproc = writes(pair.initiator(), size, BIG, d)?;
    r.row(
        format!("shm WRITE {}", super::human(size)),
        over_shm.gbit_per_s(),
        "Gbit/s",
        "in-process WRITE, same size",
        inproc.gbit_per_s(),
        Some(0.6),
    )?;
    let over_shm = writes(shm.initiator(), 64, SMALL, d)?;
    let inproc = writes(pair.initiator(), 64, SMALL, d)?;
    let m = |t: &Throughput| t.messages_per_s() / 1e6;
    r.row(
        "shm WRITE 64 B",
        m(&over_shm),
        "M/s",
        "in-process WRITE 64 B",
        m(&inproc),
        None,
    )?;
    Ok(())
}

/// The CPU time two processes (sending end, receiving end) spent between two readings, in
/// nanoseconds; `None` where the system did not say.
fn spent(before: Option<[u64; 2]>, after: Option<[u64; 2]>) -> Option<[u64; 2]> {
    let (before, after) = (before?, after?);
    Some([
        after[0].saturating_sub(before[0]),
        after[1].saturating_sub(before[1]),
    ])
}

/// The cable's bytes per CPU second (both NIC processes) against batched UDP's (its sender and
/// receiver), from each run's CPU time: on a shared machine a process waits for a core as
/// often as it runs, and the CPU time a byte costs is what that waiting blurs least. Each
/// side's cost on its own line: on two cores the busier side sets the goodput. The NICs' time
/// includes their idle polling between frames (a yield each round), which a quieter machine
/// lets them spend more of: an upper bound on their work, closest to it when the machine is
/// loaded.
fn cpu_rows(
    r: &mut Report,
    name: &str,
    (nic, nic_bytes): ([u64; 2], u64),
    (udp, udp_bytes): ([u64; 2], u64),
) -> Result<(), Failure> {
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let per_cpu_s = |ns: [u64; 2], bytes: u64| mib(bytes) / ((ns[0] + ns[1]).max(1) as f64 / 1e9);
    let ms_per_mib = |ns: u64, bytes: u64| ns as f64 / 1e6 / mib(bytes).max(f64::MIN_POSITIVE);
    r.row(
        format!("{name}, CPU"),
        per_cpu_s(nic, nic_bytes),
        "MiB/CPU-s",
        "UDP, same frames, batched, CPU",
        per_cpu_s(udp, udp_bytes),
        None,
    )?;
    r.note(format!(
        "{name}: CPU ms per MiB, sender + receiver: cable NICs {:.3} + {:.3}, batched UDP {:.3} + {:.3}",
        ms_per_mib(nic[0], nic_bytes),
        ms_per_mib(nic[1], nic_bytes),
        ms_per_mib(udp[0], udp_bytes),
        ms_per_mib(udp[1], udp_bytes),
    ))
}

/// The figures of `n` QPs on NICs of `threads` engine threads.
fn qp_figures(plan: &Plan, n: usize, threads: usize) -> Result<QpFigures, Failure> {
    // Room for the message-rate run's share of each QP, and at least two batches.
    let send_depth = (SMALL.0.div_ceil(n))
        .max(2 * SMALL.1)
        .next_power_of_two()
        .min(1024);
    let qps = ManyQps::start(n, send_depth, plan.mtu, threads).map_err(verbs)?;
    let big = qps
        .writes(plan.size, BIG.0, BIG.1, Until::Elapsed(plan.duration))
        .map_err(verbs)?;
    let small = qps
        .writes(64, SMALL.0, SMALL.1, Until::Elapsed(plan.duration))
        .map_err(verbs)?;
    Ok(QpFigures {
        qps: n,
        threads,
        gbit_per_s: big.gbit_per_s(),
        messages_per_s: small.messages_per_s(),
        rss_bytes_per_idle_qp: qps.rss_per_qp,
        mapped_bytes_per_idle_qp: qps.mapped_per_qp,
    })
}

/// The QP counts asked for, each with a goodput and a message-rate run; one QP first, the
/// baseline of the others. With `--threads T`, each count again on NICs of T engine threads,
/// right after its one-thread run, against it.
fn many_qps(plan: &Plan, r: &mut Report) -> Result<Vec<QpFigures>, Failure> {
    let size = plan.size;
    let mut counts = plan.qps.clone();
    counts.retain(|&n| n != 1);
    counts.sort_unstable();
    counts.dedup();
    counts.insert(0, 1);
    let mut figures: Vec<QpFigures> = Vec::new();
    let mut sharded = Vec::new();
    for n in counts {
        let these = qp_figures(plan, n, 1)?;
        match figures.first() {
            None => r.note(format!(
                "1 QP: WRITE {} {:.2} Gbit/s, 64 B {:.3} M/s",
                super::human(size),
                these.gbit_per_s,
                these.messages_per_s / 1e6
            ))?,
            Some(one) => {
                r.row(
                    format!("{n} QPs WRITE {}", super::human(size)),
                    these.gbit_per_s,
                    "Gbit/s",
                    "1 QP",
                    one.gbit_per_s,
                    Some(0.8),
                )?;
                r.row(
                    format!("{n} QPs WRITE 64 B"),
                    these.messages_per_s / 1e6,
                    "M/s",
                    "1 QP",
                    one.messages_per_s / 1e6,
                    Some(0.8),
                )?;
                r.note(format!(
                    "memory per idle QP with {n}: {} B resident, {} B mapped",
                    these.rss_bytes_per_idle_qp, these.mapped_bytes_per_idle_qp
                ))?;
            }
        }
        if plan.threads > 1 {
            let t = plan.threads;
            let more = qp_figures(plan, n, t)?;
            r.row(
                format!("{n} QPs WRITE {}, {t} threads", super::human(size)),
                more.gbit_per_s,
                "Gbit/s",
                format!("{n} QPs, 1 thread"),
                these.gbit_per_s,
                None,
            )?;
            r.row(
                format!("{n} QPs WRITE 64 B, {t} threads"),
                more.messages_per_s / 1e6,
                "M/s",
                format!("{n} QPs, 1 thread"),
                these.messages_per_s / 1e6,
                None,
            )?;
            sharded.push(more);
        }
        figures.push(these);
    }
    figures.extend(sharded);
    Ok(figures)
}

/// A temporary file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A capture of `packets` frames, the bundled every-opcode frames over and over.
fn synthetic_capture(packets: usize) -> Result<TempFile, Failure> {
    let mut frames = Vec::new();
    let mut reader = Reader::new(EVERY_OPCODE).map_err(|e| Failure::new(e.to_string()))?;
    while let Some(record) = reader.next_record() {
        let record = record.map_err(|e| Failure::new(e.to_string()))?;
        frames.push(record.data.to_vec());
    }
    let file =
        TempFile(std::env::temp_dir().join(format!("roce-bench-{}.pcap", std::process::id())));
    let sink = std::fs::File::create(&file.0).map_err(io("creating the synthetic capture"))?;
    let mut writer =
        Writer::new(std::io::BufWriter::new(sink)).map_err(|e| Failure::new(e.to_string()))?;
    let step = Duration::from_micros(1);
    for (i, frame) in frames.iter().cycle().take(packets).enumerate() {
        writer
            .write(Duration::from_secs(1_700_000_000) + step * i as u32, frame)
            .map_err(|e| Failure::new(format!("writing the synthetic capture: {e}")))?;
    }
    writer
        .into_inner()
        .into_inner()
        .map_err(|e| Failure::new(format!("writing the synthetic capture: {e}")))?;
    Ok(file)
}

/// Wall-clock seconds `cmd` takes, its output discarded; an error if it fails.
fn timed(mut cmd: Command, what: &str) -> Result<f64, Failure> {
    let start = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(io(what))?;
    if !status.success() {
        return Err(Failure::new(format!("{what} failed: {status}")));
    }
    Ok(start.elapsed().as_secs_f64())
}

fn decode(
    plan: &Plan,
    r: &mut Report,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<(), Failure> {
    let capture = synthetic_capture(plan.packets)?;
    let mut ours = Command::new(roce()?);
    ours.args(["decode", "--json"]).arg(&capture.0);
    let ours = timed(ours, "roce decode --json")?;
    let rate = |s: f64| plan.packets as f64 / s.max(1e-9) / 1e6;
    let tshark_here = Command::new("tshark")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let tshark = if tshark_here {
        let mut cmd = Command::new("tshark");
        cmd.arg("-r").arg(&capture.0).args(["-n", "-T", "fields"]);
        for field in TSHARK_FIELDS {
            cmd.args(["-e", field]);
        }
        Some(timed(cmd, "tshark")?)
    } else {
        None
    };
    let name = format!("roce decode --json, {} packets", plan.packets);
    match tshark {
        Some(t) => r.row(
            name,
            rate(ours),
            "M pkt/s",
            "tshark -T fields, 4 fields",
            rate(t),
            Some(60.0),
        )?,
        None => r.note(format!(
            "{name}: {:.3} M pkt/s; tshark not installed: no ratio",
            rate(ours)
        ))?,
    }
    extra.insert(
        "decode".into(),
        serde_json::json!({
            "packets": plan.packets,
            "roce_seconds": ours,
            "tshark_seconds": tshark,
            "tshark": if tshark.is_some() { "installed" } else { "tshark not installed" },
        }),
    );
    Ok(())
}
