//! One copy of the classifier ([`Classifier`]): its subtables, their lookup order and filters,
//! the action lists by id, and the single-rule changes the writer makes to the standby copy.
//! Lookups are in [`super::lookup`], operations and their replay in [`super::ops`] and
//! [`super::replay`], the threaded inserts in [`super::parallel`].

use super::bucket_table::StoredRule;
use super::subtable::{Filter, Subtable};
use crate::action::ActionList;
use crate::key::FlowKey;

/// Inserts between the one that asks for a bucket ([`Classifier::prefetch_insert`]) and the
/// one that writes it; also the group of inserts on an insert thread whose bucket reads are
/// started together ([`super::parallel`]).
pub(crate) const GROUP: usize = 16;

/// Removals ahead of the current one whose entry keys a run of removals asks into cache (see
/// [`Classifier::prefetch_removal`]).
pub(crate) const KEY_AHEAD: usize = 16;
/// Removals ahead of the current one whose home buckets it asks into cache.
pub(crate) const BUCKET_AHEAD: usize = 8;

/// One copy of the whole classifier.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    pub(super) subtables: Vec<Option<Subtable>>,
    /// One filter per subtable, in `order`.
    pub(super) filters: Vec<Filter>,
    /// Action lists by id: rules store a `u32`, so inserting one touches no reference count.
    pub(super) actions: Vec<Option<ActionList>>,
    /// Mask ids, best `max_prio` first (then by id).
    pub(super) order: Vec<u32>,
    pub(super) rules: usize,
    pub(super) generation: u64,
    pub(super) dirty: bool,
    /// Threads a big replayed insert run may use (`TableConfig::insert_threads`; 0 and 1: one).
    pub(super) insert_threads: usize,
}

impl Classifier {
    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.rules == 0
    }

    /// Number of subtables (distinct masks).
    pub fn subtables(&self) -> usize {
        self.order.len()
    }

    /// The sequence number of the last batch applied to this copy.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The rule with exactly this masked key and priority in subtable `id`.
    pub(crate) fn find_exact(&self, id: u32, key: &FlowKey, prio: u32) -> Option<u32> {
        let st = self.subtables.get(id as usize)?.as_ref()?;
        st.find_exact(key, prio)
    }

    /// [`Classifier::find_exact`] of many (subtable id, masked key, priority) targets, the
    /// results appended to `out` in order: in groups whose buckets, then entries, are asked
    /// into cache before any is read, so a batch over tables larger than the cache waits for
    /// memory once per group rather than once per target.
    pub(crate) fn find_exact_burst(
        &self,
        targets: &[(u32, &FlowKey, u32)],
        out: &mut Vec<Option<u32>>,
    ) {
        const GROUP: usize = 16;
        let st = |id: u32| self.subtables.get(id as usize).and_then(Option::as_ref);
        for group in targets.chunks(GROUP) {
            let mut hashes = [0u64; GROUP];
            for (h, &(id, key, _)) in hashes.iter_mut().zip(group) {
                if let Some(s) = st(id) {
                    *h = s.find_prefetch_home(key);
                }
            }
            for (&h, &(id, _, _)) in hashes.iter().zip(group) {
                if let Some(s) = st(id) {
                    s.find_prefetch_entry(h);
                }
            }
            out.extend(
                group
                    .iter()
                    .map(|&(id, key, prio)| st(id).and_then(|s| s.find_exact(key, prio))),
            );
        }
    }

    /// Inserts a rule into subtable `id`, unless one with the same key and priority exists (the
    /// error is its handle). Returns the index of the rule's entry (for the writer's record).
    #[inline]
    pub(crate) fn insert(
        &mut self,
        id: u32,
        key: &FlowKey,
        rule: StoredRule,
    ) -> Result<(u32, u32), u32> {
        let Some(Some(st)) = self.subtables.get_mut(id as usize) else {
            return Err(u32::MAX);
        };
        let before = st.max_prio();
        let was_empty = st.rules() == 0;
        let placed = st.insert(key, rule)?;
        self.rules += 1;
        if was_empty || st.max_prio() != before {
            self.dirty = true;
        }
        Ok(placed)
    }

    /// The threads a replayed insert run may use.
    pub(crate) fn insert_threads(&self) -> usize {
        self.insert_threads
    }

    /// Gives rule `old` (priority `prio`) at entry `entry` of subtable `id` handle `new` (see
    /// [`Classifier::insert_parallel`]); false if there is no such rule.
    pub(crate) fn rehandle(&mut self, id: u32, entry: u32, prio: u32, old: u32, new: u32) -> bool {
        match self.subtables.get_mut(id as usize) {
            Some(Some(st)) => st.rehandle(entry, prio, old, new),
            _ => false,
        }
    }

    /// Asks into cache the bucket an insert of `key` into subtable `id` will start at, some
    /// inserts ahead of it ([`GROUP`]).
    #[inline]
    pub(crate) fn prefetch_insert(&self, id: u32, key: &FlowKey) {
        if let Some(Some(st)) = self.subtables.get(id as usize) {
            st.prefetch_insert(key);
        }
    }

    /// The key of entry `entry` of subtable `id` (as a record names it).
    pub(crate) fn entry_key(&self, id: u32, entry: u32) -> Option<FlowKey> {
        self.subtables.get(id as usize)?.as_ref()?.entry_key(entry)
    }

    /// Asks for what removing entry `entry` of subtable `id` reads, `ahead` removals before
    /// it: at [`KEY_AHEAD`] the entry's key, at [`BUCKET_AHEAD`] the home bucket it hashes to
    /// (a hint only: nothing changes, whatever comes between).
    #[inline(always)]
    pub(crate) fn prefetch_removal(&self, id: u32, entry: u32, ahead: usize) {
        if let Some(Some(st)) = self.subtables.get(id as usize) {
            if ahead == KEY_AHEAD {
                st.prefetch_key(entry);
            } else {
                st.prefetch_bucket(entry);
            }
        }
    }

    /// Bytes of heap the hash tables hold (capacity of buckets and entries).
    pub fn table_bytes(&self) -> usize {
        self.subtables.iter().flatten().map(Subtable::bytes).sum()
    }
}
