//! The responder's execution of in-sequence requests: SENDs into posted receives, WRITEs into
//! registered memory, READs queued for their responses, atomics on host memory; what it
//! remembers of READs and atomics for their duplicates; receive completions.

use roce_hostmem::Access;
use roce_wire::aeth::NakCode;
use roce_wire::{bth, Extensions, Kind};

use super::checks::{access_refusal, nak, Refuse};
use super::replies::reply_atomic;
use super::{InMessage, ReadReply, Reply, Resource};
use crate::counters;
use crate::qp::Qp;
use crate::srq;
use crate::transport::event::Refusal;
use crate::transport::{psn, rules, scatter, Ctx, Event};
use crate::types::{wc_flags, QpType, Wc, WcOpcode, WcStatus};
use crate::wqe::WqeError;

/// Executes an in-sequence request that passed the checks. Returns the PSNs it consumed.
pub(super) fn execute(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    bth: &bth::Repr,
    ext: &Extensions,
    payload: &[u8],
) -> Result<u32, Refuse> {
    let kind = bth.opcode.kind();
    match kind {
        k if k.is_send() => receive_send(qp, ctx, bth, ext, payload).map(|()| 1),
        k if k.is_write() => receive_write(qp, ctx, bth, ext, payload).map(|()| 1),
        Kind::ReadRequest => receive_read(qp, ctx, bth, ext),
        Kind::CompareSwap | Kind::FetchAdd => receive_atomic(qp, ctx, bth, ext).map(|()| 1),
        _ => Err(nak(ctx, NakCode::INVALID_REQUEST, Refusal::Unsupported)),
    }
}

/// Takes the next posted receive, if there is one.
pub(super) fn take_receive(qp: &mut Qp, ctx: &mut Ctx<'_>) -> bool {
    loop {
        match next_receive(qp, ctx) {
            None => return false,
            Some(Ok(())) => {
                qp.recv.recv_active = true;
                qp.recv.recv_offset = 0;
                return true;
            }
            Some(Err(error)) => {
                counters::bump(&ctx.counters.malformed_receives);
                ctx.event(Event::MalformedReceive { error });
                complete_recv(qp, ctx, WcStatus::LocLenErr, WcOpcode::Recv, 0, 0, 0);
            }
        }
    }
}

/// The oldest receive of the QP's own queue, or of its shared receive queue (whose limit event
/// a take may fire).
fn next_receive(qp: &mut Qp, ctx: &mut Ctx<'_>) -> Option<Result<(), WqeError>> {
    let Some(srq) = &qp.srq else {
        return qp.rq.take(&mut qp.recv.recv);
    };
    let mut srq = srq::lock(srq);
    let taken = srq.take(&mut qp.recv.recv)?;
    if taken.limit_reached {
        counters::bump(&ctx.counters.srq_limit_events);
        ctx.event(Event::SrqLimitReached {
            srqn: srq.srqn,
            qpn: qp.qpn,
        });
    }
    Some(taken.request)
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
    if !rules::write_fits(offset, payload.len() as u64, len, position.is_end()) {
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
            .and_then(|place| {
                // The message's last byte lands last, for hosts that poll it.
                if position.is_end() {
                    place.write_last(0, payload)
                } else {
                    place.write(0, payload)
                }
                .map(|()| place)
            }) {
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
    let npkts = rules::packets(len, qp.attrs.path_mtu.bytes());
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

/// Completes the receive being filled.
pub(super) fn complete_recv(
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
