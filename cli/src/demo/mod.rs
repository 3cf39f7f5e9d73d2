//! `roce demo`: see RDMA. Two NICs and two host programs play a scenario; the narration shows
//! the target's keys, the work request, every packet field by field, the NICs' decisions, and
//! the proof that the target's memory changed while it did nothing. The scenario lives in the
//! `roce-demo` library; this is its options and its terminal.

mod target;
mod terminal;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::PossibleValue;
use roce_demo::{DemoError, Mode, Options, Scenario};

use crate::Failure;
pub use target::Args as TargetArgs;
use terminal::Terminal;

const AFTER_HELP: &str = "\
By default each NIC and the target program run as processes of their own, cabled over \
loopback UDP through the demo, and the target is frozen with SIGSTOP while the NICs work. \
Nothing needs root or setup. The proof lines say what was checked: the bytes in the target's \
memory, its CPU time and context switches from /proc, the ICRC of every frame.";

#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// What to show.
    #[arg(long, default_value = "write")]
    scenario: ScenarioArg,
    /// Run both NICs and the target program inside this process (the target is a thread that
    /// waits instead of a frozen process).
    #[arg(long)]
    in_process: bool,
    /// Move this many bytes (K, M, G suffixes, up to 2G) instead of the scenario's sentence;
    /// shows progress and the achieved Gbit/s (write, read, send and imm). For tcp-vs-rdma the
    /// bytes sent both ways (default 64M), for allreduce each host's vector of floats (default
    /// 4M).
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// The hosts in the allreduce ring, each with its own NIC: 2 to 16 (default 4).
    #[arg(long, value_name = "N")]
    hosts: Option<usize>,
    /// Write every frame on the wire to this pcap file, for Wireshark.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Write a self-contained HTML page: the frames as a ladder diagram, the target's memory
    /// map, its CPU over time.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Pause after each step until Enter, for a classroom. Only with a terminal on standard
    /// input; otherwise the demo says so and runs through.
    #[arg(long, conflicts_with = "quiet")]
    step: bool,
    /// Print only the proof lines.
    #[arg(long)]
    quiet: bool,
}

/// A scenario as an option value, with its one-line summary in `--help`.
#[derive(Clone, Copy)]
struct ScenarioArg(Scenario);

const SCENARIOS: [ScenarioArg; Scenario::ALL.len()] = {
    let mut all = [ScenarioArg(Scenario::Write); Scenario::ALL.len()];
    let mut i = 0;
    while i < all.len() {
        all[i] = ScenarioArg(Scenario::ALL[i]);
        i += 1;
    }
    all
};

impl clap::ValueEnum for ScenarioArg {
    fn value_variants<'a>() -> &'a [ScenarioArg] {
        &SCENARIOS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.name()).help(self.0.summary()))
    }
}

fn failure(e: DemoError) -> Failure {
    match e {
        DemoError::Usage(message) => Failure::usage(message),
        e => Failure::new(e.to_string()),
    }
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let size = args
        .size
        .as_deref()
        .map(|text| {
            roce_hostmem::parse_size(text)
                .map_err(|e| Failure::usage(format!("--size {text}: {e}")))
        })
        .transpose()?;
    let mode = if args.in_process {
        Mode::InProcess
    } else {
        let roce = std::env::current_exe().map_err(|e| {
            Failure::new(format!("cannot find this program to start the NICs: {e}"))
        })?;
        Mode::Processes { roce }
    };
    let options = Options {
        scenario: args.scenario.0,
        mode,
        size,
        hosts: args.hosts,
        pcap: args.pcap,
        html: args.html,
    };
    let pause = args.step && std::io::stdin().is_terminal();
    if args.step && !pause {
        tell!(
            "roce: --step waits for Enter on a terminal, and standard input is none: not pausing"
        );
    }
    let mut terminal = Terminal::new(args.quiet, pause);
    roce_demo::run(&options, &mut terminal).map_err(failure)?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_target(args: TargetArgs) -> Result<ExitCode, Failure> {
    target::run(args)
}
