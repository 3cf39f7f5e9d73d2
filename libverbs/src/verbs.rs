//! Protection domains, completion queues and channels, queue pairs, address handles: each C
//! structure is the first field of a Rust one that holds the object of the host client.
//! Destroying frees both; the Rust object's drop destroys it in the NIC.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use roce_nic::verbs::{
    Access, AddressHandle, AddressVector, CompletionQueue, Gid, Mtu, ProtectionDomain, QpAttr,
    QpCap, QpState, QpType, QueuePair, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest, Wc,
};

use crate::abi::*;
use crate::device::{is_ours, Ctx};
use crate::qp_ex::{self, Builder};
use crate::{fail, guard, set_errno};

versions! {
    "IBVERBS_1.0": [ibv_create_comp_channel, ibv_destroy_comp_channel]
    "IBVERBS_1.1": [
        ibv_alloc_pd, ibv_dealloc_pd, ibv_create_cq, ibv_destroy_cq, ibv_get_cq_event,
        ibv_ack_cq_events, ibv_create_qp, ibv_modify_qp, ibv_query_qp, ibv_destroy_qp,
        ibv_create_ah, ibv_destroy_ah,
    ]
    "IBVERBS_1.6": [ibv_qp_to_qp_ex]
}

/// Fills the operations the inline verbs call.
pub(crate) fn fill_ops(ops: &mut ibv_context_ops) {
    ops.poll_cq = Some(poll_cq);
    ops.req_notify_cq = Some(req_notify_cq);
    ops.post_send = Some(post_send);
    ops.post_recv = Some(post_recv);
    ops.post_srq_recv = Some(crate::srq::post_srq_recv);
}

fn null_with<T>(errno: c_int) -> *mut T {
    set_errno(errno);
    ptr::null_mut()
}

/// How many objects use a parent (MRs, QPs and AHs a PD; QPs a CQ): while any do, its destroy
/// answers EBUSY, as the kernel's does.
#[derive(Default)]
pub struct Users(AtomicUsize);

impl Users {
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    pub fn remove(&self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }

    pub fn any(&self) -> bool {
        self.0.load(Ordering::SeqCst) != 0
    }
}

#[repr(C)]
pub struct Pd {
    pub pd: ibv_pd,
    pub inner: ProtectionDomain,
    /// MRs, QPs and AHs made in it.
    pub users: Users,
}

c_object!(Pd: ibv_pd, made by "ibv_alloc_pd");

/// `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    if !is_ours(context) {
        return null_with(libc::EINVAL);
    }
    guard(ptr::null_mut(), || {
        // SAFETY: ours (checked).
        let ctx = unsafe { Ctx::from_ptr(context) };
        match ctx.nic.alloc_pd() {
            Ok(inner) => {
                let pd = Box::new(Pd {
                    pd: ibv_pd {
                        context,
                        handle: inner.handle(),
                    },
                    inner,
                    users: Users::default(),
                });
                Box::into_raw(pd) as *mut ibv_pd
            }
            Err(e) => null_with(fail("ibv_alloc_pd", &e)),
        }
    })
}

/// `ibv_dealloc_pd`: EBUSY while MRs, QPs or AHs are in it, as the kernel answers.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    if pd.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's PD came from roce_ibv_alloc_pd.
    if unsafe { Pd::from_ptr(pd) }.users.any() {
        return libc::EBUSY;
    }
    guard(libc::EIO, || {
        // SAFETY: made by Box::into_raw in roce_ibv_alloc_pd; the program gives it up.
        drop(unsafe { Box::from_raw(pd as *mut Pd) });
        0
    })
}

// ---- completion channels and queues ----

/// A completion channel: an epoll descriptor watching the event descriptors of its CQs, so
/// that the program can poll(2) `channel->fd` as with rdma-core.
#[repr(C)]
pub struct Channel {
    pub ch: ibv_comp_channel,
}

/// `ibv_create_comp_channel`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    if !is_ours(context) {
        return null_with(libc::EINVAL);
    }
    // SAFETY: epoll_create1 has no preconditions.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return ptr::null_mut();
    }
    let ch = Box::new(Channel {
        ch: ibv_comp_channel {
            context,
            fd,
            refcnt: 0,
        },
    });
    Box::into_raw(ch) as *mut ibv_comp_channel
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    if channel.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's channel pointer came from roce_ibv_create_comp_channel.
    let ch = unsafe { &*channel };
    if ch.refcnt != 0 {
        return libc::EBUSY;
    }
    // SAFETY: the epoll descriptor is the channel's own.
    drop(unsafe { OwnedFd::from_raw_fd(ch.fd) });
    // SAFETY: made by Box::into_raw; given up by this call.
    drop(unsafe { Box::from_raw(channel as *mut Channel) });
    0
}

#[repr(C)]
pub struct Cq {
    pub cq: ibv_cq,
    pub inner: CompletionQueue,
    /// QPs that use it.
    pub users: Users,
}

c_object!(Cq: ibv_cq, made by "ibv_create_cq");

/// `ibv_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    if !is_ours(context) || cqe < 1 {
        return null_with(libc::EINVAL);
    }
    guard(ptr::null_mut(), || {
        // SAFETY: ours (checked).
        let ctx = unsafe { Ctx::from_ptr(context) };
        let inner = match ctx.nic.create_cq(cqe as u32) {
            Ok(cq) => cq,
            Err(e) => return null_with(fail("ibv_create_cq", &e)),
        };
        // SAFETY: ibv_cq is plain data; all-zero mutex and cond are their initializers.
        let mut c: ibv_cq = unsafe { std::mem::zeroed() };
        c.context = context;
        c.channel = channel;
        c.cq_context = cq_context;
        c.handle = inner.handle();
        c.cqe = cqe;
        let cq = Box::into_raw(Box::new(Cq {
            cq: c,
            inner,
            users: Users::default(),
        }));
        if !channel.is_null() {
            // SAFETY: the program's channel came from roce_ibv_create_comp_channel.
            let ch = unsafe { &mut *channel };
            let mut event = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: cq as u64,
            };
            // SAFETY: cq was just made; its event descriptor lives as long as it does.
            let fd = unsafe { &(*cq).inner }.event_fd().as_raw_fd();
            // SAFETY: valid descriptors and event.
            if unsafe { libc::epoll_ctl(ch.fd, libc::EPOLL_CTL_ADD, fd, &mut event) } != 0 {
                let errno = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                // SAFETY: just made by Box::into_raw.
                drop(unsafe { Box::from_raw(cq) });
                return null_with(errno);
            }
            ch.refcnt += 1;
        }
        cq as *mut ibv_cq
    })
}

/// `ibv_destroy_cq`: EBUSY while QPs use it.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's CQ came from roce_ibv_create_cq.
    if unsafe { Cq::from_ptr(cq) }.users.any() {
        return libc::EBUSY;
    }
    guard(libc::EIO, || {
        // SAFETY: made by Box::into_raw in roce_ibv_create_cq; given up by this call.
        let cq = unsafe { Box::from_raw(cq as *mut Cq) };
        if !cq.cq.channel.is_null() {
            // SAFETY: the channel outlives its CQs (destroy refuses while refcnt > 0).
            let ch = unsafe { &mut *cq.cq.channel };
            let fd = cq.inner.event_fd().as_raw_fd();
            // SAFETY: valid descriptors.
            unsafe { libc::epoll_ctl(ch.fd, libc::EPOLL_CTL_DEL, fd, ptr::null_mut()) };
            ch.refcnt -= 1;
        }
        drop(cq);
        0
    })
}

/// `ibv_poll_cq` (through `context->ops`).
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, out: *mut ibv_wc) -> c_int {
    if cq.is_null() || n < 0 || (out.is_null() && n > 0) {
        return -1;
    }
    // SAFETY: the program's CQ came from roce_ibv_create_cq.
    let cq = unsafe { Cq::from_ptr(cq) };
    let mut batch = [Wc::default(); 16];
    let mut done = 0usize;
    while done < n as usize {
        let want = (n as usize - done).min(batch.len());
        let got = cq.inner.poll(&mut batch[..want]);
        for (i, wc) in batch[..got].iter().enumerate() {
            // SAFETY: the caller's array holds n entries; done + i < n.
            unsafe { *out.add(done + i) = to_c_wc(wc) };
        }
        done += got;
        if got < want {
            break;
        }
    }
    if done == 0 {
        // A program that busy-polls would otherwise keep the CPU from the NIC process that
        // is to write its completion (real RNICs have their own silicon; ours shares cores).
        std::thread::yield_now();
    }
    done as c_int
}

fn to_c_wc(wc: &Wc) -> ibv_wc {
    ibv_wc {
        wr_id: wc.wr_id,
        status: wc.status as c_int,
        opcode: wc.opcode as c_int,
        vendor_err: 0,
        byte_len: wc.byte_len,
        imm_data: if wc.invalidated_rkey().is_some() {
            wc.imm_data
        } else {
            wc.imm_data.to_be()
        },
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        wc_flags: c_uint_from(wc.wc_flags),
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

fn c_uint_from(v: u8) -> u32 {
    u32::from(v)
}

/// `ibv_req_notify_cq` (through `context->ops`). Solicited-only is treated as any
/// completion: an extra wake-up is allowed by the spec, a missed one is not.
unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's CQ came from roce_ibv_create_cq.
    unsafe { Cq::from_ptr(cq) }.inner.request_notify();
    0
}

/// `ibv_get_cq_event`: waits on the channel (unless its descriptor is non-blocking, then
/// EAGAIN) and names the CQ whose notification fired.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    if channel.is_null() || cq_out.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the program's channel came from roce_ibv_create_comp_channel.
    let fd = unsafe { (*channel).fd };
    // SAFETY: fcntl on the channel's own descriptor.
    let nonblocking = unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
    loop {
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        let timeout = if nonblocking { 0 } else { -1 };
        // SAFETY: one event into a valid buffer.
        let n = unsafe { libc::epoll_wait(fd, &mut event, 1, timeout) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return -1;
        }
        if n == 0 {
            set_errno(libc::EAGAIN);
            return -1;
        }
        let cq = event.u64 as *mut ibv_cq;
        // SAFETY: the epoll data is a CQ of this channel, alive while registered.
        let c = unsafe { Cq::from_ptr(cq) };
        if !c.inner.take_event() {
            // Another thread took it first.
            continue;
        }
        // SAFETY: checked non-NULL; cq_context may be NULL.
        unsafe {
            *cq_out = cq;
            if !cq_context.is_null() {
                *cq_context = c.cq.cq_context;
            }
        }
        return 0;
    }
}

/// `ibv_ack_cq_events`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_ack_cq_events(cq: *mut ibv_cq, n: u32) {
    if !cq.is_null() {
        // SAFETY: the program's CQ; the counter is informational here.
        unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(n) };
    }
}

// ---- queue pairs ----

/// A queue pair: always the extended structure, so `ibv_qp_to_qp_ex` is a cast.
#[repr(C)]
pub struct Qp {
    pub qpx: ibv_qp_ex,
    pub inner: QueuePair,
    pub sq_sig_all: bool,
    pub builder: Mutex<Builder>,
}

// The ibv_qp is the first field of the first field (qpx.qp_base).
c_object!(Qp: ibv_qp, made by "ibv_create_qp or rdma_create_qp");

fn qp_type_of(v: c_int) -> Option<QpType> {
    QpType::from_u8(u8::try_from(v).ok()?)
}

unsafe fn create_qp_common(
    pd: *mut ibv_pd,
    attr: &mut ibv_qp_init_attr,
    send_ops: u64,
) -> *mut ibv_qp {
    if pd.is_null() || attr.send_cq.is_null() || attr.recv_cq.is_null() {
        return null_with(libc::EINVAL);
    }
    let Some(qp_type) = qp_type_of(attr.qp_type) else {
        return null_with(libc::EOPNOTSUPP);
    };
    // SAFETY: the program's PD and CQs came from this library.
    let (p, scq, rcq) = unsafe {
        (
            Pd::from_ptr(pd),
            Cq::from_ptr(attr.send_cq),
            Cq::from_ptr(attr.recv_cq),
        )
    };
    let cap = QpCap {
        max_send_wr: attr.cap.max_send_wr.max(1),
        max_recv_wr: attr.cap.max_recv_wr.max(1),
        max_send_sge: attr.cap.max_send_sge.max(1),
        max_recv_sge: attr.cap.max_recv_sge.max(1),
        max_inline_data: attr.cap.max_inline_data,
    };
    let created = if attr.srq.is_null() {
        p.inner.create_qp(qp_type, &scq.inner, &rcq.inner, cap)
    } else {
        // SAFETY: the program's SRQ came from this library.
        let srq = unsafe { crate::srq::Srq::from_ptr(attr.srq) };
        srq.create_qp(p, qp_type, scq, rcq, cap)
    };
    let inner = match created {
        Ok(qp) => qp,
        Err(e) => return null_with(fail("ibv_create_qp", &e)),
    };
    let got = inner.cap();
    attr.cap = ibv_qp_cap {
        max_send_wr: got.max_send_wr,
        max_recv_wr: got.max_recv_wr,
        max_send_sge: got.max_send_sge,
        max_recv_sge: got.max_recv_sge,
        max_inline_data: got.max_inline_data,
    };
    // SAFETY: ibv_qp_ex is plain data; all-zero mutex and cond are their initializers.
    let mut qpx: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let q = &mut qpx.qp_base;
    // SAFETY: the PD's context is ours.
    q.context = unsafe { (*pd).context };
    q.qp_context = attr.qp_context;
    q.pd = pd;
    q.send_cq = attr.send_cq;
    q.recv_cq = attr.recv_cq;
    q.srq = attr.srq;
    q.handle = inner.qp_num();
    q.qp_num = inner.qp_num();
    q.state = QpState::Reset as c_int;
    q.qp_type = attr.qp_type;
    qpx.comp_mask = 0;
    qp_ex::fill(&mut qpx, send_ops);
    for users in [&p.users, &scq.users, &rcq.users] {
        users.add();
    }
    let qp = Box::new(Qp {
        qpx,
        inner,
        sq_sig_all: attr.sq_sig_all != 0,
        builder: Mutex::new(Builder::default()),
    });
    Box::into_raw(qp) as *mut ibv_qp
}

/// `ibv_create_qp`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the same contract.
    unsafe { create_qp(pd, attr) }
}

/// The body of `ibv_create_qp`, for `rdma_create_qp` (see [`crate::versions`]).
pub(crate) unsafe fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    if attr.is_null() {
        return null_with(libc::EINVAL);
    }
    // SAFETY: the caller's attr (checked non-NULL).
    guard(ptr::null_mut(), || unsafe {
        create_qp_common(pd, &mut *attr, 0)
    })
}

/// The extended `create_qp_ex` (`verbs_context`), behind the inline `ibv_create_qp_ex`.
pub(crate) unsafe extern "C" fn create_qp_ex(
    _context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if attr.is_null() {
        return null_with(libc::EINVAL);
    }
    // SAFETY: the caller's attr (checked non-NULL).
    let a = unsafe { &mut *attr };
    const PD: u32 = 1 << 0;
    const SEND_OPS_FLAGS: u32 = 1 << 6;
    if a.comp_mask & !(PD | SEND_OPS_FLAGS) != 0 || a.comp_mask & PD == 0 {
        return null_with(libc::EOPNOTSUPP);
    }
    let send_ops = if a.comp_mask & SEND_OPS_FLAGS != 0 {
        a.send_ops_flags
    } else {
        0
    };
    let mut plain = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    let qp = guard(ptr::null_mut(), || {
        // SAFETY: plain is a valid init attr; the PD is the program's.
        unsafe { create_qp_common(a.pd, &mut plain, send_ops) }
    });
    a.cap = plain.cap;
    qp
}

/// `ibv_qp_to_qp_ex@IBVERBS_1.6`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    qp as *mut ibv_qp_ex
}

/// `ibv_destroy_qp`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: the same contract.
    unsafe { destroy_qp(qp) }
}

/// The body of `ibv_destroy_qp`, for `rdma_destroy_qp` (see [`crate::versions`]).
pub(crate) unsafe fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: made by Box::into_raw in create_qp_common; given up by this call.
        let qp = unsafe { Box::from_raw(qp as *mut Qp) };
        let base = &qp.qpx.qp_base;
        // SAFETY: a QP's PD and CQs outlive it (their destroy answers EBUSY until then).
        let users = unsafe {
            [
                &Pd::from_ptr(base.pd).users,
                &Cq::from_ptr(base.send_cq).users,
                &Cq::from_ptr(base.recv_cq).users,
            ]
        };
        let srq = base.srq;
        drop(qp);
        for users in users {
            users.remove();
        }
        if !srq.is_null() {
            // SAFETY: a QP's SRQ outlives it (its destroy answers EBUSY until then).
            unsafe { crate::srq::Srq::from_ptr(srq) }.users.remove();
        }
        0
    })
}

fn av_of(ah: &ibv_ah_attr) -> Result<AddressVector, c_int> {
    // On RoCE every address carries a GRH: without one there is no destination (rdma_rxe
    // answers EINVAL too).
    if ah.is_global == 0 {
        return Err(libc::EINVAL);
    }
    Ok(AddressVector {
        dgid: Gid(ah.grh.dgid),
        sgid_index: ah.grh.sgid_index,
        flow_label: ah.grh.flow_label,
        hop_limit: ah.grh.hop_limit,
        traffic_class: ah.grh.traffic_class,
        dmac: None,
    })
}

fn attr_of(a: &ibv_qp_attr, mask: c_int) -> Result<QpAttr, c_int> {
    use crate::abi::qp_mask as m;
    let has = |bit: c_int| mask & bit != 0;
    let u8_of = |v: c_int| u8::try_from(v).map_err(|_| libc::EINVAL);
    let mut attr = QpAttr::default();
    if has(m::STATE) {
        attr.qp_state = Some(QpState::from_u8(u8_of(a.qp_state)?).ok_or(libc::EINVAL)?);
    }
    if has(m::ACCESS_FLAGS) {
        attr.qp_access_flags =
            Some(Access::from_bits(a.qp_access_flags & 0xf).ok_or(libc::EINVAL)?);
    }
    if has(m::PKEY_INDEX) {
        attr.pkey_index = Some(a.pkey_index);
    }
    if has(m::PORT) {
        attr.port_num = Some(a.port_num);
    }
    if has(m::QKEY) {
        attr.qkey = Some(a.qkey);
    }
    if has(m::AV) {
        attr.av = Some(av_of(&a.ah_attr)?);
    }
    if has(m::PATH_MTU) {
        attr.path_mtu = Some(Mtu::from_u8(u8_of(a.path_mtu)?).ok_or(libc::EINVAL)?);
    }
    if has(m::TIMEOUT) {
        attr.timeout = Some(a.timeout);
    }
    if has(m::RETRY_CNT) {
        attr.retry_cnt = Some(a.retry_cnt);
    }
    if has(m::RNR_RETRY) {
        attr.rnr_retry = Some(a.rnr_retry);
    }
    if has(m::RQ_PSN) {
        attr.rq_psn = Some(a.rq_psn);
    }
    if has(m::MAX_QP_RD_ATOMIC) {
        attr.max_rd_atomic = Some(a.max_rd_atomic);
    }
    if has(m::MIN_RNR_TIMER) {
        attr.min_rnr_timer = Some(a.min_rnr_timer);
    }
    if has(m::SQ_PSN) {
        attr.sq_psn = Some(a.sq_psn);
    }
    if has(m::MAX_DEST_RD_ATOMIC) {
        attr.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
    }
    if has(m::DEST_QPN) {
        attr.dest_qp_num = Some(a.dest_qp_num);
    }
    Ok(attr)
}

/// `ibv_modify_qp`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    if qp.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: the program's QP and attr (checked non-NULL).
        let (q, a) = unsafe { (Qp::from_ptr(qp), &*attr) };
        let attr = match attr_of(a, mask) {
            Ok(attr) => attr,
            Err(e) => return e,
        };
        match q.inner.modify(&attr) {
            Ok(()) => {
                if let Some(state) = attr.qp_state {
                    // SAFETY: the program's QP; the state field mirrors the last modify.
                    unsafe { (*qp).state = state as c_int };
                }
                0
            }
            Err(e) => fail("ibv_modify_qp", &e),
        }
    })
}

/// `ibv_query_qp`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    if qp.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: the program's QP.
        let q = unsafe { Qp::from_ptr(qp) };
        let got = match q.inner.query() {
            Ok(a) => a,
            Err(e) => return fail("ibv_query_qp", &e),
        };
        // SAFETY: the caller's attr (checked non-NULL) is plain data.
        unsafe { ptr::write_bytes(attr, 0, 1) };
        // SAFETY: as above.
        let a = unsafe { &mut *attr };
        let cap = q.inner.cap();
        a.qp_state = got.qp_state.map_or(0, |s| s as c_int);
        a.cur_qp_state = a.qp_state;
        a.path_mtu = got.path_mtu.map_or(0, |m| m as c_int);
        a.qkey = got.qkey.unwrap_or(0);
        a.rq_psn = got.rq_psn.unwrap_or(0);
        a.sq_psn = got.sq_psn.unwrap_or(0);
        a.dest_qp_num = got.dest_qp_num.unwrap_or(0);
        a.qp_access_flags = got.qp_access_flags.map_or(0, |f| f.bits());
        a.cap = ibv_qp_cap {
            max_send_wr: cap.max_send_wr,
            max_recv_wr: cap.max_recv_wr,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            max_inline_data: cap.max_inline_data,
        };
        if let Some(av) = got.av {
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.dgid = av.dgid.0;
            a.ah_attr.grh.sgid_index = av.sgid_index;
            a.ah_attr.grh.flow_label = av.flow_label;
            a.ah_attr.grh.hop_limit = av.hop_limit;
            a.ah_attr.grh.traffic_class = av.traffic_class;
        }
        a.pkey_index = got.pkey_index.unwrap_or(0);
        a.max_rd_atomic = got.max_rd_atomic.unwrap_or(0);
        a.max_dest_rd_atomic = got.max_dest_rd_atomic.unwrap_or(0);
        a.min_rnr_timer = got.min_rnr_timer.unwrap_or(0);
        a.port_num = got.port_num.unwrap_or(1);
        a.timeout = got.timeout.unwrap_or(0);
        a.retry_cnt = got.retry_cnt.unwrap_or(0);
        a.rnr_retry = got.rnr_retry.unwrap_or(0);
        if !init.is_null() {
            // SAFETY: the caller's init attr (checked non-NULL).
            let i = unsafe { &mut *init };
            // SAFETY: the program's QP.
            let base = unsafe { &*qp };
            i.qp_context = base.qp_context;
            i.send_cq = base.send_cq;
            i.recv_cq = base.recv_cq;
            i.srq = base.srq;
            i.cap = a.cap;
            i.qp_type = base.qp_type;
            i.sq_sig_all = c_int::from(q.sq_sig_all);
        }
        0
    })
}

/// The Rust form of one C send work request; `sges` holds its scatter/gather list.
pub(crate) fn send_op(wr: &ibv_send_wr) -> Result<SendOp, c_int> {
    // SAFETY: reading a union of plain integers: every bit pattern is valid.
    let (rdma, atomic) = unsafe { (wr.wr.rdma, wr.wr.atomic) };
    Ok(match wr.opcode {
        0 => SendOp::RdmaWrite {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        1 => SendOp::RdmaWriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm: u32::from_be(wr.imm_data),
        },
        2 => SendOp::Send,
        3 => SendOp::SendWithImm {
            imm: u32::from_be(wr.imm_data),
        },
        4 => SendOp::RdmaRead {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        5 => SendOp::AtomicCmpAndSwp {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        6 => SendOp::AtomicFetchAndAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        9 => SendOp::SendWithInv { rkey: wr.imm_data },
        _ => return Err(libc::EINVAL),
    })
}

/// Copies the bytes an inline send names from the program's own memory, as libibverbs does
/// (the lkey is not looked at).
pub(crate) fn gather_from_memory(sges: &[Sge], out: &mut Vec<u8>) {
    out.clear();
    for sge in sges {
        // SAFETY: the program promises its inline SGEs name readable memory, as with
        // libibverbs (which copies them with memcpy the same way).
        let bytes = unsafe {
            std::slice::from_raw_parts(sge.addr as usize as *const u8, sge.length as usize)
        };
        out.extend_from_slice(bytes);
    }
}

const MAX_SGE: usize = 32;

/// `ibv_post_send` (through `context->ops`).
unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's QP.
    let q = unsafe { Qp::from_ptr(qp) };
    let set_bad = |w: *mut ibv_send_wr| {
        if !bad.is_null() {
            // SAFETY: checked non-NULL.
            unsafe { *bad = w };
        }
    };
    while !wr.is_null() {
        // SAFETY: the program's list of work requests.
        let w = unsafe { &*wr };
        let n = usize::try_from(w.num_sge).unwrap_or(usize::MAX);
        if n > MAX_SGE || (n > 0 && w.sg_list.is_null()) {
            set_bad(wr);
            return libc::EINVAL;
        }
        let mut sges = [Sge::default(); MAX_SGE];
        for (i, s) in sges[..n].iter_mut().enumerate() {
            // SAFETY: sg_list holds num_sge entries.
            let c = unsafe { *w.sg_list.add(i) };
            *s = Sge {
                addr: c.addr,
                length: c.length,
                lkey: c.lkey,
            };
        }
        let op = match send_op(w) {
            Ok(op) => op,
            Err(e) => {
                set_bad(wr);
                return e;
            }
        };
        let mut flags = SendFlags((w.send_flags & 0xf) as u8);
        if q.sq_sig_all {
            flags = flags | SendFlags::SIGNALED;
        }
        let ud = if q.inner.qp_type() == QpType::Ud {
            // SAFETY: a UD request's union is its ud member.
            let ud = unsafe { w.wr.ud };
            if ud.ah.is_null() {
                set_bad(wr);
                return libc::EINVAL;
            }
            Some(UdDest {
                // SAFETY: the program's AH came from roce_ibv_create_ah.
                ah: unsafe { (*ud.ah).handle },
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            })
        } else {
            None
        };
        let one = SendWr {
            wr_id: w.wr_id,
            op,
            sg_list: &sges[..n],
            flags,
            ud,
        };
        if let Err(e) = q.inner.post_send_gathered(&[one], |wr, out| {
            gather_from_memory(wr.sg_list, out);
            Ok(())
        }) {
            set_bad(wr);
            return fail("ibv_post_send", &e);
        }
        wr = w.next;
    }
    0
}

/// `ibv_post_recv` (through `context->ops`).
unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's QP.
    let q = unsafe { Qp::from_ptr(qp) };
    // SAFETY: the program's list of work requests (the caller's promise).
    unsafe { post_recv_list(wr, bad, "ibv_post_recv", |one| q.inner.post_recv(&[one])) }
}

/// Posts a C list of receive work requests one by one with `post`; on a failure, `*bad` names
/// the request that failed (those before it are posted).
///
/// # Safety
/// `wr` must be NULL or a valid list of `ibv_recv_wr`, `bad` NULL or writable.
pub(crate) unsafe fn post_recv_list(
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    what: &str,
    post: impl std::ops::Fn(RecvWr<'_>) -> Result<(), roce_nic::verbs::VerbsError>,
) -> c_int {
    while !wr.is_null() {
        // SAFETY: the program's list of work requests.
        let w = unsafe { &*wr };
        let n = usize::try_from(w.num_sge).unwrap_or(usize::MAX);
        let fail_with = |errno: c_int| {
            if !bad.is_null() {
                // SAFETY: checked non-NULL.
                unsafe { *bad = wr };
            }
            errno
        };
        if n > MAX_SGE || (n > 0 && w.sg_list.is_null()) {
            return fail_with(libc::EINVAL);
        }
        let mut sges = [Sge::default(); MAX_SGE];
        for (i, s) in sges[..n].iter_mut().enumerate() {
            // SAFETY: sg_list holds num_sge entries.
            let c = unsafe { *w.sg_list.add(i) };
            *s = Sge {
                addr: c.addr,
                length: c.length,
                lkey: c.lkey,
            };
        }
        let one = RecvWr {
            wr_id: w.wr_id,
            sg_list: &sges[..n],
        };
        if let Err(e) = post(one) {
            return fail_with(fail(what, &e));
        }
        wr = w.next;
    }
    0
}

// ---- address handles ----

#[repr(C)]
pub struct Ah {
    pub ah: ibv_ah,
    pub inner: AddressHandle,
}

/// `ibv_create_ah`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_create_ah(
    pd: *mut ibv_pd,
    attr: *mut ibv_ah_attr,
) -> *mut ibv_ah {
    if pd.is_null() || attr.is_null() {
        return null_with(libc::EINVAL);
    }
    guard(ptr::null_mut(), || {
        // SAFETY: the program's PD and attr (checked non-NULL).
        let (p, a) = unsafe { (Pd::from_ptr(pd), &*attr) };
        let av = match av_of(a) {
            Ok(av) => av,
            Err(e) => return null_with(e),
        };
        match p.inner.create_ah(av) {
            Ok(inner) => {
                p.users.add();
                Box::into_raw(Box::new(Ah {
                    ah: ibv_ah {
                        // SAFETY: the program's PD.
                        context: unsafe { (*pd).context },
                        pd,
                        handle: inner.handle(),
                    },
                    inner,
                })) as *mut ibv_ah
            }
            Err(e) => null_with(fail("ibv_create_ah", &e)),
        }
    })
}

/// `ibv_destroy_ah`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    if ah.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by Box::into_raw in roce_ibv_create_ah; given up by this call.
    let ah = unsafe { Box::from_raw(ah as *mut Ah) };
    // SAFETY: an AH's PD outlives it (its dealloc answers EBUSY until then).
    let users = unsafe { &Pd::from_ptr(ah.ah.pd).users };
    drop(ah);
    users.remove();
    0
}
