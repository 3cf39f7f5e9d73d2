//! `roce ucmatose`: librdmacm's ucmatose with one connection, connected with the RDMA CM, to
//! run against the real one (or against itself). The options are ucmatose's own.

use std::net::IpAddr;
use std::process::ExitCode;

use roce_tools::ucmatose::{self, Options};

use crate::attach::{failure, LimitArgs, NicArgs};
use crate::output::Watched;
use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  Server and client on two running NICs (see roce nic --help):
    roce ucmatose --nic nic0
    roce ucmatose -s 10.0.0.1 -C 100 -S 4096 --nic nic1
  Against rdma-core's ucmatose in a Soft-RoCE guest (there: ucmatose), with a NIC of the
  tool's own:
    roce ucmatose -s 10.77.0.2 --connect-retry 60 --link cable:127.0.0.1:47911,127.0.0.1:47910 \\
        --ip 10.77.0.1 --link-mtu 1500";

#[derive(clap::Args)]
pub struct Args {
    /// The server's address: be the client. Without it, this side is the server.
    #[arg(short = 's', value_name = "ADDR")]
    server: Option<IpAddr>,
    /// The address the server listens on (default: all).
    #[arg(short = 'b', value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// The RDMA CM port.
    #[arg(short = 'p', value_name = "PORT", default_value_t = ucmatose::DEFAULT_PORT)]
    port: u16,
    /// Messages each way.
    #[arg(short = 'C', value_name = "COUNT", default_value_t = ucmatose::DEFAULT_COUNT)]
    count: u32,
    /// Bytes per message.
    #[arg(short = 'S', value_name = "SIZE", default_value_t = ucmatose::DEFAULT_SIZE)]
    size: u32,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    nic: NicArgs,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let addr = args.server.or(args.bind).unwrap_or(roce_tools::rping::ANY);
    let opts = Options {
        port: args.port,
        count: args.count,
        size: args.size,
        limits: args.limits.limits(),
        ..Options::new(addr)
    };
    let nic = args.nic.open("ucmatose")?;
    let mut out = Watched::default();
    let result = match args.server {
        Some(_) => ucmatose::client(&nic.ctx, &opts, &mut out),
        None => ucmatose::server(&nic.ctx, &opts, &mut out),
    };
    result.map_err(|e| failure(e, &out))?;
    Ok(ExitCode::SUCCESS)
}
