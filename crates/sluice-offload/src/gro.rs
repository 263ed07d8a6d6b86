//! Software GRO: coalescing a flow's consecutive segments into one large packet, with the merge
//! decisions of Linux 6.18 (`dev_gro_receive`, `inet_gro_receive`, `ipv6_gro_receive`,
//! `tcp_gro_receive`, `udp_gro_receive_segment`, the VXLAN/Geneve/GRE receive hooks).
//!
//! # Model
//!
//! A [`GroEngine`] serves one port or queue. It is fed frames one at a time
//! ([`GroEngine::receive`]) or a batch at a time ([`GroEngine::receive_batch`]) and holds at most
//! one growing packet per flow, in a table of at most [`GroConfig::max_flows`] flows. Finished
//! packets (merged or passed through) go to an output queue that the caller drains
//! ([`GroEngine::pop_output`], [`GroEngine::drain_output`]). The engine reads no clock: the
//! caller passes `now` (poll cycles, nanoseconds — any monotonic unit it also uses for
//! [`GroConfig::max_age`]). Everything is deterministic.
//!
//! # Output order
//!
//! Packets leave in the order in which they are *finished*: a frame that cannot be held (wrong
//! protocol, flags that end a packet on their own, a bad checksum, …) is finished on arrival; a
//! held packet is finished when a segment ends it (short segment, PSH/FIN/URG/RST/SYN), when a
//! segment of its flow cannot join it (it is then finished *before* that segment, so a flow's
//! bytes never reorder), when it reaches 64 KiB, when it is evicted, and at a flush. A flush
//! finishes the held packets oldest first (by the arrival of their first segment). Frames of
//! different flows may therefore leave in a different order than they arrived — as with any GRO —
//! but each flow's frames leave in arrival order. Linux lets a frame that its IP layer refuses to
//! coalesce (IP options, a fragment, a bad IPv4 header checksum) overtake the held packet of its
//! flow; Sluice finishes that held packet first instead.
//!
//! # Merge rules (TCP)
//!
//! A flow is what Linux calls `same_flow`: the Ethernet header including every VLAN tag (any
//! depth, every TPID, PCP and DEI included), the IP addresses and protocol (for IPv6 also the
//! version word without the traffic class, so the flow label, and every extension header byte),
//! the TCP ports, and for a tunnel the outer headers as well: outer UDP ports and whether the
//! outer UDP checksum is in use, the whole VXLAN/Geneve/GRE header (VNI, key, options) and the
//! inner Ethernet header. A segment of a flow joins its held packet only when (else the held
//! packet is finished and the segment starts a new one, or passes if it may not be held):
//!
//! - it carries no CWR, and its TCP data offset, flags other than CWR/FIN/PSH and **window**
//!   equal the first segment's (Linux compares the whole 4th header word), its ACK number is the
//!   same and every TCP option byte is identical;
//! - every IP header agrees with the first: IPv4 TTL, TOS (DSCP and ECN), DF, and the ID rule of
//!   6.18 (`inet_gro_flush`): the second segment decides whether the flow uses a fixed ID (same
//!   ID as the first, any DF) or an incrementing one (first ID + n for the n-th segment, modulo
//!   2¹⁶), separately for an outer and an inner IPv4 header; IPv6 traffic class and hop limit;
//! - its sequence number is exactly the end of the held data;
//! - its payload is 1 byte to the first segment's payload size (`mss`); a shorter segment joins
//!   and finishes the packet; a segment with no payload never joins;
//! - the merged frame stays within 64 KiB: the frame less its 14-byte Ethernet header is at most
//!   65 535 bytes (Linux: `p->len + len < 65536`).
//!
//! PSH, FIN, URG, RST and SYN finish the packet (a segment carrying them joins if it may, then
//! the packet leaves; alone it is not held). CWR never merges at all: it finishes the held packet
//! and passes alone (Linux 6.18 does not hold a CWR segment either, so merged packets never carry
//! CWR and are never marked ECN). A frame that is never held: IPv4
//! with options or a fragment, an IPv6 fragment or AH header (hop-by-hop, routing and destination
//! options are fine, and must match), a frame longer than its IP packet (Ethernet padding), any
//! checksum `Bad` (it keeps its status), an `Unknown` L4 checksum when software verification is
//! off, a GRE header with checksum, sequence or routing bits.
//!
//! # UDP (off by default)
//!
//! Linux forwarding UDP GRO (`rx-udp-gro-forwarding`): datagrams of one flow (ports and the IP
//! rules above) with a non-zero checksum are merged while they have the first datagram's length;
//! a longer one finishes the held packet and starts a new one; a shorter one joins and finishes
//! it; at most 64 datagrams per packet. The result is a USO packet ([`GsoType::UdpL4`]). UDP inside
//! a tunnel is not merged.
//!
//! # Checksums of merged packets
//!
//! Every segment's checksums are known before it joins (given by the caller's metadata, as a NIC
//! with rx checksum offload reports them, or verified here in software when `Unknown` and
//! [`GroConfig::verify_checksums`] is on). A merged packet gets:
//!
//! - IPv4 header checksums recomputed (20 bytes): `Good`;
//! - the L4 checksum (inner L4 in a tunnel) `Good` with the full, correct value when every segment
//!   was `Good` — computed from header sums only: a verified segment's payload sums to the
//!   complement of its pseudo-header and header, so no payload byte is read again — or `Partial`
//!   (the pseudo-header sum in the field, `csum_start`/`csum_offset` set, as Linux's
//!   `CHECKSUM_PARTIAL` and `virtio_net_hdr` `NEEDS_CSUM`) when any segment was `Partial`;
//! - an outer UDP tunnel checksum in use: `Good` and complete when the inner is `Good` (from
//!   header sums, as local checksum offload does), `Partial` (pseudo-header seeded) otherwise.
//!
//! A packet that leaves unmerged keeps its frame bytes; its metadata gains the verdicts computed
//! here.
//!
//! # Bounded memory
//!
//! At most [`GroConfig::max_flows`] packets are held, each at most 64 KiB plus headers; holding a
//! new flow in a full table evicts the oldest held packet (counted). At most
//! [`GroConfig::max_held_packets`] segments are held in total (the oldest packet is finished
//! when that is exceeded). Buffers are pooled: a finished packet's buffer returns to the pool when
//! the caller drains it (or [`GroEngine::recycle`]s it), so steady state allocates nothing. The
//! output queue holds what was finished since the last drain.
//!
//! # How it is fast (the decisions stay the general path's)
//!
//! - Held packets live in a fixed slab of records reused in place (never moved), in arrival
//!   order in a small index list, found through an open-addressing table keyed by a cheap flow
//!   hash (innermost ports and addresses; the full key is compared on a hit).
//! - A *plain* segment (untagged Ethernet, IPv4 without options or IPv6 without extension
//!   headers, TCP, no padding) is read at fixed offsets without the full parser; its result is
//!   the parser's, which a property test checks. Every other frame takes `sluice_wire::parse`.
//! - The fast lane: a 64-entry hint (4 frame bytes → held packet) or the flow hash finds the held
//!   packet, and one masked comparison of up to 128 header bytes with its first segment's
//!   (vectorised) proves the same flow and every "must be identical" rule at once. From the
//!   second segment on, the comparison also covers the next in-sequence, full-size segment's
//!   IP length (the prediction; its TCP sequence number and IPv4 ID are two scalar compares), so
//!   such a segment joins after a few more checks. A frame that fails anything takes the
//!   general path, which decides.
//! - Checksums of merged packets come from header sums (payloads are never summed again); the
//!   fast lane defers even the per-segment fold. Work a packet may never need (the comparison
//!   view, the first segment's sums) is done when its second segment comes.
//! - Burst mode copies no payload: output packets are rewritten headers plus pieces of the
//!   input frames (a chain per packet, walked by [`GroBurst::pieces`]); a packet of one segment
//!   is its input frame as it is.
//! - Burst mode's simple lane: a burst made only of plain, device-verified TCP data segments
//!   that each extend their flow in order is coalesced without held records (a per-burst flow
//!   table; one packet per flow), with the general pass's decisions; any other frame sends the
//!   whole burst to the general pass.

use std::collections::VecDeque;

use sluice_checksum::{combine, sum};
use sluice_packet::verify::{verify_ip, verify_l4};
use sluice_packet::{CsumStatus, GsoType, Level, OffloadMeta, Slot, Verdict};
use sluice_wire::{ip_proto, Headers, L3Kind, Layer, Layout, ParseConfig, TunnelKind};

/// Largest IP packet a merged frame may carry: frame length less the Ethernet header.
const MAX_IP_LEN: usize = 65_535;
/// Length of the outer Ethernet header counted out of the 64 KiB limit (Linux `p->len`).
const ETH_HLEN: usize = 14;
/// Most datagrams merged into one UDP packet (Linux `UDP_GRO_CNT_MAX`).
const UDP_GRO_CNT_MAX: u16 = 64;
/// Capacity of a pooled buffer: the largest merged frame and some headroom.
const BUF_CAPACITY: usize = 65_536 + 512;

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_PSH: u8 = 0x08;
const TCP_URG: u8 = 0x20;
const TCP_CWR: u8 = 0x80;
/// Flags that finish a packet (Linux `out_check_final`).
const TCP_FINISHING: u8 = TCP_URG | TCP_PSH | TCP_RST | TCP_SYN | TCP_FIN;

/// Engine settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroConfig {
    /// Most packets held at once (one per flow). A new flow in a full table evicts the oldest.
    pub max_flows: usize,
    /// Most segments held in total over all flows; beyond it the oldest held packet is finished.
    pub max_held_packets: usize,
    /// Age, in the caller's `now` units, at which [`GroEngine::end_batch`] finishes a held packet.
    /// `0`: every batch end finishes every held packet (Linux's behaviour at the end of a poll).
    pub max_age: u64,
    /// Merge TCP (default on).
    pub tcp: bool,
    /// Merge UDP datagrams into USO packets (default off: some receivers mishandle them).
    pub udp: bool,
    /// Verify `Unknown` checksums in software before merging (default on). When off, only
    /// segments whose metadata says `Good` or `Partial` are merged.
    pub verify_checksums: bool,
    /// Which UDP ports are VXLAN and Geneve, and whether tunnels are merged at all.
    pub parse: ParseConfig,
}

impl Default for GroConfig {
    fn default() -> Self {
        GroConfig {
            max_flows: 64,
            max_held_packets: 4096,
            max_age: 0,
            tcp: true,
            udp: false,
            verify_checksums: true,
            parse: ParseConfig::DEFAULT,
        }
    }
}

/// Why a held packet was finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushReason {
    /// End of a batch ([`GroEngine::end_batch`] with `max_age` 0).
    BatchEnd,
    /// Held for [`GroConfig::max_age`] or longer.
    Age,
    /// The 64 KiB limit, a segment shorter than the first, or the UDP datagram limit.
    Size,
    /// A segment with PSH, FIN, URG, RST or SYN.
    Flags,
    /// A frame of the same flow that could not join (sequence gap, different ACK, options, IP
    /// fields, CWR, a frame that may not be merged at all).
    Mismatch,
    /// The flow table or the held-segment budget was full.
    Evicted,
    /// [`GroEngine::flush`] called by the owner.
    Manual,
}

/// Packets finished per [`FlushReason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushCounts {
    /// [`FlushReason::BatchEnd`].
    pub batch_end: u64,
    /// [`FlushReason::Age`].
    pub age: u64,
    /// [`FlushReason::Size`].
    pub size: u64,
    /// [`FlushReason::Flags`].
    pub flags: u64,
    /// [`FlushReason::Mismatch`].
    pub mismatch: u64,
    /// [`FlushReason::Evicted`].
    pub evicted: u64,
    /// [`FlushReason::Manual`].
    pub manual: u64,
}

impl FlushCounts {
    fn bump(&mut self, reason: FlushReason) {
        let c = match reason {
            FlushReason::BatchEnd => &mut self.batch_end,
            FlushReason::Age => &mut self.age,
            FlushReason::Size => &mut self.size,
            FlushReason::Flags => &mut self.flags,
            FlushReason::Mismatch => &mut self.mismatch,
            FlushReason::Evicted => &mut self.evicted,
            FlushReason::Manual => &mut self.manual,
        };
        *c += 1;
    }
}

/// Engine counters (coverage-counter style: what an operator reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroStats {
    /// Frames received.
    pub frames_in: u64,
    /// Packets put on the output queue (merged or not).
    pub packets_out: u64,
    /// Segments that joined a held packet (a packet of k segments counts k − 1).
    pub merged_segments: u64,
    /// Output packets made of two or more segments.
    pub merged_packets: u64,
    /// Frames passed through because they may not be merged (protocol, IP options, fragments,
    /// padding, unverifiable checksums, flags on a lone segment, …).
    pub not_mergeable: u64,
    /// Frames with a `Bad` checksum (given or found), passed through unchanged.
    pub bad_checksum: u64,
    /// Held packets finished, by reason.
    pub flushed: FlushCounts,
    /// Bursts [`GroEngine::coalesce_burst`] coalesced whole in its simple lane (the others took
    /// the general pass).
    pub simple_bursts: u64,
}

/// A finished packet on the output queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroPacket {
    /// The frame (merged, or the received bytes unchanged).
    pub frame: Vec<u8>,
    /// Its metadata: checksum statuses, and for a merged packet the GSO type and segment size.
    pub meta: OffloadMeta,
    /// How many received frames it is made of.
    pub segments: u16,
}

/// The GRO engine of one port or queue. See the [module documentation](self).
#[derive(Debug)]
pub struct GroEngine {
    cfg: GroConfig,
    /// Held packets' records, reused in place (never moved): at most `max_flows`.
    slab: Vec<Held>,
    /// Slab indices of the held packets in arrival order of their first segments. A held
    /// packet's "index" `i` everywhere below is its slab index.
    order: Vec<u32>,
    /// Flow hash → slab index of the held packets.
    index: FlowIndex,
    /// Fast-path masks of the plain shapes.
    plain_masks: Box<PlainMasks>,
    /// [`GroEngine::quick_join`]'s hint: slab index by 4 frame bytes (see [`port_cache_index`]).
    port_cache: [u32; PORT_CACHE],
    /// Free slab records.
    free: Vec<u32>,
    /// Fresh metadata ([`OffloadMeta::from_layout`]) of a plain TCP/IPv4 and TCP/IPv6 frame.
    plain_meta: [OffloadMeta; 2],
    out: VecDeque<GroPacket>,
    pool: Vec<Vec<u8>>,
    held_segments: usize,
    stats: GroStats,
    burst: BurstState,
    /// [`GroEngine::simple_burst`]'s working state (taken out while it runs).
    simple: Option<Box<SimpleState>>,
}

/// L4 of the merged protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
}

/// One IP header's fields that must agree for a merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct IpFields {
    v6: bool,
    /// IPv4 TTL / IPv6 hop limit.
    ttl: u8,
    /// IPv4 TOS / IPv6 traffic class.
    tos: u8,
    df: bool,
    id: u16,
}

/// Everything about one received frame that the merge rules use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Info {
    proto: Option<Proto>,
    /// IP header offsets, outer then inner (`ip[1]` only in a tunnel).
    l3: [usize; 2],
    ip: [IpFields; 2],
    levels: usize,
    /// Tunnel: (kind, outer L4 offset, tunnel header offset, header length, inner L2).
    tunnel: Option<TunnelInfo>,
    /// Innermost L4 header and payload offsets, and the frame end.
    l4: usize,
    payload: usize,
    end: usize,
    seq: u32,
    ack: u32,
    /// TCP 4th word (data offset, flags, window).
    word3: u32,
    flags: u8,
    udp_len: u16,
    hash: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TunnelInfo {
    kind: TunnelKind,
    outer_l4: usize,
    offset: usize,
    len: usize,
    inner_l2: Option<usize>,
    outer_csum: bool,
}

impl Info {
    fn payload_len(&self) -> usize {
        self.end.saturating_sub(self.payload)
    }

    fn innermost(&self) -> usize {
        self.levels.saturating_sub(1)
    }
}

/// One held packet.
#[derive(Debug, Default)]
struct Held {
    info: Info,
    /// The merged frame (copying mode), or only the first segment's headers (burst mode).
    buf: Vec<u8>,
    /// Length of the merged frame so far.
    len: usize,
    /// Burst mode: the first and last payload pieces ([`NO_PIECE`] in copying mode).
    first_piece: u32,
    last_piece: u32,
    meta: OffloadMeta,
    count: u16,
    mss: usize,
    next_seq: u32,
    fixed_id: [bool; 2],
    /// Whether every segment's L4 checksum was `Good` (else some was `Partial`).
    all_good: bool,
    /// Ones'-complement sum of the merged payload (valid while `all_good`), less the deferred
    /// part: see [`Held::payload_sum_total`].
    payload_sum: u16,
    /// Deferred payload sums of fast-lane segments at even payload offsets: their count and the
    /// unfolded sum of their varying header words and TCP lengths. Each such segment's payload
    /// sums to minus (`fixed_sum` + its varying words + its length), so all of them together
    /// to minus (`deferred_n` × `fixed_sum` + `deferred_acc`); folded once at the end.
    deferred_n: u64,
    deferred_acc: u64,
    /// Whether this record holds a packet (records are reused; the port cache may point at a
    /// free one).
    live: bool,
    /// Whether the packet is plain ([`plain_tcp`]'s shape), so the fast lane may take it.
    plain: bool,
    /// Prediction on (plain packets from their second segment on): the compared bytes include
    /// the next full-size in-sequence segment's IP length, IPv4 ID and TCP sequence number, so
    /// one comparison settles flow, order, size and the ID rule. A segment that differs (the
    /// last, short one, or one out of order) takes the checks one by one.
    pred: bool,
    payload_bytes: usize,
    cwr: bool,
    born: u64,
    /// The fast path's view of the first segment's headers: 64-bit words and the mask of the
    /// bits that must be equal (`cmp_words` 0: no fast path for this packet). Computed when a
    /// frame of the flow first arrives (`view_done`), not for packets that stay alone.
    view_done: bool,
    /// The reference header bytes (zero past the headers); compared under `cmp_mask`.
    cmp_ref: HeadBytes,
    cmp_mask: [u64; CMP_WORDS],
    cmp_words: usize,
    /// The first segment's TCP/UDP ports (the fast path's first test).
    ports: u32,
    /// TCP: the folded ones'-complement sum of the first segment's pseudo-header without its
    /// length and of its TCP header without the words the fast path lets vary or that
    /// [`varying_words`] takes (sequence number, data offset/flags/window, checksum, urgent
    /// pointer). A fast-path segment has the same bytes elsewhere, so its payload sum costs a
    /// few additions ([`fast_payload_sum`]). Computed when a second segment joins.
    fixed_sum: u32,
}

impl Held {
    /// The payload sum with the deferred fast-lane segments folded in.
    fn payload_sum_total(&self) -> u16 {
        with_deferred(
            self.payload_sum,
            self.deferred_n,
            self.fixed_sum,
            self.deferred_acc,
        )
    }

    /// The first segment's payload sum and (TCP) [`Held::fixed_sum`], from its headers (still
    /// as received in `buf`), when a second segment joins; clears `all_good` if impossible.
    fn first_sums(&mut self) {
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
    fn ensure_view(&mut self, plain: &PlainMasks) {
        if !self.view_done {
            self.build_view(plain);
        }
    }

    #[inline(never)]
    fn build_view(&mut self, plain: &PlainMasks) {
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
    fn start_prediction(&mut self) {
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
    fn predicted(&self, frame: &[u8], t: &[u8; 20]) -> bool {
        if be32_in(t, 4) != self.next_seq {
            return false;
        }
        if self.info.ip[0].v6 {
            return true;
        }
        let step = if self.fixed_id[0] { 0 } else { self.count };
        let id = self.info.ip[0].id.wrapping_add(step);
        be16(frame, ETH_HLEN + 4) == Some(id)
    }
}

/// An open-addressing hash table (linear probing, backward-shift deletion) from flow hash to
/// the slab index of the held packet: at least twice as many buckets as `max_flows`, so probes
/// stay short and there is always an empty bucket. Fixed size: no allocation after `new`.
#[derive(Debug)]
struct FlowIndex {
    buckets: Vec<Bucket>,
    mask: usize,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    hash: u64,
    /// Slab index; [`EMPTY`] for a free bucket.
    slot: u32,
}

const EMPTY: u32 = u32::MAX;
const FREE: Bucket = Bucket {
    hash: 0,
    slot: EMPTY,
};

impl FlowIndex {
    fn new(max_flows: usize) -> Self {
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
    fn home(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.mask
    }

    fn clear(&mut self) {
        self.buckets.fill(FREE);
    }

    fn insert(&mut self, hash: u64, slot: u32) {
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

    fn remove(&mut self, hash: u64, slot: u32) {
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
    fn first(&self, hash: u64) -> Option<usize> {
        let mut p = self.probe(hash);
        self.next(&mut p, hash)
    }

    /// A probe: (bucket, buckets left).
    #[inline(always)]
    fn probe(&self, hash: u64) -> (usize, usize) {
        (self.home(hash), self.buckets.len())
    }

    /// The next held packet with this hash along the probe.
    #[inline(always)]
    fn next(&self, p: &mut (usize, usize), hash: u64) -> Option<usize> {
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

/// The fast-path masks of the plain shapes ([`plain_tcp`]), by IP version and TCP data
/// offset, computed once ([`fast_view`] gives the same for a plain packet).
#[derive(Debug)]
struct PlainMasks {
    masks: [[[u64; CMP_WORDS]; 16]; 2],
}

impl PlainMasks {
    fn new() -> Self {
        let mut masks = [[[0u64; CMP_WORDS]; 16]; 2];
        for (v, per_version) in masks.iter_mut().enumerate() {
            let v6 = v == 1;
            for (doff, m) in per_version.iter_mut().enumerate().skip(5) {
                let info = plain_info(v6, doff);
                let frame = [0u8; CMP_WORDS * 8];
                let mut r = [0u8; CMP_WORDS * 8];
                fast_view(&frame, &info, &mut r, m);
            }
        }
        PlainMasks { masks }
    }

    /// The mask of a held packet if it is plain.
    #[inline(always)]
    fn get(&self, info: &Info) -> Option<&[u64; CMP_WORDS]> {
        let v6 = info.ip[0].v6;
        let plain = info.proto == Some(Proto::Tcp)
            && info.levels == 1
            && info.tunnel.is_none()
            && info.l3[0] == ETH_HLEN
            && info.l4 == if v6 { 54 } else { 34 };
        if !plain {
            return None;
        }
        let doff = info.payload.checked_sub(info.l4)? / 4;
        self.masks.get(usize::from(v6))?.get(doff)
    }
}

/// The [`Info`] shape of a plain segment (for [`PlainMasks`]).
fn plain_info(v6: bool, doff: usize) -> Info {
    let l4 = if v6 { 54 } else { 34 };
    Info {
        proto: Some(Proto::Tcp),
        l3: [ETH_HLEN, 0],
        ip: [
            IpFields {
                v6,
                ..IpFields::default()
            },
            IpFields::default(),
        ],
        levels: 1,
        l4,
        payload: l4 + doff * 4,
        ..Info::default()
    }
}

/// What [`GroEngine::quick_join`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// Joined its held packet.
    Joined,
    /// It looks plain and no held packet has its flow hash (the value): it starts a flow.
    NoFlow(u64),
    /// Anything else: the general path decides.
    Other,
}

/// Entries of [`GroEngine::port_cache`].
const PORT_CACHE: usize = 64;

/// The port cache entry for 4 frame bytes (a multiplicative hash).
#[inline(always)]
fn port_cache_index(b: &[u8]) -> usize {
    let v = b.first_chunk::<4>().map_or(0, |c| u32::from_ne_bytes(*c));
    (v.wrapping_mul(0x9e37_79b1) >> 26) as usize
}

/// No piece: a held packet in copying mode, or the end of a piece chain.
const NO_PIECE: u32 = u32::MAX;

/// A link not yet written.
const FREE_LINK: Link = Link {
    frame: 0,
    start: 0,
    end: 0,
    next: NO_PIECE,
};

/// One payload piece of a held packet in burst mode, chained per packet.
#[derive(Debug, Clone, Copy)]
struct Link {
    frame: u32,
    start: u32,
    end: u32,
    next: u32,
}

impl BurstState {
    /// Records the current frame's payload piece `start..end`, unchained; returns its link.
    #[inline(always)]
    fn link(&mut self, start: usize, end: usize) -> u32 {
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
struct Chain<'a> {
    links: &'a [Link],
    next: u32,
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
const SIMPLE_MAX: usize = 64;
/// Places of its flow table (at least twice [`SIMPLE_MAX`], a power of two).
const SIMPLE_SLOTS: usize = 128;

/// [`GroEngine::simple_burst`]'s flows, their references and the burst's links, in arrays of
/// [`SIMPLE_MAX`] indexed modulo their size (so no index needs a check). Entries are written
/// before they are read: flow `i` when the burst's `i`-th flow starts, link `k` when frame `k`
/// is taken.
#[derive(Debug)]
struct SimpleState {
    flows: [SimpleFlow; SIMPLE_MAX],
    refs: [SimpleRef; SIMPLE_MAX],
    links: [Link; SIMPLE_MAX],
}

/// One flow of a burst in [`GroEngine::simple_burst`]: its packet so far.
#[derive(Debug, Clone, Copy, Default)]
struct SimpleFlow {
    hash: u64,
    /// The first segment's frame index (also its link's), and the last segment's link.
    first: u32,
    last_link: u32,
    shape: PlainShape,
    /// The first segment's TCP data offset in words (its [`PlainMasks`] entry).
    doff: usize,
    /// The first segment's frame length and payload length (every full-size segment's).
    end: usize,
    mss: usize,
    /// The first segment's IPv4 ID, the next segment's, and the step between them (1, or 0
    /// once the second segment repeated the first's ID: Linux's rule).
    id0: u16,
    next_id: u16,
    id_step: u16,
    count: u16,
    /// Merged frame length so far.
    len: usize,
    next_seq: u32,
    /// FIN and PSH of the segments joined (ORed into the header, as Linux does).
    flags_or: u8,
    /// As [`Held::fixed_sum`] (but not folded), [`Held::payload_sum`] and
    /// [`Held::deferred_acc`]; the segments summed at once (odd payload offsets) are counted
    /// instead of the deferred ones (the rest of `count`).
    fixed_sum: u64,
    payload_sum: u16,
    odd_n: u64,
    deferred_acc: u64,
    /// The deferred segments' data offset/flags/window and checksum/urgent pointer words,
    /// summed as loaded (little-endian): the folded sum is the byte-swapped sum of the
    /// big-endian words (RFC 1071's byte-order independence), so no swap per segment.
    deferred_le: u64,
    done: bool,
    /// From the second segment on, for headers of at most 64 bytes: the flow's [`SimpleRef`]
    /// holds the first segment's first 64 bytes and the mask's first eight words.
    inline: bool,
}

/// The comparison reference of a [`SimpleFlow`] (kept apart and reused across bursts, so a
/// flow that stays alone costs no copy).
#[derive(Debug, Clone, Copy)]
struct SimpleRef {
    r: [u8; 64],
    m: [u64; 8],
}

impl SimpleFlow {
    /// The payload sum with the deferred segments folded in (as [`Held::payload_sum_total`]).
    fn payload_sum_total(&self) -> u16 {
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

/// A payload sum with `n` deferred segments folded in: each such segment's payload sums to
/// minus (`fixed_sum` + its varying words + its length), so all of them to minus
/// (`n` × `fixed_sum` + `acc`) (see [`Held::deferred_acc`]).
#[inline]
fn with_deferred(payload_sum: u16, n: u64, fixed_sum: u32, acc: u64) -> u16 {
    if n == 0 {
        return payload_sum;
    }
    let pending = n.wrapping_mul(u64::from(fixed_sum)).wrapping_add(acc);
    combine(payload_sum, !fold64(pending))
}

/// Whether `frame`'s headers equal flow `f`'s first segment's (`first`) under its plain
/// fast-path mask; `None` when a frame is too short for the comparison.
#[inline(always)]
fn simple_same(
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
struct BurstState {
    active: bool,
    index: u32,
    /// The output being built (the caller's, swapped in), links included.
    out: GroBurst,
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
    /// Its metadata, as for [`GroPacket::meta`].
    pub meta: OffloadMeta,
    /// How many input frames it is made of.
    pub segments: u16,
    /// Its first payload piece's link ([`GroBurst::pieces`] follows the chain).
    first: u32,
}

/// The result of [`GroEngine::coalesce_burst`]: packets as header bytes plus pieces of the input
/// frames, for scatter-gather output (`writev` to a TAP, a NIC descriptor chain). Reuse one value
/// across bursts: its vectors keep their capacity.
#[derive(Debug, Default, Clone)]
pub struct GroBurst {
    headers: Vec<u8>,
    /// One link per input frame, at its index: the payload piece it gives and the next piece
    /// of the same packet (each packet's pieces are a chain, as an mbuf chain is).
    links: Vec<Link>,
    packets: Vec<BurstPacket>,
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

    fn clear(&mut self) {
        self.headers.clear();
        self.links.clear();
        self.packets.clear();
    }
}

/// The fast path's reference header bytes ([`Held::cmp_ref`]).
#[derive(Debug, Clone, Copy)]
struct HeadBytes([u8; CMP_WORDS * 8]);

impl Default for HeadBytes {
    fn default() -> Self {
        HeadBytes([0; CMP_WORDS * 8])
    }
}

/// The mask bits [`Held::start_prediction`] adds for a plain packet (little-endian words): the
/// IPv4 total length (frame bytes 16..18) or the IPv6 payload length (18..20).
const fn prediction_bits(v6: bool) -> [u64; CMP_WORDS] {
    let mut m = [0u64; CMP_WORDS];
    m[2] = if v6 { 0xffff_0000 } else { 0xffff };
    m
}

/// Most header words the fast path compares (128 bytes of headers).
const CMP_WORDS: usize = 16;

/// What to do with a frame whose flow holds a packet.
enum Decision {
    Join { finish: Option<FlushReason> },
    Refuse(FlushReason),
}

impl GroEngine {
    /// An engine with the given settings (`max_flows` and `max_held_packets` at least 1).
    pub fn new(cfg: GroConfig) -> Self {
        let cfg = GroConfig {
            max_flows: cfg.max_flows.max(1),
            max_held_packets: cfg.max_held_packets.max(1),
            ..cfg
        };
        let plain_meta = [
            OffloadMeta::from_layout(&plain_layout(Plain::V4)),
            OffloadMeta::from_layout(&plain_layout(Plain::V6)),
        ];
        GroEngine {
            plain_meta,
            slab: Vec::with_capacity(cfg.max_flows),
            order: Vec::with_capacity(cfg.max_flows),
            index: FlowIndex::new(cfg.max_flows),
            port_cache: [u32::MAX; PORT_CACHE],
            plain_masks: Box::new(PlainMasks::new()),
            free: Vec::with_capacity(cfg.max_flows),
            out: VecDeque::new(),
            pool: Vec::new(),
            held_segments: 0,
            stats: GroStats::default(),
            burst: BurstState::default(),
            simple: Some(Box::new(SimpleState {
                flows: [SimpleFlow::default(); SIMPLE_MAX],
                refs: [SimpleRef {
                    r: [0; 64],
                    m: [0; 8],
                }; SIMPLE_MAX],
                links: [FREE_LINK; SIMPLE_MAX],
            })),
            cfg,
        }
    }

    /// The settings.
    pub fn config(&self) -> &GroConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> &GroStats {
        &self.stats
    }

    /// How many packets are held (one per flow).
    pub fn held_flows(&self) -> usize {
        self.order.len()
    }

    /// How many segments are held in total.
    pub fn held_segments(&self) -> usize {
        self.held_segments
    }

    /// How many finished packets wait on the output queue.
    pub fn output_len(&self) -> usize {
        self.out.len()
    }

    /// Bytes of buffer capacity owned by the engine (held packets, output queue and pool): the
    /// figure that stays bounded whatever the input, as long as the output is drained.
    pub fn buffer_bytes(&self) -> usize {
        self.slab.iter().map(|h| h.buf.capacity()).sum::<usize>()
            + self.out.iter().map(|p| p.frame.capacity()).sum::<usize>()
            + self.pool.iter().map(Vec::capacity).sum::<usize>()
    }

    /// Receives a batch of frames, then ends the batch ([`GroEngine::end_batch`]). Each item is a
    /// frame and the metadata its receiver knows (rx checksum verdicts; use
    /// `OffloadMeta::default()` when nothing is known).
    pub fn receive_batch<'a, I>(&mut self, frames: I, now: u64)
    where
        I: IntoIterator<Item = (&'a [u8], OffloadMeta)>,
    {
        for (frame, meta) in frames {
            self.receive(frame, meta, now);
        }
        self.end_batch(now);
    }

    /// Burst (zero-copy) mode, the counterpart of DPDK's lightweight `rte_gro_reassemble_burst`:
    /// coalesces one burst with the same rules and output order as [`GroEngine::receive_batch`]
    /// and `max_age` 0, but copies no payload. Every output packet is its header bytes (the
    /// first segment's, rewritten: lengths, flags, checksums) followed by pieces of the input
    /// frames, in `out` (cleared first). Nothing is held across calls: packets held from
    /// [`GroEngine::receive`] are finished first (to the output queue, [`FlushReason::Manual`]).
    /// `metas[i]` goes with `frames[i]` (missing ones are `OffloadMeta::default()`).
    pub fn coalesce_burst(&mut self, frames: &[&[u8]], metas: &[OffloadMeta], out: &mut GroBurst) {
        self.flush_all(FlushReason::Manual);
        out.clear();
        std::mem::swap(&mut self.burst.out, out);
        if self.simple_burst(frames, metas) {
            std::mem::swap(&mut self.burst.out, out);
            return;
        }
        // One link per input frame at most, at the frame's index: no pushes per segment.
        self.burst.out.links.clear();
        self.burst.out.links.resize(frames.len(), FREE_LINK);
        self.burst.active = true;
        for (k, frame) in frames.iter().enumerate() {
            self.burst.index = u32::try_from(k).unwrap_or(u32::MAX);
            self.stats.frames_in += 1;
            let meta = metas.get(k);
            if let Some(m) = meta {
                if self.cfg.tcp && self.tight_join(frame, m) {
                    continue;
                }
            }
            let lane = if self.cfg.tcp {
                self.quick_join(frame, meta.unwrap_or(&OffloadMeta::default()))
            } else {
                Lane::Other
            };
            if lane == Lane::Joined {
                continue;
            }
            let meta = meta.copied().unwrap_or_default();
            if let Lane::NoFlow(hash) = lane {
                if self.start_fresh(frame, &meta, hash, 0) {
                    continue;
                }
            }
            self.receive_rest(frame, meta, 0, lane);
        }
        self.flush_all(FlushReason::BatchEnd);
        self.burst.active = false;
        std::mem::swap(&mut self.burst.out, out);
    }

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
    fn simple_burst(&mut self, frames: &[&[u8]], metas: &[OffloadMeta]) -> bool {
        if !self.cfg.tcp
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
    fn simple_scan(
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
            if end <= payload
                || if v6 {
                    meta.status(Slot::OuterIp) == CsumStatus::Bad
                } else {
                    meta.status(Slot::OuterIp) != CsumStatus::Good
                }
            {
                return None;
            }
            // The IP packet ends the frame; the ID rule (incrementing, or fixed from the second
            // segment on); in sequence, not longer than the first, room under 64 KiB.
            let t: &[u8; 20] = if v6 {
                if usize::from(u16::from_be_bytes([head[18], head[19]])) + ETH_HLEN + 40 != end {
                    return None;
                }
                frame.get(54..74)?.try_into().ok()?
            } else {
                if usize::from(u16::from_be_bytes([head[16], head[17]])) + ETH_HLEN != end {
                    return None;
                }
                let id = u16::from_be_bytes([head[18], head[19]]);
                if id != f.next_id {
                    // The second segment may repeat the first's ID: fixed IDs from then on.
                    if f.count != 1 || id != f.id0 {
                        return None;
                    }
                    f.next_id = id;
                    f.id_step = 0;
                }
                // (Any later refusal abandons the lane, so updating here is safe.)
                f.next_id = f.next_id.wrapping_add(f.id_step);
                head[34..54].try_into().ok()?
            };
            let len = end - payload;
            if be32_in(t, 4) != f.next_seq || len > f.mss || f.len - ETH_HLEN + len > MAX_IP_LEN {
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
            f.flags_or |= flags & (TCP_FIN | TCP_PSH);
            if track {
                held_segments += 1;
            }
            let finish = if flags & TCP_FINISHING != 0 {
                counts.flags += 1;
                true
            } else if len < f.mss {
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
    fn simple_start(
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
            id0: info.ip[0].id,
            next_id: info.ip[0].id.wrapping_add(1),
            id_step: 1,
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
    fn simple_output(
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

    /// Ends a batch: with [`GroConfig::max_age`] 0 every held packet is finished
    /// ([`FlushReason::BatchEnd`]); otherwise only those held for `max_age` or longer
    /// ([`FlushReason::Age`]).
    pub fn end_batch(&mut self, now: u64) {
        if self.cfg.max_age == 0 {
            self.flush_all(FlushReason::BatchEnd);
        } else {
            self.flush_aged(now);
        }
    }

    /// Finishes every held packet, oldest first, counting them under `reason`.
    pub fn flush(&mut self, reason: FlushReason) {
        self.flush_all(reason);
    }

    /// Finishes, oldest first, the held packets whose first segment arrived `max_age` or more
    /// before `now` ([`FlushReason::Age`]).
    pub fn flush_aged(&mut self, now: u64) {
        let max_age = self.cfg.max_age;
        self.flush_where(FlushReason::Age, |h| now.saturating_sub(h.born) >= max_age);
    }

    /// Takes the oldest finished packet. Give its buffer back with [`GroEngine::recycle`] to keep
    /// the engine allocation-free.
    pub fn pop_output(&mut self) -> Option<GroPacket> {
        self.out.pop_front()
    }

    /// Returns a buffer to the pool.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < self.cfg.max_flows.saturating_mul(2).max(64) {
            buf.clear();
            self.pool.push(buf);
        }
    }

    /// Hands every finished packet, in order, to `f`, and recycles their buffers.
    pub fn drain_output(&mut self, mut f: impl FnMut(&GroPacket)) {
        while let Some(p) = self.out.pop_front() {
            f(&p);
            self.recycle(p.frame);
        }
    }

    /// Receives one frame with the metadata its receiver knows.
    pub fn receive(&mut self, frame: &[u8], meta: OffloadMeta, now: u64) {
        self.stats.frames_in += 1;
        let lane = if self.cfg.tcp {
            self.quick_join(frame, &meta)
        } else {
            Lane::Other
        };
        if let Lane::NoFlow(hash) = lane {
            if self.start_fresh(frame, &meta, hash, now) {
                return;
            }
        }
        if lane != Lane::Joined {
            self.receive_rest(frame, meta, now, lane);
        }
    }

    /// A plain frame of a flow with nothing held ([`Lane::NoFlow`]), its metadata describing
    /// it with checksums known good: held as a new packet, as the general path would
    /// ([`GroEngine::receive_plain`] with its checks settled at once). `false`: not this case.
    #[inline(never)]
    fn start_fresh(&mut self, frame: &[u8], meta: &OffloadMeta, hash: u64, now: u64) -> bool {
        let v6 = be16(frame, 12) == Some(sluice_wire::ethertype::IPV6);
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
    fn plain_start_meta(&self, meta: &OffloadMeta, v6: bool) -> bool {
        let ip = meta.status(Slot::OuterIp);
        meta.status(Slot::OuterL4) == CsumStatus::Good
            && ip != CsumStatus::Bad
            && (v6 || ip != CsumStatus::Unknown)
            && !meta.csum_absent(Level::Outer)
            && meta.tunnel().is_none()
            && meta.offsets() == plain_offsets(v6)
    }

    /// [`GroEngine::receive`] after the fast lane.
    fn receive_rest(&mut self, frame: &[u8], mut meta: OffloadMeta, now: u64, lane: Lane) {
        if self.cfg.tcp {
            let known = match lane {
                Lane::NoFlow(hash) => Some(hash),
                _ => None,
            };
            if let Some(info) = plain_tcp(frame, known) {
                return self.receive_plain(frame, meta, &info, now, known.is_some());
            }
            if self.try_fast(frame, &meta) {
                return;
            }
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
    fn receive_plain(
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

    /// [`GroEngine::check_csums`] for a plain frame (one level, no tunnel), without building
    /// [`Headers`] unless a checksum must be verified in software.
    #[inline(always)]
    fn plain_csums(&self, frame: &[u8], info: &Info, meta: &mut OffloadMeta) -> Result<bool, bool> {
        let v6 = info.ip[0].v6;
        let [fresh4, fresh6] = &self.plain_meta;
        let fresh = if v6 { fresh6 } else { fresh4 };
        if meta.offsets() != plain_offsets(v6) || meta.tunnel().is_some() {
            *meta = adopt(*fresh, *meta);
        }
        // The common case first: a device verified both.
        if meta.status(Slot::OuterIp) == CsumStatus::Good
            && meta.status(Slot::OuterL4) == CsumStatus::Good
            && !meta.csum_absent(Level::Outer)
        {
            return Ok(true);
        }
        if meta.status(Slot::OuterIp) == CsumStatus::Unknown && !v6 {
            meta.rx_verdict(Slot::OuterIp, verify_ip(frame, &plain_headers(info, v6)));
        }
        if meta.status(Slot::OuterIp) == CsumStatus::Bad {
            return Err(true);
        }
        if meta.status(Slot::OuterL4) == CsumStatus::Unknown {
            let h = plain_headers(info, v6);
            self.settle_l4(frame, &h, false, Slot::OuterL4, meta);
        }
        match meta.status(Slot::OuterL4) {
            CsumStatus::Good if meta.csum_absent(Level::Outer) => Err(false),
            CsumStatus::Good => Ok(true),
            CsumStatus::Partial => Ok(false),
            CsumStatus::Bad => Err(true),
            CsumStatus::Unknown => Err(false),
        }
    }

    /// The tightest lane, tried first in burst mode: the held packet its port-cache hint names,
    /// with prediction on ([`Held::pred`]) and headers of at most 64 bytes, compared with the
    /// frame in one fixed-size 64-byte compare, then [`GroEngine::predicted_join`]. `false`
    /// (nothing changed) sends the frame down [`GroEngine::quick_join`], which decides it as
    /// before.
    #[inline(always)]
    fn tight_join(&mut self, frame: &[u8], meta: &OffloadMeta) -> bool {
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
    fn quick_join(&mut self, frame: &[u8], meta: &OffloadMeta) -> Lane {
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
        let ip_len = usize::from(u16::from_be_bytes([
            *ip.get(2).unwrap_or(&0),
            *ip.get(3).unwrap_or(&0),
        ]));
        let v6 = h.info.ip[0].v6;
        let mut fixed = h.fixed_id[0];
        if v6 {
            // IPv6 payload length (bytes 4..6 of the header).
            let plen = usize::from(u16::from_be_bytes([
                *ip.get(4).unwrap_or(&0),
                *ip.get(5).unwrap_or(&0),
            ]));
            if plen + ETH_HLEN + 40 != end {
                return Lane::Other;
            }
        } else {
            if ip_len + ETH_HLEN != end {
                return Lane::Other;
            }
            let id = u16::from_be_bytes([*ip.get(4).unwrap_or(&0), *ip.get(5).unwrap_or(&0)]);
            let offset = id.wrapping_sub(h.info.ip[0].id);
            fixed = fixed || (h.count == 1 && offset == 0);
            if offset != if fixed { 0 } else { h.count } {
                return Lane::Other;
            }
            match meta.status(Slot::OuterIp) {
                CsumStatus::Good | CsumStatus::Partial => {}
                CsumStatus::Bad => return Lane::Other,
                CsumStatus::Unknown => {
                    if sum(ip) != 0xffff {
                        return Lane::Other;
                    }
                }
            }
        }
        let seq = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
        let len = end.saturating_sub(payload);
        if seq != h.next_seq || len > h.mss || h.len.saturating_sub(ETH_HLEN) + len > MAX_IP_LEN {
            return Lane::Other;
        }
        let good = match meta.status(Slot::OuterL4) {
            CsumStatus::Good => true,
            CsumStatus::Partial => false,
            CsumStatus::Bad => return Lane::Other,
            CsumStatus::Unknown => {
                if !verify {
                    return Lane::Other;
                }
                let ok = pseudo_at(frame, ETH_HLEN, v6, ip_proto::TCP, end - l4)
                    .zip(frame.get(l4..))
                    .is_some_and(|(p, b)| combine(p, sum(b)) == 0xffff);
                if !ok {
                    return Lane::Other;
                }
                true
            }
        };
        h.fixed_id[0] = fixed;
        let flags = t[13];
        // Join (as `join`, fast).
        if good && h.all_good && h.count == 1 {
            h.first_sums();
        }
        fast_append(h, &mut self.burst, frame, t, good, len);
        let mss = h.mss;
        let both_good = good
            && (v6 || meta.status(Slot::OuterIp) == CsumStatus::Good)
            && meta.status(Slot::OuterL4) == CsumStatus::Good;
        if both_good && h.all_good && flags & TCP_FINISHING == 0 && len == mss {
            h.start_prediction();
        }
        self.held_segments += 1;
        self.stats.merged_segments += 1;
        if flags & TCP_FINISHING != 0 {
            self.finish(i, FlushReason::Flags);
        } else if len < mss {
            self.finish(i, FlushReason::Size);
        }
        self.enforce_budget();
        Lane::Joined
    }

    /// The fast lane for a held packet with prediction on ([`Held::pred`]) whose compared bytes
    /// the frame matched: it is the next full-size in-sequence segment with the right IPv4 ID
    /// if it also has the first segment's frame length (no padding), checksums verified `Good`
    /// and room under 64 KiB. Anything else takes the general path.
    #[inline(always)]
    fn predicted_join(&mut self, i: usize, frame: &[u8], meta: &OffloadMeta) -> Lane {
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
            || meta.status(Slot::OuterL4) != CsumStatus::Good
            || (!v6 && meta.status(Slot::OuterIp) != CsumStatus::Good)
            || h.len - ETH_HLEN + mss > MAX_IP_LEN
            || !h.all_good
        {
            return Lane::Other;
        }
        let flags = t[13];
        // `end == h.info.end`: a full-size segment, `mss` payload bytes.
        fast_append(h, &mut self.burst, frame, t, true, mss);
        self.held_segments += 1;
        self.stats.merged_segments += 1;
        if flags & TCP_FINISHING != 0 {
            self.finish(i, FlushReason::Flags);
        }
        self.enforce_budget();
        Lane::Joined
    }

    /// The held packet of a plain frame's flow, and whether its first segment's headers equal
    /// the frame's under the fast-path mask (which implies the same flow).
    #[inline]
    fn find_plain(&mut self, frame: &[u8], info: &Info) -> (Option<usize>, bool) {
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
    fn held(&self, i: usize) -> Option<&Held> {
        self.slab.get(i)
    }

    #[inline(always)]
    fn held_mut(&mut self, i: usize) -> Option<&mut Held> {
        self.slab.get_mut(i)
    }

    /// Joins a classified, checksum-settled, eligible frame to its flow's held packet, or holds
    /// it as a new packet, or passes it.
    #[inline]
    fn merge_or_hold(
        &mut self,
        frame: &[u8],
        meta: OffloadMeta,
        info: &Info,
        slot: Option<usize>,
        csum: bool,
        now: u64,
    ) {
        if let Some(i) = slot {
            match self.decide(i, frame, info) {
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

    // ---- the fast path ----

    /// The common case without parsing: a TCP segment whose headers equal a held packet's first
    /// segment except for the fields that change per segment (IP lengths, IDs and checksums,
    /// outer UDP length and checksum, TCP sequence number, PSH/FIN, checksum and urgent
    /// pointer) joins it directly. Equal bytes at equal offsets make the same flow and satisfy
    /// every "must be identical" rule, so the slow path would decide the same; anything else
    /// (including every refusal) is left to the slow path, which counts it. Returns whether the
    /// frame was consumed.
    fn try_fast(&mut self, frame: &[u8], meta: &OffloadMeta) -> bool {
        if !self.cfg.tcp {
            return false;
        }
        let mut hit = None;
        for &slot in &self.order {
            let Some(h) = self.slab.get_mut(slot as usize) else {
                break;
            };
            // The ports first: one load per held packet.
            if be32(frame, h.info.l4) != Some(h.ports) {
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
    fn fast_check(
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
        let mut fixed_id = h.fixed_id;
        // Lengths, IDs and IPv4 header checksums of every level.
        for lvl in 0..levels {
            let l3 = *info.l3.get(lvl)?;
            let ip = info.ip.get(lvl)?;
            if ip.v6 {
                if usize::from(be16(frame, l3 + 4)?) != end.checked_sub(l3 + 40)? {
                    return None;
                }
                continue;
            }
            if usize::from(be16(frame, l3 + 2)?) != end - l3 {
                return None;
            }
            let offset = be16(frame, l3 + 4)?.wrapping_sub(ip.id);
            let fixed = fixed_id.get_mut(lvl)?;
            *fixed = *fixed || (h.count == 1 && offset == 0);
            if offset != if *fixed { 0 } else { h.count } {
                return None;
            }
            match meta.status(Slot::ip(level_of(lvl))) {
                CsumStatus::Good | CsumStatus::Partial => {}
                CsumStatus::Bad => return None,
                CsumStatus::Unknown => {
                    if sum(frame.get(l3..l3 + 20)?) != 0xffff {
                        return None;
                    }
                }
            }
        }
        if let Some(t) = info.tunnel.filter(|t| t.kind != TunnelKind::Gre) {
            if usize::from(be16(frame, t.outer_l4 + 4)?) != end - t.outer_l4
                || (be16(frame, t.outer_l4 + 6)? != 0) != t.outer_csum
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
        if be32(frame, l4 + 4)? != h.next_seq
            || len > h.mss
            || h.len.saturating_sub(ETH_HLEN) + len > MAX_IP_LEN
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
        h.fixed_id = fixed_id;
        Some((end, flags, good, join_finish(flags, len, h.mss)))
    }

    /// [`GroEngine::fast_check`] for a plain frame ([`plain_tcp`] already checked its lengths)
    /// whose headers equal held packet `i`'s: the IPv4 ID rule and header checksum, sequence,
    /// size and the TCP checksum. Returns whether its TCP checksum is `Good` (else `Partial`)
    /// and whether it finishes the packet.
    #[inline(always)]
    fn plain_check(
        &mut self,
        i: usize,
        info: &Info,
        frame: &[u8],
        meta: &OffloadMeta,
    ) -> Option<(bool, Option<FlushReason>)> {
        let verify = self.cfg.verify_checksums;
        let h = self.held_mut(i)?;
        let len = info.end.checked_sub(info.payload)?;
        if info.seq != h.next_seq
            || len > h.mss
            || h.len.saturating_sub(ETH_HLEN) + len > MAX_IP_LEN
        {
            return None;
        }
        let mut fixed = h.fixed_id[0];
        if !info.ip[0].v6 {
            let offset = info.ip[0].id.wrapping_sub(h.info.ip[0].id);
            fixed = fixed || (h.count == 1 && offset == 0);
            if offset != if fixed { 0 } else { h.count } {
                return None;
            }
            match meta.status(Slot::OuterIp) {
                CsumStatus::Good | CsumStatus::Partial => {}
                CsumStatus::Bad => return None,
                CsumStatus::Unknown => {
                    if sum(frame.get(ETH_HLEN..ETH_HLEN + 20)?) != 0xffff {
                        return None;
                    }
                }
            }
        }
        let good = joining_csum(
            meta.status(Slot::OuterL4),
            verify,
            frame,
            (ETH_HLEN, info.ip[0].v6),
            info.l4,
            info.end,
        )?;
        h.fixed_id[0] = fixed;
        Some((good, join_finish(info.flags, len, h.mss)))
    }

    // ---- classification ----

    /// Parses a frame and extracts the merge fields; `None` when it is no TCP/UDP frame this
    /// engine merges.
    fn classify(&self, frame: &[u8], layout: &Layout) -> Option<Info> {
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
                    TunnelKind::Vxlan | TunnelKind::Geneve => be16(frame, outer_l4 + 6)? != 0,
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
                info.seq = be32(frame, l4 + 4)?;
                info.ack = be32(frame, l4 + 8)?;
                info.word3 = be32(frame, l4 + 12)?;
                info.flags = *frame.get(l4 + 13)?;
            }
            ip_proto::UDP if self.cfg.udp && info.tunnel.is_none() => {
                info.proto = Some(Proto::Udp);
                info.udp_len = be16(frame, l4 + 4)?;
            }
            _ => return None,
        }
        info.hash = flow_hash(frame, &info)?;
        Some(info)
    }

    /// Establishes the checksum state of a segment. `Ok(all_good)`: every checksum is good or
    /// partial (`all_good` false when the merged L4 one is partial). `Err(bad)`: the frame may not
    /// join (`bad`: some checksum is `Bad`).
    fn check_csums(
        &self,
        frame: &[u8],
        fresh: OffloadMeta,
        outer: &Headers,
        inner: Option<&Headers>,
        info: &Info,
        meta: &mut OffloadMeta,
    ) -> Result<bool, bool> {
        *meta = adopt(fresh, *meta);
        // IPv4 header checksums: always checked (20 bytes), as Linux does.
        let levels: &[(Slot, Slot, Option<&Headers>)] = &[
            (Slot::OuterIp, Slot::OuterL4, Some(outer)),
            (Slot::InnerIp, Slot::InnerL4, inner),
        ];
        for &(ip_slot, _, h) in levels.iter().take(info.levels) {
            let Some(h) = h else { return Err(false) };
            if meta.status(ip_slot) == CsumStatus::Unknown {
                meta.rx_verdict(ip_slot, verify_ip(frame, h));
            }
            if meta.status(ip_slot) == CsumStatus::Bad {
                return Err(true);
            }
        }
        // The outer UDP checksum of a tunnel, when in use.
        if let (Some(t), true) = (info.tunnel, info.levels == 2) {
            if t.outer_csum {
                let s = self.settle_l4(frame, outer, true, Slot::OuterL4, meta);
                match s {
                    CsumStatus::Good | CsumStatus::Partial => {}
                    CsumStatus::Bad => return Err(true),
                    CsumStatus::Unknown => return Err(false),
                }
            }
        }
        let (slot, h) = if info.levels == 2 {
            (Slot::InnerL4, inner)
        } else {
            (Slot::OuterL4, Some(outer))
        };
        let Some(h) = h else { return Err(false) };
        match self.settle_l4(frame, h, false, slot, meta) {
            CsumStatus::Good if meta.csum_absent(slot.level()) => Err(false),
            CsumStatus::Good => Ok(true),
            CsumStatus::Partial => Ok(false),
            CsumStatus::Bad => Err(true),
            CsumStatus::Unknown => Err(false),
        }
    }

    fn settle_l4(
        &self,
        frame: &[u8],
        h: &Headers,
        udp_tunnel: bool,
        slot: Slot,
        meta: &mut OffloadMeta,
    ) -> CsumStatus {
        if meta.status(slot) == CsumStatus::Unknown && self.cfg.verify_checksums {
            let (v, absent) = verify_l4(frame, h, udp_tunnel);
            if absent {
                meta.apply_verdicts(&absent_verdicts(slot));
            } else {
                meta.rx_verdict(slot, v);
            }
        }
        meta.status(slot)
    }

    /// Whether a frame with no held packet to join may be held (Linux: not flushed on its own).
    fn may_start(&self, info: &Info) -> bool {
        may_start(info)
    }

    fn find(&self, frame: &[u8], info: &Info) -> Option<usize> {
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

    // ---- the merge decision ----

    fn decide(&mut self, i: usize, frame: &[u8], info: &Info) -> Option<Decision> {
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

    // ---- held packets ----

    fn take_buf(&mut self) -> Vec<u8> {
        self.pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUF_CAPACITY))
    }

    fn start(&mut self, frame: &[u8], meta: OffloadMeta, info: &Info, good: bool, now: u64) {
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
    fn alloc_record(&mut self) -> u32 {
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
    fn hold(&mut self, slot: u32, frame: &[u8], meta: OffloadMeta, good: bool, now: u64) {
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
        h.cwr = info.flags & TCP_CWR != 0;
        h.ports = be32(frame, info.l4).unwrap_or(0);
        h.plain = info.proto == Some(Proto::Tcp)
            && info.levels == 1
            && info.tunnel.is_none()
            && info.l3[0] == ETH_HLEN
            && info.l4 == if info.ip[0].v6 { 54 } else { 34 };
        let hash = info.hash;
        h.buf = buf;
        h.len = frame.len();
        h.first_piece = first_piece;
        h.last_piece = last_piece;
        h.meta = meta;
        h.count = 1;
        h.fixed_id = [false; 2];
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
    fn join(&mut self, i: usize, frame: &[u8], end: usize, flags: u8, good: bool, fast: bool) {
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
                *f |= flags & (TCP_FIN | TCP_PSH);
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
    fn oldest(&self) -> Option<usize> {
        self.order.first().map(|&s| s as usize)
    }

    #[inline]
    fn enforce_budget(&mut self) {
        while self.held_segments > self.cfg.max_held_packets {
            match self.oldest() {
                Some(i) => self.finish(i, FlushReason::Evicted),
                None => break,
            }
        }
    }

    fn flush_all(&mut self, reason: FlushReason) {
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

    fn flush_where(&mut self, reason: FlushReason, pred: impl Fn(&Held) -> bool) {
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
    fn finish(&mut self, i: usize, reason: FlushReason) {
        let Some(k) = self.order.iter().position(|&s| s as usize == i) else {
            return;
        };
        self.order.remove(k);
        let hash = self.slab.get(i).map_or(0, |h| h.info.hash);
        self.index.remove(hash, i as u32);
        self.complete(i as u32, reason);
    }

    /// Finishes a held packet: fixes lengths and checksums of a merged one, queues it.
    fn complete(&mut self, slot: u32, reason: FlushReason) {
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

    fn push_link(&mut self, start: usize, end: usize) -> u32 {
        self.burst.link(start, end)
    }

    /// Passes a frame that may not join through, after finishing its flow's held packet.
    fn pass(&mut self, frame: &[u8], meta: OffloadMeta, slot: Option<usize>) {
        if let Some(i) = slot {
            self.finish(i, FlushReason::Mismatch);
        }
        self.stats.not_mergeable += 1;
        self.emit(frame, meta, 1);
    }

    fn emit(&mut self, frame: &[u8], meta: OffloadMeta, segments: u16) {
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

/// The 64-bit little-endian word at `off` (bytes past the frame read as zero).
#[inline(always)]
fn load_word(frame: &[u8], off: usize) -> u64 {
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

/// The fast path's reference words and mask for a held TCP packet: every header byte must be
/// equal except the per-segment fields (IP lengths, IDs and checksums, outer UDP length and
/// checksum, TCP sequence, PSH/FIN bits, checksum and urgent pointer). Headers longer than
/// [`CMP_WORDS`] words get no fast path (`words` 0).
fn fast_view(
    frame: &[u8],
    info: &Info,
    r: &mut [u8; CMP_WORDS * 8],
    m: &mut [u64; CMP_WORDS],
) -> usize {
    *r = [0; CMP_WORDS * 8];
    *m = [0; CMP_WORDS];
    let hl = info.payload;
    if info.proto != Some(Proto::Tcp) || !(8..=CMP_WORDS * 8).contains(&hl) {
        return 0;
    }
    let Some(hdr) = frame.get(..hl) else { return 0 };
    let mut head = [0u8; CMP_WORDS * 8];
    if let Some(d) = head.get_mut(..hl) {
        d.copy_from_slice(hdr);
    }
    let words = hl.div_ceil(8);
    for (k, w) in m.iter_mut().enumerate().take(words) {
        // Little-endian words: byte j of the word is bits 8j..8j+8; bytes past `hl` are ignored.
        let valid = hl - k * 8;
        *w = if valid >= 8 {
            !0
        } else {
            (1u64 << (8 * valid)) - 1
        };
    }
    // Keeps only the bits of `keep` in bytes a..b (a word at a time).
    let mut clear = |a: usize, b: usize, keep: u8| {
        let drop = u64::from_ne_bytes([!keep; 8]);
        let mut i = a;
        while i < b {
            let lo = i % 8;
            let n = (8 - lo).min(b - i);
            let bytes = if n == 8 {
                !0
            } else {
                ((1u64 << (8 * n)) - 1) << (8 * lo)
            };
            if let Some(w) = m.get_mut(i / 8) {
                *w &= !(bytes & drop);
            }
            i += n;
        }
    };
    for lvl in 0..info.levels.min(2) {
        let (Some(&l3), Some(ip)) = (info.l3.get(lvl), info.ip.get(lvl)) else {
            return 0;
        };
        if ip.v6 {
            clear(l3 + 4, l3 + 6, 0);
        } else {
            clear(l3 + 2, l3 + 6, 0);
            clear(l3 + 10, l3 + 12, 0);
        }
    }
    if let Some(t) = info.tunnel.filter(|t| t.kind != TunnelKind::Gre) {
        clear(t.outer_l4 + 4, t.outer_l4 + 8, 0);
    }
    let l4 = info.l4;
    clear(l4 + 4, l4 + 8, 0);
    clear(l4 + 13, l4 + 14, !(TCP_PSH | TCP_FIN));
    clear(l4 + 16, l4 + 20, 0);
    *r = head;
    words
}

/// Whether `frame`'s headers equal held packet `h`'s first segment's under the fast-path mask.
#[inline(always)]
fn same_headers(h: &Held, frame: &[u8]) -> bool {
    if frame.len() <= h.info.payload {
        return false;
    }
    // Branch-free over 8 or all 16 words (the mask and reference are zero past `cmp_words`),
    // which the compiler vectorises.
    if h.cmp_words <= 8 {
        if let (Some(head), Some(r), Some(m)) = (
            frame.first_chunk::<64>(),
            h.cmp_ref.0.first_chunk::<64>(),
            h.cmp_mask.first_chunk::<8>(),
        ) {
            return masked_equal(head, r, m);
        }
    } else if let Some(head) = frame.first_chunk::<128>() {
        return masked_equal(head, &h.cmp_ref.0, &h.cmp_mask);
    }
    same_headers_short(h, frame)
}

#[inline(always)]
fn masked_equal<const B: usize, const W: usize>(head: &[u8; B], r: &[u8; B], m: &[u64; W]) -> bool {
    let mut diff = 0u64;
    let (head, r) = (head.as_chunks::<8>().0, r.as_chunks::<8>().0);
    for ((c, r), m) in head.iter().zip(r.iter()).zip(m.iter()) {
        diff |= (u64::from_le_bytes(*c) ^ u64::from_le_bytes(*r)) & m;
    }
    diff == 0
}

/// [`same_headers`] for a frame too short for the fixed-size comparison.
#[cold]
#[inline(never)]
fn same_headers_short(h: &Held, frame: &[u8]) -> bool {
    let mut diff = 0u64;
    for k in 0..h.cmp_words.min(CMP_WORDS) {
        let (r, m) = (
            load_word(&h.cmp_ref.0, k * 8),
            h.cmp_mask.get(k).copied().unwrap_or(0),
        );
        diff |= (load_word(frame, k * 8) ^ r) & m;
    }
    diff == 0
}

/// The fast lane's join of `frame` (TCP header `t`, `len` payload bytes ending the frame) to
/// held packet `h`: its payload sum (deferred when it starts at an even offset; `good`: its L4
/// checksum was `Good`), its payload (copied, or a piece linked in burst mode), the counts,
/// the next sequence number and the FIN/PSH flags. Shared by [`GroEngine::quick_join`] and
/// [`GroEngine::predicted_join`].
#[inline(always)]
fn fast_append(
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
        *f |= t[13] & (TCP_FIN | TCP_PSH);
    }
}

/// The offsets of a plain TCP/IPv4 or TCP/IPv6 frame (as `OffloadMeta::from_layout` gives
/// them; a unit test checks).
#[inline(always)]
const fn plain_offsets(v6: bool) -> sluice_packet::Offsets {
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
enum Plain {
    V4,
    V6,
}

/// The layout of a plain TCP frame of either IP version, for its fresh metadata.
fn plain_layout(kind: Plain) -> Layout {
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
fn plain_headers(info: &Info, v6: bool) -> Headers {
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

/// Whether a frame with no held packet to join may be held (Linux: not flushed on its own).
#[inline]
fn may_start(info: &Info) -> bool {
    match info.proto {
        Some(Proto::Tcp) => info.payload_len() >= 1 && info.flags & (TCP_FINISHING | TCP_CWR) == 0,
        Some(Proto::Udp) => true,
        None => false,
    }
}

/// [`plain_tcp`] into `out` (left unspecified when `false`).
#[inline(always)]
fn plain_tcp_into(frame: &[u8], hash: Option<u64>, out: &mut Info) -> bool {
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
/// give this same [`Info`] and [`eligible`] holds (see the `plain_matches_parser` test);
/// anything else returns `None` and takes the general path.
/// `hash`: the frame's flow hash when already computed ([`plain_hash`]).
#[inline(always)]
fn plain_tcp(frame: &[u8], hash: Option<u64>) -> Option<Info> {
    let end = frame.len();
    let b: &[u8; 54] = frame.get(..54)?.try_into().ok()?;
    let (l4, ip, t, hash) = match u16::from_be_bytes([b[12], b[13]]) {
        sluice_wire::ethertype::IPV4 => {
            let frag = u16::from_be_bytes([b[20], b[21]]);
            let total = usize::from(u16::from_be_bytes([b[16], b[17]]));
            if b[14] != 0x45
                || b[23] != ip_proto::TCP
                || frag & 0x3fff != 0
                || total + ETH_HLEN != end
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
            let plen = usize::from(u16::from_be_bytes([b[18], b[19]]));
            if w >> 28 != 6 || b[20] != ip_proto::TCP || plen == 0 || plen + 54 != end {
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
fn plain_hash_v4(b: &[u8; 54]) -> u64 {
    let ports = u32::from_be_bytes([b[34], b[35], b[36], b[37]]);
    let addrs = u64::from_le_bytes([b[26], b[27], b[28], b[29], b[30], b[31], b[32], b[33]]);
    mix(mix(plain_structure(34, false), u64::from(ports)), addrs)
}

/// [`flow_hash`] of a plain TCP/IPv6 frame.
#[inline(always)]
fn plain_hash_v6(b: &[u8; 74]) -> u64 {
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
fn plain_hash(frame: &[u8]) -> Option<u64> {
    let b: &[u8; 54] = frame.get(..54)?.try_into().ok()?;
    match u16::from_be_bytes([b[12], b[13]]) {
        sluice_wire::ethertype::IPV4 if b[14] == 0x45 && b[23] == ip_proto::TCP => {
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
fn plain_structure(l4: usize, v6: bool) -> u64 {
    structure_word(l4, 1, false, v6)
}

#[inline(always)]
fn structure_word(l4: usize, levels: usize, udp: bool, v6: bool) -> u64 {
    (l4 as u64) << 16 | (levels as u64) << 8 | u64::from(udp) << 1 | u64::from(v6)
}

/// [`Held::fixed_sum`] of a TCP packet's first segment.
fn fixed_tcp_sum(frame: &[u8], info: &Info) -> Option<u32> {
    let lvl = info.innermost();
    fixed_tcp_sum_at(
        frame,
        *info.l3.get(lvl)?,
        info.ip.get(lvl)?.v6,
        info.l4,
        info.payload,
    )
}

/// [`fixed_tcp_sum`] of a segment whose innermost IP header is at `l3` (IPv6 when `v6`), TCP
/// header at `l4` and payload at `payload`.
#[inline]
fn fixed_tcp_sum_at(frame: &[u8], l3: usize, v6: bool, l4: usize, payload: usize) -> Option<u32> {
    Some(u32::from(fold64(fixed_tcp_acc_at(
        frame, l3, v6, l4, payload,
    )?)))
}

/// [`fixed_tcp_sum_at`] not folded (below 2^40).
#[inline(always)]
fn fixed_tcp_acc_at(frame: &[u8], l3: usize, v6: bool, l4: usize, payload: usize) -> Option<u64> {
    let addrs = if v6 {
        frame.get(l3 + 8..l3 + 40)?
    } else {
        frame.get(l3 + 12..l3 + 20)?
    };
    // Pseudo-header without the length (addresses, protocol), then the TCP header words that
    // `varying_words` leaves out: ports, acknowledgment number, options.
    let t: &[u8; 20] = frame.get(l4..l4 + 20)?.try_into().ok()?;
    let w = |k: usize| u64::from(be32_in(t, k));
    let options = frame.get(l4 + 20..payload)?;
    Some(u64::from(ip_proto::TCP) + words_sum(addrs) + w(0) + w(8) + words_sum(options))
}

/// The folded ones'-complement sum of a short slice (a header), inline: cheaper than the
/// dispatched [`sum`] for a few dozen bytes. Same value as [`sum`].
#[inline(always)]
fn small_sum(b: &[u8]) -> u16 {
    let mut acc = words_sum(b);
    if b.len() % 2 == 1 {
        acc += u64::from(*b.last().unwrap_or(&0)) << 8;
    }
    fold64(acc)
}

/// The unfolded sum of the big-endian 16-bit words of a short slice (an odd last byte is
/// ignored).
#[inline(always)]
fn words_sum(b: &[u8]) -> u64 {
    // 32-bit words: each adds its two 16-bit halves at once (folded later).
    let mut quads = b.chunks_exact(4);
    let mut acc = 0u64;
    for q in &mut quads {
        acc += u64::from(be32_in(q, 0));
    }
    if let [a, b, ..] = quads.remainder() {
        acc += u64::from(u16::from_be_bytes([*a, *b]));
    }
    acc
}

/// The payload sum of a segment that passed [`same_headers`] for held packet `h` and whose TCP
/// checksum is good: the complement of its pseudo-header and TCP header sums, from
/// [`Held::fixed_sum`] plus the words that vary.
#[inline(always)]
fn fast_payload_sum(h: &Held, frame: &[u8], end: usize) -> Option<u16> {
    let l4 = h.info.l4;
    let t: &[u8; 20] = frame.get(l4..l4 + 20)?.try_into().ok()?;
    Some(tcp_payload_sum(h.fixed_sum, end.checked_sub(l4)?, t))
}

/// The payload sum of a good TCP segment of `tcp_len` bytes (header `t`) whose other header
/// words sum to `fixed_sum` (see [`Held::fixed_sum`]).
#[inline(always)]
fn tcp_payload_sum(fixed_sum: u32, tcp_len: usize, t: &[u8; 20]) -> u16 {
    !fold64(u64::from(fixed_sum) + tcp_len as u64 + varying_words(t))
}

/// The unfolded sum of the TCP header words [`Held::fixed_sum`] leaves out: the sequence number,
/// data offset/flags/window and checksum/urgent pointer, as three 32-bit words (a 32-bit word is
/// congruent to the sum of its 16-bit halves modulo 0xffff).
#[inline(always)]
fn varying_words(t: &[u8; 20]) -> u64 {
    let w = |k: usize| u64::from(be32_in(t, k));
    w(4) + w(12) + w(16)
}

/// The big-endian 32-bit word at `k` of `t` (0 past its end; with a constant `k` inside a
/// fixed-size array the check folds away).
#[inline(always)]
fn be32_in(t: &[u8], k: usize) -> u32 {
    t.get(k..)
        .and_then(|s| s.first_chunk::<4>())
        .map_or(0, |b| u32::from_be_bytes(*b))
}

/// [`be32_in`] read little-endian (as loaded on x86; see [`SimpleFlow::deferred_le`]).
#[inline(always)]
fn le32_in(t: &[u8], k: usize) -> u32 {
    t.get(k..)
        .and_then(|s| s.first_chunk::<4>())
        .map_or(0, |b| u32::from_le_bytes(*b))
}

/// Whether a segment joining on a fast path has a good TCP checksum (`false`: `Partial`, still
/// to be filled in), verifying it in software when it is `Unknown` and `verify` is set (its IP
/// header at `ip.0`, IPv6 when `ip.1`; TCP at `l4`, the frame ending at `end`). `None`: the
/// fast path refuses it (a bad checksum, or one it may not verify).
#[inline(always)]
fn joining_csum(
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
fn join_finish(flags: u8, len: usize, mss: usize) -> Option<FlushReason> {
    if flags & TCP_FINISHING != 0 {
        Some(FlushReason::Flags)
    } else if len < mss {
        Some(FlushReason::Size)
    } else {
        None
    }
}

/// Folds a ones'-complement accumulator to 16 bits.
#[inline(always)]
fn fold64(acc: u64) -> u16 {
    // Four end-around-carry steps reduce any 64-bit value to 16 bits (branch-free).
    let a = (acc & 0xffff_ffff) + (acc >> 32);
    let a = (a & 0xffff) + (a >> 16);
    let a = (a & 0xffff) + (a >> 16);
    let a = (a & 0xffff) + (a >> 16);
    a as u16
}

fn absent_verdicts(slot: Slot) -> sluice_packet::Verdicts {
    let mut v = sluice_packet::Verdicts::default();
    match slot {
        Slot::InnerL4 => v.inner_l4_absent = true,
        _ => v.l4_absent = true,
    }
    v
}

// ---- per-frame helpers ----

fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([*s.first()?, *s.get(1)?]))
}

fn be32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes(s.try_into().ok()?))
}

fn put16(b: &mut [u8], off: usize, v: u16) -> Option<()> {
    b.get_mut(off..off.checked_add(2)?)?
        .copy_from_slice(&v.to_be_bytes());
    Some(())
}

fn ip_fields(frame: &[u8], h: &Headers) -> Option<IpFields> {
    let l3 = h.l3?;
    Some(match h.l3_kind? {
        L3Kind::Ipv4 => IpFields {
            v6: false,
            ttl: *frame.get(l3 + 8)?,
            tos: *frame.get(l3 + 1)?,
            df: frame.get(l3 + 6)? & 0x40 != 0,
            id: be16(frame, l3 + 4)?,
        },
        L3Kind::Ipv6 => {
            let w = be32(frame, l3)?;
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

/// Frame-level conditions for holding a packet (beyond the flow key): Linux's IP-layer refusals.
fn eligible(frame: &[u8], layout: &Layout, info: &Info) -> bool {
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

/// The fixed hashing step (FxHash-like); flows are few, so quality matters less than speed.
#[inline(always)]
fn mix(h: u64, v: u64) -> u64 {
    (h.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95)
}

/// Walks the parts of a frame that define its flow: byte ranges compared exactly (`range`), and
/// IPv6 version words compared under the mask `0xf00fffff` (`v6_word`: version and flow label,
/// not the traffic class). Stops, returning `false`, as soon as a callback does.
#[inline(always)]
fn key_walk(
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
fn shape(info: &Info) -> [u64; 4] {
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
/// ports and IP addresses), so equal flows hash equally; [`same_flow`] compares the whole key.
/// Flows that differ only elsewhere (VLAN tags, outer headers) collide, which costs a compare.
#[inline(always)]
fn flow_hash(frame: &[u8], info: &Info) -> Option<u64> {
    let lvl = info.innermost();
    let l3 = *info.l3.get(lvl)?;
    let v6 = info.ip.get(lvl)?.v6;
    let structure = structure_word(info.l4, info.levels, info.proto == Some(Proto::Udp), v6);
    let mut h = mix(structure, u64::from(be32(frame, info.l4)?));
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

fn same_flow(a: &[u8], ai: &Info, b: &[u8], bi: &Info) -> bool {
    shape(ai) == shape(bi)
        && key_walk(
            bi,
            |x, y| matches!((a.get(x..y), b.get(x..y)), (Some(p), Some(q)) if p == q),
            |w| matches!((be32(a, w), be32(b, w)), (Some(p), Some(q)) if (p ^ q) & 0xf00f_ffff == 0),
        )
}

/// Whether the TCP option bytes of two headers are identical (the data offsets were compared as
/// part of the 4th word already).
fn same_options(a: &[u8], al4: usize, b: &[u8], bl4: usize, word3: u32) -> bool {
    let thlen = ((word3 >> 28) as usize) * 4;
    if thlen <= 20 {
        return true;
    }
    match (a.get(al4 + 20..al4 + thlen), b.get(bl4 + 20..bl4 + thlen)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// The pseudo-header sum of the innermost L4 header for `l4_len` bytes.
#[inline]
fn l4_pseudo(frame: &[u8], info: &Info, proto: u8, l4_len: usize) -> Option<u16> {
    let lvl = info.innermost();
    pseudo_at(
        frame,
        *info.l3.get(lvl)?,
        info.ip.get(lvl)?.v6,
        proto,
        l4_len,
    )
}

#[inline]
fn pseudo_at(frame: &[u8], l3: usize, v6: bool, proto: u8, l4_len: usize) -> Option<u16> {
    if v6 {
        let src: [u8; 16] = frame.get(l3 + 8..l3 + 24)?.try_into().ok()?;
        let dst: [u8; 16] = frame.get(l3 + 24..l3 + 40)?.try_into().ok()?;
        Some(sluice_checksum::pseudo::ipv6(
            &src,
            &dst,
            proto,
            u32::try_from(l4_len).ok()?,
        ))
    } else {
        let src: [u8; 4] = frame.get(l3 + 12..l3 + 16)?.try_into().ok()?;
        let dst: [u8; 4] = frame.get(l3 + 16..l3 + 20)?.try_into().ok()?;
        Some(sluice_checksum::pseudo::ipv4(
            src,
            dst,
            proto,
            u16::try_from(l4_len).ok()?,
        ))
    }
}

/// The ones'-complement sum of a verified segment's payload, from its headers only: the whole
/// L4 region with its pseudo-header sums to `0xffff`, so the payload sums to the complement of
/// the pseudo-header and the L4 header.
fn segment_payload_sum(frame: &[u8], info: &Info, end: usize) -> Option<u16> {
    let proto = match info.proto? {
        Proto::Tcp => ip_proto::TCP,
        Proto::Udp => ip_proto::UDP,
    };
    let pseudo = l4_pseudo(frame, info, proto, end.checked_sub(info.l4)?)?;
    let hdr = small_sum(frame.get(info.l4..info.payload)?);
    Some(!combine(pseudo, hdr))
}

/// Fixes a merged packet's lengths and checksums and sets its GSO request.
fn finalize(h: &mut Held) -> Option<OffloadMeta> {
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
            put16(buf, l3 + 4, u16::try_from(len.checked_sub(l3 + 40)?).ok()?)?;
        } else {
            let new_len = u16::try_from(len.checked_sub(l3)?).ok()?;
            let hdr = buf.get(l3..l3 + 20)?;
            // The header's sum with the length replaced and the checksum field zero (the sum
            // of a version-4 header is never zero, so this is `small_sum`'s value).
            let acc = words_sum(hdr)
                + u64::from(!be16(hdr, 2)?)
                + u64::from(!be16(hdr, 10)?)
                + u64::from(new_len);
            let c = !fold64(acc);
            put16(buf, l3 + 2, new_len)?;
            put16(buf, l3 + 10, c)?;
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
        let mut acc = u64::from(small_sum(hdr)) + u64::from(!be16(hdr, field)?);
        if proto == ip_proto::UDP {
            acc += u64::from(!be16(hdr, 4)?) + u64::from(ulen);
        }
        let mut c = !combine(combine(pseudo, fold64(acc)), payload_sum);
        if c == 0 && proto == ip_proto::UDP {
            c = 0xffff;
        }
        if proto == ip_proto::UDP {
            put16(buf, l4 + 4, ulen)?;
        }
        put16(buf, l4 + field, c)?;
        meta.checksum_recomputed(inner_slot);
    } else {
        if proto == ip_proto::UDP {
            put16(buf, l4 + 4, ulen)?;
        }
        put16(buf, l4 + field, pseudo)?;
    }
    // The outer UDP header of a tunnel: length, and the checksum when in use.
    let mut outer_partial = false;
    if let Some(t) = info.tunnel.filter(|t| t.kind != TunnelKind::Gre) {
        let ol4 = t.outer_l4;
        let olen = len.checked_sub(ol4)?;
        put16(buf, ol4 + 4, u16::try_from(olen).ok()?)?;
        if t.outer_csum {
            let ol3 = *info.l3.first()?;
            let opseudo = pseudo_at(buf, ol3, info.ip.first()?.v6, ip_proto::UDP, olen)?;
            if all_good {
                // Local checksum offload: the completed inner L4 region sums to the complement
                // of its pseudo-header.
                put16(buf, ol4 + 6, 0)?;
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
                put16(buf, ol4 + 6, c)?;
                meta.checksum_recomputed(Slot::OuterL4);
            } else {
                put16(buf, ol4 + 6, opseudo)?;
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
fn finalize_plain(h: &mut Held, payload_sum: u16) -> Option<OffloadMeta> {
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
struct PlainShape {
    v6: bool,
    /// TCP header offset (34 or 54).
    l4: usize,
    /// Payload offset.
    payload: usize,
}

/// Rewrites the headers `buf` starts with (a plain packet's, flags already ORed in) for a
/// merged packet of `len` bytes whose payload sums to `payload_sum`: IP length and IPv4 header
/// checksum, TCP checksum ([`plain_merged_meta`] is its metadata). Every sum is taken before
/// the write it depends on (see `finalize`).
#[inline(always)]
fn finish_plain_header(
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
    let old = be16(hdr, 16)?;
    let hsum = fold64(u64::from(small_sum(hdr)) + u64::from(!old));
    let c = !combine(combine(pseudo, hsum), payload_sum);
    put16(buf, l4 + 16, c)
}

/// Sets an option-less IPv4 header's total length and recomputes its checksum (summing the
/// header with the old length and checksum taken out, before either is written: see `finalize`).
#[inline(always)]
fn set_ipv4_total(ip: &mut [u8; 20], total: u16) {
    let acc = words_sum(ip)
        + u64::from(!u16::from_be_bytes([ip[2], ip[3]]))
        + u64::from(!u16::from_be_bytes([ip[10], ip[11]]))
        + u64::from(total);
    let c = !fold64(acc);
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// [`finish_plain_header`] for a header copy in a fixed-size array of simple-lane flow `f`
/// (flags ORed in here), whose [`Held::fixed_sum`] is known: the TCP checksum from it and the
/// words that vary (sequence number, data offset/flags/window with the flags ORed in, urgent
/// pointer) instead of summing the pseudo-header and the TCP header again.
#[inline(always)]
fn finish_simple_header<const N: usize>(
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

/// The metadata of a merged plain packet from its first segment's (`m`): the IPv4 header and
/// TCP checksums recomputed, the GSO request set.
#[inline(always)]
fn plain_merged_meta(m: &mut OffloadMeta, v6: bool, mss: usize, cwr: bool) -> Option<()> {
    if !v6 {
        m.checksum_recomputed(Slot::OuterIp);
    }
    m.checksum_recomputed(Slot::OuterL4);
    let gso = if v6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
    m.set_gso(gso, u16::try_from(mss).ok()?, cwr).ok()
}

fn t_outer_l4(info: &Info) -> Option<usize> {
    info.tunnel.map(|t| t.outer_l4)
}

const fn level_of(lvl: usize) -> Level {
    if lvl == 0 {
        Level::Outer
    } else {
        Level::Inner
    }
}

/// The caller's metadata if it describes this frame's headers, else fresh metadata for the
/// layout carrying over the caller's checksum statuses.
fn adopt(fresh: OffloadMeta, given: OffloadMeta) -> OffloadMeta {
    let mut m = fresh;
    if given.offsets() == m.offsets() && given.tunnel() == m.tunnel() {
        return given;
    }
    for slot in Slot::ALL {
        match given.status(slot) {
            CsumStatus::Good => m.rx_verdict(slot, Verdict::Good),
            CsumStatus::Bad => m.rx_verdict(slot, Verdict::Bad),
            CsumStatus::Partial if slot.is_l4() => {
                let field = match m.l4_proto(slot.level()) {
                    Some(ip_proto::TCP) => Some(16),
                    Some(ip_proto::UDP) => Some(6),
                    _ => None,
                };
                if let (Some(off), Some(f)) = (m.offsets().of(slot), field) {
                    let _ = m.rx_needs_csum(off, f);
                }
            }
            _ => {}
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A TCP segment over IPv4 or IPv6 with `opts` TCP option bytes and `payload` bytes.
    fn segment(v6: bool, opts: usize, payload: usize, seed: u8) -> Vec<u8> {
        let (l3len, et) = if v6 { (40, 0x86dd_u16) } else { (20, 0x0800) };
        let thl = 20 + opts;
        let mut f = vec![0u8; 14 + l3len + thl + payload];
        f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&et.to_be_bytes());
        let ip_len = l3len + thl + payload;
        if v6 {
            f[14] = 0x60;
            f[18..20].copy_from_slice(&((thl + payload) as u16).to_be_bytes());
            f[20] = 6;
            f[21] = 64;
            f[22..54]
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = i as u8 ^ seed);
        } else {
            f[14] = 0x45;
            f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
            f[18..20].copy_from_slice(&[0, seed]);
            f[20] = 0x40;
            f[22] = 64;
            f[23] = 6;
            f[26..34].copy_from_slice(&[192, 0, 2, 1, 192, 0, 2, seed]);
        }
        let l4 = 14 + l3len;
        f[l4..l4 + 4].copy_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
        f[l4 + 4..l4 + 8].copy_from_slice(&[0, 0, 0x10, seed]);
        f[l4 + 12] = ((thl / 4) as u8) << 4;
        f[l4 + 13] = 0x10;
        for (i, b) in f[l4 + 20..].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7) ^ seed;
        }
        f
    }

    fn engine() -> GroEngine {
        GroEngine::new(GroConfig::default())
    }

    proptest! {
        /// `plain_offsets` gives the offsets fresh metadata gives plain frames.
        #[test]
        fn plain_offsets_are_the_parsers(v6 in any::<bool>(), opts in 0usize..11, payload in 1usize..200) {
            let frame = segment(v6, opts * 4, payload, 1);
            let m = OffloadMeta::from_layout(&sluice_wire::parse(&frame).unwrap());
            prop_assert_eq!(m.offsets(), plain_offsets(v6));
        }

        /// The plain shortcut accepts only frames the general path classifies identically
        /// (hash included) and holds eligible, whatever bytes are changed.
        #[test]
        fn plain_matches_parser(
            v6 in any::<bool>(),
            opts in (0usize..11).prop_map(|n| n * 4),
            payload in 0usize..300,
            seed in any::<u8>(),
            flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..4),
            cut in 0usize..8,
        ) {
            let mut f = segment(v6, opts, payload, seed);
            for (at, x) in flips {
                if let Some(b) = f.get_mut(at) {
                    *b ^= x;
                }
            }
            f.truncate(f.len().saturating_sub(cut));
            let e = engine();
            let general = sluice_wire::parse_with(&f, &e.cfg.parse)
                .ok()
                .and_then(|l| e.classify(&f, &l).map(|i| (eligible(&f, &l, &i), i)));
            if let Some(p) = plain_tcp(&f, None) {
                let (ok, info) = general.expect("the parser accepts a plain frame");
                prop_assert!(ok, "a plain frame is eligible");
                prop_assert_eq!(p, info);
                // The precomputed mask is the one `fast_view` computes.
                let (mut r, mut m) = ([0; CMP_WORDS * 8], [0; CMP_WORDS]);
                let words = fast_view(&f, &p, &mut r, &mut m);
                prop_assert!(words > 0);
                let masks = PlainMasks::new();
                prop_assert_eq!(masks.get(&p), Some(&m));
            }
        }

        /// The fast payload sum of a segment with the first segment's headers equals the one
        /// computed from its own headers.
        #[test]
        fn fast_payload_sum_agrees(
            v6 in any::<bool>(),
            opts in (0usize..11).prop_map(|n| n * 4),
            payload in 1usize..300,
            seed in any::<u8>(),
            seq in any::<u32>(),
            csum in any::<u16>(),
            urg in any::<u16>(),
            psh in any::<bool>(),
        ) {
            let first = segment(v6, opts, payload, seed);
            let info = plain_tcp(&first, None).expect("plain");
            let h = Held { fixed_sum: fixed_tcp_sum(&first, &info).expect("sum"), info, ..Held::default() };
            let mut next = first.clone();
            let l4 = info.l4;
            next[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
            next[l4 + 16..l4 + 18].copy_from_slice(&csum.to_be_bytes());
            next[l4 + 18..l4 + 20].copy_from_slice(&urg.to_be_bytes());
            if psh {
                next[l4 + 13] |= TCP_PSH;
            }
            let end = next.len();
            prop_assert_eq!(
                fast_payload_sum(&h, &next, end),
                segment_payload_sum(&next, &info, end)
            );
        }
    }

    proptest! {
        /// The flow index finds exactly what was inserted and not removed, with colliding
        /// hashes and home buckets.
        #[test]
        fn flow_index_matches_a_model(
            max_flows in 1usize..20,
            ops in proptest::collection::vec((any::<bool>(), 0u64..6, 0u32..40), 0..200),
        ) {
            let mut idx = FlowIndex::new(max_flows);
            let mut model: Vec<(u64, u32)> = Vec::new();
            for (insert, h, slot) in ops {
                // Few distinct hashes, with equal high halves for some: collisions and clusters.
                let hash = (h % 3) << 32 | h;
                if insert {
                    if model.len() < max_flows && !model.iter().any(|&(_, s)| s == slot) {
                        idx.insert(hash, slot);
                        model.push((hash, slot));
                    }
                } else if let Some(k) = model.iter().position(|&(_, s)| s == slot) {
                    let (mh, ms) = model.remove(k);
                    idx.remove(mh, ms);
                }
                for h in 0..6u64 {
                    let hash = (h % 3) << 32 | h;
                    let mut want: Vec<u32> =
                        model.iter().filter(|e| e.0 == hash).map(|e| e.1).collect();
                    let mut got = Vec::new();
                    let mut p = idx.probe(hash);
                    while let Some(s) = idx.next(&mut p, hash) {
                        got.push(s as u32);
                    }
                    want.sort_unstable();
                    got.sort_unstable();
                    prop_assert_eq!(want, got);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn small_sum_is_sum(b in proptest::collection::vec(any::<u8>(), 0..90)) {
            prop_assert_eq!(small_sum(&b), sum(&b));
        }
    }

    /// Segment `k` (1000-byte payloads) of one IPv4 flow, DF, incrementing IDs.
    fn stream_segment(k: u32) -> Vec<u8> {
        let mut f = segment(false, 0, 1000, 7);
        f[18..20].copy_from_slice(&(100 + k as u16).to_be_bytes());
        f[38..42].copy_from_slice(&(5000 + 1000 * k).to_be_bytes());
        f
    }

    fn good_meta(f: &[u8]) -> OffloadMeta {
        let mut m = OffloadMeta::from_layout(&sluice_wire::parse(f).expect("parses"));
        m.rx_checksum_unnecessary(false);
        m
    }

    /// A segment joined on the general path (its IPv4 reserved flag bit differs, which Linux
    /// ignores) moves the fast lane's prediction on: a duplicate of it must not join after.
    #[test]
    fn prediction_follows_general_path_joins() {
        let mut e = engine();
        for k in 0..3 {
            let f = stream_segment(k);
            e.receive(&f, good_meta(&f), 0);
        }
        let mut odd = stream_segment(3);
        odd[20] |= 0x80;
        e.receive(&odd, good_meta(&odd), 0);
        let dup = stream_segment(3);
        e.receive(&dup, good_meta(&dup), 0);
        let next = stream_segment(4);
        e.receive(&next, good_meta(&next), 0);
        e.end_batch(0);
        let mut segments = Vec::new();
        while let Some(p) = e.pop_output() {
            segments.push(p.segments);
        }
        // 0..=3 merged; the duplicate cannot join them (its sequence number is behind) and
        // starts a packet, which 4 then joins (in sequence after it, next ID).
        assert_eq!(segments, vec![4, 2]);
        assert_eq!(e.stats().merged_segments, 4);
    }

    #[test]
    fn prediction_bits_are_the_predicted_fields() {
        for v6 in [false, true] {
            let mut want = [0u64; CMP_WORDS];
            let ip = if v6 {
                ETH_HLEN + 4..ETH_HLEN + 6
            } else {
                ETH_HLEN + 2..ETH_HLEN + 4
            };
            for a in ip {
                want[a / 8] |= 0xff << ((a % 8) * 8);
            }
            assert_eq!(prediction_bits(v6), want);
        }
    }

    #[test]
    fn plain_accepts_the_benchmark_shapes() {
        for v6 in [false, true] {
            for opts in [0, 12] {
                let f = segment(v6, opts, 100, 3);
                let info = plain_tcp(&f, None).expect("plain");
                let l = sluice_wire::parse(&f).expect("parses");
                assert_eq!(Some(info), engine().classify(&f, &l));
            }
        }
    }
}
