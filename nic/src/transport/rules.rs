//! The transport rules that a packet's own fields and its neighbours decide, as pure functions:
//! how many packets a message or a READ's answer takes, where each packet sits in it, how long
//! its payload must be, which opcode may follow which, and what an answer acknowledges.
//!
//! Two parties use them: the transport (requester, responder and completer), which acts on them,
//! and `roce conform` (`roce_tools::conform`), which checks a capture's conversations against
//! them as a passive observer. Keeping one copy means the emulator and the checker cannot drift
//! apart: a rule changed here changes what the NIC sends and what the checker expects.

use roce_wire::aeth::Syndrome;
use roce_wire::{Kind, Position};

use super::psn;

/// The longest DMA length a RETH may carry (IBTA C9-94: a message is at most 2^31 bytes).
pub const MAX_DMA_LEN: u32 = 1 << 31;

/// The path MTUs the IBTA defines (256 to 4096 bytes); a FIRST or MIDDLE packet's payload is one
/// of them.
pub const PATH_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// Packets a message of `len` bytes takes at path MTU `mtu`, at least one (a zero-length message
/// is one ONLY packet). The same count gives the PSNs a READ request reserves for its answer
/// (IBTA 9.7.1: one PSN per READ response packet).
#[inline]
pub fn packets(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu.max(1))).max(1) as u32
}

/// Where packet `n` (from 0) of a message of `npkts` packets sits.
#[inline]
pub fn position(n: u32, npkts: u32) -> Position {
    match (n == 0, n + 1 >= npkts) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, true) => Position::Last,
        (false, false) => Position::Middle,
    }
}

/// Payload bytes of packet `n` of a message of `len` bytes: the path MTU, except the last.
#[inline]
pub fn packet_len(len: u64, n: u32, mtu: u32) -> u64 {
    len.saturating_sub(u64::from(n) * u64::from(mtu))
        .min(u64::from(mtu))
}

/// The READ response opcode of packet `n` of an answer of `npkts` packets.
#[inline]
pub fn read_response_kind(n: u32, npkts: u32) -> Kind {
    match position(n, npkts) {
        Position::Only => Kind::ReadResponseOnly,
        Position::First => Kind::ReadResponseFirst,
        Position::Last => Kind::ReadResponseLast,
        Position::Middle => Kind::ReadResponseMiddle,
    }
}

/// Whether a payload of `len` bytes fits its place in a message at path MTU `mtu`: FIRST and
/// MIDDLE packets carry exactly the MTU, LAST and ONLY packets at most the MTU (IBTA 9.7.1).
#[inline]
pub fn payload_fits(position: Position, len: usize, mtu: u32) -> bool {
    let mtu = mtu as usize;
    match position {
        Position::First | Position::Middle => len == mtu,
        Position::Last | Position::Only => len <= mtu,
    }
}

/// A message whose packets are still coming, as far as the opcode sequence is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Underway {
    /// The last packet ended a message (or none came yet): the next one must start one.
    #[default]
    Nothing,
    Send,
    Write,
}

impl Underway {
    /// What is under way after a request packet of `kind` at `position`.
    pub fn after(kind: Kind, position: Position) -> Underway {
        match (position.is_end(), kind.is_send(), kind.is_write()) {
            (false, true, _) => Underway::Send,
            (false, _, true) => Underway::Write,
            _ => Underway::Nothing,
        }
    }
}

/// Whether a request of `kind` at `position` may follow what is `underway` (IBTA 9.7.5.1.3,
/// the opcode sequence check): a started SEND continues with SEND MIDDLE or LAST, a started
/// WRITE with WRITE MIDDLE or LAST, and otherwise a new message starts (FIRST or ONLY, a READ or
/// an atomic).
#[inline]
pub fn sequence_ok(underway: Underway, kind: Kind, position: Position) -> bool {
    match underway {
        Underway::Send => kind.is_send() && !position.is_start(),
        Underway::Write => kind.is_write() && !position.is_start(),
        Underway::Nothing => position.is_start(),
    }
}

/// Whether `payload` more bytes of a WRITE, `offset` bytes into it, stay within its RETH DMA
/// length, and at the message's last packet make exactly that length.
#[inline]
pub fn write_fits(offset: u64, payload: u64, dma_len: u64, last: bool) -> bool {
    let end = offset + payload;
    end <= dma_len && (!last || end == dma_len)
}

/// What an answer for PSN `p` shows the responder has received: the PSN before which it has
/// everything. A NAK (sequence, error or RNR) names the first PSN it lacks or refuses, so it
/// acknowledges what came before; an ACK, a READ response or an atomic ACK acknowledges `p`
/// itself (IBTA 9.7.5.2: ACKs are cumulative).
#[inline]
pub fn received_before(syndrome: Option<Syndrome>, p: u32) -> u32 {
    match syndrome {
        Some(Syndrome::Nak(_)) | Some(Syndrome::RnrNak { .. }) => p,
        _ => psn::add(p, 1),
    }
}

/// The receive WQEs each AETH credit count code advertises (IBTA 9.7.7.2, end-to-end flow
/// control, and its table of credit count encodings; the same table as Linux's rdmavt
/// `credit_table`): codes 0 to 30. Code 31, [`roce_wire::aeth::UNLIMITED_CREDITS`], is the
/// "invalid" code: no credit information. The field is five bits, so every value is a code.
pub const CREDIT_COUNTS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// The credits an AETH credit count code advertises; `None` for code 31 (no information).
#[inline]
pub fn credits(code: u8) -> Option<u32> {
    CREDIT_COUNTS.get(usize::from(code & 0x1f)).copied()
}

/// The code a responder with `posted` receive WQEs left advertises: the largest count in the
/// table that is not more than it (a responder may not promise receives it has not got).
#[inline]
pub fn credit_code(posted: u32) -> u8 {
    CREDIT_COUNTS
        .partition_point(|&c| c <= posted)
        .saturating_sub(1) as u8
}

/// Whether an ACK advertising credit code `later` may follow one from the same responder
/// advertising `earlier`, when at most `consumed` receive-consuming messages (SENDs, RDMA
/// WRITEs with immediate) reached it in between. The host may post receives at any time,
/// unseen on the wire, so the count may always rise; it falls by one per message consumed,
/// at most, and the encoding rounds down: after 8 credits and one message, 6 (code 5) is the
/// least a responder with 7 receives left advertises. Code 31 says nothing either way.
#[inline]
pub fn credits_fall_ok(earlier: u8, later: u8, consumed: u32) -> bool {
    match (credits(earlier), credits(later)) {
        (Some(had), Some(has)) => {
            has >= CREDIT_COUNTS[usize::from(credit_code(had.saturating_sub(consumed)))]
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_splits_by_the_mtu_into_first_middle_last() {
        assert_eq!(packets(0, 1024), 1);
        assert_eq!(packets(1024, 1024), 1);
        assert_eq!(packets(1025, 1024), 2);
        assert_eq!(packets(65536, 4096), 16);
        let kinds: Vec<Kind> = (0..3).map(|n| read_response_kind(n, 3)).collect();
        assert_eq!(
            kinds,
            [
                Kind::ReadResponseFirst,
                Kind::ReadResponseMiddle,
                Kind::ReadResponseLast
            ]
        );
        assert_eq!(read_response_kind(0, 1), Kind::ReadResponseOnly);
        assert_eq!(packet_len(2500, 0, 1024), 1024);
        assert_eq!(packet_len(2500, 2, 1024), 452);
        assert_eq!(packet_len(0, 0, 1024), 0);
    }

    #[test]
    fn opcode_sequences_continue_what_was_started() {
        use Position::*;
        assert!(sequence_ok(Underway::Nothing, Kind::SendFirst, First));
        assert!(!sequence_ok(Underway::Nothing, Kind::SendMiddle, Middle));
        assert!(sequence_ok(Underway::Send, Kind::SendLast, Last));
        assert!(!sequence_ok(Underway::Send, Kind::WriteLast, Last));
        assert!(!sequence_ok(Underway::Write, Kind::ReadRequest, Only));
        assert_eq!(Underway::after(Kind::WriteFirst, First), Underway::Write);
        assert_eq!(Underway::after(Kind::WriteLast, Last), Underway::Nothing);
    }

    #[test]
    fn lengths_fit_the_mtu_and_the_dma_length() {
        assert!(payload_fits(Position::First, 1024, 1024));
        assert!(!payload_fits(Position::Middle, 1000, 1024));
        assert!(payload_fits(Position::Last, 1, 1024));
        assert!(!payload_fits(Position::Only, 1025, 1024));
        assert!(write_fits(0, 1024, 2048, false));
        assert!(!write_fits(1024, 1000, 2048, true));
        assert!(!write_fits(1024, 1025, 2048, false));
    }

    #[test]
    fn a_nak_acknowledges_what_came_before_it() {
        use roce_wire::aeth::NakCode;
        assert_eq!(received_before(Some(Syndrome::ack()), 5), 6);
        assert_eq!(
            received_before(Some(Syndrome::Nak(NakCode::PSN_SEQUENCE_ERROR)), 5),
            5
        );
        assert_eq!(received_before(None, psn::MASK), 0);
    }

    #[test]
    fn credits_fall_only_by_the_messages_consumed() {
        use roce_wire::aeth::UNLIMITED_CREDITS;
        assert_eq!(credits(0), Some(0));
        assert_eq!(credits(6), Some(8));
        assert_eq!(credits(30), Some(32768));
        assert_eq!(credits(UNLIMITED_CREDITS), None);
        assert_eq!(credit_code(7), 5);
        assert_eq!(credit_code(8), 6);
        assert_eq!(credit_code(100_000), 30);
        // 8 credits, one message consumed: 7 left, advertised as 6.
        assert!(credits_fall_ok(6, 5, 1));
        assert!(!credits_fall_ok(6, 4, 1));
        assert!(!credits_fall_ok(6, 5, 0));
        // Receives posted meanwhile: any rise.
        assert!(credits_fall_ok(3, 30, 0));
        // More consumed than advertised: anything down to zero.
        assert!(credits_fall_ok(3, 0, 5));
        assert!(credits_fall_ok(UNLIMITED_CREDITS, 0, 0));
        assert!(credits_fall_ok(6, UNLIMITED_CREDITS, 0));
    }
}
