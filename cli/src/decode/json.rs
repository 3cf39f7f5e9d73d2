//! `--json`: one object per packet, keyed by tshark's field names (`infiniband.bth.opcode`, ...)
//! so the two decoders can be compared key by key; fields tshark has no name for are under
//! `roce.`. Numbers are JSON numbers, flags booleans, addresses and byte strings text in
//! tshark's notation. By default the essential fields (addresses, ports, priority, ECN and every
//! transport field); with `-v`, every field.
//!
//! Written straight into a line buffer rather than through serde: keys come quoted from the
//! description (`Field::json_entry`; plain names that JSON never escapes, which a test checks)
//! and values are numbers, booleans and hex or decimal text, so per-packet escaping would be
//! pure cost — and decoding must outrun tshark by sixty times. The two strings that can hold
//! anything, a file name and an error message, go through serde_json.
//!
//! Most packets are written by a plan made once for their layout ([`plan`]); the walk through
//! the description here is for the rest (management datagrams) and is what the plans are
//! tested against.

use std::convert::Infallible;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

use roce_wire::capture::Record;
use roce_wire::describe::{Description, Field, Value, Visit};
use roce_wire::{Error, Layer, Opcode};

mod decimal;
mod plan;

pub use plan::Plans;

/// A batch's output while its JSON lines are written into it. The lines so far end at `end`;
/// past them the output holds room, already initialized, that a plan writes the next line into
/// where it stays: no copy per line, only the zeroing of the room the first time it is added
/// (the decoder keeps a batch's output, room and all, for its next records: [`Lines::end`]);
/// [`Lines::finish`] cuts the output back to the lines.
pub struct Lines {
    end: usize,
    /// A line written by walking the description, before it is put in place.
    walked: Vec<u8>,
}

/// Room kept past the lines: what a plan writes a line into.
const ROOM: usize = plan::ROOM;
/// How much room is added at a time, past the line that needs it: a line or two, so the
/// zeroing is a short run of vector stores.
const GROW: usize = 1 << 10;

impl Lines {
    /// Starts after what `out` already holds.
    #[cfg(test)]
    pub fn new(out: &[u8]) -> Lines {
        Lines::at(out.len())
    }

    /// Starts at `end`: the output's bytes from there on are room, written over.
    pub fn at(end: usize) -> Lines {
        Lines {
            end,
            walked: Vec::new(),
        }
    }

    /// The room after the lines, made if need be.
    fn room<'o>(&self, out: &'o mut Vec<u8>) -> &'o mut [u8; ROOM] {
        if out.len() < self.end + ROOM {
            out.resize(self.end + ROOM + GROW, 0);
        }
        let room = &mut out[self.end..self.end + ROOM];
        room.try_into().expect("the room is ROOM long")
    }

    /// Appends the line `write` appends to an empty vector.
    fn append(&mut self, out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
        let mut line = std::mem::take(&mut self.walked);
        line.clear();
        write(&mut line);
        match self.room(out).get_mut(..line.len()) {
            Some(room) => room.copy_from_slice(&line),
            // Longer than the room (kilobytes of Ethernet padding shown as hex): the room goes,
            // and comes back at the next line.
            None => {
                out.truncate(self.end);
                out.extend_from_slice(&line);
            }
        }
        self.end += line.len();
        self.walked = line;
    }

    /// Cuts `out` back to the lines written.
    #[cfg(test)]
    pub fn finish(self, out: &mut Vec<u8>) {
        out.truncate(self.end);
    }

    /// Where the lines written end; the output's bytes after them are room that a later
    /// [`Lines::at`] can write over without zeroing it again.
    pub fn end(self) -> usize {
        self.end
    }

    /// Appends one packet's object and its newline, by the plan for its layout in `plans`
    /// where it has one.
    pub fn packet(
        &mut self,
        out: &mut Vec<u8>,
        plans: &mut Plans,
        every_field: bool,
        record: &Record,
        file: Option<&str>,
        description: &Description,
    ) {
        let room = self.room(out);
        if let Some(len) = plans.write(room, every_field, record, file, description) {
            self.end += len;
            return;
        }
        self.append(out, |line| {
            walk(line, every_field, record, file, description)
        });
    }

    /// Appends the object of a record that is RoCE but malformed: the record's own fields and
    /// why.
    pub fn malformed(
        &mut self,
        out: &mut Vec<u8>,
        every_field: bool,
        record: &Record,
        file: Option<&str>,
        error: &Error,
    ) {
        self.append(out, |line| {
            start(line, every_field, record, file);
            line.extend_from_slice(b",\"roce.malformed\":");
            string(line, &error.to_string());
            line.extend_from_slice(b"}\n");
        });
    }
}

/// Appends one packet's object and its newline to `line`, walking the description: what the
/// plans are tested against, and how the packets no plan is made for are written.
fn walk(
    line: &mut Vec<u8>,
    every_field: bool,
    record: &Record,
    file: Option<&str>,
    description: &Description,
) {
    start(line, every_field, record, file);
    let entries = Entries {
        line: &mut *line,
        opcode_named: false,
    };
    match every_field {
        true => description.visit(entries),
        false => description.visit_essential(entries),
    }
    .unwrap_or_else(|never: Infallible| match never {});
    line.extend_from_slice(b"}\n");
}

/// Opens the object with the record's own fields.
fn start(line: &mut Vec<u8>, every_field: bool, record: &Record, file: Option<&str>) {
    line.extend_from_slice(b"{\"frame.number\":");
    number(line, record.number);
    line.extend_from_slice(b",\"frame.time_epoch\":");
    epoch(line, record.timestamp);
    line.extend_from_slice(b",\"frame.len\":");
    number(line, record.original_len.into());
    if every_field {
        line.extend_from_slice(b",\"frame.cap_len\":");
        number(line, record.data.len() as u64);
    }
    if let Some(name) = file {
        line.extend_from_slice(b",\"roce.file\":");
        string(line, name);
    }
}

/// A string that may hold anything (a file name, an error message), escaped by serde_json.
fn string(line: &mut Vec<u8>, text: &str) {
    // Writing into a Vec cannot fail, and a str always serializes.
    let _ = serde_json::to_writer(&mut *line, text);
}

/// The entry that names the opcode beside its number, `,"roce.bth.opcode_name":"RC SEND_ONLY"`,
/// for every opcode byte (empty for bytes that are no opcode), made once.
fn opcode_name_entry(opcode: u8) -> &'static [u8] {
    static ENTRIES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    let entries = ENTRIES.get_or_init(|| {
        (0..=u8::MAX)
            .map(|byte| match Opcode::from_u8(byte) {
                Ok(op) => format!(",\"{OPCODE_NAME}\":\"{op}\"").into_bytes(),
                Err(_) => Vec::new(),
            })
            .collect()
    });
    &entries[usize::from(opcode)]
}

/// The key of the opcode's name; tshark has none (it names the opcode only in its tree).
pub const OPCODE_NAME: &str = "roce.bth.opcode_name";

#[inline(always)]
fn number(line: &mut Vec<u8>, n: u64) {
    written(line, |out| decimal::any(out, 0, n));
}

/// An address byte in decimal.
#[inline(always)]
fn octet(line: &mut Vec<u8>, n: u8) {
    written(line, |out| decimal::byte(out, 0, n));
}

/// Appends what `write` writes at the start of the slice it is given (24 bytes, of which it may
/// store into all but returns how many it wrote): room added with a fixed-size copy, so there
/// is no call to memcpy for a copy of a length known only at run time.
#[inline(always)]
fn written(line: &mut Vec<u8>, write: impl FnOnce(&mut [u8]) -> usize) {
    let at = line.len();
    line.extend_from_slice(&[0; 24]);
    let len = write(&mut line[at..]);
    line.truncate(at + len);
}

/// Appends each field as a JSON entry, and the opcode's name after the opcode (the BTH's first
/// field). A visitor of its own rather than a closure so that its one method can be inlined
/// into the walk: the fields are then written as they are read.
struct Entries<'l> {
    line: &'l mut Vec<u8>,
    opcode_named: bool,
}

impl<'a> Visit<'a> for Entries<'_> {
    type Error = Infallible;

    #[inline(always)]
    fn field(&mut self, field: &Field<'a>) -> Result<(), Infallible> {
        let line = &mut *self.line;
        let (padded, len) = field.padded_json_entry();
        let at = line.len();
        line.extend_from_slice(padded);
        line.truncate(at + len);
        value(line, &field.value);
        if !self.opcode_named && field.layer == Layer::Bth {
            self.opcode_named = true;
            if let Value::Uint(opcode, _) = field.value {
                line.extend_from_slice(opcode_name_entry(opcode as u8));
            }
        }
        Ok(())
    }
}

/// Seconds since the epoch to the nanosecond, as a string: tshark's `frame.time_epoch`, with no
/// float rounding.
fn epoch(line: &mut Vec<u8>, t: Duration) {
    line.push(b'"');
    number(line, t.as_secs());
    let nanos = t.subsec_nanos();
    line.extend_from_slice(&[b'.', b'0' + (nanos / 100_000_000) as u8]);
    written(line, |out| decimal::exactly_8(out, 0, nanos % 100_000_000));
    line.push(b'"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Bytes as tshark shows them: two hex digits each, separated by colons.
fn hex_bytes(line: &mut Vec<u8>, bytes: &[u8]) {
    line.push(b'"');
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            line.push(b':');
        }
        line.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
    }
    line.push(b'"');
}

#[inline(always)]
fn value(line: &mut Vec<u8>, v: &Value) {
    match *v {
        Value::Uint(n, _) => number(line, n),
        // Two fixed-size copies rather than one of either size, which would be a call.
        Value::Flag(true) => line.extend_from_slice(b"true"),
        Value::Flag(false) => line.extend_from_slice(b"false"),
        Value::Mac(mac) => hex_bytes(line, &mac.0),
        Value::Bytes(bytes) => hex_bytes(line, bytes),
        Value::Ipv4(a) => {
            let [a, b, c, d] = a.octets();
            line.push(b'"');
            octet(line, a);
            line.push(b'.');
            octet(line, b);
            line.push(b'.');
            octet(line, c);
            line.push(b'.');
            octet(line, d);
            line.push(b'"');
        }
        // Writing into a Vec cannot fail.
        Value::Ipv6(a) => {
            let _ = write!(line, "\"{a}\"");
        }
        Value::Text(text) => {
            line.push(b'"');
            line.extend_from_slice(text.as_bytes());
            line.push(b'"');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::capture::Reader;
    use std::path::Path;

    /// One packet's line appended to `out`, as the decoder appends it.
    fn packet(
        out: &mut Vec<u8>,
        plans: &mut Plans,
        every_field: bool,
        record: &Record,
        file: Option<&str>,
        description: &Description,
    ) {
        let mut lines = Lines::new(out);
        lines.packet(out, plans, every_field, record, file, description);
        lines.finish(out);
    }

    /// The same fields through serde_json: what the fast writer must equal.
    fn through_serde(record: &Record, description: &Description) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        map.insert("frame.number".into(), record.number.into());
        let t = record.timestamp;
        map.insert(
            "frame.time_epoch".into(),
            format!("{}.{:09}", t.as_secs(), t.subsec_nanos()).into(),
        );
        map.insert("frame.len".into(), record.original_len.into());
        map.insert("frame.cap_len".into(), record.data.len().into());
        for field in description.fields() {
            let v: serde_json::Value = match field.value {
                Value::Uint(n, _) => n.into(),
                Value::Flag(b) => b.into(),
                other => other.to_string().into(),
            };
            assert!(
                map.insert(field.key().into(), v).is_none(),
                "{}",
                field.key()
            );
        }
        let opcode = description.frame().repr.bth.opcode;
        map.insert(OPCODE_NAME.into(), opcode.to_string().into());
        serde_json::Value::Object(map)
    }

    #[test]
    fn the_fast_writer_writes_what_serde_json_would_for_every_bundled_packet() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../captures");
        let mut packets = 0;
        let mut plans = Plans::default();
        for path in roce_tests::captures_under(Path::new(dir)) {
            let bytes = std::fs::read(&path).expect("reading a capture");
            let mut reader = Reader::new(&bytes[..]).expect("a capture");
            while let Some(record) = reader.next_record() {
                let record = record.expect("a whole record");
                let Ok(frame) = record.frame() else { continue };
                let description = Description::new(&frame);
                let mut out = Vec::new();
                packet(&mut out, &mut plans, true, &record, None, &description);
                assert_eq!(out.last(), Some(&b'\n'));
                let ours: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
                assert_eq!(
                    ours,
                    through_serde(&record, &description),
                    "{}",
                    path.display()
                );
                packets += 1;
            }
        }
        assert!(packets > 200, "only {packets} packets");
    }

    /// The packet's line written the plain way, with `format!` and the fields' `Display`: the
    /// output the writer had before it was made fast, which it must still equal byte for byte.
    fn plain(every_field: bool, record: &Record, file: Option<&str>, d: &Description) -> String {
        let t = record.timestamp;
        let mut line = format!(
            "{{\"frame.number\":{},\"frame.time_epoch\":\"{}.{:09}\",\"frame.len\":{}",
            record.number,
            t.as_secs(),
            t.subsec_nanos(),
            record.original_len
        );
        if every_field {
            line += &format!(",\"frame.cap_len\":{}", record.data.len());
        }
        if let Some(name) = file {
            line += &format!(",\"roce.file\":{}", serde_json::Value::from(name));
        }
        let mut opcode_named = false;
        let each = |field: &Field| {
            let value = match field.value {
                Value::Uint(n, _) => n.to_string(),
                Value::Flag(b) => b.to_string(),
                other => format!("\"{other}\""),
            };
            line += &format!(",\"{}\":{value}", field.key());
            if !opcode_named && field.layer == Layer::Bth {
                opcode_named = true;
                if let Value::Uint(n, _) = field.value {
                    if let Ok(op) = Opcode::from_u8(n as u8) {
                        line += &format!(",\"{OPCODE_NAME}\":\"{op}\"");
                    }
                }
            }
            Ok::<(), Infallible>(())
        };
        let Ok(()) = match every_field {
            true => d.visit(each),
            false => d.visit_essential(each),
        };
        line + "}\n"
    }

    /// The bytes of one of the project's committed captures.
    fn committed_capture(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../captures")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    }

    /// The project's committed captures, and the shared real ones where this machine has them.
    fn every_capture() -> Vec<std::path::PathBuf> {
        let mut captures = roce_tests::captures_under(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../captures"
        )));
        captures.extend(roce_tests::captures_under(
            &roce_tests::shared_captures_dir(),
        ));
        captures
    }

    #[test]
    fn the_fast_writer_equals_plain_formatting_byte_for_byte_on_every_capture() {
        let captures = every_capture();
        let mut packets = 0;
        let mut plans = Plans::default();
        for path in &captures {
            let bytes = std::fs::read(path).expect("reading a capture");
            let mut reader = Reader::new(&bytes[..]).expect("a capture");
            while let Some(record) = reader.next_record() {
                let record = record.expect("a whole record");
                let Ok(frame) = record.frame() else { continue };
                let description = Description::new(&frame);
                for (every_field, file) in [(false, None), (true, Some("a \"b\".pcap"))] {
                    let mut out = b"left alone|".to_vec();
                    packet(
                        &mut out,
                        &mut plans,
                        every_field,
                        &record,
                        file,
                        &description,
                    );
                    let expected = plain(every_field, &record, file, &description);
                    assert_eq!(
                        String::from_utf8(out).expect("UTF-8"),
                        format!("left alone|{expected}"),
                        "{} record {}",
                        path.display(),
                        record.number
                    );
                }
                packets += 1;
            }
        }
        assert!(packets > 200, "only {packets} packets");
    }

    #[test]
    fn lines_written_one_after_another_are_the_plain_lines_end_to_end() {
        let captures = every_capture();
        let mut plans = Plans::default();
        let mut lines_seen = 0;
        for path in &captures {
            let bytes = std::fs::read(path).expect("reading a capture");
            for (every_field, file) in [(false, None), (true, Some("x.pcap"))] {
                let mut reader = Reader::new(&bytes[..]).expect("a capture");
                let mut out = b"before|".to_vec();
                let mut expected = String::from("before|");
                let mut lines = Lines::new(&out);
                while let Some(record) = reader.next_record() {
                    let record = record.expect("a whole record");
                    match record.frame() {
                        Ok(frame) => {
                            let description = Description::new(&frame);
                            lines.packet(
                                &mut out,
                                &mut plans,
                                every_field,
                                &record,
                                file,
                                &description,
                            );
                            expected += &plain(every_field, &record, file, &description);
                        }
                        Err(Error::NotRoce(_)) => continue,
                        Err(error) => {
                            lines.malformed(&mut out, every_field, &record, file, &error);
                            let mut line = Vec::new();
                            start(&mut line, every_field, &record, file);
                            expected += std::str::from_utf8(&line).unwrap();
                            expected += &format!(
                                ",\"roce.malformed\":{}}}\n",
                                serde_json::Value::from(error.to_string())
                            );
                        }
                    }
                    lines_seen += 1;
                }
                lines.finish(&mut out);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    expected,
                    "{}",
                    path.display()
                );
            }
        }
        assert!(lines_seen > 400, "only {lines_seen} lines");
    }

    #[test]
    fn a_line_too_long_for_a_plan_is_walked_and_comes_out_the_same() {
        let bytes = committed_capture("every-opcode-ipv4.pcap");
        let mut reader = Reader::new(&bytes[..]).expect("a capture");
        let record = loop {
            let record = reader.next_record().expect("a RoCE frame").unwrap();
            if record.frame().is_ok() {
                break record;
            }
        };
        let mut plans = Plans::default();
        let (mut out, mut expected) = (Vec::new(), String::new());
        let mut lines = Lines::new(&out);
        // Kilobytes of bytes after the IP packet: shown as Ethernet padding, three characters
        // each, more than a plan's line holds (2000), and more than the room after the lines
        // (4000); each followed by a line of the usual size.
        for trailer in [0, 2000, 0, 4000, 0] {
            let mut data = record.data.to_vec();
            data.resize(data.len() + trailer, 0xab);
            let record = Record {
                data: &data,
                ..record
            };
            let frame = record.frame().expect("a frame");
            let description = Description::new(&frame);
            lines.packet(&mut out, &mut plans, true, &record, None, &description);
            expected += &plain(true, &record, None, &description);
        }
        lines.finish(&mut out);
        assert!(expected.len() > 20_000);
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn numbers_are_written_as_decimal_without_leading_zeros() {
        for n in [
            0,
            9,
            10,
            99,
            100,
            101,
            999,
            1000,
            65535,
            4_294_967_295,
            u64::MAX,
            10u64.pow(19),
        ]
        .into_iter()
        .chain((0..2000).map(|i| i * 7919))
        {
            let mut line = b"x".to_vec();
            number(&mut line, n);
            assert_eq!(line, format!("x{n}").into_bytes());
        }
        let mut line = Vec::new();
        epoch(&mut line, Duration::new(1_700_000_000, 42));
        assert_eq!(line, b"\"1700000000.000000042\"");
    }

    #[test]
    fn the_opcode_name_follows_the_opcode() {
        let bytes = committed_capture("aeth-syndromes.pcap");
        let mut reader = Reader::new(&bytes[..]).expect("a capture");
        let record = reader.next_record().unwrap().unwrap();
        let frame = record.frame().unwrap();
        let mut out = Vec::new();
        packet(
            &mut out,
            &mut Plans::default(),
            false,
            &record,
            None,
            &Description::new(&frame),
        );
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(r#""infiniband.bth.opcode":17,"roce.bth.opcode_name":"RC ACKNOWLEDGE","#),
            "{text}"
        );
    }

    #[test]
    fn strings_that_may_need_escaping_are_escaped() {
        let record = Record {
            number: 7,
            timestamp: Duration::new(1, 5),
            link: roce_wire::capture::Link::Ethernet,
            data: &[],
            original_len: 0,
        };
        let mut out = Vec::new();
        let mut lines = Lines::new(&out);
        lines.malformed(
            &mut out,
            false,
            &record,
            Some("a \"quoted\" name.pcap"),
            &Error::UnknownOpcode(0x44),
        );
        lines.finish(&mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["roce.file"], "a \"quoted\" name.pcap");
        assert_eq!(v["frame.time_epoch"], "1.000000005");
        assert_eq!(v["roce.malformed"], "unknown BTH opcode 0x44");
    }
}
