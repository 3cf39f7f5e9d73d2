//! Two NICs and their hosts in one thread, on a simulated clock.
//!
//! Each [`Node`] is what the engine is around one RC QP: the QP with its rings (the host posts
//! into them exactly as a real host does), the host memory and its registration, and the I/O
//! the transport asks for — frames into reusable buffers, completions into a queue, events
//! into a tally. The [`World`] carries frames between the two nodes over a [`Wire`] that loses,
//! duplicates, reorders, corrupts and delays them with a seeded generator, and moves the clock
//! from one thing to do to the next. Nothing reads the wall clock, so a run is a function of
//! its seed.

use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;
use roce_hostmem::{Access, AccessError, MrKeys, MrTable, Region, VaBase};
use roce_nic::counters::Counters;
use roce_nic::pkey::PKeyTable;
use roce_nic::qp::{PortInfo, Qp};
use roce_nic::ring::{Producer, Ring};
use roce_nic::transport::{self, responder, Ctx, Event, EventKind, Fill, Output, Path};
use roce_nic::verbs::{
    AddressVector, Gid, Mtu, QpAttr, QpCap, QpState, QpType, RecvWr, SendWr, Wc,
};
use roce_nic::wqe;
use roce_wire::{EthernetAddress, Frame, FrameRepr};

/// Frame buffers: large enough for a 4096-byte MTU and every header.
pub const FRAME_SPACE: usize = 4096 + 256;
/// Frames a node takes in one batch (as the engine's receive budget).
const RX_BATCH: usize = 64;
/// Packets a QP's requester sends in one pass (as the engine's).
const TX_BUDGET: usize = 32;
/// Completion queue numbers of each node's QP.
pub const SEND_CQ: u32 = 0;
pub const RECV_CQ: u32 = 1;

/// Simulated time, in nanoseconds since the start.
pub type Nanos = u64;

/// What the wire does to frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    pub loss: f64,
    pub duplicate: f64,
    pub corrupt: f64,
    /// Probability that a frame is held back by up to `jitter` (and so overtaken).
    pub reorder: f64,
    pub delay: Nanos,
    pub jitter: Nanos,
}

/// How a node's QP is set up.
#[derive(Debug, Clone, Copy)]
pub struct QpSetup {
    pub mtu: Mtu,
    /// Our first send PSN; the peer's receive side starts there.
    pub sq_psn: u32,
    /// The peer's first send PSN.
    pub rq_psn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    /// retry_cnt 7 retries for ever, as Soft-RoCE reads it.
    pub rxe_compat: bool,
    /// IRN's low retransmission timer beside the configured one.
    pub rto_low: bool,
}

/// A frame on the wire.
struct InFlight {
    at: Nanos,
    seq: u64,
    to: usize,
    frame: Box<[u8]>,
    len: usize,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    /// Earliest first out of a max-heap.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// What an engine thread spends on its work, for a world whose nodes take time: a node then
/// works one pass at a time (up to [`RX_BATCH`] frames in, the coalesced ACK, up to
/// [`TX_BUDGET`] packets out, its timers), each frame costing it `base` + `per_byte` × its
/// length and leaving the moment it is built, and takes nothing in before the pass is over —
/// as the engine of `roce bench`'s in-process NICs does, whose round trip is mostly the
/// passes themselves. Without it (`World::cpu` is `None`) everything a node does takes no
/// time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cpu {
    /// A pass's own cost (polling the link, reading the clock, the timers).
    pub pass: Nanos,
    /// Per frame taken in or sent.
    pub base: Nanos,
    /// Per thousand bytes of a frame taken in or sent (the copy and the ICRC).
    pub per_kilobyte: Nanos,
    /// A thread that other threads take the core from now and then: after a pass that did
    /// something, with probability `.0`, it does nothing for up to `.1` (uniformly drawn) —
    /// as `roce bench`'s engines on a machine whose two cores run more threads than that.
    pub stalls: Option<(f64, Nanos)>,
}

impl Cpu {
    fn frame(&self, len: usize) -> Nanos {
        self.base + (len as Nanos * self.per_kilobyte) / 1000
    }
}

/// Frames between the nodes, with the faults applied as they are sent.
pub struct Wire {
    pub faults: Faults,
    rng: XorShiftRng,
    /// Frames on their way to each node.
    queue: [BinaryHeap<InFlight>; 2],
    seq: u64,
    /// Buffers to reuse: the simulation allocates nothing per frame once warm.
    free: Vec<Box<[u8]>>,
    pub stats: WireStats,
    /// A line rate, if the wire has one: then each direction sends one frame at a time.
    pub line: Option<Line>,
    /// When recording: each frame lost, as (when, towards which node, its PSN, an answer).
    pub lost_log: Option<Vec<(Nanos, usize, u32, bool)>>,
}

/// A line rate: a frame occupies its direction for its length at this rate before its delay
/// starts, and frames queue behind each other (as on a NIC's port). Without one, frames
/// travel in zero time and any number at once.
#[derive(Debug, Clone, Copy, Default)]
pub struct Line {
    pub bits_per_second: u64,
    /// When each direction (to node 0, to node 1) is free again.
    pub free_at: [Nanos; 2],
    /// How long each direction has been busy sending.
    pub busy: [Nanos; 2],
}

impl Line {
    pub fn new(bits_per_second: u64) -> Line {
        Line {
            bits_per_second,
            ..Line::default()
        }
    }

    /// Sends `len` bytes towards `to` at `now`: when their last bit is on the line.
    fn send(&mut self, now: Nanos, to: usize, len: usize) -> Nanos {
        let start = now.max(self.free_at[to]);
        let took = (len as u64 * 8 * 1_000_000_000).div_ceil(self.bits_per_second);
        self.free_at[to] = start + took;
        self.busy[to] += took;
        self.free_at[to]
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct WireStats {
    pub frames: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
}

impl Wire {
    pub fn new(faults: Faults, seed: u64) -> Wire {
        Wire {
            faults,
            rng: XorShiftRng::seed_from_u64(seed),
            queue: [BinaryHeap::new(), BinaryHeap::new()],
            seq: 0,
            free: Vec::new(),
            stats: WireStats::default(),
            line: None,
            lost_log: None,
        }
    }

    fn buffer(&mut self) -> Box<[u8]> {
        self.free
            .pop()
            .unwrap_or_else(|| vec![0u8; FRAME_SPACE].into_boxed_slice())
    }

    /// Puts a frame on the wire towards node `to` at time `now`.
    fn carry(&mut self, now: Nanos, to: usize, mut frame: Box<[u8]>, len: usize) {
        self.stats.frames += 1;
        // A frame lost on the way took its time on the sender's line all the same.
        let now = match &mut self.line {
            Some(line) => line.send(now, to, len),
            None => now,
        };
        let f = self.faults;
        if f.loss > 0.0 && self.rng.random_bool(f.loss) {
            self.stats.lost += 1;
            if let Some(log) = &mut self.lost_log {
                if let Ok(lost) = Frame::parse(&frame[..len]) {
                    let bth = lost.repr.bth;
                    log.push((now, to, bth.psn, bth.opcode.kind().is_response()));
                }
            }
            self.free.push(frame);
            return;
        }
        if f.corrupt > 0.0 && self.rng.random_bool(f.corrupt) {
            self.stats.corrupted += 1;
            // Past the Ethernet header: a flipped bit the ICRC (or a header check) must catch.
            let at = self.rng.random_range(14..len);
            frame[at] ^= 1 << self.rng.random_range(0..8);
        }
        let copies = if f.duplicate > 0.0 && self.rng.random_bool(f.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for copy in 0..copies {
            let mut at = now + f.delay;
            if f.reorder > 0.0 && f.jitter > 0 && self.rng.random_bool(f.reorder) {
                self.stats.reordered += 1;
                at += self.rng.random_range(1..=f.jitter);
            }
            let frame = if copy + 1 == copies {
                std::mem::take(&mut frame)
            } else {
                let mut b = self.buffer();
                b[..len].copy_from_slice(&frame[..len]);
                b
            };
            self.seq += 1;
            self.queue[to].push(InFlight {
                at,
                seq: self.seq,
                to,
                frame,
                len,
            });
        }
    }

    fn next_at(&self) -> Option<Nanos> {
        self.queue
            .iter()
            .filter_map(|q| q.peek())
            .map(|f| f.at)
            .min()
    }

    /// When the next frame on its way to node `to` arrives.
    fn next_to(&self, to: usize) -> Option<Nanos> {
        self.queue[to].peek().map(|f| f.at)
    }

    /// The earliest frame on its way to either node, if due by `now`.
    fn pop_due(&mut self, now: Nanos) -> Option<InFlight> {
        let to = (0..2)
            .filter(|&i| self.next_to(i).is_some_and(|at| at <= now))
            .min_by_key(|&i| self.queue[i].peek().map(|f| (f.at, f.seq)))?;
        self.queue[to].pop()
    }
}

/// How many events of each kind a node took.
#[derive(Debug, Clone)]
pub struct Tally {
    counts: Vec<u64>,
    /// Every event in order, when recording (scripted cases read it).
    pub log: Option<Vec<(EventKind, String)>>,
    /// The events that moved the QP to the error state, and what was refused before.
    pub errors: Vec<String>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            counts: vec![0; EventKind::ALL.len()],
            log: None,
            errors: Vec::new(),
        }
    }

    pub fn count(&self, kind: EventKind) -> u64 {
        self.counts[kind as usize]
    }

    fn add(&mut self, event: &Event<'_>) {
        let kind = event.kind();
        self.counts[kind as usize] += 1;
        if matches!(
            kind,
            EventKind::QpError | EventKind::Refused | EventKind::BadResponse
        ) {
            self.errors.push(format!("{event:?}"));
        }
        if let Some(log) = &mut self.log {
            log.push((kind, format!("{event:?}")));
        }
    }
}

/// One NIC with its host: an RC QP, its rings, the host's memory.
pub struct Node {
    pub name: &'static str,
    pub mrs: MrTable,
    ahs: HashMap<u32, Path>,
    pub counters: Counters,
    pub qp: Box<Qp>,
    sq: Producer,
    rq: Producer,
    slot: Vec<u8>,
    pub cap: QpCap,
    /// The host's memory, registered whole.
    pub memory: Arc<Region>,
    pub mr: MrKeys,
    /// Completions, as the host would poll them.
    pub send_cqes: Vec<Wc>,
    pub recv_cqes: Vec<Wc>,
    pub events: Tally,
    /// Frames the transport emitted, not yet on the wire.
    outbox: Vec<(Box<[u8]>, usize)>,
    free: Vec<Box<[u8]>>,
    ack_due: bool,
}

/// The transport's output inside a node.
struct NodeOut<'a> {
    outbox: &'a mut Vec<(Box<[u8]>, usize)>,
    free: &'a mut Vec<Box<[u8]>>,
    send_cqes: &'a mut Vec<Wc>,
    recv_cqes: &'a mut Vec<Wc>,
    events: &'a mut Tally,
}

impl Output for NodeOut<'_> {
    fn can_send(&self) -> bool {
        true
    }

    fn send(&mut self, repr: &FrameRepr, fill: &mut Fill<'_>) -> Result<(), AccessError> {
        let mut buf = self
            .free
            .pop()
            .unwrap_or_else(|| vec![0u8; FRAME_SPACE].into_boxed_slice());
        let mut filled = Ok(());
        match repr.emit_with(&mut buf, |payload| filled = fill(payload)) {
            Ok(len) if filled.is_ok() => {
                self.outbox.push((buf, len));
                Ok(())
            }
            Ok(_) => {
                self.free.push(buf);
                filled
            }
            Err(e) => panic!("the transport built a frame that cannot be emitted: {e}"),
        }
    }

    fn complete(&mut self, cq: u32, wc: &Wc) {
        match cq {
            SEND_CQ => self.send_cqes.push(*wc),
            _ => self.recv_cqes.push(*wc),
        }
    }

    fn event(&mut self, event: &Event<'_>) {
        self.events.add(event);
    }
}

fn mac(i: usize) -> EthernetAddress {
    EthernetAddress([0x02, 0, 0, 0, 0, i as u8 + 1])
}

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1))
}

impl Node {
    /// Node `index` (0 or 1) with `memory_len` bytes of host memory and a QP numbered `qpn`.
    pub fn new(name: &'static str, index: usize, qpn: u32, memory_len: usize) -> Node {
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let (sq_geometry, rq_geometry) = roce_nic::qp::ring_layout(&cap);
        let rings = Arc::new(Region::anonymous(rq_geometry.end()).expect("ring memory"));
        let qp = Qp::new(
            qpn,
            QpType::Rc,
            0,
            MrTable::new().alloc_pd(),
            SEND_CQ,
            RECV_CQ,
            cap,
            Arc::clone(&rings),
            true,
        )
        .expect("a QP");
        let mut mrs = MrTable::new();
        let pd = mrs.alloc_pd();
        assert_eq!(pd, qp.pd, "the QP's domain is the table's first");
        let memory = Arc::new(Region::anonymous(memory_len).expect("host memory"));
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = mrs
            .register(
                pd,
                Arc::clone(&memory),
                0,
                memory_len,
                access,
                VaBase::At(0x10_0000 * (index as u64 + 1)),
            )
            .expect("a registration");
        let sq = Producer::new(Ring::attach(Arc::clone(&rings), sq_geometry).expect("SQ"));
        let rq = Producer::new(Ring::attach(rings, rq_geometry).expect("RQ"));
        Node {
            name,
            mrs,
            ahs: HashMap::new(),
            counters: Counters::default(),
            qp: Box::new(qp),
            sq,
            rq,
            slot: vec![0; sq_geometry.slot_size.max(rq_geometry.slot_size)],
            cap,
            memory,
            mr,
            send_cqes: Vec::new(),
            recv_cqes: Vec::new(),
            events: Tally::new(),
            outbox: Vec::new(),
            free: Vec::new(),
            ack_due: false,
        }
    }

    /// Runs `f` on the QP with a transport context at `now`, then settles the QP as the engine
    /// does.
    fn drive<R>(&mut self, now: Instant, f: impl FnOnce(&mut Qp, &mut Ctx<'_>) -> R) -> R {
        let mut out = NodeOut {
            outbox: &mut self.outbox,
            free: &mut self.free,
            send_cqes: &mut self.send_cqes,
            recv_cqes: &mut self.recv_cqes,
            events: &mut self.events,
        };
        let mut ctx = Ctx {
            mrs: &self.mrs,
            ahs: &self.ahs,
            out: &mut out,
            counters: &self.counters,
            now,
            send_room: u32::MAX,
        };
        let result = f(&mut self.qp, &mut ctx);
        self.qp.settle(&mut ctx);
        result
    }

    /// Connects the QP: RESET → INIT → RTR → RTS towards `peer`.
    pub fn connect(&mut self, index: usize, peer_qpn: u32, setup: &QpSetup, now: Instant) {
        let peer = 1 - index;
        let port = PortInfo {
            mac: mac(index),
            gids: vec![Gid::from_ip(ip(index))],
            max_mtu: Mtu::M4096,
            neighbours: HashMap::from([(ip(peer), mac(peer))]),
            pkeys: PKeyTable::default(),
        };
        let access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        let mut rtr = QpAttr::rtr(
            AddressVector::to(Gid::from_ip(ip(peer)), 0),
            peer_qpn,
            setup.rq_psn,
            setup.mtu,
        );
        rtr.max_dest_rd_atomic = Some(setup.max_rd_atomic);
        rtr.min_rnr_timer = Some(setup.min_rnr_timer);
        let mut rts = QpAttr::rts(setup.sq_psn);
        rts.timeout = Some(setup.timeout);
        rts.retry_cnt = Some(setup.retry_cnt);
        rts.rnr_retry = Some(setup.rnr_retry);
        rts.max_rd_atomic = Some(setup.max_rd_atomic);
        self.qp.rxe_compat = setup.rxe_compat;
        self.qp.rto_low = setup.rto_low;
        for attr in [QpAttr::init(access), rtr, rts] {
            let (to, path) = self.qp.check_modify(&attr, &port).expect("a valid modify");
            let pkeys = port.pkeys.clone();
            self.drive(now, |qp, ctx| qp.apply_modify(&attr, to, path, &pkeys, ctx));
        }
    }

    /// Posts a send work request, as a host does: into the ring. False when the ring is full.
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> bool {
        if self.sq.free() == 0 {
            return false;
        }
        wqe::encode_send(&mut self.slot, wr, None, &self.cap).expect("a valid request");
        let pushed = self.sq.push(&self.slot);
        self.sq.publish();
        pushed
    }

    /// Posts a receive work request. False when the ring is full.
    pub fn post_recv(&mut self, wr: &RecvWr<'_>) -> bool {
        if self.rq.free() == 0 {
            return false;
        }
        wqe::encode_recv(&mut self.slot, wr, &self.cap).expect("a valid request");
        let pushed = self.rq.push(&self.slot);
        self.rq.publish();
        pushed
    }

    /// The address of `offset` bytes into the host memory, as the peer names it.
    pub fn va(&self, offset: usize) -> u64 {
        self.mr.va + offset as u64
    }

    /// Takes one frame in: the engine's checks that matter here (parse, ICRC, the QP), then the
    /// transport.
    pub fn receive(&mut self, bytes: &[u8], now: Instant) {
        let Ok(frame) = Frame::parse(bytes) else {
            return;
        };
        if !frame.icrc().is_ok() || frame.repr.bth.dest_qp != self.qp.qpn {
            return;
        }
        if !frame.repr.bth.opcode.kind().is_response() {
            self.qp.fetch_receives();
        }
        let ack_due = self.drive(now, |qp, ctx| transport::on_packet(qp, ctx, &frame));
        self.ack_due |= ack_due;
    }

    /// After a batch of frames: the coalesced ACK.
    pub fn end_batch(&mut self, now: Instant) {
        if std::mem::take(&mut self.ack_due) {
            self.drive(now, responder::flush_ack);
        }
    }

    /// The engine's pass over the QP: fetch posted requests, let the transport work, run due
    /// timers. Returns whether anything happened.
    pub fn work(&mut self, now: Instant) -> bool {
        let mut busy = false;
        if matches!(self.qp.state, QpState::Rts | QpState::Sqd) {
            let (qp_type, mtu) = (self.qp.qp_type, self.qp.attrs.path_mtu.bytes());
            busy |= self
                .qp
                .fetch_sends(|w| transport::requester::check(qp_type, mtu, &w.op, w.length, false))
                > 0;
        }
        busy |= self.drive(now, |qp, ctx| transport::poll(qp, ctx, TX_BUDGET));
        if self.qp.deadline().is_some_and(|t| t <= now) {
            self.drive(now, transport::on_timers);
            busy = true;
        }
        busy
    }

    /// The frames the node sent and nobody carried yet.
    pub fn take_outbox(&mut self) -> Vec<Vec<u8>> {
        let frames = self
            .outbox
            .drain(..)
            .map(|(b, len)| b[..len].to_vec())
            .collect();
        frames
    }

    /// The QP's state, for a failure's message.
    pub fn describe(&self) -> String {
        let sq = &self.qp.sq;
        format!(
            "{:?}, sq head {} next {} fetched {}, unfetched {}, {:?}",
            self.qp.state,
            sq.head,
            sq.next,
            sq.fetched,
            self.qp.unfetched(),
            self.qp.send
        )
    }

    /// Whether the QP has nothing in flight: every request completed, every answer sent.
    pub fn is_quiet(&self) -> bool {
        self.qp.sq.is_empty() && !self.qp.recv.has_replies() && !self.qp.recv.has_ack_pending()
    }
}

/// Two nodes, a wire and a clock.
pub struct World {
    pub nodes: [Node; 2],
    pub wire: Wire,
    start: Instant,
    pub now: Nanos,
    /// The engines' costs, if the nodes' work takes time.
    pub cpu: Option<Cpu>,
    /// With `cpu`: when each node's pass under way ends.
    busy_until: [Nanos; 2],
    /// Draws the engines' stalls (see [`Cpu::stalls`]), apart from the wire's faults.
    stall_rng: XorShiftRng,
}

impl World {
    /// Two connected nodes: `setups[i]` is node i's QP.
    pub fn new(memory_len: usize, setups: [QpSetup; 2], faults: Faults, seed: u64) -> World {
        let start = Instant::now();
        let mut nodes = [
            Node::new("A", 0, 0x11, memory_len),
            Node::new("B", 1, 0x12, memory_len),
        ];
        let qpns = [nodes[0].qp.qpn, nodes[1].qp.qpn];
        let trace = std::env::var_os("ROCE_SIM_TRACE").is_some();
        for (i, node) in nodes.iter_mut().enumerate() {
            if trace {
                node.events.log = Some(Vec::new());
            }
            node.connect(i, qpns[1 - i], &setups[i], start);
        }
        World {
            nodes,
            wire: Wire::new(faults, seed),
            start,
            now: 0,
            cpu: None,
            busy_until: [0; 2],
            stall_rng: XorShiftRng::seed_from_u64(seed ^ 0x5747_a115),
        }
    }

    pub fn instant(&self) -> Instant {
        self.start + Duration::from_nanos(self.now)
    }

    /// Delivers the frames due now and lets both nodes work, until nothing more happens at
    /// this instant.
    pub fn settle_now(&mut self) {
        if let Some(cpu) = self.cpu {
            for i in 0..2 {
                if self.busy_until[i] <= self.now {
                    self.pass(i, cpu);
                }
            }
            return;
        }
        loop {
            let mut busy = self.deliver_due();
            let now = self.instant();
            for i in 0..2 {
                busy |= self.nodes[i].work(now);
                self.flush_outbox(i);
            }
            if !busy {
                return;
            }
        }
    }

    /// One engine pass of node `i` that takes time (see [`Cpu`]): the frames due, the ACK, the
    /// QP's work and timers, with what it sends leaving as it is built.
    fn pass(&mut self, i: usize, cpu: Cpu) {
        let now = self.instant();
        let mut t = self.now + cpu.pass;
        let mut received = 0;
        while received < RX_BATCH && self.wire.next_to(i).is_some_and(|at| at <= self.now) {
            let InFlight { frame, len, .. } = self.wire.queue[i].pop().expect("a frame");
            t += cpu.frame(len);
            self.nodes[i].receive(&frame[..len], now);
            self.wire.free.push(frame);
            received += 1;
            t = self.flush_outbox_from(i, t, cpu);
        }
        if received > 0 {
            self.nodes[i].end_batch(now);
            t = self.flush_outbox_from(i, t, cpu);
        }
        let worked = self.nodes[i].work(now);
        let sent_at = t;
        t = self.flush_outbox_from(i, t, cpu);
        if received > 0 || worked || t > sent_at {
            if let Some((p, longest)) = cpu.stalls {
                if self.stall_rng.random_bool(p) {
                    t += self.stall_rng.random_range(1..=longest);
                }
            }
            self.busy_until[i] = t;
        }
    }

    /// Puts node `from`'s outbox on the wire, one frame after the other from `t` on; returns
    /// when the last has left.
    fn flush_outbox_from(&mut self, from: usize, mut t: Nanos, cpu: Cpu) -> Nanos {
        let node = &mut self.nodes[from];
        while node.free.len() < 64 {
            match self.wire.free.pop() {
                Some(b) => node.free.push(b),
                None => break,
            }
        }
        for (frame, len) in node.outbox.drain(..) {
            t += cpu.frame(len);
            self.wire.carry(t, 1 - from, frame, len);
        }
        t
    }

    fn deliver_due(&mut self) -> bool {
        let now = self.instant();
        let mut delivered = [0usize; 2];
        while let Some(InFlight { to, frame, len, .. }) = self.wire.pop_due(self.now) {
            self.nodes[to].receive(&frame[..len], now);
            self.wire.free.push(frame);
            delivered[to] += 1;
            if delivered[to] % RX_BATCH == 0 {
                self.nodes[to].end_batch(now);
            }
            self.flush_outbox(to);
        }
        for (i, n) in delivered.iter().enumerate() {
            if *n > 0 {
                self.nodes[i].end_batch(now);
                self.flush_outbox(i);
            }
        }
        delivered.iter().any(|n| *n > 0)
    }

    /// Puts node `from`'s outbox on the wire now (sending takes no time without [`Cpu`]).
    fn flush_outbox(&mut self, from: usize) {
        const FREE: Cpu = Cpu {
            pass: 0,
            base: 0,
            per_kilobyte: 0,
            stalls: None,
        };
        self.flush_outbox_from(from, self.now, FREE);
    }

    /// The next time something is due: a frame, a timer, or `host` (a host's own plan).
    pub fn next_event(&self, host: Option<Nanos>) -> Option<Nanos> {
        let timer = |n: &Node| {
            n.qp.deadline()
                .map(|d| d.saturating_duration_since(self.start).as_nanos() as Nanos)
        };
        if self.cpu.is_some() {
            // A node busy with a pass takes nothing in and runs no timer before it ends, and
            // when it ends it looks for more work.
            let per_node = (0..2).flat_map(|i| {
                let busy = self.busy_until[i];
                [self.wire.next_to(i), timer(&self.nodes[i])]
                    .into_iter()
                    .flatten()
                    .map(move |t| t.max(busy))
                    .chain((busy > self.now).then_some(busy))
            });
            return per_node.chain(host).min().map(|t| t.max(self.now));
        }
        let timers = self.nodes.iter().filter_map(timer);
        self.wire
            .next_at()
            .into_iter()
            .chain(timers)
            .chain(host)
            .min()
            .map(|t| t.max(self.now))
    }

    /// Moves the clock to the next thing due (never back). False when nothing is.
    pub fn advance(&mut self, host: Option<Nanos>) -> bool {
        match self.next_event(host) {
            Some(t) => {
                // A timer due "now" that did nothing would spin: step past it.
                self.now = if t == self.now { t + 1 } else { t };
                true
            }
            None => false,
        }
    }
}
