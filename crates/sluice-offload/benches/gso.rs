//! GSO throughput, comparable line for line with the DPDK peer (`bench/dpdk/gso_bench.c`): one
//! TCP/IPv4 super-packet with 64 000 payload bytes, MSS 1448 (45 segments).
//!
//! - `sluice_zc_partial`: zero-copy form (fresh headers + payload ranges), IPv4 and TCP
//!   checksums left `Partial` — the same work as `rte_gso_segment`, which computes none.
//! - `sluice_zc_full`: zero-copy form with full software checksums (compare with
//!   `dpdk_gso_cksum`).
//! - `sluice_contig_full`: contiguous frames with full software checksums.
//!
//! Output, one line per measurement: `<name> <segments> <median ns per super-packet>
//! <segments/s>`. Run with `cargo bench -p sluice-offload --bench gso [-- ROUNDS]`.

use sluice_offload::gso::{
    segment, segment_zero_copy, CsumMode, GsoOutput, GsoParams, ZeroCopyOutput,
};
use sluice_packet::GsoType;
use std::hint::black_box;
use std::time::Instant;

const PAYLOAD: usize = 64_000;
const MSS: u16 = 1448;

fn super_packet() -> Vec<u8> {
    let mut f = vec![0u8; 54 + PAYLOAD];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let total = (40 + PAYLOAD) as u16;
    f[14..34].copy_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        0x40,
        0,
        64,
        6,
        0,
        0,
        192,
        0,
        2,
        1,
        198,
        51,
        100,
        2,
    ]);
    f[34..54].copy_from_slice(&[
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xfa, 0xf0, 0, 0, 0, 0,
    ]);
    for (i, b) in f[54..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    f
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(rounds: usize, mut f: impl FnMut() -> usize) -> (usize, f64) {
    if rounds == 0 {
        return (0, 0.0);
    }
    let iters = 20_000;
    let mut n = 0;
    for _ in 0..iters / 10 {
        n = f();
    }
    let samples = (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..iters {
                black_box(f());
            }
            t0.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    (n, median(samples))
}

fn report(name: &str, (n, ns): (usize, f64)) {
    if n == 0 {
        return;
    }
    println!("{name} {n} {ns:.1} {:.0}", n as f64 * 1e9 / ns);
}

fn main() {
    let rounds = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(9);
    let frame = super_packet();
    let layout = sluice_wire::parse(&frame).expect("the super-packet parses");
    let mut partial = GsoParams::new(GsoType::TcpV4, MSS);
    partial.l4_csum = CsumMode::Partial;
    partial.ip_csum = CsumMode::Partial;
    let full = GsoParams::new(GsoType::TcpV4, MSS);

    // GSO_BENCH_ONLY=NAME runs one measurement (for profilers).
    let only = std::env::var("GSO_BENCH_ONLY")
        .ok()
        .filter(|s| !s.is_empty());
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let mut zc = ZeroCopyOutput::new();
    report(
        "sluice_zc_partial",
        time(if run("sluice_zc_partial") { rounds } else { 0 }, || {
            zc.clear();
            segment_zero_copy(black_box(&frame), &layout, &partial, &mut zc).unwrap_or(0)
        }),
    );
    report(
        "sluice_zc_full",
        time(if run("sluice_zc_full") { rounds } else { 0 }, || {
            zc.clear();
            segment_zero_copy(black_box(&frame), &layout, &full, &mut zc).unwrap_or(0)
        }),
    );
    let mut out = GsoOutput::new();
    report(
        "sluice_contig_full",
        time(if run("sluice_contig_full") { rounds } else { 0 }, || {
            out.clear();
            segment(black_box(&frame), &layout, &full, &mut out).unwrap_or(0)
        }),
    );
}
