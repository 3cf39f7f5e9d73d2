//! The human views: one line per packet, or (`-v`) a tree of every field with its byte offsets.
//! Offsets are hexadecimal, four digits, as the demo shows them: `002a` for one byte,
//! `002c-002d` for the first and last of several. Output goes into a batch's buffer, where
//! writing cannot fail.

use std::io::{self, Write};
use std::ops::Range;
use std::time::Duration;

use roce_wire::capture::Record;
use roce_wire::describe::{Description, Field, Value};
use roce_wire::Error;

use super::link_header_len;

pub fn line(out: &mut Vec<u8>, record: &Record, since_first: Duration, description: &Description) {
    // Writing into a Vec cannot fail.
    let _ = write_line(out, record, since_first, description);
}

fn write_line(
    out: &mut Vec<u8>,
    record: &Record,
    since_first: Duration,
    description: &Description,
) -> io::Result<()> {
    // Seconds since the capture's first packet, to the microsecond, as tshark's packet list.
    writeln!(
        out,
        "{:>5} {:>10.6} {}",
        record.number,
        since_first.as_secs_f64(),
        description.summary()
    )
}

pub fn malformed(out: &mut Vec<u8>, record: &Record, since_first: Duration, error: &Error) {
    let _ = write_malformed(out, record, since_first, error);
}

fn write_malformed(
    out: &mut Vec<u8>,
    record: &Record,
    since_first: Duration,
    error: &Error,
) -> io::Result<()> {
    write!(
        out,
        "{:>5} {:>10.6} malformed: {error}",
        record.number,
        since_first.as_secs_f64()
    )?;
    if record.data.len() < record.original_len as usize {
        write!(
            out,
            " (the capture kept {} of its {} bytes)",
            record.data.len(),
            record.original_len
        )?;
    }
    writeln!(out)
}

pub fn tree(out: &mut Vec<u8>, record: &Record, since_first: Duration, description: &Description) {
    let _ = write_tree(out, record, since_first, description);
}

fn write_tree(
    out: &mut Vec<u8>,
    record: &Record,
    since_first: Duration,
    description: &Description,
) -> io::Result<()> {
    write_line(out, record, since_first, description)?;
    writeln!(
        out,
        "      {} bytes, at {}.{:09} s since the epoch",
        record.data.len(),
        record.timestamp.as_secs(),
        record.timestamp.subsec_nanos()
    )?;
    let link = link_header_len(record);
    if link > 0 {
        writeln!(
            out,
            "    Linux cooked capture header, bytes {}",
            offsets(&(0..link))
        )?;
    }
    let fields = description.fields();
    let frame = description.frame().bytes();
    for group in fields.chunk_by(|a, b| a.layer == b.layer) {
        let start = group.iter().map(|f| f.bytes.start).min().unwrap_or(0);
        let end = group.iter().map(|f| f.bytes.end).max().unwrap_or(0);
        writeln!(
            out,
            "    {}, bytes {}",
            group[0].layer.title(),
            offsets(&(start..end))
        )?;
        for field in group {
            field_line(out, field, frame)?;
        }
    }
    writeln!(out)
}

/// Bytes as the tree and the demo show them: `002a`, or `002c-002d` (first and last).
fn offsets(bytes: &Range<usize>) -> String {
    match bytes.len() {
        0 | 1 => format!("{:04x}", bytes.start),
        _ => format!("{:04x}-{:04x}", bytes.start, bytes.end - 1),
    }
}

/// `      002b      ..00 .... = Pad count: 0  [infiniband.bth.padcnt]`
fn field_line(out: &mut impl Write, field: &Field, frame: &[u8]) -> io::Result<()> {
    write!(out, "      {:<9} ", offsets(&field.bytes))?;
    if let Some(bits) = field.bit_pattern(frame) {
        write!(out, "{bits} = ")?;
    }
    match field.value {
        Value::Bytes(bytes) if bytes.len() > LONG_BYTES => {
            writeln!(
                out,
                "{}: {}  [{}]",
                field.name(),
                long_bytes(bytes),
                field.key()
            )
        }
        _ => writeln!(out, "{}: {}  [{}]", field.name(), field, field.key()),
    }
}

/// Byte strings longer than this (a CM message's private data, up to 224 bytes) are shortened
/// in the tree; `--json` has them whole.
const LONG_BYTES: usize = 16;

/// The first bytes of a long byte string, and how long it is: `01:02:...:10 … (92 bytes, 40
/// of them after the last non-zero one)`.
fn long_bytes(bytes: &[u8]) -> String {
    let shown = Value::Bytes(&bytes[..LONG_BYTES]);
    let used = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    match bytes.len() - used {
        _ if used == 0 => format!("all zero ({} bytes)", bytes.len()),
        0 => format!("{shown} … ({} bytes)", bytes.len()),
        zeros if used <= LONG_BYTES => format!(
            "{} ({} bytes, the last {zeros} zero)",
            Value::Bytes(&bytes[..used]),
            bytes.len()
        ),
        zeros => format!("{shown} … ({} bytes, the last {zeros} zero)", bytes.len()),
    }
}
