//! P_Keys against Soft-RoCE: one guest boot, our `roce nic` a limited member of the default
//! partition (`--pkey 0x7fff`), and between the two a relay on loopback that passes every frame
//! on — or, per scenario, rewrites the P_Key of our requests, of our responses (ACKs), or of
//! every RoCE frame of the guest's, with the ICRC recomputed by roce-wire, so that a receiver
//! can refuse them only for their P_Key. rxe's
//! answer to each case is read off the cable (what rxe sent back) and off its own count of the
//! packets it took (`rcvd_pkts`, which counts only packets that passed its header checks),
//! printed by the guest after each scenario.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce_wire::Frame;

/// Which frames the relay rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frames {
    OurRequests,
    OurResponses,
    /// Every RoCE frame rxe sends, requests and responses.
    Rxes,
}

impl Frames {
    fn select(self, from_guest: bool, is_response: bool) -> bool {
        match self {
            Frames::OurRequests => !from_guest && !is_response,
            Frames::OurResponses => !from_guest && is_response,
            Frames::Rxes => from_guest,
        }
    }
}

/// What the relay does now: the scenario it stamps frames with, and the rewrite, if any.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    pub scenario: usize,
    pub rewrite: Option<(Frames, u16)>,
}

/// One RoCE frame that crossed the relay.
#[derive(Debug, Clone, Copy)]
pub struct Crossed {
    pub scenario: usize,
    pub from_guest: bool,
    pub opcode: u8,
    pub psn: u32,
    /// As it left the relay.
    pub p_key: u16,
    pub rewritten: bool,
}

/// The relay: the guest's cable ends at `guest_side`, our NIC's at `nic_side`.
pub struct Relay {
    pub guest_side: SocketAddr,
    pub nic_side: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Crossed>>>,
}

/// The longest a relay runs, whatever happens.
const RELAY_LIMIT: Duration = Duration::from_secs(600);

impl Relay {
    /// Starts a relay between the guest's QEMU (bound to `guest`) and our NIC (bound to `nic`).
    pub fn start(guest: SocketAddr, nic: SocketAddr) -> Relay {
        let to_guest = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to_nic = UdpSocket::bind("127.0.0.1:0").unwrap();
        let guest_side = to_guest.local_addr().unwrap();
        let nic_side = to_nic.local_addr().unwrap();
        for s in [&to_guest, &to_nic] {
            s.set_nonblocking(true).unwrap();
        }
        let mode = Arc::new(Mutex::new(Mode {
            scenario: 0,
            rewrite: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (mode, stop) = (Arc::clone(&mode), Arc::clone(&stop));
            std::thread::spawn(move || relay(to_guest, guest, to_nic, nic, &mode, &stop))
        };
        Relay {
            guest_side,
            nic_side,
            mode,
            stop,
            thread: Some(thread),
        }
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Stops the relay; returns every RoCE frame that crossed it.
    pub fn finish(mut self) -> Vec<Crossed> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn relay(
    guest_side: UdpSocket,
    guest: SocketAddr,
    nic_side: UdpSocket,
    nic: SocketAddr,
    mode: &Mutex<Mode>,
    stop: &AtomicBool,
) -> Vec<Crossed> {
    let mut crossed = Vec::new();
    let mut buf = vec![0u8; 65536];
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < RELAY_LIMIT {
        let mut fds = [guest_side.as_raw_fd(), nic_side.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: poll(2) on two descriptors we own, for 20 ms.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 20) };
        for (from_guest, from, to, dest) in [
            (true, &guest_side, &nic_side, nic),
            (false, &nic_side, &guest_side, guest),
        ] {
            while let Ok(n) = from.recv(&mut buf) {
                let now = *mode.lock().unwrap();
                let frame = pass(&buf[..n], from_guest, now, &mut crossed);
                let _ = to.send_to(&frame, dest);
            }
        }
    }
    crossed
}

/// The frame to pass on: as it came, or with its P_Key rewritten (and its ICRC recomputed).
fn pass(bytes: &[u8], from_guest: bool, mode: Mode, crossed: &mut Vec<Crossed>) -> Vec<u8> {
    let Ok(frame) = Frame::parse(bytes) else {
        return bytes.to_vec();
    };
    let bth = frame.repr.bth;
    let is_response = bth.opcode.kind().is_response();
    let rewrite = mode
        .rewrite
        .filter(|(which, _)| which.select(from_guest, is_response))
        .map(|(_, p_key)| p_key);
    let out = match rewrite {
        Some(p_key) => {
            let mut repr = frame.repr;
            repr.bth.p_key = p_key;
            let mut out = vec![0; repr.frame_len()];
            repr.emit(&mut out, frame.payload()).unwrap();
            out
        }
        None => bytes.to_vec(),
    };
    crossed.push(Crossed {
        scenario: mode.scenario,
        from_guest,
        opcode: bth.opcode.value(),
        psn: bth.psn,
        p_key: rewrite.unwrap_or(bth.p_key),
        rewritten: rewrite.is_some(),
    });
    out
}

/// One run: the guest's tool (as server or client) and ours facing it.
pub struct Run {
    pub name: &'static str,
    pub guest_serves: bool,
    /// Seconds the guest's tool may run before its script kills it.
    pub guest_limit: u32,
    /// Seconds any step of ours may wait.
    pub our_limit: u32,
    pub rewrite: Option<(Frames, u16)>,
}

/// The pingpong both sides run.
pub const PINGPONG: &str = "-n 5 -s 64";

/// The guest's script: rxe's P_Key table, then each run between the markers
/// [`super::guest::Console::scenario`] reads, with rxe's `rcvd_pkts` after it.
pub fn guest_script(runs: &[Run], first_port: u16) -> String {
    let mut script = String::from(super::scenario::GUEST_PRELUDE);
    script.push_str(
        "port=/sys/class/infiniband/rxe0/ports/1\n\
         for i in 0 1; do echo \"RXE-PKEY $i $(cat $port/pkeys/$i 2>/dev/null || echo none)\"; done\n\
         echo \"RXE-RCVD start $(cat $port/hw_counters/rcvd_pkts)\"\n",
    );
    for (n, run) in runs.iter().enumerate() {
        let port = first_port + n as u16;
        let tool = format!(
            "timeout {} ibv_rc_pingpong -g 1 -p {port} {PINGPONG}",
            run.guest_limit
        );
        let command = if run.guest_serves {
            tool
        } else {
            format!("client {tool} {}", super::guest::NIC_IP)
        };
        script.push_str(&format!(
            "scenario {n} {command}\necho \"RXE-RCVD {n} $(cat $port/hw_counters/rcvd_pkts)\"\n"
        ));
    }
    script
}

/// `rcvd_pkts` of rxe0 before the first run (`start`) and after each.
pub fn rcvd_pkts(console: &super::guest::Console) -> Vec<u64> {
    console
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix("RXE-RCVD "))
        .filter_map(|rest| rest.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

/// Boots the guest on `guest`, its frames going to `relay`, with `script`.
pub fn start_guest(
    guest: SocketAddr,
    relay: SocketAddr,
    script: &Path,
    limit: u32,
) -> crate::support::Proc {
    let mut cmd = Command::new(super::guest::harness());
    cmd.args(["run", "--local", &guest.to_string()])
        .args(["--remote", &relay.to_string()])
        .args(["--mtu", "1500", "--timeout", &limit.to_string()])
        .arg("--script")
        .arg(script)
        .env("CARGO_TARGET_DIR", super::guest::target_dir());
    crate::support::Proc::spawn(cmd, false)
}
