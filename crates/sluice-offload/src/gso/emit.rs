//! Emitting segments from a [`Plan`]: the fast untunnelled path, the general path, and the
//! per-segment IP, L4 and tunnel fixes.

use super::plan::*;
use super::*;
use core::ops::Range;
use sluice_checksum::Accumulator;
use sluice_packet::{CsumStatus, GsoType};
use sluice_wire::bytes::{write_u16, write_u32, OutOfRange};
use sluice_wire::ip_proto;

impl Plan {
    /// The common case, untunnelled TCP or USO, with the per-segment work cut to the fields
    /// that change (same bytes as the general path, which the tests check).
    #[inline(always)]
    pub(super) fn emit_simple(
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
    pub(super) fn emit_contiguous(
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
    pub(super) fn segment_meta(&self) -> SegmentMeta {
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
    pub(super) fn seg_payload(&self, i: usize) -> (Range<usize>, bool) {
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

    pub(super) fn seg_frame_len(&self, i: usize) -> usize {
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
    pub(super) fn emit_header(
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
    pub(super) fn emit_general(
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
    pub(super) fn fix_ip(
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
    pub(super) fn l4_checksum(
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

    pub(super) fn tunnel_fix(
        &self,
        h: &mut [u8],
        payload: &[u8],
        end: usize,
    ) -> Result<(), OutOfRange> {
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
    pub(super) fn cover_sum(
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
