//! One-sided operations need no code on the target: its application thread stays parked for the
//! whole exchange, and finds the data in its memory when it wakes.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use roce_hostmem::Region;
use roce_nic::link::mem;
use roce_nic::testbed::*;
use roce_nic::verbs::*;

#[test]
fn write_read_and_atomics_complete_while_the_target_thread_is_parked() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let (to_initiator, from_target) = mpsc::channel();
    let (to_target, from_initiator) = mpsc::channel::<u32>();
    let dev_b = Arc::new(dev_b);

    let target = {
        let dev_b = Arc::clone(&dev_b);
        thread::spawn(move || {
            let ctx = dev_b.open().unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(16).unwrap();
            let qp = pd
                .create_qp(QpType::Rc, &cq, &cq, QpCap::default())
                .unwrap();
            let region = Arc::new(Region::anonymous(1 << 16).unwrap());
            region.write(4096, b"data the initiator will read").unwrap();
            region.write(8192, &40u64.to_ne_bytes()).unwrap();
            let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
            qp.modify(&QpAttr::init(all_access())).unwrap();
            to_initiator.send((qp.qp_num(), mr.va, mr.rkey)).unwrap();
            let peer_qpn = from_initiator.recv().unwrap();
            let av = AddressVector::to(Gid::from_ip(ip(1)), 1);
            qp.modify(&QpAttr::rtr(av, peer_qpn, 0, Mtu::M1024))
                .unwrap();
            qp.modify(&QpAttr::rts(0)).unwrap();
            to_initiator.send((0, 0, 0)).unwrap();
            // The application stops running. Only the NIC touches its memory from here on.
            let cpu_before = thread_cpu_time();
            thread::park();
            let cpu_after = thread_cpu_time();
            let written = {
                let mut b = vec![0; 30];
                region.read(0, &mut b).unwrap();
                b
            };
            let mut counter = [0u8; 8];
            region.read(8192, &mut counter).unwrap();
            (written, u64::from_ne_bytes(counter), cpu_after - cpu_before)
        })
    };

    let ctx = dev_a.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(QpType::Rc, &cq, &cq, QpCap::default())
        .unwrap();
    let region = Arc::new(Region::anonymous(1 << 16).unwrap());
    let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
    let (peer_qpn, va, rkey) = from_target.recv().unwrap();
    qp.modify(&QpAttr::init(all_access())).unwrap();
    qp.modify(&QpAttr::rtr(
        AddressVector::to(Gid::from_ip(ip(2)), 1),
        peer_qpn,
        0,
        Mtu::M1024,
    ))
    .unwrap();
    qp.modify(&QpAttr::rts(0)).unwrap();
    to_target.send(qp.qp_num()).unwrap();
    from_target.recv().unwrap();

    region.write(0, b"written while you were parked").unwrap();
    let wait = |wr_id: u64| {
        let mut wc = [Wc::default()];
        assert_eq!(
            cq.wait(&mut wc, Some(std::time::Duration::from_secs(10))),
            1
        );
        assert_eq!((wc[0].wr_id, wc[0].status), (wr_id, WcStatus::Success));
    };
    let post = |wr_id, op, sge: Sge| {
        qp.post_send(&[SendWr {
            wr_id,
            op,
            sg_list: &[sge],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    };
    post(
        1,
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        mr.sge(0, 29),
    );
    wait(1);
    post(
        2,
        SendOp::RdmaRead {
            remote_addr: va + 4096,
            rkey,
        },
        mr.sge(100, 28),
    );
    wait(2);
    post(
        3,
        SendOp::AtomicFetchAndAdd {
            remote_addr: va + 8192,
            rkey,
            add: 2,
        },
        mr.sge(200, 8),
    );
    wait(3);
    post(
        4,
        SendOp::AtomicCmpAndSwp {
            remote_addr: va + 8192,
            rkey,
            compare: 42,
            swap: 1000,
        },
        mr.sge(208, 8),
    );
    wait(4);

    let mut read = vec![0; 28];
    region.read(100, &mut read).unwrap();
    assert_eq!(read, b"data the initiator will read");
    let mut orig = [0u8; 16];
    region.read(200, &mut orig).unwrap();
    assert_eq!(&orig[..8], &40u64.to_ne_bytes());
    assert_eq!(&orig[8..], &42u64.to_ne_bytes());

    target.thread().unpark();
    let (written, counter, cpu) = target.join().unwrap();
    assert_eq!(&written[..29], b"written while you were parked");
    assert_eq!(counter, 1000);
    // The parked thread ran no code in between (a little scheduler accounting at most).
    assert!(
        cpu < std::time::Duration::from_millis(5),
        "target thread used {cpu:?}"
    );
}

/// CPU time the calling thread has used.
fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc_timespec();
    // SAFETY: a valid timespec out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn libc_timespec() -> libc::timespec {
    libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    }
}
