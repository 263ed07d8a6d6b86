//! `sluice pcap gro` end to end: a generated capture of interleaved TCP flows, a UDP flow, an
//! ARP frame and a frame with a bad checksum; checks the merged frames, their order, full
//! checksums, `OUT.jsonl`, `--udp` and `--batch`.

mod pcap_common;
use pcap_common::{sluice, write_pcap};
use sluice_packet::verify::{verify_frame, Verdict};
use sluice_testkit::segments::*;
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    pcap_common::tmp("pcap-gro", name)
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    pcap_common::read_pcap_with(path, true)
}

fn jsonl(out: &Path) -> Vec<serde_json::Value> {
    let mut p = out.as_os_str().to_owned();
    p.push(".jsonl");
    std::fs::read_to_string(PathBuf::from(p))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn big(first: &Seg, total: usize) -> Vec<u8> {
    let mut s = first.clone();
    s.payload = payload_at(first.seq, total);
    s.build()
}

#[test]
fn coalesces_a_capture_in_order_with_full_checksums() {
    let input = tmp("in.pcap");
    let output = tmp("out.pcap");
    let a = Seg::tcp4(1000, 1448);
    let mut b = Seg::tcp6(9, 1000);
    b.sport = 7;
    let sa = stream(&a, 6, 1448);
    let sb = stream(&b, 4, 1000);
    let arp = {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend_from_slice(&[0; 28]);
        f
    };
    let mut bad = Seg::tcp4(0, 100);
    bad.sport = 99;
    let mut bad = bad.build();
    *bad.last_mut().unwrap() ^= 1;
    let udp: Vec<Vec<u8>> = (0..3).map(|n| Seg::udp4(500, n).build()).collect();
    let mut frames = vec![];
    for i in 0..6 {
        frames.push(sa[i].build());
        if i < 4 {
            frames.push(sb[i].build());
        }
        if i == 2 {
            frames.push(arp.clone());
            frames.push(bad.clone());
        }
    }
    frames.extend(udp.iter().cloned());
    write_pcap(&input, &frames);

    let o = sluice(&[
        "pcap",
        "gro",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = read_pcap(&output);
    let meta = jsonl(&output);
    assert_eq!(got.len(), meta.len());
    // ARP, the bad frame and UDP (off by default) leave on arrival; the two TCP flows at the
    // batch end, oldest first.
    assert_eq!(got.len(), 2 + 3 + 2);
    assert!(got[0] == arp);
    assert!(got[1] == bad, "bad checksum passes unchanged");
    assert!(got[2..5] == udp[..]);
    assert!(got[5] == big(&a, 6 * 1448), "flow a merged");
    assert!(got[6] == big(&b, 4 * 1000), "flow b merged");
    assert_eq!(meta[5]["segments"], 6);
    assert_eq!(meta[5]["segment_size"], 1448);
    assert_eq!(meta[5]["gso_type"], "tcpv4");
    assert_eq!(meta[6]["gso_type"], "tcpv6");
    assert_eq!(meta[6]["segments"], 4);
    assert_eq!(meta[0]["gso_type"], serde_json::Value::Null);
    assert_eq!(meta[0]["segments"], 1);
    for f in &got[5..7] {
        let v = verify_frame(f, &sluice_wire::parse(f).unwrap());
        assert_eq!(v.l4, Verdict::Good);
        assert_ne!(v.ip, Verdict::Bad);
    }
    let summary = String::from_utf8_lossy(&o.stderr);
    assert!(summary.contains("15 frames in"), "{summary}");
    assert!(summary.contains("7 packets out"), "{summary}");

    // --udp merges the datagrams; --batch 2 cuts the TCP flows at every second frame.
    let o = sluice(&[
        "pcap",
        "gro",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--udp",
    ]);
    assert!(o.status.success());
    let meta = jsonl(&output);
    let last = meta.last().unwrap();
    assert_eq!(meta.len(), 2 + 3);
    assert_eq!(last["gso_type"], "udp_l4");
    assert_eq!(last["segments"], 3);
    assert_eq!(last["segment_size"], 500);
    let got = read_pcap(&output);
    let f = got.last().unwrap();
    assert_eq!(
        verify_frame(f, &sluice_wire::parse(f).unwrap()).l4,
        Verdict::Good
    );

    let o = sluice(&[
        "pcap",
        "gro",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--batch",
        "1",
    ]);
    assert!(o.status.success());
    let meta = jsonl(&output);
    assert!(
        meta.iter().all(|m| m["segments"] == 1),
        "batch 1 merges nothing"
    );
    assert_eq!(meta.len(), frames.len());
    let o = sluice(&[
        "pcap",
        "gro",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--batch",
        "0",
    ]);
    assert!(!o.status.success());
    pcap_common::remove([input, output]);
}
