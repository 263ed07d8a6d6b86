//! Crash and corruption behaviour of the store, through its public API and its files.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_store::{Change, Port, Rule, State, Store, StoreError};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-store-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

/// [`Store::open`], retried while the lock is held: the lock is an `flock`, and a child that
/// `kill_9_loses_no_acknowledged_commit` spawns shares this process's open files from its fork
/// to its exec, so a lock just released here can look held for that moment.
fn open(dir: impl AsRef<Path>) -> Result<(Store, State), StoreError> {
    let dir = dir.as_ref();
    for _ in 0..200 {
        match Store::open(dir) {
            Err(StoreError::Locked { .. }) => std::thread::sleep(Duration::from_millis(10)),
            other => return other,
        }
    }
    Store::open(dir)
}

fn rule(handle: u64) -> Rule {
    Rule {
        handle,
        priority: 100 + (handle % 16) as u32,
        matches: format!(
            "ip,in_port=1,nw_dst=10.{}.{}.{}",
            (handle >> 16) & 255,
            (handle >> 8) & 255,
            handle & 255
        )
        .into_bytes(),
        actions: b"output:2".to_vec(),
    }
}

fn port(handle: u64, name: &str) -> Port {
    Port {
        handle,
        name: name.into(),
        number: handle as u32,
        kind: "tap".into(),
        settings: [("gro".to_string(), "true".to_string())].into(),
        features: [("tx-checksumming".to_string(), false)].into(),
    }
}

/// Commit `i` of a test journal: adds rules `3i..3i+3`; every fourth also deletes one.
fn commit_i(i: u64) -> Vec<Change> {
    let mut c = vec![Change::RulesAdd((3 * i..3 * i + 3).map(rule).collect())];
    if i % 4 == 3 {
        c.push(Change::RulesDel(vec![3 * i - 2]));
    }
    c
}

fn expected_after(commits: u64) -> State {
    let mut s = State::default();
    for i in 0..commits {
        for c in commit_i(i) {
            s.apply(c);
        }
    }
    s
}

/// Writes `n` commits and returns the journal's length after each one.
fn write_commits(dir: &Path, n: u64) -> Vec<u64> {
    let (mut store, state) = open(dir).unwrap();
    assert_eq!(state, State::default());
    let mut lens = vec![store.journal_bytes()];
    for i in 0..n {
        store.commit(&commit_i(i)).unwrap();
        lens.push(store.journal_bytes());
    }
    lens
}

#[test]
fn a_torn_last_record_is_cut_at_every_byte_offset() {
    let dir = temp_dir("torn");
    let n = 6;
    let lens = write_commits(&dir, n);
    let journal = dir.join("journal");
    let full = fs::read(&journal).unwrap();
    assert_eq!(full.len() as u64, lens[n as usize]);
    let last_start = lens[n as usize - 1];
    let want = expected_after(n - 1);
    for cut in last_start..lens[n as usize] {
        fs::write(&journal, &full[..cut as usize]).unwrap();
        let (store, state) = open(&dir).unwrap();
        assert_eq!(state, want, "cut at {cut}");
        let torn = store.recovery().torn_tail.clone();
        if cut == last_start {
            assert_eq!(torn, None, "a clean cut at a record boundary is not torn");
        } else {
            let torn = torn.unwrap_or_else(|| panic!("cut at {cut}: no torn-tail report"));
            assert_eq!(torn.offset, last_start);
            assert_eq!(torn.dropped_bytes, cut - last_start);
            assert_eq!(torn.path, journal);
        }
        // The tail was truncated: the file ends at the last good record, and commits go on.
        assert_eq!(fs::metadata(&journal).unwrap().len(), last_start);
        drop(store);
        let (store, again) = open(&dir).unwrap();
        assert!(store.recovery().is_clean());
        assert_eq!(again, want);
    }
    // Committing after a repaired tear appends after the last good record.
    let (mut store, _) = open(&dir).unwrap();
    store.commit(&commit_i(n - 1)).unwrap();
    drop(store);
    let (_, state) = open(&dir).unwrap();
    assert_eq!(state, expected_after(n));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_flipped_byte_before_the_tail_fails_the_open_and_names_the_offset() {
    let dir = temp_dir("flip");
    let lens = write_commits(&dir, 4);
    let journal = dir.join("journal");
    let full = fs::read(&journal).unwrap();
    // Every byte of the file header and of the second record (not the last one).
    let targets = (0..lens[0]).chain(lens[1]..lens[2]);
    for at in targets {
        let mut bad = full.clone();
        bad[at as usize] ^= 0x10;
        fs::write(&journal, &bad).unwrap();
        match open(&dir) {
            Err(StoreError::Corrupt {
                path,
                offset,
                reason,
            }) => {
                assert_eq!(path, journal, "flip at {at}");
                let record = if at < lens[0] { 0 } else { lens[1] };
                // A header flip is reported at the header (or the generation inside it).
                assert!(
                    offset == record || (record == 0 && offset < lens[0]),
                    "flip at {at}: offset {offset} ({reason})"
                );
                let msg = StoreError::Corrupt {
                    path,
                    offset,
                    reason,
                }
                .to_string();
                assert!(
                    msg.contains("journal") && msg.contains(&format!("offset {offset}")),
                    "{msg}"
                );
            }
            other => panic!("flip at {at}: {other:?}"),
        }
    }
    // The file untouched: the store opens and nothing was lost.
    fs::write(&journal, &full).unwrap();
    let (_, state) = open(&dir).unwrap();
    assert_eq!(state, expected_after(4));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_version_is_refused() {
    let dir = temp_dir("version");
    write_commits(&dir, 1);
    let journal = dir.join("journal");
    let mut bytes = fs::read(&journal).unwrap();
    bytes[8] = 2; // version 2, with a header checksum that matches it
    let crc = crc32c::crc32c(&bytes[..20]);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
    fs::write(&journal, &bytes).unwrap();
    let e = open(&dir).unwrap_err();
    assert!(e.to_string().contains("format version 2"), "{e}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn handles_are_never_reused_across_deletes_restarts_and_compactions() {
    let dir = temp_dir("handles");
    let (mut store, _) = open(&dir).unwrap();
    store
        .commit(&[
            Change::PortAdd(port(1, "tap0")),
            Change::RulesAdd((1..=3).map(rule).collect()),
        ])
        .unwrap();
    store
        .commit(&[
            Change::PortDel { handle: 1 },
            Change::RulesDel(vec![1, 2, 3]),
        ])
        .unwrap();
    // Reusing a deleted handle is refused, and nothing of the batch is written.
    let before = store.journal_bytes();
    let e = store
        .commit(&[
            Change::QuotaSet {
                name: "rules".into(),
                value: 1,
            },
            Change::RulesAdd(vec![rule(3)]),
        ])
        .unwrap_err();
    assert!(
        matches!(e, StoreError::InvalidChange { index: 1, .. }),
        "{e}"
    );
    assert_eq!(store.journal_bytes(), before);
    // Handles in a batch must increase.
    assert!(store
        .commit(&[Change::RulesAdd(vec![rule(9), rule(8)])])
        .is_err());
    assert!(store
        .commit(&[Change::PortAdd(port(u64::MAX, "x"))])
        .is_err());
    store.compact().unwrap();
    drop(store);
    let (mut store, state) = open(&dir).unwrap();
    assert!(state.rules.is_empty() && state.ports.is_empty() && state.quotas.is_empty());
    assert_eq!((state.next_port_handle, state.next_rule_handle), (2, 4));
    assert!(store.commit(&[Change::PortAdd(port(1, "tap0"))]).is_err());
    store.commit(&[Change::PortAdd(port(2, "tap0"))]).unwrap();
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_process_cannot_open_a_held_store() {
    let dir = temp_dir("lock");
    let (store, _) = open(&dir).unwrap();
    assert!(matches!(Store::open(&dir), Err(StoreError::Locked { .. })));
    drop(store);
    assert!(open(&dir).is_ok());
    fs::remove_dir_all(&dir).unwrap();
}

const KILL_CHILD_ENV: &str = "SLUICE_STORE_KILL_CHILD_DIR";

/// Run by `kill_9_loses_no_acknowledged_commit` in a child process: commits forever and
/// prints the number of each commit once `commit` has returned. Does nothing otherwise.
#[test]
#[ignore = "the child side of kill_9_loses_no_acknowledged_commit"]
fn kill_child() {
    let Some(dir) = std::env::var_os(KILL_CHILD_ENV) else {
        return;
    };
    let (mut store, state) = open(&dir).unwrap();
    // Commit c adds rules c*4096 .. c*4096+n(c): resume after the last one in the store.
    let mut c = state.next_rule_handle.div_ceil(4096);
    loop {
        let rules = (0..kill_batch(c))
            .map(|k| Rule {
                handle: c * 4096 + k,
                ..rule(c)
            })
            .collect();
        store
            .commit(&[
                Change::RulesAdd(rules),
                Change::QuotaSet {
                    name: "last".into(),
                    value: c,
                },
            ])
            .unwrap();
        println!("ACK {c}");
        c += 1;
    }
}

/// Rules in the child's commit `c`: 1 to 2,000, so kills land inside writes of every size.
fn kill_batch(c: u64) -> u64 {
    1 + (c * 7919) % 2000
}

#[test]
fn kill_9_loses_no_acknowledged_commit() {
    let dir = temp_dir("kill9");
    let exe = std::env::current_exe().unwrap();
    let seed = std::collections::hash_map::RandomState::new();
    for round in 0..8u64 {
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "kill_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(KILL_CHILD_ENV, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut acked = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(n) = line
                    .strip_prefix("ACK ")
                    .and_then(|n| n.parse::<u64>().ok())
                {
                    acked.push(n);
                    let _ = tx.send(());
                }
            }
            acked
        });
        // Kill at a random moment 0 to 150 ms after the child's first acknowledged commit.
        let first = rx.recv_timeout(Duration::from_secs(30));
        let r = std::hash::BuildHasher::hash_one(&seed, round);
        std::thread::sleep(Duration::from_micros(r % 150_000));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let acked = reader.join().unwrap();
        assert!(
            first.is_ok() && !acked.is_empty(),
            "round {round}: the child acknowledged nothing"
        );
        let (store, state) = open(&dir).unwrap();
        for &i in &acked {
            for k in 0..kill_batch(i) {
                assert!(
                    state.rules.contains_key(&(i * 4096 + k)),
                    "round {round}: commit {i} acknowledged but rule {k} lost"
                );
            }
        }
        if let Some(&last) = acked.last() {
            // The quota says which commit is last in the store: the last acknowledged one or
            // the one after it (written, not yet acknowledged).
            let in_store = state.quotas["last"];
            assert!(
                in_store == last || in_store == last + 1,
                "round {round}: store at {in_store}, acked {last}"
            );
        }
        eprintln!(
            "round {round}: {} commits acknowledged, {} rules in the store, recovery {:?}",
            acked.len(),
            state.rules.len(),
            store.recovery()
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}
