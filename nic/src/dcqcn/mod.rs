//! DCQCN, RoCEv2's congestion control as NICs implement it in hardware (Zhu et al., "Congestion
//! Control for Large-Scale RDMA Deployments", SIGCOMM 2015): switches mark packets CE instead of
//! dropping them when their queues grow (RED on ECN-capable traffic), the receiving QP — the
//! [notification point](np) — answers marks with CNPs, and the sending QP — the
//! [reaction point](rp) — cuts its rate on CNPs and raises it again while none come.
//!
//! Off unless the NIC is given [`Params`] (`roce nic --dcqcn`): Soft-RoCE has no congestion
//! control, and a NIC that paces or marks is not the peer a Soft-RoCE test expects. With it on,
//! every RoCE packet leaves ECT(0) (see [`crate::link::ecn::Ect`]), each QP — connected or UD —
//! has both ends, and the engine calls the hooks here: [`on_arrival`] for every packet a QP takes,
//! [`on_cnp`] for CNPs, [`may_send`] and [`sent`] around every packet the requester sends.

pub mod np;
pub mod params;
pub mod rp;

use std::sync::atomic::Ordering;
use std::time::Instant;

use roce_wire::{FrameRepr, NetworkRepr};
use tracing::{debug, trace};

pub use params::Params;

use crate::counters;
use crate::qp::Qp;
use crate::transport::Ctx;
use crate::types::QpType;

/// Both ends of DCQCN for one QP.
#[derive(Debug, Clone)]
pub struct QpCongestion {
    pub params: Params,
    pub np: np::NotificationPoint,
    pub rp: rp::ReactionPoint,
    /// The rate limiter refused the requester: when it may send again.
    blocked_until: Option<Instant>,
}

impl QpCongestion {
    pub fn new(params: Params, now: Instant) -> QpCongestion {
        QpCongestion {
            params,
            np: np::NotificationPoint::default(),
            rp: rp::ReactionPoint::new(params, now),
            blocked_until: None,
        }
    }
}

/// Whether the IP header says a switch on the way marked the packet CE.
pub fn is_ce(network: &NetworkRepr) -> bool {
    let bits = match *network {
        NetworkRepr::Ipv4 { ecn, .. } => ecn,
        NetworkRepr::Ipv6 { traffic_class, .. } => traffic_class,
        NetworkRepr::Grh { traffic_class, .. } => traffic_class,
    };
    bits & 3 == 3
}

/// A packet for `qp` arrived as `frame`: if it was marked CE, count it, and send the sending QP
/// a CNP unless one went to it within `np_min_time_between_cnps`. A connected QP's sender is its
/// peer; a UD QP's is the packet's source — the QP its DETH names, at the addresses the packet
/// came from (IBTA Annex A17: a CNP's destination QP is the QP whose packet was marked).
pub fn on_arrival(qp: &mut Qp, ctx: &mut Ctx<'_>, frame: &FrameRepr) {
    if !is_ce(&frame.network) {
        return;
    }
    counters::bump(&ctx.counters.ecn_ce_received);
    let Some(cc) = qp.congestion.as_deref_mut() else {
        return;
    };
    let repr = if qp.qp_type == QpType::Ud {
        let (Some(deth), Some(path)) = (frame.ext.deth, np::reply_path(frame)) else {
            return;
        };
        let Some((source, _)) = crate::transport::ip_addresses(&frame.network) else {
            return;
        };
        if !cc.np.on_ce_from(ctx.now, &cc.params, (source, deth.src_qp)) {
            return;
        }
        np::cnp(&path, deth.src_qp, frame.bth.p_key, &cc.params)
    } else {
        let Some(path) = qp.path else {
            return;
        };
        if !cc.np.on_ce(ctx.now, &cc.params) {
            return;
        }
        np::cnp(&path, qp.attrs.dest_qp_num, qp.p_key, &cc.params)
    };
    let _ = ctx.out.send(&repr, &mut |payload| {
        payload.copy_from_slice(&np::CNP_PAYLOAD);
        Ok(())
    });
    counters::bump(&ctx.counters.cnps_sent);
    debug!(
        qpn = qp.qpn,
        dest_qp = repr.bth.dest_qp,
        "packet marked CE: CNP sent"
    );
}

/// A CNP for a QP that does not exist arrived.
pub fn no_qp_for_cnp(counters: &crate::counters::Counters) {
    counters::bump(&counters.cnps_ignored);
    trace!("CNP for no QP: ignored");
}

/// A CNP for `qp` arrived: its reaction point cuts the rate.
pub fn on_cnp(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    let Some(cc) = qp.congestion.as_deref_mut() else {
        counters::bump(&ctx.counters.cnps_ignored);
        trace!("CNP for a QP without DCQCN: ignored");
        return;
    };
    counters::bump(&ctx.counters.cnps_received);
    let cuts = cc.rp.cuts;
    cc.rp.on_cnp(ctx.now);
    counters::add(&ctx.counters.dcqcn_rate_cuts, cc.rp.cuts - cuts);
    debug!(
        rate_mbps = cc.rp.rate() / 1e6,
        target_mbps = cc.rp.target() / 1e6,
        alpha = cc.rp.alpha(),
        "CNP: rate cut"
    );
}

/// Whether the requester may send `qp`'s next packet now (always, without DCQCN).
pub fn may_send(qp: &mut Qp, ctx: &Ctx<'_>) -> bool {
    let Some(cc) = qp.congestion.as_deref_mut() else {
        return true;
    };
    let cuts = cc.rp.cuts;
    let ok = cc.rp.may_send(ctx.now);
    counters::add(&ctx.counters.dcqcn_rate_cuts, cc.rp.cuts - cuts);
    cc.blocked_until = if ok { None } else { cc.rp.wait_until() };
    if !ok {
        counters::bump(&ctx.counters.dcqcn_throttled);
    }
    ok
}

/// The requester sent a packet of `qp`: the bytes that left since `tx_bytes_before` (the
/// NIC's `tx_bytes` counter before the packet) count against its rate.
pub fn sent(qp: &mut Qp, ctx: &Ctx<'_>, tx_bytes_before: u64) {
    if let Some(cc) = qp.congestion.as_deref_mut() {
        let now = ctx.counters.tx_bytes.load(Ordering::Relaxed);
        cc.rp.on_sent(now.wrapping_sub(tx_bytes_before));
    }
}

/// When a QP held back by its rate limiter may send again: a deadline for the engine's sleep.
pub fn wake_at(qp: &Qp) -> Option<Instant> {
    qp.congestion.as_deref().and_then(|cc| cc.blocked_until)
}
