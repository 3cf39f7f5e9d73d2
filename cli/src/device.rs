//! An emulated NIC from command-line words: its addresses, its link (`cable:` or `iface:`), and
//! the faults and capture around the link. Shared by `roce nic` and by the tools that run a NIC
//! of their own (`roce pingpong --link ...`, `roce perftest --link ...`).

use std::io;
use std::net::IpAddr;
use std::path::Path;

use roce_nic::link::cable::{CableAddrs, CableLink};
use roce_nic::link::faults::{FaultSpec, Faulty};
use roce_nic::link::iface::IfaceLink;
use roce_nic::link::paced::{Paced, Rate};
use roce_nic::link::pcap::{PcapSink, PcapTee};
use roce_nic::link::shm::ShmLink;
use roce_nic::link::Link;
use roce_nic::DeviceConfig;
use roce_wire::EthernetAddress;

use crate::Failure;

/// The media `--link` names.
#[derive(Debug, PartialEq, Eq)]
pub enum LinkSpec {
    Cable(CableAddrs),
    Iface(String),
    /// A shared-memory link to another NIC process on this machine, both ends named alike.
    Shm(String),
}

pub fn parse_link(text: &str) -> Result<LinkSpec, Failure> {
    if let Some(addrs) = text.strip_prefix("cable:") {
        return addrs
            .parse()
            .map(LinkSpec::Cable)
            .map_err(|e| Failure::usage(format!("--link {text}: {e}")));
    }
    if let Some(name) = text.strip_prefix("iface:").filter(|n| !n.is_empty()) {
        return Ok(LinkSpec::Iface(name.to_owned()));
    }
    if let Some(name) = text.strip_prefix("shm:").filter(|n| !n.is_empty()) {
        return Ok(LinkSpec::Shm(name.to_owned()));
    }
    Err(Failure::usage(format!(
        "--link {text:?} is not a link: use cable:LOCAL_UDP_ADDR,REMOTE_UDP_ADDR, iface:IFNAME or shm:NAME"
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

/// What the command line says about a device, in the words of its flags.
pub struct DeviceWords<'a> {
    pub name: &'a str,
    /// `ADDR` or `ADDR/PREFIX`.
    pub ip: &'a str,
    pub mac: Option<&'a str>,
    /// The link's IP MTU.
    pub mtu: u32,
    /// `IP=MAC` each.
    pub neighbours: &'a [String],
    pub rxe_compat: bool,
}

/// The device's settings from the command line (with private rings: a NIC process shares
/// them itself).
pub fn config(words: &DeviceWords<'_>) -> Result<DeviceConfig, Failure> {
    let (ip, prefix) = parse_ip_with_prefix(words.ip)?;
    let mut config = DeviceConfig::new(words.name, ip);
    if let Some(prefix) = prefix {
        config.prefix_lens.insert(ip, prefix);
    }
    if let Some(mac) = words.mac {
        config.mac = parse_mac(mac)?;
    }
    config.mtu = words.mtu;
    for n in words.neighbours {
        config.neighbours.push(parse_neighbour(n)?);
    }
    config.rxe_compat = words.rxe_compat;
    Ok(config)
}

/// Reads `--faults SPEC`.
pub fn parse_faults(text: Option<&str>) -> Result<Option<FaultSpec>, Failure> {
    text.map(|text| {
        text.parse::<FaultSpec>()
            .map_err(|e| Failure::usage(format!("--faults {text}: {e}")))
    })
    .transpose()
}

/// Reads `--rate BITS`.
pub fn parse_rate(text: Option<&str>) -> Result<Option<Rate>, Failure> {
    text.map(|text| {
        text.parse::<Rate>()
            .map_err(|e| Failure::usage(format!("--rate: {e}")))
    })
    .transpose()
}

/// Opens the link `text` (as parsed into `spec`), sending no faster than `rate`, with `faults`
/// injected on it and every frame that crosses it recorded to `pcap`; also returns the link's
/// description (without the capture).
pub fn open(
    spec: &LinkSpec,
    text: &str,
    rate: Option<Rate>,
    faults: Option<FaultSpec>,
    pcap: Option<&Path>,
) -> Result<(Box<dyn Link>, String), Failure> {
    let mut link = open_link(spec, text)?;
    if let Some(rate) = rate {
        link = Box::new(Paced::new(link, rate));
    }
    if let Some(faults) = faults {
        link = Box::new(Faulty::new(link, faults));
    }
    let describe = link.describe();
    if let Some(file) = pcap {
        let sink = PcapSink::create(file).map_err(|e| {
            Failure::new(format!(
                "cannot create the capture file {}: {e}",
                file.display()
            ))
        })?;
        link = Box::new(PcapTee::new(link, sink, true));
    }
    Ok((link, describe))
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
        LinkSpec::Shm(name) => match ShmLink::open(name) {
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
        assert_eq!(
            parse_link("shm:rack1").unwrap(),
            LinkSpec::Shm("rack1".into())
        );
        for bad in ["cable:127.0.0.1:7001", "iface:", "shm:", "tap0", ""] {
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
