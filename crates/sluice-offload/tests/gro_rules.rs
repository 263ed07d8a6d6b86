//! Explicit expectations for every GRO merge rule (TCP over IPv4/IPv6, VLAN stacks, tunnels,
//! UDP), the flush reasons, checksum states of merged packets and bounded memory.

use sluice_offload::gro::{FlushReason, GroConfig, GroEngine, GroPacket};
use sluice_packet::{verify::verify_frame, CsumStatus, GsoType, OffloadMeta, Slot};
use sluice_testkit::segments::*;

fn engine() -> GroEngine {
    GroEngine::new(GroConfig::default())
}

fn run_with(cfg: GroConfig, segs: &[Seg]) -> (Vec<GroPacket>, GroEngine) {
    let frames: Vec<Vec<u8>> = segs.iter().map(Seg::build).collect();
    let mut e = GroEngine::new(cfg);
    e.receive_batch(
        frames
            .iter()
            .map(|f| (f.as_slice(), OffloadMeta::default())),
        0,
    );
    let mut out = vec![];
    while let Some(p) = e.pop_output() {
        out.push(p);
    }
    (out, e)
}

fn run(segs: &[Seg]) -> Vec<GroPacket> {
    run_with(GroConfig::default(), segs).0
}

fn counts(out: &[GroPacket]) -> Vec<u16> {
    out.iter().map(|p| p.segments).collect()
}

/// The frame of a merged packet with its L4 checksums made final, checked against a frame built
/// directly as one big segment.
fn assert_merged_equals(p: &GroPacket, expect: &Seg, mss: u16, gso: GsoType) {
    assert_eq!(p.meta.gso_type(), gso);
    assert_eq!(p.meta.segment_size(), mss);
    let want = expect.build();
    assert_eq!(p.frame.len(), want.len(), "merged length");
    assert_eq!(
        p.frame, want,
        "merged frame differs from the single big segment"
    );
    let v = verify_frame(&p.frame, &sluice_wire::parse(&p.frame).unwrap());
    assert_ne!(v.l4, sluice_packet::Verdict::Bad);
}

fn big(first: &Seg, total: usize) -> Seg {
    let mut s = first.clone();
    s.payload = payload_at(first.seq, total);
    s
}

#[test]
fn tcp4_in_sequence_segments_merge_into_one_good_packet() {
    let segs = stream(&Seg::tcp4(1000, 1448), 4, 1448);
    let out = run(&segs);
    assert_eq!(counts(&out), vec![4]);
    assert_merged_equals(&out[0], &big(&segs[0], 4 * 1448), 1448, GsoType::TcpV4);
    assert_eq!(out[0].meta.status(Slot::OuterL4), CsumStatus::Good);
    assert_eq!(out[0].meta.status(Slot::OuterIp), CsumStatus::Good);
}

#[test]
fn tcp6_in_sequence_segments_merge() {
    let segs = stream(&Seg::tcp6(7, 1200), 5, 1200);
    let out = run(&segs);
    assert_eq!(counts(&out), vec![5]);
    assert_merged_equals(&out[0], &big(&segs[0], 5 * 1200), 1200, GsoType::TcpV6);
}

#[test]
fn odd_segment_sizes_keep_the_checksum_right() {
    let segs = stream(&Seg::tcp4(3, 333), 7, 333);
    let out = run(&segs);
    assert_eq!(counts(&out), vec![7]);
    assert_merged_equals(&out[0], &big(&segs[0], 7 * 333), 333, GsoType::TcpV4);
}

#[test]
fn shorter_segment_joins_and_ends_the_packet() {
    let mut segs = stream(&Seg::tcp4(0, 1000), 3, 1000);
    let short = segs[2].next(500);
    segs.push(short.clone());
    segs.push(short.next(1000));
    let (out, e) = run_with(GroConfig::default(), &segs);
    assert_eq!(counts(&out), vec![4, 1]);
    assert_merged_equals(&out[0], &big(&segs[0], 3500), 1000, GsoType::TcpV4);
    assert_eq!(e.stats().flushed.size, 1);
}

#[test]
fn larger_segment_never_merges() {
    let a = Seg::tcp4(0, 1000);
    let b = a.next(1001);
    let out = run(&[a, b]);
    assert_eq!(counts(&out), vec![1, 1]);
    assert_eq!(out[0].meta.gso_type(), GsoType::None);
}

#[test]
fn sequence_gap_and_retransmission_do_not_merge() {
    let a = Seg::tcp4(0, 100);
    let mut gap = a.next(100);
    gap.seq += 1;
    gap.payload = payload_at(gap.seq, 100);
    let out = run(&[a.clone(), gap]);
    assert_eq!(counts(&out), vec![1, 1]);
    let mut rexmit = a.clone();
    rexmit.id += 1;
    assert_eq!(counts(&run(&[a, rexmit])), vec![1, 1]);
}

#[test]
fn finishing_flags_join_then_end_the_packet() {
    for flag in [PSH, FIN, URG, RST, SYN] {
        let a = Seg::tcp4(0, 100);
        let mut b = a.next(100);
        b.flags |= flag;
        let c = b.next(100);
        let (out, e) = run_with(GroConfig::default(), &[a.clone(), b, c]);
        // URG/RST/SYN differ from the first segment's flags: Linux refuses them (flag word
        // mismatch) and they pass alone; PSH and FIN join and end the packet.
        if flag == PSH || flag == FIN {
            assert_eq!(counts(&out), vec![2, 1], "flag {flag:#x}");
            assert_eq!(
                out[0].frame[14 + 20 + 13] & flag,
                flag,
                "flag kept in merged header"
            );
            assert_eq!(e.stats().flushed.flags, 1);
        } else {
            assert_eq!(counts(&out), vec![1, 1, 1], "flag {flag:#x}");
        }
    }
}

#[test]
fn a_lone_psh_segment_is_not_held() {
    let mut a = Seg::tcp4(0, 100);
    a.flags |= PSH;
    let b = a.next(100);
    let out = run(&[a, b]);
    assert_eq!(counts(&out), vec![1, 1]);
}

#[test]
fn cwr_never_merges() {
    let a = Seg::tcp4(0, 100);
    let mut b = a.next(100);
    b.flags |= CWR;
    let c = b.next(100);
    let mut c2 = c.clone();
    c2.flags = ACK;
    let d = c2.next(100);
    let out = run(&[a, b, c2, d]);
    assert_eq!(counts(&out), vec![1, 1, 2]);
    assert!(!out[2].meta.gso_ecn());
}

#[test]
fn ack_window_options_must_be_identical() {
    let a = Seg::tcp4(0, 100);
    let mut b = a.next(100);
    b.ack += 1;
    assert_eq!(counts(&run(&[a.clone(), b])), vec![1, 1]);
    let mut b = a.next(100);
    b.window += 1;
    assert_eq!(counts(&run(&[a.clone(), b])), vec![1, 1], "window change");
    let mut a2 = a.clone();
    a2.options = vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    let b = a2.next(100);
    assert_eq!(
        counts(&run(&[a2.clone(), b.clone()])),
        vec![2],
        "same timestamps"
    );
    let mut b2 = b.clone();
    b2.options[7] = 2; // different TSval
    assert_eq!(
        counts(&run(&[a2.clone(), b2])),
        vec![1, 1],
        "different timestamps"
    );
    let mut b3 = b;
    b3.options = vec![];
    assert_eq!(counts(&run(&[a2, b3])), vec![1, 1], "option length");
    let mut b = a.next(100);
    b.flags |= ECE;
    assert_eq!(counts(&run(&[a, b])), vec![1, 1], "ECE differs");
}

#[test]
fn ip_fields_must_match() {
    let a = Seg::tcp4(0, 100);
    let mut b = a.next(100);
    b.ttl = 63;
    assert_eq!(counts(&run(&[a.clone(), b])), vec![1, 1], "ttl");
    let mut b = a.next(100);
    b.tos = 1;
    assert_eq!(counts(&run(&[a.clone(), b])), vec![1, 1], "ecn");
    let mut b = a.next(100);
    b.tos = 0x20;
    assert_eq!(counts(&run(&[a.clone(), b])), vec![1, 1], "dscp");
    let mut b = a.next(100);
    b.df = false;
    assert_eq!(counts(&run(&[a.clone(), b])), vec![1, 1], "df");
    let a6 = Seg::tcp6(0, 100);
    let mut b = a6.next(100);
    b.ttl = 1;
    assert_eq!(counts(&run(&[a6.clone(), b])), vec![1, 1], "hop limit");
    let mut b = a6.next(100);
    b.tos = 4;
    assert_eq!(counts(&run(&[a6.clone(), b])), vec![1, 1], "traffic class");
}

#[test]
fn ipv4_id_rules() {
    // Incrementing IDs merge, with or without DF.
    for df in [true, false] {
        let mut a = Seg::tcp4(0, 100);
        a.df = df;
        assert_eq!(
            counts(&run(&stream(&a, 4, 100))),
            vec![4],
            "incrementing, df {df}"
        );
        // Fixed IDs merge (6.18: DF no longer required).
        let mut s = stream(&a, 4, 100);
        for x in &mut s {
            x.id = 9;
        }
        assert_eq!(counts(&run(&s)), vec![4], "fixed, df {df}");
    }
    // A jump breaks it; so does switching from fixed to incrementing.
    let a = Seg::tcp4(0, 100);
    let mut s = stream(&a, 3, 100);
    s[2].id += 5;
    assert_eq!(counts(&run(&s)), vec![2, 1]);
    let mut s = stream(&a, 3, 100);
    s[1].id = s[0].id;
    assert_eq!(counts(&run(&s)), vec![2, 1]);
    // Wrap-around counts as incrementing.
    let mut a = Seg::tcp4(0, 100);
    a.id = 0xffff;
    assert_eq!(counts(&run(&stream(&a, 3, 100))), vec![3]);
}

#[test]
fn ip_options_fragments_and_padding_are_never_held() {
    let mut a = Seg::tcp4(0, 100);
    a.ip_opts = vec![1, 1, 1, 0];
    assert_eq!(counts(&run(&stream(&a, 3, 100))), vec![1, 1, 1]);
    let mut a = Seg::tcp4(0, 100);
    a.frag_mf = true;
    a.df = false;
    assert_eq!(counts(&run(&stream(&a, 3, 100))), vec![1, 1, 1]);
    // Tiny segments padded to the Ethernet minimum.
    let segs = stream(&Seg::tcp4(0, 2), 3, 2);
    let frames: Vec<Vec<u8>> = segs
        .iter()
        .map(|s| {
            let mut f = s.build();
            f.resize(60, 0);
            f
        })
        .collect();
    let mut e = engine();
    e.receive_batch(
        frames
            .iter()
            .map(|f| (f.as_slice(), OffloadMeta::default())),
        0,
    );
    let mut n = 0;
    e.drain_output(|p| {
        assert_eq!(p.segments, 1);
        n += 1
    });
    assert_eq!(n, 3);
}

#[test]
fn ipv6_extension_headers() {
    // Identical hop-by-hop + destination options: merge.
    let mut a = Seg::tcp6(0, 100);
    a.ext = vec![(0, 8), (60, 16)];
    let out = run(&stream(&a, 3, 100));
    assert_eq!(counts(&out), vec![3]);
    assert_merged_equals(&out[0], &big(&a, 300), 100, GsoType::TcpV6);
    // Different ones: different flows, each held.
    let mut b = a.next(100);
    b.ext = vec![(0, 16), (60, 16)];
    assert_eq!(counts(&run(&[a.clone(), b])), vec![1, 1]);
    // Fragment header: never.
    let mut f = Seg::tcp6(0, 100);
    f.ext = vec![(44, 8)];
    assert_eq!(counts(&run(&stream(&f, 3, 100))), vec![1, 1, 1]);
    // Flow label is part of the flow.
    let a = Seg::tcp6(0, 100);
    let mut b = a.next(100);
    b.flow_label = 7;
    let c = b.next(100);
    let mut c2 = c;
    c2.flow_label = a.flow_label;
    // a and c2 are one flow (b is another one in between): a+c2 do not follow in sequence.
    assert_eq!(counts(&run(&[a, b, c2])), vec![1, 1, 1]);
}

#[test]
fn interleaved_flows_merge_separately_in_order() {
    let a = Seg::tcp4(0, 100);
    let mut b = Seg::tcp4(5000, 100);
    b.sport = 1;
    let sa = stream(&a, 3, 100);
    let sb = stream(&b, 3, 100);
    let segs = vec![
        sa[0].clone(),
        sb[0].clone(),
        sa[1].clone(),
        sb[1].clone(),
        sa[2].clone(),
        sb[2].clone(),
    ];
    let out = run(&segs);
    assert_eq!(counts(&out), vec![3, 3]);
    assert_merged_equals(&out[0], &big(&a, 300), 100, GsoType::TcpV4);
    assert_merged_equals(&out[1], &big(&b, 300), 100, GsoType::TcpV4);
}

#[test]
fn vlan_stacks_are_part_of_the_flow() {
    let mut a = Seg::tcp4(0, 100);
    a.vlans = vec![(0x88a8, 100), (0x8100, 200), (0x8100, 300)];
    let s = stream(&a, 4, 100);
    let out = run(&s);
    assert_eq!(counts(&out), vec![4]);
    assert_merged_equals(&out[0], &big(&a, 400), 100, GsoType::TcpV4);
    // Same 5-tuple, a different inner VID (DPDK would merge these): two flows.
    let mut b = s[1].clone();
    b.vlans[2].1 = 301;
    assert_eq!(counts(&run(&[s[0].clone(), b])), vec![1, 1]);
    // A different PCP is a different tag too.
    let mut b = s[1].clone();
    b.vlans[0].1 |= 0x2000;
    assert_eq!(counts(&run(&[s[0].clone(), b])), vec![1, 1]);
    // Untagged vs tagged.
    let mut b = s[1].clone();
    b.vlans.clear();
    assert_eq!(counts(&run(&[s[0].clone(), b])), vec![1, 1]);
}

#[test]
fn the_64k_limit() {
    // 1448-byte payloads: 45 fit (14 + 20 + 20 + 45 * 1448 = 65214), the 46th would not.
    let s = stream(&Seg::tcp4(0, 1448), 50, 1448);
    let out = run(&s);
    assert_eq!(counts(&out), vec![45, 5]);
    assert!(out[0].frame.len() - 14 <= 65535);
    assert_merged_equals(&out[0], &big(&s[0], 45 * 1448), 1448, GsoType::TcpV4);
    // Exactly 65535 bytes of IP packet fit.
    let payload_total = 65535 - 40;
    let mss = 1000;
    let n = payload_total / mss;
    let last = payload_total - n * mss;
    let mut s = stream(&Seg::tcp4(0, mss), n, mss);
    let l = s.last().unwrap().next(last);
    s.push(l);
    let out = run(&s);
    assert_eq!(counts(&out), vec![(n + 1) as u16]);
    assert_eq!(out[0].frame.len(), 65535 + 14);
}

#[test]
fn bad_checksums_never_merge_and_stay_bad() {
    let s = stream(&Seg::tcp4(0, 100), 3, 100);
    let mut frames: Vec<Vec<u8>> = s.iter().map(Seg::build).collect();
    let last = frames[1].len() - 1;
    frames[1][last] ^= 0xff;
    let mut e = engine();
    e.receive_batch(
        frames
            .iter()
            .map(|f| (f.as_slice(), OffloadMeta::default())),
        0,
    );
    let mut out = vec![];
    e.drain_output(|p| out.push((p.segments, p.meta.status(Slot::OuterL4), p.frame.clone())));
    assert_eq!(out.len(), 3);
    assert_eq!(out[1].1, CsumStatus::Bad);
    assert_eq!(out[1].2, frames[1]);
    assert_eq!(e.stats().bad_checksum, 1);
    // A bad IPv4 header checksum too.
    let mut frames: Vec<Vec<u8>> = s.iter().map(Seg::build).collect();
    frames[1][14 + 10] ^= 1;
    let mut e = engine();
    e.receive_batch(
        frames
            .iter()
            .map(|f| (f.as_slice(), OffloadMeta::default())),
        0,
    );
    let mut st = vec![];
    e.drain_output(|p| st.push((p.segments, p.meta.status(Slot::OuterIp))));
    assert_eq!(st[1], (1, CsumStatus::Bad));
}

#[test]
fn given_bad_status_is_respected_even_if_bytes_verify() {
    let s = stream(&Seg::tcp4(0, 100), 2, 100);
    let frames: Vec<Vec<u8>> = s.iter().map(Seg::build).collect();
    let mut e = engine();
    let mut metas = vec![];
    for f in &frames {
        let mut m = OffloadMeta::from_layout(&sluice_wire::parse(f).unwrap());
        m.rx_verdict(Slot::OuterL4, sluice_packet::Verdict::Bad);
        metas.push(m);
    }
    e.receive_batch(frames.iter().map(|f| f.as_slice()).zip(metas), 0);
    let mut st = vec![];
    e.drain_output(|p| st.push((p.segments, p.meta.status(Slot::OuterL4))));
    assert_eq!(st, vec![(1, CsumStatus::Bad), (1, CsumStatus::Bad)]);
}

#[test]
fn partial_segments_give_a_partial_merged_packet() {
    let s = stream(&Seg::tcp4(0, 100), 3, 100);
    let frames: Vec<Vec<u8>> = s.iter().map(Seg::build).collect();
    let mut e = engine();
    let metas: Vec<OffloadMeta> = frames
        .iter()
        .map(|f| {
            let mut m = OffloadMeta::from_layout(&sluice_wire::parse(f).unwrap());
            m.rx_needs_csum(34, 16).unwrap();
            m
        })
        .collect();
    e.receive_batch(frames.iter().map(|f| f.as_slice()).zip(metas), 0);
    let mut p = e.pop_output().unwrap();
    assert_eq!(p.segments, 3);
    assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Partial);
    assert_eq!((p.meta.csum_start(), p.meta.csum_offset()), (34, 16));
    // Filling it yields the single big segment.
    sluice_packet::rewrite::recompute_checksum(&mut p.frame, &mut p.meta, Slot::OuterL4).unwrap();
    assert_eq!(p.frame, big(&s[0], 300).build());
}

#[test]
fn unknown_checksums_without_verification_are_not_merged() {
    let cfg = GroConfig {
        verify_checksums: false,
        ..GroConfig::default()
    };
    let s = stream(&Seg::tcp4(0, 100), 3, 100);
    assert_eq!(counts(&run_with(cfg, &s).0), vec![1, 1, 1]);
}

#[test]
fn pure_acks_pass_and_finish_nothing_else() {
    let a = Seg::tcp4(0, 100);
    let mut ack = a.next(0);
    ack.payload.clear();
    let out = run(&[a.clone(), ack]);
    // The pure ACK (same flow, no payload) cannot join: the held packet leaves first.
    assert_eq!(counts(&out), vec![1, 1]);
    assert_eq!(out[0].frame, a.build());
}

#[test]
fn vxlan_geneve_gre_tunnels_merge_with_outer_lengths_fixed() {
    let tuns = [
        Tun::Vxlan {
            vni: 42,
            outer_csum: false,
        },
        Tun::Vxlan {
            vni: 42,
            outer_csum: true,
        },
        Tun::Geneve {
            vni: 9,
            outer_csum: true,
        },
        Tun::Gre { key: Some(77) },
        Tun::Gre { key: None },
    ];
    for tun in tuns {
        for (v6in, v6out) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut a = if v6in {
                Seg::tcp6(0, 1000)
            } else {
                Seg::tcp4(0, 1000)
            };
            a.outer = Some(Outer {
                tun: tun.clone(),
                v6: v6out,
                ..outer_vxlan()
            });
            let s = stream(&a, 5, 1000);
            let out = run(&s);
            assert_eq!(counts(&out), vec![5], "{tun:?} v6in {v6in} v6out {v6out}");
            let gso = if v6in { GsoType::TcpV6 } else { GsoType::TcpV4 };
            assert_merged_equals(&out[0], &big(&a, 5000), 1000, gso);
            assert_eq!(out[0].meta.status(Slot::InnerL4), CsumStatus::Good);
            // Another VNI/key is another flow.
            let mut b = s[1].clone();
            b.outer.as_mut().unwrap().tun = match &tun {
                Tun::Vxlan { outer_csum, .. } => Tun::Vxlan {
                    vni: 43,
                    outer_csum: *outer_csum,
                },
                Tun::Geneve { outer_csum, .. } => Tun::Geneve {
                    vni: 10,
                    outer_csum: *outer_csum,
                },
                Tun::Gre { key } => Tun::Gre {
                    key: Some(key.unwrap_or(0) + 1),
                },
            };
            assert_eq!(counts(&run(&[s[0].clone(), b])), vec![1, 1], "{tun:?}");
            // Outer TTL change: same flow, no merge.
            let mut b = s[1].clone();
            b.outer.as_mut().unwrap().ttl = 1;
            assert_eq!(counts(&run(&[s[0].clone(), b])), vec![1, 1], "{tun:?} ttl");
        }
    }
}

#[test]
fn udp_gro_off_by_default_and_merges_when_on() {
    let s: Vec<Seg> = (0..4).map(|n| Seg::udp4(1200, n)).collect();
    assert_eq!(counts(&run(&s)), vec![1, 1, 1, 1]);
    let cfg = GroConfig {
        udp: true,
        ..GroConfig::default()
    };
    let (out, _) = run_with(cfg, &s);
    assert_eq!(counts(&out), vec![4]);
    let p = &out[0];
    assert_eq!(p.meta.gso_type(), GsoType::UdpL4);
    assert_eq!(p.meta.segment_size(), 1200);
    assert_eq!(p.meta.status(Slot::OuterL4), CsumStatus::Good);
    let v = verify_frame(&p.frame, &sluice_wire::parse(&p.frame).unwrap());
    assert_eq!(v.l4, sluice_packet::Verdict::Good);
    // Payload is the concatenation.
    let want: Vec<u8> = s.iter().flat_map(|x| x.payload.clone()).collect();
    assert_eq!(&p.frame[14 + 20 + 8..], &want[..]);
    // A shorter last one joins and ends; a longer one starts anew; zero checksums never merge.
    let mut t = s.clone();
    t[2].payload.truncate(100);
    assert_eq!(counts(&run_with(cfg, &t).0), vec![3, 1]);
    let mut t = s.clone();
    t[1].payload.push(1);
    // The longer second one finishes the first and starts anew; the third (shorter) ends it.
    assert_eq!(counts(&run_with(cfg, &t).0), vec![1, 2, 1]);
    let mut t = s.clone();
    for x in &mut t {
        x.udp_csum_zero = true;
    }
    assert_eq!(counts(&run_with(cfg, &t).0), vec![1, 1, 1, 1]);
    // At most 64 datagrams.
    let many: Vec<Seg> = (0..70).map(|n| Seg::udp4(100, n)).collect();
    assert_eq!(counts(&run_with(cfg, &many).0), vec![64, 6]);
}

#[test]
fn flood_of_flows_is_bounded_and_evicts_oldest() {
    let cfg = GroConfig {
        max_flows: 8,
        ..GroConfig::default()
    };
    let mut e = GroEngine::new(cfg);
    let mut frames = vec![];
    for i in 0..100u16 {
        let mut s = Seg::tcp4(0, 100);
        s.sport = i;
        frames.push(s.build());
    }
    for f in &frames {
        e.receive(f, OffloadMeta::default(), 0);
        assert!(e.held_flows() <= 8);
    }
    assert_eq!(e.stats().flushed.evicted, 92);
    e.flush(FlushReason::Manual);
    assert_eq!(e.stats().flushed.manual, 8);
    let mut ports = vec![];
    e.drain_output(|p| ports.push(u16::from_be_bytes([p.frame[34], p.frame[35]])));
    assert_eq!(
        ports,
        (0..100).collect::<Vec<_>>(),
        "evicted oldest first, in order"
    );
}

#[test]
fn ageing_with_a_caller_clock() {
    let cfg = GroConfig {
        max_age: 3,
        ..GroConfig::default()
    };
    let mut e = GroEngine::new(cfg);
    let s = stream(&Seg::tcp4(0, 100), 4, 100);
    let f: Vec<Vec<u8>> = s.iter().map(Seg::build).collect();
    e.receive_batch([(f[0].as_slice(), OffloadMeta::default())], 10);
    e.receive_batch([(f[1].as_slice(), OffloadMeta::default())], 11);
    assert_eq!(e.output_len(), 0);
    e.receive_batch([(f[2].as_slice(), OffloadMeta::default())], 13);
    assert_eq!(e.output_len(), 1);
    assert_eq!(e.stats().flushed.age, 1);
    assert_eq!(e.pop_output().unwrap().segments, 3);
}

/// `end_batch_keep_new` (`max_age` 0): a packet begun in this batch stays for the next, where
/// later segments still join it; the next batch's end finishes it, and keeps only what that
/// batch began.
#[test]
fn ending_a_batch_keeps_only_what_it_began() {
    let mut e = engine();
    let s = stream(&Seg::tcp4(0, 100), 4, 100);
    let f: Vec<Vec<u8>> = s.iter().map(Seg::build).collect();
    let other = Seg {
        sport: 999,
        ..Seg::tcp4(0, 100)
    }
    .build();
    for x in &f[..2] {
        e.receive(x, OffloadMeta::default(), 1);
    }
    e.end_batch_keep_new(1);
    assert_eq!((e.output_len(), e.held_segments()), (0, 2));
    e.receive(&f[2], OffloadMeta::default(), 2);
    e.receive(&other, OffloadMeta::default(), 2);
    e.end_batch_keep_new(2);
    assert_eq!(
        (e.output_len(), e.held_segments()),
        (1, 1),
        "the old one left"
    );
    assert_eq!(e.pop_output().unwrap().segments, 3);
    e.end_batch_keep_new(3);
    assert_eq!((e.output_len(), e.held_segments()), (1, 0));
    assert_eq!(e.stats().flushed.batch_end, 2);
}

#[test]
fn buffers_are_reused() {
    let mut e = engine();
    let s = stream(&Seg::tcp4(0, 1448), 32, 1448);
    let f: Vec<Vec<u8>> = s.iter().map(Seg::build).collect();
    for round in 0..5 {
        e.receive_batch(
            f.iter().map(|x| (x.as_slice(), OffloadMeta::default())),
            round,
        );
        e.drain_output(|_| {});
    }
    let before = e.buffer_bytes();
    for round in 5..50 {
        e.receive_batch(
            f.iter().map(|x| (x.as_slice(), OffloadMeta::default())),
            round,
        );
        e.drain_output(|_| {});
    }
    assert_eq!(e.buffer_bytes(), before);
}

/// An IPv6/TCP segment carried as a jumbogram (payload length 0, hop-by-hop Jumbo Payload
/// option), with a correct TCP checksum.
fn jumbo_tcp6(seq: u32, payload: &[u8]) -> Vec<u8> {
    use sluice_checksum::{combine, pseudo, sum};
    let (src, dst) = ([0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], {
        let mut d = [0u8; 16];
        d[..4].copy_from_slice(&[0x20, 1, 0x0d, 0xb8]);
        d[15] = 2;
        d
    });
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&1000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x10; // ACK
    tcp[14..16].copy_from_slice(&512u16.to_be_bytes());
    tcp.extend_from_slice(payload);
    let ph = pseudo::ipv6(&src, &dst, 6, tcp.len() as u32);
    let c = !combine(ph, sum(&tcp));
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    // Hop-by-hop: next header TCP, length 0 (8 bytes), Jumbo Payload option (type 0xc2,
    // length 4, the real payload length).
    let jumbo_len = (8 + tcp.len()) as u32;
    let mut hbh = vec![6u8, 0, 0xc2, 4];
    hbh.extend_from_slice(&jumbo_len.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, 0, 64]); // payload length 0, next header HBH
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&hbh);
    f.extend_from_slice(&tcp);
    f
}

#[test]
fn ipv6_jumbograms_never_merge() {
    // Found by the gro fuzz target: merging rewrote the payload length of packets whose length
    // field (0) does not match, as Linux's ipv6_gro_receive refuses to.
    let a = jumbo_tcp6(1, &[0xab; 100]);
    let b = jumbo_tcp6(101, &[0xcd; 100]);
    let layout = sluice_wire::parse(&a).expect("a jumbogram parses");
    assert_eq!(layout.outer.l3_end, Some(a.len()));
    // (Software verification does not follow the Jumbo Payload option: it reports None.)
    assert_ne!(
        verify_frame(&a, &layout).l4,
        sluice_packet::verify::Verdict::Bad
    );
    // As from a device that verified the checksums (they are right), so that GRO's own
    // verification, which cannot follow the option, is not what keeps them apart.
    let meta = |f: &[u8]| {
        let mut m = OffloadMeta::from_layout(&sluice_wire::parse(f).expect("parses"));
        m.rx_checksum_unnecessary(false);
        m
    };
    let mut e = engine();
    e.receive_batch([(&a[..], meta(&a)), (&b[..], meta(&b))], 0);
    e.end_batch(0);
    let mut out = vec![];
    while let Some(p) = e.pop_output() {
        out.push(p);
    }
    assert_eq!(counts(&out), vec![1, 1]);
    assert_eq!(out[0].frame, a);
    assert_eq!(out[1].frame, b);
}

/// Metadata handed in with a frame is taken as the frame's only when it describes the same
/// headers: offsets alone are not enough (a VXLAN datagram carrying UDP and one carrying TCP can
/// have the same offsets). Segments of a TCP flow handed in with a UDP datagram's metadata —
/// what a caller sharing one parse across a UDP-GSO frame's datagrams would give a mixed frame
/// — merge into a packet whose metadata says TCP, and what a device makes of it verifies.
#[test]
fn metadata_of_other_headers_is_not_taken_for_the_frame() {
    let vx = |s: Seg| Seg {
        outer: Some(outer_vxlan()),
        ..s
    };
    let segs = stream(&vx(Seg::tcp4(1, 1400)), 4, 1400);
    let odd = vx(Seg::udp4(1412, 9)).build();
    let meta_of = |f: &[u8]| OffloadMeta::from_layout(&sluice_wire::parse(f).expect("parses"));
    let given = meta_of(&odd);
    assert_eq!(
        given.offsets(),
        meta_of(&segs[0].build()).offsets(),
        "the same header sizes"
    );
    let mut e = engine();
    for s in &segs {
        e.receive(&s.build(), given, 0);
    }
    e.end_batch(0);
    let out: Vec<GroPacket> = std::iter::from_fn(|| e.pop_output()).collect();
    assert_eq!(counts(&out), vec![4], "merged");
    let m = out[0].meta;
    assert_eq!(
        m.l4_proto(sluice_packet::Level::Inner),
        Some(6),
        "TCP, as the bytes say"
    );
    assert_eq!(m.gso_type(), GsoType::TcpV4);
}
