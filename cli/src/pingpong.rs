//! `roce pingpong`: rdma-core's ibv_{rc,uc,ud,srq}_pingpong, to run against the real ones (or
//! against itself). The options are the real tools' own.

use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;

use clap::ValueEnum;
use roce_tools::pingpong::{self, Options, Transport};
use roce_tools::Role;

use crate::attach::{failure, path_mtu, LimitArgs, NicArgs};
use crate::output::Watched;
use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  Server and client on two running NICs (see roce nic --help):
    roce pingpong rc --nic nic1
    roce pingpong rc --nic nic0 10.0.0.2
  Against rdma-core's own, in a Soft-RoCE guest at 10.77.0.2, with a NIC of the tool's own:
    roce pingpong rc -n 100 --link cable:127.0.0.1:47911,127.0.0.1:47910 --ip 10.77.0.1 --link-mtu 1500
  The figures as one JSON line for a script (the tool's own text goes to standard error):
    roce pingpong rc --json --nic nic0 10.0.0.2 | jq .usec_per_iter
  Path MTU 4096 (give -m 4096 to the peer too), 2% loss:
    roce pingpong rc -m 4096 --link ... --ip ... --faults drop=0.02 10.77.0.2";

#[derive(Clone, Copy, clap::ValueEnum)]
enum Program {
    /// ibv_rc_pingpong: reliable connection.
    Rc,
    /// ibv_uc_pingpong: unreliable connection (a lost packet loses its message, and the run).
    Uc,
    /// ibv_ud_pingpong: datagrams of at most one MTU.
    Ud,
    /// ibv_srq_pingpong: -q RC QPs at once.
    Srq,
}

#[derive(clap::Args)]
pub struct Args {
    /// Which pingpong to speak.
    #[arg(value_enum)]
    program: Program,
    /// The server's IP address; without it, this side is the server.
    server: Option<IpAddr>,
    /// Bytes per message [default: 4096, ud: 1024].
    #[arg(short, long)]
    size: Option<u32>,
    /// Round trips (over all QPs for srq).
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (not used by ud).
    #[arg(short, long, default_value_t = 1024)]
    mtu: u32,
    /// GID index to send from (1 is the NIC's IPv4 address).
    #[arg(short, long = "gid-idx", default_value_t = 1)]
    gid_idx: u8,
    /// TCP port of the address exchange.
    #[arg(short, long, default_value_t = 18515)]
    port: u16,
    /// Receives to keep posted.
    #[arg(short, long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// QPs of srq.
    #[arg(short = 'q', long = "num-qp", default_value_t = 16)]
    num_qp: u32,
    /// Mark the first byte of each page, as the real client does with --chk (give it to both).
    #[arg(short = 'c', long = "chk")]
    check: bool,
    /// The figures as one JSON object on standard output; the tool's own text goes to
    /// standard error.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    nic: NicArgs,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let transport = match args.program {
        Program::Rc => Transport::Rc,
        Program::Uc => Transport::Uc,
        Program::Ud => Transport::Ud,
        Program::Srq => Transport::Srq,
    };
    let mtu = path_mtu(args.mtu)?;
    let defaults = Options::new(transport);
    let opts = Options {
        size: args.size.unwrap_or(defaults.size),
        iters: args.iters,
        mtu,
        gid_index: args.gid_idx,
        port: args.port,
        rx_depth: args.rx_depth,
        num_qp: args.num_qp,
        check: args.check,
        limits: args.limits.limits(),
        ..defaults
    };
    let role = args.server.map_or(Role::Server, Role::Client);
    let nic = args.nic.open("pingpong")?;
    let mut out = Watched::default();
    if !args.json {
        pingpong::run(&nic.ctx, &opts, role, &mut out).map_err(|e| failure(e, &out))?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = pingpong::run(&nic.ctx, &opts, role, &mut std::io::stderr())
        .map_err(|e| failure(e, &out))?;
    let seconds = report.elapsed.as_secs_f64();
    // Counted as the real tools count them: both directions, per round trip.
    let bytes = 2 * u64::from(report.size) * u64::from(report.iters);
    let line = serde_json::json!({
        "program": args.program.to_possible_value().map(|v| v.get_name().to_owned()),
        "size_bytes": report.size,
        "iterations": report.iters,
        "bytes": bytes,
        "elapsed_s": seconds,
        "mbit_per_s": bytes as f64 * 8.0 / (seconds * 1e6).max(1e-9),
        "usec_per_iter": seconds * 1e6 / f64::from(report.iters.max(1)),
        "verified_messages": report.verified,
    });
    writeln!(out, "{line}").map_err(Failure::output)?;
    Ok(ExitCode::SUCCESS)
}
