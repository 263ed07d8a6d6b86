//! Rules sharing one mask ([`Subtable`]): its [`KeySelector`], a [`BucketTable`] of the key
//! width the mask needs (4, 6 or 13 words), the exact highest priority it holds, its stage
//! filter, and the small branch-free [`Filter`] a lookup evaluates before touching it.

use std::collections::BTreeMap;

use hashbrown::HashTable;

use super::bucket_table::{BucketTable, StoredRule, JOINED, NARROW, SMALL};
use super::hint::{prefetch, prefetch_all};
use super::key_select::{avalanche, fold_mul, hash_words, KeySelector, K0, K1, L4_WORD};
use crate::key::{same_words, FlowKey, Mask, KEY_WORDS};

/// A subtable's hash table, of the key width its mask needs.
#[derive(Debug, Clone)]
enum KeyTable {
    Small(BucketTable<SMALL>),
    Narrow(BucketTable<NARROW>),
    Wide(BucketTable<KEY_WORDS>),
}

/// Runs `$body` with `$t` bound to the subtable's hash table and `$n` to its key width (a
/// `const` usable as a generic argument).
macro_rules! with_table {
    ($table:expr, $t:ident, $n:ident => $body:expr) => {
        match $table {
            KeyTable::Small($t) => {
                #[allow(dead_code)]
                const $n: usize = SMALL;
                $body
            }
            KeyTable::Narrow($t) => {
                #[allow(dead_code)]
                const $n: usize = NARROW;
                $body
            }
            KeyTable::Wide($t) => {
                #[allow(dead_code)]
                const $n: usize = KEY_WORDS;
                $body
            }
        }
    };
}

/// Keys a burst lookup handles per pass.
pub(super) const BURST: usize = 32;

/// One subtable's part of a burst probe between its stages: the keys to probe (`ks`), their
/// hashes and their first candidate entries.
#[derive(Debug, Clone, Copy)]
pub(super) struct BurstStage {
    hs: [u64; BURST],
    ks: [u8; BURST],
    es: [u32; BURST],
    n: usize,
}

impl Default for BurstStage {
    fn default() -> Self {
        BurstStage {
            hs: [0; BURST],
            ks: [0; BURST],
            es: [u32::MAX; BURST],
            n: 0,
        }
    }
}

/// Stage filters with at most this many partial hashes are checked by a linear scan.
const FEW: usize = 4;

/// [`BucketTable::place`] of entry `i` of `from` into `t` (tables of one width); the stage hash
/// and the packed words (padded to [`KEY_WORDS`]) when placed.
#[inline(always)]
fn place_one<const N: usize>(
    sel: &KeySelector,
    from: &BucketTable<N>,
    t: &mut BucketTable<N>,
    i: u32,
    pos: u32,
    rule: StoredRule,
) -> Option<(u64, [u64; KEY_WORDS])> {
    let g = *from.key_of(i)?;
    let (hs, h) = sel.hashes(&g);
    if !t.place(&g, h, rule, i, pos) {
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
struct PriorityCounts {
    low: Vec<u32>,
    high: BTreeMap<u32, u32>,
    max: u32,
    count: usize,
}

const LOW_PRIOS: u32 = 4096;

impl PriorityCounts {
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
pub(super) struct Subtable {
    sel: KeySelector,
    priorities: PriorityCounts,
    /// Stage filter: hash of the stage-one words → entries with those words.
    stage: HashTable<(u64, u32)>,
    /// The stage filter's hashes while it has at most [`FEW`] (padded with repeats).
    few: [u64; FEW],
    /// Whether every entry has the same stage-one words, `one` (the common case of a subtable
    /// whose rules differ only in the L4 word): the stage check is then an exact comparison, with
    /// no hashing. Set when the filter goes from empty to one value; cleared when it changes, or
    /// when an entry with other stage words is added under the same hash.
    single: bool,
    /// The stage-one words of every entry while `single` (packed; zero past the stage).
    one: [u64; KEY_WORDS],
    /// All ones for the packed positions of stage one, zero after.
    one_sel: [u64; KEY_WORDS],
    /// The key hash's state after folding `one`'s stage-one words (before the avalanche), while
    /// `single`: a key known to have those words is hashed from here, its later words only
    /// ([`Subtable::known_stage`]).
    one_hash: u64,
    /// The mask of the L4 word (the word after the stage).
    l4_mask: u64,
    /// `l4_mask` at the L4 word's packed position (the one after the stage), zero elsewhere.
    l4_at: [u64; KEY_WORDS],
    table: KeyTable,
}
impl Subtable {
    pub(super) fn new(mask: Mask) -> Self {
        let sel = KeySelector::new(&mask);
        let n = usize::from(sel.used);
        let table = if n <= SMALL {
            KeyTable::Small(BucketTable::new())
        } else if n <= NARROW {
            KeyTable::Narrow(BucketTable::new())
        } else {
            KeyTable::Wide(BucketTable::new())
        };
        let l4_mask = mask.words().get(L4_WORD).copied().unwrap_or(0);
        let mut l4_at = [0u64; KEY_WORDS];
        if sel.stage_words > 0 {
            if let Some(o) = l4_at.get_mut(usize::from(sel.stage_words)) {
                *o = l4_mask;
            }
        }
        let mut one_sel = [0u64; KEY_WORDS];
        for x in one_sel.iter_mut().take(usize::from(sel.stage_words)) {
            *x = u64::MAX;
        }
        Subtable {
            sel,
            priorities: PriorityCounts::default(),
            stage: HashTable::new(),
            few: [0; FEW],
            single: false,
            one: [0; KEY_WORDS],
            one_sel,
            one_hash: K0,
            l4_mask,
            l4_at,
            table,
        }
    }

    #[inline(always)]
    pub(super) fn max_prio(&self) -> u32 {
        self.priorities.max
    }

    pub(super) fn rules(&self) -> usize {
        self.priorities.count
    }

    fn entries(&self) -> usize {
        with_table!(&self.table, t, N => t.live())
    }

    /// Whether some entry has the stage-one words whose hash is `hs` (a cheap reject of the
    /// subtable); always true when the subtable is unstaged or the filter would not pay off.
    #[inline(always)]
    fn stage_may_match(&self, hs: u64) -> bool {
        if self.sel.stage_words == 0 {
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
    fn stage_add<const N: usize>(&mut self, hs: u64, g: &[u64; N]) {
        if self.sel.stage_words == 0 {
            return;
        }
        // `single` promises that every entry has `one`'s stage words, not only their hash: a
        // different set of words whose hash collides ends it.
        if self.single && !self.same_stage(g) {
            self.single = false;
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
                    let stage = usize::from(self.sel.stage_words);
                    self.one_hash = self
                        .one
                        .iter()
                        .take(stage)
                        .fold(K0, |h, w| fold_mul(h ^ w, K1));
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

    /// The packed words and the full hash of padded key `kw`, known to have the stage-one words
    /// every entry has (`single`, and the key passed the exact [`Filter`] or the stage check):
    /// those words are copied from `one` and their hash taken from `one_hash`, so only the words
    /// after the stage are gathered and hashed. The same values as [`KeySelector::pack16`] and
    /// [`hash_words`] give for such a key.
    #[inline(always)]
    fn known_stage<const N: usize>(&self, kw: &[u64; 16]) -> ([u64; N], u64) {
        // After a stage come the L4 word and the zero padding (see `KeySelector::new`). One
        // select per word, not a copy then a one-word store: a whole-array reload of that store
        // stalls (store forwarding fails).
        let word = kw[L4_WORD];
        let mut g = [0u64; N];
        for ((o, one), at) in g.iter_mut().zip(&self.one).zip(&self.l4_at) {
            *o = *one | (word & *at);
        }
        let l4 = word & self.l4_mask;
        debug_assert_eq!(g, self.sel.pack16::<N>(kw), "a key off the single stage");
        let h = self.hash_after_stage::<N>(l4);
        debug_assert_eq!(h, hash_words(&g), "the hash from the stage's kept state");
        (g, h)
    }

    /// The full hash of a packed key whose stage-one words are `one`'s and whose L4 word is
    /// `l4` (the padding after it hashed as zeros, as [`hash_words`] hashes it).
    #[inline(always)]
    fn hash_after_stage<const N: usize>(&self, l4: u64) -> u64 {
        let mut h = fold_mul(self.one_hash ^ l4, K1);
        for _ in usize::from(self.sel.stage_words) + 1..N {
            h = fold_mul(h, K1);
        }
        avalanche(h)
    }

    /// The packed words of padded key `kw`, which passed this subtable's filter and stage check
    /// (so, while `single`, has the stage-one words of `one`, which need no gathering).
    #[inline(always)]
    fn probed_words<const N: usize>(&self, kw: &[u64; 16]) -> [u64; N] {
        if self.single {
            return self.known_stage::<N>(kw).0;
        }
        self.sel.pack16::<N>(kw)
    }

    /// The packed words of a key and its full hash, or `None` when the stage check rejects it.
    #[inline(always)]
    fn staged<const N: usize>(&self, kw: &[u64; 16]) -> Option<([u64; N], u64)> {
        let g = self.sel.pack16::<N>(kw);
        if self.single {
            if !self.same_stage(&g) {
                return None;
            }
            let l4 = g
                .get(usize::from(self.sel.stage_words))
                .copied()
                .unwrap_or(0);
            return Some((g, self.hash_after_stage::<N>(l4)));
        }
        let (one, two) = g.split_at(usize::from(self.sel.stage_words).min(N));
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
        if self.sel.stage_words == 0 {
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
    pub(super) fn filter(&self, id: u32) -> Filter {
        let mut f = Filter {
            id,
            max_prio: self.max_prio(),
            ..Filter::default()
        };
        let s = usize::from(self.sel.stage_words);
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
    pub(super) fn hash_of(&self, kw: &[u64; 16], exact: bool) -> Option<u64> {
        with_table!(&self.table, _t, N => {
            if exact {
                Some(self.hash_after_stage::<N>(kw[L4_WORD] & self.l4_mask))
            } else {
                self.staged::<N>(kw).map(|(_, h)| h)
            }
        })
    }

    /// Asks for the home bucket of hash `h` (so a later probe finds it in cache).
    #[inline(always)]
    pub(super) fn prefetch_home(&self, h: u64) {
        with_table!(&self.table, t, N => t.prefetch_home(h))
    }

    /// Reads the buckets of hash `h` and asks for the entry they point to; the entry index, or
    /// `u32::MAX` when none can match (see [`BucketTable::prefetch_entry`]).
    #[inline(always)]
    pub(super) fn prefetch_entry(&self, h: u64) -> u32 {
        with_table!(&self.table, t, N => t.prefetch_entry(h))
    }

    /// The best rule with padded key `kw`'s words, whose hash here is `h` and whose first
    /// candidate entry is `e` (from [`Subtable::prefetch_entry`]).
    #[inline(always)]
    pub(super) fn find_hashed(&self, kw: &[u64; 16], h: u64, e: u32) -> Option<(u64, u32)> {
        if e == u32::MAX {
            return None;
        }
        with_table!(&self.table, t, N => {
            let g = self.probed_words::<N>(kw);
            let hit = match t.entries.get(e as usize) {
                Some(x) if same_words(&x.key, &g) => Some(x),
                _ => t.lookup(&g, h),
            };
            hit.map(|x| (x.rank, x.action))
        })
    }

    /// Stage one of a burst probe: hashes every key of `which` (they passed the subtable's
    /// filter; `exact`: that was the whole stage check) that the stage check keeps and whose best
    /// so far is not above this subtable's maximum, and asks for its home bucket
    /// ([`BucketTable::prefetch_home`]). Stage two ([`Subtable::burst_entries`]) reads the buckets
    /// and asks for the entries, stage three ([`Subtable::burst_compare`]) compares keys: run on
    /// successive subtables at once ([`Classifier::best_burst`](super::Classifier)), the cache
    /// misses of one stage are on their way while the others run.
    #[inline(always)]
    pub(super) fn burst_hash(
        &self,
        keys: &[[u64; 16]],
        mut which: u32,
        exact: bool,
        best: &[(u64, u32)],
        st: &mut BurstStage,
    ) {
        let max = u64::from(self.max_prio());
        st.n = 0;
        with_table!(&self.table, t, N => {
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
                    Some(self.known_stage::<N>(kw))
                } else {
                    self.staged::<N>(kw)
                };
                let Some((_, h)) = found else { continue };
                if let (Some(hx), Some(kx)) = (st.hs.get_mut(st.n), st.ks.get_mut(st.n)) {
                    *hx = h;
                    *kx = k as u8;
                    t.prefetch_home(h);
                    st.n += 1;
                }
            }
        })
    }

    /// Stage two of a burst probe (see [`Subtable::burst_hash`]).
    #[inline(always)]
    pub(super) fn burst_entries(&self, st: &mut BurstStage) {
        with_table!(&self.table, t, N => {
            for (e, h) in st.es.iter_mut().zip(&st.hs).take(st.n) {
                *e = t.prefetch_entry(*h);
            }
        })
    }

    /// Stage three of a burst probe (see [`Subtable::burst_hash`]): updates each key's best
    /// rank and action.
    #[inline(always)]
    pub(super) fn burst_compare(
        &self,
        keys: &[[u64; 16]],
        st: &BurstStage,
        best: &mut [(u64, u32)],
    ) {
        with_table!(&self.table, t, N => {
            for ((h, k), e) in st.hs.iter().zip(&st.ks).zip(&st.es).take(st.n) {
                if *e == u32::MAX {
                    continue;
                }
                let Some(kw) = keys.get(usize::from(*k)) else { continue };
                // Re-gathering the words (from L1) is cheaper than keeping them.
                let g = self.probed_words::<N>(kw);
                let hit = match t.entries.get(*e as usize) {
                    Some(x) if same_words(&x.key, &g) => Some(x),
                    // A tag shared by another key (rare): the whole probe.
                    _ => t.lookup(&g, *h),
                };
                if let (Some(x), Some(b)) = (hit, best.get_mut(usize::from(*k))) {
                    if x.rank > b.0 {
                        *b = (x.rank, x.action);
                    }
                }
            }
        })
    }

    /// Reads the home bucket `key` hashes to (so a following insert finds it in cache); returns
    /// it, for the caller to fold into a value the optimiser cannot drop (the insert threads of
    /// [`super::parallel`]).
    #[inline(always)]
    pub(super) fn touch(&self, key: &FlowKey) -> u64 {
        with_table!(&self.table, t, N => {
            let g = self.sel.pack::<N>(key);
            t.buckets.get(t.home(hash_words(&g))).copied().unwrap_or(0)
        })
    }

    /// Asks into cache the home bucket of `key`: [`Subtable::touch`] as a prefetch.
    #[inline(always)]
    pub(super) fn prefetch_insert(&self, key: &FlowKey) {
        with_table!(&self.table, t, N => {
            let g = self.sel.pack::<N>(key);
            t.prefetch_home(hash_words(&g));
        })
    }

    pub(super) fn find_exact(&self, key: &FlowKey, prio: u32) -> Option<u32> {
        with_table!(&self.table, t, N => {
            let g = self.sel.pack::<N>(key);
            let (_, h) = self.sel.hashes(&g);
            t.find_prio(&g, h, prio)
        })
    }

    /// A burst's first pass of [`Subtable::find_exact`]: `key`'s hash, with its home bucket
    /// asked into cache.
    #[inline]
    pub(super) fn find_prefetch_home(&self, key: &FlowKey) -> u64 {
        with_table!(&self.table, t, N => {
            let g = self.sel.pack::<N>(key);
            let (_, h) = self.sel.hashes(&g);
            t.prefetch_home(h);
            h
        })
    }

    /// A burst's second pass: the entry hash `h` leads to, asked into cache.
    #[inline]
    pub(super) fn find_prefetch_entry(&self, h: u64) {
        with_table!(&self.table, t, N => {
            t.prefetch_entry(h);
        })
    }

    /// Inserts unless a rule with the same key and priority exists (its handle is the error).
    /// Returns the index of the rule's entry.
    #[inline]
    pub(super) fn insert(&mut self, key: &FlowKey, rule: StoredRule) -> Result<(u32, u32), u32> {
        with_table!(&self.table, _t, N => {
            let g = self.sel.pack::<N>(key);
            self.insert_words(&g, rule)
        })
    }

    /// Inserts by packed key words (`N` must be this subtable's width).
    #[inline(always)]
    fn insert_words<const N: usize>(
        &mut self,
        g: &[u64; N],
        rule: StoredRule,
    ) -> Result<(u32, u32), u32> {
        let (hs, h) = self.sel.hashes(g);
        let (idx, pos) = match &mut self.table {
            KeyTable::Small(t) => t.insert_any(g, h, rule)?,
            KeyTable::Narrow(t) => t.insert_any(g, h, rule)?,
            KeyTable::Wide(t) => t.insert_any(g, h, rule)?,
        };
        if pos != JOINED {
            self.stage_add(hs, g);
        }
        self.priorities.add(rule.prio);
        Ok((idx, pos))
    }

    /// Replays a fresh insert (see [`BucketTable::place`]) whose key is entry `i` of `from` (the same
    /// subtable in the other copy); false if it could not be placed.
    #[inline]
    pub(super) fn place_from(
        &mut self,
        from: &Subtable,
        i: u32,
        pos: u32,
        rule: StoredRule,
    ) -> bool {
        let sel = &self.sel;
        let placed = match (&from.table, &mut self.table) {
            (KeyTable::Small(f), KeyTable::Small(t)) => place_one(sel, f, t, i, pos, rule),
            (KeyTable::Narrow(f), KeyTable::Narrow(t)) => place_one(sel, f, t, i, pos, rule),
            (KeyTable::Wide(f), KeyTable::Wide(t)) => place_one(sel, f, t, i, pos, rule),
            _ => None,
        };
        let Some((hs, g)) = placed else {
            return false;
        };
        self.stage_add(hs, &g);
        self.priorities.add(rule.prio);
        true
    }

    /// Reads bucket `pos` (see [`Subtable::touch`]).
    #[inline(always)]
    pub(super) fn touch_pos(&self, pos: u32) -> u64 {
        with_table!(&self.table, t, N => t.buckets.get(pos as usize).copied().unwrap_or(0))
    }

    /// Asks bucket `pos` into cache.
    #[inline(always)]
    pub(super) fn prefetch_pos(&self, pos: u32) {
        with_table!(&self.table, t, N => {
            if let Some(b) = t.buckets.get(pos as usize) {
                prefetch(b);
            }
        })
    }

    /// Asks into cache the home bucket in this subtable of entry `i` of `from` (the same
    /// subtable in the other copy).
    #[inline(always)]
    pub(super) fn prefetch_home_from(&self, from: &Subtable, i: u32) {
        with_table!(&from.table, f, N => {
            if let Some(g) = f.key_of(i) {
                let h = hash_words(g);
                with_table!(&self.table, t, M => t.prefetch_home(h));
            }
        })
    }

    /// The key of entry `i`, unpacked.
    pub(super) fn entry_key(&self, i: u32) -> Option<FlowKey> {
        with_table!(&self.table, t, N => t.key_of(i).map(|g| self.sel.unpack(g)))
    }

    /// Inserts a rule whose key is entry `i` of `from` (the same subtable in the other copy).
    #[inline]
    pub(super) fn insert_from(
        &mut self,
        from: &Subtable,
        i: u32,
        rule: StoredRule,
    ) -> Result<(u32, u32), u32> {
        match (&from.table, &mut self.table) {
            (KeyTable::Small(f), KeyTable::Small(_)) => {
                let g = *f.key_of(i).ok_or(u32::MAX)?;
                self.insert_words(&g, rule)
            }
            (KeyTable::Narrow(f), KeyTable::Narrow(_)) => {
                let g = *f.key_of(i).ok_or(u32::MAX)?;
                self.insert_words(&g, rule)
            }
            (KeyTable::Wide(f), KeyTable::Wide(_)) => {
                let g = *f.key_of(i).ok_or(u32::MAX)?;
                self.insert_words(&g, rule)
            }
            _ => Err(u32::MAX),
        }
    }

    /// Reads the home bucket entry `i` of `from` hashes to in this subtable (see
    /// [`Subtable::touch`]).
    #[inline(always)]
    pub(super) fn touch_from(&self, from: &Subtable, i: u32) -> u64 {
        with_table!(&from.table, f, N => {
            let Some(g) = f.key_of(i) else { return 0 };
            let h = hash_words(g);
            with_table!(&self.table, t, M => t.buckets.get(t.home(h)).copied().unwrap_or(0))
        })
    }

    /// Removes the rule of priority `prio` and handle `handle` from entry `entry` (found by
    /// the entry's own key: no key to pack or compare).
    pub(super) fn remove_entry(&mut self, entry: u32, prio: u32, handle: u32) -> bool {
        let ((removed, gone), hs) = with_table!(&mut self.table, t, N => {
            let Some(g) = t.key_of(entry).copied() else {
                return false;
            };
            let (hs, h) = self.sel.hashes(&g);
            (t.remove_entry(entry, h, prio, handle), hs)
        });
        if !removed {
            return false;
        }
        if gone {
            self.stage_remove(hs);
        }
        self.priorities.remove(prio);
        true
    }

    /// Asks entry `entry`'s key into cache: the first step of a removal issued ahead.
    #[inline(always)]
    pub(super) fn prefetch_key(&self, entry: u32) {
        with_table!(&self.table, t, N => {
            if let Some(g) = t.key_of(entry) {
                prefetch_all(g);
            }
        })
    }

    /// Asks the home bucket of entry `entry`'s key into cache: the second step of a removal
    /// issued ahead (the key should be in cache by now).
    #[inline(always)]
    pub(super) fn prefetch_bucket(&self, entry: u32) {
        with_table!(&self.table, t, N => {
            if let Some(g) = t.key_of(entry) {
                t.prefetch_home(self.sel.hashes(g).1);
            }
        })
    }

    pub(super) fn set_actions(&mut self, entry: u32, prio: u32, handle: u32, action: u32) {
        with_table!(&mut self.table, t, N => t.set_action(entry as usize, prio, handle, action))
    }

    pub(super) fn rehandle(&mut self, entry: u32, prio: u32, old: u32, new: u32) -> bool {
        with_table!(&mut self.table, t, N => t.rehandle(entry, prio, old, new))
    }

    pub(super) fn reserve(&mut self, additional: usize) {
        with_table!(&mut self.table, t, N => {
            t.grow_for(t.entries.len().saturating_add(additional));
            t.entries.reserve(additional);
        })
    }

    pub(super) fn bytes(&self) -> usize {
        with_table!(&self.table, t, N => t.bytes())
    }
}
/// Stage-one words a [`Filter`] compares. Three: the stage of a subtable matching an IPv4 or
/// IPv6 prefix (Ethernet type, IP protocol, one address word) fits whole, so its filter is the
/// whole stage check ([`Filter::exact`]); with two, such a subtable's keys were packed, compared
/// and hashed again (callgrind `lookup_probe` bursts: 1 593 → 1 469 instructions per lookup).
/// [`Filter::passing`] is written for three.
const FILTER_WORDS: usize = 3;
/// A subtable's first, branch-free check, kept in one dense array (in subtable order) that a
/// lookup reads whole: the masked key words `idx` must equal `val` under `mask`. It holds the
/// words every entry shares (when the subtable's entries all share their stage-one words; up to
/// [`FILTER_WORDS`] of them, the last ones: addresses come late in the key); otherwise its masks
/// are zero and every key passes, to be checked by the subtable's own stage filter.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Filter {
    idx: [u8; FILTER_WORDS],
    mask: [u64; FILTER_WORDS],
    val: [u64; FILTER_WORDS],
    /// The subtable's id.
    pub(super) id: u32,
    /// Its highest priority.
    pub(super) max_prio: u32,
    /// Whether passing this filter is passing the subtable's whole stage check.
    pub(super) exact: bool,
}

impl Filter {
    #[inline(always)]
    pub(super) fn passes(&self, kw: &[u64; 16]) -> bool {
        let mut d = 0u64;
        for ((&i, m), v) in self.idx.iter().zip(&self.mask).zip(&self.val) {
            d |= (kw[usize::from(i & 15)] & m) ^ v;
        }
        d == 0
    }

    /// Bit `k` set when key `k` of a burst passes (`cols[w][k]`: word `w` of key `k`).
    #[inline(always)]
    pub(super) fn passing(&self, cols: &[[u64; BURST]; 16]) -> u32 {
        let [i0, i1, i2] = self.idx.map(|i| usize::from(i & 15));
        let [m0, m1, m2] = self.mask;
        let [v0, v1, v2] = self.val;
        let (c0, c1, c2) = (&cols[i0], &cols[i1], &cols[i2]);
        // One byte per key (a loop the compiler turns into vector compares), then each eight
        // bytes of 0 / 1 gathered into eight bits by one multiply.
        let mut pass = [0u8; BURST];
        for (k, p) in pass.iter_mut().enumerate() {
            let d = ((c0[k] & m0) ^ v0) | ((c1[k] & m1) ^ v1) | ((c2[k] & m2) ^ v2);
            *p = u8::from(d == 0);
        }
        let mut bits = 0u32;
        for (j, eight) in pass.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(eight);
            let gathered = u64::from_le_bytes(b).wrapping_mul(0x0102_0408_1020_4080) >> 56;
            bits |= (gathered as u32) << (8 * j);
        }
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `single` (every entry has `one`'s stage words, so a key is checked against `one` alone)
    /// is about the words, not their hash: an entry whose different stage words collide with
    /// `one`'s hash ends it, or keys of that entry would be rejected by the compare with `one`.
    #[test]
    fn a_colliding_stage_hash_ends_single() {
        let mut mask = [0u64; KEY_WORDS];
        mask[0] = u64::MAX;
        mask[L4_WORD] = 0xffff;
        let mut st = Subtable::new(FlowKey::from_words(mask));
        assert_eq!(st.sel.stage_words, 1);
        let (a, b) = ([7u64, 80, 0, 0], [8u64, 80, 0, 0]);
        st.stage_add(42, &a);
        assert!(st.single && st.same_stage(&a));
        st.stage_add(42, &a);
        assert!(st.single, "the same words again keep it");
        st.stage_add(42, &b);
        assert!(!st.single, "other words under the same hash end it");
        assert!(
            !st.filter(0).exact,
            "and the filter no longer decides alone"
        );
    }
}
