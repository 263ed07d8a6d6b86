//! Kernel parity for L3 packets (root): GSO and GRO of IP packets with no Ethernet header, as a
//! TUN device (`IFF_TUN | IFF_NO_PI | IFF_VNET_HDR`) carries them, byte for byte against the
//! running kernel.
//!
//! - GSO: each super-packet (TCPv4, TCPv6, with options and extension headers, USO v4/v6, UFO)
//!   is written to a TUN with a `virtio_net_hdr` whose `csum_start` / `hdr_len` count from the
//!   IP header; the kernel segments it in software (tc redirect to a TUN with every offload off,
//!   `sluice_testkit::TunGsoOracle`). Sluice segments the same packet twice: parsed as L3
//!   (`ParseConfig::L3`) straight into `gso::segment`, and through the port path (the same
//!   header decoded by `decode_vnet_hdr`, then `tx_prepare` for a device without offloads).
//!   All three must be equal, and equal to the Ethernet path's segments with the Ethernet
//!   header removed.
//! - GRO: bursts of IP packets go to a NAPI TUN (`GroOracle` with `l3`) and to a `GroEngine`
//!   configured for L3 packets; the merged packets must be equal, including at the 64 KiB limit
//!   (which counts no Ethernet header for an L3 packet).
//!
//! Needs root; fails (never skips) without it.

#[path = "gso_build.rs"]
mod build;

use build::{build, pattern, Ip, Seed, Spec, L4};
use sluice_offload::features::{Device, Features};
use sluice_offload::gro::{GroBurst, GroConfig, GroEngine};
use sluice_offload::gso::{segment, GsoOutput, GsoParams};
use sluice_offload::tx::{decode_vnet_hdr, tx_prepare, TxOutcome, TxOutput, TxPacket};
use sluice_packet::virtio::HdrFormat;
use sluice_packet::{rewrite, CsumStatus, GsoType, OffloadMeta, Slot};
use sluice_ports::tap::{TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_UFO, TUN_F_USO4, TUN_F_USO6};
use sluice_testkit::oracle::{GroOracle, GroOracleConfig, GsoOracleConfig};
use sluice_testkit::segments::{stream, Seg, FIN, PSH};
use sluice_testkit::TunGsoOracle;
use sluice_wire::{parse, parse_with, ParseConfig};

const ETH: usize = 14;
const HDR_LEN: usize = 12;
const F_NEEDS_CSUM: u8 = 1;

struct Case {
    name: &'static str,
    ip: Ip,
    l4: L4,
    gso_type: GsoType,
    gso_size: u16,
    len: usize,
}

fn tcp(flags: u8, opt_len: usize) -> L4 {
    L4::Tcp {
        flags,
        opt_len,
        seq: 0xfffff000,
    }
}

fn gso_cases() -> Vec<Case> {
    let ack = 0x10;
    let c = |name, ip, l4, gso_type, gso_size, len| Case {
        name,
        ip,
        l4,
        gso_type,
        gso_size,
        len,
    };
    vec![
        c("tcpv4", Ip::V4, tcp(ack, 0), GsoType::TcpV4, 1448, 5000),
        c(
            "tcpv4 ip options, tcp options, psh/fin",
            Ip { ext: 8, ..Ip::V4 },
            tcp(ack | 0x08 | 0x01, 12),
            GsoType::TcpV4,
            1000,
            4321,
        ),
        c(
            "tcpv4 one segment",
            Ip::V4,
            tcp(ack | 0x08, 0),
            GsoType::TcpV4,
            1448,
            1000,
        ),
        c("tcpv6", Ip::V6, tcp(ack, 0), GsoType::TcpV6, 1440, 5000),
        c(
            "tcpv6 ext headers",
            Ip { ext: 2, ..Ip::V6 },
            tcp(ack | 0x08, 12),
            GsoType::TcpV6,
            1200,
            4000,
        ),
        c("uso v4", Ip::V4, L4::Udp, GsoType::UdpL4, 1400, 5000),
        c(
            "uso v4 short last",
            Ip::V4,
            L4::Udp,
            GsoType::UdpL4,
            1000,
            3333,
        ),
        c("uso v6", Ip::V6, L4::Udp, GsoType::UdpL4, 1400, 5000),
        c("ufo v4", Ip::V4, L4::Udp, GsoType::Udp, 1480, 5000),
    ]
}

fn vnet_type(t: GsoType) -> u8 {
    match t {
        GsoType::None => 0,
        GsoType::TcpV4 => 1,
        GsoType::Udp => 3,
        GsoType::TcpV6 => 4,
        GsoType::UdpL4 => 5,
    }
}

/// The Ethernet super-packet of a case (L4 checksum seeded with the pseudo-header sum), the L3
/// packet (the same without its Ethernet header) and the L3 packet's `virtio_net_hdr`.
fn input(case: &Case) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let spec = Spec {
        vlans: vec![],
        ip: case.ip,
        tunnel: None,
        l4: case.l4,
        payload: pattern(case.len, case.name.len() as u8),
    };
    let (frame, _) = build(&spec, Seed::Pseudo);
    let packet = frame[ETH..].to_vec();
    let layout = parse_with(&packet, &ParseConfig::L3).expect("case parses as L3");
    let (l4, payload) = (layout.outer.l4.unwrap(), layout.outer.payload.unwrap());
    let csum_off: u16 = if matches!(case.l4, L4::Tcp { .. }) {
        16
    } else {
        6
    };
    let mut h = vec![0u8; HDR_LEN];
    h[0] = F_NEEDS_CSUM;
    h[1] = vnet_type(case.gso_type);
    h[2..4].copy_from_slice(&(payload as u16).to_le_bytes());
    h[4..6].copy_from_slice(&case.gso_size.to_le_bytes());
    h[6..8].copy_from_slice(&(l4 as u16).to_le_bytes());
    h[8..10].copy_from_slice(&csum_off.to_le_bytes());
    (frame, packet, h)
}

/// Sluice's segments of the L3 packet, parsed as L3.
fn sluice_direct(case: &Case, packet: &[u8], frag_id: Option<u32>) -> Vec<Vec<u8>> {
    let layout = parse_with(packet, &ParseConfig::L3).unwrap();
    let mut p = GsoParams::new(case.gso_type, case.gso_size);
    p.ipv6_frag_id = frag_id;
    let mut out = GsoOutput::new();
    segment(packet, &layout, &p, &mut out).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    out.frames().map(<[u8]>::to_vec).collect()
}

/// Sluice's segments of the Ethernet frame, with their Ethernet headers removed.
fn sluice_ethernet(case: &Case, frame: &[u8]) -> Vec<Vec<u8>> {
    let layout = parse(frame).unwrap();
    let p = GsoParams::new(case.gso_type, case.gso_size);
    let mut out = GsoOutput::new();
    segment(frame, &layout, &p, &mut out).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    out.frames().map(|f| f[ETH..].to_vec()).collect()
}

/// The port path: the vnet header decoded against the L3 layout, then transmit preparation for
/// a device with no offload (software GSO and checksums).
fn sluice_port(case: &Case, packet: &[u8], hdr: &[u8]) -> Vec<Vec<u8>> {
    let layout = parse_with(packet, &ParseConfig::L3).unwrap();
    let (_, meta) = decode_vnet_hdr(hdr, HdrFormat::V1, packet, &layout)
        .unwrap_or_else(|e| panic!("{}: vnet header refused: {e}", case.name));
    assert_eq!(meta.offsets().outer_l3, Some(0), "{}", case.name);
    assert_eq!(meta.offsets().outer_l2, None, "{}", case.name);
    assert_eq!(
        meta.status(Slot::OuterL4),
        CsumStatus::Partial,
        "{}",
        case.name
    );
    let dev = Device::new(Features::NONE).with_mtu(9000);
    let mut out = TxOutput::new();
    match tx_prepare(&TxPacket::new(packet, meta), &dev, &mut out) {
        TxOutcome::Prepared { .. } => {}
        other => panic!("{}: tx_prepare gave {other:?}", case.name),
    }
    out.frames()
        .map(|(f, work)| {
            assert_eq!(work.gso, None, "{}", case.name);
            assert_eq!(work.l4_csum, None, "{}", case.name);
            f.to_vec()
        })
        .collect()
}

#[test]
fn l3_gso_matches_the_kernel_through_tun() {
    sluice_testkit::root();
    let oracle = TunGsoOracle::new(&GsoOracleConfig {
        vnet_hdr_len: HDR_LEN,
        offloads: TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_UFO | TUN_F_USO4 | TUN_F_USO6,
    })
    .unwrap_or_else(|e| panic!("cannot build the TUN GSO oracle: {e}"));
    let mut failures = Vec::new();
    for case in gso_cases() {
        let (frame, packet, hdr) = input(&case);
        let kernel = oracle
            .segment(&hdr, &packet)
            .unwrap_or_else(|e| panic!("{}: oracle: {e}", case.name));
        let want_segments = case.len.div_ceil(usize::from(case.gso_size));
        if case.gso_type != GsoType::Udp && kernel.len() != want_segments {
            failures.push(format!(
                "{}: the kernel emitted {} packets, {want_segments} expected",
                case.name,
                kernel.len()
            ));
            continue;
        }
        let ours = sluice_direct(&case, &packet, None);
        let port = sluice_port(&case, &packet, &hdr);
        let eth = sluice_ethernet(&case, &frame);
        eprintln!(
            "{}: {} packets, direct equal {}, port equal {}, ethernet equal {}",
            case.name,
            kernel.len(),
            kernel == ours,
            kernel == port,
            kernel == eth
        );
        for (what, got) in [("direct", &ours), ("port", &port), ("ethernet", &eth)] {
            if got != &kernel {
                let first = kernel.iter().zip(got.iter()).position(|(a, b)| a != b);
                failures.push(format!(
                    "{} ({what}): kernel {} packets, sluice {}, first different: {first:?}",
                    case.name,
                    kernel.len(),
                    got.len()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One GRO output in comparable form: the packet (checksum completed), gso type and size.
type Out = (Vec<u8>, u8, u16);

fn kernel_gro(oracle: &GroOracle, packets: &[Vec<u8>]) -> Vec<Out> {
    let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
    let mut v: Vec<Out> = oracle
        .coalesce(&refs)
        .expect("kernel GRO")
        .into_iter()
        .map(|o| {
            let h = &o.vnet_hdr;
            let le = |i: usize| usize::from(u16::from_le_bytes([h[i], h[i + 1]]));
            let mut p = o.frame;
            if h[0] & F_NEEDS_CSUM != 0 {
                // The field holds the pseudo-header sum: complete it (csum_start counts from
                // the IP header, as the packet starts there).
                let (s, field) = (le(6), le(6) + le(8));
                let c = !sluice_checksum::sum(&p[s..]);
                p[field..field + 2].copy_from_slice(&c.to_be_bytes());
            }
            (p, h[1], le(4) as u16)
        })
        .collect();
    v.sort();
    v
}

fn sluice_gro(cfg: GroConfig, packets: &[Vec<u8>]) -> Vec<Out> {
    let mut e = GroEngine::new(cfg);
    e.receive_batch(
        packets
            .iter()
            .map(|f| (f.as_slice(), OffloadMeta::default())),
        0,
    );
    let mut v = vec![];
    while let Some(p) = e.pop_output() {
        v.push(comparable(p.frame, p.meta));
    }
    v.sort();
    // Burst (zero-copy) mode decides the same.
    let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
    let mut burst = GroBurst::new();
    GroEngine::new(cfg).coalesce_burst(&refs, &[], &mut burst);
    let mut b: Vec<Out> = burst
        .packets()
        .iter()
        .map(|p| {
            let mut frame = Vec::new();
            burst.linearize(p, &refs, &mut frame);
            comparable(frame, p.meta)
        })
        .collect();
    b.sort();
    assert_eq!(b, v, "burst mode differs from receive_batch");
    v
}

fn comparable(mut frame: Vec<u8>, mut meta: OffloadMeta) -> Out {
    if meta.status(Slot::OuterL4) == CsumStatus::Partial {
        rewrite::recompute_checksum(&mut frame, &mut meta, Slot::OuterL4).unwrap();
    }
    (frame, vnet_type(meta.gso_type()), meta.segment_size())
}

/// The L3 packets of `segs` (each built as an Ethernet frame, its Ethernet header removed).
fn l3(segs: &[Seg]) -> Vec<Vec<u8>> {
    segs.iter().map(|s| s.build()[ETH..].to_vec()).collect()
}

fn gro_check(oracle: &GroOracle, cfg: GroConfig, cases: &[(String, Vec<Seg>)]) {
    let mut bad = Vec::new();
    let mut merged = 0;
    for (name, segs) in cases {
        let packets = l3(segs);
        let k = kernel_gro(oracle, &packets);
        let o = sluice_gro(cfg, &packets);
        let shape = |v: &[Out]| {
            v.iter()
                .map(|(p, t, s)| format!("[{}B type {t} size {s}]", p.len()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if k == o {
            eprintln!("{name}: ok {}", shape(&k));
            merged += usize::from(k.len() < packets.len());
        } else {
            bad.push(format!(
                "{name}:\n  kernel {}\n  sluice {}",
                shape(&k),
                shape(&o)
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // A corpus where nothing merges proves little.
    assert!(merged * 2 >= cases.len(), "only {merged} cases merged");
}

fn l3_gro_config() -> GroConfig {
    GroConfig {
        parse: ParseConfig::L3,
        ..GroConfig::default()
    }
}

#[test]
fn l3_tcp_gro_matches_the_kernel_through_tun() {
    sluice_testkit::root();
    let oracle = GroOracle::new(&GroOracleConfig {
        l3: true,
        ..GroOracleConfig::default()
    })
    .unwrap_or_else(|e| panic!("cannot build the TUN GRO oracle: {e}"));
    let mut cases = Vec::new();
    for v6 in [false, true] {
        let base = |len| {
            if v6 {
                Seg::tcp6(1000, len)
            } else {
                Seg::tcp4(1000, len)
            }
        };
        let v = if v6 { "v6" } else { "v4" };
        cases.push((format!("tcp{v} stream"), stream(&base(1448), 12, 1448)));
        let mut short = stream(&base(1448), 4, 1448);
        let last = short[3].next(500);
        short.push(last);
        cases.push((format!("tcp{v} shorter last"), short));
        let mut psh = stream(&base(1448), 6, 1448);
        psh[2].flags |= PSH;
        cases.push((format!("tcp{v} psh mid"), psh));
        let mut fin = stream(&base(1448), 5, 1448);
        fin[4].flags |= FIN;
        cases.push((format!("tcp{v} fin last"), fin));
        let mut ack = stream(&base(1448), 6, 1448);
        ack[3].ack += 1;
        cases.push((format!("tcp{v} ack differs"), ack));
        let mut ttl = stream(&base(1448), 6, 1448);
        ttl[3].ttl = 9;
        cases.push((format!("tcp{v} ttl differs"), ttl));
        let mut gap = stream(&base(1448), 6, 1448);
        gap[3].seq += 1;
        cases.push((format!("tcp{v} sequence gap"), gap));
        // The 64 KiB limit without an Ethernet header: 34 segments of 1985 bytes; 33 would
        // make an IPv4 packet of 65 545 bytes, within 65 535 + 14 but over 65 535.
        cases.push((format!("tcp{v} 64k limit"), stream(&base(1985), 34, 1985)));
        let mut two = stream(&base(1448), 4, 1448);
        let mut other = stream(&base(1448), 4, 1448);
        for s in &mut other {
            s.sport += 1;
        }
        two.extend(other);
        cases.push((format!("tcp{v} two flows"), two));
    }
    gro_check(&oracle, l3_gro_config(), &cases);

    // A corrupted payload (checksum no longer valid) is never merged, by either.
    let mut packets = l3(&stream(&Seg::tcp4(0, 1448), 5, 1448));
    let l = packets[2].len() - 1;
    packets[2][l] ^= 0x55;
    assert_eq!(
        kernel_gro(&oracle, &packets),
        sluice_gro(l3_gro_config(), &packets),
        "bad checksum"
    );
}

#[test]
fn l3_udp_gro_matches_the_kernel_through_tun() {
    sluice_testkit::root();
    let oracle = GroOracle::new(&GroOracleConfig {
        l3: true,
        udp_gro_forwarding: true,
        ..GroOracleConfig::default()
    })
    .unwrap_or_else(|e| panic!("cannot build the TUN GRO oracle: {e}"));
    let cfg = GroConfig {
        udp: true,
        ..l3_gro_config()
    };
    let s = |n: u32, len: usize| -> Vec<Seg> { (0..n).map(|i| Seg::udp4(len, i)).collect() };
    let mut shorter = s(6, 1200);
    shorter[5].payload.truncate(10);
    let mut longer = s(6, 1200);
    longer[3].payload.push(7);
    let cases = vec![
        ("udp same size".to_string(), s(10, 1200)),
        ("udp shorter last".to_string(), shorter),
        ("udp longer mid".to_string(), longer),
        ("udp 64k limit".to_string(), s(40, 1985)),
    ];
    gro_check(&oracle, cfg, &cases);
}
