//! The port interface the datapath drives, and an in-memory port for tests.
//!
//! A [`Port`] is one queue of one device: it receives frames without blocking (with the
//! checksum and GSO state its device reported, as [`OffloadMeta`]), sends frames that
//! [`sluice_offload::tx::tx_prepare`] prepared for its [`Device`] (with the [`DeviceWork`] left to
//! the device), and reports and changes its device features at run time, as `ethtool -k/-K`
//! does. Implementations that make system calls (TAP, `AF_PACKET`) live in `sluice-ports`; this
//! crate has the trait and [`MemPort`].

use crate::buf::{BufPool, PacketBuf};
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::tx::DeviceWork;
use sluice_packet::virtio::{HdrFormat, VirtioError};
use sluice_packet::OffloadMeta;
use sluice_wire::{Layout, LinkType, ParseConfig};
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

/// Where a receive burst ends by size: once the frames (without their `virtio_net_hdr`) one
/// [`Port::recv`] call has read hold at least this many bytes, the TAP port returns them, even
/// with fewer than `max`; it checks after every frame. (The `AF_PACKET` port has a budget of its
/// own, four times this one — `sluice_ports::port_afpacket::AFPACKET_RX_BURST_BYTES` — checked
/// between its system calls, one of which can still read `RECV_BATCH` (32) super-frames.)
///
/// The datapath reads a whole burst before it forwards any of it. With 64 KiB super-frames, a
/// burst of 64 frames is 4 MiB, twice a core's L2 cache here, so the first frames are likely
/// cold by the time they are sent on; with the bound, a VLAN hop and a TAP-to-TAP forward ran
/// 16 % and 13 % faster (medians, daemon pinned; BENCHMARKS.md, "Receive bursts bounded by
/// bytes" — measured when the `AF_PACKET` port had this budget too).
pub const RX_BURST_BYTES: usize = 256 * 1024;

/// Why a port operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum PortError {
    /// A system call failed (with what was being done).
    Io {
        /// What the port was doing.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The port's device cannot have this feature (or cannot change it).
    Feature {
        /// The feature.
        feature: Feature,
        /// Why.
        reason: String,
    },
    /// The frame or its device work cannot be sent on this port.
    Unsendable(String),
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortError::Io { context, source } => write!(f, "{context}: {source}"),
            PortError::Feature { feature, reason } => {
                write!(f, "feature {}: {reason}", feature.name())
            }
            PortError::Unsendable(why) => write!(f, "cannot send: {why}"),
        }
    }
}

impl std::error::Error for PortError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PortError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl PortError {
    /// An I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> PortError {
        PortError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Frames a port refused or lost, by reason (kept by the port).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortDrops {
    /// Received frames dropped: inconsistent `virtio_net_hdr` or unparsable with one.
    pub rx_invalid: u64,
    /// Received frames dropped: larger than the receive buffer.
    pub rx_truncated: u64,
    /// Frames the kernel dropped before the port could read them (its socket receive queue was
    /// full: `AF_PACKET`'s `PACKET_STATISTICS`; a TAP's queue towards the switch was full: the
    /// TAP's `tx_dropped`).
    pub rx_kernel: u64,
    /// Frames the kernel dropped after the port handed them over (the interface's `tx_dropped`,
    /// e.g. a veth whose peer's queue was full).
    pub tx_kernel: u64,
    /// Frames the port failed to send.
    pub tx_errors: u64,
}

/// The three [`Port`] methods every port answers from its own fields: `name` (the expression
/// given, on `self`), `kind` (the literal given) and `device` (the `device` field). For use
/// inside an `impl Port for …` block.
#[macro_export]
macro_rules! port_identity {
    ($kind:literal, |$s:ident| $name:expr) => {
        fn name(&self) -> &str {
            let $s = self;
            $name
        }

        fn kind(&self) -> &'static str {
            $kind
        }

        fn device(&self) -> ::sluice_offload::features::Device {
            self.device
        }
    };
}

/// What [`Port::recv`] returns: how many frames it appended, or the port's error.
pub type RecvResult = Result<usize, PortError>;

/// One device queue the datapath polls and sends to. See the [module documentation](self).
pub trait Port: Send {
    /// The port's name (the interface name for TAP and `AF_PACKET`).
    fn name(&self) -> &str;

    /// The kind: `"tap"`, `"afpacket"`, `"pcap"`, `"memory"`.
    fn kind(&self) -> &'static str;

    /// The transmit device: features, MTU, envelope, GSO limits.
    fn device(&self) -> Device;

    /// What the port's frames start with: an Ethernet header (the default), or, for an L3
    /// port (a TUN device), the IP header. The datapath parses what the port receives with it
    /// and converts what it sends to it (see [`crate::datapath`]).
    fn link(&self) -> LinkType {
        LinkType::Ethernet
    }

    /// Features the port could turn on (what `ethtool -k` shows as not `[fixed]`).
    fn changeable(&self) -> Features;

    /// Turns a feature on or off (as `ethtool -K`); the kernel side (e.g. `TUNSETOFFLOAD`) is
    /// changed too. Fails, leaving everything as it was, if the device cannot do it.
    fn set_feature(&mut self, feature: Feature, on: bool) -> Result<(), PortError>;

    /// Receives up to `max` frames without blocking, each in a buffer from `pool` with its
    /// metadata set, appended to `out`. Returns how many were appended (0: nothing waiting, or
    /// only frames it refused). Frames the port must refuse are dropped and counted in
    /// [`Port::drops`]. A port may return fewer than `max` while more are waiting once the
    /// frames it read hold its byte budget ([`RX_BURST_BYTES`] for a TAP); the next call goes on
    /// from there.
    fn recv(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> RecvResult;

    /// Sends one frame prepared for [`Port::device`], with the work left to the device.
    fn send(&mut self, frame: &[u8], work: &DeviceWork) -> Result<(), PortError>;

    /// Pushes out frames [`Port::send`] queued (ports that batch their sends).
    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    /// A descriptor that becomes readable when frames wait (for `poll`), if any.
    fn fd(&self) -> Option<RawFd> {
        None
    }

    /// Frames the port refused or lost.
    fn drops(&self) -> PortDrops {
        PortDrops::default()
    }

    /// The port's control side, for a port whose device changes are kernel calls that do not
    /// belong on a datapath thread (netlink, `SIOCETHTOOL`: they wait for the kernel's RTNL
    /// lock). Shared by every queue of the device. `None` (the default): [`Port::set_feature`]
    /// is cheap enough to call where the port lives.
    fn control(&self) -> Option<Arc<dyn PortControl>> {
        None
    }

    /// Takes the device state its [`Port::control`] read or made (on the control side): the
    /// port's [`Port::device`] and [`Port::changeable`] follow it from now on. The default
    /// refuses (a port without a control side has no such state).
    fn apply_state(&mut self, state: &PortState) -> Result<(), PortError> {
        let _ = state;
        Err(PortError::Unsendable(format!(
            "port {} takes no device state from a control side",
            self.name()
        )))
    }
}

/// One feature as `ethtool -k` shows it: whether it is on and whether it is `[fixed]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthtoolFeature {
    /// The feature.
    pub feature: Feature,
    /// `on`.
    pub on: bool,
    /// `[fixed]`: cannot be changed.
    pub fixed: bool,
}

/// A device's state as a [`PortControl`] read it from the kernel: the features the kernel
/// reports (those Sluice knows) and the transmit [`Device`] the port makes of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    /// The features, as `ethtool -k` shows them.
    pub features: Vec<EthtoolFeature>,
    /// The transmit device (features the port can use, MTU, GSO limits).
    pub device: Device,
}

/// The control side of a port (see [`Port::control`]): reads and changes the device in the
/// kernel, off the datapath; the result goes to every queue's port with [`Port::apply_state`].
pub trait PortControl: Send + Sync + fmt::Debug {
    /// Reads the device's state from the kernel (after someone changed it behind the switch).
    fn read(&self) -> Result<PortState, PortError>;

    /// Turns a feature on or off in the kernel (as `ethtool -K`) and returns the state after
    /// the change. Fails, with the feature and the reason, when the device cannot do it.
    fn set_feature(&self, feature: Feature, on: bool) -> Result<PortState, PortError>;
}

/// Why [`rx_meta`] refused a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxError {
    /// The `virtio_net_hdr` is inconsistent with the frame.
    Vnet(VirtioError),
    /// A vnet header asks for checksum or GSO work but the frame does not parse.
    Unparsable,
}

/// Metadata for a received `frame`: offsets from parsing it with `cfg`, and the statuses and GSO
/// request from its `virtio_net_hdr` (`vnet`: the raw header and its format) if the port
/// receives one. A frame that does not parse gets offsets as far as parsing went and `Unknown`
/// statuses (the datapath still forwards or drops it by rule); with a vnet header that asks for
/// work, it is refused.
pub fn rx_meta(
    frame: &[u8],
    vnet: Option<(&[u8], HdrFormat)>,
    cfg: &ParseConfig,
) -> Result<OffloadMeta, RxError> {
    let (layout, err) = sluice_wire::parse_partial(frame, cfg);
    meta_of(frame, &layout, err.is_none(), vnet)
}

/// [`rx_meta`] for a received buffer: its metadata set, and the layout the parse found
/// carried with it (so that nothing parses the frame again: see [`PacketBuf::layout_for`]).
/// On error the metadata is unchanged.
pub fn rx_prepare(
    b: &mut PacketBuf,
    vnet: Option<(&[u8], HdrFormat)>,
    cfg: &ParseConfig,
) -> Result<(), RxError> {
    let (frame, layout, whole) = b.parse_layout(cfg);
    b.meta = meta_of(frame, layout, whole, vnet)?;
    Ok(())
}

/// The metadata of `frame` whose parse gave `layout` (`whole`: without an error).
fn meta_of(
    frame: &[u8],
    layout: &Layout,
    whole: bool,
    vnet: Option<(&[u8], HdrFormat)>,
) -> Result<OffloadMeta, RxError> {
    match vnet {
        None => Ok(OffloadMeta::from_layout(layout)),
        Some((raw, fmt)) => match sluice_offload::tx::decode_vnet_hdr(raw, fmt, frame, layout) {
            Ok((h, m)) => {
                if !whole && (h.flags != 0 || h.gso_type != 0) {
                    return Err(RxError::Unparsable);
                }
                Ok(m)
            }
            Err(e) => Err(RxError::Vnet(e)),
        },
    }
}

/// What a [`MemPort`] sent: the frame and the work left to the device.
pub type SentFrame = (Vec<u8>, DeviceWork);

#[derive(Debug, Default)]
struct MemQueues {
    rx: VecDeque<(Vec<u8>, OffloadMeta)>,
    tx: Vec<SentFrame>,
}

/// An in-memory port with settable device features, for tests and benchmarks: frames injected
/// through its [`MemPortHandle`] are received; frames sent are kept for the handle to take.
#[derive(Debug)]
pub struct MemPort {
    name: String,
    link: LinkType,
    device: Device,
    changeable: Features,
    queues: Arc<Mutex<MemQueues>>,
    drops: PortDrops,
}

/// The test side of a [`MemPort`] (cloneable, usable from another thread).
#[derive(Debug, Clone)]
pub struct MemPortHandle {
    queues: Arc<Mutex<MemQueues>>,
}

impl MemPort {
    /// A port named `name` with transmit device `device`; every feature is changeable.
    pub fn new(name: &str, device: Device) -> (MemPort, MemPortHandle) {
        let queues = Arc::new(Mutex::new(MemQueues::default()));
        (
            MemPort {
                name: name.to_string(),
                link: LinkType::Ethernet,
                device,
                changeable: Features::ALL,
                queues: Arc::clone(&queues),
                drops: PortDrops::default(),
            },
            MemPortHandle { queues },
        )
    }
}

impl MemPort {
    /// The same port with frames starting as `link` says ([`Port::link`]): an L3 port with
    /// [`LinkType::Ip`].
    pub fn with_link(mut self, link: LinkType) -> MemPort {
        self.link = link;
        self
    }
}

impl MemPortHandle {
    /// Queues a frame for the port to receive, with its receive metadata.
    pub fn inject(&self, frame: &[u8], meta: OffloadMeta) {
        if let Ok(mut q) = self.queues.lock() {
            q.rx.push_back((frame.to_vec(), meta));
        }
    }

    /// Queues a frame with metadata from parsing it (statuses `Unknown`).
    pub fn inject_frame(&self, frame: &[u8]) {
        let (layout, _) = sluice_wire::parse_partial(frame, &ParseConfig::DEFAULT);
        self.inject(frame, OffloadMeta::from_layout(&layout));
    }

    /// Takes every frame sent so far.
    pub fn take_sent(&self) -> Vec<SentFrame> {
        self.queues
            .lock()
            .map(|mut q| std::mem::take(&mut q.tx))
            .unwrap_or_default()
    }

    /// Frames still waiting to be received.
    pub fn pending(&self) -> usize {
        self.queues.lock().map(|q| q.rx.len()).unwrap_or(0)
    }
}

impl Port for MemPort {
    crate::port_identity!("memory", |s| &s.name);

    fn link(&self) -> LinkType {
        self.link
    }

    fn changeable(&self) -> Features {
        self.changeable
    }

    fn set_feature(&mut self, feature: Feature, on: bool) -> Result<(), PortError> {
        self.device.set_feature(feature, on);
        Ok(())
    }

    fn recv(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> RecvResult {
        let Ok(mut q) = self.queues.lock() else {
            return Ok(0);
        };
        let mut n = 0;
        while n < max {
            let Some((frame, meta)) = q.rx.pop_front() else {
                break;
            };
            if frame.len() > pool.room() {
                self.drops.rx_truncated += 1;
                continue;
            }
            let mut b = pool.get();
            b.set_frame(&frame);
            b.meta = meta;
            out.push(b);
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, frame: &[u8], work: &DeviceWork) -> Result<(), PortError> {
        match self.queues.lock() {
            Ok(mut q) => {
                q.tx.push((frame.to_vec(), *work));
                Ok(())
            }
            Err(_) => {
                self.drops.tx_errors += 1;
                Err(PortError::Unsendable("memory port poisoned".into()))
            }
        }
    }

    fn drops(&self) -> PortDrops {
        self.drops
    }
}
