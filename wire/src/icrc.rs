//! The Invariant CRC that ends every RoCE packet.
//!
//! CRC-32 (the Ethernet polynomial, as computed by `crc32fast`) over: eight bytes of 0xff standing
//! in for the InfiniBand LRH that RoCE does not carry, then the IP header, the UDP header, the BTH,
//! the extension headers, the payload and the pad — with the fields that routers may change on the
//! way replaced by ones: IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label and hop
//! limit; the UDP checksum; and BTH byte 4 (FECN, BECN, reserved). The CRC is stored least
//! significant byte first.
//!
//! Only the first few dozen header bytes need masking, so they are copied to the stack and masked
//! there; everything after the first 248 bytes is fed to the hasher straight from the frame.

use crate::bth;

/// The network header the ICRC starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// RoCEv2 over IPv4: IPv4 header (with options, if any) and UDP.
    Ipv4,
    /// RoCEv2 over IPv6: IPv6 header and UDP.
    Ipv6,
    /// RoCEv1: the GRH, laid out like an IPv6 header, and no UDP.
    Grh,
}

/// The LRH that RoCE does not carry, whose place eight bytes of ones take.
const LRH_LEN: usize = 8;
const UDP_LEN: usize = 8;
const IPV6_LEN: usize = 40;
/// Largest masked prefix: an IPv4 header with 40 bytes of options, UDP and the BTH. (The IHL
/// cannot say more than 60 bytes.)
const MAX_PREFIX: usize = 60 + UDP_LEN + bth::HEADER_LEN;
/// The block crc32fast's widest kernels fold.
const BLOCK: usize = 256;
/// The stack buffer that holds the stand-in and the start of the packet: room for the largest
/// prefix and less than a block more.
const HEAD: usize = (LRH_LEN + MAX_PREFIX + BLOCK).next_multiple_of(16);

/// The result of checking a packet's ICRC: the CRC we computed and the one the packet carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Check {
    pub expected: u32,
    pub found: u32,
}

impl Check {
    pub fn is_ok(&self) -> bool {
        self.expected == self.found
    }
}

/// Byte ranges (start, length) of the IP header, UDP header and BTH that the ICRC masks.
const fn ipv4_ranges(ihl: usize) -> [(usize, usize); 5] {
    [
        (1, 1),                 // TOS
        (8, 1),                 // TTL
        (10, 2),                // header checksum
        (ihl + 6, 2),           // UDP checksum
        (ihl + UDP_LEN + 4, 1), // FECN, BECN, reserved
    ]
}
const IPV6_RANGES: [(usize, usize); 5] = [
    (1, 3),                      // traffic class (low nibble) and flow label
    (7, 1),                      // hop limit
    (IPV6_LEN + 6, 2),           // UDP checksum
    (IPV6_LEN + UDP_LEN + 4, 1), // FECN, BECN, reserved
    (0, 0),
];
const GRH_RANGES: [(usize, usize); 5] = [(1, 3), (7, 1), (IPV6_LEN + 4, 1), (0, 0), (0, 0)];

/// 16-byte words of the buffer the hasher reads that hold the stand-in and the masked prefix.
const MASK_WORDS: usize = (LRH_LEN + MAX_PREFIX).div_ceil(16);

/// The bits to set in the first words of the buffer: the stand-in, the masked ranges and, for
/// IPv6 and the GRH, the traffic class bits in the low nibble of the first byte. Masking by
/// whole words matters: setting single bytes and then letting the hasher read them in 16-byte
/// loads stalls store forwarding, which cost more than the rest of the masking together.
const fn head_mask(ranges: [(usize, usize); 5], low_nibble_of_first: bool) -> [u128; MASK_WORDS] {
    let mut bytes = [0u8; 16 * MASK_WORDS];
    let mut i = 0;
    while i < LRH_LEN {
        bytes[i] = 0xff;
        i += 1;
    }
    if low_nibble_of_first {
        bytes[LRH_LEN] = 0x0f;
    }
    let mut r = 0;
    while r < ranges.len() {
        let (start, len) = ranges[r];
        let mut k = 0;
        while k < len {
            bytes[LRH_LEN + start + k] = 0xff;
            k += 1;
        }
        r += 1;
    }
    let mut words = [0u128; MASK_WORDS];
    let mut w = 0;
    while w < MASK_WORDS {
        let mut word = [0u8; 16];
        let mut k = 0;
        while k < 16 {
            word[k] = bytes[16 * w + k];
            k += 1;
        }
        words[w] = u128::from_ne_bytes(word);
        w += 1;
    }
    words
}

const IPV4_MASK: [u128; MASK_WORDS] = head_mask(ipv4_ranges(20), false);
const IPV6_MASK: [u128; MASK_WORDS] = head_mask(IPV6_RANGES, true);
const GRH_MASK: [u128; MASK_WORDS] = head_mask(GRH_RANGES, true);

/// How many bytes of the packet the mask covers, and the mask.
fn masks(scope: Scope, packet: &[u8]) -> Option<(usize, [u128; MASK_WORDS])> {
    Some(match scope {
        Scope::Ipv4 => {
            let ihl = usize::from(*packet.first()? & 0x0f) * 4;
            let prefix = ihl + UDP_LEN + bth::HEADER_LEN;
            match ihl {
                20 => (prefix, IPV4_MASK),
                // IPv4 options: rare enough to work the mask out each time.
                21.. => (prefix, head_mask(ipv4_ranges(ihl), false)),
                _ => return None,
            }
        }
        Scope::Ipv6 => (IPV6_LEN + UDP_LEN + bth::HEADER_LEN, IPV6_MASK),
        Scope::Grh => (IPV6_LEN + bth::HEADER_LEN, GRH_MASK),
    })
}

/// Computes the ICRC of `packet`: the bytes from the first byte of the IP header (or GRH) up to
/// and including the pad, without the ICRC itself. `None` if the bytes cannot hold the headers.
pub fn compute(scope: Scope, packet: &[u8]) -> Option<u32> {
    let (prefix, mask) = masks(scope, packet)?;
    packet.get(..prefix)?;
    // The stand-in, then the start of the packet, masked, in one buffer, and the rest straight
    // from the packet. crc32fast folds 256-byte blocks with its widest kernels and finishes a
    // remainder of 128 bytes or more with a second, narrower pass, each with a fixed cost: a
    // packet that fits is hashed in one call; of a longer one, the buffer takes the headers and
    // whatever leaves a whole number of 256-byte blocks for the rest.
    let copied = if packet.len() <= HEAD - LRH_LEN {
        packet.len()
    } else {
        prefix + (packet.len() - prefix) % BLOCK
    };
    // A small packet (an ACK, a 64-byte WRITE) in a small buffer: zeroing the large one cost
    // more than masking and hashing such a packet.
    if LRH_LEN + copied <= SMALL_HEAD {
        Some(hash_masked::<SMALL_HEAD>(packet, copied, &mask))
    } else {
        Some(hash_masked::<HEAD>(packet, copied, &mask))
    }
}

/// A buffer for packets of up to 120 bytes, the mask's words included.
const SMALL_HEAD: usize = 128;
const _: () = assert!(SMALL_HEAD >= 16 * MASK_WORDS && SMALL_HEAD % 16 == 0);

/// The CRC of the stand-in and the first `copied` bytes of `packet`, masked, in a buffer of
/// `N` bytes, then of the rest of `packet` straight from it.
fn hash_masked<const N: usize>(packet: &[u8], copied: usize, mask: &[u128; MASK_WORDS]) -> u32 {
    let mut head = [0u8; N];
    head[LRH_LEN..LRH_LEN + copied].copy_from_slice(&packet[..copied]);
    for (word, mask) in head.chunks_exact_mut(16).zip(mask) {
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(word);
        word.copy_from_slice(&(u128::from_ne_bytes(bytes) | mask).to_ne_bytes());
    }
    let mut hasher = fresh_hasher();
    hasher.update(&head[..LRH_LEN + copied]);
    hasher.update(&packet[copied..]);
    hasher.finalize()
}

/// A new hasher without `Hasher::new`'s CPU feature checks, which cost a quarter as much as
/// hashing a small packet: a hasher made once is copied.
fn fresh_hasher() -> crc32fast::Hasher {
    static PROTOTYPE: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    PROTOTYPE.get_or_init(crc32fast::Hasher::new).clone()
}

/// Reads the ICRC a packet carries (its four bytes, least significant first).
pub fn read(icrc: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(icrc.get(..4)?.try_into().ok()?))
}

/// Writes an ICRC into the four bytes that end a packet.
pub fn write(icrc: &mut [u8], value: u32) {
    icrc[..4].copy_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    // Known-answer vectors from scapy's test/contrib/roce.uts. Each is an Ethernet frame; the IP
    // header starts at byte 14 and the ICRC is the last four bytes.
    fn check_vector(scope: Scope, frame: &[u8], icrc_as_scapy_reads_it: u32) {
        let (packet, icrc) = frame[14..].split_at(frame.len() - 14 - 4);
        assert_eq!(icrc, icrc_as_scapy_reads_it.to_be_bytes());
        assert_eq!(compute(scope, packet), read(icrc));
    }

    #[test]
    fn scapy_ipv4_uc_send() {
        let frame = hex("248a07a8fa22 248a07a8fa22 0800
             4501 0040 0478 4000 4011 b4d5 c0a80007 c0a80007
             c000 12b7 002c aca2
             24 60 ffff 00 0000d3 00 cf1710
             4630818be28935d90e9a955054 01be885e5000 00
             78f353f3");
        check_vector(Scope::Ipv4, &frame, 0x78f353f3);
    }

    #[test]
    fn scapy_ipv6_uc_send() {
        let frame = hex("248a07a8fa22 248a07a8fa22 86dd
             6e21face 002c 11 ff
             20220000000000000000000000001023
             20230000000000000000000000001024
             c000 12b7 002c e7c5
             24 60 ffff 00 0000d3 00 cf1710
             4630818be28935d90e9a955054 01be885e5000 00
             3e5b743b");
        check_vector(Scope::Ipv6, &frame, 0x3e5b743b);
    }

    #[test]
    fn connectx4_lx_cnp() {
        let frame = hex("e41d2dab2bc2 7cfe90643b32 0800 45c2
             003c 718c 4000 4011 9161 0a001101 0a00
             1201 0000 12b7 0028 0000 8100 ffff 4000
             0118 0000 0000 0000 0000 0000 0000 0000
             0000 0000 0000 82fd 002a");
        check_vector(Scope::Ipv4, &frame, 0x82fd002a);
    }

    #[test]
    fn masked_fields_do_not_change_the_crc_but_others_do() {
        let frame = hex("e41d2dab2bc2 7cfe90643b32 0800 45c2
             003c 718c 4000 4011 9161 0a001101 0a00
             1201 0000 12b7 0028 0000 8100 ffff 4000
             0118 0000 0000 0000 0000 0000 0000 0000
             0000 0000 0000 82fd 002a");
        let packet = &frame[14..frame.len() - 4];
        let good = compute(Scope::Ipv4, packet).unwrap();
        for (i, masked) in [
            (1, true),
            (8, true),
            (10, true),
            (26, true),
            (32, true),
            (9, false),
            (33, false),
        ] {
            let mut p = packet.to_vec();
            p[i] ^= 0x01;
            assert_eq!(
                compute(Scope::Ipv4, &p).unwrap() == good,
                masked,
                "byte {i}"
            );
        }
    }

    #[test]
    fn short_input_is_none_not_a_panic() {
        assert_eq!(compute(Scope::Ipv4, &[]), None);
        assert_eq!(compute(Scope::Ipv4, &[0x45; 30]), None);
        assert_eq!(compute(Scope::Ipv4, &[0x41; 60]), None);
        assert_eq!(compute(Scope::Ipv6, &[0x60; 59]), None);
    }

    /// The ICRC by the book: the stand-in and the packet with its variant bytes set to ones, in
    /// one buffer, through crc32fast in one go.
    fn naive(packet: &[u8], masked: &[usize]) -> u32 {
        let mut bytes = vec![0xff; 8];
        bytes.extend_from_slice(packet);
        for &at in masked {
            bytes[8 + at] = 0xff;
        }
        crc32fast::hash(&bytes)
    }

    #[test]
    fn ipv4_options_move_the_udp_and_bth_masks() {
        // An IPv4 header with four bytes of options (IHL 6), UDP to 4791, a BTH and 8 bytes of
        // payload; the masks must follow the options.
        let mut packet = hex("46 00 0034 0001 4000 40 11 0000 0a000001 0a000002 01010101
             c000 12b7 0020 1234
             04 00 ffff c0 000011 80 000001
             0102030405060708");
        packet[1] = 0x2e; // some TOS, which is masked
        let ihl = 24;
        let masked = [1, 8, 10, 11, ihl + 6, ihl + 7, ihl + 8 + 4];
        assert_eq!(compute(Scope::Ipv4, &packet), Some(naive(&packet, &masked)));
        // And every byte outside the masks counts.
        for at in (0..packet.len()).filter(|at| !masked.contains(at)) {
            let mut changed = packet.clone();
            changed[at] ^= 0x10;
            assert_ne!(
                compute(Scope::Ipv4, &changed),
                compute(Scope::Ipv4, &packet),
                "{at}"
            );
        }
    }

    #[test]
    fn long_packets_split_between_calls_agree_with_one_call() {
        // Lengths around the buffer's size and the 256-byte blocks, so that every way of
        // splitting the packet between the stack buffer and the rest is taken.
        for len in [
            44, 100, 120, 200, 343, 344, 345, 600, 1000, 4136, 4137, 4400,
        ] {
            let mut packet: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            packet[0] = 0x45;
            let masked = [1, 8, 10, 11, 26, 27, 32];
            assert_eq!(
                compute(Scope::Ipv4, &packet),
                Some(naive(&packet, &masked)),
                "{len}"
            );
        }
    }
}
