//! Transmit preparation of L3 packets (a TUN port's: the IP header at offset 0, no Ethernet
//! header): their first bytes are never read as Ethernet, a VLAN tag cannot be inserted, and
//! software GSO parses them from the IP header. No root needed (the kernel parity of the same
//! path is in `l3_kernel.rs`).

#[path = "gso_build.rs"]
mod build;

use build::{build, pattern, Ip, Seed, Spec, L4};
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::tx::{tx_prepare, DropReason, TxOutcome, TxOutput, TxPacket, VlanInsert};
use sluice_packet::verify::verify_frame;
use sluice_packet::{GsoType, OffloadMeta, Verdict};
use sluice_wire::{parse_with, ParseConfig};

/// A TCPv4 GSO packet (5000 bytes of payload, MSS 1448) without its Ethernet header, whose
/// source address starts 129.0 (bytes 12-13 read 0x8100, a VLAN TPID if misread as Ethernet),
/// with its metadata: checksum partial, GSO requested.
fn l3_gso_packet() -> (Vec<u8>, OffloadMeta) {
    let spec = Spec {
        vlans: vec![],
        ip: Ip::V4,
        tunnel: None,
        l4: L4::Tcp {
            flags: 0x10,
            opt_len: 0,
            seq: 1,
        },
        payload: pattern(5000, 9),
    };
    let (frame, _) = build(&spec, Seed::Pseudo);
    let mut p = frame[14..].to_vec();
    p[12] = 129;
    p[13] = 0;
    // The pseudo-header seed of the new source address.
    let l4 = usize::from(p[0] & 0x0f) * 4;
    let seed = build::pseudo(&p, 0, false, 6, p.len() - l4);
    p[l4 + 16..l4 + 18].copy_from_slice(&seed.to_be_bytes());
    let layout = parse_with(&p, &ParseConfig::L3).expect("parses as L3");
    let mut meta = OffloadMeta::from_layout(&layout);
    meta.rx_needs_csum(l4 as u16, 16).expect("partial checksum");
    meta.set_gso(GsoType::TcpV4, 1448, false).expect("gso");
    (p, meta)
}

#[test]
fn l3_packet_bytes_are_not_read_as_vlan_tags() {
    let (p, meta) = l3_gso_packet();
    assert_eq!(&p[12..14], &[0x81, 0x00]);
    // TSO for untagged packets only: a packet misread as tagged would be segmented in software.
    let mut dev = Device::new(Features::TSO | Features::TX_CSUM_GENERIC | Features::TX_SG);
    dev.vlan_features = Features::NONE;
    let mut out = TxOutput::new();
    match tx_prepare(&TxPacket::new(&p, meta), &dev, &mut out) {
        TxOutcome::Unchanged { work, .. } => {
            assert_eq!(work.gso, Some((GsoType::TcpV4, 1448, false)));
            assert!(dev.features.has(Feature::Tso));
        }
        other => panic!("expected the device to segment it: {other:?}"),
    }
}

#[test]
fn l3_packet_takes_no_vlan_tag() {
    let (p, meta) = l3_gso_packet();
    let dev = Device::new(Features::ALL);
    let mut out = TxOutput::new();
    let pkt = TxPacket {
        vlan: Some(VlanInsert {
            tpid: 0x8100,
            tci: 5,
        }),
        ..TxPacket::new(&p, meta)
    };
    let r = tx_prepare(&pkt, &dev, &mut out);
    assert!(
        matches!(r, TxOutcome::Dropped(DropReason::Malformed(_))),
        "{r:?}"
    );
}

#[test]
fn l3_software_gso_parses_from_the_ip_header() {
    let (p, meta) = l3_gso_packet();
    // The TxOutput's own parse configuration says Ethernet: the metadata decides.
    let mut out = TxOutput::new();
    assert_eq!(out.parse, ParseConfig::DEFAULT);
    let dev = Device::new(Features::NONE).with_mtu(9000);
    let r = tx_prepare(&TxPacket::new(&p, meta), &dev, &mut out);
    let TxOutcome::Prepared { frames: 4, .. } = r else {
        panic!("{r:?}")
    };
    let mut payload = Vec::new();
    for (f, work) in out.frames() {
        assert_eq!((work.gso, work.l4_csum), (None, None));
        let l = parse_with(f, &ParseConfig::L3).expect("segment parses as L3");
        assert_eq!(l.outer.l2, None);
        let v = verify_frame(f, &l);
        assert_eq!((v.ip, v.l4), (Verdict::Good, Verdict::Good), "{l:?}");
        payload.extend_from_slice(&f[l.outer.payload.unwrap()..]);
    }
    assert_eq!(payload, pattern(5000, 9));
}
