//! The default stage: each NIC a `roce nic` process, the target program a `roce demo-target`
//! process, the demo the initiator host — four processes, as on two real machines.
//!
//! The NICs are cabled over loopback UDP, each to a socket of the demo, which forwards the
//! frames between them ([`crate::wire::forward`]). They log their decisions as JSON lines on
//! standard error, which the demo reads ([`crate::events`]).

use std::io::{BufReader, Read};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{ChildStderr, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use roce_hostmem::Region;
use roce_nic::DeviceConfig;
use roce_wire::ethernet::Mac;
use rustix::process::Signal;

use super::{Channel, Layout, Rig, Stage, TargetHandle, INITIATOR_IP, TARGET_IP};
use crate::child::Child;
use crate::cpu::Whom;
use crate::events::{EventLog, LOG_FORMAT_VAR};
use crate::plan::Plan;
use crate::wire::forward::Sockets;
use crate::wire::Wire;
use crate::{DemoError, Side};

/// How long a NIC process may take to say it is ready.
const STARTING: Duration = Duration::from_secs(10);
/// The wire forwards for at most this long, whatever happens (a `--step` class included).
pub(crate) const WIRE_LIMIT: Duration = Duration::from_secs(3600);

/// The names of this run's NICs and target region: unique per demo process, so demos can run
/// side by side.
pub(crate) fn name(what: &str) -> String {
    format!("demo{}{what}", std::process::id())
}

/// A loopback UDP port free right now, for a NIC's end of its cable.
pub(crate) fn free_port() -> Result<SocketAddr, DemoError> {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|e| DemoError::because("cannot find a free UDP port on loopback", e))
}

/// Fails with one line if /dev/shm cannot hold `needed` bytes (and room for rings and
/// doorbells).
pub(crate) fn check_room(needed: usize) -> Result<(), DemoError> {
    let Ok(stat) = rustix::fs::statvfs("/dev/shm") else {
        return Ok(());
    };
    let available = stat.f_bavail.saturating_mul(stat.f_frsize);
    let needed = needed as u64 + (16 << 20);
    if available < needed {
        return Err(DemoError::Usage(format!(
            "/dev/shm has {} MiB free and this run needs {} MiB: choose a smaller --size or use --in-process",
            available >> 20,
            needed.div_ceil(1 << 20)
        )));
    }
    Ok(())
}

/// One `roce nic` process.
pub(crate) struct Nic {
    pub child: Child,
    pub name: String,
}

/// `roce nic` named `name` at `ip`, cabled over UDP from `cable.0` to `cable.1`, knowing the
/// MACs of `peers` in advance (they are derived from their addresses).
pub(crate) fn nic_command(
    roce: &Path,
    name: &str,
    ip: [u8; 4],
    peers: &[[u8; 4]],
    cable: (SocketAddr, SocketAddr),
) -> Command {
    let mut cmd = Command::new(roce);
    cmd.args(["nic", "--name", name])
        .args(["--ip", &IpAddr::from(ip).to_string()])
        .args(["--link", &format!("cable:{},{}", cable.0, cable.1)]);
    for &peer in peers {
        let mac = DeviceConfig::new("peer", IpAddr::from(peer)).mac;
        cmd.args(["--neigh", &format!("{}={}", IpAddr::from(peer), Mac(mac))]);
    }
    cmd
}

/// Starts the NIC of `cmd` (see [`nic_command`]) named `name` — or the switch, `roce switch`,
/// named `switch` — and waits for its ready line (`NAME ready: ...`). `read_stderr` reads its
/// standard error, and puts the lines that are not events in the list it is given: the
/// reason, if it fails to start.
pub(crate) fn start_device(
    cmd: Command,
    name: &str,
    what: &str,
    read_stderr: impl FnOnce(ChildStderr, &Mutex<Vec<String>>) + Send + 'static,
) -> Result<Nic, DemoError> {
    // A NIC (a switch) shuts down cleanly on SIGTERM: its shared memory and socket go with it.
    let mut child = Child::spawn(cmd, what, Signal::TERM)?;
    let other = Arc::new(Mutex::new(Vec::new()));
    if let Some(stderr) = child.stderr.take() {
        let other = Arc::clone(&other);
        std::thread::spawn(move || read_stderr(stderr, &other));
    }
    let ready = format!("{name} ready: ");
    loop {
        match child.line(STARTING)? {
            Some(line) if line.starts_with(&ready) => break,
            Some(_) => continue,
            None => {
                std::thread::sleep(Duration::from_millis(50));
                let other = other.lock().unwrap_or_else(|e| e.into_inner());
                let why = other.last().map_or("no reason given", String::as_str);
                return Err(DemoError::failed(format!(
                    "the {what} did not start: {why}"
                )));
            }
        }
    }
    Ok(Nic {
        child,
        name: name.to_owned(),
    })
}

fn start_nic(
    roce: &Path,
    side: Side,
    cable: (SocketAddr, SocketAddr),
    detailed: bool,
    events: &EventLog,
) -> Result<Nic, DemoError> {
    let (ip, peer) = match side {
        Side::Initiator => (INITIATOR_IP, TARGET_IP),
        Side::Target => (TARGET_IP, INITIATOR_IP),
    };
    let name = name(&side.word()[..1]);
    let mut cmd = nic_command(roce, &name, ip, &[peer], cable);
    cmd.env(LOG_FORMAT_VAR, "json").env(
        "RUST_LOG",
        if detailed {
            "roce_nic=trace"
        } else {
            "roce_nic=debug"
        },
    );
    let events = events.clone();
    start_device(cmd, &name, &format!("{side} NIC"), move |stderr, other| {
        events.read_lines(BufReader::new(stderr), side, other)
    })
}

/// Starts a program the demo drives (`roce demo-target ...`: see [`crate::target_host`]) and
/// waits until it is ready; maps the memory it made, the region named `region`.
pub(crate) fn start_program(
    cmd: Command,
    what: &str,
    region: &str,
) -> Result<TargetHandle, DemoError> {
    // Killed outright if the demo dies: it may be frozen, and must not stay so.
    let mut child = Child::spawn(cmd, what, Signal::KILL)?;
    let stderr = Arc::new(Mutex::new(String::new()));
    if let Some(mut err) = child.stderr.take() {
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&text);
        });
    }
    TargetHandle::ready(Channel::process(child, stderr)?, |_| {
        let mapped = Region::attach(region)
            .map_err(|e| DemoError::because(&format!("cannot map the {what}'s memory"), e))?;
        // Mapped by the program, its NIC and the demo: the name is no longer needed, and a
        // killed run leaves nothing behind in /dev/shm.
        let _ = Region::remove(region);
        Ok(Arc::new(mapped))
    })
}

/// Starts the NICs, the wire and the target program for `plan`; `roce` is this program.
pub fn start(roce: &Path, plan: &Plan, wire: Arc<Wire>) -> Result<Rig, DemoError> {
    // The target's region, the initiator's buffer.
    check_room(plan.region_len + plan.local_len())?;
    let events = EventLog::default();
    let sockets = Sockets::bind()?;
    let mut nics = Vec::new();
    let mut ends = Vec::new();
    for side in [Side::Initiator, Side::Target] {
        let end = free_port()?;
        let cable = (end, sockets.addr(side)?);
        nics.push(start_nic(roce, side, cable, plan.detailed(), &events)?);
        ends.push(end);
    }
    let forwarder = sockets.forward(ends[0], ends[1], Arc::clone(&wire), WIRE_LIMIT)?;
    let region = name("t-mem");
    let mut cmd = Command::new(roce);
    cmd.args(["demo-target", "--nic", &nics[1].name, "--region", &region])
        .args(["--scenario", plan.scenario.name()]);
    if let crate::plan::Payload::Pattern(size) = plan.payload {
        cmd.args(["--size", &size.to_string()]);
    }
    let target = start_program(cmd, "target program", &region)?;
    let target_pid = match target.whom {
        Whom::Process(pid) | Whom::Thread(pid) => pid,
    };
    let connect = |nic: &Nic| {
        roce_nic::host::connect(&nic.name)
            .map_err(|e| DemoError::because(&format!("cannot open the NIC {}", nic.name), e))
    };
    let initiator = connect(&nics[0])?;
    let target_nic = connect(&nics[1])?;
    let layout = Layout::Processes {
        nics: [
            (nics[0].name.clone(), nics[0].child.pid()),
            (nics[1].name.clone(), nics[1].child.pid()),
        ],
        target: target_pid,
    };
    let nics: Vec<Child> = nics.into_iter().map(|nic| nic.child).collect();
    Ok(Rig {
        initiator,
        target_nic,
        target,
        wire,
        events,
        layout,
        _stage: Stage::Processes {
            _forwarder: forwarder,
            _nics: nics,
        },
    })
}
