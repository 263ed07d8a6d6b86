//! The plan: everything about the super-packet that is the same for every segment, computed
//! once (`Plan::new`), from the request and the parser's layout.

use super::*;
use core::ops::Range;
use sluice_checksum::{pseudo, Accumulator};
use sluice_packet::GsoType;
use sluice_wire::bytes::{read_array, read_u16, read_u32, OutOfRange};
use sluice_wire::{ip_proto, Headers, L3Kind, Layer, Layout, Tunnel, TunnelKind};

// ---------------------------------------------------------------------------------------------
// The plan: everything about the super-packet that is the same for every segment, computed once.

/// One IP header to fix per segment.
#[derive(Debug, Clone, Copy)]
pub(super) struct IpFix {
    pub(super) off: usize,
    pub(super) v4: bool,
    pub(super) id: u16,
    /// IPv4: the flags/fragment-offset word of the input.
    pub(super) frag: u16,
    /// IPv4: sum of the header with total length, ID, flags/offset and checksum zeroed, so a
    /// segment's header checksum is O(1).
    pub(super) hsum: u16,
    /// Pseudo-header sum (addresses and protocol, length 0) for the L4 this level carries.
    pub(super) ph: u16,
}

/// The tunnel header that covers the inner packet.
#[derive(Debug, Clone, Copy)]
pub(super) enum TunnelFix {
    /// Outer UDP (VXLAN / Geneve) at `off`; `csum` whether its checksum is computed.
    Udp { off: usize, csum: bool },
    /// GRE at `off`; checksum field at `csum` when the C bit is set.
    Gre { csum: Option<usize>, off: usize },
}

/// How a tunnel checksum covering the inner packet is summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cover {
    /// Every byte.
    Full,
    /// By cancellation of the inner L4 region.
    Lco,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum L4Fix {
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
pub(super) fn header_short(at: usize, len: usize, buf_len: usize) -> OutOfRange {
    OutOfRange { at, len, buf_len }
}

/// Sum of `b[range]` with the given byte offsets (relative to the range) zeroed.
pub(super) fn sum_masked(b: &[u8], range: Range<usize>, zero: &[usize]) -> u16 {
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

pub(super) fn fold_add(parts: &[u32]) -> u16 {
    sluice_checksum::fold(parts.iter().map(|&p| u64::from(p)).sum())
}

pub(super) const TEMPLATE_LEN: usize = 128;

/// The untunnelled TCP / USO fast path's constants.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fast {
    /// The header prefix, zero-padded, when it fits.
    pub(super) template: [u8; TEMPLATE_LEN],
    pub(super) tcp: bool,
    pub(super) l4: usize,
    pub(super) seq: u32,
    pub(super) flags: u8,
    pub(super) hsum: u16,
}

/// One segment's L4 checksum inputs.
pub(super) struct L4Sum {
    pub(super) off: usize,
    /// Offset of the checksum field in the L4 header.
    pub(super) field: usize,
    pub(super) udp: bool,
    /// Sum of the L4 header's bytes with the checksum field zeroed.
    pub(super) fields: u16,
}

/// UFO specifics.
#[derive(Debug, Clone, Copy)]
pub(super) struct UfoFix {
    /// The UDP header with its final length and checksum.
    pub(super) udp: [u8; 8],
    /// IPv6: offset where the Fragment header is inserted, offset of the next-header byte to
    /// patch to 44, the original next-header value, and the identification.
    pub(super) v6: Option<(usize, usize, u8, u32)>,
}

#[derive(Debug, Clone)]
pub(super) struct Plan {
    /// Header prefix copied into every segment: `frame[..hdr_len]`.
    pub(super) hdr_len: usize,
    /// The bytes that are split (for UFO: the UDP payload; the UDP header is emitted by us).
    pub(super) payload: Range<usize>,
    /// Bytes of the split unit per segment (for UFO counted over UDP header + payload).
    pub(super) seg: usize,
    pub(super) nseg: usize,
    /// Outer (or only) IP, inner IP.
    pub(super) ip: [Option<IpFix>; 2],
    pub(super) tunnel: Option<TunnelFix>,
    /// Set for untunnelled TCP / USO: the fast path.
    pub(super) fast: Option<Fast>,
    pub(super) cover: Cover,
    /// Innermost L4 (None for UFO).
    pub(super) l4: Option<L4Fix>,
    /// Innermost IP index in `ip`.
    pub(super) inner_ip: usize,
    pub(super) ufo: Option<UfoFix>,
    pub(super) l4_csum: CsumMode,
    pub(super) ip_csum: CsumMode,
    pub(super) fixed_id: bool,
}

/// Pseudo-header sum of the IP header at `ip` for an L4 length `len`.
pub(super) fn pseudo_sum(b: &[u8], ip: &IpFix, proto: u8, len: usize) -> u16 {
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
    pub(super) fn new(frame: &[u8], layout: &Layout, params: &GsoParams) -> Result<Plan, GsoError> {
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
    pub(super) fn check_first_segment(&self, params: &GsoParams) -> Result<(), GsoError> {
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
}

/// A GSO request at all: a type and a non-zero segment size.
pub(super) fn check_request(params: &GsoParams) -> Result<(), GsoError> {
    if params.gso_type == GsoType::None {
        return Err(GsoError::NotGso);
    }
    if params.segment_size == 0 {
        return Err(GsoError::ZeroSegmentSize);
    }
    if params.ecn && params.gso_type == GsoType::UdpL4 {
        return Err(GsoError::EcnWithoutTcp);
    }
    Ok(())
}

/// The innermost header stack, the one that is segmented, with the fields every plan needs.
pub(super) struct Innermost<'a> {
    pub(super) h: &'a Headers,
    pub(super) l3: usize,
    pub(super) l3_end: usize,
    pub(super) kind: L3Kind,
    /// Its L4 protocol.
    pub(super) proto: u8,
    pub(super) tunnelled: bool,
}

impl<'a> Innermost<'a> {
    /// The stack GSO segments (inside the tunnel, if any), checked to be a whole, unfragmented
    /// IP packet that ends where the outer one does.
    pub(super) fn find(
        frame: &[u8],
        layout: &'a Layout,
        mismatch: GsoError,
    ) -> Result<Self, GsoError> {
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
    pub(super) fn new(
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
pub(super) fn plan_tunnel(
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
pub(super) struct L4Plan {
    pub(super) hdr_len: usize,
    pub(super) payload: Range<usize>,
    pub(super) l4: Option<L4Fix>,
    /// Bytes of the split unit before the payload (8 for UFO: the UDP header).
    pub(super) unit: usize,
    pub(super) ufo: Option<UfoFix>,
}

impl L4Plan {
    /// A UFO datagram that fits one fragment is not fragmented (the kernel passes it through
    /// with its checksum filled): it is segmented as a single USO datagram.
    pub(super) fn unfragmented_if_one_fragment(
        self,
        frame: &[u8],
        inner: &Innermost,
        seg: usize,
    ) -> Self {
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
    pub(super) fn udp(frame: &[u8], off: usize) -> L4Fix {
        let hsum = sum_masked(frame, off..off + 8, &[4, 5, 6, 7]);
        L4Fix::Udp { off, hsum }
    }
}

/// TCP segmentation (TSO): the TCP header must match the requested IP version.
pub(super) fn plan_tcp(
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
pub(super) fn plan_uso(
    frame: &[u8],
    inner: &Innermost,
    mismatch: GsoError,
) -> Result<L4Plan, GsoError> {
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
pub(super) fn plan_ufo(
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
    pub(super) fn new(frame: &[u8], hdr_len: usize, l4: L4Fix) -> Fast {
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
pub(super) fn ipv6_unfragmentable(
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
pub(super) fn default_frag_id(frame: &[u8], l3: usize, len: usize) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in frame.get(l3 + 8..l3 + 40).unwrap_or(&[]) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h ^ len as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_refused_with_uso_only() {
        for (t, ok) in [
            (GsoType::TcpV4, true),
            (GsoType::TcpV6, true),
            (GsoType::UdpL4, false),
            (GsoType::Udp, true),
        ] {
            let mut p = GsoParams::new(t, 1400);
            p.ecn = true;
            let want = if ok {
                Ok(())
            } else {
                Err(GsoError::EcnWithoutTcp)
            };
            assert_eq!(check_request(&p), want, "{t:?}");
            p.ecn = false;
            assert_eq!(check_request(&p), Ok(()), "{t:?}");
        }
    }
}
