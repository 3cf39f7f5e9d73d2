//! `roce conform`: judge a capture's queue-pair conversations against the transport rules.
//!
//! A packet decoder (ours, Wireshark's) answers per packet: are the headers well formed, is the
//! ICRC right. This module answers per conversation: did both ends follow the protocol — PSNs,
//! opcode sequences, payload sizes against the path MTU and the DMA length, what answers what,
//! MSNs, resends and their causes, READ responses and atomic ACKs. The rules themselves are the
//! transport's own (`roce_nic::transport::rules`, `psn`), run here as a passive observer, so the
//! emulator and the checker cannot drift apart; [`catalog`] names them and says where each comes
//! from.
//!
//! Conversations are found as the capture goes: a connected QP's packets carry only the
//! destination QP number, so each direction (source address, destination address, destination
//! QP) is a flow, and the two flows of one QP pair are matched by the CM's REQ and REP when the
//! capture holds them, else by the UDP source port (both ends of a Linux or roce QP pair derive
//! it from the two QP numbers), else because they are the only candidates. Datagrams carry their
//! source QP, so UD conversations are exact.
//!
//! Nothing is allocated per packet once a conversation is known: its flows are looked up in a
//! hash map and each direction keeps a fixed ring of what each PSN carried.

pub mod catalog;
mod stream;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use roce_nic::transport::rules;
use roce_wire::capture::{CaptureError, Reader};
use roce_wire::cm::{self, Message};
use roce_wire::mad::GSI_QPN;
use roce_wire::{Error, Frame, NetworkRepr, Transport};

pub use catalog::Rule;
pub use stream::Counts;
use stream::Stream;

/// A broken rule, where, and what the rule expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    /// The conversation's number in [`Report::conversations`] (from 1).
    pub conversation: usize,
    /// The frames that show it (tshark's frame numbers), oldest first.
    pub frames: Vec<u64>,
    pub expected: String,
    pub found: String,
}

/// Packets the capture does not hold, and what the other end's answers say about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPackets {
    pub conversation: usize,
    pub from_psn: u32,
    pub count: u32,
    /// The first frame after them.
    pub before_frame: u64,
    pub evidence: &'static str,
}

/// One end of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub addr: IpAddr,
    /// `None` until a packet to it (or the CM) names it.
    pub qpn: Option<u32>,
}

/// What one conversation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    pub number: usize,
    /// "RC", "UC", "UD", or "CNP" for congestion notifications to a QP that sent nothing else.
    pub transport: &'static str,
    pub ends: [End; 2],
    /// Connected through the CM, whose REQ and REP are in the capture.
    pub via_cm: bool,
    pub path_mtu: Option<u32>,
    /// How the path MTU is known: "CM", "payload" (FIRST/MIDDLE sizes) or "READ PSNs".
    pub mtu_source: Option<&'static str>,
    /// `directions[0]`: requests from `ends[0]` and the answers from `ends[1]`.
    pub directions: [Counts; 2],
    /// Answers to requests from before the capture started.
    pub started_late: bool,
    /// Whether the rules that depend on the order of both directions (resend-cause,
    /// nak-go-back, ack-coverage, ack-credits) were judged: not where the capture shows the network
    /// reordering packets, which the IBTA assumes it does not.
    pub order_judged: bool,
    /// Per direction, whether its requester's resends were judged (`resend-cause`): not for a
    /// requester elsewhere than where the capture was taken ([`Options::at`]).
    pub resends_judged: [bool; 2],
    pub cnps: u64,
    pub ecn_ce: u64,
}

/// Everything `roce conform` found in one capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub frames: u64,
    pub roce: u64,
    pub not_roce: u64,
    pub malformed: u64,
    /// RoCE packets with a bad ICRC: a receiver drops them, so the conversation ignores them.
    pub bad_icrc: u64,
    pub conversations: Vec<Conversation>,
    pub violations: Vec<Violation>,
    pub missing: Vec<MissingPackets>,
}

impl Report {
    /// The violations of rules not in `allowed`.
    pub fn broken<'a>(&'a self, allowed: &'a [Rule]) -> impl Iterator<Item = &'a Violation> + 'a {
        self.violations
            .iter()
            .filter(move |v| !allowed.contains(&v.rule))
    }
}

/// What the checker is told about the capture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// The network may reorder packets (a fault injector, several paths), or the capture was
    /// taken before faults that drop packets: the rules that depend on the order of the two
    /// directions are not judged, as the IBTA assumes a network that keeps order and an answer
    /// captured may not have arrived. Where a capture shows reordering itself, they are not
    /// judged either.
    pub reordering: bool,
    /// The host the capture was taken at, when known (`roce nic --pcap` records at the NIC):
    /// what it sent is in the capture before any loss, what it received after. An answer the
    /// capture shows reached a requester there; an answer it sends to a requester elsewhere
    /// may be lost or overtaken on its way, so whether a resend there had a cause is not
    /// judged (`resend-cause` only for requesters at this host). Unknown (`None`), every
    /// requester is judged, as if the capture saw what each received.
    pub at: Option<IpAddr>,
}

/// Reads a whole capture and judges it.
pub fn check<R: std::io::Read>(reader: Reader<R>) -> Result<Report, CaptureError> {
    check_with(reader, Options::default())
}

/// Reads a whole capture and judges it, told `options`.
pub fn check_with<R: std::io::Read>(
    mut reader: Reader<R>,
    options: Options,
) -> Result<Report, CaptureError> {
    let mut checker = Checker::new(options);
    while let Some(record) = reader.next_record() {
        let record = record?;
        checker.frames += 1;
        match record.frame() {
            Ok(frame) => checker.packet(record.number, record.timestamp, &frame),
            Err(Error::NotRoce(_)) => checker.not_roce += 1,
            Err(_) => checker.malformed += 1,
        }
    }
    Ok(checker.finish())
}

/// What a finding of a stream says; the stream does not know its conversation's number.
pub(crate) struct Finding {
    rule: Rule,
    frames: Vec<u64>,
    expected: String,
    found: String,
}

impl Finding {
    fn new(
        rule: Rule,
        frames: impl IntoIterator<Item = u64>,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> Finding {
        let mut frames: Vec<u64> = frames.into_iter().filter(|&f| f != 0).collect();
        frames.sort_unstable();
        frames.dedup();
        Finding {
            rule,
            frames,
            expected: expected.into(),
            found: found.into(),
        }
    }
}

/// Missing packets as a stream reports them.
pub(crate) struct Missing {
    from_psn: u32,
    count: u32,
    before_frame: u64,
    evidence: &'static str,
}

/// Where a stream's findings go: the report, tagged with the conversation.
pub(crate) struct Sink<'a> {
    conversation: usize,
    violations: &'a mut Vec<Violation>,
    missing: &'a mut Vec<MissingPackets>,
}

impl Sink<'_> {
    fn violation(&mut self, f: Finding) {
        self.violations.push(Violation {
            rule: f.rule,
            conversation: self.conversation,
            frames: f.frames,
            expected: f.expected,
            found: f.found,
        });
    }

    fn missing(&mut self, m: Missing) {
        self.missing.push(MissingPackets {
            conversation: self.conversation,
            from_psn: m.from_psn,
            count: m.count,
            before_frame: m.before_frame,
            evidence: m.evidence,
        });
    }
}

/// A conversation's path MTU, as far as it is known.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mtu {
    value: Option<u32>,
    source: Option<&'static str>,
}

impl Mtu {
    fn bytes(&self) -> Option<u32> {
        self.value
    }

    /// A FIRST or MIDDLE payload: the path MTU itself.
    fn observe(&mut self, out: &mut Sink<'_>, frame: u64, payload: u32) {
        if self.value.is_some() {
            return;
        }
        if rules::PATH_MTUS.contains(&payload) {
            self.value = Some(payload);
            self.source = Some("payload");
        } else {
            out.violation(Finding::new(
                Rule::PathMtu,
                [frame],
                "a FIRST or MIDDLE payload of 256, 512, 1024, 2048 or 4096 bytes",
                format!("{payload} bytes"),
            ));
        }
    }

    fn infer_from_read(&mut self, mtu: u32) {
        if self.value.is_none() {
            self.value = Some(mtu);
            self.source = Some("READ PSNs");
        }
    }
}

/// A flow: packets from one address to one QP at another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FlowKey {
    src: [u8; 16],
    dst: [u8; 16],
    dest_qp: u32,
    /// UC and RC QPs are different QPs even under one number (one after the other).
    uc: bool,
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    conversation: usize,
    /// Which end sends it.
    side: usize,
    /// Its UDP source port (RoCEv2).
    port: Option<u16>,
}

/// A connection the CM set up: who asked, who answered, their QPs, and the first PSN each
/// expects to receive (a REQ's or REP's starting PSN is its sender's receive PSN, which the
/// other side sends from, as Linux's CM and ours set up the QPs).
#[derive(Debug, Clone, Copy)]
struct CmConnection {
    comm_id: u32,
    active: [u8; 16],
    passive: [u8; 16],
    active_qpn: u32,
    active_psn: u32,
    passive_qpn: Option<u32>,
    passive_psn: Option<u32>,
    mtu: Option<u32>,
}

struct State {
    transport: Option<Transport>,
    ends: [([u8; 16], Option<u32>); 2],
    has_flow: [bool; 2],
    flow_keys: [Option<FlowKey>; 2],
    udp_port: Option<u16>,
    via_cm: bool,
    mtu: Mtu,
    streams: [Stream; 2],
    cnps: u64,
    ecn_ce: u64,
    /// The last frame of the conversation.
    last_frame: u64,
}

/// The observer: feed it every frame of a capture in order, then [`Checker::finish`].
#[derive(Default)]
pub struct Checker {
    options: Options,
    frames: u64,
    roce: u64,
    not_roce: u64,
    malformed: u64,
    bad_icrc: u64,
    flows: HashMap<FlowKey, Flow>,
    datagrams: HashMap<(FlowKey, u32), usize>,
    conversations: Vec<State>,
    cm: Vec<CmConnection>,
    violations: Vec<Violation>,
    missing: Vec<MissingPackets>,
}

/// An address as 16 bytes (IPv4 mapped), and whether the packet carries an ECN CE mark.
fn addresses(network: &NetworkRepr) -> ([u8; 16], [u8; 16], bool) {
    match *network {
        NetworkRepr::Ipv4 { src, dst, ecn, .. } => (
            std::net::Ipv4Addr::from(src.octets())
                .to_ipv6_mapped()
                .octets(),
            std::net::Ipv4Addr::from(dst.octets())
                .to_ipv6_mapped()
                .octets(),
            ecn == 3,
        ),
        NetworkRepr::Ipv6 {
            src,
            dst,
            traffic_class,
            ..
        } => (src.octets(), dst.octets(), traffic_class & 3 == 3),
        NetworkRepr::Grh {
            sgid,
            dgid,
            traffic_class,
            ..
        } => (sgid.octets(), dgid.octets(), traffic_class & 3 == 3),
    }
}

fn udp_port(network: &NetworkRepr) -> Option<u16> {
    match *network {
        NetworkRepr::Ipv4 { udp_src_port, .. } | NetworkRepr::Ipv6 { udp_src_port, .. } => {
            Some(udp_src_port)
        }
        NetworkRepr::Grh { .. } => None,
    }
}

fn ip(addr: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(addr);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The IB path MTU code of a CM REQ (1 = 256 ... 5 = 4096).
fn mtu_of_code(code: u8) -> Option<u32> {
    (1..=5).contains(&code).then(|| 128u32 << code)
}

impl Checker {
    pub fn new(options: Options) -> Checker {
        Checker {
            options,
            ..Checker::default()
        }
    }

    /// One RoCE frame of the capture.
    pub fn packet(&mut self, number: u64, time: Duration, frame: &Frame<'_>) {
        self.roce += 1;
        if !frame.icrc().is_ok() {
            self.bad_icrc += 1;
            return;
        }
        let repr = &frame.repr;
        let bth = &repr.bth;
        let (src, dst, ce) = addresses(&repr.network);
        match bth.opcode.transport() {
            Transport::Ud => self.datagram(number, frame, src, dst, ce),
            Transport::Cnp => {
                let (c, _) = self.flow(src, dst, bth.dest_qp, None, udp_port(&repr.network), None);
                let state = &mut self.conversations[c];
                state.cnps += 1;
                state.ecn_ce += u64::from(ce);
            }
            transport => {
                let answer = bth.opcode.kind().is_response().then_some(bth.psn);
                let key = FlowKey {
                    src,
                    dst,
                    dest_qp: bth.dest_qp,
                    uc: transport == Transport::Uc,
                };
                self.rehome_misfit(key, bth.psn, answer.is_some(), udp_port(&repr.network));
                let (c, side) = self.flow(
                    src,
                    dst,
                    bth.dest_qp,
                    Some(transport),
                    udp_port(&repr.network),
                    answer,
                );
                let state = &mut self.conversations[c];
                state.last_frame = number;
                state.ecn_ce += u64::from(ce);
                let State { streams, mtu, .. } = state;
                let mut out = Sink {
                    conversation: c + 1,
                    violations: &mut self.violations,
                    missing: &mut self.missing,
                };
                let payload = repr.payload_len as u32;
                let ext = &repr.ext;
                if bth.opcode.kind().is_response() {
                    streams[1 - side].answer(
                        &mut out,
                        mtu,
                        number,
                        time,
                        bth.opcode,
                        bth.psn,
                        ext.aeth.map(|a| a.syndrome),
                        ext.aeth.map(|a| a.msn),
                        payload,
                        ext.atomic_ack_eth.map(|a| a.original),
                    );
                } else {
                    streams[side].request(
                        &mut out,
                        mtu,
                        stream::Request {
                            frame: number,
                            time,
                            opcode: bth.opcode,
                            psn: bth.psn,
                            payload,
                            dma_len: ext.reth.map(|r| r.dma_len),
                        },
                    );
                }
            }
        }
    }

    fn new_conversation(
        &mut self,
        transport: Option<Transport>,
        ends: [([u8; 16], Option<u32>); 2],
    ) -> usize {
        let uc = transport == Some(Transport::Uc);
        self.conversations.push(State {
            transport,
            ends,
            has_flow: [false; 2],
            flow_keys: [None; 2],
            udp_port: None,
            via_cm: false,
            mtu: Mtu::default(),
            streams: [Stream::new(uc), Stream::new(uc)],
            cnps: 0,
            ecn_ce: 0,
            last_frame: 0,
        });
        self.conversations.len() - 1
    }

    /// The conversation and side of the flow (src → dst's QP `dest_qp`), found or made.
    fn flow(
        &mut self,
        src: [u8; 16],
        dst: [u8; 16],
        dest_qp: u32,
        transport: Option<Transport>,
        port: Option<u16>,
        answer: Option<u32>,
    ) -> (usize, usize) {
        let key = FlowKey {
            src,
            dst,
            dest_qp,
            uc: transport == Some(Transport::Uc),
        };
        if let Some(flow) = self.flows.get(&key).copied() {
            let state = &mut self.conversations[flow.conversation];
            if state.streams.iter().any(Stream::closed) {
                // A fatal NAK ended that connection: the QP number now belongs to a new one.
                for key in state.flow_keys.into_iter().flatten() {
                    self.flows.remove(&key);
                }
                return self.flow(src, dst, dest_qp, transport, port, answer);
            }
            if state.transport.is_none() && transport.is_some() {
                state.transport = transport;
                let uc = transport == Some(Transport::Uc);
                state.streams = [Stream::new(uc), Stream::new(uc)];
            }
            return (flow.conversation, flow.side);
        }
        let flow = self.pair(key, transport, port, answer).unwrap_or_else(|| {
            let c = self.new_conversation(transport, [(src, None), (dst, Some(dest_qp))]);
            self.conversations[c].udp_port = port;
            self.apply_cm(c);
            Flow {
                conversation: c,
                side: 0,
                port,
            }
        });
        self.conversations[flow.conversation].has_flow[flow.side] = true;
        self.conversations[flow.conversation].flow_keys[flow.side] = Some(key);
        self.flows.insert(key, flow);
        (flow.conversation, flow.side)
    }

    /// A QP number destroyed and created again (the next run of a tool) carries a new
    /// conversation under an old flow: another UDP source port, or a request or an answer far
    /// from the PSNs its conversation used, frees the flow to be paired anew.
    fn rehome_misfit(&mut self, key: FlowKey, p: u32, answer: bool, port: Option<u16>) {
        let Some(flow) = self.flows.get(&key).copied() else {
            return;
        };
        let state = &self.conversations[flow.conversation];
        // Linux and this NIC derive the UDP source port from the QPs: another port, other QPs.
        let misfit = flow.port != port
            || if answer {
                state.streams[1 - flow.side].far_from(p)
            } else {
                state.streams[flow.side].far_from(p)
            };
        if misfit {
            // The old conversation keeps its side as it was: it takes no other flow there.
            self.flows.remove(&key);
            self.conversations[flow.conversation].flow_keys[flow.side] = None;
        }
    }

    /// The conversation whose other flow this one is: the CM's word; else the same UDP source
    /// port; else, for a flow that starts with an answer, the conversation whose requests it
    /// answers (PSNs start at random, so they tell conversations apart); else the candidate
    /// heard from last.
    fn pair(
        &mut self,
        key: FlowKey,
        transport: Option<Transport>,
        port: Option<u16>,
        answer: Option<u32>,
    ) -> Option<Flow> {
        let candidates: Vec<usize> = (0..self.conversations.len())
            .filter(|&c| {
                let s = &self.conversations[c];
                s.ends[0].0 == key.dst
                    && s.ends[1].0 == key.src
                    && !s.has_flow[1]
                    && s.ends[0].1.is_none_or(|q| q == key.dest_qp)
                    && (s.transport.is_none() || transport.is_none() || s.transport == transport)
            })
            .collect();
        let state = |c: &usize| &self.conversations[*c];
        let c = candidates
            .iter()
            .find(|c| state(c).ends[0].1 == Some(key.dest_qp))
            .or_else(|| {
                candidates
                    .iter()
                    .find(|c| port.is_some() && state(c).udp_port == port)
            })
            .or_else(|| {
                let p = answer?;
                candidates.iter().find(|c| state(c).streams[0].sent(p))
            })
            .or_else(|| candidates.iter().max_by_key(|c| state(c).last_frame))
            .copied()?;
        let state = &mut self.conversations[c];
        state.ends[0].1 = Some(key.dest_qp);
        if state.transport.is_none() {
            state.transport = transport;
        }
        Some(Flow {
            conversation: c,
            side: 1,
            port,
        })
    }

    /// Applies what the CM said about a new conversation's QPs, first PSNs and path MTU.
    fn apply_cm(&mut self, c: usize) {
        let state = &mut self.conversations[c];
        let (src, (dst, Some(dest_qp))) = (state.ends[0].0, state.ends[1]) else {
            return;
        };
        for conn in self.cm.iter().rev() {
            let (src_qpn, src_psn, dst_psn) =
                if conn.active == src && conn.passive == dst && conn.passive_qpn == Some(dest_qp) {
                    (
                        Some(conn.active_qpn),
                        conn.passive_psn,
                        Some(conn.active_psn),
                    )
                } else if conn.passive == src && conn.active == dst && conn.active_qpn == dest_qp {
                    (conn.passive_qpn, Some(conn.active_psn), conn.passive_psn)
                } else {
                    continue;
                };
            state.ends[0].1 = src_qpn;
            state.streams[0].cm_start = src_psn;
            state.streams[1].cm_start = dst_psn;
            state.via_cm = true;
            if let Some(m) = conn.mtu {
                state.mtu = Mtu {
                    value: Some(m),
                    source: Some("CM"),
                };
            }
            return;
        }
    }

    fn datagram(&mut self, number: u64, frame: &Frame<'_>, src: [u8; 16], dst: [u8; 16], ce: bool) {
        let repr = &frame.repr;
        let Some(deth) = repr.ext.deth else { return };
        let dest_qp = repr.bth.dest_qp;
        // One conversation per pair of QPs, whichever way the datagram goes.
        let (a, b) = ((src, deth.src_qp), (dst, dest_qp));
        let (lo, hi, side) = if a <= b { (a, b, 0) } else { (b, a, 1) };
        let key = (
            FlowKey {
                src: lo.0,
                dst: hi.0,
                dest_qp: lo.1,
                uc: false,
            },
            hi.1,
        );
        let c = match self.datagrams.get(&key) {
            Some(&c) => c,
            None => {
                let c = self.new_conversation(
                    Some(Transport::Ud),
                    [(lo.0, Some(lo.1)), (hi.0, Some(hi.1))],
                );
                self.datagrams.insert(key, c);
                c
            }
        };
        let state = &mut self.conversations[c];
        state.ecn_ce += u64::from(ce);
        let counts = &mut state.streams[side].counts;
        counts.packets += 1;
        counts.messages += 1;
        counts.bytes += repr.payload_len as u64;
        let mut out = Sink {
            conversation: c + 1,
            violations: &mut self.violations,
            missing: &mut self.missing,
        };
        if dest_qp == GSI_QPN && deth.q_key != roce_wire::mad::GSI_QKEY {
            out.violation(Finding::new(
                Rule::UdGsiQkey,
                [number],
                "Q_Key 0x80010000",
                format!("Q_Key {:#010x}", deth.q_key),
            ));
        }
        if deth.src_qp == 0 {
            out.violation(Finding::new(
                Rule::UdSourceQp,
                [number],
                "a source QP other than 0",
                "source QP 0",
            ));
        }
        let limit = state.mtu.bytes().unwrap_or(4096);
        if repr.payload_len > limit as usize {
            out.violation(Finding::new(
                Rule::UdPayload,
                [number],
                format!("at most {limit} bytes"),
                format!("{} bytes", repr.payload_len),
            ));
        }
        if dest_qp == GSI_QPN {
            if let Some(Ok(mad)) = cm::parse_frame(frame) {
                self.connection_manager(src, dst, &mad.message);
            }
        }
    }

    /// A CM message: a REQ names the active side's QP, first PSN and path MTU, the REP the
    /// passive side's.
    fn connection_manager(&mut self, src: [u8; 16], dst: [u8; 16], message: &Message) {
        match message {
            Message::Req(req) => self.cm.push(CmConnection {
                comm_id: req.local_comm_id,
                active: src,
                passive: dst,
                active_qpn: req.local_qpn,
                active_psn: req.starting_psn,
                passive_qpn: None,
                passive_psn: None,
                mtu: mtu_of_code(req.path_mtu),
            }),
            Message::Rep(rep) => {
                if let Some(conn) = self.cm.iter_mut().rev().find(|c| {
                    c.comm_id == rep.remote_comm_id && c.passive == src && c.active == dst
                }) {
                    conn.passive_qpn = Some(rep.local_qpn);
                    conn.passive_psn = Some(rep.starting_psn);
                }
            }
            _ => {}
        }
    }

    /// Ends the capture: what was left open is judged, and the report made.
    pub fn finish(mut self) -> Report {
        let mut conversations = Vec::with_capacity(self.conversations.len());
        for (i, state) in self.conversations.iter_mut().enumerate() {
            let mut out = Sink {
                conversation: i + 1,
                violations: &mut self.violations,
                missing: &mut self.missing,
            };
            let judge_order =
                !self.options.reordering && !state.streams.iter().any(Stream::reordered);
            let at = self.options.at.map(|addr| match addr {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            });
            // The requests of `streams[side]` come from `ends[side]`.
            let resends_judged = [0, 1].map(|side| at.is_none_or(|a| a == state.ends[side].0));
            for (stream, judged) in state.streams.iter_mut().zip(resends_judged) {
                stream.finish(&mut out, judge_order, judged);
            }
            conversations.push(Conversation {
                number: i + 1,
                transport: match state.transport {
                    Some(Transport::Rc) => "RC",
                    Some(Transport::Uc) => "UC",
                    Some(Transport::Ud) => "UD",
                    _ => "CNP",
                },
                ends: state.ends.map(|(addr, qpn)| End {
                    addr: ip(addr),
                    qpn,
                }),
                via_cm: state.via_cm,
                path_mtu: state.mtu.value,
                mtu_source: state.mtu.source,
                directions: [state.streams[0].counts, state.streams[1].counts],
                started_late: state.streams.iter().any(|s| s.started_late),
                order_judged: judge_order,
                resends_judged,
                cnps: state.cnps,
                ecn_ce: state.ecn_ce,
            });
        }
        self.violations
            .sort_by_key(|v| (v.frames.first().copied().unwrap_or(0), v.rule));
        Report {
            frames: self.frames,
            roce: self.roce,
            not_roce: self.not_roce,
            malformed: self.malformed,
            bad_icrc: self.bad_icrc,
            conversations,
            violations: self.violations,
            missing: self.missing,
        }
    }
}
