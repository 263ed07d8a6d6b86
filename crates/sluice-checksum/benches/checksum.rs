//! Criterion benchmarks for the ones'-complement sum: each available implementation and the
//! dispatched `sum` at 64 B, 1500 B and 64 KiB, against `copy_from_slice` (memcpy) of the same
//! size as the memory-bandwidth ceiling. Kept short (small samples, 1 s measurement) so the
//! whole run takes well under two minutes; use `examples/cksum_bench.rs` and
//! `bench/dpdk/checksum-compare.sh` for the DPDK comparison.

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use sluice_checksum::simd;
use std::hint::black_box;
use std::time::Duration;

const SIZES: [usize; 3] = [64, 1500, 65536];

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(131) + 7) as u8).collect()
}

fn bench_sum(c: &mut Criterion) {
    let mut group = c.benchmark_group("checksum");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for size in SIZES {
        let data = pattern(size);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("sum", size), &data, |b, d| {
            b.iter(|| sluice_checksum::sum(black_box(d)))
        });
        for imp in simd::available() {
            group.bench_with_input(BenchmarkId::new(imp.name(), size), &data, |b, d| {
                b.iter(|| simd::sum_with(imp, black_box(d)))
            });
        }
        let mut dst = vec![0u8; size];
        group.bench_with_input(BenchmarkId::new("memcpy", size), &data, |b, d| {
            b.iter(|| black_box(&mut dst[..]).copy_from_slice(black_box(d)))
        });
    }
    group.finish();
}

/// Private so the undocumented `pub fn` that `criterion_group!` generates is not exported.
mod group {
    criterion::criterion_group!(benches, super::bench_sum);
}
criterion_main!(group::benches);
