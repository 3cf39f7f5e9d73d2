//! What perftest says over TCP ("Data ex. method: Ethernet"), byte for byte: its version, two
//! system values, the MTU, 108-byte QP records, the bandwidth report, and `done`. Numbers in
//! binary messages are big-endian; doubles travel as their bits, byte-swapped the same way.

use roce_nic::verbs::{Gid, Mtu};

/// The version string this implementation speaks (that of perftest 4.5-0.17, Debian 12's),
/// NUL-padded to 16 bytes.
pub const VERSION: &str = "6.06";
pub const VERSION_LEN: usize = 16;
/// perftest refuses peers older than this.
pub const OLDEST_PEER: f64 = 5.70;
/// One QP record with a GID, its NUL included.
pub const RECORD_LEN: usize = 108;
/// One QP record as `-R` sends it: perftest's `struct pingpong_dest`, binary.
pub const BINARY_RECORD_LEN: usize = 56;
pub const DONE: &[u8; 5] = b"done\0";

pub fn version() -> [u8; VERSION_LEN] {
    let mut v = [0u8; VERSION_LEN];
    v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    v
}

/// The peer's version as perftest reads it (`atof` of the string), refused below 5.70.
pub fn peer_version(bytes: &[u8]) -> Result<f64, String> {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    let text = String::from_utf8_lossy(&bytes[..end]);
    match text.trim().parse::<f64>() {
        Ok(v) if v >= OLDEST_PEER => Ok(v),
        _ => Err(format!(
            "the version {text:?}, and perftest speaks with {OLDEST_PEER} or newer only"
        )),
    }
}

/// An `int` as perftest sends it.
pub fn int(value: u32) -> [u8; 4] {
    value.to_be_bytes()
}

pub fn read_int(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes.try_into().unwrap_or([0; 4]))
}

/// The path MTU as perftest's one-digit enum and a NUL ("3" is 1024).
pub fn mtu(mtu: Mtu) -> [u8; 2] {
    [b'0' + mtu as u8, 0]
}

/// The peer's MTU message. perftest ignores a value that is not an MTU, and so does this.
pub fn read_mtu(bytes: &[u8]) -> Option<Mtu> {
    match bytes {
        [digit, ..] if digit.is_ascii_digit() => Mtu::from_u8(digit - b'0'),
        _ => None,
    }
}

/// One QP's record: where to send, from which PSN, and (for RDMA) which memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpRecord {
    pub lid: u16,
    /// Outstanding RDMA READs/atomics the sender accepts (its responder resources).
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: Gid,
    /// SRQ/XRC/DC number; 0 for plain RC.
    pub srqn: u32,
}

impl QpRecord {
    /// `LLLL:OOOO:QQQQQQ:PPPPPP:RRRRRRRR:VVVVVVVVVVVVVVVV:g0:…:g15:SSSSSSSS:` and a NUL.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for byte in self.gid.0 {
            text.push_str(&format!("{byte:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        let mut record = [0u8; RECORD_LEN];
        record[..text.len()].copy_from_slice(text.as_bytes());
        record
    }

    /// Reads a record field by field at its colons, as perftest does (widths unchecked).
    pub fn decode(record: &[u8]) -> Result<QpRecord, String> {
        let end = record.iter().position(|b| *b == 0).unwrap_or(record.len());
        let text = std::str::from_utf8(&record[..end])
            .map_err(|_| format!("a QP record that is not text: {record:02x?}"))?;
        let bad = || format!("the QP record {text:?}, which perftest would not read");
        let fields: Vec<&str> = text.split(':').collect();
        // 6 numbers, 16 GID bytes, the SRQ number, and what follows the last colon.
        if fields.len() != 24 || !fields[23].is_empty() {
            return Err(bad());
        }
        let hex = |i: usize, max: u64| {
            u64::from_str_radix(fields[i], 16)
                .ok()
                .filter(|v| *v <= max)
                .ok_or_else(bad)
        };
        let mut gid = [0u8; 16];
        for (i, byte) in gid.iter_mut().enumerate() {
            *byte = hex(6 + i, 0xff)? as u8;
        }
        Ok(QpRecord {
            lid: hex(0, 0xffff)? as u16,
            out_reads: hex(1, 0xffff)? as u16,
            qpn: hex(2, 0xff_ffff)? as u32,
            psn: hex(3, 0xff_ffff)? as u32,
            rkey: hex(4, 0xffff_ffff)? as u32,
            vaddr: hex(5, u64::MAX)?,
            gid: Gid(gid),
            srqn: hex(22, 0xffff_ffff)? as u32,
        })
    }
}

impl QpRecord {
    /// The record as perftest sends it over the RDMA CM (`-R`): its `struct pingpong_dest`,
    /// every number big-endian — LID, outstanding reads, QPN, PSN, rkey (32 bits each), 4
    /// bytes of padding, the VA (64), the GID, the SRQ number and the GID index (32 each).
    pub fn encode_binary(&self, gid_index: u8) -> [u8; BINARY_RECORD_LEN] {
        let mut record = [0u8; BINARY_RECORD_LEN];
        let words = [
            u32::from(self.lid),
            u32::from(self.out_reads),
            self.qpn,
            self.psn,
            self.rkey,
        ];
        for (at, word) in words.iter().enumerate() {
            record[4 * at..4 * at + 4].copy_from_slice(&word.to_be_bytes());
        }
        record[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        record[32..48].copy_from_slice(&self.gid.0);
        record[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        record[52..56].copy_from_slice(&u32::from(gid_index).to_be_bytes());
        record
    }

    /// Reads a binary record as perftest does: the numbers it reads (not the SRQ number or
    /// the GID index), each cut to the width the text record gives it.
    pub fn decode_binary(record: &[u8]) -> Result<QpRecord, String> {
        if record.len() != BINARY_RECORD_LEN {
            return Err(format!(
                "a QP record of {} bytes, not {BINARY_RECORD_LEN}",
                record.len()
            ));
        }
        let word = |at: usize| u32::from_be_bytes(record[4 * at..4 * at + 4].try_into().unwrap());
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&record[32..48]);
        Ok(QpRecord {
            lid: word(0) as u16,
            out_reads: word(1) as u16,
            qpn: word(2) & 0xff_ffff,
            psn: word(3) & 0xff_ffff,
            rkey: word(4),
            vaddr: u64::from_be_bytes(record[24..32].try_into().unwrap()),
            gid: Gid(gid),
            srqn: word(12),
        })
    }
}

/// What a bandwidth test's client reports to its server after the run (the server prints it).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    pub size: u64,
    pub iters: u64,
    /// MB/s (2^20 bytes per second); Gb/s (10^9 bits per second) after
    /// [`BwReport::in_gbits`]. Either way, what the side prints is what it sends its peer.
    pub peak: f64,
    pub average: f64,
    /// Millions of messages per second.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five 8-byte messages, in the order they are exchanged.
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.peak.to_bits().to_be_bytes(),
            self.average.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    pub fn decode(parts: &[[u8; 8]; 5]) -> BwReport {
        let double = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        BwReport {
            size: u64::from_be_bytes(parts[0]),
            iters: u64::from_be_bytes(parts[1]),
            peak: double(parts[2]),
            average: double(parts[3]),
            msg_rate: double(parts[4]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest_gid() -> Gid {
        Gid::from("10.77.0.2".parse::<std::net::Ipv4Addr>().unwrap())
    }

    #[test]
    fn a_record_is_the_108_bytes_seen_from_a_real_guest() {
        let record = QpRecord {
            lid: 0,
            out_reads: 1,
            qpn: 0x12,
            psn: 0xfa166e,
            rkey: 0x355,
            vaddr: 0x7fbb84eb1000,
            gid: guest_gid(),
            srqn: 0,
        };
        let bytes = record.encode();
        let text = "0000:0001:000012:fa166e:00000355:00007fbb84eb1000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:";
        assert_eq!(text.len(), RECORD_LEN - 1);
        assert_eq!(&bytes[..RECORD_LEN - 1], text.as_bytes());
        assert_eq!(bytes[RECORD_LEN - 1], 0);
        assert_eq!(QpRecord::decode(&bytes), Ok(record));
    }

    #[test]
    fn a_binary_record_is_the_56_bytes_seen_from_a_real_guest() {
        // ib_write_bw -R in a Soft-RoCE guest (its padding bytes zeroed here).
        let seen = "000000000000000100000012007bbf57000003b0000000000000558274b57000\
                    00000000000000000000ffff0a4d00020000000000000001";
        let bytes: Vec<u8> = (0..seen.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&seen[i..i + 2], 16).unwrap())
            .collect();
        let record = QpRecord {
            lid: 0,
            out_reads: 1,
            qpn: 0x12,
            psn: 0x7bbf57,
            rkey: 0x3b0,
            vaddr: 0x5582_74b5_7000,
            gid: guest_gid(),
            srqn: 0,
        };
        assert_eq!(record.encode_binary(1).as_slice(), bytes.as_slice());
        assert_eq!(QpRecord::decode_binary(&bytes), Ok(record));
        assert!(QpRecord::decode_binary(&bytes[..55]).is_err());
    }

    #[test]
    fn malformed_records_are_refused() {
        let good = QpRecord {
            gid: guest_gid(),
            ..QpRecord::default()
        }
        .encode();
        let text = std::str::from_utf8(&good[..RECORD_LEN - 1]).unwrap();
        let short = &text[..text.len() - 10];
        let trailing = format!("{text}x");
        let not_hex = text.replacen("0000", "zzzz", 1);
        for bad in [short, trailing.as_str(), not_hex.as_str(), ""] {
            assert!(QpRecord::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(QpRecord::decode(&[0xff; RECORD_LEN]).is_err());
    }

    #[test]
    fn versions_mtus_and_ints_travel_as_perftest_sends_them() {
        assert_eq!(&version()[..5], b"6.06\0");
        assert_eq!(peer_version(&version()), Ok(6.06));
        assert!(peer_version(b"5.60\0").is_err());
        assert!(peer_version(b"junk").is_err());
        assert_eq!(int(4096), [0, 0, 0x10, 0]);
        assert_eq!(read_int(&[0, 0, 0, 0x40]), 64);
        assert_eq!(mtu(Mtu::M1024), *b"3\0");
        assert_eq!(read_mtu(b"5\0"), Some(Mtu::M4096));
        assert_eq!(read_mtu(b"9\0"), None);
    }

    #[test]
    fn reports_are_big_endian_and_round_trip() {
        let report = BwReport {
            size: 65536,
            iters: 200,
            peak: 13.71,
            average: 9.63,
            msg_rate: 0.000154,
        };
        let parts = report.encode();
        assert_eq!(parts[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(parts[1], [0, 0, 0, 0, 0, 0, 0, 0xc8]);
        assert_eq!(parts[3], 9.63f64.to_bits().to_be_bytes());
        assert_eq!(BwReport::decode(&parts), report);
    }
}
