//! One host of the ring: the program that runs on every computer of the all-reduce. It holds
//! its vector in registered memory, has a QP to the next host (which it writes to) and one to
//! the previous host (which writes to it), and runs the ring's schedule: post a WRITE with
//! immediate of a chunk, take the completions, and in reduce-scatter add the chunk that came.
//! Its CPU touches the numbers only to add them; the NICs move them.
//!
//! It times itself with its thread's CPU clock: around the add loops (adding) and around
//! posting work requests and taking completions (moving). The demo compares the two with the
//! process's CPU time read from /proc from outside.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::{Access, Region, VaBase};
use roce_nic::verbs::{
    AddressVector, CompletionQueue, Context, Gid, MemoryRegion, Mtu, QpAttr, QpCap, QpType,
    QueuePair, RecvWr, SendFlags, SendOp, SendWr, VerbsError, Wc, WcOpcode, WcStatus,
};
use serde::{Deserialize, Serialize};

use super::ring::{input, Phase, Ring, FLOAT};
use crate::cpu::thread_cpu;
use crate::events::since_epoch;
use crate::target_host::protocol::{QpEnd, RingPeer};
use crate::target_host::GID_INDEX;
use crate::target_host::{random_psn, serve, touch, FromTarget, Program, Shared, ToTarget};
use crate::DemoError;

/// The path MTU of the ring's QPs.
pub const MTU: Mtu = Mtu::M4096;

/// What one host did at one step, as it measured it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepReport {
    pub phase: Phase,
    pub step: u32,
    pub sent_chunk: u32,
    pub sent_bytes: u64,
    pub received_chunk: u32,
    pub received_bytes: u64,
    /// When it posted its WRITE, when that completed, when the previous host's WRITE to it
    /// completed, and when it had added it in (all in microseconds since the Unix epoch).
    pub posted_us: u64,
    pub sent_us: u64,
    pub received_us: u64,
    pub done_us: u64,
    /// Its thread's CPU time adding, and posting and taking completions, in this step.
    pub add_ns: u64,
    pub move_ns: u64,
}

/// What a host reports once the all-reduce is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub steps: Vec<StepReport>,
    pub started_us: u64,
    pub ended_us: u64,
    /// Floats it added.
    pub added: u64,
}

impl Report {
    pub fn add_ns(&self) -> u64 {
        self.steps.iter().map(|s| s.add_ns).sum()
    }

    pub fn move_ns(&self) -> u64 {
        self.steps.iter().map(|s| s.move_ns).sum()
    }
}

fn micros(at: Duration) -> u64 {
    at.as_micros() as u64
}

fn verbs(what: &str) -> impl Fn(VerbsError) -> DemoError + '_ {
    move |e| DemoError::because(what, e)
}

/// The host's verbs objects and where it is in the ring.
struct RingHost {
    ring: Ring,
    rank: usize,
    region: Arc<Region>,
    mr: MemoryRegion,
    cq: CompletionQueue,
    /// Sends to the next host.
    to_next: QueuePair,
    /// The previous host writes through it.
    from_prev: QueuePair,
    psns: (u32, u32),
    gid: Gid,
    /// The next host's memory, once joined.
    next: Option<RingPeer>,
}

impl RingHost {
    /// Registers the memory and makes the two QPs.
    fn set_up(
        ctx: &Context,
        region: Arc<Region>,
        ring: Ring,
        rank: usize,
    ) -> Result<RingHost, DemoError> {
        let pd = ctx
            .alloc_pd()
            .map_err(verbs("cannot allocate a protection domain"))?;
        // Every completion of the run fits: a send and a receive per step.
        let cq = ctx
            .create_cq(4 * ring.hosts as u32 + 4)
            .map_err(verbs("cannot create a completion queue"))?;
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 2 * ring.steps() as u32 + 2,
            ..QpCap::default()
        };
        let qp = |what| pd.create_qp(QpType::Rc, &cq, &cq, cap).map_err(verbs(what));
        let to_next = qp("cannot create the queue pair to the next host")?;
        let from_prev = qp("cannot create the queue pair from the previous host")?;
        let va = VaBase::At(region.as_ptr() as u64);
        let mr = pd
            .register_at(
                &region,
                0,
                region.len(),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                va,
            )
            .map_err(verbs("cannot register the vector"))?;
        let gid = ctx
            .gid(GID_INDEX)
            .ok_or_else(|| DemoError::failed("the host's NIC has no IPv4 GID"))?;
        Ok(RingHost {
            ring,
            rank,
            region,
            mr,
            cq,
            to_next,
            from_prev,
            psns: (random_psn(), random_psn()),
            gid,
            next: None,
        })
    }

    /// Connects both QPs and posts a receive for every WRITE with immediate to come.
    fn join(&mut self, next: RingPeer, prev: RingPeer) -> Result<(), DemoError> {
        let connect = |qp: &QueuePair, peer: &RingPeer, psn: u32, access| {
            let gid = Gid::parse(&peer.gid)
                .ok_or_else(|| DemoError::failed(format!("{:?} is not a GID", peer.gid)))?;
            let attrs = [
                QpAttr::init(access),
                QpAttr::rtr(
                    AddressVector::to(gid, GID_INDEX),
                    peer.qp.qpn,
                    peer.qp.psn,
                    MTU,
                ),
                QpAttr::rts(psn),
            ];
            for attr in &attrs {
                qp.modify(attr)
                    .map_err(verbs("cannot connect to a neighbour in the ring"))?;
            }
            Ok::<(), DemoError>(())
        };
        connect(&self.to_next, &next, self.psns.0, Access::LOCAL_WRITE)?;
        connect(
            &self.from_prev,
            &prev,
            self.psns.1,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )?;
        // A WRITE with immediate consumes a receive, and needs no buffer in it.
        for i in 0..2 * self.ring.steps() {
            self.from_prev
                .post_recv(&[RecvWr {
                    wr_id: i as u64,
                    sg_list: &[],
                }])
                .map_err(verbs("cannot post a receive"))?;
        }
        self.next = Some(next);
        Ok(())
    }

    /// Runs reduce-scatter then all-gather.
    fn all_reduce(&self, limit: Duration) -> Result<Report, DemoError> {
        let next = self
            .next
            .as_ref()
            .ok_or_else(|| DemoError::failed("told to run before joining the ring"))?;
        let deadline = Instant::now() + limit;
        let mut completions = Completions::new(&self.cq, deadline);
        let started = since_epoch();
        let mut steps = Vec::new();
        let mut added = 0;
        for (phase, step) in self.ring.schedule() {
            let sent = self.ring.sent(self.rank, phase, step);
            let received = self.ring.received(self.rank, phase, step);
            let sent_range = self.ring.chunk(sent);
            let received_range = self.ring.chunk(received);
            let cpu = thread_cpu();
            let posted = since_epoch();
            let sge = self.mr.sge(
                (sent_range.start * FLOAT) as u64,
                (sent_range.len() * FLOAT) as u32,
            );
            self.to_next
                .post_send(&[SendWr {
                    wr_id: steps.len() as u64,
                    op: SendOp::RdmaWriteWithImm {
                        remote_addr: next.va + self.ring.landing(phase, step, sent) as u64,
                        rkey: next.rkey,
                        imm: Ring::imm(phase, step, sent),
                    },
                    sg_list: &[sge],
                    flags: SendFlags::SIGNALED,
                    ud: None,
                }])
                .map_err(verbs("cannot post a WRITE"))?;
            // Its own WRITE done (the chunk may change after), and the previous host's here.
            let sent_at = completions.send()?;
            let wc = completions.receive()?;
            let received_at = since_epoch();
            let want = Ring::imm(phase, step, received);
            if wc.imm_data != want || wc.byte_len as usize != received_range.len() * FLOAT {
                return Err(DemoError::failed(format!(
                    "host {} expected immediate {want:#010x} with {} bytes at {} step {}, and \
                     got {:#010x} with {}",
                    self.rank,
                    received_range.len() * FLOAT,
                    phase.name(),
                    step + 1,
                    wc.imm_data,
                    wc.byte_len
                )));
            }
            let moved = thread_cpu();
            if phase == Phase::ReduceScatter {
                let slot = self.ring.landing(phase, step, received);
                self.add(slot, received_range.start * FLOAT, received_range.len())?;
                added += received_range.len() as u64;
            }
            let done = thread_cpu();
            steps.push(StepReport {
                phase,
                step: step as u32,
                sent_chunk: sent as u32,
                sent_bytes: (sent_range.len() * FLOAT) as u64,
                received_chunk: received as u32,
                received_bytes: (received_range.len() * FLOAT) as u64,
                posted_us: micros(posted),
                sent_us: micros(sent_at),
                received_us: micros(received_at),
                done_us: micros(since_epoch()),
                add_ns: done.saturating_sub(moved).as_nanos() as u64,
                move_ns: moved.saturating_sub(cpu).as_nanos() as u64,
            });
        }
        Ok(Report {
            steps,
            started_us: micros(started),
            ended_us: micros(since_epoch()),
            added,
        })
    }

    /// Adds the `n` floats at byte `from` (a scratch slot) into those at byte `into` (its
    /// chunk of the vector), in place.
    fn add(&self, from: usize, into: usize, n: usize) -> Result<(), DemoError> {
        let end = from.max(into) + n * FLOAT;
        if end > self.region.len() || from < into + n * FLOAT && into < from + n * FLOAT {
            return Err(DemoError::failed(
                "the chunk to add does not fit the memory",
            ));
        }
        // SAFETY: both ranges lie inside the region's mapping (checked above), which is page
        // aligned, and at multiples of 4: aligned for f32. They do not overlap (checked above).
        // Nothing else writes them meanwhile: the previous host's NIC wrote the slot before the
        // completion that brought the host here, and writes no slot twice; the only WRITE that
        // can land on this chunk of the vector later is an all-gather one, which the previous
        // host can send only once this host's next WRITE (posted after this add) has gone round
        // the ring to it.
        let (slot, chunk) = unsafe {
            let base = self.region.as_ptr();
            (
                std::slice::from_raw_parts(base.add(from).cast::<f32>(), n),
                std::slice::from_raw_parts_mut(base.add(into).cast::<f32>(), n),
            )
        };
        for (have, came) in chunk.iter_mut().zip(slot) {
            *have += *came;
        }
        Ok(())
    }
}

/// The completions of one CQ, sorted: a receive may come before this host has taken its own
/// send's completion (the previous host can be a step ahead), and is kept for its step.
struct Completions<'a> {
    cq: &'a CompletionQueue,
    deadline: Instant,
    sends: VecDeque<Duration>,
    receives: VecDeque<Wc>,
}

impl<'a> Completions<'a> {
    fn new(cq: &'a CompletionQueue, deadline: Instant) -> Completions<'a> {
        Completions {
            cq,
            deadline,
            sends: VecDeque::new(),
            receives: VecDeque::new(),
        }
    }

    /// When the next send completed.
    fn send(&mut self) -> Result<Duration, DemoError> {
        loop {
            if let Some(at) = self.sends.pop_front() {
                return Ok(at);
            }
            self.take()?;
        }
    }

    /// The next receive's completion.
    fn receive(&mut self) -> Result<Wc, DemoError> {
        loop {
            if let Some(wc) = self.receives.pop_front() {
                return Ok(wc);
            }
            self.take()?;
        }
    }

    /// Sleeps until completions come, and sorts them.
    fn take(&mut self) -> Result<(), DemoError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(DemoError::failed(
                "the all-reduce did not finish in the time allowed",
            ));
        }
        let mut wcs = [Wc::default(); 8];
        let n = self
            .cq
            .try_wait(&mut wcs, Some(left))
            .map_err(verbs("cannot wait for a completion"))?;
        let at = since_epoch();
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(DemoError::failed(format!(
                    "a work request of the ring failed: {}",
                    wc.status
                )));
            }
            match wc.opcode {
                WcOpcode::RecvRdmaWithImm => self.receives.push_back(*wc),
                _ => self.sends.push_back(at),
            }
        }
        Ok(())
    }
}

impl Program for RingHost {
    /// Every page of its memory in place, and its own numbers in the vector.
    fn prepare(&mut self) -> Result<(), DemoError> {
        touch(&self.region)?;
        let batch = self.ring.floats.min(1 << 18);
        let mut values = Vec::with_capacity(batch * FLOAT);
        let mut at = 0;
        while at < self.ring.floats {
            let n = (self.ring.floats - at).min(batch);
            values.clear();
            for i in at..at + n {
                values.extend_from_slice(&input(self.rank, i).to_ne_bytes());
            }
            self.region
                .write(at * FLOAT, &values)
                .map_err(|e| DemoError::because("cannot fill the vector", e))?;
            at += n;
        }
        Ok(())
    }

    fn shared(&self) -> Result<Shared, DemoError> {
        Ok(Shared {
            pid: std::process::id(),
            tid: rustix::thread::gettid().as_raw_nonzero().get(),
            qpn: self.from_prev.qp_num(),
            psn: self.psns.1,
            gid: self.gid.to_hex(),
            rkey: self.mr.rkey,
            lkey: self.mr.lkey,
            va: self.mr.va,
            len: self.mr.len,
            access: self.mr.access.bits(),
            send_qp: Some(QpEnd {
                qpn: self.to_next.qp_num(),
                psn: self.psns.0,
            }),
        })
    }

    fn handle(&mut self, command: ToTarget) -> Result<FromTarget, DemoError> {
        match command {
            ToTarget::JoinRing { next, prev } => {
                self.join(next, prev)?;
                Ok(FromTarget::Connected)
            }
            ToTarget::AllReduce { timeout_ms } => Ok(FromTarget::Reduced(
                self.all_reduce(Duration::from_millis(timeout_ms))?,
            )),
            other => Err(DemoError::failed(format!(
                "a host of the ring does not do {other:?}"
            ))),
        }
    }
}

/// `roce demo-target --scenario allreduce`: host `rank` of `hosts` as a process, on the NIC
/// `nic`, its vector of `floats` floats in the region `region` (created here, named so that
/// the demo can check the result). Commands on standard input, answers on standard output.
pub fn run_process(
    nic: &str,
    region: &str,
    rank: usize,
    hosts: usize,
    floats: usize,
) -> Result<(), DemoError> {
    let ring = super::ring_of(hosts, floats)?;
    if rank >= hosts {
        return Err(DemoError::Usage(format!(
            "rank {rank} is not in a ring of {hosts}"
        )));
    }
    let ctx = roce_nic::host::connect(nic).map_err(verbs("cannot open the host's NIC"))?;
    let region = crate::shm::region(region, ring.region_len())?;
    serve(
        || RingHost::set_up(&ctx, Arc::new(region), ring, rank),
        io::stdin().lock(),
        io::stdout(),
    )
}

/// Host `rank` as a thread of this process, on `ctx`, with its memory in `region`; the other
/// end of its command socket is returned.
pub fn spawn_thread(
    ctx: Context,
    region: Arc<Region>,
    ring: Ring,
    rank: usize,
) -> Result<std::os::unix::net::UnixStream, DemoError> {
    crate::target_host::spawn_program(&format!("demo-host{rank}"), move || {
        RingHost::set_up(&ctx, region, ring, rank)
    })
}
