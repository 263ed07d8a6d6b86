//! One copy of the classifier: tuple-space search over one hash table per distinct mask.
//!
//! Subtables are kept sorted by their highest rule priority (then by mask id), so a lookup stops
//! as soon as the best match found has a priority above the next subtable's maximum. Inside a
//! subtable, one entry per masked key holds the best rule with that match; the rare other rules
//! with the same match (other priorities) sit in a side list.
//!
//! Each subtable reads only the key words its mask uses (gathered into a fixed-width array of 4,
//! 6 or 13 words, zero-padded, hashed with one multiply-fold per word). Its table is our own open
//! addressing: a power-of-two array of 8-byte buckets (the upper 32 bits of the key's hash, and
//! the entry's index), probed linearly from the bucket the hash's top bits select, at most half
//! full, in front of an array of entries (the packed key, a rank, the action id). A probe reads
//! buckets until an empty one or one whose hash bits match; only then is an entry read and its
//! key compared. Inserting a rule writes one bucket and appends (or reuses) one entry; growing or
//! deleting moves buckets without reading keys (a bucket's home is its stored hash bits). Entry
//! indices are stable while the entry lives, so the writer's records name entries instead of
//! copying keys, and both copies, applying the same operations in the same order, have the same
//! layout: the replay of an insert writes the bucket and entry the first copy chose, unprobed.
//!
//! A rule's priority and handle are one `u64` *rank* (`priority << 32 | !handle`): the best rule
//! is the one with the highest rank (higher priority, then lower handle), so choosing a winner is
//! one comparison.
//!
//! A lookup first evaluates one small filter per subtable, branch-free, from a dense array:
//! when all of a subtable's entries share their non-L4 words (the common "one prefix, many ports"
//! shape), the filter compares the packet's last three such words with them, and when there are
//! no more than three that is the whole stage check (a key that passes is then hashed from the
//! shared words' precomputed hash, its L4 word only). Otherwise the filter passes every key (or
//! checks only part of the words), and the subtable's staged check (Open vSwitch's idea, two
//! stages) compares the rest with the shared words, or hashes the non-L4 words and looks them up
//! in the subtable's set of such hashes. Only subtables that pass are hashed and probed:
//! first every candidate's hash and home-bucket read (independent loads whose cache misses
//! overlap), then the probes. [`Classifier::lookup_batch`] works subtable by subtable (hash every
//! key of a burst, then probe each), so the probes of different keys overlap; it checks each
//! filter against the whole burst at once (the keys' words transposed into columns), and runs
//! a build of itself compiled for AVX2 where the processor has it (four keys per compare).
//!
//! A copy is changed only through operations (`Op`), so the writer can replay the same log on the
//! other copy (see [`crate::publish`]).
//!
//! | concern | file |
//! |---|---|
//! | a subtable's hash table (buckets, entries, side lists), a stored rule's rank | `bucket_table.rs` |
//! | which key words a mask uses, packing and hashing them | `key_select.rs` |
//! | a subtable: a table of its key width, its priorities, stage filter and lookup filter | `subtable.rs` |
//! | one copy ([`Classifier`]): subtables, order, action lists, single-rule changes | `copy.rs` |
//! | lookups, one key or a burst (and the burst's AVX2 dispatch, `unsafe`) | `lookup.rs` |
//! | prefetch and huge-page hints (the crate's other `unsafe`) | `hint.rs` |
//! | the exact-match cache | `exact_cache.rs` |
//! | operations on a copy and the writer's records | `ops.rs` |
//! | inserting and replaying on several threads | `parallel.rs` |
//! | replaying a batch on the other copy | `replay.rs` |
//!
//! Each module uses only modules listed above it, and nothing here uses [`crate::table`] (the
//! writer, which uses this module).

mod bucket_table;
mod copy;
mod exact_cache;
pub(crate) mod hint;
mod key_select;
mod lookup;
mod ops;
mod parallel;
mod replay;
mod subtable;

pub(crate) use bucket_table::{StoredRule, RULE_BYTES_PER_COPY};
pub use copy::Classifier;
pub(crate) use copy::{BUCKET_AHEAD, GROUP, KEY_AHEAD};
pub use exact_cache::ExactCache;
pub use lookup::HitRef;
pub(crate) use ops::{Op, RuleRecord};
pub(crate) use parallel::balance;
pub use parallel::PARALLEL_MIN_BATCH;
