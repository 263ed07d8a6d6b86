//! Software GRO: coalescing a flow's consecutive segments into one large packet, with the merge
//! decisions of Linux 6.18 (`dev_gro_receive`, `inet_gro_receive`, `ipv6_gro_receive`,
//! `tcp_gro_receive`, `udp_gro_receive_segment`, the VXLAN/Geneve/GRE receive hooks).
//!
//! # Entry points
//!
//! One engine, one per-frame step (`GroEngine::step`, in this file), two ways to feed it:
//!
//! - [`GroEngine::receive_batch`] (copying mode): a batch of frames, then the batch end; the
//!   output queue holds owned frames. The datapath calls this once per port and poll, and the
//!   benchmark's `sluice_gro_*` workloads measure it. [`GroEngine::receive`] +
//!   [`GroEngine::end_batch`] is the same, a frame at a time.
//! - [`GroEngine::coalesce_burst`] (zero-copy mode): one burst in, [`GroBurst`] out (rewritten
//!   headers plus pieces of the input frames); the benchmark's `sluice_burst_*` workloads.
//!
//! The modes are parameters of the step, not copies of the logic: zero copy (where payloads
//! go), and software checksum verification ([`GroConfig::verify_checksums`]).
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
//! - the merged frame stays within 64 KiB: the frame less its 14-byte Ethernet header (an L3
//!   packet: the packet itself) is at most 65 535 bytes (Linux: `p->len + len < 65536`).
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
//! it; at most 64 datagrams per packet. The result is a USO packet ([`GsoType::UdpL4`](sluice_packet::GsoType::UdpL4)). UDP inside
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
//!   general path, which decides. (L3 packets have the masked comparison, tried against each
//!   held packet whose ports match, since it reads the offsets the general path found for the
//!   held packet; they have no hint, flow-hash lookup or prediction, which read Ethernet frames
//!   at fixed offsets.)
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
//!
//! # Files
//!
//! - `mod.rs`: the public types and entry points, the per-frame step.
//! - `rules.rs`: every merge and flush rule, once (table below), and `decide`, the general
//!   path's decision that applies them all in order.
//! - `flow.rs`: classification: a frame's merge fields (`Info`) from the parser (`classify`) or
//!   at fixed offsets for a plain frame (`plain_tcp`); the flow hash (`flow_hash`) and the flow
//!   key (`key_walk`, `shape`); frame readers.
//! - `table.rs`: the held-packet table: records (`Held`), the flow index (`FlowIndex`), holding
//!   (`start`, `hold`), joining (`join`), eviction (`enforce_budget`) and flushes.
//! - `view.rs`: the fast path's header comparison (`fast_view`, `same_headers`, `PlainMasks`,
//!   the port-cache hint).
//! - `lanes.rs`: the per-frame lanes, tightest first: `tight_join` (zero copy only),
//!   `quick_join` and `predicted_join`, `start_fresh`, then `receive_rest`: `receive_plain`
//!   (`plain_check`), `try_fast` (`fast_check`) and the parser path into `merge_or_hold`.
//! - `csum.rs`: settling checksum verdicts (`plain_csums`, `check_csums`, `settle_l4`,
//!   `adopt`) and the header-only sums of merged packets.
//! - `finish.rs`: finishing a held packet (`complete`): lengths, IPv4 header checksums, L4
//!   checksums, flags and GSO metadata (`finalize`, `finalize_plain`), then the output
//!   (`emit`, `pass`).
//! - `burst.rs`: zero-copy output ([`GroBurst`], piece chains) and the simple lane that
//!   coalesces a whole burst of plain, device-verified segments (`simple_burst`).
//!
//! # Where each rule is (all in `rules.rs` unless named)
//!
//! | Rule | Function |
//! |---|---|
//! | same flow (Linux `same_flow`) | `same_flow` (key: `flow.rs` `key_walk`) |
//! | TTL, TOS, DF / hop limit, traffic class equal | `same_ip_fields` |
//! | IPv4 ID fixed or incrementing, per IP level | `Ipv4Ids::accept` |
//! | TCP data offset, flags, window equal (but FIN, PSH, CWR) | `same_tcp_word3` |
//! | ACK number equal | `same_ack` |
//! | TCP options identical | `same_options` |
//! | CWR never merges | `carries_cwr` |
//! | sequence number = end of held data | `in_sequence` |
//! | payload 1 byte to the first segment's size | `fits_segment_size` |
//! | 64 KiB limit | `fits_64k` (Ethernet lanes), `fits_64k_at` (general path, compare lane) |
//! | PSH, FIN, URG, RST, SYN finish the packet | `finishes_packet`, `join_finish` |
//! | a shorter segment joins and finishes it | `short_segment`, `join_finish` |
//! | FIN and PSH ORed into the merged header | `merged_flags` |
//! | UDP: equal lengths, shorter finishes, 64 datagrams | `udp_join` |
//! | which lone frames may be held | `may_start` |
//! | IP options, fragments, padding, IPv6 extensions, tunnel headers | `eligible`; at fixed offsets `ipv4_without_options`, `ipv4_is_fragment`, `ip_fills_frame` |
//! | IP header checksum of a joining segment | `ip_header_ok` |
//! | L4 checksum verdict | `l4_verdict`; fast paths `joining_csum`; tightest lanes `device_verified` |
//! | all of the above for one segment, in order | `decide` |
//! | full table: evict the oldest | `table.rs` `GroEngine::start` |
//! | held-segment budget | `table.rs` `GroEngine::enforce_budget` |
//! | batch end and age | [`GroEngine::end_batch`], [`GroEngine::flush_aged`] |
//!
//! A fast lane proves the "must be equal" rules at once by one masked header comparison
//! (`view.rs`: the mask leaves out exactly the fields the rules let vary) and calls the
//! functions above for the rest; whatever it cannot settle it leaves to the general path.

mod burst;
mod csum;
mod finish;
mod flow;
mod lanes;
mod rules;
mod table;
#[cfg(test)]
mod tests;
mod view;

pub use self::burst::{BurstPacket, BurstPiece, GroBurst};
use self::burst::{BurstState, SimpleFlow, SimpleRef, SimpleState, FREE_LINK, SIMPLE_MAX};
use self::flow::{plain_layout, Plain};
use self::lanes::Lane;
use self::table::{FlowIndex, Held};
use self::view::{PlainMasks, PORT_CACHE};
use std::collections::VecDeque;

use sluice_packet::OffloadMeta;

use sluice_wire::{LinkType, ParseConfig};

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
    /// Which UDP ports are VXLAN and Geneve, whether tunnels are merged at all, and what frames
    /// start with: Ethernet (default) or, with [`LinkType::Ip`] ([`ParseConfig::L3`]), an IP
    /// header, as TUN devices give them (those have the general path and the header-compare
    /// lane, not the lanes that read Ethernet frames at fixed offsets).
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
///
/// ```
/// use sluice_offload::gro::{GroConfig, GroEngine};
/// use sluice_offload::gso::{segment, GsoOutput, GsoParams};
/// use sluice_packet::{GsoType, OffloadMeta};
/// // Ethernet + IPv4 (DF) + TCP (ACK, seq 1) + 3000 payload bytes: a TSO super-packet.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0x0b, 0xe0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
/// frame.extend((0..3000u32).map(|i| i as u8));
/// // Three wire-sized segments of one TCP stream...
/// let mut segs = GsoOutput::new();
/// let layout = sluice_wire::parse(&frame).unwrap();
/// segment(&frame, &layout, &GsoParams::new(GsoType::TcpV4, 1000), &mut segs).unwrap();
///
/// // ...coalesce back into one packet with a GSO request, as Linux's GRO would.
/// let mut gro = GroEngine::new(GroConfig::default());
/// gro.receive_batch(segs.frames().map(|f| (f, OffloadMeta::default())), 0);
/// let merged = gro.pop_output().unwrap();
/// assert_eq!(merged.segments, 3);
/// assert_eq!((merged.meta.gso_type(), merged.meta.segment_size()), (GsoType::TcpV4, 1000));
/// assert_eq!(merged.frame.len(), frame.len());
/// assert_eq!(merged.frame[54..], frame[54..]);
/// assert!(gro.pop_output().is_none());
/// ```
#[derive(Debug)]
pub struct GroEngine {
    cfg: GroConfig,
    /// Whether the fast lanes run: TCP merging on, and Ethernet frames (they read the plain
    /// shapes at fixed offsets behind a 14-byte Ethernet header). L3 packets
    /// ([`LinkType::Ip`]) have the header-compare lane, tried before the general path.
    fast_lanes: bool,
    /// Whether the header-compare lane ([`GroEngine::try_fast`]) runs: TCP merging on,
    /// whatever the link type (it reads the offsets the general path found for the held
    /// packet, so L3 packets have it too).
    compare_lane: bool,
    /// Held packets' records, reused in place (never moved): at most `max_flows`.
    slab: Vec<Held>,
    /// Slab indices of the held packets in arrival order of their first segments. A held
    /// packet's "index" `i` everywhere below is its slab index.
    order: Vec<u32>,
    /// Flow hash → slab index of the held packets.
    index: FlowIndex,
    /// Fast-path masks of the plain shapes.
    plain_masks: Box<PlainMasks>,
    /// [`GroEngine::quick_join`]'s hint: slab index by 4 frame bytes (see [`port_cache_index`](self::view::port_cache_index)).
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
            fast_lanes: cfg.tcp && cfg.parse.link == LinkType::Ethernet,
            compare_lane: cfg.tcp,
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
        let none = OffloadMeta::default();
        for (k, frame) in frames.iter().enumerate() {
            self.burst.index = u32::try_from(k).unwrap_or(u32::MAX);
            self.stats.frames_in += 1;
            self.step::<true>(frame, metas.get(k).unwrap_or(&none), 0);
        }
        self.flush_all(FlushReason::BatchEnd);
        self.burst.active = false;
        std::mem::swap(&mut self.burst.out, out);
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

    /// Ends a batch but keeps the packets whose first segment arrived in this batch (at
    /// `now`) for one more: every packet held from an earlier batch is finished
    /// ([`FlushReason::BatchEnd`]). For a caller whose batches can end in the middle of a
    /// burst that belongs together, e.g. the two UDP-GSO frames one tunnel super-frame
    /// becomes, so the second half still joins the first; the caller must end a batch
    /// again on its next pass, with frames or without.
    pub fn end_batch_keep_new(&mut self, now: u64) {
        self.flush_where(FlushReason::BatchEnd, |h| h.born < now);
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
        self.step::<false>(frame, &meta, now);
    }

    /// The engine's one per-frame step, whatever the mode: the lanes in order, from the tightest
    /// to the general path, each deciding only what the general path would (see `lanes.rs`).
    /// The modes are parameters, not separate code: zero copy (`ZERO_COPY`, with `burst.active`
    /// set by [`GroEngine::coalesce_burst`]: payloads become pieces of the input frames; the
    /// tightest lane is tried first, as bursts of one flow are the common case) or copying
    /// (payloads copied into pooled buffers), and software verification
    /// ([`GroConfig::verify_checksums`], read by the lanes that settle checksums).
    #[inline(always)]
    fn step<const ZERO_COPY: bool>(&mut self, frame: &[u8], meta: &OffloadMeta, now: u64) {
        let lane = if !self.fast_lanes {
            Lane::Other
        } else if ZERO_COPY && self.tight_join(frame, meta) {
            Lane::Joined
        } else {
            self.quick_join(frame, meta)
        };
        match lane {
            Lane::Joined => {}
            Lane::NoFlow(hash) if self.start_fresh(frame, meta, hash, now) => {}
            _ => self.receive_rest(frame, *meta, now, lane),
        }
    }
}
