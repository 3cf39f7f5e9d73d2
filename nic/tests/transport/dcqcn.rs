//! DCQCN through the engine: two NICs with DCQCN on, over an in-process cable whose one
//! direction marks every RoCE packet CE (a congested switch, reduced to its marking). The
//! receiver of the marked packets must answer with CNPs, and their sender must cut its rate and
//! pace what it sends — WRITE requests and READ responses alike — while the data still arrives
//! intact. Without DCQCN nothing is ECN-capable, so nothing is marked and no CNP goes.

use std::sync::Arc;

use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::dcqcn::Params;
use roce_nic::link::ecn::{self, Ecn};
use roce_nic::link::{mem, Link};
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::waker::Waker;

/// A link that marks CE every ECN-capable RoCE frame it sends.
struct Marking<L: Link> {
    inner: L,
}

impl<L: Link> Link for Marking<L> {
    fn send(&mut self, mut frame: FrameBuf) -> std::io::Result<()> {
        if ecn::is_rocev2(&frame) && ecn::ecn(&frame).is_some_and(Ecn::is_capable) {
            ecn::set_ecn(&mut frame, Ecn::Ce);
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
        "marking".into()
    }
}

/// NIC a's frames are marked on the way to b; b's to a only when `both`.
fn pair(dcqcn: bool, both: bool) -> Pair {
    let (la, lb) = mem::pair();
    let la = Marking { inner: la };
    let configure = |config: &mut roce_nic::DeviceConfig| {
        if dcqcn {
            // A 1 Gbit/s line, and no increase for the length of a test: once cut, a rate
            // stays cut, whenever the engines get to run; every packet is marked, so the
            // rate soon sits at the minimum: 200 Mbit/s keeps the test short.
            let mut params = Params::default().with_line_rate(1_000_000_000);
            params.set("rp_min_rate=200").unwrap();
            params.set("rp_time_reset=10000000").unwrap();
            params.set("rp_byte_reset=4294967295").unwrap();
            config.dcqcn = Some(params);
        }
    };
    let lb: Box<dyn Link> = if both {
        Box::new(Marking { inner: lb })
    } else {
        Box::new(lb)
    };
    pair_over(la, lb, QpType::Rc, Mtu::M1024, 1 << 20, configure, |_| {}).unwrap()
}

/// Posts `op` twice, one after the other. The first brings the CNPs: the receiver of its
/// marked packets sends them before it acknowledges or completes it, and they travel ahead of
/// the second's packets, so the second meets a rate already cut.
fn post_twice(p: &Pair, op: SendOp, len: usize) {
    post(p, op, len);
    post(p, op, len);
}

fn post(p: &Pair, op: SendOp, len: usize) {
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 1,
            op,
            sg_list: &[p.a.mr.sge(0, len as u32)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    let wc = p.a.completion();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success), "{wc:?}");
}

const LEN: usize = 512 * 1024;

#[test]
fn marked_writes_come_back_as_cnps_and_the_writer_paces() {
    let p = pair(true, false);
    p.a.write(0, &pattern(LEN, 3));
    let op = SendOp::RdmaWrite {
        remote_addr: p.b.mr.va,
        rkey: p.b.mr.rkey,
    };
    post_twice(&p, op, LEN);
    assert_eq!(p.b.read(0, LEN), pattern(LEN, 3));
    let (a, b) = (p.dev_a.counters(), p.dev_b.counters());
    // b saw the marks and answered with CNPs, at most one per marked packet…
    assert!(b.ecn_ce_received > 0, "{b:?}");
    assert!(b.cnps_sent > 0 && b.cnps_sent <= b.ecn_ce_received, "{b:?}");
    // …a took them, cut its rate and waited for its limiter.
    assert!(
        a.cnps_received > 0 && a.cnps_received <= b.cnps_sent,
        "{a:?}"
    );
    assert!(a.dcqcn_rate_cuts > 0 && a.dcqcn_throttled > 0, "{a:?}");
    assert_eq!(a.cnps_ignored, 0);
    // What b sent back was not marked: a sent no CNP.
    assert_eq!(a.cnps_sent, 0, "{a:?}");
}

#[test]
fn marked_read_responses_pace_the_responder() {
    // Both ways marked: a's READ requests and b's READ responses.
    let p = pair(true, true);
    p.b.write(0, &pattern(LEN, 5));
    let op = SendOp::RdmaRead {
        remote_addr: p.b.mr.va,
        rkey: p.b.mr.rkey,
    };
    post_twice(&p, op, LEN);
    assert_eq!(p.a.read(0, LEN), pattern(LEN, 5));
    let (a, b) = (p.dev_a.counters(), p.dev_b.counters());
    assert!(a.cnps_sent > 0, "{a:?}");
    assert!(b.cnps_received > 0 && b.dcqcn_rate_cuts > 0, "{b:?}");
    assert!(b.dcqcn_throttled > 0, "the READ responses waited: {b:?}");
}

#[test]
fn without_dcqcn_nothing_is_ect_so_nothing_is_marked_and_no_cnp_goes() {
    let p = pair(false, false);
    p.a.write(0, &pattern(LEN, 7));
    // Nothing is ECN-capable without DCQCN: nothing gets marked.
    let op = SendOp::RdmaWrite {
        remote_addr: p.b.mr.va,
        rkey: p.b.mr.rkey,
    };
    post(&p, op, LEN);
    let (a, b) = (p.dev_a.counters(), p.dev_b.counters());
    assert_eq!(b.ecn_ce_received, 0, "{b:?}");
    assert_eq!((b.cnps_sent, a.cnps_received, a.dcqcn_rate_cuts), (0, 0, 0));
}

/// UD: a's datagrams are marked on the way to b; b's notification point answers the QP that
/// sent them — the DETH's source QP, at the address they came from — and a's UD QP cuts its
/// rate and paces its sends, as a connected QP does.
#[test]
fn marked_datagrams_bring_cnps_to_the_sending_ud_qp_which_paces() {
    let (la, lb) = mem::pair();
    let configure = |config: &mut roce_nic::DeviceConfig| {
        let mut params = Params::default().with_line_rate(1_000_000_000);
        params.set("rp_min_rate=200").unwrap();
        params.set("rp_time_reset=10000000").unwrap();
        params.set("rp_byte_reset=4294967295").unwrap();
        config.dcqcn = Some(params);
    };
    let p = pair_over(
        Marking { inner: la },
        lb,
        QpType::Ud,
        Mtu::M1024,
        1 << 21,
        configure,
        |_| {},
    )
    .unwrap();
    let qkey = 0x2222;
    for host in [&p.a, &p.b] {
        host.qp.modify(&QpAttr::init_ud(qkey)).unwrap();
        host.qp
            .modify(&QpAttr {
                qp_state: Some(QpState::Rtr),
                ..QpAttr::default()
            })
            .unwrap();
    }
    p.a.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0),
            ..QpAttr::default()
        })
        .unwrap();
    const DATAGRAMS: u64 = 400;
    const SIZE: u32 = 1024;
    // Room for every datagram and its 40-byte GRH.
    for n in 0..DATAGRAMS {
        p.b.qp
            .post_recv(&[RecvWr {
                wr_id: n,
                sg_list: &[p.b.mr.sge(n * 1088, SIZE + 40)],
            }])
            .unwrap();
    }
    p.a.write(0, &pattern(SIZE as usize, 9));
    let ah =
        p.a.pd
            .create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    for n in 0..DATAGRAMS {
        p.a.qp
            .post_send(&[SendWr {
                wr_id: n,
                op: SendOp::Send,
                sg_list: &[p.a.mr.sge(0, SIZE)],
                flags: SendFlags::SIGNALED,
                ud: Some(UdDest {
                    ah: ah.handle(),
                    remote_qpn: p.b.qp.qp_num(),
                    remote_qkey: qkey,
                }),
            }])
            .unwrap();
        let wc = p.a.completion();
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    // Every datagram arrived intact (the mark is outside the ICRC).
    for n in 0..DATAGRAMS {
        let wc = p.b.completion();
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, SIZE + 40));
        assert_eq!(
            p.b.read(wc.wr_id as usize * 1088 + 40, SIZE as usize),
            pattern(SIZE as usize, 9),
            "datagram {n}"
        );
    }
    let (a, b) = (p.dev_a.counters(), p.dev_b.counters());
    // b saw the marks and sent CNPs, at most one per marked packet…
    assert!(b.ecn_ce_received > 0, "{b:?}");
    assert!(b.cnps_sent > 0 && b.cnps_sent <= b.ecn_ce_received, "{b:?}");
    // …addressed to a's UD QP: a's reaction point took every one (a CNP for another QP
    // number would count as ignored), cut the rate and held sends back.
    assert_eq!(a.cnps_ignored, 0, "{a:?}");
    assert!(
        a.cnps_received > 0 && a.cnps_received <= b.cnps_sent,
        "{a:?}"
    );
    assert!(a.dcqcn_rate_cuts > 0 && a.dcqcn_throttled > 0, "{a:?}");
    assert_eq!(a.cnps_sent, 0, "nothing b sent was marked: {a:?}");
}
