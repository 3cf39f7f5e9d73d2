//! `roce`: the command-line face of the emulator. Argument parsing and printing only; every
//! subcommand is a thin file over library calls. The conventions every subcommand follows (exit
//! codes, output, names of options and formats of values) are in docs/cli-conventions.md.

#[macro_use]
mod output;

mod attach;
mod bench;
mod cm_example;
mod conform;
mod decode;
mod demo;
mod device;
mod fabric;
mod failure;
mod generate;
mod host;
mod mem;
mod nic;
mod perftest;
mod pingpong;
mod rping;
mod run;
mod signals;
mod switch;
mod ucmatose;
mod udaddy;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

pub use failure::Failure;

/// `0.1.0 (27e9603 2025-06-01)`: the package version and the commit it was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("ROCE_VERSION_SUFFIX"));

const EXAMPLES: &str = "\
Examples:
  roce demo                                  watch an RDMA WRITE land in a frozen process
  roce decode capture.pcap                   one line per RoCE packet, every ICRC checked
  roce nic --name nic0 --ip 10.0.0.1 --link cable:127.0.0.1:7001,127.0.0.1:7002
  roce completions bash > /etc/bash_completion.d/roce

Exit codes: 0 ok, 1 an operation or a check failed, 2 bad usage or input.";

/// Kept here: the decoder's module is the wire crate's people's.
const DECODE_EXAMPLES: &str = "\
Examples:
  roce decode captures/every-opcode-ipv4.pcap     one line per RoCE packet
  roce decode -v capture.pcapng                   every field, with its tshark name
  roce decode --json capture.pcap | jq .          one JSON object per packet
  roce decode --strict capture.pcap               exit code 1 on a bad ICRC or a malformed packet
  tcpdump -i eth0 -U -w - udp port 4791 | roce decode -
                                                  a live capture, each packet as it arrives";

#[derive(Parser)]
#[command(
    name = "roce",
    version = VERSION,
    about = "A userspace RoCEv2 software NIC: run emulated RNICs, post RDMA work, decode captures",
    after_long_help = EXAMPLES,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure the emulated data path: goodput, message rate and latency.
    #[command(after_long_help = bench::EXAMPLES)]
    Bench(bench::Args),
    /// Judge every queue-pair conversation of captures against the IBTA transport rules.
    #[command(after_long_help = conform::EXAMPLES)]
    Conform(conform::Args),
    /// Decode the RoCEv2 packets in pcap/pcapng captures, checking every ICRC.
    #[command(after_long_help = DECODE_EXAMPLES)]
    Decode(decode::Args),
    /// See RDMA: two NICs move bytes between two hosts while the target program does
    /// nothing, narrated packet by packet with the proof.
    Demo(demo::Args),
    /// The target program of `roce demo` (started by it).
    #[command(hide = true)]
    DemoTarget(demo::TargetArgs),
    /// The UDP receiver of `roce bench --all` (started by it).
    #[command(hide = true)]
    BenchUdpSink,
    /// Create, inspect and watch the shared-memory regions that stand in for host RAM.
    #[command(subcommand)]
    Mem(mem::Command),
    /// Run one emulated RNIC as a process until Ctrl-C or SIGTERM.
    #[command(after_long_help = nic::EXAMPLES)]
    Nic(nic::Args),
    /// Speak rdma-core's ibv_{rc,uc,ud,srq}_pingpong with a peer (a real one, or another roce).
    #[command(after_long_help = pingpong::EXAMPLES)]
    Pingpong(pingpong::Args),
    /// Speak perftest's ib_{write,read,send,atomic}_{bw,lat} with a peer.
    #[command(after_long_help = perftest::EXAMPLES)]
    Perftest(perftest::Args),
    /// Speak rdma-core's rping with a peer, connecting through the RDMA CM.
    #[command(after_long_help = rping::EXAMPLES)]
    Rping(rping::Args),
    /// Speak librdmacm's ucmatose with a peer: messages both ways over an RDMA CM connection.
    #[command(after_long_help = ucmatose::EXAMPLES)]
    Ucmatose(ucmatose::Args),
    /// Speak librdmacm's udaddy with a peer: UD datagrams both ways, the server's QP found
    /// through the RDMA CM (SIDR).
    #[command(after_long_help = udaddy::EXAMPLES)]
    Udaddy(udaddy::Args),
    /// Run an unmodified verbs program (ibv_devinfo, ibv_rc_pingpong, perftest, ...) on an
    /// emulated NIC, with our libibverbs.so.1 and librdmacm.so.1.
    #[command(after_long_help = run::EXAMPLES)]
    Run(run::Args),
    /// Use a running NIC from the shell: serve a region, post RDMA work, show the NIC.
    #[command(subcommand)]
    Host(host::Command),
    /// Run an Ethernet switch whose ports are cables like a NIC's: learning, line-rate queues,
    /// ECN marking, tail drop, PFC, per-port counters and captures.
    Switch(switch::Args),
    /// Start and stop a switch and its NICs from a topology file.
    #[command(subcommand)]
    Fabric(fabric::FabricCommand),
    /// Print a shell's completion script for roce (bash, zsh, fish, elvish, powershell).
    #[command(after_long_help = generate::COMPLETION_EXAMPLES)]
    Completions(generate::CompletionArgs),
    /// Print roce's manual page, or write one page per subcommand into a directory.
    #[command(after_long_help = generate::MAN_EXAMPLES)]
    Man(generate::ManArgs),
}

fn main() -> ExitCode {
    end_the_process_on_any_panic();
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
        Command::Conform(args) => conform::run(args),
        Command::Decode(args) => decode::run(args),
        Command::Demo(args) => demo::run(args),
        Command::DemoTarget(args) => demo::run_target(args),
        Command::BenchUdpSink => bench::run_udp_sink(),
        Command::Mem(cmd) => mem::run(cmd),
        Command::Nic(args) => nic::run(args),
        Command::Pingpong(args) => pingpong::run(args),
        Command::Perftest(args) => perftest::run(args),
        Command::Rping(args) => rping::run(args),
        Command::Ucmatose(args) => ucmatose::run(args),
        Command::Udaddy(args) => udaddy::run(args),
        Command::Run(args) => run::run(args),
        Command::Host(cmd) => host::run(cmd),
        Command::Switch(args) => switch::run(args),
        Command::Fabric(cmd) => fabric::run(cmd),
        Command::Completions(args) => generate::completions(args, Cli::command()),
        Command::Man(args) => generate::man(args, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            if !failure.is_quiet() {
                tell!("roce: {failure}");
            }
            failure.exit_code()
        }
    }
}

/// A panic in any thread ends the whole process, after the usual message. By default only the
/// panicking thread would end: a NIC whose engine thread died would keep its control socket
/// and its cable open but never answer again, so its hosts and its peer would each wait out
/// their own timeouts instead of seeing the NIC gone (as they do when it exits).
fn end_the_process_on_any_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
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
/// (see roce <command> --help)`, with clap's suggestion for a typo (`did you mean 'decode'?`)
/// and exit code 2, as every other error is one line.
fn argument_error(e: clap::Error) -> ExitCode {
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        // A closed standard output (`roce --help | head -1`) is not worth a word.
        let _ = e.print();
        return ExitCode::from(e.exit_code() as u8);
    }
    let text = e.render().to_string();
    let path = command_path();
    tell!("roce: {} (see {path} --help)", one_line(&text));
    ExitCode::from(2)
}

/// clap's message in one line: its first paragraph (what is wrong), then its tips as
/// suggestions; the usage and the pointer to `--help` after them are what `--help` is for.
fn one_line(rendered: &str) -> String {
    let mut paragraphs = rendered.split("\n\n");
    let what: Vec<&str> = paragraphs
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .collect();
    let mut line = what.join(" ").trim_start_matches("error: ").to_owned();
    for tip in paragraphs
        .flat_map(str::lines)
        .filter_map(|l| l.trim().strip_prefix("tip: "))
    {
        // "a similar subcommand exists: 'decode'" and "some similar arguments exist: ..."
        let suggestion = match tip.split_once(" exist") {
            Some((_, names)) if tip.contains("similar") => {
                let names: Vec<&str> = names
                    .trim_start_matches('s')
                    .trim_start_matches(": ")
                    .split(", ")
                    .collect();
                match names.split_last() {
                    Some((last, [])) => format!("did you mean {last}?"),
                    Some((last, rest)) => format!("did you mean {} or {last}?", rest.join(", ")),
                    None => tip.to_owned(),
                }
            }
            _ => tip.to_owned(),
        };
        line.push_str("; ");
        line.push_str(&suggestion);
    }
    line
}

/// `roce host post`: the subcommands named on the command line, for the help to look at.
fn command_path() -> String {
    let mut command = Cli::command();
    let mut path = vec!["roce".to_owned()];
    for word in std::env::args().skip(1) {
        let Some(sub) = command.find_subcommand(&word).cloned() else {
            break;
        };
        path.push(word);
        command = sub;
    }
    path.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    fn error(args: &[&str]) -> String {
        let e = Cli::try_parse_from(args).err().expect("a parse error");
        one_line(&e.render().to_string())
    }

    #[test]
    fn typos_get_a_suggestion_on_the_one_error_line() {
        assert_eq!(
            error(&["roce", "deocde", "x.pcap"]),
            "unrecognized subcommand 'deocde'; did you mean 'demo' or 'decode'?"
        );
        assert_eq!(
            error(&[
                "roce",
                "nic",
                "--name",
                "a",
                "--ip",
                "10.0.0.1",
                "--link",
                "x",
                "--lnk-mtu",
                "1500"
            ]),
            "unexpected argument '--lnk-mtu' found; did you mean '--link-mtu'?"
        );
    }

    #[test]
    fn the_version_names_the_commit_when_built_from_git() {
        assert!(VERSION.starts_with(env!("CARGO_PKG_VERSION")));
        if std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            assert!(VERSION.contains(" ("), "{VERSION}");
        }
    }
}
