//! `roce conform` (`roce_tools::conform`) on real and built conversations:
//!
//! - every capture the project holds of real traffic (Soft-RoCE's, the RDMA CM's, our NIC's
//!   own recording of every verb, and the third-party captures beside the workspace) follows the
//!   rules; the opcode galleries, whose packets are unrelated samples, break only the payload
//!   rules, as they must;
//! - for each rule a conversation built by scapy (`tests/scapy_conform.py`) that breaks exactly
//!   that rule is caught, with the right frames, and one that bends it legally is not;
//! - our NIC's own captures under loss and reordering (the fault injector, as `roce nic
//!   --faults`) are judged conformant from both ends.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use roce_nic::link::faults::Faulty;
use roce_nic::link::mem;
use roce_nic::link::pcap::{PcapSink, PcapTee};
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_tests::{captures_dir, captures_under, shared_captures_dir, skip, workspace};
use roce_tools::conform::{self, Options, Report, Rule};
use roce_wire::capture;
use serde_json::Value;

fn judge(path: &Path) -> Report {
    judge_with(path, Options::default())
}

fn judge_with(path: &Path, options: Options) -> Report {
    let reader = capture::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    conform::check_with(reader, options).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn violations(report: &Report) -> Vec<(Rule, Vec<u64>)> {
    report
        .violations
        .iter()
        .map(|v| (v.rule, v.frames.clone()))
        .collect()
}

/// The captures of unrelated sample packets, one per opcode, made for the decoder: their
/// FIRST and MIDDLE packets carry a few bytes, not a path MTU, and their WRITEs no matching
/// DMA length.
fn is_gallery(name: &str) -> bool {
    name.starts_with("every-opcode")
        || name.starts_with("linux-cooked")
        || name == "two-interfaces.pcapng"
}

#[test]
fn every_capture_of_real_traffic_follows_the_rules() {
    let files = captures_under(&captures_dir());
    assert!(files.len() >= 25, "{files:?}");
    let mut judged = 0;
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let report = judge(path);
        assert_eq!((report.malformed, report.bad_icrc), (0, 0), "{name}");
        if is_gallery(&name) {
            let rules: BTreeSet<Rule> = report.violations.iter().map(|v| v.rule).collect();
            assert!(
                !rules.is_empty() && rules.is_subset(&[Rule::PathMtu, Rule::WriteLength].into()),
                "{name}: {rules:?}"
            );
            continue;
        }
        assert!(
            report.violations.is_empty(),
            "{name}: {:#?}",
            report.violations
        );
        assert!(!report.conversations.is_empty(), "{name}");
        judged += 1;
    }
    assert!(judged >= 20);
}

#[test]
fn the_all_verbs_recording_is_told_conversation_by_conversation() {
    let report = judge(&captures_dir().join("all-verbs.pcap"));
    let kinds: Vec<&str> = report.conversations.iter().map(|c| c.transport).collect();
    // The RC QP that a remote access error ended, the new RC QP under the same number (its
    // SEND with Invalidate refused), then UC and UD.
    assert_eq!(kinds, ["RC", "RC", "UC", "UD"]);
    let first = &report.conversations[0].directions[0];
    assert_eq!(
        (
            first.rnr_naks,
            first.rnr_waits,
            first.naks_remote_access,
            first.retransmitted
        ),
        (1, 1, 1, 1)
    );
    assert_eq!((first.read_responses, first.atomic_acks), (5, 2));
    assert_eq!(report.conversations[0].path_mtu, Some(256));
    assert_eq!(
        report.conversations[1].directions[0].naks_invalid_request,
        1
    );
    assert!(report.missing.is_empty());
}

#[test]
fn connections_the_cm_made_are_paired_by_its_messages() {
    let report = judge(&captures_dir().join("softroce/two-guests/rdma_cm.pcap"));
    let by_cm: Vec<_> = report.conversations.iter().filter(|c| c.via_cm).collect();
    assert_eq!(by_cm.len(), 3, "{:#?}", report.conversations);
    for c in by_cm {
        assert_eq!(
            (c.transport, c.path_mtu, c.mtu_source),
            ("RC", Some(1024), Some("CM"))
        );
        assert!(c.ends.iter().all(|e| e.qpn.is_some()));
    }
    assert!(report.violations.is_empty() && report.missing.is_empty());
}

#[test]
fn real_third_party_captures_follow_the_rules() {
    let files = captures_under(&shared_captures_dir());
    if files.is_empty() {
        skip("no captures in ../shared/captures; the third-party conformance check did not run");
        return;
    }
    for path in &files {
        let report = judge(path);
        assert!(
            report.violations.is_empty(),
            "{}: {:#?}",
            path.display(),
            report.violations
        );
    }
}

/// Debian's interpreter, which has `python3-scapy`.
const PYTHON: &str = "/usr/bin/python3";

#[test]
fn each_rule_broken_by_a_scapy_capture_is_caught_and_a_legal_bend_is_not() {
    if !Command::new(PYTHON)
        .args(["-c", "import scapy.contrib.roce"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip("python3-scapy is not installed; the conformance cases were not built");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = workspace().join("tests/scapy_conform.py");
    let output = Command::new(PYTHON)
        .arg(&script)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let cases: Vec<Value> =
        serde_json::from_slice(&std::fs::read(dir.path().join("cases.json")).unwrap()).unwrap();
    let mut broken = BTreeSet::new();
    let mut bends = 0;
    for case in &cases {
        let file = case["file"].as_str().unwrap();
        let report = judge(&dir.path().join(file));
        assert_eq!((report.malformed, report.bad_icrc), (0, 0), "{file}");
        match case["rule"].as_str() {
            Some(id) => {
                let rule = Rule::from_id(id).unwrap_or_else(|| panic!("{file}: rule {id}"));
                let frames: Vec<u64> = case["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_u64().unwrap())
                    .collect();
                assert_eq!(violations(&report), [(rule, frames)], "{file}");
                broken.insert(rule);
            }
            None => {
                assert_eq!(violations(&report), [], "{file}");
                bends += 1;
            }
        }
        let counts = |n: usize| report.conversations[n].directions[0];
        match file {
            // A loss and a late packet are told apart from protocol errors.
            "opcode-sequence-bend.pcap" => assert_eq!(counts(0).missing, 1),
            "reordered-bend.pcap" => assert_eq!((counts(0).missing, counts(0).reordered), (0, 1)),
            "starting-psn-missing-bend.pcap" => {
                assert_eq!(report.missing.len(), 1);
                assert_eq!(
                    (report.missing[0].from_psn, report.missing[0].count),
                    (0x500, 2)
                );
            }
            "timeout-resend-bend.pcap" => assert_eq!(counts(0).retransmitted, 1),
            // Congestion is reported per conversation: the CNP to A's QP, the CE marks on the
            // requests.
            "cnp-ecn-bend.pcap" => {
                let c = &report.conversations[0];
                assert_eq!((report.conversations.len(), c.cnps, c.ecn_ce), (1, 1, 2));
            }
            "rnr-wait-bend.pcap" => assert_eq!((counts(0).rnr_naks, counts(0).rnr_waits), (1, 1)),
            // Taken at the responder (B), the capture shows an ACK that may never have reached
            // the requester: its resend is not judged there; taken at the requester (A), it is.
            "resend-cause-break.pcap" => {
                let at = |addr: &str| Options {
                    at: Some(addr.parse().unwrap()),
                    ..Options::default()
                };
                let path = dir.path().join(file);
                assert_eq!(violations(&judge_with(&path, at("10.0.0.2"))), []);
                assert_eq!(
                    violations(&judge_with(&path, at("10.0.0.1"))),
                    violations(&report)
                );
            }
            _ => {}
        }
    }
    let every: BTreeSet<Rule> = Rule::ALL.into_iter().collect();
    assert_eq!(broken, every, "a breaking case for every rule");
    assert!(bends >= Rule::ALL.len());
}

/// Runs a mixed workload (multi-packet WRITEs, READs and SENDs, atomics) between two NICs with
/// faults on A's link, recording each NIC's side into `dir` (a.pcap, b.pcap) as `roce nic
/// --faults --pcap` does (the tee outside the faults); returns both captures' reports and A's
/// counters.
fn faulty_run(
    dir: &tempfile::TempDir,
    faults: &str,
    rounds: u64,
    options: [Options; 2],
) -> (Report, Report, roce_nic::counters::Snapshot) {
    faulty_run_with(dir, faults, rounds, options, false)
}

/// [`faulty_run`], the NICs with IRN's low retransmission timer when `rto_low`.
fn faulty_run_with(
    dir: &tempfile::TempDir,
    faults: &str,
    rounds: u64,
    options: [Options; 2],
    rto_low: bool,
) -> (Report, Report, roce_nic::counters::Snapshot) {
    let (pa, pb) = (dir.path().join("a.pcap"), dir.path().join("b.pcap"));
    let (sink_a, sink_b) = (
        PcapSink::create(&pa).unwrap(),
        PcapSink::create(&pb).unwrap(),
    );
    let (la, lb) = mem::pair();
    let p = pair_over(
        PcapTee::new(
            Faulty::new(la, faults.parse().unwrap()),
            sink_a.clone(),
            true,
        ),
        PcapTee::new(lb, sink_b.clone(), true),
        QpType::Rc,
        Mtu::M1024,
        1 << 16,
        // Retries for ever (rxe's reading of retry_cnt 7): a run of unlucky losses must not
        // end the QP, what is judged is how it recovers.
        |config| {
            config.rxe_compat = true;
            config.rto_low = rto_low;
        },
        |attr| {
            if attr.timeout.is_some() {
                attr.timeout = Some(12);
                attr.retry_cnt = Some(7);
            }
        },
    )
    .unwrap();
    let (a, b) = (&p.a, &p.b);
    let (rkey, va) = (b.mr.rkey, b.mr.va);
    a.write(0, &pattern(8192, 3));
    b.write(0, &pattern(8192, 4));
    let ops = [
        (
            SendOp::RdmaWrite {
                remote_addr: va + 16384,
                rkey,
            },
            3000,
        ),
        (
            SendOp::RdmaRead {
                remote_addr: va,
                rkey,
            },
            5000,
        ),
        (SendOp::Send, 2500),
        (
            SendOp::AtomicFetchAndAdd {
                remote_addr: va + 32768,
                rkey,
                add: 1,
            },
            8,
        ),
    ];
    for round in 0..rounds {
        for (i, (op, len)) in ops.iter().enumerate() {
            if matches!(op, SendOp::Send) {
                b.qp.post_recv(&[RecvWr {
                    wr_id: round,
                    sg_list: &[b.mr.sge(40000, 4096)],
                }])
                .unwrap();
            }
            let local = if op.is_atomic() { 12000 } else { 0 };
            a.qp.post_send(&[SendWr {
                wr_id: round * 4 + i as u64,
                op: *op,
                sg_list: &[a.mr.sge(local, *len)],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
        }
        for _ in 0..ops.len() {
            let wc = a
                .next_completion(Duration::from_secs(30))
                .expect("a completion");
            assert!(wc.is_success(), "{wc:?}");
        }
        while b.next_completion(Duration::ZERO).is_some() {}
    }
    let counters = p.dev_a.counters();
    drop(p);
    sink_a.flush().unwrap();
    sink_b.flush().unwrap();
    (
        judge_with(&pa, options[0]),
        judge_with(&pb, options[1]),
        counters,
    )
}

/// How `roce conform --at ADDRESS` judges each NIC's own capture (A is 10.0.0.1, B 10.0.0.2).
fn at_each_nic(reordering: bool) -> [Options; 2] {
    ["10.0.0.1", "10.0.0.2"].map(|addr| Options {
        reordering,
        at: Some(addr.parse().unwrap()),
    })
}

/// Both captures follow every rule; each holds one RC conversation of 600 messages.
fn assert_conformant(a: &Report, b: &Report, seed: u64) {
    for (side, report) in [("A", a), ("B", b)] {
        assert!(
            report.violations.is_empty(),
            "seed {seed}, {side}: {:#?}",
            report.violations
        );
        assert_eq!(report.conversations.len(), 1, "{side}");
        let c = &report.conversations[0];
        assert_eq!((c.transport, c.path_mtu), ("RC", Some(1024)), "{side}");
        assert_eq!(c.directions[0].messages, 600, "{side}");
    }
}

/// Loss alone, seed after seed: both captures follow every rule, the three on the order of the
/// two directions (resend causes, go-backs, ACK coverage) included. Each capture is judged as
/// taken at its own NIC (`roce conform --at`): B's records answers that A's faults drop
/// afterwards, so the resends of A are judged on A's capture only (docs/conform.md, "Where the
/// capture was taken").
#[test]
fn our_nic_under_loss_follows_the_rules() {
    for seed in 1..=8 {
        judge_lossy_run(seed);
    }
}

/// One run at 3% loss with fault seed `seed`, judged from both ends; the captures are kept in
/// `keep` (a directory) when they are not conformant.
fn judge_lossy_run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let faults = format!("drop=0.03,seed={seed}");
    let (a, b, counters) = faulty_run(&dir, &faults, 150, at_each_nic(false));
    if !(a.violations.is_empty() && b.violations.is_empty()) {
        if let Some(keep) = std::env::var_os("ROCE_CONFORM_KEEP") {
            for side in ["a", "b"] {
                let kept = Path::new(&keep).join(format!("seed{seed}-{side}.pcap"));
                std::fs::copy(dir.path().join(format!("{side}.pcap")), kept).unwrap();
            }
        }
    }
    assert!(
        counters.retransmitted_packets > 0,
        "seed {seed}: the faults happened: {counters:?}"
    );
    assert_conformant(&a, &b, seed);
    for (side, report) in [("A", &a), ("B", &b)] {
        assert!(
            report.conversations[0].order_judged,
            "seed {seed}, {side}: the order rules were judged"
        );
    }
    // B, behind the losses, saw gaps that A's go-backs filled.
    let seen = b.conversations[0].directions[0];
    assert!(
        seen.retransmitted > 0 && seen.missing == 0,
        "seed {seed}: {seen:?}"
    );
}

/// Many seeds, one after the other (the fault injector's seed; the engines' timing varies from
/// run to run as well): `ROCE_CONFORM_SEEDS=1..=200 cargo test -p roce-tests --test conform
/// seed_after_seed -- --ignored` (`ROCE_CONFORM_KEEP=DIR` keeps the captures of a failing
/// seed).
#[test]
#[ignore = "long: run by hand with ROCE_CONFORM_SEEDS"]
fn our_nic_under_loss_follows_the_rules_seed_after_seed() {
    let seeds = std::env::var("ROCE_CONFORM_SEEDS").unwrap_or_else(|_| "1..=30".into());
    let (from, to) = seeds
        .split_once("..=")
        .expect("ROCE_CONFORM_SEEDS is FROM..=TO");
    let (from, to): (u64, u64) = (from.parse().unwrap(), to.parse().unwrap());
    for seed in from..=to {
        judge_lossy_run(seed);
    }
    println!("seeds {from} to {to}: every capture conformant");
}

/// With reordering (told to the checker, as `roce conform --reordering`) the rules on the
/// order of the two directions are not judged — the IBTA assumes a network that keeps order,
/// and from one capture point a packet the network reordered cannot always be told from one
/// the sender misplaced; every other rule holds.
#[test]
fn our_nic_under_loss_and_reordering_follows_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let faults = "drop=0.02,reorder=0.02,seed=4791";
    let (a, b, counters) = faulty_run(&dir, faults, 150, at_each_nic(true));
    assert!(
        counters.retransmitted_packets > 0,
        "the faults happened: {counters:?}"
    );
    assert_conformant(&a, &b, 4791);
    // Both see the go-backs; none of the order rules was judged.
    let seen = |r: &Report| r.conversations[0].directions[0];
    assert!(seen(&a).retransmitted > 0 && seen(&b).retransmitted > 0);
    assert!(!a.conversations[0].order_judged && !b.conversations[0].order_judged);
}

/// With IRN's low retransmission timer the requester goes back after shorter silences: to an
/// observer that is a timeout like any other (it cannot know the timer), and both captures
/// follow the rules as without it, the order rules included.
///
/// Several seeds: once a QP has lost packets its low timer runs whatever is unacknowledged,
/// from a 10 µs floor, so its go-backs come often and early.
#[test]
fn our_nic_with_the_low_timer_under_loss_follows_the_rules() {
    for seed in 11..=14 {
        let dir = tempfile::tempdir().unwrap();
        let faults = format!("drop=0.03,seed={seed}");
        let (a, b, counters) = faulty_run_with(&dir, &faults, 150, at_each_nic(false), true);
        assert!(
            counters.retransmitted_packets > 0
                && counters.retransmit_timeouts + counters.tail_probes > 0,
            "seed {seed}: the losses were recovered by timers or probes: {counters:?}"
        );
        assert_conformant(&a, &b, seed);
        assert!(a.conversations[0].order_judged && b.conversations[0].order_judged);
    }
}

/// The low timer under `roce bench`'s fault mix, reordering included (told to the checker):
/// both captures follow the rules that apply.
#[test]
fn our_nic_with_the_low_timer_under_the_fault_mix_follows_the_rules() {
    for seed in 21..=22 {
        let dir = tempfile::tempdir().unwrap();
        let faults = format!("drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01,seed={seed}");
        let (a, b, counters) = faulty_run_with(&dir, &faults, 150, at_each_nic(true), true);
        assert!(
            counters.retransmit_timeouts > 0,
            "seed {seed}: {counters:?}"
        );
        assert_conformant(&a, &b, seed);
    }
}
