//! The allreduce's stage: a NIC and a host program per host, every NIC cabled to a port of one
//! switch, every cable tapped by the demo ([`Taps`]) — by default each NIC, each host and the
//! switch (`roce switch`) a process of its own, with `--in-process` all of them threads of the
//! demo.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce_hostmem::Region;
use roce_nic::link::mem;
use roce_nic::{Device, DeviceConfig};
use roce_switch::driver::{Driver, PortLink, Stopper};
use roce_switch::{PortConfig, Switch, SwitchConfig};

use super::fabric::{udp::Cables, Taps};
use super::ring::Ring;
use super::{host, mac, FLOAT};
use crate::child::Child;
use crate::cpu::{self, Whom};
use crate::rig::processes::{
    check_room, free_port, name, nic_command, start_device, start_program, Nic as NicProcess,
    WIRE_LIMIT,
};
use crate::rig::{Channel, TargetHandle};
use crate::wire::forward::Forwarder;
use crate::wire::tap::Tap;
use crate::DemoError;

/// The address of host `rank`'s NIC: 10.0.0.1 for host 0, and so on.
pub fn ip(rank: usize) -> [u8; 4] {
    [10, 0, 0, rank as u8 + 1]
}

/// A NIC or the switch — the hardware the emulation stands in for — for the narration and the
/// measurements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hardware {
    pub name: String,
    /// Its process, or its thread in this process.
    pub whom: Whom,
}

/// Everything the ring runs on.
pub struct Stage {
    /// The host programs, in rank order.
    pub hosts: Vec<TargetHandle>,
    pub nics: Vec<Hardware>,
    pub switch: Hardware,
    /// The demo's thread that passes the frames of the cables, if the NICs are processes.
    pub taps_thread: Option<i32>,
    /// What keeps the NICs, the switch and the taps running: ended after the hosts.
    _keep: Keep,
}

enum Keep {
    Processes {
        _forwarder: Forwarder,
        _nics: Vec<Child>,
        _switch: Child,
    },
    Threads {
        _devices: Vec<Device>,
        _switch: SwitchThread,
    },
}

impl Stage {
    pub fn in_process(&self) -> bool {
        matches!(self._keep, Keep::Threads { .. })
    }
}

/// The addresses of every host but `rank`: its NIC knows their MACs in advance.
fn peers(ring: Ring, rank: usize) -> Vec<[u8; 4]> {
    (0..ring.hosts).filter(|&r| r != rank).map(ip).collect()
}

/// What a device process wrote to standard error: its reason, if it fails to start.
fn collect(stderr: std::process::ChildStderr, lines: &std::sync::Mutex<Vec<String>>) {
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }
}

/// Each NIC a `roce nic` process, the switch a `roce switch` process and each host a `roce
/// demo-target` process; `roce` is this program.
pub fn processes(roce: &Path, ring: Ring, taps: &Arc<Taps>) -> Result<Stage, DemoError> {
    check_room(ring.hosts * ring.region_len())?;
    let cables = Cables::bind(ring.hosts)?;
    let mut switch = Command::new(roce);
    switch.arg("switch");
    let mut ports = Vec::new();
    for host in 0..ring.hosts {
        let port = free_port()?;
        switch.args(["--port", &format!("{port},{}", cables.switch_side(host)?)]);
        ports.push(port);
    }
    let switch = start_device(switch, "switch", "switch", collect)?;
    let mut nics: Vec<NicProcess> = Vec::new();
    let mut ends = Vec::new();
    for rank in 0..ring.hosts {
        let end = free_port()?;
        let nic_name = name(&format!("n{rank}"));
        let cmd = nic_command(
            roce,
            &nic_name,
            ip(rank),
            &peers(ring, rank),
            (end, cables.nic_side(rank)?),
        );
        let what = format!("NIC of host {rank}");
        nics.push(start_device(cmd, &nic_name, &what, collect)?);
        ends.push(end);
    }
    let forwarder = cables.connect(&ends, &ports, Arc::clone(taps), WIRE_LIMIT)?;
    let mut hosts = Vec::new();
    for (rank, nic) in nics.iter().enumerate() {
        let region = name(&format!("h{rank}-mem"));
        let mut cmd = Command::new(roce);
        cmd.args(["demo-target", "--nic", &nic.name, "--region", &region])
            .args(["--scenario", "allreduce"])
            .args(["--size", &(ring.floats * FLOAT).to_string()])
            .args(["--rank", &rank.to_string()])
            .args(["--hosts", &ring.hosts.to_string()]);
        hosts.push(start_program(cmd, &format!("host {rank}"), &region)?);
    }
    Ok(Stage {
        hosts,
        nics: nics
            .iter()
            .map(|nic| Hardware {
                name: nic.name.clone(),
                whom: Whom::Process(nic.child.pid()),
            })
            .collect(),
        switch: Hardware {
            name: "roce switch".into(),
            whom: Whom::Process(switch.child.pid()),
        },
        taps_thread: cpu::thread_named("demo-taps"),
        _keep: Keep::Processes {
            _forwarder: forwarder,
            _nics: nics.into_iter().map(|nic| nic.child).collect(),
            _switch: switch.child,
        },
    })
}

/// The switch on a thread of this process; stopped and joined when dropped.
struct SwitchThread {
    stopper: Stopper,
    thread: Option<JoinHandle<()>>,
}

impl Drop for SwitchThread {
    fn drop(&mut self) {
        self.stopper.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Every NIC, the switch and every host in this process: each NIC on an in-memory cable to a
/// port of the switch, watched by the taps; the hosts as threads.
pub fn threads(ring: Ring, taps: &Arc<Taps>) -> Result<Stage, DemoError> {
    let mut devices = Vec::new();
    let mut ports = Vec::new();
    for rank in 0..ring.hosts {
        let (nic_end, switch_end) = mem::pair();
        let taps = Arc::clone(taps);
        let link = Tap::watching(nic_end, move |frame| {
            taps.carry(rank, frame);
            true
        });
        let nic_name = format!("ar{rank}");
        let mut config = DeviceConfig::new(&nic_name, IpAddr::from(ip(rank)));
        for peer in peers(ring, rank) {
            config.neighbours.push((IpAddr::from(peer), mac(peer)));
        }
        devices.push(
            Device::start(config, link)
                .map_err(|e| DemoError::because(&format!("cannot start the NIC {nic_name}"), e))?,
        );
        ports.push(PortLink {
            link: Box::new(switch_end),
            describe: format!("port {} (host {rank})", rank + 1),
        });
    }
    let config = SwitchConfig::new(vec![PortConfig::default(); ring.hosts]);
    let driver = Driver::new(Switch::new(config), ports, None)
        .map_err(|e| DemoError::because("cannot start the switch", e))?;
    let stopper = driver.stopper();
    let thread = std::thread::Builder::new()
        .name("demo-switch".into())
        .spawn(move || {
            driver.run();
        })
        .map_err(|e| DemoError::because("cannot start the switch thread", e))?;
    let switch = SwitchThread {
        stopper,
        thread: Some(thread),
    };
    let mut hosts = Vec::new();
    for (rank, device) in devices.iter().enumerate() {
        let region = Arc::new(
            Region::anonymous(ring.region_len())
                .map_err(|e| DemoError::because("cannot allocate a host's memory", e))?,
        );
        let ctx = device
            .open()
            .map_err(|e| DemoError::because("cannot open a NIC", e))?;
        let socket = host::spawn_thread(ctx, Arc::clone(&region), ring, rank)?;
        hosts.push(TargetHandle::ready(Channel::thread(socket)?, |_| {
            Ok(region)
        })?);
    }
    // The engines have served their hosts' set-up: they run, under their names.
    let thread_of = |name: &str| {
        eventually(|| cpu::thread_named(name))
            .map(Whom::Thread)
            .ok_or_else(|| DemoError::failed(format!("cannot find the thread {name}")))
    };
    let mut nics = Vec::new();
    for device in &devices {
        let name = device.config().name.clone();
        nics.push(Hardware {
            whom: thread_of(&format!("{name}-engine"))?,
            name,
        });
    }
    Ok(Stage {
        hosts,
        nics,
        switch: Hardware {
            name: "the switch".into(),
            whom: thread_of("demo-switch")?,
        },
        taps_thread: None,
        _keep: Keep::Threads {
            _devices: devices,
            _switch: switch,
        },
    })
}

/// `find`'s answer, tried for up to a second.
fn eventually<T>(find: impl Fn() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        if let Some(found) = find() {
            return Some(found);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
