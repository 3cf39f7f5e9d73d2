//! RDMA Extended Transport Header (16 bytes): where in the responder's memory an RDMA WRITE,
//! READ or FLUSH goes — virtual address, R_Key and the length of the whole message.

use crate::be;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const R_KEY: Range<usize> = 8..12;
    pub const DMA_LEN: Range<usize> = 12..16;
}

fixed_header_view!(Layer::Reth, 16);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn va(&self) -> u64 {
        be::u64(&self.bytes()[field::VA])
    }
    pub fn r_key(&self) -> u32 {
        be::u32(&self.bytes()[field::R_KEY])
    }
    pub fn dma_len(&self) -> u32 {
        be::u32(&self.bytes()[field::DMA_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_va(&mut self, value: u64) {
        be::set_u64(&mut self.bytes_mut()[field::VA], value)
    }
    pub fn set_r_key(&mut self, value: u32) {
        be::set_u32(&mut self.bytes_mut()[field::R_KEY], value)
    }
    pub fn set_dma_len(&mut self, value: u32) {
        be::set_u32(&mut self.bytes_mut()[field::DMA_LEN], value)
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub va: u64,
    pub r_key: u32,
    pub dma_len: u32,
}

impl Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            r_key: packet.r_key(),
            dma_len: packet.dma_len(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_r_key(self.r_key);
        packet.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bytes = [
            0, 0, 0x7f, 0xfe, 0x12, 0x34, 0x56, 0x78, 0, 0, 0x02, 0xb8, 0, 1, 0, 0,
        ];
        let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.va, 0x7ffe_1234_5678);
        assert_eq!(repr.r_key, 0x2b8);
        assert_eq!(repr.dma_len, 65536);
        let mut out = [0u8; 16];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }
}
