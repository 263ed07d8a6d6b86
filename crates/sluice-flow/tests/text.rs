//! The rule syntax: examples, positioned errors, and text → rule → text round trips.
use proptest::prelude::*;
use sluice_flow::{key::VLAN_PRESENT, parse_rule, Action, Field, PortNames, RuleText};

fn ports() -> PortNames {
    let mut p = PortNames::new();
    p.insert("tap0", 1);
    p.insert("tap1", 2);
    p
}

#[test]
fn issue_example_parses() {
    let line = "prio 10 in_port tap0 vlan_ethtype 802.1ad vlan_id 100 cvlan_id 200 dst_ip 10.0.0.0/24 ip_proto tcp dst_port 80 action pop_vlan,output:tap1";
    let r = parse_rule(line, &ports()).unwrap();
    let (k, m) = (&r.matcher.key, &r.matcher.mask);
    assert_eq!(r.priority, 10);
    assert_eq!(k.uint(Field::InPort), 1);
    assert_eq!(k.uint(Field::Vlan0Tpid), 0x88a8);
    assert_eq!(k.uint(Field::Vlan0Tci), u64::from(VLAN_PRESENT | 100));
    assert_eq!(k.uint(Field::Vlan1Tci), u64::from(VLAN_PRESENT | 200));
    assert_eq!(k.uint(Field::EthType), 0x0800);
    assert_eq!(k.addr(Field::IpDst)[12..], [10, 0, 0, 0]);
    assert_eq!(m.addr(Field::IpDst)[12..], [255, 255, 255, 0]);
    assert_eq!(k.uint(Field::IpProto), 6);
    assert_eq!(k.uint(Field::L4Dst), 80);
    assert_eq!(r.actions.as_slice(), &[Action::PopVlan, Action::Output(2)]);
    let text = RuleText {
        rule: &r,
        ports: &ports(),
    }
    .to_string();
    assert_eq!(
        text,
        "prio 10 in_port tap0 vlan_ethtype 802.1ad vlan_id 100 cvlan_id 200 eth_type ipv4 dst_ip 10.0.0.0/24 ip_proto tcp dst_port 80 action pop_vlan,output:tap1"
    );
    assert_eq!(parse_rule(&text, &ports()).unwrap(), r);
}

#[test]
fn value_outside_mask_is_masked() {
    let r = parse_rule("dst_ip 10.0.0.1/24 action drop", &ports()).unwrap();
    assert_eq!(r.matcher.key.addr(Field::IpDst)[12..], [10, 0, 0, 0]);
    assert!(r.matcher.is_valid());
}

fn err(line: &str) -> (usize, String) {
    let e = parse_rule(line, &ports()).unwrap_err();
    // Rendering never panics and puts the caret under the token.
    let shown = e.render(line);
    let caret_line = shown.lines().nth(1).unwrap();
    assert_eq!(caret_line.find('^'), Some(e.column), "{shown}");
    (e.column, e.message)
}

#[test]
fn errors_point_at_the_token() {
    assert_eq!(err("prio 1 dst_ipp 10.0.0.1 action drop").0, 7);
    assert_eq!(err("prio 1 dst_ip 10.0.0.300 action drop").0, 14);
    assert_eq!(err("prio x action drop").0, 5);
    assert_eq!(err("in_port tap9 action drop").0, 8);
    let (c, m) = err("dst_port 80 action drop");
    assert_eq!(c, 0);
    assert!(m.contains("eth_type"), "{m}");
    let (c, m) = err("dst_ip 10.0.0.0/8 ip_proto icmp dst_port 80 action drop");
    assert_eq!(c, 32);
    assert!(m.contains("tcp, udp or sctp"), "{m}");
    let (c, _) = err("dst_ip 10.0.0.0/8 action output:tap9");
    assert_eq!(c, 25);
    let (c, _) = err("dst_ip 10.0.0.0/8 action pop_vlan,bogus");
    assert_eq!(c, 34);
    let (c, m) = err("dst_ip 10.0.0.0/8");
    assert_eq!(c, 17);
    assert!(m.contains("action"));
    let (_, m) = err("eth_type ipv6 dst_ip 10.0.0.0/8 action drop");
    assert!(m.contains("family"), "{m}");
    assert_eq!(err("src_ip 10.0.0.1 dst_ip ::1 action drop").0, 23);
}

#[test]
fn actions_round_trip() {
    let line = "prio 3 eth_type ipv6 src_ip fd00::/16 dst_ip ::1/ffff:: ip_tos 4/0xfc ip_ttl 64 ip_proto 17 src_port 1000/0xff00 enc_key_id 42 enc_src_ip 192.0.2.1 enc_dst_ip 2001:db8::/32 action push_vlan:802.1q:10:3,set_eth_src:02:00:00:00:00:01,set_ipv6_dst:fd00::2,set_ipv4_src:1.2.3.4,set_ttl:9,set_dscp:46,set_tp_src:1,set_tp_dst:2,encap:vxlan:id=7:src=[fd00::1]:dst=[fd00::2]:csum,encap:gre:id=4000000000:src=1.1.1.1:dst=2.2.2.2,decap,drop";
    let r = parse_rule(line, &ports()).unwrap();
    let text = r.to_string();
    let again = parse_rule(&text, &ports()).unwrap();
    assert_eq!(again, r, "{text}");
    assert_eq!(again.to_string(), text);
}

/// Found by the `flow_parse` fuzz target: `enc_src_ip …/0` used to require a tunnel without
/// printing anything that says so.
#[test]
fn zero_mask_tunnel_address_round_trips() {
    let line = "eth_type ipv6 enc_src_ip 01::a330/0 action push_vlan:4000:0,decap";
    let r = parse_rule(line, &ports()).unwrap();
    let text = r.to_string();
    assert_eq!(parse_rule(&text, &ports()).unwrap(), r, "{text}");
}

/// Also found by the fuzzer: a repeated key left the first one's tunnel flag behind. Keys may
/// now appear once.
#[test]
fn repeated_keys_are_rejected() {
    let line = "eth_type ipv6 enc_src_ip 01::a33 ip_proto udp src_port 10 enc_src_ip 01::00/0 action push_vlan:4001:0,decap";
    let e = parse_rule(line, &ports()).unwrap_err();
    assert_eq!(e.column, line.find("enc_src_ip 01::00").unwrap());
    assert!(parse_rule("prio 1 priority 2 action drop", &ports()).is_err());
}

fn arb_line() -> impl Strategy<Value = String> {
    let ip4 = (any::<[u8; 4]>(), 0u32..=32)
        .prop_map(|(a, p)| format!("{}.{}.{}.{}/{p}", a[0], a[1], a[2], a[3]));
    let ip6 = (any::<[u16; 8]>(), 0u32..=128).prop_map(|(a, p)| {
        format!(
            "{}/{p}",
            std::net::Ipv6Addr::new(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])
        )
    });
    let mac = (any::<[u8; 6]>(), 0u32..=48).prop_map(|(m, p)| {
        format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}/{p}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    });
    (
        (any::<u32>(), prop::option::of(0u32..4)),
        prop::option::of(mac.clone()),
        prop::option::of(mac),
        prop::option::of((
            0u16..4096,
            0u8..8,
            prop::sample::select(vec!["802.1q", "802.1ad", "0x9100"]),
        )),
        prop::option::of((0u16..4096, 0u8..8)),
        prop::bool::ANY,
        prop::option::of((ip4.clone(), ip4)),
        prop::option::of((ip6.clone(), ip6)),
        prop::option::of((
            prop::sample::select(vec!["tcp", "udp", "sctp"]),
            any::<u16>(),
            any::<u16>(),
            any::<u16>(),
        )),
        prop::option::of((any::<u8>(), any::<u8>(), any::<u8>())),
        prop::option::of((
            any::<u32>(),
            prop::sample::select(vec!["10.0.0.1", "fd00::/8"]),
        )),
        prop::collection::vec(
            prop::sample::select(vec![
                "drop",
                "pop_vlan",
                "decap",
                "output:tap1",
                "output:7",
                "push_vlan:0x9100:5",
                "set_tp_dst:9",
                "set_eth_dst:aa:bb:cc:dd:ee:ff",
                "encap:geneve:id=5:src=10.0.0.1:dst=10.0.0.2",
            ]),
            1..4,
        ),
    )
        .prop_map(
            |((prio, port), smac, dmac, vlan, cvlan, v6, ip4s, ip6s, l4, tos, enc, acts)| {
                let mut s = format!("prio {prio}");
                if let Some(p) = port {
                    s += &format!(" in_port {p}");
                }
                if let Some(m) = smac {
                    s += &format!(" src_mac {m}");
                }
                if let Some(m) = dmac {
                    s += &format!(" dst_mac {m}");
                }
                if let Some((id, pcp, tp)) = vlan {
                    s += &format!(" vlan_ethtype {tp} vlan_id {id} vlan_prio {pcp}");
                }
                if let Some((id, pcp)) = cvlan {
                    s += &format!(" cvlan_id {id} cvlan_prio {pcp}");
                }
                let mut ip = false;
                if v6 {
                    if let Some((a, b)) = ip6s {
                        s += &format!(" src_ip {a} dst_ip {b}");
                        ip = true;
                    }
                } else if let Some((a, b)) = ip4s {
                    s += &format!(" src_ip {a} dst_ip {b}");
                    ip = true;
                }
                if ip {
                    if let Some((p, sp, dp, m)) = l4 {
                        s += &format!(" ip_proto {p} src_port {sp}/{m} dst_port {dp}");
                        if p == "tcp" {
                            s += &format!(" tcp_flags {}/{}", sp & 0xfff, m & 0xfff);
                        }
                    }
                    if let Some((t, tt, m)) = tos {
                        s += &format!(" ip_tos {t}/{m} ip_ttl {tt}");
                    }
                }
                if let Some((id, a)) = enc {
                    s += &format!(" enc_key_id {id} enc_dst_ip {a}");
                }
                s += " action ";
                s += &acts.join(",");
                s
            },
        )
}

proptest! {
    #[test]
    fn text_rule_text_round_trips(line in arb_line()) {
        let r = parse_rule(&line, &ports()).map_err(|e| TestCaseError::fail(e.render(&line)))?;
        prop_assert!(r.matcher.is_valid());
        let text = RuleText { rule: &r, ports: &ports() }.to_string();
        let again = parse_rule(&text, &ports()).map_err(|e| TestCaseError::fail(e.render(&text)))?;
        prop_assert_eq!(&again, &r);
        prop_assert_eq!(RuleText { rule: &again, ports: &ports() }.to_string(), text);
    }

    #[test]
    fn parser_never_panics(line in "\\PC{0,80}") {
        if let Err(e) = parse_rule(&line, &ports()) {
            let _ = e.render(&line);
        }
    }
}
