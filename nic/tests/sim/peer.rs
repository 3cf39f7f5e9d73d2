//! A scripted peer: one node, and a test that writes the other end's packets by hand. It
//! delivers the packets it builds, collects what the node answers (parsed), and moves the
//! simulated clock so that the node's timers fire — for cases no well-behaved NIC produces.

use std::time::{Duration, Instant};

use roce_nic::verbs::{Mtu, QpState, SendWr, Wc};
use roce_wire::aeth::{self, Syndrome};
use roce_wire::{bth, EthernetRepr, Extensions, Frame, FrameRepr, Kind};
use roce_wire::{NetworkRepr, Opcode, Transport};

use super::world::{Nanos, Node, QpSetup, FRAME_SPACE};

/// The peer's QP number.
pub const PEER_QPN: u32 = 0x99;

/// A packet the node sent, parsed.
#[derive(Debug, Clone)]
pub struct Sent {
    pub kind: Kind,
    pub psn: u32,
    pub ext: Extensions,
    pub payload: Vec<u8>,
}

impl Sent {
    pub fn syndrome(&self) -> Option<Syndrome> {
        self.ext.aeth.map(|a| a.syndrome)
    }
}

/// One node and a scripted peer.
pub struct Bench {
    pub node: Node,
    start: Instant,
    pub now: Nanos,
    buf: Vec<u8>,
}

/// The usual setup: MTU 256, PSNs from 100 both ways, a 4 ms retransmission timeout, RNR
/// timer 1 (10 µs).
pub fn setup() -> QpSetup {
    QpSetup {
        mtu: Mtu::M256,
        sq_psn: 100,
        rq_psn: 100,
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        min_rnr_timer: 1,
        max_rd_atomic: 4,
        rxe_compat: false,
        rto_low: false,
    }
}

impl Bench {
    pub fn new(setup: QpSetup) -> Bench {
        let start = Instant::now();
        let mut node = Node::new("N", 0, 0x11, 64 << 10);
        node.connect(0, PEER_QPN, &setup, start);
        node.events.log = Some(Vec::new());
        Bench {
            node,
            start,
            now: 0,
            buf: vec![0; FRAME_SPACE],
        }
    }

    pub fn instant(&self) -> Instant {
        self.start + Duration::from_nanos(self.now)
    }

    /// Delivers a packet from the peer: `kind` at `psn` with `ext` and `payload`, then lets
    /// the node work.
    pub fn deliver(&mut self, kind: Kind, psn: u32, ext: Extensions, payload: &[u8]) {
        self.deliver_batch(&[(kind, psn, ext, payload)]);
    }

    /// Delivers packets as one batch (the engine's receive pass), then lets the node work.
    pub fn deliver_batch(&mut self, packets: &[(Kind, u32, Extensions, &[u8])]) {
        let now = self.instant();
        for &(kind, psn, ext, payload) in packets {
            let frame = self.frame(kind, psn, ext, payload);
            self.node.receive(&frame, now);
        }
        self.node.end_batch(now);
        self.work();
    }

    /// A packet from the peer, as a frame.
    fn frame(&mut self, kind: Kind, psn: u32, ext: Extensions, payload: &[u8]) -> Vec<u8> {
        let opcode = Opcode::new(Transport::Rc, kind).expect("an RC opcode");
        let mut ext = ext;
        if opcode.headers().contains(roce_wire::Headers::AETH) && ext.aeth.is_none() {
            ext.aeth = Some(aeth::Repr {
                syndrome: Syndrome::ack(),
                msn: 0,
            });
        }
        let mut bth = bth::Repr::new(opcode, self.node.qp.qpn, psn);
        bth.ack_req = true;
        let path = self.node.qp.path.expect("a connected QP");
        let NetworkRepr::Ipv4 {
            src,
            dst,
            udp_src_port,
            ..
        } = path.network
        else {
            panic!("an IPv4 path");
        };
        let repr = FrameRepr {
            ethernet: Some(EthernetRepr {
                src: path.ethernet.dst,
                dst: path.ethernet.src,
                vlan: None,
            }),
            network: NetworkRepr::Ipv4 {
                src: dst,
                dst: src,
                dscp: 0,
                ecn: 0,
                ident: 0,
                ttl: 64,
                udp_src_port,
            },
            bth,
            ext,
            payload_len: payload.len(),
        };
        let len = repr.emit(&mut self.buf, payload).expect("a frame");
        self.buf[..len].to_vec()
    }

    /// An acknowledgement from the peer.
    pub fn ack(&mut self, psn: u32, syndrome: Syndrome) {
        let ext = Extensions {
            aeth: Some(aeth::Repr { syndrome, msn: 0 }),
            ..Extensions::default()
        };
        self.deliver(Kind::Acknowledge, psn, ext, &[]);
    }

    /// Lets the node work at the current time until it has nothing more to do.
    pub fn work(&mut self) {
        let now = self.instant();
        while self.node.work(now) {}
    }

    /// Moves the clock by `by`, firing the timers due on the way.
    pub fn wait(&mut self, by: Duration) {
        let end = self.now + by.as_nanos() as Nanos;
        loop {
            let next = self
                .node
                .qp
                .deadline()
                .map(|d| d.saturating_duration_since(self.start).as_nanos() as Nanos);
            match next {
                Some(t) if t <= end => {
                    self.now = t.max(self.now);
                    self.work();
                    if self.node.qp.deadline() == Some(self.instant()) {
                        self.now += 1;
                    }
                }
                _ => break,
            }
        }
        self.now = end;
        self.work();
    }

    /// The packets the node sent since the last call.
    pub fn sent(&mut self) -> Vec<Sent> {
        self.node
            .take_outbox()
            .into_iter()
            .map(|bytes| {
                let frame = Frame::parse(&bytes).expect("the node's frames parse");
                assert!(frame.icrc().is_ok(), "the node's ICRC holds");
                let bth = frame.repr.bth;
                assert_eq!(bth.dest_qp, PEER_QPN);
                Sent {
                    kind: bth.opcode.kind(),
                    psn: bth.psn,
                    ext: frame.repr.ext,
                    payload: frame.payload().to_vec(),
                }
            })
            .collect()
    }

    pub fn post(&mut self, wr: &SendWr<'_>) {
        assert!(self.node.post_send(wr));
        self.work();
    }

    pub fn completions(&mut self) -> Vec<Wc> {
        std::mem::take(&mut self.node.send_cqes)
    }

    pub fn state(&self) -> QpState {
        self.node.qp.state
    }

    /// How many events of `kind` the node reported.
    pub fn count(&self, kind: roce_nic::transport::EventKind) -> usize {
        self.node
            .events
            .log
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter(|(k, _)| *k == kind)
            .count()
    }
}
