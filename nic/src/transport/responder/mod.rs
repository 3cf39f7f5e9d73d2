//! The responder: executes the requests a peer sends. It checks each packet's PSN (expected,
//! duplicate, ahead), the opcode sequence, the QP's access rights and the lengths; resolves
//! R_Keys through the memory tables and writes or reads the target's mapped memory directly —
//! no host code runs; places SENDs into posted receives; and answers: coalesced ACKs, READ
//! responses segmented by the MTU, atomic ACKs, and the NAK the IBTA prescribes for each error
//! (sequence error once per gap, invalid request, remote access error, remote operational error,
//! RNR when a SEND finds no receive posted). Duplicates are re-acknowledged, never re-executed:
//! READs are answered again from memory and atomics from their saved result.
//!
//! Split by what it does: `checks` (before anything is executed), `execute`, `duplicates`,
//! `replies` (ACKs, NAKs, READ responses), `ud` and `flush` (the error state). This
//! module holds the receive-side state and the way in: the PSN check.

mod checks;
mod duplicates;
mod execute;
mod flush;
mod replies;
mod ud;

pub use flush::{flush_receives, stop};
pub use replies::{flush_ack, send_replies};

use std::collections::VecDeque;

use roce_wire::aeth::{NakCode, Syndrome};
use roce_wire::{Frame, Kind, Transport};
use tracing::trace_span;

use super::{psn, Ctx, ErrorCause, Event};
use crate::counters;
use crate::qp::Qp;
use crate::types::{QpState, QpType};
use crate::wqe::RecvWqe;
use checks::Refuse;
use replies::{reply_nak, send_nak};

pub use crate::transport::rules::MAX_DMA_LEN;

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
    Atomic {
        psn: u32,
        original: u64,
    },
    /// A sequence or RNR NAK: ahead of the READ responses before it, it would tell the
    /// requester they were lost (found by `roce conform`).
    Nak {
        psn: u32,
        syndrome: Syndrome,
    },
}

impl Reply {
    /// The first PSN the answer is for.
    fn psn(&self) -> u32 {
        match *self {
            Reply::Read(r) => r.first_psn,
            Reply::Atomic { psn, .. } | Reply::Nak { psn, .. } => psn,
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
    /// Highest PSN owed an ACK (sent once per batch of received frames, or as soon as
    /// [`ACK_EVERY`] packets wait for one).
    ack_pending: Option<u32>,
    /// Packets taken in sequence since the last ACK or NAK.
    since_ack: u32,
    /// UC: a packet was lost; drop everything until the next message starts.
    uc_dropping: bool,
}

impl RecvState {
    pub fn new(epsn: u32, cap: &crate::types::QpCap) -> RecvState {
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

/// The most packets one coalesced ACK answers: a batch longer than this is acknowledged as it
/// goes. The requester may have only a window of packets (at most 64) unacknowledged, and a
/// receive batch takes up to 64 frames: an ACK for a whole window at its end left the
/// responder's engine idle while the requester's built the next window (they took turns
/// instead of working at once). With an ACK every half window the requester builds the next
/// half while the responder takes in the rest — provided the ACK leaves at once: a link that
/// batches its sends (the UDP cable) would hold it until the end of the pass, after the rest
/// of the batch, so it is expedited ([`crate::transport::Output::expedite`]). Every ACK costs
/// both engines a frame (about 3,400 instructions together), so not more often.
pub const ACK_EVERY: u32 = 32;

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
        ud::ud_receive(qp, ctx, frame);
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
                counters::bump(&ctx.counters.naks_sent_psn_sequence);
                reply_nak(qp, ctx, epsn, Syndrome::Nak(NakCode::PSN_SEQUENCE_ERROR));
            }
            return;
        }
        if d < 0 {
            duplicates::duplicate(qp, ctx, bth, &frame.repr.ext);
            return;
        }
        ctx.event(Event::InSequence);
    } else if uc_resync(qp, ctx, p, kind) {
        return;
    }

    let ext = &frame.repr.ext;
    let checked = checks::check(qp, ctx, bth, ext, frame.payload());
    match checked.and_then(|()| execute::execute(qp, ctx, bth, ext, frame.payload())) {
        Ok(consumed) => {
            qp.recv.epsn = psn::add(p, consumed);
            qp.recv.nak_sent = false;
            if qp.qp_type == QpType::Rc
                && bth.ack_req
                && !kind.is_atomic()
                && kind != Kind::ReadRequest
            {
                qp.recv.ack_pending = Some(p);
                qp.recv.since_ack += 1;
                if qp.recv.since_ack >= ACK_EVERY {
                    replies::flush_ack(qp, ctx);
                    // The rest of the batch may take as long again: the requester, whose
                    // window this ACK opens, should not wait for it.
                    ctx.out.expedite();
                }
            } else {
                qp.recv.since_ack += 1;
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
            reply_nak(qp, ctx, p, Syndrome::RnrNak { timer });
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
