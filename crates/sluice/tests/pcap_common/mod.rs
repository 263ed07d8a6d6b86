//! Capture files for the `sluice pcap …` CLI tests: a per-process temporary path, a classic
//! little-endian pcap writer and a reader for what the CLI writes.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Runs the `sluice` binary built for these tests with `args`.
pub fn sluice(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

/// The JSON object on the last line of a run's standard output (`--json`).
pub fn last_json(out: &std::process::Output) -> serde_json::Value {
    let s = String::from_utf8_lossy(&out.stdout);
    let line = s.lines().last().expect("output");
    serde_json::from_str(line).expect("JSON on the last line")
}

/// `TMPDIR/sluice-TEST-PID-NAME`.
pub fn tmp(test: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sluice-{test}-{}-{name}", std::process::id()))
}

/// Removes the files a test wrote, and the `.jsonl` side file `sluice pcap gro` writes next to
/// its output, where there is one (missing files are not an error).
pub fn remove<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) {
    for p in paths {
        let p = p.as_ref();
        let _ = std::fs::remove_file(p);
        let mut side = p.as_os_str().to_owned();
        side.push(".jsonl");
        let _ = std::fs::remove_file(side);
    }
}

/// Writes `frames` as a microsecond pcap (Ethernet, snaplen 262 144), frame `i` at second `i`.
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&262_144u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        b.extend_from_slice(&(i as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).expect("write pcap");
}

/// Reads the frames of a classic pcap of either byte order; with `nanosecond`, asserts it is a
/// nanosecond-resolution capture.
pub fn read_pcap_with(path: &Path, nanosecond: bool) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).expect("read pcap");
    let be = b[0] == 0xa1;
    let rd = |x: &[u8]| {
        let a: [u8; 4] = x.try_into().expect("4 bytes");
        if be {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    };
    if nanosecond {
        assert_eq!(rd(&b[..4]), 0xa1b2_3c4d, "nanosecond pcap");
    }
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= b.len() {
        let len = rd(&b[at + 8..at + 12]) as usize;
        out.push(b[at + 16..at + 16 + len].to_vec());
        at += 16 + len;
    }
    out
}
