//! The OS-facing side of Sluice: the only crate that makes system calls and the only one allowed
//! to use `unsafe` (every block carries a `// SAFETY:` comment).
//!
//! - [`netns`]: throw-away network namespaces ([`Netns`]) and veth pairs ([`VethPair`]), for
//!   `sluice demo`, the switch's `AF_PACKET` ports in a namespace, and the tests. Everything is
//!   named uniquely (pid + counter) and removed on drop, also when a test panics.
//! - [`tap`]: TAP devices with `virtio_net_hdr` (`IFF_VNET_HDR`, `TUNSETVNETHDRSZ`,
//!   `TUNSETOFFLOAD` with per-bit fallback) and optionally NAPI ([`Tap`]).
//! - [`afpacket`]: `AF_PACKET` raw sockets with `PACKET_VNET_HDR` and `PACKET_AUXDATA`; VLAN tags
//!   that the kernel moved out of the data are put back into the frame ([`PacketSocket`]).
//! - [`port_tap`]: the switch's TAP port ([`TapPort`]), a [`sluice_datapath::Port`] whose device
//!   features follow the negotiated `TUN_F_*` offloads.
//! - [`port_afpacket`]: the switch's `AF_PACKET` port ([`AfPacketPort`]) on a veth end or NIC,
//!   with the interface's `ethtool -k` features as its device.
//! - [`netdev`]: a device's link state (rtnetlink `RTM_GETLINK`) and features (the
//!   `SIOCETHTOOL` ioctl) read and changed straight from the kernel ([`netdev::NetDev`]).
//! - [`cred`]: a Unix socket peer's credentials (`SO_PEERCRED`) and its groups, for the
//!   control socket's access check.
//! - [`poll`]: waiting on several ports' descriptors ([`poll::wait_readable`]); [`signal`]: stop
//!   on `SIGINT`/`SIGTERM` ([`signal::stop_on_signals`]).
//! - [`sched`]: CPU affinity and `SCHED_FIFO` for threads (the system calls of the kernel GRO
//!   oracle, which itself lives in the dev-only `sluice-testkit` crate).
//! - [`memory`]: the allocator setting `sluice run` takes (glibc's mapping threshold
//!   fixed).
//!
//! Everything here but [`memory`] needs root (`CAP_NET_ADMIN`, `CAP_SYS_ADMIN` for `setns`, `CAP_SYS_NICE` for
//! `SCHED_FIFO`). The ports themselves run no programs; [`Netns`] and [`VethPair`] (tests, the
//! demo) run `ip`.

pub mod afpacket;
pub mod cred;
pub mod ifstats;
pub mod memory;
pub mod netdev;
pub mod netns;
pub mod poll;
pub mod port_afpacket;
pub mod port_tap;
pub mod sched;
pub mod signal;
pub mod sockopt;
pub mod tap;
pub mod udp_gso;

pub use afpacket::{AfPacketConfig, PacketSocket, RecvFrame, VlanTag};
pub use netns::{Netns, VethPair};
pub use port_afpacket::{AfPacketPort, AfPacketPortConfig};
pub use port_tap::{work_to_vnet, TapPort, TapPortConfig};
pub use tap::{Tap, TapConfig};
pub use udp_gso::UdpGsoSocket;

/// Fails with a clear message unless the process runs as root (effective uid 0).
///
/// Root-only tests call this first so that they fail loudly instead of skipping silently.
pub fn require_root() -> std::io::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "this needs root (network namespaces, TAP, AF_PACKET, tc); effective uid is {euid}: \
                 run the tests as root (CI does)"
            ),
        ))
    }
}

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
