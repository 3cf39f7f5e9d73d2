//! `roce conform` as a user meets it: its summary, its verdict and exit codes, `--allow`,
//! `--json`, `--rules` and its error messages. What it judges is tests/tests/conform.rs's.

use std::process::{Command, Output};

use roce_tests::captures_dir;
use serde_json::Value;

fn conform(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .arg("conform")
        .args(args)
        .output()
        .expect("running roce")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

fn capture(name: &str) -> String {
    captures_dir().join(name).display().to_string()
}

#[test]
fn a_conformant_capture_exits_0_with_its_conversations() {
    let out = conform(&[&capture("all-verbs.pcap")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("conversation 1: RC 10.0.0.1 QP 0x11 <-> 10.0.0.2 QP 0x11"));
    assert!(stdout.contains("conversation 3: UC"), "{stdout}");
    assert!(
        stdout.contains("NAKs: 1 remote access, 1 RNR; 1 RNR waits"),
        "{stdout}"
    );
    assert!(stdout
        .trim_end()
        .ends_with("52 frames, 52 RoCE (0 bad ICRC, 0 malformed), 4 conversations: conformant"));
}

/// `--at ADDRESS`: the capture was taken at that host, so only its requesters' resends are
/// judged (an answer it sent may not have reached a requester elsewhere).
#[test]
fn at_names_where_the_capture_was_taken() {
    let recording = capture("all-verbs.pcap");
    let out = conform(&["--at", "10.0.0.2", &recording]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .contains("  taken elsewhere than at 10.0.0.1: its resends not judged (resend-cause)"),
        "{stdout}"
    );
    let json: Value =
        serde_json::from_slice(&conform(&["--json", "--at", "10.0.0.1", &recording]).stdout)
            .unwrap();
    assert_eq!(
        json["conversations"][0]["resends_judged"],
        serde_json::json!([true, false])
    );
    let all: Value = serde_json::from_slice(&conform(&["--json", &recording]).stdout).unwrap();
    assert_eq!(
        all["conversations"][0]["resends_judged"],
        serde_json::json!([true, true])
    );
    assert_eq!(
        conform(&["--at", "host-a", &recording]).status.code(),
        Some(2)
    );
}

#[test]
fn a_broken_rule_exits_1_with_its_frames_unless_allowed() {
    // The opcode gallery's FIRST packets carry a few bytes, not a path MTU.
    let gallery = capture("every-opcode-ipv4.pcap");
    let out = conform(&[&gallery]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "VIOLATION: frame 3: [path-mtu] a FIRST or MIDDLE payload is one of the path MTUs"
        ),
        "{stdout}"
    );
    assert!(stdout.contains(
        "expected a FIRST or MIDDLE payload of 256, 512, 1024, 2048 or 4096 bytes; found 1 bytes"
    ));
    let allowed = conform(&["--allow", "path-mtu,write-length", &gallery]);
    assert_eq!(allowed.status.code(), Some(0));
    let stdout = text(&allowed.stdout);
    assert!(stdout.contains("allowed: frame 3: [path-mtu]"), "{stdout}");
    assert!(
        stdout.contains(": conformant, 14 allowed violation(s)"),
        "{stdout}"
    );
    let partly = conform(&["--allow", "path-mtu", &gallery]);
    assert_eq!(
        partly.status.code(),
        Some(1),
        "write-length is still broken"
    );
}

#[test]
fn json_has_the_conversations_and_each_violation_with_its_citation() {
    let out = conform(&["--json", &capture("every-opcode-ipv4.pcap")]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["conformant"], false);
    assert_eq!(report["roce"], 42);
    let first = &report["violations"][0];
    assert_eq!(first["rule"], "path-mtu");
    assert_eq!(first["frames"], serde_json::json!([3]));
    assert!(first["citation"].as_str().unwrap().starts_with("IBTA"));
    assert_eq!(first["allowed"], false);
    let verbs = conform(&["--json", &capture("all-verbs.pcap")]);
    let report: Value = serde_json::from_slice(&verbs.stdout).expect("one JSON object");
    assert_eq!(report["conformant"], true);
    let rc = &report["conversations"][0];
    assert_eq!(rc["transport"], "RC");
    assert_eq!(rc["path_mtu"], 256);
    assert_eq!(rc["directions"][0]["naks"]["rnr"], 1);
    assert_eq!(rc["order_judged"], true);
}

#[test]
fn rules_are_listed_and_an_unknown_one_is_refused() {
    let out = conform(&["--rules"]);
    assert_eq!(out.status.code(), Some(0));
    let listed = text(&out.stdout);
    assert_eq!(listed.lines().count(), 23, "{listed}");
    assert!(listed.contains("rnr-wait") && listed.contains("IBTA 9.7.5.2.8"));
    let bad = conform(&["--allow", "no-such-rule", &capture("all-verbs.pcap")]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("no rule 'no-such-rule' (rules: opcode-sequence, "));
    let missing = conform(&["/nonexistent/x.pcap"]);
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        text(&missing.stderr),
        "roce: /nonexistent/x.pcap: no such file\n"
    );
}
