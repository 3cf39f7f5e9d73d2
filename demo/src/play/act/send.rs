//! The `send` scenario's second half. A SEND, unlike a WRITE, names no memory: it lands in a
//! receive buffer the target must have posted. Frozen without one, the target's NIC can only
//! answer RNR NAK (receiver not ready) and the initiator's NIC waits and tries again, for as
//! long as it takes; once the target runs and posts a receive, the next try lands.

use std::time::Duration;

use super::{is_rnr_nak, quote_bytes, Act, RNR_NAKS, TARGET_WAIT_MS};
use crate::events::since_epoch;
use crate::rig::ANSWER;
use crate::target_host::{FromTarget, ToTarget};
use crate::{DemoError, Side};

/// How long the RNR NAKs may take to come.
const REFUSALS: Duration = Duration::from_secs(10);

impl Act<'_, '_> {
    pub(super) fn send_refused_then_delivered(&mut self) -> Result<(), DemoError> {
        let refused = self
            .rig
            .wire
            .wait_until(self.wire_mark, REFUSALS, |frames| {
                frames.iter().filter(|f| is_rnr_nak(f)).count() >= RNR_NAKS
            });
        if !refused {
            return Err(DemoError::failed(format!(
                "the target's NIC sent no {RNR_NAKS} RNR NAKs within {} s",
                REFUSALS.as_secs()
            )));
        }
        // The NICs' events about the last refusal.
        std::thread::sleep(Duration::from_millis(30));
        self.packets();
        self.story.step(
            "The target's NIC has nowhere to put the SEND: RNR NAK, and the initiator's NIC \
             waits and tries again",
        );
        self.timeline(self.wire_mark, self.event_mark);
        self.story
            .step("Proof: without a receive posted by the target, nothing lands");
        self.show_memory(true)?;
        let after = self.window.read(&self.rig.target.region)?;
        self.story.proof(
            after == self.memory_before,
            "nothing landed in the target's memory: a SEND needs a receive buffer",
        );
        let naks = self
            .rig
            .wire
            .since(self.wire_mark)
            .iter()
            .filter(|f| f.from == Side::Target && is_rnr_nak(f))
            .count();
        let waiting = if self.rig.target.is_process() {
            "was frozen"
        } else {
            "waited"
        };
        self.story.proof(
            naks >= RNR_NAKS,
            format!("RNR NAK seen {naks} times while the target {waiting} with no receive posted"),
        );
        self.cpu_unchanged()?;
        self.deliver()
    }

    /// The target wakes and posts a receive; the next try of the initiator's NIC lands.
    fn deliver(&mut self) -> Result<(), DemoError> {
        self.story.step("The target wakes and posts a receive");
        let (wire_mark, event_mark) = (self.rig.wire.mark(), self.rig.events.mark());
        let thawed_at = since_epoch();
        self.thaw()?;
        let FromTarget::ReceivePosted { addr, length } =
            self.rig.target.ask(&ToTarget::PostReceive)?
        else {
            return Err(DemoError::failed("the target did not post its receive"));
        };
        self.story.say(format!(
            "The target program posts a receive (ibv_post_recv): a buffer at VA {addr:#x}, \
             {length} bytes. Its CPU is needed for that: a SEND is two-sided."
        ));
        self.rig.target.tell(&ToTarget::AwaitCompletion {
            timeout_ms: TARGET_WAIT_MS,
        })?;
        let wc = self.complete()?;
        self.timeline(wire_mark, event_mark);
        self.story.say(format!(
            "The initiator's completion: wr_id {} {} {}, {} bytes.",
            wc.wr_id,
            crate::target_host::opcode_name(wc.opcode),
            wc.status,
            wc.byte_len
        ));
        if let FromTarget::Woken {
            opcode,
            status,
            byte_len,
            bytes,
            ..
        } = self.rig.target.answer(ANSWER)?
        {
            self.story.say(format!(
                "The target's completion: {opcode} {status}, {byte_len} bytes; in its buffer \
                 {}.",
                quote_bytes(&bytes, byte_len as usize)
            ));
        }
        if !self.plan.detailed() {
            self.throughput(thawed_at, " from the target's wake-up to the completion");
        }
        self.counted()?;
        self.story
            .step("Proof: the SEND landed once the target posted a receive");
        self.show_memory(false)?;
        self.data_proof()?;
        let after = self.rig.target.cpu()?;
        if let Some(before) = self.cpu_before {
            self.story.proof(
                after.on_cpu > before.on_cpu,
                format!(
                    "the target ran to post the receive: {} ns on a CPU before, {} ns after",
                    before.on_cpu.as_nanos(),
                    after.on_cpu.as_nanos()
                ),
            );
        }
        self.icrc_proof();
        Ok(())
    }
}
