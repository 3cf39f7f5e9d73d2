//! `roce nic`: one emulated RNIC as a process, until Ctrl-C, SIGTERM or SIGHUP. Host programs reach it
//! through its control socket and the shared-memory rings it creates (`roce host`, or the
//! `roce_nic::host` library).

use std::path::PathBuf;
use std::process::ExitCode;

use roce_nic::host::{self, Server};
use roce_nic::link::ecn::Ect;
use roce_nic::link::paced::Rate;
use roce_nic::link::pfc::Pausable;
use roce_nic::pkey::PKeyTable;
use roce_nic::{Device, RingMemory};
use tracing::info;

use crate::device::{self, DeviceWords};
use crate::output::mac;
use crate::signals::Shutdown;
use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  Two NICs cabled to each other over loopback UDP (each finds the other by ARP):
    roce nic --name nic0 --ip 10.0.0.1 --link cable:127.0.0.1:7001,127.0.0.1:7002 &
    roce nic --name nic1 --ip 10.0.0.2 --link cable:127.0.0.1:7002,127.0.0.1:7001 &
  A lossy link, recorded for Wireshark:
    roce nic --name nic0 --ip 10.0.0.1 --link cable:127.0.0.1:7001,127.0.0.1:7002 \\
        --faults drop=0.01,seed=7 --pcap nic0.pcap
  A limited member of the default partition (it talks to full members, 0xffff, only):
    roce nic --name nic0 --ip 10.0.0.1 --link cable:127.0.0.1:7001,127.0.0.1:7002 --pkey 0x7fff
  A NIC on a veth interface (needs CAP_NET_RAW), path MTU 1024:
    roce nic --name nic0 --ip 10.0.0.1/24 --link iface:veth0 --link-mtu 1500";

#[derive(clap::Args)]
pub struct Args {
    /// The NIC's name: host programs open it by this name.
    #[arg(long)]
    name: String,
    /// The NIC's IP address, optionally with its subnet's prefix length (default /24 for
    /// IPv4, /64 for IPv6); its RoCEv2 GID is derived from it.
    #[arg(long, value_name = "ADDR[/PREFIX]")]
    ip: String,
    /// The NIC's MAC address (default: 02:00 followed by the last four bytes of the IP).
    #[arg(long)]
    mac: Option<String>,
    /// The link's IP MTU: the largest IP packet a frame carries. RoCE's path MTU is then the
    /// largest of 256 ... 4096 that fits with the headers: 4200 carries 4096, 1500 carries
    /// 1024. (`--mtu` is the path MTU wherever roce takes one.)
    #[arg(long, default_value_t = 4200, value_name = "BYTES")]
    link_mtu: u32,
    /// What this NIC's --mtu was before --mtu meant the path MTU everywhere: refused, with the
    /// right name.
    #[arg(long, hide = true)]
    mtu: Option<String>,
    /// The wire: `cable:LOCAL_UDP_ADDR,REMOTE_UDP_ADDR` (one Ethernet frame per datagram, as
    /// QEMU's -netdev dgram), `iface:IFNAME` (a raw Ethernet interface) or `shm:NAME` (shared
    /// memory to another NIC process on this machine started with the same name).
    #[arg(long)]
    link: String,
    /// Record every frame sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Line rate in bits per second (K, M, G), e.g. 200M. Over a cable nothing else limits how
    /// fast frames leave; a slower peer (a QEMU guest) would lose bursts.
    #[arg(long, value_name = "BITS")]
    rate: Option<String>,
    /// Inject faults on the link, e.g. drop=0.01,dup=0.01,reorder=0.05,corrupt=0.01,delay=2ms,
    /// seed=7 (probabilities per frame and direction). A reordered frame waits for 1 to 8 later
    /// frames to pass it, at most window=20us (window=1ms: as before).
    #[arg(long, value_name = "SPEC")]
    faults: Option<String>,
    /// A peer's MAC address, for peers that do not answer ARP or neighbour discovery: IP=MAC
    /// (repeatable).
    #[arg(long = "neigh", value_name = "IP=MAC")]
    neighbours: Vec<String>,
    /// Mark the RoCE packets we send ECN-capable (ECT(0)), so that congested switches and
    /// queues mark them CE instead of dropping them.
    #[arg(long)]
    ecn: bool,
    /// Run DCQCN congestion control (as RoCE NICs do in hardware): mark what we send ECT(0),
    /// answer packets marked CE with CNPs, and keep a rate limiter per QP that CNPs cut and
    /// time and bytes raise again. Off by default: Soft-RoCE has none.
    #[arg(long)]
    dcqcn: bool,
    /// Set a DCQCN parameter by its mlx5 name, e.g. rp_ai_rate=5 or np_min_time_between_cnps=50
    /// (repeatable; implies --dcqcn; µs, Mbit/s, bytes, 1/1024ths as the hardware's).
    #[arg(long = "dcqcn-param", value_name = "NAME=VALUE")]
    dcqcn_params: Vec<String>,
    /// Obey 802.1Qbb PFC pause frames for this priority (default 3): hold everything we send
    /// while the peer says pause. Pause times are in quanta of 512 bit times at --rate (10G
    /// without one).
    #[arg(
        long,
        value_name = "PRIORITY",
        num_args = 0..=1,
        default_missing_value = "3",
        value_parser = clap::value_parser!(u8).range(0..=7)
    )]
    pfc: Option<u8>,
    /// Follow Soft-RoCE where it deviates from the IBTA spec (retry_cnt 7 retries for ever);
    /// see docs/rxe-differences.md.
    #[arg(long)]
    rxe_compat: bool,
    /// IRN's two-level retransmission timer: with at most 3 packets unacknowledged (or a tail
    /// probe out), an RC requester goes back after a timeout from the measured round trip
    /// (RFC 6298's SRTT + 4 RTTVAR, at least 100 µs, at most the QP's timeout) instead of
    /// waiting for the QP's Local ACK Timeout; it spends no retry. A deviation from the IBTA's
    /// one timer: see docs/rxe-differences.md.
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = on_off, action = clap::ArgAction::Set)]
    rto_low: bool,
    /// The port's P_Key table, in hex: the partitions it belongs to, 0x8000 set for a full
    /// member (default 0xffff, full member of the default partition; 0x7fff is a limited member
    /// of it, which talks to full members only). A QP's pkey_index picks its entry.
    #[arg(long = "pkey", value_name = "KEY[,KEY...]")]
    pkeys: Option<PKeyTable>,
    /// Set a limit of what hosts may create, e.g. max_qp=64 or host_max_shm=67108864
    /// (repeatable; `roce host info` lists them all with their values).
    #[arg(long = "limit", value_name = "NAME=VALUE")]
    limits: Vec<String>,
    /// Engine threads the QPs are sharded over (QP n on thread n mod N; the first also runs the
    /// link, the IP stack and the connection manager). More than one pays where QPs of
    /// different threads carry traffic at once and the machine has a core for each.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    // Before any thread starts, so that every thread inherits the blocked mask.
    let shutdown = Shutdown::block();
    if args.mtu.is_some() {
        return Err(Failure::usage(
            "the NIC's MTU is --link-mtu, the largest IP packet on its link (--mtu is the path \
             MTU, which the NIC derives from it)",
        ));
    }
    host::check_name(&args.name).map_err(|e| Failure::usage(e.to_string()))?;
    let mut config = device::config(&DeviceWords {
        name: &args.name,
        ip: &args.ip,
        mac: args.mac.as_deref(),
        mtu: args.link_mtu,
        neighbours: &args.neighbours,
        rxe_compat: args.rxe_compat,
    })?;
    config.rto_low = args.rto_low;
    config.threads = args.threads as usize;
    // Hosts in other processes map the rings: memfds named after the NIC.
    config.rings = RingMemory::Shared {
        prefix: args.name.clone(),
    };
    if let Some(pkeys) = args.pkeys {
        config.pkeys = pkeys;
    }
    for limit in &args.limits {
        config
            .limits
            .set(limit)
            .map_err(|e| Failure::usage(e.to_string()))?;
    }
    let spec = device::parse_link(&args.link)?;
    let rate = device::parse_rate(args.rate.as_deref())?;
    if args.dcqcn || !args.dcqcn_params.is_empty() {
        let mut params = roce_nic::dcqcn::Params::default();
        for assignment in &args.dcqcn_params {
            params
                .set(assignment)
                .map_err(|e| Failure::usage(format!("--dcqcn-param: {e}")))?;
        }
        config.dcqcn = Some(match rate {
            Some(rate) => params.with_line_rate(rate.0),
            None => params,
        });
    }
    let faults = device::parse_faults(args.faults.as_deref())?;
    let path = host::socket_path(&config.name);
    let claim = Server::claim(&config.name, &path).map_err(|e| Failure::new(e.to_string()))?;
    let (mut link, mut describe) =
        device::open(&spec, &args.link, rate, faults, args.pcap.as_deref())?;
    if let Some(priority) = args.pfc {
        let speed = rate.unwrap_or(Rate(10_000_000_000));
        link = Box::new(Pausable::new(link, priority, speed));
        describe = format!("{describe}, obeying PFC priority {priority}");
    }
    if args.ecn && config.dcqcn.is_none() {
        link = Box::new(Ect::new(link));
        describe = format!("{describe}, ECT on RoCE");
    }
    if config.dcqcn.is_some() {
        describe = format!("{describe}, DCQCN");
    }
    let (name, hw, ip) = (config.name.clone(), config.mac, config.ips[0]);
    let device = Device::start(config, link)
        .map_err(|e| Failure::new(format!("cannot start the NIC {name}: {e}")))?;
    let server = claim
        .serve(&device)
        .map_err(|e| Failure::new(e.to_string()))?;
    say!(
        "{name} ready: mac {}, ip {ip}, link {describe}, socket {}",
        mac(hw),
        server.path().display()
    );
    let signal = shutdown.wait();
    info!(nic = %name, signal, "shutting down");
    // The engine first: QPs go to the error state and flush their work as completions, which
    // hosts still read from the rings; then the hosts' connections close and the socket goes.
    device.stop();
    server.stop();
    say!("{name} stopped");
    Ok(ExitCode::SUCCESS)
}

/// Reads `on` or `off`.
fn on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{text}`: on or off")),
    }
}
