//! One copy of the classifier: tuple-space search over one hash table per distinct mask.
//!
//! Subtables are kept sorted by their highest rule priority (then by mask id), so a lookup stops
//! as soon as the best match found has a priority above the next subtable's maximum. Inside a
//! subtable, one hash-table entry per masked key holds every rule with that match, highest
//! priority first (priorities there are distinct: equal match and priority is a duplicate).
//!
//! Each subtable reads only the key words its mask uses (packed, hashed with one multiply-fold per
//! word). Lookups are staged: the words other than the L4 one are hashed first and checked
//! against the subtable's set of such hashes (a linear scan while it has at most four), so a
//! subtable none of whose rules shares the packet's addresses and protocol costs no table probe.
//! [`Classifier::lookup_batch`] probes each subtable for a burst of keys in two passes (hash and
//! find the candidate bucket for every key, then read the candidates), so the cache misses of
//! different keys overlap.
//!
//! Ties between equal-priority rules of different subtables go to the lowest handle, so the
//! winner depends only on the table's contents, never on hash or insertion order.
//!
//! A copy is changed only through operations (`Op`), so the writer can replay the same log on the other
//! copy (see [`crate::publish`]).

use hashbrown::{HashMap, HashTable};

use crate::action::Actions;
use crate::key::{same_words, FlowKey, Mask, KEY_WORDS};
use crate::publish::Absorb;

/// A rule as a subtable stores it.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) prio: u32,
    pub(crate) handle: u32,
    /// Action-list id (an index into the copy's action table).
    pub(crate) action: u32,
}

/// Entries keep only the mask's used words (masked, zero-padded to `N`), so most subtables
/// store 32- or 48-byte keys.
#[derive(Debug, Clone)]
struct Entry<const N: usize> {
    key: [u64; N],
    /// The highest-priority rule with this match.
    top: Slot,
    /// The others, highest priority first (usually none: no allocation).
    #[allow(clippy::box_collection)] // 8 bytes in every entry instead of 24 for a rare list
    more: Option<Box<Vec<Slot>>>,
}

/// Bytes of one entry of a mask that uses up to six key words (the quota's estimate; masks of up
/// to four words cost less, wider ones more).
pub(crate) const ENTRY_BYTES: usize = core::mem::size_of::<Entry<NARROW>>();

/// Masks that use at most this many key words get the smallest entry.
const SMALL: usize = 4;
/// Masks that use at most this many key words get the middle-sized entry.
const NARROW: usize = 6;

#[derive(Debug, Clone)]
enum Tbl {
    Small(HashTable<Entry<SMALL>>),
    Narrow(HashTable<Entry<NARROW>>),
    Wide(HashTable<Entry<KEY_WORDS>>),
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

/// The key word that holds the L4 ports (and tunnel id): hashed last, after the stage check.
const L4_WORD: usize = 4;

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

    /// [`Sel::pack`], with the hash of the stage-one words and the hash of all `N` words.
    #[inline(always)]
    fn gather<const N: usize>(&self, key: &FlowKey) -> ([u64; N], u64, u64) {
        let g = self.pack::<N>(key);
        let (one, two) = g.split_at(usize::from(self.s).min(N));
        let mut h = K0;
        for w in one {
            h = fold_mul(h ^ w, K1);
        }
        let hs = avalanche(h);
        for w in two {
            h = fold_mul(h ^ w, K1);
        }
        (g, hs, avalanche(h))
    }
}

/// Rules sharing one mask.
#[derive(Debug, Clone)]
pub(crate) struct Subtable {
    sel: Sel,
    max_prio: u32,
    /// Rules per priority (to recompute `max_prio` after a removal).
    prios: HashMap<u32, u32>,
    rules: usize,
    /// Stage filter: hash of the stage-one words → entries with those words.
    stage: HashTable<(u64, u32)>,
    /// The stage filter's hashes while it has at most [`FEW`] (padded with repeats).
    few: [u64; FEW],
    tbl: Tbl,
}

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Final avalanche: hashbrown takes bucket bits from the bottom and tag bits from the top, and
/// the exact-match cache indexes with the bottom bits.
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

/// The hash [`Sel::gather`] gives for a packed key (what a table rehashes with).
#[inline]
fn hash_fixed<const N: usize>(w: &[u64; N]) -> u64 {
    hash_words(w)
}

/// Whether `a` beats `b` (see [`better`]).
#[inline]
fn beats(a: &Slot, b: &Slot) -> bool {
    better(a.prio, a.handle, b.prio, b.handle)
}

#[inline(always)]
fn probe<'a, const N: usize>(
    t: &'a HashTable<Entry<N>>,
    g: &[u64; N],
    h: u64,
) -> Option<&'a Entry<N>> {
    t.find(h, |e| same_words(&e.key, g))
}

/// Inserts `slot` under key `g`: `Ok(true)` when a new entry was created, `Err(handle)` for a
/// duplicate (same key and priority).
fn insert_entry<const N: usize>(
    t: &mut HashTable<Entry<N>>,
    g: [u64; N],
    h: u64,
    slot: Slot,
) -> Result<bool, u32> {
    match t.entry(h, |e| same_words(&e.key, &g), |e| hash_fixed(&e.key)) {
        hashbrown::hash_table::Entry::Occupied(mut o) => {
            let e = o.get_mut();
            let all = core::iter::once(&e.top).chain(e.more.iter().flat_map(|m| m.iter()));
            if let Some(d) = all.into_iter().find(|s| s.prio == slot.prio) {
                return Err(d.handle);
            }
            let more = e.more.get_or_insert_with(Default::default);
            if beats(&slot, &e.top) {
                let old = core::mem::replace(&mut e.top, slot);
                more.insert(0, old);
            } else {
                let pos = more
                    .iter()
                    .position(|s| beats(&slot, s))
                    .unwrap_or(more.len());
                more.insert(pos, slot);
            }
            Ok(false)
        }
        hashbrown::hash_table::Entry::Vacant(v) => {
            v.insert(Entry {
                key: g,
                top: slot,
                more: None,
            });
            Ok(true)
        }
    }
}

/// Removes a rule: `(removed, entry_gone)`.
fn remove_entry<const N: usize>(
    t: &mut HashTable<Entry<N>>,
    g: &[u64; N],
    h: u64,
    prio: u32,
    handle: u32,
) -> (bool, bool) {
    let Ok(mut occ) = t.find_entry(h, |e| same_words(&e.key, g)) else {
        return (false, false);
    };
    let e = occ.get_mut();
    if e.top.prio == prio && e.top.handle == handle {
        match e.more.as_mut().filter(|m| !m.is_empty()) {
            Some(m) => {
                e.top = m.remove(0);
                if m.is_empty() {
                    e.more = None;
                }
            }
            None => {
                occ.remove();
                return (true, true);
            }
        }
        return (true, false);
    }
    if let Some(m) = e.more.as_mut() {
        if let Some(pos) = m.iter().position(|s| s.prio == prio && s.handle == handle) {
            m.remove(pos);
            if m.is_empty() {
                e.more = None;
            }
            return (true, false);
        }
    }
    (false, false)
}

fn slot_mut<'a, const N: usize>(
    t: &'a mut HashTable<Entry<N>>,
    g: &[u64; N],
    h: u64,
    prio: u32,
    handle: u32,
) -> Option<&'a mut Slot> {
    let e = t.find_mut(h, |e| same_words(&e.key, g))?;
    core::iter::once(&mut e.top)
        .chain(e.more.iter_mut().flat_map(|m| m.iter_mut()))
        .find(|s| s.prio == prio && s.handle == handle)
}

fn find_prio<const N: usize>(e: &Entry<N>, prio: u32) -> Option<&Slot> {
    core::iter::once(&e.top)
        .chain(e.more.iter().flat_map(|m| m.iter()))
        .find(|s| s.prio == prio)
}

impl Subtable {
    fn new(mask: Mask) -> Self {
        let sel = Sel::new(&mask);
        let n = usize::from(sel.n);
        let tbl = if n <= SMALL {
            Tbl::Small(HashTable::new())
        } else if n <= NARROW {
            Tbl::Narrow(HashTable::new())
        } else {
            Tbl::Wide(HashTable::new())
        };
        Subtable {
            sel,
            max_prio: 0,
            prios: HashMap::new(),
            rules: 0,
            stage: HashTable::new(),
            few: [0; FEW],
            tbl,
        }
    }

    fn entries(&self) -> usize {
        with_tbl!(&self.tbl, t, N => t.len())
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

    fn stage_add(&mut self, hs: u64) {
        if self.sel.s == 0 {
            return;
        }
        match self.stage.entry(hs, |e| e.0 == hs, |e| e.0) {
            hashbrown::hash_table::Entry::Occupied(mut o) => o.get_mut().1 += 1,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert((hs, 1));
                self.refresh_few();
            }
        }
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
            }
        }
    }

    #[inline(always)]
    fn find(&self, key: &FlowKey) -> Option<&Slot> {
        with_tbl!(&self.tbl, t, N => {
            let g = self.sel.pack::<N>(key);
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
            probe(t, &g, avalanche(h)).map(|e| &e.top)
        })
    }

    /// Probes this subtable for a burst of keys, updating each key's best slot. Two passes: the
    /// first hashes every key and finds its candidate bucket, the second reads the candidates,
    /// so the (usually cache-missing) entry reads of different keys overlap.
    #[inline(always)]
    fn probe_burst<'a>(&'a self, keys: &[FlowKey], best: &mut [Option<&'a Slot>]) {
        with_tbl!(&self.tbl, t, N => {
            let mut gs = [[0u64; N]; BURST];
            let mut hs = [0u64; BURST];
            let mut cand: [Option<&Entry<N>>; BURST] = [None; BURST];
            let s = usize::from(self.sel.s).min(N);
            for (((key, b), (g, hx)), c) in keys
                .iter()
                .zip(best.iter())
                .zip(gs.iter_mut().zip(hs.iter_mut()))
                .zip(cand.iter_mut())
            {
                if b.is_some_and(|b| b.prio > self.max_prio) {
                    continue;
                }
                *g = self.sel.pack::<N>(key);
                let (one, two) = g.split_at(s);
                let mut h = K0;
                for w in one {
                    h = fold_mul(h ^ w, K1);
                }
                if !self.stage_may_match(avalanche(h)) {
                    continue;
                }
                for w in two {
                    h = fold_mul(h ^ w, K1);
                }
                let h = avalanche(h);
                *hx = h;
                *c = t.iter_hash(h).next();
            }
            for (((b, g), h), c) in best.iter_mut().zip(&gs).zip(&hs).zip(&cand) {
                let Some(e) = c else { continue };
                let hit = if same_words(&e.key, g) {
                    Some(*e)
                } else {
                    probe(t, g, *h)
                };
                if let Some(e) = hit {
                    let s = &e.top;
                    match b {
                        Some(x) if !better(s.prio, s.handle, x.prio, x.handle) => {}
                        _ => *b = Some(s),
                    }
                }
            }
        })
    }

    fn find_exact(&self, key: &FlowKey, prio: u32) -> Option<&Slot> {
        with_tbl!(&self.tbl, t, N => {
            let (g, _, h) = self.sel.gather::<N>(key);
            probe(t, &g, h).and_then(|e| find_prio(e, prio))
        })
    }

    /// Inserts unless a rule with the same key and priority exists (its handle is the error).
    fn insert(&mut self, key: &FlowKey, slot: Slot) -> Result<(), u32> {
        let prio = slot.prio;
        let (fresh, hs) = with_tbl!(&mut self.tbl, t, N => {
            let (g, hs, h) = self.sel.gather::<N>(key);
            (insert_entry(t, g, h, slot)?, hs)
        });
        if fresh {
            self.stage_add(hs);
        }
        *self.prios.entry(prio).or_insert(0) += 1;
        self.max_prio = if self.rules == 0 {
            prio
        } else {
            self.max_prio.max(prio)
        };
        self.rules += 1;
        Ok(())
    }

    fn remove(&mut self, key: &FlowKey, prio: u32, handle: u32) -> bool {
        let ((removed, gone), hs) = with_tbl!(&mut self.tbl, t, N => {
            let (g, hs, h) = self.sel.gather::<N>(key);
            (remove_entry(t, &g, h, prio, handle), hs)
        });
        if !removed {
            return false;
        }
        if gone {
            self.stage_remove(hs);
        }
        self.rules -= 1;
        if let Some(c) = self.prios.get_mut(&prio) {
            *c -= 1;
            if *c == 0 {
                self.prios.remove(&prio);
                if prio == self.max_prio {
                    self.max_prio = self.prios.keys().copied().max().unwrap_or(0);
                }
            }
        }
        true
    }

    fn set_actions(&mut self, key: &FlowKey, prio: u32, handle: u32, action: u32) {
        let slot = with_tbl!(&mut self.tbl, t, N => {
            let (g, _, h) = self.sel.gather::<N>(key);
            slot_mut(t, &g, h, prio, handle)
        });
        if let Some(s) = slot {
            s.action = action;
        }
    }

    fn reserve(&mut self, additional: usize) {
        with_tbl!(&mut self.tbl, t, N => t.reserve(additional, |e| hash_fixed(&e.key)))
    }

    fn bytes(&self) -> usize {
        with_tbl!(&self.tbl, t, N => t.capacity() * (core::mem::size_of::<Entry<N>>() + 1))
    }

    /// The full hash of `key` and the table's capacity.
    fn hash_and_capacity(&self, key: &FlowKey) -> (u64, usize) {
        with_tbl!(&self.tbl, t, N => (self.sel.gather::<N>(key).2, t.capacity()))
    }
}

/// Whether rule (p1, h1) beats (p2, h2): higher priority, then lower handle.
#[inline]
pub(crate) fn better(p1: u32, h1: u32, p2: u32, h2: u32) -> bool {
    p1 > p2 || (p1 == p2 && h1 < h2)
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
    /// Adds the rule the writer's record for `handle` describes (replay only: the first copy
    /// gets the rule through [`Classifier::insert`], and the record is unchanged until the replay).
    InsertRecorded { handle: u32 },
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
}

/// One copy of the whole classifier.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    subtables: Vec<Option<Subtable>>,
    /// Action lists by id: rules store a `u32`, so inserting one touches no reference count.
    actions: Vec<Option<Actions>>,
    /// Mask ids, best `max_prio` first (then by id).
    order: Vec<u32>,
    rules: usize,
    generation: u64,
    dirty: bool,
}

const NO_RULE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, Default)]
struct CacheEntry {
    key: FlowKey,
    handle: u32,
    prio: u32,
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
    /// A cache of about `entries` entries (rounded up to a power of two, at least 4; about 160
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
        let s = self.best(key)?;
        Some(HitRef {
            handle: crate::Handle(s.handle),
            priority: s.prio,
            actions: self.actions.get(s.action as usize)?.as_ref()?,
        })
    }

    #[inline]
    fn best(&self, key: &FlowKey) -> Option<&Slot> {
        let mut best: Option<&Slot> = None;
        for &id in &self.order {
            let Some(Some(st)) = self.subtables.get(id as usize) else {
                continue;
            };
            if let Some(b) = best {
                if b.prio > st.max_prio {
                    break;
                }
            }
            if let Some(s) = st.find(key) {
                match best {
                    Some(b) if !better(s.prio, s.handle, b.prio, b.handle) => {}
                    _ => best = Some(s),
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
        for chunk in keys.chunks(BURST) {
            let mut best: [Option<&Slot>; BURST] = [None; BURST];
            let best = best.get_mut(..chunk.len()).unwrap_or(&mut []);
            for &id in &self.order {
                let Some(Some(st)) = self.subtables.get(id as usize) else {
                    continue;
                };
                st.probe_burst(chunk, best);
            }
            out.extend(best.iter().map(|s| {
                s.and_then(|s| {
                    Some(HitRef {
                        handle: crate::Handle(s.handle),
                        priority: s.prio,
                        actions: self.actions.get(s.action as usize)?.as_ref()?,
                    })
                })
            }));
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
        let (handle, prio, action) = match found {
            Some(e) => {
                cache.hits += 1;
                (e.handle, e.prio, e.action)
            }
            None => {
                cache.misses += 1;
                let best = self.best(key);
                let e = CacheEntry {
                    key: *key,
                    handle: best.map_or(NO_RULE, |s| s.handle),
                    prio: best.map_or(0, |s| s.prio),
                    action: best.map_or(0, |s| s.action),
                };
                cache.insert(set, tag, e);
                (e.handle, e.prio, e.action)
            }
        };
        if handle == NO_RULE {
            return None;
        }
        Some(HitRef {
            handle: crate::Handle(handle),
            priority: prio,
            actions: self.actions.get(action as usize)?.as_ref()?,
        })
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
        st.find_exact(key, prio).map(|s| s.handle)
    }

    /// Inserts a rule into subtable `id`, unless one with the same key and priority exists (the
    /// error is its handle).
    pub(crate) fn insert(&mut self, id: u32, key: &FlowKey, slot: Slot) -> Result<(), u32> {
        let Some(Some(st)) = self.subtables.get_mut(id as usize) else {
            return Ok(());
        };
        let before = st.max_prio;
        let was_empty = st.rules == 0;
        st.insert(key, slot)?;
        self.rules += 1;
        if was_empty || st.max_prio != before {
            self.dirty = true;
        }
        Ok(())
    }

    /// A record's key back, unpacked by subtable `id` (which must be the record's).
    pub(crate) fn unpack_key(&self, id: u32, key: &PackedKey) -> FlowKey {
        match self.subtables.get(id as usize) {
            Some(Some(st)) => key.unpack_with(&st.sel),
            _ => key.unpack_with(&Sel::new(&FlowKey::ZERO)),
        }
    }

    /// `key` packed for the writer's record of a rule in subtable `id` (see [`PackedKey`]).
    pub(crate) fn pack_key(&self, id: u32, key: &FlowKey) -> PackedKey {
        match self.subtables.get(id as usize) {
            Some(Some(st)) => PackedKey::new_with(&st.sel, key),
            _ => PackedKey::Full(Box::new(*key)),
        }
    }

    /// The bucket index `key` hashes to in subtable `id`, and log2 of its bucket count.
    pub(crate) fn bucket_of(&self, id: u32, key: &FlowKey) -> Option<(usize, u32)> {
        let st = self.subtables.get(id as usize)?.as_ref()?;
        let (h, cap) = st.hash_and_capacity(key);
        // hashbrown keeps 7/8 of its (power-of-two) buckets usable.
        let buckets = (cap.saturating_mul(8) / 7).max(1).next_power_of_two();
        let log = buckets.trailing_zeros();
        Some(((h as usize) & (buckets - 1), log))
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
                    let before = st.max_prio;
                    if st.remove(key, *prio, *handle) {
                        self.rules -= 1;
                        if st.max_prio != before {
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
        }
    }

    /// Re-sorts the subtables if a batch changed their maxima.
    pub(crate) fn finish_batch(&mut self) {
        if !self.dirty {
            return;
        }
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
                .map_or(0, |s| s.max_prio)
        };
        order.sort_by(|a, b| max(*b).cmp(&max(*a)).then(a.cmp(b)));
        self.order = order;
    }

    /// Bytes of heap the hash tables hold (capacity, both entry and control bytes).
    pub fn table_bytes(&self) -> usize {
        self.subtables.iter().flatten().map(Subtable::bytes).sum()
    }
}

/// A rule's key as the writer keeps it: the mask's used words in the subtable's order (the key is
/// within its mask, so nothing is lost), or the whole key for masks wider than six words.
#[derive(Debug, Clone)]
pub(crate) enum PackedKey {
    Inline([u64; NARROW]),
    Full(Box<FlowKey>),
}

impl PackedKey {
    fn new_with(sel: &Sel, key: &FlowKey) -> Self {
        if usize::from(sel.n) <= NARROW {
            PackedKey::Inline(sel.pack::<NARROW>(key))
        } else {
            PackedKey::Full(Box::new(*key))
        }
    }

    /// The key back (`mask` is the one it was packed with).
    pub(crate) fn unpack(&self, mask: &Mask) -> FlowKey {
        self.unpack_with(&Sel::new(mask))
    }

    fn unpack_with(&self, sel: &Sel) -> FlowKey {
        match self {
            PackedKey::Full(k) => **k,
            PackedKey::Inline(w) => {
                let mut out = [0u64; KEY_WORDS];
                for (&i, &x) in sel.idx.iter().zip(w).take(usize::from(sel.n)) {
                    if let Some(o) = out.get_mut(usize::from(i)) {
                        *o = x;
                    }
                }
                FlowKey::from_words(out)
            }
        }
    }
}

/// What the writer remembers of a rule, by handle; also what an insert is replayed from.
#[derive(Debug, Clone)]
pub(crate) struct RuleRecord {
    pub(crate) mask_id: u32,
    pub(crate) priority: u32,
    pub(crate) action: u32,
    /// The key, packed by its mask (72 bytes per record instead of 120).
    pub(crate) key: PackedKey,
}

impl Absorb<Op> for Classifier {
    type Context = [Option<RuleRecord>];

    fn absorb(&mut self, op: &Op, records: &[Option<RuleRecord>]) {
        match op {
            Op::InsertRecorded { handle } => {
                if let Some(Some(r)) = records.get(*handle as usize) {
                    let slot = Slot {
                        prio: r.priority,
                        handle: *handle,
                        action: r.action,
                    };
                    let Some(Some(st)) = self.subtables.get(r.mask_id as usize) else {
                        return;
                    };
                    let key = r.key.unpack_with(&st.sel);
                    let _ = self.insert(r.mask_id, &key, slot);
                }
            }
            _ => self.apply(op),
        }
    }
    fn finish(&mut self) {
        self.finish_batch();
    }
}
