//! `bench_flows`: the classifier benchmark (the library side of `sluice bench flows`), and
//! the rule-file generator for the OVS / nftables comparison (`bench/ovs/flows-vs-ovs.sh`).
//!
//! ```text
//! bench_flows [--rules N] [--masks M] [--batch B] [--threads T] [--insert-threads I]
//!             [--lookups L] [--flows F] [--json]
//! bench_flows --emit DIR [--rules N] [--masks M]   # writes sluice.rules, ovs.flows, nft.elems
//! bench_flows --load FILE [--json]                   # times parse + insert of a rules file
//! ```
//!
//! The timing and the loader are the `sluice` binary's own (`src/flow_cli.rs`, compiled in
//! here too), the rules come from `sluice_flow::bench`; the peers' rule formats are here.
use std::io::Write;

use sluice_flow::bench::bench_rule;
use sluice_flow::{Action, Field, FlowKey, PortNames, RuleText};

#[path = "../src/flow_cli.rs"]
mod cli;

fn main() -> std::io::Result<()> {
    let mut opts = cli::BenchOpts::default();
    let mut json = false;
    let mut emit: Option<String> = None;
    let mut load: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || -> usize {
            args.next()
                .and_then(|v| v.replace('_', "").parse().ok())
                .unwrap_or_else(|| {
                    eprintln!("{a} needs a number");
                    std::process::exit(2)
                })
        };
        match a.as_str() {
            "--rules" => opts.rules = num(),
            "--masks" => opts.masks = num(),
            "--batch" => opts.batch = num(),
            "--threads" => opts.threads = num(),
            "--insert-threads" => opts.insert_threads = num(),
            "--lookups" => opts.lookups = num(),
            "--flows" => opts.flows = num(),
            "--json" => json = true,
            "--emit" => emit = args.next(),
            "--load" => load = args.next(),
            _ => {
                eprintln!("unknown argument {a}");
                std::process::exit(2)
            }
        }
    }
    if let Some(dir) = emit {
        let dir = std::path::Path::new(&dir);
        let mut s = std::io::BufWriter::new(std::fs::File::create(dir.join("sluice.rules"))?);
        let mut o = std::io::BufWriter::new(std::fs::File::create(dir.join("ovs.flows"))?);
        let mut n = std::io::BufWriter::new(std::fs::File::create(dir.join("nft.elems"))?);
        for i in 0..opts.rules {
            writeln!(s, "{}", bench_rule_text(i, opts.masks))?;
            writeln!(o, "{}", bench_rule_openflow(i, opts.masks))?;
            writeln!(n, "{}", bench_rule_nft_element(i, opts.masks))?;
        }
        return Ok(());
    }
    if let Some(file) = load {
        let mut table = sluice_flow::FlowTable::new(sluice_flow::TableConfig::default());
        let ports = sluice_flow::PortNames::new();
        let rss0 = cli::rss_bytes().unwrap_or(0);
        let t = std::time::Instant::now();
        let rep = cli::load_batch_file(std::path::Path::new(&file), &mut table, &ports, |_| {})?;
        let secs = t.elapsed().as_secs_f64();
        let rss1 = cli::rss_bytes().unwrap_or(0);
        for e in rep.errors.iter().take(5) {
            eprintln!("{e}");
        }
        let rate = rep.inserted as f64 / secs;
        println!(
            "loaded {} rules from {} lines in {secs:.3} s: {rate:.0} rules/s (parse + insert), {} errors, {:.0} bytes/rule resident growth",
            rep.inserted,
            rep.lines,
            rep.errors.len(),
            rss1.saturating_sub(rss0) as f64 / rep.inserted.max(1) as f64
        );
        if json {
            println!(
                "{{\"rules\": {}, \"load_rules_per_sec\": {rate}, \"errors\": {}}}",
                rep.inserted,
                rep.errors.len()
            );
        }
        return Ok(());
    }
    let rep = cli::bench_flows(opts);
    println!("{rep}");
    if json {
        println!("{}", rep.to_json());
    }
    Ok(())
}

/// The benchmark rule `i` in Sluice's syntax.
fn bench_rule_text(i: usize, masks: usize) -> String {
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
fn bench_rule_openflow(i: usize, masks: usize) -> String {
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
fn bench_rule_nft_element(i: usize, masks: usize) -> String {
    let r = bench_rule(i, masks);
    let (k, m) = (&r.matcher.key, &r.matcher.mask);
    let d = ipv4_prefix(k, m, Field::IpDst).unwrap_or_else(|| "0.0.0.0/0".into());
    format!("{d} . {}", k.uint(Field::L4Dst))
}
