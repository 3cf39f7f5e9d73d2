//! QPs sharded over engine threads (`--threads N`). QP `n` lives on thread `n % N` (QP1, the
//! connection manager's, on thread 0); thread 0 is the port thread, which also owns the link,
//! the IP stack, the CM agent and the control channel.
//!
//! What the threads share is the [`World`]: the tables every packet reads (MRs, address
//! handles, completion queues) and each thread's [`Shard`] of QPs. A thread holds it for reading
//! for one pass, and locks its own shard for that pass (nobody else's; the lock is never
//! contended then). Control requests and CM MADs change the tables and any thread's QPs: the
//! port thread takes the world out of its lock for them ([`Held`]), so that no other thread is
//! inside a pass meanwhile — which is also what makes a deregistration final: once answered, no
//! thread can still be writing into the memory. Taking it out waits for the other threads'
//! passes (tens of microseconds); they skip passes until it is back.
//!
//! Frames reach a thread through a bounded queue the port thread fills from the link (the
//! buffer the link filled moves, not its bytes), and leave through a bounded queue the port
//! thread drains onto the link. A full queue drops a frame and counts it, as a full wire would.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use crossbeam::queue::ArrayQueue;
use roce_hostmem::{MrTable, PdId};
use roce_wire::{Frame, Transport};
use tracing::{debug, trace, trace_span};

use super::qp_table::{ActiveQps, QpTable};
use super::{work, EngineIo, Idle, FIRST_QPN, GSI_QPN, RX_BUDGET};
use crate::buf::{BufPool, FrameBuf};
use crate::control::ClientId;
use crate::counters::{self, Counters};
use crate::cq::CqTable;
use crate::doorbell::ReadyBits;
use crate::link::Link;
use crate::pkey::{self, PKeyTable};
use crate::qp::Qp;
use crate::transport::{self, ip_addresses, psn, requester, responder, Event, Path, Tx};
use crate::types::{QpType, Wc};
use crate::waker::Waker;

/// Frames one thread's queue (either way) holds.
const QUEUE: usize = 1024;

/// The engine thread that owns QP `qpn` among `threads`.
#[inline]
pub(crate) fn shard_of(qpn: u32, threads: usize) -> usize {
    // One thread (the default) pays no division.
    if threads == 1 || qpn == GSI_QPN {
        0
    } else {
        qpn as usize % threads
    }
}

/// The tables every packet reads, changed only while the port thread holds the world.
pub(crate) struct Tables {
    pub mrs: MrTable,
    pub ahs: HashMap<u32, Path>,
    /// The protection domain of each address handle: a UD send may only use an AH of its
    /// QP's domain (and so of its own host).
    pub ah_pds: HashMap<u32, PdId>,
    pub cqs: CqTable,
    /// The owner of each QP by number: the port thread checks doorbells against it without
    /// reaching into another thread's QPs.
    pub qp_owners: Vec<Option<ClientId>>,
    /// Completion queue overruns so far: each thread that sees it grow looks at all its QPs
    /// (a queue in error takes its QPs, whichever thread they live on).
    pub overruns: AtomicU64,
    /// Every engine thread's wake-up line (0: the port thread's).
    pub wakers: Box<[Arc<Waker>]>,
}

impl Tables {
    pub fn new(wakers: Box<[Arc<Waker>]>) -> Tables {
        Tables {
            mrs: MrTable::new(),
            ahs: HashMap::new(),
            ah_pds: HashMap::new(),
            cqs: CqTable::default(),
            qp_owners: Vec::new(),
            overruns: AtomicU64::new(0),
            wakers,
        }
    }

    pub fn qp_owner(&self, qpn: u32) -> Option<ClientId> {
        self.qp_owners.get(qpn as usize).copied().flatten()
    }

    fn set_qp_owner(&mut self, qpn: u32, owner: Option<ClientId>) {
        let i = qpn as usize;
        if i >= self.qp_owners.len() {
            self.qp_owners.resize(i + 1, None);
        }
        self.qp_owners[i] = owner;
    }

    /// Wakes every engine thread (each looks at its QPs again).
    pub fn wake_all(&self) {
        for waker in self.wakers.iter() {
            waker.wake();
        }
    }
}

/// One engine thread's QPs and what it keeps for them between packets.
#[derive(Default)]
pub(crate) struct Shard {
    pub qps: QpTable,
    /// The QPs with work or a timer: what a pass looks at.
    pub active: ActiveQps,
    /// Whether the next pass looks at every QP: after a completion queue's overrun (which takes
    /// its QPs into error). A host's requests need none: what they do to a QP goes through
    /// `EngineIo::drive`, which makes the QP active.
    sweep: bool,
    /// [`Tables::overruns`] as this shard last looked.
    overruns_seen: u64,
    /// QPs owed an ACK after the current batch of received frames.
    acks_due: Vec<u32>,
    /// Completions the transport made, held until their QP's ring slots are released (kept to
    /// reuse its allocation).
    completions: Vec<(u32, Wc)>,
}

impl Shard {
    /// The QP table and the I/O for the transport, borrowed apart so that the transport
    /// functions can work on one QP with everything else at hand.
    pub fn io<'a>(
        &'a mut self,
        tables: &'a Tables,
        tx: &'a mut Tx,
        counters: &'a Counters,
    ) -> (&'a mut QpTable, EngineIo<'a>) {
        let Shard {
            qps,
            active,
            sweep,
            completions,
            ..
        } = self;
        let io = EngineIo {
            tables,
            tx,
            completions,
            counters,
            active,
            sweep,
            send_room: u32::MAX,
        };
        (qps, io)
    }

    /// Hands a RoCE packet for one of this shard's QPs (its frame checked as addressed to us,
    /// and its ICRC verified) to the QP's transport.
    pub fn deliver(
        &mut self,
        tables: &Tables,
        tx: &mut Tx,
        counters: &Counters,
        pkeys: &PKeyTable,
        frame: &Frame<'_>,
        now: Instant,
    ) {
        let c = counters;
        let bth = frame.repr.bth;
        if bth.tver != 0 {
            counters::bump(&c.rx_bad_tver);
            debug!(tver = bth.tver, "transport version not 0: dropped");
            return;
        }
        let transport = bth.opcode.transport();
        if transport == Transport::Cnp {
            let (qps, mut io) = self.io(tables, tx, counters);
            match qps.get_mut(bth.dest_qp) {
                Some(qp) => io.drive(qp, now, crate::dcqcn::on_cnp),
                None => crate::dcqcn::no_qp_for_cnp(counters),
            }
            return;
        }
        let qpn = bth.dest_qp;
        let Some(qp) = self.qps.get(qpn) else {
            counters::bump(&c.rx_unknown_qp);
            debug!("no such QP: dropped");
            return;
        };
        let fits = matches!(
            (qp.qp_type, transport),
            (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
        );
        if !fits {
            counters::bump(&c.rx_wrong_transport);
            debug!(qp_type = %qp.qp_type, "opcode of another transport: dropped");
            return;
        }
        if let Some(path) = qp.path.filter(|_| qp.qp_type != QpType::Ud) {
            if !path.is_reverse_of(&frame.repr.network) {
                counters::bump(&c.rx_wrong_address);
                debug!(
                    packet = ?ip_addresses(&frame.repr.network),
                    connected = ?ip_addresses(&path.network),
                    "packet from or to an address the QP is not connected to: dropped"
                );
                return;
            }
        }
        let partition = if qpn == GSI_QPN {
            pkeys.check_any(bth.p_key)
        } else {
            pkey::check(bth.p_key, qp.p_key)
        };
        if let Err(reason) = partition {
            counters::bump(&c.rx_bad_pkey);
            debug!(
                p_key = format_args!("{:#06x}", bth.p_key),
                qp_p_key = format_args!("{:#06x}", qp.p_key),
                %reason,
                "P_Key does not match: dropped"
            );
            return;
        }
        let (qps, mut io) = self.io(tables, tx, counters);
        let Some(qp) = qps.get_mut(qpn) else { return };
        if !bth.opcode.kind().is_response() {
            // The receives posted so far are there for the responder to take.
            qp.fetch_receives();
        }
        let ack_due = io.drive(qp, now, |qp, ctx| {
            crate::dcqcn::on_arrival(qp, ctx, &frame.repr);
            transport::on_packet(qp, ctx, frame)
        });
        if ack_due && !self.acks_due.contains(&qpn) {
            self.acks_due.push(qpn);
        }
    }

    /// Takes in the frames the port thread queued for this shard (already checked as RoCE
    /// addressed to us): verifies each ICRC and delivers it. Returns how many there were.
    pub fn receive_queued(
        &mut self,
        tables: &Tables,
        tx: &mut Tx,
        counters: &Counters,
        pkeys: &PKeyTable,
        queue: &ArrayQueue<FrameBuf>,
        now: Instant,
    ) -> usize {
        let mut n = 0;
        while n < RX_BUDGET {
            let Some(buf) = queue.pop() else { break };
            n += 1;
            let Ok(frame) = Frame::parse(&buf) else {
                // The port thread parsed it: it cannot fail here.
                counters::bump(&counters.rx_malformed);
                continue;
            };
            let bth = frame.repr.bth;
            let span = trace_span!("rx", qpn = bth.dest_qp, psn = bth.psn, opcode = %bth.opcode);
            let _enter = span.enter();
            if !verify_icrc(&frame, counters) {
                continue;
            }
            self.deliver(tables, tx, counters, pkeys, &frame, now);
        }
        n
    }

    /// One ACK per QP for the batch of frames just taken in: ACK coalescing.
    pub fn flush_acks(&mut self, tables: &Tables, tx: &mut Tx, counters: &Counters, now: Instant) {
        let mut due = std::mem::take(&mut self.acks_due);
        let (qps, mut io) = self.io(tables, tx, counters);
        for qpn in due.drain(..) {
            if let Some(qp) = qps.get_mut(qpn) {
                io.drive(qp, now, responder::flush_ack);
            }
        }
        self.acks_due = due;
    }

    /// The send-side work of the active QPs (after a completion queue's overrun, of every
    /// QP). Returns whether anything happened.
    pub fn transmit(
        &mut self,
        tables: &Tables,
        tx: &mut Tx,
        counters: &Counters,
        now: Instant,
    ) -> bool {
        let overruns = tables.overruns.load(Ordering::SeqCst);
        let mut sweep = std::mem::take(&mut self.sweep);
        if overruns != self.overruns_seen {
            self.overruns_seen = overruns;
            sweep = true;
        }
        let mut busy = false;
        let (qps, mut io) = self.io(tables, tx, counters);
        if sweep {
            for qp in qps.iter() {
                io.active.insert(qp.qpn);
            }
        }
        // Bytes in flight over the active QPs (an idle QP has none): each QP may add to its
        // own what the budget has left.
        let mut in_flight: u64 = io
            .active
            .iter()
            .filter_map(|qpn| qps.get(qpn))
            .map(bytes_in_flight)
            .sum();
        let mut held_back = false;
        let mut i = 0;
        while i < io.active.len() {
            let qpn = io.active.at(i);
            let Some(qp) = qps.get_mut(qpn) else {
                io.active.remove_at(i);
                continue;
            };
            let overran = tables.cqs.overran(qp.send_cq) || tables.cqs.overran(qp.recv_cq);
            let ah_pds = &tables.ah_pds;
            let own = bytes_in_flight(qp);
            // Room in runs of an acknowledgement's worth at least: slivers would each end in
            // a packet that asks for an ACK.
            let left = IN_FLIGHT_BUDGET.saturating_sub(in_flight) / u64::from(packet_bytes(qp));
            let left = match u32::try_from(left).unwrap_or(u32::MAX) {
                left if left >= requester::ACK_REQ_EVERY => left,
                _ => 0,
            };
            held_back |= left == 0;
            io.send_room = unacknowledged(qp).saturating_add(left);
            let worked = io.drive(qp, now, |qp, ctx| work(qp, ctx, overran, ah_pds));
            io.send_room = u32::MAX;
            in_flight = (in_flight + bytes_in_flight(qp)).saturating_sub(own);
            busy |= worked;
            if worked || qp.needs_engine() {
                i += 1;
            } else {
                io.active.remove_at(i);
            }
        }
        if held_back {
            // The QPs at the front took the budget: the next pass starts one further on, so
            // that every QP comes first in turn.
            io.active.rotate();
        }
        busy
    }

    /// Runs the timers of the active QPs that are due (a QP with a timer running is active).
    pub fn timers(&mut self, tables: &Tables, tx: &mut Tx, counters: &Counters, now: Instant) {
        let (qps, mut io) = self.io(tables, tx, counters);
        for i in 0..io.active.len() {
            let Some(qp) = qps.get_mut(io.active.at(i)) else {
                continue;
            };
            if qp.deadline().is_some_and(|t| t <= now) {
                io.drive(qp, now, transport::on_timers);
            }
        }
    }

    /// When one of this shard's QPs next needs its thread: a timer, or a rate limiter holding
    /// back packets.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.active
            .iter()
            .filter_map(|qpn| self.qps.get(qpn))
            // A QP with packets to send (requests, READ responses) also waits for its rate
            // limiter.
            .filter_map(|qp| {
                let pending = qp.sq.next != qp.sq.fetched || qp.recv.has_replies();
                let limiter = crate::dcqcn::wake_at(qp).filter(|_| pending);
                qp.deadline().into_iter().chain(limiter).min()
            })
            .min()
    }
}

/// The most payload bytes a thread's QPs keep unacknowledged together: what one QP's full
/// window of 4 KiB packets holds, twice. Each QP's window alone would let n QPs keep n windows
/// in flight, n times the frames one QP keeps, which at 1 MiB WRITEs over 16 QPs (16 × 64
/// packets of 4 KiB) no longer fit the caches the copies and CRCs run from: the CPU time per
/// MiB grew by a quarter to a third on both NICs (`write_profile 1M 1500 16` against
/// `write_profile 1M 1500 1`), with the same instructions. Counted in bytes, not packets: small
/// messages' packets take little room, and their QPs are not held back. Within the budget QPs
/// keep their whole windows (and their ACK coalescing): the QPs first in the pass send, the
/// rest wait their turn.
const IN_FLIGHT_BUDGET: u64 = 2 * crate::transport::window::MAX as u64 * 4096;

/// The payload bytes of each packet of `qp`'s oldest request (at least one): about what each of
/// its packets in flight, and the next it sends, takes (requests in a stream tend to be
/// alike).
fn packet_bytes(qp: &Qp) -> u32 {
    if qp.sq.is_empty() {
        return 1;
    }
    let length = u32::try_from(qp.sq.entry(qp.sq.head).wqe.length).unwrap_or(u32::MAX);
    length.min(qp.attrs.path_mtu.bytes()).max(1)
}

/// The payload bytes `qp` has sent and not yet seen acknowledged, about.
fn bytes_in_flight(qp: &Qp) -> u64 {
    u64::from(unacknowledged(qp)) * u64::from(packet_bytes(qp))
}

/// The packets `qp` has sent and not yet seen acknowledged.
fn unacknowledged(qp: &Qp) -> u32 {
    match qp.qp_type {
        QpType::Rc => psn::diff(qp.send.high, qp.send.una).max(0) as u32,
        QpType::Uc | QpType::Ud => 0,
    }
}

/// Checks a RoCE frame's ICRC, counting and logging a bad one.
pub(crate) fn verify_icrc(frame: &Frame<'_>, counters: &Counters) -> bool {
    let icrc = frame.icrc();
    if !icrc.is_ok() {
        counters::bump(&counters.rx_icrc_errors);
        Event::BadIcrc {
            expected: icrc.expected,
            found: icrc.found,
        }
        .log();
        return false;
    }
    Event::IcrcOk.log();
    true
}

/// The world as the threads share it: lent out by the port thread, read for a pass at a time.
pub(crate) struct World {
    pub tables: Tables,
    /// Thread `k`'s QPs, locked by thread `k` for its pass.
    pub shards: Vec<Mutex<Shard>>,
}

/// The world as the port thread holds it for a control request or a CM MAD: no other thread
/// is inside a pass, every QP is at hand.
pub(crate) struct Held {
    pub tables: Tables,
    pub shards: Vec<Shard>,
}

impl World {
    pub fn shard(&self, k: usize) -> MutexGuard<'_, Shard> {
        self.shards[k].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hold(self) -> Held {
        Held {
            tables: self.tables,
            shards: self
                .shards
                .into_iter()
                .map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()))
                .collect(),
        }
    }
}

impl Held {
    pub fn new(tables: Tables, threads: usize) -> Held {
        Held {
            tables,
            shards: (0..threads.max(1)).map(|_| Shard::default()).collect(),
        }
    }

    fn lend(self) -> World {
        World {
            tables: self.tables,
            shards: self.shards.into_iter().map(Mutex::new).collect(),
        }
    }

    pub fn threads(&self) -> usize {
        self.shards.len()
    }

    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.shards[shard_of(qpn, self.threads())].qps.get(qpn)
    }

    pub fn qps(&self) -> impl Iterator<Item = &Qp> {
        self.shards.iter().flat_map(|s| s.qps.iter())
    }

    /// The number a new host QP gets: the lowest free, so that consecutive QPs (one host's,
    /// a benchmark's) spread over every thread.
    pub fn free_qpn(&self) -> u32 {
        (FIRST_QPN..)
            .find(|qpn| self.qp(*qpn).is_none())
            .unwrap_or(u32::MAX)
    }

    /// Adds a QP under its number (from [`Held::free_qpn`], or [`GSI_QPN`]).
    pub fn insert(&mut self, qp: Qp) {
        self.tables.set_qp_owner(qp.qpn, Some(qp.owner));
        let k = shard_of(qp.qpn, self.threads());
        self.shards[k].qps.insert(qp);
    }

    pub fn remove(&mut self, qpn: u32) -> Option<Box<Qp>> {
        let k = shard_of(qpn, self.threads());
        let qp = self.shards[k].qps.remove(qpn)?;
        self.tables.set_qp_owner(qpn, None);
        Some(qp)
    }

    /// QP `qpn`'s shard with the tables, for driving one of its QPs.
    pub fn shard_of_qp(&mut self, qpn: u32) -> (&Tables, &mut Shard) {
        let k = shard_of(qpn, self.threads());
        (&self.tables, &mut self.shards[k])
    }
}

/// What the threads share besides the world.
pub(crate) struct Common {
    /// `None` while the port thread holds the world.
    world: RwLock<Option<World>>,
    /// Set when the device shuts down: the other threads stop.
    stopping: AtomicBool,
    /// The other threads' wake-up lines.
    workers: Box<[Arc<Waker>]>,
}

impl Common {
    pub fn new(held: Held) -> Arc<Common> {
        Arc::new(Common {
            workers: held.tables.wakers.iter().skip(1).cloned().collect(),
            world: RwLock::new(Some(held.lend())),
            stopping: AtomicBool::new(false),
        })
    }

    /// The world for one pass: `None` while the port thread holds it.
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, Option<World>> {
        self.world.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Port thread: takes the world out, once every other thread has finished its pass.
    pub fn hold(&self) -> Held {
        let mut world = self.world.write().unwrap_or_else(|e| e.into_inner());
        world
            .take()
            .expect("only the port thread holds the world, and it gives it back")
            .hold()
    }

    /// Port thread: gives the world back and wakes the other threads (what it did may have
    /// given their QPs work).
    pub fn lend(&self, held: Held) {
        *self.world.write().unwrap_or_else(|e| e.into_inner()) = Some(held.lend());
        self.wake_workers();
    }

    pub fn wake_workers(&self) {
        for waker in self.workers.iter() {
            waker.wake();
        }
    }

    /// Tells the other threads to stop, and wakes them to see it.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake_workers();
    }
}

/// The port thread's end of another thread's queues.
pub(crate) struct Line {
    /// Frames for the thread's QPs.
    pub rx: Arc<ArrayQueue<FrameBuf>>,
    /// Frames the thread built, for the link.
    pub out: Arc<ArrayQueue<FrameBuf>>,
    /// QPs whose hosts rang, checked by the port thread.
    pub ready: Arc<ReadyBits>,
    pub waker: Arc<Waker>,
}

impl Line {
    /// Queues a frame for the thread; false (the frame dropped) when its queue is full.
    pub fn push(&self, frame: FrameBuf) -> bool {
        self.rx.push(frame).is_ok()
    }
}

/// A thread's side of its queues, as the link its `Tx` sends on.
struct QueueLink {
    rx: Arc<ArrayQueue<FrameBuf>>,
    out: Arc<ArrayQueue<FrameBuf>>,
    port: Arc<Waker>,
    /// Frames queued since the port thread was last told.
    unannounced: bool,
}

impl Link for QueueLink {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        self.out
            .push(frame)
            .map_err(|_| io::Error::new(io::ErrorKind::WouldBlock, "the port's queue is full"))?;
        self.unannounced = true;
        Ok(())
    }

    /// Room for a full budget of packets after this one: ACKs and responses, which are sent
    /// regardless, still fit.
    fn can_send(&self) -> bool {
        self.out.len() + QUEUE / 4 < self.out.capacity()
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        Ok(self.rx.pop())
    }

    fn attach(&mut self, _pool: &Arc<BufPool>, _waker: &Arc<Waker>) {}

    /// One wake-up of the port thread per pass, not per frame.
    fn flush_sends(&mut self) -> u64 {
        if std::mem::take(&mut self.unannounced) {
            self.port.wake();
        }
        0
    }

    fn describe(&self) -> String {
        "the port thread's queue".into()
    }
}

/// A thread that runs shard `k` (k ≥ 1): its queued frames, its QPs' doorbells, work and
/// timers.
pub(crate) struct Worker {
    k: usize,
    common: Arc<Common>,
    tx: Tx,
    rx: Arc<ArrayQueue<FrameBuf>>,
    ready: Arc<ReadyBits>,
    waker: Arc<Waker>,
    counters: Arc<Counters>,
    pkeys: PKeyTable,
    /// When a QP of the shard next needs the thread, as of the last pass.
    deadline: Option<Instant>,
    pollfds: Vec<libc::pollfd>,
}

impl Worker {
    /// Thread `k`'s worker and the port thread's line to it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        k: usize,
        common: Arc<Common>,
        waker: Arc<Waker>,
        port: Arc<Waker>,
        pool: Arc<BufPool>,
        counters: Arc<Counters>,
        pkeys: PKeyTable,
        qpns: u32,
    ) -> (Worker, Line) {
        let rx = Arc::new(ArrayQueue::new(QUEUE));
        let out = Arc::new(ArrayQueue::new(QUEUE));
        let ready = Arc::new(ReadyBits::private(qpns));
        let link = QueueLink {
            rx: Arc::clone(&rx),
            out: Arc::clone(&out),
            port,
            unannounced: false,
        };
        let worker = Worker {
            k,
            common,
            tx: Tx::new(Box::new(link), pool, Arc::clone(&counters)),
            rx: Arc::clone(&rx),
            ready: Arc::clone(&ready),
            waker: Arc::clone(&waker),
            counters,
            pkeys,
            deadline: None,
            // A thread sleeps on its eventfd alone: room for it from the start, so that its
            // first sleep (however late) allocates nothing.
            pollfds: Vec::with_capacity(1),
        };
        let line = Line {
            rx,
            out,
            ready,
            waker,
        };
        (worker, line)
    }

    /// Runs until the device stops.
    pub fn run(mut self) {
        debug!(thread = self.k, "engine thread started");
        let mut idle = Idle::default();
        while !self.common.stopping.load(Ordering::SeqCst) {
            if self.pass() {
                idle.reset();
                continue;
            }
            if idle.keep_polling() {
                continue;
            }
            self.waker.prepare_sleep();
            if self.common.stopping.load(Ordering::SeqCst) || self.pass() {
                self.waker.awake();
                idle.reset();
                continue;
            }
            let timeout: Option<Duration> = self
                .deadline
                .map(|d| d.saturating_duration_since(Instant::now()));
            self.waker.sleep(&[], timeout, &mut self.pollfds);
            idle.reset();
        }
        debug!(thread = self.k, "engine thread stopped");
    }

    /// One pass over the shard: queued frames, doorbells, work, timers. Returns whether
    /// anything happened; nothing does while the port thread holds the world.
    fn pass(&mut self) -> bool {
        let common = Arc::clone(&self.common);
        let guard = common.read();
        let Some(world) = guard.as_ref() else {
            return false;
        };
        let mut shard = world.shard(self.k);
        let tables = &world.tables;
        let (tx, counters) = (&mut self.tx, &*self.counters);
        let now = Instant::now();
        let active = &mut shard.active;
        self.ready.drain(|qpn| active.insert(qpn));
        let received = shard.receive_queued(tables, tx, counters, &self.pkeys, &self.rx, now) > 0;
        if received {
            shard.flush_acks(tables, tx, counters, now);
        }
        let mut busy = received;
        // One clock read for sending and the timers, as on the port thread.
        let now = Instant::now();
        busy |= shard.transmit(tables, tx, counters, now);
        shard.timers(tables, tx, counters, now);
        self.deadline = shard.next_deadline();
        drop(shard);
        drop(guard);
        // As the port thread's pass does: what this one wrote is in host memory before it
        // looks for more work or sleeps.
        roce_hostmem::fence_writes();
        self.tx.flush_sends();
        if busy {
            trace!(thread = self.k, "pass");
        }
        busy
    }
}
