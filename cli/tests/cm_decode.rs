//! The RDMA CM handshakes between two of our NICs, as they cross a cable: a connection made
//! and ended (ucmatose: REQ, REP, RTU, DREQ, DREP), a UD service resolved (udaddy: SIDR_REQ,
//! SIDR_REP) and a port nobody listens on (REJ). `roce decode -v --json` and tshark agree on
//! every field of every one of those MADs; and each message decodes with exactly the fields the
//! same message from Linux's CM decodes with (the Soft-RoCE captures under
//! `captures/softroce/`), values aside — our handshakes look, field for field, like the
//! kernel's.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use roce_tests::oracle::{self, Comparison};
use support::*;

/// Every field name `roce decode -v --json` reports for the CM MADs of `pcap` sent from an
/// address of `from` (all senders when empty), by MAD attribute ID.
fn fields_by_attribute(pcap: &Path, from: &[&str]) -> BTreeMap<u64, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "-v", "--json"])
        .arg(pcap)
        .output()
        .expect("running roce decode");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut by_attribute: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let object: serde_json::Value = serde_json::from_str(line).expect("a JSON object");
        let Some(attribute) = object["infiniband.mad.attributeid"].as_u64() else {
            continue;
        };
        let src = object["ip.src"].as_str().unwrap_or_default();
        if !from.is_empty() && !from.contains(&src) {
            continue;
        }
        // Where a frame was and how long it was are not the message's.
        let keys = object
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| !k.starts_with("frame.") && !k.starts_with("eth.") && !k.starts_with("ip."))
            .cloned();
        by_attribute.entry(attribute).or_default().extend(keys);
    }
    by_attribute
}

#[test]
fn our_pairs_cm_handshakes_decode_as_tshark_decodes_them_and_as_linuxs_do() {
    let env = Env::new("cmdecode");
    let (mut a, b) = cabled_pair(&env, 78);
    let pcap = env.dir.join("cm-pair.pcap");
    a.pcap = Some(pcap.clone());
    let nic_a = env.nic(&a);
    let _nic_b = env.nic(&b);
    let patience = ["--timeout", "10", "--connect-retry", "10"];
    let server = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(["--nic".into(), b.name.clone()]);
        all.extend(patience.map(String::from));
        env.spawn(&all, false)
    };
    let client = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--nic", &a.name]);
        all.extend(patience);
        let done = env.run(&all);
        assert!(done.status.success(), "{args:?}: {}", done.stderr);
    };
    let mut ucmatose = server(&["ucmatose", "-C", "5"]);
    client(&["ucmatose", "-s", "10.78.0.2", "-C", "5"]);
    assert!(ucmatose.wait(PATIENCE).success());
    let mut udaddy = server(&["udaddy", "-C", "5"]);
    client(&["udaddy", "-s", "10.78.0.2", "-C", "5"]);
    assert!(udaddy.wait(PATIENCE).success());
    let refused = env.run(&["host", "connect", "10.78.0.2:7999", "--nic", &a.name]);
    assert!(
        refused.stderr.contains("nobody listens"),
        "{}",
        refused.stderr
    );
    // The NIC writes out its capture as it stops.
    drop(nic_a);

    let ours = fields_by_attribute(&pcap, &[]);
    // REQ, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP.
    let attributes: Vec<u64> = ours.keys().copied().collect();
    assert_eq!(attributes, [0x10, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);

    if oracle::tshark_available() {
        let mut outcome = Comparison::default();
        outcome.add(
            Path::new(env!("CARGO_BIN_EXE_roce")),
            &pcap,
            &oracle::fields(),
        );
        outcome.assert_agreement();
        for key in [
            "infiniband.mad.transactionid",
            "infiniband.cm.req.serviceid",
            "infiniband.cm.req.localqpn",
            "infiniband.cm.req.startpsn",
            "infiniband.cm.req.ip_cm.sip4",
            "infiniband.cm.rep.localqpn",
            "infiniband.cm.rej.reason",
        ] {
            assert!(outcome.compared.contains(key), "{key} was never compared");
        }
        eprintln!(
            "our pair's CM MADs: {} packets, {} fields agreed with tshark, {} excused",
            outcome.packets, outcome.fields, outcome.excused
        );
    } else {
        roce_tests::skip("tshark is not installed; our pair's MADs were not compared with it");
    }

    // Linux's CM, in the Soft-RoCE guests: the two guests' handshakes, and the guest's side of
    // the RDMA CM tools' runs against our NIC (10.77.0.2 there).
    let committed = roce_tests::captures_dir().join("softroce");
    let mut linux = fields_by_attribute(&committed.join("two-guests/rdma_cm.pcap"), &[]);
    for (attribute, keys) in fields_by_attribute(
        &committed.join("rdma-cm-tools/rdma-cm-tools-rxe.pcap"),
        &["10.77.0.2"],
    ) {
        linux.entry(attribute).or_default().extend(keys);
    }
    for (attribute, keys) in &ours {
        let theirs = linux
            .get(attribute)
            .unwrap_or_else(|| panic!("Linux sent no MAD with attribute {attribute:#x}"));
        assert_eq!(
            keys, theirs,
            "attribute {attribute:#x}: our fields, then Linux's"
        );
    }
}
