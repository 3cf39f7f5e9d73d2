//! The initiator side shared by `roce host post` (one work request) and `roce host connect`
//! (many, typed one a line): a QP and a named buffer on the NIC, its `LID:QPN:PSN:GID` for the
//! server, the wait for Enter while the server connects to it, and each operation with what it
//! prints.

use std::io::{self, BufRead, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::{Access, Region};
use roce_nic::cm::{CmEventKind, ConnParam};
use roce_nic::verbs::{
    CmId, CompletionQueue, Context, MemoryRegion, Mtu, QpCap, QpType, QueuePair, SendFlags, SendOp,
    SendWr, Wc, WcStatus,
};

use super::{completion_line, connect_qp, quoted, random_psn, verbs_failure, Endpoint};
use crate::mem::hexdump::{Hexdump, LINE};
use crate::Failure;

/// What `post` and `connect` both take: the NIC, the server and how to reach it.
#[derive(clap::Args)]
pub struct ConnArgs {
    /// The NIC's name (as given to `roce nic --name`).
    #[arg(long)]
    pub nic: String,
    /// The server's LID:QPN:PSN:GID, as `roce host serve` printed it.
    #[arg(long, value_name = "LID:QPN:PSN:GID")]
    pub peer: Option<String>,
    /// Index of the GID to send from (1 is the NIC's IPv4 address).
    #[arg(long, default_value_t = 1)]
    pub gid_index: u8,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the largest the NIC carries).
    #[arg(short, long)]
    pub mtu: Option<u32>,
    /// Seconds to wait for each completion.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
}

impl ConnArgs {
    /// The server's endpoint, checked before anything is made.
    pub fn peer(&self) -> Result<Endpoint, Failure> {
        match &self.peer {
            Some(line) => line.parse().map_err(Failure::usage),
            None => Err(Failure::usage(
                "give the server's line with --peer LID:QPN:PSN:GID",
            )),
        }
    }

    /// Opens the NIC and makes a client with a buffer of `len` bytes; also returns this QP's
    /// endpoint.
    pub fn open(&self, len: usize) -> Result<(Context, Client, Endpoint), Failure> {
        let ctx = super::open(&self.nic)?;
        let mtu = super::path_mtu(&ctx, self.mtu)?;
        let client = Client::new(&ctx, &self.nic, len, mtu, self.gid_index)?;
        let me = client.endpoint(&ctx)?;
        Ok((ctx, client, me))
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }
}

/// One operation with its operands; `va` is the remote address (unused by SEND).
#[derive(Debug, PartialEq, Eq)]
pub enum Op {
    Write(Vec<u8>),
    Send(Vec<u8>),
    Read(usize),
    FetchAdd(u64),
    CmpSwap(u64, u64),
}

impl Op {
    /// Bytes of local memory the operation needs.
    pub fn local_len(&self) -> usize {
        match self {
            Op::Write(d) | Op::Send(d) => d.len(),
            Op::Read(n) => *n,
            Op::FetchAdd(_) | Op::CmpSwap(..) => 8,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Op::Write(_) => "RDMA WRITE",
            Op::Send(_) => "SEND",
            Op::Read(_) => "RDMA READ",
            Op::FetchAdd(_) => "fetch-and-add",
            Op::CmpSwap(..) => "compare-and-swap",
        }
    }

    /// The work request's operation at `va` with `rkey`.
    fn send_op(&self, va: u64, rkey: u32) -> SendOp {
        match self {
            Op::Write(_) => SendOp::RdmaWrite {
                remote_addr: va,
                rkey,
            },
            Op::Send(_) => SendOp::Send,
            Op::Read(_) => SendOp::RdmaRead {
                remote_addr: va,
                rkey,
            },
            Op::FetchAdd(add) => SendOp::AtomicFetchAndAdd {
                remote_addr: va,
                rkey,
                add: *add,
            },
            Op::CmpSwap(compare, swap) => SendOp::AtomicCmpAndSwp {
                remote_addr: va,
                rkey,
                compare: *compare,
                swap: *swap,
            },
        }
    }
}

/// A QP on the NIC with a registered buffer, not yet connected.
pub struct Client {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
    region: Arc<Region>,
    psn: u32,
    mtu: Mtu,
    gid_index: u8,
    next_wr_id: u64,
}

impl Client {
    /// A QP and a buffer of `len` bytes on `ctx` (the NIC named `nic`).
    pub fn new(
        ctx: &Context,
        nic: &str,
        len: usize,
        mtu: Mtu,
        gid_index: u8,
    ) -> Result<Client, Failure> {
        // Host memory must be named to be registered with a NIC process. Once the NIC has
        // mapped it the name is removed, so nothing is left in /dev/shm however the command
        // ends.
        let name = format!("{nic}-post-{}", std::process::id());
        let region =
            Arc::new(Region::create(&name, len.max(8)).map_err(|e| Failure::new(e.to_string()))?);
        let pd = ctx.alloc_pd().map_err(verbs_failure)?;
        let cq = ctx.create_cq(4).map_err(verbs_failure)?;
        let qp = pd
            .create_qp(QpType::Rc, &cq, &cq, QpCap::default())
            .map_err(verbs_failure)?;
        let registered = pd.register(&region, 0, region.len(), Access::LOCAL_WRITE);
        let _ = Region::remove(&name);
        let mr = registered.map_err(verbs_failure)?;
        Ok(Client {
            qp,
            cq,
            mr,
            region,
            psn: random_psn(),
            mtu,
            gid_index,
            next_wr_id: 1,
        })
    }

    /// Bytes the buffer holds: the largest READ, WRITE or SEND.
    pub fn capacity(&self) -> usize {
        self.region.len()
    }

    pub fn endpoint(&self, ctx: &Context) -> Result<Endpoint, Failure> {
        let gid = ctx.gid(self.gid_index).ok_or_else(|| {
            Failure::usage(format!(
                "the NIC {} has no GID {}",
                ctx.device().name,
                self.gid_index
            ))
        })?;
        Ok(Endpoint {
            lid: 0,
            qpn: self.qp.qp_num(),
            psn: self.psn,
            gid,
        })
    }

    /// Prints this QP's line for the server and waits for the first line of standard input
    /// (Enter, once the server has connected to it); returns that line, which may already be
    /// a command. `None` at the end of standard input.
    pub fn introduce(&self, me: &Endpoint) -> Option<String> {
        say!("local {me}");
        tell!("give the line above to the server, then press Enter");
        let mut line = String::new();
        match io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    }

    pub fn connect(&self, peer: &Endpoint) -> Result<(), Failure> {
        connect_qp(&self.qp, peer, self.psn, self.mtu, self.gid_index).map_err(verbs_failure)
    }

    /// Connects the QP through the RDMA CM to a `roce host listen` at `server`; returns the
    /// connection (disconnected when dropped) and the served region the REP announced.
    pub fn connect_cm(
        &self,
        ctx: &Context,
        server: SocketAddr,
        timeout: Duration,
    ) -> Result<(CmId, Served), Failure> {
        let id = ctx
            .cm_connect(&self.qp, server, &ConnParam::default())
            .map_err(verbs_failure)?;
        let event = ctx.cm_event(Some(timeout)).map_err(verbs_failure)?;
        match event.kind {
            CmEventKind::Established => {}
            CmEventKind::Rejected { reason: 8 } => {
                return Err(Failure::new(format!(
                    "nobody listens on {server} (its CM answered REJ, invalid service ID)"
                )))
            }
            kind => {
                return Err(Failure::new(format!(
                    "connecting to {server}: the RDMA CM event {kind:?}"
                )))
            }
        }
        let served = Served::decode(&event.private_data).ok_or_else(|| {
            Failure::new(format!(
                "{server} accepted, but its REP does not describe a region (is it roce host \
                 listen?)"
            ))
        })?;
        Ok((id, served))
    }

    /// Posts `op` at `va` with `rkey` and waits up to `timeout` for its completion; prints the
    /// completion and what came back (the bytes of a READ, the value before an atomic).
    pub fn run(
        &mut self,
        op: &Op,
        va: u64,
        rkey: u32,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let len = op.local_len();
        if len > self.capacity() {
            return Err(ClientError::Refused(Failure::usage(format!(
                "{} bytes do not fit the {}-byte buffer (--buffer)",
                len,
                self.capacity()
            ))));
        }
        if let Op::Write(d) | Op::Send(d) = op {
            self.region
                .write(0, d)
                .map_err(|e| ClientError::Refused(Failure::new(e.to_string())))?;
        }
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let sge = self.mr.sge(0, len as u32);
        self.qp
            .post_send(&[SendWr {
                wr_id,
                op: op.send_op(va, rkey),
                sg_list: &[sge],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .map_err(|e| ClientError::Broken(verbs_failure(e)))?;
        let mut wc = [Wc::default()];
        let n = self
            .cq
            .try_wait(&mut wc, Some(timeout))
            .map_err(|e| ClientError::Broken(verbs_failure(e)))?;
        if n == 0 {
            return Err(ClientError::Broken(Failure::new(format!(
                "the {} did not complete within {} s",
                op.name(),
                timeout.as_secs_f64()
            ))));
        }
        say!("{}", completion_line(&wc[0], len as u64));
        if wc[0].status != WcStatus::Success {
            return Err(ClientError::Failed {
                op: op.name(),
                status: wc[0].status,
            });
        }
        let mut back = vec![0; len];
        self.region
            .read(0, &mut back)
            .map_err(|e| ClientError::Broken(Failure::new(e.to_string())))?;
        match op {
            Op::Read(_) => {
                let mut out = io::stdout().lock();
                let mut hexdump = Hexdump::default();
                for (i, line) in back.chunks(LINE).enumerate() {
                    let _ = hexdump.line(&mut out, va + (i * LINE) as u64, line);
                }
                let _ = writeln!(out, "{}", quoted(&back));
            }
            Op::FetchAdd(_) | Op::CmpSwap(..) => {
                let before = u64::from_ne_bytes(back[..8].try_into().unwrap_or_default());
                say!("original value {before} ({before:#x})");
            }
            Op::Write(_) | Op::Send(_) => {}
        }
        Ok(())
    }
}

/// The region a `roce host listen` serves, as its REP's private data announces it: rkey (32
/// bits), VA and length (64 bits each), big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub rkey: u32,
    pub va: u64,
    pub len: u64,
}

impl Served {
    pub const LEN: usize = 20;

    pub fn encode(&self) -> [u8; Served::LEN] {
        let mut out = [0u8; Served::LEN];
        out[..4].copy_from_slice(&self.rkey.to_be_bytes());
        out[4..12].copy_from_slice(&self.va.to_be_bytes());
        out[12..].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<Served> {
        let bytes = bytes.get(..Served::LEN)?;
        Some(Served {
            rkey: u32::from_be_bytes(bytes[..4].try_into().ok()?),
            va: u64::from_be_bytes(bytes[4..12].try_into().ok()?),
            len: u64::from_be_bytes(bytes[12..].try_into().ok()?),
        })
        .filter(|s| s.len > 0)
    }
}

/// Why an operation did not happen.
pub enum ClientError {
    /// Refused before it was posted; the connection is as it was.
    Refused(Failure),
    /// Completed with an error: the QP is now in the error state.
    Failed { op: &'static str, status: WcStatus },
    /// The NIC or the wait failed.
    Broken(Failure),
}
