//! `roce`: the command-line face of the emulator. Argument parsing and printing only; every
//! subcommand is a thin file over library calls.

#[macro_use]
mod output;

mod attach;
mod bench;
mod decode;
mod device;
mod failure;
mod host;
mod mem;
mod nic;
mod perftest;
mod pingpong;
mod signals;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use failure::Failure;

#[derive(Parser)]
#[command(
    name = "roce",
    version,
    about = "A userspace RoCEv2 software NIC: run emulated RNICs, post RDMA work, decode captures",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure the emulated data path: goodput, message rate and latency.
    Bench(bench::Args),
    /// Decode the RoCEv2 packets in pcap/pcapng captures, checking every ICRC.
    Decode(decode::Args),
    /// Create, inspect and watch the shared-memory regions that stand in for host RAM.
    #[command(subcommand)]
    Mem(mem::Command),
    /// Run one emulated RNIC as a process until Ctrl-C or SIGTERM.
    Nic(nic::Args),
    /// Speak rdma-core's ibv_{rc,uc,ud,srq}_pingpong with a peer (a real one, or another roce).
    Pingpong(pingpong::Args),
    /// Speak perftest's ib_{write,read,send}_{bw,lat} and ib_atomic_bw with a peer.
    Perftest(perftest::Args),
    /// Use a running NIC from the shell: serve a region, post RDMA work, show the NIC.
    #[command(subcommand)]
    Host(host::Command),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();

    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Decode(args) => decode::run(args),
        Command::Mem(cmd) => mem::run(cmd),
        Command::Nic(args) => nic::run(args),
        Command::Pingpong(args) => pingpong::run(args),
        Command::Perftest(args) => perftest::run(args),
        Command::Host(cmd) => host::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("roce: {failure}");
            failure.exit_code()
        }
    }
}
