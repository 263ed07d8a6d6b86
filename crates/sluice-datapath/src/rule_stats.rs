//! Per-rule counters: packets, bytes and last use of each flow rule, counted by the datapath
//! without a lock and summed over the threads by the control side.
//!
//! Each [`Datapath`](crate::Datapath) owns one [`RuleCounters`], indexed by the flow table's
//! own rule handle (`HitRef::handle`, small and dense). Only the owning thread writes its
//! cells (a relaxed load and store, no locked instruction); any thread may read them. The
//! cells live in chunks of [`CHUNK`] rules allocated the first time a rule of the chunk is hit
//! (a `OnceLock`: an acquire load on the hot path), so memory follows the rules that see
//! traffic; handles from [`MAX_RULES`] on are not counted.
//!
//! The table reuses the handle of a deleted rule: the control side calls
//! [`RuleCounters::clear`] for it when it deletes the rule. A datapath thread still finishing a
//! batch with the snapshot from before the delete may count that batch's packets after the
//! clear, for the rule that reuses the handle; the window is one batch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};

/// Rules per chunk of cells.
pub const CHUNK: usize = 4096;

/// Chunks: rules with a table handle below `CHUNKS * CHUNK` are counted.
pub const CHUNKS: usize = 4096;

/// The first table handle that is not counted.
pub const MAX_RULES: usize = CHUNK * CHUNKS;

/// The time origin of every `used` stamp of the process.
static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Nanoseconds since the process's origin, plus one (0 means "never").
pub fn stamp_now() -> u64 {
    u64::try_from(ORIGIN.elapsed().as_nanos())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// How long ago `stamp` (from [`stamp_now`]) was, or `None` for 0 (never).
pub fn age(stamp: u64) -> Option<Duration> {
    (stamp != 0).then(|| {
        let now = stamp_now();
        Duration::from_nanos(now.saturating_sub(stamp))
    })
}

#[derive(Default)]
struct Cell {
    packets: AtomicU64,
    bytes: AtomicU64,
    used: AtomicU64,
}

struct Chunk {
    cells: Box<[Cell]>,
}

/// One rule's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleCount {
    /// Packets that hit the rule.
    pub packets: u64,
    /// Their bytes, as received.
    pub bytes: u64,
    /// When it was last hit ([`stamp_now`] units; 0: never).
    pub used: u64,
}

impl RuleCount {
    /// Adds `other` (another thread's counts of the same rule): sums, and the later `used`.
    pub fn merge(&mut self, other: RuleCount) {
        self.packets = self.packets.wrapping_add(other.packets);
        self.bytes = self.bytes.wrapping_add(other.bytes);
        self.used = self.used.max(other.used);
    }
}

/// One datapath thread's per-rule counters.
pub struct RuleCounters {
    chunks: Box<[OnceLock<Chunk>]>,
}

impl std::fmt::Debug for RuleCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used = self.chunks.iter().filter(|c| c.get().is_some()).count();
        f.debug_struct("RuleCounters")
            .field("chunks_in_use", &used)
            .finish()
    }
}

impl Default for RuleCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl RuleCounters {
    /// No rule counted yet.
    pub fn new() -> RuleCounters {
        RuleCounters {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }

    fn cell(&self, rule: u32) -> Option<&Cell> {
        let i = rule as usize;
        self.chunks.get(i / CHUNK)?.get()?.cells.get(i % CHUNK)
    }

    /// Counts one packet of `bytes` for table handle `rule` at `now` ([`stamp_now`]). Only the
    /// owning datapath thread calls this.
    #[inline]
    pub fn hit(&self, rule: u32, bytes: u64, now: u64) {
        let i = rule as usize;
        let Some(slot) = self.chunks.get(i / CHUNK) else {
            return;
        };
        let chunk = slot.get_or_init(|| Chunk {
            cells: (0..CHUNK).map(|_| Cell::default()).collect(),
        });
        if let Some(c) = chunk.cells.get(i % CHUNK) {
            // One writer per cell: load + store is exact without a locked instruction.
            c.packets.store(
                c.packets.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
            c.bytes.store(
                c.bytes.load(Ordering::Relaxed).wrapping_add(bytes),
                Ordering::Relaxed,
            );
            c.used.store(now, Ordering::Relaxed);
        }
    }

    /// The counts of table handle `rule` (zeros for a rule never hit).
    pub fn get(&self, rule: u32) -> RuleCount {
        self.cell(rule).map_or(RuleCount::default(), |c| RuleCount {
            packets: c.packets.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            used: c.used.load(Ordering::Relaxed),
        })
    }

    /// Zeroes table handle `rule` (its rule was deleted; the handle will be reused).
    pub fn clear(&self, rule: u32) {
        if let Some(c) = self.cell(rule) {
            c.packets.store(0, Ordering::Relaxed);
            c.bytes.store(0, Ordering::Relaxed);
            c.used.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_count_per_rule_and_clear_resets() {
        let c = RuleCounters::new();
        assert_eq!(c.get(5), RuleCount::default());
        c.hit(5, 100, 7);
        c.hit(5, 60, 9);
        c.hit(CHUNK as u32 + 1, 10, 3);
        assert_eq!(
            c.get(5),
            RuleCount {
                packets: 2,
                bytes: 160,
                used: 9
            }
        );
        assert_eq!(c.get(CHUNK as u32 + 1).packets, 1);
        assert_eq!(c.get(4).packets, 0);
        c.clear(5);
        assert_eq!(c.get(5), RuleCount::default());
        // Beyond MAX_RULES: not counted, no panic.
        c.hit(u32::MAX, 1, 1);
        assert_eq!(c.get(u32::MAX), RuleCount::default());
    }

    #[test]
    fn merge_sums_and_keeps_the_latest_use() {
        let mut a = RuleCount {
            packets: 1,
            bytes: 10,
            used: 5,
        };
        a.merge(RuleCount {
            packets: 2,
            bytes: 20,
            used: 3,
        });
        assert_eq!(
            a,
            RuleCount {
                packets: 3,
                bytes: 30,
                used: 5
            }
        );
    }

    #[test]
    fn stamps_are_never_zero_and_age_grows() {
        let s = stamp_now();
        assert!(s > 0);
        assert!(age(0).is_none());
        assert!(age(s).is_some_and(|d| d < Duration::from_secs(60)));
    }
}
