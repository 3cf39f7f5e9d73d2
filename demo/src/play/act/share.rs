//! Step 1: the target's memory and keys, shared out of band; the QPs connect; then the target
//! is frozen (or, for `imm`, goes to sleep waiting for a completion) and its CPU time taken.

use roce_hostmem::Access;
use roce_nic::transport::EventKind;
use roce_nic::verbs::Gid;

use super::{hex_u64, quote, Act, SETTLING, TARGET_WAIT_MS};
use crate::cpu::Sampler;
use crate::events::since_epoch;
use crate::plan;
use crate::story::Beat;
use crate::target_host::{FromTarget, ToTarget};
use crate::{DemoError, Scenario, Side};

/// How often the target's CPU time is sampled for the timeline.
const SAMPLING: std::time::Duration = std::time::Duration::from_millis(1);

impl Act<'_, '_> {
    /// Step 1: the target's memory and keys; the QPs connect; the target freezes or sleeps.
    pub(super) fn target_shares(&mut self) -> Result<(), DemoError> {
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
                && e.is(EventKind::MemoryRegistered)
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
        self.sampler = Some(Sampler::start(&[self.rig.target.whom], SAMPLING));
        Ok(())
    }

    pub(super) fn freeze(&mut self) -> Result<(), DemoError> {
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
    pub(super) fn sleep_on_completion(&mut self) -> Result<(), DemoError> {
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
}
