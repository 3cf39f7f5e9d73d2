//! tshark and `roce decode -v --json` (every field, not just the essential ones) must agree on
//! every field of every packet in every capture under `captures/` (and the real ones in
//! `../shared/captures/`, when they are there).
//!
//! How the two are brought to the same terms, and where tshark 4.0 cannot follow:
//! - tshark prints numbers in the base its dissector chose (`0x000123`, `291`), flags as `1`/`0`
//!   and bytes as plain hex; `roce decode --json` has JSON numbers, booleans and colon-separated
//!   hex. Both sides are read back into numbers, booleans, addresses and bytes before comparing.
//! - RoCE from a well-known UDP source port (53, 69 in `every-opcode-ipv4.pcap`) is taken by
//!   tshark for DNS or TFTP: UDP tries the lower port first. `-d udp.port==4791,infiniband` does
//!   not help in tshark 4.0; `--disable-protocol dns --disable-protocol tftp` does (one option per
//!   protocol: a comma-separated list is refused).
//! - tshark hands SEND payloads to heuristic dissectors (RPC-over-RDMA, SMB Direct, NVMe-oF,
//!   iSER, ...), which claim arbitrary bytes and report the packet malformed, losing `data.len`
//!   and the ICRC field. Those protocols are disabled: the payload is opaque to both decoders.
//! - tshark's IPv6 dissector files the version nibble under `ip.version` as well as
//!   `ipv6.version`; for an IPv6 packet, tshark's `ip.version` is compared with our
//!   `ipv6.version`.
//! - tshark 4.0 does not know FLUSH (0x1c), ATOMIC_WRITE (0x1d) or CNP (0x81): it decodes their
//!   BTH and shows the rest as vendor data, with no extension header, `data.len` or ICRC field.
//!   For those opcodes alone, a field past the BTH that tshark leaves out is excused (and
//!   counted); anything tshark does report is still compared.
//! - tshark 4.0 reads a CM REQ path's flow label from three bytes instead of four (so it shows
//!   the top 12 of its 20 bits) and its packet rate from the path's byte 36 instead of 39 (the
//!   flow label's first byte). `roce decode` shows both where IBTA table 106 (and Linux's
//!   `ibta_vol1_c12.h`) put them; for those four keys alone a disagreement is excused (and
//!   counted) when tshark's value is exactly what its misreading gives.
//! - tshark shows a REQ's alternate-path GIDs as bytes; `roce decode` as IPv6 addresses. The
//!   two are compared as sixteen bytes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

use roce_tests::{captures_dir, captures_under, shared_captures_dir, skip};
use roce_wire::describe::tshark_fields;
use serde_json::{Map, Value};

/// Opcodes tshark 4.0 shows as "Unknown OpCode".
const UNKNOWN_TO_TSHARK: [u64; 3] = [0x1c, 0x1d, 0x81];

/// Fields of the frame itself, which the decoder adds to the description's.
const FRAME_FIELDS: [&str; 4] = [
    "frame.number",
    "frame.time_epoch",
    "frame.len",
    "frame.cap_len",
];

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// tshark's rows, by frame number: field name to text (absent when tshark printed nothing).
fn tshark_rows(file: &Path, fields: &[&str]) -> HashMap<u64, HashMap<String, String>> {
    let mut command = roce_tests::tshark_fields(file);
    command.args(["-E", "separator=/t", "-E", "occurrence=f", "-E", "quote=n"]);
    for field in fields {
        command.args(["-e", field]);
    }
    let output = command.output().expect("running tshark");
    assert!(
        output.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("tshark prints UTF-8")
        .lines()
        .map(|line| {
            let row: HashMap<String, String> = fields
                .iter()
                .zip(line.split('\t'))
                .filter(|(_, text)| !text.is_empty())
                .map(|(field, text)| (field.to_string(), text.to_string()))
                .collect();
            let number = row["frame.number"].parse().expect("a frame number");
            (number, row)
        })
        .collect()
}

/// `roce decode -v --json`'s objects, by frame number.
fn roce_objects(file: &Path) -> HashMap<u64, Map<String, Value>> {
    let output = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "-v", "--json"])
        .arg(file)
        .output()
        .expect("running roce");
    assert!(
        output.status.success(),
        "roce decode failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("roce prints UTF-8")
        .lines()
        .map(|line| {
            let Value::Object(object) = serde_json::from_str(line).expect("one JSON object") else {
                panic!("not an object: {line}")
            };
            (
                object["frame.number"].as_u64().expect("a frame number"),
                object,
            )
        })
        .collect()
}

fn number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn hex_bytes(text: &str) -> String {
    text.chars()
        .filter(|c| *c != ':')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether our JSON value and tshark's text say the same thing.
fn agree(ours: &Value, theirs: &str) -> bool {
    if let (Value::String(s), true) = (ours, theirs.len() == 32) {
        if let Ok(IpAddr::V6(a)) = s.parse::<IpAddr>() {
            return hex_bytes(theirs)
                == a.octets()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>();
        }
    }
    match ours {
        Value::Number(n) => n.as_u64().is_some() && n.as_u64() == number(theirs),
        // A one-bit field of a numeric type is printed as a number (`0x01` in hex fields).
        Value::Bool(b) => match (theirs, number(theirs)) {
            ("True" | "true", _) | (_, Some(1)) => *b,
            ("False" | "false", _) | (_, Some(0)) => !*b,
            _ => false,
        },
        Value::String(s) => match (s.parse::<IpAddr>(), theirs.parse::<IpAddr>()) {
            (Ok(a), Ok(b)) => a == b,
            _ => s == theirs || hex_bytes(s) == hex_bytes(theirs),
        },
        _ => false,
    }
}

/// Whether tshark 4.0's value for a CM REQ path field is what its misreading of the path gives
/// (see the module doc): the flow label from the top 20 bits of three bytes, the packet rate
/// from the low 6 bits of the flow label's first byte.
fn tshark_misreads_the_path(field: &str, object: &Map<String, Value>, theirs: &str) -> bool {
    let (Some(prefix), Some(theirs)) = (field.strip_prefix("infiniband.cm.req."), number(theirs))
    else {
        return false;
    };
    let path = &prefix[..prefix.find('_').unwrap_or(0)];
    let key = |name: &str| format!("infiniband.cm.req.{path}_{name}");
    let (Some(flow_label), Some(rate)) = (
        object.get(&key("flowlabel")).and_then(Value::as_u64),
        object.get(&key("pktrate")).and_then(Value::as_u64),
    ) else {
        return false;
    };
    let word = (flow_label << 12) | rate;
    match &prefix[path.len()..] {
        "_flowlabel" => theirs == (word >> 8) >> 12,
        "_pktrate" => theirs == (word >> 24) & 0x3f,
        _ => false,
    }
}

/// Whether tshark 4.0 is known not to show this field for this opcode.
fn excused(opcode: Option<u64>, field: &str) -> bool {
    let past_bth = field.starts_with("infiniband.")
        && !field.starts_with("infiniband.bth.")
        && !field.starts_with("infiniband.grh.");
    opcode.is_some_and(|op| UNKNOWN_TO_TSHARK.contains(&op)) && (past_bth || field == "data.len")
}

struct Outcome {
    packets: usize,
    fields: usize,
    excused: usize,
    disagreements: Vec<String>,
}

fn compare(file: &Path, fields: &[&str], outcome: &mut Outcome) {
    let theirs = tshark_rows(file, fields);
    let ours = roce_objects(file);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut numbers: Vec<u64> = theirs.keys().copied().collect();
    numbers.sort();
    for n in numbers {
        let row = &theirs[&n];
        let tshark_says_roce = row.contains_key("infiniband.bth.opcode");
        let Some(object) = ours.get(&n) else {
            if tshark_says_roce {
                outcome.disagreements.push(format!(
                    "{name} frame {n}: tshark decodes RoCE, roce does not"
                ));
            }
            continue;
        };
        if !tshark_says_roce {
            outcome.disagreements.push(format!(
                "{name} frame {n}: roce decodes RoCE, tshark does not"
            ));
            continue;
        }
        outcome.packets += 1;
        let opcode = object.get("infiniband.bth.opcode").and_then(Value::as_u64);
        for field in fields {
            let ours = match (*field, object.get(*field)) {
                ("ip.version", None) => object.get("ipv6.version"),
                (_, value) => value,
            };
            match (ours, row.get(*field)) {
                (None, None) => {}
                (Some(ours), Some(theirs)) if agree(ours, theirs) => outcome.fields += 1,
                (Some(_), None) if excused(opcode, field) => outcome.excused += 1,
                (Some(_), Some(theirs)) if tshark_misreads_the_path(field, object, theirs) => {
                    outcome.excused += 1
                }
                (ours, theirs) => outcome.disagreements.push(format!(
                    "{name} frame {n} {field}: roce says {ours:?}, tshark says {theirs:?}"
                )),
            }
        }
    }
    assert!(
        ours.keys().all(|n| theirs.contains_key(n)),
        "{name}: roce reports frames tshark does not have"
    );
}

#[test]
fn tshark_and_roce_decode_agree_on_every_field() {
    if !tshark_available() {
        skip("tshark is not installed; the tshark conformance test did not run");
        return;
    }
    let mut files = captures_under(&captures_dir());
    assert!(
        !files.is_empty(),
        "no captures under {}",
        captures_dir().display()
    );
    files.extend(captures_under(&shared_captures_dir()));
    let mut fields: Vec<&str> = FRAME_FIELDS.to_vec();
    fields.extend(tshark_fields());
    let mut outcome = Outcome {
        packets: 0,
        fields: 0,
        excused: 0,
        disagreements: Vec::new(),
    };
    for file in &files {
        compare(file, &fields, &mut outcome);
    }
    eprintln!(
        "tshark conformance: {} files, {} RoCE packets, {} fields agreed, {} fields excused \
         (opcodes tshark 4.0 does not know, CM path fields it misreads)",
        files.len(),
        outcome.packets,
        outcome.fields,
        outcome.excused
    );
    assert!(
        outcome.disagreements.is_empty(),
        "{} disagreements:\n{}",
        outcome.disagreements.len(),
        outcome.disagreements.join("\n")
    );
    // Every opcode of the bundled captures was seen: the comparison was not vacuous.
    assert!(
        outcome.packets >= 4 * 40,
        "only {} packets",
        outcome.packets
    );
}
