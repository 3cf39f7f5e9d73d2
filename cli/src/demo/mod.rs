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
use roce_demo::{Beat, DemoError, Mode, Observer, Options, Scenario};

use crate::Failure;
pub use target::Args as TargetArgs;
use terminal::Terminal;

const AFTER_HELP: &str = "\
By default each NIC and the target program run as processes of their own, cabled over \
loopback UDP through the demo, and the target is frozen with SIGSTOP while the NICs work. \
Nothing needs root or setup. The proof lines say what was checked: the bytes in the target's \
memory, its CPU time and context switches from /proc, the ICRC of every frame. A proof that \
does not hold is marked ✗ and the demo exits with 1.";

const AFTER_LONG_HELP: &str = "\
By default each NIC and the target program run as processes of their own, cabled over \
loopback UDP through the demo, and the target is frozen with SIGSTOP while the NICs work. \
Nothing needs root or setup. The proof lines say what was checked: the bytes in the target's \
memory, its CPU time and context switches from /proc, the ICRC of every frame. A proof that \
does not hold is marked ✗ and the demo exits with 1.

Examples:
  roce demo                                   an RDMA WRITE into a frozen process
  roce demo --scenario loss --pcap loss.pcap  a lost packet and go-back-N, for Wireshark too
  roce demo --scenario read --html read.html  the run as one page: ladder, memory, CPU line
  roce demo --size 1G                         a gigabyte, with progress and the Gbit/s
  roce demo --step                            pause after each step, for a classroom
  roce demo --quiet; roce demo --json         only the proof lines, as text or JSON
  roce demo --scenario tcp-vs-rdma            what TCP costs the receiver's CPU, and RDMA not
  roce demo --scenario allreduce --hosts 8    8 hosts sum their vectors in a ring, as AI training
  roce demo --scenario connect                the RDMA CM's handshake: each MAD, each QP state
  roce demo --scenario congestion --html cc.html  an incast without and with DCQCN, plotted";

#[derive(clap::Args)]
#[command(after_help = AFTER_HELP, after_long_help = AFTER_LONG_HELP)]
pub struct Args {
    /// What to show.
    #[arg(long, default_value = "write")]
    scenario: ScenarioArg,
    /// Run the NICs and the host programs inside this process (the target is a thread that
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
    #[arg(long, conflicts_with_all = ["quiet", "json"])]
    step: bool,
    /// Print only the proof lines.
    #[arg(long)]
    quiet: bool,
    /// Print only the proof lines, each as a JSON object: {"scenario", "held", "proof"}; and
    /// the figures tcp-vs-rdma and allreduce measure, an object each: {"scenario", "figures",
    /// ...}.
    #[arg(long)]
    json: bool,
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
    if args.json {
        let mut proofs = JsonProofs {
            scenario: args.scenario.0,
        };
        roce_demo::run(&options, &mut proofs).map_err(failure)?;
        return Ok(ExitCode::SUCCESS);
    }
    let pause = args.step && std::io::stdin().is_terminal();
    if args.step && !pause {
        tell!(
            "roce: --step waits for Enter on a terminal, and standard input is not a terminal: \
             not pausing"
        );
    }
    let mut terminal = Terminal::new(args.quiet, pause);
    roce_demo::run(&options, &mut terminal).map_err(failure)?;
    Ok(ExitCode::SUCCESS)
}

/// The proof lines as JSON lines, for scripts and CI: one object a proof, as it is told; and
/// one an object for each set of figures a scenario measured (`tcp-vs-rdma`, `allreduce`),
/// told by its `figures` key, e.g. `{"scenario": "tcp-vs-rdma", "figures": "party", "transfer":
/// "rdma", "party": "receiver", "on_cpu_ns": 0, ...}`.
struct JsonProofs {
    scenario: Scenario,
}

impl Observer for JsonProofs {
    fn beat(&mut self, beat: &Beat) {
        let line = match beat {
            Beat::Proof { held, text } => serde_json::json!({
                "scenario": self.scenario.name(),
                "held": held,
                "proof": text,
            }),
            Beat::Figures(figures) => {
                let mut line = serde_json::Map::new();
                line.insert("scenario".into(), self.scenario.name().into());
                line.extend(figures.clone());
                serde_json::Value::Object(line)
            }
            _ => return,
        };
        // Like the narration: a reader that went away must not stop the demo half way, with
        // its target frozen.
        say!("{line}");
    }
}

pub fn run_target(args: TargetArgs) -> Result<ExitCode, Failure> {
    target::run(args)
}
