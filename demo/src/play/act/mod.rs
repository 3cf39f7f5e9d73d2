//! The script: what happens in a run, step by step, told as it happens with what was
//! observed — the target's keys, the work request, the frames, the NICs' decisions, the
//! target's memory and CPU time. Each step has its module: [`share`], [`post`], [`packets`],
//! [`proof`], and the `send` scenario's second half, [`send`].

mod packets;
mod post;
mod proof;
mod send;
mod share;

use std::ops::Range;
use std::time::Duration;

use roce_nic::counters::Snapshot;
use roce_nic::verbs::SendOp;
use roce_wire::aeth::Syndrome;

use super::initiator::Initiator;
use super::memory::Window;
use super::Record;
use crate::cpu::{CpuUse, Sampler};
use crate::plan::{self, Payload, Plan};
use crate::rig::{Layout, Rig};
use crate::story::Story;
use crate::text::packet::printable;
use crate::wire::Seen;
use crate::{DemoError, Scenario};

/// How long the NICs' last events may take to arrive after the completion.
const SETTLING: Duration = Duration::from_secs(2);
/// RNR NAKs the `send` scenario waits for before the target wakes.
const RNR_NAKS: usize = 2;
/// Frames a timeline shows at most: a long SEND's window of packets would fill screens.
const TIMELINE_FRAMES: usize = 40;
/// How long the target of `imm` and `send` may sleep waiting for its completion.
const TARGET_WAIT_MS: u64 = 30_000;

/// A run in progress.
struct Act<'a, 'o> {
    rig: &'a mut Rig,
    plan: &'a Plan,
    story: &'a mut Story<'o>,
    initiator: Initiator,
    /// Where the wire's frames and the NICs' events stood when the work request was posted.
    wire_mark: usize,
    event_mark: usize,
    counters: [Snapshot; 2],
    cpu_before: Option<CpuUse>,
    memory_before: Vec<u8>,
    window: Window,
    sampler: Option<Sampler>,
    record: Record,
}

/// Plays the plan's scenario on `rig`, telling it to `story`.
pub fn play(rig: &mut Rig, plan: &Plan, story: &mut Story) -> Result<Record, DemoError> {
    introduce(rig, plan, story);
    let initiator = Initiator::set_up(&rig.initiator, plan, rig.target.is_process())?;
    let touched = touched(plan);
    let region_len = rig.target.region.len() as u64;
    let mut act = Act {
        window: Window::around(&touched, region_len),
        record: Record {
            region_len,
            region_va: rig.target.shared.va,
            ..Record::default()
        },
        rig,
        plan,
        story,
        initiator,
        wire_mark: 0,
        event_mark: 0,
        counters: [Snapshot::default(); 2],
        cpu_before: None,
        memory_before: Vec::new(),
        sampler: None,
    };
    act.target_shares()?;
    act.post()?;
    match plan.scenario {
        Scenario::Send => act.send_refused_then_delivered()?,
        _ => {
            let wc = act.complete()?;
            act.packets();
            act.reception(&wc)?;
            act.proof()?;
        }
    }
    act.story.end_step();
    Ok(act.finish())
}

/// The bytes of the target's memory the operation touches.
fn touched(plan: &Plan) -> Range<u64> {
    match plan.scenario {
        Scenario::Atomic => plan::COUNTER_OFFSET..plan::COUNTER_OFFSET + 8,
        _ => plan.offset..plan.offset + plan.payload.len() as u64,
    }
}

/// What runs where, and what the scenario is about.
fn introduce(rig: &Rig, plan: &Plan, story: &mut Story) {
    let summary = match &rig.layout {
        Layout::Processes { .. } => plan.scenario.summary(),
        Layout::Threads { .. } => plan.scenario.summary_with("idle"),
    };
    story.say(format!("roce demo --scenario {}: {summary}", plan.scenario));
    match &rig.layout {
        Layout::Processes { nics, target } => {
            story.say(format!(
                "Two emulated RDMA NICs run as processes: {} (pid {}, 10.0.0.1) for the \
                 initiator and {} (pid {}, 10.0.0.2) for the target, cabled over loopback UDP \
                 through this demo, which sees every frame.",
                nics[0].0, nics[0].1, nics[1].0, nics[1].1
            ));
            story.say(format!(
                "The target program is process {target}; the initiator program is this demo \
                 (pid {}).",
                std::process::id()
            ));
        }
        Layout::Threads { nics, target } => {
            story.say(format!(
                "Two emulated RDMA NICs run in this process (--in-process): {} (10.0.0.1) and \
                 {} (10.0.0.2), cabled in memory through the demo's tap, which sees every frame.",
                nics[0], nics[1]
            ));
            story.say(format!(
                "The target program is thread {target} of this process; the initiator program \
                 is the demo."
            ));
        }
    }
}

/// The text of a short payload in quotes, or how many bytes of what.
fn quote(payload: &Payload) -> String {
    match payload {
        Payload::Pattern(n) => format!("{n} bytes of a test pattern"),
        p => format!("“{}”", printable(&p.bytes())),
    }
}

/// Bytes of memory the narration quotes at most.
const QUOTED: usize = 96;

/// The first bytes of something `whole` bytes long, quoted as text: `“…”`, at most
/// [`QUOTED`] of them, and `…` after the quote if there is more.
fn quote_bytes(bytes: &[u8], whole: usize) -> String {
    let cut = &bytes[..bytes.len().min(QUOTED)];
    let more = if cut.len() < whole { "…" } else { "" };
    format!("“{}”{more}", printable(cut))
}

fn hex_u64(v: u64) -> String {
    format!("{v:#x}")
}

/// The verbs name of a work request's opcode.
fn wr_opcode(op: &SendOp) -> &'static str {
    match op {
        SendOp::Send => "IBV_WR_SEND",
        SendOp::SendWithImm { .. } => "IBV_WR_SEND_WITH_IMM",
        SendOp::SendWithInv { .. } => "IBV_WR_SEND_WITH_INV",
        SendOp::RdmaWrite { .. } => "IBV_WR_RDMA_WRITE",
        SendOp::RdmaWriteWithImm { .. } => "IBV_WR_RDMA_WRITE_WITH_IMM",
        SendOp::RdmaRead { .. } => "IBV_WR_RDMA_READ",
        SendOp::AtomicCmpAndSwp { .. } => "IBV_WR_ATOMIC_CMP_AND_SWP",
        SendOp::AtomicFetchAndAdd { .. } => "IBV_WR_ATOMIC_FETCH_AND_ADD",
    }
}

/// The counters that changed between two snapshots, as `name +n`.
fn changed(after: &Snapshot, before: &Snapshot) -> String {
    let parts: Vec<String> = after
        .since(before)
        .iter()
        .filter(|(_, _, n)| *n != 0)
        .map(|(name, _, n)| format!("{name} +{n}"))
        .collect();
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(", ")
    }
}

/// Whether a frame is an RNR NAK.
fn is_rnr_nak(frame: &Seen) -> bool {
    matches!(
        frame.brief.and_then(|b| b.syndrome),
        Some(Syndrome::RnrNak { .. })
    )
}

impl Act<'_, '_> {
    /// Step 5: the proof.
    fn proof(&mut self) -> Result<(), DemoError> {
        let frozen = self.plan.scenario.target_frozen();
        self.story.step(match self.plan.scenario {
            Scenario::Read => "Proof: the target's memory was read while it did nothing",
            Scenario::Imm => "Proof: the data was in place before the target woke",
            _ => "Proof: the target's memory changed while it did nothing",
        });
        self.show_memory(frozen)?;
        self.data_proof()?;
        if frozen {
            self.cpu_unchanged()?;
        }
        self.icrc_proof();
        if self.plan.scenario == Scenario::Loss {
            self.retransmission_proof();
        }
        if self.plan.scenario == Scenario::Imm {
            self.woken_proof()?;
        } else {
            self.thaw_and_look()?;
        }
        Ok(())
    }

    /// Ends the run: the sampler stops, and what crossed the wire goes into the record.
    fn finish(mut self) -> Record {
        if let Some(sampler) = self.sampler.take() {
            self.record.samples = sampler.finish().pop().unwrap_or_default();
        }
        self.record.frames = self.rig.wire.frames();
        self.record.frame_count = self.rig.wire.count();
        self.record
    }
}
