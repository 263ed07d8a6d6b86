//! `virtio_net_hdr`: the offload header in front of every frame on a TAP device (with
//! `IFF_VNET_HDR`), an `AF_PACKET` socket (with `PACKET_VNET_HDR`) and a virtio-net queue.
//!
//! Three layouts, all little endian (virtio 1.0; a legacy v0 header on a little-endian host is
//! the same bytes):
//!
//! | format | bytes | fields |
//! |---|---|---|
//! | [`HdrFormat::V0`] | 10 | flags u8, gso_type u8, hdr_len, gso_size, csum_start, csum_offset |
//! | [`HdrFormat::V1`] | 12 | v0 + num_buffers |
//! | [`HdrFormat::V1HashTunnel`] | 24 | v1 + hash_value u32, hash_report, padding, outer_th_offset, inner_nh_offset |
//!
//! The 24-byte form is `virtio_net_hdr_v1_hash_tunnel` of Linux 6.18 (`TUN_F_UDP_TUNNEL_GSO`):
//! `gso_type` may carry `UDP_TUNNEL_IPV4` (0x20) or `UDP_TUNNEL_IPV6` (0x40) on top of the inner
//! GSO type, and `flags` `UDP_TUNNEL_CSUM` (0x08) when the outer UDP checksum is in use.
//!
//! [`VirtioNetHdr::to_meta`] maps a header onto [`OffloadMeta`] exactly: `NEEDS_CSUM` becomes
//! `Partial` at `csum_start`/`csum_offset` (never `Good`), `DATA_VALID` becomes `Good`, the GSO
//! type, size and ECN bit become the GSO request. Inconsistent headers — which the kernel itself
//! rejects with `EINVAL` — are refused with a [`VirtioError`] instead of being passed on.
//! [`VirtioNetHdr::from_meta`] is the inverse. Nothing here panics on any input.

use crate::meta::{l4_csum_field, CsumStatus, GsoType, Level, OffloadMeta, Slot};
use core::fmt;
use sluice_wire::bytes::{read_u16, read_u16_le, write_bytes, write_u16_le};
use sluice_wire::{ip_proto, L3Kind, Layout, TunnelKind};

/// `flags`: the L4 checksum is partial; the receiver fills it from `csum_start`.
pub const F_NEEDS_CSUM: u8 = 1;
/// `flags`: the checksums have been verified.
pub const F_DATA_VALID: u8 = 2;
/// `flags`: `csum_start`/`csum_offset` carry receive-coalescing information (not supported).
pub const F_RSC_INFO: u8 = 4;
/// `flags`: the outer UDP checksum of a UDP-tunnel GSO packet is in use.
pub const F_UDP_TUNNEL_CSUM: u8 = 8;
/// `gso_type`: not a GSO packet.
pub const GSO_NONE: u8 = 0;
/// `gso_type`: TCP over IPv4.
pub const GSO_TCPV4: u8 = 1;
/// `gso_type`: UDP fragmentation (UFO).
pub const GSO_UDP: u8 = 3;
/// `gso_type`: TCP over IPv6.
pub const GSO_TCPV6: u8 = 4;
/// `gso_type`: UDP L4 segmentation (USO).
pub const GSO_UDP_L4: u8 = 5;
/// `gso_type` bit: a UDP tunnel over IPv4 surrounds the GSO packet.
pub const GSO_UDP_TUNNEL_IPV4: u8 = 0x20;
/// `gso_type` bit: a UDP tunnel over IPv6 surrounds the GSO packet.
pub const GSO_UDP_TUNNEL_IPV6: u8 = 0x40;
/// `gso_type` bit: the TCP stream uses ECN (CWR on the first segment only).
pub const GSO_ECN: u8 = 0x80;

/// One of the three header layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HdrFormat {
    /// `struct virtio_net_hdr`, 10 bytes.
    V0,
    /// `struct virtio_net_hdr_v1` (`num_buffers`), 12 bytes.
    V1,
    /// `struct virtio_net_hdr_v1_hash_tunnel`, 24 bytes.
    V1HashTunnel,
}

impl HdrFormat {
    /// Length in bytes.
    pub const fn size(self) -> usize {
        match self {
            HdrFormat::V0 => 10,
            HdrFormat::V1 => 12,
            HdrFormat::V1HashTunnel => 24,
        }
    }

    /// The format of a given header length (what `TUNSETVNETHDRSZ` was set to).
    pub const fn from_len(len: usize) -> Option<HdrFormat> {
        match len {
            10 => Some(HdrFormat::V0),
            12 => Some(HdrFormat::V1),
            24 => Some(HdrFormat::V1HashTunnel),
            _ => None,
        }
    }
}

/// A decoded `virtio_net_hdr` (any of the three layouts; fields absent from the smaller ones are
/// zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VirtioNetHdr {
    /// `F_*` bits.
    pub flags: u8,
    /// `GSO_*` value and bits.
    pub gso_type: u8,
    /// Length of the headers (up to and including the innermost L4 header for GSO).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksum computation starts (from the frame start).
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start`.
    pub csum_offset: u16,
    /// Number of merged receive buffers (v1).
    pub num_buffers: u16,
    /// RSS hash value (hash extension).
    pub hash_value: u32,
    /// RSS hash report type (hash extension).
    pub hash_report: u16,
    /// Reserved padding of the hash extension (kept as received).
    pub padding: u16,
    /// Offset of the outer transport (UDP) header of a UDP-tunnel GSO packet.
    pub outer_th_offset: u16,
    /// Offset of the inner network header of a UDP-tunnel GSO packet.
    pub inner_nh_offset: u16,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VirtioError {
    /// The buffer is shorter than the header format.
    Short {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A `flags` bit Sluice does not know (or `RSC_INFO`, which is receive-only coalescing info).
    UnknownFlags(u8),
    /// A `gso_type` value Sluice does not know.
    UnknownGsoType(u8),
    /// `csum_start + csum_offset + 2` lies beyond the frame.
    CsumBeyondFrame {
        /// `csum_start`.
        csum_start: u16,
        /// `csum_offset`.
        csum_offset: u16,
        /// Frame length.
        len: usize,
    },
    /// `csum_start` is not a parsed L4 header of the frame.
    CsumStartNotL4(u16),
    /// `csum_offset` is not the checksum field of the L4 protocol at `csum_start`.
    CsumOffsetMismatch {
        /// The L4 protocol number.
        proto: u8,
        /// `csum_offset`.
        csum_offset: u16,
    },
    /// A GSO type with `gso_size` 0.
    GsoSizeZero,
    /// `hdr_len` is smaller than the headers of a GSO packet, or larger than the frame.
    HdrLen {
        /// `hdr_len`.
        hdr_len: u16,
        /// The end of the innermost L4 header (the least valid value).
        headers: usize,
        /// Frame length.
        len: usize,
    },
    /// The ECN bit on USO or without GSO (the kernel refuses both; UFO accepts it).
    EcnWithoutTcp,
    /// The GSO type does not match the packet (TCPv4 GSO on IPv6, TCP GSO on UDP …).
    GsoMismatch(&'static str),
    /// UDP-tunnel bits (or the tunnel checksum flag) without the 24-byte header, or both tunnel
    /// bits at once.
    TunnelBits(&'static str),
    /// The tunnel offsets do not match the parsed outer UDP / inner IP headers.
    TunnelOffsets {
        /// `outer_th_offset`.
        outer_th_offset: u16,
        /// `inner_nh_offset`.
        inner_nh_offset: u16,
    },
    /// The metadata cannot be expressed as a header (the text says why).
    Unrepresentable(&'static str),
}

impl fmt::Display for VirtioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VirtioError::Short { need, have } => {
                write!(f, "virtio_net_hdr needs {need} bytes, have {have}")
            }
            VirtioError::UnknownFlags(x) => write!(f, "unknown virtio_net_hdr flags {x:#04x}"),
            VirtioError::UnknownGsoType(x) => write!(f, "unknown virtio_net_hdr gso_type {x:#04x}"),
            VirtioError::CsumBeyondFrame {
                csum_start,
                csum_offset,
                len,
            } => write!(
                f,
                "checksum at {csum_start}+{csum_offset} lies beyond the {len}-byte frame"
            ),
            VirtioError::CsumStartNotL4(s) => write!(f, "csum_start {s} is not an L4 header"),
            VirtioError::CsumOffsetMismatch { proto, csum_offset } => write!(
                f,
                "csum_offset {csum_offset} is not the checksum field of IP protocol {proto}"
            ),
            VirtioError::GsoSizeZero => write!(f, "GSO type with gso_size 0"),
            VirtioError::HdrLen {
                hdr_len,
                headers,
                len,
            } => write!(
                f,
                "hdr_len {hdr_len} outside [{headers}, {len}] (headers end, frame length)"
            ),
            VirtioError::EcnWithoutTcp => write!(f, "GSO ECN bit on USO or without GSO"),
            VirtioError::GsoMismatch(w) => write!(f, "GSO type does not match the packet: {w}"),
            VirtioError::TunnelBits(w) => write!(f, "UDP tunnel bits: {w}"),
            VirtioError::TunnelOffsets {
                outer_th_offset,
                inner_nh_offset,
            } => write!(
                f,
                "tunnel offsets outer_th {outer_th_offset} / inner_nh {inner_nh_offset} do not match the frame"
            ),
            VirtioError::Unrepresentable(w) => write!(f, "cannot express as virtio_net_hdr: {w}"),
        }
    }
}

impl std::error::Error for VirtioError {}

/// The little-endian `u16` at `at` of a header already cut to its format's size (so in range),
/// or 0.
fn le16(b: &[u8], at: usize) -> u16 {
    read_u16_le(b, at).unwrap_or(0)
}

/// Whether the big-endian `u16` field at `at` of `frame` (a UDP checksum) is present and not zero.
fn nonzero16(frame: &[u8], at: usize) -> bool {
    read_u16(frame, at).is_some_and(|v| v != 0)
}

impl VirtioNetHdr {
    /// Decodes the first `fmt.size()` bytes of `buf`. Only the length is checked here; the
    /// meaning is checked against the frame by [`VirtioNetHdr::to_meta`].
    ///
    /// ```
    /// use sluice_packet::virtio::{HdrFormat, VirtioNetHdr, F_NEEDS_CSUM, GSO_TCPV4};
    /// // flags NEEDS_CSUM, TCPv4 GSO, hdr_len 66, gso_size 1448, csum_start 34, csum_offset 16
    /// let bytes = [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0];
    /// let hdr = VirtioNetHdr::decode(&bytes, HdrFormat::V0).unwrap();
    /// assert_eq!((hdr.flags, hdr.gso_type), (F_NEEDS_CSUM, GSO_TCPV4));
    /// assert_eq!((hdr.hdr_len, hdr.gso_size), (66, 1448));
    /// assert_eq!((hdr.csum_start, hdr.csum_offset), (34, 16));
    ///
    /// let mut out = [0u8; 12];
    /// assert_eq!(hdr.encode(HdrFormat::V1, &mut out), Ok(12));
    /// assert_eq!(out[..10], bytes);
    /// assert!(VirtioNetHdr::decode(&bytes[..9], HdrFormat::V0).is_err());
    /// ```
    pub fn decode(buf: &[u8], fmt: HdrFormat) -> Result<VirtioNetHdr, VirtioError> {
        let need = fmt.size();
        let b = buf.get(..need).ok_or(VirtioError::Short {
            need,
            have: buf.len(),
        })?;
        let mut h = VirtioNetHdr {
            flags: b.first().copied().unwrap_or(0),
            gso_type: b.get(1).copied().unwrap_or(0),
            hdr_len: le16(b, 2),
            gso_size: le16(b, 4),
            csum_start: le16(b, 6),
            csum_offset: le16(b, 8),
            ..VirtioNetHdr::default()
        };
        if need >= 12 {
            h.num_buffers = le16(b, 10);
        }
        if need >= 24 {
            h.hash_value = u32::from(le16(b, 12)) | (u32::from(le16(b, 14)) << 16);
            h.hash_report = le16(b, 16);
            h.padding = le16(b, 18);
            h.outer_th_offset = le16(b, 20);
            h.inner_nh_offset = le16(b, 22);
        }
        Ok(h)
    }

    /// Encodes into the first `fmt.size()` bytes of `out` and returns that length. Fields the
    /// format has no room for must be zero.
    pub fn encode(&self, fmt: HdrFormat, out: &mut [u8]) -> Result<usize, VirtioError> {
        let need = fmt.size();
        let have = out.len();
        let b = out
            .get_mut(..need)
            .ok_or(VirtioError::Short { need, have })?;
        if need < 24
            && (self.hash_value != 0
                || self.hash_report != 0
                || self.padding != 0
                || self.outer_th_offset != 0
                || self.inner_nh_offset != 0)
        {
            return Err(VirtioError::Unrepresentable(
                "hash or tunnel fields need the 24-byte header",
            ));
        }
        if need < 12 && self.num_buffers != 0 {
            return Err(VirtioError::Unrepresentable(
                "num_buffers needs a v1 header",
            ));
        }
        // `b` is exactly `need` bytes, and each field below is written only by the formats
        // that have it, so no write can fail; the error is kept rather than assumed.
        let short = |_| VirtioError::Short { need, have };
        write_bytes(b, 0, &[self.flags, self.gso_type]).map_err(short)?;
        let common = [
            self.hdr_len,
            self.gso_size,
            self.csum_start,
            self.csum_offset,
        ];
        for (i, v) in common.into_iter().enumerate() {
            write_u16_le(b, 2 + 2 * i, v).map_err(short)?;
        }
        if need >= 12 {
            write_u16_le(b, 10, self.num_buffers).map_err(short)?;
        }
        if need >= 24 {
            let v1_hash_tunnel = [
                self.hash_value as u16,
                (self.hash_value >> 16) as u16,
                self.hash_report,
                self.padding,
                self.outer_th_offset,
                self.inner_nh_offset,
            ];
            for (i, v) in v1_hash_tunnel.into_iter().enumerate() {
                write_u16_le(b, 12 + 2 * i, v).map_err(short)?;
            }
        }
        Ok(need)
    }

    /// The tunnel bits of `gso_type`.
    pub const fn tunnel_bits(&self) -> u8 {
        self.gso_type & (GSO_UDP_TUNNEL_IPV4 | GSO_UDP_TUNNEL_IPV6)
    }

    /// Maps the header onto metadata for `frame` (parsed as `layout`), checking it the way the
    /// kernel does and more: every inconsistency is a [`VirtioError`]. `fmt` is the format the
    /// header came in (tunnel bits need [`HdrFormat::V1HashTunnel`]).
    ///
    /// ```
    /// use sluice_packet::virtio::{HdrFormat, VirtioNetHdr, F_NEEDS_CSUM};
    /// use sluice_packet::{CsumStatus, Slot};
    /// let mut frame = vec![
    ///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
    ///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
    ///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
    /// ];
    /// let layout = sluice_wire::parse(&frame).unwrap();
    /// // The sender left the UDP checksum (at 34 + 6) for the receiver to fill.
    /// let mut hdr = VirtioNetHdr::default();
    /// (hdr.flags, hdr.csum_start, hdr.csum_offset) = (F_NEEDS_CSUM, 34, 6);
    /// let meta = hdr.to_meta(HdrFormat::V1, &frame, &layout).unwrap();
    /// assert_eq!(meta.status(Slot::OuterL4), CsumStatus::Partial);
    /// assert_eq!((meta.csum_start(), meta.csum_offset()), (34, 6));
    /// // from_meta is the inverse.
    /// assert_eq!(VirtioNetHdr::from_meta(&meta, &frame, HdrFormat::V1).unwrap(), hdr);
    ///
    /// // A checksum location other than the UDP checksum field is refused, as by the kernel.
    /// let bad = VirtioNetHdr { csum_offset: 4, ..hdr };
    /// assert!(bad.to_meta(HdrFormat::V1, &frame, &layout).is_err());
    /// ```
    pub fn to_meta(
        &self,
        fmt: HdrFormat,
        frame: &[u8],
        layout: &Layout,
    ) -> Result<OffloadMeta, VirtioError> {
        let (gso, tbits, ecn) = self.gso_request(fmt)?;
        let mut meta = OffloadMeta::from_layout(layout);
        let gso_level = self.gso_level(&meta, tbits)?;
        self.check_hdr_len(frame, &meta, gso, gso_level, tbits)?;
        self.apply_needs_csum(&mut meta, frame.len(), tbits)?;
        if self.flags & F_DATA_VALID != 0 {
            // Linux: CHECKSUM_UNNECESSARY, csum_level 1 (inner too) with UDP_TUNNEL_CSUM.
            meta.rx_checksum_unnecessary(self.flags & F_UDP_TUNNEL_CSUM != 0);
        }
        if tbits != 0 && self.flags & F_UDP_TUNNEL_CSUM == 0 {
            // The outer UDP checksum is not in use: it must be zero in the frame.
            let o = meta.offsets().outer_l4.map(usize::from).unwrap_or(0);
            if nonzero16(frame, o + 6) {
                return Err(VirtioError::TunnelBits(
                    "outer UDP checksum set without UDP_TUNNEL_CSUM",
                ));
            }
        }
        meta.set_gso(gso, self.gso_size, ecn)
            .map_err(|_| VirtioError::GsoSizeZero)?;
        Ok(meta)
    }

    /// The flags and GSO type on their own: known flags, a known type, tunnel bits only with
    /// the 24-byte header and an inner TCP/USO type, ECN not with USO (nor without GSO), a
    /// segment size with GSO. Returns the GSO type, the tunnel bits and the ECN bit.
    fn gso_request(&self, fmt: HdrFormat) -> Result<(GsoType, u8, bool), VirtioError> {
        let known = F_NEEDS_CSUM
            | F_DATA_VALID
            | if fmt == HdrFormat::V1HashTunnel {
                F_UDP_TUNNEL_CSUM
            } else {
                0
            };
        if self.flags & !known != 0 {
            if self.flags & F_UDP_TUNNEL_CSUM != 0 && fmt != HdrFormat::V1HashTunnel {
                return Err(VirtioError::TunnelBits(
                    "UDP_TUNNEL_CSUM without the 24-byte header",
                ));
            }
            return Err(VirtioError::UnknownFlags(self.flags & !known));
        }
        let tbits = self.tunnel_bits();
        let base = self.gso_type & !(GSO_ECN | GSO_UDP_TUNNEL_IPV4 | GSO_UDP_TUNNEL_IPV6);
        let gso = match base {
            GSO_NONE => GsoType::None,
            GSO_TCPV4 => GsoType::TcpV4,
            GSO_TCPV6 => GsoType::TcpV6,
            GSO_UDP => GsoType::Udp,
            GSO_UDP_L4 => GsoType::UdpL4,
            _ => return Err(VirtioError::UnknownGsoType(self.gso_type)),
        };
        if tbits != 0 && fmt != HdrFormat::V1HashTunnel {
            return Err(VirtioError::TunnelBits(
                "tunnel GSO bits without the 24-byte header",
            ));
        }
        if tbits == GSO_UDP_TUNNEL_IPV4 | GSO_UDP_TUNNEL_IPV6 {
            return Err(VirtioError::TunnelBits("both IPv4 and IPv6 tunnel bits"));
        }
        if tbits != 0 && gso == GsoType::None {
            return Err(VirtioError::TunnelBits(
                "tunnel bits without an inner GSO type",
            ));
        }
        if tbits != 0 && gso == GsoType::Udp {
            return Err(VirtioError::TunnelBits("no UFO inside a UDP tunnel"));
        }
        if self.flags & F_UDP_TUNNEL_CSUM != 0 && tbits == 0 {
            return Err(VirtioError::TunnelBits(
                "UDP_TUNNEL_CSUM without a tunnel GSO type",
            ));
        }
        let ecn = self.gso_type & GSO_ECN != 0;
        // Linux 6.18 refuses the bit with USO and without GSO (`EINVAL`) but accepts it with UFO
        // (fragments are the same with or without it): checked through the kernel oracle in
        // sluice-offload's `gso_kernel` test.
        if ecn && matches!(gso, GsoType::UdpL4 | GsoType::None) {
            return Err(VirtioError::EcnWithoutTcp);
        }
        if gso != GsoType::None && self.gso_size == 0 {
            return Err(VirtioError::GsoSizeZero);
        }
        Ok((gso, tbits, ecn))
    }

    /// Which header stack the GSO type describes (the inner one with tunnel bits), with the
    /// tunnel offsets checked against the frame.
    fn gso_level(&self, meta: &OffloadMeta, tbits: u8) -> Result<Level, VirtioError> {
        if tbits != 0 {
            let udp_tunnel = matches!(meta.tunnel(), Some(TunnelKind::Vxlan | TunnelKind::Geneve));
            let o = meta.offsets();
            let outer_ok = match tbits {
                GSO_UDP_TUNNEL_IPV4 => meta.l3_kind(Level::Outer) == Some(L3Kind::Ipv4),
                _ => meta.l3_kind(Level::Outer) == Some(L3Kind::Ipv6),
            };
            if !udp_tunnel {
                return Err(VirtioError::GsoMismatch("tunnel bits but no UDP tunnel"));
            }
            if !outer_ok {
                return Err(VirtioError::GsoMismatch(
                    "tunnel bit does not match the outer IP version",
                ));
            }
            if o.outer_l4 != Some(self.outer_th_offset) || o.inner_l3 != Some(self.inner_nh_offset)
            {
                return Err(VirtioError::TunnelOffsets {
                    outer_th_offset: self.outer_th_offset,
                    inner_nh_offset: self.inner_nh_offset,
                });
            }
            Ok(Level::Inner)
        } else {
            if self.outer_th_offset != 0 || self.inner_nh_offset != 0 {
                return Err(VirtioError::TunnelBits(
                    "tunnel offsets without a tunnel GSO type",
                ));
            }
            Ok(Level::Outer)
        }
    }

    /// The GSO type matches the headers at `gso_level`, and `hdr_len` covers them and lies
    /// within the frame.
    fn check_hdr_len(
        &self,
        frame: &[u8],
        meta: &OffloadMeta,
        gso: GsoType,
        gso_level: Level,
        tbits: u8,
    ) -> Result<(), VirtioError> {
        let len = frame.len();
        if gso != GsoType::None {
            let l3 = meta.l3_kind(gso_level);
            let l4 = meta.l4_proto(gso_level);
            let ok = match gso {
                GsoType::TcpV4 => l3 == Some(L3Kind::Ipv4) && l4 == Some(ip_proto::TCP),
                GsoType::TcpV6 => l3 == Some(L3Kind::Ipv6) && l4 == Some(ip_proto::TCP),
                GsoType::UdpL4 => l3.is_some() && l4 == Some(ip_proto::UDP),
                GsoType::Udp => l3.is_some() && l4 == Some(ip_proto::UDP),
                GsoType::None => true,
            };
            if !ok {
                return Err(VirtioError::GsoMismatch(match gso {
                    GsoType::TcpV4 => "TCPv4 GSO needs TCP over IPv4",
                    GsoType::TcpV6 => "TCPv6 GSO needs TCP over IPv6",
                    _ => "UDP GSO needs UDP",
                }));
            }
            if tbits != 0 && self.flags & F_NEEDS_CSUM == 0 {
                return Err(VirtioError::GsoMismatch(
                    "UDP tunnel GSO needs NEEDS_CSUM on the inner L4",
                ));
            }
            let headers = l4_header_end(frame, meta, gso_level).unwrap_or(usize::MAX);
            if usize::from(self.hdr_len) < headers || usize::from(self.hdr_len) > len {
                return Err(VirtioError::HdrLen {
                    hdr_len: self.hdr_len,
                    headers: headers.min(len),
                    len,
                });
            }
        } else if usize::from(self.hdr_len) > len {
            return Err(VirtioError::HdrLen {
                hdr_len: self.hdr_len,
                headers: 0,
                len,
            });
        }
        Ok(())
    }

    /// `NEEDS_CSUM`: the checksum location must be an L4 header's checksum field (the inner one
    /// with tunnel bits); it becomes a partial L4 checksum in `meta`.
    fn apply_needs_csum(
        &self,
        meta: &mut OffloadMeta,
        len: usize,
        tbits: u8,
    ) -> Result<(), VirtioError> {
        if self.flags & F_NEEDS_CSUM == 0 {
            return Ok(());
        }
        let end = usize::from(self.csum_start) + usize::from(self.csum_offset) + 2;
        if end > len {
            return Err(VirtioError::CsumBeyondFrame {
                csum_start: self.csum_start,
                csum_offset: self.csum_offset,
                len,
            });
        }
        let level = [Level::Inner, Level::Outer]
            .into_iter()
            .find(|&l| {
                (l == Level::Outer || meta.tunnel().is_some())
                    && meta.offsets().l4(l) == Some(self.csum_start)
            })
            .ok_or(VirtioError::CsumStartNotL4(self.csum_start))?;
        let proto = meta.l4_proto(level).unwrap_or(0);
        if l4_csum_field(proto) != Some(self.csum_offset) {
            return Err(VirtioError::CsumOffsetMismatch {
                proto,
                csum_offset: self.csum_offset,
            });
        }
        if tbits != 0 && level != Level::Inner {
            return Err(VirtioError::GsoMismatch(
                "UDP tunnel GSO: csum_start must be the inner L4 header",
            ));
        }
        meta.rx_needs_csum(self.csum_start, self.csum_offset)
            .map_err(|_| VirtioError::CsumStartNotL4(self.csum_start))
    }

    /// The header that describes `meta` for `frame`, in format `fmt`: a partial L4 checksum
    /// becomes `NEEDS_CSUM` at its location; verified (`Good`) checksums everywhere become
    /// `DATA_VALID`; the GSO request becomes `gso_type`/`gso_size`/`hdr_len` (up to the end of
    /// the innermost L4 header), with the UDP-tunnel bits and offsets for a VXLAN/Geneve GSO
    /// packet (which needs [`HdrFormat::V1HashTunnel`]). A partial IPv4 header checksum, GSO of
    /// GRE-tunnelled packets and a partial checksum with a partial outer one cannot be expressed.
    pub fn from_meta(
        meta: &OffloadMeta,
        frame: &[u8],
        fmt: HdrFormat,
    ) -> Result<VirtioNetHdr, VirtioError> {
        let mut h = VirtioNetHdr::default();
        if meta.status(Slot::OuterIp) == CsumStatus::Partial
            || meta.status(Slot::InnerIp) == CsumStatus::Partial
        {
            return Err(VirtioError::Unrepresentable(
                "virtio has no IPv4 header checksum offload",
            ));
        }
        if let Some(slot) = meta.partial_slot() {
            if slot == Slot::InnerL4 && meta.status(Slot::OuterL4) == CsumStatus::Partial {
                // Only with UDP tunnel GSO does virtio describe both (UDP_TUNNEL_CSUM).
                let udp = matches!(meta.tunnel(), Some(TunnelKind::Vxlan | TunnelKind::Geneve));
                if !(udp && meta.gso_type() != GsoType::None) {
                    return Err(VirtioError::Unrepresentable(
                        "two partial L4 checksums outside UDP tunnel GSO",
                    ));
                }
            }
            h.flags |= F_NEEDS_CSUM;
            h.csum_start = meta.csum_start();
            h.csum_offset = meta.csum_offset();
        } else {
            let tunnelled = meta.tunnel().is_some();
            let good = |s: Slot| meta.status(s) == CsumStatus::Good;
            let v4 = |l: Level| meta.l3_kind(l) == Some(L3Kind::Ipv4);
            let all_good = good(Slot::OuterL4)
                && (!v4(Level::Outer) || good(Slot::OuterIp))
                && (!tunnelled
                    || (good(Slot::InnerL4) && (!v4(Level::Inner) || good(Slot::InnerIp))));
            if all_good {
                h.flags |= F_DATA_VALID;
            }
        }
        let base = match meta.gso_type() {
            GsoType::None => GSO_NONE,
            GsoType::TcpV4 => GSO_TCPV4,
            GsoType::TcpV6 => GSO_TCPV6,
            GsoType::UdpL4 => GSO_UDP_L4,
            GsoType::Udp => GSO_UDP,
        };
        if base == GSO_NONE {
            return Ok(h);
        }
        h.gso_type = base | if meta.gso_ecn() { GSO_ECN } else { 0 };
        h.gso_size = meta.segment_size();
        let level = match meta.tunnel() {
            None => Level::Outer,
            Some(TunnelKind::Gre) => {
                return Err(VirtioError::Unrepresentable("virtio has no GRE GSO"))
            }
            Some(TunnelKind::Vxlan | TunnelKind::Geneve) => {
                if fmt != HdrFormat::V1HashTunnel {
                    return Err(VirtioError::Unrepresentable(
                        "UDP tunnel GSO needs the 24-byte header",
                    ));
                }
                h.gso_type |= match meta.l3_kind(Level::Outer) {
                    Some(L3Kind::Ipv6) => GSO_UDP_TUNNEL_IPV6,
                    _ => GSO_UDP_TUNNEL_IPV4,
                };
                let o = meta.offsets();
                // The outer UDP checksum is in use when its field is not zero.
                let outer_csum = o
                    .outer_l4
                    .is_some_and(|at| nonzero16(frame, usize::from(at) + 6));
                if outer_csum && !meta.csum_absent(Level::Outer) {
                    h.flags |= F_UDP_TUNNEL_CSUM;
                }
                h.outer_th_offset = o.outer_l4.unwrap_or(0);
                h.inner_nh_offset = o.inner_l3.unwrap_or(0);
                Level::Inner
            }
        };
        let end = l4_header_end(frame, meta, level)
            .ok_or(VirtioError::Unrepresentable("L4 header beyond the frame"))?;
        h.hdr_len = u16::try_from(end)
            .map_err(|_| VirtioError::Unrepresentable("headers longer than 65535 bytes"))?;
        Ok(h)
    }
}

/// End of the L4 header of `level` (TCP by its data offset, UDP 8 bytes), within the frame.
fn l4_header_end(frame: &[u8], meta: &OffloadMeta, level: Level) -> Option<usize> {
    let at = usize::from(meta.offsets().l4(level)?);
    let hl = match meta.l4_proto(level)? {
        ip_proto::TCP => usize::from(frame.get(at + 12)? >> 4) * 4,
        ip_proto::UDP => 8,
        _ => return None,
    };
    let end = at + hl;
    (end <= frame.len() && hl > 0).then_some(end)
}
