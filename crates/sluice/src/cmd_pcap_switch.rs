//! `sluice pcap switch`: the switch's datapath run offline over capture ports.
//!
//! Each `--port NAME` is a port whose received frames come from a capture (`--in NAME=FILE`)
//! and whose sent frames go to a capture (`--out NAME=FILE`), with the transmit device given by
//! `--features NAME=LIST` (default none: everything done in software). The rules decide; the
//! datapath runs as it does in the daemon (GRO per port with `--gro NAME`, actions, transmit
//! preparation per egress device), until every input is exhausted. What a port's device is left
//! to do (checksum fill, segmentation, tag insertion) is done by a device model before the
//! frame is written, so output captures hold what would be on the wire (`--as-handed` writes
//! the frames as handed to the device instead). Per-port counters and the nonzero coverage
//! counters are printed at the end (`--json`: one object on the last line).
//!
//! **L3 ports.** A port whose input capture holds IP packets with no link header (link types
//! RAW, IPv4, IPv6), or one named with `--l3 NAME`, is an L3 port, as a TUN port is in the
//! daemon: its packets are parsed from the IP header, its output capture is written as RAW,
//! and the datapath's rules for L2 ↔ L3 apply (Ethernet header and tags removed on the way to
//! it; an L3 packet sent to an L2 port is a counted drop). A port's input must be all of one
//! kind: a record of the other kind ends the input with an error naming it.

use anyhow::{bail, Context, Result};
use sluice_datapath::{
    BufPool, Datapath, DatapathConfig, PacketBuf, Port, PortError, PortOptions, RecvResult,
};
use sluice_flow::{parse_rule, BatchMode, FlowTable, PortNames, TableConfig};
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::tx::{emulate_device, DeviceWork};
use sluice_pcap::{CaptureReader, CaptureWriter, Frame, LinkType as PcapLink};
use sluice_wire::{LinkType, ParseConfig};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Arguments of `sluice pcap switch`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A port (repeatable; numbered 1, 2, … in order).
    #[arg(long = "port", value_name = "NAME", required = true)]
    ports: Vec<String>,
    /// Frames the port receives: `NAME=FILE` (pcap or pcapng).
    #[arg(long = "in", value_name = "NAME=FILE")]
    inputs: Vec<String>,
    /// Where the port's sent frames go: `NAME=FILE` (pcap).
    #[arg(long = "out", value_name = "NAME=FILE")]
    outputs: Vec<String>,
    /// The port's transmit device: `NAME=LIST` (feature names from `sluice features list`,
    /// comma-separated, or `none` / `all`). Default: none.
    #[arg(long = "features", value_name = "NAME=LIST")]
    features: Vec<String>,
    /// Software GRO on the port's received frames (repeatable).
    #[arg(long = "gro", value_name = "NAME")]
    gro: Vec<String>,
    /// An L3 port (IP packets, no Ethernet header), as a TUN port (repeatable). A port whose
    /// input capture is raw IP is one without it.
    #[arg(long = "l3", value_name = "NAME")]
    l3: Vec<String>,
    /// The devices' MTU.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// A rule (repeatable).
    #[arg(long = "flow", value_name = "RULE")]
    flows: Vec<String>,
    /// A file of rules, one per line.
    #[arg(long = "flows", value_name = "FILE")]
    flow_file: Option<PathBuf>,
    /// Write frames as handed to the device (partial checksums, GSO packets unsegmented).
    #[arg(long = "as-handed")]
    as_handed: bool,
    /// Print the counters as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

/// A port backed by captures.
struct PcapPort {
    name: String,
    device: Device,
    input: Option<CaptureReader>,
    /// The input's first record, read to tell the port's kind.
    first: Option<Frame>,
    link: LinkType,
    output: Option<CaptureWriter>,
    as_handed: bool,
    parse: ParseConfig,
    wire: Vec<Vec<u8>>,
    frames_in: u64,
    /// Errors met reading or writing (reported at the end).
    errors: Arc<Mutex<Vec<String>>>,
    drops: sluice_datapath::PortDrops,
}

impl PcapPort {
    fn error(&self, e: String) {
        if let Ok(mut v) = self.errors.lock() {
            v.push(e);
        }
    }
}

impl Drop for PcapPort {
    fn drop(&mut self) {
        if let Some(w) = self.output.take() {
            if let Err(e) = w.finish() {
                self.error(format!("{}: output: {e:#}", self.name));
            }
        }
    }
}

impl Port for PcapPort {
    sluice_datapath::port_identity!("pcap", |s| &s.name);

    fn link(&self) -> LinkType {
        self.link
    }

    fn changeable(&self) -> Features {
        Features::ALL
    }

    fn set_feature(&mut self, feature: Feature, on: bool) -> Result<(), PortError> {
        self.device.set_feature(feature, on);
        Ok(())
    }

    fn recv(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> RecvResult {
        let mut n = 0;
        while n < max {
            let next = match self.first.take() {
                Some(f) => Some(Ok(f)),
                None => match self.input.as_mut() {
                    Some(reader) => reader.next_frame(),
                    None => return Ok(n),
                },
            };
            match next {
                None => {
                    self.input = None;
                    break;
                }
                Some(Err(e)) => {
                    self.error(format!("{}: input: {e:#}", self.name));
                    self.input = None;
                    break;
                }
                Some(Ok(frame)) => {
                    self.frames_in += 1;
                    if link_of(frame.linktype) != Some(self.link) {
                        self.error(format!(
                            "{}: input: frame {}: link type {:?} in the capture of an {} port",
                            self.name,
                            self.frames_in,
                            frame.linktype,
                            if self.link == LinkType::Ip {
                                "L3"
                            } else {
                                "Ethernet"
                            }
                        ));
                        self.input = None;
                        break;
                    }
                    if frame.data.len() > pool.room() {
                        self.drops.rx_truncated += 1;
                        continue;
                    }
                    let mut b = pool.get();
                    b.set_frame(&frame.data);
                    let (layout, _) = sluice_wire::parse_partial(b.frame(), &self.parse);
                    b.meta = sluice_packet::OffloadMeta::from_layout(&layout);
                    out.push(b);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    fn send(&mut self, frame: &[u8], work: &DeviceWork) -> Result<(), PortError> {
        let Some(w) = self.output.as_mut() else {
            return Ok(()); // no capture: frames are counted, not kept
        };
        self.wire.clear();
        if self.as_handed {
            self.wire.push(frame.to_vec());
        } else if let Err(e) = emulate_device(frame, work, &self.parse, &mut self.wire) {
            self.drops.tx_errors += 1;
            return Err(PortError::Unsendable(format!("device model: {e}")));
        }
        for f in &self.wire {
            if let Err(e) = w.write(Duration::ZERO, f) {
                self.error(format!("{}: output: {e:#}", self.name));
                self.drops.tx_errors += 1;
                return Err(PortError::Unsendable(format!("{e:#}")));
            }
        }
        Ok(())
    }

    fn drops(&self) -> sluice_datapath::PortDrops {
        self.drops
    }
}

/// The kind of port a capture record's link type feeds: Ethernet, or an L3 port for raw IP
/// (RAW, IPv4, IPv6); `None` for any other link type.
fn link_of(k: PcapLink) -> Option<LinkType> {
    match k {
        PcapLink::Ethernet => Some(LinkType::Ethernet),
        k if k.is_ip() => Some(LinkType::Ip),
        _ => None,
    }
}

fn split_kv<'a>(s: &'a str, what: &str) -> Result<(&'a str, &'a str)> {
    s.split_once('=')
        .with_context(|| format!("{what}: expected NAME=VALUE, got {s:?}"))
}

/// Runs `sluice pcap switch`.
pub fn run(args: Args) -> Result<()> {
    let mut names = PortNames::new();
    let mut numbers = BTreeMap::new();
    for (i, p) in args.ports.iter().enumerate() {
        if numbers.insert(p.clone(), i as u32 + 1).is_some() {
            bail!("--port {p}: given twice");
        }
        names.insert(p, i as u32 + 1);
    }
    let port_of = |n: &str, what: &str| -> Result<u32> {
        numbers
            .get(n)
            .copied()
            .with_context(|| format!("{what}: no --port {n:?}"))
    };
    let mut ins = BTreeMap::new();
    for s in &args.inputs {
        let (n, f) = split_kv(s, "--in")?;
        ins.insert(port_of(n, "--in")?, PathBuf::from(f));
    }
    let mut outs = BTreeMap::new();
    for s in &args.outputs {
        let (n, f) = split_kv(s, "--out")?;
        outs.insert(port_of(n, "--out")?, PathBuf::from(f));
    }
    let mut feats = BTreeMap::new();
    for s in &args.features {
        let (n, l) = split_kv(s, "--features")?;
        let f = Features::parse_list(l).with_context(|| format!("--features {s}"))?;
        feats.insert(port_of(n, "--features")?, f);
    }
    let mut gro = Vec::new();
    for n in &args.gro {
        gro.push(port_of(n, "--gro")?);
    }
    let mut l3 = Vec::new();
    for n in &args.l3 {
        l3.push(port_of(n, "--l3")?);
    }

    let mut rules = Vec::new();
    let mut lines: Vec<(String, String)> = args
        .flows
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("--flow {}", i + 1), r.clone()))
        .collect();
    if let Some(p) = &args.flow_file {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        for (i, l) in text.lines().enumerate() {
            let t = l.trim();
            if !t.is_empty() && !t.starts_with('#') {
                lines.push((format!("{}:{}", p.display(), i + 1), t.to_string()));
            }
        }
    }
    let mut bad = 0;
    for (at, l) in &lines {
        match parse_rule(l, &names) {
            Ok(r) => rules.push(r),
            Err(e) => {
                bad += 1;
                eprintln!("{at}: {}", e.render(l));
            }
        }
    }
    if bad > 0 {
        bail!("{bad} rules do not parse");
    }
    let mut table = FlowTable::new(TableConfig::default());
    for (r, (at, _)) in table
        .insert_batch(rules, BatchMode::BestEffort)
        .into_iter()
        .zip(&lines)
    {
        if let Err(e) = r {
            bail!("{at}: {e}");
        }
    }

    sluice_datapath::datapath::register_counters();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let mut dp = Datapath::new(table.reader(), DatapathConfig::default());
    for (name, &number) in &numbers {
        let (mut input, mut first) = (None, None);
        if let Some(p) = ins.get(&number) {
            let mut r = CaptureReader::open(p)?;
            // An empty capture leaves the port nothing to receive.
            if let Some(f) = r.next_frame() {
                first = Some(f.with_context(|| format!("--in {name}: {}", p.display()))?);
                input = Some(r);
            }
        }
        // The port's kind: --l3, else what its input holds (Ethernet without input).
        let link = match (l3.contains(&number), first.as_ref().map(|f| f.linktype)) {
            (_, Some(k)) if link_of(k).is_none() => bail!(
                "--in {name}: link type {k:?}: a pcap switch port takes Ethernet or raw IP (RAW, IPv4, IPv6) captures"
            ),
            (true, Some(k)) if link_of(k) != Some(LinkType::Ip) => {
                bail!("--l3 {name}: its input capture is {k:?}, not raw IP")
            }
            (true, _) => LinkType::Ip,
            (false, Some(k)) => link_of(k).unwrap_or(LinkType::Ethernet),
            (false, None) => LinkType::Ethernet,
        };
        let parse = ParseConfig::DEFAULT.with_link(link);
        let output = match outs.get(&number) {
            Some(p) if link == LinkType::Ip => {
                Some(CaptureWriter::create_with(p, PcapLink::RawIp)?)
            }
            Some(p) => Some(CaptureWriter::create(p)?),
            None => None,
        };
        let f = feats.get(&number).copied().unwrap_or(Features::NONE);
        let port = PcapPort {
            name: name.clone(),
            device: Device::new(f).with_mtu(args.mtu),
            input,
            first,
            link,
            output,
            as_handed: args.as_handed,
            parse,
            wire: Vec::new(),
            frames_in: 0,
            errors: Arc::clone(&errors),
            drops: Default::default(),
        };
        dp.add_port(
            number,
            Box::new(port),
            PortOptions {
                gro: gro.contains(&number),
                ..PortOptions::default()
            },
        )?;
    }
    let before = sluice_coverage::snapshot();
    while dp.poll_once() > 0 {}
    let mut stats = serde_json::Map::new();
    for (name, &number) in &numbers {
        let s = dp.stats(number).context("port stats")?;
        println!(
            "{name}: rx {} packets {} bytes, tx {} frames {} bytes, no match {}, dropped by rule {}, \
             action errors {}, tx drops {}, gro merged {}",
            s.rx_packets,
            s.rx_bytes,
            s.tx_packets,
            s.tx_bytes,
            s.rx_no_match,
            s.rx_dropped_by_rule,
            s.rx_action_errors,
            s.tx_prepare_drops + s.tx_errors,
            s.gro.merged_segments
        );
        stats.insert(
            name.clone(),
            serde_json::json!({
                "rx_packets": s.rx_packets, "tx_packets": s.tx_packets,
                "rx_no_match": s.rx_no_match, "rx_dropped_by_rule": s.rx_dropped_by_rule,
                "rx_action_errors": s.rx_action_errors, "tx_prepare_drops": s.tx_prepare_drops,
                "gro_merged_segments": s.gro.merged_segments,
            }),
        );
    }
    // Close the captures (flushes them) and report the first I/O error.
    for &number in numbers.values() {
        if let Some(port) = dp.remove_port(number) {
            drop(port);
        }
    }
    let mut counters = serde_json::Map::new();
    for s in sluice_coverage::deltas(&before, &sluice_coverage::snapshot()) {
        if s.value > 0 {
            println!("  {:<24} {}", s.name, s.value);
            counters.insert(s.name.to_string(), s.value.into());
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"ports": stats, "counters": counters})
        );
    }
    let errors = errors.lock().map(|v| v.clone()).unwrap_or_default();
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(())
}
