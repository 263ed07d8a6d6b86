//! The in-process switch: datapath threads, and a control side that adds ports, rules and
//! feature changes while they forward.
//!
//! With [`SwitchConfig::threads`] above one, each thread has its own [`Datapath`] and its own
//! queue of every port ([`crate::workers`] has the design and why a flow's packets stay in
//! order); what follows holds for each thread.
//!
//! The datapath thread owns the [`Datapath`] (and so every port). It polls the ports; when a
//! poll finds nothing it waits for any port's descriptor to become readable, at most
//! [`SwitchConfig::poll_timeout`]. Control operations that touch ports (add, remove, feature
//! changes, statistics) are closures sent to that thread over a channel and run between two
//! polls, so the datapath itself takes no lock. Flow rules do not go through the thread at all:
//! the control side owns the [`FlowTable`] writer and publishes whole batches; the datapath's
//! next batch sees the new snapshot (readers never lock, never see half a batch).
//!
//! Ports are opened on the calling thread (in a named network namespace if asked), then handed
//! to the datapath thread.

mod handles;
mod text_batch;

pub use text_batch::{
    is_rule_line, text_lines, LineError, ParseBuffers, PreparedText, TextBatchReply,
};

mod quota;
pub use quota::{QuotaChange, QuotaInfo};

mod types;
use types::state_name;
pub use types::{
    FeatureState, FlowResult, PortInfo, PortKind, PortRequest, PortSettingsInfo, PortStatsInfo,
    SwitchConfig, PORT_SETTINGS,
};

use crate::workers::{open_queues, ThreadJob, ThreadStats, Workers};
use serde::{Deserialize, Serialize};
use sluice_coverage::counter;
use sluice_datapath::port::PortControl;
use sluice_datapath::{Datapath, DatapathConfig, PortOptions, PortStats, RuleCount, RuleCounters};
use sluice_flow::{
    parse_rule, Action, BatchMode, Field, FlowTable, Handle, Mask, PortNames, Rule, RuleError,
    RuleRef, RuleText, TableConfig,
};
use sluice_offload::features::{Device, DeviceLimits, Feature};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[path = "persist.rs"]
mod persist;
use persist::delete_kept_tap;
pub use persist::StoreReport;

counter!(pub SW_BAD_PORT_NUMBER, "sw_bad_port_number", "port_add refused: number 0 or above the OpenFlow range (MAX_PORT_NUMBER)");
counter!(pub SW_TOO_MANY_ACTIONS, "sw_too_many_actions", "rules refused: more than MAX_ACTIONS actions");
counter!(pub SW_BATCH_TOO_BIG, "sw_batch_too_big", "flow_add / flow_del requests refused: more than MAX_BATCH rules");
counter!(pub SW_QUOTA_RULES, "sw_quota_rules", "rules refused: the rule quota (max_rules) is reached");
counter!(pub SW_QUOTA_MASKS, "sw_quota_masks", "rules refused: the mask quota (max_masks) is reached");
counter!(pub SW_QUOTA_BYTES, "sw_quota_bytes", "rules refused: the rule-bytes quota (max_rule_bytes) is reached");
counter!(pub SW_PORT_DEL_REFUSED, "sw_port_del_refused", "port_del refused: rules name the port (no force)");
counter!(pub SW_PORT_REVIVED, "sw_port_revived", "ports brought back up after their device vanished");
counter!(pub SW_PORT_REVIVE_FAILED, "sw_port_revive_failed", "attempts to bring a down port back that failed");

/// Every switch counter, for listings before they fire.
pub static COUNTERS: [&sluice_coverage::Counter; 9] = [
    &SW_BAD_PORT_NUMBER,
    &SW_TOO_MANY_ACTIONS,
    &SW_BATCH_TOO_BIG,
    &SW_QUOTA_RULES,
    &SW_QUOTA_MASKS,
    &SW_QUOTA_BYTES,
    &SW_PORT_DEL_REFUSED,
    &SW_PORT_REVIVED,
    &SW_PORT_REVIVE_FAILED,
];

/// The highest port number: OpenFlow 1.0's last physical port (`OFPP_MAX` is `0xff00`; the
/// numbers above it are reserved there). Numbers are 1 to this.
pub const MAX_PORT_NUMBER: u32 = 0xfeff;

/// Most actions in one rule.
pub const MAX_ACTIONS: usize = 64;

/// Most rules (or delete specs) in one `flow_add` / `flow_del` request: bounds how long one
/// request holds the control lock. The CLI sends files in chunks below it.
pub const MAX_BATCH: usize = 100_000;

/// How long a down port waits before the first attempt to bring it back; each failed attempt
/// doubles the wait, up to [`REVIVE_MAX_DELAY`].
pub const REVIVE_FIRST_DELAY: Duration = Duration::from_secs(1);

/// The longest wait between two attempts to bring a down port back.
pub const REVIVE_MAX_DELAY: Duration = Duration::from_secs(30);

/// Why a switch operation failed. The message names what was asked and why it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SwitchError {
    /// No such port, rule or feature.
    NotFound(String),
    /// The request is malformed or contradicts the switch's state (e.g. a name in use).
    Invalid(String),
    /// A port or the operating system refused.
    Port(String),
    /// The datapath thread is gone (stopped or crashed).
    Stopped,
    /// The durable store failed to record the change, which was not applied.
    Store(String),
}

impl fmt::Display for SwitchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwitchError::NotFound(m)
            | SwitchError::Invalid(m)
            | SwitchError::Port(m)
            | SwitchError::Store(m) => f.write_str(m),
            SwitchError::Stopped => f.write_str("the switch's datapath thread has stopped"),
        }
    }
}

impl std::error::Error for SwitchError {}

/// A port as the control side knows it.
struct PortEntry {
    number: u32,
    handle: u64,
    /// How it was opened (to open it again when its device comes back).
    req: PortRequest,
    /// When down: the next attempt to bring it back and the wait after that one.
    revive: Option<(Instant, Duration)>,
    /// Feature overrides the operator set (long ethtool name → on), kept in the store.
    features: BTreeMap<String, bool>,
}

/// The maps every inserted rule updates (a million per second through `flow_add_text`):
/// hashbrown's default hasher (foldhash), not SipHash; keys are the switch's own handles and
/// masks, not chosen by an attacker in a way that could hurt beyond the rule quotas.
type FastMap<K, V> = hashbrown::HashMap<K, V>;

/// The control side's state. Every change goes through one of the `Control` methods below
/// (`add_port_entry`, `remove_port_entry`, `record_insert`, `record_delete`); the durable store
/// (`persist.rs`) records each change before it is acknowledged.
struct Control {
    table: FlowTable,
    /// Every datapath thread's per-rule counters (by the table's handle).
    rule_counters: Vec<Arc<RuleCounters>>,
    names: PortNames,
    /// A copy of `names` readable without the control lock (see [`SharedNames`]).
    shared_names: SharedNames,
    ports: BTreeMap<String, PortEntry>,
    max_masks: usize,
    next_port_handle: u64,
    next_rule_handle: u64,
    /// The flow table's own handle (small, reused) → the switch's handle (0: none).
    ext_of: Vec<u64>,
    /// The switch's handle → the flow table's.
    int_of: handles::HandleIndex,
    /// Rules per distinct mask.
    masks: FastMap<Mask, usize>,
    /// The durable store, if the switch has one (`sluice run --db`).
    store: Option<persist::Durable>,
    /// Vectors a text batch fills under the lock, kept for the next one.
    scratch: text_batch::BatchScratch,
}

impl Control {
    fn add_port_entry(&mut self, name: &str, number: u32, req: PortRequest) -> u64 {
        self.next_port_handle += 1;
        let handle = self.next_port_handle;
        self.ports.insert(
            name.to_string(),
            PortEntry {
                number,
                handle,
                req,
                revive: None,
                features: BTreeMap::new(),
            },
        );
        self.add_name(name, number);
        handle
    }

    /// Gives port `name` its number in rules.
    fn add_name(&mut self, name: &str, number: u32) {
        self.names.insert(name, number);
        self.shared_names.set(&self.names);
    }

    fn remove_port_entry(&mut self, name: &str) {
        self.ports.remove(name);
        // Keep the name→number mapping out of new rules.
        let mut names = PortNames::new();
        for (n, e) in &self.ports {
            names.insert(n, e.number);
        }
        self.names = names;
        self.shared_names.set(&self.names);
    }

    /// Records a rule the table accepted: gives it the next switch handle.
    fn record_insert(&mut self, h: Handle, mask: &Mask) -> u64 {
        let ext = self.record_insert_uncounted(h);
        self.count_mask(mask, 1);
        ext
    }

    /// [`Control::record_insert`] without counting the rule's mask: a batch counts its rules
    /// per mask once ([`Control::count_mask`]) instead of hashing every rule's mask.
    fn record_insert_uncounted(&mut self, h: Handle) -> u64 {
        self.next_rule_handle += 1;
        let ext = self.next_rule_handle;
        self.map_handle(h, ext);
        ext
    }

    /// Counts `n` more rules under `mask`.
    fn count_mask(&mut self, mask: &Mask, n: usize) {
        if n > 0 {
            *self.masks.entry(*mask).or_insert(0) += n;
        }
    }

    /// Makes room for `n` more rules in the handle maps at once (a million-rule load would
    /// otherwise rehash `int_of` twenty times while the control lock is held).
    fn reserve_inserts(&mut self, n: usize) {
        self.int_of.reserve(n);
        let want = self.table.len() + n;
        if self.ext_of.capacity() < want {
            self.ext_of.reserve(want.saturating_sub(self.ext_of.len()));
        }
    }

    /// Records a rule the table accepted under switch handle `ext` (a restored or rolled-back
    /// rule keeps its handle).
    fn record_insert_as(&mut self, h: Handle, mask: &Mask, ext: u64) {
        self.map_handle(h, ext);
        self.count_mask(mask, 1);
    }

    /// Maps the table's handle `h` and the switch's `ext` to each other.
    fn map_handle(&mut self, h: Handle, ext: u64) {
        let i = h.0 as usize;
        if self.ext_of.len() <= i {
            self.ext_of.resize(i + 1, 0);
        }
        if let Some(slot) = self.ext_of.get_mut(i) {
            *slot = ext;
        }
        self.int_of.insert(ext, h);
    }

    /// Records a rule the table deleted.
    fn record_delete(&mut self, h: Handle, mask: &Mask) {
        self.forget_rule(h);
        self.uncount_mask(mask, 1);
    }

    /// Forgets the counters and switch handle of a rule the table deleted.
    fn forget_rule(&mut self, h: Handle) {
        for c in &self.rule_counters {
            c.clear(h.0);
        }
        if let Some(slot) = self.ext_of.get_mut(h.0 as usize) {
            self.int_of.remove(*slot);
            *slot = 0;
        }
    }

    /// Takes `gone` deleted rules off the count of `mask`'s rules.
    fn uncount_mask(&mut self, mask: &Mask, gone: usize) {
        if let Some(n) = self.masks.get_mut(mask) {
            debug_assert!(*n >= gone, "{gone} rules deleted from a mask counting {n}");
            *n = n.saturating_sub(gone);
            if *n == 0 {
                self.masks.remove(mask);
            }
        }
    }

    /// The switch handle of the table's rule `h`.
    fn ext(&self, h: Handle) -> u64 {
        self.ext_of.get(h.0 as usize).copied().unwrap_or(0)
    }

    /// A table error in the switch's terms (handles, quota names), counted.
    fn rule_error(&self, e: &RuleError) -> String {
        match e {
            RuleError::Duplicate { existing } => format!(
                "duplicate of the rule with handle {} (same match and priority)",
                self.ext(*existing)
            ),
            RuleError::TableFull { limit } => {
                SW_QUOTA_RULES.inc();
                format!("rule quota reached: at most {limit} rules (max_rules)")
            }
            RuleError::MemoryQuota { limit } => {
                SW_QUOTA_BYTES.inc();
                format!(
                    "rule-bytes quota reached: at most {limit} bytes of rules, {} per rule (max_rule_bytes)",
                    FlowTable::bytes_per_rule()
                )
            }
            RuleError::UnknownHandle(_) => "no rule with this handle".into(),
            other => other.to_string(),
        }
    }

    /// Handles of the rules that match on port `number` or output to it, ascending.
    fn rules_naming(&self, number: u32) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .table
            .rules()
            .filter(|(_, r)| names_port(r, number))
            .map(|(h, _)| self.ext(h))
            .collect();
        out.sort_unstable();
        out
    }
}

/// Whether `rule` matches on port `number` (`in_port`) or outputs to it.
fn names_port(rule: &Rule, number: u32) -> bool {
    let mask = rule.matcher.mask.uint(Field::InPort);
    let in_port = mask != 0 && rule.matcher.key.uint(Field::InPort) == u64::from(number) & mask;
    in_port || rule.actions.as_slice().contains(&Action::Output(number))
}

/// The switch. See the [module documentation](self). Dropping it stops the datapath threads.
///
/// ```
/// use sluice_switch::{Switch, SwitchConfig};
/// let switch = Switch::start(SwitchConfig::default()).unwrap();
/// let lines = [
///     "prio 5 eth_type ipv4 ip_proto udp dst_port 53 action drop".to_string(),
///     "bogus".into(),
/// ];
/// let results = switch.add_flows(&lines, false).unwrap();
/// assert!(results[0].handle.is_some());
/// assert!(results[1].error.as_deref().is_some_and(|e| e.contains("bogus")));
/// assert_eq!(switch.dump_flows().len(), 1);
/// assert!(switch.ports().unwrap().is_empty());
/// switch.stop().unwrap();
/// ```
pub struct Switch {
    workers: Workers,
    control: Mutex<Control>,
    /// The port names, for parsing rules outside the control lock.
    names: SharedNames,
}

/// The port names as the control side last set them, readable without the control lock: a
/// rules batch is parsed while the one before is applied under the lock (holding it for tens
/// of milliseconds), so reading the names there would make the parse wait for the insert.
/// Applying compares the names a batch was parsed with against the control side's own and
/// parses again if a port came or went in between.
#[derive(Clone, Default)]
struct SharedNames(Arc<Mutex<Arc<PortNames>>>);

impl SharedNames {
    fn set(&self, names: &PortNames) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(names.clone());
    }

    fn get(&self) -> Arc<PortNames> {
        Arc::clone(&self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl fmt::Debug for Switch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Switch").finish_non_exhaustive()
    }
}

/// The features an ethtool short name (`ethtool -K dev tso off`) changes. `gso` has none: see
/// [`features_named`].
fn alias_features(alias: &str) -> Option<&'static [Feature]> {
    use Feature::*;
    Some(match alias {
        "tso" => &[Tso, Tso6, TsoEcn, TsoMangleid],
        "gro" => &[RxGro],
        "sg" => &[TxSg],
        "tx" => &[TxCsumIpv4, TxCsumGeneric, TxCsumIpv6, TxCsumSctp],
        "rx" => &[RxCsum],
        "txvlan" => &[VlanCtagInsert],
        "rxvlan" => &[RxVlanCtagParse],
        "uso" => &[Uso],
        "ufo" => &[Ufo],
        "lro" => &[RxLro],
        _ => return None,
    })
}

/// The features an operator's name stands for: an ethtool short name ([`ALIASES`]) or a long
/// name (`tx-tcp-segmentation`). Anything else is an error naming it, never a silent no-op.
fn features_named(name: &str) -> Result<Vec<Feature>, SwitchError> {
    if let Some(features) = alias_features(name) {
        return Ok(features.to_vec());
    }
    if matches!(name, "gso" | "tx-generic-segmentation") {
        // Linux's generic segmentation only decides when its software GSO runs; Sluice always
        // segments in software, at transmit, exactly what the egress device cannot.
        return Err(SwitchError::NotFound(format!(
            "feature {name:?}: Sluice has no generic-segmentation switch (software segmentation \
             always covers what the device cannot do); turn off the device's segmentation \
             instead: tso, uso, ufo, tx-udp_tnl-segmentation, tx-udp_tnl-csum-segmentation, \
             tx-gre-segmentation, tx-gre-csum-segmentation, tx-gso-partial"
        )));
    }
    name.parse::<Feature>()
        .map(|f| vec![f])
        .map_err(|e| SwitchError::NotFound(format!("feature {name:?}: {e}")))
}

fn gro_feature() -> Option<Feature> {
    "rx-gro".parse().ok()
}

impl Switch {
    /// Starts the datapath thread with no ports and no rules.
    pub fn start(cfg: SwitchConfig) -> Result<Switch, SwitchError> {
        let table = FlowTable::new(TableConfig {
            max_rules: cfg.max_rules,
            max_bytes: cfg.max_rule_bytes,
            ..TableConfig::default()
        });
        let workers = Workers::start(&table, &cfg)?;
        let rule_counters = workers.run(
            (0..workers.threads())
                .map(|i| {
                    let job: ThreadJob<Arc<RuleCounters>> = Box::new(|dp| dp.rule_counters());
                    (i, job)
                })
                .collect(),
        )?;
        let names = SharedNames::default();
        Ok(Switch {
            workers,
            names: names.clone(),
            control: Mutex::new(Control {
                table,
                rule_counters,
                names: PortNames::new(),
                shared_names: names,
                ports: BTreeMap::new(),
                max_masks: cfg.max_masks,
                next_port_handle: 0,
                next_rule_handle: 0,
                ext_of: Vec::new(),
                int_of: handles::HandleIndex::default(),
                masks: FastMap::default(),
                store: None,
                scratch: Default::default(),
            }),
        })
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        // A panic while holding the lock leaves consistent data (every update is one call).
        self.control.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the first datapath thread between two polls and returns its result (with
    /// one thread: on the datapath). Every thread has every port, with the same options and
    /// features.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Datapath) -> R + Send + 'static,
    ) -> Result<R, SwitchError> {
        let job: ThreadJob<R> = Box::new(f);
        self.workers
            .run(vec![(0, job)])?
            .pop()
            .ok_or(SwitchError::Stopped)
    }

    /// The number of datapath threads.
    pub fn threads(&self) -> usize {
        self.workers.threads()
    }

    /// The CPU each datapath thread pinned itself to, by thread (`None`: not pinned; see
    /// [`SwitchConfig::pin_threads`]).
    pub fn pinned_cpus(&self) -> Vec<Option<usize>> {
        self.workers.pinned()
    }

    /// What each datapath thread has carried (packets received and sent over all its queues),
    /// by thread.
    pub fn thread_stats(&self) -> Result<Vec<ThreadStats>, SwitchError> {
        self.workers.thread_stats()
    }

    /// Opens a port as `req` asks and starts forwarding its frames.
    pub fn add_port(&self, req: PortRequest) -> Result<PortInfo, SwitchError> {
        if req.name.is_empty() || req.name.len() > 15 {
            return Err(SwitchError::Invalid(format!(
                "port name {:?}: interface names are 1 to 15 bytes",
                req.name
            )));
        }
        let mut ctl = self.control();
        if ctl.ports.contains_key(&req.name) {
            return Err(SwitchError::Invalid(format!(
                "port {:?} already exists",
                req.name
            )));
        }
        let number = match req.number {
            Some(n) if n == 0 || n > MAX_PORT_NUMBER => {
                SW_BAD_PORT_NUMBER.inc();
                return Err(SwitchError::Invalid(format!(
                    "port number {n} is out of range: numbers are 1 to {MAX_PORT_NUMBER} (0 is reserved; the OpenFlow physical-port range)"
                )));
            }
            Some(n) => {
                if ctl.ports.values().any(|e| e.number == n) {
                    return Err(SwitchError::Invalid(format!("port number {n} is in use")));
                }
                n
            }
            None => (1..=MAX_PORT_NUMBER)
                .find(|n| !ctl.ports.values().any(|e| e.number == *n))
                .ok_or_else(|| {
                    SwitchError::Invalid(format!(
                        "no free port number (1 to {MAX_PORT_NUMBER} are all in use)"
                    ))
                })?,
        };
        req.limits()
            .validate()
            .map_err(|e| SwitchError::Invalid(format!("port {:?}: {e}", req.name)))?;
        let persist = ctl.store.is_some();
        let queues = open_queues(&req, self.workers.threads(), persist)?;
        let opts = req.options();
        self.workers
            .add_port(number, queues, opts)?
            .map_err(|e| SwitchError::Invalid(format!("port {:?}: {e}", req.name)))?;
        if let Err(e) = ctl.persist_port_add(number, &req) {
            self.workers.remove_port(number)?;
            delete_kept_tap(&req, persist);
            return Err(e);
        }
        let name = req.name.clone();
        ctl.add_port_entry(&name, number, req);
        drop(ctl);
        self.port_info(&name)
    }

    fn number(&self, name: &str) -> Result<u32, SwitchError> {
        self.control()
            .ports
            .get(name)
            .map(|e| e.number)
            .ok_or_else(|| SwitchError::NotFound(format!("no port named {name:?}")))
    }

    /// Removes a port. Rules that name it (`in_port` or `output`) would otherwise be left
    /// pointing at a number the next port may take, so: without `force` the removal is refused
    /// with their handles; with `force` they are deleted first (one publish), then the port.
    pub fn del_port(&self, name: &str, force: bool) -> Result<(), SwitchError> {
        let mut ctl = self.control();
        let number = ctl
            .ports
            .get(name)
            .map(|e| e.number)
            .ok_or_else(|| SwitchError::NotFound(format!("no port named {name:?}")))?;
        let naming = ctl.rules_naming(number);
        let mut saved = Vec::new();
        if !naming.is_empty() {
            if !force {
                SW_PORT_DEL_REFUSED.inc();
                return Err(SwitchError::Invalid(format!(
                    "port {name:?} is named by {} rules (handles {}); delete them first, or delete them with the port (port_del \"force\": true, `sluice port del --force`)",
                    naming.len(),
                    list_handles(&naming)
                )));
            }
            let refs: Vec<(Handle, Mask)> = naming
                .iter()
                .filter_map(|e| {
                    let h = ctl.int_of.get(*e)?;
                    Some((h, ctl.table.rule(h)?.matcher.mask))
                })
                .collect();
            saved = ctl.save_rules(refs.iter().map(|&(h, _)| h));
            let out = ctl.table.delete_batch(
                refs.iter().map(|&(h, _)| RuleRef::Handle(h)).collect(),
                BatchMode::AllOrNothing,
            );
            if let Some(Err(e)) = out.iter().find(|r| r.is_err()) {
                return Err(SwitchError::Invalid(format!(
                    "port {name:?}: cannot delete its rules: {}",
                    ctl.rule_error(e)
                )));
            }
            for (h, mask) in &refs {
                ctl.record_delete(*h, mask);
            }
        }
        ctl.persist_port_del(name, naming, saved)?;
        self.workers.remove_port(number)?;
        if let Some(e) = ctl.ports.get(name) {
            delete_kept_tap(&e.req, ctl.store.is_some());
        }
        ctl.remove_port_entry(name);
        Ok(())
    }

    /// Opens port `name` again in place (its number, handle, options, counters and rules
    /// carry on) and brings it up: for a TAP this creates the device again if it was deleted.
    /// Refused for a port that is up.
    pub fn reopen_port(&self, name: &str) -> Result<PortInfo, SwitchError> {
        let (number, req) = {
            let ctl = self.control();
            let e = ctl
                .ports
                .get(name)
                .ok_or_else(|| SwitchError::NotFound(format!("no port named {name:?}")))?;
            (e.number, e.req.clone())
        };
        if self.workers.is_down(number)? != Some(true) {
            return Err(SwitchError::Invalid(format!(
                "port {name:?} is up (port_up only brings back a port that is down)"
            )));
        }
        self.revive(name, number, &req)?;
        self.port_info(name)
    }

    /// Opens `req` again and puts it in place of port `number`.
    fn revive(&self, name: &str, number: u32, req: &PortRequest) -> Result<(), SwitchError> {
        let persist = self.control().store.is_some();
        let queues = open_queues(req, self.workers.threads(), persist)
            .inspect_err(|_| SW_PORT_REVIVE_FAILED.inc())?;
        self.workers
            .replace_port(number, queues)?
            .map_err(|e| SwitchError::Invalid(format!("port {name:?}: {e}")))?;
        SW_PORT_REVIVED.inc();
        if let Some(e) = self.control().ports.get_mut(name) {
            e.revive = None;
        }
        Ok(())
    }

    /// One pass of the recovery of down ports (the daemon calls it about once a second): a
    /// port whose device vanished is reattached once an interface of its name exists again in
    /// its namespace, tried first [`REVIVE_FIRST_DELAY`] after it was seen down, then with a
    /// doubling wait up to [`REVIVE_MAX_DELAY`]. A deleted TAP is not created again here (the
    /// operator deleted it); `port_up` does that. Returns the number of ports brought back.
    pub fn revive_down_ports(&self) -> Result<usize, SwitchError> {
        let down = self.workers.down_ports()?;
        let now = Instant::now();
        let mut due = Vec::new();
        {
            let mut ctl = self.control();
            for (name, e) in ctl.ports.iter_mut() {
                if !down.contains(&e.number) {
                    e.revive = None;
                    continue;
                }
                match e.revive {
                    None => e.revive = Some((now + REVIVE_FIRST_DELAY, REVIVE_FIRST_DELAY)),
                    Some((at, wait)) if at <= now => {
                        let next = (wait * 2).min(REVIVE_MAX_DELAY);
                        e.revive = Some((now + next, next));
                        due.push((name.clone(), e.number, e.req.clone()));
                    }
                    Some(_) => {}
                }
            }
        }
        let mut revived = 0;
        for (name, number, req) in due {
            if !device_exists(&req) {
                continue;
            }
            if self.revive(&name, number, &req).is_ok() {
                revived += 1;
            }
        }
        Ok(revived)
    }

    fn port_info(&self, name: &str) -> Result<PortInfo, SwitchError> {
        let (number, handle) = self
            .control()
            .ports
            .get(name)
            .map(|e| (e.number, e.handle))
            .ok_or_else(|| SwitchError::NotFound(format!("no port named {name:?}")))?;
        let name = name.to_string();
        self.call(move |dp| {
            let port = dp.port(number)?;
            let down = dp.is_down(number)?;
            let device = dp.device(number)?;
            let opts = dp.options(number)?;
            let gro = opts.gro;
            let mut features: Vec<String> = Feature::ALL
                .iter()
                .filter(|f| device.features.has(**f))
                .map(|f| f.name().to_string())
                .collect();
            if gro {
                features.push("rx-gro".into());
            }
            Some(PortInfo {
                handle,
                state: state_name(down).into(),
                number,
                name,
                kind: port.kind().to_string(),
                gro,
                features,
                mtu: device.mtu,
                settings: PortSettingsInfo::new(&opts, &device),
            })
        })?
        .ok_or_else(|| SwitchError::NotFound(format!("port {number} vanished")))
    }

    /// One port's description, with its settings in effect.
    pub fn port(&self, name: &str) -> Result<PortInfo, SwitchError> {
        self.port_info(name)
    }

    /// Changes settings of a port (`key`, `value` as [`PortRequest::set`] takes them: GRO
    /// choices, VLAN depth, envelope, GSO limits), all or none: every pair is checked first.
    /// Applied on every thread's queue of the port from its next packet on; with a durable
    /// store, recorded before this returns (and undone if that fails). A restart opens the
    /// port with them.
    pub fn set_port(
        &self,
        name: &str,
        changes: &[(String, String)],
    ) -> Result<PortInfo, SwitchError> {
        if changes.is_empty() {
            return Err(SwitchError::Invalid(format!(
                "port {name:?}: nothing to set (settings: {})",
                PORT_SETTINGS.join(", ")
            )));
        }
        let mut ctl = self.control();
        let entry = ctl
            .ports
            .get(name)
            .ok_or_else(|| SwitchError::NotFound(format!("no port named {name:?}")))?;
        let (number, handle, old) = (entry.number, entry.handle, entry.req.clone());
        let mut req = old.clone();
        for (k, v) in changes {
            req.set(k, v)
                .map_err(|e| SwitchError::Invalid(format!("port {name:?}: {e}")))?;
        }
        // `rx-gro` through `features_set` changes GRO too: keep what is in effect unless
        // this request names `gro`.
        let names_gro = changes.iter().any(|(k, _)| k == "gro");
        let apply = |req: &PortRequest| {
            let opts = req.options();
            self.workers.call_all(move |_, dp| {
                let mut o = opts;
                if !names_gro {
                    o.gro = dp.options(number).is_some_and(|c| c.gro);
                }
                dp.set_options(number, o).map_err(|e| e.to_string())
            })
        };
        let out = apply(&req)?;
        if let Some(Err(e)) = out.into_iter().find(Result::is_err) {
            let _ = apply(&old);
            return Err(SwitchError::Port(format!("port {name:?}: {e}")));
        }
        if let Err(e) = ctl.persist_port_settings(handle, &req) {
            let _ = apply(&old);
            return Err(e);
        }
        if let Some(entry) = ctl.ports.get_mut(name) {
            entry.req = req;
        }
        drop(ctl);
        self.port_info(name)
    }

    /// Every port, by number.
    pub fn ports(&self) -> Result<Vec<PortInfo>, SwitchError> {
        let names: Vec<(u32, String)> = self
            .control()
            .ports
            .iter()
            .map(|(n, e)| (e.number, n.clone()))
            .collect();
        let mut out = Vec::with_capacity(names.len());
        for (_, name) in names {
            out.push(self.port_info(&name)?);
        }
        out.sort_by_key(|p| p.number);
        Ok(out)
    }

    /// Parses and inserts rules (text syntax, one per element; see `sluice_flow::text`), in one
    /// publish. `atomic`: all or none (a parse error anywhere rejects the batch).
    pub fn add_flows(
        &self,
        lines: &[String],
        atomic: bool,
    ) -> Result<Vec<FlowResult>, SwitchError> {
        check_batch(lines.len())?;
        let mut ctl = self.control();
        let mut results = empty_results(lines.len());
        let mut rules = Vec::with_capacity(lines.len());
        let mut idx = Vec::with_capacity(lines.len());
        let mut priorities = vec![0u32; lines.len()];
        // Masks this batch would add, in order: refused past the quota.
        let mut new_masks: HashSet<Mask> = HashSet::new();
        for (i, line) in lines.iter().enumerate() {
            let r = match parse_rule(line, &ctl.names) {
                Ok(r) => r,
                Err(e) => {
                    results[i].error = Some(e.render(line));
                    continue;
                }
            };
            let n = r.actions.as_slice().len();
            if n > MAX_ACTIONS {
                SW_TOO_MANY_ACTIONS.inc();
                results[i].error = Some(format!(
                    "{n} actions: a rule has at most {MAX_ACTIONS} actions"
                ));
                continue;
            }
            let mask = r.matcher.mask;
            if !ctl.masks.contains_key(&mask) && !new_masks.contains(&mask) {
                if ctl.masks.len() + new_masks.len() >= ctl.max_masks {
                    SW_QUOTA_MASKS.inc();
                    results[i].error = Some(format!(
                        "mask quota reached: at most {} distinct masks (max_masks)",
                        ctl.max_masks
                    ));
                    continue;
                }
                new_masks.insert(mask);
            }
            if let Some(p) = priorities.get_mut(i) {
                *p = r.priority;
            }
            rules.push(r);
            idx.push(i);
        }
        if atomic && refuse_rest(&mut results) {
            return Ok(results);
        }
        let masks: Vec<Mask> = rules.iter().map(|r| r.matcher.mask).collect();
        let out = ctl.table.insert_batch(rules, batch_mode(atomic));
        for ((i, r), mask) in idx.into_iter().zip(out).zip(masks) {
            match r {
                Ok(h) => results[i].handle = Some(ctl.record_insert(h, &mask)),
                Err(e) => results[i].error = Some(ctl.rule_error(&e)),
            }
        }
        ctl.persist_rules_added(&results, lines, &priorities)?;
        Ok(results)
    }

    /// Deletes rules, each given as `handle N` (or just `N`) or as the rule's match and
    /// priority in the text syntax (actions ignored).
    pub fn del_flows(
        &self,
        specs: &[String],
        atomic: bool,
    ) -> Result<Vec<FlowResult>, SwitchError> {
        check_batch(specs.len())?;
        let mut ctl = self.control();
        let mut results = empty_results(specs.len());
        let mut refs = Vec::new();
        let mut idx = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let s = spec.trim();
            let num = s.strip_prefix("handle").map(str::trim).unwrap_or(s);
            if let Ok(ext) = num.parse::<u64>() {
                results[i].handle = Some(ext);
                let found = ctl
                    .int_of
                    .get(ext)
                    .and_then(|h| Some((h, ctl.table.rule(h)?.matcher.mask)));
                match found {
                    Some((h, mask)) => {
                        refs.push((RuleRef::Handle(h), h, mask));
                        idx.push(i);
                    }
                    None => results[i].error = Some(format!("no rule with handle {ext}")),
                }
                continue;
            }
            // A rule's text; give it an action if it has none so the parser accepts it.
            let text = if s.contains("action") {
                s.to_string()
            } else {
                format!("{s} action drop")
            };
            match parse_rule(&text, &ctl.names) {
                Ok(r) => match ctl.table.find(&r.matcher, r.priority) {
                    Some(h) => {
                        results[i].handle = Some(ctl.ext(h));
                        refs.push((
                            RuleRef::Exact {
                                matcher: r.matcher,
                                priority: r.priority,
                            },
                            h,
                            r.matcher.mask,
                        ));
                        idx.push(i);
                    }
                    None => results[i].error = Some(RuleError::NotFound.to_string()),
                },
                Err(e) => results[i].error = Some(e.render(&text)),
            }
        }
        if atomic && refuse_rest(&mut results) {
            return Ok(results);
        }
        let (refs, found): (Vec<RuleRef>, Vec<(Handle, Mask)>) =
            refs.into_iter().map(|(r, h, m)| (r, (h, m))).unzip();
        let saved = ctl.save_rules(found.iter().map(|&(h, _)| h));
        let out = ctl.table.delete_batch(refs, batch_mode(atomic));
        for ((i, r), (h, mask)) in idx.into_iter().zip(out).zip(found) {
            match r {
                Ok(()) => ctl.record_delete(h, &mask),
                Err(e) => results[i].error = Some(ctl.rule_error(&e)),
            }
        }
        ctl.persist_rules_deleted(&results, saved)?;
        Ok(results)
    }

    /// Every rule as `handle N: <rule text>`, by handle.
    pub fn dump_flows(&self) -> Vec<String> {
        self.dump(false)
    }

    /// Every rule as `handle N: <rule text> packets=P bytes=B used=Ts`, by handle: the rule's
    /// packets and bytes (as received) summed over the datapath threads, and how long ago it
    /// was last hit (`used=never` for a rule never hit).
    pub fn dump_flows_with_counters(&self) -> Vec<String> {
        self.dump(true)
    }

    fn dump(&self, counters: bool) -> Vec<String> {
        let ctl = self.control();
        let mut rules: Vec<_> = ctl.table.rules().map(|(h, r)| (ctl.ext(h), h, r)).collect();
        rules.sort_by_key(|(h, _, _)| *h);
        rules
            .iter()
            .map(|(h, int, r)| {
                let text = RuleText {
                    rule: r,
                    ports: &ctl.names,
                };
                if !counters {
                    return format!("handle {h}: {text}");
                }
                let mut c = RuleCount::default();
                for t in &ctl.rule_counters {
                    c.merge(t.get(int.0));
                }
                let used = sluice_datapath::rule_stats::age(c.used)
                    .map_or("never".to_string(), |d| format!("{:.3}s", d.as_secs_f64()));
                format!(
                    "handle {h}: {text} packets={} bytes={} used={used}",
                    c.packets, c.bytes
                )
            })
            .collect()
    }

    /// For `trace`: the rule the current flow table gives `key`, with its actions.
    pub(crate) fn trace_lookup(
        &self,
        key: &sluice_flow::FlowKey,
    ) -> Option<(crate::trace::TraceRule, sluice_flow::ActionList)> {
        let ctl = self.control();
        let (h, priority, actions) = ctl.table.reader().lookup(key)?;
        let rule = ctl.table.rule(h)?;
        let text = RuleText {
            rule: &rule,
            ports: &ctl.names,
        }
        .to_string();
        let rule = crate::trace::TraceRule {
            handle: ctl.ext(h),
            priority,
            text,
        };
        Some((rule, actions))
    }

    /// A port's features, as `ethtool -k` shows them (`rx-gro` is the switch's software GRO).
    pub fn features(&self, port: &str) -> Result<Vec<FeatureState>, SwitchError> {
        let number = self.number(port)?;
        let gro = gro_feature();
        self.call(move |dp| {
            let device = dp.device(number)?;
            let changeable = dp.changeable(number)?;
            let gro_on = dp.options(number).is_some_and(|o| o.gro);
            Some(
                Feature::ALL
                    .iter()
                    .map(|&f| {
                        if Some(f) == gro {
                            FeatureState {
                                name: f.name().into(),
                                on: gro_on,
                                changeable: true,
                            }
                        } else {
                            FeatureState {
                                name: f.name().into(),
                                on: device.features.has(f),
                                changeable: changeable.has(f),
                            }
                        }
                    })
                    .collect(),
            )
        })?
        .ok_or_else(|| SwitchError::NotFound(format!("port {port:?} vanished")))
    }

    /// Turns features of a port on or off (ethtool long or short names: `tso`, `gro`, `sg`,
    /// `tx`, …). `rx-gro` switches the port's software GRO. Applied in order; the first failure
    /// stops (earlier changes stay) and is reported with the feature's name. With a durable
    /// store, the changes are recorded before this returns (and undone if that fails).
    pub fn set_features(&self, port: &str, changes: &[(String, bool)]) -> Result<(), SwitchError> {
        let before = self.features_before(port)?;
        self.apply_features(port, changes)?;
        self.persist_features(port, changes, before)
    }

    /// [`Switch::set_features`] without the store.
    fn apply_features(&self, port: &str, changes: &[(String, bool)]) -> Result<(), SwitchError> {
        let number = self.number(port)?;
        let gro = gro_feature();
        // (feature, on, named by a short alias: skipped where fixed, as ethtool does)
        let mut list = Vec::new();
        for (name, on) in changes {
            let fs = features_named(name)?;
            let alias = fs.len() != 1 || fs.first().map(|f| f.name()) != Some(name.as_str());
            for f in fs {
                list.push((f, *on, alias));
            }
        }
        // A port with a control side (AF_PACKET: netlink and the ethtool ioctl; TAP:
        // TUNSETOFFLOAD) is changed in the kernel here, on the control thread; the datapath
        // threads only take the result.
        if let Some(control) = self.call(move |dp| dp.port_control(number))? {
            return self.apply_with_control(number, port, control.as_ref(), &list);
        }
        let port = port.to_string();
        // On every thread's queue of the port; the first failure is reported.
        let out = self
            .workers
            .call_all(move |_, dp| -> Result<(), SwitchError> {
                for &(f, on, alias) in &list {
                    if Some(f) == gro {
                        dp.set_gro(number, on)
                            .map_err(|e| SwitchError::Port(format!("{port}: {e}")))?;
                        continue;
                    }
                    let device = dp
                        .device(number)
                        .ok_or_else(|| SwitchError::NotFound(format!("port {port:?} vanished")))?;
                    if device.features.has(f) == on {
                        continue;
                    }
                    if alias && !dp.changeable(number).is_some_and(|c| c.has(f)) {
                        continue;
                    }
                    dp.set_feature(number, f, on).map_err(|e| {
                        SwitchError::Port(format!(
                            "{port}: {} {}: {e}",
                            f.name(),
                            if on { "on" } else { "off" }
                        ))
                    })?;
                }
                Ok(())
            })?;
        out.into_iter().collect()
    }

    /// [`Switch::apply_features`] for a port with a control side: every kernel call is made
    /// here (on the calling, control thread), in order until the first failure; then every
    /// datapath thread takes the resulting state (and the software GRO changes) in one job.
    fn apply_with_control(
        &self,
        number: u32,
        port: &str,
        control: &dyn PortControl,
        list: &[(Feature, bool, bool)],
    ) -> Result<(), SwitchError> {
        let gro = gro_feature();
        let mut state = control
            .read()
            .map_err(|e| SwitchError::Port(format!("{port}: {e}")))?;
        let mut gro_changes = Vec::new();
        let mut result = Ok(());
        for &(f, on, alias) in list {
            if Some(f) == gro {
                gro_changes.push(on);
                continue;
            }
            if state.device.features.has(f) == on {
                continue;
            }
            let changeable = state.features.iter().any(|e| e.feature == f && !e.fixed);
            if alias && !changeable {
                continue;
            }
            match control.set_feature(f, on) {
                Ok(now) => state = now,
                Err(e) => {
                    result = Err(SwitchError::Port(format!(
                        "{port}: {} {}: {e}",
                        f.name(),
                        if on { "on" } else { "off" }
                    )));
                    break;
                }
            }
        }
        let name = port.to_string();
        let out = self
            .workers
            .call_all(move |_, dp| -> Result<(), SwitchError> {
                dp.apply_state(number, &state)
                    .map_err(|e| SwitchError::Port(format!("{name}: {e}")))?;
                for &on in &gro_changes {
                    dp.set_gro(number, on)
                        .map_err(|e| SwitchError::Port(format!("{name}: {e}")))?;
                }
                Ok(())
            })?;
        out.into_iter().collect::<Result<(), SwitchError>>()?;
        result
    }

    /// Every port's counters, by number.
    pub fn stats(&self) -> Result<Vec<PortStatsInfo>, SwitchError> {
        let names: Vec<(u32, String)> = self
            .control()
            .ports
            .iter()
            .map(|(n, e)| (e.number, n.clone()))
            .collect();
        self.workers.stats(names)
    }

    /// Number of rules and distinct masks in the flow table.
    pub fn flow_counts(&self) -> (usize, usize) {
        let ctl = self.control();
        (ctl.table.len(), ctl.table.masks())
    }

    /// Stops the datapath threads and closes every port.
    pub fn stop(self) -> Result<(), SwitchError> {
        self.halt()
    }

    /// Stops the datapath threads and closes every port, while others may still hold the
    /// switch (a control connection finishing its request): their later calls fail with
    /// [`SwitchError::Stopped`].
    pub fn halt(&self) -> Result<(), SwitchError> {
        self.workers.halt()
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// One result per request element, nothing decided yet.
fn empty_results(n: usize) -> Vec<FlowResult> {
    (0..n)
        .map(|index| FlowResult {
            index,
            handle: None,
            error: None,
        })
        .collect()
}

/// If any element already failed, marks every other one as not applied (an all-or-nothing
/// batch) and returns true.
fn refuse_rest(results: &mut [FlowResult]) -> bool {
    if !results.iter().any(|r| r.error.is_some()) {
        return false;
    }
    for r in results.iter_mut().filter(|r| r.error.is_none()) {
        r.error = Some("not applied: another rule of the all-or-nothing batch failed".into());
    }
    true
}

fn batch_mode(atomic: bool) -> BatchMode {
    if atomic {
        BatchMode::AllOrNothing
    } else {
        BatchMode::BestEffort
    }
}

/// Refuses a request of more than [`MAX_BATCH`] rules.
fn check_batch(n: usize) -> Result<(), SwitchError> {
    if n > MAX_BATCH {
        SW_BATCH_TOO_BIG.inc();
        return Err(SwitchError::Invalid(format!(
            "{n} rules in one request: at most {MAX_BATCH} per request (send them in chunks)"
        )));
    }
    Ok(())
}

/// `a, b, c` for the first handles of `list`, then how many more.
fn list_handles(list: &[u64]) -> String {
    const SHOWN: usize = 20;
    let mut s: Vec<String> = list.iter().take(SHOWN).map(u64::to_string).collect();
    if list.len() > SHOWN {
        s.push(format!("and {} more", list.len() - SHOWN));
    }
    s.join(", ")
}

/// Whether an interface named as `req` asks exists (in its namespace).
fn device_exists(req: &PortRequest) -> bool {
    let name = req.name.clone();
    let look = move || sluice_ports::netns::if_nametoindex(&name).is_ok();
    match &req.netns {
        None => look(),
        Some(ns) => sluice_ports::netns::enter_named(ns, look).unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ethtool short name `alias_features` knows.
    const ALIASES: [&str; 10] = [
        "tso", "gro", "sg", "tx", "rx", "txvlan", "rxvlan", "uso", "ufo", "lro",
    ];

    #[test]
    fn every_alias_names_features_and_gso_is_refused() {
        for alias in ALIASES {
            let features = alias_features(alias).expect(alias);
            assert!(!features.is_empty(), "{alias}");
            assert_eq!(features_named(alias).unwrap(), features.to_vec(), "{alias}");
        }
        assert_eq!(alias_features("gso"), None);
        assert_eq!(
            features_named("tx-tcp6-segmentation").unwrap(),
            vec![Feature::Tso6]
        );
        for refused in ["gso", "tx-generic-segmentation", "tso4", ""] {
            let e = features_named(refused).unwrap_err().to_string();
            assert!(e.contains(&format!("{refused:?}")), "{refused}: {e}");
        }
        assert!(features_named("gso")
            .unwrap_err()
            .to_string()
            .contains("tso, uso"));
    }
}
