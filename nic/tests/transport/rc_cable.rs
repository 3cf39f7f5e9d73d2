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

/// A host that rewrites its buffer while the NIC sends it (IBTA leaves the data sent
/// undefined) still gets only well-formed frames on the cable: the sender copies each payload
/// into its frame and computes the ICRC over that copy, so no byte the kernel sends can differ
/// from the bytes the ICRC covers. The receiving NIC checks every ICRC and counts each bad one.
#[test]
fn a_buffer_rewritten_while_it_is_sent_leaves_only_frames_with_a_correct_icrc() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const LEN: usize = 1 << 20;
    const WRITES: u64 = 8;
    let (la, lb) = cable();
    let p = pair_over(la, lb, QpType::Rc, Mtu::M4096, 2 * LEN, |_| {}, |_| {}).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let scribbler = {
        let (region, stop) = (Arc::clone(&p.a.region), Arc::clone(&stop));
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut chunk = vec![0u8; 4096];
            let mut round = 0u64;
            // Bounded: until the writes are done, or 30 s, or a million chunks.
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && round < 1 << 20 {
                chunk.fill(round as u8);
                let at = (round as usize * 4096 + round as usize % 61) % (LEN - 4096);
                region.write(at, &chunk).unwrap();
                round += 1;
            }
            round
        })
    };
    for wr_id in 0..WRITES {
        p.a.qp
            .post_send(&[SendWr {
                wr_id,
                op: SendOp::RdmaWrite {
                    remote_addr: p.b.mr.va,
                    rkey: p.b.mr.rkey,
                },
                sg_list: &[p.a.mr.sge(0, LEN as u32)],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
        let wc = p.a.completion();
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{wc:?}");
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = scribbler.join().unwrap();
    assert!(rounds > 0, "the host never rewrote its buffer");
    let b = p.dev_b.counters();
    assert_eq!(b.rx_icrc_errors, 0, "{b:?}");
    assert!(b.rx_frames >= WRITES * 256, "{b:?}");
}
