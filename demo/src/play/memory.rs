//! The part of the target's memory worth showing: the bytes an operation touches (the first
//! [`SHOWN`] of them) with a line of untouched memory either side.

use std::ops::Range;

use roce_hostmem::Region;

use crate::DemoError;

/// Bytes of an operation's range shown at most.
const SHOWN: u64 = 96;
const LINE: u64 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub base: u64,
    pub len: usize,
}

impl Window {
    /// Whole lines around `range`, inside a region of `region_len` bytes.
    pub fn around(range: &Range<u64>, region_len: u64) -> Window {
        let base = (range.start / LINE * LINE).saturating_sub(LINE);
        let end = range.end.min(range.start + SHOWN);
        let end = (end.next_multiple_of(LINE) + LINE).min(region_len);
        Window {
            base,
            len: end.saturating_sub(base) as usize,
        }
    }

    pub fn read(&self, region: &Region) -> Result<Vec<u8>, DemoError> {
        let mut bytes = vec![0; self.len];
        region
            .read(self.base as usize, &mut bytes)
            .map_err(|e| DemoError::because("cannot read the target's memory", e))?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_whole_lines_with_context_and_bounded() {
        assert_eq!(
            Window::around(&(0x40..0x85), 65536),
            Window {
                base: 0x30,
                len: 0x70
            }
        );
        assert_eq!(
            Window::around(&(0..8), 65536),
            Window { base: 0, len: 0x20 }
        );
        let big = Window::around(&(0x40..0x4000_0040), 0x4000_1000);
        assert_eq!(
            big,
            Window {
                base: 0x30,
                len: 0x80
            }
        );
        assert_eq!(
            Window::around(&(0xff8..0x1000), 0x1000),
            Window {
                base: 0xfe0,
                len: 0x20
            }
        );
    }
}
