//! Software verification against hand-built frames.

use super::frames::{self, frame, icmp_echo, sctp, tcp, udp};
use crate::meta::{CsumStatus, Level, OffloadMeta, Slot};
use crate::verify::{verify_frame, Verdict, Verdicts};
use sluice_wire::{ip_proto, L3Kind, Layout};

fn l4_of(v: &Verdicts) -> (Verdict, bool) {
    (v.l4, v.l4_absent)
}

#[test]
fn ipv4_tcp_good_and_flipped() {
    let (mut f, layout) = frames::v4_tcp();
    let v = verify_frame(&f, &layout);
    assert_eq!(
        (v.ip, v.l4, v.inner_ip, v.inner_l4),
        (Verdict::Good, Verdict::Good, Verdict::None, Verdict::None)
    );
    // One flipped payload byte: L4 bad, IP still good.
    let last = layout.outer.l3_end.unwrap() - 1;
    f[last] ^= 0x01;
    let v = verify_frame(&f, &layout);
    assert_eq!((v.ip, v.l4), (Verdict::Good, Verdict::Bad));
    // One flipped TTL: IP bad; TTL is not in the pseudo-header, so L4 unaffected.
    let (mut f, layout) = frames::v4_tcp();
    f[14 + 8] ^= 0x10;
    let v = verify_frame(&f, &layout);
    assert_eq!((v.ip, v.l4), (Verdict::Bad, Verdict::Good));
}

#[test]
fn padding_after_l3_end_is_ignored() {
    let (mut f, layout) = frames::v4_udp();
    assert!(f.len() > layout.outer.l3_end.unwrap(), "frame is padded");
    let n = f.len();
    f[n - 1] ^= 0xff;
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
}

#[test]
fn ipv6_tcp_good_and_bad() {
    let (mut f, layout) = frames::v6_tcp();
    let v = verify_frame(&f, &layout);
    assert_eq!((v.ip, v.l4), (Verdict::None, Verdict::Good));
    f[14 + 8 + 15] ^= 0x40; // source address: in the pseudo-header
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Bad);
}

#[test]
fn ipv4_udp_good_bad_zero() {
    let (mut f, layout) = frames::v4_udp();
    assert_eq!(l4_of(&verify_frame(&f, &layout)), (Verdict::Good, false));
    f[34 + 8] ^= 1;
    assert_eq!(l4_of(&verify_frame(&f, &layout)), (Verdict::Bad, false));
    let (f, layout) = frame(L3Kind::Ipv4, ip_proto::UDP, udp(53, b"abcdefg"), false);
    assert_eq!(l4_of(&verify_frame(&f, &layout)), (Verdict::None, true));
}

#[test]
fn ipv6_udp_good_bad_zero() {
    let (mut f, layout) = frames::v6_udp();
    assert_eq!(l4_of(&verify_frame(&f, &layout)), (Verdict::Good, false));
    f[54 + 9] ^= 0x80;
    assert_eq!(l4_of(&verify_frame(&f, &layout)), (Verdict::Bad, false));
    // Zero over IPv6 is invalid (RFC 8200).
    let (f, layout) = frame(L3Kind::Ipv6, ip_proto::UDP, udp(53, b"abcdefg"), false);
    assert_eq!(l4_of(&verify_frame(&f, &layout)), (Verdict::Bad, false));
}

#[test]
fn udp_length_field_bounds_the_datagram() {
    // UDP length 12 inside a 16-byte IP payload: the 4 trailing bytes are not summed.
    let mut seg = udp(53, b"abcd");
    seg.extend_from_slice(b"TAIL");
    let mut head = seg[..12].to_vec();
    frames::fill_l4(
        L3Kind::Ipv4,
        &frames::SRC4,
        &frames::DST4,
        ip_proto::UDP,
        &mut head,
    );
    seg[..12].copy_from_slice(&head);
    let (f, layout) = frame(L3Kind::Ipv4, ip_proto::UDP, seg, false);
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
    // A UDP length beyond the IP payload cannot be verified.
    let mut g = f.clone();
    g[34 + 4..34 + 6].copy_from_slice(&100u16.to_be_bytes());
    assert_eq!(verify_frame(&g, &layout).l4, Verdict::None);
}

#[test]
fn icmp_and_icmpv6() {
    let (mut f, layout) = frame(
        L3Kind::Ipv4,
        ip_proto::ICMP,
        icmp_echo(false, b"ping"),
        true,
    );
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
    f[34 + 5] ^= 4;
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Bad);
    let (mut f, layout) = frame(
        L3Kind::Ipv6,
        ip_proto::ICMPV6,
        icmp_echo(true, b"ping6"),
        true,
    );
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
    f[14 + 24] ^= 0x20; // destination address: ICMPv6 has a pseudo-header
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Bad);
}

#[test]
fn sctp_good_and_bad() {
    let (mut f, layout) = frames::v4_sctp();
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
    f[34 + 14] ^= 0x08;
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Bad);
    // Addresses are not covered by SCTP's CRC.
    let (mut f, layout) = frame(L3Kind::Ipv6, ip_proto::SCTP, sctp(b"over v6"), true);
    f[14 + 8] ^= 1;
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
}

#[test]
fn vxlan_with_zero_outer_udp_and_good_inner_tcp() {
    let (f, layout) = frames::vxlan(L3Kind::Ipv4, frames::v4_tcp(), false);
    let v = verify_frame(&f, &layout);
    assert_eq!(
        v,
        Verdicts {
            ip: Verdict::Good,
            l4: Verdict::None,
            inner_ip: Verdict::Good,
            inner_l4: Verdict::Good,
            l4_absent: true,
            inner_l4_absent: false,
        }
    );
    // Over IPv6, a zero outer UDP checksum of a tunnel is allowed (RFC 6935).
    let (f, layout) = frames::vxlan(L3Kind::Ipv6, frames::v6_udp(), false);
    let v = verify_frame(&f, &layout);
    assert_eq!(
        (v.ip, v.l4, v.l4_absent, v.inner_l4),
        (Verdict::None, Verdict::None, true, Verdict::Good)
    );
}

#[test]
fn vxlan_with_outer_udp_checksum() {
    let (mut f, layout) = frames::vxlan(L3Kind::Ipv4, frames::v4_tcp(), true);
    let v = verify_frame(&f, &layout);
    assert_eq!(
        (v.l4, v.inner_ip, v.inner_l4),
        (Verdict::Good, Verdict::Good, Verdict::Good)
    );
    // Corrupt an inner payload byte: both the inner TCP and the outer UDP checksums catch it.
    let end = layout.inner.unwrap().l3_end.unwrap() - 1;
    f[end] ^= 0x02;
    let v = verify_frame(&f, &layout);
    assert_eq!(
        (v.l4, v.inner_ip, v.inner_l4),
        (Verdict::Bad, Verdict::Good, Verdict::Bad)
    );
}

#[test]
fn gre_with_and_without_checksum() {
    let (mut f, layout) = frames::gre(frames::v4_tcp(), true);
    let v = verify_frame(&f, &layout);
    assert_eq!(
        (v.ip, v.l4, v.inner_ip, v.inner_l4),
        (Verdict::Good, Verdict::Good, Verdict::Good, Verdict::Good)
    );
    assert!(layout.inner.unwrap().l2.is_none());
    let end = layout.outer.l3_end.unwrap() - 1;
    f[end] ^= 0x80;
    let v = verify_frame(&f, &layout);
    assert_eq!((v.l4, v.inner_l4), (Verdict::Bad, Verdict::Bad));
    let (f, layout) = frames::gre(frames::v6_udp(), false);
    let v = verify_frame(&f, &layout);
    assert_eq!(
        (v.l4, v.l4_absent, v.inner_ip, v.inner_l4),
        (Verdict::None, true, Verdict::None, Verdict::Good)
    );
}

#[test]
fn fragments_are_not_verified_at_l4() {
    let (f, mut layout) = frames::v4_tcp();
    layout.outer.is_fragment = true;
    let v = verify_frame(&f, &layout);
    assert_eq!((v.ip, v.l4), (Verdict::Good, Verdict::None));
}

#[test]
fn layouts_that_do_not_fit_give_none() {
    let (f, layout) = frames::v4_tcp();
    // Truncated frame.
    let v = verify_frame(&f[..40], &layout);
    assert_eq!((v.l4, v.inner_l4), (Verdict::None, Verdict::None));
    // l3_end beyond the frame, l4 beyond l3_end, l3 nowhere near an IP header.
    let mut bad = layout;
    bad.outer.l3_end = Some(5000);
    assert_eq!(verify_frame(&f, &bad).l4, Verdict::None);
    let mut bad = layout;
    bad.outer.l4 = Some(59);
    assert_eq!(verify_frame(&f, &bad).l4, Verdict::None);
    let mut bad = layout;
    bad.outer.l3 = Some(usize::MAX - 3);
    assert_eq!(verify_frame(&f, &bad), Verdicts::default());
    assert_eq!(verify_frame(&[], &layout), Verdicts::default());
    assert_eq!(verify_frame(&f, &Layout::default()), Verdicts::default());
}

#[test]
fn applying_verdicts_to_meta() {
    let (mut f, layout) = frames::vxlan(L3Kind::Ipv4, frames::v4_tcp(), false);
    let mut m = OffloadMeta::from_layout(&layout);
    m.apply_verdicts(&verify_frame(&f, &layout));
    assert_eq!(m.status(Slot::OuterIp), CsumStatus::Good);
    assert_eq!(m.status(Slot::OuterL4), CsumStatus::Good);
    assert!(m.csum_absent(Level::Outer));
    assert_eq!(m.status(Slot::InnerIp), CsumStatus::Good);
    assert_eq!(m.status(Slot::InnerL4), CsumStatus::Good);
    // A corrupted copy: the inner L4 becomes Bad, and stays Bad when a Good verdict follows.
    let end = layout.inner.unwrap().l3_end.unwrap() - 1;
    f[end] ^= 1;
    m.apply_verdicts(&verify_frame(&f, &layout));
    assert_eq!(m.status(Slot::InnerL4), CsumStatus::Bad);
    f[end] ^= 1;
    m.apply_verdicts(&verify_frame(&f, &layout));
    assert_eq!(m.status(Slot::InnerL4), CsumStatus::Bad);
    // IPv6/UDP with a zero checksum: Bad, not absent.
    let (f, layout) = frame(L3Kind::Ipv6, ip_proto::UDP, udp(53, b"x"), false);
    let mut m = OffloadMeta::from_layout(&layout);
    m.apply_verdicts(&verify_frame(&f, &layout));
    assert_eq!(
        (m.status(Slot::OuterIp), m.status(Slot::OuterL4)),
        (CsumStatus::Unknown, CsumStatus::Bad)
    );
    assert!(!m.csum_absent(Level::Outer));
}

#[test]
fn from_layout_takes_offsets_and_protocols() {
    let (_, layout) = frames::gre(frames::v6_tcp(), true);
    let m = OffloadMeta::from_layout(&layout);
    let o = m.offsets();
    assert_eq!(
        (o.outer_l2, o.outer_l3, o.outer_l4),
        (Some(0), Some(14), Some(34))
    );
    assert_eq!(
        (o.inner_l2, o.inner_l3, o.inner_l4),
        (None, Some(42), Some(82))
    );
    assert_eq!(m.l4_proto(Level::Outer), Some(ip_proto::GRE));
    assert_eq!(m.l4_proto(Level::Inner), Some(ip_proto::TCP));
    assert_eq!(m.l3_kind(Level::Inner), Some(L3Kind::Ipv6));
    assert_eq!(m.tunnel(), Some(sluice_wire::TunnelKind::Gre));
    for s in Slot::ALL {
        assert_eq!(m.status(s), CsumStatus::Unknown);
    }
    let _ = tcp(b"");
}

/// The hand-built layouts agree with the wire parser, and verification gives the same verdicts
/// with the parser's layout.
#[test]
fn parsed_layouts_agree_with_hand_built_ones() {
    let cases = [
        frames::v4_tcp(),
        frames::v6_tcp(),
        frames::v4_udp(),
        frames::v6_udp(),
        frames::v4_sctp(),
        frame(
            L3Kind::Ipv4,
            ip_proto::ICMP,
            icmp_echo(false, b"ping"),
            true,
        ),
        frame(
            L3Kind::Ipv6,
            ip_proto::ICMPV6,
            icmp_echo(true, b"ping"),
            true,
        ),
        frames::vxlan(L3Kind::Ipv4, frames::v4_tcp(), false),
        frames::vxlan(L3Kind::Ipv6, frames::v6_udp(), true),
        frames::gre(frames::v4_tcp(), true),
        frames::gre(frames::v6_udp(), false),
    ];
    for (f, mine) in cases {
        let parsed = sluice_wire::parse(&f).unwrap();
        let key = |h: &sluice_wire::Headers| (h.l2, h.l3, h.l3_kind, h.l4, h.l4_proto, h.l3_end);
        assert_eq!(key(&parsed.outer), key(&mine.outer));
        assert_eq!(parsed.tunnel.map(|t| t.kind), mine.tunnel.map(|t| t.kind));
        assert_eq!(parsed.inner.as_ref().map(key), mine.inner.as_ref().map(key));
        assert_eq!(verify_frame(&f, &parsed), verify_frame(&f, &mine));
        assert_eq!(
            OffloadMeta::from_layout(&parsed),
            OffloadMeta::from_layout(&mine)
        );
    }
}
