//! The switch's public request and answer types: its settings, port requests and listings,
//! feature states, per-rule results and per-port counters (all serde, as the control socket
//! sends them).

use super::*;

/// Switch settings.
#[derive(Debug, Clone, Copy)]
pub struct SwitchConfig {
    /// The datapath's settings (batch size, GRO engine, parse config, cache).
    pub datapath: DatapathConfig,
    /// Most flow rules.
    pub max_rules: usize,
    /// Most distinct masks (subtables) in the flow table.
    pub max_masks: usize,
    /// Most bytes of rules, by the flow table's per-rule estimate
    /// ([`FlowTable::bytes_per_rule`]).
    pub max_rule_bytes: usize,
    /// Longest wait for a port to become readable before the datapath thread checks for
    /// control work again.
    pub poll_timeout: Duration,
    /// How long the datapath thread keeps polling its ports after a pass that found nothing,
    /// before it sleeps in `poll(2)` (zero: sleep at once). A short spin saves the wake-up of
    /// a sleeping thread on every frame of a back-to-back stream (`docs/demo.md` has the
    /// measurements); an idle switch still sleeps, after at most this long.
    pub busy_poll: Duration,
    /// Datapath threads, each with its own queue of every port (0 is taken as 1). The default
    /// is 1; the daemon's default is one per CPU.
    pub threads: usize,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            datapath: DatapathConfig::default(),
            max_rules: 1 << 20,
            max_masks: 4096,
            max_rule_bytes: 1 << 30,
            poll_timeout: Duration::from_millis(2),
            busy_poll: Duration::from_micros(20),
            threads: 1,
        }
    }
}

/// Port types the switch can open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortKind {
    /// A TAP device the switch creates (or attaches to) with `virtio_net_hdr`.
    Tap,
    /// An existing interface (e.g. a veth end) attached with an `AF_PACKET` socket.
    #[serde(alias = "af_packet")]
    AfPacket,
    /// A TUN device the switch creates (or attaches to) with `virtio_net_hdr`: an L3 port (IP
    /// packets, no Ethernet header; see `docs/ports.md`). Not kept across restarts.
    Tun,
}

impl PortKind {
    /// The name used in messages and listings.
    pub fn name(self) -> &'static str {
        match self {
            PortKind::Tap => "tap",
            PortKind::AfPacket => "afpacket",
            PortKind::Tun => "tun",
        }
    }
}

fn default_true() -> bool {
    true
}

/// A request to add a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortRequest {
    /// The interface name (created for a TAP; existing for `AF_PACKET`).
    pub name: String,
    /// The port type.
    pub kind: PortKind,
    /// The port number rules use (1 to [`MAX_PORT_NUMBER`]); the lowest free number from 1
    /// when absent.
    #[serde(default)]
    pub number: Option<u32>,
    /// Software GRO on the port's received frames.
    #[serde(default)]
    pub gro: bool,
    /// Negotiate the device's offloads (TAP: `TUNSETOFFLOAD`); off: start with none.
    #[serde(default = "default_true")]
    pub offloads: bool,
    /// Open the port inside this named network namespace (`ip netns` name).
    #[serde(default)]
    pub netns: Option<String>,
}

impl PortRequest {
    /// A request with the defaults: automatic number, GRO off, offloads on, this namespace.
    pub fn new(name: &str, kind: PortKind) -> PortRequest {
        PortRequest {
            name: name.to_string(),
            kind,
            number: None,
            gro: false,
            offloads: true,
            netns: None,
        }
    }
}

/// What the switch knows about a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortInfo {
    /// Its handle: unique for the daemon's lifetime, never reused (a port deleted and added
    /// again gets a new one).
    pub handle: u64,
    /// `up`, or `down` when its device vanished (see `docs/control.md`).
    pub state: String,
    /// Its number.
    pub number: u32,
    /// Its name.
    pub name: String,
    /// Its type (`tap`, `afpacket`, …).
    pub kind: String,
    /// Software GRO on.
    pub gro: bool,
    /// Device features that are on (ethtool names).
    pub features: Vec<String>,
    /// The device MTU.
    pub mtu: u32,
}

/// One feature of a port, as `ethtool -k` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureState {
    /// The ethtool name.
    pub name: String,
    /// On.
    pub on: bool,
    /// Can be changed (`ethtool -k` shows `[fixed]` otherwise).
    pub changeable: bool,
}

/// The outcome of one rule of a batch (add or delete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowResult {
    /// Index of the rule in the request (0-based).
    pub index: usize,
    /// The rule's handle, on success: unique for the daemon's lifetime, never reused.
    pub handle: Option<u64>,
    /// Why it failed (parse errors show the line with the offending token marked).
    pub error: Option<String>,
}

/// A port's counters, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatsInfo {
    /// The port number.
    pub number: u32,
    /// The port name.
    pub name: String,
    /// `up` or `down`.
    pub state: String,
    /// Packets received (before GRO).
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Received packets no rule matched.
    pub rx_no_match: u64,
    /// Received packets dropped by rule.
    pub rx_dropped_by_rule: u64,
    /// Received packets an action failed on.
    pub rx_action_errors: u64,
    /// Received frames the port refused (inconsistent `virtio_net_hdr`, unparsable with one).
    pub rx_invalid: u64,
    /// Received frames too big for a buffer.
    pub rx_truncated: u64,
    /// Frames the kernel dropped before the port read them (socket receive queue full).
    pub rx_kernel_drops: u64,
    /// Frames the kernel dropped after the port handed them over (the interface's transmit
    /// drops, e.g. a veth whose peer's queue was full).
    pub tx_kernel_drops: u64,
    /// Receive calls that failed.
    pub rx_errors: u64,
    /// Packets transmit preparation dropped for this egress.
    pub tx_prepare_drops: u64,
    /// Frames the port failed to send.
    pub tx_errors: u64,
    /// Segments software GRO merged.
    pub gro_merged_segments: u64,
    /// Packets software GRO built from two or more segments.
    pub gro_merged_packets: u64,
}

impl PortStatsInfo {
    pub(crate) fn new(number: u32, name: String, down: bool, s: &PortStats) -> PortStatsInfo {
        PortStatsInfo {
            number,
            name,
            state: state_name(down).into(),
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            rx_no_match: s.rx_no_match,
            rx_dropped_by_rule: s.rx_dropped_by_rule,
            rx_action_errors: s.rx_action_errors,
            rx_invalid: s.port.rx_invalid,
            rx_truncated: s.port.rx_truncated,
            rx_kernel_drops: s.port.rx_kernel,
            tx_kernel_drops: s.port.tx_kernel,
            rx_errors: s.rx_errors,
            tx_prepare_drops: s.tx_prepare_drops,
            tx_errors: s.tx_errors,
            gro_merged_segments: s.gro.merged_segments,
            gro_merged_packets: s.gro.merged_packets,
        }
    }
}

pub(super) fn state_name(down: bool) -> &'static str {
    if down {
        "down"
    } else {
        "up"
    }
}
