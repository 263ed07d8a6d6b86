//! `virtio_net_hdr` round trip against the kernel (root only; fails loudly otherwise).
//!
//! Direction 1: a frame written to a TAP with the header Sluice encodes comes back through an
//! `AF_PACKET` socket (`PACKET_VNET_HDR`) on the same interface with the header the kernel
//! produced from its skb (`virtio_net_hdr_from_skb`). Direction 2: a frame sent on the `AF_PACKET`
//! socket with Sluice's header is transmitted on the TAP and read back with the header `tun`
//! produced. In both, Sluice decodes the header it sent and the one the kernel produced, against
//! the frame the kernel returned, into identical metadata.

use sluice_testkit::tx_frames as builder;

use builder::{packet, Csum, Envelope, Ip, L4};
use sluice_packet::virtio::{HdrFormat, VirtioNetHdr, F_DATA_VALID};
use sluice_packet::OffloadMeta;
use sluice_ports::afpacket::{AfPacketConfig, PacketSocket};
use sluice_ports::tap::{
    Tap, TapConfig, TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_TSO_ECN, TUN_F_USO4, TUN_F_USO6,
};
use sluice_ports::Netns;
use std::time::{Duration, Instant};

fn decode(h: &VirtioNetHdr, fmt: HdrFormat, frame: &[u8]) -> OffloadMeta {
    let l = sluice_wire::parse(frame).expect("parse");
    h.to_meta(fmt, frame, &l)
        .unwrap_or_else(|e| panic!("{h:?}: {e}"))
}

#[test]
fn virtio_net_hdr_round_trip_through_the_kernel() {
    sluice_testkit::root();
    let ns = Netns::create("slvirtio").expect("netns");
    let offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN | TUN_F_USO4 | TUN_F_USO6;
    let tap = ns
        .enter(|| {
            Tap::open(
                "vt0",
                &TapConfig {
                    vnet_hdr_len: 12,
                    offloads,
                    ..TapConfig::default()
                },
            )
        })
        .expect("enter")
        .expect("tap");
    ns.link_up("vt0").expect("up");
    ns.wait_link_ready("vt0", Duration::from_secs(5))
        .expect("oper up");
    let sock = ns
        .enter(|| {
            PacketSocket::bind(
                "vt0",
                &AfPacketConfig {
                    vnet_hdr: true,
                    auxdata: false,
                    promisc: false,
                },
            )
        })
        .expect("enter")
        .expect("socket");
    tap.set_nonblocking(true).expect("nonblocking");

    let cases = [
        (Envelope::Plain, Ip::V4, L4::Tcp, false, Csum::Partial),
        (Envelope::Plain, Ip::V6, L4::Udp, false, Csum::Partial),
        (Envelope::Plain, Ip::V4, L4::Tcp, true, Csum::Partial),
        (Envelope::Plain, Ip::V6, L4::Tcp, true, Csum::Partial),
        (Envelope::Plain, Ip::V4, L4::Udp, true, Csum::Partial),
        (Envelope::Plain, Ip::V4, L4::Tcp, false, Csum::Good),
    ];
    let mut buf = vec![0u8; 70000];
    for (e, ip, l4, gso, c) in cases {
        let what = format!("{e:?} {ip:?} {l4:?} gso={gso} {c:?}");
        let (frame, meta, _) = packet(e, ip, l4, gso, c);
        let ours = VirtioNetHdr::from_meta(&meta, &frame, HdrFormat::V1).expect("encode");
        if c == Csum::Good {
            assert_eq!(ours.flags, F_DATA_VALID);
        }
        let mut raw = [0u8; 12];
        ours.encode(HdrFormat::V1, &mut raw).expect("encode");

        // 1: TAP write → AF_PACKET receive.
        sock.drain().expect("drain");
        tap.write(&raw, &frame)
            .unwrap_or_else(|err| panic!("{what}: kernel refused {ours:?}: {err}"));
        let deadline = Instant::now() + Duration::from_secs(2);
        let (got, kernel_hdr) = loop {
            assert!(Instant::now() < deadline, "{what}: never captured");
            let Some(rx) = sock
                .recv(&mut buf, Duration::from_millis(200))
                .expect("recv")
            else {
                continue;
            };
            if rx.outgoing() || rx.frame(&buf) != &frame[..] {
                continue;
            }
            break (rx.frame(&buf).to_vec(), rx.vnet_hdr.expect("vnet header"));
        };
        let theirs = VirtioNetHdr::decode(&kernel_hdr, HdrFormat::V0).expect("decode");
        println!("{what}: sent {ours:?}\n  kernel {theirs:?}");
        let a = decode(&ours, HdrFormat::V1, &got);
        let b = decode(&theirs, HdrFormat::V0, &got);
        if c == Csum::Good {
            // Kernel fact: tun does not turn DATA_VALID into CHECKSUM_UNNECESSARY on write, so
            // the frame arrives unverified, and Sluice decodes it as such (never Good without
            // DATA_VALID).
            assert_eq!(theirs.flags, 0, "{what}: {theirs:?}");
            let l = sluice_wire::parse(&got).expect("parse");
            assert_eq!(b, OffloadMeta::from_layout(&l), "{what}");
            continue;
        }
        assert_eq!(a, b, "{what}: ours {ours:?} kernel {theirs:?}");
        // What a header carries comes back: the partial location and the GSO request.
        assert_eq!(a.partial_slot(), meta.partial_slot(), "{what}");
        assert_eq!(
            (a.csum_start(), a.csum_offset()),
            (meta.csum_start(), meta.csum_offset())
        );
        assert_eq!(
            (a.gso_type(), a.segment_size()),
            (meta.gso_type(), meta.segment_size())
        );

        // 2: AF_PACKET send → TAP read.
        while tap.read(&mut buf).is_ok() {}
        sock.send(Some(&raw[..10]), &frame)
            .unwrap_or_else(|err| panic!("{what}: AF_PACKET send refused {ours:?}: {err}"));
        let deadline = Instant::now() + Duration::from_secs(2);
        let n = loop {
            assert!(Instant::now() < deadline, "{what}: never read from the TAP");
            match tap.read(&mut buf) {
                Ok(n) if n >= 12 && buf[12..n] == frame[..] => break n,
                Ok(_) => continue,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(err) => panic!("{what}: read: {err}"),
            }
        };
        let theirs = VirtioNetHdr::decode(&buf[..12], HdrFormat::V1).expect("decode");
        println!("  tun    {theirs:?}");
        let b = decode(&theirs, HdrFormat::V1, &buf[12..n]);
        assert_eq!(a, b, "{what}: ours {ours:?} tun {theirs:?}");
    }
}

/// TAP → bridge → TAP with 24-byte headers: the UDP-tunnel extension (VXLAN and Geneve GSO
/// packets, `TUN_F_UDP_TUNNEL_GSO`) and plain GSO come out of the second TAP with the header the
/// kernel produced, and both decode to the same metadata.
#[test]
fn tunnel_header_round_trip_through_a_bridge() {
    use sluice_ports::tap::{TUN_F_UDP_TUNNEL_GSO, TUN_F_UDP_TUNNEL_GSO_CSUM};
    sluice_testkit::root();
    let ns = Netns::create("slvtnl").expect("netns");
    let offloads = TUN_F_CSUM
        | TUN_F_TSO4
        | TUN_F_TSO6
        | TUN_F_USO4
        | TUN_F_USO6
        | TUN_F_UDP_TUNNEL_GSO
        | TUN_F_UDP_TUNNEL_GSO_CSUM;
    let cfg = TapConfig {
        vnet_hdr_len: 24,
        offloads,
        ..TapConfig::default()
    };
    let a = ns
        .enter(|| Tap::open("vta", &cfg))
        .expect("enter")
        .expect("tap a");
    let b = ns
        .enter(|| Tap::open("vtb", &cfg))
        .expect("enter")
        .expect("tap b");
    assert_eq!(
        b.offloads() & (TUN_F_UDP_TUNNEL_GSO | TUN_F_UDP_TUNNEL_GSO_CSUM),
        TUN_F_UDP_TUNNEL_GSO | TUN_F_UDP_TUNNEL_GSO_CSUM,
        "kernel without UDP tunnel GSO for TAP (needs 6.17+): offloads {:#x}",
        b.offloads()
    );
    ns.run(&["ip", "link", "add", "vbr", "type", "bridge"])
        .expect("bridge");
    for dev in ["vta", "vtb"] {
        ns.run(&["ip", "link", "set", dev, "master", "vbr"])
            .expect("enslave");
        ns.link_up(dev).expect("up");
    }
    ns.link_up("vbr").expect("up");
    for dev in ["vta", "vtb", "vbr"] {
        ns.wait_link_ready(dev, Duration::from_secs(5))
            .expect("oper up");
    }
    b.set_nonblocking(true).expect("nonblocking");
    let mut buf = vec![0u8; 70000];
    let cases = [
        (Envelope::Vxlan, Ip::V4, L4::Tcp),
        (Envelope::Vxlan, Ip::V6, L4::Udp),
        (Envelope::Geneve, Ip::V4, L4::Udp),
        (Envelope::Geneve, Ip::V6, L4::Tcp),
        (Envelope::Plain, Ip::V4, L4::Tcp),
        (Envelope::Tag1, Ip::V6, L4::Tcp),
    ];
    for (e, ip, l4) in cases {
        let what = format!("{e:?} {ip:?} {l4:?}");
        let (frame, meta, _) = packet(e, ip, l4, true, Csum::Partial);
        let ours = VirtioNetHdr::from_meta(&meta, &frame, HdrFormat::V1HashTunnel).expect("encode");
        let mut raw = [0u8; 24];
        ours.encode(HdrFormat::V1HashTunnel, &mut raw)
            .expect("encode");
        while b.read(&mut buf).is_ok() {}
        a.write(&raw, &frame)
            .unwrap_or_else(|err| panic!("{what}: kernel refused {ours:?}: {err}"));
        let deadline = Instant::now() + Duration::from_secs(2);
        let n = loop {
            assert!(
                Instant::now() < deadline,
                "{what}: never came out of the bridge"
            );
            match b.read(&mut buf) {
                Ok(n) if n >= 24 && buf[24..n] == frame[..] => break n,
                Ok(_) => continue,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(err) => panic!("{what}: read: {err}"),
            }
        };
        let theirs = VirtioNetHdr::decode(&buf[..24], HdrFormat::V1HashTunnel).expect("decode");
        println!("{what}: sent {ours:?}\n  kernel {theirs:?}");
        let x = decode(&ours, HdrFormat::V1HashTunnel, &frame);
        let y = decode(&theirs, HdrFormat::V1HashTunnel, &buf[24..n]);
        assert_eq!(x, y, "{what}: ours {ours:?} kernel {theirs:?}");
        assert_eq!(theirs.tunnel_bits(), ours.tunnel_bits(), "{what}");
        assert_eq!(
            (theirs.outer_th_offset, theirs.inner_nh_offset),
            (ours.outer_th_offset, ours.inner_nh_offset),
            "{what}"
        );
    }
}
