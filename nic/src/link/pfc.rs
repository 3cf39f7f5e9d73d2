//! Pause frames: IEEE 802.1Qbb priority flow control (PFC), and the 802.3x PAUSE before it. A
//! switch whose buffer for an ingress port fills past its XOFF threshold sends the port's peer
//! a pause frame; the peer stops sending (in the paused priorities) for the time the frame
//! says, or until a frame with time zero (XON) lets it go on. This is what makes a RoCE fabric
//! "lossless".
//!
//! Frame layout (MAC control, Ethertype 0x8808, to 01:80:c2:00:00:01), after the Ethernet
//! header: opcode (2 bytes; 0x0101 PFC, 0x0001 PAUSE), then for PFC a class-enable vector
//! (2 bytes, bit n for priority n) and eight times (2 bytes each, in quanta of 512 bit times
//! at the port's speed); for PAUSE one time for the whole link. Padded to the 60-byte minimum.
//!
//! [`Pausable`] is the NIC's side: a link wrapper that takes pause frames out of what it
//! receives and holds everything the engine sends while paused.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_wire::EthernetAddress;
use tracing::{debug, trace};

use super::paced::Rate;
use super::Link;
use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// Where pause frames go: the MAC control group address, which bridges never forward.
pub const PAUSE_DESTINATION: EthernetAddress = EthernetAddress([0x01, 0x80, 0xc2, 0, 0, 1]);
pub const MAC_CONTROL_ETHERTYPE: u16 = 0x8808;
const OPCODE_PAUSE: u16 = 0x0001;
const OPCODE_PFC: u16 = 0x0101;
/// A pause quantum: 512 bit times at the port's speed.
pub const QUANTUM_BITS: u64 = 512;
/// The shortest Ethernet frame, without its FCS.
pub const FRAME_LEN: usize = 60;
/// The priority RoCE traffic is given by convention (and our default lossless class).
pub const DEFAULT_PRIORITY: u8 = 3;

/// A pause request, for each of the eight priorities: `None` for a priority the frame leaves
/// alone, else the time in quanta (0 = resume now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    pub quanta: [Option<u16>; 8],
}

impl Pause {
    /// A PFC frame's request for one priority.
    pub fn priority(priority: u8, quanta: u16) -> Pause {
        let mut all = [None; 8];
        all[usize::from(priority & 7)] = Some(quanta);
        Pause { quanta: all }
    }

    /// The request for `priority`, if the frame makes one.
    pub fn quanta_for(&self, priority: u8) -> Option<u16> {
        self.quanta[usize::from(priority & 7)]
    }

    /// Reads a pause frame (PFC or 802.3x PAUSE, optionally VLAN-tagged); `None` for any other.
    pub fn parse(frame: &[u8]) -> Option<Pause> {
        let word = |at: usize| Some(u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?));
        let at = match word(12)? {
            MAC_CONTROL_ETHERTYPE => 14,
            0x8100 if word(16)? == MAC_CONTROL_ETHERTYPE => 18,
            _ => return None,
        };
        match word(at)? {
            OPCODE_PFC => {
                let enabled = word(at + 2)?;
                let mut quanta = [None; 8];
                for (n, q) in quanta.iter_mut().enumerate() {
                    if enabled & (1 << n) != 0 {
                        *q = Some(word(at + 4 + 2 * n)?);
                    }
                }
                Some(Pause { quanta })
            }
            OPCODE_PAUSE => Some(Pause {
                quanta: [Some(word(at + 2)?); 8],
            }),
            _ => None,
        }
    }

    /// Writes this request as a PFC frame from `source` into `buf` (at least [`FRAME_LEN`]
    /// bytes); returns its length.
    pub fn emit(&self, source: EthernetAddress, buf: &mut [u8]) -> usize {
        let frame = &mut buf[..FRAME_LEN];
        frame.fill(0);
        frame[0..6].copy_from_slice(&PAUSE_DESTINATION.0);
        frame[6..12].copy_from_slice(&source.0);
        frame[12..14].copy_from_slice(&MAC_CONTROL_ETHERTYPE.to_be_bytes());
        frame[14..16].copy_from_slice(&OPCODE_PFC.to_be_bytes());
        let mut enabled = 0u16;
        for (n, q) in self.quanta.iter().enumerate() {
            if let Some(q) = q {
                enabled |= 1 << n;
                frame[18 + 2 * n..20 + 2 * n].copy_from_slice(&q.to_be_bytes());
            }
        }
        frame[16..18].copy_from_slice(&enabled.to_be_bytes());
        FRAME_LEN
    }
}

/// How long `quanta` pause quanta last at line rate `rate`.
pub fn pause_time(quanta: u16, rate: Rate) -> Duration {
    Duration::from_nanos(u64::from(quanta) * QUANTUM_BITS * 1_000_000_000 / rate.0.max(1))
}

/// Frames a paused link holds before it drops what more the engine sends.
pub const HELD_FRAMES: usize = 4096;

/// What a [`Pausable`] link counted, readable while it runs.
#[derive(Debug, Default)]
pub struct PauseCounters {
    /// Pause frames for our priority that asked for a pause (non-zero time).
    pub xoff_received: AtomicU64,
    /// Pause frames for our priority with time zero.
    pub xon_received: AtomicU64,
    /// Frames the engine sent while paused, held until the pause ended.
    pub held: AtomicU64,
    /// Frames dropped because more than [`HELD_FRAMES`] were held.
    pub dropped: AtomicU64,
    /// Nanoseconds spent paused (counted when a pause ends).
    pub paused_ns: AtomicU64,
}

/// A link that obeys the pause frames it receives for its priority: while paused it says it
/// cannot send ([`Link::can_send`]), so the engine generates nothing new, and holds what is sent
/// anyway (acknowledgements) until the pause ends. Pause frames are consumed, never passed up.
pub struct Pausable<L> {
    inner: L,
    priority: u8,
    rate: Rate,
    paused_until: Option<Instant>,
    paused_since: Option<Instant>,
    held: VecDeque<FrameBuf>,
    counters: Arc<PauseCounters>,
}

impl<L: Link> Pausable<L> {
    /// Obeys pauses for `priority`, timing quanta at line rate `rate`.
    pub fn new(inner: L, priority: u8, rate: Rate) -> Pausable<L> {
        Pausable {
            inner,
            priority: priority & 7,
            rate,
            paused_until: None,
            paused_since: None,
            held: VecDeque::new(),
            counters: Arc::default(),
        }
    }

    pub fn counters(&self) -> Arc<PauseCounters> {
        Arc::clone(&self.counters)
    }

    fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|t| t > now)
    }

    fn obey(&mut self, pause: &Pause, now: Instant) {
        let Some(quanta) = pause.quanta_for(self.priority) else {
            return;
        };
        if quanta == 0 {
            self.counters.xon_received.fetch_add(1, Ordering::Relaxed);
            trace!("XON: sending again");
            self.paused_until = Some(now);
        } else {
            self.counters.xoff_received.fetch_add(1, Ordering::Relaxed);
            let until = now + pause_time(quanta, self.rate);
            trace!(?until, quanta, "XOFF: paused");
            self.paused_since.get_or_insert(now);
            self.paused_until = Some(until);
        }
    }

    /// Ends a pause whose time is up: sends what was held.
    fn resume_if_due(&mut self, now: Instant) {
        if self.paused(now) {
            return;
        }
        if let Some(since) = self.paused_since.take() {
            let ns = now.saturating_duration_since(since).as_nanos() as u64;
            self.counters.paused_ns.fetch_add(ns, Ordering::Relaxed);
        }
        self.paused_until = None;
        while let Some(frame) = self.held.pop_front() {
            if let Err(e) = self.inner.send(frame) {
                debug!(error = %e, "a frame held during a pause was lost");
            }
        }
    }
}

impl<L: Link> Link for Pausable<L> {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        let now = Instant::now();
        self.resume_if_due(now);
        if !self.paused(now) {
            return self.inner.send(frame);
        }
        if self.held.len() >= HELD_FRAMES {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "paused by the peer and the hold queue is full",
            ));
        }
        self.counters.held.fetch_add(1, Ordering::Relaxed);
        self.held.push_back(frame);
        Ok(())
    }

    fn can_send(&self) -> bool {
        !self.paused(Instant::now()) && self.inner.can_send()
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        loop {
            let Some(frame) = self.inner.recv()? else {
                return Ok(None);
            };
            match Pause::parse(&frame) {
                Some(pause) => self.obey(&pause, Instant::now()),
                None => return Ok(Some(frame)),
            }
        }
    }

    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }

    fn service(&mut self, now: Instant) -> Option<Instant> {
        self.resume_if_due(now);
        let inner = self.inner.service(now);
        match (self.paused_until.filter(|t| *t > now), inner) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn flush_sends(&mut self) -> u64 {
        self.inner.flush_sends()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn describe(&self) -> String {
        format!(
            "{}, obeying PFC priority {}",
            self.inner.describe(),
            self.priority
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mem;

    #[test]
    fn pfc_frames_round_trip_and_pause_frames_are_read_too() {
        let mut buf = [0u8; 64];
        let len = Pause::priority(3, 0xffff).emit(EthernetAddress([2, 0, 0, 0, 0, 9]), &mut buf);
        assert_eq!(len, 60);
        let pause = Pause::parse(&buf[..len]).unwrap();
        assert_eq!(pause.quanta_for(3), Some(0xffff));
        assert_eq!(pause.quanta_for(0), None);
        assert_eq!(&buf[14..18], &[0x01, 0x01, 0x00, 0x08]);
        // An 802.3x PAUSE of 100 quanta pauses every priority.
        let mut pause_802_3x = buf;
        pause_802_3x[14..18].copy_from_slice(&[0x00, 0x01, 0x00, 100]);
        assert_eq!(Pause::parse(&pause_802_3x).unwrap().quanta, [Some(100); 8]);
        // Anything else is not a pause.
        let mut ipv4 = buf;
        ipv4[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(Pause::parse(&ipv4), None);
        assert_eq!(Pause::parse(&buf[..15]), None);
    }

    #[test]
    fn quanta_are_512_bit_times() {
        assert_eq!(
            pause_time(1, Rate(1_000_000_000)),
            Duration::from_nanos(512)
        );
        assert_eq!(
            pause_time(0xffff, Rate(10_000_000_000)),
            Duration::from_nanos(3_355_392)
        );
    }

    fn pause_frame(quanta: u16, priority: u8) -> Vec<u8> {
        let mut buf = vec![0u8; 60];
        Pause::priority(priority, quanta).emit(EthernetAddress([2, 0, 0, 0, 0, 9]), &mut buf);
        buf
    }

    #[test]
    fn a_paused_link_holds_its_frames_until_xon_and_passes_other_priorities() {
        let (nic_end, mut switch_end) = mem::pair();
        // 8 kbit/s: 0xffff quanta is over an hour, so only an XON ends this pause.
        let mut link = Pausable::new(nic_end, 3, Rate(8_000));
        let pool = BufPool::new(8);
        let counters = link.counters();
        // A pause for another priority is consumed and changes nothing.
        switch_end
            .send(pool.copy_of(&pause_frame(0xffff, 5)))
            .unwrap();
        assert!(link.recv().unwrap().is_none());
        assert!(link.can_send());
        switch_end
            .send(pool.copy_of(&pause_frame(0xffff, 3)))
            .unwrap();
        switch_end
            .send(pool.copy_of(b"data after the pause"))
            .unwrap();
        assert_eq!(&link.recv().unwrap().unwrap()[..], b"data after the pause");
        assert!(!link.can_send());
        assert!(link.service(Instant::now()).is_some());
        link.send(pool.copy_of(b"an ack")).unwrap();
        assert!(switch_end.recv().unwrap().is_none(), "sent while paused");
        switch_end.send(pool.copy_of(&pause_frame(0, 3))).unwrap();
        assert!(link.recv().unwrap().is_none());
        link.service(Instant::now());
        assert!(link.can_send());
        assert_eq!(&switch_end.recv().unwrap().unwrap()[..], b"an ack");
        assert_eq!(counters.xoff_received.load(Ordering::Relaxed), 1);
        assert_eq!(counters.xon_received.load(Ordering::Relaxed), 1);
        assert_eq!(counters.held.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_pause_ends_by_itself_when_its_time_is_up() {
        let (nic_end, mut switch_end) = mem::pair();
        // 1 Mbit/s: 1000 quanta is 512 ms.
        let mut link = Pausable::new(nic_end, 3, Rate(1_000_000));
        let pool = BufPool::new(8);
        switch_end
            .send(pool.copy_of(&pause_frame(1000, 3)))
            .unwrap();
        let start = Instant::now();
        assert!(link.recv().unwrap().is_none());
        let due = link.service(Instant::now()).expect("a pause has an end");
        assert!(
            due >= start + Duration::from_millis(500),
            "{:?}",
            due - start
        );
        assert!(due <= Instant::now() + Duration::from_millis(513));
        assert!(link.service(due).is_none());
        assert!(link.paused_until.is_none());
    }
}
