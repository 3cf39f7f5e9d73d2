//! The host library's end of a NIC's control socket: a verbs [`Backend`] for a NIC in another
//! process. Control verbs are a request and an answer on the socket; posting work and polling
//! completions never touch it — they go through the rings the NIC shares, and the doorbell is
//! a store to this host's "sleeping" word plus, only while the engine sleeps, a write to this
//! host's eventfd.
//!
//! What is on the other end is checked before it is trusted: the socket's directory must be
//! this user's own ([`super::check_dir`]), the process answering must run as this user (or
//! root), and the memory it passes must be sealed shared memory.
//!
//! A NIC that dies closes its end of the socket. A small thread watches for that, so that
//! posting work (which has no system call to fail) fails with "the NIC has stopped" instead of
//! filling rings nobody reads; waits watch the socket themselves.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use roce_hostmem::Region;
use rustix::event::PollFlags;
use tracing::info;

use super::codec;
use super::fdpass::{self, Limit};
use super::messages::{greeting_version, send, FromNic, ToNic, Welcome, PROTOCOL_VERSION};
use super::socket_path::{check_dir, socket_dir, socket_path};
use super::stop_line::StopLine;
use crate::control::{ClientId, Request, Response};
use crate::doorbell::{Doorbell, ReadyBits, MAX_QPNS, RECORD_OFFSET};
use crate::verbs::{Backend, Context, VerbsError};
use crate::waker::{SharedWord, Waker};

/// Opens the NIC called `nic` (`ibv_open_device` for a NIC process on this machine).
pub fn connect(nic: &str) -> Result<Context, VerbsError> {
    Context::open(SocketBackend::connect(nic)? as Arc<dyn Backend>)
}

/// A connection to a NIC process. Several contexts may be opened on one connection.
///
/// One control request is in flight per connection: calls from several threads take turns, so a
/// call that waits inside the NIC (a TCP accept without a timeout) holds the others back. Open
/// another connection for work that must go on meanwhile. Posting and polling never wait for
/// the connection.
pub struct SocketBackend {
    nic: String,
    /// The user the NIC runs as: the owner of the memory it passes.
    nic_uid: u32,
    stream: Mutex<UnixStream>,
    /// A second handle on the socket, polled (never read) for the NIC's hang-up.
    liveness: Arc<UnixStream>,
    doorbell: Doorbell,
    gone: Arc<AtomicBool>,
    stop: Arc<StopLine>,
    watcher: Option<JoinHandle<()>>,
}

impl SocketBackend {
    /// Connects to the NIC called `nic`, whose socket is found by [`super::socket_path`].
    pub fn connect(nic: &str) -> Result<Arc<SocketBackend>, VerbsError> {
        let path = socket_path(nic);
        match check_dir(&socket_dir()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(VerbsError::NoDevice {
                    nic: nic.to_owned(),
                    path,
                })
            }
            Err(e) => return Err(VerbsError::Io(e)),
            Ok(()) => {}
        }
        SocketBackend::connect_at(nic, &path)
    }

    /// Connects to the NIC called `nic` through the socket at `path`.
    pub fn connect_at(nic: &str, path: &Path) -> Result<Arc<SocketBackend>, VerbsError> {
        let stream = UnixStream::connect(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => VerbsError::NoDevice {
                nic: nic.to_owned(),
                path: path.to_owned(),
            },
            _ => VerbsError::Invalid(format!(
                "cannot reach the NIC {nic} at {}: {e}",
                path.display()
            )),
        })?;
        let gone_early = || VerbsError::DeviceGone {
            nic: nic.to_owned(),
        };
        let nic_uid = rustix::net::sockopt::socket_peercred(&stream)
            .map_err(io::Error::from)?
            .uid
            .as_raw();
        let me = rustix::process::geteuid().as_raw();
        if nic_uid != me && nic_uid != 0 {
            return Err(VerbsError::Invalid(format!(
                "refusing the NIC at {}: it runs as user {nic_uid}, not as user {me} or root",
                path.display()
            )));
        }
        let hello = ToNic::Hello {
            version: PROTOCOL_VERSION,
        };
        send(&stream, &hello, Limit::default()).map_err(|_| gone_early())?;
        let greeting = fdpass::recv(&stream, Limit::default())?.ok_or_else(gone_early)?;
        // Checked before the rest is read: a NIC of another version may say the rest otherwise.
        match greeting_version(&greeting.bytes) {
            Some(version) if version != PROTOCOL_VERSION => {
                return Err(VerbsError::Invalid(format!(
                    "the NIC {nic} speaks control protocol version {version}, this library \
                     version {PROTOCOL_VERSION}"
                )))
            }
            _ => {}
        }
        let welcome = match codec::decode::<FromNic>(greeting, refuse_regions)? {
            FromNic::Welcome(w) => w,
            // Refused: over a limit of connections, say.
            FromNic::Answer(Err(e)) => return Err(e.into()),
            _ => return Err(VerbsError::Invalid(format!("the NIC {nic} did not greet"))),
        };
        let nic = welcome.nic.clone();
        let doorbell = doorbell(welcome, nic_uid)?;
        let liveness = Arc::new(stream.try_clone()?);
        let gone = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(StopLine::new()?);
        let watcher = {
            let (liveness, gone, stop) =
                (Arc::clone(&liveness), Arc::clone(&gone), Arc::clone(&stop));
            let name = nic.clone();
            std::thread::Builder::new()
                .name(format!("{nic}-watch"))
                .spawn(move || {
                    // Only a hang-up is of interest; answers are read by `call`.
                    if stop.wait_for(liveness.as_fd(), PollFlags::RDHUP).is_some() {
                        gone.store(true, Ordering::Relaxed);
                        info!(nic = %name, "the NIC has stopped");
                    }
                })?
        };
        Ok(Arc::new(SocketBackend {
            nic,
            nic_uid,
            stream: Mutex::new(stream),
            liveness,
            doorbell,
            gone,
            stop,
            watcher: Some(watcher),
        }))
    }

    /// The NIC's name.
    pub fn nic(&self) -> &str {
        &self.nic
    }

    fn gone(&self) -> VerbsError {
        self.gone.store(true, Ordering::Relaxed);
        VerbsError::DeviceGone {
            nic: self.nic.clone(),
        }
    }

    /// One request and its answer. A connection that fails on the way means the NIC is gone.
    fn exchange(&self, message: &ToNic) -> Result<FromNic, VerbsError> {
        if self.gone.load(Ordering::Relaxed) {
            return Err(self.gone());
        }
        let stream = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        match send(&stream, message, Limit::default()) {
            Ok(()) => {}
            Err(VerbsError::Io(_)) => return Err(self.gone()),
            Err(e) => return Err(e),
        }
        let Ok(Some(answer)) = fdpass::recv(&stream, Limit::default()) else {
            return Err(self.gone());
        };
        let nic_uid = self.nic_uid;
        let attach = move |fd: OwnedFd| Ok(Arc::new(Region::from_fd(fd, nic_uid)?));
        Ok(codec::decode(answer, attach)?)
    }
}

/// This host's doorbell: its "sleeping" word and its record in the memory the NIC passed, and
/// its eventfd.
fn doorbell(welcome: Welcome, nic_uid: u32) -> Result<Doorbell, VerbsError> {
    let region = Arc::new(Region::from_fd(welcome.doorbell_word, nic_uid)?);
    let qpns = welcome.doorbell_qpns;
    // Checked, as the descriptor came from outside.
    if qpns > MAX_QPNS || region.len() < RECORD_OFFSET + ReadyBits::bytes(qpns) {
        return Err(VerbsError::Invalid(format!(
            "the doorbell region of {} bytes cannot hold a record of {qpns} QPs",
            region.len()
        )));
    }
    let at = region.as_ptr();
    // SAFETY: a region's mapping is page aligned, holds the word and the record (checked),
    // and the Arc keeps it mapped as long as they are used.
    let (sleeping, ready) = unsafe {
        (
            SharedWord::at(at, Arc::clone(&region) as _),
            ReadyBits::at(at.add(RECORD_OFFSET), qpns, region),
        )
    };
    Ok(Doorbell::new(
        Arc::new(ready),
        Waker::from_parts(sleeping, welcome.doorbell),
    ))
}

fn refuse_regions(_: OwnedFd) -> Result<Arc<Region>, VerbsError> {
    Err(VerbsError::Invalid(
        "the NIC passed memory in its greeting".into(),
    ))
}

impl Backend for SocketBackend {
    fn connect(&self) -> Result<ClientId, VerbsError> {
        match self.exchange(&ToNic::Open)? {
            FromNic::Opened(client) => Ok(client),
            FromNic::Answer(Err(e)) => Err(e.into()),
            _ => Err(VerbsError::Invalid(format!(
                "the NIC {} answered an open with something else",
                self.nic
            ))),
        }
    }

    fn call(&self, client: ClientId, request: Request) -> Result<Response, VerbsError> {
        match self.exchange(&ToNic::Call { client, request })? {
            FromNic::Answer(answer) => answer.map_err(VerbsError::from),
            _ => Err(VerbsError::Invalid(format!(
                "the NIC {} answered a request with something else",
                self.nic
            ))),
        }
    }

    fn doorbell(&self) -> &Doorbell {
        &self.doorbell
    }

    fn alive(&self) -> bool {
        !self.gone.load(Ordering::Relaxed)
    }

    fn hangup_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.liveness.as_fd())
    }
}

impl Drop for SocketBackend {
    fn drop(&mut self) {
        self.stop.raise();
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}
