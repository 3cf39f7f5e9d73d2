//! What crossed the cable, from our NIC's capture: every RoCE frame the guest sent must parse
//! and carry a good ICRC (checked by roce-wire, independently of the NIC's receive path), and
//! the frames we sent are counted for comparison with the guest's `rcvd_pkts`.

use std::collections::BTreeMap;
use std::path::Path;

use pcap_file::pcap::PcapReader;
use roce_wire::{Error, Frame};

#[derive(Debug, Default)]
pub struct Wire {
    pub frames: u64,
    /// RoCE frames by sender (ours, the guest's) and opcode.
    pub ours: BTreeMap<u8, u64>,
    pub theirs: BTreeMap<u8, u64>,
    /// Guest frames that did not parse as RoCE or had a bad ICRC: what was wrong.
    pub bad: Vec<String>,
}

impl Wire {
    pub fn sent_by_us(&self) -> u64 {
        self.ours.values().sum()
    }

    pub fn sent_by_guest(&self) -> u64 {
        self.theirs.values().sum()
    }

    /// Adds another capture's counts.
    pub fn add(&mut self, other: &Wire) {
        self.frames += other.frames;
        for (mine, theirs) in [
            (&mut self.ours, &other.ours),
            (&mut self.theirs, &other.theirs),
        ] {
            for (opcode, n) in theirs {
                *mine.entry(*opcode).or_default() += n;
            }
        }
        self.bad.extend(other.bad.iter().cloned());
    }
}

/// Reads a capture of the cable.
pub fn inspect(pcap: &Path, our_mac: [u8; 6], guest_mac: [u8; 6]) -> Wire {
    let file =
        std::fs::File::open(pcap).unwrap_or_else(|e| panic!("cannot open {}: {e}", pcap.display()));
    let mut reader = PcapReader::new(file).expect("a pcap file");
    let mut wire = Wire::default();
    while let Some(packet) = reader.next_packet() {
        let packet = packet.expect("a whole pcap record");
        wire.frames += 1;
        let bytes = &packet.data;
        let from = |mac: [u8; 6]| bytes.len() >= 12 && bytes[6..12] == mac;
        match Frame::parse(bytes) {
            Ok(frame) => {
                let opcode = frame.repr.bth.opcode.value();
                if from(guest_mac) {
                    let check = frame.icrc();
                    if !check.is_ok() {
                        wire.bad.push(format!("frame {}: {check:x?}", wire.frames));
                    }
                    *wire.theirs.entry(opcode).or_default() += 1;
                } else if from(our_mac) {
                    *wire.ours.entry(opcode).or_default() += 1;
                }
            }
            Err(Error::NotRoce(_)) => {}
            Err(e) if from(guest_mac) => wire.bad.push(format!("frame {}: {e}", wire.frames)),
            Err(e) => panic!("frame {} of ours does not parse: {e}", wire.frames),
        }
    }
    wire
}

/// The host's count of UDP datagrams dropped because a socket's receive buffer was full
/// (`RcvbufErrors` in /proc/net/snmp): frames lost on the cable between two processes.
pub fn udp_receive_buffer_errors() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RcvbufErrors")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}
