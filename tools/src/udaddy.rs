//! librdmacm's `udaddy` with one connection: UD QPs found through the RDMA CM's UDP port space
//! (SIDR) rather than exchanged. The server serves port 7174; the client resolves it (its QP
//! and Q_Key come in the SIDR_REP), then SENDs `count` datagrams of `size` bytes with its QP
//! number as immediate data; the server, once all have arrived, answers with as many to the
//! QP the first one named. Like udaddy's, the server's answers are the first `size` bytes of
//! its receive buffer as the last datagram left it: the 40-byte GRH area, then the datagram.
//!
//! The real tool checks nothing. Ours checks that every datagram arrived whole with the
//! sender's QP number as immediate data; the client, that each answer is its own datagram
//! back behind a GRH area holding the IP header of its datagram to the server — so against a
//! real server, the server's receive, GRH and SEND are checked end to end.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use roce_hostmem::Access;
use roce_nic::cm::{CmEvent, CmEventKind, ConnParam};
use roce_nic::verbs::{
    AddressHandle, AddressVector, CompletionQueue, Context, Gid, ProtectionDomain, QpCap, QpType,
    QueuePair, RecvWr, SendFlags, SendOp, SendWr, UdDest, VerbsError, Wc, WcOpcode,
};

use crate::memory::Buffer;
use crate::{Limits, ToolError};

/// udaddy's port (fixed in the real tool, whose `-p` is the port space).
pub const DEFAULT_PORT: u16 = 7174;
/// udaddy's message count and size.
pub const DEFAULT_COUNT: u32 = 10;
pub const DEFAULT_SIZE: u32 = 100;
/// Bytes in front of every UD receive for the GRH.
const GRH_LEN: usize = 40;

#[derive(Debug, Clone)]
pub struct Options {
    /// The server's address (client), or the address to serve on (server; unspecified: all).
    pub addr: IpAddr,
    pub port: u16,
    /// Datagrams each way (`-C`).
    pub count: u32,
    /// Bytes per datagram (`-S`), at most the path MTU.
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

/// What a datagram of ours holds at each byte.
fn pattern(at: usize) -> u8 {
    (at as u8).wrapping_mul(7).wrapping_add(0x5a)
}

/// One side's UD QP, with `count` receives posted, each in a slot of its own.
struct Node {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    /// `count` receive slots of GRH + `size` bytes, then the send buffer.
    mem: Buffer,
    slot: usize,
    count: usize,
}

impl Node {
    fn new(ctx: &Context, opts: &Options) -> Result<Node, ToolError> {
        let mtu = ctx.device().max_mtu.bytes() as usize;
        if opts.size as usize > mtu {
            return Err(ToolError::Usage(format!(
                "a datagram of {} bytes is larger than the path MTU, {mtu}",
                opts.size
            )));
        }
        let count = opts.count.max(1) as usize;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(2 * count as u32)?;
        let cap = QpCap {
            max_send_wr: count as u32,
            max_recv_wr: count as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_qp(QpType::Ud, &cq, &cq, cap)?;
        let slot = GRH_LEN + opts.size as usize;
        let mem = Buffer::new(&pd, slot * (count + 1), Access::LOCAL_WRITE)?;
        let node = Node {
            pd,
            cq,
            qp,
            mem,
            slot,
            count,
        };
        // The receives go on the QP once the CM has readied it (INIT at least): see `ready`.
        Ok(node)
    }

    /// The QP to INIT with the port space's Q_Key (the CM takes it on to RTS) and every
    /// receive posted, before anything can arrive.
    fn ready(&self, opts: &Options) -> Result<(), ToolError> {
        self.qp
            .modify(&roce_nic::verbs::QpAttr::init_ud(roce_nic::cm::UDP_QKEY))?;
        for n in 0..opts.count as usize {
            self.qp.post_recv(&[RecvWr {
                wr_id: n as u64,
                sg_list: &[self.mem.sge(n * self.slot, self.slot as u32)],
            }])?;
        }
        Ok(())
    }

    fn send_area(&self) -> usize {
        self.slot * self.count
    }

    /// Posts `count` SENDs with immediate data (our QPN) of the send area's first `size`
    /// bytes to `dest`.
    fn post_sends(&self, opts: &Options, dest: UdDest) -> Result<(), ToolError> {
        for n in 0..opts.count {
            self.qp.post_send(&[SendWr {
                wr_id: u64::from(n),
                op: SendOp::SendWithImm {
                    imm: self.qp.qp_num(),
                },
                sg_list: &[self.mem.sge(self.send_area(), opts.size)],
                flags: SendFlags::SIGNALED,
                ud: Some(dest),
            }])?;
        }
        Ok(())
    }

    /// Waits for `count` completions of `op`, each a success; returns them.
    fn complete(
        &self,
        op: WcOpcode,
        opts: &Options,
        what: &'static str,
    ) -> Result<Vec<Wc>, ToolError> {
        let step = opts.limits.step;
        let deadline = Instant::now() + step;
        let mut done = Vec::new();
        let mut wc = [Wc::default()];
        while done.len() < opts.count as usize {
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
            if wc.opcode == op {
                done.push(wc);
            }
        }
        Ok(done)
    }

    /// Checks the datagrams received: whole, from one QP that named itself in the
    /// immediate data. Returns that QP.
    fn check_received(&self, wcs: &[Wc], opts: &Options) -> Result<u32, ToolError> {
        let from = wcs[0].src_qp;
        for (n, wc) in wcs.iter().enumerate() {
            if wc.byte_len as usize != self.slot {
                return Err(ToolError::Data(format!(
                    "datagram {n} has {} bytes where udaddy sends {} (plus the 40-byte GRH)",
                    wc.byte_len, opts.size
                )));
            }
            if wc.src_qp != from || wc.imm() != Some(from) {
                return Err(ToolError::Data(format!(
                    "datagram {n} from QP {:#x} with immediate data {:?}, where udaddy names its \
                     own QP ({from:#x}) in every one",
                    wc.src_qp,
                    wc.imm()
                )));
            }
        }
        Ok(from)
    }

    fn ah_to(&self, ctx: &Context, peer: IpAddr) -> Result<AddressHandle, ToolError> {
        let gid = Gid::from_ip(peer);
        let sgid_index = (0..=u8::MAX)
            .find(|i| {
                ctx.gid(*i)
                    .is_some_and(|g| g.ip().is_ipv4() == peer.is_ipv4() && !is_link_local(g))
            })
            .ok_or_else(|| {
                ToolError::Usage(format!("the NIC has no address of {peer}'s family"))
            })?;
        Ok(self.pd.create_ah(AddressVector::to(gid, sgid_index))?)
    }
}

fn is_link_local(gid: Gid) -> bool {
    gid.0[0] == 0xfe && gid.0[1] & 0xc0 == 0x80
}

fn cm_event(ctx: &Context, opts: &Options) -> Result<CmEvent, ToolError> {
    let step = opts.limits.step;
    ctx.cm_event(Some(step)).map_err(|e| match e {
        VerbsError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            ToolError::timeout("RDMA CM event", step)
        }
        e => e.into(),
    })
}

/// The server: serves one client; receives, then answers.
pub fn server(ctx: &Context, opts: &Options, out: &mut dyn Write) -> Result<(), ToolError> {
    writeln!(out, "udaddy: starting server")?;
    let _listener = ctx.cm_listen_udp(SocketAddr::new(opts.addr, opts.port))?;
    let request = loop {
        let event = cm_event(ctx, opts)?;
        if event.kind == CmEventKind::ConnectRequest {
            break event;
        }
    };
    let node = Node::new(ctx, opts)?;
    node.ready(opts)?;
    let id = ctx.cm_request_id(&request);
    id.accept(&node.qp, &ConnParam::default())?;
    if opts.count > 0 {
        writeln!(out, "receiving data transfers")?;
        let received = node.complete(WcOpcode::Recv, opts, "datagram")?;
        let client_qp = node.check_received(&received, opts)?;
        // As udaddy: the answers are what the last receive left at the start of the buffer.
        let last = received.last().map_or(0, |wc| wc.wr_id as usize);
        let left = node.mem.read(last * node.slot, opts.size as usize);
        node.mem.write(node.send_area(), &left);
        writeln!(out, "sending replies")?;
        let ah = node.ah_to(ctx, request.peer.ip())?;
        node.post_sends(
            opts,
            UdDest {
                ah: ah.handle(),
                remote_qpn: client_qp,
                remote_qkey: roce_nic::cm::UDP_QKEY,
            },
        )?;
        node.complete(WcOpcode::Send, opts, "SEND")?;
        writeln!(out, "data transfers complete")?;
    }
    writeln!(out, "test complete")?;
    writeln!(
        out,
        "verified: {} datagrams of {} bytes received whole, each naming its sender's QP, and as many answered",
        opts.count, opts.size
    )?;
    Ok(())
}

/// The client: resolves the server's service, sends, and checks the answers.
pub fn client(ctx: &Context, opts: &Options, out: &mut dyn Write) -> Result<(), ToolError> {
    writeln!(out, "udaddy: starting client")?;
    writeln!(out, "udaddy: connecting")?;
    let server = SocketAddr::new(opts.addr, opts.port);
    let retry_until = Instant::now() + opts.limits.connect_retry;
    let (node, resolved) = loop {
        let node = Node::new(ctx, opts)?;
        node.ready(opts)?;
        let retry = Instant::now() < retry_until;
        let id = ctx.cm_connect(&node.qp, server, &ConnParam::default())?;
        let event = cm_event(ctx, opts)?;
        drop(id);
        match event.kind {
            CmEventKind::Established => break (node, event),
            // Nobody serves the port yet ("service ID not supported").
            CmEventKind::Unreachable if retry => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            kind => {
                return Err(ToolError::Connect {
                    peer: server.to_string(),
                    reason: format!("the RDMA CM event {kind:?}"),
                })
            }
        }
    };
    if opts.count == 0 {
        writeln!(out, "test complete")?;
        return Ok(());
    }
    writeln!(out, "initiating data transfers")?;
    let data: Vec<u8> = (0..opts.size as usize).map(pattern).collect();
    node.mem.write(node.send_area(), &data);
    let ah = node.ah_to(ctx, server.ip())?;
    node.post_sends(
        opts,
        UdDest {
            ah: ah.handle(),
            remote_qpn: resolved.peer_qpn,
            remote_qkey: resolved.q_key,
        },
    )?;
    node.complete(WcOpcode::Send, opts, "SEND")?;
    writeln!(out, "receiving data transfers")?;
    let received = node.complete(WcOpcode::Recv, opts, "answer")?;
    let from = node.check_received(&received, opts)?;
    if from != resolved.peer_qpn {
        return Err(ToolError::Data(format!(
            "answers from QP {from:#x}, not the {:#x} the SIDR_REP named",
            resolved.peer_qpn
        )));
    }
    for (n, wc) in received.iter().enumerate() {
        let answer = node
            .mem
            .read(wc.wr_id as usize * node.slot + GRH_LEN, opts.size as usize);
        check_answer(&answer, &data, server.ip(), n)?;
    }
    writeln!(out, "data transfers complete")?;
    writeln!(out, "test complete")?;
    writeln!(
        out,
        "verified: resolved QP {:#x} Q_Key {:#x}; {} datagrams of {} bytes sent, and {} answers from that QP, each our datagram back behind the GRH area of our datagram to {}",
        resolved.peer_qpn, resolved.q_key, opts.count, opts.size, opts.count, server.ip()
    )?;
    Ok(())
}

/// An answer is what udaddy's server had at the start of its receive buffer: the GRH area of
/// our last datagram (for IPv4, the IP header in its last 20 bytes, from us to the server),
/// then our datagram, cut to `size` bytes.
fn check_answer(answer: &[u8], data: &[u8], server: IpAddr, n: usize) -> Result<(), ToolError> {
    let size = data.len();
    let bad = |why: String| Err(ToolError::Data(format!("answer {n}: {why}")));
    if size > GRH_LEN {
        let body = &answer[GRH_LEN..];
        if body != &data[..size - GRH_LEN] {
            return bad("not our datagram back behind the GRH area".into());
        }
    }
    if let IpAddr::V4(server) = server {
        if size >= GRH_LEN {
            let ip = &answer[20..40];
            if ip[0] >> 4 != 4 || ip[16..20] != server.octets() {
                return bad(format!(
                    "the GRH area holds no IPv4 header to the server ({server}): {ip:02x?}"
                ));
            }
        }
    }
    Ok(())
}
