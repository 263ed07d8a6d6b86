//! Insertion probe: first insert vs re-insert into warmed memory (page faults excluded).
//! `insert_probe [RULES [BATCH [INSERT_THREADS]]]`.
use sluice_flow::{bench, BatchMode, FlowTable, RuleRef, TableConfig};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let batch: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(65536);
    let threads: usize = std::env::args()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let rules: Vec<_> = (0..n).map(|i| bench::bench_rule(i, 16)).collect();
    let mut t = FlowTable::new(TableConfig {
        insert_threads: threads,
        ..TableConfig::default()
    });
    for round in 0..3 {
        let st = Instant::now();
        let mut hs = Vec::new();
        for c in rules.chunks(batch) {
            for r in t.insert_batch(c.to_vec(), BatchMode::BestEffort) {
                hs.push(r.unwrap());
            }
        }
        let ins = st.elapsed().as_secs_f64();
        let st = Instant::now();
        for c in hs.chunks(batch) {
            t.delete_batch(
                c.iter().map(|h| RuleRef::Handle(*h)).collect(),
                BatchMode::BestEffort,
            );
        }
        let del = st.elapsed().as_secs_f64();
        println!(
            "round {round}: insert {:.2} M/s, delete {:.2} M/s (incl. clone of input)",
            n as f64 / ins / 1e6,
            n as f64 / del / 1e6
        );
    }
}
