//! Offload algorithms over packets, with no I/O: software segmentation ([`gso`]), coalescing
//! ([`gro`]), device feature sets ([`features`]) and transmit preparation ([`tx`]).
#![deny(unsafe_code)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod features;
pub mod gro;
pub mod gso;
pub mod tx;

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
