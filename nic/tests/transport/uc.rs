//! UC: SEND and RDMA WRITE without acknowledgements. A lost packet drops its whole message at the
//! responder — never a partial delivery — and the next messages still arrive.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::{mem, Link};
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::waker::Waker;
use roce_wire::Frame;

/// Drops the frames whose PSN is in the list, once each.
struct DropPsns<L: Link> {
    inner: L,
    psns: Arc<Mutex<Vec<u32>>>,
}

impl<L: Link> Link for DropPsns<L> {
    fn send(&mut self, frame: FrameBuf) -> std::io::Result<()> {
        if let Ok(f) = Frame::parse(&frame) {
            let mut psns = self.psns.lock().unwrap();
            if let Some(i) = psns.iter().position(|p| *p == f.repr.bth.psn) {
                psns.remove(i);
                return Ok(());
            }
        }
        self.inner.send(frame)
    }
    fn recv(&mut self) -> std::io::Result<Option<FrameBuf>> {
        self.inner.recv()
    }
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }
    fn describe(&self) -> String {
        "drops chosen PSNs".into()
    }
}

fn post(p: &Pair, wr_id: u64, op: SendOp, len: usize) {
    p.a.write(0, &pattern(len, wr_id as u8));
    p.a.qp
        .post_send(&[SendWr {
            wr_id,
            op,
            sg_list: &[p.a.mr.sge(0, len as u32)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    // UC completes a request once it is sent.
    let wc = p.a.completion();
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success));
}

#[test]
fn send_write_and_write_with_immediate() {
    let p = pair(QpType::Uc, Mtu::M1024, 1 << 20).unwrap();
    for (i, len) in [0usize, 1, 1023, 1024, 1025, 5000].into_iter().enumerate() {
        let i = i as u64;
        p.b.qp
            .post_recv(&[RecvWr {
                wr_id: i,
                sg_list: &[p.b.mr.sge(0, 8192)],
            }])
            .unwrap();
        post(&p, i, SendOp::Send, len);
        let wc = p.b.completion();
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len as usize),
            (i, WcStatus::Success, len)
        );
        assert_eq!(p.b.read(0, len), pattern(len, i as u8));

        post(
            &p,
            100 + i,
            SendOp::RdmaWrite {
                remote_addr: p.b.mr.va + 65536,
                rkey: p.b.mr.rkey,
            },
            len,
        );
        p.b.qp
            .post_recv(&[RecvWr {
                wr_id: 200 + i,
                sg_list: &[],
            }])
            .unwrap();
        post(
            &p,
            200 + i,
            SendOp::RdmaWriteWithImm {
                remote_addr: p.b.mr.va + 131072,
                rkey: p.b.mr.rkey,
                imm: 7,
            },
            len,
        );
        let wc = p.b.completion();
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.imm()),
            (200 + i, WcOpcode::RecvRdmaWithImm, Some(7))
        );
        assert_eq!(p.b.read(65536, len), pattern(len, 100 + i as u8));
        assert_eq!(p.b.read(131072, len), pattern(len, 200 + i as u8));
    }
    assert_eq!(p.dev_b.counters().acks_sent, 0, "UC never acknowledges");
}

#[test]
fn a_lost_packet_drops_the_whole_message_and_the_next_one_arrives() {
    let (la, lb) = mem::pair();
    let psns = Arc::new(Mutex::new(Vec::new()));
    let la = DropPsns {
        inner: la,
        psns: Arc::clone(&psns),
    };
    let p = pair_over(la, lb, QpType::Uc, Mtu::M1024, 1 << 20, |_| {}, |_| {}).unwrap();
    // Message 1 (PSN 100..104) loses its middle packet 102; message 2 (PSN 105..109) is whole.
    psns.lock().unwrap().push(102);
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &[p.b.mr.sge(0, 8192)],
        }])
        .unwrap();
    post(&p, 1, SendOp::Send, 5000);
    post(&p, 2, SendOp::Send, 5000);
    // The receive posted is used by message 2; message 1 left nothing behind.
    let wc = p.b.completion();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 5000)
    );
    assert_eq!(p.b.read(0, 5000), pattern(5000, 2), "message 2, whole");
    assert!(p.b.next_completion(Duration::from_millis(50)).is_none());
    assert_eq!(p.dev_b.counters().uc_messages_dropped, 1);

    // A WRITE with immediate that loses a packet raises no completion either.
    psns.lock().unwrap().push(111);
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 3,
            sg_list: &[],
        }])
        .unwrap();
    post(
        &p,
        3,
        SendOp::RdmaWriteWithImm {
            remote_addr: p.b.mr.va,
            rkey: p.b.mr.rkey,
            imm: 1,
        },
        3000,
    );
    post(
        &p,
        4,
        SendOp::RdmaWriteWithImm {
            remote_addr: p.b.mr.va + 8192,
            rkey: p.b.mr.rkey,
            imm: 2,
        },
        3000,
    );
    let wc = p.b.completion();
    assert_eq!(
        (wc.wr_id, wc.imm()),
        (3, Some(2)),
        "the receive is consumed by the whole message only"
    );
    assert_eq!(p.b.read(8192, 3000), pattern(3000, 4));
    assert_eq!(p.dev_b.counters().uc_messages_dropped, 2);
}

#[test]
fn uc_refuses_reads_and_atomics_at_post_time() {
    let p = pair(QpType::Uc, Mtu::M1024, 1 << 20).unwrap();
    let err =
        p.a.qp
            .post_send(&[SendWr {
                wr_id: 1,
                op: SendOp::RdmaRead {
                    remote_addr: p.b.mr.va,
                    rkey: p.b.mr.rkey,
                },
                sg_list: &[p.a.mr.sge(0, 8)],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap_err();
    assert!(err.to_string().contains("UC QP cannot post"), "{err}");
}
