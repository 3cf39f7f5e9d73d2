//! `roce switch`: an Ethernet switch as a process, until Ctrl-C, SIGTERM or SIGHUP. Each port is
//! a link like a NIC's — a UDP cable (QEMU `-netdev dgram` speaks it too), a shared-memory link
//! or an interface — so NICs, guests and other switches plug into it alike. The switch itself is
//! the `roce_switch` library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use roce_nic::link::paced::Rate;
use roce_switch::driver::{Driver, PortLink, StatsFile};
use roce_switch::pfc::Thresholds;
use roce_switch::red::Red;
use roce_switch::units::{parse_bytes, show_bytes};
use roce_switch::{PortConfig, PortCounters, Switch, SwitchConfig};
use tracing::info;

use crate::device;
use crate::signals::Shutdown;
use crate::Failure;

#[derive(clap::Args)]
#[command(after_long_help = "Examples:
  roce switch --port 127.0.0.1:7001,127.0.0.1:7101 --port 127.0.0.1:7002,127.0.0.1:7102
  roce switch --port ... --port ... --rate 1G --buffer 256K --ecn kmin=20K,kmax=200K,pmax=0.01
  roce switch --port ... --port ... --pfc xoff=96K,xon=32K --pcap /tmp/ports --stats sw.json

A NIC plugs into port 1 with the two addresses swapped:
  roce nic --name a --ip 10.0.0.1 --link cable:127.0.0.1:7101,127.0.0.1:7001")]
pub struct Args {
    /// A port (repeatable, in order: port 1, 2, ...): `LOCAL_UDP_ADDR,REMOTE_UDP_ADDR` or
    /// `cable:...` (one Ethernet frame per datagram, as `roce nic` and QEMU's -netdev dgram),
    /// `shm:NAME` or `iface:IFNAME`.
    #[arg(long = "port", value_name = "LINK", required = true)]
    ports: Vec<String>,
    /// Line rate of every port in bits per second (K, M, G).
    #[arg(long, default_value = "10G", value_name = "BITS")]
    rate: String,
    /// Bytes each port's egress queue holds (K, M); what arrives when it is full is dropped.
    #[arg(long, default_value = "1M", value_name = "BYTES")]
    buffer: String,
    /// Mark ECN-capable packets CE by RED on each egress queue: kmin=BYTES,kmax=BYTES,pmax=P
    /// (no marks below kmin, probability rising to pmax at kmax, all beyond).
    #[arg(long, value_name = "RED")]
    ecn: Option<String>,
    /// Send 802.1Qbb pause frames to a port's peer when what came in on the port and still
    /// waits passes xoff bytes, and let it go on below xon: xoff=BYTES,xon=BYTES.
    #[arg(long, value_name = "THRESHOLDS")]
    pfc: Option<String>,
    /// The priority pause frames name (and received ones are obeyed for).
    #[arg(long, default_value_t = 3, value_name = "0-7",
          value_parser = clap::value_parser!(u8).range(0..=7))]
    pfc_priority: u8,
    /// Record each port's frames, both ways, to DIR/portN.pcap.
    #[arg(long, value_name = "DIR")]
    pcap: Option<PathBuf>,
    /// Keep every port's counters in this file (JSON, replaced whole every --stats-every).
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// Append every port's counters to this file as one JSON line per --stats-every: the
    /// history of queue depths, marks, drops and pauses, for plotting.
    #[arg(long, value_name = "FILE")]
    stats_log: Option<PathBuf>,
    /// How often the stats file is rewritten (and the log appended to), in milliseconds.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    stats_every: u64,
    /// Seed of the marking decisions (the same seed and frames give the same marks).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn port_config(args: &Args) -> Result<PortConfig, Failure> {
    let rate = args
        .rate
        .parse::<Rate>()
        .map_err(|e| Failure::usage(format!("--rate: {e}")))?;
    let buffer = parse_bytes(&args.buffer).map_err(|e| Failure::usage(format!("--buffer: {e}")))?;
    let red = args
        .ecn
        .as_deref()
        .map(|t| t.parse::<Red>())
        .transpose()
        .map_err(|e| Failure::usage(format!("--ecn: {e}")))?;
    let pfc = args
        .pfc
        .as_deref()
        .map(|t| t.parse::<Thresholds>())
        .transpose()
        .map_err(|e| Failure::usage(format!("--pfc: {e}")))?;
    if let Some(t) = pfc {
        if t.xoff > buffer {
            return Err(Failure::usage(format!(
                "--pfc: xoff ({}) is beyond the buffer ({})",
                show_bytes(t.xoff),
                show_bytes(buffer)
            )));
        }
    }
    Ok(PortConfig {
        rate: rate.0,
        buffer,
        red,
        pfc,
    })
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let shutdown = Shutdown::block();
    let port = port_config(&args)?;
    if let Some(dir) = &args.pcap {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut links = Vec::new();
    for (n, text) in args.ports.iter().enumerate() {
        // A bare LOCAL,REMOTE is a cable.
        let text = if !has_scheme(text) {
            format!("cable:{text}")
        } else {
            text.clone()
        };
        let spec = device::parse_link(&text)
            .map_err(|e| Failure::usage(format!("--port {}: {e}", n + 1)))?;
        let pcap = args
            .pcap
            .as_ref()
            .map(|d| d.join(format!("port{}.pcap", n + 1)));
        let (link, describe) = device::open(&spec, &text, None, None, pcap.as_deref())?;
        links.push(PortLink { link, describe });
    }
    let mut config = SwitchConfig::new(vec![port; links.len()]);
    config.pfc_priority = args.pfc_priority;
    config.seed = args.seed;
    let described: Vec<String> = links.iter().map(|l| l.describe.clone()).collect();
    let stats = (args.stats.is_some() || args.stats_log.is_some()).then(|| StatsFile {
        path: args.stats.clone(),
        log: args.stats_log.clone(),
        every: Duration::from_millis(args.stats_every.max(1)),
    });
    let driver = Driver::new(Switch::new(config), links, stats)
        .map_err(|e| Failure::new(format!("cannot start the switch: {e}")))?;
    let stopper = driver.stopper();
    let thread = std::thread::Builder::new()
        .name("switch".into())
        .spawn(move || driver.run())
        .map_err(|e| Failure::new(format!("cannot start the switch thread: {e}")))?;
    say!(
        "switch ready: {} ports at {} bit/s, buffer {}{}{}",
        described.len(),
        Rate(port.rate),
        show_bytes(port.buffer),
        port.red.map(|r| format!(", ECN {r}")).unwrap_or_default(),
        port.pfc
            .map(|t| format!(", PFC {t} priority {}", args.pfc_priority))
            .unwrap_or_default()
    );
    for (n, d) in described.iter().enumerate() {
        say!("port {}: {d}", n + 1);
    }
    let signal = shutdown.wait();
    info!(signal, "switch shutting down");
    stopper.stop();
    let counters = thread
        .join()
        .map_err(|_| Failure::new("the switch thread panicked"))?;
    say!("{}", table(&counters));
    say!("switch stopped");
    Ok(ExitCode::SUCCESS)
}

/// Whether `text` starts with a link kind (`cable:`, `shm:`, `iface:`).
fn has_scheme(text: &str) -> bool {
    ["cable:", "shm:", "iface:"]
        .iter()
        .any(|s| text.starts_with(s))
}

/// The ports' counters, one row each.
pub fn table(counters: &[PortCounters]) -> String {
    let mut out = format!(
        "{:>4} {:>10} {:>10} {:>8} {:>8} {:>8} {:>10} {:>6} {:>6} {:>6}",
        "port", "rx", "tx", "flooded", "dropped", "marked", "queue max", "xoff", "xon", "paused"
    );
    for (n, c) in counters.iter().enumerate() {
        out.push_str(&format!(
            "\n{:>4} {:>10} {:>10} {:>8} {:>8} {:>8} {:>10} {:>6} {:>6} {:>6}",
            n + 1,
            c.rx_frames,
            c.tx_frames,
            c.flooded,
            c.dropped,
            c.ecn_marked,
            c.queue_max_bytes,
            c.pause_xoff_sent,
            c.pause_xon_sent,
            c.pause_received
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_address_pairs_are_cables_and_kinds_are_kept() {
        assert!(has_scheme("shm:x"));
        assert!(has_scheme("cable:1.2.3.4:5,1.2.3.4:6"));
        assert!(!has_scheme("127.0.0.1:5,127.0.0.1:6"));
    }
}
