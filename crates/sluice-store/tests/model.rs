//! Property test: a random sequence of commits, compactions and reopenings gives, after a
//! final reopen, the state a plain in-memory model computes from the same changes.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use sluice_store::{Change, Port, Rule, State, Store};

/// A change with its handles still to be resolved against the model (so that adds use fresh
/// handles and deletions mostly hit something).
#[derive(Debug, Clone)]
enum Abstract {
    PortAdd { gap: u64, name: u8 },
    PortDel(u64),
    PortSettings(u64, Vec<(u8, u8)>),
    PortFeatures(u64, Vec<(u8, bool)>),
    RulesAdd(Vec<(u64, u32, Vec<u8>)>),
    RulesDel(Vec<u64>),
    RuleModify(u64, Vec<u8>),
    QuotaSet(u8, u64),
    QuotaClear(u8),
}

#[derive(Debug, Clone)]
enum Step {
    Commit(Vec<Abstract>),
    Compact,
    Reopen,
}

fn abstract_change() -> impl Strategy<Value = Abstract> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..12);
    prop_oneof![
        (0..3u64, any::<u8>()).prop_map(|(gap, name)| Abstract::PortAdd { gap, name }),
        any::<u64>().prop_map(Abstract::PortDel),
        (
            any::<u64>(),
            proptest::collection::vec((0..4u8, any::<u8>()), 0..3)
        )
            .prop_map(|(p, s)| Abstract::PortSettings(p, s)),
        (
            any::<u64>(),
            proptest::collection::vec((0..4u8, any::<bool>()), 0..3)
        )
            .prop_map(|(p, f)| Abstract::PortFeatures(p, f)),
        proptest::collection::vec((0..3u64, any::<u32>(), bytes()), 0..20)
            .prop_map(Abstract::RulesAdd),
        proptest::collection::vec(any::<u64>(), 0..6).prop_map(Abstract::RulesDel),
        (any::<u64>(), bytes()).prop_map(|(h, a)| Abstract::RuleModify(h, a)),
        (0..3u8, any::<u64>()).prop_map(|(n, v)| Abstract::QuotaSet(n, v)),
        (0..3u8).prop_map(Abstract::QuotaClear),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => proptest::collection::vec(abstract_change(), 1..5).prop_map(Step::Commit),
        1 => Just(Step::Compact),
        1 => Just(Step::Reopen),
    ]
}

/// The model: the meaning of each change written out again, independently of `State::apply`.
#[derive(Debug, Default)]
struct Model {
    ports: BTreeMap<u64, Port>,
    rules: BTreeMap<u64, (u32, Vec<u8>, Vec<u8>)>,
    quotas: BTreeMap<String, u64>,
    next_port: u64,
    next_rule: u64,
}

/// An existing key picked by `pick` most of the time, a likely absent one otherwise.
fn pick<V>(map: &BTreeMap<u64, V>, pick: u64) -> u64 {
    if map.is_empty() || pick.is_multiple_of(5) {
        return pick;
    }
    *map.keys()
        .nth((pick % map.len() as u64) as usize)
        .unwrap_or(&pick)
}

impl Model {
    /// Resolves an abstract change to a concrete one (against the model as it is before the
    /// change), and applies it.
    fn resolve_and_apply(&mut self, a: &Abstract) -> Change {
        match a {
            Abstract::PortAdd { gap, name } => {
                let handle = self.next_port + gap;
                let port = Port {
                    handle,
                    name: format!("p{name}"),
                    number: u32::from(*name),
                    kind: if name % 2 == 0 { "tap" } else { "afpacket" }.into(),
                    settings: BTreeMap::new(),
                    features: BTreeMap::new(),
                };
                self.ports.insert(handle, port.clone());
                self.next_port = handle + 1;
                Change::PortAdd(port)
            }
            Abstract::PortDel(p) => {
                let handle = pick(&self.ports, *p);
                self.ports.remove(&handle);
                Change::PortDel { handle }
            }
            Abstract::PortSettings(p, s) => {
                let handle = pick(&self.ports, *p);
                let settings: BTreeMap<String, String> = s
                    .iter()
                    .map(|(k, v)| (format!("k{k}"), v.to_string()))
                    .collect();
                if let Some(port) = self.ports.get_mut(&handle) {
                    port.settings = settings.clone();
                }
                Change::PortSettings { handle, settings }
            }
            Abstract::PortFeatures(p, f) => {
                let handle = pick(&self.ports, *p);
                let features: BTreeMap<String, bool> =
                    f.iter().map(|(k, on)| (format!("f{k}"), *on)).collect();
                if let Some(port) = self.ports.get_mut(&handle) {
                    port.features = features.clone();
                }
                Change::PortFeatures { handle, features }
            }
            Abstract::RulesAdd(rules) => {
                let mut out = Vec::new();
                for (gap, priority, body) in rules {
                    let handle = self.next_rule + gap;
                    self.next_rule = handle + 1;
                    let matches = body.clone();
                    let actions: Vec<u8> = body.iter().rev().copied().collect();
                    self.rules
                        .insert(handle, (*priority, matches.clone(), actions.clone()));
                    out.push(Rule {
                        handle,
                        priority: *priority,
                        matches,
                        actions,
                    });
                }
                Change::RulesAdd(out)
            }
            Abstract::RulesDel(picks) => {
                let mut handles = Vec::new();
                for p in picks {
                    let h = pick(&self.rules, *p);
                    self.rules.remove(&h);
                    handles.push(h);
                }
                Change::RulesDel(handles)
            }
            Abstract::RuleModify(p, actions) => {
                let handle = pick(&self.rules, *p);
                if let Some(r) = self.rules.get_mut(&handle) {
                    r.2 = actions.clone();
                }
                Change::RuleModify {
                    handle,
                    actions: actions.clone(),
                }
            }
            Abstract::QuotaSet(n, value) => {
                let name = format!("q{n}");
                self.quotas.insert(name.clone(), *value);
                Change::QuotaSet {
                    name,
                    value: *value,
                }
            }
            Abstract::QuotaClear(n) => {
                let name = format!("q{n}");
                self.quotas.remove(&name);
                Change::QuotaClear { name }
            }
        }
    }

    fn check(&self, state: &State) -> Result<(), TestCaseError> {
        prop_assert_eq!(&state.ports, &self.ports);
        let rules: BTreeMap<u64, (u32, Vec<u8>, Vec<u8>)> = state
            .rules
            .iter()
            .map(|(h, r)| {
                assert_eq!(*h, r.handle);
                (*h, (r.priority, r.matches.clone(), r.actions.clone()))
            })
            .collect();
        prop_assert_eq!(rules, self.rules.clone());
        prop_assert_eq!(&state.quotas, &self.quotas);
        prop_assert_eq!(state.next_port_handle, self.next_port);
        prop_assert_eq!(state.next_rule_handle, self.next_rule);
        Ok(())
    }
}

fn run(steps: &[Step]) -> Result<(), TestCaseError> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let n = CASE.fetch_add(1, Ordering::Relaxed);
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sluice-store-model-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let mut model = Model::default();
    let (mut store, state) = Store::open(&dir).unwrap();
    model.check(&state)?;
    for step in steps {
        match step {
            Step::Commit(changes) => {
                let concrete: Vec<Change> =
                    changes.iter().map(|a| model.resolve_and_apply(a)).collect();
                store.commit(&concrete).unwrap();
            }
            Step::Compact => store.compact().unwrap(),
            Step::Reopen => {
                drop(store);
                let (s, state) = Store::open(&dir).unwrap();
                prop_assert!(s.recovery().is_clean());
                model.check(&state)?;
                store = s;
            }
        }
    }
    drop(store);
    let (_, state) = Store::open(&dir).unwrap();
    let result = model.check(&state);
    fs::remove_dir_all(&dir).unwrap();
    result
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn reopened_store_equals_the_model(steps in proptest::collection::vec(step(), 0..40)) {
        run(&steps)?;
    }
}

/// A journal with a valid header and records framed with valid checksums around arbitrary
/// payloads: the decoder sees bytes no store wrote. Open must load or refuse, never panic.
fn framed_journal(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(b"SLUICEJ\0");
    f.extend_from_slice(&1u32.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    let crc = crc32c::crc32c(&f);
    f.extend_from_slice(&crc.to_le_bytes());
    for p in payloads {
        let mut h = Vec::new();
        h.extend_from_slice(&(p.len() as u32).to_le_bytes());
        h.extend_from_slice(&crc32c::crc32c(p).to_le_bytes());
        let hc = crc32c::crc32c(&h);
        h.extend_from_slice(&hc.to_le_bytes());
        f.extend_from_slice(&h);
        f.extend_from_slice(p);
    }
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_payloads_load_or_are_refused_without_panicking(
        payloads in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..64),
                // Start with a real tag more often, to get past the first byte.
                (1..10u8, proptest::collection::vec(any::<u8>(), 0..64))
                    .prop_map(|(t, mut v)| { v.insert(0, t); v }),
            ],
            1..4,
        )
    ) {
        static CASE: AtomicU64 = AtomicU64::new(0);
        let n = CASE.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sluice-store-fuzz-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("journal"), framed_journal(&payloads)).unwrap();
        match Store::open(&dir) {
            Ok((store, _)) => prop_assert!(store.recovery().is_clean()),
            Err(sluice_store::StoreError::Corrupt { offset, .. }) => prop_assert!(offset >= 24),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
