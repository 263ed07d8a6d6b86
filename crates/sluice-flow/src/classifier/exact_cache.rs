//! The per-thread exact-match cache in front of the classifier ([`ExactCache`]).

use super::copy::Classifier;
use super::hint::{advise_huge_pages, prefetch, prefetch_all};
use super::key_select::hash_words;
use super::lookup::HitRef;
use super::subtable::BURST;
use crate::key::{same_words, FlowKey};

/// Aligned to a cache line, so an entry (120 bytes) spans exactly two lines.
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(64))]
struct CacheEntry {
    key: FlowKey,
    /// The winner's rank, 0 for "no rule matches".
    rank: u64,
    action: u32,
}

/// Ways per set of the exact-match cache: eight 8-byte tags fill one cache line. With four, a
/// cache of four entries per flow left ~2 % of 65 536 flows in sets of five or more flows, where
/// they evicted each other and missed on every pass (1.9 % of lookups, each costing a classifier
/// lookup); with eight ways and the same entries, a set would need nine of them.
const WAYS: usize = 8;

/// One set's tags, aligned so that they are one cache line.
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(64))]
struct TagSet([u64; WAYS]);

/// A per-thread exact-match cache in front of the classifier (Open vSwitch's EMC idea): an 8-way
/// set-associative table from a whole packet key to the lookup's answer (a miss included), with
/// the sets' 64-bit hash tags in one cache line so a probe reads one key at most.
///
/// It is valid for one snapshot generation: any published batch empties it on next use, so it
/// never returns a stale answer. It pays off when traffic has fewer active flows than entries.
///
/// ```
/// use sluice_flow::{parse_rule, ExactCache, FlowKey, FlowTable, PortNames, TableConfig};
/// let ports = PortNames::new();
/// let mut table = FlowTable::new(TableConfig::default());
/// table.insert(parse_rule("dst_ip 10.0.0.0/8 action output:1", &ports).unwrap()).unwrap();
/// // A TCP/IPv4 frame 10.0.0.1:1234 -> 10.0.0.2:80.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
/// let key = FlowKey::extract(&frame, &sluice_wire::parse(&frame).unwrap(), 2);
///
/// let reader = table.reader();
/// let mut cache = ExactCache::new(1024);
/// for _ in 0..3 {
///     assert!(reader.snapshot().lookup_cached(&mut cache, &key).is_some());
/// }
/// assert_eq!((cache.hits, cache.misses), (2, 1));
///
/// // A published change empties the cache: no stale answer.
/// table.insert(parse_rule("prio 9 dst_ip 10.0.0.2 action drop", &ports).unwrap()).unwrap();
/// let hit = reader.snapshot().lookup_cached(&mut cache, &key).map(|h| h.priority);
/// assert_eq!((hit, cache.misses), (Some(9), 2));
/// ```
#[derive(Debug, Clone)]
pub struct ExactCache {
    tags: Vec<TagSet>,
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
    /// A cache of about `entries` entries (rounded up to a power of two, at least 8; ~136 bytes
    /// each: a 128-byte entry, its 8-byte tag and a byte of replacement state per set of eight),
    /// allocated on its first lookup (a thread that never looks up costs nothing). Sized for the
    /// active flows of one thread: with four times as many entries as flows, 0.1 % of the
    /// lookups of 65 536 flows missed once warm (`sluice bench flows`: 99.9 % hits), the flows
    /// of the rare sets that hold more than eight.
    pub fn new(entries: usize) -> Self {
        let sets = (entries / WAYS).max(1).next_power_of_two();
        ExactCache {
            tags: Vec::new(),
            next: Vec::new(),
            entries: Vec::new(),
            set_mask: sets - 1,
            generation: u64::MAX,
            hits: 0,
            misses: 0,
        }
    }

    /// Empties the cache for `generation` (allocating it the first time).
    fn clear(&mut self, generation: u64) {
        let sets = self.set_mask + 1;
        if self.tags.len() != sets {
            // Read at random: huge pages, asked for before the first write faults the pages in.
            let mut entries = Vec::with_capacity(sets * WAYS);
            advise_huge_pages(&entries);
            entries.resize(sets * WAYS, CacheEntry::default());
            let mut tags = Vec::with_capacity(sets);
            advise_huge_pages(&tags);
            tags.resize(sets, TagSet::default());
            self.entries = entries;
            self.tags = tags;
            self.next = vec![0; sets];
        }
        for t in &mut self.tags {
            *t = TagSet::default();
        }
        self.generation = generation;
    }

    fn insert(&mut self, set: usize, tag: u64, e: CacheEntry) {
        let (Some(tags), Some(next)) = (self.tags.get_mut(set), self.next.get_mut(set)) else {
            return;
        };
        let w = match tags.0.iter().position(|t| *t == 0) {
            Some(w) => w,
            None => {
                let w = usize::from(*next) % WAYS;
                *next = next.wrapping_add(1);
                w
            }
        };
        if let Some(t) = tags.0.get_mut(w) {
            *t = tag;
        }
        if let Some(place) = self.entries.get_mut(set * WAYS + w) {
            *place = e;
        }
    }

    /// The tag and set of `key`.
    #[inline(always)]
    fn place_of(&self, key: &FlowKey) -> (u64, usize) {
        let tag = hash_words(key.words()) | 1;
        (tag, (tag >> 1) as usize & self.set_mask)
    }

    /// The entry index holding `key` (tag `tag`, set `set`), if any.
    #[inline(always)]
    fn find(&self, key: &FlowKey, tag: u64, set: usize) -> Option<usize> {
        let tags = self.tags.get(set)?;
        for (w, t) in tags.0.iter().enumerate() {
            if *t == tag {
                let i = set * WAYS + w;
                if self
                    .entries
                    .get(i)
                    .is_some_and(|e| same_words(e.key.words(), key.words()))
                {
                    return Some(i);
                }
            }
        }
        None
    }
}

impl Classifier {
    /// Like [`Classifier::lookup_batch`], through a per-thread exact-match cache: `out[i]` gets
    /// key `i`'s winner. Three passes per burst of 32 keys, so the cache misses of different keys
    /// overlap: hash every key and ask for its set's tags; read the tags and ask for the entry
    /// whose tag matches; compare keys. The keys the cache does not hold go to the classifier
    /// together ([`Classifier::lookup_batch`]'s path), and their answers are cached.
    pub fn lookup_batch_cached<'a>(
        &'a self,
        cache: &mut ExactCache,
        keys: &[FlowKey],
        out: &mut Vec<Option<HitRef<'a>>>,
    ) {
        out.clear();
        out.resize(keys.len(), None);
        self.lookup_burst_cached(cache, keys, out);
    }

    /// [`Classifier::lookup_batch_cached`] into a slice, for callers that keep no vector (the
    /// datapath's bursts): `out[i]` gets key `i`'s winner, for `i` below both lengths.
    pub fn lookup_burst_cached<'a>(
        &'a self,
        cache: &mut ExactCache,
        keys: &[FlowKey],
        out: &mut [Option<HitRef<'a>>],
    ) {
        if cache.generation != self.generation {
            cache.clear(self.generation);
        }
        let keys = keys.get(..out.len()).unwrap_or(keys);
        for (chunk, out) in keys.chunks(BURST).zip(out.chunks_mut(BURST)) {
            let mut places = [(0u64, 0usize); BURST];
            for (p, k) in places.iter_mut().zip(chunk) {
                *p = cache.place_of(k);
                if let Some(t) = cache.tags.get(p.1) {
                    prefetch(t);
                }
            }
            for (&(tag, set), _) in places.iter().zip(chunk) {
                if let Some(tags) = cache.tags.get(set) {
                    if let Some(w) = tags.0.iter().position(|t| *t == tag) {
                        if let Some(e) = cache.entries.get(set * WAYS + w) {
                            prefetch_all(e);
                        }
                    }
                }
            }
            let mut res = [(0u64, 0u32); BURST];
            let Some(first) = chunk.first() else { break };
            let mut missed = [first; BURST];
            let mut which = [0u8; BURST];
            let mut m = 0usize;
            for (i, (k, &(tag, set))) in chunk.iter().zip(&places).enumerate() {
                match cache.find(k, tag, set).and_then(|e| cache.entries.get(e)) {
                    Some(e) => {
                        if let Some(r) = res.get_mut(i) {
                            *r = (e.rank, e.action);
                        }
                    }
                    None => {
                        if let (Some(x), Some(w)) = (missed.get_mut(m), which.get_mut(m)) {
                            *x = k;
                            *w = i as u8;
                            m += 1;
                        }
                    }
                }
            }
            cache.hits += (chunk.len() - m) as u64;
            if m > 0 {
                cache.misses += m as u64;
                let mut best = [(0u64, 0u32); BURST];
                let best = best.get_mut(..m).unwrap_or(&mut []);
                let missed = missed.get(..m).unwrap_or(&[]);
                self.best_burst(missed, best);
                for ((k, b), i) in missed.iter().zip(best.iter()).zip(which) {
                    let Some(&(tag, set)) = places.get(usize::from(i)) else {
                        continue;
                    };
                    if let Some(r) = res.get_mut(usize::from(i)) {
                        *r = *b;
                    }
                    // A key twice in one burst: cached once, not in two ways of its set.
                    if cache.find(k, tag, set).is_some() {
                        continue;
                    }
                    cache.insert(
                        set,
                        tag,
                        CacheEntry {
                            key: **k,
                            rank: b.0,
                            action: b.1,
                        },
                    );
                }
            }
            for (o, &(r, a)) in out.iter_mut().zip(&res) {
                *o = self.hit(r, a);
            }
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
            for (w, t) in tags.0.iter().enumerate() {
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
            None => self.cache_miss(cache, set, tag, key),
        };
        self.hit(rank, action)
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
