//! The batched datapath: receive → parse → GRO (per port) → classify → actions → transmit
//! preparation for each egress device → send.
//!
//! A [`Datapath`] owns its ports and is driven by one thread calling [`Datapath::poll_once`]
//! (the switch waits for readiness between empty polls; see the `sluice` binary). Each poll takes
//! up to [`DatapathConfig::batch`] frames from every port in turn. A port with GRO on hands its
//! batch to its own [`GroEngine`](sluice_offload::gro::GroEngine) in the engine's zero-copy
//! burst mode (`coalesce_burst`: Linux's rules, flushed at the batch end like the end of a NAPI
//! poll, so merged packets never wait for a later poll): a frame that joins nothing — a
//! super-frame the device merged already, an ACK — goes on in its own receive buffer, and a
//! merged packet is built once in a pool buffer with headroom (a pushed tag or tunnel header
//! moves nothing). (With [`GroConfig::max_age`](sluice_offload::gro::GroConfig::max_age) above 0 the copying mode holds packets across
//! polls instead.) A batch holding UDP-GSO frames of tunnel datagrams (a hop's packed VXLAN /
//! Geneve segments) goes to the copying mode, each such frame split in place, datagram by
//! datagram, so its payload is copied once; what it merged is held for one more pass (a
//! super-frame crosses a hop as two packed frames, which a batch may separate) and finished by
//! that pass, whatever it receives. Every packet of the burst (or of the GRO output)
//! then has its [`FlowKey`](sluice_flow::FlowKey) extracted from its layout — the one the port
//! found at receive and the buffer carries ([`PacketBuf::layout_for`](crate::PacketBuf::layout_for);
//! a frame GRO passes through unmerged keeps it), or, for a packet GRO built, one parse here
//! that is then carried on: the actions keep it in step with their edits, and software GSO
//! reads it instead of parsing again (the TAP's tunnel GSO header reads the offsets transmit
//! preparation takes from the packet's metadata). The keys are looked up
//! together in the flow table snapshot taken for the burst (lock-free; through a per-datapath
//! exact-match cache, the misses in one batched classifier lookup), and each packet's actions
//! run in order: header actions change the
//! packet ([`crate::actions`]), each `output:N` sends the packet as it is at that point, through
//! [`tx_prepare`](sluice_offload::tx::tx_prepare) for port N's current [`Device`](sluice_offload::features::Device) — so software GSO, checksum completion and VLAN
//! insertion happen only for what that egress device cannot do, as late as possible. Sends are
//! flushed per port at the end of the poll.
//!
//! Buffers come from a [`BufPool`] and go back to it (GRO output included); transmit preparation reuses one [`TxOutput`](sluice_offload::tx::TxOutput). Nothing is allocated per packet once
//! warm.
//!
//! Every drop is counted twice: per port ([`PortStats`]) and in a coverage counter.
//!
//! **L2 and L3 ports.** A port whose [`Port::link`] is [`LinkType::Ip`](sluice_wire::LinkType::Ip) (a TUN port) receives
//! and sends IP packets with no Ethernet header: its packets are parsed (and its GRO engine
//! configured) from the IP header, so rules match them without L2 fields (`eth_*` fields are
//! absent, `eth_type` is the IP version's). Output to an L3 port of a packet that came from an
//! L2 port removes the Ethernet header and VLAN tags (metadata moved with
//! [`OffloadMeta::l2_removed`](sluice_packet::OffloadMeta::l2_removed)); a non-IP frame cannot
//! go there and is dropped (`dp_not_ip_to_l3_drops`). Output of an L3 packet to an L2 port is
//! dropped (`dp_l3_to_l2_drops`): it has no MAC addresses to send with. Both drops count in the
//! egress port's `tx_prepare_drops`.

use crate::actions;
use crate::buf::{BufPool, PacketBuf, DEFAULT_ROOM};
use crate::port::{Port, PortControl, PortDrops, PortError, PortState};
use crate::rule_stats::{self, RuleCounters};
use sluice_coverage::{counter, Counter};
use sluice_flow::{Action, ExactCache, FlowKey, HitRef, Reader};
use sluice_offload::features::{Device, DeviceLimits, Feature, Features};
use sluice_offload::gro::{GroBurst, GroConfig, GroEngine, GroStats};
use sluice_offload::gso::{
    segment, segment_zero_copy, CsumMode, GsoOutput, GsoParams, ZeroCopyOutput,
};
use sluice_offload::tx::{tx_prepare, TxOutcome, TxOutput, TxPacket, TxSteps};
use sluice_packet::rewrite::defer_gso_l4_checksum;
use sluice_packet::{GsoType, OffloadMeta, Slot};
use sluice_wire::{LinkType, ParseConfig};
use std::fmt;
use std::os::fd::RawFd;
use std::sync::Arc;

counter!(pub DP_POLLS, "dp_polls", "datapath polls (one pass over every port)");
counter!(pub DP_RX_PACKETS, "dp_rx_packets", "packets received by the datapath");
counter!(pub DP_TX_FRAMES, "dp_tx_frames", "frames handed to ports to send");
counter!(pub DP_PARSE_PARTIAL, "dp_parse_partial", "packets whose headers did not fully parse (classified on what parsed)");
counter!(pub DP_NO_MATCH_DROPS, "dp_no_match_drops", "packets dropped: no rule matched");
counter!(pub DP_DROP_ACTION, "dp_drop_action", "packets dropped by a drop action or an empty action list");
counter!(pub DP_ACTION_ERRORS, "dp_action_errors", "packets dropped: an action could not be applied");
counter!(pub DP_BAD_OUTPUT, "dp_bad_output_drops", "outputs to a port that does not exist");
counter!(pub DP_TX_PREPARE_DROPS, "dp_tx_prepare_drops", "packets dropped by transmit preparation (see oversize_drops, gso_* counters)");
counter!(pub DP_TX_ERRORS, "dp_tx_errors", "frames a port failed to send");
counter!(pub DP_RX_ERRORS, "dp_rx_errors", "receive calls that failed");
counter!(pub DP_PORT_DOWN, "dp_port_down", "ports taken down because their device vanished (no longer polled)");
counter!(pub DP_DOWN_OUTPUT, "dp_down_output_drops", "outputs to a port that is down");
counter!(pub DP_L3_TO_L2_DROPS, "dp_l3_to_l2_drops", "outputs of an L3 packet (from a TUN port) to an Ethernet port: no MAC addresses to send with");
counter!(pub DP_NOT_IP_TO_L3_DROPS, "dp_not_ip_to_l3_drops", "outputs of a frame without an IP header to an L3 (TUN) port");
counter!(pub DP_RX_USO_SPLIT, "dp_rx_uso_split", "received UDP-GSO frames of VXLAN/Geneve datagrams split into their datagrams before GRO");
counter!(pub DP_RX_USO_DATAGRAMS, "dp_rx_uso_datagrams", "datagrams those frames were split into");
counter!(pub DP_GRO_BURST_INVALID, "dp_gro_burst_invalid", "GRO burst output naming a frame or bytes the burst does not have (an engine bug): packet or piece dropped");
counter!(pub DP_RX_USO_SPLIT_DROPS, "dp_rx_uso_split_drops", "received UDP-GSO tunnel frames dropped: they could not be split");
counter!(pub GRO_FRAMES_IN, "gro_frames_in", "frames fed to software GRO");
counter!(pub GRO_MERGED_SEGMENTS, "gro_merged_segments", "segments software GRO merged into a held packet");
counter!(pub GRO_MERGED_PACKETS, "gro_merged_packets", "packets software GRO built from two or more segments");
counter!(pub GRO_NOT_MERGEABLE, "gro_not_mergeable", "frames software GRO passed through (not mergeable)");
counter!(pub GRO_CSUM_LEFT_PARTIAL, "gro_csum_left_partial", "merged GRO packets whose L4 checksum was left partial for the egress (as Linux's GRO does)");

/// Every datapath counter, for listings before they fire.
pub static COUNTERS: [&Counter; 26] = [
    &DP_POLLS,
    &DP_RX_PACKETS,
    &DP_TX_FRAMES,
    &DP_PARSE_PARTIAL,
    &DP_NO_MATCH_DROPS,
    &DP_DROP_ACTION,
    &DP_ACTION_ERRORS,
    &DP_BAD_OUTPUT,
    &DP_TX_PREPARE_DROPS,
    &DP_TX_ERRORS,
    &DP_RX_ERRORS,
    &DP_PORT_DOWN,
    &DP_DOWN_OUTPUT,
    &DP_L3_TO_L2_DROPS,
    &DP_NOT_IP_TO_L3_DROPS,
    &DP_RX_USO_SPLIT,
    &DP_RX_USO_DATAGRAMS,
    &DP_RX_USO_SPLIT_DROPS,
    &DP_GRO_BURST_INVALID,
    &GRO_FRAMES_IN,
    &GRO_MERGED_SEGMENTS,
    &GRO_MERGED_PACKETS,
    &GRO_NOT_MERGEABLE,
    &GRO_CSUM_LEFT_PARTIAL,
    &actions::DECAP_OUTER_CSUM_CHECKED,
    &actions::DECAP_BAD_OUTER_CSUM,
];

/// Registers [`COUNTERS`] (and transmit preparation's) so listings show them at zero.
pub fn register_counters() {
    sluice_coverage::register(&COUNTERS);
    sluice_offload::tx::register_counters();
}

/// Datapath settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatapathConfig {
    /// Most frames taken from one port per poll (default 64).
    pub batch: usize,
    /// Which UDP ports are VXLAN / Geneve.
    pub parse: ParseConfig,
    /// Settings of each port's GRO engine.
    pub gro: GroConfig,
    /// Receive buffer room (default [`DEFAULT_ROOM`]: a 64 KiB GSO frame).
    pub buf_room: usize,
    /// Entries in the exact-match cache in front of the classifier (0: none). The default,
    /// 262 144, is sized for 65 536 active flows per datapath thread (see
    /// [`ExactCache::new`]): 34 MiB per thread, allocated when its first packet is looked up.
    pub cache_entries: usize,
    /// Count a port taken down in the process-wide `dp_port_down` (default). A switch with one
    /// datapath per thread, each with its own queue of every port, turns it off on all but the
    /// first, so that the counter counts ports, not queues.
    pub count_port_down: bool,
}

impl Default for DatapathConfig {
    fn default() -> Self {
        DatapathConfig {
            batch: 64,
            parse: ParseConfig::DEFAULT,
            gro: GroConfig::default(),
            buf_room: DEFAULT_ROOM,
            cache_entries: 262_144,
            count_port_down: true,
        }
    }
}

/// Per-port settings of the datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortOptions {
    /// Software GRO on the port's received frames.
    pub gro: bool,
    /// GRO merges VXLAN / Geneve / GRE packets by their inner flow (default on; off: tunnelled
    /// frames pass unmerged).
    pub gro_tunnel: bool,
    /// GRO merges plain UDP datagrams into USO packets (default off: some receivers mishandle
    /// them).
    pub gro_udp: bool,
    /// Overrides of the port's transmit device (VLAN depth, envelope, GSO limits), applied to
    /// what the port reports.
    pub limits: DeviceLimits,
}

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions {
            gro: false,
            gro_tunnel: true,
            gro_udp: false,
            limits: DeviceLimits::NONE,
        }
    }
}

/// Counters of one port, kept by the datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Packets received (before GRO).
    pub rx_packets: u64,
    /// Bytes received (before GRO).
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Received packets no rule matched.
    pub rx_no_match: u64,
    /// Received packets dropped by a drop action (or an empty list).
    pub rx_dropped_by_rule: u64,
    /// Received packets an action failed on.
    pub rx_action_errors: u64,
    /// Packets transmit preparation dropped for this egress.
    pub tx_prepare_drops: u64,
    /// GSO packets handed to this egress's device whole (it segments them).
    pub tx_hw_gso: u64,
    /// GSO packets segmented fully in software for this egress (its device could not).
    pub tx_soft_gso: u64,
    /// GSO packets split by partial segmentation for this egress.
    pub tx_partial_gso: u64,
    /// Frames this port failed to send.
    pub tx_errors: u64,
    /// Receive calls that failed.
    pub rx_errors: u64,
    /// UDP-GSO frames of tunnel datagrams (a hop's packed VXLAN / Geneve segments) split on
    /// receive. Each datagram then goes on as a received packet (to GRO, or classified), so on
    /// a port without GRO the received packets' fates (`rx_uso_drops` among them) add up to
    /// `rx_packets - rx_uso_frames + rx_uso_datagrams`.
    pub rx_uso_frames: u64,
    /// The datagrams those frames were split into.
    pub rx_uso_datagrams: u64,
    /// Received UDP-GSO tunnel frames that would not split (dropped).
    pub rx_uso_drops: u64,
    /// The port's own drops (invalid vnet headers, truncation).
    pub port: PortDrops,
    /// The port's GRO engine counters (zero when GRO is off).
    pub gro: GroStats,
}

/// Why a control operation on the datapath failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DatapathError {
    /// No port with this number.
    NoSuchPort(u32),
    /// The port number is taken.
    PortExists(u32),
    /// The port refused.
    Port(PortError),
}

impl fmt::Display for DatapathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatapathError::NoSuchPort(n) => write!(f, "no port {n}"),
            DatapathError::PortExists(n) => write!(f, "port number {n} is in use"),
            DatapathError::Port(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DatapathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DatapathError::Port(e) => Some(e),
            _ => None,
        }
    }
}

/// One port of the datapath: the port itself, its transmit device, options, GRO engine and counters.
struct PortEntry {
    number: u32,
    /// The device vanished: not polled, not sent to, until [`Datapath::replace_port`].
    down: bool,
    port: Box<dyn Port>,
    device: Device,
    /// How the port's frames are parsed: the datapath's configuration with the port's link.
    parse: ParseConfig,
    opts: PortOptions,
    gro: Option<GroEngine>,
    gro_total: GroStats,
    stats: PortStats,
}

impl PortEntry {
    fn gro_stats(&self) -> GroStats {
        let mut s = self.gro_total;
        if let Some(g) = &self.gro {
            add_gro(&mut s, g.stats());
        }
        s
    }
}

fn add_gro(a: &mut GroStats, b: &GroStats) {
    a.frames_in += b.frames_in;
    a.packets_out += b.packets_out;
    a.merged_segments += b.merged_segments;
    a.merged_packets += b.merged_packets;
    a.not_mergeable += b.not_mergeable;
    a.bad_checksum += b.bad_checksum;
    a.flushed.batch_end += b.flushed.batch_end;
    a.flushed.age += b.flushed.age;
    a.flushed.size += b.flushed.size;
    a.flushed.flags += b.flushed.flags;
    a.flushed.mismatch += b.flushed.mismatch;
    a.flushed.evicted += b.flushed.evicted;
    a.flushed.manual += b.flushed.manual;
}

/// The datapath. See the [module documentation](self).
///
/// ```
/// use sluice_datapath::{Datapath, DatapathConfig, MemPort, PortOptions};
/// use sluice_flow::{parse_rule, FlowTable, PortNames, TableConfig};
/// use sluice_offload::features::{Device, Features};
///
/// let mut table = FlowTable::new(TableConfig::default());
/// let ports = PortNames::new();
/// let rule = parse_rule("in_port 1 action push_vlan:802.1q:100,output:2", &ports).unwrap();
/// table.insert(rule).unwrap();
///
/// let mut dp = Datapath::new(table.reader(), DatapathConfig::default());
/// let (port1, wire1) = MemPort::new("p1", Device::new(Features::NONE));
/// let (port2, wire2) = MemPort::new("p2", Device::new(Features::NONE));
/// dp.add_port(1, Box::new(port1), PortOptions::default()).unwrap();
/// dp.add_port(2, Box::new(port2), PortOptions::default()).unwrap();
///
/// let frame = [
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// wire1.inject_frame(&frame);
/// assert_eq!(dp.poll_once(), 1);
/// let sent = wire2.take_sent();
/// assert_eq!(sent.len(), 1);
/// // The frame left port 2 with an 802.1Q tag (VID 100) after the MAC addresses.
/// assert_eq!(sent[0].0[12..16], [0x81, 0x00, 0x00, 100]);
/// assert_eq!(sent[0].0[16..], frame[12..]);
/// assert_eq!(dp.stats(2).unwrap().tx_packets, 1);
/// ```
pub struct Datapath {
    cfg: DatapathConfig,
    /// The ports, sorted by number (never indexed by a port number: a client picks those).
    slots: Vec<PortEntry>,
    reader: Reader,
    cache: Option<ExactCache>,
    pool: BufPool,
    rx: Vec<PacketBuf>,
    tx: TxOutput,
    touched: Vec<u32>,
    now: u64,
    /// Per-rule packets, bytes and last use, by the table's rule handle.
    rules: Arc<RuleCounters>,
    /// The time of the batch being processed ([`rule_stats::stamp_now`]).
    stamp: u64,
    /// The keys of the burst being classified.
    keys: Vec<FlowKey>,
    /// GRO output of one port, as a burst.
    gro_out: Vec<PacketBuf>,
    /// A received burst with its UDP-GSO tunnel frames split (see `split_tunnel_uso`).
    rx_split: Vec<PacketBuf>,
    /// The datagrams of the UDP-GSO tunnel frames of one burst on a port without GRO.
    uso: GsoOutput,
    /// The datagram headers of one UDP-GSO tunnel frame split in place (`gro_receive_split`).
    uso_headers: ZeroCopyOutput,
    /// The metadata each in-place split of the burst gave all its datagrams (its first
    /// datagram's), with the receiving port's parse configuration: a datagram the engine passes
    /// through unmerged still carries it and gets its own (`drain_gro_engine`).
    uso_shared: (Vec<OffloadMeta>, ParseConfig),
    /// The metadata of each frame of a GRO burst.
    burst_metas: Vec<OffloadMeta>,
    /// A GRO burst's output: rewritten headers and pieces of the burst's frames.
    burst_out: GroBurst,
    /// The allocation of a GRO burst's list of frames, kept empty between bursts
    /// ([`borrow_frames`]).
    burst_frames: Vec<&'static [u8]>,
}

/// Packets classified together (one batched lookup).
const LOOKUP_BURST: usize = 64;

impl fmt::Debug for Datapath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Datapath")
            .field("cfg", &self.cfg)
            .field("ports", &self.port_numbers().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Datapath {
    /// A datapath with no ports, classifying with the flow table behind `reader`.
    pub fn new(reader: Reader, cfg: DatapathConfig) -> Datapath {
        register_counters();
        Datapath {
            cfg,
            slots: Vec::new(),
            reader,
            cache: (cfg.cache_entries > 0).then(|| ExactCache::new(cfg.cache_entries)),
            pool: BufPool::new(cfg.buf_room, 4 * cfg.batch.max(1)),
            rx: Vec::with_capacity(cfg.batch),
            tx: TxOutput::new(),
            touched: Vec::new(),
            now: 0,
            rules: Arc::new(RuleCounters::new()),
            stamp: 0,
            keys: Vec::with_capacity(LOOKUP_BURST),
            gro_out: Vec::new(),
            rx_split: Vec::new(),
            uso: GsoOutput::new(),
            uso_headers: ZeroCopyOutput::new(),
            uso_shared: (Vec::new(), ParseConfig::DEFAULT),
            burst_metas: Vec::new(),
            burst_out: GroBurst::new(),
            burst_frames: Vec::new(),
        }
    }

    /// This datapath's per-rule counters (packets, bytes, last use by the table's rule
    /// handle), for the control side to read and to clear a deleted rule's.
    pub fn rule_counters(&self) -> Arc<RuleCounters> {
        Arc::clone(&self.rules)
    }

    /// The settings.
    pub fn config(&self) -> &DatapathConfig {
        &self.cfg
    }

    /// Adds `port` as number `number` (the number rules use in `in_port` / `output`).
    pub fn add_port(
        &mut self,
        number: u32,
        port: Box<dyn Port>,
        opts: PortOptions,
    ) -> Result<(), DatapathError> {
        let at = match self.pos(number) {
            Ok(_) => return Err(DatapathError::PortExists(number)),
            Err(at) => at,
        };
        let device = opts.limits.apply(port.device());
        let parse = self.cfg.parse.with_link(port.link());
        let slot = PortEntry {
            number,
            down: false,
            port,
            device,
            parse,
            opts,
            gro: opts
                .gro
                .then(|| GroEngine::new(self.gro_config(parse, &opts))),
            gro_total: GroStats::default(),
            stats: PortStats::default(),
        };
        self.slots.insert(at, slot);
        Ok(())
    }

    /// Where port `number` is in `slots` (`Err`: where it would go).
    fn pos(&self, number: u32) -> Result<usize, usize> {
        self.slots.binary_search_by_key(&number, |s| s.number)
    }

    /// Puts a freshly opened `port` in place of port `number` (down or not) and brings it up;
    /// its counters and options carry on. Returns the old port.
    pub fn replace_port(
        &mut self,
        number: u32,
        port: Box<dyn Port>,
    ) -> Result<Box<dyn Port>, DatapathError> {
        let parse = self.cfg.parse.with_link(port.link());
        let slot = self.slot_mut(number)?;
        slot.device = slot.opts.limits.apply(port.device());
        slot.parse = parse;
        slot.down = false;
        Ok(std::mem::replace(&mut slot.port, port))
    }

    /// Whether port `number` is down (its device vanished); `None`: no such port.
    pub fn is_down(&self, number: u32) -> Option<bool> {
        self.slot(number).map(|s| s.down)
    }

    /// The numbers of the ports that are down, ascending.
    pub fn down_ports(&self) -> Vec<u32> {
        self.slots
            .iter()
            .filter(|s| s.down)
            .map(|s| s.number)
            .collect()
    }

    /// The GRO settings of a port that parses as `parse`, with options `opts`.
    fn gro_config(&self, parse: ParseConfig, opts: &PortOptions) -> GroConfig {
        let mut g = self.cfg.gro;
        g.parse = parse;
        g.parse.parse_tunnels &= opts.gro_tunnel;
        g.udp |= opts.gro_udp;
        g
    }

    /// Removes port `number` and gives it back. The packets its GRO engine holds go on first
    /// (they came in on it and are forwarded as if their batch had ended): nothing is lost.
    pub fn remove_port(&mut self, number: u32) -> Option<Box<dyn Port>> {
        let at = self.pos(number).ok()?;
        self.finish_held(at, |e, _| e.flush(sluice_offload::gro::FlushReason::Manual));
        self.flush_touched();
        Some(self.slots.remove(at).port)
    }

    /// If the GRO engine of the port at position `at` holds packets: `finish` (given the pass
    /// clock) decides which leave, and those are forwarded.
    fn finish_held(&mut self, at: usize, finish: impl FnOnce(&mut GroEngine, u64)) {
        let Some(slot) = self.slots.get_mut(at) else {
            return;
        };
        let number = slot.number;
        if let Some(mut engine) = slot.gro.take_if(|e| e.held_segments() > 0) {
            finish(&mut engine, self.now);
            self.drain_gro_engine(number, &mut engine);
            if let Some(slot) = self.slots.get_mut(at) {
                slot.gro = Some(engine);
            }
        }
    }

    /// Passes made over the ports so far ([`Datapath::poll_once`] calls) by this datapath: its
    /// own clock (the `dp_polls` counter counts the passes of every datapath in the process).
    pub fn polls(&self) -> u64 {
        self.now
    }

    /// Whether a port's GRO engine holds packets across passes ([`GroConfig::max_age`] above
    /// 0, or what a split of packed tunnel frames merged, kept for one more pass): they leave
    /// as passes age them, so a thread holding some keeps polling.
    pub fn holds_packets(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.gro.as_ref().is_some_and(|g| g.held_segments() > 0))
    }

    /// The port with number `number`.
    pub fn port(&self, number: u32) -> Option<&dyn Port> {
        self.slot(number).map(|s| &*s.port)
    }

    /// The numbers of the ports, ascending.
    pub fn port_numbers(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().map(|s| s.number)
    }

    fn slot(&self, number: u32) -> Option<&PortEntry> {
        self.slots.get(self.pos(number).ok()?)
    }

    fn slot_mut(&mut self, number: u32) -> Result<&mut PortEntry, DatapathError> {
        match self.pos(number) {
            Ok(at) => self
                .slots
                .get_mut(at)
                .ok_or(DatapathError::NoSuchPort(number)),
            Err(_) => Err(DatapathError::NoSuchPort(number)),
        }
    }

    /// The port's options.
    pub fn options(&self, number: u32) -> Option<PortOptions> {
        self.slot(number).map(|s| s.opts)
    }

    /// The port's counters.
    pub fn stats(&self, number: u32) -> Option<PortStats> {
        self.slot(number).map(|s| {
            let mut st = s.stats;
            st.port = s.port.drops();
            st.gro = s.gro_stats();
            st
        })
    }

    /// The port's transmit device (as the datapath uses it).
    pub fn device(&self, number: u32) -> Option<Device> {
        self.slot(number).map(|s| s.device)
    }

    /// Turns software GRO on or off for port `number`; turning it off first sends what the
    /// engine holds.
    pub fn set_gro(&mut self, number: u32, on: bool) -> Result<(), DatapathError> {
        let mut opts = self.slot_mut(number)?.opts;
        opts.gro = on;
        self.set_options(number, opts)
    }

    /// Changes port `number`'s options. A GRO engine whose settings change first sends what
    /// it holds; the device overrides apply from the next packet on.
    pub fn set_options(&mut self, number: u32, opts: PortOptions) -> Result<(), DatapathError> {
        let parse = self.slot_mut(number)?.parse;
        let g = self.gro_config(parse, &opts);
        let slot = self.slot_mut(number)?;
        let regro = !opts.gro
            || slot.opts.gro_tunnel != opts.gro_tunnel
            || slot.opts.gro_udp != opts.gro_udp;
        slot.opts = opts;
        slot.device = opts.limits.apply(slot.port.device());
        if regro {
            if let Some(mut engine) = slot.gro.take() {
                engine.flush(sluice_offload::gro::FlushReason::Manual);
                let stats = *engine.stats();
                add_gro(&mut slot.gro_total, &stats);
                self.drain_gro_engine(number, &mut engine);
            }
        }
        let slot = self.slot_mut(number)?;
        if opts.gro && slot.gro.is_none() {
            slot.gro = Some(GroEngine::new(g));
        }
        Ok(())
    }

    /// Turns a device feature of port `number` on or off (as `ethtool -K`); the datapath uses
    /// the new device from the next packet on.
    pub fn set_feature(
        &mut self,
        number: u32,
        feature: Feature,
        on: bool,
    ) -> Result<(), DatapathError> {
        let slot = self.slot_mut(number)?;
        slot.port
            .set_feature(feature, on)
            .map_err(DatapathError::Port)?;
        slot.device = slot.opts.limits.apply(slot.port.device());
        Ok(())
    }

    /// Hands port `number` a device state its control side read or made
    /// ([`Port::apply_state`]); the datapath uses the new
    /// device from the next packet on.
    pub fn apply_state(&mut self, number: u32, state: &PortState) -> Result<(), DatapathError> {
        let slot = self.slot_mut(number)?;
        slot.port.apply_state(state).map_err(DatapathError::Port)?;
        slot.device = slot.port.device();
        Ok(())
    }

    /// The control side of port `number`, if its device changes are kernel calls to make off
    /// the datapath ([`Port::control`]).
    pub fn port_control(&self, number: u32) -> Option<Arc<dyn PortControl>> {
        self.slot(number).and_then(|s| s.port.control())
    }

    /// Features of port `number` the port can change.
    pub fn changeable(&self, number: u32) -> Option<Features> {
        self.slot(number).map(|s| s.port.changeable())
    }

    /// Descriptors to wait on for readability.
    pub fn fds(&self, out: &mut Vec<RawFd>) {
        out.clear();
        out.extend(
            self.slots
                .iter()
                .filter(|s| !s.down)
                .filter_map(|s| s.port.fd()),
        );
    }

    /// Buffers allocated by the pool so far (flat in steady state).
    pub fn buffers_allocated(&self) -> u64 {
        self.pool.allocated()
    }

    /// One pass over every port: receives up to a batch from each and forwards it. Returns the
    /// number of frames received.
    pub fn poll_once(&mut self) -> usize {
        DP_POLLS.inc();
        self.now = self.now.wrapping_add(1);
        let mut total = 0;
        for at in 0..self.slots.len() {
            total += self.poll_port(at);
        }
        self.flush_touched();
        total
    }

    /// Polls the port at position `at` of `slots`.
    fn poll_port(&mut self, at: usize) -> usize {
        let batch = self.cfg.batch;
        let Some(slot) = self.slots.get_mut(at) else {
            return 0;
        };
        if slot.down {
            return 0;
        }
        let number = slot.number;
        let parse = slot.parse;
        self.rx.clear();
        let n = match slot.port.recv(&mut self.pool, &mut self.rx, batch) {
            Ok(n) => n,
            Err(e) => {
                slot.stats.rx_errors += 1;
                DP_RX_ERRORS.inc();
                if device_gone(&e) {
                    // Polling it again would fail at once, forever: a busy loop.
                    slot.down = true;
                    if self.cfg.count_port_down {
                        DP_PORT_DOWN.inc();
                    }
                }
                0
            }
        };
        if self.rx.is_empty() {
            // A quiet port's held GRO packets (`max_age` above 0, or kept by a split) still
            // age out.
            self.finish_held(at, GroEngine::end_batch);
            return n;
        }
        DP_RX_PACKETS.add(self.rx.len() as u64);
        self.stamp = rule_stats::stamp_now();
        for p in &mut self.rx {
            p.in_port = number;
            slot.stats.rx_packets += 1;
            slot.stats.rx_bytes += p.len() as u64;
        }
        let mut rx = std::mem::take(&mut self.rx);
        let uso = rx.iter().any(is_tunnel_uso);
        if let Some(mut engine) = slot.gro.take() {
            let before = *engine.stats();
            let zero_age = engine.config().max_age == 0;
            if uso || (zero_age && engine.held_segments() > 0) {
                // UDP-GSO tunnel frames: split in place, each datagram merged (copied) as it
                // comes, in the copying mode (same rules; see `gro_receive_split`). The pass
                // after them too, while a packet they merged is held: the rest of its
                // super-frame may come as a datagram of its own.
                self.gro_receive_split(&mut engine, &mut rx, &parse, uso);
            } else if zero_age {
                // Nothing is held across bursts: the zero-copy burst mode, same rules.
                self.gro_burst(number, &mut engine, &mut rx);
            } else {
                engine.receive_batch(rx.iter().map(|p| (p.frame(), p.meta)), self.now);
            }
            for p in rx.drain(..) {
                self.pool.put(p);
            }
            let after = *engine.stats();
            GRO_FRAMES_IN.add(after.frames_in - before.frames_in);
            GRO_MERGED_SEGMENTS.add(after.merged_segments - before.merged_segments);
            GRO_MERGED_PACKETS.add(after.merged_packets - before.merged_packets);
            GRO_NOT_MERGEABLE.add(after.not_mergeable - before.not_mergeable);
            self.drain_gro_engine(number, &mut engine);
            if let Some(slot) = self.slots.get_mut(at) {
                slot.gro = Some(engine);
            }
        } else {
            if uso {
                self.split_tunnel_uso(&mut rx, &parse);
            }
            self.process_burst(&mut rx, &parse);
            for p in rx.drain(..) {
                self.pool.put(p);
            }
        }
        self.rx = rx;
        n
    }

    /// The datagrams of one UDP-GSO frame of VXLAN / Geneve datagrams (what a sender that
    /// packs its tunnel segments sends, Sluice's own `tx_prepare` among them: see
    /// `sluice_offload::tx`), appended to `out`, so GRO and the decap action see ordinary
    /// tunnel packets. Software USO: each datagram's IPv4 header checksum is computed and its
    /// outer UDP checksum left partial, as the frame's was (nothing reads the payload). `None`
    /// (counted, the frame is to be dropped; `out` unchanged) when it cannot be split.
    fn split_uso(
        &mut self,
        p: &PacketBuf,
        parse: &ParseConfig,
        out: &mut GsoOutput,
    ) -> Option<usize> {
        self.uso_split_with(p, parse, |frame, layout, params| {
            segment(frame, layout, params, out).ok()
        })
    }

    /// The part of a split of the UDP-GSO tunnel frame `p` both ways share: the outer headers
    /// parsed, the software USO request made, `split` run on them, the outcome counted (frames
    /// split and datagrams made, or a frame that would not split: dropped). Returns what
    /// `split` returned.
    fn uso_split_with(
        &mut self,
        p: &PacketBuf,
        parse: &ParseConfig,
        split: impl FnOnce(&[u8], &sluice_wire::Layout, &GsoParams) -> Option<usize>,
    ) -> Option<usize> {
        let outer_only = ParseConfig {
            parse_tunnels: false,
            ..*parse
        };
        // The outer stack: from the layout found at receive, else a parse with tunnels off.
        let carried = p
            .whole_layout(parse)
            .and_then(sluice_wire::Layout::outer_only);
        let split = carried
            .or_else(|| sluice_wire::parse_with(p.frame(), &outer_only).ok())
            .and_then(|layout| {
                let mut params = GsoParams::new(GsoType::UdpL4, p.meta.segment_size());
                // The frame's outer UDP checksum is partial (a UDP-GSO frame's always is):
                // so is each datagram's, the pseudo-header sum seeded as a device expects.
                params.l4_csum = CsumMode::Partial;
                split(p.frame(), &layout, &params)
            });
        match split {
            Some(k) => {
                DP_RX_USO_SPLIT.inc();
                DP_RX_USO_DATAGRAMS.add(k as u64);
                if let Ok(s) = self.slot_mut(p.in_port) {
                    s.stats.rx_uso_frames += 1;
                    s.stats.rx_uso_datagrams += k as u64;
                }
            }
            None => {
                DP_RX_USO_SPLIT_DROPS.inc();
                if let Ok(s) = self.slot_mut(p.in_port) {
                    s.stats.rx_uso_drops += 1;
                }
            }
        }
        split
    }

    /// A GRO port's burst with UDP-GSO tunnel frames in it, in the engine's copying mode: each
    /// such frame is split **in place** ([`Datapath::split_uso_in_place`]) and its datagrams
    /// go to the engine one by one, the others as they are; then the batch ends. The engine
    /// copies what it keeps before the next datagram's headers are written over the end of
    /// the one before, so a frame's payload is copied once (into the merged packet) where a
    /// split into fresh buffers copied it twice. The price: in such a burst the other frames
    /// are copied too, and every packet out of the copying mode has no headroom (a decap needs
    /// none; a tag pushed or a larger header put in front moves the packet). With `packed`
    /// (the burst has such frames) what it merged is kept for the next pass
    /// ([`GroEngine::end_batch_keep_new`]); without (the pass after, while a packet is held),
    /// everything leaves.
    fn gro_receive_split(
        &mut self,
        engine: &mut GroEngine,
        rx: &mut [PacketBuf],
        parse: &ParseConfig,
        packed: bool,
    ) {
        self.uso_shared.0.clear();
        self.uso_shared.1 = *parse;
        for p in rx.iter_mut() {
            if is_tunnel_uso(p) {
                self.split_uso_in_place(p, parse, engine);
            } else {
                engine.receive(p.frame(), p.meta, self.now);
            }
        }
        if packed && engine.config().max_age == 0 {
            // One super-frame is two packed frames (its datagrams pass 64 KiB; the second
            // may be a lone datagram), and a batch may end between them: what this batch
            // merged waits one pass for the rest, so it leaves as one packet, not two (one
            // write into the egress TAP, one wake-up of its receiver). The next pass
            // finishes it, with or without frames.
            engine.end_batch_keep_new(self.now);
        } else {
            engine.end_batch(self.now);
        }
    }

    /// Splits the UDP-GSO frame of VXLAN / Geneve datagrams `p` in its own buffer and hands
    /// each datagram to `engine` as soon as it is whole: datagram `k`'s outer headers (lengths,
    /// IPv4 ID and header checksum fixed; outer UDP checksum partial, as the frame's was) are
    /// written just before its payload, over the end of the datagrams before it, which the
    /// engine has already taken. The datagrams have the same headers but for lengths, IDs and
    /// checksums, so one parse (the first datagram's) gives them all their metadata: the
    /// engine parses each one itself before merging or holding it, and one it passes through
    /// gets its own metadata when it leaves the engine ([`Datapath::drain_gro_engine`]). A
    /// frame that cannot be split is counted and dropped, as by `split_uso`.
    fn split_uso_in_place(
        &mut self,
        p: &mut PacketBuf,
        parse: &ParseConfig,
        engine: &mut GroEngine,
    ) {
        let mut heads = std::mem::take(&mut self.uso_headers);
        heads.clear();
        let split = self.uso_split_with(p, parse, |frame, layout, params| {
            let n = segment_zero_copy(frame, layout, params, &mut heads).ok()?;
            // Each datagram's headers fit before its payload, and the payloads follow each
            // other: writing datagram k's headers touches only bytes of datagrams before it.
            let mut end = None;
            let fits = (0..n).all(|k| {
                heads.segment(k).is_some_and(|s| {
                    let ok = s.payload.start >= s.header.len()
                        && end.is_none_or(|e| e == s.payload.start);
                    end = Some(s.payload.end);
                    ok
                })
            });
            fits.then_some(n)
        });
        let Some(n) = split else {
            self.uso_headers = heads;
            return;
        };
        let mut shared: Option<OffloadMeta> = None;
        for k in 0..n {
            let Some(seg) = heads.segment(k) else { break };
            let (hdr, payload) = (seg.header.clone(), seg.payload.clone());
            let start = payload.start - hdr.len();
            let frame = p.frame_mut();
            let (Some(dst), Some(src)) = (
                frame.get_mut(start..payload.start),
                heads.header_arena().get(hdr),
            ) else {
                break;
            };
            dst.copy_from_slice(src);
            let Some(datagram) = p.frame().get(start..payload.end) else {
                break;
            };
            // (If the first one does not parse, each datagram gets its own parse.)
            let meta = match shared {
                Some(m) => m,
                None => {
                    shared = parsed_datagram_meta(datagram, parse);
                    if let Some(m) = shared.filter(|m| self.uso_shared.0.last() != Some(m)) {
                        self.uso_shared.0.push(m);
                    }
                    shared.unwrap_or_default()
                }
            };
            engine.receive(datagram, meta, self.now);
        }
        self.uso_headers = heads;
    }

    /// A GRO port's burst in the engine's zero-copy burst mode
    /// ([`GroEngine::coalesce_burst`], for `max_age` 0: the same rules and output order as
    /// the copying mode, nothing held across bursts), for a burst without UDP-GSO tunnel
    /// frames (those go to [`Datapath::gro_receive_split`]). What comes out:
    /// - a frame that joined nothing (a super-frame the device already merged, an ACK, a
    ///   packet of another protocol): **its own received buffer**, headroom and all — no copy,
    ///   where the copying mode copied every such frame, 64 KiB super-frames included;
    /// - a merged packet: its rewritten headers and its segments' payloads copied once into
    ///   a pool buffer, **with headroom**, so a tag pushed or a tunnel header put in front
    ///   moves nothing (the copying mode's output had none).
    ///
    /// Then the burst is classified and forwarded in that order.
    fn gro_burst(&mut self, number: u32, engine: &mut GroEngine, rx: &mut [PacketBuf]) {
        let mut metas = std::mem::take(&mut self.burst_metas);
        let mut out = std::mem::take(&mut self.burst_out);
        metas.clear();
        metas.extend(rx.iter().map(|p| p.meta));
        {
            let mut frames = borrow_frames(&mut self.burst_frames);
            frames.extend(rx.iter().map(PacketBuf::frame));
            engine.coalesce_burst(&frames, &metas, &mut out);
            self.burst_frames = unborrow_frames(frames);
        }
        let mut burst = std::mem::take(&mut self.gro_out);
        burst.clear();
        for bp in out.packets() {
            let mut pieces = out.pieces(bp);
            let mut p = if bp.header.is_empty() {
                // One frame, whole (a trailing pad may be cut off).
                let Some(piece) = pieces.next() else {
                    DP_GRO_BURST_INVALID.inc();
                    continue;
                };
                let Some(slot) = rx.get_mut(piece.frame) else {
                    DP_GRO_BURST_INVALID.inc();
                    continue;
                };
                if piece.range.start == 0 {
                    let mut p = std::mem::replace(slot, PacketBuf::from_vec(Vec::new()));
                    p.truncate(piece.range.end);
                    p
                } else {
                    let mut p = self.pool.get();
                    p.set_frame(slot.frame().get(piece.range.clone()).unwrap_or_default());
                    p
                }
            } else {
                let mut p = self.pool.get();
                p.set_frame(out.header(bp));
                for piece in pieces {
                    match rx.get(piece.frame).and_then(|f| f.frame().get(piece.range)) {
                        Some(b) => p.append(b),
                        None => DP_GRO_BURST_INVALID.inc(),
                    }
                }
                p
            };
            p.meta = bp.meta;
            p.in_port = number;
            partial_gro_checksum(&mut p);
            burst.push(p);
        }
        // Classified as the copying mode's output is: with the engine's parse configuration
        // (tunnels only where the port's `gro_tunnel` lets GRO see into them).
        let gro_parse = engine.config().parse;
        self.process_burst(&mut burst, &gro_parse);
        for p in burst.drain(..) {
            self.pool.put(p);
        }
        self.gro_out = burst;
        self.burst_metas = metas;
        self.burst_out = out;
    }

    /// Replaces each UDP-GSO tunnel frame in `rx` (a port without GRO) by its datagrams
    /// ([`Datapath::split_uso`]), in place and in order.
    fn split_tunnel_uso(&mut self, rx: &mut Vec<PacketBuf>, parse: &ParseConfig) {
        let mut out = std::mem::take(&mut self.rx_split);
        out.clear();
        for p in rx.drain(..) {
            if !is_tunnel_uso(&p) {
                out.push(p);
                continue;
            }
            let mut uso = std::mem::take(&mut self.uso);
            uso.clear();
            if self.split_uso(&p, parse, &mut uso).is_some() {
                for f in uso.frames() {
                    let mut b = self.pool.get();
                    b.set_frame(f);
                    b.in_port = p.in_port;
                    b.meta = datagram_meta(f, parse);
                    out.push(b);
                }
            }
            self.uso = uso;
            self.pool.put(p);
        }
        std::mem::swap(rx, &mut out);
        self.rx_split = out;
    }

    fn drain_gro_engine(&mut self, number: u32, engine: &mut GroEngine) {
        // Taken whatever happens, and given back empty: it describes this drain's burst only.
        let mut reparse = std::mem::take(&mut self.uso_shared.0);
        if engine.output_len() > 0 {
            let parse = engine.config().parse;
            let mut burst = std::mem::take(&mut self.gro_out);
            while let Some(g) = engine.pop_output() {
                let mut p = PacketBuf::from_vec(g.frame);
                p.meta = g.meta;
                if g.segments == 1 && reparse.contains(&g.meta) {
                    // A split datagram the engine passed through with its frame's first
                    // datagram's metadata (a Geneve one with other options, an inner packet GRO
                    // does not take): its own, as a datagram split on a port without GRO gets.
                    p.meta = datagram_meta(p.frame(), &self.uso_shared.1);
                }
                p.in_port = number;
                partial_gro_checksum(&mut p);
                burst.push(p);
            }
            self.process_burst(&mut burst, &parse);
            for p in burst.drain(..) {
                engine.recycle(p.into_vec());
            }
            self.gro_out = burst;
        }
        reparse.clear();
        self.uso_shared.0 = reparse;
    }

    /// Classifies a burst and runs each packet's actions, in order: every packet is parsed and
    /// its key extracted, the keys are looked up together (through the exact-match cache, the
    /// misses in one classifier burst), then the actions run packet by packet.
    /// `parse`: the receiving port's parse configuration.
    fn process_burst(&mut self, burst: &mut [PacketBuf], parse: &ParseConfig) {
        if burst.is_empty() {
            return;
        }
        let snap = self.reader.snapshot();
        for chunk in burst.chunks_mut(LOOKUP_BURST) {
            self.keys.clear();
            for p in chunk.iter_mut() {
                // The layout the port found at receive, when it travelled this far (a merged
                // GRO packet's is new: parsed here, once, and carried on).
                let in_port = p.in_port;
                let (frame, layout, whole) = p.parse_layout(parse);
                if !whole {
                    DP_PARSE_PARTIAL.inc();
                }
                self.keys.push(FlowKey::extract(frame, layout, in_port));
            }
            let mut hits: [Option<HitRef<'_>>; LOOKUP_BURST] = [None; LOOKUP_BURST];
            match self.cache.as_mut() {
                Some(c) => snap.lookup_burst_cached(c, &self.keys, &mut hits),
                None => {
                    for (h, k) in hits.iter_mut().zip(&self.keys) {
                        *h = snap.lookup(k);
                    }
                }
            }
            for (p, hit) in chunk.iter_mut().zip(hits) {
                self.act(hit, p, parse);
            }
        }
    }

    /// Runs the actions of `p`'s rule (`None`: no rule matched, counted).
    /// `parse`: the receiving port's parse configuration.
    fn act(&mut self, hit: Option<HitRef<'_>>, p: &mut PacketBuf, parse: &ParseConfig) {
        let in_port = p.in_port;
        let Some(hit) = hit else {
            DP_NO_MATCH_DROPS.inc();
            if let Ok(s) = self.slot_mut(in_port) {
                s.stats.rx_no_match += 1;
            }
            return;
        };
        self.rules.hit(hit.handle.0, p.len() as u64, self.stamp);
        let list = hit.actions.as_slice();
        let mut sent = false;
        for a in list {
            match a {
                Action::Output(out) => {
                    self.transmit(*out, p, parse);
                    sent = true;
                }
                Action::Drop => break,
                other => {
                    if actions::apply(p, other, parse).is_err() {
                        DP_ACTION_ERRORS.inc();
                        if let Ok(s) = self.slot_mut(in_port) {
                            s.stats.rx_action_errors += 1;
                        }
                        return;
                    }
                }
            }
        }
        if !sent {
            DP_DROP_ACTION.inc();
            if let Ok(s) = self.slot_mut(in_port) {
                s.stats.rx_dropped_by_rule += 1;
            }
        }
    }

    /// Sends `p` as it is now out of port `out`, through transmit preparation for its device.
    /// `parse`: the parse configuration of the port `p` came in on (its link type, and the
    /// configuration of the layout `p` carries).
    fn transmit(&mut self, out: u32, p: &PacketBuf, parse: &ParseConfig) {
        let from = parse.link;
        let Some(slot) = self.pos(out).ok().and_then(|at| self.slots.get_mut(at)) else {
            DP_BAD_OUTPUT.inc();
            return;
        };
        if slot.down {
            DP_DOWN_OUTPUT.inc();
            slot.stats.tx_errors += 1;
            return;
        }
        // L2 and L3 ports (see the module documentation). An L3 packet: no Ethernet header,
        // and (unless it came from an L3 port, whatever parsed of it) the IP header at 0.
        let o = p.meta.offsets();
        let l3_packet = o.outer_l2.is_none() && (from == LinkType::Ip || o.outer_l3 == Some(0));
        let mut meta = p.meta;
        let frame = match (slot.parse.link, l3_packet) {
            (LinkType::Ethernet, true) => {
                DP_L3_TO_L2_DROPS.inc();
                slot.stats.tx_prepare_drops += 1;
                return;
            }
            (LinkType::Ip, false) => match meta.l2_removed() {
                Ok(l3) => p.frame().get(usize::from(l3)..).unwrap_or_default(),
                Err(_) => {
                    DP_NOT_IP_TO_L3_DROPS.inc();
                    slot.stats.tx_prepare_drops += 1;
                    return;
                }
            },
            _ => p.frame(),
        };
        // Software GSO, when it must parse, finds tunnels as the packet's metadata did: with
        // the ingress port's configuration.
        self.tx.parse = *parse;
        let pkt = TxPacket::new(frame, meta);
        // The layout found at receive and kept by the actions, when it describes these bytes
        // (an L3 port's frame cut from an L2 packet has none).
        let pkt = match p.whole_layout(parse) {
            Some(l) if frame.len() == p.len() => pkt.with_layout(l, parse),
            _ => pkt,
        };
        let mut sent = 0u64;
        let mut bytes = 0u64;
        let mut errors = 0u64;
        let outcome = tx_prepare(&pkt, &slot.device, &mut self.tx);
        let steps = outcome.actions();
        slot.stats.tx_hw_gso += u64::from(steps.contains(TxSteps::HW_GSO));
        slot.stats.tx_soft_gso += u64::from(steps.contains(TxSteps::SOFT_GSO));
        slot.stats.tx_partial_gso += u64::from(steps.contains(TxSteps::PARTIAL_GSO));
        match outcome {
            TxOutcome::Unchanged { work, .. } => match slot.port.send(frame, &work) {
                Ok(()) => {
                    sent += 1;
                    bytes += frame.len() as u64;
                }
                Err(_) => errors += 1,
            },
            TxOutcome::Prepared { .. } => {
                for (frame, work) in self.tx.frames() {
                    match slot.port.send(frame, work) {
                        Ok(()) => {
                            sent += 1;
                            bytes += frame.len() as u64;
                        }
                        Err(_) => errors += 1,
                    }
                }
            }
            TxOutcome::Dropped(_) => {
                slot.stats.tx_prepare_drops += 1;
                DP_TX_PREPARE_DROPS.inc();
            }
        }
        slot.stats.tx_packets += sent;
        slot.stats.tx_bytes += bytes;
        slot.stats.tx_errors += errors;
        DP_TX_FRAMES.add(sent);
        DP_TX_ERRORS.add(errors);
        if sent > 0 && !self.touched.contains(&out) {
            self.touched.push(out);
        }
    }

    fn flush_touched(&mut self) {
        for &out in &self.touched {
            if let Some(slot) = self.pos(out).ok().and_then(|at| self.slots.get_mut(at)) {
                if slot.port.flush().is_err() {
                    slot.stats.tx_errors += 1;
                    DP_TX_ERRORS.inc();
                }
            }
        }
        self.touched.clear();
    }
}

/// The metadata of a datagram split from a UDP-GSO tunnel frame: its layout, its outer UDP
/// checksum partial (never reported good: nobody summed it) and its IPv4 header checksum good
/// (the split computed it).
fn datagram_meta(f: &[u8], parse: &ParseConfig) -> OffloadMeta {
    parsed_datagram_meta(f, parse).unwrap_or_default()
}

/// [`datagram_meta`], `None` when the datagram does not parse.
fn parsed_datagram_meta(f: &[u8], parse: &ParseConfig) -> Option<OffloadMeta> {
    let layout = sluice_wire::parse_with(f, parse).ok()?;
    let mut meta = OffloadMeta::from_layout(&layout);
    if let Some(l4) = meta.offsets().outer_l4 {
        // A UDP header is 8 bytes: the field at 6 is inside any datagram that parsed.
        let _ = meta.rx_needs_csum(l4, 6);
    }
    let l3 = meta.offsets().outer_l3.map(usize::from);
    if l3.and_then(|o| f.get(o)).is_some_and(|v| v >> 4 == 4) {
        meta.checksum_recomputed(Slot::OuterIp);
    }
    Some(meta)
}

/// An empty list of borrowed frames in `spare`'s allocation (taken; the list is empty, so
/// no reference outlives its burst): no allocation per burst once warm. Collecting a
/// vector's own iterator into a vector of a same-sized type reuses its buffer.
fn borrow_frames<'a>(spare: &mut Vec<&'static [u8]>) -> Vec<&'a [u8]> {
    let mut v = std::mem::take(spare);
    v.clear();
    v.into_iter().map(|f| -> &'a [u8] { f }).collect()
}

/// Gives a burst's list of frames back as the spare allocation ([`borrow_frames`]): emptied
/// first, so nothing borrowed is kept.
fn unborrow_frames(mut v: Vec<&[u8]>) -> Vec<&'static [u8]> {
    v.clear();
    // Empty: the closure never runs; it only names the element type.
    v.into_iter().map(|_| -> &'static [u8] { &[] }).collect()
}

/// A UDP-GSO frame of VXLAN / Geneve datagrams ([`Datapath::split_uso`]).
fn is_tunnel_uso(p: &PacketBuf) -> bool {
    p.meta.gso_type() == GsoType::UdpL4
        && p.meta.tunnel().is_some_and(sluice_wire::TunnelKind::is_udp)
}

/// A merged GRO packet's innermost L4 checksum left partial in its own buffer (the field holds
/// the pseudo-header sum), as Linux's `tcp_gro_complete` leaves `CHECKSUM_PARTIAL`: a TSO
/// egress then takes the packet as it is, where a complete checksum made transmit preparation
/// copy the whole packet to seed the field; a software GSO egress fills each segment's anyway.
/// Packets that are not merged, or whose checksum is not known good, are left alone.
fn partial_gro_checksum(p: &mut PacketBuf) {
    let mut meta = p.meta;
    // On error neither the frame nor the metadata changes: the packet goes on as it was.
    // Only the L4 checksum field is written: the carried layout stays.
    if defer_gso_l4_checksum(p.checksums_mut(), &mut meta) {
        p.meta = meta;
        GRO_CSUM_LEFT_PARTIAL.inc();
    }
}

/// Whether a receive error means the port's device is gone (a TAP or interface deleted behind
/// the switch's back): `EBADFD` (a TAP whose device was deleted), `ENODEV`, `ENXIO`, or
/// `ENETDOWN` (an `AF_PACKET` socket whose interface was deleted).
fn device_gone(e: &PortError) -> bool {
    const ENXIO: i32 = 6;
    const ENODEV: i32 = 19;
    const EBADFD: i32 = 77;
    const ENETDOWN: i32 = 100;
    match e {
        PortError::Io { source, .. } => {
            matches!(
                source.raw_os_error(),
                Some(ENXIO | ENODEV | EBADFD | ENETDOWN)
            )
        }
        _ => false,
    }
}
