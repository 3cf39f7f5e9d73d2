//! A protection domain (`ibv_pd`): registers memory, creates queue pairs and address handles.

use std::sync::{Arc, Mutex};

use roce_hostmem::{Access, Region, VaBase};

use super::VerbsError;
use super::{
    ah::AddressHandle,
    context::{Inner, LocalMr},
    cq::CompletionQueue,
    mr::MemoryRegion,
    qp::{PostQueue, QpInner, QueuePair},
    srq::{SharedReceiveQueue, SrqInner},
};
use crate::control::{Request, Response, RingMap};
use crate::ring::{Producer, Ring};
use crate::types::{AddressVector, QpCap, QpType};

pub(super) struct PdInner {
    pub(super) ctx: Arc<Inner>,
    pub(super) pd: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let _ = self.ctx.call(Request::DeallocPd { pd: self.pd });
    }
}

/// A protection domain (`ibv_pd`).
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(super) inner: Arc<PdInner>,
}

impl ProtectionDomain {
    pub fn handle(&self) -> u32 {
        self.inner.pd
    }

    /// Registers `len` bytes of `region` from `offset`; the range's VA is its offset in the
    /// region.
    pub fn register(
        &self,
        region: &Arc<Region>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion, VerbsError> {
        self.register_at(region, offset, len, access, VaBase::Offset)
    }

    /// Registers with an explicit choice of virtual address.
    pub fn register_at(
        &self,
        region: &Arc<Region>,
        offset: usize,
        len: usize,
        access: Access,
        va: VaBase,
    ) -> Result<MemoryRegion, VerbsError> {
        let request = Request::RegMr {
            pd: self.inner.pd,
            region: Arc::clone(region),
            offset,
            len,
            access,
            va,
        };
        let keys = match self.inner.ctx.call(request)? {
            Response::Mr(keys) => keys,
            _ => return Err(self.inner.ctx.unexpected("reg_mr")),
        };
        self.inner.ctx.mrs().insert(
            keys.lkey,
            LocalMr {
                region: Arc::clone(region),
                offset,
                va: keys.va,
                len: keys.len,
            },
        );
        Ok(MemoryRegion {
            pd: Arc::clone(&self.inner),
            lkey: keys.lkey,
            rkey: keys.rkey,
            va: keys.va,
            len: keys.len,
            access,
        })
    }

    /// Creates a queue pair of type `qp_type` whose completions go to `send_cq` and `recv_cq`.
    pub fn create_qp(
        &self,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        cap: QpCap,
    ) -> Result<QueuePair, VerbsError> {
        let request = Request::CreateQp {
            pd: self.inner.pd,
            qp_type,
            send_cq: send_cq.inner.cq,
            recv_cq: recv_cq.inner.cq,
            cap,
            sq_sig_all: false,
        };
        self.make_qp(request, qp_type, send_cq, recv_cq, None)
    }

    /// A shared receive queue of at least `max_wr` receive requests of at most `max_sge`
    /// scatter/gather entries (`ibv_create_srq`); its limit event starts disarmed.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue, VerbsError> {
        let ctx = &self.inner.ctx;
        let (srq, attr, ring) = match ctx.call(Request::CreateSrq {
            pd: self.inner.pd,
            max_wr,
            max_sge,
        })? {
            Response::Srq { srq, attr, ring } => (srq, attr, ring),
            _ => return Err(ctx.unexpected("create_srq")),
        };
        let inner = SrqInner {
            pd: Arc::clone(&self.inner),
            srq,
            attr,
            rq: post_queue(ring, 0)?,
        };
        Ok(SharedReceiveQueue {
            inner: Arc::new(inner),
        })
    }

    /// Creates a queue pair that takes its receives from `srq` (of this protection domain):
    /// the receive sizes of `cap` are ignored, and it has no receive queue of its own.
    pub fn create_qp_with_srq(
        &self,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        srq: &SharedReceiveQueue,
        cap: QpCap,
    ) -> Result<QueuePair, VerbsError> {
        let request = Request::CreateQpWithSrq {
            pd: self.inner.pd,
            qp_type,
            send_cq: send_cq.inner.cq,
            recv_cq: recv_cq.inner.cq,
            srq: srq.inner.srq,
            cap,
            sq_sig_all: false,
        };
        self.make_qp(request, qp_type, send_cq, recv_cq, Some(srq.clone()))
    }

    /// Opens QP1, the General Services Interface: a UD QP with Q_Key 0x80010000, already in
    /// RTS. One host at a time may hold it.
    pub fn open_gsi(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        cap: QpCap,
    ) -> Result<QueuePair, VerbsError> {
        let request = Request::OpenGsi {
            pd: self.inner.pd,
            send_cq: send_cq.inner.cq,
            recv_cq: recv_cq.inner.cq,
            cap,
        };
        self.make_qp(request, QpType::Ud, send_cq, recv_cq, None)
    }

    pub(super) fn make_qp(
        &self,
        request: Request,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        srq: Option<SharedReceiveQueue>,
    ) -> Result<QueuePair, VerbsError> {
        let (qpn, cap, sq, rq) = match self.inner.ctx.call(request)? {
            Response::Qp { qpn, cap, sq, rq } => (qpn, cap, sq, rq),
            _ => return Err(self.inner.ctx.unexpected("create_qp")),
        };
        let post_queue = |map| post_queue(map, cap.max_inline_data);
        Ok(QueuePair {
            inner: Arc::new(QpInner {
                pd: Arc::clone(&self.inner),
                qpn,
                qp_type,
                cap,
                sq: post_queue(sq)?,
                rq: post_queue(rq)?,
                _cqs: (send_cq.clone(), recv_cq.clone()),
                srq,
            }),
        })
    }

    /// An address handle for UD sends to `av`.
    pub fn create_ah(&self, av: AddressVector) -> Result<AddressHandle, VerbsError> {
        match self.inner.ctx.call(Request::CreateAh {
            pd: self.inner.pd,
            av,
        })? {
            Response::Ah(ah) => Ok(AddressHandle {
                pd: Arc::clone(&self.inner),
                ah,
            }),
            _ => Err(self.inner.ctx.unexpected("create_ah")),
        }
    }
}

/// The host's end of a ring it posts into.
fn post_queue(map: RingMap, max_inline: u32) -> Result<Mutex<PostQueue>, VerbsError> {
    let slot = vec![0; map.geometry.slot_size];
    Ok(Mutex::new(PostQueue {
        producer: Producer::new(Ring::attach(map.region, map.geometry)?),
        slot,
        inline: Vec::with_capacity(max_inline as usize),
    }))
}
