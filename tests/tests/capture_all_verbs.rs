//! A full scenario recorded by the NIC's own pcap tee: every verb over RC (single- and
//! multi-packet, with immediates and invalidate, READ, atomics, an RNR NAK, a remote access
//! error), UC and UD. Every frame must decode with a valid ICRC (ours, and scapy's), tshark must
//! see the same opcodes, every expected opcode must appear, and the recording must equal
//! `captures/all-verbs.pcap` frame for frame — where the tshark conformance test checks it field
//! by field. `ROCE_REGENERATE_CAPTURES=1` rewrites that file (refused under CI).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use roce_nic::link::mem;
use roce_nic::link::pcap::{PcapSink, PcapTee};
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_tests::oracle;
use roce_wire::{Frame, Kind, Opcode, Transport};

fn post(h: &Host, wr_id: u64, op: SendOp, sge: Sge) {
    h.qp.post_send(&[SendWr {
        wr_id,
        op,
        sg_list: &[sge],
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
}

fn done(h: &Host) -> Wc {
    h.next_completion(Duration::from_secs(10))
        .expect("completion")
}

fn rc_scenario(sink: &PcapSink) {
    let (la, lb) = mem::pair();
    let p = pair_over(
        PcapTee::new(la, sink.clone(), false),
        PcapTee::new(lb, sink.clone(), false),
        QpType::Rc,
        Mtu::M256,
        1 << 16,
        |_| {},
        |a| {
            // The longest RNR wait (code 0, 655 ms): the receives are posted as soon as B has
            // sent its RNR NAK, long before A retries, so the recording holds exactly one RNR
            // round whatever the machine's load.
            if a.min_rnr_timer.is_some() {
                a.min_rnr_timer = Some(0);
            }
        },
    )
    .unwrap();
    let (a, b) = (&p.a, &p.b);
    a.write(0, &pattern(1024, 1));
    let rkey = b.mr.rkey;
    let va = b.mr.va;
    // SEND with no receive posted: an RNR NAK, then the retry succeeds once one is posted.
    post(a, 1, SendOp::Send, a.mr.sge(0, 100));
    roce_tests::eventually("B answers the SEND with an RNR NAK", || {
        p.dev_b.counters().rnr_naks_sent >= 1
    });
    for i in 0..6 {
        b.qp.post_recv(&[RecvWr {
            wr_id: i,
            sg_list: &[b.mr.sge(8192, 1024)],
        }])
        .unwrap();
    }
    assert!(done(a).is_success());
    for (i, op) in [
        SendOp::Send,
        SendOp::SendWithImm { imm: 0x1234 },
        SendOp::SendWithInv { rkey: 0 },
    ]
    .into_iter()
    .enumerate()
    {
        // Multi-packet (FIRST, MIDDLE, LAST…) once the invalidate names a real key.
        let op = match op {
            SendOp::SendWithInv { .. } => {
                let extra = b.pd.register(&b.region, 0, 4096, all_access()).unwrap();
                let k = extra.rkey;
                std::mem::forget(extra);
                SendOp::SendWithInv { rkey: k }
            }
            op => op,
        };
        post(a, 10 + i as u64, op, a.mr.sge(0, 600));
        assert!(done(a).is_success());
    }
    post(a, 20, SendOp::SendWithImm { imm: 7 }, a.mr.sge(0, 50));
    assert!(done(a).is_success());
    b.qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &[],
    }])
    .unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 10,
        sg_list: &[],
    }])
    .unwrap();
    for (wr_id, op, len) in [
        (
            30,
            SendOp::RdmaWrite {
                remote_addr: va,
                rkey,
            },
            7,
        ),
        (
            31,
            SendOp::RdmaWrite {
                remote_addr: va,
                rkey,
            },
            700,
        ),
        (
            32,
            SendOp::RdmaWriteWithImm {
                remote_addr: va,
                rkey,
                imm: 1,
            },
            5,
        ),
        (
            33,
            SendOp::RdmaWriteWithImm {
                remote_addr: va,
                rkey,
                imm: 2,
            },
            700,
        ),
        (
            34,
            SendOp::RdmaRead {
                remote_addr: va,
                rkey,
            },
            9,
        ),
        (
            35,
            SendOp::RdmaRead {
                remote_addr: va,
                rkey,
            },
            900,
        ),
        (
            36,
            SendOp::AtomicCmpAndSwp {
                remote_addr: va + 1024,
                rkey,
                compare: 0,
                swap: 1,
            },
            8,
        ),
        (
            37,
            SendOp::AtomicFetchAndAdd {
                remote_addr: va + 1024,
                rkey,
                add: 3,
            },
            8,
        ),
    ] {
        post(a, wr_id, op, a.mr.sge(2048, len));
        let wc = done(a);
        assert!(wc.is_success(), "{wc:?}");
    }
    // A bad R_Key: NAK remote access error.
    post(
        a,
        40,
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey: rkey ^ 0x100,
        },
        a.mr.sge(0, 8),
    );
    assert_eq!(done(a).status, WcStatus::RemAccessErr);
}

fn uc_scenario(sink: &PcapSink) {
    let (la, lb) = mem::pair();
    let p = pair_over(
        PcapTee::new(la, sink.clone(), false),
        PcapTee::new(lb, sink.clone(), false),
        QpType::Uc,
        Mtu::M256,
        1 << 16,
        |_| {},
        |_| {},
    )
    .unwrap();
    let (a, b) = (&p.a, &p.b);
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &[b.mr.sge(0, 4096)],
    }])
    .unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: &[b.mr.sge(0, 4096)],
    }])
    .unwrap();
    post(a, 1, SendOp::Send, a.mr.sge(0, 600));
    post(
        a,
        2,
        SendOp::RdmaWriteWithImm {
            remote_addr: b.mr.va,
            rkey: b.mr.rkey,
            imm: 5,
        },
        a.mr.sge(0, 30),
    );
    post(
        a,
        3,
        SendOp::RdmaWrite {
            remote_addr: b.mr.va,
            rkey: b.mr.rkey,
        },
        a.mr.sge(0, 600),
    );
    for _ in 0..3 {
        assert!(done(a).is_success());
    }
    for _ in 0..2 {
        assert!(done(b).is_success());
    }
}

fn ud_scenario(sink: &PcapSink) {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(
        PcapTee::new(la, sink.clone(), false),
        PcapTee::new(lb, sink.clone(), false),
    )
    .unwrap();
    let hosts: Vec<Host> = [&dev_a, &dev_b]
        .iter()
        .map(|d| host(d, QpType::Ud, 1 << 16, bench_cap()).unwrap())
        .collect();
    for h in &hosts {
        h.qp.modify(&QpAttr::init_ud(0x42)).unwrap();
        h.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ..QpAttr::default()
        })
        .unwrap();
        h.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0),
            ..QpAttr::default()
        })
        .unwrap();
    }
    let (a, b) = (&hosts[0], &hosts[1]);
    let ah =
        a.pd.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    for (i, op) in [SendOp::Send, SendOp::SendWithImm { imm: 9 }]
        .into_iter()
        .enumerate()
    {
        b.qp.post_recv(&[RecvWr {
            wr_id: i as u64,
            sg_list: &[b.mr.sge(0, 1024)],
        }])
        .unwrap();
        let ud = Some(UdDest {
            ah: ah.handle(),
            remote_qpn: b.qp.qp_num(),
            remote_qkey: 0x42,
        });
        a.qp.post_send(&[SendWr {
            wr_id: 1,
            op,
            sg_list: &[a.mr.sge(0, 33)],
            flags: SendFlags::SIGNALED,
            ud,
        }])
        .unwrap();
        assert!(done(a).is_success());
        assert!(done(b).is_success());
    }
}

/// The frames of a capture, in order.
fn frames(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let mut reader = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
    let mut frames = Vec::new();
    while let Some(packet) = reader.next_packet() {
        frames.push(packet.unwrap().data.into_owned());
    }
    frames
}

/// Each frame's opcode, every frame parsed with a valid ICRC by our own code.
fn opcodes(path: &Path) -> Vec<u8> {
    let frames = frames(path);
    assert!(frames.len() > 50, "only {} frames", frames.len());
    frames
        .iter()
        .enumerate()
        .map(|(n, data)| {
            let frame =
                Frame::parse(data).unwrap_or_else(|e| panic!("frame {n} does not parse: {e}"));
            assert!(
                frame.icrc().is_ok(),
                "frame {n}: bad ICRC {:?}",
                frame.icrc()
            );
            frame.repr.bth.opcode.value()
        })
        .collect()
}

fn committed() -> PathBuf {
    roce_tests::captures_dir().join("all-verbs.pcap")
}

#[test]
fn every_verb_recorded_decodes_with_valid_icrcs() {
    let dir = tempfile_dir();
    let path = dir.join("all-verbs.pcap");
    {
        let sink = PcapSink::create(&path).unwrap();
        rc_scenario(&sink);
        uc_scenario(&sink);
        ud_scenario(&sink);
        sink.flush().unwrap();
    }
    let opcodes = opcodes(&path);
    let seen: BTreeSet<u8> = opcodes.iter().copied().collect();
    let rc = |k| Opcode::new(Transport::Rc, k).unwrap().value();
    let mut expected: BTreeSet<u8> = [
        Kind::SendFirst,
        Kind::SendMiddle,
        Kind::SendLast,
        Kind::SendLastImm,
        Kind::SendOnly,
        Kind::SendOnlyImm,
        Kind::SendLastInv,
        Kind::WriteFirst,
        Kind::WriteMiddle,
        Kind::WriteLast,
        Kind::WriteLastImm,
        Kind::WriteOnly,
        Kind::WriteOnlyImm,
        Kind::ReadRequest,
        Kind::ReadResponseFirst,
        Kind::ReadResponseMiddle,
        Kind::ReadResponseLast,
        Kind::ReadResponseOnly,
        Kind::Acknowledge,
        Kind::AtomicAcknowledge,
        Kind::CompareSwap,
        Kind::FetchAdd,
    ]
    .into_iter()
    .map(rc)
    .collect();
    for k in [
        Kind::SendFirst,
        Kind::SendMiddle,
        Kind::SendLast,
        Kind::WriteOnlyImm,
        Kind::WriteFirst,
        Kind::WriteLast,
    ] {
        expected.insert(Opcode::new(Transport::Uc, k).unwrap().value());
    }
    for k in [Kind::SendOnly, Kind::SendOnlyImm] {
        expected.insert(Opcode::new(Transport::Ud, k).unwrap().value());
    }
    let missing: Vec<_> = expected.difference(&seen).collect();
    assert!(missing.is_empty(), "opcodes never seen: {missing:x?}");

    // The recording is deterministic (every wait is for an event, not a time): it must be the
    // committed capture, frame for frame, which the tshark conformance test (roce-cli) checks
    // field by field. A change to what the NIC sends shows here first.
    if roce_tests::regenerate("ROCE_REGENERATE_CAPTURES") {
        std::fs::copy(&path, committed()).unwrap();
        eprintln!("wrote {}", committed().display());
    }
    let (fresh, golden) = (frames(&path), frames(&committed()));
    if let Some(n) = (0..fresh.len().max(golden.len())).find(|&n| fresh.get(n) != golden.get(n)) {
        panic!(
            "the NIC's frames differ from captures/all-verbs.pcap from frame {} on ({} frames now, \
             {} committed); if the change is intended, rerun with ROCE_REGENERATE_CAPTURES=1 and \
             let the tshark conformance test check the new capture",
            n + 1,
            fresh.len(),
            golden.len()
        );
    }
    from_outside(&path, &opcodes);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fresh recording as decoders that share no code with ours see it: tshark finds the same
/// opcode in every frame and none malformed, and scapy computes the same ICRC for each.
fn from_outside(path: &Path, opcodes: &[u8]) {
    if !oracle::tshark_available() || !oracle::scapy_available() {
        roce_tests::skip(
            "tshark or python3-scapy is missing; the fresh recording was not checked from outside",
        );
        return;
    }
    let theirs = oracle::tshark_opcodes(path);
    let ours: Vec<Option<u8>> = opcodes.iter().copied().map(Some).collect();
    assert_eq!(theirs, ours, "tshark's opcodes, frame by frame");
    let icrcs = oracle::scapy_icrcs(path);
    assert!(icrcs.wrong.is_empty(), "{}", icrcs.wrong.join("\n"));
    assert_eq!(
        (icrcs.by_scapy, icrcs.by_script),
        (opcodes.len(), 0),
        "every frame by scapy"
    );
}

#[test]
fn the_committed_all_verbs_capture_is_valid() {
    let path = committed();
    assert!(
        path.exists(),
        "captures/all-verbs.pcap is missing: run with ROCE_REGENERATE_CAPTURES=1"
    );
    opcodes(&path);
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
