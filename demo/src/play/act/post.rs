//! Step 2: the work request as the initiator posts it; then waiting for its completion (with
//! progress for a long transfer) and for the NICs' last events.

use std::time::Duration;

use roce_nic::counters::Snapshot;
use roce_nic::transport::EventKind;
use roce_nic::verbs::{SendOp, Wc, WcStatus};

use super::{quote, wr_opcode, Act, SETTLING};
use crate::events::since_epoch;
use crate::play::initiator::{Initiator, WR_ID};
use crate::{DemoError, Scenario, Side};

impl Act<'_, '_> {
    /// Step 2: the work request, posted.
    pub(super) fn post(&mut self) -> Result<(), DemoError> {
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
    pub(super) fn complete(&mut self) -> Result<Wc, DemoError> {
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
    pub(super) fn settle(&self) {
        if self.plan.detailed() {
            self.rig.events.wait_for(self.event_mark, SETTLING, |e| {
                e.nic == Side::Initiator && e.is(EventKind::SendCompleted)
            });
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    pub(super) fn counters(&self, side: Side) -> Result<Snapshot, DemoError> {
        let ctx = match side {
            Side::Initiator => &self.rig.initiator,
            Side::Target => &self.rig.target_nic,
        };
        ctx.counters()
            .map_err(|e| DemoError::because("cannot read the NIC's counters", e))
    }
}
