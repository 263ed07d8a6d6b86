//! Per-packet offload metadata for Sluice: the checksum-status state machine, header offsets, GSO
//! fields, byte-level header rewrites that keep checksums honest, and software checksum
//! verification.
//!
//! - [`meta`]: [`OffloadMeta`], the four checksum statuses ([`CsumStatus`]) and the transitions
//!   that move them (the state table is in that module's documentation).
//! - [`rewrite`]: set addresses, ports, TTL/hop limit and DSCP in a frame, updating every checksum
//!   that covers the changed bytes the way the metadata says.
//! - [`verify`]: check every checksum of a parsed frame in software ([`verify::verify_frame`]).
//!
//! Everything here is deterministic, does no I/O and allocates nothing per packet. No function
//! panics on any frame, layout or metadata: bounds are checked and failures are typed
//! ([`Error`]) or reported as [`verify::Verdict::None`].
#![deny(unsafe_code)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod calc;
pub mod error;
pub mod meta;
pub mod rewrite;
pub mod verify;
pub mod virtio;

pub use error::Error;
pub use meta::{
    CsumStatus, Fixup, GsoType, Level, OffloadMeta, Offsets, OuterHeaders, RewritePlan, Slot,
    TunnelCsum,
};
pub use verify::{Verdict, Verdicts};

#[cfg(test)]
mod tests;

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
