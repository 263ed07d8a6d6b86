//! The frame parser and its result, [`Layout`]: offsets of every header, outer and inner.
//!
//! Offsets are byte offsets from the start of the frame. The parser is bounded: at most
//! [`MAX_VLAN_DEPTH`] tags per L2 header, [`MAX_IPV6_EXT`] IPv6 extension headers per IPv6 header,
//! one tunnel level, and so at most [`MAX_LAYERS`] layers; it allocates nothing.

use crate::error::{ParseError, Reason};

/// Most VLAN tags parsed in one L2 header.
pub const MAX_VLAN_DEPTH: usize = 8;
/// Most IPv6 extension headers walked in one IPv6 header.
pub const MAX_IPV6_EXT: usize = 8;
/// Most layers a [`Layout`] can record (two full header stacks plus a tunnel header).
pub const MAX_LAYERS: usize = 48;

/// One protocol layer, as listed in [`Layout::layers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layer {
    /// Ethernet II header.
    Eth,
    /// One VLAN tag (any TPID).
    Vlan,
    /// IPv4 header (with options).
    Ipv4,
    /// IPv6 fixed header.
    Ipv6,
    /// One IPv6 extension header; the value is its protocol number (0, 43, 44, 51, 60).
    Ipv6Ext(u8),
    /// TCP header (with options).
    Tcp,
    /// UDP header.
    Udp,
    /// SCTP common header.
    Sctp,
    /// ICMP header.
    Icmp,
    /// ICMPv6 header.
    Icmpv6,
    /// VXLAN header.
    Vxlan,
    /// Geneve header (with options).
    Geneve,
    /// GRE header (with optional checksum, key, sequence).
    Gre,
}

impl Layer {
    /// The layer's short name as `sluice pcap inspect` prints it (`eth`, `vlan`, `ipv6-ext`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Eth => "eth",
            Layer::Vlan => "vlan",
            Layer::Ipv4 => "ipv4",
            Layer::Ipv6 => "ipv6",
            Layer::Ipv6Ext(_) => "ipv6-ext",
            Layer::Tcp => "tcp",
            Layer::Udp => "udp",
            Layer::Sctp => "sctp",
            Layer::Icmp => "icmp",
            Layer::Icmpv6 => "icmpv6",
            Layer::Vxlan => "vxlan",
            Layer::Geneve => "geneve",
            Layer::Gre => "gre",
        }
    }
}

/// A fixed-capacity list of `(layer, offset)` pairs, outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerList {
    items: [(Layer, u16); MAX_LAYERS],
    len: u8,
}

impl Default for LayerList {
    fn default() -> Self {
        LayerList { items: [(Layer::Eth, 0); MAX_LAYERS], len: 0 }
    }
}

impl LayerList {
    /// Appends a layer; returns `false` (and records nothing) when full.
    pub fn push(&mut self, layer: Layer, offset: usize) -> bool {
        let i = usize::from(self.len);
        match (self.items.get_mut(i), u16::try_from(offset)) {
            (Some(slot), Ok(off)) => {
                *slot = (layer, off);
                self.len += 1;
                true
            }
            _ => false,
        }
    }

    /// The recorded layers with their offsets, outermost first.
    pub fn as_slice(&self) -> &[(Layer, u16)] {
        self.items.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// Number of layers recorded.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether no layer was recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One VLAN tag: TPID and the tag control information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Tag protocol identifier (0x8100, 0x88a8 or 0x9100).
    pub tpid: u16,
    /// Priority code point (0–7).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (0–4095).
    pub vid: u16,
}

impl VlanTag {
    /// Builds a tag from its TPID and 16-bit TCI.
    pub const fn from_tci(tpid: u16, tci: u16) -> Self {
        VlanTag { tpid, pcp: (tci >> 13) as u8, dei: tci & 0x1000 != 0, vid: tci & 0x0fff }
    }

    /// The 16-bit tag control information.
    pub const fn tci(&self) -> u16 {
        ((self.pcp as u16 & 7) << 13) | if self.dei { 0x1000 } else { 0 } | (self.vid & 0x0fff)
    }
}

/// A stack of up to [`MAX_VLAN_DEPTH`] VLAN tags, outermost first; no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanStack {
    tags: [VlanTag; MAX_VLAN_DEPTH],
    len: u8,
}

impl VlanStack {
    /// Appends an inner tag; returns `false` when the stack is full.
    pub fn push(&mut self, tag: VlanTag) -> bool {
        match self.tags.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = tag;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// The tags, outermost first.
    pub fn as_slice(&self) -> &[VlanTag] {
        self.tags.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// Number of tags.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there is no tag.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The network-layer protocol of a header stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L3Kind {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

/// The tunnel encapsulation between the outer and the inner headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// VXLAN over UDP.
    Vxlan,
    /// Geneve over UDP.
    Geneve,
    /// GRE over IP.
    Gre,
}

impl TunnelKind {
    /// Short name (`vxlan`, `geneve`, `gre`).
    pub const fn name(self) -> &'static str {
        match self {
            TunnelKind::Vxlan => "vxlan",
            TunnelKind::Geneve => "geneve",
            TunnelKind::Gre => "gre",
        }
    }
}

/// A parsed tunnel header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tunnel {
    /// Which encapsulation.
    pub kind: TunnelKind,
    /// Offset of the tunnel header (VXLAN/Geneve/GRE) in the frame.
    pub offset: usize,
    /// Length of the tunnel header including options.
    pub len: usize,
    /// VNI (VXLAN, Geneve) or GRE key, when present.
    pub id: Option<u32>,
    /// For GRE: the protocol type it carries (0x6558 Ethernet, 0x0800, 0x86dd); for VXLAN and Geneve
    /// Ethernet 0x6558 (Geneve's protocol type field).
    pub proto: u16,
}

/// Offsets of one header stack (the outer one, or the one inside a tunnel).
///
/// `l2` is `None` only for an inner stack carried by GRE without Ethernet; `l3`/`l4`/`payload`
/// are `None` when the frame does not carry (or does not reach) that layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Headers {
    /// Offset of the Ethernet header.
    pub l2: Option<usize>,
    /// The VLAN tags after the Ethernet addresses, outermost first.
    pub vlans: VlanStack,
    /// The EtherType after the last VLAN tag (or the GRE protocol type when there is no L2).
    pub ethertype: u16,
    /// Offset of the IP header.
    pub l3: Option<usize>,
    /// IPv4 or IPv6.
    pub l3_kind: Option<L3Kind>,
    /// Offset of the L4 header (after any IPv6 extension headers).
    pub l4: Option<usize>,
    /// The transport protocol number (IPv4 protocol / last IPv6 next header), when an IP header
    /// was parsed.
    pub l4_proto: Option<u8>,
    /// Offset of the first byte after the L4 header (or after L3 when there is no known L4).
    pub payload: Option<usize>,
    /// Offset one past the last byte of the IP packet (IPv4 total length / IPv6 payload length);
    /// bytes beyond it are Ethernet padding.
    pub l3_end: Option<usize>,
    /// The IP packet is a fragment (IPv4 MF or offset, or an IPv6 fragment header).
    pub is_fragment: bool,
    /// The fragment offset is non-zero, so no L4 header is present in this fragment.
    pub is_later_fragment: bool,
}

/// Where each header of a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// The outer (or only) header stack.
    pub outer: Headers,
    /// The tunnel header, when the outer L4 carries VXLAN/Geneve or the outer IP carries GRE.
    pub tunnel: Option<Tunnel>,
    /// The header stack inside the tunnel.
    pub inner: Option<Headers>,
    /// Every layer, outermost first, with its offset.
    pub layers: LayerList,
}

impl Layout {
    /// The innermost header stack (inner if tunnelled, else outer).
    pub fn innermost(&self) -> &Headers {
        self.inner.as_ref().unwrap_or(&self.outer)
    }
}

/// A small fixed set of UDP ports (at most [`PortSet::CAPACITY`]); no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortSet {
    ports: [u16; PortSet::CAPACITY],
    len: u8,
}

impl PortSet {
    /// How many ports a set holds.
    pub const CAPACITY: usize = 8;

    /// The empty set.
    pub const EMPTY: PortSet = PortSet { ports: [0; PortSet::CAPACITY], len: 0 };

    /// A set of one port.
    pub const fn one(port: u16) -> Self {
        let mut ports = [0; PortSet::CAPACITY];
        ports[0] = port;
        PortSet { ports, len: 1 }
    }

    /// Adds a port; returns `false` when the set is full (a port already present is kept once).
    pub fn insert(&mut self, port: u16) -> bool {
        if self.contains(port) {
            return true;
        }
        match self.ports.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = port;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Whether `port` is in the set.
    pub fn contains(&self, port: u16) -> bool {
        self.as_slice().contains(&port)
    }

    /// The ports.
    pub fn as_slice(&self) -> &[u16] {
        self.ports.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

/// Parser settings: which UDP destination ports mean VXLAN and Geneve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseConfig {
    /// UDP destination ports decoded as VXLAN (default: 4789).
    pub vxlan_ports: PortSet,
    /// UDP destination ports decoded as Geneve (default: 6081).
    pub geneve_ports: PortSet,
    /// Whether to descend into tunnels at all (default: true).
    pub parse_tunnels: bool,
}

impl ParseConfig {
    /// The default configuration: VXLAN on 4789, Geneve on 6081, tunnels parsed.
    pub const DEFAULT: ParseConfig = ParseConfig {
        vxlan_ports: PortSet::one(crate::VXLAN_PORT),
        geneve_ports: PortSet::one(crate::GENEVE_PORT),
        parse_tunnels: true,
    };
}

impl Default for ParseConfig {
    fn default() -> Self {
        ParseConfig::DEFAULT
    }
}

/// Parses an Ethernet frame with the default [`ParseConfig`].
pub fn parse(frame: &[u8]) -> Result<Layout, ParseError> {
    parse_with(frame, &ParseConfig::DEFAULT)
}

/// Parses an Ethernet frame with the given configuration.
pub fn parse_with(frame: &[u8], cfg: &ParseConfig) -> Result<Layout, ParseError> {
    let (layout, err) = parse_partial(frame, cfg);
    match err {
        Some(e) => Err(e),
        None => Ok(layout),
    }
}

/// Parses as far as possible: the layout of everything parsed before the first error, and that
/// error if there was one. Used by tools that report on malformed frames.
pub fn parse_partial(frame: &[u8], cfg: &ParseConfig) -> (Layout, Option<ParseError>) {
    let _ = (frame, cfg, Reason::NestedTunnel);
    unimplemented!("parser lands in the wire task")
}
