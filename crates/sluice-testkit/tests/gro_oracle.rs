//! The kernel's GRO as an oracle: smoke tests (root only).

use sluice_testkit::frames::*;
use sluice_testkit::oracle::{GroOracle, GroOracleConfig};
use sluice_testkit::root;

fn segments(n: usize, mss: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    let data = payload(n * mss, 9);
    let frames = data
        .chunks(mss)
        .enumerate()
        .map(|(i, chunk)| {
            // ACK, and PSH on the last segment only (as the kernel's GSO emits them): PSH ends
            // a GRO merge.
            let flags = if i + 1 == n { 0x18 } else { 0x10 };
            tcp4_frame_flags(5000 + (i * mss) as u32, 100 + i as u16, flags, chunk, false)
        })
        .collect();
    (frames, data)
}

/// Finalizes a CHECKSUM_PARTIAL frame: the field holds the pseudo-header sum.
fn finalize(frame: &mut [u8], csum_start: usize, csum_offset: usize) {
    let field = csum_start + csum_offset;
    let seed = u16::from_be_bytes([frame[field], frame[field + 1]]);
    frame[field..field + 2].copy_from_slice(&[0, 0]);
    let c = !sluice_checksum::sum_from(seed, &frame[csum_start..]);
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn gro_oracle_merges_eight_tcpv4_segments() {
    root();
    let t0 = std::time::Instant::now();
    let oracle = GroOracle::new(&GroOracleConfig::default()).unwrap();
    println!("GroOracle::new took {:?}", t0.elapsed());
    let (frames, data) = segments(8, 1448);
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    for round in 0..3 {
        let t = std::time::Instant::now();
        let out = oracle.coalesce(&refs).unwrap();
        println!("coalesce() took {:?}", t.elapsed());
        let summary: Vec<_> = out
            .iter()
            .map(|o| (o.frame.len(), VnetHdr::decode(&o.vnet_hdr)))
            .collect();
        println!("round {round}: {summary:?}");
        assert_eq!(
            out.len(),
            1,
            "8 in-order segments merge into one: {summary:?}"
        );
        let o = &out[0];
        let h = VnetHdr::decode(&o.vnet_hdr);
        assert_eq!(h.gso_type, GSO_TCPV4);
        assert_eq!(h.gso_size, 1448);
        assert_eq!(h.flags & F_NEEDS_CSUM, F_NEEDS_CSUM);
        assert_eq!((h.csum_start, h.csum_offset), (34, 16));
        assert_eq!(o.frame.len(), 54 + 8 * 1448);
        assert_eq!(o.frame[54..], data[..]);
        let mut f = o.frame.clone();
        finalize(&mut f, 34, 16);
        assert!(
            checksums_good(&f),
            "merged packet checksums after finalizing"
        );
    }
}

#[test]
fn gro_oracle_psh_ends_every_merge() {
    root();
    let oracle = GroOracle::new(&GroOracleConfig::default()).unwrap();
    let data = payload(8 * 1448, 3);
    let frames: Vec<Vec<u8>> = data
        .chunks(1448)
        .enumerate()
        .map(|(i, c)| tcp4_frame_flags(1 + (i * 1448) as u32, i as u16, 0x18, c, false))
        .collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    let out = oracle.coalesce(&refs).unwrap();
    assert_eq!(out.len(), 8, "PSH on every segment: nothing merges");
    for (o, f) in out.iter().zip(&frames) {
        assert_eq!(&o.frame, f);
        assert_eq!(VnetHdr::decode(&o.vnet_hdr).gso_type, GSO_NONE);
    }
}

#[test]
fn gro_oracle_does_not_merge_a_bad_checksum() {
    root();
    let oracle = GroOracle::new(&GroOracleConfig::default()).unwrap();
    let (mut frames, _) = segments(4, 1000);
    frames[2][50] ^= 0x55; // corrupt the third segment's TCP checksum
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    let out = oracle.coalesce(&refs).unwrap();
    let summary: Vec<_> = out
        .iter()
        .map(|o| (o.frame.len(), VnetHdr::decode(&o.vnet_hdr)))
        .collect();
    println!("{summary:?}");
    // All four frames come out, the corrupted one unmerged and unchanged.
    let total: usize = out.iter().map(|o| o.frame.len() - 54).sum();
    assert_eq!(total, 4000);
    assert!(out.iter().any(|o| o.frame == frames[2]), "{summary:?}");
    assert!(out.len() >= 2);
}

fn udp4_datagrams(n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut f = ether(
                0x0800,
                &ipv4_packet(
                    17,
                    300 + i as u16,
                    &udp_datagram(1000, 2000, &payload(len, i as u8)),
                ),
            );
            fill_l4_checksum(&mut f, 14, false);
            f
        })
        .collect()
}

fn summary(out: &[sluice_testkit::GroOutput]) -> Vec<(usize, VnetHdr)> {
    out.iter()
        .map(|o| (o.frame.len(), VnetHdr::decode(&o.vnet_hdr)))
        .collect()
}

#[test]
fn gro_oracle_udp_needs_gro_forwarding() {
    root();
    let frames = udp4_datagrams(8, 1000);
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();

    let plain = GroOracle::new(&GroOracleConfig::default()).unwrap();
    let out = plain.coalesce(&refs).unwrap();
    println!("udp without forwarding: {:?}", summary(&out));
    assert_eq!(out.len(), 8, "no UDP GRO without rx-udp-gro-forwarding");
    drop(plain);

    let fwd = GroOracle::new(&GroOracleConfig {
        udp_gro_forwarding: true,
        ..GroOracleConfig::default()
    })
    .unwrap();
    let out = fwd.coalesce(&refs).unwrap();
    let s = summary(&out);
    println!("udp with forwarding: {s:?}");
    assert_eq!(out.len(), 1, "{s:?}");
    assert_eq!(s[0].1.gso_type, GSO_UDP_L4);
    assert_eq!(s[0].1.gso_size, 1000);
    assert_eq!(s[0].0, 42 + 8 * 1000);
}

fn vxlan_segments(n: usize, mss: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let flags = if i + 1 == n { 0x18 } else { 0x10 };
            let seg = tcp_segment(7000 + (i * mss) as u32, flags, &payload(mss, i as u8));
            let mut inner = ether(0x0800, &ipv4_packet(6, 50 + i as u16, &seg));
            fill_l4_checksum(&mut inner, 14, false);
            let mut vx = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
            vx.extend_from_slice(&inner);
            ether(
                0x0800,
                &ipv4_packet(17, 900 + i as u16, &udp_datagram(49152, 4789, &vx)),
            )
        })
        .collect()
}

#[test]
fn gro_oracle_vxlan_needs_a_vxlan_socket() {
    root();
    let frames = vxlan_segments(8, 1398);
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();

    let plain = GroOracle::new(&GroOracleConfig::default()).unwrap();
    let out = plain.coalesce(&refs).unwrap();
    println!("vxlan without socket: {:?}", summary(&out));
    assert_eq!(out.len(), 8, "no VXLAN GRO without a VXLAN socket");
    drop(plain);

    let vx = GroOracle::new(&GroOracleConfig {
        vxlan: true,
        ..GroOracleConfig::default()
    })
    .unwrap();
    let out = vx.coalesce(&refs).unwrap();
    let s = summary(&out);
    println!("vxlan with socket: {s:?}");
    assert_eq!(out.len(), 1, "{s:?}");
    assert_eq!(s[0].1.gso_type, GSO_TCPV4);
    assert_eq!(s[0].1.gso_size, 1398);
    assert_eq!(s[0].1.csum_start, 14 + 20 + 8 + 8 + 14 + 20);
}

#[test]
fn gro_oracle_reports_refused_writes_and_keeps_working() {
    root();
    let oracle = GroOracle::new(&GroOracleConfig::default()).unwrap();
    let (frames, _) = segments(2, 1000);
    // gso_type TCPV4 with gso_size 0: refused by virtio_net_hdr_to_skb.
    let bad = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        csum_start: 34,
        csum_offset: 16,
        ..VnetHdr::default()
    }
    .encode(12);
    let zero = [0u8; 12];
    match oracle.coalesce_with_headers(&[(&bad, &frames[0])]) {
        Err(sluice_testkit::OracleError::Refused(e)) => assert_eq!(e, libc::EINVAL),
        other => panic!("expected Refused(EINVAL), got {other:?}"),
    }
    // Refused after one queued frame.
    assert!(matches!(
        oracle.coalesce_with_headers(&[(&zero, &frames[0]), (&bad, &frames[1])]),
        Err(sluice_testkit::OracleError::Refused(_))
    ));
    assert!(matches!(
        oracle.coalesce(&vec![&frames[0][..]; 65]),
        Err(sluice_testkit::OracleError::Invalid(_))
    ));
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    let out = oracle.coalesce(&refs).unwrap();
    assert_eq!(out.len(), 1, "still merging after refusals");
    assert!(oracle.coalesce(&[]).unwrap().is_empty());
}
