//! The layout edits (`Layout::tag_pushed`, `tag_popped`, `decapsulated`, `parse_encapsulated`)
//! against the parser itself: for every good vector, mutations of them, and frames put inside
//! VXLAN / Geneve / GRE, an edit either refuses or gives exactly what a fresh parse of the
//! edited bytes gives.

#[path = "parse_builder.rs"]
mod builder;

use builder::{cat, eth, good_vectors, gre, ipv4, ipv6, udp, vxlan, IPV4, IPV6, TEB};
use proptest::prelude::*;
use sluice_wire::{parse_encapsulated, parse_partial, parse_with, Layout, ParseConfig};

/// The frame with the tag pushed, and its layout by the edit (`None`: refused).
fn pushed(frame: &[u8], l: &Layout, tpid: u16, tci: u16) -> (Vec<u8>, Option<Layout>) {
    let mut f = frame.to_vec();
    f.splice(12..12, cat(&[&tpid.to_be_bytes(), &tci.to_be_bytes()]));
    let mut l = *l;
    let ok = l.tag_pushed(tpid, tci);
    (f, ok.then_some(l))
}

/// Every edit that applies to `frame` (whose whole parse with `cfg` is `l`) checked; returns
/// how many gave a layout.
fn check_edits(frame: &[u8], cfg: &ParseConfig, l: &Layout) -> usize {
    let mut kept = 0;
    let fresh = |f: &[u8]| parse_partial(f, cfg);
    for (tpid, tci) in [(0x8100, 5), (0x88a8, 0xffff), (0x9100, 0)] {
        if frame.len() >= 14 {
            let (f, got) = pushed(frame, l, tpid, tci);
            if let Some(got) = got {
                let (want, err) = fresh(&f);
                assert!(
                    err.is_none(),
                    "push gave a layout for a frame that does not parse"
                );
                assert_eq!(got, want, "push {tpid:#x}");
                kept += 1;
            }
        }
    }
    let mut popped = *l;
    if popped.tag_popped() {
        let mut f = frame.to_vec();
        f.drain(12..16);
        let (want, err) = fresh(&f);
        assert!(err.is_none());
        assert_eq!(popped, want, "pop");
        kept += 1;
    }
    if let Some(got) = l.outer_only() {
        let off = ParseConfig {
            parse_tunnels: false,
            ..*cfg
        };
        let (want, err) = parse_partial(frame, &off);
        assert!(err.is_none());
        assert_eq!(got, want, "outer only");
        kept += 1;
    }
    if let Some(got) = l.decapsulated(frame, cfg) {
        let at = l
            .inner
            .and_then(|h| h.l2)
            .expect("decap without an inner Ethernet");
        let (want, err) = fresh(&frame[at..]);
        assert!(err.is_none());
        assert_eq!(got, want, "decap");
        kept += 1;
    }
    for outer in encapsulations(frame) {
        let pushed = outer.len() - frame.len();
        if let Some(got) = parse_encapsulated(&outer, cfg, l, pushed) {
            let (want, err) = fresh(&outer);
            assert!(err.is_none());
            assert_eq!(got, want, "encap");
            kept += 1;
        }
    }
    kept
}

/// `inner` inside VXLAN over IPv4, Geneve over IPv6 and GRE (key) over IPv4.
fn encapsulations(inner: &[u8]) -> Vec<Vec<u8>> {
    if inner.len() > 60_000 {
        return Vec::new();
    }
    vec![
        cat(&[
            &eth(&[], IPV4),
            &ipv4(17, &[], &udp(49152, 4789, &vxlan(Some(7), inner))),
        ]),
        cat(&[
            &eth(&[], IPV6),
            &ipv6(17, &udp(49153, 6081, &builder::geneve(&[], TEB, 9, inner))),
        ]),
        cat(&[
            &eth(&[], IPV4),
            &ipv4(47, &[], &gre(false, Some(3), None, TEB, inner)),
        ]),
    ]
}

#[test]
fn every_good_vector() {
    let mut kept = 0;
    for (name, frame, cfg) in good_vectors() {
        let l = parse_with(&frame, &cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
        kept += check_edits(&frame, &cfg, &l);
        // And each inside a tunnel, then decapsulated again.
        for outer in encapsulations(&frame) {
            if let Ok(l) = parse_with(&outer, &cfg) {
                kept += check_edits(&outer, &cfg, &l);
            }
        }
    }
    // Not vacuous: most edits of the vectors keep a layout.
    assert!(kept > 150, "only {kept} edits kept a layout");
}

#[test]
fn refusals_where_a_fresh_parse_differs() {
    let cfg = ParseConfig::DEFAULT;
    let plain = cat(&[&eth(&[], IPV4), &ipv4(17, &[], &udp(1, 2, b"data"))]);
    // An inner packet that is itself GRE or VXLAN: outside the tunnel the parser descends.
    for nested in [
        cat(&[
            &eth(&[], IPV4),
            &ipv4(47, &[], &gre(false, None, None, TEB, &plain)),
        ]),
        cat(&[
            &eth(&[], IPV4),
            &ipv4(17, &[], &udp(1, 4789, &vxlan(Some(1), &plain))),
        ]),
    ] {
        let outer = &encapsulations(&nested)[0];
        let l = parse_with(outer, &cfg).unwrap();
        assert!(l.decapsulated(outer, &cfg).is_none());
    }
    // Bytes after the tunnel's datagram would stay in the frame.
    let mut padded = encapsulations(&plain)[0].clone();
    let l = parse_with(&padded, &cfg).unwrap();
    padded.extend([0; 6]);
    assert!(l.decapsulated(&padded, &cfg).is_none());
    // No tunnel, an L3 link type, a layout that already has a tunnel.
    let l = parse_with(&plain, &cfg).unwrap();
    assert!(l.decapsulated(&plain, &cfg).is_none());
    let outer = &encapsulations(&plain)[0];
    let lo = parse_with(outer, &cfg).unwrap();
    assert!(lo.decapsulated(outer, &ParseConfig::L3).is_none());
    let twice = &encapsulations(outer)[0];
    assert!(parse_encapsulated(twice, &cfg, &lo, twice.len() - outer.len()).is_none());
    // Outer headers whose datagram ends before the frame does (bytes after it are not the
    // inner frame's, as the parser sees it).
    let jumbo = builder::v_jumbo_udp();
    let short = &encapsulations(&jumbo)[0];
    let mut long = short.clone();
    long.extend([0; 8]);
    let mut jumbo_long = jumbo.clone();
    jumbo_long.extend([0; 8]);
    let lj = parse_with(&jumbo_long, &cfg).unwrap();
    assert!(parse_encapsulated(&long, &cfg, &lj, short.len() - jumbo.len()).is_none());
    // The wrong length pushed.
    assert!(parse_encapsulated(outer, &cfg, &l, outer.len() - plain.len() - 2).is_none());
    // Eight tags are the parser's limit: a ninth is refused; no tag to pop.
    let eight = builder::v_eight_tags();
    let mut l8 = parse_with(&eight, &cfg).unwrap();
    assert!(!l8.tag_pushed(0x8100, 1));
    let mut l0 = parse_with(&plain, &cfg).unwrap();
    assert!(!l0.tag_popped());
    assert!(!l0.tag_pushed(0x0800, 1), "not a VLAN TPID");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Mutated vectors: wherever the mutation still parses whole, the edits agree with the
    /// parser.
    #[test]
    fn mutated_vectors(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let vectors = good_vectors();
        let (_, mut frame, cfg) = vectors[which.index(vectors.len())].clone();
        for (at, byte) in edits {
            let i = at.index(frame.len());
            frame[i] = byte;
        }
        if let Ok(l) = parse_with(&frame, &cfg) {
            check_edits(&frame, &cfg, &l);
        }
    }
}
