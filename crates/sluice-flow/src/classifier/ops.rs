//! The operations that change a classifier copy ([`Op`]), the writer's record of a rule
//! ([`RuleRecord`]), and applying them: the writer applies each operation to the standby copy
//! as it goes and logs it; [`super::replay`] applies the log to the other copy later.

use super::bucket_table::{StoredRule, JOINED};
use super::copy::Classifier;
use super::subtable::Subtable;
use crate::action::ActionList;
use crate::key::Mask;

/// One change to a classifier copy.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Creates the subtable for a new mask id.
    NewSubtable { id: u32, mask: Box<Mask> },
    /// Removes an (empty) subtable.
    DropSubtable { id: u32 },
    /// Capacity hint for a subtable.
    Reserve { id: u32, additional: usize },
    /// Adds the rules the writer's records for handles `first .. first + count` describe (replay
    /// only: the first copy gets the rules through [`Classifier::insert`], and the records are
    /// unchanged until the replay). Consecutive handles share one operation.
    InsertRecorded { first: u32, count: u32 },
    /// Removes a rule. The rule is found by its entry's index (the same in both copies), not
    /// by its key: no key to copy into the log, pack or compare.
    Remove {
        id: u32,
        entry: u32,
        prio: u32,
        handle: u32,
    },
    /// Replaces a rule's action list. The rule is found by its entry's index (the same in
    /// both copies), not by its key: no hashing and no probing, once per copy.
    SetActions {
        id: u32,
        entry: u32,
        prio: u32,
        handle: u32,
        action: u32,
    },
    /// Defines (or, with `None`, forgets) action list `id`.
    ActionList { id: u32, list: Option<ActionList> },
    /// Marks the end of a batch with its sequence number.
    Generation(u64),
    /// Sets the threads a replayed insert run may use.
    InsertThreads(usize),
}

impl Op {
    /// Appends "insert recorded rule `handle`" to a log, extending the last run when it can.
    pub(crate) fn push_insert(ops: &mut Vec<Op>, handle: u32) {
        if let Some(Op::InsertRecorded { first, count }) = ops.last_mut() {
            if first.wrapping_add(*count) == handle && *count < u32::MAX {
                *count += 1;
                return;
            }
        }
        ops.push(Op::InsertRecorded {
            first: handle,
            count: 1,
        });
    }
}

/// What the writer remembers of a rule, by handle; also what an insert is replayed from.
#[derive(Debug, Clone)]
pub(crate) struct RuleRecord {
    pub(crate) mask_id: u32,
    pub(crate) priority: u32,
    pub(crate) action: u32,
    /// The index of the rule's entry in its subtable (the same in both copies): the key is
    /// read from there, so a record is 16 bytes, not a copy of the key.
    pub(crate) entry: u32,
    /// The bucket position the insert took in the copy it was first applied to ([`JOINED`]
    /// when it joined an existing entry): the replay writes the same bucket without probing.
    pub(crate) bucket: u32,
}

/// Replays one recorded insert (rule `handle`, record `r`) on subtable `st`, whose twin in the
/// copy the insert was first applied to is `src`; true if the rule was added.
#[inline]
pub(super) fn replay_one(st: &mut Subtable, src: &Subtable, handle: u32, r: &RuleRecord) -> bool {
    let rule = StoredRule {
        prio: r.priority,
        handle,
        action: r.action,
    };
    let placed = r.bucket != JOINED && st.place_from(src, r.entry, r.bucket, rule);
    // The copies share one layout, so a fresh insert always replays in place.
    debug_assert!(placed || r.bucket == JOINED, "copies' layouts differ");
    placed || st.insert_from(src, r.entry, rule).is_ok()
}

impl Classifier {
    /// Replays the insert of rule `handle` (record `r`), taking its key from `from`, the copy
    /// it was first applied to.
    #[inline]
    pub(super) fn insert_record(&mut self, from: &Classifier, handle: u32, r: &RuleRecord) {
        let (Some(Some(st)), Some(Some(src))) = (
            self.subtables.get_mut(r.mask_id as usize),
            from.subtables.get(r.mask_id as usize),
        ) else {
            return;
        };
        let before = st.max_prio();
        let was_empty = st.rules() == 0;
        if replay_one(st, src, handle, r) {
            self.rules += 1;
            if was_empty || st.max_prio() != before {
                self.dirty = true;
            }
        }
    }

    /// Applies one operation (inserts of recorded rules need the records: see
    /// [`super::replay`]).
    pub(crate) fn apply(&mut self, op: &Op) {
        match op {
            Op::NewSubtable { id, mask } => self.new_subtable(*id, mask),
            Op::DropSubtable { id } => {
                if let Some(s) = self.subtables.get_mut(*id as usize) {
                    *s = None;
                }
                self.dirty = true;
            }
            Op::Reserve { id, additional } => {
                if let Some(Some(st)) = self.subtables.get_mut(*id as usize) {
                    st.reserve(*additional);
                }
            }
            // Needs the writer's records: see `Absorb::absorb`.
            Op::InsertRecorded { .. } => {}
            Op::Remove {
                id,
                entry,
                prio,
                handle,
            } => self.remove(*id, *entry, *prio, *handle),
            Op::SetActions {
                id,
                entry,
                prio,
                handle,
                action,
            } => {
                if let Some(Some(st)) = self.subtables.get_mut(*id as usize) {
                    st.set_actions(*entry, *prio, *handle, *action);
                }
            }
            Op::ActionList { id, list } => self.define_actions(*id, list),
            Op::Generation(g) => self.generation = *g,
            Op::InsertThreads(n) => self.insert_threads = *n,
        }
    }

    /// Creates subtable `id` for `mask`.
    fn new_subtable(&mut self, id: u32, mask: &Mask) {
        let i = id as usize;
        if self.subtables.len() <= i {
            self.subtables.resize_with(i + 1, || None);
        }
        if let Some(s) = self.subtables.get_mut(i) {
            *s = Some(Subtable::new(*mask));
        }
        self.dirty = true;
    }

    /// Removes the rule of priority `prio` and handle `handle` in entry `entry` from subtable
    /// `id`.
    fn remove(&mut self, id: u32, entry: u32, prio: u32, handle: u32) {
        if let Some(Some(st)) = self.subtables.get_mut(id as usize) {
            let before = st.max_prio();
            let removed = st.remove_entry(entry, prio, handle);
            // The writer removes only rules it has a record of, at the entry the record names,
            // and both copies share one layout: a miss here means the copies drifted apart.
            debug_assert!(
                removed,
                "no rule {handle} in entry {entry} of subtable {id}"
            );
            if removed {
                self.rules -= 1;
                if st.max_prio() != before {
                    self.dirty = true;
                }
            }
        }
    }

    /// Defines (or, with `None`, forgets) action list `id`.
    fn define_actions(&mut self, id: u32, list: &Option<ActionList>) {
        let i = id as usize;
        if self.actions.len() <= i {
            self.actions.resize(i + 1, None);
        }
        if let Some(a) = self.actions.get_mut(i) {
            a.clone_from(list);
        }
    }

    /// Ends a batch: re-sorts the subtables if the batch changed their maxima, and rebuilds the
    /// filters (one per subtable: O(subtables), whatever the number of rules).
    pub(crate) fn finish_batch(&mut self) {
        if self.dirty {
            self.dirty = false;
            self.sort_subtables();
        }
        let subs = &self.subtables;
        self.filters.clear();
        self.filters.extend(self.order.iter().filter_map(|&id| {
            subs.get(id as usize)
                .and_then(|s| s.as_ref())
                .map(|s| s.filter(id))
        }));
    }

    /// Puts the subtables in lookup order: best highest priority first, then by id.
    fn sort_subtables(&mut self) {
        let subs = &self.subtables;
        let mut order: Vec<u32> = subs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|_| i as u32))
            .collect();
        let max = |id: u32| {
            subs.get(id as usize)
                .and_then(|s| s.as_ref())
                .map_or(0, |s| s.max_prio())
        };
        order.sort_by(|a, b| max(*b).cmp(&max(*a)).then(a.cmp(b)));
        self.order = order;
    }
}
