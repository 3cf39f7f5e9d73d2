//! `roce demo --scenario connect`: how two QPs get connected without a side channel — the RDMA
//! connection manager's handshake on QP1, as rping, ucmatose, perftest -R and NVMe over Fabrics
//! make it.
//!
//! Two NICs in this process, the demo standing on the wire between them (every frame passes
//! through [`Wire::carry`]); the initiator is the active side (it connects), the target the
//! passive one (it listens and accepts). Each step shows the management datagrams it put on
//! the wire, field by field — REQ, REP, RTU, then DREQ and DREP — and the state each side's QP
//! reached, as the NIC reports it (`query_qp`), with the CM's own events (connect request,
//! established, disconnected): nothing is read from log text.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use roce_nic::cm::{CmEvent, CmEventKind, ConnParam};
use roce_nic::link::mem;
use roce_nic::testbed::{self, Host};
use roce_nic::verbs::{QpAttr, QpCap, QpState, QpType};

use crate::play::Options;
use crate::story::{Beat, Observer, Story};
use crate::wire::tap::Tap;
use crate::wire::{Seen, Wire};
use crate::{events, DemoError, Side};

/// The port the passive side listens on (ucmatose's).
const PORT: u16 = 7471;
/// What the active side's REQ carries for its peer's application.
const HELLO: &[u8] = b"hello from the initiator";
/// The longest the demo waits for a MAD or an event.
const WAIT: Duration = Duration::from_secs(10);

/// Runs the lesson and tells it to `observer`; fails if a proof did not hold.
pub fn run(options: &Options, observer: &mut dyn Observer) -> Result<(), DemoError> {
    if options.size.is_some() || options.hosts.is_some() || options.html.is_some() {
        return Err(DemoError::Usage(
            "--size, --hosts and --html do not apply to the connect scenario".into(),
        ));
    }
    events::install_plain_logging();
    let wire = Wire::new(options.pcap.as_deref(), None)?;
    let (la, lb) = mem::pair();
    // testbed's first device is 10.0.0.1: the target (passive); the second the initiator.
    let (dev_t, dev_i) = testbed::devices(
        Tap::new(la, Arc::clone(&wire), Side::Target),
        Tap::new(lb, Arc::clone(&wire), Side::Initiator),
    )
    .map_err(|e| DemoError::because("cannot start the NICs", e))?;
    let host = |dev| {
        testbed::host(dev, QpType::Rc, 4096, QpCap::default())
            .map_err(|e| DemoError::because("cannot set up a host", e))
    };
    let (active, passive) = (host(&dev_i)?, host(&dev_t)?);
    let mut story = Story::new(observer);
    let mut lesson = Lesson {
        wire: &wire,
        active: &active,
        passive: &passive,
        mark: 0,
        ladder: Vec::new(),
    };
    lesson.play(&mut story)?;
    drop((active, passive, dev_i, dev_t));
    wire.finish()?;
    crate::play::failed_proofs(&story)
}

struct Lesson<'a> {
    wire: &'a Wire,
    active: &'a Host,
    passive: &'a Host,
    /// The wire's frames already told.
    mark: usize,
    /// Each MAD told: who sent it, which it is, and the state its sender's QP was in.
    ladder: Vec<(Side, &'static str, QpState)>,
}

impl Lesson<'_> {
    fn play(&mut self, story: &mut Story) -> Result<(), DemoError> {
        let (active, passive) = (self.active, self.passive);
        let service = SocketAddr::new(testbed::ip(1), PORT);
        story.step("The target listens");
        let _listener = passive.ctx.cm_listen(service).map_err(failed)?;
        story.tell(Beat::Say(format!(
            "The target's host asks its NIC's connection manager to listen on {service}: the CM \
             will answer requests for service ID {:#018x} (the RDMA CM's TCP port space, 0x0106, \
             then the port). No QP is involved yet; the target's QP {:#x} is {}.",
            roce_wire::cma::PortSpace::Tcp.service_id(PORT),
            passive.qp.qp_num(),
            self.state(passive)
        )));

        story.step("The initiator connects: REQ");
        let param = ConnParam {
            private_data: HELLO.to_vec(),
            ..ConnParam::default()
        };
        let id = active
            .ctx
            .cm_connect(&active.qp, service, &param)
            .map_err(failed)?;
        self.tell_mads(story, 1)?;
        story.tell(Beat::Say(format!(
            "The initiator's NIC moved QP {:#x} to {} and sent the REQ to QP1 of 10.0.0.1, the \
             manager's own UD QP: its QP number, the PSN it will receive from first, what it \
             offers (responder resources, initiator depth, retries), the path (GIDs, MTU), and \
             in its private data the RDMA CM header (both IP addresses and its source port) \
             then the application's {:?}.",
            active.qp.qp_num(),
            self.state(active),
            String::from_utf8_lossy(HELLO)
        )));
        let request = self.event(passive, CmEventKind::ConnectRequest)?;
        story.tell(Beat::Table(vec![
            ("target's event".into(), "connect request".into()),
            ("from".into(), request.peer.to_string()),
            ("peer's QP".into(), format!("{:#x}", request.peer_qpn)),
            (
                "private data".into(),
                String::from_utf8_lossy(&request.private_data[..HELLO.len()]).into_owned(),
            ),
        ]));

        story.step("The target accepts: REP");
        let passive_id = passive.ctx.cm_request_id(&request);
        passive_id
            .accept(&passive.qp, &ConnParam::default())
            .map_err(failed)?;
        self.tell_mads(story, 1)?;
        story.tell(Beat::Say(format!(
            "Before answering, the target's NIC moved QP {:#x} through INIT and RTR to {}, with \
             the initiator's QP number and starting PSN from the REQ; the REP gives the \
             initiator the same about the target.",
            passive.qp.qp_num(),
            self.state(passive)
        )));

        story.step("The initiator is ready: RTU");
        self.event(active, CmEventKind::Established)?;
        self.tell_mads(story, 1)?;
        self.event(passive, CmEventKind::Established)?;
        story.tell(Beat::Say(format!(
            "The initiator's NIC moved QP {:#x} to {} with the REP's numbers and said so with \
             the RTU (ready to use); both hosts got an \"established\" event.",
            active.qp.qp_num(),
            self.state(active)
        )));
        let connected = [(active, passive), (passive, active)]
            .iter()
            .all(|(me, peer)| {
                me.qp.query().is_ok_and(|a| {
                    a.qp_state == Some(QpState::Rts) && a.dest_qp_num == Some(peer.qp.qp_num())
                })
            });
        story.tell(Beat::Proof {
            held: connected,
            text: "both QPs are in RTS, each aimed at the other's QP number, set by the CMs alone"
                .into(),
        });

        story.step("The initiator disconnects: DREQ, DREP");
        id.disconnect().map_err(failed)?;
        self.tell_mads(story, 1)?;
        self.event(passive, CmEventKind::Disconnected)?;
        self.tell_mads(story, 1)?;
        self.event(active, CmEventKind::Disconnected)?;
        let (a, p) = (self.state(active), self.state(passive));
        story.tell(Beat::Say(format!(
            "The initiator's QP went to {a} as its DREQ left; the target's to {p} on receiving \
             it, before its DREP. Work still queued on either is flushed, and the CMs keep the \
             IDs a while (timewait) to answer late MADs."
        )));
        story.tell(Beat::Proof {
            held: a == QpState::Err && p == QpState::Err,
            text: "both QPs are in the error state after the disconnect".into(),
        });

        story.step("The ladder");
        story.tell(Beat::Say(
            "Each MAD between the two CMs, and the state its sender's QP was in when it left:"
                .into(),
        ));
        let rows = self
            .ladder
            .iter()
            .map(|(from, name, state)| match from {
                Side::Initiator => (
                    format!("initiator {:<5}", state.to_string()),
                    format!("── {name:<4} ──────────────▶"),
                ),
                Side::Target => (
                    String::new(),
                    format!(
                        "◀────────────── {name:>4} ──  {:<5} target",
                        state.to_string()
                    ),
                ),
            })
            .collect();
        story.tell(Beat::Table(rows));
        story.end_step();
        Ok(())
    }

    /// Waits for `count` more CM MADs on the wire and tells each, field by field.
    fn tell_mads(&mut self, story: &mut Story, count: usize) -> Result<(), DemoError> {
        let is_mad = |seen: &Seen| seen.brief.is_some_and(|b| b.qpn == 1);
        let mark = self.mark;
        let arrived = self.wire.wait_until(mark, WAIT, |frames| {
            frames.iter().filter(|s| is_mad(s)).count() >= count
        });
        if !arrived {
            return Err(DemoError::failed("a MAD of the handshake never came"));
        }
        let mut told = 0;
        for seen in self.wire.since(mark) {
            self.mark += 1;
            if is_mad(&seen) {
                let name = seen
                    .bytes
                    .as_deref()
                    .and_then(|b| roce_wire::Frame::parse(b).ok())
                    .and_then(|f| roce_wire::cm::parse_frame(&f)?.ok())
                    .map_or("?", |m| m.message.attribute_id().name());
                let sender = match seen.from {
                    Side::Initiator => self.active,
                    Side::Target => self.passive,
                };
                self.ladder.push((seen.from, name, self.state(sender)));
                // The first frame with its Ethernet, IP and UDP headers; the others say "as in
                // the first frame".
                let full = seen.number == 1;
                story.tell(Beat::Packet { frame: seen, full });
                told += 1;
                if told == count {
                    break;
                }
            }
        }
        Ok(())
    }

    fn state(&self, host: &Host) -> QpState {
        host.qp
            .query()
            .ok()
            .and_then(|a: QpAttr| a.qp_state)
            .unwrap_or(QpState::Err)
    }

    /// The next CM event of `host`, which must be of `kind`.
    fn event(&self, host: &Host, kind: CmEventKind) -> Result<CmEvent, DemoError> {
        let event = host.ctx.cm_event(Some(WAIT)).map_err(failed)?;
        if event.kind != kind {
            return Err(DemoError::failed(format!(
                "the CM event {:?}, where {kind:?} was due",
                event.kind
            )));
        }
        Ok(event)
    }
}

fn failed(e: impl std::fmt::Display) -> DemoError {
    DemoError::failed(e.to_string())
}
