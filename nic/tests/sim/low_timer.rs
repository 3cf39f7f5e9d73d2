//! IRN's two-level retransmission timer (`rto_low`): with few packets unacknowledged the
//! requester goes back after a timeout from the measured round trip, not after the QP's
//! configured Local ACK Timeout; it spends no retry, and a silent peer still fails after the
//! configured timeouts (see `roce_nic::transport::requester::rto_low`).

use std::time::Duration;

use roce_nic::transport::requester::{
    RTO_HIGH, RTO_LOW_FLOOR, RTO_LOW_LOSSY_FLOOR, RTO_LOW_PACKETS,
};
use roce_nic::transport::EventKind;
use roce_nic::verbs::{QpState, SendFlags, SendOp, SendWr, Sge, WcStatus};
use roce_wire::aeth::Syndrome;
use roce_wire::Kind;

use super::peer::{setup, Bench};
use super::workload::{self, Case};

const PSN: u32 = 100;

/// A bench whose QP runs the low timer (or not) with a 67 ms configured timeout.
fn bench(rto_low: bool) -> Bench {
    Bench::new(super::world::QpSetup {
        timeout: 14,
        rto_low,
        ..setup()
    })
}

fn write(b: &mut Bench, wr_id: u64) {
    let sge = Sge {
        addr: b.node.va(0),
        length: 10,
        lkey: b.node.mr.lkey,
    };
    b.post(&SendWr {
        wr_id,
        op: SendOp::RdmaWrite {
            remote_addr: 0x5000,
            rkey: 0x77,
        },
        sg_list: &[sge],
        flags: SendFlags::SIGNALED,
        ud: None,
    });
}

/// One WRITE answered after `rtt`: the QP has measured a round trip.
fn learn_rtt(b: &mut Bench, rtt: Duration) {
    write(b, 1);
    assert_eq!(b.sent().len(), 1);
    b.wait(rtt);
    b.ack(PSN, Syndrome::ack());
    assert_eq!(b.completions()[0].status, WcStatus::Success);
}

/// The last packet lost (nothing after it reveals the gap): sent again once the low timeout —
/// here its floor, the round trip being 20 µs — has passed, 67 ms before the configured timer
/// would; without the low timer nothing is sent for milliseconds.
#[test]
fn a_lost_tail_is_sent_again_after_the_low_timeout() {
    for rto_low in [true, false] {
        let mut b = bench(rto_low);
        learn_rtt(&mut b, Duration::from_micros(20));
        write(&mut b, 2);
        assert_eq!(b.sent().len(), 1, "the WRITE; the peer never sees it");
        b.wait(RTO_LOW_FLOOR - Duration::from_micros(5));
        assert!(b.sent().is_empty(), "nothing before the low timeout");
        b.wait(Duration::from_micros(10));
        let again: Vec<_> = b.sent().iter().map(|s| (s.kind, s.psn)).collect();
        if !rto_low {
            assert!(again.is_empty(), "{again:?}");
            b.wait(Duration::from_millis(5));
            assert!(
                b.sent().is_empty(),
                "the configured timer alone waits longer"
            );
            continue;
        }
        assert_eq!(again, [(Kind::WriteOnly, PSN + 1)]);
        assert_eq!(b.count(EventKind::RetransmitTimeout), 1);
        b.ack(PSN + 1, Syndrome::ack());
        assert_eq!(b.completions()[0].status, WcStatus::Success);
        assert_eq!(
            b.node.qp.send.retry_left,
            setup().retry_cnt,
            "a low timeout spends no retry"
        );
    }
}

/// More than [`RTO_LOW_PACKETS`] unacknowledged: later packets reveal a loss (the peer's
/// sequence NAK), so the low timer is not armed; once acknowledgements leave few, it is.
#[test]
fn the_low_timer_runs_only_with_few_packets_unacknowledged() {
    let mut b = bench(true);
    learn_rtt(&mut b, Duration::from_micros(20));
    for wr_id in 0..=u64::from(RTO_LOW_PACKETS) {
        write(&mut b, 10 + wr_id);
    }
    assert_eq!(b.sent().len(), RTO_LOW_PACKETS as usize + 1);
    assert_eq!(b.node.qp.send.low_timer, None);
    b.ack(PSN + 1, Syndrome::ack());
    assert!(b.node.qp.send.low_timer.is_some(), "three left");
    b.wait(Duration::from_micros(150));
    let again: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(
        again,
        [PSN + 2, PSN + 3, PSN + 4],
        "go-back from the oldest"
    );
}

/// A silent peer: the low timer sends copies with a doubling wait, but spends no retry; the
/// QP fails when the configured timer has run out its retries, no sooner than without the
/// low timer — and a bounded number of copies reached the peer.
#[test]
fn a_silent_peer_fails_after_the_configured_timeouts_with_bounded_copies() {
    let mut b = Bench::new(super::world::QpSetup {
        timeout: 10,
        rto_low: true,
        ..setup()
    });
    learn_rtt(&mut b, Duration::from_micros(20));
    write(&mut b, 2);
    let mut copies = b.sent().len();
    let start = b.now;
    while b.state() != QpState::Err && b.now - start < 1_000_000_000 {
        b.wait(Duration::from_micros(100));
        copies += b.sent().iter().filter(|s| s.psn == PSN + 1).count();
    }
    assert_eq!(b.completions()[0].status, WcStatus::RetryExcErr);
    let configured = Duration::from_nanos(4096 << 10);
    let failed_after = Duration::from_nanos(b.now - start);
    let retries = u32::from(setup().retry_cnt);
    assert!(
        failed_after >= configured * (retries + 1) - Duration::from_micros(200),
        "failed after {failed_after:?}"
    );
    // Per configured timeout at most one copy per doubling from the first low timeout to 4.2
    // ms, and the configured timer's own. After the first expiry the QP counts as lossy and
    // its floor is 10 µs, so the first low timeout is RFC 6298's from the one 20 µs sample:
    // SRTT 20 µs + 4 × RTTVAR 10 µs.
    let first = Duration::from_micros(20 + 4 * 10);
    let low_per_period = (configured.as_micros() / first.as_micros()).ilog2() as usize + 1;
    assert!(
        copies > 1 + retries as usize && copies <= (1 + low_per_period) * (retries as usize + 1),
        "{copies} copies"
    );
}

/// A QP that has lost packets runs the low timer whatever is unacknowledged, from the
/// measured round trip down to [`RTO_LOW_LOSSY_FLOOR`]: the peer NAKs a gap, and the first
/// resend is lost, so the peer (having NAKed that gap once) stays silent. A probe comes one
/// low timeout later, a second one more later (see
/// `a_stalled_peer_costs_a_probe_not_a_go_back`), the go-back two more later — tens of
/// microseconds on a line whose round
/// trip is a few, where IRN's 100 µs floor and the low timer only for three packets or fewer
/// left the first probe at 100 µs and the go-back at the configured timer's 4 ms.
#[test]
fn a_lossy_qp_recovers_a_silent_gap_in_round_trips() {
    let mut b = bench(true);
    learn_rtt(&mut b, Duration::from_micros(2));
    for wr_id in 0..8 {
        write(&mut b, 10 + wr_id);
    }
    assert_eq!(b.sent().len(), 8);
    assert_eq!(
        b.node.qp.send.low_timer, None,
        "eight unacknowledged, no loss yet"
    );
    b.ack(
        PSN + 3,
        Syndrome::Nak(roce_wire::aeth::NakCode::PSN_SEQUENCE_ERROR),
    );
    let resent: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(resent, (PSN + 3..PSN + 9).collect::<Vec<_>>(), "go-back-N");
    assert!(
        b.node.qp.send.low_timer.is_some(),
        "six unacknowledged, losses seen"
    );
    // One sample of 2 µs: SRTT + 4 × RTTVAR = 6 µs, under the floor.
    b.wait(RTO_LOW_LOSSY_FLOOR + Duration::from_micros(1));
    let probe: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(probe, [PSN + 3], "the probe");
    assert_eq!(b.node.counters.snapshot().tail_probes, 1);
    // Unanswered for a low timeout: once more, in case the peer only stalled.
    b.wait(RTO_LOW_LOSSY_FLOOR);
    let probe: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(probe, [PSN + 3], "the second probe");
    assert_eq!(b.count(EventKind::RetransmitTimeout), 0);
    b.wait(RTO_LOW_LOSSY_FLOOR * 2);
    let again: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(
        again,
        (PSN + 3..PSN + 9).collect::<Vec<_>>(),
        "the low timer's go-back"
    );
    assert_eq!(b.count(EventKind::RetransmitTimeout), 1);
    // The peer got them: everything completes, no retry spent.
    b.ack(PSN + 8, Syndrome::ack());
    let done = b.completions();
    assert_eq!(done.len(), 8);
    assert!(done.iter().all(|wc| wc.status == WcStatus::Success));
    assert_eq!(b.node.qp.send.retry_left, setup().retry_cnt);
}

/// Without faults the low timer never fires: nothing is sent twice in a random mix, READs and
/// atomics included, both ways.
#[test]
fn no_spurious_resends_without_faults() {
    for seed in 1..=4 {
        let case: Case = format!(
            "seed={seed},ops=300,mtu=1024,psn=0xffff00,rnr=false,window=12,rd=4,both=true,low=true"
        )
        .parse()
        .expect("a case");
        let outcome = workload::run(&case).unwrap_or_else(|e| panic!("{e}\ncase: {case}"));
        assert_eq!(
            (outcome.retransmitted, outcome.go_backs),
            (0, 0),
            "{case}: {outcome:?}"
        );
    }
}

/// Under loss the low timer recovers lost tails in round trips, not configured timeouts (1 ms
/// here): the same seeded runs, exactly once and in order either way, take under two thirds of
/// the simulated time (2.1 times less over these four seeds when written).
#[test]
fn under_loss_the_low_timer_shortens_recovery() {
    let run = |seed: u32, low: bool| {
        let case: Case = format!(
            "seed={seed:#x},ops=400,mtu=1024,psn=0x10,loss=0.05,dup=0.01,reorder=0.05,rnr=false,window=4,rd=4,both=true,low={low}"
        )
        .parse()
        .expect("a case");
        workload::run(&case).unwrap_or_else(|e| panic!("{e}\ncase: {case}"))
    };
    // Summed over seeds: one seeded run's figure moves with any change to the transport's
    // timing (a seed once went from 2.6× to 1.6× shorter), the sum much less.
    let (mut off, mut on) = (0u64, 0u64);
    for seed in [0x21, 0x22, 0x23, 0x24] {
        let (a, b) = (run(seed, false), run(seed, true));
        eprintln!("seed {seed:#x}\noff: {a:?}\non: {b:?}");
        off += a.simulated;
        on += b.simulated;
    }
    assert!(
        on * 3 < off * 2,
        "low timer {on} ns, configured alone {off} ns (summed over the seeds)"
    );
}

/// A low-timer expiry cuts the loss window as a loss does (it means a lost resend, NAK or
/// answer more often than a congested path); the configured timer's expiry — nothing back for
/// a whole Local ACK Timeout — brings it to its minimum.
#[test]
fn a_low_timeout_cuts_the_window_as_a_loss_and_the_configured_one_to_its_minimum() {
    use roce_nic::transport::window;
    let cut = (f64::from(window::MAX) * window::DECREASE) as u32;
    for rto_low in [true, false] {
        let mut b = bench(rto_low);
        learn_rtt(&mut b, Duration::from_micros(20));
        write(&mut b, 2);
        assert_eq!(b.node.qp.send.window.packets(), window::MAX);
        let waited = if rto_low {
            RTO_LOW_FLOOR + Duration::from_micros(5)
        } else {
            // The probe at a quarter of the 67 ms timeout, then the timer 67 ms after it.
            Duration::from_millis(100)
        };
        b.wait(waited);
        assert!(
            b.count(EventKind::RetransmitTimeout) >= 1,
            "rto_low {rto_low}"
        );
        let expected = if rto_low { cut } else { window::MIN };
        assert_eq!(
            b.node.qp.send.window.packets(),
            expected,
            "rto_low {rto_low}"
        );
    }
}

/// A QP that never lost a packet loses one, and the peer's sequence NAK for it is lost too:
/// the peer drops the rest silently (it NAKs a gap once), and more than [`RTO_LOW_PACKETS`]
/// are unacknowledged, so no low timer runs. The probe comes after IRN's RTO_high, not a
/// quarter of the 67 ms timeout; the peer takes it in sequence and acknowledges it — its own
/// PSN, so the peer had dropped everything after it — and the requester goes back from the
/// next packet at once, rather than a probe interval later for each packet.
#[test]
fn a_lost_first_nak_is_recovered_in_a_probe_interval() {
    let mut b = bench(true);
    learn_rtt(&mut b, Duration::from_micros(20));
    for wr_id in 0..8 {
        write(&mut b, 10 + wr_id);
    }
    assert_eq!(b.sent().len(), 8);
    assert!(!b.node.qp.send.window.lossy(), "no loss seen yet");
    // The first of them was lost, and the NAK the second provoked.
    b.wait(Duration::from_micros(300));
    assert!(b.sent().is_empty(), "nothing before the probe interval");
    b.wait(RTO_HIGH - Duration::from_micros(300) + Duration::from_micros(5));
    let probe: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(probe, [PSN + 1], "the probe, after RTO_high");
    b.ack(PSN + 1, Syndrome::ack());
    let again: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(
        again,
        (PSN + 2..PSN + 9).collect::<Vec<_>>(),
        "the probe's answer shows the gap: go back at once"
    );
    assert_eq!(b.count(EventKind::GoBack), 1);
    b.ack(PSN + 8, Syndrome::ack());
    let done = b.completions();
    assert_eq!(done.len(), 8);
    assert!(done.iter().all(|wc| wc.status == WcStatus::Success));
}

/// A probe answered as a duplicate (the peer had its packet and everything after it; only
/// the ACKs were lost) names the last PSN sent: nothing is sent again.
#[test]
fn a_probe_answered_for_everything_sends_nothing_again() {
    let mut b = bench(true);
    learn_rtt(&mut b, Duration::from_micros(20));
    for wr_id in 0..8 {
        write(&mut b, 10 + wr_id);
    }
    assert_eq!(b.sent().len(), 8);
    b.wait(RTO_HIGH + Duration::from_micros(5));
    let probe: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(probe, [PSN + 1]);
    b.ack(PSN + 8, Syndrome::ack());
    assert!(b.sent().is_empty());
    assert_eq!(b.count(EventKind::GoBack), 0);
    assert_eq!(b.completions().len(), 8);
}

/// A go-back restarts the low timer: the packets it sends again need a round trip of their
/// own before their answer can come. A sequence NAK that names the oldest unacknowledged
/// packet moves nothing forward, and the low timer, armed at the last progress, fired a round
/// trip or less after the go-back while the copies were on their way — a timeout and a second
/// go-back of everything unacknowledged on a line that had lost one packet.
#[test]
fn a_go_back_restarts_the_low_timer() {
    let mut b = bench(true);
    learn_rtt(&mut b, Duration::from_micros(20));
    for wr_id in 0..8 {
        write(&mut b, 10 + wr_id);
    }
    assert_eq!(b.sent().len(), 8);
    // The first lost packet cuts the window: the QP is lossy, its low timer runs whatever is
    // unacknowledged.
    b.ack(
        PSN + 2,
        Syndrome::Nak(roce_wire::aeth::NakCode::PSN_SEQUENCE_ERROR),
    );
    assert_eq!(b.sent().len(), 7, "go-back-N from PSN + 2");
    // The copies are answered, the next packet is lost (the low timer restarts at each
    // progress): 20 µs of silence, then the sequence NAK for the packet the ACK left oldest.
    b.ack(PSN + 2, Syndrome::ack());
    let rto = b.node.qp.send.low_timer.expect("a lossy QP's low timer") - b.instant();
    b.wait(Duration::from_micros(20));
    assert!(b.sent().is_empty());
    b.ack(
        PSN + 3,
        Syndrome::Nak(roce_wire::aeth::NakCode::PSN_SEQUENCE_ERROR),
    );
    let again: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert_eq!(again, (PSN + 3..PSN + 9).collect::<Vec<_>>(), "go-back-N");
    // Until one low timeout after the go-back, nothing more.
    b.wait(rto - Duration::from_micros(1));
    let early: Vec<_> = b.sent().iter().map(|s| s.psn).collect();
    assert!(
        early.is_empty(),
        "the copies' round trip is not over: {early:?}"
    );
    assert_eq!(b.count(EventKind::RetransmitTimeout), 0);
    b.ack(PSN + 8, Syndrome::ack());
    assert_eq!(b.completions().len(), 8);
}

/// A lossy QP's peer that stops answering for a while (its engine thread lost its core: on
/// `roce bench`'s two cores shared by more threads, often) gets a second probe when the first
/// goes unanswered for a low timeout, not a go-back of everything unacknowledged: with the
/// go-back, each such stall of a hundred microseconds or two sent a window of duplicates and
/// cut the window as a loss (simulated with engines that stall 1% of their passes for up to
/// 200 µs at 1% loss: a timeout after 15% of the sequence NAKs and 17 packets sent again per
/// NAK, 2% and 14 with the second probe). The peer wakes and acknowledges everything: nothing
/// was sent again but the two probes, the window is as it was.
#[test]
fn a_stalled_peer_costs_a_probe_not_a_go_back() {
    let mut b = bench(true);
    learn_rtt(&mut b, Duration::from_micros(2));
    for wr_id in 0..8 {
        write(&mut b, 10 + wr_id);
    }
    assert_eq!(b.sent().len(), 8);
    b.ack(
        PSN + 1,
        Syndrome::Nak(roce_wire::aeth::NakCode::PSN_SEQUENCE_ERROR),
    );
    assert_eq!(b.sent().len(), 8, "go-back-N of the eight");
    let window = b.node.qp.send.window.packets();
    // The peer stalls: a probe after one low timeout, another after the next.
    b.wait(RTO_LOW_LOSSY_FLOOR * 2 + Duration::from_micros(2));
    let probes: Vec<_> = b.sent().iter().map(|s| (s.psn, s.kind)).collect();
    assert_eq!(probes, [(PSN + 1, Kind::WriteOnly); 2], "two probes");
    assert_eq!(b.count(EventKind::RetransmitTimeout), 0);
    // It wakes and had everything.
    b.ack(PSN + 8, Syndrome::ack());
    assert!(b.sent().is_empty());
    assert_eq!(b.completions().len(), 8);
    assert!(b.node.qp.send.window.packets() >= window, "no cut");
    assert_eq!(b.node.counters.snapshot().tail_probes, 2);
}
