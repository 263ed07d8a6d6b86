//! `sluice features list` and `sluice pcap tx` as a user runs them.

mod pcap_common;

use builder::{packet, Csum, Envelope, Ip, L4};
use pcap_common::{sluice, write_pcap};
use serde_json::Value;
use sluice_packet::verify::verify_frame;
use sluice_packet::Verdict;
use sluice_testkit::tx_frames as builder;
use std::path::{Path, PathBuf};
use std::process::Output;

fn tmp(name: &str) -> PathBuf {
    pcap_common::tmp("tx", name)
}

/// Removes this process's files of one test (`sluice-tx-PID-TAG-*`) when dropped, panic or not.
struct Cleanup(&'static str);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let prefix = format!("sluice-tx-{}-{}-", std::process::id(), self.0);
        if let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) {
            for e in dir.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    pcap_common::read_pcap_with(path, false)
}

fn counters(out: &Output) -> Value {
    let s = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(s.lines().last().expect("a last line")).expect("JSON last line")
}

/// Five frames: a partial TCPv4 frame, a TCPv4 GSO packet (3 segments), a double-tagged frame
/// carrying a 1500-byte IP packet (1522 bytes), an untagged frame carrying a 1504-byte IP
/// packet, a plain UDPv6 frame with a bad checksum.
fn corpus(dir: &str) -> (PathBuf, PathBuf) {
    let (partial, _, _) = packet(Envelope::Plain, Ip::V4, L4::Tcp, false, Csum::Partial);
    let (gso, _, _) = packet(Envelope::Plain, Ip::V4, L4::Tcp, true, Csum::Partial);
    let tagged = builder::frame(Envelope::Tag2, Ip::V4, L4::Tcp, 1460);
    assert_eq!(tagged.len(), 1522);
    let big = builder::frame(Envelope::Plain, Ip::V4, L4::Tcp, 1464);
    let (bad, _, _) = packet(Envelope::Plain, Ip::V6, L4::Udp, false, Csum::Bad);
    let input = tmp(&format!("{dir}-in.pcap"));
    write_pcap(&input, &[partial, gso, tagged, big, bad]);
    let spec = tmp(&format!("{dir}-spec.jsonl"));
    std::fs::write(
        &spec,
        "{\"l4_csum\": \"partial\", \"ip_csum\": \"good\"}\n\
         {\"gso_type\": \"tcpv4\", \"gso_size\": 1000, \"l4_csum\": \"partial\"}\n\
         {}\n\
         {}\n\
         {\"l4_csum\": \"bad\"}\n",
    )
    .unwrap();
    (input, spec)
}

fn verify_all(frames: &[Vec<u8>]) -> Vec<Verdict> {
    frames
        .iter()
        .map(|f| {
            let l = sluice_wire::parse(f).unwrap();
            verify_frame(f, &l).l4
        })
        .collect()
}

#[test]
fn features_list_names_every_feature() {
    let out = sluice(&["features", "list"]);
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    let names: Vec<&str> = s
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(names.len(), sluice_offload::features::Feature::ALL.len());
    for want in [
        "tx-checksum-ipv4",
        "tx-checksum-ip-generic",
        "tx-scatter-gather-fraglist",
        "tx-udp_tnl-csum-segmentation",
        "tx-udp-fragmentation",
        "tx-vlan-stag-hw-insert",
        "rx-gro",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(
        s.lines().all(|l| l.split_whitespace().count() > 1),
        "descriptions"
    );
}

#[test]
fn no_offloads_does_everything_in_software() {
    let _clean = Cleanup("none");
    let (input, spec) = corpus("none");
    let output = tmp("none-out.pcap");
    let out = sluice(&[
        "pcap",
        "tx",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--features",
        "none",
        "--spec",
        spec.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = counters(&out);
    assert_eq!(c["tx_prepared"], 5);
    assert_eq!(c["sw_csum_completed"], 1);
    assert_eq!(c["soft_gso"], 1);
    assert_eq!(c["soft_gso_segments"], 3);
    assert_eq!(c["oversize_drops"], 2, "{c}");
    assert_eq!(c["tx_unchanged"], 1, "the bad frame goes as it is");
    let frames = read_pcap(&output);
    assert_eq!(frames.len(), 1 + 3 + 1);
    let v = verify_all(&frames);
    assert_eq!(&v[..4], &[Verdict::Good; 4]);
    assert_eq!(v[4], Verdict::Bad, "a bad checksum stays bad");
    // The envelope admits the double-tagged frame, not the bigger untagged packet.
    let out = sluice(&[
        "pcap",
        "tx",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--features",
        "none",
        "--spec",
        spec.to_str().unwrap(),
        "--json",
        "--envelope",
        "8",
    ]);
    assert!(out.status.success());
    assert_eq!(counters(&out)["oversize_drops"], 1);
    let frames = read_pcap(&output);
    assert_eq!(frames.len(), 6);
    assert_eq!(frames[4].len(), 1522);
}

#[test]
fn full_offload_hands_work_to_the_device() {
    let _clean = Cleanup("all");
    let (input, spec) = corpus("all");
    let output = tmp("all-out.pcap");
    let handed = tmp("all-handed.pcap");
    let base = [
        "pcap",
        "tx",
        input.to_str().unwrap(),
        "",
        "--features",
        "all",
        "--spec",
        spec.to_str().unwrap(),
        "--json",
        "--mtu",
        "1500",
        "--envelope",
        "8",
    ];
    let mut a = base;
    a[3] = output.to_str().unwrap();
    let out = sluice(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = counters(&out);
    assert_eq!(c["hw_gso"], 1);
    assert_eq!(c["hw_csum"], 1, "{c}");
    assert_eq!(c["soft_gso"], 0);
    assert_eq!(c["sw_csum_completed"], 0);
    assert_eq!(c["oversize_drops"], 1);
    // On the wire (device modelled): everything verifies but the bad one.
    let frames = read_pcap(&output);
    assert_eq!(frames.len(), 6);
    let v = verify_all(&frames);
    assert_eq!(&v[..5], &[Verdict::Good; 5]);
    assert_eq!(v[5], Verdict::Bad);
    // As handed to the device: the GSO packet is whole, the partial checksums unfilled.
    a[3] = handed.to_str().unwrap();
    let mut with = a.to_vec();
    with.push("--as-handed");
    let out = sluice(&with);
    assert!(out.status.success());
    let frames = read_pcap(&handed);
    assert_eq!(frames.len(), 4);
    assert_eq!(
        verify_all(&frames[..2]),
        vec![Verdict::Bad, Verdict::Bad],
        "pseudo-header sums"
    );
}

#[test]
fn bad_arguments_are_named() {
    let _clean = Cleanup("args");
    let (input, _) = corpus("args");
    let output = tmp("args-out.pcap");
    let out = sluice(&[
        "pcap",
        "tx",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--features",
        "tx-scatter-gather,tx-chekcsum-ipv4",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tx-chekcsum-ipv4"), "{err}");
    let spec = tmp("args-spec.jsonl");
    std::fs::write(&spec, "{}\n{\"l4_csum\": \"fine\"}\n").unwrap();
    let out = sluice(&[
        "pcap",
        "tx",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--features",
        "none",
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec line 2") && err.contains("l4_csum"),
        "{err}"
    );
    std::fs::write(&spec, "{\"gso_type\": \"tcpv4\"}\n").unwrap();
    let out = sluice(&[
        "pcap",
        "tx",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--features",
        "none",
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("frame 1"));
}
