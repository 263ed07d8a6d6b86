//! Flow classification: the merge fields of a frame ([`Info`]), read by the parser or at fixed
//! offsets for a plain frame, the flow hash and the flow key walk; small frame readers.

use super::rules::{ip_fills_frame, ipv4_is_fragment, ipv4_without_options};
use super::GroEngine;
use sluice_packet::Level;
use sluice_wire::bytes::{read_u16, read_u32};
use sluice_wire::{ip_proto, Headers, L3Kind, Layout, TunnelKind};

/// Length of the outer Ethernet header counted out of the 64 KiB limit (Linux `p->len`).
pub(super) const ETH_HLEN: usize = 14;

/// L4 of the merged protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Proto {
    Tcp,
    Udp,
}

/// One IP header's fields that must agree for a merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct IpFields {
    pub(super) v6: bool,
    /// IPv4 TTL / IPv6 hop limit.
    pub(super) ttl: u8,
    /// IPv4 TOS / IPv6 traffic class.
    pub(super) tos: u8,
    pub(super) df: bool,
    pub(super) id: u16,
}

/// Everything about one received frame that the merge rules use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Info {
    pub(super) proto: Option<Proto>,
    /// IP header offsets, outer then inner (`ip[1]` only in a tunnel).
    pub(super) l3: [usize; 2],
    pub(super) ip: [IpFields; 2],
    pub(super) levels: usize,
    /// Tunnel: (kind, outer L4 offset, tunnel header offset, header length, inner L2).
    pub(super) tunnel: Option<TunnelInfo>,
    /// Innermost L4 header and payload offsets, and the frame end.
    pub(super) l4: usize,
    pub(super) payload: usize,
    pub(super) end: usize,
    pub(super) seq: u32,
    pub(super) ack: u32,
    /// TCP 4th word (data offset, flags, window).
    pub(super) word3: u32,
    pub(super) flags: u8,
    pub(super) udp_len: u16,
    pub(super) hash: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TunnelInfo {
    pub(super) kind: TunnelKind,
    pub(super) outer_l4: usize,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) inner_l2: Option<usize>,
    pub(super) outer_csum: bool,
}

impl Info {
    /// Whether the frame is *plain* ([`plain_tcp`]'s shape: untagged Ethernet, IPv4 without
    /// options or IPv6 without extension headers, TCP), so the fast lanes may take its packet.
    #[inline(always)]
    pub(super) fn is_plain(&self) -> bool {
        self.proto == Some(Proto::Tcp)
            && self.levels == 1
            && self.tunnel.is_none()
            && self.l3[0] == ETH_HLEN
            && self.l4 == if self.ip[0].v6 { 54 } else { 34 }
    }

    pub(super) fn payload_len(&self) -> usize {
        self.end.saturating_sub(self.payload)
    }

    pub(super) fn innermost(&self) -> usize {
        self.levels.saturating_sub(1)
    }
}

/// The 64-bit little-endian word at `off` (bytes past the frame read as zero).
#[inline(always)]
pub(super) fn load_word(frame: &[u8], off: usize) -> u64 {
    match frame.get(off..off + 8) {
        Some(b) => {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            u64::from_le_bytes(w)
        }
        None => {
            let mut w = [0u8; 8];
            if let Some(b) = frame.get(off..) {
                let n = b.len().min(8);
                if let (Some(d), Some(s)) = (w.get_mut(..n), b.get(..n)) {
                    d.copy_from_slice(s);
                }
            }
            u64::from_le_bytes(w)
        }
    }
}

/// The offsets of a plain TCP/IPv4 or TCP/IPv6 frame (as `OffloadMeta::from_layout` gives
/// them; a unit test checks).
#[inline(always)]
pub(super) const fn plain_offsets(v6: bool) -> sluice_packet::Offsets {
    sluice_packet::Offsets {
        outer_l2: Some(0),
        outer_l3: Some(ETH_HLEN as u16),
        outer_l4: Some(if v6 { 54 } else { 34 }),
        inner_l2: None,
        inner_l3: None,
        inner_l4: None,
    }
}

/// Which plain shape ([`plain_tcp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plain {
    V4,
    V6,
}

/// The layout of a plain TCP frame of either IP version, for its fresh metadata.
pub(super) fn plain_layout(kind: Plain) -> Layout {
    let (l3_kind, l4) = match kind {
        Plain::V4 => (L3Kind::Ipv4, 34),
        Plain::V6 => (L3Kind::Ipv6, 54),
    };
    let mut layout = Layout::default();
    layout.outer.l2 = Some(0);
    layout.outer.l3 = Some(ETH_HLEN);
    layout.outer.l3_kind = Some(l3_kind);
    layout.outer.l4 = Some(l4);
    layout.outer.l4_proto = Some(ip_proto::TCP);
    layout
}

/// The parser's [`Headers`] of a plain frame, for software checksum verification.
pub(super) fn plain_headers(info: &Info, v6: bool) -> Headers {
    Headers {
        l2: Some(0),
        ethertype: if v6 {
            sluice_wire::ethertype::IPV6
        } else {
            sluice_wire::ethertype::IPV4
        },
        l3: Some(ETH_HLEN),
        l3_kind: Some(if v6 { L3Kind::Ipv6 } else { L3Kind::Ipv4 }),
        l4: Some(info.l4),
        l4_proto: Some(ip_proto::TCP),
        payload: Some(info.payload),
        l3_end: Some(info.end),
        ..Headers::default()
    }
}

/// [`plain_tcp`] into `out` (left unspecified when `false`).
#[inline(always)]
pub(super) fn plain_tcp_into(frame: &[u8], hash: Option<u64>, out: &mut Info) -> bool {
    match plain_tcp(frame, hash) {
        Some(i) => {
            *out = i;
            true
        }
        None => false,
    }
}

/// The merge fields of a *plain* TCP segment, read at fixed offsets without the full parser:
/// an untagged Ethernet header, IPv4 without options and not a fragment (or IPv6 whose next
/// header is TCP, payload length non-zero), a TCP header that fits, and the IP packet ending
/// exactly at the frame's end. Exactly the frames for which `sluice_wire::parse` + `classify`
/// give this same [`Info`] and [`eligible`](super::rules::eligible) holds (see the `plain_matches_parser` test);
/// anything else returns `None` and takes the general path.
/// `hash`: the frame's flow hash when already computed ([`plain_hash`]).
#[inline(always)]
pub(super) fn plain_tcp(frame: &[u8], hash: Option<u64>) -> Option<Info> {
    let end = frame.len();
    let b: &[u8; 54] = frame.get(..54)?.try_into().ok()?;
    let (l4, ip, t, hash) = match u16::from_be_bytes([b[12], b[13]]) {
        sluice_wire::ethertype::IPV4 => {
            let frag = u16::from_be_bytes([b[20], b[21]]);
            let total = u16::from_be_bytes([b[16], b[17]]);
            if !ipv4_without_options(b[14])
                || b[23] != ip_proto::TCP
                || ipv4_is_fragment(frag)
                || !ip_fills_frame(ETH_HLEN, false, total, end)
            {
                return None;
            }
            let ip = IpFields {
                v6: false,
                ttl: b[22],
                tos: b[15],
                df: frag & 0x4000 != 0,
                id: u16::from_be_bytes([b[18], b[19]]),
            };
            let t: &[u8; 20] = b[34..54].try_into().ok()?;
            (34, ip, t, hash.unwrap_or_else(|| plain_hash_v4(b)))
        }
        sluice_wire::ethertype::IPV6 => {
            let b: &[u8; 74] = frame.get(..74)?.try_into().ok()?;
            let w = u32::from_be_bytes([b[14], b[15], b[16], b[17]]);
            let plen = u16::from_be_bytes([b[18], b[19]]);
            if w >> 28 != 6
                || b[20] != ip_proto::TCP
                || plen == 0
                || !ip_fills_frame(ETH_HLEN, true, plen, end)
            {
                return None;
            }
            let ip = IpFields {
                v6: true,
                ttl: b[21],
                tos: ((w >> 20) & 0xff) as u8,
                df: false,
                id: 0,
            };
            let t: &[u8; 20] = b[54..74].try_into().ok()?;
            (54, ip, t, hash.unwrap_or_else(|| plain_hash_v6(b)))
        }
        _ => return None,
    };
    let hl = usize::from(t[12] >> 4) * 4;
    if hl < 20 || l4 + hl > end {
        return None;
    }
    let word = |k: usize| be32_in(t, k);
    Some(Info {
        proto: Some(Proto::Tcp),
        l3: [ETH_HLEN, 0],
        ip: [ip, IpFields::default()],
        levels: 1,
        tunnel: None,
        l4,
        payload: l4 + hl,
        end,
        seq: word(4),
        ack: word(8),
        word3: word(12),
        flags: t[13],
        udp_len: 0,
        hash,
    })
}

/// [`flow_hash`] of a plain TCP/IPv4 frame (the `plain_matches_parser` test checks they agree).
#[inline(always)]
pub(super) fn plain_hash_v4(b: &[u8; 54]) -> u64 {
    let ports = u32::from_be_bytes([b[34], b[35], b[36], b[37]]);
    let addrs = u64::from_le_bytes([b[26], b[27], b[28], b[29], b[30], b[31], b[32], b[33]]);
    mix(mix(plain_structure(34, false), u64::from(ports)), addrs)
}

/// [`flow_hash`] of a plain TCP/IPv6 frame.
#[inline(always)]
pub(super) fn plain_hash_v6(b: &[u8; 74]) -> u64 {
    let ports = u32::from_be_bytes([b[54], b[55], b[56], b[57]]);
    let mut hash = mix(plain_structure(54, true), u64::from(ports));
    for c in b[22..54].chunks_exact(8) {
        hash = mix(hash, u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
    }
    hash
}

/// The flow hash of a frame that looks plain at a glance (EtherType, IPv4 version/IHL and
/// protocol, or IPv6 next header), for [`GroEngine::quick_join`]'s lookup; the header comparison
/// that follows checks the rest.
#[inline(always)]
pub(super) fn plain_hash(frame: &[u8]) -> Option<u64> {
    let b: &[u8; 54] = frame.get(..54)?.try_into().ok()?;
    match u16::from_be_bytes([b[12], b[13]]) {
        sluice_wire::ethertype::IPV4 if ipv4_without_options(b[14]) && b[23] == ip_proto::TCP => {
            Some(plain_hash_v4(b))
        }
        sluice_wire::ethertype::IPV6 if b[20] == ip_proto::TCP => {
            Some(plain_hash_v6(frame.get(..74)?.try_into().ok()?))
        }
        _ => None,
    }
}

/// The first input of [`flow_hash`]: the structure of the frame.
#[inline(always)]
pub(super) fn plain_structure(l4: usize, v6: bool) -> u64 {
    structure_word(l4, 1, false, v6)
}

#[inline(always)]
pub(super) fn structure_word(l4: usize, levels: usize, udp: bool, v6: bool) -> u64 {
    (l4 as u64) << 16 | (levels as u64) << 8 | u64::from(udp) << 1 | u64::from(v6)
}

/// The big-endian 32-bit word at `k` of `t` (0 past its end; with a constant `k` inside a
/// fixed-size array the check folds away).
#[inline(always)]
pub(super) fn be32_in(t: &[u8], k: usize) -> u32 {
    t.get(k..)
        .and_then(|s| s.first_chunk::<4>())
        .map_or(0, |b| u32::from_be_bytes(*b))
}

/// [`be32_in`] read little-endian (as loaded on x86; see [`SimpleFlow::deferred_le`](super::burst::SimpleFlow::deferred_le)).
#[inline(always)]
pub(super) fn le32_in(t: &[u8], k: usize) -> u32 {
    t.get(k..)
        .and_then(|s| s.first_chunk::<4>())
        .map_or(0, |b| u32::from_le_bytes(*b))
}

pub(super) fn ip_fields(frame: &[u8], h: &Headers) -> Option<IpFields> {
    let l3 = h.l3?;
    Some(match h.l3_kind? {
        L3Kind::Ipv4 => IpFields {
            v6: false,
            ttl: *frame.get(l3 + 8)?,
            tos: *frame.get(l3 + 1)?,
            df: frame.get(l3 + 6)? & 0x40 != 0,
            id: read_u16(frame, l3 + 4)?,
        },
        L3Kind::Ipv6 => {
            let w = read_u32(frame, l3)?;
            IpFields {
                v6: true,
                ttl: *frame.get(l3 + 7)?,
                tos: ((w >> 20) & 0xff) as u8,
                df: false,
                id: 0,
            }
        }
    })
}

/// The fixed hashing step (FxHash-like); flows are few, so quality matters less than speed.
#[inline(always)]
pub(super) fn mix(h: u64, v: u64) -> u64 {
    (h.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95)
}

/// Walks the parts of a frame that define its flow: byte ranges compared exactly (`range`), and
/// IPv6 version words compared under the mask `0xf00fffff` (`v6_word`: version and flow label,
/// not the traffic class). Stops, returning `false`, as soon as a callback does.
#[inline(always)]
pub(super) fn key_walk(
    info: &Info,
    mut range: impl FnMut(usize, usize) -> bool,
    mut v6_word: impl FnMut(usize) -> bool,
) -> bool {
    // Outer Ethernet header with every VLAN tag and the final EtherType.
    if !range(0, info.l3[0]) {
        return false;
    }
    for lvl in 0..info.levels.min(2) {
        let (l3, ip) = if lvl == 0 {
            (info.l3[0], info.ip[0])
        } else {
            (info.l3[1], info.ip[1])
        };
        // Where this IP header's extension headers end.
        let ext_end = match (lvl + 1 == info.levels, info.tunnel) {
            (true, _) => info.l4,
            (false, Some(t)) => t.outer_l4,
            (false, None) => return false,
        };
        if lvl == 1 {
            let Some(t) = info.tunnel else { return false };
            if t.kind != TunnelKind::Gre && !range(t.outer_l4, t.outer_l4 + 4) {
                return false; // outer UDP ports
            }
            if !range(t.offset, t.offset + t.len) {
                return false; // VXLAN/Geneve/GRE header
            }
            if let Some(l2) = t.inner_l2 {
                if !range(l2, l3) {
                    return false; // inner Ethernet
                }
            }
        }
        let ok = if ip.v6 {
            v6_word(l3)
                && range(l3 + 6, l3 + 7) // next header
                && range(l3 + 8, l3 + 40) // addresses
                && range(l3 + 40, ext_end) // extension headers
        } else {
            range(l3 + 9, l3 + 10) && range(l3 + 12, l3 + 20) // protocol, addresses
        };
        if !ok {
            return false;
        }
    }
    range(info.l4, info.l4 + 4) // ports
}

/// Structure that must be equal for two frames to be compared byte by byte.
pub(super) fn shape(info: &Info) -> [u64; 4] {
    let t = info.tunnel.map_or(0, |t| {
        (t.offset as u64) << 32 | (t.len as u64) << 8 | u64::from(t.outer_csum)
    });
    [
        (info.l3[0] as u64) << 32 | info.l3[1] as u64,
        (info.l4 as u64) << 8 | info.levels as u64 | u64::from(info.proto == Some(Proto::Udp)) << 4,
        t,
        info.tunnel
            .and_then(|t| t.inner_l2)
            .map_or(0, |x| x as u64 + 1),
    ]
}

/// The flow hash: a function of bytes every frame of a flow shares (the structure, the innermost
/// ports and IP addresses), so equal flows hash equally; [`same_flow`](super::rules::same_flow) compares the whole key.
/// Flows that differ only elsewhere (VLAN tags, outer headers) collide, which costs a compare.
#[inline(always)]
pub(super) fn flow_hash(frame: &[u8], info: &Info) -> Option<u64> {
    let lvl = info.innermost();
    let l3 = *info.l3.get(lvl)?;
    let v6 = info.ip.get(lvl)?.v6;
    let structure = structure_word(info.l4, info.levels, info.proto == Some(Proto::Udp), v6);
    let mut h = mix(structure, u64::from(read_u32(frame, info.l4)?));
    if v6 {
        // Both addresses: 32 bytes from l3 + 8.
        let a = frame.get(l3 + 8..l3 + 40)?;
        for k in 0..4 {
            h = mix(h, load_word(a, k * 8));
        }
    } else {
        frame.get(l3 + 12..l3 + 20)?;
        h = mix(h, load_word(frame, l3 + 12));
    }
    Some(h)
}

pub(super) fn t_outer_l4(info: &Info) -> Option<usize> {
    info.tunnel.map(|t| t.outer_l4)
}

pub(super) const fn level_of(lvl: usize) -> Level {
    if lvl == 0 {
        Level::Outer
    } else {
        Level::Inner
    }
}

impl GroEngine {
    /// Parses a frame and extracts the merge fields; `None` when it is no TCP/UDP frame this
    /// engine merges.
    pub(super) fn classify(&self, frame: &[u8], layout: &Layout) -> Option<Info> {
        let mut info = Info {
            end: frame.len(),
            ..Info::default()
        };
        let outer = &layout.outer;
        info.l3[0] = outer.l3?;
        info.ip[0] = ip_fields(frame, outer)?;
        info.levels = 1;
        let inner = match (layout.tunnel, layout.inner.as_ref()) {
            (Some(t), Some(h)) => {
                let outer_l4 = outer.l4?;
                let outer_csum = match t.kind {
                    TunnelKind::Vxlan | TunnelKind::Geneve => read_u16(frame, outer_l4 + 6)? != 0,
                    TunnelKind::Gre => false,
                };
                info.tunnel = Some(TunnelInfo {
                    kind: t.kind,
                    outer_l4,
                    offset: t.offset,
                    len: t.len,
                    inner_l2: h.l2,
                    outer_csum,
                });
                info.l3[1] = h.l3?;
                info.ip[1] = ip_fields(frame, h)?;
                info.levels = 2;
                h
            }
            _ => outer,
        };
        let l4 = inner.l4?;
        info.l4 = l4;
        info.payload = inner.payload?;
        match inner.l4_proto? {
            ip_proto::TCP if self.cfg.tcp => {
                info.proto = Some(Proto::Tcp);
                info.seq = read_u32(frame, l4 + 4)?;
                info.ack = read_u32(frame, l4 + 8)?;
                info.word3 = read_u32(frame, l4 + 12)?;
                info.flags = *frame.get(l4 + 13)?;
            }
            ip_proto::UDP if self.cfg.udp && info.tunnel.is_none() => {
                info.proto = Some(Proto::Udp);
                info.udp_len = read_u16(frame, l4 + 4)?;
            }
            _ => return None,
        }
        info.hash = flow_hash(frame, &info)?;
        Some(info)
    }
}
