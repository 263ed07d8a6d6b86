//! `virtio_net_hdr` codec: byte layouts of v0 / v1 / the 24-byte UDP-tunnel header, the exact
//! mapping to and from `OffloadMeta`, every refusal, and no panic on arbitrary input.

use sluice_testkit::tx_frames as builder;

use builder::{packet, Csum, Envelope, Ip, L4};
use proptest::prelude::*;
use sluice_packet::virtio::*;
use sluice_packet::{CsumStatus, GsoType, OffloadMeta, Slot};

#[test]
fn byte_layouts() {
    let h = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4 | GSO_ECN,
        hdr_len: 0x0102,
        gso_size: 0x0304,
        csum_start: 0x0506,
        csum_offset: 0x0708,
        ..VirtioNetHdr::default()
    };
    let mut b = [0xeeu8; 24];
    assert_eq!(h.encode(HdrFormat::V0, &mut b), Ok(10));
    assert_eq!(&b[..10], &[1, 0x81, 2, 1, 4, 3, 6, 5, 8, 7]);
    assert_eq!(b[10], 0xee, "nothing written past the header");
    assert_eq!(VirtioNetHdr::decode(&b, HdrFormat::V0), Ok(h));
    let h1 = VirtioNetHdr {
        num_buffers: 0x0a0b,
        ..h
    };
    assert_eq!(h1.encode(HdrFormat::V1, &mut b), Ok(12));
    assert_eq!(&b[10..12], &[0x0b, 0x0a]);
    assert_eq!(VirtioNetHdr::decode(&b, HdrFormat::V1), Ok(h1));
    let t = VirtioNetHdr {
        gso_type: GSO_UDP_L4 | GSO_UDP_TUNNEL_IPV6,
        flags: F_NEEDS_CSUM | F_UDP_TUNNEL_CSUM,
        hash_value: 0x11223344,
        hash_report: 0x0506,
        outer_th_offset: 0x0034,
        inner_nh_offset: 0x0056,
        ..h1
    };
    assert_eq!(t.encode(HdrFormat::V1HashTunnel, &mut b), Ok(24));
    assert_eq!(
        &b[10..24],
        &[0x0b, 0x0a, 0x44, 0x33, 0x22, 0x11, 6, 5, 0, 0, 0x34, 0, 0x56, 0]
    );
    assert_eq!(VirtioNetHdr::decode(&b, HdrFormat::V1HashTunnel), Ok(t));
    // Tunnel fields do not fit a v1 header.
    assert!(matches!(
        t.encode(HdrFormat::V1, &mut b),
        Err(VirtioError::Unrepresentable(_))
    ));
    assert_eq!(
        VirtioNetHdr::decode(&b[..11], HdrFormat::V1),
        Err(VirtioError::Short { need: 12, have: 11 })
    );
    assert_eq!(HdrFormat::from_len(24), Some(HdrFormat::V1HashTunnel));
    assert_eq!(HdrFormat::from_len(20), None);
}

#[test]
fn needs_csum_is_partial_never_good_and_data_valid_is_good() {
    let (f, _, l) = packet(Envelope::Plain, Ip::V4, L4::Tcp, false, Csum::Partial);
    let h = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 16,
        ..VirtioNetHdr::default()
    };
    let m = h.to_meta(HdrFormat::V1, &f, &l).unwrap();
    assert_eq!(m.status(Slot::OuterL4), CsumStatus::Partial);
    assert_eq!((m.csum_start(), m.csum_offset()), (34, 16));
    // NEEDS_CSUM together with DATA_VALID: still Partial.
    let both = VirtioNetHdr {
        flags: F_NEEDS_CSUM | F_DATA_VALID,
        ..h
    };
    let m = both.to_meta(HdrFormat::V1, &f, &l).unwrap();
    assert_eq!(m.status(Slot::OuterL4), CsumStatus::Partial);
    let valid = VirtioNetHdr {
        flags: F_DATA_VALID,
        ..VirtioNetHdr::default()
    };
    let m = valid.to_meta(HdrFormat::V0, &f, &l).unwrap();
    assert_eq!(m.status(Slot::OuterL4), CsumStatus::Good);
    assert_eq!(m.status(Slot::OuterIp), CsumStatus::Good);
    let none = VirtioNetHdr::default()
        .to_meta(HdrFormat::V0, &f, &l)
        .unwrap();
    assert_eq!(none, OffloadMeta::from_layout(&l));
}

#[test]
fn gso_mapping_round_trips_through_from_meta() {
    let formats = [HdrFormat::V0, HdrFormat::V1, HdrFormat::V1HashTunnel];
    for encap in [
        Envelope::Plain,
        Envelope::Tag1,
        Envelope::Tag2,
        Envelope::Vxlan,
        Envelope::Geneve,
    ] {
        for ip in [Ip::V4, Ip::V6] {
            for l4 in [L4::Tcp, L4::Udp] {
                let (f, meta, l) = packet(encap, ip, l4, true, Csum::Partial);
                for fmt in formats {
                    let what = format!("{encap:?} {ip:?} {l4:?} {fmt:?}");
                    let h = match VirtioNetHdr::from_meta(&meta, &f, fmt) {
                        Ok(h) => h,
                        Err(e) => {
                            assert!(
                                encap.tunnelled() && fmt != HdrFormat::V1HashTunnel,
                                "{what}: {e}"
                            );
                            continue;
                        }
                    };
                    assert_eq!(h.flags & F_NEEDS_CSUM, F_NEEDS_CSUM, "{what}");
                    let want = match (l4, ip) {
                        (L4::Tcp, Ip::V4) => GSO_TCPV4,
                        (L4::Tcp, Ip::V6) => GSO_TCPV6,
                        (L4::Udp, _) => GSO_UDP_L4,
                    };
                    assert_eq!(h.gso_type & 0x0f, want, "{what}");
                    assert_eq!(h.gso_size, 1000);
                    if encap.tunnelled() {
                        let bit = if ip == Ip::V4 {
                            GSO_UDP_TUNNEL_IPV4
                        } else {
                            GSO_UDP_TUNNEL_IPV6
                        };
                        assert_eq!(h.tunnel_bits(), bit, "{what}");
                        assert_eq!(
                            h.flags & F_UDP_TUNNEL_CSUM != 0,
                            encap == Envelope::Vxlan,
                            "{what}"
                        );
                    }
                    let back = h
                        .to_meta(fmt, &f, &l)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(back.gso_type(), meta.gso_type(), "{what}");
                    assert_eq!(back.segment_size(), meta.segment_size(), "{what}");
                    assert_eq!(back.partial_slot(), meta.partial_slot(), "{what}");
                    assert_eq!(
                        (back.csum_start(), back.csum_offset()),
                        (meta.csum_start(), meta.csum_offset())
                    );
                    let again = VirtioNetHdr::from_meta(&back, &f, fmt).unwrap();
                    assert_eq!(again, h, "{what}");
                }
            }
        }
    }
    // GRE GSO cannot be expressed.
    let (f, meta, _) = packet(Envelope::Gre, Ip::V4, L4::Tcp, true, Csum::Partial);
    assert!(VirtioNetHdr::from_meta(&meta, &f, HdrFormat::V1HashTunnel).is_err());
    // Verified checksums become DATA_VALID; a bad one does not.
    let (f, meta, _) = packet(Envelope::Plain, Ip::V6, L4::Udp, false, Csum::Good);
    assert_eq!(
        VirtioNetHdr::from_meta(&meta, &f, HdrFormat::V1)
            .unwrap()
            .flags,
        F_DATA_VALID
    );
    let (f, meta, _) = packet(Envelope::Plain, Ip::V6, L4::Udp, false, Csum::Bad);
    assert_eq!(
        VirtioNetHdr::from_meta(&meta, &f, HdrFormat::V1)
            .unwrap()
            .flags,
        0
    );
}

/// What a refused header's error must look like.
type Check = fn(&VirtioError) -> bool;

#[test]
fn inconsistent_headers_are_refused() {
    let (f, _, l) = packet(Envelope::Plain, Ip::V4, L4::Tcp, true, Csum::Partial);
    let good = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 16,
        ..VirtioNetHdr::default()
    };
    let m = good.to_meta(HdrFormat::V1, &f, &l).unwrap();
    assert_eq!(m.gso_type(), GsoType::TcpV4);
    let cases: Vec<(VirtioNetHdr, HdrFormat, Check)> = vec![
        (
            VirtioNetHdr {
                csum_start: f.len() as u16,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::CsumBeyondFrame { .. }),
        ),
        (
            VirtioNetHdr {
                csum_start: 30,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::CsumStartNotL4(30)),
        ),
        (
            VirtioNetHdr {
                csum_offset: 6,
                ..good
            },
            HdrFormat::V1,
            |e| {
                matches!(
                    e,
                    VirtioError::CsumOffsetMismatch {
                        proto: 6,
                        csum_offset: 6
                    }
                )
            },
        ),
        (
            VirtioNetHdr {
                gso_size: 0,
                ..good
            },
            HdrFormat::V1,
            |e| *e == VirtioError::GsoSizeZero,
        ),
        (
            VirtioNetHdr {
                hdr_len: 53,
                ..good
            },
            HdrFormat::V1,
            |e| {
                matches!(
                    e,
                    VirtioError::HdrLen {
                        hdr_len: 53,
                        headers: 54,
                        ..
                    }
                )
            },
        ),
        (
            VirtioNetHdr {
                hdr_len: u16::MAX,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::HdrLen { .. }),
        ),
        (
            VirtioNetHdr {
                gso_type: GSO_TCPV6,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::GsoMismatch(_)),
        ),
        (
            VirtioNetHdr {
                gso_type: GSO_UDP_L4,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::GsoMismatch(_)),
        ),
        (
            VirtioNetHdr {
                gso_type: GSO_UDP_L4 | GSO_ECN,
                ..good
            },
            HdrFormat::V1,
            |e| *e == VirtioError::EcnWithoutTcp,
        ),
        (
            VirtioNetHdr {
                gso_type: GSO_NONE | GSO_ECN,
                gso_size: 0,
                ..good
            },
            HdrFormat::V1,
            |e| *e == VirtioError::EcnWithoutTcp,
        ),
        (
            VirtioNetHdr {
                gso_type: 2,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::UnknownGsoType(2)),
        ),
        (
            VirtioNetHdr {
                flags: F_NEEDS_CSUM | 0x10,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::UnknownFlags(0x10)),
        ),
        (
            VirtioNetHdr {
                flags: F_NEEDS_CSUM | F_RSC_INFO,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::UnknownFlags(_)),
        ),
        (
            VirtioNetHdr {
                gso_type: GSO_TCPV4 | GSO_UDP_TUNNEL_IPV4,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::TunnelBits(_)),
        ),
        (
            VirtioNetHdr {
                flags: F_NEEDS_CSUM | F_UDP_TUNNEL_CSUM,
                ..good
            },
            HdrFormat::V1,
            |e| matches!(e, VirtioError::TunnelBits(_)),
        ),
        (
            VirtioNetHdr {
                gso_type: GSO_TCPV4 | GSO_UDP_TUNNEL_IPV4,
                ..good
            },
            HdrFormat::V1HashTunnel,
            |e| matches!(e, VirtioError::GsoMismatch(_)),
        ),
        (
            VirtioNetHdr {
                outer_th_offset: 34,
                ..good
            },
            HdrFormat::V1HashTunnel,
            |e| matches!(e, VirtioError::TunnelBits(_)),
        ),
    ];
    let before = vnet_hdr_invalid_here();
    for (i, (h, fmt, ok)) in cases.iter().enumerate() {
        let e = h
            .to_meta(*fmt, &f, &l)
            .expect_err(&format!("case {i}: {h:?}"));
        assert!(ok(&e), "case {i}: unexpected {e:?}");
        assert!(!e.to_string().is_empty());
        // Through the port entry point, every refusal is counted.
        let mut raw = [0u8; 24];
        h.encode(*fmt, &mut raw).unwrap();
        let r = sluice_offload::tx::decode_vnet_hdr(&raw, *fmt, &f, &l);
        assert_eq!(r.map(|_| ()), Err(e));
    }
    assert_eq!(vnet_hdr_invalid_here() - before, cases.len() as u64);
    let mut raw = [0u8; 12];
    good.encode(HdrFormat::V1, &mut raw).unwrap();
    assert!(sluice_offload::tx::decode_vnet_hdr(&raw, HdrFormat::V1, &f, &l).is_ok());
    assert_eq!(vnet_hdr_invalid_here() - before, cases.len() as u64);

    // The tunnel header: offsets must match, only one tunnel bit, NEEDS_CSUM at the inner L4.
    let (f, meta, l) = packet(Envelope::Vxlan, Ip::V4, L4::Tcp, true, Csum::Partial);
    let t = VirtioNetHdr::from_meta(&meta, &f, HdrFormat::V1HashTunnel).unwrap();
    assert!(t.to_meta(HdrFormat::V1HashTunnel, &f, &l).is_ok());
    let bad: Vec<(VirtioNetHdr, Check)> = vec![
        (
            VirtioNetHdr {
                inner_nh_offset: t.inner_nh_offset + 2,
                ..t
            },
            |e| matches!(e, VirtioError::TunnelOffsets { .. }),
        ),
        (
            VirtioNetHdr {
                gso_type: t.gso_type | GSO_UDP_TUNNEL_IPV6,
                ..t
            },
            |e| matches!(e, VirtioError::TunnelBits(_)),
        ),
        (
            VirtioNetHdr {
                gso_type: (t.gso_type & !GSO_UDP_TUNNEL_IPV4) | GSO_UDP_TUNNEL_IPV6,
                ..t
            },
            |e| matches!(e, VirtioError::GsoMismatch(_)),
        ),
        (
            VirtioNetHdr {
                flags: F_UDP_TUNNEL_CSUM,
                ..t
            },
            |e| matches!(e, VirtioError::GsoMismatch(_)),
        ),
        (
            VirtioNetHdr {
                flags: F_NEEDS_CSUM,
                ..t
            },
            |e| matches!(e, VirtioError::TunnelBits(_)),
        ),
        (
            VirtioNetHdr {
                gso_type: GSO_UDP_TUNNEL_IPV4,
                gso_size: 0,
                ..t
            },
            |e| matches!(e, VirtioError::TunnelBits(_)),
        ),
    ];
    for (i, (h, ok)) in bad.iter().enumerate() {
        let e = h
            .to_meta(HdrFormat::V1HashTunnel, &f, &l)
            .expect_err(&format!("tunnel case {i}"));
        assert!(ok(&e), "tunnel case {i}: unexpected {e:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn never_panics(hdr in proptest::collection::vec(any::<u8>(), 0..30), frame in proptest::collection::vec(any::<u8>(), 0..200), pick in 0usize..3) {
        let fmt = [HdrFormat::V0, HdrFormat::V1, HdrFormat::V1HashTunnel][pick];
        if let Ok(h) = VirtioNetHdr::decode(&hdr, fmt) {
            let mut b = [0u8; 24];
            prop_assert_eq!(h.encode(fmt, &mut b), Ok(fmt.size()));
            prop_assert_eq!(&b[..fmt.size()], &hdr[..fmt.size()]);
            let (l, _) = sluice_wire::parse_partial(&frame, &sluice_wire::ParseConfig::DEFAULT);
            if let Ok(m) = h.to_meta(fmt, &frame, &l) {
                let _ = VirtioNetHdr::from_meta(&m, &frame, fmt);
            }
        }
    }

    #[test]
    fn valid_headers_from_real_frames_never_panic(flags in any::<u8>(), gso in any::<u8>(), hdr_len in 0u16..200, gso_size in 0u16..2000, start in 0u16..120, off in 0u16..20, e in 0usize..6) {
        let (f, _, l) = packet(Envelope::ALL[e], Ip::V4, L4::Tcp, true, Csum::Partial);
        let h = VirtioNetHdr { flags, gso_type: gso, hdr_len, gso_size, csum_start: start, csum_offset: off, ..VirtioNetHdr::default() };
        if let Ok(m) = h.to_meta(HdrFormat::V1HashTunnel, &f, &l) {
            // Whatever was accepted is consistent: a partial location is inside the frame.
            if m.partial_slot().is_some() {
                prop_assert!(usize::from(m.csum_start()) + usize::from(m.csum_offset()) + 2 <= f.len());
                prop_assert!(h.flags & F_NEEDS_CSUM != 0);
            }
            prop_assert!(m.status(Slot::OuterL4) != CsumStatus::Good || h.flags & F_DATA_VALID != 0);
        }
    }
}

/// What this test's thread added to the `vnet_hdr_invalid` counter (other tests of this binary
/// move the process-wide total at the same time).
fn vnet_hdr_invalid_here() -> u64 {
    sluice_offload::tx::VNET_HDR_INVALID
        .this_thread()
        .expect("a per-thread counter")
}
