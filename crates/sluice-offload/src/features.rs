//! Device offload features, named as `ethtool -k` names them, device profiles, and the
//! per-packet features check ([`features_for`]).
//!
//! A [`Features`] value is a bitset of [`Feature`]s. A [`Device`] carries the features it offers
//! for plain packets, the subset that still applies to VLAN-tagged packets (`vlan_features`),
//! the subset for encapsulated packets (`hw_enc_features`), how many stacked VLAN tags it still
//! segments and checksums under (`vlan_depth`), its GSO limits, its MTU and an *envelope
//! allowance*: extra L2 header bytes (VLAN tags) accepted beyond the MTU. [`DeviceLimits`] are
//! an operator's overrides of the last four, per port.
//!
//! [`features_for`] is Linux's `netif_skb_features` + `vlan_features_check` +
//! `harmonize_features` + `gso_features_check` as one function: it masks the device's features
//! down to what the device can really do for *this* packet. [`crate::tx::tx_prepare`] then does
//! in software whatever the packet needs and the mask lacks.

use core::fmt;
use core::str::FromStr;
use sluice_packet::{GsoType, Level, OffloadMeta};
use sluice_wire::{ip_proto, L3Kind, TunnelKind};

macro_rules! features {
    ($( $(#[$doc:meta])* $variant:ident / $konst:ident = $bit:expr, $name:literal, $desc:literal; )*) => {
        /// One device offload feature. Names follow `ethtool -k`; the one Sluice-only name
        /// (`tx-checksum-ipv4-header`, DPDK's `IPV4_CKSUM`) is marked as such.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Feature {
            $( $(#[$doc])* $variant = $bit, )*
        }

        impl Feature {
            /// Every feature, in bit order.
            pub const ALL: &'static [Feature] = &[$(Feature::$variant,)*];

            /// The `ethtool -k` name.
            pub const fn name(self) -> &'static str {
                match self { $(Feature::$variant => $name,)* }
            }

            /// A one-line description for operators.
            pub const fn description(self) -> &'static str {
                match self { $(Feature::$variant => $desc,)* }
            }
        }

        impl Features {
            $( $(#[$doc])* pub const $konst: Features = Features(1 << $bit); )*
        }
    };
}

features! {
    /// Scatter-gather: the device reads a packet from several buffers (page fragments).
    TxSg / TX_SG = 0, "tx-scatter-gather", "transmit from scattered buffers (page fragments)";
    /// Frag list: the device reads a packet from a chain of packet buffers.
    TxFraglist / TX_FRAGLIST = 1, "tx-scatter-gather-fraglist", "transmit a chain of packet buffers (frag list)";
    /// TCP/UDP checksum offload over IPv4 only (`NETIF_F_IP_CSUM`).
    TxCsumIpv4 / TX_CSUM_IPV4 = 2, "tx-checksum-ipv4", "fill TCP/UDP checksums of IPv4 packets";
    /// TCP/UDP checksum offload over IPv6 only (`NETIF_F_IPV6_CSUM`).
    TxCsumIpv6 / TX_CSUM_IPV6 = 3, "tx-checksum-ipv6", "fill TCP/UDP checksums of IPv6 packets";
    /// Generic checksum offload: fills any 16-bit ones'-complement sum from csum_start
    /// (`NETIF_F_HW_CSUM`).
    TxCsumGeneric / TX_CSUM_GENERIC = 4, "tx-checksum-ip-generic", "fill any ones'-complement checksum from csum_start";
    /// SCTP CRC32c offload.
    TxCsumSctp / TX_CSUM_SCTP = 5, "tx-checksum-sctp", "fill SCTP CRC32c checksums";
    /// IPv4 header checksum offload (Sluice-only name; DPDK `IPV4_CKSUM`; Linux always fills it
    /// in software).
    TxCsumIpv4Header / TX_CSUM_IPV4_HEADER = 6, "tx-checksum-ipv4-header", "fill IPv4 header checksums (Sluice; DPDK IPV4_CKSUM)";
    /// TCP segmentation over IPv4 (TSO).
    Tso / TSO = 7, "tx-tcp-segmentation", "segment TCP over IPv4 (TSO)";
    /// TCP segmentation over IPv6.
    Tso6 / TSO6 = 8, "tx-tcp6-segmentation", "segment TCP over IPv6 (TSO6)";
    /// TSO for packets with ECN (CWR on the first segment only).
    TsoEcn / TSO_ECN = 9, "tx-tcp-ecn-segmentation", "segment TCP with ECN (CWR on the first segment)";
    /// TSO that may keep the IPv4 ID fixed instead of incrementing it.
    TsoMangleid / TSO_MANGLEID = 10, "tx-tcp-mangleid-segmentation", "segment TCP over IPv4 keeping a fixed IP ID";
    /// UDP L4 segmentation (USO).
    Uso / USO = 11, "tx-udp-segmentation", "segment UDP into datagrams (USO)";
    /// UDP fragmentation offload (UFO).
    Ufo / UFO = 12, "tx-udp-fragmentation", "split a UDP datagram into IP fragments (UFO)";
    /// Segmentation of UDP-tunnelled (VXLAN, Geneve) packets with a zero outer UDP checksum.
    UdpTnl / UDP_TNL = 13, "tx-udp_tnl-segmentation", "segment VXLAN/Geneve packets without outer UDP checksum";
    /// Segmentation of UDP-tunnelled packets with an outer UDP checksum.
    UdpTnlCsum / UDP_TNL_CSUM = 14, "tx-udp_tnl-csum-segmentation", "segment VXLAN/Geneve packets with outer UDP checksum";
    /// Segmentation of GRE-tunnelled packets without a GRE checksum.
    Gre / GRE = 15, "tx-gre-segmentation", "segment GRE packets without GRE checksum";
    /// Segmentation of GRE-tunnelled packets with a GRE checksum.
    GreCsum / GRE_CSUM = 16, "tx-gre-csum-segmentation", "segment GRE packets with GRE checksum";
    /// Partial GSO: software fixes the outer headers once, the device segments the inner packet.
    GsoPartial / GSO_PARTIAL = 17, "tx-gso-partial", "segment tunnelled packets whose outer headers software prepared";
    /// 802.1Q (C-tag) insertion.
    VlanCtagInsert / VLAN_CTAG_INSERT = 18, "tx-vlan-hw-insert", "insert an 802.1Q (C-tag) VLAN tag";
    /// 802.1ad (S-tag) insertion.
    VlanStagInsert / VLAN_STAG_INSERT = 19, "tx-vlan-stag-hw-insert", "insert an 802.1ad (S-tag) VLAN tag";
    /// Receive checksum verification.
    RxCsum / RX_CSUM = 20, "rx-checksum", "verify checksums on receive";
    /// Generic receive offload (software coalescing).
    RxGro / RX_GRO = 21, "rx-gro", "coalesce received TCP/UDP flows in software (GRO)";
    /// Large receive offload (device coalescing, lossy).
    RxLro / RX_LRO = 22, "rx-lro", "coalesce received TCP in the device (LRO)";
    /// Hardware GRO (lossless device coalescing).
    RxGroHw / RX_GRO_HW = 23, "rx-gro-hw", "coalesce received TCP in the device, losslessly";
    /// GRO of forwarded UDP traffic.
    RxUdpGroForwarding / RX_UDP_GRO_FORWARDING = 24, "rx-udp-gro-forwarding", "coalesce forwarded UDP flows (UDP GRO)";
    /// GRO into frag lists.
    RxGroList / RX_GRO_LIST = 25, "rx-gro-list", "coalesce received packets into frag lists";
    /// 802.1Q tag stripping on receive.
    RxVlanCtagParse / RX_VLAN_CTAG_PARSE = 26, "rx-vlan-hw-parse", "strip 802.1Q (C-tag) VLAN tags on receive";
    /// 802.1ad tag stripping on receive.
    RxVlanStagParse / RX_VLAN_STAG_PARSE = 27, "rx-vlan-stag-hw-parse", "strip 802.1ad (S-tag) VLAN tags on receive";
}

/// A set of [`Feature`]s.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Features(u64);

impl Features {
    /// No feature.
    pub const NONE: Features = Features(0);
    /// Every feature.
    pub const ALL: Features = Features((1 << 28) - 1);
    /// Every checksum-fill feature (`NETIF_F_CSUM_MASK` plus the IPv4 header checksum).
    pub const CSUM_MASK: Features = Features(
        Self::TX_CSUM_IPV4.0
            | Self::TX_CSUM_IPV6.0
            | Self::TX_CSUM_GENERIC.0
            | Self::TX_CSUM_SCTP.0
            | Self::TX_CSUM_IPV4_HEADER.0,
    );
    /// Every segmentation feature (`NETIF_F_GSO_MASK`).
    pub const GSO_MASK: Features = Features(
        Self::TSO.0
            | Self::TSO6.0
            | Self::TSO_ECN.0
            | Self::TSO_MANGLEID.0
            | Self::USO.0
            | Self::UFO.0
            | Self::UDP_TNL.0
            | Self::UDP_TNL_CSUM.0
            | Self::GRE.0
            | Self::GRE_CSUM.0
            | Self::GSO_PARTIAL.0,
    );
    /// VLAN insertion (C-tag and S-tag).
    pub const VLAN_INSERT: Features = Features(Self::VLAN_CTAG_INSERT.0 | Self::VLAN_STAG_INSERT.0);
    /// What survives on a packet with more than one VLAN tag when the device does not declare
    /// multi-tag parsing: only what needs no header parsing (Linux's `vlan_features_check`).
    pub const MULTI_TAG_SAFE: Features = Features(
        Self::TX_CSUM_GENERIC.0 | Self::TX_SG.0 | Self::TX_FRAGLIST.0 | Self::VLAN_INSERT.0,
    );

    /// The set holding one feature.
    pub const fn of(f: Feature) -> Features {
        Features(1 << f as u8)
    }

    /// The raw bits (bit n is the feature with discriminant n).
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Whether every feature of `other` is in `self`.
    pub const fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `self` has feature `f`.
    pub const fn has(self, f: Feature) -> bool {
        self.contains(Self::of(f))
    }

    /// Whether `self` and `other` share a feature.
    pub const fn intersects(self, other: Features) -> bool {
        self.0 & other.0 != 0
    }

    /// Union.
    pub const fn union(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }

    /// Intersection.
    pub const fn intersect(self, other: Features) -> Features {
        Features(self.0 & other.0)
    }

    /// `self` without the features of `other`.
    pub const fn without(self, other: Features) -> Features {
        Features(self.0 & !other.0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The features in the set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = Feature> {
        Feature::ALL.iter().copied().filter(move |&f| self.has(f))
    }

    /// Parses a `--features` list: comma-separated `ethtool -k` names, `none` (empty set) or
    /// `all`. Whitespace around names is ignored; an empty list is an error.
    ///
    /// ```
    /// use sluice_offload::features::{Feature, Features};
    /// let f = Features::parse_list("tx-scatter-gather, tx-tcp-segmentation").unwrap();
    /// assert!(f.has(Feature::TxSg) && f.has(Feature::Tso));
    /// assert_eq!(f.iter().count(), 2);
    /// assert!(Features::parse_list("tx-bogus").is_err());
    /// ```
    pub fn parse_list(s: &str) -> Result<Features, FeatureError> {
        let mut set = Features::NONE;
        let mut any = false;
        for tok in s.split(',').map(str::trim) {
            any = true;
            match tok {
                "" => return Err(FeatureError::Empty),
                "none" => {}
                "all" => set = Features::ALL,
                _ => set = set.union(Features::of(tok.parse()?)),
            }
        }
        if !any {
            return Err(FeatureError::Empty);
        }
        Ok(set)
    }
}

impl core::ops::BitOr for Features {
    type Output = Features;
    fn bitor(self, rhs: Features) -> Features {
        self.union(rhs)
    }
}

impl core::ops::BitAnd for Features {
    type Output = Features;
    fn bitand(self, rhs: Features) -> Features {
        self.intersect(rhs)
    }
}

impl From<Feature> for Features {
    fn from(f: Feature) -> Features {
        Features::of(f)
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Features({self})")
    }
}

/// Comma-separated names, or `none`; the output of `Display` parses back with
/// [`Features::parse_list`].
impl fmt::Display for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, feat) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(feat.name())?;
        }
        Ok(())
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a feature name or list did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeatureError {
    /// A token is no feature name.
    Unknown {
        /// The token as given.
        token: String,
    },
    /// The list (or one of its comma-separated items) is empty.
    Empty,
}

impl fmt::Display for FeatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FeatureError::Unknown { token } => write!(
                f,
                "unknown feature {token:?} (see `sluice features list`; or `none`, `all`)"
            ),
            FeatureError::Empty => write!(f, "empty feature name in list"),
        }
    }
}

impl std::error::Error for FeatureError {}

impl FromStr for Feature {
    type Err = FeatureError;

    fn from_str(s: &str) -> Result<Feature, FeatureError> {
        Feature::ALL
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| FeatureError::Unknown {
                token: s.to_string(),
            })
    }
}

/// A transmitting device: what it offloads and its size limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    /// Features for untagged, unencapsulated packets (`dev->features`).
    pub features: Features,
    /// Features that still apply to VLAN-tagged packets (`dev->vlan_features`); VLAN insertion
    /// is always kept.
    pub vlan_features: Features,
    /// Features that apply to encapsulated packets (`dev->hw_enc_features`).
    pub hw_enc_features: Features,
    /// How many stacked VLAN tags (counting one still to insert) the device parses past to
    /// segment and fill checksums: a packet with more tags keeps only
    /// [`Features::MULTI_TAG_SAFE`]. 1 is Linux's default (`vlan_features_check`: one tag);
    /// [`MAX_VLAN_DEPTH`] stands for any number.
    pub vlan_depth: u8,
    /// Largest GSO packet the device segments (bytes, whole frame).
    pub gso_max_size: u32,
    /// Most segments the device produces from one GSO packet.
    pub gso_max_segs: u32,
    /// MTU: the largest L3 packet (bytes after the L2 header, VLAN tags excluded).
    pub mtu: u32,
    /// Envelope allowance: extra L2 header bytes (VLAN tags) accepted beyond the 14-byte
    /// Ethernet header + MTU; 4 admits one full-size tagged frame, 8 a double-tagged one. See
    /// [`Device::fits`].
    pub envelope: u32,
}

impl Device {
    /// A device with `features` everywhere (tagged and encapsulated packets alike), MTU 1500,
    /// no envelope, VLAN depth 1 (one tag parsed), Linux's default GSO limits (65536 bytes,
    /// 65535 segments).
    pub const fn new(features: Features) -> Device {
        Device {
            features,
            vlan_features: features,
            hw_enc_features: features,
            vlan_depth: 1,
            gso_max_size: 65536,
            gso_max_segs: 65535,
            mtu: 1500,
            envelope: 0,
        }
    }

    /// The same device with another MTU.
    pub const fn with_mtu(mut self, mtu: u32) -> Device {
        self.mtu = mtu;
        self
    }

    /// Turns `feature` on or off everywhere (plain, tagged and encapsulated packets), as a
    /// device whose features are all independent would (`ethtool -K` on a software device).
    pub fn set_feature(&mut self, feature: Feature, on: bool) {
        let f = Features::from(feature);
        let apply = |set: Features| if on { set | f } else { set.without(f) };
        self.features = apply(self.features);
        self.vlan_features = apply(self.vlan_features);
        self.hw_enc_features = apply(self.hw_enc_features);
    }

    /// The same device with another envelope allowance.
    pub const fn with_envelope(mut self, envelope: u32) -> Device {
        self.envelope = envelope;
        self
    }

    /// Whether a frame with `l2_len` bytes of L2 header (Ethernet + tags) in front of an L3
    /// packet of `l3_len` bytes fits: the L3 packet must fit the MTU, and the whole frame
    /// [`Device::max_frame`] (14-byte Ethernet header + MTU + envelope). The allowance admits
    /// header prefixes (VLAN tags), never bigger packets.
    pub fn fits(&self, l2_len: usize, l3_len: usize) -> bool {
        l3_len <= self.mtu as usize && l2_len.saturating_add(l3_len) <= self.max_frame()
    }

    /// Largest frame (without FCS) accepted: Ethernet header, MTU and envelope.
    pub fn max_frame(&self) -> usize {
        (self.mtu as usize)
            .saturating_add(14)
            .saturating_add(self.envelope as usize)
    }
}

/// The most VLAN tags [`Device::vlan_depth`] counts (and [`crate::tx::count_tags`] looks at):
/// a device with this depth keeps its features under any stack.
pub const MAX_VLAN_DEPTH: u8 = 8;

/// Largest `gso_max_size` accepted (Linux's `GSO_MAX_SIZE` with BIG TCP, 512 KiB - 8).
pub const MAX_GSO_SIZE: u32 = 524_280;

/// Largest `gso_max_segs` accepted (Linux's `GSO_MAX_SEGS`).
pub const MAX_GSO_SEGS: u32 = 65_535;

/// Largest envelope allowance accepted (bytes beyond the 14-byte Ethernet header + MTU).
pub const MAX_ENVELOPE: u32 = 64;

/// An operator's per-port overrides of a [`Device`]'s VLAN depth, envelope and GSO limits (as
/// `ip link set DEV gso_max_size N gso_max_segs N` does for the kernel's). `None` keeps what
/// the port reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceLimits {
    /// [`Device::vlan_depth`], 0 to [`MAX_VLAN_DEPTH`].
    pub vlan_depth: Option<u8>,
    /// [`Device::envelope`], 0 to [`MAX_ENVELOPE`].
    pub envelope: Option<u32>,
    /// [`Device::gso_max_size`], 1 to [`MAX_GSO_SIZE`].
    pub gso_max_size: Option<u32>,
    /// [`Device::gso_max_segs`], 1 to [`MAX_GSO_SEGS`].
    pub gso_max_segs: Option<u32>,
}

impl DeviceLimits {
    /// No override.
    pub const NONE: DeviceLimits = DeviceLimits {
        vlan_depth: None,
        envelope: None,
        gso_max_size: None,
        gso_max_segs: None,
    };

    /// `dev` with the overrides applied.
    pub fn apply(&self, mut dev: Device) -> Device {
        if let Some(d) = self.vlan_depth {
            dev.vlan_depth = d;
        }
        if let Some(e) = self.envelope {
            dev.envelope = e;
        }
        if let Some(s) = self.gso_max_size {
            dev.gso_max_size = s;
        }
        if let Some(s) = self.gso_max_segs {
            dev.gso_max_segs = s;
        }
        dev
    }

    /// Checks every override against its range; the error names the setting and the range.
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, v: Option<u32>, lo: u32, hi: u32| match v {
            Some(v) if !(lo..=hi).contains(&v) => {
                Err(format!("{name} must be {lo} to {hi}, not {v}"))
            }
            _ => Ok(()),
        };
        check(
            "vlan_depth",
            self.vlan_depth.map(u32::from),
            0,
            u32::from(MAX_VLAN_DEPTH),
        )?;
        check("envelope", self.envelope, 0, MAX_ENVELOPE)?;
        check("gso_max_size", self.gso_max_size, 1, MAX_GSO_SIZE)?;
        check("gso_max_segs", self.gso_max_segs, 1, MAX_GSO_SEGS)
    }
}

/// What the features check needs to know about a packet, taken from its metadata and
/// structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PacketShape {
    /// VLAN tags in the frame's outer L2 header.
    pub in_band_tags: usize,
    /// Whether a tag is still to be inserted (accelerated VLAN, like `skb->vlan_tci`).
    pub tag_to_insert: bool,
    /// The total frame length (after any tag insertion).
    pub len: usize,
    /// The number of segments a GSO packet makes (0 when not GSO).
    pub gso_segs: u32,
}

/// The features of `dev` that apply to one packet (Linux `netif_skb_features` and the checks it
/// calls):
///
/// 1. encapsulated packets use `hw_enc_features`;
/// 2. VLAN-tagged packets (in band or to be inserted) use `vlan_features`, plus VLAN insertion;
/// 3. more tags (counting one to insert) than the device's `vlan_depth` → only
///    [`Features::MULTI_TAG_SAFE`];
/// 4. a packet whose checksum the remaining features cannot compute for its protocol
///    (IPv4-only offload for IPv6, anything but generic for a protocol not parsed) loses the
///    protocol-specific checksum features *and* segmentation (Linux `harmonize_features`);
/// 5. a GSO packet over the device's size or segment limits loses segmentation; a GSO packet
///    that is not a tunnel loses `tx-gso-partial`; a TCPv4 GSO packet without DF loses
///    `tx-tcp-mangleid-segmentation`.
///
/// ```
/// use sluice_offload::features::{features_for, Device, Feature, Features, PacketShape};
/// use sluice_packet::OffloadMeta;
/// // A TCP/IPv4 frame's metadata.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
/// let meta = OffloadMeta::from_layout(&sluice_wire::parse(&frame).unwrap());
///
/// // A device that checksums and segments untagged packets, but not tagged ones.
/// let offered = Features::parse_list("tx-checksum-ipv4,tx-tcp-segmentation").unwrap();
/// let mut dev = Device::new(offered);
/// dev.vlan_features = Features::NONE;
/// let untagged = features_for(&meta, &PacketShape::default(), &dev);
/// assert!(untagged.has(Feature::Tso) && untagged.has(Feature::TxCsumIpv4));
/// let tagged = PacketShape { in_band_tags: 1, ..PacketShape::default() };
/// assert!(features_for(&meta, &tagged, &dev).is_empty());
/// ```
pub fn features_for(meta: &OffloadMeta, shape: &PacketShape, dev: &Device) -> Features {
    let mut f = dev.features;
    if meta.tunnel().is_some() {
        f = f & dev.hw_enc_features;
    }
    let tags = shape.in_band_tags + usize::from(shape.tag_to_insert);
    if tags > 0 {
        f = f & (dev.vlan_features | Features::VLAN_INSERT);
    }
    if tags > usize::from(dev.vlan_depth) {
        f = f & Features::MULTI_TAG_SAFE;
    }
    if !can_checksum_protocol(f, meta) {
        f = f.without(
            Features::TX_CSUM_IPV4
                | Features::TX_CSUM_IPV6
                | Features::TX_CSUM_SCTP
                | Features::TX_CSUM_GENERIC
                | Features::GSO_MASK,
        );
    }
    if meta.gso_type() != GsoType::None {
        let over = shape.len > dev.gso_max_size as usize || shape.gso_segs > dev.gso_max_segs;
        if over {
            f = f.without(Features::GSO_MASK);
        }
        if meta.tunnel().is_none() {
            f = f.without(Features::GSO_PARTIAL);
        }
    }
    f
}

/// Linux `can_checksum_protocol` on the level whose L4 checksum the device would fill (the
/// innermost): see [`can_fill_l4`]. A packet with nothing to fill passes.
fn can_checksum_protocol(f: Features, meta: &OffloadMeta) -> bool {
    let level = match meta.tunnel() {
        Some(_) => Level::Inner,
        None => Level::Outer,
    };
    match meta.l4_proto(level) {
        Some(ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP) => can_fill_l4(f, meta, level),
        _ => f.has(Feature::TxCsumGeneric) || !needs_l4_fill(meta),
    }
}

/// Whether features `f` let a device fill the L4 checksum of `level`: generic checksum offload
/// fills any protocol; SCTP needs `tx-checksum-sctp`; the IPv4 / IPv6-specific features fill
/// only TCP and UDP over their own IP version, and IPv6 only without extension headers (the
/// device cannot parse them: Linux `skb_csum_hwoffload_help`).
pub fn can_fill_l4(f: Features, meta: &OffloadMeta, level: Level) -> bool {
    match meta.l4_proto(level) {
        Some(ip_proto::SCTP) => f.has(Feature::TxCsumSctp),
        Some(ip_proto::TCP | ip_proto::UDP) => {
            let o = meta.offsets();
            let plain_v6 = match (o.l3(level), o.l4(level)) {
                (Some(l3), Some(l4)) => l4.checked_sub(l3) == Some(40),
                _ => false,
            };
            f.has(Feature::TxCsumGeneric)
                || match meta.l3_kind(level) {
                    Some(L3Kind::Ipv4) => f.has(Feature::TxCsumIpv4),
                    Some(L3Kind::Ipv6) => f.has(Feature::TxCsumIpv6) && plain_v6,
                    None => false,
                }
        }
        Some(_) => f.has(Feature::TxCsumGeneric),
        None => false,
    }
}

fn needs_l4_fill(meta: &OffloadMeta) -> bool {
    meta.partial_slot().is_some() || meta.gso_type() != GsoType::None
}

/// The segmentation features a device needs to segment this GSO packet itself (Linux
/// `net_gso_ok`), or `None` when the packet is not a GSO packet or no feature set can segment it
/// (e.g. GRE with a UDP tunnel inside).
pub fn gso_features_needed(
    meta: &OffloadMeta,
    gre_csum: bool,
    udp_tnl_csum: bool,
) -> Option<Features> {
    let base = match meta.gso_type() {
        GsoType::None => return None,
        GsoType::TcpV4 => Features::TSO,
        GsoType::TcpV6 => Features::TSO6,
        GsoType::UdpL4 => Features::USO,
        GsoType::Udp => Features::UFO,
    };
    let ecn = if meta.gso_ecn() {
        Features::TSO_ECN
    } else {
        Features::NONE
    };
    let tunnel = match meta.tunnel() {
        None => Features::NONE,
        Some(TunnelKind::Vxlan | TunnelKind::Geneve) if udp_tnl_csum => Features::UDP_TNL_CSUM,
        Some(TunnelKind::Vxlan | TunnelKind::Geneve) => Features::UDP_TNL,
        Some(TunnelKind::Gre) if gre_csum => Features::GRE_CSUM,
        Some(TunnelKind::Gre) => Features::GRE,
    };
    Some(base | ecn | tunnel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &f in Feature::ALL {
            assert!(seen.insert(f.name()), "duplicate {}", f.name());
            assert_eq!(f.name().parse::<Feature>(), Ok(f));
            assert!(Features::ALL.has(f));
            assert!(!f.description().is_empty());
        }
        assert_eq!(Features::ALL.iter().count(), Feature::ALL.len());
    }

    #[test]
    fn list_parsing() {
        assert_eq!(Features::parse_list("none"), Ok(Features::NONE));
        assert_eq!(Features::parse_list("all"), Ok(Features::ALL));
        assert_eq!(
            Features::parse_list("tx-scatter-gather, tx-checksum-ipv4"),
            Ok(Features::TX_SG | Features::TX_CSUM_IPV4)
        );
        assert_eq!(
            Features::parse_list("tx-scatter-gather,tx-bogus"),
            Err(FeatureError::Unknown {
                token: "tx-bogus".into()
            })
        );
        assert_eq!(
            Features::parse_list("tx-scatter-gather,,"),
            Err(FeatureError::Empty)
        );
        let shown = (Features::TSO | Features::RX_GRO).to_string();
        assert_eq!(shown, "tx-tcp-segmentation,rx-gro");
        assert_eq!(
            Features::parse_list(&shown),
            Ok(Features::TSO | Features::RX_GRO)
        );
    }

    #[test]
    fn set_feature_changes_every_level_and_only_that_feature() {
        let sg = Features::from(Feature::TxSg);
        let mut d = Device::new(Features::TSO | sg);
        d.vlan_features = sg;
        d.hw_enc_features = Features::NONE;
        d.set_feature(Feature::Tso, false);
        assert_eq!(d.features, sg);
        assert_eq!(d.vlan_features, sg);
        d.set_feature(Feature::TxCsumGeneric, true);
        let csum = Features::from(Feature::TxCsumGeneric);
        assert_eq!(d.features, sg | csum);
        assert_eq!(d.vlan_features, sg | csum);
        assert_eq!(d.hw_enc_features, csum);
        d.set_feature(Feature::TxSg, false);
        assert_eq!(d.features, csum);
        assert_eq!(d.vlan_features, csum);
    }
}
