//! `--json`: one object per packet, keyed by tshark's field names (`infiniband.bth.opcode`, ...)
//! so the two decoders can be compared key by key; fields tshark has no name for are under
//! `roce.`. Numbers are JSON numbers, flags booleans, addresses and byte strings text in
//! tshark's notation. Streamed through serde's serializer: no value tree is built per packet.

use std::fmt;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use roce_wire::capture::Record;
use roce_wire::describe::{Description, Value};
use roce_wire::Error;
use serde::ser::{SerializeMap, Serializer};

pub fn packet(
    out: &mut impl Write,
    record: &Record,
    file: Option<&Path>,
    description: &Description,
) -> io::Result<()> {
    write_object(out, record, file, |map| {
        description.visit(|field| map.serialize_entry(field.key, &Json(field.value)))
    })
}

pub fn malformed(
    out: &mut impl Write,
    record: &Record,
    file: Option<&Path>,
    error: &Error,
) -> io::Result<()> {
    write_object(out, record, file, |map| {
        map.serialize_entry("roce.malformed", &Text(error))
    })
}

type Map<'w, W> = serde_json::ser::Compound<'w, W, serde_json::ser::CompactFormatter>;

/// Writes `{"frame.number": ..., <fields>}` and a newline.
fn write_object<W: Write>(
    out: &mut W,
    record: &Record,
    file: Option<&Path>,
    fields: impl FnOnce(&mut Map<'_, &mut W>) -> Result<(), serde_json::Error>,
) -> io::Result<()> {
    let mut serializer = serde_json::Serializer::new(&mut *out);
    let mut map = serializer.serialize_map(None)?;
    if let Some(path) = file {
        map.serialize_entry("roce.file", &Text(path.display()))?;
    }
    map.serialize_entry("frame.number", &record.number)?;
    map.serialize_entry("frame.time_epoch", &Text(Epoch(record.timestamp)))?;
    map.serialize_entry("frame.len", &record.original_len)?;
    map.serialize_entry("frame.cap_len", &record.data.len())?;
    fields(&mut map)?;
    map.end()?;
    out.write_all(b"\n")
}

/// Seconds since the epoch to the nanosecond, as text: tshark's `frame.time_epoch`, with no
/// float rounding.
struct Epoch(Duration);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}", self.0.as_secs(), self.0.subsec_nanos())
    }
}

/// Anything printable, serialized as a JSON string without an intermediate `String`.
struct Text<T>(T);

impl<T: fmt::Display> serde::Serialize for Text<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

struct Json<'a>(Value<'a>);

impl serde::Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Uint(n, _) => s.serialize_u64(n),
            Value::Flag(b) => s.serialize_bool(b),
            other => s.collect_str(&other),
        }
    }
}
