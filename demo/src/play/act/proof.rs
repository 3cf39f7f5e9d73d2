//! The proof lines: each checks something observed — the bytes in the target's memory, its CPU
//! time and context switches, the ICRCs on the wire, the retransmission — and says whether it
//! held.

use roce_nic::transport::EventKind;
use roce_wire::aeth::{NakCode, Syndrome};

use super::{quote_bytes, touched, Act};
use crate::events::since_epoch;
use crate::plan::{self, Payload};
use crate::rig::ANSWER;
use crate::story::Beat;
use crate::target_host::protocol::REPORTED;
use crate::target_host::{FromTarget, ToTarget};
use crate::wire::LISTED;
use crate::{DemoError, Scenario, Side};

/// Bytes per line of a memory dump: the window ends a line after the bytes it shows.
const LINE: u64 = 16;

fn same(changed: bool) -> &'static str {
    if changed {
        "CHANGED"
    } else {
        "unchanged"
    }
}

impl Act<'_, '_> {
    /// The target's memory around the operation, before and after, read through the demo's
    /// own mapping of it.
    pub(super) fn show_memory(&mut self, frozen: bool) -> Result<(), DemoError> {
        let after = self.window.read(&self.rig.target.region)?;
        let when = if frozen && self.rig.target.is_process() {
            ", while the target is still frozen"
        } else {
            ""
        };
        let range = touched(self.plan);
        let shown = self.window.base + self.window.len as u64;
        let part = if shown < range.end {
            format!(
                " (the first {} of {} bytes)",
                shown - LINE - range.start,
                range.end - range.start
            )
        } else {
            String::new()
        };
        self.story.say(format!(
            "The target's memory at offsets {:#x}..{shown:#x}{part}, read by the demo through \
             its own mapping of it{when}:",
            self.window.base,
        ));
        if after != self.memory_before {
            self.record.written = Some(range);
        } else if self.plan.scenario == Scenario::Read {
            self.record.read = Some(range);
        }
        self.story.tell(Beat::Memory {
            base: self.window.base,
            before: self.memory_before.clone(),
            after,
        });
        Ok(())
    }

    /// The bytes that moved are the right ones, every one of them.
    pub(super) fn data_proof(&mut self) -> Result<(), DemoError> {
        let plan = self.plan;
        let n = plan.payload.len();
        let target = &self.rig.target.region;
        match plan.scenario {
            Scenario::Read => {
                let diff = plan.payload.first_difference(&self.initiator.buffer, 0)?;
                self.story.proof(
                    diff.is_none(),
                    match diff {
                        None => format!(
                            "data verified byte for byte: the {n} bytes the initiator read are \
                             the ones at offset {:#x} of the target's memory",
                            plan.offset
                        ),
                        Some(i) => format!("the data the initiator read differs from the target's, first at byte {i}"),
                    },
                );
                let untouched = plan
                    .payload
                    .first_difference(target, plan.offset as usize)?;
                self.story.proof(
                    untouched.is_none(),
                    "the target's memory is as it left it: a READ does not write",
                );
            }
            Scenario::Atomic => {
                let mut counter = [0u8; 8];
                target
                    .read(plan::COUNTER_OFFSET as usize, &mut counter)
                    .map_err(|e| DemoError::because("cannot read the counter", e))?;
                let now = u64::from_ne_bytes(counter);
                let original =
                    u64::from_ne_bytes(self.initiator.read(8)?.try_into().unwrap_or_default());
                let want = plan::COUNTER_START + plan::COUNTER_ADD;
                self.story.proof(
                    now == want,
                    format!(
                        "counter verified: {} + {} = {now} in the target's memory",
                        plan::COUNTER_START,
                        plan::COUNTER_ADD
                    ),
                );
                self.story.proof(
                    original == plan::COUNTER_START,
                    format!("the initiator received the value before the add: {original}"),
                );
            }
            _ => {
                let diff = plan
                    .payload
                    .first_difference(target, plan.offset as usize)?;
                self.story.proof(
                    diff.is_none(),
                    match diff {
                        None => format!(
                            "data verified byte for byte: the {n} bytes at offset {:#x} of the \
                             target's memory are the ones the initiator sent",
                            plan.offset
                        ),
                        Some(i) => format!(
                            "the target's memory differs from what the initiator sent, first at byte {i}"
                        ),
                    },
                );
            }
        }
        Ok(())
    }

    /// CPU time, time on a CPU and context switches of the target: the same as before the
    /// work request was posted.
    pub(super) fn cpu_unchanged(&mut self) -> Result<(), DemoError> {
        let after = self.rig.target.cpu()?;
        let Some(before) = self.cpu_before else {
            return Ok(());
        };
        let while_ = if self.rig.target.is_process() {
            "across the frozen interval"
        } else {
            "while it waited"
        };
        self.story.proof(
            after.ticks == before.ticks,
            format!(
                "target CPU time: {:.2} s before, {:.2} s after ({}) {while_}",
                before.seconds(),
                after.seconds(),
                same(after.ticks != before.ticks)
            ),
        );
        self.story.proof(
            after.on_cpu == before.on_cpu,
            format!(
                "target time on a CPU (schedstat): {} ns before, {} ns after ({})",
                before.on_cpu.as_nanos(),
                after.on_cpu.as_nanos(),
                same(after.on_cpu != before.on_cpu)
            ),
        );
        self.story.proof(
            after.switches() == before.switches(),
            format!(
                "target context switches: {} voluntary and {} involuntary before, {} and {} after ({})",
                before.voluntary_switches,
                before.involuntary_switches,
                after.voluntary_switches,
                after.involuntary_switches,
                same(after.switches() != before.switches())
            ),
        );
        Ok(())
    }

    /// Every RoCE frame on the wire carried a valid ICRC.
    pub(super) fn icrc_proof(&mut self) {
        let frames = self.rig.wire.frames();
        let roce: Vec<_> = frames.iter().filter_map(|f| f.brief).collect();
        let bad = roce.iter().filter(|b| !b.icrc_ok).count();
        let which = if frames.len() >= LISTED {
            format!("the first {} RoCE frames on the wire", roce.len())
        } else {
            format!("all {} RoCE frames on the wire", roce.len())
        };
        self.story.proof(
            bad == 0,
            if bad == 0 {
                format!("{which} carry a valid ICRC")
            } else {
                format!("{bad} of {which} carry a bad ICRC")
            },
        );
    }

    /// `loss`: the lost packet was asked for and sent again.
    pub(super) fn retransmission_proof(&mut self) {
        let frames = self.rig.wire.since(self.wire_mark);
        let Some(lost) = frames.iter().find(|f| f.dropped) else {
            self.story.proof(false, "no packet was lost on the wire");
            return;
        };
        let psn = lost.brief.map(|b| b.psn).unwrap_or_default();
        let nak = frames.iter().find(|f| {
            f.from == Side::Target
                && f.brief.is_some_and(|b| {
                    b.psn == psn && b.syndrome == Some(Syndrome::Nak(NakCode::PSN_SEQUENCE_ERROR))
                })
        });
        self.story.proof(
            nak.is_some(),
            match nak {
                Some(n) => format!(
                    "sequence NAK seen: the target's NIC asked for PSN {psn} again (frame {})",
                    n.number
                ),
                None => format!("no sequence NAK for PSN {psn} was seen"),
            },
        );
        let again = frames.iter().find(|f| {
            f.from == Side::Initiator
                && f.number > lost.number
                && !f.dropped
                && f.brief.is_some_and(|b| b.psn == psn)
        });
        self.story.proof(
            again.is_some(),
            match again {
                Some(a) => format!(
                    "retransmission seen: PSN {psn} was lost (frame {}) and sent again (frame {})",
                    lost.number, a.number
                ),
                None => format!("PSN {psn} was lost and never sent again"),
            },
        );
    }

    /// `imm`: the completion woke the target, and the data was there before it.
    pub(super) fn woken_proof(&mut self) -> Result<(), DemoError> {
        let FromTarget::Woken {
            opcode,
            status,
            byte_len,
            imm,
            offset,
            bytes,
            at_us,
        } = self.rig.target.answer(ANSWER)?
        else {
            return Err(DemoError::failed(
                "the target did not report its completion",
            ));
        };
        self.story.say(format!(
            "The target woke with a completion: {opcode} {status}, {byte_len} bytes, immediate \
             data {:#x}. At that offset of its memory it found {}.",
            imm.unwrap_or_default(),
            quote_bytes(&bytes, byte_len as usize)
        ));
        let expected = prefix(&self.plan.payload, bytes.len());
        self.story.proof(
            bytes == expected && offset == self.plan.offset,
            "the target found the data already in place when the completion woke it",
        );
        let placed = self
            .rig
            .events
            .since(self.event_mark)
            .into_iter()
            .filter(|e| e.nic == Side::Target && e.is(EventKind::WritePlaced))
            .map(|e| e.at)
            .max();
        let woke = std::time::Duration::from_micros(at_us);
        if let Some(placed) = placed {
            self.story.proof(
                placed < woke,
                format!(
                    "the NIC placed the data {} µs before the target woke",
                    woke.saturating_sub(placed).as_micros()
                ),
            );
        }
        let after = self.rig.target.cpu()?;
        if let Some(before) = self.cpu_before {
            self.story.say(format!(
                "The target slept until then: its time on a CPU went from {} ns to {} ns and it \
                 was switched in {} time(s), all after the completion woke it.",
                before.on_cpu.as_nanos(),
                after.on_cpu.as_nanos(),
                after
                    .voluntary_switches
                    .saturating_sub(before.voluntary_switches)
            ));
        }
        Ok(())
    }

    /// Lets a frozen target run again and has it look at its memory.
    pub(super) fn thaw_and_look(&mut self) -> Result<(), DemoError> {
        self.thaw()?;
        let range = touched(self.plan);
        let len = (range.end - range.start).min(REPORTED as u64);
        let FromTarget::Found { bytes, .. } = self.rig.target.ask(&ToTarget::Look {
            offset: range.start,
            len,
        })?
        else {
            return Err(DemoError::failed("the target did not answer what it found"));
        };
        if self.plan.scenario == Scenario::Atomic {
            let value = u64::from_ne_bytes(bytes.clone().try_into().unwrap_or_default());
            self.story.say(format!(
                "The target looks at its counter at offset {:#x} and finds {value}.",
                range.start
            ));
            self.story.proof(
                value == plan::COUNTER_START + plan::COUNTER_ADD,
                "the target finds its counter already incremented",
            );
            return Ok(());
        }
        self.story.say(format!(
            "The target program looks at offset {:#x} of its memory and finds {}.",
            range.start,
            quote_bytes(&bytes, self.plan.payload.len())
        ));
        let expected = prefix(&self.plan.payload, bytes.len());
        let text = if self.plan.scenario == Scenario::Read {
            "the target finds its memory as it left it"
        } else {
            "the target finds the data already there"
        };
        self.story.proof(bytes == expected, text);
        Ok(())
    }

    /// SIGCONT for a frozen target process.
    pub(super) fn thaw(&mut self) -> Result<(), DemoError> {
        if let Some((frozen, None)) = self.record.frozen {
            self.rig.target.thaw()?;
            self.record.frozen = Some((frozen, Some(since_epoch())));
            self.story.say(format!(
                "SIGCONT: the target process {} runs again.",
                self.rig.target.shared.pid
            ));
        }
        Ok(())
    }
}

/// The first `n` bytes of `payload`.
fn prefix(payload: &Payload, n: usize) -> Vec<u8> {
    let mut bytes = vec![0; n.min(payload.len())];
    payload.chunk(0, &mut bytes);
    bytes
}
