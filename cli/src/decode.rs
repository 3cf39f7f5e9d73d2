//! `roce decode`: print the RoCEv2 packets of captures.

use std::process::ExitCode;

use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Capture files (pcap or pcapng).
    #[arg(required = true)]
    files: Vec<std::path::PathBuf>,
}

pub fn run(_args: Args) -> Result<ExitCode, Failure> {
    Err(Failure::new("decode is not built yet"))
}
