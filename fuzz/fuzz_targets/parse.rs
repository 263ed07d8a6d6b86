//! Fuzzes the frame parser: `parse_partial` must never panic, and every layout it returns
//! (complete or partial) must keep its offsets within the frame and strictly increasing along
//! `layers`.
//!
//! The first input byte picks the configuration: even → the default ports; odd → every UDP
//! destination port 1..=8 is a tunnel port (VXLAN for even ports, Geneve for odd ones), so that
//! the fuzzer reaches the tunnel parsers without having to guess 4789 or 6081; bit 1 set → tunnels
//! off; bit 2 set → the frame is an L3 packet (`LinkType::Ip`, as from a TUN). The rest is the
//! frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::{parse_partial, parse_with, Headers, Layout, LinkType, ParseConfig, PortSet};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, frame)) = data.split_first() else {
        return;
    };
    let cfg = config(selector);
    let (layout, err) = parse_partial(frame, &cfg);
    check(frame, &layout);
    if let Some(e) = err {
        assert!(
            e.offset <= frame.len(),
            "error offset {} beyond {}",
            e.offset,
            frame.len()
        );
    }
    assert_eq!(parse_with(frame, &cfg).err(), err);
    // The default configuration on the same bytes.
    let (layout, _) = parse_partial(frame, &ParseConfig::default());
    check(frame, &layout);
});

fn config(selector: u8) -> ParseConfig {
    let mut cfg = ParseConfig::default();
    if selector & 1 != 0 {
        let (mut vxlan, mut geneve) = (PortSet::EMPTY, PortSet::EMPTY);
        for port in 1..=8u16 {
            let set = if port % 2 == 0 {
                &mut vxlan
            } else {
                &mut geneve
            };
            assert!(set.insert(port));
        }
        cfg.vxlan_ports = vxlan;
        cfg.geneve_ports = geneve;
    }
    cfg.parse_tunnels = selector & 2 == 0;
    if selector & 4 != 0 {
        cfg.link = LinkType::Ip;
    }
    cfg
}

fn check(frame: &[u8], layout: &Layout) {
    let len = frame.len();
    let layers = layout.layers.as_slice();
    for w in layers.windows(2) {
        assert!(w[0].1 < w[1].1, "layers not increasing: {layers:?}");
    }
    for &(layer, off) in layers {
        assert!(usize::from(off) <= len, "{layer:?} at {off} beyond {len}");
    }
    check_headers(len, &layout.outer);
    if let Some(inner) = &layout.inner {
        assert!(layout.tunnel.is_some(), "inner stack without a tunnel");
        check_headers(len, inner);
    }
    if let Some(t) = layout.tunnel {
        assert!(t.offset + t.len <= len, "{t:?} beyond {len}");
        assert!(
            layers.iter().any(|&(_, o)| usize::from(o) == t.offset),
            "tunnel not in layers"
        );
    }
}

fn check_headers(len: usize, h: &Headers) {
    let ordered = [h.l2, h.l3, h.l4, h.payload];
    let mut prev = 0;
    for off in ordered.into_iter().flatten() {
        assert!(
            off <= len && off >= prev,
            "{h:?} out of order or beyond {len}"
        );
        prev = off;
    }
    if let Some(end) = h.l3_end {
        assert!(
            end <= len && h.payload.is_none_or(|p| p <= end),
            "{h:?}: bad l3_end"
        );
    }
    assert!(h.vlans.len() <= sluice_wire::MAX_VLAN_DEPTH);
}
