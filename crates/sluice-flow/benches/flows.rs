//! Criterion benchmarks of the flow table: insertion (1M rules over 16 masks, in batches) and
#![allow(missing_docs)] // criterion_group! generates undocumented items
//! lookup (100k rules over 16 masks). Rule generation is outside the timed region.
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sluice_flow::{bench, BatchMode, FlowKey, FlowTable, Rule, TableConfig};

fn rules(n: usize, masks: usize) -> Vec<Rule> {
    (0..n).map(|i| bench::bench_rule(i, masks)).collect()
}

fn insert(c: &mut Criterion) {
    let mut g = c.benchmark_group("insert");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(20));
    let n = 1_000_000usize;
    let all = rules(n, 16);
    // (batch size, insert threads): the single-threaded cases first, then the same split over
    // two threads (`TableConfig::insert_threads`).
    for (batch, threads) in [
        (65_536usize, 1usize),
        (1_000_000, 1),
        (65_536, 2),
        (1_000_000, 2),
    ] {
        g.throughput(Throughput::Elements(n as u64));
        let name = match threads {
            1 => format!("{n}_rules_16_masks_batch_{batch}"),
            t => format!("{n}_rules_16_masks_batch_{batch}_{t}_threads"),
        };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let batches: Vec<Vec<Rule>> = all.chunks(batch).map(|c| c.to_vec()).collect();
                    let mut t = FlowTable::new(TableConfig {
                        insert_threads: threads,
                        ..TableConfig::default()
                    });
                    let start = Instant::now();
                    for b in batches {
                        let r = t.insert_batch(b, BatchMode::BestEffort);
                        criterion::black_box(r);
                    }
                    total += start.elapsed();
                    drop(t);
                }
                total
            })
        });
    }
    g.finish();
}

fn lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("lookup");
    let n = 100_000;
    let mut t = FlowTable::new(TableConfig::default());
    let res = t.insert_batch(rules(n, 16), BatchMode::BestEffort);
    assert!(res.iter().all(|r| r.is_ok()));
    let mut rng = bench::SplitMix::new(7);
    let packets: Vec<FlowKey> = (0..4096)
        .map(|_| bench::packet_for(&bench::bench_rule(rng.next() as usize % n, 16), &mut rng))
        .collect();
    let reader = t.reader();
    g.throughput(Throughput::Elements(packets.len() as u64));
    g.bench_function("100k_rules_16_masks_4096_packets", |b| {
        b.iter_batched_ref(
            || (),
            |_| {
                let mut hits = 0u32;
                for burst in packets.chunks(32) {
                    let s = reader.snapshot();
                    for p in burst {
                        hits += u32::from(s.lookup(p).is_some());
                    }
                }
                hits
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("100k_rules_16_masks_4096_packets_burst_32", |b| {
        // Results borrow the snapshot: the buffer moves between lifetimes by an in-place
        // `collect` of the emptied vector, which keeps its allocation.
        let mut spare: Vec<Option<sluice_flow::HitRef<'static>>> = Vec::with_capacity(32);
        b.iter(|| {
            let mut hits = 0usize;
            for burst in packets.chunks(32) {
                let s = reader.snapshot();
                let mut out: Vec<Option<sluice_flow::HitRef<'_>>> = core::mem::take(&mut spare)
                    .into_iter()
                    .map(|_| None)
                    .collect();
                s.lookup_batch(burst, &mut out);
                hits += out.iter().filter(|h| h.is_some()).count();
                out.clear();
                spare = out.into_iter().map(|_| None).collect();
            }
            hits
        })
    });
    let mut cache = sluice_flow::ExactCache::new(4 * packets.len());
    g.bench_function("100k_rules_16_masks_4096_packets_exact_match_cache", |b| {
        b.iter(|| {
            let mut hits = 0u32;
            for burst in packets.chunks(32) {
                let s = reader.snapshot();
                for p in burst {
                    hits += u32::from(s.lookup_cached(&mut cache, p).is_some());
                }
            }
            hits
        })
    });
    g.finish();
}

criterion_group!(benches, insert, lookup);
criterion_main!(benches);
