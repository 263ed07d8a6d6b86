//! What this kernel's GSO accepts, refuses and produces, checked through the oracle (root only).
//! These are the facts docs/kernel-oracle.md lists; parity tests rely on them.

use sluice_testkit::frames::*;
use sluice_testkit::oracle::{GsoOracle, GsoOracleConfig, OracleError};
use sluice_testkit::root;

/// What a case must give.
enum Want {
    /// `write()` fails with EINVAL.
    Refused,
    /// Accepted; this many frames come out, with all checksums right (or not).
    Segs(usize, bool),
}

fn want((name, got): (String, Outcome), want: Want) {
    match (&got, want) {
        (Outcome::Refused(e), Want::Refused) => assert_eq!(*e, libc::EINVAL, "{name}"),
        (Outcome::Segments(lens, good), Want::Segs(n, g)) => {
            assert_eq!((lens.len(), *good), (n, g), "{name}: {got:?}")
        }
        _ => panic!("{name}: unexpected {got:?}"),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Refused(i32),
    /// Segment lengths and whether every segment's checksums verify.
    Segments(Vec<usize>, bool),
}

fn run(oracle: &GsoOracle, hdr: &[u8], frame: &[u8]) -> Outcome {
    match oracle.segment(hdr, frame) {
        Ok(segs) => {
            let good = if segs.len() > 1 && is_ipv4_fragment(&segs[0]) {
                ufo_checksums_good(&segs)
            } else {
                segs.iter().all(|s| checksums_good(s))
            };
            Outcome::Segments(segs.iter().map(|s| s.len()).collect(), good)
        }
        Err(OracleError::Refused(e)) => Outcome::Refused(e),
        Err(e) => panic!("oracle failed: {e}"),
    }
}

fn is_ipv4_fragment(f: &[u8]) -> bool {
    f[12..14] == [8, 0] && (f[20] & 0x20 != 0 || (f[20] & 0x1f) != 0 || f[21] != 0)
}

/// IPv4 fragments: every header checksum verifies, and the reassembled UDP datagram's checksum
/// verifies.
fn ufo_checksums_good(frags: &[Vec<u8>]) -> bool {
    let mut l4 = Vec::new();
    for f in frags {
        if sluice_checksum::checksum(&f[14..34]) != 0 {
            return false;
        }
        let off = usize::from(u16::from_be_bytes([f[20], f[21]]) & 0x1fff) * 8;
        let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let data = &f[34..14 + total];
        if l4.len() < off + data.len() {
            l4.resize(off + data.len(), 0);
        }
        l4[off..off + data.len()].copy_from_slice(data);
    }
    let first = &frags[0];
    let src: [u8; 4] = first[26..30].try_into().unwrap();
    let dst: [u8; 4] = first[30..34].try_into().unwrap();
    let pseudo = sluice_checksum::pseudo::ipv4(src, dst, 17, l4.len() as u16);
    sluice_checksum::sum_from(pseudo, &l4) == 0xffff
}

fn tcp4(len: usize) -> (Vec<u8>, VnetHdr) {
    let mut f = ether(
        0x0800,
        &ipv4_packet(6, 1, &tcp_segment(1, 0x18, &payload(len, 1))),
    );
    let (start, off) = fill_l4_checksum(&mut f, 14, true);
    let h = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1000,
        csum_start: start,
        csum_offset: off,
    };
    (f, h)
}

fn tcp6(len: usize) -> (Vec<u8>, VnetHdr) {
    let mut f = ether(
        0x86dd,
        &ipv6_packet(6, &tcp_segment(1, 0x18, &payload(len, 2))),
    );
    let (start, off) = fill_l4_checksum(&mut f, 14, true);
    let h = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV6,
        hdr_len: 74,
        gso_size: 1000,
        csum_start: start,
        csum_offset: off,
    };
    (f, h)
}

fn udp4(len: usize, gso_type: u8) -> (Vec<u8>, VnetHdr) {
    let mut f = ether(
        0x0800,
        &ipv4_packet(17, 1, &udp_datagram(1000, 2000, &payload(len, 3))),
    );
    let (start, off) = fill_l4_checksum(&mut f, 14, true);
    let h = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type,
        hdr_len: 42,
        gso_size: 1000,
        csum_start: start,
        csum_offset: off,
    };
    (f, h)
}

#[test]
fn gso_kernel_facts() {
    root();
    let o = GsoOracle::new(&GsoOracleConfig::default()).unwrap();
    let mut report = Vec::new();
    let mut check = |name: &str, hdr: VnetHdr, frame: &[u8]| {
        let out = run(&o, &hdr.encode(12), frame);
        report.push(format!("{name}: {out:?}"));
        (name.to_owned(), out)
    };

    let (f, h) = tcp4(2500);
    want(check("tcp4", h, &f), Want::Segs(3, true));
    want(
        check(
            "tcp4 csum_offset 6",
            VnetHdr {
                csum_offset: 6,
                ..h
            },
            &f,
        ),
        Want::Refused,
    );
    want(
        check(
            "tcp4 typed tcp6",
            VnetHdr {
                gso_type: GSO_TCPV6,
                ..h
            },
            &f,
        ),
        Want::Refused,
    );
    want(
        check("tcp4 gso_size 0", VnetHdr { gso_size: 0, ..h }, &f),
        Want::Refused,
    );
    want(
        check(
            "tcp4 ecn bit",
            VnetHdr {
                gso_type: GSO_TCPV4 | 0x80,
                ..h
            },
            &f,
        ),
        Want::Segs(3, true),
    );
    want(
        check("tcp4 no NEEDS_CSUM", VnetHdr { flags: 0, ..h }, &f),
        Want::Segs(3, true),
    );
    want(
        check(
            "tcp4 gso larger than payload",
            VnetHdr {
                gso_size: 3000,
                ..h
            },
            &f,
        ),
        Want::Segs(1, true),
    );
    let mut full = f.clone();
    fill_l4_checksum(&mut full, 14, false);
    want(
        check("tcp4 full checksum in field", h, &full),
        Want::Segs(3, false),
    );
    want(
        check(
            "tcp4 tunnel bit, 12-byte header",
            VnetHdr {
                gso_type: GSO_TCPV4 | 0x20,
                ..h
            },
            &f,
        ),
        Want::Refused,
    );

    let (f, h) = tcp6(2500);
    want(check("tcp6", h, &f), Want::Segs(3, true));
    want(
        check(
            "tcp6 typed tcp4",
            VnetHdr {
                gso_type: GSO_TCPV4,
                ..h
            },
            &f,
        ),
        Want::Segs(0, true),
    );

    let (f, h) = udp4(2500, GSO_UDP_L4);
    want(check("uso4", h, &f), Want::Segs(3, true));
    want(
        check(
            "uso4 ecn bit",
            VnetHdr {
                gso_type: GSO_UDP_L4 | 0x80,
                ..h
            },
            &f,
        ),
        Want::Refused,
    );
    let (f129, h129) = udp4(129 * 10, GSO_UDP_L4);
    want(
        check(
            "uso4 129 segments",
            VnetHdr {
                gso_size: 10,
                ..h129
            },
            &f129,
        ),
        Want::Refused,
    );
    let (f128, h128) = udp4(128 * 10, GSO_UDP_L4);
    want(
        check(
            "uso4 128 segments",
            VnetHdr {
                gso_size: 10,
                ..h128
            },
            &f128,
        ),
        Want::Segs(128, true),
    );
    let (f, h) = udp4(2500, GSO_UDP);
    want(check("ufo4", h, &f), Want::Segs(3, true));
    // Unlike USO, UFO takes the ECN bit and fragments as without it.
    want(
        check(
            "ufo4 ecn bit",
            VnetHdr {
                gso_type: GSO_UDP | 0x80,
                ..h
            },
            &f,
        ),
        Want::Segs(3, true),
    );

    // IPv6 UFO: fragments with a Fragment header (random identification).
    let mut f6 = ether(
        0x86dd,
        &ipv6_packet(17, &udp_datagram(1000, 2000, &payload(2500, 5))),
    );
    let (start, off) = fill_l4_checksum(&mut f6, 14, true);
    let h6 = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_UDP,
        hdr_len: 62,
        gso_size: 1000,
        csum_start: start,
        csum_offset: off,
    };
    let frags = o.segment(&h6.encode(12), &f6).unwrap();
    println!(
        "ufo6: {:?}",
        frags.iter().map(|f| (f.len(), f[20])).collect::<Vec<_>>()
    );
    assert!(frags.len() >= 3, "ufo6 fragments: {}", frags.len());
    assert!(
        frags.iter().all(|f| f[20] == 44),
        "every fragment has a Fragment header"
    );
    let ids: Vec<&[u8]> = frags.iter().map(|f| &f[58..62]).collect();
    assert!(
        ids.windows(2).all(|w| w[0] == w[1]),
        "one identification for all"
    );
    let mut udp = Vec::new();
    for f in &frags {
        udp.extend_from_slice(&f[62..]);
    }
    let pseudo = sluice_checksum::pseudo::ipv6(&IP6_A, &IP6_B, 17, udp.len() as u32);
    assert_eq!(udp.len(), 2508);
    assert_eq!(
        sluice_checksum::sum_from(pseudo, &udp),
        0xffff,
        "ufo6 UDP checksum"
    );

    let (mut f, h) = tcp4(500);
    want(
        check(
            "no gso, NEEDS_CSUM",
            VnetHdr {
                gso_type: 0,
                gso_size: 0,
                ..h
            },
            &f,
        ),
        Want::Segs(1, true),
    );
    f[50] ^= 1;
    want(
        check("no gso, no flags, bad csum", VnetHdr::default(), &f),
        Want::Segs(1, false),
    );

    for line in &report {
        println!("{line}");
    }
}

/// Ethernet/IPv4/UDP(4789)/VXLAN/Ethernet/IPv4/TCP around `len` bytes; the inner TCP checksum
/// holds the pseudo-header sum, the outer UDP checksum is 0.
fn vxlan_tcp4(len: usize) -> Vec<u8> {
    let mut inner = ether(
        0x0800,
        &ipv4_packet(6, 7, &tcp_segment(1, 0x18, &payload(len, 4))),
    );
    fill_l4_checksum(&mut inner, 14, true);
    let mut vx = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
    vx.extend_from_slice(&inner);
    ether(0x0800, &ipv4_packet(17, 9, &udp_datagram(49152, 4789, &vx)))
}

fn tunnel_hdr(gso_type: u8, flags: u8, gso_size: u16) -> Vec<u8> {
    let mut h = VnetHdr {
        flags,
        gso_type,
        hdr_len: 14 + 20 + 8 + 8 + 14 + 20 + 20,
        gso_size,
        csum_start: 14 + 20 + 8 + 8 + 14 + 20,
        csum_offset: 16,
    }
    .encode(24);
    h[20..22].copy_from_slice(&34u16.to_le_bytes()); // outer_th_offset: outer UDP
    h[22..24].copy_from_slice(&64u16.to_le_bytes()); // inner_nh_offset: inner IPv4
    h
}

#[test]
fn gso_kernel_facts_udp_tunnel() {
    root();
    let o = GsoOracle::new(&GsoOracleConfig {
        vnet_hdr_len: 24,
        ..GsoOracleConfig::default()
    })
    .unwrap();
    let f = vxlan_tcp4(2500);
    // The outer UDP checksum seeded with its pseudo-header sum (as for the inner one).
    let mut seeded = f.clone();
    let outer_len = (seeded.len() - 34) as u16;
    let seed = sluice_checksum::pseudo::ipv4(IP_A, IP_B, 17, outer_len);
    seeded[40..42].copy_from_slice(&seed.to_be_bytes());
    let mut report = Vec::new();
    let mut check = |name: &str, hdr: Vec<u8>| {
        let frame = if name.contains("seeded") { &seeded } else { &f };
        let out = run(&o, &hdr, frame);
        report.push(format!("{name}: {out:?}"));
        (name.to_owned(), out)
    };
    want(
        check(
            "vxlan tcp4",
            tunnel_hdr(GSO_TCPV4 | 0x20, F_NEEDS_CSUM, 1000),
        ),
        Want::Segs(3, true),
    );
    want(
        check(
            "vxlan tcp4 outer csum",
            tunnel_hdr(GSO_TCPV4 | 0x20, F_NEEDS_CSUM | 0x08, 1000),
        ),
        Want::Segs(3, false),
    );
    want(
        check(
            "vxlan tcp4 outer csum, seeded",
            tunnel_hdr(GSO_TCPV4 | 0x20, F_NEEDS_CSUM | 0x08, 1000),
        ),
        Want::Segs(3, true),
    );
    want(
        check(
            "vxlan tcp4 no tunnel bits",
            tunnel_hdr(GSO_TCPV4, F_NEEDS_CSUM, 1000),
        ),
        Want::Segs(0, true),
    );
    want(
        check("vxlan ufo", tunnel_hdr(GSO_UDP | 0x20, F_NEEDS_CSUM, 1000)),
        Want::Refused,
    );
    want(
        check(
            "vxlan outer ipv6 bit",
            tunnel_hdr(GSO_TCPV4 | 0x40, F_NEEDS_CSUM, 1000),
        ),
        Want::Refused,
    );
    for line in &report {
        println!("{line}");
    }
}
