//! Fuzzes the switch's datapath end to end with in-memory ports: frames with fuzzed
//! `virtio_net_hdr`s arrive on port `a`, optionally through GRO, are classified against a rule
//! table whose actions the input picks (VLAN push/pop with any TPID, field rewrites, VXLAN /
//! Geneve / GRE encapsulation and decapsulation, several outputs, drop), and leave through
//! transmit preparation for a port `b` with fuzzed device features (software GSO, checksum
//! completion, VLAN insertion, oversize drops).
//!
//! Nothing may panic; every frame port `a` received is accounted for (no silent loss: with GRO
//! off, each — each datagram of a UDP-GSO tunnel frame it splits — is dropped by a counted
//! reason or sent at least once); the buffer pool stays
//! bounded whatever the input (no allocation per packet in steady state); every frame sent is
//! within the size a device can take.
//!
//! Input: byte 0 picks the action list; bits of byte 1: GRO on `a`, UDP GRO, `b` multi-tag;
//! bytes 2–5 `b`'s features (low 28 bits); bytes 6–7 `b`'s MTU; then records of
//! [len: 2 bytes LE (mod 4096)][12-byte virtio_net_hdr v1][frame].
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_datapath::port::rx_meta;
use sluice_datapath::{Datapath, DatapathConfig, MemPort, PortOptions};
use sluice_flow::{parse_rule, BatchMode, FlowTable, PortNames, TableConfig};
use sluice_offload::features::{Device, Feature, Features};
use sluice_packet::virtio::HdrFormat;
use sluice_wire::ParseConfig;

const ACTIONS: &[&str] = &[
    "output:b",
    "pop_vlan,output:b",
    "push_vlan:802.1ad:100,push_vlan:802.1q:200:3,output:b",
    "push_vlan:0x9100:5,output:b,output:a",
    "encap:vxlan:id=42:src=10.0.0.1:dst=10.0.0.2,output:b",
    "encap:vxlan:id=42:src=10.0.0.1:dst=10.0.0.2:csum,output:b",
    "encap:geneve:id=7:src=[2001:db8::1]:dst=[2001:db8::2],output:b",
    "encap:gre:id=9:src=10.0.0.1:dst=10.0.0.2,output:b",
    "decap,output:b",
    "decap,pop_vlan,output:b",
    "set_ipv4_src:10.9.9.9,set_tp_dst:81,set_ttl:3,set_dscp:10,output:b",
    "set_ipv6_dst:2001:db8::9,set_eth_src:02:00:00:00:00:01,set_tp_src:7,output:b",
    "pop_vlan,pop_vlan,encap:vxlan:id=1:src=10.0.0.1:dst=10.0.0.2:csum,output:b",
    "drop",
];

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (head, mut rest) = data.split_at(8);
    let mut names = PortNames::new();
    names.insert("a", 1);
    names.insert("b", 2);
    let action = ACTIONS[usize::from(head[0]) % ACTIONS.len()];
    let rules = [
        // A selective rule in front, so lookups also miss and fall through.
        "prio 20 in_port a eth_type ipv4 ip_proto udp dst_port 53 action drop".to_string(),
        format!("prio 10 in_port a action {action}"),
    ];
    let mut table = FlowTable::new(TableConfig::default());
    let parsed = rules
        .iter()
        .map(|r| parse_rule(r, &names).expect("the fuzz rules parse"))
        .collect();
    for r in table.insert_batch(parsed, BatchMode::AllOrNothing) {
        r.expect("the fuzz rules go in");
    }

    let bits = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
    let mut features = Features::NONE;
    for (i, f) in Feature::ALL.iter().enumerate() {
        if bits & (1 << i) != 0 {
            features = features | Features::of(*f);
        }
    }
    let mtu = u32::from(u16::from_le_bytes([head[6], head[7]])).max(68);
    let mut dev_b = Device::new(features).with_mtu(mtu);
    dev_b.vlan_depth = (head[1] >> 2) & 3;
    let gro = head[1] & 1 != 0;
    let mut cfg = DatapathConfig::default();
    cfg.gro.udp = head[1] & 2 != 0;
    cfg.batch = 8;
    // A small exact-match cache: the default (262,144 entries, allocated at the first lookup of
    // every new datapath) made each input cost ~10 ms; the cache's logic is the same at any size.
    cfg.cache_entries = 256;
    let mut dp = Datapath::new(table.reader(), cfg);
    let (pa, ha) = MemPort::new("a", Device::new(Features::ALL));
    let (pb, hb) = MemPort::new("b", dev_b);
    dp.add_port(1, Box::new(pa), PortOptions {
            gro,
            ..PortOptions::default()
        })
        .expect("add a");
    dp.add_port(2, Box::new(pb), PortOptions::default())
        .expect("add b");

    let mut injected = 0u64;
    let mut refused = 0u64;
    let mut frames = 0usize;
    while rest.len() >= 14 && frames < 64 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]]) & 0x0fff);
        let hdr = &rest[2..14];
        rest = &rest[14..];
        let frame = &rest[..len.min(rest.len())];
        rest = &rest[frame.len()..];
        frames += 1;
        match rx_meta(frame, Some((hdr, HdrFormat::V1)), &ParseConfig::DEFAULT) {
            Ok(meta) => {
                ha.inject(frame, meta);
                injected += 1;
            }
            Err(_) => refused += 1,
        }
        if frames % 5 == 0 {
            dp.poll_once();
        }
    }
    let _ = refused;
    for _ in 0..64 {
        let moved = dp.poll_once();
        if moved == 0 && ha.pending() == 0 {
            break;
        }
    }
    assert_eq!(ha.pending(), 0, "every injected frame is received");

    let st = dp.stats(1).expect("port a");
    assert_eq!(st.rx_packets, injected, "rx counts every frame");
    let sent_a = ha.take_sent();
    let sent_b = hb.take_sent();
    let max = 14 + 8 * 4 + 65_535 + 200;
    for (f, _) in sent_a.iter().chain(sent_b.iter()) {
        assert!(f.len() <= max, "sent frame of {} bytes", f.len());
    }
    if !gro {
        // Each received packet: no rule, dropped by rule, an action error, or sent (GSO may
        // turn one into many, transmit preparation may drop; both counted on b).
        let b = dp.stats(2).expect("port b");
        let a_tx = dp.stats(1).map_or(0, |s| s.tx_packets);
        // A UDP-GSO frame of tunnel datagrams is split: each datagram is a packet with a fate.
        let packets = st.rx_packets - st.rx_uso_frames + st.rx_uso_datagrams;
        let fates =
            st.rx_no_match + st.rx_dropped_by_rule + st.rx_action_errors + st.rx_uso_drops;
        assert!(
            fates <= packets,
            "more fates than packets: {fates} > {packets} ({} received, {} split into {})",
            st.rx_packets,
            st.rx_uso_frames,
            st.rx_uso_datagrams
        );
        let forwarded = packets - fates;
        assert!(
            forwarded == 0 || b.tx_packets + b.tx_prepare_drops + a_tx > 0,
            "{forwarded} packets forwarded but nothing sent or counted"
        );
    }
    // Bounded buffers: the pool recycles; a few batches' worth at most.
    assert!(
        dp.buffers_allocated() <= 4 * 64 + 16,
        "{} buffers allocated",
        dp.buffers_allocated()
    );
});
