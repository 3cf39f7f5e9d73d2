//! The structures of rdma-core's `infiniband/verbs.h` (rdma-core 44) that cross this library's
//! boundary, field for field: programs compiled against the system's header read and write
//! them directly (the inline `ibv_post_send` reads `context->ops`, `verbs_get_ctx` reads the
//! `verbs_context` before the `ibv_context`). Only what we fill or read is named; the rest are
//! opaque pointers of the right size. `tests/layout.rs` compiles a C program with the system
//! header and checks every size and offset against these.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type Fn = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub struct ibv_device {
    pub _ops: [Fn; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Fn,
    pub _compat_query_port: Fn,
    pub _compat: [Fn; 5],
    pub alloc_mw: Fn,
    pub bind_mw: Fn,
    pub dealloc_mw: Fn,
    pub _compat_create_cq: Fn,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub _compat_cq: [Fn; 7],
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub _compat_qp: [Fn; 4],
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub _compat_rest: [Fn; 5],
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` value that says a `verbs_context` precedes.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// The extended operations, placed just before the `ibv_context`. rdma-core 44 declares 38
/// operation slots before `_ABI_placeholder3`; the inline functions use an operation only when
/// `sz` covers it and the pointer is set.
#[repr(C)]
pub struct verbs_context {
    pub query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int>,
    /// advise_mr ... query_rt_values: 24 operations we do not offer.
    pub _unsupported_a: [Fn; 24],
    pub create_cq_ex: Fn,
    pub priv_: *mut c_void,
    pub query_device_ex: Fn,
    pub _flows: [Fn; 4],
    pub open_qp: Fn,
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    pub _unsupported_b: [Fn; 4],
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

#[repr(C)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_gid_entry` (8-aligned by its `union ibv_gid`).
#[repr(C, align(8))]
pub struct ibv_gid_entry {
    pub gid: [u8; 16],
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` (also the start of `ibv_srq_init_attr_ex`, which the inline
/// `ibv_create_srq_ex` passes to `ibv_create_srq` for a basic SRQ).
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `enum ibv_srq_attr_mask`.
pub mod srq_mask {
    pub const MAX_WR: i32 = 1 << 0;
    pub const LIMIT: i32 = 1 << 1;
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

pub type WrFn<A> = Option<unsafe extern "C" fn(*mut ibv_qp_ex, A)>;

/// `struct ibv_qp_ex`: the QP and the `ibv_wr_*` builder operations.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw: Fn,
    pub wr_local_inv: WrFn<u32>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_send_imm: WrFn<u32>,
    pub wr_send_inv: WrFn<u32>,
    pub wr_send_tso: Fn,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Fn,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_atomic_write: Fn,
}

#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

#[repr(C)]
pub union WrUnion {
    pub rdma: Rdma,
    pub atomic: Atomic,
    pub ud: Ud,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `imm_data` (network byte order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: WrUnion,
    pub qp_type: u32,
    /// The `bind_mw` / `tso` union: 48 bytes we never read.
    pub _bind_mw: [u64; 6],
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    /// `struct ibv_rx_hash_conf`: u8 function, u8 key length, u8 *key, u64 fields mask.
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// 8-aligned: `union ibv_gid` holds two `__be64`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `ibv_qp_attr_mask` bits.
pub mod qp_mask {
    pub const STATE: i32 = 1 << 0;
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    pub const PKEY_INDEX: i32 = 1 << 4;
    pub const PORT: i32 = 1 << 5;
    pub const QKEY: i32 = 1 << 6;
    pub const AV: i32 = 1 << 7;
    pub const PATH_MTU: i32 = 1 << 8;
    pub const TIMEOUT: i32 = 1 << 9;
    pub const RETRY_CNT: i32 = 1 << 10;
    pub const RNR_RETRY: i32 = 1 << 11;
    pub const RQ_PSN: i32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    pub const SQ_PSN: i32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const DEST_QPN: i32 = 1 << 20;
}

/// The sizes and offsets the C header gives, for the layout test to compare.
pub fn layout() -> Vec<(&'static str, usize)> {
    use std::mem::{offset_of, size_of};
    vec![
        ("sizeof(struct ibv_device)", size_of::<ibv_device>()),
        ("sizeof(struct ibv_context)", size_of::<ibv_context>()),
        ("sizeof(struct verbs_context)", size_of::<verbs_context>()),
        (
            "offsetof(struct verbs_context, query_port)",
            offset_of!(verbs_context, query_port),
        ),
        (
            "offsetof(struct verbs_context, create_cq_ex)",
            offset_of!(verbs_context, create_cq_ex),
        ),
        (
            "offsetof(struct verbs_context, query_device_ex)",
            offset_of!(verbs_context, query_device_ex),
        ),
        (
            "offsetof(struct verbs_context, create_qp_ex)",
            offset_of!(verbs_context, create_qp_ex),
        ),
        (
            "offsetof(struct verbs_context, sz)",
            offset_of!(verbs_context, sz),
        ),
        (
            "offsetof(struct ibv_context, ops.poll_cq)",
            offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, poll_cq),
        ),
        (
            "offsetof(struct ibv_context, ops.req_notify_cq)",
            offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, req_notify_cq),
        ),
        (
            "offsetof(struct ibv_context, ops.post_send)",
            offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_send),
        ),
        (
            "offsetof(struct ibv_context, ops.post_srq_recv)",
            offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_srq_recv),
        ),
        ("sizeof(struct ibv_srq)", size_of::<ibv_srq>()),
        (
            "offsetof(struct ibv_srq, handle)",
            offset_of!(ibv_srq, handle),
        ),
        (
            "offsetof(struct ibv_srq, events_completed)",
            offset_of!(ibv_srq, events_completed),
        ),
        ("sizeof(struct ibv_srq_attr)", size_of::<ibv_srq_attr>()),
        (
            "offsetof(struct ibv_srq_init_attr, attr)",
            offset_of!(ibv_srq_init_attr, attr),
        ),
        (
            "offsetof(struct ibv_srq_init_attr_ex, attr)",
            offset_of!(ibv_srq_init_attr, attr),
        ),
        (
            "offsetof(struct ibv_context, ops.post_recv)",
            offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_recv),
        ),
        (
            "offsetof(struct ibv_context, abi_compat)",
            offset_of!(ibv_context, abi_compat),
        ),
        (
            "sizeof(struct ibv_device_attr)",
            size_of::<ibv_device_attr>(),
        ),
        (
            "offsetof(struct ibv_device_attr, max_pkeys)",
            offset_of!(ibv_device_attr, max_pkeys),
        ),
        ("sizeof(struct ibv_port_attr)", size_of::<ibv_port_attr>()),
        (
            "offsetof(struct ibv_port_attr, link_layer)",
            offset_of!(ibv_port_attr, link_layer),
        ),
        ("sizeof(struct ibv_gid_entry)", size_of::<ibv_gid_entry>()),
        (
            "sizeof(struct ibv_comp_channel)",
            size_of::<ibv_comp_channel>(),
        ),
        ("sizeof(struct ibv_pd)", size_of::<ibv_pd>()),
        ("sizeof(struct ibv_mr)", size_of::<ibv_mr>()),
        ("sizeof(struct ibv_cq)", size_of::<ibv_cq>()),
        ("sizeof(struct ibv_ah)", size_of::<ibv_ah>()),
        ("sizeof(struct ibv_qp)", size_of::<ibv_qp>()),
        ("sizeof(struct ibv_qp_ex)", size_of::<ibv_qp_ex>()),
        (
            "offsetof(struct ibv_qp_ex, wr_id)",
            offset_of!(ibv_qp_ex, wr_id),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_send)",
            offset_of!(ibv_qp_ex, wr_send),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_set_sge)",
            offset_of!(ibv_qp_ex, wr_set_sge),
        ),
        (
            "offsetof(struct ibv_qp_ex, wr_complete)",
            offset_of!(ibv_qp_ex, wr_complete),
        ),
        ("sizeof(struct ibv_send_wr)", size_of::<ibv_send_wr>()),
        (
            "offsetof(struct ibv_send_wr, wr)",
            offset_of!(ibv_send_wr, wr),
        ),
        (
            "offsetof(struct ibv_send_wr, imm_data)",
            offset_of!(ibv_send_wr, imm_data),
        ),
        ("sizeof(struct ibv_recv_wr)", size_of::<ibv_recv_wr>()),
        ("sizeof(struct ibv_wc)", size_of::<ibv_wc>()),
        (
            "offsetof(struct ibv_wc, wc_flags)",
            offset_of!(ibv_wc, wc_flags),
        ),
        (
            "sizeof(struct ibv_qp_init_attr)",
            size_of::<ibv_qp_init_attr>(),
        ),
        (
            "sizeof(struct ibv_qp_init_attr_ex)",
            size_of::<ibv_qp_init_attr_ex>(),
        ),
        (
            "offsetof(struct ibv_qp_init_attr_ex, send_ops_flags)",
            offset_of!(ibv_qp_init_attr_ex, send_ops_flags),
        ),
        ("sizeof(struct ibv_qp_attr)", size_of::<ibv_qp_attr>()),
        (
            "offsetof(struct ibv_qp_attr, ah_attr)",
            offset_of!(ibv_qp_attr, ah_attr),
        ),
        (
            "offsetof(struct ibv_qp_attr, pkey_index)",
            offset_of!(ibv_qp_attr, pkey_index),
        ),
        ("sizeof(struct ibv_ah_attr)", size_of::<ibv_ah_attr>()),
    ]
}
