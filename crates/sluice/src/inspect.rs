//! `sluice pcap inspect`: one line per frame, human-readable or JSON.
//!
//! Each frame is parsed with [`sluice_wire::parse_partial`] (so a malformed frame still shows
//! what was parsed before the error) and its checksums are verified in software with
//! [`sluice_packet::verify::verify_frame`].

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_packet::verify::{verify_frame, Verdict, Verdicts};
use sluice_pcap::{CaptureReader, Frame, LinkType as CaptureLink};
use sluice_wire::bytes::read_u16;
use sluice_wire::{
    parse_partial, Headers, L3Kind, Layout, LinkType, ParseConfig, ParseError, VlanStack,
};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Output format of `inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One terse human-readable line per frame.
    Human,
    /// One JSON object per frame per line.
    Json,
}

/// A VLAN tag as printed.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct VlanJson {
    /// Tag protocol identifier.
    pub tpid: u16,
    /// VLAN id.
    pub vid: u16,
    /// Priority code point.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
}

/// Offsets of the outer stack.
#[derive(Debug, Serialize)]
pub struct OuterOffsets {
    l3: Option<usize>,
    l4: Option<usize>,
    payload: Option<usize>,
}

/// Offsets of the inner stack.
#[derive(Debug, Serialize)]
pub struct InnerOffsets {
    l2: Option<usize>,
    l3: Option<usize>,
    l4: Option<usize>,
    payload: Option<usize>,
}

/// The inner stack of a tunnelled frame.
#[derive(Debug, Serialize)]
pub struct InnerJson {
    vlans: Vec<VlanJson>,
    l3: Option<&'static str>,
    l4: Option<&'static str>,
    offsets: InnerOffsets,
}

/// The tunnel of a frame.
#[derive(Debug, Serialize)]
pub struct TunnelJson {
    kind: &'static str,
    id: Option<u32>,
    inner: Option<InnerJson>,
}

/// Checksum verdicts as printed.
#[derive(Debug, Serialize)]
pub struct CsumJson {
    ip: &'static str,
    l4: &'static str,
    inner_ip: &'static str,
    inner_l4: &'static str,
}

/// A parse error as printed.
#[derive(Debug, Serialize)]
pub struct ErrorJson {
    layer: &'static str,
    offset: usize,
    reason: String,
}

/// Everything `inspect --json` prints about one frame.
#[derive(Debug, Serialize)]
pub struct FrameReport {
    frame: u64,
    len: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    orig_len: Option<u32>,
    ts: f64,
    layers: Vec<&'static str>,
    vlans: Vec<VlanJson>,
    l3: Option<&'static str>,
    l4: Option<&'static str>,
    offsets: OuterOffsets,
    tunnel: Option<TunnelJson>,
    csum: CsumJson,
    error: Option<ErrorJson>,
}

fn vlans_json(v: &VlanStack) -> Vec<VlanJson> {
    v.as_slice()
        .iter()
        .map(|t| VlanJson {
            tpid: t.tpid,
            vid: t.vid,
            pcp: t.pcp,
            dei: t.dei,
        })
        .collect()
}

fn l3_name(h: &Headers) -> Option<&'static str> {
    h.l3_kind.map(|k| match k {
        L3Kind::Ipv4 => "ipv4",
        L3Kind::Ipv6 => "ipv6",
    })
}

/// The L4 name of a stack: the protocol whose header was parsed (or, for a later fragment or an
/// unknown protocol, nothing).
fn l4_name(h: &Headers) -> Option<&'static str> {
    h.l4?;
    Some(match h.l4_proto? {
        sluice_wire::ip_proto::TCP => "tcp",
        sluice_wire::ip_proto::UDP => "udp",
        sluice_wire::ip_proto::SCTP => "sctp",
        sluice_wire::ip_proto::ICMP => "icmp",
        sluice_wire::ip_proto::ICMPV6 => "icmpv6",
        sluice_wire::ip_proto::GRE => "gre",
        _ => return None,
    })
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Good => "good",
        Verdict::Bad => "bad",
        Verdict::None => "none",
    }
}

/// How to parse a frame of link type `linktype`: Ethernet as `cfg` says, raw IP (RAW 101,
/// IPV4 228, IPV6 229) from its IP header ([`LinkType::Ip`]); `None` for any other link type.
pub fn link_config(linktype: CaptureLink, cfg: &ParseConfig) -> Option<ParseConfig> {
    match linktype {
        CaptureLink::Ethernet => Some(*cfg),
        CaptureLink::RawIp | CaptureLink::Ipv4 | CaptureLink::Ipv6 => {
            Some(cfg.with_link(LinkType::Ip))
        }
        _ => None,
    }
}

/// Builds the report of one frame (Ethernet, or an IP packet of a raw-IP capture).
pub fn report(index: u64, frame: &Frame, cfg: &ParseConfig) -> FrameReport {
    let data = &frame.data;
    let link_cfg = link_config(frame.linktype, cfg);
    let (layout, error) = match &link_cfg {
        Some(c) => parse_partial(data, c),
        None => (Layout::default(), None),
    };
    let verdicts = if link_cfg.is_some() {
        verify_frame(data, &layout)
    } else {
        Verdicts::default()
    };
    let error = if link_cfg.is_none() {
        Some(ErrorJson {
            layer: "link",
            offset: 0,
            reason: format!(
                "link type {:?} is neither Ethernet nor raw IP",
                frame.linktype
            ),
        })
    } else {
        error.map(|e: ParseError| ErrorJson {
            layer: e.layer.name(),
            offset: e.offset,
            reason: e.reason.to_string(),
        })
    };
    let tunnel = layout.tunnel.map(|t| TunnelJson {
        kind: t.kind.name(),
        id: t.id,
        inner: layout.inner.as_ref().map(|h| InnerJson {
            vlans: vlans_json(&h.vlans),
            l3: l3_name(h),
            l4: l4_name(h),
            offsets: InnerOffsets {
                l2: h.l2,
                l3: h.l3,
                l4: h.l4,
                payload: h.payload,
            },
        }),
    });
    let o = &layout.outer;
    FrameReport {
        frame: index,
        len: data.len(),
        orig_len: (frame.orig_len as usize != data.len()).then_some(frame.orig_len),
        ts: frame.timestamp.as_secs_f64(),
        layers: layout
            .layers
            .as_slice()
            .iter()
            .map(|(l, _)| l.name())
            .collect(),
        vlans: vlans_json(&o.vlans),
        l3: l3_name(o),
        l4: l4_name(o),
        offsets: OuterOffsets {
            l3: o.l3,
            l4: o.l4,
            payload: o.payload,
        },
        tunnel,
        csum: CsumJson {
            ip: verdict_name(verdicts.ip),
            l4: verdict_name(verdicts.l4),
            inner_ip: verdict_name(verdicts.inner_ip),
            inner_l4: verdict_name(verdicts.inner_l4),
        },
        error,
    }
}

/// Appends ` src → dst proto sport → dport [flags]` for one header stack.
fn describe_stack(out: &mut String, data: &[u8], h: &Headers) {
    for t in h.vlans.as_slice() {
        let _ = write!(out, " vlan({:#06x} {}", t.tpid, t.vid);
        if t.pcp != 0 {
            let _ = write!(out, " p{}", t.pcp);
        }
        out.push(')');
    }
    let Some(l3) = h.l3 else {
        if h.l2.is_some() {
            let _ = write!(out, " type {:#06x}", h.ethertype);
        }
        return;
    };
    match h.l3_kind {
        Some(L3Kind::Ipv4) => {
            if let (Some(s), Some(d)) = (data.get(l3 + 12..l3 + 16), data.get(l3 + 16..l3 + 20)) {
                let _ = write!(
                    out,
                    " {}.{}.{}.{} → {}.{}.{}.{}",
                    s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3]
                );
            }
        }
        Some(L3Kind::Ipv6) => {
            if let (Some(s), Some(d)) = (data.get(l3 + 8..l3 + 24), data.get(l3 + 24..l3 + 40)) {
                let s: [u8; 16] = s.try_into().unwrap_or([0; 16]);
                let d: [u8; 16] = d.try_into().unwrap_or([0; 16]);
                let _ = write!(
                    out,
                    " {} → {}",
                    std::net::Ipv6Addr::from(s),
                    std::net::Ipv6Addr::from(d)
                );
            }
        }
        None => {}
    }
    if h.is_fragment {
        out.push_str(" frag");
    }
    let Some(l4) = h.l4 else {
        if let Some(p) = h.l4_proto {
            let _ = write!(out, " proto {p}");
        }
        return;
    };
    let name = l4_name(h).unwrap_or("?");
    if h.l4_proto == Some(sluice_wire::ip_proto::GRE) {
        // The tunnel part of the line names GRE and its key.
        return;
    }
    let _ = write!(out, " {name}");
    match h.l4_proto {
        Some(sluice_wire::ip_proto::TCP | sluice_wire::ip_proto::UDP)
        | Some(sluice_wire::ip_proto::SCTP) => {
            if let (Some(sp), Some(dp)) = (read_u16(data, l4), read_u16(data, l4 + 2)) {
                let _ = write!(out, " {sp} → {dp}");
            }
            if h.l4_proto == Some(sluice_wire::ip_proto::TCP) {
                if let Some(&f) = data.get(l4 + 13) {
                    out.push_str(" [");
                    for (bit, c) in [
                        (0x02, 'S'),
                        (0x10, '.'),
                        (0x08, 'P'),
                        (0x01, 'F'),
                        (0x04, 'R'),
                        (0x20, 'U'),
                        (0x40, 'E'),
                        (0x80, 'W'),
                    ] {
                        if f & bit != 0 {
                            out.push(c);
                        }
                    }
                    out.push(']');
                }
            }
        }
        Some(sluice_wire::ip_proto::ICMP | sluice_wire::ip_proto::ICMPV6) => {
            if let (Some(&t), Some(&c)) = (data.get(l4), data.get(l4 + 1)) {
                let _ = write!(out, " type {t} code {c}");
            }
        }
        _ => {}
    }
    if let (Some(p), Some(end)) = (h.payload, h.l3_end) {
        if end >= p && !matches!(h.l4_proto, Some(sluice_wire::ip_proto::GRE)) {
            let _ = write!(out, " len {}", end - p);
        }
    }
}

/// The terse human line of one frame.
///
/// `t0` is the first frame's timestamp: times are printed relative to it, as tshark does.
pub fn human_line(
    index: u64,
    frame: &Frame,
    r: &FrameReport,
    cfg: &ParseConfig,
    t0: Duration,
) -> String {
    let rel = frame.timestamp.saturating_sub(t0).as_secs_f64();
    let mut out = format!("{index:6} {rel:>10.6} {:5}B ", r.len);
    out.push_str(&r.layers.join("/"));
    if let Some(cfg) = link_config(frame.linktype, cfg) {
        let (layout, _) = parse_partial(&frame.data, &cfg);
        describe_stack(&mut out, &frame.data, &layout.outer);
        if let Some(t) = layout.tunnel {
            let _ = write!(out, " | {}", t.kind.name());
            if let Some(id) = t.id {
                let _ = write!(out, " id {id}");
            }
            if let Some(inner) = &layout.inner {
                out.push_str(" |");
                describe_stack(&mut out, &frame.data, inner);
            }
        }
    }
    let c = &r.csum;
    let mut sums = Vec::new();
    for (k, v) in [
        ("ip", c.ip),
        ("l4", c.l4),
        ("inner_ip", c.inner_ip),
        ("inner_l4", c.inner_l4),
    ] {
        if v != "none" {
            sums.push(format!("{k}={v}"));
        }
    }
    if !sums.is_empty() {
        let _ = write!(out, "  csum {}", sums.join(" "));
    }
    if let Some(e) = &r.error {
        let _ = write!(out, "  !! {} at {}: {}", e.layer, e.offset, e.reason);
    }
    out
}

/// Runs `inspect` over a capture, writing to `out`. Returns the number of frames.
pub fn run(path: &Path, format: Format, cfg: &ParseConfig, out: &mut dyn Write) -> Result<u64> {
    let mut reader = CaptureReader::open(path)?;
    let progress = std::io::stderr().is_terminal() && reader.file_len().unwrap_or(0) > (4 << 20);
    let mut last_progress = Instant::now();
    let mut index = 0u64;
    let mut t0 = None;
    while let Some(frame) = reader.next_frame() {
        index += 1;
        let frame = frame?;
        let t0 = *t0.get_or_insert(frame.timestamp);
        let r = report(index, &frame, cfg);
        let line = match format {
            Format::Json => serde_json::to_string(&r).context("cannot encode JSON")?,
            Format::Human => human_line(index, &frame, &r, cfg, t0),
        };
        writeln!(out, "{line}")?;
        if progress && last_progress.elapsed() > Duration::from_millis(200) {
            last_progress = Instant::now();
            let pct =
                reader.bytes_read() as f64 * 100.0 / reader.file_len().unwrap_or(0).max(1) as f64;
            eprint!("\r{index} frames, {pct:.0}% ");
        }
    }
    if progress {
        eprintln!("\r{index} frames, 100%   ");
    }
    out.flush()?;
    Ok(index)
}
