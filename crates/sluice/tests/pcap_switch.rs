//! `sluice pcap switch`: the datapath offline over capture ports. GRO on the ingress port then
//! segmentation by the egress device gives back the original segments byte for byte; a port
//! whose device lacks TSO gets them from software GSO; rules decide and drops are counted.

mod pcap_common;
use pcap_common::{last_json, sluice, write_pcap};
use sluice_testkit::segments::*;
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    pcap_common::tmp("pcap-switch", name)
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    pcap_common::read_pcap_with(path, true)
}

#[test]
fn gro_then_device_segmentation_gives_back_the_segments() {
    let segs: Vec<Vec<u8>> = stream(&Seg::tcp4(5000, 1448), 30, 1448)
        .iter()
        .map(Seg::build)
        .collect();
    let input = tmp("in.pcap");
    let handed = tmp("handed.pcap");
    let wire = tmp("wire.pcap");
    write_pcap(&input, &segs);
    let tso = "tx-tcp-segmentation,tx-checksum-ip-generic,tx-scatter-gather";
    let common = [
        "pcap",
        "switch",
        "--port",
        "p1",
        "--port",
        "p2",
        "--gro",
        "p1",
        "--flow",
        "prio 1 in_port p1 action output:p2",
        "--json",
    ];
    let mut a: Vec<&str> = common.to_vec();
    let inarg = format!("p1={}", input.display());
    let outarg = format!("p2={}", handed.display());
    let feat = format!("p2={tso}");
    a.extend([
        "--in",
        &inarg,
        "--out",
        &outarg,
        "--features",
        &feat,
        "--as-handed",
    ]);
    let out = sluice(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged = read_pcap(&handed);
    assert_eq!(
        merged.len(),
        1,
        "30 segments merged into one GSO packet for the TSO device"
    );
    let j = last_json(&out);
    assert_eq!(j["ports"]["p1"]["gro_merged_segments"], 29);

    // The same, written as the device would put it on the wire: the original segments.
    let outarg = format!("p2={}", wire.display());
    let mut a: Vec<&str> = common.to_vec();
    a.extend(["--in", &inarg, "--out", &outarg, "--features", &feat]);
    let out = sluice(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = read_pcap(&wire);
    assert_eq!(got.len(), segs.len());
    for (i, (g, s)) in got.iter().zip(&segs).enumerate() {
        assert_eq!(g, s, "segment {i} differs");
    }

    // A device without TSO: software GSO, counted.
    let mut a: Vec<&str> = common.to_vec();
    a.extend(["--in", &inarg, "--out", &outarg]);
    let out = sluice(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        read_pcap(&wire),
        segs,
        "software GSO gives back the segments too"
    );
    let j = last_json(&out);
    // The one merged packet, segmented in software once.
    assert_eq!(j["counters"]["soft_gso"], 1, "{j}");
    pcap_common::remove([input, handed, wire]);
}

#[test]
fn rules_decide_and_every_drop_is_counted() {
    let tcp: Vec<Vec<u8>> = stream(&Seg::tcp4(1, 100), 3, 100)
        .iter()
        .map(Seg::build)
        .collect();
    let udp = Seg::udp4(100, 1).build();
    let mut frames = tcp.clone();
    frames.push(udp);
    frames.push(vec![0u8; 20]); // a runt
    let input = tmp("rules-in.pcap");
    let output = tmp("rules-out.pcap");
    write_pcap(&input, &frames);
    let inarg = format!("p1={}", input.display());
    let outarg = format!("p2={}", output.display());
    let out = sluice(&[
        "pcap",
        "switch",
        "--port",
        "p1",
        "--port",
        "p2",
        "--in",
        &inarg,
        "--out",
        &outarg,
        "--flow",
        "prio 10 in_port p1 eth_type ipv4 ip_proto udp action drop",
        "--flow",
        "prio 5 in_port p1 eth_type ipv4 action push_vlan:802.1ad:100,output:p2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = last_json(&out);
    assert_eq!(j["ports"]["p1"]["rx_packets"], 5);
    assert_eq!(j["ports"]["p1"]["rx_dropped_by_rule"], 1);
    assert_eq!(
        j["ports"]["p1"]["rx_no_match"], 1,
        "the runt matches nothing"
    );
    let got = read_pcap(&output);
    assert_eq!(got.len(), 3);
    for (g, t) in got.iter().zip(&tcp) {
        assert_eq!(&g[12..16], &[0x88, 0xa8, 0x00, 100], "802.1ad tag pushed");
        assert_eq!(&g[..12], &t[..12]);
        assert_eq!(&g[16..], &t[12..]);
    }
    // Bad arguments get clear errors.
    let out = sluice(&["pcap", "switch", "--port", "p1", "--in", "p9=x.pcap"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no --port \"p9\""));
    let out = sluice(&[
        "pcap",
        "switch",
        "--port",
        "p1",
        "--flow",
        "prio 1 action output:nowhere",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nowhere"));
    pcap_common::remove([input, output]);
}
