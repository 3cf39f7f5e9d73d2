//! Every verb end to end over two in-process NICs, at every path MTU, and WRITE, READ and SEND
//! at the sizes where segmentation changes (0, 1, MTU-1, MTU, MTU+1, many packets, 1 and 16 MiB).

use roce_nic::testbed::*;
use roce_nic::verbs::*;

const REGION: usize = 80 << 20;
const MIB: usize = 1 << 20;

fn sizes(mtu: Mtu) -> Vec<usize> {
    let m = mtu.bytes() as usize;
    vec![0, 1, m - 1, m, m + 1, 3 * m + 17, MIB, 16 * MIB]
}

fn post(host: &Host, wr_id: u64, op: SendOp, sg: &[Sge], flags: SendFlags) {
    host.qp
        .post_send(&[SendWr {
            wr_id,
            op,
            sg_list: sg,
            flags,
            ud: None,
        }])
        .unwrap();
}

fn expect_ok(host: &Host, wr_id: u64, opcode: WcOpcode) -> Wc {
    let wc = host.completion();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::Success, opcode),
        "{wc:?}"
    );
    wc
}

/// Checks that `len` bytes at `at` in `host`'s region equal `data` and that the bytes around
/// them are untouched (zero).
fn landed_exactly(host: &Host, at: usize, data: &[u8]) {
    assert_eq!(host.read(at, data.len()), data, "data at {at}");
    if at > 0 {
        assert_eq!(host.read(at - 1, 1), [0], "byte before");
    }
    assert_eq!(host.read(at + data.len(), 1), [0], "byte after");
}

#[test]
fn write_read_send_at_every_mtu_and_size() {
    for mtu in Mtu::ALL {
        let p = pair(QpType::Rc, mtu, REGION).unwrap();
        let mut wr_id = 0;
        for len in sizes(mtu) {
            wr_id += 1;
            // WRITE from a's offset 0 to b's offset 8 MiB + 3 (unaligned on purpose).
            let data = pattern(len, wr_id as u8);
            p.a.write(0, &data);
            let dst = 17 * MIB + 3;
            post(
                &p.a,
                wr_id,
                SendOp::RdmaWrite {
                    remote_addr: p.b.mr.va + dst as u64,
                    rkey: p.b.mr.rkey,
                },
                &[p.a.mr.sge(0, len as u32)],
                SendFlags::SIGNALED,
            );
            expect_ok(&p.a, wr_id, WcOpcode::RdmaWrite);
            landed_exactly(&p.b, dst, &data);
            p.b.write(dst, &vec![0; len]);

            // READ it back from b's offset 16 MiB into a's offset 24 MiB.
            wr_id += 1;
            let src = 34 * MIB;
            let data = pattern(len, wr_id as u8);
            p.b.write(src, &data);
            let dst = 51 * MIB;
            post(
                &p.a,
                wr_id,
                SendOp::RdmaRead {
                    remote_addr: p.b.mr.va + src as u64,
                    rkey: p.b.mr.rkey,
                },
                &[p.a.mr.sge(dst as u64, len as u32)],
                SendFlags::SIGNALED,
            );
            let wc = expect_ok(&p.a, wr_id, WcOpcode::RdmaRead);
            assert_eq!(wc.byte_len as usize, len);
            landed_exactly(&p.a, dst, &data);
            p.a.write(dst, &vec![0; len]);

            // SEND into a posted receive at b's offset 32 MiB.
            wr_id += 1;
            let data = pattern(len, wr_id as u8);
            p.a.write(0, &data);
            let rdst = 60 * MIB;
            p.b.qp
                .post_recv(&[RecvWr {
                    wr_id: 1000 + wr_id,
                    sg_list: &[p.b.mr.sge(rdst as u64, len as u32 + 100)],
                }])
                .unwrap();
            post(
                &p.a,
                wr_id,
                SendOp::Send,
                &[p.a.mr.sge(0, len as u32)],
                SendFlags::SIGNALED,
            );
            expect_ok(&p.a, wr_id, WcOpcode::Send);
            let wc = expect_ok(&p.b, 1000 + wr_id, WcOpcode::Recv);
            assert_eq!(wc.byte_len as usize, len);
            assert_eq!(wc.imm(), None);
            landed_exactly(&p.b, rdst, &data);
            p.b.write(rdst, &vec![0; len]);
        }
    }
}

#[test]
fn immediates_and_scatter_gather() {
    for mtu in Mtu::ALL {
        immediates_and_scatter_gather_at(mtu);
    }
}

fn immediates_and_scatter_gather_at(mtu: Mtu) {
    let p = pair(QpType::Rc, mtu, 1 << 20).unwrap();
    // SEND with immediate, gathered from three pieces, scattered into two.
    p.a.write(0, b"hello, ");
    p.a.write(100, b"remote ");
    p.a.write(200, b"memory");
    let gather = [p.a.mr.sge(0, 7), p.a.mr.sge(100, 7), p.a.mr.sge(200, 6)];
    let scatter = [p.b.mr.sge(1000, 5), p.b.mr.sge(2000, 100)];
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 7,
            sg_list: &scatter,
        }])
        .unwrap();
    post(
        &p.a,
        1,
        SendOp::SendWithImm { imm: 0xdead_beef },
        &gather,
        SendFlags::SIGNALED,
    );
    expect_ok(&p.a, 1, WcOpcode::Send);
    let wc = expect_ok(&p.b, 7, WcOpcode::Recv);
    assert_eq!(wc.imm(), Some(0xdead_beef));
    assert_eq!(wc.byte_len, 20);
    assert_eq!(p.b.read(1000, 5), b"hello");
    assert_eq!(p.b.read(2000, 15), b", remote memory");

    // RDMA WRITE with immediate: data first, then the receive completes with the immediate.
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 8,
            sg_list: &[],
        }])
        .unwrap();
    post(
        &p.a,
        2,
        SendOp::RdmaWriteWithImm {
            remote_addr: p.b.mr.va + 5000,
            rkey: p.b.mr.rkey,
            imm: 77,
        },
        &[p.a.mr.sge(0, 7)],
        SendFlags::SIGNALED,
    );
    expect_ok(&p.a, 2, WcOpcode::RdmaWrite);
    let wc = expect_ok(&p.b, 8, WcOpcode::RecvRdmaWithImm);
    assert_eq!((wc.imm(), wc.byte_len), (Some(77), 7));
    assert_eq!(p.b.read(5000, 7), b"hello, ");
    // SEND with Invalidate: see wire_rules.rs (no plain registration may be invalidated).
}

#[test]
fn atomics_return_the_original_value() {
    for mtu in Mtu::ALL {
        atomics_return_the_original_value_at(mtu);
    }
}

fn atomics_return_the_original_value_at(mtu: Mtu) {
    let p = pair(QpType::Rc, mtu, 1 << 20).unwrap();
    p.b.write(64, &100u64.to_ne_bytes());
    post(
        &p.a,
        1,
        SendOp::AtomicFetchAndAdd {
            remote_addr: p.b.mr.va + 64,
            rkey: p.b.mr.rkey,
            add: 5,
        },
        &[p.a.mr.sge(8, 8)],
        SendFlags::SIGNALED,
    );
    expect_ok(&p.a, 1, WcOpcode::FetchAdd);
    assert_eq!(p.a.read(8, 8), 100u64.to_ne_bytes());
    assert_eq!(p.b.read(64, 8), 105u64.to_ne_bytes());
    // Compare-and-swap that fails, then one that succeeds.
    post(
        &p.a,
        2,
        SendOp::AtomicCmpAndSwp {
            remote_addr: p.b.mr.va + 64,
            rkey: p.b.mr.rkey,
            compare: 1,
            swap: 7,
        },
        &[p.a.mr.sge(16, 8)],
        SendFlags::SIGNALED,
    );
    expect_ok(&p.a, 2, WcOpcode::CompSwap);
    assert_eq!(p.a.read(16, 8), 105u64.to_ne_bytes());
    assert_eq!(p.b.read(64, 8), 105u64.to_ne_bytes());
    post(
        &p.a,
        3,
        SendOp::AtomicCmpAndSwp {
            remote_addr: p.b.mr.va + 64,
            rkey: p.b.mr.rkey,
            compare: 105,
            swap: 7,
        },
        &[p.a.mr.sge(24, 8)],
        SendFlags::SIGNALED,
    );
    expect_ok(&p.a, 3, WcOpcode::CompSwap);
    assert_eq!(p.a.read(24, 8), 105u64.to_ne_bytes());
    assert_eq!(p.b.read(64, 8), 7u64.to_ne_bytes());
}

#[test]
fn inline_and_unsignaled_requests() {
    for mtu in Mtu::ALL {
        inline_and_unsignaled_requests_at(mtu);
    }
}

fn inline_and_unsignaled_requests_at(mtu: Mtu) {
    let p = pair(QpType::Rc, mtu, 1 << 20).unwrap();
    p.a.write(0, b"inline bytes");
    // Ten unsignaled writes, then a signaled one: one completion, all data there.
    for i in 0..10u64 {
        post(
            &p.a,
            i,
            SendOp::RdmaWrite {
                remote_addr: p.b.mr.va + 100 * i,
                rkey: p.b.mr.rkey,
            },
            &[p.a.mr.sge(0, 12)],
            SendFlags::INLINE,
        );
    }
    // Inline data is copied at post time: changing the buffer afterwards changes nothing.
    p.a.write(0, b"INLINE BYTES");
    post(
        &p.a,
        10,
        SendOp::RdmaWrite {
            remote_addr: p.b.mr.va + 1000,
            rkey: p.b.mr.rkey,
        },
        &[p.a.mr.sge(0, 12)],
        SendFlags::SIGNALED,
    );
    expect_ok(&p.a, 10, WcOpcode::RdmaWrite);
    for i in 0..10 {
        assert_eq!(p.b.read(100 * i, 12), b"inline bytes");
    }
    assert_eq!(p.b.read(1000, 12), b"INLINE BYTES");
    let mut wc = [Wc::default(); 4];
    assert_eq!(
        p.a.cq.poll(&mut wc),
        0,
        "unsignaled requests must not complete"
    );
}
