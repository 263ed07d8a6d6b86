//! Sluice's switch core, with no I/O.
//!
//! - [`buf`]: packet buffers with headroom ([`PacketBuf`]) and a recycling pool ([`BufPool`]).
//! - [`port`]: the [`Port`] interface the datapath drives (implemented with system calls in
//!   `sluice-ports`), receive metadata ([`port::rx_meta`]) and an in-memory port ([`MemPort`]).
//! - [`actions`]: what a rule does to a packet — push/pop VLAN tags with any TPID, set L2/L3/L4
//!   fields with the checksum state kept right, VXLAN/Geneve/GRE encapsulation and
//!   decapsulation.
//! - [`datapath`]: the batched loop: receive → GRO (per port) → classify → actions → group by
//!   egress → transmit preparation for that device → send.
//! - [`rss`]: software receive-side scaling — which datapath thread a frame belongs to, by a
//!   hash of its innermost flow ([`Rss`]).
#![deny(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod actions;
pub mod buf;
/// The datapath loop.
pub mod datapath;
pub mod port;
pub mod rss;
pub mod rule_stats;

pub use buf::{BufPool, PacketBuf};
pub use datapath::{Datapath, DatapathConfig, DatapathError, PortOptions, PortStats};
pub use port::{MemPort, MemPortHandle, Port, PortDrops, PortError, RecvResult};
pub use rss::Rss;
pub use rule_stats::{RuleCount, RuleCounters};

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
