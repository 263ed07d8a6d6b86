//! Fuzzes the store's reader, `Store::open`: the files a daemon reads back at start, written
//! from the input as a broken or hostile writer would. Raw bytes mostly stop at a checksum, so
//! most modes frame the input's records with valid checksums (the format is documented in
//! `crates/sluice-store/src/frame.rs` and `docs/store.md`): the record decoder, the snapshot's
//! counters and the replay then see arbitrary payloads.
//!
//! Nothing may panic, and nothing may allocate more than the files could describe. An open
//! either fails with an error or gives a store that works: when asked (mode bit 2) it compacts
//! and reopens to the same state; it takes a commit of one fresh rule and reopens to the state
//! with that rule applied.
//!
//! Input: byte 0 the mode (bits 0–1: 0 the journal is the rest of the input as it is; 1 a
//! journal of framed records; 2 a snapshot of the first `byte 3` records and a journal of the
//! others; 3 a journal whose last record is cut `byte 3` bytes short; bit 2: compact after a
//! good open); byte 1 the journal's generation, byte 2 the snapshot's; byte 3 as said; then
//! records, each a 2-byte little-endian length and that many payload bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_store::{Change, Rule, Store};
use std::path::{Path, PathBuf};

/// A file header: magic, format version 1, generation, CRC32c of the 20 bytes before it.
fn file_header(magic: &[u8; 8], generation: u64) -> Vec<u8> {
    let mut h = magic.to_vec();
    h.extend_from_slice(&1u32.to_le_bytes());
    h.extend_from_slice(&generation.to_le_bytes());
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// A record: payload length, the payload's CRC32c, the CRC32c of those 8 bytes, the payload.
fn record(out: &mut Vec<u8>, payload: &[u8]) {
    let mut h = (payload.len() as u32).to_le_bytes().to_vec();
    h.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}

/// The payloads of the input after its 4-byte head.
fn payloads(mut rest: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let [a, b, tail @ ..] = rest {
        let n = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
        out.push(&tail[..n]);
        rest = &tail[n..];
    }
    out
}

/// A fresh directory for this process (tmpfs when there is one: the store syncs each commit).
fn dir() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("sluice-fuzz-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("a temporary directory");
    d
}

fuzz_target!(|data: &[u8]| {
    let [mode, jgen, sgen, k, rest @ ..] = data else {
        return;
    };
    let d = dir();
    let recs = payloads(rest);
    let framed = |recs: &[&[u8]], magic: &[u8; 8], generation: u8| {
        let mut f = file_header(magic, u64::from(generation));
        for r in recs {
            record(&mut f, r);
        }
        f
    };
    let journal = match mode & 3 {
        0 => rest.to_vec(),
        1 => framed(&recs, b"SLUICEJ\0", *jgen),
        2 => {
            let split = usize::from(*k).min(recs.len());
            let snapshot = framed(&recs[..split], b"SLUICES\0", *sgen);
            std::fs::write(d.join("snapshot"), snapshot).expect("write the snapshot");
            framed(&recs[split..], b"SLUICEJ\0", *jgen)
        }
        _ => {
            let mut f = framed(&recs, b"SLUICEJ\0", *jgen);
            let cut = usize::from(*k).min(f.len());
            f.truncate(f.len() - cut);
            f
        }
    };
    std::fs::write(d.join("journal"), journal).expect("write the journal");

    let Ok((mut store, mut state)) = Store::open(&d) else {
        let _ = std::fs::remove_dir_all(&d);
        return;
    };
    if mode & 4 != 0 {
        store.compact().expect("a store that opened compacts");
        drop(store);
        let (again, reopened) = Store::open(&d).expect("a compacted store reopens");
        assert_eq!(reopened, state, "compaction changed the state");
        store = again;
    }
    let handle = store.next_rule_handle();
    if handle < u64::MAX {
        let change = Change::RulesAdd(vec![Rule {
            handle,
            priority: 7,
            matches: b"in_port 1".to_vec(),
            actions: b"drop".to_vec(),
        }]);
        store
            .commit(std::slice::from_ref(&change))
            .expect("a store that opened takes a commit");
        drop(store);
        state.apply(change);
        let (_store, reopened) = Store::open(&d).expect("a store reopens after a commit");
        assert_eq!(reopened, state, "the commit did not read back as applied");
    }
    let _ = std::fs::remove_dir_all(&d);
});
