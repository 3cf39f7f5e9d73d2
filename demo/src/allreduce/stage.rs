//! The allreduce's stage: a NIC and a host program per host, every NIC cabled to a port of the
//! [`Relay`] — by default each NIC and each host a process of its own, with `--in-process`
//! all of them threads of the demo.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::Region;
use roce_nic::{Device, DeviceConfig};

use super::relay::{self, Relay};
use super::ring::Ring;
use super::{host, mac, FLOAT};
use crate::child::Child;
use crate::cpu::{self, Whom};
use crate::rig::processes::{
    check_room, free_port, name, nic_command, start_nic_process, start_program, WIRE_LIMIT,
};
use crate::rig::{Channel, TargetHandle};
use crate::wire::forward::Forwarder;
use crate::DemoError;

/// The address of host `rank`'s NIC: 10.0.0.1 for host 0, and so on.
pub fn ip(rank: usize) -> [u8; 4] {
    [10, 0, 0, rank as u8 + 1]
}

/// A host's NIC, for the narration and the measurements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub name: String,
    /// The NIC's process, or its engine thread in this process.
    pub whom: Whom,
}

/// Everything the ring runs on.
pub struct Stage {
    /// The host programs, in rank order.
    pub hosts: Vec<TargetHandle>,
    pub nics: Vec<Nic>,
    /// The relay's forwarding thread, if the NICs are processes.
    pub relay_thread: Option<i32>,
    /// What keeps the NICs and the relay running: ended after the hosts.
    _keep: Keep,
}

enum Keep {
    Processes {
        _forwarder: Forwarder,
        _nics: Vec<Child>,
    },
    Threads {
        _devices: Vec<Device>,
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

/// Each NIC a `roce nic` process and each host a `roce demo-target` process; `roce` is this
/// program.
pub fn processes(roce: &Path, ring: Ring, relay: &Arc<Relay>) -> Result<Stage, DemoError> {
    check_room(ring.hosts * ring.region_len())?;
    let ports = relay::udp::Ports::bind(ring.hosts)?;
    let mut nics = Vec::new();
    let mut ends = Vec::new();
    for rank in 0..ring.hosts {
        let end = free_port()?;
        let nic_name = name(&format!("n{rank}"));
        let cmd = nic_command(
            roce,
            &nic_name,
            ip(rank),
            &peers(ring, rank),
            (end, ports.addr(rank)?),
        );
        let what = format!("NIC of host {rank}");
        nics.push(start_nic_process(
            cmd,
            &nic_name,
            &what,
            |stderr, other| {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    other.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            },
        )?);
        ends.push(end);
    }
    let forwarder = ports.relay(&ends, Arc::clone(relay), WIRE_LIMIT)?;
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
            .map(|nic| Nic {
                name: nic.name.clone(),
                whom: Whom::Process(nic.child.pid()),
            })
            .collect(),
        relay_thread: cpu::thread_named("demo-relay"),
        _keep: Keep::Processes {
            _forwarder: forwarder,
            _nics: nics.into_iter().map(|nic| nic.child).collect(),
        },
    })
}

/// Every NIC and every host in this process: the NICs on the relay's in-memory links, the
/// hosts as threads.
pub fn threads(ring: Ring, relay: &Arc<Relay>) -> Result<Stage, DemoError> {
    let mut devices = Vec::new();
    for (rank, link) in relay::mem::links(relay).into_iter().enumerate() {
        let nic_name = format!("ar{rank}");
        let mut config = DeviceConfig::new(&nic_name, IpAddr::from(ip(rank)));
        for peer in peers(ring, rank) {
            config.neighbours.push((IpAddr::from(peer), mac(peer)));
        }
        devices.push(
            Device::start(config, link)
                .map_err(|e| DemoError::because(&format!("cannot start the NIC {nic_name}"), e))?,
        );
    }
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
    let mut nics = Vec::new();
    for device in &devices {
        let name = device.config().name.clone();
        let engine = format!("{name}-engine");
        let tid = eventually(|| cpu::thread_named(&engine)).ok_or_else(|| {
            DemoError::failed(format!("cannot find the engine thread of the NIC {name}"))
        })?;
        nics.push(Nic {
            name,
            whom: Whom::Thread(tid),
        });
    }
    Ok(Stage {
        hosts,
        nics,
        relay_thread: None,
        _keep: Keep::Threads { _devices: devices },
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
