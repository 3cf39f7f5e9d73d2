//! Completion queue moderation (`ibv_modify_cq`'s count and period): a host sleeping in
//! `try_wait` is woken once that many completions wait, or after the period with fewer.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use roce_nic::testbed::{self, Pair};
use roce_nic::verbs::*;

/// Longer than any of these tests may take; a waiter still asleep then has missed its wake-up.
const HANG: Duration = Duration::from_secs(30);

fn signaled_writes(p: &Pair, n: u64) {
    for wr_id in 0..n {
        p.a.qp
            .post_send(&[SendWr {
                wr_id,
                op: SendOp::RdmaWrite {
                    remote_addr: p.b.mr.va + wr_id * 64,
                    rkey: p.b.mr.rkey,
                },
                sg_list: &[p.a.mr.sge(0, 64)],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
    }
}

/// Waits on a's completion queue in another thread (with no timeout of its own, so only the
/// moderation ends its sleep), while `post` runs here; returns how many completions each wait
/// returned until `total` came.
fn moderated_waits(
    p: &Pair,
    moderation: Moderation,
    total: usize,
    post: impl FnOnce(),
) -> Vec<usize> {
    p.a.cq.moderate(moderation);
    assert_eq!(p.a.cq.moderation(), moderation);
    let (tx, rx) = mpsc::channel();
    let cq = p.a.cq.clone();
    let (ready_tx, ready) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut wcs = vec![Wc::default(); 64];
        let mut got = 0;
        let _ = ready_tx.send(());
        while got < total {
            let n = cq.try_wait(&mut wcs, None).unwrap();
            assert!(wcs[..n].iter().all(|wc| wc.status == WcStatus::Success));
            got += n;
            if tx.send(n).is_err() {
                return;
            }
        }
    });
    // The waiter asleep before anything completes (a waiter that came late would find some
    // completions already there and take them at once, and then wait for a count that only
    // the rest can no longer reach). A head start, not an assertion: what is asserted is what
    // each wait returned.
    ready.recv_timeout(HANG).expect("the waiter starts");
    std::thread::sleep(Duration::from_millis(50));
    post();
    let deadline = Instant::now() + HANG;
    let mut waits = Vec::new();
    while waits.iter().sum::<usize>() < total {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the waiter slept through its wake-up after {waits:?}"));
        waits.push(n);
    }
    waiter.join().unwrap();
    waits
}

#[test]
fn a_moderated_waiter_is_woken_once_count_completions_wait() {
    let p = testbed::pair(QpType::Rc, Mtu::M1024, 1 << 16).unwrap();
    // A period far beyond the test's patience: only reaching the count can wake the waiter.
    let moderation = Moderation {
        count: 4,
        period: Duration::from_secs(3600),
    };
    // The WRITEs one at a time, each given time to complete before the next: unmoderated,
    // each would wake the waiter.
    let waits = moderated_waits(&p, moderation, 4, || {
        for _ in 0..4 {
            signaled_writes(&p, 1);
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    assert_eq!(waits, [4], "one wake-up, with all four");
}

#[test]
fn a_moderated_waiter_takes_fewer_once_its_period_has_passed() {
    let p = testbed::pair(QpType::Rc, Mtu::M1024, 1 << 16).unwrap();
    // Two completions will ever come, against a count of eight.
    let moderation = Moderation {
        count: 8,
        period: Duration::from_millis(20),
    };
    let waits = moderated_waits(&p, moderation, 2, || signaled_writes(&p, 2));
    assert_eq!(waits.iter().sum::<usize>(), 2);
}

#[test]
fn moderation_off_is_the_default_and_a_count_of_one_or_no_period() {
    let p = testbed::pair(QpType::Rc, Mtu::M1024, 1 << 16).unwrap();
    assert_eq!(p.a.cq.moderation(), Moderation::NONE);
    // Neither of these moderates: a waiter with no timeout still wakes at each completion.
    for moderation in [
        Moderation {
            count: 8,
            period: Duration::ZERO,
        },
        Moderation {
            count: 1,
            period: Duration::from_secs(3600),
        },
    ] {
        let waits = moderated_waits(&p, moderation, 1, || signaled_writes(&p, 1));
        assert_eq!(waits, [1]);
    }
}

#[test]
fn the_bench_moderates_its_queue_only_while_it_runs() {
    let p = testbed::pair(QpType::Rc, Mtu::M1024, 1 << 16).unwrap();
    let t = roce_nic::bench::write_messages(p.initiator(), 64, 64, 8, 256).unwrap();
    assert_eq!(t.messages, 256);
    assert_eq!(p.a.cq.moderation(), Moderation::NONE);
}
