//! The responder when its QP enters the error state: everything under way stops, and every
//! receive completes with a flush error.

use super::execute::complete_recv;
use crate::qp::Qp;
use crate::transport::Ctx;
use crate::types::{WcOpcode, WcStatus};

/// Stops everything under way (the QP entered the error state): no more answers.
pub fn stop(qp: &mut Qp) {
    qp.recv.in_message = None;
    qp.recv.replies.clear();
    qp.recv.ack_pending = None;
}

/// Completes every fetched receive with a flush error (the QP is in the error state).
pub fn flush_receives(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    if qp.recv.recv_active {
        complete_recv(qp, ctx, WcStatus::WrFlushErr, WcOpcode::Recv, 0, 0, 0);
    }
    while qp.rq.take(&mut qp.recv.recv).is_some() {
        qp.recv.recv_active = true;
        complete_recv(qp, ctx, WcStatus::WrFlushErr, WcOpcode::Recv, 0, 0, 0);
    }
    stop(qp);
}
