//! 24-bit packet sequence numbers. They wrap, so "before" and "after" are decided by the signed
//! distance on the circle: half the space ahead, half behind.

/// PSNs are 24 bits wide.
pub const MASK: u32 = 0x00ff_ffff;

/// `psn + n`, wrapped.
#[inline]
pub fn add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & MASK
}

/// `a - b` as a signed distance in (-2^23, 2^23]: positive when `a` is after `b`.
#[inline]
pub fn diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// Whether `a` comes strictly before `b`.
#[inline]
pub fn before(a: u32, b: u32) -> bool {
    diff(a, b) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_wraps_at_24_bits() {
        assert_eq!(add(MASK, 1), 0);
        assert_eq!(add(MASK - 1, 5), 3);
        assert_eq!(diff(2, MASK), 3);
        assert_eq!(diff(MASK, 2), -3);
        assert!(before(MASK, 0));
        assert!(!before(0, MASK));
        assert_eq!(diff(0x80_0000, 0), -0x80_0000);
    }

    proptest::proptest! {
        #[test]
        fn add_then_diff_is_the_distance(a in 0..=MASK, n in 0u32..0x7f_ffff) {
            proptest::prop_assert_eq!(diff(add(a, n), a), n as i32);
            proptest::prop_assert_eq!(diff(a, add(a, n)), -(n as i32));
        }
    }
}
