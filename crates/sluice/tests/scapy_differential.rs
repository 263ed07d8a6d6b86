//! Differential test: `sluice pcap inspect --json` against scapy's dissection of the same frames.
//!
//! `tests/scapy/corpus.py gen` writes a seeded corpus (VLAN stacks of every TPID, IPv4 options,
//! IPv6 extension headers, TCP/UDP/SCTP/ICMP/ICMPv6, VXLAN/Geneve/GRE carrying tagged frames or
//! bare IP, damaged checksums, Ethernet padding); `corpus.py dissect` prints scapy's view of every
//! frame; the two must agree on layers, VLAN stacks, offsets, tunnel and checksum verdicts.
//! Needs python3 with scapy (the test script installs it).

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n(python3 with scapy is required: `python3 -m pip install scapy`)",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The keys the oracle computes, with ICMPv6's payload offset dropped: scapy models the echo
/// identifier/sequence and data as one layer, so its "payload" offset is not comparable.
fn comparable(mut v: Value) -> Value {
    let obj = v.as_object_mut().expect("object");
    obj.retain(|k, _| {
        matches!(
            k.as_str(),
            "frame" | "len" | "layers" | "vlans" | "l3" | "l4" | "offsets" | "tunnel" | "csum"
        )
    });
    if obj.get("l4").and_then(Value::as_str) == Some("icmpv6") {
        obj["offsets"]["payload"] = Value::Null;
    }
    if let Some(inner) = obj.get_mut("tunnel").and_then(|t| t.get_mut("inner")) {
        if inner.get("l4").and_then(Value::as_str) == Some("icmpv6") {
            inner["offsets"]["payload"] = Value::Null;
        }
    }
    v
}

fn differential(seed: u64, count: usize) {
    let dir = std::env::temp_dir().join(format!("sluice-scapy-{}-{seed}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("corpus.pcap");
    let script = repo_root().join("tests/scapy/corpus.py");
    run_ok(
        Command::new(python())
            .arg(&script)
            .arg("gen")
            .arg(&pcap)
            .args(["--seed", &seed.to_string(), "--count", &count.to_string()]),
    );
    let expected = run_ok(
        Command::new(python())
            .arg(&script)
            .arg("dissect")
            .arg(&pcap),
    );
    let actual = run_ok(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["pcap", "inspect", "--json"])
            .arg(&pcap),
    );
    let expected: Vec<Value> = expected
        .lines()
        .map(|l| comparable(serde_json::from_str(l).expect("oracle JSON")))
        .collect();
    let actual: Vec<Value> = actual
        .lines()
        .map(|l| serde_json::from_str(l).expect("sluice JSON"))
        .collect();
    assert_eq!(expected.len(), count);
    assert_eq!(actual.len(), count, "sluice printed one line per frame");
    let mut mismatches = Vec::new();
    for (e, a) in expected.iter().zip(&actual) {
        assert!(
            a["error"].is_null(),
            "generated frames are well formed: {a}"
        );
        let a = comparable(a.clone());
        if *e != a {
            mismatches.push(format!("scapy:  {e}\nsluice: {a}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        mismatches.is_empty(),
        "{} of {count} frames differ; first ones:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

#[test]
fn inspect_agrees_with_scapy_seed_1() {
    differential(1, 400);
}

#[test]
fn inspect_agrees_with_scapy_seed_2() {
    differential(2, 400);
}
