//! Real captures from other implementations (hardware RNICs and Linux Soft-RoCE) in
//! `../shared/captures/`: every RoCE packet in them decodes, with a good ICRC.

use std::collections::BTreeMap;

use roce_tests::{captures_under, shared_captures_dir, skip};
use roce_wire::capture;
use roce_wire::describe::Description;
use roce_wire::Error;

/// What each file holds: RoCE packets by opcode, and other packets.
fn expected(name: &str) -> Option<(Vec<(u8, usize)>, usize)> {
    Some(match name {
        "softroce-rc-pingpong.pcap" => (vec![(0x04, 2), (0x11, 2)], 11),
        "softroce-rc-read-request.pcap" => (vec![(0x0c, 1)], 0),
        "connectx4lx-cnp.pcap" => (vec![(0x81, 1)], 0),
        "rocev1-rc-rdma-write-only.pcap" => (vec![(0x0a, 1)], 0),
        "rocev1-rc-ack.pcap" => (vec![(0x11, 1)], 0),
        _ => return None,
    })
}

#[test]
fn real_captures_decode_with_every_icrc_good() {
    let dir = shared_captures_dir();
    let files = captures_under(&dir);
    if files.is_empty() {
        skip(&format!(
            "no captures in {}; the real-capture test did not run",
            dir.display()
        ));
        return;
    }
    for path in &files {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let mut reader = capture::open(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut opcodes: BTreeMap<u8, usize> = BTreeMap::new();
        let mut others = 0;
        while let Some(record) = reader.next_record() {
            let record = record.unwrap_or_else(|e| panic!("{name}: {e}"));
            match record.frame() {
                Ok(frame) => {
                    let check = Description::new(&frame).icrc();
                    assert!(check.is_ok(), "{name} frame {}: {check:x?}", record.number);
                    *opcodes.entry(frame.repr.bth.opcode.value()).or_default() += 1;
                }
                Err(Error::NotRoce(_)) => others += 1,
                Err(e) => panic!("{name} frame {}: {e}", record.number),
            }
        }
        assert!(!opcodes.is_empty(), "{name} has no RoCE packet");
        if let Some((expected_opcodes, expected_others)) = expected(&name) {
            assert_eq!(opcodes, expected_opcodes.into_iter().collect(), "{name}");
            assert_eq!(others, expected_others, "{name}");
        }
    }
}
