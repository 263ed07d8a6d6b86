//! Lookup probe for callgrind: 300 000 lookups over 4 096 flows (100 000 benchmark rules, 16
//! masks), key by key, in bursts of 32 and through the exact-match cache, each mode in a
//! function of its own, made from another crate as the datapath makes them:
//!
//! ```sh
//! valgrind --tool=callgrind '--toggle-collect=*plain_loop*' lookup_probe
//! valgrind --tool=callgrind '--toggle-collect=*burst_loop*' lookup_probe
//! valgrind --tool=callgrind '--toggle-collect=*cached_loop*' lookup_probe
//! valgrind --tool=callgrind '--toggle-collect=*cached_burst_loop*' lookup_probe
//! ```
//!
//! (`*cached_loop*` does not match `cached_burst_loop`.)
use sluice_flow::bench::{bench_rule, packet_for, SplitMix};
use sluice_flow::{BatchMode, ExactCache, FlowKey, FlowTable, HitRef, Snapshot, TableConfig};

/// Lookups per mode.
const N: usize = 300_000;

/// `n` lookups cycling over `packets`, key by key; returns the hits.
#[inline(never)]
fn plain_loop(snap: &Snapshot, packets: &[FlowKey], n: usize) -> u64 {
    let mut hits = 0u64;
    for i in 0..n {
        let p = &packets[i % packets.len()];
        hits += u64::from(snap.lookup(p).is_some());
    }
    hits
}

/// `n` lookups over `packets` (a multiple of 32 long), a burst of 32 at a time; returns the
/// hits.
#[inline(never)]
fn burst_loop(snap: &Snapshot, packets: &[FlowKey], n: usize) -> u64 {
    let mut hits = 0u64;
    let mut out: Vec<Option<HitRef<'_>>> = Vec::with_capacity(32);
    for i in (0..n).step_by(32) {
        let at = i % packets.len();
        snap.lookup_batch(&packets[at..at + 32], &mut out);
        hits += out.iter().filter(|h| h.is_some()).count() as u64;
    }
    hits
}

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

/// `n` lookups over `packets` (a multiple of 32 long), a burst of 32 at a time through the
/// exact-match cache; returns the hits.
#[inline(never)]
fn cached_burst_loop(
    snap: &Snapshot,
    cache: &mut ExactCache,
    packets: &[FlowKey],
    n: usize,
) -> u64 {
    let mut hits = 0u64;
    let mut out: Vec<Option<HitRef<'_>>> = Vec::with_capacity(32);
    for i in (0..n).step_by(32) {
        let at = i % packets.len();
        snap.lookup_batch_cached(cache, &packets[at..at + 32], &mut out);
        hits += out.iter().filter(|h| h.is_some()).count() as u64;
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
    let plain = plain_loop(&snap, &packets, N);
    let burst = burst_loop(&snap, &packets, N);
    let cached = cached_loop(&snap, &mut cache, &packets, N);
    let mut cache = ExactCache::new(16384);
    let cached_burst = cached_burst_loop(&snap, &mut cache, &packets, N);
    println!(
        "hits: plain {plain}, burst {burst}, cached {cached}, cached burst {cached_burst} of {N}"
    );
}
