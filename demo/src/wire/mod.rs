//! The wire between the two NICs, with the demo standing on it.
//!
//! Every frame one NIC sends passes through [`Wire::carry`] before the other NIC gets it: between
//! NIC processes the demo forwards the datagrams of their UDP cables ([`forward`]); between NICs
//! in the demo's own process a link wrapper does it ([`tap`]). So the demo sees every frame as
//! it really went — to show it field by field, to draw it in the ladder diagram, to write it to a
//! pcap for Wireshark — and can lose one on purpose, as a real wire would.

pub mod forward;
pub mod tap;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use roce_wire::aeth::Syndrome;
use roce_wire::{capture, Frame, Opcode};

use crate::events::since_epoch;
use crate::{DemoError, Side};

/// Frames whose bytes are kept for showing (later ones are counted and briefly described).
pub const KEPT_BYTES: usize = 256;
/// Frames listed at all; beyond this a gigabyte's quarter million frames are only counted.
pub const LISTED: usize = 100_000;

/// What a RoCE frame is, in brief.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Brief {
    pub opcode: Opcode,
    pub qpn: u32,
    pub psn: u32,
    pub payload: usize,
    /// The ACK, NAK or RNR NAK of an acknowledgement.
    pub syndrome: Option<Syndrome>,
    pub icrc_ok: bool,
}

impl Brief {
    pub fn of(frame: &[u8]) -> Option<Brief> {
        let frame = Frame::parse(frame).ok()?;
        let bth = frame.repr.bth;
        Some(Brief {
            opcode: bth.opcode,
            qpn: bth.dest_qp,
            psn: bth.psn,
            payload: frame.payload().len(),
            syndrome: frame.repr.ext.aeth.map(|a| a.syndrome),
            icrc_ok: frame.icrc().is_ok(),
        })
    }
}

/// One frame that crossed (or was lost on) the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// 1 for the first frame, as Wireshark numbers them in the pcap.
    pub number: u32,
    /// Since the Unix epoch.
    pub at: Duration,
    pub from: Side,
    pub len: usize,
    /// The frame itself, for the first [`KEPT_BYTES`] frames.
    pub bytes: Option<Vec<u8>>,
    /// `None` for frames that are not RoCE (ARP) or cannot be parsed.
    pub brief: Option<Brief>,
    /// Lost on purpose: it never reached the other NIC.
    pub dropped: bool,
}

struct State {
    frames: Vec<Seen>,
    count: u32,
    pcap: Pcap,
    /// Which of the initiator's RoCE frames to lose (0 is the first), if any.
    drop: Option<u32>,
    initiator_roce_frames: u32,
    /// Payload bytes that reached each side, for progress.
    payload_to: [u64; 2],
}

/// The wire's record of everything that crossed it.
pub struct Wire {
    state: Mutex<State>,
    changed: Condvar,
}

impl Wire {
    /// A wire that writes every frame to `pcap` (if given) and loses the initiator's RoCE frame
    /// number `drop` (0 is the first).
    pub fn new(pcap: Option<&Path>, drop: Option<u32>) -> Result<Arc<Wire>, DemoError> {
        let pcap = Pcap::create(pcap)?;
        Ok(Arc::new(Wire {
            state: Mutex::new(State {
                frames: Vec::new(),
                count: 0,
                pcap,
                drop,
                initiator_roce_frames: 0,
                payload_to: [0; 2],
            }),
            changed: Condvar::new(),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A frame `from` one NIC is on the wire. Returns whether it goes on to the other NIC.
    pub fn carry(&self, from: Side, frame: &[u8]) -> bool {
        let at = since_epoch();
        let brief = Brief::of(frame);
        let mut state = self.state();
        let mut dropped = false;
        if from == Side::Initiator && brief.is_some() {
            dropped = state.drop == Some(state.initiator_roce_frames);
            state.initiator_roce_frames += 1;
        }
        if !dropped {
            if let Some(b) = brief {
                state.payload_to[from.peer() as usize] += b.payload as u64;
            }
        }
        // A lost frame was still sent: a capture at the sender holds it, and so does ours.
        state.pcap.write(at, frame);
        state.count += 1;
        let number = state.count;
        if state.frames.len() < LISTED {
            let keep = state.frames.len() < KEPT_BYTES;
            state.frames.push(Seen {
                number,
                at,
                from,
                len: frame.len(),
                bytes: keep.then(|| frame.to_vec()),
                brief,
                dropped,
            });
        }
        drop(state);
        self.changed.notify_all();
        !dropped
    }

    /// The frames listed so far.
    pub fn frames(&self) -> Vec<Seen> {
        self.state().frames.clone()
    }

    /// Frames that crossed so far (listed or not): a mark for [`Wire::since`].
    pub fn mark(&self) -> usize {
        self.state().frames.len()
    }

    /// The frames listed after `mark`.
    pub fn since(&self, mark: usize) -> Vec<Seen> {
        self.state().frames.get(mark..).unwrap_or_default().to_vec()
    }

    /// Whether every frame goes to a pcap file (`--pcap`).
    pub fn recording(&self) -> bool {
        self.state().pcap.is_recording()
    }

    /// Every frame that crossed, listed or not.
    pub fn count(&self) -> u32 {
        self.state().count
    }

    /// Payload bytes that have reached `side` so far.
    pub fn payload_to(&self, side: Side) -> u64 {
        self.state().payload_to[side as usize]
    }

    /// Waits up to `timeout` until the frames listed after `mark` satisfy `done`.
    pub fn wait_until(
        &self,
        mark: usize,
        timeout: Duration,
        done: impl Fn(&[Seen]) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        loop {
            if done(state.frames.get(mark..).unwrap_or_default()) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Puts the capture on disk; says so if any frame could not be written.
    pub fn finish(&self) -> Result<(), DemoError> {
        self.state().pcap.finish()
    }
}

/// The capture of `--pcap`: every frame written as it crosses. A frame that cannot be written
/// does not stop the others; the first failure is reported when the capture is finished.
pub struct Pcap {
    writer: Option<capture::Writer<BufWriter<File>>>,
    error: Option<String>,
}

impl Pcap {
    /// A capture into a new file at `path`, or none.
    pub fn create(path: Option<&Path>) -> Result<Pcap, DemoError> {
        let writer = match path {
            None => None,
            Some(path) => {
                let file = File::create(path).map_err(|e| {
                    DemoError::Usage(format!(
                        "cannot create the capture file {}: {e}",
                        path.display()
                    ))
                })?;
                Some(capture::Writer::new(BufWriter::new(file)).map_err(|e| {
                    DemoError::because(
                        &format!("cannot write the capture file {}", path.display()),
                        e,
                    )
                })?)
            }
        };
        Ok(Pcap {
            writer,
            error: None,
        })
    }

    /// Whether there is a file to write to.
    pub fn is_recording(&self) -> bool {
        self.writer.is_some()
    }

    /// Writes `frame`, seen `at` (since the Unix epoch).
    pub fn write(&mut self, at: Duration, frame: &[u8]) {
        if let Some(writer) = &mut self.writer {
            if let Err(e) = writer.write(at, frame) {
                self.error.get_or_insert(e.to_string());
            }
        }
    }

    /// Puts the capture on disk; says so if any frame could not be written.
    pub fn finish(&mut self) -> Result<(), DemoError> {
        if let Some(e) = self.error.take() {
            return Err(DemoError::because("cannot write the capture file", e));
        }
        if let Some(writer) = self.writer.take() {
            writer
                .into_inner()
                .flush()
                .map_err(|e| DemoError::because("cannot write the capture file", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use roce_wire::{
        bth, reth, EthernetAddress, EthernetRepr, Extensions, FrameRepr, Kind, NetworkRepr,
        Transport,
    };

    /// A real RoCEv2 frame from the initiator (10.0.0.1) to the target: `kind` at `psn` with
    /// `payload` bytes.
    pub(crate) fn roce_frame(kind: Kind, psn: u32, payload: &[u8]) -> Vec<u8> {
        let opcode = Opcode::new(Transport::Rc, kind).unwrap();
        let mut ext = Extensions::for_opcode(opcode);
        if let Some(r) = &mut ext.reth {
            *r = reth::Repr {
                va: 0x40,
                r_key: 0x100,
                dma_len: payload.len() as u32,
            };
        }
        let repr = FrameRepr {
            ethernet: Some(EthernetRepr {
                src: EthernetAddress([2, 0, 10, 0, 0, 1]),
                dst: EthernetAddress([2, 0, 10, 0, 0, 2]),
                vlan: None,
            }),
            network: NetworkRepr::Ipv4 {
                src: [10, 0, 0, 1].into(),
                dst: [10, 0, 0, 2].into(),
                dscp: 0,
                ecn: 0,
                ident: 1,
                ttl: 64,
                udp_src_port: 0xc000,
            },
            bth: bth::Repr::new(opcode, 0x11, psn),
            ext,
            payload_len: payload.len(),
        };
        let mut buf = vec![0; repr.frame_len()];
        let n = repr.emit(&mut buf, payload).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn the_chosen_frame_is_lost_the_others_pass_and_all_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let pcap = dir.path().join("wire.pcap");
        let wire = Wire::new(Some(&pcap), Some(1)).unwrap();
        let first = roce_frame(Kind::WriteFirst, 10, &[1; 256]);
        let middle = roce_frame(Kind::WriteMiddle, 11, &[2; 256]);
        assert!(wire.carry(Side::Initiator, &first));
        assert!(!wire.carry(Side::Initiator, &middle));
        assert!(wire.carry(Side::Target, b"not a RoCE frame"));
        // The same packet again (a retransmission) is a later frame: it passes.
        assert!(wire.carry(Side::Initiator, &middle));
        let frames = wire.frames();
        assert_eq!(frames.len(), 4);
        assert_eq!(
            frames.iter().map(|f| f.dropped).collect::<Vec<_>>(),
            [false, true, false, false]
        );
        let brief = frames[1].brief.unwrap();
        assert_eq!((brief.psn, brief.qpn, brief.payload), (11, 0x11, 256));
        assert!(brief.icrc_ok);
        assert!(frames[2].brief.is_none());
        assert_eq!(frames[3].number, 4);
        assert_eq!(wire.payload_to(Side::Target), 512);
        wire.finish().unwrap();
        let mut reader = capture::open(&pcap).unwrap();
        let mut n = 0;
        while let Some(record) = reader.next_record() {
            record.unwrap();
            n += 1;
        }
        assert_eq!(n, 4, "lost frames are in the capture too");
    }

    #[test]
    fn waiting_for_frames_is_bounded() {
        let wire = Wire::new(None, None).unwrap();
        let start = Instant::now();
        assert!(!wire.wait_until(0, Duration::from_millis(20), |f| !f.is_empty()));
        assert!(start.elapsed() >= Duration::from_millis(20));
        let w = Arc::clone(&wire);
        let t = std::thread::spawn(move || w.carry(Side::Target, b"x"));
        assert!(wire.wait_until(0, Duration::from_secs(5), |f| f.len() == 1));
        t.join().unwrap();
    }
}
