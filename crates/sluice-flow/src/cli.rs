//! The logic behind `sluice bench flows` and `sluice flow add --batch`, as library calls so the
//! binary only parses arguments and prints.
//!
//! This module does I/O (reads a rules file, reads `/proc/self/statm` for memory) and spawns
//! threads for the lookup benchmark; the rest of the crate does neither.

use std::io::BufRead;
use std::time::Instant;

use crate::action::{Action, Actions};
use crate::key::{v4_mapped, Field, FlowKey};
use crate::rule::{BatchMode, Match, Rule, RuleError};
use crate::table::{FlowTable, TableConfig};
use crate::text::{parse_rule, ParseError, PortNames, RuleText};

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
    /// Lookups per second, all threads, a burst of 32 keys per [`crate::Snapshot::lookup_batch`]
    /// call (no cache).
    pub lookups_per_sec_burst: f64,
    /// Lookups per second, all threads, through a per-thread [`crate::ExactCache`] of
    /// 4 × `flows` entries (at most 262144).
    pub lookups_per_sec_cached: f64,
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
        write!(
            f,
            "memory   {:>12.0} bytes/rule resident growth ({} estimated)",
            self.bytes_per_rule, self.bytes_per_rule_estimate
        )
    }
}

/// A small deterministic generator (splitmix64).
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    /// Next value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The benchmark's rule `i` of `n` over `masks` masks: IPv4 TCP, `dst_ip` with prefix
/// 16 + (mask mod 16), exact `dst_port`, plus `src_ip 172.16.0.0/12`-style and `in_port`
/// matches for masks 16..64. Distinct for every `i`; priority pseudo-random in 0..1024; action
/// `output:(i mod 16)`, one shared [`Actions`] value per port.
pub fn bench_rule(i: usize, masks: usize) -> Rule {
    let masks = masks.clamp(1, 64);
    let j = i % masks;
    let r = (i / masks) as u64;
    let prefix = 16 + (j % 16) as u32;
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_exact(Field::IpProto, 6);
    m.set_exact(Field::L4Dst, r & 0xffff);
    // Host part: the rule's high bits, left-aligned into the prefix after the 8-bit tag 10.
    let net = (10u32 << 24) | (((r >> 16) as u32 & 0xff) << 16) | ((j as u32) << 8);
    let mask32 = u32::MAX << (32 - prefix);
    let mut dm = [0u8; 16];
    dm[12..].copy_from_slice(&mask32.to_be_bytes());
    m.set(Field::IpDst, &v4_mapped((net & mask32).to_be_bytes()), &dm);
    let extra = j / 16;
    if extra & 1 == 1 {
        let mut sm = [0u8; 16];
        sm[12] = 0xff;
        m.set(Field::IpSrc, &v4_mapped([172, 0, 0, 0]), &sm);
    }
    if extra & 2 == 2 {
        m.set_exact(Field::InPort, 1);
    }
    let prio = (SplitMix::new(i as u64).next() % 1024) as u32;
    Rule {
        matcher: m,
        priority: prio,
        actions: BENCH_ACTIONS.with(|a| {
            a.get(i % 16)
                .cloned()
                .unwrap_or_else(|| Actions::output((i % 16) as u32))
        }),
    }
}

thread_local! {
    /// The benchmark's 16 action lists (`output:0` … `output:15`), one value each that its
    /// rules share, as a controller reuses its action values (a rule file's repeated action
    /// texts share one list too: see [`crate::text`]).
    static BENCH_ACTIONS: Vec<Actions> =
        (0..16).map(|p| Actions::new([Action::Output(p)])).collect();
}

/// A packet that matches `rule` (random bits where the rule's mask is zero).
pub fn packet_for(rule: &Rule, rng: &mut SplitMix) -> FlowKey {
    let mut w = [0u64; crate::key::KEY_WORDS];
    let k = rule.matcher.key.words();
    let m = rule.matcher.mask.words();
    for (i, x) in w.iter_mut().enumerate() {
        *x = (k[i] & m[i]) | (rng.next() & !m[i]);
    }
    FlowKey::from_words(w)
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
}

/// Runs `per` lookups on each of `threads` threads over `packets` (a snapshot per burst of 32);
/// returns seconds and matches.
fn run_lookups(
    table: &FlowTable,
    packets: &[FlowKey],
    threads: usize,
    per: usize,
    mode: Mode,
) -> (f64, u64) {
    let cache = match mode {
        Mode::Cached(n) => Some(n),
        _ => None,
    };
    let n_pk = packets.len().max(1);
    let t = Instant::now();
    let hits = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|ti| {
                let reader = table.reader();
                s.spawn(move || {
                    let mut emc = cache.map(crate::ExactCache::new);
                    let mut hits = 0u64;
                    let mut done = 0usize;
                    let mut pos = (ti * 7919) % n_pk;
                    let mut burst: Vec<FlowKey> = Vec::with_capacity(32);
                    // Results borrow the snapshot; the buffer is moved between lifetimes (an
                    // in-place `collect` of an emptied vector keeps its allocation).
                    let mut spare: Vec<Option<crate::HitRef<'static>>> = Vec::with_capacity(32);
                    while done < per {
                        let snap = reader.snapshot();
                        if let Mode::Burst = mode {
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
                            let mut out: Vec<Option<crate::HitRef<'_>>> =
                                core::mem::take(&mut spare)
                                    .into_iter()
                                    .map(|_| None)
                                    .collect();
                            snap.lookup_batch(&burst, &mut out);
                            hits += out.iter().filter(|h| h.is_some()).count() as u64;
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

/// The benchmark rule `i` in Sluice's syntax.
pub fn bench_rule_text(i: usize, masks: usize) -> String {
    let ports = PortNames::new();
    RuleText {
        rule: &bench_rule(i, masks),
        ports: &ports,
    }
    .to_string()
}

fn ipv4_prefix(k: &FlowKey, m: &FlowKey, f: Field) -> Option<String> {
    let (a, mk) = (k.addr(f), m.addr(f));
    if mk.iter().all(|b| *b == 0) {
        return None;
    }
    let bits: u32 = mk.iter().map(|b| b.count_ones()).sum();
    Some(format!("{}.{}.{}.{}/{bits}", a[12], a[13], a[14], a[15]))
}

/// The benchmark rule `i` as an OpenFlow flow for `ovs-ofctl add-flows` (port numbers + 1,
/// since OpenFlow port 0 is reserved).
pub fn bench_rule_openflow(i: usize, masks: usize) -> String {
    let r = bench_rule(i, masks);
    let (k, m) = (&r.matcher.key, &r.matcher.mask);
    let mut s = format!("priority={},tcp", r.priority);
    if !m.is_zero(Field::InPort) {
        s += &format!(",in_port={}", k.uint(Field::InPort) + 1);
    }
    if let Some(p) = ipv4_prefix(k, m, Field::IpSrc) {
        s += &format!(",nw_src={p}");
    }
    if let Some(p) = ipv4_prefix(k, m, Field::IpDst) {
        s += &format!(",nw_dst={p}");
    }
    s += &format!(",tp_dst={}", k.uint(Field::L4Dst));
    let out = match r.actions.first() {
        Some(Action::Output(p)) => *p + 1,
        _ => 1,
    };
    s += &format!(",actions=output:{out}");
    s
}

/// The benchmark rule `i` as an nftables interval-set element `ip daddr . tcp dport` (the nft
/// peer matches the same keys; it has no priorities).
pub fn bench_rule_nft_element(i: usize, masks: usize) -> String {
    let r = bench_rule(i, masks);
    let (k, m) = (&r.matcher.key, &r.matcher.mask);
    let d = ipv4_prefix(k, m, Field::IpDst).unwrap_or_else(|| "0.0.0.0/0".into());
    format!("{d} . {}", k.uint(Field::L4Dst))
}
