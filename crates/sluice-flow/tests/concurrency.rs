//! Real threads: readers look up while the writer publishes batches; every snapshot must show
//! whole batches only.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use sluice_flow::{
    key::v4_mapped, Action, ActionList, BatchMode, Field, FlowKey, FlowTable, Match, Rule, RuleRef,
    TableConfig,
};

const K: u32 = 64;

/// Batch `b` inserts K rules that all match the probe packet, with priorities b*K .. b*K+K-1,
/// each in its own mask (so a half-applied batch would be visible as a count or a winner that is
/// not the batch's best).
fn batch(b: u32) -> Vec<Rule> {
    (0..K)
        .map(|i| {
            let mut m = Match::ANY;
            m.set_exact(Field::EthType, 0x0800);
            let plen = 8 + (i % 24);
            let mask32: u32 = u32::MAX << (32 - plen);
            let mut mk = [0u8; 16];
            mk[12..].copy_from_slice(&mask32.to_be_bytes());
            let a = u32::from_be_bytes([10, 1, 2, 3]) & mask32;
            m.set(Field::IpDst, &v4_mapped(a.to_be_bytes()), &mk);
            m.set_exact(Field::L4Dst, u64::from(i / 24));
            m.set_exact(Field::IpProto, 6);
            Rule {
                matcher: m,
                priority: b * K + i,
                actions: ActionList::new([Action::Output(b)]),
            }
        })
        .collect()
}

fn probe(i: u32) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set_uint(Field::EthType, 0x0800);
    k.set(Field::IpDst, &v4_mapped([10, 1, 2, 3]));
    k.set_uint(Field::IpProto, 6);
    k.set_uint(Field::L4Dst, u64::from(i % 3));
    k
}

#[test]
fn readers_see_whole_batches() {
    let mut t = FlowTable::new(TableConfig::default());
    let stop = Arc::new(AtomicBool::new(false));
    // The writer starts when every reader runs, so the readers' snapshots overlap its batches.
    let start = Arc::new(Barrier::new(4));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let r = t.reader();
            let stop = Arc::clone(&stop);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                loop {
                    let done = stop.load(Ordering::Relaxed);
                    let s = r.snapshot();
                    let n = s.len() as u32;
                    assert_eq!(n % K, 0, "half a batch visible: {n} rules");
                    // Batches are inserted, and every other round the oldest batch is deleted,
                    // so the live batches are consecutive; the newest one holds the best rule.
                    if n > 0 {
                        for p in 0..3 {
                            let hit = s.lookup(&probe(p)).expect("a rule matches");
                            let b = hit.priority / K;
                            assert_eq!(hit.actions.as_slice(), &[Action::Output(b)]);
                            // The winner is the best rule of its batch for this port.
                            let best_i = (0..K).filter(|i| i / 24 == p).max().unwrap();
                            assert_eq!(hit.priority, b * K + best_i);
                        }
                    }
                    if done {
                        break;
                    }
                }
            })
        })
        .collect();
    let mut live: std::collections::VecDeque<Vec<sluice_flow::Handle>> = Default::default();
    start.wait();
    for b in 0..200u32 {
        let hs: Vec<_> = t
            .insert_batch(batch(b), BatchMode::AllOrNothing)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        live.push_back(hs);
        if b % 2 == 1 && live.len() > 2 {
            let old = live.pop_front().unwrap();
            let res = t.delete_batch(
                old.into_iter().map(RuleRef::Handle).collect(),
                BatchMode::AllOrNothing,
            );
            assert!(res.iter().all(|r| r.is_ok()));
        }
    }
    stop.store(true, Ordering::Relaxed);
    // Each reader checked a snapshot at least once after the last batch too (`done`).
    for h in readers {
        h.join().unwrap();
    }
    // Memory is not leaking per batch: the table holds only the live rules.
    assert_eq!(t.len(), live.len() * K as usize);
}
