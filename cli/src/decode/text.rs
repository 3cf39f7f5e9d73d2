//! The human views: one line per packet, or (`-v`) a tree of every field with its byte offsets.

use std::io::{self, Write};
use std::time::Duration;

use roce_wire::capture::Record;
use roce_wire::describe::{Description, Field, Value};
use roce_wire::Error;

use super::link_header_len;

pub fn line(
    out: &mut impl Write,
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

pub fn malformed(
    out: &mut impl Write,
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

pub fn tree(
    out: &mut impl Write,
    record: &Record,
    since_first: Duration,
    description: &Description,
) -> io::Result<()> {
    line(out, record, since_first, description)?;
    writeln!(
        out,
        "      {} bytes, at {}.{:09} s since the epoch",
        record.data.len(),
        record.timestamp.as_secs(),
        record.timestamp.subsec_nanos()
    )?;
    let link = link_header_len(record);
    if link > 0 {
        writeln!(out, "    Linux cooked capture header, bytes 0..{link}")?;
    }
    let fields = description.fields();
    let frame = description.frame().bytes();
    for group in fields.chunk_by(|a, b| a.layer == b.layer) {
        let start = group.iter().map(|f| f.bytes.start).min().unwrap_or(0);
        let end = group.iter().map(|f| f.bytes.end).max().unwrap_or(0);
        writeln!(out, "    {}, bytes {start}..{end}", group[0].layer.title())?;
        for field in group {
            field_line(out, field, frame)?;
        }
    }
    writeln!(out)
}

/// `    43      ..00 .... = Pad count: 0  [infiniband.bth.padcnt]`
fn field_line(out: &mut impl Write, field: &Field, frame: &[u8]) -> io::Result<()> {
    let at = &field.bytes;
    let offsets = if at.len() == 1 {
        at.start.to_string()
    } else {
        format!("{}..{}", at.start, at.end)
    };
    write!(out, "      {offsets:<9} ")?;
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
