//! The frame parser on hand-built frames: exact offsets, layers and VLAN stacks for good frames,
//! and the error (layer, absolute offset, reason) plus the partial layout for malformed ones.

#[path = "parse_builder.rs"]
mod builder;

use builder::*;
use sluice_wire::{
    parse, parse_partial, parse_with, Headers, L3Kind, Layer, Layout, ParseConfig, ParseError,
    Reason, Tunnel, TunnelKind, VlanTag,
};

fn ok(frame: &[u8]) -> Layout {
    let layout = parse(frame).unwrap_or_else(|e| panic!("{e}"));
    check_invariants(frame, &layout);
    layout
}

fn err(frame: &[u8]) -> (Layout, ParseError) {
    let (layout, e) = parse_partial(frame, &ParseConfig::default());
    check_invariants(frame, &layout);
    (layout, e.expect("expected an error"))
}

fn layers(layout: &Layout) -> Vec<(Layer, u16)> {
    layout.layers.as_slice().to_vec()
}

fn tags(h: &Headers) -> Vec<(u16, u8, bool, u16)> {
    h.vlans
        .as_slice()
        .iter()
        .map(|t| (t.tpid, t.pcp, t.dei, t.vid))
        .collect()
}

use Layer::*;

// ---------------------------------------------------------------------------------------------
// Good frames
// ---------------------------------------------------------------------------------------------

#[test]
fn ipv4_tcp_with_tcp_options() {
    let f = v_ipv4_tcp();
    let l = ok(&f);
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Tcp, 34)]);
    let h = l.outer;
    assert_eq!(h.l2, Some(0));
    assert!(h.vlans.is_empty());
    assert_eq!(h.ethertype, 0x0800);
    assert_eq!((h.l3, h.l3_kind), (Some(14), Some(L3Kind::Ipv4)));
    assert_eq!((h.l4, h.l4_proto, h.payload), (Some(34), Some(6), Some(66)));
    assert_eq!(h.l3_end, Some(f.len()));
    assert_eq!(f.len(), 71);
    assert!(!h.is_fragment && !h.is_later_fragment);
    assert_eq!((l.tunnel, l.inner), (None, None));
    assert_eq!(l.innermost(), &l.outer);
}

#[test]
fn ipv4_with_ip_options() {
    let l = ok(&v_ipv4_options_udp());
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Udp, 42)]);
    assert_eq!((l.outer.l4, l.outer.payload), (Some(42), Some(50)));
}

#[test]
fn ipv6_tcp() {
    let f = v_ipv6_tcp();
    let l = ok(&f);
    assert_eq!(layers(&l), [(Eth, 0), (Ipv6, 14), (Tcp, 54)]);
    let h = l.outer;
    assert_eq!((h.ethertype, h.l3_kind), (0x86dd, Some(L3Kind::Ipv6)));
    assert_eq!(
        (h.l4, h.l4_proto, h.payload, h.l3_end),
        (Some(54), Some(6), Some(74), Some(75))
    );
}

#[test]
fn ipv6_hbh_dstopts_first_fragment() {
    let l = ok(&v_ipv6_ext_first_fragment());
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv6, 14),
            (Ipv6Ext(0), 54),
            (Ipv6Ext(60), 62),
            (Ipv6Ext(44), 78),
            (Tcp, 86)
        ]
    );
    let h = l.outer;
    assert!(h.is_fragment && !h.is_later_fragment);
    assert_eq!(
        (h.l4, h.l4_proto, h.payload),
        (Some(86), Some(6), Some(106))
    );
}

#[test]
fn ipv6_hbh_dstopts_later_fragment() {
    let f = v_ipv6_ext_later_fragment();
    let l = ok(&f);
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv6, 14),
            (Ipv6Ext(0), 54),
            (Ipv6Ext(60), 62),
            (Ipv6Ext(44), 78)
        ]
    );
    let h = l.outer;
    assert!(h.is_fragment && h.is_later_fragment);
    assert_eq!((h.l4, h.l4_proto, h.payload), (None, Some(6), Some(86)));
    assert_eq!(h.l3_end, Some(f.len()));
}

#[test]
fn ipv6_routing_ah_udp() {
    let l = ok(&v_ipv6_routing_ah_udp());
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv6, 14),
            (Ipv6Ext(43), 54),
            (Ipv6Ext(51), 70),
            (Udp, 94)
        ]
    );
    assert_eq!((l.outer.l4_proto, l.outer.payload), (Some(17), Some(102)));
}

#[test]
fn ipv6_esp_and_no_next_header_stop() {
    for proto in [50u8, 59, 253] {
        let f = cat(&[
            &eth(&[], IPV6),
            &ipv6(60, &cat(&[&ext_opts(proto, 0), b"opaque.."])),
        ]);
        let l = ok(&f);
        assert_eq!(layers(&l), [(Eth, 0), (Ipv6, 14), (Ipv6Ext(60), 54)]);
        assert_eq!(
            (l.outer.l4, l.outer.l4_proto, l.outer.payload),
            (None, Some(proto), Some(62))
        );
    }
}

#[test]
fn hop_by_hop_not_first_is_walked() {
    let chain = cat(&[&ext_opts(0, 0), &ext_opts(6, 0), &tcp(&[], b"")]);
    let l = ok(&cat(&[&eth(&[], IPV6), &ipv6(60, &chain)]));
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv6, 14),
            (Ipv6Ext(60), 54),
            (Ipv6Ext(0), 62),
            (Tcp, 70)
        ]
    );
}

#[test]
fn ipv6_jumbogram_takes_the_frame() {
    let f = v_jumbo_udp();
    let l = ok(&f);
    assert_eq!(
        layers(&l),
        [(Eth, 0), (Ipv6, 14), (Ipv6Ext(0), 54), (Udp, 62)]
    );
    assert_eq!((l.outer.l3_end, l.outer.payload), (Some(f.len()), Some(70)));
}

#[test]
fn one_tag_8100() {
    let l = ok(&v_vlan_8100());
    assert_eq!(layers(&l), [(Eth, 0), (Vlan, 12), (Ipv4, 18), (Tcp, 38)]);
    assert_eq!(tags(&l.outer), [(0x8100, 1, false, 100)]);
    assert_eq!(
        l.outer.vlans.as_slice()[0],
        VlanTag::from_tci(0x8100, 0x2064)
    );
    assert_eq!(
        (l.outer.ethertype, l.outer.l3, l.outer.payload),
        (0x0800, Some(18), Some(58))
    );
}

#[test]
fn qinq_88a8_then_8100() {
    let l = ok(&v_qinq());
    assert_eq!(
        layers(&l),
        [(Eth, 0), (Vlan, 12), (Vlan, 16), (Ipv4, 22), (Tcp, 42)]
    );
    assert_eq!(
        tags(&l.outer),
        [(0x88a8, 0, false, 10), (0x8100, 0, true, 20)]
    );
    assert_eq!(l.outer.ethertype, 0x0800);
}

#[test]
fn three_stacked_tags() {
    let l = ok(&v_three_tags());
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Vlan, 12),
            (Vlan, 16),
            (Vlan, 20),
            (Ipv4, 26),
            (Udp, 46)
        ]
    );
    assert_eq!(
        tags(&l.outer),
        [
            (0x88a8, 7, false, 1),
            (0x8100, 0, false, 2),
            (0x8100, 0, false, 3)
        ]
    );
}

#[test]
fn tag_9100() {
    let l = ok(&v_vlan_9100());
    assert_eq!(layers(&l), [(Eth, 0), (Vlan, 12), (Ipv6, 18), (Icmpv6, 58)]);
    assert_eq!(tags(&l.outer), [(0x9100, 0, false, 0x0fff)]);
}

#[test]
fn eight_tags_ok() {
    let l = ok(&v_eight_tags());
    let mut want = vec![(Eth, 0)];
    want.extend((0..8).map(|i| (Vlan, 12 + 4 * i)));
    want.extend([(Ipv4, 46), (Tcp, 66)]);
    assert_eq!(layers(&l), want);
    assert_eq!(l.outer.vlans.len(), 8);
    assert_eq!(l.outer.vlans.as_slice()[7].vid, 8);
}

#[test]
fn nine_tags_is_too_many() {
    let mut t = eight_tags();
    t.push((0x8100, 9));
    let (l, e) = err(&cat(&[&eth(&t, IPV4), &ipv4(6, &[], &tcp(&[], b""))]));
    assert_eq!(
        e,
        ParseError {
            layer: Vlan,
            offset: 44,
            reason: Reason::TooManyVlanTags
        }
    );
    assert_eq!(l.outer.vlans.len(), 8);
    assert_eq!(l.layers.len(), 9);
    assert_eq!(l.outer.l3, None);
}

#[test]
fn non_ip_ethertypes_stop_without_error() {
    for ty in [0x0806u16, 0x05dc, 0x0026, 0x88cc] {
        let f = cat(&[&eth(&[(0x8100, 5)], ty), &[0u8; 46]]);
        let l = ok(&f);
        assert_eq!(layers(&l), [(Eth, 0), (Vlan, 12)]);
        assert_eq!(
            (l.outer.ethertype, l.outer.l3, l.outer.payload),
            (ty, None, None)
        );
    }
}

#[test]
fn plain_udp() {
    let f = v_udp();
    let l = ok(&f);
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Udp, 34)]);
    assert_eq!(
        (l.outer.l4_proto, l.outer.payload, l.outer.l3_end),
        (Some(17), Some(42), Some(52))
    );
}

#[test]
fn plain_sctp() {
    let l = ok(&v_sctp());
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Sctp, 34)]);
    assert_eq!((l.outer.l4_proto, l.outer.payload), (Some(132), Some(46)));
}

#[test]
fn plain_icmp() {
    let l = ok(&v_icmp());
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Icmp, 34)]);
    assert_eq!((l.outer.l4_proto, l.outer.payload), (Some(1), Some(42)));
}

#[test]
fn plain_icmpv6() {
    let l = ok(&v_icmpv6());
    assert_eq!(layers(&l), [(Eth, 0), (Ipv6, 14), (Icmpv6, 54)]);
    assert_eq!((l.outer.l4_proto, l.outer.payload), (Some(58), Some(62)));
}

#[test]
fn unknown_ip_protocol_is_payload() {
    let l = ok(&cat(&[&eth(&[], IPV4), &ipv4(103, &[], b"pim-bytes")]));
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14)]);
    assert_eq!(
        (l.outer.l4, l.outer.l4_proto, l.outer.payload),
        (None, Some(103), Some(34))
    );
}

#[test]
fn ipv4_fragments() {
    let first = cat(&[
        &eth(&[], IPV4),
        &ipv4_frag(17, &[], 0x2000, &udp(1, 2, b"frag")),
    ]);
    let l = ok(&first);
    assert!(l.outer.is_fragment && !l.outer.is_later_fragment);
    assert_eq!(l.outer.l4, Some(34));
    let later = cat(&[
        &eth(&[], IPV4),
        &ipv4_frag(17, &[], 0x0003, b"no udp header here"),
    ]);
    let l = ok(&later);
    assert!(l.outer.is_fragment && l.outer.is_later_fragment);
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14)]);
    assert_eq!(
        (l.outer.l4, l.outer.l4_proto, l.outer.payload),
        (None, Some(17), Some(34))
    );
}

#[test]
fn vxlan_carrying_qinq_ipv4_tcp() {
    let f = v_vxlan_qinq();
    let l = ok(&f);
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv4, 14),
            (Udp, 34),
            (Vxlan, 42),
            (Eth, 50),
            (Vlan, 62),
            (Vlan, 66),
            (Ipv4, 72),
            (Tcp, 92)
        ]
    );
    assert_eq!((l.outer.l4, l.outer.payload), (Some(34), Some(42)));
    assert_eq!(
        l.tunnel,
        Some(Tunnel {
            kind: TunnelKind::Vxlan,
            offset: 42,
            len: 8,
            id: Some(0x12_3456),
            proto: TEB
        })
    );
    let inner = l.inner.expect("inner");
    assert_eq!(inner.l2, Some(50));
    assert_eq!(
        tags(&inner),
        [(0x88a8, 0, false, 100), (0x8100, 0, false, 200)]
    );
    assert_eq!(
        (inner.l3, inner.l4, inner.payload, inner.l3_end),
        (Some(72), Some(92), Some(112), Some(114))
    );
    assert_eq!(l.innermost(), &inner);
}

#[test]
fn vxlan_without_i_flag_has_no_vni() {
    let inner = cat(&[&eth(&[], IPV4), &ipv4(6, &[], &tcp(&[], b""))]);
    let f = cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &[], &udp(1, 4789, &vxlan(None, &inner))),
    ]);
    let l = ok(&f);
    assert_eq!(l.tunnel.map(|t| t.id), Some(None));
    assert_eq!(l.inner.and_then(|h| h.l4), Some(84));
}

#[test]
fn geneve_two_options_tagged_ipv6_udp() {
    let l = ok(&v_geneve_ipv6_udp());
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv4, 14),
            (Udp, 34),
            (Geneve, 42),
            (Eth, 70),
            (Vlan, 82),
            (Ipv6, 88),
            (Udp, 128)
        ]
    );
    assert_eq!(
        l.tunnel,
        Some(Tunnel {
            kind: TunnelKind::Geneve,
            offset: 42,
            len: 28,
            id: Some(0xab_cdef),
            proto: TEB
        })
    );
    let inner = l.inner.expect("inner");
    assert_eq!(tags(&inner), [(0x8100, 0, false, 7)]);
    assert_eq!(
        (inner.l2, inner.l3_kind, inner.payload),
        (Some(70), Some(L3Kind::Ipv6), Some(136))
    );
}

#[test]
fn geneve_carrying_ipv4() {
    let l = ok(&v_geneve_ipv4());
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv4, 14),
            (Udp, 34),
            (Geneve, 42),
            (Ipv4, 50),
            (Tcp, 70)
        ]
    );
    let inner = l.inner.expect("inner");
    assert_eq!(
        (inner.l2, inner.ethertype, inner.l3),
        (None, 0x0800, Some(50))
    );
    assert_eq!(l.tunnel.map(|t| (t.proto, t.id)), Some((IPV4, Some(77))));
}

#[test]
fn geneve_unknown_protocol_has_no_inner() {
    let tun = geneve(&[], 0x88b5, 1, b"whatever");
    let l = ok(&cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &[], &udp(1, 6081, &tun)),
    ]));
    assert_eq!(l.tunnel.map(|t| t.proto), Some(0x88b5));
    assert_eq!(l.inner, None);
    assert_eq!(layers(&l).last(), Some(&(Geneve, 42)));
}

#[test]
fn gre_checksum_key_seq_carrying_tagged_ethernet() {
    let l = ok(&v_gre_cks_eth_vlan());
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv4, 14),
            (Gre, 34),
            (Eth, 50),
            (Vlan, 62),
            (Ipv4, 68),
            (Udp, 88)
        ]
    );
    assert_eq!(
        (l.outer.l4, l.outer.l4_proto, l.outer.payload),
        (Some(34), Some(47), Some(50))
    );
    assert_eq!(
        l.tunnel,
        Some(Tunnel {
            kind: TunnelKind::Gre,
            offset: 34,
            len: 16,
            id: Some(0xcafe_f00d),
            proto: TEB
        })
    );
    let inner = l.inner.expect("inner");
    assert_eq!(tags(&inner), [(0x8100, 0, false, 42)]);
    assert_eq!((inner.l2, inner.payload), (Some(50), Some(96)));
}

#[test]
fn gre_key_only_and_seq_only() {
    let inner = ipv4(6, &[], &tcp(&[], b""));
    let f = cat(&[
        &eth(&[], IPV4),
        &ipv4(47, &[], &gre(false, Some(7), None, IPV4, &inner)),
    ]);
    assert_eq!(ok(&f).tunnel.map(|t| (t.len, t.id)), Some((8, Some(7))));
    let f = cat(&[
        &eth(&[], IPV4),
        &ipv4(47, &[], &gre(true, None, Some(7), IPV4, &inner)),
    ]);
    let l = ok(&f);
    assert_eq!(l.tunnel.map(|t| (t.len, t.id)), Some((12, None)));
    assert_eq!(l.inner.and_then(|h| h.l3), Some(46));
}

#[test]
fn gre_carrying_ipv6() {
    let l = ok(&v_gre_ipv6());
    assert_eq!(
        layers(&l),
        [(Eth, 0), (Ipv4, 14), (Gre, 34), (Ipv6, 38), (Tcp, 78)]
    );
    let inner = l.inner.expect("inner");
    assert_eq!(
        (inner.l2, inner.ethertype, inner.l3_kind),
        (None, IPV6, Some(L3Kind::Ipv6))
    );
    assert_eq!(
        l.tunnel.map(|t| (t.len, t.id, t.proto)),
        Some((4, None, IPV6))
    );
}

#[test]
fn gre_over_ipv6() {
    let l = ok(&v_gre_over_ipv6());
    assert_eq!(
        layers(&l),
        [(Eth, 0), (Ipv6, 14), (Gre, 54), (Ipv4, 62), (Icmp, 82)]
    );
    assert_eq!(l.tunnel.map(|t| t.id), Some(Some(5)));
    assert_eq!(l.outer.payload, Some(62));
}

#[test]
fn vxlan_on_a_custom_port() {
    let f = v_vxlan_port_8472();
    let l = parse_with(&f, &cfg_8472()).expect("custom config");
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv4, 14),
            (Udp, 34),
            (Vxlan, 42),
            (Eth, 50),
            (Ipv4, 64),
            (Tcp, 84)
        ]
    );
    // The default configuration does not know port 8472: plain UDP.
    let l = ok(&f);
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Udp, 34)]);
    assert_eq!((l.outer.payload, l.tunnel, l.inner), (Some(42), None, None));
}

#[test]
fn tunnels_off_leaves_udp_and_gre_opaque() {
    let cfg = ParseConfig {
        parse_tunnels: false,
        ..ParseConfig::default()
    };
    let l = parse_with(&v_vxlan_qinq(), &cfg).expect("vxlan");
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Udp, 34)]);
    let l = parse_with(&v_gre_ipv6(), &cfg).expect("gre");
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14)]);
    assert_eq!(
        (l.outer.l4, l.outer.l4_proto, l.outer.payload),
        (None, Some(47), Some(34))
    );
    assert_eq!(l.tunnel, None);
}

#[test]
fn nested_tunnels_are_not_descended() {
    // VXLAN inside VXLAN: the inner UDP to 4789 is plain UDP.
    let f = v_vxlan_qinq();
    let l = ok(&cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &[], &udp(2, 4789, &vxlan(Some(1), &f))),
    ]));
    let inner = l.inner.expect("inner");
    assert_eq!((inner.l4, inner.payload), (Some(84), Some(92)));
    assert_eq!(layers(&l).last(), Some(&(Udp, 84)));
    // GRE inside GRE: opaque protocol 47.
    let g = v_gre_ipv6();
    let l = ok(&cat(&[
        &eth(&[], IPV4),
        &ipv4(47, &[], &gre(false, None, None, TEB, &g)),
    ]));
    let inner = l.inner.expect("inner");
    assert_eq!(
        (inner.l4, inner.l4_proto, inner.payload),
        (None, Some(47), Some(72))
    );
}

#[test]
fn ethernet_padding_is_outside_l3() {
    let f = v_padded();
    let l = ok(&f);
    assert_eq!(f.len(), 60);
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Tcp, 34)]);
    assert_eq!((l.outer.payload, l.outer.l3_end), (Some(54), Some(54)));
}

// ---------------------------------------------------------------------------------------------
// Truncation of every good vector
// ---------------------------------------------------------------------------------------------

/// Every prefix of every good vector: no panic; either the full layout (a cut in the Ethernet
/// padding, or a jumbogram's payload) or an error naming a layer of the full layout at or before
/// the cut. Before the end of the outer IP packet, the failing layer is exactly the header that
/// contains the cut (Ethernet, the VLAN tag whose TCI/type holds it, or the outer IP header, whose
/// length no longer fits).
#[test]
fn every_truncation_prefix() {
    for (name, f, cfg) in good_vectors() {
        let full = parse_with(&f, &cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
        let full_layers = layers(&full);
        let l3 = full.outer.l3.expect("every vector has IP");
        let l3_layer = full_layers
            .iter()
            .find(|(_, o)| usize::from(*o) == l3)
            .expect("l3")
            .0;
        let l3_end = full.outer.l3_end.expect("l3_end");
        for cut in 0..f.len() {
            let frame = &f[..cut];
            let (l, e) = parse_partial(frame, &cfg);
            check_invariants(frame, &l);
            let got = layers(&l);
            assert!(
                full_layers.starts_with(&got),
                "{name}[..{cut}]: {got:?} vs {full_layers:?}"
            );
            let Some(e) = e else {
                assert!(
                    name == "jumbo_udp" || cut >= l3_end,
                    "{name}[..{cut}] parsed"
                );
                continue;
            };
            assert!(
                full_layers.contains(&(e.layer, e.offset as u16)),
                "{name}[..{cut}]: {e}"
            );
            assert!(e.offset <= cut, "{name}[..{cut}]: {e}");
            if let Reason::Truncated { need, have } = e.reason {
                assert_eq!(have, cut - e.offset, "{name}[..{cut}]: {e}");
                assert!(need > have, "{name}[..{cut}]: {e}");
            }
            if name == "jumbo_udp" {
                continue;
            }
            let want = if cut < 14 {
                (Eth, 0)
            } else if cut < l3 {
                (Vlan, 12 + 4 * ((cut - 14) / 4))
            } else {
                (l3_layer, l3)
            };
            assert_eq!((e.layer, e.offset), want, "{name}[..{cut}]: {e}");
            if cut >= l3 + 20 && l3_layer == Ipv4 || cut >= l3 + 40 {
                assert!(matches!(
                    e.reason,
                    Reason::BadTotalLength { .. } | Reason::Truncated { .. }
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed frames
// ---------------------------------------------------------------------------------------------

#[test]
fn empty_and_short_frames() {
    let (l, e) = err(&[]);
    assert_eq!(
        e,
        ParseError {
            layer: Eth,
            offset: 0,
            reason: Reason::Truncated { need: 14, have: 0 }
        }
    );
    assert!(l.layers.is_empty() && l.outer.l2.is_none());
    let (_, e) = err(&eth(&[(0x8100, 1)], IPV4)[..16]);
    assert_eq!(
        e,
        ParseError {
            layer: Vlan,
            offset: 12,
            reason: Reason::Truncated { need: 6, have: 4 }
        }
    );
}

#[test]
fn ipv4_ihl_below_5() {
    let mut f = v_ipv4_tcp();
    f[14] = 0x44;
    let (l, e) = err(&f);
    assert_eq!(
        e,
        ParseError {
            layer: Ipv4,
            offset: 14,
            reason: Reason::BadIhl(4)
        }
    );
    assert_eq!(layers(&l), [(Eth, 0)]);
    assert_eq!((l.outer.ethertype, l.outer.l3), (0x0800, None));
}

#[test]
fn ipv4_bad_version() {
    let mut f = v_ipv4_tcp();
    f[14] = 0x65;
    assert_eq!(err(&f).1.reason, Reason::BadVersion(6));
    let mut f = v_ipv6_tcp();
    f[14] = 0x40;
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Ipv6,
            offset: 14,
            reason: Reason::BadVersion(4)
        }
    );
}

#[test]
fn ipv4_ihl_beyond_frame() {
    let f = cat(&[&eth(&[], IPV4), &ipv4(6, &[], &[])]);
    let mut f = f;
    f[14] = 0x46;
    assert_eq!(err(&f).1.reason, Reason::Truncated { need: 24, have: 20 });
}

#[test]
fn ipv4_total_length_beyond_frame() {
    let mut f = v_ipv4_tcp();
    f[16..18].copy_from_slice(&100u16.to_be_bytes());
    let (l, e) = err(&f);
    let reason = Reason::BadTotalLength {
        claimed: 100,
        available: 57,
    };
    assert_eq!(
        e,
        ParseError {
            layer: Ipv4,
            offset: 14,
            reason
        }
    );
    assert_eq!(layers(&l), [(Eth, 0)]);
}

#[test]
fn ipv4_total_length_below_header() {
    let mut f = v_ipv4_options_udp();
    f[16..18].copy_from_slice(&27u16.to_be_bytes());
    let reason = Reason::BadTotalLength {
        claimed: 27,
        available: 40,
    };
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Ipv4,
            offset: 14,
            reason
        }
    );
}

#[test]
fn ipv4_option_overflow() {
    for opts in [
        [0x94, 9, 0, 0, 1, 1, 1, 0],
        [1, 1, 1, 0x07, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 0x44],
    ] {
        let f = cat(&[&eth(&[], IPV4), &ipv4(17, &opts, &udp(1, 2, b""))]);
        assert_eq!(
            err(&f).1,
            ParseError {
                layer: Ipv4,
                offset: 14,
                reason: Reason::OptionOverflow
            }
        );
    }
    // An option that exactly fills the area, and EOL followed by garbage, are fine.
    for opts in [
        [0x07, 8, 4, 0, 0, 0, 0, 0],
        [0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    ] {
        ok(&cat(&[&eth(&[], IPV4), &ipv4(17, &opts, &udp(1, 2, b""))]));
    }
}

#[test]
fn tcp_data_offset_below_5() {
    let mut f = v_ipv4_tcp();
    f[34 + 12] = 0x40;
    let (l, e) = err(&f);
    assert_eq!(
        e,
        ParseError {
            layer: Tcp,
            offset: 34,
            reason: Reason::BadDataOffset(4)
        }
    );
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14)]);
    assert_eq!(
        (l.outer.l3, l.outer.l4_proto, l.outer.l4, l.outer.payload),
        (Some(14), Some(6), None, None)
    );
}

#[test]
fn tcp_header_beyond_segment() {
    let mut f = v_ipv4_tcp();
    f[34 + 12] = 0xf0;
    let reason = Reason::Truncated { need: 60, have: 37 };
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Tcp,
            offset: 34,
            reason
        }
    );
}

#[test]
fn l4_bounded_by_ip_total_length_not_frame() {
    // A TCP header cut by the IP total length but followed by Ethernet padding.
    let mut f = cat(&[&eth(&[], IPV4), &ipv4(6, &[], &tcp(&[], b""))[..30]]);
    f[16..18].copy_from_slice(&30u16.to_be_bytes());
    f.resize(60, 0xff);
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Tcp,
            offset: 34,
            reason: Reason::Truncated { need: 20, have: 10 }
        }
    );
}

#[test]
fn udp_length_below_8_and_beyond_payload() {
    let mut f = v_udp();
    f[38..40].copy_from_slice(&7u16.to_be_bytes());
    let (l, e) = err(&f);
    assert_eq!(
        e,
        ParseError {
            layer: Udp,
            offset: 34,
            reason: Reason::BadUdpLength(7)
        }
    );
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14)]);
    f[38..40].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(err(&f).1.reason, Reason::BadUdpLength(19));
    f[38..40].copy_from_slice(&18u16.to_be_bytes());
    ok(&f);
    // A UDP length of 0 is only a jumbogram's.
    f[38..40].copy_from_slice(&0u16.to_be_bytes());
    assert_eq!(err(&f).1.reason, Reason::BadUdpLength(0));
}

#[test]
fn ipv6_payload_length_beyond_frame() {
    let mut f = v_ipv6_tcp();
    f[18..20].copy_from_slice(&22u16.to_be_bytes());
    let reason = Reason::BadTotalLength {
        claimed: 62,
        available: 61,
    };
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Ipv6,
            offset: 14,
            reason
        }
    );
}

#[test]
fn ipv6_extension_chain_running_off_the_end() {
    // A hop-by-hop header claiming 48 bytes in an 8-byte payload.
    let f = cat(&[&eth(&[], IPV6), &ipv6(0, &[6, 5, 1, 4, 0, 0, 0, 0])]);
    let (l, e) = err(&f);
    let reason = Reason::Truncated { need: 48, have: 8 };
    assert_eq!(
        e,
        ParseError {
            layer: Ipv6Ext(0),
            offset: 54,
            reason
        }
    );
    assert_eq!(layers(&l), [(Eth, 0), (Ipv6, 14)]);
    assert_eq!(
        (l.outer.l3, l.outer.l3_end, l.outer.l4_proto),
        (Some(14), Some(62), None)
    );
    // A chain whose last header is cut by the payload length (not the frame).
    let chain = cat(&[&ext_opts(43, 0), &routing(6, 2)[..16]]);
    let mut f = cat(&[&eth(&[], IPV6), &ipv6(60, &chain)]);
    f.extend_from_slice(&[0; 16]);
    let reason = Reason::Truncated { need: 24, have: 16 };
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Ipv6Ext(43),
            offset: 62,
            reason
        }
    );
    // Too short for even the minimum extension header.
    let f = cat(&[&eth(&[], IPV6), &ipv6(44, &[6, 0, 0, 0])]);
    let reason = Reason::Truncated { need: 8, have: 4 };
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Ipv6Ext(44),
            offset: 54,
            reason
        }
    );
}

#[test]
fn nine_extension_headers() {
    let mut chain = Vec::new();
    for i in 0..9 {
        chain.extend(ext_opts(if i == 8 { 6 } else { 60 }, 0));
    }
    chain.extend(tcp(&[], b""));
    let (l, e) = err(&cat(&[&eth(&[], IPV6), &ipv6(60, &chain)]));
    assert_eq!(
        e,
        ParseError {
            layer: Ipv6Ext(60),
            offset: 118,
            reason: Reason::TooManyExtensionHeaders
        }
    );
    assert_eq!(l.layers.len(), 2 + 8);
    // Eight are fine.
    let chain = cat(&[&chain[8..], &[]]);
    let l = ok(&cat(&[&eth(&[], IPV6), &ipv6(60, &chain)]));
    assert_eq!(layers(&l).last(), Some(&(Tcp, 118)));
}

#[test]
fn vxlan_truncated() {
    let f = cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &[], &udp(1, 4789, &[8, 0, 0, 0, 0])),
    ]);
    let (l, e) = err(&f);
    let reason = Reason::Truncated { need: 8, have: 5 };
    assert_eq!(
        e,
        ParseError {
            layer: Vxlan,
            offset: 42,
            reason
        }
    );
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Udp, 34)]);
    assert_eq!((l.tunnel, l.inner), (None, None));
}

#[test]
fn geneve_opt_len_overflow() {
    let tun = geneve(&[(1, 1, &[0; 4])], TEB, 1, &[]);
    let mut f = cat(&[&eth(&[], IPV4), &ipv4(17, &[], &udp(1, 6081, &tun))]);
    f[42] = 10;
    let (l, e) = err(&f);
    assert_eq!(
        e,
        ParseError {
            layer: Geneve,
            offset: 42,
            reason: Reason::GeneveOptionOverflow
        }
    );
    assert_eq!(l.tunnel, None);
}

#[test]
fn geneve_option_tlv_overflow() {
    let opts: [(u16, u8, &[u8]); 2] = [(1, 1, &[0; 4]), (2, 2, &[0; 8])];
    let tun = geneve(&opts, TEB, 1, &v_ipv4_tcp());
    let mut f = cat(&[&eth(&[], IPV4), &ipv4(17, &[], &udp(1, 6081, &tun))]);
    // The second option (at 42 + 8 + 8) claims 3 words of data in a 2-word space.
    assert_eq!(f[42 + 16 + 3], 2);
    f[42 + 16 + 3] = 3;
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Geneve,
            offset: 42,
            reason: Reason::GeneveOptionOverflow
        }
    );
}

#[test]
fn geneve_bad_version() {
    let mut f = v_geneve_ipv4();
    f[42] |= 0x40;
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Geneve,
            offset: 42,
            reason: Reason::BadField("geneve version")
        }
    );
}

#[test]
fn gre_version_1_and_routing_bit() {
    let mut f = v_gre_ipv6();
    f[35] = 0x01;
    let (l, e) = err(&f);
    assert_eq!(
        e,
        ParseError {
            layer: Gre,
            offset: 34,
            reason: Reason::BadField("gre version")
        }
    );
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14)]);
    assert_eq!(
        (l.outer.l4_proto, l.outer.l4, l.tunnel),
        (Some(47), None, None)
    );
    let mut f = v_gre_ipv6();
    f[34] = 0x40;
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Gre,
            offset: 34,
            reason: Reason::BadField("gre routing")
        }
    );
}

#[test]
fn gre_optional_fields_truncated() {
    let f = cat(&[
        &eth(&[], IPV4),
        &ipv4(47, &[], &[0xb0, 0, 0x65, 0x58, 0, 0, 0, 0]),
    ]);
    let reason = Reason::Truncated { need: 16, have: 8 };
    assert_eq!(
        err(&f).1,
        ParseError {
            layer: Gre,
            offset: 34,
            reason
        }
    );
}

#[test]
fn error_inside_the_inner_frame() {
    let mut f = v_vxlan_qinq();
    f[72] = 0x43;
    let (l, e) = err(&f);
    assert_eq!(
        e,
        ParseError {
            layer: Ipv4,
            offset: 72,
            reason: Reason::BadIhl(3)
        }
    );
    assert_eq!(
        layers(&l),
        [
            (Eth, 0),
            (Ipv4, 14),
            (Udp, 34),
            (Vxlan, 42),
            (Eth, 50),
            (Vlan, 62),
            (Vlan, 66)
        ]
    );
    assert_eq!(l.outer, ok(&v_vxlan_qinq()).outer);
    assert_eq!(l.tunnel.map(|t| t.offset), Some(42));
    let inner = l.inner.expect("partial inner");
    assert_eq!(
        (inner.l2, inner.vlans.len(), inner.ethertype, inner.l3),
        (Some(50), 2, IPV4, None)
    );

    // The inner frame is bounded by the UDP datagram: an inner TCP header cut by the outer UDP
    // length names the inner TCP at its absolute offset.
    let mut f = v_gre_ipv6();
    f[78 + 12] = 0x30;
    let (l, e) = err(&f);
    assert_eq!(
        e,
        ParseError {
            layer: Tcp,
            offset: 78,
            reason: Reason::BadDataOffset(3)
        }
    );
    assert_eq!(layers(&l), [(Eth, 0), (Ipv4, 14), (Gre, 34), (Ipv6, 38)]);
    assert_eq!(
        l.inner.map(|h| (h.l3, h.l4_proto, h.l4)),
        Some((Some(38), Some(6), None))
    );
}

#[test]
fn inner_ethernet_truncated_by_udp_length() {
    let f = cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &[], &udp(1, 4789, &vxlan(Some(3), &[0; 10]))),
    ]);
    let (l, e) = err(&f);
    let reason = Reason::Truncated { need: 14, have: 10 };
    assert_eq!(
        e,
        ParseError {
            layer: Eth,
            offset: 50,
            reason
        }
    );
    assert!(l.tunnel.is_some());
    assert_eq!(l.inner, Some(Headers::default()));
}

#[test]
fn extra_tunnel_ports_are_added_to_the_defaults_and_a_full_set_is_an_error() {
    use sluice_wire::{ParseConfig, PortSet};
    let cfg = ParseConfig::with_tunnel_ports(&[8472], &[6082]).unwrap();
    for (set, ports) in [
        (&cfg.vxlan_ports, [4789, 8472]),
        (&cfg.geneve_ports, [6081, 6082]),
    ] {
        for p in ports {
            assert!(set.contains(p), "{p}");
        }
    }
    let many: Vec<u16> = (1..=PortSet::CAPACITY as u16 + 1).collect();
    let e = ParseConfig::with_tunnel_ports(&[], &many).unwrap_err();
    assert_eq!(
        e,
        format!("too many Geneve ports (at most {})", PortSet::CAPACITY)
    );
}
