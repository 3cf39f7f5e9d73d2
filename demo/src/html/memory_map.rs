//! The target's memory as a bar, its whole registered length, with the bytes the NICs wrote
//! (or read) marked: a few dozen bytes of 64 KiB, or a whole gigabyte.

use std::ops::Range;

use maud::{html, Markup};

const WIDTH: u32 = 900;
const BAR_X: f64 = 20.0;
const BAR_WIDTH: f64 = 860.0;
/// The narrowest mark, so a few bytes of a big region stay visible.
const MIN_MARK: f64 = 4.0;

/// Where `range` of a `len`-byte region falls on the bar: x and width.
fn span(range: &Range<u64>, len: u64) -> (f64, f64) {
    let scale = BAR_WIDTH / len.max(1) as f64;
    let x = BAR_X + range.start as f64 * scale;
    let width = ((range.end - range.start) as f64 * scale).max(MIN_MARK);
    (x.min(BAR_X + BAR_WIDTH - MIN_MARK), width)
}

/// The bar for a region of `len` bytes at `va`, marking what was `written` and `read`.
pub fn render(
    len: u64,
    va: u64,
    written: Option<&Range<u64>>,
    read: Option<&Range<u64>>,
) -> Markup {
    let marks = [
        (
            written,
            "written-range",
            "written",
            "written by the NIC (DMA)",
        ),
        (read, "read-range", "read", "read by the NIC (DMA)"),
    ];
    html! {
        svg #memory-map xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height="120"
            viewBox=(format!("0 0 {WIDTH} 120")) role="img" aria-label="the target's memory" {
            rect #region-bar x=(BAR_X) y="30" width=(BAR_WIDTH) height="40" {
                title { (format!("the target's registered memory: {len} bytes from VA {va:#x}")) }
            }
            text.axis x=(BAR_X) y="88" { "offset 0" }
            text.axis x=(BAR_X + BAR_WIDTH) y="88" text-anchor="end" { (format!("{len} bytes")) }
            text.axis x=(BAR_X) y="20" { (format!("VA {va:#x}")) }
            @for (range, id, class, what) in marks {
                @if let Some(range) = range {
                    @let (x, width) = span(range, len);
                    rect id=(id) class=(class) x=(x) y="26" width=(width) height="48" {
                        title { (format!("offsets {:#x}..{:#x}: {} bytes {what}", range.start, range.end, range.end - range.start)) }
                    }
                    text.mark-label x=(x) y="108" {
                        (format!("{:#x}..{:#x}: {} bytes {what}", range.start, range.end, range.end - range.start))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_bytes_of_a_big_region_are_still_visible() {
        let (x, width) = span(&(0x40..0x85), 1 << 30);
        assert!((x - BAR_X).abs() < 0.01);
        assert_eq!(width, MIN_MARK);
        let (x, width) = span(&(0..32768), 65536);
        assert_eq!((x, width), (BAR_X, BAR_WIDTH / 2.0));
        let (x, _) = span(&(65535..65536), 65536);
        assert!(x + MIN_MARK <= BAR_X + BAR_WIDTH);
    }

    #[test]
    fn the_written_range_is_marked_and_named() {
        let svg = render(65536, 0x7f00_0000_0000, Some(&(0x40..0x85)), None).into_string();
        assert!(svg.contains(r#"id="region-bar""#));
        assert!(svg.contains(r#"<rect id="written-range" class="written""#));
        assert!(svg.contains("0x40..0x85: 69 bytes written by the NIC (DMA)"));
        assert!(!svg.contains("read-range"));
    }
}
