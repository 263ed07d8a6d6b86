//! The flow table's quotas at run time (`sluice quota show`, `sluice quota set`): rules,
//! distinct masks and rule bytes. They start from the configuration and flags; a change made
//! at run time is recorded in the store (with `--db`) before it is acknowledged and wins over
//! the configuration on the next start. A quota is never set below what is in use.

use super::{Control, Switch, SwitchError};
use serde::{Deserialize, Serialize};
use sluice_store::Change;

/// The store's names of the quotas.
pub(super) const QUOTA_RULES: &str = "rules";
/// See [`QUOTA_RULES`].
pub(super) const QUOTA_MASKS: &str = "masks";
/// See [`QUOTA_RULES`].
pub(super) const QUOTA_RULE_BYTES: &str = "rule_bytes";

/// The quotas and what is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaInfo {
    /// Most rules.
    pub rules: usize,
    /// Rules in the table.
    pub rules_used: usize,
    /// Most distinct masks.
    pub masks: usize,
    /// Distinct masks in use.
    pub masks_used: usize,
    /// Most bytes of rules (by the table's per-rule estimate).
    pub rule_bytes: usize,
    /// Bytes of rules in use (the estimate).
    pub rule_bytes_used: usize,
}

/// A change of quotas: each one given is set, the others stay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaChange {
    /// New rule quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<usize>,
    /// New mask quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masks: Option<usize>,
    /// New rule-byte quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_bytes: Option<usize>,
}

impl QuotaChange {
    /// The change as `(store name, value)` pairs.
    fn named(&self) -> Vec<(&'static str, usize)> {
        [
            (QUOTA_RULES, self.rules),
            (QUOTA_MASKS, self.masks),
            (QUOTA_RULE_BYTES, self.rule_bytes),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| (n, v)))
        .collect()
    }
}

impl Control {
    pub(super) fn quota_info(&self) -> QuotaInfo {
        let c = self.table.config();
        QuotaInfo {
            rules: c.max_rules,
            rules_used: self.table.len(),
            masks: self.max_masks,
            masks_used: self.masks.len(),
            rule_bytes: c.max_bytes,
            rule_bytes_used: self.table.bytes_estimate(),
        }
    }

    /// Applies quotas (no checks, nothing recorded): a restore or a checked change.
    pub(super) fn apply_quota(&mut self, name: &str, value: usize) -> bool {
        let mut c = self.table.config();
        match name {
            QUOTA_RULES => c.max_rules = value,
            QUOTA_RULE_BYTES => c.max_bytes = value,
            QUOTA_MASKS => {
                self.max_masks = value;
                return true;
            }
            _ => return false,
        }
        self.table.set_config(c);
        true
    }
}

impl Switch {
    /// The quotas and their use.
    pub fn quotas(&self) -> QuotaInfo {
        self.control().quota_info()
    }

    /// Changes the quotas given in `change`, all or none: each must be at least 1 and at
    /// least what is in use. With a store, the new values are recorded before they take effect
    /// (and before this returns); they then win over the configuration on the next start.
    pub fn set_quotas(&self, change: &QuotaChange) -> Result<QuotaInfo, SwitchError> {
        let named = change.named();
        if named.is_empty() {
            return Err(SwitchError::Invalid(
                "no quota given: rules=N, masks=N or rule_bytes=N".into(),
            ));
        }
        let mut ctl = self.control();
        let now = ctl.quota_info();
        for &(name, value) in &named {
            let (used, what) = match name {
                QUOTA_RULES => (now.rules_used, "rules are in the table"),
                QUOTA_MASKS => (now.masks_used, "distinct masks are in use"),
                _ => (now.rule_bytes_used, "bytes of rules are in use (estimate)"),
            };
            if value == 0 {
                return Err(SwitchError::Invalid(format!(
                    "quota {name}={value}: must be at least 1"
                )));
            }
            if value < used {
                return Err(SwitchError::Invalid(format!(
                    "quota {name}={value} is below current usage: {used} {what}; delete rules first (nothing changed)"
                )));
            }
        }
        let changes: Vec<Change> = named
            .iter()
            .map(|&(name, value)| Change::QuotaSet {
                name: name.to_string(),
                value: value as u64,
            })
            .collect();
        ctl.commit(&changes)?;
        for &(name, value) in &named {
            ctl.apply_quota(name, value);
        }
        Ok(ctl.quota_info())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::SwitchConfig;

    fn rules(n: usize, prefix: u8) -> Vec<String> {
        (0..n)
            .map(|i| format!("prio 5 dst_ip 10.{prefix}.0.{i}/32 action drop"))
            .collect()
    }

    #[test]
    fn quotas_change_at_run_time_all_or_none_and_never_below_use() {
        let sw = Switch::start(SwitchConfig {
            max_rules: 100,
            ..SwitchConfig::default()
        })
        .expect("switch");
        let added = sw.add_flows(&rules(3, 1), true).expect("rules");
        assert!(added.iter().all(|r| r.error.is_none()));
        sw.add_flows(&["prio 5 src_ip 10.9.0.0/16 action drop".to_string()], true)
            .expect("a second mask");
        let q = sw.quotas();
        assert_eq!((q.rules, q.rules_used, q.masks_used), (100, 4, 2));
        assert_eq!(
            q.rule_bytes_used,
            4 * sluice_flow::FlowTable::bytes_per_rule()
        );

        // Masks 1 is below the 2 in use: refused, and the rules change of the same request
        // is not applied either.
        let e = sw
            .set_quotas(&QuotaChange {
                rules: Some(50),
                masks: Some(1),
                rule_bytes: None,
            })
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("masks=1") && e.contains("2 distinct masks"),
            "{e}"
        );
        assert_eq!(sw.quotas(), q);
        let e = sw.set_quotas(&QuotaChange::default()).unwrap_err();
        assert!(e.to_string().contains("no quota given"), "{e}");
        let e = sw
            .set_quotas(&QuotaChange {
                rule_bytes: Some(0),
                ..QuotaChange::default()
            })
            .unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");

        // Exactly the use is allowed, and then enforced.
        let q = sw
            .set_quotas(&QuotaChange {
                rules: Some(5),
                masks: Some(2),
                rule_bytes: None,
            })
            .expect("quota at use");
        assert_eq!((q.rules, q.masks), (5, 2));
        let out = sw.add_flows(&rules(2, 2), false).expect("batch");
        assert!(out[0].error.is_none(), "{out:?}");
        assert!(
            out[1].error.as_deref().is_some_and(|e| e.contains("quota")),
            "{out:?}"
        );
        let out = sw
            .add_flows(&["prio 5 dst_ip 10.0.0.0/8 action drop".to_string()], false)
            .expect("batch");
        assert!(
            out[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("mask quota")),
            "{out:?}"
        );
        sw.stop().expect("stop");
    }
}
