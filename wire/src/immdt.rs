//! Immediate Data Extended Transport Header (4 bytes): 32 bits the sender hands to the
//! receiver's completion (SEND or RDMA WRITE "with immediate").

use crate::be;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

fixed_header_view!(Layer::ImmDt, 4);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The immediate data, read as a big-endian number (verbs hands it over in network order).
    pub fn imm(&self) -> u32 {
        be::u32(&self.bytes()[..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_imm(&mut self, value: u32) {
        be::set_u32(&mut self.bytes_mut()[..4], value)
    }
}

/// A parsed ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub imm: u32,
}

impl Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr { imm: packet.imm() })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_imm(self.imm)
    }
}
