//! Atomic Extended Transport Header (28 bytes): the target of a COMPARE_SWAP or FETCH_ADD — an
//! 8-byte aligned virtual address, its R_Key, the swap (or add) value and the compare value.

use crate::be;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const R_KEY: Range<usize> = 8..12;
    pub const SWAP_ADD: Range<usize> = 12..20;
    pub const COMPARE: Range<usize> = 20..28;
}

fixed_header_view!(Layer::AtomicEth, 28);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn va(&self) -> u64 {
        be::u64(&self.bytes()[field::VA])
    }
    pub fn r_key(&self) -> u32 {
        be::u32(&self.bytes()[field::R_KEY])
    }
    /// The value to swap in (COMPARE_SWAP) or to add (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        be::u64(&self.bytes()[field::SWAP_ADD])
    }
    /// The value to compare with (COMPARE_SWAP only).
    pub fn compare(&self) -> u64 {
        be::u64(&self.bytes()[field::COMPARE])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_va(&mut self, value: u64) {
        be::set_u64(&mut self.bytes_mut()[field::VA], value)
    }
    pub fn set_r_key(&mut self, value: u32) {
        be::set_u32(&mut self.bytes_mut()[field::R_KEY], value)
    }
    pub fn set_swap_add(&mut self, value: u64) {
        be::set_u64(&mut self.bytes_mut()[field::SWAP_ADD], value)
    }
    pub fn set_compare(&mut self, value: u64) {
        be::set_u64(&mut self.bytes_mut()[field::COMPARE], value)
    }
}

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub va: u64,
    pub r_key: u32,
    pub swap_add: u64,
    pub compare: u64,
}

impl Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            r_key: packet.r_key(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_r_key(self.r_key);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
    }
}
