//! The switch's durable state (`sluice run --db`): every acknowledged change is recorded in a
//! [`sluice_store::Store`] before the switch answers, and [`Switch::open_store`] rebuilds the
//! switch from it at start. See `docs/store.md` ("How the daemon uses it") and
//! `docs/control.md` ("Durable state").
//!
//! What is stored: each port (handle, name, number, kind, and the settings `gro`, `offloads`,
//! `netns`, `udp_tunnel_gso`, `gro_tunnel`, `gro_udp` and the overrides `vlan_depth`,
//! `envelope`, `gso_max_size`, `gso_max_segs`) with the feature overrides the operator set
//! (long ethtool names), and each rule as the text the client sent (the match bytes; the action
//! bytes are empty) with its priority and handle. Counters are not stored.
//!
//! Order of a change: apply it to the switch, commit it, answer. When the commit fails the
//! change is undone (a port closed again, rules deleted or put back with their handles,
//! features set back) and the client gets the store's error: nothing is acknowledged that is
//! not on disk.

use super::*;
use sluice_datapath::{BufPool, PacketBuf, Port as DpPort, PortError};
use sluice_flow::ActionList;
use sluice_offload::features::{Device, Features};
use sluice_offload::tx::DeviceWork;
use sluice_store::{Change, Port as StoredPort, RuleRef as StoredRule, Store, StoreError};
use std::path::Path;

/// What [`Switch::open_store`] found and restored, for the daemon's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreReport {
    /// Repairs and problems worth a warning line (a torn tail with what was dropped, a port
    /// whose device is gone, a feature that could not be set again).
    pub warnings: Vec<String>,
    /// Ports restored (up or down).
    pub ports: usize,
    /// Of them, ports whose device could not be opened: they start `down`.
    pub ports_down: usize,
    /// Rules restored.
    pub rules: usize,
    /// Quotas restored (set at run time with `quota set`; they win over the configuration).
    pub quotas: usize,
    /// The store had never recorded anything (a first start): the daemon seeds it from its
    /// configuration.
    pub fresh: bool,
}

/// The switch's store and when it last recorded a change.
pub(super) struct Durable {
    store: Store,
    last_commit: Instant,
}

/// Compaction waits until no change was recorded for this long (a rule load in chunks is not
/// stalled by it)…
const COMPACT_IDLE: Duration = Duration::from_secs(1);

/// …unless the journal has grown past this.
const COMPACT_ANYWAY: u64 = 1 << 30;

/// Most rules restored per classifier batch.
const RESTORE_CHUNK: usize = 65_536;

/// Rules in one commit from which it runs on a second thread, beside the flow table's replay
/// ([`commit_beside_replay`]; below it, starting a thread costs more than it saves).
const OVERLAPPED_COMMIT_MIN: usize = 4096;

fn store_error(e: StoreError) -> SwitchError {
    SwitchError::Store(format!("{e}; the change was not applied"))
}

/// The store's record of a port.
fn stored_port(
    handle: u64,
    number: u32,
    req: &PortRequest,
    features: BTreeMap<String, bool>,
) -> StoredPort {
    StoredPort {
        handle,
        name: req.name.clone(),
        number,
        kind: req.kind.name().to_string(),
        settings: stored_settings(req),
        features,
    }
}

/// The store's record of a port's settings: every one the request holds (numbers only when
/// overridden).
fn stored_settings(req: &PortRequest) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::new();
    settings.insert("gro".to_string(), req.gro.to_string());
    settings.insert("offloads".to_string(), req.offloads.to_string());
    settings.insert("gro_tunnel".to_string(), req.gro_tunnel.to_string());
    settings.insert("udp_tunnel_gso".to_string(), req.udp_tunnel_gso.to_string());
    settings.insert("gro_udp".to_string(), req.gro_udp.to_string());
    if let Some(ns) = &req.netns {
        settings.insert("netns".to_string(), ns.clone());
    }
    let numbers = [
        ("vlan_depth", req.vlan_depth.map(u32::from)),
        ("envelope", req.envelope),
        ("gso_max_size", req.gso_max_size),
        ("gso_max_segs", req.gso_max_segs),
    ];
    for (k, v) in numbers {
        if let Some(v) = v {
            settings.insert(k.to_string(), v.to_string());
        }
    }
    settings
}

/// The request that opens a stored port again.
fn port_request(p: &StoredPort) -> Result<PortRequest, String> {
    let kind = match p.kind.as_str() {
        "tap" => PortKind::Tap,
        "afpacket" => PortKind::AfPacket,
        "tun" => PortKind::Tun,
        other => return Err(format!("unknown port kind {other:?}")),
    };
    let flag = |key: &str, default: bool| -> Result<bool, String> {
        match p.settings.get(key).map(String::as_str) {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(v) => Err(format!("setting {key} = {v:?} is not true or false")),
        }
    };
    let mut req = PortRequest {
        number: Some(p.number),
        gro: flag("gro", false)?,
        offloads: flag("offloads", true)?,
        netns: p.settings.get("netns").cloned(),
        gro_tunnel: flag("gro_tunnel", true)?,
        udp_tunnel_gso: flag("udp_tunnel_gso", true)?,
        gro_udp: flag("gro_udp", false)?,
        ..PortRequest::new(&p.name, kind)
    };
    for key in ["vlan_depth", "envelope", "gso_max_size", "gso_max_segs"] {
        if let Some(v) = p.settings.get(key) {
            req.set(key, v)?;
        }
    }
    Ok(req)
}

/// Deletes the TAP of `req` that a switch with a store kept (`persist`: made it persistent)
/// once the port is gone. Best effort: the device may already have been deleted.
pub(super) fn delete_kept_tap(req: &PortRequest, persist: bool) {
    if !persist || req.kind != PortKind::Tap {
        return;
    }
    let name = req.name.clone();
    let delete = move || sluice_ports::tap::Tap::delete_persistent(&name);
    let _ = match &req.netns {
        None => delete(),
        Some(ns) => sluice_ports::netns::enter_named(ns, delete).and_then(|r| r),
    };
}

/// Stands in for a restored port whose device could not be opened: its first poll fails with
/// `ENODEV`, which takes the port `down`, and the switch's recovery of down ports reattaches
/// the device when it is back.
struct AbsentPort {
    name: String,
    kind: &'static str,
}

fn absent() -> PortError {
    const ENODEV: i32 = 19;
    PortError::io(
        "the device was absent when the switch started",
        std::io::Error::from_raw_os_error(ENODEV),
    )
}

impl DpPort for AbsentPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        self.kind
    }

    fn device(&self) -> Device {
        Device::new(Features::NONE)
    }

    fn changeable(&self) -> Features {
        Features::NONE
    }

    fn set_feature(&mut self, _: Feature, _: bool) -> Result<(), PortError> {
        Err(absent())
    }

    fn recv(
        &mut self,
        _: &mut BufPool,
        _: &mut Vec<PacketBuf>,
        _: usize,
    ) -> Result<usize, PortError> {
        Err(absent())
    }

    fn send(&mut self, _: &[u8], _: &DeviceWork) -> Result<(), PortError> {
        Err(absent())
    }
}

/// Runs `commit` once, a store commit of a batch of `rules` rules that was just applied to the
/// flow table: for a big batch on a second thread, while this one replays the batch on the
/// table's second copy ([`FlowTable::catch_up`]), which the next batch would otherwise start
/// with (both are on the critical path of a streamed load). The replay is retried, yielding,
/// while a reader still holds that copy and the commit runs. If no thread can be started, the
/// commit runs here; a panic in it is resumed here.
fn commit_beside_replay<R: Send>(
    table: &mut FlowTable,
    rules: usize,
    mut commit: impl FnMut() -> R + Send,
) -> R {
    if rules < OVERLAPPED_COMMIT_MIN {
        return commit();
    }
    let overlapped = std::thread::scope(|s| {
        let run = &mut commit;
        let done = std::thread::Builder::new()
            .name("sluice-commit".into())
            .spawn_scoped(s, run)
            .ok()?;
        while !table.catch_up() && !done.is_finished() {
            std::thread::yield_now();
        }
        Some(
            done.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        )
    });
    // `None`: the thread was not started, so the commit has not run.
    overlapped.unwrap_or_else(commit)
}

impl Control {
    /// Commits `changes` if the switch has a store.
    pub(super) fn commit(&mut self, changes: &[Change]) -> Result<(), SwitchError> {
        self.commit_batch(changes, 0)
    }

    /// [`Control::commit`] of the changes of a batch of `rules` rules just applied to the flow
    /// table (see [`commit_beside_replay`]).
    fn commit_batch(&mut self, changes: &[Change], rules: usize) -> Result<(), SwitchError> {
        self.commit_with(rules, |s| s.commit(changes))
    }

    /// Runs `write`, a commit to the store, for a batch of `rules` rules just applied to the
    /// flow table, beside its replay ([`commit_beside_replay`]); `Ok` without a store.
    fn commit_with(
        &mut self,
        rules: usize,
        mut write: impl FnMut(&mut Store) -> Result<(), StoreError> + Send,
    ) -> Result<(), SwitchError> {
        let Some(d) = self.store.as_mut() else {
            return Ok(());
        };
        d.last_commit = Instant::now();
        let store = &mut d.store;
        commit_beside_replay(&mut self.table, rules, || write(store)).map_err(store_error)
    }

    /// Records a port about to be added (it gets the next port handle). On failure the
    /// handle is skipped, never handed out.
    pub(super) fn persist_port_add(
        &mut self,
        number: u32,
        req: &PortRequest,
    ) -> Result<(), SwitchError> {
        if self.store.is_none() {
            return Ok(());
        }
        let handle = self.next_port_handle + 1;
        let port = stored_port(handle, number, req, BTreeMap::new());
        let out = self.commit(&[Change::PortAdd(port)]);
        if out.is_err() {
            self.next_port_handle = handle;
        }
        out
    }

    /// Records the settings of the port with `handle` as `req` has them.
    pub(super) fn persist_port_settings(
        &mut self,
        handle: u64,
        req: &PortRequest,
    ) -> Result<(), SwitchError> {
        self.commit(&[Change::PortSettings {
            handle,
            settings: stored_settings(req),
        }])
    }

    /// Records the removal of port `name` with the rules deleted with it (`naming`), in one
    /// commit; on failure puts the `saved` rules back.
    pub(super) fn persist_port_del(
        &mut self,
        name: &str,
        naming: Vec<u64>,
        saved: Vec<(u64, Rule)>,
    ) -> Result<(), SwitchError> {
        let Some(handle) = self.ports.get(name).map(|e| e.handle) else {
            return Ok(());
        };
        let mut changes = Vec::with_capacity(2);
        if !naming.is_empty() {
            changes.push(Change::RulesDel(naming));
        }
        changes.push(Change::PortDel { handle });
        let out = self.commit(&changes);
        if out.is_err() {
            self.restore_rules(saved);
        }
        out
    }

    /// Copies of the table's rules `handles` with their switch handles, to put back if a
    /// deletion cannot be recorded (nothing without a store).
    pub(super) fn save_rules(&self, handles: impl Iterator<Item = Handle>) -> Vec<(u64, Rule)> {
        let mut out = Vec::new();
        self.save_rules_into(handles, &mut out);
        out
    }

    /// [`Control::save_rules`] into `out` (emptied first), a vector kept from batch to batch.
    pub(super) fn save_rules_into(
        &self,
        handles: impl Iterator<Item = Handle>,
        out: &mut Vec<(u64, Rule)>,
    ) {
        out.clear();
        if self.store.is_none() {
            return;
        }
        out.extend(self.table.rules_of(handles).map(|(h, r)| (self.ext(h), r)));
    }

    /// The current actions of these rules, to put back if a modification cannot be recorded
    /// (empty without a store).
    pub(super) fn save_actions(
        &self,
        handles: impl Iterator<Item = Handle>,
    ) -> Vec<(Handle, ActionList)> {
        if self.store.is_none() {
            return Vec::new();
        }
        handles
            .filter_map(|h| Some((h, self.table.actions_of(h)?)))
            .collect()
    }

    /// Records modified rules, given as (switch handle, the text of the rule line whose actions
    /// they now have), as one commit of [`Change::RuleModify`] records
    /// ([`sluice_store::Store::commit_modifies`]; the stored actions are that text; a restore
    /// takes the actions from it); on failure puts the old actions back (`saved`).
    /// `flow_mod_text` ends here.
    pub(super) fn persist_modified<'t>(
        &mut self,
        modified: impl Iterator<Item = (u64, &'t str)>,
        saved: Vec<(Handle, ActionList)>,
    ) -> Result<(), SwitchError> {
        if self.store.is_none() {
            return Ok(());
        }
        let modified: Vec<(u64, &[u8])> = modified.map(|(h, t)| (h, t.as_bytes())).collect();
        if modified.is_empty() {
            return Ok(());
        }
        let out = self.commit_with(modified.len(), |s| {
            s.commit_modifies(modified.iter().copied())
        });
        if out.is_err() {
            let back = saved
                .into_iter()
                .map(|(h, a)| (RuleRef::Handle(h), a))
                .collect();
            // The rules were found under the lock just before: putting their actions back
            // cannot fail.
            let _ = self.table.modify_batch(back, BatchMode::BestEffort);
        }
        out
    }

    /// Inserts `rules` under their switch handles (a rollback or a restore). Returns the
    /// errors, by switch handle.
    fn restore_rules(&mut self, rules: Vec<(u64, Rule)>) -> Vec<(u64, String)> {
        let (exts, rules): (Vec<u64>, Vec<Rule>) = rules.into_iter().unzip();
        let masks: Vec<Mask> = rules.iter().map(|r| r.matcher.mask).collect();
        let out = self.table.insert_batch(rules, BatchMode::BestEffort);
        let mut errors = Vec::new();
        for ((ext, r), mask) in exts.into_iter().zip(out).zip(masks) {
            match r {
                Ok(h) => self.record_insert_as(h, &mask, ext),
                Err(e) => errors.push((ext, self.rule_error(&e))),
            }
        }
        errors
    }

    /// Records the rules of a `flow_add` that went in (`results` with a handle and no error;
    /// `lines` the request's rule texts, `priorities` theirs by line) as one commit; on failure
    /// deletes them again.
    pub(super) fn persist_rules_added(
        &mut self,
        results: &[FlowResult],
        lines: &[String],
        priorities: &[u32],
    ) -> Result<(), SwitchError> {
        let added: Vec<(u64, u32, usize)> = results
            .iter()
            .filter(|r| r.error.is_none() && r.index < lines.len())
            .filter_map(|r| Some((r.handle?, *priorities.get(r.index)?, r.index)))
            .collect();
        self.persist_added(&added, |k| lines.get(k).map_or("", String::as_str))
    }

    /// Records rules that went in, given as (switch handle, priority, index of the rule text),
    /// with `text` giving each rule's text by its index, as one commit; on failure deletes them
    /// again. Both `flow_add` and `flow_add_text` end here. The caller gives the priority it
    /// parsed: looking each rule up in the table again cost a tenth of a million-rule load.
    /// (A slice of indexes rather than of texts: a text batch keeps the vector for the next
    /// one, which a vector borrowing this request's text could not be.)
    pub(super) fn persist_added<'t>(
        &mut self,
        added: &[(u64, u32, usize)],
        text: impl Fn(usize) -> &'t str + Sync,
    ) -> Result<(), SwitchError> {
        if self.store.is_none() || added.is_empty() {
            return Ok(());
        }
        let rules = || {
            added.iter().map(|&(handle, priority, k)| StoredRule {
                handle,
                priority,
                matches: text(k).as_bytes(),
                actions: &[],
            })
        };
        let out = self.commit_with(added.len(), |s| s.commit_rules(rules()));
        let Err(e) = out else {
            return Ok(());
        };
        let found: Vec<(Handle, Mask)> = added
            .iter()
            .filter_map(|&(ext, _, _)| {
                let h = self.int_of.get(ext)?;
                Some((h, self.table.rule(h)?.matcher.mask))
            })
            .collect();
        let undo = self.table.delete_batch(
            found.iter().map(|&(h, _)| RuleRef::Handle(h)).collect(),
            BatchMode::BestEffort,
        );
        for ((h, mask), r) in found.into_iter().zip(undo) {
            if r.is_ok() {
                self.record_delete(h, &mask);
            }
        }
        Err(e)
    }

    /// Records the rules of a `flow_del` that were deleted as one commit; on failure puts
    /// them back (`saved`) with their handles.
    pub(super) fn persist_rules_deleted(
        &mut self,
        results: &[FlowResult],
        mut saved: Vec<(u64, Rule)>,
    ) -> Result<(), SwitchError> {
        let deleted: Vec<u64> = results
            .iter()
            .filter(|r| r.error.is_none())
            .filter_map(|r| r.handle)
            .collect();
        self.persist_deleted(deleted, &mut saved)
    }

    /// Records the deletion of the rules with these switch handles as one commit; on failure
    /// puts those of them that `saved` holds back (taking them out of `saved`). Both
    /// `flow_del` and `flow_del_text` end here.
    pub(super) fn persist_deleted(
        &mut self,
        deleted: Vec<u64>,
        saved: &mut Vec<(u64, Rule)>,
    ) -> Result<(), SwitchError> {
        if self.store.is_none() {
            return Ok(());
        }
        if deleted.is_empty() {
            return Ok(());
        }
        let n = deleted.len();
        let mut changes = [Change::RulesDel(deleted)];
        let out = self.commit_batch(&changes, n);
        if out.is_err() {
            let [Change::RulesDel(deleted)] = &mut changes else {
                return out;
            };
            let gone: HashSet<u64> = deleted.drain(..).collect();
            let back = saved.drain(..).filter(|(e, _)| gone.contains(e)).collect();
            self.restore_rules(back);
        }
        out
    }
}

impl Switch {
    /// The state of a port's features, to set them back if recording a change fails (`None`
    /// without a store).
    pub(super) fn features_before(
        &self,
        port: &str,
    ) -> Result<Option<Vec<FeatureState>>, SwitchError> {
        if self.control().store.is_none() {
            return Ok(None);
        }
        self.features(port).map(Some)
    }

    /// Records feature changes just applied to `port` (as long ethtool names, so that a
    /// later change of one feature of an alias replays in the right order); on failure sets
    /// the features back as `before` had them.
    pub(super) fn persist_features(
        &self,
        port: &str,
        changes: &[(String, bool)],
        before: Option<Vec<FeatureState>>,
    ) -> Result<(), SwitchError> {
        let Some(before) = before else {
            return Ok(());
        };
        let mut ctl = self.control();
        let Some(entry) = ctl.ports.get_mut(port) else {
            return Ok(());
        };
        let mut features = entry.features.clone();
        // A short alias skips the features that are fixed (as ethtool does): so does the record.
        let changeable = |f: Feature| before.iter().any(|s| s.name == f.name() && s.changeable);
        for (name, on) in changes {
            let fs = features_named(name)?;
            let alias = fs.len() != 1 || fs.first().map(|f| f.name()) != Some(name.as_str());
            for f in fs {
                if !alias || changeable(f) {
                    features.insert(f.name().to_string(), *on);
                }
            }
        }
        let handle = entry.handle;
        let change = Change::PortFeatures {
            handle,
            features: features.clone(),
        };
        match ctl.commit(&[change]) {
            Ok(()) => {
                if let Some(entry) = ctl.ports.get_mut(port) {
                    entry.features = features;
                }
                Ok(())
            }
            Err(e) => {
                drop(ctl);
                let back: Vec<(String, bool)> = before
                    .into_iter()
                    .filter(|f| f.changeable)
                    .map(|f| (f.name, f.on))
                    .collect();
                for change in back {
                    let _ = self.apply_features(port, std::slice::from_ref(&change));
                }
                Err(e)
            }
        }
    }

    /// Opens the durable store in directory `dir` (created if absent) and rebuilds the
    /// switch from it: ports with their numbers, handles, settings and feature overrides,
    /// then rules with their handles; the handle counters continue from the store's, so no
    /// handle is ever handed out twice. From then on every change is recorded before it is
    /// acknowledged.
    ///
    /// Call it once, on a switch with no ports and no rules. A torn tail (a commit that was
    /// never acknowledged) is cut off and reported in [`StoreReport::warnings`]; a corrupt
    /// store, a port that cannot be described again, or a rule that does not parse or
    /// insert fails with an error naming the file and offset or the port or rule, and the
    /// switch is then unusable (it holds part of the state): the daemon exits.
    pub fn open_store(&self, dir: &Path) -> Result<StoreReport, SwitchError> {
        {
            let ctl = self.control();
            if ctl.store.is_some() || !ctl.ports.is_empty() || !ctl.table.is_empty() {
                return Err(SwitchError::Invalid(
                    "the store is opened once, on a switch with no ports and no rules".into(),
                ));
            }
        }
        let (store, state) = Store::open(dir).map_err(|e| SwitchError::Store(e.to_string()))?;
        let mut report = StoreReport::default();
        let rec = store.recovery();
        if let Some(t) = &rec.torn_tail {
            report.warnings.push(format!(
                "{}: torn tail at byte offset {}: {} bytes dropped ({}); a commit that was never acknowledged",
                t.path.display(),
                t.offset,
                t.dropped_bytes,
                t.reason
            ));
        }
        if rec.superseded_journal {
            report.warnings.push(format!(
                "{}: an interrupted compaction was finished",
                store.path().display()
            ));
        }
        for p in &rec.removed_temp_files {
            report
                .warnings
                .push(format!("{}: removed (left by a compaction)", p.display()));
        }
        report.fresh = state.ports.is_empty()
            && state.rules.is_empty()
            && state.next_port_handle == 0
            && state.next_rule_handle == 0;
        {
            let mut ctl = self.control();
            ctl.next_port_handle = ctl
                .next_port_handle
                .max(state.next_port_handle.saturating_sub(1));
            ctl.next_rule_handle = ctl
                .next_rule_handle
                .max(state.next_rule_handle.saturating_sub(1));
        }
        {
            // Quotas set at run time win over the configuration; before the rules, which
            // were inserted under them.
            let mut ctl = self.control();
            for (name, value) in &state.quotas {
                let value = usize::try_from(*value).unwrap_or(usize::MAX);
                if ctl.apply_quota(name, value) {
                    report.quotas += 1;
                } else {
                    report.warnings.push(format!(
                        "{}: unknown quota {name:?} ignored",
                        store.path().display()
                    ));
                }
            }
        }
        let threads = self.workers.threads();
        for port in state.ports.values() {
            let req = port_request(port).map_err(|e| {
                SwitchError::Store(format!(
                    "{}: port {:?} (handle {}): {e}",
                    store.path().display(),
                    port.name,
                    port.handle
                ))
            })?;
            let queues = match open_queues(&req, threads, true) {
                Ok(q) => q,
                Err(e) => {
                    report.ports_down += 1;
                    report.warnings.push(format!(
                        "port {} {:?} starts down: {e}",
                        port.number, port.name
                    ));
                    (0..threads.max(1))
                        .map(|_| {
                            Box::new(AbsentPort {
                                name: req.name.clone(),
                                kind: req.kind.name(),
                            }) as Box<dyn DpPort>
                        })
                        .collect()
                }
            };
            let opts = req.options();
            self.workers
                .add_port(port.number, queues, opts)?
                .map_err(|e| SwitchError::Port(format!("port {:?}: {e}", req.name)))?;
            {
                let mut ctl = self.control();
                ctl.add_name(&port.name, port.number);
                ctl.ports.insert(
                    port.name.clone(),
                    PortEntry {
                        number: port.number,
                        handle: port.handle,
                        req,
                        revive: None,
                        features: port.features.clone(),
                    },
                );
            }
            report.ports += 1;
            for (name, on) in &port.features {
                if let Err(e) = self.apply_features(&port.name, &[(name.clone(), *on)]) {
                    report.warnings.push(format!(
                        "port {:?}: feature {name} {}: {e}",
                        port.name,
                        if *on { "on" } else { "off" }
                    ));
                }
            }
        }
        let mut ctl = self.control();
        let mut batch = Vec::with_capacity(RESTORE_CHUNK.min(state.rules.len()));
        for rule in state.rules.values() {
            let text = String::from_utf8_lossy(&rule.matches);
            let bad = |text: &str, e: sluice_flow::ParseError| {
                SwitchError::Store(format!(
                    "{}: rule with handle {} does not parse: {}",
                    store.path().display(),
                    rule.handle,
                    e.render(text)
                ))
            };
            let mut parsed = parse_rule(&text, &ctl.names).map_err(|e| bad(&text, e))?;
            if !rule.actions.is_empty() {
                // A `flow mod` replaced the actions: they are those of the stored rule line.
                let text = String::from_utf8_lossy(&rule.actions);
                parsed.actions = parse_rule(&text, &ctl.names)
                    .map_err(|e| bad(&text, e))?
                    .actions;
            }
            batch.push((rule.handle, parsed));
            if batch.len() == RESTORE_CHUNK {
                restore_chunk(&mut ctl, &mut batch, store.path())?;
            }
        }
        restore_chunk(&mut ctl, &mut batch, store.path())?;
        report.rules = state.rules.len();
        ctl.store = Some(Durable {
            store,
            last_commit: Instant::now(),
        });
        Ok(report)
    }

    /// Compacts the store if it suggests it ([`Store::should_compact`]) and no change was
    /// recorded in the last second (or the journal is over 1 GiB); the daemon calls it once a
    /// second, between requests. Returns whether it compacted.
    pub fn compact_store(&self) -> Result<bool, SwitchError> {
        let mut ctl = self.control();
        let Some(d) = ctl.store.as_mut() else {
            return Ok(false);
        };
        let idle = d.last_commit.elapsed() >= COMPACT_IDLE;
        if !d.store.should_compact() || !(idle || d.store.journal_bytes() > COMPACT_ANYWAY) {
            return Ok(false);
        }
        d.store
            .compact()
            .map_err(|e| SwitchError::Store(e.to_string()))?;
        Ok(true)
    }
}

/// Inserts a chunk of restored rules; any refusal fails the start.
fn restore_chunk(
    ctl: &mut Control,
    batch: &mut Vec<(u64, Rule)>,
    path: &Path,
) -> Result<(), SwitchError> {
    let errors = ctl.restore_rules(std::mem::take(batch));
    match errors.first() {
        None => Ok(()),
        Some((handle, e)) => Err(SwitchError::Store(format!(
            "{}: rule with handle {handle} cannot be restored: {e}",
            path.display()
        ))),
    }
}
