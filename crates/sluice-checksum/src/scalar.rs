//! Portable sum: the fallback on every CPU and the tail of the SIMD paths.
//!
//! Works on little-endian 64-bit words (read explicitly with `from_le_bytes`, so the result does
//! not depend on the host's byte order). Callers fold the result and swap it to big-endian.

/// Sum of `data` read as little-endian 16-bit words (odd trailing byte padded with zero), as a
/// 64-bit value that folds to the ones'-complement sum. Zero only when all bytes are zero.
///
/// `data` must start at an even position of the checksummed region; the SIMD paths only call
/// this on even-length prefixes' remainders.
#[inline]
pub(crate) fn sum_le(data: &[u8]) -> u64 {
    // Four u128 accumulators: each 8-byte add is an add/adc pair, and independent chains keep
    // several in flight. A u128 cannot overflow on any realistic input (2^64 words).
    let mut acc = [0u128; 4];
    let mut blocks = data.chunks_exact(32);
    for block in &mut blocks {
        for (a, w) in acc.iter_mut().zip(block.chunks_exact(8)) {
            *a += u128::from(le64(w));
        }
    }
    let rest = blocks.remainder();
    let mut words = rest.chunks_exact(8);
    for (a, w) in acc.iter_mut().zip(&mut words) {
        *a += u128::from(le64(w));
    }
    // Last 0..=7 bytes, starting at an even offset. Whole 16-bit words may be summed at any
    // (even) position since 2^16 = 1 mod 0xffff; a final odd byte is the low byte of its LE
    // word, i.e. the high byte of the big-endian word once swapped.
    let mut last = 0u64;
    let mut r = words.remainder();
    if let Some((w, rest)) = r.split_first_chunk::<4>() {
        last += u64::from(u32::from_le_bytes(*w));
        r = rest;
    }
    if let Some((w, rest)) = r.split_first_chunk::<2>() {
        last += u64::from(u16::from_le_bytes(*w));
        r = rest;
    }
    if let Some(&b) = r.first() {
        last += u64::from(b);
    }
    let total = acc[0] + acc[1] + acc[2] + acc[3] + u128::from(last);
    add_carry((total >> 64) as u64, total as u64)
}

/// [`sum_le`] for inputs shorter than the SIMD threshold (packet headers, 64-byte frames), the
/// portable twin of the x86_64 `adc`-chain path in [`crate::simd`]: whole 8-byte words into two
/// `u128` accumulators (an `add`/`adc` pair per word), then the last `len % 8` bytes from one
/// overlapping 8-byte load of the buffer's end shifted into place instead of a 4/2/1-byte
/// ladder. Same result as [`sum_le`] after folding, for every input.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
pub(crate) fn sum_le_short(data: &[u8]) -> u64 {
    let Some(last8) = data.last_chunk::<8>() else {
        return sum_le(data);
    };
    let (mut a, mut b) = (0u128, 0u128);
    let mut pairs = data.chunks_exact(16);
    for p in &mut pairs {
        a += u128::from(le64(&p[..8]));
        b += u128::from(le64(&p[8..]));
    }
    let rest = pairs.remainder();
    if let Some(w) = rest.first_chunk::<8>() {
        a += u128::from(u64::from_le_bytes(*w));
    }
    // The `r` bytes after the last whole word are the top `r` bytes of the buffer's last 8
    // bytes. They start at an 8-aligned (so even) offset: moving them to bytes 0..r puts every
    // byte at its position in its 16-bit word. Two shifts: r = 0 shifts all out instead of
    // overflowing.
    let r = (rest.len() % 8) as u32;
    let tail = (u64::from_le_bytes(*last8) >> (63 - 8 * r)) >> 1;
    let total = a + b + u128::from(tail);
    add_carry((total >> 64) as u64, total as u64)
}

/// Ones'-complement (end-around carry) addition of two 64-bit partial sums. The result is zero
/// only when both inputs are zero, which keeps the "zero only for all-zero data" guarantee.
#[inline]
pub(crate) const fn add_carry(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s.wrapping_add(carry as u64)
}

/// Little-endian u64 from an 8-byte chunk (callers pass `chunks_exact(8)` items, so the
/// fallback arm is unreachable and compiles away).
#[inline(always)]
fn le64(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_le(data: &[u8]) -> u64 {
        data.chunks(2)
            .map(|c| u64::from(c[0]) | u64::from(*c.get(1).unwrap_or(&0)) << 8)
            .sum()
    }

    #[test]
    fn short_path_matches_naive() {
        for fill in [0x00u8, 0xff, 0x5a] {
            let mut data: Vec<u8> = (0..300u32).map(|i| (i * 151 + 17) as u8).collect();
            if fill != 0x5a {
                data.fill(fill);
            }
            for start in 0..2 {
                for len in 0..data.len() - start {
                    let d = &data[start..start + len];
                    let got = sum_le_short(d);
                    assert_eq!(crate::fold(got), crate::fold(naive_le(d)), "len {len}");
                    // Zero only for all-zero data.
                    assert_eq!(got == 0, d.iter().all(|&b| b == 0), "len {len}");
                }
            }
        }
    }

    #[test]
    fn matches_naive_for_small_lengths() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 151 + 17) as u8).collect();
        for len in 0..data.len() {
            let d = &data[..len];
            assert_eq!(
                crate::fold(sum_le(d)),
                crate::fold(naive_le(d)),
                "len {len}"
            );
        }
    }
}
