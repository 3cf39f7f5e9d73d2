//! `--in-process`: both NICs and the target program in the demo's own process, nothing to
//! start. The NICs are cabled back to back in memory, each through a [`Tap`] so the demo still
//! sees (and may lose) every frame; their events come through a [`Capture`]. The target
//! program is a thread: it cannot be frozen without freezing the demo, so it simply blocks on
//! its command channel, which runs no code either — and /proc shows that thread's CPU time.

use std::net::IpAddr;
use std::sync::Arc;

use roce_hostmem::Region;
use roce_nic::link::mem;
use roce_nic::{Device, DeviceConfig};

use super::{Channel, Layout, Rig, Stage, TargetHandle, INITIATOR_IP, TARGET_IP};
use crate::events::Capture;
use crate::plan::Plan;
use crate::target_host;
use crate::wire::tap::Tap;
use crate::wire::Wire;
use crate::{DemoError, Side};

const INITIATOR_NIC: &str = "demo-initiator";
const TARGET_NIC: &str = "demo-target";

fn config(name: &str, ip: [u8; 4], peer: [u8; 4]) -> DeviceConfig {
    let mut config = DeviceConfig::new(name, IpAddr::from(ip));
    let peer_mac = DeviceConfig::new("peer", IpAddr::from(peer)).mac;
    config.neighbours.push((IpAddr::from(peer), peer_mac));
    config
}

/// Starts both NICs and the target thread for `plan`.
pub fn start(plan: &Plan, wire: Arc<Wire>, capture: &Capture) -> Result<Rig, DemoError> {
    capture.attribute(INITIATOR_NIC, Side::Initiator);
    capture.attribute(TARGET_NIC, Side::Target);
    let (a, b) = mem::pair();
    let start = |name: &str, ip, peer, link| {
        Device::start(config(name, ip, peer), link)
            .map_err(|e| DemoError::because(&format!("cannot start the NIC {name}"), e))
    };
    let initiator_nic = start(
        INITIATOR_NIC,
        INITIATOR_IP,
        TARGET_IP,
        Tap::new(a, Arc::clone(&wire), Side::Initiator),
    )?;
    let target_nic = start(
        TARGET_NIC,
        TARGET_IP,
        INITIATOR_IP,
        Tap::new(b, Arc::clone(&wire), Side::Target),
    )?;
    let open = |device: &Device| {
        device
            .open()
            .map_err(|e| DemoError::because("cannot open a NIC", e))
    };
    let region = Arc::new(
        Region::anonymous(plan.region_len)
            .map_err(|e| DemoError::because("cannot allocate the target's memory", e))?,
    );
    let socket = target_host::spawn_thread(open(&target_nic)?, Arc::clone(&region), plan)?;
    let target = TargetHandle::ready(Channel::thread(socket)?, |_| Ok(region))?;
    let layout = Layout::Threads {
        nics: [INITIATOR_NIC.to_owned(), TARGET_NIC.to_owned()],
        target: target.shared.tid,
    };
    Ok(Rig {
        initiator: open(&initiator_nic)?,
        target_nic: open(&target_nic)?,
        target,
        wire,
        events: capture.log(),
        layout,
        _stage: Stage::Threads {
            _devices: vec![initiator_nic, target_nic],
        },
    })
}
