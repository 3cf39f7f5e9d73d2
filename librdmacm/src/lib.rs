//! `librdmacm.so.1` of our own. perftest links librdmacm even when it does not use it, and
//! loads with immediate binding, so every `rdma_*` it imports must exist for it to start at
//! all. Until the RDMA CM calls are mapped onto our NIC's connection manager
//! (`roce_nic::verbs::CmId`), each one fails cleanly, as librdmacm does on a host without
//! RDMA devices: NULL or -1 with errno ENOSYS — never an abort.

use std::ffi::{c_char, c_int};

fn not_supported() {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
}

macro_rules! versions {
    ($($node:literal: [$($name:ident),* $(,)?])*) => {
        std::arch::global_asm!(concat!($($(
            ".symver roce_", stringify!($name), ", ", stringify!($name), "@@", $node, "\n",
        )*)*));
    };
}

versions! {
    "RDMACM_1.0": [
        rdma_accept, rdma_ack_cm_event, rdma_bind_addr, rdma_connect, rdma_create_ep,
        rdma_create_event_channel, rdma_create_id, rdma_create_qp, rdma_create_qp_ex,
        rdma_create_srq, rdma_destroy_ep, rdma_destroy_event_channel, rdma_destroy_id,
        rdma_destroy_qp, rdma_disconnect, rdma_event_str, rdma_freeaddrinfo, rdma_get_cm_event,
        rdma_get_request, rdma_getaddrinfo, rdma_listen, rdma_migrate_id, rdma_reject,
        rdma_resolve_addr, rdma_resolve_route, rdma_set_option, rpoll,
        rdma_get_devices, rdma_free_devices, rdma_get_src_port, rdma_get_dst_port,
        rdma_notify, rdma_leave_multicast, rdma_join_multicast,
    ]
    "RDMACM_1.2": [rdma_establish, rdma_init_qp_attr]
}

/// Calls that answer -1 with ENOSYS (an `int` result).
macro_rules! failing {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            not_supported();
            -1
        }
    )*};
}

/// Calls that answer NULL with ENOSYS (a pointer result).
macro_rules! null {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> *mut std::ffi::c_void {
            not_supported();
            std::ptr::null_mut()
        }
    )*};
}

failing! {
    roce_rdma_accept, roce_rdma_ack_cm_event, roce_rdma_bind_addr, roce_rdma_connect,
    roce_rdma_create_ep, roce_rdma_create_id, roce_rdma_create_qp, roce_rdma_create_qp_ex,
    roce_rdma_create_srq, roce_rdma_destroy_id, roce_rdma_disconnect, roce_rdma_get_cm_event,
    roce_rdma_get_request, roce_rdma_getaddrinfo, roce_rdma_listen, roce_rdma_migrate_id,
    roce_rdma_reject, roce_rdma_resolve_addr, roce_rdma_resolve_route, roce_rdma_set_option,
    roce_rpoll, roce_rdma_establish, roce_rdma_init_qp_attr, roce_rdma_notify,
    roce_rdma_leave_multicast, roce_rdma_join_multicast,
}

null! { roce_rdma_create_event_channel, roce_rdma_get_devices }

/// Nothing was made, so there is nothing to free.
#[no_mangle]
pub extern "C" fn roce_rdma_destroy_event_channel(_channel: *mut std::ffi::c_void) {}
#[no_mangle]
pub extern "C" fn roce_rdma_destroy_ep(_id: *mut std::ffi::c_void) {}
#[no_mangle]
pub extern "C" fn roce_rdma_destroy_qp(_id: *mut std::ffi::c_void) {}
#[no_mangle]
pub extern "C" fn roce_rdma_freeaddrinfo(_res: *mut std::ffi::c_void) {}
#[no_mangle]
pub extern "C" fn roce_rdma_free_devices(_list: *mut std::ffi::c_void) {}
#[no_mangle]
pub extern "C" fn roce_rdma_get_src_port(_id: *mut std::ffi::c_void) -> u16 {
    0
}
#[no_mangle]
pub extern "C" fn roce_rdma_get_dst_port(_id: *mut std::ffi::c_void) -> u16 {
    0
}

/// `rdma_event_str`: librdmacm's names of `enum rdma_cm_event_type`.
#[no_mangle]
pub extern "C" fn roce_rdma_event_str(event: c_int) -> *const c_char {
    const NAMES: [&std::ffi::CStr; 16] = [
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    match usize::try_from(event).ok().and_then(|e| NAMES.get(e)) {
        Some(name) => name.as_ptr(),
        None => c"UNKNOWN EVENT".as_ptr(),
    }
}
