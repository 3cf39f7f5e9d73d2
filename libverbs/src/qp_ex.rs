//! The `ibv_wr_*` API (`struct ibv_qp_ex`): `ibv_wr_start`, then per request an operation
//! (`ibv_wr_rdma_write`, ...) that takes `qp->wr_id` and `qp->wr_flags`, and its data
//! (`ibv_wr_set_sge`, `ibv_wr_set_inline_data`, `ibv_wr_set_ud_addr`); `ibv_wr_complete`
//! posts them all with one doorbell, `ibv_wr_abort` drops them. Errors are kept until
//! `ibv_wr_complete`, which returns the first, as the rdma-core providers do.
//!
//! The batch's buffers are reused from one batch to the next: no allocation per request once
//! they have grown.

use std::ffi::{c_int, c_void};

use roce_nic::verbs::{QpType, SendFlags, SendOp, SendWr, Sge, UdDest};

use crate::abi::*;
use crate::verbs::{gather_from_memory, Qp};

/// One request of a batch: where its SGEs and inline bytes are in the batch's buffers.
#[derive(Clone, Copy)]
struct Pending {
    wr_id: u64,
    flags: SendFlags,
    op: SendOp,
    sges: (usize, usize),
    inline: Option<(usize, usize)>,
    ud: Option<UdDest>,
}

#[derive(Default)]
pub struct Builder {
    pending: Vec<Pending>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    error: c_int,
}

/// Fills the builder operations of a new QP.
pub(crate) fn fill(qpx: &mut ibv_qp_ex, _send_ops: u64) {
    qpx.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    qpx.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    qpx.wr_rdma_read = Some(wr_rdma_read);
    qpx.wr_rdma_write = Some(wr_rdma_write);
    qpx.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    qpx.wr_send = Some(wr_send);
    qpx.wr_send_imm = Some(wr_send_imm);
    qpx.wr_send_inv = Some(wr_send_inv);
    qpx.wr_set_ud_addr = Some(wr_set_ud_addr);
    qpx.wr_set_inline_data = Some(wr_set_inline_data);
    qpx.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    qpx.wr_set_sge = Some(wr_set_sge);
    qpx.wr_set_sge_list = Some(wr_set_sge_list);
    qpx.wr_start = Some(wr_start);
    qpx.wr_complete = Some(wr_complete);
    qpx.wr_abort = Some(wr_abort);
}

fn with<R>(qpx: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut Builder) -> R) -> Option<R> {
    if qpx.is_null() {
        return None;
    }
    // SAFETY: the program's QP came from this library (every QP is a Qp).
    let qp = unsafe { Qp::from_ptr(qpx as *mut ibv_qp) };
    let mut b = qp.builder.lock().unwrap_or_else(|e| e.into_inner());
    Some(f(qp, &mut b))
}

fn begin(qpx: *mut ibv_qp_ex, op: SendOp) {
    with(qpx, |qp, b| {
        let mut flags = SendFlags((qp.qpx.wr_flags & 0xf) as u8);
        if qp.sq_sig_all {
            flags = flags | SendFlags::SIGNALED;
        }
        let at = b.sges.len();
        b.pending.push(Pending {
            wr_id: qp.qpx.wr_id,
            flags,
            op,
            sges: (at, 0),
            inline: None,
            ud: None,
        });
    });
}

fn last(b: &mut Builder) -> Option<&mut Pending> {
    let p = b.pending.last_mut();
    if p.is_none() && b.error == 0 {
        b.error = libc::EINVAL;
    }
    p
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    with(qpx, |_, b| {
        b.pending.clear();
        b.sges.clear();
        b.inline.clear();
        b.error = 0;
    });
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    // SAFETY: same contract as wr_start.
    unsafe { wr_start(qpx) };
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    with(qpx, |qp, b| {
        if b.error != 0 {
            let e = b.error;
            b.pending.clear();
            return e;
        }
        let is_ud = qp.inner.qp_type() == QpType::Ud;
        let mut result = 0;
        // One request at a time: each borrows its slice of the batch's SGE buffer.
        for p in &b.pending {
            let wr = SendWr {
                wr_id: p.wr_id,
                op: p.op,
                sg_list: &b.sges[p.sges.0..p.sges.0 + p.sges.1],
                flags: p.flags,
                ud: if is_ud { p.ud } else { None },
            };
            let inline = p.inline;
            let bytes = &b.inline;
            let posted = qp.inner.post_send_gathered(&[wr], |wr, out| {
                match inline {
                    Some((at, len)) => {
                        out.clear();
                        out.extend_from_slice(&bytes[at..at + len]);
                    }
                    None => gather_from_memory(wr.sg_list, out),
                }
                Ok(())
            });
            if let Err(e) = posted {
                result = crate::fail("ibv_wr_complete", &e);
                break;
            }
        }
        b.pending.clear();
        b.sges.clear();
        b.inline.clear();
        result
    })
    .unwrap_or(libc::EINVAL)
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(qpx, SendOp::RdmaWrite { remote_addr, rkey });
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    let imm = u32::from_be(imm);
    begin(
        qpx,
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        },
    );
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(qpx, SendOp::RdmaRead { remote_addr, rkey });
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(
        qpx,
        SendOp::AtomicCmpAndSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        },
    );
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    begin(
        qpx,
        SendOp::AtomicFetchAndAdd {
            remote_addr,
            rkey,
            add,
        },
    );
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    begin(qpx, SendOp::Send);
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    begin(
        qpx,
        SendOp::SendWithImm {
            imm: u32::from_be(imm),
        },
    );
}

unsafe extern "C" fn wr_send_inv(qpx: *mut ibv_qp_ex, rkey: u32) {
    begin(qpx, SendOp::SendWithInv { rkey });
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    with(qpx, |_, b| {
        if ah.is_null() {
            b.error = libc::EINVAL;
            return;
        }
        // SAFETY: the program's AH came from roce_ibv_create_ah.
        let handle = unsafe { (*ah).handle };
        if let Some(p) = last(b) {
            p.ud = Some(UdDest {
                ah: handle,
                remote_qpn: qpn,
                remote_qkey: qkey,
            });
        }
    });
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // SAFETY: one SGE on the stack.
    unsafe { wr_set_sge_list(qpx, 1, &sge) };
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    with(qpx, |_, b| {
        if n > 0 && list.is_null() {
            b.error = libc::EINVAL;
            return;
        }
        let at = b.sges.len();
        for i in 0..n {
            // SAFETY: the program's list holds n entries.
            let c = unsafe { *list.add(i) };
            b.sges.push(Sge {
                addr: c.addr,
                length: c.length,
                lkey: c.lkey,
            });
        }
        if let Some(p) = last(b) {
            p.sges = (at, n);
        }
    });
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: one buffer on the stack.
    unsafe { wr_set_inline_data_list(qpx, 1, &buf) };
}

unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    with(qpx, |_, b| {
        if n > 0 && list.is_null() {
            b.error = libc::EINVAL;
            return;
        }
        let at = b.inline.len();
        for i in 0..n {
            // SAFETY: the program's list holds n entries, each naming readable memory.
            let d = unsafe { &*list.add(i) };
            if d.length > 0 {
                // SAFETY: as above.
                let bytes = unsafe { std::slice::from_raw_parts(d.addr as *const u8, d.length) };
                b.inline.extend_from_slice(bytes);
            }
        }
        let len = b.inline.len() - at;
        if let Some(p) = last(b) {
            p.inline = Some((at, len));
            p.flags = p.flags | SendFlags::INLINE;
        }
    });
}
