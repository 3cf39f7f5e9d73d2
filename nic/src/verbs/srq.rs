//! A shared receive queue (`ibv_srq`): receive requests posted once for several QPs of a
//! protection domain, which take them in posting order whichever QP a message arrives on.

use std::sync::{Arc, Mutex};

use super::pd::PdInner;
use super::qp::PostQueue;
use super::VerbsError;
use crate::control::{Request, Response};
use crate::srq::SrqAttr;
use crate::types::{QpCap, RecvWr};
use crate::wqe;

pub(super) struct SrqInner {
    pub(super) pd: Arc<PdInner>,
    pub(super) srq: u32,
    pub(super) attr: SrqAttr,
    pub(super) rq: Mutex<PostQueue>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let _ = self.pd.ctx.call(Request::DestroySrq { srq: self.srq });
    }
}

/// A shared receive queue (`ibv_srq`). Its QPs hold it, so it outlives them.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    pub(super) inner: Arc<SrqInner>,
}

impl SharedReceiveQueue {
    /// The NIC's number for the queue.
    pub fn srq_num(&self) -> u32 {
        self.inner.srq
    }

    /// The sizes it was created with (`max_wr` possibly larger than asked).
    pub fn attr(&self) -> SrqAttr {
        self.inner.attr
    }

    /// `ibv_query_srq`: the sizes and the armed limit (0 once the limit event has fired).
    pub fn query(&self) -> Result<SrqAttr, VerbsError> {
        let ctx = &self.inner.pd.ctx;
        match ctx.call(Request::QuerySrq {
            srq: self.inner.srq,
        })? {
            Response::SrqAttr(a) => Ok(a),
            _ => Err(ctx.unexpected("query_srq")),
        }
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event at `limit` posted requests
    /// (0 disarms it).
    pub fn arm_limit(&self, limit: u32) -> Result<(), VerbsError> {
        let ctx = &self.inner.pd.ctx;
        match ctx.call(Request::ModifySrq {
            srq: self.inner.srq,
            srq_limit: limit,
        })? {
            Response::Done => Ok(()),
            _ => Err(ctx.unexpected("modify_srq")),
        }
    }

    /// Posts receive work requests (`ibv_post_srq_recv`). On an error, the requests before the
    /// failing one are posted and the rest are not.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        let ctx = &self.inner.pd.ctx;
        ctx.check_alive()?;
        let cap = QpCap {
            max_recv_wr: self.inner.attr.max_wr,
            max_recv_sge: self.inner.attr.max_sge,
            ..QpCap::default()
        };
        let mut q = self.inner.rq.lock().unwrap_or_else(|e| e.into_inner());
        let q = &mut *q;
        let mut result = Ok(());
        for wr in wrs {
            if q.producer.free() == 0 {
                result = Err(VerbsError::RecvQueueFull(q.producer.ring().capacity()));
                break;
            }
            if let Err(e) = wqe::encode_recv(&mut q.slot, wr, &cap) {
                result = Err(e.into());
                break;
            }
            q.producer.push(&q.slot);
        }
        q.producer.publish();
        result
    }
}
