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
//! - **SCTP** ([`segment_sctp`], its own entry point): split by whole chunks into segments of at
//!   most the path MTU, as Linux's `SKB_GSO_SCTP` (see the `sctp` module's notes).
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
use sluice_packet::{CsumStatus, GsoType};
use sluice_wire::bytes::OutOfRange;
use sluice_wire::Layout;

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
    /// Refused with USO ([`GsoError::EcnWithoutTcp`]) and ignored by UFO, as Linux does.
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
    /// ECN ([`GsoParams::ecn`]) was asked for USO: the flag belongs to TCP (CWR on the first
    /// segment only), and Linux refuses it on USO (`EINVAL` from `tun`). UFO accepts it, as the
    /// kernel does, and fragments the same with or without it.
    EcnWithoutTcp,
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
            GsoError::EcnWithoutTcp => "gso_ecn_without_tcp",
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
            GsoError::EcnWithoutTcp => write!(f, "ECN asked for USO (TCP only)"),
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

/// The methods [`GsoOutput`] and [`ZeroCopyOutput`] share over their byte arena `$bytes` and
/// their list `segs` of `$seg`: `new`, `clear`, `len`, `is_empty` and `segment` (documented by
/// `$segment_doc`).
macro_rules! segment_list {
    ($output:ident, $bytes:ident, $seg:ty, $segment_doc:literal) => {
        impl $output {
            /// An empty output.
            pub fn new() -> Self {
                Self::default()
            }

            /// Removes every segment, keeping the allocations.
            pub fn clear(&mut self) {
                self.$bytes.clear();
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

            #[doc = $segment_doc]
            pub fn segment(&self, i: usize) -> Option<&$seg> {
                self.segs.get(i)
            }
        }
    };
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

segment_list!(GsoOutput, arena, Segment, "Segment `i` with its metadata.");

impl GsoOutput {
    /// The bytes of segment `i`.
    pub fn frame(&self, i: usize) -> Option<&[u8]> {
        self.segs
            .get(i)
            .and_then(|s| self.arena.get(s.range.clone()))
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

segment_list!(
    ZeroCopyOutput,
    headers,
    ZeroCopySegment,
    "Segment `i`'s descriptor."
);

impl ZeroCopyOutput {
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
///
/// ```
/// use sluice_offload::gso::{segment, GsoOutput, GsoParams};
/// use sluice_packet::{verify::verify_frame, GsoType, Verdict};
/// // Ethernet + IPv4 (DF) + TCP (ACK, seq 1) + 3000 payload bytes: a TSO super-packet.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0x0b, 0xe0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
/// frame.extend((0..3000u32).map(|i| i as u8));
/// let layout = sluice_wire::parse(&frame).unwrap();
///
/// let mut out = GsoOutput::new();
/// let n = segment(&frame, &layout, &GsoParams::new(GsoType::TcpV4, 1000), &mut out).unwrap();
/// assert_eq!(n, 3);
/// for (i, seg) in out.frames().enumerate() {
///     assert_eq!(seg.len(), 14 + 20 + 20 + 1000);
///     assert_eq!(seg[54..], frame[54 + 1000 * i..54 + 1000 * (i + 1)]);
///     // Sequence numbers advance by the segment size; every checksum is computed.
///     assert_eq!(seg[38..42], (1 + 1000 * i as u32).to_be_bytes());
///     let v = verify_frame(seg, &sluice_wire::parse(seg).unwrap());
///     assert_eq!((v.ip, v.l4), (Verdict::Good, Verdict::Good));
/// }
/// ```
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
///
/// ```
/// use sluice_offload::gso::{segment, segment_zero_copy, GsoOutput, GsoParams, ZeroCopyOutput};
/// use sluice_packet::GsoType;
/// // Ethernet + IPv4 (DF) + TCP (ACK, seq 1) + 3000 payload bytes: a TSO super-packet.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0x0b, 0xe0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
/// frame.extend((0..3000u32).map(|i| i as u8));
/// let layout = sluice_wire::parse(&frame).unwrap();
/// let params = GsoParams::new(GsoType::TcpV4, 1000);
/// let (mut zc, mut whole) = (ZeroCopyOutput::new(), GsoOutput::new());
/// segment_zero_copy(&frame, &layout, &params, &mut zc).unwrap();
/// segment(&frame, &layout, &params, &mut whole).unwrap();
/// // Each segment is a fresh header plus a slice of the input: the same bytes, not copied.
/// for i in 0..zc.len() {
///     let [header, payload] = zc.parts(i, &frame).unwrap();
///     assert_eq!([header, payload].concat(), whole.frame(i).unwrap());
/// }
/// ```
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
///
/// ```
/// use sluice_offload::gso::{segment_partial, GsoOutput, GsoParams};
/// use sluice_packet::GsoType;
/// // Ethernet + IPv4 (DF) + TCP (ACK, seq 1) + 3000 payload bytes: a TSO super-packet.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0x0b, 0xe0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
/// frame.extend((0..3000u32).map(|i| i as u8));
/// frame.truncate(54 + 2500); // 2.5 segments of payload
/// frame[16..18].copy_from_slice(&(40u16 + 2500).to_be_bytes());
/// let layout = sluice_wire::parse(&frame).unwrap();
/// let mut out = GsoOutput::new();
/// let params = GsoParams::new(GsoType::TcpV4, 1000);
/// let n = segment_partial(&frame, &layout, &params, &mut out).unwrap();
/// assert_eq!(n, 2); // one GSO packet of 2 x 1000 bytes for the device, then the 500-byte rest
/// let gso = out.segment(0).unwrap().meta;
/// assert_eq!((gso.gso_type, gso.gso_size), (GsoType::TcpV4, 1000));
/// assert_eq!(out.frame(0).unwrap().len(), 54 + 2000);
/// assert_eq!(out.frame(1).unwrap().len(), 54 + 500);
/// ```
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

mod emit;
mod plan;
mod sctp;
pub use sctp::{segment_sctp, SctpGsoParams};

use plan::{Cover, L4Fix, Plan};
