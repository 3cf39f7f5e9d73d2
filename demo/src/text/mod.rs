//! The story on a terminal: numbered steps, sentences, annotated packets, the NICs' decisions,
//! memory before and after, and the proof lines.
//!
//! Styles are always written; the stream decides whether they reach the screen (the CLI hands
//! in an `anstream` stream, which drops them when standard output is not a terminal or
//! `NO_COLOR` is set), and [`plain`] drops them for the HTML page's transcript.

pub mod decision;
pub mod packet;

use std::io::{self, Write};

use crate::story::{Beat, Observer};

/// The styles of the narration.
pub mod style {
    use anstyle::{AnsiColor, Color, Style};

    pub const STEP: Style = Style::new().bold().underline();
    pub const STRONG: Style = Style::new().bold();
    pub const DIM: Style = Style::new().dimmed();
    pub const LAYER: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Cyan)));
    pub const GOOD: Style = Style::new()
        .fg_color(Some(Color::Ansi(AnsiColor::Green)))
        .bold();
    pub const BAD: Style = Style::new()
        .fg_color(Some(Color::Ansi(AnsiColor::Red)))
        .bold();
    /// A frame the demo lost on purpose (`loss`): not red, which is for proofs that failed.
    pub const LOST: Style = Style::new()
        .fg_color(Some(Color::Ansi(AnsiColor::Yellow)))
        .bold();
    pub const INITIATOR: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Blue)));
    pub const TARGET: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Magenta)));
    pub const CHANGED: Style = Style::new()
        .fg_color(Some(Color::Ansi(AnsiColor::Green)))
        .bold();

    /// The colour of an opcode's kind, the same as in the HTML ladder: writes blue, reads
    /// green, sends yellow, atomics magenta, acknowledgements plain.
    pub fn opcode(name: &str) -> Style {
        let color = if name.contains("WRITE") {
            AnsiColor::Blue
        } else if name.contains("READ") {
            AnsiColor::Green
        } else if name.contains("SEND") {
            AnsiColor::Yellow
        } else if name.contains("COMPARE") || name.contains("FETCH") || name.contains("ATOMIC") {
            AnsiColor::Magenta
        } else {
            return Style::new();
        };
        Style::new().fg_color(Some(Color::Ansi(color)))
    }
}

/// Bytes per line of a memory dump.
pub const LINE: usize = 16;

/// Tells the story as text to `out`; with `quiet`, only the proof lines.
pub struct Text<W: Write> {
    out: W,
    quiet: bool,
}

impl<W: Write> Text<W> {
    pub fn new(out: W, quiet: bool) -> Text<W> {
        Text { out, quiet }
    }

    fn render(&mut self, beat: &Beat) -> io::Result<()> {
        let out = &mut self.out;
        if self.quiet {
            if let Beat::Proof { held, text } = beat {
                proof(out, *held, text, "")?;
            }
            return out.flush();
        }
        match beat {
            Beat::Step { number, title } => {
                writeln!(out)?;
                writeln!(
                    out,
                    "{}{number}. {title}{}",
                    style::STEP,
                    style::STEP.render_reset()
                )?;
            }
            Beat::Say(text) => writeln!(out, "   {text}")?,
            Beat::Table(rows) => {
                let width = rows
                    .iter()
                    .map(|(k, _)| k.chars().count())
                    .max()
                    .unwrap_or(0);
                for (key, value) in rows {
                    writeln!(out, "     {key:<width$}  {value}")?;
                }
            }
            Beat::Packet { frame, full } => packet::write(out, frame, *full)?,
            Beat::PacketLine(frame) => {
                let brief = frame
                    .brief
                    .map(|b| {
                        let op = style::opcode(&b.opcode.to_string());
                        format!("{op}{}{} PSN {}", b.opcode, op.render_reset(), b.psn)
                    })
                    .unwrap_or_else(|| "(not RoCE)".into());
                // Not ✗, which marks a proof that failed: the loss is the scenario's own doing.
                let lost = if frame.dropped {
                    format!(
                        "  {}↯ lost on the wire{}",
                        style::LOST,
                        style::LOST.render_reset()
                    )
                } else {
                    String::new()
                };
                writeln!(
                    out,
                    "   frame {:<4} {}  {brief}{lost}",
                    frame.number,
                    packet::direction(frame)
                )?;
            }
            Beat::Decision(event) => {
                let who = match event.nic {
                    crate::Side::Initiator => style::INITIATOR,
                    crate::Side::Target => style::TARGET,
                };
                writeln!(
                    out,
                    "   {who}{} NIC{}  {}",
                    event.nic,
                    who.render_reset(),
                    decision::sentence(event)
                )?;
            }
            Beat::Memory {
                base,
                before,
                after,
            } => memory(out, *base, before, after)?,
            Beat::Proof { held, text } => proof(out, *held, text, "   ")?,
            // Told in words already; for scripts only.
            Beat::Figures(_) | Beat::EndOfStep => {}
        }
        out.flush()
    }
}

impl<W: Write> Observer for Text<W> {
    fn beat(&mut self, beat: &Beat) {
        // A closed standard output (`roce demo | head`) must not stop the demo half way, with
        // its target frozen; what cannot be written is dropped.
        let _ = self.render(beat);
    }
}

fn proof(out: &mut impl Write, held: bool, text: &str, indent: &str) -> io::Result<()> {
    let (mark, look) = if held {
        ("✓", style::GOOD)
    } else {
        ("✗", style::BAD)
    };
    writeln!(out, "{indent}{look}{mark}{} {text}", look.render_reset())
}

/// The lines of memory that changed, before and after, changed bytes highlighted; memory that
/// did not change is shown once.
fn memory(out: &mut impl Write, base: u64, before: &[u8], after: &[u8]) -> io::Result<()> {
    let lines = before.chunks(LINE).zip(after.chunks(LINE)).enumerate();
    for (i, (old, new)) in lines {
        let at = base + (i * LINE) as u64;
        if old == new {
            writeln!(out, "     same    {}", dump_line(at, new, None))?;
        } else {
            writeln!(out, "     before  {}", dump_line(at, old, None))?;
            writeln!(out, "     after   {}", dump_line(at, new, Some(old)))?;
        }
    }
    Ok(())
}

/// One `hexdump -C` line (offset, up to [`LINE`] bytes in hex in two groups of 8, the
/// printable ones); bytes that differ from `old` highlighted.
pub fn dump_line(at: u64, bytes: &[u8], old: Option<&[u8]>) -> String {
    let mut line = format!("{at:08x} ");
    for i in 0..LINE {
        if i % 8 == 0 {
            line.push(' ');
        }
        match bytes.get(i) {
            Some(b) if old.is_some_and(|o| o.get(i) != Some(b)) => line.push_str(&format!(
                "{}{b:02x}{} ",
                style::CHANGED,
                style::CHANGED.render_reset()
            )),
            Some(b) => line.push_str(&format!("{b:02x} ")),
            None => line.push_str("   "),
        }
    }
    line.push_str(&format!(" |{}|", packet::printable(bytes)));
    line
}

/// The story without styles, as the terminal would show it: the HTML page's transcript.
pub fn plain(beats: &[Beat]) -> String {
    let mut out = Vec::new();
    let mut text = Text::new(&mut out, false);
    for beat in beats {
        text.beat(beat);
    }
    anstream::adapter::strip_str(&String::from_utf8_lossy(&out)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(beats: &[Beat], quiet: bool) -> String {
        let mut out = Vec::new();
        let mut text = Text::new(&mut out, quiet);
        for beat in beats {
            text.beat(beat);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn memory_shows_changed_lines_before_and_after_with_the_changes_marked() {
        let before = vec![0u8; 32];
        let mut after = before.clone();
        after[16..21].copy_from_slice(b"hello");
        let beat = Beat::Memory {
            base: 0x30,
            before,
            after,
        };
        let text = rendered(std::slice::from_ref(&beat), false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("     same    00000030  00 00"));
        assert!(lines[1].starts_with("     before  00000040  00 00 00 00 00 00"));
        assert!(lines[2].contains(&format!(
            "{}68{} ",
            style::CHANGED,
            style::CHANGED.render_reset()
        )));
        let plain = plain(&[beat]);
        assert!(plain.contains("     after   00000040  68 65 6c 6c 6f 00"));
        assert!(plain.ends_with("|hello...........|\n"));
    }

    #[test]
    fn quiet_shows_the_proof_lines_only() {
        let beats = [
            Beat::Step {
                number: 1,
                title: "a step".into(),
            },
            Beat::Say("a sentence".into()),
            Beat::Proof {
                held: true,
                text: "it held".into(),
            },
            Beat::Proof {
                held: false,
                text: "it did not".into(),
            },
        ];
        let quiet = anstream::adapter::strip_str(&rendered(&beats, true)).to_string();
        assert_eq!(quiet, "✓ it held\n✗ it did not\n");
        let all = plain(&beats);
        assert_eq!(
            all,
            "\n1. a step\n   a sentence\n   ✓ it held\n   ✗ it did not\n"
        );
    }

    #[test]
    fn tables_line_up() {
        let beats = [Beat::Table(vec![
            ("wr_id".into(), "1".into()),
            ("opcode".into(), "RDMA_WRITE".into()),
        ])];
        assert_eq!(plain(&beats), "     wr_id   1\n     opcode  RDMA_WRITE\n");
    }
}
