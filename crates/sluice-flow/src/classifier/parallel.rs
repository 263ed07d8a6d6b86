//! Insertion on several threads: the subtables of a big batch are dealt to threads
//! ([`balance`]), and each thread walks the whole batch inserting (or replaying) the rules of
//! its own subtables in batch order, a group at a time ([`grouped`]). Subtables are
//! independent, so each sees exactly the sequence of inserts it would see in order: the same
//! layout and the same results. `std::thread::scope`, no `unsafe`.

use super::bucket_table::{StoredRule, JOINED};
use super::copy::{Classifier, GROUP};
use super::ops::{replay_one, RuleRecord};
use super::subtable::Subtable;
use crate::key::FlowKey;

/// The smallest batch [`crate::FlowTable::insert_batch`] splits over
/// [`crate::TableConfig::insert_threads`] threads (below it, starting a thread costs more than
/// it saves); also the smallest replayed insert run split so.
pub const PARALLEL_MIN_BATCH: usize = 16_384;

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
    F: Fn(usize) -> Option<(u32, &'k FlowKey, StoredRule)>,
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
            if let Some((id, key, rule)) = get(i) {
                if let Some(Some(st)) = share.get_mut(id as usize) {
                    out.push(st.insert(key, rule));
                }
            }
        },
    );
}

impl Classifier {
    /// Inserts the rules `0..n` of a batch on `threads` threads, each owning whole subtables
    /// (`owner[id]`, a thread index; missing ids belong to thread 0). `get(i)` gives rule `i`'s
    /// subtable, key and stored rule (`None`: not inserted). Every thread takes its rules in batch
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
        F: Fn(usize) -> Option<(u32, &'k FlowKey, StoredRule)> + Sync,
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

    /// Replays the insert run `run` (records of handles `first ..`) on `threads` threads, each
    /// owning whole subtables and replaying their records in order (as
    /// [`Classifier::insert_parallel`]), reading keys from `published`.
    pub(super) fn replay_parallel(
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
}
