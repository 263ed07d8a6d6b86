//! Every merge and flush rule, once, each a small function named after what it checks.

use super::*;

/// Largest IP packet a merged frame may carry: frame length less the Ethernet header.
pub(super) const MAX_IP_LEN: usize = 65_535;

/// Most datagrams merged into one UDP packet (Linux `UDP_GRO_CNT_MAX`).
pub(super) const UDP_GRO_CNT_MAX: u16 = 64;

pub(super) const TCP_FIN: u8 = 0x01;

pub(super) const TCP_SYN: u8 = 0x02;

pub(super) const TCP_RST: u8 = 0x04;

pub(super) const TCP_PSH: u8 = 0x08;

pub(super) const TCP_URG: u8 = 0x20;

pub(super) const TCP_CWR: u8 = 0x80;

/// Flags that finish a packet (Linux `out_check_final`).
pub(super) const TCP_FINISHING: u8 = TCP_URG | TCP_PSH | TCP_RST | TCP_SYN | TCP_FIN;

/// What to do with a frame whose flow holds a packet.
pub(super) enum Decision {
    Join { finish: Option<FlushReason> },
    Refuse(FlushReason),
}

/// Whether a frame with no held packet to join may be held (Linux: not flushed on its own).
#[inline]
pub(super) fn may_start(info: &Info) -> bool {
    match info.proto {
        Some(Proto::Tcp) => info.payload_len() >= 1 && info.flags & (TCP_FINISHING | TCP_CWR) == 0,
        Some(Proto::Udp) => true,
        None => false,
    }
}

/// Whether a segment joining on a fast path has a good TCP checksum (`false`: `Partial`, still
/// to be filled in), verifying it in software when it is `Unknown` and `verify` is set (its IP
/// header at `ip.0`, IPv6 when `ip.1`; TCP at `l4`, the frame ending at `end`). `None`: the
/// fast path refuses it (a bad checksum, or one it may not verify).
#[inline(always)]
pub(super) fn joining_csum(
    status: CsumStatus,
    verify: bool,
    frame: &[u8],
    ip: (usize, bool),
    l4: usize,
    end: usize,
) -> Option<bool> {
    match status {
        CsumStatus::Good => Some(true),
        CsumStatus::Partial => Some(false),
        CsumStatus::Bad => None,
        CsumStatus::Unknown if verify => {
            let pseudo = pseudo_at(frame, ip.0, ip.1, ip_proto::TCP, end.checked_sub(l4)?)?;
            (combine(pseudo, sum(frame.get(l4..)?)) == 0xffff).then_some(true)
        }
        CsumStatus::Unknown => None,
    }
}

/// Why a TCP segment that joined ends its packet: a finishing flag (PSH, FIN, …), or shorter
/// than the packet's segment size.
#[inline(always)]
pub(super) fn join_finish(flags: u8, len: usize, mss: usize) -> Option<FlushReason> {
    if flags & TCP_FINISHING != 0 {
        Some(FlushReason::Flags)
    } else if len < mss {
        Some(FlushReason::Size)
    } else {
        None
    }
}

/// Frame-level conditions for holding a packet (beyond the flow key): Linux's IP-layer refusals.
pub(super) fn eligible(frame: &[u8], layout: &Layout, info: &Info) -> bool {
    let stacks = [Some(&layout.outer), layout.inner.as_ref()];
    for h in stacks.iter().take(info.levels) {
        let Some(h) = h else { return false };
        let (Some(l3), Some(kind)) = (h.l3, h.l3_kind) else {
            return false;
        };
        if h.is_fragment {
            return false;
        }
        if kind == L3Kind::Ipv4 && frame.get(l3) != Some(&0x45) {
            return false; // IP options (or a bad version/IHL)
        }
        // Padding after the IP packet: Linux flushes (length mismatch).
        if h.l3_end != Some(frame.len()) {
            return false;
        }
        // An IPv6 payload length of 0 (a jumbogram, or a lie) does not match the packet's
        // length either: Linux's ipv6_gro_receive flushes it, and merging would rewrite the field.
        if kind == L3Kind::Ipv6 && be16(frame, l3 + 4) == Some(0) {
            return false;
        }
    }
    // IPv6 extension headers: only hop-by-hop, routing and destination options are skipped by
    // Linux's GRO; a fragment or AH header stops it.
    for &(layer, _) in layout.layers.as_slice() {
        if let Layer::Ipv6Ext(p) = layer {
            if !matches!(p, ip_proto::HOPOPTS | ip_proto::ROUTING | ip_proto::DSTOPTS) {
                return false;
            }
        }
    }
    if let Some(t) = info.tunnel {
        match t.kind {
            TunnelKind::Vxlan => {}
            TunnelKind::Geneve => {
                // Version 0, no OAM (Linux geneve_gro_receive).
                let (Some(b0), Some(b1)) = (frame.get(t.offset), frame.get(t.offset + 1)) else {
                    return false;
                };
                if b0 >> 6 != 0 || b1 & 0x80 != 0 {
                    return false;
                }
            }
            TunnelKind::Gre => {
                // Only the key bit; checksum, routing, sequence and version refused.
                let (Some(b0), Some(b1)) = (frame.get(t.offset), frame.get(t.offset + 1)) else {
                    return false;
                };
                if b0 & !0x20 != 0 || *b1 != 0 {
                    return false;
                }
            }
        }
        if t.kind != TunnelKind::Gre {
            // The outer UDP length must cover exactly the rest of the frame.
            let ulen = be16(frame, t.outer_l4 + 4).map(usize::from);
            if ulen != Some(frame.len().saturating_sub(t.outer_l4)) {
                return false;
            }
        }
    }
    match info.proto {
        Some(Proto::Udp) => {
            // Non-zero checksum, length exactly the datagram, some payload.
            let ulen = usize::from(info.udp_len);
            be16(frame, info.l4 + 6) != Some(0)
                && ulen > 8
                && ulen == frame.len().saturating_sub(info.l4)
        }
        Some(Proto::Tcp) => true,
        None => false,
    }
}

pub(super) fn same_flow(a: &[u8], ai: &Info, b: &[u8], bi: &Info) -> bool {
    shape(ai) == shape(bi)
        && key_walk(
            bi,
            |x, y| matches!((a.get(x..y), b.get(x..y)), (Some(p), Some(q)) if p == q),
            |w| matches!((be32(a, w), be32(b, w)), (Some(p), Some(q)) if (p ^ q) & 0xf00f_ffff == 0),
        )
}

/// Whether the TCP option bytes of two headers are identical (the data offsets were compared as
/// part of the 4th word already).
pub(super) fn same_options(a: &[u8], al4: usize, b: &[u8], bl4: usize, word3: u32) -> bool {
    let thlen = ((word3 >> 28) as usize) * 4;
    if thlen <= 20 {
        return true;
    }
    match (a.get(al4 + 20..al4 + thlen), b.get(bl4 + 20..bl4 + thlen)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

impl GroEngine {
    pub(super) fn decide(&mut self, i: usize, frame: &[u8], info: &Info) -> Option<Decision> {
        let h = self.held_mut(i)?;
        let len = info.payload_len();
        // IP fields of every level.
        let mut ip_flush = false;
        for lvl in 0..info.levels {
            let (a, b) = (h.info.ip.get(lvl)?, info.ip.get(lvl)?);
            if a.ttl != b.ttl || a.tos != b.tos || a.df != b.df {
                ip_flush = true;
                continue;
            }
            if !a.v6 {
                let offset = b.id.wrapping_sub(a.id);
                let fixed = h.fixed_id.get_mut(lvl)?;
                if h.count == 1 && offset == 0 {
                    *fixed = true;
                }
                let expect = if *fixed { 0 } else { h.count };
                if offset != expect {
                    ip_flush = true;
                }
            }
        }
        let too_big = h.len.saturating_sub(ETH_HLEN) + len > MAX_IP_LEN;
        match info.proto? {
            Proto::Tcp => {
                let mask = u32::from(TCP_CWR | TCP_FIN | TCP_PSH) << 16;
                let mut flush = info.flags & TCP_CWR != 0
                    || (info.word3 ^ h.info.word3) & !mask != 0
                    || info.ack != h.info.ack
                    || ip_flush
                    || !same_options(&h.buf, h.info.l4, frame, info.l4, info.word3)
                    || len == 0
                    || len > h.mss
                    || info.seq != h.next_seq;
                if flush {
                    return Some(Decision::Refuse(FlushReason::Mismatch));
                }
                flush = too_big;
                if flush {
                    return Some(Decision::Refuse(FlushReason::Size));
                }
                let finish = if info.flags & TCP_FINISHING != 0 {
                    Some(FlushReason::Flags)
                } else if len < h.mss {
                    Some(FlushReason::Size)
                } else {
                    None
                };
                Some(Decision::Join { finish })
            }
            Proto::Udp => {
                if ip_flush {
                    return Some(Decision::Refuse(FlushReason::Mismatch));
                }
                if info.udp_len > h.info.udp_len || too_big {
                    return Some(Decision::Refuse(FlushReason::Size));
                }
                let finish = (info.udp_len != h.info.udp_len || h.count + 1 >= UDP_GRO_CNT_MAX)
                    .then_some(FlushReason::Size);
                Some(Decision::Join { finish })
            }
        }
    }
}
