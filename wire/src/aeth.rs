//! ACK Extended Transport Header (4 bytes): the responder's verdict — ACK, RNR NAK or NAK, in
//! the syndrome byte — and its message sequence number (MSN, messages completed so far).
//!
//! ```text
//! syndrome: reserved(1) | kind(2) | value(5)
//!   kind 00  ACK      value = credit count (0x1f: no credit information / unlimited)
//!   kind 01  RNR NAK  value = RNR timer code (how long to wait before retrying)
//!   kind 11  NAK      value = NAK code (PSN sequence error, invalid request, ...)
//! ```

use core::fmt;
use core::time::Duration;

use crate::be;
use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

mod field {
    use core::ops::Range;
    pub const SYNDROME: usize = 0;
    pub const MSN: Range<usize> = 1..4;
}

fixed_header_view!(Layer::Aeth, 4);

/// The credit count that means "no credit information": what responders without end-to-end flow
/// control (Soft-RoCE included) always send.
pub const UNLIMITED_CREDITS: u8 = 0x1f;

/// A NAK code (the low five syndrome bits of a NAK).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NakCode(pub u8);

impl NakCode {
    pub const PSN_SEQUENCE_ERROR: NakCode = NakCode(0);
    pub const INVALID_REQUEST: NakCode = NakCode(1);
    pub const REMOTE_ACCESS_ERROR: NakCode = NakCode(2);
    pub const REMOTE_OPERATIONAL_ERROR: NakCode = NakCode(3);
    pub const INVALID_RD_REQUEST: NakCode = NakCode(4);

    /// The code's meaning in words.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "PSN sequence error",
            1 => "invalid request",
            2 => "remote access error",
            3 => "remote operational error",
            4 => "invalid RD request",
            _ => "reserved NAK code",
        }
    }
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// The syndrome byte, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count.
    Ack { credits: u8 },
    /// Receiver not ready: no receive buffer was posted; retry after the timer.
    RnrNak { timer: u8 },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A byte with the reserved bit or the reserved kind (10) set, kept as it was.
    Reserved(u8),
}

impl Syndrome {
    pub const fn from_u8(byte: u8) -> Syndrome {
        if byte & 0x80 != 0 {
            return Syndrome::Reserved(byte);
        }
        let value = byte & 0x1f;
        match (byte >> 5) & 0x3 {
            0 => Syndrome::Ack { credits: value },
            1 => Syndrome::RnrNak { timer: value },
            3 => Syndrome::Nak(NakCode(value)),
            _ => Syndrome::Reserved(byte),
        }
    }

    pub const fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => 0x60 | (code.0 & 0x1f),
            Syndrome::Reserved(byte) => byte,
        }
    }

    /// An ACK without credit information.
    pub const fn ack() -> Syndrome {
        Syndrome::Ack {
            credits: UNLIMITED_CREDITS,
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Syndrome::Ack {
                credits: UNLIMITED_CREDITS,
            } => f.write_str("ACK"),
            Syndrome::Ack { credits } => write!(f, "ACK, {credits} credits"),
            Syndrome::RnrNak { timer } => {
                let wait = rnr_timer(timer);
                write!(
                    f,
                    "RNR NAK, retry after {}.{:02} ms",
                    wait.as_millis(),
                    (wait.as_micros() % 1000) / 10
                )
            }
            Syndrome::Nak(code) => write!(f, "NAK, {code}"),
            Syndrome::Reserved(byte) => write!(f, "reserved syndrome {byte:#04x}"),
        }
    }
}

/// How long a requester waits after an RNR NAK carrying this timer code (IBTA table 45).
pub const fn rnr_timer(code: u8) -> Duration {
    // In units of 10 µs; code 0 is the longest wait.
    const TENS_OF_MICROS: [u32; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    Duration::from_micros(TENS_OF_MICROS[(code & 0x1f) as usize] as u64 * 10)
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn syndrome_raw(&self) -> u8 {
        self.bytes()[field::SYNDROME]
    }
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_u8(self.syndrome_raw())
    }
    /// Message sequence number: messages the responder has completed (24 bits).
    pub fn msn(&self) -> u32 {
        be::u24(&self.bytes()[field::MSN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_syndrome(&mut self, value: Syndrome) {
        self.bytes_mut()[field::SYNDROME] = value.to_u8();
    }
    pub fn set_msn(&mut self, value: u32) {
        be::set_u24(&mut self.bytes_mut()[field::MSN], value)
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub syndrome: Syndrome,
    pub msn: u32,
}

/// An ACK without credit information, for MSN 0: what a responder without end-to-end flow
/// control sends, and a starting point to fill in.
impl Default for Repr {
    fn default() -> Repr {
        Repr {
            syndrome: Syndrome::ack(),
            msn: 0,
        }
    }
}

impl Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            syndrome: packet.syndrome(),
            msn: packet.msn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_syndrome(self.syndrome);
        packet.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_syndrome_byte_round_trips() {
        for b in 0..=u8::MAX {
            assert_eq!(Syndrome::from_u8(b).to_u8(), b);
        }
    }

    #[test]
    fn syndromes_decode_as_the_spec_says() {
        assert_eq!(Syndrome::from_u8(0x1f), Syndrome::ack());
        assert_eq!(Syndrome::from_u8(0x2e), Syndrome::RnrNak { timer: 14 });
        assert_eq!(
            Syndrome::from_u8(0x62),
            Syndrome::Nak(NakCode::REMOTE_ACCESS_ERROR)
        );
        assert_eq!(
            Syndrome::from_u8(0x60).to_string(),
            "NAK, PSN sequence error"
        );
        assert_eq!(
            Syndrome::from_u8(0x2e).to_string(),
            "RNR NAK, retry after 1.28 ms"
        );
        assert!(matches!(Syndrome::from_u8(0x40), Syndrome::Reserved(0x40)));
    }

    #[test]
    fn rnr_timer_table_ends() {
        assert_eq!(rnr_timer(0), Duration::from_micros(655_360));
        assert_eq!(rnr_timer(1), Duration::from_micros(10));
        assert_eq!(rnr_timer(31), Duration::from_micros(491_520));
    }
}
