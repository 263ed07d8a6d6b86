//! Burst (zero-copy) mode: the output types ([`GroBurst`]: rewritten headers plus pieces of the
//! input frames), the piece chains, and the simple lane that coalesces a whole burst of plain,
//! device-verified TCP segments without held records.

use super::csum::{fixed_tcp_acc_at, fold64, varying_words};
use super::finish::{finish_plain_header, plain_merged_meta, set_ipv4_total, PlainShape};
use super::flow::{be32_in, le32_in, plain_hash, plain_tcp, ETH_HLEN};
use super::rules::{
    device_verified, finishes_packet, fits_64k, fits_segment_size, in_sequence, ip_fills_frame,
    may_start, merged_flags, short_segment, Ipv4Ids,
};
use super::view::{masked_equal, port_cache_index, PlainMasks, CMP_WORDS, PORT_CACHE};
use super::{FlushCounts, GroEngine};
use sluice_checksum::combine;
use sluice_packet::{CsumStatus, OffloadMeta, Slot};

/// No piece: a held packet in copying mode, or the end of a piece chain.
pub(super) const NO_PIECE: u32 = u32::MAX;

/// A link not yet written.
pub(super) const FREE_LINK: Link = Link {
    frame: 0,
    start: 0,
    end: 0,
    next: NO_PIECE,
};

/// One payload piece of a held packet in burst mode, chained per packet.
#[derive(Debug, Clone, Copy)]
pub(super) struct Link {
    pub(super) frame: u32,
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) next: u32,
}

impl BurstState {
    /// Records the current frame's payload piece `start..end`, unchained; returns its link.
    #[inline(always)]
    pub(super) fn link(&mut self, start: usize, end: usize) -> u32 {
        let l = Link {
            frame: self.index,
            start: start as u32,
            end: end as u32,
            next: NO_PIECE,
        };
        let links = &mut self.out.links;
        match links.get_mut(self.index as usize) {
            Some(slot) => {
                *slot = l;
                self.index
            }
            None => {
                links.push(l);
                (links.len() - 1) as u32
            }
        }
    }
}

/// The payload pieces of a held packet's link chain, in order.
pub(super) struct Chain<'a> {
    pub(super) links: &'a [Link],
    pub(super) next: u32,
}

impl Iterator for Chain<'_> {
    type Item = BurstPiece;

    #[inline(always)]
    fn next(&mut self) -> Option<BurstPiece> {
        let link = self.links.get(self.next as usize)?;
        self.next = link.next;
        Some(BurstPiece {
            frame: link.frame as usize,
            range: link.start as usize..link.end as usize,
        })
    }
}

/// Most frames a burst may have for [`GroEngine::simple_burst`].
pub(super) const SIMPLE_MAX: usize = 64;

/// Places of its flow table (at least twice [`SIMPLE_MAX`], a power of two).
pub(super) const SIMPLE_SLOTS: usize = 128;

/// [`GroEngine::simple_burst`]'s flows, their references and the burst's links, in arrays of
/// [`SIMPLE_MAX`] indexed modulo their size (so no index needs a check). Entries are written
/// before they are read: flow `i` when the burst's `i`-th flow starts, link `k` when frame `k`
/// is taken.
#[derive(Debug)]
pub(super) struct SimpleState {
    pub(super) flows: [SimpleFlow; SIMPLE_MAX],
    pub(super) refs: [SimpleRef; SIMPLE_MAX],
    pub(super) links: [Link; SIMPLE_MAX],
}

/// One flow of a burst in [`GroEngine::simple_burst`]: its packet so far.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SimpleFlow {
    pub(super) hash: u64,
    /// The first segment's frame index (also its link's), and the last segment's link.
    pub(super) first: u32,
    pub(super) last_link: u32,
    pub(super) shape: PlainShape,
    /// The first segment's TCP data offset in words (its [`PlainMasks`] entry).
    pub(super) doff: usize,
    /// The first segment's frame length and payload length (every full-size segment's).
    pub(super) end: usize,
    pub(super) mss: usize,
    /// The IPv4 ID rule's state.
    pub(super) ids: Ipv4Ids,
    pub(super) count: u16,
    /// Merged frame length so far.
    pub(super) len: usize,
    pub(super) next_seq: u32,
    /// FIN and PSH of the segments joined (ORed into the header, as Linux does).
    pub(super) flags_or: u8,
    /// As [`Held::fixed_sum`](super::table::Held::fixed_sum) (but not folded), [`Held::payload_sum`](super::table::Held::payload_sum) and
    /// [`Held::deferred_acc`](super::table::Held::deferred_acc); the segments summed at once (odd payload offsets) are counted
    /// instead of the deferred ones (the rest of `count`).
    pub(super) fixed_sum: u64,
    pub(super) payload_sum: u16,
    pub(super) odd_n: u64,
    pub(super) deferred_acc: u64,
    /// The deferred segments' data offset/flags/window and checksum/urgent pointer words,
    /// summed as loaded (little-endian): the folded sum is the byte-swapped sum of the
    /// big-endian words (RFC 1071's byte-order independence), so no swap per segment.
    pub(super) deferred_le: u64,
    pub(super) done: bool,
    /// From the second segment on, for headers of at most 64 bytes: the flow's [`SimpleRef`]
    /// holds the first segment's first 64 bytes and the mask's first eight words.
    pub(super) inline: bool,
}

/// The comparison reference of a [`SimpleFlow`] (kept apart and reused across bursts, so a
/// flow that stays alone costs no copy).
#[derive(Debug, Clone, Copy)]
pub(super) struct SimpleRef {
    pub(super) r: [u8; 64],
    pub(super) m: [u64; 8],
}

impl SimpleFlow {
    /// The payload sum with the deferred segments folded in (as [`Held::payload_sum_total`](super::table::Held::payload_sum_total)).
    pub(super) fn payload_sum_total(&self) -> u16 {
        // (`fixed_sum` is below 2^40 and `deferred_n` at most 64: no overflow.)
        // Every segment not summed at an odd offset was deferred, the first included.
        let deferred_n = u64::from(self.count) - self.odd_n;
        let pending = deferred_n
            .wrapping_mul(self.fixed_sum)
            .wrapping_add(self.deferred_acc)
            .wrapping_add(u64::from(fold64(self.deferred_le).swap_bytes()));
        combine(self.payload_sum, !fold64(pending))
    }
}

/// Whether `frame`'s headers equal flow `f`'s first segment's (`first`) under its plain
/// fast-path mask; `None` when a frame is too short for the comparison.
#[inline(always)]
pub(super) fn simple_same(
    masks: &PlainMasks,
    f: &SimpleFlow,
    r: &SimpleRef,
    frame: &[u8],
    frames: &[&[u8]],
) -> Option<bool> {
    if f.inline {
        return Some(masked_equal(frame.first_chunk::<64>()?, &r.r, &r.m));
    }
    let first = frames.get(f.first as usize)?;
    let mask = masks.masks.get(usize::from(f.shape.v6))?.get(f.doff)?;
    Some(if f.shape.payload <= 64 {
        masked_equal(
            frame.first_chunk::<64>()?,
            first.first_chunk::<64>()?,
            mask.first_chunk::<8>()?,
        )
    } else {
        masked_equal(
            frame.first_chunk::<128>()?,
            first.first_chunk::<128>()?,
            mask,
        )
    })
}

/// Burst (zero-copy) mode state of [`GroEngine::coalesce_burst`].
#[derive(Debug, Default)]
pub(super) struct BurstState {
    pub(super) active: bool,
    pub(super) index: u32,
    /// The output being built (the caller's, swapped in), links included.
    pub(super) out: GroBurst,
}

/// One payload piece of a [`BurstPacket`]: bytes `range` of input frame `frame`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BurstPiece {
    /// Index of the input frame in the burst.
    pub frame: usize,
    /// The bytes of that frame.
    pub range: core::ops::Range<usize>,
}

/// One output packet of [`GroEngine::coalesce_burst`]: its (rewritten) header bytes followed by
/// its payload pieces, which stay in the caller's input frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BurstPacket {
    /// The header bytes in [`GroBurst::header`] (empty for a packet of one frame, merged with
    /// nothing or passed through: its one piece is the whole frame).
    pub header: core::ops::Range<usize>,
    /// Its metadata, as for [`GroPacket::meta`](super::GroPacket::meta).
    pub meta: OffloadMeta,
    /// How many input frames it is made of.
    pub segments: u16,
    /// Its first payload piece's link ([`GroBurst::pieces`] follows the chain).
    pub(super) first: u32,
}

/// The result of [`GroEngine::coalesce_burst`]: packets as header bytes plus pieces of the input
/// frames, for scatter-gather output (`writev` to a TAP, a NIC descriptor chain). Reuse one value
/// across bursts: its vectors keep their capacity.
#[derive(Debug, Default, Clone)]
pub struct GroBurst {
    pub(super) headers: Vec<u8>,
    /// One link per input frame, at its index: the payload piece it gives and the next piece
    /// of the same packet (each packet's pieces are a chain, as an mbuf chain is).
    pub(super) links: Vec<Link>,
    pub(super) packets: Vec<BurstPacket>,
}

impl GroBurst {
    /// An empty result.
    pub fn new() -> Self {
        GroBurst::default()
    }

    /// The packets, in output order (see the module documentation).
    pub fn packets(&self) -> &[BurstPacket] {
        &self.packets
    }

    /// A packet's header bytes.
    pub fn header(&self, p: &BurstPacket) -> &[u8] {
        self.headers.get(p.header.clone()).unwrap_or(&[])
    }

    /// A packet's payload pieces, in order (walked lazily along the packet's chain, so
    /// finishing a packet writes nothing per segment).
    pub fn pieces(&self, p: &BurstPacket) -> impl Iterator<Item = BurstPiece> + '_ {
        Chain {
            links: &self.links,
            next: p.first,
        }
    }

    /// Appends a packet's bytes (header, then every piece of `frames`) to `out`.
    pub fn linearize(&self, p: &BurstPacket, frames: &[&[u8]], out: &mut Vec<u8>) {
        out.extend_from_slice(self.header(p));
        for piece in self.pieces(p) {
            if let Some(b) = frames
                .get(piece.frame)
                .and_then(|f| f.get(piece.range.clone()))
            {
                out.extend_from_slice(b);
            }
        }
    }

    pub(super) fn clear(&mut self) {
        self.headers.clear();
        self.links.clear();
        self.packets.clear();
    }
}

/// [`finish_plain_header`] for a header copy in a fixed-size array of simple-lane flow `f`
/// (flags ORed in here), whose [`Held::fixed_sum`](super::table::Held::fixed_sum) is known: the TCP checksum from it and the
/// words that vary (sequence number, data offset/flags/window with the flags ORed in, urgent
/// pointer) instead of summing the pseudo-header and the TCP header again.
#[inline(always)]
pub(super) fn finish_simple_header<const N: usize>(
    h: &mut [u8; N],
    f: &SimpleFlow,
    payload_sum: u16,
) -> Option<()> {
    let PlainShape { v6, l4, .. } = f.shape;
    let len = f.len;
    *h.get_mut(l4 + 13)? |= f.flags_or;
    let l4_len = len.checked_sub(l4)?;
    if v6 {
        let plen = u16::try_from(len.checked_sub(ETH_HLEN + 40)?).ok()?;
        h.get_mut(18..20)?.copy_from_slice(&plen.to_be_bytes());
    } else {
        let ip: &mut [u8; 20] = h.get_mut(ETH_HLEN..ETH_HLEN + 20)?.try_into().ok()?;
        set_ipv4_total(ip, u16::try_from(len.checked_sub(ETH_HLEN)?).ok()?);
    }
    let t: &[u8; 20] = h.get(l4..l4 + 20)?.try_into().ok()?;
    let acc = f.fixed_sum
        + l4_len as u64
        + u64::from(be32_in(t, 4))
        + u64::from(be32_in(t, 12))
        + u64::from(u16::from_be_bytes([t[18], t[19]]))
        + u64::from(payload_sum);
    let c = !fold64(acc);
    h.get_mut(l4 + 16..l4 + 18)?
        .copy_from_slice(&c.to_be_bytes());
    Some(())
}

impl GroEngine {
    /// Burst mode's lane for the common burst: every frame a plain TCP data segment
    /// ([`plain_tcp`]) whose checksums the device verified, each extending its flow in order
    /// (the next sequence number, the IPv4 ID rule, no longer than the first, room under
    /// 64 KiB, headers equal to the first segment's under the fast-path mask), within the flow
    /// and segment budgets. For such a burst the general pass makes exactly these decisions, so
    /// this lane builds its output directly: one packet per flow, finished early by FIN/PSH or
    /// a short segment (in the order they finish) or at the end (in order of first arrival),
    /// with no held records, views or pooled buffers. At the first frame outside that, it
    /// returns `false` having left nothing the general pass depends on (its output is cleared;
    /// links are rewritten before they are used), and the caller runs the general pass.
    pub(super) fn simple_burst(&mut self, frames: &[&[u8]], metas: &[OffloadMeta]) -> bool {
        if !self.fast_lanes
            || frames.is_empty()
            || frames.len() > SIMPLE_MAX
            || metas.len() < frames.len()
        {
            return false;
        }
        let Some(mut st) = self.simple.take() else {
            return false;
        };
        let mut counts = FlushCounts::default();
        let done = self
            .simple_scan(frames, metas, &mut st, &mut counts)
            .is_some();
        if done {
            let links = &mut self.burst.out.links;
            links.clear();
            links.extend_from_slice(st.links.get(..frames.len()).unwrap_or(&[]));
            let packets = self.burst.out.packets.len() as u64;
            let merged = self
                .burst
                .out
                .packets
                .iter()
                .filter(|p| p.segments > 1)
                .count();
            let st = &mut self.stats;
            st.frames_in += frames.len() as u64;
            st.packets_out += packets;
            st.merged_segments += frames.len() as u64 - packets;
            st.merged_packets += merged as u64;
            st.flushed.batch_end += counts.batch_end;
            st.flushed.flags += counts.flags;
            st.flushed.size += counts.size;
            st.simple_bursts += 1;
        } else {
            self.burst.out.packets.clear();
            self.burst.out.headers.clear();
        }
        self.simple = Some(st);
        done
    }

    /// [`GroEngine::simple_burst`]'s pass; `None` at the first frame outside its case.
    pub(super) fn simple_scan(
        &mut self,
        frames: &[&[u8]],
        metas: &[OffloadMeta],
        st: &mut SimpleState,
        counts: &mut FlushCounts,
    ) -> Option<()> {
        // Flows by flow hash (open addressing), and a hint by the 4 bytes at offset 34 (the
        // ports of a plain IPv4 frame): the hinted flow is taken when the frame's headers equal
        // its first segment's, which proves the flow without hashing. Both hold flow index + 1.
        let mut table = [0u8; SIMPLE_SLOTS];
        let mut hints = [0u8; PORT_CACHE];
        let mut nflows = 0usize;
        let (mut held, mut held_segments) = (0usize, 0usize);
        // Held segments are counted only when the burst could exceed the segment budget.
        let track = frames.len() > self.cfg.max_held_packets;
        for (k, (&frame, meta)) in frames.iter().zip(metas).enumerate() {
            // Half of `device_verified`, which every frame here must pass, tested first.
            if meta.status(Slot::OuterL4) != CsumStatus::Good {
                return None;
            }
            let head = frame.first_chunk::<64>()?;
            let hint = port_cache_index(&head[34..38]) % PORT_CACHE;
            let hinted = match *hints.get(hint)? {
                0 => None,
                g => {
                    let i = usize::from(g - 1) % SIMPLE_MAX;
                    let f = st.flows.get(i)?;
                    let r = st.refs.get(i)?;
                    (!f.done && simple_same(&self.plain_masks, f, r, frame, frames)?).then_some(i)
                }
            };
            let i = match hinted {
                Some(i) => i,
                None => {
                    let hash = plain_hash(frame)?;
                    let mut place = (hash >> 57) as usize % SIMPLE_SLOTS;
                    let found = loop {
                        match *table.get(place)? {
                            0 => break None,
                            g => {
                                let i = usize::from(g - 1) % SIMPLE_MAX;
                                if st.flows.get(i)?.hash == hash {
                                    break Some(i);
                                }
                                place = (place + 1) % SIMPLE_SLOTS;
                            }
                        }
                    };
                    match found {
                        Some(i) => {
                            // Its flow by the hash: it must be that packet's next segment.
                            let f = st.flows.get(i)?;
                            let r = st.refs.get(i)?;
                            if f.done || !simple_same(&self.plain_masks, f, r, frame, frames)? {
                                return None;
                            }
                            *hints.get_mut(hint)? = u8::try_from(i + 1).ok()?;
                            i
                        }
                        None => {
                            let f = self.simple_start(k, frame, meta, hash, held)?;
                            *st.links.get_mut(k)? = Link {
                                frame: k as u32,
                                start: f.shape.payload as u32,
                                end: f.end as u32,
                                next: NO_PIECE,
                            };
                            *st.flows.get_mut(nflows)? = f;
                            nflows += 1;
                            *table.get_mut(place)? = u8::try_from(nflows).ok()?;
                            *hints.get_mut(hint)? = u8::try_from(nflows).ok()?;
                            held += 1;
                            held_segments += 1;
                            if held_segments > self.cfg.max_held_packets {
                                return None;
                            }
                            continue;
                        }
                    }
                }
            };
            let f = st.flows.get_mut(i)?;
            let PlainShape { v6, l4, payload } = f.shape;
            let end = frame.len();
            // (The headers matched the first segment's, so the shape's fields sit at the
            // shape's offsets.)
            if end <= payload || !device_verified(meta, v6) {
                return None;
            }
            // The IP packet ends the frame; the ID rule (incrementing, or fixed from the second
            // segment on); in sequence, not longer than the first, room under 64 KiB.
            let t: &[u8; 20] = if v6 {
                let plen = u16::from_be_bytes([head[18], head[19]]);
                if !ip_fills_frame(ETH_HLEN, true, plen, end) {
                    return None;
                }
                frame.get(54..74)?.try_into().ok()?
            } else {
                let total = u16::from_be_bytes([head[16], head[17]]);
                if !ip_fills_frame(ETH_HLEN, false, total, end) {
                    return None;
                }
                let id = u16::from_be_bytes([head[18], head[19]]);
                // (Any later refusal abandons the lane, so updating here is safe.)
                if !f.ids.accept(id, f.count) {
                    return None;
                }
                head[34..54].try_into().ok()?
            };
            let len = end - payload;
            if !in_sequence(be32_in(t, 4), f.next_seq)
                || !fits_segment_size(len, f.mss)
                || !fits_64k(f.len, len)
            {
                return None;
            }
            let flags = t[13];
            if f.count == 1 {
                let first = frames.get(f.first as usize)?;
                // The first segment's sums, from its headers (as `Held::first_sums`).
                let ft: &[u8; 20] = first.get(l4..l4 + 20)?.try_into().ok()?;
                f.fixed_sum = fixed_tcp_acc_at(first, ETH_HLEN, v6, l4, payload)?;
                // The first segment's payload sum is deferred like the others' (its payload
                // starts the packet, at an even offset).
                f.deferred_acc = (f.end - l4) as u64 + u64::from(be32_in(ft, 4));
                f.deferred_le = u64::from(le32_in(ft, 12)) + u64::from(le32_in(ft, 16));
                if payload <= 64 {
                    let mask = self.plain_masks.masks.get(usize::from(v6))?.get(f.doff)?;
                    let r = st.refs.get_mut(i)?;
                    r.r = *first.first_chunk::<64>()?;
                    r.m = *mask.first_chunk::<8>()?;
                    f.inline = true;
                }
            }
            // (`len - payload`: the payload bytes merged so far.)
            if (f.len - payload).is_multiple_of(2) {
                // Deferred, as in `fast_append`: no fold per segment.
                // (The sequence number is `next_seq`, checked above.)
                f.deferred_acc += (end - l4) as u64 + u64::from(f.next_seq);
                f.deferred_le += u64::from(le32_in(t, 12)) + u64::from(le32_in(t, 16));
            } else {
                let sum = !fold64(f.fixed_sum + (end - l4) as u64 + varying_words(t));
                f.payload_sum = combine(f.payload_sum, sum.swap_bytes());
                f.odd_n += 1;
            }
            // Link k is this frame's; the flow's last link is an earlier frame's.
            *st.links.get_mut(k % SIMPLE_MAX)? = Link {
                frame: k as u32,
                start: payload as u32,
                end: end as u32,
                next: NO_PIECE,
            };
            st.links.get_mut(f.last_link as usize % SIMPLE_MAX)?.next = k as u32;
            f.last_link = k as u32;
            f.len += len;
            f.count += 1;
            f.next_seq = f.next_seq.wrapping_add(len as u32);
            f.flags_or |= merged_flags(flags);
            if track {
                held_segments += 1;
            }
            // `join_finish`'s rules, each counted in its branch (no reason value to build).
            let finish = if finishes_packet(flags) {
                counts.flags += 1;
                true
            } else if short_segment(len, f.mss) {
                counts.size += 1;
                true
            } else {
                false
            };
            if finish {
                f.done = true;
                held -= 1;
                if track {
                    held_segments -= usize::from(f.count);
                }
                self.simple_output(f, &mut st.links, frames, metas)?;
            }
            if track && held_segments > self.cfg.max_held_packets {
                return None;
            }
        }
        for i in 0..nflows {
            let f = st.flows.get(i % SIMPLE_MAX)?;
            if !f.done {
                counts.batch_end += 1;
                self.simple_output(f, &mut st.links, frames, metas)?;
            }
        }
        Some(())
    }

    /// A new flow of [`GroEngine::simple_scan`] at frame `k`, on `start_fresh`'s terms:
    /// metadata describing the frame's plain layout with its checksums present, a free place
    /// (`held` flows so far), a segment that may start a packet.
    pub(super) fn simple_start(
        &self,
        k: usize,
        frame: &[u8],
        meta: &OffloadMeta,
        hash: u64,
        held: usize,
    ) -> Option<SimpleFlow> {
        let v6 = frame.get(12..14)? == sluice_wire::ethertype::IPV6.to_be_bytes();
        if !self.plain_start_meta(meta, v6) || held >= self.cfg.max_flows {
            return None;
        }
        let info = plain_tcp(frame, Some(hash))?;
        if !may_start(&info) || info.payload > CMP_WORDS * 8 {
            return None;
        }
        let mss = info.payload_len();
        Some(SimpleFlow {
            hash,
            first: k as u32,
            last_link: k as u32,
            shape: PlainShape {
                v6,
                l4: info.l4,
                payload: info.payload,
            },
            doff: (info.payload - info.l4) / 4,
            end: info.end,
            mss,
            ids: Ipv4Ids::new(info.ip[0].id),
            count: 1,
            len: info.end,
            next_seq: info.seq.wrapping_add(mss as u32),
            flags_or: 0,
            fixed_sum: 0,
            payload_sum: 0,
            odd_n: 0,
            deferred_acc: 0,
            deferred_le: 0,
            done: false,
            inline: false,
        })
    }

    /// Appends flow `f`'s packet to the burst output, as `complete` would have.
    pub(super) fn simple_output(
        &mut self,
        f: &SimpleFlow,
        links: &mut [Link; SIMPLE_MAX],
        frames: &[&[u8]],
        metas: &[OffloadMeta],
    ) -> Option<()> {
        let out = &mut self.burst.out;
        let hs = out.headers.len();
        let given = metas.get(f.first as usize)?;
        if f.count == 1 {
            // Alone: the received frame as it is.
            links.get_mut(f.first as usize % SIMPLE_MAX)?.start = 0;
            out.packets.push(BurstPacket {
                header: hs..hs,
                meta: *given,
                segments: 1,
                first: f.first,
            });
            return Some(());
        }
        let first = frames.get(f.first as usize)?;
        let payload = f.shape.payload;
        let sum = f.payload_sum_total();
        // Finished in a fixed-size copy (no bounds to check, no call for a few dozen bytes),
        // appended whole and cut to the headers.
        if payload <= 64 {
            let mut h = *first.first_chunk::<64>()?;
            finish_simple_header(&mut h, f, sum)?;
            out.headers.extend_from_slice(&h);
        } else if let (Some(c), true) = (first.first_chunk::<128>(), payload <= 128) {
            let mut h = *c;
            finish_simple_header(&mut h, f, sum)?;
            out.headers.extend_from_slice(&h);
        } else {
            out.headers.extend_from_slice(first.get(..payload)?);
            let hdr = out.headers.get_mut(hs..)?;
            *hdr.get_mut(f.shape.l4 + 13)? |= f.flags_or;
            finish_plain_header(hdr, f.shape, f.len, sum)?;
        }
        out.headers.truncate(hs + payload);
        out.packets.push(BurstPacket {
            header: hs..hs + payload,
            meta: *given,
            segments: f.count,
            first: f.first,
        });
        // The metadata is rewritten where it lies (no copies of it).
        let m = &mut out.packets.last_mut()?.meta;
        plain_merged_meta(m, f.shape.v6, f.mss, false)
    }
}
