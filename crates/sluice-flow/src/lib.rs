//! Sluice's flow classifier.
//!
//! - [`FlowKey`]: every matchable header field of a packet in [`key::KEY_WORDS`] 64-bit words,
//!   filled from a parsed frame by [`FlowKey::extract`]; a [`Mask`] has the same shape.
//! - [`Rule`]: a [`Match`] (`key`, `mask`), a priority (higher wins; equal priorities go to the
//!   lowest [`Handle`]) and [`ActionList`] (a shared, interned `Arc<[Action]>`).
//! - [`FlowTable`]: the single writer. Batches (`insert_batch`, `delete_batch`, `modify_batch`,
//!   best-effort or all-or-nothing) return one result per rule and are published at once.
//!   Handles come from an IDR-like allocator; quotas on rule count and memory.
//! - [`Reader`] / [`Snapshot`]: lock-free lookups from any number of threads, by tuple-space
//!   search (one hash table per distinct mask, subtables in order of their best priority, early
//!   stop), staged like Open vSwitch's (a subtable is skipped when no rule shares the packet's
//!   non-L4 words), one key at a time or a burst at a time ([`Snapshot::lookup_batch`]).
//! - [`ExactCache`]: an optional per-thread exact-match cache in front of the classifier, emptied
//!   whenever a new batch is published.
//! - [`text`]: a `tc flower`-like rule syntax with positioned errors, and printing back.
//! - [`bench`](mod@bench): the benchmark's rules and packets (pure generators; the timing and the rule-file
//!   loader of `sluice bench flows` and `sluice flow add --batch` are in the `sluice` binary).
//!
//! # Concurrency
//!
//! Two copies of the classifier, left-right style ([`publish`]): the writer applies a batch to the
//! standby copy and publishes it with one atomic pointer swap (`arc-swap`), then, before the
//! next batch, waits for readers of the old copy to leave and replays the batch on it. Readers
//! never lock and see a batch whole or not at all; a batch costs O(rules in the batch), never a
//! copy of the table; memory is two copies plus one operation log, reclaimed by reference counts.
//! The concurrency needs no `unsafe` code: `Arc::get_mut` is the proof that the standby copy is
//! unshared. The crate's `unsafe` blocks are two hints that change no value, the lookups'
//! prefetch (`_mm_prefetch`) and huge pages for the exact-match cache (`madvise`), in
//! `classifier/hint.rs`; and one runtime-dispatched call, after its check, of the burst lookup
//! compiled for AVX2 (`classifier/lookup.rs`; the portable build is what other processors run,
//! and the tests check it too).
//!
//! Inserts are applied in batch order, sixteen at a time with their bucket reads started
//! together (safe Rust has no prefetch instruction: the reads are ordinary loads folded into a
//! `black_box`). An all-or-nothing insert batch is validated before anything is applied, so a
//! failing batch leaves both copies byte-for-byte as they were: the copies always share one
//! layout, which lets the replay of an insert write the bucket and entry the first copy chose
//! (see [`classifier`]) and lets the writer's records name entries by index instead of holding
//! keys.
//!
//! Rejected alternatives: copying the table (or each touched subtable) per batch is O(table) per
//! publish and misses the insertion goal for streams of batches; per-rule versions (Open vSwitch's
//! `visible_from`/`removed_at`) need a hash table that tolerates concurrent writes, which safe Rust
//! and the well-kept crates do not offer without `unsafe` of our own.
#![deny(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod action;
pub mod bench;
pub mod classifier;
pub mod key;
pub mod publish;
pub mod rule;
pub mod table;
pub mod text;

pub use action::{Action, ActionList, TunnelEncap, TunnelKind};
pub use classifier::{ExactCache, HitRef};
pub use key::{Field, FlowKey, Mask};
pub use rule::{clear_rules, BatchMode, Handle, Match, Rule, RuleError, RuleRef};
pub use table::{FlowTable, Idr, Reader, Snapshot, TableConfig, PARALLEL_MIN_BATCH};
pub use text::{parse_rule, ParseError, PortNames, RuleText};

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
