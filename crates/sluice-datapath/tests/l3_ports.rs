//! L2 and L3 ports in one datapath (in-memory ports; an L3 port is a `MemPort` with
//! `LinkType::Ip`, as a TUN port is): what an L3 port receives is parsed from the IP header and
//! matched without L2 fields; output from an Ethernet port to an L3 port removes the Ethernet
//! header and VLAN tags (software GSO then segments the L3 packet); a non-IP frame cannot go to
//! an L3 port and an L3 packet cannot go to an Ethernet port: both dropped and counted.

use sluice_coverage::Counter;
use sluice_datapath::datapath::{DP_L3_TO_L2_DROPS, DP_NOT_IP_TO_L3_DROPS};
use sluice_datapath::{Datapath, DatapathConfig, MemPort, MemPortHandle, PortOptions};
use sluice_flow::{parse_rule, BatchMode, FlowTable, PortNames, TableConfig};
use sluice_offload::features::{Device, Features};
use sluice_packet::verify::{verify_frame, Verdict};
use sluice_packet::{GsoType, OffloadMeta};
use sluice_testkit::segments::Seg;
use sluice_wire::{parse, parse_with, LinkType, ParseConfig};

fn here(counter: &'static Counter) -> u64 {
    counter.this_thread().expect("a per-thread counter")
}

struct Setup {
    dp: Datapath,
    eth: MemPortHandle,
    l3: MemPortHandle,
    _table: FlowTable,
}

/// Port `eth` (1, Ethernet) and port `tun` (2, L3, no offloads: software GSO and checksums).
fn setup() -> Setup {
    let mut names = PortNames::new();
    names.insert("eth", 1);
    names.insert("tun", 2);
    let rules = [
        "prio 10 in_port eth action output:tun",
        // An L3 port's packets match on IP fields without any L2 field.
        "prio 20 in_port tun eth_type ipv4 ip_proto tcp action output:eth",
        "prio 10 in_port tun action drop",
    ];
    let mut t = FlowTable::new(TableConfig::default());
    let parsed = rules
        .iter()
        .map(|r| parse_rule(r, &names).expect("rule parses"))
        .collect();
    for r in t.insert_batch(parsed, BatchMode::AllOrNothing) {
        r.expect("rule inserted");
    }
    let mut dp = Datapath::new(t.reader(), DatapathConfig::default());
    let (pe, eth) = MemPort::new("eth", Device::new(Features::ALL));
    let (pt, l3) = MemPort::new("tun", Device::new(Features::NONE).with_mtu(1500));
    let pt = pt.with_link(LinkType::Ip);
    dp.add_port(1, Box::new(pe), PortOptions::default())
        .expect("add eth");
    dp.add_port(2, Box::new(pt), PortOptions::default())
        .expect("add tun");
    Setup {
        dp,
        eth,
        l3,
        _table: t,
    }
}

fn all_good_l3(p: &[u8]) {
    let l = parse_with(p, &ParseConfig::L3).expect("an L3 packet");
    assert_eq!((l.outer.l2, l.outer.l3), (None, Some(0)));
    let v = verify_frame(p, &l);
    assert_eq!((v.ip, v.l4), (Verdict::Good, Verdict::Good), "{v:?}");
}

#[test]
fn ethernet_to_l3_removes_the_ethernet_header() {
    let mut s = setup();
    let frame = Seg::tcp4(1, 100).build();
    s.eth.inject_frame(&frame);
    let mut tagged = Seg::tcp4(2, 100);
    tagged.vlans = vec![(0x8100, 7)];
    let tagged = tagged.build();
    s.eth.inject_frame(&tagged);
    s.dp.poll_once();
    let sent = s.l3.take_sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].0, frame[14..]);
    assert_eq!(sent[1].0, tagged[18..]);
    for (p, _) in &sent {
        all_good_l3(p);
    }
}

#[test]
fn ethernet_gso_to_l3_is_segmented_as_l3() {
    let mut s = setup();
    let frame = Seg::tcp4(1000, 5000).build();
    let layout = parse(&frame).unwrap();
    let mut meta = OffloadMeta::from_layout(&layout);
    meta.rx_needs_csum(34, 16).unwrap();
    meta.set_gso(GsoType::TcpV4, 1448, false).unwrap();
    s.eth.inject(&frame, meta);
    s.dp.poll_once();
    let sent = s.l3.take_sent();
    assert_eq!(sent.len(), 4, "5000 bytes in 1448-byte segments");
    let mut payload = Vec::new();
    for (p, work) in &sent {
        assert_eq!((work.gso, work.l4_csum), (None, None));
        all_good_l3(p);
        payload.extend_from_slice(&p[40..]);
    }
    assert_eq!(payload, frame[54..]);
}

#[test]
fn non_ip_to_l3_and_l3_to_ethernet_are_counted_drops() {
    let mut s = setup();
    let (not_ip, l3_to_l2) = (here(&DP_NOT_IP_TO_L3_DROPS), here(&DP_L3_TO_L2_DROPS));
    // An ARP-like frame (no IP header) from the Ethernet port.
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.resize(60, 0);
    s.eth.inject_frame(&arp);
    // A TCP packet from the L3 port: matched by its IP fields, sent to the Ethernet port.
    let tcp = Seg::tcp4(1, 100).build()[14..].to_vec();
    let meta = OffloadMeta::from_layout(&parse_with(&tcp, &ParseConfig::L3).unwrap());
    s.l3.inject(&tcp, meta);
    // A UDP packet from the L3 port: the lower rule drops it.
    let udp = Seg::udp4(100, 0).build()[14..].to_vec();
    let meta = OffloadMeta::from_layout(&parse_with(&udp, &ParseConfig::L3).unwrap());
    s.l3.inject(&udp, meta);
    s.dp.poll_once();
    assert!(s.l3.take_sent().is_empty());
    assert!(s.eth.take_sent().is_empty());
    assert_eq!(here(&DP_NOT_IP_TO_L3_DROPS), not_ip + 1);
    assert_eq!(here(&DP_L3_TO_L2_DROPS), l3_to_l2 + 1);
    let (eth, tun) = (s.dp.stats(1).unwrap(), s.dp.stats(2).unwrap());
    assert_eq!(tun.tx_prepare_drops, 1, "the non-IP frame, at the L3 port");
    assert_eq!(
        eth.tx_prepare_drops, 1,
        "the L3 packet, at the Ethernet port"
    );
    assert_eq!((tun.rx_no_match, tun.rx_dropped_by_rule), (0, 1));
}

#[test]
fn gro_on_an_l3_port_merges_l3_packets() {
    let mut names = PortNames::new();
    names.insert("tun", 1);
    names.insert("tun2", 2);
    let mut t = FlowTable::new(TableConfig::default());
    let rule = parse_rule("prio 10 in_port tun action output:tun2", &names).expect("rule");
    for r in t.insert_batch(vec![rule], BatchMode::AllOrNothing) {
        r.expect("rule inserted");
    }
    let mut dp = Datapath::new(t.reader(), DatapathConfig::default());
    let (a, ha) = MemPort::new("tun", Device::new(Features::ALL));
    let (b, hb) = MemPort::new("tun2", Device::new(Features::ALL));
    dp.add_port(
        1,
        Box::new(a.with_link(LinkType::Ip)),
        PortOptions {
            gro: true,
            ..PortOptions::default()
        },
    )
    .expect("add tun");
    dp.add_port(
        2,
        Box::new(b.with_link(LinkType::Ip)),
        PortOptions::default(),
    )
    .expect("add tun2");
    let segs = sluice_testkit::segments::stream(&Seg::tcp4(0, 1448), 8, 1448);
    let mut payload = Vec::new();
    for s in &segs {
        let p = s.build()[14..].to_vec();
        payload.extend_from_slice(&p[40..]);
        let meta = OffloadMeta::from_layout(&parse_with(&p, &ParseConfig::L3).unwrap());
        ha.inject(&p, meta);
    }
    dp.poll_once();
    let sent = hb.take_sent();
    assert_eq!(sent.len(), 1, "one merged packet");
    let (p, work) = &sent[0];
    assert_eq!(work.gso, Some((GsoType::TcpV4, 1448, false)));
    assert_eq!(p[40..], payload[..]);
    let st = dp.stats(1).unwrap();
    assert_eq!((st.gro.frames_in, st.gro.merged_packets), (8, 1));
}
