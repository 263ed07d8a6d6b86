//! A subtable's hash table ([`BucketTable`]): open addressing over 8-byte buckets in front of
//! an array of entries, and the rule a table stores ([`StoredRule`], its `rank`).
//!
//! A power-of-two array of buckets (the upper 32 bits of the key's hash, and the entry's index),
//! probed linearly from the bucket the hash's top bits select, at most half full. A probe reads
//! buckets until an empty one or one whose hash bits match; only then is an entry read and its
//! key compared. Inserting writes one bucket and appends (or reuses) one entry; growing or
//! deleting moves buckets without reading keys (a bucket's home is its stored hash bits).
//! Entry indices are stable while the entry lives, so both classifier copies, applying the same
//! operations in the same order, have the same layout ([`BucketTable::place`] relies on it).

use hashbrown::HashMap;

use super::hint::{prefetch, prefetch_all};
use crate::key::same_words;

/// A rule as a subtable stores it: priority, handle and action-list id (an entry holds its
/// best rule's, a side list the others').
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoredRule {
    pub(crate) prio: u32,
    pub(crate) handle: u32,
    /// Action-list id (an index into the copy's action table).
    pub(crate) action: u32,
}

impl StoredRule {
    #[inline]
    pub(super) fn rank(&self) -> u64 {
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
pub(super) fn rank_prio(r: u64) -> u32 {
    (r >> 32) as u32
}

#[inline(always)]
pub(super) fn rank_handle(r: u64) -> u32 {
    !(r as u32)
}

/// One distinct masked key of a subtable, with its best rule.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<const N: usize> {
    /// The mask's used words of the key, zero-padded to `N`.
    pub(super) key: [u64; N],
    /// The best rule's rank.
    pub(super) rank: u64,
    /// The best rule's action-list id.
    pub(super) action: u32,
}

/// Masks that use at most this many key words get the smallest entry (48 bytes).
pub(super) const SMALL: usize = 4;
/// Masks that use at most this many key words get the middle-sized entry (64 bytes).
pub(super) const NARROW: usize = 6;

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
pub(super) struct BucketTable<const N: usize> {
    /// 0: empty; else `(hash >> 32) << 32 | (entry index + 1)`.
    pub(super) buckets: Vec<u64>,
    /// `64 - log2(buckets.len())`: a hash's home bucket is `hash >> shift`.
    shift: u32,
    /// Entries by index; an index stays valid while its entry lives (freed places, rank 0, are
    /// reused last-freed first), so the writer's records can name entries, and both classifier
    /// copies, applying the same operations in the same order, agree on every index.
    pub(super) entries: Vec<Entry<N>>,
    /// Freed entry indices.
    free: Vec<u32>,
    /// Entry index → the other rules with that key, best first (usually empty).
    more: HashMap<u32, Vec<StoredRule>>,
}

impl<const N: usize> BucketTable<N> {
    pub(super) fn new() -> Self {
        BucketTable {
            buckets: vec![0; MIN_BUCKETS],
            shift: 64 - MIN_BUCKETS.trailing_zeros(),
            entries: Vec::new(),
            free: Vec::new(),
            more: HashMap::new(),
        }
    }

    /// Live entries.
    #[inline]
    pub(super) fn live(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    #[inline(always)]
    pub(super) fn home(&self, h: u64) -> usize {
        (h >> self.shift) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// The entry with key `g` (hash `h`).
    #[inline(always)]
    pub(super) fn lookup(&self, g: &[u64; N], h: u64) -> Option<&Entry<N>> {
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

    /// Asks for the home bucket of hash `h` to be brought into cache (a burst lookup's first
    /// pass, so the buckets of many keys are fetched at once).
    #[inline(always)]
    pub(super) fn prefetch_home(&self, h: u64) {
        if let Some(b) = self.buckets.get(self.home(h)) {
            prefetch(b);
        }
    }

    /// The index of the first entry whose bucket has hash `h`'s tag, on the probe sequence from
    /// its home (`u32::MAX` when an empty bucket comes first), with that entry asked into cache:
    /// a burst lookup's second pass. The third ([`BucketTable::lookup`]) then finds both in cache.
    #[inline(always)]
    pub(super) fn prefetch_entry(&self, h: u64) -> u32 {
        let mask = self.mask();
        let tag = h >> 32;
        let mut pos = self.home(h);
        while let Some(&b) = self.buckets.get(pos) {
            if b == 0 {
                break;
            }
            if b >> 32 == tag {
                let i = (b as u32).wrapping_sub(1);
                if let Some(e) = self.entries.get(i as usize) {
                    prefetch_all(e);
                }
                return i;
            }
            pos = (pos + 1) & mask;
        }
        u32::MAX
    }

    /// Whether `total` entries fit (at most half the buckets in use).
    #[inline(always)]
    fn fits(&self, total: usize) -> bool {
        total.saturating_mul(2) <= self.buckets.len()
    }

    /// Makes room for `total` entries (buckets at most half full) without rehashing on the way.
    pub(super) fn grow_for(&mut self, total: usize) {
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

    /// Inserts `rule` under key `g`: `Ok((index, bucket))` with the entry's index and, when a
    /// new entry was created, its bucket position (else [`JOINED`]); `Err(handle)` for a
    /// duplicate (same key and priority).
    #[inline]
    pub(super) fn insert(
        &mut self,
        g: &[u64; N],
        h: u64,
        rule: StoredRule,
    ) -> Result<(u32, u32), u32> {
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
                    return self.add_to(i, rule).map(|()| (i as u32, JOINED));
                }
            }
            pos = (pos + 1) & mask;
        }
        // Only a new entry may grow the table: a duplicate or a rule joining an entry is not
        // replayed as a fresh insert, so growing for one would leave the other classifier copy
        // smaller and the copies' layouts apart (`place` grows at the same point as this).
        if !self.fits(self.live() + 1) {
            self.grow_for(self.live() + 1);
            pos = self.home(h);
            while self.buckets.get(pos).is_some_and(|b| *b != 0) {
                pos = (pos + 1) & self.mask();
            }
        }
        let e = Entry {
            key: *g,
            rank: rule.rank(),
            action: rule.action,
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
    pub(super) fn place(
        &mut self,
        g: &[u64; N],
        h: u64,
        rule: StoredRule,
        idx: u32,
        pos: u32,
    ) -> bool {
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
            rank: rule.rank(),
            action: rule.action,
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

    /// [`BucketTable::insert`] for a key array of width `K` (the caller's generic width, which is
    /// always this table's `N`; any other width is refused).
    #[inline(always)]
    pub(super) fn insert_any<const K: usize>(
        &mut self,
        g: &[u64; K],
        h: u64,
        rule: StoredRule,
    ) -> Result<(u32, u32), u32> {
        if K != N {
            return Err(u32::MAX);
        }
        let mut w = [0u64; N];
        for (o, x) in w.iter_mut().zip(g) {
            *o = *x;
        }
        self.insert(&w, h, rule)
    }

    /// The key of entry `i`.
    pub(super) fn key_of(&self, i: u32) -> Option<&[u64; N]> {
        self.entries.get(i as usize).map(|e| &e.key)
    }

    /// Adds a rule to existing entry `i`.
    fn add_to(&mut self, i: usize, rule: StoredRule) -> Result<(), u32> {
        let Some(e) = self.entries.get_mut(i) else {
            return Ok(());
        };
        if rank_prio(e.rank) == rule.prio {
            return Err(rank_handle(e.rank));
        }
        let key = i as u32;
        if let Some(d) = self
            .more
            .get(&key)
            .and_then(|m| m.iter().find(|s| s.prio == rule.prio))
        {
            return Err(d.handle);
        }
        let more = self.more.entry(key).or_default();
        if rule.rank() > e.rank {
            let old = StoredRule {
                prio: rank_prio(e.rank),
                handle: rank_handle(e.rank),
                action: e.action,
            };
            more.insert(0, old);
            e.rank = rule.rank();
            e.action = rule.action;
        } else {
            let r = rule.rank();
            let pos = more.iter().position(|s| r > s.rank()).unwrap_or(more.len());
            more.insert(pos, rule);
        }
        Ok(())
    }

    /// Removes a rule of entry `i`, whose key hashes to `h`: `(removed, entry_gone)`. No key
    /// is compared: the entry is known, so its bucket is the one that names it.
    pub(super) fn remove_entry(&mut self, i: u32, h: u64, prio: u32, handle: u32) -> (bool, bool) {
        let mask = self.mask();
        let want = (h >> 32) << 32 | u64::from(i.wrapping_add(1));
        let mut pos = self.home(h);
        loop {
            match self.buckets.get(pos) {
                Some(&b) if b == want => return self.remove_at(pos, i as usize, prio, handle),
                Some(&b) if b != 0 => pos = (pos + 1) & mask,
                _ => return (false, false),
            }
        }
    }

    /// Removes the rule of priority `prio` and handle `handle` from entry `i`, whose bucket is
    /// `pos`: `(removed, entry_gone)`.
    fn remove_at(&mut self, pos: usize, i: usize, prio: u32, handle: u32) -> (bool, bool) {
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

    /// Gives the rule of priority `prio` and handle `handle` at entry `i` action list `action`.
    pub(super) fn set_action(&mut self, i: usize, prio: u32, handle: u32, action: u32) {
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
    pub(super) fn rehandle(&mut self, i: u32, prio: u32, old: u32, new: u32) -> bool {
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
    pub(super) fn find_prio(&self, g: &[u64; N], h: u64, prio: u32) -> Option<u32> {
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

    pub(super) fn bytes(&self) -> usize {
        self.buckets.capacity() * 8
            + self.entries.capacity() * core::mem::size_of::<Entry<N>>()
            + self.free.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prio: u32, handle: u32) -> StoredRule {
        StoredRule {
            prio,
            handle,
            action: 0,
        }
    }

    /// Only a fresh entry grows the table. A duplicate or a rule joining an existing entry is
    /// not replayed on the other classifier copy as a fresh insert, so growing for one put the
    /// copies' layouts apart (found by `classifier_vs_linear`: a duplicate at the threshold
    /// grew one copy to 16 buckets while the other stayed at 8).
    #[test]
    fn only_a_new_entry_grows_the_table() {
        let mut t = BucketTable::<SMALL>::new();
        let key = |k: u64| [k, 0, 0, 0];
        let hash = |k: u64| k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for k in 1..=4 {
            assert!(t.insert(&key(k), hash(k), rule(1, k as u32)).is_ok());
        }
        assert_eq!((t.live(), t.buckets.len()), (4, MIN_BUCKETS), "half full");
        assert_eq!(
            t.insert(&key(1), hash(1), rule(1, 9)),
            Err(1),
            "a duplicate"
        );
        assert_eq!(t.buckets.len(), MIN_BUCKETS, "a duplicate does not grow it");
        assert_eq!(
            t.insert(&key(2), hash(2), rule(5, 10)).map(|(_, pos)| pos),
            Ok(JOINED)
        );
        assert_eq!(
            t.buckets.len(),
            MIN_BUCKETS,
            "joining an entry does not grow it"
        );
        let (i, pos) = t.insert(&key(5), hash(5), rule(1, 11)).expect("a new key");
        assert_eq!(t.buckets.len(), 2 * MIN_BUCKETS, "a fifth entry does");
        // The bucket returned is the new entry's, in the grown table, reachable from its home.
        assert_eq!(t.buckets[pos as usize] as u32, i + 1);
        assert_eq!(
            t.lookup(&key(5), hash(5)).map(|e| e.rank),
            Some(rank(1, 11))
        );
        for k in 1..=4 {
            assert!(
                t.lookup(&key(k), hash(k)).is_some(),
                "key {k} after the growth"
            );
        }
    }
}
