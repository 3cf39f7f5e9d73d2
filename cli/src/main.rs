//! `roce`: the command-line face of the emulator. Argument parsing and printing only; every
//! subcommand is a thin file over library calls.

#[macro_use]
mod output;

mod attach;
mod bench;
mod decode;
mod demo;
mod device;
mod fabric;
mod failure;
mod host;
mod mem;
mod nic;
mod perftest;
mod pingpong;
mod signals;
mod switch;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

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
    /// See RDMA: two NICs move bytes between two hosts while the target program does
    /// nothing, narrated packet by packet with the proof.
    Demo(demo::Args),
    /// The target program of `roce demo` (started by it).
    #[command(hide = true)]
    DemoTarget(demo::TargetArgs),
    /// Create, inspect and watch the shared-memory regions that stand in for host RAM.
    #[command(subcommand)]
    Mem(mem::Command),
    /// Run one emulated RNIC as a process until Ctrl-C or SIGTERM.
    Nic(nic::Args),
    /// Speak rdma-core's ibv_{rc,uc,ud,srq}_pingpong with a peer (a real one, or another roce).
    Pingpong(pingpong::Args),
    /// Speak perftest's ib_{write,read,send,atomic}_{bw,lat} with a peer.
    Perftest(perftest::Args),
    /// Use a running NIC from the shell: serve a region, post RDMA work, show the NIC.
    #[command(subcommand)]
    Host(host::Command),
    /// Run an Ethernet switch whose ports are cables like a NIC's: learning, line-rate queues,
    /// ECN marking, tail drop, PFC, per-port counters and captures.
    Switch(switch::Args),
    /// Start and stop a switch and its NICs from a topology file.
    #[command(subcommand)]
    Fabric(fabric::FabricCommand),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return argument_error(e),
    };
    // The demo sets up its own logging: it captures the events of the NICs it runs.
    if !matches!(cli.command, Command::Demo(_)) {
        init_logging();
    }
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Decode(args) => decode::run(args),
        Command::Demo(args) => demo::run(args),
        Command::DemoTarget(args) => demo::run_target(args),
        Command::Mem(cmd) => mem::run(cmd),
        Command::Nic(args) => nic::run(args),
        Command::Pingpong(args) => pingpong::run(args),
        Command::Perftest(args) => perftest::run(args),
        Command::Host(cmd) => host::run(cmd),
        Command::Switch(args) => switch::run(args),
        Command::Fabric(cmd) => fabric::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("roce: {failure}");
            failure.exit_code()
        }
    }
}

/// Warnings (or `RUST_LOG`) to standard error; JSON lines when a demo that reads them started
/// this process (see `roce_demo::events`).
fn init_logging() {
    if roce_demo::events::wants_json() {
        roce_demo::events::install_json_logging();
        return;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Help and version as clap prints them; a bad argument as one line, `roce: <what is wrong>
/// (see roce <command> --help)`, with exit code 2, as every other error is one line.
fn argument_error(e: clap::Error) -> ExitCode {
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(e.exit_code() as u8);
    }
    // clap's message runs to the first blank line (the possible values, the missing
    // arguments); the usage and the hint after it are what `--help` is for.
    let text = e.render().to_string();
    let what: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let what = what.join(" ");
    let what = what.trim_start_matches("error: ");
    // The subcommands named on the command line, for the help to look at.
    let mut command = Cli::command();
    let mut path = vec!["roce".to_owned()];
    for word in std::env::args().skip(1) {
        let Some(sub) = command.find_subcommand(&word).cloned() else {
            break;
        };
        path.push(word);
        command = sub;
    }
    eprintln!("roce: {what} (see {} --help)", path.join(" "));
    ExitCode::from(2)
}
