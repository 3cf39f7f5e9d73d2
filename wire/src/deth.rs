//! Datagram Extended Transport Header (8 bytes): on UD, the Q_Key that authorises the datagram
//! and the sender's QP number (there is no connection to tell it otherwise).

use crate::be;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

mod field {
    use core::ops::Range;
    pub const Q_KEY: Range<usize> = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Range<usize> = 5..8;
}

fixed_header_view!(Layer::Deth, 8);

/// The Q_Key of the General Services Interface (QP1).
pub const GSI_Q_KEY: u32 = 0x8001_0000;

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn q_key(&self) -> u32 {
        be::u32(&self.bytes()[field::Q_KEY])
    }
    pub fn src_qp(&self) -> u32 {
        be::u24(&self.bytes()[field::SRC_QP])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_q_key(&mut self, value: u32) {
        be::set_u32(&mut self.bytes_mut()[field::Q_KEY], value)
    }
    /// Sets the source QP (low 24 bits) and clears the reserved byte.
    pub fn set_src_qp(&mut self, value: u32) {
        self.bytes_mut()[field::RESERVED] = 0;
        be::set_u24(&mut self.bytes_mut()[field::SRC_QP], value)
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub q_key: u32,
    pub src_qp: u32,
}

impl Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            q_key: packet.q_key(),
            src_qp: packet.src_qp(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_q_key(self.q_key);
        packet.set_src_qp(self.src_qp);
    }
}
