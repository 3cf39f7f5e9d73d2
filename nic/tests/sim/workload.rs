//! A random mix of RC operations from node A to node B, a model of both hosts' memory computed
//! without faults, and the checks: every request completes exactly once, successfully and in
//! order; every SEND and WRITE with immediate lands in the right receive, in order; READ data
//! and atomic results are what a sequential execution gives; B's memory equals the model.
//!
//! A run is a function of its [`Case`], so a failure is replayed exactly by the one command
//! [`Case::replay_command`] prints.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;
use roce_nic::transport::EventKind;
use roce_nic::verbs::{Mtu, RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus};

use roce_tests::model::{Atomic, Model};

use super::world::{Faults, Nanos, QpSetup, World};

/// Host memory of each node.
const MEMORY: usize = 1 << 20;
/// The data this node's SENDs and WRITEs carry (nobody writes it).
const SOURCE: std::ops::Range<usize> = 0..128 << 10;
/// What the peer's WRITEs and READs touch (the model keeps a copy).
const TARGET: std::ops::Range<usize> = 128 << 10..256 << 10;
/// Where this node's READ data and atomic results land, used round robin.
const RESULTS: std::ops::Range<usize> = 256 << 10..512 << 10;
/// Receive buffers, one slot per posted receive.
const RECV: usize = 512 << 10;
const RECV_SLOTS: usize = 16;
const RECV_SLOT: usize = 16 << 10;
/// The counters the peer's atomics work on.
const COUNTERS: usize = MEMORY - 64;
const N_COUNTERS: usize = 8;
/// The longest message.
pub const MAX_LEN: usize = 16 << 10;
const DATA: usize = SOURCE.end;

/// Everything a run depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Case {
    pub seed: u64,
    pub ops: usize,
    pub mtu: Mtu,
    /// A's first PSN (B's expected PSN): near 2^24 to cross the wrap.
    pub psn: u32,
    pub loss: f64,
    pub duplicate: f64,
    pub corrupt: f64,
    pub reorder: f64,
    /// B posts receives late, so SENDs meet RNR NAKs.
    pub rnr: bool,
    /// Requests a requester keeps outstanding.
    pub window: usize,
    pub max_rd_atomic: u8,
    /// B sends a mix of its own to A at the same time.
    pub both_ways: bool,
    /// Both QPs run the low retransmission timer.
    pub rto_low: bool,
}

impl Case {
    pub fn faults(&self) -> Faults {
        Faults {
            loss: self.loss,
            duplicate: self.duplicate,
            corrupt: self.corrupt,
            reorder: self.reorder,
            delay: 2_000,
            jitter: 20_000,
        }
    }

    /// The one command that runs this case again, exactly.
    pub fn replay_command(&self) -> String {
        format!("ROCE_SIM_CASE='{self}' cargo test -p roce-nic --test sim -- --exact replay --nocapture")
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed={:#x},ops={},mtu={},psn={:#x},loss={},dup={},corrupt={},reorder={},rnr={},window={},rd={},both={},low={}",
            self.seed,
            self.ops,
            self.mtu.bytes(),
            self.psn,
            self.loss,
            self.duplicate,
            self.corrupt,
            self.reorder,
            self.rnr,
            self.window,
            self.max_rd_atomic,
            self.both_ways,
            self.rto_low
        )
    }
}

impl FromStr for Case {
    type Err = String;

    fn from_str(s: &str) -> Result<Case, String> {
        let mut case = Case {
            seed: 0,
            ops: 100,
            mtu: Mtu::M1024,
            psn: 0,
            loss: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            reorder: 0.0,
            rnr: false,
            window: 8,
            max_rd_atomic: 4,
            both_ways: false,
            rto_low: false,
        };
        let int = |v: &str| -> Result<u64, String> {
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            }
            .map_err(|e| format!("{v}: {e}"))
        };
        let float = |v: &str| v.parse::<f64>().map_err(|e| format!("{v}: {e}"));
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item.split_once('=').ok_or(format!("{item}: no ="))?;
            match key {
                "seed" => case.seed = int(value)?,
                "ops" => case.ops = int(value)? as usize,
                "mtu" => {
                    case.mtu = Mtu::from_bytes(int(value)? as u32).ok_or(format!("mtu {value}"))?
                }
                "psn" => case.psn = int(value)? as u32 & 0xff_ffff,
                "loss" => case.loss = float(value)?,
                "dup" => case.duplicate = float(value)?,
                "corrupt" => case.corrupt = float(value)?,
                "reorder" => case.reorder = float(value)?,
                "rnr" => case.rnr = value == "true",
                "window" => case.window = int(value)?.max(1) as usize,
                "rd" => case.max_rd_atomic = int(value)?.clamp(1, 16) as u8,
                "both" => case.both_ways = value == "true",
                "low" => case.rto_low = value == "true",
                _ => return Err(format!("unknown key {key}")),
            }
        }
        Ok(case)
    }
}

/// One request of the mix.
#[derive(Debug, Clone)]
enum Op {
    Write {
        src: usize,
        dst: usize,
        len: usize,
        imm: Option<u32>,
        fence: bool,
    },
    Send {
        src: usize,
        len: usize,
        imm: Option<u32>,
    },
    Read {
        src: usize,
        len: usize,
        expect: Vec<u8>,
    },
    Atomic(Atomic),
}

/// A receive B should complete: the message's length, immediate and (SEND) data.
#[derive(Debug)]
struct ExpectedReceive {
    opcode: WcOpcode,
    len: usize,
    imm: Option<u32>,
    /// SEND: where in A's data area the bytes came from.
    src: Option<usize>,
}

/// One direction's mix: the requester's source data, and the model of the responder's target
/// memory and counters as a sequential execution leaves them (shared with the soak suite).
struct Mix {
    a_data: Vec<u8>,
    target: Model,
    /// B ranges recent READs read: a WRITE over one of them waits for the READ (FENCE), since
    /// a responder may read the memory of a READ after it executed later requests.
    recent_reads: Vec<(usize, usize)>,
}

fn random_len(rng: &mut XorShiftRng, mtu: usize) -> usize {
    match rng.random_range(0..100) {
        0..5 => 0,
        5..50 => rng.random_range(1..=mtu),
        50..90 => rng.random_range(1..=(4 * mtu).min(MAX_LEN)),
        _ => rng.random_range(1..=MAX_LEN),
    }
}

impl Mix {
    fn new(rng: &mut XorShiftRng) -> Mix {
        let mut fill = |n: usize| (0..n).map(|_| rng.random()).collect::<Vec<u8>>();
        Mix {
            a_data: fill(DATA),
            target: Model::new(fill(DATA), N_COUNTERS),
            recent_reads: Vec::new(),
        }
    }

    fn op(&mut self, rng: &mut XorShiftRng, mtu: usize) -> Op {
        let imm = rng.random_bool(0.3).then(|| rng.random());
        let len = random_len(rng, mtu);
        match rng.random_range(0..10) {
            0..3 => {
                let src = rng.random_range(0..=DATA - len);
                let dst = rng.random_range(0..=DATA - len);
                let overlaps = |&(at, n): &(usize, usize)| dst < at + n && at < dst + len;
                let fence = self.recent_reads.iter().any(overlaps);
                self.target.write(dst, &self.a_data[src..src + len]);
                Op::Write {
                    src,
                    dst,
                    len,
                    imm,
                    fence,
                }
            }
            3..6 => Op::Send {
                src: rng.random_range(0..=DATA - len),
                len,
                imm,
            },
            6..8 => {
                let src = rng.random_range(0..=DATA - len);
                if self.recent_reads.len() == 64 {
                    self.recent_reads.remove(0);
                }
                self.recent_reads.push((src, len));
                Op::Read {
                    src,
                    len,
                    expect: self.target.read(src, len),
                }
            }
            _ => Op::Atomic(self.target.atomic(rng)),
        }
    }
}

/// What a run measured.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outcome {
    pub messages: usize,
    pub simulated: Nanos,
    pub frames: u64,
    pub lost: u64,
    pub retransmitted: u64,
    pub rnr_naks: u64,
    pub go_backs: u64,
}

/// A request posted and not yet completed: what to check when it does.
struct Posted {
    wr_id: u64,
    op: Op,
    /// Where its READ data or atomic result lands at the requester.
    result_at: usize,
}

/// One direction of traffic: a requester posting its mix to a responder, the model, and
/// what is owed.
struct Flow {
    from: usize,
    to: usize,
    rng: XorShiftRng,
    model: Mix,
    ops: usize,
    next_op: usize,
    posted: VecDeque<Posted>,
    completed: usize,
    result_at: usize,
    receives: VecDeque<ExpectedReceive>,
    received: usize,
    recv_posted: usize,
    recv_wr: u64,
    next_recv_wake: Nanos,
}

impl Flow {
    fn new(from: usize, to: usize, seed: u64, ops: usize) -> Flow {
        let mut rng = XorShiftRng::seed_from_u64(seed);
        let model = Mix::new(&mut rng);
        Flow {
            from,
            to,
            rng,
            model,
            ops,
            next_op: 0,
            posted: VecDeque::new(),
            completed: 0,
            result_at: RESULTS.start,
            receives: VecDeque::new(),
            received: 0,
            recv_posted: 0,
            recv_wr: 0,
            next_recv_wake: 0,
        }
    }

    fn done(&self) -> bool {
        self.completed == self.ops && self.receives.is_empty()
    }

    /// The requester posts while its window has room.
    fn post_requests(&mut self, case: &Case, world: &mut World) -> Result<(), String> {
        let mtu = case.mtu.bytes() as usize;
        while self.next_op < self.ops && self.posted.len() < case.window {
            let op = self.model.op(&mut self.rng, mtu);
            let n = match op {
                Op::Read { len, .. } => len,
                Op::Atomic(_) => 8,
                _ => 0,
            };
            if self.result_at + n > RESULTS.end {
                self.result_at = RESULTS.start;
            }
            let result_at = self.result_at;
            let a = &world.nodes[self.from];
            let b = &world.nodes[self.to];
            let local = |at: usize, len: usize| Sge {
                addr: a.va(at),
                length: len as u32,
                lkey: a.mr.lkey,
            };
            let rkey = b.mr.rkey;
            let (code, sge, fence) = match &op {
                Op::Write {
                    src,
                    dst,
                    len,
                    imm,
                    fence,
                } => {
                    let remote_addr = b.va(TARGET.start + dst);
                    let code = match imm {
                        Some(imm) => SendOp::RdmaWriteWithImm {
                            remote_addr,
                            rkey,
                            imm: *imm,
                        },
                        None => SendOp::RdmaWrite { remote_addr, rkey },
                    };
                    if let Some(imm) = imm {
                        self.receives.push_back(ExpectedReceive {
                            opcode: WcOpcode::RecvRdmaWithImm,
                            len: *len,
                            imm: Some(*imm),
                            src: None,
                        });
                    }
                    (code, local(SOURCE.start + src, *len), *fence)
                }
                Op::Send { src, len, imm } => {
                    self.receives.push_back(ExpectedReceive {
                        opcode: WcOpcode::Recv,
                        len: *len,
                        imm: *imm,
                        src: Some(*src),
                    });
                    let code = match imm {
                        Some(imm) => SendOp::SendWithImm { imm: *imm },
                        None => SendOp::Send,
                    };
                    (code, local(SOURCE.start + src, *len), false)
                }
                Op::Read { src, len, .. } => (
                    SendOp::RdmaRead {
                        remote_addr: b.va(TARGET.start + src),
                        rkey,
                    },
                    local(result_at, *len),
                    false,
                ),
                Op::Atomic(atomic) => (
                    atomic.send_op(b.va(COUNTERS + 8 * atomic.counter), rkey),
                    local(result_at, 8),
                    false,
                ),
            };
            let mut flags = SendFlags::SIGNALED;
            if fence {
                flags = flags | SendFlags::FENCE;
            }
            let wr_id = self.next_op as u64;
            let sg_list = [sge];
            let wr = SendWr {
                wr_id,
                op: code,
                sg_list: if sge.length == 0 { &[] } else { &sg_list },
                flags,
                ud: None,
            };
            if !world.nodes[self.from].post_send(&wr) {
                return Err("the send ring is full below the window".into());
            }
            self.posted.push_back(Posted {
                wr_id,
                op,
                result_at,
            });
            self.result_at += n;
            self.next_op += 1;
        }
        Ok(())
    }

    /// The responder's host keeps receives posted: at once, or (RNR) only now and then.
    fn post_receives(&mut self, case: &Case, world: &mut World) -> Result<(), String> {
        if case.rnr && world.now < self.next_recv_wake {
            return Ok(());
        }
        let want = if case.rnr {
            self.recv_posted + self.rng.random_range(1..=3)
        } else {
            RECV_SLOTS
        };
        while self.recv_posted < want.min(RECV_SLOTS) {
            let b = &world.nodes[self.to];
            let slot = (self.recv_wr as usize) % RECV_SLOTS;
            let sge = Sge {
                addr: b.va(RECV + slot * RECV_SLOT),
                length: RECV_SLOT as u32,
                lkey: b.mr.lkey,
            };
            let wr = RecvWr {
                wr_id: self.recv_wr,
                sg_list: &[sge],
            };
            if !world.nodes[self.to].post_recv(&wr) {
                return Err("the receive ring is full".into());
            }
            self.recv_posted += 1;
            self.recv_wr += 1;
        }
        if case.rnr {
            self.next_recv_wake = world.now + self.rng.random_range(10_000..200_000);
        }
        Ok(())
    }

    /// When the responder's host next posts receives, if it waits for that.
    fn host_wake(&self, case: &Case) -> Option<Nanos> {
        (case.rnr && self.recv_posted < RECV_SLOTS).then_some(self.next_recv_wake)
    }

    /// The requester's completions: exactly once, in order, successful, with the right results.
    fn check_completions(&mut self, world: &mut World) -> Result<bool, String> {
        let cqes = std::mem::take(&mut world.nodes[self.from].send_cqes);
        let progress = !cqes.is_empty();
        for wc in cqes {
            let expected = self.posted.pop_front().ok_or(format!(
                "a completion for wr_id {} with nothing outstanding",
                wc.wr_id
            ))?;
            if wc.wr_id != expected.wr_id || wc.status != WcStatus::Success {
                return Err(format!(
                    "completion {:?} where wr_id {} was due to succeed",
                    wc, expected.wr_id
                ));
            }
            self.check_result(world, &expected)?;
            self.completed += 1;
        }
        Ok(progress)
    }

    /// A READ's data or an atomic's result, where it landed at the requester.
    fn check_result(&self, world: &World, posted: &Posted) -> Result<(), String> {
        match &posted.op {
            Op::Read { expect, .. } => {
                let got = read(world, self.from, posted.result_at, expect.len())?;
                if got != *expect {
                    return Err(format!("READ {}: the data differs", posted.wr_id));
                }
            }
            Op::Atomic(Atomic { expect, .. }) => {
                let got = read_u64(world, self.from, posted.result_at)?;
                if got != *expect {
                    return Err(format!(
                        "atomic {}: returned {got}, a sequential execution {expect}",
                        posted.wr_id
                    ));
                }
            }
            Op::Write { .. } | Op::Send { .. } => {}
        }
        Ok(())
    }

    /// The responder's receives: in order, with the right data.
    fn check_receives(&mut self, world: &mut World) -> Result<(), String> {
        for wc in std::mem::take(&mut world.nodes[self.to].recv_cqes) {
            let received = self.received;
            let expected = self
                .receives
                .pop_front()
                .ok_or(format!("an unexpected receive completion {wc:?}"))?;
            let slot = (wc.wr_id as usize) % RECV_SLOTS;
            let with_imm = wc.wc_flags & roce_nic::verbs::wc_flags::WITH_IMM != 0;
            if wc.status != WcStatus::Success
                || wc.wr_id != received as u64
                || wc.opcode != expected.opcode
                || wc.byte_len as usize != expected.len
                || expected.imm.is_some() != with_imm
                || expected.imm.is_some_and(|i| i != wc.imm_data)
            {
                return Err(format!("receive {received}: {wc:?}, expected {expected:?}"));
            }
            if let Some(src) = expected.src {
                let got = read(world, self.to, RECV + slot * RECV_SLOT, expected.len)?;
                if got[..] != self.model.a_data[src..src + expected.len] {
                    return Err(format!("receive {received}: the SEND's data differs"));
                }
            }
            self.received += 1;
            self.recv_posted -= 1;
        }
        Ok(())
    }

    /// At the end: the responder's memory is the model's.
    fn check_memory(&self, world: &World) -> Result<(), String> {
        let target = read(world, self.to, TARGET.start, DATA)?;
        if let Some(at) = (0..DATA).find(|&i| target[i] != self.model.target.memory[i]) {
            return Err(format!(
                "{}'s memory differs from the model at offset {at:#x}",
                world.nodes[self.to].name
            ));
        }
        for (i, want) in self.model.target.counters.iter().enumerate() {
            let got = read_u64(world, self.to, COUNTERS + 8 * i)?;
            if got != *want {
                return Err(format!("counter {i} is {got}, the model says {want}"));
            }
        }
        Ok(())
    }
}

/// Runs `case`. Err says what went wrong (and with `ROCE_SIM_TRACE` set, ends with the last
/// events of both nodes).
pub fn run(case: &Case) -> Result<Outcome, String> {
    let setup = |sq_psn, rq_psn| QpSetup {
        mtu: case.mtu,
        sq_psn,
        rq_psn,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        max_rd_atomic: case.max_rd_atomic,
        rxe_compat: true,
        rto_low: case.rto_low,
    };
    // B's own PSNs start half the space away: both wrap in a long run.
    let b_psn = (case.psn + (1 << 23)) & 0xff_ffff;
    let mut world = World::new(
        MEMORY,
        [setup(case.psn, b_psn), setup(b_psn, case.psn)],
        case.faults(),
        case.seed ^ 0x5eed,
    );
    let mut flows = vec![Flow::new(0, 1, case.seed, case.ops)];
    if case.both_ways {
        flows.push(Flow::new(1, 0, case.seed.rotate_left(17) ^ 0xb, case.ops));
    }
    for flow in &flows {
        let write = |node: usize, at: usize, data: &[u8]| {
            world.nodes[node]
                .memory
                .write(at, data)
                .map_err(|e| e.to_string())
        };
        write(flow.from, SOURCE.start, &flow.model.a_data)?;
        write(flow.to, TARGET.start, &flow.model.target.memory)?;
    }
    drive(case, &mut world, &mut flows).map_err(|mut e| {
        for n in &world.nodes {
            let log = n.events.log.as_deref().unwrap_or_default();
            for (_, event) in &log[log.len().saturating_sub(60)..] {
                e.push_str(&format!("\n{}: {event}", n.name));
            }
        }
        e
    })
}

/// Runs the world, posting and checking as it goes, until every flow is done.
fn drive(case: &Case, world: &mut World, flows: &mut [Flow]) -> Result<Outcome, String> {
    let mut last_progress: Nanos = 0;
    loop {
        for flow in flows.iter_mut() {
            flow.post_requests(case, world)?;
            flow.post_receives(case, world)?;
        }
        world.settle_now();
        for flow in flows.iter_mut() {
            if flow.check_completions(world)? {
                last_progress = world.now;
            }
            flow.check_receives(world)?;
        }
        if flows.iter().all(Flow::done) && world.nodes.iter().all(|n| n.is_quiet()) {
            break;
        }
        for node in &world.nodes {
            if node.qp.state != roce_nic::verbs::QpState::Rts {
                return Err(format!(
                    "{}'s QP went to {}: {:?}",
                    node.name, node.qp.state, node.events.errors
                ));
            }
        }
        let done: usize = flows.iter().map(|f| f.completed).sum();
        // A thousand retransmission timeouts (or RNR waits by the hundred thousand).
        if world.now - last_progress > 1_000_000_000 {
            return Err(format!(
                "stuck: no completion for 1 s of simulated time ({done} requests done)"
            ));
        }
        let host = flows.iter().filter_map(|f| f.host_wake(case)).min();
        let can_post = flows
            .iter()
            .any(|f| f.next_op < f.ops && f.posted.len() < case.window);
        if !world.advance(host) && !can_post {
            return Err(format!(
                "nothing left to happen with {done} requests done; A: {}; B: {}",
                world.nodes[0].describe(),
                world.nodes[1].describe()
            ));
        }
    }
    for flow in flows.iter() {
        flow.check_memory(world)?;
    }
    let count = |kind| {
        world
            .nodes
            .iter()
            .map(|n| n.events.count(kind))
            .sum::<u64>()
    };
    Ok(Outcome {
        messages: flows.iter().map(|f| f.ops).sum(),
        simulated: world.now,
        frames: world.wire.stats.frames,
        lost: world.wire.stats.lost,
        retransmitted: world
            .nodes
            .iter()
            .map(|n| n.counters.snapshot().retransmitted_packets)
            .sum(),
        rnr_naks: count(EventKind::RnrWait),
        go_backs: count(EventKind::GoBack) + count(EventKind::RetransmitTimeout),
    })
}

fn read(world: &World, node: usize, at: usize, len: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; len];
    world.nodes[node]
        .memory
        .read(at, &mut v)
        .map_err(|e| e.to_string())?;
    Ok(v)
}

fn read_u64(world: &World, node: usize, at: usize) -> Result<u64, String> {
    let got = read(world, node, at, 8)?;
    Ok(u64::from_ne_bytes(got.try_into().expect("8 bytes")))
}
