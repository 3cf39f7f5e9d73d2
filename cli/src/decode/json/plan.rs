//! A packet's JSON written by a plan made once for its layout. Frames of one
//! [layout](LayoutKey) have the same fields in the same places (the wire crate's walk says so
//! and tests it), so the walk through the tables, the choice of each field's key and the
//! branching on each row's shape are done once per layout, by walking the first such frame:
//! what is left per packet is a list of steps, each a piece of fixed text (the keys between two
//! values, already quoted, and whatever else the layout fixes: the opcode, its name, a string
//! value's quotes) copied whole as one fixed-size block, and one value read from a known offset
//! (or taken from the layout: lengths and the ICRC), written the cheapest way its field's width
//! allows ([`decimal`]). The record's own fields (number, time, lengths) come first in every
//! plan and are written straight, before the steps.
//!
//! Management datagrams have no layout key (their fields follow their contents); they, and any
//! frame a plan could not be made for, are written by walking the tables.

use std::io::Write;

use roce_wire::capture::Record;
use roce_wire::describe::{wire_order, Description, Field, LayoutKey, Source, Value};
use roce_wire::{Ipv6Address, Layer};

use super::{decimal, opcode_name_entry, HEX};

/// The room for each step's fixed text: copied whole, a block of a size known when compiling is
/// a few vector moves, where a copy of a length known only at run time is a call to memcpy.
/// Longer text takes several steps.
const TEXT: usize = 32;
/// Room past a line's end that a step may write into before the line is cut back: the rest of
/// a text block, or a `false` written as eight bytes.
const SLACK: usize = TEXT + 8;
/// Plans kept at once per thread; past that, the cache starts again (a capture of ever new
/// layouts keeps its memory flat).
const MAX_PLANS: usize = 1024;

/// Where a number lies: `(the 8 bytes from at, big-endian, & mask) >> shift, times scale`
/// (the 8 bytes that end with the field's last byte).
#[derive(Debug, Clone, Copy)]
struct Bits {
    at: u16,
    mask: u64,
    shift: u8,
    scale: u8,
}

impl Bits {
    #[inline(always)]
    fn read(self, bytes: &[u8]) -> u64 {
        ((be_eight(bytes, self.at) & self.mask) >> self.shift) * u64::from(self.scale)
    }

    /// The largest value the field can have.
    fn max(self) -> u64 {
        (self.mask >> self.shift).saturating_mul(self.scale.into())
    }
}

/// How one value is read from a frame of the plan's layout and written. Numbers are sorted by
/// the most digits their field can have, each written its cheapest way.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// A number of one digit.
    Digit(Bits),
    /// A number below 256.
    Byte(Bits),
    /// A number below 10^8.
    Up8(Bits),
    /// Any number.
    Wide(Bits),
    /// Whether the 8 bytes from `at` have any bit of `mask`.
    Flag {
        at: u16,
        mask: u64,
    },
    Mac {
        at: u16,
    },
    Ipv4 {
        at: u16,
    },
    Ipv6 {
        at: u16,
    },
    Bytes {
        at: u16,
        len: u16,
    },
    /// The number of payload and pad bytes (tshark's `data.len`).
    PayloadAndPadLen,
    PayloadLen,
    Pad,
    EthPadding,
    /// The ICRC found, and the one computed, as the four bytes read in wire order.
    Icrc,
    IcrcExpected,
    IcrcStatus,
    /// No value: the text goes on in the next step.
    Nothing,
}

impl Read {
    /// A number's read, by the most digits it can have.
    fn number(bits: Bits) -> Read {
        match bits.max() {
            0..=9 => Read::Digit(bits),
            10..=255 => Read::Byte(bits),
            256..=99_999_999 => Read::Up8(bits),
            _ => Read::Wide(bits),
        }
    }

    /// The most bytes the value can take, with what its writer stores past its end (the
    /// Ethernet padding's are added per packet).
    fn max_len(self) -> usize {
        match self {
            Read::Digit(_) | Read::Byte(_) => 4,
            Read::Up8(_) => 8,
            Read::Wide(_) | Read::PayloadAndPadLen | Read::PayloadLen => 24,
            Read::Icrc | Read::IcrcExpected => 16,
            Read::Flag { .. } | Read::IcrcStatus => 8,
            Read::Mac { .. } => 17,
            Read::Ipv4 { .. } => 16,
            Read::Ipv6 { .. } => 48,
            Read::Bytes { len, .. } => 3 * usize::from(len),
            // At most three pad bytes.
            Read::Pad => 9,
            Read::EthPadding | Read::Nothing => 0,
        }
    }

    /// The frame's bytes the value is read from must end by this.
    fn frame_end(self) -> usize {
        match self {
            Read::Digit(bits) | Read::Byte(bits) | Read::Up8(bits) | Read::Wide(bits) => {
                usize::from(bits.at) + 8
            }
            Read::Flag { at, .. } => usize::from(at) + 8,
            Read::Mac { at } => usize::from(at) + 6,
            Read::Ipv4 { at } => usize::from(at) + 4,
            Read::Ipv6 { at } => usize::from(at) + 16,
            Read::Bytes { at, len } => usize::from(at) + usize::from(len),
            _ => 0,
        }
    }

    /// Whether the value is a JSON string (its quotes are then part of the text around it).
    fn quoted(self) -> bool {
        !matches!(
            self,
            Read::Digit(_)
                | Read::Byte(_)
                | Read::Up8(_)
                | Read::Wide(_)
                | Read::Flag { .. }
                | Read::PayloadAndPadLen
                | Read::PayloadLen
                | Read::Icrc
                | Read::IcrcExpected
                | Read::Nothing
        )
    }
}

/// The text before a value (its first `len` bytes), and the value.
#[derive(Debug, Clone, Copy)]
struct Step {
    text: [u8; TEXT],
    len: u8,
    read: Read,
}

/// The fields of one layout and view (essential or every field, with or without the file's
/// name), compiled.
#[derive(Debug)]
pub struct Plan {
    /// The last one's text ends the object and the line.
    steps: Vec<Step>,
    /// Whether the record's own fields include its captured length.
    every_field: bool,
    /// The frame must be at least this long for every read to fall within it (it always is,
    /// for a frame of the plan's layout; a frame that is not is walked instead).
    frame_len: usize,
    /// The longest line the steps can write, but for the file's name and the Ethernet
    /// padding.
    max_len: usize,
}

impl Plan {
    /// The plan for frames laid out as `description`'s, or `None` if its fields cannot be
    /// read by offsets alone.
    fn compile<'a>(description: &Description<'_, 'a>, every_field: bool) -> Option<Plan> {
        let mut fields = Vec::with_capacity(64);
        let collect = |field: &Field<'a>| {
            fields.push(field.clone());
            Ok::<(), std::convert::Infallible>(())
        };
        let Ok(()) = match every_field {
            true => description.visit(collect),
            false => description.visit_essential(collect),
        };
        let bth = description.frame().layout.bth.start;
        let mut plan = Plan {
            steps: Vec::with_capacity(fields.len() + 8),
            every_field,
            frame_len: 0,
            max_len: SLACK + RECORD_FIELDS,
        };
        // The record's own fields are written before the steps (see `Plan::write`), and the
        // first step's text goes on from them.
        let mut text = Vec::new();
        let mut opcode_named = false;
        for field in &fields {
            let (padded, len) = field.padded_json_entry();
            text.extend_from_slice(&padded[..len]);
            if !opcode_named && field.layer == Layer::Bth {
                // The BTH's first field is its opcode, which the layout fixes: its value and
                // its name are text like the keys.
                opcode_named = true;
                let opcode_byte = bth..bth + 1;
                match field.value {
                    Value::Uint(n, _) if field.bytes == opcode_byte && field.mask().is_none() => {
                        text.extend_from_slice(n.to_string().as_bytes());
                        text.extend_from_slice(opcode_name_entry(n as u8));
                    }
                    _ => return None,
                }
                continue;
            }
            let read = read_of(field)?;
            if read.quoted() {
                text.push(b'"');
            }
            plan.push(&text, read);
            plan.frame_len = plan.frame_len.max(read.frame_end());
            text.clear();
            if read.quoted() {
                text.push(b'"');
            }
        }
        text.extend_from_slice(b"}\n");
        plan.push(&text, Read::Nothing);
        Some(plan)
    }

    /// Adds steps that write `text` and then `read`'s value.
    fn push(&mut self, text: &[u8], read: Read) {
        let mut pieces = text.chunks(TEXT).peekable();
        while let Some(piece) = pieces.next() {
            let mut block = [b' '; TEXT];
            block[..piece.len()].copy_from_slice(piece);
            let last = pieces.peek().is_none();
            self.steps.push(Step {
                text: block,
                len: piece.len() as u8,
                read: if last { read } else { Read::Nothing },
            });
        }
        self.max_len += text.len() + read.max_len();
    }

    /// Writes the object of `record`, whose frame (of this plan's layout) `description`
    /// describes, and its newline at the start of `out`; returns its length, or `None` (and
    /// nothing written) if the frame is shorter than the layout's (which a parsed frame of this
    /// layout never is). The bytes after the line are left changed.
    ///
    /// A line that might be longer than [`LINE`] (a frame with kilobytes of padding, a file
    /// name of hundreds of characters) is left to the walk.
    fn write(
        &self,
        out: &mut [u8; ROOM],
        seconds: &mut Seconds,
        record: &Record,
        file: Option<&str>,
        description: &Description,
    ) -> Option<usize> {
        let frame = description.frame();
        let bytes = frame.bytes();
        if bytes.len() < self.frame_len {
            return None;
        }
        let layout = &frame.layout;
        let icrc = description.icrc();
        // Escaped, a byte of the name takes at most six (`\u001f`), plus the quotes.
        let longest = self.max_len + 3 * layout.trailer.len() + file.map_or(0, |f| 6 * f.len() + 2);
        if longest > LINE {
            return None;
        }
        let out = &mut out[..];
        let pos = record_fields(out, seconds, record, self.every_field, file);
        let mut pos = pos;
        let ok = icrc.is_ok();
        // Every plan has the ICRC found and the one expected, the same text when they agree:
        // written once here, copied by their steps.
        let mut found = [0; 24];
        let found_len = decimal::any(&mut found, 0, wire_order(icrc.found).into());
        let (mut expected, mut expected_len) = (found, found_len);
        if !ok {
            expected_len = decimal::any(&mut expected, 0, wire_order(icrc.expected).into());
        }
        for step in &self.steps {
            // `pos` is below `longest`, so this changes nothing; but it shows the compiler that
            // the copies that follow fall within the room, which it then need not check.
            pos &= LINE - 1;
            out[pos..pos + TEXT].copy_from_slice(&step.text);
            pos += usize::from(step.len);
            pos = match step.read {
                Read::Digit(bits) => {
                    out[pos] = b'0' + bits.read(bytes) as u8;
                    pos + 1
                }
                Read::Byte(bits) => decimal::byte(out, pos, bits.read(bytes) as u8),
                Read::Up8(bits) => decimal::up_to_8(out, pos, bits.read(bytes) as u32),
                Read::Wide(bits) => decimal::any(out, pos, bits.read(bytes)),
                Read::Flag { at, mask } => {
                    let set = usize::from(be_eight(bytes, at) & mask != 0);
                    out[pos..pos + 8].copy_from_slice(&FLAGS[set]);
                    pos + 5 - set
                }
                Read::Mac { at } => {
                    let at = usize::from(at);
                    hex(out, pos, &bytes[at..at + 6])
                }
                Read::Ipv4 { at } => {
                    let at = usize::from(at);
                    let [a, b, c, d] = array(&bytes[at..at + 4]);
                    let pos = decimal::byte(out, pos, a);
                    out[pos] = b'.';
                    let pos = decimal::byte(out, pos + 1, b);
                    out[pos] = b'.';
                    let pos = decimal::byte(out, pos + 1, c);
                    out[pos] = b'.';
                    decimal::byte(out, pos + 1, d)
                }
                Read::Ipv6 { at } => {
                    let at = usize::from(at);
                    let address = Ipv6Address::from(array::<16>(&bytes[at..at + 16]));
                    let mut room = &mut out[pos..];
                    let before = room.len();
                    // The room is the most an address takes (max_len), so this cannot fail.
                    let _ = write!(room, "{address}");
                    pos + before - room.len()
                }
                Read::Bytes { at, len } => {
                    let at = usize::from(at);
                    hex(out, pos, &bytes[at..at + usize::from(len)])
                }
                Read::PayloadAndPadLen => {
                    decimal::any(out, pos, (layout.pad.end - layout.payload.start) as u64)
                }
                Read::PayloadLen => decimal::any(out, pos, layout.payload.len() as u64),
                Read::Pad => hex(out, pos, &bytes[layout.pad.clone()]),
                Read::EthPadding => hex(out, pos, &bytes[layout.trailer.clone()]),
                Read::Icrc => {
                    out[pos..pos + 16].copy_from_slice(&found[..16]);
                    pos + found_len
                }
                Read::IcrcExpected => {
                    out[pos..pos + 16].copy_from_slice(&expected[..16]);
                    pos + expected_len
                }
                Read::IcrcStatus => {
                    let ok = usize::from(ok);
                    out[pos..pos + 4].copy_from_slice(&STATUS[ok]);
                    pos + 3 - ok
                }
                Read::Nothing => pos,
            };
        }
        Some(pos)
    }
}

/// The most the record's own fields take, but for the file's name: their keys and 24 bytes for
/// each number (what [`decimal::any`] stores).
const RECORD_FIELDS: usize = 16 + 24 + 21 + 24 + 10 + 14 + 24 + 17 + 24 + 13;

/// Writes the record's own fields, as `super::start` does, at the start of `out` (the frame's
/// begin the first step's text); returns where they end.
#[inline(always)]
fn record_fields(
    out: &mut [u8],
    seconds: &mut Seconds,
    record: &Record,
    every_field: bool,
    file: Option<&str>,
) -> usize {
    out[..16].copy_from_slice(b"{\"frame.number\":");
    let pos = decimal::any(out, 16, record.number);
    out[pos..pos + 21].copy_from_slice(b",\"frame.time_epoch\":\"");
    let t = record.timestamp;
    let pos = seconds.write(out, pos + 21, t.as_secs());
    let nanos = t.subsec_nanos();
    out[pos..pos + 2].copy_from_slice(&[b'.', b'0' + (nanos / 100_000_000) as u8]);
    let pos = decimal::exactly_8(out, pos + 2, nanos % 100_000_000);
    out[pos..pos + 14].copy_from_slice(b"\",\"frame.len\":");
    let mut pos = decimal::any(out, pos + 14, record.original_len.into());
    if every_field {
        out[pos..pos + 17].copy_from_slice(b",\"frame.cap_len\":");
        pos = decimal::any(out, pos + 17, record.data.len() as u64);
    }
    if let Some(file) = file {
        out[pos..pos + 13].copy_from_slice(b",\"roce.file\":");
        let mut room = &mut out[pos + 13..];
        let before = room.len();
        // The room is the most the escaped name takes, so this cannot fail.
        let _ = serde_json::to_writer(&mut room, file);
        pos += 13 + before - room.len();
    }
    pos
}

/// A flag's value, eight bytes stored whatever its length.
const FLAGS: [[u8; 8]; 2] = [*b"false   ", *b"true    "];
/// The ICRC's verdict, likewise.
const STATUS: [[u8; 4]; 2] = [*b"bad ", *b"ok  "];

/// The seconds of the last timestamp written, as text: a capture's records share their second
/// with the ones around them, so it is written once per second rather than once per record.
struct Seconds {
    secs: u64,
    text: [u8; 24],
    len: usize,
}

impl Seconds {
    /// Writes `secs` at `pos`, storing 24 bytes; returns where it ends.
    #[inline(always)]
    fn write(&mut self, out: &mut [u8], pos: usize, secs: u64) -> usize {
        if secs != self.secs {
            self.secs = secs;
            self.len = decimal::any(&mut self.text, 0, secs);
        }
        out[pos..pos + 24].copy_from_slice(&self.text);
        pos + self.len
    }
}

/// How `field`'s value is read in every frame of its layout; `None` for a number too close to
/// the frame's start to be read as the eight bytes ending with it (no frame has one).
fn read_of(field: &Field) -> Option<Read> {
    let at = u16::try_from(field.bytes.start).ok()?;
    let len = u16::try_from(field.bytes.len()).ok()?;
    let end = at.checked_add(len)?;
    // The field's bits within the eight bytes that end with it.
    let bits = |scale: u8| -> Option<Bits> {
        if end < 8 || len > 8 {
            return None;
        }
        let whole = match len {
            8 => u64::MAX,
            _ => (1u64 << (8 * len)) - 1,
        };
        let mask = field.mask().map_or(whole, u64::from);
        Some(Bits {
            at: end - 8,
            mask,
            shift: mask.trailing_zeros() as u8,
            scale,
        })
    };
    Some(match field.source() {
        Source::Number { scale, .. } => Read::number(bits(scale)?),
        Source::Flag => {
            let bits = bits(1)?;
            Read::Flag {
                at: bits.at,
                mask: bits.mask,
            }
        }
        Source::Mac if len == 6 => Read::Mac { at },
        Source::Ipv4 if len == 4 => Read::Ipv4 { at },
        Source::Ipv6 if len == 16 => Read::Ipv6 { at },
        Source::Bytes => Read::Bytes { at, len },
        Source::Mac | Source::Ipv4 | Source::Ipv6 => return None,
        Source::PayloadAndPadLen => Read::PayloadAndPadLen,
        Source::PayloadLen => Read::PayloadLen,
        Source::Pad => Read::Pad,
        Source::EthPadding => Read::EthPadding,
        Source::Icrc => Read::Icrc,
        Source::IcrcExpected => Read::IcrcExpected,
        Source::IcrcStatus => Read::IcrcStatus,
    })
}

/// The eight bytes of `bytes` from `at`, as a big-endian number.
#[inline(always)]
fn be_eight(bytes: &[u8], at: u16) -> u64 {
    let at = usize::from(at);
    u64::from_be_bytes(array(&bytes[at..at + 8]))
}

/// `raw` as an array (it is exactly `N` long): a fixed-size load rather than a memcpy call.
#[inline(always)]
fn array<const N: usize>(raw: &[u8]) -> [u8; N] {
    raw.try_into().unwrap_or([0; N])
}

/// Bytes as tshark shows them, two hex digits each separated by colons, at `pos`; returns
/// where they end.
#[inline(always)]
fn hex(out: &mut [u8], pos: usize, bytes: &[u8]) -> usize {
    let mut end = pos;
    for &b in bytes {
        out[end..end + 3].copy_from_slice(&[
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
            b':',
        ]);
        end += 3;
    }
    // No colon after the last byte.
    end - usize::from(!bytes.is_empty())
}

/// The plans made so far, by opcode and then by the rest of the layout and the view, and the
/// seconds of the last timestamp they wrote.
pub struct Plans {
    by_opcode: Vec<Vec<Entry>>,
    count: usize,
    seconds: Seconds,
}

/// The longest line a plan writes (longer ones are left to the walk).
const LINE: usize = 4096;

/// The room a plan writes a line into: twice the longest, so that a write that starts within
/// the first half never needs checking against the end.
pub const ROOM: usize = 2 * LINE;

struct Entry {
    key: LayoutKey,
    every_field: bool,
    /// `None` for a layout no plan can be made for (kept so as not to try again).
    plan: Option<Plan>,
}

impl Default for Plans {
    fn default() -> Plans {
        Plans {
            by_opcode: (0..=u8::MAX).map(|_| Vec::new()).collect(),
            count: 0,
            seconds: Seconds {
                secs: 0,
                text: *b"0                       ",
                len: 1,
            },
        }
    }
}

impl Plans {
    /// Writes `record`'s object and its newline at the start of `out` by the plan for its
    /// frame's layout in this view (every field or the essential ones), made now if it is the
    /// first of its layout; returns its length, or `None` (and nothing written) for a frame
    /// whose fields are not fixed by its layout. The bytes after the line are left changed.
    pub fn write(
        &mut self,
        out: &mut [u8; ROOM],
        every_field: bool,
        record: &Record,
        file: Option<&str>,
        description: &Description,
    ) -> Option<usize> {
        let key = description.layout_key()?;
        let found = self.by_opcode[usize::from(key.opcode())]
            .iter()
            .position(|e| e.key == key && e.every_field == every_field);
        let index = match found {
            Some(index) => index,
            None => {
                if self.count >= MAX_PLANS {
                    self.by_opcode.iter_mut().for_each(Vec::clear);
                    self.count = 0;
                }
                self.count += 1;
                let slot = &mut self.by_opcode[usize::from(key.opcode())];
                slot.push(Entry {
                    key,
                    every_field,
                    plan: Plan::compile(description, every_field),
                });
                slot.len() - 1
            }
        };
        match &self.by_opcode[usize::from(key.opcode())][index].plan {
            Some(plan) => plan.write(out, &mut self.seconds, record, file, description),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_hex_pairs_with_colons_between() {
        let mut out = [0u8; 32];
        let end = hex(&mut out, 1, &[0x00, 0xab, 0x7f]);
        assert_eq!(&out[1..end], b"00:ab:7f");
        assert_eq!(hex(&mut out, 5, &[]), 5);
    }
}
