//! `roce host listen PORT`: the target side, reached through the RDMA CM rather than by copying
//! a line between terminals. It registers a region and listens on an RDMA CM port; each connect
//! request gets a QP of its own (receives posted) and is accepted with a REP whose private data
//! names the region — rkey, VA and length — so that `roce host connect IP:PORT` needs nothing
//! else. WRITEs, READs and atomics need no code here; SENDs land at the start of the region and
//! their completions are printed, as are the connections and disconnections. Ctrl-C ends it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::parse_size;
use roce_nic::cm::{CmEvent, CmEventKind, ConnParam};
use roce_nic::verbs::{
    CmId, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpCap, QpType, QueuePair,
    RecvWr, Sge, VerbsError, Wc, WcOpcode, WcStatus,
};

use super::client::Served;
use super::serve::{region, remote_access};
use super::{completion_line, quoted, verbs_failure};
use crate::signals::Shutdown;
use crate::Failure;

/// Receives kept posted on each connection's QP for incoming SENDs.
const RECEIVES: u32 = 16;
/// How long one wait for a CM event lasts before completions and Ctrl-C are looked at.
const TICK: Duration = Duration::from_millis(50);
/// Bytes of a received SEND shown in its completion line.
const SHOWN: usize = 64;

pub const EXAMPLES: &str = "\
Examples:
  roce host listen 7000 --nic nic1 --region buf --size 1M
then, at another terminal (10.0.0.2 being nic1's address):
  roce host connect 10.0.0.2:7000 --nic nic0
and type operations there (write 0 hello, read 0 5, fetch-add 8 1, send hi). The REP carries
the region's rkey, VA and length; the region stays readable from outside: roce mem dump buf.";

#[derive(clap::Args)]
pub struct Args {
    /// The RDMA CM port to listen on (TCP port space, as rping's or ucmatose's).
    port: u16,
    /// The NIC's name (as given to `roce nic --name`).
    #[arg(long)]
    nic: String,
    /// The region to serve; created with --size if it does not exist.
    #[arg(long)]
    region: String,
    /// Size of the region to create (K, M, G suffixes); rounded up to whole pages.
    #[arg(long)]
    size: Option<String>,
    /// The address to listen on (default: every address of the NIC).
    #[arg(long, value_name = "IP")]
    bind: Option<IpAddr>,
}

/// One accepted connection.
struct Connection {
    /// Kept so that the connection lives; dropping it disconnects.
    _id: CmId,
    qp: QueuePair,
    peer: SocketAddr,
}

struct Listener {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    region: Arc<roce_hostmem::Region>,
    connections: HashMap<u32, Connection>,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let shutdown = Shutdown::block();
    let size = args
        .size
        .as_deref()
        .map(|text| parse_size(text).map_err(|e| Failure::usage(format!("--size {text}: {e}"))))
        .transpose()?;
    if args.port == 0 {
        return Err(Failure::usage("the port must be 1 to 65535"));
    }
    let ctx = super::open(&args.nic)?;
    let region = Arc::new(region(&args.region, size)?);
    let pd = ctx.alloc_pd().map_err(verbs_failure)?;
    let cq = ctx.create_cq(1024).map_err(verbs_failure)?;
    let mr = pd
        .register(&region, 0, region.len(), remote_access())
        .map_err(verbs_failure)?;
    let addr = SocketAddr::new(
        args.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        args.port,
    );
    let _listening = ctx.cm_listen(addr).map_err(verbs_failure)?;
    say!("listening on {addr} (RDMA CM, TCP port space)");
    say!(
        "memory {} rkey={:#010x} va={:#x} len={}",
        args.region,
        mr.rkey,
        mr.va,
        mr.len
    );
    tell!(
        "connect with: roce host connect IP:{} --nic NIC (this is process {})",
        args.port,
        std::process::id()
    );
    let mut listener = Listener {
        ctx,
        pd,
        cq,
        mr,
        region,
        connections: HashMap::new(),
    };
    let mut wcs = [Wc::default(); 16];
    while shutdown.within(Duration::ZERO).is_none() {
        match listener.ctx.cm_event(Some(TICK)) {
            Ok(event) => listener.event(event)?,
            Err(VerbsError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(verbs_failure(e)),
        }
        let n = listener
            .cq
            .try_wait(&mut wcs, Some(Duration::ZERO))
            .map_err(verbs_failure)?;
        for wc in &wcs[..n] {
            listener.completed(wc)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

impl Listener {
    fn event(&mut self, event: CmEvent) -> Result<(), Failure> {
        match event.kind {
            CmEventKind::ConnectRequest => {
                if let Err(e) = self.accept(&event) {
                    say!("refused {}: {e}", event.peer);
                }
            }
            CmEventKind::Established => {
                if let Some(c) = self.connections.get(&event.id) {
                    say!(
                        "connected: {} (QP {:#x}, the peer's {:#x})",
                        c.peer,
                        c.qp.qp_num(),
                        event.peer_qpn
                    );
                }
            }
            CmEventKind::Disconnected => {
                if let Some(c) = self.connections.remove(&event.id) {
                    say!("disconnected: {}", c.peer);
                }
            }
            kind => {
                if let Some(c) = self.connections.remove(&event.id) {
                    say!("lost {}: the RDMA CM event {kind:?}", c.peer);
                }
            }
        }
        Ok(())
    }

    /// A QP of its own for the request, its receives posted, and the REP naming the region.
    fn accept(&mut self, request: &CmEvent) -> Result<(), Failure> {
        let id = self.ctx.cm_request_id(request);
        let cap = QpCap {
            max_recv_wr: RECEIVES,
            ..QpCap::default()
        };
        let qp = self
            .pd
            .create_qp(QpType::Rc, &self.cq, &self.cq, cap)
            .map_err(verbs_failure)?;
        qp.modify(&roce_nic::verbs::QpAttr::init(remote_access()))
            .map_err(verbs_failure)?;
        self.post_receives(&qp, RECEIVES)?;
        let served = Served {
            rkey: self.mr.rkey,
            va: self.mr.va,
            len: self.mr.len,
        };
        let param = ConnParam {
            private_data: served.encode().to_vec(),
            ..ConnParam::default()
        };
        id.accept(&qp, &param).map_err(verbs_failure)?;
        self.connections.insert(
            request.id,
            Connection {
                _id: id,
                qp,
                peer: request.peer,
            },
        );
        Ok(())
    }

    /// Receives for the whole region from its start.
    fn post_receives(&self, qp: &QueuePair, n: u32) -> Result<(), Failure> {
        let sge = [Sge {
            addr: self.mr.va,
            length: self.mr.len.min(u64::from(u32::MAX)) as u32,
            lkey: self.mr.lkey,
        }];
        for _ in 0..n {
            qp.post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &sge,
            }])
            .map_err(verbs_failure)?;
        }
        Ok(())
    }

    fn completed(&self, wc: &Wc) -> Result<(), Failure> {
        // A connection that ends flushes its posted receives: its disconnect line says so.
        if wc.status == WcStatus::WrFlushErr {
            return Ok(());
        }
        let mut line = completion_line(wc, u64::from(wc.byte_len));
        let received = wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv;
        if received {
            let mut head = vec![0; (wc.byte_len as usize).min(SHOWN)];
            let _ = self.region.read(0, &mut head);
            line = format!("{line} {}", quoted(&head));
        }
        say!("{line}");
        if received {
            if let Some(c) = self
                .connections
                .values()
                .find(|c| c.qp.qp_num() == wc.qp_num)
            {
                self.post_receives(&c.qp, 1)?;
            }
        }
        Ok(())
    }
}
