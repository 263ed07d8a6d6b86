//! Lookups in one classifier copy: one key at a time ([`Classifier::lookup`]) or a burst at a
//! time ([`Classifier::lookup_batch`]), and their result ([`HitRef`]).

use super::bucket_table::{rank_handle, rank_prio};
use super::copy::Classifier;
use super::key_select::padded;
use super::subtable::{BurstStage, Filter, Subtable, BURST};
use crate::action::ActionList;
use crate::key::FlowKey;

/// One build of [`Classifier::best_burst`]: a burst's keys in, each key's `(rank, action)` out.
type BurstFn = fn(&Classifier, &[&FlowKey], &mut [(u64, u32)]);

/// Subtables whose filters one pass of a lookup evaluates into a bit mask.
const FILTER_CHUNK: usize = 64;

/// The result of a lookup.
#[derive(Debug, Clone, Copy)]
pub struct HitRef<'a> {
    /// The winning rule's handle.
    pub handle: crate::Handle,
    /// Its priority.
    pub priority: u32,
    /// Its actions.
    pub actions: &'a ActionList,
}

impl Classifier {
    /// Highest-priority rule matching `key` (ties: lowest handle).
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<HitRef<'_>> {
        let (r, a) = self.best(key);
        self.hit(r, a)
    }

    #[inline]
    pub(super) fn hit(&self, rank: u64, action: u32) -> Option<HitRef<'_>> {
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
    /// Three steps per chunk of subtables (in lookup order): every subtable's [`Filter`] is
    /// evaluated without branches into a bit mask ([`Classifier::filter_bits`]); for the
    /// subtables that passed, every key hash is computed, its home bucket and then its entry
    /// asked into cache ([`Classifier::hash_candidates`]: their cache misses overlap); then
    /// they are probed in order ([`Classifier::probe_candidates`]), stopping once the best
    /// match's priority is above the next one's maximum.
    #[inline]
    pub(super) fn best(&self, key: &FlowKey) -> (u64, u32) {
        let mut best = (0u64, 0u32);
        let kw = padded(key);
        for chunk in self.filters.chunks(FILTER_CHUNK) {
            let mut hs = [0u64; FILTER_CHUNK];
            let mut es = [u32::MAX; FILTER_CHUNK];
            let bits = Self::filter_bits(chunk, &kw);
            let bits = self.hash_candidates(chunk, &kw, bits, &mut hs, &mut es);
            if self.probe_candidates(chunk, &kw, bits, (&hs, &es), &mut best) {
                return best;
            }
        }
        best
    }

    /// Bit `j` set when padded key `kw` passes filter `j` of `chunk`.
    #[inline(always)]
    fn filter_bits(chunk: &[Filter], kw: &[u64; 16]) -> u64 {
        let mut bits = 0u64;
        for (j, f) in chunk.iter().enumerate() {
            bits |= u64::from(f.passes(kw)) << j;
        }
        bits
    }

    /// For every candidate of `bits`, its key hash into `hs[j]`, its home bucket asked into
    /// cache, then (a second pass, once those loads are on their way) its buckets read and its
    /// entry asked into cache, the entry's index into `es[j]`; returns the candidates the
    /// subtables' stage checks kept.
    #[inline(always)]
    fn hash_candidates(
        &self,
        chunk: &[Filter],
        kw: &[u64; 16],
        mut bits: u64,
        hs: &mut [u64; FILTER_CHUNK],
        es: &mut [u32; FILTER_CHUNK],
    ) -> u64 {
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
            match st.hash_of(kw, f.exact) {
                Some(h) => {
                    *hx = h;
                    st.prefetch_home(h);
                }
                None => bits &= !(1u64 << j),
            }
        }
        let mut b = bits;
        while b != 0 {
            let j = b.trailing_zeros() as usize;
            b &= b - 1;
            let (Some(f), Some(h), Some(ex)) = (chunk.get(j), hs.get(j), es.get_mut(j)) else {
                break;
            };
            if let Some(Some(st)) = self.subtables.get(f.id as usize) {
                *ex = st.prefetch_entry(*h);
            }
        }
        bits
    }

    /// Probes the candidates of `bits` in order, keeping the best hit in `best`; true when it
    /// stopped early (the best priority is above every later subtable's maximum).
    #[inline(always)]
    fn probe_candidates(
        &self,
        chunk: &[Filter],
        kw: &[u64; 16],
        mut bits: u64,
        (hs, es): (&[u64; FILTER_CHUNK], &[u32; FILTER_CHUNK]),
        best: &mut (u64, u32),
    ) -> bool {
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let (Some(f), Some(h), Some(e)) = (chunk.get(j), hs.get(j), es.get(j)) else {
                break;
            };
            if best.0 >> 32 > u64::from(f.max_prio) {
                return true;
            }
            let Some(Some(st)) = self.subtables.get(f.id as usize) else {
                continue;
            };
            if let Some(hit) = st.find_hashed(kw, *h, *e) {
                if hit.0 > best.0 {
                    *best = hit;
                }
            }
        }
        false
    }

    /// Looks up a burst of keys (subtable by subtable, so the hash-table reads of different
    /// keys overlap): `out[i]` gets key `i`'s winner, the same as [`Classifier::lookup`].
    pub fn lookup_batch<'a>(&'a self, keys: &[FlowKey], out: &mut Vec<Option<HitRef<'a>>>) {
        self.batch_with(keys, out, Self::best_burst);
    }

    /// [`Classifier::lookup_batch`] as a processor without AVX2 runs it (the portable build of
    /// the burst, whatever this processor has): the same answers; for tests and comparisons.
    pub fn lookup_batch_portable<'a>(
        &'a self,
        keys: &[FlowKey],
        out: &mut Vec<Option<HitRef<'a>>>,
    ) {
        self.batch_with(keys, out, Self::best_burst_body);
    }

    /// The bursts of [`Classifier::lookup_batch`], each through `burst`.
    #[inline(always)]
    fn batch_with<'a>(
        &'a self,
        keys: &[FlowKey],
        out: &mut Vec<Option<HitRef<'a>>>,
        burst: BurstFn,
    ) {
        out.clear();
        out.reserve(keys.len());
        for chunk in keys.chunks(BURST) {
            let mut best = [(0u64, 0u32); BURST];
            let best = best.get_mut(..chunk.len()).unwrap_or(&mut []);
            let Some(first) = chunk.first() else { break };
            let refs: [&FlowKey; BURST] = core::array::from_fn(|k| chunk.get(k).unwrap_or(first));
            burst(self, refs.get(..chunk.len()).unwrap_or(&[]), best);
            out.extend(best.iter().map(|&(r, a)| self.hit(r, a)));
        }
    }

    /// `best[i]` = key `i`'s `(rank, action)` as [`Classifier::best`] gives it, for a burst of at
    /// most [`BURST`] keys (`best` as long as `keys`, zeroed), subtable by subtable in a
    /// pipeline (see [`Subtable::burst_hash`]).
    pub(super) fn best_burst(&self, keys: &[&FlowKey], best: &mut [(u64, u32)]) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            #[allow(unsafe_code)]
            // SAFETY: the processor has AVX2 (checked just above), the only requirement of a
            // function compiled with `target_feature(enable = "avx2")`.
            unsafe {
                return self.best_burst_avx2(keys, best);
            }
        }
        self.best_burst_body(keys, best);
    }

    /// [`Classifier::best_burst`] compiled for AVX2 (the burst's filter checks become four-lane
    /// compares).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn best_burst_avx2(&self, keys: &[&FlowKey], best: &mut [(u64, u32)]) {
        self.best_burst_body(keys, best);
    }

    /// [`Classifier::best_burst`]'s body, inlined into each build of it (this one the portable
    /// build).
    #[inline(always)]
    fn best_burst_body(&self, keys: &[&FlowKey], best: &mut [(u64, u32)]) {
        if self.filters.len() > FILTER_CHUNK || keys.len() > BURST {
            for (b, k) in best.iter_mut().zip(keys) {
                *b = self.best(k);
            }
            return;
        }
        let kws: [[u64; 16]; BURST] =
            core::array::from_fn(|k| keys.get(k).map_or([0; 16], |k| padded(k)));
        let kws = kws.get(..keys.len()).unwrap_or(&[]);
        let which = self.burst_filters(kws);
        // A pipeline over the subtables that have keys to probe: at each step, hash and ask for
        // the buckets of the next one, read the buckets and ask for the entries of the one
        // ENTRY_LAG steps back, compare the keys of the one COMPARE_LAG steps back (the lags
        // give each prefetch time to land).
        let mut stages = [BurstStage::default(); RING];
        let mut tables: [Option<&Subtable>; RING] = [None; RING];
        let mut todo = self
            .filters
            .iter()
            .zip(which)
            .filter(|(_, w)| *w != 0)
            .filter_map(|(f, w)| Some((self.subtables.get(f.id as usize)?.as_ref()?, w, f.exact)));
        let mut i = 0usize;
        loop {
            let next = todo.next();
            if next.is_none() && tables.iter().all(Option::is_none) {
                break;
            }
            let back = |lag: usize| (i + RING - lag) % RING;
            let slot = back(COMPARE_LAG);
            if let (Some(Some(st)), Some(stage)) = (tables.get(slot), stages.get(slot)) {
                st.burst_compare(kws, stage, best);
            }
            if let Some(t) = tables.get_mut(slot) {
                *t = None;
            }
            let slot = back(ENTRY_LAG);
            if let (Some(Some(st)), Some(stage)) = (tables.get(slot), stages.get_mut(slot)) {
                st.burst_entries(stage);
            }
            let slot = i % RING;
            if let (Some((st, w, exact)), Some(stage), Some(t)) =
                (next, stages.get_mut(slot), tables.get_mut(slot))
            {
                st.burst_hash(kws, w, exact, best, stage);
                *t = Some(st);
            }
            i += 1;
        }
    }
}

impl Classifier {
    /// Bit `k` of `which[j]` set when key `k` of a burst (at most [`BURST`]) passes filter `j`.
    /// A burst of [`TRANSPOSE_MIN`] keys or more has its words transposed into columns (word `w`
    /// of key `k` at `cols[w][k]`), so each filter is checked against the whole burst in one
    /// loop over contiguous words (vector compares); a smaller one (the misses of a cached burst)
    /// key by key, which costs no transposition.
    #[inline(always)]
    fn burst_filters(&self, kws: &[[u64; 16]]) -> [u32; FILTER_CHUNK] {
        let mut which = [0u32; FILTER_CHUNK];
        if kws.len() < TRANSPOSE_MIN {
            for (k, kw) in kws.iter().enumerate() {
                for (w, f) in which.iter_mut().zip(&self.filters) {
                    *w |= u32::from(f.passes(kw)) << k;
                }
            }
            return which;
        }
        let mut cols = [[0u64; BURST]; 16];
        for (k, kw) in kws.iter().enumerate() {
            for (c, x) in cols.iter_mut().zip(kw) {
                if let Some(o) = c.get_mut(k) {
                    *o = *x;
                }
            }
        }
        // Padding keys past the burst are cleared.
        let live = u32::MAX >> (BURST - kws.len().min(BURST));
        for (w, f) in which.iter_mut().zip(&self.filters) {
            *w = f.passing(&cols) & live;
        }
        which
    }
}

/// Keys from which a burst's filters are checked on transposed words (see
/// [`Classifier::burst_filters`]).
const TRANSPOSE_MIN: usize = 8;

/// Steps between a subtable's hashing and its entries' prefetch in [`Classifier::best_burst`].
/// Two steps and four (below) rather than one and two: at 1M rules the buckets and entries are
/// far out of cache, and the longer distance gave bursts 3.57 → 3.88 M lookups/s (medians of 9
/// alternating `sluice bench flows` runs, 65 536 flows; 3 → 4 and 5 were no better).
const ENTRY_LAG: usize = 2;
/// Steps between a subtable's hashing and its comparisons.
const COMPARE_LAG: usize = 4;
/// Subtables in flight.
const RING: usize = COMPARE_LAG + 1;
