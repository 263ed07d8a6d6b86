//! Kernel parity for GRO (root): the same bursts go to the running kernel's GRO (a NAPI TAP,
//! `sluice_testkit::oracle::GroOracle`) and to a [`GroEngine`], and the packets that come out must
//! be the same: which frames became one packet (so the payload), the gso type and size, and the
//! merged headers byte for byte (the kernel's `CHECKSUM_PARTIAL` L4 field is finalized first).
//!
//! The corpus covers every merge rule: flags, options, IPv4 IDs, TTL/TOS/ECN/DF, IPv6 hop limit,
//! traffic class, flow label and extension headers, sequence gaps, sizes, the 64 KiB limit, IP
//! options and fragments, padding, bad checksums, interleaved flows, VXLAN (with a VXLAN device in
//! the namespace) and UDP (with `rx-udp-gro-forwarding on`). The kernel outputs held packets in
//! its own (hash bucket) order, so outputs are compared as sorted lists. VLAN stacks are not
//! here: this kernel has no 802.1Q module (see `gro_rules.rs` and the round trips).
//!
//! Needs root; fails (never skips) without it.

use sluice_offload::gro::{GroConfig, GroEngine};
use sluice_packet::{rewrite, CsumStatus, GsoType, OffloadMeta, Slot};
use sluice_testkit::oracle::{GroOracle, GroOracleConfig};
use sluice_testkit::segments::*;

/// One output packet in comparable form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Out {
    frame: Vec<u8>,
    gso_type: u8,
    gso_size: u16,
}

/// The vnet header fields (little endian).
fn decode(h: &[u8]) -> (u8, u8, u16, u16, u16, u16) {
    let le = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
    (h[0], h[1], le(2), le(4), le(6), le(8))
}

fn kernel(oracle: &GroOracle, frames: &[Vec<u8>]) -> Vec<Out> {
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    let outs = oracle.coalesce(&refs).expect("kernel GRO");
    let mut v: Vec<Out> = outs
        .into_iter()
        .map(|o| {
            let (flags, gso_type, _hdr_len, gso_size, csum_start, csum_offset) =
                decode(&o.vnet_hdr);
            let mut frame = o.frame;
            if flags & 1 != 0 {
                // NEEDS_CSUM: the field holds the pseudo-header sum; summing from csum_start
                // with it in place gives the complement of the final checksum.
                let s = csum_start as usize;
                let field = s + csum_offset as usize;
                let c = !sluice_checksum::sum(&frame[s..]);
                frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
                // A tunnel's outer UDP checksum in use holds its pseudo-header sum too (the
                // kernel completes it by local checksum offload): complete it in software.
                let l = sluice_wire::parse(&frame).unwrap();
                if let (Some(_), Some(ol4)) = (l.tunnel, l.outer.l4) {
                    if l.outer.l4_proto == Some(17) && frame[ol4 + 6..ol4 + 8] != [0, 0] {
                        let mut m = OffloadMeta::from_layout(&l);
                        rewrite::recompute_checksum(&mut frame, &mut m, Slot::OuterL4).unwrap();
                    }
                }
            }
            Out {
                frame,
                gso_type,
                gso_size,
            }
        })
        .collect();
    v.sort();
    v
}

fn ours(cfg: GroConfig, frames: &[Vec<u8>]) -> Vec<Out> {
    let mut e = GroEngine::new(cfg);
    e.receive_batch(
        frames
            .iter()
            .map(|f| (f.as_slice(), OffloadMeta::default())),
        0,
    );
    let mut v = vec![];
    while let Some(mut p) = e.pop_output() {
        for slot in [Slot::InnerL4, Slot::OuterL4] {
            if p.meta.status(slot) == CsumStatus::Partial {
                rewrite::recompute_checksum(&mut p.frame, &mut p.meta, slot).unwrap();
            }
        }
        let base = match p.meta.gso_type() {
            GsoType::None => 0,
            GsoType::TcpV4 => 1,
            GsoType::TcpV6 => 4,
            GsoType::UdpL4 => 5,
            GsoType::Udp => 3,
        };
        v.push(Out {
            frame: p.frame,
            gso_type: base | if p.meta.gso_ecn() { 0x80 } else { 0 },
            gso_size: p.meta.segment_size(),
        });
    }
    v.sort();
    v
}

fn describe(v: &[Out]) -> String {
    v.iter()
        .map(|o| {
            format!(
                "[{}B type {:#x} size {}]",
                o.frame.len(),
                o.gso_type,
                o.gso_size
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs every case; returns the names of those that differ, with a description.
fn check(oracle: &GroOracle, cfg: GroConfig, cases: &[(&str, Vec<Seg>)]) -> Vec<String> {
    let mut bad = vec![];
    for (name, segs) in cases {
        let frames: Vec<Vec<u8>> = segs.iter().map(Seg::build).collect();
        check_frames(oracle, cfg, name, &frames, &mut bad);
    }
    bad
}

fn check_frames(
    oracle: &GroOracle,
    cfg: GroConfig,
    name: &str,
    frames: &[Vec<u8>],
    bad: &mut Vec<String>,
) {
    let k = kernel(oracle, frames);
    let o = ours(cfg, frames);
    if k != o {
        bad.push(format!(
            "{name}:\n  kernel {}\n  sluice {}",
            describe(&k),
            describe(&o)
        ));
    } else {
        // A case that merges nothing anywhere proves less: make sure the corpus has merges.
        eprintln!("{name}: ok ({})", describe(&k));
    }
}

fn with<F: Fn(&mut Seg)>(mut s: Vec<Seg>, i: usize, f: F) -> Vec<Seg> {
    f(&mut s[i]);
    s
}

fn tcp_cases(v6: bool) -> Vec<(String, Vec<Seg>)> {
    let base = if v6 {
        Seg::tcp6(1000, 1448)
    } else {
        Seg::tcp4(1000, 1448)
    };
    let s = |n| stream(&base, n, 1448);
    let mut c: Vec<(String, Vec<Seg>)> = vec![];
    c.push(("stream".into(), s(10)));
    let mut short = s(3);
    let x = short[2].next(700);
    short.push(x.clone());
    short.push(x.next(1448));
    short.push(short[4].next(1448));
    c.push(("shorter ends".into(), short));
    let mut larger = s(1);
    let l = larger[0].next(1449);
    larger.push(l.clone());
    larger.push(l.next(1449));
    c.push(("larger never merges".into(), larger));
    for (fname, f) in [
        ("psh", PSH),
        ("fin", FIN),
        ("urg", URG),
        ("rst", RST),
        ("syn", SYN),
        ("cwr", CWR),
        ("ece", ECE),
    ] {
        c.push((format!("flag {fname} mid"), with(s(6), 2, |x| x.flags |= f)));
        c.push((
            format!("flag {fname} first"),
            with(s(4), 0, |x| x.flags |= f),
        ));
    }
    c.push(("ack differs".into(), with(s(5), 2, |x| x.ack += 1)));
    c.push(("window differs".into(), with(s(5), 2, |x| x.window += 1)));
    let ts = vec![1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 9];
    let mut o = base.clone();
    o.options = ts.clone();
    o.payload = payload_at(o.seq, 1436);
    let so = stream(&o, 6, 1436);
    c.push(("same timestamps".into(), so.clone()));
    c.push((
        "tsval differs".into(),
        with(so.clone(), 3, |x| x.options[7] = 6),
    ));
    c.push((
        "option length differs".into(),
        with(so.clone(), 3, |x| x.options = vec![]),
    ));
    c.push(("seq gap".into(), with(s(5), 3, |x| x.seq += 1448)));
    let mut dup = s(4);
    let d = dup[1].clone();
    dup.insert(2, d);
    c.push(("retransmission".into(), dup));
    let mut ack = s(3);
    let mut a = ack[2].next(0);
    a.payload.clear();
    ack.push(a.clone());
    ack.push(a.next(1448));
    c.push(("pure ack".into(), ack));
    c.push(("ttl".into(), with(s(5), 2, |x| x.ttl = 63)));
    c.push(("dscp".into(), with(s(5), 2, |x| x.tos = 0x28)));
    let ect: Vec<Seg> = s(5)
        .into_iter()
        .map(|mut x| {
            x.tos = 2;
            x
        })
        .collect();
    c.push(("ect0 all".into(), ect.clone()));
    c.push(("ce mid".into(), with(ect, 2, |x| x.tos = 3)));
    c.push((
        "odd sizes".into(),
        stream(
            &{
                let mut b = base.clone();
                b.payload = payload_at(b.seq, 333);
                b
            },
            9,
            333,
        ),
    ));
    c.push(("64k".into(), s(50)));
    // Exactly 65 535 bytes of IP packet, then one byte more.
    let hl = if v6 { 60 } else { 40 };
    let total = 65535 - hl;
    let n = total / 1400;
    let mut exact = stream(
        &{
            let mut b = base.clone();
            b.payload = payload_at(b.seq, 1400);
            b
        },
        n,
        1400,
    );
    let last = exact.last().unwrap().next(total - n * 1400);
    exact.push(last.clone());
    exact.push(last.next(10));
    c.push(("64k exact".into(), exact));
    let mut inter = vec![];
    let flows: Vec<Vec<Seg>> = (0..4)
        .map(|i| {
            let mut b = base.clone();
            b.sport = 3000 + i;
            stream(&b, 6, 1448)
        })
        .collect();
    for j in 0..6 {
        for f in &flows {
            inter.push(f[j].clone());
        }
    }
    c.push(("4 interleaved flows".into(), inter));
    if v6 {
        c.push(("hop limit".into(), with(s(5), 2, |x| x.ttl = 1)));
        c.push(("traffic class".into(), with(s(5), 2, |x| x.tos = 4)));
        c.push(("flow label".into(), with(s(5), 2, |x| x.flow_label = 9)));
        let mut e = base.clone();
        e.ext = vec![(0, 8), (60, 16)];
        e.payload = payload_at(e.seq, 1400);
        let se = stream(&e, 5, 1400);
        c.push(("hbh+dstopts".into(), se.clone()));
        c.push((
            "ext differs".into(),
            with(se.clone(), 2, |x| x.ext = vec![(0, 16), (60, 16)]),
        ));
        let mut f = base.clone();
        f.ext = vec![(44, 8)];
        c.push(("fragment header".into(), stream(&f, 4, 1448)));
    } else {
        c.push(("df differs".into(), with(s(5), 2, |x| x.df = false)));
        for df in [true, false] {
            let mut b = base.clone();
            b.df = df;
            let inc = stream(&b, 5, 1448);
            c.push((format!("id incrementing df={df}"), inc.clone()));
            let fixed: Vec<Seg> = inc
                .iter()
                .cloned()
                .map(|mut x| {
                    x.id = 5;
                    x
                })
                .collect();
            c.push((format!("id fixed df={df}"), fixed.clone()));
            c.push((
                format!("id fixed then jump df={df}"),
                with(fixed, 3, |x| x.id = 6),
            ));
            c.push((
                format!("id jump df={df}"),
                with(inc.clone(), 2, |x| x.id += 3),
            ));
            c.push((
                format!("id fixed then increment df={df}"),
                with(with(inc, 1, |x| x.id -= 1), 2, |x| x.id -= 1),
            ));
        }
        let mut w = base.clone();
        w.id = 0xfffe;
        c.push(("id wraps".into(), stream(&w, 4, 1448)));
        let mut o = base.clone();
        o.ip_opts = vec![1, 1, 1, 0];
        c.push(("ip options".into(), stream(&o, 4, 1448)));
        let mut f = base.clone();
        f.frag_mf = true;
        f.df = false;
        c.push(("fragments".into(), stream(&f, 4, 1448)));
    }
    c
}

fn oracle(cfg: GroOracleConfig) -> GroOracle {
    sluice_testkit::root();
    GroOracle::new(&cfg).expect("building the GRO oracle")
}

fn report(bad: Vec<String>) {
    assert!(
        bad.is_empty(),
        "{} case(s) differ from the kernel:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn tcp_matches_the_kernel() {
    let o = oracle(GroOracleConfig::default());
    let mut bad = vec![];
    for v6 in [false, true] {
        let cases = tcp_cases(v6);
        let refs: Vec<(&str, Vec<Seg>)> =
            cases.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        for b in check(&o, GroConfig::default(), &refs) {
            bad.push(format!("{} {b}", if v6 { "v6" } else { "v4" }));
        }
    }
    // Padding, and a bad checksum in the middle.
    let tiny = stream(&Seg::tcp4(0, 2), 4, 2);
    let padded: Vec<Vec<u8>> = tiny
        .iter()
        .map(|s| {
            let mut f = s.build();
            f.resize(60, 0);
            f
        })
        .collect();
    check_frames(&o, GroConfig::default(), "padded", &padded, &mut bad);
    let mut frames: Vec<Vec<u8>> = stream(&Seg::tcp4(0, 1448), 5, 1448)
        .iter()
        .map(Seg::build)
        .collect();
    let l = frames[2].len() - 1;
    frames[2][l] ^= 0x55;
    check_frames(&o, GroConfig::default(), "bad checksum", &frames, &mut bad);
    report(bad);
}

#[test]
fn vxlan_matches_the_kernel() {
    let o = oracle(GroOracleConfig {
        vxlan: true,
        ..GroOracleConfig::default()
    });
    let mut cases: Vec<(String, Vec<Seg>)> = vec![];
    for v6out in [false, true] {
        let mut b = Seg::tcp4(0, 1400);
        b.outer = Some(Outer {
            v6: v6out,
            tun: Tun::Vxlan {
                vni: 42,
                outer_csum: true,
            },
            ..outer_vxlan()
        });
        cases.push((
            format!("vxlan outer csum out6={v6out}"),
            stream(&b, 6, 1400),
        ));
    }
    for (v6in, v6out) in [(false, false), (true, false), (false, true)] {
        let mut b = if v6in {
            Seg::tcp6(0, 1400)
        } else {
            Seg::tcp4(0, 1400)
        };
        b.outer = Some(Outer {
            v6: v6out,
            ..outer_vxlan()
        });
        let s = stream(&b, 8, 1400);
        let tag = format!("in6={v6in} out6={v6out}");
        cases.push((format!("vxlan stream {tag}"), s.clone()));
        cases.push((
            format!("vxlan vni differs {tag}"),
            with(s.clone(), 3, |x| {
                x.outer.as_mut().unwrap().tun = Tun::Vxlan {
                    vni: 43,
                    outer_csum: false,
                }
            }),
        ));
        cases.push((
            format!("vxlan outer ttl {tag}"),
            with(s.clone(), 3, |x| x.outer.as_mut().unwrap().ttl = 9),
        ));
        cases.push((
            format!("vxlan inner ttl {tag}"),
            with(s.clone(), 3, |x| x.ttl = 9),
        ));
        cases.push((
            format!("vxlan psh {tag}"),
            with(s.clone(), 3, |x| x.flags |= PSH),
        ));
        cases.push((
            format!("vxlan outer sport {tag}"),
            with(s.clone(), 3, |x| x.outer.as_mut().unwrap().sport += 1),
        ));
        if !v6out {
            let fixed: Vec<Seg> = s
                .iter()
                .cloned()
                .map(|mut x| {
                    x.outer.as_mut().unwrap().id = 3;
                    x
                })
                .collect();
            cases.push((format!("vxlan outer id fixed {tag}"), fixed));
        }
    }
    let refs: Vec<(&str, Vec<Seg>)> = cases.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    report(check(&o, GroConfig::default(), &refs));
}

#[test]
fn udp_matches_the_kernel_with_forwarding_gro() {
    let o = oracle(GroOracleConfig {
        udp_gro_forwarding: true,
        ..GroOracleConfig::default()
    });
    let cfg = GroConfig {
        udp: true,
        ..GroConfig::default()
    };
    let s = |n: u32, len: usize| -> Vec<Seg> { (0..n).map(|i| Seg::udp4(len, i)).collect() };
    let mut cases: Vec<(&str, Vec<Seg>)> = vec![
        ("udp same size", s(10, 1200)),
        (
            "udp shorter last",
            with(s(6, 1200), 5, |x| x.payload.truncate(10)),
        ),
        (
            "udp shorter mid",
            with(s(6, 1200), 2, |x| x.payload.truncate(10)),
        ),
        ("udp longer", with(s(6, 1200), 2, |x| x.payload.push(0))),
        ("udp 64", s(64, 100)),
        ("udp ttl", with(s(5, 1000), 2, |x| x.ttl = 1)),
        ("udp tos", with(s(5, 1000), 2, |x| x.tos = 4)),
    ];
    let zero: Vec<Seg> = s(5, 1000)
        .into_iter()
        .map(|mut x| {
            x.udp_csum_zero = true;
            x
        })
        .collect();
    cases.push(("udp zero checksum", zero));
    let v6: Vec<Seg> = s(6, 1000)
        .into_iter()
        .map(|mut x| {
            x.v6 = true;
            x
        })
        .collect();
    cases.push(("udp6 same size", v6));
    report(check(&o, cfg, &cases));
}
