//! The 802.1Q tag (4 bytes) between the Ethernet addresses and the Ethernet type: priority,
//! drop eligibility and VLAN ID. smoltcp does not model it; RoCE uses its priority for lossless
//! traffic classes (PFC), so the frame keeps it.
//!
//! ```text
//! TPID 0x8100 (16) | PCP (3) | DEI (1) | VID (12) | inner Ethernet type (16)
//! ```

use crate::be;

/// The Ethernet type that announces an 802.1Q tag.
pub const VLAN_ETHERTYPE: u16 = 0x8100;

/// Bytes the tag adds to the Ethernet header.
pub const TAG_LEN: usize = 4;

/// An 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    /// The tag control information: PCP, DEI and VID in one 16-bit word.
    pub fn tci(&self) -> u16 {
        (u16::from(self.pcp & 0x7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }

    pub fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    /// Reads the tag that follows the TPID: its TCI and the inner Ethernet type. `bytes` holds
    /// at least those four bytes.
    pub(crate) fn parse(bytes: &[u8]) -> (VlanTag, u16) {
        (
            VlanTag::from_tci(be::u16(&bytes[0..2])),
            be::u16(&bytes[2..4]),
        )
    }

    /// Writes the TCI and the inner Ethernet type into the four bytes after the TPID.
    pub(crate) fn emit(&self, buf: &mut [u8], ethertype: u16) {
        be::set_u16(&mut buf[0..2], self.tci());
        be::set_u16(&mut buf[2..4], ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tci_round_trips() {
        for tci in 0..=u16::MAX {
            assert_eq!(VlanTag::from_tci(tci).tci(), tci);
        }
    }
}
