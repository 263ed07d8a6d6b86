//! Finishing a held packet: lengths, IPv4 header checksums, L4 checksums, the TCP flags and the
//! GSO metadata of a merged packet, then the packet to the output (queue or burst).

use super::burst::{BurstPacket, NO_PIECE};
use super::csum::{fold64, l4_pseudo, pseudo_at, small_sum, words_sum};
use super::flow::{level_of, t_outer_l4, Info, Proto, ETH_HLEN};
use super::table::Held;
use super::{FlushReason, GroEngine, GroPacket};
use sluice_checksum::{combine, sum};
use sluice_packet::{GsoType, OffloadMeta, Slot};
use sluice_wire::bytes::{read_u16, write_u16};
use sluice_wire::{ip_proto, TunnelKind};

/// Fixes a merged packet's lengths and checksums and sets its GSO request.
pub(super) fn finalize(h: &mut Held) -> Option<OffloadMeta> {
    let payload_sum = h.payload_sum_total();
    if h.plain && h.all_good {
        return finalize_plain(h, payload_sum);
    }
    let (len, all_good, mss, cwr) = (h.len, h.all_good, h.mss, h.cwr);
    // Disjoint borrows: no copy of `info`. Every sum below is taken from the header bytes as
    // they are and corrected arithmetically for the fields rewritten, before any is written: a
    // load overlapping a just-written 16-bit field stalls on store forwarding.
    let Held {
        info, buf, meta, ..
    } = h;
    let info: &Info = info;
    // The metadata changes on a copy, written back once (see `complete`).
    let mut m = *meta;
    let meta = &mut m;
    // IP lengths and IPv4 header checksums, every level.
    for lvl in 0..info.levels {
        let l3 = *info.l3.get(lvl)?;
        let ip = info.ip.get(lvl)?;
        if ip.v6 {
            write_u16(buf, l3 + 4, u16::try_from(len.checked_sub(l3 + 40)?).ok()?).ok()?;
        } else {
            let new_len = u16::try_from(len.checked_sub(l3)?).ok()?;
            let hdr = buf.get(l3..l3 + 20)?;
            // The header's sum with the length replaced and the checksum field zero (the sum
            // of a version-4 header is never zero, so this is `small_sum`'s value).
            let acc = words_sum(hdr)
                + u64::from(!read_u16(hdr, 2)?)
                + u64::from(!read_u16(hdr, 10)?)
                + u64::from(new_len);
            let c = !fold64(acc);
            write_u16(buf, l3 + 2, new_len).ok()?;
            write_u16(buf, l3 + 10, c).ok()?;
            meta.checksum_recomputed(Slot::ip(level_of(lvl)));
        }
    }
    let l4 = info.l4;
    let l4_len = len.checked_sub(l4)?;
    let ulen = u16::try_from(l4_len).ok()?;
    let (proto, field) = match info.proto? {
        Proto::Tcp => (ip_proto::TCP, 16),
        Proto::Udp => (ip_proto::UDP, 6),
    };
    let inner_slot = Slot::l4(level_of(info.innermost()));
    let pseudo = l4_pseudo(buf, info, proto, l4_len)?;
    if all_good {
        let hdr = buf.get(l4..info.payload)?;
        // The L4 header's sum with the checksum field zero (and a UDP length replaced).
        let mut acc = u64::from(small_sum(hdr)) + u64::from(!read_u16(hdr, field)?);
        if proto == ip_proto::UDP {
            acc += u64::from(!read_u16(hdr, 4)?) + u64::from(ulen);
        }
        let mut c = !combine(combine(pseudo, fold64(acc)), payload_sum);
        if c == 0 && proto == ip_proto::UDP {
            c = 0xffff;
        }
        if proto == ip_proto::UDP {
            write_u16(buf, l4 + 4, ulen).ok()?;
        }
        write_u16(buf, l4 + field, c).ok()?;
        meta.checksum_recomputed(inner_slot);
    } else {
        if proto == ip_proto::UDP {
            write_u16(buf, l4 + 4, ulen).ok()?;
        }
        write_u16(buf, l4 + field, pseudo).ok()?;
    }
    // The outer UDP header of a tunnel: length, and the checksum when in use.
    let mut outer_partial = false;
    if let Some(t) = info.tunnel.filter(|t| t.kind != TunnelKind::Gre) {
        let ol4 = t.outer_l4;
        let olen = len.checked_sub(ol4)?;
        write_u16(buf, ol4 + 4, u16::try_from(olen).ok()?).ok()?;
        if t.outer_csum {
            let ol3 = *info.l3.first()?;
            let opseudo = pseudo_at(buf, ol3, info.ip.first()?.v6, ip_proto::UDP, olen)?;
            if all_good {
                // Local checksum offload: the completed inner L4 region sums to the complement
                // of its pseudo-header.
                write_u16(buf, ol4 + 6, 0).ok()?;
                let head = sum(buf.get(ol4..l4)?);
                let inner = if (l4 - ol4) % 2 == 1 {
                    (!pseudo).swap_bytes()
                } else {
                    !pseudo
                };
                let mut c = !combine(combine(opseudo, head), inner);
                if c == 0 {
                    c = 0xffff;
                }
                write_u16(buf, ol4 + 6, c).ok()?;
                meta.checksum_recomputed(Slot::OuterL4);
            } else {
                write_u16(buf, ol4 + 6, opseudo).ok()?;
                outer_partial = true;
            }
        }
    }
    if outer_partial {
        meta.rx_needs_csum(u16::try_from(t_outer_l4(info)?).ok()?, 6)
            .ok()?;
    }
    if !all_good {
        meta.rx_needs_csum(u16::try_from(l4).ok()?, field as u16)
            .ok()?;
    }
    let inner_v6 = info.ip.get(info.innermost())?.v6;
    let gso = match (info.proto?, inner_v6) {
        (Proto::Tcp, false) => GsoType::TcpV4,
        (Proto::Tcp, true) => GsoType::TcpV6,
        (Proto::Udp, _) => GsoType::UdpL4,
    };
    meta.set_gso(gso, u16::try_from(mss).ok()?, cwr).ok()?;
    h.meta = m;
    Some(m)
}

/// [`finalize`] for a plain packet ([`Held::plain`]: Ethernet, IPv4 without options or IPv6
/// without extension headers, TCP) whose segments' checksums were all `Good`: the same bytes and
/// metadata, with the fixed offsets and no per-level loop. Every sum is taken before the write
/// it depends on (see `finalize`).
#[inline(always)]
pub(super) fn finalize_plain(h: &mut Held, payload_sum: u16) -> Option<OffloadMeta> {
    let mut m = h.meta;
    let shape = PlainShape {
        v6: h.info.ip[0].v6,
        l4: h.info.l4,
        payload: h.info.payload,
    };
    finish_plain_header(&mut h.buf, shape, h.len, payload_sum)?;
    plain_merged_meta(&mut m, shape.v6, h.mss, h.cwr)?;
    h.meta = m;
    Some(m)
}

/// Where a plain TCP segment's headers are (see [`Held::plain`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PlainShape {
    pub(super) v6: bool,
    /// TCP header offset (34 or 54).
    pub(super) l4: usize,
    /// Payload offset.
    pub(super) payload: usize,
}

/// Rewrites the headers `buf` starts with (a plain packet's, flags already ORed in) for a
/// merged packet of `len` bytes whose payload sums to `payload_sum`: IP length and IPv4 header
/// checksum, TCP checksum ([`plain_merged_meta`] is its metadata). Every sum is taken before
/// the write it depends on (see `finalize`).
#[inline(always)]
pub(super) fn finish_plain_header(
    buf: &mut [u8],
    shape: PlainShape,
    len: usize,
    payload_sum: u16,
) -> Option<()> {
    let PlainShape { v6, l4, payload } = shape;
    let l4_len = len.checked_sub(l4)?;
    // The pseudo-header's address words, then the IP header's own fields.
    let addrs = if v6 {
        let ip: &mut [u8; 40] = buf.get_mut(ETH_HLEN..ETH_HLEN + 40)?.try_into().ok()?;
        let addrs = words_sum(&ip[8..40]);
        let plen = u16::try_from(len.checked_sub(ETH_HLEN + 40)?).ok()?;
        ip[4..6].copy_from_slice(&plen.to_be_bytes());
        addrs
    } else {
        let ip: &mut [u8; 20] = buf.get_mut(ETH_HLEN..ETH_HLEN + 20)?.try_into().ok()?;
        let addrs = words_sum(&ip[12..20]);
        set_ipv4_total(ip, u16::try_from(len.checked_sub(ETH_HLEN)?).ok()?);
        addrs
    };
    let pseudo = fold64(addrs + u64::from(ip_proto::TCP) + l4_len as u64);
    let hdr = buf.get(l4..payload)?;
    let old = read_u16(hdr, 16)?;
    let hsum = fold64(u64::from(small_sum(hdr)) + u64::from(!old));
    let c = !combine(combine(pseudo, hsum), payload_sum);
    write_u16(buf, l4 + 16, c).ok()
}

/// Sets an option-less IPv4 header's total length and recomputes its checksum (summing the
/// header with the old length and checksum taken out, before either is written: see `finalize`).
#[inline(always)]
pub(super) fn set_ipv4_total(ip: &mut [u8; 20], total: u16) {
    let acc = words_sum(ip)
        + u64::from(!u16::from_be_bytes([ip[2], ip[3]]))
        + u64::from(!u16::from_be_bytes([ip[10], ip[11]]))
        + u64::from(total);
    let c = !fold64(acc);
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// The metadata of a merged plain packet from its first segment's (`m`): the IPv4 header and
/// TCP checksums recomputed, the GSO request set.
#[inline(always)]
pub(super) fn plain_merged_meta(
    m: &mut OffloadMeta,
    v6: bool,
    mss: usize,
    cwr: bool,
) -> Option<()> {
    if !v6 {
        m.checksum_recomputed(Slot::OuterIp);
    }
    m.checksum_recomputed(Slot::OuterL4);
    let gso = if v6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
    m.set_gso(gso, u16::try_from(mss).ok()?, cwr).ok()
}

impl GroEngine {
    /// Finishes a held packet: fixes lengths and checksums of a merged one, queues it.
    pub(super) fn complete(&mut self, slot: u32, reason: FlushReason) {
        self.free.push(slot);
        let Some(h) = self.slab.get_mut(slot as usize) else {
            return;
        };
        h.live = false;
        self.stats.flushed.bump(reason);
        self.held_segments = self.held_segments.saturating_sub(usize::from(h.count));
        let count = h.count;
        // (The finished metadata comes back from `finalize` by value: reloading it from the
        // record right after its narrow stores would wait on store forwarding.)
        let meta = if count > 1 {
            self.stats.merged_packets += 1;
            finalize(h).unwrap_or_else(|| {
                // Cannot happen for frames that passed `classify`; keep the bytes, drop GSO.
                h.meta = OffloadMeta::default();
                h.meta
            })
        } else {
            h.meta
        };
        self.stats.packets_out += 1;
        let (buf, first_piece) = (std::mem::take(&mut h.buf), h.first_piece);
        if first_piece == NO_PIECE {
            self.out.push_back(GroPacket {
                frame: buf,
                meta,
                segments: count,
            });
            return;
        }
        let out = &mut self.burst.out;
        let hs = out.headers.len();
        if count == 1 {
            // Alone: the received frame as it is, one piece (as for a frame passed through).
            if let Some(link) = out.links.get_mut(first_piece as usize) {
                link.start = 0;
            }
        } else {
            // Merged: the rewritten headers to the arena; the pieces stay the chain.
            out.headers.extend_from_slice(&buf);
        }
        out.packets.push(BurstPacket {
            header: hs..out.headers.len(),
            meta,
            segments: count,
            first: first_piece,
        });
        self.recycle(buf);
    }

    pub(super) fn push_link(&mut self, start: usize, end: usize) -> u32 {
        self.burst.link(start, end)
    }

    /// Passes a frame that may not join through, after finishing its flow's held packet.
    pub(super) fn pass(&mut self, frame: &[u8], meta: OffloadMeta, slot: Option<usize>) {
        if let Some(i) = slot {
            self.finish(i, FlushReason::Mismatch);
        }
        self.stats.not_mergeable += 1;
        self.emit(frame, meta, 1);
    }

    pub(super) fn emit(&mut self, frame: &[u8], meta: OffloadMeta, segments: u16) {
        if self.burst.active {
            self.stats.packets_out += 1;
            let first = self.burst.link(0, frame.len());
            let out = &mut self.burst.out;
            let hs = out.headers.len();
            out.packets.push(BurstPacket {
                header: hs..hs,
                meta,
                segments,
                first,
            });
            return;
        }
        let mut buf = self.take_buf();
        buf.extend_from_slice(frame);
        self.stats.packets_out += 1;
        self.out.push_back(GroPacket {
            frame: buf,
            meta,
            segments,
        });
    }
}
