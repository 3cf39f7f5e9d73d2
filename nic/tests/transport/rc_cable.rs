//! The RC data path over a UDP cable on loopback instead of the in-process pair: the frames
//! really leave the process as datagrams and come back.

use std::collections::VecDeque;
use std::io;
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};

use crate::common::*;
use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::cable::{CableAddrs, CableLink};
use roce_nic::link::mem::MemLink;
use roce_nic::link::Link;
use roce_nic::verbs::*;
use roce_nic::waker::Waker;

/// Two cable ends on loopback ports the kernel picked.
fn cable() -> (CableLink, CableLink) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    drop((a, b));
    let end = |local, remote| CableLink::open(CableAddrs { local, remote }).unwrap();
    (end(pa, pb), end(pb, pa))
}

/// Writes `data` from the start of A's region to the start of B's in one signalled RDMA WRITE,
/// and checks that it completed and every byte landed.
fn write_whole(p: &Pair, data: &[u8]) {
    p.a.write(0, data);
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
}

#[test]
fn a_4_mib_write_and_a_read_back_over_a_udp_cable() {
    let (la, lb) = cable();
    let p = pair_over(la, lb, QpType::Rc, Mtu::M4096, 8 << 20, |_| {}, |_| {}).unwrap();
    let data = pattern(4 << 20, 3);
    write_whole(&p, &data);

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

/// A link that, like the cable, holds what the engine sends until the end of its pass
/// ([`Link::flush_sends`]), and hands over the first `hold` frames that arrive only once all
/// of them are there (one receive batch, as a cable receiver that fell behind finds them).
/// Records, at each flush that sends anything, how many frames the engine had taken in.
struct BatchingLink {
    inner: MemLink,
    hold: usize,
    arrived: VecDeque<FrameBuf>,
    unsent: Vec<FrameBuf>,
    taken: usize,
    flushed_after: Arc<Mutex<Vec<usize>>>,
}

impl Link for BatchingLink {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        self.unsent.push(frame);
        Ok(())
    }

    fn flush_sends(&mut self) -> u64 {
        if !self.unsent.is_empty() {
            self.flushed_after.lock().unwrap().push(self.taken);
            for frame in self.unsent.drain(..) {
                let _ = self.inner.send(frame);
            }
        }
        0
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        while let Some(frame) = self.inner.recv()? {
            self.arrived.push_back(frame);
        }
        if self.arrived.len() < self.hold {
            return Ok(None);
        }
        self.hold = 0;
        let frame = self.arrived.pop_front();
        self.taken += frame.is_some() as usize;
        Ok(frame)
    }

    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }

    fn describe(&self) -> String {
        "a batching in-process cable".into()
    }
}

/// The responder's coalesced ACK in the middle of a receive batch leaves at once, not with the
/// batch's last frame: a WRITE of one whole window (64 packets) reaches the responder as one
/// batch, and the requester, whose window is full, can send again only when an ACK comes back.
/// Held to the end of the pass on a link that batches its sends (the cable), the half-window
/// ACK made the two engines take turns instead of working at once.
#[test]
fn the_mid_batch_ack_leaves_before_the_rest_of_the_batch_is_taken_in() {
    const PACKETS: usize = 64;
    let (la, lb) = roce_nic::link::mem::pair();
    let flushed_after = Arc::new(Mutex::new(Vec::new()));
    let lb = BatchingLink {
        inner: lb,
        hold: PACKETS,
        arrived: VecDeque::new(),
        unsent: Vec::new(),
        taken: 0,
        flushed_after: Arc::clone(&flushed_after),
    };
    // One engine thread, whatever `ROCE_TEST_THREADS` says: with QPs sharded over threads the
    // port thread takes the whole batch in and hands it on, so what the link counts as taken
    // says nothing of when the worker that owns the QP built its ACK.
    let one_thread = |c: &mut roce_nic::DeviceConfig| c.threads = 1;
    let p = pair_over(la, lb, QpType::Rc, Mtu::M4096, 1 << 20, one_thread, |_| {}).unwrap();
    // Connecting sent nothing over the data link: the first frames are the WRITE's.
    flushed_after.lock().unwrap().clear();
    let data = pattern(PACKETS * 4096, 5);
    write_whole(&p, &data);
    let flushes = flushed_after.lock().unwrap().clone();
    assert!(
        flushes.first().is_some_and(|&taken| taken < PACKETS),
        "the responder's first ACK left after {flushes:?} frames of a batch of {PACKETS}"
    );
}
