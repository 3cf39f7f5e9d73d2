//! `roce mem`: host memory regions seen from a shell.

use std::process::ExitCode;

use crate::Failure;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Create a region.
    Create { name: String, size: String },
}

pub fn run(_cmd: Command) -> Result<ExitCode, Failure> {
    Err(Failure::new("mem is not built yet"))
}
