//! Named rules of transmit preparation: the stacked-VLAN regression, the envelope rule, VLAN
//! insertion, linearization instead of segmentation, GSO limits.

use sluice_testkit::tx_frames as builder;

use builder::{packet, Csum, Envelope, Ip, L4};
use sluice_coverage::Counter;
use sluice_offload::features::{
    features_for, Device, DeviceLimits, Feature, Features, PacketShape, MAX_VLAN_DEPTH,
};
use sluice_offload::tx::{
    emulate_device, tx_prepare, DropReason, Tail, TxOutcome, TxOutput, TxPacket, TxSteps,
    VlanInsert,
};
use sluice_packet::verify::verify_frame;
use sluice_packet::{OffloadMeta, Verdict};
use sluice_wire::ParseConfig;

/// What this test's thread added to `counter`: the other tests of this binary run on other
/// threads at the same time and move the process-wide total, never this.
fn here(counter: &'static Counter) -> u64 {
    counter
        .this_thread()
        .expect("a per-thread counter (below MAX_COUNTERS)")
}

/// The field report (NTT stacked-VLAN talk, ibmveth trunk thread): a device with only
/// IPv4-specific checksum offload was handed double-tagged packets with a partial checksum it
/// could not parse, and sent them with a wrong checksum. Sluice completes it in software.
#[test]
fn stacked_vlan_never_handed_to_ipv4_only_checksum_offload() {
    let dev = Device::new(Features::TX_CSUM_IPV4 | Features::TX_SG);
    let mut out = TxOutput::new();
    for l4 in [L4::Tcp, L4::Udp] {
        let (frame, meta, _) = packet(Envelope::Tag2, Ip::V4, l4, false, Csum::Partial);
        let shape = PacketShape {
            in_band_tags: 2,
            len: frame.len(),
            ..PacketShape::default()
        };
        let f = features_for(&meta, &shape, &dev);
        assert!(!f.has(Feature::TxCsumIpv4), "{f}");
        let r = tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out);
        let TxOutcome::Prepared { actions, frames: 1 } = r else {
            panic!("{r:?}")
        };
        assert_eq!(actions, TxSteps::SW_CSUM);
        let (bytes, work) = out.frame(0).unwrap();
        assert_eq!(
            work.l4_csum, None,
            "no partial checksum left for the device"
        );
        let l = sluice_wire::parse(bytes).unwrap();
        assert_eq!(verify_frame(bytes, &l).l4, Verdict::Good);
        // The same packet with one tag is the device's to fill.
        let (frame, meta, _) = packet(Envelope::Tag1, Ip::V4, l4, false, Csum::Partial);
        let r = tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out);
        assert_eq!(r.actions(), TxSteps::HW_CSUM);
    }
    // A device that parses two tags keeps its IPv4 offload.
    let mut multi = dev;
    multi.vlan_depth = 2;
    let (frame, meta, _) = packet(Envelope::Tag2, Ip::V4, L4::Tcp, false, Csum::Partial);
    let r = tx_prepare(&TxPacket::new(&frame, meta), &multi, &mut out);
    assert_eq!(r.actions(), TxSteps::HW_CSUM);
}

fn sized(encap: Envelope, ip_len: usize) -> (Vec<u8>, OffloadMeta) {
    // TCP over IPv4: 20 + 20 header bytes.
    let f = builder::frame(encap, Ip::V4, L4::Tcp, ip_len - 40);
    let l = sluice_wire::parse(&f).unwrap();
    let m = OffloadMeta::from_layout(&l);
    (f, m)
}

#[test]
fn envelope_admits_tags_not_bigger_packets() {
    let mut out = TxOutput::new();
    let (tagged, tm) = sized(Envelope::Tag2, 1500);
    assert_eq!(tagged.len(), 1522);
    let with = Device::new(Features::NONE).with_mtu(1500).with_envelope(8);
    let without = Device::new(Features::NONE).with_mtu(1500);
    let before = here(&sluice_offload::tx::OVERSIZE_DROPS);
    assert!(matches!(
        tx_prepare(&TxPacket::new(&tagged, tm), &with, &mut out),
        TxOutcome::Unchanged { .. }
    ));
    let r = tx_prepare(&TxPacket::new(&tagged, tm), &without, &mut out);
    assert!(
        matches!(
            r,
            TxOutcome::Dropped(DropReason::Oversize {
                l2_len: 22,
                l3_len: 1500,
                ..
            })
        ),
        "{r:?}"
    );
    let (big, bm) = sized(Envelope::Plain, 1504);
    assert_eq!(big.len(), 1518);
    for dev in [with, without] {
        let r = tx_prepare(&TxPacket::new(&big, bm), &dev, &mut out);
        assert!(
            matches!(
                r,
                TxOutcome::Dropped(DropReason::Oversize {
                    l2_len: 14,
                    l3_len: 1504,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    assert_eq!(here(&sluice_offload::tx::OVERSIZE_DROPS) - before, 3);
    // An accelerated tag counts as a tag: 1518 + 4 with a 4-byte envelope passes, without fails.
    let (plain, pm) = sized(Envelope::Plain, 1500);
    let mut p = TxPacket::new(&plain, pm);
    p.vlan = Some(VlanInsert {
        tpid: 0x8100,
        tci: 7,
    });
    assert!(!matches!(
        tx_prepare(&p, &without.with_envelope(4), &mut out),
        TxOutcome::Dropped(_)
    ));
    assert!(matches!(
        tx_prepare(&p, &without, &mut out),
        TxOutcome::Dropped(_)
    ));
}

#[test]
fn vlan_insertion_in_software_or_by_the_device() {
    let mut out = TxOutput::new();
    let (frame, meta, _) = packet(Envelope::Plain, Ip::V6, L4::Udp, false, Csum::Partial);
    let tag = VlanInsert {
        tpid: 0x88a8,
        tci: 0x2064,
    };
    let mut p = TxPacket::new(&frame, meta);
    p.vlan = Some(tag);
    // C-tag insertion only: an S-tag is inserted in software, then the checksum is the device's.
    let dev = Device::new(Features::TX_CSUM_GENERIC | Features::TX_SG | Features::VLAN_CTAG_INSERT);
    let r = tx_prepare(&p, &dev, &mut out);
    assert_eq!(r.actions(), TxSteps::VLAN_SW | TxSteps::HW_CSUM, "{r:?}");
    let (bytes, work) = out.frame(0).unwrap();
    assert_eq!(&bytes[12..18], &[0x88, 0xa8, 0x20, 0x64, 0x86, 0xdd]);
    assert_eq!(bytes.len(), frame.len() + 4);
    let (start, off) = work.l4_csum.unwrap();
    assert_eq!(
        usize::from(start),
        14 + 4 + 40,
        "csum_start moved with the tag"
    );
    assert_eq!(off, 6);
    let mut wire = Vec::new();
    emulate_device(bytes, work, &ParseConfig::DEFAULT, &mut wire).unwrap();
    let l = sluice_wire::parse(&wire[0]).unwrap();
    assert_eq!(verify_frame(&wire[0], &l).l4, Verdict::Good);
    // A device with S-tag insertion takes the tag as it is.
    let dev = Device::new(Features::TX_CSUM_GENERIC | Features::TX_SG | Features::VLAN_STAG_INSERT);
    let r = tx_prepare(&p, &dev, &mut out);
    let TxOutcome::Unchanged { actions, work } = r else {
        panic!("{r:?}")
    };
    assert_eq!(actions, TxSteps::VLAN_HW | TxSteps::HW_CSUM);
    assert_eq!(work.vlan, Some(tag));
    let mut wire = Vec::new();
    emulate_device(&frame, &work, &ParseConfig::DEFAULT, &mut wire).unwrap();
    assert_eq!(&wire[0][12..16], &[0x88, 0xa8, 0x20, 0x64]);
    let l = sluice_wire::parse(&wire[0]).unwrap();
    assert_eq!(verify_frame(&wire[0], &l).l4, Verdict::Good);
}

#[test]
fn frag_list_is_linearized_when_the_device_can_still_segment() {
    let mut out = TxOutput::new();
    let (frame, meta, _) = packet(Envelope::Plain, Ip::V4, L4::Tcp, true, Csum::Partial);
    let (head, rest) = frame.split_at(54 + 500);
    let (a, b) = rest.split_at(1200);
    let pieces: [&[u8]; 2] = [a, b];
    let p = TxPacket {
        head,
        tail: Tail::FragList(&pieces),
        meta,
        vlan: None,
        layout: None,
    };
    let tso = Features::TX_CSUM_GENERIC | Features::TX_SG | Features::TSO;
    let before = here(&sluice_offload::tx::LINEARIZED);
    let r = tx_prepare(&p, &Device::new(tso), &mut out);
    assert_eq!(r.actions(), TxSteps::LINEARIZE | TxSteps::HW_GSO, "{r:?}");
    assert_eq!(out.frame(0).unwrap().0, &frame[..], "one copy, same bytes");
    assert_eq!(here(&sluice_offload::tx::LINEARIZED) - before, 1);
    // With frag-list support the chain goes as it is.
    let r = tx_prepare(&p, &Device::new(tso | Features::TX_FRAGLIST), &mut out);
    assert!(
        matches!(
            r,
            TxOutcome::Unchanged {
                actions: TxSteps::HW_GSO,
                ..
            }
        ),
        "{r:?}"
    );
    // Without TSO it is segmented in software (no separate linearization).
    let r = tx_prepare(
        &p,
        &Device::new(Features::TX_CSUM_GENERIC | Features::TX_SG),
        &mut out,
    );
    assert_eq!(r.actions(), TxSteps::SOFT_GSO | TxSteps::HW_CSUM, "{r:?}");
    assert_eq!(out.len(), 3);
    // A plain (non-GSO) scattered packet for a device without scatter-gather is linearized.
    let (frame, meta, _) = packet(Envelope::Plain, Ip::V4, L4::Udp, false, Csum::Good);
    let (head, rest) = frame.split_at(60);
    let pieces: [&[u8]; 1] = [rest];
    let p = TxPacket {
        head,
        tail: Tail::Frags(&pieces),
        meta,
        vlan: None,
        layout: None,
    };
    let r = tx_prepare(&p, &Device::new(Features::NONE), &mut out);
    assert_eq!(r.actions(), TxSteps::LINEARIZE);
    assert_eq!(out.frame(0).unwrap().0, &frame[..]);
}

#[test]
fn gso_limits_remove_segmentation() {
    let mut out = TxOutput::new();
    let (frame, meta, _) = packet(Envelope::Plain, Ip::V6, L4::Tcp, true, Csum::Partial);
    let mut dev = Device::new(Features::TX_CSUM_GENERIC | Features::TX_SG | Features::TSO6);
    assert_eq!(
        tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out).actions(),
        TxSteps::HW_GSO
    );
    dev.gso_max_segs = 2;
    assert_eq!(
        tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out).actions(),
        TxSteps::SOFT_GSO | TxSteps::HW_CSUM
    );
    dev.gso_max_segs = 3;
    dev.gso_max_size = 2000;
    assert_eq!(
        tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out).actions(),
        TxSteps::SOFT_GSO | TxSteps::HW_CSUM
    );
    // Segments that would not fit the MTU are dropped as oversize, by a device or by software.
    let before = here(&sluice_offload::tx::OVERSIZE_DROPS);
    for f in [
        Features::NONE,
        Features::TX_CSUM_GENERIC | Features::TX_SG | Features::TSO6,
    ] {
        let small = Device::new(f).with_mtu(1000);
        let r = tx_prepare(&TxPacket::new(&frame, meta), &small, &mut out);
        assert!(
            matches!(
                r,
                TxOutcome::Dropped(DropReason::Oversize { l3_len: 1060, .. })
            ),
            "{r:?}"
        );
    }
    assert_eq!(here(&sluice_offload::tx::OVERSIZE_DROPS) - before, 2);
    // Segments that exactly fit pass.
    let fit = Device::new(Features::NONE).with_mtu(1060);
    let r = tx_prepare(&TxPacket::new(&frame, meta), &fit, &mut out);
    assert_eq!(r.actions(), TxSteps::SOFT_GSO);
    assert!(out.frames().all(|(b, _)| b.len() <= 14 + 1060));
}

#[test]
fn ipv4_only_offload_never_fills_ipv6() {
    let mut out = TxOutput::new();
    let dev = Device::new(Features::TX_CSUM_IPV4 | Features::TX_SG | Features::TSO);
    let (frame, meta, _) = packet(Envelope::Plain, Ip::V6, L4::Udp, false, Csum::Partial);
    assert_eq!(
        tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out).actions(),
        TxSteps::SW_CSUM
    );
    // vlan_features without the IPv4 checksum: a tagged IPv4 packet is completed in software.
    let mut dev = dev;
    dev.vlan_features = Features::TX_SG;
    let (frame, meta, _) = packet(Envelope::Tag1, Ip::V4, L4::Tcp, false, Csum::Partial);
    assert_eq!(
        tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out).actions(),
        TxSteps::SW_CSUM
    );
    let (frame, meta, _) = packet(Envelope::Plain, Ip::V4, L4::Tcp, false, Csum::Partial);
    assert_eq!(
        tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out).actions(),
        TxSteps::HW_CSUM
    );
}

#[test]
fn ipv6_specific_offload_never_fills_past_extension_headers() {
    // TCP over IPv6 with an 8-byte destination-options header between IPv6 and TCP.
    let plain = builder::frame(Envelope::Plain, Ip::V6, L4::Tcp, 300);
    let mut f = plain[..14].to_vec();
    let mut ip = plain[14..54].to_vec();
    let payload_len = u16::from_be_bytes([ip[4], ip[5]]) + 8;
    ip[4..6].copy_from_slice(&payload_len.to_be_bytes());
    ip[6] = 60;
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
    f.extend_from_slice(&plain[54..]);
    let l = sluice_wire::parse(&f).unwrap();
    assert_eq!(l.outer.l4, Some(62));
    let mut meta = OffloadMeta::from_layout(&l);
    meta.apply_verdicts(&verify_frame(&f, &l));
    meta.rx_needs_csum(62, 16).unwrap();
    sluice_packet::rewrite::seed_partial(&mut f, &meta).unwrap();
    let mut out = TxOutput::new();
    let v6 = Device::new(Features::TX_CSUM_IPV6 | Features::TX_SG);
    let r = tx_prepare(&TxPacket::new(&f, meta), &v6, &mut out);
    assert_eq!(r.actions(), TxSteps::SW_CSUM, "{r:?}");
    let (bytes, _) = out.frame(0).unwrap();
    let l = sluice_wire::parse(bytes).unwrap();
    assert_eq!(verify_frame(bytes, &l).l4, Verdict::Good);
    // Generic offload fills it; IPv6-specific offload fills the plain IPv6 packet.
    let generic = Device::new(Features::TX_CSUM_GENERIC | Features::TX_SG);
    assert_eq!(
        tx_prepare(&TxPacket::new(&f, meta), &generic, &mut out).actions(),
        TxSteps::HW_CSUM
    );
    let (p, pm, _) = packet(Envelope::Plain, Ip::V6, L4::Tcp, false, Csum::Partial);
    assert_eq!(
        tx_prepare(&TxPacket::new(&p, pm), &v6, &mut out).actions(),
        TxSteps::HW_CSUM
    );
}

/// The per-port VLAN depth decides who segments a QinQ super-frame: a device that segments
/// under two tags gets it whole; with depth 1 software segments it (counted in `soft_gso`),
/// and every segment it makes keeps both tags and fits the wire.
#[test]
fn vlan_depth_decides_who_segments_a_qinq_super_frame() {
    let mut out = TxOutput::new();
    let (frame, meta, _) = packet(Envelope::Tag2, Ip::V4, L4::Tcp, true, Csum::Partial);
    let base =
        Device::new(Features::TX_CSUM_GENERIC | Features::TX_SG | Features::TSO).with_envelope(8);
    for depth in 0..=MAX_VLAN_DEPTH {
        let dev = DeviceLimits {
            vlan_depth: Some(depth),
            ..DeviceLimits::NONE
        }
        .apply(base);
        let soft = here(&sluice_offload::tx::SOFT_GSO);
        let r = tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out);
        if depth >= 2 {
            assert_eq!(r.actions(), TxSteps::HW_GSO, "depth {depth}");
            assert!(matches!(r, TxOutcome::Unchanged { work, .. } if work.gso.is_some()));
            assert_eq!(here(&sluice_offload::tx::SOFT_GSO), soft, "depth {depth}");
        } else {
            // Only tag-agnostic features survive: software segments and fills the checksums
            // with the generic engine (which needs no header parsing).
            assert_eq!(
                r.actions(),
                TxSteps::SOFT_GSO | TxSteps::HW_CSUM,
                "depth {depth}"
            );
            assert_eq!(
                here(&sluice_offload::tx::SOFT_GSO),
                soft + 1,
                "depth {depth}"
            );
            assert!(out.len() > 1);
            for (seg, _) in out.frames() {
                assert_eq!(sluice_offload::tx::count_tags(seg), 2);
                assert!(seg.len() <= dev.max_frame());
            }
        }
    }
    // One tag to insert on top of two in band makes three: depth 2 no longer covers it.
    let tag = VlanInsert {
        tpid: 0x88a8,
        tci: 7,
    };
    let mut p = TxPacket::new(&frame, meta);
    p.vlan = Some(tag);
    let mut dev = base.with_envelope(12);
    dev.vlan_depth = 2;
    assert!(tx_prepare(&p, &dev, &mut out)
        .actions()
        .contains(TxSteps::SOFT_GSO));
    dev.vlan_depth = 3;
    assert!(tx_prepare(&p, &dev, &mut out)
        .actions()
        .contains(TxSteps::HW_GSO));
}

/// `gso_max_size` and `gso_max_segs` overrides: a super-frame over either goes to software,
/// one within both goes to the device whole.
#[test]
fn gso_limit_overrides_decide_between_device_and_software() {
    let mut out = TxOutput::new();
    let (frame, meta, _) = packet(Envelope::Plain, Ip::V4, L4::Tcp, true, Csum::Partial);
    let base = Device::new(Features::TX_CSUM_GENERIC | Features::TX_SG | Features::TSO);
    let len = frame.len() as u32;
    let cases = [
        (DeviceLimits::NONE, TxSteps::HW_GSO),
        (
            DeviceLimits {
                gso_max_size: Some(len),
                ..DeviceLimits::NONE
            },
            TxSteps::HW_GSO,
        ),
        (
            DeviceLimits {
                gso_max_size: Some(len - 1),
                ..DeviceLimits::NONE
            },
            TxSteps::SOFT_GSO | TxSteps::HW_CSUM,
        ),
        (
            DeviceLimits {
                gso_max_segs: Some(1),
                ..DeviceLimits::NONE
            },
            TxSteps::SOFT_GSO | TxSteps::HW_CSUM,
        ),
    ];
    for (limits, want) in cases {
        limits.validate().unwrap();
        let dev = limits.apply(base);
        let r = tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out);
        assert_eq!(r.actions(), want, "{limits:?}");
    }
}

/// The envelope override admits a full-size double-tagged frame that the default 4 bytes
/// refuse (counted as oversize).
#[test]
fn envelope_override_admits_a_full_size_qinq_frame() {
    let mut out = TxOutput::new();
    let (tagged, tm) = sized(Envelope::Tag2, 1500);
    let base = Device::new(Features::NONE).with_envelope(4);
    let before = here(&sluice_offload::tx::OVERSIZE_DROPS);
    let r = tx_prepare(&TxPacket::new(&tagged, tm), &base, &mut out);
    assert!(
        matches!(r, TxOutcome::Dropped(DropReason::Oversize { .. })),
        "{r:?}"
    );
    assert_eq!(here(&sluice_offload::tx::OVERSIZE_DROPS), before + 1);
    let eight = DeviceLimits {
        envelope: Some(8),
        ..DeviceLimits::NONE
    }
    .apply(base);
    let r = tx_prepare(&TxPacket::new(&tagged, tm), &eight, &mut out);
    assert_eq!(r.actions(), TxSteps::NONE);
}

#[test]
fn device_limits_are_range_checked() {
    let ok = DeviceLimits {
        vlan_depth: Some(MAX_VLAN_DEPTH),
        envelope: Some(0),
        gso_max_size: Some(1),
        gso_max_segs: Some(65_535),
    };
    assert_eq!(ok.validate(), Ok(()));
    for (bad, name) in [
        (
            DeviceLimits {
                vlan_depth: Some(MAX_VLAN_DEPTH + 1),
                ..DeviceLimits::NONE
            },
            "vlan_depth",
        ),
        (
            DeviceLimits {
                envelope: Some(65),
                ..DeviceLimits::NONE
            },
            "envelope",
        ),
        (
            DeviceLimits {
                gso_max_size: Some(0),
                ..DeviceLimits::NONE
            },
            "gso_max_size",
        ),
        (
            DeviceLimits {
                gso_max_segs: Some(65_536),
                ..DeviceLimits::NONE
            },
            "gso_max_segs",
        ),
    ] {
        let e = bad.validate().unwrap_err();
        assert!(e.starts_with(name), "{e}");
    }
    // Nothing overridden: the device as it was.
    let d = Device::new(Features::TSO).with_envelope(4);
    assert_eq!(DeviceLimits::NONE.apply(d), d);
}
