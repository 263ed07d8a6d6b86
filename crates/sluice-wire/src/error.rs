//! Typed parse errors: which layer, at which byte offset of the frame, and why.

use crate::layout::Layer;
use core::fmt;

/// Why a header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Fewer bytes remain than the header's fixed part needs.
    Truncated {
        /// Bytes the header needs.
        need: usize,
        /// Bytes that remain in the frame from the header's offset.
        have: usize,
    },
    /// IPv4 IHL below 5 (header shorter than 20 bytes).
    BadIhl(u8),
    /// The IP version nibble does not match the EtherType / next protocol.
    BadVersion(u8),
    /// IPv4 total length (or IPv6 payload length) is smaller than the header or larger than the frame.
    BadTotalLength {
        /// Length the header claims (bytes, whole IP packet).
        claimed: usize,
        /// Bytes actually available from the IP header on.
        available: usize,
    },
    /// TCP data offset below 5 or beyond the segment.
    BadDataOffset(u8),
    /// UDP length field smaller than 8 or larger than the IP payload.
    BadUdpLength(u16),
    /// More VLAN tags than [`crate::MAX_VLAN_DEPTH`].
    TooManyVlanTags,
    /// More IPv6 extension headers than [`crate::MAX_IPV6_EXT`].
    TooManyExtensionHeaders,
    /// An option or extension header whose length runs past its container.
    OptionOverflow,
    /// A Geneve header whose option length runs past the packet.
    GeneveOptionOverflow,
    /// A field that must be zero or fixed is not (e.g. GRE version, VXLAN I flag).
    BadField(&'static str),
    /// More than one level of tunnelling (Sluice parses one tunnel).
    NestedTunnel,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Truncated { need, have } => {
                write!(f, "truncated: need {need} bytes, have {have}")
            }
            Reason::BadIhl(ihl) => write!(f, "IHL {ihl} is below 5"),
            Reason::BadVersion(v) => write!(f, "IP version {v} does not match"),
            Reason::BadTotalLength { claimed, available } => {
                write!(
                    f,
                    "length {claimed} does not fit the {available} bytes available"
                )
            }
            Reason::BadDataOffset(d) => write!(f, "TCP data offset {d} is invalid"),
            Reason::BadUdpLength(l) => write!(f, "UDP length {l} is invalid"),
            Reason::TooManyVlanTags => write!(f, "more than {} VLAN tags", crate::MAX_VLAN_DEPTH),
            Reason::TooManyExtensionHeaders => {
                write!(
                    f,
                    "more than {} IPv6 extension headers",
                    crate::MAX_IPV6_EXT
                )
            }
            Reason::OptionOverflow => write!(f, "option runs past the header"),
            Reason::GeneveOptionOverflow => write!(f, "Geneve option length runs past the packet"),
            Reason::BadField(name) => write!(f, "invalid {name}"),
            Reason::NestedTunnel => write!(f, "nested tunnel not parsed"),
        }
    }
}

/// A header could not be parsed: the layer, its offset in the frame, and the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParseError {
    /// The layer whose header is malformed.
    pub layer: Layer,
    /// Byte offset of that header from the start of the frame.
    pub offset: usize,
    /// What is wrong with it.
    pub reason: Reason,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at offset {}: {}",
            self.layer.name(),
            self.offset,
            self.reason
        )
    }
}

impl std::error::Error for ParseError {}
