//! The UD responder: a datagram is one packet, checked against the Q_Key and delivered whole
//! with the 40-byte GRH area first, or dropped.

use roce_wire::Frame;

use super::execute::{complete_recv, take_receive};
use crate::counters;
use crate::qp::Qp;
use crate::transport::{scatter, Ctx, Event};
use crate::types::{wc_flags, Wc, WcOpcode, WcStatus};

/// A UD datagram: one packet, checked against the Q_Key, delivered whole with the 40-byte GRH
/// area first, or dropped.
pub(super) fn ud_receive(qp: &mut Qp, ctx: &mut Ctx<'_>, frame: &Frame<'_>) {
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
