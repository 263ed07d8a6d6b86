//! Property tests of the frame parser: random bytes and random mutations of the good vectors
//! never panic, and every layout (complete or partial) keeps its offsets within the frame and
//! strictly increasing along `layers`.

#[path = "parse_builder.rs"]
mod builder;

use builder::{check_invariants, good_vectors};
use proptest::prelude::*;
use sluice_wire::{parse_partial, parse_with, ParseConfig, PortSet};

/// Default, or every UDP port 1..=8 split between VXLAN and Geneve (so that random bytes reach
/// the tunnel parsers), or tunnels off.
fn config(kind: u8) -> ParseConfig {
    match kind % 3 {
        0 => ParseConfig::default(),
        1 => {
            let (mut vxlan, mut geneve) = (PortSet::EMPTY, PortSet::EMPTY);
            for port in 1..=8u16 {
                let set = if port % 2 == 0 {
                    &mut vxlan
                } else {
                    &mut geneve
                };
                assert!(set.insert(port));
            }
            ParseConfig {
                vxlan_ports: vxlan,
                geneve_ports: geneve,
                parse_tunnels: true,
                link: sluice_wire::LinkType::Ethernet,
            }
        }
        _ => ParseConfig {
            parse_tunnels: false,
            ..ParseConfig::default()
        },
    }
}

fn check(frame: &[u8], cfg: &ParseConfig) {
    let (layout, err) = parse_partial(frame, cfg);
    check_invariants(frame, &layout);
    if let Some(e) = err {
        assert!(e.offset <= frame.len(), "{e} beyond {}", frame.len());
    }
    assert_eq!(parse_with(frame, cfg).err(), err);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(frame in prop::collection::vec(any::<u8>(), 0..400), kind in any::<u8>()) {
        check(&frame, &config(kind));
    }

    /// Random bytes behind an IPv4 or IPv6 EtherType, to get past Ethernet more often.
    #[test]
    fn random_ip(v6 in any::<bool>(), body in prop::collection::vec(any::<u8>(), 0..300),
                 kind in any::<u8>()) {
        let mut frame = builder::eth(&[], if v6 { 0x86dd } else { 0x0800 });
        if let Some(b) = body.first() {
            frame.push(if v6 { 0x60 | (b & 0x0f) } else { 0x45 });
        }
        frame.extend_from_slice(body.get(1..).unwrap_or(&[]));
        check(&frame, &config(kind));
    }

    #[test]
    fn mutated_vectors(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        kind in any::<u8>(),
    ) {
        let vectors = good_vectors();
        let (_, mut frame, cfg) = vectors[which.index(vectors.len())].clone();
        for (at, byte) in edits {
            let i = at.index(frame.len());
            frame[i] = byte;
        }
        if truncate {
            frame.truncate(cut.index(frame.len() + 1));
        }
        check(&frame, &cfg);
        check(&frame, &config(kind));
    }
}

/// Writes the good vectors as fuzz seeds (first byte 0: default configuration) into the
/// directory named by `SLUICE_FUZZ_SEEDS`, e.g. `fuzz/corpus/parse`. Run by hand:
/// `SLUICE_FUZZ_SEEDS=$PWD/fuzz/corpus/parse cargo test -p sluice-wire --test parse_proptest -- --ignored`.
#[test]
#[ignore = "writes files; run by hand to seed the fuzz corpus"]
fn write_fuzz_seeds() {
    let Some(dir) = std::env::var_os("SLUICE_FUZZ_SEEDS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("create seed directory");
    for (name, frame, _) in good_vectors() {
        let mut seed = vec![0u8];
        seed.extend_from_slice(&frame);
        std::fs::write(dir.join(format!("seed-{name}")), seed).expect("write seed");
    }
}
