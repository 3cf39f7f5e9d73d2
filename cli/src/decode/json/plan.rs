//! A packet's JSON written by a plan made once for its layout. Frames of one
//! [layout](LayoutKey) have the same fields in the same places (the wire crate's walk says so
//! and tests it), so the walk through the tables, the choice of each field's key and the
//! branching on each row's shape are done once per layout, by walking the first such frame:
//! what is left per packet is a list of steps, each a piece of fixed text (the keys between two
//! values, already quoted, and whatever else the layout fixes: the opcode, its name, a string
//! value's quotes) copied whole as one fixed-size block, and one value read from a known offset
//! (or from the record: its number, time and lengths).
//!
//! Management datagrams have no layout key (their fields follow their contents); they, and any
//! frame a plan could not be made for, are written by walking the tables.

use std::io::Write;

use roce_wire::capture::Record;
use roce_wire::describe::{wire_order, Description, Field, LayoutKey, Source, Value};
use roce_wire::{Ipv6Address, Layer};

use super::{decimal_digits, digits_into, opcode_name_entry, HEX, PAIRS};

/// The room for each step's fixed text: copied whole, a block of a size known when compiling is
/// a few vector moves, where a copy of a length known only at run time is a call to memcpy.
/// Longer text takes several steps.
const TEXT: usize = 64;
/// Room past a line's end that a step may write into before the line is cut back: the rest of
/// a text block, or a `false` written as eight bytes.
const SLACK: usize = TEXT + 8;
/// Plans kept at once per thread; past that, the cache starts again (a capture of ever new
/// layouts keeps its memory flat).
const MAX_PLANS: usize = 1024;

/// How one value is read from a frame of the plan's layout and written.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// `(the 8 bytes ending at end, big-endian, & mask) >> shift, times scale`.
    Number {
        end: u16,
        mask: u64,
        shift: u8,
        scale: u8,
    },
    /// Whether the 8 bytes ending at `end` have any bit of `mask`.
    Flag {
        end: u16,
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
    PayloadAndPadLen,
    PayloadLen,
    Pad,
    EthPadding,
    Icrc,
    IcrcExpected,
    IcrcStatus,
    /// The record's own fields.
    FrameNumber,
    Epoch,
    FrameLen,
    CapLen,
    /// The capture's name, escaped as JSON (the room for it is added per packet).
    File,
    /// No value: the text goes on in the next step.
    Nothing,
}

impl Read {
    /// The most bytes the value can take (the Ethernet padding's are added per packet).
    fn max_len(self) -> usize {
        match self {
            Read::Number { .. } | Read::PayloadAndPadLen | Read::PayloadLen => 20,
            Read::Icrc | Read::IcrcExpected => 10,
            Read::Flag { .. } => 5,
            Read::Mac { .. } => 17,
            Read::Ipv4 { .. } => 15,
            Read::Ipv6 { .. } => 48,
            Read::Bytes { len, .. } => 3 * usize::from(len),
            // At most three pad bytes.
            Read::Pad => 9,
            Read::EthPadding | Read::File | Read::Nothing => 0,
            Read::IcrcStatus => 3,
            Read::FrameNumber | Read::FrameLen | Read::CapLen => 20,
            // Seconds, a point and nine digits.
            Read::Epoch => 30,
        }
    }

    /// The frame's bytes the value is read from must end by this.
    fn frame_end(self) -> usize {
        match self {
            Read::Number { end, .. } | Read::Flag { end, .. } => end.into(),
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
            Read::Number { .. }
                | Read::Flag { .. }
                | Read::PayloadAndPadLen
                | Read::PayloadLen
                | Read::Icrc
                | Read::IcrcExpected
                | Read::FrameNumber
                | Read::Epoch
                | Read::FrameLen
                | Read::CapLen
                | Read::File
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
    fn compile<'a>(
        description: &Description<'_, 'a>,
        every_field: bool,
        with_file: bool,
    ) -> Option<Plan> {
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
            frame_len: 0,
            max_len: SLACK,
        };
        // The record's own fields, as `super::start` writes them.
        let mut text = Vec::new();
        for (key, read) in [
            (&b"{\"frame.number\":"[..], Some(Read::FrameNumber)),
            (b",\"frame.time_epoch\":\"", Some(Read::Epoch)),
            (b"\",\"frame.len\":", Some(Read::FrameLen)),
            (b",\"frame.cap_len\":", every_field.then_some(Read::CapLen)),
            (b",\"roce.file\":", with_file.then_some(Read::File)),
        ] {
            if let Some(read) = read {
                text.extend_from_slice(key);
                plan.push(&text, read);
                text.clear();
            }
        }
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

    /// Appends the object of `record`, whose frame (of this plan's layout) `description`
    /// describes, and its newline to `line`; `false` (and nothing appended) if the frame is
    /// shorter than the layout's (which a parsed frame of this layout never is).
    ///
    /// The line is written into `scratch` and then appended whole: room that is already there,
    /// where making room in `line` would fill it first. A line that might not fit (a frame with
    /// kilobytes of padding, a file name of hundreds of characters) is left to the walk.
    fn write(
        &self,
        line: &mut Vec<u8>,
        scratch: &mut Scratch,
        record: &Record,
        file: Option<&str>,
        description: &Description,
    ) -> bool {
        let frame = description.frame();
        let bytes = frame.bytes();
        if bytes.len() < self.frame_len {
            return false;
        }
        let layout = &frame.layout;
        let icrc = description.icrc();
        let file = file.unwrap_or("");
        // Escaped, a byte of the name takes at most six (`\u001f`), plus the quotes.
        let room = self.max_len + 3 * layout.trailer.len() + 6 * file.len() + 2;
        if room > LINE {
            return false;
        }
        let out = &mut scratch[..];
        let mut pos = 0;
        for step in &self.steps {
            // `pos` is below `room`, so this changes nothing; but it shows the compiler that
            // the copies that follow fall within the scratch, which it then need not check.
            pos &= LINE - 1;
            out[pos..pos + TEXT].copy_from_slice(&step.text);
            pos += usize::from(step.len);
            pos = match step.read {
                Read::Number {
                    end,
                    mask,
                    shift,
                    scale,
                } => {
                    let n = (be_ending_at(bytes, end) & mask) >> shift;
                    number(out, pos, n * u64::from(scale))
                }
                Read::Flag { end, mask } => {
                    let set = be_ending_at(bytes, end) & mask != 0;
                    let (text, len) = if set {
                        (b"true    ", 4)
                    } else {
                        (b"false   ", 5)
                    };
                    out[pos..pos + 8].copy_from_slice(text);
                    pos + len
                }
                Read::Mac { at } => {
                    let at = usize::from(at);
                    hex(out, pos, &bytes[at..at + 6])
                }
                Read::Ipv4 { at } => {
                    let at = usize::from(at);
                    let [a, b, c, d] = array(&bytes[at..at + 4]);
                    let pos = octet(out, pos, a);
                    out[pos] = b'.';
                    let pos = octet(out, pos + 1, b);
                    out[pos] = b'.';
                    let pos = octet(out, pos + 1, c);
                    out[pos] = b'.';
                    octet(out, pos + 1, d)
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
                    number(out, pos, (layout.pad.end - layout.payload.start) as u64)
                }
                Read::PayloadLen => number(out, pos, layout.payload.len() as u64),
                Read::Pad => hex(out, pos, &bytes[layout.pad.clone()]),
                Read::EthPadding => hex(out, pos, &bytes[layout.trailer.clone()]),
                Read::Icrc => number(out, pos, wire_order(icrc.found).into()),
                Read::IcrcExpected => number(out, pos, wire_order(icrc.expected).into()),
                Read::IcrcStatus => {
                    let (text, len) = if icrc.is_ok() {
                        (b"ok ", 2)
                    } else {
                        (b"bad", 3)
                    };
                    out[pos..pos + 3].copy_from_slice(text);
                    pos + len
                }
                Read::FrameNumber => number(out, pos, record.number),
                Read::Epoch => {
                    let t = record.timestamp;
                    let pos = number(out, pos, t.as_secs());
                    out[pos] = b'.';
                    digits_into(&mut out[pos + 1..pos + 10], t.subsec_nanos().into());
                    pos + 10
                }
                Read::FrameLen => number(out, pos, record.original_len.into()),
                Read::CapLen => number(out, pos, record.data.len() as u64),
                Read::File => {
                    let mut room = &mut out[pos..];
                    let before = room.len();
                    // The room is the most the escaped name takes, so this cannot fail.
                    let _ = serde_json::to_writer(&mut room, file);
                    pos + before - room.len()
                }
                Read::Nothing => pos,
            };
        }
        line.extend_from_slice(&out[..pos]);
        true
    }
}

/// How `field`'s value is read in every frame of its layout; `None` for a number too close to
/// the frame's start to be read as the eight bytes ending with it (no frame has one).
fn read_of(field: &Field) -> Option<Read> {
    let at = u16::try_from(field.bytes.start).ok()?;
    let len = u16::try_from(field.bytes.len()).ok()?;
    let end = at.checked_add(len)?;
    // The field's bits within the eight bytes that end with it.
    let bits = || -> Option<(u64, u8)> {
        if end < 8 || len > 8 {
            return None;
        }
        let whole = match len {
            8 => u64::MAX,
            _ => (1u64 << (8 * len)) - 1,
        };
        let mask = field.mask().map_or(whole, u64::from);
        Some((mask, mask.trailing_zeros() as u8))
    };
    Some(match field.source() {
        Source::Number { scale, .. } => {
            let (mask, shift) = bits()?;
            Read::Number {
                end,
                mask,
                shift,
                scale,
            }
        }
        Source::Flag => Read::Flag {
            end,
            mask: bits()?.0,
        },
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

/// The eight bytes of `bytes` that end at `end`, as a big-endian number.
#[inline(always)]
fn be_ending_at(bytes: &[u8], end: u16) -> u64 {
    let end = usize::from(end);
    u64::from_be_bytes(array(&bytes[end - 8..end]))
}

/// `raw` as an array (it is exactly `N` long): a fixed-size load rather than a memcpy call.
#[inline(always)]
fn array<const N: usize>(raw: &[u8]) -> [u8; N] {
    raw.try_into().unwrap_or([0; N])
}

/// Writes `n` in decimal at `pos`; returns where it ends.
#[inline(always)]
fn number(out: &mut [u8], pos: usize, n: u64) -> usize {
    if n < 10 {
        out[pos] = b'0' + n as u8;
        pos + 1
    } else if n < 100 {
        let pair = n as usize * 2;
        out[pos..pos + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        pos + 2
    } else {
        let count = decimal_digits(n);
        digits_into(&mut out[pos..pos + count], n);
        pos + count
    }
}

/// An address byte in decimal at `pos`; returns where it ends.
#[inline(always)]
fn octet(out: &mut [u8], pos: usize, n: u8) -> usize {
    let pair = usize::from(n % 100) * 2;
    if n >= 100 {
        out[pos..pos + 3].copy_from_slice(&[b'0' + n / 100, PAIRS[pair], PAIRS[pair + 1]]);
        pos + 3
    } else if n >= 10 {
        out[pos..pos + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        pos + 2
    } else {
        out[pos] = b'0' + n;
        pos + 1
    }
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
/// room they write lines in.
pub struct Plans {
    by_opcode: Vec<Vec<Entry>>,
    count: usize,
    scratch: Box<Scratch>,
}

/// The longest line a plan writes (longer ones are left to the walk).
const LINE: usize = 4096;

/// Where a plan writes a line: twice the longest, so that a write that starts within the first
/// half never needs checking against the end.
type Scratch = [u8; 2 * LINE];

struct Entry {
    key: LayoutKey,
    every_field: bool,
    with_file: bool,
    /// `None` for a layout no plan can be made for (kept so as not to try again).
    plan: Option<Plan>,
}

impl Default for Plans {
    fn default() -> Plans {
        Plans {
            by_opcode: (0..=u8::MAX).map(|_| Vec::new()).collect(),
            count: 0,
            scratch: Box::new([0; 2 * LINE]),
        }
    }
}

impl Plans {
    /// Appends `record`'s object and its newline to `line` by the plan for its frame's layout
    /// in this view (every field or the essential ones, with the file's name or without), made
    /// now if it is the first of its layout; `false` (and nothing appended) for a frame whose
    /// fields are not fixed by its layout.
    pub fn write(
        &mut self,
        line: &mut Vec<u8>,
        every_field: bool,
        record: &Record,
        file: Option<&str>,
        description: &Description,
    ) -> bool {
        let Some(key) = description.layout_key() else {
            return false;
        };
        let with_file = file.is_some();
        let found = self.by_opcode[usize::from(key.opcode())]
            .iter()
            .position(|e| e.key == key && e.every_field == every_field && e.with_file == with_file);
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
                    with_file,
                    plan: Plan::compile(description, every_field, with_file),
                });
                slot.len() - 1
            }
        };
        match &self.by_opcode[usize::from(key.opcode())][index].plan {
            Some(plan) => plan.write(line, &mut self.scratch, record, file, description),
            None => false,
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

    #[test]
    fn numbers_and_octets_are_plain_decimal() {
        for n in [0u64, 7, 10, 99, 100, 4095, 65_535, 16_777_215, u64::MAX] {
            let mut out = [0u8; 40];
            let end = number(&mut out, 3, n);
            assert_eq!(&out[3..end], n.to_string().as_bytes());
        }
        for n in 0..=u8::MAX {
            let mut out = [0u8; 8];
            let end = octet(&mut out, 1, n);
            assert_eq!(&out[1..end], n.to_string().as_bytes());
        }
    }
}
