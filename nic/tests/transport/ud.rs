//! UD: single-packet datagrams addressed through address handles, checked against the Q_Key,
//! delivered with the 40-byte GRH area first — or dropped whole. And QP1, the GSI.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::Region;
use roce_nic::link::faults::Faulty;
use roce_nic::link::mem;
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::Device;

const QKEY: u32 = 0x1111_2222;

struct UdHost {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    region: Arc<Region>,
    mr: MemoryRegion,
}

fn ud_host(dev: &Device, qkey: u32) -> UdHost {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = pd.create_qp(QpType::Ud, &cq, &cq, bench_cap()).unwrap();
    qp.modify(&QpAttr::init_ud(qkey)).unwrap();
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
    let region = Arc::new(Region::anonymous(1 << 16).unwrap());
    let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
    UdHost {
        ctx,
        pd,
        cq,
        qp,
        region,
        mr,
    }
}

fn wait(cq: &CompletionQueue, timeout: Duration) -> Option<Wc> {
    let mut wc = [Wc::default()];
    (cq.wait(&mut wc, Some(timeout)) == 1).then_some(wc[0])
}

fn send_to(from: &UdHost, ah: &AddressHandle, qpn: u32, qkey: u32, op: SendOp, data: &[u8]) {
    from.region.write(0, data).unwrap();
    from.qp
        .post_send(&[SendWr {
            wr_id: 1,
            op,
            sg_list: &[from.mr.sge(0, data.len() as u32)],
            flags: SendFlags::SIGNALED,
            ud: Some(UdDest {
                ah: ah.handle(),
                remote_qpn: qpn,
                remote_qkey: qkey,
            }),
        }])
        .unwrap();
    let wc = wait(&from.cq, Duration::from_secs(5)).unwrap();
    assert_eq!(wc.status, WcStatus::Success);
}

#[test]
fn datagrams_arrive_with_the_grh_area_first() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let a = ud_host(&dev_a, QKEY);
    let b = ud_host(&dev_b, QKEY);
    let ah =
        a.pd.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    for (n, op) in [SendOp::Send, SendOp::SendWithImm { imm: 0xabcd }]
        .into_iter()
        .enumerate()
    {
        b.qp.post_recv(&[RecvWr {
            wr_id: 10 + n as u64,
            sg_list: &[b.mr.sge(4096, 2048)],
        }])
        .unwrap();
        send_to(&a, &ah, b.qp.qp_num(), QKEY, op, b"a datagram");
        let wc = wait(&b.cq, Duration::from_secs(5)).unwrap();
        assert_eq!(
            (wc.status, wc.opcode, wc.byte_len),
            (WcStatus::Success, WcOpcode::Recv, 40 + 10)
        );
        assert_eq!(wc.src_qp, a.qp.qp_num());
        assert_ne!(wc.wc_flags & wc_flags::GRH, 0);
        assert_eq!(wc.imm(), (n == 1).then_some(0xabcd));
        let mut grh = [0u8; 50];
        b.region.read(4096, &mut grh).unwrap();
        // IPv4: 20 zero bytes, then the IPv4 header (source 10.0.0.1, destination 10.0.0.2).
        assert_eq!(grh[..20], [0; 20]);
        assert_eq!(grh[20] >> 4, 4);
        assert_eq!(
            Ipv4Addr::from(<[u8; 4]>::try_from(&grh[32..36]).unwrap()),
            Ipv4Addr::new(10, 0, 0, 1)
        );
        assert_eq!(
            Ipv4Addr::from(<[u8; 4]>::try_from(&grh[36..40]).unwrap()),
            Ipv4Addr::new(10, 0, 0, 2)
        );
        assert_eq!(&grh[40..], b"a datagram");
    }
    drop(ah);
    drop((a.ctx, b.ctx));
}

#[test]
fn a_wrong_q_key_drops_the_datagram() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let a = ud_host(&dev_a, QKEY);
    let b = ud_host(&dev_b, QKEY);
    let ah =
        a.pd.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &[b.mr.sge(0, 2048)],
    }])
    .unwrap();
    send_to(&a, &ah, b.qp.qp_num(), QKEY ^ 1, SendOp::Send, b"wrong key");
    roce_testkit::eventually("B drops the datagram for its Q_Key", || {
        dev_b.counters().rx_qkey_mismatch == 1
    });
    // A Q_Key with the high bit set means "use the sender QP's own Q_Key". Its datagram is the
    // first B completes: the one with the wrong key was not delivered before it.
    send_to(
        &a,
        &ah,
        b.qp.qp_num(),
        0x8000_0000,
        SendOp::Send,
        b"own key",
    );
    assert_eq!(
        wait(&b.cq, Duration::from_secs(5)).unwrap().byte_len,
        40 + 7
    );
}

#[test]
fn messages_larger_than_the_mtu_are_refused_at_post_time() {
    let (la, lb) = mem::pair();
    let (dev_a, _dev_b) = devices(la, lb).unwrap();
    let a = ud_host(&dev_a, QKEY);
    let ah =
        a.pd.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    let mtu = a.ctx.device().max_mtu.bytes();
    let err =
        a.qp.post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sg_list: &[a.mr.sge(0, mtu + 1)],
            flags: SendFlags::SIGNALED,
            ud: Some(UdDest {
                ah: ah.handle(),
                remote_qpn: 0x11,
                remote_qkey: QKEY,
            }),
        }])
        .unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
}

#[test]
fn under_loss_datagrams_arrive_whole_or_not_at_all() {
    let (la, lb) = mem::pair();
    let faulty = Faulty::new(la, "drop=0.2,corrupt=0.1,seed=5".parse().unwrap());
    let (dev_a, dev_b) = devices(faulty, lb).unwrap();
    let a = ud_host(&dev_a, QKEY);
    let b = ud_host(&dev_b, QKEY);
    let ah =
        a.pd.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    // 100 receives for the datagrams, 28 more for the markers below.
    for i in 0..128u64 {
        b.qp.post_recv(&[RecvWr {
            wr_id: i,
            sg_list: &[b.mr.sge(i * 512, 512)],
        }])
        .unwrap();
    }
    for i in 0..100u8 {
        send_to(&a, &ah, b.qp.qp_num(), QKEY, SendOp::Send, &pattern(300, i));
    }
    // Then markers, until one arrives: the link keeps its order, so every datagram that
    // survived completed before the first marker — no waiting for stragglers that may never
    // come. (Each marker is lost with the same odds; 28 in a row will not be.)
    let marker = pattern(300, 200);
    let (mut delivered, mut markers, mut through) = (0, 0, false);
    'markers: while markers < 28 {
        send_to(&a, &ah, b.qp.qp_num(), QKEY, SendOp::Send, &marker);
        markers += 1;
        while let Some(wc) = wait(&b.cq, Duration::from_millis(100)) {
            assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 340));
            let mut data = vec![0; 300];
            b.region
                .read(wc.wr_id as usize * 512 + 40, &mut data)
                .unwrap();
            if data == marker {
                through = true;
                break 'markers;
            }
            assert!(
                (0..100).any(|i| data == pattern(300, i)),
                "a datagram arrived damaged"
            );
            delivered += 1;
        }
    }
    assert!(through, "none of {markers} markers arrived");
    assert!(
        (50..95).contains(&delivered),
        "{delivered} of 100 delivered"
    );
}

#[test]
fn qp1_is_the_gsi_with_its_well_known_q_key() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let gsi = |dev: &Device| {
        let ctx = dev.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let qp = pd.open_gsi(&cq, &cq, bench_cap()).unwrap();
        assert_eq!(qp.qp_num(), 1);
        assert_eq!(qp.query().unwrap().qkey, Some(0x8001_0000));
        // One holder at a time.
        let again = pd.open_gsi(&cq, &cq, bench_cap());
        assert!(matches!(again, Err(VerbsError::Busy(_))));
        let region = Arc::new(Region::anonymous(4096).unwrap());
        let mr = pd.register(&region, 0, 4096, all_access()).unwrap();
        (ctx, pd, cq, qp, region, mr)
    };
    let a = gsi(&dev_a);
    let b = gsi(&dev_b);
    b.3.post_recv(&[RecvWr {
        wr_id: 5,
        sg_list: &[b.5.sge(0, 256)],
    }])
    .unwrap();
    a.4.write(0, b"MAD").unwrap();
    let ah =
        a.1.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    a.3.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: &[a.5.sge(0, 3)],
        flags: SendFlags::SIGNALED,
        ud: Some(UdDest {
            ah: ah.handle(),
            remote_qpn: 1,
            remote_qkey: 0x8001_0000,
        }),
    }])
    .unwrap();
    let wc = wait(&b.2, Duration::from_secs(5)).unwrap();
    assert_eq!((wc.wr_id, wc.src_qp, wc.byte_len), (5, 1, 43));
}
