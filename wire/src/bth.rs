//! Base Transport Header: 12 bytes that start every InfiniBand transport packet.
//!
//! ```text
//!  0        opcode
//!  1        SE | M | PadCnt(2) | TVer(4)
//!  2..4     P_Key
//!  4        FECN | BECN | reserved(6)        <- masked out of the ICRC
//!  5..8     DestQP (24 bits)
//!  8        AckReq | reserved(7)
//!  9..12    PSN (24 bits)
//! ```

use crate::be;
use crate::error::{check_len, Error, Layer};
use crate::opcode::Opcode;

mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const P_KEY: Range<usize> = 2..4;
    pub const ECN: usize = 4;
    pub const DEST_QP: Range<usize> = 5..8;
    pub const ACK_REQ: usize = 8;
    pub const PSN: Range<usize> = 9..12;
}

pub const HEADER_LEN: usize = 12;

/// The default partition key, the only one Soft-RoCE accepts.
pub const DEFAULT_P_KEY: u16 = 0xffff;

/// A zero-copy view of a BTH.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    pub fn check_len(&self) -> Result<(), Error> {
        check_len(Layer::Bth, HEADER_LEN, self.buffer.as_ref().len())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw opcode byte (see [`Packet::opcode`] for the validated one).
    pub fn opcode_raw(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }

    #[inline]
    pub fn opcode(&self) -> Result<Opcode, Error> {
        Opcode::from_u8(self.opcode_raw())
    }

    /// Solicited event: the receiver should raise a completion event.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }

    /// Migration request (path migration; always 0 on RoCE in practice).
    pub fn migreq(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }

    /// Bytes of padding after the payload that bring it to a multiple of four.
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0x3
    }

    /// Transport header version; 0 is the only one defined.
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0xf
    }

    #[inline]
    pub fn p_key(&self) -> u16 {
        be::u16(&self.buffer.as_ref()[field::P_KEY])
    }

    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & 0x80 != 0
    }

    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & 0x40 != 0
    }

    #[inline]
    pub fn dest_qp(&self) -> u32 {
        be::u24(&self.buffer.as_ref()[field::DEST_QP])
    }

    /// Acknowledge request: the responder must acknowledge this packet.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }

    #[inline]
    pub fn psn(&self) -> u32 {
        be::u24(&self.buffer.as_ref()[field::PSN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_opcode(&mut self, op: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = op.value();
    }

    fn set_flag(&mut self, index: usize, mask: u8, value: bool) {
        let byte = &mut self.buffer.as_mut()[index];
        *byte = if value { *byte | mask } else { *byte & !mask };
    }

    pub fn set_solicited(&mut self, value: bool) {
        self.set_flag(field::FLAGS, 0x80, value)
    }

    pub fn set_migreq(&mut self, value: bool) {
        self.set_flag(field::FLAGS, 0x40, value)
    }

    /// Sets the pad count (the low two bits of `value`).
    pub fn set_pad_count(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::FLAGS];
        *byte = (*byte & !0x30) | ((value & 0x3) << 4);
    }

    /// Sets the transport header version (the low four bits of `value`).
    pub fn set_tver(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::FLAGS];
        *byte = (*byte & !0x0f) | (value & 0x0f);
    }

    pub fn set_p_key(&mut self, value: u16) {
        be::set_u16(&mut self.buffer.as_mut()[field::P_KEY], value)
    }

    /// Sets FECN and BECN and clears the reserved bits beside them.
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::ECN] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }

    /// Sets the destination QP (the low 24 bits of `value`).
    pub fn set_dest_qp(&mut self, value: u32) {
        be::set_u24(&mut self.buffer.as_mut()[field::DEST_QP], value)
    }

    /// Sets AckReq and clears the reserved bits beside it.
    pub fn set_ack_req(&mut self, value: bool) {
        self.buffer.as_mut()[field::ACK_REQ] = u8::from(value) << 7;
    }

    /// Sets the PSN (the low 24 bits of `value`).
    pub fn set_psn(&mut self, value: u32) {
        be::set_u24(&mut self.buffer.as_mut()[field::PSN], value)
    }
}

/// A parsed BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub opcode: Opcode,
    pub solicited: bool,
    pub migreq: bool,
    pub pad_count: u8,
    pub tver: u8,
    pub p_key: u16,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
}

impl Repr {
    /// A BTH with the defaults every RoCE packet uses (P_Key 0xffff, TVer 0, no flags); the pad
    /// count is filled in when the frame is emitted.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Repr {
        Repr {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            p_key: DEFAULT_P_KEY,
            fecn: false,
            becn: false,
            dest_qp: dest_qp & 0x00ff_ffff,
            ack_req: false,
            psn: psn & 0x00ff_ffff,
        }
    }

    // Inlined: returned through memory, the result is read back in wider loads than it was
    // written with, which stalls store forwarding on the parse path of every packet.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            opcode: packet.opcode()?,
            solicited: packet.solicited(),
            migreq: packet.migreq(),
            pad_count: packet.pad_count(),
            tver: packet.tver(),
            p_key: packet.p_key(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes every byte of the header (reserved bits as zero), as three big-endian words: a
    /// packet's worth of field-by-field stores cost as much as the rest of its headers.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let flags = (u8::from(self.solicited) << 7)
            | (u8::from(self.migreq) << 6)
            | ((self.pad_count & 0x3) << 4)
            | (self.tver & 0x0f);
        let ecn = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        let words = [
            u32::from_be_bytes([self.opcode.value(), flags, 0, 0]) | u32::from(self.p_key),
            (u32::from(ecn) << 24) | (self.dest_qp & 0x00ff_ffff),
            (u32::from(self.ack_req) << 31) | (self.psn & 0x00ff_ffff),
        ];
        let mut bytes = [0u8; HEADER_LEN];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        packet.buffer.as_mut()[..HEADER_LEN].copy_from_slice(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The word-wise emit writes what setting each field through the view writes, over
        /// whatever the buffer held.
        #[test]
        fn emit_is_every_setter(
            garbage in any::<[u8; HEADER_LEN]>(),
            opcode in proptest::sample::select(Opcode::all().collect::<Vec<_>>()),
            flags in any::<[bool; 5]>(),
            pad_count in any::<u8>(),
            tver in any::<u8>(),
            p_key in any::<u16>(),
            dest_qp in any::<u32>(),
            psn in any::<u32>(),
        ) {
            let repr = Repr {
                opcode,
                solicited: flags[0],
                migreq: flags[1],
                pad_count,
                tver,
                p_key,
                fecn: flags[2],
                becn: flags[3],
                dest_qp,
                ack_req: flags[4],
                psn,
            };
            let mut by_setters = Packet::new_unchecked(garbage);
            by_setters.buffer[field::FLAGS] = 0;
            by_setters.set_opcode(repr.opcode);
            by_setters.set_solicited(repr.solicited);
            by_setters.set_migreq(repr.migreq);
            by_setters.set_pad_count(repr.pad_count);
            by_setters.set_tver(repr.tver);
            by_setters.set_p_key(repr.p_key);
            by_setters.set_ecn(repr.fecn, repr.becn);
            by_setters.set_dest_qp(repr.dest_qp);
            by_setters.set_ack_req(repr.ack_req);
            by_setters.set_psn(repr.psn);
            let mut emitted = Packet::new_unchecked(garbage);
            repr.emit(&mut emitted);
            prop_assert_eq!(emitted.buffer, by_setters.buffer);
        }
    }

    // The BTH of the RC SEND_ONLY that rxe sent in the shared Soft-RoCE ping-pong capture.
    const SEND_ONLY: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23, 0x80, 0x47, 0x2c, 0x33,
    ];

    #[test]
    fn parses_fields() {
        let repr = Repr::parse(&Packet::new_checked(&SEND_ONLY[..]).unwrap()).unwrap();
        assert_eq!(repr.opcode.value(), 0x04);
        assert_eq!(repr.p_key, 0xffff);
        assert_eq!(repr.dest_qp, 0x123);
        assert!(repr.ack_req);
        assert_eq!(repr.psn, 0x472c33);
        assert_eq!(repr.pad_count, 0);
    }

    #[test]
    fn emit_reproduces_bytes() {
        let repr = Repr::parse(&Packet::new_unchecked(&SEND_ONLY[..])).unwrap();
        let mut buf = [0xaa; 12];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SEND_ONLY);
    }

    #[test]
    fn short_buffer_is_truncated_error() {
        assert_eq!(
            Packet::new_checked(&SEND_ONLY[..11]).unwrap_err(),
            Error::Truncated {
                layer: Layer::Bth,
                needed: 12,
                available: 11
            }
        );
    }
}
