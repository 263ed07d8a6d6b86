//! Which key words a subtable reads ([`KeySelector`]): a mask's non-zero words, gathered into a
//! fixed-width array (zero-padded) in hashing order — the stage-one words first, then the L4
//! word — and hashed with one multiply-fold per word.

use crate::key::{FlowKey, Mask, KEY_WORDS};

/// The key word that holds the L4 ports (and tunnel id): hashed last, after the stage check.
pub(super) const L4_WORD: usize = 4;

/// Which key words a subtable reads, in hashing order, and its staged-lookup split.
#[derive(Debug, Clone)]
pub(super) struct KeySelector {
    /// Word indices: stage-one words first, then the L4 word; zero past `used`.
    pub(super) idx: [u8; KEY_WORDS],
    /// The mask's words in the same order; zero past `used` (so padding gathers as zero).
    pub(super) mw: [u64; KEY_WORDS],
    /// Words used.
    pub(super) used: u8,
    /// Words in stage one (0: the subtable is not staged).
    pub(super) stage_words: u8,
}

impl KeySelector {
    pub(super) fn new(mask: &Mask) -> Self {
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
        KeySelector {
            idx,
            mw,
            used: n as u8,
            stage_words: s as u8,
        }
    }

    /// [`KeySelector::pack`] from a [`padded`] key: no bounds checks.
    #[inline(always)]
    pub(super) fn pack16<const N: usize>(&self, kw: &[u64; 16]) -> [u64; N] {
        let mut g = [0u64; N];
        for ((o, &i), &m) in g.iter_mut().zip(&self.idx).zip(&self.mw) {
            *o = kw[usize::from(i & 15)] & m;
        }
        g
    }

    /// The used words of `key & mask`, packed (zero-padded to `N`).
    #[inline(always)]
    pub(super) fn pack<const N: usize>(&self, key: &FlowKey) -> [u64; N] {
        let kw = key.words();
        let mut g = [0u64; N];
        for ((o, &i), &m) in g.iter_mut().zip(&self.idx).zip(&self.mw) {
            *o = kw.get(usize::from(i)).copied().unwrap_or(0) & m;
        }
        g
    }

    /// A key back from its packed words.
    pub(super) fn unpack(&self, g: &[u64]) -> FlowKey {
        let mut out = [0u64; KEY_WORDS];
        for (&i, &x) in self.idx.iter().zip(g).take(usize::from(self.used)) {
            if let Some(o) = out.get_mut(usize::from(i)) {
                *o = x;
            }
        }
        FlowKey::from_words(out)
    }

    /// The hash of the stage-one words and the hash of all `N` words of a packed key.
    #[inline(always)]
    pub(super) fn hashes<const N: usize>(&self, g: &[u64; N]) -> (u64, u64) {
        let (one, two) = g.split_at(usize::from(self.stage_words).min(N));
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
pub(super) fn padded(key: &FlowKey) -> [u64; 16] {
    let mut kw = [0u64; 16];
    for (o, x) in kw.iter_mut().zip(key.words()) {
        *o = *x;
    }
    kw
}

pub(super) const K0: u64 = 0x243f_6a88_85a3_08d3;
pub(super) const K1: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline(always)]
pub(super) fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Final avalanche: the tables take their bucket from the top bits, the exact-match cache
/// indexes with the bottom bits.
#[inline(always)]
pub(super) fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^ (h >> 32)
}

#[inline]
pub(super) fn hash_words(w: &[u64]) -> u64 {
    let mut h = K0;
    for x in w {
        h = fold_mul(h ^ x, K1);
    }
    avalanche(h)
}
