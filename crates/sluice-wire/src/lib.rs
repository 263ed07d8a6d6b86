//! Wire formats for Sluice: zero-copy header views and builders, and a bounded frame parser.
//!
//! Every header module follows the same contract (after smoltcp): `Packet<T: AsRef<[u8]>>` is a
//! zero-copy view over a buffer; `Packet::new_checked` validates the length so that afterwards no
//! accessor panics; setters exist for `T: AsMut<[u8]>` and return [`bytes::OutOfRange`] for a field
//! that does not fit the buffer (never a dropped write); a `Repr` is the parsed, validated form with
//! `parse`, `emit` and `buffer_len`. [`parse`] reads header fields through these views, so each
//! module's field offsets are the only ones.
//!
//! [`bytes`] holds the checked big-endian reads and writes (`Option` on a short read,
//! [`bytes::OutOfRange`] on a write that does not fit) that the views and the other Sluice crates
//! share.
//!
//! [`parse`] walks a whole frame (Ethernet — or, with [`LinkType::Ip`], an IP packet with no L2
//! header, as TUN devices and raw-IP captures carry — a VLAN stack of up to [`MAX_VLAN_DEPTH`] tags, IPv4 or
//! IPv6 with extension headers, TCP/UDP/SCTP/ICMP/ICMPv6, and one level of VXLAN/Geneve/GRE
//! tunnelling) and returns a [`Layout`] of offsets. Malformed input yields a [`ParseError`] naming
//! the layer, the offset and the reason; this crate never panics on packet bytes.
#![deny(unsafe_code)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

#[macro_use]
mod view;

pub mod bytes;
pub mod error;
pub mod layout;

pub mod ethernet;
pub mod geneve;
pub mod gre;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod sctp;
pub mod tcp;
pub mod udp;
pub mod vlan;
pub mod vxlan;

pub use error::{ParseError, Reason};
pub use layout::{
    parse, parse_encapsulated, parse_into, parse_partial, parse_with, Headers, L3Kind, Layer,
    LayerList, Layout, LinkType, ParseConfig, PortSet, Tunnel, TunnelKind, VlanStack, VlanTag,
    MAX_IPV6_EXT, MAX_LAYERS, MAX_VLAN_DEPTH,
};

/// EtherType values Sluice understands.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q customer VLAN tag (C-tag).
    pub const VLAN_8021Q: u16 = 0x8100;
    /// 802.1ad service VLAN tag (S-tag).
    pub const VLAN_8021AD: u16 = 0x88a8;
    /// Pre-standard QinQ tag used by some vendors.
    pub const VLAN_9100: u16 = 0x9100;
    /// Transparent Ethernet bridging (GRE carrying Ethernet).
    pub const TEB: u16 = 0x6558;

    /// Whether `t` is one of the VLAN TPIDs Sluice treats as a tag.
    pub const fn is_vlan_tpid(t: u16) -> bool {
        matches!(t, VLAN_8021Q | VLAN_8021AD | VLAN_9100)
    }
}

/// IP protocol numbers Sluice understands.
pub mod ip_proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPTS: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// IPv4-in-IP.
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6-in-IP.
    pub const IPV6: u8 = 41;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// GRE.
    pub const GRE: u8 = 47;
    /// IPsec ESP.
    pub const ESP: u8 = 50;
    /// IPsec authentication header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// No next header.
    pub const NONE: u8 = 59;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// Default UDP destination port of VXLAN (RFC 7348).
pub const VXLAN_PORT: u16 = 4789;
/// Default UDP destination port of Geneve (RFC 8926).
pub const GENEVE_PORT: u16 = 6081;

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
