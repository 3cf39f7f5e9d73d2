//! Invalidate Extended Transport Header (4 bytes): the R_Key a SEND with invalidate asks the
//! receiver to invalidate.

use crate::be;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

fixed_header_view!(Layer::Ieth, 4);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn r_key(&self) -> u32 {
        be::u32(&self.bytes()[..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_r_key(&mut self, value: u32) {
        be::set_u32(&mut self.bytes_mut()[..4], value)
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub r_key: u32,
}

impl Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            r_key: packet.r_key(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_r_key(self.r_key)
    }
}
