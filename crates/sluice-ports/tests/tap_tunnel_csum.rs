//! UDP-tunnel GSO with the outer UDP checksum through a TAP port (`TUN_F_UDP_TUNNEL_GSO_CSUM`),
//! the kernel as the oracle (root only): a TCP super-frame VXLAN-encapsulated with a UDP
//! checksum by the switch's own action, prepared for the port's device as the datapath does
//! (`tx_prepare`: left whole), written to the TAP; a bridge forwards it to a second TAP that
//! negotiated no offload, so the kernel segments it and fills every checksum in software. Each
//! segment must be, byte for byte, what Sluice's device model says a device puts on the wire,
//! and every checksum in it must verify.

use sluice_datapath::actions::apply;
use sluice_datapath::port::Port;
use sluice_datapath::PacketBuf;
use sluice_flow::{Action, TunnelEncap, TunnelKind};
use sluice_offload::features::Feature;
use sluice_offload::tx::{emulate_device, tx_prepare, TxOutcome, TxOutput, TxPacket, TxSteps};
use sluice_packet::verify::{verify_frame, Verdict};
use sluice_ports::tap::{Tap, TapConfig};
use sluice_ports::{Netns, TapPort, TapPortConfig};
use sluice_testkit::tx_frames::{packet, Csum, Envelope, Ip, L4};
use sluice_wire::ParseConfig;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

const CFG: ParseConfig = ParseConfig::DEFAULT;

#[test]
fn outer_checksummed_vxlan_gso_is_segmented_by_the_kernel_as_the_model_says() {
    sluice_testkit::root();
    let ns = Netns::create("sltnlcs").expect("netns");
    let cfg = TapPortConfig {
        udp_tunnel_gso: true,
        ..TapPortConfig::default()
    };
    let mut a = ns
        .enter(|| TapPort::open("tcsa", &cfg))
        .expect("enter")
        .expect("tap port a");
    assert!(
        a.device().features.has(Feature::UdpTnlCsum),
        "the kernel refused TUN_F_UDP_TUNNEL_GSO_CSUM (needs 6.17+): {}",
        a.device().features
    );
    let plain = TapConfig {
        vnet_hdr_len: 12,
        offloads: 0,
        ..TapConfig::default()
    };
    let b = ns
        .enter(|| Tap::open("tcsb", &plain))
        .expect("enter")
        .expect("tap b");
    ns.run(&["ip", "link", "add", "tcsbr", "type", "bridge"])
        .expect("bridge");
    for dev in ["tcsa", "tcsb", "tcsbr"] {
        ns.run(&["ip", "link", "set", dev, "mtu", "1600"])
            .expect("mtu");
    }
    for dev in ["tcsa", "tcsb"] {
        ns.run(&["ip", "link", "set", dev, "master", "tcsbr"])
            .expect("enslave");
    }
    for dev in ["tcsa", "tcsb", "tcsbr"] {
        ns.link_up(dev).expect("up");
    }
    for dev in ["tcsa", "tcsb", "tcsbr"] {
        ns.wait_link_ready(dev, Duration::from_secs(5))
            .expect("oper up");
    }
    b.set_nonblocking(true).expect("nonblocking");

    let outers: [(IpAddr, IpAddr); 2] = [
        (
            IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)),
            IpAddr::V4(Ipv4Addr::new(203, 0, 113, 2)),
        ),
        (
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2)),
        ),
    ];
    let mut buf = vec![0u8; 70_000];
    for (inner, (src, dst)) in [
        (Ip::V4, outers[0]),
        (Ip::V6, outers[1]),
        (Ip::V4, outers[1]),
    ] {
        let what = format!("inner {inner:?}, outer {src}");
        // The super-frame as the switch makes it: TCP GSO, then VXLAN with a UDP checksum.
        let (f, m, _) = packet(Envelope::Plain, inner, L4::Tcp, true, Csum::Partial);
        let mut p = PacketBuf::from_frame(&f);
        p.meta = m;
        let encap = Action::Encap(TunnelEncap {
            kind: TunnelKind::Vxlan,
            src,
            dst,
            id: 42,
            udp_csum: true,
        });
        apply(&mut p, &encap, &CFG).expect("encap");
        let mut out = TxOutput::new();
        let r = tx_prepare(&TxPacket::new(p.frame(), p.meta), &a.device(), &mut out);
        let TxOutcome::Unchanged { actions, work } = r else {
            panic!("{what}: not handed to the TAP whole: {r:?}");
        };
        assert!(actions.contains(TxSteps::HW_GSO), "{what}: {actions:?}");
        let mut want = Vec::new();
        emulate_device(p.frame(), &work, &CFG, &mut want).expect("the device model");
        assert!(want.len() > 1, "{what}: {} segments", want.len());

        while b.read(&mut buf).is_ok() {}
        a.send(p.frame(), &work)
            .unwrap_or_else(|e| panic!("{what}: the TAP refused it: {e}"));
        let mut got: Vec<Vec<u8>> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(3);
        while got.len() < want.len() {
            assert!(
                Instant::now() < deadline,
                "{what}: {} of {} segments came out",
                got.len(),
                want.len()
            );
            match b.read(&mut buf) {
                // Skip the namespace's own chatter (IPv6 neighbour discovery, …): keep the
                // VXLAN segments (UDP port 4789 where the model's segments have it).
                Ok(n) if n > 12 && is_vxlan(&buf[12..n]) => got.push(buf[12..n].to_vec()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => panic!("{what}: read: {e}"),
            }
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let layout = sluice_wire::parse_with(g, &CFG).expect("a segment parses");
            let v = verify_frame(g, &layout);
            assert_eq!(
                (v.l4, v.inner_l4),
                (Verdict::Good, Verdict::Good),
                "{what}: segment {i}: {v:?}"
            );
            assert!(
                v.ip != Verdict::Bad && v.inner_ip != Verdict::Bad,
                "{what}: segment {i}: {v:?}"
            );
            // The outer UDP checksum is filled, not left zero.
            let o = layout.outer.l4.expect("outer UDP");
            assert_ne!(
                &g[o + 6..o + 8],
                &[0, 0],
                "{what}: segment {i}: no outer checksum"
            );
            assert_eq!(g, w, "{what}: segment {i} differs from the model");
        }
        println!("{what}: {} segments, byte for byte as the model", got.len());
    }
}

/// A frame carrying UDP to port 4789 (VXLAN), after an IPv4 or IPv6 header.
fn is_vxlan(frame: &[u8]) -> bool {
    let Ok(layout) = sluice_wire::parse_with(frame, &CFG) else {
        return false;
    };
    layout.tunnel.is_some_and(|t| t.kind == TunnelKind::Vxlan)
}
