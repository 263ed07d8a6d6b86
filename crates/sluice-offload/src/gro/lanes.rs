//! The per-frame paths ("lanes") from the tightest to the general one. Each lane only decides
//! what the general path would; every merge rule it applies is a call into `rules.rs`.

use super::burst::{BurstState, NO_PIECE};
use super::csum::{fast_payload_sum, varying_words};
use super::flow::{
    be32_in, level_of, plain_hash, plain_offsets, plain_tcp, plain_tcp_into, Info, ETH_HLEN,
};
use super::rules::{
    decide, device_verified, eligible, finishes_packet, fits_64k, fits_64k_at, fits_segment_size,
    in_sequence, ip_fills_frame, ip_header_ok, join_finish, joining_csum, may_start, merged_flags,
    Decision,
};
use super::table::Held;
use super::view::{masked_equal, port_cache_index, same_headers, PORT_CACHE};
use super::{FlushReason, GroEngine};
use sluice_checksum::combine;
use sluice_packet::{CsumStatus, Level, OffloadMeta, Slot};
use sluice_wire::bytes::{read_u16, read_u32};
use sluice_wire::TunnelKind;

/// What [`GroEngine::quick_join`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// Joined its held packet.
    Joined,
    /// It looks plain and no held packet has its flow hash (the value): it starts a flow.
    NoFlow(u64),
    /// Anything else: the general path decides.
    Other,
}

/// The fast lane's join of `frame` (TCP header `t`, `len` payload bytes ending the frame) to
/// held packet `h`: its payload sum (deferred when it starts at an even offset; `good`: its L4
/// checksum was `Good`), its payload (copied, or a piece linked in burst mode), the counts,
/// the next sequence number and the FIN/PSH flags. Shared by [`GroEngine::quick_join`] and
/// [`GroEngine::predicted_join`].
#[inline(always)]
pub(super) fn fast_append(
    h: &mut Held,
    burst: &mut BurstState,
    frame: &[u8],
    t: &[u8; 20],
    good: bool,
    len: usize,
) {
    let (l4, payload, end) = (h.info.l4, h.info.payload, frame.len());
    if good && h.all_good {
        if h.payload_bytes.is_multiple_of(2) {
            // Deferred (see `Held::deferred_acc`): no fold, no complement per segment.
            h.deferred_n += 1;
            h.deferred_acc += (end - l4) as u64 + varying_words(t);
        } else {
            match fast_payload_sum(h, frame, end) {
                Some(s) => h.payload_sum = combine(h.payload_sum, s.swap_bytes()),
                None => h.all_good = false,
            }
        }
    } else {
        h.all_good = false;
    }
    if h.first_piece == NO_PIECE {
        h.buf.extend_from_slice(frame.get(payload..).unwrap_or(&[]));
    } else {
        let l = burst.link(payload, end);
        if let Some(prev) = burst.out.links.get_mut(h.last_piece as usize) {
            prev.next = l;
        }
        h.last_piece = l;
    }
    h.len += len;
    h.payload_bytes += len;
    h.count += 1;
    h.next_seq = h.next_seq.wrapping_add(len as u32);
    if let Some(f) = h.buf.get_mut(l4 + 13) {
        *f |= merged_flags(t[13]);
    }
}

impl GroEngine {
    /// A plain frame of a flow with nothing held ([`Lane::NoFlow`]), its metadata describing
    /// it with checksums known good: held as a new packet, as the general path would
    /// ([`GroEngine::receive_plain`] with its checks settled at once). `false`: not this case.
    #[inline(never)]
    pub(super) fn start_fresh(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        hash: u64,
        now: u64,
    ) -> bool {
        let v6 = read_u16(frame, 12) == Some(sluice_wire::ethertype::IPV6);
        if !self.plain_start_meta(meta, v6) || self.order.len() >= self.cfg.max_flows {
            // (A full table: the general path evicts first.)
            return false;
        }
        // Parsed straight into a free record, which goes back if the frame is not to be held.
        let slot = self.alloc_record();
        let held = self
            .slab
            .get_mut(slot as usize)
            .is_some_and(|h| plain_tcp_into(frame, Some(hash), &mut h.info) && may_start(&h.info));
        if !held {
            self.free.push(slot);
            return false;
        }
        self.hold(slot, frame, *meta, true, now);
        self.enforce_budget();
        true
    }

    /// Whether a plain frame's metadata lets it start a packet without the general path: L4
    /// checksum verified, IP checksum not bad (and, for IPv4, known), L4 checksum present, no
    /// tunnel, the offsets of a plain frame (nothing else to adopt).
    #[inline(always)]
    pub(super) fn plain_start_meta(&self, meta: &OffloadMeta, v6: bool) -> bool {
        let ip = meta.status(Slot::OuterIp);
        meta.status(Slot::OuterL4) == CsumStatus::Good
            && ip != CsumStatus::Bad
            && (v6 || ip != CsumStatus::Unknown)
            && !meta.csum_absent(Level::Outer)
            && meta.tunnel().is_none()
            && meta.offsets() == plain_offsets(v6)
    }

    /// [`GroEngine::receive`] after the fast lane.
    pub(super) fn receive_rest(
        &mut self,
        frame: &[u8],
        mut meta: OffloadMeta,
        now: u64,
        lane: Lane,
    ) {
        if self.fast_lanes {
            let known = match lane {
                Lane::NoFlow(hash) => Some(hash),
                _ => None,
            };
            if let Some(info) = plain_tcp(frame, known) {
                return self.receive_plain(frame, meta, &info, now, known.is_some());
            }
        }
        if self.try_fast(frame, &meta) {
            return;
        }
        let Ok(layout) = sluice_wire::parse_with(frame, &self.cfg.parse) else {
            return self.pass(frame, meta, None);
        };
        let Some(info) = self.classify(frame, &layout) else {
            return self.pass(frame, meta, None);
        };
        let slot = self.find(frame, &info);
        // Checksums: a segment joins only with every checksum known good (or partial).
        let fresh = OffloadMeta::from_layout(&layout);
        let (outer, inner) = (&layout.outer, layout.inner.as_ref());
        let csum = match self.check_csums(frame, fresh, outer, inner, &info, &mut meta) {
            Ok(c) => c,
            Err(bad) => {
                if bad {
                    self.stats.bad_checksum += 1;
                }
                return self.pass(frame, meta, slot);
            }
        };
        if !eligible(frame, &layout, &info) {
            return self.pass(frame, meta, slot);
        }
        self.merge_or_hold(frame, meta, &info, slot, csum, now);
    }

    /// A plain TCP segment ([`plain_tcp`]): the same decisions as the general path, without
    /// running the full parser (every frame-level refusal of [`eligible`] is excluded by the
    /// shape already).
    /// `no_flow`: the fast lane found no held packet with this frame's hash.
    #[inline]
    pub(super) fn receive_plain(
        &mut self,
        frame: &[u8],
        mut meta: OffloadMeta,
        info: &Info,
        now: u64,
        no_flow: bool,
    ) {
        let (slot, same) = if no_flow {
            (None, false)
        } else {
            self.find_plain(frame, info)
        };
        if let (Some(i), true) = (slot, same) {
            if let Some((good, finish)) = self.plain_check(i, info, frame, &meta) {
                self.join(i, frame, info.end, info.flags, good, true);
                if let Some(reason) = finish {
                    self.finish(i, reason);
                }
                self.enforce_budget();
                return;
            }
        }
        let csum = match self.plain_csums(frame, info, &mut meta) {
            Ok(c) => c,
            Err(bad) => {
                if bad {
                    self.stats.bad_checksum += 1;
                }
                return self.pass(frame, meta, slot);
            }
        };
        self.merge_or_hold(frame, meta, info, slot, csum, now);
    }

    /// The tightest lane, tried first in burst mode: the held packet its port-cache hint names,
    /// with prediction on ([`Held::pred`]) and headers of at most 64 bytes, compared with the
    /// frame in one fixed-size 64-byte compare, then [`GroEngine::predicted_join`]. `false`
    /// (nothing changed) sends the frame down [`GroEngine::quick_join`], which decides it as
    /// before.
    #[inline(always)]
    pub(super) fn tight_join(&mut self, frame: &[u8], meta: &OffloadMeta) -> bool {
        let Some(head) = frame.first_chunk::<64>() else {
            return false;
        };
        let hint = [head[34], head[35], head[36], head[37]];
        let slot = self
            .port_cache
            .get(port_cache_index(&hint) % PORT_CACHE)
            .map_or(usize::MAX, |&s| s as usize);
        let Some(h) = self.slab.get_mut(slot) else {
            return false;
        };
        // `pred` implies a plain packet with its view built (see `start_prediction`); the
        // 64-byte compare proves the flow, and `predicted_join` decides as `quick_join` would.
        if !(h.live && h.pred && h.cmp_words <= 8) {
            return false;
        }
        let (Some(r), Some(m)) = (
            h.cmp_ref.0.first_chunk::<64>(),
            h.cmp_mask.first_chunk::<8>(),
        ) else {
            return false;
        };
        masked_equal(head, r, m) && self.predicted_join(slot, frame, meta) == Lane::Joined
    }

    /// The fast lane of the commonest case: a plain TCP segment ([`plain_tcp`]) whose headers
    /// equal its flow's held packet's first segment's under the fast-path mask, in sequence, not
    /// too long, checksums known: joins it with nothing parsed beyond the flow hash. The checks
    /// are [`GroEngine::plain_check`]'s (and its flow the one [`GroEngine::find_plain`] finds),
    /// so the decision is the general path's; anything else returns `false` and takes it.
    #[inline(always)]
    pub(super) fn quick_join(&mut self, frame: &[u8], meta: &OffloadMeta) -> Lane {
        // A hint first: the held packet that last took a frame with these 4 bytes at offset 34
        // (the TCP ports of a plain IPv4 frame); the header comparison decides.
        let Some(hint) = frame.get(34..38) else {
            return Lane::Other;
        };
        let cache = port_cache_index(hint);
        let mut i = self
            .port_cache
            .get(cache)
            .map_or(usize::MAX, |&s| s as usize);
        let hinted = self
            .slab
            .get_mut(i)
            .is_some_and(|h| h.live && h.view_done && h.cmp_words != 0 && same_headers(h, frame));
        if !hinted {
            let Some(hash) = plain_hash(frame) else {
                return Lane::Other;
            };
            let Some(found) = self.index.first(hash) else {
                return Lane::NoFlow(hash);
            };
            i = found;
            let Some(h) = self.slab.get_mut(i) else {
                return Lane::Other;
            };
            h.ensure_view(&self.plain_masks);
            if !(h.live && h.cmp_words != 0 && same_headers(h, frame)) {
                return Lane::Other;
            }
            if let Some(c) = self.port_cache.get_mut(cache) {
                *c = i as u32;
            }
        }
        let verify = self.cfg.verify_checksums;
        let Some(h) = self.slab.get_mut(i) else {
            return Lane::Other;
        };
        if !h.plain {
            return Lane::Other;
        }
        // Equal headers: the same plain shape and offsets as the held packet's first segment.
        let end = frame.len();
        let (l4, payload) = (h.info.l4, h.info.payload);
        if h.pred {
            return self.predicted_join(i, frame, meta);
        }
        let (Some(ip), Some(t)) = (frame.get(ETH_HLEN..ETH_HLEN + 20), frame.get(l4..l4 + 20))
        else {
            return Lane::Other;
        };
        let Ok(t): Result<&[u8; 20], _> = t.try_into() else {
            return Lane::Other;
        };
        let Ok(ip): Result<&[u8; 20], _> = ip.try_into() else {
            return Lane::Other;
        };
        let v6 = h.info.ip[0].v6;
        // The IP length field: IPv4 total length (bytes 2..4), IPv6 payload length (4..6).
        let len_field = if v6 {
            u16::from_be_bytes([ip[4], ip[5]])
        } else {
            u16::from_be_bytes([ip[2], ip[3]])
        };
        if !ip_fills_frame(ETH_HLEN, v6, len_field, end) {
            return Lane::Other;
        }
        let mut ids = h.ids[0];
        if !v6 && !ids.accept(u16::from_be_bytes([ip[4], ip[5]]), h.count) {
            return Lane::Other;
        }
        if !ip_header_ok(meta.status(Slot::OuterIp), v6, frame, ETH_HLEN) {
            return Lane::Other;
        }
        let len = end.saturating_sub(payload);
        if !in_sequence(be32_in(t, 4), h.next_seq)
            || !fits_segment_size(len, h.mss)
            || !fits_64k(h.len, len)
        {
            return Lane::Other;
        }
        let Some(good) = joining_csum(
            meta.status(Slot::OuterL4),
            verify,
            frame,
            (ETH_HLEN, v6),
            l4,
            end,
        ) else {
            return Lane::Other;
        };
        h.ids[0] = ids;
        let flags = t[13];
        // Join (as `join`, fast).
        if good && h.all_good && h.count == 1 {
            h.first_sums();
        }
        fast_append(h, &mut self.burst, frame, t, good, len);
        let mss = h.mss;
        let finish = join_finish(flags, len, mss);
        // Prediction from now on when the packet stays held and the device verified this
        // segment (the predicted lane takes only such segments).
        if finish.is_none() && h.all_good && device_verified(meta, v6) {
            h.start_prediction();
        }
        self.held_segments += 1;
        self.stats.merged_segments += 1;
        if let Some(reason) = finish {
            self.finish(i, reason);
        }
        self.enforce_budget();
        Lane::Joined
    }

    /// The fast lane for a held packet with prediction on ([`Held::pred`]) whose compared bytes
    /// the frame matched: it is the next full-size in-sequence segment with the right IPv4 ID
    /// if it also has the first segment's frame length (no padding), checksums verified `Good`
    /// and room under 64 KiB. Anything else takes the general path.
    #[inline(always)]
    pub(super) fn predicted_join(&mut self, i: usize, frame: &[u8], meta: &OffloadMeta) -> Lane {
        let Some(h) = self.slab.get_mut(i) else {
            return Lane::Other;
        };
        let end = frame.len();
        let (l4, mss) = (h.info.l4, h.mss);
        let v6 = h.info.ip[0].v6;
        let Some(t) = frame
            .get(l4..l4 + 20)
            .and_then(|t| <&[u8; 20]>::try_from(t).ok())
        else {
            return Lane::Other;
        };
        if end != h.info.end
            || !h.predicted(frame, t)
            || !device_verified(meta, v6)
            || !fits_64k(h.len, mss)
            || !h.all_good
        {
            return Lane::Other;
        }
        let flags = t[13];
        // `end == h.info.end`: a full-size segment, `mss` payload bytes.
        fast_append(h, &mut self.burst, frame, t, true, mss);
        // (It carried the predicted ID: `Held::predicted`.)
        h.ids[0].advance();
        self.held_segments += 1;
        self.stats.merged_segments += 1;
        // (A full-size segment: only its flags may finish the packet.)
        if finishes_packet(flags) {
            self.finish(i, FlushReason::Flags);
        }
        self.enforce_budget();
        Lane::Joined
    }

    /// Joins a classified, checksum-settled, eligible frame to its flow's held packet, or holds
    /// it as a new packet, or passes it.
    #[inline]
    pub(super) fn merge_or_hold(
        &mut self,
        frame: &[u8],
        meta: OffloadMeta,
        info: &Info,
        slot: Option<usize>,
        csum: bool,
        now: u64,
    ) {
        if let Some(i) = slot {
            match self.held_mut(i).and_then(|h| decide(h, frame, info)) {
                Some(Decision::Join { finish }) => {
                    self.join(i, frame, info.end, info.flags, csum, false);
                    if let Some(reason) = finish {
                        self.finish(i, reason);
                    }
                    self.enforce_budget();
                    return;
                }
                Some(Decision::Refuse(reason)) => self.finish(i, reason),
                None => self.finish(i, FlushReason::Mismatch),
            }
        }
        // No held packet for this flow (any more): hold the frame unless it may not be held.
        if !self.may_start(info) {
            self.stats.not_mergeable += 1;
            return self.emit(frame, meta, 1);
        }
        self.start(frame, meta, info, csum, now);
        self.enforce_budget();
    }

    /// The common case without parsing: a TCP segment whose headers equal a held packet's first
    /// segment except for the fields that change per segment (IP lengths, IDs and checksums,
    /// outer UDP length and checksum, TCP sequence number, PSH/FIN, checksum and urgent
    /// pointer) joins it directly. Equal bytes at equal offsets make the same flow and satisfy
    /// every "must be identical" rule, so the slow path would decide the same; anything else
    /// (including every refusal) is left to the slow path, which counts it. Returns whether the
    /// frame was consumed.
    pub(super) fn try_fast(&mut self, frame: &[u8], meta: &OffloadMeta) -> bool {
        if !self.compare_lane {
            return false;
        }
        let mut hit = None;
        for &slot in &self.order {
            let Some(h) = self.slab.get_mut(slot as usize) else {
                break;
            };
            // The ports first: one load per held packet.
            if read_u32(frame, h.info.l4) != Some(h.ports) {
                continue;
            }
            h.ensure_view(&self.plain_masks);
            if h.cmp_words != 0 && same_headers(h, frame) {
                hit = Some(slot as usize);
                break;
            }
        }
        let Some(i) = hit else { return false };
        let Some((end, flags, good, finish)) = self.fast_check(i, frame, meta) else {
            return false;
        };
        self.join(i, frame, end, flags, good, true);
        if let Some(reason) = finish {
            self.finish(i, reason);
        }
        self.enforce_budget();
        true
    }

    /// Checks the per-segment fields of a frame whose headers equal held packet `i`'s (see
    /// [`same_headers`]): lengths, IPv4 IDs and header checksums, the outer UDP length and
    /// checksum use, sequence, size, the L4 checksum. Returns the frame's end and TCP flags,
    /// whether its L4 checksum is `Good` (else `Partial`), and whether it finishes the packet.
    pub(super) fn fast_check(
        &mut self,
        i: usize,
        frame: &[u8],
        meta: &OffloadMeta,
    ) -> Option<(usize, u8, bool, Option<FlushReason>)> {
        let verify = self.cfg.verify_checksums;
        let h = self.held_mut(i)?;
        let info = &h.info;
        let (l4, payload, levels) = (info.l4, info.payload, info.levels.min(2));
        let end = frame.len();
        let mut ids = h.ids;
        // Lengths, IDs and IPv4 header checksums of every level.
        for lvl in 0..levels {
            let l3 = *info.l3.get(lvl)?;
            let ip = info.ip.get(lvl)?;
            let len_field = read_u16(frame, if ip.v6 { l3 + 4 } else { l3 + 2 })?;
            if !ip_fills_frame(l3, ip.v6, len_field, end) {
                return None;
            }
            if !ip.v6 && !ids.get_mut(lvl)?.accept(read_u16(frame, l3 + 4)?, h.count) {
                return None;
            }
            if !ip_header_ok(meta.status(Slot::ip(level_of(lvl))), ip.v6, frame, l3) {
                return None;
            }
        }
        if let Some(t) = info.tunnel.filter(|t| t.kind != TunnelKind::Gre) {
            if usize::from(read_u16(frame, t.outer_l4 + 4)?) != end - t.outer_l4
                || (read_u16(frame, t.outer_l4 + 6)? != 0) != t.outer_csum
            {
                return None;
            }
            if t.outer_csum
                && !matches!(
                    meta.status(Slot::OuterL4),
                    CsumStatus::Good | CsumStatus::Partial
                )
            {
                return None;
            }
        }
        let len = end - payload;
        let flags = *frame.get(l4 + 13)?;
        if !in_sequence(read_u32(frame, l4 + 4)?, h.next_seq)
            || !fits_segment_size(len, h.mss)
            || !fits_64k_at(h.len, info.l3[0], len)
        {
            return None;
        }
        let lvl = info.innermost();
        let good = joining_csum(
            meta.status(Slot::l4(level_of(lvl))),
            verify,
            frame,
            (*info.l3.get(lvl)?, info.ip.get(lvl)?.v6),
            l4,
            end,
        )?;
        h.ids = ids;
        Some((end, flags, good, join_finish(flags, len, h.mss)))
    }

    /// [`GroEngine::fast_check`] for a plain frame ([`plain_tcp`] already checked its lengths)
    /// whose headers equal held packet `i`'s: the IPv4 ID rule and header checksum, sequence,
    /// size and the TCP checksum. Returns whether its TCP checksum is `Good` (else `Partial`)
    /// and whether it finishes the packet.
    #[inline(always)]
    pub(super) fn plain_check(
        &mut self,
        i: usize,
        info: &Info,
        frame: &[u8],
        meta: &OffloadMeta,
    ) -> Option<(bool, Option<FlushReason>)> {
        let verify = self.cfg.verify_checksums;
        let h = self.held_mut(i)?;
        let len = info.end.checked_sub(info.payload)?;
        if !in_sequence(info.seq, h.next_seq)
            || !fits_segment_size(len, h.mss)
            || !fits_64k(h.len, len)
        {
            return None;
        }
        let v6 = info.ip[0].v6;
        let mut ids = h.ids[0];
        if !v6 && !ids.accept(info.ip[0].id, h.count) {
            return None;
        }
        if !ip_header_ok(meta.status(Slot::OuterIp), v6, frame, ETH_HLEN) {
            return None;
        }
        let good = joining_csum(
            meta.status(Slot::OuterL4),
            verify,
            frame,
            (ETH_HLEN, info.ip[0].v6),
            info.l4,
            info.end,
        )?;
        h.ids[0] = ids;
        Some((good, join_finish(info.flags, len, h.mss)))
    }
}
