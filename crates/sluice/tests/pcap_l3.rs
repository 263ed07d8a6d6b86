//! `sluice pcap gso`, `pcap gro` and `pcap tx` on raw-IP captures (TUN traffic, link type RAW):
//! the same packets without their Ethernet header must give the same output without its
//! Ethernet header, in a capture of the input's link type.

mod pcap_common;
use pcap_common::{last_json, sluice, write_pcap};
use std::path::{Path, PathBuf};

const ETH: usize = 14;
const LINKTYPE_RAW: u32 = 101;

fn tmp(name: &str) -> PathBuf {
    pcap_common::tmp("pcap-l3", name)
}

/// `frames` as a classic pcap of link type `link`.
fn write_with_link(path: &Path, frames: &[Vec<u8>], link: u32) {
    write_pcap(path, frames);
    let mut b = std::fs::read(path).expect("read back");
    b[20..24].copy_from_slice(&link.to_le_bytes());
    std::fs::write(path, b).expect("rewrite");
}

/// The link type in a classic pcap header of either byte order.
fn link_of(path: &Path) -> u32 {
    let b = std::fs::read(path).expect("read");
    let field: [u8; 4] = b[20..24].try_into().expect("4 bytes");
    if b[0] == 0xa1 {
        u32::from_be_bytes(field)
    } else {
        u32::from_le_bytes(field)
    }
}

fn frames(path: &Path) -> Vec<Vec<u8>> {
    pcap_common::read_pcap_with(path, false)
}

/// Ethernet + IPv4 (DF) + TCP (ACK|PSH, seq `seq`) + `payload` bytes.
fn tcp4(seq: u32, payload: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = 40 + payload;
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0x40, 0]);
    f.extend_from_slice(&[64, 6, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2]);
    f.extend_from_slice(&[0x9c, 0x40, 0, 80]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend((0..payload).map(|i| (i * 13) as u8));
    f
}

/// Ethernet + IPv6 + UDP + `payload` bytes.
fn udp6(payload: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
    let len = 8 + payload;
    f.extend_from_slice(&[0x60, 0, 0, 0, (len >> 8) as u8, len as u8, 17, 64]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[0x13, 0x88, 0x13, 0x89, (len >> 8) as u8, len as u8, 0, 0]);
    f.extend((0..payload).map(|i| (i * 7) as u8));
    f
}

fn strip(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    frames.iter().map(|f| f[ETH..].to_vec()).collect()
}

fn run_ok(args: &[&str]) {
    let out = sluice(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
}

#[test]
fn gso_and_gro_of_raw_ip_match_the_ethernet_path() {
    let eth_in = vec![tcp4(1, 9000), udp6(3000), tcp4(9001, 100)];
    let (e_in, r_in) = (tmp("eth-in.pcap"), tmp("raw-in.pcap"));
    write_with_link(&e_in, &eth_in, 1);
    write_with_link(&r_in, &strip(&eth_in), LINKTYPE_RAW);

    // GSO: every super-packet cut at 1000 bytes, checksums computed; the same segments.
    let (e_seg, r_seg) = (tmp("eth-seg.pcap"), tmp("raw-seg.pcap"));
    for (i, o) in [(&e_in, &e_seg), (&r_in, &r_seg)] {
        run_ok(&[
            "pcap",
            "gso",
            i.to_str().unwrap(),
            o.to_str().unwrap(),
            "--segment-size",
            "1000",
        ]);
    }
    let (eth_segs, raw_segs) = (frames(&e_seg), frames(&r_seg));
    assert_eq!(eth_segs.len(), 9 + 3 + 1, "9000 / 1000, 3000 / 1000, 1");
    assert_eq!(raw_segs, strip(&eth_segs));
    assert_eq!(link_of(&r_seg), LINKTYPE_RAW);
    assert_eq!(link_of(&e_seg), 1);

    // GRO of those segments: the TCP ones merge back; the same packets again.
    let (e_gro, r_gro) = (tmp("eth-gro.pcap"), tmp("raw-gro.pcap"));
    for (i, o) in [(&e_seg, &e_gro), (&r_seg, &r_gro)] {
        run_ok(&["pcap", "gro", i.to_str().unwrap(), o.to_str().unwrap()]);
    }
    let (eth_gro, raw_gro) = (frames(&e_gro), frames(&r_gro));
    assert!(
        eth_gro.len() < eth_segs.len(),
        "nothing merged: {}",
        eth_gro.len()
    );
    assert_eq!(raw_gro, strip(&eth_gro));
    assert_eq!(link_of(&r_gro), LINKTYPE_RAW);
    let jsonl = |p: &Path| std::fs::read_to_string(format!("{}.jsonl", p.display())).unwrap();
    assert_eq!(jsonl(&r_gro), jsonl(&e_gro));
    pcap_common::remove([e_in, r_in, e_seg, r_seg, e_gro, r_gro]);
}

#[test]
fn tx_of_raw_ip_matches_the_ethernet_path() {
    let eth_in = vec![tcp4(1, 5000), udp6(700), tcp4(5001, 10)];
    let (e_in, r_in) = (tmp("tx-eth-in.pcap"), tmp("tx-raw-in.pcap"));
    write_with_link(&e_in, &eth_in, 1);
    write_with_link(&r_in, &strip(&eth_in), LINKTYPE_RAW);
    // The first packet is a TSO request (segment size 1000), the others plain; a device with
    // no offloads: software GSO and checksums, the same bytes either way.
    let spec = tmp("tx-spec.jsonl");
    std::fs::write(&spec, "{\"gso_type\": \"tcpv4\", \"gso_size\": 1000}\n").unwrap();
    let (e_out, r_out) = (tmp("tx-eth-out.pcap"), tmp("tx-raw-out.pcap"));
    for (i, o) in [(&e_in, &e_out), (&r_in, &r_out)] {
        run_ok(&[
            "pcap",
            "tx",
            i.to_str().unwrap(),
            o.to_str().unwrap(),
            "--features",
            "none",
            "--spec",
            spec.to_str().unwrap(),
        ]);
    }
    let (eth_out, raw_out) = (frames(&e_out), frames(&r_out));
    assert_eq!(eth_out.len(), 5 + 1 + 1);
    assert_eq!(raw_out, strip(&eth_out));
    assert_eq!(link_of(&r_out), LINKTYPE_RAW);
    pcap_common::remove([e_in, r_in, spec, e_out, r_out]);
}

/// `sluice pcap switch` with L3 ports (raw-IP captures, `--l3`): GRO on the ingress and
/// software GSO on the egress give, from a raw-IP capture into an L3 port and from an Ethernet
/// capture into an L3 port, the same IP packets the all-Ethernet run gives less their Ethernet
/// header, in RAW captures; an L3 packet sent to an Ethernet port is a counted drop; `--l3` on
/// an Ethernet capture is an error naming it.
#[test]
fn switch_with_l3_ports() {
    use sluice_testkit::segments::{stream, Seg};
    let eth: Vec<Vec<u8>> = stream(&Seg::tcp4(5000, 1448), 12, 1448)
        .iter()
        .map(Seg::build)
        .collect();
    let (eth_in, raw_in) = (tmp("sw-eth-in.pcap"), tmp("sw-raw-in.pcap"));
    write_pcap(&eth_in, &eth);
    write_with_link(&raw_in, &strip(&eth), LINKTYPE_RAW);
    let run = |input: &Path, out: &Path, l3: &[&str]| -> serde_json::Value {
        let (i, o) = (
            format!("p1={}", input.display()),
            format!("p2={}", out.display()),
        );
        let mut args = vec![
            "pcap",
            "switch",
            "--port",
            "p1",
            "--port",
            "p2",
            "--gro",
            "p1",
            "--in",
            &i,
            "--out",
            &o,
            "--flow",
            "prio 1 in_port p1 action output:p2",
            "--json",
        ];
        for p in l3 {
            args.extend(["--l3", p]);
        }
        let out = sluice(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        last_json(&out)
    };
    let ethernet = tmp("sw-eth-out.pcap");
    run(&eth_in, &ethernet, &[]);
    let want = strip(&frames(&ethernet));
    assert_eq!(
        want.len(),
        12,
        "the all-Ethernet run gives the segments back"
    );
    assert_eq!(want, strip(&eth));

    // Raw IP in, L3 out; Ethernet in, L3 out: the same IP packets, in RAW captures.
    for (input, name) in [(&raw_in, "raw-to-l3"), (&eth_in, "eth-to-l3")] {
        let out = tmp(&format!("sw-{name}.pcap"));
        let j = run(input, &out, &["p2"]);
        assert_eq!(link_of(&out), LINKTYPE_RAW, "{name}");
        assert_eq!(frames(&out), want, "{name}");
        assert!(
            j["ports"]["p1"]["gro_merged_segments"].as_u64() > Some(0),
            "{name}: {j}"
        );
        pcap_common::remove([out]);
    }

    // Raw IP into an Ethernet port: no MAC addresses to send with, dropped and counted.
    let dropped = tmp("sw-l3-to-eth.pcap");
    let j = run(&raw_in, &dropped, &[]);
    assert!(frames(&dropped).is_empty());
    assert!(
        j["ports"]["p2"]["tx_prepare_drops"].as_u64() > Some(0),
        "{j}"
    );
    assert!(j["counters"]["dp_l3_to_l2_drops"].as_u64() > Some(0), "{j}");

    // --l3 on an Ethernet capture: refused, named.
    let bad = sluice(&[
        "pcap",
        "switch",
        "--port",
        "p1",
        "--l3",
        "p1",
        "--in",
        &format!("p1={}", eth_in.display()),
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--l3 p1: its input capture is Ethernet"),
        "{err}"
    );
    pcap_common::remove([eth_in, raw_in, ethernet, dropped]);
}
