//! Test support shared by Sluice's crates (a dev-dependency only; `publish = false`).
//!
//! - [`oracle`]: the running kernel as the reference GSO ([`GsoOracle`]) and GRO
//!   ([`GroOracle`]) implementation for the kernel-parity tests (method in
//!   `docs/kernel-oracle.md`); for L3 packets through TUN devices, [`TunGsoOracle`] and
//!   [`GroOracle`] with [`GroOracleConfig::l3`].
//! - [`traffic`]: real kernel TCP/UDP between two namespaces with every byte verified (the
//!   `sluice-traffic` crate, which `sluice demo` uses too, re-exported).
//! - [`netns`]: test-only interface helpers on top of `sluice_ports::netns` (turn every offload
//!   of a veth off, set one `ethtool -K` feature, list the features that are on).
//! - [`frames`]: a `virtio_net_hdr` encoder independent of `sluice-packet`'s codec, and Ethernet /
//!   IPv4 / IPv6 / TCP / UDP frame builders with correct checksums.
//! - [`segments`]: [`segments::Seg`], one TCP/UDP segment described field by field (VLANs, IP
//!   options, IPv6 extension headers, VXLAN/Geneve/GRE around it), for the GRO, datapath and
//!   `sluice pcap` tests.
//! - [`tx_frames`]: every encapsulation of the transmit-preparation matrix with an independent
//!   checksum, and frames with their offload metadata in a chosen checksum state.
//! - [`wait`]: [`wait_until`], waiting for a condition with a time limit instead of sleeping and
//!   hoping.
//! - [`root`]: fail loudly unless running as root.
//!
//! The namespace code needs root and the `ip`, `tc` and `ethtool` programs. All system calls and
//! `unsafe` stay in `sluice-ports`.

#![deny(unsafe_code)]

pub mod frames;
pub mod netns;
pub mod oracle;
pub mod oracle_tun;
pub mod segments;
pub mod tx_frames;
pub mod wait;

pub use oracle::{GroOracle, GroOracleConfig, GroOutput, GsoOracle, GsoOracleConfig, OracleError};
pub use oracle_tun::TunGsoOracle;
pub use sluice_traffic as traffic;
pub use wait::wait_until;

/// Fails the test with a clear message unless running as root (tests that need namespaces call
/// this first, so that they fail instead of skipping silently).
pub fn root() {
    if let Err(e) = sluice_ports::require_root() {
        panic!("{e}");
    }
}
