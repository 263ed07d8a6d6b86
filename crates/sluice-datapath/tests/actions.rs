//! Packet actions: byte vectors, round trips, checksum verification after every action, GSO
//! after encapsulation through transmit preparation, and scapy as an independent oracle.

use proptest::prelude::*;
use sluice_checksum::{checksum, pseudo, sum_from};
use sluice_datapath::actions::{apply, inner_flow_hash, src_port_from_hash, ActionError};
use sluice_datapath::PacketBuf;
use sluice_flow::{Action, TunnelEncap, TunnelKind};
use sluice_offload::features::{Device, Features};
use sluice_offload::tx::{tx_prepare, TxOutcome, TxOutput, TxPacket, TxSteps};
use sluice_packet::verify::{verify_frame, Verdict, Verdicts};
use sluice_packet::{rewrite, CsumStatus, GsoType, Level, OffloadMeta, Slot};
use sluice_wire::{parse_with, ParseConfig};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const CFG: ParseConfig = ParseConfig::DEFAULT;
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const V4_SRC: [u8; 4] = [192, 0, 2, 1];
const V4_DST: [u8; 4] = [198, 51, 100, 2];
const V6_SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ip {
    V4,
    V6,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum L4 {
    Tcp,
    Udp,
}

// ---- frame building (independent of the code under test) ----

/// An Ethernet frame with `tags` (TPID, TCI) outermost first, an IP header and a TCP or UDP
/// header with correct checksums, carrying `payload`.
fn build(ip: Ip, l4: L4, tags: &[(u16, u16)], payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&DST_MAC);
    f.extend_from_slice(&SRC_MAC);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    let proto = match l4 {
        L4::Tcp => 6u8,
        L4::Udp => 17,
    };
    let l4_hdr = match l4 {
        L4::Tcp => 20,
        L4::Udp => 8,
    };
    let l4_len = l4_hdr + payload.len();
    let l3 = f.len() + 2;
    match ip {
        Ip::V4 => {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let total = (20 + l4_len) as u16;
            f.extend_from_slice(&[0x45, 0x28]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0x12, 0x34, 0x40, 0, 63, proto, 0, 0]);
            f.extend_from_slice(&V4_SRC);
            f.extend_from_slice(&V4_DST);
            let c = checksum(&f[l3..l3 + 20]);
            f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        Ip::V6 => {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            f.extend_from_slice(&[0x60, 0xa0, 0x12, 0x34]);
            f.extend_from_slice(&(l4_len as u16).to_be_bytes());
            f.extend_from_slice(&[proto, 63]);
            f.extend_from_slice(&V6_SRC);
            f.extend_from_slice(&V6_DST);
        }
    }
    let l4_at = f.len();
    match l4 {
        L4::Tcp => {
            f.extend_from_slice(&[0x9c, 0x40, 0x00, 0x50]); // 40000 -> 80
            f.extend_from_slice(&1000u32.to_be_bytes());
            f.extend_from_slice(&2000u32.to_be_bytes());
            f.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        }
        L4::Udp => {
            f.extend_from_slice(&[0x9c, 0x41, 0x00, 0x35]);
            f.extend_from_slice(&(l4_len as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
        }
    }
    f.extend_from_slice(payload);
    let ph = match ip {
        Ip::V4 => pseudo::ipv4(V4_SRC, V4_DST, proto, l4_len as u16),
        Ip::V6 => pseudo::ipv6(&V6_SRC, &V6_DST, proto, l4_len as u32),
    };
    let mut c = !sum_from(ph, &f[l4_at..]);
    if l4 == L4::Udp && c == 0 {
        c = 0xffff;
    }
    let field = l4_at + if l4 == L4::Tcp { 16 } else { 6 };
    f[field..field + 2].copy_from_slice(&c.to_be_bytes());
    f
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Metadata as a receiving port that verified every checksum in software makes it.
fn verified_meta(frame: &[u8]) -> OffloadMeta {
    let layout = parse_with(frame, &CFG).unwrap();
    let mut m = OffloadMeta::from_layout(&layout);
    m.apply_verdicts(&verify_frame(frame, &layout));
    m
}

/// [`verified_meta`], with the outer IPv6 "header checksum" `Good` for a tunnel Sluice built
/// (IPv6 has none; `OffloadMeta::encapsulate` records built outer headers as `Good`, while a
/// receiver has nothing to verify and leaves `Unknown`).
fn receiver_meta(frame: &[u8]) -> OffloadMeta {
    let layout = parse_with(frame, &CFG).unwrap();
    let mut m = verified_meta(frame);
    if layout.tunnel.is_some() && layout.outer.l3_kind == Some(sluice_wire::L3Kind::Ipv6) {
        m.rx_verdict(Slot::OuterIp, Verdict::Good);
    }
    m
}

fn pkt(frame: &[u8], meta: OffloadMeta) -> PacketBuf {
    let mut p = PacketBuf::from_frame(frame);
    p.meta = meta;
    p
}

fn verdicts(frame: &[u8]) -> Verdicts {
    let layout = parse_with(frame, &CFG).unwrap();
    verify_frame(frame, &layout)
}

/// Every checksum present verifies (IPv4 header and L4, outer and inner); absent ones allowed.
fn assert_all_verify(frame: &[u8], ip: Ip) {
    let v = verdicts(frame);
    let want_ip = if ip == Ip::V4 {
        Verdict::Good
    } else {
        Verdict::None
    };
    assert_eq!(v.ip, want_ip, "{v:?}");
    assert!(v.l4 == Verdict::Good || v.l4_absent, "{v:?}");
}

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn v6(a: [u8; 16]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(a))
}

fn encap(kind: TunnelKind, outer: Ip, id: u32, udp_csum: bool) -> Action {
    let (src, dst) = match outer {
        Ip::V4 => (v4([203, 0, 113, 1]), v4([203, 0, 113, 2])),
        Ip::V6 => (
            v6([0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            v6([0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]),
        ),
    };
    Action::Encap(TunnelEncap {
        kind,
        src,
        dst,
        id,
        udp_csum,
    })
}

// ---- VLAN ----

/// A double-tagged (802.1ad S-tag 100, 802.1Q C-tag 200) IPv4/UDP frame.
fn qinq_frame() -> Vec<u8> {
    build(
        Ip::V4,
        L4::Udp,
        &[(0x88a8, 0x0064), (0x8100, 0x20c8)],
        b"hello",
    )
}

#[test]
fn push_vlan_on_double_tagged_frame_is_byte_exact() {
    let f = qinq_frame();
    let mut p = pkt(&f, verified_meta(&f));
    apply(
        &mut p,
        &Action::PushVlan {
            tpid: 0x9100,
            tci: 0xa00a,
        },
        &CFG,
    )
    .unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01]);
    want.extend_from_slice(&[0x91, 0x00, 0xa0, 0x0a]);
    want.extend_from_slice(&[0x88, 0xa8, 0x00, 0x64]);
    want.extend_from_slice(&[0x81, 0x00, 0x20, 0xc8]);
    want.extend_from_slice(&f[20..]);
    assert_eq!(p.frame(), &want[..]);
    let layout = parse_with(p.frame(), &CFG).unwrap();
    let tags: Vec<(u16, u16)> = layout
        .outer
        .vlans
        .as_slice()
        .iter()
        .map(|t| (t.tpid, t.tci()))
        .collect();
    assert_eq!(tags, [(0x9100, 0xa00a), (0x88a8, 0x0064), (0x8100, 0x20c8)]);
    // Offsets moved by 4, statuses untouched.
    assert_eq!(p.meta.offsets().outer_l3, Some(22 + 4));
    assert_eq!(p.meta.offsets().outer_l4, Some(42 + 4));
    assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Good);
    assert_eq!(p.meta, verified_meta(p.frame()));
}

#[test]
fn push_8021q_on_untagged_and_8021ad_on_tagged() {
    let f = build(Ip::V4, L4::Tcp, &[], b"x");
    let mut p = pkt(&f, verified_meta(&f));
    apply(
        &mut p,
        &Action::PushVlan {
            tpid: 0x8100,
            tci: 0x0005,
        },
        &CFG,
    )
    .unwrap();
    assert_eq!(&p.frame()[12..18], &[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
    assert_eq!(&p.frame()[..12], &f[..12]);
    assert_eq!(&p.frame()[16..], &f[12..]);
    apply(
        &mut p,
        &Action::PushVlan {
            tpid: 0x88a8,
            tci: 0x0fff,
        },
        &CFG,
    )
    .unwrap();
    assert_eq!(
        &p.frame()[12..22],
        &[0x88, 0xa8, 0x0f, 0xff, 0x81, 0x00, 0x00, 0x05, 0x08, 0x00]
    );
    assert_eq!(p.meta, verified_meta(p.frame()));
}

#[test]
fn pop_vlan_on_double_tagged_frame_is_byte_exact() {
    let f = qinq_frame();
    let mut p = pkt(&f, verified_meta(&f));
    apply(&mut p, &Action::PopVlan, &CFG).unwrap();
    let mut want = f[..12].to_vec();
    want.extend_from_slice(&[0x81, 0x00, 0x20, 0xc8]);
    want.extend_from_slice(&f[20..]);
    assert_eq!(p.frame(), &want[..]);
    assert_eq!(p.meta, verified_meta(&want));
    apply(&mut p, &Action::PopVlan, &CFG).unwrap();
    assert_eq!(p.frame(), &build(Ip::V4, L4::Udp, &[], b"hello")[..]);
    assert_eq!(p.meta, verified_meta(p.frame()));
    // Untagged now: refused, nothing changed.
    let before = p.clone();
    assert_eq!(
        apply(&mut p, &Action::PopVlan, &CFG),
        Err(ActionError::NoVlanTag)
    );
    assert_eq!(p.frame(), before.frame());
    assert_eq!(p.meta, before.meta);
}

#[test]
fn push_then_pop_is_identity_for_gso_partial_packets() {
    for tpid in [0x8100, 0x88a8, 0x9100] {
        let f = build(Ip::V6, L4::Tcp, &[(0x8100, 7)], &payload(3000));
        let mut m = verified_meta(&f);
        let l4 = m.offsets().outer_l4.unwrap();
        let mut f2 = f.clone();
        rewrite::defer_l4_checksum(&mut f2, &mut m, Level::Outer).unwrap();
        m.set_gso(GsoType::TcpV6, 1400, false).unwrap();
        assert_eq!(m.csum_start(), l4);
        let mut p = pkt(&f2, m);
        apply(&mut p, &Action::PushVlan { tpid, tci: 0x123 }, &CFG).unwrap();
        assert_eq!(p.meta.csum_start(), l4 + 4);
        assert_eq!(p.meta.csum_offset(), 16);
        assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Partial);
        assert_eq!(p.meta.gso_type(), GsoType::TcpV6);
        apply(&mut p, &Action::PopVlan, &CFG).unwrap();
        assert_eq!(p.frame(), &f2[..]);
        assert_eq!(p.meta, m);
    }
}

#[test]
fn vlan_refusals_leave_the_packet_alone() {
    let f = build(Ip::V4, L4::Udp, &[], b"abc");
    let mut p = pkt(&f, verified_meta(&f));
    assert_eq!(
        apply(
            &mut p,
            &Action::PushVlan {
                tpid: 0x0800,
                tci: 1
            },
            &CFG
        ),
        Err(ActionError::UnsupportedTpid(0x0800))
    );
    for _ in 0..8 {
        apply(
            &mut p,
            &Action::PushVlan {
                tpid: 0x8100,
                tci: 1,
            },
            &CFG,
        )
        .unwrap();
    }
    let before = p.clone();
    assert_eq!(
        apply(
            &mut p,
            &Action::PushVlan {
                tpid: 0x8100,
                tci: 1
            },
            &CFG
        ),
        Err(ActionError::TooManyTags { depth: 8 })
    );
    assert_eq!(p.frame(), before.frame());
    assert_eq!(p.meta, before.meta);
    assert!(parse_with(p.frame(), &CFG).is_ok());
}

// ---- set-field ----

fn set_field_actions(ip: Ip) -> Vec<Action> {
    let mut v = vec![
        Action::SetEthSrc([0x02, 9, 9, 9, 9, 9]),
        Action::SetEthDst([0x02, 8, 8, 8, 8, 8]),
        Action::SetTtl(5),
        Action::SetDscp(46),
        Action::SetTpSrc(1234),
        Action::SetTpDst(4321),
    ];
    match ip {
        Ip::V4 => {
            v.push(Action::SetIpv4Src([10, 1, 2, 3]));
            v.push(Action::SetIpv4Dst([172, 16, 0, 9]));
        }
        Ip::V6 => {
            v.push(Action::SetIpv6Src([0xfd; 16]));
            v.push(Action::SetIpv6Dst([
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
            ]));
        }
    }
    v
}

#[test]
fn every_checksum_verifies_after_set_field() {
    for ip in [Ip::V4, Ip::V6] {
        for l4 in [L4::Tcp, L4::Udp] {
            for tags in [&[][..], &[(0x8100, 3)][..]] {
                let f = build(ip, l4, tags, &payload(301));
                for a in set_field_actions(ip) {
                    let m = verified_meta(&f);
                    let mut p = pkt(&f, m);
                    apply(&mut p, &a, &CFG).unwrap();
                    assert_ne!(p.frame(), &f[..], "{a:?} changed nothing");
                    assert_all_verify(p.frame(), ip);
                    assert_eq!(p.meta, m, "{a:?}: statuses and offsets unchanged");
                }
            }
        }
    }
}

#[test]
fn set_field_values_land_in_the_headers() {
    let f = build(Ip::V4, L4::Tcp, &[], b"data");
    let mut p = pkt(&f, verified_meta(&f));
    for a in set_field_actions(Ip::V4) {
        apply(&mut p, &a, &CFG).unwrap();
    }
    let b = p.frame();
    assert_eq!(&b[0..6], &[0x02, 8, 8, 8, 8, 8]);
    assert_eq!(&b[6..12], &[0x02, 9, 9, 9, 9, 9]);
    assert_eq!(b[14 + 1], 46 << 2, "DSCP 46, ECN (0) kept");
    assert_eq!(b[14 + 8], 5);
    assert_eq!(&b[26..30], &[10, 1, 2, 3]);
    assert_eq!(&b[30..34], &[172, 16, 0, 9]);
    assert_eq!(&b[34..38], &[0x04, 0xd2, 0x10, 0xe1]);
    assert_all_verify(b, Ip::V4);
}

#[test]
fn bad_stays_bad_after_set_field() {
    for ip in [Ip::V4, Ip::V6] {
        for l4 in [L4::Tcp, L4::Udp] {
            let mut f = build(ip, l4, &[], &payload(100));
            // Corrupt one payload byte: the L4 checksum is now wrong.
            let n = f.len();
            f[n - 1] ^= 0x5a;
            let m = verified_meta(&f);
            assert_eq!(m.status(Slot::OuterL4), CsumStatus::Bad);
            for a in set_field_actions(ip) {
                let mut p = pkt(&f, m);
                apply(&mut p, &a, &CFG).unwrap();
                let v = verdicts(p.frame());
                assert_eq!(v.l4, Verdict::Bad, "{ip:?} {l4:?} {a:?}");
                assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Bad);
                if ip == Ip::V4 {
                    assert_eq!(v.ip, Verdict::Good);
                }
            }
        }
    }
}

#[test]
fn partial_seed_follows_address_rewrites() {
    for ip in [Ip::V4, Ip::V6] {
        let f = build(ip, L4::Tcp, &[], &payload(500));
        let mut m = verified_meta(&f);
        let mut f2 = f.clone();
        rewrite::defer_l4_checksum(&mut f2, &mut m, Level::Outer).unwrap();
        let a = match ip {
            Ip::V4 => Action::SetIpv4Dst([10, 9, 8, 7]),
            Ip::V6 => Action::SetIpv6Src([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9]),
        };
        let mut p = pkt(&f2, m);
        apply(&mut p, &a, &CFG).unwrap();
        assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Partial);
        // The field holds exactly the seed a fresh seeding would write.
        let mut reseeded = p.frame().to_vec();
        rewrite::seed_partial(&mut reseeded, &p.meta).unwrap();
        assert_eq!(p.frame(), &reseeded[..]);
        // And a device fill makes it verify.
        let mut out = TxOutput::new();
        let r = tx_prepare(
            &TxPacket::new(p.frame(), p.meta),
            &Device::new(Features::NONE),
            &mut out,
        );
        assert!(matches!(r, TxOutcome::Prepared { frames: 1, .. }), "{r:?}");
        let (done, _) = out.frame(0).unwrap();
        assert_all_verify(done, ip);
    }
}

#[test]
fn set_field_refusals_leave_the_packet_alone() {
    let f = build(Ip::V6, L4::Udp, &[], b"q");
    let m = verified_meta(&f);
    let mut p = pkt(&f, m);
    for a in [
        Action::SetIpv4Src([1, 2, 3, 4]),
        Action::SetDscp(64),
        Action::Decap,
        Action::Output(1),
    ] {
        assert!(apply(&mut p, &a, &CFG).is_err(), "{a:?}");
        assert_eq!(p.frame(), &f[..]);
        assert_eq!(p.meta, m);
    }
    let e = apply(&mut p, &Action::SetIpv4Src([1, 2, 3, 4]), &CFG).unwrap_err();
    assert!(e.to_string().starts_with("set_ipv4_src: "), "{e}");
}

#[test]
fn default_meta_is_derived_from_the_frame() {
    let f = build(Ip::V4, L4::Tcp, &[(0x8100, 1)], b"abc");
    let mut p = PacketBuf::from_frame(&f);
    apply(&mut p, &Action::SetIpv4Src([10, 0, 0, 1]), &CFG).unwrap();
    assert_all_verify(p.frame(), Ip::V4);
    assert_eq!(p.meta.offsets().outer_l3, Some(18));
    assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Unknown);
}

// ---- encapsulation ----

const KINDS: [TunnelKind; 3] = [TunnelKind::Vxlan, TunnelKind::Geneve, TunnelKind::Gre];

#[test]
fn encap_builds_parseable_verified_tunnels_and_decap_restores() {
    for kind in KINDS {
        for outer in [Ip::V4, Ip::V6] {
            for inner in [Ip::V4, Ip::V6] {
                for udp_csum in [false, true] {
                    let f = build(inner, L4::Tcp, &[(0x8100, 10)], &payload(777));
                    let m = verified_meta(&f);
                    let mut p = pkt(&f, m);
                    let id = 0x00ab_cdef;
                    apply(&mut p, &encap(kind, outer, id, udp_csum), &CFG).unwrap();
                    let ctx = format!("{kind:?} outer {outer:?} inner {inner:?} csum {udp_csum}");
                    let b = p.frame();
                    let layout = parse_with(b, &CFG).unwrap();
                    let t = layout.tunnel.expect(&ctx);
                    assert_eq!(t.kind, kind, "{ctx}");
                    assert_eq!(t.id, Some(id), "{ctx}");
                    assert_eq!(&b[..12], &f[..12], "{ctx}: outer MACs copied");
                    let hdr = 14 + if outer == Ip::V4 { 20 } else { 40 };
                    let tun = if kind == TunnelKind::Gre { 8 } else { 16 };
                    assert_eq!(&b[hdr + tun..], &f[..], "{ctx}: inner frame intact");
                    let v = verify_frame(b, &layout);
                    if outer == Ip::V4 {
                        assert_eq!(v.ip, Verdict::Good, "{ctx}");
                        assert_eq!(&b[20..22], &[0x40, 0], "{ctx}: DF, ID 0");
                        assert_eq!(b[22], 64, "{ctx}: TTL");
                    } else {
                        assert_eq!(b[21], 64, "{ctx}: hop limit");
                    }
                    let csum_on = kind != TunnelKind::Gre && (udp_csum || outer == Ip::V6);
                    if csum_on {
                        assert_eq!(v.l4, Verdict::Good, "{ctx}");
                        assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Good);
                        assert!(!p.meta.csum_absent(Level::Outer));
                    } else {
                        assert!(v.l4_absent, "{ctx}: {v:?}");
                        assert!(p.meta.csum_absent(Level::Outer));
                    }
                    if kind != TunnelKind::Gre {
                        let sport = u16::from_be_bytes([b[hdr], b[hdr + 1]]);
                        assert!(sport >= 49152, "{ctx}: {sport}");
                        let dport = u16::from_be_bytes([b[hdr + 2], b[hdr + 3]]);
                        let want = if kind == TunnelKind::Vxlan {
                            4789
                        } else {
                            6081
                        };
                        assert_eq!(dport, want);
                    }
                    if inner == Ip::V4 {
                        assert_eq!(v.inner_ip, Verdict::Good, "{ctx}");
                    }
                    assert_eq!(v.inner_l4, Verdict::Good, "{ctx}");
                    // The metadata is what a verifying receiver would derive.
                    assert_eq!(p.meta, receiver_meta(b), "{ctx}");
                    assert_eq!(p.meta.status(Slot::InnerL4), m.status(Slot::OuterL4));
                    apply(&mut p, &Action::Decap, &CFG).unwrap();
                    assert_eq!(p.frame(), &f[..], "{ctx}");
                    assert_eq!(p.meta, m, "{ctx}");
                }
            }
        }
    }
}

#[test]
fn encap_header_bytes_are_exact() {
    let f = build(Ip::V4, L4::Udp, &[], b"payload!");
    let layout = parse_with(&f, &CFG).unwrap();
    let sport = src_port_from_hash(inner_flow_hash(&f, &layout));
    for (kind, want_tun) in [
        (TunnelKind::Vxlan, vec![0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]),
        (
            TunnelKind::Geneve,
            vec![0, 0, 0x65, 0x58, 0x12, 0x34, 0x56, 0],
        ),
        (
            TunnelKind::Gre,
            vec![0x20, 0, 0x65, 0x58, 0, 0x12, 0x34, 0x56],
        ),
    ] {
        let mut p = pkt(&f, verified_meta(&f));
        apply(&mut p, &encap(kind, Ip::V4, 0x12_3456, false), &CFG).unwrap();
        let b = p.frame();
        assert_eq!(&b[12..14], &[0x08, 0x00]);
        let total = (b.len() - 14) as u16;
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.push(if kind == TunnelKind::Gre { 47 } else { 17 });
        assert_eq!(&b[14..24], &ip[..], "{kind:?}");
        assert_eq!(&b[26..34], &[203, 0, 113, 1, 203, 0, 113, 2]);
        if kind == TunnelKind::Gre {
            assert_eq!(&b[34..42], &want_tun[..]);
        } else {
            let udp_len = (b.len() - 34) as u16;
            let port: u16 = if kind == TunnelKind::Vxlan {
                4789
            } else {
                6081
            };
            let mut udp = sport.to_be_bytes().to_vec();
            udp.extend_from_slice(&port.to_be_bytes());
            udp.extend_from_slice(&udp_len.to_be_bytes());
            udp.extend_from_slice(&[0, 0]);
            assert_eq!(&b[34..42], &udp[..], "{kind:?}");
            assert_eq!(&b[42..50], &want_tun[..], "{kind:?}");
        }
    }
}

#[test]
fn source_port_depends_on_the_inner_flow() {
    let mut ports = std::collections::HashSet::new();
    for tp in 0..64u16 {
        let f = build(Ip::V4, L4::Tcp, &[], b"z");
        let mut p = pkt(&f, verified_meta(&f));
        apply(&mut p, &Action::SetTpSrc(1000 + tp), &CFG).unwrap();
        let again = p.clone();
        apply(&mut p, &encap(TunnelKind::Vxlan, Ip::V4, 1, true), &CFG).unwrap();
        let sport = u16::from_be_bytes([p.frame()[34], p.frame()[35]]);
        // Deterministic: the same flow gets the same port.
        let mut q = again;
        apply(&mut q, &encap(TunnelKind::Vxlan, Ip::V4, 1, true), &CFG).unwrap();
        assert_eq!(u16::from_be_bytes([q.frame()[34], q.frame()[35]]), sport);
        ports.insert(sport);
    }
    assert!(ports.len() > 48, "only {} distinct ports", ports.len());
}

/// The frame of the other direction of `f`'s flow: MAC addresses, IP addresses and L4 ports
/// swapped (checksums left as they were: the hash does not read them).
fn reversed(f: &[u8], ip: Ip) -> Vec<u8> {
    let mut r = f.to_vec();
    let (macs, addrs, alen, l4) = match ip {
        Ip::V4 => (0, 26, 4, 34),
        Ip::V6 => (0, 22, 16, 54),
    };
    r[macs..macs + 6].copy_from_slice(&f[macs + 6..macs + 12]);
    r[macs + 6..macs + 12].copy_from_slice(&f[macs..macs + 6]);
    r[addrs..addrs + alen].copy_from_slice(&f[addrs + alen..addrs + 2 * alen]);
    r[addrs + alen..addrs + 2 * alen].copy_from_slice(&f[addrs..addrs + alen]);
    r[l4..l4 + 2].copy_from_slice(&f[l4 + 2..l4 + 4]);
    r[l4 + 2..l4 + 4].copy_from_slice(&f[l4..l4 + 2]);
    r
}

#[test]
fn both_directions_of_a_flow_get_one_source_port() {
    for ip in [Ip::V4, Ip::V6] {
        for l4 in [L4::Tcp, L4::Udp] {
            let f = build(ip, l4, &[], b"data");
            let r = reversed(&f, ip);
            let hash = |frame: &[u8]| inner_flow_hash(frame, &parse_with(frame, &CFG).unwrap());
            assert_ne!(f, r);
            assert_eq!(hash(&f), hash(&r), "{ip:?} {l4:?}");
            // The port a direction gets is not the reverse of another flow's: swapping only
            // the ports (another flow) changes it.
            let mut ports_only = f.clone();
            let at = if ip == Ip::V4 { 34 } else { 54 };
            ports_only[at..at + 2].copy_from_slice(&f[at + 2..at + 4]);
            ports_only[at + 2..at + 4].copy_from_slice(&f[at..at + 2]);
            assert_ne!(hash(&f), hash(&ports_only), "{ip:?} {l4:?}");
            // Through the encap action: the same outer source port both ways.
            let sport = |frame: &[u8]| {
                let mut p = pkt(frame, verified_meta(frame));
                apply(&mut p, &encap(TunnelKind::Geneve, Ip::V4, 7, true), &CFG).unwrap();
                u16::from_be_bytes([p.frame()[34], p.frame()[35]])
            };
            assert_eq!(sport(&f), sport(&r), "{ip:?} {l4:?}");
        }
    }
}

/// A frame for the flow hash's properties, checksums left zero (the hash does not read them):
/// MAC addresses `macs` (destination, source), an optional 802.1Q tag, and for `Some(addrs)`
/// an IPv4 (4-byte addresses) or IPv6 (16-byte) header of protocol `proto` with an L4 header
/// whose first four bytes are `ports`; `None`: a frame of an experimental EtherType.
fn flow_frame(
    macs: ([u8; 6], [u8; 6]),
    tag: Option<u16>,
    ip: Option<(&[u8], &[u8], u8)>,
    ports: (u16, u16),
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&macs.0);
    f.extend_from_slice(&macs.1);
    if let Some(vid) = tag {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&vid.to_be_bytes());
    }
    let Some((src, dst, proto)) = ip else {
        f.extend_from_slice(&[0x88, 0xb5]);
        f.extend_from_slice(&[0u8; 46]);
        return f;
    };
    let l4_len: usize = match proto {
        6 => 20,
        132 => 12,
        _ => 8,
    };
    let mut l4 = vec![0u8; l4_len];
    l4[..2].copy_from_slice(&ports.0.to_be_bytes());
    l4[2..4].copy_from_slice(&ports.1.to_be_bytes());
    match proto {
        6 => l4[12] = 0x50,
        17 => l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes()),
        _ => {}
    }
    if src.len() == 4 {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0]);
    } else {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[proto, 64]);
    }
    f.extend_from_slice(src);
    f.extend_from_slice(dst);
    f.extend_from_slice(&l4);
    f
}

fn flow_hash(frame: &[u8]) -> u32 {
    inner_flow_hash(frame, &parse_with(frame, &CFG).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any flow and its other direction hash alike: IPv4 or IPv6; TCP, UDP, SCTP (ports) or
    /// ICMP (none); tagged or not; the two endpoints' addresses often equal, so that the ports
    /// alone order them. An IP packet's MAC addresses do not count (a routed overlay's two
    /// directions carry different ones); a frame without IP hashes its MAC addresses alike
    /// both ways.
    #[test]
    fn a_flow_and_its_other_direction_hash_alike(
        v6 in any::<bool>(),
        proto in prop_oneof![Just(6u8), Just(17), Just(132), Just(1)],
        tag in proptest::option::of(1u16..4095),
        macs in any::<([u8; 6], [u8; 6])>(),
        other_macs in any::<([u8; 6], [u8; 6])>(),
        a in any::<[u8; 16]>(),
        b in any::<[u8; 16]>(),
        same_addrs in any::<bool>(),
        ports in any::<(u16, u16)>(),
    ) {
        // A UDP packet to the VXLAN or Geneve port is a tunnel packet, and these have no
        // tunnel header to parse.
        prop_assume!(
            proto != 17
                || ![ports.0, ports.1]
                    .iter()
                    .any(|p| [sluice_wire::VXLAN_PORT, sluice_wire::GENEVE_PORT].contains(p))
        );
        let n = if v6 { 16 } else { 4 };
        let a = &a[..n];
        let b = if same_addrs { a } else { &b[..n] };
        let there = flow_frame(macs, tag, Some((a, b, proto)), ports);
        let back = flow_frame((macs.1, macs.0), tag, Some((b, a, proto)), (ports.1, ports.0));
        prop_assert_eq!(flow_hash(&there), flow_hash(&back));
        let routed = flow_frame(other_macs, tag, Some((b, a, proto)), (ports.1, ports.0));
        prop_assert_eq!(flow_hash(&there), flow_hash(&routed));
        let l2 = flow_frame(macs, tag, None, ports);
        let l2_back = flow_frame((macs.1, macs.0), tag, None, ports);
        prop_assert_eq!(flow_hash(&l2), flow_hash(&l2_back));
    }
}

#[test]
fn flows_that_are_not_one_flow_hash_apart() {
    let macs = (DST_MAC, SRC_MAC);
    let (a, b) = (&V4_SRC[..], &V4_DST[..]);
    let base = flow_hash(&flow_frame(macs, None, Some((a, b, 6)), (40000, 80)));
    // Another port on one side, only the ports swapped (the same addresses' other flow), UDP
    // instead of TCP, other addresses: each is another flow.
    for other in [
        flow_frame(macs, None, Some((a, b, 6)), (40001, 80)),
        flow_frame(macs, None, Some((a, b, 6)), (80, 40000)),
        flow_frame(macs, None, Some((a, b, 17)), (40000, 80)),
        flow_frame(macs, None, Some((a, &V4_SRC[..], 6)), (40000, 80)),
    ] {
        assert_ne!(flow_hash(&other), base, "{other:02x?}");
    }
    // ICMP has no ports: bytes where a TCP header's ports would be do not count.
    let icmp = |ports| flow_hash(&flow_frame(macs, None, Some((a, b, 1)), ports));
    assert_eq!(icmp((1, 2)), icmp((3, 4)));
}

#[test]
fn encap_refusals_leave_the_packet_alone() {
    let f = build(Ip::V4, L4::Udp, &[], b"abc");
    let m = verified_meta(&f);
    let mut p = pkt(&f, m);
    let mixed = Action::Encap(TunnelEncap {
        kind: TunnelKind::Vxlan,
        src: v4([192, 0, 2, 9]),
        dst: v6(V6_DST),
        id: 1,
        udp_csum: true,
    });
    assert!(matches!(
        apply(&mut p, &mixed, &CFG),
        Err(ActionError::AddressFamilyMismatch { .. })
    ));
    assert_eq!(
        apply(
            &mut p,
            &encap(TunnelKind::Geneve, Ip::V4, 1 << 24, true),
            &CFG
        ),
        Err(ActionError::IdOutOfRange {
            kind: TunnelKind::Geneve,
            id: 1 << 24
        })
    );
    assert_eq!(p.frame(), &f[..]);
    assert_eq!(p.meta, m);
    // GRE keys are 32 bits.
    apply(
        &mut p,
        &encap(TunnelKind::Gre, Ip::V4, u32::MAX, true),
        &CFG,
    )
    .unwrap();
    let tunnelled = p.clone();
    assert_eq!(
        apply(&mut p, &encap(TunnelKind::Vxlan, Ip::V4, 1, true), &CFG),
        Err(ActionError::AlreadyTunnelled)
    );
    assert_eq!(p.frame(), tunnelled.frame());
    assert_eq!(p.meta, tunnelled.meta);
    // Too long: a 65500-byte inner frame does not fit an outer IPv4 packet.
    let big = build(Ip::V6, L4::Udp, &[], &payload(65440));
    let mb = verified_meta(&big);
    let mut p = pkt(&big, mb);
    let e = apply(&mut p, &encap(TunnelKind::Vxlan, Ip::V4, 1, false), &CFG).unwrap_err();
    assert!(matches!(e, ActionError::TooLong { max: 65535, .. }), "{e}");
    assert_eq!(p.frame(), &big[..]);
    assert_eq!(p.meta, mb);
}

#[test]
fn decap_refusals() {
    let f = build(Ip::V4, L4::Tcp, &[], b"abc");
    let m = verified_meta(&f);
    let mut p = pkt(&f, m);
    assert_eq!(
        apply(&mut p, &Action::Decap, &CFG),
        Err(ActionError::NotTunnelled)
    );
    // A bad outer UDP checksum: dropped, as Linux's UDP layer drops it before VXLAN.
    apply(&mut p, &encap(TunnelKind::Vxlan, Ip::V4, 7, true), &CFG).unwrap();
    let mut bad = p.frame().to_vec();
    let n = bad.len();
    bad[n - 1] ^= 1; // inner payload: outer UDP and inner TCP now wrong
    let mb = verified_meta(&bad);
    assert_eq!(mb.status(Slot::OuterL4), CsumStatus::Bad);
    let mut q = pkt(&bad, mb);
    assert_eq!(
        apply(&mut q, &Action::Decap, &CFG),
        Err(ActionError::BadOuterChecksum(Slot::OuterL4))
    );
    assert_eq!(q.frame(), &bad[..]);
    assert_eq!(q.meta, mb);
    // GRE carrying IPv4 (protocol 0x0800): no Ethernet frame inside.
    let mut gre = Vec::new();
    gre.extend_from_slice(&f[..12]);
    gre.extend_from_slice(&[0x08, 0x00]);
    let inner_ip = &f[14..];
    let total = (20 + 4 + inner_ip.len()) as u16;
    gre.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 47, 0, 0]);
    gre[16..18].copy_from_slice(&total.to_be_bytes());
    gre.extend_from_slice(&[203, 0, 113, 1, 203, 0, 113, 2]);
    let c = checksum(&gre[14..34]);
    gre[24..26].copy_from_slice(&c.to_be_bytes());
    gre.extend_from_slice(&[0, 0, 0x08, 0x00]);
    gre.extend_from_slice(inner_ip);
    let mg = verified_meta(&gre);
    assert_eq!(mg.tunnel(), Some(TunnelKind::Gre));
    let mut g = pkt(&gre, mg);
    assert_eq!(
        apply(&mut g, &Action::Decap, &CFG),
        Err(ActionError::NotEthernet {
            kind: TunnelKind::Gre
        })
    );
    assert_eq!(g.frame(), &gre[..]);
}

#[test]
fn set_field_on_a_tunnel_acts_on_the_outer_headers() {
    let f = build(Ip::V4, L4::Tcp, &[], &payload(64));
    let mut p = pkt(&f, verified_meta(&f));
    apply(&mut p, &encap(TunnelKind::Vxlan, Ip::V4, 5, true), &CFG).unwrap();
    apply(&mut p, &Action::SetIpv4Dst([203, 0, 113, 99]), &CFG).unwrap();
    apply(&mut p, &Action::SetTpSrc(50000), &CFG).unwrap();
    let b = p.frame();
    assert_eq!(&b[30..34], &[203, 0, 113, 99]);
    assert_eq!(&b[34..36], &50000u16.to_be_bytes());
    assert_eq!(&b[50..], &f[..], "inner untouched");
    let v = verdicts(b);
    assert_eq!(
        (v.ip, v.l4, v.inner_ip, v.inner_l4),
        (Verdict::Good, Verdict::Good, Verdict::Good, Verdict::Good)
    );
    // Moving the VXLAN port off the tunnel's port is refused.
    let before = p.clone();
    assert_eq!(
        apply(&mut p, &Action::SetTpDst(80), &CFG),
        Err(ActionError::TunnelPortChange {
            kind: TunnelKind::Vxlan,
            port: 80
        })
    );
    assert_eq!(p.frame(), before.frame());
}

// ---- encapsulation of partial and GSO packets ----

/// A TCP GSO super-packet with a partial (seeded) checksum and a good IPv4 header checksum.
fn gso_packet(ip: Ip, payload_len: usize) -> (Vec<u8>, OffloadMeta, Vec<u8>) {
    let data = payload(payload_len);
    let mut f = build(ip, L4::Tcp, &[], &data);
    let mut m = verified_meta(&f);
    rewrite::defer_l4_checksum(&mut f, &mut m, Level::Outer).unwrap();
    let t = if ip == Ip::V4 {
        GsoType::TcpV4
    } else {
        GsoType::TcpV6
    };
    m.set_gso(t, 1448, false).unwrap();
    (f, m, data)
}

/// Checks every emitted frame: VXLAN, all checksums right, inner payload concatenating to
/// `data`.
fn check_segments<'a>(
    frames: impl Iterator<Item = &'a [u8]>,
    data: &[u8],
    outer_csum: bool,
    seg: usize,
) -> usize {
    let mut got = Vec::new();
    let mut n = 0;
    for fr in frames {
        let layout = parse_with(fr, &CFG).unwrap();
        let t = layout.tunnel.unwrap();
        assert_eq!(t.kind, TunnelKind::Vxlan);
        let v = verify_frame(fr, &layout);
        assert_eq!(v.ip, Verdict::Good, "segment {n}: {v:?}");
        if outer_csum {
            assert_eq!(v.l4, Verdict::Good, "segment {n}: {v:?}");
        } else {
            assert!(v.l4_absent, "segment {n}: {v:?}");
        }
        assert_eq!(v.inner_ip, Verdict::Good, "segment {n}: {v:?}");
        assert_eq!(v.inner_l4, Verdict::Good, "segment {n}: {v:?}");
        let inner = layout.inner.unwrap();
        let body = &fr[inner.payload.unwrap()..inner.l3_end.unwrap()];
        assert!(body.len() <= seg);
        got.extend_from_slice(body);
        n += 1;
    }
    assert_eq!(got, data);
    n
}

#[test]
fn gso_after_vxlan_encap_software_segmentation() {
    for udp_csum in [false, true] {
        let (f, m, data) = gso_packet(Ip::V4, 44 * 1448 + 700);
        let mut p = pkt(&f, m);
        apply(
            &mut p,
            &encap(TunnelKind::Vxlan, Ip::V4, 42, udp_csum),
            &CFG,
        )
        .unwrap();
        let want_outer = if udp_csum {
            CsumStatus::Partial
        } else {
            CsumStatus::Good
        };
        assert_eq!(p.meta.status(Slot::OuterL4), want_outer);
        assert_eq!(p.meta.status(Slot::InnerL4), CsumStatus::Partial);
        assert_eq!(
            p.meta.csum_start(),
            50 + 34,
            "points at the inner TCP header"
        );
        assert_eq!(p.meta.gso_type(), GsoType::TcpV4);
        // The outer IP total length and UDP length cover the whole super-packet.
        let b = p.frame();
        assert_eq!(
            usize::from(u16::from_be_bytes([b[16], b[17]])),
            b.len() - 14
        );
        assert_eq!(
            usize::from(u16::from_be_bytes([b[38], b[39]])),
            b.len() - 34
        );
        let dev = Device::new(Features::NONE).with_mtu(1600);
        let mut out = TxOutput::new();
        let r = tx_prepare(&TxPacket::new(p.frame(), p.meta), &dev, &mut out);
        match r {
            TxOutcome::Prepared { actions, frames } => {
                assert!(actions.contains(TxSteps::SOFT_GSO), "{actions:?}");
                assert_eq!(frames, 45);
            }
            other => panic!("udp_csum {udp_csum}: {other:?}"),
        }
        for (_, w) in out.frames() {
            assert_eq!(w.l4_csum, None);
            assert_eq!(w.gso, None);
        }
        let n = check_segments(out.frames().map(|(fr, _)| fr), &data, udp_csum, 1448);
        assert_eq!(n, 45);
    }
}

#[test]
fn gso_after_encap_over_ipv6_and_geneve_segments_in_software() {
    for (kind, outer, inner) in [
        (TunnelKind::Geneve, Ip::V6, Ip::V4),
        (TunnelKind::Vxlan, Ip::V6, Ip::V6),
        (TunnelKind::Gre, Ip::V4, Ip::V6),
    ] {
        let (f, m, data) = gso_packet(inner, 10 * 1448 + 1);
        let mut p = pkt(&f, m);
        apply(&mut p, &encap(kind, outer, 9, true), &CFG).unwrap();
        let dev = Device::new(Features::NONE).with_mtu(1700);
        let mut out = TxOutput::new();
        let r = tx_prepare(&TxPacket::new(p.frame(), p.meta), &dev, &mut out);
        assert!(
            matches!(r, TxOutcome::Prepared { frames: 11, .. }),
            "{kind:?}: {r:?}"
        );
        let mut got = Vec::new();
        for (fr, _) in out.frames() {
            let layout = parse_with(fr, &CFG).unwrap();
            assert_eq!(layout.tunnel.unwrap().kind, kind);
            let v = verify_frame(fr, &layout);
            assert!(
                v.l4 == Verdict::Good || (kind == TunnelKind::Gre && v.l4_absent),
                "{v:?}"
            );
            assert_ne!(v.inner_l4, Verdict::Bad);
            assert_eq!(v.inner_l4, Verdict::Good, "{kind:?} {v:?}");
            let inner = layout.inner.unwrap();
            got.extend_from_slice(&fr[inner.payload.unwrap()..inner.l3_end.unwrap()]);
        }
        assert_eq!(got, data);
    }
}

#[test]
fn gso_after_vxlan_encap_left_to_a_tunnel_gso_device() {
    for udp_csum in [false, true] {
        let (f, m, data) = gso_packet(Ip::V4, 44 * 1448);
        let mut p = pkt(&f, m);
        apply(
            &mut p,
            &encap(TunnelKind::Vxlan, Ip::V4, 42, udp_csum),
            &CFG,
        )
        .unwrap();
        let feats = Features::TX_SG
            | Features::TX_CSUM_GENERIC
            | Features::TSO
            | Features::UDP_TNL
            | Features::UDP_TNL_CSUM;
        let dev = Device::new(feats).with_mtu(1600);
        let mut out = TxOutput::new();
        let r = tx_prepare(&TxPacket::new(p.frame(), p.meta), &dev, &mut out);
        let TxOutcome::Unchanged { actions, work } = r else {
            panic!("udp_csum {udp_csum}: {r:?}");
        };
        assert!(actions.contains(TxSteps::HW_GSO), "{actions:?}");
        assert_eq!(work.gso, Some((GsoType::TcpV4, 1448, false)));
        assert_eq!(work.l4_csum, Some((50 + 34, 16)), "inner TCP checksum");
        assert_eq!(work.vlan, None);
        // What the device puts on the wire is right.
        let mut wire = Vec::new();
        sluice_offload::tx::emulate_device(p.frame(), &work, &CFG, &mut wire).unwrap();
        assert_eq!(wire.len(), 44);
        check_segments(wire.iter().map(Vec::as_slice), &data, udp_csum, 1448);

        // Without the outer-checksum feature, a checksummed tunnel is not handed over whole.
        let dev = Device::new(feats.without(Features::UDP_TNL_CSUM)).with_mtu(1600);
        let r = tx_prepare(&TxPacket::new(p.frame(), p.meta), &dev, &mut out);
        if udp_csum {
            assert!(!r.actions().contains(TxSteps::HW_GSO), "{r:?}");
            assert!(!r.actions().contains(TxSteps::DROP), "{r:?}");
        } else {
            assert!(r.actions().contains(TxSteps::HW_GSO), "{r:?}");
        }
    }
}

#[test]
fn partial_inner_checksum_gives_a_partial_outer_checksum() {
    let f = build(Ip::V4, L4::Udp, &[], &payload(900));
    let mut m = verified_meta(&f);
    let mut f2 = f.clone();
    rewrite::defer_l4_checksum(&mut f2, &mut m, Level::Outer).unwrap();
    let mut p = pkt(&f2, m);
    apply(&mut p, &encap(TunnelKind::Geneve, Ip::V6, 3, true), &CFG).unwrap();
    assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Partial);
    assert_eq!(p.meta.status(Slot::InnerL4), CsumStatus::Partial);
    // The outer field holds the pseudo-header sum.
    let b = p.frame();
    let udp_len = (b.len() - 54) as u16;
    let mut s = [0u8; 16];
    s.copy_from_slice(&b[22..38]);
    let mut d = [0u8; 16];
    d.copy_from_slice(&b[38..54]);
    assert_eq!(
        u16::from_be_bytes([b[60], b[61]]),
        pseudo::ipv6(&s, &d, 17, u32::from(udp_len))
    );
    for dev in [
        Device::new(Features::NONE),
        Device::new(Features::TX_CSUM_GENERIC | Features::TX_SG),
    ] {
        let mut out = TxOutput::new();
        let r = tx_prepare(&TxPacket::new(p.frame(), p.meta), &dev, &mut out);
        let mut wire = Vec::new();
        match r {
            TxOutcome::Prepared { frames: 1, .. } => {
                let (fr, w) = out.frame(0).unwrap();
                sluice_offload::tx::emulate_device(fr, w, &CFG, &mut wire).unwrap();
            }
            TxOutcome::Unchanged { work, .. } => {
                sluice_offload::tx::emulate_device(p.frame(), &work, &CFG, &mut wire).unwrap();
            }
            other => panic!("{other:?}"),
        }
        let v = verdicts(&wire[0]);
        assert_eq!(
            (v.l4, v.inner_ip, v.inner_l4),
            (Verdict::Good, Verdict::Good, Verdict::Good),
            "{v:?}"
        );
    }
    // Decap gives back the partial packet exactly.
    apply(&mut p, &Action::Decap, &CFG).unwrap();
    assert_eq!(p.frame(), &f2[..]);
    assert_eq!(p.meta, m);
}

#[test]
fn encap_decap_round_trip_keeps_gso_and_partial_state() {
    for kind in KINDS {
        for outer in [Ip::V4, Ip::V6] {
            let (f, m, _) = gso_packet(Ip::V6, 5000);
            let mut p = pkt(&f, m);
            apply(&mut p, &encap(kind, outer, 77, true), &CFG).unwrap();
            apply(
                &mut p,
                &Action::PushVlan {
                    tpid: 0x8100,
                    tci: 9,
                },
                &CFG,
            )
            .unwrap();
            apply(&mut p, &Action::PopVlan, &CFG).unwrap();
            apply(&mut p, &Action::Decap, &CFG).unwrap();
            assert_eq!(p.frame(), &f[..], "{kind:?} {outer:?}");
            assert_eq!(p.meta, m, "{kind:?} {outer:?}");
        }
    }
}

// ---- properties ----

fn arb_set_field() -> impl Strategy<Value = Action> {
    prop_oneof![
        any::<[u8; 6]>().prop_map(Action::SetEthSrc),
        any::<[u8; 6]>().prop_map(Action::SetEthDst),
        any::<[u8; 4]>().prop_map(Action::SetIpv4Src),
        any::<[u8; 4]>().prop_map(Action::SetIpv4Dst),
        any::<[u8; 16]>().prop_map(Action::SetIpv6Src),
        any::<[u8; 16]>().prop_map(Action::SetIpv6Dst),
        any::<u8>().prop_map(Action::SetTtl),
        (0u8..64).prop_map(Action::SetDscp),
        any::<u16>().prop_map(Action::SetTpSrc),
        // Not onto a tunnel port: the frame would then parse as a tunnel its metadata does
        // not record (documented in docs/actions.md).
        any::<u16>()
            .prop_filter("tunnel port", |p| *p != 4789 && *p != 6081)
            .prop_map(Action::SetTpDst),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_set_fields_keep_every_checksum_verifying(
        v6 in any::<bool>(),
        udp in any::<bool>(),
        tunnel in proptest::option::of((0usize..3, any::<bool>(), any::<bool>())),
        len in 0usize..600,
        actions in proptest::collection::vec(arb_set_field(), 1..6),
    ) {
        let ip = if v6 { Ip::V6 } else { Ip::V4 };
        let l4 = if udp { L4::Udp } else { L4::Tcp };
        let f = build(ip, l4, &[], &payload(len));
        let mut p = pkt(&f, verified_meta(&f));
        let mut outer_ip = ip;
        if let Some((k, o6, csum)) = tunnel {
            outer_ip = if o6 { Ip::V6 } else { Ip::V4 };
            apply(&mut p, &encap(KINDS[k], outer_ip, 1, csum), &CFG).unwrap();
        }
        let tunnelled = p.meta.tunnel();
        for a in &actions {
            let before = p.clone();
            match apply(&mut p, a, &CFG) {
                Ok(()) => {}
                Err(_) => {
                    // Wrong IP version, GRE ports, VXLAN port change: refused, nothing changed.
                    prop_assert_eq!(p.frame(), before.frame());
                    prop_assert_eq!(p.meta, before.meta);
                }
            }
        }
        let layout = parse_with(p.frame(), &CFG).unwrap();
        prop_assert_eq!(layout.tunnel.map(|t| t.kind), tunnelled);
        let v = verify_frame(p.frame(), &layout);
        if outer_ip == Ip::V4 {
            prop_assert_eq!(v.ip, Verdict::Good);
        }
        prop_assert!(v.l4 == Verdict::Good || v.l4_absent, "{:?}", v);
        if tunnelled.is_some() {
            prop_assert_eq!(v.inner_l4, Verdict::Good);
            if ip == Ip::V4 {
                prop_assert_eq!(v.inner_ip, Verdict::Good);
            }
        }
        // The metadata still matches what a verifying receiver derives.
        prop_assert_eq!(p.meta, receiver_meta(p.frame()));
    }

    #[test]
    fn push_pop_round_trip(
        tags in proptest::collection::vec((0usize..3, any::<u16>()), 0..4),
        tpid in 0usize..3,
        tci in any::<u16>(),
    ) {
        const TPIDS: [u16; 3] = [0x8100, 0x88a8, 0x9100];
        let t: Vec<(u16, u16)> = tags.iter().map(|&(i, c)| (TPIDS[i], c)).collect();
        let f = build(Ip::V4, L4::Udp, &t, b"round trip");
        let m = verified_meta(&f);
        let mut p = pkt(&f, m);
        apply(&mut p, &Action::PushVlan { tpid: TPIDS[tpid], tci }, &CFG).unwrap();
        prop_assert_eq!(&p.frame()[12..16], &[TPIDS[tpid].to_be_bytes(), tci.to_be_bytes()].concat()[..]);
        apply(&mut p, &Action::PopVlan, &CFG).unwrap();
        prop_assert_eq!(p.frame(), &f[..]);
        prop_assert_eq!(p.meta, m);
    }
}

// ---- the layout a packet carries (issue 15, item 1: one parse per packet) ----

/// One step of a random action sequence.
fn arb_step() -> impl Strategy<Value = Action> {
    const TPIDS: [u16; 3] = [0x8100, 0x88a8, 0x9100];
    prop_oneof![
        ((0usize..3), any::<u16>()).prop_map(|(t, tci)| Action::PushVlan {
            tpid: TPIDS[t],
            tci
        }),
        Just(Action::PopVlan),
        ((0usize..3), any::<bool>(), any::<bool>(), any::<u32>()).prop_map(|(k, o6, csum, id)| {
            encap(
                KINDS[k],
                if o6 { Ip::V6 } else { Ip::V4 },
                id & 0xff_ffff,
                csum,
            )
        }),
        Just(Action::Decap),
        arb_set_field(),
        // Onto a tunnel port too: the carried layout must then be forgotten, not kept.
        prop_oneof![Just(4789u16), Just(6081u16), Just(8472u16), Just(7000u16)]
            .prop_map(Action::SetTpDst),
    ]
}

/// The parse configurations the carried-layout property runs under: the default, one with
/// more tunnel ports (VXLAN 8472, Geneve 7000), and L3 (a TUN port's: IP packets).
fn layout_configs() -> [ParseConfig; 3] {
    [
        CFG,
        ParseConfig::with_tunnel_ports(&[8472], &[7000]).expect("two ports fit"),
        ParseConfig::L3,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(768))]

    /// After every action, the layout the packet carries is exactly a fresh parse of its bytes;
    /// and push, pop, encap, decap and the set-field actions that move no header keep one, so
    /// nothing downstream parses again. Under each configuration of [`layout_configs`] (an L3
    /// packet is the built frame without its Ethernet header and tags).
    #[test]
    fn carried_layout_is_always_a_fresh_parse(
        which in 0usize..3,
        v6 in any::<bool>(),
        udp in any::<bool>(),
        tags in proptest::collection::vec((0usize..3, any::<u16>()), 0..3),
        len in 0usize..300,
        carried in any::<bool>(),
        steps in proptest::collection::vec(arb_step(), 1..8),
    ) {
        const TPIDS: [u16; 3] = [0x8100, 0x88a8, 0x9100];
        let cfg = layout_configs()[which];
        let t: Vec<(u16, u16)> = tags.iter().map(|&(i, c)| (TPIDS[i], c)).collect();
        let ip = if v6 { Ip::V6 } else { Ip::V4 };
        let l4 = if udp { L4::Udp } else { L4::Tcp };
        let mut f = build(ip, l4, &t, &payload(len));
        if cfg.link == sluice_wire::LinkType::Ip {
            f.drain(..14 + 4 * t.len());
        }
        let layout = parse_with(&f, &cfg).unwrap();
        let mut m = OffloadMeta::from_layout(&layout);
        m.apply_verdicts(&verify_frame(&f, &layout));
        let mut p = pkt(&f, m);
        if carried {
            p.set_layout(&layout, true, &cfg);
        }
        for a in &steps {
            let had = p.whole_layout(&cfg).is_some();
            let before = sluice_wire::parse_with(p.frame(), &cfg);
            let plain_before = before.is_ok_and(|l| l.tunnel.is_none());
            let ok = apply(&mut p, a, &cfg).is_ok();
            let fresh = sluice_wire::parse_partial(p.frame(), &cfg);
            if let Some((l, whole)) = p.layout_for(&cfg) {
                prop_assert_eq!(l, &fresh.0, "after {:?}", a);
                prop_assert_eq!(whole, fresh.1.is_none());
            }
            // Encap and decap need a layout: they carry one whatever came before, where the
            // frame on the tunnel's open side is plain (a UDP datagram to the VXLAN port that
            // holds no VXLAN header does not parse; one to the Geneve port whose header carries
            // an unknown protocol has a tunnel and no inner stack: such frames are parsed again
            // where they are next needed).
            let plain_after = fresh.1.is_none() && fresh.0.tunnel.is_none();
            let needs = match a {
                Action::Encap(_) => plain_before,
                Action::Decap => plain_after,
                _ => false,
            };
            let keeps = !matches!(a, Action::SetTpDst(_)) && (had || needs);
            if ok && keeps {
                prop_assert!(p.whole_layout(&cfg).is_some(), "{:?} dropped the layout", a);
            }
        }
    }
}

#[test]
fn set_eth_on_an_l3_packet_is_refused() {
    let f = build(Ip::V4, L4::Tcp, &[], b"abc");
    let l3 = &f[14..];
    let layout = parse_with(l3, &ParseConfig::L3).unwrap();
    let mut p = pkt(l3, OffloadMeta::from_layout(&layout));
    p.set_layout(&layout, true, &ParseConfig::L3);
    for a in [Action::SetEthDst([2; 6]), Action::SetEthSrc([4; 6])] {
        assert_eq!(
            apply(&mut p, &a, &ParseConfig::L3),
            Err(ActionError::Missing("Ethernet header"))
        );
        assert_eq!(p.frame(), l3, "no MAC address written over the IP header");
        assert!(p.whole_layout(&ParseConfig::L3).is_some());
    }
}

#[test]
fn a_layout_parsed_with_another_configuration_is_not_used() {
    let f = build(Ip::V4, L4::Udp, &[], b"abc");
    let mut p = pkt(&f, verified_meta(&f));
    let other = ParseConfig::with_tunnel_ports(&[8472], &[]).unwrap();
    p.set_layout(&parse_with(&f, &other).unwrap(), true, &other);
    assert!(p.layout_for(&CFG).is_none());
    assert!(p.layout_for(&other).is_some());
    // Any write to the bytes forgets it.
    p.frame_mut()[0] ^= 1;
    assert!(p.layout_for(&other).is_none());
}

// ---- measurement (run by hand, release build) ----

/// Nanoseconds per call of `f`, over `n` calls after a warm-up.
fn time_ns(n: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    let t = std::time::Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// `cargo test --release -p sluice-datapath --test actions -- --ignored --nocapture timing`:
/// prints the cost of each action (numbers in docs/actions.md). Every timed packet is checked
/// to come out valid.
#[test]
#[ignore]
fn timing() {
    let small = build(Ip::V4, L4::Tcp, &[], &payload(1400));
    let ms = verified_meta(&small);
    let (big, mb, _) = gso_packet(Ip::V4, 44 * 1448);
    let mut p = pkt(&small, ms);
    let push = Action::PushVlan {
        tpid: 0x8100,
        tci: 1,
    };
    let ns = time_ns(1_000_000, || {
        apply(&mut p, &push, &CFG).unwrap();
        apply(&mut p, &Action::PopVlan, &CFG).unwrap();
    });
    assert_eq!(p.frame(), &small[..]);
    println!("push_vlan + pop_vlan (1454-byte frame): {ns:.0} ns");
    let mut flip = false;
    let ns = time_ns(1_000_000, || {
        flip = !flip;
        let a = if flip { [10, 0, 0, 1] } else { V4_SRC };
        apply(&mut p, &Action::SetIpv4Src(a), &CFG).unwrap();
    });
    assert_all_verify(p.frame(), Ip::V4);
    println!("set_ipv4_src (IP + TCP checksums moved): {ns:.0} ns");
    for (what, frame, meta, csum) in [
        ("1454-byte frame, no UDP checksum", &small, ms, false),
        ("1454-byte frame, UDP checksum computed", &small, ms, true),
        ("64 KiB GSO frame, UDP checksum partial", &big, mb, true),
    ] {
        let mut p = pkt(frame, meta);
        let e = encap(TunnelKind::Vxlan, Ip::V4, 1, csum);
        let ns = time_ns(20_000, || {
            apply(&mut p, &e, &CFG).unwrap();
            apply(&mut p, &Action::Decap, &CFG).unwrap();
        });
        assert_eq!(p.frame(), &frame[..]);
        println!("encap vxlan + decap ({what}): {ns:.0} ns");
    }
}

// ---- independent oracle: scapy ----

/// Dissects every frame with scapy and checks, with scapy's own checksum code, that every IPv4
/// header, TCP and UDP checksum and every length field equals a recomputation (a zero UDP
/// checksum, "none", is kept), and for tunnels the header fields Sluice wrote.
const SCAPY_CHECKER: &str = r#"
import sys
from scapy.all import rdpcap, Ether, IP, IPv6, UDP, GRE, load_contrib
from scapy.packet import NoPayload
from scapy.layers.vxlan import VXLAN
load_contrib("geneve")
from scapy.contrib.geneve import GENEVE

pkts = rdpcap(sys.argv[1])
specs = [l.split() for l in open(sys.argv[2]) if l.strip()]
assert len(pkts) == len(specs), (len(pkts), len(specs))
errors = []
for i, (p, spec) in enumerate(zip(pkts, specs)):
    raw = bytes(p)
    q = Ether(raw)
    l = q
    while not isinstance(l, NoPayload):
        for f in ("chksum", "len", "plen"):
            if f in l.fields and l.fields[f] is not None:
                if isinstance(l, UDP) and f == "chksum" and l.chksum == 0:
                    continue
                delattr(l, f)
        l = l.payload
    if bytes(q) != raw:
        errors.append("%d %s: checksums/lengths differ from scapy's" % (i, spec))
        continue
    kind = spec[0]
    if kind == "plain":
        continue
    vni, csum = int(spec[1]), spec[2] == "1"
    # Segments of a GSO packet: the outer IPv4 ID counts up per segment (as Linux's GSO).
    seg = len(spec) > 3
    o = p[IP] if IP in p and p.getlayer(IP).underlayer is p else p[IPv6]
    if isinstance(o, IP):
        if not (o.ttl == 64 and (o.id == 0 or seg) and int(o.flags) == 2):
            errors.append("%d: outer IPv4 ttl/id/flags %s %s %s" % (i, o.ttl, o.id, o.flags))
    elif o.hlim != 64:
        errors.append("%d: outer hop limit %d" % (i, o.hlim))
    if kind == "gre":
        g = p[GRE]
        if not (g.key_present == 1 and g.key == vni and g.proto == 0x6558 and g.chksum_present == 0):
            errors.append("%d: GRE %r" % (i, g))
        continue
    u = p[UDP]
    if not 49152 <= u.sport <= 65535:
        errors.append("%d: source port %d" % (i, u.sport))
    if (u.chksum != 0) != csum:
        errors.append("%d: outer UDP checksum %#x, expected %s" % (i, u.chksum, csum))
    if kind == "vxlan":
        v = p[VXLAN]
        if not (u.dport == 4789 and int(v.flags) == 0x08 and v.vni == vni and Ether in v):
            errors.append("%d: VXLAN %r" % (i, v))
    else:
        g = p[GENEVE]
        if not (u.dport == 6081 and g.proto == 0x6558 and g.vni == vni and g.optionlen == 0 and Ether in g):
            errors.append("%d: Geneve %r" % (i, g))
if errors:
    print("\n".join(errors))
    sys.exit(1)
print("ok", len(pkts))
"#;

/// Removes the files it names when dropped (also on panic).
struct TempFiles(Vec<std::path::PathBuf>);

impl Drop for TempFiles {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 262_144, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    // The header's version is two u16s (2, 4): rewrite them in place.
    out[4..8].copy_from_slice(&[2, 0, 4, 0]);
    for (i, f) in frames.iter().enumerate() {
        for v in [i as u32, 0, f.len() as u32, f.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(f);
    }
    out
}

#[test]
fn scapy_agrees_with_every_action() {
    let mut frames = Vec::new();
    let mut specs = String::new();
    // Set-field and VLAN results.
    for ip in [Ip::V4, Ip::V6] {
        for l4 in [L4::Tcp, L4::Udp] {
            let f = build(ip, l4, &[(0x88a8, 5)], &payload(333));
            let mut p = pkt(&f, verified_meta(&f));
            for a in set_field_actions(ip) {
                apply(&mut p, &a, &CFG).unwrap();
                frames.push(p.frame().to_vec());
                specs.push_str("plain\n");
            }
            apply(
                &mut p,
                &Action::PushVlan {
                    tpid: 0x9100,
                    tci: 77,
                },
                &CFG,
            )
            .unwrap();
            frames.push(p.frame().to_vec());
            specs.push_str("plain\n");
        }
    }
    // Encapsulations.
    for (k, kind) in KINDS.into_iter().enumerate() {
        for outer in [Ip::V4, Ip::V6] {
            for (inner, l4) in [(Ip::V4, L4::Tcp), (Ip::V6, L4::Udp)] {
                for udp_csum in [false, true] {
                    let f = build(inner, l4, &[(0x8100, 12)], &payload(401));
                    let mut p = pkt(&f, verified_meta(&f));
                    let id = 0x00fe_dc00 + k as u32;
                    apply(&mut p, &encap(kind, outer, id, udp_csum), &CFG).unwrap();
                    frames.push(p.frame().to_vec());
                    let name = ["vxlan", "geneve", "gre"][k];
                    let csum = u8::from(udp_csum || outer == Ip::V6);
                    specs.push_str(&format!("{name} {id} {csum}\n"));
                }
            }
        }
    }
    // GSO segments after encapsulation, from software segmentation.
    for udp_csum in [false, true] {
        let (f, m, _) = gso_packet(Ip::V4, 6 * 1448 + 99);
        let mut p = pkt(&f, m);
        apply(
            &mut p,
            &encap(TunnelKind::Vxlan, Ip::V4, 42, udp_csum),
            &CFG,
        )
        .unwrap();
        let mut out = TxOutput::new();
        let dev = Device::new(Features::NONE).with_mtu(1600);
        let r = tx_prepare(&TxPacket::new(p.frame(), p.meta), &dev, &mut out);
        assert!(matches!(r, TxOutcome::Prepared { frames: 7, .. }), "{r:?}");
        for (fr, _) in out.frames() {
            frames.push(fr.to_vec());
            specs.push_str(&format!("vxlan 42 {} seg\n", u8::from(udp_csum)));
        }
    }
    let dir = std::env::temp_dir();
    let id = std::process::id();
    let files = TempFiles(vec![
        dir.join(format!("sluice-actions-scapy-{id}.pcap")),
        dir.join(format!("sluice-actions-scapy-{id}.txt")),
    ]);
    std::fs::write(&files.0[0], pcap(&frames)).unwrap();
    std::fs::write(&files.0[1], specs).unwrap();
    let o = std::process::Command::new("python3")
        .arg("-c")
        .arg(SCAPY_CHECKER)
        .arg(&files.0[0])
        .arg(&files.0[1])
        .output()
        .expect("python3 runs (scripts/test installs python3 and scapy)");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "scapy checker failed (needs python3 with scapy):\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.trim(), format!("ok {}", frames.len()));
}

// ---- checksum truth across decapsulation ----

/// Metadata for `frame` (a tunnel) with the given outer and inner L4 statuses, reached through
/// the state machine's own events; `None` where no event sequence gives that pair (one
/// `Partial` slot at most).
fn with_l4_statuses(frame: &[u8], outer: CsumStatus, inner: CsumStatus) -> Option<OffloadMeta> {
    let mut m = OffloadMeta::from_layout(&parse_with(frame, &CFG).unwrap());
    m.rx_verdict(Slot::OuterIp, Verdict::Good);
    m.rx_verdict(Slot::InnerIp, Verdict::Good);
    let o = m.offsets();
    for (slot, status, at, field) in [
        (Slot::OuterL4, outer, o.outer_l4?, 6),
        (Slot::InnerL4, inner, o.inner_l4?, 16),
    ] {
        match status {
            CsumStatus::Good => m.rx_verdict(slot, Verdict::Good),
            CsumStatus::Bad => m.rx_verdict(slot, Verdict::Bad),
            CsumStatus::Partial => {
                if m.partial_slot().is_some() {
                    return None;
                }
                m.rx_needs_csum(at, field).unwrap();
            }
            CsumStatus::Unknown => {}
        }
    }
    assert_eq!(
        (m.status(Slot::OuterL4), m.status(Slot::InnerL4)),
        (outer, inner)
    );
    Some(m)
}

/// Decap of a VXLAN frame (inner TCP) for every outer L4 status (good, bad, partial, unknown)
/// × inner L4 status, with the outer UDP checksum on the wire right or wrong: a wrong outer
/// checksum is never passed on — known bad, or unknown and found bad by the software check
/// (except on a checksum-partial packet, trusted as Linux trusts it) — and the inner status
/// crosses unchanged (the decap never makes it `Good`).
#[test]
fn decap_never_launders_a_bad_outer_checksum() {
    let inner = build(Ip::V4, L4::Tcp, &[], &payload(300));
    let mut p = pkt(&inner, verified_meta(&inner));
    apply(&mut p, &encap(TunnelKind::Vxlan, Ip::V4, 9, true), &CFG).unwrap();
    let good_wire = p.frame().to_vec();
    // Corrupt the outer UDP checksum field only: the inner frame stays intact.
    let mut bad_wire = good_wire.clone();
    bad_wire[14 + 20 + 6] ^= 0x5a;
    assert_eq!(verdicts(&bad_wire).l4, Verdict::Bad);
    assert_eq!(verdicts(&bad_wire).inner_l4, Verdict::Good);
    let statuses = [
        CsumStatus::Good,
        CsumStatus::Bad,
        CsumStatus::Partial,
        CsumStatus::Unknown,
    ];
    let mut cells = 0;
    for wire_ok in [true, false] {
        let frame = if wire_ok { &good_wire } else { &bad_wire };
        for outer in statuses {
            for inner_status in statuses {
                let Some(m) = with_l4_statuses(frame, outer, inner_status) else {
                    continue;
                };
                cells += 1;
                let ctx = format!("wire ok {wire_ok}, outer {outer:?}, inner {inner_status:?}");
                let mut q = pkt(frame, m);
                let r = apply(&mut q, &Action::Decap, &CFG);
                // A checksum-partial packet (inner `Partial`) comes from a trusted local sender
                // and cannot be summed yet: its unknown outer checksum is trusted, as in Linux.
                let checked = outer == CsumStatus::Unknown && inner_status != CsumStatus::Partial;
                let refused = outer == CsumStatus::Bad || (checked && !wire_ok);
                if refused {
                    assert_eq!(
                        r,
                        Err(ActionError::BadOuterChecksum(Slot::OuterL4)),
                        "{ctx}"
                    );
                    assert_eq!(q.frame(), &frame[..], "{ctx}: unchanged on refusal");
                    assert_eq!(q.meta, m, "{ctx}: unchanged on refusal");
                    continue;
                }
                r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!(q.frame(), &inner[..], "{ctx}");
                assert_eq!(
                    q.meta.status(Slot::OuterL4),
                    inner_status,
                    "{ctx}: inner status as it was"
                );
                assert_eq!(q.meta.status(Slot::OuterIp), CsumStatus::Good, "{ctx}");
            }
        }
    }
    // 4 × 4 pairs less the one with both partial, for each wire.
    assert_eq!(cells, 2 * 15);
}

/// An unknown outer IPv4 header checksum is verified before decap too.
#[test]
fn decap_checks_an_unknown_outer_ip_header_checksum() {
    let inner = build(Ip::V4, L4::Udp, &[], &payload(100));
    let mut p = pkt(&inner, verified_meta(&inner));
    apply(&mut p, &encap(TunnelKind::Geneve, Ip::V4, 3, false), &CFG).unwrap();
    let mut wire = p.frame().to_vec();
    wire[14 + 10] ^= 0x01; // outer IPv4 header checksum
    let m = OffloadMeta::from_layout(&parse_with(&wire, &CFG).unwrap());
    assert_eq!(m.status(Slot::OuterIp), CsumStatus::Unknown);
    let mut q = pkt(&wire, m);
    assert_eq!(
        apply(&mut q, &Action::Decap, &CFG),
        Err(ActionError::BadOuterChecksum(Slot::OuterIp))
    );
    assert_eq!(q.frame(), &wire[..]);
    // Put right, the same frame decapsulates.
    wire[14 + 10] ^= 0x01;
    let m = OffloadMeta::from_layout(&parse_with(&wire, &CFG).unwrap());
    let mut q = pkt(&wire, m);
    apply(&mut q, &Action::Decap, &CFG).unwrap();
    assert_eq!(q.frame(), &inner[..]);
}
