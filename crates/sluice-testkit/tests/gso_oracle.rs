//! The kernel's software GSO as an oracle: smoke tests (root only).

use sluice_testkit::frames::*;
use sluice_testkit::oracle::{GsoOracle, GsoOracleConfig, OracleError};
use sluice_testkit::root;

fn tcp4_super_packet(len: usize) -> (VnetHdr, Vec<u8>, Vec<u8>) {
    let data = payload(len, 7);
    let frame = tcp4_frame(1000, 0x1234, &data, true);
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
    };
    (hdr, frame, data)
}

#[test]
fn gso_oracle_segments_tcpv4() {
    root();
    let t0 = std::time::Instant::now();
    let oracle = GsoOracle::new(&GsoOracleConfig::default()).unwrap();
    println!("GsoOracle::new took {:?}", t0.elapsed());
    println!(
        "TAP offloads {:#x}; veth features left on: {:?}",
        oracle.offloads(),
        oracle.veth_features_on()
    );
    let (hdr, frame, data) = tcp4_super_packet(4000);
    // Several calls on one oracle give the same answer.
    let mut first: Option<Vec<Vec<u8>>> = None;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let segs = oracle.segment(&hdr.encode(12), &frame).unwrap();
        println!("segment() took {:?}", t.elapsed());
        assert_eq!(segs.len(), 3, "4000 bytes / 1448 = 3 segments");
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            assert!(checksums_good(s), "segment {i} checksums");
            assert_eq!(s[..14], frame[..14]);
            joined.extend_from_slice(&s[54..]);
            let expect_len = if i < 2 { 1448 } else { 4000 - 2 * 1448 };
            assert_eq!(s.len(), 54 + expect_len);
            let seq = u32::from_be_bytes(s[38..42].try_into().unwrap());
            assert_eq!(seq, 1000 + (i as u32) * 1448);
        }
        assert_eq!(joined, data);
        if let Some(f) = &first {
            assert_eq!(f, &segs);
        }
        first = Some(segs);
    }
}

#[test]
fn gso_oracle_refuses_gso_size_zero() {
    root();
    let oracle = GsoOracle::new(&GsoOracleConfig::default()).unwrap();
    let (mut hdr, frame, _) = tcp4_super_packet(4000);
    hdr.gso_size = 0;
    match oracle.segment(&hdr.encode(12), &frame) {
        Err(OracleError::Refused(errno)) => assert_eq!(errno, libc::EINVAL),
        other => panic!("expected Refused(EINVAL), got {other:?}"),
    }
    // The oracle still works afterwards.
    hdr.gso_size = 1000;
    let segs = oracle.segment(&hdr.encode(12), &frame).unwrap();
    assert_eq!(segs.len(), 4);
    assert!(segs.iter().all(|s| checksums_good(s)));
}

#[test]
fn gso_oracle_passes_small_frames_and_keeps_vlan_tags() {
    root();
    let oracle = GsoOracle::new(&GsoOracleConfig {
        vnet_hdr_len: 24,
        ..GsoOracleConfig::default()
    })
    .unwrap();
    let frame = tcp4_frame(5, 6, &payload(500, 1), false);
    let segs = oracle.segment(&[0u8; 24], &frame).unwrap();
    assert_eq!(segs, vec![frame.clone()]);
    // A tagged super-packet: segments keep the tag (802.1ad TPID included).
    let (mut hdr, frame, data) = tcp4_super_packet(3000);
    let t = tagged(&frame, 0x88a8, 42);
    hdr.csum_start += 4;
    hdr.hdr_len += 4;
    let segs = oracle.segment(&hdr.encode(24), &t).unwrap();
    assert_eq!(segs.len(), 3);
    let mut joined = Vec::new();
    for s in &segs {
        assert_eq!(s[12..16], [0x88, 0xa8, 0, 42]);
        assert!(checksums_good(s));
        joined.extend_from_slice(&s[58..]);
    }
    assert_eq!(joined, data);
    // Wrong header size for this oracle.
    assert!(matches!(
        oracle.segment(&[0u8; 12], &frame),
        Err(OracleError::Invalid(_))
    ));
}
