//! `roce udaddy`: librdmacm's udaddy with one connection — UD QPs found through the RDMA CM's
//! UDP port space (SIDR) — to run against the real one (or against itself). The options are
//! udaddy's own, except `-p`, which here is the port (udaddy's is the port space; its port is
//! always 7174, our default).

use std::net::IpAddr;
use std::process::ExitCode;

use roce_tools::udaddy::{self, Options};

use crate::attach::{failure, LimitArgs, NicArgs};
use crate::output::Watched;
use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  Server and client on two running NICs (see roce nic --help):
    roce udaddy --nic nic0
    roce udaddy -s 10.0.0.1 -C 100 -S 1000 --nic nic1
  Against rdma-core's udaddy in a Soft-RoCE guest (there: udaddy), with a NIC of the
  tool's own:
    roce udaddy -s 10.77.0.2 --connect-retry 60 --link cable:127.0.0.1:47911,127.0.0.1:47910 \\
        --ip 10.77.0.1 --link-mtu 1500";

#[derive(clap::Args)]
pub struct Args {
    /// The server's address: be the client. Without it, this side is the server.
    #[arg(short = 's', value_name = "ADDR")]
    server: Option<IpAddr>,
    /// The address the server listens on (default: all).
    #[arg(short = 'b', value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// The UDP port space's port (udaddy's is always 7174).
    #[arg(short = 'p', value_name = "PORT", default_value_t = udaddy::DEFAULT_PORT)]
    port: u16,
    /// Datagrams each way.
    #[arg(short = 'C', value_name = "COUNT", default_value_t = udaddy::DEFAULT_COUNT)]
    count: u32,
    /// Bytes per datagram (at most the path MTU).
    #[arg(short = 'S', value_name = "SIZE", default_value_t = udaddy::DEFAULT_SIZE)]
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
    let nic = args.nic.open("udaddy")?;
    let mut out = Watched::default();
    let result = match args.server {
        Some(_) => udaddy::client(&nic.ctx, &opts, &mut out),
        None => udaddy::server(&nic.ctx, &opts, &mut out),
    };
    result.map_err(|e| failure(e, &out))?;
    Ok(ExitCode::SUCCESS)
}
