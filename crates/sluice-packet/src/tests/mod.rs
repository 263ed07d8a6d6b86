//! Unit and property tests.

mod frames;
mod props;
mod rewrite;
mod state_table;
mod verify;

/// As Linux 6.18 (checked through the kernel oracle in sluice-offload's `gso_kernel` test): the
/// GSO ECN bit is refused with USO, accepted with UFO (fragments as without it) and TCP.
#[test]
fn ecn_is_refused_on_uso_as_linux_refuses_it() {
    use crate::meta::{GsoType, OffloadMeta};
    let mut m = OffloadMeta::default();
    assert!(m.set_gso(GsoType::UdpL4, 1400, true).is_err());
    assert!(m.set_gso(GsoType::UdpL4, 1400, false).is_ok());
    for t in [GsoType::Udp, GsoType::TcpV4, GsoType::TcpV6] {
        assert!(m.set_gso(t, 1448, true).is_ok(), "{t:?}");
        assert!(m.gso_ecn(), "{t:?}");
    }
}

#[test]
fn removing_the_l2_header_gives_the_l3_packet_its_own_metadata() {
    use crate::meta::{GsoType, OffloadMeta, Slot};
    use sluice_wire::{parse, parse_with, L3Kind, ParseConfig};
    // A VLAN-tagged TCP/IPv6 frame: Ethernet 14, tag 4, IPv6 40, TCP 20.
    let seg = frames::tcp(&[7u8; 3000]);
    let ip = frames::ip_header(L3Kind::Ipv6, 6, seg.len());
    let mut frame = vec![0u8; 12];
    frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x86, 0xdd]);
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&seg);
    let mut m = OffloadMeta::from_layout(&parse(&frame).unwrap());
    m.rx_needs_csum(58, 16).unwrap();
    m.set_gso(GsoType::TcpV6, 1440, false).unwrap();

    let mut l3 = m;
    assert_eq!(l3.l2_removed(), Ok(18));
    let fresh = OffloadMeta::from_layout(&parse_with(&frame[18..], &ParseConfig::L3).unwrap());
    assert_eq!(l3.offsets(), fresh.offsets());
    assert_eq!((l3.csum_start(), l3.csum_offset()), (40, 16));
    assert_eq!(l3.status(Slot::OuterL4), m.status(Slot::OuterL4));
    assert_eq!((l3.gso_type(), l3.segment_size()), (GsoType::TcpV6, 1440));
    // Once is all: an L3 packet has no L2 header to remove, and nothing changes.
    let before = l3;
    assert!(l3.l2_removed().is_err());
    assert_eq!(l3, before);
}
