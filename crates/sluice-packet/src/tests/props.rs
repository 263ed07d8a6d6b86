//! Property tests: random transition sequences, encap/decap round trips, no panics on any input.

use super::frames;
use crate::meta::{self, CsumStatus, Level, OffloadMeta, OuterHeaders, Slot, TunnelCsum};
use crate::rewrite;
use crate::verify::{verify_frame, Verdict, Verdicts};
use proptest::prelude::*;
use sluice_wire::{ip_proto, Headers, L3Kind, Layout, Tunnel, TunnelKind};

#[derive(Debug, Clone)]
enum Op {
    Verdict(Slot, Verdict),
    Apply(Verdicts),
    Unnecessary(bool),
    NeedsCsum(Level),
    Defer(Level),
    Recompute(Slot),
    Encap(OuterHeaders),
    Decap,
    VlanPush(u16),
    VlanPop(u16),
}

fn slot() -> impl Strategy<Value = Slot> {
    prop::sample::select(Slot::ALL.to_vec())
}

fn verdict() -> impl Strategy<Value = Verdict> {
    prop::sample::select(vec![Verdict::None, Verdict::Good, Verdict::Bad])
}

fn level() -> impl Strategy<Value = Level> {
    prop::sample::select(vec![Level::Outer, Level::Inner])
}

fn status() -> impl Strategy<Value = CsumStatus> {
    prop::sample::select(vec![
        CsumStatus::Unknown,
        CsumStatus::Bad,
        CsumStatus::Good,
        CsumStatus::Partial,
    ])
}

fn encap() -> impl Strategy<Value = OuterHeaders> {
    (
        prop::sample::select(vec![TunnelKind::Vxlan, TunnelKind::Geneve, TunnelKind::Gre]),
        any::<bool>(),
        status(),
        prop::sample::select(vec![
            TunnelCsum::None,
            TunnelCsum::Good,
            TunnelCsum::Partial,
        ]),
        any::<bool>(),
        0u16..8,
        20u16..60,
        8u16..64,
    )
        .prop_map(
            |(kind, v6, ip_csum, l4_csum, strip_l2, vlans, l3_len, rest)| {
                let outer_l3 = 14 + 4 * vlans;
                OuterHeaders {
                    kind,
                    outer_l3_kind: if v6 { L3Kind::Ipv6 } else { L3Kind::Ipv4 },
                    outer_l2: Some(0),
                    outer_l3,
                    outer_l4: outer_l3 + l3_len,
                    pushed: outer_l3 + l3_len + rest,
                    strip_l2,
                    ip_csum,
                    l4_csum,
                }
            },
        )
}

fn verdicts() -> impl Strategy<Value = Verdicts> {
    (
        verdict(),
        verdict(),
        verdict(),
        verdict(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(ip, l4, inner_ip, inner_l4, l4_absent, inner_l4_absent)| Verdicts {
                ip,
                l4,
                inner_ip,
                inner_l4,
                l4_absent,
                inner_l4_absent,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (slot(), verdict()).prop_map(|(s, v)| Op::Verdict(s, v)),
        verdicts().prop_map(Op::Apply),
        any::<bool>().prop_map(Op::Unnecessary),
        level().prop_map(Op::NeedsCsum),
        level().prop_map(Op::Defer),
        slot().prop_map(Op::Recompute),
        encap().prop_map(Op::Encap),
        Just(Op::Decap),
        (1u16..9).prop_map(Op::VlanPush),
        (1u16..9).prop_map(Op::VlanPop),
    ]
}

/// A starting layout: plain or tunnelled, IPv4/IPv6, TCP/UDP/SCTP inside.
fn start() -> impl Strategy<Value = Layout> {
    (
        0usize..3,
        any::<bool>(),
        prop::sample::select(vec![ip_proto::TCP, ip_proto::UDP, ip_proto::SCTP]),
    )
        .prop_map(|(shape, v6, proto)| {
            let kind = if v6 { L3Kind::Ipv6 } else { L3Kind::Ipv4 };
            let hl = if v6 { 40 } else { 20 };
            let plain = frames::headers(Some(0), 14, kind, 14 + hl, proto, 200);
            match shape {
                0 => Layout {
                    outer: plain,
                    ..Layout::default()
                },
                _ => {
                    let outer = frames::headers(Some(0), 14, L3Kind::Ipv4, 34, ip_proto::UDP, 300);
                    let tk = if shape == 1 {
                        TunnelKind::Vxlan
                    } else {
                        TunnelKind::Geneve
                    };
                    let inner = Headers {
                        l2: Some(50),
                        l3: Some(64),
                        l4: Some(64 + hl),
                        l3_end: Some(250),
                        ..plain
                    };
                    Layout {
                        outer,
                        tunnel: Some(Tunnel {
                            kind: tk,
                            offset: 42,
                            len: 8,
                            id: None,
                            proto: 0x6558,
                        }),
                        inner: Some(inner),
                        ..Layout::default()
                    }
                }
            }
        })
}

fn apply(m: &mut OffloadMeta, op: &Op) -> Result<(), crate::Error> {
    match op {
        Op::Verdict(s, v) => m.rx_verdict(*s, *v),
        Op::Apply(v) => m.apply_verdicts(v),
        Op::Unnecessary(i) => m.rx_checksum_unnecessary(*i),
        Op::NeedsCsum(level) => {
            let start = m.offsets().l4(*level).unwrap_or(7);
            let field = m
                .l4_proto(*level)
                .and_then(meta::l4_csum_field)
                .unwrap_or(0);
            m.rx_needs_csum(start, field)?
        }
        Op::Defer(level) => {
            m.l4_checksum_deferred(*level)?;
        }
        Op::Recompute(s) => m.checksum_recomputed(*s),
        Op::Encap(e) => m.encapsulate(e)?,
        Op::Decap => {
            let o = m.offsets();
            let removed = o.inner_l2.or(o.inner_l3).unwrap_or(0);
            let l2 = if o.inner_l2.is_none() { 14 } else { 0 };
            m.decapsulate(removed, l2)?
        }
        Op::VlanPush(n) => m.vlan_pushed(*n)?,
        Op::VlanPop(n) => m.vlan_popped(*n)?,
    }
    Ok(())
}

/// Invariants every reachable metadata satisfies.
fn check_invariants(m: &OffloadMeta) -> Result<(), TestCaseError> {
    match m.partial_slot() {
        Some(s) => {
            prop_assert_eq!(m.status(s), CsumStatus::Partial);
            prop_assert_eq!(Some(m.csum_start()), m.offsets().of(s));
            let field = m.l4_proto(s.level()).and_then(meta::l4_csum_field);
            prop_assert_eq!(Some(m.csum_offset()), field);
            if s == Slot::OuterL4 {
                prop_assert_ne!(m.status(Slot::InnerL4), CsumStatus::Partial);
            }
        }
        None => {
            prop_assert_eq!((m.csum_start(), m.csum_offset()), (0, 0));
            prop_assert_ne!(m.status(Slot::OuterL4), CsumStatus::Partial);
            prop_assert_ne!(m.status(Slot::InnerL4), CsumStatus::Partial);
        }
    }
    for level in [Level::Outer, Level::Inner] {
        if m.csum_absent(level) {
            prop_assert_eq!(m.status(Slot::l4(level)), CsumStatus::Good);
        }
    }
    if m.tunnel().is_none() {
        prop_assert_eq!(m.status(Slot::InnerIp), CsumStatus::Unknown);
        prop_assert_eq!(m.status(Slot::InnerL4), CsumStatus::Unknown);
        prop_assert!(!m.csum_absent(Level::Inner));
        prop_assert_eq!(m.offsets().inner_l3, None);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Bad never becomes Good and Partial never becomes Good, except by an explicit recompute of
    /// that slot; structural events move statuses without changing them; refused events change
    /// nothing.
    #[test]
    fn transitions_never_launder(layout in start(), ops in prop::collection::vec(op(), 1..40)) {
        let mut m = OffloadMeta::from_layout(&layout);
        check_invariants(&m)?;
        for op in &ops {
            let before = m;
            let res = apply(&mut m, op);
            if res.is_err() {
                prop_assert_eq!(m, before, "refused {:?} changed the metadata", op);
                continue;
            }
            match op {
                Op::Encap(_) => {
                    prop_assert_eq!(m.status(Slot::InnerIp), before.status(Slot::OuterIp));
                    prop_assert_eq!(m.status(Slot::InnerL4), before.status(Slot::OuterL4));
                    prop_assert_eq!(m.csum_absent(Level::Inner), before.csum_absent(Level::Outer));
                }
                Op::Decap => {
                    prop_assert_eq!(m.status(Slot::OuterIp), before.status(Slot::InnerIp));
                    prop_assert_eq!(m.status(Slot::OuterL4), before.status(Slot::InnerL4));
                }
                _ => {
                    for s in Slot::ALL {
                        if matches!(op, Op::Recompute(r) if *r == s) {
                            continue;
                        }
                        let (b, a) = (before.status(s), m.status(s));
                        if b == CsumStatus::Bad {
                            prop_assert_eq!(a, CsumStatus::Bad, "{:?} {:?}", op, s);
                        }
                        if b == CsumStatus::Partial {
                            prop_assert_ne!(a, CsumStatus::Good, "{:?} {:?}", op, s);
                        }
                        if b != CsumStatus::Partial && a == CsumStatus::Partial {
                            prop_assert!(b == CsumStatus::Good || b == CsumStatus::Unknown);
                        }
                    }
                }
            }
            check_invariants(&m)?;
        }
    }

    /// Encapsulation followed by the matching decapsulation is the identity on the metadata.
    #[test]
    fn encap_then_decap_is_identity(
        layout in start(),
        ops in prop::collection::vec(op(), 0..20),
        enc in encap(),
    ) {
        let mut m = OffloadMeta::from_layout(&layout);
        for op in &ops {
            let _ = apply(&mut m, op);
        }
        if m.tunnel().is_some() {
            let _ = apply(&mut m, &Op::Decap);
        }
        prop_assume!(m.tunnel().is_none());
        let orig = m;
        if m.encapsulate(&enc).is_ok() {
            let l2_len = if enc.strip_l2 {
                orig.offsets().outer_l3.unwrap_or(0) - orig.offsets().outer_l2.unwrap_or(0)
            } else {
                0
            };
            m.decapsulate(enc.pushed, l2_len).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(m, orig);
        } else {
            prop_assert_eq!(m, orig);
        }
    }

    /// VLAN push then pop is the identity.
    #[test]
    fn vlan_push_pop_is_identity(layout in start(), ops in prop::collection::vec(op(), 0..20), n in 1u16..64) {
        let mut m = OffloadMeta::from_layout(&layout);
        for op in &ops {
            let _ = apply(&mut m, op);
        }
        let orig = m;
        if m.vlan_pushed(n).is_ok() {
            m.vlan_popped(n).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        prop_assert_eq!(m, orig);
    }

    /// Verification never panics, whatever the frame and the layout.
    #[test]
    fn verify_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..160),
        offs in prop::collection::vec(prop_oneof![0usize..170, any::<usize>()], 10),
        protos in prop::collection::vec(any::<u8>(), 2),
        v6 in any::<bool>(),
        frag in any::<bool>(),
    ) {
        let kind = if v6 { L3Kind::Ipv6 } else { L3Kind::Ipv4 };
        let mut outer = frames::headers(Some(0), offs[0], kind, offs[1], protos[0], offs[2]);
        outer.is_fragment = frag;
        let inner = frames::headers(None, offs[3], kind, offs[4], protos[1], offs[5]);
        let layout = Layout {
            outer,
            tunnel: Some(Tunnel { kind: TunnelKind::Vxlan, offset: offs[6], len: 8, id: None, proto: 0 }),
            inner: Some(inner),
            ..Layout::default()
        };
        let _ = verify_frame(&bytes, &layout);
    }

    /// Rewrites never panic and, on error, leave the frame untouched.
    #[test]
    fn rewrites_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        layout in start(),
        ops in prop::collection::vec(op(), 0..10),
        port in any::<u16>(),
        lvl in level(),
    ) {
        let mut m = OffloadMeta::from_layout(&layout);
        for op in &ops {
            let _ = apply(&mut m, op);
        }
        let mut f = bytes.clone();
        let r = rewrite::set_ports(&mut f, &m, lvl, Some(port), None);
        if r.is_err() { prop_assert_eq!(&f, &bytes); }
        let g = f.clone();
        let r = rewrite::set_ipv4_src(&mut f, &m, lvl, [1, 2, 3, 4]);
        if r.is_err() { prop_assert_eq!(&f, &g); }
        let _ = rewrite::set_ipv6_dst(&mut f, &m, lvl, [7; 16]);
        let _ = rewrite::set_ttl(&mut f, &m, lvl, 1);
        let _ = rewrite::set_dscp(&mut f, &m, lvl, 10);
        let _ = rewrite::seed_partial(&mut f, &m);
        let mut mm = m;
        let _ = rewrite::defer_l4_checksum(&mut f, &mut mm, lvl);
        let _ = rewrite::recompute_checksum(&mut f, &mut mm, Slot::l4(lvl));
    }

    /// On real frames with random payloads and random new values, a Good checksum stays Good and
    /// a corrupted one stays corrupted by the same amount.
    #[test]
    fn rewrites_preserve_correctness(
        payload in prop::collection::vec(any::<u8>(), 0..64),
        v6 in any::<bool>(),
        use_udp in any::<bool>(),
        corrupt in any::<bool>(),
        addr in any::<[u8; 16]>(),
        sport in any::<u16>(),
        ttl in any::<u8>(),
    ) {
        let kind = if v6 { L3Kind::Ipv6 } else { L3Kind::Ipv4 };
        let (proto, seg, field) = if use_udp {
            (ip_proto::UDP, frames::udp(53, &payload), 6)
        } else {
            (ip_proto::TCP, frames::tcp(&payload), 16)
        };
        let (mut f, layout) = frames::frame(kind, proto, seg, true);
        let l4 = layout.outer.l4.unwrap_or(0);
        if corrupt {
            f[l4 + field] ^= 0x81;
            prop_assume!(f[l4 + field] != 0 || f[l4 + field + 1] != 0);
        }
        let err = frames::l4_error(&f, &layout.outer);
        let mut m = OffloadMeta::from_layout(&layout);
        m.apply_verdicts(&verify_frame(&f, &layout));
        let addr4 = [addr[0], addr[1], addr[2], addr[3]];
        match kind {
            L3Kind::Ipv4 => rewrite::set_ipv4_dst(&mut f, &m, Level::Outer, addr4),
            L3Kind::Ipv6 => rewrite::set_ipv6_src(&mut f, &m, Level::Outer, addr),
        }.map_err(|e| TestCaseError::fail(e.to_string()))?;
        rewrite::set_ports(&mut f, &m, Level::Outer, Some(sport), None)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        rewrite::set_ttl(&mut f, &m, Level::Outer, ttl).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let norm = |s: u16| if s == 0 { 0xffff } else { s };
        prop_assert_eq!(norm(frames::l4_error(&f, &layout.outer)), norm(err));
        let v = verify_frame(&f, &layout);
        prop_assert_eq!(v.l4, if corrupt { Verdict::Bad } else { Verdict::Good });
        if !v6 {
            prop_assert_eq!(v.ip, Verdict::Good);
        }
    }
}
