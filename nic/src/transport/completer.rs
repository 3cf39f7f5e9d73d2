//! The completer: matches what comes back — ACKs, NAKs, READ responses, atomic ACKs — to the
//! outstanding send requests, places READ data and atomic results in the requester's memory,
//! retires requests in order and writes their completions. It also owns recovery: go-back-N on a
//! sequence NAK, a lost response or a timeout; waiting out an RNR NAK; failing the QP with the
//! right status when the retries run out.

use roce_wire::aeth::{self, NakCode, Syndrome};
use roce_wire::{bth, Extensions, Kind};

use std::time::Instant;

use super::event::{Answer, GoBackReason, Timeout};
use super::requester::{self, retransmit_timeout};
use super::{psn, rules, scatter, Ctx, ErrorCause, Event};
use crate::counters;
use crate::qp::Qp;
use crate::types::{QpType, SendOp, Wc, WcStatus};

/// Handles a response packet (ACK, READ response, atomic ACK) for an RC QP.
pub fn on_response(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
    payload: &[u8],
) {
    let p = bth.psn;
    // Anything outside [una, high] answers nothing we are waiting for.
    if psn::before(p, qp.send.una) || psn::before(qp.send.high, p) {
        counters::bump(&ctx.counters.rx_stale_responses);
        ctx.event(Event::StaleResponse {
            una: qp.send.una,
            high: qp.send.high,
        });
        return;
    }
    let kind = bth.opcode.kind();
    let syndrome = ext.aeth.map(|a| a.syndrome);
    // What this answer shows the responder has received: every PSN before the one a NAK names,
    // up to and including the one an ACK or a response names.
    let received_before = rules::received_before(syndrome, p);
    peer_progress(qp, received_before, ctx.now);
    match (kind, syndrome) {
        (Kind::Acknowledge, Some(Syndrome::Ack { .. })) => {
            counters::bump(&ctx.counters.acks_received);
            if p == qp.send.high {
                counters::bump(&ctx.counters.rx_stale_responses);
                return;
            }
            on_ack(qp, ctx, p);
        }
        (Kind::Acknowledge, Some(Syndrome::RnrNak { timer })) => on_rnr_nak(qp, ctx, p, timer),
        (Kind::Acknowledge, Some(Syndrome::Nak(code))) => on_nak(qp, ctx, p, code),
        (Kind::AtomicAcknowledge, _) => {
            let original = ext.atomic_ack_eth.map_or(0, |a| a.original);
            on_atomic_ack(qp, ctx, p, original);
        }
        (k, _) if k.is_read_response() => on_read_response(qp, ctx, p, k, payload),
        _ => counters::bump(&ctx.counters.rx_stale_responses),
    }
}

/// Everything up to and including PSN `p` was executed by the responder.
fn on_ack(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32) {
    if !retire_through(qp, ctx, p) {
        return;
    }
    // A READ or atomic the responder has executed but whose answer we lack: the answer was lost
    // (unless it is already being asked for again).
    if let Some(missing) = head_read_expected(qp) {
        if !psn::before(p, missing) && qp.send.recovering != Some(missing) {
            go_back(qp, ctx, missing, GoBackReason::AnswerLost);
        }
    }
    advance_una(qp, ctx, psn::add(p, 1));
    if qp.send.probed.take() == Some(p) {
        probe_answered(qp, ctx, p);
    }
}

/// The ACK that answers a tail probe names the probe's own PSN `p`: the responder took the
/// probe in sequence, so it never had that packet — and everything sent after it, which
/// reached it before the probe, it dropped as out of sequence (the sequence NAK it sent once
/// for the gap was lost, or the line lost the whole tail). Going back from the packet after
/// `p` now recovers in the probe's round trip; otherwise the next probe, a probe interval
/// later, would bring one packet more (a QP that never lost a packet runs no low timer with
/// more than a few unacknowledged). A responder that had `p` answers the probe as a
/// duplicate, with the last PSN it received, which is not `p` while more was sent — unless a
/// coalesced ACK for `p` was already on its way, and then the go-back is a needless resend,
/// never a wrong one.
fn probe_answered(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32) {
    let next = psn::add(p, 1);
    if qp.sq.is_empty() || !psn::before(next, qp.send.high) || qp.send.recovering.is_some() {
        return;
    }
    go_back(qp, ctx, next, GoBackReason::ProbeAnswered);
}

/// Retires, in order, the SEND and WRITE requests whose last PSN is `p` or before, and fails
/// the QP if the request at the head had failed locally. False when the QP failed: the answer
/// is then dealt with.
fn retire_through(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32) -> bool {
    while !qp.sq.is_empty() {
        let head = qp.sq.entry(qp.sq.head);
        if let Some(status) = head.failed {
            fail_head(qp, ctx, status);
            return false;
        }
        if !head.assigned || head.wqe.op.is_read_or_atomic() || psn::before(p, head.last_psn()) {
            break;
        }
        complete_head(qp, ctx, WcStatus::Success);
    }
    true
}

/// For a READ or atomic at the head, the PSN of the next answer it waits for.
fn head_read_expected(qp: &Qp) -> Option<u32> {
    if qp.sq.is_empty() {
        return None;
    }
    let head = qp.sq.entry(qp.sq.head);
    (head.assigned && head.wqe.op.is_read_or_atomic())
        .then(|| psn::add(head.first_psn, head.responses))
}

/// Moves the oldest unacknowledged PSN forward to `to` (never past an unanswered READ), and
/// rearms the retransmission timer on progress.
fn advance_una(qp: &mut Qp, ctx: &mut Ctx<'_>, to: u32) {
    let mut to = to;
    if let Some(expected) = head_read_expected(qp) {
        if psn::before(expected, to) {
            to = expected;
        }
    }
    if psn::before(qp.send.high, to) {
        to = qp.send.high;
    }
    if !psn::before(qp.send.una, to) {
        return;
    }
    qp.send.window.on_ack(psn::diff(to, qp.send.una) as u32);
    qp.send.una = to;
    qp.send.retry_left = qp.attrs.retry_cnt;
    if let Some(r) = qp.send.recovering {
        if !psn::before(to, r) {
            qp.send.recovering = None;
        }
    }
    qp.send.timer = if qp.send.una == qp.send.high {
        None
    } else {
        retransmit_timeout(qp.attrs.timeout).map(|t| ctx.now + t)
    };
    qp.send.low_backoff = 0;
    requester::arm_low_timer(qp, ctx.now, false, false);
}

fn on_nak(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, code: NakCode) {
    let c = ctx.counters;
    counters::bump(match code {
        NakCode::PSN_SEQUENCE_ERROR => &c.naks_received_psn_sequence,
        NakCode::INVALID_REQUEST => &c.naks_received_invalid_request,
        NakCode::REMOTE_ACCESS_ERROR => &c.naks_received_remote_access,
        _ => &c.naks_received_remote_operational,
    });
    ctx.event(Event::NakReceived {
        qpn: qp.qpn,
        psn: p,
        nak: code,
    });
    // A NAK for PSN p acknowledges everything before it.
    if !retire_through(qp, ctx, psn::add(p, psn::MASK)) {
        return;
    }
    advance_una(qp, ctx, p);
    if qp.sq.is_empty() {
        return;
    }
    match code {
        NakCode::PSN_SEQUENCE_ERROR => {
            if qp.send.rnr_wait.is_some() || qp.send.recovering == Some(p) {
                return;
            }
            if !use_retry(qp) {
                fail_head(qp, ctx, WcStatus::RetryExcErr);
                return;
            }
            go_back(qp, ctx, p, GoBackReason::SequenceNak);
        }
        NakCode::INVALID_REQUEST => fail_head(qp, ctx, WcStatus::RemInvReqErr),
        NakCode::REMOTE_ACCESS_ERROR => fail_head(qp, ctx, WcStatus::RemAccessErr),
        _ => fail_head(qp, ctx, WcStatus::RemOpErr),
    }
}

fn on_rnr_nak(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, timer: u8) {
    counters::bump(&ctx.counters.rnr_naks_received);
    if !retire_through(qp, ctx, psn::add(p, psn::MASK)) {
        return;
    }
    advance_una(qp, ctx, p);
    if qp.sq.is_empty() {
        return;
    }
    if qp.send.rnr_left == 0 {
        fail_head(qp, ctx, WcStatus::RnrRetryExcErr);
        return;
    }
    // 7 means retry for ever (IBTA 9.7.5.2.8).
    if qp.attrs.rnr_retry != 7 {
        qp.send.rnr_left -= 1;
    }
    let wait = aeth::rnr_timer(timer);
    ctx.event(Event::RnrWait {
        qpn: qp.qpn,
        psn: p,
        wait,
    });
    qp.send.rnr_wait = Some((ctx.now + wait, p));
    qp.send.probed = None;
    qp.send.timer = None;
    qp.send.low_timer = None;
    // The RNR retry is the next word on the line; a probe armed before would only double it.
    qp.send.probe_at = None;
}

fn on_read_response(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, kind: Kind, payload: &[u8]) {
    // A READ response acknowledges every request before the READ.
    if !retire_through(qp, ctx, psn::add(p, psn::MASK)) {
        return;
    }
    if qp.sq.is_empty() {
        counters::bump(&ctx.counters.rx_stale_responses);
        return;
    }
    let head_index = qp.sq.head;
    let head = qp.sq.entry(head_index);
    let SendOp::RdmaRead { .. } = head.wqe.op else {
        counters::bump(&ctx.counters.rx_stale_responses);
        return;
    };
    if !head.covers(p) {
        counters::bump(&ctx.counters.rx_stale_responses);
        return;
    }
    let expected = psn::add(head.first_psn, head.responses);
    if p != expected {
        if psn::before(p, expected) {
            counters::bump(&ctx.counters.rx_stale_responses);
        } else if qp.send.recovering != Some(expected) {
            go_back(qp, ctx, expected, GoBackReason::ReadResponseMissing);
        }
        return;
    }
    let mtu = qp.attrs.path_mtu.bytes();
    let offset = u64::from(head.responses) * u64::from(mtu);
    let last = head.responses + 1 == head.npkts;
    let kind_ok = kind == rules::read_response_kind(head.responses, head.npkts);
    let len_ok = payload.len() as u64 == rules::packet_len(head.wqe.length, head.responses, mtu);
    if !kind_ok || !len_ok {
        ctx.event(Event::BadResponse {
            kind,
            len: payload.len(),
        });
        fail_head(qp, ctx, WcStatus::BadRespErr);
        return;
    }
    if let Err(error) = scatter(ctx.mrs, qp.pd, &head.wqe.sges, offset, payload) {
        ctx.event(Event::AnswerNotPlaced {
            answer: Answer::ReadData,
            error,
        });
        fail_head(qp, ctx, WcStatus::LocProtErr);
        return;
    }
    counters::add(&ctx.counters.dma_write_bytes, payload.len() as u64);
    ctx.event(Event::ReadResponsePlaced {
        offset,
        len: payload.len(),
    });
    qp.sq.entry_mut(head_index).responses += 1;
    if last {
        complete_head(qp, ctx, WcStatus::Success);
    }
    advance_una(qp, ctx, psn::add(p, 1));
}

fn on_atomic_ack(qp: &mut Qp, ctx: &mut Ctx<'_>, p: u32, original: u64) {
    if !retire_through(qp, ctx, psn::add(p, psn::MASK)) {
        return;
    }
    if qp.sq.is_empty() {
        counters::bump(&ctx.counters.rx_stale_responses);
        return;
    }
    let head = qp.sq.entry(qp.sq.head);
    if !head.wqe.op.is_atomic() || !head.assigned || head.first_psn != p || head.responses != 0 {
        if head.wqe.op.is_read_or_atomic() && head.assigned && psn::before(head.first_psn, p) {
            let expected = psn::add(head.first_psn, head.responses);
            if qp.send.recovering != Some(expected) {
                go_back(qp, ctx, expected, GoBackReason::AtomicOrReadAnswerMissing);
            }
        } else {
            counters::bump(&ctx.counters.rx_stale_responses);
        }
        return;
    }
    if let Err(error) = scatter(ctx.mrs, qp.pd, &head.wqe.sges, 0, &original.to_ne_bytes()) {
        ctx.event(Event::AnswerNotPlaced {
            answer: Answer::AtomicResult,
            error,
        });
        fail_head(qp, ctx, WcStatus::LocProtErr);
        return;
    }
    ctx.event(Event::AtomicResultPlaced { original });
    let head_index = qp.sq.head;
    qp.sq.entry_mut(head_index).responses = 1;
    complete_head(qp, ctx, WcStatus::Success);
    advance_una(qp, ctx, psn::add(p, 1));
}

/// The retransmission timer, the RNR wait and the tail probe.
pub fn on_timers(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    if qp.send.probe_at.is_some_and(|at| ctx.now >= at) {
        qp.send.probe_at = None;
        if qp.send.una != qp.send.high && qp.send.rnr_wait.is_none() {
            // The probe is the first retry, taken early: it uses the budget, and the timer
            // starts over from it.
            qp.send.probe_spent = true;
            if use_retry(qp) {
                requester::probe(qp, ctx);
                qp.send.timer = retransmit_timeout(qp.attrs.timeout).map(|t| ctx.now + t);
                // The probe is the one packet out that asks for an answer: if it is lost,
                // nothing else brings one, and the low timer goes back.
                requester::arm_low_timer(qp, ctx.now, true, false);
            }
        }
    }
    if qp.send.low_timer.is_some_and(|at| ctx.now >= at) {
        on_low_timer(qp, ctx);
    }
    if let Some((at, p)) = qp.send.rnr_wait {
        if ctx.now >= at {
            qp.send.rnr_wait = None;
            counters::bump(&ctx.counters.rnr_retries);
            ctx.event(Event::RnrWaitOver {
                qpn: qp.qpn,
                psn: p,
            });
            if qp.sq.rewind_to(p) {
                qp.send.recovering = Some(p);
            }
        }
    }
    let Some(at) = qp.send.timer else { return };
    if ctx.now < at {
        return;
    }
    if qp.send.una == qp.send.high || qp.sq.is_empty() {
        qp.send.timer = None;
        return;
    }
    counters::bump(&ctx.counters.retransmit_timeouts);
    if !use_retry(qp) {
        ctx.event(Event::RetriesExhausted { qpn: qp.qpn });
        fail_head(qp, ctx, WcStatus::RetryExcErr);
        return;
    }
    timeout_go_back(qp, ctx, false);
    qp.send.timer = retransmit_timeout(qp.attrs.timeout).map(|t| ctx.now + t);
    requester::arm_low_timer(qp, ctx.now, false, false);
}

/// The low retransmission timer fired (see [`requester::rto_low`]): a timeout like the
/// configured timer's, which spends no retry and leaves the configured timer running; the
/// next low wait is twice as long, until the responder shows progress. The first expiry after
/// an unanswered tail probe, with more than a few packets unacknowledged, sends a second
/// probe instead of going back.
fn on_low_timer(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    qp.send.low_timer = None;
    if qp.send.una == qp.send.high || qp.sq.is_empty() || qp.send.rnr_wait.is_some() {
        return;
    }
    // A tail probe went unanswered for a low timeout: probe once more before going back over
    // everything. The probe's answer recovers a lost NAK, resend or tail as the go-back would
    // (see `probe_answered`), and a peer whose engine merely stalled for a hundred
    // microseconds or two (a thread that lost its core) then costs one packet, not a window
    // of duplicates and a cut. Only the probe's own loss, or its answer's, waits the longer.
    let outstanding = psn::diff(qp.send.high, qp.send.una).max(0) as u32;
    if qp.send.probed.is_some()
        && qp.send.low_backoff == 0
        && outstanding > requester::RTO_LOW_PACKETS
    {
        requester::probe(qp, ctx);
        qp.send.low_backoff += 1;
        requester::arm_low_timer(qp, ctx.now, true, false);
        return;
    }
    counters::bump(&ctx.counters.retransmit_timeouts);
    timeout_go_back(qp, ctx, true);
    qp.send.low_backoff += 1;
    requester::arm_low_timer(qp, ctx.now, true, false);
}

/// A retransmission timeout's go-back: from the oldest unacknowledged packet, no probe after
/// it (it asks for an answer itself). The configured timer (nothing came back for a whole
/// Local ACK Timeout) brings the window to its minimum; the low timer cuts it as a loss does:
/// its expiry means a lost resend, NAK or answer more often than a congested path, and IRN,
/// whose timer it is, does not shrink what it sends on it at all.
fn timeout_go_back(qp: &mut Qp, ctx: &mut Ctx<'_>, low: bool) {
    let from = qp.send.una;
    let cuts = qp.send.window.cuts;
    if low {
        qp.send.window.on_loss(from, qp.send.high);
    } else {
        qp.send.window.on_timeout(qp.send.high);
    }
    counters::add(&ctx.counters.loss_window_cuts, qp.send.window.cuts - cuts);
    let head = qp.sq.entry(qp.sq.head);
    ctx.event(Event::RetransmitTimeout(Timeout {
        qpn: qp.qpn,
        psn: from,
        low,
        retries_left: qp.send.retry_left,
        high: qp.send.high,
        peer_high: qp.send.peer_high,
        head_op: head.wqe.op,
        head_first: head.first_psn,
        head_npkts: head.npkts,
        head_responses: head.responses,
        head_sent: head.sent,
        next: qp.sq.next.wrapping_sub(qp.sq.head),
    }));
    if qp.sq.rewind_to(from) {
        qp.send.recovering = Some(from);
    }
    // Karn: a round trip timed across a resend measures nothing.
    qp.send.rtt_sample = None;
    qp.send.probe_at = None;
    qp.send.probed = None;
    qp.send.probe_spent = true;
}

/// The responder has received everything before `received_before`. If that is news, it is alive
/// and making progress — even if a READ's answer is still missing, which keeps `una` back — so
/// the retry budget, which guards against a dead or stuck peer, is restored.
fn peer_progress(qp: &mut Qp, received_before: u32, now: Instant) {
    if psn::before(qp.send.peer_high, received_before) {
        qp.send.peer_high = received_before;
        qp.send.retry_left = qp.attrs.retry_cnt;
        qp.send.probe_at = None;
        qp.send.probe_spent = false;
    }
    if let Some((p, sent)) = qp.send.rtt_sample {
        if psn::before(p, received_before) {
            let sample = now.saturating_duration_since(sent);
            let send = &mut qp.send;
            // RFC 6298 §2: RTTVAR from the first sample's half, then both smoothed.
            if send.srtt.is_zero() {
                send.srtt = sample;
                send.rttvar = sample / 2;
            } else {
                let error = send.srtt.abs_diff(sample);
                send.rttvar = (send.rttvar * 3 + error) / 4;
                send.srtt = (send.srtt * 7 + sample) / 8;
            }
            send.rtt_sample = None;
        }
    }
}

/// Takes one retry from the budget; false when none is left.
fn use_retry(qp: &mut Qp) -> bool {
    if qp.send.retry_left == 0 {
        return false;
    }
    if !(qp.attrs.retry_cnt == 7 && qp.rxe_compat) {
        qp.send.retry_left -= 1;
    }
    true
}

fn go_back(qp: &mut Qp, ctx: &mut Ctx<'_>, from: u32, why: GoBackReason) {
    ctx.event(Event::GoBack {
        qpn: qp.qpn,
        psn: from,
        why,
    });
    let cuts = qp.send.window.cuts;
    qp.send.window.on_loss(from, qp.send.high);
    counters::add(&ctx.counters.loss_window_cuts, qp.send.window.cuts - cuts);
    qp.send.rtt_sample = None;
    // What is sent again asks for an answer itself: no probe on top of it.
    qp.send.probe_at = None;
    qp.send.probed = None;
    if qp.sq.rewind_to(from) {
        qp.send.recovering = Some(from);
        qp.send.timer = retransmit_timeout(qp.attrs.timeout).map(|t| ctx.now + t);
        // The low timer too: the copies need a round trip of their own. Armed at the last
        // progress, it fired while they were on their way when the answer that sent them back
        // moved nothing forward (a NAK for the oldest unacknowledged packet), and went back
        // over everything a second time.
        requester::arm_low_timer(qp, ctx.now, false, false);
    }
}

/// Completes the head request with `status` and retires it.
pub fn complete_head(qp: &mut Qp, ctx: &mut Ctx<'_>, status: WcStatus) {
    let head = qp.sq.entry(qp.sq.head);
    if head.rd_counted {
        qp.send.rd_outstanding = qp.send.rd_outstanding.saturating_sub(1);
    }
    let report = head.wqe.signaled() || status != WcStatus::Success || qp.sq_sig_all;
    let wc = Wc {
        wr_id: head.wqe.wr_id,
        status,
        opcode: head.wqe.op.wc_opcode(),
        byte_len: if status == WcStatus::Success {
            head.wqe.length as u32
        } else {
            0
        },
        qp_num: qp.qpn,
        ..Wc::default()
    };
    ctx.event(Event::SendCompleted {
        qpn: qp.qpn,
        wr_id: wc.wr_id,
        status,
    });
    // The engine gives the slot back to the host before it publishes the completion: a host
    // that posts again as soon as it sees the completion must find room.
    qp.sq.retire_head();
    if report {
        ctx.out.complete(qp.send_cq, &wc);
    }
    // Everything the retired request used is acknowledged: `una` moves to the next request's
    // first PSN, or past everything sent when none was sent.
    let next = match qp.sq.is_empty() {
        false if qp.sq.entry(qp.sq.head).assigned => qp.sq.entry(qp.sq.head).first_psn,
        _ => qp.send.high,
    };
    advance_una(qp, ctx, next);
}

/// Completes the head request with an error and moves the QP to the error state.
pub fn fail_head(qp: &mut Qp, ctx: &mut Ctx<'_>, status: WcStatus) {
    complete_head(qp, ctx, status);
    qp.enter_error(ctx, ErrorCause::SendFailed { status });
}

/// UC and UD: a request is complete once sent. Retires the fully sent (or failed) head requests.
pub fn retire_unacknowledged(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    debug_assert!(qp.qp_type != QpType::Rc);
    while !qp.sq.is_empty() {
        let head = qp.sq.entry(qp.sq.head);
        if let Some(status) = head.failed {
            fail_head(qp, ctx, status);
            return;
        }
        if !head.fully_sent() {
            return;
        }
        complete_head(qp, ctx, WcStatus::Success);
    }
}
