//! Numbers in decimal, written without a loop or a branch per digit: eight digits are worked out
//! at once in the lanes of one 64-bit integer (two multiplications per split, no division), and
//! the leading zeros are dropped by a shift. Each writer stores a fixed number of bytes (up to
//! eight past the number's end) and returns where the number ends: the caller's next write
//! starts there and covers the rest, so no copy has a length known only at run time.

/// The eight ASCII zeros added to eight digits to make them text.
const ZEROS: u64 = 0x3030_3030_3030_3030;

/// The decimal digits of `n` (below 10^8), eight of them with leading zeros, as byte values 0–9
/// in the bytes of the result in memory order (little-endian), the most significant first.
#[inline(always)]
fn eight_digits(n: u32) -> u64 {
    debug_assert!(n < 100_000_000);
    let (high, low) = (n / 10_000, n % 10_000);
    // Two 32-bit lanes, the high half first.
    let x = u64::from(high) | u64::from(low) << 32;
    // Each lane into two 16-bit lanes, x / 100 and x % 100: 10486 / 2^20 is 1/100 closely
    // enough for every x below 10^4, and the products stay within their lanes.
    let hundreds = ((x * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let x = hundreds | (x - hundreds * 100) << 16;
    // Each 16-bit lane into two bytes, x / 10 and x % 10 (103 / 2^10, exact below 100).
    let tens = ((x * 103) >> 10) & 0x000f_000f_000f_000f;
    tens | (x - tens * 10) << 8
}

/// Writes `n` (below 10^8) at `pos`, storing eight bytes; returns where it ends.
#[inline(always)]
pub fn up_to_8(out: &mut [u8], pos: usize, n: u32) -> usize {
    let digits = eight_digits(n);
    // The leading zeros are the low bytes that are zero; the last digit is kept even if it is.
    let zeros = (digits | 1 << 56).trailing_zeros() / 8;
    let text = (digits | ZEROS) >> (8 * zeros);
    out[pos..pos + 8].copy_from_slice(&text.to_le_bytes());
    pos + 8 - zeros as usize
}

/// Writes `n` (below 10^8) as exactly eight digits, with leading zeros, at `pos`.
#[inline(always)]
pub fn exactly_8(out: &mut [u8], pos: usize, n: u32) -> usize {
    out[pos..pos + 8].copy_from_slice(&(eight_digits(n) | ZEROS).to_le_bytes());
    pos + 8
}

/// Writes `n` at `pos`, storing up to 24 bytes; returns where it ends.
#[inline(always)]
pub fn any(out: &mut [u8], pos: usize, n: u64) -> usize {
    const E8: u64 = 100_000_000;
    if n < E8 {
        return up_to_8(out, pos, n as u32);
    }
    let (high, low) = (n / E8, (n % E8) as u32);
    let pos = if high < E8 {
        up_to_8(out, pos, high as u32)
    } else {
        // At most 1845.
        let pos = up_to_8(out, pos, (high / E8) as u32);
        exactly_8(out, pos, (high % E8) as u32)
    };
    exactly_8(out, pos, low)
}

/// `n` below 1000 as text: up to three digits, left-aligned, and in the last byte their count.
const fn small(n: usize) -> [u8; 4] {
    let d = [(n / 100) as u8, (n / 10 % 10) as u8, (n % 10) as u8];
    match n {
        0..=9 => [b'0' + d[2], 0, 0, 1],
        10..=99 => [b'0' + d[1], b'0' + d[2], 0, 2],
        _ => [b'0' + d[0], b'0' + d[1], b'0' + d[2], 3],
    }
}

/// Every byte value as [`small`] text: one load and one 4-byte store write an address octet or
/// any field of up to eight bits.
const BYTES: [[u8; 4]; 256] = {
    let mut table = [[0; 4]; 256];
    let mut n = 0;
    while n < 256 {
        table[n] = small(n);
        n += 1;
    }
    table
};

/// Writes `n` (below 256) at `pos`, storing four bytes; returns where it ends.
#[inline(always)]
pub fn byte(out: &mut [u8], pos: usize, n: u8) -> usize {
    let text = BYTES[usize::from(n)];
    out[pos..pos + 4].copy_from_slice(&text);
    pos + usize::from(text[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(write: impl Fn(&mut [u8], usize) -> usize) -> String {
        let mut out = [b'?'; 40];
        let end = write(&mut out, 3);
        String::from_utf8(out[3..end].to_vec()).unwrap()
    }

    #[test]
    fn every_writer_writes_plain_decimal() {
        let mut numbers: Vec<u64> = vec![0, 9, 10, 99, 100, 999, 1000, 9999, 10_000, 65_535];
        for power in 1..20 {
            let p = 10u64.pow(power);
            numbers.extend([p - 1, p, p + 1, p.saturating_mul(3) - 7]);
        }
        numbers.extend([
            u64::MAX,
            u64::MAX - 1,
            u32::MAX.into(),
            18_446_744_073_709_551,
        ]);
        numbers.extend((0..5000).map(|i| i * 7919 + i * i * 104_729));
        for n in numbers {
            assert_eq!(written(|out, pos| any(out, pos, n)), n.to_string());
            if n < 100_000_000 {
                let n = n as u32;
                assert_eq!(written(|out, pos| up_to_8(out, pos, n)), n.to_string());
                assert_eq!(
                    written(|out, pos| exactly_8(out, pos, n)),
                    format!("{n:08}")
                );
            }
        }
        for n in 0..=u8::MAX {
            assert_eq!(written(|out, pos| byte(out, pos, n)), n.to_string());
        }
    }

    #[test]
    fn eight_digits_are_right_for_every_four_digit_half() {
        // Each half goes through the same lanes: checking every value of one half, with the
        // other half at its extremes, covers every lane's arithmetic.
        for half in 0..10_000u32 {
            for other in [0, 1, 5000, 9999] {
                for n in [half * 10_000 + other, other * 10_000 + half] {
                    assert_eq!(
                        written(|out, pos| exactly_8(out, pos, n)),
                        format!("{n:08}")
                    );
                }
            }
        }
    }
}
