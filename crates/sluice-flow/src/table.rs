//! The flow table: the single writer ([`FlowTable`]) and its lock-free readers ([`Reader`]).
//!
//! Every batch operation (`insert_batch`, `delete_batch`, `modify_batch`) is applied to the
//! standby classifier copy and published with one pointer swap (see [`crate::publish`]): a reader
//! sees all of a batch or none of it. Single-rule calls are batches of one.
//!
//! The writer also keeps, outside the copies, what only it needs: the rule of each handle (for
//! delete by handle and for dumps), the mask registry (mask → subtable id, reference counted),
//! the handle allocator and the action-list interner.

use core::hash::{BuildHasherDefault, Hasher};

use hashbrown::{HashMap, HashSet};

use crate::action::Actions;
use crate::classifier::{
    balance, Classifier, ExactCache, HitRef, Op, RuleRecord, Slot, GROUP, RULE_BYTES_PER_COPY,
};
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
    /// Threads [`FlowTable::insert_batch`] may use for a big batch (at least
    /// [`PARALLEL_MIN_BATCH`] rules, all within the quotas): each takes whole subtables, so the
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

/// The smallest batch [`FlowTable::insert_batch`] splits over [`TableConfig::insert_threads`]
/// threads (below it, starting a thread costs more than it saves).
pub const PARALLEL_MIN_BATCH: usize = 16_384;

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

    /// The handle the `k`-th next [`Idr::alloc`] will return (with no free in between).
    pub fn nth_next(&self, k: usize) -> u32 {
        match self.free.len().checked_sub(k + 1) {
            Some(i) => self.free.get(i).copied().unwrap_or(u32::MAX),
            None => self
                .next
                .saturating_add((k - self.free.len()).min(u32::MAX as usize) as u32),
        }
    }

    /// One past the largest handle ever allocated.
    pub fn high_water(&self) -> u32 {
        self.next
    }
}

/// A multiply-fold hasher for the writer's interning maps: their keys (masks, action lists)
/// are hashed word by word, one multiply per word, instead of byte-wise.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Fold(u64);

impl Hasher for Fold {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            for (o, b) in w.iter_mut().zip(c) {
                *o = *b;
            }
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        let p = u128::from(self.0 ^ i) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_isize(&mut self, i: isize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let h = (self.0 ^ (self.0 >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93);
        h ^ (h >> 32)
    }
}

type FoldMap<K, V> = HashMap<K, V, BuildHasherDefault<Fold>>;

#[derive(Debug)]
struct Masks {
    by_mask: FoldMap<Mask, u32>,
    /// (mask, rules using it) by id; `None` when free.
    slots: Vec<Option<(Mask, usize)>>,
    idr: Idr,
    /// Masks found lately, by [`quick_slot`] of the mask: (mask id + 1, or 0 for none). A hit
    /// is proven by comparing with the registered mask, and costs one cheap hash instead of
    /// the map's (batches often cycle through a few masks).
    recent: [u32; MASK_CACHE],
}

impl Default for Masks {
    fn default() -> Self {
        Masks {
            by_mask: FoldMap::default(),
            slots: Vec::new(),
            idr: Idr::default(),
            recent: [0; MASK_CACHE],
        }
    }
}

/// Places in [`Masks::recent`] (a power of two).
const MASK_CACHE: usize = 64;

/// A mask's place in [`Masks::recent`]: an add-rotate over its words, multiplied.
#[inline]
fn quick_slot(mask: &Mask) -> usize {
    let h = mask
        .words()
        .iter()
        .fold(0u64, |a, w| a.wrapping_add(*w).rotate_left(23));
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize & (MASK_CACHE - 1)
}

impl Masks {
    fn find(&mut self, mask: &Mask) -> Option<u32> {
        let q = quick_slot(mask);
        if let Some(&id1) = self.recent.get(q) {
            if id1 != 0 && self.mask(id1 - 1) == Some(mask) {
                return Some(id1 - 1);
            }
        }
        let id = *self.by_mask.get(mask)?;
        if let Some(r) = self.recent.get_mut(q) {
            *r = id + 1;
        }
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
        if let Some(r) = self.recent.get_mut(quick_slot(&mask)) {
            if *r == id + 1 {
                *r = 0;
            }
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
        if let Some(r) = self.recent.get_mut(quick_slot(&mask)) {
            if *r == id + 1 {
                *r = 0;
            }
        }
        self.idr.free(id);
        true
    }
}

/// Interned action lists, reference counted by the writer with plain integers.
#[derive(Debug, Default)]
struct ActionLists {
    by_list: FoldMap<Actions, u32>,
    /// (list, rules using it) by id.
    slots: Vec<Option<(Actions, usize)>>,
    idr: Idr,
    /// The last list interned (consecutive rules often share one).
    last: Option<u32>,
    /// Recently interned lists: (hash, id + 1) by the hash's low bits, so a list seen lately
    /// costs one hash and one comparison, not a map probe.
    recent: Vec<(u64, u32)>,
    /// Lists recently interned or found, by the address of the caller's allocation: (address,
    /// id + 1). A hit is proven by the interned list sharing that allocation (the table holds
    /// a reference to it, so the address cannot have been reused by another list), and costs
    /// no hashing: callers that reuse their action-list values pay one comparison.
    by_addr: Vec<(usize, u32)>,
}

/// Places in [`ActionLists::recent`] (a power of two).
const RECENT: usize = 1024;

/// Places in [`ActionLists::by_addr`] (a power of two).
const BY_ADDR: usize = 64;

impl ActionLists {
    fn list(&self, id: u32) -> Option<&Actions> {
        self.slots.get(id as usize)?.as_ref().map(|(a, _)| a)
    }

    /// The id of `a` (defining it in `cls` if new), with one more reference.
    fn intern_ref(&mut self, a: &Actions, cls: &mut Classifier, ops: &mut Vec<Op>) -> u32 {
        // The same allocation as the last list: no hashing at all.
        let mut found = self
            .last
            .filter(|l| self.list(*l).is_some_and(|x| x.ptr_eq(a)));
        let slot = (a.addr() >> 4) & (BY_ADDR - 1);
        if found.is_none() {
            if let Some(&(addr, id1)) = self.by_addr.get(slot) {
                if addr == a.addr() && id1 != 0 {
                    found = Some(id1 - 1).filter(|&id| self.list(id).is_some_and(|x| x.ptr_eq(a)));
                }
            }
        }
        let mut fp = None;
        if found.is_none() {
            let mut h = Fold::default();
            core::hash::Hash::hash(a, &mut h);
            let f0 = h.finish();
            fp = Some(f0);
            if self.recent.is_empty() {
                self.recent = vec![(0, 0); RECENT];
            }
            if let Some(&(f, id1)) = self.recent.get(f0 as usize & (RECENT - 1)) {
                if f == f0 && id1 != 0 {
                    let id = id1 - 1;
                    if self.list(id).is_some_and(|x| x.ptr_eq(a) || x == a) {
                        found = Some(id);
                    }
                }
            }
        }
        let id = match found {
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
        if let Some(f) = fp {
            if let Some(r) = self.recent.get_mut(f as usize & (RECENT - 1)) {
                *r = (f, id + 1);
            }
            if self.by_addr.is_empty() {
                self.by_addr = vec![(0, 0); BY_ADDR];
            }
            if let Some(r) = self.by_addr.get_mut(slot) {
                *r = (a.addr(), id + 1);
            }
        }
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
    /// Parallel inserts: each rule's provisional handle, and each thread's results.
    provisional: Vec<u32>,
    results: Vec<Vec<Result<(u32, u32), u32>>>,
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

/// What the first pass over a batch learns of a rule (its key and priority stay in the batch).
#[derive(Debug, Clone, Copy)]
struct Prep {
    /// Subtable, or [`INVALID`] for an invalid match.
    mask_id: u32,
    /// Interned action list (one reference held), or [`INVALID`].
    action: u32,
}

const INVALID: u32 = u32::MAX;

/// Estimated bytes one rule costs: an entry and its share of buckets in each of the two
/// classifier copies, and the writer's record. Shared action lists are not counted; masks that
/// use more than six key words cost about 60 bytes more per copy.
const BYTES_PER_RULE: usize = 2 * RULE_BYTES_PER_COPY + core::mem::size_of::<Option<RuleRecord>>();

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
        self.rule_in(&self.lr.published(), h)
    }

    /// The rule with handle `h`, its key read from classifier copy `cls` (the published copy
    /// holds every rule the writer has a record of).
    fn rule_in(&self, cls: &Classifier, h: Handle) -> Option<Rule> {
        let s = self.w.store.get(h.0 as usize)?.as_ref()?;
        let mask = *self.w.masks.mask(s.mask_id)?;
        Some(Rule {
            matcher: Match {
                key: cls.entry_key(s.mask_id, s.entry)?,
                mask,
            },
            priority: s.priority,
            actions: self.w.actions.list(s.action)?.clone(),
        })
    }

    /// Every rule, by handle order.
    pub fn rules(&self) -> impl Iterator<Item = (Handle, Rule)> + '_ {
        let cls = self.lr.published();
        (0..self.w.store.len() as u32)
            .filter_map(move |h| self.rule_in(&cls, Handle(h)).map(|r| (Handle(h), r)))
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
        let w = &mut self.w;
        if cls.insert_threads().max(1) != w.config.insert_threads.max(1) {
            // (Logged, so the other copy replays big runs with as many threads.)
            let op = Op::InsertThreads(w.config.insert_threads);
            cls.apply(&op);
            ops.push(op);
        }
        let (preps, fresh, counts) = w.prepare(cls, &mut ops, &rules);
        if mode == BatchMode::AllOrNothing {
            // Validate first: a failing batch must leave the standby copy exactly as it was
            // (both copies keep one layout, which the replay relies on), so nothing is inserted
            // and undone.
            if let Some((at, err)) = w.first_failure(cls, &preps, &rules) {
                let mut undo = Vec::new();
                for p in &preps {
                    if p.action != INVALID {
                        w.actions.release(p.action, cls, &mut undo);
                    }
                }
                w.drop_unused(cls, &mut undo, &fresh);
                cls.finish_batch();
                w.scratch.preps = preps;
                let mut err = Some(err);
                return (0..n)
                    .map(|i| match err.take_if(|_| i == at) {
                        Some(e) => Err(e),
                        None => Err(RuleError::Aborted),
                    })
                    .collect();
            }
        }
        if n >= 256 {
            // Grow each subtable once for its share of the batch.
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
        // New handles extend the records: grow them once for the whole batch.
        w.store.reserve(n.saturating_sub(w.handles.free.len()));
        let threads = w
            .config
            .insert_threads
            .min(counts.iter().filter(|&&c| c > 0).count());
        let out = if threads > 1 && n >= PARALLEL_MIN_BATCH && w.fits(n) {
            w.insert_parallel(cls, &mut ops, &preps, &rules, &counts, threads)
        } else {
            w.insert_in_order(cls, &mut ops, &preps, &rules)
        };
        w.drop_unused(cls, &mut ops, &fresh);
        w.scratch.preps = preps;
        drop(rules);
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
                let found = w
                    .store
                    .get_mut(h as usize)
                    .and_then(|s| s.as_mut())
                    .and_then(|s| {
                        let key = cls.entry_key(s.mask_id, s.entry)?;
                        Some((s, key))
                    });
                if let Some((s, key)) = found {
                    let old = core::mem::replace(&mut s.action, action);
                    let op = Op::SetActions {
                        id: s.mask_id,
                        key: Box::new(key),
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

    /// Inserts a prepared batch on this thread, in order, a group at a time: the group's
    /// bucket reads are started together (they miss the cache in big tables), then its rules
    /// are inserted.
    fn insert_in_order(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        preps: &[Prep],
        rules: &[Rule],
    ) -> Vec<Result<Handle, RuleError>> {
        let mut out = Vec::with_capacity(rules.len());
        let mut sink = 0u64;
        for (pg, rg) in preps.chunks(GROUP).zip(rules.chunks(GROUP)) {
            for (p, r) in pg.iter().zip(rg) {
                sink ^= cls.touch(p.mask_id, &r.matcher.key);
            }
            for (p, r) in pg.iter().zip(rg) {
                let res = self.insert_prepared(cls, ops, p, r);
                if res.is_err() && p.action != INVALID {
                    self.actions.release(p.action, cls, ops);
                }
                out.push(res);
            }
        }
        core::hint::black_box(sink);
        out
    }

    /// Inserts one prepared rule (mask and action list already interned).
    #[inline]
    fn insert_prepared(
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
        let slot = Slot {
            prio,
            handle: h,
            action: p.action,
        };
        let (entry, bucket) = match cls.insert(p.mask_id, key, slot) {
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
    fn record(&mut self, ops: &mut Vec<Op>, h: u32, record: RuleRecord) {
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
    fn fits(&self, n: usize) -> bool {
        let total = self.rules.saturating_add(n);
        total <= self.config.max_rules
            && total.saturating_mul(BYTES_PER_RULE) <= self.config.max_bytes
    }

    /// [`FlowTable::insert_batch`] on `threads` threads (see [`TableConfig::insert_threads`]);
    /// the batch fits the quotas. Every valid rule is inserted with the handle it gets if no
    /// rule before it fails (provisional); then, in batch order, the real handles are
    /// allocated and recorded: they equal the provisional ones up to the first failure (a
    /// duplicate), and the rules after it are given their real ones in place.
    fn insert_parallel(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        preps: &[Prep],
        rules: &[Rule],
        counts: &[usize],
        threads: usize,
    ) -> Vec<Result<Handle, RuleError>> {
        let mut provisional = core::mem::take(&mut self.scratch.provisional);
        provisional.clear();
        provisional.reserve(rules.len());
        let mut valid = 0;
        for p in preps {
            if p.mask_id == INVALID {
                provisional.push(u32::MAX);
            } else {
                provisional.push(self.handles.nth_next(valid));
                valid += 1;
            }
        }
        let owner = balance(counts, threads);
        let mut results = core::mem::take(&mut self.scratch.results);
        results.resize_with(threads, Vec::new);
        results.truncate(threads);
        cls.insert_parallel(
            rules.len(),
            &owner,
            |i| {
                let p = preps.get(i)?;
                if p.mask_id == INVALID {
                    return None;
                }
                let r = rules.get(i)?;
                let slot = Slot {
                    prio: r.priority,
                    handle: *provisional.get(i)?,
                    action: p.action,
                };
                Some((p.mask_id, &r.matcher.key, slot))
            },
            &mut results,
        );
        let mut cursor = vec![0usize; threads];
        // Provisional handles that a failure before them moved, to their real ones.
        let mut moved: FoldMap<u32, u32> = FoldMap::default();
        let mut out = Vec::with_capacity(rules.len());
        for ((p, r), &pv) in preps.iter().zip(rules).zip(&provisional) {
            if p.mask_id == INVALID {
                out.push(Err(RuleError::InvalidMask));
                continue;
            }
            let t = usize::from(owner.get(p.mask_id as usize).copied().unwrap_or(0));
            let res = match (results.get(t), cursor.get_mut(t)) {
                (Some(rs), Some(c)) => {
                    *c += 1;
                    rs.get(*c - 1).copied().unwrap_or(Err(u32::MAX))
                }
                _ => Err(u32::MAX),
            };
            match res {
                Ok((entry, bucket)) => {
                    let h = self.handles.alloc();
                    if h != pv {
                        let done = cls.rehandle(p.mask_id, entry, r.priority, pv, h);
                        debug_assert!(done, "provisional handle not found");
                        moved.insert(pv, h);
                    }
                    self.record(
                        ops,
                        h,
                        RuleRecord {
                            mask_id: p.mask_id,
                            priority: r.priority,
                            entry,
                            bucket,
                            action: p.action,
                        },
                    );
                    out.push(Ok(Handle(h)));
                }
                Err(existing) => {
                    if p.action != INVALID {
                        self.actions.release(p.action, cls, ops);
                    }
                    let existing = moved.get(&existing).copied().unwrap_or(existing);
                    out.push(Err(RuleError::Duplicate {
                        existing: Handle(existing),
                    }));
                }
            }
        }
        self.scratch.provisional = provisional;
        self.scratch.results = results;
        out
    }

    /// Reads a batch once, in order: interns masks (creating subtables) and action lists, and
    /// grows each subtable once for its share. Returns the prepared rules and the mask ids this
    /// batch created.
    fn prepare(
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
    fn first_failure(
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
        let Some(key) = cls.entry_key(s.mask_id, s.entry) else {
            return;
        };
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
