//! [`FlowTable::insert_batch`](super::FlowTable::insert_batch) on several threads: the
//! writer's side (handles and records) of [`Classifier::insert_parallel`].
//!
//! Handles stay those of in-order insertion. Each valid rule is inserted with its provisional
//! handle — the one in-order allocation gives it if no earlier rule fails
//! ([`Idr::nth_next`](super::Idr::nth_next)). Then, in batch order, the real handles are
//! allocated and recorded; they equal the provisional ones until the first failure (a
//! duplicate). After it, each inserted rule is given its real handle in place
//! ([`Classifier::rehandle`]), and a duplicate that names a moved provisional handle reports the
//! real one.

use super::intern::FoldMap;
use super::writer::{Prep, WriterState, INVALID};
use crate::classifier::{balance, Classifier, Op, RuleRecord, StoredRule};
use crate::rule::{Handle, Rule, RuleError};

/// What the threads of one parallel insert produced.
struct Placed<'a> {
    /// Each rule's provisional handle (`u32::MAX` for an invalid rule).
    provisional: &'a [u32],
    /// The thread that owns each subtable id.
    owner: &'a [u8],
    /// Each thread's results, in batch order: `(entry, bucket)` or the duplicate's handle.
    results: &'a [Vec<Result<(u32, u32), u32>>],
}

impl WriterState {
    /// [`FlowTable::insert_batch`](super::FlowTable::insert_batch) on `threads` threads (see
    /// [`TableConfig::insert_threads`](super::TableConfig::insert_threads)); the batch fits the
    /// quotas (see the module documentation).
    pub(super) fn insert_parallel(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        preps: &[Prep],
        rules: &[Rule],
        counts: &[usize],
        threads: usize,
    ) -> Vec<Result<Handle, RuleError>> {
        let provisional = self.provisional_handles(preps);
        let owner = balance(counts, threads);
        let mut results = core::mem::take(&mut self.scratch.results);
        results.resize_with(threads, Vec::new);
        results.truncate(threads);
        cls.insert_parallel(
            rules.len(),
            &owner,
            |i| {
                let p = preps.get(i)?;
                if p.mask_id == INVALID {
                    return None;
                }
                let r = rules.get(i)?;
                let rule = StoredRule {
                    prio: r.priority,
                    handle: *provisional.get(i)?,
                    action: p.action,
                };
                Some((p.mask_id, &r.matcher.key, rule))
            },
            &mut results,
        );
        let placed = Placed {
            provisional: &provisional,
            owner: &owner,
            results: &results,
        };
        let out = self.settle(cls, ops, preps, rules, &placed);
        self.scratch.provisional = provisional;
        self.scratch.results = results;
        out
    }

    /// Each rule's provisional handle: the one in-order allocation gives it if no rule before it
    /// fails (`u32::MAX` for an invalid rule, which gets none).
    fn provisional_handles(&mut self, preps: &[Prep]) -> Vec<u32> {
        let mut provisional = core::mem::take(&mut self.scratch.provisional);
        provisional.clear();
        provisional.reserve(preps.len());
        let mut valid = 0;
        for p in preps {
            if p.mask_id == INVALID {
                provisional.push(u32::MAX);
            } else {
                provisional.push(self.handles.nth_next(valid));
                valid += 1;
            }
        }
        provisional
    }

    /// In batch order: allocates and records the real handle of every inserted rule (moving
    /// it from its provisional one when a failure came before), and reports the failures.
    fn settle(
        &mut self,
        cls: &mut Classifier,
        ops: &mut Vec<Op>,
        preps: &[Prep],
        rules: &[Rule],
        placed: &Placed<'_>,
    ) -> Vec<Result<Handle, RuleError>> {
        let mut cursor = vec![0usize; placed.results.len()];
        // Provisional handles that a failure before them moved, to their real ones.
        let mut moved: FoldMap<u32, u32> = FoldMap::default();
        let mut out = Vec::with_capacity(rules.len());
        for ((p, r), &pv) in preps.iter().zip(rules).zip(placed.provisional) {
            if p.mask_id == INVALID {
                out.push(Err(RuleError::InvalidMask));
                continue;
            }
            let t = usize::from(placed.owner.get(p.mask_id as usize).copied().unwrap_or(0));
            let res = match (placed.results.get(t), cursor.get_mut(t)) {
                (Some(rs), Some(c)) => {
                    *c += 1;
                    rs.get(*c - 1).copied().unwrap_or(Err(u32::MAX))
                }
                _ => Err(u32::MAX),
            };
            out.push(match res {
                Ok((entry, bucket)) => {
                    let h = self.handles.alloc();
                    if h != pv {
                        let done = cls.rehandle(p.mask_id, entry, r.priority, pv, h);
                        debug_assert!(done, "provisional handle not found");
                        moved.insert(pv, h);
                    }
                    let record = RuleRecord {
                        mask_id: p.mask_id,
                        priority: r.priority,
                        entry,
                        bucket,
                        action: p.action,
                    };
                    self.record(ops, h, record);
                    Ok(Handle(h))
                }
                Err(existing) => {
                    if p.action != INVALID {
                        self.actions.release(p.action, cls, ops);
                    }
                    let existing = moved.get(&existing).copied().unwrap_or(existing);
                    Err(RuleError::Duplicate {
                        existing: Handle(existing),
                    })
                }
            });
        }
        out
    }
}
