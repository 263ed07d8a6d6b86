//! Byte builders for the parser tests (shared by `parse_vectors.rs` and `parse_proptest.rs`
//! through `#[path]`). They write headers by hand, independent of the crate's header modules, and
//! fill in length fields from what they wrap; checksums are left zero (the parser ignores them).
#![allow(dead_code, missing_docs)]

/// Concatenates byte strings.
pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Ethernet II header with VLAN tags `(tpid, tci)`, outermost first, then `ethertype`.
pub fn eth(tags: &[(u16, u16)], ethertype: u16) -> Vec<u8> {
    let mut v = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
    for &(tpid, tci) in tags {
        v.extend_from_slice(&tpid.to_be_bytes());
        v.extend_from_slice(&tci.to_be_bytes());
    }
    v.extend_from_slice(&ethertype.to_be_bytes());
    v
}

/// IPv4 header (IHL from `options`, padded by the caller to a multiple of 4) + `payload`, with
/// the given flags/fragment-offset word.
pub fn ipv4_frag(proto: u8, options: &[u8], frag: u16, payload: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let hlen = 20 + options.len();
    let total = (hlen + payload.len()) as u16;
    let mut v = vec![0x40 | (hlen / 4) as u8, 0];
    v.extend_from_slice(&total.to_be_bytes());
    v.extend_from_slice(&[0x12, 0x34]);
    v.extend_from_slice(&frag.to_be_bytes());
    v.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    v.extend_from_slice(options);
    v.extend_from_slice(payload);
    v
}

/// Unfragmented IPv4 (DF set).
pub fn ipv4(proto: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
    ipv4_frag(proto, options, 0x4000, payload)
}

/// IPv6 header + `payload` (extension headers included), payload length filled in.
pub fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x60, 0, 0, 0];
    v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    v.extend_from_slice(&[next, 64]);
    v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    v.extend_from_slice(&[0; 11]);
    v.push(1);
    v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    v.extend_from_slice(&[0; 11]);
    v.push(2);
    v.extend_from_slice(payload);
    v
}

/// A hop-by-hop, routing or destination-options header of `(units + 1) * 8` bytes (PadN filled).
pub fn ext_opts(next: u8, units: u8) -> Vec<u8> {
    let len = (usize::from(units) + 1) * 8;
    let mut v = vec![next, units, 1, (len - 4) as u8];
    v.resize(len, 0);
    v
}

/// A routing header (type 4, segments left 0) of `(units + 1) * 8` bytes.
pub fn routing(next: u8, units: u8) -> Vec<u8> {
    let len = (usize::from(units) + 1) * 8;
    let mut v = vec![next, units, 4, 0];
    v.resize(len, 0);
    v
}

/// An IPv6 fragment header: offset in 8-byte units, M flag.
pub fn frag6(next: u8, offset: u16, more: bool) -> Vec<u8> {
    let word = (offset << 3) | u16::from(more);
    let mut v = vec![next, 0];
    v.extend_from_slice(&word.to_be_bytes());
    v.extend_from_slice(&0xdead_beef_u32.to_be_bytes());
    v
}

/// An authentication header with `icv_words` 32-bit words of ICV: `(icv_words + 3) * 4` bytes.
pub fn ah(next: u8, icv_words: u8) -> Vec<u8> {
    let payload_len = icv_words + 1; // (len + 2) * 4 = 12 + 4 * icv_words
    let total = (usize::from(payload_len) + 2) * 4;
    let mut v = vec![next, payload_len, 0, 0];
    v.extend_from_slice(&0x100_u32.to_be_bytes()); // SPI
    v.extend_from_slice(&1_u32.to_be_bytes()); // sequence
    v.resize(total, 0xaa);
    v
}

/// TCP header with `options` (padded by the caller to a multiple of 4) + payload.
pub fn tcp(options: &[u8], payload: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let doff = ((20 + options.len()) / 4) as u8;
    let mut v = vec![
        0x30,
        0x39,
        0x00,
        0x50,
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        0,
        doff << 4,
        0x18,
        0xff,
        0xff,
    ];
    v.extend_from_slice(&[0, 0, 0, 0]);
    v.extend_from_slice(options);
    v.extend_from_slice(payload);
    v
}

/// UDP header (length filled in) + payload.
pub fn udp(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&src.to_be_bytes());
    v.extend_from_slice(&dst.to_be_bytes());
    v.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(payload);
    v
}

/// SCTP common header + payload.
pub fn sctp(payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x0b, 0x59, 0x0b, 0x59, 0, 0, 0, 7, 0, 0, 0, 0];
    v.extend_from_slice(payload);
    v
}

/// ICMP / ICMPv6 echo request header + payload.
pub fn icmp(ty: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![ty, 0, 0, 0, 0, 1, 0, 1];
    v.extend_from_slice(payload);
    v
}

/// VXLAN header (I flag set when `vni` is `Some`) + inner frame.
pub fn vxlan(vni: Option<u32>, inner: &[u8]) -> Vec<u8> {
    let mut v = vec![if vni.is_some() { 0x08 } else { 0 }, 0, 0, 0];
    v.extend_from_slice(&(vni.unwrap_or(0) << 8).to_be_bytes());
    v.extend_from_slice(inner);
    v
}

/// Geneve header with options `(class, type, data)` (data a multiple of 4 bytes) + inner.
pub fn geneve(options: &[(u16, u8, &[u8])], proto: u16, vni: u32, inner: &[u8]) -> Vec<u8> {
    let mut opts = Vec::new();
    for &(class, ty, data) in options {
        assert_eq!(data.len() % 4, 0);
        opts.extend_from_slice(&class.to_be_bytes());
        opts.push(ty);
        opts.push((data.len() / 4) as u8);
        opts.extend_from_slice(data);
    }
    let mut v = vec![(opts.len() / 4) as u8, 0];
    v.extend_from_slice(&proto.to_be_bytes());
    v.extend_from_slice(&(vni << 8).to_be_bytes());
    v.extend_from_slice(&opts);
    v.extend_from_slice(inner);
    v
}

/// GRE header with optional checksum, key and sequence number + inner.
pub fn gre(
    checksum: bool,
    key: Option<u32>,
    seq: Option<u32>,
    proto: u16,
    inner: &[u8],
) -> Vec<u8> {
    let mut flags = 0u16;
    if checksum {
        flags |= 0x8000;
    }
    if key.is_some() {
        flags |= 0x2000;
    }
    if seq.is_some() {
        flags |= 0x1000;
    }
    let mut v = Vec::new();
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&proto.to_be_bytes());
    if checksum {
        v.extend_from_slice(&[0, 0, 0, 0]);
    }
    if let Some(k) = key {
        v.extend_from_slice(&k.to_be_bytes());
    }
    if let Some(s) = seq {
        v.extend_from_slice(&s.to_be_bytes());
    }
    v.extend_from_slice(inner);
    v
}

// ---------------------------------------------------------------------------------------------
// The good vectors. Offsets are asserted in `parse_vectors.rs`.
// ---------------------------------------------------------------------------------------------

use sluice_wire::ParseConfig;

pub const TCP_OPTS: [u8; 12] = [2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7];
pub const IP_OPTS: [u8; 8] = [0x94, 4, 0, 0, 1, 1, 1, 0];
pub const IPV4: u16 = 0x0800;
pub const IPV6: u16 = 0x86dd;
pub const TEB: u16 = 0x6558;

pub fn v_ipv4_tcp() -> Vec<u8> {
    cat(&[&eth(&[], IPV4), &ipv4(6, &[], &tcp(&TCP_OPTS, b"hello"))])
}
pub fn v_ipv4_options_udp() -> Vec<u8> {
    cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &IP_OPTS, &udp(1000, 2000, b"data")),
    ])
}
pub fn v_ipv6_tcp() -> Vec<u8> {
    cat(&[&eth(&[], IPV6), &ipv6(6, &tcp(&[], b"x"))])
}
pub fn v_ipv6_ext_first_fragment() -> Vec<u8> {
    let chain = cat(&[
        &ext_opts(60, 0),
        &ext_opts(44, 1),
        &frag6(6, 0, true),
        &tcp(&[], b"abc"),
    ]);
    cat(&[&eth(&[], IPV6), &ipv6(0, &chain)])
}
pub fn v_ipv6_ext_later_fragment() -> Vec<u8> {
    let chain = cat(&[
        &ext_opts(60, 0),
        &ext_opts(44, 1),
        &frag6(6, 100, false),
        b"tail-bytes",
    ]);
    cat(&[&eth(&[], IPV6), &ipv6(0, &chain)])
}
pub fn v_ipv6_routing_ah_udp() -> Vec<u8> {
    let chain = cat(&[&routing(51, 1), &ah(17, 3), &udp(1, 2, b"zz")]);
    cat(&[&eth(&[], IPV6), &ipv6(43, &chain)])
}
pub fn v_vlan_8100() -> Vec<u8> {
    cat(&[
        &eth(&[(0x8100, 0x2064)], IPV4),
        &ipv4(6, &[], &tcp(&[], b"")),
    ])
}
pub fn v_qinq() -> Vec<u8> {
    cat(&[
        &eth(&[(0x88a8, 10), (0x8100, 0x1000 | 20)], IPV4),
        &ipv4(6, &[], &tcp(&[], b"q")),
    ])
}
pub fn v_three_tags() -> Vec<u8> {
    let tags = [(0x88a8, 0xe001), (0x8100, 2), (0x8100, 3)];
    cat(&[&eth(&tags, IPV4), &ipv4(17, &[], &udp(5, 6, b""))])
}
pub fn v_vlan_9100() -> Vec<u8> {
    cat(&[
        &eth(&[(0x9100, 0x0fff)], IPV6),
        &ipv6(58, &icmp(128, b"ping")),
    ])
}
pub fn eight_tags() -> Vec<(u16, u16)> {
    (1..=8)
        .map(|i| (if i == 1 { 0x88a8 } else { 0x8100 }, i))
        .collect()
}
pub fn v_eight_tags() -> Vec<u8> {
    cat(&[&eth(&eight_tags(), IPV4), &ipv4(6, &[], &tcp(&[], b""))])
}
pub fn v_udp() -> Vec<u8> {
    cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &[], &udp(40000, 53, b"0123456789")),
    ])
}
pub fn v_sctp() -> Vec<u8> {
    cat(&[&eth(&[], IPV4), &ipv4(132, &[], &sctp(&[1, 0, 0, 4]))])
}
pub fn v_icmp() -> Vec<u8> {
    cat(&[&eth(&[], IPV4), &ipv4(1, &[], &icmp(8, b"ping"))])
}
pub fn v_icmpv6() -> Vec<u8> {
    cat(&[&eth(&[], IPV6), &ipv6(58, &icmp(128, b"ping"))])
}
pub fn v_vxlan_qinq() -> Vec<u8> {
    let inner = cat(&[
        &eth(&[(0x88a8, 100), (0x8100, 200)], IPV4),
        &ipv4(6, &[], &tcp(&[], b"in")),
    ]);
    cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &[], &udp(55555, 4789, &vxlan(Some(0x12_3456), &inner))),
    ])
}
pub fn v_geneve_ipv6_udp() -> Vec<u8> {
    let inner = cat(&[&eth(&[(0x8100, 7)], IPV6), &ipv6(17, &udp(7, 8, b"g"))]);
    let opts: [(u16, u8, &[u8]); 2] = [(0x0102, 0x80, &[1, 2, 3, 4]), (0xffff, 1, &[0; 8])];
    let tun = geneve(&opts, TEB, 0xab_cdef, &inner);
    cat(&[&eth(&[], IPV4), &ipv4(17, &[], &udp(1, 6081, &tun))])
}
pub fn v_geneve_ipv4() -> Vec<u8> {
    let tun = geneve(&[], IPV4, 77, &ipv4(6, &[], &tcp(&[], b"")));
    cat(&[&eth(&[], IPV4), &ipv4(17, &[], &udp(1, 6081, &tun))])
}
pub fn v_gre_cks_eth_vlan() -> Vec<u8> {
    let inner = cat(&[
        &eth(&[(0x8100, 42)], IPV4),
        &ipv4(17, &[], &udp(3, 4, b"gre")),
    ]);
    let tun = gre(true, Some(0xcafe_f00d), Some(9), TEB, &inner);
    cat(&[&eth(&[], IPV4), &ipv4(47, &[], &tun)])
}
pub fn v_gre_ipv6() -> Vec<u8> {
    let tun = gre(false, None, None, IPV6, &ipv6(6, &tcp(&[], b"6")));
    cat(&[&eth(&[], IPV4), &ipv4(47, &[], &tun)])
}
pub fn v_gre_over_ipv6() -> Vec<u8> {
    let tun = gre(false, Some(5), None, IPV4, &ipv4(1, &[], &icmp(8, b"")));
    cat(&[&eth(&[], IPV6), &ipv6(47, &tun)])
}
pub fn v_vxlan_port_8472() -> Vec<u8> {
    let inner = cat(&[&eth(&[], IPV4), &ipv4(6, &[], &tcp(&[], b""))]);
    cat(&[
        &eth(&[], IPV4),
        &ipv4(17, &[], &udp(9, 8472, &vxlan(Some(1), &inner))),
    ])
}
pub fn cfg_8472() -> ParseConfig {
    let mut cfg = ParseConfig::default();
    assert!(cfg.vxlan_ports.insert(8472));
    cfg
}
pub fn v_padded() -> Vec<u8> {
    let mut f = cat(&[&eth(&[], IPV4), &ipv4(6, &[], &tcp(&[], b""))]);
    f.resize(60, 0);
    f
}
/// IPv6 jumbogram: payload length 0, hop-by-hop first, UDP length 0.
pub fn v_jumbo_udp() -> Vec<u8> {
    let mut u = udp(1, 2, b"jumbo");
    u[4] = 0;
    u[5] = 0;
    let mut f = cat(&[&eth(&[], IPV6), &ipv6(0, &cat(&[&ext_opts(17, 0), &u]))]);
    f[18] = 0;
    f[19] = 0;
    f
}

/// Every good vector with the configuration it is parsed with.
pub fn good_vectors() -> Vec<(&'static str, Vec<u8>, ParseConfig)> {
    let d = ParseConfig::default();
    vec![
        ("ipv4_tcp", v_ipv4_tcp(), d),
        ("ipv4_options_udp", v_ipv4_options_udp(), d),
        ("ipv6_tcp", v_ipv6_tcp(), d),
        ("ipv6_ext_first_fragment", v_ipv6_ext_first_fragment(), d),
        ("ipv6_ext_later_fragment", v_ipv6_ext_later_fragment(), d),
        ("ipv6_routing_ah_udp", v_ipv6_routing_ah_udp(), d),
        ("vlan_8100", v_vlan_8100(), d),
        ("qinq", v_qinq(), d),
        ("three_tags", v_three_tags(), d),
        ("vlan_9100", v_vlan_9100(), d),
        ("eight_tags", v_eight_tags(), d),
        ("udp", v_udp(), d),
        ("sctp", v_sctp(), d),
        ("icmp", v_icmp(), d),
        ("icmpv6", v_icmpv6(), d),
        ("vxlan_qinq", v_vxlan_qinq(), d),
        ("geneve_ipv6_udp", v_geneve_ipv6_udp(), d),
        ("geneve_ipv4", v_geneve_ipv4(), d),
        ("gre_cks_eth_vlan", v_gre_cks_eth_vlan(), d),
        ("gre_ipv6", v_gre_ipv6(), d),
        ("gre_over_ipv6", v_gre_over_ipv6(), d),
        ("vxlan_port_8472", v_vxlan_port_8472(), cfg_8472()),
        ("padded", v_padded(), d),
        ("jumbo_udp", v_jumbo_udp(), d),
    ]
}

/// Checks the layout invariants the parser guarantees, on success and on error alike.
pub fn check_invariants(frame: &[u8], layout: &sluice_wire::Layout) {
    let len = frame.len();
    let mut prev: Option<u16> = None;
    for &(layer, off) in layout.layers.as_slice() {
        assert!(usize::from(off) <= len, "{layer:?} at {off} beyond {len}");
        if let Some(p) = prev {
            assert!(
                off > p,
                "layers not increasing: {:?}",
                layout.layers.as_slice()
            );
        }
        prev = Some(off);
    }
    let mut stacks = vec![&layout.outer];
    stacks.extend(layout.inner.as_ref());
    for h in stacks {
        let fields = [h.l2, h.l3, h.l4, h.payload, h.l3_end];
        for f in fields.into_iter().flatten() {
            assert!(f <= len, "{h:?} beyond {len}");
        }
        let ordered: Vec<usize> = [h.l2, h.l3, h.l4, h.payload]
            .into_iter()
            .flatten()
            .collect();
        assert!(
            ordered.windows(2).all(|w| w[0] <= w[1]),
            "{h:?} out of order"
        );
        if let (Some(p), Some(end)) = (h.payload, h.l3_end) {
            assert!(p <= end, "{h:?} payload beyond l3_end");
        }
    }
    if let Some(t) = layout.tunnel {
        assert!(t.offset + t.len <= len, "{t:?} beyond {len}");
    }
}
