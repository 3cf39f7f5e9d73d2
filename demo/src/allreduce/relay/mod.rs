//! The allreduce's fabric: a small Ethernet relay with a port for each host's NIC, standing in
//! for the switch of a cluster. It forwards each frame to the port of its destination MAC (a
//! fixed table: the demo knows every NIC's MAC, as an administrator who configures static
//! entries would), floods broadcasts (ARP) to every other port, and drops frames for MACs it
//! does not know. Like the demo's two-NIC wire it sees every frame: it counts what each link
//! carries, checks every ICRC, and writes the capture.
//!
//! Between NIC processes it forwards the datagrams of their UDP cables ([`udp`]); between NICs
//! in the demo's own process each NIC's link hands it its frames ([`mem`]).

pub mod mem;
pub mod udp;

use std::collections::hash_map::{Entry, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::events::since_epoch;
use crate::wire::{Brief, Pcap};
use crate::DemoError;

/// Where a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this port.
    Port(usize),
    /// To every port but the one it came from (broadcast, multicast).
    Flood,
    /// Nowhere: a destination the relay does not know, or the port it came from.
    Drop,
}

/// What one direction of one link (from a port to another) carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkCount {
    pub frames: u64,
    /// RoCE payload bytes sent for the first time (by PSN).
    pub payload: u64,
    /// RoCE payload bytes sent again (a retransmission: a PSN the link has carried before).
    pub again: u64,
    /// Acknowledgements (ACK, NAK, RNR NAK).
    pub acks: u64,
    /// When the first and the last frame crossed (since the Unix epoch).
    pub first_at: Option<Duration>,
    pub last_at: Duration,
}

/// Everything the relay saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pub ports: usize,
    pub frames: u64,
    pub roce: u64,
    pub bad_icrc: u64,
    pub flooded: u64,
    pub dropped: u64,
    /// `links[from * ports + to]`.
    pub links: Vec<LinkCount>,
}

impl Seen {
    pub fn link(&self, from: usize, to: usize) -> LinkCount {
        self.links[from * self.ports + to]
    }
}

struct State {
    seen: Seen,
    /// The last PSN each sender used towards each QP: what tells a retransmission apart.
    last_psn: HashMap<(usize, u32), u32>,
    pcap: Pcap,
}

/// The relay's table and record, shared by whatever carries the frames.
pub struct Relay {
    macs: Vec<[u8; 6]>,
    state: Mutex<State>,
}

/// Whether PSN `psn` comes after `last` (24-bit sequence arithmetic, as the transport compares
/// them).
fn after(psn: u32, last: u32) -> bool {
    let d = psn.wrapping_sub(last) & 0xff_ffff;
    d != 0 && d < 0x80_0000
}

impl Relay {
    /// A relay with a port for each MAC of `macs`, writing every frame to `pcap` if given.
    pub fn new(macs: Vec<[u8; 6]>, pcap: Option<&Path>) -> Result<Arc<Relay>, DemoError> {
        let pcap = Pcap::create(pcap)?;
        let ports = macs.len();
        Ok(Arc::new(Relay {
            macs,
            state: Mutex::new(State {
                seen: Seen {
                    ports,
                    links: vec![LinkCount::default(); ports * ports],
                    ..Seen::default()
                },
                last_psn: HashMap::new(),
                pcap,
            }),
        }))
    }

    pub fn ports(&self) -> usize {
        self.macs.len()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a frame with destination `mac` that came in on port `from` goes.
    fn decide(&self, from: usize, mac: &[u8]) -> Route {
        if mac.first().is_some_and(|b| b & 1 == 1) {
            return Route::Flood;
        }
        match self.macs.iter().position(|m| m[..] == *mac) {
            Some(port) if port != from => Route::Port(port),
            _ => Route::Drop,
        }
    }

    /// A frame came in on port `from`: it is recorded (and captured), and its route returned.
    pub fn route(&self, from: usize, frame: &[u8]) -> Route {
        let at = since_epoch();
        let route = self.decide(from, frame.get(..6).unwrap_or_default());
        let brief = Brief::of(frame);
        let ports = self.ports();
        let mut state = self.state();
        let state = &mut *state;
        state.pcap.write(at, frame);
        let seen = &mut state.seen;
        seen.frames += 1;
        if let Some(b) = brief {
            seen.roce += 1;
            seen.bad_icrc += u64::from(!b.icrc_ok);
        }
        match route {
            Route::Flood => seen.flooded += 1,
            Route::Drop => seen.dropped += 1,
            Route::Port(to) => {
                let link = &mut seen.links[from * ports + to];
                link.frames += 1;
                link.first_at.get_or_insert(at);
                link.last_at = at;
                link.acks += u64::from(brief.is_some_and(|b| b.syndrome.is_some()));
                if let Some(b) = brief.filter(|b| b.payload > 0) {
                    let new = match state.last_psn.entry((from, b.qpn)) {
                        Entry::Vacant(entry) => {
                            entry.insert(b.psn);
                            true
                        }
                        Entry::Occupied(mut entry) => {
                            let new = after(b.psn, *entry.get());
                            if new {
                                entry.insert(b.psn);
                            }
                            new
                        }
                    };
                    if new {
                        link.payload += b.payload as u64;
                    } else {
                        link.again += b.payload as u64;
                    }
                }
            }
        }
        route
    }

    /// What the relay has seen so far.
    pub fn seen(&self) -> Seen {
        self.state().seen.clone()
    }

    /// Puts the capture on disk; says so if any frame could not be written.
    pub fn finish(&self) -> Result<(), DemoError> {
        self.state().pcap.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::roce_frame;
    use roce_wire::{capture, Kind};

    fn macs() -> Vec<[u8; 6]> {
        (1..=3).map(|i| [2, 0, 10, 0, 0, i]).collect()
    }

    #[test]
    fn frames_go_to_the_port_of_their_mac_broadcasts_everywhere() {
        let relay = Relay::new(macs(), None).unwrap();
        // `roce_frame` goes from 10.0.0.1 (port 0) to 10.0.0.2 (port 1).
        let frame = roce_frame(Kind::WriteOnly, 5, &[7; 100]);
        assert_eq!(relay.route(0, &frame), Route::Port(1));
        let mut arp = frame.clone();
        arp[..6].copy_from_slice(&[0xff; 6]);
        assert_eq!(relay.route(2, &arp), Route::Flood);
        let mut stray = frame.clone();
        stray[5] = 9;
        assert_eq!(relay.route(0, &stray), Route::Drop);
        // Back out of the port it came in on: a loop, dropped.
        assert_eq!(relay.route(1, &frame), Route::Drop);
        let seen = relay.seen();
        assert_eq!((seen.frames, seen.roce, seen.bad_icrc), (4, 4, 0));
        assert_eq!((seen.flooded, seen.dropped), (1, 2));
        let link = seen.link(0, 1);
        assert_eq!((link.frames, link.payload, link.again), (1, 100, 0));
        assert_eq!(seen.link(1, 0), LinkCount::default());
    }

    #[test]
    fn a_psn_carried_again_counts_apart_and_wraps() {
        let relay = Relay::new(macs(), None).unwrap();
        for psn in [0xff_fffe, 0xff_ffff, 0, 0xff_ffff, 1] {
            relay.route(0, &roce_frame(Kind::WriteMiddle, psn, &[1; 10]));
        }
        let link = relay.seen().link(0, 1);
        assert_eq!((link.frames, link.payload, link.again), (5, 40, 10));
        let mut bad = roce_frame(Kind::WriteOnly, 2, &[1; 10]);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        relay.route(0, &bad);
        assert_eq!(relay.seen().bad_icrc, 1);
    }

    #[test]
    fn every_frame_is_captured() {
        let dir = tempfile::tempdir().unwrap();
        let pcap = dir.path().join("ring.pcap");
        let relay = Relay::new(macs(), Some(&pcap)).unwrap();
        relay.route(0, &roce_frame(Kind::WriteOnly, 1, b"x"));
        relay.route(0, b"short");
        relay.finish().unwrap();
        let mut reader = capture::open(&pcap).unwrap();
        let mut n = 0;
        while let Some(record) = reader.next_record() {
            record.unwrap();
            n += 1;
        }
        assert_eq!(n, 2);
    }
}
