//! The Ethernet header of a RoCE frame: addresses, an optional 802.1Q tag (see [`crate::vlan`])
//! and the Ethernet type that says what follows — IPv4 or IPv6 (RoCEv2) or a GRH (RoCEv1).
//! The addresses and type are read and written with `smoltcp::wire::EthernetFrame`.

use smoltcp::wire::{EthernetAddress, EthernetFrame, EthernetProtocol};

use crate::be;
use crate::error::{check_len, Error, Layer};
use crate::vlan::{VlanTag, TAG_LEN, VLAN_ETHERTYPE};

/// A MAC address as Linux prints it (`ip link`): six lower-case hex bytes with colons.
/// smoltcp's own `Display` uses dashes; every MAC the project prints goes through this one, so
/// logs, tables and `--neigh` arguments all read alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mac(pub EthernetAddress);

impl core::fmt::Display for Mac {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let [a, b, c, d, e, g] = self.0 .0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// Bytes of an Ethernet header without a tag.
pub const HEADER_LEN: usize = 14;

/// The Ethernet header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    pub dst: EthernetAddress,
    pub src: EthernetAddress,
    pub vlan: Option<VlanTag>,
}

impl EthernetRepr {
    pub fn header_len(&self) -> usize {
        HEADER_LEN + if self.vlan.is_some() { TAG_LEN } else { 0 }
    }

    /// Reads the header at the start of `bytes`: the repr, the Ethernet type of what follows
    /// (the inner one when tagged), and the tag's bytes if there is one.
    #[inline(always)]
    pub(crate) fn parse(
        bytes: &[u8],
    ) -> Result<(EthernetRepr, u16, Option<core::ops::Range<usize>>), Error> {
        check_len(Layer::Ethernet, HEADER_LEN, bytes.len())?;
        let mut ethertype = be::u16(&bytes[12..14]);
        let mut vlan = None;
        let mut tag_bytes = None;
        if ethertype == VLAN_ETHERTYPE {
            check_len(Layer::Vlan, HEADER_LEN + TAG_LEN, bytes.len())?;
            let (tag, inner) = VlanTag::parse(&bytes[HEADER_LEN..HEADER_LEN + TAG_LEN]);
            vlan = Some(tag);
            ethertype = inner;
            tag_bytes = Some(HEADER_LEN..HEADER_LEN + TAG_LEN);
        }
        // The addresses straight from the bytes: smoltcp's accessors are calls that check the
        // length again, on every packet decoded.
        let address = |at: usize| {
            let mut octets = [0; 6];
            octets.copy_from_slice(&bytes[at..at + 6]);
            EthernetAddress(octets)
        };
        let repr = EthernetRepr {
            dst: address(0),
            src: address(6),
            vlan,
        };
        Ok((repr, ethertype, tag_bytes))
    }

    /// Writes the header into the first [`EthernetRepr::header_len`] bytes of `buf`, announcing
    /// `ethertype` (behind the tag, when there is one).
    pub(crate) fn emit(&self, buf: &mut [u8], ethertype: u16) {
        let mut frame = EthernetFrame::new_unchecked(&mut *buf);
        frame.set_dst_addr(self.dst);
        frame.set_src_addr(self.src);
        match self.vlan {
            Some(tag) => {
                frame.set_ethertype(EthernetProtocol::Unknown(VLAN_ETHERTYPE));
                tag.emit(&mut buf[HEADER_LEN..HEADER_LEN + TAG_LEN], ethertype);
            }
            None => frame.set_ethertype(EthernetProtocol::from(ethertype)),
        }
    }
}
