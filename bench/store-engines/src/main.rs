//! Embedded stores for sluice's durable state, measured: 1M rules in one commit,
//! 1,000 single-rule commits, reopen + read all.
use std::time::Instant;

fn rule_value(i: u64) -> Vec<u8> {
    // ~46 bytes: priority, a match of 5 fields, two actions: what an encoded rule looks like.
    let mut v = Vec::with_capacity(48);
    v.extend_from_slice(&(100u32 + (i % 16) as u32).to_le_bytes());
    v.extend_from_slice(b"ip,in_port=1,nw_dst=10.");
    v.extend_from_slice(format!("{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255).as_bytes());
    v.extend_from_slice(b",output:2");
    v
}

fn dir_bytes(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

const T: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("rules");

fn redb_bench(n: u64) {
    use redb::{ReadableTable, ReadableTableMetadata};
    let dir = std::path::Path::new("/var/tmp/store-engines-redb");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("db");
    let db = redb::Database::create(&path).unwrap();
    let t0 = Instant::now();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for i in 0..n {
            t.insert(i, rule_value(i).as_slice()).unwrap();
        }
    }
    w.commit().unwrap();
    let bulk = t0.elapsed();
    let t0 = Instant::now();
    let mut worst = 0f64;
    for i in n..n + 1000 {
        let s = Instant::now();
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(T).unwrap();
            t.insert(i, rule_value(i).as_slice()).unwrap();
        }
        w.commit().unwrap();
        worst = worst.max(s.elapsed().as_secs_f64());
    }
    let single = t0.elapsed();
    drop(db);
    let size = dir_bytes(dir);
    let t0 = Instant::now();
    let db = redb::Database::open(&path).unwrap();
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    let mut count = 0u64;
    let mut bytes = 0usize;
    for e in t.iter().unwrap() {
        let (_k, v) = e.unwrap();
        count += 1;
        bytes += v.value().len();
    }
    let open = t0.elapsed();
    assert_eq!(count, t.len().unwrap());
    println!(
        "redb: 1M-rule commit {:.3} s ({:.0} rules/s); 1000 single commits {:.3} s (mean {:.1} us, worst {:.1} us); {:.1} bytes/rule on disk; open+read {} rules ({} value bytes) {:.3} s",
        bulk.as_secs_f64(), n as f64 / bulk.as_secs_f64(), single.as_secs_f64(), single.as_secs_f64() * 1e3, worst * 1e6,
        size as f64 / count as f64, count, bytes, open.as_secs_f64()
    );
}

fn sqlite_bench(n: u64) {
    let dir = std::path::Path::new("/var/tmp/store-engines-sqlite");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("db");
    let mut c = rusqlite::Connection::open(&path).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "synchronous", "FULL").unwrap();
    c.execute(
        "CREATE TABLE rules (handle INTEGER PRIMARY KEY, body BLOB NOT NULL)",
        [],
    )
    .unwrap();
    let t0 = Instant::now();
    {
        let tx = c.transaction().unwrap();
        {
            let mut st = tx.prepare("INSERT INTO rules VALUES (?1, ?2)").unwrap();
            for i in 0..n {
                st.execute(rusqlite::params![i as i64, rule_value(i)])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let bulk = t0.elapsed();
    let t0 = Instant::now();
    let mut worst = 0f64;
    for i in n..n + 1000 {
        let s = Instant::now();
        let tx = c.transaction().unwrap();
        tx.execute(
            "INSERT INTO rules VALUES (?1, ?2)",
            rusqlite::params![i as i64, rule_value(i)],
        )
        .unwrap();
        tx.commit().unwrap();
        worst = worst.max(s.elapsed().as_secs_f64());
    }
    let single = t0.elapsed();
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    drop(c);
    let size = dir_bytes(dir);
    let t0 = Instant::now();
    let c = rusqlite::Connection::open(&path).unwrap();
    let mut st = c.prepare("SELECT handle, body FROM rules").unwrap();
    let mut rows = st.query([]).unwrap();
    let mut count = 0u64;
    let mut bytes = 0usize;
    while let Some(r) = rows.next().unwrap() {
        let b: Vec<u8> = r.get(1).unwrap();
        count += 1;
        bytes += b.len();
    }
    let open = t0.elapsed();
    println!(
        "sqlite(WAL, synchronous=FULL): 1M-rule commit {:.3} s ({:.0} rules/s); 1000 single commits {:.3} s (mean {:.1} us, worst {:.1} us); {:.1} bytes/rule on disk; open+read {} rules ({} value bytes) {:.3} s",
        bulk.as_secs_f64(), n as f64 / bulk.as_secs_f64(), single.as_secs_f64(), single.as_secs_f64() * 1e3, worst * 1e6,
        size as f64 / count as f64, count, bytes, open.as_secs_f64()
    );
}

/// `store-engines [redb|sqlite]`: both by default. Works in /var/tmp and removes what it made.
fn main() {
    let n = 1_000_000;
    let which = std::env::args().nth(1).unwrap_or_default();
    if which != "sqlite" {
        redb_bench(n);
    }
    if which != "redb" {
        sqlite_bench(n);
    }
    let _ = std::fs::remove_dir_all("/var/tmp/store-engines-redb");
    let _ = std::fs::remove_dir_all("/var/tmp/store-engines-sqlite");
}
