//! `roce rping`: rdma-core's rping, connected with the RDMA CM, to run against the real one (or
//! against itself). The options are rping's own.

use std::net::IpAddr;
use std::process::ExitCode;

use roce_tools::rping::{self, Options};

use crate::attach::{failure, LimitArgs, NicArgs};
use crate::output::Watched;
use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  Server and client on two running NICs (see roce nic --help):
    roce rping -s --nic nic0
    roce rping -c -a 10.0.0.1 -C 10 -v -V --nic nic1
  Against rdma-core's rping in a Soft-RoCE guest at 10.77.0.2 (there: rping -s -a 10.77.0.2),
  with a NIC of the tool's own:
    roce rping -c -a 10.77.0.2 -C 300 -V --link cable:127.0.0.1:47911,127.0.0.1:47910 \\
        --ip 10.77.0.1 --link-mtu 1500";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["server", "client"])))]
// rping's -V is validation, not the version.
#[command(disable_version_flag = true)]
pub struct Args {
    /// Be the server: take one connection and answer its pings.
    #[arg(short = 's')]
    server: bool,
    /// Be the client: connect to -a and ping.
    #[arg(short = 'c')]
    client: bool,
    /// The server's address (client), or the address to listen on (server; default: all).
    #[arg(short = 'a', value_name = "ADDR")]
    addr: Option<IpAddr>,
    /// The RDMA CM port.
    #[arg(short = 'p', value_name = "PORT", default_value_t = rping::DEFAULT_PORT)]
    port: u16,
    /// Pings the client sends; 0 pings until stopped. The server, as rping's, answers until
    /// the client disconnects.
    #[arg(short = 'C', value_name = "COUNT", default_value_t = 0)]
    count: u64,
    /// Bytes of the ping buffer.
    #[arg(short = 'S', value_name = "SIZE", default_value_t = rping::DEFAULT_SIZE)]
    size: usize,
    /// Print each ping's data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Check each echo against the ping (the client; the server always checks what it reads).
    #[arg(short = 'V')]
    validate: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    nic: NicArgs,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let addr = match (args.client, args.addr) {
        (true, None) => {
            return Err(Failure::usage(
                "a client needs the server's address: -a ADDR",
            ))
        }
        (_, Some(addr)) => addr,
        (false, None) => rping::ANY,
    };
    let opts = Options {
        port: args.port,
        size: args.size,
        count: args.count,
        verbose: args.verbose,
        validate: args.validate,
        limits: args.limits.limits(),
        ..Options::new(addr)
    };
    let nic = args.nic.open("rping")?;
    let mut out = Watched::default();
    let result = if args.client {
        rping::client(&nic.ctx, &opts, &mut out)
    } else {
        rping::server(&nic.ctx, &opts, &mut out)
    };
    result.map_err(|e| failure(e, &out))?;
    Ok(ExitCode::SUCCESS)
}
