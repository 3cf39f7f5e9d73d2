//! Each recovery mechanism of RC on its own: a loss that brings a sequence NAK and a go-back,
//! lost ACKs that the retransmission timer recovers, retries that run out, RNR waits, duplicate
//! atomics and READs answered without executing twice, implied ACKs, and PSNs that wrap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::{mem, Link};
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::waker::Waker;
use roce_wire::{Frame, Kind};

type Rule = Box<dyn FnMut(&Frame<'_>) -> bool + Send>;

/// A link that drops the frames it sends when `rule` says so.
struct Scripted<L: Link> {
    inner: L,
    rule: Arc<Mutex<Rule>>,
    dropped: Arc<AtomicU64>,
}

impl<L: Link> Link for Scripted<L> {
    fn send(&mut self, frame: FrameBuf) -> std::io::Result<()> {
        let drop = Frame::parse(&frame).is_ok_and(|f| (self.rule.lock().unwrap())(&f));
        if drop {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.inner.send(frame)
    }
    fn can_send(&self) -> bool {
        self.inner.can_send()
    }
    fn recv(&mut self) -> std::io::Result<Option<FrameBuf>> {
        self.inner.recv()
    }
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }
    fn describe(&self) -> String {
        "scripted".into()
    }
}

/// Rules for what a's NIC and b's NIC drop when sending.
struct Script {
    a: Arc<Mutex<Rule>>,
    b: Arc<Mutex<Rule>>,
    dropped_a: Arc<AtomicU64>,
    dropped_b: Arc<AtomicU64>,
}

fn pass() -> Rule {
    Box::new(|_| false)
}

fn scripted_pair(tune: impl Fn(&mut QpAttr)) -> (Pair, Script) {
    let (la, lb) = mem::pair();
    let script = Script {
        a: Arc::new(Mutex::new(pass())),
        b: Arc::new(Mutex::new(pass())),
        dropped_a: Arc::default(),
        dropped_b: Arc::default(),
    };
    let a = Scripted {
        inner: la,
        rule: Arc::clone(&script.a),
        dropped: Arc::clone(&script.dropped_a),
    };
    let b = Scripted {
        inner: lb,
        rule: Arc::clone(&script.b),
        dropped: Arc::clone(&script.dropped_b),
    };
    let p = pair_over(a, b, QpType::Rc, Mtu::M1024, 1 << 20, |_| {}, tune).unwrap();
    (p, script)
}

/// Drops the first `n` frames of kind `kind` (optionally only at PSN `psn`).
fn drop_first(kind: Kind, psn: Option<u32>, n: u32) -> Rule {
    let mut left = n;
    Box::new(move |f| {
        let hit = f.repr.bth.opcode.kind() == kind && psn.is_none_or(|p| p == f.repr.bth.psn);
        if hit && left > 0 {
            left -= 1;
            return true;
        }
        false
    })
}

fn write(p: &Pair, wr_id: u64, len: usize, at: u64) {
    p.a.write(0, &pattern(len, wr_id as u8));
    p.a.qp
        .post_send(&[SendWr {
            wr_id,
            op: SendOp::RdmaWrite {
                remote_addr: p.b.mr.va + at,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[p.a.mr.sge(0, len as u32)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
}

fn ok(host: &Host, wr_id: u64) {
    let wc = host.completion();
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{wc:?}");
}

#[test]
fn a_lost_packet_brings_one_sequence_nak_and_a_go_back() {
    let (p, script) = scripted_pair(|_| {});
    // A 10-packet WRITE from PSN 100; its fifth packet is lost once.
    *script.a.lock().unwrap() = drop_first(Kind::WriteMiddle, Some(104), 1);
    write(&p, 1, 10 * 1024, 0);
    ok(&p.a, 1);
    assert_eq!(p.b.read(0, 10 * 1024), pattern(10 * 1024, 1));
    let (a, b) = (p.dev_a.counters(), p.dev_b.counters());
    assert_eq!(script.dropped_a.load(Ordering::Relaxed), 1);
    assert_eq!(b.naks_sent_psn_sequence, 1, "one NAK per gap");
    assert!(b.rx_out_of_sequence >= 1);
    assert_eq!(a.naks_received_psn_sequence, 1);
    assert!(
        a.retransmitted_packets >= 6,
        "go-back-N resends from the lost packet: {a:?}"
    );
    assert_eq!(a.retransmit_timeouts, 0);
    assert_eq!(
        a.loss_window_cuts, 1,
        "one loss, one cut of the window: {a:?}"
    );
}

#[test]
fn a_lost_ack_is_recovered_by_a_tail_probe_before_the_timer() {
    // Timeout 20 ≈ 4.3 s: the probe comes after a quarter of it (1.07 s), and only an answer
    // that took seconds would leave the recovery to the timer — however loaded the machine.
    let (p, script) = scripted_pair(|attr| {
        if attr.timeout.is_some() {
            attr.timeout = Some(20);
        }
    });
    *script.b.lock().unwrap() = drop_first(Kind::Acknowledge, None, 1);
    write(&p, 1, 3000, 0);
    ok(&p.a, 1);
    assert_eq!(p.b.read(0, 3000), pattern(3000, 1));
    let (a, b) = (p.dev_a.counters(), p.dev_b.counters());
    assert_eq!(a.tail_probes, 1, "{a:?}");
    assert_eq!(
        a.retransmit_timeouts, 0,
        "the probe answered before the 4.3 s timer"
    );
    assert_eq!(
        b.rx_duplicates, 1,
        "the probe is a duplicate, acknowledged again: {b:?}"
    );
}

#[test]
fn a_lost_probe_answer_waits_for_the_timer() {
    // The probe is the first retry brought forward, not one more: when its answer is lost too,
    // the next copy comes from the timer (timeout 18 ≈ 1.07 s, the probe after 268 ms), not
    // from another probe; the go-back's answer has a second to come, however loaded the machine.
    let (p, script) = scripted_pair(|attr| {
        if attr.timeout.is_some() {
            attr.timeout = Some(18);
        }
    });
    *script.b.lock().unwrap() = drop_first(Kind::Acknowledge, None, 2);
    write(&p, 1, 3000, 0);
    ok(&p.a, 1);
    let (a, b) = (p.dev_a.counters(), p.dev_b.counters());
    assert_eq!((a.tail_probes, a.retransmit_timeouts), (1, 1), "{a:?}");
    assert_eq!(
        a.retransmitted_packets, 3,
        "the timer goes back to the oldest unacknowledged packet, the first: {a:?}"
    );
    // The last copies may still be on their way: b sees the probe and the go-back's three.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut b = b;
    while b.rx_duplicates < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        b = p.dev_b.counters();
    }
    assert_eq!(b.rx_duplicates, 1 + 3, "the probe and the go-back: {b:?}");
}

#[test]
fn a_blackout_is_recovered_by_the_retransmission_timer() {
    // Timeout 16 ≈ 270 ms, 7 retries: everything b sends (the answers to probes too) is lost
    // until a's timer has fired, then the line comes back — seconds before the retries would
    // run out, however late this thread notices.
    let (p, script) = scripted_pair(|attr| {
        if attr.timeout.is_some() {
            attr.timeout = Some(16);
            attr.retry_cnt = Some(7);
        }
    });
    *script.b.lock().unwrap() = Box::new(|_| true);
    write(&p, 1, 10 * 1024, 0);
    roce_testkit::eventually("a's retransmission timer fires during the blackout", || {
        p.dev_a.counters().retransmit_timeouts >= 1
    });
    *script.b.lock().unwrap() = pass();
    ok(&p.a, 1);
    assert_eq!(p.b.read(0, 10 * 1024), pattern(10 * 1024, 1));
    let a = p.dev_a.counters();
    assert!(a.retransmit_timeouts >= 1, "{a:?}");
    // Every timeout cuts the window (to its minimum for the configured timer).
    assert!(
        a.loss_window_cuts >= 1 && a.loss_window_cuts <= a.retransmit_timeouts,
        "{a:?}"
    );
    // Each timeout goes back to the first packet but, the window cut to its minimum, sends
    // only that many again before an answer: b had the whole message, so the first answer
    // acknowledges it all.
    let min = roce_nic::transport::window::MIN as u64;
    assert!(
        a.retransmitted_packets >= min && a.retransmitted_packets <= 10 * a.retransmit_timeouts,
        "go-back-N resends from the first packet, a window at a time: {a:?}"
    );
}

#[test]
fn retries_run_out_into_transport_retry_exceeded() {
    let (p, script) = scripted_pair(|attr| {
        if attr.timeout.is_some() {
            attr.timeout = Some(10);
            attr.retry_cnt = Some(3);
        }
    });
    *script.b.lock().unwrap() = Box::new(|_| true);
    // Before the post: the first timer starts when the request is sent.
    let started = Instant::now();
    write(&p, 1, 100, 0);
    let wc = p.a.completion();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RetryExcErr));
    assert_eq!(p.a.qp.query().unwrap().qp_state, Some(QpState::Err));
    let a = p.dev_a.counters();
    // Three retries, each a copy: the first a tail probe (brought forward), the others after a
    // timeout; the last timeout finds none left.
    assert_eq!(
        (a.tail_probes, a.retransmit_timeouts),
        (1, 3),
        "a probe, then timeouts: {a:?}"
    );
    // b saw the request and its three copies, and answered: each at once if its engine took
    // them one per pass, fewer answers if a slow pass (a loaded machine) took two copies in one
    // batch — duplicates are acknowledged again once per batch, as any ACK is coalesced.
    roce_testkit::eventually("b sees the three copies as duplicates", || {
        p.dev_b.counters().rx_duplicates == 3
    });
    roce_testkit::eventually("b answers the request and its copies", || {
        script.dropped_b.load(Ordering::Relaxed) >= 2
    });
    let answers = script.dropped_b.load(Ordering::Relaxed);
    assert!(answers <= 4, "{answers} answers to four packets");
    // The probe, then 3 × 4.096 µs × 2^10 ≈ 12.6 ms at least.
    assert!(started.elapsed() >= Duration::from_millis(12));
}

fn send(p: &Pair, wr_id: u64, len: usize) {
    p.a.write(0, &pattern(len, wr_id as u8));
    p.a.qp
        .post_send(&[SendWr {
            wr_id,
            op: SendOp::Send,
            sg_list: &[p.a.mr.sge(0, len as u32)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
}

#[test]
fn an_rnr_nak_waits_and_retries_until_a_receive_is_posted() {
    // RNR timer 10 = 0.32 ms.
    let (p, _script) = scripted_pair(|attr| {
        if attr.min_rnr_timer.is_some() {
            attr.min_rnr_timer = Some(10);
        }
    });
    send(&p, 1, 2000);
    roce_testkit::eventually("B sends a second RNR NAK (the SEND was retried)", || {
        p.dev_b.counters().rnr_naks_sent >= 2
    });
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &[p.b.mr.sge(0, 4096)],
        }])
        .unwrap();
    ok(&p.a, 1);
    let wc = p.b.completion();
    assert_eq!((wc.wr_id, wc.byte_len), (9, 2000));
    assert_eq!(p.b.read(0, 2000), pattern(2000, 1));
    let a = p.dev_a.counters();
    assert!(a.rnr_naks_received >= 2 && a.rnr_retries >= 2, "{a:?}");
}

#[test]
fn rnr_retries_run_out_into_rnr_retry_exceeded() {
    let (p, _script) = scripted_pair(|attr| {
        if attr.rnr_retry.is_some() {
            attr.rnr_retry = Some(2);
        }
        if attr.min_rnr_timer.is_some() {
            attr.min_rnr_timer = Some(1);
        }
    });
    send(&p, 1, 100);
    let wc = p.a.completion();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RnrRetryExcErr));
    assert_eq!(p.dev_a.counters().rnr_naks_received, 3);
    assert_eq!(p.dev_a.counters().rnr_retries, 2);
}

#[test]
fn a_duplicate_atomic_is_answered_from_the_saved_result() {
    let (p, script) = scripted_pair(|attr| {
        if attr.timeout.is_some() {
            attr.timeout = Some(12);
        }
    });
    *script.b.lock().unwrap() = drop_first(Kind::AtomicAcknowledge, None, 1);
    p.b.write(64, &10u64.to_ne_bytes());
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::AtomicFetchAndAdd {
                remote_addr: p.b.mr.va + 64,
                rkey: p.b.mr.rkey,
                add: 5,
            },
            sg_list: &[p.a.mr.sge(0, 8)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    ok(&p.a, 1);
    assert_eq!(
        p.a.read(0, 8),
        10u64.to_ne_bytes(),
        "the original value, from the first execution"
    );
    assert_eq!(
        p.b.read(64, 8),
        15u64.to_ne_bytes(),
        "executed exactly once"
    );
    let b = p.dev_b.counters();
    assert_eq!((b.atomics_executed, b.atomic_replays), (1, 1), "{b:?}");
}

#[test]
fn a_lost_read_response_is_answered_again_from_memory() {
    let (p, script) = scripted_pair(|_| {});
    *script.b.lock().unwrap() = drop_first(Kind::ReadResponseMiddle, Some(102), 1);
    let data = pattern(8 * 1024, 3);
    p.b.write(4096, &data);
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::RdmaRead {
                remote_addr: p.b.mr.va + 4096,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[p.a.mr.sge(0, data.len() as u32)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    ok(&p.a, 1);
    assert_eq!(p.a.read(0, data.len()), data);
    let b = p.dev_b.counters();
    assert_eq!(
        b.rx_duplicates, 1,
        "the READ asked again from the missing response: {b:?}"
    );
    assert!(b.read_responses_sent >= 8 + 6, "{b:?}");
}

#[test]
fn a_read_response_implies_the_ack_of_earlier_writes() {
    let (p, script) = scripted_pair(|_| {});
    // Every plain ACK is lost: the WRITE completes only because the READ answer implies it.
    *script.b.lock().unwrap() = Box::new(|f| f.repr.bth.opcode.kind() == Kind::Acknowledge);
    write(&p, 1, 100, 0);
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 2,
            op: SendOp::RdmaRead {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[p.a.mr.sge(4096, 100)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    ok(&p.a, 1);
    ok(&p.a, 2);
    assert_eq!(p.a.read(4096, 100), pattern(100, 1));
    assert_eq!(p.dev_a.counters().retransmit_timeouts, 0);
}

#[test]
fn psns_wrap_at_24_bits() {
    let (p, script) = scripted_pair(|attr| {
        if attr.sq_psn.is_some() {
            attr.sq_psn = Some(0xff_fffb);
        }
        if attr.rq_psn.is_some() {
            attr.rq_psn = Some(0xff_fffb);
        }
    });
    // A 10-packet WRITE from 0xfffffb to 0x000004, losing the packet at PSN 0 once.
    *script.a.lock().unwrap() = drop_first(Kind::WriteMiddle, Some(0), 1);
    write(&p, 1, 10 * 1024, 0);
    ok(&p.a, 1);
    write(&p, 2, 1000, 20_000);
    ok(&p.a, 2);
    assert_eq!(p.b.read(0, 10 * 1024), pattern(10 * 1024, 1));
    assert_eq!(p.b.read(20_000, 1000), pattern(1000, 2));
    assert_eq!(p.dev_b.counters().naks_sent_psn_sequence, 1);
    assert_eq!(p.a.qp.query().unwrap().sq_psn, Some(11 - 5));
}

#[test]
fn duplicated_frames_are_never_delivered_twice() {
    let (la, lb) = mem::pair();
    let faulty = roce_nic::link::faults::Faulty::new(la, "dup=1".parse().unwrap());
    let p = pair_over(faulty, lb, QpType::Rc, Mtu::M1024, 1 << 20, |_| {}, |_| {}).unwrap();
    for i in 0..10 {
        p.b.qp
            .post_recv(&[RecvWr {
                wr_id: i,
                sg_list: &[p.b.mr.sge(i * 4096, 4096)],
            }])
            .unwrap();
    }
    for i in 0..10 {
        send(&p, i, 3000);
        ok(&p.a, i);
    }
    for i in 0..10 {
        let wc = p.b.completion();
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (i, WcStatus::Success, 3000)
        );
    }
    // Nothing more was delivered: the next SEND's completion is the next one B sees (a
    // duplicate of an earlier SEND would have come first).
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 10,
            sg_list: &[p.b.mr.sge(10 * 4096, 4096)],
        }])
        .unwrap();
    send(&p, 10, 1000);
    ok(&p.a, 10);
    let wc = p.b.completion();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (10, WcStatus::Success, 1000),
        "a SEND delivered twice"
    );
    let b = p.dev_b.counters();
    assert!(b.rx_duplicates >= 30, "{b:?}");
}
