//! Kernel parity: every case of issue 3 is handed to the running kernel's software GSO (TAP with
//! `IFF_VNET_HDR` → tc mirred → veth with every offload off, captured on the peer; see
//! `sluice_testkit::oracle::GsoOracle`) and to Sluice; the segments must be equal byte for byte.
//!
//! Needs root (CI runs as root); without it the test fails with a clear message, it never skips.
//! The input carries `VIRTIO_NET_HDR_F_NEEDS_CSUM` and the pseudo-header sum in the L4 checksum
//! field (the kernel adjusts that seed per segment instead of recomputing); Sluice is given the
//! same frame and computes every checksum from scratch. For IPv6 UFO the kernel picks a random
//! fragment identification: Sluice is given the kernel's value so the bytes can be compared.

#[path = "gso_build.rs"]
mod build;

use build::{build, pattern, Ip, Seed, Spec, Tun, L4};
use sluice_offload::gso::{segment, GsoOutput, GsoParams, OuterCsum};
use sluice_packet::GsoType;
use sluice_testkit::oracle::{GsoOracle, GsoOracleConfig, OracleError};
use sluice_wire::parse;

const F_NEEDS_CSUM: u8 = 1;
const F_UDP_TUNNEL_CSUM: u8 = 0x08;
const T_TCPV4: u8 = 1;
const T_UDP: u8 = 3;
const T_TCPV6: u8 = 4;
const T_UDP_L4: u8 = 5;
const T_ECN: u8 = 0x80;
const T_TUNNEL_V4: u8 = 0x20;
const T_TUNNEL_V6: u8 = 0x40;

struct Case {
    name: String,
    spec: Spec,
    gso_type: GsoType,
    gso_size: u16,
    ecn: bool,
}

fn vnet_type(t: GsoType) -> u8 {
    match t {
        GsoType::TcpV4 => T_TCPV4,
        GsoType::TcpV6 => T_TCPV6,
        GsoType::UdpL4 => T_UDP_L4,
        GsoType::Udp => T_UDP,
        GsoType::None => 0,
    }
}

/// The `virtio_net_hdr` (12 or 24 bytes) for a case, and the input frame with the seeds.
fn input(case: &Case, hdr_len: usize) -> (Vec<u8>, Vec<u8>) {
    let (mut frame, _) = build(&case.spec, Seed::Pseudo);
    let layout = parse(&frame).expect("case parses");
    let inner = *layout.innermost();
    let l4 = inner.l4.unwrap();
    let csum_off: u16 = if matches!(case.spec.l4, L4::Tcp { .. }) {
        16
    } else {
        6
    };
    let mut h = vec![0u8; hdr_len];
    h[0] = F_NEEDS_CSUM;
    h[1] = vnet_type(case.gso_type) | if case.ecn { T_ECN } else { 0 };
    h[2..4].copy_from_slice(&(inner.payload.unwrap() as u16).to_le_bytes());
    h[4..6].copy_from_slice(&case.gso_size.to_le_bytes());
    h[6..8].copy_from_slice(&(l4 as u16).to_le_bytes());
    h[8..10].copy_from_slice(&csum_off.to_le_bytes());
    if let Some((tun, ..)) = &case.spec.tunnel {
        let csum = matches!(
            tun,
            Tun::Vxlan { csum: true } | Tun::Geneve { csum: true, .. }
        );
        h[1] |= if case.spec.ip.v6 {
            T_TUNNEL_V6
        } else {
            T_TUNNEL_V4
        };
        if csum {
            h[0] |= F_UDP_TUNNEL_CSUM;
        }
        let outer_l4 = layout.outer.l4.unwrap();
        h[20..22].copy_from_slice(&(outer_l4 as u16).to_le_bytes());
        h[22..24].copy_from_slice(&(inner.l3.unwrap() as u16).to_le_bytes());
        // Outer UDP checksum: the outer pseudo-header sum when checksummed, else zero.
        let v = if csum {
            let o = layout.outer.l3.unwrap();
            build::pseudo(
                &frame,
                o,
                case.spec.ip.v6,
                17,
                layout.outer.l3_end.unwrap() - outer_l4,
            )
        } else {
            0
        };
        frame[outer_l4 + 6..outer_l4 + 8].copy_from_slice(&v.to_be_bytes());
    }
    (h, frame)
}

fn sluice(case: &Case, frame: &[u8], frag_id: Option<u32>) -> Vec<Vec<u8>> {
    let layout = parse(frame).unwrap();
    let mut p = GsoParams::new(case.gso_type, case.gso_size);
    p.ecn = case.ecn;
    p.ipv6_frag_id = frag_id;
    if let Some((tun, ..)) = &case.spec.tunnel {
        let csum = matches!(
            tun,
            Tun::Vxlan { csum: true } | Tun::Geneve { csum: true, .. }
        );
        p.outer_csum = if csum {
            OuterCsum::Full
        } else {
            OuterCsum::Zero
        };
    }
    let mut out = GsoOutput::new();
    segment(frame, &layout, &p, &mut out)
        .unwrap_or_else(|e| panic!("{}: sluice refused: {e}", case.name));
    out.frames().map(<[u8]>::to_vec).collect()
}

fn tcp(flags: u8, opt_len: usize) -> L4 {
    L4::Tcp {
        flags,
        opt_len,
        seq: 0xfffff000,
    }
}

fn plain(name: &str, vlans: Vec<u16>, ip: Ip, l4: L4, t: GsoType, size: u16, len: usize) -> Case {
    Case {
        name: name.into(),
        spec: Spec {
            vlans,
            ip,
            tunnel: None,
            l4,
            payload: pattern(len, name.len() as u8),
        },
        gso_type: t,
        gso_size: size,
        ecn: false,
    }
}

fn plain_cases() -> Vec<Case> {
    let ack = 0x10;
    let v4opt = Ip { ext: 8, ..Ip::V4 };
    let v6ext = Ip { ext: 2, ..Ip::V6 };
    let mut cwr = plain(
        "tcpv4 cwr/ece",
        vec![],
        Ip::V4,
        tcp(0x80 | 0x40 | ack, 0),
        GsoType::TcpV4,
        1000,
        3500,
    );
    cwr.ecn = true;
    vec![
        plain(
            "tcpv4",
            vec![],
            Ip::V4,
            tcp(ack, 0),
            GsoType::TcpV4,
            1448,
            5000,
        ),
        plain(
            "tcpv4 options psh/fin",
            vec![],
            v4opt,
            tcp(ack | 0x08 | 0x01, 12),
            GsoType::TcpV4,
            1000,
            4321,
        ),
        cwr,
        plain(
            "tcpv6",
            vec![],
            Ip::V6,
            tcp(ack, 0),
            GsoType::TcpV6,
            1440,
            5000,
        ),
        plain(
            "tcpv6 ext headers",
            vec![],
            v6ext,
            tcp(ack | 0x08, 12),
            GsoType::TcpV6,
            1200,
            4000,
        ),
        plain(
            "vlan tcpv4",
            vec![0x8100],
            Ip::V4,
            tcp(ack, 0),
            GsoType::TcpV4,
            1448,
            4000,
        ),
        plain(
            "qinq tcpv4",
            vec![0x88a8, 0x8100],
            Ip::V4,
            tcp(ack, 0),
            GsoType::TcpV4,
            1448,
            4000,
        ),
        plain(
            "qinq tcpv6",
            vec![0x88a8, 0x8100],
            Ip::V6,
            tcp(ack, 0),
            GsoType::TcpV6,
            1000,
            2500,
        ),
        plain(
            "uso v4",
            vec![],
            Ip::V4,
            L4::Udp,
            GsoType::UdpL4,
            1400,
            5000,
        ),
        plain(
            "uso v6",
            vec![],
            Ip::V6,
            L4::Udp,
            GsoType::UdpL4,
            1400,
            5000,
        ),
        plain("ufo v4", vec![], Ip::V4, L4::Udp, GsoType::Udp, 1480, 5000),
        plain("ufo v6", vec![], Ip::V6, L4::Udp, GsoType::Udp, 1448, 5000),
        plain(
            "vlan ufo v4",
            vec![0x8100],
            Ip::V4,
            L4::Udp,
            GsoType::Udp,
            1000,
            3000,
        ),
        plain(
            "tcpv4 urg/rst",
            vec![],
            Ip::V4,
            tcp(ack | 0x20 | 0x04, 4),
            GsoType::TcpV4,
            1000,
            2500,
        ),
        plain(
            "tcpv4 one segment",
            vec![],
            Ip::V4,
            tcp(ack | 0x09, 0),
            GsoType::TcpV4,
            1448,
            1000,
        ),
        plain(
            "ufo v6 one fragment",
            vec![],
            Ip::V6,
            L4::Udp,
            GsoType::Udp,
            1448,
            1000,
        ),
        plain(
            "uso v4 one segment",
            vec![],
            Ip::V4,
            L4::Udp,
            GsoType::UdpL4,
            1448,
            1000,
        ),
    ]
}

fn tunnel_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (tname, mk) in [
        ("vxlan", (|c| Tun::Vxlan { csum: c }) as fn(bool) -> Tun),
        ("geneve", |c| Tun::Geneve {
            csum: c,
            opt_words: 2,
        }),
    ] {
        for ov6 in [false, true] {
            for csum in [false, true] {
                for uso in [false, true] {
                    let name = format!(
                        "{tname} over {} inner {} outer csum {csum}",
                        if ov6 { "ipv6" } else { "ipv4" },
                        if uso { "uso" } else { "tcpv4" }
                    );
                    let seed = name.len() as u8;
                    v.push(Case {
                        name,
                        spec: Spec {
                            vlans: vec![],
                            ip: if ov6 { Ip::V6 } else { Ip::V4 },
                            tunnel: Some((
                                mk(csum),
                                vec![],
                                Ip {
                                    id: 0x4321,
                                    ..Ip::V4
                                },
                            )),
                            l4: if uso { L4::Udp } else { tcp(0x18, 0) },
                            payload: pattern(4500, seed),
                        },
                        gso_type: if uso { GsoType::UdpL4 } else { GsoType::TcpV4 },
                        gso_size: 1400,
                        ecn: false,
                    });
                }
            }
        }
    }
    // VLAN tags outside and inside the tunnel, inner TCPv6 and IPv4 options.
    for (name, vlans, ip, ivlans, iip, ty) in [
        (
            "vxlan qinq outside, vlan inside, inner tcpv6",
            vec![0x88a8, 0x8100],
            Ip::V4,
            vec![0x8100],
            Ip::V6,
            GsoType::TcpV6,
        ),
        (
            "geneve over ipv6 vlan, inner qinq tcpv4 with options",
            vec![0x8100],
            Ip::V6,
            vec![0x88a8, 0x8100],
            Ip { ext: 4, ..Ip::V4 },
            GsoType::TcpV4,
        ),
    ] {
        let tun = if name.starts_with("vxlan") {
            Tun::Vxlan { csum: true }
        } else {
            Tun::Geneve {
                csum: true,
                opt_words: 1,
            }
        };
        v.push(Case {
            name: name.into(),
            spec: Spec {
                vlans,
                ip,
                tunnel: Some((tun, ivlans, iip)),
                l4: tcp(0x19, 12),
                payload: pattern(5000, 3),
            },
            gso_type: ty,
            gso_size: 1300,
            ecn: false,
        });
    }
    v
}

fn oracle(hdr_len: usize) -> GsoOracle {
    if !nix_is_root() {
        panic!("gso_kernel needs root (network namespaces, TAP): run as root, as CI does");
    }
    GsoOracle::new(&GsoOracleConfig {
        vnet_hdr_len: hdr_len,
        offloads: 0x1ff,
    })
    .unwrap_or_else(|e| panic!("cannot build the kernel GSO oracle: {e}"))
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn hex_diff(a: &[u8], b: &[u8]) -> String {
    let first = a.iter().zip(b).position(|(x, y)| x != y);
    format!(
        "len {} vs {}, first difference at {:?}",
        a.len(),
        b.len(),
        first.or((a.len() != b.len()).then_some(a.len().min(b.len())))
    )
}

/// Compares every case; returns the failures.
fn compare(oracle: &GsoOracle, cases: &[Case], hdr_len: usize) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases {
        let (h, frame) = input(case, hdr_len);
        let kernel = match oracle.segment(&h, &frame) {
            Ok(k) => k,
            Err(OracleError::Refused(errno)) => {
                failures.push(format!(
                    "{}: the kernel refused it (errno {errno})",
                    case.name
                ));
                continue;
            }
            Err(e) => panic!("{}: oracle failed: {e}", case.name),
        };
        // IPv6 UFO: the kernel's random fragment identification.
        let frag_id = (case.gso_type == GsoType::Udp && case.spec.ip.v6)
            .then(|| {
                let f = kernel.first()?;
                let at = 14 + 4 * case.spec.vlans.len() + 40 + 4;
                Some(u32::from_be_bytes(f.get(at..at + 4)?.try_into().ok()?))
            })
            .flatten();
        let ours = sluice(case, &frame, frag_id);
        // Every case is bigger than one segment: a single frame back means nothing was
        // segmented (and nothing compared).
        if kernel.len() < 2 && case.spec.payload.len() > usize::from(case.gso_size) {
            failures.push(format!(
                "{}: the kernel emitted {} frames",
                case.name,
                kernel.len()
            ));
            continue;
        }
        eprintln!(
            "{}: {} segments, equal: {}",
            case.name,
            kernel.len(),
            kernel == ours
        );
        if kernel.len() != ours.len() {
            failures.push(format!(
                "{}: kernel {} segments, sluice {}",
                case.name,
                kernel.len(),
                ours.len()
            ));
            continue;
        }
        for (i, (k, s)) in kernel.iter().zip(&ours).enumerate() {
            if k != s {
                failures.push(format!("{} segment {i}: {}", case.name, hex_diff(k, s)));
            }
        }
    }
    failures
}

#[test]
fn kernel_parity() {
    let o12 = oracle(12);
    let mut failures = compare(&o12, &plain_cases(), 12);
    drop(o12);
    let o24 = oracle(24);
    failures.extend(compare(&o24, &tunnel_cases(), 24));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Issue 20 item 6: the GSO ECN bit on USO (IPv4 and IPv6) is refused by the kernel (`tun`
/// answers `EINVAL`) and by Sluice at both entries: decoding the `virtio_net_hdr`
/// (`VirtioError::EcnWithoutTcp`) and `gso::segment` (`GsoError::EcnWithoutTcp`). With UFO and
/// with TCP the kernel accepts the bit, and so does Sluice: the segments are compared byte for
/// byte.
#[test]
fn ecn_bit_on_udp_gso_treated_as_the_kernel_treats_it() {
    use sluice_offload::gso::GsoError;
    use sluice_packet::virtio::{HdrFormat, VirtioError, VirtioNetHdr};
    // Linux's errno for an invalid argument.
    const EINVAL: i32 = 22;

    let o12 = oracle(12);
    for (name, ip) in [("uso v4 ecn", Ip::V4), ("uso v6 ecn", Ip::V6)] {
        let mut case = plain(name, vec![], ip, L4::Udp, GsoType::UdpL4, 1400, 5000);
        case.ecn = true;
        let (h, frame) = input(&case, 12);
        match o12.segment(&h, &frame) {
            Err(OracleError::Refused(errno)) => assert_eq!(errno, EINVAL, "{name}"),
            Ok(segs) => panic!("{name}: the kernel accepted it ({} frames)", segs.len()),
            Err(e) => panic!("{name}: oracle failed: {e}"),
        }
        let layout = parse(&frame).unwrap();
        let hdr = VirtioNetHdr::decode(&h, HdrFormat::V1).expect("the header decodes");
        assert_eq!(
            hdr.to_meta(HdrFormat::V1, &frame, &layout).err(),
            Some(VirtioError::EcnWithoutTcp),
            "{name}: virtio_net_hdr"
        );
        let mut p = GsoParams::new(GsoType::UdpL4, 1400);
        p.ecn = true;
        let mut out = GsoOutput::new();
        assert_eq!(
            segment(&frame, &layout, &p, &mut out),
            Err(GsoError::EcnWithoutTcp),
            "{name}: gso::segment"
        );
        assert!(out.is_empty(), "{name}: nothing emitted on refusal");
    }
    // Accepted by both, byte for byte: UFO (the kernel ignores the bit) and TCP with CWR.
    let mut accepted = vec![
        plain(
            "ufo v4 ecn",
            vec![],
            Ip::V4,
            L4::Udp,
            GsoType::Udp,
            1480,
            5000,
        ),
        plain(
            "ufo v6 ecn",
            vec![],
            Ip::V6,
            L4::Udp,
            GsoType::Udp,
            1448,
            5000,
        ),
        plain(
            "tcpv4 ecn",
            vec![],
            Ip::V4,
            tcp(0x80 | 0x10, 0),
            GsoType::TcpV4,
            1000,
            3500,
        ),
    ];
    for case in &mut accepted {
        case.ecn = true;
        let (h, frame) = input(case, 12);
        let layout = parse(&frame).unwrap();
        let hdr = VirtioNetHdr::decode(&h, HdrFormat::V1).expect("the header decodes");
        let meta = hdr
            .to_meta(HdrFormat::V1, &frame, &layout)
            .unwrap_or_else(|e| panic!("{}: virtio_net_hdr refused: {e}", case.name));
        assert!(meta.gso_ecn(), "{}", case.name);
    }
    let failures = compare(&o12, &accepted, 12);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
