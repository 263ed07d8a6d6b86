//! The frame parser and its result, [`Layout`]: offsets of every header, outer and inner.
//!
//! Offsets are byte offsets from the start of the frame. The parser is bounded: at most
//! [`MAX_VLAN_DEPTH`] tags per L2 header, [`MAX_IPV6_EXT`] IPv6 extension headers per IPv6 header,
//! one tunnel level, and so at most [`MAX_LAYERS`] layers; it allocates nothing.
//!
//! # What is parsed
//!
//! - With [`LinkType::Ip`] (TUN, raw-IP captures) the frame starts at an IP header whose version
//!   nibble picks IPv4 or IPv6; there is no L2 header and the walk goes on as below from L3.
//! - Ethernet II (14 bytes), then VLAN tags while the EtherType is a TPID (0x8100, 0x88a8,
//!   0x9100). A tag's [`Layer::Vlan`] offset is the offset of its TPID field (12 for the first
//!   tag), so that the tag's 4 bytes are TPID and TCI, as 802.1Q draws them. An 802.3 length or an
//!   unknown EtherType ends the walk without an error.
//! - IPv4 (version, IHL, total length, option TLVs, fragment fields) and IPv6 (version, payload
//!   length, jumbograms, and up to [`MAX_IPV6_EXT`] hop-by-hop / routing / fragment /
//!   destination-options / AH headers, each listed as [`Layer::Ipv6Ext`]). Bytes after the IP
//!   packet are Ethernet padding: they are in no layer and [`Headers::l3_end`] excludes them. A
//!   non-first fragment has no L4 header; ESP, no-next-header and unknown protocols have their
//!   number in [`Headers::l4_proto`], no `l4`, and `payload` at their first byte.
//! - TCP (data offset), UDP (length), SCTP, ICMP and ICMPv6, all bounded by the IP packet.
//! - One tunnel level when [`ParseConfig::parse_tunnels`] is set: VXLAN and Geneve by UDP
//!   destination port, GRE by IP protocol 47 (GRE is then the outer L4). Inside the tunnel the
//!   same walk runs again, bounded by the UDP datagram (VXLAN, Geneve) or the outer IP packet
//!   (GRE), with tunnels off: a nested VXLAN/Geneve is plain UDP and a nested GRE is an opaque
//!   protocol (`l4_proto` 47, no `l4`).
//!
//! # Guarantees
//!
//! - No panic and no out-of-bounds read on any input: every read is checked.
//! - Every offset in the result is at most the frame length, and the offsets in
//!   [`Layout::layers`] strictly increase.
//! - Work is linear in the number of header bytes and bounded by the limits above.
//! - On error, [`parse_partial`] returns everything parsed before the failing header; the failing
//!   header is not in the layout, and the [`ParseError`] names its layer and absolute offset.
//!   For an L4 or IPv6 extension header, `have` in [`Reason::Truncated`] counts the bytes up to
//!   the end of the IP packet, and for a tunnel header or the inner stack up to the end of the
//!   carrying UDP datagram or IP packet: a header cut by a length field is truncated even when
//!   the frame goes on (with padding).

use crate::error::{ParseError, Reason};

mod edit;
use crate::{ethernet, geneve, gre, ipv4, ipv6, tcp, udp, vlan, vxlan};
pub use edit::parse_encapsulated;

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

/// A fixed-capacity list of `(layer, offset)` pairs, outermost first. Two lists are equal
/// when their recorded layers are (whatever the unused capacity holds).
#[derive(Debug, Clone, Copy, Eq)]
pub struct LayerList {
    items: [(Layer, u16); MAX_LAYERS],
    len: u8,
}

impl PartialEq for LayerList {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Default for LayerList {
    fn default() -> Self {
        LayerList {
            items: [(Layer::Eth, 0); MAX_LAYERS],
            len: 0,
        }
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
        VlanTag {
            tpid,
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
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

    /// Whether the tunnel rides on UDP (VXLAN, Geneve), so its outer L4 is a UDP header.
    pub const fn is_udp(self) -> bool {
        matches!(self, TunnelKind::Vxlan | TunnelKind::Geneve)
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
    /// The protocol the tunnel carries: for GRE and Geneve their protocol type field (0x6558
    /// Ethernet, 0x0800 IPv4, 0x86dd IPv6, or another value the parser does not descend into); for
    /// VXLAN always 0x6558 (Ethernet).
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
    /// Empties the layout in place, as [`Layout::default`] would (the layer list's unused
    /// capacity is left as it is: cheaper, and equality ignores it).
    #[inline]
    pub fn clear(&mut self) {
        self.outer = Headers::default();
        self.tunnel = None;
        self.inner = None;
        self.layers.len = 0;
    }

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
    pub const EMPTY: PortSet = PortSet {
        ports: [0; PortSet::CAPACITY],
        len: 0,
    };

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

/// What a frame starts with: the link type of the packets handed to the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LinkType {
    /// An Ethernet II header (TAP, veth, `AF_PACKET`; pcap link type 1).
    #[default]
    Ethernet,
    /// An IP header with no L2 header before it (TUN, pcap link types RAW 101, IPV4 228,
    /// IPV6 229): the version nibble of the first byte picks IPv4 (4) or IPv6 (6); any other
    /// value is [`Reason::BadVersion`] at offset 0. [`Headers::l2`] is `None` and
    /// [`Headers::ethertype`] the EtherType the version stands for.
    Ip,
}

/// Parser settings: what a frame starts with, and which UDP destination ports mean VXLAN and
/// Geneve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseConfig {
    /// UDP destination ports decoded as VXLAN (default: 4789).
    pub vxlan_ports: PortSet,
    /// UDP destination ports decoded as Geneve (default: 6081).
    pub geneve_ports: PortSet,
    /// Whether to descend into tunnels at all (default: true).
    pub parse_tunnels: bool,
    /// What the frame starts with (default: [`LinkType::Ethernet`]).
    pub link: LinkType,
}

impl ParseConfig {
    /// The default configuration: VXLAN on 4789, Geneve on 6081, tunnels parsed.
    pub const DEFAULT: ParseConfig = ParseConfig {
        vxlan_ports: PortSet::one(crate::VXLAN_PORT),
        geneve_ports: PortSet::one(crate::GENEVE_PORT),
        parse_tunnels: true,
        link: LinkType::Ethernet,
    };

    /// The default configuration for L3 packets (TUN, raw-IP captures): frames start at an IP
    /// header ([`LinkType::Ip`]); VXLAN on 4789, Geneve on 6081, tunnels parsed.
    pub const L3: ParseConfig = ParseConfig::DEFAULT.with_link(LinkType::Ip);

    /// This configuration with frames starting as `link` says.
    pub const fn with_link(self, link: LinkType) -> ParseConfig {
        ParseConfig { link, ..self }
    }

    /// The default configuration with more VXLAN and Geneve UDP ports (the defaults stay).
    /// The error names the tunnel whose [`PortSet`] is full: `too many VXLAN ports (at most N)`.
    pub fn with_tunnel_ports(vxlan: &[u16], geneve: &[u16]) -> Result<ParseConfig, String> {
        let mut cfg = ParseConfig::DEFAULT;
        for (ports, set, what) in [
            (vxlan, &mut cfg.vxlan_ports, "VXLAN"),
            (geneve, &mut cfg.geneve_ports, "Geneve"),
        ] {
            if !ports.iter().all(|&p| set.insert(p)) {
                return Err(format!(
                    "too many {what} ports (at most {})",
                    PortSet::CAPACITY
                ));
            }
        }
        Ok(cfg)
    }
}

impl Default for ParseConfig {
    fn default() -> Self {
        ParseConfig::DEFAULT
    }
}

/// Parses an Ethernet frame with the default [`ParseConfig`] (for an L3 packet, use
/// [`parse_with`] and [`ParseConfig::L3`]).
///
/// ```
/// use sluice_wire::{parse, L3Kind, Layer};
/// let frame = [
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// let layout = parse(&frame).unwrap();
/// let outer = layout.outer;
/// assert_eq!((outer.l2, outer.l3), (Some(0), Some(14)));
/// assert_eq!((outer.l4, outer.payload), (Some(34), Some(42)));
/// assert_eq!(outer.l3_kind, Some(L3Kind::Ipv4));
/// assert_eq!(outer.l4_proto, Some(17));
/// assert_eq!(layout.layers.as_slice(), &[(Layer::Eth, 0), (Layer::Ipv4, 14), (Layer::Udp, 34)]);
/// assert!(layout.tunnel.is_none());
///
/// // Malformed bytes give an error naming the layer and offset, never a panic.
/// let err = parse(&frame[..40]).unwrap_err();
/// assert_eq!((err.layer, err.offset), (Layer::Ipv4, 14));
/// ```
#[inline]
pub fn parse(frame: &[u8]) -> Result<Layout, ParseError> {
    parse_with(frame, &ParseConfig::DEFAULT)
}

/// Parses a frame (Ethernet, or an IP packet with [`LinkType::Ip`]) with the given
/// configuration.
///
/// ```
/// use sluice_wire::{parse, parse_with, ParseConfig, TunnelKind};
/// // VXLAN (VNI 42) on UDP port 8472, as Linux's default vxlan port, carrying an Ethernet frame.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0, 50, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0xc0, 0x00, 0x21, 0x18, 0, 30, 0, 0]); // UDP 49152 -> 8472, length 30
/// frame.extend([0x08, 0, 0, 0, 0, 0, 42, 0]); // VXLAN, I flag, VNI 42
/// frame.extend([0x02, 0, 0, 0, 0, 0x04, 0x02, 0, 0, 0, 0, 0x03, 0x88, 0xb5]); // inner Ethernet
///
/// assert!(parse(&frame).unwrap().tunnel.is_none()); // 8472 is not VXLAN by default
/// let cfg = ParseConfig::with_tunnel_ports(&[8472], &[]).unwrap();
/// let layout = parse_with(&frame, &cfg).unwrap();
/// let tunnel = layout.tunnel.unwrap();
/// assert_eq!((tunnel.kind, tunnel.offset, tunnel.id), (TunnelKind::Vxlan, 42, Some(42)));
/// assert_eq!(layout.inner.unwrap().l2, Some(50));
/// assert_eq!(layout.innermost().ethertype, 0x88b5);
/// ```
#[inline]
pub fn parse_with(frame: &[u8], cfg: &ParseConfig) -> Result<Layout, ParseError> {
    // Not via `parse_partial`, which would copy the layout once more.
    let mut layout = Layout::default();
    walk(frame, cfg, &mut layout)?;
    Ok(layout)
}

/// [`parse_partial`] into an existing layout (cleared first): no layout is built and moved,
/// which matters where a layout is kept with its packet. Returns the error, if any.
///
/// ```
/// use sluice_wire::{parse, parse_into, Layout, ParseConfig};
/// let frame = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5, 0xde, 0xad];
/// let mut layout = Layout::default();
/// assert!(parse_into(&frame, &ParseConfig::DEFAULT, &mut layout).is_none());
/// assert_eq!(layout, parse(&frame).unwrap());
/// ```
#[inline]
pub fn parse_into(frame: &[u8], cfg: &ParseConfig, layout: &mut Layout) -> Option<ParseError> {
    layout.clear();
    walk(frame, cfg, layout).err()
}

/// Parses as far as possible: the layout of everything parsed before the first error, and that
/// error if there was one. Used by tools that report on malformed frames.
///
/// A header that fails to parse is not part of the returned [`Layout`]: `layers` lists the headers
/// before it, and the offsets of its stack ([`Headers`]) stay as they were before it. (Values that
/// belong to an earlier header are kept, e.g. `l4_proto` is the IP protocol field even when the L4
/// header behind it is truncated.) When the error is inside a tunnel, `outer` and `tunnel` are
/// complete and `inner` holds what was parsed of the inner stack.
///
/// ```
/// use sluice_wire::{parse_partial, Layer, ParseConfig};
/// let frame = [
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// // Cut inside the UDP header: Ethernet and IPv4 are fine, the IPv4 length overruns the frame.
/// let (layout, err) = parse_partial(&frame[..40], &ParseConfig::DEFAULT);
/// assert_eq!(layout.layers.as_slice(), &[(Layer::Eth, 0)]);
/// assert_eq!(err.map(|e| e.layer), Some(Layer::Ipv4));
/// ```
#[inline]
pub fn parse_partial(frame: &[u8], cfg: &ParseConfig) -> (Layout, Option<ParseError>) {
    let mut layout = Layout::default();
    let err = walk(frame, cfg, &mut layout).err();
    (layout, err)
}

// ---------------------------------------------------------------------------------------------
// The walk. Each header function takes `buf`, the bytes this header may use (the frame, cut to
// the end of the enclosing IP packet or UDP datagram), and the header's absolute offset in it;
// because `buf` always starts at frame offset 0, offsets need no translation between layers.
// Every read goes through `fixed` or `slice::get`, so no input can make the parser index out of
// bounds; every loop advances by at least one byte per iteration and most are capped by a count.
// ---------------------------------------------------------------------------------------------

/// Where a header stack starts.
#[derive(Clone, Copy)]
enum Start {
    /// An Ethernet header at this offset.
    Eth(usize),
    /// An IP header at this offset with no L2 header; the value is its EtherType.
    Ip(usize, u16),
}

/// What follows a parsed header stack.
enum Next {
    /// Nothing more to parse.
    Done,
    /// A tunnel header; and, when its payload is a protocol the parser descends into, where the
    /// inner stack starts and the end (exclusive) of the bytes it may use.
    Tunnel(Tunnel, Option<(Start, usize)>),
}

/// Where an L4 header starts, as found by the IP layer.
struct L4Start {
    proto: u8,
    offset: usize,
    /// End of the IP packet.
    end: usize,
    /// IPv6 jumbogram (payload length 0 with a hop-by-hop header): a UDP length of 0 is allowed.
    jumbo: bool,
}

/// What an IP header's parse returns: where L4 starts (`None` for a non-first fragment), or why
/// the header is refused.
type L4Result = Result<Option<L4Start>, ParseError>;

fn walk(frame: &[u8], cfg: &ParseConfig, layout: &mut Layout) -> Result<(), ParseError> {
    let mut outer = Stack {
        cfg,
        tunnels: cfg.parse_tunnels,
        layers: &mut layout.layers,
    };
    let start = match cfg.link {
        LinkType::Ethernet => Start::Eth(0),
        LinkType::Ip => ip_start(frame)?,
    };
    let next = outer.stack(frame, start, &mut layout.outer)?;
    if let Next::Tunnel(tunnel, inner) = next {
        layout.tunnel = Some(tunnel);
        if let Some((start, end)) = inner {
            // `end` never exceeds the frame (it is the end of a header that was bounds-checked).
            let buf = frame.get(..end).unwrap_or(frame);
            let headers = layout.inner.insert(Headers::default());
            // One tunnel level: inside it, VXLAN/Geneve ports are plain UDP and GRE is opaque.
            let mut inner = Stack {
                cfg,
                tunnels: false,
                layers: &mut layout.layers,
            };
            inner.stack(buf, start, headers)?;
        }
    }
    Ok(())
}

/// State for parsing one header stack.
struct Stack<'a> {
    cfg: &'a ParseConfig,
    /// Whether VXLAN/Geneve/GRE are decoded in this stack.
    tunnels: bool,
    layers: &'a mut LayerList,
}

impl Stack<'_> {
    fn stack(&mut self, buf: &[u8], start: Start, h: &mut Headers) -> Result<Next, ParseError> {
        let (l3, ethertype) = match start {
            Start::Eth(off) => self.ethernet(buf, off, h)?,
            Start::Ip(off, ethertype) => {
                h.ethertype = ethertype;
                (off, ethertype)
            }
        };
        let l4 = match ethertype {
            crate::ethertype::IPV4 => self.ipv4(buf, l3, h)?,
            crate::ethertype::IPV6 => self.ipv6(buf, l3, h)?,
            _ => None,
        };
        match l4 {
            Some(l4) => self.l4(buf, &l4, h),
            None => Ok(Next::Done),
        }
    }

    /// Records a parsed layer. The push cannot fail: a stack has at most 1 + 8 + 1 + 8 + 1 layers
    /// and a tunnel one more, well under [`MAX_LAYERS`], and every header offset is below
    /// 64 KiB because the headers before it are bounded (about 17 KiB per stack at most).
    fn record(&mut self, layer: Layer, offset: usize) {
        let _recorded = self.layers.push(layer, offset);
    }

    /// Ethernet and its VLAN tags; returns the L3 offset and the final EtherType.
    fn ethernet(
        &mut self,
        buf: &[u8],
        off: usize,
        h: &mut Headers,
    ) -> Result<(usize, u16), ParseError> {
        let eth = fixed::<14>(buf, off, Layer::Eth)?;
        self.record(Layer::Eth, off);
        h.l2 = Some(off);
        let mut ethertype = ethernet::Frame::new_unchecked(eth).ethertype();
        h.ethertype = ethertype;
        // Offset of the current EtherType field; a VLAN tag's layer offset is that of its TPID.
        let mut type_off = off + 12;
        while crate::ethertype::is_vlan_tpid(ethertype) {
            if h.vlans.len() >= MAX_VLAN_DEPTH {
                return Err(error(Layer::Vlan, type_off, Reason::TooManyVlanTags));
            }
            // TPID, TCI, then the next EtherType.
            let [_, _, tag @ ..] = fixed::<6>(buf, type_off, Layer::Vlan)?;
            let tag = vlan::Tag::new_unchecked(tag);
            h.vlans.push(VlanTag::from_tci(ethertype, tag.tci()));
            self.record(Layer::Vlan, type_off);
            ethertype = tag.next_type();
            h.ethertype = ethertype;
            type_off += 4;
        }
        Ok((type_off + 2, ethertype))
    }

    /// IPv4 with options; returns where L4 starts, or `None` for a non-first fragment.
    fn ipv4(&mut self, buf: &[u8], off: usize, h: &mut Headers) -> L4Result {
        let ip = ipv4::Packet::new_unchecked(fixed::<20>(buf, off, Layer::Ipv4)?);
        let have = buf.len().saturating_sub(off);
        expect_version(Layer::Ipv4, off, ip.version(), 4)?;
        let hlen = word_len(Layer::Ipv4, off, ip.ihl(), have, Reason::BadIhl)?;
        let total = usize::from(ip.total_len());
        if total < hlen || total > have {
            let reason = Reason::BadTotalLength {
                claimed: total,
                available: have,
            };
            return Err(error(Layer::Ipv4, off, reason));
        }
        let options = buf.get(off + ipv4::HEADER_LEN..off + hlen).unwrap_or(&[]);
        if ipv4::options_overrun(options).is_some() {
            return Err(error(Layer::Ipv4, off, Reason::OptionOverflow));
        }
        self.record(Layer::Ipv4, off);
        let more_fragments = ip.more_frags();
        let frag_offset = ip.frag_offset();
        h.l3 = Some(off);
        h.l3_kind = Some(L3Kind::Ipv4);
        h.l3_end = Some(off + total);
        h.is_fragment = more_fragments || frag_offset != 0;
        h.is_later_fragment = frag_offset != 0;
        h.l4_proto = Some(ip.protocol());
        if frag_offset != 0 {
            h.payload = Some(off + hlen);
            return Ok(None);
        }
        Ok(Some(L4Start {
            proto: ip.protocol(),
            offset: off + hlen,
            end: off + total,
            jumbo: false,
        }))
    }

    /// IPv6 and its extension headers; returns where L4 starts, or `None` for a non-first
    /// fragment.
    fn ipv6(&mut self, buf: &[u8], off: usize, h: &mut Headers) -> L4Result {
        let ip = ipv6::Packet::new_unchecked(fixed::<40>(buf, off, Layer::Ipv6)?);
        let have = buf.len().saturating_sub(off);
        expect_version(Layer::Ipv6, off, ip.version(), 6)?;
        let payload_len = usize::from(ip.payload_len());
        let mut next = ip.next_header();
        // RFC 2675: a jumbogram has payload length 0 and its real length in a hop-by-hop option;
        // the parser takes the rest of the frame instead of decoding the option.
        let jumbo = payload_len == 0 && next == crate::ip_proto::HOPOPTS;
        let total = if jumbo { have } else { 40 + payload_len };
        if total > have {
            let reason = Reason::BadTotalLength {
                claimed: total,
                available: have,
            };
            return Err(error(Layer::Ipv6, off, reason));
        }
        self.record(Layer::Ipv6, off);
        let end = off + total;
        h.l3 = Some(off);
        h.l3_kind = Some(L3Kind::Ipv6);
        h.l3_end = Some(end);
        let buf = buf.get(..end).unwrap_or(buf);
        let mut pos = off + 40;
        let mut count = 0;
        while is_ipv6_ext(next) {
            let layer = Layer::Ipv6Ext(next);
            count += 1;
            if count > MAX_IPV6_EXT {
                return Err(error(layer, pos, Reason::TooManyExtensionHeaders));
            }
            // Every extension header is at least 8 bytes.
            let ext = fixed::<8>(buf, pos, layer)?;
            let len = match next {
                crate::ip_proto::FRAGMENT => ipv6::FRAGMENT_LEN,
                crate::ip_proto::AH => ipv6::AuthHeader::new_unchecked(ext).header_len(),
                _ => ipv6::ExtHeader::new_unchecked(ext).header_len(),
            };
            let have = buf.len().saturating_sub(pos);
            if len > have {
                return Err(error(layer, pos, Reason::Truncated { need: len, have }));
            }
            self.record(layer, pos);
            let later_fragment = next == crate::ip_proto::FRAGMENT
                && ipv6::FragmentHeader::new_unchecked(ext).frag_offset() != 0;
            if next == crate::ip_proto::FRAGMENT {
                h.is_fragment = true;
            }
            // Every extension header starts with its next-header byte.
            next = ipv6::ExtHeader::new_unchecked(ext).next_header();
            pos += len;
            if later_fragment {
                h.is_later_fragment = true;
                h.l4_proto = Some(next);
                h.payload = Some(pos);
                return Ok(None);
            }
        }
        h.l4_proto = Some(next);
        Ok(Some(L4Start {
            proto: next,
            offset: pos,
            end,
            jumbo,
        }))
    }

    /// The L4 header (or GRE) inside an IP packet; `h.l4_proto` is already set.
    fn l4(&mut self, buf: &[u8], at: &L4Start, h: &mut Headers) -> Result<Next, ParseError> {
        use crate::ip_proto::{GRE, ICMP, ICMPV6, SCTP, TCP, UDP};
        let buf = buf.get(..at.end).unwrap_or(buf);
        let off = at.offset;
        let have = buf.len().saturating_sub(off);
        let (layer, hlen) = match at.proto {
            TCP => {
                let tcp = tcp::Packet::new_unchecked(fixed::<20>(buf, off, Layer::Tcp)?);
                let words = tcp.data_offset();
                let hlen = word_len(Layer::Tcp, off, words, have, Reason::BadDataOffset)?;
                (Layer::Tcp, hlen)
            }
            UDP => return self.udp(buf, at, h),
            SCTP => (Layer::Sctp, fixed::<12>(buf, off, Layer::Sctp)?.len()),
            ICMP => (Layer::Icmp, fixed::<8>(buf, off, Layer::Icmp)?.len()),
            ICMPV6 => (Layer::Icmpv6, fixed::<8>(buf, off, Layer::Icmpv6)?.len()),
            GRE if self.tunnels => return self.gre(buf, off, h),
            _ => {
                // Unknown (or opaque) protocol: its bytes are payload.
                h.payload = Some(off);
                return Ok(Next::Done);
            }
        };
        self.record(layer, off);
        h.l4 = Some(off);
        h.payload = Some(off + hlen);
        Ok(Next::Done)
    }

    fn udp(&mut self, buf: &[u8], at: &L4Start, h: &mut Headers) -> Result<Next, ParseError> {
        let off = at.offset;
        let udp = udp::Packet::new_unchecked(fixed::<8>(buf, off, Layer::Udp)?);
        let have = buf.len().saturating_sub(off);
        let len = udp.len();
        let end = if at.jumbo && len == 0 {
            buf.len()
        } else if len < 8 || usize::from(len) > have {
            return Err(error(Layer::Udp, off, Reason::BadUdpLength(len)));
        } else {
            off + usize::from(len)
        };
        self.record(Layer::Udp, off);
        h.l4 = Some(off);
        h.payload = Some(off + 8);
        if !self.tunnels {
            return Ok(Next::Done);
        }
        let dst_port = udp.dst_port();
        let buf = buf.get(..end).unwrap_or(buf);
        if self.cfg.vxlan_ports.contains(dst_port) {
            self.vxlan(buf, off + 8)
        } else if self.cfg.geneve_ports.contains(dst_port) {
            self.geneve(buf, off + 8)
        } else {
            Ok(Next::Done)
        }
    }

    /// VXLAN (RFC 7348): flags(1) reserved(3) VNI(3) reserved(1); always carries Ethernet.
    fn vxlan(&mut self, buf: &[u8], off: usize) -> Result<Next, ParseError> {
        let vx = vxlan::Packet::new_unchecked(fixed::<8>(buf, off, Layer::Vxlan)?);
        let id = vx.vni_valid().then(|| vx.vni());
        self.record(Layer::Vxlan, off);
        Ok(tunnel_next(
            TunnelKind::Vxlan,
            off,
            8,
            id,
            crate::ethertype::TEB,
            buf.len(),
        ))
    }

    /// Geneve (RFC 8926): ver(2) opt_len(6), flags(1), protocol(2), VNI(3), reserved(1), then
    /// `opt_len * 4` bytes of option TLVs.
    fn geneve(&mut self, buf: &[u8], off: usize) -> Result<Next, ParseError> {
        let gn = geneve::Packet::new_unchecked(fixed::<8>(buf, off, Layer::Geneve)?);
        let version = gn.version();
        if version != 0 {
            return Err(error(
                Layer::Geneve,
                off,
                Reason::BadField("geneve version"),
            ));
        }
        let hlen = gn.header_len();
        let overflow = error(Layer::Geneve, off, Reason::GeneveOptionOverflow);
        let options = buf
            .get(off + geneve::HEADER_LEN..off + hlen)
            .ok_or(overflow)?;
        if !geneve::options_fit(options) {
            return Err(overflow);
        }
        self.record(Layer::Geneve, off);
        let proto = gn.protocol_type();
        let id = Some(gn.vni());
        Ok(tunnel_next(
            TunnelKind::Geneve,
            off,
            hlen,
            id,
            proto,
            buf.len(),
        ))
    }

    /// GRE (RFC 2784, RFC 2890): flags and version(2), protocol(2), then checksum+reserved,
    /// key and sequence number (4 bytes each) when their flag is set. GRE is the outer L4.
    fn gre(&mut self, buf: &[u8], off: usize, h: &mut Headers) -> Result<Next, ParseError> {
        let gre = gre::Packet::new_unchecked(fixed::<{ gre::HEADER_LEN }>(buf, off, Layer::Gre)?);
        if gre.routing_present() {
            return Err(error(Layer::Gre, off, Reason::BadField("gre routing")));
        }
        if gre.version() != 0 {
            return Err(error(Layer::Gre, off, Reason::BadField("gre version")));
        }
        let hlen = gre.header_len();
        let have = buf.len().saturating_sub(off);
        let header = buf.get(off..off + hlen).ok_or(error(
            Layer::Gre,
            off,
            Reason::Truncated { need: hlen, have },
        ))?;
        let id = if gre.key_present() {
            crate::bytes::read_u32(header, gre.key_offset())
        } else {
            None
        };
        self.record(Layer::Gre, off);
        h.l4 = Some(off);
        h.payload = Some(off + hlen);
        let proto = gre.protocol_type();
        Ok(tunnel_next(
            TunnelKind::Gre,
            off,
            hlen,
            id,
            proto,
            buf.len(),
        ))
    }
}

/// The tunnel of `kind` whose `hlen`-byte header at `off` carries `proto` (identified by `id`),
/// and where the stack inside it starts (its bytes end at `end`).
#[inline]
fn tunnel_next(
    kind: TunnelKind,
    off: usize,
    hlen: usize,
    id: Option<u32>,
    proto: u16,
    end: usize,
) -> Next {
    let tunnel = Tunnel {
        kind,
        offset: off,
        len: hlen,
        id,
        proto,
    };
    Next::Tunnel(tunnel, inner_start(proto, off + hlen, end))
}

/// Where the stack inside a VXLAN, Geneve or GRE tunnel starts, by the tunnel's protocol type.
fn inner_start(proto: u16, off: usize, end: usize) -> Option<(Start, usize)> {
    match proto {
        crate::ethertype::TEB => Some((Start::Eth(off), end)),
        crate::ethertype::IPV4 | crate::ethertype::IPV6 => Some((Start::Ip(off, proto), end)),
        _ => None,
    }
}

/// Where the stack of an L3 packet ([`LinkType::Ip`]) starts: its version nibble picks the
/// EtherType.
#[cold]
#[inline(never)]
fn ip_start(frame: &[u8]) -> Result<Start, ParseError> {
    match frame.first().map(|b| b >> 4) {
        Some(4) => Ok(Start::Ip(0, crate::ethertype::IPV4)),
        Some(6) => Ok(Start::Ip(0, crate::ethertype::IPV6)),
        Some(v) => Err(error(Layer::Ipv4, 0, Reason::BadVersion(v))),
        None => Err(error(
            Layer::Ipv4,
            0,
            Reason::Truncated {
                need: ipv4::HEADER_LEN,
                have: 0,
            },
        )),
    }
}

/// Whether `proto` is an IPv6 extension header the parser walks.
fn is_ipv6_ext(proto: u8) -> bool {
    use crate::ip_proto::{AH, DSTOPTS, FRAGMENT, HOPOPTS, ROUTING};
    matches!(proto, HOPOPTS | ROUTING | DSTOPTS | FRAGMENT | AH)
}

/// The `N` bytes at `off`, or a `Truncated` error for `layer` at `off`.
#[inline]
fn fixed<const N: usize>(buf: &[u8], off: usize, layer: Layer) -> Result<&[u8; N], ParseError> {
    match buf.get(off..).and_then(<[u8]>::first_chunk::<N>) {
        Some(bytes) => Ok(bytes),
        None => {
            let have = buf.len().saturating_sub(off);
            Err(error(layer, off, Reason::Truncated { need: N, have }))
        }
    }
}

/// The length of a header whose length field counts 4-byte `words` (IPv4 IHL, TCP data offset):
/// `bad(words)` below the 5-word minimum, `Truncated` beyond the `have` bytes at `off`.
#[inline]
fn word_len(
    layer: Layer,
    off: usize,
    words: u8,
    have: usize,
    bad: fn(u8) -> Reason,
) -> Result<usize, ParseError> {
    if words < 5 {
        return Err(error(layer, off, bad(words)));
    }
    let hlen = usize::from(words) * 4;
    if hlen > have {
        return Err(error(layer, off, Reason::Truncated { need: hlen, have }));
    }
    Ok(hlen)
}

/// `BadVersion` at `off` unless an IP header's `version` is `want`.
#[inline]
const fn expect_version(layer: Layer, off: usize, version: u8, want: u8) -> Result<(), ParseError> {
    if version == want {
        Ok(())
    } else {
        Err(error(layer, off, Reason::BadVersion(version)))
    }
}

#[inline]
const fn error(layer: Layer, offset: usize, reason: Reason) -> ParseError {
    ParseError {
        layer,
        offset,
        reason,
    }
}
