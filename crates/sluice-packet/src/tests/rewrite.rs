//! Byte-level rewrites: checked with `verify_frame` and the reference error of `frames`.

use super::frames::{self, frame, udp};
use super::state_table::vxlan_encap;
use crate::meta::{CsumStatus, Level, OffloadMeta, Slot, TunnelCsum};
use crate::rewrite::{
    defer_l4_checksum, recompute_checksum, seed_partial, set_dscp, set_ipv4_dst, set_ipv4_src,
    set_ipv6_dst, set_ipv6_src, set_ports, set_ttl,
};
use crate::verify::{verify_frame, Verdict};
use crate::Error;
use sluice_wire::{ip_proto, L3Kind, Layout};

fn verified(f: &[u8], layout: &Layout) -> OffloadMeta {
    let mut m = OffloadMeta::from_layout(layout);
    m.apply_verdicts(&verify_frame(f, layout));
    m
}

/// Every rewrite on the given level, in sequence.
fn rewrite_all(f: &mut [u8], m: &OffloadMeta, level: Level) {
    match m.l3_kind(level).unwrap() {
        L3Kind::Ipv4 => {
            set_ipv4_src(f, m, level, [10, 9, 8, 7]).unwrap();
            set_ipv4_dst(f, m, level, [172, 16, 254, 3]).unwrap();
        }
        L3Kind::Ipv6 => {
            set_ipv6_src(
                f,
                m,
                level,
                [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            )
            .unwrap();
            set_ipv6_dst(f, m, level, [0xfd; 16]).unwrap();
        }
    }
    set_ttl(f, m, level, 3).unwrap();
    set_dscp(f, m, level, 46).unwrap();
    if matches!(
        m.l4_proto(level),
        Some(ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP)
    ) {
        set_ports(f, m, level, Some(40000), None).unwrap();
        set_ports(f, m, level, None, Some(8443)).unwrap();
    }
}

fn norm(s: u16) -> u16 {
    if s == 0 {
        0xffff
    } else {
        s
    }
}

#[test]
fn good_stays_good_for_every_protocol() {
    let cases = [
        frames::v4_tcp(),
        frames::v6_tcp(),
        frames::v4_udp(),
        frames::v6_udp(),
        frames::v4_sctp(),
        frame(
            L3Kind::Ipv4,
            ip_proto::ICMP,
            frames::icmp_echo(false, b"ping"),
            true,
        ),
        frame(
            L3Kind::Ipv6,
            ip_proto::ICMPV6,
            frames::icmp_echo(true, b"ping"),
            true,
        ),
    ];
    for (mut f, layout) in cases {
        let m = verified(&f, &layout);
        let before = m;
        rewrite_all(&mut f, &m, Level::Outer);
        assert_eq!(m, before);
        let v = verify_frame(&f, &layout);
        let ip_ok = if layout.outer.l3_kind == Some(L3Kind::Ipv4) {
            Verdict::Good
        } else {
            Verdict::None
        };
        assert_eq!(
            (v.ip, v.l4),
            (ip_ok, Verdict::Good),
            "{:?}",
            layout.outer.l4_proto
        );
    }
}

#[test]
fn the_fields_are_written() {
    let (mut f, layout) = frames::v4_tcp();
    let m = verified(&f, &layout);
    rewrite_all(&mut f, &m, Level::Outer);
    assert_eq!(&f[26..30], &[10, 9, 8, 7]);
    assert_eq!(&f[30..34], &[172, 16, 254, 3]);
    assert_eq!(f[22], 3);
    assert_eq!(f[15], 46 << 2); // ECN bits of 0x28 are 0
    assert_eq!(&f[34..38], &[0x9c, 0x40, 0x20, 0xfb]);
    let (mut f, layout) = frames::v6_udp();
    let m = verified(&f, &layout);
    set_dscp(&mut f, &m, Level::Outer, 0x2e).unwrap();
    // Traffic class 0xa8 (DSCP 42, ECN 0) becomes DSCP 46, ECN 0 = 0xb8.
    assert_eq!((f[14] & 0x0f, f[15] >> 4), (0xb, 0x8));
    assert_eq!(f[15] & 0x0f, 0x0);
    set_ttl(&mut f, &m, Level::Outer, 1).unwrap();
    assert_eq!(f[14 + 7], 1);
}

#[test]
fn bad_and_unknown_stay_exactly_as_wrong() {
    for make in [
        frames::v4_tcp,
        frames::v6_tcp,
        frames::v4_udp,
        frames::v6_udp,
    ] {
        for mark_bad in [true, false] {
            let (mut f, layout) = make();
            let field = layout.outer.l4.unwrap()
                + if layout.outer.l4_proto == Some(ip_proto::TCP) {
                    16
                } else {
                    6
                };
            f[field] ^= 0x5a;
            let err = frames::l4_error(&f, &layout.outer);
            let m = if mark_bad {
                verified(&f, &layout)
            } else {
                OffloadMeta::from_layout(&layout)
            };
            let expect = if mark_bad {
                CsumStatus::Bad
            } else {
                CsumStatus::Unknown
            };
            assert_eq!(m.status(Slot::OuterL4), expect);
            rewrite_all(&mut f, &m, Level::Outer);
            assert_eq!(norm(frames::l4_error(&f, &layout.outer)), norm(err));
            assert_eq!(verify_frame(&f, &layout).l4, Verdict::Bad);
        }
    }
}

#[test]
fn bad_ip_header_stays_bad() {
    let (mut f, layout) = frames::v4_tcp();
    f[24] ^= 0x33; // header checksum
    let m = verified(&f, &layout);
    assert_eq!(m.status(Slot::OuterIp), CsumStatus::Bad);
    let wrong = frames::naive_sum(&[&f[14..34]]);
    rewrite_all(&mut f, &m, Level::Outer);
    assert_eq!(frames::naive_sum(&[&f[14..34]]), wrong);
    assert_eq!(verify_frame(&f, &layout).ip, Verdict::Bad);
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
}

#[test]
fn bad_sctp_keeps_its_error() {
    let (mut f, layout) = frames::v4_sctp();
    f[34 + 8] ^= 0x11;
    let m = verified(&f, &layout);
    assert_eq!(m.status(Slot::OuterL4), CsumStatus::Bad);
    let stored_err = |f: &[u8]| {
        let l4 = 34;
        let end = layout.outer.l3_end.unwrap();
        let mut seg = f[l4..end].to_vec();
        let stored = u32::from_le_bytes(seg[8..12].try_into().unwrap());
        seg[8..12].fill(0);
        stored ^ frames::naive_crc32c(&seg)
    };
    let err = stored_err(&f);
    set_ports(&mut f, &m, Level::Outer, Some(1), Some(2)).unwrap();
    assert_eq!(stored_err(&f), err);
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Bad);
}

#[test]
fn zero_udp_checksum_stays_zero() {
    let (mut f, layout) = frame(L3Kind::Ipv4, ip_proto::UDP, udp(53, b"abcdefg"), false);
    let m = verified(&f, &layout);
    assert!(m.csum_absent(Level::Outer));
    rewrite_all(&mut f, &m, Level::Outer);
    assert_eq!(&f[40..42], &[0, 0]);
    // Even with metadata that knows nothing, the zero is read from the frame and kept.
    let m = OffloadMeta::from_layout(&layout);
    set_ipv4_src(&mut f, &m, Level::Outer, [1, 1, 1, 1]).unwrap();
    set_ports(&mut f, &m, Level::Outer, Some(7), Some(9)).unwrap();
    assert_eq!(&f[40..42], &[0, 0]);
}

#[test]
fn partial_keeps_partial_and_the_pseudo_sum_follows_addresses() {
    for make in [frames::v4_tcp, frames::v6_udp] {
        let (mut f, layout) = make();
        let mut m = verified(&f, &layout);
        defer_l4_checksum(&mut f, &mut m, Level::Outer).unwrap();
        assert_eq!(m.status(Slot::OuterL4), CsumStatus::Partial);
        let field = usize::from(m.csum_start() + m.csum_offset());
        let seed = |f: &[u8]| {
            let h = layout.outer;
            let (l3, l4, end) = (h.l3.unwrap(), h.l4.unwrap(), h.l3_end.unwrap());
            let ph = match h.l3_kind.unwrap() {
                L3Kind::Ipv4 => frames::pseudo_bytes(
                    L3Kind::Ipv4,
                    &f[l3 + 12..l3 + 16],
                    &f[l3 + 16..l3 + 20],
                    h.l4_proto.unwrap(),
                    end - l4,
                ),
                L3Kind::Ipv6 => frames::pseudo_bytes(
                    L3Kind::Ipv6,
                    &f[l3 + 8..l3 + 24],
                    &f[l3 + 24..l3 + 40],
                    h.l4_proto.unwrap(),
                    end - l4,
                ),
            };
            frames::naive_sum(&[&ph])
        };
        assert_eq!(u16::from_be_bytes([f[field], f[field + 1]]), seed(&f));
        // A port change leaves the field alone.
        set_ports(&mut f, &m, Level::Outer, Some(999), None).unwrap();
        assert_eq!(u16::from_be_bytes([f[field], f[field + 1]]), seed(&f));
        // An address change moves the pseudo-header sum.
        rewrite_all(&mut f, &m, Level::Outer);
        assert_eq!(
            norm(u16::from_be_bytes([f[field], f[field + 1]])),
            norm(seed(&f))
        );
        assert_eq!(m.status(Slot::OuterL4), CsumStatus::Partial);
        // A software fill gives a correct checksum.
        recompute_checksum(&mut f, &mut m, Slot::OuterL4).unwrap();
        assert_eq!(m.status(Slot::OuterL4), CsumStatus::Good);
        assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
    }
}

#[test]
fn defer_is_refused_for_unknown_and_bad() {
    let (mut f, layout) = frames::v4_tcp();
    let mut m = OffloadMeta::from_layout(&layout);
    let copy = f.clone();
    assert!(defer_l4_checksum(&mut f, &mut m, Level::Outer).is_err());
    assert_eq!(f, copy);
    assert_eq!(m, OffloadMeta::from_layout(&layout));
    assert!(seed_partial(&mut f, &m).is_err());
}

#[test]
fn recompute_repairs_bad_only_on_request() {
    let (mut f, layout) = frames::v4_tcp();
    f[34 + 16] ^= 0xff;
    f[24] ^= 0xff;
    let mut m = verified(&f, &layout);
    assert_eq!(
        (m.status(Slot::OuterIp), m.status(Slot::OuterL4)),
        (CsumStatus::Bad, CsumStatus::Bad)
    );
    recompute_checksum(&mut f, &mut m, Slot::OuterL4).unwrap();
    recompute_checksum(&mut f, &mut m, Slot::OuterIp).unwrap();
    assert_eq!(
        (m.status(Slot::OuterIp), m.status(Slot::OuterL4)),
        (CsumStatus::Good, CsumStatus::Good)
    );
    let v = verify_frame(&f, &layout);
    assert_eq!((v.ip, v.l4), (Verdict::Good, Verdict::Good));
    let (mut f, layout) = frames::v6_tcp();
    let mut m = OffloadMeta::from_layout(&layout);
    assert!(recompute_checksum(&mut f, &mut m, Slot::OuterIp).is_err());
    let (mut f, layout) = frames::v4_sctp();
    f[34 + 9] ^= 1;
    let mut m = verified(&f, &layout);
    recompute_checksum(&mut f, &mut m, Slot::OuterL4).unwrap();
    assert_eq!(verify_frame(&f, &layout).l4, Verdict::Good);
}

#[test]
fn inner_rewrites_keep_vxlan_and_gre_checksums_good() {
    let cases = [
        frames::vxlan(L3Kind::Ipv4, frames::v4_tcp(), true),
        frames::vxlan(L3Kind::Ipv6, frames::v6_udp(), true),
        frames::vxlan(L3Kind::Ipv4, frames::v6_tcp(), false),
        frames::gre(frames::v4_tcp(), true),
        frames::gre(frames::v6_udp(), true),
        frames::gre(frames::v4_udp(), false),
    ];
    for (mut f, layout) in cases {
        let m = verified(&f, &layout);
        let before = verify_frame(&f, &layout);
        rewrite_all(&mut f, &m, Level::Inner);
        rewrite_all(&mut f, &m, Level::Outer);
        assert_eq!(verify_frame(&f, &layout), before, "{:?}", layout.tunnel);
    }
}

#[test]
fn outer_checksum_over_a_partial_inner_is_kept_for_the_filled_packet() {
    // VXLAN, outer UDP checksum computed, inner TCP handed to the device.
    let (mut f, layout) = frames::vxlan(L3Kind::Ipv4, frames::v4_tcp(), true);
    let mut m = verified(&f, &layout);
    defer_l4_checksum(&mut f, &mut m, Level::Inner).unwrap();
    assert_eq!(m.partial_slot(), Some(Slot::InnerL4));
    rewrite_all(&mut f, &m, Level::Inner);
    // Filling the inner checksum (as the device would) makes both checksums correct.
    let mut filled = m;
    recompute_checksum(&mut f, &mut filled, Slot::InnerL4).unwrap();
    let v = verify_frame(&f, &layout);
    assert_eq!(
        (v.l4, v.inner_ip, v.inner_l4),
        (Verdict::Good, Verdict::Good, Verdict::Good)
    );
}

#[test]
fn partial_outer_ip_header_is_left_to_the_device() {
    let (mut f, layout) = frames::vxlan(L3Kind::Ipv4, frames::v4_tcp(), false);
    let mut m = OffloadMeta::from_layout(&frames::v4_tcp().1);
    m.encapsulate(&vxlan_encap(CsumStatus::Partial, TunnelCsum::None))
        .unwrap();
    assert_eq!(m.offsets(), OffloadMeta::from_layout(&layout).offsets());
    let field = [f[24], f[25]];
    set_ttl(&mut f, &m, Level::Outer, 9).unwrap();
    set_ipv4_src(&mut f, &m, Level::Outer, [9, 9, 9, 9]).unwrap();
    assert_eq!([f[24], f[25]], field);
    assert_eq!((f[22], f[26]), (9, 9));
}

#[test]
fn errors_leave_the_frame_untouched() {
    let (mut f, layout) = frames::v4_tcp();
    let m = verified(&f, &layout);
    let copy = f.clone();
    assert!(matches!(
        set_ipv6_src(&mut f, &m, Level::Outer, [0; 16]),
        Err(Error::Unsupported(_))
    ));
    assert_eq!(
        set_ports(&mut f, &m, Level::Inner, Some(1), None),
        Err(Error::NotTunnelled)
    );
    assert!(set_dscp(&mut f, &m, Level::Outer, 64).is_err());
    assert!(set_ports(&mut f[..40], &m, Level::Outer, Some(1), None).is_err());
    assert!(set_ipv4_src(&mut f[..20], &m, Level::Outer, [1; 4]).is_err());
    let (_, icmp_layout) = frame(
        L3Kind::Ipv4,
        ip_proto::ICMP,
        frames::icmp_echo(false, b"x"),
        true,
    );
    let im = OffloadMeta::from_layout(&icmp_layout);
    assert!(set_ports(&mut f, &im, Level::Outer, Some(1), None).is_err());
    assert_eq!(f, copy);
}
