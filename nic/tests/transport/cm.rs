//! The connection manager between two of our NICs: listen, connect, accept, reject, data over
//! the connected QPs, disconnect; and the hard cases — nobody listening, lost REQ, REP or RTU,
//! a duplicate REQ, a peer that vanishes mid-handshake.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::cm::{CmEvent, CmEventKind, ConnParam};
use roce_nic::link::{mem, Link};
use roce_nic::verbs::*;
use roce_nic::waker::Waker;
use roce_nic::Device;
use roce_wire::cm::{AttributeId, Message};

/// A short response timeout (16.8 ms: a MAD is sent again after 34 ms), so that the tests that
/// lose MADs wait little.
const FAST_CM: u8 = 12;
const WAIT: Option<Duration> = Some(Duration::from_secs(10));

/// The CM message a frame carries, if it is one.
fn cm_message(bytes: &[u8]) -> Option<Message> {
    let frame = roce_wire::Frame::parse(bytes).ok()?;
    let mad = roce_wire::cm::parse_frame(&frame)?.ok()?;
    Some(mad.message)
}

/// What a tap decides about a frame a device sends.
type Rule = Box<dyn FnMut(Option<Message>) -> bool + Send>;

/// A link that shows every CM MAD its device sends to a rule, which may drop it; and that can
/// be cut (every frame either way lost), as when the host behind it vanishes.
struct Tap<L: Link> {
    inner: L,
    rule: Arc<Mutex<Rule>>,
    cut: Arc<AtomicBool>,
}

impl<L: Link> Link for Tap<L> {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        let keep = (self.rule.lock().unwrap())(cm_message(&frame[..]));
        if self.cut.load(Ordering::SeqCst) || !keep {
            return Ok(());
        }
        self.inner.send(frame)
    }
    fn can_send(&self) -> bool {
        self.inner.can_send()
    }
    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        let frame = self.inner.recv()?;
        Ok(frame.filter(|_| !self.cut.load(Ordering::SeqCst)))
    }
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }
    fn describe(&self) -> String {
        format!("tap on {}", self.inner.describe())
    }
}

/// The controls of one device's tap.
#[derive(Clone)]
struct TapControl {
    rule: Arc<Mutex<Rule>>,
    cut: Arc<AtomicBool>,
}

impl TapControl {
    fn set(&self, rule: impl FnMut(Option<Message>) -> bool + Send + 'static) {
        *self.rule.lock().unwrap() = Box::new(rule);
    }

    /// Drops the first `n` MADs of `which` this device sends; returns how many it sent in all.
    fn lose_first(&self, which: AttributeId, n: u32) -> Arc<AtomicU32> {
        let seen = Arc::new(AtomicU32::new(0));
        let count = Arc::clone(&seen);
        self.set(move |message| {
            if message.map(|m| m.attribute_id()) != Some(which) {
                return true;
            }
            count.fetch_add(1, Ordering::SeqCst) >= n
        });
        seen
    }

    /// Counts the MADs of `which` this device sends.
    fn count(&self, which: AttributeId) -> Arc<AtomicU32> {
        self.lose_first(which, 0)
    }

    /// Keeps every CM message this device sends.
    fn record(&self) -> Arc<Mutex<Vec<Message>>> {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&sent);
        self.set(move |message| {
            log.lock().unwrap().extend(message);
            true
        });
        sent
    }
}

fn tap<L: Link>(inner: L) -> (Tap<L>, TapControl) {
    let rule: Rule = Box::new(|_| true);
    let control = TapControl {
        rule: Arc::new(Mutex::new(rule)),
        cut: Arc::new(AtomicBool::new(false)),
    };
    let link = Tap {
        inner,
        rule: Arc::clone(&control.rule),
        cut: Arc::clone(&control.cut),
    };
    (link, control)
}

/// Two devices (10.0.0.1 and 10.0.0.2) with a fast CM, each behind a tap, and a host with an RC
/// QP on each (`a` will listen, `b` connect).
struct Bench {
    a: Host,
    b: Host,
    tap_a: TapControl,
    tap_b: TapControl,
    dev_a: Device,
    dev_b: Device,
}

fn bench(cm_response_timeout: u8) -> Bench {
    bench_on(cm_response_timeout, test_threads())
}

/// [`bench`] with devices of `threads` engine threads.
fn bench_on(cm_response_timeout: u8, threads: usize) -> Bench {
    let (la, lb) = mem::pair();
    let (la, tap_a) = tap(la);
    let (lb, tap_b) = tap(lb);
    let (dev_a, dev_b) = devices_with(la, lb, |c| {
        c.cm_response_timeout = cm_response_timeout;
        c.threads = threads;
    })
    .expect("devices start");
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Rc, 64 << 10);
    Bench {
        a,
        b,
        tap_a,
        tap_b,
        dev_a,
        dev_b,
    }
}

fn addr(n: u8, port: u16) -> SocketAddr {
    SocketAddr::new(ip(n), port)
}

fn event(host: &Host) -> CmEvent {
    host.ctx.cm_event(WAIT).expect("a CM event within 10 s")
}

fn param(private_data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: private_data.to_vec(),
        ..ConnParam::default()
    }
}

fn state(host: &Host) -> QpState {
    host.qp.query().unwrap().qp_state.unwrap()
}

/// Listens on a, connects from b, accepts: returns the listener and both connection IDs,
/// after both sides saw the connection established.
fn handshake(bench: &Bench) -> (CmId, CmId, CmId) {
    let (a, b) = (&bench.a, &bench.b);
    let listener = a.ctx.cm_listen(addr(1, 7174)).unwrap();
    let active = b
        .ctx
        .cm_connect(&b.qp, addr(1, 7174), &param(b"hello"))
        .unwrap();
    let request = event(a);
    assert_eq!(request.kind, CmEventKind::ConnectRequest);
    assert_eq!(request.listen_id, Some(listener.id()));
    assert_eq!(request.peer.ip(), ip(2));
    assert_eq!(request.local, addr(1, 7174));
    assert_eq!(request.peer_qpn, b.qp.qp_num());
    assert_eq!(&request.private_data[..5], b"hello");
    let passive = a.ctx.cm_request_id(&request);
    passive.accept(&a.qp, &param(b"welcome")).unwrap();
    let established = event(b);
    assert_eq!(
        established.kind,
        CmEventKind::Established,
        "{established:?}"
    );
    assert_eq!(established.id, active.id());
    assert_eq!(&established.private_data[..7], b"welcome");
    assert_eq!(established.peer_qpn, a.qp.qp_num());
    let established = event(a);
    assert_eq!(
        established.kind,
        CmEventKind::Established,
        "{established:?}"
    );
    assert_eq!(established.id, passive.id());
    (listener, active, passive)
}

#[test]
fn connect_accept_move_data_and_disconnect() {
    let bench = bench(FAST_CM);
    let (a, b) = (&bench.a, &bench.b);
    let (sent_a, sent_b) = (bench.tap_a.record(), bench.tap_b.record());
    let (_listener, active, passive) = handshake(&bench);
    // A REQ's or REP's starting PSN is what its sender's receive queue expects, as Linux's CM
    // reads it: the active QP receives from the REQ's PSN and sends from the REP's.
    let req = sent_b.lock().unwrap().iter().find_map(|m| match m {
        Message::Req(r) => Some(*r),
        _ => None,
    });
    let rep = sent_a.lock().unwrap().iter().find_map(|m| match m {
        Message::Rep(r) => Some(*r),
        _ => None,
    });
    let (req, rep) = (req.expect("a REQ"), rep.expect("a REP"));
    let active_qp = b.qp.query().unwrap();
    assert_eq!(active_qp.rq_psn, Some(req.starting_psn));
    assert_eq!(active_qp.sq_psn, Some(rep.starting_psn));
    assert_eq!(
        (req.local_qpn, rep.local_qpn),
        (b.qp.qp_num(), a.qp.qp_num())
    );
    // The QPs were moved with each other's numbers and starting PSNs.
    for (me, peer) in [(a, b), (b, a)] {
        let attr = me.qp.query().unwrap();
        assert_eq!(attr.qp_state, Some(QpState::Rts));
        assert_eq!(attr.dest_qp_num, Some(peer.qp.qp_num()));
        assert_eq!(attr.rq_psn, peer.qp.query().unwrap().sq_psn);
        assert_eq!(attr.max_rd_atomic, Some(1));
        assert_eq!(attr.max_dest_rd_atomic, Some(1));
        assert_eq!(attr.path_mtu, Some(Mtu::M4096));
    }
    write_read_and_atomics(b, a);
    write_read_and_atomics(a, b);
    active.disconnect().unwrap();
    for (host, id) in [(b, active.id()), (a, passive.id())] {
        let e = event(host);
        assert_eq!((e.kind, e.id), (CmEventKind::Disconnected, id));
        assert_eq!(state(host), QpState::Err);
    }
}

#[test]
fn a_port_nobody_listens_on_answers_reject_reason_8_as_linux() {
    let bench = bench(FAST_CM);
    let b = &bench.b;
    let rejs = bench.tap_a.count(AttributeId::REJ);
    let _id = b
        .ctx
        .cm_connect(&b.qp, addr(1, 7999), &ConnParam::default())
        .unwrap();
    let e = event(b);
    assert_eq!(e.kind, CmEventKind::Rejected { reason: 8 }, "{e:?}");
    assert_eq!(rejs.load(Ordering::SeqCst), 1);
    assert_eq!(
        state(b),
        QpState::Err,
        "a refused QP is left in no half state"
    );
}

#[test]
fn reject_sends_reason_28_with_the_hosts_private_data() {
    let bench = bench(FAST_CM);
    let (a, b) = (&bench.a, &bench.b);
    // Listening on every address of the port.
    let _listener = a.ctx.cm_listen("0.0.0.0:9000".parse().unwrap()).unwrap();
    let _id = b
        .ctx
        .cm_connect(&b.qp, addr(1, 9000), &ConnParam::default())
        .unwrap();
    let request = event(a);
    a.ctx.cm_request_id(&request).reject(b"go away").unwrap();
    let e = event(b);
    assert_eq!(e.kind, CmEventKind::Rejected { reason: 28 });
    assert_eq!(&e.private_data[..7], b"go away");
    assert_eq!(state(a), QpState::Reset, "the passive QP was never touched");
}

#[test]
fn a_lost_req_rep_or_rtu_is_sent_again_and_the_connection_forms() {
    for (lost, on_a) in [
        (AttributeId::REQ, false),
        (AttributeId::REP, true),
        (AttributeId::RTU, false),
    ] {
        let bench = bench(FAST_CM);
        let tap = if on_a { &bench.tap_a } else { &bench.tap_b };
        let sent = tap.lose_first(lost, 1);
        let (_l, _active, _passive) = handshake(&bench);
        assert!(
            sent.load(Ordering::SeqCst) >= 2,
            "the lost {lost} was sent again"
        );
        write_read_and_atomics(&bench.b, &bench.a);
    }
}

/// The CM agent runs on the port thread and moves QPs that live on the other threads: a
/// handshake (one with its RTU lost, so a timer sends it again), data, and a disconnect, with
/// two and four engine threads.
#[test]
fn connections_form_carry_data_and_close_with_qps_on_other_threads() {
    for threads in [2, 4] {
        let bench = bench_on(FAST_CM, threads);
        assert_ne!(
            bench.b.qp.qp_num() % threads as u32,
            0,
            "a QP off the port thread"
        );
        let rtus = bench.tap_b.lose_first(AttributeId::RTU, 1);
        let (_listener, active, passive) = handshake(&bench);
        assert!(
            rtus.load(Ordering::SeqCst) >= 2,
            "the lost RTU was sent again"
        );
        write_read_and_atomics(&bench.b, &bench.a);
        write_read_and_atomics(&bench.a, &bench.b);
        active.disconnect().unwrap();
        for (host, id) in [(&bench.b, active.id()), (&bench.a, passive.id())] {
            let e = event(host);
            assert_eq!((e.kind, e.id), (CmEventKind::Disconnected, id));
            assert_eq!(state(host), QpState::Err);
        }
    }
}

#[test]
fn a_duplicate_req_before_the_host_answers_gets_an_mra() {
    let bench = bench(FAST_CM);
    let (a, b) = (&bench.a, &bench.b);
    let mras = bench.tap_a.count(AttributeId::MRA);
    let reqs = bench.tap_b.count(AttributeId::REQ);
    let _listener = a.ctx.cm_listen(addr(1, 7176)).unwrap();
    let active = b
        .ctx
        .cm_connect(&b.qp, addr(1, 7176), &ConnParam::default())
        .unwrap();
    let request = event(a);
    // The host sits on the request: the REQ comes again and is answered with an MRA.
    let deadline = Instant::now() + Duration::from_secs(10);
    while mras.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no MRA within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(reqs.load(Ordering::SeqCst) >= 2);
    let passive = a.ctx.cm_request_id(&request);
    passive.accept(&a.qp, &ConnParam::default()).unwrap();
    let e = event(b);
    assert_eq!((e.kind, e.id), (CmEventKind::Established, active.id()));
    assert_eq!(event(a).kind, CmEventKind::Established);
}

#[test]
fn a_peer_that_vanishes_mid_handshake_leaves_no_half_open_qp() {
    // The active side vanishes after its REQ: the passive side's REP goes unanswered.
    let bench = bench(FAST_CM);
    let (a, b) = (&bench.a, &bench.b);
    let _listener = a.ctx.cm_listen(addr(1, 7174)).unwrap();
    let _active = b
        .ctx
        .cm_connect(&b.qp, addr(1, 7174), &ConnParam::default())
        .unwrap();
    let request = event(a);
    bench.tap_b.cut.store(true, Ordering::SeqCst);
    let passive = a.ctx.cm_request_id(&request);
    passive.accept(&a.qp, &ConnParam::default()).unwrap();
    assert_eq!(state(a), QpState::Rts, "accept moved the QP");
    let e = event(a);
    assert_eq!((e.kind, e.id), (CmEventKind::Unreachable, passive.id()));
    assert_eq!(
        state(a),
        QpState::Err,
        "the passive QP is not left half open"
    );
    // The vanished side, seen from its own NIC: the REQ was never answered.
    let e = event(b);
    assert_eq!(e.kind, CmEventKind::Unreachable);
    assert_eq!(state(b), QpState::Err);

    // The passive side vanishes before it answers: the REQ goes unanswered.
    let bench = self::bench(FAST_CM);
    let (a, b) = (&bench.a, &bench.b);
    let _listener = a.ctx.cm_listen(addr(1, 7174)).unwrap();
    bench.tap_a.cut.store(true, Ordering::SeqCst);
    let _active = b
        .ctx
        .cm_connect(&b.qp, addr(1, 7174), &ConnParam::default())
        .unwrap();
    let e = event(b);
    assert_eq!(e.kind, CmEventKind::Unreachable);
    assert_eq!(state(b), QpState::Err);
    let _ = (&bench.dev_a, &bench.dev_b);
}

#[test]
fn a_host_that_goes_away_disconnects_its_connections() {
    let bench = bench(FAST_CM);
    let (_listener, active, _passive) = handshake(&bench);
    drop(active);
    let e = event(&bench.a);
    assert_eq!(e.kind, CmEventKind::Disconnected);
    assert_eq!(state(&bench.a), QpState::Err);
}

/// The agent tracks at most 4096 connections (`MAX_CONNECTIONS`): a host's connect beyond
/// fails at once, and a REQ beyond is refused with REJ reason 3 (no resources) rather than
/// taking the NIC's memory. Here b's 4096 REQs (all on one QP, never answered: a's host sits on
/// them) fill both agents; one more connect on b fails; b gives one up, and its next REQ finds
/// a's agent still full.
#[test]
fn connections_beyond_4096_are_refused_with_no_resources() {
    // A long response timeout (4.096 µs × 2^24, over a minute): nothing is sent again while
    // the test runs, however slowly a loaded machine takes in 4096 REQs.
    let bench = bench(24);
    let (a, b) = (&bench.a, &bench.b);
    let rejs = bench.tap_a.record();
    let _listener = a.ctx.cm_listen(addr(1, 7174)).unwrap();
    let mut ids: Vec<CmId> = (0..4096)
        .map(|n| {
            b.ctx
                .cm_connect(&b.qp, addr(1, 7174), &ConnParam::default())
                .unwrap_or_else(|e| panic!("connect {n}: {e}"))
        })
        .collect();
    match b
        .ctx
        .cm_connect(&b.qp, addr(1, 7174), &ConnParam::default())
    {
        Err(VerbsError::LimitReached { limit: 4096, .. }) => {}
        other => panic!("connect 4097: {other:?}"),
    }
    // b gives one up (REJ, timeout, to a); a new QP connects once more.
    drop(ids.pop());
    let cq = b.ctx.create_cq(16).unwrap();
    let qp =
        b.pd.create_qp(QpType::Rc, &cq, &cq, QpCap::default())
            .unwrap();
    let last = b
        .ctx
        .cm_connect(&qp, addr(1, 7174), &ConnParam::default())
        .unwrap();
    // a answers after the 4096 REQs before it.
    let e = b
        .ctx
        .cm_event(Some(Duration::from_secs(60)))
        .expect("the REJ within 60 s");
    assert_eq!(
        (e.kind, e.id),
        (CmEventKind::Rejected { reason: 3 }, last.id())
    );
    assert_eq!(qp.query().unwrap().qp_state, Some(QpState::Err));
    let refused: Vec<u16> = rejs
        .lock()
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            Message::Rej(r) => Some(r.reason.0),
            _ => None,
        })
        .collect();
    assert_eq!(refused, [3], "a's one REJ: no resources");
}

/// A UD QP resolves a UD service with SIDR: the SIDR_REQ reaches a's listener in the UDP port
/// space (not its TCP listener on the same port), a accepts with its UD QP, and b learns that
/// QP and the port space's Q_Key; both QPs end in RTS with that Q_Key.
#[test]
fn sidr_resolves_a_ud_service_in_the_udp_port_space() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices_with(la, lb, |c| c.cm_response_timeout = FAST_CM).unwrap();
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Ud, 64 << 10);
    let _tcp = a.ctx.cm_listen(addr(1, 7174)).unwrap();
    let udp = a.ctx.cm_listen_udp(addr(1, 7174)).unwrap();
    let active = b
        .ctx
        .cm_connect(&b.qp, addr(1, 7174), &param(b"sidr"))
        .unwrap();
    let request = event(&a);
    assert_eq!(request.kind, CmEventKind::ConnectRequest);
    assert_eq!(request.listen_id, Some(udp.id()));
    assert_eq!(request.peer.ip(), ip(2));
    assert_eq!(&request.private_data[..4], b"sidr");
    let passive = a.ctx.cm_request_id(&request);
    passive.accept(&a.qp, &param(b"ok")).unwrap();
    let e = event(&b);
    assert_eq!((e.kind, e.id), (CmEventKind::Established, active.id()));
    assert_eq!((e.peer_qpn, e.q_key), (a.qp.qp_num(), 0x0123_4567));
    assert_eq!(&e.private_data[..2], b"ok");
    for host in [&a, &b] {
        let attr = host.qp.query().unwrap();
        assert_eq!(attr.qp_state, Some(QpState::Rts));
        assert_eq!(attr.qkey, Some(0x0123_4567));
    }
    // Nothing to tear down: no DREQ for a UD service, and no event on a's side.
    active.disconnect().unwrap();
    assert!(a.ctx.cm_event(Some(Duration::from_millis(200))).is_err());
}

/// A SIDR_REQ for a UDP port nobody serves is answered "service ID not supported" (status 1,
/// as Linux's ib_cm answers), and a rejected one "rejected" (status 2) with the host's private
/// data; the client sees either as unreachable, and its UD QP stays usable.
#[test]
fn sidr_refusals_are_unreachable_with_linux_statuses() {
    let (la, lb) = mem::pair();
    let (la, tap_a) = tap(la);
    let (dev_a, dev_b) = devices_with(la, lb, |c| c.cm_response_timeout = FAST_CM).unwrap();
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Ud, 64 << 10);
    let sent = tap_a.record();
    let _nobody = b
        .ctx
        .cm_connect(&b.qp, addr(1, 7174), &ConnParam::default())
        .unwrap();
    assert_eq!(event(&b).kind, CmEventKind::Unreachable);
    let _udp = a.ctx.cm_listen_udp(addr(1, 7174)).unwrap();
    let _refused = b
        .ctx
        .cm_connect(&b.qp, addr(1, 7174), &ConnParam::default())
        .unwrap();
    let request = event(&a);
    a.ctx.cm_request_id(&request).reject(b"no").unwrap();
    let e = event(&b);
    assert_eq!(e.kind, CmEventKind::Unreachable);
    assert_eq!(&e.private_data[..2], b"no");
    let statuses: Vec<u8> = sent
        .lock()
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            Message::SidrRep(r) => Some(r.status.0),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, [1, 2]);
    assert_eq!(state(&b), QpState::Rts);
}

/// A lost SIDR_REQ is sent again; a lost SIDR_REP is sent again when the repeated SIDR_REQ
/// comes, with the same answer.
#[test]
fn a_lost_sidr_req_or_rep_is_recovered() {
    for (lost, on_a) in [
        (AttributeId::SIDR_REQ, false),
        (AttributeId::SIDR_REP, true),
    ] {
        let (la, lb) = mem::pair();
        let (la, tap_a) = tap(la);
        let (lb, tap_b) = tap(lb);
        let (dev_a, dev_b) = devices_with(la, lb, |c| c.cm_response_timeout = FAST_CM).unwrap();
        let (a, b) = hosts(&dev_a, &dev_b, QpType::Ud, 64 << 10);
        let sent = if on_a { &tap_a } else { &tap_b }.lose_first(lost, 1);
        let _udp = a.ctx.cm_listen_udp(addr(1, 7174)).unwrap();
        let _active = b
            .ctx
            .cm_connect(&b.qp, addr(1, 7174), &ConnParam::default())
            .unwrap();
        let request = event(&a);
        a.ctx
            .cm_request_id(&request)
            .accept(&a.qp, &ConnParam::default())
            .unwrap();
        let e = event(&b);
        assert_eq!(e.kind, CmEventKind::Established, "{lost}");
        assert_eq!(e.peer_qpn, a.qp.qp_num());
        assert!(
            sent.load(Ordering::SeqCst) >= 2,
            "the lost {lost} was sent again"
        );
    }
}

/// Through the fault link (30% of frames lost, 10% duplicated, 10% reordered, both ways) the
/// handshakes still form, again and again: the CM sends its REQ, REP and DREQ again, answers
/// repeated REQs with an MRA and repeated REPs with the RTU again, and ignores what it has
/// already handled. Every connection ends established on both sides with both QPs in RTS and
/// aimed at each other, and every disconnect reaches both.
#[test]
fn handshakes_form_through_the_fault_link() {
    use roce_nic::link::faults::{FaultSpec, Faulty};
    let spec = |seed: u64| -> FaultSpec {
        format!("drop=0.3,dup=0.1,reorder=0.1,seed={seed}")
            .parse()
            .unwrap()
    };
    let (la, lb) = mem::pair();
    let (la, lb) = (Faulty::new(la, spec(14)), Faulty::new(lb, spec(41)));
    let (stats_a, stats_b) = (la.stats(), lb.stats());
    let (dev_a, dev_b) = devices_with(la, lb, |c| c.cm_response_timeout = FAST_CM).unwrap();
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Rc, 64 << 10);
    let _listener = a.ctx.cm_listen(addr(1, 7174)).unwrap();
    for round in 0..10 {
        let reset = QpAttr {
            qp_state: Some(QpState::Reset),
            ..QpAttr::default()
        };
        for host in [&a, &b] {
            host.qp.modify(&reset).unwrap();
        }
        let active = b
            .ctx
            .cm_connect(&b.qp, addr(1, 7174), &ConnParam::default())
            .unwrap();
        let request = event(&a);
        assert_eq!(request.kind, CmEventKind::ConnectRequest, "round {round}");
        let passive = a.ctx.cm_request_id(&request);
        passive.accept(&a.qp, &ConnParam::default()).unwrap();
        let e = event(&b);
        assert_eq!(
            (e.kind, e.id),
            (CmEventKind::Established, active.id()),
            "round {round}"
        );
        let e = event(&a);
        assert_eq!(
            (e.kind, e.id),
            (CmEventKind::Established, passive.id()),
            "round {round}"
        );
        for (me, peer) in [(&a, &b), (&b, &a)] {
            let attr = me.qp.query().unwrap();
            assert_eq!(attr.qp_state, Some(QpState::Rts), "round {round}");
            assert_eq!(attr.dest_qp_num, Some(peer.qp.qp_num()), "round {round}");
        }
        active.disconnect().unwrap();
        for (host, id) in [(&b, active.id()), (&a, passive.id())] {
            let e = event(host);
            assert_eq!(
                (e.kind, e.id),
                (CmEventKind::Disconnected, id),
                "round {round}"
            );
        }
    }
    let dropped = stats_a.dropped.load(Ordering::Relaxed) + stats_b.dropped.load(Ordering::Relaxed);
    assert!(
        dropped > 0,
        "the fault link lost nothing: nothing was tested"
    );
    println!("fault link: {dropped} MADs lost over 10 handshakes and teardowns");
}
