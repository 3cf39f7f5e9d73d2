//! A random mix of RC operations from node A to node B, a model of both hosts' memory computed
//! without faults, and the checks: every request completes exactly once, successfully and in
//! order; every SEND and WRITE with immediate lands in the right receive, in order; READ data
//! and atomic results are what a sequential execution gives; B's memory equals the model.
//!
//! A run is a function of its [`Case`], so a failure is replayed exactly by the one command
//! [`Case::replay_command`] prints.

use std::fmt;
use std::str::FromStr;

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;
use roce_nic::transport::EventKind;
use roce_nic::verbs::{Mtu, RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus};

use super::world::{Faults, Nanos, QpSetup, World};

/// Host memory of each node.
const MEMORY: usize = 1 << 20;
/// A: the data SENDs and WRITEs read; B: the memory WRITEs, READs (and their model) touch.
const DATA: usize = 256 << 10;
/// A: where READ data and atomic results land, used round robin.
const RESULTS: std::ops::Range<usize> = DATA..MEMORY - 64;
/// B: receive buffers, one slot per posted receive.
const RECV_SLOTS: usize = 32;
const RECV_SLOT: usize = 16 << 10;
/// B: the counters atomics work on.
const COUNTERS: usize = MEMORY - 64;
const N_COUNTERS: usize = 8;
/// The longest message.
pub const MAX_LEN: usize = 16 << 10;

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
    /// Requests A keeps outstanding.
    pub window: usize,
    pub max_rd_atomic: u8,
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
        format!("ROCE_SIM_CASE='{self}' cargo test -p roce-nic --test sim replay -- --nocapture")
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed={:#x},ops={},mtu={},psn={:#x},loss={},dup={},corrupt={},reorder={},rnr={},window={},rd={}",
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
            self.max_rd_atomic
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
    FetchAdd {
        counter: usize,
        add: u64,
        expect: u64,
    },
    CmpSwap {
        counter: usize,
        compare: u64,
        swap: u64,
        expect: u64,
    },
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

/// The model: A's data, B's memory and counters as a sequential execution leaves them.
struct Model {
    a_data: Vec<u8>,
    b_data: Vec<u8>,
    counters: [u64; N_COUNTERS],
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

impl Model {
    fn new(rng: &mut XorShiftRng) -> Model {
        let mut fill = |n: usize| (0..n).map(|_| rng.random()).collect::<Vec<u8>>();
        Model {
            a_data: fill(DATA),
            b_data: fill(DATA),
            counters: [0; N_COUNTERS],
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
                self.b_data[dst..dst + len].copy_from_slice(&self.a_data[src..src + len]);
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
                    expect: self.b_data[src..src + len].to_vec(),
                }
            }
            8 => {
                let counter = rng.random_range(0..N_COUNTERS);
                let add = rng.random_range(1..1000);
                let expect = self.counters[counter];
                self.counters[counter] = expect.wrapping_add(add);
                Op::FetchAdd {
                    counter,
                    add,
                    expect,
                }
            }
            _ => {
                let counter = rng.random_range(0..N_COUNTERS);
                let expect = self.counters[counter];
                let compare = if rng.random_bool(0.5) {
                    expect
                } else {
                    rng.random_range(0..5)
                };
                let swap = rng.random();
                if compare == expect {
                    self.counters[counter] = swap;
                }
                Op::CmpSwap {
                    counter,
                    compare,
                    swap,
                    expect,
                }
            }
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
    /// A: where its READ data or atomic result lands.
    result_at: usize,
}

/// Runs `case`. Err says what went wrong (and with `ROCE_SIM_TRACE` set, ends with the last
/// events of both nodes).
pub fn run(case: &Case) -> Result<Outcome, String> {
    let mut rng = XorShiftRng::seed_from_u64(case.seed);
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
    };
    let mut world = World::new(
        MEMORY,
        [setup(case.psn, 0), setup(0, case.psn)],
        case.faults(),
        case.seed ^ 0x5eed,
    );
    let mut model = Model::new(&mut rng);
    for (node, data) in world.nodes.iter().zip([&model.a_data, &model.b_data]) {
        node.memory.write(0, data).map_err(|e| e.to_string())?;
    }
    drive(case, &mut world, &mut rng, &mut model).map_err(|mut e| {
        for n in &world.nodes {
            let log = n.events.log.as_deref().unwrap_or_default();
            for (_, event) in &log[log.len().saturating_sub(60)..] {
                e.push_str(&format!("\n{}: {event}", n.name));
            }
        }
        e
    })
}

/// Posts the mix, runs the world and checks everything as it completes.
fn drive(
    case: &Case,
    world: &mut World,
    rng: &mut XorShiftRng,
    model: &mut Model,
) -> Result<Outcome, String> {
    let mtu = case.mtu.bytes() as usize;
    let mut posted: std::collections::VecDeque<Posted> = Default::default();
    let mut receives: std::collections::VecDeque<ExpectedReceive> = Default::default();
    let (mut next_op, mut completed, mut received) = (0usize, 0usize, 0usize);
    let mut result_at = RESULTS.start;
    let (mut recv_posted, mut recv_wr) = (0usize, 0u64);
    let mut next_recv_wake: Nanos = 0;
    let mut last_progress: Nanos = 0;

    loop {
        // A posts while its window has room.
        while next_op < case.ops && posted.len() < case.window {
            let op = model.op(rng, mtu);
            let n = match op {
                Op::Read { len, .. } => len,
                Op::FetchAdd { .. } | Op::CmpSwap { .. } => 8,
                _ => 0,
            };
            if result_at + n > RESULTS.end {
                result_at = RESULTS.start;
            }
            let a = &world.nodes[0];
            let b = &world.nodes[1];
            let local = |at: usize, len: usize| Sge {
                addr: a.va(at),
                length: len as u32,
                lkey: a.mr.lkey,
            };
            let (op_code, sge, fence) = match &op {
                Op::Write {
                    src,
                    dst,
                    len,
                    imm,
                    fence,
                } => {
                    let (remote_addr, rkey) = (b.va(*dst), b.mr.rkey);
                    let code = match imm {
                        Some(imm) => SendOp::RdmaWriteWithImm {
                            remote_addr,
                            rkey,
                            imm: *imm,
                        },
                        None => SendOp::RdmaWrite { remote_addr, rkey },
                    };
                    if let Some(imm) = imm {
                        receives.push_back(ExpectedReceive {
                            opcode: WcOpcode::RecvRdmaWithImm,
                            len: *len,
                            imm: Some(*imm),
                            src: None,
                        });
                    }
                    (code, local(*src, *len), *fence)
                }
                Op::Send { src, len, imm } => {
                    receives.push_back(ExpectedReceive {
                        opcode: WcOpcode::Recv,
                        len: *len,
                        imm: *imm,
                        src: Some(*src),
                    });
                    let code = match imm {
                        Some(imm) => SendOp::SendWithImm { imm: *imm },
                        None => SendOp::Send,
                    };
                    (code, local(*src, *len), false)
                }
                Op::Read { src, len, .. } => (
                    SendOp::RdmaRead {
                        remote_addr: b.va(*src),
                        rkey: b.mr.rkey,
                    },
                    local(result_at, *len),
                    false,
                ),
                Op::FetchAdd { counter, add, .. } => (
                    SendOp::AtomicFetchAndAdd {
                        remote_addr: b.va(COUNTERS + 8 * counter),
                        rkey: b.mr.rkey,
                        add: *add,
                    },
                    local(result_at, 8),
                    false,
                ),
                Op::CmpSwap {
                    counter,
                    compare,
                    swap,
                    ..
                } => (
                    SendOp::AtomicCmpAndSwp {
                        remote_addr: b.va(COUNTERS + 8 * counter),
                        rkey: b.mr.rkey,
                        compare: *compare,
                        swap: *swap,
                    },
                    local(result_at, 8),
                    false,
                ),
            };
            let mut flags = SendFlags::SIGNALED;
            if fence {
                flags = flags | SendFlags::FENCE;
            }
            let wr_id = next_op as u64;
            let sg_list = [sge];
            let wr = SendWr {
                wr_id,
                op: op_code,
                sg_list: if sge.length == 0 { &[] } else { &sg_list },
                flags,
                ud: None,
            };
            if !world.nodes[0].post_send(&wr) {
                return Err("A's send ring is full below the window".into());
            }
            posted.push_back(Posted {
                wr_id,
                op,
                result_at,
            });
            result_at += n;
            next_op += 1;
        }

        // B keeps receives posted: at once, or (RNR) only now and then.
        if !case.rnr || world.now >= next_recv_wake {
            let want = if case.rnr {
                recv_posted + rng.random_range(1..=3)
            } else {
                RECV_SLOTS
            };
            while recv_posted < want.min(RECV_SLOTS) {
                let b = &world.nodes[1];
                let slot = (recv_wr as usize) % RECV_SLOTS;
                let sge = Sge {
                    addr: b.va(DATA + slot * RECV_SLOT),
                    length: RECV_SLOT as u32,
                    lkey: b.mr.lkey,
                };
                let wr = RecvWr {
                    wr_id: recv_wr,
                    sg_list: &[sge],
                };
                if !world.nodes[1].post_recv(&wr) {
                    return Err("B's receive ring is full".into());
                }
                recv_posted += 1;
                recv_wr += 1;
            }
            if case.rnr {
                next_recv_wake = world.now + rng.random_range(10_000..200_000);
            }
        }

        world.settle_now();

        // A's completions: exactly once, in order, successful, with the right results.
        for wc in std::mem::take(&mut world.nodes[0].send_cqes) {
            let expected = posted.pop_front().ok_or(format!(
                "a completion for wr_id {} with nothing outstanding",
                wc.wr_id
            ))?;
            if wc.wr_id != expected.wr_id || wc.status != WcStatus::Success {
                return Err(format!(
                    "completion {:?} where wr_id {} was due to succeed",
                    wc, expected.wr_id
                ));
            }
            check_result(world, &expected)?;
            completed += 1;
            last_progress = world.now;
        }
        // B's receives: in order, with the right data.
        for wc in std::mem::take(&mut world.nodes[1].recv_cqes) {
            let expected = receives
                .pop_front()
                .ok_or(format!("an unexpected receive completion {wc:?}"))?;
            let slot = (wc.wr_id as usize) % RECV_SLOTS;
            if wc.status != WcStatus::Success
                || wc.wr_id != received as u64
                || wc.opcode != expected.opcode
                || wc.byte_len as usize != expected.len
                || expected.imm.is_some()
                    != (wc.wc_flags & roce_nic::verbs::wc_flags::WITH_IMM != 0)
                || expected.imm.is_some_and(|i| i != wc.imm_data)
            {
                return Err(format!("receive {received}: {wc:?}, expected {expected:?}"));
            }
            if let Some(src) = expected.src {
                let mut got = vec![0u8; expected.len];
                world.nodes[1]
                    .memory
                    .read(DATA + slot * RECV_SLOT, &mut got)
                    .map_err(|e| e.to_string())?;
                if got[..] != model.a_data[src..src + expected.len] {
                    return Err(format!("receive {received}: the SEND's data differs"));
                }
            }
            received += 1;
            recv_posted -= 1;
        }

        if completed == case.ops && receives.is_empty() && world.nodes.iter().all(|n| n.is_quiet())
        {
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
        if world.now - last_progress > 10_000_000_000 {
            return Err(format!(
                "stuck: no completion for 10 s of simulated time ({completed} of {} done)",
                case.ops
            ));
        }
        let host = (case.rnr && recv_posted < RECV_SLOTS).then_some(next_recv_wake);
        let can_post = next_op < case.ops && posted.len() < case.window;
        if !world.advance(host) && !can_post {
            return Err(format!(
                "nothing left to happen with {completed} of {} requests done, {} receives \
                 missing; A: {}; B: {}",
                case.ops,
                receives.len(),
                world.nodes[0].describe(),
                world.nodes[1].describe()
            ));
        }
    }

    // B's memory is the model's.
    let mut b_data = vec![0u8; DATA];
    world.nodes[1]
        .memory
        .read(0, &mut b_data)
        .map_err(|e| e.to_string())?;
    if let Some(at) = (0..DATA).find(|&i| b_data[i] != model.b_data[i]) {
        return Err(format!(
            "B's memory differs from the model at offset {at:#x}"
        ));
    }
    for (i, want) in model.counters.iter().enumerate() {
        let got = read_u64(world, 1, COUNTERS + 8 * i)?;
        if got != *want {
            return Err(format!("counter {i} is {got}, the model says {want}"));
        }
    }
    let a = &world.nodes[0];
    Ok(Outcome {
        messages: case.ops,
        simulated: world.now,
        frames: world.wire.stats.frames,
        lost: world.wire.stats.lost,
        retransmitted: a.counters.snapshot().retransmitted_packets,
        rnr_naks: a.events.count(EventKind::RnrWait),
        go_backs: a.events.count(EventKind::GoBack) + a.events.count(EventKind::RetransmitTimeout),
    })
}

fn read_u64(world: &World, node: usize, at: usize) -> Result<u64, String> {
    let mut b = [0u8; 8];
    world.nodes[node]
        .memory
        .read(at, &mut b)
        .map_err(|e| e.to_string())?;
    Ok(u64::from_ne_bytes(b))
}

/// A READ's data or an atomic's result, where it landed at A.
fn check_result(world: &World, posted: &Posted) -> Result<(), String> {
    match &posted.op {
        Op::Read { expect, .. } => {
            let mut got = vec![0u8; expect.len()];
            world.nodes[0]
                .memory
                .read(posted.result_at, &mut got)
                .map_err(|e| e.to_string())?;
            if got != *expect {
                return Err(format!("READ {}: the data differs", posted.wr_id));
            }
        }
        Op::FetchAdd { expect, .. } | Op::CmpSwap { expect, .. } => {
            let got = read_u64(world, 0, posted.result_at)?;
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
