//! Builds a whole tunnelled frame from the header `Repr`s and takes it apart again with the
//! views: Ethernet > VLAN > IPv4 > UDP > VXLAN > Ethernet > IPv6 > Hop-by-Hop > TCP > payload.

use sluice_wire::{
    ethernet, ethertype, geneve, gre, ip_proto, ipv4, ipv6, tcp, udp, vlan, vxlan, Layer,
    ParseError, Reason,
};

const PAYLOAD: &[u8] = b"hello";

struct Stack {
    eth: ethernet::Repr,
    tag: vlan::Repr,
    ip4: ipv4::Repr,
    udp: udp::Repr,
    vxlan: vxlan::Repr,
    inner_eth: ethernet::Repr,
    ip6: ipv6::Repr,
    hbh_data: [u8; 6],
    tcp: tcp::Repr,
}

fn stack() -> Stack {
    let hbh_data = [0x05, 0x02, 0x00, 0x00, 0x01, 0x00];
    let tcp = tcp::Repr {
        src_port: 40000,
        dst_port: 443,
        seq_number: 7,
        ack_number: 0,
        flags: tcp::Flags::SYN,
        window_len: 65535,
        urgent_ptr: 0,
        options: tcp::build_options(&[
            tcp::TcpOption::MaxSegmentSize(1400),
            tcp::TcpOption::SackPermitted,
            tcp::TcpOption::WindowScale(9),
        ])
        .unwrap(),
    };
    let inner_len = 8 + tcp.buffer_len() + PAYLOAD.len();
    let ip6 = ipv6::Repr {
        src_addr: "fd00::1".parse().unwrap(),
        dst_addr: "fd00::2".parse().unwrap(),
        next_header: ip_proto::HOPOPTS,
        hop_limit: 63,
        traffic_class: 0,
        flow_label: 0xbeef,
        payload_len: inner_len,
    };
    let inner_eth = ethernet::Repr {
        src_addr: ethernet::Address([0x02, 0, 0, 0, 0, 0x0a]),
        dst_addr: ethernet::Address([0x02, 0, 0, 0, 0, 0x0b]),
        ethertype: ethertype::IPV6,
    };
    let vxlan = vxlan::Repr { vni: 0x123456 };
    let udp_payload = vxlan.buffer_len() + inner_eth.buffer_len() + ip6.buffer_len();
    let udp = udp::Repr {
        src_port: 51000,
        dst_port: sluice_wire::VXLAN_PORT,
        payload_len: udp_payload,
    };
    let ip4 = ipv4::Repr {
        src_addr: [192, 0, 2, 1].into(),
        dst_addr: [192, 0, 2, 2].into(),
        protocol: ip_proto::UDP,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
        options: ipv4::OptionBuf::EMPTY,
        payload_len: udp.buffer_len(),
    };
    let tag = vlan::Repr {
        pcp: 5,
        dei: false,
        vid: 10,
        next_type: ethertype::IPV4,
    };
    let eth = ethernet::Repr {
        src_addr: ethernet::Address([0x52, 0x54, 0, 0, 0, 1]),
        dst_addr: ethernet::Address([0x52, 0x54, 0, 0, 0, 2]),
        ethertype: ethertype::VLAN_8021Q,
    };
    Stack {
        eth,
        tag,
        ip4,
        udp,
        vxlan,
        inner_eth,
        ip6,
        hbh_data,
        tcp,
    }
}

fn build(s: &Stack) -> Vec<u8> {
    let hbh = ipv6::ExtHeaderRepr {
        next_header: ip_proto::TCP,
        data: &s.hbh_data,
    };
    let len = s.eth.buffer_len() + s.tag.buffer_len() + s.ip4.buffer_len();
    let mut frame = vec![0u8; len];
    let mut at = 0;
    let mut next = |n: usize| {
        let r = at..at + n;
        at += n;
        r
    };
    s.eth
        .emit(&mut ethernet::Frame::new_unchecked(&mut frame[next(14)]))
        .unwrap();
    s.tag
        .emit(&mut vlan::Tag::new_unchecked(&mut frame[next(4)]))
        .unwrap();
    s.ip4
        .emit(&mut ipv4::Packet::new_unchecked(
            &mut frame[next(s.ip4.header_len())],
        ))
        .unwrap();
    s.udp
        .emit(&mut udp::Packet::new_unchecked(&mut frame[next(8)]))
        .unwrap();
    s.vxlan
        .emit(&mut vxlan::Packet::new_unchecked(&mut frame[next(8)]))
        .unwrap();
    s.inner_eth
        .emit(&mut ethernet::Frame::new_unchecked(&mut frame[next(14)]))
        .unwrap();
    s.ip6
        .emit(&mut ipv6::Packet::new_unchecked(&mut frame[next(40)]))
        .unwrap();
    hbh.emit(&mut ipv6::ExtHeader::new_unchecked(
        &mut frame[next(hbh.buffer_len())],
    ))
    .unwrap();
    s.tcp
        .emit(&mut tcp::Packet::new_unchecked(
            &mut frame[next(s.tcp.header_len())],
        ))
        .unwrap();
    frame[next(PAYLOAD.len())].copy_from_slice(PAYLOAD);
    frame
}

/// Takes the frame apart with the checked views; the first error (offset made frame-relative).
fn walk(frame: &[u8]) -> Result<(Stack, Vec<u8>), ParseError> {
    let at = |base: usize| {
        move |e: ParseError| ParseError {
            offset: e.offset + base,
            ..e
        }
    };
    let eth_f = ethernet::Frame::new_checked(frame)?;
    let eth = ethernet::Repr::parse(&eth_f)?;
    let tag_v = vlan::Tag::new_checked(eth_f.payload()).map_err(at(14))?;
    let tag = vlan::Repr::parse(&tag_v)?;
    let ip4_p = ipv4::Packet::new_checked(tag_v.payload()).map_err(at(18))?;
    let ip4 = ipv4::Repr::parse(&ip4_p)?;
    let udp_base = 18 + ip4_p.header_len();
    let udp_p = udp::Packet::new_checked(ip4_p.payload()).map_err(at(udp_base))?;
    let udp = udp::Repr::parse(&udp_p)?;
    let vx = vxlan::Packet::new_checked(udp_p.payload()).map_err(at(udp_base + 8))?;
    let vxlan = vxlan::Repr::parse(&vx)?;
    let in_f = ethernet::Frame::new_checked(vx.payload()).map_err(at(udp_base + 16))?;
    let inner_eth = ethernet::Repr::parse(&in_f)?;
    let ip6_base = udp_base + 30;
    let ip6_p = ipv6::Packet::new_checked(in_f.payload()).map_err(at(ip6_base))?;
    let ip6 = ipv6::Repr::parse(&ip6_p)?;
    let (l4, l4_off) = ip6_p.ext_headers(8).finish().map_err(at(ip6_base + 40))?;
    assert_eq!(l4, ip_proto::TCP);
    let hbh_v = ipv6::ExtHeader::new_checked(ip6_p.payload())?;
    let hbh_data: [u8; 6] = hbh_v.data().try_into().unwrap();
    let tcp_p = tcp::Packet::new_checked(&ip6_p.payload()[l4_off..]).map_err(at(ip6_base + 48))?;
    let tcp = tcp::Repr::parse(&tcp_p)?;
    let payload = tcp_p.payload().to_vec();
    Ok((
        Stack {
            eth,
            tag,
            ip4,
            udp,
            vxlan,
            inner_eth,
            ip6,
            hbh_data,
            tcp,
        },
        payload,
    ))
}

#[test]
fn build_then_walk() {
    let want = stack();
    let frame = build(&want);
    assert_eq!(
        frame.len(),
        14 + 4 + 20 + 8 + 8 + 14 + 40 + 8 + 32 + PAYLOAD.len()
    );
    let (got, payload) = walk(&frame).unwrap();
    assert_eq!(got.eth, want.eth);
    assert_eq!(got.tag, want.tag);
    assert_eq!(got.ip4, want.ip4);
    assert_eq!(got.udp, want.udp);
    assert_eq!(got.vxlan, want.vxlan);
    assert_eq!(got.inner_eth, want.inner_eth);
    assert_eq!(got.ip6, want.ip6);
    assert_eq!(got.hbh_data, want.hbh_data);
    assert_eq!(got.tcp, want.tcp);
    assert_eq!(payload, PAYLOAD);
    let opts: Vec<_> = got.tcp.options_iter().filter_map(Result::ok).collect();
    assert_eq!(opts[0], tcp::TcpOption::MaxSegmentSize(1400));
}

#[test]
fn every_truncation_fails_without_panic() {
    let frame = build(&stack());
    for n in 0..frame.len() {
        let e = walk(&frame[..n])
            .err()
            .unwrap_or_else(|| panic!("cut at {n} parsed"));
        // The IPv4 total length covers everything after byte 18, so every cut past it is caught
        // there as a bad total length; earlier cuts are truncated Ethernet or VLAN headers.
        match n {
            0..=13 => assert_eq!(e.layer, Layer::Eth),
            14..=17 => assert_eq!(e.layer, Layer::Vlan),
            _ => assert_eq!(e.layer, Layer::Ipv4),
        }
        assert!(matches!(
            e.reason,
            Reason::Truncated { .. } | Reason::BadTotalLength { .. }
        ));
    }
}

#[test]
fn owned_buffers_work_too() {
    let frame = build(&stack());
    let mut owned = ethernet::Frame::new_checked(frame.clone()).unwrap();
    owned.set_ethertype(ethertype::VLAN_8021AD).unwrap();
    let bytes = owned.into_inner();
    assert_eq!(&bytes[12..14], &[0x88, 0xa8]);
    let mut popped = bytes;
    let tag = vlan::pop_tag(&mut popped).unwrap();
    assert_eq!(
        (tag.tpid, tag.vid, tag.pcp),
        (ethertype::VLAN_8021AD, 10, 5)
    );
    assert_eq!(&popped[12..14], &[0x08, 0x00]);
}

#[test]
fn tunnel_headers_compose() {
    // GRE (key) carrying transparent Ethernet; Geneve carrying Ethernet with one option.
    let g = gre::Repr {
        protocol_type: ethertype::TEB,
        checksum: None,
        key: Some(9),
        seq_number: None,
    };
    let mut buf = vec![0u8; g.buffer_len() + 14];
    g.emit(&mut gre::Packet::new_unchecked(&mut buf[..]))
        .unwrap();
    let p = gre::Packet::new_checked(&buf[..]).unwrap();
    assert_eq!((p.key(), p.payload().len()), (Some(9), 14));

    let opt = geneve::GeneveOption {
        class: 0x0103,
        opt_type: 0x01,
        data: &[0, 0, 0, 1],
    };
    let r = geneve::Repr {
        oam: false,
        critical: false,
        protocol_type: ethertype::TEB,
        vni: 77,
        options: geneve::build_options(&[opt]).unwrap(),
    };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut geneve::Packet::new_unchecked(&mut buf[..]))
        .unwrap();
    let p = geneve::Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(p.options_iter().next().unwrap().unwrap(), opt);
    assert_eq!(geneve::Repr::parse(&p).unwrap(), r);
}
