//! One test per cell of the state table in `meta`'s documentation.

use crate::meta::{CsumStatus, Fixup, Level, OffloadMeta, OuterHeaders, Slot, TunnelCsum};
use crate::verify::Verdict;
use sluice_wire::{ip_proto, L3Kind, TunnelKind};

use super::frames;

/// Plain IPv4/TCP metadata (l3 14, l4 34) with the outer L4 slot in `state`.
fn meta_in(state: CsumStatus) -> OffloadMeta {
    let (_, layout) = frames::v4_tcp();
    let mut m = OffloadMeta::from_layout(&layout);
    match state {
        CsumStatus::Unknown => {}
        CsumStatus::Good => m.rx_verdict(Slot::OuterL4, Verdict::Good),
        CsumStatus::Bad => m.rx_verdict(Slot::OuterL4, Verdict::Bad),
        CsumStatus::Partial => m.rx_needs_csum(34, 16).unwrap(),
    }
    assert_eq!(m.status(Slot::OuterL4), state);
    m
}

pub(super) fn vxlan_encap(ip_csum: CsumStatus, l4_csum: TunnelCsum) -> OuterHeaders {
    OuterHeaders {
        kind: TunnelKind::Vxlan,
        outer_l3_kind: L3Kind::Ipv4,
        outer_l2: Some(0),
        outer_l3: 14,
        outer_l4: 34,
        pushed: 50,
        strip_l2: false,
        ip_csum,
        l4_csum,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    RxGood,
    RxBad,
    RxNone,
    NeedsCsum,
    PortRewrite,
    AddrRewrite,
    Defer,
    Recompute,
    OuterHeaders,
    Decap,
    VlanPush,
    VlanPop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    Plain,
    Fix(Fixup),
    Refused,
}

/// Applies `ev` to a packet whose (outer) L4 slot is in `from`; returns the status of the slot
/// the checksum is in afterwards, and the fixup or refusal.
fn apply(from: CsumStatus, ev: Ev) -> (CsumStatus, Out) {
    let mut m = meta_in(from);
    let out = match ev {
        Ev::RxGood => {
            m.rx_verdict(Slot::OuterL4, Verdict::Good);
            Out::Plain
        }
        Ev::RxBad => {
            m.rx_verdict(Slot::OuterL4, Verdict::Bad);
            Out::Plain
        }
        Ev::RxNone => {
            m.rx_verdict(Slot::OuterL4, Verdict::None);
            Out::Plain
        }
        Ev::NeedsCsum => {
            m.rx_needs_csum(34, 16).unwrap();
            Out::Plain
        }
        Ev::PortRewrite => Out::Fix(m.l4_field_rewritten(Level::Outer).l4),
        Ev::AddrRewrite => Out::Fix(m.l3_addr_rewritten(Level::Outer).l4),
        Ev::Defer => match m.l4_checksum_deferred(Level::Outer) {
            Ok(f) => Out::Fix(f),
            Err(_) => Out::Refused,
        },
        Ev::Recompute => {
            m.checksum_recomputed(Slot::OuterL4);
            Out::Plain
        }
        Ev::OuterHeaders => {
            m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::None))
                .unwrap();
            return (m.status(Slot::InnerL4), Out::Plain);
        }
        Ev::Decap => {
            m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::Partial))
                .unwrap();
            m.decapsulate(50, 0).unwrap();
            assert_eq!(m.status(Slot::InnerL4), CsumStatus::Unknown);
            Out::Plain
        }
        Ev::VlanPush => {
            m.vlan_pushed(4).unwrap();
            Out::Plain
        }
        Ev::VlanPop => {
            m.vlan_pushed(4).unwrap();
            m.vlan_popped(4).unwrap();
            Out::Plain
        }
    };
    // csum_start always follows the partial slot.
    if m.status(Slot::OuterL4) == CsumStatus::Partial {
        assert_eq!(m.partial_slot(), Some(Slot::OuterL4));
        assert_eq!(m.csum_start(), m.offsets().outer_l4.unwrap());
        assert_eq!(m.csum_offset(), 16);
    } else {
        assert_eq!(m.partial_slot(), None);
    }
    (m.status(Slot::OuterL4), out)
}

macro_rules! cell {
    ($name:ident: $from:ident, $ev:ident => $to:ident, $out:expr) => {
        #[test]
        fn $name() {
            assert_eq!(
                apply(CsumStatus::$from, Ev::$ev),
                (CsumStatus::$to, $out),
                "{:?} x {:?}",
                CsumStatus::$from,
                Ev::$ev
            );
        }
    };
}

const P: Out = Out::Plain;
const INC: Out = Out::Fix(Fixup::Incremental);
const NOTHING: Out = Out::Fix(Fixup::Nothing);

// rx Good
cell!(rx_good_unknown: Unknown, RxGood => Good, P);
cell!(rx_good_bad: Bad, RxGood => Bad, P);
cell!(rx_good_good: Good, RxGood => Good, P);
cell!(rx_good_partial: Partial, RxGood => Partial, P);
// rx Bad
cell!(rx_bad_unknown: Unknown, RxBad => Bad, P);
cell!(rx_bad_bad: Bad, RxBad => Bad, P);
cell!(rx_bad_good: Good, RxBad => Bad, P);
cell!(rx_bad_partial: Partial, RxBad => Partial, P);
// rx None
cell!(rx_none_unknown: Unknown, RxNone => Unknown, P);
cell!(rx_none_bad: Bad, RxNone => Bad, P);
cell!(rx_none_good: Good, RxNone => Good, P);
cell!(rx_none_partial: Partial, RxNone => Partial, P);
// rx NEEDS_CSUM
cell!(needs_csum_unknown: Unknown, NeedsCsum => Partial, P);
cell!(needs_csum_bad: Bad, NeedsCsum => Bad, P);
cell!(needs_csum_good: Good, NeedsCsum => Partial, P);
cell!(needs_csum_partial: Partial, NeedsCsum => Partial, P);
// covered field (port) rewritten
cell!(port_unknown: Unknown, PortRewrite => Unknown, INC);
cell!(port_bad: Bad, PortRewrite => Bad, INC);
cell!(port_good: Good, PortRewrite => Good, INC);
cell!(port_partial: Partial, PortRewrite => Partial, NOTHING);
// address rewritten: the L4 pseudo-header
cell!(addr_unknown: Unknown, AddrRewrite => Unknown, INC);
cell!(addr_bad: Bad, AddrRewrite => Bad, INC);
cell!(addr_good: Good, AddrRewrite => Good, INC);
cell!(addr_partial: Partial, AddrRewrite => Partial, Out::Fix(Fixup::PseudoSum));
// defer L4
cell!(defer_unknown: Unknown, Defer => Unknown, Out::Refused);
cell!(defer_bad: Bad, Defer => Bad, Out::Refused);
cell!(defer_good: Good, Defer => Partial, Out::Fix(Fixup::Seed));
cell!(defer_partial: Partial, Defer => Partial, NOTHING);
// software recompute
cell!(recompute_unknown: Unknown, Recompute => Good, P);
cell!(recompute_bad: Bad, Recompute => Good, P);
cell!(recompute_good: Good, Recompute => Good, P);
cell!(recompute_partial: Partial, Recompute => Good, P);
// encapsulation: the status moves to the inner slot unchanged
cell!(encap_unknown: Unknown, OuterHeaders => Unknown, P);
cell!(encap_bad: Bad, OuterHeaders => Bad, P);
cell!(encap_good: Good, OuterHeaders => Good, P);
cell!(encap_partial: Partial, OuterHeaders => Partial, P);
// decapsulation: moves back out unchanged
cell!(decap_unknown: Unknown, Decap => Unknown, P);
cell!(decap_bad: Bad, Decap => Bad, P);
cell!(decap_good: Good, Decap => Good, P);
cell!(decap_partial: Partial, Decap => Partial, P);
// VLAN push / pop
cell!(vlan_push_unknown: Unknown, VlanPush => Unknown, P);
cell!(vlan_push_bad: Bad, VlanPush => Bad, P);
cell!(vlan_push_good: Good, VlanPush => Good, P);
cell!(vlan_push_partial: Partial, VlanPush => Partial, P);
cell!(vlan_pop_unknown: Unknown, VlanPop => Unknown, P);
cell!(vlan_pop_bad: Bad, VlanPop => Bad, P);
cell!(vlan_pop_good: Good, VlanPop => Good, P);
cell!(vlan_pop_partial: Partial, VlanPop => Partial, P);

/// The IPv4 header slot in `state` (Partial: an outer header the device fills, after encap).
fn ip_meta_in(state: CsumStatus) -> OffloadMeta {
    let (_, layout) = frames::v4_tcp();
    let mut m = OffloadMeta::from_layout(&layout);
    match state {
        CsumStatus::Unknown => {}
        CsumStatus::Good => m.rx_verdict(Slot::OuterIp, Verdict::Good),
        CsumStatus::Bad => m.rx_verdict(Slot::OuterIp, Verdict::Bad),
        CsumStatus::Partial => m
            .encapsulate(&vxlan_encap(CsumStatus::Partial, TunnelCsum::None))
            .unwrap(),
    }
    assert_eq!(m.status(Slot::OuterIp), state);
    m
}

macro_rules! ip_cell {
    ($name:ident: $from:ident => $fix:ident) => {
        #[test]
        fn $name() {
            let m = ip_meta_in(CsumStatus::$from);
            let before = m;
            assert_eq!(m.ttl_rewritten(Level::Outer).ip, Fixup::$fix);
            assert_eq!(m.dscp_rewritten(Level::Outer).ip, Fixup::$fix);
            assert_eq!(m.l3_addr_rewritten(Level::Outer).ip, Fixup::$fix);
            assert_eq!(m, before);
        }
    };
}

ip_cell!(ip_covered_unknown: Unknown => Incremental);
ip_cell!(ip_covered_bad: Bad => Incremental);
ip_cell!(ip_covered_good: Good => Incremental);
ip_cell!(ip_covered_partial: Partial => Nothing);

#[test]
fn absent_checksum_is_never_touched() {
    let mut m = meta_in(CsumStatus::Unknown);
    m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::None))
        .unwrap();
    assert!(m.csum_absent(Level::Outer));
    assert_eq!(m.status(Slot::OuterL4), CsumStatus::Good);
    assert_eq!(m.l4_field_rewritten(Level::Outer).l4, Fixup::Nothing);
    assert_eq!(m.l3_addr_rewritten(Level::Outer).l4, Fixup::Nothing);
    assert_eq!(m.l4_field_rewritten(Level::Inner).tunnel, Fixup::Nothing);
    assert!(m.l4_checksum_deferred(Level::Outer).is_err());
    // A Bad verdict clears "absent" and sticks.
    m.rx_verdict(Slot::OuterL4, Verdict::Bad);
    assert!(!m.csum_absent(Level::Outer));
    assert_eq!(m.status(Slot::OuterL4), CsumStatus::Bad);
}

#[test]
fn inner_rewrite_moves_the_tunnel_checksum() {
    let mut m = meta_in(CsumStatus::Good);
    m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::Good))
        .unwrap();
    assert_eq!(
        m.l4_field_rewritten(Level::Inner).tunnel,
        Fixup::Incremental
    );
    assert_eq!(m.l4_field_rewritten(Level::Outer).tunnel, Fixup::Nothing);
    let mut p = meta_in(CsumStatus::Good);
    p.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::Partial))
        .unwrap();
    assert_eq!(p.ttl_rewritten(Level::Inner).tunnel, Fixup::Nothing);
}

#[test]
fn partial_location_is_the_innermost() {
    let mut m = meta_in(CsumStatus::Partial);
    m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::Partial))
        .unwrap();
    assert_eq!(m.partial_slot(), Some(Slot::InnerL4));
    assert_eq!((m.csum_start(), m.csum_offset()), (34 + 50, 16));
    // Decap: only the (former inner, now outer) L4 is partial.
    m.decapsulate(50, 0).unwrap();
    assert_eq!(
        (m.partial_slot(), m.csum_start(), m.csum_offset()),
        (Some(Slot::OuterL4), 34, 16)
    );
    // Outer only.
    let mut g = meta_in(CsumStatus::Good);
    g.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::Partial))
        .unwrap();
    assert_eq!(
        (g.partial_slot(), g.csum_start(), g.csum_offset()),
        (Some(Slot::OuterL4), 34, 6)
    );
}

#[test]
fn encap_refuses_a_second_level_and_bad_arguments() {
    let mut m = meta_in(CsumStatus::Good);
    m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::Good))
        .unwrap();
    let before = m;
    assert_eq!(
        m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::Good)),
        Err(crate::Error::AlreadyTunnelled)
    );
    assert_eq!(m, before);
    let mut p = meta_in(CsumStatus::Good);
    assert!(p
        .encapsulate(&vxlan_encap(CsumStatus::Bad, TunnelCsum::Good))
        .is_err());
    assert!(p
        .encapsulate(&vxlan_encap(CsumStatus::Unknown, TunnelCsum::Good))
        .is_err());
    let v6 = OuterHeaders {
        outer_l3_kind: L3Kind::Ipv6,
        ..vxlan_encap(CsumStatus::Partial, TunnelCsum::None)
    };
    assert!(p.encapsulate(&v6).is_err());
    let strip = OuterHeaders {
        strip_l2: true,
        ..vxlan_encap(CsumStatus::Good, TunnelCsum::None)
    };
    assert!(p.encapsulate(&strip).is_err());
    assert_eq!(p, meta_in(CsumStatus::Good));
    assert_eq!(p.decapsulate(50, 0), Err(crate::Error::NotTunnelled));
}

#[test]
fn gre_carrying_ip_strips_l2_and_decap_restores_it() {
    let orig = meta_in(CsumStatus::Good);
    let mut m = orig;
    let enc = OuterHeaders {
        kind: TunnelKind::Gre,
        outer_l3_kind: L3Kind::Ipv4,
        outer_l2: Some(0),
        outer_l3: 14,
        outer_l4: 34,
        pushed: 42,
        strip_l2: true,
        ip_csum: CsumStatus::Good,
        l4_csum: TunnelCsum::Good,
    };
    m.encapsulate(&enc).unwrap();
    let o = m.offsets();
    assert_eq!(
        (o.inner_l2, o.inner_l3, o.inner_l4),
        (None, Some(42), Some(62))
    );
    assert_eq!(m.l4_proto(Level::Outer), Some(ip_proto::GRE));
    assert_eq!(m.status(Slot::InnerL4), CsumStatus::Good);
    m.decapsulate(42, 14).unwrap();
    assert_eq!(m, orig);
}

#[test]
fn rx_needs_csum_must_point_at_an_l4_checksum() {
    let mut m = meta_in(CsumStatus::Unknown);
    assert_eq!(
        m.rx_needs_csum(30, 16),
        Err(crate::Error::PartialNotAtL4 { csum_start: 30 })
    );
    assert!(m.rx_needs_csum(34, 6).is_err());
    assert_eq!(m, meta_in(CsumStatus::Unknown));
}

#[test]
fn rx_checksum_unnecessary_marks_levels() {
    let mut m = meta_in(CsumStatus::Unknown);
    m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::Good))
        .unwrap();
    let mut outer_only = m;
    outer_only.rx_checksum_unnecessary(false);
    assert_eq!(outer_only.status(Slot::InnerL4), CsumStatus::Unknown);
    m.rx_checksum_unnecessary(true);
    for s in Slot::ALL {
        assert_eq!(m.status(s), CsumStatus::Good, "{s:?}");
    }
}

#[test]
fn inner_slots_of_untunnelled_packets_stay_unknown() {
    let mut m = meta_in(CsumStatus::Unknown);
    m.rx_verdict(Slot::InnerL4, Verdict::Good);
    m.checksum_recomputed(Slot::InnerIp);
    assert_eq!(m, meta_in(CsumStatus::Unknown));
}

#[test]
fn gso_fields() {
    let mut m = meta_in(CsumStatus::Partial);
    assert!(m.set_gso(crate::GsoType::TcpV4, 0, false).is_err());
    assert!(m.set_gso(crate::GsoType::None, 1448, false).is_err());
    m.set_gso(crate::GsoType::TcpV4, 1448, true).unwrap();
    assert_eq!(
        (m.gso_type(), m.segment_size(), m.gso_ecn()),
        (crate::GsoType::TcpV4, 1448, true)
    );
    m.encapsulate(&vxlan_encap(CsumStatus::Good, TunnelCsum::None))
        .unwrap();
    assert_eq!(m.segment_size(), 1448);
}

#[test]
fn vlan_pop_needs_a_tag() {
    let mut m = meta_in(CsumStatus::Good);
    assert!(m.vlan_popped(4).is_err());
    m.vlan_pushed(4).unwrap();
    assert_eq!(m.offsets().outer_l4, Some(38));
    m.vlan_pushed(4).unwrap();
    m.vlan_popped(8).unwrap();
    assert_eq!(m, meta_in(CsumStatus::Good));
}
