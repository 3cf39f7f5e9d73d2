//! The command line `roce ucmatose` and `roce udaddy` share: librdmacm's two examples with one
//! connection, to run against the real ones (or against themselves). Their options are the
//! examples' own (`-s ADDR` makes the client), except udaddy's `-p`, which here is the port
//! (udaddy's is the port space; its port is always 7174, our default).

use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;

use roce_nic::verbs::Context;
use roce_tools::{ucmatose, udaddy, ToolError};

use crate::attach::{failure, LimitArgs, NicArgs};
use crate::output::Watched;
use crate::Failure;

// One set of defaults serves both tools' help.
const _: () = assert!(
    ucmatose::DEFAULT_COUNT == udaddy::DEFAULT_COUNT
        && ucmatose::DEFAULT_SIZE == udaddy::DEFAULT_SIZE
);

#[derive(clap::Args)]
pub struct Args {
    /// The server's address: be the client. Without it, this side is the server.
    #[arg(short = 's', value_name = "ADDR")]
    server: Option<IpAddr>,
    /// The address the server listens on (default: all).
    #[arg(short = 'b', value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// The RDMA CM port (default: ucmatose's 7471; udaddy's 7174, the UDP port space's port
    /// the real udaddy always uses).
    #[arg(short = 'p', value_name = "PORT")]
    port: Option<u16>,
    /// Messages (udaddy: datagrams) each way.
    #[arg(short = 'C', value_name = "COUNT", default_value_t = ucmatose::DEFAULT_COUNT)]
    count: u32,
    /// Bytes per message (udaddy: per datagram, at most the path MTU).
    #[arg(short = 'S', value_name = "SIZE", default_value_t = ucmatose::DEFAULT_SIZE)]
    size: u32,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    nic: NicArgs,
}

/// One side of a tool: its server or its client.
type Side<O> = fn(&Context, &O, &mut dyn Write) -> Result<(), ToolError>;

/// Runs `name`'s server (no `-s`) or client with the options `options` makes of the address
/// and port.
fn run<O>(
    args: Args,
    name: &str,
    default_port: u16,
    options: impl FnOnce(&Args, IpAddr, u16) -> O,
    [server, client]: [Side<O>; 2],
) -> Result<ExitCode, Failure> {
    let addr = args.server.or(args.bind).unwrap_or(roce_tools::rping::ANY);
    let opts = options(&args, addr, args.port.unwrap_or(default_port));
    let nic = args.nic.open(name)?;
    let mut out = Watched::default();
    let side = if args.server.is_some() {
        client
    } else {
        server
    };
    side(&nic.ctx, &opts, &mut out).map_err(|e| failure(e, &out))?;
    Ok(ExitCode::SUCCESS)
}

/// `roce ucmatose`: messages both ways over an RDMA CM connection.
pub fn ucmatose(args: Args) -> Result<ExitCode, Failure> {
    let options = |args: &Args, addr, port| ucmatose::Options {
        port,
        count: args.count,
        size: args.size,
        limits: args.limits.limits(),
        ..ucmatose::Options::new(addr)
    };
    let sides: [Side<_>; 2] = [ucmatose::server, ucmatose::client];
    run(args, "ucmatose", ucmatose::DEFAULT_PORT, options, sides)
}

/// `roce udaddy`: UD datagrams both ways, the server's QP found through the RDMA CM (SIDR).
pub fn udaddy(args: Args) -> Result<ExitCode, Failure> {
    let options = |args: &Args, addr, port| udaddy::Options {
        port,
        count: args.count,
        size: args.size,
        limits: args.limits.limits(),
        ..udaddy::Options::new(addr)
    };
    let sides: [Side<_>; 2] = [udaddy::server, udaddy::client];
    run(args, "udaddy", udaddy::DEFAULT_PORT, options, sides)
}
