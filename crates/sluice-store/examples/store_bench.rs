//! Measures the store: one commit of N rules (default 1,000,000), 1,000 single-rule commits,
//! reopening (replay) with the N rules in the journal, compaction, and reopening from the
//! snapshot. The figures in `docs/store.md` come from
//! `cargo run --release -p sluice-store --example store_bench -- [DIR] [RULES]`.

use std::time::{Duration, Instant};

use sluice_store::{Change, Rule, Store};

/// A rule as the daemon would store its text form: ~28 bytes of match, 8 of actions.
fn rule(handle: u64) -> Rule {
    Rule {
        handle,
        priority: 100 + (handle % 16) as u32,
        matches: format!(
            "ip,in_port=1,nw_dst=10.{}.{}.{}",
            (handle >> 16) & 255,
            (handle >> 8) & 255,
            handle & 255
        )
        .into_bytes(),
        actions: b"output:2".to_vec(),
    }
}

/// Resident set size in bytes (Linux), 0 where unknown.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .unwrap_or_else(|| "/var/tmp/sluice-store-bench".to_string());
    let n: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let _ = std::fs::remove_dir_all(&dir);

    let (mut store, _) = Store::open(&dir)?;
    let rules: Vec<Rule> = (1..=n).map(rule).collect();
    let payload: usize = rules
        .iter()
        .map(|r| r.matches.len() + r.actions.len())
        .sum();
    let batch = [Change::RulesAdd(rules)];
    let t = Instant::now();
    store.commit(&batch)?;
    let bulk = t.elapsed();
    let journal = store.journal_bytes();
    println!(
        "commit of {n} rules in one batch: {:.3} s ({:.2}M rules/s, fdatasync included); \
         journal {:.1} bytes/rule for {:.1} bytes/rule of match+actions",
        secs(bulk),
        n as f64 / secs(bulk) / 1e6,
        journal as f64 / n as f64,
        payload as f64 / n as f64
    );
    drop(batch);

    let mut lat = Vec::with_capacity(1000);
    for h in n + 1..=n + 1000 {
        let c = [Change::RulesAdd(vec![rule(h)])];
        let t = Instant::now();
        store.commit(&c)?;
        lat.push(t.elapsed());
    }
    lat.sort();
    let mean = lat.iter().sum::<Duration>() / lat.len() as u32;
    println!(
        "1000 single-rule commits: mean {:.0} us, p50 {:.0} us, p99 {:.0} us, max {:.0} us",
        mean.as_secs_f64() * 1e6,
        lat[500].as_secs_f64() * 1e6,
        lat[990].as_secs_f64() * 1e6,
        lat[999].as_secs_f64() * 1e6
    );
    drop(store);

    let before = rss();
    let t = Instant::now();
    let (mut store, state) = Store::open(&dir)?;
    let open = t.elapsed();
    println!(
        "open + replay of a {:.1} MB journal: {} rules in {:.3} s ({:.2}M rules/s); \
         the returned State holds {:.0} resident bytes/rule",
        store.journal_bytes() as f64 / 1e6,
        state.rules.len(),
        secs(open),
        state.rules.len() as f64 / secs(open) / 1e6,
        rss().saturating_sub(before) as f64 / state.rules.len() as f64
    );
    drop(state);

    let t = Instant::now();
    store.compact()?;
    let compact = t.elapsed();
    println!(
        "compaction: {:.3} s, snapshot {:.1} MB ({:.1} bytes/rule)",
        secs(compact),
        store.snapshot_bytes() as f64 / 1e6,
        store.snapshot_bytes() as f64 / (n + 1000) as f64
    );
    drop(store);

    let t = Instant::now();
    let (_store, state) = Store::open(&dir)?;
    let open = t.elapsed();
    println!(
        "open from the snapshot: {} rules in {:.3} s",
        state.rules.len(),
        secs(open)
    );
    drop(state);
    drop(_store);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
