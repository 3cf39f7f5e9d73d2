//! A queue pair (`ibv_qp`): work requests written into its rings, the doorbell rung.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::VerbsError;
use super::{context::LocalMr, cq::CompletionQueue, pd::PdInner, srq::SharedReceiveQueue};
use crate::control::{Request, Response};
use crate::ring::Producer;
use crate::types::{QpAttr, QpCap, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge};
use crate::wqe::{self};

pub(super) struct PostQueue {
    pub(super) producer: Producer,
    pub(super) slot: Vec<u8>,
    pub(super) inline: Vec<u8>,
}

pub(super) struct QpInner {
    pub(super) pd: Arc<PdInner>,
    pub(super) qpn: u32,
    pub(super) qp_type: QpType,
    pub(super) cap: QpCap,
    pub(super) sq: Mutex<PostQueue>,
    pub(super) rq: Mutex<PostQueue>,
    pub(super) _cqs: (CompletionQueue, CompletionQueue),
    /// The shared receive queue it takes its receives from (kept alive by the QP).
    pub(super) srq: Option<SharedReceiveQueue>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let _ = self.pd.ctx.call(Request::DestroyQp { qpn: self.qpn });
    }
}

/// A queue pair (`ibv_qp`).
#[derive(Clone)]
pub struct QueuePair {
    pub(super) inner: Arc<QpInner>,
}

impl QueuePair {
    pub fn qp_num(&self) -> u32 {
        self.inner.qpn
    }

    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The capabilities the QP was created with (possibly larger than asked).
    pub fn cap(&self) -> QpCap {
        self.inner.cap
    }

    /// `ibv_modify_qp`: the `Some` fields of `attr` are the attribute mask.
    pub fn modify(&self, attr: &QpAttr) -> Result<(), VerbsError> {
        match self.inner.pd.ctx.call(Request::ModifyQp {
            qpn: self.inner.qpn,
            attr: *attr,
        })? {
            Response::Done => Ok(()),
            _ => Err(self.inner.pd.ctx.unexpected("modify_qp")),
        }
    }

    pub fn query(&self) -> Result<QpAttr, VerbsError> {
        match self.inner.pd.ctx.call(Request::QueryQp {
            qpn: self.inner.qpn,
        })? {
            Response::QpAttr(a) => Ok(a),
            _ => Err(self.inner.pd.ctx.unexpected("query_qp")),
        }
    }

    /// What the NIC holds in flight for this QP (beyond verbs: for tests and tools).
    pub fn status(&self) -> Result<crate::control::QpStatus, VerbsError> {
        match self.inner.pd.ctx.call(Request::QpStatus {
            qpn: self.inner.qpn,
        })? {
            Response::QpStatus(s) => Ok(s),
            _ => Err(self.inner.pd.ctx.unexpected("a QP status query")),
        }
    }

    /// Posts send work requests and rings the doorbell once. On an error, the requests before
    /// the failing one are posted and the rest are not.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), VerbsError> {
        let ctx = &self.inner.pd.ctx;
        let cap = self.inner.cap;
        self.post_sends(wrs, |wr, out| {
            gather_inline(&ctx.mrs(), wr.sg_list, cap.max_inline_data, out)
        })
    }

    /// Like [`QueuePair::post_send`], for a caller that gathers the bytes of inline sends
    /// itself: `gather` fills the buffer for each request with the INLINE flag. A C program's
    /// inline data is read straight from its memory, registered or not, as libibverbs does.
    pub fn post_send_gathered(
        &self,
        wrs: &[SendWr<'_>],
        gather: impl FnMut(&SendWr<'_>, &mut Vec<u8>) -> Result<(), VerbsError>,
    ) -> Result<(), VerbsError> {
        self.post_sends(wrs, gather)
    }

    pub(super) fn post_sends(
        &self,
        wrs: &[SendWr<'_>],
        mut gather: impl FnMut(&SendWr<'_>, &mut Vec<u8>) -> Result<(), VerbsError>,
    ) -> Result<(), VerbsError> {
        let ctx = &self.inner.pd.ctx;
        ctx.check_alive()?;
        let cap = &self.inner.cap;
        let mut q = self.inner.sq.lock().unwrap_or_else(|e| e.into_inner());
        let q = &mut *q;
        let mut result = Ok(());
        for wr in wrs {
            let allowed = match self.inner.qp_type {
                QpType::Rc => true,
                QpType::Uc => !wr.op.is_read_or_atomic(),
                QpType::Ud => matches!(wr.op, SendOp::Send | SendOp::SendWithImm { .. }),
            };
            if !allowed {
                result = Err(VerbsError::Invalid(format!(
                    "a {} QP cannot post {:?}",
                    self.inner.qp_type, wr.op
                )));
                break;
            }
            if self.inner.qp_type == QpType::Ud && wr.ud.is_none() {
                result = Err(VerbsError::Invalid(
                    "a UD send needs a destination (address handle, QPN, Q_Key)".into(),
                ));
                break;
            }
            if self.inner.qp_type == QpType::Ud {
                let mtu = ctx.device.max_mtu.bytes();
                let len: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
                if len > u64::from(mtu) {
                    result = Err(VerbsError::Invalid(format!(
                        "a UD message of {len} bytes does not fit the {mtu}-byte MTU"
                    )));
                    break;
                }
            }
            if q.producer.free() == 0 {
                result = Err(VerbsError::SendQueueFull(q.producer.ring().capacity()));
                break;
            }
            let inline = if wr.flags.contains(SendFlags::INLINE) {
                if let Err(e) = gather(wr, &mut q.inline) {
                    result = Err(e);
                    break;
                }
                if q.inline.len() > cap.max_inline_data as usize {
                    result = Err(wqe::WqeError::InlineTooLong(
                        q.inline.len() as u64,
                        cap.max_inline_data,
                    )
                    .into());
                    break;
                }
                Some(q.inline.as_slice())
            } else {
                None
            };
            if let Err(e) = wqe::encode_send(&mut q.slot, wr, inline, cap) {
                result = Err(e.into());
                break;
            }
            q.producer.push(&q.slot);
        }
        q.producer.publish();
        ctx.backend.doorbell().ring(self.inner.qpn);
        result
    }

    /// The shared receive queue the QP takes its receives from, if it has one.
    pub fn srq(&self) -> Option<&SharedReceiveQueue> {
        self.inner.srq.as_ref()
    }

    /// Posts receive work requests. A QP with a shared receive queue has no receive queue of
    /// its own: post to the SRQ instead.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        let ctx = &self.inner.pd.ctx;
        ctx.check_alive()?;
        if self.inner.srq.is_some() {
            return Err(VerbsError::Invalid(
                "a QP with a shared receive queue takes its receives from it: post there".into(),
            ));
        }
        let mut q = self.inner.rq.lock().unwrap_or_else(|e| e.into_inner());
        let q = &mut *q;
        let mut result = Ok(());
        for wr in wrs {
            if q.producer.free() == 0 {
                result = Err(VerbsError::RecvQueueFull(q.producer.ring().capacity()));
                break;
            }
            if let Err(e) = wqe::encode_recv(&mut q.slot, wr, &self.inner.cap) {
                result = Err(e.into());
                break;
            }
            q.producer.push(&q.slot);
        }
        q.producer.publish();
        ctx.backend.doorbell().ring(self.inner.qpn);
        result
    }
}

/// Copies the bytes an inline send names out of this context's registrations.
pub(super) fn gather_inline(
    mrs: &HashMap<u32, LocalMr>,
    sges: &[Sge],
    max: u32,
    out: &mut Vec<u8>,
) -> Result<(), VerbsError> {
    out.clear();
    for sge in sges {
        let mr = mrs.get(&sge.lkey).ok_or_else(|| {
            VerbsError::Invalid(format!("inline data names unknown lkey {:#x}", sge.lkey))
        })?;
        let within = sge
            .addr
            .checked_sub(mr.va)
            .filter(|off| off + u64::from(sge.length) <= mr.len);
        let Some(off) = within else {
            return Err(VerbsError::Invalid(format!(
                "inline data at {:#x}+{} is outside its registration",
                sge.addr, sge.length
            )));
        };
        if out.len() + sge.length as usize > max as usize {
            return Err(wqe::WqeError::InlineTooLong(
                (out.len() + sge.length as usize) as u64,
                max,
            )
            .into());
        }
        let start = out.len();
        out.resize(start + sge.length as usize, 0);
        mr.region
            .read(mr.offset + off as usize, &mut out[start..])?;
    }
    Ok(())
}
