//! Internet (ones'-complement) checksums for Sluice.
//!
//! This crate is pure computation: no I/O, no allocation, deterministic results. It provides
//!
//! * [`sum`] / [`checksum`]: the RFC 1071 sum over a byte slice, runtime-dispatched to AVX-512,
//!   AVX2 or a portable scalar loop (see [`simd`]); every implementation returns the same bits.
//! * [`combine`], [`fold`], [`sum_from`] and [`Accumulator`] for building a sum from pieces.
//! * [`pseudo`]: IPv4/IPv6 pseudo-header sums for TCP/UDP/ICMPv6.
//! * [`incremental`]: RFC 1624 checksum updates after rewriting a field.
//! * [`crc32c`]: the SCTP checksum.
//!
//! # Conventions
//!
//! A *sum* is the ones'-complement sum of the data read as big-endian 16-bit words (an odd
//! trailing byte is padded with a zero byte), folded to 16 bits and **not** complemented. In
//! ones'-complement arithmetic `0x0000` and `0xffff` both mean zero; every function here returns
//! `0x0000` only when all the summed words are zero, and `0xffff` for any other input whose sum is
//! zero. A *checksum* is the complement of a sum, the value stored in a header (big-endian). A
//! receiver verifies data that includes its checksum field by checking `sum(..) == 0xffff`.
//!
//! Values are returned as host integers holding the big-endian interpretation, so the header
//! field bytes are `value.to_be_bytes()` on every host.
#![deny(unsafe_code)]

pub mod crc32c;
pub mod incremental;
pub mod pseudo;
mod scalar;
#[allow(unsafe_code)]
pub mod simd;

/// Inputs shorter than this skip dispatch and take the short path (`simd::sum_short_folded` on
/// x86_64: an `adc` chain, or inline AVX-512 in a build for such a CPU; `scalar::sum_le_short`
/// elsewhere): below it the vector setup and
/// horizontal reduction cost about as much as they save (measured with
/// `examples/cksum_bench.rs` at 64..1024 bytes on a Sapphire Rapids core).
const SIMD_MIN_LEN: usize = 256;

/// Ones'-complement sum of `data` as big-endian 16-bit words, folded, not complemented.
///
/// An odd trailing byte is treated as the high byte of a final word padded with zero. The result
/// is `0x0000` only when every byte of `data` is zero (including empty `data`).
///
/// ```
/// // RFC 1071 section 3 example.
/// assert_eq!(sluice_checksum::sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
/// ```
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let folded = if data.len() < SIMD_MIN_LEN {
        #[cfg(target_arch = "x86_64")]
        let short = simd::sum_short_folded(data);
        #[cfg(not(target_arch = "x86_64"))]
        let short = fold(scalar::sum_le_short(data));
        short
    } else {
        fold(simd::sum_le_dispatched(data))
    };
    // The implementations sum little-endian words; ones'-complement sums commute with byte
    // swapping (RFC 1071 section 2(B)), so one swap at the end gives the big-endian sum.
    folded.swap_bytes()
}

/// The Internet checksum of `data`: `!sum(data)`, ready to store (big-endian) in a header.
///
/// All-zero (or empty) data gives `0xffff`; data whose sum is ones'-complement zero gives
/// `0x0000`. Protocols that reserve a transmitted `0x0000` (UDP over IPv4, where it means "no
/// checksum", and UDP over IPv6) must send `0xffff` instead; that substitution is the caller's
/// job because it is protocol specific.
///
/// ```
/// use sluice_checksum::{checksum, sum};
/// let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
/// let csum = checksum(&data);
/// assert_eq!(csum, 0x220d);
/// // The receiver sums the data with the checksum field included and expects 0xffff.
/// let mut received = data.to_vec();
/// received.extend_from_slice(&csum.to_be_bytes());
/// assert_eq!(sum(&received), 0xffff);
/// ```
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Ones'-complement addition of two folded sums.
///
/// `combine(sum(a), sum(b)) == sum(a ++ b)` when `a` has even length. The result is `0x0000`
/// only when both inputs are `0x0000`.
///
/// ```
/// use sluice_checksum::{combine, sum};
/// let (a, b) = ([0x12, 0x34, 0x56, 0x78], [0x9a, 0xbc, 0xde]);
/// assert_eq!(combine(sum(&a), sum(&b)), sum(&[0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde]));
/// assert_eq!(combine(0xffff, 0x0001), 0x0001); // end-around carry
/// ```
#[inline]
pub const fn combine(a: u16, b: u16) -> u16 {
    let (s, carry) = a.overflowing_add(b);
    // End-around carry. Cannot overflow again: with a carry, `s <= 0xfffe`.
    s.wrapping_add(carry as u16)
}

/// Folds a 64-bit accumulator of 16-bit words to a 16-bit ones'-complement sum.
///
/// `acc` may hold any sum of big-endian 16-, 32- or 64-bit values taken at 16-bit aligned
/// positions (2^16 is 1 modulo 0xffff, so wider words fold to the same result). The result is
/// `0x0000` only when `acc == 0`.
///
/// ```
/// // 0x1_2345 folds to 0x2345 + 0x1.
/// assert_eq!(sluice_checksum::fold(0x1_2345), 0x2346);
/// assert_eq!(sluice_checksum::fold(0), 0);
/// ```
#[inline]
pub const fn fold(acc: u64) -> u16 {
    let (s, carry) = ((acc >> 32) as u32).overflowing_add(acc as u32);
    let s = s.wrapping_add(carry as u32);
    combine((s >> 16) as u16, s as u16)
}

/// `combine(initial, sum(data))`: continues a sum, with `data` starting at an even offset.
///
/// ```
/// use sluice_checksum::{sum, sum_from};
/// let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
/// assert_eq!(sum_from(sum(&data[..4]), &data[4..]), sum(&data));
/// ```
#[inline]
pub fn sum_from(initial: u16, data: &[u8]) -> u16 {
    combine(initial, sum(data))
}

/// Sums several non-contiguous slices as if they were one contiguous buffer.
///
/// Slices may have odd lengths: the accumulator tracks the byte parity of everything added so
/// far, and a slice that starts at an odd position contributes its byte-swapped sum (its bytes
/// fall on the other half of each 16-bit word). The result equals [`sum`] of the concatenation.
///
/// ```
/// use sluice_checksum::{sum, Accumulator};
/// let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
/// let mut acc = Accumulator::new();
/// acc.add(&data[..3]);
/// acc.add(&data[3..]);
/// assert_eq!(acc.finish(), sum(&data));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accumulator {
    /// Folded big-endian sum so far.
    sum: u16,
    /// Whether an odd number of bytes has been added, i.e. the next byte is a low byte.
    odd: bool,
}

impl Accumulator {
    /// An empty accumulator (sum zero, even position).
    #[inline]
    pub const fn new() -> Self {
        Accumulator { sum: 0, odd: false }
    }

    /// Adds `data`, which continues directly after the bytes added so far.
    #[inline]
    pub fn add(&mut self, data: &[u8]) {
        self.add_word_sum(sum(data));
        self.odd ^= data.len() % 2 == 1;
    }

    /// Adds `value` as two bytes in big-endian order (same as `add(&value.to_be_bytes())`).
    #[inline]
    pub fn add_u16(&mut self, value: u16) {
        self.add_word_sum(value);
    }

    /// Adds `value` as four bytes in big-endian order (same as `add(&value.to_be_bytes())`).
    #[inline]
    pub fn add_u32(&mut self, value: u32) {
        self.add_word_sum(combine((value >> 16) as u16, value as u16));
    }

    /// The folded sum of everything added, not complemented.
    #[inline]
    pub const fn finish(self) -> u16 {
        self.sum
    }

    /// Adds the standalone (even-aligned) sum of bytes that start at the current position.
    #[inline]
    fn add_word_sum(&mut self, s: u16) {
        let s = if self.odd { s.swap_bytes() } else { s };
        self.sum = combine(self.sum, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn zero_conventions() {
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[0; 100]), 0);
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(sum(&[0xff, 0xff]), 0xffff);
        assert_eq!(sum(&[0x12, 0x34, 0xed, 0xcb]), 0xffff);
        assert_eq!(checksum(&[0x12, 0x34, 0xed, 0xcb]), 0);
        assert_eq!(fold(0), 0);
        assert_eq!(fold(0xffff), 0xffff);
        assert_eq!(fold(0x1_0000), 1);
        assert_eq!(fold(u64::MAX), 0xffff);
        assert_eq!(combine(0xffff, 0), 0xffff);
        assert_eq!(combine(0xffff, 1), 1);
        assert_eq!(combine(0, 0), 0);
    }

    #[test]
    fn short_path_zero_conventions() {
        // The short-input path (adc chain + shifted tail) at every length it serves.
        for len in 1..SIMD_MIN_LEN {
            assert_eq!(sum(&vec![0; len]), 0, "len {len}");
            let want = if len % 2 == 1 { 0xff00 } else { 0xffff };
            assert_eq!(sum(&vec![0xff; len]), want, "len {len}");
        }
    }

    #[test]
    fn odd_trailing_byte_is_high_byte() {
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x00, 0x01, 0xab]), 0xab01);
    }

    #[test]
    fn accumulator_words() {
        let mut a = Accumulator::new();
        a.add(&[0x11]);
        a.add_u16(0x2233);
        a.add_u32(0x4455_6677);
        assert_eq!(a.finish(), sum(&[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77]));
    }
}

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
