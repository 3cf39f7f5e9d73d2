//! FLUSH Extended Transport Header (4 bytes): how far a FLUSH must push written data — the
//! selectivity level (bits 5:4) and the placement type (bits 3:0, visibility or persistence).

use crate::be;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

fixed_header_view!(Layer::Feth, 4);

impl<T: AsRef<[u8]>> Packet<T> {
    fn bits(&self) -> u32 {
        be::u32(&self.bytes()[..4])
    }
    /// 0: flush the whole memory region of the R_Key; 1: only the given range.
    pub fn selectivity(&self) -> u8 {
        ((self.bits() >> 4) & 0x3) as u8
    }
    /// Bit 0: global visibility; bit 1: persistence.
    pub fn placement_type(&self) -> u8 {
        (self.bits() & 0xf) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets both fields and clears the reserved bits.
    pub fn set_fields(&mut self, selectivity: u8, placement_type: u8) {
        let bits = (u32::from(selectivity & 0x3) << 4) | u32::from(placement_type & 0xf);
        be::set_u32(&mut self.bytes_mut()[..4], bits)
    }
}

/// A parsed FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub selectivity: u8,
    pub placement_type: u8,
}

impl Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            selectivity: packet.selectivity(),
            placement_type: packet.placement_type(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_fields(self.selectivity, self.placement_type)
    }
}
