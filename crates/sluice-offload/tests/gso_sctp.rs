//! SCTP GSO (issue 20 item 6): `gso::segment_sctp` against vectors derived from Linux's code, and
//! properties.
//!
//! The kernel cannot be the oracle here: `virtio_net_hdr` has no SCTP GSO type (a TAP cannot
//! hand the kernel an SCTP GSO packet), and this kernel is built without SCTP (`CONFIG_IP_SCTP`
//! unset, `socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP)` → `EPROTONOSUPPORT`). The byte vectors
//! come from `tests/data/sctp_gso_vectors.py`, an independent Python rendering of what
//! `sctp_packet_pack` + `sctp_gso_segment` + `inet_gso_segment` / `ipv6_gso_segment` produce
//! (its own CRC32c and IPv4 checksum), so they are derived from the kernel's code, not run on
//! it.

use proptest::prelude::*;
use sluice_checksum::crc32c::sctp_is_valid;
use sluice_offload::gso::{segment_sctp, CsumMode, GsoError, GsoOutput, SctpGsoParams};
use sluice_packet::CsumStatus;
use sluice_wire::parse;

include!("data/sctp_gso_vectors.rs");

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn run(frame: &[u8], p: &SctpGsoParams) -> Result<Vec<Vec<u8>>, GsoError> {
    let layout = parse(frame).expect("parses");
    let mut out = GsoOutput::new();
    let n = segment_sctp(frame, &layout, p, &mut out);
    if n.is_err() {
        assert!(out.is_empty(), "nothing appended on error");
    }
    n.map(|n| {
        assert_eq!(n, out.len());
        out.frames().map(<[u8]>::to_vec).collect()
    })
}

#[test]
fn kernel_derived_vectors() {
    for (name, input, want, mtu) in [("v4", V4_IN, V4_OUT, 600), ("v6 vlan", V6_IN, V6_OUT, 1280)] {
        let got = run(&unhex(input), &SctpGsoParams::new(mtu)).unwrap();
        let want: Vec<Vec<u8>> = want.iter().map(|s| unhex(s)).collect();
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "{name} segment {i}:\n got {g:02x?}\nwant {w:02x?}");
        }
    }
}

#[test]
fn partial_checksums_leave_zeros_and_say_where() {
    let input = unhex(V4_IN);
    let layout = parse(&input).unwrap();
    let mut p = SctpGsoParams::new(600);
    p.crc = CsumMode::Partial;
    p.ip_csum = CsumMode::Partial;
    let mut out = GsoOutput::new();
    assert_eq!(segment_sctp(&input, &layout, &p, &mut out), Ok(3));
    for (i, w) in V4_OUT.iter().enumerate() {
        let mut want = unhex(w);
        want[14 + 10..14 + 12].fill(0);
        want[34 + 8..34 + 12].fill(0);
        assert_eq!(out.frame(i).unwrap(), &want[..], "segment {i}");
        let m = out.segment(i).unwrap().meta;
        assert_eq!(
            (m.ip_csum, m.l4_csum),
            (CsumStatus::Partial, CsumStatus::Partial)
        );
        assert_eq!((m.csum_start, m.csum_offset), (34, 8));
    }
}

/// A frame: Ethernet, IPv4 (ID 0xfffe, to see the wrap) or IPv6, the common header, `chunks`
/// (each padded to 4 with zeros).
fn build(v6: bool, chunks: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = chunks.iter().flatten().copied().collect();
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    let l4_len = 12 + body.len();
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[132, 64]);
        f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0xff, 0xfe, 0x40, 0, 64, 132, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    }
    f.extend_from_slice(&[0x13, 0x88, 0x13, 0x89, 1, 2, 3, 4, 0, 0, 0, 0]);
    f.extend_from_slice(&body);
    f
}

fn chunk(kind: u8, len: usize, seed: u8) -> Vec<u8> {
    let mut c: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect();
    c[0] = kind;
    c[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    c.resize(len.div_ceil(4) * 4, 0);
    c
}

/// The padded chunks of one segment's chunk region, in order.
fn split_chunks(mut b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let len = usize::from(u16::from_be_bytes([b[2], b[3]]));
        let padded = len.div_ceil(4) * 4;
        out.push(b[..padded].to_vec());
        b = &b[padded..];
    }
    out
}

#[test]
fn refusals() {
    let ok = vec![chunk(0, 100, 1), chunk(0, 200, 2)];
    // A chunk that cannot fit in one segment on its own (the kernel drops such a packet).
    assert!(matches!(
        run(&build(false, &ok), &SctpGsoParams::new(32 + 199)),
        Err(GsoError::FrameTooLong { .. })
    ));
    // An MTU below the headers plus one chunk header.
    assert!(matches!(
        run(&build(false, &ok), &SctpGsoParams::new(35)),
        Err(GsoError::FrameTooLong { .. })
    ));
    // AUTH chunks carry a per-packet HMAC.
    let auth = vec![chunk(15, 24, 0), chunk(0, 100, 1)];
    assert!(matches!(
        run(&build(false, &auth), &SctpGsoParams::new(1500)),
        Err(GsoError::Unsupported { .. })
    ));
    // Chunk length under 4, and past the packet.
    for bad_len in [3u16, 2000] {
        let mut f = build(false, &ok);
        f[34 + 12 + 2..34 + 12 + 4].copy_from_slice(&bad_len.to_be_bytes());
        assert!(
            matches!(
                run(&f, &SctpGsoParams::new(1500)),
                Err(GsoError::Unsupported { .. })
            ),
            "{bad_len}"
        );
    }
    // No chunks at all.
    assert!(matches!(
        run(&build(true, &[]), &SctpGsoParams::new(1500)),
        Err(GsoError::Unsupported { .. })
    ));
    // Not SCTP: the same bytes as a UDP datagram (protocol 17, UDP length set).
    let mut udp = build(false, &ok);
    udp[14 + 9] = 17;
    let udp_len = (udp.len() - 34) as u16;
    udp[38..40].copy_from_slice(&udp_len.to_be_bytes());
    assert!(matches!(
        run(&udp, &SctpGsoParams::new(1500)),
        Err(GsoError::Unsupported { .. })
    ));
}

#[test]
fn everything_fits_gives_one_frame_with_its_crc() {
    let f = build(true, &[chunk(0, 64, 1), chunk(3, 16, 2)]);
    let segs = run(&f, &SctpGsoParams::new(1500)).unwrap();
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].len(), f.len());
    assert_eq!(segs[0][..62], f[..62]);
    assert_eq!(segs[0][66..], f[66..]);
    assert!(sctp_is_valid(&segs[0][54..]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every chunk appears once, whole and in order; every segment's IP packet fits in the MTU
    /// and is as full as the greedy rule makes it; CRC32c, IPv4 header checksum, lengths and IDs
    /// are right; the headers are otherwise the input's.
    #[test]
    fn chunks_whole_in_order_within_mtu(
        v6 in any::<bool>(),
        lens in proptest::collection::vec((4usize..700, 0u8..15), 1..40),
        extra in 0usize..900,
    ) {
        let chunks: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, &(l, kind))| chunk(kind, l, i as u8))
            .collect();
        let f = build(v6, &chunks);
        let (l3, l4) = if v6 { (14, 54) } else { (14, 34) };
        let overhead = l4 + 12 - l3;
        let biggest = chunks.iter().map(Vec::len).max().unwrap();
        let mtu = overhead + biggest + extra;
        let segs = run(&f, &SctpGsoParams::new(mtu as u16)).unwrap();
        let mut seen = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            prop_assert!(s.len() - l3 <= mtu, "segment {} of {} IP bytes > mtu {}", i, s.len() - l3, mtu);
            prop_assert!(sctp_is_valid(&s[l4..]), "CRC of segment {}", i);
            if v6 {
                prop_assert_eq!(usize::from(u16::from_be_bytes([s[18], s[19]])), s.len() - 54);
                prop_assert_eq!(&s[..18], &f[..18]);
                prop_assert_eq!(&s[20..l4 + 8], &f[20..l4 + 8]);
            } else {
                prop_assert_eq!(sluice_checksum::checksum(&s[14..34]), 0);
                prop_assert_eq!(usize::from(u16::from_be_bytes([s[16], s[17]])), s.len() - 14);
                prop_assert_eq!(u16::from_be_bytes([s[18], s[19]]), 0xfffeu16.wrapping_add(i as u16));
                prop_assert_eq!(&s[..16], &f[..16]);
                prop_assert_eq!(&s[20..24], &f[20..24]);
                prop_assert_eq!(&s[26..l4 + 8], &f[26..l4 + 8]);
            }
            let mine = split_chunks(&s[l4 + 12..]);
            prop_assert!(!mine.is_empty());
            // Greedy: the next segment's first chunk would not have fitted here.
            if let Some(next) = segs.get(i + 1) {
                let first = split_chunks(&next[l4 + 12..]).remove(0);
                prop_assert!(s.len() - l3 + first.len() > mtu);
            }
            seen.extend(mine);
        }
        prop_assert_eq!(seen, chunks);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary chunk bytes and MTUs: an answer or a `GsoError`, never a panic, and never a
    /// segment over the MTU.
    #[test]
    fn arbitrary_chunk_bytes_never_panic(
        v6 in any::<bool>(),
        body in proptest::collection::vec(any::<u8>(), 0..3000),
        mtu in 0u16..2000,
    ) {
        let mut f = build(v6, &[]);
        let l3 = 14;
        f.extend_from_slice(&body);
        if v6 {
            let n = (f.len() - 54) as u16;
            f[18..20].copy_from_slice(&n.to_be_bytes());
        } else {
            let n = (f.len() - 14) as u16;
            f[16..18].copy_from_slice(&n.to_be_bytes());
        }
        if let Ok(layout) = parse(&f) {
            let mut out = GsoOutput::new();
            match segment_sctp(&f, &layout, &SctpGsoParams::new(mtu), &mut out) {
                Ok(n) => {
                    prop_assert_eq!(n, out.len());
                    for s in out.frames() {
                        prop_assert!(s.len() - l3 <= usize::from(mtu));
                    }
                }
                Err(_) => prop_assert!(out.is_empty()),
            }
        }
    }
}
