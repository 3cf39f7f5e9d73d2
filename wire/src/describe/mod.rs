//! What a parsed frame says, field by field: for people (a one-line summary, a field tree with
//! byte offsets, annotated hex dumps) and for other decoders (tshark's field names, so that the
//! two can be compared key by key).
//!
//! In the spirit of smoltcp's `pretty_print`, but as data rather than text: every view renders
//! the same [`Field`] list its own way, so the decoder's line, its `-v` tree, its JSON and the
//! demo's hover boxes cannot drift apart. Each field carries its layer, a human name, the key
//! tshark uses for it (or one of ours under [`OWN_PREFIX`] where tshark has none), the bytes it
//! occupies in the frame, the bit mask within them for fields narrower than a byte, its value
//! and, where a number means something, that meaning in words.
//!
//! Not on the data path: a [`Description`] computes the ICRC once and walks the frame with a
//! callback, allocating nothing; [`Description::fields`] collects into a `Vec` for convenience.

mod mad;
mod mad_tables;
mod summary;
mod tables;
mod walk;

use core::fmt;
use core::ops::Range;
use core::time::Duration;

use crate::aeth::Syndrome;
use crate::frame::Frame;
use crate::icrc::Check;
use crate::opcode::Opcode;
use crate::{EthernetAddress, Ipv4Address, Ipv6Address, Layer};

pub use summary::Summary;

/// The size of [`Field::padded_json_entry`].
pub const PADDED_JSON_ENTRY: usize = tables::PADDED_ENTRY;

/// The prefix of the keys of fields tshark has no name for (FECN, BECN, FETH, the ICRC
/// verdict...). tshark's names never start with it, so the two sets cannot collide.
pub const OWN_PREFIX: &str = "roce.";

/// Every tshark field name a description can carry, each once. Tests hand this list to
/// `tshark -T fields` and compare what the two decoders say.
pub fn tshark_fields() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for key in tables::all().map(tables::Spec::key) {
        if !key.starts_with(OWN_PREFIX) && !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// How a number is best shown to a person (JSON always gets the plain number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    Dec,
    /// Hexadecimal with this many digits.
    Hex(u8),
}

/// The value of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value<'a> {
    Uint(u64, Base),
    Flag(bool),
    Mac(EthernetAddress),
    Ipv4(Ipv4Address),
    Ipv6(Ipv6Address),
    /// Bytes shown as such (tshark treats ImmDt and IETH this way).
    Bytes(&'a [u8]),
    /// A verdict rather than something read from the frame (the ICRC status).
    Text(&'static str),
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Value::Uint(v, Base::Dec) => write!(f, "{v}"),
            Value::Uint(v, Base::Hex(digits)) => {
                write!(f, "{v:#0width$x}", width = usize::from(digits) + 2)
            }
            Value::Flag(b) => f.write_str(if b { "true" } else { "false" }),
            Value::Mac(EthernetAddress(b)) => write!(
                f,
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                b[0], b[1], b[2], b[3], b[4], b[5]
            ),
            Value::Ipv4(a) => write!(f, "{a}"),
            Value::Ipv6(a) => write!(f, "{a}"),
            Value::Bytes(bytes) => {
                for (i, b) in bytes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(":")?;
                    }
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
            Value::Text(text) => f.write_str(text),
        }
    }
}

/// What a value means, where a number alone would not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Words {
    None,
    Text(&'static str),
    Opcode(Opcode),
    Syndrome(Syndrome),
    /// An RNR NAK's wait before the retry.
    Wait(Duration),
    /// The ICRC as carried, against the one computed.
    Icrc(Check),
    /// A CM service ID: the RDMA CM's port space and port, where it is one.
    Service(u64),
    /// A CM timeout (4.096 µs × 2^value).
    Timeout(Duration),
}

impl fmt::Display for Words {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Words::None => Ok(()),
            Words::Text(text) => f.write_str(text),
            Words::Opcode(op) => write!(f, "{op}"),
            Words::Syndrome(s) => write!(f, "{s}"),
            Words::Wait(wait) => write!(
                f,
                "{}.{:02} ms",
                wait.as_millis(),
                (wait.as_micros() % 1000) / 10
            ),
            Words::Icrc(check) if check.is_ok() => f.write_str("ok"),
            Words::Icrc(check) => write!(f, "BAD, expected {:#010x}", wire_order(check.expected)),
            Words::Service(id) => match crate::cma::parse_service_id(id) {
                Some((space, port)) => write!(f, "RDMA CM, {space} port {port}"),
                None => f.write_str("not an RDMA CM service"),
            },
            Words::Timeout(t) => {
                let micros = t.as_micros();
                if micros < 1000 {
                    write!(f, "{}.{:03} µs", micros, t.as_nanos() % 1000)
                } else if micros < 1_000_000 {
                    write!(f, "{}.{:02} ms", micros / 1000, micros % 1000 / 10)
                } else {
                    write!(
                        f,
                        "{}.{:02} s",
                        micros / 1_000_000,
                        micros % 1_000_000 / 10_000
                    )
                }
            }
        }
    }
}

/// One field of a frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field<'a> {
    pub layer: Layer,
    /// What the field is, the same in every packet: name, key, mask, depth.
    spec: &'static tables::Spec,
    /// The bytes of the frame that hold it.
    pub bytes: Range<usize>,
    pub value: Value<'a>,
    /// What the value means; put into [`Words`] only when someone asks.
    meaning: tables::Meaning,
}

impl<'a> Field<'a> {
    /// What the value means, where a number alone would not say (`RC SEND_ONLY`, `NAK,
    /// remote access error`, `ok`).
    pub fn words(&self) -> Words {
        let number = match self.value {
            Value::Uint(n, _) => n,
            Value::Flag(b) => b.into(),
            _ => 0,
        };
        walk::words(self.meaning, number)
    }

    /// What a person calls it.
    pub fn name(&self) -> &'static str {
        self.spec.name
    }

    /// tshark's field name, or ours under [`OWN_PREFIX`].
    pub fn key(&self) -> &'static str {
        self.spec.key()
    }

    /// The key as it opens a JSON entry that follows another, `,"key":` (keys are plain ASCII
    /// names that JSON never escapes), padded with spaces to a fixed size, and the entry's own
    /// length: a writer that copies the whole array and then cuts back to the length makes a
    /// fixed-size copy, which compiles to a few stores instead of a call.
    pub fn padded_json_entry(&self) -> (&'static [u8; PADDED_JSON_ENTRY], usize) {
        (&self.spec.padded_entry, self.spec.entry.len())
    }

    /// Where the value comes from: how to read it from another frame of the same
    /// [layout](Description::layout_key).
    pub fn source(&self) -> Source {
        use tables::other;
        let spec = self.spec;
        let made = [
            (&other::DATA_LEN, Source::PayloadAndPadLen),
            (&other::PAYLOAD_LEN, Source::PayloadLen),
            (&other::PAD, Source::Pad),
            (&other::ETH_PADDING, Source::EthPadding),
            (&other::ICRC, Source::Icrc),
            (&other::ICRC_EXPECTED, Source::IcrcExpected),
            (&other::ICRC_STATUS, Source::IcrcStatus),
        ];
        if let Some(&(_, source)) = made.iter().find(|(s, _)| core::ptr::eq(*s, spec)) {
            return source;
        }
        match spec.shape {
            tables::Shape::Dec => Source::Number {
                scale: 1,
                base: Base::Dec,
            },
            tables::Shape::Hex(digits) => Source::Number {
                scale: 1,
                base: Base::Hex(digits),
            },
            tables::Shape::Words32 => Source::Number {
                scale: 4,
                base: Base::Dec,
            },
            tables::Shape::Flag => Source::Flag,
            tables::Shape::Mac => Source::Mac,
            tables::Shape::Ipv4 => Source::Ipv4,
            tables::Shape::Ipv6 => Source::Ipv6,
            tables::Shape::Bytes => Source::Bytes,
        }
    }

    /// For a field narrower than its bytes, the bits that are its own, over those bytes read as
    /// one big-endian number.
    pub fn mask(&self) -> Option<u32> {
        (self.spec.mask != 0).then_some(self.spec.mask)
    }

    /// Part of what a RoCE tool looks at: the IP addresses (or GIDs), ports, VLAN and priority
    /// and ECN marks of the layers below, and every field of the transport headers but their
    /// reserved bits, the payload length and the ICRC. The others (MAC addresses, IP version,
    /// lengths, checksums, reserved bits, pad bytes, ...) belong to the full views.
    pub fn essential(&self) -> bool {
        self.spec.depth == tables::Depth::Essential
    }

    /// The field's bits drawn as tshark does (`..11 ....`), given the frame's bytes; `None` for
    /// a field that fills whole bytes.
    pub fn bit_pattern(&self, frame: &[u8]) -> Option<BitPattern> {
        let mask = self.mask()?;
        let bytes = frame.get(self.bytes.clone())?;
        if bytes.len() > 4 {
            return None;
        }
        let raw = bytes.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
        Some(BitPattern {
            mask,
            raw,
            bits: bytes.len() as u32 * 8,
        })
    }
}

/// Shows the value and its meaning: `4 (RC SEND_ONLY)`.
impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)?;
        let words = self.words();
        if words != Words::None {
            write!(f, " ({words})")?;
        }
        Ok(())
    }
}

/// A field's bits among the bits of its bytes, as tshark draws them: `.... 0000` for the low
/// nibble of a byte that holds 0x10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitPattern {
    mask: u32,
    raw: u32,
    bits: u32,
}

impl fmt::Display for BitPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in (0..self.bits).rev() {
            let bit = 1u32 << i;
            let c = match (self.mask & bit != 0, self.raw & bit != 0) {
                (false, _) => '.',
                (true, true) => '1',
                (true, false) => '0',
            };
            write!(f, "{c}")?;
            if i % 4 == 0 && i != 0 {
                f.write_str(" ")?;
            }
        }
        Ok(())
    }
}

/// Where a field's value comes from, for a decoder that works out once per
/// [layout](Description::layout_key) which fields a frame has and how each is read, and then
/// reads every frame of that layout without walking the tables again (`roce decode --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// A number in the field's bytes ([`Field::bytes`]), read big-endian, under its
    /// [mask](Field::mask) and shifted down to bit 0, times `scale` (4 for a count of 32-bit
    /// words that tshark shows in bytes); shown in `base`.
    Number {
        scale: u8,
        base: Base,
    },
    /// Whether the field's bits (its bytes under its mask) are not all zero.
    Flag,
    /// The field's bytes as an address, or as bytes.
    Mac,
    Ipv4,
    Ipv6,
    Bytes,
    /// The number of payload and pad bytes (tshark's `data.len`).
    PayloadAndPadLen,
    PayloadLen,
    /// The pad bytes, wherever this frame's payload ends.
    Pad,
    /// The bytes after the IP packet (Ethernet's minimum-size padding).
    EthPadding,
    /// The ICRC the frame carries, the one computed, and whether they agree (`ok` or `bad`).
    Icrc,
    IcrcExpected,
    IcrcStatus,
}

/// What decides which fields a frame has and where their bytes lie: two frames with the same
/// key hand a visitor the same fields (same keys and layers) in the same order, and every field
/// whose [`Source`] reads its own bytes has the same [`Field::bytes`] in both. The others (the
/// lengths, the pad, the padding and the ICRC) have values and ranges of their own in each
/// frame. Made by [`Description::layout_key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayoutKey {
    opcode: u8,
    /// Which optional parts are there (see `walk::Walker::layout_key`).
    parts: u16,
    network: (u16, u16),
    bth: u16,
}

impl LayoutKey {
    /// The BTH opcode byte, the key's most varied part: a cache of layouts can be indexed by it.
    pub fn opcode(&self) -> u8 {
        self.opcode
    }
}

/// What [`Description::visit`] hands fields to: any `FnMut(&Field) -> Result<(), E>`, or a
/// type of one's own. The walk is compiled for each visitor; a visitor whose `field` is inlined
/// into it costs no call per field, and the parts of a field it does not read are never made
/// (which is how `roce decode --json` keeps up).
pub trait Visit<'a> {
    type Error;
    fn field(&mut self, field: &Field<'a>) -> Result<(), Self::Error>;
}

impl<'a, E, F: FnMut(&Field<'a>) -> Result<(), E>> Visit<'a> for F {
    type Error = E;
    #[inline(always)]
    fn field(&mut self, field: &Field<'a>) -> Result<(), E> {
        self(field)
    }
}

/// A frame ready to be shown: the frame and its ICRC check, computed once for every view.
#[derive(Debug, Clone)]
pub struct Description<'f, 'a> {
    frame: &'f Frame<'a>,
    icrc: Check,
}

impl<'f, 'a> Description<'f, 'a> {
    pub fn new(frame: &'f Frame<'a>) -> Description<'f, 'a> {
        Description {
            frame,
            icrc: frame.icrc(),
        }
    }

    pub fn frame(&self) -> &'f Frame<'a> {
        self.frame
    }

    pub fn icrc(&self) -> Check {
        self.icrc
    }

    /// The one-line summary: addresses, opcode, QP, PSN, flags, extension headers, payload
    /// length and ICRC verdict.
    pub fn summary(&self) -> Summary<'_, 'f, 'a> {
        Summary(self)
    }

    /// Hands every field to `visitor`, in frame order, stopping at the first error it returns.
    /// A closure will do; give its parameter's type: `|field: &Field| ...`.
    pub fn visit<V: Visit<'a>>(&self, mut visitor: V) -> Result<(), V::Error> {
        walk::Walker::new(self.frame, self.icrc, false).walk(&mut visitor)
    }

    /// Like [`Description::visit`], for the [essential](Field::essential) fields only; the
    /// others are not even read.
    pub fn visit_essential<V: Visit<'a>>(&self, mut visitor: V) -> Result<(), V::Error> {
        walk::Walker::new(self.frame, self.icrc, true).walk(&mut visitor)
    }

    /// What decides the frame's fields and where they lie (see [`LayoutKey`]); `None` when its
    /// fields depend on its contents as well (a management datagram, whose fields follow its
    /// class and attribute).
    pub fn layout_key(&self) -> Option<LayoutKey> {
        walk::Walker::new(self.frame, self.icrc, false).layout_key()
    }

    /// Every field, in frame order.
    pub fn fields(&self) -> Vec<Field<'a>> {
        let mut fields = Vec::with_capacity(48);
        let Ok(()) = self.visit(|field: &Field<'a>| {
            fields.push(field.clone());
            Ok::<(), core::convert::Infallible>(())
        });
        fields
    }
}

/// The ICRC's value as the four bytes read in the order they travel, which is how tshark shows
/// `infiniband.invariant.crc` and how the bytes look in a hex dump. (The CRC itself is stored
/// least significant byte first.)
pub fn wire_order(crc: u32) -> u32 {
    crc.swap_bytes()
}

#[cfg(test)]
mod tests;
