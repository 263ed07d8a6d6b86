//! Lookups from any thread: a [`Reader`] per thread, a [`Snapshot`] per burst.

use crate::action::ActionList;
use crate::classifier::{Classifier, ExactCache, HitRef};
use crate::key::FlowKey;
use crate::publish::{Guard, ReadHandle};
use crate::rule::Handle;

/// A reader: clone one per thread; lookups never lock.
#[derive(Clone)]
pub struct Reader {
    pub(super) h: ReadHandle<Classifier>,
}

impl Reader {
    /// The current snapshot. Hold it for a burst of lookups, not longer: the writer's next batch
    /// waits until it is dropped.
    #[inline]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot { g: self.h.load() }
    }

    /// One lookup in the current snapshot; returns (handle, priority, actions).
    pub fn lookup(&self, key: &FlowKey) -> Option<(Handle, u32, ActionList)> {
        let s = self.snapshot();
        s.lookup(key)
            .map(|h| (h.handle, h.priority, h.actions.clone()))
    }
}

/// A consistent view of the table: every batch published before it was taken, none after.
pub struct Snapshot {
    g: Guard<Classifier>,
}

impl Snapshot {
    /// Highest-priority matching rule; equal priorities go to the lowest handle.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<HitRef<'_>> {
        self.g.lookup(key)
    }

    /// Like [`Snapshot::lookup`], through a per-thread exact-match cache.
    #[inline]
    pub fn lookup_cached(&self, cache: &mut ExactCache, key: &FlowKey) -> Option<HitRef<'_>> {
        self.g.lookup_cached(cache, key)
    }

    /// Like [`Snapshot::lookup_batch`], through a per-thread exact-match cache (the datapath's
    /// burst path: see [`ExactCache`]).
    pub fn lookup_batch_cached<'a>(
        &'a self,
        cache: &mut ExactCache,
        keys: &[FlowKey],
        out: &mut Vec<Option<HitRef<'a>>>,
    ) {
        self.g.lookup_batch_cached(cache, keys, out);
    }

    /// [`Snapshot::lookup_batch_cached`] into a slice: `out[i]` gets key `i`'s winner, for `i`
    /// below both lengths (no vector to keep: the datapath's bursts).
    #[inline]
    pub fn lookup_burst_cached<'a>(
        &'a self,
        cache: &mut ExactCache,
        keys: &[FlowKey],
        out: &mut [Option<HitRef<'a>>],
    ) {
        self.g.lookup_burst_cached(cache, keys, out);
    }

    /// Looks up a burst of keys: `out[i]` gets key `i`'s winner.
    pub fn lookup_batch<'a>(&'a self, keys: &[FlowKey], out: &mut Vec<Option<HitRef<'a>>>) {
        self.g.lookup_batch(keys, out);
    }

    /// [`Snapshot::lookup_batch`] as a processor without AVX2 runs it: the same answers (for
    /// tests and comparisons; see [`Classifier::lookup_batch_portable`]).
    pub fn lookup_batch_portable<'a>(
        &'a self,
        keys: &[FlowKey],
        out: &mut Vec<Option<HitRef<'a>>>,
    ) {
        self.g.lookup_batch_portable(keys, out);
    }

    /// Number of rules in this snapshot.
    pub fn len(&self) -> usize {
        self.g.len()
    }

    /// Whether the snapshot has no rule.
    pub fn is_empty(&self) -> bool {
        self.g.is_empty()
    }

    /// Number of subtables (masks).
    pub fn subtables(&self) -> usize {
        self.g.subtables()
    }

    /// The number of batches published before this snapshot.
    pub fn generation(&self) -> u64 {
        self.g.generation()
    }
}
