//! The switch's `AF_PACKET` port: a [`PacketSocket`] bound to one interface (a veth end, a NIC)
//! with `PACKET_VNET_HDR` and `PACKET_AUXDATA`, behind the datapath's [`Port`] interface.
//!
//! **Features.** The transmit [`Device`] mirrors the interface's features as `ethtool -k`
//! reports them (so `tx_prepare` does in software what the interface would not), limited to what
//! a 10-byte `virtio_net_hdr` on a packet socket can ask the kernel for ([`AFPACKET_TX_MASK`]):
//! `NEEDS_CSUM` (a ones'-complement fill from `csum_start`) and TCPv4/TCPv6/UDP-L4 GSO. Never
//! advertised, even when the interface has them: VLAN insertion (no field for it), IPv4 header
//! checksums, SCTP CRC32c, UFO and tunnel GSO. Encapsulated packets get only generic checksum
//! filling and scatter-gather (an IPv4/IPv6-only checksum engine would parse the outer headers).
//! Stacked VLAN tags do not take GSO away (`vlan_depth` [`MAX_VLAN_DEPTH`] by default): the kernel parses any number of tags
//! in the vnet header's GSO request, and whatever the interface cannot segment under several tags
//! it segments itself at `validate_xmit_skb`, later and cheaper than Sluice could (one
//! `sendmsg` of the super-frame instead of one per segment; a veth keeps it whole, so a QinQ
//! super-frame crosses a veth hop as one frame, as a single-tagged one does).
//! The features, MTU and GSO limits come from the kernel through an [`AfPacketControl`]
//! (rtnetlink and the ethtool ioctl, [`crate::netdev`]), made in the interface's namespace when
//! the port opens and shared by every queue. It is the port's [`Port::control`]: the switch
//! changes features through it on its control thread (`ETHTOOL_SFEATURES`, then a re-read: the
//! kernel may change dependent ones, e.g. no TSO without checksum offload) and hands the new
//! state to each queue's port ([`Port::apply_state`]). [`Port::set_feature`] does both at once
//! for a caller that owns the port.
//!
//! **Receive.** Up to [`RECV_BATCH`] frames per `recvmmsg`. Frames this host sends on the interface are not received
//! (`PACKET_IGNORE_OUTGOING`, and `PACKET_OUTGOING` frames are skipped should the kernel lack
//! it). VLAN tags the kernel moved out of the frame are put back. The vnet header reports
//! checksum-partial frames (from a veth peer's stack) and GSO super-frames (from GRO, or a veth
//! peer's TSO) as the kernel holds them.
//!
//! **Queues.** [`AfPacketPort::open_queues`] opens one port per datapath thread on the same
//! interface, their sockets in one `PACKET_FANOUT` hash group: each flow's frames arrive on one
//! of them.

use crate::afpacket::{
    AfPacketConfig, PacketSocket, RecvFrame, SendQueue, PACKET_VNET_HDR_LEN, RECV_BATCH,
};
use crate::ifstats::{if_drops, IfStats};
use crate::netdev::NetDev;
use crate::port_tap::encode_work;
use sluice_datapath::buf::{BufPool, PacketBuf};
pub use sluice_datapath::port::EthtoolFeature;
use sluice_datapath::port::{
    rx_prepare, Port, PortControl, PortDrops, PortError, PortState, RecvResult,
};
use sluice_offload::features::{Device, Feature, Features, MAX_VLAN_DEPTH};
use sluice_offload::tx::DeviceWork;
use sluice_packet::virtio::HdrFormat;
use sluice_wire::ParseConfig;
use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20+).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Frames at least this long are sent at once with `sendmsg` (after the queued ones) instead of
/// being copied into the send queue.
const DIRECT_SEND: usize = 16 * 1024;

/// The vnet header format of an `AF_PACKET` port (`virtio_net_hdr`, 10 bytes).
pub const AFPACKET_HDR_FORMAT: HdrFormat = HdrFormat::V0;

/// Transmit features a packet socket with `PACKET_VNET_HDR` can use.
pub const AFPACKET_TX_MASK: Features = Features::TX_SG
    .union(Features::TX_FRAGLIST)
    .union(Features::TX_CSUM_IPV4)
    .union(Features::TX_CSUM_IPV6)
    .union(Features::TX_CSUM_GENERIC)
    .union(Features::TSO)
    .union(Features::TSO6)
    .union(Features::TSO_ECN)
    .union(Features::TSO_MANGLEID)
    .union(Features::USO);

/// Transmit features that matter for [`Port::set_feature`]'s "cannot use it" check.
const TX_FEATURES: Features = Features::CSUM_MASK
    .union(Features::GSO_MASK)
    .union(Features::VLAN_INSERT)
    .union(Features::TX_SG)
    .union(Features::TX_FRAGLIST);

/// How to open an [`AfPacketPort`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfPacketPortConfig {
    /// Put the interface in promiscuous mode while the port is open (a switch port wants every
    /// frame; default on).
    pub promisc: bool,
    /// How received frames are parsed (tunnel ports).
    pub parse: ParseConfig,
    /// Receive buffer of the socket in bytes (default [`DEFAULT_RCVBUF`]): room for a burst of
    /// 64 KiB super-frames, which a default-sized buffer (about 200 KiB) drops after three.
    pub rcvbuf: usize,
}

/// Default receive buffer of an [`AfPacketPort`]: 32 MiB, about 500 super-frames of 64 KiB.
pub const DEFAULT_RCVBUF: usize = 32 << 20;

/// Where an [`AfPacketPort`]'s receive burst ends by size (checked between its `recvmmsg`
/// calls, each of which reads as many frames as the pool has idle buffers, up to `RECV_BATCH`):
/// 1 MiB, four times the TAP's [`RX_BURST_BYTES`](sluice_datapath::port::RX_BURST_BYTES). A
/// VXLAN / Geneve hop's 64 KiB super-frame crosses the veth as two packed UDP-GSO frames that
/// GRO merges again, and GRO was flushed at the end of each burst, so a burst that ended
/// between the two split the merge (since 2026-11-29 the datapath keeps what a burst of packed
/// frames merged for one more pass instead; this budget was not measured again). With 256
/// KiB the receiving side wrote 1.24–1.33 frames into the TAP per super-frame, with 1 MiB
/// 1.13–1.22 (ranges apart); the VXLAN hop's medians went 4.83 → 5.72 Gbit/s (eight rounds a
/// side, ranges overlapping; 5.00 → 5.51 in a second set), the single-tag hop's 9.61 → 9.94
/// (BENCHMARKS.md, "A relay as a reference …").
pub const AFPACKET_RX_BURST_BYTES: usize = 1 << 20;

// The docs above and of `RX_BURST_BYTES` give the ratio of the two budgets.
const _: () = assert!(AFPACKET_RX_BURST_BYTES == 4 * sluice_datapath::port::RX_BURST_BYTES);

impl Default for AfPacketPortConfig {
    fn default() -> Self {
        AfPacketPortConfig {
            promisc: true,
            parse: ParseConfig::DEFAULT,
            rcvbuf: DEFAULT_RCVBUF,
        }
    }
}

/// Whether a port's socket makes, joins or stays out of a `PACKET_FANOUT` group.
#[derive(Debug, Clone, Copy)]
enum Fanout {
    None,
    Create,
    Join(u16),
}

/// `ethtool -k` shows these features under their legacy long names only.
const ETHTOOL_ALIASES: [(&str, Feature); 5] = [
    ("rx-checksumming", Feature::RxCsum),
    ("generic-receive-offload", Feature::RxGro),
    ("large-receive-offload", Feature::RxLro),
    ("rx-vlan-offload", Feature::RxVlanCtagParse),
    ("tx-vlan-offload", Feature::VlanCtagInsert),
];

/// Parses `ethtool -k` output (`name: on|off [fixed]` lines), for comparing with what the
/// kernel reports through [`AfPacketControl`] (the port itself never runs `ethtool`); names
/// Sluice does not know are skipped, the legacy long names of `rx-checksum`, `rx-gro`, `rx-lro`, `rx-vlan-hw-parse` and
/// `tx-vlan-hw-insert` are understood.
pub fn parse_ethtool_features(text: &str) -> Vec<EthtoolFeature> {
    text.lines()
        .filter_map(|line| {
            let (name, state) = line.trim().split_once(':')?;
            let name = name.trim();
            let feature = match ETHTOOL_ALIASES.iter().find(|(alias, _)| *alias == name) {
                Some(&(_, f)) => f,
                None => name.parse::<Feature>().ok()?,
            };
            let mut words = state.split_whitespace();
            let on = match words.next()? {
                "on" => true,
                "off" => false,
                _ => return None,
            };
            Some(EthtoolFeature {
                feature,
                on,
                fixed: state.contains("[fixed]"),
            })
        })
        .collect()
}

/// The transmit device of an `AF_PACKET` port on an interface with `ethtool -k` state
/// `features`, MTU `mtu` and GSO limits: see the [module documentation](self). Enforces Linux's
/// `netdev_fix_features` rules (segmentation needs scatter-gather, which needs checksum offload).
pub fn afpacket_device(
    features: &[EthtoolFeature],
    mtu: u32,
    gso_max_size: u32,
    gso_max_segs: u32,
) -> Device {
    let mut f = features
        .iter()
        .filter(|e| e.on)
        .fold(Features::NONE, |acc, e| acc | Features::of(e.feature))
        & AFPACKET_TX_MASK;
    let csum = Features::TX_CSUM_IPV4 | Features::TX_CSUM_IPV6 | Features::TX_CSUM_GENERIC;
    if !f.intersects(csum) {
        f = f.without(Features::TX_SG | Features::TX_FRAGLIST);
    }
    if !f.has(Feature::TxSg) {
        f = f.without(Features::GSO_MASK);
    }
    let enc = f & (Features::TX_CSUM_GENERIC | Features::TX_SG | Features::TX_FRAGLIST);
    Device {
        features: f,
        vlan_features: f,
        hw_enc_features: enc,
        vlan_depth: MAX_VLAN_DEPTH,
        gso_max_size,
        gso_max_segs,
        mtu,
        envelope: 4,
    }
}

/// An `AF_PACKET` socket on one interface as a datapath [`Port`]. See the
/// [module documentation](self).
///
/// Needs root, so not run here:
///
/// ```no_run
/// use sluice_datapath::Port;
/// use sluice_offload::tx::DeviceWork;
/// use sluice_ports::{AfPacketPort, AfPacketPortConfig, Netns, VethPair};
///
/// let (host, peer) = (Netns::create("doc-h")?, Netns::create("doc-p")?);
/// let veth = VethPair::create(&host, "up0", &peer, "up1", 1500)?;
/// // Open the socket inside the namespace; it keeps working from any thread.
/// let mut port = host.enter(|| AfPacketPort::open(veth.a(), &AfPacketPortConfig::default()))??;
/// println!("{} offers {}", port.name(), port.device().features); // the interface's ethtool -k
///
/// // A broadcast frame out of up0 (a Datapath drives ports the same way, see sluice-datapath).
/// let mut frame = vec![0xff; 6];
/// frame.extend([0x02, 0, 0, 0, 0, 0x01, 0x88, 0xb5]);
/// frame.resize(60, 0);
/// port.send(&frame, &DeviceWork::default())?;
/// port.flush()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AfPacketPort {
    sock: PacketSocket,
    /// The `PACKET_FANOUT` group the socket is in (several queues).
    fanout: Option<u16>,
    ifname: String,
    /// The interface's kernel side, shared by every queue.
    control: Arc<AfPacketControl>,
    ethtool: Vec<EthtoolFeature>,
    device: Device,
    parse: ParseConfig,
    drops: PortDrops,
    /// Kernel-side receive drops read so far (`PACKET_STATISTICS` resets on every read).
    kernel_drops: Cell<u64>,
    /// The interface's own drop counters (transmit drops after the socket took a frame).
    ifstats: Option<RefCell<IfStats>>,
    /// Reused receive batch: buffers and their descriptions.
    batch: Vec<PacketBuf>,
    frames: Vec<RecvFrame>,
    /// Frames [`Port::send`] queued for the next `sendmmsg` ([`Port::flush`]).
    txq: SendQueue,
}

impl AfPacketPort {
    /// Binds to `ifname` in the calling thread's network namespace (see
    /// [`crate::Netns::enter`]) with `PACKET_VNET_HDR`, `PACKET_AUXDATA`, optionally promiscuous,
    /// non-blocking, and reads its features, MTU and GSO limits from the kernel
    /// ([`AfPacketControl`], whose sockets stay in this namespace: later calls work from any
    /// thread).
    pub fn open(ifname: &str, cfg: &AfPacketPortConfig) -> Result<AfPacketPort, PortError> {
        let (control, state) = AfPacketControl::open_and_read(ifname)?;
        Self::open_in_group(ifname, cfg, Fanout::None, control, &state)
    }

    /// Opens `queues` ports on `ifname` (0 is taken as 1), one socket each, for one datapath
    /// thread each. With one queue this is [`AfPacketPort::open`]. With more, the sockets form
    /// one `PACKET_FANOUT` hash group ([`PacketSocket::create_fanout`]): the kernel hands each
    /// received frame to one of them by its flow hash, so the frames of a flow all arrive on one
    /// port, in order. Sending works on every port.
    ///
    /// The ports share one [`AfPacketControl`] and start from one read of the interface;
    /// [`Port::set_feature`] changes the interface (shared by all) and the calling port's view:
    /// hand the others the new state ([`Port::apply_state`]) or call [`AfPacketPort::reread`].
    pub fn open_queues(
        ifname: &str,
        cfg: &AfPacketPortConfig,
        queues: usize,
    ) -> Result<Vec<AfPacketPort>, PortError> {
        if queues <= 1 {
            return Ok(vec![Self::open(ifname, cfg)?]);
        }
        let (control, state) = AfPacketControl::open_and_read(ifname)?;
        let first = Self::open_in_group(ifname, cfg, Fanout::Create, control.clone(), &state)?;
        let id = first.fanout.unwrap_or_default();
        let mut ports = Vec::with_capacity(queues);
        ports.push(first);
        for _ in 1..queues {
            // The interface's drop counters are read by the first queue's port only: the
            // datapath sums the ports of every thread.
            let mut q =
                Self::open_in_group(ifname, cfg, Fanout::Join(id), control.clone(), &state)?;
            q.ifstats = None;
            ports.push(q);
        }
        Ok(ports)
    }

    /// The `PACKET_FANOUT` group id of the port's socket, when it was opened as one of several
    /// queues.
    pub fn fanout_group(&self) -> Option<u16> {
        self.fanout
    }

    fn open_in_group(
        ifname: &str,
        cfg: &AfPacketPortConfig,
        fanout: Fanout,
        control: Arc<AfPacketControl>,
        state: &PortState,
    ) -> Result<AfPacketPort, PortError> {
        let scfg = AfPacketConfig {
            vnet_hdr: true,
            auxdata: true,
            promisc: cfg.promisc,
        };
        let sock = PacketSocket::bind(ifname, &scfg)
            .map_err(|e| PortError::io(format!("AF_PACKET socket on {ifname:?}"), e))?;
        crate::tap::set_nonblocking(sock.as_raw_fd(), true)
            .map_err(|e| PortError::io(format!("O_NONBLOCK on AF_PACKET {ifname}"), e))?;
        let one: libc::c_int = 1;
        // SAFETY: `one` is a live c_int and the length passed is its size. Failure (kernels
        // before 4.20) is fine: outgoing frames are also skipped in `recv`.
        let _ = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        sock.set_rcvbuf(cfg.rcvbuf)
            .map_err(|e| PortError::io(format!("receive buffer of AF_PACKET {ifname}"), e))?;
        let fanout = match fanout {
            Fanout::None => None,
            Fanout::Create => Some(sock.create_fanout()),
            Fanout::Join(id) => Some(sock.join_fanout(id).map(|()| id)),
        }
        .transpose()
        .map_err(|e| PortError::io(format!("PACKET_FANOUT on {ifname}"), e))?;
        Ok(AfPacketPort {
            sock,
            fanout,
            ifname: ifname.to_string(),
            control,
            ethtool: state.features.clone(),
            device: state.device,
            parse: cfg.parse,
            drops: PortDrops::default(),
            kernel_drops: Cell::new(0),
            ifstats: IfStats::open(ifname).ok().map(RefCell::new),
            batch: Vec::with_capacity(RECV_BATCH),
            frames: Vec::with_capacity(RECV_BATCH),
            txq: SendQueue::new(),
        })
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface's features as the kernel reported them last (those Sluice knows, as
    /// `ethtool -k` shows them).
    pub fn ethtool_features(&self) -> &[EthtoolFeature] {
        &self.ethtool
    }

    /// The underlying [`PacketSocket`].
    pub fn socket(&self) -> &PacketSocket {
        &self.sock
    }

    /// Re-reads the interface's features, MTU and GSO limits (after someone changed them with
    /// `ethtool -K` or `ip link set`). A kernel call: not for a datapath thread (the switch
    /// reads through [`Port::control`] and hands the result over).
    pub fn reread(&mut self) -> Result<(), PortError> {
        let state = self.control.read()?;
        self.take(&state);
        Ok(())
    }

    fn take(&mut self, state: &PortState) {
        self.ethtool.clone_from(&state.features);
        self.device = state.device;
    }
}

/// The kernel side of an `AF_PACKET` port's interface: reads and changes its features, MTU
/// and GSO limits with rtnetlink and the ethtool ioctl ([`NetDev`], sockets opened in the
/// interface's namespace). Shared by every queue of the port; the switch calls it on its
/// control thread ([`Port::control`]).
#[derive(Debug)]
pub struct AfPacketControl {
    dev: Mutex<NetDev>,
}

impl AfPacketControl {
    /// Opens the control side of `ifname` in the calling thread's network namespace.
    pub fn open(ifname: &str) -> Result<AfPacketControl, PortError> {
        let dev = NetDev::open(ifname)
            .map_err(|e| PortError::io(format!("kernel state of {ifname}"), e))?;
        Ok(AfPacketControl {
            dev: Mutex::new(dev),
        })
    }

    fn open_and_read(ifname: &str) -> Result<(Arc<AfPacketControl>, PortState), PortError> {
        let control = Arc::new(Self::open(ifname)?);
        let state = control.read()?;
        Ok((control, state))
    }

    fn dev(&self) -> std::sync::MutexGuard<'_, NetDev> {
        // Every call leaves the sockets usable: a panic elsewhere does not matter.
        self.dev.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PortControl for AfPacketControl {
    fn read(&self) -> Result<PortState, PortError> {
        let mut dev = self.dev();
        let name = dev.ifname().to_string();
        let link = dev
            .link()
            .map_err(|e| PortError::io(format!("link state of {name}"), e))?;
        let features = dev
            .features()
            .map_err(|e| PortError::io(format!("features of {name}"), e))?;
        let device = afpacket_device(&features, link.mtu, link.gso_max_size, link.gso_max_segs);
        Ok(PortState { features, device })
    }

    fn set_feature(&self, feature: Feature, on: bool) -> Result<PortState, PortError> {
        let err = |reason: String| PortError::Feature { feature, reason };
        let before = self.read()?;
        let name = self.dev().ifname().to_string();
        let Some(cur) = before.features.iter().find(|e| e.feature == feature) else {
            return Err(err(format!("{name} does not report it")));
        };
        if cur.on == on {
            return Ok(before);
        }
        if cur.fixed {
            return Err(err(format!(
                "fixed {} on {name} (the kernel does not let it change)",
                if cur.on { "on" } else { "off" }
            )));
        }
        if on && TX_FEATURES.has(feature) && !AFPACKET_TX_MASK.has(feature) {
            return Err(err(
                "an AF_PACKET socket cannot ask the kernel for it (virtio_net_hdr)".into(),
            ));
        }
        self.dev()
            .set_feature(feature, on)
            .map_err(|e| err(e.to_string()))?;
        let after = self.read()?;
        match after.features.iter().find(|e| e.feature == feature) {
            Some(now) if now.on == on => Ok(after),
            _ => Err(err(format!(
                "the kernel kept it {} on {name} (a feature it depends on is off?)",
                if on { "off" } else { "on" }
            ))),
        }
    }
}

impl Port for AfPacketPort {
    sluice_datapath::port_identity!("afpacket", |s| &s.ifname);

    fn changeable(&self) -> Features {
        self.ethtool
            .iter()
            .filter(|e| !e.fixed)
            .fold(Features::NONE, |acc, e| acc | Features::of(e.feature))
    }

    fn set_feature(&mut self, feature: Feature, on: bool) -> Result<(), PortError> {
        let state = self.control.set_feature(feature, on)?;
        self.take(&state);
        Ok(())
    }

    fn control(&self) -> Option<Arc<dyn PortControl>> {
        Some(self.control.clone())
    }

    fn apply_state(&mut self, state: &PortState) -> Result<(), PortError> {
        self.take(state);
        Ok(())
    }

    fn recv(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> RecvResult {
        let mut n = 0;
        // Bytes read by this call: the burst ends at AFPACKET_RX_BURST_BYTES, checked between
        // system calls (one reads up to RECV_BATCH frames).
        let mut bytes = 0;
        while n < max && bytes < AFPACKET_RX_BURST_BYTES {
            // Only as many buffers as the pool has idle (at least one): an empty poll must not
            // allocate a batch of buffers the pool cannot keep.
            let want = (max - n).min(RECV_BATCH).min(pool.idle().max(1));
            self.batch.clear();
            self.batch.extend((0..want).map(|_| pool.get()));
            let got = match self.sock.try_recv_batch(
                &mut self.batch,
                PacketBuf::room_mut,
                &mut self.frames,
            ) {
                Ok(got) => got,
                Err(e) => {
                    for b in self.batch.drain(..) {
                        pool.put(b);
                    }
                    if n > 0 {
                        break;
                    }
                    return Err(PortError::io(
                        format!("recv on AF_PACKET {}", self.ifname),
                        e,
                    ));
                }
            };
            for (i, mut b) in self.batch.drain(..).enumerate() {
                let Some(rf) = self.frames.get(i) else {
                    pool.put(b);
                    continue;
                };
                bytes += rf.len;
                if rf.outgoing() {
                    pool.put(b);
                    continue;
                }
                if rf.truncated() {
                    self.drops.rx_truncated += 1;
                    pool.put(b);
                    continue;
                }
                b.set_len(rf.offset + rf.len);
                b.pull(rf.offset);
                let vnet = rf.vnet_hdr.as_ref().map(|h| (&h[..], AFPACKET_HDR_FORMAT));
                match rx_prepare(&mut b, vnet, &self.parse) {
                    Ok(()) => {
                        out.push(b);
                        n += 1;
                    }
                    Err(_) => {
                        self.drops.rx_invalid += 1;
                        pool.put(b);
                    }
                }
            }
            if got < want {
                break;
            }
        }
        Ok(n)
    }

    fn send(&mut self, frame: &[u8], work: &DeviceWork) -> Result<(), PortError> {
        let mut raw = [0u8; PACKET_VNET_HDR_LEN];
        encode_work(frame, work, AFPACKET_HDR_FORMAT, &mut raw, &mut self.drops)?;
        if frame.len() >= DIRECT_SEND {
            // Copying a large (GSO) frame to save one system call is not worth it: send the
            // queue, then the frame itself, in order.
            let flushed = self.flush();
            let sent = self.sock.send(Some(&raw), frame).map(drop).map_err(|e| {
                self.drops.tx_errors += 1;
                PortError::io(
                    format!("send {} bytes on AF_PACKET {}", frame.len(), self.ifname),
                    e,
                )
            });
            return flushed.and(sent);
        }
        let mut flushed = Ok(());
        if !self.txq.has_room(frame.len()) {
            flushed = self.flush();
        }
        self.txq.push(raw, frame);
        flushed
    }

    /// Sends the queued frames, [`SEND_BATCH`](crate::afpacket::SEND_BATCH) per `sendmmsg`.
    /// Frames the kernel refuses are counted in `tx_errors`; the error names how many.
    fn flush(&mut self) -> Result<(), PortError> {
        if self.txq.is_empty() {
            return Ok(());
        }
        let queued = self.txq.len();
        match self.sock.send_queued(&mut self.txq) {
            (_, None) => Ok(()),
            (_, Some((failed, e))) => {
                self.drops.tx_errors += failed as u64;
                Err(PortError::io(
                    format!(
                        "send on AF_PACKET {}: {failed} of {queued} frames refused",
                        self.ifname
                    ),
                    e,
                ))
            }
        }
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.sock.as_raw_fd())
    }

    fn drops(&self) -> PortDrops {
        // A failed read leaves the count where it was: the kernel keeps counting until the
        // next read that works.
        if let Ok(st) = self.sock.statistics() {
            self.kernel_drops.set(self.kernel_drops.get() + st.drops);
        }
        PortDrops {
            rx_kernel: self.kernel_drops.get(),
            // The interface counts the drops the socket was told about (ENOBUFS, in tx_errors
            // once the retries give up) as well: only the others are the kernel's silent ones.
            tx_kernel: if_drops(self.ifstats.as_ref())
                .tx_dropped
                .saturating_sub(self.sock.enobufs()),
            ..self.drops
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VETH_K: &str = "Features for veth0:
rx-checksumming: on
tx-checksumming: on
\ttx-checksum-ipv4: off [fixed]
\ttx-checksum-ip-generic: on
\ttx-checksum-ipv6: off [fixed]
\ttx-checksum-sctp: on
scatter-gather: on
\ttx-scatter-gather: on
\ttx-scatter-gather-fraglist: on
tcp-segmentation-offload: on
\ttx-tcp-segmentation: on
\ttx-tcp-ecn-segmentation: on
\ttx-tcp-mangleid-segmentation: on
\ttx-tcp6-segmentation: on
generic-receive-offload: off
tx-vlan-offload: on
tx-vlan-stag-hw-insert: on
rx-gro-hw: off [fixed]
tx-udp_tnl-segmentation: on
tx-udp-segmentation: on
rx-gro-list: off
rx-udp-gro-forwarding: off
";

    #[test]
    fn ethtool_output_parses_and_masks() {
        let f = parse_ethtool_features(VETH_K);
        let get = |feat: Feature| f.iter().find(|e| e.feature == feat).copied();
        assert_eq!(
            get(Feature::TxCsumIpv4),
            Some(EthtoolFeature {
                feature: Feature::TxCsumIpv4,
                on: false,
                fixed: true
            })
        );
        assert!(get(Feature::TxCsumGeneric).is_some_and(|e| e.on && !e.fixed));
        assert!(get(Feature::RxUdpGroForwarding).is_some_and(|e| !e.on));
        // Legacy long names.
        assert!(get(Feature::RxGro).is_some_and(|e| !e.on && !e.fixed));
        assert!(get(Feature::RxCsum).is_some_and(|e| e.on));
        assert!(get(Feature::VlanCtagInsert).is_some_and(|e| e.on));
        let d = afpacket_device(&f, 1500, 65536, 65535);
        for on in [
            Feature::TxCsumGeneric,
            Feature::TxSg,
            Feature::Tso,
            Feature::Tso6,
            Feature::TsoEcn,
            Feature::Uso,
        ] {
            assert!(d.features.has(on), "{on}");
        }
        for off in [
            Feature::TxCsumSctp,
            Feature::VlanCtagInsert,
            Feature::VlanStagInsert,
            Feature::UdpTnl,
            Feature::TxCsumIpv4,
        ] {
            assert!(!d.features.has(off), "{off}");
        }
        assert!(!d.hw_enc_features.intersects(Features::GSO_MASK));
        assert_eq!((d.mtu, d.gso_max_size, d.envelope), (1500, 65536, 4));
        // TSO stays on under two tags: the kernel segments what the interface cannot.
        assert_eq!(d.vlan_depth, MAX_VLAN_DEPTH);
        let mut qinq = Features::NONE;
        for f in [Feature::Tso, Feature::TxSg, Feature::TxCsumGeneric] {
            qinq = qinq | Features::of(f);
        }
        assert!(d.vlan_features.contains(qinq));
    }

    #[test]
    fn no_checksum_offload_means_no_sg_and_no_gso() {
        let f = parse_ethtool_features(VETH_K)
            .into_iter()
            .map(|mut e| {
                if e.feature == Feature::TxCsumGeneric {
                    e.on = false;
                }
                e
            })
            .collect::<Vec<_>>();
        let d = afpacket_device(&f, 9000, 65536, 65535);
        assert_eq!(d.features, Features::NONE);
        assert_eq!(d.mtu, 9000);
    }
}
