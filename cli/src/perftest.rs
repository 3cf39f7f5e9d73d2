//! `roce perftest`: perftest's ib_{write,read,send,atomic}_{bw,lat} over RC, to run
//! against the real ones (or against itself). The options are a subset of perftest's own.

use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;

use clap::ValueEnum;
use roce_tools::perftest::{self, AtomicOp, Measured, Options, Test};
use roce_tools::Role;

use crate::attach::{failure, path_mtu, LimitArgs, NicArgs};
use crate::output::Watched;
use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  Server and client on two running NICs (see roce nic --help):
    roce perftest write_bw --nic nic1
    roce perftest write_bw --nic nic0 10.0.0.2
  Every size from 2 bytes to 8 MiB, in Gb/s:
    roce perftest read_bw -a --report_gbits --nic nic0 10.0.0.2
  The figures as JSON lines for a script (perftest's own text goes to standard error):
    roce perftest write_bw --json --nic nic0 10.0.0.2 | jq .average_mib_per_s
  Connected through the RDMA CM, as ib_send_lat -R (against the real one too):
    roce perftest send_lat -R --nic nic1
    roce perftest send_lat -R --nic nic0 10.0.0.2
  Against perftest in a Soft-RoCE guest at 10.77.0.2, retrying while it boots:
    roce perftest write_bw -s 65536 -n 200 --connect-retry 60 \\
        --link cable:127.0.0.1:47911,127.0.0.1:47910 --ip 10.77.0.1 --link-mtu 1500 --rate 200M 10.77.0.2";

#[derive(Clone, Copy, clap::ValueEnum)]
enum Program {
    #[value(name = "write_bw")]
    WriteBw,
    #[value(name = "write_lat")]
    WriteLat,
    #[value(name = "read_bw")]
    ReadBw,
    #[value(name = "read_lat")]
    ReadLat,
    #[value(name = "send_bw")]
    SendBw,
    #[value(name = "send_lat")]
    SendLat,
    #[value(name = "atomic_bw")]
    AtomicBw,
    #[value(name = "atomic_lat")]
    AtomicLat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Atomic {
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

#[derive(clap::Args)]
pub struct Args {
    /// Which test (the real program is `ib_<TEST>`).
    #[arg(value_enum)]
    test: Program,
    /// The server's IP address; without it, this side is the server.
    server: Option<IpAddr>,
    /// Bytes per message [default: bw 65536, lat 2, atomic 8].
    #[arg(short, long)]
    size: Option<u64>,
    /// Messages [default: write_bw 5000, others 1000].
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// Requests in flight at once [default: bw 128, lat 1].
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// Receives posted in the SEND tests.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    rx_depth: u32,
    /// Path MTU offered: 256 ... 4096 [default: the NIC's largest; both sides take the smaller].
    #[arg(short, long)]
    mtu: Option<u32>,
    /// GID index (1 is the NIC's IPv4 address).
    #[arg(short = 'x', long = "gid-index", default_value_t = 1)]
    gid_index: u8,
    /// TCP port of the exchange (with -R, the RDMA CM port both connections go to).
    #[arg(short, long, default_value_t = 18515)]
    port: u16,
    /// Connect the QPs through the RDMA CM and exchange over it rather than over TCP, as
    /// perftest's -R (no TCP at all).
    #[arg(short = 'R', long = "rdma_cm", alias = "rdma-cm")]
    rdma_cm: bool,
    /// QP timeout: retransmit after 4.096 µs × 2^N.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    qp_timeout: u8,
    /// The atomic operation of atomic_bw and atomic_lat.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    atomic: Atomic,
    /// Every message size from 2 bytes to 8 MiB in powers of two, as perftest sweeps (every
    /// test but atomic_bw and atomic_lat, whose message is 8 bytes).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Bandwidth in Gb/s rather than MB/s.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    report_gbits: bool,
    /// The figures as JSON, one object per line (one per message size with -a), on standard
    /// output; perftest's own text goes to standard error.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    nic: NicArgs,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let name = args
        .test
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned());
    let test = match args.test {
        Program::WriteBw => Test::WriteBw,
        Program::WriteLat => Test::WriteLat,
        Program::ReadBw => Test::ReadBw,
        Program::ReadLat => Test::ReadLat,
        Program::SendBw => Test::SendBw,
        Program::SendLat => Test::SendLat,
        Program::AtomicBw => Test::AtomicBw,
        Program::AtomicLat => Test::AtomicLat,
    };
    let mtu = args.mtu.map(path_mtu).transpose()?;
    let defaults = Options::new(test);
    let opts = Options {
        atomic: match args.atomic {
            Atomic::FetchAndAdd => AtomicOp::FetchAndAdd,
            Atomic::CmpAndSwap => AtomicOp::CmpAndSwap,
        },
        size: args.size.unwrap_or(defaults.size),
        iters: args.iters.unwrap_or(defaults.iters),
        tx_depth: args.tx_depth.unwrap_or(defaults.tx_depth),
        rx_depth: args.rx_depth,
        mtu,
        gid_index: args.gid_index,
        port: args.port,
        qp_timeout: args.qp_timeout,
        report_gbits: args.report_gbits,
        all_sizes: args.all,
        rdma_cm: args.rdma_cm,
        limits: args.limits.limits(),
        ..defaults
    };
    let role = args.server.map_or(Role::Server, Role::Client);
    let nic = args.nic.open("perftest")?;
    let mut out = Watched::default();
    if !args.json {
        perftest::run(&nic.ctx, &opts, role, &mut out).map_err(|e| failure(e, &out))?;
        return Ok(ExitCode::SUCCESS);
    }
    let outcome = perftest::run(&nic.ctx, &opts, role, &mut std::io::stderr())
        .map_err(|e| failure(e, &out))?;
    let mut lines = Vec::new();
    json_lines(&name, &outcome.result, opts.report_gbits, &mut lines);
    for mut line in lines {
        line["verified"] = outcome.verified.clone().into();
        writeln!(out, "{line}").map_err(Failure::output)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What a run measured as JSON objects, one per message size, with the unit in each key.
fn json_lines(test: &str, measured: &Measured, gbits: bool, lines: &mut Vec<serde_json::Value>) {
    match measured {
        Measured::Bw(r) => {
            let unit = if gbits { "gbit_per_s" } else { "mib_per_s" };
            let mut line = serde_json::json!({
                "test": test,
                "size_bytes": r.size,
                "iterations": r.iters,
                "msg_rate_mpps": r.msg_rate,
            });
            line[format!("peak_{unit}")] = r.peak.into();
            line[format!("average_{unit}")] = r.average.into();
            lines.push(line);
        }
        Measured::Sweep(sizes) => {
            for size in sizes {
                json_lines(test, size, gbits, lines);
            }
        }
        Measured::Lat(l) => lines.push(serde_json::json!({
            "test": test,
            "size_bytes": l.size,
            "iterations": l.iters,
            "min_us": l.min,
            "max_us": l.max,
            "typical_us": l.typical,
            "average_us": l.average,
            "stdev_us": l.stdev,
            "p99_us": l.p99,
            "p99_9_us": l.p99_9,
        })),
        // A latency test's passive server measures nothing; it still says what it checked.
        Measured::Nothing => lines.push(serde_json::json!({ "test": test })),
    }
}
