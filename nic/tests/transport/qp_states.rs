//! The QP state machine: RESET → INIT → RTR → RTS (and SQD, ERR) moved by `modify`, refusing
//! what libibverbs and the kernel refuse — impossible transitions, missing or unexpected
//! attributes, values out of range — each with an error that names the problem.

use std::time::Duration;

use roce_nic::qp::ModifyError;
use roce_nic::testbed::*;
use roce_nic::verbs::*;

fn modify_error(qp: &QueuePair, attr: QpAttr) -> ModifyError {
    match qp.modify(&attr) {
        Err(VerbsError::Modify(e)) => e,
        other => panic!("expected a refused modify, got {other:?}"),
    }
}

fn unconnected() -> (Pair, QueuePair) {
    let p = pair(QpType::Rc, Mtu::M1024, 1 << 16).unwrap();
    let qp =
        p.a.pd
            .create_qp(QpType::Rc, &p.a.cq, &p.a.cq, QpCap::default())
            .unwrap();
    (p, qp)
}

#[test]
fn impossible_transitions_are_refused() {
    let (_p, qp) = unconnected();
    let av = AddressVector::to(Gid::from_ip(ip(2)), 1);
    let e = modify_error(&qp, QpAttr::rtr(av, 0x11, 0, Mtu::M1024));
    assert_eq!(
        e,
        ModifyError::Transition {
            qp_type: QpType::Rc,
            from: QpState::Reset,
            to: QpState::Rtr
        }
    );
    assert_eq!(e.to_string(), "a RC QP cannot go from RESET to RTR");
    qp.modify(&QpAttr::init(all_access())).unwrap();
    let e = modify_error(&qp, QpAttr::rts(0));
    assert!(matches!(
        e,
        ModifyError::Transition {
            from: QpState::Init,
            to: QpState::Rts,
            ..
        }
    ));
}

#[test]
fn missing_and_unexpected_attributes_are_named() {
    let (_p, qp) = unconnected();
    let e = modify_error(
        &qp,
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            ..QpAttr::default()
        },
    );
    assert_eq!(
        e.to_string(),
        "going from RESET to INIT needs the attribute qp_access_flags"
    );
    let e = modify_error(
        &qp,
        QpAttr {
            sq_psn: Some(5),
            ..QpAttr::init(all_access())
        },
    );
    assert_eq!(
        e.to_string(),
        "the attribute sq_psn cannot be set going from RESET to INIT"
    );
    qp.modify(&QpAttr::init(all_access())).unwrap();
    let av = AddressVector::to(Gid::from_ip(ip(2)), 1);
    let e = modify_error(
        &qp,
        QpAttr {
            path_mtu: None,
            ..QpAttr::rtr(av, 0x11, 0, Mtu::M1024)
        },
    );
    assert_eq!(
        e.to_string(),
        "going from INIT to RTR needs the attribute path_mtu"
    );
}

#[test]
fn values_out_of_range_are_refused() {
    let (p, qp) = unconnected();
    qp.modify(&QpAttr::init(all_access())).unwrap();
    let av = AddressVector::to(Gid::from_ip(ip(2)), 1);
    let e = modify_error(&qp, QpAttr::rtr(av, 0x100_0000, 0, Mtu::M1024));
    assert_eq!(
        e,
        ModifyError::Value {
            attr: "dest_qp_num",
            value: 0x100_0000
        }
    );
    let e = modify_error(&qp, QpAttr::rtr(av, 0x11, 0x100_0000, Mtu::M1024));
    assert_eq!(
        e,
        ModifyError::Value {
            attr: "rq_psn",
            value: 0x100_0000
        }
    );
    let e = modify_error(
        &qp,
        QpAttr {
            max_dest_rd_atomic: Some(200),
            ..QpAttr::rtr(av, 0x11, 0, Mtu::M1024)
        },
    );
    assert_eq!(e.to_string(), "max_dest_rd_atomic = 200 is out of range");
    let bad_gid = AddressVector::to(Gid::from_ip(ip(2)), 9);
    let e = modify_error(&qp, QpAttr::rtr(bad_gid, 0x11, 0, Mtu::M1024));
    assert_eq!(e, ModifyError::NoGid(9));
    qp.modify(&QpAttr::rtr(av, p.b.qp.qp_num(), 0, Mtu::M1024))
        .unwrap();
    let e = modify_error(
        &qp,
        QpAttr {
            timeout: Some(32),
            ..QpAttr::rts(0)
        },
    );
    assert_eq!(e.to_string(), "timeout = 32 is out of range");
    let e = modify_error(
        &qp,
        QpAttr {
            retry_cnt: Some(8),
            ..QpAttr::rts(0)
        },
    );
    assert_eq!(e.to_string(), "retry_cnt = 8 is out of range");
    // Nothing changed by the refusals.
    assert_eq!(qp.query().unwrap().qp_state, Some(QpState::Rtr));
}

#[test]
fn query_reports_what_modify_set() {
    let p = pair(QpType::Rc, Mtu::M2048, 1 << 16).unwrap();
    let attr = p.a.qp.query().unwrap();
    assert_eq!(attr.qp_state, Some(QpState::Rts));
    assert_eq!(attr.path_mtu, Some(Mtu::M2048));
    assert_eq!(attr.dest_qp_num, Some(p.b.qp.qp_num()));
    assert_eq!((attr.sq_psn, attr.rq_psn), (Some(100), Some(100)));
    assert_eq!(
        (attr.timeout, attr.retry_cnt, attr.rnr_retry),
        (Some(14), Some(7), Some(7))
    );
    assert_eq!(attr.qp_access_flags, Some(all_access()));
    assert_eq!(attr.av.map(|av| av.dgid), Some(Gid::from_ip(ip(2))));
}

#[test]
fn sqd_pauses_and_err_flushes_then_reset_starts_over() {
    let p = pair(QpType::Rc, Mtu::M1024, 1 << 16).unwrap();
    p.a.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Sqd),
            ..QpAttr::default()
        })
        .unwrap();
    // In SQD nothing new is sent: the request waits until RTS again.
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::RdmaWrite {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[p.a.mr.sge(0, 8)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    assert!(p.a.next_completion(Duration::from_millis(50)).is_none());
    p.a.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            ..QpAttr::default()
        })
        .unwrap();
    assert!(p.a.completion().is_success());

    // ERR flushes posted receives.
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 7,
            sg_list: &[p.b.mr.sge(0, 64)],
        }])
        .unwrap();
    p.b.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Err),
            ..QpAttr::default()
        })
        .unwrap();
    let wc = p.b.completion();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (7, WcStatus::WrFlushErr, WcOpcode::Recv)
    );

    // RESET forgets everything; the QP can be brought up again.
    p.b.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Reset),
            ..QpAttr::default()
        })
        .unwrap();
    let attr = p.b.qp.query().unwrap();
    assert_eq!(attr.qp_state, Some(QpState::Reset));
    p.b.qp.modify(&QpAttr::init(all_access())).unwrap();
    let av = AddressVector::to(Gid::from_ip(ip(1)), 1);
    p.b.qp
        .modify(&QpAttr::rtr(av, p.a.qp.qp_num(), 200, Mtu::M1024))
        .unwrap();
    p.b.qp.modify(&QpAttr::rts(300)).unwrap();
    assert_eq!(p.b.qp.query().unwrap().qp_state, Some(QpState::Rts));
}
