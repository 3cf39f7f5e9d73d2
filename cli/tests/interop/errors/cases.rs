//! The cases, each both ways where rxe lets it happen: each asserts the requester's
//! completion status as it runs, and returns what happened and what must be on the wire.

use super::*;

pub(super) type CaseFn = fn(&mut Agent, &mut Ours) -> (String, Vec<OnWire>);

/// Every case: its name, whether rxe is the requester, and how it runs. Each returns what
/// happened (for the table) and what must be on the wire; it asserts the completions itself.
pub(super) const CASES: &[(&str, bool, CaseFn)] = &[
    ("bad rkey", false, we_write_with_a_bad_rkey),
    ("out of bounds", false, we_write_out_of_bounds),
    ("misaligned atomic", false, we_send_a_misaligned_atomic),
    ("READ over 2^31 bytes", false, we_cannot_read_over_2_gib),
    (
        "READ over 2^31 bytes, put on the cable",
        false,
        a_read_over_2_gib_reaches_rxe,
    ),
    (
        "RNR until the retries run out",
        false,
        we_send_with_no_receive_posted,
    ),
    ("silent responder", false, we_write_to_a_destroyed_qp),
    (
        "wrong Q_Key on UD",
        false,
        we_send_a_datagram_with_the_wrong_qkey,
    ),
    ("SEND with invalidate", false, we_send_with_invalidate),
    ("bad rkey", true, rxe_writes_with_a_bad_rkey),
    ("out of bounds", true, rxe_writes_out_of_bounds),
    ("misaligned atomic", true, rxe_refuses_a_misaligned_atomic),
    (
        "RNR until the retries run out",
        true,
        rxe_sends_with_no_receive_posted,
    ),
    ("silent responder", true, rxe_writes_to_a_destroyed_qp),
    (
        "wrong Q_Key on UD",
        true,
        rxe_sends_a_datagram_with_the_wrong_qkey,
    ),
    ("SEND with invalidate", true, rxe_sends_with_invalidate),
];

/// Our WRITE completes with `want`, and rxe's NAK with `code` answers it.
pub(super) fn we_provoke(
    agent: &mut Agent,
    ours: &mut Ours,
    op: impl Fn(&Remote) -> SendOp,
    want: WcStatus,
    code: NakCode,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let wc = ours.post_and_wait(&local, op(&remote), 64);
    assert_eq!(wc.status, want, "our completion");
    (
        format!("our completion: {}; rxe's NAK: {code}", wc.status),
        vec![OnWire::Nak {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            psn: local.psn,
            code,
        }],
    )
}

pub(super) fn we_write_with_a_bad_rkey(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let op = |r: &Remote| SendOp::RdmaWrite {
        remote_addr: r.va,
        rkey: r.rkey ^ 0x5a00,
    };
    we_provoke(
        agent,
        ours,
        op,
        WcStatus::RemAccessErr,
        NakCode::REMOTE_ACCESS_ERROR,
    )
}

pub(super) fn we_write_out_of_bounds(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    // 64 bytes from 32 before the end of the agent's buffer.
    let op = |r: &Remote| SendOp::RdmaWrite {
        remote_addr: r.va + AGENT_BUF - 32,
        rkey: r.rkey,
    };
    we_provoke(
        agent,
        ours,
        op,
        WcStatus::RemAccessErr,
        NakCode::REMOTE_ACCESS_ERROR,
    )
}

/// IBTA and rxe agree: a misaligned atomic is an invalid request (class C).
pub(super) fn we_send_a_misaligned_atomic(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let op = |r: &Remote| SendOp::AtomicFetchAndAdd {
        remote_addr: r.va + 4,
        rkey: r.rkey,
        add: 1,
    };
    we_provoke(
        agent,
        ours,
        op,
        WcStatus::RemInvReqErr,
        NakCode::INVALID_REQUEST,
    )
}

/// A message may be 2^31 bytes at most: our NIC refuses a longer READ when it fetches the
/// request (a local length error) and sends nothing, so rxe never sees one from us.
pub(super) fn we_cannot_read_over_2_gib(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    // Two SGEs over our whole buffer and one of 2^31: 2^31 + 8 KiB in all (never touched).
    let sge = [
        ours.mr.sge(0, OUR_BUF as u32),
        ours.mr.sge(0, OUR_BUF as u32),
        roce_nic::verbs::Sge {
            addr: ours.mr.va,
            length: 1 << 31,
            lkey: ours.mr.lkey,
        },
    ];
    let op = SendOp::RdmaRead {
        remote_addr: remote.va,
        rkey: remote.rkey,
    };
    ours.post(&local, op, &sge, None);
    let wc = ours.wait(&local);
    assert_eq!(wc.status, WcStatus::LocLenErr, "our completion");
    (
        format!("our completion: {} (nothing sent)", wc.status),
        vec![OnWire::Nothing {
            ours: local.qp.qp_num(),
            theirs: remote.qpn,
        }],
    )
}

/// The READ our NIC refuses to send, put on the cable by hand as our QP would have sent it
/// (RETH DMA length 2^31 + 4096 at the agent's buffer, its rkey): rxe (Linux 6.1) answers with
/// a remote-access-error NAK — its range check of the registration refuses it; newer kernels
/// check the DMA length against 2^31 first and answer invalid request. Our QP, which sent
/// nothing, takes the NAK all the same (counted in naks_received_remote_access).
pub(super) fn a_read_over_2_gib_reaches_rxe(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    use roce_wire::{reth, EthernetAddress, EthernetRepr, Extensions, FrameRepr, Ipv4Address};
    use roce_wire::{Kind, Opcode, Transport};
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let opcode = Opcode::new(Transport::Rc, Kind::ReadRequest).unwrap();
    let mut ext = Extensions::for_opcode(opcode);
    ext.reth = Some(reth::Repr {
        va: remote.va,
        r_key: remote.rkey,
        dma_len: (1 << 31) + 4096,
    });
    let mut bth = roce_wire::bth::Repr::new(opcode, remote.qpn, local.psn);
    bth.ack_req = true;
    let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().octets();
    let repr = FrameRepr {
        ethernet: Some(EthernetRepr {
            dst: EthernetAddress(GUEST_MAC),
            src: EthernetAddress(NIC_MAC),
            vlan: None,
        }),
        network: NetworkRepr::Ipv4 {
            src: Ipv4Address::from(ip(NIC_IP)),
            dst: Ipv4Address::from(ip(GUEST_IP)),
            dscp: 0,
            ecn: 0,
            ident: 1,
            ttl: 64,
            udp_src_port: 0xc000,
        },
        bth,
        ext,
        payload_len: 0,
    };
    let mut frame = [0u8; 128];
    let len = repr.emit(&mut frame, &[]).unwrap();
    let naks = ours.counter("naks_received_remote_access");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.send_to(&frame[..len], &ours.guest_end).unwrap();
    let deadline = Instant::now() + COMPLETION_WAIT;
    while ours.counter("naks_received_remote_access") == naks && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        ours.counter("naks_received_remote_access"),
        naks + 1,
        "our naks_received_remote_access"
    );
    (
        "rxe's NAK: remote access error".into(),
        vec![OnWire::Nak {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            psn: local.psn,
            code: NakCode::REMOTE_ACCESS_ERROR,
        }],
    )
}

/// rxe's QP has no receive posted: it answers each SEND with an RNR NAK, and our QP gives up
/// after RNR_RETRY retries, as the spec says (rxe would retry for ever only at 7). Our tail
/// probes may add SENDs (and so RNR NAKs) when the guest is slow to answer.
pub(super) fn we_send_with_no_receive_posted(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, RNR_RETRY);
    agent.connect(&local, 14, 7, 7);
    let wc = ours.post_and_wait(&local, SendOp::Send, 64);
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr, "our completion");
    (
        format!("our completion: {}", wc.status),
        vec![OnWire::RnrNaks {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            responder_qp: remote.qpn,
            count: usize::from(RNR_RETRY) + 1,
            probes: true,
        }],
    )
}

/// rxe's QP is destroyed after the connection is made: rxe drops what comes for it without a
/// word, and our QP gives up after RETRY_CNT retransmissions.
pub(super) fn we_write_to_a_destroyed_qp(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, TIMEOUT, RETRY_CNT, 7);
    agent.connect(&local, 14, 7, 7);
    agent.ok("destroy");
    let op = SendOp::RdmaWrite {
        remote_addr: remote.va,
        rkey: remote.rkey,
    };
    let wc = ours.post_and_wait(&local, op, 64);
    assert_eq!(wc.status, WcStatus::RetryExcErr, "our completion");
    (
        format!("our completion: {}", wc.status),
        vec![OnWire::Unanswered {
            from_guest: false,
            to_qp: remote.qpn,
            requester_qp: local.qp.qp_num(),
            psn: local.psn,
            count: usize::from(RETRY_CNT) + 1,
        }],
    )
}

/// A datagram with the wrong Q_Key, then one with the right Q_Key: rxe drops the first without
/// a word (UD has no NAK) and delivers the second, first.
pub(super) fn we_send_a_datagram_with_the_wrong_qkey(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(Some(QKEY));
    agent.ok("recv 2 1064");
    let local = ours.ud(0x3333_3333);
    let ah = ours
        .pd
        .create_ah(AddressVector::to(remote.gid, GID_INDEX))
        .expect("an address handle to the guest");
    for (qkey, fill) in [(WRONG_QKEY, 0xaa), (QKEY, 0xbb)] {
        ours.region.write(0, &[fill; 64]).unwrap();
        let ud = UdDest {
            ah: ah.handle(),
            remote_qpn: remote.qpn,
            remote_qkey: qkey,
        };
        ours.post(&local, SendOp::Send, &[ours.mr.sge(0, 64)], Some(ud));
        let wc = ours.wait(&local);
        assert_eq!(wc.status, WcStatus::Success, "our UD send");
    }
    let wc = agent
        .poll(COMPLETION_WAIT)
        .expect("rxe received the datagram with the right Q_Key");
    assert_eq!(
        (wc.status, wc.byte_len),
        (WcStatus::Success, 40 + 64),
        "rxe's completion"
    );
    let first = agent.peek(40, 4);
    assert_eq!(
        first, [0xbb; 4],
        "the first datagram rxe delivered is the one with the right Q_Key"
    );
    (
        "rxe delivered only the datagram with the right Q_Key".into(),
        vec![OnWire::QKeys {
            from_guest: false,
            to_qp: remote.qpn,
            qkeys: vec![WRONG_QKEY, QKEY],
        }],
    )
}

/// rxe's request completes with `want` at the agent, and our NAK with `code` answers it.
pub(super) fn rxe_provokes(
    agent: &mut Agent,
    ours: &mut Ours,
    request: impl Fn(&Ours) -> String,
    want: WcStatus,
    code: NakCode,
    counter: &str,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let before = ours.counter(counter);
    agent
        .post(&request(ours))
        .expect("the agent's request posted");
    let wc = agent
        .poll(COMPLETION_WAIT)
        .expect("a completion at the agent");
    assert_eq!(wc.status, want, "rxe's completion");
    assert_eq!(ours.counter(counter), before + 1, "our {counter}");
    (
        format!("rxe's completion: {}; our NAK: {code}", wc.status),
        vec![OnWire::Nak {
            from_guest: false,
            to_qp: remote.qpn,
            psn: remote.psn,
            code,
        }],
    )
}

pub(super) fn rxe_writes_with_a_bad_rkey(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let request = |o: &Ours| format!("write {:#x} {} 64", o.mr.rkey ^ 0x5a00, o.mr.va);
    rxe_provokes(
        agent,
        ours,
        request,
        WcStatus::RemAccessErr,
        NakCode::REMOTE_ACCESS_ERROR,
        "naks_sent_remote_access",
    )
}

pub(super) fn rxe_writes_out_of_bounds(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let request = |o: &Ours| {
        format!(
            "write {:#x} {} 64",
            o.mr.rkey,
            o.mr.va + OUR_BUF as u64 - 32
        )
    };
    rxe_provokes(
        agent,
        ours,
        request,
        WcStatus::RemAccessErr,
        NakCode::REMOTE_ACCESS_ERROR,
        "naks_sent_remote_access",
    )
}

/// rxe checks the alignment when the request is posted (rxe_verbs.c): ibv_post_send fails with
/// EINVAL and nothing goes on the wire, so rxe cannot make our NIC answer one.
pub(super) fn rxe_refuses_a_misaligned_atomic(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let posted = agent.post(&format!("faa {:#x} {} 8", ours.mr.rkey, ours.mr.va + 4));
    assert_eq!(
        posted,
        Err(libc::EINVAL),
        "rxe's ibv_post_send of a misaligned atomic"
    );
    (
        "rxe's ibv_post_send: EINVAL (nothing sent)".into(),
        vec![OnWire::Nothing {
            ours: local.qp.qp_num(),
            theirs: remote.qpn,
        }],
    )
}

/// Our QP has no receive posted: we answer each of rxe's SENDs with an RNR NAK carrying our
/// timer, and rxe gives up after RNR_RETRY retries.
pub(super) fn rxe_sends_with_no_receive_posted(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, RNR_RETRY);
    let before = ours.counter("rnr_naks_sent");
    agent.post("send 0 0 64").expect("the agent's SEND posted");
    let wc = agent
        .poll(COMPLETION_WAIT)
        .expect("a completion at the agent");
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr, "rxe's completion");
    let count = usize::from(RNR_RETRY) + 1;
    assert_eq!(
        ours.counter("rnr_naks_sent"),
        before + count as u64,
        "our rnr_naks_sent"
    );
    (
        format!("rxe's completion: {}", wc.status),
        vec![OnWire::RnrNaks {
            from_guest: false,
            to_qp: remote.qpn,
            responder_qp: local.qp.qp_num(),
            count,
            probes: false,
        }],
    )
}

/// Our QP is destroyed after the connection is made: our NIC drops what comes for it without a
/// word (counted in rx_unknown_qp), and rxe gives up after RETRY_CNT retransmissions.
pub(super) fn rxe_writes_to_a_destroyed_qp(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, TIMEOUT, RETRY_CNT, 7);
    let qpn = local.qp.qp_num();
    let (rkey, va) = (ours.mr.rkey, ours.mr.va);
    ours.destroy(local);
    let before = ours.counter("rx_unknown_qp");
    agent
        .post(&format!("write {rkey:#x} {va} 64"))
        .expect("the agent's WRITE posted");
    let wc = agent
        .poll(COMPLETION_WAIT)
        .expect("a completion at the agent");
    assert_eq!(wc.status, WcStatus::RetryExcErr, "rxe's completion");
    let count = usize::from(RETRY_CNT) + 1;
    let dropped = ours.counter("rx_unknown_qp") - before;
    assert!(
        dropped >= count as u64,
        "our rx_unknown_qp rose by {dropped}, not {count}"
    );
    (
        format!("rxe's completion: {}; we dropped {dropped}", wc.status),
        vec![OnWire::Unanswered {
            from_guest: true,
            to_qp: qpn,
            requester_qp: remote.qpn,
            psn: remote.psn,
            count,
        }],
    )
}

/// rxe sends a datagram with the wrong Q_Key, then one with the right Q_Key: we drop the first
/// (counted in rx_qkey_mismatch) and deliver the second, first.
pub(super) fn rxe_sends_a_datagram_with_the_wrong_qkey(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    agent.qp(Some(0x3333_3333));
    let local = ours.ud(QKEY);
    for _ in 0..2 {
        let wr = RecvWr {
            wr_id: 7,
            sg_list: &[ours.mr.sge(0, 1064)],
        };
        local.qp.post_recv(&[wr]).unwrap();
    }
    ours.region.write(0, &[0u8; 128]).unwrap();
    let before = ours.counter("rx_qkey_mismatch");
    for (qkey, fill) in [(WRONG_QKEY, 0xaa), (QKEY, 0xbb)] {
        agent
            .post(&format!(
                "ud {} {qkey:#x} {} {GID_INDEX} 64 {fill}",
                local.qp.qp_num(),
                local.gid.to_hex()
            ))
            .expect("the agent's datagram posted");
        let wc = agent
            .poll(COMPLETION_WAIT)
            .expect("the agent's send completed");
        assert_eq!(wc.status, WcStatus::Success, "rxe's UD send");
    }
    let wc = ours.wait(&local);
    assert_eq!(
        (wc.status, wc.byte_len),
        (WcStatus::Success, 40 + 64),
        "our receive"
    );
    let mut first = [0u8; 4];
    ours.region.read(40, &mut first).unwrap();
    assert_eq!(
        first, [0xbb; 4],
        "the first datagram we delivered is the one with the right Q_Key"
    );
    assert_eq!(
        ours.counter("rx_qkey_mismatch"),
        before + 1,
        "our rx_qkey_mismatch"
    );
    (
        "we delivered only the datagram with the right Q_Key".into(),
        vec![OnWire::QKeys {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            qkeys: vec![WRONG_QKEY, QKEY],
        }],
    )
}

/// A SEND asking rxe to invalidate the rkey of its buffer, an ordinary memory registration:
/// Linux 6.1 invalidates only fast-registered MRs, so its responder refuses — and, as its
/// "class J" error, completes the receive with a remote-invalid-request error and moves its QP
/// to the error state, but acknowledges the SEND with a plain ACK: our SEND completes
/// successfully, and the requester never learns. Our NIC, in rxe's place, answers with an
/// invalid-request NAK (see `rxe_sends_with_invalidate`). The test expects what rxe does
/// (docs/rxe-differences.md).
pub(super) fn we_send_with_invalidate(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    agent.ok("recv 1 64");
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let wc = ours.post_and_wait(&local, SendOp::SendWithInv { rkey: remote.rkey }, 64);
    let theirs = agent
        .poll(COMPLETION_WAIT)
        .expect("a receive completion at the agent");
    assert_eq!(
        (wc.status, theirs.status),
        (WcStatus::Success, WcStatus::RemInvReqErr),
        "our completion and rxe's"
    );
    (
        format!(
            "our completion: {}; rxe's receive: {}; rxe's answer: ACK",
            wc.status, theirs.status
        ),
        vec![OnWire::Answers {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            syndromes: vec![Syndrome::ack()],
        }],
    )
}

/// rxe's SEND asks us to invalidate an rkey that names no memory of ours: our receive completes
/// with a remote-invalid-request error and we answer with an invalid-request NAK, so that rxe's
/// SEND completes with a remote-invalid-request error too.
pub(super) fn rxe_sends_with_invalidate(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    let wr = RecvWr {
        wr_id: 9,
        sg_list: &[ours.mr.sge(0, 64)],
    };
    local.qp.post_recv(&[wr]).unwrap();
    agent.connect(&local, 14, 7, 7);
    let before = ours.counter("naks_sent_invalid_request");
    let unknown = ours.mr.rkey ^ 0x5a00;
    agent
        .post(&format!("sendinv {unknown:#x} 0 64"))
        .expect("the agent's SEND posted");
    let theirs = agent
        .poll(COMPLETION_WAIT)
        .expect("a completion at the agent");
    let wc = ours.wait(&local);
    assert_eq!(
        (wc.status, theirs.status),
        (WcStatus::RemInvReqErr, WcStatus::RemInvReqErr),
        "our receive's completion and rxe's SEND's"
    );
    assert_eq!(
        ours.counter("naks_sent_invalid_request"),
        before + 1,
        "our naks_sent_invalid_request"
    );
    (
        format!(
            "our receive: {}; rxe's completion: {}; our NAK: invalid request",
            wc.status, theirs.status
        ),
        vec![OnWire::Nak {
            from_guest: false,
            to_qp: remote.qpn,
            psn: remote.psn,
            code: NakCode::INVALID_REQUEST,
        }],
    )
}
