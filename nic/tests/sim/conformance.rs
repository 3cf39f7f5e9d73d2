//! Scripted-peer cases: the other end's packets written by hand, one rule each. Each names
//! the IBTA section (Vol. 1, chapter 9.7: 9.7.5.1 the responder, 9.7.5.2 the requester) or the
//! Soft-RoCE (rdma_rxe) function whose behaviour it pins down.

use std::time::Duration;

use roce_nic::transport::EventKind;
use roce_nic::verbs::{QpState, RecvWr, SendFlags, SendOp, SendWr, Sge, WcStatus};
use roce_wire::aeth::{NakCode, Syndrome};
use roce_wire::{atomic_eth, reth, Extensions, Kind};

use super::peer::{setup, Bench, Sent};

const PSN: u32 = 100;
const MTU: usize = 256;

fn kinds(sent: &[Sent]) -> Vec<(Kind, u32)> {
    sent.iter().map(|s| (s.kind, s.psn)).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// A signaled request of `op` over `len` bytes at `at` in the node's memory.
fn post(b: &mut Bench, wr_id: u64, op: SendOp, at: usize, len: usize) {
    let sge = Sge {
        addr: b.node.va(at),
        length: len as u32,
        lkey: b.node.mr.lkey,
    };
    b.post(&SendWr {
        wr_id,
        op,
        sg_list: &[sge],
        flags: SendFlags::SIGNALED,
        ud: None,
    });
}

/// An RDMA WRITE to the peer (whose memory is imaginary: the keys do not matter to us).
fn write(b: &mut Bench, wr_id: u64, len: usize) {
    let op = SendOp::RdmaWrite {
        remote_addr: 0x5000,
        rkey: 0x77,
    };
    post(b, wr_id, op, 0, len);
}

fn read(b: &mut Bench, wr_id: u64, at: usize, len: usize) {
    let op = SendOp::RdmaRead {
        remote_addr: 0x8000,
        rkey: 0x77,
    };
    post(b, wr_id, op, at, len);
}

fn reth(b: &Bench, at: usize, len: usize, rkey: Option<u32>) -> Extensions {
    Extensions {
        reth: Some(reth::Repr {
            va: b.node.va(at),
            r_key: rkey.unwrap_or(b.node.mr.rkey),
            dma_len: len as u32,
        }),
        ..Extensions::default()
    }
}

fn memory(b: &Bench, at: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    b.node.memory.read(at, &mut v).unwrap();
    v
}

fn statuses(b: &mut Bench) -> Vec<(u64, WcStatus)> {
    b.completions()
        .iter()
        .map(|wc| (wc.wr_id, wc.status))
        .collect()
}

/// IBTA 9.7.5.2 (requester): an acknowledgement for a PSN that was never sent — a ghost — is
/// dropped; it completes nothing. rxe: comp.c `check_psn` drops such a packet.
#[test]
fn a_ghost_ack_completes_nothing() {
    let mut b = Bench::new(setup());
    write(&mut b, 1, 100);
    assert_eq!(kinds(&b.sent()), [(Kind::WriteOnly, PSN)]);
    b.ack(PSN + 50, Syndrome::ack());
    assert!(b.completions().is_empty());
    assert_eq!(b.count(EventKind::StaleResponse), 1);
    b.ack(PSN, Syndrome::ack());
    assert_eq!(statuses(&mut b), [(1, WcStatus::Success)]);
}

/// IBTA 9.7.5.2 (requester): a READ response acknowledges every request before the READ
/// (an implied ACK), and one whose PSN is past the expected one means the responses between
/// were lost (an implied NAK): the requester asks again from the first missing one, for the
/// rest of the data only. rxe: comp.c `check_psn` returns `COMPST_ERROR_RETRY`.
#[test]
fn read_responses_imply_acks_and_naks() {
    let mut b = Bench::new(setup());
    write(&mut b, 1, 10);
    read(&mut b, 2, 4096, 3 * MTU);
    assert_eq!(
        kinds(&b.sent()),
        [(Kind::WriteOnly, PSN), (Kind::ReadRequest, PSN + 1)]
    );
    let data = pattern(3 * MTU, 9);
    let piece = |i: usize| &data[i * MTU..(i + 1) * MTU];
    b.deliver(
        Kind::ReadResponseFirst,
        PSN + 1,
        Extensions::default(),
        piece(0),
    );
    assert_eq!(statuses(&mut b), [(1, WcStatus::Success)], "implied ACK");
    b.deliver(
        Kind::ReadResponseLast,
        PSN + 3,
        Extensions::default(),
        piece(2),
    );
    assert_eq!(b.count(EventKind::GoBack), 1);
    let again = b.sent();
    assert_eq!(kinds(&again), [(Kind::ReadRequest, PSN + 2)]);
    let asked = again[0].ext.reth.unwrap();
    assert_eq!(
        (asked.va, asked.dma_len),
        (0x8000 + MTU as u64, 2 * MTU as u32)
    );
    b.deliver(
        Kind::ReadResponseMiddle,
        PSN + 2,
        Extensions::default(),
        piece(1),
    );
    b.deliver(
        Kind::ReadResponseLast,
        PSN + 3,
        Extensions::default(),
        piece(2),
    );
    assert_eq!(statuses(&mut b), [(2, WcStatus::Success)]);
    assert_eq!(memory(&b, 4096, 3 * MTU), data);
}

/// IBTA 9.7.5.2 (requester): an acknowledgement past an atomic whose answer never came says the
/// answer was lost, and the requester sends the atomic again — once: a second such
/// acknowledgement while the resent atomic is on its way sends nothing more, as a second
/// out-of-order READ response does not.
#[test]
fn a_lost_atomic_answer_is_asked_for_once_per_go_back() {
    let mut b = Bench::new(setup());
    let add = SendOp::AtomicFetchAndAdd {
        remote_addr: 0x5000,
        rkey: 0x77,
        add: 1,
    };
    post(&mut b, 1, add, 0, 8);
    write(&mut b, 2, 10);
    assert_eq!(
        kinds(&b.sent()),
        [(Kind::FetchAdd, PSN), (Kind::WriteOnly, PSN + 1)]
    );
    b.ack(PSN + 1, Syndrome::ack());
    assert_eq!(
        kinds(&b.sent()),
        [(Kind::FetchAdd, PSN), (Kind::WriteOnly, PSN + 1)]
    );
    b.ack(PSN + 1, Syndrome::ack());
    assert_eq!(
        kinds(&b.sent()),
        [],
        "the resent atomic is still on its way"
    );
    assert_eq!(b.count(EventKind::GoBack), 1);
    let answer = Extensions {
        aeth: Some(roce_wire::aeth::Repr {
            syndrome: Syndrome::ack(),
            msn: 0,
        }),
        atomic_ack_eth: Some(roce_wire::atomic_ack_eth::Repr { original: 41 }),
        ..Extensions::default()
    };
    b.deliver(Kind::AtomicAcknowledge, PSN, answer, &[]);
    b.ack(PSN + 1, Syndrome::ack());
    assert_eq!(
        statuses(&mut b),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(memory(&b, 0, 8), 41u64.to_ne_bytes());
}

/// IBTA 9.7.5.2 (requester): a PSN sequence error NAK for a packet in the middle of a message
/// acknowledges what came before it; the requester resends from the named packet, not from
/// the start of the message (go-back-N to that PSN). rxe: comp.c `do_complete`/`rxe_requester`
/// restart at the NAK's PSN.
#[test]
fn a_nak_mid_message_resends_from_the_named_packet() {
    let mut b = Bench::new(setup());
    b.node.memory.write(0, &pattern(4 * MTU, 3)).unwrap();
    write(&mut b, 1, 4 * MTU);
    let first = b.sent();
    assert_eq!(
        kinds(&first),
        [
            (Kind::WriteFirst, PSN),
            (Kind::WriteMiddle, PSN + 1),
            (Kind::WriteMiddle, PSN + 2),
            (Kind::WriteLast, PSN + 3)
        ]
    );
    b.ack(PSN + 2, Syndrome::Nak(NakCode::PSN_SEQUENCE_ERROR));
    let again = b.sent();
    assert_eq!(
        kinds(&again),
        [(Kind::WriteMiddle, PSN + 2), (Kind::WriteLast, PSN + 3)]
    );
    assert_eq!(again[0].payload, first[2].payload);
    assert_eq!(again[1].payload, first[3].payload);
    b.ack(PSN + 3, Syndrome::ack());
    assert_eq!(statuses(&mut b), [(1, WcStatus::Success)]);
}

/// IBTA 9.7.5.2 (requester): with no answer at all, a request is sent at most 1 + retry_cnt
/// times; then it completes with a transport retry counter exceeded error and the QP goes to
/// the error state. rxe: comp.c `COMPST_ERROR_RETRY` with `qp->comp.retry_cnt` spent.
#[test]
fn retries_run_out_against_a_silent_peer() {
    let mut b = Bench::new(setup());
    write(&mut b, 1, 10);
    post(&mut b, 2, SendOp::Send, 0, 10);
    let mut sends = b.sent().iter().filter(|s| s.psn == PSN).count();
    for _ in 0..20 {
        b.wait(Duration::from_millis(10));
        sends += b.sent().iter().filter(|s| s.psn == PSN).count();
    }
    assert_eq!(sends, 1 + 3, "the first try and retry_cnt = 3 retries");
    assert_eq!(
        statuses(&mut b),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(b.state(), QpState::Err);
}

/// IBTA 9.7.5.2.8: after an RNR NAK the requester waits the time the NAK names before it sends
/// again, and after rnr_retry RNR NAKs more the request fails with an RNR retry counter
/// exceeded error. rxe: comp.c `COMPST_RNR_RETRY`, `qp->comp.rnr_retry`.
#[test]
fn rnr_naks_are_waited_out_then_run_out() {
    let mut b = Bench::new(setup());
    post(&mut b, 1, SendOp::Send, 0, 10);
    assert_eq!(kinds(&b.sent()), [(Kind::SendOnly, PSN)]);
    // Timer code 5: 60 µs.
    let rnr = Syndrome::RnrNak { timer: 5 };
    for round in 0..3 {
        b.ack(PSN, rnr);
        b.wait(Duration::from_micros(50));
        assert!(
            b.sent().is_empty(),
            "round {round}: sent before the RNR timer ran out"
        );
        b.wait(Duration::from_micros(20));
        assert_eq!(kinds(&b.sent()), [(Kind::SendOnly, PSN)], "round {round}");
    }
    b.ack(PSN, rnr);
    assert_eq!(statuses(&mut b), [(1, WcStatus::RnrRetryExcErr)]);
    assert_eq!(b.state(), QpState::Err);
}

/// IBTA 9.7.5.1 (responder): a duplicate READ is executed again from memory — all of it, or
/// from the packet its PSN names — and a duplicate atomic is not executed again but answered
/// with the result saved the first time. rxe: resp.c `duplicate_request`.
#[test]
fn duplicate_reads_and_atomics_are_replayed_not_reexecuted() {
    let mut b = Bench::new(setup());
    let data = pattern(2 * MTU, 5);
    b.node.memory.write(1024, &data).unwrap();
    let ext = reth(&b, 1024, 2 * MTU, None);
    b.deliver(Kind::ReadRequest, PSN, ext, &[]);
    let first = b.sent();
    assert_eq!(
        kinds(&first),
        [
            (Kind::ReadResponseFirst, PSN),
            (Kind::ReadResponseLast, PSN + 1)
        ]
    );
    assert_eq!(
        [&first[0].payload[..], &first[1].payload[..]].concat(),
        data
    );
    // The whole READ again, then its second half only.
    b.deliver(Kind::ReadRequest, PSN, ext, &[]);
    assert_eq!(kinds(&b.sent()), kinds(&first));
    b.deliver(
        Kind::ReadRequest,
        PSN + 1,
        reth(&b, 1024 + MTU, MTU, None),
        &[],
    );
    let half = b.sent();
    assert_eq!(kinds(&half), [(Kind::ReadResponseLast, PSN + 1)]);
    assert_eq!(half[0].payload, data[MTU..]);

    let add = Extensions {
        atomic_eth: Some(atomic_eth::Repr {
            va: b.node.va(8192),
            r_key: b.node.mr.rkey,
            swap_add: 5,
            compare: 0,
        }),
        ..Extensions::default()
    };
    for _ in 0..2 {
        b.deliver(Kind::FetchAdd, PSN + 2, add, &[]);
        let answer = b.sent();
        assert_eq!(kinds(&answer), [(Kind::AtomicAcknowledge, PSN + 2)]);
        assert_eq!(answer[0].ext.atomic_ack_eth.unwrap().original, 0);
    }
    assert_eq!(memory(&b, 8192, 8), 5u64.to_ne_bytes(), "added once");
    assert_eq!(b.count(EventKind::AtomicReplayed), 1);
}

/// IBTA 9.7.5.1 (responder resources, max_dest_rd_atomic): a responder remembers only as many
/// READs and atomics as it has resources for; a duplicate of one it forgot is dropped
/// silently. rxe: resp.c `duplicate_request` — "Resource not found. Class D error. Drop the
/// request."
#[test]
fn a_duplicate_beyond_the_responder_resources_is_dropped() {
    let mut b = Bench::new(super::world::QpSetup {
        max_rd_atomic: 1,
        ..setup()
    });
    b.deliver(Kind::ReadRequest, PSN, reth(&b, 0, 16, None), &[]);
    b.deliver(Kind::ReadRequest, PSN + 1, reth(&b, 64, 16, None), &[]);
    assert_eq!(b.sent().len(), 2);
    b.deliver(Kind::ReadRequest, PSN, reth(&b, 0, 16, None), &[]);
    assert!(b.sent().is_empty(), "the older READ is forgotten");
    assert_eq!(b.count(EventKind::DuplicateReadUnknown), 1);
    b.deliver(Kind::ReadRequest, PSN + 1, reth(&b, 64, 16, None), &[]);
    assert_eq!(kinds(&b.sent()), [(Kind::ReadResponseOnly, PSN + 1)]);
    assert_eq!(b.state(), QpState::Rts);
}

/// IBTA 9.7.5.1 (responder): an R_Key that does not grant the access is a remote access
/// error: NAK, and the QP goes to the error state; at the requester that NAK completes the
/// request with a remote access error and fails the QP. rxe: resp.c `check_rkey` →
/// `RESPST_ERR_RKEY_VIOLATION`; comp.c `AETH_NAK_REM_ACC_ERR` → `IB_WC_REM_ACCESS_ERR`.
#[test]
fn an_rkey_violation_is_a_remote_access_error_both_ways() {
    let mut b = Bench::new(setup());
    let bad = reth(&b, 0, 16, Some(0xdead));
    b.deliver(Kind::WriteOnly, PSN, bad, &[1; 16]);
    let nak = b.sent();
    assert_eq!(kinds(&nak), [(Kind::Acknowledge, PSN)]);
    assert_eq!(
        nak[0].syndrome(),
        Some(Syndrome::Nak(NakCode::REMOTE_ACCESS_ERROR))
    );
    assert_eq!(b.state(), QpState::Err);
    assert_eq!(memory(&b, 0, 16), [0; 16]);

    let mut b = Bench::new(setup());
    write(&mut b, 1, 10);
    b.sent();
    b.ack(PSN, Syndrome::Nak(NakCode::REMOTE_ACCESS_ERROR));
    assert_eq!(statuses(&mut b), [(1, WcStatus::RemAccessErr)]);
    assert_eq!(b.state(), QpState::Err);
}

/// IBTA 9.7.5.1.2 (responder, opcode sequence): a MIDDLE or LAST packet with no message in
/// progress is an invalid request: NAK, QP to error. At the requester, a READ response of the
/// wrong shape is a bad response. rxe: resp.c `check_op_seq` → `RESPST_ERR_MISSING_OPCODE_FIRST`;
/// comp.c `check_ack` → `COMPST_ERROR` (`IB_WC_BAD_RESP_ERR`).
#[test]
fn unexpected_opcodes_are_refused() {
    let mut b = Bench::new(setup());
    b.deliver(Kind::WriteMiddle, PSN, Extensions::default(), &[0; MTU]);
    let nak = b.sent();
    assert_eq!(
        nak[0].syndrome(),
        Some(Syndrome::Nak(NakCode::INVALID_REQUEST))
    );
    assert_eq!(b.state(), QpState::Err);

    let mut b = Bench::new(setup());
    read(&mut b, 1, 0, 16);
    b.sent();
    b.deliver(
        Kind::ReadResponseMiddle,
        PSN,
        Extensions::default(),
        &[0; 16],
    );
    assert_eq!(statuses(&mut b), [(1, WcStatus::BadRespErr)]);
    assert_eq!(b.state(), QpState::Err);
}

/// IBTA 9.7.5.1 (responder, PSN check): a packet ahead of the expected PSN gets one PSN
/// sequence error NAK naming the expected PSN, and further packets of the gap get none; a
/// packet far behind is a duplicate: acknowledged again, never executed again. Both across
/// the 2^24 wrap. rxe: resp.c `check_psn` (`RESPST_ERR_PSN_OUT_OF_SEQ`, duplicates to
/// `duplicate_request`).
#[test]
fn psns_far_ahead_and_far_behind() {
    let start = 0xff_fffe;
    let mut b = Bench::new(super::world::QpSetup {
        rq_psn: start,
        ..setup()
    });
    let ahead = (start + 1000) & 0xff_ffff;
    b.deliver(Kind::WriteOnly, ahead, reth(&b, 0, 4, None), &[1; 4]);
    let nak = b.sent();
    assert_eq!(kinds(&nak), [(Kind::Acknowledge, start)]);
    assert_eq!(
        nak[0].syndrome(),
        Some(Syndrome::Nak(NakCode::PSN_SEQUENCE_ERROR))
    );
    b.deliver(
        Kind::WriteOnly,
        (ahead + 1) & 0xff_ffff,
        reth(&b, 0, 4, None),
        &[1; 4],
    );
    assert!(b.sent().is_empty(), "one NAK per gap");
    assert_eq!(memory(&b, 0, 4), [0; 4]);

    // In sequence across the wrap: 0xfffffe, 0xffffff, 0.
    for (i, psn) in [start, 0xff_ffff, 0].into_iter().enumerate() {
        b.deliver(Kind::WriteOnly, psn, reth(&b, 4 * i, 4, None), &[2; 4]);
        let ack = b.sent();
        assert_eq!(kinds(&ack), [(Kind::Acknowledge, psn)]);
    }
    assert_eq!(memory(&b, 0, 12), [2; 12]);

    // Far behind (half the PSN space back): not executed, acknowledged up to the last PSN.
    let behind = (1u32 << 24) - (1 << 22);
    b.deliver(Kind::WriteOnly, behind, reth(&b, 0, 4, None), &[3; 4]);
    let ack = b.sent();
    assert_eq!(kinds(&ack), [(Kind::Acknowledge, 0)]);
    assert_eq!(ack[0].syndrome(), Some(Syndrome::ack()));
    assert_eq!(
        memory(&b, 0, 4),
        [2; 4],
        "a duplicate is not executed again"
    );
    assert_eq!(b.state(), QpState::Rts);
}

/// IBTA 9.7.5.1 (responder, RNR): a WRITE with immediate that finds no receive posted gets an
/// RNR NAK and changes nothing, so the retry after the RNR wait succeeds. (Found by the
/// simulator: the refused WRITE_ONLY used to leave a WRITE open, its retry was refused as out
/// of sequence and the QP failed.) rxe: resp.c `check_resource` before `check_rkey`.
#[test]
fn a_write_with_immediate_refused_for_rnr_succeeds_when_retried() {
    let mut b = Bench::new(setup());
    let mut ext = reth(&b, 0, 8, None);
    ext.immdt = Some(roce_wire::immdt::Repr { imm: 7 });
    b.deliver(Kind::WriteOnlyImm, PSN, ext, &[4; 8]);
    let rnr = b.sent();
    assert!(matches!(rnr[0].syndrome(), Some(Syndrome::RnrNak { .. })));
    assert_eq!(memory(&b, 0, 8), [0; 8]);
    let sge = Sge {
        addr: b.node.va(512),
        length: 64,
        lkey: b.node.mr.lkey,
    };
    assert!(b.node.post_recv(&RecvWr {
        wr_id: 9,
        sg_list: &[sge],
    }));
    b.deliver(Kind::WriteOnlyImm, PSN, ext, &[4; 8]);
    let ack = b.sent();
    assert_eq!(ack[0].syndrome(), Some(Syndrome::ack()));
    assert_eq!(memory(&b, 0, 8), [4; 8]);
    let wc = std::mem::take(&mut b.node.recv_cqes);
    assert_eq!((wc[0].wr_id, wc[0].imm_data, wc[0].byte_len), (9, 7, 8));
    assert_eq!(b.state(), QpState::Rts);
}

/// IBTA 9.5 (ordering) and 9.7.5.1: the responder answers in PSN order — an atomic executed
/// after a READ is acknowledged only after the READ's responses, or the requester takes them
/// for lost and goes back. (Found by the simulator: the atomic ACK overtook queued READ
/// responses.) rxe finishes each READ's responses before it takes the next request.
#[test]
fn an_atomic_ack_waits_for_the_read_responses_before_it() {
    let mut b = Bench::new(setup());
    let read = reth(&b, 0, 3 * MTU, None);
    let add = Extensions {
        atomic_eth: Some(atomic_eth::Repr {
            va: b.node.va(8192),
            r_key: b.node.mr.rkey,
            swap_add: 1,
            compare: 0,
        }),
        ..Extensions::default()
    };
    // Both requests in one batch, as they arrive back to back.
    b.deliver_batch(&[
        (Kind::ReadRequest, PSN, read, &[][..]),
        (Kind::FetchAdd, PSN + 3, add, &[][..]),
    ]);
    assert_eq!(
        kinds(&b.sent()),
        [
            (Kind::ReadResponseFirst, PSN),
            (Kind::ReadResponseMiddle, PSN + 1),
            (Kind::ReadResponseLast, PSN + 2),
            (Kind::AtomicAcknowledge, PSN + 3)
        ]
    );
}

/// The same order for a duplicate READ: a READ retried from its middle while the first answer
/// is still queued is answered where that answer stood — before the atomic ACK behind it —
/// not at the end of the queue. (Found by `roce conform` on our own NIC under loss: the atomic
/// ACK left first, and the requester went back for the READ again.) rxe answers the original
/// READ in full, the atomic, then the retry: every answer in the order of its request.
#[test]
fn a_duplicate_read_is_answered_before_the_atomic_ack_behind_it() {
    let mut b = Bench::new(setup());
    let add = Extensions {
        atomic_eth: Some(atomic_eth::Repr {
            va: b.node.va(8192),
            r_key: b.node.mr.rkey,
            swap_add: 1,
            compare: 0,
        }),
        ..Extensions::default()
    };
    // The READ, the atomic after it, and the READ again from its last packet, arriving before
    // the first answer has left (the requester took a response for lost).
    b.deliver_batch(&[
        (Kind::ReadRequest, PSN, reth(&b, 0, 3 * MTU, None), &[][..]),
        (Kind::FetchAdd, PSN + 3, add, &[][..]),
        (
            Kind::ReadRequest,
            PSN + 2,
            reth(&b, 2 * MTU, MTU, None),
            &[][..],
        ),
    ]);
    let sent = kinds(&b.sent());
    let atomic = sent
        .iter()
        .position(|&k| k == (Kind::AtomicAcknowledge, PSN + 3))
        .expect("the atomic is acknowledged");
    assert!(
        sent[..atomic].contains(&(Kind::ReadResponseLast, PSN + 2)),
        "the READ's last response comes before the atomic ACK: {sent:?}"
    );
    assert!(
        sent[atomic..].iter().all(|&(_, p)| p == PSN + 3),
        "{sent:?}"
    );
    assert_eq!(b.count(EventKind::DuplicateReadReplayed), 1);
}

/// ACK coalescing has a bound: a batch of 40 single-packet WRITEs, each asking for an ACK, is
/// acknowledged after `ACK_EVERY` (32) packets as it is taken in, and once more at its end —
/// not once for the whole batch, which left the requester whose window the batch filled with
/// nothing to send until the batch was done.
#[test]
fn a_long_batch_is_acknowledged_every_32_packets_and_at_its_end() {
    use roce_nic::transport::responder::ACK_EVERY;
    assert_eq!(ACK_EVERY, 32);
    let mut b = Bench::new(setup());
    let payload = [7u8; 64];
    let packets: Vec<_> = (0..40u32)
        .map(|i| {
            (
                Kind::WriteOnly,
                PSN + i,
                reth(&b, 64 * i as usize, 64, None),
                &payload[..],
            )
        })
        .collect();
    b.deliver_batch(&packets);
    assert_eq!(
        kinds(&b.sent()),
        [(Kind::Acknowledge, PSN + 31), (Kind::Acknowledge, PSN + 39)]
    );
}
