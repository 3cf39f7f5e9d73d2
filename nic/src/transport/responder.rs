//! The responder: executes the requests a peer sends. It checks each packet's PSN (expected,
//! duplicate, ahead), the opcode sequence, the QP's access rights and the lengths; resolves
//! R_Keys through the memory tables and writes or reads the target's mapped memory directly —
//! no host code runs; places SENDs into posted receives; and answers: coalesced ACKs, READ
//! responses segmented by the MTU, atomic ACKs, and the NAK the IBTA prescribes for each error
//! (sequence error once per gap, invalid request, remote access error, remote operational error,
//! RNR when a SEND finds no receive posted). Duplicates are re-acknowledged, never re-executed:
//! READs are answered again from memory and atomics from their saved result.

use std::collections::VecDeque;

use roce_hostmem::{Access, AccessError};
use roce_wire::aeth::{self, NakCode, Syndrome};
use roce_wire::{atomic_ack_eth, bth, Extensions, Frame, Kind, Opcode, Transport};
use tracing::{debug, info, trace, trace_span};

use super::rules::{self, Underway};
use super::{psn, scatter, Ctx};
use crate::counters;
use crate::qp::Qp;
use crate::verbs::types::{wc_flags, QpState, QpType, Wc, WcOpcode, WcStatus};
use crate::wqe::RecvWqe;

pub use super::rules::MAX_DMA_LEN;

/// READ response packets sent per reply before the engine turns to other work.
pub const REPLY_BURST: usize = 32;

/// A message being received across several packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InMessage {
    Send,
    Write {
        rkey: u32,
        va: u64,
        len: u64,
        offset: u64,
    },
}

/// What a responder remembers of a READ or atomic, to answer its duplicates (the responder
/// resources of max_dest_rd_atomic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Read {
        first_psn: u32,
        npkts: u32,
        va: u64,
        rkey: u32,
        len: u64,
    },
    Atomic {
        psn: u32,
        original: u64,
    },
}

/// READ response packets still to send.
#[derive(Debug, Clone, Copy)]
struct ReadReply {
    first_psn: u32,
    va: u64,
    rkey: u32,
    len: u64,
    /// Next byte to send.
    offset: u64,
    /// Not READ data but an answer held behind the READ responses before it, since answers go
    /// out in PSN order (IBTA 9.5).
    held: Option<Held>,
}

/// An answer waiting for the READ responses before it.
#[derive(Debug, Clone, Copy)]
enum Held {
    /// An atomic's ACK, with the original value it returns.
    AtomicAck(u64),
    /// A sequence or RNR NAK.
    Nak(Syndrome),
}

/// Receive-side state of a QP.
#[derive(Debug, Default)]
pub struct RecvState {
    /// Expected PSN.
    pub epsn: u32,
    /// Messages completed (24 bits).
    pub msn: u32,
    /// A sequence or RNR NAK was sent; later packets ahead of `epsn` are dropped silently until
    /// the requester goes back.
    nak_sent: bool,
    in_message: Option<InMessage>,
    /// The receive being filled (valid while `recv_active`), and how far.
    recv: RecvWqe,
    recv_active: bool,
    recv_offset: u64,
    resources: VecDeque<Resource>,
    replies: VecDeque<ReadReply>,
    /// Highest PSN owed an ACK (sent once per batch of received frames).
    ack_pending: Option<u32>,
    /// UC: a packet was lost; drop everything until the next message starts.
    uc_dropping: bool,
    slot: Vec<u8>,
}

impl RecvState {
    pub fn new(epsn: u32, recv_slot: usize, cap: &crate::verbs::types::QpCap) -> RecvState {
        RecvState {
            epsn,
            recv: RecvWqe::with_capacity(cap),
            slot: vec![0; recv_slot],
            ..RecvState::default()
        }
    }

    /// Whether READ responses are waiting to be sent.
    pub fn has_replies(&self) -> bool {
        !self.replies.is_empty()
    }

    pub fn replies_pending(&self) -> u32 {
        self.replies.len() as u32
    }

    pub fn receive_in_progress(&self) -> bool {
        self.in_message == Some(InMessage::Send)
    }

    pub fn has_ack_pending(&self) -> bool {
        self.ack_pending.is_some()
    }
}

/// How a request is refused.
enum Refuse {
    Nak(NakCode),
    /// RNR NAK: no receive posted.
    Rnr,
}

/// Handles one request packet addressed to this QP.
pub fn on_request(qp: &mut Qp, ctx: &mut Ctx<'_>, frame: &Frame<'_>) {
    let bth = &frame.repr.bth;
    let span = trace_span!("responder", qpn = qp.qpn, psn = bth.psn, opcode = %bth.opcode);
    let _enter = span.enter();
    if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
        counters::bump(&ctx.counters.rx_bad_state);
        trace!(state = %qp.state, "QP does not accept requests in this state");
        return;
    }
    if qp.qp_type == QpType::Ud {
        ud_receive(qp, ctx, frame);
        return;
    }
    let p = bth.psn;
    let kind = bth.opcode.kind();
    if qp.qp_type == QpType::Rc {
        let d = psn::diff(p, qp.recv.epsn);
        if d > 0 {
            counters::bump(&ctx.counters.rx_out_of_sequence);
            if !qp.recv.nak_sent {
                qp.recv.nak_sent = true;
                debug!(
                    expected = qp.recv.epsn,
                    "packet ahead of the expected PSN: sequence NAK"
                );
                let epsn = qp.recv.epsn;
                counters::bump(&ctx.counters.naks_sent_psn_sequence);
                answer_nak(qp, ctx, epsn, Syndrome::Nak(NakCode::PSN_SEQUENCE_ERROR));
            }
            return;
        }
        if d < 0 {
            duplicate(qp, ctx, bth, &frame.repr.ext);
            return;
        }
        trace!("PSN in sequence");
    } else if uc_resync(qp, ctx, p, kind) {
        return;
    }

    match execute(qp, ctx, bth, &frame.repr.ext, frame.payload()) {
        Ok(consumed) => {
            qp.recv.epsn = psn::add(p, consumed);
            qp.recv.nak_sent = false;
            if qp.qp_type == QpType::Rc
                && bth.ack_req
                && !kind.is_atomic()
                && kind != Kind::ReadRequest
            {
                qp.recv.ack_pending = Some(p);
            }
        }
        Err(refusal) => refuse(qp, ctx, p, refusal),
    }
}

/// UC: a PSN other than the expected one means packets were lost. The message in progress is
/// dropped whole, and nothing is accepted until the next message starts. True when the packet
/// is to be dropped.
fn uc_resync(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, kind: Kind) -> bool {
    let start =
        roce_wire::Opcode::new(Transport::Uc, kind).is_some_and(|o| o.position().is_start());
    if p != qp.recv.epsn {
        if qp.recv.in_message.is_some() {
            counters::bump(&ctx.counters.uc_messages_dropped);
            debug!(expected = qp.recv.epsn, "UC packet lost: message dropped");
        }
        abort_message(qp);
        qp.recv.uc_dropping = !start;
    } else if qp.recv.uc_dropping && start {
        qp.recv.uc_dropping = false;
    }
    if qp.recv.uc_dropping {
        qp.recv.epsn = psn::add(p, 1);
        return true;
    }
    false
}

/// Forgets the message in progress; a receive it was filling is reused for the next message.
fn abort_message(qp: &mut Qp) {
    qp.recv.in_message = None;
    qp.recv.recv_offset = 0;
}

fn refuse(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, refusal: Refuse) {
    match (qp.qp_type, refusal) {
        (QpType::Rc, Refuse::Nak(code)) => {
            send_nak(qp, ctx, p, code);
            info!(qpn = qp.qpn, psn = p, nak = %code, "request refused: QP to error");
            qp.enter_error(ctx);
        }
        (QpType::Rc, Refuse::Rnr) => {
            counters::bump(&ctx.counters.rnr_naks_sent);
            qp.recv.nak_sent = true;
            let timer = qp.attrs.min_rnr_timer;
            info!(
                qpn = qp.qpn,
                psn = p,
                "SEND with no receive posted: RNR NAK"
            );
            answer_nak(qp, ctx, p, Syndrome::RnrNak { timer });
        }
        (_, _) => {
            // UC: no answers; the message is lost.
            counters::bump(&ctx.counters.uc_messages_dropped);
            abort_message(qp);
            qp.recv.uc_dropping = true;
            qp.recv.epsn = psn::add(p, 1);
        }
    }
}

/// Executes an in-sequence request. Returns the PSNs it consumed.
fn execute(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
    payload: &[u8],
) -> Result<u32, Refuse> {
    let opcode = bth.opcode;
    let kind = opcode.kind();
    let position = opcode.position();
    let underway = match qp.recv.in_message {
        Some(InMessage::Send) => Underway::Send,
        Some(InMessage::Write { .. }) => Underway::Write,
        None => Underway::Nothing,
    };
    if !rules::sequence_ok(underway, kind, position) {
        debug!("opcode out of sequence");
        return Err(Refuse::Nak(NakCode::INVALID_REQUEST));
    }
    let mtu = qp.attrs.path_mtu.bytes();
    if !rules::payload_fits(position, payload.len(), mtu) {
        debug!(
            len = payload.len(),
            mtu, "payload length does not fit the path MTU"
        );
        return Err(Refuse::Nak(NakCode::INVALID_REQUEST));
    }
    let access = qp.attrs.access;
    let needs = if kind.is_write() {
        Access::REMOTE_WRITE
    } else if kind == Kind::ReadRequest {
        Access::REMOTE_READ
    } else if kind.is_atomic() {
        Access::REMOTE_ATOMIC
    } else {
        Access::empty()
    };
    if !access.contains(needs) {
        debug!(%needs, qp_access = %access, "the QP does not allow this operation");
        return Err(Refuse::Nak(NakCode::INVALID_REQUEST));
    }
    // IBTA C9-94: one RDMA request moves at most 2^31 bytes. A longer one is malformed whatever
    // the memory tables say, so it is refused before any key is looked at.
    if let Some(reth) = ext.reth.filter(|r| r.dma_len > MAX_DMA_LEN) {
        debug!(dma_len = reth.dma_len, "RETH DMA length above 2^31");
        return Err(Refuse::Nak(NakCode::INVALID_REQUEST));
    }
    match kind {
        k if k.is_send() => receive_send(qp, ctx, bth, ext, payload).map(|()| 1),
        k if k.is_write() => receive_write(qp, ctx, bth, ext, payload).map(|()| 1),
        Kind::ReadRequest => receive_read(qp, ctx, bth, ext),
        Kind::CompareSwap | Kind::FetchAdd => receive_atomic(qp, ctx, bth, ext).map(|()| 1),
        _ => {
            debug!("operation not supported by this responder");
            Err(Refuse::Nak(NakCode::INVALID_REQUEST))
        }
    }
}

/// Takes the next posted receive, if there is one.
fn take_receive(qp: &mut Qp, ctx: &mut Ctx<'_>) -> bool {
    loop {
        if !qp.rq.next(&mut qp.recv.slot) {
            return false;
        }
        qp.rq.release(1);
        match qp.recv.recv.decode(&qp.recv.slot, &qp.cap) {
            Ok(()) => {
                qp.recv.recv_active = true;
                qp.recv.recv_offset = 0;
                return true;
            }
            Err(e) => {
                debug!(error = %e, "malformed receive request");
                complete_recv(qp, ctx, WcStatus::LocLenErr, WcOpcode::Recv, 0, 0, 0);
            }
        }
    }
}

fn receive_send(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
    payload: &[u8],
) -> Result<(), Refuse> {
    let position = bth.opcode.position();
    if position.is_start() && !qp.recv.recv_active && !take_receive(qp, ctx) {
        if qp.qp_type == QpType::Uc {
            counters::bump(&ctx.counters.rx_no_receive);
        }
        return Err(Refuse::Rnr);
    }
    let offset = qp.recv.recv_offset;
    if offset + payload.len() as u64 > qp.recv.recv.capacity() {
        debug!(
            needed = offset + payload.len() as u64,
            posted = qp.recv.recv.capacity(),
            "SEND longer than the posted receive"
        );
        complete_recv(qp, ctx, WcStatus::LocLenErr, WcOpcode::Recv, 0, 0, 0);
        return Err(Refuse::Nak(NakCode::INVALID_REQUEST));
    }
    if let Err(e) = scatter(ctx.mrs, qp.pd, &qp.recv.recv.sges, offset, payload) {
        debug!(error = %e, "receive buffer not accessible");
        complete_recv(qp, ctx, WcStatus::LocProtErr, WcOpcode::Recv, 0, 0, 0);
        return Err(Refuse::Nak(NakCode::REMOTE_OPERATIONAL_ERROR));
    }
    counters::add(&ctx.counters.dma_write_bytes, payload.len() as u64);
    trace!(
        offset,
        len = payload.len(),
        "SEND data placed in the posted receive"
    );
    qp.recv.recv_offset += payload.len() as u64;
    if !position.is_end() {
        qp.recv.in_message = Some(InMessage::Send);
        return Ok(());
    }
    qp.recv.in_message = None;
    if let Some(inv) = ext.ieth {
        // A peer may invalidate only memory made to be invalidated: memory windows and
        // fast-registration MRs (Soft-RoCE too refuses any other MR). This NIC has neither —
        // every registration is a plain one, which its owner keeps using — so a SEND with
        // Invalidate is refused whatever R_Key it names, and no key changes.
        debug!(
            rkey = format_args!("{:#x}", inv.r_key),
            "SEND with Invalidate: no memory here may be invalidated by a peer"
        );
        complete_recv(qp, ctx, WcStatus::RemInvReqErr, WcOpcode::Recv, 0, 0, 0);
        return Err(Refuse::Nak(NakCode::INVALID_REQUEST));
    }
    let (imm, flags) = match ext.immdt {
        Some(i) => (i.imm, wc_flags::WITH_IMM),
        None => (0, 0),
    };
    let len = qp.recv.recv_offset as u32;
    complete_recv(qp, ctx, WcStatus::Success, WcOpcode::Recv, len, imm, flags);
    qp.recv.msn = psn::add(qp.recv.msn, 1);
    Ok(())
}

fn receive_write(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
    payload: &[u8],
) -> Result<(), Refuse> {
    let position = bth.opcode.position();
    if position.is_start() {
        let reth = ext.reth.unwrap_or_default();
        let len = u64::from(reth.dma_len);
        // Check the whole range once, before any byte lands.
        ctx.mrs
            .resolve_remote(reth.r_key, qp.pd, reth.va, len, Access::REMOTE_WRITE)
            .map_err(access_refusal)?;
        trace!(
            rkey = format_args!("{:#x}", reth.r_key),
            va = format_args!("{:#x}", reth.va),
            len,
            "rkey checked: WRITE allowed"
        );
        qp.recv.in_message = Some(InMessage::Write {
            rkey: reth.r_key,
            va: reth.va,
            len,
            offset: 0,
        });
    }
    let Some(InMessage::Write {
        rkey,
        va,
        len,
        offset,
    }) = qp.recv.in_message
    else {
        return Err(Refuse::Nak(NakCode::INVALID_REQUEST));
    };
    let end = offset + payload.len() as u64;
    if !rules::write_fits(offset, payload.len() as u64, len, position.is_end()) {
        debug!(len, end, "WRITE data does not match its DMA length");
        return Err(Refuse::Nak(NakCode::INVALID_REQUEST));
    }
    let with_imm = ext.immdt.is_some();
    if with_imm && !qp.recv.recv_active && !take_receive(qp, ctx) {
        return Err(Refuse::Rnr);
    }
    if !payload.is_empty() {
        let place = ctx
            .mrs
            .resolve_remote(
                rkey,
                qp.pd,
                va + offset,
                payload.len() as u64,
                Access::REMOTE_WRITE,
            )
            .map_err(access_refusal)?;
        place.write(0, payload).map_err(access_refusal)?;
        counters::add(&ctx.counters.dma_write_bytes, payload.len() as u64);
        trace!(
            region = place.region_name().unwrap_or("-"),
            region_offset = place.region_offset(),
            len = payload.len(),
            "DMA: WRITE data placed in host memory"
        );
    }
    if !position.is_end() {
        qp.recv.in_message = Some(InMessage::Write {
            rkey,
            va,
            len,
            offset: end,
        });
        return Ok(());
    }
    qp.recv.in_message = None;
    if let Some(i) = ext.immdt {
        complete_recv(
            qp,
            ctx,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            len as u32,
            i.imm,
            wc_flags::WITH_IMM,
        );
    }
    qp.recv.msn = psn::add(qp.recv.msn, 1);
    Ok(())
}

fn receive_read(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
) -> Result<u32, Refuse> {
    let reth = ext.reth.unwrap_or_default();
    let len = u64::from(reth.dma_len);
    ctx.mrs
        .resolve_remote(reth.r_key, qp.pd, reth.va, len, Access::REMOTE_READ)
        .map_err(access_refusal)?;
    let npkts = rules::packets(len, qp.attrs.path_mtu.bytes());
    trace!(
        rkey = format_args!("{:#x}", reth.r_key),
        va = format_args!("{:#x}", reth.va),
        len,
        npkts,
        "rkey checked: READ allowed"
    );
    remember(
        qp,
        Resource::Read {
            first_psn: bth.psn,
            npkts,
            va: reth.va,
            rkey: reth.r_key,
            len,
        },
    );
    qp.recv.msn = psn::add(qp.recv.msn, 1);
    qp.recv.replies.push_back(ReadReply {
        first_psn: bth.psn,
        va: reth.va,
        rkey: reth.r_key,
        len,
        offset: 0,
        held: None,
    });
    Ok(npkts)
}

fn receive_atomic(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
) -> Result<(), Refuse> {
    let a = ext.atomic_eth.unwrap_or_default();
    let place = ctx
        .mrs
        .resolve_atomic(a.r_key, qp.pd, a.va)
        .map_err(access_refusal)?;
    let original = if bth.opcode.kind() == Kind::CompareSwap {
        place.compare_and_swap(a.compare, a.swap_add)
    } else {
        place.fetch_and_add(a.swap_add)
    };
    counters::bump(&ctx.counters.atomics_executed);
    trace!(
        region = place.region_name().unwrap_or("-"),
        region_offset = place.region_offset(),
        original,
        "atomic executed on host memory"
    );
    remember(
        qp,
        Resource::Atomic {
            psn: bth.psn,
            original,
        },
    );
    qp.recv.msn = psn::add(qp.recv.msn, 1);
    answer_atomic(qp, ctx, bth.psn, original);
    Ok(())
}

/// Keeps a READ or atomic for duplicate detection, forgetting the oldest beyond
/// max_dest_rd_atomic.
fn remember(qp: &mut Qp, resource: Resource) {
    let limit = usize::from(qp.attrs.max_dest_rd_atomic.max(1));
    while qp.recv.resources.len() >= limit {
        qp.recv.resources.pop_front();
    }
    qp.recv.resources.push_back(resource);
}

fn access_refusal(e: AccessError) -> Refuse {
    debug!(error = %e, "memory access refused");
    if e.is_invalid_request() {
        Refuse::Nak(NakCode::INVALID_REQUEST)
    } else {
        Refuse::Nak(NakCode::REMOTE_ACCESS_ERROR)
    }
}

/// A request PSN before the expected one: the requester did not see our answer.
fn duplicate(qp: &mut Qp, ctx: &mut Ctx<'_>, bth: &bth::Repr, ext: &Extensions) {
    counters::bump(&ctx.counters.rx_duplicates);
    let p = bth.psn;
    let kind = bth.opcode.kind();
    trace!(expected = qp.recv.epsn, "duplicate request");
    match kind {
        Kind::ReadRequest => {
            let reth = ext.reth.unwrap_or_default();
            let mtu = u64::from(qp.attrs.path_mtu.bytes());
            let found = qp.recv.resources.iter().rev().find_map(|r| match *r {
                Resource::Read {
                    first_psn,
                    npkts,
                    va,
                    rkey,
                    len,
                } => {
                    let d = psn::diff(p, first_psn);
                    let within = d >= 0 && (d as u32) < npkts;
                    let offset = d.max(0) as u64 * mtu;
                    (within
                        && reth.r_key == rkey
                        && reth.va == va.wrapping_add(offset)
                        && u64::from(reth.dma_len) == len - offset)
                        .then_some(ReadReply {
                            first_psn,
                            va,
                            rkey,
                            len,
                            offset,
                            held: None,
                        })
                }
                Resource::Atomic { .. } => None,
            });
            match found {
                Some(reply) => {
                    // Answer again from memory, replacing a reply to the same READ in progress.
                    qp.recv.replies.retain(|r| r.first_psn != reply.first_psn);
                    qp.recv.replies.push_back(reply);
                }
                None => trace!("duplicate READ outside any remembered READ: dropped"),
            }
        }
        Kind::CompareSwap | Kind::FetchAdd => {
            let saved = qp.recv.resources.iter().find_map(|r| match *r {
                Resource::Atomic { psn, original } if psn == p => Some(original),
                _ => None,
            });
            match saved {
                Some(original) => {
                    counters::bump(&ctx.counters.atomic_replays);
                    debug!(original, "duplicate atomic answered from the saved result");
                    answer_atomic(qp, ctx, p, original);
                }
                None => trace!("duplicate atomic not remembered: dropped"),
            }
        }
        _ => {
            // SEND and WRITE: acknowledge again up to the last PSN executed.
            let last = psn::add(qp.recv.epsn, psn::MASK);
            qp.recv.ack_pending = Some(last);
        }
    }
}

/// Sends the ACK owed for the packets of the last batch, if any. Answers go out in PSN order:
/// an ACK for a PSN after a READ whose responses are still queued would tell the requester
/// that they were lost (and make it send the READ again), so it waits for them.
pub fn flush_ack(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    let Some(p) = qp.recv.ack_pending else {
        return;
    };
    if qp.recv.replies.iter().any(|r| psn::before(r.first_psn, p)) {
        trace!(
            psn = p,
            "ACK held until the READ responses before it are sent"
        );
        return;
    }
    qp.recv.ack_pending = None;
    send_ack(qp, ctx, p, Syndrome::ack());
}

fn send_nak(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, code: NakCode) {
    let c = ctx.counters;
    counters::bump(match code {
        NakCode::PSN_SEQUENCE_ERROR => &c.naks_sent_psn_sequence,
        NakCode::INVALID_REQUEST => &c.naks_sent_invalid_request,
        NakCode::REMOTE_ACCESS_ERROR => &c.naks_sent_remote_access,
        _ => &c.naks_sent_remote_operational,
    });
    send_ack(qp, ctx, p, Syndrome::Nak(code));
}

/// Sends an ACKNOWLEDGE packet (ACK, NAK or RNR NAK) for PSN `p`.
fn send_ack(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, syndrome: Syndrome) {
    answer(qp, ctx, p, syndrome, None);
    if matches!(syndrome, Syndrome::Ack { .. }) {
        counters::bump(&ctx.counters.acks_sent);
    }
    trace!(psn = p, %syndrome, "ACK sent");
}

/// Sends an atomic's ACK now, or holds it behind the READ responses still to send.
fn answer_atomic(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, original: u64) {
    if !hold(qp, p, Held::AtomicAck(original)) {
        send_atomic_ack(qp, ctx, p, original);
    }
}

/// Sends a sequence or RNR NAK now, or holds it behind the READ responses still to send: a NAK
/// ahead of them would tell the requester they were lost.
fn answer_nak(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, syndrome: Syndrome) {
    if !hold(qp, p, Held::Nak(syndrome)) {
        send_ack(qp, ctx, p, syndrome);
    }
}

/// Queues an answer for PSN `p` behind the READ responses still to send; false when none are.
fn hold(qp: &mut Qp, p: u32, held: Held) -> bool {
    if qp.recv.replies.is_empty() {
        return false;
    }
    trace!(
        psn = p,
        "answer held until the READ responses before it are sent"
    );
    qp.recv.replies.push_back(ReadReply {
        first_psn: p,
        va: 0,
        rkey: 0,
        len: 0,
        offset: 0,
        held: Some(held),
    });
    true
}

fn send_atomic_ack(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, original: u64) {
    answer(qp, ctx, p, Syndrome::ack(), Some(original));
    trace!(psn = p, original, "atomic ACK sent");
}

/// Sends an ACKNOWLEDGE, or with `original` an ATOMIC ACKNOWLEDGE, for PSN `p`. An answer for
/// `p` covers the ACK owed for anything before it.
fn answer(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, syndrome: Syndrome, original: Option<u64>) {
    if qp.recv.ack_pending.is_some_and(|a| !psn::before(p, a)) {
        qp.recv.ack_pending = None;
    }
    let Some(path) = qp.path else { return };
    let kind = match original {
        Some(_) => Kind::AtomicAcknowledge,
        None => Kind::Acknowledge,
    };
    let Some(opcode) = Opcode::new(Transport::Rc, kind) else {
        return;
    };
    let ext = Extensions {
        aeth: Some(aeth::Repr {
            syndrome,
            msn: qp.recv.msn,
        }),
        atomic_ack_eth: original.map(|original| atomic_ack_eth::Repr { original }),
        ..Extensions::default()
    };
    let repr = path.frame(answer_bth(qp, opcode, p), ext, 0);
    ctx.tx.send_simple(&repr, &[]);
}

/// The BTH of an answer to the QP's peer: the QP's own P_Key, as on its requests.
fn answer_bth(qp: &Qp, opcode: Opcode, psn: u32) -> bth::Repr {
    let mut bth = bth::Repr::new(opcode, qp.attrs.dest_qp_num, psn);
    bth.p_key = qp.p_key;
    bth
}

/// Sends up to `budget` READ response packets. Returns how many were sent.
pub fn send_replies(qp: &mut Qp, ctx: &mut Ctx<'_>, budget: usize) -> usize {
    let mtu = u64::from(qp.attrs.path_mtu.bytes());
    let mut sent = 0;
    while sent < budget && ctx.tx.can_send() {
        let Some(reply) = qp.recv.replies.front().copied() else {
            break;
        };
        if let Some(held) = reply.held {
            qp.recv.replies.pop_front();
            match held {
                Held::AtomicAck(original) => send_atomic_ack(qp, ctx, reply.first_psn, original),
                Held::Nak(syndrome) => send_ack(qp, ctx, reply.first_psn, syndrome),
            }
            sent += 1;
            flush_ack(qp, ctx);
            continue;
        }
        let Some(path) = qp.path else { break };
        let index = (reply.offset / mtu) as u32;
        let p = psn::add(reply.first_psn, index);
        let n = (reply.len - reply.offset).min(mtu);
        let npkts = rules::packets(reply.len, qp.attrs.path_mtu.bytes());
        let kind = rules::read_response_kind(index, npkts);
        let last = index + 1 >= npkts;
        let Some(opcode) = Opcode::new(Transport::Rc, kind) else {
            break;
        };
        let mut ext = Extensions::default();
        if opcode.headers().contains(roce_wire::Headers::AETH) {
            ext.aeth = Some(aeth::Repr {
                syndrome: Syndrome::ack(),
                msn: qp.recv.msn,
            });
        }
        let repr = path.frame(answer_bth(qp, opcode, p), ext, n as usize);
        let pd = qp.pd;
        let mrs = &*ctx.mrs;
        let result = ctx.tx.send(&repr, |dst| {
            let place = mrs.resolve_remote(
                reply.rkey,
                pd,
                reply.va + reply.offset,
                n,
                Access::REMOTE_READ,
            )?;
            place.read_into(0, dst)
        });
        if let Err(e) = result {
            // The memory went away while the reply was under way.
            debug!(error = %e, "READ source no longer accessible");
            qp.recv.replies.pop_front();
            send_nak(qp, ctx, p, NakCode::REMOTE_ACCESS_ERROR);
            qp.enter_error(ctx);
            break;
        }
        counters::add(&ctx.counters.dma_read_bytes, n);
        counters::bump(&ctx.counters.read_responses_sent);
        trace!(
            psn = p,
            len = n,
            "DMA: READ response data read from host memory"
        );
        sent += 1;
        match qp.recv.replies.front_mut() {
            Some(r) if !last => r.offset += n,
            _ => {
                qp.recv.replies.pop_front();
                // An ACK held back for this READ may go now.
                flush_ack(qp, ctx);
            }
        }
    }
    sent
}

/// A UD datagram: one packet, checked against the Q_Key, delivered whole with the 40-byte GRH
/// area first, or dropped.
fn ud_receive(qp: &mut Qp, ctx: &mut Ctx<'_>, frame: &Frame<'_>) {
    let ext = &frame.repr.ext;
    let Some(deth) = ext.deth else {
        counters::bump(&ctx.counters.rx_malformed);
        return;
    };
    if deth.q_key != qp.attrs.qkey {
        counters::bump(&ctx.counters.rx_qkey_mismatch);
        debug!(
            q_key = format_args!("{:#x}", deth.q_key),
            expected = format_args!("{:#x}", qp.attrs.qkey),
            "Q_Key mismatch: datagram dropped"
        );
        return;
    }
    if !qp.recv.recv_active && !take_receive(qp, ctx) {
        counters::bump(&ctx.counters.rx_no_receive);
        debug!("UD datagram with no receive posted: dropped");
        return;
    }
    // The GRH area: an IPv6 header as it came, or 20 zero bytes then the IPv4 header.
    let mut grh = [0u8; 40];
    let network = &frame.bytes()[frame.layout.network.clone()];
    let at = 40usize.saturating_sub(network.len());
    let n = network.len().min(40);
    grh[at..at + n].copy_from_slice(&network[..n]);
    let payload = frame.payload();
    let total = 40 + payload.len() as u64;
    if total > qp.recv.recv.capacity() {
        complete_recv(qp, ctx, WcStatus::LocLenErr, WcOpcode::Recv, 0, 0, 0);
        return;
    }
    let sges = &qp.recv.recv.sges;
    if scatter(ctx.mrs, qp.pd, sges, 0, &grh)
        .and_then(|()| scatter(ctx.mrs, qp.pd, sges, 40, payload))
        .is_err()
    {
        complete_recv(qp, ctx, WcStatus::LocProtErr, WcOpcode::Recv, 0, 0, 0);
        return;
    }
    counters::add(&ctx.counters.dma_write_bytes, total);
    let (imm, mut flags) = match ext.immdt {
        Some(i) => (i.imm, wc_flags::WITH_IMM),
        None => (0, 0),
    };
    flags |= wc_flags::GRH;
    qp.recv.recv_active = false;
    let wc = Wc {
        wr_id: qp.recv.recv.wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: total as u32,
        imm_data: imm,
        qp_num: qp.qpn,
        src_qp: deth.src_qp,
        wc_flags: flags,
    };
    ctx.cqs.complete(qp.recv_cq, &wc, ctx.counters);
    trace!(
        len = payload.len(),
        src_qp = deth.src_qp,
        "UD datagram delivered"
    );
}

/// Completes the receive being filled.
fn complete_recv(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    status: WcStatus,
    opcode: WcOpcode,
    len: u32,
    imm: u32,
    flags: u8,
) {
    qp.recv.recv_active = false;
    qp.recv.recv_offset = 0;
    let wc = Wc {
        wr_id: qp.recv.recv.wr_id,
        status,
        opcode,
        byte_len: len,
        imm_data: imm,
        qp_num: qp.qpn,
        src_qp: qp.attrs.dest_qp_num,
        wc_flags: flags,
    };
    ctx.cqs.complete(qp.recv_cq, &wc, ctx.counters);
    trace!(wr_id = wc.wr_id, %status, len, "receive completed");
}

/// Completes every posted receive with a flush error (the QP entered the error state).
pub fn flush_receives(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    if qp.recv.recv_active {
        complete_recv(qp, ctx, WcStatus::WrFlushErr, WcOpcode::Recv, 0, 0, 0);
    }
    while qp.rq.next(&mut qp.recv.slot) {
        qp.rq.release(1);
        let _ = qp.recv.recv.decode(&qp.recv.slot, &qp.cap);
        qp.recv.recv_active = true;
        complete_recv(qp, ctx, WcStatus::WrFlushErr, WcOpcode::Recv, 0, 0, 0);
    }
    qp.recv.in_message = None;
    qp.recv.replies.clear();
    qp.recv.ack_pending = None;
}
