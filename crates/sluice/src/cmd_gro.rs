//! `sluice pcap gro`: coalesce the frames of a capture with Sluice's software GRO (Linux's merge
//! rules) and write the resulting packets, in order, with correct lengths and full checksums.
//!
//! The capture is one stream: frames are fed to one [`GroEngine`] in batches of `--batch` frames,
//! and every held packet is flushed at each batch end (as at the end of a NAPI poll). Packets are
//! written in the order the engine finishes them (see [`sluice_offload::gro`]): per flow in
//! arrival order. A merged packet's checksums are made final (a `Partial` L4 checksum is filled
//! in software). `OUT.jsonl` beside `OUT` gets one line per written frame:
//! `{"segments": k, "segment_size": s, "gso_type": "tcpv4"|"tcpv6"|"udp_l4"|null}`.
//!
//! Ethernet captures and raw-IP ones (TUN traffic: link type RAW, IPv4, IPv6) alike; the output
//! has the input's link type. Frames of any other link type are written through unchanged.

use crate::inspect::link_config;
use crate::pcap_link::LinkWriter;
use anyhow::{bail, Context, Result};
use sluice_offload::gro::{GroConfig, GroEngine, GroPacket};
use sluice_packet::{rewrite, CsumStatus, GsoType, OffloadMeta, Slot};
use sluice_pcap::{CaptureReader, LinkType as CaptureLink};
use sluice_wire::ParseConfig;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `sluice pcap gro`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The input capture (pcap or pcapng).
    input: PathBuf,
    /// The output capture (pcap); `OUT.jsonl` is written beside it.
    output: PathBuf,
    /// Also coalesce UDP datagrams into USO packets (Linux's forwarding UDP GRO).
    #[arg(long)]
    udp: bool,
    /// Frames per batch; every held packet is flushed at each batch end.
    #[arg(long, value_name = "N", default_value_t = 64)]
    batch: usize,
}

/// Runs the command.
pub fn run(args: Args) -> Result<()> {
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let mut reader = CaptureReader::open(&args.input)?;
    let mut writer = LinkWriter::new(&args.output);
    let jsonl_path = jsonl_path(&args.output);
    let jsonl = std::fs::File::create(&jsonl_path)
        .with_context(|| format!("cannot create {}", jsonl_path.display()))?;
    let mut out = Output {
        writer: &mut writer,
        jsonl: std::io::BufWriter::new(jsonl),
        written: 0,
        merged: 0,
        frame: 0,
        link: CaptureLink::Ethernet,
    };
    let engine_for = |parse: ParseConfig| {
        GroEngine::new(GroConfig {
            udp: args.udp,
            parse,
            ..GroConfig::default()
        })
    };
    let mut engine = engine_for(ParseConfig::DEFAULT);
    let mut engine_link = CaptureLink::Ethernet;
    let mut in_batch = 0usize;
    let mut frames_in = 0u64;
    let mut other_link = 0u64;
    let mut now = 0u64;
    let mut ts = Duration::ZERO;
    while let Some(frame) = reader.next_frame() {
        let frame = frame?;
        frames_in += 1;
        ts = frame.timestamp;
        let Some(parse) = link_config(frame.linktype, &ParseConfig::DEFAULT) else {
            // Neither Ethernet nor raw IP: written through unchanged, after what is pending.
            engine.flush(sluice_offload::gro::FlushReason::Manual);
            out.drain(&mut engine, ts)?;
            out.frame = frames_in;
            out.link = frame.linktype;
            out.write(ts, &frame.data, 1, &OffloadMeta::default())?;
            other_link += 1;
            continue;
        };
        if frame.linktype != engine_link {
            // The engine parses one link type: what is pending goes out first.
            engine.flush(sluice_offload::gro::FlushReason::Manual);
            out.drain(&mut engine, ts)?;
            engine = engine_for(parse);
            engine_link = frame.linktype;
        }
        out.frame = frames_in;
        out.link = frame.linktype;
        engine.receive(&frame.data, OffloadMeta::default(), now);
        out.drain(&mut engine, ts)?;
        in_batch += 1;
        if in_batch == args.batch {
            engine.end_batch(now);
            out.drain(&mut engine, ts)?;
            in_batch = 0;
            now += 1;
        }
    }
    engine.end_batch(now);
    out.drain(&mut engine, ts)?;
    let (written, merged) = (out.written, out.merged);
    out.jsonl
        .flush()
        .with_context(|| format!("cannot write {}", jsonl_path.display()))?;
    writer.finish()?;
    let s = engine.stats();
    let f = &s.flushed;
    eprintln!(
        "gro: {frames_in} frames in, {written} packets out ({merged} merged from {} segments), \
         {} not mergeable, {} bad checksum, {other_link} neither Ethernet nor IP; flushed: batch_end {} \
         age {} size {} flags {} mismatch {} evicted {} manual {}",
        s.merged_segments + s.merged_packets,
        s.not_mergeable,
        s.bad_checksum,
        f.batch_end,
        f.age,
        f.size,
        f.flags,
        f.mismatch,
        f.evicted,
        f.manual,
    );
    Ok(())
}

/// `OUT.jsonl`: the output path with `.jsonl` appended.
fn jsonl_path(output: &Path) -> PathBuf {
    let mut s = output.as_os_str().to_owned();
    s.push(".jsonl");
    PathBuf::from(s)
}

struct Output<'a> {
    writer: &'a mut LinkWriter,
    jsonl: std::io::BufWriter<std::fs::File>,
    written: u64,
    merged: u64,
    /// The input frame last read (1-based, for errors) and its link type.
    frame: u64,
    link: CaptureLink,
}

impl Output<'_> {
    fn drain(&mut self, engine: &mut GroEngine, ts: Duration) -> Result<()> {
        while let Some(mut p) = engine.pop_output() {
            finalize_checksums(&mut p)?;
            self.write(ts, &p.frame, p.segments, &p.meta)?;
            engine.recycle(p.frame);
        }
        Ok(())
    }

    fn write(
        &mut self,
        ts: Duration,
        frame: &[u8],
        segments: u16,
        meta: &OffloadMeta,
    ) -> Result<()> {
        self.writer.write(self.frame, self.link, ts, frame)?;
        let gso = match meta.gso_type() {
            GsoType::TcpV4 => "\"tcpv4\"",
            GsoType::TcpV6 => "\"tcpv6\"",
            GsoType::UdpL4 => "\"udp_l4\"",
            GsoType::Udp | GsoType::None => "null",
        };
        writeln!(
            self.jsonl,
            "{{\"segments\": {segments}, \"segment_size\": {}, \"gso_type\": {gso}}}",
            meta.segment_size()
        )
        .context("cannot write the jsonl file")?;
        self.written += 1;
        if segments > 1 {
            self.merged += 1;
        }
        Ok(())
    }
}

/// Fills every `Partial` checksum in software, innermost first (an outer tunnel checksum covers
/// the inner one).
fn finalize_checksums(p: &mut GroPacket) -> Result<()> {
    for slot in [Slot::InnerL4, Slot::InnerIp, Slot::OuterL4, Slot::OuterIp] {
        if p.meta.status(slot) == CsumStatus::Partial {
            rewrite::recompute_checksum(&mut p.frame, &mut p.meta, slot)
                .with_context(|| format!("cannot fill the {slot:?} checksum of a merged packet"))?;
        }
    }
    Ok(())
}
