//! Software segmentation offload (GSO): split one super-packet into wire-sized frames, byte for
//! byte as Linux's software GSO (`validate_xmit_skb` → `skb_gso_segment`) does.
//!
//! # What it does
//!
//! - **TCP** over IPv4 (with options) and IPv6 (with extension headers): the payload after the
//!   innermost TCP header is split into `segment_size` pieces; per segment the IP total / payload
//!   length, the IPv4 ID (the super-packet's ID plus the segment index, unless
//!   [`GsoParams::fixed_id`]) and the TCP sequence number are fixed; CWR stays only on the first
//!   segment, FIN and PSH only on the last; RST and URG (and the urgent pointer) are copied to
//!   every segment unchanged, as `tcp_gso_segment` does.
//! - **USO** ([`GsoType::UdpL4`]): every segment is a UDP datagram with its own length and
//!   checksum.
//! - **UFO** ([`GsoType::Udp`]): the UDP datagram (its checksum computed over the whole datagram)
//!   is split into IP fragments of `segment_size` IP-payload bytes: IPv4 fragments share the ID
//!   and carry offsets and MF (DF is cleared, as the kernel does); IPv6 fragments get a Fragment
//!   header after the unfragmentable part, with the ID from [`GsoParams::ipv6_frag_id`].
//! - **Tunnels** (VXLAN, Geneve, GRE with or without key/sequence/checksum) over IPv4 or IPv6,
//!   carrying inner TCP or USO: inner and outer IP headers, the outer UDP length and checksum
//!   ([`OuterCsum`]: zero, full, or by cancellation — the "local checksum offload" identity, which
//!   gives the same bytes) and the GRE checksum are fixed per segment. A GRE sequence number is
//!   copied unchanged to every segment, as Linux's `gre_gso_segment` does.
//! - **VLAN stacks** of any depth outside and inside the tunnel: they are bytes of the header
//!   prefix; every offset comes from the parser's [`Layout`].
//! - **Partial segmentation** ([`segment_partial`]) and the rule for when to use it
//!   ([`use_partial_segmentation`]).
//!
//! # Output
//!
//! [`GsoOutput`] holds contiguous frames in one reused arena; [`ZeroCopyOutput`] holds only the
//! fresh header bytes of every segment in a reused arena plus the range of the original frame
//! that is its payload, for scatter-gather ports. After the first packets have grown the arenas,
//! segmenting allocates nothing.
//!
//! # Guarantees
//!
//! No function here panics on any input frame, layout or parameters: everything that cannot be
//! segmented is a [`GsoError`]. No segment longer than [`GsoParams::max_frame_len`] is emitted.
//! The checksum fields of the input are never trusted: every checksum of every segment is
//! computed from the bytes (or left `Partial` with the pseudo-header sum, as a device expects).

use core::ops::Range;
use sluice_checksum::{pseudo, Accumulator};
use sluice_packet::{CsumStatus, GsoType};
use sluice_wire::bytes::{read_array, read_u16, read_u32, write_u16, write_u32, OutOfRange};
use sluice_wire::{ip_proto, Headers, L3Kind, Layer, Layout, Tunnel, TunnelKind};

/// Linux's `UDP_MAX_SEGMENTS`: the most segments one USO packet may produce.
pub const USO_MAX_SEGMENTS: u16 = 128;
/// Linux's default `gso_max_segs` (`GSO_MAX_SEGS`): the most segments of a TCP GSO packet.
pub const TCP_MAX_SEGMENTS: u16 = 65535;
/// The most bytes one IP packet's payload (IPv4 total length minus header, IPv6 payload length)
/// or one reassembled UFO datagram may have.
pub const MAX_IP_PAYLOAD: usize = 65535;
/// The most header bytes (everything before the segmented payload) a segment may have.
pub const MAX_HEADER_LEN: usize = 512;

/// How a checksum of every segment is produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CsumMode {
    /// Computed in software (the target has no checksum offload).
    #[default]
    Full,
    /// Left to the device: an L4 field holds the pseudo-header sum (uncomplemented, as
    /// `CHECKSUM_PARTIAL` / `VIRTIO_NET_HDR_F_NEEDS_CSUM` expect) and [`SegmentMeta::csum_start`]
    /// / [`SegmentMeta::csum_offset`] locate it; an IPv4 header checksum is left zero.
    Partial,
}

/// The outer UDP checksum of a VXLAN/Geneve tunnel on every segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OuterCsum {
    /// Zero: the tunnel carries no outer checksum (allowed for UDP over IPv4 and, per RFC 6935,
    /// for tunnels over IPv6).
    Zero,
    /// Summed over the whole outer datagram.
    Full,
    /// Computed by cancellation ("local checksum offload"): a completed inner L4 region sums to
    /// the complement of its pseudo-header, so only the outer UDP/tunnel/inner headers are
    /// summed. Gives the same bytes as `Full`.
    Lco,
    /// Zero if the input's outer UDP checksum field is zero, else computed (`Lco`).
    #[default]
    AsInput,
}

/// How the GSO packet of [`segment_partial`] carries its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PartialHeaders {
    /// As a super-packet for a TSO device: IP and UDP lengths cover the whole GSO packet and
    /// the L4 pseudo-header sum is for its whole L4 length.
    #[default]
    Whole,
    /// As Linux's `GSO_PARTIAL` (`tx-gso-partial`): every length, the L4 pseudo-header sum and
    /// an outer tunnel checksum are those of one `segment_size` segment, so a device that can
    /// segment the tunnel but not compute the outer UDP checksum only replicates them (with
    /// equal-sized segments the cancellation-computed outer checksum is the same for all).
    PerSegment,
}

/// A segmentation request: what to segment and how to produce the checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GsoParams {
    /// The kind of segmentation (TCPv4/v6, USO, UFO). `GsoType::None` is refused.
    pub gso_type: GsoType,
    /// Payload bytes per segment: L4 payload for TCP and USO, IP payload per fragment for UFO
    /// (a multiple of 8), as `virtio_net_hdr.gso_size`.
    pub segment_size: u16,
    /// The GSO ECN bit (`SKB_GSO_TCP_ECN`): the super-packet may carry CWR. Software GSO treats
    /// CWR the same either way (first segment only); the bit is kept on a partial GSO packet.
    pub ecn: bool,
    /// Keep every IPv4 ID equal to the super-packet's (`SKB_GSO_TCP_FIXEDID`, "mangleid")
    /// instead of incrementing it per segment. Only with DF set on every IPv4 header
    /// ([`GsoError::FixedIdWithoutDf`] otherwise). Ignored by UFO, whose fragments always share
    /// the ID.
    pub fixed_id: bool,
    /// How the innermost L4 (TCP/UDP) checksum is produced.
    pub l4_csum: CsumMode,
    /// How IPv4 header checksums (outer and inner) are produced.
    pub ip_csum: CsumMode,
    /// The outer UDP checksum of a VXLAN/Geneve tunnel. When the inner L4 checksum is
    /// `Partial`, a non-zero outer checksum is always computed by cancellation (the only way it
    /// can be right before the device fills the inner field).
    pub outer_csum: OuterCsum,
    /// Most segments allowed; 0 means the default for the type ([`TCP_MAX_SEGMENTS`],
    /// [`USO_MAX_SEGMENTS`] for USO, unbounded but for 64 KiB for UFO).
    pub max_segments: u16,
    /// Longest frame (from the first byte of the Ethernet header to the end of the IP packet) a
    /// segment may be: the target's MTU plus its envelope allowance (L2 header and tags). 0: no
    /// limit beyond 64 KiB of IP payload.
    pub max_frame_len: usize,
    /// How [`segment_partial`] writes the GSO packet's headers.
    pub partial_headers: PartialHeaders,
    /// Identification of the Fragment header inserted by IPv6 UFO; `None` derives one from the
    /// addresses and the super-packet's length (deterministic; the kernel picks a random one).
    pub ipv6_frag_id: Option<u32>,
}

impl GsoParams {
    /// A request with default settings: full software checksums, incrementing IDs, the outer
    /// checksum as in the input, default segment limit, no frame-length limit.
    pub const fn new(gso_type: GsoType, segment_size: u16) -> Self {
        GsoParams {
            gso_type,
            segment_size,
            ecn: false,
            fixed_id: false,
            l4_csum: CsumMode::Full,
            ip_csum: CsumMode::Full,
            outer_csum: OuterCsum::AsInput,
            max_segments: 0,
            max_frame_len: 0,
            partial_headers: PartialHeaders::Whole,
            ipv6_frag_id: None,
        }
    }

    /// The request a packet's metadata makes: its GSO type, segment size and ECN bit, with the
    /// other settings at their defaults.
    pub fn from_meta(meta: &sluice_packet::OffloadMeta) -> Self {
        let mut p = GsoParams::new(meta.gso_type(), meta.segment_size());
        p.ecn = meta.gso_ecn();
        p
    }

    /// The segment limit in force: [`GsoParams::max_segments`] or the type's default.
    pub const fn segment_limit(&self) -> usize {
        if self.max_segments != 0 {
            return self.max_segments as usize;
        }
        match self.gso_type {
            GsoType::UdpL4 => USO_MAX_SEGMENTS as usize,
            GsoType::Udp => usize::MAX,
            _ => TCP_MAX_SEGMENTS as usize,
        }
    }
}

/// Why a packet could not be segmented. Every variant maps to one counter name
/// ([`GsoError::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GsoError {
    /// `segment_size` is 0.
    ZeroSegmentSize,
    /// The request is not a GSO request (`GsoType::None`).
    NotGso,
    /// The frame's headers do not match the GSO type (e.g. TCPv4 on an IPv6 packet, a missing
    /// or truncated L4 header).
    TypeMismatch {
        /// The requested type.
        gso_type: GsoType,
    },
    /// The header stack is one software GSO does not segment.
    Unsupported {
        /// What is unsupported.
        what: &'static str,
    },
    /// The UFO fragment size is not a multiple of 8 (fragment offsets count 8-byte units).
    UnalignedFragment {
        /// The requested size.
        segment_size: u16,
    },
    /// A segment would exceed the frame-length limit (MTU + envelope).
    FrameTooLong {
        /// The segment's length.
        len: usize,
        /// The limit ([`GsoParams::max_frame_len`]).
        max: usize,
    },
    /// More segments than allowed.
    TooManySegments {
        /// Segments the packet would produce.
        segments: usize,
        /// The limit ([`GsoParams::segment_limit`]).
        max: usize,
    },
    /// An IP packet (or a reassembled UFO datagram) would exceed 64 KiB of IP payload.
    TooLarge {
        /// The IP payload length it would have.
        len: usize,
    },
    /// A fixed IPv4 ID ([`GsoParams::fixed_id`]) was asked for a packet without DF: the
    /// segments could be fragmented and reassembled wrongly (Linux refuses it too).
    FixedIdWithoutDf,
    /// The header prefix is longer than [`MAX_HEADER_LEN`].
    HeadersTooLong {
        /// The header length.
        len: usize,
    },
    /// A segment header field fell outside the header prefix: the layout does not describe the
    /// frame in a way the checks caught. Nothing was written for the packet.
    HeaderWrite(OutOfRange),
}

impl GsoError {
    /// The counter name of this error kind (`gso_zero_size`, `gso_too_many_segs`, …).
    pub const fn kind(&self) -> &'static str {
        match self {
            GsoError::ZeroSegmentSize => "gso_zero_size",
            GsoError::NotGso => "gso_not_gso",
            GsoError::TypeMismatch { .. } => "gso_type_mismatch",
            GsoError::Unsupported { .. } => "gso_unsupported",
            GsoError::UnalignedFragment { .. } => "gso_unaligned_frag",
            GsoError::FrameTooLong { .. } => "gso_frame_too_long",
            GsoError::TooManySegments { .. } => "gso_too_many_segs",
            GsoError::TooLarge { .. } => "gso_too_large",
            GsoError::FixedIdWithoutDf => "gso_fixed_id_without_df",
            GsoError::HeadersTooLong { .. } => "gso_headers_too_long",
            GsoError::HeaderWrite(_) => "gso_header_write",
        }
    }
}

impl core::fmt::Display for GsoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GsoError::ZeroSegmentSize => write!(f, "segment size is 0"),
            GsoError::NotGso => write!(f, "not a GSO request (gso_type none)"),
            GsoError::TypeMismatch { gso_type } => {
                write!(f, "frame headers do not match GSO type {gso_type:?}")
            }
            GsoError::Unsupported { what } => write!(f, "unsupported for GSO: {what}"),
            GsoError::UnalignedFragment { segment_size } => {
                write!(f, "UFO fragment size {segment_size} is not a multiple of 8")
            }
            GsoError::FrameTooLong { len, max } => {
                write!(f, "segment of {len} bytes exceeds the frame limit {max}")
            }
            GsoError::TooManySegments { segments, max } => {
                write!(f, "{segments} segments exceed the limit {max}")
            }
            GsoError::TooLarge { len } => {
                write!(f, "IP payload of {len} bytes exceeds 64 KiB")
            }
            GsoError::FixedIdWithoutDf => write!(f, "fixed IPv4 ID without DF"),
            GsoError::HeadersTooLong { len } => {
                write!(f, "header prefix of {len} bytes exceeds {MAX_HEADER_LEN}")
            }
            GsoError::HeaderWrite(e) => write!(f, "segment header write: {e}"),
        }
    }
}

impl std::error::Error for GsoError {}

/// What a device still has to do for one emitted segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SegmentMeta {
    /// Status of the IPv4 header checksums (`Good`, or `Partial` when left to the device;
    /// `Good` for IPv6, which has none).
    pub ip_csum: CsumStatus,
    /// Status of the innermost L4 checksum (`Good` or `Partial`).
    pub l4_csum: CsumStatus,
    /// Where the device starts summing for a `Partial` L4 checksum.
    pub csum_start: u16,
    /// Offset of the `Partial` checksum field from `csum_start`.
    pub csum_offset: u16,
    /// For the GSO packet of [`segment_partial`]: its type and segment size (the device
    /// segments it); `GsoType::None` and 0 for a plain segment.
    pub gso_type: GsoType,
    /// See `gso_type`.
    pub gso_size: u16,
}

/// One contiguous segment in a [`GsoOutput`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// The frame's bytes in [`GsoOutput::arena`].
    pub range: Range<usize>,
    /// What the device still has to do.
    pub meta: SegmentMeta,
}

/// Contiguous output: every segment is a whole frame in one reused arena.
#[derive(Debug, Default, Clone)]
pub struct GsoOutput {
    arena: Vec<u8>,
    segs: Vec<Segment>,
}

impl GsoOutput {
    /// An empty output.
    pub fn new() -> Self {
        Self::default()
    }

    /// Removes every segment, keeping the allocations.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.segs.clear();
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether there is no segment.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// The bytes of segment `i`.
    pub fn frame(&self, i: usize) -> Option<&[u8]> {
        self.segs
            .get(i)
            .and_then(|s| self.arena.get(s.range.clone()))
    }

    /// Segment `i` with its metadata.
    pub fn segment(&self, i: usize) -> Option<&Segment> {
        self.segs.get(i)
    }

    /// Drops what was appended after `marks` (arena length, segment count) and turns a header
    /// write error into the [`GsoError`] the caller returns: on error nothing is appended.
    fn undo(&mut self, (arena, segs): (usize, usize), e: OutOfRange) -> GsoError {
        self.arena.truncate(arena);
        self.segs.truncate(segs);
        GsoError::HeaderWrite(e)
    }

    /// Every segment's bytes, in order.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.segs
            .iter()
            .map(|s| self.arena.get(s.range.clone()).unwrap_or(&[]))
    }

    /// The whole arena (every segment back to back).
    pub fn arena(&self) -> &[u8] {
        &self.arena
    }
}

/// One segment of a [`ZeroCopyOutput`]: fresh header bytes plus a slice of the original frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZeroCopySegment {
    /// The segment's header bytes in the output's header arena.
    pub header: Range<usize>,
    /// The segment's payload: a range of the original frame.
    pub payload: Range<usize>,
    /// What the device still has to do.
    pub meta: SegmentMeta,
}

/// Zero-copy output: per segment, fresh headers (in one reused arena) and the range of the
/// original frame that follows them. A scatter-gather port sends `[header, payload]`.
#[derive(Debug, Default, Clone)]
pub struct ZeroCopyOutput {
    headers: Vec<u8>,
    segs: Vec<ZeroCopySegment>,
}

impl ZeroCopyOutput {
    /// An empty output.
    pub fn new() -> Self {
        Self::default()
    }

    /// Removes every segment, keeping the allocations.
    pub fn clear(&mut self) {
        self.headers.clear();
        self.segs.clear();
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether there is no segment.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Segment `i`'s descriptor.
    pub fn segment(&self, i: usize) -> Option<&ZeroCopySegment> {
        self.segs.get(i)
    }

    /// Segment `i` as its two pieces: header bytes and the payload slice of `frame` (which must
    /// be the frame that was segmented).
    pub fn parts<'a>(&'a self, i: usize, frame: &'a [u8]) -> Option<[&'a [u8]; 2]> {
        let s = self.segs.get(i)?;
        Some([
            self.headers.get(s.header.clone())?,
            frame.get(s.payload.clone())?,
        ])
    }

    /// The header arena.
    pub fn header_arena(&self) -> &[u8] {
        &self.headers
    }
}

/// Device capabilities relevant to choosing partial segmentation ([`use_partial_segmentation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PartialCaps {
    /// The device segments UDP tunnels (`tx-udp_tnl-segmentation`).
    pub tunnel_segmentation: bool,
    /// The device segments UDP tunnels and fills the outer UDP checksum
    /// (`tx-udp_tnl-csum-segmentation`).
    pub tunnel_csum_segmentation: bool,
    /// The device accepts GSO packets whose outer headers it replicates (`tx-gso-partial`).
    pub gso_partial: bool,
}

/// The OVS 3.6 rule: a tunnelled GSO packet that needs an outer UDP checksum, sent to a device
/// that can segment the tunnel but cannot compute the outer UDP checksum, is split by
/// [`segment_partial`] with [`PartialHeaders::PerSegment`] (the device replicates the headers of
/// the equal-sized part, whose outer checksum is the same for every segment, and software
/// segments the rest) rather than fully in software. Returns `false` when the device can do
/// everything itself, or nothing.
pub fn use_partial_segmentation(tunnelled: bool, outer_udp_csum: bool, caps: PartialCaps) -> bool {
    tunnelled
        && outer_udp_csum
        && caps.tunnel_segmentation
        && !caps.tunnel_csum_segmentation
        && caps.gso_partial
}

/// Segments `frame` (parsed as `layout`) into contiguous frames appended to `out` (which is not
/// cleared). Returns the number of segments appended. On error nothing is appended.
pub fn segment(
    frame: &[u8],
    layout: &Layout,
    params: &GsoParams,
    out: &mut GsoOutput,
) -> Result<usize, GsoError> {
    let plan = Plan::new(frame, layout, params)?;
    out.arena
        .reserve(plan.hdr_len * plan.nseg + plan.payload.len() + 16 * plan.nseg);
    out.segs.reserve(plan.nseg);
    let marks = (out.arena.len(), out.segs.len());
    plan.emit_contiguous(frame, 0..plan.nseg, out)
        .map_err(|e| out.undo(marks, e))?;
    Ok(plan.nseg)
}

/// Segments `frame` into fresh headers plus payload ranges of `frame`, appended to `out` (which
/// is not cleared). Returns the number of segments appended. On error nothing is appended.
pub fn segment_zero_copy(
    frame: &[u8],
    layout: &Layout,
    params: &GsoParams,
    out: &mut ZeroCopyOutput,
) -> Result<usize, GsoError> {
    let plan = Plan::new(frame, layout, params)?;
    out.headers.reserve((plan.hdr_len + 16) * plan.nseg);
    out.segs.reserve(plan.nseg);
    let marks = (out.headers.len(), out.segs.len());
    let meta = plan.segment_meta();
    for i in 0..plan.nseg {
        let start = out.headers.len();
        let payload = match plan.emit_header(frame, i, &mut out.headers) {
            Ok(payload) => payload,
            Err(e) => {
                out.headers.truncate(marks.0);
                out.segs.truncate(marks.1);
                return Err(GsoError::HeaderWrite(e));
            }
        };
        out.segs.push(ZeroCopySegment {
            header: start..out.headers.len(),
            payload,
            meta,
        });
    }
    Ok(plan.nseg)
}

/// Partial segmentation: one GSO packet carrying the largest multiple of `segment_size` of the
/// payload (with its lengths, IDs and pseudo-header sum set as for a GSO packet a device
/// segments; its [`SegmentMeta::gso_type`] set), followed by the rest segmented in software.
/// When that multiple is a single segment, no GSO packet is produced and the packet is fully
/// segmented. TCP and USO only (UFO is refused). Returns the number of frames appended.
pub fn segment_partial(
    frame: &[u8],
    layout: &Layout,
    params: &GsoParams,
    out: &mut GsoOutput,
) -> Result<usize, GsoError> {
    let plan = Plan::new(frame, layout, params)?;
    if plan.ufo.is_some() {
        return Err(GsoError::Unsupported {
            what: "partial segmentation of UFO",
        });
    }
    let seg = plan.seg;
    let whole = plan.payload.len() / seg;
    if whole < 2 {
        return segment(frame, layout, params, out);
    }
    let marks = (out.arena.len(), out.segs.len());
    let mut big = plan.clone();
    // The device fills the inner L4 checksum; an outer tunnel checksum must then be computed
    // by cancellation.
    big.l4_csum = CsumMode::Partial;
    big.cover = Cover::Lco;
    if params.partial_headers == PartialHeaders::Whole {
        big.seg = whole * seg;
        big.nseg = 1;
    }
    let start = out.arena.len();
    // With `PerSegment` this is segment 0's header: lengths and checksums as for one
    // `segment_size` segment.
    big.emit_header(frame, 0, &mut out.arena)
        .map_err(|e| out.undo(marks, e))?;
    if let Some(L4Fix::Tcp { off, flags, .. }) = plan.l4 {
        // FIN and PSH belong to the last segment: on the GSO packet only when nothing follows
        // it. (The flags are outside the pseudo-header sum in the checksum field.)
        let f = if whole < plan.nseg {
            flags & !0x09
        } else {
            flags
        };
        if let Some(b) = out.arena.get_mut(start + off + 13) {
            *b = f;
        }
    }
    let mut meta = big.segment_meta();
    let payload = plan.payload.start..plan.payload.start + whole * seg;
    out.arena
        .extend_from_slice(frame.get(payload).unwrap_or(&[]));
    meta.gso_type = params.gso_type;
    meta.gso_size = params.segment_size;
    out.segs.push(Segment {
        range: start..out.arena.len(),
        meta,
    });
    // The rest: segments `whole..nseg` of the original plan (same sequence numbers and IDs as
    // full segmentation would give them).
    plan.emit_contiguous(frame, whole..plan.nseg, out)
        .map_err(|e| out.undo(marks, e))?;
    Ok(out.segs.len() - marks.1)
}

// ---------------------------------------------------------------------------------------------
// The plan: everything about the super-packet that is the same for every segment, computed once.

/// One IP header to fix per segment.
#[derive(Debug, Clone, Copy)]
struct IpFix {
    off: usize,
    v4: bool,
    id: u16,
    /// IPv4: the flags/fragment-offset word of the input.
    frag: u16,
    /// IPv4: sum of the header with total length, ID, flags/offset and checksum zeroed, so a
    /// segment's header checksum is O(1).
    hsum: u16,
    /// Pseudo-header sum (addresses and protocol, length 0) for the L4 this level carries.
    ph: u16,
}

/// The tunnel header that covers the inner packet.
#[derive(Debug, Clone, Copy)]
enum TunnelFix {
    /// Outer UDP (VXLAN / Geneve) at `off`; `csum` whether its checksum is computed.
    Udp { off: usize, csum: bool },
    /// GRE at `off`; checksum field at `csum` when the C bit is set.
    Gre { csum: Option<usize>, off: usize },
}

/// How a tunnel checksum covering the inner packet is summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cover {
    /// Every byte.
    Full,
    /// By cancellation of the inner L4 region.
    Lco,
}

#[derive(Debug, Clone, Copy)]
enum L4Fix {
    /// `hsum`: sum of the TCP header with sequence, flags byte and checksum zeroed.
    Tcp {
        off: usize,
        seq: u32,
        flags: u8,
        hsum: u16,
    },
    /// `hsum`: sum of the UDP header with length and checksum zeroed.
    Udp { off: usize, hsum: u16 },
}

/// A segment header field outside the header `Plan::new` laid out: a plan whose checks missed a
/// case. It is an error, never a dropped write.
#[cold]
fn header_short(at: usize, len: usize, buf_len: usize) -> OutOfRange {
    OutOfRange { at, len, buf_len }
}

/// Sum of `b[range]` with the given byte offsets (relative to the range) zeroed.
fn sum_masked(b: &[u8], range: Range<usize>, zero: &[usize]) -> u16 {
    let mut tmp = [0u8; 64];
    let len = range.len();
    match (b.get(range), tmp.get_mut(..len)) {
        (Some(src), Some(dst)) => {
            dst.copy_from_slice(src);
            for &z in zero {
                if let Some(x) = dst.get_mut(z) {
                    *x = 0;
                }
            }
            sluice_checksum::sum(dst)
        }
        _ => 0,
    }
}

fn fold_add(parts: &[u32]) -> u16 {
    sluice_checksum::fold(parts.iter().map(|&p| u64::from(p)).sum())
}

const TEMPLATE_LEN: usize = 128;

/// The untunnelled TCP / USO fast path's constants.
#[derive(Debug, Clone, Copy)]
struct Fast {
    /// The header prefix, zero-padded, when it fits.
    template: [u8; TEMPLATE_LEN],
    tcp: bool,
    l4: usize,
    seq: u32,
    flags: u8,
    hsum: u16,
}

/// One segment's L4 checksum inputs.
struct L4Sum {
    off: usize,
    /// Offset of the checksum field in the L4 header.
    field: usize,
    udp: bool,
    /// Sum of the L4 header's bytes with the checksum field zeroed.
    fields: u16,
}

/// UFO specifics.
#[derive(Debug, Clone, Copy)]
struct UfoFix {
    /// The UDP header with its final length and checksum.
    udp: [u8; 8],
    /// IPv6: offset where the Fragment header is inserted, offset of the next-header byte to
    /// patch to 44, the original next-header value, and the identification.
    v6: Option<(usize, usize, u8, u32)>,
}

#[derive(Debug, Clone)]
struct Plan {
    /// Header prefix copied into every segment: `frame[..hdr_len]`.
    hdr_len: usize,
    /// The bytes that are split (for UFO: the UDP payload; the UDP header is emitted by us).
    payload: Range<usize>,
    /// Bytes of the split unit per segment (for UFO counted over UDP header + payload).
    seg: usize,
    nseg: usize,
    /// Outer (or only) IP, inner IP.
    ip: [Option<IpFix>; 2],
    tunnel: Option<TunnelFix>,
    /// Set for untunnelled TCP / USO: the fast path.
    fast: Option<Fast>,
    cover: Cover,
    /// Innermost L4 (None for UFO).
    l4: Option<L4Fix>,
    /// Innermost IP index in `ip`.
    inner_ip: usize,
    ufo: Option<UfoFix>,
    l4_csum: CsumMode,
    ip_csum: CsumMode,
    fixed_id: bool,
}

/// Pseudo-header sum of the IP header at `ip` for an L4 length `len`.
fn pseudo_sum(b: &[u8], ip: &IpFix, proto: u8, len: usize) -> u16 {
    if ip.v4 {
        pseudo::ipv4(
            read_array(b, ip.off + 12).unwrap_or([0; 4]),
            read_array(b, ip.off + 16).unwrap_or([0; 4]),
            proto,
            len as u16,
        )
    } else {
        pseudo::ipv6(
            &read_array(b, ip.off + 8).unwrap_or([0; 16]),
            &read_array(b, ip.off + 24).unwrap_or([0; 16]),
            proto,
            len as u32,
        )
    }
}

impl Plan {
    /// Plans the segmentation of `frame`: checks the request against the headers, then computes
    /// once everything every segment shares.
    fn new(frame: &[u8], layout: &Layout, params: &GsoParams) -> Result<Plan, GsoError> {
        check_request(params)?;
        let mismatch = GsoError::TypeMismatch {
            gso_type: params.gso_type,
        };
        let inner = Innermost::find(frame, layout, mismatch)?;
        let inner_fix = IpFix::new(frame, inner.l3, inner.kind, inner.proto, mismatch)?;
        let (ip, inner_ip, tunnel) = match layout.tunnel {
            None => ([Some(inner_fix), None], 0, None),
            Some(t) => {
                let (outer_fix, tunnel) = plan_tunnel(frame, layout, &t, params, mismatch)?;
                ([Some(outer_fix), Some(inner_fix)], 1, Some(tunnel))
            }
        };
        let l4 = match params.gso_type {
            GsoType::TcpV4 | GsoType::TcpV6 => plan_tcp(frame, &inner, params.gso_type, mismatch)?,
            GsoType::UdpL4 => plan_uso(frame, &inner, mismatch)?,
            GsoType::Udp => plan_ufo(frame, layout, &inner, &inner_fix, params, mismatch)?,
            GsoType::None => return Err(GsoError::NotGso),
        };
        if l4.hdr_len > MAX_HEADER_LEN {
            return Err(GsoError::HeadersTooLong { len: l4.hdr_len });
        }
        if params.fixed_id && ip.iter().flatten().any(|f| f.v4 && f.frag & 0x4000 == 0) {
            return Err(GsoError::FixedIdWithoutDf);
        }
        let seg = usize::from(params.segment_size);
        let L4Plan {
            hdr_len,
            payload,
            l4,
            unit,
            ufo,
        } = l4.unfragmented_if_one_fragment(frame, &inner, seg);
        if payload.start > payload.end || payload.end > frame.len() || hdr_len > payload.start {
            return Err(mismatch);
        }
        let nseg = (payload.len() + unit).div_ceil(seg).max(1);
        if nseg > params.segment_limit() {
            return Err(GsoError::TooManySegments {
                segments: nseg,
                max: params.segment_limit(),
            });
        }
        let fast = match (tunnel, ufo) {
            (None, None) => l4.map(|l4| Fast::new(frame, hdr_len, l4)),
            _ => None,
        };
        let plan = Plan {
            fast,
            hdr_len,
            payload,
            seg,
            nseg,
            ip,
            tunnel,
            l4,
            inner_ip,
            ufo,
            cover: if params.outer_csum == OuterCsum::Full && params.l4_csum == CsumMode::Full {
                Cover::Full
            } else {
                Cover::Lco
            },
            l4_csum: params.l4_csum,
            ip_csum: params.ip_csum,
            fixed_id: params.fixed_id,
        };
        plan.check_first_segment(params)?;
        Ok(plan)
    }

    /// The largest segment is the first: checks its size against the frame limit and the IP
    /// payload limit.
    fn check_first_segment(&self, params: &GsoParams) -> Result<(), GsoError> {
        let first_len = self.seg_frame_len(0);
        if params.max_frame_len != 0 && first_len > params.max_frame_len {
            return Err(GsoError::FrameTooLong {
                len: first_len,
                max: params.max_frame_len,
            });
        }
        let outer_off = self.ip.first().copied().flatten().map_or(0, |f| f.off);
        let outer_ip_payload = first_len.saturating_sub(outer_off + 20);
        if outer_ip_payload > MAX_IP_PAYLOAD {
            return Err(GsoError::TooLarge {
                len: outer_ip_payload,
            });
        }
        Ok(())
    }

    /// The common case, untunnelled TCP or USO, with the per-segment work cut to the fields
    /// that change (same bytes as the general path, which the tests check).
    #[inline(always)]
    fn emit_simple(
        &self,
        frame: &[u8],
        i: usize,
        out: &mut Vec<u8>,
        fast: &Fast,
        ip: &IpFix,
    ) -> Result<Range<usize>, OutOfRange> {
        let ps = self.payload.start + i * self.seg;
        let pe = (ps + self.seg).min(self.payload.end).max(ps);
        let payload = frame.get(ps..pe).unwrap_or(&[]);
        let base = out.len();
        let hl = self.hdr_len;
        if hl <= TEMPLATE_LEN {
            // A fixed-size copy (a few vector moves, no memcpy call); the next header
            // overwrites the tail.
            out.extend_from_slice(&fast.template);
            out.truncate(base + hl);
        } else {
            out.extend_from_slice(frame.get(..hl).unwrap_or(&[]));
        }
        let out_len = out.len();
        let Some(h) = out.get_mut(base..base + hl) else {
            return Err(header_short(base, hl, out_len));
        };
        let end = hl + payload.len();
        let l4len = (end - fast.l4) as u32;
        // Fixed-size views, so the field writes below need no bounds checks.
        let (pre, l4h) = h.split_at_mut(fast.l4.min(hl));
        let ph = fold_add(&[u32::from(ip.ph), l4len]);
        let sum_with = |fields: u16| -> u16 {
            match self.l4_csum {
                CsumMode::Partial => ph,
                CsumMode::Full => !fold_add(&[
                    u32::from(ph),
                    u32::from(fields),
                    u32::from(sluice_checksum::sum(payload)),
                ]),
            }
        };
        if fast.tcp {
            let Some(t) = l4h.first_chunk_mut::<20>() else {
                return Err(header_short(fast.l4, 20, hl));
            };
            let seq = fast.seq.wrapping_add((i * self.seg) as u32);
            t[4..8].copy_from_slice(&seq.to_be_bytes());
            let mut f = fast.flags;
            if i + 1 != self.nseg {
                f &= !0x09; // FIN, PSH
            }
            if i != 0 {
                f &= !0x80; // CWR
            }
            t[13] = f;
            let c = sum_with(fold_add(&[
                u32::from(fast.hsum),
                seq >> 16,
                seq & 0xffff,
                u32::from(f),
            ]));
            t[16..18].copy_from_slice(&c.to_be_bytes());
        } else {
            let Some(u) = l4h.first_chunk_mut::<8>() else {
                return Err(header_short(fast.l4, 8, hl));
            };
            u[4..6].copy_from_slice(&(l4len as u16).to_be_bytes());
            let c = match sum_with(fold_add(&[u32::from(fast.hsum), l4len])) {
                0 if self.l4_csum == CsumMode::Full => 0xffff,
                c => c,
            };
            u[6..8].copy_from_slice(&c.to_be_bytes());
        }
        let ip_len = if ip.v4 { 20 } else { 6 };
        let Some(iph) = pre.get_mut(ip.off..) else {
            return Err(header_short(ip.off, ip_len, hl));
        };
        if !ip.v4 {
            let Some(v6) = iph.first_chunk_mut::<6>() else {
                return Err(header_short(ip.off, ip_len, hl));
            };
            v6[4..6].copy_from_slice(&((end - ip.off - 40) as u16).to_be_bytes());
            return Ok(ps..pe);
        }
        let Some(v4) = iph.first_chunk_mut::<20>() else {
            return Err(header_short(ip.off, ip_len, hl));
        };
        let total = (end - ip.off) as u16;
        let id = if self.fixed_id {
            ip.id
        } else {
            ip.id.wrapping_add(i as u16)
        };
        v4[2..4].copy_from_slice(&total.to_be_bytes());
        v4[4..6].copy_from_slice(&id.to_be_bytes());
        let c = match self.ip_csum {
            CsumMode::Full => !fold_add(&[
                u32::from(ip.hsum),
                u32::from(total),
                u32::from(id),
                u32::from(ip.frag),
            ]),
            CsumMode::Partial => 0,
        };
        v4[10..12].copy_from_slice(&c.to_be_bytes());
        Ok(ps..pe)
    }

    /// Appends segments `range` as contiguous frames (headers, then the payload copied).
    fn emit_contiguous(
        &self,
        frame: &[u8],
        range: Range<usize>,
        out: &mut GsoOutput,
    ) -> Result<(), OutOfRange> {
        let meta = self.segment_meta();
        for i in range {
            let start = out.arena.len();
            let payload = self.emit_header(frame, i, &mut out.arena)?;
            out.arena
                .extend_from_slice(frame.get(payload).unwrap_or(&[]));
            out.segs.push(Segment {
                range: start..out.arena.len(),
                meta,
            });
        }
        Ok(())
    }

    /// The metadata every segment of this plan shares (computed once per packet: building it
    /// per segment and returning it through memory cost a store-forwarding stall each time).
    fn segment_meta(&self) -> SegmentMeta {
        let ip_partial =
            self.ip_csum == CsumMode::Partial && self.ip.iter().flatten().any(|f| f.v4);
        let l4 = match self.l4 {
            Some(L4Fix::Tcp { off, .. }) if self.l4_csum == CsumMode::Partial => Some((off, 16)),
            Some(L4Fix::Udp { off, .. }) if self.l4_csum == CsumMode::Partial => Some((off, 6)),
            _ => None,
        };
        SegmentMeta {
            ip_csum: if ip_partial {
                CsumStatus::Partial
            } else {
                CsumStatus::Good
            },
            l4_csum: if l4.is_some() {
                CsumStatus::Partial
            } else {
                CsumStatus::Good
            },
            csum_start: l4.map_or(0, |(o, _)| o as u16),
            csum_offset: l4.map_or(0, |(_, f)| f),
            gso_type: GsoType::None,
            gso_size: 0,
        }
    }

    /// Payload range (in the frame) of segment `i`, and whether the UFO UDP header goes first.
    fn seg_payload(&self, i: usize) -> (Range<usize>, bool) {
        let unit = if self.ufo.is_some() { 8 } else { 0 };
        // Unit coordinates: for UFO the UDP header occupies [0, 8).
        let ustart = i * self.seg;
        let uend = ((i + 1) * self.seg).min(self.payload.len() + unit);
        let s = ustart.saturating_sub(unit);
        let e = uend.saturating_sub(unit);
        (
            self.payload.start + s..self.payload.start + e.max(s),
            unit != 0 && i == 0,
        )
    }

    fn seg_frame_len(&self, i: usize) -> usize {
        let (p, udp) = self.seg_payload(i);
        let frag = match self.ufo {
            Some(UfoFix { v6: Some(_), .. }) => 8,
            _ => 0,
        };
        self.hdr_len + frag + if udp { 8 } else { 0 } + p.len()
    }

    /// Appends segment `i`'s headers to `out` with every field and checksum fixed; returns its
    /// metadata and payload range.
    #[inline(always)]
    fn emit_header(
        &self,
        frame: &[u8],
        i: usize,
        out: &mut Vec<u8>,
    ) -> Result<Range<usize>, OutOfRange> {
        match (&self.fast, self.ip.first()) {
            (Some(fast), Some(Some(ip))) => self.emit_simple(frame, i, out, fast, ip),
            _ => self.emit_general(frame, i, out),
        }
    }

    /// Every other case: tunnels, UFO.
    #[inline(never)]
    fn emit_general(
        &self,
        frame: &[u8],
        i: usize,
        out: &mut Vec<u8>,
    ) -> Result<Range<usize>, OutOfRange> {
        let (pr, with_udp) = self.seg_payload(i);
        let payload = frame.get(pr.clone()).unwrap_or(&[]);
        let base = out.len();
        // `Plan::new` checked that the header prefix lies within the frame.
        out.extend_from_slice(frame.get(..self.hdr_len).unwrap_or(&[]));
        // Insert the IPv6 Fragment header and the UFO UDP header.
        if let Some(u) = &self.ufo {
            if let Some((_, nh_at, nh, id)) = u.v6 {
                if let Some(b) = out.get_mut(base + nh_at) {
                    *b = ip_proto::FRAGMENT;
                }
                let unit_off = i * self.seg;
                let mf = u16::from(i + 1 < self.nseg);
                let [o1, o2] = ((unit_off as u16 & 0xfff8) | mf).to_be_bytes();
                let [i1, i2, i3, i4] = id.to_be_bytes();
                let fh = [nh, 0, o1, o2, i1, i2, i3, i4];
                out.extend_from_slice(&fh);
            }
            if with_udp {
                out.extend_from_slice(&u.udp);
            }
        }
        let h = out.get_mut(base..).unwrap_or(&mut []);
        let end = h.len() + payload.len();
        let first = i == 0;
        let last = i + 1 == self.nseg;
        // Innermost L4.
        let inner = self.ip.get(self.inner_ip).copied().flatten();
        match (self.l4, inner) {
            (
                Some(L4Fix::Tcp {
                    off,
                    seq,
                    flags,
                    hsum,
                }),
                Some(ip),
            ) => {
                let seq = seq.wrapping_add((i * self.seg) as u32);
                write_u32(h, off + 4, seq)?;
                let mut f = flags;
                if !last {
                    f &= !0x09; // FIN, PSH
                }
                if !first {
                    f &= !0x80; // CWR
                }
                if let Some(b) = h.get_mut(off + 13) {
                    *b = f;
                }
                let fields = fold_add(&[u32::from(hsum), seq >> 16, seq & 0xffff, u32::from(f)]);
                let l4 = L4Sum {
                    off,
                    field: 16,
                    udp: false,
                    fields,
                };
                self.l4_checksum(h, payload, &l4, &ip, end)?;
            }
            (Some(L4Fix::Udp { off, hsum }), Some(ip)) => {
                let len = (end - off) as u16;
                write_u16(h, off + 4, len)?;
                let fields = fold_add(&[u32::from(hsum), u32::from(len)]);
                let l4 = L4Sum {
                    off,
                    field: 6,
                    udp: true,
                    fields,
                };
                self.l4_checksum(h, payload, &l4, &ip, end)?;
            }
            _ => {}
        }
        // IP headers, innermost first (the tunnel checksum covers the inner one).
        let id_step = if self.fixed_id { 0 } else { i as u16 };
        let ufo_frag = self.ufo.map(|_| {
            // Fragments share the ID; offset and MF replace the old flags (DF too).
            let mf = if last { 0 } else { 0x2000 };
            (((i * self.seg) >> 3) as u16 & 0x1fff) | mf
        });
        match self.ip {
            [Some(only), None] => self.fix_ip(h, &only, end, id_step, ufo_frag)?,
            [Some(outer), Some(inner)] => {
                self.fix_ip(h, &inner, end, id_step, ufo_frag)?;
                self.tunnel_fix(h, payload, end)?;
                self.fix_ip(h, &outer, end, id_step, None)?;
            }
            _ => {}
        }
        Ok(pr)
    }

    /// Fixes one IP header: length, and for IPv4 the ID (or, for a UFO fragment, the
    /// flags/offset word `frag`) and the header checksum.
    #[inline]
    fn fix_ip(
        &self,
        h: &mut [u8],
        ip: &IpFix,
        end: usize,
        id_step: u16,
        frag: Option<u16>,
    ) -> Result<(), OutOfRange> {
        if !ip.v4 {
            return write_u16(h, ip.off + 4, (end - ip.off - 40) as u16);
        }
        let total = (end - ip.off) as u16;
        write_u16(h, ip.off + 2, total)?;
        let (id, frag) = match frag {
            Some(f) => {
                write_u16(h, ip.off + 6, f)?;
                (ip.id, f)
            }
            None => {
                let id = ip.id.wrapping_add(id_step);
                write_u16(h, ip.off + 4, id)?;
                (id, ip.frag)
            }
        };
        let c = match self.ip_csum {
            CsumMode::Full => !fold_add(&[
                u32::from(ip.hsum),
                u32::from(total),
                u32::from(id),
                u32::from(frag),
            ]),
            CsumMode::Partial => 0,
        };
        write_u16(h, ip.off + 10, c)
    }

    #[inline]
    fn l4_checksum(
        &self,
        h: &mut [u8],
        payload: &[u8],
        l4: &L4Sum,
        ip: &IpFix,
        end: usize,
    ) -> Result<(), OutOfRange> {
        let len = end - l4.off;
        let ph = fold_add(&[u32::from(ip.ph), len as u32]);
        let at = l4.off + l4.field;
        match self.l4_csum {
            CsumMode::Partial => write_u16(h, at, ph),
            CsumMode::Full => {
                // The L4 header is an even number of bytes, so the payload sum lines up.
                let s = fold_add(&[
                    u32::from(ph),
                    u32::from(l4.fields),
                    u32::from(sluice_checksum::sum(payload)),
                ]);
                let c = !s;
                write_u16(h, at, if l4.udp && c == 0 { 0xffff } else { c })
            }
        }
    }

    fn tunnel_fix(&self, h: &mut [u8], payload: &[u8], end: usize) -> Result<(), OutOfRange> {
        let Some(t) = self.tunnel else { return Ok(()) };
        let (Some(Some(outer)), Some(Some(inner))) = (self.ip.first(), self.ip.get(1)) else {
            return Ok(());
        };
        match t {
            TunnelFix::Udp { off, csum } => {
                let len = end - off;
                write_u16(h, off + 4, len as u16)?;
                write_u16(h, off + 6, 0)?;
                if !csum {
                    return Ok(());
                }
                let ph = pseudo_sum(h, outer, ip_proto::UDP, len);
                let c = !self.cover_sum(h, payload, off, ph, inner, end);
                write_u16(h, off + 6, if c == 0 { 0xffff } else { c })
            }
            TunnelFix::Gre { csum, off } => {
                let Some(at) = csum else { return Ok(()) };
                write_u16(h, at, 0)?;
                let c = !self.cover_sum(h, payload, off, 0, inner, end);
                write_u16(h, at, c)
            }
        }
    }

    /// Sum of `h[from..] ++ payload` plus `init`, where the inner L4 region is summed by
    /// cancellation when the inner checksum is final-to-be (always correct, and cheap).
    fn cover_sum(
        &self,
        h: &[u8],
        payload: &[u8],
        from: usize,
        init: u16,
        inner: &IpFix,
        end: usize,
    ) -> u16 {
        let mut acc = Accumulator::new();
        acc.add_u16(init);
        let l4off = match self.l4 {
            Some(L4Fix::Tcp { off, .. }) | Some(L4Fix::Udp { off, .. })
                if self.cover == Cover::Lco =>
            {
                off
            }
            _ => {
                acc.add(h.get(from..).unwrap_or(&[]));
                acc.add(payload);
                return acc.finish();
            }
        };
        let proto = match self.l4 {
            Some(L4Fix::Tcp { .. }) => ip_proto::TCP,
            _ => ip_proto::UDP,
        };
        // Headers up to the inner L4 header.
        acc.add(h.get(from..l4off).unwrap_or(&[]));
        // A completed inner L4 region sums to the complement of its pseudo-header.
        let ph = pseudo_sum(h, inner, proto, end - l4off);
        acc.add(&(!ph).to_be_bytes());
        acc.finish()
    }
}

/// A GSO request at all: a type and a non-zero segment size.
fn check_request(params: &GsoParams) -> Result<(), GsoError> {
    if params.gso_type == GsoType::None {
        return Err(GsoError::NotGso);
    }
    if params.segment_size == 0 {
        return Err(GsoError::ZeroSegmentSize);
    }
    Ok(())
}

/// The innermost header stack, the one that is segmented, with the fields every plan needs.
struct Innermost<'a> {
    h: &'a Headers,
    l3: usize,
    l3_end: usize,
    kind: L3Kind,
    /// Its L4 protocol.
    proto: u8,
    tunnelled: bool,
}

impl<'a> Innermost<'a> {
    /// The stack GSO segments (inside the tunnel, if any), checked to be a whole, unfragmented
    /// IP packet that ends where the outer one does.
    fn find(frame: &[u8], layout: &'a Layout, mismatch: GsoError) -> Result<Self, GsoError> {
        let outer = &layout.outer;
        let tunnelled = layout.tunnel.is_some();
        let h = match (layout.tunnel, layout.inner.as_ref()) {
            (Some(_), Some(h)) => h,
            (Some(_), None) => {
                return Err(GsoError::Unsupported {
                    what: "tunnel without a parsed inner packet",
                })
            }
            (None, _) => outer,
        };
        let l3 = h.l3.ok_or(mismatch)?;
        let l3_end = h.l3_end.ok_or(mismatch)?;
        let kind = h.l3_kind.ok_or(mismatch)?;
        if l3_end > frame.len() {
            return Err(mismatch);
        }
        if h.is_fragment {
            return Err(GsoError::Unsupported {
                what: "an IP fragment",
            });
        }
        // Bytes after the innermost IP packet inside the outer one would be lost.
        if tunnelled && outer.l3_end != Some(l3_end) {
            return Err(GsoError::Unsupported {
                what: "trailing bytes after the inner packet",
            });
        }
        let proto = h.l4_proto.ok_or(mismatch)?;
        Ok(Innermost {
            h,
            l3,
            l3_end,
            kind,
            proto,
            tunnelled,
        })
    }
}

impl IpFix {
    /// The per-plan constants of the IP header at `off` carrying `proto`.
    fn new(
        frame: &[u8],
        off: usize,
        kind: L3Kind,
        proto: u8,
        mismatch: GsoError,
    ) -> Result<IpFix, GsoError> {
        let v4 = kind == L3Kind::Ipv4;
        let ihl = if v4 {
            usize::from(frame.get(off).copied().unwrap_or(0) & 0x0f) * 4
        } else {
            40
        };
        if frame.len() < off + ihl {
            return Err(mismatch);
        }
        let (id, frag, hsum) = if v4 {
            (
                read_u16(frame, off + 4).unwrap_or(0),
                read_u16(frame, off + 6).unwrap_or(0),
                sum_masked(frame, off..off + ihl, &[2, 3, 4, 5, 6, 7, 10, 11]),
            )
        } else {
            (0, 0, 0)
        };
        let mut fix = IpFix {
            off,
            v4,
            id,
            frag,
            hsum,
            ph: 0,
        };
        fix.ph = pseudo_sum(frame, &fix, proto, 0);
        Ok(fix)
    }
}

/// The outer IP header's constants and the tunnel header to fix per segment.
fn plan_tunnel(
    frame: &[u8],
    layout: &Layout,
    t: &Tunnel,
    params: &GsoParams,
    mismatch: GsoError,
) -> Result<(IpFix, TunnelFix), GsoError> {
    if params.gso_type == GsoType::Udp {
        return Err(GsoError::Unsupported {
            what: "UFO inside a tunnel",
        });
    }
    let outer = &layout.outer;
    let ol3 = outer.l3.ok_or(mismatch)?;
    let okind = outer.l3_kind.ok_or(mismatch)?;
    let ol4 = outer.l4.ok_or(mismatch)?;
    if outer.is_fragment {
        return Err(GsoError::Unsupported {
            what: "a fragmented outer packet",
        });
    }
    let tunnel = match t.kind {
        TunnelKind::Vxlan | TunnelKind::Geneve => {
            let input = read_u16(frame, ol4 + 6).ok_or(mismatch)?;
            let csum = match params.outer_csum {
                OuterCsum::Zero => false,
                OuterCsum::Full | OuterCsum::Lco => true,
                OuterCsum::AsInput => input != 0,
            };
            TunnelFix::Udp { off: ol4, csum }
        }
        TunnelKind::Gre => {
            let flags = frame.get(t.offset).copied().ok_or(mismatch)?;
            let csum = (flags & 0x80 != 0).then_some(t.offset + 4);
            TunnelFix::Gre {
                csum,
                off: t.offset,
            }
        }
    };
    let outer_fix = IpFix::new(frame, ol3, okind, ip_proto::UDP, mismatch)?;
    Ok((outer_fix, tunnel))
}

/// What the L4 step of a plan decides: the header prefix, the bytes that are split, the L4
/// header to fix per segment, and the UFO specifics.
struct L4Plan {
    hdr_len: usize,
    payload: Range<usize>,
    l4: Option<L4Fix>,
    /// Bytes of the split unit before the payload (8 for UFO: the UDP header).
    unit: usize,
    ufo: Option<UfoFix>,
}

impl L4Plan {
    /// A UFO datagram that fits one fragment is not fragmented (the kernel passes it through
    /// with its checksum filled): it is segmented as a single USO datagram.
    fn unfragmented_if_one_fragment(self, frame: &[u8], inner: &Innermost, seg: usize) -> Self {
        match (self.ufo, inner.h.l4, inner.h.payload) {
            (Some(_), Some(off), Some(pl)) if self.payload.len() + self.unit <= seg => L4Plan {
                hdr_len: pl,
                payload: self.payload,
                l4: Some(L4Fix::udp(frame, off)),
                unit: 0,
                ufo: None,
            },
            _ => self,
        }
    }
}

impl L4Fix {
    /// The per-plan constants of the UDP header at `off`.
    fn udp(frame: &[u8], off: usize) -> L4Fix {
        let hsum = sum_masked(frame, off..off + 8, &[4, 5, 6, 7]);
        L4Fix::Udp { off, hsum }
    }
}

/// TCP segmentation (TSO): the TCP header must match the requested IP version.
fn plan_tcp(
    frame: &[u8],
    inner: &Innermost,
    ty: GsoType,
    mismatch: GsoError,
) -> Result<L4Plan, GsoError> {
    let want = if ty == GsoType::TcpV4 {
        L3Kind::Ipv4
    } else {
        L3Kind::Ipv6
    };
    if inner.kind != want || inner.proto != ip_proto::TCP {
        return Err(mismatch);
    }
    let off = inner.h.l4.ok_or(mismatch)?;
    let pl = inner.h.payload.ok_or(mismatch)?;
    let seq = read_u32(frame, off + 4).ok_or(mismatch)?;
    let flags = frame.get(off + 13).copied().ok_or(mismatch)?;
    if pl < off + 20 || pl > off + 60 {
        return Err(mismatch);
    }
    let hsum = sum_masked(frame, off..pl, &[4, 5, 6, 7, 13, 16, 17]);
    Ok(L4Plan {
        hdr_len: pl,
        payload: pl..inner.l3_end,
        l4: Some(L4Fix::Tcp {
            off,
            seq,
            flags,
            hsum,
        }),
        unit: 0,
        ufo: None,
    })
}

/// UDP segmentation (USO): every segment a whole datagram.
fn plan_uso(frame: &[u8], inner: &Innermost, mismatch: GsoError) -> Result<L4Plan, GsoError> {
    if inner.proto != ip_proto::UDP {
        return Err(mismatch);
    }
    let off = inner.h.l4.ok_or(mismatch)?;
    let pl = inner.h.payload.ok_or(mismatch)?;
    Ok(L4Plan {
        hdr_len: pl,
        payload: pl..inner.l3_end,
        l4: Some(L4Fix::udp(frame, off)),
        unit: 0,
        ufo: None,
    })
}

/// UDP fragmentation (UFO): the datagram's UDP header (with its checksum over the whole
/// datagram) goes into the first fragment; IPv6 gets a Fragment header after the
/// unfragmentable part.
fn plan_ufo(
    frame: &[u8],
    layout: &Layout,
    inner: &Innermost,
    inner_fix: &IpFix,
    params: &GsoParams,
    mismatch: GsoError,
) -> Result<L4Plan, GsoError> {
    if inner.proto != ip_proto::UDP {
        return Err(mismatch);
    }
    if !params.segment_size.is_multiple_of(8) {
        return Err(GsoError::UnalignedFragment {
            segment_size: params.segment_size,
        });
    }
    let off = inner.h.l4.ok_or(mismatch)?;
    let pl = inner.h.payload.ok_or(mismatch)?;
    let ulen = inner.l3_end - off;
    if ulen > MAX_IP_PAYLOAD {
        return Err(GsoError::TooLarge { len: ulen });
    }
    let mut udp: [u8; 8] = read_array(frame, off).ok_or(mismatch)?;
    udp[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
    // The datagram's checksum, over the whole datagram, computed from scratch.
    let ph = pseudo_sum(frame, inner_fix, ip_proto::UDP, ulen);
    let mut acc = Accumulator::new();
    acc.add_u16(ph);
    acc.add(&udp);
    acc.add(frame.get(pl..inner.l3_end).unwrap_or(&[]));
    let c = !acc.finish();
    udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    let (hdr, v6) = if inner.kind == L3Kind::Ipv4 {
        (off, None)
    } else {
        let (at, nh_at, nh) = ipv6_unfragmentable(frame, layout, inner.l3, inner.tunnelled)?;
        let id = params
            .ipv6_frag_id
            .unwrap_or_else(|| default_frag_id(frame, inner.l3, ulen));
        (at, Some((at, nh_at, nh, id)))
    };
    if hdr != off {
        return Err(GsoError::Unsupported {
            what: "IPv6 extension headers after the fragmentable part start",
        });
    }
    Ok(L4Plan {
        hdr_len: off,
        payload: pl..inner.l3_end,
        l4: None,
        unit: 8,
        ufo: Some(UfoFix { udp, v6 }),
    })
}

impl Fast {
    /// The fast path's constants for an untunnelled TCP or USO plan.
    fn new(frame: &[u8], hdr_len: usize, l4: L4Fix) -> Fast {
        let mut template = [0u8; TEMPLATE_LEN];
        if let (Some(t), Some(src)) = (template.get_mut(..hdr_len), frame.get(..hdr_len)) {
            t.copy_from_slice(src);
        }
        match l4 {
            L4Fix::Tcp {
                off,
                seq,
                flags,
                hsum,
            } => Fast {
                template,
                tcp: true,
                l4: off,
                seq,
                flags,
                hsum,
            },
            L4Fix::Udp { off, hsum } => Fast {
                template,
                tcp: false,
                l4: off,
                seq: 0,
                flags: 0,
                hsum,
            },
        }
    }
}

/// For IPv6 UFO: where the Fragment header goes (the end of the unfragmentable part: the IPv6
/// header, hop-by-hop, routing, and destination options before a routing header), the offset of
/// the next-header byte that must become 44, and its old value.
fn ipv6_unfragmentable(
    frame: &[u8],
    layout: &Layout,
    l3: usize,
    tunnelled: bool,
) -> Result<(usize, usize, u8), GsoError> {
    if tunnelled {
        return Err(GsoError::Unsupported {
            what: "UFO inside a tunnel",
        });
    }
    let mut at = l3 + 40;
    let mut nh_at = l3 + 6;
    let exts = layout
        .layers
        .as_slice()
        .iter()
        .filter_map(|&(l, o)| match l {
            Layer::Ipv6Ext(p) => Some((p, usize::from(o))),
            _ => None,
        });
    // Walk: the unfragmentable part ends after the last HBH or routing header (a destination
    // options header counts only when a routing header follows it).
    for (p, o) in exts {
        let len = match p {
            ip_proto::AH => (usize::from(frame.get(o + 1).copied().unwrap_or(0)) + 2) * 4,
            _ => (usize::from(frame.get(o + 1).copied().unwrap_or(0)) + 1) * 8,
        };
        match p {
            ip_proto::HOPOPTS | ip_proto::ROUTING => {
                at = o + len;
                nh_at = o;
            }
            ip_proto::FRAGMENT => {
                return Err(GsoError::Unsupported {
                    what: "UFO of a packet that already has a Fragment header",
                })
            }
            _ => {}
        }
    }
    let nh = frame.get(nh_at).copied().ok_or(GsoError::TypeMismatch {
        gso_type: GsoType::Udp,
    })?;
    Ok((at, nh_at, nh))
}

/// A deterministic IPv6 fragment ID when the caller gives none: a hash of the addresses and
/// length (the kernel picks a random one; compare with that field masked).
fn default_frag_id(frame: &[u8], l3: usize, len: usize) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in frame.get(l3 + 8..l3 + 40).unwrap_or(&[]) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h ^ len as u32).max(1)
}
