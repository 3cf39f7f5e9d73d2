//! Devices and contexts: `ibv_get_device_list`, `ibv_open_device`, the queries.
//!
//! A device is a NIC process by name. The list is made without talking to the NICs (as
//! rdma-core reads sysfs without opening a device); opening connects to the NIC's control
//! socket, and the queries answer from what the NIC says of itself (its limits, GIDs and
//! P_Keys), asked anew at each query.

use std::ffi::{c_char, c_int};
use std::ptr;
use std::sync::Mutex;

use roce_nic::control::DeviceInfo;
use roce_nic::verbs::{Context, Gid};

use crate::abi::*;
use crate::{fail, guard, set_errno, verbs};

versions! {
    "IBVERBS_1.0": [ibv_read_sysfs_file]
    "IBVERBS_1.1": [
        ibv_get_device_list, ibv_free_device_list, ibv_get_device_name, ibv_get_device_guid,
        ibv_open_device, ibv_close_device, ibv_query_device, ibv_query_port, ibv_query_gid,
        ibv_query_pkey,
    ]
    "IBVERBS_1.11": [_ibv_query_gid_ex]
    "IBVERBS_PRIVATE_34": [ibv_query_gid_type]
}

/// The environment variable that names the NICs a program sees (`roce run --nic` sets it).
pub const NIC_ENV: &str = "ROCE_NIC";

/// One device: the C structure first, then its NIC's name. Devices live as long as the
/// program: a context keeps a pointer to its device, and rdma-core's devices outlive the
/// list that named them too.
#[repr(C)]
pub struct Device {
    pub dev: ibv_device,
    pub nic: String,
}

/// Every device made so far, by NIC name; never freed (see [`Device`]).
static DEVICES: Mutex<Vec<&'static Device>> = Mutex::new(Vec::new());

pub(crate) fn nic_names() -> Vec<String> {
    if let Some(list) = std::env::var_os(NIC_ENV) {
        return list
            .to_string_lossy()
            .split(',')
            .map(str::trim)
            .filter(|n| roce_nic::host::check_name(n).is_ok())
            .map(str::to_owned)
            .collect();
    }
    let Ok(entries) = std::fs::read_dir(roce_nic::host::socket_dir()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".sock").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

fn copy_str(dst: &mut [c_char], src: &str) {
    let n = src.len().min(dst.len() - 1);
    for (d, s) in dst.iter_mut().zip(src.as_bytes()[..n].iter()) {
        *d = *s as c_char;
    }
    dst[n] = 0;
}

fn device(nic: &str) -> &'static Device {
    let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = devices.iter().find(|d| d.nic == nic) {
        return d;
    }
    // SAFETY: ibv_device is plain data (pointers, integers, chars): all zeros is valid.
    let mut dev: ibv_device = unsafe { std::mem::zeroed() };
    dev.node_type = 1; // IBV_NODE_CA
    dev.transport_type = 0; // IBV_TRANSPORT_IB (RoCE is IB transport over Ethernet)
    copy_str(&mut dev.name, nic);
    copy_str(&mut dev.dev_name, &format!("roce-{nic}"));
    let path = roce_nic::host::socket_path(nic);
    copy_str(&mut dev.dev_path, &path.to_string_lossy());
    copy_str(&mut dev.ibdev_path, &path.to_string_lossy());
    let leaked: &'static Device = Box::leak(Box::new(Device {
        dev,
        nic: nic.to_owned(),
    }));
    devices.push(leaked);
    leaked
}

/// `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    // SAFETY: the same contract.
    unsafe { get_device_list(num) }
}

/// The body of `ibv_get_device_list`, for the other modules of the library (a function bound
/// to a version node is called only from its own module: see [`crate::versions`]).
pub(crate) unsafe fn get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    guard(ptr::null_mut(), || {
        let mut list: Vec<*mut ibv_device> = nic_names()
            .iter()
            .map(|n| &device(n).dev as *const ibv_device as *mut ibv_device)
            .collect();
        if !num.is_null() {
            // SAFETY: the caller passes a valid int pointer or NULL (checked).
            unsafe { *num = list.len() as c_int };
        }
        list.push(ptr::null_mut());
        Box::into_raw(list.into_boxed_slice()) as *mut *mut ibv_device
    })
}

/// `ibv_free_device_list`: frees the array (the devices stay, see [`Device`]).
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the same contract.
    unsafe { free_device_list(list) }
}

pub(crate) unsafe fn free_device_list(list: *mut *mut ibv_device) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: the list came from roce_ibv_get_device_list: NULL-terminated.
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: it was a boxed slice of n + 1 pointers.
    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(list, n + 1)) });
}

fn nic_of(device: *mut ibv_device) -> Option<&'static Device> {
    let devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    devices
        .iter()
        .copied()
        .find(|d| ptr::eq(&d.dev, device as *const ibv_device))
}

/// `ibv_get_device_name`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    match nic_of(device) {
        Some(d) => d.dev.name.as_ptr(),
        None => {
            set_errno(libc::EINVAL);
            ptr::null()
        }
    }
}

/// The node GUID: the EUI-64 of the port's MAC, as Soft-RoCE and mlx5 derive it.
fn guid(info: &DeviceInfo) -> u64 {
    let m = info.mac.0;
    u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
}

/// GUIDs asked for before any context was opened, by NIC name.
static GUIDS: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

/// `ibv_get_device_guid`: the node GUID in network byte order (0 if the NIC does not answer).
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    guard(0, || {
        let Some(d) = nic_of(device) else { return 0 };
        let mut guids = GUIDS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, g)) = guids.iter().find(|(n, _)| *n == d.nic) {
            return g.to_be();
        }
        match roce_nic::host::connect(&d.nic) {
            Ok(ctx) => {
                let g = guid(ctx.device());
                guids.push((d.nic.clone(), g));
                g.to_be()
            }
            Err(_) => 0,
        }
    })
}

/// An open context: the extended context (whose last field is the `ibv_context` the program
/// holds), then ours.
#[repr(C)]
pub struct Ctx {
    pub vctx: verbs_context,
    pub nic: Context,
    pub info: DeviceInfo,
}

impl Ctx {
    /// The context behind a program's `ibv_context` pointer.
    ///
    /// # Safety
    /// `context` must come from [`roce_ibv_open_device`] and not be closed.
    pub unsafe fn from_ptr<'a>(context: *mut ibv_context) -> &'a Ctx {
        let offset = std::mem::offset_of!(verbs_context, context);
        // SAFETY: the context is the `vctx.context` field of a Ctx (caller's promise), and
        // vctx is the first field of the repr(C) Ctx.
        unsafe { &*((context as *mut u8).sub(offset) as *const Ctx) }
    }
}

/// Whether a context pointer is one of ours (programs may pass garbage; they get EINVAL).
pub(crate) fn is_ours(context: *mut ibv_context) -> bool {
    !context.is_null() && {
        // SAFETY: a non-NULL context pointer from the program points at an ibv_context.
        let abi = unsafe { (*context).abi_compat };
        abi == VERBS_ABI_IS_EXTENDED
    }
}

/// `ibv_open_device`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    open_device(device)
}

pub(crate) fn open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(ptr::null_mut(), || {
        let Some(d) = nic_of(device) else {
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        };
        let nic = match roce_nic::host::connect(&d.nic) {
            Ok(nic) => nic,
            Err(e) => {
                set_errno(fail("ibv_open_device", &e));
                return ptr::null_mut();
            }
        };
        let info = nic.device().clone();
        // SAFETY: verbs_context is plain data: pointers, integers, a pthread mutex whose
        // all-zero value is PTHREAD_MUTEX_INITIALIZER on Linux.
        let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
        // The whole structure, as rdma-core sets it: `verbs_get_ctx_op` offers an operation
        // when `sz` reaches from it to the end.
        vctx.sz = std::mem::size_of::<verbs_context>();
        vctx.query_port = Some(query_port_ex);
        vctx.create_qp_ex = Some(verbs::create_qp_ex);
        let c = &mut vctx.context;
        c.device = device;
        c.cmd_fd = -1;
        c.async_fd = -1;
        c.num_comp_vectors = 1;
        c.abi_compat = VERBS_ABI_IS_EXTENDED;
        verbs::fill_ops(&mut c.ops);
        let ctx = Box::new(Ctx { vctx, nic, info });
        let ctx = Box::into_raw(ctx);
        // SAFETY: just allocated; the context field lives as long as the box.
        unsafe { ptr::addr_of_mut!((*ctx).vctx.context) }
    })
}

/// `ibv_close_device`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_close_device(context: *mut ibv_context) -> c_int {
    if !is_ours(context) {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: ours (checked); the program gives it up with this call.
        let ctx = unsafe { Ctx::from_ptr(context) } as *const Ctx as *mut Ctx;
        // SAFETY: it was made by Box::into_raw in roce_ibv_open_device.
        drop(unsafe { Box::from_raw(ctx) });
        0
    })
}

fn clamp(v: u64) -> c_int {
    v.min(i32::MAX as u64) as c_int
}

/// `ibv_query_device`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_query_device(
    context: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    if !is_ours(context) || attr.is_null() {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: ours (checked).
        let ctx = unsafe { Ctx::from_ptr(context) };
        let info = match ctx.nic.query_device() {
            Ok(info) => info,
            Err(e) => return fail("ibv_query_device", &e),
        };
        let l = &info.limits;
        // SAFETY: the caller's attr points at a struct ibv_device_attr (checked non-NULL);
        // plain data, so zeroing it first is valid.
        let a = unsafe { &mut *attr };
        // SAFETY: as above.
        unsafe { ptr::write_bytes(attr, 0, 1) };
        copy_str(&mut a.fw_ver, env!("CARGO_PKG_VERSION"));
        a.node_guid = guid(&info).to_be();
        a.sys_image_guid = a.node_guid;
        a.max_mr_size = l.max_mr_size;
        a.page_size_cap = page_size() as u64;
        a.vendor_id = 0;
        a.vendor_part_id = 0;
        a.hw_ver = 0;
        a.max_qp = clamp(l.max_qp);
        a.max_qp_wr = clamp(l.max_qp_wr);
        a.max_sge = clamp(l.max_sge);
        a.max_sge_rd = clamp(l.max_sge);
        a.max_cq = clamp(l.max_cq);
        a.max_cqe = clamp(l.max_cqe);
        a.max_mr = clamp(l.max_mr);
        a.max_pd = clamp(l.max_pd);
        a.max_qp_rd_atom = c_int::from(info.max_qp_rd_atom);
        a.max_res_rd_atom = c_int::from(info.max_qp_rd_atom) * a.max_qp;
        a.max_qp_init_rd_atom = c_int::from(info.max_qp_rd_atom);
        a.atomic_cap = 1; // IBV_ATOMIC_HCA
        a.max_ah = clamp(l.max_ah);
        a.max_srq = clamp(l.max_srq);
        a.max_srq_wr = clamp(l.max_qp_wr);
        a.max_srq_sge = clamp(l.max_sge);
        a.max_pkeys = info.pkeys.len() as u16;
        a.local_ca_ack_delay = 15;
        a.phys_port_cnt = 1;
        0
    })
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

fn fill_port(info: &DeviceInfo, a: &mut ibv_port_attr) {
    a.state = 4; // IBV_PORT_ACTIVE: the port's link is up while the NIC runs
    a.max_mtu = info.max_mtu as c_int;
    a.active_mtu = info.max_mtu as c_int;
    a.gid_tbl_len = info.gids.len() as c_int;
    // IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS, as Soft-RoCE reports.
    a.port_cap_flags = (1 << 16) | (1 << 26);
    a.max_msg_sz = 1 << 31;
    a.pkey_tbl_len = info.pkeys.len() as u16;
    a.max_vl_num = 1;
    a.active_width = 1; // 1X
    a.active_speed = 32; // 25 Gb/s-ish: EDR per lane (informational)
    a.phys_state = 5; // LinkUp
    a.link_layer = 2; // IBV_LINK_LAYER_ETHERNET
}

fn query_port_into(context: *mut ibv_context, port: u8, attr: *mut u8, len: usize) -> c_int {
    if !is_ours(context) || attr.is_null() {
        return libc::EINVAL;
    }
    if port != 1 {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: ours (checked).
        let ctx = unsafe { Ctx::from_ptr(context) };
        let info = match ctx.nic.query_device() {
            Ok(info) => info,
            Err(e) => return fail("ibv_query_port", &e),
        };
        // SAFETY: ibv_port_attr is plain data.
        let mut full: ibv_port_attr = unsafe { std::mem::zeroed() };
        fill_port(&info, &mut full);
        let n = len.min(std::mem::size_of::<ibv_port_attr>());
        // SAFETY: the caller's buffer holds `len` bytes (its sizeof), we copy at most that.
        unsafe { ptr::copy_nonoverlapping(&full as *const _ as *const u8, attr, n) };
        0
    })
}

/// The extended `query_port` (`verbs_context`), which the inline `ibv_query_port` calls.
unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    query_port_into(context, port, attr as *mut u8, len)
}

/// `ibv_query_port@IBVERBS_1.1`: the compatibility entry, whose structure ends before
/// `port_cap_flags2`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    let len = std::mem::offset_of!(ibv_port_attr, port_cap_flags2);
    query_port_into(context, port, attr as *mut u8, len)
}

fn gid_at(context: *mut ibv_context, index: c_int) -> Result<Gid, c_int> {
    if !is_ours(context) || index < 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: ours (checked).
    let ctx = unsafe { Ctx::from_ptr(context) };
    ctx.info
        .gids
        .get(index as usize)
        .copied()
        .ok_or(libc::EINVAL)
}

/// `ibv_query_gid`: 0, or -1 for an index outside the table (as rdma-core answers).
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_query_gid(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    if port != 1 || gid.is_null() {
        return -1;
    }
    match gid_at(context, index) {
        Ok(g) => {
            // SAFETY: the caller's union ibv_gid is 16 bytes (checked non-NULL).
            unsafe { *gid = g.0 };
            0
        }
        Err(_) => -1,
    }
}

/// RoCEv2 in the public `enum ibv_gid_type` of `verbs.h` (`_ibv_query_gid_ex`).
const GID_TYPE_ROCE_V2: u32 = 2;

/// RoCEv2 in the private `enum ibv_gid_type` of rdma-core's `driver.h` (IB/RoCEv1 0, RoCEv2
/// 1), which `ibv_query_gid_type` answers in — not the public enum of `verbs.h`.
const PRIVATE_GID_TYPE_ROCE_V2: u32 = 1;

/// `ibv_query_gid_type@IBVERBS_PRIVATE_34` (ibv_devinfo calls it): every GID is RoCEv2.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_query_gid_type(
    context: *mut ibv_context,
    port: u8,
    index: u32,
    gid_type: *mut u32,
) -> c_int {
    if port != 1 || gid_type.is_null() {
        return libc::EINVAL;
    }
    match gid_at(context, index.min(i32::MAX as u32) as c_int) {
        Ok(_) => {
            // SAFETY: checked non-NULL.
            unsafe { *gid_type = PRIVATE_GID_TYPE_ROCE_V2 };
            0
        }
        Err(e) => e,
    }
}

/// `_ibv_query_gid_ex@IBVERBS_1.11`.
#[no_mangle]
pub unsafe extern "C" fn roce__ibv_query_gid_ex(
    context: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    if port != 1 || entry.is_null() || flags != 0 {
        return libc::EINVAL;
    }
    if entry_size < std::mem::size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    match gid_at(context, index.min(i32::MAX as u32) as c_int) {
        Ok(g) => {
            // SAFETY: the caller's entry holds entry_size >= sizeof bytes (checked).
            let e = unsafe { &mut *entry };
            e.gid = g.0;
            e.gid_index = index;
            e.port_num = 1;
            e.gid_type = GID_TYPE_ROCE_V2;
            e.ndev_ifindex = 0;
            0
        }
        // An index past the table: ENODATA, as rdma-core says for an empty entry.
        Err(_) => libc::ENODATA,
    }
}

/// `ibv_query_pkey`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_query_pkey(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if !is_ours(context) || port != 1 || pkey.is_null() || index < 0 {
        return -1;
    }
    // SAFETY: ours (checked).
    let ctx = unsafe { Ctx::from_ptr(context) };
    match ctx.info.pkeys.get(index.min(u16::MAX as c_int) as u16) {
        Some(k) => {
            // SAFETY: checked non-NULL; rdma-core gives the key in network byte order.
            unsafe { *pkey = k.to_be() };
            0
        }
        None => -1,
    }
}

/// `ibv_read_sysfs_file@IBVERBS_1.0`: there is no sysfs for our devices; -1 as for a file
/// that does not exist.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    set_errno(libc::ENOENT);
    -1
}
