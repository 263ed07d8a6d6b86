//! The switch's rule handles → the flow table's: a map that a million-rule load fills in
//! order. Switch handles are given out in increasing order and never reused, so they are kept
//! in pages of [`PAGE`] consecutive handles: inserting a batch writes its pages front to back
//! (one hash per page, not a cache miss per rule as a hash map of a million entries has), a
//! lookup is one hash of the page number and one index, and a page goes away when its last
//! rule does (deleted handles leave no memory behind). Dense, about 4.5 bytes per rule
//! instead of the sixteen (plus the empty slots) of a hash map; at worst, one rule left alive
//! per page after churn (or restored so), one page (256 bytes) per rule.

use sluice_flow::Handle;

/// Handles per page.
const PAGE: u64 = 64;

/// One page: the table handle + 1 of each switch handle in it (0: none), and how many are set.
struct Page {
    live: u32,
    slot: Box<[u32]>,
}

/// Switch handle → flow-table handle.
#[derive(Default)]
pub(super) struct HandleIndex {
    /// Pages by number (a page per 64 rules: a million rules, 15 625 pages).
    pages: hashbrown::HashMap<u64, Page>,
}

impl HandleIndex {
    /// The flow-table handle of switch handle `ext`.
    pub(super) fn get(&self, ext: u64) -> Option<Handle> {
        let page = self.pages.get(&(ext / PAGE))?;
        let v = *page.slot.get((ext % PAGE) as usize)?;
        v.checked_sub(1).map(Handle)
    }

    /// Maps `ext` to `h` (replacing any earlier mapping of `ext`).
    pub(super) fn insert(&mut self, ext: u64, h: Handle) {
        let page = self.pages.entry(ext / PAGE).or_insert_with(|| Page {
            live: 0,
            slot: vec![0u32; PAGE as usize].into_boxed_slice(),
        });
        if let Some(s) = page.slot.get_mut((ext % PAGE) as usize) {
            if *s == 0 {
                page.live += 1;
            }
            *s = h.0.saturating_add(1);
        }
    }

    /// Forgets `ext`; a page left empty is freed.
    pub(super) fn remove(&mut self, ext: u64) {
        let key = ext / PAGE;
        let Some(page) = self.pages.get_mut(&key) else {
            return;
        };
        if let Some(s) = page.slot.get_mut((ext % PAGE) as usize) {
            if *s != 0 {
                *s = 0;
                page.live -= 1;
            }
        }
        if page.live == 0 {
            self.pages.remove(&key);
        }
    }

    /// Makes room for `n` more handles' pages at once.
    pub(super) fn reserve(&mut self, n: usize) {
        self.pages.reserve(n.div_ceil(PAGE as usize) + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_hash_map_and_frees_empty_pages() {
        let mut idx = HandleIndex::default();
        let mut model: HashMap<u64, u32> = HashMap::new();
        // Three pages' worth in order, some deleted, some re-pointed, one far away.
        for ext in 1..3 * PAGE {
            idx.insert(ext, Handle(ext as u32 * 7));
            model.insert(ext, ext as u32 * 7);
        }
        idx.insert(1 << 40, Handle(0));
        model.insert(1 << 40, 0);
        for ext in (1..PAGE).step_by(3) {
            idx.remove(ext);
            model.remove(&ext);
        }
        idx.insert(5, Handle(99));
        model.insert(5, 99);
        idx.insert(PAGE + 1, Handle(u32::MAX - 1));
        model.insert(PAGE + 1, u32::MAX - 1);
        for ext in (0..4 * PAGE).chain([1 << 40, (1 << 40) + 1]) {
            assert_eq!(idx.get(ext).map(|h| h.0), model.get(&ext).copied(), "{ext}");
        }
        // Emptying the second page frees it.
        for ext in PAGE..2 * PAGE {
            idx.remove(ext);
        }
        assert!(!idx.pages.contains_key(&1));
        assert_eq!(idx.get(PAGE + 1), None);
        idx.remove(12345678); // absent: nothing happens
        assert_eq!(idx.pages.len(), 3);
    }
}
