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
use tracing::trace_span;

use super::event::Refusal;
use super::{psn, scatter, Ctx, ErrorCause, Event};
use crate::counters;
use crate::qp::Qp;
use crate::verbs::types::{wc_flags, QpState, QpType, Wc, WcOpcode, WcStatus};
use crate::wqe::RecvWqe;

/// The longest DMA length a RETH may carry (IBTA C9-94).
pub const MAX_DMA_LEN: u32 = 1 << 31;

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

/// An answer waiting for its turn: answers leave in PSN order, as a responder that finishes
/// each request before the next (rxe) sends them, so an atomic ACK never overtakes the READ
/// responses before it (the requester would take them for lost and go back).
#[derive(Debug, Clone, Copy)]
enum Reply {
    Read(ReadReply),
    Atomic { psn: u32, original: u64 },
}

impl Reply {
    /// The first PSN the answer is for.
    fn psn(&self) -> u32 {
        match *self {
            Reply::Read(r) => r.first_psn,
            Reply::Atomic { psn, .. } => psn,
        }
    }
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
    replies: VecDeque<Reply>,
    /// Highest PSN owed an ACK (sent once per batch of received frames).
    ack_pending: Option<u32>,
    /// UC: a packet was lost; drop everything until the next message starts.
    uc_dropping: bool,
}

impl RecvState {
    pub fn new(epsn: u32, cap: &crate::verbs::types::QpCap) -> RecvState {
        RecvState {
            epsn,
            recv: RecvWqe::with_capacity(cap),
            ..RecvState::default()
        }
    }

    /// Whether a receive request is being filled.
    pub fn receive_active(&self) -> bool {
        self.recv_active
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

/// Refuses with `code`, reporting why.
fn nak(ctx: &mut Ctx<'_>, code: NakCode, why: Refusal) -> Refuse {
    ctx.event(Event::Refused(why));
    Refuse::Nak(code)
}

/// Handles one request packet addressed to this QP.
pub fn on_request(qp: &mut Qp, ctx: &mut Ctx<'_>, frame: &Frame<'_>) {
    let bth = &frame.repr.bth;
    let span = trace_span!("responder", qpn = qp.qpn, psn = bth.psn, opcode = %bth.opcode);
    let _enter = span.enter();
    if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
        counters::bump(&ctx.counters.rx_bad_state);
        ctx.event(Event::BadState { state: qp.state });
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
                let epsn = qp.recv.epsn;
                ctx.event(Event::SequenceNak { expected: epsn });
                send_nak(qp, ctx, epsn, NakCode::PSN_SEQUENCE_ERROR);
            }
            return;
        }
        if d < 0 {
            duplicate(qp, ctx, bth, &frame.repr.ext);
            return;
        }
        ctx.event(Event::InSequence);
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
            ctx.event(Event::UcMessageLost {
                expected: qp.recv.epsn,
            });
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
            qp.enter_error(ctx, ErrorCause::RequestRefused { psn: p, nak: code });
        }
        (QpType::Rc, Refuse::Rnr) => {
            counters::bump(&ctx.counters.rnr_naks_sent);
            qp.recv.nak_sent = true;
            let timer = qp.attrs.min_rnr_timer;
            ctx.event(Event::RnrNakSent {
                qpn: qp.qpn,
                psn: p,
            });
            send_ack(qp, ctx, p, Syndrome::RnrNak { timer });
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
    let in_send = qp.recv.in_message == Some(InMessage::Send);
    let in_write = matches!(qp.recv.in_message, Some(InMessage::Write { .. }));
    let sequence_ok = match (in_send, in_write) {
        (true, _) => kind.is_send() && !position.is_start(),
        (_, true) => kind.is_write() && !position.is_start(),
        _ => position.is_start(),
    };
    if !sequence_ok {
        return Err(nak(
            ctx,
            NakCode::INVALID_REQUEST,
            Refusal::OpcodeOutOfSequence,
        ));
    }
    let mtu = qp.attrs.path_mtu.bytes() as usize;
    let full = matches!(
        position,
        roce_wire::Position::First | roce_wire::Position::Middle
    );
    if (full && payload.len() != mtu) || payload.len() > mtu {
        let len = payload.len();
        return Err(nak(
            ctx,
            NakCode::INVALID_REQUEST,
            Refusal::PayloadLength { len, mtu },
        ));
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
        let why = Refusal::QpAccess {
            needs,
            qp_access: access,
        };
        return Err(nak(ctx, NakCode::INVALID_REQUEST, why));
    }
    // IBTA C9-94: one RDMA request moves at most 2^31 bytes. A longer one is malformed whatever
    // the memory tables say, so it is refused before any key is looked at.
    if let Some(reth) = ext.reth.filter(|r| r.dma_len > MAX_DMA_LEN) {
        let why = Refusal::DmaLengthTooLong {
            dma_len: reth.dma_len,
        };
        return Err(nak(ctx, NakCode::INVALID_REQUEST, why));
    }
    match kind {
        k if k.is_send() => receive_send(qp, ctx, bth, ext, payload).map(|()| 1),
        k if k.is_write() => receive_write(qp, ctx, bth, ext, payload).map(|()| 1),
        Kind::ReadRequest => receive_read(qp, ctx, bth, ext),
        Kind::CompareSwap | Kind::FetchAdd => receive_atomic(qp, ctx, bth, ext).map(|()| 1),
        _ => Err(nak(ctx, NakCode::INVALID_REQUEST, Refusal::Unsupported)),
    }
}

/// Takes the next posted receive, if there is one.
fn take_receive(qp: &mut Qp, ctx: &mut Ctx<'_>) -> bool {
    loop {
        match qp.rq.take(&mut qp.recv.recv) {
            None => return false,
            Some(Ok(())) => {
                qp.recv.recv_active = true;
                qp.recv.recv_offset = 0;
                return true;
            }
            Some(Err(error)) => {
                ctx.event(Event::MalformedReceive { error });
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
        let why = Refusal::ReceiveTooShort {
            needed: offset + payload.len() as u64,
            posted: qp.recv.recv.capacity(),
        };
        let refusal = nak(ctx, NakCode::INVALID_REQUEST, why);
        complete_recv(qp, ctx, WcStatus::LocLenErr, WcOpcode::Recv, 0, 0, 0);
        return Err(refusal);
    }
    if let Err(error) = scatter(ctx.mrs, qp.pd, &qp.recv.recv.sges, offset, payload) {
        let why = Refusal::ReceiveNotAccessible { error };
        let refusal = nak(ctx, NakCode::REMOTE_OPERATIONAL_ERROR, why);
        complete_recv(qp, ctx, WcStatus::LocProtErr, WcOpcode::Recv, 0, 0, 0);
        return Err(refusal);
    }
    counters::add(&ctx.counters.dma_write_bytes, payload.len() as u64);
    ctx.event(Event::SendPlaced {
        offset,
        len: payload.len(),
    });
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
        let why = Refusal::Invalidate { rkey: inv.r_key };
        let refusal = nak(ctx, NakCode::INVALID_REQUEST, why);
        complete_recv(qp, ctx, WcStatus::RemInvReqErr, WcOpcode::Recv, 0, 0, 0);
        return Err(refusal);
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
    // A WRITE with immediate consumes a receive. Without one it is refused (RNR) before it
    // changes anything, so that the requester's retry finds the responder as it was: a
    // WRITE_ONLY refused after it had opened a message would meet a message in progress.
    let with_imm = ext.immdt.is_some();
    if with_imm && !qp.recv.recv_active && !take_receive(qp, ctx) {
        return Err(Refuse::Rnr);
    }
    if position.is_start() {
        let reth = ext.reth.unwrap_or_default();
        let len = u64::from(reth.dma_len);
        // Check the whole range once, before any byte lands.
        if let Err(e) =
            ctx.mrs
                .resolve_remote(reth.r_key, qp.pd, reth.va, len, Access::REMOTE_WRITE)
        {
            return Err(access_refusal(ctx, e));
        }
        ctx.event(Event::RkeyChecked {
            write: true,
            rkey: reth.r_key,
            va: reth.va,
            len,
            npkts: 0,
        });
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
        return Err(nak(
            ctx,
            NakCode::INVALID_REQUEST,
            Refusal::OpcodeOutOfSequence,
        ));
    };
    let end = offset + payload.len() as u64;
    if end > len || (position.is_end() && end != len) {
        let why = Refusal::WriteLength { len, end };
        return Err(nak(ctx, NakCode::INVALID_REQUEST, why));
    }
    if !payload.is_empty() {
        let mrs = ctx.mrs;
        let place = match mrs
            .resolve_remote(
                rkey,
                qp.pd,
                va + offset,
                payload.len() as u64,
                Access::REMOTE_WRITE,
            )
            .and_then(|place| place.write(0, payload).map(|()| place))
        {
            Ok(place) => place,
            Err(e) => return Err(access_refusal(ctx, e)),
        };
        counters::add(&ctx.counters.dma_write_bytes, payload.len() as u64);
        ctx.event(Event::WritePlaced {
            region: place.region_name(),
            region_offset: place.region_offset(),
            len: payload.len(),
        });
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
    if let Err(e) = ctx
        .mrs
        .resolve_remote(reth.r_key, qp.pd, reth.va, len, Access::REMOTE_READ)
    {
        return Err(access_refusal(ctx, e));
    }
    let mtu = u64::from(qp.attrs.path_mtu.bytes());
    let npkts = len.div_ceil(mtu).max(1) as u32;
    ctx.event(Event::RkeyChecked {
        write: false,
        rkey: reth.r_key,
        va: reth.va,
        len,
        npkts,
    });
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
    qp.recv.replies.push_back(Reply::Read(ReadReply {
        first_psn: bth.psn,
        va: reth.va,
        rkey: reth.r_key,
        len,
        offset: 0,
    }));
    Ok(npkts)
}

fn receive_atomic(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
) -> Result<(), Refuse> {
    let a = ext.atomic_eth.unwrap_or_default();
    let mrs = ctx.mrs;
    let place = match mrs.resolve_atomic(a.r_key, qp.pd, a.va) {
        Ok(place) => place,
        Err(e) => return Err(access_refusal(ctx, e)),
    };
    let original = if bth.opcode.kind() == Kind::CompareSwap {
        place.compare_and_swap(a.compare, a.swap_add)
    } else {
        place.fetch_and_add(a.swap_add)
    };
    counters::bump(&ctx.counters.atomics_executed);
    ctx.event(Event::AtomicExecuted {
        region: place.region_name(),
        region_offset: place.region_offset(),
        original,
    });
    remember(
        qp,
        Resource::Atomic {
            psn: bth.psn,
            original,
        },
    );
    qp.recv.msn = psn::add(qp.recv.msn, 1);
    reply_atomic(qp, ctx, bth.psn, original);
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

fn access_refusal(ctx: &mut Ctx<'_>, error: AccessError) -> Refuse {
    let code = if error.is_invalid_request() {
        NakCode::INVALID_REQUEST
    } else {
        NakCode::REMOTE_ACCESS_ERROR
    };
    nak(ctx, code, Refusal::Memory { error })
}

/// A request PSN before the expected one: the requester did not see our answer.
fn duplicate(qp: &mut Qp, ctx: &mut Ctx<'_>, bth: &bth::Repr, ext: &Extensions) {
    counters::bump(&ctx.counters.rx_duplicates);
    let p = bth.psn;
    let kind = bth.opcode.kind();
    ctx.event(Event::Duplicate {
        expected: qp.recv.epsn,
    });
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
                        })
                }
                Resource::Atomic { .. } => None,
            });
            match found {
                Some(reply) => {
                    // Answer again from memory, replacing a reply to the same READ in progress.
                    qp.recv.replies.retain(|r| r.psn() != reply.first_psn);
                    qp.recv.replies.push_back(Reply::Read(reply));
                    ctx.event(Event::DuplicateReadReplayed {
                        first_psn: reply.first_psn,
                    });
                }
                None => ctx.event(Event::DuplicateReadUnknown),
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
                    ctx.event(Event::AtomicReplayed { original });
                    reply_atomic(qp, ctx, p, original);
                }
                None => ctx.event(Event::DuplicateAtomicUnknown),
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
    if qp.recv.replies.iter().any(|r| psn::before(r.psn(), p)) {
        ctx.event(Event::AckHeld { psn: p });
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
    ctx.event(Event::AckSent { psn: p, syndrome });
}

/// Answers an atomic: at once, or behind the READ responses still to send.
fn reply_atomic(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, original: u64) {
    if qp.recv.replies.is_empty() {
        send_atomic_ack(qp, ctx, p, original);
    } else {
        qp.recv
            .replies
            .push_back(Reply::Atomic { psn: p, original });
    }
}

fn send_atomic_ack(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, original: u64) {
    answer(qp, ctx, p, Syndrome::ack(), Some(original));
    ctx.event(Event::AtomicAckSent { psn: p, original });
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
    ctx.send_simple(&repr);
}

/// The BTH of an answer to the QP's peer: the QP's own P_Key, as on its requests.
fn answer_bth(qp: &Qp, opcode: Opcode, psn: u32) -> bth::Repr {
    let mut bth = bth::Repr::new(opcode, qp.attrs.dest_qp_num, psn);
    bth.p_key = qp.p_key;
    bth
}

/// Sends up to `budget` READ response packets (and the atomic ACKs queued behind them).
/// Returns how many were sent.
pub fn send_replies(qp: &mut Qp, ctx: &mut Ctx<'_>, budget: usize) -> usize {
    let mtu = u64::from(qp.attrs.path_mtu.bytes());
    let mut sent = 0;
    while sent < budget && ctx.out.can_send() {
        let reply = match qp.recv.replies.front().copied() {
            None => break,
            Some(Reply::Atomic { psn, original }) => {
                qp.recv.replies.pop_front();
                send_atomic_ack(qp, ctx, psn, original);
                sent += 1;
                flush_ack(qp, ctx);
                continue;
            }
            Some(Reply::Read(reply)) => reply,
        };
        let Some(path) = qp.path else { break };
        let index = (reply.offset / mtu) as u32;
        let p = psn::add(reply.first_psn, index);
        let n = (reply.len - reply.offset).min(mtu);
        let first = reply.offset == 0;
        let last = reply.offset + n >= reply.len;
        let kind = match (first, last) {
            (true, true) => Kind::ReadResponseOnly,
            (true, false) => Kind::ReadResponseFirst,
            (false, true) => Kind::ReadResponseLast,
            (false, false) => Kind::ReadResponseMiddle,
        };
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
        let mrs = ctx.mrs;
        let result = ctx.out.send(&repr, &mut |dst| {
            let place = mrs.resolve_remote(
                reply.rkey,
                pd,
                reply.va + reply.offset,
                n,
                Access::REMOTE_READ,
            )?;
            place.read_into(0, dst)
        });
        if let Err(error) = result {
            // The memory went away while the reply was under way.
            ctx.event(Event::ReadSourceGone { error });
            qp.recv.replies.pop_front();
            send_nak(qp, ctx, p, NakCode::REMOTE_ACCESS_ERROR);
            qp.enter_error(ctx, ErrorCause::ReadSourceGone { psn: p });
            break;
        }
        counters::add(&ctx.counters.dma_read_bytes, n);
        counters::bump(&ctx.counters.read_responses_sent);
        ctx.event(Event::ReadResponseSent { psn: p, len: n });
        sent += 1;
        match qp.recv.replies.front_mut() {
            Some(Reply::Read(r)) if !last => r.offset += n,
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
        ctx.event(Event::QkeyMismatch {
            q_key: deth.q_key,
            expected: qp.attrs.qkey,
        });
        return;
    }
    if !qp.recv.recv_active && !take_receive(qp, ctx) {
        counters::bump(&ctx.counters.rx_no_receive);
        ctx.event(Event::UdNoReceive);
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
    ctx.out.complete(qp.recv_cq, &wc);
    ctx.event(Event::UdDelivered {
        len: payload.len(),
        src_qp: deth.src_qp,
    });
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
    ctx.out.complete(qp.recv_cq, &wc);
    ctx.event(Event::ReceiveCompleted {
        wr_id: wc.wr_id,
        status,
        len,
    });
}

/// Stops everything under way (the QP entered the error state): no more answers.
pub fn stop(qp: &mut Qp) {
    qp.recv.in_message = None;
    qp.recv.replies.clear();
    qp.recv.ack_pending = None;
}

/// Completes every fetched receive with a flush error (the QP is in the error state).
pub fn flush_receives(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    if qp.recv.recv_active {
        complete_recv(qp, ctx, WcStatus::WrFlushErr, WcOpcode::Recv, 0, 0, 0);
    }
    while qp.rq.take(&mut qp.recv.recv).is_some() {
        qp.recv.recv_active = true;
        complete_recv(qp, ctx, WcStatus::WrFlushErr, WcOpcode::Recv, 0, 0, 0);
    }
    stop(qp);
}
