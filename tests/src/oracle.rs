//! Outside oracles for what the project puts on the wire: tshark (Wireshark's dissectors, which
//! share no code with ours) field by field against `roce decode -v --json`, and the ICRC as
//! scapy computes it (`tests/scapy_icrc.py`). The conformance test runs them over the committed
//! captures; the tests of live runs (NIC processes, the demo, a fresh all-verbs recording) over
//! what those runs recorded, so that the frames our NIC sends are never judged by our parser
//! alone.
//!
//! How tshark and `roce decode` are brought to the same terms, and where tshark 4.0 cannot
//! follow:
//! - tshark prints numbers in the base its dissector chose (`0x000123`, `291`), flags as `1`/`0`
//!   and bytes as plain hex; `roce decode --json` has JSON numbers, booleans and colon-separated
//!   hex. Both sides are read back into numbers, booleans, addresses and bytes before comparing.
//! - RoCE from a well-known UDP source port (53, 69 in `every-opcode-ipv4.pcap`) is taken by
//!   tshark for DNS or TFTP, and SEND payloads by heuristic dissectors (RPC-over-RDMA, SMB
//!   Direct, NVMe-oF, iSER, ...): those protocols are disabled ([`crate::tshark_fields`]).
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
//!
//! A field that neither side reports is not simply passed over: over a whole run every field of
//! the list must have been compared at least once, and a field both decoders show in one packet
//! must be shown in every packet of the same opcode (unless its presence depends on more than
//! the opcode: the network layer, padding, the AETH syndrome's type, a MAD's class) — so a
//! field both decoders forgot cannot hide.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

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

/// tshark's own verdict on a frame: set when a dissector found it malformed.
const MALFORMED: &str = "_ws.malformed";

/// Whether tshark runs here.
pub fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Every field compared: the frame's and every tshark field a description can carry.
pub fn fields() -> Vec<&'static str> {
    let mut fields: Vec<&str> = FRAME_FIELDS.to_vec();
    fields.extend(roce_wire::describe::tshark_fields());
    fields
}

/// tshark's rows, by frame number: field name to text (absent when tshark printed nothing).
fn tshark_rows(file: &Path, fields: &[&str]) -> HashMap<u64, HashMap<String, String>> {
    let mut command = crate::tshark_fields(file);
    command.args(["-E", "separator=/t", "-E", "occurrence=f", "-E", "quote=n"]);
    for field in fields.iter().chain([&MALFORMED]) {
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
                .chain([&MALFORMED])
                .zip(line.split('\t'))
                .filter(|(_, text)| !text.is_empty())
                .map(|(field, text)| (field.to_string(), text.to_string()))
                .collect();
            let number = row["frame.number"].parse().expect("a frame number");
            (number, row)
        })
        .collect()
}

/// `roce decode -v --json`'s objects, by frame number (`roce` is the binary under test).
fn roce_objects(roce: &Path, file: &Path) -> HashMap<u64, Map<String, Value>> {
    let output = Command::new(roce)
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

/// Whether a field may be absent from a packet of an opcode that has it in another packet:
/// the link and network layers (Linux cooked captures have no Ethernet header; IPv4, IPv6, a
/// VLAN tag, RoCEv1's GRH; padding of short frames), the payload (a message may be empty), the
/// AETH syndrome's parts (which depend on its type) and the management datagrams' fields
/// (which depend on the MAD's class and attribute).
fn depends_on_more_than_the_opcode(field: &str) -> bool {
    const VARYING: [&str; 11] = [
        "eth.",
        "data.",
        "vlan.",
        "ip.",
        "ipv6.",
        "udp.",
        "infiniband.grh.",
        "infiniband.aeth.syndrome.",
        "infiniband.mad.",
        "infiniband.cm.",
        "infiniband.sidr",
    ];
    VARYING.iter().any(|prefix| field.starts_with(prefix))
}

/// The fields of one opcode seen over a comparison.
#[derive(Default)]
struct OpcodeFields {
    present: BTreeSet<&'static str>,
    absent: Vec<(String, &'static str)>,
}

/// tshark's opcode of each frame of `file`, in order (`None` where tshark sees no RoCE); fails
/// on a frame tshark finds malformed.
pub fn tshark_opcodes(file: &Path) -> Vec<Option<u8>> {
    let rows = tshark_rows(file, &["frame.number", "infiniband.bth.opcode"]);
    let mut numbers: Vec<u64> = rows.keys().copied().collect();
    numbers.sort();
    numbers
        .iter()
        .map(|n| {
            let row = &rows[n];
            assert!(
                !row.contains_key(MALFORMED),
                "{} frame {n}: tshark finds it malformed",
                file.display()
            );
            row.get("infiniband.bth.opcode")
                .map(|op| number(op).expect("an opcode") as u8)
        })
        .collect()
}

/// What comparing captures found, added up over every file compared.
#[derive(Default)]
pub struct Comparison {
    pub files: usize,
    /// RoCE packets both decoders decoded.
    pub packets: usize,
    /// Fields both reported, with the same value.
    pub fields: usize,
    /// Fields tshark 4.0 is known not to show or to misread (see the module doc).
    pub excused: usize,
    /// Every field compared at least once, by name.
    pub compared: BTreeSet<&'static str>,
    /// Per opcode: the fields compared in some packet, and the packets where neither decoder
    /// showed a field.
    by_opcode: BTreeMap<Option<u64>, OpcodeFields>,
    pub disagreements: Vec<String>,
}

impl Comparison {
    /// Compares tshark's and `roce decode`'s view of every frame of `file` (`roce` is the
    /// binary under test) on `fields`.
    pub fn add(&mut self, roce: &Path, file: &Path, fields: &[&'static str]) {
        let theirs = tshark_rows(file, fields);
        let ours = roce_objects(roce, file);
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.files += 1;
        let mut numbers: Vec<u64> = theirs.keys().copied().collect();
        numbers.sort();
        for n in numbers {
            let row = &theirs[&n];
            let tshark_says_roce = row.contains_key("infiniband.bth.opcode");
            let Some(object) = ours.get(&n) else {
                if tshark_says_roce {
                    self.disagreements.push(format!(
                        "{name} frame {n}: tshark decodes RoCE, roce does not"
                    ));
                }
                continue;
            };
            if !tshark_says_roce {
                self.disagreements.push(format!(
                    "{name} frame {n}: roce decodes RoCE, tshark does not"
                ));
                continue;
            }
            self.packets += 1;
            let opcode = object.get("infiniband.bth.opcode").and_then(Value::as_u64);
            if row.contains_key(MALFORMED)
                && !opcode.is_some_and(|op| UNKNOWN_TO_TSHARK.contains(&op))
            {
                self.disagreements
                    .push(format!("{name} frame {n}: tshark finds it malformed"));
            }
            self.packet(&format!("{name} frame {n}"), fields, object, row, opcode);
        }
        assert!(
            ours.keys().all(|n| theirs.contains_key(n)),
            "{name}: roce reports frames tshark does not have"
        );
    }

    fn packet(
        &mut self,
        frame: &str,
        fields: &[&'static str],
        object: &Map<String, Value>,
        row: &HashMap<String, String>,
        opcode: Option<u64>,
    ) {
        let ours_of = |field: &str| match (field, object.get(field)) {
            ("ip.version", None) => object.get("ipv6.version"),
            (_, value) => value,
        };
        let opcode_fields = self.by_opcode.entry(opcode).or_default();
        for field in fields {
            match (ours_of(field), row.get(*field)) {
                (None, None) => {
                    if !depends_on_more_than_the_opcode(field) {
                        opcode_fields.absent.push((frame.to_owned(), field));
                    }
                }
                (Some(ours), Some(theirs)) if agree(ours, theirs) => {
                    self.fields += 1;
                    self.compared.insert(field);
                    opcode_fields.present.insert(field);
                }
                (Some(_), None) if excused(opcode, field) => self.excused += 1,
                // Compared all the same: with what tshark's misreading of our value gives.
                (Some(_), Some(theirs)) if tshark_misreads_the_path(field, object, theirs) => {
                    self.excused += 1;
                    self.compared.insert(field);
                }
                (ours, theirs) => self.disagreements.push(format!(
                    "{frame} {field}: roce says {ours:?}, tshark says {theirs:?}"
                )),
            }
        }
    }

    /// The fields of `fields` never compared (neither decoder reported them in any packet).
    pub fn never_compared<'a>(&self, fields: &[&'a str]) -> Vec<&'a str> {
        fields
            .iter()
            .copied()
            .filter(|f| !self.compared.contains(f))
            .collect()
    }

    /// Packets where neither decoder reported a field that both reported in another packet of
    /// the same opcode (a field whose presence depends on the opcode alone).
    pub fn missing_for_their_opcode(&self) -> Vec<String> {
        self.by_opcode
            .values()
            .flat_map(|seen| {
                seen.absent
                    .iter()
                    .filter(|(_, field)| seen.present.contains(field))
                    .map(|(frame, field)| format!("{frame} {field}: neither decoder shows it"))
            })
            .collect()
    }

    /// Fails the test on any disagreement, or a field neither decoder shows in a packet whose
    /// opcode has it elsewhere.
    pub fn assert_agreement(&self) {
        let missing = self.missing_for_their_opcode();
        assert!(
            missing.is_empty(),
            "fields neither decoder shows, {} times:\n{}",
            missing.len(),
            missing.join("\n")
        );
        assert!(
            self.disagreements.is_empty(),
            "tshark and roce decode disagree {} times:\n{}",
            self.disagreements.len(),
            self.disagreements.join("\n")
        );
    }
}

/// Debian's interpreter, which has `python3-scapy`; the one first in PATH may not.
pub const PYTHON: &str = "/usr/bin/python3";

/// Whether scapy's RoCE layer can be imported here.
pub fn scapy_available() -> bool {
    Command::new(PYTHON)
        .args(["-c", "import scapy.contrib.roce"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What scapy found in a capture: RoCEv2 frames checked (IPv4 by scapy itself, IPv6 by the
/// script's second implementation) and those whose ICRC differs.
#[derive(Debug, Default)]
pub struct Icrcs {
    pub by_scapy: usize,
    pub by_script: usize,
    pub wrong: Vec<String>,
}

/// Every RoCEv2 frame's ICRC in `file`, recomputed by `tests/scapy_icrc.py`.
pub fn scapy_icrcs(file: &Path) -> Icrcs {
    let script = crate::workspace().join("tests/scapy_icrc.py");
    let output = Command::new(PYTHON)
        .arg(&script)
        .arg(file)
        .output()
        .expect("running tests/scapy_icrc.py");
    assert!(
        output.status.success(),
        "{} failed on {}: {}",
        script.display(),
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut icrcs = Icrcs::default();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let entry: BTreeMap<String, Value> = serde_json::from_str(line).expect("a JSON object");
        let Some(stored) = entry.get("stored") else {
            continue;
        };
        let frame = &entry["frame"];
        let mut by = vec![("script", &entry["script"])];
        match entry.get("scapy") {
            Some(scapy) => {
                icrcs.by_scapy += 1;
                by.push(("scapy", scapy));
            }
            None => icrcs.by_script += 1,
        }
        for (who, computed) in by {
            if computed != stored {
                icrcs.wrong.push(format!(
                    "{} frame {frame}: ICRC {stored} on the wire, {who} computes {computed}",
                    file.display()
                ));
            }
        }
    }
    icrcs
}

/// What [`check_from_outside`] found in one capture.
#[derive(Debug)]
pub struct Checked {
    /// RoCE frames tshark and `roce decode` agree on, field by field.
    pub packets: usize,
    pub fields: usize,
    /// ICRCs recomputed by scapy (IPv4) and by the script (IPv6), all equal to the wire's.
    pub icrcs: usize,
}

/// Checks a capture of a live run from outside: tshark must decode every RoCE frame exactly as
/// `roce decode` does (and find none malformed), and every RoCEv2 frame's ICRC must be scapy's.
/// Without tshark or scapy the check is skipped loudly (a failure under CI) and `None` returned.
pub fn check_from_outside(roce: &Path, file: &Path) -> Option<Checked> {
    if !tshark_available() {
        crate::skip("tshark is not installed; a live capture was not checked by tshark");
        return None;
    }
    if !scapy_available() {
        crate::skip("python3-scapy is not installed; a live capture's ICRCs were not recomputed");
        return None;
    }
    let fields = fields();
    let mut comparison = Comparison::default();
    comparison.add(roce, file, &fields);
    comparison.assert_agreement();
    let icrcs = scapy_icrcs(file);
    assert!(icrcs.wrong.is_empty(), "{}", icrcs.wrong.join("\n"));
    assert_eq!(
        icrcs.by_scapy + icrcs.by_script,
        comparison.packets,
        "{}: scapy and tshark count different RoCE frames",
        file.display()
    );
    Some(Checked {
        packets: comparison.packets,
        fields: comparison.fields,
        icrcs: icrcs.by_scapy + icrcs.by_script,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(pairs: &[(&str, Value)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn theirs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_field_both_decoders_leave_out_is_caught() {
        let fields = ["infiniband.bth.opcode", "infiniband.reth.dmalen"];
        let mut comparison = Comparison::default();
        // Frame 1 of a WRITE_ONLY (opcode 10) shows its DMA length on both sides...
        comparison.packet(
            "frame 1",
            &fields,
            &ours(&[
                ("infiniband.bth.opcode", 10.into()),
                ("infiniband.reth.dmalen", 69.into()),
            ]),
            &theirs(&[
                ("infiniband.bth.opcode", "10"),
                ("infiniband.reth.dmalen", "69"),
            ]),
            Some(10),
        );
        assert!(comparison.missing_for_their_opcode().is_empty());
        // ...frame 2, of the same opcode, on neither: not passed over.
        comparison.packet(
            "frame 2",
            &fields,
            &ours(&[("infiniband.bth.opcode", 10.into())]),
            &theirs(&[("infiniband.bth.opcode", "0x0a")]),
            Some(10),
        );
        assert!(comparison.disagreements.is_empty());
        assert_eq!(
            comparison.missing_for_their_opcode(),
            ["frame 2 infiniband.reth.dmalen: neither decoder shows it"]
        );
        // A field no packet showed is named too.
        let more = ["infiniband.bth.opcode", "infiniband.deth.q_key"];
        assert_eq!(comparison.never_compared(&more), ["infiniband.deth.q_key"]);
    }
}
