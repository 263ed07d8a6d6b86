//! `sluice pcap gso` end to end: a generated capture with mixed packets, flags and `--spec`.

mod pcap_common;
use pcap_common::{sluice, write_pcap};
use sluice_packet::verify::{verify_frame, Verdict};
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    pcap_common::tmp("pcap-gso", name)
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    pcap_common::read_pcap_with(path, false)
}

fn ipv4_frame(proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = 20 + l4.len();
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0x10, 0, 0x40, 0]);
    f.extend_from_slice(&[64, proto, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2]);
    f.extend_from_slice(l4);
    f
}

fn tcp(payload: usize) -> Vec<u8> {
    let mut t = vec![
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x19, 0xff, 0xff, 0xde, 0xad, 0, 0,
    ];
    t.extend((0..payload).map(|i| i as u8));
    t
}

fn udp(payload: usize) -> Vec<u8> {
    let len = 8 + payload;
    let mut u = vec![
        0x9c,
        0x40,
        0x13,
        0x88,
        (len >> 8) as u8,
        len as u8,
        0xbe,
        0xef,
    ];
    u.extend((0..payload).map(|i| (i * 7) as u8));
    u
}

fn all_good(frames: &[Vec<u8>]) {
    for (i, f) in frames.iter().enumerate() {
        let l = sluice_wire::parse(f).unwrap();
        let v = verify_frame(f, &l);
        assert_eq!(v.ip, Verdict::Good, "frame {i}");
        if !l.outer.is_fragment {
            assert_eq!(v.l4, Verdict::Good, "frame {i}");
        }
    }
}

#[test]
fn segments_with_flags_and_spec() {
    let input = tmp("in.pcap");
    let output = tmp("out.pcap");
    let spec = tmp("spec.jsonl");
    let arp = {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend_from_slice(&[0; 28]);
        f
    };
    let frames = vec![
        ipv4_frame(6, &tcp(5000)),
        ipv4_frame(17, &udp(3000)),
        arp.clone(),
        ipv4_frame(6, &tcp(100)),
    ];
    write_pcap(&input, &frames);

    // Flags only: TCP 5000/1000 = 5, USO 3000/1000 = 3, ARP copied, small TCP 1.
    let o = sluice(&[
        "pcap",
        "gso",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--segment-size",
        "1000",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = read_pcap(&output);
    assert_eq!(got.len(), 5 + 3 + 1 + 1);
    assert_eq!(got[8], arp);
    let mut ip_frames = got.clone();
    ip_frames.remove(8);
    all_good(&ip_frames);
    let summary = String::from_utf8_lossy(&o.stderr);
    assert!(summary.contains("4 frames in"), "{summary}");

    // Spec: TCP with 2000, UDP as UFO with 1480, ARP default, last one "none".
    std::fs::write(
        &spec,
        "{\"gso_type\": \"tcpv4\", \"gso_size\": 2000, \"extra\": 1}\n{\"gso_type\": \"udp\", \"gso_size\": 1480}\n{}\n{\"gso_type\": \"none\"}\n",
    )
    .unwrap();
    let o = sluice(&[
        "pcap",
        "gso",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--segment-size",
        "1000",
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = read_pcap(&output);
    // 3 TCP + 3 fragments (3008 / 1480) + ARP + the pass-through.
    assert_eq!(got.len(), 3 + 3 + 1 + 1);
    let last = got.last().unwrap();
    assert_eq!(last.len(), frames[3].len());
    all_good(&[got[0].clone(), got[7].clone()]);

    // A bad spec line names its line number.
    std::fs::write(&spec, "{}\n{\"gso_type\": \"tcp\"}\n").unwrap();
    let o = sluice(&[
        "pcap",
        "gso",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--segment-size",
        "1000",
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("spec line 2"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    pcap_common::remove([input, output, spec]);
}
