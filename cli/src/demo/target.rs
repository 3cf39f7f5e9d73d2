//! `roce demo-target` (hidden): the demo's target program, started by `roce demo` as a process
//! of its own so that the demo can freeze it.

use std::process::ExitCode;

use roce_demo::Scenario;

use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// The target's NIC.
    #[arg(long)]
    nic: String,
    /// The name of the region to create for its memory.
    #[arg(long)]
    region: String,
    #[arg(long)]
    scenario: String,
    /// Bytes the scenario moves instead of its sentence.
    #[arg(long)]
    size: Option<usize>,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let scenario: Scenario = args.scenario.parse().map_err(Failure::usage)?;
    roce_demo::target_host::run_process(&args.nic, &args.region, scenario, args.size)
        .map_err(|e| Failure::new(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
