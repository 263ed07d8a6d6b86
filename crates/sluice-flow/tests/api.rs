//! Handles, quotas, typed errors, modify, batches on threads and the two copies' shared layout.
use sluice_flow::{
    bench, parse_rule, Action, ActionList, BatchMode, Field, FlowKey, FlowTable, Handle, Match,
    PortNames, Rule, RuleError, RuleRef, TableConfig,
};

fn rule(port: u16, prio: u32) -> Rule {
    let line =
        format!("prio {prio} ip_proto tcp dst_ip 10.0.0.0/8 dst_port {port} action output:1");
    parse_rule(&line, &PortNames::new()).unwrap()
}

#[test]
fn handles_are_small_and_reused() {
    let mut t = FlowTable::new(TableConfig::default());
    let hs: Vec<Handle> = (0..3).map(|i| t.insert(rule(i, 1)).unwrap()).collect();
    assert_eq!(hs, vec![Handle(0), Handle(1), Handle(2)]);
    t.delete(Handle(1)).unwrap();
    assert_eq!(
        t.delete(Handle(1)),
        Err(RuleError::UnknownHandle(Handle(1)))
    );
    assert_eq!(t.insert(rule(9, 1)).unwrap(), Handle(1));
    assert_eq!(
        t.insert(rule(9, 1)),
        Err(RuleError::Duplicate {
            existing: Handle(1)
        })
    );
    // Same match, other priority: a different rule.
    assert_eq!(t.insert(rule(9, 2)).unwrap(), Handle(3));
}

#[test]
fn quotas_and_invalid_masks() {
    let mut t = FlowTable::new(TableConfig {
        max_rules: 2,
        max_bytes: usize::MAX,
        ..TableConfig::default()
    });
    let res = t.insert_batch((0..3).map(|i| rule(i, 1)).collect(), BatchMode::BestEffort);
    assert!(res[0].is_ok() && res[1].is_ok());
    assert_eq!(res[2], Err(RuleError::TableFull { limit: 2 }));
    let per = FlowTable::bytes_per_rule();
    let mut t = FlowTable::new(TableConfig {
        max_rules: 100,
        max_bytes: 2 * per,
        ..TableConfig::default()
    });
    let res = t.insert_batch((0..3).map(|i| rule(i, 1)).collect(), BatchMode::BestEffort);
    assert_eq!(res[2], Err(RuleError::MemoryQuota { limit: 2 * per }));
    // Key bits outside the mask.
    let mut key = FlowKey::ZERO;
    key.set_uint(Field::L4Dst, 80);
    assert_eq!(Match::new(key, FlowKey::ZERO), Err(RuleError::InvalidMask));
    let bad = Rule {
        matcher: Match {
            key,
            mask: FlowKey::ZERO,
        },
        priority: 0,
        actions: ActionList::output(1),
    };
    assert_eq!(t.insert(bad), Err(RuleError::InvalidMask));
}

#[test]
fn all_or_nothing_leaves_the_table_unchanged() {
    let mut t = FlowTable::new(TableConfig::default());
    t.insert(rule(5, 1)).unwrap();
    let gen = t.generation();
    let res = t.insert_batch(
        vec![rule(1, 1), rule(5, 1), rule(2, 1)],
        BatchMode::AllOrNothing,
    );
    assert_eq!(
        res,
        vec![
            Err(RuleError::Aborted),
            Err(RuleError::Duplicate {
                existing: Handle(0)
            }),
            Err(RuleError::Aborted)
        ]
    );
    assert_eq!(t.len(), 1);
    assert_eq!(t.masks(), 1);
    assert_eq!(t.generation(), gen, "nothing was published");
    assert_eq!(t.reader().snapshot().len(), 1);
    let res = t.delete_batch(
        vec![RuleRef::Handle(Handle(0)), RuleRef::Handle(Handle(7))],
        BatchMode::AllOrNothing,
    );
    assert_eq!(
        res,
        vec![
            Err(RuleError::Aborted),
            Err(RuleError::UnknownHandle(Handle(7)))
        ]
    );
    assert_eq!(t.len(), 1);
}

#[test]
fn modify_and_delete_by_exact_match() {
    let mut t = FlowTable::new(TableConfig::default());
    let r = rule(80, 10);
    let h = t.insert(r.clone()).unwrap();
    let mut pk = FlowKey::ZERO;
    pk.set_uint(Field::EthType, 0x0800);
    pk.set(Field::IpDst, &sluice_flow::key::v4_mapped([10, 1, 2, 3]));
    pk.set_uint(Field::IpProto, 6);
    pk.set_uint(Field::L4Dst, 80);
    let reader = t.reader();
    assert_eq!(
        reader.lookup(&pk).unwrap().2.as_slice(),
        &[Action::Output(1)]
    );
    let new = ActionList::new([Action::PopVlan, Action::Output(4)]);
    let res = t.modify_batch(
        vec![(
            RuleRef::Exact {
                matcher: r.matcher,
                priority: 10,
            },
            new.clone(),
        )],
        BatchMode::BestEffort,
    );
    assert_eq!(res, vec![Ok(h)]);
    assert_eq!(reader.lookup(&pk).unwrap().2, new);
    assert_eq!(t.rule(h).unwrap().actions, new);
    assert_eq!(t.find(&r.matcher, 10), Some(h));
    let res = t.delete_batch(
        vec![RuleRef::Exact {
            matcher: r.matcher,
            priority: 10,
        }],
        BatchMode::BestEffort,
    );
    assert_eq!(res, vec![Ok(())]);
    assert!(reader.lookup(&pk).is_none());
    assert_eq!(t.masks(), 0, "the empty subtable is gone");
}

/// The by-handle batches (`modify_handles`, `delete_handles`) do what `modify_batch` and
/// `delete_batch` of `RuleRef::Handle`s do: per-handle results in order, an unknown or
/// repeated handle refused (the whole batch when all or nothing), `actions_of` and
/// `mask_number` following.
#[test]
fn batches_by_handle() {
    let mut t = FlowTable::new(TableConfig::default());
    let hs: Vec<Handle> = (0..4)
        .map(|i| t.insert(rule(80 + i, 10)).unwrap())
        .collect();
    let other = t
        .insert(parse_rule("prio 3 dst_ip 10.1.0.0/16 action drop", &PortNames::new()).unwrap())
        .unwrap();
    assert_eq!(t.mask_number(hs[0]), t.mask_number(hs[3]));
    assert_ne!(t.mask_number(hs[0]), t.mask_number(other));
    let new = ActionList::new([Action::Output(7)]);
    let res = t.modify_handles(
        vec![(hs[1], new.clone()), (Handle(999), new.clone())],
        BatchMode::AllOrNothing,
    );
    assert_eq!(
        res,
        vec![
            Err(RuleError::Aborted),
            Err(RuleError::UnknownHandle(Handle(999)))
        ]
    );
    assert_eq!(
        t.actions_of(hs[1]),
        Some(ActionList::new([Action::Output(1)]))
    );
    let res = t.modify_handles(
        vec![(hs[1], new.clone()), (Handle(999), new.clone())],
        BatchMode::BestEffort,
    );
    assert_eq!(
        res,
        vec![Ok(hs[1]), Err(RuleError::UnknownHandle(Handle(999)))]
    );
    assert_eq!(t.actions_of(hs[1]), Some(new.clone()));
    assert_eq!(t.rule(hs[1]).unwrap().actions, new);
    let res = t.delete_handles(&[hs[0], hs[2], hs[0]], BatchMode::AllOrNothing);
    assert_eq!(
        res,
        vec![
            Err(RuleError::Aborted),
            Err(RuleError::Aborted),
            Err(RuleError::UnknownHandle(hs[0]))
        ]
    );
    assert_eq!(t.len(), 5);
    let res = t.delete_handles(&[hs[0], hs[2], hs[0], Handle(999)], BatchMode::BestEffort);
    assert_eq!(
        res,
        vec![
            Ok(()),
            Ok(()),
            Err(RuleError::UnknownHandle(hs[0])),
            Err(RuleError::UnknownHandle(Handle(999)))
        ]
    );
    assert_eq!(t.len(), 3);
    assert_eq!(t.actions_of(hs[0]), None);
    let kept: Vec<Handle> = t
        .rules_of([hs[0], hs[1], other].into_iter())
        .map(|(h, r)| {
            assert_eq!(Some(&r), t.rule(h).as_ref());
            h
        })
        .collect();
    assert_eq!(kept, vec![hs[1], other], "a deleted handle is skipped");
    assert!(t.rule(hs[3]).is_some() && t.rule(other).is_some());
    // The next batch replays this one on the other copy: both still agree.
    let res = t.delete_handles(&[hs[1], hs[3]], BatchMode::BestEffort);
    assert_eq!(res, vec![Ok(()), Ok(())]);
    assert_eq!(t.len(), 1);
    assert_eq!(t.masks(), 1);
    assert_eq!(t.rules().count(), 1);
}

/// Aborted all-or-nothing batches (big enough to pre-size tables, and with rules joining
/// existing matches at other priorities) must leave both classifier copies with one layout: every
/// later batch is replayed on the other copy by entry index and bucket position. After each batch,
/// lookups (served by alternating copies), the rule dump and deletes by handle must agree with
/// what was inserted.
#[test]
fn aborted_batches_keep_both_copies_in_step() {
    let mut t = FlowTable::new(TableConfig::default());
    let mut live: Vec<(Handle, Rule)> = Vec::new();
    for round in 0..6u16 {
        // A batch of 600 new rules plus one duplicate of a live rule at the end: aborted.
        let base = round * 1000;
        let mut batch: Vec<Rule> = (0..600)
            .map(|i| rule(base + i, 1 + u32::from(i % 3)))
            .collect();
        if let Some((_, dup)) = live.first() {
            batch.push(dup.clone());
            let res = t.insert_batch(batch.clone(), BatchMode::AllOrNothing);
            assert!(matches!(res.last(), Some(Err(RuleError::Duplicate { .. }))));
            assert!(res[..600].iter().all(|r| *r == Err(RuleError::Aborted)));
            batch.pop();
        }
        // The same rules again, accepted; then a second priority for some matches (joins).
        let res = t.insert_batch(batch.clone(), BatchMode::AllOrNothing);
        for (r, got) in batch.iter().zip(&res) {
            live.push((got.clone().unwrap(), r.clone()));
        }
        let joins: Vec<Rule> = (0..50).map(|i| rule(base + i, 7)).collect();
        let res = t.insert_batch(joins.clone(), BatchMode::BestEffort);
        for (r, got) in joins.iter().zip(&res) {
            live.push((got.clone().unwrap(), r.clone()));
        }
        // Delete every fifth live rule by handle (read back from the records).
        let victims: Vec<Handle> = live.iter().step_by(5).map(|(h, _)| *h).collect();
        let res = t.delete_batch(
            victims.iter().map(|h| RuleRef::Handle(*h)).collect(),
            BatchMode::BestEffort,
        );
        assert!(res.iter().all(|r| r.is_ok()), "round {round}");
        live.retain(|(h, _)| !victims.contains(h));
        // Two empty publishes, so both copies serve the checks below.
        for _ in 0..2 {
            t.insert_batch(Vec::new(), BatchMode::BestEffort);
            assert_eq!(t.len(), live.len());
            let dump: Vec<(Handle, Rule)> = t.rules().collect();
            let mut want = live.clone();
            want.sort_by_key(|(h, _)| *h);
            assert_eq!(dump, want, "round {round}");
            let snap = t.reader().snapshot();
            for (h, r) in live.iter().step_by(7) {
                let hit = snap.lookup(&r.matcher.key).unwrap();
                // Same match: the highest priority of that match wins (7 over 1..3).
                let best = live
                    .iter()
                    .filter(|(_, o)| o.matcher == r.matcher)
                    .max_by(|a, b| a.1.priority.cmp(&b.1.priority).then(b.0.cmp(&a.0)))
                    .unwrap();
                assert_eq!(
                    (hit.handle, hit.priority),
                    (best.0, best.1.priority),
                    "{h:?}"
                );
            }
        }
    }
}

/// Rules that share one action-list value (found by its address, no hashing), lists forgotten
/// when their last rule goes and interned again later, and masks freed and reused: every rule
/// keeps exactly its own actions and lookups find it.
#[test]
fn shared_action_values_and_reused_masks_stay_exact() {
    let mut t = FlowTable::new(TableConfig::default());
    let lists: Vec<ActionList> = (0..4).map(ActionList::output).collect();
    let with = |port: u16, prio: u32, prefix: u8, a: &ActionList| {
        let mut r = rule(port, prio);
        let mut k = [0u8; 16];
        k[12] = 10;
        let mut mm = [0u8; 16];
        mm[12..].copy_from_slice(&(u32::MAX << (32 - u32::from(prefix))).to_be_bytes());
        r.matcher.set(Field::IpDst, &k, &mm);
        r.actions = a.clone();
        r
    };
    for round in 0..3u32 {
        // Batch: 64 rules cycling through the four shared lists and two masks.
        let batch: Vec<Rule> = (0..64u16)
            .map(|i| {
                let prefix = if i % 2 == 0 { 8 } else { 16 };
                with(i, round, prefix, &lists[usize::from(i % 4)])
            })
            .collect();
        let hs: Vec<Handle> = t
            .insert_batch(batch.clone(), BatchMode::BestEffort)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        for (h, r) in hs.iter().zip(&batch) {
            let got = t.rule(*h).unwrap();
            assert_eq!(got.actions, r.actions);
            assert!(got.actions.ptr_eq(&r.actions) || got.actions == r.actions);
            assert_eq!(got.matcher, r.matcher);
        }
        // Delete everything: both masks and all four lists are forgotten, to be registered
        // again (other ids, or the same ones) next round.
        let res = t.delete_batch(
            hs.iter().map(|h| RuleRef::Handle(*h)).collect(),
            BatchMode::BestEffort,
        );
        assert!(res.iter().all(Result::is_ok));
        assert!(t.is_empty());
        assert_eq!(t.masks(), 0);
    }
    // A list with other content at a new allocation is never confused with a cached one.
    let other = ActionList::new([Action::Drop]);
    let h = t.insert(with(1, 1, 8, &other)).unwrap();
    assert_eq!(t.rule(h).unwrap().actions, other);
}

/// `insert_threads` 2 gives exactly what in-order insertion gives: the same handles (reused
/// ones from deletes included), the same errors (duplicates of earlier rules of the batch and
/// of older rules, invalid masks), the same dumps and lookups from both classifier copies, in
/// batches big enough to be split over threads.
#[test]
fn parallel_insertion_equals_in_order_insertion() {
    let n = sluice_flow::PARALLEL_MIN_BATCH + 3000;
    let mut key = FlowKey::ZERO;
    key.set_uint(Field::L4Dst, 80);
    let invalid = Rule {
        matcher: Match {
            key,
            mask: FlowKey::ZERO,
        },
        priority: 0,
        actions: ActionList::output(1),
    };
    let batch = |from: usize, older: &[Rule]| -> Vec<Rule> {
        let mut b: Vec<Rule> = (from..from + n).map(|i| bench::bench_rule(i, 8)).collect();
        // Duplicates of earlier rules of this batch (the first moves every later handle).
        for (at, of) in [(900, 3), (5000, 4000), (5001, 12), (n - 1, 5000)] {
            b[at] = b[of].clone();
        }
        // Another priority for an earlier rule's match (it joins that entry), an invalid mask,
        // and duplicates of rules inserted by an earlier batch.
        b[7000] = b[20].clone();
        b[7000].priority += 5000;
        b[7001] = invalid.clone();
        for (k, r) in older.iter().take(5000).step_by(997).enumerate() {
            b[8000 + k] = r.clone();
        }
        b
    };
    let mut tables: Vec<FlowTable> = [1, 2]
        .into_iter()
        .map(|threads| {
            FlowTable::new(TableConfig {
                insert_threads: threads,
                ..TableConfig::default()
            })
        })
        .collect();
    let first = batch(0, &[]);
    let second = batch(n, &first);
    let mut results = Vec::new();
    for t in &mut tables {
        let a = t.insert_batch(first.clone(), BatchMode::BestEffort);
        // Free some handles (the next batch reuses them, most recently freed first).
        let victims: Vec<RuleRef> = a[10_000..]
            .iter()
            .filter_map(|r| r.clone().ok())
            .step_by(13)
            .map(RuleRef::Handle)
            .collect();
        assert!(t
            .delete_batch(victims, BatchMode::BestEffort)
            .iter()
            .all(Result::is_ok));
        let b = t.insert_batch(second.clone(), BatchMode::BestEffort);
        results.push((a, b));
    }
    let (a, b) = &results[0];
    assert_eq!(results[1].0, *a);
    assert_eq!(results[1].1, *b);
    // The cases above happened.
    assert!(matches!(a[900], Err(RuleError::Duplicate { existing }) if Ok(existing) == a[3]));
    assert!(matches!(b[5000], Err(RuleError::Duplicate { existing }) if Ok(existing) == b[4000]));
    assert_eq!(a[7001], Err(RuleError::InvalidMask));
    assert!(b[8000..8005]
        .iter()
        .all(|r| matches!(r, Err(RuleError::Duplicate { .. }))));
    // Two empty publishes: both copies of each table serve the comparison in turn.
    for _ in 0..2 {
        let dumps: Vec<Vec<(Handle, Rule)>> = tables
            .iter_mut()
            .map(|t| {
                t.insert_batch(Vec::new(), BatchMode::BestEffort);
                t.rules().collect()
            })
            .collect();
        assert_eq!(dumps[0], dumps[1]);
        let snaps: Vec<_> = tables.iter().map(|t| t.reader().snapshot()).collect();
        for r in first.iter().chain(&second).step_by(29) {
            let hits: Vec<_> = snaps
                .iter()
                .map(|s| s.lookup(&r.matcher.key).map(|h| (h.handle, h.priority)))
                .collect();
            assert_eq!(hits[0], hits[1]);
        }
    }
}

/// `find_batch` answers as `find` does for each target, in order: present rules, absent keys,
/// a wrong priority and a mask no rule has.
#[test]
fn find_batch_agrees_with_find() {
    let mut t = FlowTable::new(TableConfig::default());
    let names = PortNames::new();
    let mut targets = Vec::new();
    for i in 0..3000u32 {
        let text = format!(
            "prio {} eth_type ipv4 dst_ip 10.{}.{}.0/{} action drop",
            i % 7,
            i / 256,
            i % 256,
            24 + i % 3
        );
        let r = parse_rule(&text, &names).unwrap();
        if i % 5 != 0 {
            t.insert(r.clone()).unwrap();
        }
        targets.push((r.matcher, r.priority));
        targets.push((r.matcher, r.priority + 1));
    }
    let odd = parse_rule("prio 1 ip_proto tcp eth_type ipv4 action drop", &names).unwrap();
    targets.push((odd.matcher, 1));
    let refs: Vec<(&Match, u32)> = targets.iter().map(|(m, p)| (m, *p)).collect();
    let got = t.find_batch(&refs);
    let want: Vec<Option<Handle>> = targets.iter().map(|(m, p)| t.find(m, *p)).collect();
    assert_eq!(got, want);
    assert_eq!(got.iter().filter(|h| h.is_some()).count(), 2400);
    for h in got.iter().flatten() {
        assert!(t.mask_of(*h).is_some());
        assert_eq!(t.mask_of(*h), t.rule(*h).map(|r| r.matcher.mask));
    }
}

/// `catch_up` replays the last batch on the second copy only once no reader holds that copy;
/// after it, batches on either copy see every rule.
#[test]
fn catch_up_waits_for_readers_and_keeps_both_copies_whole() {
    let mut t = FlowTable::new(TableConfig::default());
    let reader = t.reader();
    assert!(t.catch_up(), "nothing to replay on a new table");
    let old = reader.snapshot();
    let first: Vec<Rule> = (0..40).map(|i| rule(i, 1)).collect();
    assert!(t
        .insert_batch(first, BatchMode::AllOrNothing)
        .iter()
        .all(|r| r.is_ok()));
    // `old` is a snapshot of the copy now standing by: it cannot be replayed on yet.
    assert!(!t.catch_up(), "replayed while a reader held the copy");
    assert_eq!(old.len(), 0);
    drop(old);
    assert!(t.catch_up(), "no reader left, yet not replayed");
    assert!(t.catch_up(), "a second catch-up has nothing to do");
    // Two more batches, one on each copy: each sees the first batch's rules.
    for (k, port) in [(1u32, 100u16), (2, 200)] {
        assert!(t.insert(rule(port, 2)).is_ok());
        let snap = reader.snapshot();
        assert_eq!(snap.len(), 40 + k as usize, "after batch {k}");
        let mut key = FlowKey::ZERO;
        key.set_uint(Field::EthType, 0x0800);
        key.set_uint(Field::IpProto, 6);
        key.set(Field::IpDst, &sluice_flow::key::v4_mapped([10, 1, 2, 3]));
        key.set_uint(Field::L4Dst, 7);
        assert!(
            snap.lookup(&key).is_some(),
            "rule of port 7 lost after batch {k}"
        );
    }
}

/// `insert_batch_ref_into` empties the vector it is given and writes what `insert_batch_ref`
/// returns, in both modes, for a caller that reuses the vector from batch to batch.
#[test]
fn insert_into_a_reused_vector_gives_what_insert_returns() {
    let batch = vec![rule(1, 1), rule(5, 1), rule(1, 1), rule(2, 1)];
    let mut a = FlowTable::new(TableConfig::default());
    let mut b = FlowTable::new(TableConfig::default());
    a.insert(rule(5, 1)).unwrap();
    b.insert(rule(5, 1)).unwrap();
    let mut out = vec![Err(RuleError::NotFound); 9];
    for mode in [BatchMode::AllOrNothing, BatchMode::BestEffort] {
        let want = a.insert_batch_ref(&batch, mode);
        b.insert_batch_ref_into(&batch, mode, &mut out);
        assert_eq!(out, want, "{mode:?}");
        assert_eq!(a.len(), b.len());
    }
    assert_eq!(b.len(), 3);
}

/// The same on several insert threads (a batch big enough to be split over them), with
/// duplicates in the batch.
#[test]
fn insert_into_a_reused_vector_on_threads() {
    let n = sluice_flow::PARALLEL_MIN_BATCH + 100;
    let mut batch: Vec<Rule> = (0..n).map(|i| bench::bench_rule(i, 8)).collect();
    batch[500] = batch[3].clone();
    let config = TableConfig {
        insert_threads: 2,
        ..TableConfig::default()
    };
    let (mut a, mut b) = (FlowTable::new(config), FlowTable::new(config));
    let want = a.insert_batch_ref(&batch, BatchMode::BestEffort);
    let mut out = vec![Err(RuleError::NotFound); 3];
    b.insert_batch_ref_into(&batch, BatchMode::BestEffort, &mut out);
    assert_eq!(out, want);
    assert!(matches!(out[500], Err(RuleError::Duplicate { .. })));
    assert_eq!(b.len(), n - 1);
}
