//! The rules `roce conform` checks: an identifier for `--allow` and the JSON, a one-line
//! statement, and where the rule comes from. Section numbers are those of the InfiniBand
//! Architecture Specification Vol. 1 (release 1.4) and its RoCEv2 annex A17; docs/conform.md
//! explains each rule and what an observer can and cannot tell.

use core::fmt;

/// One checked rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    OpcodeSequence,
    PayloadMtu,
    PathMtu,
    WriteLength,
    DmaLength,
    ReadPsnSpan,
    StartingPsn,
    ResendSame,
    ResendCause,
    NakGoBack,
    RnrWait,
    UcResend,
    AnswerUnsent,
    AckCoverage,
    Msn,
    AckCredits,
    ReadResponse,
    ReadResponsePsn,
    AtomicAckPsn,
    AtomicReplay,
    UdGsiQkey,
    UdPayload,
    UdSourceQp,
}

impl Rule {
    pub const ALL: [Rule; 23] = [
        Rule::OpcodeSequence,
        Rule::PayloadMtu,
        Rule::PathMtu,
        Rule::WriteLength,
        Rule::DmaLength,
        Rule::ReadPsnSpan,
        Rule::StartingPsn,
        Rule::ResendSame,
        Rule::ResendCause,
        Rule::NakGoBack,
        Rule::RnrWait,
        Rule::UcResend,
        Rule::AnswerUnsent,
        Rule::AckCoverage,
        Rule::Msn,
        Rule::AckCredits,
        Rule::ReadResponse,
        Rule::ReadResponsePsn,
        Rule::AtomicAckPsn,
        Rule::AtomicReplay,
        Rule::UdGsiQkey,
        Rule::UdPayload,
        Rule::UdSourceQp,
    ];

    /// The identifier `--allow` takes.
    pub const fn id(self) -> &'static str {
        match self {
            Rule::OpcodeSequence => "opcode-sequence",
            Rule::PayloadMtu => "payload-mtu",
            Rule::PathMtu => "path-mtu",
            Rule::WriteLength => "write-length",
            Rule::DmaLength => "dma-length",
            Rule::ReadPsnSpan => "read-psn-span",
            Rule::StartingPsn => "starting-psn",
            Rule::ResendSame => "resend-same",
            Rule::ResendCause => "resend-cause",
            Rule::NakGoBack => "nak-go-back",
            Rule::RnrWait => "rnr-wait",
            Rule::UcResend => "uc-no-resend",
            Rule::AnswerUnsent => "answer-unsent",
            Rule::AckCoverage => "ack-coverage",
            Rule::Msn => "msn",
            Rule::AckCredits => "ack-credits",
            Rule::ReadResponse => "read-response",
            Rule::ReadResponsePsn => "read-response-psn",
            Rule::AtomicAckPsn => "atomic-ack-psn",
            Rule::AtomicReplay => "atomic-replay",
            Rule::UdGsiQkey => "ud-gsi-qkey",
            Rule::UdPayload => "ud-payload",
            Rule::UdSourceQp => "ud-source-qp",
        }
    }

    /// What the rule says.
    pub const fn statement(self) -> &'static str {
        match self {
            Rule::OpcodeSequence => {
                "a message's packets are FIRST, MIDDLE..., LAST or one ONLY, of one operation"
            }
            Rule::PayloadMtu => "FIRST and MIDDLE payloads are the path MTU, LAST and ONLY at most it",
            Rule::PathMtu => "a FIRST or MIDDLE payload is one of the path MTUs, the same all along",
            Rule::WriteLength => "a WRITE's payloads add up to its RETH DMA length",
            Rule::DmaLength => "a RETH DMA length is at most 2^31",
            Rule::ReadPsnSpan => "a READ reserves one PSN per response packet; the next request follows them",
            Rule::StartingPsn => "the first request carries the starting PSN the CM exchanged",
            Rule::ResendSame => "a resent packet is the packet first sent with that PSN",
            Rule::ResendCause => {
                "a resend follows a NAK, an RNR NAK, a timeout (however short) or a lost answer (an implied NAK), never an answer received"
            }
            Rule::NakGoBack => "after a sequence or RNR NAK the requester resends from the NAK's PSN",
            Rule::RnrWait => "after an RNR NAK the requester waits the timer it carries",
            Rule::UcResend => "UC never resends",
            Rule::AnswerUnsent => "an answer names a PSN that was sent",
            Rule::AckCoverage => "an ACK covers only PSNs the responder has: not one it NAKed and never got again (a copy crossing the NAK counts)",
            Rule::Msn => "the MSN counts the messages the responder completed",
            Rule::AckCredits => {
                "an RC responder's credit count falls between two ACKs by at most the receive-consuming messages sent in between"
            }
            Rule::ReadResponse => "READ responses: FIRST/MIDDLE/LAST or ONLY, sizes by the DMA length and path MTU",
            Rule::ReadResponsePsn => "a READ response carries a PSN its READ reserved",
            Rule::AtomicAckPsn => "an atomic ACK carries the PSN of an atomic request",
            Rule::AtomicReplay => "a duplicate atomic is answered with the saved result, not executed again",
            Rule::UdGsiQkey => "a datagram to QP1 carries the GSI Q_Key 0x80010000",
            Rule::UdPayload => "a datagram's payload fits the path MTU (at most 4096 bytes)",
            Rule::UdSourceQp => "a datagram's source QP is a real QP (not QP0, which RoCE has not)",
        }
    }

    /// Where the rule comes from.
    pub const fn citation(self) -> &'static str {
        match self {
            Rule::OpcodeSequence => "IBTA 9.4 (message packets), 9.7.5.1.3 (opcode sequence check)",
            Rule::PayloadMtu | Rule::PathMtu => {
                "IBTA 9.4 (packet payload sizes), 9.7.5.1.4 (length check)"
            }
            Rule::WriteLength => "IBTA 9.4.3 (RDMA WRITE: DMA length), 9.7.5.1.4",
            Rule::DmaLength => "IBTA C9-94",
            Rule::ReadPsnSpan => "IBTA 9.7.1 (PSNs: a READ takes one per response packet)",
            Rule::StartingPsn => "IBTA 12.6.5 and 12.6.8 (REQ and REP starting PSN)",
            Rule::ResendSame => "IBTA 9.7.6.2 (retried requests are identical)",
            Rule::ResendCause => {
                "IBTA 9.7.6.1 (requester retries: timeout, NAK, implied NAK), 9.7.5.2.1"
            }
            Rule::NakGoBack => "IBTA 9.7.5.2.2 (PSN sequence error NAK), 9.7.6.2",
            Rule::RnrWait => "IBTA 9.7.5.2.8 (RNR NAK timer)",
            Rule::UcResend => "IBTA 9.8.3 (UC: no acknowledgements, no retries)",
            Rule::AnswerUnsent => "IBTA 9.7.5.2 (responses answer requests received)",
            Rule::AckCoverage => "IBTA 9.7.5.2.1 (coalesced ACKs)",
            Rule::Msn => "IBTA 9.7.5.2.1 (MSN), C9-148 (READ counted when received)",
            Rule::AckCredits => {
                "IBTA 9.7.7.2 (end-to-end flow control: AETH credit count encoding, code 31 invalid)"
            }
            Rule::ReadResponse => "IBTA 9.4.4 (RDMA READ responses), 9.7.5.2",
            Rule::ReadResponsePsn => "IBTA 9.7.1, 9.7.5.2",
            Rule::AtomicAckPsn => "IBTA 9.4.5 (atomic ACK PSN)",
            Rule::AtomicReplay => "IBTA 9.7.5.1.2 (duplicate atomics answered from saved results)",
            Rule::UdGsiQkey => "IBTA 13.4.3 (GSI well-known Q_Key)",
            Rule::UdPayload => "IBTA 9.8.2 (UD: one packet, at most the path MTU)",
            Rule::UdSourceQp => "IBTA A17 (RoCE: no subnet manager, no QP0)",
        }
    }

    /// The rule an identifier names.
    pub fn from_id(id: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id() == id)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}
