//! TAP and TUN devices with `virtio_net_hdr`.
//!
//! [`Tap::open`] opens `/dev/net/tun` in the calling thread's network namespace (use
//! [`crate::Netns::enter`] to open one inside a namespace), attaches it to a TAP interface with
//! `IFF_TAP | IFF_NO_PI` (or, with [`TapConfig::tun`], a TUN interface with
//! `IFF_TUN | IFF_NO_PI`: L3 packets, no Ethernet header) and optionally `IFF_VNET_HDR`, `IFF_NAPI`, `IFF_NAPI_FRAGS`,
//! `IFF_MULTI_QUEUE`, sets the header size (`TUNSETVNETHDRSZ`) and the offloads
//! (`TUNSETOFFLOAD`). The interface disappears when the last file descriptor closes.
//!
//! Every frame written is `vnet header ‖ Ethernet frame` (`vnet header ‖ IP packet` on a TUN,
//! whose `csum_start` and `hdr_len` then count from the IP header); every frame read is the
//! same. The
//! offloads (`TUN_F_*`) say what the *kernel may hand us* on read (checksum-partial, TSO, USO …
//! super-packets); what we may write is not limited by them.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `TUN_F_CSUM`: we accept frames whose L4 checksum is left partial (`NEEDS_CSUM`).
pub const TUN_F_CSUM: u32 = 0x01;
/// `TUN_F_TSO4`: we accept TCP over IPv4 super-packets.
pub const TUN_F_TSO4: u32 = 0x02;
/// `TUN_F_TSO6`: we accept TCP over IPv6 super-packets.
pub const TUN_F_TSO6: u32 = 0x04;
/// `TUN_F_TSO_ECN`: we accept TCP super-packets with the ECN bit (`VIRTIO_NET_HDR_GSO_ECN`).
pub const TUN_F_TSO_ECN: u32 = 0x08;
/// `TUN_F_UFO`: we accept UDP fragmentation-offload super-packets.
pub const TUN_F_UFO: u32 = 0x10;
/// `TUN_F_USO4`: we accept UDP segmentation-offload (`UDP_L4`) over IPv4; the kernel takes it
/// only together with [`TUN_F_USO6`].
pub const TUN_F_USO4: u32 = 0x20;
/// `TUN_F_USO6`: UDP segmentation offload over IPv6 (only together with [`TUN_F_USO4`]).
pub const TUN_F_USO6: u32 = 0x40;
/// `TUN_F_UDP_TUNNEL_GSO`: we accept UDP-tunnel (VXLAN/Geneve) super-packets; needs a 24-byte
/// vnet header (Linux 6.17+).
pub const TUN_F_UDP_TUNNEL_GSO: u32 = 0x080;
/// `TUN_F_UDP_TUNNEL_GSO_CSUM`: … with the outer UDP checksum to be computed (Linux 6.17+).
pub const TUN_F_UDP_TUNNEL_GSO_CSUM: u32 = 0x100;
/// The `TUN_F_*` bits of `bits` by name (`csum+tso4+tso6`), for messages; unknown bits as hex,
/// no bits as `none`.
///
/// ```
/// use sluice_ports::tap::{tun_f_names, TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6};
/// assert_eq!(tun_f_names(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6), "csum+tso4+tso6");
/// assert_eq!(tun_f_names(0), "none");
/// ```
pub fn tun_f_names(bits: u32) -> String {
    const NAMES: [(u32, &str); 9] = [
        (TUN_F_CSUM, "csum"),
        (TUN_F_TSO4, "tso4"),
        (TUN_F_TSO6, "tso6"),
        (TUN_F_TSO_ECN, "tso_ecn"),
        (TUN_F_UFO, "ufo"),
        (TUN_F_USO4, "uso4"),
        (TUN_F_USO6, "uso6"),
        (TUN_F_UDP_TUNNEL_GSO, "udp_tunnel_gso"),
        (TUN_F_UDP_TUNNEL_GSO_CSUM, "udp_tunnel_gso_csum"),
    ];
    let mut parts: Vec<String> = NAMES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| (*n).to_string())
        .collect();
    if bits & !TUN_F_ALL != 0 {
        parts.push(format!("{:#x}", bits & !TUN_F_ALL));
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join("+")
    }
}

/// Every `TUN_F_*` bit this crate knows.
pub const TUN_F_ALL: u32 = 0x1ff;

/// The order in which [`Tap::set_offloads`] retries offloads when the kernel refuses the whole
/// set; groups the kernel only takes together are tried together first.
const OFFLOAD_PROBE_ORDER: [u32; 10] = [
    TUN_F_CSUM,
    TUN_F_TSO4,
    TUN_F_TSO6,
    TUN_F_TSO_ECN,
    TUN_F_UFO,
    TUN_F_USO4 | TUN_F_USO6,
    TUN_F_USO4,
    TUN_F_USO6,
    TUN_F_UDP_TUNNEL_GSO,
    TUN_F_UDP_TUNNEL_GSO_CSUM,
];

/// How to open a [`Tap`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapConfig {
    /// `virtio_net_hdr` size: 0 (no `IFF_VNET_HDR`), 10 (legacy), 12 (v1, with `num_buffers`) or
    /// 24 (v1 + hash + UDP-tunnel offsets, read by the kernel only at this size).
    pub vnet_hdr_len: usize,
    /// `TUN_F_*` offloads to request (needs a vnet header when non-zero); the accepted subset is
    /// available from [`Tap::offloads`].
    pub offloads: u32,
    /// `IFF_NAPI`: frames written go through a NAPI poll and GRO.
    pub napi: bool,
    /// `IFF_NAPI_FRAGS` (needs `napi`).
    pub napi_frags: bool,
    /// `IFF_MULTI_QUEUE`.
    pub multi_queue: bool,
    /// `IFF_TUN` instead of `IFF_TAP`: the device carries IP packets with no Ethernet header
    /// (the kernel picks IPv4 or IPv6 by the version nibble). The offloads are the same.
    pub tun: bool,
}

/// An open TAP queue.
///
/// Needs root (`CAP_NET_ADMIN`), so not run here:
///
/// ```no_run
/// use sluice_packet::virtio::{HdrFormat, VirtioNetHdr};
/// use sluice_ports::tap::{Tap, TapConfig, TUN_F_CSUM, TUN_F_TSO4};
/// use sluice_ports::Netns;
///
/// let ns = Netns::create("doc")?;
/// let tap = ns.enter(|| {
///     let offloads = TUN_F_CSUM | TUN_F_TSO4;
///     Tap::open("tap%d", &TapConfig { vnet_hdr_len: 12, offloads, ..TapConfig::default() })
/// })??;
/// ns.link_up(tap.name())?;
/// // The kernel accepts what it supports of the requested offloads.
/// assert_eq!(tap.offloads() & !(TUN_F_CSUM | TUN_F_TSO4), 0);
///
/// // Every frame goes with a virtio_net_hdr (here: no offload requested).
/// let mut hdr = [0u8; 12];
/// VirtioNetHdr::default().encode(HdrFormat::V1, &mut hdr).unwrap();
/// let frame = [0xffu8; 60];
/// assert_eq!(tap.write(&hdr, &frame)?, 12 + 60);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    name: String,
    ifindex: u32,
    vnet_hdr_len: usize,
    offloads: u32,
}

impl Tap {
    /// Opens (creating if needed) the TAP (or, with [`TapConfig::tun`], TUN) interface `name` (empty or a pattern like `tap%d` lets
    /// the kernel pick; at most 15 bytes) in the calling thread's network namespace.
    ///
    /// Fails with `InvalidInput` for an unsupported `vnet_hdr_len`, offloads without a vnet
    /// header, or `napi_frags` without `napi`. The interface is left down: bring it up with
    /// `ip link set` (e.g. [`crate::Netns::link_up`]).
    pub fn open(name: &str, config: &TapConfig) -> io::Result<Tap> {
        if !matches!(config.vnet_hdr_len, 0 | 10 | 12 | 24) {
            return Err(invalid(format!(
                "vnet_hdr_len {} (must be 0, 10, 12 or 24)",
                config.vnet_hdr_len
            )));
        }
        if config.vnet_hdr_len == 0 && config.offloads != 0 {
            return Err(invalid("offloads need a vnet header".into()));
        }
        if config.napi_frags && !config.napi {
            return Err(invalid("napi_frags needs napi".into()));
        }
        if name.len() >= libc::IFNAMSIZ {
            return Err(invalid(format!("interface name {name:?} is too long")));
        }
        // SAFETY: the path is a NUL-terminated literal; open has no other preconditions.
        let raw = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("open /dev/net/tun: {e}")));
        }
        // SAFETY: `raw` is a freshly opened descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let mut flags = if config.tun {
            libc::IFF_TUN
        } else {
            libc::IFF_TAP
        } | libc::IFF_NO_PI;
        if config.vnet_hdr_len != 0 {
            flags |= libc::IFF_VNET_HDR;
        }
        if config.napi {
            flags |= libc::IFF_NAPI;
        }
        if config.napi_frags {
            flags |= libc::IFF_NAPI_FRAGS;
        }
        if config.multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        // SAFETY: ifreq is plain old data; all-zero is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
            *dst = src as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags = flags as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one `ifreq`, which `ifr` is, for the whole call.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("TUNSETIFF {name:?} flags {flags:#x}: {e}"),
            ));
        }
        // SAFETY: the kernel wrote a NUL-terminated name (at most IFNAMSIZ - 1 bytes) into
        // `ifr_name`, which is IFNAMSIZ long.
        let actual = unsafe { CStr::from_ptr(ifr.ifr_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();

        if config.vnet_hdr_len != 0 {
            let size = config.vnet_hdr_len as libc::c_int;
            // SAFETY: TUNSETVNETHDRSZ reads one c_int through the pointer, valid for the call.
            let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!("TUNSETVNETHDRSZ {size}: {e}"),
                ));
            }
        }
        let ifindex = crate::netns::if_nametoindex(&actual)?;
        let mut tap = Tap {
            fd,
            name: actual,
            ifindex,
            vnet_hdr_len: config.vnet_hdr_len,
            offloads: 0,
        };
        if config.offloads != 0 {
            tap.set_offloads(config.offloads)?;
        }
        Ok(tap)
    }

    /// The interface name (as the kernel completed it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A second handle on the same queue (`dup(2)`: the same open file, so the same queue,
    /// offloads and `O_NONBLOCK`). For a TAP that cannot have more queues (a persistent one made
    /// without `multi_queue`): several threads can write it through their own handles, one
    /// write per frame. Only one of them should read it, or a flow's frames would be split.
    pub fn try_clone(&self) -> io::Result<Tap> {
        Ok(Tap {
            fd: self.fd.try_clone()?,
            name: self.name.clone(),
            ifindex: self.ifindex,
            vnet_hdr_len: self.vnet_hdr_len,
            offloads: self.offloads,
        })
    }

    /// The interface index, in the namespace the TAP was opened in.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The `virtio_net_hdr` size in use (0: none).
    pub fn vnet_hdr_len(&self) -> usize {
        self.vnet_hdr_len
    }

    /// The `TUN_F_*` offloads the kernel accepted last.
    pub fn offloads(&self) -> u32 {
        self.offloads
    }

    /// Makes the interface persistent (`TUNSETPERSIST`): it then outlives its last open
    /// descriptor (with its addresses and routes) until made non-persistent and closed, or
    /// deleted. `false` undoes it: the interface goes away when its last descriptor closes.
    pub fn set_persist(&self, on: bool) -> io::Result<()> {
        // SAFETY: TUNSETPERSIST takes its argument by value (an integer), no pointer.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::TUNSETPERSIST,
                libc::c_ulong::from(on),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TUNSETPERSIST {on}: {e}")));
        }
        Ok(())
    }

    /// Deletes the persistent TAP interface `name` of the calling thread's namespace, which
    /// nothing has open: attaches to it (as a single- or a multi-queue device, whichever it
    /// is), makes it non-persistent and closes it.
    pub fn delete_persistent(name: &str) -> io::Result<()> {
        let mut cfg = TapConfig {
            vnet_hdr_len: 12,
            offloads: 0,
            napi: false,
            napi_frags: false,
            multi_queue: false,
            tun: false,
        };
        let tap = match Tap::open(name, &cfg) {
            Ok(t) => t,
            Err(_) => {
                // The kernel refuses a mismatch of IFF_MULTI_QUEUE with the existing device.
                cfg.multi_queue = true;
                Tap::open(name, &cfg)?
            }
        };
        tap.set_persist(false)
    }

    /// Requests the offloads `wanted` (`TUNSETOFFLOAD`). When the kernel refuses the whole set,
    /// retries bit by bit (USO4+USO6 as a pair first) and keeps every bit it accepts. Returns the
    /// accepted set, which is also applied. Fails only if even the empty set is refused.
    pub fn set_offloads(&mut self, wanted: u32) -> io::Result<u32> {
        if self.try_offloads(wanted).is_ok() {
            self.offloads = wanted;
            return Ok(wanted);
        }
        let mut accepted = 0;
        let known = OFFLOAD_PROBE_ORDER.iter().fold(0, |acc, g| acc | g);
        let unknown = (0..32).map(|b| 1u32 << b).filter(|b| known & b == 0);
        for group in OFFLOAD_PROBE_ORDER.into_iter().chain(unknown) {
            if group & wanted != group || group & accepted == group {
                continue;
            }
            if self.try_offloads(accepted | group).is_ok() {
                accepted |= group;
            }
        }
        self.try_offloads(accepted)?;
        self.offloads = accepted;
        Ok(accepted)
    }

    fn try_offloads(&self, bits: u32) -> io::Result<()> {
        let arg = bits as libc::c_ulong;
        // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is passed.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::TUNSETOFFLOAD, arg) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// The `IFF_*` features this kernel's TUN driver supports (`TUNGETFEATURES`).
    pub fn features(&self) -> io::Result<u32> {
        let mut features: libc::c_uint = 0;
        // SAFETY: TUNGETFEATURES writes one c_uint through the pointer, valid for the call.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::TUNGETFEATURES,
                &mut features as *mut libc::c_uint,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(features)
        }
    }

    /// Switches `O_NONBLOCK` on or off: a nonblocking [`Tap::read`] fails with `WouldBlock` when
    /// nothing is queued.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        set_nonblocking(self.fd.as_raw_fd(), nonblocking)
    }

    /// Writes one frame: `vnet_hdr` (exactly [`Tap::vnet_hdr_len`] bytes; empty when the TAP has
    /// none) then `frame`, in one `writev`. Returns the bytes written (header included).
    ///
    /// The kernel validates the header here: a refused GSO request fails with `EINVAL`.
    pub fn write(&self, vnet_hdr: &[u8], frame: &[u8]) -> io::Result<usize> {
        if vnet_hdr.len() != self.vnet_hdr_len {
            return Err(invalid(format!(
                "vnet header of {} bytes on a TAP using {}",
                vnet_hdr.len(),
                self.vnet_hdr_len
            )));
        }
        let iov = [
            libc::iovec {
                iov_base: vnet_hdr.as_ptr() as *mut libc::c_void,
                iov_len: vnet_hdr.len(),
            },
            libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            },
        ];
        // SAFETY: both iovecs point into live slices for the duration of the call, and writev
        // only reads through them.
        let n = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Reads one frame (vnet header then Ethernet frame) into `buf`; returns its total length.
    /// A frame longer than `buf` is truncated by the kernel.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl AsRawFd for Tap {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

pub(crate) fn set_nonblocking(fd: RawFd, nonblocking: bool) -> io::Result<()> {
    // SAFETY: F_GETFL on a descriptor we own has no memory effects.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if nonblocking {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: F_SETFL with an int argument has no memory effects.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tun_f_bits_are_named() {
        assert_eq!(tun_f_names(0), "none");
        assert_eq!(
            tun_f_names(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_USO6),
            "csum+tso4+uso6"
        );
        assert_eq!(
            tun_f_names(TUN_F_UDP_TUNNEL_GSO_CSUM | 0x400),
            "udp_tunnel_gso_csum+0x400"
        );
    }
}
