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
    flows: Vec<Held>,
    out: VecDeque<GroPacket>,
    pool: Vec<Vec<u8>>,
    held_segments: usize,
    stats: GroStats,
    burst: BurstState,
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
#[derive(Debug)]
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
    /// Ones'-complement sum of the merged payload (valid while `all_good`).
    payload_sum: u16,
    payload_bytes: usize,
    cwr: bool,
    born: u64,
    /// The fast path's view of the first segment's headers: 64-bit words and the mask of the
    /// bits that must be equal (`cmp_words` 0: no fast path for this packet).
    cmp_ref: [u64; CMP_WORDS],
    cmp_mask: [u64; CMP_WORDS],
    cmp_words: usize,
    /// The first segment's TCP/UDP ports (the fast path's first test).
    ports: u32,
}

/// No piece: a held packet in copying mode, or the end of a piece chain.
const NO_PIECE: u32 = u32::MAX;

/// One payload piece of a held packet in burst mode, chained per packet.
#[derive(Debug, Clone, Copy)]
struct Link {
    frame: u32,
    start: u32,
    end: u32,
    next: u32,
}

/// Burst (zero-copy) mode state of [`GroEngine::coalesce_burst`].
#[derive(Debug, Default)]
struct BurstState {
    active: bool,
    index: u32,
    links: Vec<Link>,
    out: GroBurst,
}

/// One payload piece of a [`BurstPacket`]: bytes `range` of input frame `frame`.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The header bytes in [`GroBurst::header`] (empty for a frame passed through unmerged: its
    /// one piece is the whole frame).
    pub header: core::ops::Range<usize>,
    /// The payload pieces in [`GroBurst::pieces`].
    pub pieces: core::ops::Range<usize>,
    /// Its metadata, as for [`GroPacket::meta`].
    pub meta: OffloadMeta,
    /// How many input frames it is made of.
    pub segments: u16,
}

/// The result of [`GroEngine::coalesce_burst`]: packets as header bytes plus pieces of the input
/// frames, for scatter-gather output (`writev` to a TAP, a NIC descriptor chain). Reuse one value
/// across bursts: its vectors keep their capacity.
#[derive(Debug, Default, Clone)]
pub struct GroBurst {
    headers: Vec<u8>,
    pieces: Vec<BurstPiece>,
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

    /// A packet's payload pieces.
    pub fn pieces(&self, p: &BurstPacket) -> &[BurstPiece] {
        self.pieces.get(p.pieces.clone()).unwrap_or(&[])
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
        self.pieces.clear();
        self.packets.clear();
    }
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
        GroEngine {
            flows: Vec::with_capacity(cfg.max_flows),
            out: VecDeque::new(),
            pool: Vec::new(),
            held_segments: 0,
            stats: GroStats::default(),
            burst: BurstState::default(),
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
        self.flows.len()
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
        self.flows.iter().map(|h| h.buf.capacity()).sum::<usize>()
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
        self.burst.links.clear();
        self.burst.active = true;
        for (k, frame) in frames.iter().enumerate() {
            self.burst.index = u32::try_from(k).unwrap_or(u32::MAX);
            let meta = metas.get(k).copied().unwrap_or_default();
            self.receive(frame, meta, 0);
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
    pub fn receive(&mut self, frame: &[u8], mut meta: OffloadMeta, now: u64) {
        self.stats.frames_in += 1;
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
        let csum = match self.check_csums(frame, &layout, &info, &mut meta) {
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
        if let Some(i) = slot {
            match self.decide(i, frame, &info) {
                Some(Decision::Join { finish }) => {
                    self.join(i, frame, info.end, info.flags, csum);
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
        if !self.may_start(&info) {
            self.stats.not_mergeable += 1;
            return self.emit(frame, meta, 1);
        }
        self.start(frame, meta, &info, csum, now);
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
        for (i, h) in self.flows.iter().enumerate() {
            // The ports first: one load per held packet.
            if h.cmp_words != 0 && be32(frame, h.info.l4) == Some(h.ports) && same_headers(h, frame)
            {
                hit = Some(i);
                break;
            }
        }
        let Some(i) = hit else { return false };
        let Some((end, flags, good, finish)) = self.fast_check(i, frame, meta) else {
            return false;
        };
        self.join(i, frame, end, flags, good);
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
        let h = self.flows.get_mut(i)?;
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
        let good = match meta.status(Slot::l4(level_of(info.innermost()))) {
            CsumStatus::Good => true,
            CsumStatus::Partial => false,
            CsumStatus::Bad => return None,
            CsumStatus::Unknown => {
                if !verify {
                    return None;
                }
                let lvl = info.innermost();
                let pseudo = pseudo_at(
                    frame,
                    *info.l3.get(lvl)?,
                    info.ip.get(lvl)?.v6,
                    ip_proto::TCP,
                    end - l4,
                )?;
                if combine(pseudo, sum(frame.get(l4..)?)) != 0xffff {
                    return None;
                }
                true
            }
        };
        h.fixed_id = fixed_id;
        let finish = if flags & TCP_FINISHING != 0 {
            Some(FlushReason::Flags)
        } else if len < h.mss {
            Some(FlushReason::Size)
        } else {
            None
        };
        Some((end, flags, good, finish))
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
        layout: &Layout,
        info: &Info,
        meta: &mut OffloadMeta,
    ) -> Result<bool, bool> {
        *meta = adopt(layout, *meta);
        // IPv4 header checksums: always checked (20 bytes), as Linux does.
        let levels: &[(Slot, Slot, Option<&Headers>)] = &[
            (Slot::OuterIp, Slot::OuterL4, Some(&layout.outer)),
            (Slot::InnerIp, Slot::InnerL4, layout.inner.as_ref()),
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
                let s = self.settle_l4(frame, &layout.outer, true, Slot::OuterL4, meta);
                match s {
                    CsumStatus::Good | CsumStatus::Partial => {}
                    CsumStatus::Bad => return Err(true),
                    CsumStatus::Unknown => return Err(false),
                }
            }
        }
        let (slot, h) = if info.levels == 2 {
            (Slot::InnerL4, layout.inner.as_ref())
        } else {
            (Slot::OuterL4, Some(&layout.outer))
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
        match info.proto {
            Some(Proto::Tcp) => {
                info.payload_len() >= 1 && info.flags & (TCP_FINISHING | TCP_CWR) == 0
            }
            Some(Proto::Udp) => true,
            None => false,
        }
    }

    fn find(&self, frame: &[u8], info: &Info) -> Option<usize> {
        self.flows
            .iter()
            .position(|h| h.info.hash == info.hash && same_flow(&h.buf, &h.info, frame, info))
    }

    // ---- the merge decision ----

    fn decide(&mut self, i: usize, frame: &[u8], info: &Info) -> Option<Decision> {
        let h = self.flows.get_mut(i)?;
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
        if self.flows.len() >= self.cfg.max_flows {
            if let Some(oldest) = self.oldest() {
                self.finish(oldest, FlushReason::Evicted);
            }
        }
        let mut buf = self.take_buf();
        let (first_piece, last_piece) = if self.burst.active {
            buf.extend_from_slice(frame.get(..info.payload).unwrap_or(frame));
            let l = self.push_link(info.payload, info.end);
            (l, l)
        } else {
            buf.extend_from_slice(frame);
            (NO_PIECE, NO_PIECE)
        };
        let payload_sum = if good {
            segment_payload_sum(frame, info, info.end).unwrap_or(0)
        } else {
            0
        };
        let (cmp_ref, cmp_mask, cmp_words) = fast_view(frame, info);
        self.flows.push(Held {
            info: *info,
            buf,
            len: frame.len(),
            first_piece,
            last_piece,
            meta,
            count: 1,
            mss: info.payload_len(),
            next_seq: info.seq.wrapping_add(info.payload_len() as u32),
            fixed_id: [false; 2],
            all_good: good,
            payload_sum,
            payload_bytes: info.payload_len(),
            cwr: info.flags & TCP_CWR != 0,
            born: now,
            cmp_ref,
            cmp_mask,
            cmp_words,
            ports: be32(frame, info.l4).unwrap_or(0),
        });
        self.held_segments += 1;
    }

    fn join(&mut self, i: usize, frame: &[u8], end: usize, flags: u8, good: bool) {
        let Some(h) = self.flows.get_mut(i) else {
            return;
        };
        let payload = frame.get(h.info.payload..end).unwrap_or(&[]);
        if good && h.all_good {
            match segment_payload_sum(frame, &h.info, end) {
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
            if let Some(prev) = self.burst.links.get_mut(last as usize) {
                prev.next = l;
            }
            if let Some(h) = self.flows.get_mut(i) {
                h.last_piece = l;
            }
        }
        self.held_segments += 1;
        self.stats.merged_segments += 1;
    }

    /// The oldest held packet: `flows` is in arrival order.
    fn oldest(&self) -> Option<usize> {
        (!self.flows.is_empty()).then_some(0)
    }

    fn enforce_budget(&mut self) {
        while self.held_segments > self.cfg.max_held_packets {
            match self.oldest() {
                Some(i) => self.finish(i, FlushReason::Evicted),
                None => break,
            }
        }
    }

    fn flush_all(&mut self, reason: FlushReason) {
        let mut flows = std::mem::take(&mut self.flows);
        for h in flows.drain(..) {
            self.complete(h, reason);
        }
        self.flows = flows;
    }

    fn flush_where(&mut self, reason: FlushReason, pred: impl Fn(&Held) -> bool) {
        // `flows` is kept in arrival order of the first segments (pushed at the end, removed
        // with order-preserving `remove`), so this finishes the oldest first in one pass.
        let mut flows = std::mem::take(&mut self.flows);
        let mut kept = 0;
        let mut i = 0;
        while i < flows.len() {
            let take = flows.get(i).is_some_and(&pred);
            if take {
                let h = flows.remove(i);
                self.complete(h, reason);
            } else {
                kept += 1;
                i += 1;
            }
        }
        debug_assert_eq!(kept, flows.len());
        self.flows = flows;
    }

    fn finish(&mut self, i: usize, reason: FlushReason) {
        if i < self.flows.len() {
            let h = self.flows.remove(i);
            self.complete(h, reason);
        }
    }

    /// Finishes a held packet: fixes lengths and checksums of a merged one, queues it.
    fn complete(&mut self, mut h: Held, reason: FlushReason) {
        self.stats.flushed.bump(reason);
        self.held_segments = self.held_segments.saturating_sub(usize::from(h.count));
        if h.count > 1 && finalize(&mut h).is_none() {
            // Cannot happen for frames that passed `classify`; keep the bytes, drop GSO.
            h.meta = OffloadMeta::default();
        }
        if h.count > 1 {
            self.stats.merged_packets += 1;
        }
        self.stats.packets_out += 1;
        if h.first_piece == NO_PIECE {
            self.out.push_back(GroPacket {
                frame: h.buf,
                meta: h.meta,
                segments: h.count,
            });
            return;
        }
        // Burst mode: the headers to the arena, the piece chain to the piece list.
        let out = &mut self.burst.out;
        let hs = out.headers.len();
        out.headers.extend_from_slice(&h.buf);
        let ps = out.pieces.len();
        let mut l = h.first_piece;
        while let Some(link) = self.burst.links.get(l as usize) {
            out.pieces.push(BurstPiece {
                frame: link.frame as usize,
                range: link.start as usize..link.end as usize,
            });
            l = link.next;
        }
        out.packets.push(BurstPacket {
            header: hs..out.headers.len(),
            pieces: ps..out.pieces.len(),
            meta: h.meta,
            segments: h.count,
        });
        self.recycle(h.buf);
    }

    fn push_link(&mut self, start: usize, end: usize) -> u32 {
        let l = self.burst.links.len() as u32;
        self.burst.links.push(Link {
            frame: self.burst.index,
            start: start as u32,
            end: end as u32,
            next: NO_PIECE,
        });
        l
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
            let out = &mut self.burst.out;
            let (hs, ps) = (out.headers.len(), out.pieces.len());
            out.pieces.push(BurstPiece {
                frame: self.burst.index as usize,
                range: 0..frame.len(),
            });
            out.packets.push(BurstPacket {
                header: hs..hs,
                pieces: ps..ps + 1,
                meta,
                segments,
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
/// [`CMP_WORDS`] words get no fast path.
fn fast_view(frame: &[u8], info: &Info) -> ([u64; CMP_WORDS], [u64; CMP_WORDS], usize) {
    let none = ([0; CMP_WORDS], [0; CMP_WORDS], 0);
    let hl = info.payload;
    if info.proto != Some(Proto::Tcp) || !(8..=CMP_WORDS * 8).contains(&hl) {
        return none;
    }
    let mut mask = [0u8; CMP_WORDS * 8];
    if let Some(m) = mask.get_mut(..hl) {
        m.fill(0xff);
    }
    let mut clear = |a: usize, b: usize, v: u8| {
        if let Some(m) = mask.get_mut(a..b) {
            m.fill(v);
        }
    };
    for lvl in 0..info.levels.min(2) {
        let (Some(&l3), Some(ip)) = (info.l3.get(lvl), info.ip.get(lvl)) else {
            return none;
        };
        let v6 = ip.v6;
        if v6 {
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
    let words = hl.div_ceil(8);
    let mut r = [0u64; CMP_WORDS];
    let mut m = [0u64; CMP_WORDS];
    for k in 0..words.min(CMP_WORDS) {
        let mut w = [0u8; 8];
        if let Some(b) = mask.get(k * 8..k * 8 + 8) {
            w.copy_from_slice(b);
        }
        if let (Some(rk), Some(mk)) = (r.get_mut(k), m.get_mut(k)) {
            *mk = u64::from_le_bytes(w);
            *rk = load_word(frame, k * 8) & *mk;
        }
    }
    (r, m, words)
}

/// Whether `frame`'s headers equal held packet `h`'s first segment's under the fast-path mask.
#[inline(always)]
fn same_headers(h: &Held, frame: &[u8]) -> bool {
    if frame.len() <= h.info.payload {
        return false;
    }
    let mut diff = 0u64;
    for k in 0..h.cmp_words.min(CMP_WORDS) {
        let (r, m) = (
            h.cmp_ref.get(k).copied().unwrap_or(0),
            h.cmp_mask.get(k).copied().unwrap_or(0),
        );
        diff |= (load_word(frame, k * 8) & m) ^ r;
    }
    diff == 0
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
fn mix(h: u64, v: u64) -> u64 {
    (h.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95)
}

fn hash_bytes(mut h: u64, b: &[u8]) -> u64 {
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = mix(h, u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    let mut w = [0u8; 8];
    if let Some(d) = w.get_mut(..rest.len()) {
        d.copy_from_slice(rest);
    }
    mix(h, u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56))
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

fn flow_hash(frame: &[u8], info: &Info) -> Option<u64> {
    let h = std::cell::Cell::new(shape(info).into_iter().fold(0u64, mix));
    let ok = key_walk(
        info,
        |a, b| match frame.get(a..b) {
            Some(x) => {
                h.set(hash_bytes(h.get(), x));
                true
            }
            None => false,
        },
        |w| match be32(frame, w) {
            Some(x) => {
                h.set(mix(h.get(), u64::from(x & 0xf00f_ffff)));
                true
            }
            None => false,
        },
    );
    ok.then_some(h.get())
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
    let hdr = sum(frame.get(info.l4..info.payload)?);
    Some(!combine(pseudo, hdr))
}

/// Fixes a merged packet's lengths and checksums and sets its GSO request.
fn finalize(h: &mut Held) -> Option<()> {
    let info = h.info;
    let len = h.len;
    // IP lengths and IPv4 header checksums, every level.
    for lvl in 0..info.levels {
        let l3 = *info.l3.get(lvl)?;
        let ip = info.ip.get(lvl)?;
        if ip.v6 {
            put16(
                &mut h.buf,
                l3 + 4,
                u16::try_from(len.checked_sub(l3 + 40)?).ok()?,
            )?;
        } else {
            put16(
                &mut h.buf,
                l3 + 2,
                u16::try_from(len.checked_sub(l3)?).ok()?,
            )?;
            put16(&mut h.buf, l3 + 10, 0)?;
            let c = !sum(h.buf.get(l3..l3 + 20)?);
            put16(&mut h.buf, l3 + 10, c)?;
            h.meta.checksum_recomputed(Slot::ip(level_of(lvl)));
        }
    }
    let l4 = info.l4;
    let l4_len = len.checked_sub(l4)?;
    let (proto, field) = match info.proto? {
        Proto::Tcp => (ip_proto::TCP, 16),
        Proto::Udp => {
            put16(&mut h.buf, l4 + 4, u16::try_from(l4_len).ok()?)?;
            (ip_proto::UDP, 6)
        }
    };
    let inner_slot = Slot::l4(level_of(info.innermost()));
    let pseudo = l4_pseudo(&h.buf, &info, proto, l4_len)?;
    if h.all_good {
        put16(&mut h.buf, l4 + field, 0)?;
        let hdr = sum(h.buf.get(l4..info.payload)?);
        let mut c = !combine(combine(pseudo, hdr), h.payload_sum);
        if c == 0 && proto == ip_proto::UDP {
            c = 0xffff;
        }
        put16(&mut h.buf, l4 + field, c)?;
        h.meta.checksum_recomputed(inner_slot);
    } else {
        put16(&mut h.buf, l4 + field, pseudo)?;
    }
    // The outer UDP header of a tunnel: length, and the checksum when in use.
    let mut outer_partial = false;
    if let Some(t) = info.tunnel.filter(|t| t.kind != TunnelKind::Gre) {
        let ol4 = t.outer_l4;
        let olen = len.checked_sub(ol4)?;
        put16(&mut h.buf, ol4 + 4, u16::try_from(olen).ok()?)?;
        if t.outer_csum {
            let ol3 = *info.l3.first()?;
            let opseudo = pseudo_at(&h.buf, ol3, info.ip.first()?.v6, ip_proto::UDP, olen)?;
            if h.all_good {
                // Local checksum offload: the completed inner L4 region sums to the complement
                // of its pseudo-header.
                put16(&mut h.buf, ol4 + 6, 0)?;
                let head = sum(h.buf.get(ol4..l4)?);
                let inner = if (l4 - ol4) % 2 == 1 {
                    (!pseudo).swap_bytes()
                } else {
                    !pseudo
                };
                let mut c = !combine(combine(opseudo, head), inner);
                if c == 0 {
                    c = 0xffff;
                }
                put16(&mut h.buf, ol4 + 6, c)?;
                h.meta.checksum_recomputed(Slot::OuterL4);
            } else {
                put16(&mut h.buf, ol4 + 6, opseudo)?;
                outer_partial = true;
            }
        }
    }
    if outer_partial {
        h.meta
            .rx_needs_csum(u16::try_from(t_outer_l4(&info)?).ok()?, 6)
            .ok()?;
    }
    if !h.all_good {
        h.meta
            .rx_needs_csum(u16::try_from(l4).ok()?, field as u16)
            .ok()?;
    }
    let inner_v6 = info.ip.get(info.innermost())?.v6;
    let gso = match (info.proto?, inner_v6) {
        (Proto::Tcp, false) => GsoType::TcpV4,
        (Proto::Tcp, true) => GsoType::TcpV6,
        (Proto::Udp, _) => GsoType::UdpL4,
    };
    h.meta
        .set_gso(gso, u16::try_from(h.mss).ok()?, h.cwr)
        .ok()?;
    Some(())
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
fn adopt(layout: &Layout, given: OffloadMeta) -> OffloadMeta {
    let mut m = OffloadMeta::from_layout(layout);
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
