//! A frame's way in: parse, check that it is ours and that its ICRC holds, find the QP, and hand
//! the packet to the responder (requests) or the completer (responses) — on the port thread, or
//! on the thread that owns the QP ([`super::shard`]). Frames that are not RoCE go to the port's
//! IP stack; every accepted frame teaches the engine its sender's MAC.

use std::net::IpAddr;
use std::time::Instant;

use roce_wire::{Error as WireError, Frame, NetworkRepr, Transport};
use tracing::{debug, trace, trace_span};

use super::shard::{shard_of, verify_icrc, Shard, Tables};
use super::{Engine, GSI_QPN};
use crate::buf::FrameBuf;
use crate::counters;
use crate::port;
use crate::transport::Event;

impl Engine {
    /// Takes in one frame that arrived by `now`: a RoCE packet for this thread's QPs is
    /// delivered at once, one for another thread's queued to it, one for QP1 kept for when
    /// the world is held.
    pub(super) fn handle_frame(
        &mut self,
        tables: &Tables,
        shard: &mut Shard,
        buf: FrameBuf,
        now: Instant,
    ) {
        let c = &self.counters;
        counters::bump(&c.rx_frames);
        counters::add(&c.rx_bytes, buf.len() as u64);
        if buf.get(6..12) == Some(&self.port.mac.0[..]) {
            counters::bump(&c.rx_looped);
            trace!("our own frame came back: dropped");
            return;
        }
        let bytes = &buf[..];
        // Looked at where it was parsed: a frame's view is a few hundred bytes, and moving it
        // out of the result cost a copy of them per packet.
        let parsed = Frame::parse(bytes);
        let frame = match &parsed {
            Ok(frame) => frame,
            &Err(WireError::NotRoce(why)) => {
                counters::bump(&c.rx_not_roce);
                trace!(%why, "not RoCE: to the port's IP stack");
                self.hand_to_ip_stack(buf);
                return;
            }
            Err(e) => {
                counters::bump(&c.rx_malformed);
                debug!(error = %e, "malformed RoCE frame dropped");
                return;
            }
        };
        let bth = frame.repr.bth;
        let span = trace_span!("rx", qpn = bth.dest_qp, psn = bth.psn, opcode = %bth.opcode);
        let _enter = span.enter();
        Event::FrameIn { len: bytes.len() }.log();
        if !self.is_for_us(frame) {
            counters::bump(&c.rx_not_for_us);
            trace!("addressed to another NIC");
            return;
        }
        let owner = shard_of(bth.dest_qp, self.threads);
        // Another thread's packet has its ICRC checked there: the per-byte work runs in
        // parallel.
        if owner == 0 && !verify_icrc(frame, c) {
            return;
        }
        if let (Some(ip), Some(ethernet)) = (sender(&frame.repr.network), frame.repr.ethernet) {
            self.learn(ip, ethernet.src);
        }
        if owner != 0 {
            if self.lines[owner - 1].push(buf) {
                self.to_wake |= 1 << owner;
            } else {
                counters::bump(&self.counters.shard_rx_dropped);
                debug!(thread = owner, "the thread's queue is full: frame dropped");
            }
            return;
        }
        if bth.dest_qp == GSI_QPN {
            self.gsi_frame = Some(buf);
            return;
        }
        shard.deliver(
            tables,
            &mut self.tx,
            &self.counters,
            &self.port.pkeys,
            frame,
            now,
        );
        // Dropped with the rest of the batch (`Engine::receive`).
        self.delivered.push(buf);
    }

    /// With the world held: a frame for QP1 (checked as for us, its ICRC verified and its
    /// sender learnt). CM MADs are the agent's; any other datagram to QP1 is for the host
    /// holding it.
    pub(super) fn gsi_receive(&mut self, buf: FrameBuf, now: Instant) {
        let Ok(frame) = Frame::parse(&buf) else {
            return;
        };
        let bth = frame.repr.bth;
        let span = trace_span!("rx", qpn = bth.dest_qp, psn = bth.psn, opcode = %bth.opcode);
        let _enter = span.enter();
        if bth.tver == 0 && bth.opcode.transport() != Transport::Cnp {
            if let (Some(Ok(mad)), Some(ethernet), Some(src), Some(dst)) = (
                roce_wire::cm::parse_frame(&frame),
                frame.repr.ethernet,
                sender(&frame.repr.network),
                receiver(&frame.repr.network),
            ) {
                self.cm_receive(mad, src, dst, ethernet.src);
                return;
            }
        }
        let Engine {
            held,
            tx,
            counters,
            port,
            ..
        } = self;
        let Some(held) = held.as_mut() else { return };
        let (tables, shard) = held.shard_of_qp(GSI_QPN);
        shard.deliver(tables, tx, counters, &port.pkeys, &frame, now);
        shard.flush_acks(tables, tx, counters, now);
    }

    /// Hands a frame that is not RoCE to the port's IP stack, after learning its sender.
    fn hand_to_ip_stack(&mut self, buf: FrameBuf) {
        if let Some((ip, mac)) = port::sender_of(&buf, self.port.mac) {
            self.learn(ip, mac);
        }
        if !self.ip_stack.ingress(buf) {
            counters::bump(&self.counters.port_rx_dropped);
            debug!("the IP stack's queue is full: frame dropped");
        }
    }

    /// Whether the frame is addressed to this NIC's MAC and one of its IP addresses.
    fn is_for_us(&self, frame: &Frame<'_>) -> bool {
        if frame.repr.ethernet.is_some_and(|e| e.dst != self.port.mac) {
            return false;
        }
        receiver(&frame.repr.network).is_some_and(|dst| self.local_ips.contains(&dst))
    }
}

/// The IP address a frame is sent from (none for a bare GRH).
fn sender(network: &NetworkRepr) -> Option<IpAddr> {
    match *network {
        NetworkRepr::Ipv4 { src, .. } => Some(src.into()),
        NetworkRepr::Ipv6 { src, .. } => Some(src.into()),
        NetworkRepr::Grh { .. } => None,
    }
}

/// The IP address a frame is sent to (none for a bare GRH).
fn receiver(network: &NetworkRepr) -> Option<IpAddr> {
    match *network {
        NetworkRepr::Ipv4 { dst, .. } => Some(dst.into()),
        NetworkRepr::Ipv6 { dst, .. } => Some(dst.into()),
        NetworkRepr::Grh { .. } => None,
    }
}
