//! Steps 3 and 4: the frames the initiator's NIC sent, field by field; then what the NICs did
//! with them, frames and logged decisions in time order, the completion and the counters.

use std::time::Duration;

use roce_nic::transport::EventKind;
use roce_nic::verbs::Wc;

use super::{changed, Act, TIMELINE_FRAMES};
use crate::events::NicEvent;
use crate::plan;
use crate::story::Beat;
use crate::target_host::opcode_name;
use crate::wire::Seen;
use crate::{DemoError, Scenario, Side};

impl Act<'_, '_> {
    /// Step 3: the frames the initiator's NIC sent for the work request, before any answer.
    pub(super) fn packets(&mut self) {
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
    pub(super) fn reception(&mut self, wc: &Wc) -> Result<(), DemoError> {
        let title = match self.plan.scenario {
            // tcp-vs-rdma and allreduce are played elsewhere; the WRITE of tcp-vs-rdma is this.
            Scenario::Write | Scenario::TcpVsRdma | Scenario::Allreduce | Scenario::Connect | Scenario::Congestion => "The target's NIC checks each packet and writes the data into memory; an ACK goes back",
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
        if !self.plan.detailed() {
            self.throughput(self.record.posted_at, "");
        }
        self.counted()
    }

    /// The rate of a long transfer (`--size`), from `since` to the completion; `from` says
    /// when `since` was, if not at the post.
    pub(super) fn throughput(&mut self, since: Duration, from: &str) {
        let elapsed = self.record.completed_at.saturating_sub(since);
        let bits = self.plan.payload.len() as f64 * 8.0;
        self.story.say(format!(
            "Moved {} bytes in {:.3} s{from}: {:.2} Gbit/s.",
            self.plan.payload.len(),
            elapsed.as_secs_f64(),
            bits / elapsed.as_secs_f64().max(1e-9) / 1e9
        ));
    }

    /// The frames after the first wave and the NICs' decisions since the post, in time order.
    pub(super) fn timeline(&mut self, wire_mark: usize, event_mark: usize) {
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
            .filter(|e| e.on_data_path() && !e.is(EventKind::PacketSent))
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
                    let where_ = if self.rig.wire.recording() {
                        "the pcap has every frame"
                    } else {
                        "--pcap FILE records every frame"
                    };
                    self.story.say(format!(
                        "… and {} more frames and decisions ({where_}).",
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
    pub(super) fn counted(&mut self) -> Result<(), DemoError> {
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
}
