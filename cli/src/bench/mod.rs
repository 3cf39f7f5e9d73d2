//! `roce bench`: how fast the emulated data path runs on this machine, between two NICs in this
//! process (an in-process cable, optionally with faults), beside a plain memcpy; with `--all`
//! or `--qps`, every figure beside its baseline ([`all`]).

mod all;
mod incast;

use std::process::ExitCode;
use std::time::Duration;

use roce_nic::bench;
use roce_nic::link::faults::{FaultSpec, Faulty};
use roce_nic::link::mem;
use roce_nic::testbed;
use roce_nic::verbs::QpType;

use crate::Failure;

/// How long a slice of the goodput run with faults lasts, each measured beside a slice on a
/// clean cable: short, so that the load of a shared machine, which changes over a second or
/// so, weighs on both alike.
const SLICE: Duration = Duration::from_millis(250);
/// The least slices of each, however short the run.
const MIN_SLICES: u32 = 4;
/// WRITEs each pair does before it is measured: the first pass over the regions faults their
/// pages in, and a first slice that did it ran a tenth slower than the next.
const WARM_UP: u64 = 64;

/// The goodput with faults as a share of the fault-free one: the median over the pairs of
/// slices measured one after the other (a slice whose neighbour the machine's load starved
/// or favoured moves it by one place, not by its size), and the range.
#[derive(Clone, Copy)]
struct Ratio {
    median: f64,
    low: f64,
    high: f64,
    pairs: usize,
}

/// Slices of one measurement as one.
fn sum(slices: &[bench::Throughput]) -> bench::Throughput {
    bench::Throughput {
        messages: slices.iter().map(|t| t.messages).sum(),
        bytes: slices.iter().map(|t| t.bytes).sum(),
        elapsed: slices.iter().map(|t| t.elapsed).sum(),
    }
}

pub const EXAMPLES: &str = "\
Examples:
  roce bench                          3 s per figure, 1 MiB messages, path MTU 4096
  roce bench -s 64K -m 1024           smaller messages, smaller packets
  roce bench --faults drop=0.01       the cost of go-back-N at 1% loss
  roce bench --seconds 1 --json | jq .write.gbit_per_s
  roce bench --all                    every figure beside its baseline in this run, as ratios
  roce bench --all --json >> history.jsonl
  roce bench --qps 1,64,1024,8192     many QPs sharing the load, against one QP
  roce bench --qps 1,64 --threads 2   ... and on NICs of two engine threads, against one
  roce bench --incast 4               4 NIC processes into one through roce switch, without
                                      and with DCQCN: goodput per flow, Jain's index, drops
  roce bench --incast 4 --dcqcn on --seconds 8 --json | jq '.runs[0].curves'";

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per throughput measurement (default 3; with --incast, of each run, default 4).
    #[arg(long)]
    seconds: Option<f64>,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096).
    #[arg(short, long, default_value_t = 4096)]
    mtu: u32,
    /// Message size of the goodput run (e.g. 1M, 64K; default 1M, with --incast 16K).
    #[arg(short, long)]
    size: Option<String>,
    /// Faults on the cable, e.g. drop=0.01 (see `roce nic --help`).
    #[arg(long)]
    faults: Option<String>,
    /// Print the figures as one JSON object instead of lines.
    #[arg(long)]
    json: bool,
    /// With --faults: the NICs without IRN's low retransmission timer (the QP's Local ACK
    /// Timeout alone, as `roce nic` by default), to see what it is worth.
    #[arg(long)]
    no_rto_low: bool,
    /// Every figure beside a baseline measured in the same run, as ratios: in one process
    /// against memcpy and crc32fast, two NIC processes on the cable against plain and batched
    /// UDP, on shm against one process, many QPs against one, decode against tshark.
    #[arg(long)]
    all: bool,
    /// The QP counts of the many-QP figures, e.g. 1,64,1024,8192 (alone: only those figures;
    /// with --all, instead of 1,64,1024).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=65536))]
    qps: Option<Vec<u32>>,
    /// With --qps or --all: the many-QP figures again on NICs whose QPs are sharded over this
    /// many engine threads, each beside the one-thread figure of the same run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
    /// An incast of N `roce nic` processes into one more through a `roce switch`, without
    /// and with DCQCN: each flow's goodput, Jain's index, drops, marks, CNPs, the queue.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    incast: Option<u32>,
    /// With --incast: the line rate of the switch's ports and of every NIC (K, M, G).
    #[arg(long, default_value = incast::DEFAULT_RATE, value_name = "BITS", requires = "incast")]
    rate: String,
    /// With --incast: the switch port's buffer.
    #[arg(long, default_value = "1M", value_name = "BYTES", requires = "incast")]
    buffer: String,
    /// With --incast: the switch's RED marking (`roce switch --ecn`).
    #[arg(long, default_value = incast::RED, value_name = "RED", requires = "incast")]
    ecn: String,
    /// With --incast: which runs, `both` (without DCQCN, then with it), `on` or `off`.
    #[arg(long, default_value = "both", value_parser = ["both", "on", "off"], requires = "incast")]
    dcqcn: String,
    /// With --incast: a DCQCN parameter for the NICs of the DCQCN run (repeatable; `roce nic
    /// --dcqcn-param`), after the incast's own (the DCQCN paper's, scaled from its 40 Gbit/s
    /// line to 1 Gbit/s: times × 40, rates ÷ 40).
    #[arg(long = "dcqcn-param", value_name = "NAME=VALUE", requires = "incast")]
    dcqcn_params: Vec<String>,
    /// With --incast: WRITEs each flow keeps in flight.
    #[arg(long, default_value_t = 64, value_name = "N", requires = "incast",
          value_parser = clap::value_parser!(u32).range(1..=512))]
    in_flight: u32,
    /// With --incast: the fairness window starts this many seconds into each run (default:
    /// half-way).
    #[arg(long, value_name = "SECONDS", requires = "incast")]
    settle: Option<f64>,
    /// Packets of the synthetic capture `--all` decodes.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    packets: u64,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let mtu = crate::attach::path_mtu(args.mtu)?;
    let incast = args.incast.is_some();
    let size_text = args
        .size
        .as_deref()
        .unwrap_or(if incast { "16K" } else { "1M" });
    let size = roce_hostmem::parse_size(size_text)
        .map_err(|e| Failure::usage(format!("--size {size_text}: {e}")))?;
    if size > 16 << 20 || size == 0 {
        return Err(Failure::usage("--size is 1 to 16M"));
    }
    let seconds = args.seconds.unwrap_or(if incast { 4.0 } else { 3.0 });
    let duration = Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Failure::usage("--seconds must be a positive number"))?;
    if let Some(flows) = args.incast {
        if args.all || args.qps.is_some() || args.faults.is_some() {
            return Err(Failure::usage(
                "--incast runs alone, without --all, --qps or --faults",
            ));
        }
        let rate = args
            .rate
            .parse()
            .map_err(|e| Failure::usage(format!("--rate: {e}")))?;
        let settle = match args.settle {
            None => duration / 2,
            Some(s) => Duration::try_from_secs_f64(s)
                .ok()
                .filter(|s| *s < duration)
                .ok_or_else(|| Failure::usage("--settle must be less than --seconds"))?,
        };
        let mut params: Vec<String> = incast::PARAMS.iter().map(|p| p.to_string()).collect();
        params.extend(args.dcqcn_params);
        return incast::run(incast::Plan {
            flows: flows as usize,
            rate,
            buffer: args.buffer,
            ecn: args.ecn,
            params,
            runs: match args.dcqcn.as_str() {
                "on" => vec![true],
                "off" => vec![false],
                _ => vec![false, true],
            },
            size,
            depth: args.in_flight as usize,
            duration,
            settle,
            json: args.json,
        });
    }
    let faults: Option<FaultSpec> = args
        .faults
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(|e| Failure::usage(format!("--faults: {e}")))?;

    if args.all || args.qps.is_some() {
        if faults.is_some() {
            return Err(Failure::usage(
                "--faults is for the in-process figures alone, not with --all or --qps",
            ));
        }
        return all::run(all::Plan {
            duration,
            mtu,
            size,
            all: args.all,
            qps: match args.qps {
                Some(counts) => counts.into_iter().map(|n| n as usize).collect(),
                None => all::DEFAULT_QPS.to_vec(),
            },
            threads: args.threads as usize,
            packets: args.packets as usize,
            json: args.json,
        });
    }

    if args.threads > 1 {
        return Err(Failure::usage(
            "--threads measures the many-QP figures against one thread: give --qps (or --all)",
        ));
    }
    let region = 64 << 20;
    // On a lossy cable the NICs run the low retransmission timer, as `roce fabric`'s do; the
    // fault-free baseline beside it too, so that the ratio compares like with like.
    let rto_low = |c: &mut roce_nic::DeviceConfig| c.rto_low = !args.no_rto_low;
    // With faults, the same goodput on a clean cable too: the faulty figure as a ratio to a
    // baseline of this run. The two are measured in alternating slices, so that a machine
    // whose load changes during the run weighs on both alike. The clean cable goes through the
    // fault injector too, injecting nothing (its seed and reorder window as given): the ratio
    // is then what the faults cost, not what drawing them costs. (`--faults drop=0`, which
    // should measure 100%, gave 80–89% in six runs of four half-second slices, the clean one
    // always first, without a warm-up and without the injector on the clean cable, and once
    // 124%; with all four changes, 109%, 94% and 99%.)
    let set_up = |e| Failure::new(format!("could not set up the test bench: {e}"));
    let faulty_pair = |spec: FaultSpec| {
        let (la, lb) = mem::pair();
        testbed::pair_over(
            Faulty::new(la, spec),
            lb,
            QpType::Rc,
            mtu,
            region,
            rto_low,
            |_| {},
        )
        .map_err(set_up)
    };
    let clean = match &faults {
        Some(spec) => Some(faulty_pair(FaultSpec {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: std::time::Duration::ZERO,
            ..*spec
        })?),
        None => None,
    };
    let pair = match faults {
        Some(spec) => faulty_pair(spec)?,
        None => {
            let (la, lb) = mem::pair();
            testbed::pair_over(la, lb, QpType::Rc, mtu, region, |_| {}, |_| {}).map_err(set_up)?
        }
    };
    let fail = |e: roce_nic::verbs::VerbsError| Failure::new(format!("benchmark failed: {e}"));

    let copy = bench::memcpy_throughput(size, duration);
    if !args.json {
        out!(
            "two NICs in this process, in-process cable, RC, path MTU {mtu}{}",
            match &faults {
                Some(f) if args.no_rto_low => format!(", faults {f}, configured timer alone"),
                Some(f) => format!(", faults {f}, low retransmission timer on"),
                None => String::new(),
            }
        )?;
        out!(
            "memcpy {:>10}            {:8.2} Gbit/s   (this machine's copy ceiling)",
            human(size),
            copy.gbit_per_s()
        )?;
    }
    // The counters when the measured goodput run began (after its warm-up).
    let mut measured_from = roce_nic::counters::Snapshot::default();
    let (big, fault_free) = match &clean {
        None => (
            bench::write_throughput(pair.initiator(), size, 16, 1, duration).map_err(fail)?,
            None,
        ),
        Some(clean) => {
            let slices = (duration.as_secs_f64() / SLICE.as_secs_f64()).round() as u32;
            let slices = slices.max(MIN_SLICES);
            let slice = duration / slices;
            for p in [clean, &pair] {
                bench::write_messages(p.initiator(), size, 16, 1, WARM_UP).map_err(fail)?;
            }
            measured_from = pair.dev_a.counters();
            let (mut faulty, mut baseline) = (Vec::new(), Vec::new());
            for n in 0..slices {
                // Each goes first every other time: neither always follows the other's drain.
                for faults in [n % 2 == 1, n % 2 == 0] {
                    let (p, into) = match faults {
                        false => (clean, &mut baseline),
                        true => (&pair, &mut faulty),
                    };
                    into.push(
                        bench::write_throughput(p.initiator(), size, 16, 1, slice).map_err(fail)?,
                    );
                }
            }
            let mut ratios: Vec<f64> = faulty
                .iter()
                .zip(&baseline)
                .map(|(f, b)| f.gbit_per_s() / b.gbit_per_s())
                .collect();
            ratios.sort_by(f64::total_cmp);
            let ratio = Ratio {
                median: ratios[ratios.len() / 2],
                low: ratios[0],
                high: ratios[ratios.len() - 1],
                pairs: ratios.len(),
            };
            (sum(&faulty), Some((sum(&baseline).gbit_per_s(), ratio)))
        }
    };
    drop(clean);
    // What recovery the goodput run took (the runs below add their own).
    let goodput_recovery = pair.dev_a.counters().since(&measured_from);
    if !args.json {
        out!(
            "RDMA WRITE {:>6} x16 in flight {:8.2} Gbit/s goodput ({} messages in {:.2?})",
            human(size),
            big.gbit_per_s(),
            big.messages,
            big.elapsed
        )?;
        if let Some((clean, ratio)) = fault_free {
            out!(
                "  fault-free, alternating with it {clean:7.2} Gbit/s: with the faults {:.0}% of it \
                 (median of {} pairs of slices, {:.0}–{:.0}%)",
                100.0 * ratio.median,
                ratio.pairs,
                100.0 * ratio.low,
                100.0 * ratio.high
            )?;
            let c = &goodput_recovery;
            out!(
                "  its recovery: {} frames sent, {} of them again; {} timeouts, {} sequence NAKs, {} tail probes, {} window cuts",
                c.tx_frames,
                c.retransmitted_packets,
                c.retransmit_timeouts,
                c.naks_received_psn_sequence,
                c.tail_probes,
                c.loss_window_cuts
            )?;
        }
    }
    let small = bench::write_throughput(pair.initiator(), 64, 512, 32, duration).map_err(fail)?;
    if !args.json {
        out!(
            "RDMA WRITE     64 B x512 in flight {:8.3} M messages/s",
            small.messages_per_s() / 1e6
        )?;
    }
    let lat = bench::write_latency(pair.initiator(), 64, 20_000, duration).map_err(fail)?;
    let c = pair.dev_a.counters();
    if args.json {
        let figures = serde_json::json!({
            "setup": {
                "nics": "two in this process, in-process cable",
                "transport": "RC",
                "path_mtu": mtu.bytes(),
                "faults": faults.as_ref().map(ToString::to_string),
                "rto_low": faults.is_some() && !args.no_rto_low,
            },
            "memcpy": { "size": size, "gbit_per_s": copy.gbit_per_s() },
            "write": {
                "size": size,
                "in_flight": 16,
                "gbit_per_s": big.gbit_per_s(),
                "messages": big.messages,
                "seconds": big.elapsed.as_secs_f64(),
                "fault_free_gbit_per_s": fault_free.map(|(clean, _)| clean),
                "ratio_to_fault_free": fault_free.map(|(_, ratio)| ratio.median),
                "ratio_range": fault_free.map(|(_, ratio)| [ratio.low, ratio.high]),
                "slice_pairs": fault_free.map(|(_, ratio)| ratio.pairs),
                "recovery": {
                    "frames_sent": goodput_recovery.tx_frames,
                    "retransmitted_packets": goodput_recovery.retransmitted_packets,
                    "retransmit_timeouts": goodput_recovery.retransmit_timeouts,
                    "sequence_naks": goodput_recovery.naks_received_psn_sequence,
                    "tail_probes": goodput_recovery.tail_probes,
                    "window_cuts": goodput_recovery.loss_window_cuts,
                },
            },
            "small_write": {
                "size": 64,
                "in_flight": 512,
                "messages_per_s": small.messages_per_s(),
            },
            "latency": {
                "size": 64,
                "median_us": us(lat.median),
                "p99_us": us(lat.p99),
                "min_us": us(lat.min),
                "samples": lat.samples,
            },
            "recovery": {
                "retransmitted_packets": c.retransmitted_packets,
                "retransmit_timeouts": c.retransmit_timeouts,
                "sequence_naks": c.naks_received_psn_sequence,
                "tail_probes": c.tail_probes,
            },
        });
        out!("{figures}")?;
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "RDMA WRITE     64 B latency        median {:.2} µs, p99 {:.2} µs, min {:.2} µs ({} samples, post to completion)",
        us(lat.median),
        us(lat.p99),
        us(lat.min),
        lat.samples
    )?;
    // Always shown: on a fault-free cable every figure must be 0 (nothing is sent twice).
    out!(
        "recovery: {} packets retransmitted, {} timeouts, {} sequence NAKs, {} tail probes",
        c.retransmitted_packets,
        c.retransmit_timeouts,
        c.naks_received_psn_sequence,
        c.tail_probes
    )?;
    Ok(ExitCode::SUCCESS)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// `roce bench-udp-sink`: the UDP receiver `--all` starts for its baselines.
pub fn run_udp_sink() -> Result<ExitCode, Failure> {
    roce_nic::bench::udp::run_sink_from_env()
        .map_err(|e| Failure::usage(format!("bench-udp-sink: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
