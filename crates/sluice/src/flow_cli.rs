//! The logic behind `sluice bench flows` and `sluice flow add --offline --batch`: the flow
//! benchmark's timing (insertion, then lookups on threads) and the rule-file loader, over the
//! `sluice-flow` library. It does I/O (reads a rules file, reads `/proc/self/statm` for
//! memory), reads the clock and spawns threads; the library does none of these. The benchmark's
//! rules come from [`sluice_flow::bench`].
//!
//! (Also compiled into the `bench_flows` example, which the OVS comparison script runs.)

use std::io::BufRead;
use std::time::Instant;

use sluice_flow::bench::{bench_rule, packet_for, SplitMix};
use sluice_flow::{
    parse_rule, BatchMode, ExactCache, FlowKey, FlowTable, HitRef, ParseError, PortNames, Rule,
    RuleError, TableConfig,
};

/// Options of `sluice bench flows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchOpts {
    /// Rules to insert.
    pub rules: usize,
    /// Distinct masks (1..=64).
    pub masks: usize,
    /// Rules per insert batch.
    pub batch: usize,
    /// Lookup threads.
    pub threads: usize,
    /// Insert threads ([`TableConfig::insert_threads`]).
    pub insert_threads: usize,
    /// Lookups per thread.
    pub lookups: usize,
    /// Distinct packets (flows) in the lookup mix.
    pub flows: usize,
    /// Generator seed.
    pub seed: u64,
}

impl Default for BenchOpts {
    fn default() -> Self {
        BenchOpts {
            rules: 1_000_000,
            masks: 16,
            batch: 65_536,
            threads: 1,
            insert_threads: 1,
            lookups: 5_000_000,
            flows: 65_536,
            seed: 1,
        }
    }
}

/// What `sluice bench flows` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    /// Rules inserted.
    pub rules: usize,
    /// Distinct masks.
    pub masks: usize,
    /// Batch size.
    pub batch: usize,
    /// Lookup threads.
    pub threads: usize,
    /// Insert threads.
    pub insert_threads: usize,
    /// Seconds spent in `insert_batch` (rule generation excluded).
    pub insert_secs: f64,
    /// Rules per second.
    pub insert_rules_per_sec: f64,
    /// Lookups done, all threads.
    pub lookups: u64,
    /// Lookups per second, all threads.
    pub lookups_per_sec: f64,
    /// Lookups per second, all threads, a burst of 32 keys per [`sluice_flow::Snapshot::lookup_batch`]
    /// call (no cache).
    pub lookups_per_sec_burst: f64,
    /// Lookups per second, all threads, through a per-thread [`ExactCache`] of
    /// 4 × `flows` entries (at most 262144), built and warmed by one pass over the flows before
    /// the timing starts.
    pub lookups_per_sec_cached: f64,
    /// Lookups per second, all threads, a burst of 32 keys per
    /// [`sluice_flow::Snapshot::lookup_batch_cached`] call through the same kind of cache (the
    /// datapath's burst path).
    pub lookups_per_sec_cached_burst: f64,
    /// Fraction of the cached bursts' lookups the exact-match cache answered.
    pub cache_hit_rate: f64,
    /// Distinct packets in the lookup mix.
    pub flows: usize,
    /// Fraction of lookups that matched a rule.
    pub hit_rate: f64,
    /// Resident memory growth per rule during insertion (bytes; 0 when unknown).
    pub bytes_per_rule: f64,
    /// The table's own estimate per rule (bytes).
    pub bytes_per_rule_estimate: usize,
}

impl BenchReport {
    /// The one-line JSON form (`{"rules": N, "masks": M, "insert_rules_per_sec": …, …}`).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "rules": self.rules,
            "masks": self.masks,
            "batch": self.batch,
            "threads": self.threads,
            "insert_threads": self.insert_threads,
            "insert_secs": self.insert_secs,
            "insert_rules_per_sec": self.insert_rules_per_sec,
            "lookups": self.lookups,
            "lookups_per_sec": self.lookups_per_sec,
            "lookups_per_sec_burst": self.lookups_per_sec_burst,
            "lookups_per_sec_cached": self.lookups_per_sec_cached,
            "lookups_per_sec_cached_burst": self.lookups_per_sec_cached_burst,
            "cache_hit_rate": self.cache_hit_rate,
            "flows": self.flows,
            "hit_rate": self.hit_rate,
            "bytes_per_rule": self.bytes_per_rule,
            "bytes_per_rule_estimate": self.bytes_per_rule_estimate,
        })
        .to_string()
    }
}

impl core::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(
            f,
            "rules {} masks {} batch {} threads {} insert threads {}",
            self.rules, self.masks, self.batch, self.threads, self.insert_threads
        )?;
        writeln!(
            f,
            "insert   {:>12.0} rules/s   ({:.3} s)",
            self.insert_rules_per_sec, self.insert_secs
        )?;
        writeln!(
            f,
            "lookup   {:>12.0} lookups/s ({} lookups over {} flows, {:.1}% match, {} thread(s))",
            self.lookups_per_sec,
            self.lookups,
            self.flows,
            self.hit_rate * 100.0,
            self.threads
        )?;
        writeln!(
            f,
            "burst    {:>12.0} lookups/s (lookup_batch, 32 keys per call)",
            self.lookups_per_sec_burst
        )?;
        writeln!(
            f,
            "cached   {:>12.0} lookups/s (per-thread exact-match cache in front)",
            self.lookups_per_sec_cached
        )?;
        writeln!(
            f,
            "cached burst {:>8.0} lookups/s (lookup_batch_cached, 32 keys per call; {:.1}% cache hits)",
            self.lookups_per_sec_cached_burst,
            self.cache_hit_rate * 100.0
        )?;
        write!(
            f,
            "memory   {:>12.0} bytes/rule resident growth ({} estimated)",
            self.bytes_per_rule, self.bytes_per_rule_estimate
        )
    }
}

/// Resident set size of this process in bytes, when `/proc` says.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Runs `sluice bench flows`: inserts `rules` generated rules in batches, then runs lookups over
/// a packet mix (one packet per sampled rule, random bits where the rule does not match) on
/// `threads` threads, each taking a snapshot per burst of 32 packets.
pub fn bench_flows(opts: BenchOpts) -> BenchReport {
    let masks = opts.masks.clamp(1, 64);
    let mut table = FlowTable::new(TableConfig {
        max_rules: opts.rules.max(1),
        max_bytes: usize::MAX,
        insert_threads: opts.insert_threads.max(1),
    });
    let batch = opts.batch.max(1);
    let rss0 = rss_bytes();
    let mut spent = 0f64;
    let mut i = 0;
    let mut buf = Vec::with_capacity(batch);
    while i < opts.rules {
        let end = (i + batch).min(opts.rules);
        buf.clear();
        buf.extend((i..end).map(|k| bench_rule(k, masks)));
        let rules = core::mem::take(&mut buf);
        let t = Instant::now();
        let res = table.insert_batch(rules, BatchMode::BestEffort);
        spent += t.elapsed().as_secs_f64();
        debug_assert!(res.iter().all(|r| r.is_ok()));
        i = end;
    }
    let rss1 = rss_bytes();
    let bytes_per_rule = match (rss0, rss1) {
        (Some(a), Some(b)) if opts.rules > 0 => b.saturating_sub(a) as f64 / opts.rules as f64,
        _ => 0.0,
    };
    // Packet mix: `flows` packets, each matching a sampled rule.
    let mut rng = SplitMix::new(opts.seed);
    let n_pk = opts.flows.max(1);
    let packets: Vec<FlowKey> = (0..n_pk)
        .map(|_| {
            let r = bench_rule((rng.next() as usize) % opts.rules.max(1), masks);
            packet_for(&r, &mut rng)
        })
        .collect();
    let threads = opts.threads.max(1);
    let (secs, hits) = run_lookups(&table, &packets, threads, opts.lookups, Mode::Single);
    let (secs_b, hits_b) = run_lookups(&table, &packets, threads, opts.lookups, Mode::Burst);
    debug_assert_eq!(hits, hits_b);
    let cache = (4 * n_pk).min(1 << 18);
    let (secs_c, _) = run_lookups(&table, &packets, threads, opts.lookups, Mode::Cached(cache));
    let (secs_cb, cache_hits) = run_lookups(
        &table,
        &packets,
        threads,
        opts.lookups,
        Mode::CachedBurst(cache),
    );
    let total = (opts.lookups.div_ceil(32) * 32 * threads) as u64;
    BenchReport {
        rules: table.len(),
        masks: table.masks(),
        batch,
        threads,
        insert_threads: opts.insert_threads.max(1),
        insert_secs: spent,
        insert_rules_per_sec: if spent > 0.0 {
            opts.rules as f64 / spent
        } else {
            0.0
        },
        lookups: total,
        lookups_per_sec: total as f64 / secs.max(1e-9),
        lookups_per_sec_burst: total as f64 / secs_b.max(1e-9),
        lookups_per_sec_cached: total as f64 / secs_c.max(1e-9),
        lookups_per_sec_cached_burst: total as f64 / secs_cb.max(1e-9),
        cache_hit_rate: cache_hits as f64 / (total.max(1)) as f64,
        flows: n_pk,
        hit_rate: hits as f64 / (total.max(1)) as f64,
        bytes_per_rule,
        bytes_per_rule_estimate: FlowTable::bytes_per_rule(),
    }
}

/// How [`run_lookups`] looks up.
#[derive(Clone, Copy)]
enum Mode {
    /// `Snapshot::lookup`, key by key.
    Single,
    /// `Snapshot::lookup_batch` of each burst.
    Burst,
    /// `Snapshot::lookup_cached` through an exact-match cache of this many entries.
    Cached(usize),
    /// `Snapshot::lookup_batch_cached` of each burst through an exact-match cache of this many
    /// entries.
    CachedBurst(usize),
}

/// Runs `per` lookups on each of `threads` threads over `packets` (a snapshot per burst of 32);
/// returns seconds and matches (for [`Mode::CachedBurst`], the lookups the cache answered).
fn run_lookups(
    table: &FlowTable,
    packets: &[FlowKey],
    threads: usize,
    per: usize,
    mode: Mode,
) -> (f64, u64) {
    let cache = match mode {
        Mode::Cached(n) | Mode::CachedBurst(n) => Some(n),
        _ => None,
    };
    let n_pk = packets.len().max(1);
    // The timing starts once every thread has its cache built and warm (one untimed pass over
    // the flows): the steady state of a datapath thread whose active flows fit its cache.
    let ready = std::sync::Barrier::new(threads + 1);
    let ready = &ready;
    let mut t = Instant::now();
    let hits = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|ti| {
                let reader = table.reader();
                s.spawn(move || {
                    let mut emc = cache.map(ExactCache::new);
                    if let Some(c) = emc.as_mut() {
                        let snap = reader.snapshot();
                        for p in packets {
                            let _ = snap.lookup_cached(c, p);
                        }
                        c.hits = 0;
                        c.misses = 0;
                    }
                    ready.wait();
                    let mut hits = 0u64;
                    let mut done = 0usize;
                    let mut pos = (ti * 7919) % n_pk;
                    let mut burst: Vec<FlowKey> = Vec::with_capacity(32);
                    // Results borrow the snapshot; the buffer is moved between lifetimes (an
                    // in-place `collect` of an emptied vector keeps its allocation).
                    let mut spare: Vec<Option<HitRef<'static>>> = Vec::with_capacity(32);
                    while done < per {
                        let snap = reader.snapshot();
                        if let Mode::Burst | Mode::CachedBurst(_) = mode {
                            burst.clear();
                            for _ in 0..32 {
                                if let Some(p) = packets.get(pos) {
                                    burst.push(*p);
                                }
                                pos += 1;
                                if pos == n_pk {
                                    pos = 0;
                                }
                            }
                            let mut out: Vec<Option<HitRef<'_>>> = core::mem::take(&mut spare)
                                .into_iter()
                                .map(|_| None)
                                .collect();
                            match emc.as_mut() {
                                Some(c) => {
                                    let before = c.hits;
                                    snap.lookup_batch_cached(c, &burst, &mut out);
                                    hits += c.hits - before;
                                }
                                None => {
                                    snap.lookup_batch(&burst, &mut out);
                                    hits += out.iter().filter(|h| h.is_some()).count() as u64;
                                }
                            }
                            out.clear();
                            spare = out.into_iter().map(|_| None).collect();
                            done += 32;
                            continue;
                        }
                        for _ in 0..32 {
                            if let Some(p) = packets.get(pos) {
                                let hit = match emc.as_mut() {
                                    Some(c) => snap.lookup_cached(c, p).is_some(),
                                    None => snap.lookup(p).is_some(),
                                };
                                hits += u64::from(hit);
                            }
                            pos += 1;
                            if pos == n_pk {
                                pos = 0;
                            }
                        }
                        done += 32;
                    }
                    hits
                })
            })
            .collect();
        ready.wait();
        t = Instant::now();
        hs.into_iter().map(|h| h.join().unwrap_or(0)).sum::<u64>()
    });
    (t.elapsed().as_secs_f64(), hits)
}

/// The error of one line of a rules file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineErrorKind {
    /// The line does not parse.
    Parse(ParseError),
    /// The table rejected the rule.
    Rule(RuleError),
}

/// One failed line of a rules file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number.
    pub line_no: u64,
    /// The line's text.
    pub line: String,
    /// What went wrong.
    pub kind: LineErrorKind,
}

impl core::fmt::Display for LineError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.kind {
            LineErrorKind::Parse(e) => {
                write!(f, "line {}: {}\n{}", self.line_no, e, e.render(&self.line))
            }
            LineErrorKind::Rule(e) => write!(f, "line {}: {}\n{}", self.line_no, e, self.line),
        }
    }
}

/// What loading a rules file did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Lines read (including blank and comment lines).
    pub lines: u64,
    /// Rules inserted.
    pub inserted: u64,
    /// Failed lines, in file order.
    pub errors: Vec<LineError>,
}

/// Rules per batch when loading a file.
pub const LOAD_BATCH: usize = 8192;

/// Streams a rules file (one rule per line; blank lines and `#` comments skipped) into `table` in
/// best-effort batches of [`LOAD_BATCH`], calling `progress` with the number of lines read after
/// each batch.
pub fn load_batch_file(
    path: &std::path::Path,
    table: &mut FlowTable,
    ports: &PortNames,
    progress: impl FnMut(u64),
) -> std::io::Result<LoadReport> {
    let f = std::fs::File::open(path)?;
    load_batch_reader(std::io::BufReader::new(f), table, ports, progress)
}

/// [`load_batch_file`] over any reader.
pub fn load_batch_reader(
    reader: impl BufRead,
    table: &mut FlowTable,
    ports: &PortNames,
    mut progress: impl FnMut(u64),
) -> std::io::Result<LoadReport> {
    let mut rep = LoadReport::default();
    let mut rules = Vec::with_capacity(LOAD_BATCH);
    let mut where_: Vec<(u64, String)> = Vec::with_capacity(LOAD_BATCH);
    let flush = |rules: &mut Vec<Rule>,
                 where_: &mut Vec<(u64, String)>,
                 rep: &mut LoadReport,
                 table: &mut FlowTable| {
        let res = table.insert_batch(core::mem::take(rules), BatchMode::BestEffort);
        for (r, (no, line)) in res.into_iter().zip(where_.drain(..)) {
            match r {
                Ok(_) => rep.inserted += 1,
                Err(e) => rep.errors.push(LineError {
                    line_no: no,
                    line,
                    kind: LineErrorKind::Rule(e),
                }),
            }
        }
    };
    for line in reader.lines() {
        let line = line?;
        rep.lines += 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        match parse_rule(&line, ports) {
            Ok(r) => {
                rules.push(r);
                where_.push((rep.lines, line));
            }
            Err(e) => rep.errors.push(LineError {
                line_no: rep.lines,
                line,
                kind: LineErrorKind::Parse(e),
            }),
        }
        if rules.len() >= LOAD_BATCH {
            flush(&mut rules, &mut where_, &mut rep, table);
            progress(rep.lines);
        }
    }
    if !rules.is_empty() {
        flush(&mut rules, &mut where_, &mut rep, table);
    }
    progress(rep.lines);
    rep.errors.sort_by_key(|e| e.line_no);
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_batch_reports_line_errors_and_progress() {
        let text = "# comment\nprio 1 dst_ip 10.0.0.0/8 action output:1\n\nprio 1 dst_ip 10.0.0.0/8 action output:2\nprio 2 dst_ipp 1.2.3.4 action drop\nprio 3 dst_ip 10.0.0.0/8 action drop\n";
        let mut t = FlowTable::new(TableConfig::default());
        let mut progress = Vec::new();
        let rep = load_batch_reader(text.as_bytes(), &mut t, &PortNames::new(), |n| {
            progress.push(n)
        })
        .unwrap();
        assert_eq!(rep.lines, 6);
        assert_eq!(rep.inserted, 2);
        assert_eq!(rep.errors.len(), 2);
        assert_eq!(rep.errors[0].line_no, 4);
        assert!(matches!(
            rep.errors[0].kind,
            LineErrorKind::Rule(RuleError::Duplicate { .. })
        ));
        assert_eq!(rep.errors[1].line_no, 5);
        let shown = rep.errors[1].to_string();
        assert!(shown.contains("line 5") && shown.contains('^'), "{shown}");
        assert_eq!(progress.last(), Some(&6));
    }

    #[test]
    fn bench_report_json_has_the_issue_fields() {
        let rep = bench_flows(BenchOpts {
            rules: 2000,
            masks: 16,
            batch: 500,
            threads: 2,
            insert_threads: 2,
            lookups: 256,
            flows: 64,
            seed: 3,
        });
        assert_eq!(rep.rules, 2000);
        assert_eq!(rep.masks, 16);
        // Every packet of the mix is built from a rule, and each thread does 256 lookups.
        assert_eq!(rep.lookups, 512);
        assert_eq!(rep.hit_rate, 1.0);
        let v: serde_json::Value = serde_json::from_str(&rep.to_json()).unwrap();
        for k in [
            "rules",
            "masks",
            "insert_rules_per_sec",
            "lookups_per_sec",
            "lookups_per_sec_cached_burst",
            "bytes_per_rule",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert!(rep.to_string().contains("rules/s"));
    }
}
