//! GSO properties: for valid super-packets of every kind (TCPv4/v6 with options and extension
//! headers, USO, UFO, VXLAN/Geneve/GRE tunnels, VLAN stacks), every emitted checksum verifies,
//! reassembling the segments gives the original payload, the fields GSO must not touch are
//! unchanged, the per-segment fields follow Linux's rules, contiguous and zero-copy output agree,
//! and full and cancellation outer checksums give the same bytes.

#[path = "gso_build.rs"]
mod build;

use build::{build, pattern, Ip, Seed, Spec, Tun, L4};
use proptest::prelude::*;
use sluice_offload::gso::{
    segment, segment_partial, segment_zero_copy, CsumMode, GsoError, GsoOutput, GsoParams,
    OuterCsum, ZeroCopyOutput,
};
use sluice_packet::verify::{verify_frame, Verdict};
use sluice_packet::{CsumStatus, GsoType};
use sluice_wire::{parse, Layout};

fn gso_type(spec: &Spec, ufo: bool) -> GsoType {
    let inner_v6 = spec.tunnel.as_ref().map_or(spec.ip.v6, |t| t.2.v6);
    match spec.l4 {
        L4::Tcp { .. } if inner_v6 => GsoType::TcpV6,
        L4::Tcp { .. } => GsoType::TcpV4,
        L4::Udp if ufo => GsoType::Udp,
        L4::Udp => GsoType::UdpL4,
    }
}

fn run(frame: &[u8], params: &GsoParams) -> Result<Vec<Vec<u8>>, GsoError> {
    let layout = parse(frame).expect("input parses");
    let mut out = GsoOutput::new();
    segment(frame, &layout, params, &mut out)?;
    Ok(out.frames().map(<[u8]>::to_vec).collect())
}

fn good_or_absent(v: Verdict, absent: bool) -> bool {
    v == Verdict::Good || (v == Verdict::None && absent)
}

/// Checks a segmentation of `spec` (non-UFO) against every property.
fn check(spec: &Spec, mss: u16, params: &GsoParams) {
    let (frame, _) = build(spec, Seed::Garbage);
    let segs = run(&frame, params).expect("segmentation succeeds");
    let in_layout = parse(&frame).unwrap();
    let inner_in = *in_layout.innermost();
    let payload_at = inner_in.payload.unwrap();
    let n = segs.len();
    let expect_n = spec.payload.len().div_ceil(usize::from(mss)).max(1);
    assert_eq!(n, expect_n, "segment count");
    let mut data = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        let l: Layout = parse(s).expect("segment parses");
        let v = verify_frame(s, &l);
        let h = *l.innermost();
        // Every checksum verifies.
        if l.outer.l3_kind == Some(sluice_wire::L3Kind::Ipv4) {
            assert_eq!(v.ip, Verdict::Good, "outer IP csum seg {i}");
        }
        if l.tunnel.is_some() {
            if h.l3_kind == Some(sluice_wire::L3Kind::Ipv4) {
                assert_eq!(v.inner_ip, Verdict::Good, "inner IP csum seg {i}");
            }
            assert!(
                good_or_absent(v.inner_l4, v.inner_l4_absent),
                "inner L4 seg {i}: {v:?}"
            );
            assert!(good_or_absent(v.l4, v.l4_absent), "outer L4 seg {i}: {v:?}");
        } else {
            assert_eq!(v.l4, Verdict::Good, "L4 csum seg {i}: {v:?}");
        }
        // Headers other than the fixed fields are unchanged: same prefix length, and the bytes
        // equal the input's once the fields GSO owns are masked.
        let pl = h.payload.unwrap();
        assert_eq!(pl, payload_at, "header length");
        let mut a = s[..pl].to_vec();
        let mut b = frame[..pl].to_vec();
        mask_fixed(&mut a, &l);
        mask_fixed(&mut b, &in_layout);
        assert_eq!(a, b, "unfixed header bytes seg {i}");
        // Per-segment fields.
        let seg_pl = &s[pl..];
        assert!(seg_pl.len() <= usize::from(mss));
        let l4 = h.l4.unwrap();
        if let L4::Tcp { flags, seq, .. } = spec.l4 {
            let got_seq = u32::from_be_bytes(s[l4 + 4..l4 + 8].try_into().unwrap());
            assert_eq!(got_seq, seq.wrapping_add((i * usize::from(mss)) as u32));
            let f = s[l4 + 13];
            let mut want = flags;
            if i + 1 != n {
                want &= !0x09;
            }
            if i != 0 {
                want &= !0x80;
            }
            assert_eq!(f, want, "flags seg {i}");
        }
        for (hdrs, ip) in [(l.outer, spec.ip), (h, inner_ip(spec))] {
            if let (Some(o), false) = (hdrs.l3, ip.v6) {
                let id = u16::from_be_bytes([s[o + 4], s[o + 5]]);
                let step = if params.fixed_id { 0 } else { i as u16 };
                assert_eq!(id, ip.id.wrapping_add(step), "IPv4 ID seg {i}");
            }
        }
        if params.max_frame_len != 0 {
            assert!(s.len() <= params.max_frame_len);
        }
        data.extend_from_slice(seg_pl);
    }
    assert_eq!(data, spec.payload, "reassembled payload");

    // Zero-copy gives the same bytes.
    let mut zc = ZeroCopyOutput::new();
    segment_zero_copy(&frame, &in_layout, params, &mut zc).unwrap();
    assert_eq!(zc.len(), n);
    for (i, s) in segs.iter().enumerate() {
        let [h, p] = zc.parts(i, &frame).unwrap();
        assert_eq!([h, p].concat(), *s, "zero-copy seg {i}");
    }
}

fn inner_ip(spec: &Spec) -> Ip {
    spec.tunnel.as_ref().map_or(spec.ip, |t| t.2)
}

/// Zeroes the fields software GSO rewrites: IP lengths, IDs, checksums; UDP lengths and
/// checksums; TCP sequence, flags and checksum.
fn mask_fixed(b: &mut [u8], l: &Layout) {
    let mut stacks = vec![l.outer];
    if let Some(i) = l.inner {
        stacks.push(i);
    }
    for h in stacks {
        if let Some(o) = h.l3 {
            if h.l3_kind == Some(sluice_wire::L3Kind::Ipv4) {
                for k in [2, 3, 4, 5, 10, 11] {
                    b[o + k] = 0;
                }
            } else {
                b[o + 4] = 0;
                b[o + 5] = 0;
            }
        }
        if let (Some(o), Some(p)) = (h.l4, h.l4_proto) {
            let ks: &[usize] = match p {
                6 => &[4, 5, 6, 7, 13, 16, 17],
                17 => &[4, 5, 6, 7],
                _ => &[],
            };
            for &k in ks {
                if o + k < b.len() {
                    b[o + k] = 0;
                }
            }
        }
    }
    if let Some(t) = l.tunnel {
        if t.kind == sluice_wire::TunnelKind::Gre && b[t.offset] & 0x80 != 0 {
            b[t.offset + 4] = 0;
            b[t.offset + 5] = 0;
        }
    }
}

fn tcp(flags: u8) -> L4 {
    L4::Tcp {
        flags,
        opt_len: 12,
        seq: 0xffff_f000,
    }
}

#[test]
fn tcpv4_basic() {
    let spec = Spec {
        vlans: vec![],
        ip: Ip::V4,
        tunnel: None,
        l4: tcp(0x18 | 0x01 | 0x80),
        payload: pattern(5000, 1),
    };
    check(&spec, 1448, &GsoParams::new(GsoType::TcpV4, 1448));
}

#[test]
fn tcpv6_ext_qinq() {
    let spec = Spec {
        vlans: vec![0x88a8, 0x8100],
        ip: Ip { ext: 2, ..Ip::V6 },
        tunnel: None,
        l4: tcp(0x10 | 0x20 | 0x04),
        payload: pattern(3001, 2),
    };
    check(&spec, 1000, &GsoParams::new(GsoType::TcpV6, 1000));
}

#[test]
fn tcp_single_segment_is_unchanged_but_checksummed() {
    let spec = Spec {
        vlans: vec![],
        ip: Ip::V4,
        tunnel: None,
        l4: tcp(0x19),
        payload: pattern(100, 3),
    };
    let (frame, _) = build(&spec, Seed::Garbage);
    let segs = run(&frame, &GsoParams::new(GsoType::TcpV4, 1448)).unwrap();
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].len(), frame.len());
    // FIN|PSH stay on the only (= last) segment.
    let l4 = parse(&segs[0]).unwrap().outer.l4.unwrap();
    assert_eq!(segs[0][l4 + 13], 0x19);
}

#[test]
fn outer_full_and_lco_give_the_same_bytes() {
    for tun in [
        Tun::Vxlan { csum: true },
        Tun::Geneve {
            csum: true,
            opt_words: 3,
        },
        Tun::Gre {
            csum: true,
            key: true,
            seq: true,
        },
    ] {
        for ov6 in [false, true] {
            let spec = Spec {
                vlans: vec![0x8100],
                ip: if ov6 { Ip::V6 } else { Ip::V4 },
                tunnel: Some((tun, vec![0x8100], Ip::V4)),
                l4: tcp(0x18),
                payload: pattern(4000, 4),
            };
            let (frame, _) = build(&spec, Seed::Garbage);
            let mut p = GsoParams::new(GsoType::TcpV4, 1400);
            p.outer_csum = OuterCsum::Full;
            let full = run(&frame, &p).unwrap();
            p.outer_csum = OuterCsum::Lco;
            let lco = run(&frame, &p).unwrap();
            assert_eq!(full, lco, "{tun:?} v6={ov6}");
            check(&spec, 1400, &p);
        }
    }
}

#[test]
fn partial_csum_leaves_pseudo_sum() {
    let spec = Spec {
        vlans: vec![],
        ip: Ip::V4,
        tunnel: None,
        l4: tcp(0x10),
        payload: pattern(3000, 5),
    };
    let (frame, _) = build(&spec, Seed::Garbage);
    let layout = parse(&frame).unwrap();
    let mut p = GsoParams::new(GsoType::TcpV4, 1000);
    p.l4_csum = CsumMode::Partial;
    let mut out = GsoOutput::new();
    segment(&frame, &layout, &p, &mut out).unwrap();
    for i in 0..out.len() {
        let s = out.segment(i).unwrap();
        let f = out.frame(i).unwrap();
        assert_eq!(s.meta.l4_csum, CsumStatus::Partial);
        let start = usize::from(s.meta.csum_start);
        let at = start + usize::from(s.meta.csum_offset);
        let want = build::pseudo(f, 14, false, 6, f.len() - start);
        assert_eq!(u16::from_be_bytes([f[at], f[at + 1]]), want);
    }
}

/// A layout that does not describe the frame (here the IP header placed after the TCP header)
/// makes a header write fall outside the segment header: that is an error and nothing is
/// appended, where it used to be a silently dropped write and a wrong segment.
#[test]
fn a_misplaced_header_is_an_error_not_a_dropped_write() {
    let spec = Spec {
        vlans: vec![],
        ip: Ip::V4,
        tunnel: None,
        l4: tcp(0x10),
        payload: pattern(3000, 3),
    };
    let (frame, _) = build(&spec, Seed::Garbage);
    let mut layout = parse(&frame).expect("input parses");
    let l4 = layout.outer.l4.expect("TCP");
    layout.outer.l3 = Some(l4 + 1);
    let params = GsoParams::new(GsoType::TcpV4, 1000);

    let mut out = GsoOutput::new();
    let r = segment(&frame, &layout, &params, &mut out);
    assert!(
        matches!(r, Err(GsoError::HeaderWrite(e)) if e.at == l4 + 1),
        "{r:?}"
    );
    assert_eq!(r.map_err(|e| e.kind()), Err("gso_header_write"));
    assert!(out.is_empty() && out.arena().is_empty());

    let mut zc = ZeroCopyOutput::new();
    let r = segment_zero_copy(&frame, &layout, &params, &mut zc);
    assert!(matches!(r, Err(GsoError::HeaderWrite(_))), "{r:?}");
    assert!(zc.is_empty() && zc.header_arena().is_empty());
}

#[test]
fn limits_are_typed_errors() {
    let spec = Spec {
        vlans: vec![],
        ip: Ip::V4,
        tunnel: None,
        l4: L4::Udp,
        payload: pattern(200 * 10, 6),
    };
    let (frame, _) = build(&spec, Seed::Garbage);
    assert_eq!(
        run(&frame, &GsoParams::new(GsoType::UdpL4, 0)),
        Err(GsoError::ZeroSegmentSize)
    );
    assert!(matches!(
        run(&frame, &GsoParams::new(GsoType::UdpL4, 10)),
        Err(GsoError::TooManySegments {
            segments: 200,
            max: 128
        })
    ));
    assert!(matches!(
        run(&frame, &GsoParams::new(GsoType::TcpV4, 100)),
        Err(GsoError::TypeMismatch { .. })
    ));
    assert!(matches!(
        run(&frame, &GsoParams::new(GsoType::Udp, 100)),
        Err(GsoError::UnalignedFragment { .. })
    ));
    let mut p = GsoParams::new(GsoType::UdpL4, 1000);
    p.max_frame_len = 1000;
    assert!(matches!(
        run(&frame, &p),
        Err(GsoError::FrameTooLong { .. })
    ));
}

#[test]
fn partial_segmentation_splits_at_the_largest_multiple() {
    let spec = Spec {
        vlans: vec![],
        ip: Ip::V4,
        tunnel: Some((Tun::Vxlan { csum: true }, vec![], Ip::V4)),
        l4: tcp(0x19),
        payload: pattern(1000 * 5 + 300, 7),
    };
    let (frame, _) = build(&spec, Seed::Garbage);
    let layout = parse(&frame).unwrap();
    let p = GsoParams::new(GsoType::TcpV4, 1000);
    let mut out = GsoOutput::new();
    assert_eq!(segment_partial(&frame, &layout, &p, &mut out), Ok(2));
    let gso = out.segment(0).unwrap();
    assert_eq!(gso.meta.gso_type, GsoType::TcpV4);
    assert_eq!(gso.meta.gso_size, 1000);
    let g = out.frame(0).unwrap();
    let gl = parse(g).unwrap();
    let tcp_at = gl.innermost().l4.unwrap();
    assert_eq!(g[tcp_at + 13], 0x10, "FIN/PSH only on the last segment");
    assert_eq!(
        gl.innermost().l3_end.unwrap() - gl.innermost().payload.unwrap(),
        5000
    );
    let last = out.frame(1).unwrap();
    let full = run(&frame, &p).unwrap();
    assert_eq!(last, &full[5][..]);
    // One whole segment: no GSO packet at all.
    let spec1 = Spec {
        payload: pattern(1300, 7),
        ..spec
    };
    let (frame1, _) = build(&spec1, Seed::Garbage);
    let mut out = GsoOutput::new();
    let n = segment_partial(&frame1, &parse(&frame1).unwrap(), &p, &mut out).unwrap();
    assert_eq!(n, 2);
    assert_eq!(out.segment(0).unwrap().meta.gso_type, GsoType::None);
}

#[test]
fn partial_per_segment_headers_match_a_segment() {
    // GSO_PARTIAL style: the GSO packet's headers are segment 0's, the outer UDP checksum too
    // (cancellation makes it equal for every full-size segment), the inner TCP checksum is the
    // per-segment pseudo-header sum.
    for ov6 in [false, true] {
        let spec = Spec {
            vlans: vec![0x8100],
            ip: if ov6 { Ip::V6 } else { Ip::V4 },
            tunnel: Some((Tun::Vxlan { csum: true }, vec![], Ip::V4)),
            l4: tcp(0x18),
            payload: pattern(1000 * 4 + 10, 11),
        };
        let (frame, _) = build(&spec, Seed::Garbage);
        let layout = parse(&frame).unwrap();
        let mut p = GsoParams::new(GsoType::TcpV4, 1000);
        p.outer_csum = OuterCsum::Full;
        let full = run(&frame, &p).unwrap();
        p.partial_headers = sluice_offload::gso::PartialHeaders::PerSegment;
        let mut out = GsoOutput::new();
        assert_eq!(segment_partial(&frame, &layout, &p, &mut out), Ok(2));
        let g = out.frame(0).unwrap();
        let l = parse(&full[0]).unwrap();
        let pl = l.innermost().payload.unwrap();
        let tcp_csum = l.innermost().l4.unwrap() + 16;
        let mut a = g[..pl].to_vec();
        let mut b = full[0][..pl].to_vec();
        // Flags: the GSO packet keeps PSH off (a segment follows); seg 0 too.
        a[tcp_csum..tcp_csum + 2].fill(0);
        b[tcp_csum..tcp_csum + 2].fill(0);
        assert_eq!(
            a, b,
            "headers of the GSO packet = segment 0's (outer v6={ov6})"
        );
        assert_eq!(g.len(), pl + 4000);
        let udp = l.outer.l4.unwrap() + 6;
        for s in &full[..4] {
            assert_eq!(
                s[udp..udp + 2],
                full[0][udp..udp + 2],
                "same outer checksum"
            );
        }
        assert_eq!(out.frame(1).unwrap(), &full[4][..]);
    }
}

// ---- UFO ----

fn check_ufo(spec: &Spec, size: u16) {
    let (frame, _) = build(spec, Seed::Garbage);
    let mut p = GsoParams::new(GsoType::Udp, size);
    p.ipv6_frag_id = Some(0xabcd_0123);
    let segs = run(&frame, &p).unwrap();
    let udp_len = 8 + spec.payload.len();
    let n = udp_len.div_ceil(usize::from(size));
    assert_eq!(segs.len(), n.max(1));
    let mut dgram = Vec::new();
    let l3 = 14 + 4 * spec.vlans.len();
    for (i, s) in segs.iter().enumerate() {
        let (l, _) = sluice_wire::parse_partial(s, &sluice_wire::ParseConfig::DEFAULT);
        let v = verify_frame(s, &l);
        let off;
        let body;
        if spec.ip.v6 {
            // Fragment header right after the IPv6 header (no extension headers here).
            assert_eq!(s[l3 + 6], 44);
            let fh = l3 + 40;
            assert_eq!(s[fh], 17);
            let fo = u16::from_be_bytes([s[fh + 2], s[fh + 3]]);
            off = usize::from(fo & 0xfff8);
            assert_eq!(fo & 1 == 1, i + 1 < n);
            assert_eq!(&s[fh + 4..fh + 8], &0xabcd_0123u32.to_be_bytes());
            body = &s[fh + 8..];
            assert_eq!(
                usize::from(u16::from_be_bytes([s[l3 + 4], s[l3 + 5]])),
                s.len() - l3 - 40
            );
        } else {
            assert_eq!(v.ip, Verdict::Good);
            let fo = u16::from_be_bytes([s[l3 + 6], s[l3 + 7]]);
            off = usize::from(fo & 0x1fff) * 8;
            assert_eq!(fo & 0x2000 != 0, i + 1 < n);
            assert_eq!(fo & 0x4000, 0, "DF cleared");
            assert_eq!(u16::from_be_bytes([s[l3 + 4], s[l3 + 5]]), spec.ip.id);
            body = &s[l3 + 20..];
        }
        assert_eq!(off, dgram.len());
        assert!(body.len() <= usize::from(size));
        dgram.extend_from_slice(body);
    }
    assert_eq!(dgram.len(), udp_len);
    assert_eq!(&dgram[8..], &spec.payload[..]);
    // The UDP checksum over the reassembled datagram verifies.
    let mut whole = frame.clone();
    whole[l3 + if spec.ip.v6 { 40 } else { 20 }..].copy_from_slice(&dgram);
    let l = parse(&whole).unwrap();
    assert_eq!(verify_frame(&whole, &l).l4, Verdict::Good);
}

#[test]
fn ufo_v4_v6() {
    for v6 in [false, true] {
        let spec = Spec {
            vlans: vec![0x8100],
            ip: if v6 { Ip::V6 } else { Ip::V4 },
            tunnel: None,
            l4: L4::Udp,
            payload: pattern(3333, 8),
        };
        check_ufo(&spec, 1280);
    }
}

// ---- property tests over every kind ----

fn arb_ip() -> impl Strategy<Value = Ip> {
    (any::<bool>(), 0usize..3, any::<u16>(), any::<bool>()).prop_map(|(v6, ext, id, df)| {
        if v6 {
            Ip {
                v6,
                ext,
                id: 0,
                df: false,
            }
        } else {
            Ip {
                v6,
                ext: ext * 4,
                id,
                df,
            }
        }
    })
}

fn arb_vlans() -> impl Strategy<Value = Vec<u16>> {
    prop::collection::vec(prop::sample::select(vec![0x8100u16, 0x88a8, 0x9100]), 0..3)
}

fn arb_tun() -> impl Strategy<Value = Tun> {
    prop_oneof![
        any::<bool>().prop_map(|csum| Tun::Vxlan { csum }),
        (any::<bool>(), 0usize..3).prop_map(|(csum, opt_words)| Tun::Geneve { csum, opt_words }),
        (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(csum, key, seq)| Tun::Gre {
            csum,
            key,
            seq
        }),
    ]
}

fn arb_spec() -> impl Strategy<Value = Spec> {
    (
        arb_vlans(),
        arb_ip(),
        prop::option::of((arb_tun(), arb_vlans(), arb_ip())),
        prop_oneof![
            (any::<u8>(), 0usize..4, any::<u32>()).prop_map(|(flags, o, seq)| L4::Tcp {
                flags,
                opt_len: o * 4,
                seq
            }),
            Just(L4::Udp),
        ],
        0usize..9000,
        any::<u8>(),
    )
        .prop_map(|(vlans, ip, tunnel, l4, len, seed)| Spec {
            vlans,
            ip,
            tunnel,
            l4,
            payload: pattern(len, seed),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_kind_segments_correctly(
        spec in arb_spec(),
        mss in 64u16..3000,
        fixed_id in any::<bool>(),
        outer in prop::sample::select(vec![OuterCsum::Full, OuterCsum::Lco, OuterCsum::AsInput, OuterCsum::Zero]),
    ) {
        let mut spec = spec;
        let ty = gso_type(&spec, false);
        if ty == GsoType::UdpL4 {
            // Stay within the USO segment limit.
            spec.payload.truncate(usize::from(mss) * 128);
        }
        let mut p = GsoParams::new(ty, mss);
        p.fixed_id = fixed_id;
        p.outer_csum = outer;
        let no_df = !spec.ip.v6 && !spec.ip.df
            || spec.tunnel.as_ref().is_some_and(|t| !t.2.v6 && !t.2.df);
        if fixed_id && no_df {
            let (frame, _) = build(&spec, Seed::Garbage);
            prop_assert_eq!(run(&frame, &p), Err(GsoError::FixedIdWithoutDf));
        } else {
            check(&spec, mss, &p);
        }
    }

    #[test]
    fn ufo_reassembles(
        v6 in any::<bool>(),
        vlans in arb_vlans(),
        len in 0usize..9000,
        size8 in 8u16..200,
    ) {
        let spec = Spec {
            vlans,
            ip: if v6 { Ip::V6 } else { Ip::V4 },
            tunnel: None,
            l4: L4::Udp,
            payload: pattern(len, 9),
        };
        let size = size8 * 8;
        if 8 + len <= usize::from(size) {
            // Not fragmented: one datagram with its checksum.
            let (frame, _) = build(&spec, Seed::Garbage);
            let segs = run(&frame, &GsoParams::new(GsoType::Udp, size)).unwrap();
            prop_assert_eq!(segs.len(), 1);
            let l = parse(&segs[0]).unwrap();
            prop_assert_eq!(verify_frame(&segs[0], &l).l4, Verdict::Good);
        } else {
            check_ufo(&spec, size);
        }
    }

    #[test]
    fn never_panics_on_garbage(
        frame in prop::collection::vec(any::<u8>(), 0..300),
        ty in prop::sample::select(vec![GsoType::None, GsoType::TcpV4, GsoType::TcpV6, GsoType::UdpL4, GsoType::Udp]),
        size in any::<u16>(),
    ) {
        let (layout, _) = sluice_wire::parse_partial(&frame, &sluice_wire::ParseConfig::DEFAULT);
        let mut out = GsoOutput::new();
        let _ = segment(&frame, &layout, &GsoParams::new(ty, size), &mut out);
        let _ = segment_partial(&frame, &layout, &GsoParams::new(ty, size), &mut out);
    }
}
