//! One QP's address as the pingpongs swap it: `LLLL:QQQQQQ:PPPPPP:GGGG…` and a NUL, 52 bytes —
//! LID, QP number and first PSN in hex, then the 16 raw GID bytes as 32 hex digits.

use std::fmt;

use roce_nic::verbs::Gid;

/// Bytes of one record on the wire, the NUL included.
pub const RECORD_LEN: usize = 52;

/// What the `done` a client sends after the records looks like on the wire.
pub const DONE: &[u8; 5] = b"done\0";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// 0 on RoCE; kept because the record has room for it.
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl Dest {
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.gid.to_hex()
        );
        let mut record = [0u8; RECORD_LEN];
        record[..text.len()].copy_from_slice(text.as_bytes());
        record
    }

    /// Reads a record the way the tools' `sscanf("%x:%x:%x:%s")` does — field widths are not
    /// checked — but insists on all 32 digits of the GID, which the tools take on trust.
    pub fn decode(record: &[u8]) -> Result<Dest, String> {
        let end = record.iter().position(|b| *b == 0).unwrap_or(record.len());
        let text = std::str::from_utf8(&record[..end])
            .map_err(|_| format!("an address record that is not text: {record:02x?}"))?;
        let bad = || format!("the address record {text:?}, which is not LID:QPN:PSN:GID");
        let mut fields = text.splitn(4, ':');
        let mut number = |max: u32| {
            fields
                .next()
                .and_then(|f| u32::from_str_radix(f, 16).ok())
                .filter(|v| *v <= max)
                .ok_or_else(bad)
        };
        let lid = number(0xffff)? as u16;
        let qpn = number(0xff_ffff)?;
        let psn = number(0xff_ffff)?;
        let gid = fields
            .next()
            .filter(|g| g.len() == 32)
            .and_then(Gid::parse)
            .ok_or_else(bad)?;
        Ok(Dest { lid, qpn, psn, gid })
    }
}

/// The line the tools print for an address (`local`/`remote`), with `sep` after the PSN — a
/// comma, or a colon for ibv_ud_pingpong's local line.
pub struct AddressLine<'a> {
    pub side: &'a str,
    pub dest: &'a Dest,
    pub sep: char,
}

impl fmt::Display for AddressLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pad = if self.side == "local" { "  " } else { " " };
        write!(
            f,
            "  {} address:{pad}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{} GID {}",
            self.side, self.dest.lid, self.dest.qpn, self.dest.psn, self.sep, self.dest.gid
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_the_52_bytes_seen_from_a_real_guest() {
        let dest = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0x8fe4ca,
            gid: Gid::from("10.77.0.2".parse::<std::net::Ipv4Addr>().unwrap()),
        };
        let record = dest.encode();
        assert_eq!(
            &record[..51],
            b"0000:000011:8fe4ca:00000000000000000000ffff0a4d0002"
        );
        assert_eq!(record[51], 0);
        assert_eq!(Dest::decode(&record), Ok(dest));
    }

    #[test]
    fn records_are_read_without_width_checks_but_whole() {
        let dest = Dest::decode(b"0:11:8fe4ca:00000000000000000000ffff0a4d0002\0").unwrap();
        assert_eq!((dest.qpn, dest.psn), (0x11, 0x8fe4ca));
        // srq_pingpong's unused records are all zeros, and decode as such.
        let zero = Dest::decode(b"0000:000000:000000:00000000000000000000000000000000\0");
        assert_eq!(zero, Ok(Dest::default()));
        for bad in [
            &b"0000:000011:8fe4ca\0"[..],
            b"0000:000011:8fe4ca:0a4d0002\0",
            b"0000:1000000:000000:00000000000000000000ffff0a4d0002\0",
            b"zz:000011:8fe4ca:00000000000000000000ffff0a4d0002\0",
            b"\xff\xfe",
            b"",
        ] {
            assert!(Dest::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn address_lines_read_like_the_tools() {
        let dest = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0x8fe4ca,
            gid: Gid::from("10.77.0.2".parse::<std::net::Ipv4Addr>().unwrap()),
        };
        let local = AddressLine {
            side: "local",
            dest: &dest,
            sep: ',',
        };
        assert_eq!(
            local.to_string(),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x8fe4ca, GID ::ffff:10.77.0.2"
        );
        let remote = AddressLine {
            side: "remote",
            dest: &dest,
            sep: ',',
        };
        assert!(remote
            .to_string()
            .starts_with("  remote address: LID 0x0000,"));
    }
}
