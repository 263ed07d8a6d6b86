//! The per-thread exact-match cache in front of the classifier ([`ExactCache`]).

use super::copy::Classifier;
use super::key_select::hash_words;
use super::lookup::HitRef;
use super::subtable::BURST;
use crate::key::{same_words, FlowKey};

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

    /// The set and tag of `key`.
    #[inline]
    fn place(&self, key: &FlowKey) -> (usize, u64) {
        let tag = hash_words(key.words()) | 1;
        ((tag >> 1) as usize & self.set_mask, tag)
    }

    /// The cached entry for `key` in `set`, if any.
    #[inline]
    fn probe(&self, set: usize, tag: u64, key: &FlowKey) -> Option<CacheEntry> {
        let tags = self.tags.get(set)?;
        for (w, t) in tags.iter().enumerate() {
            if *t == tag {
                if let Some(e) = self.entries.get(set * WAYS + w) {
                    if same_words(e.key.words(), key.words()) {
                        return Some(*e);
                    }
                }
            }
        }
        None
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
        if let Some(place) = self.entries.get_mut(set * WAYS + w) {
            *place = e;
        }
    }
}

impl Classifier {
    /// Like [`Classifier::lookup`], through a per-thread exact-match cache.
    #[inline]
    pub fn lookup_cached(&self, cache: &mut ExactCache, key: &FlowKey) -> Option<HitRef<'_>> {
        if cache.generation != self.generation {
            cache.clear(self.generation);
        }
        let (set, tag) = cache.place(key);
        let (rank, action) = match cache.probe(set, tag, key) {
            Some(e) => {
                cache.hits += 1;
                (e.rank, e.action)
            }
            None => self.cache_miss(cache, set, tag, key),
        };
        self.hit(rank, action)
    }

    /// A burst of lookups through a per-thread exact-match cache: `out[i]` gets key `i`'s
    /// winner, the same as [`Classifier::lookup`] (keys past `out`'s length are not looked up).
    /// Every key is probed in the cache first; the misses go to the classifier together
    /// ([`Classifier::lookup_batch`]'s subtable-by-subtable probes, so their hash-table reads
    /// overlap) and are cached.
    pub fn lookup_batch_cached<'a>(
        &'a self,
        cache: &mut ExactCache,
        keys: &[FlowKey],
        out: &mut [Option<HitRef<'a>>],
    ) {
        if cache.generation != self.generation {
            cache.clear(self.generation);
        }
        for (keys, out) in keys.chunks(BURST).zip(out.chunks_mut(BURST)) {
            // Small arrays only on the hit path: the keys of the misses are gathered after.
            let mut miss_at = [0u8; BURST];
            let mut miss_tag = [0u64; BURST];
            let mut misses = 0;
            for (i, (k, o)) in keys.iter().zip(out.iter_mut()).enumerate() {
                let (set, tag) = cache.place(k);
                match cache.probe(set, tag, k) {
                    Some(e) => {
                        cache.hits += 1;
                        *o = self.hit(e.rank, e.action);
                    }
                    None => {
                        if let (Some(at), Some(t)) =
                            (miss_at.get_mut(misses), miss_tag.get_mut(misses))
                        {
                            *at = i as u8;
                            *t = tag;
                            misses += 1;
                        }
                    }
                }
            }
            if misses > 0 {
                self.burst_misses(cache, keys, out, &miss_at[..misses], &miss_tag[..misses]);
            }
        }
    }

    /// The misses of one [`Classifier::lookup_batch_cached`] chunk (`keys[at[j]]`, hash tag
    /// `tags[j]`): looked up together, answered in `out`, cached (a key twice in the chunk once).
    #[cold]
    #[inline(never)]
    fn burst_misses<'a>(
        &'a self,
        cache: &mut ExactCache,
        keys: &[FlowKey],
        out: &mut [Option<HitRef<'a>>],
        at: &[u8],
        tags: &[u64],
    ) {
        cache.misses += at.len() as u64;
        let miss_keys: [FlowKey; BURST] = core::array::from_fn(|j| {
            at.get(j)
                .and_then(|&i| keys.get(usize::from(i)))
                .copied()
                .unwrap_or_default()
        });
        let mut best = [(0u64, 0u32); BURST];
        let n = at.len().min(BURST);
        let (Some(mk), Some(b)) = (miss_keys.get(..n), best.get_mut(..n)) else {
            return;
        };
        self.best_burst(mk, b);
        for (((k, &i), &tag), &(rank, action)) in mk.iter().zip(at).zip(tags).zip(b.iter()) {
            if let Some(o) = out.get_mut(usize::from(i)) {
                *o = self.hit(rank, action);
            }
            let set = (tag >> 1) as usize & cache.set_mask;
            if cache.probe(set, tag, k).is_none() {
                cache.insert(
                    set,
                    tag,
                    CacheEntry {
                        key: *k,
                        rank,
                        action,
                    },
                );
            }
        }
    }

    /// A miss of [`Classifier::lookup_cached`]: the classifier's answer, cached in `set`. Kept
    /// out of line so the hit path stays small wherever it is inlined.
    #[cold]
    #[inline(never)]
    fn cache_miss(
        &self,
        cache: &mut ExactCache,
        set: usize,
        tag: u64,
        key: &FlowKey,
    ) -> (u64, u32) {
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
}
