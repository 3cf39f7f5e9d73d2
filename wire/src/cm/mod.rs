//! The InfiniBand Communication Manager (IBTA volume 1, chapter 12) as it runs on RoCE: the
//! messages two CMs exchange in management datagrams on QP1 to connect two QPs (REQ, MRA, REP,
//! RTU, or REJ), to disconnect them (DREQ, DREP), and to resolve a UD service (SIDR REQ and
//! REP). librdmacm's programs (rping, ucmatose, perftest `-R`, NVMe-oF, ...) connect this way,
//! with IP addresses in the REQ's private data ([`crate::cma`]).
//!
//! Each message has a file: a zero-copy `Packet` view over the 232 bytes of MAD data, with
//! offsets as IBTA's tables (and Linux's `ibta_vol1_c12.h`) give them, and a `Repr`. [`Repr`]
//! is a whole CM MAD: the transaction ID and one [`Message`]; [`frame_repr`] is the UD
//! SEND_ONLY to QP1 that carries one, so a CM agent builds its frames with
//! `frame_repr(...).emit_with(buf, |mad| cm.emit(mad))`, and [`parse_frame`] reads the
//! message out of a received frame.

use core::fmt;

use crate::error::{malformed, Error, Layer};
use crate::frame::{EthernetRepr, Extensions, Frame, FrameRepr, NetworkRepr};
use crate::mad::{self, Class, Method, BASE_VERSION, GSI_QKEY, GSI_QPN, MAD_LEN};
use crate::opcode::{Kind, Opcode, Transport};
use crate::{bth, deth};

/// Getters and setters for the fixed fields of a message view, one row each:
/// `getter / setter: kind(offset[, mask])`, offsets from the start of the MAD data. Kinds:
/// `u8`, `u16`, `u24` (a QPN or PSN, as `u32`), `u32`, `u64`, `bits` (the bits of `mask` in one
/// byte, shifted down), `flag` (one bit) and `gid` (16 bytes, as an IPv6 address).
macro_rules! message_fields {
    ($($(#[$doc:meta])* $get:ident / $set:ident : $kind:ident ($($arg:expr),+);)*) => {
        impl<T: AsRef<[u8]>> Packet<T> {
            $($(#[$doc])*
            pub fn $get(&self) -> message_fields!(@type $kind) {
                message_fields!(@get self.bytes(), $kind, $($arg),+)
            })*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $(pub fn $set(&mut self, value: message_fields!(@type $kind)) {
                message_fields!(@set self.bytes_mut(), value, $kind, $($arg),+)
            })*
        }
    };
    (@type u8) => { u8 };
    (@type u16) => { u16 };
    (@type u24) => { u32 };
    (@type u32) => { u32 };
    (@type u64) => { u64 };
    (@type bits) => { u8 };
    (@type flag) => { bool };
    (@type gid) => { $crate::Ipv6Address };
    (@get $b:expr, u8, $at:expr) => { $b[$at] };
    (@get $b:expr, u16, $at:expr) => { $crate::be::u16(&$b[$at..$at + 2]) };
    (@get $b:expr, u24, $at:expr) => { $crate::be::u24(&$b[$at..$at + 3]) };
    (@get $b:expr, u32, $at:expr) => { $crate::be::u32(&$b[$at..$at + 4]) };
    (@get $b:expr, u64, $at:expr) => { $crate::be::u64(&$b[$at..$at + 8]) };
    (@get $b:expr, bits, $at:expr, $mask:expr) => { $crate::cm::get_bits($b[$at], $mask) };
    (@get $b:expr, flag, $at:expr, $mask:expr) => { $b[$at] & $mask != 0 };
    (@get $b:expr, gid, $at:expr) => { $crate::cm::gid(&$b[$at..$at + 16]) };
    (@set $b:expr, $v:expr, u8, $at:expr) => { $b[$at] = $v };
    (@set $b:expr, $v:expr, u16, $at:expr) => { $crate::be::set_u16(&mut $b[$at..$at + 2], $v) };
    (@set $b:expr, $v:expr, u24, $at:expr) => { $crate::be::set_u24(&mut $b[$at..$at + 3], $v) };
    (@set $b:expr, $v:expr, u32, $at:expr) => { $crate::be::set_u32(&mut $b[$at..$at + 4], $v) };
    (@set $b:expr, $v:expr, u64, $at:expr) => { $crate::be::set_u64(&mut $b[$at..$at + 8], $v) };
    (@set $b:expr, $v:expr, bits, $at:expr, $mask:expr) => {
        $crate::cm::set_bits(&mut $b[$at], $mask, $v)
    };
    (@set $b:expr, $v:expr, flag, $at:expr, $mask:expr) => {
        $crate::cm::set_bits(&mut $b[$at], $mask, u8::from($v))
    };
    (@set $b:expr, $v:expr, gid, $at:expr) => { $b[$at..$at + 16].copy_from_slice(&$v.octets()) };
}

/// A message's private data: `PRIVATE_DATA_LEN` bytes from `$at` of the MAD data, and the
/// view's accessors for them.
macro_rules! private_data {
    ($at:expr, $len:expr) => {
        /// Bytes of private data the message carries.
        pub const PRIVATE_DATA_LEN: usize = $len;

        impl<T: AsRef<[u8]>> Packet<T> {
            pub fn private_data(&self) -> &[u8] {
                &self.bytes()[$at..$at + PRIVATE_DATA_LEN]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            pub fn private_data_mut(&mut self) -> &mut [u8] {
                &mut self.bytes_mut()[$at..$at + PRIVATE_DATA_LEN]
            }
        }
    };
}

/// The whole of a message that holds nothing but the two communication IDs and 224 bytes of
/// private data (RTU and DREP): its view and its `Repr`.
macro_rules! ids_and_private_data_message {
    () => {
        use crate::error::{Error, Layer};
        use crate::view::fixed_header_view;

        use super::PrivateData;

        fixed_header_view!(Layer::Cm, crate::mad::DATA_LEN);

        message_fields! {
            local_comm_id / set_local_comm_id: u32(0);
            remote_comm_id / set_remote_comm_id: u32(4);
        }

        private_data!(8, 224);

        /// A parsed message.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct Repr {
            pub local_comm_id: u32,
            pub remote_comm_id: u32,
            pub private_data: PrivateData<PRIVATE_DATA_LEN>,
        }

        impl Repr {
            pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
                packet.check_len()?;
                Ok(Repr {
                    local_comm_id: packet.local_comm_id(),
                    remote_comm_id: packet.remote_comm_id(),
                    private_data: PrivateData::read(packet.private_data()),
                })
            }

            pub const fn buffer_len(&self) -> usize {
                HEADER_LEN
            }

            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
                packet.set_local_comm_id(self.local_comm_id);
                packet.set_remote_comm_id(self.remote_comm_id);
                packet
                    .private_data_mut()
                    .copy_from_slice(self.private_data.as_bytes());
            }
        }
    };
}

pub mod drep;
pub mod dreq;
pub mod mra;
mod path;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr_rep;
pub mod sidr_req;

pub use path::Path;

/// The CM's class version (IBTA 1.2 and later).
pub const CLASS_VERSION: u8 = 2;

/// A CM time (a response timeout, a service timeout, the local ACK timeout, the target ACK
/// delay): 4.096 µs × 2^`exponent`, the 5-bit code the messages carry (31 is about 2.4 hours).
pub const fn timeout(exponent: u8) -> core::time::Duration {
    core::time::Duration::from_nanos(4096u64 << (exponent & 0x1f))
}

/// The bits of `mask` in `byte`, shifted down.
pub(crate) fn get_bits(byte: u8, mask: u8) -> u8 {
    (byte & mask) >> mask.trailing_zeros()
}

/// Puts `value` into the bits of `mask` in `byte`, leaving the others.
pub(crate) fn set_bits(byte: &mut u8, mask: u8, value: u8) {
    *byte = (*byte & !mask) | ((value << mask.trailing_zeros()) & mask);
}

/// Sixteen bytes as a GID.
pub(crate) fn gid(bytes: &[u8]) -> crate::Ipv6Address {
    let mut octets = [0u8; 16];
    octets.copy_from_slice(&bytes[..16]);
    crate::Ipv6Address::from(octets)
}

/// A message's private data: the bytes the CM carries for its user, zero-filled to the
/// message's fixed size `N` (92 in a REQ, 196 in a REP, ...).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrivateData<const N: usize>(pub [u8; N]);

impl<const N: usize> PrivateData<N> {
    /// The room the message has.
    pub const LEN: usize = N;

    /// `bytes`, zero-filled to `N`; an error if they do not fit.
    pub fn from_slice(bytes: &[u8]) -> Result<PrivateData<N>, Error> {
        if bytes.len() > N {
            return Err(malformed(
                Layer::Cm,
                "private data length",
                bytes.len() as u64,
                "longer than the message has room for",
            ));
        }
        let mut data = [0u8; N];
        data[..bytes.len()].copy_from_slice(bytes);
        Ok(PrivateData(data))
    }

    pub fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }

    /// The bytes up to the last non-zero one: what the sender most likely gave.
    pub fn trimmed(&self) -> &[u8] {
        let end = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        &self.0[..end]
    }

    pub(crate) fn read(bytes: &[u8]) -> PrivateData<N> {
        let mut data = [0u8; N];
        data.copy_from_slice(&bytes[..N]);
        PrivateData(data)
    }
}

impl<const N: usize> Default for PrivateData<N> {
    fn default() -> PrivateData<N> {
        PrivateData([0; N])
    }
}

impl<const N: usize> fmt::Debug for PrivateData<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateData<{N}>[")?;
        for b in self.trimmed() {
            write!(f, "{b:02x}")?;
        }
        f.write_str("]")
    }
}

/// CM attribute IDs (IBTA table 105): which message a CM MAD holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttributeId(pub u16);

impl AttributeId {
    pub const CLASS_PORT_INFO: AttributeId = AttributeId(0x0001);
    pub const REQ: AttributeId = AttributeId(0x0010);
    pub const MRA: AttributeId = AttributeId(0x0011);
    pub const REJ: AttributeId = AttributeId(0x0012);
    pub const REP: AttributeId = AttributeId(0x0013);
    pub const RTU: AttributeId = AttributeId(0x0014);
    pub const DREQ: AttributeId = AttributeId(0x0015);
    pub const DREP: AttributeId = AttributeId(0x0016);
    pub const SIDR_REQ: AttributeId = AttributeId(0x0017);
    pub const SIDR_REP: AttributeId = AttributeId(0x0018);
    pub const LAP: AttributeId = AttributeId(0x0019);
    pub const APR: AttributeId = AttributeId(0x001a);

    /// The message's short name, as the spec and Linux call it.
    pub fn name(self) -> &'static str {
        match self {
            AttributeId::CLASS_PORT_INFO => "ClassPortInfo",
            AttributeId::REQ => "REQ",
            AttributeId::MRA => "MRA",
            AttributeId::REJ => "REJ",
            AttributeId::REP => "REP",
            AttributeId::RTU => "RTU",
            AttributeId::DREQ => "DREQ",
            AttributeId::DREP => "DREP",
            AttributeId::SIDR_REQ => "SIDR_REQ",
            AttributeId::SIDR_REP => "SIDR_REP",
            AttributeId::LAP => "LAP",
            AttributeId::APR => "APR",
            _ => "unknown",
        }
    }

    /// What the message does, in words.
    pub fn meaning(self) -> &'static str {
        match self {
            AttributeId::CLASS_PORT_INFO => "the CM's class port information",
            AttributeId::REQ => "connection request",
            AttributeId::MRA => "message receipt acknowledgement: the answer will take longer",
            AttributeId::REJ => "connection rejected",
            AttributeId::REP => "connection reply",
            AttributeId::RTU => "ready to use",
            AttributeId::DREQ => "disconnection request",
            AttributeId::DREP => "disconnection reply",
            AttributeId::SIDR_REQ => "service ID resolution request (UD)",
            AttributeId::SIDR_REP => "service ID resolution reply (UD)",
            AttributeId::LAP => "load alternate path",
            AttributeId::APR => "alternate path response",
            _ => "not a CM attribute",
        }
    }
}

impl fmt::Display for AttributeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which message an MRA or a REJ answers (the 2-bit "message MRAed" / "message rejected").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    Req,
    Rep,
    /// LAP in an MRA; "other" in a REJ.
    Other,
    Reserved,
}

impl MessageKind {
    pub fn from_bits(bits: u8) -> MessageKind {
        match bits & 0x3 {
            0 => MessageKind::Req,
            1 => MessageKind::Rep,
            2 => MessageKind::Other,
            _ => MessageKind::Reserved,
        }
    }

    pub fn to_bits(self) -> u8 {
        match self {
            MessageKind::Req => 0,
            MessageKind::Rep => 1,
            MessageKind::Other => 2,
            MessageKind::Reserved => 3,
        }
    }
}

/// The transport service a REQ asks for (its 2-bit "transport service type"; RC, UC or RD,
/// and 3 for XRC, which the extended transport type then names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceType {
    Rc,
    Uc,
    Rd,
    Extended,
}

impl ServiceType {
    pub fn from_bits(bits: u8) -> ServiceType {
        match bits & 0x3 {
            0 => ServiceType::Rc,
            1 => ServiceType::Uc,
            2 => ServiceType::Rd,
            _ => ServiceType::Extended,
        }
    }

    pub fn to_bits(self) -> u8 {
        self as u8
    }

    pub fn name(self) -> &'static str {
        [
            "RC",
            "UC",
            "RD",
            "extended (see the extended transport type)",
        ][self as usize]
    }
}

/// One CM message, as its attribute ID says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Message {
    Req(req::Repr),
    Mra(mra::Repr),
    Rej(rej::Repr),
    Rep(rep::Repr),
    Rtu(rtu::Repr),
    Dreq(dreq::Repr),
    Drep(drep::Repr),
    SidrReq(sidr_req::Repr),
    SidrRep(sidr_rep::Repr),
}

impl Message {
    pub fn attribute_id(&self) -> AttributeId {
        match self {
            Message::Req(_) => AttributeId::REQ,
            Message::Mra(_) => AttributeId::MRA,
            Message::Rej(_) => AttributeId::REJ,
            Message::Rep(_) => AttributeId::REP,
            Message::Rtu(_) => AttributeId::RTU,
            Message::Dreq(_) => AttributeId::DREQ,
            Message::Drep(_) => AttributeId::DREP,
            Message::SidrReq(_) => AttributeId::SIDR_REQ,
            Message::SidrRep(_) => AttributeId::SIDR_REP,
        }
    }

    /// Reads the message `attribute` names from the MAD data.
    pub fn parse(attribute: AttributeId, data: &[u8]) -> Result<Message, Error> {
        Ok(match attribute {
            AttributeId::REQ => Message::Req(req::Repr::parse(&req::Packet::new_checked(data)?)?),
            AttributeId::MRA => Message::Mra(mra::Repr::parse(&mra::Packet::new_checked(data)?)?),
            AttributeId::REJ => Message::Rej(rej::Repr::parse(&rej::Packet::new_checked(data)?)?),
            AttributeId::REP => Message::Rep(rep::Repr::parse(&rep::Packet::new_checked(data)?)?),
            AttributeId::RTU => Message::Rtu(rtu::Repr::parse(&rtu::Packet::new_checked(data)?)?),
            AttributeId::DREQ => {
                Message::Dreq(dreq::Repr::parse(&dreq::Packet::new_checked(data)?)?)
            }
            AttributeId::DREP => {
                Message::Drep(drep::Repr::parse(&drep::Packet::new_checked(data)?)?)
            }
            AttributeId::SIDR_REQ => Message::SidrReq(sidr_req::Repr::parse(
                &sidr_req::Packet::new_checked(data)?,
            )?),
            AttributeId::SIDR_REP => Message::SidrRep(sidr_rep::Repr::parse(
                &sidr_rep::Packet::new_checked(data)?,
            )?),
            other => {
                return Err(malformed(
                    Layer::Mad,
                    "attribute ID",
                    other.0.into(),
                    "not a CM message used on RoCE (LAP, APR and ClassPortInfo are not)",
                ))
            }
        })
    }

    /// Writes the message into MAD data of [`mad::DATA_LEN`] bytes, reserved bits zero.
    pub fn emit(&self, data: &mut [u8]) {
        let data = &mut data[..mad::DATA_LEN];
        data.fill(0);
        match self {
            Message::Req(r) => r.emit(&mut req::Packet::new_unchecked(data)),
            Message::Mra(r) => r.emit(&mut mra::Packet::new_unchecked(data)),
            Message::Rej(r) => r.emit(&mut rej::Packet::new_unchecked(data)),
            Message::Rep(r) => r.emit(&mut rep::Packet::new_unchecked(data)),
            Message::Rtu(r) => r.emit(&mut rtu::Packet::new_unchecked(data)),
            Message::Dreq(r) => r.emit(&mut dreq::Packet::new_unchecked(data)),
            Message::Drep(r) => r.emit(&mut drep::Packet::new_unchecked(data)),
            Message::SidrReq(r) => r.emit(&mut sidr_req::Packet::new_unchecked(data)),
            Message::SidrRep(r) => r.emit(&mut sidr_rep::Packet::new_unchecked(data)),
        }
    }
}

/// A whole CM MAD: the header's transaction ID (which ties a reply to its request and lets a
/// receiver spot a retransmission) and the message. The rest of the header is fixed for the
/// CM: base version 1, class 0x07, class version 2, method Send, status 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub transaction_id: u64,
    pub message: Message,
}

impl Repr {
    /// Parses a CM MAD, refusing any other class, version or method.
    pub fn parse<T: AsRef<[u8]>>(packet: &mad::Packet<T>) -> Result<Repr, Error> {
        let header = mad::Repr::parse(packet)?;
        let wrong =
            |field, value: u8, reason| Err(malformed(Layer::Mad, field, value.into(), reason));
        if header.base_version != BASE_VERSION {
            return wrong("base version", header.base_version, "not 1");
        }
        if header.mgmt_class != Class::CM {
            return wrong(
                "management class",
                header.mgmt_class.0,
                "not the CM's (0x07)",
            );
        }
        if header.class_version != CLASS_VERSION {
            return wrong("class version", header.class_version, "not the CM's (2)");
        }
        if header.method != Method::SEND {
            return wrong(
                "method",
                header.method.0,
                "the CM sends its messages with Send (0x03)",
            );
        }
        let message = Message::parse(AttributeId(header.attribute_id), packet.data())?;
        Ok(Repr {
            transaction_id: header.transaction_id,
            message,
        })
    }

    /// The MAD header this message goes out with.
    pub fn header(&self) -> mad::Repr {
        mad::Repr {
            base_version: BASE_VERSION,
            mgmt_class: Class::CM,
            class_version: CLASS_VERSION,
            method: Method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id: self.transaction_id,
            attribute_id: self.message.attribute_id().0,
            attribute_modifier: 0,
        }
    }

    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes the whole MAD into the first [`MAD_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        let mut packet = mad::Packet::new_unchecked(&mut buf[..MAD_LEN]);
        self.header().emit(&mut packet);
        self.message.emit(packet.data_mut());
    }
}

/// The CM message a received frame carries: `None` for a frame that is not a datagram to QP1
/// (not the CM's to handle); `Some(Err)` for one to QP1 that the CM must drop — a Q_Key other
/// than the GSI's, or a MAD that is not a CM message this crate reads.
pub fn parse_frame(frame: &Frame) -> Option<Result<Repr, Error>> {
    let deth = frame.repr.ext.deth?;
    if frame.repr.bth.dest_qp != GSI_QPN {
        return None;
    }
    if deth.q_key != GSI_QKEY {
        return Some(Err(malformed(
            Layer::Deth,
            "Q_Key",
            deth.q_key.into(),
            "a datagram to QP1 must carry the GSI's Q_Key, 0x80010000",
        )));
    }
    Some(mad::Packet::new_checked(frame.payload()).and_then(|packet| Repr::parse(&packet)))
}

/// The frame that carries one MAD to a peer's GSI: a UD SEND_ONLY to QP1 from QP1, P_Key
/// 0xffff, DETH Q_Key 0x80010000, [`MAD_LEN`] bytes of payload, with the caller's addresses and
/// PSN (each QP1 counts its own). Emit it with
/// `frame_repr(..).emit_with(buf, |mad| cm.emit(mad))`.
pub fn frame_repr(ethernet: Option<EthernetRepr>, network: NetworkRepr, psn: u32) -> FrameRepr {
    let op = Opcode::new(Transport::Ud, Kind::SendOnly).expect("UD SEND_ONLY exists");
    let mut ext = Extensions::for_opcode(op);
    ext.deth = Some(deth::Repr {
        q_key: GSI_QKEY,
        src_qp: GSI_QPN,
    });
    FrameRepr {
        ethernet,
        network,
        bth: bth::Repr::new(op, GSI_QPN, psn),
        ext,
        payload_len: MAD_LEN,
    }
}

#[cfg(test)]
mod tests;
