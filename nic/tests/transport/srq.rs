//! Shared receive queues: several QPs of a domain take their receives from one queue in
//! posting order; an empty one answers RNR NAKs (RC) or drops (UD) as an empty receive queue
//! does; the limit event fires once below its watermark; a QP's use of an SRQ is checked.

use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::Region;
use roce_nic::link::mem;
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::Device;

/// The receiving side: `n` QPs of `qp_type` on one SRQ, with a region for the messages.
struct SrqSide {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    srq: SharedReceiveQueue,
    qps: Vec<QueuePair>,
    region: Arc<Region>,
    mr: MemoryRegion,
}

fn srq_side(dev: &Device, qp_type: QpType, n: usize, max_wr: u32) -> SrqSide {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let srq = pd.create_srq(max_wr, 1).unwrap();
    let qps = (0..n)
        .map(|_| {
            pd.create_qp_with_srq(qp_type, &cq, &cq, &srq, bench_cap())
                .unwrap()
        })
        .collect();
    let region = Arc::new(Region::anonymous(1 << 16).unwrap());
    let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
    SrqSide {
        ctx,
        pd,
        cq,
        srq,
        qps,
        region,
        mr,
    }
}

/// Posts receives `ids` into the SRQ, each into its own 4 KiB of the region.
fn post_receives(side: &SrqSide, ids: std::ops::Range<u64>) {
    for id in ids {
        let sge = side.mr.sge(id * 4096, 4096);
        side.srq
            .post_recv(&[RecvWr {
                wr_id: id,
                sg_list: &[sge],
            }])
            .unwrap();
    }
}

fn send(host: &Host, qp: &QueuePair, wr_id: u64, data: &[u8]) {
    host.write(0, data);
    qp.post_send(&[SendWr {
        wr_id,
        op: SendOp::Send,
        sg_list: &[host.mr.sge(0, data.len() as u32)],
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
}

fn completion(cq: &CompletionQueue) -> Wc {
    let mut wc = [Wc::default()];
    assert_eq!(
        cq.wait(&mut wc, Some(Duration::from_secs(10))),
        1,
        "no completion"
    );
    wc[0]
}

/// `a`'s QPs (on its own device), each connected RC to one of `b`'s.
fn senders(dev: &Device, b: &SrqSide) -> (Host, Vec<QueuePair>) {
    let host = host(dev, QpType::Rc, 1 << 16, bench_cap()).unwrap();
    let qps: Vec<QueuePair> = b
        .qps
        .iter()
        .map(|peer| {
            let qp = host
                .pd
                .create_qp(QpType::Rc, &host.cq, &host.cq, bench_cap())
                .unwrap();
            connect_qps(&qp, peer, Mtu::M1024, |a| {
                if a.min_rnr_timer.is_some() {
                    a.min_rnr_timer = Some(1);
                }
            })
            .unwrap();
            qp
        })
        .collect();
    (host, qps)
}

#[test]
fn qps_take_receives_from_their_shared_queue_in_posting_order() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let b = srq_side(&dev_b, QpType::Rc, 3, 16);
    let (a, qps) = senders(&dev_a, &b);
    post_receives(&b, 0..6);
    // Messages from the QPs in the order 2, 0, 1, 2, 0, 1: each takes the oldest receive.
    for (i, qp) in [2, 0, 1, 2, 0, 1].into_iter().enumerate() {
        let message = pattern(100 + i, i as u8);
        send(&a, &qps[qp], i as u64, &message);
        assert_eq!(completion(&a.cq).status, WcStatus::Success);
        let wc = completion(&b.cq);
        assert_eq!(
            (wc.status, wc.wr_id, wc.byte_len, wc.qp_num),
            (
                WcStatus::Success,
                i as u64,
                message.len() as u32,
                b.qps[qp].qp_num()
            )
        );
        let mut landed = vec![0; message.len()];
        b.region.read(i * 4096, &mut landed).unwrap();
        assert_eq!(landed, message);
    }
    // The QPs have no receive queue of their own.
    assert!(b.qps[0]
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &[b.mr.sge(0, 8)],
        }])
        .is_err());
    assert_eq!(b.qps[0].srq().map(|s| s.srq_num()), Some(b.srq.srq_num()));
}

#[test]
fn an_empty_shared_queue_answers_rnr_naks_until_a_receive_is_posted() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let b = srq_side(&dev_b, QpType::Rc, 2, 16);
    let (a, qps) = senders(&dev_a, &b);
    send(&a, &qps[1], 7, b"waits for a receive");
    let deadline = Instant::now() + Duration::from_secs(10);
    while dev_b.counters().rnr_naks_sent == 0 {
        assert!(Instant::now() < deadline, "no RNR NAK");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(a.next_completion(Duration::ZERO).is_none());
    post_receives(&b, 3..4);
    assert_eq!(
        (completion(&a.cq).wr_id, completion(&b.cq).wr_id),
        (7, 3),
        "the retried SEND takes the receive posted after the RNR NAK"
    );
    assert!(dev_a.counters().rnr_naks_received > 0);
}

#[test]
fn ud_qps_share_a_queue_and_an_empty_one_drops_the_datagram() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let qkey = 0x1111_1111;
    let b = srq_side(&dev_b, QpType::Ud, 2, 16);
    for qp in &b.qps {
        qp.modify(&QpAttr::init_ud(qkey)).unwrap();
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ..QpAttr::default()
        })
        .unwrap();
    }
    let a = host(&dev_a, QpType::Ud, 1 << 16, bench_cap()).unwrap();
    a.qp.modify(&QpAttr::init_ud(qkey)).unwrap();
    a.qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ..QpAttr::default()
    })
    .unwrap();
    a.qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        ..QpAttr::default()
    })
    .unwrap();
    let ah =
        a.pd.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    let datagram = |to: &QueuePair, wr_id| {
        a.write(0, b"datagram");
        a.qp.post_send(&[SendWr {
            wr_id,
            op: SendOp::Send,
            sg_list: &[a.mr.sge(0, 8)],
            flags: SendFlags::SIGNALED,
            ud: Some(UdDest {
                ah: ah.handle(),
                remote_qpn: to.qp_num(),
                remote_qkey: qkey,
            }),
        }])
        .unwrap();
        assert_eq!(completion(&a.cq).status, WcStatus::Success);
    };
    // Nothing posted: dropped and counted.
    datagram(&b.qps[0], 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while dev_b.counters().rx_no_receive == 0 {
        assert!(
            Instant::now() < deadline,
            "the datagram was not counted as dropped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    post_receives(&b, 10..12);
    datagram(&b.qps[1], 2);
    datagram(&b.qps[0], 3);
    for (id, qp) in [(10, 1), (11, 0)] {
        let wc = completion(&b.cq);
        assert_eq!(
            (wc.status, wc.wr_id, wc.byte_len, wc.qp_num),
            (WcStatus::Success, id, 40 + 8, b.qps[qp].qp_num())
        );
    }
}

#[test]
fn the_limit_event_fires_once_below_the_armed_limit_then_disarms() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let b = srq_side(&dev_b, QpType::Rc, 2, 8);
    let (a, qps) = senders(&dev_a, &b);
    assert_eq!(
        b.srq.attr(),
        SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0
        }
    );
    // A limit above the queue's size is refused (EINVAL).
    assert_eq!(b.srq.arm_limit(9).unwrap_err().errno(), libc::EINVAL);
    b.srq.arm_limit(3).unwrap();
    assert_eq!(b.srq.query().unwrap().srq_limit, 3);
    post_receives(&b, 0..5);
    // Takes leave 4, 3, then 2 posted (below 3: the event), then 1.
    for i in 0..4u64 {
        send(&a, &qps[i as usize % 2], i, b"x");
        assert_eq!(completion(&a.cq).status, WcStatus::Success);
        assert_eq!(completion(&b.cq).wr_id, i);
        let expected = u64::from(i >= 2);
        assert_eq!(
            dev_b.counters().srq_limit_events,
            expected,
            "after take {i}"
        );
    }
    assert_eq!(b.srq.query().unwrap().srq_limit, 0, "disarmed once fired");
}

#[test]
fn a_qp_may_use_only_a_queue_of_its_own_host_and_domain() {
    let (la, lb) = mem::pair();
    let (dev, _peer) = devices(la, lb).unwrap();
    let mine = srq_side(&dev, QpType::Rc, 1, 4);
    // Another domain of the same host: EINVAL (its receives name the other domain's memory).
    let other_pd = mine.ctx.alloc_pd().unwrap();
    let refused = other_pd
        .create_qp_with_srq(QpType::Rc, &mine.cq, &mine.cq, &mine.srq, bench_cap())
        .err()
        .expect("an SRQ of another domain was accepted");
    assert_eq!(refused.errno(), libc::EINVAL, "{refused}");
    // Another host naming the SRQ's number: it is not one of its objects.
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let refused = pd
        .create_qp_with_srq(QpType::Rc, &cq, &cq, &mine.srq, bench_cap())
        .err()
        .expect("an SRQ of another host was accepted");
    assert!(
        matches!(refused, VerbsError::NoSuchObject { .. }),
        "{refused}"
    );
    // Sizes beyond the device's limits: EINVAL.
    for (max_wr, max_sge) in [(0, 1), (1 << 20, 1), (4, 1000)] {
        let refused = mine.pd.create_srq(max_wr, max_sge).err().unwrap();
        assert_eq!(
            refused.errno(),
            libc::EINVAL,
            "{max_wr} {max_sge}: {refused}"
        );
    }
    // A receive with more entries than the SRQ allows is refused when posted.
    let two = [mine.mr.sge(0, 8), mine.mr.sge(8, 8)];
    assert!(mine
        .srq
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &two,
        }])
        .is_err());
}

#[test]
fn uc_qps_share_a_queue_and_a_message_without_a_receive_is_dropped() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let b = srq_side(&dev_b, QpType::Uc, 2, 16);
    let a = host(&dev_a, QpType::Uc, 1 << 16, bench_cap()).unwrap();
    let qps: Vec<QueuePair> = b
        .qps
        .iter()
        .map(|peer| {
            let qp =
                a.pd.create_qp(QpType::Uc, &a.cq, &a.cq, bench_cap())
                    .unwrap();
            connect_qps(&qp, peer, Mtu::M1024, |_| {}).unwrap();
            qp
        })
        .collect();
    send(&a, &qps[0], 1, b"nobody posted");
    assert_eq!(completion(&a.cq).status, WcStatus::Success);
    let deadline = Instant::now() + Duration::from_secs(10);
    while dev_b.counters().rx_no_receive == 0 {
        assert!(
            Instant::now() < deadline,
            "the message was not counted as dropped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    post_receives(&b, 4..6);
    for (id, qp) in [(4, 1), (5, 0)] {
        let message = pattern(3000, id as u8);
        send(&a, &qps[qp], id, &message);
        assert_eq!(completion(&a.cq).status, WcStatus::Success);
        let wc = completion(&b.cq);
        assert_eq!(
            (wc.status, wc.wr_id, wc.byte_len, wc.qp_num),
            (WcStatus::Success, id, 3000, b.qps[qp].qp_num())
        );
        let mut landed = vec![0; 3000];
        b.region.read(id as usize * 4096, &mut landed).unwrap();
        assert_eq!(landed, message);
    }
}

#[test]
fn a_qp_entering_the_error_state_leaves_the_shared_queue_to_the_others() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let b = srq_side(&dev_b, QpType::Rc, 2, 16);
    let (a, qps) = senders(&dev_a, &b);
    post_receives(&b, 0..2);
    b.qps[0]
        .modify(&QpAttr {
            qp_state: Some(QpState::Err),
            ..QpAttr::default()
        })
        .unwrap();
    // Both receives are still there for the other QP, in their order: none was flushed.
    for id in 0..2 {
        send(&a, &qps[1], id, b"still shared");
        assert_eq!(completion(&a.cq).status, WcStatus::Success);
        let wc = completion(&b.cq);
        assert_eq!(
            (wc.status, wc.wr_id, wc.qp_num),
            (WcStatus::Success, id, b.qps[1].qp_num())
        );
    }
    let mut none = [Wc::default()];
    assert_eq!(
        b.cq.poll(&mut none),
        0,
        "a completion too many: {:?}",
        none[0]
    );
}
