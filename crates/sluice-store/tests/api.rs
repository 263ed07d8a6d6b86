//! The borrowed-rules fast path commits exactly what the owned one does.

use std::fs;
use std::path::PathBuf;

use sluice_store::{Change, Rule, RuleRef, Store, StoreError};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-store-api-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

fn rules(from: u64, n: u64) -> Vec<Rule> {
    (from..from + n)
        .map(|h| Rule {
            handle: h * 3,
            priority: h as u32,
            matches: format!("tcp,tp_dst={h}").into_bytes(),
            actions: format!("output:{}", h % 5).into_bytes(),
        })
        .collect()
}

#[test]
fn commit_rules_stores_what_rules_add_stores() {
    let (a, b) = (temp_dir("owned"), temp_dir("borrowed"));
    let (mut owned, _) = Store::open(&a).unwrap();
    let (mut borrowed, _) = Store::open(&b).unwrap();
    for (from, n) in [(1, 1), (2, 500), (600, 3)] {
        let batch = rules(from, n);
        owned.commit(&[Change::RulesAdd(batch.clone())]).unwrap();
        borrowed
            .commit_rules(batch.iter().map(Rule::as_rule_ref))
            .unwrap();
        assert_eq!(owned.journal_bytes(), borrowed.journal_bytes());
        assert_eq!(owned.next_rule_handle(), borrowed.next_rule_handle());
    }
    drop((owned, borrowed));
    let (_, sa) = Store::open(&a).unwrap();
    let (_, sb) = Store::open(&b).unwrap();
    assert_eq!(sa, sb);
    assert_eq!(sa.rules.len(), 504);
    assert_eq!(
        fs::read(a.join("journal")).unwrap(),
        fs::read(b.join("journal")).unwrap()
    );
    fs::remove_dir_all(&a).unwrap();
    fs::remove_dir_all(&b).unwrap();
}

#[test]
fn commit_modifies_stores_what_rule_modify_changes_store() {
    let (a, b) = (temp_dir("mod-owned"), temp_dir("mod-borrowed"));
    let (mut owned, _) = Store::open(&a).unwrap();
    let (mut borrowed, _) = Store::open(&b).unwrap();
    let batch = rules(1, 50);
    owned.commit(&[Change::RulesAdd(batch.clone())]).unwrap();
    borrowed
        .commit_rules(batch.iter().map(Rule::as_rule_ref))
        .unwrap();
    for round in 0..3u64 {
        let texts: Vec<(u64, String)> = batch
            .iter()
            .filter(|r| r.handle % (round + 2) == 0)
            .map(|r| (r.handle, format!("output:{}", r.handle + round)))
            .collect();
        let changes: Vec<Change> = texts
            .iter()
            .map(|(h, t)| Change::RuleModify {
                handle: *h,
                actions: t.clone().into_bytes(),
            })
            .collect();
        owned.commit(&changes).unwrap();
        borrowed
            .commit_modifies(texts.iter().map(|(h, t)| (*h, t.as_bytes())))
            .unwrap();
        assert_eq!(owned.journal_bytes(), borrowed.journal_bytes());
    }
    // Nothing to record: nothing written.
    let before = borrowed.journal_bytes();
    borrowed.commit_modifies(std::iter::empty()).unwrap();
    assert_eq!(borrowed.journal_bytes(), before);
    drop((owned, borrowed));
    let (_, sa) = Store::open(&a).unwrap();
    let (_, sb) = Store::open(&b).unwrap();
    assert_eq!(sa, sb);
    assert_eq!(
        fs::read(a.join("journal")).unwrap(),
        fs::read(b.join("journal")).unwrap()
    );
    fs::remove_dir_all(&a).unwrap();
    fs::remove_dir_all(&b).unwrap();
}

#[test]
fn commit_rules_refuses_stale_handles_and_writes_nothing() {
    let dir = temp_dir("stale");
    let (mut store, _) = Store::open(&dir).unwrap();
    store
        .commit_rules(rules(1, 10).iter().map(Rule::as_rule_ref))
        .unwrap();
    let len = store.journal_bytes();
    let mut batch = rules(11, 10);
    batch[7].handle = 5;
    let e = store
        .commit_rules(batch.iter().map(Rule::as_rule_ref))
        .unwrap_err();
    assert!(matches!(e, StoreError::InvalidChange { .. }), "{e}");
    assert!(e.to_string().contains("handle 5 is not fresh"), "{e}");
    assert_eq!(store.journal_bytes(), len);
    assert_eq!(store.next_rule_handle(), 31);
    // The store goes on: the refused batch left no trace.
    store
        .commit_rules([RuleRef {
            handle: 31,
            priority: 1,
            matches: b"m",
            actions: b"a",
        }])
        .unwrap();
    drop(store);
    let (_, state) = Store::open(&dir).unwrap();
    assert_eq!(state.rules.len(), 11);
    assert_eq!(state.next_rule_handle, 32);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_new_store_is_private_to_the_daemon_and_its_group() {
    use std::os::unix::fs::PermissionsExt;
    let base = temp_dir("modes");
    let dir = base.join("a/b/db");
    let (mut store, _) = Store::open(&dir).unwrap();
    store
        .commit(&[Change::QuotaSet {
            name: "rules".into(),
            value: 1,
        }])
        .unwrap();
    store.compact().unwrap();
    let mode = |p: PathBuf| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // At most these bits (a stricter umask may remove more), and the owner's always.
    let d = mode(dir.clone());
    assert!(d & !0o750 == 0 && d & 0o700 == 0o700, "directory {d:o}");
    for f in ["journal", "snapshot", "lock"] {
        let m = mode(dir.join(f));
        assert!(m & !0o640 == 0 && m & 0o600 == 0o600, "{f} {m:o}");
    }
    fs::remove_dir_all(&base).unwrap();
}
