//! The flow table: the single writer ([`FlowTable`]) and its lock-free readers ([`Reader`]).
//!
//! Every batch operation (`insert_batch`, `delete_batch`, `modify_batch`) is applied to the
//! standby classifier copy and published with one pointer swap (see [`crate::publish`]): a reader
//! sees all of a batch or none of it. Single-rule calls are batches of one.
//!
//! The writer also keeps, outside the copies, what only it needs: the rule of each handle (for
//! delete by handle and for dumps), the mask registry (mask → subtable id, reference counted),
//! the handle allocator and the action-list interner.

use hashbrown::{HashMap, HashSet};

use crate::action::Actions;
use crate::classifier::{Classifier, ExactCache, HitRef, Op, RuleRecord, Slot};
use crate::key::{FlowKey, Mask};
use crate::publish::{Guard, ReadHandle, Writer};
use crate::rule::{BatchMode, Handle, Match, Rule, RuleError, RuleRef};

/// Quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableConfig {
    /// Most rules the table holds.
    pub max_rules: usize,
    /// Most bytes the table may use, by the estimate of [`FlowTable::bytes_per_rule`].
    pub max_bytes: usize,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            max_rules: 16 << 20,
            max_bytes: usize::MAX,
        }
    }
}

/// An IDR-like handle allocator: small integers, the most recently freed reused first (LIFO),
/// O(1) both ways.
#[derive(Debug, Clone, Default)]
pub struct Idr {
    free: Vec<u32>,
    next: u32,
}

impl Idr {
    /// Allocates a handle: the most recently freed one, else the next unused integer.
    pub fn alloc(&mut self) -> u32 {
        match self.free.pop() {
            Some(h) => h,
            None => {
                let h = self.next;
                self.next += 1;
                h
            }
        }
    }

    /// Returns a handle for reuse.
    pub fn free(&mut self, h: u32) {
        self.free.push(h);
    }

    /// One past the largest handle ever allocated.
    pub fn high_water(&self) -> u32 {
        self.next
    }
}

#[derive(Debug, Default)]
struct Masks {
    by_mask: HashMap<Mask, u32>,
    /// (mask, rules using it) by id; `None` when free.
    slots: Vec<Option<(Mask, usize)>>,
    idr: Idr,
    last: Option<(Mask, u32)>,
}

impl Masks {
    fn find(&mut self, mask: &Mask) -> Option<u32> {
        if let Some((m, id)) = &self.last {
            if m == mask {
                return Some(*id);
            }
        }
        let id = *self.by_mask.get(mask)?;
        self.last = Some((*mask, id));
        Some(id)
    }

    fn alloc(&mut self, mask: Mask) -> u32 {
        let id = self.idr.alloc();
        let i = id as usize;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, None);
        }
        if let Some(s) = self.slots.get_mut(i) {
            *s = Some((mask, 0));
        }
        self.by_mask.insert(mask, id);
        id
    }

    fn mask(&self, id: u32) -> Option<&Mask> {
        self.slots
            .get(id as usize)
            .and_then(|s| s.as_ref())
            .map(|(m, _)| m)
    }

    fn incref(&mut self, id: u32) {
        if let Some(Some((_, n))) = self.slots.get_mut(id as usize) {
            *n += 1;
        }
    }

    fn is_unused(&self, id: u32) -> bool {
        matches!(self.slots.get(id as usize), Some(Some((_, 0))))
    }

    /// Frees an unused mask; returns whether it was freed.
    fn release(&mut self, id: u32) -> bool {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return false;
        };
        let Some((mask, 0)) = slot else { return false };
        let mask = *mask;
        *slot = None;
        self.by_mask.remove(&mask);
        if matches!(self.last, Some((_, l)) if l == id) {
            self.last = None;
        }
        self.idr.free(id);
        true
    }

    /// Drops one reference; returns true when the mask is now unused (and freed).
    fn decref(&mut self, id: u32) -> bool {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return false;
        };
        let Some((mask, n)) = slot else { return false };
        *n -= 1;
        if *n > 0 {
            return false;
        }
        let mask = *mask;
        *slot = None;
        self.by_mask.remove(&mask);
        if matches!(self.last, Some((_, l)) if l == id) {
            self.last = None;
        }
        self.idr.free(id);
        true
    }
}

/// Interned action lists, reference counted by the writer with plain integers.
#[derive(Debug, Default)]
struct ActionLists {
    by_list: HashMap<Actions, u32>,
    /// (list, rules using it) by id.
    slots: Vec<Option<(Actions, usize)>>,
    idr: Idr,
    /// The last list interned (consecutive rules often share one).
    last: Option<u32>,
}

impl ActionLists {
    fn list(&self, id: u32) -> Option<&Actions> {
        self.slots.get(id as usize)?.as_ref().map(|(a, _)| a)
    }

    /// The id of `a` (defining it in `cls` if new), with one more reference.
    fn intern_ref(&mut self, a: &Actions, cls: &mut Classifier, ops: &mut Vec<Op>) -> u32 {
        let last = self
            .last
            .filter(|l| self.list(*l).is_some_and(|x| x.ptr_eq(a) || x == a));
        let id = match last {
            Some(id) => id,
            None => match self.by_list.get(a) {
                Some(id) => *id,
                None => {
                    let id = self.idr.alloc();
                    let i = id as usize;
                    if self.slots.len() <= i {
                        self.slots.resize(i + 1, None);
                    }
                    if let Some(s) = self.slots.get_mut(i) {
                        *s = Some((a.clone(), 0));
                    }
                    self.by_list.insert(a.clone(), id);
                    let op = Op::ActionList {
                        id,
                        list: Some(a.clone()),
                    };
                    cls.apply(&op);
                    ops.push(op);
                    id
                }
            },
        };
        self.last = Some(id);
        if let Some(Some((_, n))) = self.slots.get_mut(id as usize) {
            *n += 1;
        }
        id
    }

    fn intern(&mut self, a: Actions, cls: &mut Classifier, ops: &mut Vec<Op>) -> u32 {
        self.intern_ref(&a, cls, ops)
    }

    /// Drops one reference; forgets the list when unused.
    fn release(&mut self, id: u32, cls: &mut Classifier, ops: &mut Vec<Op>) {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return;
        };
        let Some((list, n)) = slot else { return };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.by_list.remove(&*list);
        *slot = None;
        if self.last == Some(id) {
            self.last = None;
        }
        self.idr.free(id);
        let op = Op::ActionList { id, list: None };
        cls.apply(&op);
        ops.push(op);
    }
}

/// The writer side of a flow table. Not `Clone`; one per table.
pub struct FlowTable {
    lr: Writer<Classifier, Op>,
    w: WriterState,
}

/// Buffers a batch needs, kept between batches so big batches do not fault in fresh pages.
#[derive(Debug, Default)]
struct Scratch {
    preps: Vec<Prep>,
    sorted: Vec<Prep>,
    bins: Vec<u32>,
    starts: Vec<u32>,
    order: Vec<u32>,
}

impl Scratch {
    /// Keeps a used prepared-rule buffer (whichever one the batch ended with).
    fn give_back(&mut self, mut v: Vec<Prep>) {
        v.clear();
        if self.preps.capacity() < v.capacity() {
            self.preps = v;
        } else if self.sorted.capacity() < v.capacity() {
            self.sorted = v;
        }
    }
}

struct WriterState {
    scratch: Scratch,
    config: TableConfig,
    store: Vec<Option<RuleRecord>>,
    handles: Idr,
    masks: Masks,
    actions: ActionLists,
    rules: usize,
    generation: u64,
}

/// A rule read once at the start of its batch.
#[derive(Debug, Clone)]
struct Prep {
    /// Index in the batch.
    idx: u32,
    /// Subtable, or [`INVALID`] for an invalid match.
    mask_id: u32,
    /// Interned action list (one reference held), or [`INVALID`].
    action: u32,
    prio: u32,
    key: FlowKey,
}

const INVALID: u32 = u32::MAX;

/// Batches at least this big are applied in hash-table order.
const LOCALITY_MIN: usize = 4096;

/// Estimated bytes one rule costs: two classifier entries (at hashbrown's 7/8 load factor, plus
/// a control byte each) and the writer's record. Shared action lists are not counted; masks that
/// use more than six key words cost about 60 bytes more per copy.
const BYTES_PER_RULE: usize =
    2 * (crate::classifier::ENTRY_BYTES * 8 / 7 + 1) + core::mem::size_of::<Option<RuleRecord>>();

impl FlowTable {
    /// An empty table.
    pub fn new(config: TableConfig) -> Self {
        FlowTable {
            lr: Writer::new(Classifier::default()),
            w: WriterState {
                scratch: Scratch::default(),
                config,
                store: Vec::new(),
                handles: Idr::default(),
                masks: Masks::default(),
                actions: ActionLists::default(),
                rules: 0,
                generation: 0,
            },
        }
    }

    /// A reader for lookups from any thread.
    pub fn reader(&self) -> Reader {
        Reader {
            h: self.lr.reader(),
        }
    }

    /// The quotas.
    pub fn config(&self) -> TableConfig {
        self.w.config
    }

    /// Changes the quotas (existing rules stay, even above a lowered quota).
    pub fn set_config(&mut self, config: TableConfig) {
        self.w.config = config;
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.w.rules
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.w.rules == 0
    }

    /// Number of distinct masks.
    pub fn masks(&self) -> usize {
        self.w.masks.by_mask.len()
    }

    /// Number of batches published.
    pub fn generation(&self) -> u64 {
        self.w.generation
    }

    /// The memory estimate per rule used by the quota.
    pub const fn bytes_per_rule() -> usize {
        BYTES_PER_RULE
    }

    /// Estimated bytes in use (rules × [`FlowTable::bytes_per_rule`]).
    pub fn bytes_estimate(&self) -> usize {
        self.w.rules * BYTES_PER_RULE
    }

    /// The rule with this handle.
    pub fn rule(&self, h: Handle) -> Option<Rule> {
        let s = self.w.store.get(h.0 as usize)?.as_ref()?;
        let mask = *self.w.masks.mask(s.mask_id)?;
        Some(Rule {
            matcher: Match {
                key: s.key.unpack(&mask),
                mask,
            },
            priority: s.priority,
            actions: self.w.actions.list(s.action)?.clone(),
        })
    }

    /// Every rule, by handle order.
    pub fn rules(&self) -> impl Iterator<Item = (Handle, Rule)> + '_ {
        (0..self.w.store.len() as u32).filter_map(|h| self.rule(Handle(h)).map(|r| (Handle(h), r)))
    }

    /// The handle of the rule with exactly this match and priority.
    pub fn find(&self, matcher: &Match, priority: u32) -> Option<Handle> {
        let id = *self.w.masks.by_mask.get(&matcher.mask)?;
        self.lr
            .published()
            .find_exact(id, &matcher.key, priority)
            .map(Handle)
    }

    /// Inserts one rule (a batch of one).
    pub fn insert(&mut self, rule: Rule) -> Result<Handle, RuleError> {
        self.insert_batch(vec![rule], BatchMode::BestEffort)
            .pop()
            .unwrap_or(Err(RuleError::Aborted))
    }

    /// Deletes one rule by handle (a batch of one).
    pub fn delete(&mut self, h: Handle) -> Result<(), RuleError> {
        self.delete_batch(vec![RuleRef::Handle(h)], BatchMode::BestEffort)
            .pop()
            .unwrap_or(Err(RuleError::Aborted))
    }

    /// Inserts rules and publishes them at once. Result `i` is rule `i`'s handle or error.
    pub fn insert_batch(
        &mut self,
        rules: Vec<Rule>,
        mode: BatchMode,
    ) -> Vec<Result<Handle, RuleError>> {
        let n = rules.len();
        let mut ops = self.lr.take_log_buffer();
        let cls = self.lr.standby_mut(&self.w.store);
        ops.reserve(n + 2);
        let w = &mut self.w;
        let (preps, fresh) = w.prepare(cls, &mut ops, &rules);
        drop(rules);
        // Without quota pressure the outcome does not depend on the order rules are applied in
        // (duplicates are still decided in batch order: the sort is stable), so big batches go
        // in hash-table order: consecutive inserts touch neighbouring buckets, not random ones.
        let quota_free = w.rules.saturating_add(n) <= w.config.max_rules
            && w.rules.saturating_add(n).saturating_mul(BYTES_PER_RULE) <= w.config.max_bytes;
        let mut sorted = core::mem::take(&mut w.scratch.sorted);
        let preps = if quota_free && n >= LOCALITY_MIN {
            WriterState::locality_order(cls, &preps, &mut w.scratch, &mut sorted);
            w.scratch.preps = preps;
            sorted
        } else {
            w.scratch.sorted = sorted;
            preps
        };
        let mut out: Vec<Result<Handle, RuleError>> = vec![Err(RuleError::Aborted); n];
        let mut failed = false;
        let mut done = 0;
        for p in &preps {
            let r = w.insert_prepared(cls, &mut ops, p);
            done += 1;
            if r.is_err() {
                failed = true;
                w.actions.release(p.action, cls, &mut ops);
            }
            if let Some(o) = out.get_mut(p.idx as usize) {
                *o = r;
            }
            if failed && mode == BatchMode::AllOrNothing {
                break;
            }
        }
        if failed && mode == BatchMode::AllOrNothing {
            // Undo on the standby copy; nothing is published.
            let mut undo = Vec::new();
            for p in preps.get(..done).unwrap_or(&[]).iter().rev() {
                if let Some(Ok(h)) = out.get(p.idx as usize) {
                    w.delete_one(cls, &mut undo, *h);
                }
            }
            for p in preps.get(done..).unwrap_or(&[]) {
                w.actions.release(p.action, cls, &mut undo);
            }
            w.drop_unused(cls, &mut undo, &fresh);
            cls.finish_batch();
            w.scratch.give_back(preps);
            return out
                .into_iter()
                .map(|r| match r {
                    Ok(_) => Err(RuleError::Aborted),
                    e => e,
                })
                .collect();
        }
        w.drop_unused(cls, &mut ops, &fresh);
        w.scratch.give_back(preps);
        self.finish(ops);
        out
    }

    /// Deletes rules and publishes the result at once.
    pub fn delete_batch(
        &mut self,
        targets: Vec<RuleRef>,
        mode: BatchMode,
    ) -> Vec<Result<(), RuleError>> {
        let cls = self.lr.standby_mut(&self.w.store);
        let w = &mut self.w;
        // Resolve every target first, so an all-or-nothing batch fails before changing anything.
        let mut seen = HashSet::new();
        let resolved: Vec<Result<u32, RuleError>> = targets
            .iter()
            .map(|t| {
                let h = w.resolve(cls, t)?;
                if seen.insert(h) {
                    Ok(h)
                } else {
                    // Already deleted earlier in this batch: what a sequential delete would say.
                    Err(match t {
                        RuleRef::Handle(_) => RuleError::UnknownHandle(Handle(h)),
                        RuleRef::Exact { .. } => RuleError::NotFound,
                    })
                }
            })
            .collect();
        if mode == BatchMode::AllOrNothing && resolved.iter().any(|r| r.is_err()) {
            return resolved
                .into_iter()
                .map(|r| r.and(Err(RuleError::Aborted)))
                .collect();
        }
        let mut ops = Vec::with_capacity(resolved.len() + 1);
        let out = resolved
            .into_iter()
            .map(|r| r.map(|h| w.delete_one(cls, &mut ops, Handle(h))))
            .collect();
        self.finish(ops);
        out
    }

    /// Replaces the actions of rules (match and priority stay) and publishes at once.
    pub fn modify_batch(
        &mut self,
        changes: Vec<(RuleRef, Actions)>,
        mode: BatchMode,
    ) -> Vec<Result<Handle, RuleError>> {
        let cls = self.lr.standby_mut(&self.w.store);
        let w = &mut self.w;
        let resolved: Vec<Result<u32, RuleError>> =
            changes.iter().map(|(t, _)| w.resolve(cls, t)).collect();
        if mode == BatchMode::AllOrNothing && resolved.iter().any(|r| r.is_err()) {
            return resolved
                .into_iter()
                .map(|r| r.and(Err(RuleError::Aborted)))
                .collect();
        }
        let mut ops = Vec::with_capacity(changes.len() + 1);
        let mut out = Vec::with_capacity(changes.len());
        for (r, (_, actions)) in resolved.into_iter().zip(changes) {
            out.push(r.map(|h| {
                let action = w.actions.intern(actions, cls, &mut ops);
                if let Some(Some(s)) = w.store.get_mut(h as usize) {
                    let old = core::mem::replace(&mut s.action, action);
                    let op = Op::SetActions {
                        id: s.mask_id,
                        key: Box::new(cls.unpack_key(s.mask_id, &s.key)),
                        prio: s.priority,
                        handle: h,
                        action,
                    };
                    cls.apply(&op);
                    ops.push(op);
                    w.actions.release(old, cls, &mut ops);
                } else {
                    w.actions.release(action, cls, &mut ops);
                }
                Handle(h)
            }));
        }
        self.finish(ops);
        out
    }

    fn finish(&mut self, mut ops: Vec<Op>) {
        self.w.generation += 1;
        let op = Op::Generation(self.w.generation);
        let cls = self.lr.standby_mut(&self.w.store);
        cls.apply(&op);
        cls.finish_batch();
        ops.push(op);
        self.lr.publish(ops);
    }
}

impl WriterState {
    /// Frees masks registered by [`WriterState::prepare`] that no rule used.
    fn drop_unused(&mut self, cls: &mut Classifier, ops: &mut Vec<Op>, fresh: &[u32]) {
        for &id in fresh {
            if self.masks.is_unused(id) && self.masks.release(id) {
                let op = Op::DropSubtable { id };
                cls.apply(&op);
                ops.push(op);
            }
        }
    }

    /// Inserts one prepared rule (mask and action list already interned).
    fn insert_prepared(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        p: &Prep,
    ) -> Result<Handle, RuleError> {
        if p.mask_id == INVALID {
            return Err(RuleError::InvalidMask);
        }
        let full = self.rules >= self.config.max_rules
            || (self.rules + 1).saturating_mul(BYTES_PER_RULE) > self.config.max_bytes;
        if full {
            // A duplicate is reported as such even when the table is full.
            if let Some(existing) = cls.find_exact(p.mask_id, &p.key, p.prio) {
                return Err(RuleError::Duplicate {
                    existing: Handle(existing),
                });
            }
        }
        if self.rules >= self.config.max_rules {
            return Err(RuleError::TableFull {
                limit: self.config.max_rules,
            });
        }
        if (self.rules + 1).saturating_mul(BYTES_PER_RULE) > self.config.max_bytes {
            return Err(RuleError::MemoryQuota {
                limit: self.config.max_bytes,
            });
        }
        let h = self.handles.alloc();
        let slot = Slot {
            prio: p.prio,
            handle: h,
            action: p.action,
        };
        if let Err(existing) = cls.insert(p.mask_id, &p.key, slot.clone()) {
            self.handles.free(h);
            return Err(RuleError::Duplicate {
                existing: Handle(existing),
            });
        }
        self.masks.incref(p.mask_id);
        let key = cls.pack_key(p.mask_id, &p.key);
        let i = h as usize;
        if self.store.len() <= i {
            self.store.resize_with(i + 1, || None);
        }
        if let Some(s) = self.store.get_mut(i) {
            *s = Some(RuleRecord {
                mask_id: p.mask_id,
                priority: p.prio,
                key,
                action: p.action,
            });
        }
        self.rules += 1;
        ops.push(Op::InsertRecorded { handle: h });
        Ok(Handle(h))
    }

    /// Reads a batch once, in order: interns masks (creating subtables) and action lists, and
    /// grows each subtable once for its share. Returns the prepared rules and the mask ids this
    /// batch created.
    fn prepare(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        rules: &[Rule],
    ) -> (Vec<Prep>, Vec<u32>) {
        let mut fresh = Vec::new();
        let mut counts: HashMap<u32, usize> = HashMap::new();
        let mut preps = core::mem::take(&mut self.scratch.preps);
        preps.clear();
        preps.reserve(rules.len());
        for (i, r) in rules.iter().enumerate() {
            let mut p = Prep {
                idx: i as u32,
                mask_id: INVALID,
                action: INVALID,
                prio: r.priority,
                key: r.matcher.key,
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
                *counts.entry(id).or_insert(0) += 1;
            }
            preps.push(p);
        }
        if rules.len() >= 256 {
            let mut counts: Vec<(u32, usize)> = counts.into_iter().collect();
            counts.sort_unstable();
            for (id, additional) in counts {
                let op = Op::Reserve { id, additional };
                cls.apply(&op);
                ops.push(op);
            }
        }
        (preps, fresh)
    }

    /// Prepared rules in the order of their hash-table buckets (a stable counting sort on each
    /// bucket index's high bits, subtable by subtable; invalid rules first), into `out`.
    fn locality_order(
        cls: &Classifier,
        preps: &[Prep],
        scratch: &mut Scratch,
        out: &mut Vec<Prep>,
    ) {
        const BINS_LOG: u32 = 12;
        let mut base: HashMap<u32, (usize, u32)> = HashMap::new();
        let mut next_base = 1usize;
        let bins = &mut scratch.bins;
        bins.clear();
        for p in preps {
            let bin = match cls.bucket_of(p.mask_id, &p.key) {
                Some((bucket, buckets_log)) if p.mask_id != INVALID => {
                    let (b, shift) = *base.entry(p.mask_id).or_insert_with(|| {
                        let b = next_base;
                        let nb_log = buckets_log.min(BINS_LOG);
                        next_base += 1 << nb_log;
                        (b, buckets_log - nb_log)
                    });
                    b + (bucket >> shift)
                }
                _ => 0,
            };
            bins.push(bin as u32);
        }
        let starts = &mut scratch.starts;
        starts.clear();
        starts.resize(next_base + 1, 0);
        for &b in bins.iter() {
            if let Some(c) = starts.get_mut(b as usize + 1) {
                *c += 1;
            }
        }
        for i in 1..starts.len() {
            let prev = starts.get(i - 1).copied().unwrap_or(0);
            if let Some(c) = starts.get_mut(i) {
                *c += prev;
            }
        }
        let order = &mut scratch.order;
        order.clear();
        order.resize(preps.len(), 0);
        for (i, &b) in bins.iter().enumerate() {
            if let Some(c) = starts.get_mut(b as usize) {
                if let Some(o) = order.get_mut(*c as usize) {
                    *o = i as u32;
                }
                *c += 1;
            }
        }
        out.clear();
        out.extend(order.iter().filter_map(|&i| preps.get(i as usize).cloned()));
    }

    fn resolve(&self, cls: &Classifier, t: &RuleRef) -> Result<u32, RuleError> {
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

    /// Deletes a rule known to exist.
    fn delete_one(&mut self, cls: &mut Classifier, ops: &mut Vec<Op>, h: Handle) {
        let Some(s) = self.store.get_mut(h.0 as usize).and_then(|s| s.take()) else {
            return;
        };
        let key = cls.unpack_key(s.mask_id, &s.key);
        let op = Op::Remove {
            id: s.mask_id,
            key: Box::new(key),
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

/// A reader: clone one per thread; lookups never lock.
#[derive(Clone)]
pub struct Reader {
    h: ReadHandle<Classifier>,
}

impl Reader {
    /// The current snapshot. Hold it for a burst of lookups, not longer: the writer's next batch
    /// waits until it is dropped.
    #[inline]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot { g: self.h.load() }
    }

    /// One lookup in the current snapshot; returns (handle, priority, actions).
    pub fn lookup(&self, key: &FlowKey) -> Option<(Handle, u32, Actions)> {
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

    /// Looks up a burst of keys: `out[i]` gets key `i`'s winner.
    pub fn lookup_batch<'a>(&'a self, keys: &[FlowKey], out: &mut Vec<Option<HitRef<'a>>>) {
        self.g.lookup_batch(keys, out);
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
