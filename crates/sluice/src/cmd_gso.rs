//! `sluice pcap gso`: segment every frame of a capture in software, as for a device with no
//! offloads, and write every segment (with every checksum computed from scratch) in order.

use crate::inspect::link_config;
use crate::pcap_link::LinkWriter;
use crate::spec;
use anyhow::{Context, Result};
use sluice_offload::gso::{self, GsoOutput, GsoParams, OuterCsum};
use sluice_packet::GsoType;
use sluice_pcap::CaptureReader;
use sluice_wire::{ip_proto, L3Kind, Layout, ParseConfig};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How UDP super-packets are segmented.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpMode {
    /// UDP L4 segmentation: every segment is a UDP datagram.
    Uso,
    /// IP fragmentation of one datagram (IPv4 fragments, IPv6 Fragment header).
    Ufo,
}

/// Arguments of `sluice pcap gso`.
///
/// Ethernet captures and raw-IP ones (TUN traffic: link type RAW, IPv4, IPv6) alike; the
/// output has the input's link type.
///
/// Without `--spec`, every TCP frame is segmented as TCPv4/TCPv6 (by its innermost IP version)
/// and every UDP frame as USO or UFO (`--udp`), with `--segment-size` payload bytes per segment
/// and outer tunnel UDP checksums computed when the input's is non-zero. Frames with another L4
/// (ARP, ICMP, …) are copied unchanged.
///
/// `--spec FILE` gives one JSON object per line for the frame of the same number, overriding
/// the flags: `{"gso_type": "tcpv4"|"tcpv6"|"udp_l4"|"udp"|"none", "gso_size": N, "ecn": bool,
/// "outer_csum": bool}`; missing keys take the flags' values, unknown keys are ignored, frames
/// beyond the last line use the flags. `gso_type` "none" passes the frame through unsegmented but
/// with its TCP/UDP and IP checksums (outer and inner) recomputed, as a device with no checksum
/// offload would need it.
///
/// Frames that cannot be segmented are dropped and counted by kind; a one-line summary goes to
/// stderr.
#[derive(clap::Args, Debug)]
#[command(after_long_help = HELP)]
pub struct Args {
    /// The input capture (pcap or pcapng).
    input: PathBuf,
    /// The output capture (pcap).
    output: PathBuf,
    /// Payload bytes per segment (L4 payload for TCP and USO, IP payload per fragment for UFO).
    #[arg(long = "segment-size", value_name = "N")]
    segment_size: u16,
    /// How UDP frames are segmented.
    #[arg(long, value_enum, default_value = "uso")]
    udp: UdpMode,
    /// Per-frame overrides, one JSON object per line.
    #[arg(long, value_name = "IN.jsonl")]
    spec: Option<PathBuf>,
}

const HELP: &str = "\
Without --spec, TCP frames are segmented as TCPv4/TCPv6 (by their innermost IP version) and UDP
frames as USO or UFO (--udp); tunnel (VXLAN/Geneve) outer UDP checksums are computed when the
input's is non-zero, else left zero. Frames with another L4 (ARP, ICMP, ...) and frames that do
not parse are copied unchanged.
Every checksum of every output is computed from scratch: the input's are not trusted.

--spec FILE: one JSON object per line, for the frame of the same number, overriding the flags:
  {\"gso_type\": \"tcpv4\"|\"tcpv6\"|\"udp_l4\"|\"udp\"|\"none\", \"gso_size\": N,
   \"ecn\": bool, \"outer_csum\": bool}
Missing keys take the flags' values, unknown keys are ignored, frames after the last line use the
flags. \"none\" passes the frame through unsegmented with its IP and TCP/UDP checksums (outer and
inner) recomputed. A malformed line is an error naming its line number.

Frames that cannot be segmented are dropped and counted by kind; a one-line summary (frames in,
segments out, passed through, errors by kind) goes to stderr.";

/// One spec line, after validation.
#[derive(Debug, Clone, Copy, Default)]
struct SpecLine {
    gso_type: Option<GsoType>,
    gso_size: Option<u16>,
    ecn: Option<bool>,
    outer_csum: Option<bool>,
}

fn parse_spec_line(
    obj: &serde_json::Map<String, serde_json::Value>,
    no: usize,
) -> Result<SpecLine> {
    let mut s = SpecLine {
        gso_type: spec::gso_type(obj, no)?,
        gso_size: spec::gso_size(obj, no)?,
        ..SpecLine::default()
    };
    for (key, slot) in [("ecn", &mut s.ecn), ("outer_csum", &mut s.outer_csum)] {
        if let Some(b) = obj.get(key) {
            *slot = Some(b.as_bool().with_context(|| {
                format!("spec line {no}: {key} must be true or false, not {b}")
            })?);
        }
    }
    Ok(s)
}

/// The GSO type the flags imply for a frame, from its innermost L3/L4.
fn infer_type(layout: &Layout, udp: UdpMode) -> GsoType {
    let h = layout.innermost();
    match (h.l3_kind, h.l4_proto) {
        (Some(L3Kind::Ipv4), Some(ip_proto::TCP)) => GsoType::TcpV4,
        (Some(L3Kind::Ipv6), Some(ip_proto::TCP)) => GsoType::TcpV6,
        (Some(_), Some(ip_proto::UDP)) => match udp {
            UdpMode::Uso => GsoType::UdpL4,
            UdpMode::Ufo => GsoType::Udp,
        },
        _ => GsoType::None,
    }
}

/// Runs the command.
pub fn run(args: Args) -> Result<()> {
    let spec = match &args.spec {
        Some(p) => spec::read(p, false, parse_spec_line)?,
        None => Vec::new(),
    };
    let mut reader = CaptureReader::open(&args.input)?;
    let mut writer = LinkWriter::new(&args.output);
    let mut out = GsoOutput::new();
    let (mut frames, mut segments, mut passed) = (0u64, 0u64, 0u64);
    let mut errors: BTreeMap<&'static str, u64> = BTreeMap::new();
    while let Some(frame) = reader.next_frame() {
        let frame = frame?;
        let idx = frames as usize;
        frames += 1;
        let data = &frame.data;
        let line = spec.get(idx).copied().unwrap_or_default();
        let (no, link, ts) = (frames, frame.linktype, frame.timestamp);
        // Ethernet, or an IP packet of a raw-IP capture (TUN traffic): segmented alike.
        let parsed = link_config(link, &ParseConfig::DEFAULT)
            .and_then(|cfg| sluice_wire::parse_with(data, &cfg).ok());
        let Some(layout) = parsed else {
            // Not parseable (or another link type): nothing to segment; copy it as it is.
            writer.write(no, link, ts, data)?;
            passed += 1;
            continue;
        };
        let inferred = infer_type(&layout, args.udp);
        let ty = line.gso_type.unwrap_or(inferred);
        let mut params = GsoParams::new(ty, line.gso_size.unwrap_or(args.segment_size));
        params.ecn = line.ecn.unwrap_or(false);
        params.outer_csum = match line.outer_csum {
            Some(true) => OuterCsum::Full,
            Some(false) => OuterCsum::Zero,
            None => OuterCsum::AsInput,
        };
        if ty == GsoType::None {
            // Pass through with checksums recomputed: a single segment as large as the frame.
            let as_type = infer_type(&layout, UdpMode::Uso);
            if as_type == GsoType::None {
                writer.write(no, link, ts, data)?;
                passed += 1;
                continue;
            }
            params.gso_type = as_type;
            params.segment_size = u16::MAX;
        }
        out.clear();
        match gso::segment(data, &layout, &params, &mut out) {
            Ok(n) => {
                segments += n as u64;
                for f in out.frames() {
                    writer.write(no, link, ts, f)?;
                }
            }
            Err(e) => *errors.entry(e.kind()).or_default() += 1,
        }
    }
    writer.finish()?;
    let errs: Vec<String> = errors.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!(
        "sluice pcap gso: {frames} frames in, {segments} segments out, {passed} passed through, {} errors{}{}",
        errors.values().sum::<u64>(),
        if errs.is_empty() { "" } else { ": " },
        errs.join(" ")
    );
    Ok(())
}
