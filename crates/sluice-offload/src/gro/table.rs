//! The held-packet table: held records ([`Held`]), the flow index, holding, joining and
//! finishing records, eviction and the segment budget.

use super::burst::NO_PIECE;
use super::csum::{fast_payload_sum, fixed_tcp_sum, segment_payload_sum, with_deferred};
use super::flow::{be32_in, Info, Proto, ETH_HLEN};
use super::rules::{carries_cwr, in_sequence, may_start, merged_flags, same_flow, Ipv4Ids};
use super::view::{fast_view, prediction_bits, same_headers, HeadBytes, PlainMasks, CMP_WORDS};
use super::{FlushReason, GroEngine};
use sluice_checksum::combine;
use sluice_packet::OffloadMeta;
use sluice_wire::bytes::{read_u16, read_u32};

/// Capacity of a pooled buffer: the largest merged frame and some headroom.
pub(super) const BUF_CAPACITY: usize = 65_536 + 512;

/// One held packet.
#[derive(Debug, Default)]
pub(super) struct Held {
    pub(super) info: Info,
    /// The merged frame (copying mode), or only the first segment's headers (burst mode).
    pub(super) buf: Vec<u8>,
    /// Length of the merged frame so far.
    pub(super) len: usize,
    /// Burst mode: the first and last payload pieces ([`NO_PIECE`] in copying mode).
    pub(super) first_piece: u32,
    pub(super) last_piece: u32,
    pub(super) meta: OffloadMeta,
    pub(super) count: u16,
    pub(super) mss: usize,
    pub(super) next_seq: u32,
    pub(super) ids: [Ipv4Ids; 2],
    /// Whether every segment's L4 checksum was `Good` (else some was `Partial`).
    pub(super) all_good: bool,
    /// Ones'-complement sum of the merged payload (valid while `all_good`), less the deferred
    /// part: see [`Held::payload_sum_total`].
    pub(super) payload_sum: u16,
    /// Deferred payload sums of fast-lane segments at even payload offsets: their count and the
    /// unfolded sum of their varying header words and TCP lengths. Each such segment's payload
    /// sums to minus (`fixed_sum` + its varying words + its length), so all of them together
    /// to minus (`deferred_n` × `fixed_sum` + `deferred_acc`); folded once at the end.
    pub(super) deferred_n: u64,
    pub(super) deferred_acc: u64,
    /// Whether this record holds a packet (records are reused; the port cache may point at a
    /// free one).
    pub(super) live: bool,
    /// Whether the packet is plain ([`plain_tcp`](super::flow::plain_tcp)'s shape), so the fast lane may take it.
    pub(super) plain: bool,
    /// Prediction on (plain packets from their second segment on): the compared bytes include
    /// the next full-size in-sequence segment's IP length, IPv4 ID and TCP sequence number, so
    /// one comparison settles flow, order, size and the ID rule. A segment that differs (the
    /// last, short one, or one out of order) takes the checks one by one.
    pub(super) pred: bool,
    pub(super) payload_bytes: usize,
    pub(super) cwr: bool,
    pub(super) born: u64,
    /// The fast path's view of the first segment's headers: 64-bit words and the mask of the
    /// bits that must be equal (`cmp_words` 0: no fast path for this packet). Computed when a
    /// frame of the flow first arrives (`view_done`), not for packets that stay alone.
    pub(super) view_done: bool,
    /// The reference header bytes (zero past the headers); compared under `cmp_mask`.
    pub(super) cmp_ref: HeadBytes,
    pub(super) cmp_mask: [u64; CMP_WORDS],
    pub(super) cmp_words: usize,
    /// The first segment's TCP/UDP ports (the fast path's first test).
    pub(super) ports: u32,
    /// TCP: the folded ones'-complement sum of the first segment's pseudo-header without its
    /// length and of its TCP header without the words the fast path lets vary or that
    /// [`varying_words`](super::csum::varying_words) takes (sequence number, data offset/flags/window, checksum, urgent
    /// pointer). A fast-path segment has the same bytes elsewhere, so its payload sum costs a
    /// few additions ([`fast_payload_sum`]). Computed when a second segment joins.
    pub(super) fixed_sum: u32,
}

impl Held {
    /// The payload sum with the deferred fast-lane segments folded in.
    pub(super) fn payload_sum_total(&self) -> u16 {
        with_deferred(
            self.payload_sum,
            self.deferred_n,
            self.fixed_sum,
            self.deferred_acc,
        )
    }

    /// The first segment's payload sum and (TCP) [`Held::fixed_sum`], from its headers (still
    /// as received in `buf`), when a second segment joins; clears `all_good` if impossible.
    pub(super) fn first_sums(&mut self) {
        let sums = if self.info.proto == Some(Proto::Tcp) {
            fixed_tcp_sum(&self.buf, &self.info).and_then(|f| {
                self.fixed_sum = f;
                fast_payload_sum(self, &self.buf, self.info.end)
            })
        } else {
            segment_payload_sum(&self.buf, &self.info, self.info.end)
        };
        match sums {
            Some(s) => self.payload_sum = s,
            None => self.all_good = false,
        }
    }

    /// Computes the fast-path view of the first segment's headers (still as received in `buf`:
    /// later segments only OR PSH/FIN into it, which the view ignores) if not done yet.
    /// `plain`: [`PlainMasks`], which spare recomputing the mask of a plain packet.
    #[inline(always)]
    pub(super) fn ensure_view(&mut self, plain: &PlainMasks) {
        if !self.view_done {
            self.build_view(plain);
        }
    }

    #[inline(never)]
    pub(super) fn build_view(&mut self, plain: &PlainMasks) {
        self.view_done = true;
        self.pred = false;
        let info = &self.info;
        let hl = info.payload;
        let mask = plain.get(info);
        let (Some(m), Some(hdr)) = (mask, self.buf.get(..hl)) else {
            self.cmp_words = fast_view(
                &self.buf,
                &self.info,
                &mut self.cmp_ref.0,
                &mut self.cmp_mask,
            );
            return;
        };
        if hl <= 64 {
            // Headers in one 64-byte compare: only the first eight words are ever read (the
            // mask's others are cleared all the same).
            let (Some(r), Some(dm), Some(sm)) = (
                self.cmp_ref.0.first_chunk_mut::<64>(),
                self.cmp_mask.first_chunk_mut::<8>(),
                m.first_chunk::<8>(),
            ) else {
                return;
            };
            *r = [0; 64];
            if let Some(d) = r.get_mut(..hl) {
                d.copy_from_slice(hdr);
            }
            *dm = *sm;
            if let Some(rest) = self.cmp_mask.get_mut(8..) {
                rest.fill(0);
            }
        } else {
            self.cmp_ref = HeadBytes::default();
            if let Some(d) = self.cmp_ref.0.get_mut(..hl) {
                d.copy_from_slice(hdr);
            }
            self.cmp_mask = *m;
        }
        self.cmp_words = hl.div_ceil(8);
    }

    /// Turns on the prediction of a plain packet's next full-size, in-sequence segment (see
    /// [`Held::pred`]): its IP length (or IPv6 payload length) joins the compared bytes (the
    /// reference holds the first segment's, that of every full-size segment). The IPv4 ID and
    /// TCP sequence number it must carry follow from the record ([`Held::predicted`]) and are
    /// compared as two scalars: rewriting them into the reference per segment made the next
    /// segment's vector loads wait on those narrow stores.
    /// Only for a plain packet ([`Held::plain`]).
    pub(super) fn start_prediction(&mut self) {
        let bits = prediction_bits(self.info.ip[0].v6);
        if let (Some(w), Some(b)) = (self.cmp_mask.get_mut(2), bits.get(2)) {
            // The only word `prediction_bits` sets (checked by its test).
            *w |= *b;
        }
        self.pred = true;
    }

    /// Whether a plain frame (TCP header `t`) carries the predicted next segment's TCP sequence
    /// number and (IPv4) ID.
    #[inline(always)]
    pub(super) fn predicted(&self, frame: &[u8], t: &[u8; 20]) -> bool {
        if !in_sequence(be32_in(t, 4), self.next_seq) {
            return false;
        }
        if self.info.ip[0].v6 {
            return true;
        }
        read_u16(frame, ETH_HLEN + 4) == Some(self.ids[0].next)
    }
}

/// An open-addressing hash table (linear probing, backward-shift deletion) from flow hash to
/// the slab index of the held packet: at least twice as many buckets as `max_flows`, so probes
/// stay short and there is always an empty bucket. Fixed size: no allocation after `new`.
#[derive(Debug)]
pub(super) struct FlowIndex {
    pub(super) buckets: Vec<Bucket>,
    pub(super) mask: usize,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket {
    pub(super) hash: u64,
    /// Slab index; [`EMPTY`] for a free bucket.
    pub(super) slot: u32,
}

pub(super) const EMPTY: u32 = u32::MAX;

pub(super) const FREE: Bucket = Bucket {
    hash: 0,
    slot: EMPTY,
};

impl FlowIndex {
    pub(super) fn new(max_flows: usize) -> Self {
        let n = max_flows
            .saturating_mul(2)
            .max(8)
            .checked_next_power_of_two()
            .unwrap_or(1 << 16);
        FlowIndex {
            buckets: vec![FREE; n],
            mask: n - 1,
        }
    }

    #[inline(always)]
    pub(super) fn home(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.mask
    }

    pub(super) fn clear(&mut self) {
        self.buckets.fill(FREE);
    }

    pub(super) fn insert(&mut self, hash: u64, slot: u32) {
        let mut b = self.home(hash);
        for _ in 0..self.buckets.len() {
            match self.buckets.get_mut(b) {
                Some(e) if e.slot == EMPTY => {
                    *e = Bucket { hash, slot };
                    return;
                }
                _ => b = (b + 1) & self.mask,
            }
        }
    }

    pub(super) fn remove(&mut self, hash: u64, slot: u32) {
        let mut b = self.home(hash);
        let mut found = None;
        for _ in 0..self.buckets.len() {
            match self.buckets.get(b) {
                Some(e) if e.slot == slot => {
                    found = Some(b);
                    break;
                }
                Some(e) if e.slot == EMPTY => return,
                _ => b = (b + 1) & self.mask,
            }
        }
        let Some(mut hole) = found else { return };
        // Backward shift: move later entries of the probe run into the hole when their home
        // bucket does not lie cyclically between the hole and them.
        let mut j = (hole + 1) & self.mask;
        for _ in 0..self.buckets.len() {
            let Some(&e) = self.buckets.get(j) else { break };
            if e.slot == EMPTY {
                break;
            }
            let home = self.home(e.hash);
            if (j.wrapping_sub(home) & self.mask) >= (j.wrapping_sub(hole) & self.mask) {
                if let Some(h) = self.buckets.get_mut(hole) {
                    *h = e;
                }
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        if let Some(h) = self.buckets.get_mut(hole) {
            *h = FREE;
        }
    }

    /// The first held packet with this hash.
    #[inline(always)]
    pub(super) fn first(&self, hash: u64) -> Option<usize> {
        let mut p = self.probe(hash);
        self.next(&mut p, hash)
    }

    /// A probe: (bucket, buckets left).
    #[inline(always)]
    pub(super) fn probe(&self, hash: u64) -> (usize, usize) {
        (self.home(hash), self.buckets.len())
    }

    /// The next held packet with this hash along the probe.
    #[inline(always)]
    pub(super) fn next(&self, p: &mut (usize, usize), hash: u64) -> Option<usize> {
        while p.1 > 0 {
            let e = self.buckets.get(p.0)?;
            if e.slot == EMPTY {
                return None;
            }
            p.0 = (p.0 + 1) & self.mask;
            p.1 -= 1;
            if e.hash == hash {
                return Some(e.slot as usize);
            }
        }
        None
    }
}

impl GroEngine {
    /// The held packet of a plain frame's flow, and whether its first segment's headers equal
    /// the frame's under the fast-path mask (which implies the same flow).
    #[inline]
    pub(super) fn find_plain(&mut self, frame: &[u8], info: &Info) -> (Option<usize>, bool) {
        let mut probe = self.index.probe(info.hash);
        while let Some(i) = self.index.next(&mut probe, info.hash) {
            let Some(h) = self.slab.get_mut(i) else { break };
            h.ensure_view(&self.plain_masks);
            if h.cmp_words != 0 && same_headers(h, frame) {
                return (Some(i), true);
            }
            if same_flow(&h.buf, &h.info, frame, info) {
                return (Some(i), false);
            }
        }
        (None, false)
    }

    /// Held packet `i` (its slab index).
    #[inline(always)]
    pub(super) fn held(&self, i: usize) -> Option<&Held> {
        self.slab.get(i)
    }

    #[inline(always)]
    pub(super) fn held_mut(&mut self, i: usize) -> Option<&mut Held> {
        self.slab.get_mut(i)
    }

    /// Whether a frame with no held packet to join may be held (Linux: not flushed on its own).
    pub(super) fn may_start(&self, info: &Info) -> bool {
        may_start(info)
    }

    pub(super) fn find(&self, frame: &[u8], info: &Info) -> Option<usize> {
        let mut probe = self.index.probe(info.hash);
        while let Some(i) = self.index.next(&mut probe, info.hash) {
            if self
                .held(i)
                .is_some_and(|h| same_flow(&h.buf, &h.info, frame, info))
            {
                return Some(i);
            }
        }
        None
    }

    pub(super) fn take_buf(&mut self) -> Vec<u8> {
        self.pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUF_CAPACITY))
    }

    pub(super) fn start(
        &mut self,
        frame: &[u8],
        meta: OffloadMeta,
        info: &Info,
        good: bool,
        now: u64,
    ) {
        if self.order.len() >= self.cfg.max_flows {
            if let Some(oldest) = self.oldest() {
                self.finish(oldest, FlushReason::Evicted);
            }
        }
        let slot = self.alloc_record();
        let Some(h) = self.slab.get_mut(slot as usize) else {
            return;
        };
        h.info = *info;
        self.hold(slot, frame, meta, good, now);
    }

    /// A free record's slab index (the slab grows to at most `max_flows` records).
    #[inline]
    pub(super) fn alloc_record(&mut self) -> u32 {
        match self.free.pop() {
            Some(s) => s,
            None => {
                self.slab.push(Held::default());
                u32::try_from(self.slab.len() - 1).unwrap_or(u32::MAX)
            }
        }
    }

    /// Holds `frame` as a new packet in record `slot`, whose `info` is the frame's already.
    #[inline]
    pub(super) fn hold(
        &mut self,
        slot: u32,
        frame: &[u8],
        meta: OffloadMeta,
        good: bool,
        now: u64,
    ) {
        let mut buf = self.take_buf();
        let Some(h) = self.slab.get_mut(slot as usize) else {
            return;
        };
        let (payload, end) = (h.info.payload, h.info.end);
        let (first_piece, last_piece) = if self.burst.active {
            buf.extend_from_slice(frame.get(..payload).unwrap_or(frame));
            let l = self.burst.link(payload, end);
            (l, l)
        } else {
            buf.extend_from_slice(frame);
            (NO_PIECE, NO_PIECE)
        };
        // Field by field: the record is reused in place. The payload sum, `fixed_sum` and the
        // fast-path view are computed when a second segment comes (most packets of a flood
        // never get one).
        let info = &h.info;
        h.mss = info.payload_len();
        h.next_seq = info.seq.wrapping_add(info.payload_len() as u32);
        h.payload_bytes = info.payload_len();
        h.cwr = carries_cwr(info.flags);
        h.ports = read_u32(frame, info.l4).unwrap_or(0);
        h.plain = info.is_plain();
        let hash = info.hash;
        h.buf = buf;
        h.len = frame.len();
        h.first_piece = first_piece;
        h.last_piece = last_piece;
        h.meta = meta;
        h.count = 1;
        h.ids = [Ipv4Ids::new(info.ip[0].id), Ipv4Ids::new(info.ip[1].id)];
        h.all_good = good;
        h.payload_sum = 0;
        h.deferred_n = 0;
        h.deferred_acc = 0;
        h.live = true;
        h.pred = false;
        h.born = now;
        h.view_done = false;
        h.cmp_words = 0;
        h.fixed_sum = 0;
        self.order.push(slot);
        self.index.insert(hash, slot);
        self.held_segments += 1;
    }

    /// Appends a segment to held packet `i`. `fast`: its headers equal the first segment's under
    /// the fast-path mask (so [`Held::fixed_sum`] applies to it).
    pub(super) fn join(
        &mut self,
        i: usize,
        frame: &[u8],
        end: usize,
        flags: u8,
        good: bool,
        fast: bool,
    ) {
        let Some(h) = self.held_mut(i) else {
            return;
        };
        let payload = frame.get(h.info.payload..end).unwrap_or(&[]);
        if good && h.all_good && h.count == 1 {
            h.first_sums();
        }
        if good && h.all_good {
            let psum = if fast {
                fast_payload_sum(h, frame, end)
            } else {
                segment_payload_sum(frame, &h.info, end)
            };
            match psum {
                Some(mut s) => {
                    if h.payload_bytes % 2 == 1 {
                        s = s.swap_bytes();
                    }
                    h.payload_sum = combine(h.payload_sum, s);
                }
                None => h.all_good = false,
            }
        } else {
            h.all_good = false;
        }
        let plen = payload.len();
        if h.first_piece == NO_PIECE {
            h.buf.extend_from_slice(payload);
        }
        h.len += plen;
        h.payload_bytes += plen;
        h.count += 1;
        h.next_seq = h.next_seq.wrapping_add(plen as u32);
        if h.info.proto == Some(Proto::Tcp) {
            // Linux ORs FIN and PSH of the joining segment into the held header.
            if let Some(f) = h.buf.get_mut(h.info.l4 + 13) {
                *f |= merged_flags(flags);
            }
        }
        if h.first_piece != NO_PIECE {
            let (start, last) = (h.info.payload, h.last_piece);
            let l = self.push_link(start, end);
            if let Some(prev) = self.burst.out.links.get_mut(last as usize) {
                prev.next = l;
            }
            if let Some(h) = self.held_mut(i) {
                h.last_piece = l;
            }
        }
        self.held_segments += 1;
        self.stats.merged_segments += 1;
    }

    /// The oldest held packet: `order` is in arrival order.
    pub(super) fn oldest(&self) -> Option<usize> {
        self.order.first().map(|&s| s as usize)
    }

    #[inline]
    pub(super) fn enforce_budget(&mut self) {
        while self.held_segments > self.cfg.max_held_packets {
            match self.oldest() {
                Some(i) => self.finish(i, FlushReason::Evicted),
                None => break,
            }
        }
    }

    pub(super) fn flush_all(&mut self, reason: FlushReason) {
        if self.order.len() * 8 < self.index.buckets.len() {
            // A few held packets: removing them is cheaper than clearing every bucket.
            for &slot in &self.order {
                let hash = self.slab.get(slot as usize).map_or(0, |h| h.info.hash);
                self.index.remove(hash, slot);
            }
        } else {
            self.index.clear();
        }
        let order = std::mem::take(&mut self.order);
        for &slot in &order {
            self.complete(slot, reason);
        }
        self.order = order;
        self.order.clear();
    }

    pub(super) fn flush_where(&mut self, reason: FlushReason, pred: impl Fn(&Held) -> bool) {
        // `order` is the arrival order of the first segments (pushed at the end, removed with
        // order-preserving `remove`), so this finishes the oldest first in one pass.
        let mut k = 0;
        while let Some(&slot) = self.order.get(k) {
            if self.held(slot as usize).is_some_and(&pred) {
                self.finish(slot as usize, reason);
            } else {
                k += 1;
            }
        }
    }

    /// Finishes held packet `i` (a slab index).
    pub(super) fn finish(&mut self, i: usize, reason: FlushReason) {
        let Some(k) = self.order.iter().position(|&s| s as usize == i) else {
            return;
        };
        self.order.remove(k);
        let hash = self.slab.get(i).map_or(0, |h| h.info.hash);
        self.index.remove(hash, i as u32);
        self.complete(i as u32, reason);
    }
}
