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
//! shape), the filter compares the packet's words with them exactly; otherwise it passes and the
//! subtable's staged check (Open vSwitch's idea, two stages) hashes the non-L4 words and looks
//! them up in the subtable's set of such hashes. Only subtables that pass are hashed and probed:
//! first every candidate's hash and home-bucket read (independent loads whose cache misses
//! overlap), then the probes. [`Classifier::lookup_batch`] works subtable by subtable (hash every
//! key of a burst, then probe each), so the probes of different keys overlap.
//!
//! A copy is changed only through operations (`Op`), so the writer can replay the same log on the
//! other copy (see [`crate::publish`]).

use std::collections::BTreeMap;

use hashbrown::{HashMap, HashTable};

use crate::action::Actions;
use crate::key::{same_words, FlowKey, Mask, KEY_WORDS};
use crate::publish::Absorb;

/// A rule as a subtable's side list stores it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) prio: u32,
    pub(crate) handle: u32,
    /// Action-list id (an index into the copy's action table).
    pub(crate) action: u32,
}

impl Slot {
    #[inline]
    fn rank(&self) -> u64 {
        rank(self.prio, self.handle)
    }
}

/// `priority << 32 | !handle`: higher is better (higher priority, then lower handle). Handles
/// stay below `u32::MAX`, so a rank is never 0 and 0 means "no rule".
#[inline(always)]
pub(crate) fn rank(prio: u32, handle: u32) -> u64 {
    (u64::from(prio) << 32) | u64::from(!handle)
}

#[inline(always)]
fn rank_prio(r: u64) -> u32 {
    (r >> 32) as u32
}

#[inline(always)]
fn rank_handle(r: u64) -> u32 {
    !(r as u32)
}

/// One distinct masked key of a subtable, with its best rule.
#[derive(Debug, Clone, Copy)]
struct Entry<const N: usize> {
    /// The mask's used words of the key, zero-padded to `N`.
    key: [u64; N],
    /// The best rule's rank.
    rank: u64,
    /// The best rule's action-list id.
    action: u32,
}

/// Masks that use at most this many key words get the smallest entry (48 bytes).
const SMALL: usize = 4;
/// Masks that use at most this many key words get the middle-sized entry (64 bytes).
const NARROW: usize = 6;

/// Heap bytes one rule costs in one classifier copy, for the memory quota: a 64-byte entry (masks
/// of up to six words; smaller masks cost 48) and three 8-byte buckets (the tables stay between
/// a quarter and a half full).
pub(crate) const RULE_BYTES_PER_COPY: usize = core::mem::size_of::<Entry<NARROW>>() + 3 * 8;

/// The bucket position of an insert that joined an existing entry (no bucket written).
pub(crate) const JOINED: u32 = u32::MAX;

/// Buckets of a new subtable.
const MIN_BUCKETS: usize = 8;

/// A subtable's hash table (see the module documentation).
#[derive(Debug, Clone)]
struct Tab<const N: usize> {
    /// 0: empty; else `(hash >> 32) << 32 | (entry index + 1)`.
    buckets: Vec<u64>,
    /// `64 - log2(buckets.len())`: a hash's home bucket is `hash >> shift`.
    shift: u32,
    /// Entries by index; an index stays valid while its entry lives (freed places, rank 0, are
    /// reused last-freed first), so the writer's records can name entries, and both classifier
    /// copies, applying the same operations in the same order, agree on every index.
    entries: Vec<Entry<N>>,
    /// Freed entry indices.
    free: Vec<u32>,
    /// Entry index → the other rules with that key, best first (usually empty).
    more: HashMap<u32, Vec<Slot>>,
}

impl<const N: usize> Tab<N> {
    fn new() -> Self {
        Tab {
            buckets: vec![0; MIN_BUCKETS],
            shift: 64 - MIN_BUCKETS.trailing_zeros(),
            entries: Vec::new(),
            free: Vec::new(),
            more: HashMap::new(),
        }
    }

    /// Live entries.
    #[inline]
    fn live(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        (h >> self.shift) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// The entry with key `g` (hash `h`).
    #[inline(always)]
    fn lookup(&self, g: &[u64; N], h: u64) -> Option<&Entry<N>> {
        self.locate(g, h).and_then(|(_, i)| self.entries.get(i))
    }

    /// The bucket position and entry index of key `g` (hash `h`).
    #[inline(always)]
    fn locate(&self, g: &[u64; N], h: u64) -> Option<(usize, usize)> {
        let mask = self.mask();
        let tag = h >> 32;
        let mut pos = self.home(h);
        loop {
            let b = *self.buckets.get(pos)?;
            if b == 0 {
                return None;
            }
            if b >> 32 == tag {
                let i = (b as u32).wrapping_sub(1) as usize;
                if self.entries.get(i).is_some_and(|e| same_words(&e.key, g)) {
                    return Some((pos, i));
                }
            }
            pos = (pos + 1) & mask;
        }
    }

    /// Whether `total` entries fit (at most half the buckets in use).
    #[inline(always)]
    fn fits(&self, total: usize) -> bool {
        total.saturating_mul(2) <= self.buckets.len()
    }

    /// Makes room for `total` entries (buckets at most half full) without rehashing on the way.
    fn grow_for(&mut self, total: usize) {
        let want = total
            .saturating_mul(2)
            .max(MIN_BUCKETS)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX);
        if want > self.buckets.len() {
            self.rehash(want);
        }
    }

    /// Moves every bucket into a new array of `cap` (a power of two). A bucket's home is its own
    /// stored hash bits, so no key is read.
    fn rehash(&mut self, cap: usize) {
        let old = core::mem::replace(&mut self.buckets, vec![0; cap]);
        self.shift = 64 - cap.trailing_zeros();
        let mask = cap - 1;
        for b in old.into_iter().filter(|b| *b != 0) {
            // The stored upper 32 bits of the hash hold the home (at most 2^32 buckets).
            let mut pos = (b >> self.shift) as usize;
            while self.buckets.get(pos).is_some_and(|x| *x != 0) {
                pos = (pos + 1) & mask;
            }
            if let Some(x) = self.buckets.get_mut(pos) {
                *x = b;
            }
        }
    }

    /// Inserts `slot` under key `g`: `Ok((index, bucket))` with the entry's index and, when a
    /// new entry was created, its bucket position (else [`JOINED`]); `Err(handle)` for a
    /// duplicate (same key and priority).
    #[inline]
    fn insert(&mut self, g: &[u64; N], h: u64, slot: Slot) -> Result<(u32, u32), u32> {
        if !self.fits(self.live() + 1) {
            self.grow_for(self.live() + 1);
        }
        let mask = self.mask();
        let tag = h >> 32;
        let mut pos = self.home(h);
        loop {
            let Some(&b) = self.buckets.get(pos) else {
                return Err(u32::MAX);
            };
            if b == 0 {
                break;
            }
            if b >> 32 == tag {
                let i = (b as u32).wrapping_sub(1) as usize;
                if self.entries.get(i).is_some_and(|e| same_words(&e.key, g)) {
                    return self.add_to(i, slot).map(|()| (i as u32, JOINED));
                }
            }
            pos = (pos + 1) & mask;
        }
        let e = Entry {
            key: *g,
            rank: slot.rank(),
            action: slot.action,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                if let Some(x) = self.entries.get_mut(i as usize) {
                    *x = e;
                }
                i as usize
            }
            None => {
                self.entries.push(e);
                self.entries.len() - 1
            }
        };
        if let Some(x) = self.buckets.get_mut(pos) {
            *x = (tag << 32) | (idx as u64 + 1);
        }
        Ok((idx as u32, pos as u32))
    }

    /// Replays a fresh insert that the other copy made at entry `idx` and bucket `pos`: this
    /// copy has the same layout (both apply the same operations in the same order), so the
    /// entry is written there without probing. Returns false, changing nothing, if the layout
    /// does not agree (the caller then inserts normally).
    #[inline]
    fn place(&mut self, g: &[u64; N], h: u64, slot: Slot, idx: u32, pos: u32) -> bool {
        if !self.fits(self.live() + 1) {
            self.grow_for(self.live() + 1);
        }
        let next = self
            .free
            .last()
            .copied()
            .unwrap_or(self.entries.len() as u32);
        if next != idx || self.buckets.get(pos as usize) != Some(&0) {
            return false;
        }
        // Same layout: no empty bucket between the key's home and `pos` (checked in tests).
        #[cfg(debug_assertions)]
        {
            let mask = self.mask();
            let mut p = self.home(h);
            while p != pos as usize {
                debug_assert!(
                    self.buckets.get(p).is_some_and(|b| *b != 0),
                    "replayed bucket position unreachable from the key's home"
                );
                p = (p + 1) & mask;
            }
        }
        let e = Entry {
            key: *g,
            rank: slot.rank(),
            action: slot.action,
        };
        match self.free.pop() {
            Some(i) => {
                if let Some(x) = self.entries.get_mut(i as usize) {
                    *x = e;
                }
            }
            None => self.entries.push(e),
        }
        if let Some(x) = self.buckets.get_mut(pos as usize) {
            *x = ((h >> 32) << 32) | (u64::from(idx) + 1);
        }
        true
    }

    /// [`Tab::insert`] for a key array of width `K` (the caller's generic width, which is
    /// always this table's `N`; any other width is refused).
    #[inline(always)]
    fn insert_any<const K: usize>(
        &mut self,
        g: &[u64; K],
        h: u64,
        slot: Slot,
    ) -> Result<(u32, u32), u32> {
        if K != N {
            return Err(u32::MAX);
        }
        let mut w = [0u64; N];
        for (o, x) in w.iter_mut().zip(g) {
            *o = *x;
        }
        self.insert(&w, h, slot)
    }

    /// The key of entry `i`.
    fn key_of(&self, i: u32) -> Option<&[u64; N]> {
        self.entries.get(i as usize).map(|e| &e.key)
    }

    /// Adds a rule to existing entry `i`.
    fn add_to(&mut self, i: usize, slot: Slot) -> Result<(), u32> {
        let Some(e) = self.entries.get_mut(i) else {
            return Ok(());
        };
        if rank_prio(e.rank) == slot.prio {
            return Err(rank_handle(e.rank));
        }
        let key = i as u32;
        if let Some(d) = self
            .more
            .get(&key)
            .and_then(|m| m.iter().find(|s| s.prio == slot.prio))
        {
            return Err(d.handle);
        }
        let more = self.more.entry(key).or_default();
        if slot.rank() > e.rank {
            let old = Slot {
                prio: rank_prio(e.rank),
                handle: rank_handle(e.rank),
                action: e.action,
            };
            more.insert(0, old);
            e.rank = slot.rank();
            e.action = slot.action;
        } else {
            let r = slot.rank();
            let pos = more.iter().position(|s| r > s.rank()).unwrap_or(more.len());
            more.insert(pos, slot);
        }
        Ok(())
    }

    /// Removes a rule: `(removed, entry_gone)`.
    fn remove(&mut self, g: &[u64; N], h: u64, prio: u32, handle: u32) -> (bool, bool) {
        let Some((pos, i)) = self.locate(g, h) else {
            return (false, false);
        };
        let key = i as u32;
        let r = rank(prio, handle);
        let Some(e) = self.entries.get_mut(i) else {
            return (false, false);
        };
        if e.rank == r {
            if let Some(m) = self.more.get_mut(&key) {
                if !m.is_empty() {
                    let next = m.remove(0);
                    if m.is_empty() {
                        self.more.remove(&key);
                    }
                    e.rank = next.rank();
                    e.action = next.action;
                    return (true, false);
                }
            }
            e.rank = 0;
            self.more.remove(&key);
            self.delete_bucket(pos);
            self.free.push(key);
            return (true, true);
        }
        if let Some(m) = self.more.get_mut(&key) {
            if let Some(p) = m.iter().position(|s| s.prio == prio && s.handle == handle) {
                m.remove(p);
                if m.is_empty() {
                    self.more.remove(&key);
                }
                return (true, false);
            }
        }
        (false, false)
    }

    /// Empties bucket `hole` and shifts the following buckets of its cluster back (linear-probing
    /// deletion without tombstones).
    fn delete_bucket(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let Some(&b) = self.buckets.get(j) else { break };
            if b == 0 {
                break;
            }
            let home = (b >> self.shift) as usize;
            // `b` may fill the hole when the hole lies between its home and `j` (cyclically).
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                if let Some(x) = self.buckets.get_mut(hole) {
                    *x = b;
                }
                hole = j;
            }
        }
        if let Some(x) = self.buckets.get_mut(hole) {
            *x = 0;
        }
    }

    fn set_action(&mut self, g: &[u64; N], h: u64, prio: u32, handle: u32, action: u32) {
        let Some((_, i)) = self.locate(g, h) else {
            return;
        };
        if let Some(e) = self.entries.get_mut(i) {
            if e.rank == rank(prio, handle) {
                e.action = action;
                return;
            }
        }
        if let Some(s) = self
            .more
            .get_mut(&(i as u32))
            .and_then(|m| m.iter_mut().find(|s| s.prio == prio && s.handle == handle))
        {
            s.action = action;
        }
    }

    /// Gives the rule of priority `prio` and handle `old` at entry `i` handle `new`; false if
    /// there is no such rule. Priorities within an entry differ, so the order of its rules
    /// does not change.
    fn rehandle(&mut self, i: u32, prio: u32, old: u32, new: u32) -> bool {
        if let Some(e) = self.entries.get_mut(i as usize) {
            if e.rank == rank(prio, old) {
                e.rank = rank(prio, new);
                return true;
            }
        }
        match self
            .more
            .get_mut(&i)
            .and_then(|m| m.iter_mut().find(|s| s.prio == prio && s.handle == old))
        {
            Some(s) => {
                s.handle = new;
                true
            }
            None => false,
        }
    }

    /// The handle of the rule with key `g` and priority `prio`.
    fn find_prio(&self, g: &[u64; N], h: u64, prio: u32) -> Option<u32> {
        let (_, i) = self.locate(g, h)?;
        let e = self.entries.get(i)?;
        if rank_prio(e.rank) == prio {
            return Some(rank_handle(e.rank));
        }
        self.more
            .get(&(i as u32))?
            .iter()
            .find(|s| s.prio == prio)
            .map(|s| s.handle)
    }

    fn bytes(&self) -> usize {
        self.buckets.capacity() * 8
            + self.entries.capacity() * core::mem::size_of::<Entry<N>>()
            + self.free.capacity() * 4
    }
}

#[derive(Debug, Clone)]
enum Tbl {
    Small(Tab<SMALL>),
    Narrow(Tab<NARROW>),
    Wide(Tab<KEY_WORDS>),
}

/// Runs `$body` with `$t` bound to the subtable's hash table and `$n` to its key width (a
/// `const` usable as a generic argument).
macro_rules! with_tbl {
    ($tbl:expr, $t:ident, $n:ident => $body:expr) => {
        match $tbl {
            Tbl::Small($t) => {
                #[allow(dead_code)]
                const $n: usize = SMALL;
                $body
            }
            Tbl::Narrow($t) => {
                #[allow(dead_code)]
                const $n: usize = NARROW;
                $body
            }
            Tbl::Wide($t) => {
                #[allow(dead_code)]
                const $n: usize = KEY_WORDS;
                $body
            }
        }
    };
}

/// Runs `job` on every part, the first on this thread and each other on a thread of its own
/// (or, if the OS refuses a thread, on this thread afterwards: the parts are independent);
/// returns the results in the parts' order. A panic in a job is propagated.
fn on_threads<P: Send, R: Send>(parts: &mut [P], job: impl Fn(&mut P) -> R + Sync) -> Vec<R> {
    let job = &job;
    let (mut results, unstarted) = std::thread::scope(|scope| {
        let mut unstarted = Vec::new();
        let mut helpers = Vec::new();
        let mut all = parts.iter_mut().enumerate();
        let first = all.next();
        for (t, part) in all {
            match std::thread::Builder::new().spawn_scoped(scope, move || job(part)) {
                Ok(h) => helpers.push((t, h)),
                Err(_) => unstarted.push(t),
            }
        }
        let mut results: Vec<(usize, R)> = first.map(|(t, p)| (t, job(p))).into_iter().collect();
        for (t, h) in helpers {
            results.push((t, h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))));
        }
        (results, unstarted)
    });
    for t in unstarted {
        if let Some(part) = parts.get_mut(t) {
            results.push((t, job(part)));
        }
    }
    results.sort_by_key(|&(t, _)| t);
    results.into_iter().map(|(_, r)| r).collect()
}

/// Subtable ids (indices of `counts`, rules per subtable) to `threads` threads, balancing
/// rules: the biggest first, each to the least loaded thread.
pub(crate) fn balance(counts: &[usize], threads: usize) -> Vec<u8> {
    let mut ids: Vec<usize> = (0..counts.len()).collect();
    ids.sort_by_key(|&id| core::cmp::Reverse(counts.get(id).copied().unwrap_or(0)));
    let mut load = vec![0usize; threads.max(1)];
    let mut owner = vec![0u8; counts.len()];
    for id in ids {
        let t = load
            .iter()
            .enumerate()
            .min_by_key(|&(_, l)| *l)
            .map_or(0, |(t, _)| t);
        if let (Some(o), Some(l)) = (owner.get_mut(id), load.get_mut(t)) {
            *o = u8::try_from(t).unwrap_or(0);
            *l += counts.get(id).copied().unwrap_or(0);
        }
    }
    owner
}

/// Replays one recorded insert (rule `handle`, record `r`) on subtable `st`, whose twin in the
/// copy the insert was first applied to is `src`; true if the rule was added.
#[inline]
fn replay_one(st: &mut Subtable, src: &Subtable, handle: u32, r: &RuleRecord) -> bool {
    let slot = Slot {
        prio: r.priority,
        handle,
        action: r.action,
    };
    let placed = r.bucket != JOINED && st.place_from(src, r.entry, r.bucket, slot);
    // The copies share one layout, so a fresh insert always replays in place.
    debug_assert!(placed || r.bucket == JOINED, "copies' layouts differ");
    placed || st.insert_from(src, r.entry, slot).is_ok()
}

/// Runs `apply` on the items of `items` that `touch` claims (`Some`: the item's bucket read,
/// folded into a sink), in order, a group of [`GROUP`] at a time: the group's bucket reads are
/// all started before any of its items is applied (they miss the cache in big tables).
fn grouped<S: ?Sized, T: Copy + Default>(
    s: &mut S,
    items: impl Iterator<Item = T>,
    touch: impl Fn(&S, T) -> Option<u64>,
    mut apply: impl FnMut(&mut S, T),
) {
    let mut group = [T::default(); GROUP];
    let mut pending = 0;
    let mut sink = 0u64;
    for x in items {
        let Some(v) = touch(s, x) else { continue };
        sink ^= v;
        if let Some(g) = group.get_mut(pending) {
            *g = x;
        }
        pending += 1;
        if pending == GROUP {
            for &g in &group {
                apply(s, g);
            }
            pending = 0;
        }
    }
    for &g in group.get(..pending).unwrap_or(&[]) {
        apply(s, g);
    }
    core::hint::black_box(sink);
}

/// One thread's part of [`Classifier::replay_parallel`]: the run's records whose subtable is
/// in `share`, in order ([`grouped`]). Returns the rules added.
fn replay_share(
    share: &mut [Option<&mut Subtable>],
    published: &Classifier,
    run: &[Option<RuleRecord>],
    first: u32,
) -> usize {
    let src = |r: &RuleRecord| published.subtables.get(r.mask_id as usize)?.as_ref();
    let mut done = 0;
    grouped(
        share,
        (first..).zip(0..run.len()),
        |share, (_, k)| {
            let r = run.get(k)?.as_ref()?;
            let st = share.get(r.mask_id as usize)?.as_ref()?;
            let from = src(r)?;
            Some(if r.bucket == JOINED {
                st.touch_from(from, r.entry)
            } else {
                st.touch_pos(r.bucket)
            })
        },
        |share, (h, k)| {
            if let Some(Some(r)) = run.get(k) {
                if let (Some(Some(st)), Some(from)) = (share.get_mut(r.mask_id as usize), src(r)) {
                    done += usize::from(replay_one(st, from, h, r));
                }
            }
        },
    );
    done
}

/// One thread's part of [`Classifier::insert_parallel`]: the batch's rules whose subtable is in
/// `share`, in order ([`grouped`], as `FlowTable::insert_batch` does).
fn insert_share<'k, F>(
    share: &mut [Option<&mut Subtable>],
    n: usize,
    get: &F,
    out: &mut Vec<Result<(u32, u32), u32>>,
) where
    F: Fn(usize) -> Option<(u32, &'k FlowKey, Slot)>,
{
    out.clear();
    grouped(
        share,
        0..n,
        |share, i| {
            let (id, key, _) = get(i)?;
            Some(share.get(id as usize)?.as_ref()?.touch(key))
        },
        |share, i| {
            if let Some((id, key, slot)) = get(i) {
                if let Some(Some(st)) = share.get_mut(id as usize) {
                    out.push(st.insert(key, slot));
                }
            }
        },
    );
}

/// The key word that holds the L4 ports (and tunnel id): hashed last, after the stage check.
const L4_WORD: usize = 4;

/// Inserts whose bucket reads are started together (see [`Classifier::touch`]).
pub(crate) const GROUP: usize = 16;

/// Keys a burst lookup handles per pass.
const BURST: usize = 32;

/// Stage filters with at most this many partial hashes are checked by a linear scan.
const FEW: usize = 4;

/// Which key words a subtable reads, in hashing order, and its staged-lookup split.
#[derive(Debug, Clone)]
struct Sel {
    /// Word indices: stage-one words first, then the L4 word; zero past `n`.
    idx: [u8; KEY_WORDS],
    /// The mask's words in the same order; zero past `n` (so padding gathers as zero).
    mw: [u64; KEY_WORDS],
    /// Words used.
    n: u8,
    /// Words in stage one (0: the subtable is not staged).
    s: u8,
}

impl Sel {
    fn new(mask: &Mask) -> Self {
        let mut idx = [0u8; KEY_WORDS];
        let mut mw = [0u64; KEY_WORDS];
        let mut n = 0usize;
        let words = mask.words();
        let l4 = words.get(L4_WORD).copied().unwrap_or(0);
        for (i, w) in words.iter().enumerate() {
            if *w != 0 && i != L4_WORD {
                if let (Some(x), Some(m)) = (idx.get_mut(n), mw.get_mut(n)) {
                    *x = i as u8;
                    *m = *w;
                }
                n += 1;
            }
        }
        // Stage one: every used word but the L4 one, when both kinds are present (Open vSwitch's
        // staged lookup, with two stages): most packets that miss a subtable differ from all of
        // its rules before the ports.
        let s = if l4 != 0 && n > 0 { n } else { 0 };
        if l4 != 0 {
            if let (Some(x), Some(m)) = (idx.get_mut(n), mw.get_mut(n)) {
                *x = L4_WORD as u8;
                *m = l4;
            }
            n += 1;
        }
        Sel {
            idx,
            mw,
            n: n as u8,
            s: s as u8,
        }
    }

    /// [`Sel::pack`] from a [`padded`] key: no bounds checks.
    #[inline(always)]
    fn pack16<const N: usize>(&self, kw: &[u64; 16]) -> [u64; N] {
        let mut g = [0u64; N];
        for ((o, &i), &m) in g.iter_mut().zip(&self.idx).zip(&self.mw) {
            *o = kw[usize::from(i & 15)] & m;
        }
        g
    }

    /// The used words of `key & mask`, packed (zero-padded to `N`).
    #[inline(always)]
    fn pack<const N: usize>(&self, key: &FlowKey) -> [u64; N] {
        let kw = key.words();
        let mut g = [0u64; N];
        for ((o, &i), &m) in g.iter_mut().zip(&self.idx).zip(&self.mw) {
            *o = kw.get(usize::from(i)).copied().unwrap_or(0) & m;
        }
        g
    }

    /// A key back from its packed words.
    fn unpack(&self, g: &[u64]) -> FlowKey {
        let mut out = [0u64; KEY_WORDS];
        for (&i, &x) in self.idx.iter().zip(g).take(usize::from(self.n)) {
            if let Some(o) = out.get_mut(usize::from(i)) {
                *o = x;
            }
        }
        FlowKey::from_words(out)
    }

    /// The hash of the stage-one words and the hash of all `N` words of a packed key.
    #[inline(always)]
    fn hashes<const N: usize>(&self, g: &[u64; N]) -> (u64, u64) {
        let (one, two) = g.split_at(usize::from(self.s).min(N));
        let mut h = K0;
        for w in one {
            h = fold_mul(h ^ w, K1);
        }
        let hs = avalanche(h);
        for w in two {
            h = fold_mul(h ^ w, K1);
        }
        (hs, avalanche(h))
    }
}

/// A key's words padded to 16 (so word indices masked with 15 need no bounds check).
#[inline(always)]
fn padded(key: &FlowKey) -> [u64; 16] {
    let mut kw = [0u64; 16];
    for (o, x) in kw.iter_mut().zip(key.words()) {
        *o = *x;
    }
    kw
}

/// [`Tab::place`] of entry `i` of `from` into `t` (tables of one width); the stage hash and the
/// packed words (padded to [`KEY_WORDS`]) when placed.
#[inline(always)]
fn place_one<const N: usize>(
    sel: &Sel,
    from: &Tab<N>,
    t: &mut Tab<N>,
    i: u32,
    pos: u32,
    slot: Slot,
) -> Option<(u64, [u64; KEY_WORDS])> {
    let g = *from.key_of(i)?;
    let (hs, h) = sel.hashes(&g);
    if !t.place(&g, h, slot, i, pos) {
        return None;
    }
    let mut w = [0u64; KEY_WORDS];
    for (o, x) in w.iter_mut().zip(&g) {
        *o = *x;
    }
    Some((hs, w))
}

/// Highest priority held, kept exactly under inserts and removals: counts per priority (an array
/// for priorities below [`LOW_PRIOS`], a tree above).
#[derive(Debug, Clone, Default)]
struct Prios {
    low: Vec<u32>,
    high: BTreeMap<u32, u32>,
    max: u32,
    count: usize,
}

const LOW_PRIOS: u32 = 4096;

impl Prios {
    #[inline]
    fn add(&mut self, p: u32) {
        if p < LOW_PRIOS {
            let i = p as usize;
            if self.low.len() <= i {
                self.low.resize(i + 1, 0);
            }
            if let Some(c) = self.low.get_mut(i) {
                *c += 1;
            }
        } else {
            *self.high.entry(p).or_insert(0) += 1;
        }
        self.max = if self.count == 0 { p } else { self.max.max(p) };
        self.count += 1;
    }

    fn remove(&mut self, p: u32) {
        let gone = if p < LOW_PRIOS {
            match self.low.get_mut(p as usize) {
                Some(c) if *c > 0 => {
                    *c -= 1;
                    *c == 0
                }
                _ => return,
            }
        } else {
            match self.high.get_mut(&p) {
                Some(c) => {
                    *c -= 1;
                    if *c == 0 {
                        self.high.remove(&p);
                        true
                    } else {
                        false
                    }
                }
                None => return,
            }
        };
        self.count -= 1;
        if gone && p == self.max {
            self.max = match self.high.keys().next_back() {
                Some(m) => *m,
                None => self
                    .low
                    .iter()
                    .rposition(|c| *c > 0)
                    .map_or(0, |i| i as u32),
            };
        }
    }
}

/// Rules sharing one mask.
#[derive(Debug, Clone)]
pub(crate) struct Subtable {
    sel: Sel,
    prios: Prios,
    /// Stage filter: hash of the stage-one words → entries with those words.
    stage: HashTable<(u64, u32)>,
    /// The stage filter's hashes while it has at most [`FEW`] (padded with repeats).
    few: [u64; FEW],
    /// Whether every entry has the same stage-one words, `one` (the common case of a subtable
    /// whose rules differ only in the L4 word): the stage check is then an exact comparison, with
    /// no hashing. Set when the filter goes from empty to one value; cleared when it changes.
    single: bool,
    /// The stage-one words of every entry while `single` (packed; zero past the stage).
    one: [u64; KEY_WORDS],
    /// All ones for the packed positions of stage one, zero after.
    one_sel: [u64; KEY_WORDS],
    tbl: Tbl,
}

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Final avalanche: the tables take their bucket from the top bits, the exact-match cache
/// indexes with the bottom bits.
#[inline(always)]
fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^ (h >> 32)
}

#[inline]
fn hash_words(w: &[u64]) -> u64 {
    let mut h = K0;
    for x in w {
        h = fold_mul(h ^ x, K1);
    }
    avalanche(h)
}

impl Subtable {
    fn new(mask: Mask) -> Self {
        let sel = Sel::new(&mask);
        let n = usize::from(sel.n);
        let tbl = if n <= SMALL {
            Tbl::Small(Tab::new())
        } else if n <= NARROW {
            Tbl::Narrow(Tab::new())
        } else {
            Tbl::Wide(Tab::new())
        };
        let mut one_sel = [0u64; KEY_WORDS];
        for x in one_sel.iter_mut().take(usize::from(sel.s)) {
            *x = u64::MAX;
        }
        Subtable {
            sel,
            prios: Prios::default(),
            stage: HashTable::new(),
            few: [0; FEW],
            single: false,
            one: [0; KEY_WORDS],
            one_sel,
            tbl,
        }
    }

    #[inline(always)]
    fn max_prio(&self) -> u32 {
        self.prios.max
    }

    fn rules(&self) -> usize {
        self.prios.count
    }

    fn entries(&self) -> usize {
        with_tbl!(&self.tbl, t, N => t.live())
    }

    /// Whether some entry has the stage-one words whose hash is `hs` (a cheap reject of the
    /// subtable); always true when the subtable is unstaged or the filter would not pay off.
    #[inline(always)]
    fn stage_may_match(&self, hs: u64) -> bool {
        if self.sel.s == 0 {
            return true;
        }
        let n = self.stage.len();
        if n <= FEW {
            // Unused places repeat a present hash (or hold zero when the table is empty, where a
            // false "may match" only costs a probe that finds nothing).
            return self.few.iter().fold(false, |acc, x| acc | (*x == hs));
        }
        // A filter about as big as the table costs a second probe for nothing.
        if n.saturating_mul(4) > self.entries() {
            return true;
        }
        self.stage.find(hs, |e| e.0 == hs).is_some()
    }

    fn refresh_few(&mut self) {
        if self.stage.len() <= FEW {
            let first = self.stage.iter().next().map_or(0, |e| e.0);
            self.few = [first; FEW];
            for (f, e) in self.few.iter_mut().zip(self.stage.iter()) {
                *f = e.0;
            }
        }
    }

    #[inline]
    fn stage_add(&mut self, hs: u64, g: &[u64]) {
        if self.sel.s == 0 {
            return;
        }
        // The common case, a value the small filter already holds, touches no hash table.
        if self.stage.len() <= FEW && self.few.contains(&hs) {
            if let Some(e) = self.stage.find_mut(hs, |e| e.0 == hs) {
                e.1 += 1;
                return;
            }
        }
        match self.stage.entry(hs, |e| e.0 == hs, |e| e.0) {
            hashbrown::hash_table::Entry::Occupied(mut o) => o.get_mut().1 += 1,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert((hs, 1));
                self.refresh_few();
                self.single = self.stage.len() == 1;
                if self.single {
                    self.one = [0; KEY_WORDS];
                    for ((o, x), m) in self.one.iter_mut().zip(g).zip(&self.one_sel) {
                        *o = *x & *m;
                    }
                }
            }
        }
    }

    /// Whether packed key `g` has the stage-one words every entry has (only while `single`).
    #[inline(always)]
    fn same_stage<const N: usize>(&self, g: &[u64; N]) -> bool {
        let mut d = 0u64;
        for ((x, o), m) in g.iter().zip(&self.one).zip(&self.one_sel) {
            d |= (x ^ o) & m;
        }
        d == 0
    }

    /// The packed words of a key and its full hash, or `None` when the stage check rejects it.
    #[inline(always)]
    fn staged<const N: usize>(&self, kw: &[u64; 16]) -> Option<([u64; N], u64)> {
        let g = self.sel.pack16::<N>(kw);
        if self.single {
            if !self.same_stage(&g) {
                return None;
            }
            return Some((g, hash_words(&g)));
        }
        let (one, two) = g.split_at(usize::from(self.sel.s).min(N));
        let mut h = K0;
        for w in one {
            h = fold_mul(h ^ w, K1);
        }
        if !self.stage_may_match(avalanche(h)) {
            return None;
        }
        for w in two {
            h = fold_mul(h ^ w, K1);
        }
        Some((g, avalanche(h)))
    }

    fn stage_remove(&mut self, hs: u64) {
        if self.sel.s == 0 {
            return;
        }
        if let Ok(mut o) = self.stage.find_entry(hs, |e| e.0 == hs) {
            o.get_mut().1 -= 1;
            if o.get().1 == 0 {
                o.remove();
                self.refresh_few();
                // The remaining value's words are unknown here: back to the hashed check.
                self.single = false;
            }
        }
    }

    /// This subtable's [`Filter`].
    fn filter(&self, id: u32) -> Filter {
        let mut f = Filter {
            id,
            max_prio: self.max_prio(),
            ..Filter::default()
        };
        let s = usize::from(self.sel.s);
        if self.single && s > 0 {
            let skip = s.saturating_sub(FILTER_WORDS);
            let words = self
                .sel
                .idx
                .iter()
                .zip(&self.sel.mw)
                .zip(&self.one)
                .take(s)
                .skip(skip);
            for (((i, m), v), ((fi, fm), fv)) in words.zip(
                f.idx
                    .iter_mut()
                    .zip(f.mask.iter_mut())
                    .zip(f.val.iter_mut()),
            ) {
                *fi = *i;
                *fm = *m;
                *fv = *v;
            }
            f.exact = s <= FILTER_WORDS;
        }
        f
    }

    /// The hash of padded key `kw`'s words in this subtable, or `None` when the stage check
    /// rejects it (`exact`: the subtable's filter, already passed, was the whole stage check).
    #[inline(always)]
    fn hash_of(&self, kw: &[u64; 16], exact: bool) -> Option<u64> {
        with_tbl!(&self.tbl, _t, N => {
            if exact {
                Some(hash_words(&self.sel.pack16::<N>(kw)))
            } else {
                self.staged::<N>(kw).map(|(_, h)| h)
            }
        })
    }

    /// The home bucket of hash `h` (read early so a later probe finds it in cache).
    #[inline(always)]
    fn home_bucket(&self, h: u64) -> u64 {
        with_tbl!(&self.tbl, t, N => t.buckets.get(t.home(h)).copied().unwrap_or(0))
    }

    /// The best rule with padded key `kw`'s words, whose hash here is `h`.
    #[inline(always)]
    fn find_hashed(&self, kw: &[u64; 16], h: u64) -> Option<(u64, u32)> {
        with_tbl!(&self.tbl, t, N => {
            let g = self.sel.pack16::<N>(kw);
            t.lookup(&g, h).map(|e| (e.rank, e.action))
        })
    }

    /// Probes this subtable for a burst of (padded) keys, updating each key's best rank and
    /// action. Two passes: the first hashes every key, the second probes (independent probes of
    /// different keys, whose cache misses overlap).
    /// Only the keys whose bit is set in `which` (they passed the subtable's filter; `exact`:
    /// that was the whole stage check) are probed.
    #[inline(always)]
    fn probe_burst(
        &self,
        keys: &[[u64; 16]],
        mut which: u32,
        exact: bool,
        best: &mut [(u64, u32)],
    ) {
        let max = u64::from(self.max_prio());
        with_tbl!(&self.tbl, t, N => {
            let mut hs = [0u64; BURST];
            let mut ks = [0u8; BURST];
            let mut c = 0usize;
            while which != 0 {
                let k = which.trailing_zeros() as usize;
                which &= which - 1;
                let (Some(kw), Some(b)) = (keys.get(k), best.get(k)) else {
                    break;
                };
                if b.0 >> 32 > max {
                    continue;
                }
                let found = if exact {
                    let g = self.sel.pack16::<N>(kw);
                    let h = hash_words(&g);
                    Some((g, h))
                } else {
                    self.staged::<N>(kw)
                };
                let Some((_, h)) = found else { continue };
                if let (Some(hx), Some(kx)) = (hs.get_mut(c), ks.get_mut(c)) {
                    *hx = h;
                    *kx = k as u8;
                    c += 1;
                }
            }
            for (h, k) in hs.iter().zip(&ks).take(c) {
                let Some(kw) = keys.get(usize::from(*k)) else { continue };
                // Re-gathering the words (from L1) is cheaper than keeping them.
                let g = self.sel.pack16::<N>(kw);
                if let Some(e) = t.lookup(&g, *h) {
                    if let Some(b) = best.get_mut(usize::from(*k)) {
                        if e.rank > b.0 {
                            *b = (e.rank, e.action);
                        }
                    }
                }
            }
        })
    }

    /// Reads the home bucket `key` hashes to (so a following insert finds it in cache); returns
    /// it, for the caller to fold into a value the optimiser cannot drop.
    #[inline(always)]
    fn touch(&self, key: &FlowKey) -> u64 {
        with_tbl!(&self.tbl, t, N => {
            let g = self.sel.pack::<N>(key);
            t.buckets.get(t.home(hash_words(&g))).copied().unwrap_or(0)
        })
    }

    fn find_exact(&self, key: &FlowKey, prio: u32) -> Option<u32> {
        with_tbl!(&self.tbl, t, N => {
            let g = self.sel.pack::<N>(key);
            let (_, h) = self.sel.hashes(&g);
            t.find_prio(&g, h, prio)
        })
    }

    /// Inserts unless a rule with the same key and priority exists (its handle is the error).
    /// Returns the index of the rule's entry.
    #[inline]
    fn insert(&mut self, key: &FlowKey, slot: Slot) -> Result<(u32, u32), u32> {
        with_tbl!(&self.tbl, _t, N => {
            let g = self.sel.pack::<N>(key);
            self.insert_words(&g, slot)
        })
    }

    /// Inserts by packed key words (`N` must be this subtable's width).
    #[inline(always)]
    fn insert_words<const N: usize>(
        &mut self,
        g: &[u64; N],
        slot: Slot,
    ) -> Result<(u32, u32), u32> {
        let (hs, h) = self.sel.hashes(g);
        let (idx, pos) = match &mut self.tbl {
            Tbl::Small(t) => t.insert_any(g, h, slot)?,
            Tbl::Narrow(t) => t.insert_any(g, h, slot)?,
            Tbl::Wide(t) => t.insert_any(g, h, slot)?,
        };
        if pos != JOINED {
            self.stage_add(hs, g);
        }
        self.prios.add(slot.prio);
        Ok((idx, pos))
    }

    /// Replays a fresh insert (see [`Tab::place`]) whose key is entry `i` of `from` (the same
    /// subtable in the other copy); false if it could not be placed.
    #[inline]
    fn place_from(&mut self, from: &Subtable, i: u32, pos: u32, slot: Slot) -> bool {
        let sel = &self.sel;
        let placed = match (&from.tbl, &mut self.tbl) {
            (Tbl::Small(f), Tbl::Small(t)) => place_one(sel, f, t, i, pos, slot),
            (Tbl::Narrow(f), Tbl::Narrow(t)) => place_one(sel, f, t, i, pos, slot),
            (Tbl::Wide(f), Tbl::Wide(t)) => place_one(sel, f, t, i, pos, slot),
            _ => None,
        };
        let Some((hs, g)) = placed else {
            return false;
        };
        self.stage_add(hs, &g);
        self.prios.add(slot.prio);
        true
    }

    /// Reads bucket `pos` (see [`Classifier::touch`]).
    #[inline(always)]
    fn touch_pos(&self, pos: u32) -> u64 {
        with_tbl!(&self.tbl, t, N => t.buckets.get(pos as usize).copied().unwrap_or(0))
    }

    /// The key of entry `i`, unpacked.
    fn entry_key(&self, i: u32) -> Option<FlowKey> {
        with_tbl!(&self.tbl, t, N => t.key_of(i).map(|g| self.sel.unpack(g)))
    }

    /// Inserts a rule whose key is entry `i` of `from` (the same subtable in the other copy).
    #[inline]
    fn insert_from(&mut self, from: &Subtable, i: u32, slot: Slot) -> Result<(u32, u32), u32> {
        match (&from.tbl, &mut self.tbl) {
            (Tbl::Small(f), Tbl::Small(_)) => {
                let g = *f.key_of(i).ok_or(u32::MAX)?;
                self.insert_words(&g, slot)
            }
            (Tbl::Narrow(f), Tbl::Narrow(_)) => {
                let g = *f.key_of(i).ok_or(u32::MAX)?;
                self.insert_words(&g, slot)
            }
            (Tbl::Wide(f), Tbl::Wide(_)) => {
                let g = *f.key_of(i).ok_or(u32::MAX)?;
                self.insert_words(&g, slot)
            }
            _ => Err(u32::MAX),
        }
    }

    /// Reads the home bucket entry `i` of `from` hashes to in this subtable (see
    /// [`Classifier::touch`]).
    #[inline(always)]
    fn touch_from(&self, from: &Subtable, i: u32) -> u64 {
        with_tbl!(&from.tbl, f, N => {
            let Some(g) = f.key_of(i) else { return 0 };
            let h = hash_words(g);
            with_tbl!(&self.tbl, t, M => t.buckets.get(t.home(h)).copied().unwrap_or(0))
        })
    }

    fn remove(&mut self, key: &FlowKey, prio: u32, handle: u32) -> bool {
        let ((removed, gone), hs) = with_tbl!(&mut self.tbl, t, N => {
            let g = self.sel.pack::<N>(key);
            let (hs, h) = self.sel.hashes(&g);
            (t.remove(&g, h, prio, handle), hs)
        });
        if !removed {
            return false;
        }
        if gone {
            self.stage_remove(hs);
        }
        self.prios.remove(prio);
        true
    }

    fn set_actions(&mut self, key: &FlowKey, prio: u32, handle: u32, action: u32) {
        with_tbl!(&mut self.tbl, t, N => {
            let g = self.sel.pack::<N>(key);
            let (_, h) = self.sel.hashes(&g);
            t.set_action(&g, h, prio, handle, action);
        })
    }

    fn rehandle(&mut self, entry: u32, prio: u32, old: u32, new: u32) -> bool {
        with_tbl!(&mut self.tbl, t, N => t.rehandle(entry, prio, old, new))
    }

    fn reserve(&mut self, additional: usize) {
        with_tbl!(&mut self.tbl, t, N => {
            t.grow_for(t.entries.len().saturating_add(additional));
            t.entries.reserve(additional);
        })
    }

    fn bytes(&self) -> usize {
        with_tbl!(&self.tbl, t, N => t.bytes())
    }
}

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
    /// Removes a rule.
    Remove {
        id: u32,
        key: Box<FlowKey>,
        prio: u32,
        handle: u32,
    },
    /// Replaces a rule's action list.
    SetActions {
        id: u32,
        key: Box<FlowKey>,
        prio: u32,
        handle: u32,
        action: u32,
    },
    /// Defines (or, with `None`, forgets) action list `id`.
    ActionList { id: u32, list: Option<Actions> },
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

/// Stage-one words a [`Filter`] compares.
const FILTER_WORDS: usize = 2;

/// A subtable's first, branch-free check, kept in one dense array (in subtable order) that a
/// lookup reads whole: the masked key words `idx` must equal `val` under `mask`. It holds the
/// words every entry shares (when the subtable's entries all share their stage-one words; up to
/// [`FILTER_WORDS`] of them, the last ones: addresses come late in the key); otherwise its masks
/// are zero and every key passes, to be checked by the subtable's own stage filter.
#[derive(Debug, Clone, Copy, Default)]
struct Filter {
    idx: [u8; FILTER_WORDS],
    mask: [u64; FILTER_WORDS],
    val: [u64; FILTER_WORDS],
    /// The subtable's id.
    id: u32,
    /// Its highest priority.
    max_prio: u32,
    /// Whether passing this filter is passing the subtable's whole stage check.
    exact: bool,
}

impl Filter {
    #[inline(always)]
    fn passes(&self, kw: &[u64; 16]) -> bool {
        let mut d = 0u64;
        for ((&i, m), v) in self.idx.iter().zip(&self.mask).zip(&self.val) {
            d |= (kw[usize::from(i & 15)] & m) ^ v;
        }
        d == 0
    }
}

/// Subtables whose filters one pass of a lookup evaluates into a bit mask.
const FILTER_CHUNK: usize = 64;

/// One copy of the whole classifier.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    subtables: Vec<Option<Subtable>>,
    /// One filter per subtable, in `order`.
    filters: Vec<Filter>,
    /// Action lists by id: rules store a `u32`, so inserting one touches no reference count.
    actions: Vec<Option<Actions>>,
    /// Mask ids, best `max_prio` first (then by id).
    order: Vec<u32>,
    rules: usize,
    generation: u64,
    dirty: bool,
    /// Threads a big replayed insert run may use (`TableConfig::insert_threads`; 0 and 1: one).
    insert_threads: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct CacheEntry {
    key: FlowKey,
    /// The winner's rank, 0 for "no rule matches".
    rank: u64,
    action: u32,
}

/// Ways per set of the exact-match cache.
const WAYS: usize = 4;

/// A per-thread exact-match cache in front of the classifier (Open vSwitch's EMC idea): a 4-way
/// set-associative table from a whole packet key to the lookup's answer (a miss included), with
/// the sets' 64-bit hash tags in one cache line so a probe reads one key at most.
///
/// It is valid for one snapshot generation: any published batch empties it on next use, so it
/// never returns a stale answer. It pays off when traffic has fewer active flows than entries.
#[derive(Debug, Clone)]
pub struct ExactCache {
    tags: Vec<[u64; WAYS]>,
    next: Vec<u8>,
    entries: Vec<CacheEntry>,
    set_mask: usize,
    generation: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that went to the classifier.
    pub misses: u64,
}

impl ExactCache {
    /// A cache of about `entries` entries (rounded up to a power of two, at least 4; about 130
    /// bytes each).
    pub fn new(entries: usize) -> Self {
        let sets = (entries / WAYS).max(1).next_power_of_two();
        ExactCache {
            tags: vec![[0; WAYS]; sets],
            next: vec![0; sets],
            entries: vec![CacheEntry::default(); sets * WAYS],
            set_mask: sets - 1,
            generation: u64::MAX,
            hits: 0,
            misses: 0,
        }
    }

    fn clear(&mut self, generation: u64) {
        for t in &mut self.tags {
            *t = [0; WAYS];
        }
        self.generation = generation;
    }

    fn insert(&mut self, set: usize, tag: u64, e: CacheEntry) {
        let (Some(tags), Some(next)) = (self.tags.get_mut(set), self.next.get_mut(set)) else {
            return;
        };
        let w = match tags.iter().position(|t| *t == 0) {
            Some(w) => w,
            None => {
                let w = usize::from(*next) % WAYS;
                *next = next.wrapping_add(1);
                w
            }
        };
        if let Some(t) = tags.get_mut(w) {
            *t = tag;
        }
        if let Some(slot) = self.entries.get_mut(set * WAYS + w) {
            *slot = e;
        }
    }
}

/// The result of a lookup.
#[derive(Debug, Clone, Copy)]
pub struct HitRef<'a> {
    /// The winning rule's handle.
    pub handle: crate::Handle,
    /// Its priority.
    pub priority: u32,
    /// Its actions.
    pub actions: &'a Actions,
}

impl Classifier {
    /// Highest-priority rule matching `key` (ties: lowest handle).
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<HitRef<'_>> {
        let (r, a) = self.best(key);
        self.hit(r, a)
    }

    #[inline]
    fn hit(&self, rank: u64, action: u32) -> Option<HitRef<'_>> {
        if rank == 0 {
            return None;
        }
        Some(HitRef {
            handle: crate::Handle(rank_handle(rank)),
            priority: rank_prio(rank),
            actions: self.actions.get(action as usize)?.as_ref()?,
        })
    }

    /// The best matching rule's `(rank, action)`; rank 0 when none matches.
    ///
    /// First every subtable's [`Filter`] is evaluated without branches into a bit mask; then,
    /// for the subtables that passed, every key hash is computed and its home bucket read
    /// (independent loads, so their cache misses overlap); then they are probed in order,
    /// stopping once the best match's priority is above the next one's maximum.
    #[inline]
    fn best(&self, key: &FlowKey) -> (u64, u32) {
        let mut best = (0u64, 0u32);
        let kw = padded(key);
        for chunk in self.filters.chunks(FILTER_CHUNK) {
            let mut bits = 0u64;
            for (j, f) in chunk.iter().enumerate() {
                bits |= u64::from(f.passes(&kw)) << j;
            }
            // Hashes of the candidates, and their home buckets' reads started.
            let mut hs = [0u64; FILTER_CHUNK];
            let mut sink = 0u64;
            let mut b = bits;
            while b != 0 {
                let j = b.trailing_zeros() as usize;
                b &= b - 1;
                let (Some(f), Some(hx)) = (chunk.get(j), hs.get_mut(j)) else {
                    break;
                };
                let Some(Some(st)) = self.subtables.get(f.id as usize) else {
                    continue;
                };
                match st.hash_of(&kw, f.exact) {
                    Some(h) => {
                        *hx = h;
                        sink ^= st.home_bucket(h);
                    }
                    None => bits &= !(1u64 << j),
                }
            }
            core::hint::black_box(sink);
            while bits != 0 {
                let j = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let (Some(f), Some(h)) = (chunk.get(j), hs.get(j)) else {
                    break;
                };
                if best.0 >> 32 > u64::from(f.max_prio) {
                    return best;
                }
                let Some(Some(st)) = self.subtables.get(f.id as usize) else {
                    continue;
                };
                if let Some(hit) = st.find_hashed(&kw, *h) {
                    if hit.0 > best.0 {
                        best = hit;
                    }
                }
            }
        }
        best
    }

    /// Looks up a burst of keys (subtable by subtable, so the hash-table reads of different
    /// keys overlap): `out[i]` gets key `i`'s winner, the same as [`Classifier::lookup`].
    pub fn lookup_batch<'a>(&'a self, keys: &[FlowKey], out: &mut Vec<Option<HitRef<'a>>>) {
        out.clear();
        out.reserve(keys.len());
        if self.filters.len() > FILTER_CHUNK {
            out.extend(keys.iter().map(|k| {
                let (r, a) = self.best(k);
                self.hit(r, a)
            }));
            return;
        }
        for chunk in keys.chunks(BURST) {
            let mut best = [(0u64, 0u32); BURST];
            let best = best.get_mut(..chunk.len()).unwrap_or(&mut []);
            let kws: [[u64; 16]; BURST] =
                core::array::from_fn(|k| chunk.get(k).map_or([0; 16], padded));
            let kws = kws.get(..chunk.len()).unwrap_or(&[]);
            // Keys passing each subtable's filter, as bits.
            let mut which = [0u32; FILTER_CHUNK];
            for (k, kw) in kws.iter().enumerate() {
                for (w, f) in which.iter_mut().zip(&self.filters) {
                    *w |= u32::from(f.passes(kw)) << k;
                }
            }
            for (f, w) in self.filters.iter().zip(which) {
                if w == 0 {
                    continue;
                }
                let Some(Some(st)) = self.subtables.get(f.id as usize) else {
                    continue;
                };
                st.probe_burst(kws, w, f.exact, best);
            }
            out.extend(best.iter().map(|&(r, a)| self.hit(r, a)));
        }
    }

    /// Like [`Classifier::lookup`], through a per-thread exact-match cache.
    #[inline]
    pub fn lookup_cached(&self, cache: &mut ExactCache, key: &FlowKey) -> Option<HitRef<'_>> {
        if cache.generation != self.generation {
            cache.clear(self.generation);
        }
        let tag = hash_words(key.words()) | 1;
        let set = (tag >> 1) as usize & cache.set_mask;
        let mut found = None;
        if let Some(tags) = cache.tags.get(set) {
            for (w, t) in tags.iter().enumerate() {
                if *t == tag {
                    let i = set * WAYS + w;
                    if let Some(e) = cache.entries.get(i) {
                        if same_words(e.key.words(), key.words()) {
                            found = Some(*e);
                            break;
                        }
                    }
                }
            }
        }
        let (rank, action) = match found {
            Some(e) => {
                cache.hits += 1;
                (e.rank, e.action)
            }
            None => {
                cache.misses += 1;
                let (rank, action) = self.best(key);
                cache.insert(
                    set,
                    tag,
                    CacheEntry {
                        key: *key,
                        rank,
                        action,
                    },
                );
                (rank, action)
            }
        };
        self.hit(rank, action)
    }

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

    /// Inserts a rule into subtable `id`, unless one with the same key and priority exists (the
    /// error is its handle). Returns the index of the rule's entry (for the writer's record).
    #[inline]
    pub(crate) fn insert(&mut self, id: u32, key: &FlowKey, slot: Slot) -> Result<(u32, u32), u32> {
        let Some(Some(st)) = self.subtables.get_mut(id as usize) else {
            return Err(u32::MAX);
        };
        let before = st.max_prio();
        let was_empty = st.rules() == 0;
        let placed = st.insert(key, slot)?;
        self.rules += 1;
        if was_empty || st.max_prio() != before {
            self.dirty = true;
        }
        Ok(placed)
    }

    /// Inserts the rules `0..n` of a batch on `threads` threads, each owning whole subtables
    /// (`owner[id]`, a thread index; missing ids belong to thread 0). `get(i)` gives rule `i`'s
    /// subtable, key and slot (`None`: not inserted). Every thread takes its rules in batch
    /// order, so each subtable sees exactly the inserts, in the order, that
    /// [`Classifier::insert`] called rule by rule would give it: the same layout and the same
    /// results. Thread `t`'s results, in batch order, go to `out[t]` (cleared first).
    pub(crate) fn insert_parallel<'k, F>(
        &mut self,
        n: usize,
        owner: &[u8],
        get: F,
        out: &mut [Vec<Result<(u32, u32), u32>>],
    ) where
        F: Fn(usize) -> Option<(u32, &'k FlowKey, Slot)> + Sync,
    {
        let before = self.maxima();
        let mut shares = self.shares(owner, out.len());
        let get = &get;
        let mut parts: Vec<_> = shares.iter_mut().zip(out.iter_mut()).collect();
        on_threads(&mut parts, |(share, o)| insert_share(share, n, get, o));
        drop(parts);
        drop(shares);
        let inserted: usize = out
            .iter()
            .map(|o| o.iter().filter(|r| r.is_ok()).count())
            .sum();
        self.rules += inserted;
        self.mark_changed(&before);
    }

    /// The threads a replayed insert run may use.
    pub(crate) fn insert_threads(&self) -> usize {
        self.insert_threads
    }

    /// Replays the insert run `run` (records of handles `first ..`) on `threads` threads, each
    /// owning whole subtables and replaying their records in order (as
    /// [`Classifier::insert_parallel`]), reading keys from `published`.
    fn replay_parallel(
        &mut self,
        published: &Classifier,
        run: &[Option<RuleRecord>],
        first: u32,
        threads: usize,
    ) {
        let mut counts = vec![0usize; self.subtables.len()];
        for r in run.iter().flatten() {
            if let Some(c) = counts.get_mut(r.mask_id as usize) {
                *c += 1;
            }
        }
        let owner = balance(&counts, threads);
        let before = self.maxima();
        let mut shares = self.shares(&owner, threads);
        let done: usize = on_threads(&mut shares, |share| {
            replay_share(share, published, run, first)
        })
        .into_iter()
        .sum();
        drop(shares);
        self.rules += done;
        self.mark_changed(&before);
    }

    /// Every subtable's best priority and whether it is empty (see
    /// [`Classifier::mark_changed`]).
    fn maxima(&self) -> Vec<(u32, bool)> {
        self.subtables
            .iter()
            .map(|s| {
                s.as_ref()
                    .map_or((0, true), |s| (s.max_prio(), s.rules() == 0))
            })
            .collect()
    }

    /// Marks the order dirty if a subtable's maximum moved or an empty one got rules since
    /// `before` ([`Classifier::maxima`]).
    fn mark_changed(&mut self, before: &[(u32, bool)]) {
        for (st, &(max, was_empty)) in self.subtables.iter().zip(before) {
            if let Some(st) = st {
                if (was_empty && st.rules() > 0) || st.max_prio() != max {
                    self.dirty = true;
                }
            }
        }
    }

    /// The subtables split into `threads` shares by `owner` (a thread index per id; missing
    /// ids go to thread 0): share `t` has `Some` exactly at the ids thread `t` owns.
    fn shares(&mut self, owner: &[u8], threads: usize) -> Vec<Vec<Option<&mut Subtable>>> {
        let mut shares: Vec<Vec<Option<&mut Subtable>>> = (0..threads)
            .map(|_| Vec::with_capacity(self.subtables.len()))
            .collect();
        for (id, st) in self.subtables.iter_mut().enumerate() {
            let mine = usize::from(owner.get(id).copied().unwrap_or(0));
            let mut st = st.as_mut();
            for (t, share) in shares.iter_mut().enumerate() {
                share.push(if t == mine { st.take() } else { None });
            }
        }
        shares
    }

    /// Gives rule `old` (priority `prio`) at entry `entry` of subtable `id` handle `new` (see
    /// [`Classifier::insert_parallel`]); false if there is no such rule.
    pub(crate) fn rehandle(&mut self, id: u32, entry: u32, prio: u32, old: u32, new: u32) -> bool {
        match self.subtables.get_mut(id as usize) {
            Some(Some(st)) => st.rehandle(entry, prio, old, new),
            _ => false,
        }
    }

    /// Reads the bucket an insert of `key` into subtable `id` will start at, so that a group of
    /// inserts can have their (cache-missing) bucket reads in flight together: safe Rust has no
    /// prefetch, so the value is returned for the caller to fold into a
    /// [`core::hint::black_box`] sink.
    #[inline]
    pub(crate) fn touch(&self, id: u32, key: &FlowKey) -> u64 {
        match self.subtables.get(id as usize) {
            Some(Some(st)) => st.touch(key),
            _ => 0,
        }
    }

    /// Replays the insert of rule `handle` (record `r`), taking its key from `from`, the copy
    /// it was first applied to.
    #[inline]
    fn insert_record(&mut self, from: &Classifier, handle: u32, r: &RuleRecord) {
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

    /// The key of entry `entry` of subtable `id` (as a record names it).
    pub(crate) fn entry_key(&self, id: u32, entry: u32) -> Option<FlowKey> {
        self.subtables.get(id as usize)?.as_ref()?.entry_key(entry)
    }

    pub(crate) fn apply(&mut self, op: &Op) {
        match op {
            Op::NewSubtable { id, mask } => {
                let i = *id as usize;
                if self.subtables.len() <= i {
                    self.subtables.resize_with(i + 1, || None);
                }
                if let Some(s) = self.subtables.get_mut(i) {
                    *s = Some(Subtable::new(**mask));
                }
                self.dirty = true;
            }
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
                key,
                prio,
                handle,
            } => {
                if let Some(Some(st)) = self.subtables.get_mut(*id as usize) {
                    let before = st.max_prio();
                    if st.remove(key, *prio, *handle) {
                        self.rules -= 1;
                        if st.max_prio() != before {
                            self.dirty = true;
                        }
                    }
                }
            }
            Op::SetActions {
                id,
                key,
                prio,
                handle,
                action,
            } => {
                if let Some(Some(st)) = self.subtables.get_mut(*id as usize) {
                    st.set_actions(key, *prio, *handle, *action);
                }
            }
            Op::ActionList { id, list } => {
                let i = *id as usize;
                if self.actions.len() <= i {
                    self.actions.resize(i + 1, None);
                }
                if let Some(a) = self.actions.get_mut(i) {
                    a.clone_from(list);
                }
            }
            Op::Generation(g) => self.generation = *g,
            Op::InsertThreads(n) => self.insert_threads = *n,
        }
    }

    /// Re-sorts the subtables if a batch changed their maxima.
    /// Re-sorts the subtables if a batch changed their maxima, and rebuilds the filters (one per
    /// subtable: O(subtables), whatever the number of rules).
    pub(crate) fn finish_batch(&mut self) {
        if self.dirty {
            self.dirty = false;
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
        let subs = &self.subtables;
        self.filters.clear();
        self.filters.extend(self.order.iter().filter_map(|&id| {
            subs.get(id as usize)
                .and_then(|s| s.as_ref())
                .map(|s| s.filter(id))
        }));
    }

    /// Bytes of heap the hash tables hold (capacity of buckets and entries).
    pub fn table_bytes(&self) -> usize {
        self.subtables.iter().flatten().map(Subtable::bytes).sum()
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

impl Absorb<Op> for Classifier {
    type Context = [Option<RuleRecord>];

    fn absorb(&mut self, op: &Op, records: &[Option<RuleRecord>], published: &Classifier) {
        match op {
            Op::InsertRecorded { first, count } => {
                let start = *first as usize;
                let end = start.saturating_add(*count as usize);
                let run = records.get(start..end).unwrap_or(&[]);
                if self.insert_threads > 1 && run.len() >= crate::table::PARALLEL_MIN_BATCH {
                    return self.replay_parallel(published, run, *first, self.insert_threads);
                }
                let mut sink = 0u64;
                for (group, h0) in run.chunks(GROUP).zip((*first..).step_by(GROUP)) {
                    // Start every bucket read of the group, then insert.
                    for r in group.iter().flatten() {
                        if let (Some(Some(st)), Some(Some(src))) = (
                            self.subtables.get(r.mask_id as usize),
                            published.subtables.get(r.mask_id as usize),
                        ) {
                            sink ^= if r.bucket == JOINED {
                                st.touch_from(src, r.entry)
                            } else {
                                st.touch_pos(r.bucket)
                            };
                        }
                    }
                    for (h, r) in (h0..).zip(group) {
                        if let Some(r) = r {
                            self.insert_record(published, h, r);
                        }
                    }
                }
                core::hint::black_box(sink);
            }
            _ => self.apply(op),
        }
    }
    fn finish(&mut self) {
        self.finish_batch();
    }
}
