//! The requester: turns send work requests into packets. It segments messages by the path MTU
//! into FIRST/MIDDLE/LAST or ONLY packets with the right extension headers, numbers them with
//! 24-bit PSNs, asks for acknowledgement on the last packet of a message (and every
//! [`ACK_REQ_EVERY`] packets), keeps at most [`WINDOW`] packets unacknowledged and at most
//! max_rd_atomic READs and atomics outstanding, and arms the retransmission timer. Go-back-N
//! rewinds it (see [`super::send_queue::SendQueue::rewind_to`]); it then simply sends again.

use std::time::{Duration, Instant};

use roce_wire::{atomic_eth, bth, deth, ieth, immdt, reth, Extensions, Kind, Opcode, Transport};
use tracing::trace_span;

use super::{gather, psn, rules, Ctx, Event};
use crate::counters;
use crate::qp::Qp;
use crate::types::{QpState, QpType, SendFlags, SendOp, WcStatus};

/// Packets that may be unacknowledged at once when nothing is lost; losses shrink the window
/// (see [`super::window`]).
pub const WINDOW: u32 = super::window::MAX;
/// Even inside a long message, ask for an ACK this often so the window keeps moving.
pub const ACK_REQ_EVERY: u32 = 16;

/// The most packets a QP that has lost packets sends in one pass of its engine. A go-back-N
/// requester learns of a loss from the responder's sequence NAK, which its engine reads only
/// between passes: what the pass under way sends after the NAK arrived is sent in vain (the
/// responder drops it), and with the engine's budget of 32 that was half a pass on average.
/// Simulated with engines that take time, as the in-process bench's (nic/tests/sim/goodput.rs):
/// at 1% loss some 19 packets were sent again per sequence NAK and the goodput was 82% of
/// fault-free; with 8, 14 and 85%. With 4, 9 again, but a pass per 4 packets costs as much
/// as it saves. A QP that never lost a packet keeps the engine's budget.
pub const LOSSY_BUDGET: usize = 8;

/// Send-side state of a QP shared by the requester and the completer.
#[derive(Debug, Clone, Default)]
pub struct SendState {
    /// Next PSN to give a new request.
    pub psn: u32,
    /// One past the highest PSN ever sent: packets before it are retransmissions.
    pub high: u32,
    /// Oldest PSN not yet acknowledged.
    pub una: u32,
    /// One past the highest PSN the responder has shown it received (by an ACK, a NAK or an
    /// answer). It can run ahead of `una` while a READ's answer is missing.
    pub peer_high: u32,
    /// READs and atomics sent and not yet completed.
    pub rd_outstanding: u32,
    /// Packets sent since the last one with AckReq.
    pub since_ack_req: u32,
    /// When the retransmission timer fires (RC, while packets are unacknowledged).
    pub timer: Option<Instant>,
    /// Retries left after timeouts and sequence NAKs before the QP fails.
    pub retry_left: u8,
    /// RNR retries left (7 = infinite).
    pub rnr_left: u8,
    /// Waiting out an RNR NAK: resend from this PSN at this time.
    pub rnr_wait: Option<(Instant, u32)>,
    /// A go-back-N is under way from this PSN; further out-of-order answers are ignored until
    /// the answer to it arrives.
    pub recovering: Option<u32>,
    /// Smoothed round trip from a packet with AckReq to its acknowledgement.
    pub srtt: Duration,
    /// How much the round trip varies (RFC 6298's RTTVAR): with `srtt`, the low timer.
    pub rttvar: Duration,
    /// When the low retransmission timer fires (see [`rto_low`]): armed only on a QP that runs
    /// it, with at most [`RTO_LOW_PACKETS`] unacknowledged, a probe out or losses seen.
    pub low_timer: Option<Instant>,
    /// Low-timer expiries since the responder last showed progress: each doubles the next.
    pub low_backoff: u32,
    /// The packet being timed for the round trip, and when it left.
    pub rtt_sample: Option<(u32, Instant)>,
    /// When to probe a quiet line (see [`probe`]).
    pub probe_at: Option<Instant>,
    /// Something was sent again (a probe, or the timer's go-back) since the responder last
    /// showed progress: no probe until it does.
    pub probe_spent: bool,
    /// The PSN of the tail probe out, until its answer (or a go-back) comes: an ACK that
    /// answers it names the last PSN the responder has, and what was sent after that PSN
    /// before the probe was dropped (see `completer::on_ack`).
    pub probed: Option<u32>,
    /// How many packets may be unacknowledged: losses shrink it, acknowledgements grow it.
    pub window: super::window::Window,
}

/// The retransmission timeout of the `timeout` attribute: 4.096 µs × 2^timeout (0 = none).
pub fn retransmit_timeout(timeout: u8) -> Option<Duration> {
    (timeout != 0).then(|| Duration::from_nanos(4096u64 << timeout.min(31)))
}

/// The most packets unacknowledged for which the low timer runs on a QP that has not lost
/// packets: IRN's N (Mittal et al., "Revisiting Network Support for RDMA", SIGCOMM 2018,
/// §3.1). With more in flight, a loss is revealed by the packets after it (the responder's
/// sequence NAK) or by the tail probe.
pub const RTO_LOW_PACKETS: u32 = 3;
/// The least the low timer waits: IRN's RTO_low. A timer from the measured round trip alone
/// would fire at once on a line whose round trips were all a few microseconds.
pub const RTO_LOW_FLOOR: Duration = Duration::from_micros(100);
/// The least the low timer waits on a QP that has lost packets (see [`rto_low`]).
pub const RTO_LOW_LOSSY_FLOOR: Duration = Duration::from_micros(10);
/// How long a QP that runs the low timer and has not lost a packet lets the line stay quiet,
/// with more than [`RTO_LOW_PACKETS`] unacknowledged, before a tail probe: IRN's RTO_high
/// (320 µs). A probe on a line that is merely slow (an engine that did not run for a while)
/// is one duplicate packet, which the low timer's QPs accept anyway.
pub const RTO_HIGH: Duration = Duration::from_micros(320);
/// The most consecutive doublings of the low timer: a silent responder gets at most this many
/// copies more per configured timeout than with the configured timer alone.
const RTO_LOW_MAX_BACKOFF: u32 = 10;

/// IRN's two-level retransmission timer, low level: how long a QP with few packets
/// unacknowledged waits for an answer before it goes back — from the measured round trip as
/// RFC 6298 computes a retransmission timeout (SRTT + 4 × RTTVAR), never below
/// [`RTO_LOW_FLOOR`] nor above the QP's configured timeout (its Local ACK Timeout); before the
/// first round trip is measured, [`RTO_LOW_FLOOR`] itself (IRN's fixed RTO_low: a QP whose
/// first answers are lost — the ACKs, then the sequence NAK — measured none, and waited for
/// the configured timer, 67 ms, after a lost probe). `None` on a QP without a retransmission
/// timer.
///
/// On a QP that has lost packets the floor is [`RTO_LOW_LOSSY_FLOOR`] instead: the measured
/// round trip then decides. IRN's 100 µs is a datacenter's worst round trip, but the
/// in-process cable's is a few microseconds, and each of the thousands of quiet lines a lossy
/// line has per second (a lost NAK or resend leaves the responder silent: it NAKs once per
/// gap) waited 100 µs. The round trip it measures under load includes the queue its own
/// window builds, so SRTT + 4 × RTTVAR stays above a few packets' time; what the lower floor
/// risks is an engine that did not run for a while, whose expiry then sends duplicates of
/// what is unacknowledged — a cost on a lossy line only. A QP that never lost a packet keeps
/// the 100 µs floor and [`RTO_LOW_PACKETS`]: on a fault-free line an engine's stall makes
/// it send no more than before.
///
/// A low-timer expiry is a retransmission timeout like the configured timer's (the same
/// go-back, the same counter and event), but it spends no retry: the IBTA's retry count
/// bounds the retries after the transport timer (the Local ACK Timeout the QP was given)
/// expires, and a low timer that spent retries would fail a QP whose peer merely paused for a
/// millisecond. The configured timer
/// keeps running beside it, so a silent peer still fails after (1 + retry_cnt) configured
/// timeouts, as without the low timer.
pub fn rto_low(send: &SendState, timeout: u8) -> Option<Duration> {
    let configured = retransmit_timeout(timeout)?;
    let rto = if send.srtt.is_zero() {
        // Nothing measured yet: IRN's fixed RTO_low.
        RTO_LOW_FLOOR
    } else {
        let floor = if send.window.lossy() {
            RTO_LOW_LOSSY_FLOOR
        } else {
            RTO_LOW_FLOOR
        };
        (send.srtt + send.rttvar * 4).max(floor)
    };
    let backed_off = rto.saturating_mul(1 << send.low_backoff.min(RTO_LOW_MAX_BACKOFF));
    Some(backed_off.min(configured))
}

/// Arms the low timer of a QP that runs it, if few enough packets are unacknowledged (or
/// `probe`: one packet that asks for an answer is out, and nothing else will bring one; or
/// the QP has lost packets); disarms it otherwise. `keep`: an armed low timer stays as it is
/// (a new packet does not postpone the wait for the older ones).
///
/// On a QP that has lost packets the low timer runs whatever is unacknowledged: a lost
/// sequence NAK, or a lost first resend after one, leaves the responder silently dropping
/// everything that follows (it NAKs once per gap, IBTA 9.7.5.1.1), and what recovers from
/// that is a go-back, which the low timer makes one low timeout after the last progress. A
/// probe alone needs a round trip more for the NAK its answer provokes, and none may follow
/// it until the responder shows progress.
pub fn arm_low_timer(qp: &mut Qp, now: Instant, probe: bool, keep: bool) {
    let send = &mut qp.send;
    let outstanding = psn::diff(send.high, send.una).max(0) as u32;
    let wanted = qp.rto_low
        && qp.qp_type == QpType::Rc
        && outstanding > 0
        && (probe || outstanding <= RTO_LOW_PACKETS || send.window.lossy());
    if !wanted {
        send.low_timer = None;
        return;
    }
    if keep && send.low_timer.is_some() {
        return;
    }
    send.low_timer = rto_low(send, qp.attrs.timeout)
        .map(|rto| now + rto)
        // Past the configured timer the low one has nothing to add.
        .filter(|at| send.timer.is_none_or(|t| *at < t));
}

/// Checks a fetched request against the QP before it is accepted.
pub fn check(
    qp_type: QpType,
    mtu: u32,
    op: &SendOp,
    length: u64,
    has_ud: bool,
) -> Option<WcStatus> {
    let allowed = match qp_type {
        QpType::Rc => true,
        QpType::Uc => !op.is_read_or_atomic(),
        QpType::Ud => matches!(op, SendOp::Send | SendOp::SendWithImm { .. }) && has_ud,
    };
    if !allowed {
        return Some(WcStatus::LocQpOpErr);
    }
    if qp_type == QpType::Ud && length > u64::from(mtu) {
        return Some(WcStatus::LocLenErr);
    }
    None
}

/// Sends what the send queue holds, up to `budget` packets. Returns the packets sent.
pub fn run(qp: &mut Qp, ctx: &mut Ctx<'_>, budget: usize) -> usize {
    if !matches!(qp.state, QpState::Rts) || qp.send.rnr_wait.is_some() {
        return 0;
    }
    let budget = if qp.qp_type == QpType::Rc && qp.send.window.lossy() {
        budget.min(LOSSY_BUDGET)
    } else {
        budget
    };
    let mut sent = 0;
    // A failure on the way moves the QP to the error state, and that ends the pass.
    while sent < budget
        && qp.state == QpState::Rts
        && qp.sq.next != qp.sq.fetched
        && ctx.out.can_send()
    {
        if !crate::dcqcn::may_send(qp, ctx) {
            break;
        }
        let index = qp.sq.next;
        let entry = qp.sq.entry(index);
        if entry.failed.is_some() {
            // Completes (with its error) once everything before it has; nothing after it goes.
            if qp.qp_type != QpType::Rc {
                super::completer::retire_unacknowledged(qp, ctx);
            }
            break;
        }
        if !entry.assigned {
            let op = entry.wqe.op;
            if op.is_read_or_atomic()
                && qp.send.rd_outstanding >= u32::from(qp.attrs.max_rd_atomic.max(1))
            {
                break;
            }
            if entry.wqe.flags.contains(SendFlags::FENCE) && qp.send.rd_outstanding > 0 {
                break;
            }
            let mtu = qp.attrs.path_mtu.bytes();
            let npkts = match op {
                _ if op.is_atomic() => 1,
                _ => rules::packets(entry.wqe.length, mtu),
            };
            let first_psn = qp.send.psn;
            let e = qp.sq.entry_mut(index);
            e.first_psn = first_psn;
            e.npkts = npkts;
            e.assigned = true;
            qp.send.psn = psn::add(first_psn, npkts);
        }
        let entry = qp.sq.entry(index);
        let packet_psn = psn::add(entry.first_psn, entry.sent);
        if qp.qp_type == QpType::Rc
            && psn::diff(packet_psn, qp.send.una) >= qp.send.window.packets() as i32
        {
            break;
        }
        let tx_bytes = ctx
            .counters
            .tx_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        if let Err(status) = send_packet(qp, ctx, index) {
            qp.sq.entry_mut(index).failed = Some(status);
            continue;
        }
        crate::dcqcn::sent(qp, ctx, tx_bytes);
        sent += 1;
        let entry = qp.sq.entry(index);
        if entry.fully_sent() {
            qp.sq.next = index.wrapping_add(1);
            if qp.qp_type != QpType::Rc {
                super::completer::retire_unacknowledged(qp, ctx);
            }
        }
    }
    if sent > 0 && qp.qp_type == QpType::Rc {
        if qp.send.timer.is_none() {
            qp.send.timer = retransmit_timeout(qp.attrs.timeout).map(|t| ctx.now + t);
        }
        arm_low_timer(qp, ctx.now, false, true);
    }
    sent
}

/// The opcode of packet `n` of `npkts` of a request.
fn opcode(qp_type: QpType, op: &SendOp, n: u32, npkts: u32) -> Opcode {
    let position = rules::position(n, npkts);
    let (first, last) = (position.is_start(), position.is_end());
    let only = first && last;
    use Kind::*;
    let kind = match *op {
        SendOp::Send => pick(only, first, last, SendOnly, SendFirst, SendLast),
        SendOp::SendWithImm { .. } => pick(only, first, last, SendOnlyImm, SendFirst, SendLastImm),
        SendOp::SendWithInv { .. } => pick(only, first, last, SendOnlyInv, SendFirst, SendLastInv),
        SendOp::RdmaWrite { .. } => pick(only, first, last, WriteOnly, WriteFirst, WriteLast),
        SendOp::RdmaWriteWithImm { .. } => {
            pick(only, first, last, WriteOnlyImm, WriteFirst, WriteLastImm)
        }
        SendOp::RdmaRead { .. } => ReadRequest,
        SendOp::AtomicCmpAndSwp { .. } => CompareSwap,
        SendOp::AtomicFetchAndAdd { .. } => FetchAdd,
    };
    let middle_kind = match kind {
        SendFirst if !first => SendMiddle,
        WriteFirst if !first => WriteMiddle,
        k => k,
    };
    let transport = match qp_type {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    };
    // `check` refused every request the transport cannot carry.
    Opcode::new(transport, middle_kind).unwrap_or(Opcode::CNP)
}

fn pick(only: bool, first: bool, last: bool, o: Kind, f: Kind, l: Kind) -> Kind {
    if only {
        o
    } else if last {
        l
    } else if first {
        f
    } else {
        // MIDDLE: the FIRST kind, turned into its middle form by the caller.
        f
    }
}

/// Builds and sends the next packet of request `index`, and records the progress.
fn send_packet(qp: &mut Qp, ctx: &mut Ctx<'_>, index: u32) -> Result<(), WcStatus> {
    let n = qp.sq.entry(index).sent;
    emit(qp, ctx, index, n, false)?;
    let entry = qp.sq.entry_mut(index);
    if entry.wqe.op.is_read_or_atomic() {
        entry.sent = entry.npkts;
        if !entry.rd_counted {
            entry.rd_counted = true;
            qp.send.rd_outstanding += 1;
        }
    } else {
        entry.sent += 1;
    }
    Ok(())
}

/// Sends the oldest unacknowledged packet once more, asking for an acknowledgement: the line
/// went quiet with packets unacknowledged, so an ACK, a NAK or a lost packet went missing at the
/// tail, where no later packet would reveal the gap. The answer (ACK, NAK or the missing
/// response) restarts the flow long before the retransmission timer would.
///
/// A probe is the timer's first retransmission brought forward, never one more: the caller
/// takes it from the retry budget and restarts the timer, and no other probe follows until the
/// responder shows progress. A silent responder therefore gets a request at most
/// 1 + retry_cnt times, as with the timer alone.
pub fn probe(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    let Some(index) = qp.sq.find_psn(qp.send.una) else {
        return;
    };
    let n = psn::diff(qp.send.una, qp.sq.entry(index).first_psn) as u32;
    if emit(qp, ctx, index, n, true).is_ok() {
        qp.send.probed = Some(qp.send.una);
        counters::bump(&ctx.counters.tail_probes);
        ctx.event(Event::Probe {
            qpn: qp.qpn,
            psn: qp.send.una,
        });
    }
}

/// How long the line may stay quiet with packets unacknowledged before a probe, or `None`
/// when the QP has no retransmission timer (timeout 0: nothing is ever sent again).
///
/// Four round trips, but never less than a quarter of the retransmission timeout: a NIC
/// engine is a thread, and on a busy machine (two cores, a dozen runnable threads) it may not
/// run for ten milliseconds. A probe sent because of that is a duplicate on a fault-free line
/// (and a duplicate READ is answered in full again), so the probe waits out such stalls and
/// still comes well before the timer.
///
/// With the low timer (`rto_low`) on a QP that has lost packets, the probe comes after the low
/// timeout instead: its duplicates are what the low timer accepts anyway, and a quiet line
/// with losses behind it is most likely one more. With the low timer on a QP that has not,
/// the floor is [`RTO_HIGH`] rather than a quarter of the timeout: such a QP's first loss
/// whose sequence NAK is lost too leaves the responder silently dropping the rest of the
/// window, and nothing but the probe ends that (the low timer runs only with a few packets
/// unacknowledged); a quarter of a 67 ms timeout was a thousand round trips of silence.
pub fn probe_interval(send: &SendState, timeout: u8, rto_low: bool) -> Option<Duration> {
    let t = retransmit_timeout(timeout)?;
    if rto_low && send.window.probe_floor().is_some() {
        if let Some(low) = self::rto_low(send, timeout) {
            return Some(low.min(t / 2));
        }
    }
    let floor = match send.window.probe_floor() {
        Some(lossy) => lossy,
        None if rto_low => RTO_HIGH,
        None => t / 4,
    };
    Some((send.srtt * 4).max(floor.min(t / 4)).min(t / 2))
}

/// Builds and sends packet `n` of request `index` (a probe always asks for an ACK).
fn emit(qp: &mut Qp, ctx: &mut Ctx<'_>, index: u32, n: u32, probe: bool) -> Result<(), WcStatus> {
    let mtu = qp.attrs.path_mtu.bytes();
    let entry = qp.sq.entry(index);
    let wqe = &entry.wqe;
    let packet_psn = psn::add(entry.first_psn, n);
    let opcode = opcode(qp.qp_type, &wqe.op, n, entry.npkts);
    let last = n + 1 >= entry.npkts || wqe.op.is_read_or_atomic();
    let span = trace_span!("tx", qpn = qp.qpn, psn = packet_psn, opcode = %opcode);
    let _enter = span.enter();

    let mut ext = Extensions::default();
    let offset = u64::from(n) * u64::from(mtu);
    let mut payload_len = 0usize;
    let mut dest_qp = qp.attrs.dest_qp_num;
    let mut path = qp.path;
    match wqe.op {
        SendOp::RdmaRead { remote_addr, rkey } => {
            ext.reth = Some(reth::Repr {
                va: remote_addr.wrapping_add(offset),
                r_key: rkey,
                dma_len: wqe.length.saturating_sub(offset) as u32,
            });
        }
        SendOp::AtomicCmpAndSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            ext.atomic_eth = Some(atomic_eth::Repr {
                va: remote_addr,
                r_key: rkey,
                swap_add: swap,
                compare,
            })
        }
        SendOp::AtomicFetchAndAdd {
            remote_addr,
            rkey,
            add,
        } => {
            ext.atomic_eth = Some(atomic_eth::Repr {
                va: remote_addr,
                r_key: rkey,
                swap_add: add,
                compare: 0,
            })
        }
        op => {
            payload_len = (wqe.length - offset).min(u64::from(mtu)) as usize;
            let headers = opcode.headers();
            if headers.contains(roce_wire::Headers::RETH) {
                if let SendOp::RdmaWrite { remote_addr, rkey }
                | SendOp::RdmaWriteWithImm {
                    remote_addr, rkey, ..
                } = op
                {
                    ext.reth = Some(reth::Repr {
                        va: remote_addr,
                        r_key: rkey,
                        dma_len: wqe.length as u32,
                    });
                }
            }
            if headers.contains(roce_wire::Headers::IMMDT) {
                if let SendOp::SendWithImm { imm } | SendOp::RdmaWriteWithImm { imm, .. } = op {
                    ext.immdt = Some(immdt::Repr { imm });
                }
            }
            if headers.contains(roce_wire::Headers::IETH) {
                if let SendOp::SendWithInv { rkey } = op {
                    ext.ieth = Some(ieth::Repr { r_key: rkey });
                }
            }
        }
    }
    if let Some(ud) = wqe.ud {
        let Some(ah) = ctx.ahs.get(&ud.ah) else {
            return Err(WcStatus::LocQpOpErr);
        };
        path = Some(ah.with_udp_src_port(super::udp_src_port(0, qp.qpn, ud.remote_qpn)));
        dest_qp = ud.remote_qpn;
        let q_key = if ud.remote_qkey & 0x8000_0000 != 0 {
            qp.attrs.qkey
        } else {
            ud.remote_qkey
        };
        ext.deth = Some(deth::Repr {
            q_key,
            src_qp: qp.qpn,
        });
    }
    let Some(path) = path else {
        return Err(WcStatus::LocQpOpErr);
    };

    let mut bth = bth::Repr::new(opcode, dest_qp, packet_psn);
    bth.p_key = qp.p_key;
    // Twice per window at least: a window that losses made small must not fill up with
    // packets nobody is asked to acknowledge.
    let every = ACK_REQ_EVERY.min(qp.send.window.packets() / 4).max(1);
    let ack_every = qp.send.since_ack_req + 1 >= every;
    bth.ack_req = qp.qp_type == QpType::Rc && (last || ack_every || probe);
    // The solicited event bit goes on the packet that completes a receive at the peer.
    bth.solicited = last
        && wqe.flags.contains(SendFlags::SOLICITED)
        && matches!(
            wqe.op,
            SendOp::Send
                | SendOp::SendWithImm { .. }
                | SendOp::SendWithInv { .. }
                | SendOp::RdmaWriteWithImm { .. }
        );
    let repr = path.frame(bth, ext, payload_len);

    let pd = qp.pd;
    let inline = wqe.is_inline();
    let mrs = ctx.mrs;
    let result = ctx.out.send(&repr, &mut |dst| {
        if dst.is_empty() {
            return Ok(());
        }
        if inline {
            let start = offset as usize;
            dst.copy_from_slice(&wqe.inline[start..start + dst.len()]);
            Ok(())
        } else {
            gather(mrs, pd, &wqe.sges, offset, dst)
        }
    });
    if let Err(error) = result {
        ctx.event(Event::LocalAccessError { error });
        return Err(WcStatus::LocProtErr);
    }
    if payload_len > 0 {
        counters::add(&ctx.counters.dma_read_bytes, payload_len as u64);
    }
    ctx.event(Event::PacketSent {
        payload: payload_len,
        ack_req: bth.ack_req,
    });
    if probe {
        return Ok(());
    }
    qp.send.since_ack_req = if bth.ack_req {
        0
    } else {
        qp.send.since_ack_req + 1
    };
    let end = if wqe.op.is_read_or_atomic() {
        psn::add(packet_psn, qp.sq.entry(index).npkts - n)
    } else {
        psn::add(packet_psn, 1)
    };
    if psn::before(packet_psn, qp.send.high) {
        counters::bump(&ctx.counters.retransmitted_packets);
    } else {
        qp.send.high = end;
        // Time one fresh packet at a time to learn the round trip.
        if bth.ack_req && qp.send.rtt_sample.is_none() {
            qp.send.rtt_sample = Some((packet_psn, ctx.now));
        }
    }
    Ok(())
}
