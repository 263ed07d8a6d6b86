//! The staged lookup (a subtable is skipped when no rule has the packet's non-L4 words) and the
//! burst lookup, against a linear scan, while stage values come and go; and how many flows the
//! exact-match cache holds.
use sluice_flow::{
    parse_rule, BatchMode, ExactCache, FlowKey, FlowTable, Handle, PortNames, Rule, RuleRef,
    TableConfig,
};

fn rule(net: u8, port: u16, prio: u32) -> Rule {
    let line = format!(
        "prio {prio} ip_proto tcp dst_ip 10.{net}.0.0/16 dst_port {port} action output:{}",
        port % 7
    );
    parse_rule(&line, &PortNames::new()).unwrap()
}

/// Highest priority, then lowest handle, by scanning every rule.
fn scan(rules: &[(Handle, Rule)], p: &FlowKey) -> Option<(Handle, u32)> {
    rules
        .iter()
        .filter(|(_, r)| r.matcher.key.matches(&r.matcher.mask, p))
        .map(|(h, r)| (*h, r.priority))
        .min_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)))
}

fn packets() -> Vec<FlowKey> {
    // Every (net, port) pair with nets and ports both present and absent, plus host bits.
    let mut v = Vec::new();
    for net in 0..40u8 {
        for port in [0u16, 1, 5, 17, 63, 64, 200] {
            let r = rule(net, port, 0);
            let mut k = r.matcher.key;
            let mut ip = k.addr(sluice_flow::Field::IpDst);
            ip[15] = net.wrapping_mul(37);
            k.set(sluice_flow::Field::IpDst, &ip);
            v.push(k);
        }
    }
    v
}

fn check(t: &FlowTable, model: &[(Handle, Rule)], packets: &[FlowKey]) {
    let snap = t.reader().snapshot();
    let mut out = Vec::new();
    snap.lookup_batch(packets, &mut out);
    for (p, burst) in packets.iter().zip(&out) {
        let want = scan(model, p);
        let one = snap.lookup(p).map(|h| (h.handle, h.priority));
        assert_eq!(one, want, "lookup {p:?}");
        assert_eq!(burst.map(|h| (h.handle, h.priority)), want, "burst {p:?}");
    }
    snap.lookup_batch_portable(packets, &mut out);
    for (p, burst) in packets.iter().zip(&out) {
        let want = scan(model, p);
        assert_eq!(
            burst.map(|h| (h.handle, h.priority)),
            want,
            "portable burst {p:?}"
        );
    }
    // Through an exact-match cache, small (evictions) and large (hits from an earlier burst),
    // every packet twice in a row (duplicates within a burst) and the whole list twice.
    let twice: Vec<FlowKey> = packets.iter().flat_map(|p| [*p, *p]).collect();
    for entries in [16, 4096] {
        let mut cache = ExactCache::new(entries);
        for round in 0..2 {
            let mut out = vec![None; twice.len()];
            snap.lookup_batch_cached(&mut cache, &twice, &mut out);
            for (p, got) in twice.iter().zip(&out) {
                let want = scan(model, p);
                let got = got.map(|h| (h.handle, h.priority));
                assert_eq!(got, want, "cached ({entries}, round {round}) {p:?}");
            }
        }
        if entries == 4096 {
            assert_eq!(cache.hits, twice.len() as u64, "the second round hits");
        }
    }
}

#[test]
fn staged_filter_follows_inserts_and_deletes() {
    let mut t = FlowTable::new(TableConfig::default());
    let mut model: Vec<(Handle, Rule)> = Vec::new();
    let pk = packets();
    // Grow the stage filter from one value (the linear-scan form) to 32 (the hash form, with
    // 64 entries per value), checking at every size.
    for net in 0..32u8 {
        let rules: Vec<Rule> = (0..64u16)
            .map(|port| rule(net, port, u32::from(port) % 5 + u32::from(net % 3)))
            .collect();
        let res = t.insert_batch(rules.clone(), BatchMode::BestEffort);
        for (r, h) in rules.into_iter().zip(res) {
            model.push((h.unwrap(), r));
        }
        if net < 6 || net % 8 == 7 {
            check(&t, &model, &pk);
        }
    }
    // A second mask sharing the packets: equal priorities across subtables.
    let wide: Vec<Rule> = (0..16u8)
        .map(|i| {
            let net = 2 * i;
            let line = format!("prio 3 ip_proto tcp dst_ip 10.{net}.0.0/15 action drop");
            parse_rule(&line, &PortNames::new()).unwrap()
        })
        .collect();
    let res = t.insert_batch(wide.clone(), BatchMode::BestEffort);
    for (r, h) in wide.into_iter().zip(res) {
        model.push((h.unwrap(), r));
    }
    check(&t, &model, &pk);
    // Remove whole stage values (every rule of a /16) and single rules, then shrink back to a
    // few values.
    for round in 0..4u8 {
        let gone: Vec<Handle> = model
            .iter()
            .filter(|(_, r)| {
                let net = r.matcher.key.addr(sluice_flow::Field::IpDst)[13];
                net % 4 == round
                    || r.matcher.key.uint(sluice_flow::Field::L4Dst) == u64::from(round)
            })
            .map(|(h, _)| *h)
            .collect();
        let res = t.delete_batch(
            gone.iter().map(|h| RuleRef::Handle(*h)).collect(),
            BatchMode::BestEffort,
        );
        assert!(res.iter().all(|r| r.is_ok()));
        model.retain(|(h, _)| !gone.contains(h));
        check(&t, &model, &pk);
    }
    assert!(model.is_empty() || t.len() == model.len());
}

/// Masks of every width (up to all thirteen key words): records keep packed keys, which must
/// come back whole for dumps, modify and delete.
#[test]
fn wide_and_narrow_masks_round_trip_through_the_writer() {
    let ports = PortNames::new();
    let lines = [
        "prio 5 eth_type ipv4 ip_proto tcp dst_port 80 action output:1",
        "prio 6 eth_type ipv4 in_port 3 dst_mac 02:00:00:00:00:01 ip_proto udp src_ip 192.0.2.1 dst_ip 198.51.100.0/24 dst_port 53 action output:2",
        "prio 7 eth_type ipv4 in_port 4 dst_mac 02:00:00:00:00:02 src_mac 02:00:00:00:00:03 ip_proto tcp src_ip 192.0.2.7 dst_ip 198.51.100.9 ip_ttl 64 dst_port 443 tcp_flags 0x2 enc_src_ip 192.0.2.100 enc_dst_ip 192.0.2.101 enc_key_id 42 action decap,output:3",
    ];
    let mut rules: Vec<Rule> = lines
        .iter()
        .map(|l| parse_rule(l, &ports).unwrap())
        .collect();
    let mut t = FlowTable::new(TableConfig::default());
    let hs: Vec<Handle> = t
        .insert_batch(rules.clone(), BatchMode::AllOrNothing)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    // Twice: once from the copy that took the batch, once from the replayed one.
    for round in 0..2 {
        for (h, r) in hs.iter().zip(&rules) {
            assert_eq!(t.rule(*h).as_ref(), Some(r), "round {round}");
            let snap = t.reader().snapshot();
            let got = snap.lookup(&r.matcher.key).map(|x| x.handle);
            assert_eq!(got, Some(*h), "round {round}: {r:?}");
        }
        let a = sluice_flow::ActionList::new([sluice_flow::Action::Output(9)]);
        let changes = hs
            .iter()
            .map(|h| (RuleRef::Handle(*h), a.clone()))
            .collect();
        assert!(t
            .modify_batch(changes, BatchMode::AllOrNothing)
            .iter()
            .all(|r| r.is_ok()));
        for r in &mut rules {
            r.actions = a.clone();
        }
    }
    // Delete one by exact match, the rest by handle, from both copies in turn.
    let exact = RuleRef::Exact {
        matcher: rules[2].matcher,
        priority: rules[2].priority,
    };
    assert!(t.delete_batch(vec![exact], BatchMode::AllOrNothing)[0].is_ok());
    assert!(t
        .reader()
        .snapshot()
        .lookup(&rules[2].matcher.key)
        .is_none());
    let rest = vec![RuleRef::Handle(hs[0]), RuleRef::Handle(hs[1])];
    assert!(t
        .delete_batch(rest, BatchMode::AllOrNothing)
        .iter()
        .all(|r| r.is_ok()));
    assert_eq!(t.len(), 0);
    assert!(t
        .reader()
        .snapshot()
        .lookup(&rules[1].matcher.key)
        .is_none());
    // The replayed copy is empty too.
    t.insert_batch(Vec::new(), BatchMode::BestEffort);
    assert_eq!(t.reader().snapshot().len(), 0);
}

/// An exact-match cache of four entries per flow holds nearly every flow once warm: with sets of
/// four ways, ~2 % of the flows fell in sets of five or more and missed on every pass; with eight
/// ways it is well under 1 %.
#[test]
fn a_cache_of_four_entries_per_flow_holds_nearly_every_flow() {
    use sluice_flow::bench::{bench_rule, packet_for, SplitMix};
    let rules: Vec<Rule> = (0..2000).map(|i| bench_rule(i, 16)).collect();
    let mut t = FlowTable::new(TableConfig::default());
    for r in t.insert_batch(rules.clone(), BatchMode::AllOrNothing) {
        r.unwrap();
    }
    let mut rng = SplitMix::new(3);
    let flows: Vec<FlowKey> = (0..16_384)
        .map(|_| packet_for(&rules[rng.next() as usize % rules.len()], &mut rng))
        .collect();
    let snap = t.reader().snapshot();
    let mut cache = ExactCache::new(4 * flows.len());
    let mut out = Vec::new();
    snap.lookup_batch_cached(&mut cache, &flows, &mut out);
    assert_eq!(
        cache.misses,
        flows.len() as u64,
        "a cold cache misses every flow"
    );
    let (h0, m0) = (cache.hits, cache.misses);
    snap.lookup_batch_cached(&mut cache, &flows, &mut out);
    let missed = cache.misses - m0;
    assert_eq!(cache.hits - h0 + missed, flows.len() as u64);
    assert!(
        missed * 200 < flows.len() as u64,
        "{missed} of {} flows missed a warm cache (more than 0.5 %)",
        flows.len()
    );
}
