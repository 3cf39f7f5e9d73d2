//! The RDMA CM in the verbs API, shaped like librdmacm: [`Context::cm_listen`] and
//! [`Context::cm_connect`] give a [`CmId`] (an ID bound to an address), the NIC's CM agent does
//! the handshake on QP1 and moves the QP, and [`Context::cm_event`] hands out what happened —
//! a connect request (with a new ID to accept or reject), established, rejected, unreachable,
//! disconnected. The same calls work on an in-process device and through a `roce nic` socket.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::context::{Context, Inner};
use super::qp::QueuePair;
use super::VerbsError;
use crate::cm::{CmEvent, ConnParam};
use crate::control::{Request, Response};
use crate::cq::Woken;

/// An RDMA CM ID (`rdma_cm_id`): a listener or one side of a connection. Destroyed when
/// dropped: a listener stops, a connection being made is refused, an established one is
/// disconnected.
pub struct CmId {
    ctx: Arc<Inner>,
    id: u32,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmId({:#x})", self.id)
    }
}

impl Context {
    /// Listens for connect requests to `addr` (`rdma_bind_addr` and `rdma_listen`); an
    /// unspecified IP (0.0.0.0) listens on every address of the port.
    pub fn cm_listen(&self, addr: SocketAddr) -> Result<CmId, VerbsError> {
        self.cm_id(Request::CmListen { addr })
    }

    /// Serves UD services at `addr` in the RDMA CM's UDP port space (`rdma_listen` on an
    /// `RDMA_PS_UDP` ID, as udaddy's server): each SIDR request comes as a connect request
    /// event, to answer with [`CmId::accept`] on a UD QP, or [`CmId::reject`].
    pub fn cm_listen_udp(&self, addr: SocketAddr) -> Result<CmId, VerbsError> {
        self.cm_id(Request::CmListenUdp { addr })
    }

    /// Connects RC QP `qp` to the listener at `dst` (`rdma_resolve_addr`, `rdma_resolve_route`
    /// and `rdma_connect` in one): the REQ goes out now; [`Context::cm_event`] tells the
    /// outcome, and on [`crate::cm::CmEventKind::Established`] the QP is in RTS. For a UD QP
    /// this resolves the UDP port space's service at `dst` (SIDR): the QP goes to RTS with the
    /// port space's Q_Key, and the event names the service's QP number and Q_Key.
    pub fn cm_connect(
        &self,
        qp: &QueuePair,
        dst: SocketAddr,
        param: &ConnParam,
    ) -> Result<CmId, VerbsError> {
        self.cm_id(Request::CmConnect {
            qpn: qp.qp_num(),
            dst,
            param: param.clone(),
        })
    }

    fn cm_id(&self, request: Request) -> Result<CmId, VerbsError> {
        match self.inner.call(request)? {
            Response::CmId(id) => Ok(CmId {
                ctx: Arc::clone(&self.inner),
                id,
            }),
            _ => Err(self.inner.unexpected("a CM request")),
        }
    }

    /// The next event of this context's IDs (`rdma_get_cm_event`), waiting at most `timeout`
    /// (`None`: for ever); a timeout is an error of kind `TimedOut`.
    ///
    /// A wait holds the context's control connection (behind a NIC socket, one request is in
    /// flight at a time): other threads' verbs wait for it. A program with other threads at
    /// work waits with [`Context::cm_wait`] and takes events with a zero timeout.
    pub fn cm_event(&self, timeout: Option<Duration>) -> Result<CmEvent, VerbsError> {
        match self.inner.call(Request::CmGetEvent { timeout })? {
            Response::CmEvent(event) => Ok(*event),
            _ => Err(self.inner.unexpected("a CM event wait")),
        }
    }

    /// Waits, at most `timeout` (`None`: for ever), until an event may be there for
    /// [`Context::cm_event`] to take at once (with a zero timeout); false if the time ran out.
    /// It waits on the context's CM event line, which the NIC signals at every event it queues,
    /// and holds nothing of the control connection meanwhile: other threads' verbs go on (a
    /// connection's teardown does not queue behind a thread waiting for its DISCONNECTED). A
    /// wake may find no event (another thread took it); a stopped NIC is
    /// [`VerbsError::DeviceGone`].
    pub fn cm_wait(&self, timeout: Option<Duration>) -> Result<bool, VerbsError> {
        let line = match self.inner.cm_line.get() {
            Some(line) => Arc::clone(line),
            None => match self.inner.call(Request::CmEventLine)? {
                Response::CmEventLine { line } => {
                    Arc::clone(self.inner.cm_line.get_or_init(|| line))
                }
                _ => return Err(self.inner.unexpected("a CM event line request")),
            },
        };
        match line.wait(timeout, self.inner.backend.hangup_fd()) {
            Woken::Signalled => Ok(true),
            Woken::TimedOut => Ok(false),
            Woken::HungUp => {
                self.inner.gone.store(true, Ordering::Relaxed);
                Err(self.inner.device_gone())
            }
        }
    }

    /// Takes charge of the new ID a connect request event names: accept or reject through it.
    /// Dropping it without answering refuses the request.
    pub fn cm_request_id(&self, event: &CmEvent) -> CmId {
        CmId {
            ctx: Arc::clone(&self.inner),
            id: event.id,
        }
    }
}

impl CmId {
    /// The ID's number (the local communication ID of its MADs).
    pub fn id(&self) -> u32 {
        self.id
    }

    fn done(&self, request: Request) -> Result<(), VerbsError> {
        match self.ctx.call(request)? {
            Response::Done => Ok(()),
            _ => Err(self.ctx.unexpected("a CM request")),
        }
    }

    /// Accepts this connect request on RC QP `qp` (`rdma_accept`): the QP goes to RTR and RTS
    /// and the REP goes out; the RTU brings [`crate::cm::CmEventKind::Established`]. A SIDR
    /// request is answered with UD QP `qp` (to RTS with the port space's Q_Key), and that is
    /// all: no event follows.
    pub fn accept(&self, qp: &QueuePair, param: &ConnParam) -> Result<(), VerbsError> {
        self.done(Request::CmAccept {
            id: self.id,
            qpn: qp.qp_num(),
            param: param.clone(),
        })
    }

    /// Refuses this connect request (`rdma_reject`): REJ reason 28 with `private_data` (for a
    /// SIDR request, a SIDR_REP with status "rejected").
    pub fn reject(&self, private_data: &[u8]) -> Result<(), VerbsError> {
        self.done(Request::CmReject {
            id: self.id,
            private_data: private_data.to_vec(),
        })
    }

    /// Ends the connection (`rdma_disconnect`): the QP goes to the error state and a DREQ goes
    /// out; both sides get [`crate::cm::CmEventKind::Disconnected`].
    pub fn disconnect(&self) -> Result<(), VerbsError> {
        self.done(Request::CmDisconnect { id: self.id })
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        let _ = self.ctx.call(Request::CmDestroyId { id: self.id });
    }
}
