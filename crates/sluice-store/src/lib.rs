//! Durable configuration state for the sluice daemon: ports with their settings and feature
//! overrides, rules with their handles, quotas, and the counters that keep 64-bit handles from
//! ever being reused, also across restarts.
//!
//! The store is a directory with two files, in the manner of the OVSDB log:
//!
//! - `journal`: an append-only log of commits. Each commit is one record, framed with its
//!   length and CRC32c, holding a batch of [`Change`]s. [`Store::commit`] returns only once the
//!   record is on stable storage (`fdatasync`), so a change is durable before the daemon
//!   acknowledges it. A batch of a million rules is one record and one sync.
//! - `snapshot`: the whole state as of some generation, written by [`Store::compact`] to a
//!   temporary file, synced, and renamed over the old one (then the directory is synced), after
//!   which the journal restarts empty at the new generation.
//!
//! [`Store::open`] loads the snapshot, replays the journal and returns the resulting [`State`].
//! A torn tail (a crash while the last, never acknowledged, record was being written) is
//! detected, truncated, and reported in [`Recovery`]; corruption anywhere else (a bad checksum
//! in a complete record, a bad magic number or version, a record that does not decode) is a
//! [`StoreError::Corrupt`] that names the file and the byte offset. A store is loaded whole or
//! not at all.
//!
//! ```
//! use sluice_store::{Change, Rule, Store};
//! # let dir = std::env::temp_dir().join(format!("sluice-store-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let (mut store, state) = Store::open(&dir)?;
//! assert!(state.rules.is_empty());
//! let handle = state.next_rule_handle;
//! store.commit(&[Change::RulesAdd(vec![Rule {
//!     handle,
//!     priority: 100,
//!     matches: b"ip,nw_dst=10.0.0.1".to_vec(),
//!     actions: b"output:2".to_vec(),
//! }])])?;
//! drop(store);
//! let (_store, state) = Store::open(&dir)?;
//! assert_eq!(state.rules[&handle].actions, b"output:2");
//! assert_eq!(state.next_rule_handle, handle + 1);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), sluice_store::StoreError>(())
//! ```
//!
//! The crate knows nothing of the switch's types: rule matches and actions are opaque bytes
//! (rule text, or a compact encoded form), port kinds and settings are strings. The daemon maps
//! its own types in and out. See `docs/store.md` for the file format, the guarantees and the
//! measurements behind the choice of a journal.
#![deny(unsafe_code)]

mod codec;
mod error;
mod frame;
mod state;
mod store;

pub use error::StoreError;
pub use state::{Change, Port, Rule, RuleRef, State};
pub use store::{Recovery, Store, TornTail};

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
