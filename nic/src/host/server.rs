//! The NIC process's control socket (the uverbs role): one thread accepts connections, one
//! thread per connection reads requests, hands them to the engine through the same path as an
//! in-process host, and writes the answers. A connection that ends — the host closed it, or
//! was killed — takes every context opened on it along: the engine destroys their objects, so
//! no dead host's QP keeps answering the wire.
//!
//! A host is not trusted: each gets a doorbell of its own; memory it passes is mapped only if
//! it is sealed shared memory, or a file of the host's own user that nobody else may write
//! (mapped guarded), and never the NIC's own rings; a message it starts must be finished, and
//! an answer taken, within [`MESSAGE_DEADLINE`]; one that is not a message of the protocol gets
//! the error saying why, and the host is hung up on; and the NIC's shutdown never waits for a
//! host.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce_hostmem::{is_device_memory, Region, RegionError};
use rustix::event::PollFlags;
use tracing::{debug, info, warn};

use super::codec::{self, DecodeError};
use super::fdpass::{self, Limit};
use super::messages::{answer, send, FromNic, ToNic, Welcome, PROTOCOL_VERSION};
use super::socket_path::prepare_dir;
use super::stop_line::StopLine;
use crate::control::{ClientId, Request, Response};
use crate::device::Device;
use crate::doorbell::{qpns_for, ReadyBits, Record, Records, RECORD_OFFSET};
use crate::engine::RingMemory;
use crate::limits::Limits;
use crate::verbs::{Backend, VerbsError};
use crate::waker::{SharedWord, Waker};

/// How long a host has to finish sending a message it started, and to take an answer.
pub const MESSAGE_DEADLINE: Duration = Duration::from_secs(2);
/// The first and the longest pause after a failed accept (out of descriptors, say), so that
/// the control thread waits for descriptors to come back instead of spinning.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// Why the control socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("a NIC named {name} is already running (its socket is {path})")]
    InUse { name: String, path: PathBuf },
    #[error("cannot create the control socket {path}: {source}")]
    Socket { path: PathBuf, source: io::Error },
    #[error("the NIC {0} keeps its rings in private memory, so other processes cannot use it (start it with RingMemory::Shared)")]
    PrivateRings(String),
}

/// What every connection needs of the device.
struct Shared {
    nic: String,
    backend: Arc<dyn Backend>,
    /// The engine's wake-up line and the doorbell records it drains: each host adds its own.
    engine: Arc<Waker>,
    records: Arc<Records>,
    stop: StopLine,
    limits: Limits,
    /// The hosts connected now, by process.
    hosts: Mutex<Hosts>,
}

/// Connected hosts: a host is a process (by the PID of its connections' peer).
#[derive(Default)]
struct Hosts {
    by_pid: HashMap<i32, HostUse>,
    connections: u64,
    next_id: u32,
}

/// What one host holds of the control socket.
struct HostUse {
    /// The host's number for the engine's per-host limits.
    id: u32,
    connections: u64,
    contexts: u64,
}

impl Shared {
    /// Counts a new connection of `peer`, or says which limit it would break. Returns the
    /// host's number.
    fn join(&self, peer: Peer) -> Result<u32, VerbsError> {
        let mut hosts = lock(&self.hosts);
        let l = &self.limits;
        if hosts.connections >= l.max_connections {
            return Err(VerbsError::LimitReached {
                what: "connections",
                scope: "NIC",
                limit: l.max_connections,
            });
        }
        // A PID the kernel could not tell (another PID namespace) is a host of its own.
        let key = if peer.pid > 0 {
            peer.pid
        } else {
            -i32::try_from(hosts.next_id).unwrap_or(i32::MAX)
        };
        if hosts
            .by_pid
            .get(&key)
            .is_some_and(|h| h.connections >= l.host_max_connections)
        {
            return Err(VerbsError::LimitReached {
                what: "connections",
                scope: "host",
                limit: l.host_max_connections,
            });
        }
        hosts.next_id = hosts.next_id.wrapping_add(1).max(1);
        let next_id = hosts.next_id;
        let host = hosts.by_pid.entry(key).or_insert(HostUse {
            id: next_id,
            connections: 0,
            contexts: 0,
        });
        host.connections += 1;
        let id = host.id;
        hosts.connections += 1;
        Ok(id)
    }

    fn leave(&self, host: u32, contexts: u64) {
        let mut hosts = lock(&self.hosts);
        hosts.connections -= 1;
        hosts.by_pid.retain(|_, h| {
            if h.id == host {
                h.connections -= 1;
                h.contexts -= contexts;
            }
            h.connections > 0
        });
    }

    /// Counts a context the host `host` opens, if its limit allows.
    fn open_context(&self, host: u32) -> Result<(), VerbsError> {
        let mut hosts = lock(&self.hosts);
        let limit = self.limits.host_max_contexts;
        let h = hosts
            .by_pid
            .values_mut()
            .find(|h| h.id == host)
            .ok_or_else(|| VerbsError::Invalid("the host is not connected".into()))?;
        if h.contexts >= limit {
            return Err(VerbsError::LimitReached {
                what: "contexts",
                scope: "host",
                limit,
            });
        }
        h.contexts += 1;
        Ok(())
    }

    fn close_context(&self, host: u32) {
        let mut hosts = lock(&self.hosts);
        if let Some(h) = hosts.by_pid.values_mut().find(|h| h.id == host) {
            h.contexts = h.contexts.saturating_sub(1);
        }
    }
}

/// A running control socket. Dropping it stops it.
pub struct Server {
    path: PathBuf,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// A control socket bound but not serving yet. Claiming the socket first tells whether the
/// name is free before a device of that name is created.
pub struct Claim {
    path: PathBuf,
    listener: Option<UnixListener>,
}

impl Claim {
    /// Serves `device` on the claimed socket.
    pub fn serve(mut self, device: &Device) -> Result<Server, ServerError> {
        let nic = device.config().name.clone();
        if !matches!(device.config().rings, RingMemory::Shared { .. }) {
            return Err(ServerError::PrivateRings(nic));
        }
        let socket_error = |source| ServerError::Socket {
            path: self.path.clone(),
            source,
        };
        let shared = Arc::new(Shared {
            nic,
            backend: device.backend(),
            engine: Arc::clone(device.waker()),
            records: Arc::clone(device.records()),
            stop: StopLine::new().map_err(socket_error)?,
            limits: device.config().limits,
            hosts: Mutex::new(Hosts::default()),
        });
        let connections = Arc::new(Mutex::new(Vec::new()));
        let listener = self.listener.take().ok_or_else(|| {
            socket_error(io::Error::other("the claimed socket was already served"))
        })?;
        let acceptor = {
            let shared = Arc::clone(&shared);
            let connections = Arc::clone(&connections);
            std::thread::Builder::new()
                .name(format!("{}-control", shared.nic))
                .spawn(move || accept_loop(listener, &shared, &connections))
                .map_err(socket_error)?
        };
        info!(nic = %shared.nic, path = %self.path.display(), "control socket open");
        Ok(Server {
            path: std::mem::take(&mut self.path),
            shared,
            acceptor: Some(acceptor),
            connections,
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.listener.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Server {
    /// Binds the control socket of NIC `nic` at `path`, before the device exists. A socket file
    /// nobody answers on (left by a NIC that was killed) is replaced; a socket a live NIC
    /// answers on is an error, and so is a directory that is not this user's own.
    pub fn claim(nic: &str, path: &Path) -> Result<Claim, ServerError> {
        Ok(Claim {
            path: path.to_owned(),
            listener: Some(claim(nic, path)?),
        })
    }

    /// Binds a control socket at `path` for a running `device` and serves it (a stale socket
    /// file is replaced, as with [`Server::claim`]).
    pub fn start(device: &Device, path: &Path) -> Result<Server, ServerError> {
        Server::claim(&device.config().name, path)?.serve(device)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting, ends every connection (their hosts' next verb fails with "the NIC has
    /// stopped") and removes the socket file. A request the engine has not answered yet (a TCP
    /// accept without a timeout) is waited for: stop the device first, as `roce nic` does.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(acceptor) = self.acceptor.take() else {
            return;
        };
        self.shared.stop.raise();
        let _ = acceptor.join();
        let connections = std::mem::take(&mut *lock(&self.connections));
        for connection in connections {
            let _ = connection.join();
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            warn!(path = %self.path.display(), error = %e, "cannot remove the control socket");
        }
        info!(nic = %self.shared.nic, "control socket closed");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Binds the socket, making its directory (private to this user) if needed.
fn claim(nic: &str, path: &Path) -> Result<UnixListener, ServerError> {
    let socket_error = |source| ServerError::Socket {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        prepare_dir(dir).map_err(socket_error)?;
    }
    match UnixListener::bind(path) {
        Ok(listener) => return restrict(listener, path),
        Err(e) if e.kind() != io::ErrorKind::AddrInUse => return Err(socket_error(e)),
        Err(_) => {}
    }
    if UnixStream::connect(path).is_ok() {
        return Err(ServerError::InUse {
            name: nic.to_owned(),
            path: path.to_owned(),
        });
    }
    info!(path = %path.display(), "replacing a stale control socket");
    std::fs::remove_file(path).map_err(socket_error)?;
    restrict(UnixListener::bind(path).map_err(socket_error)?, path)
}

/// Only this user may connect: a host is trusted with the NIC's memory tables.
fn restrict(listener: UnixListener, path: &Path) -> Result<UnixListener, ServerError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|source| {
        ServerError::Socket {
            path: path.to_owned(),
            source,
        }
    })?;
    Ok(listener)
}

fn accept_loop(
    listener: UnixListener,
    shared: &Arc<Shared>,
    connections: &Mutex<Vec<JoinHandle<()>>>,
) {
    let mut backoff = ACCEPT_BACKOFF.0;
    while shared
        .stop
        .wait_for(listener.as_fd(), PollFlags::IN)
        .is_some()
    {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or memory: the connection stays queued and the socket
                // readable, so accepting again at once would only spin.
                warn!(error = %e, pause = ?backoff, "accept failed: pausing");
                if !shared.stop.sleep(backoff) {
                    break;
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                continue;
            }
        };
        backoff = ACCEPT_BACKOFF.0;
        let shared_for_thread = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name(format!("{}-host", shared.nic))
            .spawn(move || serve(stream, &shared_for_thread));
        let mut list = lock(connections);
        list.retain(|c| !c.is_finished());
        match spawned {
            Ok(handle) => list.push(handle),
            Err(e) => warn!(error = %e, "cannot start a thread for a host connection"),
        }
    }
}

/// One host's doorbell: a region of device memory the host maps (its "sleeping" word, then its
/// doorbell record, see [`crate::doorbell`]) and an eventfd, which the engine listens to and
/// drains while the connection lasts. The record names the QPs of this host only.
struct HostDoorbell {
    region: Arc<Region>,
    waker: Arc<Waker>,
    ready: Arc<ReadyBits>,
    qpns: u32,
    engine: Arc<Waker>,
    records: Arc<Records>,
}

impl HostDoorbell {
    fn new(shared: &Shared, host: u32) -> io::Result<HostDoorbell> {
        let qpns = qpns_for(shared.limits.max_qp);
        let size = RECORD_OFFSET + ReadyBits::bytes(qpns);
        let region = Arc::new(
            Region::device_memory(&format!("{}-doorbell", shared.nic), size)
                .map_err(io::Error::other)?,
        );
        let at = region.as_ptr();
        // SAFETY: a region's mapping is page aligned and at least `size` long, and the Arc
        // keeps it mapped as long as the word and the record are used.
        let (sleeping, ready) = unsafe {
            (
                SharedWord::at(at, Arc::clone(&region) as _),
                ReadyBits::at(at.add(RECORD_OFFSET), qpns, Arc::clone(&region) as _),
            )
        };
        let waker = Waker::new(sleeping)?;
        let ready = Arc::new(ready);
        shared.engine.add_host(&waker);
        shared.records.add(Record {
            host: Some(host),
            ready: Arc::clone(&ready),
        });
        Ok(HostDoorbell {
            region,
            waker,
            ready,
            qpns,
            engine: Arc::clone(&shared.engine),
            records: Arc::clone(&shared.records),
        })
    }

    /// The greeting that hands this doorbell to its host.
    fn welcome(&self, nic: &str) -> Result<Welcome, VerbsError> {
        let region = self.region.fd().ok_or(RegionError::NoDescriptor)?;
        Ok(Welcome {
            version: PROTOCOL_VERSION,
            nic: nic.to_owned(),
            doorbell_word: region.try_clone_to_owned()?,
            doorbell: self.waker.as_fd().try_clone_to_owned()?,
            doorbell_qpns: self.qpns,
        })
    }
}

/// Ends the connection of a host that sent what is not a message, after the error: the NIC
/// answers nothing more (its end is shut for writing, so the host reads the end after the
/// error), and reads and drops what the host still sends until it closes, for at most
/// [`MESSAGE_DEADLINE`], so that the host's next write does not fail before it read why.
fn hang_up(stream: &UnixStream, stop: &StopLine) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let limit = Limit {
        stop: Some(stop),
        deadline: Some(Instant::now() + MESSAGE_DEADLINE),
    };
    while let Ok(Some(_)) = fdpass::recv(stream, limit) {}
}

impl Drop for HostDoorbell {
    fn drop(&mut self) {
        self.records.remove(&self.ready);
        self.engine.remove_host(&self.waker);
    }
}

/// Who is at the other end of a connection.
#[derive(Debug, Clone, Copy)]
struct Peer {
    uid: u32,
    pid: i32,
}

fn peer(stream: &UnixStream) -> io::Result<Peer> {
    let cred = rustix::net::sockopt::socket_peercred(stream)?;
    Ok(Peer {
        uid: cred.uid.as_raw(),
        pid: cred.pid.as_raw_nonzero().get(),
    })
}

/// Maps memory a host passed for a registration: never the NIC's own rings or doorbells, and
/// only what [`Region::from_fd`] accepts from this host's user.
fn map_host_memory(fd: OwnedFd, peer: Peer) -> Result<Arc<Region>, VerbsError> {
    if is_device_memory(fd.as_fd()) {
        return Err(RegionError::DeviceMemory.into());
    }
    Ok(Arc::new(Region::from_fd(fd, peer.uid)?))
}

/// Serves one host connection until it closes or the server stops, then destroys what its
/// contexts left behind.
fn serve(stream: UnixStream, shared: &Shared) {
    let peer = match peer(&stream) {
        Ok(peer) => peer,
        Err(e) => {
            warn!(error = %e, "cannot tell who connected: closing");
            return;
        }
    };
    let span = tracing::info_span!("host", nic = %shared.nic, pid = peer.pid, uid = peer.uid);
    let _enter = span.enter();
    let limit = || Limit {
        stop: Some(&shared.stop),
        deadline: Some(Instant::now() + MESSAGE_DEADLINE),
    };
    let host = match shared.join(peer) {
        Ok(host) => host,
        Err(e) => {
            info!(error = %e, "host refused");
            // The host's greeting gets the reason (best effort: it may not listen).
            if let Ok(Some(_)) = fdpass::recv(&stream, limit()) {
                let _ = answer(&stream, &Err(e), limit());
            }
            return;
        }
    };
    serve_host(&stream, shared, peer, host, limit);
}

/// Serves a host that was let in.
fn serve_host<'a>(
    stream: &UnixStream,
    shared: &'a Shared,
    peer: Peer,
    host: u32,
    limit: impl Fn() -> Limit<'a>,
) {
    let doorbell = match HostDoorbell::new(shared, host) {
        Ok(doorbell) => doorbell,
        Err(e) => {
            warn!(error = %e, "cannot make a doorbell for a host: closing");
            return;
        }
    };
    info!(host, "host connected");
    let mut clients = HashSet::new();
    let mut welcomed = false;
    while shared
        .stop
        .wait_for(stream.as_fd(), PollFlags::IN)
        .is_some()
    {
        let message = match fdpass::recv(stream, limit()) {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(e) => {
                debug!(error = %e, "host connection broken");
                break;
            }
        };
        let map = move |fd| map_host_memory(fd, peer);
        let sent = match codec::decode(message, map) {
            // Memory the host may not register: an answer like any refusal.
            Err(DecodeError::Refused(e)) => answer(stream, &Err(e), limit()),
            Err(DecodeError::Malformed(e)) => {
                info!(error = %e, "host sent what is not a message: hanging up");
                let _ = answer(stream, &Err(e.into()), limit());
                hang_up(stream, &shared.stop);
                break;
            }
            Ok(ToNic::Hello { version }) => {
                let result = doorbell
                    .welcome(&shared.nic)
                    .and_then(|w| send(stream, &FromNic::<Response>::Welcome(w), limit()));
                if version != PROTOCOL_VERSION {
                    info!(version, "host speaks another protocol version");
                    break;
                }
                welcomed = true;
                result
            }
            Ok(_) if !welcomed => {
                debug!("host skipped the greeting");
                break;
            }
            Ok(ToNic::Open) => match open(shared, host) {
                Ok(client) => {
                    clients.insert(client);
                    debug!(client, "context opened");
                    send(stream, &FromNic::<Response>::Opened(client), limit())
                }
                Err(e) => answer(stream, &Err(e), limit()),
            },
            Ok(ToNic::Call { client, request }) => {
                let result = call(shared, host, &mut clients, client, request);
                answer(stream, &result, limit())
            }
        };
        if let Err(e) = sent {
            debug!(error = %e, "cannot answer the host");
            break;
        }
    }
    let contexts = clients.len() as u64;
    for client in clients {
        let _ = shared.backend.call(client, Request::Disconnect);
    }
    shared.leave(host, contexts);
    info!("host disconnected: its objects are destroyed");
}

/// Opens a context for host `host`, within its limit, and tells the engine whose it is.
fn open(shared: &Shared, host: u32) -> Result<ClientId, VerbsError> {
    shared.open_context(host)?;
    let client = shared.backend.connect().and_then(|client| {
        shared
            .backend
            .call(client, Request::BindHost { host })
            .map(|_| client)
    });
    if client.is_err() {
        shared.close_context(host);
    }
    client
}

/// Runs a request for one of this connection's contexts.
fn call(
    shared: &Shared,
    host: u32,
    clients: &mut HashSet<ClientId>,
    client: ClientId,
    request: Request,
) -> Result<Response, VerbsError> {
    if !clients.contains(&client) {
        return Err(VerbsError::Invalid(format!(
            "context {client} was not opened on this connection"
        )));
    }
    match request {
        Request::BindHost { .. } => {
            return Err(VerbsError::Invalid(
                "a host is numbered by the NIC's control socket, not by itself".into(),
            ))
        }
        Request::Disconnect => {
            clients.remove(&client);
            shared.close_context(host);
        }
        _ => {}
    }
    shared.backend.call(client, request)
}
