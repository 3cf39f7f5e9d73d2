//! Hexdump lines in the format of `hexdump -C`, so the output reads like the tool people know.

use std::io::{self, Write};

use roce_demo::text;

pub use text::LINE;

/// Writes consecutive lines, printing a run of all-zero lines as its first line and one `*`
/// (as `xxd -a` does), because fresh shared memory is mostly zeros.
#[derive(Default)]
pub struct Hexdump {
    previous_was_zero: bool,
    starred: bool,
}

impl Hexdump {
    /// Writes the line of `bytes` (at most [`LINE`]) found at `offset`, unless it continues a
    /// run of zero lines.
    pub fn line(&mut self, out: &mut impl Write, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let zero = bytes.len() == LINE && bytes.iter().all(|&b| b == 0);
        if zero && self.previous_was_zero {
            if !self.starred {
                writeln!(out, "*")?;
                self.starred = true;
            }
            return Ok(());
        }
        self.previous_was_zero = zero;
        self.starred = false;
        write_line(out, offset, bytes)
    }
}

/// Writes one line: offset, up to 16 bytes in hex in two groups of 8, and the printable ones —
/// the demo's memory view, unhighlighted.
pub fn write_line(out: &mut impl Write, offset: u64, bytes: &[u8]) -> io::Result<()> {
    writeln!(out, "{}", text::dump_line(offset, bytes, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(start: u64, data: &[u8]) -> String {
        let mut out = Vec::new();
        let mut hexdump = Hexdump::default();
        for (i, line) in data.chunks(LINE).enumerate() {
            hexdump
                .line(&mut out, start + (i * LINE) as u64, line)
                .unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_line_looks_like_hexdump_c() {
        let mut out = Vec::new();
        write_line(&mut out, 0x10, b"Hello, world!\n\x00\xff").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "00000010  48 65 6c 6c 6f 2c 20 77  6f 72 6c 64 21 0a 00 ff  |Hello, world!...|\n"
        );
    }

    #[test]
    fn a_short_line_is_padded_so_the_text_column_lines_up() {
        let mut out = Vec::new();
        write_line(&mut out, 0, b"abc").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("00000000  61 62 63 {}  |abc|\n", " ".repeat(3 * 13))
        );
    }

    #[test]
    fn runs_of_zero_lines_collapse_into_a_star() {
        let mut data = vec![0u8; 16 * 6];
        data[0] = 1;
        data[16 * 5] = 2;
        let text = dump(0, &data);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("00000000  01 00"));
        assert!(lines[1].starts_with("00000010  00 00"));
        assert_eq!(lines[2], "*");
        assert!(lines[3].starts_with("00000050  02 00"));
    }

    #[test]
    fn repeated_non_zero_lines_are_all_shown() {
        let text = dump(0, &[7u8; 48]);
        assert_eq!(text.lines().count(), 3);
        assert!(!text.contains('*'));
    }

    #[test]
    fn a_single_zero_line_is_shown_not_starred() {
        let mut data = vec![0u8; 48];
        data[0] = 1;
        data[32] = 1;
        let text = dump(0x1000, &data);
        assert_eq!(text.lines().count(), 3);
        assert!(text.contains("00001010  00 00"));
    }
}
