//! The small entry points (strings, fork, unsupported verbs) and what what rdma-core's provider libraries import from
//! libibverbs (`IBVERBS_PRIVATE_34`: `ibv_cmd_*`, `verbs_*`). perftest links libmlx5 and libefa
//! with immediate binding, so every one of their imports must resolve when the program loads,
//! although we never load a provider: those are stubs that fail with EOPNOTSUPP.

use std::ffi::{c_char, c_int, c_void};

use crate::set_errno;

versions! {
    "IBVERBS_1.1": [
        ibv_wc_status_str, ibv_fork_init, ibv_dontfork_range, ibv_dofork_range,
        ibv_get_async_event, ibv_ack_async_event,
        ibv_attach_mcast, ibv_detach_mcast, ibv_create_ah_from_wc, ibv_resolve_eth_l2_from_gid,
        ibv_node_type_str, ibv_port_state_str, ibv_event_type_str,
    ]
    "IBVERBS_PRIVATE_34": [
        verbs_allow_disassociate_destroy, verbs_register_driver_34, __verbs_log,
        verbs_set_ops, verbs_uninit_context,
    ]
}

/// The provider entry points, never called (no provider is ever loaded): each answers
/// EOPNOTSUPP, as a negative errno in an int or pointer-sized return register.
macro_rules! provider_stubs {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> isize {
            set_errno(libc::EOPNOTSUPP);
            -(libc::EOPNOTSUPP as isize)
        }
    )*};
}

mod provider {
    use super::set_errno;
    versions! {
        "IBVERBS_PRIVATE_34": [
            _verbs_init_and_alloc_context, execute_ioctl, verbs_init_cq,
            verbs_open_device, ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw,
            ibv_cmd_alloc_pd, ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah,
            ibv_cmd_create_counters, ibv_cmd_create_cq_ex, ibv_cmd_create_flow,
            ibv_cmd_create_flow_action_esp, ibv_cmd_create_qp_ex, ibv_cmd_create_qp_ex2,
            ibv_cmd_create_rwq_ind_table, ibv_cmd_create_srq, ibv_cmd_create_srq_ex,
            ibv_cmd_create_wq, ibv_cmd_dealloc_mw, ibv_cmd_dealloc_pd, ibv_cmd_dereg_mr,
            ibv_cmd_destroy_ah, ibv_cmd_destroy_counters, ibv_cmd_destroy_cq,
            ibv_cmd_destroy_flow, ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp,
            ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq, ibv_cmd_destroy_wq,
            ibv_cmd_detach_mcast, ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq,
            ibv_cmd_modify_flow_action_esp, ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex,
            ibv_cmd_modify_srq, ibv_cmd_modify_wq, ibv_cmd_open_qp, ibv_cmd_open_xrcd,
            ibv_cmd_query_context, ibv_cmd_query_device_any, ibv_cmd_query_mr,
            ibv_cmd_query_port, ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters,
            ibv_cmd_reg_dm_mr, ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_rereg_mr,
            ibv_cmd_resize_cq,
        ]
    }
    provider_stubs! {
        roce__verbs_init_and_alloc_context, roce_execute_ioctl, roce_verbs_init_cq,
        roce_verbs_open_device, roce_ibv_cmd_advise_mr, roce_ibv_cmd_alloc_dm,
        roce_ibv_cmd_alloc_mw, roce_ibv_cmd_alloc_pd, roce_ibv_cmd_attach_mcast,
        roce_ibv_cmd_close_xrcd, roce_ibv_cmd_create_ah, roce_ibv_cmd_create_counters,
        roce_ibv_cmd_create_cq_ex, roce_ibv_cmd_create_flow,
        roce_ibv_cmd_create_flow_action_esp, roce_ibv_cmd_create_qp_ex,
        roce_ibv_cmd_create_qp_ex2, roce_ibv_cmd_create_rwq_ind_table, roce_ibv_cmd_create_srq,
        roce_ibv_cmd_create_srq_ex, roce_ibv_cmd_create_wq, roce_ibv_cmd_dealloc_mw,
        roce_ibv_cmd_dealloc_pd, roce_ibv_cmd_dereg_mr, roce_ibv_cmd_destroy_ah,
        roce_ibv_cmd_destroy_counters, roce_ibv_cmd_destroy_cq, roce_ibv_cmd_destroy_flow,
        roce_ibv_cmd_destroy_flow_action, roce_ibv_cmd_destroy_qp,
        roce_ibv_cmd_destroy_rwq_ind_table, roce_ibv_cmd_destroy_srq, roce_ibv_cmd_destroy_wq,
        roce_ibv_cmd_detach_mcast, roce_ibv_cmd_free_dm, roce_ibv_cmd_get_context,
        roce_ibv_cmd_modify_cq, roce_ibv_cmd_modify_flow_action_esp, roce_ibv_cmd_modify_qp,
        roce_ibv_cmd_modify_qp_ex, roce_ibv_cmd_modify_srq, roce_ibv_cmd_modify_wq,
        roce_ibv_cmd_open_qp, roce_ibv_cmd_open_xrcd, roce_ibv_cmd_query_context,
        roce_ibv_cmd_query_device_any, roce_ibv_cmd_query_mr, roce_ibv_cmd_query_port,
        roce_ibv_cmd_query_qp, roce_ibv_cmd_query_srq, roce_ibv_cmd_read_counters,
        roce_ibv_cmd_reg_dm_mr, roce_ibv_cmd_reg_dmabuf_mr, roce_ibv_cmd_reg_mr,
        roce_ibv_cmd_rereg_mr, roce_ibv_cmd_resize_cq,
    }
}

/// Read by providers; ours never run.
#[no_mangle]
pub static mut roce_verbs_allow_disassociate_destroy: bool = false;

/// A provider's constructor registers itself here; we load no provider, so it is ignored.
#[no_mangle]
pub extern "C" fn roce_verbs_register_driver_34(_ops: *const c_void) {}

#[no_mangle]
pub extern "C" fn roce_verbs_set_ops(_ctx: *mut c_void, _ops: *const c_void) {}

#[no_mangle]
pub extern "C" fn roce_verbs_uninit_context(_ctx: *mut c_void) {}

#[no_mangle]
pub extern "C" fn roce___verbs_log(_ctx: *mut c_void, _level: u32, _fmt: *const c_char) {}

/// `ibv_wc_status_str`: the texts of rdma-core.
#[no_mangle]
pub extern "C" fn roce_ibv_wc_status_str(status: c_int) -> *const c_char {
    const TEXTS: [&std::ffi::CStr; 22] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
    ];
    match usize::try_from(status).ok().and_then(|s| TEXTS.get(s)) {
        Some(t) => t.as_ptr(),
        None => c"unknown".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn roce_ibv_node_type_str(node_type: c_int) -> *const c_char {
    match node_type {
        1 => c"InfiniBand channel adapter".as_ptr(),
        2 => c"InfiniBand switch".as_ptr(),
        3 => c"InfiniBand router".as_ptr(),
        4 => c"iWARP NIC".as_ptr(),
        _ => c"unknown".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn roce_ibv_port_state_str(state: c_int) -> *const c_char {
    match state {
        0 => c"PORT_NOP".as_ptr(),
        1 => c"PORT_DOWN".as_ptr(),
        2 => c"PORT_INIT".as_ptr(),
        3 => c"PORT_ARMED".as_ptr(),
        4 => c"PORT_ACTIVE".as_ptr(),
        5 => c"PORT_ACTIVE_DEFER".as_ptr(),
        _ => c"invalid state".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn roce_ibv_event_type_str(_event: c_int) -> *const c_char {
    c"unknown".as_ptr()
}

/// `ibv_fork_init`: registrations are always fork-safe here (see [`crate::mr`]).
#[no_mangle]
pub extern "C" fn roce_ibv_fork_init() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn roce_ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn roce_ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_get_async_event`: our NIC raises no asynchronous events yet; a blocking wait would
/// never end, so it fails at once.
#[no_mangle]
pub extern "C" fn roce_ibv_get_async_event(_ctx: *mut c_void, _event: *mut c_void) -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -1
}

#[no_mangle]
pub extern "C" fn roce_ibv_ack_async_event(_event: *mut c_void) {}

#[no_mangle]
pub extern "C" fn roce_ibv_attach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn roce_ibv_detach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn roce_ibv_create_ah_from_wc(
    _pd: *mut c_void,
    _wc: *mut c_void,
    _grh: *mut c_void,
    _port: u8,
) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn roce_ibv_resolve_eth_l2_from_gid(
    _ctx: *mut c_void,
    _attr: *mut c_void,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    libc::EOPNOTSUPP
}
