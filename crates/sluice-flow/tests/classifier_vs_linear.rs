//! Property test: the classifier against a naive linear scan, over random batches of inserts,
//! deletes and modifies with overlapping masks and equal priorities.
use proptest::prelude::*;
use sluice_flow::{
    key::v4_mapped, Action, ActionList, BatchMode, Field, FlowKey, FlowTable, Handle, Match, Rule,
    RuleError, RuleRef, TableConfig,
};

/// A small field space so rules overlap a lot: in_port 0..3, dst_ip 10.0.x.y with a few prefix
/// lengths, dst_port 0..3 exact or masked, priorities 0..4.
fn arb_match() -> impl Strategy<Value = Match> {
    (
        prop::option::of(0u64..3),
        prop::option::of((
            0u8..4,
            0u8..4,
            prop::sample::select(vec![0u32, 8, 16, 24, 30, 32]),
        )),
        prop::option::of((
            0u64..4,
            prop::sample::select(vec![0xffffu64, 0x0003, 0x0001, 0xfffe]),
        )),
    )
        .prop_map(|(port, ip, l4)| {
            let mut m = Match::ANY;
            if let Some(p) = port {
                m.set_exact(Field::InPort, p);
            }
            if ip.is_some() || l4.is_some() {
                m.set_exact(Field::EthType, 0x0800);
            }
            if let Some((a, b, plen)) = ip {
                let mask32: u32 = if plen == 0 {
                    0
                } else {
                    u32::MAX << (32 - plen)
                };
                let mut mk = [0u8; 16];
                mk[12..].copy_from_slice(&mask32.to_be_bytes());
                m.set(Field::IpDst, &v4_mapped([10, 0, a, b]), &mk);
            }
            if let Some((v, mask)) = l4 {
                m.set_exact(Field::IpProto, 6);
                m.set_uint_masked(Field::L4Dst, v, mask);
            }
            m
        })
}

fn arb_rule() -> impl Strategy<Value = Rule> {
    (arb_match(), 0u32..4, 0u32..3).prop_map(|(matcher, priority, out)| Rule {
        matcher,
        priority,
        actions: ActionList::new([Action::Output(out)]),
    })
}

fn arb_packet() -> impl Strategy<Value = FlowKey> {
    (0u64..3, any::<bool>(), 0u8..4, 0u8..4, 0u64..5).prop_map(|(port, ip, a, b, dport)| {
        let mut k = FlowKey::ZERO;
        k.set_uint(Field::InPort, port);
        if ip {
            k.set_uint(Field::EthType, 0x0800);
            k.set(Field::IpDst, &v4_mapped([10, 0, a, b]));
            k.set_uint(Field::IpProto, 6);
            k.set_uint(Field::L4Dst, dport);
        }
        k
    })
}

#[derive(Debug, Clone)]
enum Step {
    Insert(Vec<Rule>, bool),
    Delete(Vec<usize>, bool),
    DeleteExact(Vec<Rule>),
    Modify(Vec<usize>, u32),
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (prop::collection::vec(arb_rule(), 0..40), any::<bool>()).prop_map(|(r, a)| Step::Insert(r, a)),
        2 => (prop::collection::vec(0usize..64, 0..12), any::<bool>()).prop_map(|(d, a)| Step::Delete(d, a)),
        1 => prop::collection::vec(arb_rule(), 0..6).prop_map(Step::DeleteExact),
        1 => (prop::collection::vec(0usize..64, 0..6), 0u32..3).prop_map(|(d, o)| Step::Modify(d, o)),
    ]
}

/// The model: rules by handle.
#[derive(Default)]
struct Model {
    rules: Vec<(Handle, Rule)>,
}

impl Model {
    fn lookup(&self, k: &FlowKey) -> Option<(Handle, u32, ActionList)> {
        self.rules
            .iter()
            .filter(|(_, r)| r.matcher.matches(k))
            .max_by(|(ha, a), (hb, b)| a.priority.cmp(&b.priority).then(hb.cmp(ha)))
            .map(|(h, r)| (*h, r.priority, r.actions.clone()))
    }
    fn find(&self, m: &Match, prio: u32) -> Option<Handle> {
        self.rules
            .iter()
            .find(|(_, r)| r.matcher == *m && r.priority == prio)
            .map(|(h, _)| *h)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn classifier_matches_linear_scan(
        steps in prop::collection::vec(arb_step(), 1..12),
        packets in prop::collection::vec(arb_packet(), 32),
    ) {
        let mut t = FlowTable::new(TableConfig { max_rules: 120, max_bytes: usize::MAX , ..TableConfig::default()});
        let reader = t.reader();
        let mut model = Model::default();
        // One cache for the whole run: every publish must invalidate it.
        let mut cache = sluice_flow::ExactCache::new(8);
        // The burst path's caches: a small one (evictions inside a burst) and one that holds
        // every key (answers from the cache); both kept across publishes too.
        let mut burst_caches = [sluice_flow::ExactCache::new(8), sluice_flow::ExactCache::new(256)];
        for step in steps {
            match step {
                Step::Insert(rules, aon) => {
                    let mode = if aon { BatchMode::AllOrNothing } else { BatchMode::BestEffort };
                    let res = t.insert_batch(rules.clone(), mode);
                    prop_assert_eq!(res.len(), rules.len());
                    // Model: apply in order with the same quota, as best effort; handles come
                    // from the table's answers. Duplicates within the batch count too.
                    let mut staged: Vec<(Handle, Rule)> = Vec::new();
                    let mut expect: Vec<Result<(), RuleError>> = Vec::new();
                    for (r, got) in rules.iter().zip(&res) {
                        let dup = model.find(&r.matcher, r.priority).or_else(|| {
                            staged.iter().find(|(_, s)| s.matcher == r.matcher && s.priority == r.priority).map(|(h, _)| *h)
                        });
                        if let Some(d) = dup {
                            expect.push(Err(RuleError::Duplicate { existing: d }));
                        } else if model.rules.len() + staged.len() >= 120 {
                            expect.push(Err(RuleError::TableFull { limit: 120 }));
                        } else {
                            expect.push(Ok(()));
                            // The handle the table gave (in all-or-nothing mode an aborted rule
                            // still had one while the batch ran: take it from the error's
                            // references later; here we only need it for duplicate checks).
                            let h = match got { Ok(h) => *h, _ => Handle(u32::MAX - staged.len() as u32) };
                            staged.push((h, r.clone()));
                        }
                        if aon && expect.last().is_some_and(|e| e.is_err()) {
                            break;
                        }
                    }
                    let first_err = expect.iter().position(|e| e.is_err());
                    match (aon, first_err) {
                        (true, Some(f)) => {
                            for (i, got) in res.iter().enumerate() {
                                if i == f {
                                    match (&expect[f], got) {
                                        (Err(RuleError::Duplicate { .. }), Err(RuleError::Duplicate { .. })) => {}
                                        (e, g) => prop_assert_eq!(e.clone(), g.clone().map(|_| ())),
                                    }
                                } else {
                                    prop_assert_eq!(got.clone(), Err(RuleError::Aborted));
                                }
                            }
                        }
                        _ => {
                            for (e, got) in expect.iter().zip(&res) {
                                prop_assert_eq!(e.clone(), got.clone().map(|_| ()));
                            }
                            model.rules.extend(staged);
                        }
                    }
                }
                Step::Delete(idx, aon) => {
                    let targets: Vec<RuleRef> = idx.iter().map(|i| {
                        match model.rules.get(*i) {
                            Some((h, _)) => RuleRef::Handle(*h),
                            None => RuleRef::Handle(Handle(1000 + *i as u32)),
                        }
                    }).collect();
                    let mode = if aon { BatchMode::AllOrNothing } else { BatchMode::BestEffort };
                    let res = t.delete_batch(targets.clone(), mode);
                    let mut seen = std::collections::HashSet::new();
                    let valid: Vec<bool> = targets.iter().map(|t| match t {
                        RuleRef::Handle(h) => model.rules.iter().any(|(m, _)| m == h) && seen.insert(*h),
                        _ => false,
                    }).collect();
                    let all = valid.iter().all(|v| *v);
                    for ((t, v), r) in targets.iter().zip(&valid).zip(&res) {
                        if aon && !all {
                            prop_assert!(r.is_err());
                        } else {
                            prop_assert_eq!(*v, r.is_ok());
                            if *v {
                                if let RuleRef::Handle(h) = t { model.rules.retain(|(m, _)| m != h); }
                            }
                        }
                    }
                }
                Step::DeleteExact(rules) => {
                    let targets: Vec<RuleRef> = rules.iter().map(|r| RuleRef::Exact { matcher: r.matcher, priority: r.priority }).collect();
                    let res = t.delete_batch(targets, BatchMode::BestEffort);
                    for (r, got) in rules.iter().zip(res) {
                        match model.find(&r.matcher, r.priority) {
                            Some(h) => { prop_assert!(got.is_ok()); model.rules.retain(|(m, _)| *m != h); }
                            None => prop_assert_eq!(got, Err(RuleError::NotFound)),
                        }
                    }
                }
                Step::Modify(idx, out) => {
                    let a = ActionList::new([Action::Output(out + 10)]);
                    let targets: Vec<(RuleRef, ActionList)> = idx.iter().filter_map(|i| model.rules.get(*i)).map(|(h, _)| (RuleRef::Handle(*h), a.clone())).collect();
                    let hs: Vec<Handle> = targets.iter().map(|(t, _)| match t { RuleRef::Handle(h) => *h, _ => Handle(0) }).collect();
                    let res = t.modify_batch(targets, BatchMode::BestEffort);
                    prop_assert!(res.iter().all(|r| r.is_ok()));
                    for h in hs {
                        if let Some((_, r)) = model.rules.iter_mut().find(|(m, _)| *m == h) { r.actions = a.clone(); }
                    }
                }
            }
            prop_assert_eq!(t.len(), model.rules.len());
            let snap = reader.snapshot();
            prop_assert_eq!(snap.len(), model.rules.len());
            for p in &packets {
                let got = snap.lookup(p).map(|h| (h.handle, h.priority, h.actions.clone()));
                prop_assert_eq!(got, model.lookup(p), "packet {:?}", p);
                let cached = snap.lookup_cached(&mut cache, p).map(|h| (h.handle, h.priority, h.actions.clone()));
                prop_assert_eq!(cached, model.lookup(p), "cached, packet {:?}", p);
            }
            // The burst lookup (keys split into passes of 32, so use more than one pass).
            let keys: Vec<FlowKey> = packets.iter().chain(packets.iter().rev()).copied().collect();
            let mut out = Vec::new();
            snap.lookup_batch(&keys, &mut out);
            prop_assert_eq!(out.len(), keys.len());
            for (p, got) in keys.iter().zip(&out) {
                let got = got.map(|h| (h.handle, h.priority, h.actions.clone()));
                prop_assert_eq!(got, model.lookup(p), "burst, packet {:?}", p);
            }
            // The same burst through the portable build (what a processor without AVX2 runs).
            snap.lookup_batch_portable(&keys, &mut out);
            prop_assert_eq!(out.len(), keys.len());
            for (p, got) in keys.iter().zip(&out) {
                let got = got.map(|h| (h.handle, h.priority, h.actions.clone()));
                prop_assert_eq!(got, model.lookup(p), "portable burst, packet {:?}", p);
            }
            // The cached burst, twice per cache: the second pass answered from the cache.
            for c in burst_caches.iter_mut() {
                for _ in 0..2 {
                    snap.lookup_batch_cached(c, &keys, &mut out);
                    prop_assert_eq!(out.len(), keys.len());
                    for (p, got) in keys.iter().zip(&out) {
                        let got = got.map(|h| (h.handle, h.priority, h.actions.clone()));
                        prop_assert_eq!(got, model.lookup(p), "cached burst, packet {:?}", p);
                    }
                }
            }
            for (h, r) in &model.rules {
                let got = t.rule(*h);
                prop_assert_eq!(got.as_ref(), Some(r));
            }
        }
    }
}

/// Big batches take the hash-order path: duplicates must still be decided in batch order.
#[test]
fn big_batch_in_hash_order_keeps_batch_order_semantics() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let rules: Vec<Rule> = (0..6000)
        .map(|_| arb_rule().new_tree(&mut runner).unwrap().current())
        .collect();
    let packets: Vec<FlowKey> = (0..500)
        .map(|_| arb_packet().new_tree(&mut runner).unwrap().current())
        .collect();
    let mut t = FlowTable::new(TableConfig::default());
    let res = t.insert_batch(rules.clone(), BatchMode::BestEffort);
    let mut model = Model::default();
    for (r, got) in rules.iter().zip(&res) {
        match model.find(&r.matcher, r.priority) {
            Some(d) => assert_eq!(got, &Err(RuleError::Duplicate { existing: d })),
            None => model.rules.push((got.clone().unwrap(), r.clone())),
        }
    }
    assert_eq!(t.len(), model.rules.len());
    let snap = t.reader().snapshot();
    for p in &packets {
        let got = snap
            .lookup(p)
            .map(|h| (h.handle, h.priority, h.actions.clone()));
        assert_eq!(got, model.lookup(p));
    }
    let mut out = Vec::new();
    snap.lookup_batch(&packets, &mut out);
    assert_eq!(out.len(), packets.len());
    for (p, got) in packets.iter().zip(&out) {
        let got = got.map(|h| (h.handle, h.priority, h.actions.clone()));
        assert_eq!(got, model.lookup(p));
    }
    drop(out);
    drop(snap);
    // And all-or-nothing with a duplicate inside: nothing changes.
    let before = t.len();
    let res = t.insert_batch(rules.clone(), BatchMode::AllOrNothing);
    assert!(res.iter().all(|r| r.is_err()));
    assert_eq!(t.len(), before);
    let snap = t.reader().snapshot();
    assert_eq!(snap.len(), before);
}

/// The benchmark's workload at a size where subtables hold thousands of entries (long probe
/// runs, tags shared by other keys, buckets moved by deletes): the burst, cached and cached-burst
/// paths give the plain lookup's answer for every packet, after inserts, after deleting a third of
/// the rules, and after inserting them again (new handles).
/// Each lookup's winner as (handle, priority).
fn winners(out: &[Option<sluice_flow::HitRef<'_>>]) -> Vec<Option<(Handle, u32)>> {
    out.iter()
        .map(|h| h.map(|h| (h.handle, h.priority)))
        .collect()
}

#[test]
fn burst_and_cached_paths_agree_with_plain_lookup_at_scale() {
    // 16 masks: three stage words, exact filters; 64: up to five, filters that check only the
    // last three and the single stage's compare for the rest.
    for masks in [16, 64] {
        agree_at_scale(masks);
    }
}

fn agree_at_scale(masks: usize) {
    use sluice_flow::bench::{bench_rule, packet_for, SplitMix};
    let n = 40_000;
    let rules: Vec<Rule> = (0..n).map(|i| bench_rule(i, masks)).collect();
    let mut t = FlowTable::new(TableConfig::default());
    let handles: Vec<Handle> = t
        .insert_batch(rules.clone(), BatchMode::AllOrNothing)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let mut rng = SplitMix::new(7);
    // Packets of rules (some of them deleted later) and packets of nothing.
    let from: Vec<usize> = (0..3000).map(|_| (rng.next() as usize) % n).collect();
    let mut packets: Vec<FlowKey> = from
        .iter()
        .map(|&r| packet_for(&rules[r], &mut rng))
        .collect();
    packets.extend((0..300).map(|_| {
        let mut w = [0u64; sluice_flow::key::KEY_WORDS];
        for x in w.iter_mut() {
            *x = rng.next();
        }
        FlowKey::from_words(w)
    }));
    let mut small = sluice_flow::ExactCache::new(64);
    let mut big = sluice_flow::ExactCache::new(8192);
    let mut check = |t: &FlowTable, what: &str| {
        let snap = t.reader().snapshot();
        let want: Vec<_> = packets
            .iter()
            .map(|p| snap.lookup(p).map(|h| (h.handle, h.priority)))
            .collect();
        assert!(want.iter().any(|w| w.is_some()), "{what}: nothing matches");
        let mut out = Vec::new();
        snap.lookup_batch(&packets, &mut out);
        assert_eq!(winners(&out), want, "{what}: burst");
        snap.lookup_batch_portable(&packets, &mut out);
        assert_eq!(winners(&out), want, "{what}: portable burst");
        for c in [&mut small, &mut big] {
            for pass in 0..2 {
                snap.lookup_batch_cached(c, &packets, &mut out);
                assert_eq!(winners(&out), want, "{what}: cached burst, pass {pass}");
                let got: Vec<_> = packets
                    .iter()
                    .map(|p| snap.lookup_cached(c, p).map(|h| (h.handle, h.priority)))
                    .collect();
                assert_eq!(got, want, "{what}: cached, pass {pass}");
            }
        }
        assert!(big.hits > 0, "{what}: the big cache answered nothing");
    };
    check(&t, "inserted");
    // The truth for the packets of rules: the winner matches the packet and ranks at least as
    // high as the rule the packet was made from.
    let snap = t.reader().snapshot();
    for (p, &r) in packets.iter().zip(&from) {
        let hit = snap.lookup(p).expect("a packet of a rule matches");
        let winner = t.rule(hit.handle).expect("the winner is in the table");
        assert!(
            winner.matcher.matches(p),
            "{masks} masks: the winner matches"
        );
        assert!(
            hit.priority >= rules[r].priority,
            "{masks} masks: no better rule missed"
        );
    }
    drop(snap);
    let gone: Vec<RuleRef> = handles
        .iter()
        .step_by(3)
        .map(|h| RuleRef::Handle(*h))
        .collect();
    assert!(t
        .delete_batch(gone, BatchMode::AllOrNothing)
        .iter()
        .all(|r| r.is_ok()));
    check(&t, "a third deleted");
    let again: Vec<Rule> = rules.iter().step_by(3).cloned().collect();
    assert!(t
        .insert_batch(again, BatchMode::AllOrNothing)
        .iter()
        .all(|r| r.is_ok()));
    check(&t, "inserted again");
}
