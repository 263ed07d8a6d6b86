//! Exact-match-cache probe for callgrind: 300 000 `Snapshot::lookup_cached` calls over 4 096
//! flows (100 000 benchmark rules, 16 masks), made from another crate as the datapath makes
//! them. `valgrind --tool=callgrind '--toggle-collect=*cached_loop*' cached_probe`.
use sluice_flow::bench::{bench_rule, packet_for, SplitMix};
use sluice_flow::{BatchMode, ExactCache, FlowKey, FlowTable, Snapshot, TableConfig};

/// `n` cached lookups cycling over `packets`; returns the hits.
#[inline(never)]
fn cached_loop(snap: &Snapshot, cache: &mut ExactCache, packets: &[FlowKey], n: usize) -> u64 {
    let mut hits = 0u64;
    for i in 0..n {
        let p = &packets[i % packets.len()];
        hits += u64::from(snap.lookup_cached(cache, p).is_some());
    }
    hits
}

fn main() {
    let mut t = FlowTable::new(TableConfig::default());
    let rules: Vec<_> = (0..100_000).map(|i| bench_rule(i, 16)).collect();
    t.insert_batch(rules, BatchMode::BestEffort);
    let mut rng = SplitMix::new(1);
    let packets: Vec<FlowKey> = (0..4096)
        .map(|_| packet_for(&bench_rule(rng.next() as usize % 100_000, 16), &mut rng))
        .collect();
    let r = t.reader();
    let snap = r.snapshot();
    let mut cache = ExactCache::new(16384);
    let hits = cached_loop(&snap, &mut cache, &packets, 300_000);
    println!("{hits}");
}
