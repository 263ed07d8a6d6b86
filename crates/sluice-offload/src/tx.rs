//! Transmit preparation: the one place that decides what software must do to a packet before a
//! given device sends it (Linux `validate_xmit_skb`, OVS `netdev_send`'s offload fallback).
//!
//! [`tx_prepare`] masks the device's features for the packet ([`features_for`]) and applies, in
//! order, only what is missing:
//!
//! 1. **drop** a frame that does not fit the MTU + envelope and is not a GSO packet, or a TCP /
//!    USO GSO packet whose segments would not fit (checked first, so a dropped frame costs no
//!    work; the counted reason is `oversize_drops`);
//! 2. **VLAN insertion** in software of an accelerated tag ([`TxPacket::vlan`], like
//!    `skb->vlan_tci`) the device cannot insert;
//! 3. **GSO**: hand the GSO packet to the device when it can segment it; else **partial GSO**
//!    (OVS 3.6 rule, [`gso::use_partial_segmentation`]); else full **software GSO** (segment
//!    checksums left to the device when it can fill them). A GSO packet whose L4 checksum is
//!    `Bad` is dropped (`gso_bad_csum_drops`): segmenting recomputes every checksum, and corrupt
//!    data must never leave looking valid;
//! 4. **linearize** a frag-list (or scattered) packet the device cannot read as it is — for a
//!    GSO packet the device can still segment, instead of segmenting it in software (one copy
//!    beats many small packets);
//! 5. **checksum completion** in software of every `Partial` checksum the device cannot fill
//!    (`Good`, `Bad` and `Unknown` are left untouched).
//!
//! An L3 packet (a TUN device's: metadata with the IP header at offset 0 and no L2 header, as
//! [`OffloadMeta::from_layout`] gives for a [`LinkType::Ip`] parse) is never read as Ethernet:
//! it has no in-band tags, an accelerated tag to insert drops it (`Malformed`, counted), and
//! software GSO parses it from its IP header.
//!
//! Every branch bumps a coverage counter ([`COUNTERS`]). The result says what was done
//! ([`TxSteps`]) and, per emitted frame, what the device still has to do ([`DeviceWork`]).
//!
//! Nothing here panics on any packet; buffers in [`TxOutput`] are reused, so after warm-up
//! nothing is allocated per packet.

use crate::features::Device;
use crate::features::{features_for, gso_features_needed, Feature, Features, PacketShape};
use crate::gso::{self, CsumMode, GsoError, GsoOutput, GsoParams, PartialCaps, ZeroCopyOutput};
use core::fmt;
use core::ops::Range;
use sluice_coverage::{counter, Counter};
use sluice_packet::rewrite::{defer_l4_checksum, recompute_checksum};
use sluice_packet::virtio::{HdrFormat, VirtioError, VirtioNetHdr};
use sluice_packet::{CsumStatus, GsoType, Level, OffloadMeta, Slot};
use sluice_wire::{ethertype, ip_proto, L3Kind, Layout, LinkType, ParseConfig, TunnelKind};
use std::borrow::Cow;

counter!(pub TX_PREPARED, "tx_prepared", "packets run through transmit preparation");
counter!(pub TX_UNCHANGED, "tx_unchanged", "packets the device takes as they are (no software work)");
counter!(pub VLAN_SW_INSERTED, "vlan_sw_inserted", "VLAN tags inserted in software (device cannot insert)");
counter!(pub VLAN_HW_INSERT, "vlan_hw_insert", "VLAN tags left to the device to insert");
counter!(pub HW_GSO, "hw_gso", "GSO packets handed to the device to segment");
counter!(pub SOFT_GSO, "soft_gso", "GSO packets segmented fully in software");
counter!(pub SOFT_GSO_SEGMENTS, "soft_gso_segments", "segments produced by software GSO");
counter!(pub USO_PACKED, "uso_packed", "software-segmented VXLAN/Geneve packets sent as UDP-GSO frames to a device that segments UDP but not tunnels");
counter!(pub USO_PACKED_FRAMES, "uso_packed_frames", "UDP-GSO frames those packets became (instead of one frame per segment)");
counter!(pub PARTIAL_GSO, "partial_gso", "GSO packets split by partial segmentation (device segments the bulk)");
counter!(pub PARTIAL_GSO_SEGMENTS, "partial_gso_segments", "frames produced by partial segmentation (GSO packet + software rest)");
counter!(pub GSO_CSUM_SEEDED, "gso_csum_seeded", "GSO packets whose L4 checksum was turned partial for device segmentation");
counter!(pub LINEARIZED, "linearized", "packets copied into one buffer (frag list / scatter-gather not supported)");
counter!(pub SW_CSUM_COMPLETED, "sw_csum_completed", "partial checksums completed in software (device cannot fill them)");
counter!(pub HW_CSUM, "hw_csum", "partial checksums left to the device to fill");
counter!(pub OVERSIZE_DROPS, "oversize_drops", "frames dropped: larger than MTU + envelope and not segmentable");
counter!(pub GSO_FAILED_DROPS, "gso_failed_drops", "GSO packets dropped: software segmentation refused them");
counter!(pub GSO_BAD_CSUM_DROPS, "gso_bad_csum_drops", "GSO packets dropped: their checksum is known bad");
counter!(pub TX_MALFORMED_DROPS, "tx_malformed_drops", "packets dropped: headers do not match their metadata");
counter!(pub VNET_HDR_INVALID, "vnet_hdr_invalid", "virtio_net_hdr headers refused as inconsistent");

/// Every counter of transmit preparation, for listings before they fire.
pub static COUNTERS: [&Counter; 20] = [
    &TX_PREPARED,
    &TX_UNCHANGED,
    &VLAN_SW_INSERTED,
    &VLAN_HW_INSERT,
    &HW_GSO,
    &SOFT_GSO,
    &SOFT_GSO_SEGMENTS,
    &USO_PACKED,
    &USO_PACKED_FRAMES,
    &PARTIAL_GSO,
    &PARTIAL_GSO_SEGMENTS,
    &GSO_CSUM_SEEDED,
    &LINEARIZED,
    &SW_CSUM_COMPLETED,
    &HW_CSUM,
    &OVERSIZE_DROPS,
    &GSO_FAILED_DROPS,
    &GSO_BAD_CSUM_DROPS,
    &TX_MALFORMED_DROPS,
    &VNET_HDR_INVALID,
];

/// Registers [`COUNTERS`] so listings show them at zero.
pub fn register_counters() {
    sluice_coverage::register(&COUNTERS);
}

/// A VLAN tag to insert in front of the frame's existing tags (accelerated VLAN, like Linux's
/// `skb->vlan_proto` / `skb->vlan_tci`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanInsert {
    /// TPID: 0x8100 (C-tag), 0x88a8 (S-tag) or 0x9100.
    pub tpid: u16,
    /// Tag control information (PCP, DEI, VID).
    pub tci: u16,
}

impl VlanInsert {
    /// The device feature that inserts this tag (none for TPID 0x9100: always software).
    pub const fn feature(&self) -> Option<Feature> {
        match self.tpid {
            ethertype::VLAN_8021Q => Some(Feature::VlanCtagInsert),
            ethertype::VLAN_8021AD => Some(Feature::VlanStagInsert),
            _ => None,
        }
    }
}

/// How the bytes after the head are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Tail<'a> {
    /// Nothing: the head is the whole packet.
    #[default]
    Linear,
    /// Page fragments (need `tx-scatter-gather`).
    Frags(&'a [&'a [u8]]),
    /// A chain of packet buffers (need `tx-scatter-gather-fraglist`).
    FragList(&'a [&'a [u8]]),
}

impl<'a> Tail<'a> {
    fn pieces(&self) -> &'a [&'a [u8]] {
        match *self {
            Tail::Linear => &[],
            Tail::Frags(p) | Tail::FragList(p) => p,
        }
    }
}

/// A packet to transmit: its bytes (a head holding every header, and an optional tail), its
/// metadata, and a VLAN tag still to insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxPacket<'a> {
    /// The first bytes: every header must be here.
    pub head: &'a [u8],
    /// The rest.
    pub tail: Tail<'a>,
    /// Offsets, checksum statuses and GSO request (offsets as in the frame without the tag to
    /// insert).
    pub meta: OffloadMeta,
    /// A tag to insert in front of the frame's tags.
    pub vlan: Option<VlanInsert>,
    /// The packet's layout (of head and tail together, without the tag to insert) and the
    /// configuration it was parsed with, when the caller has it: software GSO then reads it
    /// instead of parsing the packet again (it parses when the configuration is not the one
    /// it would use). The caller vouches that it describes these bytes.
    pub layout: Option<(&'a Layout, &'a ParseConfig)>,
}

impl<'a> TxPacket<'a> {
    /// A linear packet with no tag to insert.
    pub const fn new(frame: &'a [u8], meta: OffloadMeta) -> TxPacket<'a> {
        TxPacket {
            head: frame,
            tail: Tail::Linear,
            meta,
            vlan: None,
            layout: None,
        }
    }

    /// This packet with its layout, parsed with `cfg` (see [`TxPacket::layout`]).
    pub const fn with_layout(self, layout: &'a Layout, cfg: &'a ParseConfig) -> TxPacket<'a> {
        TxPacket {
            layout: Some((layout, cfg)),
            ..self
        }
    }

    /// Total length (head + tail), without the tag to insert.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.pieces().iter().map(|p| p.len()).sum::<usize>()
    }

    /// Whether the packet has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the device still has to do for one emitted frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceWork {
    /// Fill the L4 checksum at `(csum_start, csum_offset)` (the field holds the pseudo-header
    /// sum; SCTP: zero, CRC32c).
    pub l4_csum: Option<(u16, u16)>,
    /// Fill the outer (or only) IPv4 header checksum.
    pub ip_csum: bool,
    /// Fill the inner IPv4 header checksum.
    pub inner_ip_csum: bool,
    /// Segment: type, segment size, ECN.
    pub gso: Option<(GsoType, u16, bool)>,
    /// Insert this tag.
    pub vlan: Option<VlanInsert>,
    /// Whether a GSO frame is a VXLAN / Geneve packet, and where its headers are, as transmit
    /// preparation knows from the packet's metadata: a port that writes the UDP-tunnel GSO
    /// fields of a `virtio_net_hdr` reads them here instead of parsing the frame again.
    pub tunnel: TunnelHint,
}

/// See [`DeviceWork::tunnel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TunnelHint {
    /// Not said (the default): a port that needs to know parses the frame.
    #[default]
    Unknown,
    /// Not a VXLAN / Geneve packet.
    Plain,
    /// A VXLAN / Geneve packet with these header offsets.
    Udp {
        /// Outer IP header.
        outer_l3: u16,
        /// Outer UDP header.
        outer_l4: u16,
        /// Inner IP header.
        inner_l3: u16,
        /// Inner L4 header.
        inner_l4: u16,
    },
}

impl TunnelHint {
    /// The hint for a packet whose metadata is `meta`.
    pub fn of(meta: &OffloadMeta) -> TunnelHint {
        let o = meta.offsets();
        match (
            meta.tunnel(),
            o.outer_l3,
            o.outer_l4,
            o.inner_l3,
            o.inner_l4,
        ) {
            (Some(k), Some(outer_l3), Some(outer_l4), Some(inner_l3), Some(inner_l4))
                if k.is_udp() =>
            {
                TunnelHint::Udp {
                    outer_l3,
                    outer_l4,
                    inner_l3,
                    inner_l4,
                }
            }
            (Some(k), ..) if k.is_udp() => TunnelHint::Unknown,
            _ => TunnelHint::Plain,
        }
    }
}

/// What software did. A set of flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TxSteps(u16);

impl TxSteps {
    /// Nothing.
    pub const NONE: TxSteps = TxSteps(0);
    /// Inserted a VLAN tag in software.
    pub const VLAN_SW: TxSteps = TxSteps(1);
    /// Left a VLAN tag to the device.
    pub const VLAN_HW: TxSteps = TxSteps(1 << 1);
    /// Segmented fully in software.
    pub const SOFT_GSO: TxSteps = TxSteps(1 << 2);
    /// Partial segmentation.
    pub const PARTIAL_GSO: TxSteps = TxSteps(1 << 3);
    /// Handed the GSO packet to the device.
    pub const HW_GSO: TxSteps = TxSteps(1 << 4);
    /// Copied the packet into one buffer.
    pub const LINEARIZE: TxSteps = TxSteps(1 << 5);
    /// Completed at least one checksum in software.
    pub const SW_CSUM: TxSteps = TxSteps(1 << 6);
    /// Left at least one checksum to the device.
    pub const HW_CSUM: TxSteps = TxSteps(1 << 7);
    /// Dropped.
    pub const DROP: TxSteps = TxSteps(1 << 8);

    const NAMES: [(TxSteps, &'static str); 9] = [
        (TxSteps::VLAN_SW, "vlan_sw"),
        (TxSteps::VLAN_HW, "vlan_hw"),
        (TxSteps::SOFT_GSO, "soft_gso"),
        (TxSteps::PARTIAL_GSO, "partial_gso"),
        (TxSteps::HW_GSO, "hw_gso"),
        (TxSteps::LINEARIZE, "linearize"),
        (TxSteps::SW_CSUM, "sw_csum"),
        (TxSteps::HW_CSUM, "hw_csum"),
        (TxSteps::DROP, "drop"),
    ];

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: TxSteps) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union.
    pub const fn union(self, other: TxSteps) -> TxSteps {
        TxSteps(self.0 | other.0)
    }

    fn set(&mut self, a: TxSteps) {
        self.0 |= a.0;
    }
}

impl core::ops::BitOr for TxSteps {
    type Output = TxSteps;
    fn bitor(self, rhs: TxSteps) -> TxSteps {
        self.union(rhs)
    }
}

/// `+`-separated flag names, or `none`.
impl fmt::Display for TxSteps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (a, n) in TxSteps::NAMES {
            if self.contains(a) {
                if !first {
                    f.write_str("+")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl fmt::Debug for TxSteps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TxSteps({self})")
    }
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// Larger than the device accepts and not a GSO packet.
    Oversize {
        /// L2 header length (Ethernet + tags, after insertion).
        l2_len: usize,
        /// L3 packet length.
        l3_len: usize,
        /// The device MTU.
        mtu: u32,
        /// The device's largest frame.
        max_frame: usize,
    },
    /// Software segmentation refused the packet.
    Gso(GsoError),
    /// A GSO packet whose checksum is known bad.
    BadChecksumGso,
    /// The headers do not match the metadata (the text says what).
    Malformed(&'static str),
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::Oversize {
                l2_len,
                l3_len,
                mtu,
                max_frame,
            } => write!(
                f,
                "oversize: {l2_len}-byte L2 header + {l3_len}-byte packet exceeds MTU {mtu} / frame {max_frame}"
            ),
            DropReason::Gso(e) => write!(f, "software GSO failed: {e}"),
            DropReason::BadChecksumGso => write!(f, "GSO packet with a bad checksum"),
            DropReason::Malformed(w) => write!(f, "malformed: {w}"),
        }
    }
}

/// The result of [`tx_prepare`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome {
    /// Send the packet as given (no byte changed, no copy); the device does `work`.
    Unchanged {
        /// What was decided (only `*_HW` flags).
        actions: TxSteps,
        /// The device's part.
        work: DeviceWork,
    },
    /// Send the frames now in the [`TxOutput`].
    Prepared {
        /// What software did.
        actions: TxSteps,
        /// Number of frames in the output.
        frames: usize,
    },
    /// Do not send.
    Dropped(DropReason),
}

impl TxOutcome {
    /// The actions taken (`DROP` for a drop).
    pub fn actions(&self) -> TxSteps {
        match self {
            TxOutcome::Unchanged { actions, .. } | TxOutcome::Prepared { actions, .. } => *actions,
            TxOutcome::Dropped(_) => TxSteps::DROP,
        }
    }
}

/// One frame in a [`TxOutput`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct TxFrame {
    /// Bytes in the output's arena, or in its GSO output's arena (segments are not copied).
    range: Range<usize>,
    in_gso: bool,
    /// What the device still has to do.
    work: DeviceWork,
}

/// Reused buffers of [`tx_prepare`] and the frames it produced.
#[derive(Debug, Clone)]
pub struct TxOutput {
    arena: Vec<u8>,
    frames: Vec<TxFrame>,
    gso: GsoOutput,
    /// Segments to be packed as UDP-GSO frames (`pack_tunnel_uso`): headers only.
    zc: ZeroCopyOutput,
    scratch: Vec<u8>,
    /// How to find tunnels when software GSO has to parse the frame.
    pub parse: ParseConfig,
}

impl Default for TxOutput {
    fn default() -> Self {
        TxOutput::new()
    }
}

impl TxOutput {
    /// Empty buffers, default parse configuration (VXLAN 4789, Geneve 6081).
    pub fn new() -> TxOutput {
        TxOutput {
            arena: Vec::new(),
            frames: Vec::new(),
            gso: GsoOutput::new(),
            zc: ZeroCopyOutput::new(),
            scratch: Vec::new(),
            parse: ParseConfig::DEFAULT,
        }
    }

    fn clear(&mut self) {
        self.arena.clear();
        self.frames.clear();
        self.gso.clear();
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether there is no frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frame `i`: bytes and device work.
    pub fn frame(&self, i: usize) -> Option<(&[u8], &DeviceWork)> {
        let f = self.frames.get(i)?;
        let arena = if f.in_gso {
            self.gso.arena()
        } else {
            &self.arena
        };
        Some((arena.get(f.range.clone())?, &f.work))
    }

    /// Every frame, in order.
    pub fn frames(&self) -> impl Iterator<Item = (&[u8], &DeviceWork)> + '_ {
        (0..self.frames.len()).filter_map(|i| self.frame(i))
    }
}

/// Number of VLAN tags at the start of the L2 header of `frame` (at most 8 looked at).
pub fn count_tags(frame: &[u8]) -> usize {
    let mut n = 0;
    let mut at = 12;
    while n < 8 {
        match frame.get(at..at + 2) {
            Some(&[a, b]) if ethertype::is_vlan_tpid(u16::from_be_bytes([a, b])) => {
                n += 1;
                at += 4;
            }
            _ => break,
        }
    }
    n
}

/// Whether the metadata describes an L3 packet (a TUN device's: the IP header at offset 0, no
/// Ethernet header), whose first bytes are not to be read as Ethernet.
fn is_l3_packet(meta: &OffloadMeta) -> bool {
    let o = meta.offsets();
    o.outer_l2.is_none() && o.outer_l3 == Some(0)
}

/// End of the innermost L4 header (TCP by data offset, UDP 8 bytes).
fn headers_end(frame: &[u8], meta: &OffloadMeta) -> Option<usize> {
    let level = if meta.tunnel().is_some() {
        Level::Inner
    } else {
        Level::Outer
    };
    let at = usize::from(meta.offsets().l4(level)?);
    let hl = match meta.l4_proto(level)? {
        ip_proto::TCP => usize::from(frame.get(at + 12)? >> 4) * 4,
        ip_proto::UDP => 8,
        _ => return None,
    };
    Some(at + hl)
}

fn gre_has_csum(frame: &[u8], meta: &OffloadMeta) -> bool {
    meta.tunnel() == Some(TunnelKind::Gre)
        && meta
            .offsets()
            .outer_l4
            .and_then(|o| frame.get(usize::from(o)))
            .is_some_and(|b| b & 0x80 != 0)
}

/// Whether a VXLAN/Geneve packet carries an outer UDP checksum (a non-zero field: the statuses
/// say "absent" only after verification).
fn udp_tunnel_csum(frame: &[u8], meta: &OffloadMeta) -> bool {
    meta.tunnel().is_some_and(TunnelKind::is_udp)
        && !meta.csum_absent(Level::Outer)
        && meta
            .offsets()
            .outer_l4
            .and_then(|o| frame.get(usize::from(o) + 6..usize::from(o) + 8))
            .is_some_and(|f| f != [0, 0])
}

/// Whether features `f` let the device fill the L4 checksum of `level`.
fn device_fills_l4(f: Features, meta: &OffloadMeta, level: Level) -> bool {
    crate::features::can_fill_l4(f, meta, level)
}

/// Linux `netdev_fix_features`: segmentation needs scatter-gather, scatter-gather needs a
/// checksum feature.
fn fix_features(mut f: Features) -> Features {
    let any_csum =
        f.intersects(Features::TX_CSUM_GENERIC | Features::TX_CSUM_IPV4 | Features::TX_CSUM_IPV6);
    if !any_csum {
        f = f.without(Features::TX_SG);
    }
    if !f.has(Feature::TxSg) {
        f = f.without(Features::GSO_MASK);
    }
    f
}

/// Prepares `pkt` for transmission on `dev`: see the [module documentation](self). Frames
/// produced are in `out` (cleared first) for [`TxOutcome::Prepared`].
///
/// ```
/// use sluice_offload::features::{Device, Features};
/// use sluice_offload::tx::{tx_prepare, TxOutput, TxPacket, TxSteps};
/// use sluice_packet::{GsoType, OffloadMeta};
/// // Ethernet + IPv4 (DF) + TCP (ACK, seq 1) + 3000 payload bytes: a TSO super-packet.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0x0b, 0xe0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
/// frame.extend((0..3000u32).map(|i| i as u8));
/// let mut meta = OffloadMeta::from_layout(&sluice_wire::parse(&frame).unwrap());
/// meta.set_gso(GsoType::TcpV4, 1000, false).unwrap();
/// let pkt = TxPacket::new(&frame, meta);
/// let mut out = TxOutput::new();
///
/// // A device that segments TCP itself gets one GSO packet, and the work left to it.
/// let list = "tx-scatter-gather,tx-checksum-ipv4,tx-tcp-segmentation";
/// let tso = Device::new(Features::parse_list(list).unwrap());
/// let outcome = tx_prepare(&pkt, &tso, &mut out);
/// assert!(outcome.actions().contains(TxSteps::HW_GSO));
/// let (sent, work) = out.frame(0).unwrap();
/// assert_eq!(sent.len(), frame.len());
/// assert_eq!(work.gso, Some((GsoType::TcpV4, 1000, false)));
/// assert_eq!(work.l4_csum, Some((34, 16))); // the device fills the TCP checksum per segment
///
/// // A device with no offloads gets three finished frames, segmented in software.
/// let outcome = tx_prepare(&pkt, &Device::new(Features::NONE), &mut out);
/// assert!(outcome.actions().contains(TxSteps::SOFT_GSO));
/// assert_eq!(out.len(), 3);
/// assert!(out.frames().all(|(f, work)| f.len() == 1054 && work.gso.is_none()));
/// ```
pub fn tx_prepare(pkt: &TxPacket<'_>, dev: &Device, out: &mut TxOutput) -> TxOutcome {
    out.clear();
    TX_PREPARED.inc();
    let r = prepare(pkt, dev, out);
    match &r {
        TxOutcome::Dropped(d) => match d {
            DropReason::Oversize { .. } => OVERSIZE_DROPS.inc(),
            DropReason::Gso(GsoError::FrameTooLong { .. }) => OVERSIZE_DROPS.inc(),
            DropReason::Gso(_) => GSO_FAILED_DROPS.inc(),
            DropReason::BadChecksumGso => GSO_BAD_CSUM_DROPS.inc(),
            DropReason::Malformed(_) => TX_MALFORMED_DROPS.inc(),
        },
        TxOutcome::Unchanged { .. } => TX_UNCHANGED.inc(),
        TxOutcome::Prepared { .. } => {}
    }
    r
}

fn prepare(pkt: &TxPacket<'_>, dev: &Device, out: &mut TxOutput) -> TxOutcome {
    let mut meta = pkt.meta;
    let head = pkt.head;
    let len = pkt.len();
    let l3_packet = is_l3_packet(&meta);
    if l3_packet && pkt.vlan.is_some() {
        return TxOutcome::Dropped(DropReason::Malformed("no L2 header for the VLAN tag"));
    }
    let tags = if l3_packet { 0 } else { count_tags(head) };
    let ins = if pkt.vlan.is_some() { 4 } else { 0 };
    let is_gso = meta.gso_type() != GsoType::None;
    let hdr_end = headers_end(head, &meta);
    let gso_segs = match (is_gso, hdr_end) {
        (true, Some(h)) if meta.segment_size() > 0 => {
            let payload = len.saturating_sub(h);
            u32::try_from(payload.div_ceil(usize::from(meta.segment_size()))).unwrap_or(u32::MAX)
        }
        _ => 0,
    };
    let shape = PacketShape {
        in_band_tags: tags,
        tag_to_insert: pkt.vlan.is_some(),
        len: len + ins,
        gso_segs,
    };
    let f = fix_features(features_for(&meta, &shape, dev));

    // 1. Oversize: a non-GSO frame that does not fit, or a TCP / USO GSO packet whose segments
    // would not fit (no segmentation helps): nothing else is worth doing.
    let l2_len = match meta.offsets().outer_l3 {
        Some(l3) => usize::from(l3),
        None => 14 + 4 * tags,
    } + ins;
    let l3_len = if !is_gso {
        Some((len + ins).saturating_sub(l2_len))
    } else if matches!(
        meta.gso_type(),
        GsoType::TcpV4 | GsoType::TcpV6 | GsoType::UdpL4
    ) {
        hdr_end.map(|h| (h + ins + usize::from(meta.segment_size())).saturating_sub(l2_len))
    } else {
        None
    };
    if let Some(l3_len) = l3_len.filter(|&l3_len| !dev.fits(l2_len, l3_len)) {
        return TxOutcome::Dropped(DropReason::Oversize {
            l2_len,
            l3_len,
            mtu: dev.mtu,
            max_frame: dev.max_frame(),
        });
    }

    let mut actions = TxSteps::NONE;
    // The layout the packet came with, while it still describes the bytes being prepared.
    let mut known = pkt.layout;
    let mut work = DeviceWork::default();
    // The working copy, materialised only when a byte must change or pieces must be joined.
    let mut linear = false;

    // 2. VLAN insertion.
    if let Some(tag) = pkt.vlan {
        if tag.feature().is_some_and(|x| f.has(x)) {
            work.vlan = Some(tag);
            actions.set(TxSteps::VLAN_HW);
            VLAN_HW_INSERT.inc();
        } else {
            gather(pkt, &mut out.arena);
            linear = true;
            insert_tag(&mut out.arena, tag);
            // The packet's layout (if it came with one) is of the bytes without the tag.
            known = None;
            if meta.vlan_pushed(4).is_err() {
                return TxOutcome::Dropped(DropReason::Malformed("no L2 header for the VLAN tag"));
            }
            actions.set(TxSteps::VLAN_SW);
            VLAN_SW_INSERTED.inc();
        }
    }

    // 3. GSO.
    if is_gso {
        let innermost = match meta.tunnel() {
            Some(_) => Slot::InnerL4,
            None => Slot::OuterL4,
        };
        if meta.status(innermost) == CsumStatus::Bad {
            return TxOutcome::Dropped(DropReason::BadChecksumGso);
        }
        let needed = gso_features_needed(
            &meta,
            gre_has_csum(head, &meta),
            udp_tunnel_csum(head, &meta),
        );
        let hw = needed.is_some_and(|n| f.contains(n));
        let caps = PartialCaps {
            tunnel_segmentation: needed
                .is_some_and(|n| f.contains(n.without(Features::UDP_TNL_CSUM) | Features::UDP_TNL)),
            tunnel_csum_segmentation: f.has(Feature::UdpTnlCsum),
            gso_partial: f.has(Feature::GsoPartial),
        };
        let partial = !hw
            && gso::use_partial_segmentation(
                meta.tunnel().is_some(),
                udp_tunnel_csum(head, &meta),
                caps,
            );
        let needs_flat = match pkt.tail {
            Tail::Linear => false,
            Tail::Frags(_) => !f.has(Feature::TxSg),
            Tail::FragList(_) => !f.has(Feature::TxFraglist),
        };
        if hw {
            // The device segments: give it one buffer it can read, with the L4 checksum partial.
            if needs_flat && !linear {
                gather(pkt, &mut out.arena);
                linear = true;
                actions.set(TxSteps::LINEARIZE);
                LINEARIZED.inc();
            }
            if meta.status(innermost) != CsumStatus::Partial {
                if !linear {
                    gather(pkt, &mut out.arena);
                    linear = true;
                }
                let level = innermost.level();
                if meta.status(innermost) == CsumStatus::Unknown
                    && recompute_checksum(&mut out.arena, &mut meta, innermost).is_err()
                {
                    return TxOutcome::Dropped(DropReason::Malformed(
                        "L4 checksum of a GSO packet",
                    ));
                }
                if defer_l4_checksum(&mut out.arena, &mut meta, level).is_err() {
                    return TxOutcome::Dropped(DropReason::Malformed(
                        "L4 checksum of a GSO packet",
                    ));
                }
                GSO_CSUM_SEEDED.inc();
            }
            work.gso = Some((meta.gso_type(), meta.segment_size(), meta.gso_ecn()));
            work.l4_csum = Some((meta.csum_start(), meta.csum_offset()));
            work.tunnel = TunnelHint::of(&meta);
            actions.set(TxSteps::HW_GSO);
            HW_GSO.inc();
            return finish(pkt, out, linear, actions, work);
        }
        // A VXLAN / Geneve packet for a device that segments plain UDP: its segments are sent
        // packed as UDP-GSO frames (`pack_tunnel_uso`), so every checksum inside them must be
        // complete. The outer datagrams are plain UDP to the device: its own features apply (its
        // VLAN features under a tag), not those for encapsulated packets.
        let tagged = meta.offsets().outer_l3.is_some_and(|l3| l3 > 14);
        let plain = if tagged {
            dev.vlan_features
        } else {
            dev.features
        };
        let pack = !partial
            && work.vlan.is_none()
            && meta.tunnel().is_some_and(TunnelKind::is_udp)
            && plain.contains(Features::USO | Features::TX_SG);
        // Software (full or partial): segment from one contiguous buffer (the packet itself
        // when it is one).
        let mut frame = core::mem::take(&mut out.scratch);
        let contiguous: &[u8] = if !linear && pkt.tail == Tail::Linear {
            pkt.head
        } else {
            if linear {
                core::mem::swap(&mut frame, &mut out.arena);
            } else {
                gather(pkt, &mut frame);
            }
            &frame
        };
        if pack {
            let layout = layout_for(known, &out.parse);
            if let Some(k) = pack_tunnel_uso(contiguous, layout, &meta, dev, out) {
                out.scratch = frame;
                actions.set(TxSteps::SOFT_GSO);
                actions.set(TxSteps::HW_CSUM);
                return TxOutcome::Prepared { actions, frames: k };
            }
        }
        let r = soft_gso(contiguous, known, &meta, f, dev, &work, partial, out);
        out.scratch = frame;
        return match r {
            Ok(n) => {
                actions.set(if partial {
                    TxSteps::PARTIAL_GSO
                } else {
                    TxSteps::SOFT_GSO
                });
                if out.frames.iter().any(|fr| fr.work.l4_csum.is_some()) {
                    actions.set(TxSteps::HW_CSUM);
                }
                TxOutcome::Prepared { actions, frames: n }
            }
            Err(d) => TxOutcome::Dropped(d),
        };
    }

    // 4. Linearize what the device cannot read.
    let needs_flat = match pkt.tail {
        Tail::Linear => false,
        Tail::Frags(_) => !f.has(Feature::TxSg),
        Tail::FragList(_) => !f.has(Feature::TxFraglist),
    };
    if needs_flat && !linear {
        gather(pkt, &mut out.arena);
        linear = true;
        actions.set(TxSteps::LINEARIZE);
        LINEARIZED.inc();
    }

    // 5. Checksums: inner first (the outer tunnel checksum covers the inner headers).
    let l4_partials = [Slot::InnerL4, Slot::OuterL4]
        .into_iter()
        .filter(|&s| meta.status(s) == CsumStatus::Partial && meta.offsets().of(s).is_some())
        .count();
    for slot in [Slot::InnerIp, Slot::InnerL4, Slot::OuterIp, Slot::OuterL4] {
        if meta.status(slot) != CsumStatus::Partial || meta.offsets().of(slot).is_none() {
            continue;
        }
        let level = slot.level();
        let device = if slot.is_l4() {
            // One csum_start: with two partial L4 checksums the inner one is done here.
            device_fills_l4(f, &meta, level) && !(slot == Slot::InnerL4 && l4_partials > 1)
        } else {
            f.has(Feature::TxCsumIpv4Header)
        };
        if device {
            match slot {
                Slot::OuterIp => work.ip_csum = true,
                Slot::InnerIp => work.inner_ip_csum = true,
                _ => {}
            }
            actions.set(TxSteps::HW_CSUM);
            HW_CSUM.inc();
            continue;
        }
        if !linear {
            gather(pkt, &mut out.arena);
            linear = true;
        }
        if recompute_checksum(&mut out.arena, &mut meta, slot).is_err() {
            return TxOutcome::Dropped(DropReason::Malformed(
                "partial checksum does not fit the frame",
            ));
        }
        actions.set(TxSteps::SW_CSUM);
        SW_CSUM_COMPLETED.inc();
    }
    if meta.partial_slot().is_some() {
        work.l4_csum = Some((meta.csum_start(), meta.csum_offset()));
    }
    finish(pkt, out, linear, actions, work)
}

/// A VXLAN / Geneve GSO packet for a device that segments plain UDP (USO) but not tunnels:
/// segmented in software (every checksum inside complete) and sent as UDP-GSO frames —
/// consecutive segments become one frame each, the outer headers once, then each segment's
/// outer UDP payload (tunnel header and inner frame) back to back, `gso_size` one segment's
/// payload — so the device (for an `AF_PACKET` port, the kernel) cuts them apart again and
/// fills each outer UDP checksum (wireguard-go sends its tunnel datagrams the same way). One or
/// two frames instead of ~44 per 64 KiB super-packet, and the payload is copied once (the
/// segments' headers are made apart, zero-copy). Returns the number of frames in `out`, or
/// `None` (the caller segments as usual) when the packet does not fit the scheme.
fn pack_tunnel_uso(
    frame: &[u8],
    known: Option<&Layout>,
    meta: &OffloadMeta,
    dev: &Device,
    out: &mut TxOutput,
) -> Option<usize> {
    let o = meta.offsets();
    let (l3, l4) = (usize::from(o.outer_l3?), usize::from(o.outer_l4?));
    let hdr = l4 + 8;
    let layout = known_or_parsed(known, frame, &out.parse)?;
    let mut p = GsoParams::new(meta.gso_type(), meta.segment_size());
    p.ecn = meta.gso_ecn();
    p.max_frame_len = dev.max_frame();
    out.zc.clear();
    let n = gso::segment_zero_copy(frame, &layout, &p, &mut out.zc).ok()?;
    if n < 2 {
        return None;
    }
    let zc = &out.zc;
    let seg = |i: usize| zc.parts(i, frame);
    let seg_len = |i: usize| seg(i).map(|[h, b]| h.len() + b.len());
    let [first_hdr, _] = seg(0)?;
    let first_len = seg_len(0)?;
    let unit = first_len.checked_sub(hdr).filter(|&u| u > 0)?;
    let v4 = first_hdr.get(l3).is_some_and(|b| b >> 4 == 4);
    // Every segment but the last as long as the first, the last no longer; the same outer
    // headers up to the IP length field (addresses, ports, next headers).
    let same_prefix = l3 + if v4 { 2 } else { 4 };
    for i in 1..n {
        let [h, _] = seg(i)?;
        let len = seg_len(i)?;
        let ok = if i + 1 < n {
            len == first_len
        } else {
            len > hdr && len <= first_len
        };
        if !ok || h.len() < hdr || h.get(..same_prefix) != first_hdr.get(..same_prefix) {
            return None;
        }
    }
    // Datagrams per frame: what the IP length field, the device's GSO limits and USO allow.
    let by_len = 65_535usize.saturating_sub(l4 - l3 + 8) / unit;
    let by_dev = (dev.gso_max_size as usize).saturating_sub(hdr) / unit;
    let per = by_len
        .min(by_dev)
        .min(dev.gso_max_segs as usize)
        .min(gso::USO_MAX_SEGMENTS as usize);
    if per < 2 {
        return None;
    }
    out.arena.clear();
    out.frames.clear();
    let mut i = 0;
    while i < n {
        let k = (n - i).min(per);
        let start = out.arena.len();
        let [h0, _] = seg(i)?;
        out.arena.extend_from_slice(h0.get(..hdr)?);
        for j in i..i + k {
            let [h, b] = seg(j)?;
            out.arena.extend_from_slice(h.get(hdr..)?);
            out.arena.extend_from_slice(b);
        }
        let frame = out.arena.get_mut(start..)?;
        let udp_len = frame.len() - l4;
        let udp_len16 = u16::try_from(udp_len).ok()?;
        if v4 {
            // The IP ID stays the one of the frame's first segment (the device counts on).
            let ip_len = u16::try_from(frame.len() - l3).ok()?;
            frame
                .get_mut(l3 + 2..l3 + 4)?
                .copy_from_slice(&ip_len.to_be_bytes());
            fill_ipv4_header_at(frame, l3);
        } else {
            let pl = u16::try_from(frame.len() - l3 - 40).ok()?;
            frame
                .get_mut(l3 + 4..l3 + 6)?
                .copy_from_slice(&pl.to_be_bytes());
        }
        frame
            .get_mut(l4 + 4..l4 + 6)?
            .copy_from_slice(&udp_len16.to_be_bytes());
        let seed = if v4 {
            let a: [u8; 4] = frame.get(l3 + 12..l3 + 16)?.try_into().ok()?;
            let b: [u8; 4] = frame.get(l3 + 16..l3 + 20)?.try_into().ok()?;
            sluice_checksum::pseudo::ipv4(a, b, 17, udp_len16)
        } else {
            let a: [u8; 16] = frame.get(l3 + 8..l3 + 24)?.try_into().ok()?;
            let b: [u8; 16] = frame.get(l3 + 24..l3 + 40)?.try_into().ok()?;
            sluice_checksum::pseudo::ipv6(&a, &b, 17, udp_len as u32)
        };
        frame
            .get_mut(l4 + 6..l4 + 8)?
            .copy_from_slice(&seed.to_be_bytes());
        let work = DeviceWork {
            l4_csum: Some((u16::try_from(l4).ok()?, 6)),
            gso: (k > 1).then_some((GsoType::UdpL4, u16::try_from(unit).ok()?, false)),
            ..DeviceWork::default()
        };
        let end = out.arena.len();
        out.frames.push(TxFrame {
            range: start..end,
            in_gso: false,
            work,
        });
        i += k;
    }
    SOFT_GSO.inc();
    SOFT_GSO_SEGMENTS.add(n as u64);
    USO_PACKED.inc();
    USO_PACKED_FRAMES.add(out.frames.len() as u64);
    Some(out.frames.len())
}

fn finish(
    _pkt: &TxPacket<'_>,
    out: &mut TxOutput,
    linear: bool,
    actions: TxSteps,
    work: DeviceWork,
) -> TxOutcome {
    if !linear {
        return TxOutcome::Unchanged { actions, work };
    }
    out.frames.push(TxFrame {
        range: 0..out.arena.len(),
        in_gso: false,
        work,
    });
    TxOutcome::Prepared { actions, frames: 1 }
}

/// `known`'s layout when it was parsed with `cfg` (see [`TxPacket::layout`]).
fn layout_for<'a>(
    known: Option<(&'a Layout, &ParseConfig)>,
    cfg: &ParseConfig,
) -> Option<&'a Layout> {
    known.filter(|(_, c)| *c == cfg).map(|(l, _)| l)
}

/// `known`, or else a parse of `frame` with `cfg` (`None` when it does not parse whole).
fn known_or_parsed<'a>(
    known: Option<&'a Layout>,
    frame: &[u8],
    cfg: &ParseConfig,
) -> Option<Cow<'a, Layout>> {
    match known {
        Some(l) => Some(Cow::Borrowed(l)),
        None => sluice_wire::parse_with(frame, cfg).ok().map(Cow::Owned),
    }
}

/// Copies head and tail into `buf`.
fn gather(pkt: &TxPacket<'_>, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(pkt.head);
    for p in pkt.tail.pieces() {
        buf.extend_from_slice(p);
    }
}

/// Inserts a 4-byte tag after the MAC addresses.
fn insert_tag(buf: &mut Vec<u8>, tag: VlanInsert) {
    let at = buf.len().min(12);
    let [a, b] = tag.tpid.to_be_bytes();
    let [c, d] = tag.tci.to_be_bytes();
    buf.splice(at..at, [a, b, c, d]);
}

#[allow(clippy::too_many_arguments)]
fn soft_gso(
    frame: &[u8],
    known: Option<(&Layout, &ParseConfig)>,
    meta: &OffloadMeta,
    f: Features,
    dev: &Device,
    work: &DeviceWork,
    partial: bool,
    out: &mut TxOutput,
) -> Result<usize, DropReason> {
    // An L3 packet (its metadata says so) parses from its IP header whatever `out.parse` says.
    let cfg = if is_l3_packet(meta) {
        out.parse.with_link(LinkType::Ip)
    } else {
        out.parse
    };
    // The layout the packet carries, else a parse.
    let layout = known_or_parsed(layout_for(known, &cfg), frame, &cfg).ok_or(
        DropReason::Malformed("frame does not parse for software GSO"),
    )?;
    let innermost = if meta.tunnel().is_some() {
        Level::Inner
    } else {
        Level::Outer
    };
    let mut p = GsoParams::new(meta.gso_type(), meta.segment_size());
    p.ecn = meta.gso_ecn();
    p.l4_csum = if device_fills_l4(f, meta, innermost) {
        CsumMode::Partial
    } else {
        CsumMode::Full
    };
    p.ip_csum = if f.has(Feature::TxCsumIpv4Header) {
        CsumMode::Partial
    } else {
        CsumMode::Full
    };
    p.max_frame_len = dev
        .max_frame()
        .saturating_sub(if work.vlan.is_some() { 4 } else { 0 });
    out.gso.clear();
    let n = if partial {
        gso::segment_partial(frame, &layout, &p, &mut out.gso)
    } else {
        gso::segment(frame, &layout, &p, &mut out.gso)
    }
    .map_err(DropReason::Gso)?;
    out.frames.clear();
    // A partial GSO segment keeps the packet's headers, where they were.
    let tunnel = if partial {
        TunnelHint::of(meta)
    } else {
        TunnelHint::Plain
    };
    for i in 0..out.gso.len() {
        let Some(seg) = out.gso.segment(i) else {
            continue;
        };
        let m = seg.meta;
        let w = DeviceWork {
            l4_csum: (m.l4_csum == CsumStatus::Partial).then_some((m.csum_start, m.csum_offset)),
            ip_csum: m.ip_csum == CsumStatus::Partial,
            inner_ip_csum: m.ip_csum == CsumStatus::Partial && meta.tunnel().is_some(),
            gso: (m.gso_type != GsoType::None).then_some((m.gso_type, m.gso_size, meta.gso_ecn())),
            vlan: work.vlan,
            tunnel,
        };
        out.frames.push(TxFrame {
            range: seg.range.clone(),
            in_gso: true,
            work: w,
        });
    }
    if partial {
        PARTIAL_GSO.inc();
        PARTIAL_GSO_SEGMENTS.add(n as u64);
    } else {
        SOFT_GSO.inc();
        SOFT_GSO_SEGMENTS.add(n as u64);
    }
    Ok(n)
}

/// Why [`emulate_device`] could not carry out a [`DeviceWork`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The frame does not parse.
    Parse,
    /// A checksum location lies outside the frame or at no L4 header.
    CsumLocation,
    /// Segmentation failed.
    Gso(GsoError),
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Parse => write!(f, "frame does not parse"),
            DeviceError::CsumLocation => write!(f, "checksum location outside the frame"),
            DeviceError::Gso(e) => write!(f, "device segmentation failed: {e}"),
        }
    }
}

impl std::error::Error for DeviceError {}

/// What a device with every offload would put on the wire for `frame` and `work`: insert the
/// tag, segment (checksums computed per segment), fill the partial L4 checksum (generic
/// ones'-complement fill from `csum_start` to the end of its IP packet; CRC32c for SCTP) and
/// the IPv4 header checksums. Frames are appended to `wire`. For tests and the offline CLI
/// (`sluice pcap tx`); it allocates.
pub fn emulate_device(
    frame: &[u8],
    work: &DeviceWork,
    cfg: &ParseConfig,
    wire: &mut Vec<Vec<u8>>,
) -> Result<(), DeviceError> {
    let mut buf = frame.to_vec();
    let shift = match work.vlan {
        Some(tag) => {
            insert_tag(&mut buf, tag);
            4
        }
        None => 0,
    };
    let mut layout = sluice_wire::parse_with(&buf, cfg).map_err(|_| DeviceError::Parse)?;
    if let Some((t, size, ecn)) = work.gso {
        // UDP segmentation from the outer UDP header (the checksum start says where): a device
        // sees plain UDP there, whatever the payload (packed tunnel datagrams).
        let outer_udp = work.l4_csum.map(|(start, _)| usize::from(start) + shift);
        if t == GsoType::UdpL4 && layout.inner.is_some() && outer_udp == layout.outer.l4 {
            let plain = ParseConfig {
                parse_tunnels: false,
                ..*cfg
            };
            layout = sluice_wire::parse_with(&buf, &plain).map_err(|_| DeviceError::Parse)?;
        }
        let mut p = GsoParams::new(t, size);
        p.ecn = ecn;
        let mut out = GsoOutput::new();
        gso::segment(&buf, &layout, &p, &mut out).map_err(DeviceError::Gso)?;
        wire.extend(out.frames().map(<[u8]>::to_vec));
        return Ok(());
    }
    let stacks = [Some(layout.outer), layout.inner];
    if work.inner_ip_csum {
        if let Some(h) = layout.inner.as_ref() {
            fill_ipv4_header(&mut buf, h);
        }
    }
    if let Some((start, off)) = work.l4_csum {
        let start = usize::from(start) + shift;
        let h = stacks
            .iter()
            .flatten()
            .find(|h| h.l4 == Some(start))
            .ok_or(DeviceError::CsumLocation)?;
        let end = h.l3_end.ok_or(DeviceError::CsumLocation)?;
        let field = start + usize::from(off);
        if h.l4_proto == Some(ip_proto::SCTP) {
            let crc = buf
                .get(start..end)
                .map(sluice_checksum::crc32c::sctp)
                .ok_or(DeviceError::CsumLocation)?;
            buf.get_mut(field..field + 4)
                .ok_or(DeviceError::CsumLocation)?
                .copy_from_slice(&crc.to_be_bytes());
        } else {
            let c = buf
                .get(start..end)
                .map(sluice_checksum::checksum)
                .ok_or(DeviceError::CsumLocation)?;
            let c = if c == 0 && h.l4_proto == Some(ip_proto::UDP) {
                0xffff
            } else {
                c
            };
            buf.get_mut(field..field + 2)
                .ok_or(DeviceError::CsumLocation)?
                .copy_from_slice(&c.to_be_bytes());
        }
    }
    if work.ip_csum {
        fill_ipv4_header(&mut buf, &layout.outer);
    }
    wire.push(buf);
    Ok(())
}

fn fill_ipv4_header(buf: &mut [u8], h: &sluice_wire::Headers) {
    if let (Some(l3), Some(L3Kind::Ipv4)) = (h.l3, h.l3_kind) {
        fill_ipv4_header_at(buf, l3);
    }
}

/// Computes the checksum of the IPv4 header at `l3` (its length from its IHL) into its field.
fn fill_ipv4_header_at(buf: &mut [u8], l3: usize) {
    let hl = buf.get(l3).map_or(0, |b| usize::from(b & 0x0f) * 4);
    if let Some(f) = buf.get_mut(l3 + 10..l3 + 12) {
        f.fill(0);
    }
    let c = buf.get(l3..l3 + hl).map(sluice_checksum::checksum);
    if let (Some(c), Some(f)) = (c, buf.get_mut(l3 + 10..l3 + 12)) {
        f.copy_from_slice(&c.to_be_bytes());
    }
}

/// Decodes the `virtio_net_hdr` in front of a received frame (`raw`, in format `fmt`) into
/// metadata for `frame` (parsed as `layout`), counting every refusal in `vnet_hdr_invalid`. The
/// entry point for ports that receive with a vnet header (TAP, `AF_PACKET`, vhost).
pub fn decode_vnet_hdr(
    raw: &[u8],
    fmt: HdrFormat,
    frame: &[u8],
    layout: &sluice_wire::Layout,
) -> Result<(VirtioNetHdr, OffloadMeta), VirtioError> {
    let r =
        VirtioNetHdr::decode(raw, fmt).and_then(|h| h.to_meta(fmt, frame, layout).map(|m| (h, m)));
    if r.is_err() {
        VNET_HDR_INVALID.inc();
    }
    r
}
