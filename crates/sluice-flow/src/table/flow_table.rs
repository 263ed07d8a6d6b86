//! The operations API of a flow table ([`FlowTable`]): batches of inserts, deletes and
//! modifications, each applied to the standby classifier copy and published at once, and the
//! queries the writer answers (rules by handle, dumps, quotas).

use std::borrow::Cow;

use hashbrown::HashSet;

use super::intern::{ActionLists, Idr, Masks};
use super::reader::Reader;
use super::writer::{Scratch, TableConfig, WriterState, BYTES_PER_RULE};
use crate::action::ActionList;
use crate::classifier::{Classifier, Op, BUCKET_AHEAD, KEY_AHEAD, PARALLEL_MIN_BATCH};
use crate::key::{FlowKey, Mask};
use crate::publish::Writer;
use crate::rule::{BatchMode, Handle, Match, Rule, RuleError, RuleRef};

/// The writer side of a flow table. Not `Clone`; one per table.
///
/// ```
/// use sluice_flow::{parse_rule, Action, FlowKey, FlowTable, PortNames, TableConfig};
/// let mut ports = PortNames::new();
/// ports.insert("uplink", 1);
/// let rule = |line: &str| parse_rule(line, &ports).unwrap();
///
/// let mut table = FlowTable::new(TableConfig::default());
/// let web = rule("prio 10 eth_type ipv4 ip_proto tcp dst_port 80 action output:uplink");
/// let web = table.insert(web).unwrap();
/// table.insert(rule("prio 1 dst_ip 10.0.0.0/8 action drop")).unwrap();
///
/// // A TCP/IPv4 frame 10.0.0.1:1234 -> 10.0.0.2:80.
/// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
/// frame.extend([0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
/// let key = FlowKey::extract(&frame, &sluice_wire::parse(&frame).unwrap(), 2);
/// let reader = table.reader(); // clone one per thread; lookups never lock
/// let (handle, priority, actions) = reader.lookup(&key).unwrap();
/// assert_eq!((handle, priority), (web, 10));
/// assert_eq!(actions.as_slice(), &[Action::Output(1)]);
///
/// table.delete(web).unwrap(); // published at once
/// assert_eq!(reader.lookup(&key).unwrap().2.as_slice(), &[Action::Drop]);
/// ```
pub struct FlowTable {
    lr: Writer<Classifier, Op>,
    w: WriterState,
}

impl FlowTable {
    /// An empty table.
    pub fn new(config: TableConfig) -> Self {
        FlowTable {
            lr: Writer::new(Classifier::default()),
            w: WriterState {
                scratch: Scratch::default(),
                config,
                store: Vec::new(),
                handles: Idr::default(),
                masks: Masks::default(),
                actions: ActionLists::default(),
                rules: 0,
                generation: 0,
            },
        }
    }

    /// A reader for lookups from any thread.
    pub fn reader(&self) -> Reader {
        Reader {
            h: self.lr.reader(),
        }
    }

    /// The quotas.
    pub fn config(&self) -> TableConfig {
        self.w.config
    }

    /// Changes the quotas (existing rules stay, even above a lowered quota).
    pub fn set_config(&mut self, config: TableConfig) {
        self.w.config = config;
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.w.rules
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.w.rules == 0
    }

    /// Number of distinct masks.
    pub fn masks(&self) -> usize {
        self.w.masks.by_mask.len()
    }

    /// Number of batches published.
    pub fn generation(&self) -> u64 {
        self.w.generation
    }

    /// The memory estimate per rule used by the quota.
    pub const fn bytes_per_rule() -> usize {
        BYTES_PER_RULE
    }

    /// Estimated bytes in use (rules × [`FlowTable::bytes_per_rule`]).
    pub fn bytes_estimate(&self) -> usize {
        self.w.rules * BYTES_PER_RULE
    }

    /// The rule with this handle.
    pub fn rule(&self, h: Handle) -> Option<Rule> {
        self.rule_in(&self.lr.published(), h)
    }

    /// The rules with these handles (those that exist), the published copy taken once for
    /// all of them ([`FlowTable::rule`] takes it per rule).
    pub fn rules_of<'a>(
        &'a self,
        handles: impl Iterator<Item = Handle> + 'a,
    ) -> impl Iterator<Item = (Handle, Rule)> + 'a {
        let cls = self.lr.published();
        handles.filter_map(move |h| Some((h, self.rule_in(&cls, h)?)))
    }

    /// The actions of rule `h` (without reading its key).
    pub fn actions_of(&self, h: Handle) -> Option<ActionList> {
        let s = self.w.store.get(h.0 as usize)?.as_ref()?;
        self.w.actions.list(s.action).cloned()
    }

    /// A number for rule `h`'s mask, the same for every rule of that mask while it has rules
    /// (a number freed with its mask's last rule may be given to another mask later): for a
    /// caller that groups many rules by mask without hashing masks.
    pub fn mask_number(&self, h: Handle) -> Option<u32> {
        Some(self.w.store.get(h.0 as usize)?.as_ref()?.mask_id)
    }

    /// The mask of rule `h` (without reading its key: a deletion by handle needs no more).
    pub fn mask_of(&self, h: Handle) -> Option<Mask> {
        let s = self.w.store.get(h.0 as usize)?.as_ref()?;
        self.w.masks.mask(s.mask_id).copied()
    }

    /// The rule with handle `h`, its key read from classifier copy `cls` (the published copy
    /// holds every rule the writer has a record of).
    fn rule_in(&self, cls: &Classifier, h: Handle) -> Option<Rule> {
        let s = self.w.store.get(h.0 as usize)?.as_ref()?;
        let mask = *self.w.masks.mask(s.mask_id)?;
        Some(Rule {
            matcher: Match {
                key: cls.entry_key(s.mask_id, s.entry)?,
                mask,
            },
            priority: s.priority,
            actions: self.w.actions.list(s.action)?.clone(),
        })
    }

    /// Every rule, by handle order.
    pub fn rules(&self) -> impl Iterator<Item = (Handle, Rule)> + '_ {
        let cls = self.lr.published();
        (0..self.w.store.len() as u32)
            .filter_map(move |h| self.rule_in(&cls, Handle(h)).map(|r| (Handle(h), r)))
    }

    /// The handle of the rule with exactly this match and priority.
    pub fn find(&self, matcher: &Match, priority: u32) -> Option<Handle> {
        let id = *self.w.masks.by_mask.get(&matcher.mask)?;
        self.lr
            .published()
            .find_exact(id, &matcher.key, priority)
            .map(Handle)
    }

    /// [`FlowTable::find`] of many (match, priority) targets, in order: bursts that fetch
    /// their buckets and entries from memory together (a modification or deletion batch over
    /// a million rules finds each rule this way).
    pub fn find_batch(&self, targets: &[(&Match, u32)]) -> Vec<Option<Handle>> {
        let cls = self.lr.published();
        let mut ids: Vec<(u32, &FlowKey, u32)> = Vec::with_capacity(targets.len());
        let mut known = Vec::with_capacity(targets.len());
        for &(m, prio) in targets {
            match self.w.masks.by_mask.get(&m.mask) {
                Some(&id) => {
                    ids.push((id, &m.key, prio));
                    known.push(true);
                }
                None => known.push(false),
            }
        }
        let mut found = Vec::with_capacity(ids.len());
        cls.find_exact_burst(&ids, &mut found);
        let mut found = found.into_iter();
        known
            .into_iter()
            .map(|k| {
                if k {
                    found.next().flatten().map(Handle)
                } else {
                    None
                }
            })
            .collect()
    }

    /// Inserts one rule (a batch of one).
    pub fn insert(&mut self, rule: Rule) -> Result<Handle, RuleError> {
        self.insert_batch(vec![rule], BatchMode::BestEffort)
            .pop()
            .unwrap_or(Err(RuleError::Aborted))
    }

    /// Deletes one rule by handle (a batch of one).
    pub fn delete(&mut self, h: Handle) -> Result<(), RuleError> {
        self.delete_batch(vec![RuleRef::Handle(h)], BatchMode::BestEffort)
            .pop()
            .unwrap_or(Err(RuleError::Aborted))
    }

    /// Inserts rules and publishes them at once. Result `i` is rule `i`'s handle or error.
    pub fn insert_batch(
        &mut self,
        rules: Vec<Rule>,
        mode: BatchMode,
    ) -> Vec<Result<Handle, RuleError>> {
        self.insert_batch_ref(&rules, mode)
    }

    /// [`FlowTable::insert_batch`] of borrowed rules (the table keeps copies of what it
    /// needs), for a caller that reuses its vector of rules or drops them elsewhere: a daemon
    /// streaming a rules file refills its parse buffers, and drops the parsed rules on its
    /// parsing thread, which took their references to their shared action lists (the table
    /// takes none per rule).
    pub fn insert_batch_ref(
        &mut self,
        rules: &[Rule],
        mode: BatchMode,
    ) -> Vec<Result<Handle, RuleError>> {
        let mut out = Vec::new();
        self.insert_batch_ref_into(rules, mode, &mut out);
        out
    }

    /// [`FlowTable::insert_batch_ref`] with the results written into `out` (emptied first),
    /// for a caller that keeps that vector from one batch to the next: a big batch's results
    /// are megabytes, and a fresh vector's pages fault in as it is filled. (A batch inserted
    /// on several threads, [`TableConfig::insert_threads`], still gathers its results in a
    /// vector of its own first, then copies them into `out`.)
    pub fn insert_batch_ref_into(
        &mut self,
        rules: &[Rule],
        mode: BatchMode,
        out: &mut Vec<Result<Handle, RuleError>>,
    ) {
        out.clear();
        let n = rules.len();
        let mut ops = self.lr.take_log_buffer();
        let cls = self.lr.standby_mut(&self.w.store);
        let w = &mut self.w;
        if cls.insert_threads().max(1) != w.config.insert_threads.max(1) {
            // (Logged, so the other copy replays big runs with as many threads.)
            let op = Op::InsertThreads(w.config.insert_threads);
            cls.apply(&op);
            ops.push(op);
        }
        let (preps, fresh, counts) = w.prepare(cls, &mut ops, rules);
        if mode == BatchMode::AllOrNothing {
            // Validate first: a failing batch must leave the standby copy exactly as it was
            // (both copies keep one layout, which the replay relies on), so nothing is inserted
            // and undone.
            if let Some((at, err)) = w.first_failure(cls, &preps, rules) {
                w.abandon(cls, preps, &fresh);
                let mut err = Some(err);
                out.extend((0..n).map(|i| match err.take_if(|_| i == at) {
                    Some(e) => Err(e),
                    None => Err(RuleError::Aborted),
                }));
                return;
            }
        }
        if n >= 256 {
            w.reserve(cls, &mut ops, &counts);
        }
        // New handles extend the records: grow them once for the whole batch.
        w.store.reserve(n.saturating_sub(w.handles.free.len()));
        let threads = w
            .config
            .insert_threads
            .min(counts.iter().filter(|&&c| c > 0).count());
        if threads > 1 && n >= PARALLEL_MIN_BATCH && w.fits(n) {
            out.extend(w.insert_parallel(cls, &mut ops, &preps, rules, &counts, threads));
        } else {
            w.insert_in_order(cls, &mut ops, &preps, rules, out);
        }
        w.drop_unused(cls, &mut ops, &fresh);
        w.scratch.preps = preps;
        self.finish(ops);
    }

    /// Deletes rules and publishes the result at once.
    pub fn delete_batch(
        &mut self,
        targets: Vec<RuleRef>,
        mode: BatchMode,
    ) -> Vec<Result<(), RuleError>> {
        self.delete_with(targets.len(), mode, |i| targets.get(i).map(Cow::Borrowed))
    }

    /// [`FlowTable::delete_batch`] of rules named by their handles (no vector of
    /// [`RuleRef`]s, each as big as a match, to build).
    pub fn delete_handles(
        &mut self,
        handles: &[Handle],
        mode: BatchMode,
    ) -> Vec<Result<(), RuleError>> {
        self.delete_with(handles.len(), mode, |i| {
            handles.get(i).map(|&h| Cow::Owned(RuleRef::Handle(h)))
        })
    }

    /// Deletes the `n` rules `target(0) .. target(n - 1)` name, in order, and publishes.
    fn delete_with<'t>(
        &mut self,
        n: usize,
        mode: BatchMode,
        target: impl Fn(usize) -> Option<Cow<'t, RuleRef>>,
    ) -> Vec<Result<(), RuleError>> {
        let cls = self.lr.standby_mut(&self.w.store);
        let w = &mut self.w;
        let mut ops = Vec::with_capacity(n + 1);
        let mut out = Vec::with_capacity(n);
        if mode == BatchMode::AllOrNothing {
            // Resolve every target first, so that a failing batch changes nothing.
            let mut seen = HashSet::new();
            let resolved: Vec<Result<u32, RuleError>> = (0..n)
                .map(|i| {
                    let t = target(i).ok_or(RuleError::NotFound)?;
                    let h = w.resolve(cls, &t)?;
                    if seen.insert(h) {
                        Ok(h)
                    } else {
                        // Already deleted earlier in this batch: what a sequential delete
                        // would say.
                        Err(already_gone(&t, h))
                    }
                })
                .collect();
            if let Some(aborted) = aborted(mode, &resolved) {
                return aborted;
            }
            for (i, r) in resolved.iter().enumerate() {
                // The keys and buckets of the deletions ahead are asked for while this one
                // runs.
                for ahead in [KEY_AHEAD, BUCKET_AHEAD] {
                    if let Some(Ok(h)) = resolved.get(i + ahead) {
                        w.prefetch_delete(cls, *h, ahead);
                    }
                }
                out.push(r.clone().map(|h| w.delete_one(cls, &mut ops, Handle(h))));
            }
        } else {
            // Each target resolved as its turn comes: one deleted earlier in the batch is no
            // longer found, as a sequential delete would find it.
            for i in 0..n {
                for ahead in [KEY_AHEAD, BUCKET_AHEAD] {
                    if let Some(RuleRef::Handle(h)) = target(i + ahead).as_deref() {
                        w.prefetch_delete(cls, h.0, ahead);
                    }
                }
                let r = target(i)
                    .ok_or(RuleError::NotFound)
                    .and_then(|t| w.resolve(cls, &t));
                out.push(r.map(|h| w.delete_one(cls, &mut ops, Handle(h))));
            }
        }
        self.finish(ops);
        out
    }

    /// Replaces the actions of rules (match and priority stay) and publishes at once.
    pub fn modify_batch(
        &mut self,
        changes: Vec<(RuleRef, ActionList)>,
        mode: BatchMode,
    ) -> Vec<Result<Handle, RuleError>> {
        let (targets, actions): (Vec<RuleRef>, Vec<ActionList>) = changes.into_iter().unzip();
        self.modify_with(actions, mode, |w, cls, i| {
            let t = targets.get(i).ok_or(RuleError::NotFound)?;
            w.resolve(cls, t)
        })
    }

    /// [`FlowTable::modify_batch`] of rules named by their handles (no vector of
    /// [`RuleRef`]s, each as big as a match, to build).
    pub fn modify_handles(
        &mut self,
        changes: Vec<(Handle, ActionList)>,
        mode: BatchMode,
    ) -> Vec<Result<Handle, RuleError>> {
        let (handles, actions): (Vec<Handle>, Vec<ActionList>) = changes.into_iter().unzip();
        self.modify_with(actions, mode, |w, cls, i| {
            let h = handles.get(i).ok_or(RuleError::NotFound)?;
            w.resolve(cls, &RuleRef::Handle(*h))
        })
    }

    /// Gives the rule `resolve(i)` names the actions `actions[i]`, for every `i`, and
    /// publishes.
    fn modify_with(
        &mut self,
        actions: Vec<ActionList>,
        mode: BatchMode,
        resolve: impl Fn(&WriterState, &Classifier, usize) -> Result<u32, RuleError>,
    ) -> Vec<Result<Handle, RuleError>> {
        let cls = self.lr.standby_mut(&self.w.store);
        let w = &mut self.w;
        let resolved: Vec<Result<u32, RuleError>> =
            (0..actions.len()).map(|i| resolve(w, cls, i)).collect();
        if let Some(aborted) = aborted(mode, &resolved) {
            return aborted;
        }
        let mut ops = Vec::with_capacity(actions.len() + 1);
        let mut out = Vec::with_capacity(actions.len());
        for (r, list) in resolved.into_iter().zip(actions) {
            out.push(r.map(|h| {
                w.modify_one(cls, &mut ops, h, list);
                Handle(h)
            }));
        }
        self.finish(ops);
        out
    }

    /// Brings the second copy up to date with the last batch now, if no reader holds it (see
    /// [`crate::publish::Writer::catch_up`]): for a writer that is idle between batches, so
    /// that the next batch starts without that replay. True when nothing is left to replay.
    pub fn catch_up(&mut self) -> bool {
        self.lr.catch_up(&self.w.store)
    }

    fn finish(&mut self, mut ops: Vec<Op>) {
        self.w.generation += 1;
        let op = Op::Generation(self.w.generation);
        let cls = self.lr.standby_mut(&self.w.store);
        cls.apply(&op);
        cls.finish_batch();
        ops.push(op);
        self.lr.publish(ops);
    }
}

/// The error for target `t`, resolved to rule `h`, when an earlier target of its batch
/// named the same rule.
fn already_gone(t: &RuleRef, h: u32) -> RuleError {
    match t {
        RuleRef::Handle(_) => RuleError::UnknownHandle(Handle(h)),
        RuleRef::Exact { .. } => RuleError::NotFound,
    }
}

/// The results of an all-or-nothing batch that fails: each target's own error, or
/// [`RuleError::Aborted`] for the targets that would have succeeded; `None` when the batch goes
/// ahead (best effort, or every target resolved).
fn aborted<T>(
    mode: BatchMode,
    resolved: &[Result<u32, RuleError>],
) -> Option<Vec<Result<T, RuleError>>> {
    if mode != BatchMode::AllOrNothing || resolved.iter().all(|r| r.is_ok()) {
        return None;
    }
    Some(
        resolved
            .iter()
            .map(|r| Err(r.clone().err().unwrap_or(RuleError::Aborted)))
            .collect(),
    )
}
