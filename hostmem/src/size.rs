//! Sizes as people type them on a command line: `4096`, `4K`, `1M`, `2G`.

use crate::SizeError;

/// The largest size [`parse_size`] accepts and the largest region that can be created.
///
/// A stand-in for host RAM beyond this is almost certainly a typo; refusing it early beats
/// reserving tens of gigabytes of shared memory by accident.
pub const MAX_SIZE: u64 = 64 << 30;

/// Parses a byte count with an optional binary suffix, case-insensitive: `K`, `M`, `G`, `T`, each
/// optionally followed by `B` or `iB` (`4K`, `4kb` and `4KiB` are all 4096 bytes).
///
/// Suffixes are powers of 1024 because memory is sized in pages, never in powers of 1000.
pub fn parse_size(text: &str) -> Result<usize, SizeError> {
    let invalid = || SizeError::Invalid {
        text: text.to_owned(),
    };
    let too_large = || SizeError::TooLarge {
        text: text.to_owned(),
        max: MAX_SIZE,
    };
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(invalid());
    }
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(invalid()),
    };
    // Only digits are left, so the one way to fail is a number too big for u64.
    let count: u64 = digits.parse().map_err(|_| too_large())?;
    let bytes = count.checked_mul(1 << shift).ok_or_else(too_large)?;
    if bytes == 0 {
        return Err(SizeError::Zero);
    }
    if bytes > MAX_SIZE {
        return Err(too_large());
    }
    usize::try_from(bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_bytes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1"), Ok(1));
        assert_eq!(parse_size("100b"), Ok(100));
    }

    #[test]
    fn suffixes_are_powers_of_1024_in_any_case() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4kb"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("64G"), Ok(64 << 30));
    }

    #[test]
    fn zero_is_refused() {
        assert_eq!(parse_size("0"), Err(SizeError::Zero));
        assert_eq!(parse_size("0M"), Err(SizeError::Zero));
    }

    #[test]
    fn absurd_sizes_are_refused() {
        for text in [
            "65G",
            "1T",
            "99999999999999999999999",
            "18446744073709551615K",
        ] {
            assert!(
                matches!(parse_size(text), Err(SizeError::TooLarge { .. })),
                "{text} accepted"
            );
        }
    }

    #[test]
    fn malformed_text_is_refused() {
        for text in [
            "", "K", "4X", "4 K", " 4K", "-1", "+4", "1.5M", "4KK", "４K",
        ] {
            assert!(
                matches!(parse_size(text), Err(SizeError::Invalid { .. })),
                "{text:?} accepted"
            );
        }
    }
}
