//! A completion queue that the host does not drain overruns: the NIC loses the completion that
//! does not fit, counts it, puts the queue in error and moves the QPs that complete on it to
//! the error state (IBTA: CQ overrun). The host is told instead of waiting for ever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::Region;
use roce_nic::link::mem;
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::Device;

const REGION: usize = 1 << 20;

/// A host like the bench's, but with a completion queue of `entries`.
fn host_with_cq(dev: &Device, entries: u32) -> Host {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(entries).unwrap();
    let qp = pd.create_qp(QpType::Rc, &cq, &cq, bench_cap()).unwrap();
    let region = Arc::new(Region::anonymous(REGION).unwrap());
    let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
    Host {
        ctx,
        pd,
        cq,
        qp,
        region,
        mr,
    }
}

fn write(host: &Host, peer: &Host, wr_id: u64) {
    host.qp
        .post_send(&[SendWr {
            wr_id,
            op: SendOp::RdmaWrite {
                remote_addr: peer.mr.va + wr_id * 8,
                rkey: peer.mr.rkey,
            },
            sg_list: &[host.mr.sge(0, 8)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
}

#[test]
fn an_undrained_completion_queue_overruns_and_takes_its_qp_to_error() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let a = host_with_cq(&dev_a, 2);
    let b = host(&dev_b, QpType::Rc, REGION, bench_cap()).unwrap();
    connect(&a, &b, Mtu::M1024, |_| {}).unwrap();
    a.write(0, b"8 bytes!");

    // Five signalled WRITEs into a queue of two, nobody polling.
    for wr_id in 1..=5 {
        write(&a, &b, wr_id);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.qp.query().unwrap().qp_state != Some(QpState::Err) {
        assert!(
            Instant::now() < deadline,
            "the QP never left {:?}",
            a.qp.query().unwrap().qp_state
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(a.cq.overran());
    // All five WRITEs were executed: the target's memory does not depend on the initiator's
    // completion queue.
    for wr_id in 1..=5 {
        assert_eq!(b.read(wr_id as usize * 8, 8), b"8 bytes!", "WRITE {wr_id}");
    }
    // The two that fitted come out; then the error, not a wait.
    let mut wc = [Wc::default(); 8];
    assert_eq!(a.cq.poll(&mut wc), 2);
    assert_eq!(
        wc[..2]
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    match a.cq.try_wait(&mut wc, Some(Duration::from_secs(5))) {
        Err(VerbsError::CqOverrun(cq)) => assert_eq!(cq, a.cq.handle()),
        other => panic!("{other:?}"),
    }
    let counters = a.ctx.counters().unwrap();
    assert!(counters.cq_overflows >= 3, "{counters:?}");

    // Later work is flushed into the queue in error: lost and counted, never completed.
    write(&a, &b, 6);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.ctx.counters().unwrap().cq_overflows < counters.cq_overflows + 1 {
        assert!(
            Instant::now() < deadline,
            "the flushed request was not counted"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(a.cq.poll(&mut wc), 0);
    // The peer carries on.
    assert_eq!(b.qp.query().unwrap().qp_state, Some(QpState::Rts));
}
