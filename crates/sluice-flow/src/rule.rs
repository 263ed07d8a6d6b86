//! Rules: a masked match, a priority and actions; handles; typed per-rule errors.

use crate::action::ActionList;
use crate::key::{Field, FlowKey, Mask};

/// A masked match: a packet matches when `packet & mask == key`.
///
/// Valid only when `key & !mask == 0` (the key has no bit the mask ignores). [`Match::new`]
/// rejects other keys with [`RuleError::InvalidMask`] rather than silently clearing the bits, so
/// a caller's mistake (say `10.0.0.1/24` built by hand) is reported, not rewritten; the text
/// parser, like `tc flower`, masks the value it reads and never produces an invalid match. The
/// table checks again on insert, since the fields are public.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Match {
    /// The field values (already masked).
    pub key: FlowKey,
    /// Which bits of the key matter.
    pub mask: Mask,
}

impl Match {
    /// The match-everything match.
    pub const ANY: Match = Match {
        key: FlowKey::ZERO,
        mask: FlowKey::ZERO,
    };

    /// A checked match.
    pub fn new(key: FlowKey, mask: Mask) -> Result<Match, RuleError> {
        let m = Match { key, mask };
        if m.is_valid() {
            Ok(m)
        } else {
            Err(RuleError::InvalidMask)
        }
    }

    /// Whether `key & !mask == 0`.
    pub fn is_valid(&self) -> bool {
        self.key.within(&self.mask)
    }

    /// Sets a field's value and mask together (the value is masked).
    #[inline]
    pub fn set(&mut self, field: Field, value: &[u8], mask: &[u8]) {
        let (_, len) = field.span();
        // A whole address (the common case: a rule's IP match) as two words each, with no
        // byte-by-byte fitting.
        if let (16, Ok(v), Ok(m)) = (
            len,
            <&[u8; 16]>::try_from(value),
            <&[u8; 16]>::try_from(mask),
        ) {
            let m = u128::from_ne_bytes(*m);
            let v = u128::from_ne_bytes(*v) & m;
            self.key.set(field, &v.to_ne_bytes());
            self.mask.set(field, &m.to_ne_bytes());
            return;
        }
        // Both as the field stores them, then the value masked; only this field's bytes change.
        let mb = crate::key::fit(mask, len);
        let mut vb = crate::key::fit(value, len);
        for (v, m) in vb.iter_mut().zip(mb) {
            *v &= m;
        }
        self.key.set(field, vb.get(..len).unwrap_or(&[]));
        self.mask.set(field, mb.get(..len).unwrap_or(&[]));
    }

    /// Sets a numeric field with an exact mask.
    #[inline]
    pub fn set_exact(&mut self, field: Field, value: u64) {
        self.set_uint_masked(field, value, u64::MAX);
    }

    /// Sets a numeric field with a mask.
    #[inline]
    pub fn set_uint_masked(&mut self, field: Field, value: u64, mask: u64) {
        let (_, len) = field.span();
        let bits = if len >= 8 {
            u64::MAX
        } else {
            (1u64 << (len * 8)) - 1
        };
        let m = mask & bits;
        self.key.set_uint(field, value & m);
        self.mask.set_uint(field, m);
    }

    /// Whether `packet` matches.
    pub fn matches(&self, packet: &FlowKey) -> bool {
        self.key.matches(&self.mask, packet)
    }
}

/// A classification rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// What packets it matches.
    pub matcher: Match,
    /// Higher wins.
    pub priority: u32,
    /// What to do with them.
    pub actions: ActionList,
}

/// Empties a vector of rules, keeping its capacity: what `v.clear()` does, faster for a big
/// vector that is out of cache. Dropping a rule drops its reference to its action list, a
/// locked decrement, and the processor starts no later load before that decrement is done:
/// each rule's cold cache line was fetched alone, one after the other. Here each rule's line
/// is prefetched a few rules ahead, so those fetches overlap. (The rules are dropped from the
/// last one.)
pub fn clear_rules(v: &mut Vec<Rule>) {
    /// How many rules ahead the prefetch runs.
    const AHEAD: usize = 16;
    while let Some(last) = v.len().checked_sub(1) {
        if let Some(r) = last.checked_sub(AHEAD).and_then(|k| v.get(k)) {
            crate::classifier::hint::prefetch(&r.actions);
        }
        v.truncate(last);
    }
}

/// A rule's handle: a small integer, reused after the rule is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(pub u32);

impl core::fmt::Display for Handle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How a batch treats a failing rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// Apply every rule that can be applied; report the others.
    BestEffort,
    /// Apply all rules or none: one failure leaves the table unchanged; that rule reports its
    /// error and every other rule of the batch reports [`RuleError::Aborted`]. The failure
    /// reported is the first in batch order (an insert batch is checked before anything is
    /// applied; a duplicate of an earlier rule of the batch names the handle that rule would
    /// have had).
    AllOrNothing,
}

/// Which rule a delete or modify addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // transient request values; boxing would cost an allocation each
pub enum RuleRef {
    /// By handle.
    Handle(Handle),
    /// By exact match and priority.
    Exact {
        /// The match (as inserted).
        matcher: Match,
        /// The priority.
        priority: u32,
    },
}

/// Why one rule of a batch was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuleError {
    /// A rule with the same match and priority exists (possibly earlier in the same batch).
    Duplicate {
        /// The existing rule.
        existing: Handle,
    },
    /// The key has bits outside the mask.
    InvalidMask,
    /// The rule-count quota is reached.
    TableFull {
        /// The quota.
        limit: usize,
    },
    /// The memory quota would be exceeded.
    MemoryQuota {
        /// The quota, bytes.
        limit: usize,
    },
    /// No rule has this handle.
    UnknownHandle(Handle),
    /// No rule has this exact match and priority.
    NotFound,
    /// The rule was valid but its all-or-nothing batch failed on another rule.
    Aborted,
}

impl core::fmt::Display for RuleError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RuleError::Duplicate { existing } => {
                write!(f, "duplicate of rule {existing} (same match and priority)")
            }
            RuleError::InvalidMask => f.write_str("key has bits outside the mask"),
            RuleError::TableFull { limit } => write!(f, "table full ({limit} rules)"),
            RuleError::MemoryQuota { limit } => write!(f, "memory quota of {limit} bytes reached"),
            RuleError::UnknownHandle(h) => write!(f, "no rule with handle {h}"),
            RuleError::NotFound => f.write_str("no rule with this match and priority"),
            RuleError::Aborted => f.write_str("batch aborted by another rule's error"),
        }
    }
}

impl std::error::Error for RuleError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`clear_rules`] empties the vector, keeps its capacity and releases every rule's
    /// reference to its action list, for vectors shorter and longer than its prefetch
    /// distance.
    #[test]
    fn clear_rules_releases_every_action_list() {
        let lists: Vec<ActionList> = (0..3).map(ActionList::output).collect();
        for n in [0, 1, 15, 16, 17, 1000] {
            let mut v: Vec<Rule> = (0..n)
                .map(|i| Rule {
                    matcher: Match::ANY,
                    priority: i as u32,
                    actions: lists[i % 3].clone(),
                })
                .collect();
            let cap = v.capacity();
            assert_eq!(
                lists.iter().map(ActionList::shared_by).sum::<usize>(),
                3 + n
            );
            clear_rules(&mut v);
            assert!(v.is_empty());
            assert_eq!(v.capacity(), cap);
            assert!(lists.iter().all(|l| l.shared_by() == 1), "{n} rules");
        }
    }

    /// [`Match::set`] on every field, whole-address values included (their two-word path),
    /// against its definition: the value masked byte by byte, each of key and mask written
    /// through [`FlowKey::set`], nothing else changed.
    #[test]
    fn set_masks_the_value_and_changes_only_the_field() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..300 {
            let base = Match {
                key: FlowKey::from_words(core::array::from_fn(|_| next())),
                mask: FlowKey::from_words(core::array::from_fn(|_| next())),
            };
            for f in Field::ALL {
                let (_, len) = f.span();
                let value: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let mask: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let mut got = base;
                got.set(f, &value, &mask);
                let mut want = base;
                let masked: Vec<u8> = value.iter().zip(&mask).map(|(v, m)| v & m).collect();
                want.key.set(f, &masked);
                want.mask.set(f, &mask);
                assert_eq!(got, want, "round {round} {f:?}");
            }
        }
    }
}
