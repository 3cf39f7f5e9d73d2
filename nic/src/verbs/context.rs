//! The host-side verbs objects. Each holds what it needs of its parents (a QP keeps its CQs and
//! PD alive), and dropping one destroys it in the NIC, as `ibv_destroy_*` would.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use roce_hostmem::{Access, Region, VaBase};

use super::VerbsError;
use crate::control::{ClientId, DeviceInfo, Request, Response, RingMap};
use crate::counters::Snapshot;
use crate::cq::{EventLine, Woken};
use crate::ring::{Consumer, Producer, Ring};
use crate::types::{
    AddressVector, Gid, PortAttr, QpAttr, QpCap, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge, Wc,
};
use crate::waker::Waker;
use crate::wqe::{self, decode_cqe, CQE_SIZE};

/// How a context reaches its NIC: in the same process, or over the NIC's socket.
pub trait Backend: Send + Sync {
    /// A new client identity for a context being opened.
    fn connect(&self) -> Result<ClientId, VerbsError>;
    /// Sends a control request and waits for the answer.
    fn call(&self, client: ClientId, request: Request) -> Result<Response, VerbsError>;
    /// The doorbell: wakes the engine after work was posted.
    fn doorbell(&self) -> &Arc<Waker>;
    /// False once the NIC is known to have stopped. Posting work asks before every batch, so
    /// this must cost no system call.
    fn alive(&self) -> bool {
        true
    }
    /// A descriptor that hangs up (POLLHUP) when the NIC goes away, for a sleeping wait to
    /// watch beside its event line, so that a dead NIC ends the wait instead of a timeout.
    fn hangup_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

/// What a context knows of a memory registration, to copy inline data from it.
struct LocalMr {
    region: Arc<Region>,
    offset: usize,
    va: u64,
    len: u64,
}

pub(super) struct Inner {
    backend: Arc<dyn Backend>,
    client: ClientId,
    device: DeviceInfo,
    mrs: Mutex<HashMap<u32, LocalMr>>,
    /// Set when a wait saw the NIC hang up, so the next post fails even before the backend
    /// has noticed.
    gone: AtomicBool,
}

impl Inner {
    pub(super) fn call(&self, request: Request) -> Result<Response, VerbsError> {
        self.backend.call(self.client, request)
    }

    pub(super) fn unexpected(&self, what: &str) -> VerbsError {
        VerbsError::Invalid(format!("the NIC answered {what} with something else"))
    }

    fn device_gone(&self) -> VerbsError {
        VerbsError::DeviceGone {
            nic: self.device.name.clone(),
        }
    }

    /// Err once the NIC is known to have stopped; posting work would only fill dead rings.
    fn check_alive(&self) -> Result<(), VerbsError> {
        if self.gone.load(Ordering::Relaxed) || !self.backend.alive() {
            return Err(self.device_gone());
        }
        Ok(())
    }

    fn mrs(&self) -> MutexGuard<'_, HashMap<u32, LocalMr>> {
        self.mrs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.backend.call(self.client, Request::Disconnect);
    }
}

/// An opened device (`ibv_context`).
#[derive(Clone)]
pub struct Context {
    pub(super) inner: Arc<Inner>,
}

impl Context {
    /// Opens the device behind `backend`.
    pub fn open(backend: Arc<dyn Backend>) -> Result<Context, VerbsError> {
        let client = backend.connect()?;
        let device = match backend.call(client, Request::QueryDevice)? {
            Response::Device(d) => d,
            _ => {
                return Err(VerbsError::Invalid(
                    "the NIC did not describe itself".into(),
                ))
            }
        };
        Ok(Context {
            inner: Arc::new(Inner {
                backend,
                client,
                device,
                mrs: Mutex::new(HashMap::new()),
                gone: AtomicBool::new(false),
            }),
        })
    }

    /// What the device told when it was opened.
    pub fn device(&self) -> &DeviceInfo {
        &self.inner.device
    }

    /// `ibv_query_device`: the device's attributes and limits, asked anew.
    pub fn query_device(&self) -> Result<DeviceInfo, VerbsError> {
        match self.inner.call(Request::QueryDevice)? {
            Response::Device(d) => Ok(d),
            _ => Err(self.inner.unexpected("query_device")),
        }
    }

    /// The GID at `index` of port 1.
    pub fn gid(&self, index: u8) -> Option<Gid> {
        self.inner.device.gids.get(usize::from(index)).copied()
    }

    /// `ibv_query_port` of port 1: its MTU and the sizes of its GID and P_Key tables.
    pub fn query_port(&self) -> Result<PortAttr, VerbsError> {
        let d = self.query_device()?;
        Ok(PortAttr {
            max_mtu: d.max_mtu,
            active_mtu: d.max_mtu,
            gid_tbl_len: d.gids.len() as u32,
            pkey_tbl_len: d.pkeys.len() as u16,
        })
    }

    /// `ibv_query_pkey` of port 1: the P_Key at `index` of its table, which a QP's
    /// `pkey_index` names. The table is fixed when the NIC starts (`roce nic --pkey`), so the
    /// copy the NIC gave at open time answers.
    pub fn query_pkey(&self, index: u16) -> Result<u16, VerbsError> {
        self.inner.device.pkeys.get(index).ok_or_else(|| {
            VerbsError::Invalid(format!(
                "P_Key index {index} is outside the port's table of {}",
                self.inner.device.pkeys.len()
            ))
        })
    }

    pub fn alloc_pd(&self) -> Result<ProtectionDomain, VerbsError> {
        match self.inner.call(Request::AllocPd)? {
            Response::Pd(pd) => Ok(ProtectionDomain {
                inner: Arc::new(PdInner {
                    ctx: Arc::clone(&self.inner),
                    pd,
                }),
            }),
            _ => Err(self.inner.unexpected("alloc_pd")),
        }
    }

    /// A completion queue of at least `entries` entries.
    pub fn create_cq(&self, entries: u32) -> Result<CompletionQueue, VerbsError> {
        match self.inner.call(Request::CreateCq { entries })? {
            Response::Cq { cq, ring, event } => Ok(CompletionQueue {
                inner: Arc::new(CqInner {
                    ctx: Arc::clone(&self.inner),
                    cq,
                    consumer: Mutex::new(Consumer::new(Ring::attach(ring.region, ring.geometry)?)),
                    event,
                }),
            }),
            _ => Err(self.inner.unexpected("create_cq")),
        }
    }

    /// The NIC's counters now.
    pub fn counters(&self) -> Result<Snapshot, VerbsError> {
        match self.inner.call(Request::Counters)? {
            Response::Counters(s) => Ok(*s),
            _ => Err(self.inner.unexpected("a counters query")),
        }
    }
}

struct PdInner {
    ctx: Arc<Inner>,
    pd: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let _ = self.ctx.call(Request::DeallocPd { pd: self.pd });
    }
}

/// A protection domain (`ibv_pd`).
#[derive(Clone)]
pub struct ProtectionDomain {
    inner: Arc<PdInner>,
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
        self.make_qp(request, qp_type, send_cq, recv_cq)
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
        self.make_qp(request, QpType::Ud, send_cq, recv_cq)
    }

    fn make_qp(
        &self,
        request: Request,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
    ) -> Result<QueuePair, VerbsError> {
        let (qpn, cap, sq, rq) = match self.inner.ctx.call(request)? {
            Response::Qp { qpn, cap, sq, rq } => (qpn, cap, sq, rq),
            _ => return Err(self.inner.ctx.unexpected("create_qp")),
        };
        let post_queue = |map: RingMap| -> Result<Mutex<PostQueue>, VerbsError> {
            let slot = vec![0; map.geometry.slot_size];
            Ok(Mutex::new(PostQueue {
                producer: Producer::new(Ring::attach(map.region, map.geometry)?),
                slot,
                inline: Vec::with_capacity(cap.max_inline_data as usize),
            }))
        };
        Ok(QueuePair {
            inner: Arc::new(QpInner {
                pd: Arc::clone(&self.inner),
                qpn,
                qp_type,
                cap,
                sq: post_queue(sq)?,
                rq: post_queue(rq)?,
                _cqs: (send_cq.clone(), recv_cq.clone()),
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

/// A memory registration (`ibv_mr`). Deregistered when dropped.
pub struct MemoryRegion {
    pd: Arc<PdInner>,
    pub lkey: u32,
    pub rkey: u32,
    /// First virtual address of the registered range.
    pub va: u64,
    pub len: u64,
    pub access: Access,
}

impl MemoryRegion {
    /// A scatter/gather entry for `length` bytes at `offset` into the registration.
    pub fn sge(&self, offset: u64, length: u32) -> Sge {
        Sge {
            addr: self.va + offset,
            length,
            lkey: self.lkey,
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.pd.ctx.mrs().remove(&self.lkey);
        let _ = self.pd.ctx.call(Request::DeregMr { lkey: self.lkey });
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemoryRegion {{ lkey: {:#x}, rkey: {:#x}, va: {:#x}, len: {}, access: {} }}",
            self.lkey, self.rkey, self.va, self.len, self.access
        )
    }
}

struct CqInner {
    ctx: Arc<Inner>,
    cq: u32,
    consumer: Mutex<Consumer>,
    event: Arc<EventLine>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let _ = self.ctx.call(Request::DestroyCq { cq: self.cq });
    }
}

/// A completion queue (`ibv_cq`).
#[derive(Clone)]
pub struct CompletionQueue {
    inner: Arc<CqInner>,
}

impl CompletionQueue {
    pub fn handle(&self) -> u32 {
        self.inner.cq
    }

    /// Takes up to `out.len()` completions; returns how many.
    pub fn poll(&self, out: &mut [Wc]) -> usize {
        let mut consumer = self
            .inner
            .consumer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut slot = [0u8; CQE_SIZE];
        let mut n = 0;
        while n < out.len() && consumer.next(&mut slot) {
            consumer.release(1);
            out[n] = decode_cqe(&slot);
            n += 1;
        }
        n
    }

    /// Whether the NIC found the queue full and lost a completion. The queue is in error from
    /// then on (as the spec has it) and its QPs are moved to the error state; completions
    /// written before still come out of [`CompletionQueue::poll`], and
    /// [`CompletionQueue::try_wait`] fails with [`VerbsError::CqOverrun`] once they are taken.
    pub fn overran(&self) -> bool {
        let consumer = self
            .inner
            .consumer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        consumer.ring().overrun().load(Ordering::SeqCst) != 0
    }

    /// Like [`CompletionQueue::try_wait`], for callers that treat a stopped NIC like a
    /// timeout: returns 0 then.
    pub fn wait(&self, out: &mut [Wc], timeout: Option<Duration>) -> usize {
        self.try_wait(out, timeout).unwrap_or(0)
    }

    /// Like [`CompletionQueue::poll`], but sleeps until at least one completion arrives or
    /// `timeout` passes (then returns 0). Completions already written are returned even after
    /// the NIC stopped; after that, a stopped NIC is [`VerbsError::DeviceGone`], never a hang.
    pub fn try_wait(&self, out: &mut [Wc], timeout: Option<Duration>) -> Result<usize, VerbsError> {
        let ctx = &self.inner.ctx;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let n = self.poll(out);
            if n > 0 {
                return Ok(n);
            }
            ctx.check_alive()?;
            if self.overran() {
                return Err(VerbsError::CqOverrun(self.inner.cq));
            }
            // Ask for an event, then look once more: a completion written before the request
            // was seen would otherwise be slept through.
            self.notify_flag(1);
            let n = self.poll(out);
            if n > 0 {
                self.notify_flag(0);
                return Ok(n);
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                self.notify_flag(0);
                return Ok(0);
            }
            if self.inner.event.wait(left, ctx.backend.hangup_fd()) == Woken::HungUp {
                self.notify_flag(0);
                ctx.gone.store(true, Ordering::Relaxed);
                // Completions the NIC flushed on its way out come first.
                let n = self.poll(out);
                return if n > 0 { Ok(n) } else { Err(ctx.device_gone()) };
            }
        }
    }

    /// `ibv_req_notify_cq`: the next completion signals the CQ's event descriptor.
    pub fn request_notify(&self) {
        self.notify_flag(1);
    }

    /// The descriptor that becomes readable when a requested notification fires (a
    /// completion channel watches it).
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.inner.event.as_fd()
    }

    /// Consumes a fired notification without waiting; false if none had fired.
    pub fn take_event(&self) -> bool {
        self.inner.event.wait(Some(Duration::ZERO), None) == Woken::Signalled
    }

    fn notify_flag(&self, value: u32) {
        let consumer = self
            .inner
            .consumer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        consumer
            .ring()
            .notify()
            .store(value, std::sync::atomic::Ordering::SeqCst);
    }
}

struct PostQueue {
    producer: Producer,
    slot: Vec<u8>,
    inline: Vec<u8>,
}

struct QpInner {
    pd: Arc<PdInner>,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    sq: Mutex<PostQueue>,
    rq: Mutex<PostQueue>,
    _cqs: (CompletionQueue, CompletionQueue),
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let _ = self.pd.ctx.call(Request::DestroyQp { qpn: self.qpn });
    }
}

/// A queue pair (`ibv_qp`).
#[derive(Clone)]
pub struct QueuePair {
    inner: Arc<QpInner>,
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

    fn post_sends(
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
        ctx.backend.doorbell().wake();
        result
    }

    /// Posts receive work requests.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        let ctx = &self.inner.pd.ctx;
        ctx.check_alive()?;
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
        ctx.backend.doorbell().wake();
        result
    }
}

/// Copies the bytes an inline send names out of this context's registrations.
fn gather_inline(
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

/// An address handle for UD sends (`ibv_ah`).
pub struct AddressHandle {
    pd: Arc<PdInner>,
    ah: u32,
}

impl AddressHandle {
    pub fn handle(&self) -> u32 {
        self.ah
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        let _ = self.pd.ctx.call(Request::DestroyAh { ah: self.ah });
    }
}
