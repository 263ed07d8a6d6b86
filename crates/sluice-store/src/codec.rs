//! The compact binary encoding of changes inside a record's payload (format version 1).
//!
//! A payload is a sequence of changes, each a tag byte and its fields. Integers are LEB128
//! varints; byte strings and text are a varint length and the bytes; maps are a varint count and
//! their entries in key order. Handles inside a batch are delta-encoded from the previous one
//! (wrapping, so any order round-trips), which makes a rule of a sequential batch cost one
//! byte of handle. Decoding checks every length against what is left and never panics.

use std::collections::BTreeMap;

use crate::state::{Change, Port, Rule, RuleRef, State};

const TAG_PORT_ADD: u8 = 1;
const TAG_PORT_DEL: u8 = 2;
const TAG_PORT_SETTINGS: u8 = 3;
const TAG_PORT_FEATURES: u8 = 4;
const TAG_RULES_ADD: u8 = 5;
const TAG_RULES_DEL: u8 = 6;
const TAG_RULE_MODIFY: u8 = 7;
const TAG_QUOTA_SET: u8 = 8;
const TAG_QUOTA_CLEAR: u8 = 9;
/// Snapshot only: the last record, with the counters and the counts to check.
const TAG_SNAPSHOT_END: u8 = 0x7f;

/// What a snapshot's last record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SnapshotEnd {
    pub next_port_handle: u64,
    pub next_rule_handle: u64,
    pub ports: u64,
    pub rules: u64,
    pub quotas: u64,
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

fn put_settings(buf: &mut Vec<u8>, settings: &BTreeMap<String, String>) {
    put_varint(buf, settings.len() as u64);
    for (k, v) in settings {
        put_bytes(buf, k.as_bytes());
        put_bytes(buf, v.as_bytes());
    }
}

fn put_features(buf: &mut Vec<u8>, features: &BTreeMap<String, bool>) {
    put_varint(buf, features.len() as u64);
    for (k, on) in features {
        put_bytes(buf, k.as_bytes());
        buf.push(u8::from(*on));
    }
}

/// Appends the encoding of `count` rules (a [`Change::RulesAdd`]) to `buf`, calling `check`
/// on each first. Returns how many rules the iterator gave (the caller refuses the record if
/// that is not `count`) or the first error `check` returned.
pub(crate) fn encode_rules_add<'a, E>(
    buf: &mut Vec<u8>,
    count: usize,
    rules: impl Iterator<Item = RuleRef<'a>>,
    mut check: impl FnMut(&RuleRef<'a>) -> Result<(), E>,
) -> Result<usize, E> {
    buf.push(TAG_RULES_ADD);
    put_varint(buf, count as u64);
    let mut prev = 0u64;
    let mut n = 0;
    for rule in rules {
        check(&rule)?;
        put_varint(buf, rule.handle.wrapping_sub(prev));
        prev = rule.handle;
        put_varint(buf, u64::from(rule.priority));
        put_bytes(buf, rule.matches);
        put_bytes(buf, rule.actions);
        n += 1;
    }
    Ok(n)
}

/// Appends the encoding of a [`Change::RuleModify`] of `handle` to `actions` to `buf`.
pub(crate) fn encode_rule_modify(buf: &mut Vec<u8>, handle: u64, actions: &[u8]) {
    buf.push(TAG_RULE_MODIFY);
    put_varint(buf, handle);
    put_bytes(buf, actions);
}

/// Appends the encoding of one change to `buf`.
pub(crate) fn encode_change(buf: &mut Vec<u8>, change: &Change) {
    match change {
        Change::PortAdd(port) => {
            buf.push(TAG_PORT_ADD);
            put_varint(buf, port.handle);
            put_bytes(buf, port.name.as_bytes());
            put_varint(buf, u64::from(port.number));
            put_bytes(buf, port.kind.as_bytes());
            put_settings(buf, &port.settings);
            put_features(buf, &port.features);
        }
        Change::PortDel { handle } => {
            buf.push(TAG_PORT_DEL);
            put_varint(buf, *handle);
        }
        Change::PortSettings { handle, settings } => {
            buf.push(TAG_PORT_SETTINGS);
            put_varint(buf, *handle);
            put_settings(buf, settings);
        }
        Change::PortFeatures { handle, features } => {
            buf.push(TAG_PORT_FEATURES);
            put_varint(buf, *handle);
            put_features(buf, features);
        }
        Change::RulesAdd(rules) => {
            let no_check = |_: &RuleRef<'_>| Ok::<(), std::convert::Infallible>(());
            let Ok(_) = encode_rules_add(
                buf,
                rules.len(),
                rules.iter().map(Rule::as_rule_ref),
                no_check,
            );
        }
        Change::RulesDel(handles) => {
            buf.push(TAG_RULES_DEL);
            put_varint(buf, handles.len() as u64);
            let mut prev = 0u64;
            for &h in handles {
                put_varint(buf, h.wrapping_sub(prev));
                prev = h;
            }
        }
        Change::RuleModify { handle, actions } => encode_rule_modify(buf, *handle, actions),
        Change::QuotaSet { name, value } => {
            buf.push(TAG_QUOTA_SET);
            put_bytes(buf, name.as_bytes());
            put_varint(buf, *value);
        }
        Change::QuotaClear { name } => {
            buf.push(TAG_QUOTA_CLEAR);
            put_bytes(buf, name.as_bytes());
        }
    }
}

/// Appends a snapshot's end record payload to `buf`.
pub(crate) fn encode_snapshot_end(buf: &mut Vec<u8>, end: &SnapshotEnd) {
    buf.push(TAG_SNAPSHOT_END);
    put_varint(buf, end.next_port_handle);
    put_varint(buf, end.next_rule_handle);
    put_varint(buf, end.ports);
    put_varint(buf, end.rules);
    put_varint(buf, end.quotas);
}

/// Why a payload did not decode: the offset inside the payload and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub offset: usize,
    pub reason: String,
}

struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    fn err(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            offset: self.pos,
            reason: reason.into(),
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.err("payload ends inside a field"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                self.pos = start;
                return Err(self.err("varint overflows 64 bits"));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.pos = start;
        Err(self.err("varint longer than 10 bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        let start = self.pos;
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| {
            self.pos = start;
            self.err(format!("{what} {v} exceeds 32 bits"))
        })
    }

    /// A count of items each at least `min_item` bytes long, checked against what is left so
    /// a corrupt count cannot make the decoder reserve memory it will never fill.
    fn count(&mut self, min_item: usize) -> Result<usize, DecodeError> {
        let start = self.pos;
        let n = self.varint()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(min_item as u64) > left {
            self.pos = start;
            return Err(self.err(format!("count {n} exceeds the payload")));
        }
        Ok(n as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let len = self.varint()?;
        let left = (self.buf.len() - self.pos) as u64;
        if len > left {
            self.pos = start;
            return Err(self.err(format!("length {len} exceeds the payload")));
        }
        let len = len as usize;
        let s = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(s)
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let start = self.pos;
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| {
            self.pos = start;
            self.err("text is not UTF-8")
        })
    }

    fn settings(&mut self) -> Result<BTreeMap<String, String>, DecodeError> {
        let n = self.count(2)?;
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let k = self.string()?;
            let v = self.string()?;
            m.insert(k, v);
        }
        Ok(m)
    }

    fn features(&mut self) -> Result<BTreeMap<String, bool>, DecodeError> {
        let n = self.count(2)?;
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let k = self.string()?;
            let on = match self.u8()? {
                0 => false,
                1 => true,
                b => return Err(self.err(format!("feature state {b} is neither 0 nor 1"))),
            };
            m.insert(k, on);
        }
        Ok(m)
    }

    fn handles(&mut self) -> Result<Vec<u64>, DecodeError> {
        let n = self.count(1)?;
        let mut v = Vec::with_capacity(n);
        let mut prev = 0u64;
        for _ in 0..n {
            prev = prev.wrapping_add(self.varint()?);
            v.push(prev);
        }
        Ok(v)
    }
}

/// Decodes a journal payload and applies its changes to `state`. Stops at the first error:
/// the caller fails the whole open, so a half-applied record is never used.
pub(crate) fn apply_payload(state: &mut State, payload: &[u8]) -> Result<(), DecodeError> {
    let mut d = Decoder {
        buf: payload,
        pos: 0,
    };
    if d.at_end() {
        return Err(d.err("empty record"));
    }
    while !d.at_end() {
        let tag_at = d.pos;
        let tag = d.u8()?;
        let change = match tag {
            TAG_PORT_ADD => Change::PortAdd(Port {
                handle: d.varint()?,
                name: d.string()?,
                number: d.u32("port number")?,
                kind: d.string()?,
                settings: d.settings()?,
                features: d.features()?,
            }),
            TAG_PORT_DEL => Change::PortDel {
                handle: d.varint()?,
            },
            TAG_PORT_SETTINGS => Change::PortSettings {
                handle: d.varint()?,
                settings: d.settings()?,
            },
            TAG_PORT_FEATURES => Change::PortFeatures {
                handle: d.varint()?,
                features: d.features()?,
            },
            TAG_RULES_ADD => {
                // Straight into the state: no intermediate batch on the replay's hot path.
                let n = d.count(4)?;
                let mut prev = 0u64;
                for _ in 0..n {
                    prev = prev.wrapping_add(d.varint()?);
                    let priority = d.u32("priority")?;
                    let matches = d.bytes()?.to_vec();
                    let actions = d.bytes()?.to_vec();
                    state.add_rule(Rule {
                        handle: prev,
                        priority,
                        matches,
                        actions,
                    });
                }
                continue;
            }
            TAG_RULES_DEL => Change::RulesDel(d.handles()?),
            TAG_RULE_MODIFY => Change::RuleModify {
                handle: d.varint()?,
                actions: d.bytes()?.to_vec(),
            },
            TAG_QUOTA_SET => Change::QuotaSet {
                name: d.string()?,
                value: d.varint()?,
            },
            TAG_QUOTA_CLEAR => Change::QuotaClear { name: d.string()? },
            _ => {
                d.pos = tag_at;
                return Err(d.err(format!("unknown change tag {tag:#04x}")));
            }
        };
        state.apply(change);
    }
    Ok(())
}

/// Decodes a snapshot payload: either changes (applied to `state`) or, when it is the end
/// record, the end record's contents.
pub(crate) fn apply_snapshot_payload(
    state: &mut State,
    payload: &[u8],
) -> Result<Option<SnapshotEnd>, DecodeError> {
    if payload.first() != Some(&TAG_SNAPSHOT_END) {
        return apply_payload(state, payload).map(|()| None);
    }
    let mut d = Decoder {
        buf: payload,
        pos: 1,
    };
    let end = SnapshotEnd {
        next_port_handle: d.varint()?,
        next_rule_handle: d.varint()?,
        ports: d.varint()?,
        rules: d.varint()?,
        quotas: d.varint()?,
    };
    if !d.at_end() {
        return Err(d.err("bytes after the snapshot's end record"));
    }
    Ok(Some(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_width() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            let mut d = Decoder { buf: &buf, pos: 0 };
            assert_eq!(d.varint(), Ok(v));
            assert!(d.at_end());
        }
    }

    #[test]
    fn overlong_varint_is_refused() {
        let buf = [0xffu8; 10];
        let mut d = Decoder { buf: &buf, pos: 0 };
        assert!(d.varint().is_err());
        let buf = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02];
        let mut d = Decoder { buf: &buf, pos: 0 };
        assert!(d.varint().unwrap_err().reason.contains("overflows"));
    }

    #[test]
    fn a_huge_count_is_refused_before_allocating() {
        let mut buf = vec![TAG_RULES_DEL];
        put_varint(&mut buf, u64::MAX / 2);
        let mut state = State::default();
        let e = apply_payload(&mut state, &buf).unwrap_err();
        assert!(e.reason.contains("exceeds the payload"), "{e:?}");
        assert_eq!(e.offset, 1);
    }

    #[test]
    fn every_change_round_trips() {
        let port = Port {
            handle: 7,
            name: "tap0".into(),
            number: 3,
            kind: "tap".into(),
            settings: [("gro".to_string(), "true".to_string())].into(),
            features: [("tx-checksumming".to_string(), false)].into(),
        };
        let rule = |h: u64| Rule {
            handle: h,
            priority: 9,
            matches: b"m".to_vec(),
            actions: b"a".to_vec(),
        };
        let changes = vec![
            Change::PortAdd(port.clone()),
            Change::PortSettings {
                handle: 7,
                settings: [("netns".to_string(), "blue".to_string())].into(),
            },
            Change::PortFeatures {
                handle: 7,
                features: [("rx-gro".to_string(), true)].into(),
            },
            Change::RulesAdd(vec![rule(10), rule(12), rule(300)]),
            Change::RulesDel(vec![12]),
            Change::RuleModify {
                handle: 300,
                actions: b"drop".to_vec(),
            },
            Change::QuotaSet {
                name: "rules".into(),
                value: 5,
            },
            Change::QuotaSet {
                name: "masks".into(),
                value: 6,
            },
            Change::QuotaClear {
                name: "masks".into(),
            },
        ];
        let mut buf = Vec::new();
        let mut expected = State::default();
        for c in &changes {
            encode_change(&mut buf, c);
            expected.apply(c.clone());
        }
        let mut got = State::default();
        apply_payload(&mut got, &buf).unwrap();
        assert_eq!(got, expected);
        assert_eq!(got.rules.len(), 2);
        assert_eq!(got.rules[&300].actions, b"drop");
        assert_eq!(got.ports[&7].settings["netns"], "blue");
        assert_eq!(got.next_rule_handle, 301);
        assert_eq!(got.next_port_handle, 8);
        // Every strict prefix fails to decode or decodes to less: never a panic.
        for cut in 0..buf.len() {
            let mut s = State::default();
            let _ = apply_payload(&mut s, &buf[..cut]);
        }
    }
}
