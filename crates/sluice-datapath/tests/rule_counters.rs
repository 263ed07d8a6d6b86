//! Per-rule counters of the datapath: each hit counts one packet and its received bytes for the
//! rule that matched, on the datapath's own counters, and a cleared rule starts again at zero.

use sluice_datapath::rule_stats::{age, RuleCount};
use sluice_datapath::{Datapath, DatapathConfig, MemPort, PortOptions};
use sluice_flow::{parse_rule, BatchMode, FlowTable, Handle, PortNames, TableConfig};
use sluice_offload::features::{Device, Features};
use sluice_testkit::frames::{ether, ipv4_packet, udp_datagram};

#[test]
fn hits_count_packets_bytes_and_last_use_per_rule() {
    let mut names = PortNames::new();
    names.insert("a", 1);
    names.insert("b", 2);
    let mut t = FlowTable::new(TableConfig::default());
    let rules = [
        "prio 10 in_port a dst_ip 10.0.0.9 action drop",
        "prio 1 in_port a action output:b",
        "prio 1 in_port b action output:a",
    ]
    .iter()
    .map(|r| parse_rule(r, &names).expect("rule parses"))
    .collect();
    let handles: Vec<Handle> = t
        .insert_batch(rules, BatchMode::AllOrNothing)
        .into_iter()
        .map(|r| r.expect("inserted"))
        .collect();
    let mut dp = Datapath::new(t.reader(), DatapathConfig::default());
    let (pa, ha) = MemPort::new("a", Device::new(Features::NONE));
    let (pb, _hb) = MemPort::new("b", Device::new(Features::NONE));
    dp.add_port(1, Box::new(pa), PortOptions::default())
        .expect("add a");
    dp.add_port(2, Box::new(pb), PortOptions::default())
        .expect("add b");
    let frame = |dst: [u8; 4], len: usize| {
        let mut ip = ipv4_packet(17, 1, &udp_datagram(1, 2, &vec![0u8; len]));
        ip[16..20].copy_from_slice(&dst);
        ether(0x0800, &ip)
    };
    let small = frame([10, 0, 0, 2], 10);
    let big = frame([10, 0, 0, 2], 500);
    let dropped = frame([10, 0, 0, 9], 10);
    ha.inject_frame(&small);
    ha.inject_frame(&big);
    ha.inject_frame(&dropped);
    while dp.poll_once() > 0 {}
    let c = dp.rule_counters();
    let fwd = c.get(handles[1].0);
    assert_eq!(fwd.packets, 2);
    assert_eq!(fwd.bytes, (small.len() + big.len()) as u64);
    assert!(age(fwd.used).is_some(), "hit: a last-use time");
    let drop = c.get(handles[0].0);
    assert_eq!((drop.packets, drop.bytes), (1, dropped.len() as u64));
    assert_eq!(c.get(handles[2].0), RuleCount::default(), "never hit");
    c.clear(handles[1].0);
    assert_eq!(c.get(handles[1].0), RuleCount::default());
}
