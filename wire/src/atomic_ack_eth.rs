//! Atomic Acknowledge Extended Transport Header (8 bytes): the value the target word held
//! before the atomic operation ran.

use crate::be;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

fixed_header_view!(Layer::AtomicAckEth, 8);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn original(&self) -> u64 {
        be::u64(&self.bytes()[..8])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_original(&mut self, value: u64) {
        be::set_u64(&mut self.bytes_mut()[..8], value)
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub original: u64,
}

impl Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            original: packet.original(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_original(self.original)
    }
}
