//! Software checksum verification of a parsed frame.
//!
//! [`verify_frame`] checks, for the outer stack and (when tunnelled) the inner one: the IPv4
//! header checksum, and the L4 checksum — TCP and UDP with their IPv4/IPv6 pseudo-header, SCTP
//! (CRC32c), ICMP (no pseudo-header), ICMPv6 (pseudo-header), and the GRE checksum when the C bit
//! is set (over the GRE header and its payload). The IP packet ends at the layout's `l3_end`
//! (IPv4 total length / IPv6 payload length), so Ethernet padding is never summed; a UDP
//! datagram ends where its length field says.
//!
//! Zero UDP checksums: over IPv4 a zero means "no checksum" ([`Verdict::None`], flagged
//! absent). Over IPv6 it is invalid (RFC 8200, so [`Verdict::Bad`]), except for the outer UDP of
//! a VXLAN/Geneve tunnel, where RFC 6935 allows it and Linux accepts it: `None`, absent.
//!
//! Never panics: a layout that does not fit the frame yields `None` verdicts. The IPv6 pseudo
//! header uses the destination address of the IPv6 header (a routing header's final destination
//! is not looked up).

use crate::calc::{self, L4Region};
use sluice_wire::bytes::read_u16;
use sluice_wire::{ip_proto, Headers, L3Kind, Layout, TunnelKind};

/// The result of checking one checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Verdict {
    /// Nothing was checked: the header has no checksum (IPv6, UDP with checksum 0 where allowed,
    /// GRE without the C bit), there is no such header, or it cannot be verified (a fragment's
    /// L4, a truncated header, a layout that does not fit the frame).
    #[default]
    None,
    /// The checksum is correct.
    Good,
    /// The checksum is wrong.
    Bad,
}

/// The verdicts for the four checksum slots of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Verdicts {
    /// Outer (or only) IPv4 header checksum.
    pub ip: Verdict,
    /// Outer (or only) L4 checksum.
    pub l4: Verdict,
    /// Inner IPv4 header checksum.
    pub inner_ip: Verdict,
    /// Inner L4 checksum.
    pub inner_l4: Verdict,
    /// The outer L4 header carries no checksum by design (UDP zero where allowed, GRE without the
    /// C bit); `l4` is then `None`.
    pub l4_absent: bool,
    /// The inner L4 header carries no checksum by design; `inner_l4` is then `None`.
    pub inner_l4_absent: bool,
}

/// Verifies every checksum of `frame` described by `layout`.
///
/// ```
/// use sluice_packet::verify::{verify_frame, Verdict};
/// let mut frame = vec![
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// let layout = sluice_wire::parse(&frame).unwrap();
/// let v = verify_frame(&frame, &layout);
/// assert_eq!(v.ip, Verdict::Bad); // the IPv4 header checksum field is zero
/// assert_eq!((v.l4, v.l4_absent), (Verdict::None, true)); // UDP checksum 0: none, over IPv4
///
/// let csum = sluice_checksum::checksum(&frame[14..34]);
/// frame[24..26].copy_from_slice(&csum.to_be_bytes());
/// assert_eq!(verify_frame(&frame, &layout).ip, Verdict::Good);
/// ```
pub fn verify_frame(frame: &[u8], layout: &Layout) -> Verdicts {
    let udp_tunnel = matches!(
        layout.tunnel.map(|t| t.kind),
        Some(TunnelKind::Vxlan | TunnelKind::Geneve)
    );
    let (l4, l4_absent) = verify_l4(frame, &layout.outer, udp_tunnel);
    let (inner_ip, (inner_l4, inner_l4_absent)) = match &layout.inner {
        Some(h) => (verify_ip(frame, h), verify_l4(frame, h, false)),
        None => (Verdict::None, (Verdict::None, false)),
    };
    Verdicts {
        ip: verify_ip(frame, &layout.outer),
        l4,
        inner_ip,
        inner_l4,
        l4_absent,
        inner_l4_absent,
    }
}

/// Verifies the IPv4 header checksum of one header stack (`None` for IPv6 or no IP header).
pub fn verify_ip(frame: &[u8], h: &Headers) -> Verdict {
    match (h.l3, h.l3_kind) {
        (Some(l3), Some(L3Kind::Ipv4)) => to_verdict(calc::ipv4_header_ok(frame, l3)),
        _ => Verdict::None,
    }
}

/// Verifies the L4 checksum of one header stack. `udp_tunnel`: this UDP header carries a UDP
/// tunnel (VXLAN/Geneve), so a zero checksum over IPv6 is allowed (RFC 6935). Returns the verdict
/// and whether the checksum is absent by design.
pub fn verify_l4(frame: &[u8], h: &Headers, udp_tunnel: bool) -> (Verdict, bool) {
    l4_inner(frame, h, udp_tunnel).unwrap_or((Verdict::None, false))
}

fn l4_inner(frame: &[u8], h: &Headers, udp_tunnel: bool) -> Option<(Verdict, bool)> {
    if h.is_fragment {
        return None;
    }
    let (l3, kind, l4, proto, end) = (h.l3?, h.l3_kind?, h.l4?, h.l4_proto?, h.l3_end?);
    // The layout's end must agree with the IP header itself, or the layout does not fit.
    if calc::l3_end(frame, l3, kind)? != end {
        return None;
    }
    if proto == ip_proto::GRE && frame.get(l4)? & 0x80 == 0 {
        return Some((Verdict::None, true));
    }
    let region = L4Region::new(frame, l3, kind, l4, proto, end)?;
    match proto {
        ip_proto::SCTP => {
            let ok = region.sctp_crc(frame)? == region.sctp_stored(frame)?;
            Some((if ok { Verdict::Good } else { Verdict::Bad }, false))
        }
        ip_proto::UDP if read_u16(frame, region.field)? == 0 => match kind {
            L3Kind::Ipv4 => Some((Verdict::None, true)),
            L3Kind::Ipv6 if udp_tunnel => Some((Verdict::None, true)),
            L3Kind::Ipv6 => Some((Verdict::Bad, false)),
        },
        _ => Some((to_verdict(Some(region.sum_as_is(frame)? == 0xffff)), false)),
    }
}

fn to_verdict(ok: Option<bool>) -> Verdict {
    match ok {
        Some(true) => Verdict::Good,
        Some(false) => Verdict::Bad,
        None => Verdict::None,
    }
}
