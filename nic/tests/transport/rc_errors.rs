//! Remote errors: each gets the NAK the IBTA prescribes, the requester the matching error
//! completion, its QP moves to the error state and later requests are flushed; the target's
//! memory is untouched and the counters record what happened.

use roce_hostmem::Access;
use roce_nic::testbed::*;
use roce_nic::verbs::*;

struct Case {
    name: &'static str,
    op: fn(&Pair) -> SendOp,
    status: WcStatus,
    nak_counter: fn(&roce_nic::counters::Snapshot) -> u64,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "bad rkey",
            op: |p| SendOp::RdmaWrite {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey ^ 0x100,
            },
            status: WcStatus::RemAccessErr,
            nak_counter: |c| c.naks_sent_remote_access,
        },
        Case {
            name: "stale rkey (key byte changed)",
            op: |p| SendOp::RdmaWrite {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey.wrapping_add(1),
            },
            status: WcStatus::RemAccessErr,
            nak_counter: |c| c.naks_sent_remote_access,
        },
        Case {
            name: "VA past the end",
            op: |p| SendOp::RdmaWrite {
                remote_addr: p.b.mr.va + p.b.mr.len - 8,
                rkey: p.b.mr.rkey,
            },
            status: WcStatus::RemAccessErr,
            nak_counter: |c| c.naks_sent_remote_access,
        },
        Case {
            name: "VA wrapping the address space",
            op: |p| SendOp::RdmaRead {
                remote_addr: u64::MAX - 4,
                rkey: p.b.mr.rkey,
            },
            status: WcStatus::RemAccessErr,
            nak_counter: |c| c.naks_sent_remote_access,
        },
        Case {
            name: "misaligned atomic",
            op: |p| SendOp::AtomicFetchAndAdd {
                remote_addr: p.b.mr.va + 4,
                rkey: p.b.mr.rkey,
                add: 1,
            },
            status: WcStatus::RemInvReqErr,
            nak_counter: |c| c.naks_sent_invalid_request,
        },
    ]
}

fn check_failure(p: &Pair, op: SendOp, status: WcStatus, name: &str) {
    p.a.write(0, &pattern(64, 1));
    let sge = [p.a.mr.sge(0, 16)];
    // The failing request, then one that would succeed: it must be flushed.
    p.a.qp
        .post_send(&[
            SendWr {
                wr_id: 1,
                op,
                sg_list: &sge,
                flags: SendFlags::SIGNALED,
                ud: None,
            },
            SendWr {
                wr_id: 2,
                op: SendOp::RdmaWrite {
                    remote_addr: p.b.mr.va + 4096,
                    rkey: p.b.mr.rkey,
                },
                sg_list: &sge,
                flags: SendFlags::empty_flags(),
                ud: None,
            },
        ])
        .unwrap();
    let wc = p.a.completion();
    assert_eq!((wc.wr_id, wc.status), (1, status), "{name}: {wc:?}");
    let wc = p.a.completion();
    assert_eq!(
        (wc.wr_id, wc.status),
        (2, WcStatus::WrFlushErr),
        "{name}: {wc:?}"
    );
    assert_eq!(
        p.a.qp.query().unwrap().qp_state,
        Some(QpState::Err),
        "{name}"
    );
    // Later posts are flushed too.
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 3,
            op: SendOp::Send,
            sg_list: &sge,
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    assert_eq!(p.a.completion().status, WcStatus::WrFlushErr, "{name}");
    // Nothing reached the target's memory.
    assert!(
        p.b.read(0, 1 << 16).iter().all(|b| *b == 0),
        "{name}: target memory changed"
    );
}

#[test]
fn each_remote_error_fails_the_request_and_the_qp() {
    for case in cases() {
        let p = pair(QpType::Rc, Mtu::M1024, 1 << 20).unwrap();
        let before = p.dev_b.counters();
        check_failure(&p, (case.op)(&p), case.status, case.name);
        let delta = p.dev_b.counters().since(&before);
        assert_eq!((case.nak_counter)(&delta), 1, "{}: NAK counter", case.name);
        let a = p.dev_a.counters();
        assert!(a.completion_errors >= 3, "{}: {a:?}", case.name);
    }
}

#[test]
fn missing_access_rights_are_refused() {
    // Registrations without the right; the QP allows everything.
    for (access, op_of) in [
        (
            Access::LOCAL_WRITE | Access::REMOTE_READ,
            (|va, rkey| SendOp::RdmaWrite {
                remote_addr: va,
                rkey,
            }) as fn(u64, u32) -> SendOp,
        ),
        (Access::LOCAL_WRITE | Access::REMOTE_WRITE, |va, rkey| {
            SendOp::RdmaRead {
                remote_addr: va,
                rkey,
            }
        }),
        (Access::LOCAL_WRITE | Access::REMOTE_WRITE, |va, rkey| {
            SendOp::AtomicFetchAndAdd {
                remote_addr: va,
                rkey,
                add: 1,
            }
        }),
    ] {
        let p = pair(QpType::Rc, Mtu::M1024, 1 << 20).unwrap();
        let limited = p.b.pd.register(&p.b.region, 0, 1 << 16, access).unwrap();
        check_failure(
            &p,
            op_of(limited.va, limited.rkey),
            WcStatus::RemAccessErr,
            &format!("{access}"),
        );
        assert_eq!(p.dev_b.counters().naks_sent_remote_access, 1);
    }
}

#[test]
fn a_qp_without_remote_write_refuses_writes_as_invalid_requests() {
    let p = pair(QpType::Rc, Mtu::M1024, 1 << 20).unwrap();
    // Move b's QP through a reset to connect it again with read-only remote access.
    p.b.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Reset),
            ..QpAttr::default()
        })
        .unwrap();
    p.b.qp.modify(&QpAttr::init(Access::REMOTE_READ)).unwrap();
    let av = AddressVector::to(Gid::from_ip(ip(1)), 1);
    p.b.qp
        .modify(&QpAttr::rtr(av, p.a.qp.qp_num(), 100, Mtu::M1024))
        .unwrap();
    p.b.qp.modify(&QpAttr::rts(100)).unwrap();
    check_failure(
        &p,
        SendOp::RdmaWrite {
            remote_addr: p.b.mr.va,
            rkey: p.b.mr.rkey,
        },
        WcStatus::RemInvReqErr,
        "QP access",
    );
}

#[test]
fn a_local_protection_error_fails_the_request() {
    let p = pair(QpType::Rc, Mtu::M1024, 1 << 20).unwrap();
    let bad = Sge {
        addr: p.a.mr.va,
        length: 16,
        lkey: p.a.mr.lkey ^ 0x100,
    };
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 5,
            op: SendOp::RdmaWrite {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[bad],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    let wc = p.a.completion();
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::LocProtErr));
    assert_eq!(p.a.qp.query().unwrap().qp_state, Some(QpState::Err));
}

#[test]
fn a_send_longer_than_the_receive_is_a_length_error_on_both_sides() {
    let p = pair(QpType::Rc, Mtu::M1024, 1 << 20).unwrap();
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &[p.b.mr.sge(0, 100)],
        }])
        .unwrap();
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sg_list: &[p.a.mr.sge(0, 3000)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    assert_eq!(p.a.completion().status, WcStatus::RemInvReqErr);
    let wc = p.b.completion();
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::LocLenErr));
}
