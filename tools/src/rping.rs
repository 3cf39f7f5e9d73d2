//! rdma-core's `rping` (librdmacm's example): a connection made with the RDMA CM, then, for
//! each ping, the exchange rping does, message for message, so that either side can face the
//! real one:
//!
//! 1. the client writes `rdma-ping-N: ` and a run of letters into its start buffer and SENDs
//!    the buffer's address, rkey and length (16 bytes, big-endian: `struct rping_rdma_info`);
//! 2. the server RDMA READs the start buffer into its own buffer and SENDs a go-ahead;
//! 3. the client SENDs the address, rkey and length of its second (sink) buffer;
//! 4. the server RDMA WRITEs what it read into the sink buffer and SENDs a go-ahead;
//! 5. the client compares the sink with the start buffer (`-V`).
//!
//! After the last ping the client disconnects. Both sides keep one receive posted, as rping
//! does. Unlike rping, the server checks every ping it reads against rping's pattern, so a
//! run of ours always verifies what it carried.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use roce_hostmem::Access;
use roce_nic::cm::{CmEventKind, ConnParam};
use roce_nic::verbs::{
    CmId, CompletionQueue, Context, QpCap, QpType, QueuePair, RecvWr, SendFlags, SendOp, SendWr,
    VerbsError, Wc, WcOpcode,
};

use crate::memory::Buffer;
use crate::{Limits, ToolError};

/// rping's port when none is given.
pub const DEFAULT_PORT: u16 = 7174;
/// rping's buffer size when none is given.
pub const DEFAULT_SIZE: usize = 64;
/// The smallest buffer rping takes: room for `rdma-ping-2147483647: ` and its terminator.
pub const MIN_SIZE: usize = 26;
/// The most rping allows.
pub const MAX_SIZE: usize = 64 << 10;
/// Bytes of `struct rping_rdma_info`: address (64), rkey (32), length (32), big-endian.
const INFO_LEN: usize = 16;

/// What a run does.
#[derive(Debug, Clone)]
pub struct Options {
    /// The server's address (client), or the address to listen on (server; unspecified: all).
    pub addr: IpAddr,
    pub port: u16,
    /// Bytes of the ping buffer (`-S`).
    pub size: usize,
    /// Pings (`-C`); 0 pings until stopped, as rping does.
    pub count: u64,
    /// Print each ping (`-v`).
    pub verbose: bool,
    /// Compare what came back with what was sent (`-V`; the client's check).
    pub validate: bool,
    pub limits: Limits,
}

impl Options {
    pub fn new(addr: IpAddr) -> Options {
        Options {
            addr,
            port: DEFAULT_PORT,
            size: DEFAULT_SIZE,
            count: 0,
            verbose: false,
            validate: false,
            limits: Limits::default(),
        }
    }

    fn check(&self) -> Result<(), ToolError> {
        if !(MIN_SIZE..=MAX_SIZE).contains(&self.size) {
            return Err(ToolError::Usage(format!(
                "the size must be {MIN_SIZE} to {MAX_SIZE} bytes, as rping's, not {}",
                self.size
            )));
        }
        Ok(())
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub pings: u64,
}

/// The ping rping's client sends as ping `n`: the text, then letters from `start` (A to z,
/// wrapping), the last byte zero.
pub fn ping_data(n: u64, size: usize) -> Vec<u8> {
    let mut data = format!("rdma-ping-{n}: ").into_bytes();
    data.truncate(size);
    let mut c = start_letter(n);
    while data.len() < size {
        data.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    data[size - 1] = 0;
    data
}

/// The letter ping `n`'s run starts with: rping starts at 'A' and moves one letter per ping.
fn start_letter(n: u64) -> u8 {
    b'A' + (n % u64::from(b'z' - b'A' + 1)) as u8
}

/// The text of a NUL-terminated buffer, as rping prints it with `%s`.
fn text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// One side's verbs objects: a CQ, an RC QP, and the buffers (receive and send messages, the
/// RDMA buffer, the client's start buffer).
struct Side {
    cq: CompletionQueue,
    qp: QueuePair,
    mem: Buffer,
    size: usize,
    /// Completions that came before anyone waited for them.
    early: Vec<WcOpcode>,
}

/// Offsets into the side's one buffer.
const RECV_AT: usize = 0;
const SEND_AT: usize = 64;
const RDMA_AT: usize = 128;

impl Side {
    fn new(ctx: &Context, size: usize) -> Result<Side, ToolError> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(16)?;
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_qp(QpType::Rc, &cq, &cq, cap)?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let mem = Buffer::new(&pd, RDMA_AT + 2 * size, access)?;
        let side = Side {
            cq,
            qp,
            mem,
            size,
            early: Vec::new(),
        };
        side.post_recv()?;
        Ok(side)
    }

    fn start_at(&self) -> usize {
        RDMA_AT + self.size
    }

    fn post_recv(&self) -> Result<(), ToolError> {
        self.qp.post_recv(&[RecvWr {
            wr_id: 0,
            sg_list: &[self.mem.sge(RECV_AT, INFO_LEN as u32)],
        }])?;
        Ok(())
    }

    fn post(&self, wr_id: u64, op: SendOp, at: usize, len: usize) -> Result<(), ToolError> {
        self.qp.post_send(&[SendWr {
            wr_id,
            op,
            sg_list: &[self.mem.sge(at, len as u32)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])?;
        Ok(())
    }

    /// SENDs the address, rkey and length of the buffer at `at`.
    fn send_info(&self, at: usize) -> Result<(), ToolError> {
        let mut info = [0u8; INFO_LEN];
        info[..8].copy_from_slice(&self.mem.va(at).to_be_bytes());
        info[8..12].copy_from_slice(&self.mem.rkey().to_be_bytes());
        info[12..].copy_from_slice(&(self.size as u32).to_be_bytes());
        self.mem.write(SEND_AT, &info);
        self.post(1, SendOp::Send, SEND_AT, INFO_LEN)
    }

    /// Waits for one completion of each of `ops` (in any order), within `step`; completions
    /// of other kinds that come meanwhile are kept for a later wait. A receive is posted again
    /// at once.
    fn wait(
        &mut self,
        ops: &[WcOpcode],
        step: Duration,
        what: &'static str,
    ) -> Result<(), ToolError> {
        let mut want = ops.to_vec();
        want.retain(|op| match self.early.iter().position(|e| e == op) {
            Some(at) => {
                self.early.remove(at);
                false
            }
            None => true,
        });
        let deadline = Instant::now() + step;
        let mut wc = [Wc::default()];
        while !want.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ToolError::timeout(what, step));
            }
            if self.cq.try_wait(&mut wc, Some(left))? == 0 {
                continue;
            }
            let op = self.took(wc[0], what)?;
            match want.iter().position(|w| *w == op) {
                Some(at) => {
                    want.remove(at);
                }
                None => self.early.push(op),
            }
        }
        Ok(())
    }

    /// Checks a completion; a receive's buffer is posted again.
    fn took(&self, wc: Wc, what: &'static str) -> Result<WcOpcode, ToolError> {
        if !wc.is_success() {
            return Err(ToolError::Completion {
                what,
                status: wc.status,
            });
        }
        if wc.opcode == WcOpcode::Recv {
            self.post_recv()?;
        }
        Ok(wc.opcode)
    }

    /// The address, rkey and length the peer sent.
    fn received_info(&self) -> (u64, u32, u32) {
        let b = self.mem.read(RECV_AT, INFO_LEN);
        let addr = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
        let rkey = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(b[12..].try_into().expect("4 bytes"));
        (addr, rkey, len)
    }
}

/// What rping asks of a connection: one READ outstanding either way, 7 retries, RNR retries
/// for ever.
fn conn_param() -> ConnParam {
    ConnParam::default()
}

fn cm_error(what: &str, kind: CmEventKind) -> ToolError {
    ToolError::Connect {
        peer: what.to_owned(),
        reason: match kind {
            CmEventKind::Rejected { reason: 8 } => {
                "rejected: nobody listens there (REJ reason 8, invalid service ID)".into()
            }
            CmEventKind::Rejected { reason } => format!("rejected (REJ reason {reason})"),
            CmEventKind::Unreachable => "unreachable: the CM got no answer".into(),
            other => format!("unexpected CM event {other:?}"),
        },
    }
}

/// The next CM event, within `step`.
fn cm_event(ctx: &Context, step: Duration) -> Result<roce_nic::cm::CmEvent, ToolError> {
    ctx.cm_event(Some(step)).map_err(|e| match e {
        VerbsError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            ToolError::timeout("RDMA CM event", step)
        }
        e => e.into(),
    })
}

/// Runs rping's client: connects to `opts.addr`, pings `opts.count` times, disconnects.
pub fn client(ctx: &Context, opts: &Options, out: &mut dyn Write) -> Result<Report, ToolError> {
    opts.check()?;
    let step = opts.limits.step;
    let server = SocketAddr::new(opts.addr, opts.port);
    let retry_until = Instant::now() + opts.limits.connect_retry;
    let (mut side, id) = loop {
        let side = Side::new(ctx, opts.size)?;
        let retry = Instant::now() < retry_until;
        let id = match ctx.cm_connect(&side.qp, server, &conn_param()) {
            Ok(id) => id,
            // The server's address does not answer yet (a peer still booting).
            Err(_) if retry => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let event = cm_event(ctx, step)?;
        match event.kind {
            CmEventKind::Established => break (side, id),
            // Nobody listens yet: as a refused TCP connect, safe to try again.
            CmEventKind::Rejected { reason: 8 } | CmEventKind::Unreachable if retry => {
                std::thread::sleep(Duration::from_millis(200));
            }
            kind => return Err(cm_error(&server.to_string(), kind)),
        }
    };
    let start = side.start_at();
    let mut pings = 0;
    while opts.count == 0 || pings < opts.count {
        let data = ping_data(pings, opts.size);
        side.mem.write(start, &data);
        side.send_info(start)?;
        side.wait(
            &[WcOpcode::Send, WcOpcode::Recv],
            step,
            "go-ahead after the RDMA READ",
        )?;
        side.send_info(RDMA_AT)?;
        side.wait(
            &[WcOpcode::Send, WcOpcode::Recv],
            step,
            "go-ahead after the RDMA WRITE",
        )?;
        let echoed = side.mem.read(RDMA_AT, opts.size);
        if opts.validate && echoed != data {
            return Err(ToolError::Data(format!(
                "ping {pings}: the server wrote back {:?}, not {:?}",
                text(&echoed),
                text(&data)
            )));
        }
        if opts.verbose {
            writeln!(out, "ping data: {}", text(&echoed))?;
        }
        pings += 1;
    }
    id.disconnect()?;
    wait_disconnected(ctx, step)?;
    if opts.validate {
        writeln!(out, "verified: {pings} pings echoed byte for byte")?;
    }
    Ok(Report { pings })
}

fn wait_disconnected(ctx: &Context, step: Duration) -> Result<(), ToolError> {
    loop {
        let event = cm_event(ctx, step)?;
        if event.kind == CmEventKind::Disconnected {
            return Ok(());
        }
    }
}

/// Runs rping's server: takes one connection on `opts.port` and answers pings until the client
/// disconnects (as rping's server, it takes no count).
pub fn server(ctx: &Context, opts: &Options, out: &mut dyn Write) -> Result<Report, ToolError> {
    opts.check()?;
    let step = opts.limits.step;
    let addr = SocketAddr::new(opts.addr, opts.port);
    let _listener = ctx.cm_listen(addr)?;
    let request = loop {
        let event = cm_event(ctx, step)?;
        if event.kind == CmEventKind::ConnectRequest {
            break event;
        }
    };
    let mut side = Side::new(ctx, opts.size)?;
    let id: CmId = ctx.cm_request_id(&request);
    id.accept(&side.qp, &conn_param())?;
    let event = cm_event(ctx, step)?;
    if event.kind != CmEventKind::Established {
        return Err(cm_error(&request.peer.to_string(), event.kind));
    }
    let mut pings = 0;
    loop {
        // The client's start buffer, or its disconnect.
        if !wait_recv_or_disconnect(ctx, &mut side, step)? {
            break;
        }
        let (addr, rkey, len) = side.received_info();
        if len as usize > opts.size {
            return Err(ToolError::Protocol(format!(
                "a {len}-byte buffer for a {}-byte server",
                opts.size
            )));
        }
        let read = SendOp::RdmaRead {
            remote_addr: addr,
            rkey,
        };
        side.post(2, read, RDMA_AT, len as usize)?;
        side.wait(&[WcOpcode::RdmaRead], step, "RDMA READ of the ping")?;
        let ping = side.mem.read(RDMA_AT, len as usize);
        if opts.verbose {
            writeln!(out, "server ping data: {}", text(&ping))?;
        }
        if ping != ping_data(pings, len as usize) {
            return Err(ToolError::Data(format!(
                "ping {pings} read {:?}, not rping's pattern",
                text(&ping)
            )));
        }
        side.post(1, SendOp::Send, SEND_AT, INFO_LEN)?;
        side.wait(
            &[WcOpcode::Send, WcOpcode::Recv],
            step,
            "the client's sink buffer",
        )?;
        let (addr, rkey, _) = side.received_info();
        // rping writes the string and its terminator.
        let len = text(&ping).len() + 1;
        let write = SendOp::RdmaWrite {
            remote_addr: addr,
            rkey,
        };
        side.post(3, write, RDMA_AT, len)?;
        side.wait(&[WcOpcode::RdmaWrite], step, "RDMA WRITE of the echo")?;
        side.post(1, SendOp::Send, SEND_AT, INFO_LEN)?;
        side.wait(&[WcOpcode::Send], step, "SEND of the go-ahead")?;
        pings += 1;
    }
    if opts.validate {
        writeln!(out, "verified: {pings} pings read as rping sends them")?;
    }
    Ok(Report { pings })
}

/// Waits for the next receive (true) or the client's disconnect (false).
fn wait_recv_or_disconnect(
    ctx: &Context,
    side: &mut Side,
    step: Duration,
) -> Result<bool, ToolError> {
    if let Some(at) = side.early.iter().position(|op| *op == WcOpcode::Recv) {
        side.early.remove(at);
        return Ok(true);
    }
    let deadline = Instant::now() + step;
    let mut wc = [Wc::default()];
    while Instant::now() < deadline {
        if side.cq.try_wait(&mut wc, Some(Duration::from_millis(20)))? == 1 {
            // A disconnect flushes the posted receive: that is the end, not a failure.
            if !wc[0].is_success() && disconnected(ctx) {
                return Ok(false);
            }
            match side.took(wc[0], "receive")? {
                WcOpcode::Recv => return Ok(true),
                other => side.early.push(other),
            }
            continue;
        }
        if disconnected(ctx) {
            return Ok(false);
        }
    }
    Err(ToolError::timeout("ping or disconnect", step))
}

/// Whether the CM has said the connection ended.
fn disconnected(ctx: &Context) -> bool {
    ctx.cm_event(Some(Duration::ZERO))
        .is_ok_and(|e| e.kind == CmEventKind::Disconnected)
}

/// Listens on every address when the server is given none.
pub const ANY: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
