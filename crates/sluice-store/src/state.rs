//! The stored state and the changes that move it.
//!
//! [`State::apply`] is total: every change applies to every state (deleting what is absent does
//! nothing, adding an existing handle replaces it), so a journal replays the same way whatever
//! the daemon committed. The store itself refuses, at commit time, the one thing that would
//! break an invariant: an added port or rule whose handle is not fresh.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A port as the daemon configured it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Port {
    /// The port's handle: 64-bit, never reused.
    pub handle: u64,
    /// The interface name.
    pub name: String,
    /// The port number rules name (`in_port`, `output:`).
    pub number: u32,
    /// The port type as the daemon names it (`tap`, `afpacket`, …).
    pub kind: String,
    /// Settings of the kind (for example `gro` → `true`, `netns` → `blue`), as text.
    pub settings: BTreeMap<String, String>,
    /// Feature overrides the operator set: ethtool feature name → on.
    pub features: BTreeMap<String, bool>,
}

/// A rule as the daemon inserted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// The rule's handle: 64-bit, never reused.
    pub handle: u64,
    /// Its priority (higher wins).
    pub priority: u32,
    /// The match, in whatever form the daemon stores it (text or an encoded form).
    pub matches: Vec<u8>,
    /// The actions, in whatever form the daemon stores them. [`Change::RuleModify`] replaces them.
    pub actions: Vec<u8>,
}

impl Rule {
    /// The rule borrowed, as [`crate::Store::commit_rules`] takes it.
    pub fn as_rule_ref(&self) -> RuleRef<'_> {
        RuleRef {
            handle: self.handle,
            priority: self.priority,
            matches: &self.matches,
            actions: &self.actions,
        }
    }
}

/// A rule borrowed from the caller: what [`crate::Store::commit_rules`] takes, so that a large
/// batch goes to disk straight from the daemon's own buffers, without first being copied into
/// [`Rule`]s. Stored and replayed exactly as a [`Rule`] of a [`Change::RulesAdd`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleRef<'a> {
    /// The rule's handle.
    pub handle: u64,
    /// Its priority.
    pub priority: u32,
    /// The match.
    pub matches: &'a [u8],
    /// The actions.
    pub actions: &'a [u8],
}

/// One change to the state. [`crate::Store::commit`] takes a batch of them as one atomic,
/// durable record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// Add a port. Its handle must be at least [`State::next_port_handle`] at commit time.
    PortAdd(Port),
    /// Remove a port (rules that name it are the daemon's business: it commits their
    /// deletion or keeps them, as it documents).
    PortDel {
        /// The port's handle.
        handle: u64,
    },
    /// Replace a port's settings.
    PortSettings {
        /// The port's handle.
        handle: u64,
        /// The new settings, all of them.
        settings: BTreeMap<String, String>,
    },
    /// Replace a port's feature overrides.
    PortFeatures {
        /// The port's handle.
        handle: u64,
        /// The new overrides, all of them.
        features: BTreeMap<String, bool>,
    },
    /// Add rules. Their handles must be increasing and at least [`State::next_rule_handle`].
    RulesAdd(Vec<Rule>),
    /// Delete rules by handle.
    RulesDel(Vec<u64>),
    /// Replace one rule's actions in place (its handle, match and priority stay).
    RuleModify {
        /// The rule's handle.
        handle: u64,
        /// The new actions.
        actions: Vec<u8>,
    },
    /// Set a quota (for example `rules` → 2,000,000).
    QuotaSet {
        /// The quota's name.
        name: String,
        /// Its value.
        value: u64,
    },
    /// Remove a quota (back to the daemon's default).
    QuotaClear {
        /// The quota's name.
        name: String,
    },
}

/// Everything the store holds: what [`crate::Store::open`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Ports by handle.
    pub ports: BTreeMap<u64, Port>,
    /// Rules by handle (so in insertion order).
    pub rules: BTreeMap<u64, Rule>,
    /// Quotas by name.
    pub quotas: BTreeMap<String, u64>,
    /// The lowest port handle never used: the next port gets this one or a higher one.
    pub next_port_handle: u64,
    /// The lowest rule handle never used: the next rule gets this one or a higher one.
    pub next_rule_handle: u64,
}

impl State {
    /// Applies one change. Total: deleting or modifying what is absent does nothing; adding a
    /// handle that exists replaces it. The handle counters only move up.
    ///
    /// ```
    /// use sluice_store::{Change, Rule, State};
    /// let mut state = State::default();
    /// let (matches, actions) = (b"in_port 1".to_vec(), b"drop".to_vec());
    /// let rule = Rule { handle: 5, priority: 1, matches, actions };
    /// state.apply(Change::RulesAdd(vec![rule]));
    /// assert_eq!(state.next_rule_handle, 6);
    /// state.apply(Change::RulesDel(vec![5]));
    /// state.apply(Change::RulesDel(vec![5])); // deleting what is absent does nothing
    /// assert!(state.rules.is_empty());
    /// assert_eq!(state.next_rule_handle, 6); // handles are never reused
    /// ```
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::PortAdd(port) => {
                self.next_port_handle = self.next_port_handle.max(port.handle.saturating_add(1));
                self.ports.insert(port.handle, port);
            }
            Change::PortDel { handle } => {
                self.ports.remove(&handle);
            }
            Change::PortSettings { handle, settings } => {
                if let Some(port) = self.ports.get_mut(&handle) {
                    port.settings = settings;
                }
            }
            Change::PortFeatures { handle, features } => {
                if let Some(port) = self.ports.get_mut(&handle) {
                    port.features = features;
                }
            }
            Change::RulesAdd(rules) => {
                for rule in rules {
                    self.add_rule(rule);
                }
            }
            Change::RulesDel(handles) => {
                for handle in handles {
                    self.rules.remove(&handle);
                }
            }
            Change::RuleModify { handle, actions } => {
                if let Some(rule) = self.rules.get_mut(&handle) {
                    rule.actions = actions;
                }
            }
            Change::QuotaSet { name, value } => {
                self.quotas.insert(name, value);
            }
            Change::QuotaClear { name } => {
                self.quotas.remove(&name);
            }
        }
    }

    /// [`Change::RulesAdd`] for one rule, without building a batch (the replay's fast path).
    pub(crate) fn add_rule(&mut self, rule: Rule) {
        self.next_rule_handle = self.next_rule_handle.max(rule.handle.saturating_add(1));
        self.rules.insert(rule.handle, rule);
    }
}
