//! Packet actions: what a rule does to a packet's headers before it is output.
//!
//! [`apply`] carries out one header-changing [`Action`] (everything but `Output` and `Drop`,
//! which the datapath handles) on a [`PacketBuf`], and keeps `pkt.meta` (checksum statuses,
//! header offsets, the partial checksum location, the GSO request) describing the new frame:
//!
//! - **VLAN** (`PushVlan`, `PopVlan`): a 4-byte tag is inserted or removed right after the MAC
//!   addresses (the outermost position), moving only the 12 address bytes into or out of the
//!   headroom. Tags lie outside every checksum: statuses are untouched, offsets move
//!   ([`OffloadMeta::vlan_pushed`] / [`OffloadMeta::vlan_popped`]). GSO super-packets and
//!   partial-checksum packets are handled alike.
//! - **Set-field** (`SetEth*`, `SetIpv4*`, `SetIpv6*`, `SetTtl`, `SetDscp`, `SetTp*`): through
//!   [`sluice_packet::rewrite`], on the **outer** (or only) headers. Every checksum covering the
//!   change moves by RFC 1624, so `Good` stays good, `Bad` stays exactly as bad, and a `Partial`
//!   L4 checksum keeps a correct pseudo-header seed.
//! - **Encapsulation** (`Encap`): VXLAN, Geneve or GRE (RFC 2890 key, transparent Ethernet
//!   bridging) over IPv4 or IPv6, with outer headers written into the headroom (no payload
//!   byte moves). The outer UDP checksum is zero, computed, or left `Partial` (seeded with the
//!   pseudo-header sum) for a GSO or partial-checksum inner packet, which is what transmit
//!   preparation and software GSO expect. [`OffloadMeta::encapsulate`] moves the statuses.
//! - **Decapsulation** (`Decap`): the outer headers up to the inner Ethernet header are pulled
//!   off; [`OffloadMeta::decapsulate`] makes the inner statuses the outer ones. A bad outer
//!   checksum is a drop ([`ActionError::BadOuterChecksum`]), as in Linux, where the UDP (or IP)
//!   layer checks it before the tunnel sees the packet: an outer checksum whose status is
//!   `Unknown` is verified in software first ([`DECAP_OUTER_CSUM_CHECKED`]), so an unchecked bad
//!   outer checksum is never discarded with the outer headers as if it had been good.
//!
//! Every action also keeps the [`Layout`] the packet carries (see [`PacketBuf::layout_for`])
//! describing the new frame without parsing it again: a pushed or popped tag moves it
//! ([`Layout::tag_pushed`], [`Layout::tag_popped`]), an encapsulation parses only the outer
//! headers it wrote ([`sluice_wire::parse_encapsulated`]), a decapsulation makes the inner
//! stack the outer one ([`Layout::decapsulated`]), and set-field actions, which move no
//! header, leave it as it is — except `SetTpDst`, after which a UDP port may mean a tunnel:
//! the layout is forgotten and parsed again where it is next needed.
//!
//! Every action checks everything before it writes: on `Err` neither the frame nor the
//! metadata has changed. Nothing is allocated (header bytes are built in stack arrays and
//! written into the headroom; a buffer without enough headroom is moved once by
//! [`PacketBuf::push`]).
//!
//! A packet whose metadata is the default (nothing known: no offsets) gets its offsets from a
//! parse of the frame first; otherwise the metadata is trusted to describe the frame (as
//! [`crate::port::rx_meta`] makes it). See `docs/actions.md` for the full semantics.

use crate::buf::PacketBuf;
use core::fmt;
use sluice_checksum::{pseudo, sum_from};
use sluice_coverage::counter;
use sluice_flow::{Action, TunnelEncap};
use sluice_packet::meta::{OuterHeaders, TunnelCsum};
use sluice_packet::{rewrite, verify, CsumStatus, GsoType, Level, OffloadMeta, Slot};
use sluice_wire::bytes::{read_u16, write_bytes};
use sluice_wire::{
    ethertype, ip_proto, L3Kind, Layout, ParseConfig, TunnelKind, GENEVE_PORT, MAX_VLAN_DEPTH,
    VXLAN_PORT,
};
use std::net::IpAddr;

counter!(pub DECAP_OUTER_CSUM_CHECKED, "decap_outer_csum_checked", "decapsulations whose unknown outer checksums were verified in software first");
counter!(pub DECAP_BAD_OUTER_CSUM, "decap_bad_outer_csum", "decapsulations refused: the outer IPv4 header or L4 checksum is bad");

/// Ethernet header length (no tags).
const ETH_LEN: usize = 14;
/// VLAN tag length.
const TAG_LEN: usize = 4;
/// Offset of the first TPID / the EtherType in an Ethernet header.
const ETHERTYPE_AT: usize = 12;
/// Outer IPv4 TTL / IPv6 hop limit of an encapsulation (Linux's default for tunnels).
const OUTER_TTL: u8 = 64;
/// The most bytes an IP payload may have (IPv4 total length less the header; IPv6 payload
/// length).
const MAX_IP_PAYLOAD: usize = 65535;
/// Outer UDP source ports of an encapsulation: the dynamic range (RFC 6335), as RFC 7348
/// recommends.
const SRC_PORT_MIN: u16 = 49152;
/// Largest outer UDP source port.
const SRC_PORT_MAX: u16 = 65535;
/// Longest outer header stack built: Ethernet + IPv6 + UDP + Geneve (8) = 78 bytes.
const MAX_ENCAP: usize = ETH_LEN + 40 + 8 + 8;

/// Why an action could not be applied (the packet is then dropped and counted). The packet is
/// unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ActionError {
    /// The packet lacks the header the action needs.
    Missing(&'static str),
    /// `Output` or `Drop` (the datapath's own), or an action this version does not know.
    NotHeaderAction(&'static str),
    /// The frame is shorter than the action needs.
    TooShort {
        /// The action.
        action: &'static str,
        /// Bytes needed.
        need: usize,
        /// Frame length.
        have: usize,
    },
    /// `PushVlan` with a TPID that is not a VLAN tag type the parser recognises (0x8100,
    /// 0x88a8, 0x9100).
    UnsupportedTpid(u16),
    /// `PushVlan` on a frame that already has the most tags the parser accepts.
    TooManyTags {
        /// Tags already present.
        depth: usize,
    },
    /// `PopVlan` on an untagged frame.
    NoVlanTag,
    /// The header rewrite or metadata transition refused the packet (the inner error says why).
    Packet {
        /// The action.
        action: &'static str,
        /// Why.
        error: sluice_packet::Error,
    },
    /// `SetTpDst` would move the outer UDP destination port of a VXLAN/Geneve packet off the
    /// tunnel's port, so the frame would no longer parse as the tunnel its metadata records.
    TunnelPortChange {
        /// The tunnel.
        kind: TunnelKind,
        /// The refused port.
        port: u16,
    },
    /// `Encap` on a packet that already has a tunnel (one level only).
    AlreadyTunnelled,
    /// `Decap` on a packet without a tunnel.
    NotTunnelled,
    /// `Encap` with a source and destination of different IP versions.
    AddressFamilyMismatch {
        /// Outer source.
        src: IpAddr,
        /// Outer destination.
        dst: IpAddr,
    },
    /// `Encap` with a VNI wider than 24 bits (VXLAN, Geneve).
    IdOutOfRange {
        /// The tunnel.
        kind: TunnelKind,
        /// The refused id.
        id: u32,
    },
    /// The encapsulated packet would be longer than an IP packet can be.
    TooLong {
        /// IP payload bytes the outer packet would carry.
        payload: usize,
        /// The limit.
        max: usize,
    },
    /// `Decap` of a tunnel whose payload is not an Ethernet frame (GRE carrying IP).
    NotEthernet {
        /// The tunnel.
        kind: TunnelKind,
    },
    /// `Decap` of a packet whose outer checksum is known bad: dropped, as Linux's UDP (or IP)
    /// layer drops it before the tunnel sees it.
    BadOuterChecksum(Slot),
}

impl fmt::Display for ActionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActionError::Missing(h) => write!(f, "no {h} header"),
            ActionError::NotHeaderAction(a) => write!(f, "{a} is not a header action"),
            ActionError::TooShort { action, need, have } => {
                write!(f, "{action}: frame of {have} bytes, need {need}")
            }
            ActionError::UnsupportedTpid(t) => {
                write!(
                    f,
                    "push_vlan: TPID {t:#06x} is not 0x8100, 0x88a8 or 0x9100"
                )
            }
            ActionError::TooManyTags { depth } => write!(
                f,
                "push_vlan: frame already has {depth} tags (at most {MAX_VLAN_DEPTH})"
            ),
            ActionError::NoVlanTag => write!(f, "pop_vlan: frame has no VLAN tag"),
            ActionError::Packet { action, error } => write!(f, "{action}: {error}"),
            ActionError::TunnelPortChange { kind, port } => write!(
                f,
                "set_tp_dst: port {port} is not a {} port of this switch",
                kind.name()
            ),
            ActionError::AlreadyTunnelled => {
                write!(f, "encap: packet is already tunnelled (one level only)")
            }
            ActionError::NotTunnelled => write!(f, "decap: packet is not tunnelled"),
            ActionError::AddressFamilyMismatch { src, dst } => {
                write!(
                    f,
                    "encap: outer source {src} and destination {dst} differ in IP version"
                )
            }
            ActionError::IdOutOfRange { kind, id } => {
                write!(f, "encap: {} VNI {id} does not fit 24 bits", kind.name())
            }
            ActionError::TooLong { payload, max } => {
                write!(
                    f,
                    "encap: outer IP payload of {payload} bytes exceeds {max}"
                )
            }
            ActionError::NotEthernet { kind } => {
                write!(f, "decap: {} tunnel does not carry Ethernet", kind.name())
            }
            ActionError::BadOuterChecksum(slot) => {
                write!(f, "decap: outer checksum ({slot:?}) is bad")
            }
        }
    }
}

impl std::error::Error for ActionError {}

/// The name of an action, as errors report it.
pub fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Output(_) => "output",
        Action::Drop => "drop",
        Action::PushVlan { .. } => "push_vlan",
        Action::PopVlan => "pop_vlan",
        Action::SetEthSrc(_) => "set_eth_src",
        Action::SetEthDst(_) => "set_eth_dst",
        Action::SetIpv4Src(_) => "set_ipv4_src",
        Action::SetIpv4Dst(_) => "set_ipv4_dst",
        Action::SetIpv6Src(_) => "set_ipv6_src",
        Action::SetIpv6Dst(_) => "set_ipv6_dst",
        Action::SetTtl(_) => "set_ttl",
        Action::SetDscp(_) => "set_dscp",
        Action::SetTpSrc(_) => "set_tp_src",
        Action::SetTpDst(_) => "set_tp_dst",
        Action::Encap(_) => "encap",
        Action::Decap => "decap",
        _ => "unknown action",
    }
}

/// Applies one header-changing action (anything but `Output` and `Drop`) to `pkt`, keeping
/// `pkt.meta` right. On error the packet (frame and metadata) is unchanged.
///
/// `cfg` is the switch's parse configuration: it gives the VXLAN/Geneve UDP ports (the first
/// of each set is the destination port of an encapsulation) and is used to parse frames whose
/// metadata is the default.
///
/// ```
/// use sluice_datapath::{actions::apply, PacketBuf};
/// use sluice_flow::Action;
/// use sluice_wire::ParseConfig;
/// let frame = [
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// let mut pkt = PacketBuf::from_frame(&frame);
/// let push = Action::PushVlan { tpid: 0x88a8, tci: 200 };
/// apply(&mut pkt, &push, &ParseConfig::DEFAULT).unwrap();
/// assert_eq!(pkt.frame()[12..16], [0x88, 0xa8, 0x00, 200]);
/// assert_eq!(pkt.meta.offsets().l3(sluice_packet::Level::Outer), Some(18)); // metadata follows
/// apply(&mut pkt, &Action::PopVlan, &ParseConfig::DEFAULT).unwrap();
/// assert_eq!(pkt.frame(), &frame[..]);
/// ```
pub fn apply(pkt: &mut PacketBuf, action: &Action, cfg: &ParseConfig) -> Result<(), ActionError> {
    let meta = effective_meta(pkt, cfg);
    let had = pkt.whole_layout(cfg).is_some();
    let r = apply_with(pkt, action, cfg, meta, had);
    // Set-field actions move no header: the layout carried before stands (after a refusal
    // too, the frame being unchanged). Not `SetTpDst`: a UDP port can mean a tunnel.
    let moves_no_header = matches!(
        action,
        Action::SetEthSrc(_)
            | Action::SetEthDst(_)
            | Action::SetIpv4Src(_)
            | Action::SetIpv4Dst(_)
            | Action::SetIpv6Src(_)
            | Action::SetIpv6Dst(_)
            | Action::SetTtl(_)
            | Action::SetDscp(_)
            | Action::SetTpSrc(_)
    );
    if moves_no_header {
        pkt.follow_layout(had, |_, _| true);
    }
    r
}

/// [`apply`] once the metadata is known (`had`: a whole layout for `cfg` is carried).
fn apply_with(
    pkt: &mut PacketBuf,
    action: &Action,
    cfg: &ParseConfig,
    meta: OffloadMeta,
    had: bool,
) -> Result<(), ActionError> {
    let name = action_name(action);
    match *action {
        Action::PushVlan { tpid, tci } => {
            push_vlan(pkt, meta, tpid, tci)?;
            pkt.follow_layout(had, |_, l| l.tag_pushed(tpid, tci));
            Ok(())
        }
        Action::PopVlan => {
            pop_vlan(pkt, meta)?;
            pkt.follow_layout(had, |_, l| l.tag_popped());
            Ok(())
        }
        Action::SetEthSrc(mac) => set_eth(pkt, meta, 6, mac, name),
        Action::SetEthDst(mac) => set_eth(pkt, meta, 0, mac, name),
        Action::SetIpv4Src(a) => set_field(pkt, meta, name, |f, m| {
            rewrite::set_ipv4_src(f, m, Level::Outer, a)
        }),
        Action::SetIpv4Dst(a) => set_field(pkt, meta, name, |f, m| {
            rewrite::set_ipv4_dst(f, m, Level::Outer, a)
        }),
        Action::SetIpv6Src(a) => set_field(pkt, meta, name, |f, m| {
            rewrite::set_ipv6_src(f, m, Level::Outer, a)
        }),
        Action::SetIpv6Dst(a) => set_field(pkt, meta, name, |f, m| {
            rewrite::set_ipv6_dst(f, m, Level::Outer, a)
        }),
        Action::SetTtl(t) => set_field(pkt, meta, name, |f, m| {
            rewrite::set_ttl(f, m, Level::Outer, t)
        }),
        Action::SetDscp(d) => set_field(pkt, meta, name, |f, m| {
            rewrite::set_dscp(f, m, Level::Outer, d)
        }),
        Action::SetTpSrc(p) => set_field(pkt, meta, name, |f, m| {
            rewrite::set_ports(f, m, Level::Outer, Some(p), None)
        }),
        Action::SetTpDst(p) => {
            if let Some(kind @ (TunnelKind::Vxlan | TunnelKind::Geneve)) = meta.tunnel() {
                if !tunnel_ports(cfg, kind).contains(&p) {
                    return Err(ActionError::TunnelPortChange { kind, port: p });
                }
            }
            // The layout is not kept: a UDP destination port decides whether the parser
            // walks into a tunnel.
            set_field(pkt, meta, name, |f, m| {
                rewrite::set_ports(f, m, Level::Outer, None, Some(p))
            })
        }
        Action::Encap(ref e) => encap(pkt, meta, e, cfg),
        Action::Decap => decap(pkt, meta, cfg),
        _ => Err(ActionError::NotHeaderAction(name)),
    }
}

/// The packet's metadata, or, when it is the default (nothing known), metadata from its
/// layout (carried, or parsed and then carried; all statuses `Unknown`, so nothing is lost).
fn effective_meta(pkt: &mut PacketBuf, cfg: &ParseConfig) -> OffloadMeta {
    if pkt.meta == OffloadMeta::default() {
        let (_, layout, _) = pkt.parse_layout(cfg);
        OffloadMeta::from_layout(layout)
    } else {
        pkt.meta
    }
}

fn packet_err(action: &'static str) -> impl Fn(sluice_packet::Error) -> ActionError {
    move |error| ActionError::Packet { action, error }
}

fn too_short(action: &'static str, need: usize, have: usize) -> ActionError {
    ActionError::TooShort { action, need, have }
}

/// Number of VLAN tags after the MAC addresses (counting stops past [`MAX_VLAN_DEPTH`]).
fn tag_depth(frame: &[u8]) -> usize {
    let mut n = 0;
    while n <= MAX_VLAN_DEPTH {
        match read_u16(frame, ETHERTYPE_AT + TAG_LEN * n) {
            Some(t) if ethertype::is_vlan_tpid(t) => n += 1,
            _ => break,
        }
    }
    n
}

// ---- VLAN ----

fn push_vlan(
    pkt: &mut PacketBuf,
    mut meta: OffloadMeta,
    tpid: u16,
    tci: u16,
) -> Result<(), ActionError> {
    if !ethertype::is_vlan_tpid(tpid) {
        return Err(ActionError::UnsupportedTpid(tpid));
    }
    let frame = pkt.frame();
    if frame.len() < ETH_LEN {
        return Err(too_short("push_vlan", ETH_LEN, frame.len()));
    }
    let depth = tag_depth(frame);
    if depth >= MAX_VLAN_DEPTH {
        return Err(ActionError::TooManyTags { depth });
    }
    meta.vlan_pushed(TAG_LEN as u16)
        .map_err(packet_err("push_vlan"))?;
    let [a, b] = tpid.to_be_bytes();
    let [c, d] = tci.to_be_bytes();
    let have = pkt.len();
    let gap = pkt
        .insert(ETHERTYPE_AT, TAG_LEN)
        .ok_or_else(|| too_short("push_vlan", ETH_LEN, have))?;
    gap.copy_from_slice(&[a, b, c, d]);
    pkt.meta = meta;
    Ok(())
}

fn pop_vlan(pkt: &mut PacketBuf, mut meta: OffloadMeta) -> Result<(), ActionError> {
    let frame = pkt.frame();
    match read_u16(frame, ETHERTYPE_AT) {
        Some(t) if ethertype::is_vlan_tpid(t) => {}
        Some(_) => return Err(ActionError::NoVlanTag),
        None => return Err(too_short("pop_vlan", ETH_LEN, frame.len())),
    }
    if frame.len() < ETH_LEN + TAG_LEN {
        return Err(too_short("pop_vlan", ETH_LEN + TAG_LEN, frame.len()));
    }
    meta.vlan_popped(TAG_LEN as u16)
        .map_err(packet_err("pop_vlan"))?;
    if !pkt.remove(ETHERTYPE_AT, TAG_LEN) {
        return Err(too_short("pop_vlan", ETH_LEN + TAG_LEN, pkt.len()));
    }
    pkt.meta = meta;
    Ok(())
}

// ---- set-field ----

fn set_eth(
    pkt: &mut PacketBuf,
    meta: OffloadMeta,
    at: usize,
    mac: [u8; 6],
    action: &'static str,
) -> Result<(), ActionError> {
    // An L3 packet (a TUN port's) has no MAC addresses to set: refused, not written over
    // its IP header.
    let l2 = usize::from(
        meta.offsets()
            .outer_l2
            .ok_or(ActionError::Missing("Ethernet header"))?,
    );
    let have = pkt.len();
    let field = pkt
        .frame_mut()
        .get_mut(l2 + at..l2 + at + 6)
        .filter(|_| have >= l2 + ETH_LEN)
        .ok_or_else(|| too_short(action, l2 + ETH_LEN, have))?;
    field.copy_from_slice(&mac);
    pkt.meta = meta;
    Ok(())
}

/// Runs a rewrite of the outer headers (statuses never change; the metadata is stored in case it
/// was derived from a parse).
fn set_field(
    pkt: &mut PacketBuf,
    meta: OffloadMeta,
    action: &'static str,
    f: impl FnOnce(&mut [u8], &OffloadMeta) -> Result<(), sluice_packet::Error>,
) -> Result<(), ActionError> {
    f(pkt.frame_mut(), &meta).map_err(packet_err(action))?;
    pkt.meta = meta;
    Ok(())
}

/// The UDP destination ports of a tunnel kind in the switch's configuration.
fn tunnel_ports(cfg: &ParseConfig, kind: TunnelKind) -> &[u16] {
    match kind {
        TunnelKind::Vxlan => cfg.vxlan_ports.as_slice(),
        TunnelKind::Geneve => cfg.geneve_ports.as_slice(),
        TunnelKind::Gre => &[],
    }
}

/// The destination port of a new VXLAN/Geneve tunnel: the first configured port, else the IANA
/// one.
fn tunnel_dst_port(cfg: &ParseConfig, kind: TunnelKind) -> u16 {
    let default = match kind {
        TunnelKind::Geneve => GENEVE_PORT,
        _ => VXLAN_PORT,
    };
    tunnel_ports(cfg, kind).first().copied().unwrap_or(default)
}

// ---- encapsulation ----

/// The outer UDP source port for a flow hash: scaled into `SRC_PORT_MIN..=SRC_PORT_MAX` by a
/// multiply-shift (as Linux's `udp_flow_src_port` does), so every port of the range is used
/// evenly.
pub fn src_port_from_hash(hash: u32) -> u16 {
    let span = u64::from(SRC_PORT_MAX - SRC_PORT_MIN) + 1;
    let off = (u64::from(hash) * span) >> 32;
    SRC_PORT_MIN + u16::try_from(off).unwrap_or(0)
}

/// A hash of the inner flow: the IP addresses and protocol and the L4 ports (TCP, UDP, SCTP;
/// not of later fragments), or the MAC addresses for a frame without an IP header. FNV-1a with
/// a final avalanche (MurmurHash3's `fmix32`), deterministic across runs.
///
/// **Symmetric**: a flow's two directions (addresses and ports swapped) hash alike, the two
/// endpoints (address, then port) taken in a fixed order, as the kernel's symmetric flow hash
/// (`__skb_get_hash_symmetric`, which `PACKET_FANOUT_HASH` uses) orders them. The MAC
/// addresses of an IP packet are left out, so a routed overlay whose two directions carry
/// different MAC pairs (a gateway's address on both sides) still hashes alike. So, when both
/// tunnel ends are Sluice, a flow's two directions get one outer source port, and a receiver
/// that spreads tunnel frames by their outer flow (the `PACKET_FANOUT` hash of a hop's far
/// port) hands a flow's data and its acknowledgements to one thread, not to two that pass its
/// bytes between their caches.
pub fn inner_flow_hash(frame: &[u8], layout: &Layout) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    let o = &layout.outer;
    // The two endpoints (address, port), source first.
    let addrs = match (o.l3, o.l3_kind) {
        (Some(l3), Some(L3Kind::Ipv4)) => Some((l3 + 12, 4)),
        (Some(l3), Some(L3Kind::Ipv6)) => Some((l3 + 8, 16)),
        _ => None,
    };
    let a = |at: usize, len: usize| frame.get(at..at + len).unwrap_or(&[]);
    let (mut src, mut dst) = match addrs {
        Some((at, len)) => ((a(at, len), &[][..]), (a(at + len, len), &[][..])),
        // No IP header: the MAC addresses are the endpoints.
        None => ((a(6, 6), &[][..]), (a(0, 6), &[][..])),
    };
    if let Some(p) = o.l4_proto {
        let ports = matches!(p, ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP);
        if let (true, false, Some(l4)) = (ports, o.is_later_fragment, o.l4) {
            if frame.len() >= l4 + 4 {
                src.1 = a(l4, 2);
                dst.1 = a(l4 + 2, 2);
            }
        }
    }
    if src > dst {
        std::mem::swap(&mut src, &mut dst);
    }
    eat(src.0);
    eat(dst.0);
    if let Some(p) = o.l4_proto {
        eat(&[p]);
    }
    eat(src.1);
    eat(dst.1);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The outer addresses of an encapsulation.
#[derive(Clone, Copy)]
enum Outer {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

impl Outer {
    /// The outer addresses of `e`, checked: one address family, and a VNI that fits 24 bits
    /// (VXLAN, Geneve).
    fn of(e: &TunnelEncap) -> Result<Outer, ActionError> {
        let outer = match (e.src, e.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Outer::V4(s.octets(), d.octets()),
            (IpAddr::V6(s), IpAddr::V6(d)) => Outer::V6(s.octets(), d.octets()),
            (src, dst) => return Err(ActionError::AddressFamilyMismatch { src, dst }),
        };
        if e.kind != TunnelKind::Gre && e.id > 0x00ff_ffff {
            return Err(ActionError::IdOutOfRange {
                kind: e.kind,
                id: e.id,
            });
        }
        Ok(outer)
    }

    fn ip_len(self) -> usize {
        match self {
            Outer::V4(..) => 20,
            Outer::V6(..) => 40,
        }
    }

    fn kind(self) -> L3Kind {
        match self {
            Outer::V4(..) => L3Kind::Ipv4,
            Outer::V6(..) => L3Kind::Ipv6,
        }
    }

    /// Writes the outer IP header at `l3` of `h`: `total` bytes of IP packet (IPv4) or
    /// `payload` bytes after the fixed header (IPv6), with the IPv4 header checksum.
    fn write_ip(
        self,
        h: &mut [u8],
        l3: usize,
        l4_proto: u8,
        total: usize,
        payload: u16,
    ) -> Result<(), ActionError> {
        match self {
            Outer::V4(s, d) => {
                let [t0, t1] = u16::try_from(total).unwrap_or(u16::MAX).to_be_bytes();
                // Version/IHL, TOS, total length, ID 0, DF, TTL, protocol, checksum 0 for now.
                put(
                    h,
                    l3,
                    &[0x45, 0, t0, t1, 0, 0, 0x40, 0, OUTER_TTL, l4_proto, 0, 0],
                )?;
                put(h, l3 + 12, &s)?;
                put(h, l3 + 16, &d)?;
                let c = h
                    .get(l3..l3 + 20)
                    .map(sluice_checksum::checksum)
                    .unwrap_or(0);
                put(h, l3 + 10, &c.to_be_bytes())
            }
            Outer::V6(s, d) => {
                let [p0, p1] = payload.to_be_bytes();
                put(h, l3, &[0x60, 0, 0, 0, p0, p1, l4_proto, OUTER_TTL])?;
                put(h, l3 + 8, &s)?;
                put(h, l3 + 24, &d)
            }
        }
    }

    /// Pseudo-header sum (uncomplemented) for an L4 length.
    fn pseudo(self, proto: u8, len: u16) -> u16 {
        match self {
            Outer::V4(s, d) => pseudo::ipv4(s, d, proto, len),
            Outer::V6(s, d) => pseudo::ipv6(&s, &d, proto, u32::from(len)),
        }
    }
}

fn encap(
    pkt: &mut PacketBuf,
    mut meta: OffloadMeta,
    e: &TunnelEncap,
    cfg: &ParseConfig,
) -> Result<(), ActionError> {
    if meta.tunnel().is_some() {
        return Err(ActionError::AlreadyTunnelled);
    }
    let outer = Outer::of(e)?;
    if pkt.len() < ETH_LEN {
        return Err(too_short("encap", ETH_LEN, pkt.len()));
    }
    // The layout carried from receive (or a parse, then carried): read, not parsed again.
    let (frame, layout, whole) = pkt.parse_layout(cfg);
    // A tunnel the parser walks into (not merely UDP to a tunnel port carrying something else).
    if layout.tunnel.is_some() && layout.inner.is_some() {
        return Err(ActionError::AlreadyTunnelled);
    }
    if meta.offsets().outer_l2 != Some(0) {
        return Err(ActionError::Missing("outer Ethernet (metadata)"));
    }

    let ip_len = outer.ip_len();
    let (l4_proto, l4_hdr) = match e.kind {
        TunnelKind::Vxlan | TunnelKind::Geneve => (ip_proto::UDP, 16),
        TunnelKind::Gre => (ip_proto::GRE, 8),
    };
    let inner_len = frame.len();
    let l4_len = l4_hdr + inner_len;
    let payload = match outer {
        Outer::V4(..) => ip_len + l4_len,
        Outer::V6(..) => l4_len,
    };
    let l4_len16 = u16::try_from(l4_len)
        .ok()
        .filter(|_| payload <= MAX_IP_PAYLOAD);
    let Some(l4_len16) = l4_len16 else {
        return Err(ActionError::TooLong {
            payload,
            max: MAX_IP_PAYLOAD,
        });
    };
    let pushed = ETH_LEN + ip_len + l4_hdr;
    let l3 = ETH_LEN;
    let l4 = ETH_LEN + ip_len;

    let mut hdr = [0u8; MAX_ENCAP];
    let h = hdr.get_mut(..pushed).ok_or(ActionError::Missing("room"))?;
    // Ethernet: the inner frame's addresses (the switch has no ARP or neighbour table).
    let macs = frame
        .get(..12)
        .ok_or(too_short("encap", ETH_LEN, frame.len()))?;
    put(h, 0, macs)?;
    let et = match outer {
        Outer::V4(..) => ethertype::IPV4,
        Outer::V6(..) => ethertype::IPV6,
    };
    put(h, 12, &et.to_be_bytes())?;
    outer.write_ip(h, l3, l4_proto, ip_len + l4_len, l4_len16)?;
    let sport = src_port_from_hash(inner_flow_hash(frame, layout));
    write_tunnel_header(h, l4, e, sport, tunnel_dst_port(cfg, e.kind), l4_len16)?;

    let l4_csum = outer_udp_checksum(h, l4, e, outer, &meta, frame, l4_len16)?;

    let as_u16 = |v: usize| u16::try_from(v).unwrap_or(u16::MAX);
    meta.encapsulate(&OuterHeaders {
        kind: e.kind,
        outer_l3_kind: outer.kind(),
        outer_l2: Some(0),
        outer_l3: as_u16(l3),
        outer_l4: as_u16(l4),
        pushed: as_u16(pushed),
        strip_l2: false,
        ip_csum: CsumStatus::Good,
        l4_csum,
    })
    .map_err(|error| match error {
        sluice_packet::Error::AlreadyTunnelled => ActionError::AlreadyTunnelled,
        error => ActionError::Packet {
            action: "encap",
            error,
        },
    })?;
    pkt.push(pushed).copy_from_slice(h);
    pkt.meta = meta;
    // The new layout: the outer headers just written parsed, the inner one moved.
    pkt.follow_layout(whole, |f, l| {
        match sluice_wire::parse_encapsulated(f, cfg, l, pushed) {
            Some(after) => {
                *l = after;
                true
            }
            None => false,
        }
    });
    Ok(())
}

/// Writes the outer UDP checksum of the headers `h` (UDP at `l4`) over the inner `frame`, and
/// returns its status. A zero UDP checksum over IPv6 is only allowed for tunnels by RFC 6935
/// when configured; like Linux by default (udp6zerocsumtx off), it is computed.
fn outer_udp_checksum(
    h: &mut [u8],
    l4: usize,
    e: &TunnelEncap,
    outer: Outer,
    meta: &OffloadMeta,
    frame: &[u8],
    l4_len: u16,
) -> Result<TunnelCsum, ActionError> {
    match e.kind {
        TunnelKind::Gre => return Ok(TunnelCsum::None),
        _ if !e.udp_csum && matches!(outer, Outer::V4(..)) => return Ok(TunnelCsum::None),
        _ => {}
    }
    // The inner packet is not final (segmented later, or a checksum the device fills): seed
    // the pseudo-header sum and leave the outer checksum to transmit preparation.
    let not_final = meta.gso_type() != GsoType::None
        || meta.status(Slot::OuterIp) == CsumStatus::Partial
        || meta.status(Slot::OuterL4) == CsumStatus::Partial;
    let ph = outer.pseudo(ip_proto::UDP, l4_len);
    if not_final {
        put(h, l4 + 6, &ph.to_be_bytes())?;
        return Ok(TunnelCsum::Partial);
    }
    let s = h.get(l4..).map_or(ph, |u| sum_from(ph, u));
    let c = !sum_from(s, frame);
    let c = if c == 0 { 0xffff } else { c };
    put(h, l4 + 6, &c.to_be_bytes())?;
    Ok(TunnelCsum::Good)
}

/// Writes the tunnel header at `l4` of `h`: the outer UDP header (checksum 0 for now) and
/// VXLAN or Geneve, or GRE with its key.
fn write_tunnel_header(
    h: &mut [u8],
    l4: usize,
    e: &TunnelEncap,
    sport: u16,
    dport: u16,
    l4_len: u16,
) -> Result<(), ActionError> {
    let vni = (e.id << 8).to_be_bytes();
    let teb = ethertype::TEB.to_be_bytes();
    match e.kind {
        TunnelKind::Vxlan | TunnelKind::Geneve => {
            put(h, l4, &sport.to_be_bytes())?;
            put(h, l4 + 2, &dport.to_be_bytes())?;
            put(h, l4 + 4, &l4_len.to_be_bytes())?;
            if e.kind == TunnelKind::Vxlan {
                // Flags: I (VNI valid); VNI in bytes 4..7.
                put(h, l4 + 8, &[0x08, 0, 0, 0])?;
            } else {
                // Version 0, no options, O and C clear, protocol: Ethernet.
                put(h, l4 + 8, &[0, 0, teb[0], teb[1]])?;
            }
            put(h, l4 + 12, &vni)
        }
        TunnelKind::Gre => {
            // RFC 2890: K bit, version 0, protocol: Ethernet, key.
            put(h, l4, &[0x20, 0, teb[0], teb[1]])?;
            put(h, l4 + 4, &e.id.to_be_bytes())
        }
    }
}

/// Copies `src` into the outer-header array `buf` at `at`. The callers size the array for the
/// headers they write, so an out-of-range write is a bug: an error, never dropped.
fn put(buf: &mut [u8], at: usize, src: &[u8]) -> Result<(), ActionError> {
    write_bytes(buf, at, src).map_err(|_| ActionError::Missing("room for the outer headers"))
}

// ---- decapsulation ----

fn decap(pkt: &mut PacketBuf, mut meta: OffloadMeta, cfg: &ParseConfig) -> Result<(), ActionError> {
    let kind = meta.tunnel().ok_or(ActionError::NotTunnelled)?;
    verify_unknown_outer(pkt, &mut meta, cfg);
    for slot in [Slot::OuterIp, Slot::OuterL4] {
        if meta.status(slot) == CsumStatus::Bad {
            DECAP_BAD_OUTER_CSUM.inc();
            return Err(ActionError::BadOuterChecksum(slot));
        }
    }
    let o = meta.offsets();
    let inner_l2 = o.inner_l2.ok_or(ActionError::NotEthernet { kind })?;
    let at = usize::from(inner_l2);
    let frame = pkt.frame();
    if kind == TunnelKind::Gre {
        let gre = usize::from(o.outer_l4.ok_or(ActionError::Missing("GRE"))?);
        if read_u16(frame, gre + 2) != Some(ethertype::TEB) {
            return Err(ActionError::NotEthernet { kind });
        }
    }
    if frame.len() < at + ETH_LEN {
        return Err(too_short("decap", at + ETH_LEN, frame.len()));
    }
    // The layout once the outer headers are off, worked out while they are still there (and
    // only when it puts the inner Ethernet header where the metadata does).
    let after = match pkt.parse_layout(cfg) {
        (frame, l, true) if l.inner.and_then(|h| h.l2) == Some(at) => l.decapsulated(frame, cfg),
        _ => None,
    };
    meta.decapsulate(inner_l2, 0).map_err(|error| match error {
        sluice_packet::Error::NotTunnelled => ActionError::NotTunnelled,
        error => ActionError::Packet {
            action: "decap",
            error,
        },
    })?;
    if !pkt.pull(at) {
        return Err(too_short("decap", at + ETH_LEN, pkt.len()));
    }
    pkt.meta = meta;
    if let Some(l) = after {
        pkt.set_layout(&l, true, cfg);
    }
    Ok(())
}

/// Verifies in software the outer IPv4 header and L4 checksums whose status is `Unknown`
/// (nothing has checked them: a device that reported nothing, a frame from a capture), and
/// records the verdicts in `meta`. `Good`, `Bad` and `Partial` statuses are left alone: they are
/// already known (`Partial`: built locally, the checksum is still to be filled in).
///
/// The outer L4 checksum of a packet with a `Partial` slot is not summed: such a packet was built
/// by a trusted local sender (virtio `NEEDS_CSUM`), its inner checksum field still holds only the
/// pseudo-header seed, so the bytes cannot verify yet, and Linux likewise treats a
/// `CHECKSUM_PARTIAL` packet's checksums as valid (`skb_csum_unnecessary`).
fn verify_unknown_outer(pkt: &mut PacketBuf, meta: &mut OffloadMeta, cfg: &ParseConfig) {
    let ip = meta.status(Slot::OuterIp) == CsumStatus::Unknown;
    let l4 = meta.status(Slot::OuterL4) == CsumStatus::Unknown
        && !meta.csum_absent(Level::Outer)
        && meta.partial_slot().is_none();
    if !ip && !l4 {
        return;
    }
    DECAP_OUTER_CSUM_CHECKED.inc();
    let (frame, layout, _) = pkt.parse_layout(cfg);
    if ip {
        meta.rx_verdict(Slot::OuterIp, verify::verify_ip(frame, &layout.outer));
    }
    if l4 {
        let udp_tunnel = meta.tunnel().is_some_and(TunnelKind::is_udp);
        let (verdict, _) = verify::verify_l4(frame, &layout.outer, udp_tunnel);
        meta.rx_verdict(Slot::OuterL4, verdict);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn src_port_covers_the_range() {
        assert_eq!(src_port_from_hash(0), SRC_PORT_MIN);
        assert_eq!(src_port_from_hash(u32::MAX), SRC_PORT_MAX);
        assert_eq!(src_port_from_hash(1 << 31), 49152 + 8192);
    }

    #[test]
    fn tag_depth_counts_known_tpids() {
        let mut f = [0u8; 30];
        f[12..14].copy_from_slice(&[0x88, 0xa8]);
        f[16..18].copy_from_slice(&[0x81, 0x00]);
        f[20..22].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(tag_depth(&f), 2);
        assert_eq!(tag_depth(&f[..13]), 0);
    }
}
