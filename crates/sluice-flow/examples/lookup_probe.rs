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
//! (`*cached_loop*` does not match `cached_burst_loop`.) Arguments (optional): rules, flows,
//! lookups per mode and the modes to run (any of `plain,burst,cached,cached_burst`), e.g.
//! `lookup_probe 1000000 65536 5000000 burst` for a sampling profiler at the benchmark's scale.
use sluice_flow::bench::{bench_rule, packet_for, SplitMix};
use sluice_flow::{BatchMode, ExactCache, FlowKey, FlowTable, HitRef, Snapshot, TableConfig};

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

/// Argument `i` as a number, or `default`.
fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rules_n = arg(1, 100_000).max(1);
    let flows = arg(2, 4096).div_ceil(32).max(1) * 32;
    let n = arg(3, 300_000);
    let modes = std::env::args()
        .nth(4)
        .unwrap_or_else(|| "plain,burst,cached,cached_burst".into());
    let on = |m: &str| modes.split(',').any(|x| x == m);
    let mut t = FlowTable::new(TableConfig::default());
    let rules: Vec<_> = (0..rules_n).map(|i| bench_rule(i, 16)).collect();
    t.insert_batch(rules, BatchMode::BestEffort);
    let mut rng = SplitMix::new(1);
    let packets: Vec<FlowKey> = (0..flows)
        .map(|_| packet_for(&bench_rule(rng.next() as usize % rules_n, 16), &mut rng))
        .collect();
    let r = t.reader();
    let snap = r.snapshot();
    // Sized and warmed as `sluice bench flows` does: four entries per flow (at most 2^18), one
    // untimed pass over the flows.
    let entries = (4 * flows).min(1 << 18);
    let warm = |c: &mut ExactCache| {
        for p in &packets {
            let _ = snap.lookup_cached(c, p);
        }
    };
    let mut cache = ExactCache::new(entries);
    if on("cached") {
        warm(&mut cache);
    }
    let timed = |m: &str, f: &mut dyn FnMut() -> u64| {
        if !on(m) {
            return 0;
        }
        let t0 = std::time::Instant::now();
        let hits = f();
        let s = t0.elapsed().as_secs_f64();
        eprintln!("{m}: {:.0} lookups/s", n as f64 / s);
        hits
    };
    let plain = timed("plain", &mut || plain_loop(&snap, &packets, n));
    let burst = timed("burst", &mut || burst_loop(&snap, &packets, n));
    let cached = timed("cached", &mut || {
        cached_loop(&snap, &mut cache, &packets, n)
    });
    let mut cache = ExactCache::new(entries);
    if on("cached_burst") {
        warm(&mut cache);
    }
    let cached_burst = timed("cached_burst", &mut || {
        cached_burst_loop(&snap, &mut cache, &packets, n)
    });
    println!(
        "hits: plain {plain}, burst {burst}, cached {cached}, cached burst {cached_burst} of {n}"
    );
}
