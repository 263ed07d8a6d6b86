//! Unit tests of the engine's internals (the rules have their own in `rules.rs`).

use super::csum::{fast_payload_sum, fixed_tcp_sum, segment_payload_sum, small_sum};
use super::flow::{plain_offsets, plain_tcp, ETH_HLEN};
use super::rules::{eligible, TCP_PSH};
use super::table::{FlowIndex, Held};
use super::view::{fast_view, prediction_bits, PlainMasks, CMP_WORDS};
use super::{GroConfig, GroEngine};
use proptest::prelude::*;
use sluice_checksum::sum;
use sluice_packet::OffloadMeta;

/// A TCP segment over IPv4 or IPv6 with `opts` TCP option bytes and `payload` bytes.
fn segment(v6: bool, opts: usize, payload: usize, seed: u8) -> Vec<u8> {
    let (l3len, et) = if v6 { (40, 0x86dd_u16) } else { (20, 0x0800) };
    let thl = 20 + opts;
    let mut f = vec![0u8; 14 + l3len + thl + payload];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&et.to_be_bytes());
    let ip_len = l3len + thl + payload;
    if v6 {
        f[14] = 0x60;
        f[18..20].copy_from_slice(&((thl + payload) as u16).to_be_bytes());
        f[20] = 6;
        f[21] = 64;
        f[22..54]
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8 ^ seed);
    } else {
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
        f[18..20].copy_from_slice(&[0, seed]);
        f[20] = 0x40;
        f[22] = 64;
        f[23] = 6;
        f[26..34].copy_from_slice(&[192, 0, 2, 1, 192, 0, 2, seed]);
    }
    let l4 = 14 + l3len;
    f[l4..l4 + 4].copy_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    f[l4 + 4..l4 + 8].copy_from_slice(&[0, 0, 0x10, seed]);
    f[l4 + 12] = ((thl / 4) as u8) << 4;
    f[l4 + 13] = 0x10;
    for (i, b) in f[l4 + 20..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7) ^ seed;
    }
    f
}

fn engine() -> GroEngine {
    GroEngine::new(GroConfig::default())
}

proptest! {
    /// `plain_offsets` gives the offsets fresh metadata gives plain frames.
    #[test]
    fn plain_offsets_are_the_parsers(v6 in any::<bool>(), opts in 0usize..11, payload in 1usize..200) {
        let frame = segment(v6, opts * 4, payload, 1);
        let m = OffloadMeta::from_layout(&sluice_wire::parse(&frame).unwrap());
        prop_assert_eq!(m.offsets(), plain_offsets(v6));
    }

    /// The plain shortcut accepts only frames the general path classifies identically
    /// (hash included) and holds eligible, whatever bytes are changed.
    #[test]
    fn plain_matches_parser(
        v6 in any::<bool>(),
        opts in (0usize..11).prop_map(|n| n * 4),
        payload in 0usize..300,
        seed in any::<u8>(),
        flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..4),
        cut in 0usize..8,
    ) {
        let mut f = segment(v6, opts, payload, seed);
        for (at, x) in flips {
            if let Some(b) = f.get_mut(at) {
                *b ^= x;
            }
        }
        f.truncate(f.len().saturating_sub(cut));
        let e = engine();
        let general = sluice_wire::parse_with(&f, &e.cfg.parse)
            .ok()
            .and_then(|l| e.classify(&f, &l).map(|i| (eligible(&f, &l, &i), i)));
        if let Some(p) = plain_tcp(&f, None) {
            let (ok, info) = general.expect("the parser accepts a plain frame");
            prop_assert!(ok, "a plain frame is eligible");
            prop_assert_eq!(p, info);
            // The precomputed mask is the one `fast_view` computes.
            let (mut r, mut m) = ([0; CMP_WORDS * 8], [0; CMP_WORDS]);
            let words = fast_view(&f, &p, &mut r, &mut m);
            prop_assert!(words > 0);
            let masks = PlainMasks::new();
            prop_assert_eq!(masks.get(&p), Some(&m));
        }
    }

    /// The fast payload sum of a segment with the first segment's headers equals the one
    /// computed from its own headers.
    #[test]
    fn fast_payload_sum_agrees(
        v6 in any::<bool>(),
        opts in (0usize..11).prop_map(|n| n * 4),
        payload in 1usize..300,
        seed in any::<u8>(),
        seq in any::<u32>(),
        csum in any::<u16>(),
        urg in any::<u16>(),
        psh in any::<bool>(),
    ) {
        let first = segment(v6, opts, payload, seed);
        let info = plain_tcp(&first, None).expect("plain");
        let h = Held { fixed_sum: fixed_tcp_sum(&first, &info).expect("sum"), info, ..Held::default() };
        let mut next = first.clone();
        let l4 = info.l4;
        next[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        next[l4 + 16..l4 + 18].copy_from_slice(&csum.to_be_bytes());
        next[l4 + 18..l4 + 20].copy_from_slice(&urg.to_be_bytes());
        if psh {
            next[l4 + 13] |= TCP_PSH;
        }
        let end = next.len();
        prop_assert_eq!(
            fast_payload_sum(&h, &next, end),
            segment_payload_sum(&next, &info, end)
        );
    }
}

proptest! {
    /// The flow index finds exactly what was inserted and not removed, with colliding
    /// hashes and home buckets.
    #[test]
    fn flow_index_matches_a_model(
        max_flows in 1usize..20,
        ops in proptest::collection::vec((any::<bool>(), 0u64..6, 0u32..40), 0..200),
    ) {
        let mut idx = FlowIndex::new(max_flows);
        let mut model: Vec<(u64, u32)> = Vec::new();
        for (insert, h, slot) in ops {
            // Few distinct hashes, with equal high halves for some: collisions and clusters.
            let hash = (h % 3) << 32 | h;
            if insert {
                if model.len() < max_flows && !model.iter().any(|&(_, s)| s == slot) {
                    idx.insert(hash, slot);
                    model.push((hash, slot));
                }
            } else if let Some(k) = model.iter().position(|&(_, s)| s == slot) {
                let (mh, ms) = model.remove(k);
                idx.remove(mh, ms);
            }
            for h in 0..6u64 {
                let hash = (h % 3) << 32 | h;
                let mut want: Vec<u32> =
                    model.iter().filter(|e| e.0 == hash).map(|e| e.1).collect();
                let mut got = Vec::new();
                let mut p = idx.probe(hash);
                while let Some(s) = idx.next(&mut p, hash) {
                    got.push(s as u32);
                }
                want.sort_unstable();
                got.sort_unstable();
                prop_assert_eq!(want, got);
            }
        }
    }
}

proptest! {
    #[test]
    fn small_sum_is_sum(b in proptest::collection::vec(any::<u8>(), 0..90)) {
        prop_assert_eq!(small_sum(&b), sum(&b));
    }
}

/// Segment `k` (1000-byte payloads) of one IPv4 flow, DF, incrementing IDs.
fn stream_segment(k: u32) -> Vec<u8> {
    let mut f = segment(false, 0, 1000, 7);
    f[18..20].copy_from_slice(&(100 + k as u16).to_be_bytes());
    f[38..42].copy_from_slice(&(5000 + 1000 * k).to_be_bytes());
    f
}

fn good_meta(f: &[u8]) -> OffloadMeta {
    let mut m = OffloadMeta::from_layout(&sluice_wire::parse(f).expect("parses"));
    m.rx_checksum_unnecessary(false);
    m
}

/// A segment joined on the general path (its IPv4 reserved flag bit differs, which Linux
/// ignores) moves the fast lane's prediction on: a duplicate of it must not join after.
#[test]
fn prediction_follows_general_path_joins() {
    let mut e = engine();
    for k in 0..3 {
        let f = stream_segment(k);
        e.receive(&f, good_meta(&f), 0);
    }
    let mut odd = stream_segment(3);
    odd[20] |= 0x80;
    e.receive(&odd, good_meta(&odd), 0);
    let dup = stream_segment(3);
    e.receive(&dup, good_meta(&dup), 0);
    let next = stream_segment(4);
    e.receive(&next, good_meta(&next), 0);
    e.end_batch(0);
    let mut segments = Vec::new();
    while let Some(p) = e.pop_output() {
        segments.push(p.segments);
    }
    // 0..=3 merged; the duplicate cannot join them (its sequence number is behind) and
    // starts a packet, which 4 then joins (in sequence after it, next ID).
    assert_eq!(segments, vec![4, 2]);
    assert_eq!(e.stats().merged_segments, 4);
}

#[test]
fn prediction_bits_are_the_predicted_fields() {
    for v6 in [false, true] {
        let mut want = [0u64; CMP_WORDS];
        let ip = if v6 {
            ETH_HLEN + 4..ETH_HLEN + 6
        } else {
            ETH_HLEN + 2..ETH_HLEN + 4
        };
        for a in ip {
            want[a / 8] |= 0xff << ((a % 8) * 8);
        }
        assert_eq!(prediction_bits(v6), want);
    }
}

#[test]
fn plain_accepts_the_benchmark_shapes() {
    for v6 in [false, true] {
        for opts in [0, 12] {
            let f = segment(v6, opts, 100, 3);
            let info = plain_tcp(&f, None).expect("plain");
            let l = sluice_wire::parse(&f).expect("parses");
            assert_eq!(Some(info), engine().classify(&f, &l));
        }
    }
}

/// L3 packets have the header-compare lane: once a flow's first segment is held (general
/// path), the next in-sequence segments join through `try_fast` (false with the lane off).
#[test]
fn l3_segments_join_through_the_compare_lane() {
    let l3 = sluice_wire::ParseConfig::L3;
    let mut e = GroEngine::new(GroConfig {
        parse: l3,
        ..GroConfig::default()
    });
    let packet = |k: u32| stream_segment(k)[ETH_HLEN..].to_vec();
    let meta = |p: &[u8]| {
        let mut m = OffloadMeta::from_layout(&sluice_wire::parse_with(p, &l3).expect("parses"));
        m.rx_checksum_unnecessary(false);
        m
    };
    let first = packet(0);
    e.receive(&first, meta(&first), 0);
    assert_eq!(e.held_segments(), 1);
    for k in 1..4 {
        let p = packet(k);
        assert!(e.try_fast(&p, &meta(&p)), "segment {k} took another lane");
    }
    e.end_batch(0);
    assert_eq!(e.pop_output().map(|p| p.segments), Some(4));
}
