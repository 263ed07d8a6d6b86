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
    /// before it sleeps in `poll(2)` (zero: sleep at once), yielding the CPU between passes. A
    /// short spin saves the wake-up of a sleeping thread on every frame of a back-to-back
    /// stream. Only a pass after one that found frames spins: a thread woken with nothing to
    /// do (the `poll` timeout) sleeps again at once, so an idle switch does not spin. Default
    /// [`DEFAULT_BUSY_POLL_US`](crate::config::DEFAULT_BUSY_POLL_US) (`docs/demo.md` and
    /// BENCHMARKS.md have the measurements).
    pub busy_poll: Duration,
    /// Datapath threads, each with its own queue of every port (0 is taken as 1). The default
    /// is 1; the daemon's default is one per CPU.
    pub threads: usize,
    /// Pin datapath thread `i` to the `i`-th CPU the thread calling `Switch::start` may run on
    /// (`sched_getaffinity`), as OVS pins its PMD threads, when there are no more threads than
    /// such CPUs; else (and if pinning fails: a warning) the threads are left to the
    /// scheduler. Default `false`; the daemon pins when it runs one thread per such CPU
    /// (`pin_threads`).
    pub pin_threads: bool,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            datapath: DatapathConfig::default(),
            max_rules: 1 << 20,
            max_masks: 4096,
            max_rule_bytes: 1 << 30,
            poll_timeout: Duration::from_millis(2),
            busy_poll: Duration::from_micros(crate::config::DEFAULT_BUSY_POLL_US),
            threads: 1,
            pin_threads: false,
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
    /// TAP: negotiate UDP-tunnel GSO with the 24-byte `virtio_net_hdr` (default on; the
    /// 12-byte header where the kernel refuses it), so VXLAN / Geneve super-frames cross the
    /// TAP whole. Set when the port is opened.
    #[serde(default = "default_true")]
    pub udp_tunnel_gso: bool,
    /// GRO merges tunnelled (VXLAN, Geneve, GRE) packets by their inner flow (default on).
    #[serde(default = "default_true")]
    pub gro_tunnel: bool,
    /// GRO merges plain UDP datagrams into USO packets (default off).
    #[serde(default)]
    pub gro_udp: bool,
    /// How many stacked VLAN tags the device segments and checksums under (0 to 8); the
    /// port kind's own when absent (AF_PACKET 8, TAP 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan_depth: Option<u8>,
    /// Envelope allowance: L2 header bytes (VLAN tags) accepted beyond Ethernet header + MTU
    /// (0 to 64); 4 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<u32>,
    /// Largest GSO packet handed to the device whole (bytes, as `ip link … gso_max_size`);
    /// the device's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gso_max_size: Option<u32>,
    /// Most segments of a GSO packet handed to the device whole (as `ip link …
    /// gso_max_segs`); the device's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gso_max_segs: Option<u32>,
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
            udp_tunnel_gso: true,
            gro_tunnel: true,
            gro_udp: false,
            vlan_depth: None,
            envelope: None,
            gso_max_size: None,
            gso_max_segs: None,
        }
    }

    /// The device overrides the request asks for.
    pub fn limits(&self) -> DeviceLimits {
        DeviceLimits {
            vlan_depth: self.vlan_depth,
            envelope: self.envelope,
            gso_max_size: self.gso_max_size,
            gso_max_segs: self.gso_max_segs,
        }
    }

    /// The datapath options the request asks for.
    pub fn options(&self) -> PortOptions {
        PortOptions {
            gro: self.gro,
            gro_tunnel: self.gro_tunnel,
            gro_udp: self.gro_udp,
            limits: self.limits(),
        }
    }

    /// Changes one setting by its name (`gro`, `gro_tunnel`, `gro_udp`: `on`/`off`;
    /// `vlan_depth`, `envelope`, `gso_max_size`, `gso_max_segs`: a number, or `default` for
    /// the port's own). The error names the setting and what it accepts; nothing changes then.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn flag(key: &str, v: &str) -> Result<bool, String> {
            match v {
                "on" | "true" | "1" => Ok(true),
                "off" | "false" | "0" => Ok(false),
                _ => Err(format!("{key}: {v:?} is not on or off")),
            }
        }
        fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<Option<T>, String> {
            if v == "default" {
                return Ok(None);
            }
            v.parse()
                .map(Some)
                .map_err(|_| format!("{key}: {v:?} is not a number (or default)"))
        }
        let mut next = self.clone();
        match key {
            "gro" => next.gro = flag(key, value)?,
            "gro_tunnel" => next.gro_tunnel = flag(key, value)?,
            "gro_udp" => next.gro_udp = flag(key, value)?,
            "vlan_depth" => next.vlan_depth = number(key, value)?,
            "envelope" => next.envelope = number(key, value)?,
            "gso_max_size" => next.gso_max_size = number(key, value)?,
            "gso_max_segs" => next.gso_max_segs = number(key, value)?,
            _ => {
                return Err(format!(
                    "no port setting {key:?} (settings: {})",
                    PORT_SETTINGS.join(", ")
                ))
            }
        }
        next.limits().validate()?;
        *self = next;
        Ok(())
    }
}

/// The port settings [`PortRequest::set`] (and `sluice port set`) change.
pub const PORT_SETTINGS: [&str; 7] = [
    "gro",
    "gro_tunnel",
    "gro_udp",
    "vlan_depth",
    "envelope",
    "gso_max_size",
    "gso_max_segs",
];

/// A port's settings in effect: the GRO choices and the transmit device's VLAN depth, envelope
/// and GSO limits (the port's own where no override is set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortSettingsInfo {
    /// GRO on.
    pub gro: bool,
    /// Tunnel GRO on.
    pub gro_tunnel: bool,
    /// UDP GRO on.
    pub gro_udp: bool,
    /// VLAN tags the device segments and checksums under.
    pub vlan_depth: u8,
    /// Envelope allowance (bytes).
    pub envelope: u32,
    /// Largest GSO packet the device takes whole (bytes).
    pub gso_max_size: u32,
    /// Most segments of a GSO packet the device takes whole.
    pub gso_max_segs: u32,
}

impl PortSettingsInfo {
    pub(crate) fn new(opts: &PortOptions, device: &Device) -> PortSettingsInfo {
        PortSettingsInfo {
            gro: opts.gro,
            gro_tunnel: opts.gro_tunnel,
            gro_udp: opts.gro_udp,
            vlan_depth: device.vlan_depth,
            envelope: device.envelope,
            gso_max_size: device.gso_max_size,
            gso_max_segs: device.gso_max_segs,
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
    /// The settings in effect.
    pub settings: PortSettingsInfo,
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
    /// UDP-GSO frames of tunnel datagrams split on receive (each datagram then counts as a
    /// received packet: on a port without GRO the fates above, with `rx_uso_drops`, add up to
    /// `rx_packets - rx_uso_frames + rx_uso_datagrams`).
    #[serde(default)]
    pub rx_uso_frames: u64,
    /// The datagrams those frames were split into.
    #[serde(default)]
    pub rx_uso_datagrams: u64,
    /// Received UDP-GSO tunnel frames that would not split (dropped).
    #[serde(default)]
    pub rx_uso_drops: u64,
    /// Packets transmit preparation dropped for this egress.
    pub tx_prepare_drops: u64,
    /// GSO packets handed to the device whole.
    #[serde(default)]
    pub tx_hw_gso: u64,
    /// GSO packets segmented in software because the device could not (fallbacks).
    #[serde(default)]
    pub tx_soft_gso: u64,
    /// GSO packets split by partial segmentation.
    #[serde(default)]
    pub tx_partial_gso: u64,
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
            rx_uso_frames: s.rx_uso_frames,
            rx_uso_datagrams: s.rx_uso_datagrams,
            rx_uso_drops: s.rx_uso_drops,
            tx_prepare_drops: s.tx_prepare_drops,
            tx_hw_gso: s.tx_hw_gso,
            tx_soft_gso: s.tx_soft_gso,
            tx_partial_gso: s.tx_partial_gso,
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
