//! Incremental checksum updates (RFC 1624, equation 3: `HC' = ~(~HC + ~m + m')`).
//!
//! Given a checksum field `HC` that is valid for some data, these functions return the checksum
//! after some 16-bit-aligned words change from `m` to `m'`, without touching the rest of the
//! data. Equation 3 (rather than equation 2 of RFC 1624) is used because it never produces a
//! wrong `0xffff`/`0x0000`: the result equals a full recomputation ([`crate::checksum`]) bit for
//! bit, except when the new data is entirely zero. In that one case recomputation gives
//! `0xffff`, the update may give `0x0000`; both are the same ones'-complement value, and no real
//! IP, TCP or UDP header is all zero.
//!
//! # Alignment
//!
//! `update16`, `update32` and [`update_bytes`] assume the changed field starts at an even
//! offset from the start of the checksummed data (true of every IP/TCP/UDP/ICMP header field
//! that is 16 bits or wider). For a field at an odd offset use [`update_bytes_at`].

use crate::{combine, sum};

/// Checksum after one 16-bit word changes from `old_word` to `new_word`.
///
/// ```
/// use sluice_checksum::{checksum, incremental};
/// // An IPv4 header (checksum 0xb861 at bytes 10..12); decrement the TTL (byte 8, word 8..10).
/// let mut ip = [
///     0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, //
///     0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
/// ];
/// let old_word = u16::from_be_bytes([ip[8], ip[9]]);
/// ip[8] -= 1;
/// let new_word = u16::from_be_bytes([ip[8], ip[9]]);
/// let updated = incremental::update16(0xb861, old_word, new_word);
/// // Same result as recomputing over the header with the checksum field zeroed.
/// ip[10..12].copy_from_slice(&[0, 0]);
/// assert_eq!(updated, checksum(&ip));
/// ```
#[inline]
pub const fn update16(old_checksum: u16, old_word: u16, new_word: u16) -> u16 {
    !combine(combine(!old_checksum, !old_word), new_word)
}

/// Checksum after an aligned 32-bit value (e.g. an IPv4 address) changes from `old` to `new`.
///
/// ```
/// use sluice_checksum::{checksum, incremental};
/// let mut ip = [
///     0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, //
///     0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
/// ];
/// let before = checksum(&ip);
/// // Source NAT: 192.168.0.1 -> 10.0.0.1.
/// let (old, new) = (0xc0a8_0001, 0x0a00_0001);
/// ip[12..16].copy_from_slice(&u32::to_be_bytes(new));
/// assert_eq!(incremental::update32(before, old, new), checksum(&ip));
/// ```
#[inline]
pub const fn update32(old_checksum: u16, old: u32, new: u32) -> u16 {
    let removed = combine(!(old >> 16) as u16, !old as u16);
    let added = combine((new >> 16) as u16, new as u16);
    !combine(combine(!old_checksum, removed), added)
}

/// Checksum after the bytes `old` are replaced by `new` in place, starting at an even offset.
///
/// `old` and `new` should have equal length. An odd length is fine (the byte after the field is
/// unchanged, so padding both with zero gives the right difference). If lengths differ, the
/// result is that of removing `old` and adding `new` both starting at the same position.
///
/// ```
/// use sluice_checksum::{checksum, incremental};
/// let mut data = *b"sluice-header-bytes!";
/// let before = checksum(&data);
/// data[4..10].copy_from_slice(b"SWITCH");
/// let after = incremental::update_bytes(before, b"ce-hea", b"SWITCH");
/// assert_eq!(after, checksum(&data));
/// ```
#[inline]
pub fn update_bytes(old_checksum: u16, old: &[u8], new: &[u8]) -> u16 {
    !combine(combine(!old_checksum, !sum(old)), sum(new))
}

/// Like [`update_bytes`] for a field starting at byte `offset` of the checksummed data, which
/// may be odd: the bytes of a field at an odd offset fall on the other half of each 16-bit word,
/// so its sums are byte-swapped before use.
///
/// ```
/// use sluice_checksum::{checksum, incremental};
/// let mut data = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66];
/// let before = checksum(&data);
/// data[1..4].copy_from_slice(&[0xaa, 0xbb, 0xcc]); // a field at odd offset 1
/// let after = incremental::update_bytes_at(before, 1, &[0x22, 0x33, 0x44], &[0xaa, 0xbb, 0xcc]);
/// assert_eq!(after, checksum(&data));
/// ```
#[inline]
pub fn update_bytes_at(old_checksum: u16, offset: usize, old: &[u8], new: &[u8]) -> u16 {
    let (mut removed, mut added) = (!sum(old), sum(new));
    if offset % 2 == 1 {
        removed = removed.swap_bytes();
        added = added.swap_bytes();
    }
    !combine(combine(!old_checksum, removed), added)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;

    /// The RFC 1624 section 3 scenario: a change that makes the sum of the data ones'-complement
    /// zero must yield 0x0000 (equation 2 would give 0xffff).
    #[test]
    fn result_zero_not_ffff() {
        // Data words: 0xcd7a and a field; checksum covers both.
        let old = [0xcd, 0x7a, 0x55, 0x55];
        let hc = checksum(&old);
        let new = [0xcd, 0x7a, 0x32, 0x85];
        assert_eq!(checksum(&new), 0x0000);
        assert_eq!(update16(hc, 0x5555, 0x3285), 0x0000);
        assert_eq!(update_bytes(hc, &[0x55, 0x55], &[0x32, 0x85]), 0x0000);
    }

    #[test]
    fn from_zero_checksum() {
        let old = [0xcd, 0x7a, 0x32, 0x85];
        assert_eq!(checksum(&old), 0);
        let new = [0xcd, 0x7a, 0x55, 0x55];
        assert_eq!(update16(0, 0x3285, 0x5555), checksum(&new));
    }
}
