//! librdmacm's `ucmatose` (cmatose.c) with one connection: the server listens, the client
//! connects through the RDMA CM (each side posts its receives before it connects or accepts),
//! then the server SENDs `count` messages of `size` bytes and waits for as many, the client
//! waits for the server's and answers with as many, and the server disconnects. The real tool
//! checks nothing of what it receives; ours checks that every message arrived, whole, and every
//! SEND completed.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use roce_hostmem::Access;
use roce_nic::cm::{CmEventKind, ConnParam};
use roce_nic::verbs::{
    CompletionQueue, Context, QpCap, QpType, QueuePair, RecvWr, SendFlags, SendOp, SendWr,
    VerbsError, Wc, WcOpcode,
};

use crate::memory::Buffer;
use crate::{Limits, ToolError};

/// ucmatose's port.
pub const DEFAULT_PORT: u16 = 7471;
/// ucmatose's message count and size.
pub const DEFAULT_COUNT: u32 = 10;
pub const DEFAULT_SIZE: u32 = 100;

#[derive(Debug, Clone)]
pub struct Options {
    /// The server's address (client), or the address to bind to (server; unspecified: all).
    pub addr: IpAddr,
    pub port: u16,
    /// Messages each way (`-C`).
    pub count: u32,
    /// Bytes per message (`-S`).
    pub size: u32,
    pub limits: Limits,
}

impl Options {
    pub fn new(addr: IpAddr) -> Options {
        Options {
            addr,
            port: DEFAULT_PORT,
            count: DEFAULT_COUNT,
            size: DEFAULT_SIZE,
            limits: Limits::default(),
        }
    }
}

/// One side's connection: a CQ, an RC QP with `count` receives posted, and the message buffer.
struct Node {
    cq: CompletionQueue,
    qp: QueuePair,
    mem: Buffer,
}

impl Node {
    fn new(ctx: &Context, opts: &Options) -> Result<Node, ToolError> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(2 * opts.count.max(1))?;
        let cap = QpCap {
            max_send_wr: opts.count.max(1),
            max_recv_wr: opts.count.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_qp(QpType::Rc, &cq, &cq, cap)?;
        let mem = Buffer::new(&pd, opts.size.max(1) as usize, Access::LOCAL_WRITE)?;
        for _ in 0..opts.count {
            qp.post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &[mem.sge(0, opts.size)],
            }])?;
        }
        Ok(Node { cq, qp, mem })
    }

    fn post_sends(&self, opts: &Options) -> Result<(), ToolError> {
        for _ in 0..opts.count {
            self.qp.post_send(&[SendWr {
                wr_id: 1,
                op: SendOp::Send,
                sg_list: &[self.mem.sge(0, opts.size)],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])?;
        }
        Ok(())
    }

    /// Waits for `count` completions of `op`, each a success (and each receive whole); others
    /// are counted in `other`.
    fn complete(
        &self,
        op: WcOpcode,
        opts: &Options,
        other: &mut u32,
        what: &'static str,
    ) -> Result<(), ToolError> {
        let step = opts.limits.step;
        let deadline = Instant::now() + step;
        let mut done = 0;
        let mut wc = [Wc::default()];
        while done < opts.count {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.cq.try_wait(&mut wc, Some(left))? == 0 {
                return Err(ToolError::timeout(what, step));
            }
            let wc = wc[0];
            if !wc.is_success() {
                return Err(ToolError::Completion {
                    what,
                    status: wc.status,
                });
            }
            if wc.opcode == WcOpcode::Recv && wc.byte_len != opts.size {
                return Err(ToolError::Data(format!(
                    "a message of {} bytes, not {}",
                    wc.byte_len, opts.size
                )));
            }
            if wc.opcode == op {
                done += 1;
            } else {
                *other += 1;
            }
        }
        Ok(())
    }
}

fn cm_event(ctx: &Context, step: Duration) -> Result<roce_nic::cm::CmEvent, ToolError> {
    ctx.cm_event(Some(step)).map_err(|e| match e {
        VerbsError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            ToolError::timeout("RDMA CM event", step)
        }
        e => e.into(),
    })
}

fn wait_for(ctx: &Context, kind: CmEventKind, step: Duration) -> Result<(), ToolError> {
    let event = cm_event(ctx, step)?;
    if event.kind != kind {
        return Err(ToolError::Protocol(format!(
            "the RDMA CM event {:?} instead of {kind:?}",
            event.kind
        )));
    }
    Ok(())
}

/// The server: one connection; sends first, then receives, then disconnects.
pub fn server(ctx: &Context, opts: &Options, out: &mut dyn Write) -> Result<(), ToolError> {
    let step = opts.limits.step;
    writeln!(out, "cmatose: starting server")?;
    let _listener = ctx.cm_listen(SocketAddr::new(opts.addr, opts.port))?;
    let request = loop {
        let event = cm_event(ctx, step)?;
        if event.kind == CmEventKind::ConnectRequest {
            break event;
        }
    };
    let node = Node::new(ctx, opts)?;
    let id = ctx.cm_request_id(&request);
    id.accept(&node.qp, &ConnParam::default())?;
    wait_for(ctx, CmEventKind::Established, step)?;
    let mut early_recvs = 0;
    if opts.count > 0 {
        writeln!(out, "initiating data transfers")?;
        node.post_sends(opts)?;
        writeln!(out, "completing sends")?;
        node.complete(WcOpcode::Send, opts, &mut early_recvs, "SEND")?;
        writeln!(out, "receiving data transfers")?;
        let rest = Options {
            count: opts.count - early_recvs.min(opts.count),
            ..opts.clone()
        };
        node.complete(WcOpcode::Recv, &rest, &mut 0, "receive")?;
        writeln!(out, "data transfers complete")?;
    }
    writeln!(out, "cmatose: disconnecting")?;
    id.disconnect()?;
    wait_for(ctx, CmEventKind::Disconnected, step)?;
    writeln!(out, "disconnected")?;
    verified(out, opts)
}

/// The client: connects, receives, answers, and waits for the server's disconnect.
pub fn client(ctx: &Context, opts: &Options, out: &mut dyn Write) -> Result<(), ToolError> {
    let step = opts.limits.step;
    writeln!(out, "cmatose: starting client")?;
    writeln!(out, "cmatose: connecting")?;
    let server = SocketAddr::new(opts.addr, opts.port);
    let retry_until = Instant::now() + opts.limits.connect_retry;
    let param = ConnParam {
        retry_count: 5,
        ..ConnParam::default()
    };
    let (node, _id) = loop {
        let node = Node::new(ctx, opts)?;
        let retry = Instant::now() < retry_until;
        let id = match ctx.cm_connect(&node.qp, server, &param) {
            Ok(id) => id,
            Err(_) if retry => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match cm_event(ctx, step)?.kind {
            CmEventKind::Established => break (node, id),
            CmEventKind::Rejected { reason: 8 } | CmEventKind::Unreachable if retry => {
                std::thread::sleep(Duration::from_millis(200));
            }
            kind => {
                return Err(ToolError::Connect {
                    peer: server.to_string(),
                    reason: format!("the RDMA CM event {kind:?}"),
                })
            }
        }
    };
    if opts.count > 0 {
        writeln!(out, "receiving data transfers")?;
        node.complete(WcOpcode::Recv, opts, &mut 0, "receive")?;
        writeln!(out, "sending replies")?;
        node.post_sends(opts)?;
        node.complete(WcOpcode::Send, opts, &mut 0, "SEND")?;
        writeln!(out, "data transfers complete")?;
    }
    wait_for(ctx, CmEventKind::Disconnected, step)?;
    verified(out, opts)
}

fn verified(out: &mut dyn Write, opts: &Options) -> Result<(), ToolError> {
    writeln!(out, "test complete")?;
    writeln!(
        out,
        "verified: {} messages of {} bytes each way, every one received whole",
        opts.count, opts.size
    )?;
    Ok(())
}
