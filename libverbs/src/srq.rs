//! Shared receive queues (`ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq`, and `ibv_post_srq_recv` through `context->ops`). The inline
//! `ibv_create_srq_ex` hands a basic SRQ (a PD, no XRC or tag matching) to `ibv_create_srq`,
//! so that is the one entry point. The limit event is armed and disarmed as in rdma-core, and
//! its firing shows in `ibv_query_srq` (the limit reads 0 again).

use std::ffi::c_int;
use std::ptr;

use roce_nic::verbs::{QpCap, QpType, QueuePair, SharedReceiveQueue, VerbsError};

use crate::abi::*;
use crate::verbs::{post_recv_list, Cq, Pd, Users};
use crate::{fail, guard, set_errno};

versions! {
    "IBVERBS_1.1": [ibv_create_srq, ibv_modify_srq, ibv_query_srq, ibv_destroy_srq]
}

#[repr(C)]
pub struct Srq {
    pub srq: ibv_srq,
    pub inner: SharedReceiveQueue,
    /// QPs that take their receives from it.
    pub users: Users,
}

c_object!(Srq: ibv_srq, made by "ibv_create_srq");

impl Srq {
    /// A QP of `pd` taking its receives from this SRQ.
    pub(crate) fn create_qp(
        &self,
        pd: &Pd,
        qp_type: QpType,
        send_cq: &Cq,
        recv_cq: &Cq,
        cap: QpCap,
    ) -> Result<QueuePair, VerbsError> {
        let qp = pd.inner.create_qp_with_srq(
            qp_type,
            &send_cq.inner,
            &recv_cq.inner,
            &self.inner,
            cap,
        )?;
        self.users.add();
        Ok(qp)
    }
}

fn attr_of(a: roce_nic::verbs::SrqAttr) -> ibv_srq_attr {
    ibv_srq_attr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// `ibv_create_srq`: the sizes granted are written back into `attr`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    if pd.is_null() || init.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    guard(ptr::null_mut(), || {
        // SAFETY: the program's PD came from this library; init is checked non-NULL.
        let (p, init) = unsafe { (Pd::from_ptr(pd), &mut *init) };
        let inner = match p.inner.create_srq(init.attr.max_wr, init.attr.max_sge) {
            Ok(srq) => srq,
            Err(e) => {
                set_errno(fail("ibv_create_srq", &e));
                return ptr::null_mut();
            }
        };
        let granted = inner.attr();
        init.attr.max_wr = granted.max_wr;
        init.attr.max_sge = granted.max_sge;
        // SAFETY: ibv_srq is plain data; all-zero mutex and cond are their initializers.
        let mut srq: ibv_srq = unsafe { std::mem::zeroed() };
        // SAFETY: the PD's context is ours.
        srq.context = unsafe { (*pd).context };
        srq.srq_context = init.srq_context;
        srq.pd = pd;
        srq.handle = inner.srq_num();
        p.users.add();
        let srq = Box::new(Srq {
            srq,
            inner,
            users: Users::default(),
        });
        Box::into_raw(srq) as *mut ibv_srq
    })
}

/// `ibv_modify_srq`: `IBV_SRQ_LIMIT` arms (or with 0 disarms) the limit; resizing
/// (`IBV_SRQ_MAX_WR`) is not offered (the device does not claim IBV_DEVICE_SRQ_RESIZE): EINVAL.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    if srq.is_null() || attr.is_null() || mask & !srq_mask::LIMIT != 0 {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: the program's SRQ and attr (checked non-NULL).
        let (s, a) = unsafe { (Srq::from_ptr(srq), &*attr) };
        if mask & srq_mask::LIMIT == 0 {
            return 0;
        }
        match s.inner.arm_limit(a.srq_limit) {
            Ok(()) => 0,
            Err(e) => fail("ibv_modify_srq", &e),
        }
    })
}

/// `ibv_query_srq`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    if srq.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: the program's SRQ.
        let s = unsafe { Srq::from_ptr(srq) };
        match s.inner.query() {
            Ok(got) => {
                // SAFETY: the caller's attr (checked non-NULL).
                unsafe { *attr = attr_of(got) };
                0
            }
            Err(e) => fail("ibv_query_srq", &e),
        }
    })
}

/// `ibv_destroy_srq`: EBUSY while a QP takes its receives from it.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's SRQ came from roce_ibv_create_srq.
    if unsafe { Srq::from_ptr(srq) }.users.any() {
        return libc::EBUSY;
    }
    guard(libc::EIO, || {
        // SAFETY: made by Box::into_raw in roce_ibv_create_srq; given up by this call.
        let srq = unsafe { Box::from_raw(srq as *mut Srq) };
        // SAFETY: an SRQ's PD outlives it (its dealloc answers EBUSY until then).
        let pd_users = unsafe { &Pd::from_ptr(srq.srq.pd).users };
        drop(srq);
        pd_users.remove();
        0
    })
}

/// `ibv_post_srq_recv` (through `context->ops`).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's SRQ.
    let s = unsafe { Srq::from_ptr(srq) };
    // SAFETY: the program's list of work requests (the inline function's contract).
    unsafe {
        post_recv_list(wr, bad, "ibv_post_srq_recv", |one| {
            s.inner.post_recv(&[one])
        })
    }
}
