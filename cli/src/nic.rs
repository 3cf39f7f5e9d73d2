//! `roce nic`: one emulated RNIC as a process, until Ctrl-C, SIGTERM or SIGHUP. Host programs reach it
//! through its control socket and the shared-memory rings it creates (`roce host`, or the
//! `roce_nic::host` library).

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use roce_nic::host::{self, Server};
use roce_nic::link::cable::{CableAddrs, CableLink};
use roce_nic::link::faults::{FaultSpec, Faulty};
use roce_nic::link::iface::IfaceLink;
use roce_nic::link::pcap::{PcapSink, PcapTee};
use roce_nic::link::Link;
use roce_nic::{Device, DeviceConfig, RingMemory};
use roce_wire::EthernetAddress;
use tracing::info;

use crate::signals::Shutdown;
use crate::Failure;

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
    /// The link's IP MTU; path MTUs up to the largest that fits (4200 gives 4096).
    #[arg(long, default_value_t = 4200, value_name = "N")]
    mtu: u32,
    /// The wire: `cable:LOCAL_UDP_ADDR,REMOTE_UDP_ADDR` (one Ethernet frame per datagram, as
    /// QEMU's -netdev dgram) or `iface:IFNAME` (a raw Ethernet interface).
    #[arg(long)]
    link: String,
    /// Record every frame sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Inject faults on the link, e.g. drop=0.01,dup=0.01,reorder=0.05,corrupt=0.01,delay=2ms,
    /// seed=7 (probabilities per frame and direction).
    #[arg(long, value_name = "SPEC")]
    faults: Option<String>,
    /// A peer's MAC address, for peers that do not answer ARP or neighbour discovery: IP=MAC
    /// (repeatable).
    #[arg(long = "neigh", value_name = "IP=MAC")]
    neighbours: Vec<String>,
    /// Follow Soft-RoCE where it deviates from the IBTA spec (retry_cnt 7 retries for ever);
    /// see docs/rxe-differences.md.
    #[arg(long)]
    rxe_compat: bool,
}

/// The media `--link` names.
#[derive(Debug, PartialEq, Eq)]
enum LinkSpec {
    Cable(CableAddrs),
    Iface(String),
}

fn parse_link(text: &str) -> Result<LinkSpec, Failure> {
    if let Some(addrs) = text.strip_prefix("cable:") {
        return addrs
            .parse()
            .map(LinkSpec::Cable)
            .map_err(|e| Failure::usage(format!("--link {text}: {e}")));
    }
    if let Some(name) = text.strip_prefix("iface:").filter(|n| !n.is_empty()) {
        return Ok(LinkSpec::Iface(name.to_owned()));
    }
    Err(Failure::usage(format!(
        "--link {text:?} is not a link: use cable:LOCAL_UDP_ADDR,REMOTE_UDP_ADDR or iface:IFNAME"
    )))
}

/// `ADDR` or `ADDR/PREFIX`.
fn parse_ip_with_prefix(text: &str) -> Result<(IpAddr, Option<u8>), Failure> {
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let ip = parse_ip(addr)?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => None,
        Some(p) => Some(p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| {
            Failure::usage(format!("/{p} is not a prefix length for {ip} (0 to {max})"))
        })?),
    };
    Ok((ip, prefix))
}

fn parse_ip(text: &str) -> Result<IpAddr, Failure> {
    text.parse()
        .map_err(|_| Failure::usage(format!("{text:?} is not an IP address")))
}

fn parse_mac(text: &str) -> Result<EthernetAddress, Failure> {
    text.parse().map_err(|_| {
        Failure::usage(format!(
            "{text:?} is not a MAC address such as 02:00:0a:00:00:01"
        ))
    })
}

fn parse_neighbour(text: &str) -> Result<(IpAddr, EthernetAddress), Failure> {
    let (ip, mac) = text
        .split_once('=')
        .ok_or_else(|| Failure::usage(format!("--neigh {text:?} is not IP=MAC")))?;
    Ok((parse_ip(ip)?, parse_mac(mac)?))
}

/// The device's settings from the command line.
fn config(args: &Args) -> Result<DeviceConfig, Failure> {
    host::check_name(&args.name).map_err(|e| Failure::usage(e.to_string()))?;
    let (ip, prefix) = parse_ip_with_prefix(&args.ip)?;
    let mut config = DeviceConfig::new(&args.name, ip);
    config.rxe_compat = args.rxe_compat;
    if let Some(prefix) = prefix {
        config.prefix_lens.insert(ip, prefix);
    }
    if let Some(mac) = &args.mac {
        config.mac = parse_mac(mac)?;
    }
    config.mtu = args.mtu;
    for n in &args.neighbours {
        config.neighbours.push(parse_neighbour(n)?);
    }
    // Hosts in other processes map the rings: they live in /dev/shm under the NIC's name.
    config.rings = RingMemory::Shared {
        prefix: args.name.clone(),
    };
    Ok(config)
}

fn open_link(spec: &LinkSpec, text: &str) -> Result<Box<dyn Link>, Failure> {
    match spec {
        LinkSpec::Cable(addrs) => match CableLink::open(*addrs) {
            Ok(link) => Ok(Box::new(link)),
            Err(e) => Err(Failure::new(cable_error(text, addrs, &e))),
        },
        LinkSpec::Iface(name) => match IfaceLink::open(name) {
            Ok(link) => Ok(Box::new(link)),
            Err(e) => Err(Failure::new(format!("cannot open the link {text}: {e}"))),
        },
    }
}

/// Says why a cable could not be opened, naming the privilege when one is missing.
fn cable_error(text: &str, addrs: &CableAddrs, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::AddrInUse => format!(
            "cannot open the link {text}: the local address {} is in use",
            addrs.local
        ),
        io::ErrorKind::AddrNotAvailable => format!(
            "cannot open the link {text}: {} is not an address of this machine",
            addrs.local.ip()
        ),
        io::ErrorKind::PermissionDenied => format!(
            "cannot open the link {text}: binding UDP port {} needs the CAP_NET_BIND_SERVICE capability (run as root or grant it)",
            addrs.local.port()
        ),
        _ => format!("cannot open the link {text}: {e}"),
    }
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    // Before any thread starts, so that every thread inherits the blocked mask.
    let shutdown = Shutdown::block();
    let config = config(&args)?;
    let spec = parse_link(&args.link)?;
    let path = host::socket_path(&config.name);
    let claim = Server::claim(&config.name, &path).map_err(|e| Failure::new(e.to_string()))?;
    let faults = match &args.faults {
        Some(text) => Some(
            text.parse::<FaultSpec>()
                .map_err(|e| Failure::usage(format!("--faults {text}: {e}")))?,
        ),
        None => None,
    };
    let mut link = open_link(&spec, &args.link)?;
    if let Some(faults) = faults {
        link = Box::new(Faulty::new(link, faults));
    }
    let describe = link.describe();
    if let Some(file) = &args.pcap {
        let sink = PcapSink::create(file).map_err(|e| {
            Failure::new(format!(
                "cannot create the capture file {}: {e}",
                file.display()
            ))
        })?;
        link = Box::new(PcapTee::new(link, sink, true));
    }
    let (name, mac, ip) = (config.name.clone(), config.mac, config.ips[0]);
    let device = Device::start(config, link)
        .map_err(|e| Failure::new(format!("cannot start the NIC {name}: {e}")))?;
    let server = claim
        .serve(&device)
        .map_err(|e| Failure::new(e.to_string()))?;
    say!(
        "{name} ready: mac {mac}, ip {ip}, link {describe}, socket {}",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse_or_say_what_is_expected() {
        assert_eq!(
            parse_link("cable:127.0.0.1:7001,127.0.0.1:7002").unwrap(),
            LinkSpec::Cable("127.0.0.1:7001,127.0.0.1:7002".parse().unwrap())
        );
        assert_eq!(
            parse_link("iface:veth0").unwrap(),
            LinkSpec::Iface("veth0".into())
        );
        for bad in ["cable:127.0.0.1:7001", "iface:", "tap0", ""] {
            assert!(parse_link(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn addresses_may_carry_a_prefix_length() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(parse_ip_with_prefix("10.0.0.1").unwrap(), (v4, None));
        assert_eq!(parse_ip_with_prefix("10.0.0.1/16").unwrap(), (v4, Some(16)));
        assert!(parse_ip_with_prefix("fd00::1/64").is_ok());
        for bad in ["10.0.0.1/33", "10.0.0.1/", "10.0.0/24", "fd00::1/129"] {
            assert!(parse_ip_with_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn neighbours_are_ip_equals_mac() {
        let (ip, mac) = parse_neighbour("10.0.0.2=02:00:0a:00:00:02").unwrap();
        assert_eq!(ip, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(mac, EthernetAddress([2, 0, 10, 0, 0, 2]));
        assert!(parse_neighbour("10.0.0.2").is_err());
        assert!(parse_neighbour("10.0.0.2=zz").is_err());
    }
}
