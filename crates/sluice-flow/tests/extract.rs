//! `FlowKey::extract` on frames parsed by `sluice_wire::parse`, and a rule matching them.
use sluice_flow::{key::flags, parse_rule, FlowKey, FlowTable, PortNames, TableConfig};

fn ipv4_tcp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut ip = vec![0x45, 0xb8, 0, 40, 0, 1, 0x40, 0, 63, 6, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let mut tcp = Vec::new();
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&dport.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    ip.extend_from_slice(&tcp);
    ip
}

fn eth(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[test]
fn qinq_tcp_frame() {
    let ip = ipv4_tcp([192, 0, 2, 1], [10, 0, 0, 7], 1234, 80, 0x12);
    let f = eth(
        [2, 0, 0, 0, 0, 2],
        [2, 0, 0, 0, 0, 1],
        &[(0x88a8, (3 << 13) | 100), (0x8100, 200)],
        0x0800,
        &ip,
    );
    let layout = match sluice_wire::parse(&f) {
        Ok(l) => l,
        Err(e) => panic!("parser rejected a valid frame: {e:?}"),
    };
    let k = FlowKey::extract(&f, &layout, 1);
    let mut ports = PortNames::new();
    ports.insert("tap0", 1);
    let rule = parse_rule(
        "prio 10 in_port tap0 src_mac 02:00:00:00:00:01 vlan_ethtype 802.1ad vlan_id 100 vlan_prio 3 cvlan_ethtype 802.1q cvlan_id 200 src_ip 192.0.2.0/24 dst_ip 10.0.0.0/24 ip_proto tcp src_port 1234 dst_port 80 tcp_flags 0x12/0x12 ip_ttl 63 ip_tos 0xb8 action pop_vlan,output:2",
        &ports,
    )
    .unwrap();
    assert!(rule.matcher.matches(&k), "{k:?}");
    let mut t = FlowTable::new(TableConfig::default());
    let h = t.insert(rule).unwrap();
    assert_eq!(t.reader().lookup(&k).map(|x| x.0), Some(h));
    // A different port does not match.
    let k2 = FlowKey::extract(&f, &layout, 2);
    assert!(t.reader().lookup(&k2).is_none());
}

#[test]
fn vxlan_frame_fills_tunnel_fields_and_inner_headers() {
    let inner_ip = ipv4_tcp([172, 16, 0, 1], [172, 16, 0, 2], 5000, 22, 0x02);
    let inner = eth(
        [2, 0, 0, 0, 0, 4],
        [2, 0, 0, 0, 0, 3],
        &[],
        0x0800,
        &inner_ip,
    );
    let mut vx = vec![0x08, 0, 0, 0, 0, 0x01, 0x23, 0];
    vx.extend_from_slice(&inner);
    let mut udp = Vec::new();
    udp.extend_from_slice(&4242u16.to_be_bytes());
    udp.extend_from_slice(&4789u16.to_be_bytes());
    udp.extend_from_slice(&((8 + vx.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&vx);
    let total = (20 + udp.len()) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&udp);
    let f = eth([2, 0, 0, 0, 0, 6], [2, 0, 0, 0, 0, 5], &[], 0x0800, &ip);
    let layout = match sluice_wire::parse(&f) {
        Ok(l) => l,
        Err(e) => panic!("parser rejected a valid frame: {e:?}"),
    };
    let k = FlowKey::extract(&f, &layout, 3);
    let rule = parse_rule(
        "enc_key_id 0x123 enc_src_ip 198.51.100.1 enc_dst_ip 198.51.100.2 dst_ip 172.16.0.2 ip_proto tcp dst_port 22 action decap,output:1",
        &PortNames::new(),
    )
    .unwrap();
    assert!(rule.matcher.matches(&k), "{k:?}");
    assert_ne!(
        k.uint(sluice_flow::Field::Flags) & u64::from(flags::TUNNEL),
        0
    );
    // The outer view sees UDP port 4789 and no tunnel.
    let outer = FlowKey::extract_outer(&f, &layout, 3);
    assert!(!rule.matcher.matches(&outer));
    let r2 = parse_rule(
        "ip_proto udp dst_ip 198.51.100.2 dst_port 4789 action decap",
        &PortNames::new(),
    )
    .unwrap();
    assert!(r2.matcher.matches(&outer));
}
