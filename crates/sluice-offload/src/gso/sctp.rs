//! SCTP segmentation by chunks, as Linux's `SKB_GSO_SCTP`.
//!
//! # What the kernel does
//!
//! Linux builds an SCTP GSO packet in `sctp_packet_pack` (net/sctp/output.c): the chunks are
//! packed greedily, in order, into packets of at most the path MTU (IP header, 12-byte common
//! header and every chunk padded to 4 bytes), each packet's chunks in one buffer of the GSO
//! packet's frag list, `gso_size = GSO_BY_FRAGS`. `sctp_gso_segment` (net/sctp/offload.c) then
//! lets `skb_segment` cut exactly at those buffers, copying the headers in front of each, and
//! computes every segment's CRC32c when the device cannot (`NETIF_F_SCTP_CRC`);
//! `inet_gso_segment` sets each IPv4 total length, an ID incremented per segment and the header
//! checksum, `ipv6_gso_segment` each payload length. Nothing else of the headers changes.
//!
//! On the wire a GSO packet's bytes are the common header followed by the chunks of all its
//! packets, so [`segment_sctp`] re-derives the boundaries with the same greedy rule from the
//! path MTU: a chunk is never split, a segment holds as many whole chunks as fit.
//!
//! # What this kernel lets us check
//!
//! Nothing, directly: `virtio_net_hdr` has no SCTP GSO type (a TAP or packet socket cannot hand
//! the kernel an SCTP GSO packet; only the kernel's own SCTP sockets make them), and the kernel
//! this project runs on is built without SCTP (`CONFIG_IP_SCTP` is not set; `socket(AF_INET,
//! SOCK_STREAM, IPPROTO_SCTP)` fails with `EPROTONOSUPPORT`; no `sctp_gso_segment` symbol).
//! The tests therefore compare with vectors derived from the kernel code above, stated as such.
//!
//! # Refused
//!
//! Tunnels (Linux's SCTP GSO has no tunnel form), IP fragments, malformed chunk lists (a chunk
//! length under 4 or past the packet, bytes after the last chunk), AUTH chunks (the kernel
//! repeats one in every packet with a per-packet HMAC, which only the association can compute),
//! and a chunk that does not fit in one segment on its own (the kernel drops such a packet).

use super::{CsumMode, GsoError, GsoOutput, Segment, SegmentMeta, MAX_HEADER_LEN};
use sluice_packet::CsumStatus;
use sluice_wire::bytes::read_u16;
use sluice_wire::{ip_proto, L3Kind, Layout};

/// Length of the SCTP common header.
const COMMON_HEADER: usize = 12;
/// Offset of the CRC32c in the common header.
const CRC_AT: usize = 8;
/// Chunk type of AUTH (RFC 4895).
const CHUNK_AUTH: u8 = 15;

/// How [`segment_sctp`] segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SctpGsoParams {
    /// The path MTU: the most bytes one segment's IP packet may have (IP header with options or
    /// extension headers, the common header and the padded chunks), as the kernel's
    /// `transport->pathmtu`.
    pub mtu: u16,
    /// The CRC32c of every segment: computed (`Full`, a device without `NETIF_F_SCTP_CRC`), or
    /// left zero for the device (`Partial`, with [`SegmentMeta::csum_start`] at the common
    /// header and [`SegmentMeta::csum_offset`] 8).
    pub crc: CsumMode,
    /// IPv4 header checksums: computed, or left zero for the device.
    pub ip_csum: CsumMode,
}

impl SctpGsoParams {
    /// Segments of at most `mtu` IP bytes, every checksum computed in software.
    pub const fn new(mtu: u16) -> Self {
        SctpGsoParams {
            mtu,
            crc: CsumMode::Full,
            ip_csum: CsumMode::Full,
        }
    }
}

/// What is the same for every segment of one SCTP packet.
struct SctpPlan {
    /// The IP header's offset.
    l3: usize,
    /// IPv4 (with its ID and header length) or IPv6.
    v4: Option<(u16, usize)>,
    /// The common header's offset.
    l4: usize,
    /// Where the chunks start (the end of the copied header prefix).
    chunks: usize,
    /// One past the last chunk byte.
    end: usize,
    /// The most chunk bytes one segment may carry.
    room: usize,
}

/// Segments the SCTP packet `frame` (parsed as `layout`) by chunks into contiguous frames
/// appended to `out` (which is not cleared): each segment is the frame's headers (L2, IP, the
/// common header) followed by as many whole chunks, in order, as fit in `params.mtu`, with its
/// IP length, IPv4 ID (the packet's plus the segment index) and header checksum, and CRC32c set
/// as Linux's `sctp_gso_segment` leaves them. A packet whose chunks all fit gives one frame.
/// Returns the number of segments; on error nothing is appended.
///
/// ```
/// use sluice_offload::gso::{segment_sctp, GsoOutput, SctpGsoParams};
/// # fn chunk(tsn: u8, len: usize) -> Vec<u8> {
/// #     let mut c = vec![0u8; len];
/// #     c[0] = 0; // DATA
/// #     c[2..4].copy_from_slice(&(len as u16).to_be_bytes());
/// #     c[7] = tsn;
/// #     c
/// # }
/// // Ethernet + IPv4 (20) + SCTP common header (12) + three 400-byte DATA chunks.
/// let mut f = vec![0u8; 14];
/// f[12..14].copy_from_slice(&[0x08, 0x00]);
/// let ip_len = 20 + 12 + 3 * 400;
/// f.extend_from_slice(&[0x45, 0, (ip_len >> 8) as u8, ip_len as u8, 0, 1, 0x40, 0, 64, 132, 0, 0]);
/// f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
/// f.extend_from_slice(&[0x13, 0x88, 0x13, 0x88, 0, 0, 0, 7, 0, 0, 0, 0]);
/// for t in 0..3 {
///     f.extend_from_slice(&chunk(t, 400));
/// }
/// let layout = sluice_wire::parse(&f).unwrap();
/// let mut out = GsoOutput::new();
/// // An 900-byte path MTU: 20 + 12 + 2 * 400 = 832 fits, a third chunk does not.
/// assert_eq!(segment_sctp(&f, &layout, &SctpGsoParams::new(900), &mut out), Ok(2));
/// assert_eq!(out.frame(0).unwrap().len(), 14 + 832);
/// assert_eq!(out.frame(1).unwrap().len(), 14 + 432);
/// assert!(out.frames().all(|s| sluice_checksum::crc32c::sctp_is_valid(&s[34..])));
/// ```
pub fn segment_sctp(
    frame: &[u8],
    layout: &Layout,
    params: &SctpGsoParams,
    out: &mut GsoOutput,
) -> Result<usize, GsoError> {
    let plan = SctpPlan::new(frame, layout, params)?;
    // Pass 1: validate every chunk and find the boundaries' count, so that nothing is written
    // for a packet that is refused.
    let nseg = plan.walk(frame, |_, _| {})?;
    let marks = (out.arena.len(), out.segs.len());
    out.arena
        .reserve(nseg * plan.chunks + plan.end.saturating_sub(plan.chunks));
    out.segs.reserve(nseg);
    let meta = SegmentMeta {
        ip_csum: if plan.v4.is_some() && params.ip_csum == CsumMode::Partial {
            CsumStatus::Partial
        } else {
            CsumStatus::Good
        },
        l4_csum: match params.crc {
            CsumMode::Full => CsumStatus::Good,
            CsumMode::Partial => CsumStatus::Partial,
        },
        csum_start: if params.crc == CsumMode::Partial {
            u16::try_from(plan.l4).unwrap_or(u16::MAX)
        } else {
            0
        },
        csum_offset: if params.crc == CsumMode::Partial {
            CRC_AT as u16
        } else {
            0
        },
        ..SegmentMeta::default()
    };
    // Pass 2: emit (cannot fail: pass 1 checked every range).
    let mut index: u16 = 0;
    plan.walk(frame, |a, b| {
        let start = out.arena.len();
        out.arena
            .extend_from_slice(frame.get(..plan.chunks).unwrap_or(&[]));
        out.arena.extend_from_slice(frame.get(a..b).unwrap_or(&[]));
        if let Some(seg) = out.arena.get_mut(start..) {
            plan.fix(seg, index, params);
        }
        out.segs.push(Segment {
            range: start..out.arena.len(),
            meta,
        });
        index = index.wrapping_add(1);
    })?;
    debug_assert_eq!(out.segs.len() - marks.1, nseg);
    Ok(nseg)
}

impl SctpPlan {
    fn new(frame: &[u8], layout: &Layout, params: &SctpGsoParams) -> Result<Self, GsoError> {
        if layout.tunnel.is_some() || layout.inner.is_some() {
            return Err(GsoError::Unsupported {
                what: "SCTP GSO inside a tunnel",
            });
        }
        let h = &layout.outer;
        let (Some(l3), Some(kind), Some(l4), Some(end)) = (h.l3, h.l3_kind, h.l4, h.l3_end) else {
            return Err(GsoError::Unsupported {
                what: "SCTP GSO of a packet without IP and SCTP headers",
            });
        };
        if h.l4_proto != Some(ip_proto::SCTP) {
            return Err(GsoError::Unsupported {
                what: "SCTP GSO of a packet that is not SCTP",
            });
        }
        if h.is_fragment {
            return Err(GsoError::Unsupported {
                what: "SCTP GSO of an IP fragment",
            });
        }
        let chunks = l4 + COMMON_HEADER;
        if chunks > end || end > frame.len() {
            return Err(GsoError::Unsupported {
                what: "SCTP GSO of a truncated packet",
            });
        }
        if chunks > MAX_HEADER_LEN {
            return Err(GsoError::HeadersTooLong { len: chunks });
        }
        let v4 = match kind {
            L3Kind::Ipv4 => {
                let id = read_u16(frame, l3 + 4).unwrap_or(0);
                let ihl = frame.get(l3).map_or(0, |b| usize::from(b & 0x0f) * 4);
                Some((id, ihl))
            }
            L3Kind::Ipv6 => None,
        };
        let overhead = chunks - l3;
        let mtu = usize::from(params.mtu);
        // The smallest chunk (4 bytes) must fit after the headers.
        if overhead + 4 > mtu {
            return Err(GsoError::FrameTooLong {
                len: l3 + overhead + 4,
                max: l3 + mtu,
            });
        }
        Ok(SctpPlan {
            l3,
            v4,
            l4,
            chunks,
            end,
            room: mtu - overhead,
        })
    }

    /// Walks the chunks, calling `emit(start, end)` with the byte range of every segment's
    /// chunks (greedy, as `sctp_packet_pack`); returns the number of segments.
    fn walk(&self, frame: &[u8], mut emit: impl FnMut(usize, usize)) -> Result<usize, GsoError> {
        let (mut off, mut seg_start, mut nseg) = (self.chunks, self.chunks, 0usize);
        if off == self.end {
            return Err(GsoError::Unsupported {
                what: "SCTP GSO of a packet without chunks",
            });
        }
        while off < self.end {
            let (Some(&kind), Some(len)) =
                (frame.get(off), read_u16(frame, off + 2).map(usize::from))
            else {
                return Err(GsoError::Unsupported {
                    what: "SCTP bytes after the last chunk",
                });
            };
            if off + 4 > self.end {
                return Err(GsoError::Unsupported {
                    what: "SCTP bytes after the last chunk",
                });
            }
            if len < 4 || off + len > self.end {
                return Err(GsoError::Unsupported {
                    what: "SCTP chunk length under 4 or past the packet",
                });
            }
            if kind == CHUNK_AUTH {
                return Err(GsoError::Unsupported {
                    what: "SCTP AUTH chunk (its HMAC is per packet)",
                });
            }
            // Padded to 4 bytes; a last chunk may end the packet without its padding.
            let next = (off + ((len + 3) & !3)).min(self.end);
            let size = next - off;
            if size > self.room {
                return Err(GsoError::FrameTooLong {
                    len: self.chunks + size,
                    max: self.chunks + self.room,
                });
            }
            if next - seg_start > self.room {
                emit(seg_start, off);
                nseg += 1;
                seg_start = off;
            }
            off = next;
        }
        emit(seg_start, off);
        Ok(nseg + 1)
    }

    /// Fixes one emitted segment `seg` (its frame bytes): IP length, IPv4 ID and header
    /// checksum, the CRC32c.
    fn fix(&self, seg: &mut [u8], index: u16, params: &SctpGsoParams) {
        let ip_len = seg.len() - self.l3;
        match self.v4 {
            Some((id, ihl)) => {
                put16(seg, self.l3 + 2, ip_len as u16);
                put16(seg, self.l3 + 4, id.wrapping_add(index));
                put16(seg, self.l3 + 10, 0);
                if params.ip_csum == CsumMode::Full {
                    let c = seg
                        .get(self.l3..self.l3 + ihl)
                        .map_or(0, sluice_checksum::checksum);
                    put16(seg, self.l3 + 10, c);
                }
            }
            None => put16(seg, self.l3 + 4, (ip_len - 40) as u16),
        }
        if let Some(f) = seg.get_mut(self.l4 + CRC_AT..self.l4 + CRC_AT + 4) {
            f.fill(0);
        }
        if params.crc == CsumMode::Full {
            let crc = seg.get(self.l4..).map_or(0, sluice_checksum::crc32c::sctp);
            if let Some(f) = seg.get_mut(self.l4 + CRC_AT..self.l4 + CRC_AT + 4) {
                f.copy_from_slice(&crc.to_be_bytes());
            }
        }
    }
}

/// Writes `v` big-endian at `at` (inside the header prefix, checked by `SctpPlan::new`).
fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(f) = b.get_mut(at..at + 2) {
        f.copy_from_slice(&v.to_be_bytes());
    }
}
