//! `roce demo-target` (hidden): the demo's target program, started by `roce demo` as a process
//! of its own so that the demo can freeze it; for `--scenario allreduce`, one host of the ring.

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
    /// Bytes the scenario moves instead of its sentence (allreduce: the bytes of each vector).
    #[arg(long)]
    size: Option<usize>,
    /// allreduce: this host's place in the ring, from 0.
    #[arg(long)]
    rank: Option<usize>,
    /// allreduce: the hosts in the ring.
    #[arg(long)]
    hosts: Option<usize>,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let scenario: Scenario = args.scenario.parse().map_err(Failure::usage)?;
    let result = if scenario == Scenario::Allreduce {
        let (Some(rank), Some(hosts), Some(size)) = (args.rank, args.hosts, args.size) else {
            return Err(Failure::usage(
                "a host of the allreduce needs --rank, --hosts and --size",
            ));
        };
        roce_demo::allreduce::host::run_process(
            &args.nic,
            &args.region,
            rank,
            hosts,
            size / roce_demo::allreduce::FLOAT,
        )
    } else {
        roce_demo::target_host::run_process(&args.nic, &args.region, scenario, args.size)
    };
    result.map_err(|e| Failure::new(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
