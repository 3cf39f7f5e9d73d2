//! The allreduce's fabric: every host's NIC is cabled to a port of one switch — `roce
//! switch` (the `roce_switch` crate: learning, line-rate egress queues, tail drop), as a
//! process of its own or, with `--in-process`, a thread — and the demo taps every cable, as
//! it is the wire between the two NICs of the other scenarios. The [`Taps`] see each frame a
//! NIC sends into the fabric, once: they count what went from which host to which (by the
//! frame's destination MAC), check every ICRC, and write the capture.
//!
//! Between processes each cable runs through a pair of the demo's UDP sockets ([`udp`]); in one
//! process each NIC's link is wrapped in a [`Tap`](crate::wire::tap::Tap).

pub mod udp;

use std::collections::hash_map::{Entry, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::events::since_epoch;
use crate::wire::{Brief, Pcap};
use crate::DemoError;

/// What went from one host to another, as the tap on the sender's cable saw it.
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

/// Everything the taps saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pub hosts: usize,
    pub frames: u64,
    pub roce: u64,
    pub bad_icrc: u64,
    /// Frames to every host (broadcast, multicast: ARP).
    pub broadcast: u64,
    /// Frames to a MAC that is no host's.
    pub unknown: u64,
    /// `links[from * hosts + to]`.
    pub links: Vec<LinkCount>,
}

impl Seen {
    pub fn link(&self, from: usize, to: usize) -> LinkCount {
        self.links[from * self.hosts + to]
    }
}

struct State {
    seen: Seen,
    /// The last PSN each sender used towards each QP: what tells a retransmission apart.
    last_psn: HashMap<(usize, u32), u32>,
    pcap: Pcap,
}

/// The taps on the hosts' cables, and what they recorded.
pub struct Taps {
    macs: Vec<[u8; 6]>,
    state: Mutex<State>,
}

/// Whether PSN `psn` comes after `last` (24-bit sequence arithmetic, as the transport compares
/// them).
fn after(psn: u32, last: u32) -> bool {
    let d = psn.wrapping_sub(last) & 0xff_ffff;
    d != 0 && d < 0x80_0000
}

impl Taps {
    /// Taps on the cables of the hosts whose NICs have the MACs `macs` (host `i` has `macs[i]`),
    /// writing every frame to `pcap` if given.
    pub fn new(macs: Vec<[u8; 6]>, pcap: Option<&Path>) -> Result<Arc<Taps>, DemoError> {
        let pcap = Pcap::create(pcap)?;
        let hosts = macs.len();
        Ok(Arc::new(Taps {
            macs,
            state: Mutex::new(State {
                seen: Seen {
                    hosts,
                    links: vec![LinkCount::default(); hosts * hosts],
                    ..Seen::default()
                },
                last_psn: HashMap::new(),
                pcap,
            }),
        }))
    }

    pub fn hosts(&self) -> usize {
        self.macs.len()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Host `from`'s NIC sent `frame` into the fabric: it is recorded and captured.
    pub fn carry(&self, from: usize, frame: &[u8]) {
        let at = since_epoch();
        let mac = frame.get(..6).unwrap_or_default();
        let to = self.macs.iter().position(|m| m[..] == *mac);
        let brief = Brief::of(frame);
        let hosts = self.hosts();
        let mut state = self.state();
        let state = &mut *state;
        state.pcap.write(at, frame);
        let seen = &mut state.seen;
        seen.frames += 1;
        if let Some(b) = brief {
            seen.roce += 1;
            seen.bad_icrc += u64::from(!b.icrc_ok);
        }
        let Some(to) = to else {
            if mac.first().is_some_and(|b| b & 1 == 1) {
                seen.broadcast += 1;
            } else {
                seen.unknown += 1;
            }
            return;
        };
        let link = &mut seen.links[from * hosts + to];
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

    /// What the taps have seen so far.
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
    fn frames_count_for_the_host_of_their_mac() {
        let taps = Taps::new(macs(), None).unwrap();
        // `roce_frame` goes from 10.0.0.1 (host 0) to 10.0.0.2 (host 1).
        let frame = roce_frame(Kind::WriteOnly, 5, &[7; 100]);
        taps.carry(0, &frame);
        let mut arp = frame.clone();
        arp[..6].copy_from_slice(&[0xff; 6]);
        taps.carry(2, &arp);
        let mut stray = frame.clone();
        stray[5] = 9;
        taps.carry(0, &stray);
        let seen = taps.seen();
        assert_eq!((seen.frames, seen.roce, seen.bad_icrc), (3, 3, 0));
        assert_eq!((seen.broadcast, seen.unknown), (1, 1));
        let link = seen.link(0, 1);
        assert_eq!((link.frames, link.payload, link.again), (1, 100, 0));
        assert_eq!(seen.link(1, 0), LinkCount::default());
    }

    #[test]
    fn a_psn_carried_again_counts_apart_and_wraps() {
        let taps = Taps::new(macs(), None).unwrap();
        for psn in [0xff_fffe, 0xff_ffff, 0, 0xff_ffff, 1] {
            taps.carry(0, &roce_frame(Kind::WriteMiddle, psn, &[1; 10]));
        }
        let link = taps.seen().link(0, 1);
        assert_eq!((link.frames, link.payload, link.again), (5, 40, 10));
        let mut bad = roce_frame(Kind::WriteOnly, 2, &[1; 10]);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        taps.carry(0, &bad);
        assert_eq!(taps.seen().bad_icrc, 1);
    }

    #[test]
    fn every_frame_is_captured() {
        let dir = tempfile::tempdir().unwrap();
        let pcap = dir.path().join("ring.pcap");
        let taps = Taps::new(macs(), Some(&pcap)).unwrap();
        taps.carry(0, &roce_frame(Kind::WriteOnly, 1, b"x"));
        taps.carry(0, b"short");
        taps.finish().unwrap();
        let mut reader = capture::open(&pcap).unwrap();
        let mut n = 0;
        while let Some(record) = reader.next_record() {
            record.unwrap();
            n += 1;
        }
        assert_eq!(n, 2);
    }
}
