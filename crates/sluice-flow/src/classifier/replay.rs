//! The replay of a batch's operation log on the other classifier copy (the [`Absorb`] side of
//! the publish protocol, [`crate::publish`]).
//!
//! Both copies apply the same operations in the same order, so they share one layout: an
//! insert is replayed from the writer's [`RuleRecord`] by writing the bucket and entry the
//! first copy chose, with the key read from that copy's entry. Inserts are replayed in order,
//! the bucket of the one [`GROUP`] places ahead asked into cache as each is written, or, for a
//! big run, on several threads ([`super::parallel`]). Removals are replayed by entry, with
//! their keys and buckets asked for some operations ahead.

use super::bucket_table::JOINED;
use super::copy::{Classifier, BUCKET_AHEAD, GROUP, KEY_AHEAD};
use super::ops::{Op, RuleRecord};
use super::parallel::PARALLEL_MIN_BATCH;
use crate::publish::Absorb;

impl Absorb<Op> for Classifier {
    type Context = [Option<RuleRecord>];

    fn absorb(&mut self, op: &Op, records: &[Option<RuleRecord>], published: &Classifier) {
        match op {
            Op::InsertRecorded { first, count } => {
                let start = *first as usize;
                let end = start.saturating_add(*count as usize);
                let run = records.get(start..end).unwrap_or(&[]);
                if self.insert_threads > 1 && run.len() >= PARALLEL_MIN_BATCH {
                    self.replay_parallel(published, run, *first, self.insert_threads);
                } else {
                    self.replay_in_order(published, run, *first);
                }
            }
            _ => self.apply(op),
        }
    }

    /// Each operation in order; a removal's key and bucket are asked for [`KEY_AHEAD`] and
    /// [`BUCKET_AHEAD`] operations before it is applied (a run of deletions misses the cache
    /// twice per rule otherwise).
    fn absorb_log(&mut self, ops: &[Op], records: &[Option<RuleRecord>], published: &Classifier) {
        for (i, op) in ops.iter().enumerate() {
            for ahead in [KEY_AHEAD, BUCKET_AHEAD] {
                if let Some(Op::Remove { id, entry, .. }) = ops.get(i + ahead) {
                    self.prefetch_removal(*id, *entry, ahead);
                }
            }
            self.absorb(op, records, published);
        }
    }

    fn finish(&mut self) {
        self.finish_batch();
    }
}

impl Classifier {
    /// Replays the insert run `run` (records of handles `first ..`) on this thread, in order,
    /// with the bucket of the insert [`GROUP`] places ahead asked into cache as each one is
    /// written (a sliding window: as many bucket reads in flight all along the run).
    fn replay_in_order(&mut self, published: &Classifier, run: &[Option<RuleRecord>], first: u32) {
        for (k, (h, r)) in (first..).zip(run).enumerate() {
            if let Some(Some(a)) = run.get(k + GROUP) {
                if let (Some(Some(st)), Some(Some(src))) = (
                    self.subtables.get(a.mask_id as usize),
                    published.subtables.get(a.mask_id as usize),
                ) {
                    if a.bucket == JOINED {
                        st.prefetch_home_from(src, a.entry);
                    } else {
                        st.prefetch_pos(a.bucket);
                    }
                }
            }
            if let Some(r) = r {
                self.insert_record(published, h, r);
            }
        }
    }
}
