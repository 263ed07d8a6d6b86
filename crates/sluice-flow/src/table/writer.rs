//! The writer's state outside the classifier copies ([`WriterState`]): the quotas
//! ([`TableConfig`]), the record of each handle (for delete by handle, dumps and the replay),
//! the mask registry, the action-list interner and the handle allocator; and the single-thread
//! steps of a batch (prepare, validate, insert in order, delete).

use super::intern::{ActionLists, FoldMap, Idr, Masks};
use crate::action::ActionList;
use crate::classifier::{Classifier, Op, RuleRecord, StoredRule, GROUP, RULE_BYTES_PER_COPY};
use crate::key::FlowKey;
use crate::rule::{Handle, Rule, RuleError, RuleRef};

/// Quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableConfig {
    /// Most rules the table holds.
    pub max_rules: usize,
    /// Most bytes the table may use, by the estimate of [`FlowTable::bytes_per_rule`](crate::FlowTable::bytes_per_rule).
    pub max_bytes: usize,
    /// Threads [`FlowTable::insert_batch`](crate::FlowTable::insert_batch) may use for a big batch (at least
    /// [`PARALLEL_MIN_BATCH`](crate::PARALLEL_MIN_BATCH) rules, all within the quotas): each takes whole subtables, so the
    /// result (handles, errors, layout) is exactly that of inserting in order. 1 (the default):
    /// the caller's thread only.
    pub insert_threads: usize,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            max_rules: 16 << 20,
            max_bytes: usize::MAX,
            insert_threads: 1,
        }
    }
}

/// Buffers a batch needs, kept between batches so big batches do not fault in fresh pages.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    pub(super) preps: Vec<Prep>,
    /// Parallel inserts: each rule's provisional handle, and each thread's results.
    pub(super) provisional: Vec<u32>,
    pub(super) results: Vec<Vec<Result<(u32, u32), u32>>>,
}

/// What the writer keeps outside the classifier copies.
pub(super) struct WriterState {
    /// Buffers reused between batches.
    pub(super) scratch: Scratch,
    /// The quotas.
    pub(super) config: TableConfig,
    /// The record of each live handle (by handle).
    pub(super) store: Vec<Option<RuleRecord>>,
    /// The handle allocator.
    pub(super) handles: Idr,
    /// The mask registry (mask → subtable id).
    pub(super) masks: Masks,
    /// The action-list interner.
    pub(super) actions: ActionLists,
    /// Rules in the table.
    pub(super) rules: usize,
    /// Batches published.
    pub(super) generation: u64,
}

/// What the first pass over a batch learns of a rule (its key and priority stay in the batch).
#[derive(Debug, Clone, Copy)]
pub(super) struct Prep {
    /// Subtable, or [`INVALID`] for an invalid match.
    pub(super) mask_id: u32,
    /// Interned action list (one reference held), or [`INVALID`].
    pub(super) action: u32,
}

/// An invalid rule's mask id and action list in its [`Prep`].
pub(super) const INVALID: u32 = u32::MAX;

/// Estimated bytes one rule costs: an entry and its share of buckets in each of the two
/// classifier copies, and the writer's record. Shared action lists are not counted; masks that
/// use more than six key words cost about 60 bytes more per copy.
pub(super) const BYTES_PER_RULE: usize =
    2 * RULE_BYTES_PER_COPY + core::mem::size_of::<Option<RuleRecord>>();

impl WriterState {
    /// Undoes [`WriterState::prepare`] of a batch that is not applied: releases its action
    /// lists and the masks it registered, so the standby copy is as it was.
    pub(super) fn abandon(&mut self, cls: &mut Classifier, preps: Vec<Prep>, fresh: &[u32]) {
        let mut undo = Vec::new();
        for p in &preps {
            if p.action != INVALID {
                self.actions.release(p.action, cls, &mut undo);
            }
        }
        self.drop_unused(cls, &mut undo, fresh);
        cls.finish_batch();
        self.scratch.preps = preps;
    }

    /// Grows each subtable once for its share of a batch (`counts`: rules per mask id).
    pub(super) fn reserve(&mut self, cls: &mut Classifier, ops: &mut Vec<Op>, counts: &[usize]) {
        for (id, &additional) in counts.iter().enumerate() {
            if additional > 0 {
                let op = Op::Reserve {
                    id: id as u32,
                    additional,
                };
                cls.apply(&op);
                ops.push(op);
            }
        }
    }

    /// Frees masks registered by [`WriterState::prepare`] that no rule used.
    pub(super) fn drop_unused(&mut self, cls: &mut Classifier, ops: &mut Vec<Op>, fresh: &[u32]) {
        for &id in fresh {
            if self.masks.is_unused(id) && self.masks.release(id) {
                let op = Op::DropSubtable { id };
                cls.apply(&op);
                ops.push(op);
            }
        }
    }

    /// Inserts a prepared batch on this thread, in order, a group at a time: the group's
    /// bucket reads are started together (they miss the cache in big tables), then its rules
    /// are inserted. Each rule's result is appended to `out` (not emptied first).
    #[inline]
    pub(super) fn insert_in_order(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        preps: &[Prep],
        rules: &[Rule],
        out: &mut Vec<Result<Handle, RuleError>>,
    ) {
        out.reserve(rules.len());
        for (k, (p, r)) in preps.iter().zip(rules).enumerate() {
            // The home bucket of the insert GROUP places ahead is asked for as this one goes
            // in (a sliding window: as many bucket reads in flight all along the batch).
            if let (Some(pa), Some(ra)) = (preps.get(k + GROUP), rules.get(k + GROUP)) {
                cls.prefetch_insert(pa.mask_id, &ra.matcher.key);
            }
            let res = self.insert_prepared(cls, ops, p, r);
            if res.is_err() && p.action != INVALID {
                self.actions.release(p.action, cls, ops);
            }
            out.push(res);
        }
    }

    /// Inserts one prepared rule (mask and action list already interned).
    #[inline]
    pub(super) fn insert_prepared(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        p: &Prep,
        rule: &Rule,
    ) -> Result<Handle, RuleError> {
        if p.mask_id == INVALID {
            return Err(RuleError::InvalidMask);
        }
        let key = &rule.matcher.key;
        let prio = rule.priority;
        let full = self.rules >= self.config.max_rules
            || (self.rules + 1).saturating_mul(BYTES_PER_RULE) > self.config.max_bytes;
        if full {
            // A duplicate is reported as such even when the table is full.
            if let Some(existing) = cls.find_exact(p.mask_id, key, prio) {
                return Err(RuleError::Duplicate {
                    existing: Handle(existing),
                });
            }
            if self.rules >= self.config.max_rules {
                return Err(RuleError::TableFull {
                    limit: self.config.max_rules,
                });
            }
            return Err(RuleError::MemoryQuota {
                limit: self.config.max_bytes,
            });
        }
        let h = self.handles.alloc();
        let rule_ = StoredRule {
            prio,
            handle: h,
            action: p.action,
        };
        let (entry, bucket) = match cls.insert(p.mask_id, key, rule_) {
            Ok(e) => e,
            Err(existing) => {
                self.handles.free(h);
                return Err(RuleError::Duplicate {
                    existing: Handle(existing),
                });
            }
        };
        self.record(
            ops,
            h,
            RuleRecord {
                mask_id: p.mask_id,
                priority: prio,
                entry,
                bucket,
                action: p.action,
            },
        );
        Ok(Handle(h))
    }

    /// Records inserted rule `h`.
    #[inline]
    pub(super) fn record(&mut self, ops: &mut Vec<Op>, h: u32, record: RuleRecord) {
        self.masks.incref(record.mask_id);
        let i = h as usize;
        if i == self.store.len() {
            self.store.push(Some(record));
        } else {
            if self.store.len() <= i {
                self.store.resize_with(i + 1, || None);
            }
            if let Some(s) = self.store.get_mut(i) {
                *s = Some(record);
            }
        }
        self.rules += 1;
        Op::push_insert(ops, h);
    }

    /// Whether `n` more rules fit the quotas (so no insert of a batch of `n` can fail for them).
    pub(super) fn fits(&self, n: usize) -> bool {
        let total = self.rules.saturating_add(n);
        total <= self.config.max_rules
            && total.saturating_mul(BYTES_PER_RULE) <= self.config.max_bytes
    }
    /// Reads a batch once, in order: interns masks (creating subtables) and action lists, and
    /// grows each subtable once for its share. Returns the prepared rules and the mask ids this
    /// batch created.
    #[inline]
    pub(super) fn prepare(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        rules: &[Rule],
    ) -> (Vec<Prep>, Vec<u32>, Vec<usize>) {
        let mut fresh = Vec::new();
        // Rules per mask id (ids are small integers).
        let mut counts: Vec<usize> = Vec::new();
        let mut preps = core::mem::take(&mut self.scratch.preps);
        preps.clear();
        preps.reserve(rules.len());
        for r in rules {
            let mut p = Prep {
                mask_id: INVALID,
                action: INVALID,
            };
            if r.matcher.is_valid() {
                let id = match self.masks.find(&r.matcher.mask) {
                    Some(id) => id,
                    None => {
                        let id = self.masks.alloc(r.matcher.mask);
                        let op = Op::NewSubtable {
                            id,
                            mask: Box::new(r.matcher.mask),
                        };
                        cls.apply(&op);
                        ops.push(op);
                        fresh.push(id);
                        id
                    }
                };
                p.mask_id = id;
                p.action = self.actions.intern_ref(&r.actions, cls, ops);
                let i = id as usize;
                if counts.len() <= i {
                    counts.resize(i + 1, 0);
                }
                if let Some(c) = counts.get_mut(i) {
                    *c += 1;
                }
            }
            preps.push(p);
        }
        (preps, fresh, counts)
    }

    /// The first rule of a batch that would fail, and why, as [`WriterState::insert_prepared`]
    /// would find applying the batch in order (duplicates of earlier rules of the batch name
    /// the handle that rule would have had).
    pub(super) fn first_failure(
        &self,
        cls: &Classifier,
        preps: &[Prep],
        rules: &[Rule],
    ) -> Option<(usize, RuleError)> {
        let mut seen: FoldMap<(u32, FlowKey, u32), u32> = FoldMap::default();
        for (i, (p, r)) in preps.iter().zip(rules).enumerate() {
            if p.mask_id == INVALID {
                return Some((i, RuleError::InvalidMask));
            }
            let k = (p.mask_id, r.matcher.key, r.priority);
            let dup = cls
                .find_exact(p.mask_id, &r.matcher.key, r.priority)
                .or_else(|| seen.get(&k).copied());
            if let Some(existing) = dup {
                return Some((
                    i,
                    RuleError::Duplicate {
                        existing: Handle(existing),
                    },
                ));
            }
            // Every earlier rule of the batch would have been inserted.
            let rules_now = self.rules + i;
            if rules_now >= self.config.max_rules {
                return Some((
                    i,
                    RuleError::TableFull {
                        limit: self.config.max_rules,
                    },
                ));
            }
            if (rules_now + 1).saturating_mul(BYTES_PER_RULE) > self.config.max_bytes {
                return Some((
                    i,
                    RuleError::MemoryQuota {
                        limit: self.config.max_bytes,
                    },
                ));
            }
            seen.insert(k, self.handles.nth_next(i));
        }
        None
    }

    pub(super) fn resolve(&self, cls: &Classifier, t: &RuleRef) -> Result<u32, RuleError> {
        match t {
            RuleRef::Handle(h) => match self.store.get(h.0 as usize) {
                Some(Some(_)) => Ok(h.0),
                _ => Err(RuleError::UnknownHandle(*h)),
            },
            RuleRef::Exact { matcher, priority } => {
                let id = self
                    .masks
                    .by_mask
                    .get(&matcher.mask)
                    .ok_or(RuleError::NotFound)?;
                cls.find_exact(*id, &matcher.key, *priority)
                    .ok_or(RuleError::NotFound)
            }
        }
    }

    /// Gives rule `h` (known to exist) the action list `actions`.
    pub(super) fn modify_one(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        h: u32,
        actions: ActionList,
    ) {
        let action = self.actions.intern(actions, cls, ops);
        let found = self.store.get_mut(h as usize).and_then(|s| s.as_mut());
        let Some(s) = found else {
            self.actions.release(action, cls, ops);
            return;
        };
        let old = core::mem::replace(&mut s.action, action);
        let op = Op::SetActions {
            id: s.mask_id,
            entry: s.entry,
            prio: s.priority,
            handle: h,
            action,
        };
        cls.apply(&op);
        ops.push(op);
        self.actions.release(old, cls, ops);
    }

    /// Asks for what deleting rule `h` (a handle in use) reads, `ahead` deletions before it
    /// ([`Classifier::prefetch_removal`]).
    #[inline]
    pub(super) fn prefetch_delete(&self, cls: &Classifier, h: u32, ahead: usize) {
        if let Some(Some(s)) = self.store.get(h as usize) {
            cls.prefetch_removal(s.mask_id, s.entry, ahead);
        }
    }

    /// Deletes a rule known to exist.
    pub(super) fn delete_one(&mut self, cls: &mut Classifier, ops: &mut Vec<Op>, h: Handle) {
        let Some(s) = self.store.get_mut(h.0 as usize).and_then(|s| s.take()) else {
            return;
        };
        let op = Op::Remove {
            id: s.mask_id,
            entry: s.entry,
            prio: s.priority,
            handle: h.0,
        };
        cls.apply(&op);
        ops.push(op);
        self.actions.release(s.action, cls, ops);
        if self.masks.decref(s.mask_id) {
            let op = Op::DropSubtable { id: s.mask_id };
            cls.apply(&op);
            ops.push(op);
        }
        self.handles.free(h.0);
        self.rules -= 1;
    }
}
