//! The script: what happens in a run, step by step, told as it happens with what was
//! observed — the target's keys, the work request, the frames, the NICs' decisions, the
//! target's memory and CPU time. The proofs are in [`proof`], the `send` scenario's second
//! half in [`send`].

mod proof;
mod send;

use std::ops::Range;
use std::time::Duration;

use roce_hostmem::Access;
use roce_nic::counters::Snapshot;
use roce_nic::verbs::{Gid, SendOp, Wc, WcStatus};
use roce_wire::aeth::Syndrome;

use super::initiator::{Initiator, WR_ID};
use super::memory::Window;
use super::Record;
use crate::cpu::{CpuUse, Sampler};
use crate::events::{since_epoch, NicEvent};
use crate::plan::{self, Payload, Plan};
use crate::rig::{Layout, Rig};
use crate::story::{Beat, Story};
use crate::target::{opcode_name, FromTarget, ToTarget};
use crate::text::packet::printable;
use crate::wire::Seen;
use crate::{DemoError, Scenario, Side};

/// How often the target's CPU time is sampled for the timeline.
const SAMPLING: Duration = Duration::from_millis(1);
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
    story.say(format!(
        "roce demo --scenario {}: {}",
        plan.scenario,
        plan.scenario.summary()
    ));
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
    /// Step 1: the target's memory and keys; the QPs connect; the target freezes or sleeps.
    fn target_shares(&mut self) -> Result<(), DemoError> {
        let shared = self.rig.target.shared.clone();
        let access = Access::from_bits(shared.access).unwrap_or_default();
        self.story
            .step("The target registers memory and shares its keys");
        self.story.say(format!(
            "The target program made {} bytes of host memory and registered them with its NIC \
             (ibv_reg_mr):",
            shared.len
        ));
        self.story.table(&[
            (
                "rkey",
                format!("{:#010x}  (the key a peer must present)", shared.rkey),
            ),
            (
                "VA",
                format!(
                    "{:#x}  (where the memory is in the target's address space)",
                    shared.va
                ),
            ),
            ("length", format!("{} bytes", shared.len)),
            ("access", access.to_string()),
        ]);
        let rkey = shared.rkey;
        if let Some(e) = self.rig.events.wait_for(0, SETTLING, |e| {
            e.nic == Side::Target
                && e.message == "memory registered"
                && e.number("rkey") == Some(u64::from(rkey))
        }) {
            self.story.tell(Beat::Decision(e));
        }
        match self.plan.scenario {
            Scenario::Read => self.story.say(format!(
                "It wrote {} at offset {:#x}, for the initiator to read.",
                quote(&self.plan.payload),
                self.plan.offset
            )),
            Scenario::Atomic => self.story.say(format!(
                "It set the 8-byte counter at offset {:#x} to {}.",
                plan::COUNTER_OFFSET,
                plan::COUNTER_START
            )),
            _ => {}
        }
        let gid = Gid::parse(&shared.gid)
            .map(|g| g.ip().to_string())
            .unwrap_or_default();
        self.story.say(
            "It shares what the initiator needs out of band (a pipe here; real programs use a \
             TCP socket or rdma_cm):",
        );
        self.story.table(&[
            ("QPN", format!("{:#08x}", shared.qpn)),
            ("PSN", shared.psn.to_string()),
            ("GID", format!("{gid}  (the NIC's IPv4 address as a GID)")),
            ("rkey", format!("{:#010x}", shared.rkey)),
            ("VA", hex_u64(shared.va)),
        ]);
        self.initiator.connect(&shared, self.plan)?;
        self.rig.target.ask(&ToTarget::Connect {
            qpn: self.initiator.qp.qp_num(),
            psn: self.initiator.psn,
            gid: self.initiator.gid.to_hex(),
        })?;
        self.story.say(format!(
            "The initiator made QP {:#08x} (first PSN {}) and connected it to the target's; the \
             target connected back. Both are ready to send (RTS).",
            self.initiator.qp.qp_num(),
            self.initiator.psn
        ));
        if self.plan.scenario == Scenario::Imm {
            self.sleep_on_completion()?;
        } else {
            self.freeze()?;
        }
        let cpu = self.rig.target.cpu()?;
        self.story.say(format!(
            "Its CPU time so far: {:.2} s (utime+stime), {} ns on a CPU by the scheduler's \
             count; context switches: {} voluntary, {} involuntary.",
            cpu.seconds(),
            cpu.on_cpu.as_nanos(),
            cpu.voluntary_switches,
            cpu.involuntary_switches
        ));
        self.cpu_before = Some(cpu);
        self.memory_before = self.window.read(&self.rig.target.region)?;
        self.sampler = Some(Sampler::start(self.rig.target.whom, SAMPLING));
        Ok(())
    }

    fn freeze(&mut self) -> Result<(), DemoError> {
        self.rig.target.freeze()?;
        if self.rig.target.is_process() {
            self.record.frozen = Some((since_epoch(), None));
            self.story.say(format!(
                "The demo freezes the target: SIGSTOP to process {}. Every thread of it is now \
                 stopped (state T): it cannot run a single instruction.",
                self.rig.target.shared.pid
            ));
        } else {
            self.story.say(format!(
                "The target thread {} now waits on its command channel and runs no code \
                 (in-process, it cannot be stopped alone; without --in-process the demo freezes \
                 a real process with SIGSTOP).",
                self.rig.target.shared.tid
            ));
        }
        Ok(())
    }

    /// `imm`: the target posts a receive and sleeps in its completion queue.
    fn sleep_on_completion(&mut self) -> Result<(), DemoError> {
        let FromTarget::ReceivePosted { addr, length } =
            self.rig.target.ask(&ToTarget::PostReceive)?
        else {
            return Err(DemoError::failed("the target did not post its receive"));
        };
        self.rig.target.tell(&ToTarget::AwaitCompletion {
            timeout_ms: TARGET_WAIT_MS,
        })?;
        // Into its wait before its CPU time is taken.
        self.rig.target.asleep()?;
        self.story.say(format!(
            "The target posted a receive (buffer at VA {addr:#x}, {length} bytes) for the \
             completion to come, and went to sleep waiting for it (ibv_get_cq_event)."
        ));
        Ok(())
    }

    /// Step 2: the work request, posted.
    fn post(&mut self) -> Result<(), DemoError> {
        let op = Initiator::operation(self.plan, &self.rig.target.shared);
        let name = wr_opcode(&op);
        self.story
            .step(format!("The initiator posts an {name} work request"));
        let len = if op.is_atomic() {
            8
        } else {
            self.plan.payload.len()
        };
        let sge = self.initiator.mr.sge(0, len as u32);
        let mut rows = vec![
            ("wr_id", WR_ID.to_string()),
            ("opcode", name.to_owned()),
            (
                "send_flags",
                "IBV_SEND_SIGNALED  (a completion when done)".to_owned(),
            ),
            (
                "sg_list",
                format!(
                    "addr {:#x}, length {}, lkey {:#010x}  (the initiator's buffer)",
                    sge.addr, sge.length, sge.lkey
                ),
            ),
        ];
        match op {
            SendOp::RdmaWrite { remote_addr, rkey }
            | SendOp::RdmaRead { remote_addr, rkey }
            | SendOp::RdmaWriteWithImm {
                remote_addr, rkey, ..
            } => {
                rows.push((
                    "remote_addr",
                    format!(
                        "{remote_addr:#x}  (the target's VA + {:#x})",
                        self.plan.offset
                    ),
                ));
                rows.push(("rkey", format!("{rkey:#010x}")));
            }
            SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add,
            } => {
                rows.push((
                    "remote_addr",
                    format!("{remote_addr:#x}  (the target's counter)"),
                ));
                rows.push(("rkey", format!("{rkey:#010x}")));
                rows.push(("compare_add", add.to_string()));
            }
            _ => {}
        }
        if let SendOp::RdmaWriteWithImm { imm, .. } = op {
            rows.push((
                "imm_data",
                format!("{imm:#010x}  (tells the target where: the offset)"),
            ));
        }
        self.story.table(&rows);
        if !matches!(self.plan.scenario, Scenario::Read | Scenario::Atomic) {
            self.story
                .say(format!("The buffer holds {}.", quote(&self.plan.payload)));
        }
        self.story.say(
            "ibv_post_send writes it into the send queue — a ring in memory the NIC reads — and \
             rings the NIC's doorbell. The initiator program's part is done.",
        );
        self.counters = [
            self.counters(Side::Initiator)?,
            self.counters(Side::Target)?,
        ];
        self.wire_mark = self.rig.wire.mark();
        self.event_mark = self.rig.events.mark();
        self.record.posted_at = since_epoch();
        self.initiator.post(op, self.plan)
    }

    /// Waits for the initiator's completion, showing progress, and for the NICs' last events.
    fn complete(&mut self) -> Result<Wc, DemoError> {
        let total = self.plan.payload.len() as u64;
        // Generous for a gigabyte through four processes on two shared cores.
        let timeout = Duration::from_secs(30) + Duration::from_secs(total >> 25);
        let to = if self.plan.scenario == Scenario::Read {
            Side::Initiator
        } else {
            Side::Target
        };
        let wire = std::sync::Arc::clone(&self.rig.wire);
        let story = &mut *self.story;
        let detailed = self.plan.detailed();
        let wc = self.initiator.completion(timeout, || {
            if !detailed {
                story.progress(wire.payload_to(to), total);
            }
        })?;
        self.record.completed_at = since_epoch();
        if !detailed {
            self.story.progress(total, total);
        }
        if wc.status != WcStatus::Success {
            return Err(DemoError::failed(format!(
                "the work request completed with an error: {}",
                wc.status
            )));
        }
        self.settle();
        Ok(wc)
    }

    /// Waits (a little) for the NICs' events about the completion to arrive.
    fn settle(&self) {
        if self.plan.detailed() {
            self.rig.events.wait_for(self.event_mark, SETTLING, |e| {
                e.nic == Side::Initiator && e.message == "send request completed"
            });
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    fn counters(&self, side: Side) -> Result<Snapshot, DemoError> {
        let ctx = match side {
            Side::Initiator => &self.rig.initiator,
            Side::Target => &self.rig.target_nic,
        };
        ctx.counters()
            .map_err(|e| DemoError::because("cannot read the NIC's counters", e))
    }

    /// Step 3: the frames the initiator's NIC sent for the work request, before any answer.
    fn packets(&mut self) {
        let frames = self.rig.wire.since(self.wire_mark);
        let first: Vec<&Seen> = frames
            .iter()
            .take_while(|f| f.from == Side::Initiator)
            .collect();
        self.story
            .step("The initiator's NIC turns the work request into packets");
        let mtu = self.plan.mtu.bytes();
        let what = match self.plan.scenario {
            Scenario::Read => {
                "A READ request carries no data, only where and how much: BTH and RETH.".to_owned()
            }
            Scenario::Atomic => {
                "An atomic is one packet: BTH and AtomicETH (address, rkey, the number to add)."
                    .to_owned()
            }
            _ => format!(
                "It reads the buffer by DMA and splits the message by the path MTU ({mtu} bytes) \
                 into {} packet(s), each with Ethernet, IPv4 and UDP (port 4791) headers, the \
                 transport headers, the data and an invariant CRC.",
                self.plan.packets()
            ),
        };
        self.story.say(what);
        let shown = first.len().min(plan::DETAILED_PACKETS as usize);
        for (i, frame) in first.iter().take(shown).enumerate() {
            self.story.tell(Beat::Packet {
                frame: (*frame).clone(),
                full: i == 0,
            });
            if !self.plan.detailed() {
                break;
            }
        }
        let total = self.rig.wire.count();
        if !self.plan.detailed() {
            self.story.say(format!(
                "… and so on: {total} frames crossed the wire for this one work request."
            ));
        }
    }

    /// Step 4: what the NICs did with the packets, in order, and the completion.
    fn reception(&mut self, wc: &Wc) -> Result<(), DemoError> {
        let title = match self.plan.scenario {
            Scenario::Write => "The target's NIC checks each packet and writes the data into memory; an ACK goes back",
            Scenario::Read => "The target's NIC checks the request and answers from memory",
            Scenario::Atomic => "The target's NIC adds to the counter in memory and sends back the value before",
            Scenario::Loss => "A packet is lost: the target's NIC asks for it, the initiator's NIC goes back",
            Scenario::Imm => "The target's NIC writes the data, then a completion wakes the target",
            Scenario::Send => "The target's NIC has nowhere to put the SEND",
        };
        self.story.step(title);
        if self.plan.detailed() {
            self.timeline(self.wire_mark, self.event_mark);
        } else {
            self.story.say(
                "(Too many packets to show each: the NICs logged only their exceptional \
                 decisions, and counted the rest.)",
            );
            for e in self.rig.events.since(self.event_mark) {
                if e.on_data_path() {
                    self.story.tell(Beat::Decision(e));
                }
            }
        }
        self.story.say(format!(
            "The initiator's completion: wr_id {} {} {}, {} bytes.",
            wc.wr_id,
            opcode_name(wc.opcode),
            wc.status,
            wc.byte_len
        ));
        let elapsed = self
            .record
            .completed_at
            .saturating_sub(self.record.posted_at);
        if !self.plan.detailed() {
            let bits = self.plan.payload.len() as f64 * 8.0;
            self.story.say(format!(
                "Moved {} bytes in {:.3} s: {:.2} Gbit/s.",
                self.plan.payload.len(),
                elapsed.as_secs_f64(),
                bits / elapsed.as_secs_f64().max(1e-9) / 1e9
            ));
        }
        self.counted()
    }

    /// The frames after the first wave and the NICs' decisions since the post, in time order.
    fn timeline(&mut self, wire_mark: usize, event_mark: usize) {
        let frames = self.rig.wire.since(wire_mark);
        let skip = if wire_mark == self.wire_mark {
            frames
                .iter()
                .take_while(|f| f.from == Side::Initiator)
                .count()
        } else {
            0
        };
        let events: Vec<NicEvent> = self
            .rig
            .events
            .since(event_mark)
            .into_iter()
            // Frames sent are shown as frames.
            .filter(|e| e.on_data_path() && e.message != "packet sent")
            .collect();
        let mut beats: Vec<(Duration, Beat)> = Vec::new();
        let mut shown_from = [false; 2];
        for frame in frames.into_iter().skip(skip) {
            let first = !shown_from[frame.from as usize];
            shown_from[frame.from as usize] = true;
            let beat = if first && !frame.dropped {
                Beat::Packet {
                    frame: frame.clone(),
                    full: false,
                }
            } else {
                Beat::PacketLine(frame.clone())
            };
            beats.push((frame.at, beat));
        }
        beats.extend(events.into_iter().map(|e| (e.at, Beat::Decision(e))));
        beats.sort_by_key(|(at, _)| *at);
        let mut frames_told = 0;
        let total = beats.len();
        for (told, (_, beat)) in beats.into_iter().enumerate() {
            if matches!(beat, Beat::Packet { .. } | Beat::PacketLine(_)) {
                if frames_told == TIMELINE_FRAMES {
                    self.story.say(format!(
                        "… and {} more frames and decisions (the pcap has every frame).",
                        total - told
                    ));
                    break;
                }
                frames_told += 1;
            }
            self.story.tell(beat);
        }
    }

    /// What each NIC counted since the post.
    fn counted(&mut self) -> Result<(), DemoError> {
        let after = [
            self.counters(Side::Initiator)?,
            self.counters(Side::Target)?,
        ];
        self.story
            .say("What each NIC counted meanwhile (as ethtool -S would show):");
        self.story.table(&[
            ("initiator NIC", changed(&after[0], &self.counters[0])),
            ("target NIC", changed(&after[1], &self.counters[1])),
        ]);
        self.counters = after;
        Ok(())
    }

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
            self.record.samples = sampler.finish();
        }
        self.record.frames = self.rig.wire.frames();
        self.record.frame_count = self.rig.wire.count();
        self.record
    }
}
