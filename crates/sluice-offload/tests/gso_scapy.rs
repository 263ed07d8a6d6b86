//! GRE tunnels against an independent oracle (scapy). The kernel cannot be handed a GRE GSO
//! packet through a TAP (`virtio_net_hdr` has no GRE GSO type), so for GRE with and without
//! checksum, key and sequence number, over IPv4 and IPv6, carrying TCPv4, TCPv6 and USO, Sluice's
//! segments are written to a capture and scapy (its own dissectors and checksum code) checks:
//! every IPv4 / TCP / UDP / GRE checksum equals scapy's recomputation, lengths are consistent,
//! TCP sequence numbers advance by the payload, the GRE sequence number is the super-packet's on
//! every segment (as Linux's `gre_gso_segment` leaves it), and the payloads reassemble to the
//! original. Needs python3 with scapy (installed by `scripts/test`); fails, never skips, without.

#[path = "gso_build.rs"]
mod build;

use build::{build, pattern, Ip, Seed, Spec, Tun, L4};
use sluice_offload::gso::{segment, GsoOutput, GsoParams};
use sluice_packet::GsoType;
use std::path::Path;
use std::process::Command;

const CHECKER: &str = r#"
import sys
from scapy.all import rdpcap, Ether, IP, IPv6, TCP, UDP, GRE, Raw

def recomputed(pkt):
    p = pkt.copy()
    for layer in (IP, IPv6, TCP, UDP):
        l = p
        while l:
            if isinstance(l, IPv6) and layer is IPv6:
                del l.plen
            elif isinstance(l, layer) and layer is not IPv6:
                if layer is IP:
                    del l.chksum
                    del l.len
                else:
                    del l.chksum
                    if layer is UDP:
                        del l.len
            l = l.payload if l.payload else None
    l = p
    while l:
        if isinstance(l, GRE) and l.chksum_present:
            del l.chksum
        l = l.payload if l.payload else None
    return Ether(bytes(p))

def fields(pkt):
    out = []
    l = pkt
    while l:
        for f in ("chksum", "len"):
            if isinstance(l, (IP, TCP, UDP)) and f in l.fields:
                out.append((l.name, f, l.fields[f]))
        if isinstance(l, IPv6):
            out.append(("IPv6", "plen", l.plen))
        if isinstance(l, GRE) and l.chksum_present:
            out.append(("GRE", "chksum", l.chksum))
        l = l.payload if l.payload else None
    return out

def check(path):
  pkts = rdpcap(path)
  orig, segs = pkts[0], pkts[1:]
  errors = []
  inner_l4 = lambda p: [l for l in p.iterpayloads() if isinstance(l, (TCP, UDP))][-1]
  o4 = inner_l4(orig)
  want = bytes(o4.payload)
  data = b""
  for i, s in enumerate(segs):
      r = recomputed(s)
      if fields(s) != fields(r):
          errors.append(f"seg {i}: fields {fields(s)} != scapy {fields(r)}")
      g = s[GRE]
      if g.seqnum_present and g.sequence_number != orig[GRE].sequence_number:
          errors.append(f"seg {i}: GRE seq {g.sequence_number}")
      if g.key_present and g.key != orig[GRE].key:
          errors.append(f"seg {i}: GRE key {g.key}")
      l4 = inner_l4(s)
      if isinstance(l4, TCP) and l4.seq != (o4.seq + len(data)) % 2**32:
          errors.append(f"seg {i}: tcp seq {l4.seq}")
      data += bytes(l4.payload)
  if data != want:
      errors.append(f"reassembled {len(data)} bytes != {len(want)}")
  return "; ".join(errors) if errors else "OK"

for path in sys.argv[1:]:
    print(path, check(path))

"#;

/// Writes `frames` as an Ethernet pcap (pcap-file's writer; snap length 256 KiB) for scapy.
fn write_pcap(path: &Path, frames: &[&[u8]]) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        snaplen: 262_144,
        ..PcapHeader::default()
    };
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = PcapWriter::with_header(file, header).unwrap();
    for f in frames {
        let len = u32::try_from(f.len()).unwrap();
        w.write_packet(&PcapPacket::new(std::time::Duration::ZERO, len, f))
            .unwrap();
    }
    std::io::Write::flush(&mut w.into_writer()).unwrap();
}

/// A directory removed when dropped, so a failing test (scapy missing, a wrong verdict) leaves
/// nothing in the temporary directory either.
struct ScratchDir(std::path::PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn gre_against_scapy() {
    let scratch =
        ScratchDir(std::env::temp_dir().join(format!("sluice-gso-scapy-{}", std::process::id())));
    let dir = &scratch.0;
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("check.py");
    std::fs::write(&script, CHECKER).unwrap();
    let mut failures = Vec::new();
    let mut cases = Vec::new();
    let mut n = 0;
    for csum in [false, true] {
        for key in [false, true] {
            for seq in [false, true] {
                for ov6 in [false, true] {
                    for (inner, l4, ty) in [
                        (
                            Ip::V4,
                            L4::Tcp {
                                flags: 0x19,
                                opt_len: 12,
                                seq: 0xffff_ff00,
                            },
                            GsoType::TcpV4,
                        ),
                        (
                            Ip::V6,
                            L4::Tcp {
                                flags: 0x10,
                                opt_len: 0,
                                seq: 5,
                            },
                            GsoType::TcpV6,
                        ),
                        (Ip::V4, L4::Udp, GsoType::UdpL4),
                    ] {
                        let spec = Spec {
                            vlans: vec![0x8100],
                            ip: if ov6 { Ip::V6 } else { Ip::V4 },
                            tunnel: Some((Tun::Gre { csum, key, seq }, vec![0x8100], inner)),
                            l4,
                            payload: pattern(3000 + n, n as u8),
                        };
                        let (frame, _) = build(&spec, Seed::Garbage);
                        let layout = sluice_wire::parse(&frame).unwrap();
                        let mut out = GsoOutput::new();
                        segment(&frame, &layout, &GsoParams::new(ty, 1000), &mut out).unwrap();
                        // The original, with its checksums fixed, is the reference for scapy:
                        // run it through once as a single segment.
                        let mut orig = GsoOutput::new();
                        segment(&frame, &layout, &GsoParams::new(ty, u16::MAX), &mut orig).unwrap();
                        let mut frames: Vec<&[u8]> = vec![orig.frame(0).unwrap()];
                        frames.extend(out.frames());
                        let pcap = dir.join(format!("case{n}.pcap"));
                        write_pcap(&pcap, &frames);
                        cases.push((
                            pcap,
                            format!("gre csum={csum} key={key} seq={seq} outer v6={ov6} {ty:?}"),
                        ));
                        n += 1;
                    }
                }
            }
        }
    }
    // One python run for every case (importing scapy takes seconds).
    let o = Command::new("python3")
        .arg(&script)
        .args(cases.iter().map(|(p, _)| p))
        .output()
        .expect("python3 runs (scripts/test installs python3 and scapy)");
    if !o.status.success() {
        panic!(
            "the scapy checker failed (is scapy installed?): {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), cases.len(), "one verdict per case: {text}");
    for ((path, name), line) in cases.iter().zip(&lines) {
        let verdict = line.strip_prefix(path.to_str().unwrap()).map(str::trim);
        if verdict != Some("OK") {
            failures.push(format!("{name}: {line}"));
        }
    }
    assert_eq!(n, 48);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
