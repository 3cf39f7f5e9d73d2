//! Packets built by scapy (`tests/scapy_roce.py`), an implementation independent of ours that
//! computes the ICRC itself, parse with every field as scapy was told and every ICRC good.

use std::path::Path;
use std::process::Command;

use roce_tests::{skip, workspace};
use roce_wire::capture;
use roce_wire::{Frame, NetworkRepr};
use serde_json::Value;

/// Debian's interpreter, which has `python3-scapy`; the one first in PATH may not.
const PYTHON: &str = "/usr/bin/python3";

fn scapy_available() -> bool {
    Command::new(PYTHON)
        .args(["-c", "import scapy.contrib.roce"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks every field scapy was given against what our parser read.
fn check(frame: &Frame, expected: &Value, n: usize) {
    let r = &frame.repr;
    let b = &r.bth;
    let is_ipv6 = matches!(r.network, NetworkRepr::Ipv6 { .. });
    assert_eq!(
        is_ipv6,
        expected["ipv6"].as_bool().unwrap_or(false),
        "packet {n}"
    );
    assert_eq!(
        u64::from(b.opcode.value()),
        u64_of(&expected["opcode"]),
        "packet {n}"
    );
    for (ours, key) in [
        (b.solicited, "solicited"),
        (b.migreq, "migreq"),
        (b.fecn, "fecn"),
        (b.becn, "becn"),
        (b.ack_req, "ack_req"),
    ] {
        assert_eq!(Some(ours), expected[key].as_bool(), "packet {n} {key}");
    }
    for (ours, key) in [
        (u64::from(b.pad_count), "pad_count"),
        (u64::from(b.p_key), "p_key"),
        (u64::from(b.dest_qp), "dest_qp"),
        (u64::from(b.psn), "psn"),
    ] {
        assert_eq!(ours, u64_of(&expected[key]), "packet {n} {key}");
    }
    let ext = &expected["ext"];
    let mut seen = 0;
    if let Some(reth) = r.ext.reth {
        let e = &ext["reth"];
        assert_eq!(reth.va, u64_of(&e["va"]), "packet {n}");
        assert_eq!(u64::from(reth.r_key), u64_of(&e["r_key"]), "packet {n}");
        assert_eq!(u64::from(reth.dma_len), u64_of(&e["dma_len"]), "packet {n}");
        seen += 1;
    }
    if let Some(aeth) = r.ext.aeth {
        let e = &ext["aeth"];
        assert_eq!(
            u64::from(aeth.syndrome.to_u8()),
            u64_of(&e["syndrome"]),
            "packet {n}"
        );
        assert_eq!(u64::from(aeth.msn), u64_of(&e["msn"]), "packet {n}");
        seen += 1;
    }
    if let Some(deth) = r.ext.deth {
        let e = &ext["deth"];
        assert_eq!(u64::from(deth.q_key), u64_of(&e["q_key"]), "packet {n}");
        assert_eq!(u64::from(deth.src_qp), u64_of(&e["src_qp"]), "packet {n}");
        seen += 1;
    }
    if let Some(a) = r.ext.atomic_eth {
        let e = &ext["atomic_eth"];
        assert_eq!(a.va, u64_of(&e["va"]), "packet {n}");
        assert_eq!(u64::from(a.r_key), u64_of(&e["r_key"]), "packet {n}");
        assert_eq!(a.swap_add, u64_of(&e["swap_add"]), "packet {n}");
        assert_eq!(a.compare, u64_of(&e["compare"]), "packet {n}");
        seen += 1;
    }
    if let Some(a) = r.ext.atomic_ack_eth {
        assert_eq!(a.original, u64_of(&ext["atomic_ack_eth"]), "packet {n}");
        seen += 1;
    }
    if let Some(i) = r.ext.immdt {
        assert_eq!(u64::from(i.imm), u64_of(&ext["immdt"]), "packet {n}");
        seen += 1;
    }
    if let Some(i) = r.ext.ieth {
        assert_eq!(u64::from(i.r_key), u64_of(&ext["ieth"]), "packet {n}");
        seen += 1;
    }
    let given = ext.as_object().map_or(0, |o| o.len());
    assert_eq!(seen, given, "packet {n}: headers parsed vs given");
    let payload: String = frame.payload().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        Some(payload.as_str()),
        expected["payload"].as_str(),
        "packet {n}"
    );
    let icrc: String = frame.bytes()[frame.layout.icrc.clone()]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(Some(icrc.as_str()), expected["icrc"].as_str(), "packet {n}");
    let check = frame.icrc();
    assert!(
        check.is_ok(),
        "packet {n}: ICRC by {} is {:#010x}, ours {:#010x}",
        expected["icrc_by"],
        check.found,
        check.expected
    );
}

#[test]
fn packets_built_by_scapy_parse_as_built_with_good_icrcs() {
    if !scapy_available() {
        skip("python3-scapy is not installed; the scapy cross-check did not run");
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = workspace().join("tests/scapy_roce.py");
    let output = Command::new(PYTHON)
        .arg(&script)
        .arg(dir.path())
        .output()
        .expect("running the scapy script");
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let expected: Vec<Value> = serde_json::from_slice(
        &std::fs::read(dir.path().join("scapy.json")).expect("the JSON side file"),
    )
    .expect("JSON");
    let mut reader =
        capture::open(Path::new(&dir.path().join("scapy.pcap"))).expect("scapy's pcap");
    let mut n = 0;
    let mut pads = [0; 4];
    let mut by_scapy = 0;
    while let Some(record) = reader.next_record() {
        let record = record.expect("a whole record");
        let frame = record.frame().unwrap_or_else(|e| panic!("packet {n}: {e}"));
        check(&frame, &expected[n], n);
        pads[usize::from(frame.repr.bth.pad_count)] += 1;
        by_scapy += usize::from(expected[n]["icrc_by"] == "scapy");
        n += 1;
    }
    assert_eq!(n, expected.len(), "every packet scapy built was read");
    assert!(pads.iter().all(|&p| p > 0), "every pad count: {pads:?}");
    assert!(by_scapy >= 16, "most ICRCs come from scapy itself");
}
