//! One direction of a connected conversation: the requests one QP sends, and the answers the
//! other sends back. The observer keeps, per PSN, what was sent (a ring of [`Slot`]s indexed by
//! PSN), so that any packet — fresh, resent, late or an answer — can be judged against its
//! neighbours and against what it answers, whatever order the capture saw them in.

use std::time::Duration;

use roce_nic::transport::psn;
use roce_nic::transport::rules::{self, Underway};
use roce_wire::aeth::{self, NakCode, Syndrome};
use roce_wire::{Kind, Opcode, Position};

use super::catalog::Rule;
use super::{Finding, Missing, Mtu, Sink};

/// A request packet as a stream sees it: where it is in the capture and what its headers say.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Its frame number in the capture.
    pub frame: u64,
    pub time: Duration,
    pub opcode: Opcode,
    pub psn: u32,
    /// Payload bytes it carries.
    pub payload: u32,
    /// The RETH's DMA length, when it has a RETH.
    pub dma_len: Option<u32>,
}

/// PSNs remembered per direction: more than any sender keeps unacknowledged (rxe 128 packets,
/// ours 64, a few READs of 64 KiB at MTU 256), so every answer finds what it answers.
const SLOTS: usize = 2048;
/// Answers ahead of every request seen, held until a later request explains them.
const AHEAD: usize = 16;
/// Resends remembered to explain answers to duplicates.
const RECENT_RESENDS: usize = 512;
/// Holes (PSNs skipped by the fresh requests) remembered, to recognise late arrivals.
const HOLES: usize = 16;
/// READs and atomics remembered until answered: more than any responder's resources (16).
const UNANSWERED: usize = 64;

/// What was sent with one PSN.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The PSN plus one, so that zero means empty.
    tag: u32,
    /// The frame that first sent it, and the latest.
    frame: u64,
    last_frame: u64,
    /// When it was last sent.
    sent: Duration,
    /// When an answer first acknowledged it; zero when none did.
    acked: Duration,
    opcode: u8,
    /// Payload bytes; for a READ request its DMA length.
    len: u32,
    /// The RETH DMA length of a WRITE's first packet.
    dma_len: u32,
    /// A READ request: its first PSN (the PSNs of its answer carry it too).
    read_first: Option<u32>,
    /// A READ retried from the middle: where the latest retry starts.
    read_retry: Option<u32>,
    /// Messages the requester had ended before this PSN, counted in the epoch.
    msgs_before: u32,
    epoch: u32,
    /// The packet ends a message (for the MSN).
    ends: bool,
    /// The original value the first atomic ACK for it carried.
    original: Option<u64>,
    /// A READ or atomic request: whole answers seen for it.
    answered: u32,
    /// A READ request: the PSN of the response that comes next in order.
    next_response: u32,
}

impl Slot {
    fn opcode(&self) -> Opcode {
        Opcode::from_u8(self.opcode).unwrap_or(Opcode::CNP)
    }
}

/// PSNs `from` to `to` (exclusive) that fresh requests skipped: not in the capture so far.
#[derive(Debug, Clone, Copy)]
struct Hole {
    from: u32,
    to: u32,
    /// Retransmissions counted when the PSNs went missing.
    resent: u64,
    /// The frame that skipped them.
    before_frame: u64,
}

/// A sequence or RNR NAK whose resend has not been seen yet.
#[derive(Debug, Clone, Copy)]
struct PendingNak {
    psn: u32,
    frame: u64,
    /// RNR: when it was seen and the wait it asks for.
    rnr: Option<(Duration, Duration)>,
}

/// Counts for one direction of a conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub packets: u64,
    pub messages: u64,
    pub bytes: u64,
    pub retransmitted: u64,
    pub reordered: u64,
    pub missing: u64,
    pub acks: u64,
    pub naks_sequence: u64,
    pub naks_invalid_request: u64,
    pub naks_remote_access: u64,
    pub naks_remote_operational: u64,
    pub naks_other: u64,
    pub rnr_naks: u64,
    /// Resends that came after an RNR NAK's wait.
    pub rnr_waits: u64,
    pub read_responses: u64,
    pub atomic_acks: u64,
}

/// Requests from one end and the answers from the other.
pub struct Stream {
    pub counts: Counts,
    uc: bool,
    started: bool,
    /// One past the highest PSN a fresh request used.
    high: u32,
    first_psn: u32,
    /// The first request PSN the CM announced.
    pub cm_start: Option<u32>,
    slots: Vec<Slot>,
    msgs: u32,
    epoch: u32,
    /// The MSN's possible starting points (a range, modulo 2^24).
    msn_base: Option<(u32, u32)>,
    /// A READ whose answer's PSNs wait for the path MTU to be known.
    read_unsized: Option<u32>,
    /// One past the highest PSN an answer acknowledged.
    acked_before: Option<u32>,
    nak: Option<PendingNak>,
    /// A sequence NAK's PSN, until a request with it is seen again.
    naked: Option<(u32, u64)>,
    /// The next PSN of a resend burst under way.
    burst_next: Option<u32>,
    ahead: Vec<(u32, u64)>,
    holes: Vec<Hole>,
    /// Answers to PSNs before the first request seen: the capture started late.
    pub started_late: bool,
    /// A NAK other than a sequence or RNR NAK ended the connection (the QP is in error).
    closed: bool,
    /// When an answer last came for a PSN beyond a READ or atomic still unanswered.
    implied_nak: Option<Duration>,
    /// Go-backs that started after the NAK's PSN: (NAK's PSN, NAK frame, resend frame, PSN).
    skipped: Vec<(u32, u64, u64, u32)>,
    /// Findings of the rules that depend on the order of both directions, judged at the end.
    deferred: Vec<Finding>,
    /// A NAK came after answers beyond its PSN, or an answer after later ones that nothing
    /// asked for again: the network reordered packets.
    reorder_seen: bool,
    /// The highest PSN answered.
    answer_high: Option<u32>,
    /// The latest resends: PSN and frame.
    recent_resends: Vec<(u32, u64)>,
    /// READs and atomics (their first PSNs) sent and not answered yet, oldest first.
    unanswered: Vec<u32>,
    /// The last credit count advertised (code 31 aside): its code, the PSN from which the
    /// requests sent count as consuming receives after it, and its frame.
    credits: Option<(u8, u32, u64)>,
}

impl Stream {
    pub fn new(uc: bool) -> Stream {
        Stream {
            counts: Counts::default(),
            uc,
            started: false,
            high: 0,
            first_psn: 0,
            cm_start: None,
            slots: Vec::new(),
            msgs: 0,
            epoch: 0,
            msn_base: None,
            read_unsized: None,
            acked_before: None,
            nak: None,
            naked: None,
            burst_next: None,
            ahead: Vec::new(),
            holes: Vec::new(),
            started_late: false,
            closed: false,
            implied_nak: None,
            skipped: Vec::new(),
            deferred: Vec::new(),
            reorder_seen: false,
            answer_high: None,
            recent_resends: Vec::new(),
            unanswered: Vec::new(),
            credits: None,
        }
    }

    /// Whether a request with PSN `p` cannot belong here: far ahead of the PSNs used, or far
    /// behind them (a new QP starts at a random PSN).
    pub fn far_from(&self, p: u32) -> bool {
        const FAR: i32 = 1 << 16;
        self.started && !(-FAR..FAR).contains(&psn::diff(p, self.high))
    }

    /// Whether a request with PSN `p` was sent (as far as the capture shows).
    pub fn sent(&self, p: u32) -> bool {
        self.started && psn::diff(p, self.first_psn) >= 0 && psn::diff(p, self.high) < 0
    }

    /// Whether a fatal NAK ended the connection.
    pub fn closed(&self) -> bool {
        self.closed
    }

    fn slot(&self, p: u32) -> Option<&Slot> {
        let s = self.slots.get(p as usize % SLOTS)?;
        (s.tag == p + 1).then_some(s)
    }

    fn slot_mut(&mut self, p: u32) -> Option<&mut Slot> {
        let s = self.slots.get_mut(p as usize % SLOTS)?;
        (s.tag == p + 1).then_some(s)
    }

    fn put(&mut self, p: u32, slot: Slot) {
        self.slots[p as usize % SLOTS] = Slot { tag: p + 1, ..slot };
    }

    /// A request packet.
    pub fn request(&mut self, out: &mut Sink<'_>, mtu: &mut Mtu, request: Request) {
        let Request {
            frame,
            time,
            opcode,
            psn: p,
            payload,
            dma_len,
        } = request;
        self.counts.packets += 1;
        self.counts.bytes += u64::from(payload);
        if !self.started {
            self.start(out, frame, p);
        }
        if self.naked.is_some_and(|(q, _)| q == p) {
            self.naked = None;
        }
        self.skipped.retain(|&(q, ..)| q != p);
        let kind = opcode.kind();
        if let Some(len) = dma_len.filter(|&l| l > rules::MAX_DMA_LEN) {
            out.violation(Finding::new(
                Rule::DmaLength,
                [frame],
                "at most 2147483648 bytes",
                format!("RETH DMA length {len}"),
            ));
        }
        if kind != Kind::ReadRequest && !kind.is_atomic() {
            self.check_payload(out, mtu, frame, opcode, payload);
        }
        self.size_pending_read(out, mtu, frame, Some(p));
        let d = psn::diff(p, self.high);
        if d > 0 {
            self.gap(out, frame, p, d as u32);
        }
        let reserved = self
            .slot(p)
            .and_then(|s| s.read_first.filter(|&f| f != p).map(|f| (f, s.frame)));
        if d >= 0 {
            self.fresh(out, mtu, request);
        } else if let (Some((first, read_frame)), false) = (reserved, kind == Kind::ReadRequest) {
            // Not a resend: a new request on a PSN a READ reserved for its answer.
            let span = self.read_span(first);
            out.violation(Finding::new(
                Rule::ReadPsnSpan,
                [read_frame, frame],
                format!(
                    "the next request at PSN {:#08x} or later ({span} response PSNs)",
                    psn::add(first, span)
                ),
                format!("{} at PSN {p:#08x}", opcode.name()),
            ));
        } else if self.slot(p).is_some() {
            self.resend(out, mtu, request);
        } else if let Some(resent_since) = self.fill_hole(p, 1) {
            // Sent again after a NAK (or in the go-back that followed) for a packet the
            // capture never saw; else a late packet, which the network reordered.
            let slot = Slot {
                epoch: u32::MAX,
                ..self.new_slot(request)
            };
            let span = match (kind, mtu.bytes()) {
                (Kind::ReadRequest, Some(m)) => rules::packets(u64::from(slot.len), m),
                _ => 1,
            };
            let after = psn::add(p, span);
            // (A go-back from the NAK's PSN, whose first packets may have been lost again.)
            let after_nak = self
                .nak
                .is_some_and(|n| (0..SLOTS as i32).contains(&psn::diff(p, n.psn)));
            if after_nak {
                self.resume_after_nak(out, frame, time, p);
                self.burst_next = Some(after);
                self.counts.retransmitted += 1;
                self.note_resend(p, frame);
            } else if self.burst_next == Some(p) {
                self.burst_next = Some(after);
                self.counts.retransmitted += 1;
                self.note_resend(p, frame);
            } else if resent_since {
                self.note_resend(p, frame);
                // The requester went back since the packet went missing: its copy before
                // this one was lost too.
                self.counts.retransmitted += 1;
            } else {
                self.counts.reordered += 1;
            }
            self.counts.messages += u64::from(slot.ends);
            self.put(p, slot);
            if span > 1 {
                self.fill_hole(psn::add(p, 1), span - 1);
                self.reserve_read(p, span, slot);
            }
            self.check_neighbours(out, p);
        } else {
            // Sent again, but its first sending is not in the capture (or long forgotten).
            self.counts.retransmitted += 1;
        }
    }

    fn start(&mut self, out: &mut Sink<'_>, frame: u64, p: u32) {
        self.started = true;
        self.slots = vec![Slot::default(); SLOTS];
        self.high = p;
        self.first_psn = p;
        let Some(start) = self.cm_start else { return };
        let d = psn::diff(p, start);
        if !(0..1 << 20).contains(&d) {
            out.violation(Finding::new(
                Rule::StartingPsn,
                [frame],
                format!("PSN {start:#08x}, as the CM exchanged"),
                format!("PSN {p:#08x}"),
            ));
        } else if d > 0 {
            out.missing(Missing {
                from_psn: start,
                count: d as u32,
                before_frame: frame,
                evidence:
                    "the CM announced an earlier first PSN: the capture missed the first packets",
            });
            self.counts.missing += d as u64;
        }
    }

    fn check_payload(
        &mut self,
        out: &mut Sink<'_>,
        mtu: &mut Mtu,
        frame: u64,
        opcode: Opcode,
        payload: u32,
    ) {
        let position = opcode.position();
        if matches!(position, Position::First | Position::Middle) {
            mtu.observe(out, frame, payload);
        }
        if let Some(m) = mtu.bytes() {
            if !rules::payload_fits(position, payload as usize, m) {
                let expected = match position {
                    Position::First | Position::Middle => format!("{m} bytes (the path MTU)"),
                    _ => format!("at most {m} bytes (the path MTU)"),
                };
                out.violation(Finding::new(
                    Rule::PayloadMtu,
                    [frame],
                    expected,
                    format!("{} with {payload} bytes", opcode.name()),
                ));
            }
        }
    }

    /// A READ sent before the path MTU was known reserved an unknown number of PSNs: the next
    /// request, or the MTU once known, tells how many.
    fn size_pending_read(
        &mut self,
        out: &mut Sink<'_>,
        mtu: &mut Mtu,
        frame: u64,
        next: Option<u32>,
    ) {
        let Some(first) = self.read_unsized else {
            return;
        };
        let Some(slot) = self.slot(first).copied() else {
            self.read_unsized = None;
            return;
        };
        let len = u64::from(slot.len);
        let after = next.map_or(0, |p| psn::diff(p, first));
        let span = match mtu.bytes() {
            Some(m) => rules::packets(len, m),
            None if after > 0 => {
                // The MTUs that give this many response PSNs; the largest consistent one when
                // several do (a READ of one packet says nothing).
                match rules::PATH_MTUS
                    .into_iter()
                    .filter(|&m| rules::packets(len, m) == after as u32)
                    .max()
                {
                    Some(m) if rules::packets(len, 256) > 1 => {
                        mtu.infer_from_read(m);
                        after as u32
                    }
                    _ => 1.max(rules::packets(len, 4096)),
                }
            }
            None => return,
        };
        self.read_unsized = None;
        self.reserve_read(first, span, slot);
        let Some(p) = next else { return };
        if after > 0 && after < span as i32 {
            out.violation(Finding::new(
                Rule::ReadPsnSpan,
                [slot.frame, frame],
                format!(
                    "the next request at PSN {:#08x} or later ({span} response PSNs)",
                    psn::add(first, span)
                ),
                format!("PSN {p:#08x}"),
            ));
        }
    }

    fn reserve_read(&mut self, first: u32, span: u32, slot: Slot) {
        for i in 1..span.min(SLOTS as u32 / 2) {
            let q = psn::add(first, i);
            self.put(
                q,
                Slot {
                    read_first: Some(first),
                    ..slot
                },
            );
        }
        if psn::diff(psn::add(first, span), self.high) > 0 {
            self.high = psn::add(first, span);
        }
    }

    /// Fresh requests skipped PSNs from `high` to `p`.
    fn gap(&mut self, out: &mut Sink<'_>, frame: u64, p: u32, n: u32) {
        self.counts.missing += u64::from(n);
        if self.holes.len() == HOLES {
            let oldest = self.holes.remove(0);
            self.report_hole(out, oldest);
        }
        self.holes.push(Hole {
            from: self.high,
            to: p,
            resent: self.counts.retransmitted,
            before_frame: frame,
        });
        // What was under way, and how many messages ended, is unknown from here.
        self.epoch += 1;
        self.msn_base = None;
        self.high = p;
        for (q, _) in &mut self.ahead {
            if psn::diff(*q, p) < 0 {
                *q = u32::MAX;
            }
        }
        self.ahead.retain(|(q, _)| *q != u32::MAX);
    }

    /// Takes PSNs `p` to `p + n` out of the holes. `None` when `p` was in none, else whether
    /// anything was sent again since its hole appeared.
    fn fill_hole(&mut self, p: u32, n: u32) -> Option<bool> {
        let i = self
            .holes
            .iter()
            .position(|h| psn::diff(p, h.from) >= 0 && psn::diff(p, h.to) < 0)?;
        let hole = self.holes.remove(i);
        let end = if psn::diff(psn::add(p, n), hole.to) < 0 {
            psn::add(p, n)
        } else {
            hole.to
        };
        self.counts.missing = self
            .counts
            .missing
            .saturating_sub(psn::diff(end, p).max(0) as u64);
        if p != hole.from {
            self.holes.push(Hole { to: p, ..hole });
        }
        if end != hole.to {
            self.holes.push(Hole { from: end, ..hole });
        }
        Some(self.counts.retransmitted > hole.resent)
    }

    /// PSNs never seen: what the responder's answers say about them.
    fn report_hole(&self, out: &mut Sink<'_>, hole: Hole) {
        let acknowledged = self
            .acked_before
            .is_some_and(|a| psn::diff(a, hole.to) >= 0);
        out.missing(Missing {
            from_psn: hole.from,
            count: psn::diff(hole.to, hole.from).max(0) as u32,
            before_frame: hole.before_frame,
            evidence: if acknowledged {
                "the responder acknowledged them: the capture dropped them"
            } else {
                "never seen, never acknowledged: lost before the capture point, or dropped by it"
            },
        });
    }

    fn new_slot(&self, request: Request) -> Slot {
        let Request {
            frame,
            time,
            opcode,
            psn: p,
            payload,
            dma_len,
        } = request;
        let kind = opcode.kind();
        let read = kind == Kind::ReadRequest;
        Slot {
            tag: p + 1,
            frame,
            last_frame: frame,
            sent: time,
            acked: Duration::ZERO,
            opcode: opcode.value(),
            len: if read { dma_len.unwrap_or(0) } else { payload },
            dma_len: dma_len.unwrap_or(0),
            read_first: read.then_some(p),
            read_retry: None,
            msgs_before: self.msgs,
            epoch: self.epoch,
            ends: opcode.position().is_end(),
            original: None,
            answered: 0,
            next_response: p,
        }
    }

    fn fresh(&mut self, out: &mut Sink<'_>, mtu: &mut Mtu, request: Request) {
        let Request {
            frame,
            opcode,
            psn: p,
            ..
        } = request;
        if self.burst_next.is_some_and(|next| psn::diff(p, next) >= 0) {
            // The go-back has caught up with the new requests.
            self.burst_next = None;
        }
        let slot = self.new_slot(request);
        self.put(p, slot);
        self.high = psn::add(p, 1);
        if slot.ends {
            self.msgs = self.msgs.wrapping_add(1);
            self.counts.messages += 1;
        }
        self.check_neighbours(out, p);
        if opcode.kind() == Kind::ReadRequest || opcode.kind().is_atomic() {
            if self.unanswered.len() == UNANSWERED {
                self.unanswered.remove(0);
            }
            self.unanswered.push(p);
        }
        if opcode.kind() == Kind::ReadRequest {
            match mtu.bytes() {
                Some(m) => self.reserve_read(p, rules::packets(u64::from(slot.len), m), slot),
                None => self.read_unsized = Some(p),
            }
        }
        // Answers that came before this request.
        let mut i = 0;
        while i < self.ahead.len() {
            let (q, answer) = self.ahead[i];
            if psn::diff(q, self.high) < 0 {
                self.ahead.swap_remove(i);
                out.violation(Finding::new(
                    Rule::AnswerUnsent,
                    [answer, frame],
                    format!("an answer for PSN {q:#08x} after its request"),
                    "the answer came first".to_string(),
                ));
            } else {
                i += 1;
            }
        }
    }

    /// The opcode sequence between `p` and the PSNs next to it, and a WRITE's length at its end.
    fn check_neighbours(&mut self, out: &mut Sink<'_>, p: u32) {
        let Some(this) = self.slot(p).copied() else {
            return;
        };
        if let Some(prev) = self.slot(psn::add(p, psn::MASK)).copied() {
            self.check_pair(out, &prev, &this);
        }
        if let Some(next) = self.slot(psn::add(p, 1)).copied() {
            if next.read_first != this.read_first || next.read_first.is_none() {
                self.check_pair(out, &this, &next);
            }
        }
        let op = this.opcode();
        if op.kind().is_write() && op.position().is_end() {
            self.check_write_length(out, p, &this);
        }
    }

    fn check_pair(&self, out: &mut Sink<'_>, prev: &Slot, this: &Slot) {
        // The PSNs a READ reserved are no packets of their own.
        if this.read_first.is_some_and(|f| f != this.tag - 1) {
            return;
        }
        let (a, b) = (prev.opcode(), this.opcode());
        let underway = if prev.read_first.is_some() {
            Underway::Nothing
        } else {
            Underway::after(a.kind(), a.position())
        };
        if !rules::sequence_ok(underway, b.kind(), b.position()) {
            let expected = match underway {
                Underway::Nothing => "a FIRST or ONLY packet (the message before ended)",
                Underway::Send => "SEND MIDDLE or LAST (a SEND is under way)",
                Underway::Write => "RDMA WRITE MIDDLE or LAST (a WRITE is under way)",
            };
            out.violation(Finding::new(
                Rule::OpcodeSequence,
                [prev.last_frame, this.last_frame],
                expected,
                format!("{} after {}", b.name(), a.name()),
            ));
        }
    }

    fn check_write_length(&self, out: &mut Sink<'_>, p: u32, last: &Slot) {
        let mut total = 0u64;
        let mut q = p;
        let mut frames = Vec::new();
        for _ in 0..SLOTS / 2 {
            let Some(s) = self.slot(q) else { return };
            total += u64::from(s.len);
            if s.opcode().position().is_start() {
                let fits = rules::write_fits(
                    total - u64::from(last.len),
                    u64::from(last.len),
                    u64::from(s.dma_len),
                    true,
                );
                if !fits {
                    frames.push(s.frame);
                    frames.push(last.frame);
                    out.violation(Finding::new(
                        Rule::WriteLength,
                        frames,
                        format!("{} bytes, the RETH DMA length", s.dma_len),
                        format!("{total} bytes of payload"),
                    ));
                }
                return;
            }
            q = psn::add(q, psn::MASK);
        }
    }

    fn resend(&mut self, out: &mut Sink<'_>, mtu: &mut Mtu, request: Request) {
        let Request {
            frame,
            time,
            opcode,
            psn: p,
            payload,
            dma_len,
        } = request;
        self.counts.retransmitted += 1;
        self.note_resend(p, frame);
        let Some(original) = self.slot(p).copied() else {
            return;
        };
        if self.uc {
            out.violation(Finding::new(
                Rule::UcResend,
                [original.frame, frame],
                "each PSN sent once",
                format!("PSN {p:#08x} sent again"),
            ));
        }
        // The same packet, or a READ retried from the middle: what is left of it.
        let same = match original.read_first {
            Some(first) => {
                let offset = psn::diff(p, first).max(0) as u64;
                let left = mtu
                    .bytes()
                    .map(|m| u64::from(original.len).saturating_sub(offset * u64::from(m)));
                opcode.kind() == Kind::ReadRequest
                    && left.is_none_or(|l| Some(l) == dma_len.map(u64::from))
            }
            None => opcode.value() == original.opcode && payload == original.len,
        };
        if !same {
            let what = |op: Opcode, len: u32| format!("{} with {len} bytes", op.name());
            out.violation(Finding::new(
                Rule::ResendSame,
                [original.frame, frame],
                what(original.opcode(), original.len),
                what(
                    opcode,
                    if opcode.kind() == Kind::ReadRequest {
                        dma_len.unwrap_or(0)
                    } else {
                        payload
                    },
                ),
            ));
        }
        if self.uc {
        } else if self.nak.is_some_and(|n| psn::diff(p, n.psn) <= 0) {
            // The go-back a NAK asked for (an older burst may still be in flight before it).
            self.resume_after_nak(out, frame, time, p);
        } else if self.burst_next.is_none_or(|next| psn::diff(p, next) < 0) {
            // Going back again. Further ahead is the same go-back, some of whose packets were
            // lost before the capture point.
            self.burst_start(out, frame, time, p, &original);
        }
        self.burst_next = Some(match original.read_first {
            Some(first) if opcode.kind() == Kind::ReadRequest => {
                let span = self.read_span(first);
                psn::add(first, span)
            }
            _ => psn::add(p, 1),
        });
        if opcode.kind() == Kind::ReadRequest {
            if let Some(first) = original.read_first {
                if let Some(s) = self.slot_mut(first) {
                    s.read_retry = Some(p);
                }
            }
        }
        if let Some(s) = self.slot_mut(p) {
            s.last_frame = frame;
            s.sent = time;
        }
        self.check_neighbours(out, p);
    }

    fn note_resend(&mut self, p: u32, frame: u64) {
        // More than a go-back of a whole window (rxe 128 packets, ours 64) plus READ retries.
        if self.recent_resends.len() == RECENT_RESENDS {
            self.recent_resends.remove(0);
        }
        self.recent_resends.push((p, frame));
    }

    fn read_span(&self, first: u32) -> u32 {
        let mut n = 1;
        while n < SLOTS as u32 / 2 {
            match self.slot(psn::add(first, n)) {
                Some(s) if s.read_first == Some(first) => n += 1,
                _ => break,
            }
        }
        n
    }

    /// A resend that does not continue the one before: why did the requester go back?
    fn burst_start(
        &mut self,
        out: &mut Sink<'_>,
        frame: u64,
        time: Duration,
        p: u32,
        original: &Slot,
    ) {
        if self.nak.is_some() {
            self.resume_after_nak(out, frame, time, p);
            return;
        }
        if original.acked.is_zero() || self.implied_nak.is_some_and(|t| t >= original.sent) {
            // Unanswered: the timer, a tail probe; or an answer beyond a READ or atomic whose
            // own answer had not come (an implied NAK), and the go-back it starts.
            return;
        }
        let round_trip = original.acked.saturating_sub(original.sent);
        let since = time.saturating_sub(original.acked);
        if since < round_trip && self.deferred.len() < AHEAD {
            self.deferred.push(Finding::new(
                Rule::ResendCause,
                [original.last_frame, frame],
                format!(
                    "no resend of PSN {p:#08x}: it was acknowledged {:.3} ms earlier, sooner than a lost answer could be noticed ({:.3} ms round trip)",
                    ms(since),
                    ms(round_trip)
                ),
                "sent again".to_string(),
            ));
        }
    }

    /// The first resend after a sequence or RNR NAK: from the NAK's PSN, and after an RNR NAK
    /// not before its timer.
    fn resume_after_nak(&mut self, out: &mut Sink<'_>, frame: u64, time: Duration, p: u32) {
        if let Some(nak) = self.nak.take() {
            if psn::diff(p, nak.psn) > 0 && self.skipped.len() < AHEAD {
                // Unless the NAK's PSN turns up later: the network reordered the resends.
                self.skipped.push((nak.psn, nak.frame, frame, p));
            }
            if let Some((at, wait)) = nak.rnr {
                self.counts.rnr_waits += 1;
                let waited = time.saturating_sub(at);
                if waited < wait {
                    out.violation(Finding::new(
                        Rule::RnrWait,
                        [nak.frame, frame],
                        format!("no resend before {:.3} ms after the RNR NAK", ms(wait)),
                        format!("resent after {:.3} ms", ms(waited)),
                    ));
                }
            }
        }
    }

    /// An answer (ACK, NAK, READ response or atomic ACK) from the responder.
    #[allow(clippy::too_many_arguments)]
    pub fn answer(
        &mut self,
        out: &mut Sink<'_>,
        mtu: &mut Mtu,
        frame: u64,
        time: Duration,
        opcode: Opcode,
        p: u32,
        syndrome: Option<Syndrome>,
        msn: Option<u32>,
        payload: u32,
        original: Option<u64>,
    ) {
        let kind = opcode.kind();
        match (kind, syndrome) {
            (Kind::Acknowledge, Some(Syndrome::Ack { .. })) => self.counts.acks += 1,
            (Kind::Acknowledge, Some(Syndrome::RnrNak { .. })) => self.counts.rnr_naks += 1,
            (Kind::Acknowledge, Some(Syndrome::Nak(code))) => {
                *match code {
                    NakCode::PSN_SEQUENCE_ERROR => &mut self.counts.naks_sequence,
                    NakCode::INVALID_REQUEST => &mut self.counts.naks_invalid_request,
                    NakCode::REMOTE_ACCESS_ERROR => &mut self.counts.naks_remote_access,
                    NakCode::REMOTE_OPERATIONAL_ERROR => &mut self.counts.naks_remote_operational,
                    _ => &mut self.counts.naks_other,
                } += 1
            }
            (Kind::AtomicAcknowledge, _) => self.counts.atomic_acks += 1,
            (k, _) if k.is_read_response() => self.counts.read_responses += 1,
            _ => {}
        }
        if kind.is_read_response()
            && matches!(opcode.position(), Position::First | Position::Middle)
        {
            mtu.observe(out, frame, payload);
        }
        if !self.started {
            self.started_late = true;
            return;
        }
        if psn::diff(p, self.first_psn) < 0 {
            self.started_late = true;
            return;
        }
        if let Some(first) = self.read_unsized {
            if psn::diff(p, first) >= 0 && mtu.bytes().is_some() {
                self.size_pending_read(out, mtu, frame, None);
            }
        }
        let answers_unsized_read = self
            .read_unsized
            .is_some_and(|f| psn::diff(p, f) >= 0 && kind.is_read_response());
        if psn::diff(p, self.high) >= 0 && !answers_unsized_read {
            if self.ahead.len() < AHEAD {
                self.ahead.push((p, frame));
            }
            return;
        }
        self.note_order(p);
        if let Some(Syndrome::Ack { credits }) = syndrome {
            self.check_credits(frame, credits, psn::add(p, 1));
        }
        self.note_answered(kind, p);
        // A plain ACK for a READ's or an atomic's own PSN says it was executed, and that its
        // answer went missing.
        let plain_ack = kind == Kind::Acknowledge && matches!(syndrome, Some(Syndrome::Ack { .. }));
        if self.skips_unanswered(p, plain_ack) || self.passes_unanswered(kind, p) {
            self.implied_nak = Some(time);
        }
        self.forget_answered(kind, p);
        // A NAK for a PSN already answered comes late (reordered on the way): the requester
        // has moved on and ignores it, and so does the observer.
        let stale = self.acked_before.is_some_and(|a| psn::diff(p, a) < 0);
        self.acknowledge(rules::received_before(syndrome, p), time);
        match syndrome {
            Some(Syndrome::Nak(NakCode::PSN_SEQUENCE_ERROR) | Syndrome::RnrNak { .. }) if stale => {
                self.reorder_seen = true;
            }
            Some(Syndrome::Nak(NakCode::PSN_SEQUENCE_ERROR)) => {
                self.nak = Some(PendingNak {
                    psn: p,
                    frame,
                    rnr: None,
                });
                if !self.resent_since_trigger(p) {
                    self.naked = Some((p, frame));
                }
            }
            Some(Syndrome::Nak(_)) => self.closed = true,
            Some(Syndrome::RnrNak { timer }) => {
                self.nak = Some(PendingNak {
                    psn: p,
                    frame,
                    rnr: Some((time, aeth::rnr_timer(timer))),
                });
            }
            Some(Syndrome::Ack { .. }) if kind == Kind::Acknowledge => {
                // A go-back that skipped the NAK's PSN had nothing to resend if the responder
                // got that PSN anyway.
                self.skipped.retain(|&(q, ..)| psn::diff(p, q) < 0);
                if let Some((q, nak_frame)) = self.naked {
                    if psn::diff(p, q) >= 0 && self.deferred.len() < AHEAD {
                        self.deferred.push(Finding::new(
                            Rule::AckCoverage,
                            [nak_frame, frame],
                            format!(
                                "no ACK beyond PSN {q:#08x} before the requester sends it again"
                            ),
                            format!("ACK for PSN {p:#08x}"),
                        ));
                        self.naked = None;
                    }
                }
            }
            _ => {}
        }
        if kind.is_read_response() {
            self.check_read_response(out, mtu, frame, opcode, p, payload);
        }
        if kind == Kind::AtomicAcknowledge {
            self.check_atomic_ack(out, frame, p, original);
        }
        if let Some(msn) = msn {
            self.check_msn(out, frame, kind, p, syndrome, msn);
        }
    }

    /// An answer for an earlier PSN than one answered before, with no request at or before it
    /// sent again since the request for it was first sent (a duplicate is answered for the
    /// last PSN executed, which may lie beyond it): the network reordered the answers or the
    /// requests.
    fn note_order(&mut self, p: u32) {
        match self.answer_high {
            Some(h) if psn::diff(p, h) < 0 => {
                let Some(sent) = self.slot(p).map(|s| s.frame) else {
                    return;
                };
                let asked_again = self
                    .recent_resends
                    .iter()
                    .any(|&(q, f)| psn::diff(q, p) <= 0 && f > sent);
                if !asked_again {
                    self.reorder_seen = true;
                }
            }
            _ => self.answer_high = Some(p),
        }
    }

    /// Whether PSN `q`, which a sequence NAK names, was sent again after the first packet beyond
    /// it went out. The NAK was caused by a packet beyond `q` arriving while the responder
    /// expected `q` — at the earliest that first packet — and a copy of `q` sent after it may
    /// still have been on its way: a go-back (an implied NAK, a timeout, a probe) that crossed
    /// the NAK. The responder then receives that copy and may acknowledge beyond `q` without
    /// the requester sending `q` again after the NAK (IBTA 9.7.5.2.2: the NAK is sent once,
    /// for the first out-of-sequence packet; rxe's `sent_psn_nak`). Where the capture lacks `q`
    /// or the packet after it, nothing is known, and nothing is held against the responder.
    fn resent_since_trigger(&self, q: u32) -> bool {
        let Some(slot) = self.slot(q) else {
            return true;
        };
        let next = match slot.read_first {
            Some(first) if first == q => psn::add(q, self.read_span(q)),
            _ => psn::add(q, 1),
        };
        self.slot(next)
            .is_none_or(|after| slot.last_frame > after.frame)
    }

    /// Counts a READ's last response (LAST or ONLY after the responses before it: its answer
    /// is whole) or an atomic ACK against its request. A READ's responses count in order from
    /// its first PSN, from where a retry starts, or from wherever the responder answers it again;
    /// a LAST after a response missing leaves the READ unanswered, as it does for the requester.
    fn note_answered(&mut self, kind: Kind, p: u32) {
        if kind.is_read_response() {
            let Some(s) = self
                .slot(p)
                .and_then(|s| s.read_first)
                .and_then(|f| self.slot_mut(f))
            else {
                return;
            };
            let in_order = !psn::before(s.next_response, p) || s.read_retry == Some(p);
            if in_order {
                s.next_response = psn::add(p, 1);
                s.answered += u32::from(matches!(
                    kind,
                    Kind::ReadResponseLast | Kind::ReadResponseOnly
                ));
            }
            return;
        }
        if kind == Kind::AtomicAcknowledge {
            if let Some(s) = self.slot_mut(p).filter(|s| s.opcode().kind().is_atomic()) {
                s.answered += 1;
            }
        }
    }

    /// Whether an answer for `p` (and for `p` itself, with `through`) passes a READ or atomic
    /// (after what was acknowledged) that has had no answer yet.
    fn skips_unanswered(&self, p: u32, through: bool) -> bool {
        let Some(from) = self.acked_before else {
            return false;
        };
        let n = psn::diff(p, from) + i32::from(through);
        (0..n.clamp(0, SLOTS as i32 / 2) as u32).any(|i| {
            let q = psn::add(from, i);
            self.slot(q).is_some_and(|s| {
                s.answered == 0 && (s.read_first == Some(q) || s.opcode().kind().is_atomic())
            })
        })
    }

    /// Whether an answer for `p` comes while a READ or atomic before it, acknowledged already
    /// by a later answer (itself an implied NAK), has still had no answer of its own: the
    /// requester, which completes in order, takes `p`'s answer as one more implied NAK and may
    /// drop it (IBTA 9.7.5.2.1 and 9.7.5.2.3; rxe's comp.c `check_psn`, `COMPST_ERROR_RETRY`),
    /// so sending `p` again later answers a lost answer. A READ's own responses count only
    /// when they skip one (the requester goes back for the response missing).
    fn passes_unanswered(&self, kind: Kind, p: u32) -> bool {
        let read_of_p = self
            .slot(p)
            .and_then(|s| s.read_first)
            .filter(|_| kind.is_read_response());
        let skips_response = read_of_p
            .and_then(|f| self.slot(f))
            .is_some_and(|s| psn::before(s.next_response, p));
        skips_response
            || self.unanswered.iter().any(|&q| {
                psn::before(q, p)
                    && read_of_p != Some(q)
                    && self.slot(q).is_some_and(|s| s.answered == 0)
            })
    }

    /// After a READ's last response or an atomic ACK for `p`, the READs and atomics before it
    /// are answered too (the responder answers in order), or their answers are not in the
    /// capture: they are forgotten.
    fn forget_answered(&mut self, kind: Kind, p: u32) {
        let whole = match self.slot(p) {
            Some(s) if matches!(kind, Kind::ReadResponseLast | Kind::ReadResponseOnly) => {
                s.read_first
            }
            Some(s) if kind == Kind::AtomicAcknowledge && s.opcode().kind().is_atomic() => Some(p),
            _ => None,
        };
        if let Some(f) = whole.filter(|&f| self.slot(f).is_some_and(|s| s.answered > 0)) {
            let slots = &self.slots;
            self.unanswered
                .retain(|&q| psn::before(f, q) && slots[q as usize % SLOTS].tag == q + 1);
        }
    }

    /// An answer's credit count (code `code`), acknowledging the PSNs before `before`, against
    /// the last one advertised: it may fall by the receive-consuming messages the requester
    /// sent since that one's PSN, at most (IBTA 9.7.7.2; [`rules::credits_fall_ok`]). Judged
    /// with the order rules: an ACK the network delayed behind a later one seems to take
    /// credits back.
    fn check_credits(&mut self, frame: u64, code: u8, before: u32) {
        let Some(has) = rules::credits(code) else {
            return;
        };
        if let Some((earlier, from, earlier_frame)) = self.credits {
            let consumed = self.receives_sent_from(from);
            if let (Some(had), Some(consumed)) = (rules::credits(earlier), consumed) {
                if !rules::credits_fall_ok(earlier, code, consumed) && self.deferred.len() < AHEAD {
                    let least = rules::credits(rules::credit_code(had.saturating_sub(consumed)));
                    self.deferred.push(Finding::new(
                        Rule::AckCredits,
                        [earlier_frame, frame],
                        format!(
                            "at least {} credits: {had} advertised before, and at most {consumed} receive-consuming messages sent since",
                            least.unwrap_or(0)
                        ),
                        format!("{has} credits (code {code})"),
                    ));
                }
            }
        }
        self.credits = Some((code, before, frame));
    }

    /// The messages that take a receive WQE (SENDs, RDMA WRITEs with immediate) with a packet
    /// at PSN `from` or after it, among the requests sent so far; `None` when the capture lacks
    /// some of those PSNs (how many took a receive is then unknown).
    fn receives_sent_from(&self, from: u32) -> Option<u32> {
        let n = psn::diff(self.high, from);
        if n > SLOTS as i32 / 2 {
            return None;
        }
        let mut consumed = 0;
        for i in 0..n.max(0) as u32 {
            let op = self.slot(psn::add(from, i))?.opcode();
            let kind = op.kind();
            // A SEND counts once, where it starts (or at `from`, when it started before);
            // a WRITE's immediate comes with its last packet.
            let takes = (kind.is_send() && (op.position().is_start() || i == 0))
                || matches!(kind, Kind::WriteLastImm | Kind::WriteOnlyImm);
            consumed += u32::from(takes);
        }
        Some(consumed)
    }

    fn acknowledge(&mut self, before: u32, time: Duration) {
        let from = match self.acked_before {
            Some(a) if psn::diff(before, a) <= 0 => return,
            Some(a) => a,
            None => before.wrapping_sub(SLOTS as u32 / 2) & psn::MASK,
        };
        let n = (psn::diff(before, from).max(0) as u32).min(SLOTS as u32);
        for i in 0..n {
            if let Some(s) = self.slot_mut(psn::add(from, i)) {
                // A READ is answered by its responses, each of which may be lost: sending it
                // again is always the answer to a response missing.
                if s.acked.is_zero() && s.read_first.is_none() {
                    s.acked = time.max(Duration::from_nanos(1));
                }
            }
        }
        self.acked_before = Some(before);
    }

    fn check_read_response(
        &mut self,
        out: &mut Sink<'_>,
        mtu: &Mtu,
        frame: u64,
        opcode: Opcode,
        p: u32,
        payload: u32,
    ) {
        let Some(slot) = self.slot(p).copied() else {
            return;
        };
        let Some(first) = slot.read_first else {
            out.violation(Finding::new(
                Rule::ReadResponsePsn,
                [slot.frame, frame],
                "a PSN that a READ request reserved".to_string(),
                format!(
                    "{} for PSN {p:#08x}, a {}",
                    opcode.name(),
                    slot.opcode().name()
                ),
            ));
            return;
        };
        let Some(m) = mtu.bytes() else { return };
        let request = self.slot(first).copied().unwrap_or(slot);
        let len = u64::from(request.len);
        let npkts = rules::packets(len, m);
        let n = psn::diff(p, first) as u32;
        if n >= npkts {
            out.violation(Finding::new(
                Rule::ReadResponsePsn,
                [request.frame, frame],
                format!(
                    "PSNs {first:#08x} to {:#08x} ({npkts} responses)",
                    psn::add(first, npkts - 1)
                ),
                format!("PSN {p:#08x}"),
            ));
            return;
        }
        let kind = opcode.kind();
        // Counted from the READ's first PSN; after a READ retried from the middle, also from
        // where the retry starts (the responder answers it as a READ of its own).
        let from_retry = request.read_retry.or(slot.read_retry).and_then(|r| {
            let k = psn::diff(p, r);
            let left = len.saturating_sub(u64::from(psn::diff(r, first) as u32) * u64::from(m));
            (k >= 0).then(|| rules::read_response_kind(k as u32, rules::packets(left, m)))
        });
        let expected = rules::read_response_kind(n, npkts);
        let size = rules::packet_len(len, n, m);
        if (kind != expected && Some(kind) != from_retry) || u64::from(payload) != size {
            let name = |k: Kind| Opcode::new(roce_wire::Transport::Rc, k).map_or("?", |o| o.name());
            out.violation(Finding::new(
                Rule::ReadResponse,
                [request.frame, frame],
                format!(
                    "{} with {size} bytes (response {} of {npkts} to a READ of {len} bytes)",
                    name(expected),
                    n + 1
                ),
                format!("{} with {payload} bytes", opcode.name()),
            ));
        }
    }

    fn check_atomic_ack(&mut self, out: &mut Sink<'_>, frame: u64, p: u32, original: Option<u64>) {
        let Some(slot) = self.slot_mut(p) else { return };
        if !slot.opcode().kind().is_atomic() {
            let (sent, name) = (slot.frame, slot.opcode().name());
            out.violation(Finding::new(
                Rule::AtomicAckPsn,
                [sent, frame],
                "the PSN of an atomic request".to_string(),
                format!("PSN {p:#08x}, a {name}"),
            ));
            return;
        }
        match (slot.original, original) {
            (Some(first), Some(again)) if first != again => {
                let sent = slot.frame;
                out.violation(Finding::new(
                    Rule::AtomicReplay,
                    [sent, frame],
                    format!("original value {first:#x}, as first answered"),
                    format!("{again:#x}"),
                ));
            }
            (None, Some(v)) => slot.original = Some(v),
            _ => {}
        }
    }

    /// The MSN of an answer for `p` counts at least the messages through `p` (before it, for a
    /// NAK), and at most every message sent so far: a responder may answer with the count it
    /// has when the answer leaves (READ responses queued behind later requests, answers to
    /// duplicates). Where the count started is unknown (the capture may start late), so each
    /// answer narrows the range of starts it allows; an answer outside every start left breaks
    /// the rule.
    fn check_msn(
        &mut self,
        out: &mut Sink<'_>,
        frame: u64,
        kind: Kind,
        p: u32,
        syndrome: Option<Syndrome>,
        msn: u32,
    ) {
        let counts_p = !matches!(
            syndrome,
            Some(Syndrome::Nak(_)) | Some(Syndrome::RnrNak { .. })
        );
        let least = match self.slot(p) {
            Some(s) if s.epoch == self.epoch => s
                .msgs_before
                .wrapping_add(u32::from(counts_p && (s.ends || kind.is_read_response()))),
            _ => return,
        };
        let most = self.msgs;
        let allowed = (
            msn.wrapping_sub(most) & psn::MASK,
            msn.wrapping_sub(least) & psn::MASK,
        );
        let Some((lo, hi)) = self.msn_base else {
            self.msn_base = Some(allowed);
            return;
        };
        let lo2 = if psn::diff(allowed.0, lo) > 0 {
            allowed.0
        } else {
            lo
        };
        let hi2 = if psn::diff(allowed.1, hi) < 0 {
            allowed.1
        } else {
            hi
        };
        if psn::diff(hi2, lo2) >= 0 {
            self.msn_base = Some((lo2, hi2));
            return;
        }
        out.violation(Finding::new(
            Rule::Msn,
            [frame],
            format!(
                "MSN {:#08x} to {:#08x}: at least one per message completed through PSN {p:#08x}, at most one per message sent",
                psn::add(lo, least),
                psn::add(hi, most)
            ),
            format!("MSN {msn:#08x}"),
        ));
        // One report per drift, not one per answer.
        self.msn_base = Some(allowed);
    }

    /// Whether the capture shows this direction's packets reordered on the way: a request
    /// that came after later ones, a NAK after the answers beyond it.
    pub fn reordered(&self) -> bool {
        self.reorder_seen || self.counts.reordered > 0
    }

    /// At the end of the capture: answers for PSNs that were never sent, and the findings that
    /// depend on the order of the two directions — judged only where the network kept order
    /// (`judge_order`), as the IBTA assumes of it; resend causes only where the capture saw
    /// the answers the requester received (`resends_judged`).
    pub fn finish(&mut self, out: &mut Sink<'_>, judge_order: bool, resends_judged: bool) {
        let deferred = std::mem::take(&mut self.deferred);
        let skipped = std::mem::take(&mut self.skipped);
        if !judge_order {
            return self.finish_answers(out);
        }
        for f in deferred {
            if f.rule != Rule::ResendCause || resends_judged {
                out.violation(f);
            }
        }
        for (q, nak_frame, frame, p) in skipped {
            out.violation(Finding::new(
                Rule::NakGoBack,
                [nak_frame, frame],
                format!("a resend from PSN {q:#08x}, the NAK's"),
                format!("a resend from PSN {p:#08x}, and PSN {q:#08x} never sent again"),
            ));
        }
        self.finish_answers(out);
    }

    fn finish_answers(&mut self, out: &mut Sink<'_>) {
        for hole in std::mem::take(&mut self.holes) {
            self.report_hole(out, hole);
        }
        for (q, frame) in self.ahead.drain(..) {
            out.violation(Finding::new(
                Rule::AnswerUnsent,
                [frame],
                format!(
                    "an answer for a PSN sent (the highest sent is {:#08x})",
                    self.high.wrapping_sub(1) & psn::MASK
                ),
                format!("an answer for PSN {q:#08x}"),
            ));
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
