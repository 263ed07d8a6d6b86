//! Parsing alone: `parse_rule` over every line of a rules file, timed, one thread, several
//! rounds (the median printed) — the per-rule cost the daemon's reader pays before anything is
//! inserted.
//!
//! ```sh
//! target/release/examples/bench_flows --emit /tmp/r --rules 1000000 --masks 16
//! cargo run --release -p sluice-flow --example parse_rate -- /tmp/r/sluice.rules 5
//! ```

use sluice_flow::{parse_rule, PortNames};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: parse_rate RULES_FILE [ROUNDS]");
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let text = std::fs::read_to_string(&path).expect("a readable UTF-8 rules file");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    let ports = PortNames::new();
    let mut rates = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let mut ok = 0usize;
        for l in &lines {
            ok += usize::from(std::hint::black_box(parse_rule(l, &ports)).is_ok());
        }
        let s = t.elapsed().as_secs_f64();
        assert_eq!(ok, lines.len(), "every line of the file parses");
        rates.push(lines.len() as f64 / s);
    }
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    println!(
        "{} rules, {rounds} rounds: median {:.0} rules/s ({:.1} ns per rule); runs {:?}",
        lines.len(),
        median,
        1e9 / median,
        rates.iter().map(|r| *r as u64).collect::<Vec<_>>()
    );
}
