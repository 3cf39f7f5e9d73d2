//! The NIC process's control socket (the uverbs role): one thread accepts connections, one
//! thread per connection reads requests, hands them to the engine through the same path as an
//! in-process host, and writes the answers. A connection that ends — the host closed it, or
//! was killed — takes every context opened on it along: the engine destroys their objects, so
//! no dead host's QP keeps answering the wire.

use std::collections::HashSet;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rustix::event::PollFlags;
use tracing::{debug, info, warn};

use super::fdpass;
use super::messages::{decode_to_nic, nic_side, ToNic, PROTOCOL_VERSION};
use super::stop_line::StopLine;
use crate::control::{ClientId, Request};
use crate::device::Device;
use crate::verbs::{Backend, VerbsError};
use crate::waker::Waker;

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
    doorbell_region: String,
    stop: StopLine,
}

/// A running control socket. Dropping it stops it.
pub struct Server {
    path: PathBuf,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// A control socket bound but not serving yet. Claiming the socket first tells whether the
/// name is free before a device of that name, and its shared memory, is created.
pub struct Claim {
    path: PathBuf,
    listener: Option<UnixListener>,
}

impl Claim {
    /// Serves `device` on the claimed socket.
    pub fn serve(mut self, device: &Device) -> Result<Server, ServerError> {
        let nic = device.config().name.clone();
        let doorbell_region = device
            .doorbell_region()
            .ok_or_else(|| ServerError::PrivateRings(nic.clone()))?
            .to_owned();
        let socket_error = |source| ServerError::Socket {
            path: self.path.clone(),
            source,
        };
        let shared = Arc::new(Shared {
            nic,
            backend: device.backend(),
            doorbell_region,
            stop: StopLine::new().map_err(socket_error)?,
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
    /// nobody answers on (left by a NIC that was killed) is replaced, and so is the shared
    /// memory that NIC left; a socket a live NIC answers on is an error.
    pub fn claim(nic: &str, path: &Path) -> Result<Claim, ServerError> {
        let listener = claim(nic, path)?;
        remove_stale_regions(nic);
        Ok(Claim {
            path: path.to_owned(),
            listener: Some(listener),
        })
    }

    /// Binds a control socket at `path` for a running `device` and serves it (a stale socket
    /// file is replaced, as with [`Server::claim`]).
    pub fn start(device: &Device, path: &Path) -> Result<Server, ServerError> {
        let claimed = Claim {
            path: path.to_owned(),
            listener: Some(claim(&device.config().name, path)?),
        };
        claimed.serve(device)
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
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(socket_error)?;
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

/// Removes the shared memory a killed NIC of the same name left: its rings (`<nic>-qp<N>`,
/// `<nic>-cq<N>`) and its doorbell. Safe once the name is claimed, since no live NIC has it;
/// other names that merely start with `<nic>-` are left alone.
fn remove_stale_regions(nic: &str) {
    let Ok(entries) = std::fs::read_dir(roce_hostmem::SHM_DIR) else {
        return;
    };
    let prefix = format!("{}{nic}-", roce_hostmem::FILE_PREFIX);
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        let numbered = |kind| {
            rest.strip_prefix(kind)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        if rest == "doorbell" || numbered("qp") || numbered("cq") {
            info!(file = %entry.path().display(), "removing shared memory a dead NIC left");
            let _ = std::fs::remove_file(entry.path());
        }
    }
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
    while shared
        .stop
        .wait_for(listener.as_fd(), PollFlags::IN)
        .is_some()
    {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => {
                debug!(error = %e, "accept failed");
                continue;
            }
        };
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

/// The pid of the process at the other end, for logs.
fn peer_pid(stream: &UnixStream) -> i32 {
    rustix::net::sockopt::socket_peercred(stream).map_or(0, |c| c.pid.as_raw_nonzero().get())
}

/// Serves one host connection until it closes or the server stops, then destroys what its
/// contexts left behind.
fn serve(stream: UnixStream, shared: &Shared) {
    let pid = peer_pid(&stream);
    let span = tracing::info_span!("host", nic = %shared.nic, pid);
    let _enter = span.enter();
    info!("host connected");
    let mut clients = HashSet::new();
    let mut welcomed = false;
    while shared
        .stop
        .wait_for(stream.as_fd(), PollFlags::IN)
        .is_some()
    {
        let message = match fdpass::recv(&stream) {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(e) => {
                debug!(error = %e, "host connection broken");
                break;
            }
        };
        let sent = match decode_to_nic(&message.bytes) {
            Err(e) => nic_side::answer(&stream, &Err(e.into())),
            Ok(ToNic::Hello { version }) => {
                let result = nic_side::welcome(
                    &stream,
                    &shared.nic,
                    &shared.doorbell_region,
                    Waker::as_fd(shared.backend.doorbell()),
                );
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
            Ok(ToNic::Open) => match shared.backend.connect() {
                Ok(client) => {
                    clients.insert(client);
                    debug!(client, "context opened");
                    nic_side::opened(&stream, client)
                }
                Err(e) => nic_side::answer(&stream, &Err(e)),
            },
            Ok(ToNic::Call { client, request }) => {
                let answer = call(shared, &mut clients, client, request);
                nic_side::answer(&stream, &answer)
            }
        };
        if let Err(e) = sent {
            debug!(error = %e, "cannot answer the host");
            break;
        }
    }
    for client in clients {
        let _ = shared.backend.call(client, Request::Disconnect);
    }
    info!("host disconnected: its objects are destroyed");
}

/// Runs a request for one of this connection's contexts.
fn call(
    shared: &Shared,
    clients: &mut HashSet<ClientId>,
    client: ClientId,
    request: Request,
) -> Result<crate::control::Response, VerbsError> {
    if !clients.contains(&client) {
        return Err(VerbsError::Invalid(format!(
            "context {client} was not opened on this connection"
        )));
    }
    if matches!(request, Request::Disconnect) {
        clients.remove(&client);
    }
    shared.backend.call(client, request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_hostmem::Region;

    #[test]
    fn only_a_dead_nics_own_regions_are_removed() {
        let nic = format!("stale{}", std::process::id());
        let theirs = ["qp17", "cq3", "doorbell"].map(|s| format!("{nic}-{s}"));
        let others = ["b-qp17", "qpx", "qp", "mybuf"].map(|s| format!("{nic}-{s}"));
        for name in theirs.iter().chain(&others) {
            drop(Region::create_persistent(name, 4096).unwrap());
        }
        remove_stale_regions(&nic);
        for name in &theirs {
            assert!(Region::attach(name).is_err(), "{name} kept");
        }
        for name in &others {
            assert!(Region::attach(name).is_ok(), "{name} removed");
            Region::remove(name).unwrap();
        }
    }
}
