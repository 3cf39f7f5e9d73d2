//! The NIC engine: the threads that own every QP, CQ and memory table of a device, as a hardware
//! RNIC's engines own their state. The port thread takes frames from the link, control requests
//! from host programs and work from the send queues; with `--threads N` the QPs are sharded over
//! it and N - 1 more threads ([`shard`]). No engine thread waits for a host: when there is
//! nothing to do it spins briefly, then sleeps until a frame, a doorbell, a request or a timer
//! wakes it.

mod cm;
mod limits;
mod neighbours;
pub(crate) mod objects;
mod qp_table;
mod rx;
mod shard;
mod srqs;
mod watchdog;

pub use cm::DEFAULT_RESPONSE_TIMEOUT as CM_RESPONSE_TIMEOUT;
use qp_table::ActiveQps;
pub use qp_table::{FIRST_QPN, GSI_QPN};
use shard::{shard_of, Common, Held, Line, Shard, Tables};

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use roce_hostmem::PdId;
use smoltcp::wire::IpCidr;
use tracing::{debug, info, warn};

use crate::buf::{BufPool, FrameBuf};
use crate::control::{ClientId, Command, Control, Request};
use crate::counters::{CounterSets, Counters};
use crate::doorbell::{Record, Records};
use crate::link::Link;
use crate::port::IpStack;
use crate::qp::{PortInfo, Qp};
use crate::transport::{self, requester, Ctx, ErrorCause, Event, Output, Tx};
use crate::types::{QpState, Wc};
use crate::waker::{Interest, SharedWord, Waker};
use neighbours::NeighbourNeed;

/// Frames taken from the link in one pass before turning to other work.
const RX_BUDGET: usize = 64;
/// Packets one QP's requester may send in one pass.
const TX_BUDGET: usize = 32;
/// At most one warning this often while the link's receives fail.
const RX_FAILURE_EVERY: Duration = Duration::from_secs(10);
/// How long an idle engine keeps polling before it sleeps: short enough to give the CPU back,
/// long enough that back-to-back work never pays for a wake-up.
const SPIN: Duration = Duration::from_micros(50);

/// An engine thread's idle spell: after its last work it keeps polling, yielding the CPU each
/// round, for [`SPIN`], then sleeps (every engine thread runs this loop).
#[derive(Debug, Default)]
struct Idle {
    since: Option<Instant>,
}

impl Idle {
    /// Work was done, or a sleep ended: the next spell starts afresh.
    fn reset(&mut self) {
        self.since = None;
    }

    /// Nothing to do this round: yields and says true while the spell is shorter than
    /// [`SPIN`]; false when it is time to sleep.
    fn keep_polling(&mut self) -> bool {
        let now = Instant::now();
        if now - *self.since.get_or_insert(now) < SPIN {
            std::thread::yield_now();
            return true;
        }
        false
    }
}
/// Most engine threads a device runs (a bit each in a pass's wake-up mask).
pub const MAX_THREADS: usize = 64;

/// Where the engine puts the rings it creates for hosts.
#[derive(Debug, Clone)]
pub enum RingMemory {
    /// Private memory: every host is in this process.
    Private,
    /// Sealed memfds (named `roce-<prefix>-qp<N>` and `roce-<prefix>-cq<N>` in
    /// /proc/PID/maps) whose descriptors go to hosts in other processes.
    Shared { prefix: String },
}

pub(crate) struct Engine {
    /// Declared first, so dropped first: it polls the link's descriptor until it stops.
    watchdog: Option<watchdog::Watchdog>,
    /// What the watchdog reads (the passes finished).
    signs: Arc<watchdog::Signs>,
    name: String,
    port: PortInfo,
    control: Receiver<Control>,
    waker: Arc<Waker>,
    /// The doorbell records of every host, and the list as last taken (with its version).
    records: Arc<Records>,
    record_list: Arc<[Record]>,
    records_seen: u64,
    tx: Tx,
    /// The world the engine threads share (see [`shard`]).
    common: Arc<Common>,
    /// The world while this thread holds it (for control requests and CM MADs).
    held: Option<Held>,
    /// How many engine threads the QPs are sharded over (this one included).
    threads: usize,
    /// The queues to the other threads (thread `k` at `k - 1`).
    lines: Vec<Line>,
    workers: Vec<JoinHandle<()>>,
    /// Which threads' queues got frames or doorbells this pass (bit `k`): woken once each.
    to_wake: u64,
    pds: HashMap<u32, (PdId, ClientId)>,
    next_pd: u32,
    mr_owners: HashMap<u32, ClientId>,
    ah_owners: HashMap<u32, (ClientId, u32)>,
    next_ah: u32,
    /// Shared receive queues by number; their QPs hold them too.
    srqs: HashMap<u32, crate::srq::SharedSrq>,
    next_srq: u32,
    /// This thread's counters, and every thread's (for a snapshot).
    counters: Arc<Counters>,
    counter_sets: Arc<CounterSets>,
    rings: RingMemory,
    rxe_compat: bool,
    /// Whether RC QPs run the low retransmission timer.
    rto_low: bool,
    /// DCQCN's parameters, when the NIC runs it: every connected QP gets both ends.
    dcqcn: Option<crate::dcqcn::Params>,
    limits: crate::limits::Limits,
    /// The host (a process, numbered by the control socket) of each context opened by a host
    /// in another process; in-process contexts have none, and no per-host limits.
    client_hosts: HashMap<ClientId, u32>,
    local_ips: Vec<IpAddr>,
    /// When the link next wants servicing (frames it holds back).
    link_deadline: Option<Instant>,
    /// When a QP of this thread's shard next needs it, as of the last pass.
    shard_deadline: Option<Instant>,
    /// ARP, neighbour discovery, ICMP and TCP: everything on the wire that is not RoCE.
    ip_stack: IpStack,
    /// The sender of the last frame learnt from, so that a stream of frames from one peer
    /// costs no table lookup each.
    last_sender: Option<(IpAddr, roce_wire::EthernetAddress)>,
    /// Requests held until a neighbour's MAC is known.
    awaiting_neighbour: Vec<neighbours::AwaitingNeighbour>,
    /// Requests whose neighbour was learnt during a pass, served once the world is held.
    resolved: Vec<Command>,
    /// A frame for QP1 (a CM MAD, or a datagram for the host holding QP1), handled once the
    /// world is held; the frames after it wait in the link.
    gsi_frame: Option<FrameBuf>,
    /// The frames of this receive batch already delivered, dropped together at its end (see
    /// [`Engine::receive`]).
    delivered: Vec<FrameBuf>,
    /// How long a held request waits for a MAC before it fails.
    resolve_timeout: Duration,
    /// What a sleeping engine watches (kept to reuse its allocation).
    interests: Vec<Interest>,
    /// Scratch space for `poll(2)` (kept to reuse its allocation).
    pollfds: Vec<libc::pollfd>,
    /// The connection manager on QP1.
    cm: cm::Agent,
    /// Receives the link failed, and when that was last said.
    rx_failures: u64,
    rx_failure_said: Option<Instant>,
    running: bool,
}

/// What the engine needs to start.
pub(crate) struct Setup {
    pub name: String,
    pub port: PortInfo,
    pub local_ips: Vec<IpAddr>,
    /// The port's addresses with their subnets, link-local first.
    pub subnets: Vec<IpCidr>,
    /// The link's IP MTU.
    pub mtu: u32,
    pub resolve_timeout: Duration,
    pub control: Receiver<Control>,
    pub waker: Arc<Waker>,
    pub records: Arc<Records>,
    pub link: Box<dyn Link>,
    pub pool: Arc<BufPool>,
    /// One set per engine thread: as many threads as sets.
    pub counters: Arc<CounterSets>,
    pub threads: usize,
    pub rings: RingMemory,
    pub rxe_compat: bool,
    pub rto_low: bool,
    pub dcqcn: Option<crate::dcqcn::Params>,
    pub limits: crate::limits::Limits,
    pub cm_response_timeout: u8,
}

impl Engine {
    /// The engine, with its other threads (`setup.threads - 1`) started.
    pub fn new(setup: Setup) -> io::Result<Engine> {
        let mut link = setup.link;
        link.attach(&setup.pool, &setup.waker);
        let link_fd = link.poll_fd();
        let threads = setup.threads.clamp(1, MAX_THREADS);
        let counters = Arc::clone(setup.counters.set(0));
        let mut tx = Tx::new(link, Arc::clone(&setup.pool), Arc::clone(&counters));
        let ip_stack = IpStack::new(setup.port.mac, &setup.subnets, setup.mtu, &mut tx)?;
        let cm = cm::Agent::new(setup.port.mac, setup.cm_response_timeout);
        // Before the other threads: if it cannot start, none of them has to be stopped.
        let signs = Arc::new(watchdog::Signs::default());
        let watchdog = watchdog::Watchdog::start(
            setup.name.clone(),
            link_fd,
            Arc::clone(&counters),
            Arc::clone(&setup.waker),
            Arc::clone(&signs),
        )?;
        let mut wakers = vec![Arc::clone(&setup.waker)];
        for _ in 1..threads {
            wakers.push(Waker::new(SharedWord::private())?);
        }
        let held = Held::new(Tables::new(wakers.clone().into()), threads);
        let common = Common::new(held);
        let qpns = crate::doorbell::qpns_for(setup.limits.max_qp);
        let mut lines = Vec::new();
        let mut workers = Vec::new();
        for (k, waker) in wakers.iter().enumerate().skip(1) {
            let (worker, line) = shard::Worker::new(
                k,
                Arc::clone(&common),
                Arc::clone(waker),
                Arc::clone(&setup.waker),
                Arc::clone(&setup.pool),
                Arc::clone(setup.counters.set(k)),
                setup.port.pkeys.clone(),
                qpns,
            );
            lines.push(line);
            let started = std::thread::Builder::new()
                .name(format!("{}-engine{k}", setup.name))
                .spawn(move || worker.run());
            match started {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    common.stop();
                    for handle in workers {
                        let _ = handle.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Engine {
            watchdog: Some(watchdog),
            signs,
            name: setup.name,
            port: setup.port,
            control: setup.control,
            waker: setup.waker,
            record_list: Arc::new([]),
            records_seen: u64::MAX,
            records: setup.records,
            tx,
            common,
            held: None,
            threads,
            lines,
            workers,
            to_wake: 0,
            pds: HashMap::new(),
            next_pd: 1,
            mr_owners: HashMap::new(),
            ah_owners: HashMap::new(),
            next_ah: 1,
            srqs: HashMap::new(),
            next_srq: 1,
            counters,
            counter_sets: setup.counters,
            rings: setup.rings,
            rxe_compat: setup.rxe_compat,
            rto_low: setup.rto_low,
            dcqcn: setup.dcqcn,
            limits: setup.limits,
            client_hosts: HashMap::new(),
            local_ips: setup.local_ips,
            link_deadline: None,
            shard_deadline: None,
            ip_stack,
            last_sender: None,
            awaiting_neighbour: Vec::new(),
            resolved: Vec::new(),
            gsi_frame: None,
            delivered: Vec::with_capacity(RX_BUDGET),
            resolve_timeout: setup.resolve_timeout,
            interests: Vec::new(),
            pollfds: Vec::new(),
            cm,
            rx_failures: 0,
            rx_failure_said: None,
            running: true,
        })
    }

    /// Runs until the device shuts down.
    pub fn run(mut self) {
        info!(nic = %self.name, link = %self.tx.link().describe(), threads = self.threads, "engine started");
        let mut idle = Idle::default();
        while self.running {
            if self.pass() {
                idle.reset();
                continue;
            }
            if idle.keep_polling() {
                continue;
            }
            // Announce the sleep, then look once more: work published before the announcement
            // was seen by nobody else's wake-up.
            self.waker.prepare_sleep();
            if self.pass() {
                self.waker.awake();
                idle.reset();
                continue;
            }
            let timeout = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            let mut interests = std::mem::take(&mut self.interests);
            interests.clear();
            if let Some(fd) = self.tx.link().poll_fd() {
                interests.push(Interest::new(fd, true, false));
            }
            self.ip_stack.interests(&mut interests);
            self.waker.sleep(&interests, timeout, &mut self.pollfds);
            self.interests = interests;
            idle.reset();
        }
        self.shutdown();
    }

    /// One round of everything: control requests (and whatever else needs the whole world),
    /// received frames, posted work, the port's IP stack, timers, the other threads' frames.
    /// Returns whether anything happened.
    fn pass(&mut self) -> bool {
        let now = Instant::now();
        self.link_deadline = self.tx.link().service(now);
        let mut busy = false;
        if self.needs_world(now) {
            self.with_world(|engine| engine.world_work(now));
            busy = true;
        }
        let (work, now) = self.shard_pass();
        busy |= work;
        busy |= self.ip_stack.poll(&mut self.tx, now);
        busy |= self.forward_from_threads();
        // Data written with streaming stores reaches the host's view before the engine looks
        // for more work or sleeps (a host may poll its memory instead of a completion queue).
        roce_hostmem::fence_writes();
        // What the link batched goes out before the engine looks for more work or sleeps.
        self.tx.flush_sends();
        // Only this thread writes it: a plain load and store, no locked add.
        let passes = &self.signs.passes;
        passes.store(passes.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        busy
    }

    /// Whether anything waits that needs the whole world: a control request, a frame for
    /// QP1, a request whose neighbour was learnt, a CM or neighbour timer due.
    fn needs_world(&self, now: Instant) -> bool {
        !self.control.is_empty()
            || self.gsi_frame.is_some()
            || !self.resolved.is_empty()
            || self.cm.deadline().is_some_and(|d| d <= now)
            || self.neighbour_wait_deadline().is_some_and(|d| d <= now)
    }

    /// Runs `f` with the world held (see [`shard`]): no other engine thread is in a pass
    /// meanwhile.
    fn with_world<R>(&mut self, f: impl FnOnce(&mut Engine) -> R) -> R {
        self.held = Some(self.common.hold());
        let result = f(self);
        if let Some(held) = self.held.take() {
            self.common.lend(held);
        }
        result
    }

    /// The world, while this thread holds it.
    fn world(&self) -> &Held {
        self.held
            .as_ref()
            .expect("called only while the port thread holds the world")
    }

    fn world_mut(&mut self) -> &mut Held {
        self.held
            .as_mut()
            .expect("called only while the port thread holds the world")
    }

    /// What needs the whole world, in order: the frames already queued to other threads (so
    /// that a request or MAD sees them taken in, as with one thread), then the waiting
    /// requests, QP1's frame and the timers.
    fn world_work(&mut self, now: Instant) {
        self.drain_lines(now);
        self.handle_control();
        for command in std::mem::take(&mut self.resolved) {
            self.serve(command);
        }
        if let Some(buf) = self.gsi_frame.take() {
            self.gsi_receive(buf, now);
        }
        self.expire_neighbour_waits(now);
        self.cm_timers(now);
    }

    /// With the world held: takes in the frames queued to the other threads, and puts on the
    /// link what they queued to send.
    fn drain_lines(&mut self, now: Instant) {
        self.forward_from_threads();
        let Engine {
            held,
            lines,
            tx,
            counters,
            port,
            ..
        } = self;
        let Some(held) = held.as_mut() else { return };
        for (k, line) in lines.iter().enumerate() {
            let shard = &mut held.shards[k + 1];
            let tables = &held.tables;
            while shard.receive_queued(tables, tx, counters, &port.pkeys, &line.rx, now) > 0 {
                shard.flush_acks(tables, tx, counters, now);
            }
        }
    }

    /// Puts on the link the frames the other threads built, as far as it takes them.
    fn forward_from_threads(&mut self) -> bool {
        let mut n = 0;
        for line in &self.lines {
            while self.tx.can_send() {
                let Some(frame) = line.out.pop() else { break };
                n += 1;
                if let Err(e) = self.tx.link().send(frame) {
                    crate::counters::bump(&self.counters.tx_dropped);
                    debug!(error = %e, "frame dropped by the link");
                }
            }
        }
        n > 0
    }

    fn handle_control(&mut self) {
        while let Ok(message) = self.control.try_recv() {
            match message {
                Control::Call(command) => self.serve(command),
                Control::Shutdown => self.running = false,
            }
        }
    }

    /// Answers a request: at once, or later for those that wait for the network (a TCP
    /// connection, a neighbour's MAC).
    fn serve(&mut self, command: Command) {
        let Command {
            client,
            request,
            reply,
        } = command;
        let now = Instant::now();
        match request {
            Request::TcpConnect { addr } => self.ip_stack.tcp_connect(addr, reply, now),
            Request::TcpAccept { port, timeout } => {
                self.ip_stack.tcp_accept(client, port, timeout, reply, now)
            }
            Request::CmGetEvent { timeout } => self.cm_get_event(client, timeout, reply),
            request => match self.neighbour_need(&request) {
                NeighbourNeed::Resolve(ip) => self.await_neighbour(
                    ip,
                    Command {
                        client,
                        request,
                        reply,
                    },
                ),
                NeighbourNeed::Unreachable(ip) => {
                    let _ = reply.send(Err(self.ip_stack.off_link(ip)));
                }
                NeighbourNeed::None => {
                    let _ = reply.send(self.execute(client, request));
                }
            },
        }
    }

    /// This thread's share of the data path, with the world read: frames from the link (its
    /// own QPs' taken in, the others' queued to their threads), doorbells, its QPs' work and
    /// timers.
    /// Returns whether anything happened, and the time it read after taking in frames (for the
    /// rest of the pass).
    fn shard_pass(&mut self) -> (bool, Instant) {
        let common = Arc::clone(&self.common);
        let guard = common.read();
        let Some(world) = guard.as_ref() else {
            return (false, Instant::now());
        };
        let mut shard = world.shard(0);
        let mut busy = self.receive(&world.tables, &mut shard);
        // One clock read for sending and the timers (and the IP stack after them): they take
        // microseconds, against timers of 100 µs and more.
        let now = Instant::now();
        busy |= self.take_doorbells(&world.tables, &mut shard);
        busy |= shard.transmit(&world.tables, &mut self.tx, &self.counters, now);
        shard.timers(&world.tables, &mut self.tx, &self.counters, now);
        self.shard_deadline = shard.next_deadline();
        drop(shard);
        drop(guard);
        self.wake_threads();
        (busy, now)
    }

    fn receive(&mut self, tables: &Tables, shard: &mut Shard) -> bool {
        // One clock read for the batch: its frames arrived together, and a batch takes
        // microseconds against timers of milliseconds.
        let now = Instant::now();
        let mut n = 0;
        // A frame for QP1 ends the batch: it needs the whole world.
        while n < RX_BUDGET && self.gsi_frame.is_none() {
            match self.tx.link().recv() {
                Ok(Some(frame)) => {
                    self.handle_frame(tables, shard, frame, now);
                    n += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    self.rx_failed(&e, now);
                    break;
                }
            }
        }
        shard.flush_acks(tables, &mut self.tx, &self.counters, now);
        // A delivered frame's payload went into host memory with streaming stores, and
        // dropping its buffer is a locked decrement (its pool's `Arc`), which waits until those
        // stores have drained: dropped one by one, every frame waited for its own stores (14%
        // of a cable receiver's samples); dropped here, the stores drain while the next frames
        // are parsed and checked, and only the first drop of the batch waits.
        self.delivered.clear();
        n > 0
    }

    /// Counts a receive the link failed, and says so at most every [`RX_FAILURE_EVERY`]: a link
    /// whose receives keep failing takes no frame, and that must show in the log.
    #[cold]
    fn rx_failed(&mut self, error: &io::Error, now: Instant) {
        self.rx_failures += 1;
        if self
            .rx_failure_said
            .is_none_or(|at| now - at >= RX_FAILURE_EVERY)
        {
            self.rx_failure_said = Some(now);
            warn!(error = %error, failures = self.rx_failures, "the link's receive failed");
        }
    }

    /// Wakes the threads whose queues got frames or doorbells this pass.
    fn wake_threads(&mut self) {
        let mut due = std::mem::take(&mut self.to_wake);
        while due != 0 {
            let k = due.trailing_zeros() as usize;
            due &= due - 1;
            self.lines[k - 1].waker.wake();
        }
    }

    /// Enrols the QPs whose hosts rang their doorbells since the last pass (each with its
    /// thread). A QP number a host rings is only a hint: the QP must exist and belong to that
    /// host, or the ring is counted as bad and ignored.
    fn take_doorbells(&mut self, tables: &Tables, shard: &mut Shard) -> bool {
        if let Some(list) = self.records.changed_since(&mut self.records_seen) {
            self.record_list = list;
        }
        let Engine {
            record_list,
            client_hosts,
            counters,
            lines,
            to_wake,
            threads,
            ..
        } = self;
        let mut bad = 0;
        let mut rung = 0;
        for record in record_list.iter() {
            rung += record.ready.drain(|qpn| match tables.qp_owner(qpn) {
                Some(owner) if client_hosts.get(&owner).copied() == record.host => {
                    match shard_of(qpn, *threads) {
                        0 => shard.active.insert(qpn),
                        k => {
                            lines[k - 1].ready.set(qpn);
                            *to_wake |= 1 << k;
                        }
                    }
                }
                _ => bad += 1,
            });
        }
        if bad > 0 {
            crate::counters::add(&counters.bad_doorbells, bad);
            debug!(bad, "doorbells rung for QPs the ringing host does not own");
        }
        rung > 0
    }

    fn next_deadline(&self) -> Option<Instant> {
        [
            self.shard_deadline,
            self.link_deadline,
            self.ip_stack.deadline(),
            self.neighbour_wait_deadline(),
            self.cm.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// With the world held: runs `f` on QP `qpn` with a transport context, if the QP exists,
    /// and settles it.
    fn with_qp<R>(&mut self, qpn: u32, f: impl FnOnce(&mut Qp, &mut Ctx<'_>) -> R) -> Option<R> {
        let Engine {
            held, tx, counters, ..
        } = self;
        let (tables, shard) = held.as_mut()?.shard_of_qp(qpn);
        let (qps, mut io) = shard.io(tables, tx, counters);
        let qp = qps.get_mut(qpn)?;
        Some(io.drive(qp, Instant::now(), f))
    }

    /// With the world held: runs `f` on `qp`, a QP not yet in the tables, with a transport
    /// context on the shard it is to join.
    fn with_new_qp<R>(&mut self, qp: &mut Qp, f: impl FnOnce(&mut Qp, &mut Ctx<'_>) -> R) -> R {
        let Engine {
            held, tx, counters, ..
        } = self;
        let held = held
            .as_mut()
            .expect("called only while the port thread holds the world");
        let (tables, shard) = held.shard_of_qp(qp.qpn);
        let (_, mut io) = shard.io(tables, tx, counters);
        io.drive(qp, Instant::now(), f)
    }

    fn shutdown(&mut self) {
        drop(self.watchdog.take());
        self.held = Some(self.common.hold());
        self.common.stop();
        for worker in std::mem::take(&mut self.workers) {
            let _ = worker.join();
        }
        self.forward_from_threads();
        let qpns: Vec<u32> = self.world().qps().map(|qp| qp.qpn).collect();
        for qpn in qpns {
            self.with_qp(qpn, |qp, ctx| qp.enter_error(ctx, ErrorCause::Requested));
        }
        if let Err(e) = self.tx.link().flush() {
            warn!(error = %e, "flushing the link at shutdown failed");
        }
        info!(nic = %self.name, "engine stopped");
    }
}

/// The engine's side of the transport's I/O: frames go onto the link, completions wait until
/// their QP's ring slots are released and then go into the completion queues, events go to the
/// logs.
pub(crate) struct EngineIo<'a> {
    tables: &'a Tables,
    tx: &'a mut Tx,
    completions: &'a mut Vec<(u32, Wc)>,
    counters: &'a Counters,
    active: &'a mut ActiveQps,
    sweep: &'a mut bool,
    /// The room the next QP driven gets for packets in flight (`Ctx::send_room`).
    pub(crate) send_room: u32,
}

impl EngineIo<'_> {
    /// Runs `f` on `qp` with a transport context at `now`, then settles the QP: its ring slots
    /// go back to the host, and only then are the completions published. The QP is active
    /// from then on, until a pass finds it idle.
    pub(crate) fn drive<R>(
        &mut self,
        qp: &mut Qp,
        now: Instant,
        f: impl FnOnce(&mut Qp, &mut Ctx<'_>) -> R,
    ) -> R {
        let result = {
            let (tables, counters, send_room) = (self.tables, self.counters, self.send_room);
            let mut ctx = Ctx {
                mrs: &tables.mrs,
                ahs: &tables.ahs,
                out: self,
                counters,
                now,
                send_room,
            };
            let result = f(qp, &mut ctx);
            qp.settle(&mut ctx);
            result
        };
        if self
            .tables
            .cqs
            .complete_all(self.completions.drain(..), self.counters)
        {
            // The queue's QPs may live on every thread: each looks at all of its own.
            *self.sweep = true;
            self.tables.overruns.fetch_add(1, Ordering::SeqCst);
            self.tables.wake_all();
        }
        self.active.insert(qp.qpn);
        result
    }
}

impl Output for EngineIo<'_> {
    fn can_send(&self) -> bool {
        self.tx.can_send()
    }

    fn send(
        &mut self,
        repr: &roce_wire::FrameRepr,
        fill: &mut transport::Fill<'_>,
    ) -> Result<(), roce_hostmem::AccessError> {
        // A frame may tell the peer that data landed (an ACK): the data first.
        roce_hostmem::fence_writes();
        self.tx.send(repr, fill)
    }

    fn complete(&mut self, cq: u32, wc: &Wc) {
        self.completions.push((cq, *wc));
    }

    fn event(&mut self, event: &Event<'_>) {
        event.log();
    }

    fn expedite(&mut self) {
        self.tx.flush_sends();
    }
}

/// The send-side work of one QP: in the error state nothing (settling flushes new posts);
/// otherwise fetch newly posted requests and let the transport work. Returns whether anything
/// happened.
fn work(qp: &mut Qp, ctx: &mut Ctx<'_>, cq_overran: bool, ah_pds: &HashMap<u32, PdId>) -> bool {
    let mut busy = false;
    // A completion queue in error takes its QPs with it (IBTA: CQ overrun).
    let live = !matches!(qp.state, QpState::Reset | QpState::Err);
    if live && cq_overran {
        qp.enter_error(ctx, ErrorCause::CqOverrun);
        busy = true;
    }
    if qp.state == QpState::Err {
        return busy || qp.unfetched() > 0;
    }
    if matches!(qp.state, QpState::Rts | QpState::Sqd) {
        let mtu = qp.attrs.path_mtu.bytes();
        let qp_type = qp.qp_type;
        let ahs = ctx.ahs;
        let pd = qp.pd;
        let fetched = qp.fetch_sends(|wqe| {
            // An AH of another domain (another host's, say) is no destination for this QP.
            let has_dest = wqe
                .ud
                .is_some_and(|u| ahs.contains_key(&u.ah) && ah_pds.get(&u.ah) == Some(&pd));
            requester::check(qp_type, mtu, &wqe.op, wqe.length, has_dest)
        });
        busy |= fetched > 0;
    }
    busy | transport::poll(qp, ctx, TX_BUDGET)
}
