//! The RDMA CM calls of librdmacm (`rdma_create_id`, `rdma_resolve_addr`, `rdma_connect`,
//! `rdma_listen`, `rdma_accept`, `rdma_get_cm_event`, ...) on the NIC's connection manager
//! (`roce_nic::verbs::CmId`: REQ/REP/RTU/DREQ as MADs on QP1, the QP moved by the NIC).
//!
//! They live in this library, exported under librdmacm's version nodes (`RDMACM_1.0`,
//! `RDMACM_1.2`); our `librdmacm.so.1` only declares the nodes, so that a program's
//! `rdma_connect@RDMACM_1.0` finds its definition here, where the contexts, PDs and QPs are.
//! (The dynamic loader looks a versioned symbol up in every loaded object, as it does for the
//! functions glibc 2.34 moved from libpthread into libc.)
//!
//! - Every ID uses one context per device, opened at first use (as librdmacm opens every
//!   device at start): `id->verbs` is it, and the program makes its PD, CQs and QP there.
//! - Address and route resolution need nothing from the NIC (its neighbour table resolves the
//!   peer when the QP connects): they queue ADDR_RESOLVED and ROUTE_RESOLVED at once.
//! - Events come as the kernel's would: a thread of this library (the pump, one per process,
//!   started with the context) waits on the NIC's CM event line, takes each event the NIC
//!   queued and files it under the channel of the ID it is about. A channel's `fd` is an
//!   eventfd, readable while events wait on it, so a program may poll it (newer rping does);
//!   `rdma_get_cm_event` takes the next one, waiting on that descriptor (EAGAIN if the program
//!   made it non-blocking).
//! - No thread waits for an event inside the NIC: a request that waits there holds the
//!   process's control connection, and the other threads' verbs queue behind it. (The earlier
//!   `rdma_get_cm_event` asked the NIC in 20 ms waits; a rping server's teardown — ten verbs
//!   while its CM thread waited for more events — lost the connection to that thread again
//!   and again on a loaded machine, and did not exit for many seconds.)

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::ptr;
use std::sync::Mutex;
use std::time::Duration;

use roce_nic::cm::{CmEvent, CmEventKind, ConnParam};
use roce_nic::verbs::{CmId, VerbsError};

use crate::abi::*;
use crate::device::Ctx;
use crate::verbs::Qp;
use crate::{fail, guard, set_errno};

versions! {
    "RDMACM_1.0": [
        rdma_create_event_channel, rdma_destroy_event_channel, rdma_create_id, rdma_destroy_id,
        rdma_bind_addr, rdma_resolve_addr, rdma_resolve_route, rdma_listen, rdma_connect,
        rdma_accept, rdma_reject, rdma_disconnect, rdma_get_cm_event, rdma_ack_cm_event,
        rdma_create_qp, rdma_destroy_qp, rdma_event_str, rdma_set_option,
        rdma_create_ep, rdma_create_qp_ex, rdma_create_srq, rdma_destroy_ep, rdma_getaddrinfo,
        rdma_freeaddrinfo, rdma_get_request, rdma_migrate_id, rpoll, rdma_get_devices,
        rdma_free_devices, rdma_get_src_port, rdma_get_dst_port, rdma_notify,
        rdma_leave_multicast, rdma_join_multicast,
    ]
    "RDMACM_1.2": [rdma_establish, rdma_init_qp_attr]
}

/// The calls not mapped onto our CM yet: -1 (or NULL) with ENOSYS, as librdmacm answers
/// where a call is not supported.
macro_rules! not_supported {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> isize {
            set_errno(libc::ENOSYS);
            -1
        }
    )*};
}

not_supported! {
    roce_rdma_create_ep, roce_rdma_create_qp_ex, roce_rdma_create_srq,
    roce_rdma_get_request, roce_rdma_migrate_id, roce_rpoll, roce_rdma_notify,
    roce_rdma_leave_multicast, roce_rdma_join_multicast, roce_rdma_establish,
    roce_rdma_init_qp_attr,
}

/// Nothing was made by the calls above, so there is nothing to free.
#[no_mangle]
pub extern "C" fn roce_rdma_destroy_ep(_id: *mut c_void) {}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: libc::socklen_t,
    pub ai_dst_len: libc::socklen_t,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut std::ffi::c_char,
    pub ai_dst_canonname: *mut std::ffi::c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// One answer of [`roce_rdma_getaddrinfo`] and the addresses it points at.
#[repr(C)]
struct AddrInfo {
    info: rdma_addrinfo,
    src: libc::sockaddr_storage,
    dst: libc::sockaddr_storage,
}

/// `rdma_getaddrinfo`: the address of `node`:`service` (resolved by libc's getaddrinfo, IPv4
/// or IPv6) as the destination, or with `RAI_PASSIVE` as the source; one answer, an RC
/// connection in the TCP port space.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_getaddrinfo(
    node: *const std::ffi::c_char,
    service: *const std::ffi::c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    const RAI_PASSIVE: c_int = 1;
    if res.is_null() || (node.is_null() && service.is_null()) {
        return failed(libc::EINVAL);
    }
    // SAFETY: the program's hints, if any.
    let hints = unsafe { hints.as_ref() };
    let passive = hints.is_some_and(|h| h.ai_flags & RAI_PASSIVE != 0);
    // SAFETY: a zeroed addrinfo is valid hints.
    let mut h: libc::addrinfo = unsafe { std::mem::zeroed() };
    h.ai_socktype = libc::SOCK_STREAM;
    h.ai_family = hints.map_or(libc::AF_UNSPEC, |h| h.ai_family);
    if passive {
        h.ai_flags = libc::AI_PASSIVE;
    }
    let mut found: *mut libc::addrinfo = ptr::null_mut();
    // SAFETY: libc's resolver with the program's strings; `found` is freed below.
    let rc = unsafe { libc::getaddrinfo(node, service, &h, &mut found) };
    if rc != 0 || found.is_null() {
        // librdmacm answers with getaddrinfo's error code.
        return if rc != 0 { rc } else { failed(libc::ENOENT) };
    }
    // SAFETY: getaddrinfo gave at least one answer.
    let first = unsafe { &*found };
    let addr = from_sockaddr(first.ai_addr);
    // SAFETY: the list came from getaddrinfo.
    unsafe { libc::freeaddrinfo(found) };
    let Some(addr) = addr else {
        return failed(libc::EAFNOSUPPORT);
    };
    let len = match addr {
        SocketAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>(),
    } as libc::socklen_t;
    let mut info = Box::new(AddrInfo {
        // SAFETY: plain data, all zeros valid.
        info: unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        src: unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        dst: unsafe { std::mem::zeroed() },
    });
    info.info.ai_flags = hints.map_or(0, |h| h.ai_flags);
    info.info.ai_family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    info.info.ai_qp_type = 2; // IBV_QPT_RC
    info.info.ai_port_space = 0x0106; // RDMA_PS_TCP
    if passive {
        info.src = to_storage(addr);
        info.info.ai_src_len = len;
        info.info.ai_src_addr = &mut info.src as *mut _ as *mut libc::sockaddr;
    } else {
        info.dst = to_storage(addr);
        info.info.ai_dst_len = len;
        info.info.ai_dst_addr = &mut info.dst as *mut _ as *mut libc::sockaddr;
    }
    // SAFETY: checked non-NULL.
    unsafe { *res = Box::into_raw(info) as *mut rdma_addrinfo };
    0
}

/// `rdma_freeaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    if !res.is_null() {
        // SAFETY: made by Box::into_raw in roce_rdma_getaddrinfo (one answer, no next).
        drop(unsafe { Box::from_raw(res as *mut AddrInfo) });
    }
}
#[no_mangle]
pub extern "C" fn roce_rdma_free_devices(_list: *mut c_void) {}

/// `rdma_get_devices`: NULL with ENOSYS (no program we run needs it).
#[no_mangle]
pub extern "C" fn roce_rdma_get_devices(_n: *mut c_int) -> *mut c_void {
    set_errno(libc::ENOSYS);
    ptr::null_mut()
}

fn port_of(storage: &libc::sockaddr_storage) -> u16 {
    from_sockaddr(storage as *const _ as *const libc::sockaddr).map_or(0, |a| a.port().to_be())
}

/// `rdma_get_src_port` (network byte order).
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: the program's ID.
    unsafe { id.as_ref() }.map_or(0, |i| port_of(&i.route.addr.src))
}

/// `rdma_get_dst_port` (network byte order).
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: the program's ID.
    unsafe { id.as_ref() }.map_or(0, |i| port_of(&i.route.addr.dst))
}

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_addr`: source and destination as `sockaddr_storage`, then the IB address
/// union (three GIDs and a P_Key: 40 bytes... rounded by the storage alignment).
#[repr(C)]
pub struct rdma_addr {
    pub src: libc::sockaddr_storage,
    pub dst: libc::sockaddr_storage,
    /// `struct rdma_ib_addr { union ibv_gid sgid, dgid; __be16 pkey; }`.
    pub ibaddr: [u64; 5],
}

/// `struct rdma_route`.
#[repr(C)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub pd: *mut ibv_pd,
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_cm_event` (its parameter union is as large as `struct rdma_ud_param`).
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub conn: rdma_conn_param,
    /// The rest of `struct rdma_ud_param` (an `ibv_ah_attr`, QP number and Q_Key).
    pub _ud_rest: [u8; 32],
}

/// The sizes and offsets the C header gives, for the layout test.
pub fn layout() -> Vec<(&'static str, usize)> {
    use std::mem::{offset_of, size_of};
    vec![
        ("sizeof(struct rdma_cm_id)", size_of::<rdma_cm_id>()),
        (
            "offsetof(struct rdma_cm_id, route)",
            offset_of!(rdma_cm_id, route),
        ),
        (
            "offsetof(struct rdma_cm_id, ps)",
            offset_of!(rdma_cm_id, ps),
        ),
        (
            "offsetof(struct rdma_cm_id, pd)",
            offset_of!(rdma_cm_id, pd),
        ),
        ("sizeof(struct rdma_route)", size_of::<rdma_route>()),
        ("sizeof(struct rdma_addr)", size_of::<rdma_addr>()),
        (
            "sizeof(struct rdma_conn_param)",
            size_of::<rdma_conn_param>(),
        ),
        ("sizeof(struct rdma_cm_event)", size_of::<rdma_cm_event>()),
        (
            "offsetof(struct rdma_cm_event, param)",
            offset_of!(rdma_cm_event, conn),
        ),
    ]
}

// enum rdma_cm_event_type
const ADDR_RESOLVED: c_int = 0;
const ROUTE_RESOLVED: c_int = 2;
const CONNECT_REQUEST: c_int = 4;
const UNREACHABLE: c_int = 7;
const REJECTED: c_int = 8;
const ESTABLISHED: c_int = 9;
const DISCONNECTED: c_int = 10;

/// One ID: the C structure, then ours.
#[repr(C)]
struct Id {
    id: rdma_cm_id,
    /// The NIC's ID, once listening, connecting or (for a connect request) made by the NIC.
    nic: Option<CmId>,
}

/// An event handed to the program, with the private data its `param.conn` points at.
#[repr(C)]
struct Event {
    ev: rdma_cm_event,
    private: Vec<u8>,
}

// SAFETY: an event's pointers are the program's IDs and the event's own private data; it is
// handed to whichever thread calls rdma_get_cm_event, as librdmacm does.
unsafe impl Send for Event {}

/// Raw pointers moved between threads: the program owns the objects, we only file them.
struct P<T>(*mut T);

impl<T> Clone for P<T> {
    fn clone(&self) -> P<T> {
        *self
    }
}

impl<T> Copy for P<T> {}
// SAFETY: the pointers are the program's objects, used under the CM's mutex or by the
// program's own calls, as with librdmacm.
unsafe impl<T> Send for P<T> {}

struct State {
    /// The one context every ID uses.
    ctx: Option<P<ibv_context>>,
    /// The NIC's ID numbers and the program's IDs.
    ids: BTreeMap<u32, P<Id>>,
    /// Events waiting to be taken, by channel (its address).
    queues: BTreeMap<usize, VecDeque<Box<Event>>>,
    /// Events about an ID not filed yet: its `rdma_connect` is still on its way back from the
    /// NIC while the answer came (filed again when an ID is filed).
    early: Vec<CmEvent>,
    /// The live channels (their addresses), to wake when the pump stops.
    channels: BTreeSet<usize>,
    /// Why the pump stopped (the NIC went away): the errno `rdma_get_cm_event` answers then.
    stopped: Option<c_int>,
}

/// Most early events kept (they are for IDs being connected: a handful).
const MAX_EARLY: usize = 64;

static STATE: Mutex<State> = Mutex::new(State {
    ctx: None,
    ids: BTreeMap::new(),
    queues: BTreeMap::new(),
    early: Vec::new(),
    channels: BTreeSet::new(),
    stopped: None,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The context of the first device, opened once.
fn context() -> Result<*mut ibv_context, c_int> {
    let mut st = state();
    if let Some(P(ctx)) = st.ctx {
        return Ok(ctx);
    }
    let mut n = 0;
    // SAFETY: our own device list functions.
    let list = unsafe { crate::device::get_device_list(&mut n) };
    if list.is_null() || n == 0 {
        return Err(libc::ENODEV);
    }
    // SAFETY: the list holds n devices.
    let ctx = crate::device::open_device(unsafe { *list });
    // SAFETY: the list came from roce_ibv_get_device_list.
    unsafe { crate::device::free_device_list(list) };
    if ctx.is_null() {
        // SAFETY: errno was set by roce_ibv_open_device.
        return Err(unsafe { *libc::__errno_location() });
    }
    st.ctx = Some(P(ctx));
    let pumped = P(ctx);
    std::thread::Builder::new()
        .name("rdma-cm-events".into())
        .spawn(move || pump(pumped))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EAGAIN))?;
    Ok(ctx)
}

/// The pump: takes every CM event the NIC queued for this process and files it under its
/// channel, then waits on the NIC's event line for more (never inside the NIC: see the
/// module). Runs until the NIC goes away, then fails every wait on a channel.
fn pump(ctx: P<ibv_context>) {
    let P(ctx) = ctx;
    let nic = &nic_ctx(ctx).nic;
    let stopped = loop {
        match nic.cm_event(Some(Duration::ZERO)) {
            Ok(event) => {
                file(&mut state(), event);
                continue;
            }
            Err(e) if errno_of(&e) == libc::ETIMEDOUT => {}
            Err(e) => break fail("rdma_get_cm_event", &e),
        }
        if let Err(e) = nic.cm_wait(None) {
            break fail("rdma_get_cm_event", &e);
        }
    };
    let mut st = state();
    st.stopped = Some(stopped);
    for channel in &st.channels {
        signal(*channel as *mut rdma_event_channel);
    }
}

/// Makes the channel's descriptor readable (adds one to its eventfd).
fn signal(channel: *mut rdma_event_channel) {
    let one = 1u64;
    // SAFETY: a live channel's own eventfd (channels leave the state before they are freed),
    // written 8 bytes, as eventfd wants.
    unsafe { libc::write((*channel).fd, &one as *const u64 as *const c_void, 8) };
}

fn nic_ctx(verbs: *mut ibv_context) -> &'static Ctx {
    // SAFETY: `verbs` is the context opened by [`context`], never closed.
    unsafe { Ctx::from_ptr(verbs) }
}

fn errno_of(e: &VerbsError) -> c_int {
    match e {
        VerbsError::Io(io) => io.raw_os_error().unwrap_or_else(|| {
            if io.kind() == std::io::ErrorKind::TimedOut {
                libc::ETIMEDOUT
            } else {
                libc::EIO
            }
        }),
        other => other.errno(),
    }
}

fn failed(errno: c_int) -> c_int {
    set_errno(errno);
    -1
}

/// One rdma_* call: its body's value, or -1 with the errno of its error (EIO if it panicked).
fn call(body: impl FnOnce() -> Result<c_int, c_int>) -> c_int {
    guard(-1, || body().unwrap_or_else(failed))
}

/// The program's ID behind `id` (EINVAL for NULL).
///
/// # Safety
/// `id` is NULL or an ID made by [`roce_rdma_create_id`] or filed for a connect request,
/// not destroyed.
unsafe fn id_of<'a>(id: *mut rdma_cm_id) -> Result<&'a mut Id, c_int> {
    // SAFETY: every ID is the first field of an `Id` (see the precondition).
    unsafe { (id as *mut Id).as_mut() }.ok_or(libc::EINVAL)
}

impl Id {
    /// The NIC's ID: EINVAL before the ID listens, connects or came as a connect request.
    fn nic(&self) -> Result<&CmId, c_int> {
        self.nic.as_ref().ok_or(libc::EINVAL)
    }

    /// Files the NIC's ID made for this one by `rdma_listen` or `rdma_connect`.
    fn enroll(&mut self, nic: CmId) {
        let nic_id = nic.id();
        self.nic = Some(nic);
        enroll(nic_id, self);
    }
}

/// The errno of a failed NIC request made by the call `what`.
fn nic_error(what: &'static str) -> impl std::ops::Fn(VerbsError) -> c_int {
    move |e| fail(what, &e)
}

/// An address given by the program (EINVAL for NULL or a family other than IPv4/IPv6).
fn address(addr: *const libc::sockaddr) -> Result<SocketAddr, c_int> {
    from_sockaddr(addr).ok_or(libc::EINVAL)
}

/// An address stored in an ID's route.
fn stored(addr: &libc::sockaddr_storage) -> Result<SocketAddr, c_int> {
    address(addr as *const _ as *const libc::sockaddr)
}

fn to_storage(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: a zeroed sockaddr_storage is valid.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let a = unsafe { &mut *(&mut s as *mut _ as *mut libc::sockaddr_in) };
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_port = v4.port().to_be();
            a.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for a sockaddr_in6.
            let a = unsafe { &mut *(&mut s as *mut _ as *mut libc::sockaddr_in6) };
            a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            a.sin6_port = v6.port().to_be();
            a.sin6_addr.s6_addr = v6.ip().octets();
        }
    }
    s
}

fn from_sockaddr(addr: *const libc::sockaddr) -> Option<SocketAddr> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: the program's address starts with its family.
    match c_int::from(unsafe { (*addr).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address.
            let a = unsafe { &*(addr as *const libc::sockaddr_in) };
            Some(SocketAddr::from((
                u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address.
            let a = unsafe { &*(addr as *const libc::sockaddr_in6) };
            Some(SocketAddr::from((
                a.sin6_addr.s6_addr,
                u16::from_be(a.sin6_port),
            )))
        }
        _ => None,
    }
}

fn queue(channel: *mut rdma_event_channel, id: *mut rdma_cm_id, event: c_int) {
    queue_event(
        channel,
        Box::new(Event {
            ev: rdma_cm_event {
                id,
                listen_id: ptr::null_mut(),
                event,
                status: 0,
                // SAFETY: plain data, all zeros valid.
                conn: unsafe { std::mem::zeroed() },
                _ud_rest: [0; 32],
            },
            private: Vec::new(),
        }),
    );
}

fn queue_event(channel: *mut rdma_event_channel, event: Box<Event>) {
    push(&mut state(), channel, event);
}

/// Queues `event` on `channel`, whose descriptor is readable while its queue is not empty
/// (both change under the state's lock).
fn push(st: &mut State, channel: *mut rdma_event_channel, event: Box<Event>) {
    let queue = st.queues.entry(channel as usize).or_default();
    queue.push_back(event);
    if queue.len() == 1 {
        signal(channel);
    }
}

/// The channel's next event; its descriptor stops being readable with its last one.
fn pop(st: &mut State, channel: *mut rdma_event_channel) -> Option<Box<Event>> {
    let queue = st.queues.get_mut(&(channel as usize))?;
    let event = queue.pop_front()?;
    if queue.is_empty() {
        let mut count = 0u64;
        // SAFETY: the channel's own eventfd, readable (its count is at least the one added
        // when the queue stopped being empty): the read resets it without blocking.
        unsafe { libc::read((*channel).fd, &mut count as *mut u64 as *mut c_void, 8) };
    }
    Some(event)
}

/// `rdma_create_event_channel`.
#[no_mangle]
pub extern "C" fn roce_rdma_create_event_channel() -> *mut rdma_event_channel {
    // SAFETY: eventfd has no memory preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return ptr::null_mut();
    }
    let channel = Box::into_raw(Box::new(rdma_event_channel { fd }));
    state().channels.insert(channel as usize);
    channel
}

/// `rdma_destroy_event_channel`.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    if channel.is_null() {
        return;
    }
    let mut st = state();
    st.queues.remove(&(channel as usize));
    st.channels.remove(&(channel as usize));
    drop(st);
    // SAFETY: made by Box::into_raw; its eventfd is its own.
    let ch = unsafe { Box::from_raw(channel) };
    // SAFETY: the channel's own descriptor.
    unsafe { libc::close(ch.fd) };
}

fn new_id(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> *mut Id {
    // SAFETY: rdma_cm_id is plain data (pointers, integers, addresses): zeros are valid.
    let mut id: rdma_cm_id = unsafe { std::mem::zeroed() };
    id.channel = channel;
    id.context = context;
    id.ps = ps;
    id.qp_type = qp_type;
    id.port_num = 1;
    Box::into_raw(Box::new(Id { id, nic: None }))
}

/// `rdma_create_id`: only the TCP port space (RC connections), as rping and perftest use.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_create_id(
    channel: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    const RDMA_PS_TCP: c_int = 0x0106;
    if out.is_null() || channel.is_null() {
        return failed(libc::EINVAL);
    }
    if ps != RDMA_PS_TCP {
        return failed(libc::EOPNOTSUPP);
    }
    let id = new_id(channel, context, ps, 2);
    // SAFETY: checked non-NULL.
    unsafe { *out = id as *mut rdma_cm_id };
    0
}

/// `rdma_destroy_id`: a listener stops, a connection is refused or ended.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    call(|| {
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: made by Box::into_raw in new_id; the program gives it up.
        let id = unsafe { Box::from_raw(id as *mut Id) };
        if let Ok(nic) = id.nic() {
            state().ids.remove(&nic.id());
        }
        Ok(0)
    })
}

/// `rdma_bind_addr`: remembers the address (the NIC listens at `rdma_listen`).
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_bind_addr(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    call(|| {
        let addr = address(addr)?;
        // SAFETY: the program's ID.
        let i = unsafe { id_of(id) }?;
        i.id.verbs = context()?;
        i.id.route.addr.src = to_storage(addr);
        Ok(0)
    })
}

/// `rdma_resolve_addr`: nothing to ask (see the module); ADDR_RESOLVED at once.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    call(|| {
        let dst = address(dst)?;
        // SAFETY: the program's ID.
        let i = unsafe { id_of(id) }?;
        i.id.verbs = context()?;
        if let Ok(src) = address(src) {
            i.id.route.addr.src = to_storage(src);
        }
        i.id.route.addr.dst = to_storage(dst);
        queue(i.id.channel, id, ADDR_RESOLVED);
        Ok(0)
    })
}

/// `rdma_resolve_route`: ROUTE_RESOLVED at once.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    call(|| {
        // SAFETY: the program's ID.
        queue(unsafe { id_of(id) }?.id.channel, id, ROUTE_RESOLVED);
        Ok(0)
    })
}

/// `rdma_listen`.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    call(|| {
        // SAFETY: the program's ID.
        let i = unsafe { id_of(id) }?;
        let addr = stored(&i.id.route.addr.src)?;
        if i.id.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        let nic = nic_ctx(i.id.verbs).nic.cm_listen(addr);
        i.enroll(nic.map_err(nic_error("rdma_listen"))?);
        Ok(0)
    })
}

fn conn_param(param: *const rdma_conn_param) -> ConnParam {
    let mut p = ConnParam::default();
    if param.is_null() {
        return p;
    }
    // SAFETY: the program's parameters.
    let c = unsafe { &*param };
    if !c.private_data.is_null() && c.private_data_len > 0 {
        // SAFETY: private_data holds private_data_len bytes.
        p.private_data = unsafe {
            std::slice::from_raw_parts(c.private_data as *const u8, c.private_data_len.into())
        }
        .to_vec();
    }
    p.responder_resources = c.responder_resources;
    p.initiator_depth = c.initiator_depth;
    p.retry_count = c.retry_count;
    p.rnr_retry_count = c.rnr_retry_count;
    p
}

fn qp_of<'a>(id: &rdma_cm_id) -> Result<&'a Qp, c_int> {
    if id.qp.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the ID's QP was made by rdma_create_qp (or the program's ibv_create_qp).
    Ok(unsafe { Qp::from_ptr(id.qp) })
}

/// `rdma_connect`: the REQ goes out; ESTABLISHED (or REJECTED, UNREACHABLE) follows.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_connect(
    id: *mut rdma_cm_id,
    param: *mut rdma_conn_param,
) -> c_int {
    call(|| {
        // SAFETY: the program's ID.
        let i = unsafe { id_of(id) }?;
        let qp = qp_of(&i.id)?;
        let dst = stored(&i.id.route.addr.dst)?;
        let param = conn_param(param);
        // The answer may be taken by another thread's rdma_get_cm_event before the ID is
        // filed here: it keeps it as early (see [`file`]).
        let nic = nic_ctx(i.id.verbs).nic.cm_connect(&qp.inner, dst, &param);
        i.enroll(nic.map_err(nic_error("rdma_connect"))?);
        Ok(0)
    })
}

/// `rdma_accept` of a connect request's ID.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_accept(
    id: *mut rdma_cm_id,
    param: *mut rdma_conn_param,
) -> c_int {
    call(|| {
        // SAFETY: the program's ID.
        let i = unsafe { id_of(id) }?;
        let qp = qp_of(&i.id)?;
        let nic = i.nic()?;
        nic.accept(&qp.inner, &conn_param(param))
            .map_err(nic_error("rdma_accept"))?;
        Ok(0)
    })
}

/// `rdma_reject` of a connect request's ID.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_reject(
    id: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    call(|| {
        // SAFETY: the program's ID.
        let nic = unsafe { id_of(id) }?.nic()?;
        let private: &[u8] = if data.is_null() {
            &[]
        } else {
            // SAFETY: data holds len bytes.
            unsafe { std::slice::from_raw_parts(data as *const u8, len.into()) }
        };
        nic.reject(private).map_err(nic_error("rdma_reject"))?;
        Ok(0)
    })
}

/// `rdma_disconnect`: DISCONNECTED follows on both sides.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    call(|| {
        // SAFETY: the program's ID.
        let nic = unsafe { id_of(id) }?.nic()?;
        nic.disconnect().map_err(nic_error("rdma_disconnect"))?;
        Ok(0)
    })
}

/// `rdma_create_qp`: an RC QP on the ID's context (PD `pd`, or the ID's own).
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || attr.is_null() {
        return failed(libc::EINVAL);
    }
    // SAFETY: the program's ID.
    let i = unsafe { &mut *id };
    let pd = if pd.is_null() { i.pd } else { pd };
    // SAFETY: the program's PD and attributes.
    let qp = unsafe { crate::verbs::create_qp(pd, attr) };
    if qp.is_null() {
        return -1;
    }
    i.qp = qp;
    0
}

/// `rdma_destroy_qp`.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_destroy_qp(id: *mut rdma_cm_id) {
    if id.is_null() {
        return;
    }
    // SAFETY: the program's ID.
    let i = unsafe { &mut *id };
    if !i.qp.is_null() {
        // SAFETY: the ID's QP, made by rdma_create_qp.
        unsafe { crate::verbs::destroy_qp(i.qp) };
        i.qp = ptr::null_mut();
    }
}

/// Files the program's ID under the NIC's number `nic_id`, and the events that came for it
/// before (see [`State::early`]).
fn enroll(nic_id: u32, id: &mut Id) {
    let mut st = state();
    st.ids.insert(nic_id, P(id as *mut Id));
    for event in std::mem::take(&mut st.early) {
        file(&mut st, event);
    }
}

/// Keeps an event for an ID not filed yet; the oldest goes when there are too many (events
/// for IDs the program destroyed meanwhile are never taken).
fn keep_early(st: &mut State, event: CmEvent) {
    if st.early.len() == MAX_EARLY {
        st.early.remove(0);
    }
    st.early.push(event);
}

/// Files a NIC event under the channel of the ID it is about (a connect request makes the
/// new ID, on its listener's channel).
fn file(st: &mut State, event: CmEvent) {
    let (id, listen_id) = if event.kind == CmEventKind::ConnectRequest {
        let Some(P(listener)) = event.listen_id.and_then(|l| st.ids.get(&l).copied()) else {
            // Its rdma_listen is still on its way back from the NIC.
            keep_early(st, event);
            return;
        };
        // SAFETY: a listener stays filed until the program destroys it.
        let l = unsafe { &(*listener).id };
        let child = new_id(l.channel, l.context, l.ps, l.qp_type);
        // SAFETY: just made.
        let c = unsafe { &mut *child };
        c.id.verbs = l.verbs;
        c.id.route.addr.src = to_storage(event.local);
        c.id.route.addr.dst = to_storage(event.peer);
        c.nic = Some(nic_ctx(l.verbs).nic.cm_request_id(&event));
        st.ids.insert(event.id, P(child));
        (child, listener)
    } else {
        let Some(P(id)) = st.ids.get(&event.id).copied() else {
            keep_early(st, event);
            return;
        };
        (id, ptr::null_mut())
    };
    let (kind, status) = match event.kind {
        CmEventKind::ConnectRequest => (CONNECT_REQUEST, 0),
        CmEventKind::Established => (ESTABLISHED, 0),
        CmEventKind::Rejected { reason } => (REJECTED, c_int::from(reason)),
        CmEventKind::Unreachable => (UNREACHABLE, -libc::ETIMEDOUT),
        CmEventKind::Disconnected => (DISCONNECTED, 0),
    };
    let mut ev = Box::new(Event {
        ev: rdma_cm_event {
            id: id as *mut rdma_cm_id,
            listen_id: listen_id as *mut rdma_cm_id,
            event: kind,
            status,
            // SAFETY: plain data, all zeros valid.
            conn: unsafe { std::mem::zeroed() },
            _ud_rest: [0; 32],
        },
        private: event.private_data,
    });
    ev.ev.conn.private_data = ev.private.as_ptr() as *const c_void;
    ev.ev.conn.private_data_len = ev.private.len().min(255) as u8;
    ev.ev.conn.responder_resources = event.responder_resources;
    ev.ev.conn.initiator_depth = event.initiator_depth;
    ev.ev.conn.qp_num = event.peer_qpn;
    // SAFETY: the ID is the program's (or just made).
    let channel = unsafe { (*(id as *mut rdma_cm_id)).channel };
    push(st, channel, ev);
}

/// `rdma_get_cm_event`: the channel's next event, waiting for it.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> c_int {
    if channel.is_null() || out.is_null() {
        return failed(libc::EINVAL);
    }
    // SAFETY: the program's channel, from roce_rdma_create_event_channel.
    let fd = unsafe { (*channel).fd };
    guard(-1, || loop {
        {
            let mut st = state();
            if let Some(ev) = pop(&mut st, channel) {
                // SAFETY: checked non-NULL.
                unsafe { *out = Box::into_raw(ev) as *mut rdma_cm_event };
                return 0;
            }
            if let Some(errno) = st.stopped {
                return failed(errno);
            }
        }
        // SAFETY: fcntl on the channel's own descriptor.
        if unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0 {
            return failed(libc::EAGAIN);
        }
        let mut readable = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; EINTR and wakes for an event another thread took loop.
        unsafe { libc::poll(&mut readable, 1, -1) };
    })
}

/// `rdma_ack_cm_event`: frees the event.
#[no_mangle]
pub unsafe extern "C" fn roce_rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    if event.is_null() {
        return failed(libc::EINVAL);
    }
    // SAFETY: made by Box::into_raw in rdma_get_cm_event; given up by this call.
    drop(unsafe { Box::from_raw(event as *mut Event) });
    0
}

/// `rdma_set_option`: accepted and ignored (type of service, reuse address, ...).
#[no_mangle]
pub extern "C" fn roce_rdma_set_option(
    _id: *mut rdma_cm_id,
    _level: c_int,
    _name: c_int,
    _value: *mut c_void,
    _len: usize,
) -> c_int {
    0
}

/// `rdma_event_str`: librdmacm's names of `enum rdma_cm_event_type`.
#[no_mangle]
pub extern "C" fn roce_rdma_event_str(event: c_int) -> *const std::ffi::c_char {
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
