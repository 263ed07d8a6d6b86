//! `sluice pcap inspect` as a user runs it: the shipped sample, pcapng input, non-Ethernet link
//! types, damaged files.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use serde_json::Value;
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples/mixed.pcap")
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sluice-inspect-{}-{name}", std::process::id()))
}

fn inspect(path: &Path, json: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["pcap", "inspect"]).arg(path);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("run sluice")
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn read_pcap(path: &Path) -> Vec<(std::time::Duration, Vec<u8>)> {
    let mut r = PcapReader::new(std::fs::File::open(path).expect("open")).expect("pcap");
    let mut frames = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.expect("record");
        frames.push((p.timestamp, p.data.into_owned()));
    }
    frames
}

#[test]
fn sample_capture_reports_every_frame_and_the_damaged_ones() {
    let out = inspect(&sample(), true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 40);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["frame"], i as u64 + 1);
        for key in [
            "len", "layers", "vlans", "l3", "l4", "offsets", "tunnel", "csum", "error",
        ] {
            assert!(l.get(key).is_some(), "frame {} lacks {key}", i + 1);
        }
    }
    // The sample ends with four damaged frames (tests/scapy/corpus.py --malformed 4).
    let errors: Vec<(&str, u64)> = lines[36..]
        .iter()
        .map(|l| {
            (
                l["error"]["layer"].as_str().expect("layer"),
                l["error"]["offset"].as_u64().expect("offset"),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [("ipv4", 22), ("ipv4", 22), ("ipv4", 22), ("geneve", 42)]
    );
    assert!(lines[..36].iter().all(|l| l["error"].is_null()));
    // What was parsed before the error is still printed.
    assert_eq!(
        lines[36]["layers"],
        serde_json::json!(["eth", "vlan", "vlan"])
    );
    assert_eq!(lines[36]["vlans"][0]["tpid"], 0x88a8);
    assert_eq!(lines[39]["l4"], "udp");

    let human = inspect(&sample(), false);
    assert!(human.status.success());
    let text = String::from_utf8_lossy(&human.stdout);
    assert_eq!(text.lines().count(), 40);
    assert!(text
        .lines()
        .nth(39)
        .expect("line 40")
        .contains("!! geneve at 42"));
}

#[test]
fn pcapng_gives_the_same_report_as_pcap() {
    let frames = read_pcap(&sample());
    let path = tmp("sample.pcapng");
    {
        let file = std::fs::File::create(&path).expect("create");
        let mut w = PcapNgWriter::new(file).expect("pcapng writer");
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535))
            .expect("idb");
        for (ts, data) in &frames {
            let epb = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: *ts,
                original_len: data.len() as u32,
                data: Cow::Borrowed(data),
                options: vec![],
            };
            w.write_pcapng_block(epb).expect("epb");
        }
    }
    let strip_ts = |mut v: Value| {
        v.as_object_mut().expect("object").remove("ts");
        v
    };
    let ng: Vec<Value> = json_lines(&inspect(&path, true))
        .into_iter()
        .map(strip_ts)
        .collect();
    let classic: Vec<Value> = json_lines(&inspect(&sample(), true))
        .into_iter()
        .map(strip_ts)
        .collect();
    let _ = std::fs::remove_file(&path);
    assert_eq!(ng.len(), 40);
    assert_eq!(ng, classic);
}

/// Writes a classic pcap of link type `datalink` holding `packets`.
fn write_capture(path: &Path, datalink: DataLink, packets: &[&[u8]]) {
    let file = std::fs::File::create(path).expect("create");
    let header = PcapHeader {
        datalink,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(file, header).expect("writer");
    for p in packets {
        w.write_packet(&PcapPacket::new(
            std::time::Duration::ZERO,
            p.len() as u32,
            p,
        ))
        .expect("write");
    }
}

/// An IPv4/UDP and an IPv6/TCP packet with correct checksums, for the raw-IP link types.
fn raw_ip_packets() -> (Vec<u8>, Vec<u8>) {
    use sluice_testkit::segments::Seg;
    (
        Seg::udp4(100, 0).build()[14..].to_vec(),
        Seg::tcp6(7, 100).build()[14..].to_vec(),
    )
}

#[test]
fn raw_ip_link_types_parse_from_the_ip_header() {
    let (v4, v6) = raw_ip_packets();
    for (name, datalink) in [
        ("raw", DataLink::RAW),
        ("ipv4", DataLink::IPV4),
        ("ipv6", DataLink::IPV6),
    ] {
        let path = tmp(&format!("{name}.pcap"));
        write_capture(&path, datalink, &[&v4, &v6]);
        let out = inspect(&path, true);
        let human = inspect(&path, false);
        let _ = std::fs::remove_file(&path);
        assert!(out.status.success(), "{name}");
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 2, "{name}");
        assert!(
            lines.iter().all(|l| l["error"].is_null()),
            "{name}: {lines:?}"
        );
        assert_eq!(lines[0]["layers"], serde_json::json!(["ipv4", "udp"]));
        assert_eq!(lines[0]["offsets"]["l3"], 0);
        assert_eq!(lines[0]["offsets"]["l4"], 20);
        assert_eq!(lines[0]["csum"]["ip"], "good");
        assert_eq!(lines[0]["csum"]["l4"], "good");
        assert_eq!(lines[1]["layers"], serde_json::json!(["ipv6", "tcp"]));
        assert_eq!(lines[1]["offsets"]["l4"], 40);
        assert_eq!(lines[1]["csum"]["l4"], "good");
        let text = String::from_utf8_lossy(&human.stdout);
        assert!(
            text.contains("ipv4/udp") && text.contains("ipv6/tcp"),
            "{text}"
        );
    }
}

#[test]
fn other_link_types_are_reported_not_skipped() {
    let path = tmp("sll.pcap");
    write_capture(&path, DataLink::LINUX_SLL, &[&[0u8; 40]]);
    let out = inspect(&path, true);
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success());
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["error"]["layer"], "link");
    let reason = lines[0]["error"]["reason"].as_str().expect("reason");
    assert!(reason.contains("neither Ethernet nor raw IP"), "{reason}");
    assert_eq!(lines[0]["layers"], serde_json::json!([]));
}

#[test]
fn damaged_files_fail_with_context() {
    // A capture cut in the middle of a record: the frames before it are printed, then an error.
    let bytes = std::fs::read(sample()).expect("sample");
    let path = tmp("cut.pcap");
    std::fs::write(&path, &bytes[..bytes.len() - 10]).expect("write");
    let out = inspect(&path, true);
    assert!(!out.status.success());
    assert_eq!(json_lines(&out).len(), 39);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("frame 40"), "{err}");

    std::fs::write(&path, b"definitely not a capture").expect("write");
    let out = inspect(&path, true);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pcap or pcapng file"));
    let _ = std::fs::remove_file(&path);

    let out = inspect(Path::new("/nonexistent/x.pcap"), false);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open capture"));
}
