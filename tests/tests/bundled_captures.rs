//! The captures in `captures/` are what the project's emitter makes now, byte for byte, and they
//! decode as intended. After a deliberate change to the emitter or to `roce_tests::bundled`,
//! `ROCE_REGENERATE_CAPTURES=1 cargo test -p roce-tests --test bundled_captures` rewrites them.

use std::collections::BTreeMap;

use roce_tests::{bundled, captures_dir};
use roce_wire::capture::Reader;
use roce_wire::describe::Description;
use roce_wire::{cm, mad, Error, Opcode};

#[test]
fn committed_captures_equal_what_the_emitter_makes() {
    // Refused under CI, where a rewrite would let any change to the emitter pass.
    let regenerate = roce_tests::regenerate("ROCE_REGENERATE_CAPTURES");
    let mut stale = Vec::new();
    for capture in bundled::all() {
        let path = captures_dir().join(capture.path);
        if regenerate {
            std::fs::write(&path, &capture.bytes).expect("writing captures/");
            eprintln!("rewrote {}", path.display());
            continue;
        }
        match std::fs::read(&path) {
            Ok(committed) if committed == capture.bytes => {}
            _ => stale.push(capture.path),
        }
    }
    assert!(
        stale.is_empty(),
        "captures/{{{}}} differ from what the emitter makes now; if the change is intended, \
         run ROCE_REGENERATE_CAPTURES=1 cargo test -p roce-tests --test bundled_captures",
        stale.join(",")
    );
}

/// What one generated capture holds: opcodes seen, packets that are not RoCE, bad ICRCs.
struct Contents {
    opcodes: BTreeMap<u8, usize>,
    not_roce: usize,
    pad_counts: [usize; 4],
}

fn contents(bytes: &[u8]) -> Contents {
    let mut reader = Reader::new(bytes).expect("a capture");
    let mut contents = Contents {
        opcodes: BTreeMap::new(),
        not_roce: 0,
        pad_counts: [0; 4],
    };
    while let Some(record) = reader.next_record() {
        let record = record.expect("a whole record");
        match record.frame() {
            Ok(frame) => {
                let check = Description::new(&frame).icrc();
                assert!(check.is_ok(), "frame {}: {check:x?}", record.number);
                *contents
                    .opcodes
                    .entry(frame.repr.bth.opcode.value())
                    .or_default() += 1;
                contents.pad_counts[usize::from(frame.repr.bth.pad_count)] += 1;
            }
            Err(Error::NotRoce(_)) => contents.not_roce += 1,
            Err(e) => panic!("frame {}: {e}", record.number),
        }
    }
    contents
}

/// What `cm-messages.pcap` holds, frame by frame: the CM messages of a handshake, a teardown,
/// REQs with other addressing, three REJs, SIDR, and two CM MADs that are not handshake
/// messages.
const CM_MESSAGES: [&str; 16] = [
    "REQ",
    "MRA",
    "REP",
    "RTU",
    "DREQ",
    "DREP",
    "REQ",
    "REQ",
    "REJ",
    "REJ",
    "REJ",
    "SIDR_REQ",
    "SIDR_REP",
    "SIDR_REP",
    "not a message",
    "not a message",
];

/// The CM message each frame carries, by name.
fn cm_messages(bytes: &[u8]) -> Vec<&'static str> {
    let mut reader = Reader::new(bytes).expect("a capture");
    let mut names = Vec::new();
    while let Some(record) = reader.next_record() {
        let record = record.expect("a whole record");
        let frame = record.frame().expect("RoCE");
        let mad = mad::Packet::new_checked(frame.payload()).expect("a MAD");
        names.push(match cm::Repr::parse(&mad) {
            Ok(cm) => cm.message.attribute_id().name(),
            Err(_) => "not a message",
        });
    }
    names
}

#[test]
fn every_capture_decodes_with_good_icrcs_and_holds_what_its_name_says() {
    let every_opcode: BTreeMap<u8, usize> = Opcode::all().map(|op| (op.value(), 1)).collect();
    for capture in bundled::all() {
        let c = contents(&capture.bytes);
        match capture.path {
            "every-opcode-ipv4.pcap" => {
                let mut expected = every_opcode.clone();
                // The two SEND_ONLYs from source ports 53 and 69.
                *expected.entry(0x04).or_default() += 2;
                assert_eq!(c.opcodes, expected);
                assert_eq!(c.not_roce, 2, "the ARP request and the plain UDP datagram");
            }
            "every-opcode-ipv6.pcap" | "every-opcode-vlan.pcap" | "every-opcode-rocev1.pcap" => {
                assert_eq!(c.opcodes, every_opcode, "{}", capture.path)
            }
            "padding.pcap" => {
                assert_eq!(c.opcodes.values().sum::<usize>(), 35);
                assert!(c.pad_counts.iter().all(|&n| n >= 8), "{:?}", c.pad_counts);
            }
            "aeth-syndromes.pcap" => assert_eq!(c.opcodes, BTreeMap::from([(0x11, 16)])),
            "cm-messages.pcap" => {
                assert_eq!(c.opcodes, BTreeMap::from([(0x64, 16)]));
                assert_eq!(cm_messages(&capture.bytes), CM_MESSAGES);
            }
            "linux-cooked-sll.pcap" | "linux-cooked-sll2.pcap" | "two-interfaces.pcapng" => {
                assert_eq!(c.opcodes.values().sum::<usize>(), 12, "{}", capture.path)
            }
            other => panic!("{other} is not checked here"),
        }
        assert_eq!(
            c.not_roce,
            2 * usize::from(capture.path == "every-opcode-ipv4.pcap")
        );
    }
}
