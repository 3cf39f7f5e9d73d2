//! The target program: the host whose memory the initiator uses.
//!
//! It does what a verbs program on the passive side does — registers memory, makes a QP,
//! shares its keys, connects — and the little its scenario asks of it: the `read` target writes
//! the message to be read, the `atomic` target sets its counter, the `send` target posts a
//! receive when told, the `imm` target sleeps until a completion wakes it. Everything else
//! happens without it. By default it is a process of its own (`roce demo-target`, see
//! [`run_process`]), so that the demo can freeze it with SIGSTOP; in the in-process demo it is a
//! thread ([`spawn_thread`]).

pub mod protocol;

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use roce_hostmem::{Region, VaBase};
use roce_nic::verbs::{
    AddressVector, CompletionQueue, Context, Gid, MemoryRegion, QpAttr, QpCap, QpType, QueuePair,
    RecvWr, Sge, VerbsError, Wc, WcOpcode, WcStatus,
};

use crate::events::since_epoch;
use crate::plan::{self, Plan};
use crate::tcp_vs_rdma::stream;
use crate::{DemoError, Scenario};
pub use protocol::{FromTarget, Shared, ToTarget};

/// The GID index both hosts send from: 1, the NIC's IPv4 address.
pub const GID_INDEX: u8 = 1;

/// The target's verbs objects, and for `tcp-vs-rdma` its TCP socket.
struct Target {
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
    region: Arc<Region>,
    plan: Plan,
    psn: u32,
    gid: Gid,
    listener: Option<TcpListener>,
    stream: Option<TcpStream>,
}

/// A program the demo drives with commands: the target of the two-host scenarios, or a host
/// of the allreduce ring.
pub(crate) trait Program {
    /// What it shares once it is ready.
    fn shared(&self) -> Result<Shared, DemoError>;

    /// Puts in its memory what it needs there. Done after `Ready`, once the demo has mapped
    /// the region and removed its name: writing a gigabyte takes a while, and a demo killed
    /// meanwhile must leave nothing in /dev/shm. The demo's next command is read only after
    /// this.
    fn prepare(&mut self) -> Result<(), DemoError> {
        Ok(())
    }

    /// Carries out one command and says how it went.
    fn handle(&mut self, command: ToTarget) -> Result<FromTarget, DemoError>;
}

fn verbs(what: &str) -> impl Fn(VerbsError) -> DemoError + '_ {
    move |e| DemoError::because(what, e)
}

/// A starting PSN that differs from run to run, as `ibv_rc_pingpong` picks one.
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    (RandomState::new().hash_one(since_epoch()) & 0xff_ffff) as u32
}

impl Target {
    /// Registers `region` (at its address in this process, as a verbs program registers its
    /// buffer) and makes a QP; sets up what the scenario needs in its memory.
    fn set_up(ctx: &Context, region: Arc<Region>, plan: &Plan) -> Result<Target, DemoError> {
        let pd = ctx
            .alloc_pd()
            .map_err(verbs("cannot allocate a protection domain"))?;
        let cq = ctx
            .create_cq(16)
            .map_err(verbs("cannot create a completion queue"))?;
        let cap = QpCap {
            max_recv_wr: 4,
            ..QpCap::default()
        };
        let qp = pd
            .create_qp(QpType::Rc, &cq, &cq, cap)
            .map_err(verbs("cannot create a queue pair"))?;
        let va = VaBase::At(region.as_ptr() as u64);
        let mr = pd
            .register_at(&region, 0, region.len(), plan.access, va)
            .map_err(verbs("cannot register the target's memory"))?;
        let gid = ctx
            .gid(GID_INDEX)
            .ok_or_else(|| DemoError::failed("the target's NIC has no IPv4 GID"))?;
        Ok(Target {
            cq,
            qp,
            mr,
            region,
            plan: plan.clone(),
            psn: random_psn(),
            gid,
            listener: None,
            stream: None,
        })
    }
}

/// Writes zeros over all of `region`, so that every page of it is in memory.
pub(crate) fn touch(region: &Region) -> Result<(), DemoError> {
    let zeros = vec![0u8; (1 << 20).min(region.len())];
    let mut at = 0;
    while at < region.len() {
        let n = zeros.len().min(region.len() - at);
        region
            .write(at, &zeros[..n])
            .map_err(|e| DemoError::because("cannot prepare the memory", e))?;
        at += n;
    }
    Ok(())
}

impl Program for Target {
    /// Puts in memory what the scenario needs there: the bytes to READ, the counter; for
    /// tcp-vs-rdma every page in place before anything is measured (a TCP receiver's buffer is
    /// ready before the data comes, and the NIC's copy must not be told apart by page faults).
    fn prepare(&mut self) -> Result<(), DemoError> {
        let plan = &self.plan;
        match plan.scenario {
            Scenario::Read => plan.payload.fill(&self.region, plan.offset as usize),
            Scenario::Atomic => self
                .region
                .write(
                    plan::COUNTER_OFFSET as usize,
                    &plan::COUNTER_START.to_ne_bytes(),
                )
                .map_err(|e| DemoError::because("cannot set the counter", e)),
            Scenario::TcpVsRdma => touch(&self.region),
            _ => Ok(()),
        }
    }

    fn shared(&self) -> Result<Shared, DemoError> {
        let gid = self.gid;
        Ok(Shared {
            pid: std::process::id(),
            tid: rustix::thread::gettid().as_raw_nonzero().get(),
            qpn: self.qp.qp_num(),
            psn: self.psn,
            gid: gid.to_hex(),
            rkey: self.mr.rkey,
            lkey: self.mr.lkey,
            va: self.mr.va,
            len: self.mr.len,
            access: self.mr.access.bits(),
            send_qp: None,
        })
    }

    fn handle(&mut self, command: ToTarget) -> Result<FromTarget, DemoError> {
        match command {
            ToTarget::Connect { qpn, psn, gid } => {
                let gid = Gid::parse(&gid)
                    .ok_or_else(|| DemoError::failed(format!("{gid:?} is not a GID")))?;
                self.connect(qpn, psn, gid)
                    .map_err(verbs("cannot connect the target's queue pair"))?;
                Ok(FromTarget::Connected)
            }
            ToTarget::PostReceive => {
                let sge = self.receive_buffer();
                self.qp
                    .post_recv(&[RecvWr {
                        wr_id: 1,
                        sg_list: &[sge],
                    }])
                    .map_err(verbs("cannot post a receive"))?;
                Ok(FromTarget::ReceivePosted {
                    addr: sge.addr,
                    length: sge.length,
                })
            }
            ToTarget::AwaitCompletion { timeout_ms } => self.await_completion(timeout_ms),
            ToTarget::Look { offset, len } => Ok(FromTarget::Found {
                offset,
                bytes: self.look(offset, len as usize)?,
            }),
            ToTarget::Listen => {
                let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .map_err(|e| DemoError::because("cannot listen on loopback", e))?;
                let port = listener
                    .local_addr()
                    .map_err(|e| DemoError::because("cannot listen on loopback", e))?
                    .port();
                self.listener = Some(listener);
                Ok(FromTarget::Listening { port })
            }
            ToTarget::Accept { timeout_ms } => {
                let listener = self
                    .listener
                    .as_ref()
                    .ok_or_else(|| DemoError::failed("told to accept before listening"))?;
                self.stream = Some(accept(listener, Duration::from_millis(timeout_ms))?);
                Ok(FromTarget::Accepted)
            }
            ToTarget::ReceiveTcp {
                offset,
                len,
                timeout_ms,
            } => {
                let stream = self
                    .stream
                    .as_ref()
                    .ok_or_else(|| DemoError::failed("told to receive before a connection"))?;
                let got = stream::receive_into(
                    stream,
                    &self.region,
                    offset as usize,
                    len as usize,
                    Duration::from_millis(timeout_ms),
                )
                .map_err(|e| DemoError::because("cannot receive over TCP", e))?;
                Ok(FromTarget::TcpReceived {
                    first_at_us: got.first_at.as_micros() as u64,
                    last_at_us: got.last_at.as_micros() as u64,
                    reads: got.reads,
                })
            }
            ToTarget::JoinRing { .. } | ToTarget::AllReduce { .. } => {
                Err(DemoError::failed("the target of two hosts is in no ring"))
            }
        }
    }
}

/// The one connection to `listener`, waiting at most `limit`.
fn accept(listener: &TcpListener, limit: Duration) -> Result<TcpStream, DemoError> {
    let mut fds = [PollFd::new(listener, PollFlags::IN)];
    let timeout = Timespec::try_from(limit).unwrap_or_default();
    let ready = poll(&mut fds, Some(&timeout))
        .map_err(|e| DemoError::because("cannot wait for the sender", e))?;
    if ready == 0 {
        return Err(DemoError::failed(format!(
            "the sender did not connect within {} ms",
            limit.as_millis()
        )));
    }
    let (stream, _) = listener
        .accept()
        .map_err(|e| DemoError::because("cannot accept the sender's connection", e))?;
    Ok(stream)
}

impl Target {
    fn connect(&self, qpn: u32, psn: u32, gid: Gid) -> Result<(), VerbsError> {
        self.qp.modify(&QpAttr::init(self.plan.access))?;
        let mut rtr = QpAttr::rtr(AddressVector::to(gid, GID_INDEX), qpn, psn, self.plan.mtu);
        rtr.min_rnr_timer = Some(self.plan.rnr_timer);
        self.qp.modify(&rtr)?;
        self.qp.modify(&QpAttr::rts(self.psn))
    }

    /// The rest of the region from the scenario's offset: where a SEND lands.
    fn receive_buffer(&self) -> Sge {
        let length = (self.region.len() as u64 - self.plan.offset).min(u64::from(u32::MAX));
        Sge {
            addr: self.mr.va + self.plan.offset,
            length: length as u32,
            lkey: self.mr.lkey,
        }
    }

    fn look(&self, offset: u64, len: usize) -> Result<Vec<u8>, DemoError> {
        let end = (offset as usize).saturating_add(len).min(self.region.len());
        let mut bytes = vec![0; end.saturating_sub(offset as usize)];
        self.region
            .read(offset as usize, &mut bytes)
            .map_err(|e| DemoError::because("cannot read the target's memory", e))?;
        Ok(bytes)
    }

    /// Sleeps in the completion queue until a completion wakes it, then looks where the data
    /// landed: for a WRITE with immediate the immediate names the offset, for a SEND it is the
    /// receive buffer.
    fn await_completion(&self, timeout_ms: u64) -> Result<FromTarget, DemoError> {
        let mut wc = [Wc {
            wr_id: 0,
            status: WcStatus::GeneralErr,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: 0,
        }];
        let n = self
            .cq
            .try_wait(&mut wc, Some(Duration::from_millis(timeout_ms)))
            .map_err(verbs("cannot wait for a completion"))?;
        let at_us = since_epoch().as_micros() as u64;
        if n == 0 {
            return Err(DemoError::failed(format!(
                "no completion woke the target within {timeout_ms} ms"
            )));
        }
        let wc = wc[0];
        let imm = (wc.opcode == WcOpcode::RecvRdmaWithImm).then_some(wc.imm_data);
        let offset = imm.map_or(self.plan.offset, u64::from);
        let shown = (wc.byte_len as usize).min(protocol::REPORTED);
        Ok(FromTarget::Woken {
            opcode: opcode_name(wc.opcode).to_owned(),
            status: wc.status.to_string(),
            byte_len: wc.byte_len,
            imm,
            offset,
            bytes: self.look(offset, shown)?,
            at_us,
        })
    }
}

/// The name libibverbs gives a completion's opcode.
pub fn opcode_name(op: WcOpcode) -> &'static str {
    match op {
        WcOpcode::Send => "IBV_WC_SEND",
        WcOpcode::RdmaWrite => "IBV_WC_RDMA_WRITE",
        WcOpcode::RdmaRead => "IBV_WC_RDMA_READ",
        WcOpcode::CompSwap => "IBV_WC_COMP_SWAP",
        WcOpcode::FetchAdd => "IBV_WC_FETCH_ADD",
        WcOpcode::Recv => "IBV_WC_RECV",
        WcOpcode::RecvRdmaWithImm => "IBV_WC_RECV_RDMA_WITH_IMM",
    }
}

/// Runs a program: set up, say `Ready`, then answer each command line of `input` with a line
/// on `output`, until `input` ends. A failure is said (`Failed`) before it is returned.
pub(crate) fn serve<P: Program>(
    set_up: impl FnOnce() -> Result<P, DemoError>,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<(), DemoError> {
    let mut say = |message: &FromTarget| {
        // One write a line, so a reader never wakes for half a message. A demo that went away
        // cannot be told; the target ends with its input.
        if let Ok(mut line) = serde_json::to_string(message) {
            line.push('\n');
            let _ = output.write_all(line.as_bytes());
            let _ = output.flush();
        }
    };
    let result = (|| -> Result<(), DemoError> {
        let mut program = set_up()?;
        say(&FromTarget::Ready(program.shared()?));
        program.prepare()?;
        let commands = input
            .lines()
            .map_while(Result::ok)
            .map_while(|line| serde_json::from_str::<ToTarget>(&line).ok());
        for command in commands {
            say(&program.handle(command)?);
        }
        Ok(())
    })();
    if let Err(e) = &result {
        say(&FromTarget::Failed { why: e.to_string() });
    }
    result
}

/// `roce demo-target`: the target program as a process, on the NIC `nic`, with its memory in
/// the region `region` (created here, named so that the demo can look at it). Commands come on
/// standard input and answers go to standard output, one JSON line each; it ends when its
/// standard input does.
pub fn run_process(
    nic: &str,
    region: &str,
    scenario: Scenario,
    size: Option<usize>,
) -> Result<(), DemoError> {
    let plan = Plan::new(scenario, size)?;
    let ctx = roce_nic::host::connect(nic).map_err(verbs("cannot open the target's NIC"))?;
    let region = crate::shm::region(region, plan.region_len)?;
    serve(
        || Target::set_up(&ctx, Arc::new(region), &plan),
        io::stdin().lock(),
        io::stdout(),
    )
}

/// The target program as a thread of this process, on the context `ctx`. It talks over a
/// socket, the other end of which is returned: waiting for its next command it sleeps in a
/// read, as the process does, where nothing but a command can wake it.
pub fn spawn_thread(
    ctx: Context,
    region: Arc<Region>,
    plan: &Plan,
) -> Result<UnixStream, DemoError> {
    let plan = plan.clone();
    spawn_program("demo-target", move || Target::set_up(&ctx, region, &plan))
}

/// A program as a thread named `name`, set up by `set_up` in that thread, talking over a
/// socket whose other end is returned (see [`spawn_thread`]).
pub(crate) fn spawn_program<P: Program>(
    name: &str,
    set_up: impl FnOnce() -> Result<P, DemoError> + Send + 'static,
) -> Result<UnixStream, DemoError> {
    let (mine, theirs) = UnixStream::pair()
        .map_err(|e| DemoError::because(&format!("cannot connect to the {name} thread"), e))?;
    let input = theirs
        .try_clone()
        .map_err(|e| DemoError::because(&format!("cannot connect to the {name} thread"), e))?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = serve(set_up, BufReader::new(input), theirs);
        })
        .map_err(|e| DemoError::because(&format!("cannot start the {name} thread"), e))?;
    Ok(mine)
}
