//! A frame as an annotated hex dump, the way Wireshark's byte view and packet tree read
//! together: each header under its name, each field's bytes at their offset in the frame, and
//! beside them what the field is and means (from `roce_wire::describe`, which `roce decode -v`
//! uses too). Fields that share a byte (flags, the IP version and header length) are listed
//! under it with their bits drawn.

use std::io::{self, Write};

use anstyle::Style;
use roce_wire::describe::{Description, Field};
use roce_wire::{Frame, Layer};

use super::style;
use crate::wire::Seen;

/// Bytes of a field shown on one line; longer fields continue on the next.
const FIELD_BYTES: usize = 8;
/// Bytes of payload shown on one line, with their text.
const PAYLOAD_BYTES: usize = 16;
/// Payload bytes shown at most; the rest is counted.
const SHOWN_PAYLOAD: usize = 80;
/// Width of the hex column of a field line.
const HEX_WIDTH: usize = FIELD_BYTES * 3 - 1;

/// Where a frame came from and went, in words.
pub fn direction(seen: &Seen) -> String {
    format!("{} NIC → {} NIC", seen.from, seen.from.peer())
}

/// The frame's heading line and, when its bytes were kept, its fields; `full` shows the
/// Ethernet, IP and UDP headers too.
pub fn write(out: &mut dyn Write, seen: &Seen, full: bool) -> io::Result<()> {
    let lost = if seen.dropped {
        format!(
            "  {}↯ lost on the wire (dropped by the demo){}",
            style::LOST,
            style::LOST.render_reset()
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "   {}frame {}{}  {}  ({} bytes){lost}",
        style::STRONG,
        seen.number,
        style::STRONG.render_reset(),
        direction(seen),
        seen.len
    )?;
    let Some(bytes) = &seen.bytes else {
        return Ok(());
    };
    let Ok(frame) = Frame::parse(bytes) else {
        return writeln!(out, "   (not a RoCE frame)");
    };
    let description = Description::new(&frame);
    let opcode = style::opcode(&frame.repr.bth.opcode.to_string());
    writeln!(
        out,
        "   {opcode}{}{}",
        description.summary(),
        opcode.render_reset()
    )?;
    let fields = description.fields();
    for group in fields.chunk_by(|a, b| a.layer == b.layer) {
        let layer = group[0].layer;
        let lower = matches!(
            layer,
            Layer::Ethernet | Layer::Vlan | Layer::Ipv4 | Layer::Ipv6 | Layer::Udp
        );
        if lower && !full {
            continue;
        }
        if !full && layer == Layer::Bth {
            writeln!(
                out,
                "     {}(Ethernet, IPv4 and UDP headers as in the first frame){}",
                style::DIM,
                style::DIM.render_reset()
            )?;
        }
        if layer == Layer::Payload {
            payload(out, &frame, group)?;
            continue;
        }
        heading(out, layer.title())?;
        for same in group.chunk_by(|a, b| a.bytes == b.bytes) {
            fields_line(out, bytes, same)?;
        }
    }
    Ok(())
}

fn heading(out: &mut dyn Write, title: &str) -> io::Result<()> {
    writeln!(
        out,
        "     {}{title}{}",
        style::LAYER,
        style::LAYER.render_reset()
    )
}

/// Fields that occupy the same bytes: the bytes once, then each field.
fn fields_line(out: &mut dyn Write, frame: &[u8], same: &[Field]) -> io::Result<()> {
    let range = same[0].bytes.clone();
    let raw = frame.get(range.clone()).unwrap_or_default();
    let mut chunks = raw.chunks(FIELD_BYTES);
    for (i, field) in same.iter().enumerate() {
        let chunk = if i == 0 { chunks.next() } else { None };
        let hex = chunk.map(hex).unwrap_or_default();
        let at = if i == 0 {
            format!("{:04x}", range.start)
        } else {
            "    ".into()
        };
        let bits = field
            .bit_pattern(frame)
            .map(|b| format!("{b} = "))
            .unwrap_or_default();
        writeln!(
            out,
            "       {}{at}{}  {hex:<HEX_WIDTH$}  {bits}{}: {field}",
            style::DIM,
            style::DIM.render_reset(),
            field.name()
        )?;
    }
    for (i, chunk) in chunks.enumerate() {
        let at = range.start + (i + 1) * FIELD_BYTES;
        writeln!(
            out,
            "       {}{at:04x}{}  {}",
            style::DIM,
            style::DIM.render_reset(),
            hex(chunk)
        )?;
    }
    Ok(())
}

/// The payload as `hexdump -C` lines (the first [`SHOWN_PAYLOAD`] bytes), the pad, the ICRC.
fn payload(out: &mut dyn Write, frame: &Frame, fields: &[Field]) -> io::Result<()> {
    let layout = &frame.layout;
    let data = frame.payload();
    if !data.is_empty() {
        heading(out, &format!("Payload ({} bytes)", data.len()))?;
        for (i, line) in data
            .chunks(PAYLOAD_BYTES)
            .take(SHOWN_PAYLOAD / PAYLOAD_BYTES)
            .enumerate()
        {
            let at = layout.payload.start + i * PAYLOAD_BYTES;
            writeln!(
                out,
                "       {}{at:04x}{}  {:<w$}  |{}|",
                style::DIM,
                style::DIM.render_reset(),
                hex(line),
                printable(line),
                w = PAYLOAD_BYTES * 3 - 1
            )?;
        }
        if data.len() > SHOWN_PAYLOAD {
            writeln!(
                out,
                "       …     ({} more bytes)",
                data.len() - SHOWN_PAYLOAD
            )?;
        }
    }
    let pad = frame.bytes().get(layout.pad.clone()).unwrap_or_default();
    if !pad.is_empty() {
        writeln!(
            out,
            "       {}{:04x}{}  {:<HEX_WIDTH$}  Pad: {} byte(s) to a multiple of 4",
            style::DIM,
            layout.pad.start,
            style::DIM.render_reset(),
            hex(pad),
            pad.len()
        )?;
    }
    if let Some(icrc) = fields
        .iter()
        .find(|f| f.key() == "infiniband.invariant.crc")
    {
        heading(out, "Invariant CRC (ICRC)")?;
        let raw = frame.bytes().get(icrc.bytes.clone()).unwrap_or_default();
        let verdict: Style = if frame.icrc().is_ok() {
            style::GOOD
        } else {
            style::BAD
        };
        writeln!(
            out,
            "       {}{:04x}{}  {:<HEX_WIDTH$}  {}: {verdict}{icrc}{}",
            style::DIM,
            icrc.bytes.start,
            style::DIM.render_reset(),
            hex(raw),
            icrc.name(),
            verdict.render_reset()
        )?;
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    let parts: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(" ")
}

/// The bytes as text, `.` for what does not print.
pub fn printable(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '.'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::roce_frame;
    use crate::Side;
    use roce_wire::Kind;
    use std::time::Duration;

    fn seen(bytes: Vec<u8>) -> Seen {
        Seen {
            number: 1,
            at: Duration::ZERO,
            from: Side::Initiator,
            len: bytes.len(),
            brief: None,
            bytes: Some(bytes),
            dropped: false,
        }
    }

    fn shown(frame: Vec<u8>, full: bool) -> String {
        let mut out = Vec::new();
        write(&mut out, &seen(frame), full).unwrap();
        anstream::adapter::strip_str(&String::from_utf8(out).unwrap()).to_string()
    }

    #[test]
    fn every_header_field_by_field_with_its_bytes() {
        let text = shown(roce_frame(Kind::WriteOnly, 1234, b"Hello, target!"), true);
        for want in [
            "frame 1  initiator NIC → target NIC  (",
            "RC RDMA_WRITE_ONLY QP=0x000011 PSN=1234",
            "     Ethernet\n       0000  02 00 0a 00 00 02",
            "Destination: 02:00:0a:00:00:02",
            "     IPv4\n       000e  45",
            "0100 .... = Version: 4",
            "Destination port: 4791 (RoCEv2)",
            "     Base Transport Header (BTH)\n       002a  0a ",
            "Opcode: 10 (RC RDMA_WRITE_ONLY)",
            "PSN: 1234",
            "       0036  00 00 00 00 00 00 00 40  Virtual address: 0x0000000000000040",
            "R_Key: 0x00000100",
            "     Payload (14 bytes)\n       0046  48 65 6c 6c 6f 2c 20 74 61 72 67 65 74 21",
            "|Hello, target!|",
            "Pad: 2 byte(s) to a multiple of 4",
            "     Invariant CRC (ICRC)\n       0056  ",
            "(ok)",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        // A field that shares its byte with the one above: its bits, under the same byte.
        let shared = format!("\n{}.... 0101 = Header length: 20 (bytes)", " ".repeat(38));
        assert!(text.contains(&shared), "{text}");
        assert!(!text.contains("as in the first frame"));
    }

    #[test]
    fn later_frames_leave_out_the_lower_headers_and_long_payloads_are_cut() {
        let text = shown(roce_frame(Kind::WriteOnly, 9, &[b'x'; 100]), false);
        assert!(!text.contains("     Ethernet"));
        assert!(!text.contains("     UDP"));
        assert!(text.contains("     Base Transport Header (BTH)"));
        assert!(text.contains("(Ethernet, IPv4 and UDP headers as in the first frame)"));
        assert!(text.contains("…     (20 more bytes)"));
    }

    #[test]
    fn a_lost_frame_says_so() {
        let mut s = seen(roce_frame(Kind::WriteMiddle, 9, &[0; 256]));
        s.dropped = true;
        let mut out = Vec::new();
        write(&mut out, &s, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(anstream::adapter::strip_str(&text)
            .to_string()
            .contains("↯ lost on the wire (dropped by the demo)"));
    }
}
