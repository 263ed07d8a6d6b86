//! The switch's TAP port: a [`Tap`] with a 12-byte `virtio_net_hdr` behind the datapath's
//! [`Port`] interface; with [`TapPortConfig::tun`], a TUN port (kind `"tun"`).
//!
//! **TUN ports** carry L3 packets: IP packets with no Ethernet header (`IFF_TUN | IFF_NO_PI |
//! IFF_VNET_HDR`). Received packets are parsed from the IP header ([`LinkType::Ip`], whatever
//! [`TapPortConfig::parse`] says otherwise), so their metadata has no L2 offsets and
//! `csum_start` / `hdr_len` count from the IP header, in both directions; packets sent must be IP
//! packets: the port adds and strips no Ethernet header (forwarding between L2 and L3 ports is
//! the caller's business), and anything whose first nibble is not 4 or 6 is refused
//! ([`PortError::Unsendable`], counted in `tx_errors`). Offload negotiation and features are the
//! TAP's.
//!
//! **Features.** `TUNSETOFFLOAD` says what the *kernel may hand us* (checksum-partial frames,
//! TCP/UDP super-frames); the kernel accepts partial-checksum and GSO frames we write whatever it
//! says. [`TapPort`] keeps the two directions consistent: its transmit [`Device`] advertises
//! exactly what the accepted `TUN_F_*` bits give the kernel side ([`tap_device`]), and
//! [`Port::set_feature`] changes both (so that `tx_prepare` does in software what is turned
//! off). Mapping:
//!
//! | `TUN_F_*`            | features                                                     |
//! |----------------------|--------------------------------------------------------------|
//! | `CSUM`               | `tx-checksum-ip-generic`, `tx-scatter-gather`(`-fraglist`)    |
//! | `TSO4`               | `tx-tcp-segmentation`                                        |
//! | `TSO6`               | `tx-tcp6-segmentation`                                       |
//! | `TSO_ECN`            | `tx-tcp-ecn-segmentation`                                    |
//! | `USO4` + `USO6`      | `tx-udp-segmentation`                                        |
//! | `UDP_TUNNEL_GSO`     | `tx-udp_tnl-segmentation` (with [`TapPortConfig::udp_tunnel_gso`]) |
//! | `UDP_TUNNEL_GSO_CSUM` | `tx-udp_tnl-csum-segmentation` (with `UDP_TUNNEL_GSO`)      |
//!
//! **UDP-tunnel GSO.** With [`TapPortConfig::udp_tunnel_gso`] the port uses the 24-byte
//! `virtio_net_hdr_v1_hash_tunnel` ([`TAP_TUNNEL_HDR_FORMAT`]) and asks for
//! `TUN_F_UDP_TUNNEL_GSO` (Linux 6.17+): the kernel hands over VXLAN / Geneve super-frames whole
//! (tunnel bits, outer UDP and inner IP offsets, decoded into the metadata), and a tunnelled
//! GSO packet Sluice writes keeps its tunnel bits and offsets ([`tunnel_gso_hdr`]), so the
//! kernel segments it. With `TUN_F_UDP_TUNNEL_GSO_CSUM` too (Linux 6.17+), a super-frame with an
//! outer UDP checksum crosses whole as well: its outer checksum field holds the pseudo-header
//! sum over the super-frame's UDP length (what Sluice's encapsulation leaves in a GSO frame),
//! the header says `UDP_TUNNEL_CSUM`, and the kernel gives each segment its outer checksum
//! (by cancellation) as it segments. A kernel without it: such a frame is segmented in
//! software.
//!
//! Never advertised: VLAN insertion and IPv4 header checksums (`virtio_net_hdr` has neither),
//! SCTP CRC32c (a `NEEDS_CSUM` request is a ones'-complement fill), GRE GSO, UFO. The kernel refuses TSO/USO bits without `CSUM` and ECN without TSO, so
//! turning checksum offload off turns every segmentation feature off too.
//!
//! `TUNSETOFFLOAD` takes the kernel's RTNL lock, so it is made by the port's [`TapControl`]
//! (a duplicate of the first queue's descriptor, shared by every queue): the switch calls it on
//! its control thread ([`Port::control`]) and hands the new [`PortState`] to each queue
//! ([`Port::apply_state`]).

use crate::ifstats::{if_drops, IfStats};
use crate::tap::{
    tun_f_names, Tap, TapConfig, TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_TSO_ECN,
    TUN_F_UDP_TUNNEL_GSO, TUN_F_UDP_TUNNEL_GSO_CSUM, TUN_F_USO4, TUN_F_USO6,
};
use sluice_datapath::buf::{BufPool, PacketBuf};
use sluice_datapath::port::{
    rx_prepare, EthtoolFeature, Port, PortControl, PortDrops, PortError, PortState, RecvResult,
    RX_BURST_BYTES,
};
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::tx::{DeviceWork, TunnelHint};
use sluice_packet::virtio::{self, HdrFormat, VirtioNetHdr};
use sluice_packet::GsoType;
use sluice_wire::{LinkType, ParseConfig};
use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};

/// The `TUN_F_*` offloads a [`TapPort`] negotiates.
pub const TAP_OFFLOADS: u32 =
    TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN | TUN_F_USO4 | TUN_F_USO6;

/// The vnet header format of a [`TapPort`] (`virtio_net_hdr_v1`, 12 bytes).
pub const TAP_HDR_FORMAT: HdrFormat = HdrFormat::V1;

/// The vnet header format of a [`TapPort`] opened with [`TapPortConfig::udp_tunnel_gso`]
/// (`virtio_net_hdr_v1_hash_tunnel`, 24 bytes).
pub const TAP_TUNNEL_HDR_FORMAT: HdrFormat = HdrFormat::V1HashTunnel;

/// The largest vnet header a TAP port reads or writes.
const MAX_HDR_LEN: usize = 24;

/// Largest frame (whole, L2 header included) a TAP port's device segments: Linux's default
/// `gso_max_size`, which the kernel applies to `skb->len` with the Ethernet header; so the
/// super-frames the kernel hands us fit it and can be forwarded to another TAP as they are.
pub const TAP_GSO_MAX_SIZE: u32 = 65536;

/// How to open a [`TapPort`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapPortConfig {
    /// Negotiate every offload of [`TAP_OFFLOADS`] the kernel accepts (else none, which can be
    /// turned on later with [`Port::set_feature`]).
    pub offloads: bool,
    /// `IFF_MULTI_QUEUE`: each [`TapPort::open`] of the same name (every one with this flag)
    /// attaches one more queue; the kernel spreads the frames it sends over them.
    pub multi_queue: bool,
    /// How received frames are parsed (tunnel ports).
    pub parse: ParseConfig,
    /// Make the interface persistent (`TUNSETPERSIST`, see [`Tap::set_persist`]): it and its
    /// addresses outlive the port, for a switch that restarts ([`Tap::delete_persistent`]
    /// removes it).
    pub persist: bool,
    /// Open a TUN (`IFF_TUN`) instead of a TAP: L3 packets, no Ethernet header (see the
    /// [module documentation](self)).
    pub tun: bool,
    /// Negotiate UDP-tunnel GSO (`TUN_F_UDP_TUNNEL_GSO`, Linux 6.17+) with the 24-byte
    /// `virtio_net_hdr_v1_hash_tunnel`: VXLAN / Geneve super-frames cross the TAP whole in both
    /// directions (outer UDP checksum zero; one with an outer checksum is segmented in
    /// software). Falls back to the 12-byte header when the kernel refuses it.
    pub udp_tunnel_gso: bool,
}

impl Default for TapPortConfig {
    fn default() -> Self {
        TapPortConfig {
            offloads: true,
            multi_queue: false,
            parse: ParseConfig::DEFAULT,
            persist: false,
            tun: false,
            udp_tunnel_gso: false,
        }
    }
}

/// A TAP interface (one queue) as a datapath [`Port`]. See the [module documentation](self).
///
/// Needs root, so not run here:
///
/// ```no_run
/// use sluice_datapath::Port;
/// use sluice_offload::features::Feature;
/// use sluice_ports::{Netns, TapPort, TapPortConfig};
///
/// let ns = Netns::create("doc")?;
/// let port = ns.enter(|| TapPort::open("sltap%d", &TapPortConfig::default()))??;
/// ns.link_up(port.name())?;
/// // The device features follow the offloads the kernel accepted (TUN_F_CSUM -> checksum fill).
/// assert!(port.device().features.has(Feature::TxCsumGeneric));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TapPort {
    tap: Tap,
    /// The interface's offloads, changed off the datapath; shared by every queue.
    control: Arc<TapControl>,
    /// `TUN_F_*` bits the kernel accepted when probed at open.
    supported: u32,
    device: Device,
    parse: ParseConfig,
    /// The vnet header format in use (12 bytes, or 24 with UDP-tunnel GSO).
    fmt: HdrFormat,
    drops: PortDrops,
    /// The TAP's drop counters in the namespace it was opened in (its `tx_dropped` counts
    /// frames the kernel could not queue towards the switch).
    ifstats: Option<RefCell<IfStats>>,
}

impl TapPort {
    /// Opens (creating if needed) the TAP interface `name` in the calling thread's network
    /// namespace (see [`crate::Netns::enter`]), with a 12-byte vnet header, non-blocking. The
    /// offloads are probed bit by bit; with `cfg.offloads` every accepted one stays on. The MTU
    /// is read from the interface (1500 if that fails). The interface is left down.
    ///
    /// The interface can be moved to another namespace afterwards (`ip link set NAME netns NS`,
    /// then brought up there): the port keeps working.
    pub fn open(name: &str, cfg: &TapPortConfig) -> Result<TapPort, PortError> {
        if cfg.udp_tunnel_gso {
            match TapPort::open_with(name, cfg, TAP_TUNNEL_HDR_FORMAT) {
                Ok(p) if p.supported & TUN_F_UDP_TUNNEL_GSO != 0 => return Ok(p),
                Ok(p) => drop(p),
                Err(_) => {}
            }
        }
        TapPort::open_with(name, cfg, TAP_HDR_FORMAT)
    }

    fn open_with(name: &str, cfg: &TapPortConfig, fmt: HdrFormat) -> Result<TapPort, PortError> {
        let wanted = if fmt == TAP_TUNNEL_HDR_FORMAT {
            TAP_OFFLOADS | TUN_F_UDP_TUNNEL_GSO | TUN_F_UDP_TUNNEL_GSO_CSUM
        } else {
            TAP_OFFLOADS
        };
        let tcfg = TapConfig {
            vnet_hdr_len: fmt.size(),
            offloads: 0,
            napi: false,
            napi_frags: false,
            multi_queue: cfg.multi_queue,
            tun: cfg.tun,
        };
        let mut tap =
            Tap::open(name, &tcfg).map_err(|e| PortError::io(format!("open TAP {name:?}"), e))?;
        let tname = tap.name().to_string();
        let ctx = |what: &str| format!("{what} on TAP {tname}");
        let supported = tap
            .set_offloads(wanted)
            .map_err(|e| PortError::io(ctx("TUNSETOFFLOAD"), e))?;
        if !cfg.offloads {
            tap.set_offloads(0)
                .map_err(|e| PortError::io(ctx("TUNSETOFFLOAD 0"), e))?;
        }
        tap.set_nonblocking(true)
            .map_err(|e| PortError::io(ctx("O_NONBLOCK"), e))?;
        if cfg.persist {
            tap.set_persist(true)
                .map_err(|e| PortError::io(ctx("TUNSETPERSIST"), e))?;
        }
        let mtu = read_mtu(None, tap.name()).unwrap_or(1500);
        let device = tap_device(tap.offloads(), mtu);
        let control = Arc::new(TapControl {
            tap: Mutex::new((
                tap.try_clone()
                    .map_err(|e| PortError::io(ctx("dup of the queue descriptor"), e))?,
                mtu,
            )),
            supported,
        });
        let parse = if cfg.tun {
            cfg.parse.with_link(LinkType::Ip)
        } else {
            cfg.parse
        };
        Ok(TapPort {
            tap,
            control,
            supported,
            device,
            parse,
            fmt,
            drops: PortDrops::default(),
            ifstats: IfStats::open(&tname).ok().map(RefCell::new),
        })
    }

    /// Opens `queues` queues of the TAP interface `name` (0 is taken as 1), one port each, for
    /// one datapath thread each. With one queue this is [`TapPort::open`] with `cfg` as given.
    /// With more, every queue is opened with `IFF_MULTI_QUEUE` (whatever `cfg.multi_queue`
    /// says), the same 12-byte vnet header and the same offloads; a name pattern (`tap%d`) is
    /// resolved by the first queue and the others attach to the interface it created.
    ///
    /// The kernel picks the queue for each frame it sends through the TAP by the frame's flow
    /// (a symmetric hash of addresses and ports): the queue that last wrote a frame of the same
    /// flow (in either direction; remembered for a few seconds, recorded only after the written
    /// frame was processed), else the hash over the number of queues. So the frames of one flow
    /// all arrive on one queue, and a thread that writes a flow into its own queue receives the
    /// flow's answers there too. Offloads (`TUNSETOFFLOAD`) belong to the interface, not the queue:
    /// the ports share the first one's [`TapControl`]; [`Port::set_feature`] changes them for
    /// every queue but only the calling port's [`Device`] follows: hand the others the new state
    /// ([`Port::apply_state`]) or call it on every queue's port.
    pub fn open_queues(
        name: &str,
        cfg: &TapPortConfig,
        queues: usize,
    ) -> Result<Vec<TapPort>, PortError> {
        if queues <= 1 {
            return Ok(vec![TapPort::open(name, cfg)?]);
        }
        let cfg = TapPortConfig {
            multi_queue: true,
            ..*cfg
        };
        let first = TapPort::open(name, &cfg)?;
        let first_control = Arc::clone(&first.control);
        let actual = first.ifname().to_string();
        let mut ports = Vec::with_capacity(queues);
        ports.push(first);
        for _ in 1..queues {
            // The interface's drop counters are read by the first queue's port only: the
            // datapath sums the ports of every thread.
            let mut q = TapPort::open(&actual, &cfg)?;
            q.ifstats = None;
            q.control = Arc::clone(&first_control);
            ports.push(q);
        }
        Ok(ports)
    }

    /// A second port on the same queue ([`Tap::try_clone`]), with the same device view and its
    /// own drop counters (zero). For sending from another thread to a TAP that has one queue
    /// only; the clone should not be polled (a flow's frames would be split between readers).
    pub fn try_clone(&self) -> Result<TapPort, PortError> {
        let tap = self.tap.try_clone().map_err(|e| {
            PortError::io(
                format!("tap {}: dup of the queue descriptor", self.ifname()),
                e,
            )
        })?;
        Ok(TapPort {
            tap,
            control: Arc::clone(&self.control),
            supported: self.supported,
            device: self.device,
            parse: self.parse,
            fmt: self.fmt,
            drops: PortDrops::default(),
            ifstats: None,
        })
    }

    /// What the port's packets start with: [`LinkType::Ethernet`] for a TAP,
    /// [`LinkType::Ip`] for a TUN.
    pub fn link(&self) -> LinkType {
        self.parse.link
    }

    /// The interface name (as the kernel completed it).
    pub fn ifname(&self) -> &str {
        self.tap.name()
    }

    /// The `TUN_F_*` offloads in use.
    pub fn offloads(&self) -> u32 {
        self.control.lock().0.offloads()
    }

    /// The `TUN_F_*` offloads this kernel accepted when probed at open (what can be turned on).
    pub fn supported_offloads(&self) -> u32 {
        self.supported
    }

    /// Tells the port the interface's MTU changed (`ip link set NAME mtu N`): the device's MTU.
    pub fn set_mtu(&mut self, mtu: u32) {
        self.device.mtu = mtu;
        self.control.lock().1 = mtu;
    }

    /// The underlying [`Tap`].
    pub fn tap(&self) -> &Tap {
        &self.tap
    }

    /// The vnet header format in use.
    pub fn hdr_format(&self) -> HdrFormat {
        self.fmt
    }

    fn read_frame(&self, hdr: &mut [u8], room: &mut [u8]) -> io::Result<usize> {
        let mut iov = [
            libc::iovec {
                iov_base: hdr.as_mut_ptr() as *mut libc::c_void,
                iov_len: hdr.len(),
            },
            libc::iovec {
                iov_base: room.as_mut_ptr() as *mut libc::c_void,
                iov_len: room.len(),
            },
        ];
        // SAFETY: both iovecs point into live, writable buffers of the stated lengths for the
        // duration of the call.
        let n = unsafe { libc::readv(self.tap.as_raw_fd(), iov.as_mut_ptr(), 2) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// The transmit device a TAP with the `TUN_F_*` offloads `tun_f` and MTU `mtu` presents: see the
/// [module documentation](self). VLAN-tagged and encapsulated packets get the same features
/// (a `NEEDS_CSUM` fill works from any `csum_start`); tunnel GSO (`tx-udp_tnl-segmentation`,
/// and `tx-udp_tnl-csum-segmentation` with its checksum bit) only with `TUN_F_UDP_TUNNEL_GSO`
/// and TSO, else the features check sends tunnelled GSO packets to software; one tag parsed;
/// envelope 4.
pub fn tap_device(tun_f: u32, mtu: u32) -> Device {
    let mut f = Features::NONE;
    if tun_f & TUN_F_CSUM != 0 {
        f = f | Features::TX_CSUM_GENERIC | Features::TX_SG | Features::TX_FRAGLIST;
        if tun_f & TUN_F_TSO4 != 0 {
            f = f | Features::TSO;
        }
        if tun_f & TUN_F_TSO6 != 0 {
            f = f | Features::TSO6;
        }
        if tun_f & TUN_F_TSO_ECN != 0 && tun_f & (TUN_F_TSO4 | TUN_F_TSO6) != 0 {
            f = f | Features::TSO_ECN;
        }
        if tun_f & (TUN_F_USO4 | TUN_F_USO6) == TUN_F_USO4 | TUN_F_USO6 {
            f = f | Features::USO;
        }
        if tun_f & TUN_F_UDP_TUNNEL_GSO != 0 && f.intersects(Features::TSO | Features::TSO6) {
            f = f | Features::UDP_TNL;
            if tun_f & TUN_F_UDP_TUNNEL_GSO_CSUM != 0 {
                f = f | Features::UDP_TNL_CSUM;
            }
        }
    }
    Device {
        features: f,
        vlan_features: f,
        hw_enc_features: f,
        vlan_depth: 1,
        gso_max_size: TAP_GSO_MAX_SIZE,
        gso_max_segs: 65535,
        mtu,
        envelope: 4,
    }
}

/// The `TUN_F_*` bits a feature maps to, for the features a TAP port can toggle.
fn tun_bits_of(feature: Feature) -> Option<u32> {
    match feature {
        Feature::TxCsumGeneric => Some(TUN_F_CSUM),
        Feature::Tso => Some(TUN_F_TSO4),
        Feature::Tso6 => Some(TUN_F_TSO6),
        Feature::TsoEcn => Some(TUN_F_TSO_ECN),
        Feature::Uso => Some(TUN_F_USO4 | TUN_F_USO6),
        _ => None,
    }
}

/// The `TUN_F_*` bits after turning `feature` on or off from `bits`, with the kernel's rules
/// applied (no segmentation without checksum offload, no ECN without TSO).
fn tun_bits_with(bits: u32, feature: Feature, on: bool) -> Result<u32, String> {
    let b = tun_bits_of(feature).ok_or_else(|| "not a TAP offload".to_string())?;
    if !on {
        let mut n = bits & !b;
        if n & TUN_F_CSUM == 0 {
            n = 0;
        }
        if n & (TUN_F_TSO4 | TUN_F_TSO6) == 0 {
            n &= !TUN_F_TSO_ECN;
        }
        return Ok(n);
    }
    if b != TUN_F_CSUM && bits & TUN_F_CSUM == 0 {
        return Err("needs tx-checksum-ip-generic on first".into());
    }
    if b == TUN_F_TSO_ECN && bits & (TUN_F_TSO4 | TUN_F_TSO6) == 0 {
        return Err("needs tx-tcp-segmentation or tx-tcp6-segmentation on first".into());
    }
    Ok(bits | b)
}

/// The `virtio_net_hdr` that asks the receiver (the kernel, for a TAP or an `AF_PACKET` socket)
/// to do `work` for `frame`: an L4 checksum becomes `NEEDS_CSUM` at its location; GSO becomes
/// `gso_type` (ECN bit included) / `gso_size` / `hdr_len` (end of the L4 header: the TCP data
/// offset, or 8 bytes of UDP header, after `csum_start`).
///
/// Fails ([`PortError::Unsendable`]) for work `virtio_net_hdr` cannot express: VLAN insertion, an
/// IPv4 header checksum, GSO without a partial L4 checksum, a zero segment size, ECN on UDP, or
/// a checksum / header location outside the frame. Tunnel GSO is added by [`tunnel_gso_hdr`]
/// (ports with the 24-byte header).
pub fn work_to_vnet(frame: &[u8], work: &DeviceWork) -> Result<VirtioNetHdr, PortError> {
    let bad = |why: &str| Err(PortError::Unsendable(why.to_string()));
    if work.vlan.is_some() {
        return bad("VLAN insertion: virtio_net_hdr has no VLAN field");
    }
    if work.ip_csum || work.inner_ip_csum {
        return bad("IPv4 header checksum: virtio_net_hdr cannot request one");
    }
    let mut h = VirtioNetHdr::default();
    if let Some((start, off)) = work.l4_csum {
        if usize::from(start) + usize::from(off) + 2 > frame.len() {
            return bad("checksum location outside the frame");
        }
        h.flags = virtio::F_NEEDS_CSUM;
        h.csum_start = start;
        h.csum_offset = off;
    }
    let Some((gso_type, size, ecn)) = work.gso else {
        return Ok(h);
    };
    let (base, tcp) = match gso_type {
        GsoType::None => return Ok(h),
        GsoType::TcpV4 => (virtio::GSO_TCPV4, true),
        GsoType::TcpV6 => (virtio::GSO_TCPV6, true),
        GsoType::UdpL4 => (virtio::GSO_UDP_L4, false),
        GsoType::Udp => (virtio::GSO_UDP, false),
    };
    if size == 0 {
        return bad("GSO with a zero segment size");
    }
    if ecn && !tcp {
        return bad("ECN GSO of a UDP packet");
    }
    let Some((start, off)) = work.l4_csum else {
        return bad("GSO without a partial L4 checksum");
    };
    let start = usize::from(start);
    let hl = if tcp {
        if off != 16 {
            return bad("TCP GSO with a checksum offset other than 16");
        }
        let doff = frame.get(start + 12).map_or(0, |b| usize::from(b >> 4) * 4);
        if doff < 20 {
            return bad("TCP header outside the frame");
        }
        doff
    } else {
        if off != 6 {
            return bad("UDP GSO with a checksum offset other than 6");
        }
        8
    };
    let end = start + hl;
    if end > frame.len() {
        return bad("L4 header beyond the frame");
    }
    h.gso_type = base | if ecn { virtio::GSO_ECN } else { 0 };
    h.gso_size = size;
    h.hdr_len = u16::try_from(end).map_err(|_| PortError::Unsendable("headers too long".into()))?;
    Ok(h)
}

/// [`work_to_vnet`] encoded in `fmt` into `out` (the header bytes to send in front of `frame`);
/// a refusal is counted in `drops.tx_errors`.
pub(crate) fn encode_work(
    frame: &[u8],
    work: &DeviceWork,
    fmt: HdrFormat,
    out: &mut [u8],
    drops: &mut PortDrops,
) -> Result<(), PortError> {
    let encoded = work_to_vnet(frame, work).and_then(|h| {
        h.encode(fmt, out)
            .map(drop)
            .map_err(|e| PortError::Unsendable(e.to_string()))
    });
    if encoded.is_err() {
        drops.tx_errors += 1;
    }
    encoded
}

/// [`encode_work`] for a port whose header may describe UDP-tunnel GSO (`fmt` is
/// [`HdrFormat::V1HashTunnel`]): a GSO request whose checksum starts at the inner L4 header of a
/// VXLAN / Geneve frame (parsed with `parse`) gets the tunnel bits and offsets
/// ([`tunnel_gso_hdr`]; `outer_csum`: the port negotiated `TUN_F_UDP_TUNNEL_GSO_CSUM`).
pub(crate) fn encode_work_with(
    frame: &[u8],
    work: &DeviceWork,
    fmt: HdrFormat,
    parse: &ParseConfig,
    outer_csum: bool,
    out: &mut [u8],
    drops: &mut PortDrops,
) -> Result<(), PortError> {
    if fmt != HdrFormat::V1HashTunnel || work.gso.is_none() {
        return encode_work(frame, work, fmt, out, drops);
    }
    let encoded = work_to_vnet(frame, work)
        .and_then(|h| tunnel_gso_hdr(h, frame, parse, outer_csum, work.tunnel))
        .and_then(|h| {
            h.encode(fmt, out)
                .map(drop)
                .map_err(|e| PortError::Unsendable(e.to_string()))
        });
    if encoded.is_err() {
        drops.tx_errors += 1;
    }
    encoded
}

/// `h` (from [`work_to_vnet`]) for `frame` with the UDP-tunnel GSO fields set when `frame` is a
/// VXLAN / Geneve packet and `h`'s checksum starts at its inner L4 header: the
/// `UDP_TUNNEL_IPV4`/`IPV6` bit of the outer IP version, `outer_th_offset` (outer UDP),
/// `inner_nh_offset` (inner IP). `hdr_len` already ends after the inner L4 header. A tunnel
/// packet with an outer UDP checksum gets `UDP_TUNNEL_CSUM` when `outer_csum` (the port
/// negotiated `TUN_F_UDP_TUNNEL_GSO_CSUM`, so it advertises `tx-udp_tnl-csum-segmentation`),
/// and is refused otherwise. Plain packets pass unchanged. Where the headers are comes from
/// `hint` (transmit preparation's, from the packet's metadata, so from the parse of the port
/// the packet came in on: a VXLAN / Geneve port known only to that port's configuration is a
/// tunnel here too, as the metadata says) or, when it is [`TunnelHint::Unknown`], from a parse
/// of `frame` with this port's `parse`.
pub fn tunnel_gso_hdr(
    mut h: VirtioNetHdr,
    frame: &[u8],
    parse: &ParseConfig,
    outer_csum: bool,
    hint: TunnelHint,
) -> Result<VirtioNetHdr, PortError> {
    if h.gso_type == virtio::GSO_NONE {
        return Ok(h);
    }
    // Outer IP version, outer UDP, inner IP and inner L4 offsets: from transmit preparation's
    // hint when it gave one, else from a parse.
    let found = match hint {
        TunnelHint::Plain => return Ok(h),
        TunnelHint::Udp {
            outer_l3,
            outer_l4,
            inner_l3,
            inner_l4,
        } => {
            let v6 = frame
                .get(usize::from(outer_l3))
                .is_some_and(|b| b >> 4 == 6);
            Some((
                v6,
                Some(outer_l4.into()),
                Some(inner_l3.into()),
                Some(inner_l4.into()),
            ))
        }
        TunnelHint::Unknown => {
            let Ok(layout) = sluice_wire::parse_with(frame, parse) else {
                return Ok(h);
            };
            match (layout.inner.as_ref(), layout.tunnel) {
                (Some(inner), Some(t))
                    if matches!(
                        t.kind,
                        sluice_wire::TunnelKind::Vxlan | sluice_wire::TunnelKind::Geneve
                    ) =>
                {
                    let v6 = layout.outer.l3_kind == Some(sluice_wire::L3Kind::Ipv6);
                    Some((v6, layout.outer.l4, inner.l3, inner.l4))
                }
                _ => None,
            }
        }
    };
    let Some((outer_v6, outer_l4, inner_l3, inner_l4)) = found else {
        return Ok(h);
    };
    if inner_l4 != Some(usize::from(h.csum_start)) {
        return Ok(h);
    }
    let (Some(outer_l4), Some(inner_l3)) = (outer_l4, inner_l3) else {
        return Ok(h);
    };
    if frame
        .get(outer_l4 + 6..outer_l4 + 8)
        .is_some_and(|c| c != [0, 0])
    {
        if !outer_csum {
            return Err(PortError::Unsendable(
                "UDP-tunnel GSO with an outer UDP checksum (TUN_F_UDP_TUNNEL_GSO_CSUM not negotiated)"
                    .into(),
            ));
        }
        h.flags |= virtio::F_UDP_TUNNEL_CSUM;
    }
    h.gso_type |= if outer_v6 {
        virtio::GSO_UDP_TUNNEL_IPV6
    } else {
        virtio::GSO_UDP_TUNNEL_IPV4
    };
    let off =
        |v: usize| u16::try_from(v).map_err(|_| PortError::Unsendable("headers too long".into()));
    h.outer_th_offset = off(outer_l4)?;
    h.inner_nh_offset = off(inner_l3)?;
    Ok(h)
}

/// The MTU of `ifname`, by `SIOCGIFMTU` on `sock` (any socket of the interface's namespace) or,
/// with `None`, on a fresh UDP socket of the calling thread's namespace.
pub(crate) fn read_mtu(sock: Option<RawFd>, ifname: &str) -> io::Result<u32> {
    let own;
    let fd = match sock {
        Some(fd) => fd,
        None => {
            // SAFETY: socket has no memory preconditions.
            let raw =
                unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a fresh descriptor nothing else owns.
            own = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
            own.as_raw_fd()
        }
    };
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the name from and writes the MTU into the `ifreq`, which lives
    // for the whole call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut ifr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after a successful SIOCGIFMTU the union holds `ifru_mtu`.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
}

/// The offloads side of a [`TapPort`]: `TUNSETOFFLOAD` through a duplicate of the first
/// queue's descriptor (offloads belong to the interface), shared by every queue, called by the
/// switch on its control thread ([`Port::control`]).
#[derive(Debug)]
pub struct TapControl {
    /// The duplicate (its `offloads()` are the interface's) and the MTU.
    tap: Mutex<(Tap, u32)>,
    /// `TUN_F_*` bits the kernel accepted when probed at open.
    supported: u32,
}

/// The features a TAP's state lists: what its offloads can give.
const TAP_FEATURES: [Feature; 7] = [
    Feature::TxCsumGeneric,
    Feature::TxSg,
    Feature::TxFraglist,
    Feature::Tso,
    Feature::Tso6,
    Feature::TsoEcn,
    Feature::Uso,
];

impl TapControl {
    fn lock(&self) -> MutexGuard<'_, (Tap, u32)> {
        // Every call leaves the descriptor usable: a panic elsewhere does not matter.
        self.tap.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changeable(&self) -> Features {
        TAP_FEATURES
            .into_iter()
            .filter(|&f| tun_bits_of(f).is_some_and(|b| self.supported & b == b))
            .fold(Features::NONE, |acc, f| acc | Features::of(f))
    }

    fn state(&self, tun_f: u32, mtu: u32) -> PortState {
        let device = tap_device(tun_f, mtu);
        let changeable = self.changeable();
        PortState {
            features: TAP_FEATURES
                .into_iter()
                .map(|feature| EthtoolFeature {
                    feature,
                    on: device.features.has(feature),
                    fixed: !changeable.has(feature),
                })
                .collect(),
            device,
        }
    }
}

impl PortControl for TapControl {
    fn read(&self) -> Result<PortState, PortError> {
        let g = self.lock();
        Ok(self.state(g.0.offloads(), g.1))
    }

    fn set_feature(&self, feature: Feature, on: bool) -> Result<PortState, PortError> {
        let mut g = self.lock();
        let (tap, mtu) = &mut *g;
        let old = tap.offloads();
        if tap_device(old, *mtu).features.has(feature) == on {
            return Ok(self.state(old, *mtu));
        }
        let err = |reason: String| PortError::Feature { feature, reason };
        if !self.changeable().has(feature) {
            return Err(err(format!(
                "fixed on TAP {} (the kernel accepts only these TAP offloads: {})",
                tap.name(),
                tun_f_names(self.supported)
            )));
        }
        let new = tun_bits_with(old, feature, on).map_err(err)?;
        let accepted = tap.set_offloads(new).map_err(|e| {
            PortError::io(
                format!("TUNSETOFFLOAD {} on {}", tun_f_names(new), tap.name()),
                e,
            )
        })?;
        if accepted != new {
            let _ = tap.set_offloads(old);
            return Err(err(format!(
                "the kernel accepted TAP offloads {} of {}",
                tun_f_names(accepted),
                tun_f_names(new)
            )));
        }
        Ok(self.state(accepted, *mtu))
    }
}

impl Port for TapPort {
    fn name(&self) -> &str {
        self.tap.name()
    }

    fn kind(&self) -> &'static str {
        match self.parse.link {
            LinkType::Ethernet => "tap",
            LinkType::Ip => "tun",
        }
    }

    fn device(&self) -> Device {
        self.device
    }

    fn link(&self) -> LinkType {
        self.parse.link
    }

    fn changeable(&self) -> Features {
        [
            Feature::TxCsumGeneric,
            Feature::Tso,
            Feature::Tso6,
            Feature::TsoEcn,
            Feature::Uso,
        ]
        .into_iter()
        .filter(|&f| tun_bits_of(f).is_some_and(|b| self.supported & b == b))
        .fold(Features::NONE, |acc, f| acc | Features::of(f))
    }

    fn set_feature(&mut self, feature: Feature, on: bool) -> Result<(), PortError> {
        let state = self.control.set_feature(feature, on)?;
        self.device = state.device;
        Ok(())
    }

    fn control(&self) -> Option<Arc<dyn PortControl>> {
        Some(self.control.clone())
    }

    fn apply_state(&mut self, state: &PortState) -> Result<(), PortError> {
        self.device = state.device;
        Ok(())
    }

    fn recv(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> RecvResult {
        let mut n = 0;
        // Frame bytes read by this call (refused frames included, virtio headers not): the
        // burst ends at RX_BURST_BYTES.
        let mut bytes = 0;
        while n < max && bytes < RX_BURST_BYTES {
            let mut b = pool.get();
            let mut raw = [0u8; MAX_HDR_LEN];
            let hdr_len = self.fmt.size();
            let hdr = raw.get_mut(..hdr_len).unwrap_or_default();
            let room = b.room_mut();
            let room_len = room.len();
            let total = match self.read_frame(hdr, room) {
                Ok(t) => t,
                Err(e) => {
                    pool.put(b);
                    match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => break,
                        _ if n > 0 => break,
                        _ => {
                            return Err(PortError::io(
                                format!("read from TAP {}", self.tap.name()),
                                e,
                            ))
                        }
                    }
                }
            };
            bytes += total.saturating_sub(hdr_len);
            let Some(len) = total.checked_sub(hdr_len) else {
                self.drops.rx_invalid += 1;
                pool.put(b);
                continue;
            };
            if len >= room_len {
                // The kernel truncates silently; a frame filling the room may have been longer.
                self.drops.rx_truncated += 1;
                pool.put(b);
                continue;
            }
            b.set_len(len);
            match rx_prepare(&mut b, Some((&*hdr, self.fmt)), &self.parse) {
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
        Ok(n)
    }

    fn send(&mut self, frame: &[u8], work: &DeviceWork) -> Result<(), PortError> {
        if self.parse.link == LinkType::Ip && !matches!(frame.first().map(|b| b >> 4), Some(4 | 6))
        {
            // An Ethernet frame (or anything else) sent to a TUN port: the kernel would refuse
            // it anyway; say why, and count it.
            self.drops.tx_errors += 1;
            return Err(PortError::Unsendable(format!(
                "not an IP packet ({} bytes): TUN port {} takes L3 packets, no Ethernet header",
                frame.len(),
                self.tap.name()
            )));
        }
        let mut buf = [0u8; MAX_HDR_LEN];
        let hdr_len = self.fmt.size();
        let raw = buf.get_mut(..hdr_len).unwrap_or_default();
        let outer_csum = self.device.features.has(Feature::UdpTnlCsum);
        encode_work_with(
            frame,
            work,
            self.fmt,
            &self.parse,
            outer_csum,
            raw,
            &mut self.drops,
        )?;
        match self.tap.write(raw, frame) {
            Ok(n) if n == hdr_len + frame.len() => Ok(()),
            Ok(n) => {
                self.drops.tx_errors += 1;
                Err(PortError::io(
                    format!("write to TAP {}", self.tap.name()),
                    io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short write: {n} of {}", hdr_len + frame.len()),
                    ),
                ))
            }
            Err(e) => {
                self.drops.tx_errors += 1;
                Err(PortError::io(
                    format!("write {} bytes to TAP {}", frame.len(), self.tap.name()),
                    e,
                ))
            }
        }
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.tap.as_raw_fd())
    }

    fn drops(&self) -> PortDrops {
        PortDrops {
            rx_kernel: if_drops(self.ifstats.as_ref()).tx_dropped,
            ..self.drops
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_offload::tx::VlanInsert;

    /// Ethernet + IPv4 (20) + TCP with a `doff`-word header + `payload` bytes.
    fn tcp4(doff: u8, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + usize::from(doff) * 4 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 6;
        f[34 + 12] = doff << 4;
        f
    }

    #[test]
    fn csum_and_tcp_gso_become_a_header() {
        let f = tcp4(8, 3000);
        let w = DeviceWork {
            l4_csum: Some((34, 16)),
            gso: Some((GsoType::TcpV4, 1448, true)),
            ..DeviceWork::default()
        };
        let h = work_to_vnet(&f, &w).unwrap();
        assert_eq!(h.flags, virtio::F_NEEDS_CSUM);
        assert_eq!((h.csum_start, h.csum_offset), (34, 16));
        assert_eq!(h.gso_type, virtio::GSO_TCPV4 | virtio::GSO_ECN);
        assert_eq!(h.gso_size, 1448);
        assert_eq!(h.hdr_len, 34 + 32);
        // Only a checksum: no GSO fields.
        let w = DeviceWork {
            l4_csum: Some((34, 16)),
            ..DeviceWork::default()
        };
        let h = work_to_vnet(&f, &w).unwrap();
        assert_eq!((h.flags, h.gso_type, h.gso_size, h.hdr_len), (1, 0, 0, 0));
        // Nothing to do: an all-zero header.
        assert_eq!(
            work_to_vnet(&f, &DeviceWork::default()).unwrap(),
            VirtioNetHdr::default()
        );
    }

    #[test]
    fn udp_gso_header_ends_after_8_bytes() {
        let f = vec![0u8; 14 + 40 + 8 + 4000];
        let w = DeviceWork {
            l4_csum: Some((54, 6)),
            gso: Some((GsoType::UdpL4, 1000, false)),
            ..DeviceWork::default()
        };
        let h = work_to_vnet(&f, &w).unwrap();
        assert_eq!(h.gso_type, virtio::GSO_UDP_L4);
        assert_eq!(h.hdr_len, 62);
        let w6 = DeviceWork {
            gso: Some((GsoType::TcpV6, 1000, false)),
            l4_csum: Some((54, 16)),
            ..DeviceWork::default()
        };
        // Data offset 0 in an all-zero frame: not a TCP header.
        assert!(work_to_vnet(&f, &w6).is_err());
    }

    #[test]
    fn inexpressible_work_is_unsendable() {
        let f = tcp4(5, 100);
        let cases = [
            DeviceWork {
                vlan: Some(VlanInsert {
                    tpid: 0x8100,
                    tci: 5,
                }),
                ..DeviceWork::default()
            },
            DeviceWork {
                ip_csum: true,
                ..DeviceWork::default()
            },
            DeviceWork {
                inner_ip_csum: true,
                ..DeviceWork::default()
            },
            DeviceWork {
                gso: Some((GsoType::TcpV4, 1000, false)),
                ..DeviceWork::default()
            },
            DeviceWork {
                gso: Some((GsoType::TcpV4, 0, false)),
                l4_csum: Some((34, 16)),
                ..DeviceWork::default()
            },
            DeviceWork {
                gso: Some((GsoType::UdpL4, 100, true)),
                l4_csum: Some((34, 6)),
                ..DeviceWork::default()
            },
            DeviceWork {
                gso: Some((GsoType::TcpV4, 100, false)),
                l4_csum: Some((34, 6)),
                ..DeviceWork::default()
            },
            DeviceWork {
                l4_csum: Some((200, 16)),
                ..DeviceWork::default()
            },
        ];
        for w in cases {
            assert!(
                matches!(work_to_vnet(&f, &w), Err(PortError::Unsendable(_))),
                "{w:?}"
            );
        }
        // A TCP header running past the frame.
        let mut short = tcp4(5, 0);
        short[34 + 12] = 15 << 4;
        let w = DeviceWork {
            gso: Some((GsoType::TcpV4, 100, false)),
            l4_csum: Some((34, 16)),
            ..DeviceWork::default()
        };
        assert!(work_to_vnet(&short, &w).is_err());
    }

    /// A VXLAN TCP GSO frame's header on the 24-byte format: the tunnel bit of the outer IP
    /// version, the outer UDP and inner IP offsets, `hdr_len` after the inner TCP header; with
    /// an outer UDP checksum it is refused (not negotiated); a plain frame is left alone.
    #[test]
    fn vxlan_gso_work_gets_the_tunnel_fields() {
        use sluice_testkit::tx_frames::{packet, Csum, Envelope, Ip, L4};
        let (mut f, meta, layout) = packet(Envelope::Vxlan, Ip::V4, L4::Tcp, true, Csum::Partial);
        let outer_l4 = layout.outer.l4.unwrap();
        let inner = layout.inner.unwrap();
        let (inner_l3, inner_l4) = (inner.l3.unwrap(), inner.l4.unwrap());
        let work = DeviceWork {
            l4_csum: Some((u16::try_from(inner_l4).unwrap(), 16)),
            gso: Some((GsoType::TcpV4, meta.segment_size(), false)),
            ..DeviceWork::default()
        };
        let mut raw = [0u8; 24];
        let mut drops = PortDrops::default();
        let parse = ParseConfig::DEFAULT;
        let fmt = TAP_TUNNEL_HDR_FORMAT;
        // The test frame carries an outer UDP checksum: refused, counted, without
        // TUN_F_UDP_TUNNEL_GSO_CSUM; flagged with it.
        assert!(f[outer_l4 + 6..outer_l4 + 8] != [0, 0]);
        assert!(encode_work_with(&f, &work, fmt, &parse, false, &mut raw, &mut drops).is_err());
        assert_eq!(drops.tx_errors, 1);
        encode_work_with(&f, &work, fmt, &parse, true, &mut raw, &mut drops).unwrap();
        let h = VirtioNetHdr::decode(&raw, fmt).unwrap();
        assert_eq!(h.flags, virtio::F_NEEDS_CSUM | virtio::F_UDP_TUNNEL_CSUM);
        assert_eq!(h.gso_type, virtio::GSO_TCPV4 | virtio::GSO_UDP_TUNNEL_IPV4);
        f[outer_l4 + 6..outer_l4 + 8].fill(0);
        encode_work_with(&f, &work, fmt, &parse, true, &mut raw, &mut drops).unwrap();
        let h = VirtioNetHdr::decode(&raw, fmt).unwrap();
        assert_eq!(h.gso_type, virtio::GSO_TCPV4 | virtio::GSO_UDP_TUNNEL_IPV4);
        assert_eq!(h.flags, virtio::F_NEEDS_CSUM);
        assert_eq!(usize::from(h.outer_th_offset), outer_l4);
        assert_eq!(usize::from(h.inner_nh_offset), inner_l3);
        assert_eq!(usize::from(h.hdr_len), inner_l4 + 20);
        assert_eq!(
            (
                usize::from(h.outer_th_offset),
                usize::from(h.inner_nh_offset)
            ),
            (34, 64)
        );
        // The kernel's reading of it: the same frame with the tunnel GSO request inside.
        let back = h
            .to_meta(fmt, &f, &sluice_wire::parse(&f).unwrap())
            .unwrap();
        assert_eq!(back.gso_type(), GsoType::TcpV4);
        assert!(back.tunnel().is_some());
        // A plain TCP GSO frame gets no tunnel fields.
        let (p, pm, _) = packet(Envelope::Plain, Ip::V4, L4::Tcp, true, Csum::Partial);
        let w = DeviceWork {
            l4_csum: Some((34, 16)),
            gso: Some((GsoType::TcpV4, pm.segment_size(), false)),
            ..DeviceWork::default()
        };
        encode_work_with(&p, &w, fmt, &parse, true, &mut raw, &mut drops).unwrap();
        let h = VirtioNetHdr::decode(&raw, fmt).unwrap();
        assert_eq!(h.gso_type, virtio::GSO_TCPV4);
        assert_eq!((h.outer_th_offset, h.inner_nh_offset), (0, 0));
    }

    /// The header offsets from transmit preparation's hint (`DeviceWork::tunnel`) give the
    /// same `virtio_net_hdr` as a parse of the frame, for each UDP tunnel and outer IP version;
    /// a frame hinted plain gets no tunnel fields.
    #[test]
    fn tunnel_hint_gives_what_a_parse_gives() {
        use sluice_offload::tx::TunnelHint;
        use sluice_testkit::tx_frames::{packet, Csum, Envelope, Ip, L4};
        let fmt = TAP_TUNNEL_HDR_FORMAT;
        let parse = ParseConfig::DEFAULT;
        let mut checked = 0;
        for env in [Envelope::Vxlan, Envelope::Geneve] {
            for ip in [Ip::V4, Ip::V6] {
                let (f, meta, layout) = packet(env, ip, L4::Tcp, true, Csum::Partial);
                let inner_l4 = layout.inner.and_then(|h| h.l4).unwrap();
                let gso = if ip == Ip::V4 {
                    GsoType::TcpV4
                } else {
                    GsoType::TcpV6
                };
                let base = DeviceWork {
                    l4_csum: Some((u16::try_from(inner_l4).unwrap(), 16)),
                    gso: Some((gso, meta.segment_size(), false)),
                    ..DeviceWork::default()
                };
                let hint = TunnelHint::of(&meta);
                assert!(matches!(hint, TunnelHint::Udp { .. }), "{env:?} {ip:?}");
                let hinted = DeviceWork {
                    tunnel: hint,
                    ..base
                };
                let (mut a, mut b) = ([0u8; 24], [0u8; 24]);
                let mut drops = PortDrops::default();
                encode_work_with(&f, &base, fmt, &parse, true, &mut a, &mut drops).unwrap();
                encode_work_with(&f, &hinted, fmt, &parse, true, &mut b, &mut drops).unwrap();
                assert_eq!(a, b, "{env:?} {ip:?}");
                let h = VirtioNetHdr::decode(&b, fmt).unwrap();
                assert_ne!(h.outer_th_offset, 0, "{env:?} {ip:?}");
                checked += 1;
                // Hinted plain: no tunnel fields, whatever the bytes say.
                let plain = DeviceWork {
                    tunnel: TunnelHint::Plain,
                    ..base
                };
                encode_work_with(&f, &plain, fmt, &parse, true, &mut b, &mut drops).unwrap();
                let h = VirtioNetHdr::decode(&b, fmt).unwrap();
                assert_eq!((h.outer_th_offset, h.inner_nh_offset), (0, 0));
            }
        }
        assert_eq!(checked, 4);
    }

    #[test]
    fn tun_bits_map_to_features() {
        let d = tap_device(TAP_OFFLOADS, 1500);
        for f in [
            Feature::TxCsumGeneric,
            Feature::TxSg,
            Feature::TxFraglist,
            Feature::Tso,
            Feature::Tso6,
            Feature::TsoEcn,
            Feature::Uso,
        ] {
            assert!(d.features.has(f), "{f}");
        }
        for f in [
            Feature::TxCsumIpv4Header,
            Feature::VlanCtagInsert,
            Feature::TxCsumSctp,
            Feature::UdpTnl,
            Feature::Ufo,
        ] {
            assert!(!d.features.has(f), "{f}");
        }
        assert_eq!((d.mtu, d.envelope), (1500, 4));
        // Tunnel GSO, and with its checksum bit the outer-checksum variant (never alone).
        let t = tap_device(TAP_OFFLOADS | TUN_F_UDP_TUNNEL_GSO, 1500).features;
        assert!(t.has(Feature::UdpTnl) && !t.has(Feature::UdpTnlCsum));
        let tc = tap_device(
            TAP_OFFLOADS | TUN_F_UDP_TUNNEL_GSO | TUN_F_UDP_TUNNEL_GSO_CSUM,
            1500,
        )
        .features;
        assert!(tc.has(Feature::UdpTnl) && tc.has(Feature::UdpTnlCsum));
        assert!(!tap_device(TAP_OFFLOADS | TUN_F_UDP_TUNNEL_GSO_CSUM, 1500)
            .features
            .has(Feature::UdpTnlCsum));
        // Without CSUM the kernel drops every segmentation bit: so do we.
        assert_eq!(
            tap_device(TAP_OFFLOADS & !TUN_F_CSUM, 9000).features,
            Features::NONE
        );
        // USO needs both halves; ECN needs TSO.
        assert!(!tap_device(TUN_F_CSUM | TUN_F_USO4, 1500)
            .features
            .has(Feature::Uso));
        assert!(!tap_device(TUN_F_CSUM | TUN_F_TSO_ECN, 1500)
            .features
            .has(Feature::TsoEcn));
    }

    #[test]
    fn toggling_follows_the_kernel_rules() {
        let all = TAP_OFFLOADS;
        assert_eq!(tun_bits_with(all, Feature::TxCsumGeneric, false), Ok(0));
        assert_eq!(
            tun_bits_with(all, Feature::Tso, false),
            Ok(all & !TUN_F_TSO4)
        );
        let no_tso = tun_bits_with(all & !TUN_F_TSO4, Feature::Tso6, false).unwrap();
        assert_eq!(no_tso & (TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN), 0);
        assert_eq!(
            tun_bits_with(all, Feature::Uso, false),
            Ok(all & !(TUN_F_USO4 | TUN_F_USO6))
        );
        assert!(tun_bits_with(0, Feature::Tso, true).is_err());
        assert!(tun_bits_with(TUN_F_CSUM, Feature::TsoEcn, true).is_err());
        assert_eq!(
            tun_bits_with(TUN_F_CSUM, Feature::Uso, true),
            Ok(TUN_F_CSUM | TUN_F_USO4 | TUN_F_USO6)
        );
        assert!(tun_bits_with(all, Feature::TxSg, false).is_err());
    }
}
