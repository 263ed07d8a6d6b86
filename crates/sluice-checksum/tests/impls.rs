//! Every implementation (scalar, AVX2, AVX-512, dispatched) against an independent reference.

use proptest::prelude::*;
use sluice_checksum::simd::{self, Impl};
use sluice_checksum::{checksum, sum};

/// Reference: big-endian 16-bit words summed in a u64, folded with end-around carries. Uses
/// `u16::from_be_bytes`, so it does not depend on the host's byte order.
fn reference(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    for pair in data.chunks(2) {
        let hi = pair[0];
        let lo = pair.get(1).copied().unwrap_or(0);
        acc += u64::from(u16::from_be_bytes([hi, lo]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Deterministic pseudo-random bytes (splitmix64), no extra dependency.
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn all_impls() -> Vec<Impl> {
    simd::available().collect()
}

#[test]
fn detection_is_consistent() {
    let avail = all_impls();
    assert_eq!(avail.first(), Some(&Impl::Scalar));
    assert!(avail.contains(&simd::detected()));
    for imp in Impl::ALL {
        assert_eq!(simd::sum_with(imp, &[1, 2]).is_some(), avail.contains(&imp));
    }
    // Print what was covered so a CI log shows whether the vector paths actually ran.
    eprintln!("available: {:?}, detected: {:?}", avail, simd::detected());
}

#[test]
fn every_length_and_alignment() {
    const MAX_LEN: usize = 4096;
    const OFFSETS: usize = 64;
    let buf = random_bytes(MAX_LEN + OFFSETS, 1);
    let impls = all_impls();
    for offset in 0..OFFSETS {
        let base = &buf[offset..];
        // Running reference over prefixes keeps this O(len) per offset.
        let mut acc: u64 = 0;
        for len in 0..=MAX_LEN {
            let data = &base[..len];
            if len % 2 == 0 && len > 0 {
                acc += u64::from(u16::from_be_bytes([data[len - 2], data[len - 1]]));
            }
            let mut r = acc;
            if len % 2 == 1 {
                r += u64::from(data[len - 1]) << 8;
            }
            let expected = reference_fold(r);
            for &imp in &impls {
                assert_eq!(
                    simd::sum_with(imp, data),
                    Some(expected),
                    "{imp:?} offset {offset} len {len}"
                );
            }
            assert_eq!(sum(data), expected, "dispatched offset {offset} len {len}");
        }
    }
}

fn reference_fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[test]
fn reference_agrees_with_prefix_reference() {
    let buf = random_bytes(1000, 2);
    for len in [0, 1, 2, 3, 999, 1000] {
        let d = &buf[..len];
        let mut acc = 0u64;
        for c in d.chunks(2) {
            acc += u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0));
        }
        assert_eq!(reference(d), reference_fold(acc));
    }
}

/// Extreme word values at lengths that cross the vector paths' accumulator-widening blocks
/// (1 MiB for AVX2, 2 MiB for AVX-512): all-ones maximises carries, all-zero is the most
/// negative biased lane value, 0x8000/0x7fff sit on the bias boundary.
#[test]
fn extreme_patterns_across_blocks() {
    let len = 5 * 1024 * 1024 + 77;
    for pattern in [
        [0xff, 0xff],
        [0x00, 0x00],
        [0x80, 0x00],
        [0x7f, 0xff],
        [0x00, 0x01],
    ] {
        let buf: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
        for cut in [
            len,
            len - 77,
            2 * 1024 * 1024,
            2 * 1024 * 1024 + 256,
            1024 * 1024 + 128,
        ] {
            let data = &buf[..cut];
            let expected = reference(data);
            for imp in all_impls() {
                assert_eq!(
                    simd::sum_with(imp, data),
                    Some(expected),
                    "{imp:?} {pattern:?} {cut}"
                );
            }
        }
    }
    // All zero sums to +0, never -0.
    let zeros = vec![0u8; len];
    for imp in all_impls() {
        assert_eq!(simd::sum_with(imp, &zeros), Some(0));
    }
}

#[test]
fn zero_vs_ffff_is_identical_across_impls() {
    // Buffers whose sum is ones'-complement zero but not all zero must give 0xffff everywhere.
    for len in [2usize, 64, 130, 1500, 4096, 65536] {
        let mut data = random_bytes(len, len as u64);
        let s = reference(&data[..len - 2]);
        data[len - 2..].copy_from_slice(&(!s).to_be_bytes());
        for imp in all_impls() {
            assert_eq!(simd::sum_with(imp, &data), Some(0xffff), "{imp:?} {len}");
        }
        assert_eq!(checksum(&data), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_buffers_up_to_256k(
        len in 0usize..=256 * 1024,
        offset in 0usize..64,
        seed in any::<u64>(),
    ) {
        let buf = random_bytes(len + offset, seed);
        let data = &buf[offset..];
        let expected = reference(data);
        for imp in all_impls() {
            prop_assert_eq!(simd::sum_with(imp, data), Some(expected), "{:?}", imp);
        }
        prop_assert_eq!(sum(data), expected);
    }

    #[test]
    fn agrees_with_internet_checksum_crate(data in proptest::collection::vec(any::<u8>(), 0..20_000)) {
        let theirs = u16::from_be_bytes(internet_checksum::checksum(&data));
        prop_assert_eq!(checksum(&data), theirs);
    }
}
