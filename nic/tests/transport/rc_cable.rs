//! The RC data path over a UDP cable on loopback instead of the in-process pair: the frames
//! really leave the process as datagrams and come back.

use std::net::UdpSocket;

use crate::common::*;
use roce_nic::link::cable::{CableAddrs, CableLink};
use roce_nic::verbs::*;

/// Two cable ends on loopback ports the kernel picked.
fn cable() -> (CableLink, CableLink) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    drop((a, b));
    let end = |local, remote| CableLink::open(CableAddrs { local, remote }).unwrap();
    (end(pa, pb), end(pb, pa))
}

#[test]
fn a_4_mib_write_and_a_read_back_over_a_udp_cable() {
    let (la, lb) = cable();
    let p = pair_over(la, lb, QpType::Rc, Mtu::M4096, 8 << 20, |_| {}, |_| {}).unwrap();
    let data = pattern(4 << 20, 3);
    p.a.write(0, &data);
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::RdmaWrite {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[p.a.mr.sge(0, data.len() as u32)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    let wc = p.a.completion();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success), "{wc:?}");
    assert!(p.b.read(0, data.len()) == data, "written bytes differ");

    p.a.qp
        .post_send(&[SendWr {
            wr_id: 2,
            op: SendOp::RdmaRead {
                remote_addr: p.b.mr.va + 1000,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[p.a.mr.sge(5 << 20, 100_000)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    let wc = p.a.completion();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success), "{wc:?}");
    assert_eq!(p.a.read(5 << 20, 100_000), data[1000..101_000]);
    let counters = p.dev_a.counters();
    assert!(counters.tx_frames >= 1024, "{counters:?}");
}
