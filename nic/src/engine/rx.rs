//! A frame's way in: parse, check that it is ours and that its ICRC holds, find the QP, and hand
//! the packet to the responder (requests) or the completer (responses). Frames that are not
//! RoCE go to the port's IP stack; every accepted frame teaches the engine its sender's MAC.

use std::net::IpAddr;
use std::time::Instant;

use roce_wire::{Error as WireError, Frame, NetworkRepr, Transport};
use tracing::{debug, trace, trace_span};

use super::{Engine, GSI_QPN};
use crate::buf::FrameBuf;
use crate::counters;
use crate::pkey;
use crate::port;
use crate::transport::{self, ip_addresses, Event};
use crate::types::QpType;

impl Engine {
    /// Takes in one frame that arrived by `now`.
    pub(super) fn handle_frame(&mut self, buf: FrameBuf, now: Instant) {
        let c = &self.counters;
        counters::bump(&c.rx_frames);
        counters::add(&c.rx_bytes, buf.len() as u64);
        if buf.get(6..12) == Some(&self.port.mac.0[..]) {
            counters::bump(&c.rx_looped);
            trace!("our own frame came back: dropped");
            return;
        }
        let bytes = &buf[..];
        let frame = match Frame::parse(bytes) {
            Ok(frame) => frame,
            Err(WireError::NotRoce(why)) => {
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
        if !self.is_for_us(&frame) {
            counters::bump(&c.rx_not_for_us);
            trace!("addressed to another NIC");
            return;
        }
        let icrc = frame.icrc();
        if !icrc.is_ok() {
            counters::bump(&c.rx_icrc_errors);
            Event::BadIcrc {
                expected: icrc.expected,
                found: icrc.found,
            }
            .log();
            return;
        }
        Event::IcrcOk.log();
        let sender: Option<IpAddr> = match frame.repr.network {
            NetworkRepr::Ipv4 { src, .. } => Some(src.into()),
            NetworkRepr::Ipv6 { src, .. } => Some(src.into()),
            NetworkRepr::Grh { .. } => None,
        };
        if let (Some(ip), Some(ethernet)) = (sender, frame.repr.ethernet) {
            self.learn(ip, ethernet.src);
        }
        let c = &self.counters;
        if bth.tver != 0 {
            counters::bump(&c.rx_bad_tver);
            debug!(tver = bth.tver, "transport version not 0: dropped");
            return;
        }
        let transport = bth.opcode.transport();
        if transport == Transport::Cnp {
            let (qps, mut io) = self.io();
            match qps.get_mut(bth.dest_qp) {
                Some(qp) => io.drive(qp, now, crate::dcqcn::on_cnp),
                None => crate::dcqcn::no_qp_for_cnp(&self.counters),
            }
            return;
        }
        let qpn = bth.dest_qp;
        if qpn == GSI_QPN {
            // CM MADs are the agent's; any other datagram to QP1 is for the host holding it.
            if let (Some(Ok(mad)), Some(ethernet), Some(src), Some(dst)) = (
                roce_wire::cm::parse_frame(&frame),
                frame.repr.ethernet,
                sender,
                receiver(&frame.repr.network),
            ) {
                self.cm_receive(mad, src, dst, ethernet.src);
                return;
            }
        }
        let c = &self.counters;
        let Some(qp) = self.qps.get(qpn) else {
            counters::bump(&c.rx_unknown_qp);
            debug!("no such QP: dropped");
            return;
        };
        let fits = matches!(
            (qp.qp_type, transport),
            (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
        );
        if !fits {
            counters::bump(&c.rx_wrong_transport);
            debug!(qp_type = %qp.qp_type, "opcode of another transport: dropped");
            return;
        }
        if let Some(path) = qp.path.filter(|_| qp.qp_type != QpType::Ud) {
            if !path.is_reverse_of(&frame.repr.network) {
                counters::bump(&c.rx_wrong_address);
                debug!(
                    packet = ?ip_addresses(&frame.repr.network),
                    connected = ?ip_addresses(&path.network),
                    "packet from or to an address the QP is not connected to: dropped"
                );
                return;
            }
        }
        let partition = if qpn == GSI_QPN {
            self.port.pkeys.check_any(bth.p_key)
        } else {
            pkey::check(bth.p_key, qp.p_key)
        };
        if let Err(reason) = partition {
            counters::bump(&c.rx_bad_pkey);
            debug!(
                p_key = format_args!("{:#06x}", bth.p_key),
                qp_p_key = format_args!("{:#06x}", qp.p_key),
                %reason,
                "P_Key does not match: dropped"
            );
            return;
        }
        let (qps, mut io) = self.io();
        let Some(qp) = qps.get_mut(qpn) else { return };
        if !bth.opcode.kind().is_response() {
            // The receives posted so far are there for the responder to take.
            qp.fetch_receives();
        }
        let ack_due = io.drive(qp, now, |qp, ctx| {
            crate::dcqcn::on_arrival(qp, ctx, &frame.repr);
            transport::on_packet(qp, ctx, &frame)
        });
        if ack_due && !self.acks_due.contains(&qpn) {
            self.acks_due.push(qpn);
        }
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

/// The IP address a frame is sent to (none for a bare GRH).
fn receiver(network: &NetworkRepr) -> Option<IpAddr> {
    match *network {
        NetworkRepr::Ipv4 { dst, .. } => Some(dst.into()),
        NetworkRepr::Ipv6 { dst, .. } => Some(dst.into()),
        NetworkRepr::Grh { .. } => None,
    }
}
