//! The transport engines, split as Linux rxe splits them: the [`requester`] turns send work
//! requests into packets, the [`responder`] executes incoming requests against host memory and
//! answers them, and the [`completer`] matches answers to requests and writes completions.
//! This module holds what they share: the per-QP path to the peer, the scatter/gather copies
//! between frames and host memory, and the way the engine drives them.
//!
//! The transport is sans-I/O, as quinn-proto and smoltcp are: its inputs are a received packet
//! ([`on_packet`]), the work requests the engine fetched into the QP's queues ([`poll`]) and the
//! time ([`Ctx::now`], [`on_timers`]); its outputs go to an [`Output`] — frames built straight
//! into the caller's buffers, completions as values, decisions as typed [`Event`]s — and the
//! next deadline is [`Qp::deadline`]. It touches no link, ring, clock or thread: the engine
//! owns those (and [`Tx`], the link side of sending), and the simulator in `nic/tests/sim`
//! runs the same transport on a simulated clock. A QP goes to the error state in one place,
//! [`Qp::enter_error`].

pub mod completer;
pub mod event;
pub mod psn;
pub mod recv_queue;
pub mod requester;
pub mod responder;
pub mod rules;
pub mod send_queue;
pub mod window;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use roce_hostmem::{Access, AccessError, MrTable, PdId};
use roce_wire::{
    bth, EthernetAddress, EthernetRepr, Extensions, Frame, FrameRepr, FrameTemplate, NetworkRepr,
};

use crate::buf::BufPool;
use crate::counters::{self, Counters};
use crate::link::Link;
use crate::qp::Qp;
use crate::types::{AddressVector, QpState, QpType, Sge, Wc};

pub use event::{ErrorCause, Event, EventKind};

/// How a QP's packets are addressed: Ethernet and IP headers to the peer, fixed once the QP is
/// connected (or per address handle, for UD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    pub ethernet: EthernetRepr,
    pub network: NetworkRepr,
}

impl Path {
    /// A path from (`smac`, `sip`) to (`dmac`, `dip`) with the traffic class, hop limit and flow
    /// label of `av`. `None` when the two addresses are of different families.
    pub fn new(
        smac: EthernetAddress,
        sip: IpAddr,
        dmac: EthernetAddress,
        dip: IpAddr,
        udp_src_port: u16,
        av: &AddressVector,
    ) -> Option<Path> {
        let network = match (sip, dip) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => NetworkRepr::Ipv4 {
                src,
                dst,
                dscp: av.traffic_class >> 2,
                ecn: av.traffic_class & 0x3,
                ident: 0,
                ttl: av.hop_limit,
                udp_src_port,
            },
            (IpAddr::V6(src), IpAddr::V6(dst)) => NetworkRepr::Ipv6 {
                src,
                dst,
                traffic_class: av.traffic_class,
                flow_label: av.flow_label,
                hop_limit: av.hop_limit,
                udp_src_port,
            },
            _ => return None,
        };
        Some(Path {
            ethernet: EthernetRepr {
                dst: dmac,
                src: smac,
                vlan: None,
            },
            network,
        })
    }

    /// Whether a packet with the network headers `incoming` travels this path backwards: from
    /// the peer's address to ours. A connected QP accepts packets only from the address it was
    /// connected to, as Soft-RoCE checks every packet against its QP (`check_addr`); the UDP
    /// source port, the MAC and the traffic class are not part of that.
    pub fn is_reverse_of(&self, incoming: &NetworkRepr) -> bool {
        match (ip_addresses(&self.network), ip_addresses(incoming)) {
            (Some((us, peer)), Some((from, to))) => from == peer && to == us,
            _ => false,
        }
    }

    /// The same path from another UDP source port.
    pub fn with_udp_src_port(mut self, port: u16) -> Path {
        match &mut self.network {
            NetworkRepr::Ipv4 { udp_src_port, .. } | NetworkRepr::Ipv6 { udp_src_port, .. } => {
                *udp_src_port = port
            }
            NetworkRepr::Grh { .. } => {}
        }
        self
    }

    /// The frame of one packet on this path.
    pub fn frame(&self, bth: bth::Repr, ext: Extensions, payload_len: usize) -> FrameRepr {
        FrameRepr {
            ethernet: Some(self.ethernet),
            network: self.network,
            bth,
            ext,
            payload_len,
        }
    }
}

/// The source and destination IP addresses of a RoCEv2 packet (RoCEv1 has none).
pub fn ip_addresses(network: &NetworkRepr) -> Option<(IpAddr, IpAddr)> {
    match *network {
        NetworkRepr::Ipv4 { src, dst, .. } => Some((src.into(), dst.into())),
        NetworkRepr::Ipv6 { src, dst, .. } => Some((src.into(), dst.into())),
        NetworkRepr::Grh { .. } => None,
    }
}

/// The UDP source port for a QP pair, as Linux derives it: from the flow label, or when that is
/// zero from the two QP numbers, folded into 0xC000..=0xFFFF so that ECMP spreads flows.
pub fn udp_src_port(flow_label: u32, local_qpn: u32, remote_qpn: u32) -> u16 {
    let fl = if flow_label != 0 {
        flow_label
    } else {
        let mut v = u64::from(local_qpn) * u64::from(remote_qpn);
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xf_ffff) as u32
    };
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low as u16) | 0xc000
}

/// Frame templates a [`Tx`] keeps, one per slot, the slot chosen by the destination QP: a
/// connected QP's packets all go to one peer QP, so each finds its path's headers ready.
const TEMPLATE_SLOTS: usize = 64;

/// The sending side of the engine: the link, the buffer pool, the IP identification counter
/// and the frame templates of the paths it sends on.
pub struct Tx {
    link: Box<dyn Link>,
    pool: Arc<BufPool>,
    counters: Arc<Counters>,
    ip_ident: u16,
    /// The headers of recent paths, built once (see [`FrameTemplate`]): a frame on a path
    /// whose template is here costs a copy and a few patched fields for its Ethernet, IP and
    /// UDP headers instead of building each field.
    templates: Box<[Option<FrameTemplate>]>,
}

impl Tx {
    pub fn new(link: Box<dyn Link>, pool: Arc<BufPool>, counters: Arc<Counters>) -> Tx {
        Tx {
            link,
            pool,
            counters,
            ip_ident: 0,
            templates: vec![None; TEMPLATE_SLOTS].into_boxed_slice(),
        }
    }

    /// Has the link put on the wire what it batched ([`Link::flush_sends`]); what it lost
    /// doing so is counted as dropped.
    pub fn flush_sends(&mut self) {
        let lost = self.link.flush_sends();
        if lost > 0 {
            counters::add(&self.counters.tx_dropped, lost);
            tracing::debug!(lost, "the link could not send its whole batch");
        }
    }

    pub fn link(&mut self) -> &mut dyn Link {
        &mut *self.link
    }

    /// Whether new data packets may be generated now (the link has room).
    pub fn can_send(&self) -> bool {
        self.link.can_send()
    }

    pub fn pool(&self) -> &Arc<BufPool> {
        &self.pool
    }

    /// Builds a frame and sends it. `fill` places the payload; if it fails the frame is not
    /// sent and its error returned.
    pub fn send<E>(
        &mut self,
        repr: &FrameRepr,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let ident = self.ip_ident;
        if let NetworkRepr::Ipv4 { .. } = repr.network {
            self.ip_ident = self.ip_ident.wrapping_add(1);
        }
        let slot = &mut self.templates[repr.bth.dest_qp as usize % TEMPLATE_SLOTS];
        let template = match slot {
            Some(template) if template.fits(repr) => template,
            _ => slot.insert(FrameTemplate::new(repr.ethernet, repr.network)),
        };
        let mut buf = self.pool.take();
        let mut outcome = Ok(());
        let emitted = template.emit_with(
            &repr.bth,
            &repr.ext,
            repr.payload_len,
            ident,
            buf.space(),
            |payload| outcome = fill(payload),
        );
        match emitted {
            Ok(len) => buf.set_len(len),
            Err(e) => {
                // Our own repr was inconsistent: a bug, never the peer's doing. Log and drop.
                tracing::error!(error = %e, "could not build a frame");
                return Ok(());
            }
        }
        outcome?;
        self.transmit(buf);
        Ok(())
    }

    /// Puts a finished frame on the link.
    pub fn transmit(&mut self, frame: crate::buf::FrameBuf) {
        let len = frame.len() as u64;
        match self.link.send(frame) {
            Ok(()) => {
                counters::bump(&self.counters.tx_frames);
                counters::add(&self.counters.tx_bytes, len);
            }
            Err(e) => {
                counters::bump(&self.counters.tx_dropped);
                tracing::debug!(error = %e, "frame dropped by the link");
            }
        }
    }
}

/// Where the transport puts what it decides. The transport touches no link, ring, clock or
/// thread: the engine implements this with its buffer pool, link and completion queues, the
/// simulator with queues of its own.
pub trait Output {
    /// Whether the link has room for another packet now.
    fn can_send(&self) -> bool;

    /// Builds the frame `repr` in a buffer of the output's own and sends it; `fill` writes the
    /// payload straight into the frame (no copy in between). If `fill` fails the frame is not
    /// sent and its error returned.
    fn send(&mut self, repr: &FrameRepr, fill: &mut Fill<'_>) -> Result<(), AccessError>;

    /// A completion for completion queue `cq`.
    fn complete(&mut self, cq: u32, wc: &Wc);

    /// A decision taken.
    fn event(&mut self, event: &Event<'_>);

    /// What was sent so far should leave now rather than with the rest of the pass's frames
    /// (a link that batches its sends holds them until the engine's pass ends): the coalesced
    /// ACK a responder sends in the middle of a receive batch, which the requester waits for.
    fn expedite(&mut self) {}
}

/// Writes a frame's payload (from host memory, or nothing).
pub type Fill<'a> = dyn FnMut(&mut [u8]) -> Result<(), AccessError> + 'a;

/// Everything the transport functions need besides the QP they work on: the host memory they
/// read and write, the address handles, the counters, where their outputs go, and the time.
pub struct Ctx<'a> {
    pub mrs: &'a MrTable,
    /// Address handles (UD destinations) by number.
    pub ahs: &'a HashMap<u32, Path>,
    pub out: &'a mut dyn Output,
    pub counters: &'a Counters,
    pub now: Instant,
    /// The most packets the QP may have unacknowledged now, whatever its window: what its
    /// engine's budget for packets in flight over all its QPs leaves it (`u32::MAX` where
    /// nothing else limits it).
    pub send_room: u32,
}

impl Ctx<'_> {
    /// Reports a decision.
    pub fn event(&mut self, event: Event<'_>) {
        self.out.event(&event);
    }

    /// Sends a frame that needs no payload from host memory.
    pub fn send_simple(&mut self, repr: &FrameRepr) {
        let _ = self.out.send(repr, &mut |_| Ok(()));
    }
}

/// Hands a packet addressed to `qp` to its transport: answers (ACKs, NAKs, READ responses,
/// atomic ACKs) to the completer, requests to the responder. True when the QP owes an ACK for
/// it: the caller sends it with [`responder::flush_ack`] after its batch of packets, so that a
/// batch is acknowledged once (ACK coalescing).
pub fn on_packet(qp: &mut Qp, ctx: &mut Ctx<'_>, frame: &Frame<'_>) -> bool {
    let bth = &frame.repr.bth;
    if bth.opcode.kind().is_response() {
        completer::on_response(qp, ctx, bth, &frame.repr.ext, frame.payload());
        false
    } else {
        responder::on_request(qp, ctx, frame);
        qp.recv.has_ack_pending()
    }
}

/// The QP's own work once its posted requests are fetched: transmit (at most `budget`
/// packets), watch for a quiet line, complete a request that failed before it was sent, and
/// send READ responses. Returns whether anything happened.
pub fn poll(qp: &mut Qp, ctx: &mut Ctx<'_>, budget: usize) -> bool {
    let mut busy = false;
    if qp.state == QpState::Rts {
        busy |= requester::run(qp, ctx, budget) > 0;
        // Unacknowledged packets: watch for the line going quiet.
        let send = &qp.send;
        if qp.state == QpState::Rts
            && qp.qp_type == QpType::Rc
            && send.una != send.high
            && send.probe_at.is_none()
            && !send.probe_spent
        {
            qp.send.probe_at =
                requester::probe_interval(send, qp.attrs.timeout, qp.rto_low).map(|i| ctx.now + i);
        }
    }
    // A request that failed before anything was sent completes once it is the head.
    if matches!(qp.state, QpState::Rts | QpState::Sqd)
        && qp.qp_type == QpType::Rc
        && !qp.sq.is_empty()
        && qp.sq.head == qp.sq.next
    {
        if let Some(status) = qp.sq.entry(qp.sq.head).failed {
            completer::fail_head(qp, ctx, status);
            busy = true;
        }
    }
    if qp.recv.has_replies() {
        busy |= responder::send_replies(qp, ctx, responder::REPLY_BURST) > 0;
    }
    busy
}

/// Runs the QP's timers that are due at `ctx.now`: the retransmission timer, the RNR wait and
/// the tail probe.
pub fn on_timers(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    if qp.deadline().is_some_and(|t| t <= ctx.now) {
        completer::on_timers(qp, ctx);
    }
}

/// Copies `dst.len()` bytes of a message, starting `offset` bytes in, out of the local memory
/// that `sges` describe (the requester filling a frame).
pub fn gather(
    mrs: &MrTable,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    dst: &mut [u8],
) -> Result<(), AccessError> {
    walk(sges, offset, dst.len(), |sge, skip, at, n| {
        let addr = sge.addr.checked_add(skip).ok_or(AccessError::OutOfBounds)?;
        let place = mrs.resolve_local(sge.lkey, pd, addr, n as u64, Access::empty())?;
        place.read_into(0, &mut dst[at..at + n])
    })
}

/// Copies `src` into the local memory that `sges` describe, starting `offset` bytes into the
/// message (a received SEND, or READ response data).
pub fn scatter(
    mrs: &MrTable,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    src: &[u8],
) -> Result<(), AccessError> {
    walk(sges, offset, src.len(), |sge, skip, at, n| {
        let addr = sge.addr.checked_add(skip).ok_or(AccessError::OutOfBounds)?;
        let place = mrs.resolve_local(sge.lkey, pd, addr, n as u64, Access::LOCAL_WRITE)?;
        place.write(0, &src[at..at + n])
    })
}

/// Visits the pieces of `len` bytes starting `offset` bytes into the concatenation of `sges`:
/// `(sge, bytes to skip in it, position in the data, piece length)`.
fn walk(
    sges: &[Sge],
    mut offset: u64,
    len: usize,
    mut piece: impl FnMut(&Sge, u64, usize, usize) -> Result<(), AccessError>,
) -> Result<(), AccessError> {
    let mut at = 0;
    for sge in sges {
        if at == len {
            break;
        }
        let sge_len = u64::from(sge.length);
        if offset >= sge_len {
            offset -= sge_len;
            continue;
        }
        let n = ((sge_len - offset) as usize).min(len - at);
        piece(sge, offset, at, n)?;
        at += n;
        offset = 0;
    }
    if at < len {
        return Err(AccessError::OutOfBounds);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_source_port_matches_linux() {
        // rxe QP 0x11 talking to QP 0x123 sent from port 54099 in the shared Soft-RoCE capture.
        assert_eq!(udp_src_port(0, 0x11, 0x123), 54099);
        assert!(udp_src_port(0, 0xffffff, 0xfffffe) >= 0xc000);
    }

    #[test]
    fn walk_splits_across_entries() {
        let sges = [
            Sge {
                addr: 0,
                length: 3,
                lkey: 1,
            },
            Sge {
                addr: 100,
                length: 5,
                lkey: 2,
            },
        ];
        let mut pieces = Vec::new();
        walk(&sges, 2, 4, |sge, skip, at, n| {
            pieces.push((sge.lkey, skip, at, n));
            Ok(())
        })
        .unwrap();
        assert_eq!(pieces, [(1, 2, 0, 1), (2, 0, 1, 3)]);
        assert_eq!(
            walk(&sges, 6, 4, |_, _, _, _| Ok(())),
            Err(AccessError::OutOfBounds)
        );
    }

    #[test]
    fn an_address_at_the_top_of_va_space_is_refused_not_a_panic() {
        let mrs = MrTable::new();
        let pd = MrTable::new().alloc_pd();
        let sges = [Sge {
            addr: u64::MAX - 1,
            length: 16,
            lkey: 1,
        }];
        let mut buf = [0u8; 4];
        assert_eq!(
            gather(&mrs, pd, &sges, 8, &mut buf),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            scatter(&mrs, pd, &sges, 8, &buf),
            Err(AccessError::OutOfBounds)
        );
    }
}
