//! The responder's checks of an in-sequence request, before anything is executed, and how a
//! request is refused: the NAK code and the reason reported.

use roce_hostmem::{Access, AccessError};
use roce_wire::aeth::NakCode;
use roce_wire::{bth, Extensions, Kind};

use super::{InMessage, MAX_DMA_LEN};
use crate::qp::Qp;
use crate::transport::event::Refusal;
use crate::transport::rules::{self, Underway};
use crate::transport::{Ctx, Event};

/// How a request is refused.
pub(super) enum Refuse {
    Nak(NakCode),
    /// RNR NAK: no receive posted.
    Rnr,
}

/// Refuses with `code`, reporting why.
pub(super) fn nak(ctx: &mut Ctx<'_>, code: NakCode, why: Refusal) -> Refuse {
    ctx.event(Event::Refused(why));
    Refuse::Nak(code)
}

/// A failed memory check: malformed (invalid request) or not allowed (remote access error).
pub(super) fn access_refusal(ctx: &mut Ctx<'_>, error: AccessError) -> Refuse {
    let code = if error.is_invalid_request() {
        NakCode::INVALID_REQUEST
    } else {
        NakCode::REMOTE_ACCESS_ERROR
    };
    nak(ctx, code, Refusal::Memory { error })
}

/// Checks an in-sequence request before anything is executed: the opcode sequence, the
/// payload length against the path MTU, the QP's access flags and the RETH's DMA length.
pub(super) fn check(
    qp: &Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
    payload: &[u8],
) -> Result<(), Refuse> {
    let opcode = bth.opcode;
    let kind = opcode.kind();
    let position = opcode.position();
    let underway = match qp.recv.in_message {
        Some(InMessage::Send) => Underway::Send,
        Some(InMessage::Write { .. }) => Underway::Write,
        None => Underway::Nothing,
    };
    if !rules::sequence_ok(underway, kind, position) {
        return Err(nak(
            ctx,
            NakCode::INVALID_REQUEST,
            Refusal::OpcodeOutOfSequence,
        ));
    }
    if !rules::payload_fits(position, payload.len(), qp.attrs.path_mtu.bytes()) {
        let (len, mtu) = (payload.len(), qp.attrs.path_mtu.bytes() as usize);
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
    Ok(())
}
