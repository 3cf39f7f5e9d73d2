//! What the NIC decides, as values: every decision of the transport (and of the way in, where a
//! frame is parsed and its ICRC checked) is an [`Event`]. The transport hands its events to its
//! [`Output`](super::Output); the engine renders them as tracing logs ([`Event::log`], the one
//! place where their words are written), the simulator records them, and readers of the logs —
//! the demo — recognise them by their [`EventKind`], carried in every log line's `event` field,
//! never by the wording of the message.

use std::fmt;
use std::time::Duration;

use roce_hostmem::{Access, AccessError};
use roce_wire::aeth::{NakCode, Syndrome};
use roce_wire::Kind;
use tracing::{debug, info, trace, warn};

use crate::types::{QpState, SendOp, WcStatus};
use crate::wqe::WqeError;

/// Why the requester sends again from an earlier PSN (go-back-N).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoBackReason {
    /// The responder acknowledged past a READ or atomic whose answer never came.
    AnswerLost,
    /// The responder sent a PSN sequence error NAK.
    SequenceNak,
    /// A READ response arrived ahead of the one expected.
    ReadResponseMissing,
    /// An answer arrived past a READ or atomic still waiting for its own.
    AtomicOrReadAnswerMissing,
    /// The answer to a tail probe acknowledged less than was sent: the responder had not
    /// received the packet after the one it names, and dropped what followed it.
    ProbeAnswered,
}

impl GoBackReason {
    pub fn as_str(self) -> &'static str {
        match self {
            GoBackReason::AnswerLost => "answer to a READ or atomic lost",
            GoBackReason::SequenceNak => "PSN sequence error",
            GoBackReason::ReadResponseMissing => "READ response missing",
            GoBackReason::AtomicOrReadAnswerMissing => "atomic or READ answer missing",
            GoBackReason::ProbeAnswered => "a probe's answer shows a gap",
        }
    }
}

/// Why the responder refuses a request (it answers with the NAK the IBTA prescribes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// FIRST where a MIDDLE or LAST was due, or the reverse (IBTA 9.7.5.1.2).
    OpcodeOutOfSequence,
    /// A FIRST or MIDDLE packet not of the path MTU, or any packet above it (C9-88, C9-89).
    PayloadLength { len: usize, mtu: usize },
    /// The QP's access flags do not allow the operation.
    QpAccess { needs: Access, qp_access: Access },
    /// IBTA C9-94: one RDMA request moves at most 2^31 bytes.
    DmaLengthTooLong { dma_len: u32 },
    /// An opcode this responder does not execute.
    Unsupported,
    /// A SEND longer than the receive posted for it.
    ReceiveTooShort { needed: u64, posted: u64 },
    /// The posted receive's buffers are not accessible.
    ReceiveNotAccessible { error: AccessError },
    /// SEND with Invalidate: no memory here may be invalidated by a peer.
    Invalidate { rkey: u32 },
    /// The R_Key check failed.
    Memory { error: AccessError },
    /// WRITE data beyond, or short of, the RETH's DMA length.
    WriteLength { len: u64, end: u64 },
}

/// Why a QP moved to the error state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCause {
    /// A send request failed: its completion carries the status.
    SendFailed { status: WcStatus },
    /// The responder refused a request with a NAK (invalid request, access or operational).
    RequestRefused { psn: u32, nak: NakCode },
    /// The memory a READ reply was reading went away under it.
    ReadSourceGone { psn: u32 },
    /// A completion queue of the QP overran.
    CqOverrun,
    /// The host asked for it (modify to ERR), or the connection manager, or the device stopped.
    Requested,
}

/// Which of a send request's answers could not be placed in the requester's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    ReadData,
    AtomicResult,
}

/// A decision of the NIC, with the numbers it was taken on.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    // The way in.
    FrameIn {
        len: usize,
    },
    IcrcOk,
    BadIcrc {
        expected: u32,
        found: u32,
    },
    MemoryRegistered {
        lkey: u32,
        rkey: u32,
        va: u64,
        len: u64,
        access: Access,
    },

    // The responder.
    BadState {
        state: QpState,
    },
    InSequence,
    /// A packet ahead of the expected PSN, the first of its gap: a sequence NAK goes out.
    SequenceNak {
        expected: u32,
    },
    /// UC: a packet was lost, so the message in progress is dropped.
    UcMessageLost {
        expected: u32,
    },
    Refused(Refusal),
    RnrNakSent {
        qpn: u32,
        psn: u32,
    },
    MalformedReceive {
        error: WqeError,
    },
    /// A receive taken from a shared receive queue left fewer posted than its armed limit:
    /// the limit event (IBV_EVENT_SRQ_LIMIT_REACHED) fires and the limit is disarmed.
    SrqLimitReached {
        srqn: u32,
        qpn: u32,
    },
    RkeyChecked {
        write: bool,
        rkey: u32,
        va: u64,
        len: u64,
        npkts: u32,
    },
    SendPlaced {
        offset: u64,
        len: usize,
    },
    WritePlaced {
        region: Option<&'a str>,
        region_offset: usize,
        len: usize,
    },
    AtomicExecuted {
        region: Option<&'a str>,
        region_offset: usize,
        original: u64,
    },
    Duplicate {
        expected: u32,
    },
    DuplicateReadReplayed {
        first_psn: u32,
    },
    DuplicateReadUnknown,
    AtomicReplayed {
        original: u64,
    },
    DuplicateAtomicUnknown,
    AckHeld {
        psn: u32,
    },
    AckSent {
        psn: u32,
        syndrome: Syndrome,
    },
    AtomicAckSent {
        psn: u32,
        original: u64,
    },
    ReadResponseSent {
        psn: u32,
        len: u64,
    },
    ReadSourceGone {
        error: AccessError,
    },
    QkeyMismatch {
        q_key: u32,
        expected: u32,
    },
    UdNoReceive,
    UdDelivered {
        len: usize,
        src_qp: u32,
    },
    ReceiveCompleted {
        wr_id: u64,
        status: WcStatus,
        len: u32,
    },

    // The requester.
    MalformedSendRequest {
        error: WqeError,
    },
    PacketSent {
        payload: usize,
        ack_req: bool,
    },
    LocalAccessError {
        error: AccessError,
    },
    Probe {
        qpn: u32,
        psn: u32,
    },

    // The completer.
    StaleResponse {
        una: u32,
        high: u32,
    },
    NakReceived {
        qpn: u32,
        psn: u32,
        nak: NakCode,
    },
    RnrWait {
        qpn: u32,
        psn: u32,
        wait: Duration,
    },
    RnrWaitOver {
        qpn: u32,
        psn: u32,
    },
    BadResponse {
        kind: Kind,
        len: usize,
    },
    AnswerNotPlaced {
        answer: Answer,
        error: AccessError,
    },
    ReadResponsePlaced {
        offset: u64,
        len: usize,
    },
    AtomicResultPlaced {
        original: u64,
    },
    GoBack {
        qpn: u32,
        psn: u32,
        why: GoBackReason,
    },
    RetransmitTimeout(Timeout),
    RetriesExhausted {
        qpn: u32,
    },
    SendCompleted {
        qpn: u32,
        wr_id: u64,
        status: WcStatus,
    },

    // The QP.
    QpError {
        qpn: u32,
        cause: ErrorCause,
    },
}

/// The state of a QP when its retransmission timer fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout {
    pub qpn: u32,
    pub psn: u32,
    /// The low timer fired (IRN's RTO_low, which spends no retry), not the configured one.
    pub low: bool,
    pub retries_left: u8,
    pub high: u32,
    pub peer_high: u32,
    pub head_op: SendOp,
    pub head_first: u32,
    pub head_npkts: u32,
    pub head_responses: u32,
    pub head_sent: u32,
    pub next: u32,
}

macro_rules! kinds {
    ($($kind:ident => $name:literal,)*) => {
        /// An [`Event`] without its numbers: what a reader of the logs matches on. Its
        /// [`name`](EventKind::name) is the `event` field of every log line.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventKind { $($kind,)* }

        impl EventKind {
            pub const ALL: &[EventKind] = &[$(EventKind::$kind,)*];

            pub fn name(self) -> &'static str {
                match self { $(EventKind::$kind => $name,)* }
            }

            /// The kind a log line's `event` field names.
            pub fn from_name(name: &str) -> Option<EventKind> {
                match name { $($name => Some(EventKind::$kind),)* _ => None }
            }
        }
    };
}

kinds! {
    FrameIn => "frame_in",
    IcrcOk => "icrc_ok",
    BadIcrc => "bad_icrc",
    MemoryRegistered => "memory_registered",
    BadState => "bad_state",
    InSequence => "in_sequence",
    SequenceNak => "sequence_nak",
    UcMessageLost => "uc_message_lost",
    Refused => "refused",
    RnrNakSent => "rnr_nak_sent",
    MalformedReceive => "malformed_receive",
    SrqLimitReached => "srq_limit_reached",
    WriteAllowed => "write_allowed",
    ReadAllowed => "read_allowed",
    SendPlaced => "send_placed",
    WritePlaced => "write_placed",
    AtomicExecuted => "atomic_executed",
    Duplicate => "duplicate",
    DuplicateReadReplayed => "duplicate_read_replayed",
    DuplicateReadUnknown => "duplicate_read_unknown",
    AtomicReplayed => "atomic_replayed",
    DuplicateAtomicUnknown => "duplicate_atomic_unknown",
    AckHeld => "ack_held",
    AckSent => "ack_sent",
    AtomicAckSent => "atomic_ack_sent",
    ReadResponseSent => "read_response_sent",
    ReadSourceGone => "read_source_gone",
    QkeyMismatch => "qkey_mismatch",
    UdNoReceive => "ud_no_receive",
    UdDelivered => "ud_delivered",
    ReceiveCompleted => "receive_completed",
    MalformedSendRequest => "malformed_send_request",
    PacketSent => "packet_sent",
    LocalAccessError => "local_access_error",
    Probe => "probe",
    StaleResponse => "stale_response",
    NakReceived => "nak_received",
    RnrWait => "rnr_wait",
    RnrWaitOver => "rnr_wait_over",
    BadResponse => "bad_response",
    AnswerNotPlaced => "answer_not_placed",
    ReadResponsePlaced => "read_response_placed",
    AtomicResultPlaced => "atomic_result_placed",
    GoBack => "go_back",
    RetransmitTimeout => "retransmit_timeout",
    RetriesExhausted => "retries_exhausted",
    SendCompleted => "send_completed",
    QpError => "qp_error",
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A key as the logs show it: in hex.
struct Hex(u32);

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

fn hex32(v: u32) -> Hex {
    Hex(v)
}

impl Event<'_> {
    pub fn kind(&self) -> EventKind {
        use EventKind as K;
        match self {
            Event::FrameIn { .. } => K::FrameIn,
            Event::IcrcOk => K::IcrcOk,
            Event::BadIcrc { .. } => K::BadIcrc,
            Event::MemoryRegistered { .. } => K::MemoryRegistered,
            Event::BadState { .. } => K::BadState,
            Event::InSequence => K::InSequence,
            Event::SequenceNak { .. } => K::SequenceNak,
            Event::UcMessageLost { .. } => K::UcMessageLost,
            Event::Refused(_) => K::Refused,
            Event::RnrNakSent { .. } => K::RnrNakSent,
            Event::MalformedReceive { .. } => K::MalformedReceive,
            Event::SrqLimitReached { .. } => K::SrqLimitReached,
            Event::RkeyChecked { write: true, .. } => K::WriteAllowed,
            Event::RkeyChecked { write: false, .. } => K::ReadAllowed,
            Event::SendPlaced { .. } => K::SendPlaced,
            Event::WritePlaced { .. } => K::WritePlaced,
            Event::AtomicExecuted { .. } => K::AtomicExecuted,
            Event::Duplicate { .. } => K::Duplicate,
            Event::DuplicateReadReplayed { .. } => K::DuplicateReadReplayed,
            Event::DuplicateReadUnknown => K::DuplicateReadUnknown,
            Event::AtomicReplayed { .. } => K::AtomicReplayed,
            Event::DuplicateAtomicUnknown => K::DuplicateAtomicUnknown,
            Event::AckHeld { .. } => K::AckHeld,
            Event::AckSent { .. } => K::AckSent,
            Event::AtomicAckSent { .. } => K::AtomicAckSent,
            Event::ReadResponseSent { .. } => K::ReadResponseSent,
            Event::ReadSourceGone { .. } => K::ReadSourceGone,
            Event::QkeyMismatch { .. } => K::QkeyMismatch,
            Event::UdNoReceive => K::UdNoReceive,
            Event::UdDelivered { .. } => K::UdDelivered,
            Event::ReceiveCompleted { .. } => K::ReceiveCompleted,
            Event::MalformedSendRequest { .. } => K::MalformedSendRequest,
            Event::PacketSent { .. } => K::PacketSent,
            Event::LocalAccessError { .. } => K::LocalAccessError,
            Event::Probe { .. } => K::Probe,
            Event::StaleResponse { .. } => K::StaleResponse,
            Event::NakReceived { .. } => K::NakReceived,
            Event::RnrWait { .. } => K::RnrWait,
            Event::RnrWaitOver { .. } => K::RnrWaitOver,
            Event::BadResponse { .. } => K::BadResponse,
            Event::AnswerNotPlaced { .. } => K::AnswerNotPlaced,
            Event::ReadResponsePlaced { .. } => K::ReadResponsePlaced,
            Event::AtomicResultPlaced { .. } => K::AtomicResultPlaced,
            Event::GoBack { .. } => K::GoBack,
            Event::RetransmitTimeout(_) => K::RetransmitTimeout,
            Event::RetriesExhausted { .. } => K::RetriesExhausted,
            Event::SendCompleted { .. } => K::SendCompleted,
            Event::QpError { .. } => K::QpError,
        }
    }

    /// Writes the event as a tracing log line: the one place the NIC's decisions are put into
    /// words. Every line carries the event's kind in its `event` field.
    ///
    /// The events of every packet's good path are trace lines, and trace is almost always off:
    /// those return at once, without the call and the per-line checks of [`Event::write_log`]
    /// (a few percent of a small message's instructions).
    #[inline]
    pub fn log(&self) {
        if self.is_per_packet() && !tracing::enabled!(tracing::Level::TRACE) {
            return;
        }
        self.write_log();
    }

    /// Whether the event is one of those most packets make on their good path (all of them
    /// trace lines).
    #[inline]
    fn is_per_packet(&self) -> bool {
        matches!(
            self,
            Event::FrameIn { .. }
                | Event::IcrcOk
                | Event::InSequence
                | Event::RkeyChecked { .. }
                | Event::SendPlaced { .. }
                | Event::WritePlaced { .. }
                | Event::AckHeld { .. }
                | Event::AckSent { .. }
                | Event::ReadResponseSent { .. }
                | Event::ReadResponsePlaced { .. }
                | Event::ReceiveCompleted { .. }
                | Event::PacketSent { .. }
                | Event::SendCompleted { .. }
        )
    }

    fn write_log(&self) {
        let event = self.kind().name();
        match *self {
            Event::FrameIn { len } => trace!(event, len, "frame in: headers parsed"),
            Event::IcrcOk => trace!(event, "ICRC ok"),
            Event::BadIcrc { expected, found } => debug!(
                event,
                expected = format_args!("{expected:#010x}"),
                found = format_args!("{found:#010x}"),
                "bad ICRC: packet dropped"
            ),
            Event::MemoryRegistered {
                lkey,
                rkey,
                va,
                len,
                access,
            } => info!(
                event,
                lkey = %hex32(lkey),
                rkey = %hex32(rkey),
                va = format_args!("{va:#x}"),
                len,
                %access,
                "memory registered"
            ),
            Event::BadState { state } => trace!(
                event,
                state = %state,
                "QP does not accept requests in this state"
            ),
            Event::InSequence => trace!(event, "PSN in sequence"),
            Event::SequenceNak { expected } => debug!(
                event,
                expected, "packet ahead of the expected PSN: sequence NAK"
            ),
            Event::UcMessageLost { expected } => {
                debug!(event, expected, "UC packet lost: message dropped")
            }
            Event::Refused(refusal) => log_refusal(event, refusal),
            Event::RnrNakSent { qpn, psn } => {
                info!(event, qpn, psn, "SEND with no receive posted: RNR NAK")
            }
            Event::MalformedReceive { ref error } => {
                debug!(event, error = %error, "malformed receive request")
            }
            Event::SrqLimitReached { srqn, qpn } => {
                info!(
                    event,
                    srqn, qpn, "SRQ limit reached: limit event, limit disarmed"
                )
            }
            Event::RkeyChecked {
                write: true,
                rkey,
                va,
                len,
                ..
            } => trace!(
                event,
                rkey = %hex32(rkey),
                va = format_args!("{va:#x}"),
                len,
                "rkey checked: WRITE allowed"
            ),
            Event::RkeyChecked {
                write: false,
                rkey,
                va,
                len,
                npkts,
            } => trace!(
                event,
                rkey = %hex32(rkey),
                va = format_args!("{va:#x}"),
                len,
                npkts,
                "rkey checked: READ allowed"
            ),
            Event::SendPlaced { offset, len } => {
                trace!(event, offset, len, "SEND data placed in the posted receive")
            }
            Event::WritePlaced {
                region,
                region_offset,
                len,
            } => trace!(
                event,
                region = region.unwrap_or("-"),
                region_offset,
                len,
                "DMA: WRITE data placed in host memory"
            ),
            Event::AtomicExecuted {
                region,
                region_offset,
                original,
            } => trace!(
                event,
                region = region.unwrap_or("-"),
                region_offset,
                original,
                "atomic executed on host memory"
            ),
            Event::Duplicate { expected } => trace!(event, expected, "duplicate request"),
            Event::DuplicateReadReplayed { first_psn } => trace!(
                event,
                first_psn,
                "duplicate READ answered again from memory"
            ),
            Event::DuplicateReadUnknown => {
                trace!(event, "duplicate READ outside any remembered READ: dropped")
            }
            Event::AtomicReplayed { original } => debug!(
                event,
                original, "duplicate atomic answered from the saved result"
            ),
            Event::DuplicateAtomicUnknown => {
                trace!(event, "duplicate atomic not remembered: dropped")
            }
            Event::AckHeld { psn } => trace!(
                event,
                psn,
                "ACK held until the READ responses before it are sent"
            ),
            Event::AckSent { psn, syndrome } => {
                trace!(event, psn, syndrome = %syndrome, "ACK sent")
            }
            Event::AtomicAckSent { psn, original } => {
                trace!(event, psn, original, "atomic ACK sent")
            }
            Event::ReadResponseSent { psn, len } => trace!(
                event,
                psn,
                len,
                "DMA: READ response data read from host memory"
            ),
            Event::ReadSourceGone { ref error } => {
                debug!(event, error = %error, "READ source no longer accessible")
            }
            Event::QkeyMismatch { q_key, expected } => debug!(
                event,
                q_key = %hex32(q_key),
                expected = %hex32(expected),
                "Q_Key mismatch: datagram dropped"
            ),
            Event::UdNoReceive => debug!(event, "UD datagram with no receive posted: dropped"),
            Event::UdDelivered { len, src_qp } => {
                trace!(event, len, src_qp, "UD datagram delivered")
            }
            Event::ReceiveCompleted { wr_id, status, len } => trace!(
                event,
                wr_id,
                status = %status,
                len,
                "receive completed"
            ),
            Event::MalformedSendRequest { ref error } => {
                debug!(event, error = %error, "malformed send request")
            }
            Event::PacketSent { payload, ack_req } => {
                trace!(event, payload, ack_req, "packet sent")
            }
            Event::LocalAccessError { ref error } => debug!(
                event,
                error = %error,
                "local memory of a send request is not accessible"
            ),
            Event::Probe { qpn, psn } => debug!(
                event,
                qpn, psn, "line quiet: probing with the oldest unacknowledged packet"
            ),
            Event::StaleResponse { una, high } => trace!(event, una, high, "stale response"),
            Event::NakReceived { qpn, psn, nak } => {
                info!(event, qpn, psn, nak = %nak, "NAK received")
            }
            Event::RnrWait { qpn, psn, wait } => info!(
                event,
                qpn,
                psn,
                wait_us = wait.as_micros() as u64,
                "RNR NAK: the peer has no receive posted; waiting"
            ),
            Event::RnrWaitOver { qpn, psn } => {
                debug!(event, qpn, psn, "RNR wait over: sending again")
            }
            Event::BadResponse { kind, len } => {
                debug!(event, kind = ?kind, len, "READ response out of shape")
            }
            Event::AnswerNotPlaced {
                answer: Answer::ReadData,
                ref error,
            } => debug!(event, error = %error, "READ response data cannot be placed"),
            Event::AnswerNotPlaced {
                answer: Answer::AtomicResult,
                ref error,
            } => debug!(event, error = %error, "atomic result cannot be placed"),
            Event::ReadResponsePlaced { offset, len } => {
                trace!(event, offset, len, "READ response data placed")
            }
            Event::AtomicResultPlaced { original } => {
                trace!(event, original, "atomic result placed")
            }
            Event::GoBack { qpn, psn, why } => {
                debug!(event, qpn, psn, why = why.as_str(), "go-back-N")
            }
            Event::RetransmitTimeout(t) => info!(
                event,
                qpn = t.qpn,
                psn = t.psn,
                low = t.low,
                retries_left = t.retries_left,
                high = t.high,
                peer_high = t.peer_high,
                head_op = ?t.head_op,
                head_first = t.head_first,
                head_npkts = t.head_npkts,
                head_responses = t.head_responses,
                head_sent = t.head_sent,
                next = t.next,
                "retransmission timeout: going back"
            ),
            Event::RetriesExhausted { qpn } => {
                info!(event, qpn, "retransmission retries exhausted")
            }
            Event::SendCompleted { qpn, wr_id, status } => trace!(
                event,
                qpn,
                wr_id,
                status = %status,
                "send request completed"
            ),
            Event::QpError { qpn, cause } => log_qp_error(event, qpn, cause),
        }
    }
}

fn log_refusal(event: &str, refusal: Refusal) {
    match refusal {
        Refusal::OpcodeOutOfSequence => debug!(event, "opcode out of sequence"),
        Refusal::PayloadLength { len, mtu } => {
            debug!(event, len, mtu, "payload length does not fit the path MTU")
        }
        Refusal::QpAccess { needs, qp_access } => debug!(
            event,
            needs = %needs,
            qp_access = %qp_access,
            "the QP does not allow this operation"
        ),
        Refusal::DmaLengthTooLong { dma_len } => {
            debug!(event, dma_len, "RETH DMA length above 2^31")
        }
        Refusal::Unsupported => debug!(event, "operation not supported by this responder"),
        Refusal::ReceiveTooShort { needed, posted } => {
            debug!(event, needed, posted, "SEND longer than the posted receive")
        }
        Refusal::ReceiveNotAccessible { error } => {
            debug!(event, error = %error, "receive buffer not accessible")
        }
        Refusal::Invalidate { rkey } => debug!(
            event,
            rkey = %hex32(rkey),
            "SEND with Invalidate: no memory here may be invalidated by a peer"
        ),
        Refusal::Memory { error } => debug!(event, error = %error, "memory access refused"),
        Refusal::WriteLength { len, end } => {
            debug!(event, len, end, "WRITE data does not match its DMA length")
        }
    }
}

fn log_qp_error(event: &str, qpn: u32, cause: ErrorCause) {
    match cause {
        ErrorCause::SendFailed { status } => info!(
            event,
            qpn,
            status = %status,
            "send request failed: QP to error"
        ),
        ErrorCause::RequestRefused { psn, nak } => info!(
            event,
            qpn,
            psn,
            nak = %nak,
            "request refused: QP to error"
        ),
        ErrorCause::ReadSourceGone { psn } => {
            info!(event, qpn, psn, "READ source gone: QP to error")
        }
        ErrorCause::CqOverrun => warn!(event, qpn, "its completion queue overran: QP to error"),
        ErrorCause::Requested => debug!(event, qpn, "QP to error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_found_by_its_name() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_name(kind.name()), Some(*kind));
        }
        assert_eq!(EventKind::from_name("ACK sent"), None);
    }

    /// The levels of the lines a subscriber is given.
    struct Levels(std::sync::Arc<std::sync::Mutex<Vec<tracing::Level>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Levels {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            self.0.lock().unwrap().push(*event.metadata().level());
        }
    }

    /// The lines `event` writes with every level enabled, and with only DEBUG and above.
    fn logged(event: &Event<'_>) -> (Vec<tracing::Level>, Vec<tracing::Level>) {
        use tracing_subscriber::layer::SubscriberExt;
        let mut runs = [tracing::Level::TRACE, tracing::Level::DEBUG].map(|max| {
            let levels: std::sync::Arc<std::sync::Mutex<Vec<_>>> = std::sync::Arc::default();
            let subscriber = tracing_subscriber::registry()
                .with(Levels(std::sync::Arc::clone(&levels)))
                .with(tracing_subscriber::filter::LevelFilter::from_level(max));
            tracing::subscriber::with_default(subscriber, || event.log());
            let written = std::mem::take(&mut *levels.lock().unwrap());
            written
        });
        (std::mem::take(&mut runs[0]), std::mem::take(&mut runs[1]))
    }

    #[test]
    fn per_packet_events_are_trace_lines_and_are_still_written_when_trace_is_on() {
        let per_packet = [
            Event::FrameIn { len: 64 },
            Event::IcrcOk,
            Event::InSequence,
            Event::RkeyChecked {
                write: true,
                rkey: 0x100,
                va: 0x1000,
                len: 64,
                npkts: 1,
            },
            Event::SendPlaced { offset: 0, len: 8 },
            Event::WritePlaced {
                region: Some("r"),
                region_offset: 0,
                len: 64,
            },
            Event::AckHeld { psn: 1 },
            Event::AckSent {
                psn: 1,
                syndrome: Syndrome::Ack { credits: 31 },
            },
            Event::ReadResponseSent { psn: 2, len: 64 },
            Event::ReadResponsePlaced { offset: 0, len: 64 },
            Event::ReceiveCompleted {
                wr_id: 3,
                status: WcStatus::Success,
                len: 64,
            },
            Event::PacketSent {
                payload: 64,
                ack_req: true,
            },
            Event::SendCompleted {
                qpn: 17,
                wr_id: 1,
                status: WcStatus::Success,
            },
        ];
        for event in &per_packet {
            assert!(event.is_per_packet(), "{:?}", event.kind());
            assert_eq!(
                logged(event),
                (vec![tracing::Level::TRACE], vec![]),
                "{:?}",
                event.kind()
            );
        }
        // Another event is written whatever its level.
        let nak = Event::SequenceNak { expected: 5 };
        assert!(!nak.is_per_packet());
        assert_eq!(
            logged(&nak),
            (vec![tracing::Level::DEBUG], vec![tracing::Level::DEBUG])
        );
    }
}
