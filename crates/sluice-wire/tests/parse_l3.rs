//! L3 packets ([`LinkType::Ip`]): a frame that starts at its IP header parses exactly as the same
//! packet behind an untagged Ethernet header, 14 bytes earlier, with no L2 header: every good
//! vector, random bytes and random mutations (errors included, at offsets 14 lower); and the
//! version nibble, not a guess, picks IPv4 or IPv6.

#[path = "parse_builder.rs"]
mod builder;

use builder::{check_invariants, good_vectors};
use proptest::prelude::*;
use sluice_wire::{
    ethertype, parse_partial, parse_with, Headers, L3Kind, Layer, Layout, LinkType, ParseConfig,
    ParseError, Reason,
};

const ETH: usize = 14;

fn shift_headers(h: &Headers) -> Headers {
    let s = |o: Option<usize>| o.map(|x| x - ETH);
    Headers {
        // The outer Ethernet header (at 0) is gone; an inner one moves like the rest.
        l2: h.l2.filter(|&x| x != 0).map(|x| x - ETH),
        l3: s(h.l3),
        l4: s(h.l4),
        payload: s(h.payload),
        l3_end: s(h.l3_end),
        ..*h
    }
}

/// The layout an L3 parse of `frame[14..]` must give, from the Ethernet parse of `frame`.
fn expected_l3(eth: &Layout) -> Layout {
    let mut out = Layout {
        outer: shift_headers(&eth.outer),
        tunnel: eth.tunnel.map(|mut t| {
            t.offset -= ETH;
            t
        }),
        inner: eth.inner.as_ref().map(shift_headers),
        ..Layout::default()
    };
    for &(layer, off) in eth.layers.as_slice() {
        if (layer, off) != (Layer::Eth, 0) {
            assert!(out.layers.push(layer, usize::from(off) - ETH));
        }
    }
    out
}

/// Parses `frame` (untagged Ethernet) and `frame[14..]` (L3) with `cfg` and checks they agree.
fn agree(frame: &[u8], cfg: &ParseConfig) {
    let Some(ip) = frame.get(ETH..) else { return };
    let (eth, eth_err) = parse_partial(frame, cfg);
    let l3_cfg = cfg.with_link(LinkType::Ip);
    let (l3, l3_err) = parse_partial(ip, &l3_cfg);
    check_invariants(ip, &l3);
    assert_eq!(parse_with(ip, &l3_cfg).err(), l3_err);
    let want_err = eth_err.map(|e| ParseError {
        offset: e.offset - ETH,
        ..e
    });
    assert_eq!(l3_err, want_err, "error of {frame:02x?}");
    assert_eq!(l3, expected_l3(&eth), "layout of {frame:02x?}");
}

/// Whether `frame` is an untagged Ethernet frame whose EtherType matches its IP version nibble
/// (the frames for which the two parses must agree).
fn matching_ip(frame: &[u8]) -> bool {
    matches!(
        (frame.get(12..14), frame.get(ETH).map(|b| b >> 4)),
        (Some(&[0x08, 0x00]), Some(4)) | (Some(&[0x86, 0xdd]), Some(6))
    )
}

#[test]
fn every_untagged_ip_vector_parses_the_same_without_ethernet() {
    let mut n = 0;
    for (name, frame, cfg) in good_vectors() {
        if !matching_ip(&frame) {
            continue;
        }
        let l3 = parse_with(&frame[ETH..], &cfg.with_link(LinkType::Ip))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(l3.outer.l2, None, "{name}");
        assert_eq!(l3.outer.l3, Some(0), "{name}");
        agree(&frame, &cfg);
        n += 1;
    }
    assert!(n >= 15, "only {n} vectors checked");
}

#[test]
fn version_nibble_picks_the_ip_version() {
    let v4 = builder::ipv4(6, &[], &builder::tcp(&[], b"x"));
    let l = parse_with(&v4, &ParseConfig::L3).unwrap();
    assert_eq!(l.outer.l3_kind, Some(L3Kind::Ipv4));
    assert_eq!(l.outer.ethertype, ethertype::IPV4);
    assert_eq!(
        l.layers.as_slice(),
        [(Layer::Ipv4, 0), (Layer::Tcp, 20)].as_slice()
    );
    assert_eq!((l.outer.l4, l.outer.payload), (Some(20), Some(40)));

    let v6 = builder::ipv6(17, &builder::udp(1, 2, b"y"));
    let l = parse_with(&v6, &ParseConfig::L3).unwrap();
    assert_eq!(l.outer.l3_kind, Some(L3Kind::Ipv6));
    assert_eq!(l.outer.ethertype, ethertype::IPV6);
    assert_eq!((l.outer.l4, l.outer.l3_end), (Some(40), Some(49)));
}

#[test]
fn bad_l3_starts_are_errors() {
    for (bytes, reason) in [
        (vec![], Reason::Truncated { need: 20, have: 0 }),
        (vec![0x55; 40], Reason::BadVersion(5)),
        (vec![0x00; 40], Reason::BadVersion(0)),
        // Version 4 but only 10 bytes: the IPv4 header is truncated.
        (
            {
                let mut v = vec![0u8; 10];
                v[0] = 0x45;
                v
            },
            Reason::Truncated { need: 20, have: 10 },
        ),
    ] {
        let (layout, e) = parse_partial(&bytes, &ParseConfig::L3);
        let e = e.expect("an error");
        assert_eq!((e.layer, e.offset, e.reason), (Layer::Ipv4, 0, reason));
        assert!(layout.layers.is_empty());
    }
    // An Ethernet frame handed to the L3 parser is not guessed at: its first byte is a MAC.
    let mut frame = builder::v_ipv4_tcp();
    frame[0] = 0x02;
    let e = parse_with(&frame, &ParseConfig::L3).unwrap_err();
    assert_eq!((e.offset, e.reason), (0, Reason::BadVersion(0)));
    // The Ethernet default is unchanged.
    assert_eq!(ParseConfig::default().link, LinkType::Ethernet);
    assert_eq!(
        ParseConfig::L3.with_link(LinkType::Ethernet),
        ParseConfig::DEFAULT
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn random_l3_bytes_never_panic(frame in prop::collection::vec(any::<u8>(), 0..400)) {
        let (layout, err) = parse_partial(&frame, &ParseConfig::L3);
        check_invariants(&frame, &layout);
        if let Some(e) = err {
            prop_assert!(e.offset <= frame.len());
        }
    }

    #[test]
    fn random_ip_agrees(v6 in any::<bool>(), body in prop::collection::vec(any::<u8>(), 1..300)) {
        let mut frame = builder::eth(&[], if v6 { 0x86dd } else { 0x0800 });
        frame.push(if v6 { 0x60 | (body[0] & 0x0f) } else { 0x45 });
        frame.extend_from_slice(&body[1..]);
        agree(&frame, &ParseConfig::default());
    }

    #[test]
    fn mutated_vectors_agree(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let vectors: Vec<_> = good_vectors().into_iter().filter(|v| matching_ip(&v.1)).collect();
        let (_, mut frame, cfg) = vectors[which.index(vectors.len())].clone();
        for (at, byte) in edits {
            // Ethernet addresses and EtherType stay: the L3 parse never sees them.
            let i = ETH + at.index(frame.len() - ETH);
            frame[i] = byte;
        }
        if truncate {
            frame.truncate(ETH + cut.index(frame.len() - ETH + 1));
        }
        if matching_ip(&frame) {
            agree(&frame, &cfg);
        }
    }
}
