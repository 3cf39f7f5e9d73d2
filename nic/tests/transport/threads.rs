//! QPs sharded over several engine threads (`DeviceConfig::threads`): RC, UC and UD traffic on
//! QPs of every thread at once, a shared receive queue taken from by QPs of two threads, and a
//! completion queue shared by QPs of two threads overrunning. Four threads run too on a
//! machine of two cores: correctness does not depend on the cores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::Region;
use roce_nic::link::mem;
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::Device;

const QKEY: u32 = 0x600d_cafe;
const WAIT: Duration = Duration::from_secs(10);
/// Bytes of each QP's messages (several packets at path MTU 1024).
const MESSAGE: usize = 5000;

/// Two devices with `threads` engine threads each.
fn sharded(threads: usize) -> (Device, Device) {
    let (la, lb) = mem::pair();
    devices_with(la, lb, |c| c.threads = threads).expect("devices start")
}

/// One side: a context, a domain, one CQ for all its QPs, and a region.
struct Side {
    _ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    region: Arc<Region>,
    mr: MemoryRegion,
}

fn side(dev: &Device) -> Side {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4096).unwrap();
    let region = Arc::new(Region::anonymous(1 << 20).unwrap());
    let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
    Side {
        _ctx: ctx,
        pd,
        cq,
        region,
        mr,
    }
}

fn read(region: &Region, at: usize, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    region.read(at, &mut buf).unwrap();
    buf
}

/// `n` completions from `cq`, each successful.
fn completions(cq: &CompletionQueue, n: usize) -> Vec<Wc> {
    let mut all = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut wc = [Wc::default(); 64];
    while all.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} completions",
            all.len()
        );
        let got = cq.wait(&mut wc, Some(Duration::from_millis(100)));
        all.extend_from_slice(&wc[..got]);
    }
    for wc in &all {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    all
}

fn ready_ud(qp: &QueuePair) {
    qp.modify(&QpAttr::init_ud(QKEY)).unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ..QpAttr::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        ..QpAttr::default()
    })
    .unwrap();
}

/// RC WRITEs and SENDs, UC WRITEs and UD SENDs on `per_type` QPs of each transport (so on every
/// thread), all in flight together; every byte lands where it should, and every thread did
/// some of the work.
fn every_transport_on_every_thread(threads: usize, per_type: usize) {
    let (dev_a, dev_b) = sharded(threads);
    let (a, b) = (side(&dev_a), side(&dev_b));
    let cap = bench_cap();
    let mut pairs = Vec::new();
    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for _ in 0..per_type {
            let qa = a.pd.create_qp(qp_type, &a.cq, &a.cq, cap).unwrap();
            let qb = b.pd.create_qp(qp_type, &b.cq, &b.cq, cap).unwrap();
            match qp_type {
                QpType::Ud => {
                    ready_ud(&qa);
                    ready_ud(&qb);
                }
                _ => connect_qps(&qa, &qb, Mtu::M1024, |_| {}).unwrap(),
            }
            pairs.push((qp_type, qa, qb));
        }
    }
    let ah =
        a.pd.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    // Slot i of each region: the message of pair i (UD's fit in one packet, with the GRH area
    // first at the receiver).
    let slot = |i: usize| (i * 8192) as u64;
    let mut sends = 0;
    let mut receives = 0;
    for (i, (qp_type, qa, qb)) in pairs.iter().enumerate() {
        let len = if *qp_type == QpType::Ud {
            1000
        } else {
            MESSAGE
        };
        let data = pattern(len, i as u8);
        a.region.write(slot(i) as usize, &data).unwrap();
        let sge = [a.mr.sge(slot(i), len as u32)];
        let (op, ud) = match qp_type {
            QpType::Ud => {
                let recv = [b.mr.sge(slot(i), len as u32 + 40)];
                qb.post_recv(&[RecvWr {
                    wr_id: i as u64,
                    sg_list: &recv,
                }])
                .unwrap();
                receives += 1;
                let ud = UdDest {
                    ah: ah.handle(),
                    remote_qpn: qb.qp_num(),
                    remote_qkey: QKEY,
                };
                (SendOp::Send, Some(ud))
            }
            QpType::Rc if i % 2 == 1 => {
                let recv = [b.mr.sge(slot(i), len as u32)];
                qb.post_recv(&[RecvWr {
                    wr_id: i as u64,
                    sg_list: &recv,
                }])
                .unwrap();
                receives += 1;
                (SendOp::Send, None)
            }
            _ => (
                SendOp::RdmaWrite {
                    remote_addr: b.mr.va + slot(i),
                    rkey: b.mr.rkey,
                },
                None,
            ),
        };
        qa.post_send(&[SendWr {
            wr_id: i as u64,
            op,
            sg_list: &sge,
            flags: SendFlags::SIGNALED,
            ud,
        }])
        .unwrap();
        sends += 1;
    }
    completions(&a.cq, sends);
    completions(&b.cq, receives);
    // UC WRITEs complete at the sender once sent: wait for their bytes to land.
    let deadline = Instant::now() + WAIT;
    for (i, (qp_type, _, _)) in pairs.iter().enumerate() {
        let (len, at) = match qp_type {
            QpType::Ud => (1000, slot(i) as usize + 40),
            _ => (MESSAGE, slot(i) as usize),
        };
        let want = pattern(len, i as u8);
        while read(&b.region, at, len) != want {
            assert!(
                Instant::now() < deadline,
                "pair {i} ({qp_type}) never delivered its message"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for dev in [&dev_a, &dev_b] {
        for k in 0..threads {
            let counters = dev.thread_counters(k).unwrap();
            assert!(
                counters.completions > 0 || counters.dma_write_bytes > 0,
                "thread {k} of {} did no work: {counters:?}",
                dev.config().name
            );
        }
        assert!(dev.thread_counters(threads).is_none());
        let all = dev.counters();
        assert_eq!(all.rx_icrc_errors + all.shard_rx_dropped, 0, "{all:?}");
    }
}

#[test]
fn rc_uc_and_ud_traffic_on_qps_of_two_threads() {
    every_transport_on_every_thread(2, 4);
}

#[test]
fn rc_uc_and_ud_traffic_on_qps_of_four_threads() {
    every_transport_on_every_thread(4, 4);
}

/// A shared receive queue whose QPs live on different threads: each receive is taken once, in
/// posting order per QP, and every message lands in a receive of its own.
#[test]
fn qps_of_two_threads_take_from_one_shared_receive_queue_each_receive_once() {
    let (dev_a, dev_b) = sharded(2);
    let (a, b) = (side(&dev_a), side(&dev_b));
    let srq = b.pd.create_srq(256, 1).unwrap();
    let cap = bench_cap();
    let mut qps = Vec::new();
    for _ in 0..4 {
        let qa = a.pd.create_qp(QpType::Rc, &a.cq, &a.cq, cap).unwrap();
        let qb =
            b.pd.create_qp_with_srq(QpType::Rc, &b.cq, &b.cq, &srq, cap)
                .unwrap();
        connect_qps(&qa, &qb, Mtu::M1024, |_| {}).unwrap();
        qps.push((qa, qb));
    }
    let shards: std::collections::HashSet<u32> =
        qps.iter().map(|(_, qb)| qb.qp_num() % 2).collect();
    assert_eq!(shards.len(), 2, "the receiving QPs are on both threads");
    let per_qp = 16;
    let total = per_qp * qps.len();
    for id in 0..total as u64 {
        srq.post_recv(&[RecvWr {
            wr_id: id,
            sg_list: &[b.mr.sge(id * 512, 512)],
        }])
        .unwrap();
    }
    for round in 0..per_qp {
        for (q, (qa, _)) in qps.iter().enumerate() {
            let at = ((round * qps.len() + q) * 64) as u64;
            let body = [q as u8 + 1; 64];
            a.region.write(at as usize, &body).unwrap();
            qa.post_send(&[SendWr {
                wr_id: at,
                op: SendOp::Send,
                sg_list: &[a.mr.sge(at, 64)],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
        }
    }
    completions(&a.cq, total);
    let got = completions(&b.cq, total);
    let mut taken: Vec<u64> = got.iter().map(|wc| wc.wr_id).collect();
    taken.sort_unstable();
    assert_eq!(
        taken,
        (0..total as u64).collect::<Vec<_>>(),
        "each receive once"
    );
    for (q, (_, qb)) in qps.iter().enumerate() {
        let mine: Vec<&Wc> = got.iter().filter(|wc| wc.qp_num == qb.qp_num()).collect();
        assert_eq!(mine.len(), per_qp, "QP {q}'s messages");
        // One QP's messages take receives in posting order.
        assert!(mine.windows(2).all(|w| w[0].wr_id < w[1].wr_id), "{mine:?}");
        for wc in mine {
            let at = wc.wr_id as usize * 512;
            assert_eq!(read(&b.region, at, 64), [q as u8 + 1; 64], "{wc:?}");
        }
    }
}

/// A completion queue of QPs on two threads overruns: every QP completing on it, whichever
/// thread it lives on, goes to the error state.
#[test]
fn an_overrun_takes_the_queues_qps_on_every_thread_to_error() {
    let (dev_a, dev_b) = sharded(2);
    let ctx = dev_a.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let small = ctx.create_cq(2).unwrap();
    let region = Arc::new(Region::anonymous(1 << 16).unwrap());
    let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
    let b = side(&dev_b);
    let cap = bench_cap();
    let qas: Vec<QueuePair> = (0..2)
        .map(|_| pd.create_qp(QpType::Rc, &small, &small, cap).unwrap())
        .collect();
    assert_ne!(
        qas[0].qp_num() % 2,
        qas[1].qp_num() % 2,
        "one QP per thread"
    );
    for qa in &qas {
        let qb = b.pd.create_qp(QpType::Rc, &b.cq, &b.cq, cap).unwrap();
        connect_qps(qa, &qb, Mtu::M1024, |_| {}).unwrap();
        // The peer QP outlives the test's use of it.
        std::mem::forget(qb);
    }
    // Only the first QP sends: five signalled WRITEs into a queue of two.
    for wr_id in 0..5 {
        qas[0]
            .post_send(&[SendWr {
                wr_id,
                op: SendOp::RdmaWrite {
                    remote_addr: b.mr.va,
                    rkey: b.mr.rkey,
                },
                sg_list: &[mr.sge(0, 8)],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
    }
    let deadline = Instant::now() + WAIT;
    for qa in &qas {
        while qa.query().unwrap().qp_state != Some(QpState::Err) {
            assert!(
                Instant::now() < deadline,
                "QP {:#x} never left {:?}",
                qa.qp_num(),
                qa.query().unwrap().qp_state
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert!(small.overran());
}

/// A peer keeps writing into memory whose QP lives on another thread than the port thread; the
/// host deregisters it. Once the deregistration is answered, nothing lands there any more: the
/// next WRITE fails with a remote access error, and the memory keeps what the host put there.
#[test]
fn once_a_deregistration_is_answered_no_thread_writes_into_the_memory() {
    let (dev_a, dev_b) = sharded(2);
    let a = side(&dev_a);
    let ctx = dev_b.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4096).unwrap();
    let region = Arc::new(Region::anonymous(1 << 16).unwrap());
    let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
    let cap = bench_cap();
    let qa = a.pd.create_qp(QpType::Rc, &a.cq, &a.cq, cap).unwrap();
    let qb = pd.create_qp(QpType::Rc, &cq, &cq, cap).unwrap();
    assert_ne!(qb.qp_num() % 2, 0, "the target QP is off the port thread");
    connect_qps(&qa, &qb, Mtu::M1024, |_| {}).unwrap();
    a.region.write(0, &[0xab; 4096]).unwrap();
    let (va, rkey) = (mr.va, mr.rkey);
    let failure = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut wc = [Wc::default(); 16];
            let mut outstanding = 0;
            let deadline = Instant::now() + WAIT;
            loop {
                assert!(Instant::now() < deadline, "the WRITEs never failed");
                while outstanding < 32 {
                    qa.post_send(&[SendWr {
                        wr_id: 0,
                        op: SendOp::RdmaWrite {
                            remote_addr: va,
                            rkey,
                        },
                        sg_list: &[a.mr.sge(0, 4096)],
                        flags: SendFlags::SIGNALED,
                        ud: None,
                    }])
                    .unwrap();
                    outstanding += 1;
                }
                let n = a.cq.wait(&mut wc, Some(Duration::from_millis(100)));
                outstanding -= n;
                if let Some(failed) = wc[..n].iter().find(|w| w.status != WcStatus::Success) {
                    return failed.status;
                }
            }
        });
        let deadline = Instant::now() + WAIT;
        while read(&region, 0, 1) != [0xab] {
            assert!(Instant::now() < deadline, "no WRITE landed");
            std::thread::yield_now();
        }
        drop(mr);
        region.write(0, &[0; 4096]).unwrap();
        writer.join().unwrap()
    });
    assert_eq!(failure, WcStatus::RemAccessErr);
    assert_eq!(
        read(&region, 0, 4096),
        [0; 4096],
        "written after the deregistration"
    );
}
