//! Lookups while rules go in (issue 17): one thread looks up as a datapath thread does (a
//! `Reader`, a snapshot per burst of 32, through its own exact-match cache, over 65 536 random
//! active flows of the rules already in), while the main thread inserts a million more rules in
//! batches of 100 000 (by default), as the daemon applies a streamed rules file. Prints the lookup rate
//! before, during and after the load, the longest time one burst took in each phase, and how
//! long each batch took to insert and publish.
//!
//! ```sh
//! cargo run --release -p sluice-flow --example lookup_during_insert [-- BASE_RULES NEW_RULES BATCH]
//! ```
use sluice_flow::bench::{bench_rule, packet_for, SplitMix};
use sluice_flow::{BatchMode, ExactCache, FlowKey, FlowTable, HitRef, TableConfig};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Masks of the benchmark rules.
const MASKS: usize = 16;
/// Active flows the reader cycles over.
const FLOWS: usize = 65_536;
/// Keys per lookup burst.
const BURST: usize = 32;

/// What one phase of the reader saw.
#[derive(Default, Clone, Copy)]
struct Phase {
    lookups: u64,
    secs: f64,
    worst_burst: Duration,
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let base = args.first().copied().unwrap_or(1_000_000);
    let new = args.get(1).copied().unwrap_or(1_000_000);
    // Rules per insert batch (by default the daemon's request size).
    let batch = args.get(2).copied().unwrap_or(100_000).max(1);
    let mut t = FlowTable::new(TableConfig {
        max_rules: base + new + 1024,
        ..TableConfig::default()
    });
    let rules: Vec<_> = (0..base).map(|i| bench_rule(i, MASKS)).collect();
    t.insert_batch(rules, BatchMode::BestEffort);
    let mut rng = SplitMix::new(7);
    let packets: Vec<FlowKey> = (0..FLOWS)
        .map(|_| packet_for(&bench_rule(rng.next() as usize % base, MASKS), &mut rng))
        .collect();

    // 0: warm up, 1: before, 2: during, 3: after, 4: stop.
    let phase = Arc::new(AtomicU8::new(0));
    let reader = t.reader();
    let ph = Arc::clone(&phase);
    let looker = std::thread::spawn(move || {
        let mut cache = ExactCache::new(4 * FLOWS);
        let mut seen = [Phase::default(); 4];
        let mut at = 0;
        let mut hits = 0u64;
        let mut started = Instant::now();
        let mut current = 0u8;
        loop {
            let p = ph.load(Ordering::Relaxed);
            if p != current {
                if let Some(s) = seen.get_mut(current as usize) {
                    s.secs = started.elapsed().as_secs_f64();
                }
                if p >= 4 {
                    break;
                }
                current = p;
                started = Instant::now();
            }
            let t0 = Instant::now();
            {
                let snap = reader.snapshot();
                let mut out: Vec<Option<HitRef<'_>>> = Vec::with_capacity(BURST);
                snap.lookup_batch_cached(&mut cache, &packets[at..at + BURST], &mut out);
                hits += out.iter().filter(|h| h.is_some()).count() as u64;
            }
            let took = t0.elapsed();
            if let Some(s) = seen.get_mut(current as usize) {
                s.lookups += BURST as u64;
                s.worst_burst = s.worst_burst.max(took);
            }
            at = (at + BURST) % FLOWS;
        }
        (seen, hits)
    });

    std::thread::sleep(Duration::from_millis(500));
    phase.store(1, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    phase.store(2, Ordering::Relaxed);
    let load = Instant::now();
    let mut batches = Vec::new();
    for first in (base..base + new).step_by(batch) {
        let rules: Vec<_> = (first..(first + batch).min(base + new))
            .map(|i| bench_rule(i, MASKS))
            .collect();
        let t0 = Instant::now();
        let out = t.insert_batch(rules, BatchMode::BestEffort);
        batches.push((t0.elapsed(), out.iter().filter(|r| r.is_ok()).count()));
    }
    let load_secs = load.elapsed().as_secs_f64();
    phase.store(3, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    phase.store(4, Ordering::Relaxed);
    let (seen, hits) = looker.join().expect("the lookup thread");

    println!(
        "table: {base} rules over {MASKS} masks, then {new} more in batches of {batch}; lookups: one thread, bursts of {BURST} through an exact-match cache, {FLOWS} active flows"
    );
    for (name, s) in ["before", "during", "after"].iter().zip(&seen[1..]) {
        println!(
            "{name:>7}: {:>6.2} M lookups/s over {:.2} s, longest burst {:.1} us",
            s.lookups as f64 / s.secs.max(1e-9) / 1e6,
            s.secs,
            s.worst_burst.as_secs_f64() * 1e6
        );
    }
    let inserted: usize = batches.iter().map(|b| b.1).sum();
    let longest = batches.iter().map(|b| b.0).max().unwrap_or_default();
    println!(
        "insert: {inserted} rules in {load_secs:.2} s ({:.2} M rules/s), {} batches, longest batch {:.1} ms",
        inserted as f64 / load_secs / 1e6,
        batches.len(),
        longest.as_secs_f64() * 1e3
    );
    println!("({hits} hits)");
}
