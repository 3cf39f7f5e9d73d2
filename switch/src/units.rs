//! Byte counts as people write them: `64K`, `1M`, `1500` (K and M are 1024 and 1024²).

/// Reads a byte count with an optional K or M suffix.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, scale) = match text.char_indices().last() {
        Some((at, 'k' | 'K')) => (&text[..at], 1024),
        Some((at, 'm' | 'M')) => (&text[..at], 1024 * 1024),
        _ => (text, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a byte count such as 1500, 64K or 1M"))
}

/// The shortest way [`parse_bytes`] reads back.
pub fn show_bytes(bytes: usize) -> String {
    match bytes {
        0 => "0".into(),
        b if b % (1024 * 1024) == 0 => format!("{}M", b / (1024 * 1024)),
        b if b % 1024 == 0 => format!("{}K", b / 1024),
        b => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_round_trip() {
        assert_eq!(parse_bytes("1500"), Ok(1500));
        assert_eq!(parse_bytes("64K"), Ok(65536));
        assert_eq!(parse_bytes("2m"), Ok(2 << 20));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("-1K").is_err());
        for n in [0, 1500, 65536, 3 << 20] {
            assert_eq!(parse_bytes(&show_bytes(n)), Ok(n));
        }
    }
}
