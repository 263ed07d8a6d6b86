//! The writer's registries: the handle allocator ([`Idr`]), the mask registry (mask →
//! subtable id, reference counted) and the action-list interner, with the multiply-fold hasher
//! their maps use.

use core::hash::{BuildHasherDefault, Hasher};

use hashbrown::HashMap;

use crate::action::ActionList;
use crate::classifier::{Classifier, Op};
use crate::key::Mask;

/// An IDR-like handle allocator: small integers, the most recently freed reused first (LIFO),
/// O(1) both ways.
#[derive(Debug, Clone, Default)]
pub struct Idr {
    pub(super) free: Vec<u32>,
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
pub(crate) struct FoldHasher(u64);

impl Hasher for FoldHasher {
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

/// A hash map with the [`FoldHasher`].
pub(super) type FoldMap<K, V> = HashMap<K, V, BuildHasherDefault<FoldHasher>>;

/// The mask registry: mask → subtable id, with the rules using each.
#[derive(Debug)]
pub(super) struct Masks {
    pub(super) by_mask: FoldMap<Mask, u32>,
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
    #[inline]
    pub(super) fn find(&mut self, mask: &Mask) -> Option<u32> {
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

    pub(super) fn alloc(&mut self, mask: Mask) -> u32 {
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

    #[inline]
    pub(super) fn mask(&self, id: u32) -> Option<&Mask> {
        self.slots
            .get(id as usize)
            .and_then(|s| s.as_ref())
            .map(|(m, _)| m)
    }

    #[inline]
    pub(super) fn incref(&mut self, id: u32) {
        if let Some(Some((_, n))) = self.slots.get_mut(id as usize) {
            *n += 1;
        }
    }

    pub(super) fn is_unused(&self, id: u32) -> bool {
        matches!(self.slots.get(id as usize), Some(Some((_, 0))))
    }

    /// Frees an unused mask; returns whether it was freed.
    pub(super) fn release(&mut self, id: u32) -> bool {
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
    pub(super) fn decref(&mut self, id: u32) -> bool {
        match self.slots.get_mut(id as usize) {
            Some(Some((_, n))) if *n > 0 => *n -= 1,
            _ => return false,
        }
        self.release(id)
    }
}

/// Interned action lists, reference counted by the writer with plain integers.
#[derive(Debug, Default)]
pub(super) struct ActionLists {
    by_list: FoldMap<ActionList, u32>,
    /// (list, rules using it) by id.
    slots: Vec<Option<(ActionList, usize)>>,
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
    pub(super) fn list(&self, id: u32) -> Option<&ActionList> {
        self.slots.get(id as usize)?.as_ref().map(|(a, _)| a)
    }

    /// The id of `a` (defining it in `cls` if new), with one more reference.
    ///
    /// Looked up first by the address of `a`'s allocation (the last list, then
    /// [`ActionLists::by_addr`]: no hashing), then by its hash ([`ActionLists::recent`], then
    /// the map); a list found by hash or defined is remembered in both caches.
    pub(super) fn intern_ref(
        &mut self,
        a: &ActionList,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
    ) -> u32 {
        let place = (a.addr() >> 4) & (BY_ADDR - 1);
        let id = match self.find_by_addr(a, place) {
            Some(id) => id,
            None => {
                let mut h = FoldHasher::default();
                core::hash::Hash::hash(a, &mut h);
                let fp = h.finish();
                let id = match self.find_by_hash(a, fp) {
                    Some(id) => id,
                    None => match self.by_list.get(a) {
                        Some(id) => *id,
                        None => self.define(a, cls, ops),
                    },
                };
                self.remember(a, place, fp, id);
                id
            }
        };
        self.last = Some(id);
        if let Some(Some((_, n))) = self.slots.get_mut(id as usize) {
            *n += 1;
        }
        id
    }

    /// The id of the list that shares `a`'s allocation: the last list interned, or the one
    /// [`ActionLists::by_addr`] holds at `place`.
    #[inline(always)]
    fn find_by_addr(&self, a: &ActionList, place: usize) -> Option<u32> {
        let same = |id: u32| self.list(id).is_some_and(|x| x.ptr_eq(a));
        if let Some(l) = self.last.filter(|l| same(*l)) {
            return Some(l);
        }
        let &(addr, id1) = self.by_addr.get(place)?;
        if addr == a.addr() && id1 != 0 {
            return Some(id1 - 1).filter(|&id| same(id));
        }
        None
    }

    /// The id [`ActionLists::recent`] holds for hash `fp`, if its list equals `a`.
    #[inline(always)]
    fn find_by_hash(&mut self, a: &ActionList, fp: u64) -> Option<u32> {
        if self.recent.is_empty() {
            self.recent = vec![(0, 0); RECENT];
        }
        let &(f, id1) = self.recent.get(fp as usize & (RECENT - 1))?;
        if f == fp && id1 != 0 {
            let id = id1 - 1;
            if self.list(id).is_some_and(|x| x.ptr_eq(a) || x == a) {
                return Some(id);
            }
        }
        None
    }

    /// Defines a new list `a` (no reference yet), in the interner and in `cls`.
    fn define(&mut self, a: &ActionList, cls: &mut Classifier, ops: &mut Vec<Op>) -> u32 {
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

    /// Remembers list `id` (`a`, hash `fp`) in both caches.
    #[inline(always)]
    fn remember(&mut self, a: &ActionList, place: usize, fp: u64, id: u32) {
        if let Some(r) = self.recent.get_mut(fp as usize & (RECENT - 1)) {
            *r = (fp, id + 1);
        }
        if self.by_addr.is_empty() {
            self.by_addr = vec![(0, 0); BY_ADDR];
        }
        if let Some(r) = self.by_addr.get_mut(place) {
            *r = (a.addr(), id + 1);
        }
    }

    pub(super) fn intern(&mut self, a: ActionList, cls: &mut Classifier, ops: &mut Vec<Op>) -> u32 {
        self.intern_ref(&a, cls, ops)
    }

    /// Drops one reference; forgets the list when unused.
    pub(super) fn release(&mut self, id: u32, cls: &mut Classifier, ops: &mut Vec<Op>) {
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
