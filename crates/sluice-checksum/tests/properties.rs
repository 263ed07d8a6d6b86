//! Algebraic properties: accumulator splits, sum_from, incremental updates.

use proptest::prelude::*;
use sluice_checksum::incremental::{update16, update32, update_bytes, update_bytes_at};
use sluice_checksum::{checksum, combine, sum, sum_from, Accumulator};

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// `data` with its last two bytes adjusted so that its sum is 0xffff (checksum 0x0000): the
/// corner case RFC 1624 is about.
fn with_sum_ffff(mut data: Vec<u8>) -> Vec<u8> {
    if data.len() % 2 == 1 {
        data.push(0);
    }
    data.extend_from_slice(&[0, 0]);
    let n = data.len();
    let s = sum(&data[..n - 2]);
    data[n - 2..].copy_from_slice(&(!s).to_be_bytes());
    data
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn accumulator_over_random_splits(data in bytes(3000), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12)) {
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(data.len() + 1)).collect();
        points.push(0);
        points.push(data.len());
        points.sort_unstable();
        let mut acc = Accumulator::new();
        for w in points.windows(2) {
            acc.add(&data[w[0]..w[1]]);
        }
        prop_assert_eq!(acc.finish(), sum(&data));
    }

    #[test]
    fn accumulator_words_match_bytes(prefix in bytes(9), a in any::<u16>(), b in any::<u32>(), suffix in bytes(9)) {
        let mut acc = Accumulator::new();
        acc.add(&prefix);
        acc.add_u16(a);
        acc.add_u32(b);
        acc.add(&suffix);
        let mut all = prefix.clone();
        all.extend_from_slice(&a.to_be_bytes());
        all.extend_from_slice(&b.to_be_bytes());
        all.extend_from_slice(&suffix);
        prop_assert_eq!(acc.finish(), sum(&all));
    }

    #[test]
    fn sum_from_and_combine(a in bytes(200), b in bytes(200)) {
        let mut a = a;
        if a.len() % 2 == 1 { a.pop(); }
        let mut ab = a.clone();
        ab.extend_from_slice(&b);
        prop_assert_eq!(sum_from(sum(&a), &b), sum(&ab));
        prop_assert_eq!(combine(sum(&a), sum(&b)), sum(&ab));
    }

    #[test]
    fn update16_matches_recompute(data in bytes(200), idx in any::<prop::sample::Index>(), new in any::<u16>(), force_ffff in any::<bool>()) {
        let mut data = if force_ffff { with_sum_ffff(data) } else { data };
        if data.len() < 2 { data.extend_from_slice(&[0x45, 0x00]); }
        let word = idx.index(data.len() / 2) * 2;
        let old = u16::from_be_bytes([data[word], data[word + 1]]);
        let hc = checksum(&data);
        data[word..word + 2].copy_from_slice(&new.to_be_bytes());
        check_update(update16(hc, old, new), &data)?;
    }

    /// Updates that land exactly on a sum of 0xffff (checksum 0x0000).
    #[test]
    fn update16_into_zero_checksum(data in bytes(200), idx in any::<prop::sample::Index>()) {
        let target = with_sum_ffff(data);
        let word = idx.index(target.len() / 2) * 2;
        let new = u16::from_be_bytes([target[word], target[word + 1]]);
        let mut before = target.clone();
        before[word] ^= 0x5a;
        let old = u16::from_be_bytes([before[word], before[word + 1]]);
        prop_assert_eq!(checksum(&target), 0);
        prop_assert_eq!(update16(checksum(&before), old, new), 0);
    }

    #[test]
    fn update32_matches_recompute(data in bytes(200), idx in any::<prop::sample::Index>(), new in any::<u32>(), force_ffff in any::<bool>()) {
        let mut data = if force_ffff { with_sum_ffff(data) } else { data };
        while data.len() < 4 { data.push(0x11); }
        let at = idx.index(data.len() / 2 - 1) * 2;
        let old = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let hc = checksum(&data);
        data[at..at + 4].copy_from_slice(&new.to_be_bytes());
        check_update(update32(hc, old, new), &data)?;
    }

    #[test]
    fn update_bytes_matches_recompute(data in bytes(300), start in any::<prop::sample::Index>(), field in bytes(40), force_ffff in any::<bool>()) {
        let mut data = if force_ffff { with_sum_ffff(data) } else { data };
        data.resize(data.len().max(field.len() + 2), 0x33);
        let max_start = data.len() - field.len();
        let at = start.index(max_start + 1);
        let hc = checksum(&data);
        let old = data[at..at + field.len()].to_vec();
        data[at..at + field.len()].copy_from_slice(&field);
        check_update(update_bytes_at(hc, at, &old, &field), &data)?;
        if at % 2 == 0 {
            check_update(update_bytes(hc, &old, &field), &data)?;
        }
    }
}

/// An incremental result must equal full recomputation, except that all-zero new data may come
/// out as 0x0000 instead of 0xffff (both mean zero; see the `incremental` module docs).
fn check_update(updated: u16, new_data: &[u8]) -> Result<(), TestCaseError> {
    let full = checksum(new_data);
    if new_data.iter().all(|&b| b == 0) {
        prop_assert!(updated == 0 || updated == 0xffff);
    } else {
        prop_assert_eq!(updated, full);
    }
    Ok(())
}

#[test]
fn odd_offset_update() {
    let mut data = vec![0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde];
    let hc = checksum(&data);
    let old = data[1..4].to_vec();
    let new = [0xff, 0x00, 0x01];
    data[1..4].copy_from_slice(&new);
    assert_eq!(update_bytes_at(hc, 1, &old, &new), checksum(&data));
}
