//! Pseudo-header sums for transport checksums (TCP, UDP, ICMPv6).
//!
//! Each function returns the folded, **uncomplemented** ones'-complement sum of the pseudo-header
//! (RFC 793/768 for IPv4, RFC 8200 section 8.1 for IPv6). Continue it over the transport header
//! and payload with [`crate::sum_from`] or an [`crate::Accumulator`], then complement:
//!
//! ```
//! use sluice_checksum::{pseudo, sum_from};
//! let udp = [0x04, 0xd2, 0x00, 0x35, 0x00, 0x0a, 0x00, 0x00, 0xab, 0xcd];
//! let ph = pseudo::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 17, udp.len() as u16);
//! let csum = !sum_from(ph, &udp);
//! # assert_ne!(csum, 0);
//! ```
//!
//! The results are never `0x0000` for a real transport protocol (the protocol number is
//! non-zero), so they can always be combined without the zero ambiguity.

use crate::fold;

/// Sum of the IPv4 pseudo-header: source and destination address, zero, protocol and the
/// transport length (header plus payload, in bytes).
///
/// ```
/// use sluice_checksum::{pseudo, sum};
/// // The same sum as the 12 pseudo-header bytes written out.
/// let bytes = [192, 168, 0, 1, 10, 1, 2, 3, 0, 6, 0x05, 0xdc];
/// assert_eq!(pseudo::ipv4([192, 168, 0, 1], [10, 1, 2, 3], 6, 1500), sum(&bytes));
/// ```
#[inline]
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4_len: u16) -> u16 {
    // 32-bit big-endian values fold like their two 16-bit halves (2^16 = 1 mod 0xffff).
    fold(
        u64::from(u32::from_be_bytes(src))
            + u64::from(u32::from_be_bytes(dst))
            + u64::from(proto)
            + u64::from(l4_len),
    )
}

/// Sum of the IPv6 pseudo-header: source and destination address, the 32-bit upper-layer
/// packet length, three zero bytes and the next-header value.
///
/// ```
/// use sluice_checksum::{pseudo, sum};
/// let src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// let dst = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
/// let mut bytes = Vec::new();
/// bytes.extend_from_slice(&src);
/// bytes.extend_from_slice(&dst);
/// bytes.extend_from_slice(&1500u32.to_be_bytes());
/// bytes.extend_from_slice(&[0, 0, 0, 17]);
/// assert_eq!(pseudo::ipv6(&src, &dst, 17, 1500), sum(&bytes));
/// ```
#[inline]
pub fn ipv6(src: &[u8; 16], dst: &[u8; 16], proto: u8, l4_len: u32) -> u16 {
    let a = u128::from_be_bytes(*src);
    let b = u128::from_be_bytes(*dst);
    // Each address is folded to 64 bits with an end-around carry (2^64 = 1 mod 0xffff); the
    // four resulting 64-bit halves plus two small values fit easily in a u128.
    let total = u128::from(a as u64)
        + (a >> 64)
        + u128::from(b as u64)
        + (b >> 64)
        + u128::from(proto)
        + u128::from(l4_len);
    fold(crate::scalar::add_carry(total as u64, (total >> 64) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sum;

    #[test]
    fn ipv4_matches_explicit_bytes() {
        let ph = [192, 168, 0, 1, 10, 1, 2, 3, 0, 6, 0x05, 0xdc];
        assert_eq!(ipv4([192, 168, 0, 1], [10, 1, 2, 3], 6, 1500), sum(&ph));
    }

    #[test]
    fn ipv6_matches_explicit_bytes() {
        let src: [u8; 16] = core::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0xf0);
        let dst: [u8; 16] = core::array::from_fn(|i| 0xff - i as u8);
        let mut ph = Vec::new();
        ph.extend_from_slice(&src);
        ph.extend_from_slice(&dst);
        ph.extend_from_slice(&70_000u32.to_be_bytes());
        ph.extend_from_slice(&[0, 0, 0, 17]);
        assert_eq!(ipv6(&src, &dst, 17, 70_000), sum(&ph));
        let ones = [0xff; 16];
        let mut ph = vec![0xff; 32];
        ph.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0xff]);
        assert_eq!(ipv6(&ones, &ones, 0xff, u32::MAX), sum(&ph));
    }
}
