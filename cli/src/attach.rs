//! Where `roce pingpong` and `roce perftest` get their NIC: a running `roce nic` process
//! (`--nic NAME`), or an emulated NIC of their own in this process (`--link ... --ip ...`),
//! which lives exactly as long as the tool runs.

use std::path::PathBuf;
use std::time::Duration;

use roce_nic::pkey::PKeyTable;
use roce_nic::verbs::{Context, Mtu};
use roce_nic::Device;
use roce_tools::{Limits, ToolError};

use crate::device::{self, DeviceWords};
use crate::Failure;

/// How long the tools wait, as flags.
#[derive(clap::Args)]
pub struct LimitArgs {
    /// Seconds any one step may wait (the client, a message, a completion).
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    timeout: u64,
    /// Seconds a client keeps trying while the server is not listening yet.
    #[arg(long, default_value_t = 0, value_name = "SECONDS")]
    connect_retry: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> Limits {
        Limits {
            step: Duration::from_secs(self.timeout),
            connect_retry: Duration::from_secs(self.connect_retry),
        }
    }
}

#[derive(clap::Args)]
pub struct NicArgs {
    /// Use the running NIC of this name (see `roce nic`).
    #[arg(long, value_name = "NAME")]
    nic: Option<String>,
    /// Run a NIC of its own on this wire instead (with --ip): `cable:LOCAL_UDP_ADDR,REMOTE_UDP_ADDR`
    /// (QEMU's -netdev dgram format) or `iface:IFNAME`.
    #[arg(long, conflicts_with = "nic")]
    link: Option<String>,
    /// That NIC's IP address, optionally with its prefix length.
    #[arg(long, value_name = "ADDR[/PREFIX]", conflicts_with = "nic")]
    ip: Option<String>,
    /// That NIC's MAC address (default: 02:00 followed by the last four bytes of the IP).
    #[arg(long, requires = "link")]
    mac: Option<String>,
    /// That NIC's link MTU, the largest IP packet a frame carries (1500 carries path MTU 1024,
    /// 4200 carries 4096). The path MTU is -m/--mtu.
    #[arg(long, value_name = "BYTES", default_value_t = 4200)]
    link_mtu: u32,
    /// Record every frame that NIC sends and receives to this pcap file.
    #[arg(long, value_name = "FILE", requires = "link")]
    pcap: Option<PathBuf>,
    /// That NIC's line rate in bits per second (e.g. 200M): no faster than a slow peer takes.
    #[arg(long, value_name = "BITS", requires = "link")]
    rate: Option<String>,
    /// Inject faults on that NIC's link, e.g. drop=0.02,reorder=0.02,seed=7.
    #[arg(long, value_name = "SPEC", requires = "link")]
    faults: Option<String>,
    /// A peer's MAC address, for peers that do not answer ARP: IP=MAC (repeatable).
    #[arg(long = "neigh", value_name = "IP=MAC", requires = "link")]
    neighbours: Vec<String>,
    /// That NIC follows Soft-RoCE where it departs from the spec (retry_cnt 7 is for ever).
    #[arg(long, requires = "link")]
    rxe_compat: bool,
    /// That NIC's P_Key table, as `roce nic --pkey` takes it (default 0xffff); the QPs use its
    /// first key.
    #[arg(long = "pkey", value_name = "KEY[,KEY...]", requires = "link")]
    pkeys: Option<PKeyTable>,
}

/// An opened NIC. The context goes before the device it may belong to.
pub struct Nic {
    pub ctx: Context,
    _device: Option<Device>,
}

impl NicArgs {
    /// Which NIC: a running one, or one of the tool's own; one line saying what is missing
    /// otherwise.
    fn choice(&self) -> Result<Result<&str, (&str, &str)>, Failure> {
        match (&self.nic, &self.link, &self.ip) {
            (Some(name), None, None) => Ok(Ok(name)),
            (None, Some(link), Some(ip)) => Ok(Err((link, ip))),
            (None, None, Some(_)) => Err(Failure::usage(
                "--ip is the address of a NIC the tool runs itself, which needs --link WIRE too \
                 (or use --nic NAME for a running roce nic)",
            )),
            (None, Some(_), None) => Err(Failure::usage(
                "--link runs a NIC of the tool's own, which needs --ip ADDR too",
            )),
            _ => Err(Failure::usage(
                "which NIC? give --nic NAME (a running roce nic) or --link WIRE --ip ADDR (one \
                 of the tool's own)",
            )),
        }
    }

    pub fn open(&self, tool: &str) -> Result<Nic, Failure> {
        let (link, ip) = match self.choice()? {
            Ok(name) => {
                let ctx = roce_nic::host::connect(name).map_err(|e| Failure::new(e.to_string()))?;
                return Ok(Nic { ctx, _device: None });
            }
            Err(own) => own,
        };
        let name = format!("{tool}-{}", std::process::id());
        let mut config = device::config(&DeviceWords {
            name: &name,
            ip,
            mac: self.mac.as_deref(),
            mtu: self.link_mtu,
            neighbours: &self.neighbours,
            rxe_compat: self.rxe_compat,
        })?;
        if let Some(pkeys) = &self.pkeys {
            config.pkeys = pkeys.clone();
        }
        let spec = device::parse_link(link)?;
        let rate = device::parse_rate(self.rate.as_deref())?;
        let faults = device::parse_faults(self.faults.as_deref())?;
        let (link, _) = device::open(&spec, link, rate, faults, self.pcap.as_deref())?;
        let device = Device::start(config, link)
            .map_err(|e| Failure::new(format!("cannot start the NIC: {e}")))?;
        let ctx = device
            .open()
            .map_err(|e| Failure::new(format!("cannot open the NIC: {e}")))?;
        Ok(Nic {
            ctx,
            _device: Some(device),
        })
    }
}

/// A path MTU given in bytes (`-m`/`--mtu`, as rdma-core's tools take it).
pub fn path_mtu(bytes: u32) -> Result<Mtu, Failure> {
    Mtu::from_bytes(bytes).ok_or_else(|| {
        Failure::usage(format!(
            "--mtu {bytes} is not a path MTU: use 256, 512, 1024, 2048 or 4096"
        ))
    })
}

/// A tool's failure as the command's: bad options are usage errors, and any failure after the
/// reader of standard output went away is the quiet end of the run.
pub fn failure(e: ToolError, out: &crate::output::Watched) -> Failure {
    if out.closed() {
        return Failure::output(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
    }
    match e {
        ToolError::Usage(m) => Failure::usage(m),
        e => Failure::new(e.to_string()),
    }
}
