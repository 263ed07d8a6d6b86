//! `sluice pcap tx`: run every frame of a capture through transmit preparation for a device with
//! exactly the given features, and write what would go on the wire.
//!
//! Each frame is parsed, given the offload state of its `--spec` line, and prepared by
//! `sluice_offload::tx::tx_prepare`. The frames handed to the device then go through a model of
//! a device doing its part (`emulate_device`: tag insertion, segmentation, checksum fill), so
//! the output is the wire; `--as-handed` writes the frames as handed to the device instead
//! (partial checksums still holding the pseudo-header sum, GSO packets unsegmented). Dropped
//! frames are not written. The transmit counters are printed at the end.

use crate::inspect::link_config;
use crate::pcap_link::LinkWriter;
use crate::spec;
use anyhow::{bail, Context, Result};
use sluice_offload::features::{Device, Features};
use sluice_offload::tx::{self, emulate_device, tx_prepare, TxOutcome, TxOutput, TxPacket};
use sluice_packet::{CsumStatus, GsoType, Level, OffloadMeta, Slot, Verdict};
use sluice_pcap::CaptureReader;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `sluice pcap tx`.
///
/// `--spec IN.jsonl` gives one JSON object per line for the frame of the same number:
/// `{"gso_type": "tcpv4"|"tcpv6"|"udp_l4"|"udp"|"none", "gso_size": N, "ip_csum":
/// "unknown"|"bad"|"good"|"partial", "l4_csum": …, "inner_ip_csum": …, "inner_l4_csum": …}`.
/// Missing keys mean `none` / `unknown`; frames beyond the last line are plain. A `partial` L4
/// checksum field must hold the pseudo-header sum, as a device expects; a `partial` IPv4 header
/// checksum is the device's to fill.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The input capture (pcap or pcapng).
    input: PathBuf,
    /// The output capture (pcap).
    output: PathBuf,
    /// The device's features: comma-separated names from `sluice features list`, `none`, `all`.
    #[arg(long, value_name = "LIST")]
    features: String,
    /// The device MTU (largest L3 packet).
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Extra L2 header bytes (VLAN tags) accepted beyond the Ethernet header + MTU.
    #[arg(long, default_value_t = 0)]
    envelope: u32,
    /// Per-frame offload state, one JSON object per line.
    #[arg(long, value_name = "IN.jsonl")]
    spec: Option<PathBuf>,
    /// Print the counters as one JSON object (counter name → count) on the last line.
    #[arg(long)]
    json: bool,
    /// Write the frames as handed to the device instead of what the device would send.
    #[arg(long = "as-handed")]
    as_handed: bool,
}

/// One spec line.
#[derive(Debug, Clone, Copy, Default)]
struct SpecLine {
    gso_type: GsoType,
    gso_size: u16,
    csum: [CsumStatus; 4],
}

fn parse_status(v: &serde_json::Value, key: &str, no: usize) -> Result<CsumStatus> {
    Ok(match v.as_str() {
        Some("unknown") => CsumStatus::Unknown,
        Some("bad") => CsumStatus::Bad,
        Some("good") => CsumStatus::Good,
        Some("partial") => CsumStatus::Partial,
        _ => bail!(
            "spec line {no}: {key} must be one of \"unknown\", \"bad\", \"good\", \"partial\", not {v}"
        ),
    })
}

fn parse_spec_line(
    obj: &serde_json::Map<String, serde_json::Value>,
    no: usize,
) -> Result<SpecLine> {
    for key in obj.keys() {
        if ![
            "gso_type",
            "gso_size",
            "ip_csum",
            "l4_csum",
            "inner_ip_csum",
            "inner_l4_csum",
        ]
        .contains(&key.as_str())
        {
            bail!("spec line {no}: unknown key {key:?}");
        }
    }
    let mut s = SpecLine {
        gso_type: spec::gso_type(obj, no)?.unwrap_or_default(),
        gso_size: spec::gso_size(obj, no)?.unwrap_or_default(),
        ..SpecLine::default()
    };
    for (i, key) in ["ip_csum", "l4_csum", "inner_ip_csum", "inner_l4_csum"]
        .into_iter()
        .enumerate()
    {
        if let (Some(v), Some(slot)) = (obj.get(key), s.csum.get_mut(i)) {
            *slot = parse_status(v, key, no)?;
        }
    }
    Ok(s)
}

/// The metadata a spec line describes for a frame.
fn meta_for(
    frame: &[u8],
    cfg: &sluice_wire::ParseConfig,
    spec: &SpecLine,
    no: usize,
) -> Result<OffloadMeta> {
    let (layout, _) = sluice_wire::parse_partial(frame, cfg);
    let mut meta = OffloadMeta::from_layout(&layout);
    for (slot, status) in Slot::ALL.into_iter().zip(spec.csum) {
        let level = slot.level();
        let what = || format!("frame {no}: {slot:?} {status:?}");
        match status {
            CsumStatus::Unknown => {}
            CsumStatus::Good => meta.rx_verdict(slot, Verdict::Good),
            CsumStatus::Bad => meta.rx_verdict(slot, Verdict::Bad),
            CsumStatus::Partial if slot.is_l4() => {
                let start = meta
                    .offsets()
                    .l4(level)
                    .with_context(|| format!("{}: no L4 header", what()))?;
                let field = match meta.l4_proto(level) {
                    Some(sluice_wire::ip_proto::TCP) => 16,
                    Some(sluice_wire::ip_proto::UDP) => 6,
                    Some(sluice_wire::ip_proto::SCTP) => 8,
                    Some(sluice_wire::ip_proto::ICMP | sluice_wire::ip_proto::ICMPV6) => 2,
                    _ => bail!("{}: no L4 checksum", what()),
                };
                meta.rx_needs_csum(start, field).with_context(what)?;
            }
            CsumStatus::Partial => {
                meta.rx_verdict(slot, Verdict::Good);
                meta.ip_checksum_deferred(level).with_context(what)?;
            }
        }
        if level == Level::Inner && status != CsumStatus::Unknown && meta.tunnel().is_none() {
            bail!("frame {no}: inner checksum state for a frame without a tunnel");
        }
    }
    meta.set_gso(spec.gso_type, spec.gso_size, false)
        .with_context(|| format!("frame {no}: gso_type / gso_size"))?;
    Ok(meta)
}

/// Runs the command.
pub fn run(args: Args) -> Result<()> {
    let features = Features::parse_list(&args.features).context("--features")?;
    let dev = Device::new(features)
        .with_mtu(args.mtu)
        .with_envelope(args.envelope);
    let spec = match &args.spec {
        Some(p) => spec::read(p, true, parse_spec_line)?,
        None => Vec::new(),
    };
    tx::register_counters();
    let mut reader = CaptureReader::open(&args.input)?;
    let mut writer = LinkWriter::new(&args.output);
    let mut out = TxOutput::new();
    let mut wire: Vec<Vec<u8>> = Vec::new();
    let mut no = 0usize;
    while let Some(frame) = reader.next_frame() {
        let frame = frame?;
        no += 1;
        let line = spec.get(no - 1).copied().unwrap_or_default();
        // Ethernet, or an IP packet of a raw-IP capture (TUN traffic).
        let Some(cfg) = link_config(frame.linktype, &sluice_wire::ParseConfig::DEFAULT) else {
            bail!(
                "frame {no}: link type {:?} is neither Ethernet nor raw IP",
                frame.linktype
            );
        };
        out.parse = cfg;
        let meta = meta_for(&frame.data, &cfg, &line, no)?;
        let r = tx_prepare(&TxPacket::new(&frame.data, meta), &dev, &mut out);
        wire.clear();
        let handed: Vec<(&[u8], tx::DeviceWork)> = match r {
            TxOutcome::Dropped(_) => Vec::new(),
            TxOutcome::Unchanged { work, .. } => vec![(&frame.data[..], work)],
            TxOutcome::Prepared { .. } => out.frames().map(|(b, w)| (b, *w)).collect(),
        };
        for (bytes, work) in handed {
            if args.as_handed {
                wire.push(bytes.to_vec());
            } else {
                emulate_device(bytes, &work, &cfg, &mut wire)
                    .with_context(|| format!("frame {no}: device model"))?;
            }
        }
        for w in &wire {
            writer.write(no as u64, frame.linktype, frame.timestamp, w)?;
        }
    }
    writer.finish()?;
    let stdout = std::io::stdout();
    let mut o = std::io::BufWriter::new(stdout.lock());
    let counters: Vec<(&str, u64)> = tx::COUNTERS.iter().map(|c| (c.name(), c.value())).collect();
    for (name, v) in &counters {
        writeln!(o, "{name:<22} {v}")?;
    }
    if args.json {
        let map: serde_json::Map<String, serde_json::Value> = counters
            .iter()
            .map(|(n, v)| ((*n).to_string(), serde_json::Value::from(*v)))
            .collect();
        writeln!(o, "{}", serde_json::Value::Object(map))?;
    }
    o.flush()?;
    Ok(())
}
