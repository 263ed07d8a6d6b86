//! Round trips between software GSO ([`sluice_offload::gso`]) and GRO, for random flows (IPv4 and
//! IPv6, VLAN stacks, TCP options, VXLAN/Geneve/GRE tunnels, any segment size):
//!
//! - GSO then GRO gives back the original super-packet byte for byte (lengths, IDs, flags and
//!   checksums included: the fields GSO changes per segment are exactly those GRO restores);
//! - GRO then GSO gives back the original segments;
//! - under random floods of frames the engine's memory stays bounded;
//! - burst (zero-copy) mode gives exactly the packets of the copying mode;
//! - an engine of L3 packets (no Ethernet header) makes the Ethernet engine's decisions.

use proptest::prelude::*;
use sluice_offload::gro::{GroBurst, GroConfig, GroEngine};
use sluice_offload::gso::{self, GsoOutput, GsoParams};
use sluice_packet::{CsumStatus, GsoType, OffloadMeta, Slot};
use sluice_testkit::segments::*;
use sluice_wire::ParseConfig;

/// Bytes of the Ethernet header the segments are built with (no tags).
const ETH: usize = 14;

fn seg_strategy() -> impl Strategy<Value = (Seg, usize)> {
    (
        any::<bool>(),                                   // v6
        0usize..4,                                       // vlan depth
        0u8..5,                                          // tunnel kind
        any::<bool>(),                                   // outer v6
        any::<bool>(),                                   // outer checksum
        any::<bool>(),                                   // timestamps option
        (any::<u16>(), any::<bool>(), 1u8..255, 0u8..3), // id, df, ttl, ecn
        any::<u32>(),                                    // seq
        100usize..1461,                                  // mss
        1usize..40,                                      // segments
        any::<bool>(),                                   // psh on the last
    )
        .prop_map(
            |(v6, depth, tun, ov6, ocsum, ts, (id, df, ttl, ecn), seq, mss, n, psh)| {
                let mut s = if v6 {
                    Seg::tcp6(seq, 0)
                } else {
                    Seg::tcp4(seq, 0)
                };
                s.vlans = (0..depth)
                    .map(|i| (if i == 0 { 0x88a8 } else { 0x8100 }, 10 + i as u16))
                    .collect();
                s.id = id;
                s.df = df;
                s.ttl = ttl;
                s.tos = ecn;
                if ts {
                    s.options = vec![1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8];
                }
                if psh {
                    s.flags |= PSH;
                }
                let t = match tun {
                    1 => Some(Tun::Vxlan {
                        vni: 5,
                        outer_csum: ocsum,
                    }),
                    2 => Some(Tun::Geneve {
                        vni: 6,
                        outer_csum: ocsum,
                    }),
                    3 => Some(Tun::Gre { key: Some(9) }),
                    _ => None,
                };
                s.outer = t.map(|tun| Outer {
                    tun,
                    v6: ov6,
                    ..outer_vxlan()
                });
                // Keep the super-packet within 64 KiB of IP packet.
                let max_payload = 60_000;
                let total = (n * mss).min(max_payload / mss * mss).max(1);
                let last_short = if n > 1 && mss > 200 { mss / 3 } else { 0 };
                let total = if total + last_short <= max_payload {
                    total + last_short
                } else {
                    total
                };
                s.payload = payload_at(seq, total);
                (s, mss)
            },
        )
}

fn gso_type(s: &Seg) -> GsoType {
    if s.v6 {
        GsoType::TcpV6
    } else {
        GsoType::TcpV4
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn gso_then_gro_returns_the_super_packet((sp, mss) in seg_strategy()) {
        let frame = sp.build();
        let layout = sluice_wire::parse(&frame).unwrap();
        let mut out = GsoOutput::new();
        let n = gso::segment(&frame, &layout, &GsoParams::new(gso_type(&sp), mss as u16), &mut out)
            .unwrap();
        let mut e = GroEngine::new(GroConfig::default());
        e.receive_batch(out.frames().map(|f| (f, OffloadMeta::default())), 0);
        let p = e.pop_output().expect("one packet");
        prop_assert!(e.pop_output().is_none(), "more than one packet");
        prop_assert_eq!(usize::from(p.segments), n);
        prop_assert!(p.frame == frame, "merged packet differs from the super-packet");
        if n > 1 {
            prop_assert_eq!(p.meta.gso_type(), gso_type(&sp));
            prop_assert_eq!(usize::from(p.meta.segment_size()), mss);
            let l4 = if sp.outer.is_some() { Slot::InnerL4 } else { Slot::OuterL4 };
            prop_assert_eq!(p.meta.status(l4), CsumStatus::Good);
        }
    }

    #[test]
    fn gro_then_gso_returns_the_segments((sp, mss) in seg_strategy()) {
        // The segments a sender would put on the wire (our GSO is checked against the kernel's
        // elsewhere), then GRO, then GSO of every merged packet at its own segment size.
        let frame = sp.build();
        let layout = sluice_wire::parse(&frame).unwrap();
        let mut segs = GsoOutput::new();
        gso::segment(&frame, &layout, &GsoParams::new(gso_type(&sp), mss as u16), &mut segs).unwrap();
        let original: Vec<Vec<u8>> = segs.frames().map(<[u8]>::to_vec).collect();
        let mut e = GroEngine::new(GroConfig::default());
        e.receive_batch(original.iter().map(|f| (f.as_slice(), OffloadMeta::default())), 0);
        let mut again: Vec<Vec<u8>> = vec![];
        while let Some(p) = e.pop_output() {
            if p.segments == 1 {
                again.push(p.frame);
                continue;
            }
            let l = sluice_wire::parse(&p.frame).unwrap();
            let params = GsoParams::new(p.meta.gso_type(), p.meta.segment_size());
            let mut o = GsoOutput::new();
            gso::segment(&p.frame, &l, &params, &mut o).unwrap();
            again.extend(o.frames().map(<[u8]>::to_vec));
        }
        prop_assert_eq!(again.len(), original.len());
        prop_assert!(again == original, "segments differ");
    }

    #[test]
    fn memory_stays_bounded_under_floods(
        seeds in proptest::collection::vec((any::<u16>(), any::<u8>(), 0usize..1500, any::<u8>()), 1..400),
        max_flows in 1usize..16,
    ) {
        let cfg = GroConfig { max_flows, max_held_packets: 32, udp: true, ..GroConfig::default() };
        let mut e = GroEngine::new(cfg);
        let mut biggest = 0usize;
        for chunk in seeds.chunks(37) {
            let frames: Vec<Vec<u8>> = chunk
                .iter()
                .map(|&(port, kind, len, noise)| {
                    let mut s = if kind & 1 == 0 { Seg::tcp4(u32::from(port) * 7, len) } else { Seg::tcp6(0, len) };
                    s.sport = port % 64;
                    s.udp = kind & 2 != 0;
                    let mut f = s.build();
                    if kind & 4 != 0 && !f.is_empty() {
                        let i = usize::from(noise) % f.len();
                        f[i] ^= noise | 1;
                    }
                    if kind & 8 != 0 {
                        f.truncate(usize::from(noise));
                    }
                    biggest = biggest.max(f.len());
                    f
                })
                .collect();
            for f in &frames {
                e.receive(f, OffloadMeta::default(), 0);
                prop_assert!(e.held_flows() <= max_flows);
                prop_assert!(e.held_segments() <= 32);
            }
            e.end_batch(0);
            e.drain_output(|_| {});
            // Held buffers plus a bounded pool, each at most one 64 KiB buffer.
            let bound = (max_flows + (2 * max_flows).max(64)) * (66_048 + biggest);
            prop_assert!(e.buffer_bytes() <= bound, "{} > {}", e.buffer_bytes(), bound);
        }
    }

    #[test]
    fn burst_mode_equals_copying_mode(
        flows in proptest::collection::vec(seg_strategy(), 1..4),
        order in proptest::collection::vec(any::<u8>(), 0..64),
        flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..4),
        good in any::<bool>(),
    ) {
        // Interleave the segments of a few random flows, break some bytes, then compare.
        let mut streams: Vec<Vec<Vec<u8>>> = flows
            .iter()
            .enumerate()
            .map(|(i, (sp, mss))| {
                let mut sp = sp.clone();
                sp.sport = 1000 + i as u16;
                let frame = sp.build();
                let layout = sluice_wire::parse(&frame).unwrap();
                let mut out = GsoOutput::new();
                gso::segment(&frame, &layout, &GsoParams::new(gso_type(&sp), *mss as u16), &mut out)
                    .unwrap();
                {
                    let mut v: Vec<Vec<u8>> = out.frames().map(<[u8]>::to_vec).collect();
                    v.reverse();
                    v
                }
            })
            .collect();
        let mut frames = interleave(&mut streams, &order, 64);
        break_bytes(&mut frames, &flips, 0);
        let metas: Vec<OffloadMeta> = frames
            .iter()
            .map(|f| match sluice_wire::parse(f) {
                Ok(l) if good => {
                    let mut m = OffloadMeta::from_layout(&l);
                    m.rx_checksum_unnecessary(true);
                    m
                }
                _ => OffloadMeta::default(),
            })
            .collect();
        burst_equals_copying(&frames, &metas, GroConfig::default())?;
    }
}

proptest! {
    /// The same interleaved, partly broken segments, as Ethernet frames to an Ethernet engine
    /// and as L3 packets (the frames without their Ethernet header) to an L3 engine, in both
    /// modes: the same packets, byte for byte behind the Ethernet header, with the same
    /// segment counts, GSO metadata and checksum states, and the same counters. The Ethernet
    /// engine's decisions are checked against the kernel elsewhere; the L3 one skips the lanes
    /// that read Ethernet shapes at fixed offsets but has the header-compare lane, which must
    /// decide as the general path.
    #[test]
    fn l3_engine_decides_as_the_ethernet_engine(
        flows in proptest::collection::vec(seg_strategy(), 1..4),
        order in proptest::collection::vec(any::<u8>(), 0..64),
        flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..4),
        good in any::<bool>(),
        long in any::<bool>(),
    ) {
        let mut streams: Vec<Vec<Vec<u8>>> = flows
            .iter()
            .enumerate()
            .map(|(i, (sp, mss))| {
                let mut sp = sp.clone();
                sp.vlans.clear(); // (no tags on an L3 packet)
                sp.sport = 1000 + i as u16;
                if long {
                    // Full-size segments only, no PSH: merging runs into the 64 KiB limit.
                    sp.flags &= !PSH;
                    sp.payload = payload_at(sp.seq, 60_000 / mss * mss);
                }
                // Two super-packets of the flow, the second continuing the first (sequence and
                // IPv4 IDs), so that merging reaches the 64 KiB limit.
                let mut v: Vec<Vec<u8>> = vec![];
                for _ in 0..2 {
                    let frame = sp.build();
                    let layout = sluice_wire::parse(&frame).unwrap();
                    let mut out = GsoOutput::new();
                    let params = GsoParams::new(gso_type(&sp), *mss as u16);
                    gso::segment(&frame, &layout, &params, &mut out).unwrap();
                    v.extend(out.frames().map(<[u8]>::to_vec));
                    let n = sp.payload.len();
                    sp.id = sp.id.wrapping_add(n.div_ceil(*mss) as u16);
                    sp.seq = sp.seq.wrapping_add(n as u32);
                    sp.payload = payload_at(sp.seq, n);
                }
                v.reverse();
                v
            })
            .collect();
        let mut frames = interleave(&mut streams, &order, 200);
        // Broken bytes behind the Ethernet header only (the L3 engine never sees it).
        break_bytes(&mut frames, &flips, ETH);
        let packets: Vec<Vec<u8>> = frames.iter().map(|f| f[ETH..].to_vec()).collect();
        let meta_of = |f: &[u8], cfg: &ParseConfig| match sluice_wire::parse_with(f, cfg) {
            Ok(l) if good => {
                let mut m = OffloadMeta::from_layout(&l);
                m.rx_checksum_unnecessary(true);
                m
            }
            _ => OffloadMeta::default(),
        };
        let eth_metas: Vec<OffloadMeta> =
            frames.iter().map(|f| meta_of(f, &ParseConfig::DEFAULT)).collect();
        let l3_metas: Vec<OffloadMeta> = packets.iter().map(|p| meta_of(p, &ParseConfig::L3)).collect();
        let l3_cfg = GroConfig { parse: ParseConfig::L3, ..GroConfig::default() };
        let run = |cfg: GroConfig, input: &[Vec<u8>], metas: &[OffloadMeta], skip: usize| {
            let mut e = GroEngine::new(cfg);
            e.receive_batch(input.iter().map(Vec::as_slice).zip(metas.iter().copied()), 0);
            let mut out = vec![];
            while let Some(p) = e.pop_output() {
                let states: Vec<CsumStatus> = Slot::ALL.iter().map(|&s| p.meta.status(s)).collect();
                out.push((
                    p.frame[skip..].to_vec(),
                    p.segments,
                    p.meta.gso_type(),
                    p.meta.segment_size(),
                    states,
                ));
            }
            let s = e.stats();
            (out, (s.frames_in, s.packets_out, s.merged_segments, s.merged_packets, s.bad_checksum))
        };
        let (want, want_stats) = run(GroConfig::default(), &frames, &eth_metas, ETH);
        let (got, got_stats) = run(l3_cfg, &packets, &l3_metas, 0);
        prop_assert_eq!(got.len(), want.len());
        prop_assert!(got == want, "the L3 engine decided otherwise");
        prop_assert_eq!(got_stats, want_stats);
        burst_equals_copying(&packets, &l3_metas, l3_cfg)?;
    }
}

/// Up to `max` frames taken from the ends of `streams` (each reversed: its next frame last),
/// the stream of each pick chosen by `order` among those not empty.
fn interleave(streams: &mut [Vec<Vec<u8>>], order: &[u8], max: usize) -> Vec<Vec<u8>> {
    let mut frames = vec![];
    let mut k = 0;
    while frames.len() < max && streams.iter().any(|s| !s.is_empty()) {
        let live: Vec<usize> = (0..streams.len())
            .filter(|&i| !streams[i].is_empty())
            .collect();
        let pick = live[order.get(k).copied().unwrap_or(0) as usize % live.len()];
        k += 1;
        if let Some(f) = streams[pick].pop() {
            frames.push(f);
        }
    }
    frames
}

/// Flips bits of `frames` (at least one bit per flip), at byte `from` or later.
fn break_bytes(frames: &mut [Vec<u8>], flips: &[(u16, u8)], from: usize) {
    for &(at, x) in flips {
        let n = frames.len();
        let f = &mut frames[usize::from(at) % n];
        let i = from + usize::from(at) % (f.len() - from);
        f[i] ^= x | 1;
    }
}

/// One plain TCP flow of [`simple_bursts_equal_copying_mode`]: version, TCP timestamps, MSS,
/// segment count, first IPv4 ID, fixed IDs, and per-segment disturbances.
type PlainFlow = (bool, bool, usize, usize, u16, bool, Vec<u8>);

fn plain_flow() -> impl Strategy<Value = PlainFlow> {
    (
        any::<bool>(),
        any::<bool>(),
        64usize..1449,
        1usize..14,
        any::<u16>(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 14),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Bursts of plain TCP segments, the shape burst mode's simple lane takes whole: mostly
    /// in-order full-size segments of a few interleaved flows, with occasional PSH/FIN, short
    /// segments, sequence gaps, duplicates, TTL or window changes, ID jumps and repeats, unverified
    /// checksums and tight flow/segment budgets, so that the lane both completes and gives up
    /// mid-burst. Burst mode must give exactly the copying mode's packets.
    #[test]
    fn simple_bursts_equal_copying_mode(
        flows in proptest::collection::vec(plain_flow(), 1..6),
        order in proptest::collection::vec(any::<u8>(), 0..64),
        max_flows in 1usize..12,
        max_held in 8usize..96,
    ) {
        let mut streams: Vec<Vec<(Vec<u8>, bool)>> = flows
            .iter()
            .enumerate()
            .map(|(i, (v6, ts, mss, n, id0, fixed, noise))| {
                let mut seq = 7_000u32.wrapping_mul(i as u32 + 1);
                let mut out = Vec::new();
                for j in 0..*n {
                    let d = noise[j % noise.len()];
                    let len = if d % 89 == 1 { mss / 2 + 1 } else { *mss };
                    let mut s = if *v6 { Seg::tcp6(seq, len) } else { Seg::tcp4(seq, len) };
                    s.sport = 1000 + i as u16;
                    // Header words that are the same in every segment of a flow but differ
                    // between flows (the merged checksum covers them).
                    s.ack = u32::from_be_bytes([noise[0], noise[1], noise[2], noise[3]]);
                    s.urg = u16::from_be_bytes([noise[4], noise[5]]);
                    s.window = u16::from_be_bytes([noise[6], 1]);
                    s.id = if *fixed { *id0 } else { id0.wrapping_add(j as u16) };
                    if *ts {
                        s.options = vec![1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9];
                    }
                    match d % 127 {
                        2 => s.flags |= PSH,
                        3 => s.flags |= FIN,
                        4 => s.ttl = 63,
                        5 => s.window ^= 0x40,
                        6 => s.id = s.id.wrapping_add(3),
                        7 => s.seq = s.seq.wrapping_add(1),
                        8 => s.id = *id0, // back to the first's ID mid-flow
                        _ => {}
                    }
                    if j + 1 == *n && d % 3 == 0 {
                        s.flags |= PSH;
                    }
                    let good = d % 113 != 8;
                    out.push((s.build(), good));
                    if d % 109 == 9 {
                        out.push((s.build(), good)); // a duplicate
                    }
                    seq = seq.wrapping_add(len as u32);
                }
                out.reverse();
                out
            })
            .collect();
        let mut frames: Vec<Vec<u8>> = vec![];
        let mut goods: Vec<bool> = vec![];
        let mut k = 0;
        while frames.len() < 64 && streams.iter().any(|s| !s.is_empty()) {
            let live: Vec<usize> = (0..streams.len()).filter(|&i| !streams[i].is_empty()).collect();
            let pick = live[order.get(k).copied().unwrap_or(0) as usize % live.len()];
            k += 1;
            if let Some((f, g)) = streams[pick].pop() {
                frames.push(f);
                goods.push(g);
            }
        }
        let metas: Vec<OffloadMeta> = frames
            .iter()
            .zip(&goods)
            .map(|(f, &good)| {
                let mut m = OffloadMeta::from_layout(&sluice_wire::parse(f).unwrap());
                if good {
                    m.rx_checksum_unnecessary(false);
                }
                m
            })
            .collect();
        let cfg = GroConfig { max_flows, max_held_packets: max_held, ..GroConfig::default() };
        burst_equals_copying(&frames, &metas, cfg)?;
    }
}

/// Feeds `frames` to a copying engine (one batch) and, twice (to exercise the reuse of the
/// output), to a burst-mode engine: the burst packets, linearized, must be the copying
/// engine's, and the counters must agree (the burst engine's count two bursts).
fn burst_equals_copying(
    frames: &[Vec<u8>],
    metas: &[OffloadMeta],
    cfg: GroConfig,
) -> Result<(), TestCaseError> {
    let mut copying = GroEngine::new(cfg);
    copying.receive_batch(
        frames.iter().map(Vec::as_slice).zip(metas.iter().copied()),
        0,
    );
    let mut want = vec![];
    while let Some(p) = copying.pop_output() {
        want.push((p.frame, p.meta, p.segments));
    }
    let mut burst_engine = GroEngine::new(cfg);
    let mut out = GroBurst::new();
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    for _ in 0..2 {
        burst_engine.coalesce_burst(&refs, metas, &mut out);
        let got: Vec<_> = out
            .packets()
            .iter()
            .map(|p| {
                let mut f = vec![];
                out.linearize(p, &refs, &mut f);
                (f, p.meta, p.segments)
            })
            .collect();
        prop_assert_eq!(got.len(), want.len());
        prop_assert!(got == want, "burst mode differs from copying mode");
    }
    let (a, b) = (copying.stats(), burst_engine.stats());
    prop_assert_eq!(2 * a.frames_in, b.frames_in);
    prop_assert_eq!(2 * a.packets_out, b.packets_out);
    prop_assert_eq!(2 * a.merged_segments, b.merged_segments);
    prop_assert_eq!(2 * a.merged_packets, b.merged_packets);
    prop_assert_eq!(2 * a.flushed.flags, b.flushed.flags);
    prop_assert_eq!(2 * a.flushed.size, b.flushed.size);
    Ok(())
}

/// The simple lane is really taken for a burst of plain in-order segments (4 flows × 8, one of
/// them ending on PSH and a short segment) and really given up when one frame is not such a
/// segment (a UDP datagram in the middle); both give exactly the copying mode's packets.
/// Fresh metadata of each frame with its checksums verified by the device.
fn device_verified(frames: &[Vec<u8>]) -> Vec<OffloadMeta> {
    frames
        .iter()
        .map(|f| {
            let mut m = OffloadMeta::from_layout(&sluice_wire::parse(f).unwrap());
            m.rx_checksum_unnecessary(false);
            m
        })
        .collect()
}

#[test]
fn the_simple_lane_takes_plain_bursts_and_gives_up_on_others() {
    let build = |udp_at: Option<usize>| {
        let mut frames = vec![];
        for j in 0..8u32 {
            for f in 0..4u16 {
                let len = if f == 3 && j == 7 { 700 } else { 1448 };
                let mut s = Seg::tcp4(1000 + j * 1448, len);
                s.sport = 1000 + f;
                s.id = 100 + j as u16;
                if f == 2 && j == 7 {
                    s.flags |= PSH;
                }
                frames.push(s.build());
                if udp_at == Some(frames.len()) {
                    let mut u = Seg::tcp4(0, 100);
                    u.udp = true;
                    frames.push(u.build());
                }
            }
        }
        let metas = device_verified(&frames);
        (frames, metas)
    };
    for (udp_at, simple) in [(None, 1), (Some(13), 0)] {
        let (frames, metas) = build(udp_at);
        burst_equals_copying(&frames, &metas, GroConfig::default()).unwrap();
        let mut e = GroEngine::new(GroConfig::default());
        let mut out = GroBurst::new();
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        e.coalesce_burst(&refs, &metas, &mut out);
        assert_eq!(e.stats().simple_bursts, simple, "udp at {udp_at:?}");
        let segments: Vec<u16> = out.packets().iter().map(|p| p.segments).collect();
        if udp_at.is_none() {
            // PSH and the short segment end their packets early, in that order.
            assert_eq!(segments, vec![8, 8, 8, 8]);
            assert_eq!(e.stats().flushed.flags, 1);
            assert_eq!(e.stats().flushed.size, 1);
        }
    }
}

/// The IPv4 ID rule in the simple lane: IDs may stay fixed from the second segment on, or
/// increment; an incrementing flow that goes back to its first ID, a fixed flow that starts
/// incrementing, and a jump all end the packet exactly as the general pass does.
#[test]
fn the_simple_lane_keeps_the_id_rule() {
    let cases: [&[u16]; 8] = [
        &[100, 101, 102, 103, 104],
        &[100, 100, 100, 100, 100],
        &[100, 101, 102, 100, 101],
        &[100, 101, 102, 100],
        &[100, 101, 100, 100],
        &[100, 100, 101, 102, 103],
        &[100, 100, 101],
        &[100, 101, 105, 106, 107],
    ];
    for ids in cases {
        let frames: Vec<Vec<u8>> = ids
            .iter()
            .enumerate()
            .map(|(j, &id)| {
                let mut s = Seg::tcp4(1000 + j as u32 * 1000, 1000);
                s.id = id;
                s.build()
            })
            .collect();
        let metas = device_verified(&frames);
        burst_equals_copying(&frames, &metas, GroConfig::default())
            .unwrap_or_else(|e| panic!("IDs {ids:?}: {e}"));
    }
}
