//! The out-of-band TCP of verbs programs, carried by the NIC's own TCP.
//!
//! Before any RDMA traffic, `ibv_*_pingpong` and perftest exchange QP numbers, PSNs and GIDs
//! over an ordinary TCP connection to the peer's IP address — on the emulated wire, a 10.x
//! address that the host's network must never route. This library therefore interposes the
//! four socket calls that make such a connection (the program links libibverbs before libc,
//! so its `connect`, `listen`, `accept` and `accept4` resolve here first):
//!
//! - `connect` of a TCP socket to an address that is not loopback connects through the NIC
//!   (`TcpConnect` on its control socket: smoltcp on the NIC's port, over the wire); the
//!   socket's descriptor is then replaced (`dup3`) by the local end of the stream the NIC
//!   hands over, so `read`/`write`/`close` work unchanged.
//! - `listen` on a TCP socket bound to the wildcard address or to one of the NIC's addresses
//!   listens on the NIC instead (`TcpListen`); the kernel socket never listens, so no host
//!   port opens.
//! - `accept`/`accept4` on such a socket take the next connection the NIC accepted.
//!
//! Everything else (Unix and netlink sockets, loopback, UDP) goes to libc untouched. Only
//! while a NIC is named (`ROCE_NIC`, which `roce run --nic` sets) or found: the first one.
//!
//! Why not a network namespace whose interface the NIC bridges: that needs a tap device (so a
//! user namespace, or root) and the NIC carrying kernel TCP frames beside its own smoltcp on
//! the same address. Interposing needs neither, and the NIC's TCP is already the one
//! `roce pingpong` and `roce perftest` use — the same bytes on the wire as a kernel's.

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::{Arc, Mutex, OnceLock};

use libc::{sockaddr, socklen_t};
use roce_nic::verbs::{Context, PortListener};

use crate::set_errno;

/// The libc function `name` (the next definition after ours).
fn next<F: Copy>(name: &CStr) -> Option<F> {
    // SAFETY: dlsym with RTLD_NEXT looks the name up in the objects after this one.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if f.is_null() {
        return None;
    }
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: F is the function pointer type of `name` (the callers below say which).
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&f) })
}

type ConnectFn = unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
type ListenFn = unsafe extern "C" fn(c_int, c_int) -> c_int;
type Accept4Fn = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;

fn libc_connect() -> Option<ConnectFn> {
    static F: OnceLock<Option<ConnectFn>> = OnceLock::new();
    *F.get_or_init(|| next(c"connect"))
}

fn libc_listen() -> Option<ListenFn> {
    static F: OnceLock<Option<ListenFn>> = OnceLock::new();
    *F.get_or_init(|| next(c"listen"))
}

fn libc_accept4() -> Option<Accept4Fn> {
    static F: OnceLock<Option<Accept4Fn>> = OnceLock::new();
    *F.get_or_init(|| next(c"accept4"))
}

/// The NIC the program's TCP goes through, if any.
fn nic() -> Option<String> {
    crate::device::nic_names().into_iter().next()
}

/// The context that makes outgoing connections (one at a time), opened at first use and
/// kept: the NIC ends a context's connections when the context closes.
static CONNECTOR: Mutex<Option<Context>> = Mutex::new(None);

/// A listening socket of the program and the NIC's listener behind it, with the inode that
/// tells whether the descriptor still is that socket.
struct Listening {
    inode: u64,
    listener: Arc<PortListener>,
    /// The context the listener waits on: its own, as an accept holds its control connection.
    _ctx: Context,
}

static LISTENING: Mutex<Option<HashMap<c_int, Listening>>> = Mutex::new(None);

fn socket_addr(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: the caller's address holds `len` bytes; the family is read first.
    let family = c_int::from(unsafe { (*addr).sa_family });
    match family {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: an AF_INET address of the right length.
            let a = unsafe { &*(addr as *const libc::sockaddr_in) };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: an AF_INET6 address of the right length.
            let a = unsafe { &*(addr as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
            Some(SocketAddr::new(ip, u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

fn is_stream(fd: c_int) -> bool {
    let mut kind: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: reads SO_TYPE into an int of the right size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            &mut kind as *mut c_int as *mut c_void,
            &mut len,
        )
    };
    r == 0 && kind == libc::SOCK_STREAM
}

fn inode(fd: c_int) -> Option<u64> {
    // SAFETY: fstat into a zeroed stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

fn errno_of(e: &roce_nic::verbs::VerbsError) -> c_int {
    match e {
        roce_nic::verbs::VerbsError::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        roce_nic::verbs::VerbsError::Remote { errno, .. } => *errno,
        other => other.errno(),
    }
}

/// Puts `stream`'s descriptor in place of `fd`, keeping `fd`'s close-on-exec flag.
fn replace(fd: c_int, stream: std::os::unix::net::UnixStream) -> c_int {
    // SAFETY: F_GETFD on the program's descriptor.
    let cloexec = unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0;
    let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: dup3 replaces the program's socket by the stream (the stream's own descriptor
    // is closed when it drops below).
    if unsafe { libc::dup3(stream.as_raw_fd(), fd, flags) } < 0 {
        return -1;
    }
    0
}

/// `connect`: TCP to a non-loopback address goes through the NIC (see the module).
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(real) = libc_connect() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    let target = socket_addr(addr, len).filter(|a| !a.ip().is_loopback());
    let (Some(target), Some(nic)) = (target, target.and_then(|_| nic())) else {
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe { real(fd, addr, len) };
    };
    if !is_stream(fd) {
        // SAFETY: as above.
        return unsafe { real(fd, addr, len) };
    }
    let result = crate::guard(Err(libc::EIO), || {
        let mut connector = CONNECTOR.lock().unwrap_or_else(|e| e.into_inner());
        if connector.is_none() {
            *connector = Some(roce_nic::host::connect(&nic).map_err(|e| errno_of(&e))?);
        }
        let ctx = connector.as_ref().expect("just set");
        ctx.tcp_connect(target).map_err(|e| errno_of(&e))
    });
    match result {
        Ok(stream) => replace(fd, stream),
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

/// `listen`: a TCP socket bound to the wildcard address (or the NIC's) listens on the NIC.
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    let Some(real) = libc_listen() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: a zeroed address buffer of the largest kind.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    // SAFETY: getsockname into a buffer of `len` bytes.
    let named =
        unsafe { libc::getsockname(fd, &mut storage as *mut _ as *mut sockaddr, &mut len) } == 0;
    let local = named
        .then(|| socket_addr(&storage as *const _ as *const sockaddr, len))
        .flatten()
        .filter(|a| !a.ip().is_loopback());
    let (Some(local), Some(nic)) = (local, local.and_then(|_| nic())) else {
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe { real(fd, backlog) };
    };
    if !is_stream(fd) {
        // SAFETY: as above.
        return unsafe { real(fd, backlog) };
    }
    let result = crate::guard(Err(libc::EIO), || {
        let mut table = LISTENING.lock().unwrap_or_else(|e| e.into_inner());
        let table = table.get_or_insert_with(HashMap::new);
        // A socket listening on this port before, since closed: stop its listener first.
        table.retain(|_, l| l.listener.port() != local.port());
        let ctx = roce_nic::host::connect(&nic).map_err(|e| errno_of(&e))?;
        let listener = ctx.tcp_listen(local.port()).map_err(|e| errno_of(&e))?;
        table.insert(
            fd,
            Listening {
                inode: inode(fd).unwrap_or(0),
                listener: Arc::new(listener),
                _ctx: ctx,
            },
        );
        Ok(())
    });
    match result {
        Ok(()) => 0,
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

fn listener_of(fd: c_int) -> Option<Arc<PortListener>> {
    let table = LISTENING.lock().unwrap_or_else(|e| e.into_inner());
    let l = table.as_ref()?.get(&fd)?;
    (inode(fd) == Some(l.inode)).then(|| Arc::clone(&l.listener))
}

fn write_addr(peer: SocketAddr, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: a zeroed address buffer of the largest kind.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let size = match peer {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let a = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_port = v4.port().to_be();
            a.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
            let a = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            a.sin6_port = v6.port().to_be();
            a.sin6_addr.s6_addr = v6.ip().octets();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: the caller's buffer holds *len bytes; we copy at most that and say how many
    // the address has, as accept(2) does.
    unsafe {
        let n = (*len as usize).min(size);
        std::ptr::copy_nonoverlapping(&storage as *const _ as *const u8, addr as *mut u8, n);
        *len = size as socklen_t;
    }
}

/// `accept4`: on a socket listening through the NIC, the NIC's next connection.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let Some(listener) = listener_of(fd) else {
        let Some(real) = libc_accept4() else {
            set_errno(libc::ENOSYS);
            return -1;
        };
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe { real(fd, addr, len, flags) };
    };
    match crate::guard(Err(libc::EIO), || {
        listener.accept().map_err(|e| errno_of(&e))
    }) {
        Ok((stream, peer)) => {
            write_addr(peer, addr, len);
            if flags & libc::SOCK_NONBLOCK != 0 {
                let _ = stream.set_nonblocking(true);
            }
            let fd = stream.into_raw_fd();
            if flags & libc::SOCK_CLOEXEC == 0 {
                // Rust opens descriptors close-on-exec; accept without the flag does not.
                // SAFETY: F_SETFD on the descriptor just taken.
                unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
            }
            fd
        }
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

/// `accept`: [`accept4`] without flags.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { accept4(fd, addr, len, 0) }
}
