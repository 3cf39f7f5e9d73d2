//! `roce bench --incast N`: N `roce nic` processes writing into one receiver NIC through a real
//! `roce switch` (N + 1 processes plus the switch), once without DCQCN and once with it: each
//! flow's goodput, Jain's fairness index over a stated window and when it settled, the receiver
//! port's drops, ECN marks, queue depth and utilisation, the CNPs and rate cuts.
//!
//! The processes run in real time, so the line rate is low by default (250 Mbit/s): the CPU of
//! a loaded two-core machine is then not what limits the flows, the switch port is. The
//! flows are RC QPs in this process (one context per NIC, through the NICs' control sockets),
//! each keeping `depth` WRITEs in flight; a flow's goodput is what its completions say was
//! delivered, counted in 10 ms bins. The switch's `--stats-log` gives the queue every 10 ms.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use roce_hostmem::{Access, Region};
use roce_nic::bench::procs::{line_starting, Guard};
use roce_nic::bench::udp::free_port;
use roce_nic::counters::Snapshot;
use roce_nic::host::SocketBackend;
use roce_nic::link::paced::Rate;
use roce_nic::verbs::*;
use roce_switch::incast::jain;
use serde_json::json;

use crate::Failure;

/// The switch's RED marking by default: the DCQCN paper's Kmin 5 KB, Kmax 200 KB, Pmax 1%.
pub const RED: &str = "kmin=5000,kmax=200000,pmax=0.01";
/// DCQCN parameters the NICs of the DCQCN run get before the user's `--dcqcn-param`s: the
/// DCQCN paper's (Zhu et al., SIGCOMM 2015) for its 40 Gbit/s line, brought to the bench's
/// 1 Gbit/s by multiplying every time by 40 and dividing every rate by 40, so that every
/// amount of bytes (Kmin, Kmax, the byte counter, a queue) means what it meant there: CNPs at
/// most every 50 µs × 40, alpha every 55 µs × 40 with g = 1/256, an increase stage every
/// 55 µs × 40, additive increase 40 Mbit/s / 40, hyper increase ten times that (as NVIDIA's
/// 5 and 50), the byte counter's 10 MB and F = 5 as they are (the NIC's defaults).
pub const PARAMS: &[&str] = &[
    "np_min_time_between_cnps=2000",
    "rp_dce_tcp_rtt=2200",
    "rp_time_reset=2200",
    "rp_rate_reduce_monitor_period=160",
    "rp_ai_rate=1",
    "rp_hai_rate=10",
];
/// The line rate by default: a quarter of the one [`PARAMS`] are scaled for, so that two
/// loaded cores carry it (at 1 Gbit/s a machine running a dozen compilers made the flows, not
/// the port, the bottleneck); the rate steps are then 0.4% of the line, not 0.1%.
pub const DEFAULT_RATE: &str = "250M";

/// Width of the goodput bins.
const BIN: Duration = Duration::from_millis(10);
/// Width of the windows whose Jain's index says when the flows settled.
pub const JAIN_WINDOW: Duration = Duration::from_millis(200);
/// The fairness the flows must keep, window after window, to count as settled.
pub const FAIR: f64 = 0.95;

/// One incast, as `roce bench --incast` was asked for it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub flows: usize,
    /// Line rate of the switch's ports and of every NIC.
    pub rate: Rate,
    /// The receiver port's buffer, as `roce switch --buffer` takes it.
    pub buffer: String,
    /// RED marking, as `roce switch --ecn` takes it.
    pub ecn: String,
    /// `--dcqcn-param` assignments for the NICs of the DCQCN run.
    pub params: Vec<String>,
    /// Which runs: without DCQCN, with it.
    pub runs: Vec<bool>,
    /// WRITE size and WRITEs in flight per flow.
    pub size: usize,
    pub depth: usize,
    pub duration: Duration,
    /// The fairness window is from this time to the end.
    pub settle: Duration,
    pub json: bool,
}

/// Counters of the receiver's switch port at one moment of the switch's log.
#[derive(Debug, Clone, Copy)]
struct PortSample {
    /// Seconds from the start of the flows.
    t: f64,
    queue: u64,
    tx_bytes: u64,
    dropped: u64,
    marked: u64,
}

/// What one run measured.
struct Figures {
    dcqcn: bool,
    /// Bytes each flow completed per bin.
    bins: Vec<Vec<u64>>,
    port: serde_json::Value,
    samples: Vec<PortSample>,
    receiver: Snapshot,
    senders: Vec<Snapshot>,
}

fn io(what: &str) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure::new(format!("{what}: {e}"))
}

fn verbs(e: VerbsError) -> Failure {
    Failure::new(format!("incast benchmark: {e}"))
}

/// A directory removed when dropped (sockets, stats, logs of one run).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spawn(dir: &Path, args: &[String], ready: &str) -> Result<Guard, Failure> {
    let roce = std::env::current_exe().map_err(io("finding this program"))?;
    let mut child = Command::new(roce)
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io("starting a process of the incast"))?;
    let out = child.stdout.take().expect("piped");
    let guard = Guard(child);
    let mut out = BufReader::new(out);
    line_starting(&mut out, ready).map_err(io(&format!("roce {}", args[0])))?;
    // The rest of its output is not read: it must not block on a full pipe.
    std::thread::spawn(move || for _ in out.lines().map_while(Result::ok) {});
    Ok(guard)
}

/// One end of a flow: a context on a NIC, and what the flow needs there.
struct End {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    _region: Arc<Region>,
}

impl End {
    fn open(
        name: &str,
        dir: &Path,
        region: &str,
        len: usize,
        access: Access,
    ) -> Result<End, Failure> {
        let socket = dir.join("roce").join(format!("{name}.sock"));
        let ctx = Context::open(SocketBackend::connect_at(name, &socket).map_err(verbs)?)
            .map_err(verbs)?;
        let pd = ctx.alloc_pd().map_err(verbs)?;
        let cq = ctx.create_cq(4096).map_err(verbs)?;
        let region = Arc::new(
            Region::create(region, len)
                .map_err(|e| Failure::new(format!("a memory region: {e}")))?,
        );
        let mr = pd.register(&region, 0, len, access).map_err(verbs)?;
        Ok(End {
            ctx,
            pd,
            cq,
            mr,
            _region: region,
        })
    }

    fn qp(&self) -> Result<QueuePair, Failure> {
        let cap = QpCap {
            max_send_wr: 1024,
            ..QpCap::default()
        };
        self.pd
            .create_qp(QpType::Rc, &self.cq, &self.cq, cap)
            .map_err(verbs)
    }

    fn gid(&self) -> Result<Gid, Failure> {
        self.ctx
            .gid(1)
            .ok_or_else(|| Failure::new("a NIC of the incast has no GID 1"))
    }
}

/// Takes `qp` to RTS connected to `peer` (QP `peer_qpn` on the NIC with GID `peer_gid`).
fn connect(qp: &QueuePair, access: Access, peer_gid: Gid, peer_qpn: u32) -> Result<(), Failure> {
    qp.modify(&QpAttr::init(access)).map_err(verbs)?;
    let av = AddressVector::to(peer_gid, 1);
    qp.modify(&QpAttr::rtr(av, peer_qpn, 0, Mtu::M4096))
        .map_err(verbs)?;
    qp.modify(&QpAttr::rts(0)).map_err(verbs)
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Runs one incast: starts the switch and the NICs, drives the flows for `plan.duration`,
/// collects the counters, stops everything.
fn run_one(plan: &Plan, dcqcn: bool) -> Result<Figures, Failure> {
    let n = plan.flows;
    let base = format!("inc{}{}", std::process::id(), if dcqcn { "d" } else { "p" });
    let dir = TempDir(std::env::temp_dir().join(format!("roce-{base}")));
    std::fs::create_dir_all(&dir.0).map_err(io("a directory for the incast"))?;
    let cables: Vec<(u16, u16)> = (0..=n)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<std::io::Result<_>>()
        .map_err(io("free UDP ports"))?;
    let stats = dir.0.join("switch.json");
    let log = dir.0.join("switch.log");
    let rate = plan.rate.to_string();
    let mut args: Vec<String> = vec!["switch".into()];
    for (s, c) in &cables {
        args.extend(["--port".into(), format!("127.0.0.1:{s},127.0.0.1:{c}")]);
    }
    for (flag, value) in [
        ("--rate", rate.as_str()),
        ("--buffer", &plan.buffer),
        ("--ecn", &plan.ecn),
        ("--stats", &stats.display().to_string()),
        ("--stats-log", &log.display().to_string()),
        ("--stats-every", "10"),
    ] {
        args.extend([flag.to_owned(), value.to_owned()]);
    }
    let switch = spawn(&dir.0, &args, "switch ready")?;
    // NIC i is 10.98.0.(i+1) on port i; the receiver is the last.
    let names: Vec<String> = (0..=n).map(|i| format!("{base}n{i}")).collect();
    let mut nics = Vec::new();
    for (i, (s, c)) in cables.iter().enumerate() {
        let mut args: Vec<String> = [
            "nic",
            "--name",
            &names[i],
            "--ip",
            &format!("10.98.0.{}/24", i + 1),
            "--link",
            &format!("cable:127.0.0.1:{c},127.0.0.1:{s}"),
            "--rate",
            &rate,
            "--rto-low",
            "on",
        ]
        .map(String::from)
        .to_vec();
        if dcqcn {
            args.push("--dcqcn".into());
            for p in &plan.params {
                args.extend(["--dcqcn-param".into(), p.clone()]);
            }
        }
        nics.push(spawn(&dir.0, &args, &format!("{} ready", names[i]))?);
    }

    // WRITEs rotate over up to 64 slots of the receiver's region, at most 64 MiB in all.
    let slots = ((64 << 20) / plan.size).clamp(1, 64);
    let receiver = End::open(
        &names[n],
        &dir.0,
        &format!("{base}r"),
        plan.size * slots,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    )?;
    let mut senders = Vec::new();
    let mut qps = Vec::new();
    for (f, name) in names[..n].iter().enumerate() {
        let end = End::open(
            name,
            &dir.0,
            &format!("{base}s{f}"),
            plan.size,
            Access::LOCAL_WRITE,
        )?;
        let (sq, rq) = (end.qp()?, receiver.qp()?);
        connect(
            &rq,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            end.gid()?,
            sq.qp_num(),
        )?;
        connect(&sq, Access::LOCAL_WRITE, receiver.gid()?, rq.qp_num())?;
        senders.push(end);
        qps.push((sq, rq));
    }

    let bins = drive(plan, &receiver, &senders, &qps)?;
    let start = bins.1;
    let bins = bins.0;
    // The switch writes its log every 10 ms: wait for the samples past the end.
    std::thread::sleep(Duration::from_millis(50));
    // The senders' counters first: WRITEs are still in flight, and a CNP a sender counted then
    // was counted by the receiver before, so received ≤ sent holds between the two readings.
    let sender_counters = senders
        .iter()
        .map(|s| s.ctx.counters().map_err(verbs))
        .collect::<Result<Vec<_>, _>>()?;
    let receiver_counters = receiver.ctx.counters().map_err(verbs)?;
    drop(qps);
    drop(senders);
    drop(receiver);
    drop(nics);
    drop(switch);
    let text = std::fs::read_to_string(&stats).map_err(io("the switch's counters"))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Failure::new(format!("switch.json: {e}")))?;
    let port = json["ports"][n].clone();
    let history = std::fs::read_to_string(&log).map_err(io("the switch's log"))?;
    let samples = history
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|s| {
            let p = &s["ports"][n];
            Some(PortSample {
                t: s["time"].as_f64()? - start,
                queue: p["queue_bytes"].as_u64()?,
                tx_bytes: p["tx_bytes"].as_u64()?,
                dropped: p["dropped"].as_u64()?,
                marked: p["ecn_marked"].as_u64()?,
            })
        })
        .collect();
    Ok(Figures {
        dcqcn,
        bins,
        port,
        samples,
        receiver: receiver_counters,
        senders: sender_counters,
    })
}

/// Keeps `depth` WRITEs in flight on every flow for the plan's duration; the bytes each flow
/// completed per [`BIN`], and the Unix time the flows started.
fn drive(
    plan: &Plan,
    receiver: &End,
    senders: &[End],
    qps: &[(QueuePair, QueuePair)],
) -> Result<(Vec<Vec<u64>>, f64), Failure> {
    let n = senders.len();
    let nbins = plan.duration.as_nanos().div_ceil(BIN.as_nanos()) as usize;
    let mut bins = vec![vec![0u64; n]; nbins];
    let mut in_flight = vec![0usize; n];
    let mut posted = vec![0u64; n];
    let mut wcs = vec![Wc::default(); 64];
    let slots = (receiver.mr.len / plan.size as u64).max(1);
    let start_unix = unix_seconds(SystemTime::now());
    let start = Instant::now();
    let end = start + plan.duration;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        for f in 0..n {
            let sge = [senders[f].mr.sge(0, plan.size as u32)];
            while in_flight[f] < plan.depth {
                let k = posted[f];
                let wr = SendWr {
                    wr_id: k,
                    op: SendOp::RdmaWrite {
                        remote_addr: receiver.mr.va + (k % slots) * plan.size as u64,
                        rkey: receiver.mr.rkey,
                    },
                    sg_list: &sge,
                    flags: SendFlags::SIGNALED,
                    ud: None,
                };
                qps[f].0.post_send(&[wr]).map_err(verbs)?;
                posted[f] += 1;
                in_flight[f] += 1;
            }
        }
        let mut completed = 0;
        for f in 0..n {
            let got = senders[f].cq.poll(&mut wcs);
            let bin = ((Instant::now() - start).as_nanos() / BIN.as_nanos()) as usize;
            for wc in &wcs[..got] {
                if wc.status != WcStatus::Success {
                    return Err(Failure::new(format!(
                        "a WRITE of flow {f} failed: {}",
                        wc.status
                    )));
                }
                in_flight[f] -= 1;
                if let Some(b) = bins.get_mut(bin) {
                    b[f] += plan.size as u64;
                }
            }
            completed += got;
        }
        if completed == 0 {
            // A completion comes every few hundred µs at these rates: no need to spin.
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    Ok((bins, start_unix))
}

/// Each flow's goodput over bins `[from, to)`, bits/s.
fn goodput(bins: &[Vec<u64>], from: usize, to: usize) -> Vec<f64> {
    let flows = bins.first().map_or(0, Vec::len);
    let seconds = (to - from) as f64 * BIN.as_secs_f64();
    (0..flows)
        .map(|f| bins[from..to].iter().map(|b| b[f]).sum::<u64>() as f64 * 8.0 / seconds)
        .collect()
}

/// The start of the first [`JAIN_WINDOW`] from which every window (sliding by a bin) to the
/// end has Jain's index at least [`FAIR`], seconds; `None` if the last one does not.
fn settled_at(bins: &[Vec<u64>]) -> Option<f64> {
    let w = (JAIN_WINDOW.as_nanos() / BIN.as_nanos()) as usize;
    if bins.len() < w {
        return None;
    }
    let mut first = None;
    for start in (0..=bins.len() - w).rev() {
        if jain(&goodput(bins, start, start + w)) < FAIR {
            break;
        }
        first = Some(start);
    }
    first.map(|b| b as f64 * BIN.as_secs_f64())
}

fn counter(port: &serde_json::Value, name: &str) -> u64 {
    port[name].as_u64().unwrap_or(0)
}

/// The figures of one run, as JSON.
fn summary(plan: &Plan, fig: &Figures) -> serde_json::Value {
    let line = plan.rate.0 as f64;
    let from = (plan.settle.as_nanos() / BIN.as_nanos()) as usize;
    let to = fig.bins.len();
    let window = goodput(&fig.bins, from, to);
    let whole = goodput(&fig.bins, 0, to);
    let (t0, t1) = (plan.settle.as_secs_f64(), plan.duration.as_secs_f64());
    let inside: Vec<&PortSample> = fig
        .samples
        .iter()
        .filter(|s| s.t >= t0 && s.t <= t1)
        .collect();
    let queue_mean =
        inside.iter().map(|s| s.queue as f64).sum::<f64>() / inside.len().max(1) as f64;
    let queue_max = inside.iter().map(|s| s.queue).max().unwrap_or(0);
    let (utilisation, dropped, marked) = match (inside.first(), inside.last()) {
        (Some(a), Some(b)) if b.t > a.t => (
            (b.tx_bytes - a.tx_bytes) as f64 * 8.0 / (b.t - a.t) / line,
            b.dropped - a.dropped,
            b.marked - a.marked,
        ),
        _ => (0.0, 0, 0),
    };
    let sum = |f: fn(&Snapshot) -> u64| fig.senders.iter().map(f).sum::<u64>();
    // The curves: every 50 ms, each flow's goodput and the queue.
    let step = 5;
    let curves: Vec<serde_json::Value> = (0..to / step)
        .map(|k| {
            let (a, b) = (k * step, (k + 1) * step);
            let t = b as f64 * BIN.as_secs_f64();
            let queue = fig
                .samples
                .iter()
                .rfind(|s| s.t <= t)
                .map_or(0, |s| s.queue);
            json!({
                "t": t,
                "goodput_mbit_per_s": goodput(&fig.bins, a, b).iter().map(|g| g / 1e6).collect::<Vec<_>>(),
                "queue_bytes": queue,
            })
        })
        .collect();
    json!({
        "dcqcn": fig.dcqcn,
        "window_s": [t0, t1],
        "goodput_mbit_per_s": window.iter().map(|g| g / 1e6).collect::<Vec<_>>(),
        "jain": jain(&window),
        "goodput_whole_run_mbit_per_s": whole.iter().map(|g| g / 1e6).collect::<Vec<_>>(),
        "jain_whole_run": jain(&whole),
        "settled_at_s": settled_at(&fig.bins),
        "goodput_of_line": window.iter().sum::<f64>() / line,
        "port_utilisation": utilisation,
        "queue_mean_bytes": queue_mean,
        "queue_max_bytes": queue_max,
        "queue_max_bytes_whole_run": counter(&fig.port, "queue_max_bytes"),
        "dropped": dropped,
        "ecn_marked": marked,
        "dropped_whole_run": counter(&fig.port, "dropped"),
        "ecn_marked_whole_run": counter(&fig.port, "ecn_marked"),
        "ecn_capable": counter(&fig.port, "ecn_capable"),
        "ce_received": fig.receiver.ecn_ce_received,
        "cnps_sent": fig.receiver.cnps_sent,
        "cnps_received": sum(|c| c.cnps_received),
        "rate_cuts": sum(|c| c.dcqcn_rate_cuts),
        "retransmitted_packets": sum(|c| c.retransmitted_packets),
        "retransmit_timeouts": sum(|c| c.retransmit_timeouts),
        "curves": curves,
    })
}

fn mbit(values: &serde_json::Value) -> String {
    values
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| format!("{:.1}", v.as_f64().unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

pub fn run(plan: Plan) -> Result<ExitCode, Failure> {
    let setup = json!({
        "flows": plan.flows,
        "line_rate_bit_per_s": plan.rate.0,
        "buffer": plan.buffer,
        "ecn": plan.ecn,
        "dcqcn_params": plan.params,
        "write_size": plan.size,
        "in_flight_per_flow": plan.depth,
        "seconds": plan.duration.as_secs_f64(),
        "jain_window_s": JAIN_WINDOW.as_secs_f64(),
    });
    if !plan.json {
        out!(
            "incast {}:1 through roce switch, every port and NIC at {} bit/s, buffer {}, RED {}; \
             {} KiB WRITEs x{} in flight per flow, {:.1} s per run",
            plan.flows,
            plan.rate,
            plan.buffer,
            plan.ecn,
            plan.size / 1024,
            plan.depth,
            plan.duration.as_secs_f64()
        )?;
    }
    let mut runs = Vec::new();
    for &dcqcn in &plan.runs {
        let figures = run_one(&plan, dcqcn)?;
        let s = summary(&plan, &figures);
        if !plan.json {
            show(&s)?;
        }
        runs.push(s);
    }
    if plan.json {
        out!("{}", json!({ "setup": setup, "runs": runs }))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn show(s: &serde_json::Value) -> Result<(), Failure> {
    let f = |name: &str| s[name].as_f64().unwrap_or(0.0);
    let u = |name: &str| s[name].as_u64().unwrap_or(0);
    let window = &s["window_s"];
    out!(
        "{}",
        if s["dcqcn"].as_bool() == Some(true) {
            "with DCQCN"
        } else {
            "without DCQCN"
        }
    )?;
    out!(
        "  {:.1}–{:.1} s: goodput per flow {} Mbit/s, Jain's index {:.3} ({:.0}% of the line)",
        window[0].as_f64().unwrap_or(0.0),
        window[1].as_f64().unwrap_or(0.0),
        mbit(&s["goodput_mbit_per_s"]),
        f("jain"),
        100.0 * f("goodput_of_line")
    )?;
    out!(
        "  whole run: {} Mbit/s, Jain {:.3}; every {} ms window fair (≥ {FAIR}) from {}",
        mbit(&s["goodput_whole_run_mbit_per_s"]),
        f("jain_whole_run"),
        JAIN_WINDOW.as_millis(),
        match s["settled_at_s"].as_f64() {
            Some(t) => format!("{t:.2} s"),
            None => "never".into(),
        }
    )?;
    out!(
        "  receiver port: {:.0}% busy, queue mean {:.1} KB, max {:.1} KB; {} dropped, {} marked CE",
        100.0 * f("port_utilisation"),
        f("queue_mean_bytes") / 1e3,
        u("queue_max_bytes") as f64 / 1e3,
        u("dropped"),
        u("ecn_marked")
    )?;
    out!(
        "  whole run: queue max {:.1} KB, {} dropped, {} marked CE",
        u("queue_max_bytes_whole_run") as f64 / 1e3,
        u("dropped_whole_run"),
        u("ecn_marked_whole_run")
    )?;
    out!(
        "  NICs: {} CNPs sent, {} received, {} rate cuts; {} packets retransmitted, {} timeouts",
        u("cnps_sent"),
        u("cnps_received"),
        u("rate_cuts"),
        u("retransmitted_packets"),
        u("retransmit_timeouts")
    )?;
    Ok(())
}
