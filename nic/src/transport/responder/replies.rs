//! The responder's answers: coalesced ACKs, NAKs and RNR NAKs, atomic ACKs and READ
//! responses segmented by the MTU — all in PSN order.

use roce_hostmem::Access;
use roce_wire::aeth::{self, NakCode, Syndrome};
use roce_wire::{atomic_ack_eth, bth, Extensions, Kind, Opcode, Transport};

use super::Reply;
use crate::counters;
use crate::qp::Qp;
use crate::transport::{psn, rules, Ctx, ErrorCause, Event};

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

pub(super) fn send_nak(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, code: NakCode) {
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
pub(super) fn send_ack(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, syndrome: Syndrome) {
    qp.recv.since_ack = 0;
    answer(qp, ctx, p, syndrome, None);
    if matches!(syndrome, Syndrome::Ack { .. }) {
        counters::bump(&ctx.counters.acks_sent);
    }
    ctx.event(Event::AckSent { psn: p, syndrome });
}

/// Sends a sequence or RNR NAK: at once, or behind the READ responses still to send.
pub(super) fn reply_nak(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, syndrome: Syndrome) {
    if qp.recv.replies.is_empty() {
        send_ack(qp, ctx, p, syndrome);
    } else {
        qp.recv.replies.push_back(Reply::Nak { psn: p, syndrome });
    }
}

/// Answers an atomic: at once, or behind the READ responses still to send.
pub(super) fn reply_atomic(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, original: u64) {
    if qp.recv.replies.is_empty() {
        send_atomic_ack(qp, ctx, p, original);
    } else {
        qp.recv
            .replies
            .push_back(Reply::Atomic { psn: p, original });
    }
}

pub(super) fn send_atomic_ack(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, original: u64) {
    answer(qp, ctx, p, Syndrome::ack(), Some(original));
    ctx.event(Event::AtomicAckSent { psn: p, original });
}

/// Sends an ACKNOWLEDGE, or with `original` an ATOMIC ACKNOWLEDGE, for PSN `p`. An answer for
/// `p` covers the ACK owed for anything before it.
pub(super) fn answer(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    p: u32,
    syndrome: Syndrome,
    original: Option<u64>,
) {
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
pub(super) fn answer_bth(qp: &Qp, opcode: Opcode, psn: u32) -> bth::Repr {
    let mut bth = bth::Repr::new(opcode, qp.attrs.dest_qp_num, psn);
    bth.p_key = qp.p_key;
    bth
}

/// Sends up to `budget` READ response packets (and the atomic ACKs and NAKs queued behind
/// them).
/// Returns how many were sent.
pub fn send_replies(qp: &mut Qp, ctx: &mut Ctx<'_>, budget: usize) -> usize {
    let mtu = u64::from(qp.attrs.path_mtu.bytes());
    let mut sent = 0;
    while sent < budget && ctx.out.can_send() {
        // READ responses are this QP's data too: DCQCN's rate limiter paces them.
        if qp.recv.has_replies() && !crate::dcqcn::may_send(qp, ctx) {
            break;
        }
        let tx_bytes = ctx
            .counters
            .tx_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        let reply = match qp.recv.replies.front().copied() {
            None => break,
            Some(Reply::Atomic { psn, original }) => {
                qp.recv.replies.pop_front();
                send_atomic_ack(qp, ctx, psn, original);
                sent += 1;
                flush_ack(qp, ctx);
                continue;
            }
            Some(Reply::Nak { psn, syndrome }) => {
                qp.recv.replies.pop_front();
                send_ack(qp, ctx, psn, syndrome);
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
        crate::dcqcn::sent(qp, ctx, tx_bytes);
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
