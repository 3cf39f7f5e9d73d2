//! perftest's `-R`: the QPs are connected through the RDMA CM, and perftest's exchange travels
//! over the RDMA CM too — over a second RC connection of its own, one SEND per message into
//! one receive posted at a time, rather than over TCP (perftest's "Data ex. method: rdma_cm").
//!
//! What passes, as ib_write_bw -R and ib_send_lat -R do it between two Soft-RoCE guests (seen
//! on the wire): the client connects a first QP to the server's port, the "exchange" QP; over it
//! the same version, page size, cache line and MTU as over TCP, then a round of records that are
//! not filled in yet (zeros); the client connects the test's QP to the same port; another
//! round of empty records; then the test's rounds of records — binary (perftest's
//! `struct pingpong_dest`), not text — and after the run the same rounds and reports as over
//! TCP, without the closing `done`. The client then disconnects the test's connection and the
//! server the exchange's.
//!
//! Each message is one SEND of exactly its size, and each side sends only after the peer's
//! previous message arrived (the client first), so one receive posted at a time is enough; we
//! keep two.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use roce_hostmem::Access;
use roce_nic::cm::{CmEvent, CmEventKind, ConnParam};
use roce_nic::verbs::{
    CmId, CompletionQueue, Context, QpAttr, QpCap, QpState, QpType, QueuePair, RecvWr, SendFlags,
    SendOp, SendWr, VerbsError, Wc, WcOpcode,
};
use tracing::debug;

use super::messages::BINARY_RECORD_LEN;
use crate::memory::Buffer;
use crate::oob::{Limits, Role};
use crate::ToolError;

/// Bytes of one receive slot: the largest message is a record.
const SLOT: usize = 64;
/// Receives kept posted on the exchange QP.
const RECV_SLOTS: usize = 2;
/// Where the message to send is staged, after the receive slots.
const SEND_AT: usize = SLOT * RECV_SLOTS;
/// perftest's retry count (`--retry_count`'s default), which it asks of both connections.
const RETRY: u8 = 7;
/// Pause between two connection attempts while the server is not listening yet.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// The longest a side waits for its peer's disconnect once everything is said.
const DISCONNECT_WAIT: Duration = Duration::from_secs(5);

/// The exchange's connection: its QP and the IDs of both connections.
pub(super) struct CmLink {
    ctx: Context,
    exchange: ExchangeQp,
    /// The exchange's connection.
    id: CmId,
    /// The server's listener: kept for the test's connection, which comes to the same port.
    listener: Option<CmId>,
    /// The test's connection, once made.
    data: Option<CmId>,
    role: Role,
    port: u16,
    limits: Limits,
}

/// One side's exchange QP, with its receives posted.
struct ExchangeQp {
    qp: QueuePair,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mem: Buffer,
}

impl ExchangeQp {
    fn new(ctx: &Context) -> Result<ExchangeQp, ToolError> {
        let pd = ctx.alloc_pd()?;
        let send_cq = ctx.create_cq(2)?;
        let recv_cq = ctx.create_cq(RECV_SLOTS as u32 + 1)?;
        let cap = QpCap {
            max_send_wr: 1,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_qp(QpType::Rc, &send_cq, &recv_cq, cap)?;
        let mem = Buffer::new(&pd, SEND_AT + SLOT, Access::LOCAL_WRITE)?;
        let exchange = ExchangeQp {
            qp,
            send_cq,
            recv_cq,
            mem,
        };
        for slot in 0..RECV_SLOTS {
            exchange.post_recv(slot)?;
        }
        Ok(exchange)
    }

    fn post_recv(&self, slot: usize) -> Result<(), ToolError> {
        self.qp.post_recv(&[RecvWr {
            wr_id: slot as u64,
            sg_list: &[self.mem.sge(slot * SLOT, SLOT as u32)],
        }])?;
        Ok(())
    }
}

/// What a side offers for a connection: perftest's `rdma_conn_param` (READs and atomics at
/// once, `out_reads` of them, only where the test makes them).
fn conn_param(out_reads: u8) -> ConnParam {
    ConnParam {
        private_data: Vec::new(),
        responder_resources: out_reads,
        initiator_depth: out_reads,
        retry_count: RETRY,
        rnr_retry_count: RETRY,
    }
}

impl CmLink {
    /// The exchange's connection: the server listens on `port` and accepts the first request;
    /// the client connects to the server's `port`, trying again while nobody listens there.
    pub fn open(ctx: &Context, role: Role, port: u16, limits: Limits) -> Result<CmLink, ToolError> {
        let (exchange, id, listener) = match role {
            Role::Server => {
                let listener =
                    ctx.cm_listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))?;
                let exchange = ExchangeQp::new(ctx)?;
                let id = accept(ctx, &listener, limits.step, &exchange.qp, &conn_param(0))?;
                wait_for(ctx, id.id(), CmEventKind::Established, limits.step)?;
                (exchange, id, Some(listener))
            }
            Role::Client(ip) => {
                let server = SocketAddr::new(ip, port);
                // A failed attempt flushed the receives: each attempt has a QP of its own.
                let attempt = |_| ExchangeQp::new(ctx);
                let (exchange, id) =
                    connect(ctx, server, &conn_param(0), limits, attempt, |e| &e.qp)?;
                (exchange, id, None)
            }
        };
        debug!(id = id.id(), "perftest -R: the exchange is connected");
        Ok(CmLink {
            ctx: ctx.clone(),
            exchange,
            id,
            listener,
            data: None,
            role,
            port,
            limits,
        })
    }

    /// Connects the test's QP `qp` as perftest does: a round of empty records, the connection
    /// (to the port of the exchange), another round of empty records.
    pub fn connect_test_qp(
        &mut self,
        qp: &QueuePair,
        access: Access,
        out_reads: u8,
    ) -> Result<(), ToolError> {
        let empty = [0u8; BINARY_RECORD_LEN];
        self.swap(&empty, "its first (empty) QP record")?;
        let param = conn_param(out_reads);
        let id = match (self.role, &self.listener) {
            (Role::Server, Some(listener)) => {
                accept(&self.ctx, listener, self.limits.step, qp, &param)?
            }
            (Role::Client(ip), _) => {
                let server = SocketAddr::new(ip, self.port);
                // A refused attempt left the QP in the error state (it holds no work yet).
                let attempt = |again: bool| -> Result<&QueuePair, ToolError> {
                    if again {
                        qp.modify(&QpAttr {
                            qp_state: Some(QpState::Reset),
                            ..QpAttr::default()
                        })?;
                        qp.modify(&QpAttr::init(access))?;
                    }
                    Ok(qp)
                };
                let (_, id) = connect(&self.ctx, server, &param, self.limits, attempt, |q| *q)?;
                id
            }
            (Role::Server, None) => {
                return Err(ToolError::Usage("a server without its listener".into()))
            }
        };
        debug!(id = id.id(), "perftest -R: the test's QP is connected");
        self.data = Some(id);
        self.swap(&empty, "its second (empty) QP record")?;
        Ok(())
    }

    /// Sends one message as one SEND and waits for its completion.
    pub fn send(&mut self, msg: &[u8]) -> Result<(), ToolError> {
        if msg.len() > SLOT {
            return Err(ToolError::Usage(format!(
                "a {}-byte message does not fit perftest's receive",
                msg.len()
            )));
        }
        let exchange = &self.exchange;
        exchange.mem.write(SEND_AT, msg);
        exchange.qp.post_send(&[SendWr {
            wr_id: 0,
            op: SendOp::Send,
            sg_list: &[exchange.mem.sge(SEND_AT, msg.len() as u32)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])?;
        let wc = self.one(&exchange.send_cq, "SEND of the exchange")?;
        if !wc.is_success() || wc.opcode != WcOpcode::Send {
            return Err(ToolError::Completion {
                what: "SEND of the exchange",
                status: wc.status,
            });
        }
        Ok(())
    }

    /// Receives the peer's next message, which must be `len` bytes.
    pub fn recv(&mut self, len: usize, what: &'static str) -> Result<Vec<u8>, ToolError> {
        let wc = self.one(&self.exchange.recv_cq, what)?;
        if !wc.is_success() {
            return Err(ToolError::Completion {
                what: "receive of the exchange",
                status: wc.status,
            });
        }
        let slot = wc.wr_id as usize;
        if wc.byte_len as usize != len {
            return Err(ToolError::Protocol(format!(
                "{} bytes for {what}, which is {len}",
                wc.byte_len
            )));
        }
        let msg = self.exchange.mem.read(slot * SLOT, len);
        self.exchange.post_recv(slot)?;
        Ok(msg)
    }

    fn one(&self, cq: &CompletionQueue, what: &'static str) -> Result<Wc, ToolError> {
        let mut wc = [Wc::default()];
        if cq.try_wait(&mut wc, Some(self.limits.step))? == 0 {
            return Err(ToolError::timeout(what, self.limits.step));
        }
        Ok(wc[0])
    }

    /// One message each way, the client first (as over TCP).
    pub fn swap(&mut self, mine: &[u8], what: &'static str) -> Result<Vec<u8>, ToolError> {
        if self.role == Role::Server {
            let theirs = self.recv(mine.len(), what)?;
            self.send(mine)?;
            Ok(theirs)
        } else {
            self.send(mine)?;
            self.recv(mine.len(), what)
        }
    }

    /// The end, once everything is said: the client disconnects the test's connection and
    /// waits for the server's disconnect of the exchange's; the server waits for the first and
    /// then makes the second. A peer that does not answer is waited for a few seconds only:
    /// the test is over, and the CM agent finishes the teardown on its own.
    pub fn close(mut self) -> Result<(), ToolError> {
        let wait = DISCONNECT_WAIT.min(self.limits.step);
        let data = self.data.take();
        match self.role {
            Role::Client(_) => {
                if let Some(data) = &data {
                    data.disconnect()?;
                    let _ = wait_for(&self.ctx, data.id(), CmEventKind::Disconnected, wait);
                }
                if wait_for(&self.ctx, self.id.id(), CmEventKind::Disconnected, wait).is_err() {
                    self.id.disconnect()?;
                }
            }
            Role::Server => {
                if let Some(data) = &data {
                    if wait_for(&self.ctx, data.id(), CmEventKind::Disconnected, wait).is_err() {
                        data.disconnect()?;
                    }
                }
                self.id.disconnect()?;
                let _ = wait_for(&self.ctx, self.id.id(), CmEventKind::Disconnected, wait);
            }
        }
        Ok(())
    }
}

/// Waits for the next connect request to `listener` and accepts it on `qp`.
fn accept(
    ctx: &Context,
    listener: &CmId,
    step: Duration,
    qp: &QueuePair,
    param: &ConnParam,
) -> Result<CmId, ToolError> {
    let request = next_event(ctx, step, "a connect request", |e| {
        e.kind == CmEventKind::ConnectRequest && e.listen_id == Some(listener.id())
    })?;
    let id = ctx.cm_request_id(&request);
    id.accept(qp, param)?;
    Ok(id)
}

/// Connects the QP of each `attempt` (`qp` names it; `attempt` is told whether an earlier one
/// failed) to `server`, again while the server refuses (nobody listens yet) or does not
/// answer, until the retry time is over.
fn connect<T>(
    ctx: &Context,
    server: SocketAddr,
    param: &ConnParam,
    limits: Limits,
    mut attempt: impl FnMut(bool) -> Result<T, ToolError>,
    qp: impl Fn(&T) -> &QueuePair,
) -> Result<(T, CmId), ToolError> {
    let retry_until = Instant::now() + limits.connect_retry;
    let mut again = false;
    loop {
        let made = attempt(again)?;
        let retry = Instant::now() + RETRY_PAUSE < retry_until;
        let id = ctx.cm_connect(qp(&made), server, param)?;
        let event = next_event(ctx, limits.step, "the answer to our connect", |e| {
            e.id == id.id()
        })?;
        match event.kind {
            CmEventKind::Established => return Ok((made, id)),
            CmEventKind::Rejected { reason: 8 } | CmEventKind::Unreachable if retry => {
                debug!(%server, "nobody listens yet; trying again");
                drop(id);
                again = true;
                std::thread::sleep(RETRY_PAUSE);
            }
            kind => {
                return Err(ToolError::Connect {
                    peer: server.to_string(),
                    reason: format!("the RDMA CM event {kind:?}"),
                })
            }
        }
    }
}

/// Waits for the event of ID `id` of kind `kind`.
fn wait_for(ctx: &Context, id: u32, kind: CmEventKind, step: Duration) -> Result<(), ToolError> {
    let event = next_event(ctx, step, "an RDMA CM event", |e| e.id == id)?;
    if event.kind != kind {
        return Err(ToolError::Protocol(format!(
            "the RDMA CM event {:?} instead of {kind:?}",
            event.kind
        )));
    }
    Ok(())
}

/// The next CM event `wanted` takes, within `step`; others (of IDs this run no longer minds)
/// are passed over.
fn next_event(
    ctx: &Context,
    step: Duration,
    what: &'static str,
    wanted: impl Fn(&CmEvent) -> bool,
) -> Result<CmEvent, ToolError> {
    let deadline = Instant::now() + step;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = ctx.cm_event(Some(left)).map_err(|e| match e {
            VerbsError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                ToolError::timeout(what, step)
            }
            e => e.into(),
        })?;
        if wanted(&event) {
            return Ok(event);
        }
        debug!(?event, "an RDMA CM event for another ID: passed over");
        if left.is_zero() {
            return Err(ToolError::timeout(what, step));
        }
    }
}
