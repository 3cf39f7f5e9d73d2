//! Management datagrams (MADs): the 256-byte messages that InfiniBand management runs on, sent
//! as UD SEND_ONLY packets to QP0 (subnet management) or QP1 (the General Services Interface,
//! GSI, with DETH Q_Key 0x80010000). On RoCE only QP1 exists, and what travels there is the
//! Communication Manager's (see [`crate::cm`]).
//!
//! The common header (24 bytes, IBTA 13.4.3):
//!
//! ```text
//!  0 base version (1) | management class | class version | method
//!  4 status (16)                          | class specific (16)
//!  8 transaction ID (64)
//! 16 attribute ID (16)                    | reserved (16)
//! 20 attribute modifier (32)
//! 24 class-specific data (232 bytes)
//! ```

use core::fmt;

use crate::be;
use crate::deth::GSI_Q_KEY;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

mod field {
    use core::ops::Range;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: Range<usize> = 4..6;
    pub const CLASS_SPECIFIC: Range<usize> = 6..8;
    pub const TRANSACTION_ID: Range<usize> = 8..16;
    pub const ATTRIBUTE_ID: Range<usize> = 16..18;
    pub const RESERVED: Range<usize> = 18..20;
    pub const ATTRIBUTE_MODIFIER: Range<usize> = 20..24;
}

fixed_header_view!(Layer::Mad, 24);

/// Bytes of a whole MAD: header and data.
pub const MAD_LEN: usize = 256;
/// Bytes of a MAD's class-specific data.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;
/// The only base version there is.
pub const BASE_VERSION: u8 = 1;
/// The QP that the General Services Interface (and so the CM) listens on.
pub const GSI_QPN: u32 = 1;
/// The Q_Key every GSI datagram carries (the same value as [`crate::deth::GSI_Q_KEY`]).
pub const GSI_QKEY: u32 = GSI_Q_KEY;

/// Management classes (IBTA table 139); the ones a RoCE port meets, and a few others by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class(pub u8);

impl Class {
    pub const SUBNET_LID_ROUTED: Class = Class(0x01);
    pub const SUBNET_ADMINISTRATION: Class = Class(0x03);
    pub const PERFORMANCE: Class = Class(0x04);
    pub const BOARD: Class = Class(0x05);
    pub const DEVICE: Class = Class(0x06);
    /// Communication Management: REQ, REP, RTU and the rest ([`crate::cm`]).
    pub const CM: Class = Class(0x07);
    pub const SNMP: Class = Class(0x08);
    pub const SUBNET_DIRECTED_ROUTE: Class = Class(0x81);

    pub fn name(self) -> &'static str {
        match self {
            Class::SUBNET_LID_ROUTED => "subnet management (LID routed)",
            Class::SUBNET_ADMINISTRATION => "subnet administration",
            Class::PERFORMANCE => "performance management",
            Class::BOARD => "baseboard management",
            Class::DEVICE => "device management",
            Class::CM => "communication management",
            Class::SNMP => "SNMP tunnelling",
            Class::SUBNET_DIRECTED_ROUTE => "subnet management (directed route)",
            _ => "other",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// MAD methods (IBTA table 140); the CM sends everything with [`Method::SEND`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Method(pub u8);

impl Method {
    pub const GET: Method = Method(0x01);
    pub const SET: Method = Method(0x02);
    pub const SEND: Method = Method(0x03);
    pub const TRAP: Method = Method(0x05);
    pub const REPORT: Method = Method(0x06);
    pub const TRAP_REPRESS: Method = Method(0x07);
    pub const GET_RESP: Method = Method(0x81);
    pub const REPORT_RESP: Method = Method(0x86);

    pub fn name(self) -> &'static str {
        match self {
            Method::GET => "Get",
            Method::SET => "Set",
            Method::SEND => "Send",
            Method::TRAP => "Trap",
            Method::REPORT => "Report",
            Method::TRAP_REPRESS => "TrapRepress",
            Method::GET_RESP => "GetResp",
            Method::REPORT_RESP => "ReportResp",
            _ => "other",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn base_version(&self) -> u8 {
        self.bytes()[field::BASE_VERSION]
    }
    pub fn mgmt_class(&self) -> Class {
        Class(self.bytes()[field::MGMT_CLASS])
    }
    pub fn class_version(&self) -> u8 {
        self.bytes()[field::CLASS_VERSION]
    }
    pub fn method(&self) -> Method {
        Method(self.bytes()[field::METHOD])
    }
    pub fn status(&self) -> u16 {
        be::u16(&self.bytes()[field::STATUS])
    }
    pub fn class_specific(&self) -> u16 {
        be::u16(&self.bytes()[field::CLASS_SPECIFIC])
    }
    pub fn transaction_id(&self) -> u64 {
        be::u64(&self.bytes()[field::TRANSACTION_ID])
    }
    pub fn attribute_id(&self) -> u16 {
        be::u16(&self.bytes()[field::ATTRIBUTE_ID])
    }
    pub fn attribute_modifier(&self) -> u32 {
        be::u32(&self.bytes()[field::ATTRIBUTE_MODIFIER])
    }
    /// The class-specific data after the header: whatever the buffer holds past byte 24 (232
    /// bytes in a whole MAD).
    pub fn data(&self) -> &[u8] {
        &self.bytes()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_base_version(&mut self, value: u8) {
        self.bytes_mut()[field::BASE_VERSION] = value
    }
    pub fn set_mgmt_class(&mut self, value: Class) {
        self.bytes_mut()[field::MGMT_CLASS] = value.0
    }
    pub fn set_class_version(&mut self, value: u8) {
        self.bytes_mut()[field::CLASS_VERSION] = value
    }
    pub fn set_method(&mut self, value: Method) {
        self.bytes_mut()[field::METHOD] = value.0
    }
    pub fn set_status(&mut self, value: u16) {
        be::set_u16(&mut self.bytes_mut()[field::STATUS], value)
    }
    pub fn set_class_specific(&mut self, value: u16) {
        be::set_u16(&mut self.bytes_mut()[field::CLASS_SPECIFIC], value)
    }
    pub fn set_transaction_id(&mut self, value: u64) {
        be::set_u64(&mut self.bytes_mut()[field::TRANSACTION_ID], value)
    }
    /// Sets the attribute ID and clears the reserved bytes after it.
    pub fn set_attribute_id(&mut self, value: u16) {
        be::set_u16(&mut self.bytes_mut()[field::ATTRIBUTE_ID], value);
        self.bytes_mut()[field::RESERVED].fill(0);
    }
    pub fn set_attribute_modifier(&mut self, value: u32) {
        be::set_u32(&mut self.bytes_mut()[field::ATTRIBUTE_MODIFIER], value)
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bytes_mut()[HEADER_LEN..]
    }
}

/// A parsed MAD common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub base_version: u8,
    pub mgmt_class: Class,
    pub class_version: u8,
    pub method: Method,
    pub status: u16,
    pub class_specific: u16,
    pub transaction_id: u64,
    pub attribute_id: u16,
    pub attribute_modifier: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            base_version: packet.base_version(),
            mgmt_class: packet.mgmt_class(),
            class_version: packet.class_version(),
            method: packet.method(),
            status: packet.status(),
            class_specific: packet.class_specific(),
            transaction_id: packet.transaction_id(),
            attribute_id: packet.attribute_id(),
            attribute_modifier: packet.attribute_modifier(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_base_version(self.base_version);
        packet.set_mgmt_class(self.mgmt_class);
        packet.set_class_version(self.class_version);
        packet.set_method(self.method);
        packet.set_status(self.status);
        packet.set_class_specific(self.class_specific);
        packet.set_transaction_id(self.transaction_id);
        packet.set_attribute_id(self.attribute_id);
        packet.set_attribute_modifier(self.attribute_modifier);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_clears_the_reserved_bytes() {
        let repr = Repr {
            base_version: BASE_VERSION,
            mgmt_class: Class::CM,
            class_version: 2,
            method: Method::SEND,
            status: 0x1234,
            class_specific: 0x5678,
            transaction_id: 0x0102_0304_0506_0708,
            attribute_id: 0x0010,
            attribute_modifier: 0x9abc_def0,
        };
        let mut buf = [0xffu8; MAD_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(
            buf[..HEADER_LEN],
            [
                1, 7, 2, 3, 0x12, 0x34, 0x56, 0x78, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x10, 0, 0, 0x9a,
                0xbc, 0xde, 0xf0
            ]
        );
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&packet), Ok(repr));
        assert_eq!(packet.data().len(), DATA_LEN);
        assert!(Packet::new_checked(&buf[..HEADER_LEN - 1]).is_err());
    }
}
