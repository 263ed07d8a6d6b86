//! Parse throughput: `parse` over a mix of eight frames (plain TCPv4, TCPv6, QinQ TCPv4, VXLAN
//! with inner TCP, Geneve, GRE, UDP, IPv6 with extension headers), reported in frames per second.
//!
//! Run with `cargo bench -p sluice-wire --bench parse`. `BENCH_BINARY profile NAME ITERS` parses
//! frame NAME (or every frame for `mix8`) ITERS times without criterion, for instruction counts
//! under callgrind (`bench/callgrind_counts.sh parse`).
// `criterion_group!` defines an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/parse_builder.rs"]
mod builder;

use builder::*;

fn mix() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("tcp4", v_ipv4_tcp()),
        ("tcp6", v_ipv6_tcp()),
        ("qinq_tcp4", v_qinq()),
        ("vxlan_tcp", v_vxlan_qinq()),
        ("geneve", v_geneve_ipv6_udp()),
        ("gre", v_gre_cks_eth_vlan()),
        ("udp4", v_udp()),
        ("ipv6_ext", v_ipv6_ext_first_fragment()),
    ]
}

fn parse_mix(c: &mut Criterion) {
    let frames = mix();
    for (name, f) in &frames {
        assert!(sluice_wire::parse(f).is_ok(), "{name}");
    }
    let mut group = c.benchmark_group("parse");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Elements(frames.len() as u64));
    group.bench_function("mix8", |b| {
        b.iter(|| {
            for (_, f) in &frames {
                black_box(sluice_wire::parse(black_box(f)).ok());
            }
        })
    });
    group.throughput(Throughput::Elements(1));
    for (name, f) in &frames {
        group.bench_with_input(BenchmarkId::new("frame", name), f, |b, f| {
            b.iter(|| black_box(sluice_wire::parse(black_box(f)).ok()))
        });
    }
    group.finish();
}

/// `profile NAME ITERS`: parse frame NAME (every frame for `mix8`) ITERS times, untimed.
fn profile(name: &str, iters: usize) {
    let frames: Vec<_> = mix()
        .into_iter()
        .filter(|(n, _)| name == "mix8" || *n == name)
        .collect();
    assert!(!frames.is_empty(), "unknown frame {name}");
    for _ in 0..iters {
        for (_, f) in &frames {
            black_box(sluice_wire::parse(black_box(f)).ok());
        }
    }
}

criterion_group!(benches, parse_mix);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("profile") {
        let name = args.get(2).map_or("mix8", String::as_str);
        let iters = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(1000);
        profile(name, iters);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
