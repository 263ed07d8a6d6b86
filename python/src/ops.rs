//! The functions of the extension module. Their Python-facing documentation (the docstrings
//! users see) is in the `sluice` package, which wraps them; see `sluice/__init__.py`.

use crate::raise;
use crate::report::{csum_dict, report, NotEthernet};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList};
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::gro::{FlushReason, GroConfig, GroEngine, GroPacket};
use sluice_offload::gso::{self as sw_gso, GsoError, GsoOutput, GsoParams};
use sluice_offload::tx::{emulate_device, tx_prepare, DeviceError, DropReason, TxOutcome};
use sluice_offload::tx::{TxOutput, TxPacket};
use sluice_packet::verify::verify_frame;
use sluice_packet::{rewrite, CsumStatus, GsoType, OffloadMeta, Slot};
use sluice_pcap::{CaptureReader, CaptureWriter, LinkType};
use sluice_wire::{ip_proto, parse_partial, parse_with, L3Kind, Layout, ParseConfig, ParseError};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The parser configuration with extra VXLAN / Geneve ports (the CLI's `--vxlan-port`,
/// `--geneve-port`: added to the defaults 4789 and 6081).
fn parse_config(vxlan: &[u16], geneve: &[u16]) -> PyResult<ParseConfig> {
    ParseConfig::with_tunnel_ports(vxlan, geneve).map_err(PyValueError::new_err)
}

fn parse_error(py: Python<'_>, e: &ParseError) -> PyErr {
    raise(
        py,
        "ParseError",
        (
            e.to_string(),
            e.layer.name(),
            e.offset,
            e.reason.to_string(),
        ),
    )
}

fn gso_error(py: Python<'_>, e: &GsoError) -> PyErr {
    raise(py, "GsoError", (e.to_string(), e.kind()))
}

fn pcap_error(py: Python<'_>, msg: impl std::fmt::Display, path: &std::path::Path) -> PyErr {
    raise(
        py,
        "PcapError",
        (msg.to_string(), path.display().to_string()),
    )
}

/// Parses a frame (Ethernet); returns the dict of `sluice pcap inspect --json`.
#[pyfunction]
#[pyo3(signature = (data, vxlan_ports = Vec::new(), geneve_ports = Vec::new()))]
pub(crate) fn parse<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    vxlan_ports: Vec<u16>,
    geneve_ports: Vec<u16>,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = parse_config(&vxlan_ports, &geneve_ports)?;
    report(py, &data, &cfg, None)
}

/// Verifies every checksum of a frame (what parses of it).
#[pyfunction]
#[pyo3(signature = (data, vxlan_ports = Vec::new(), geneve_ports = Vec::new()))]
pub(crate) fn verify<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    vxlan_ports: Vec<u16>,
    geneve_ports: Vec<u16>,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = parse_config(&vxlan_ports, &geneve_ports)?;
    let (layout, _) = parse_partial(&data, &cfg);
    let v = verify_frame(&data, &layout);
    let d = csum_dict(py, &v)?;
    d.set_item("l4_absent", v.l4_absent)?;
    d.set_item("inner_l4_absent", v.inner_l4_absent)?;
    Ok(d)
}

/// Whether the L4 checksum of a header stack is one `fill` computes.
fn l4_fillable(h: &sluice_wire::Headers, absent: bool) -> bool {
    h.l4.is_some()
        && !h.is_fragment
        && !absent
        && matches!(
            h.l4_proto,
            Some(
                ip_proto::TCP
                    | ip_proto::UDP
                    | ip_proto::SCTP
                    | ip_proto::ICMP
                    | ip_proto::ICMPV6
                    | ip_proto::GRE
            )
        )
}

/// Recomputes every IPv4 header and L4 checksum of `frame` (inner first), in place.
fn fill_in_place(py: Python<'_>, frame: &mut [u8], layout: &Layout) -> PyResult<()> {
    let v = verify_frame(frame, layout);
    let mut meta = OffloadMeta::from_layout(layout);
    let outer = &layout.outer;
    let mut slots = Vec::with_capacity(4);
    if let Some(inner) = &layout.inner {
        if l4_fillable(inner, v.inner_l4_absent) {
            slots.push(Slot::InnerL4);
        }
        if inner.l3_kind == Some(L3Kind::Ipv4) {
            slots.push(Slot::InnerIp);
        }
    }
    if l4_fillable(outer, v.l4_absent) {
        slots.push(Slot::OuterL4);
    }
    if outer.l3_kind == Some(L3Kind::Ipv4) {
        slots.push(Slot::OuterIp);
    }
    for slot in slots {
        rewrite::recompute_checksum(frame, &mut meta, slot).map_err(|e| {
            raise(
                py,
                "ChecksumError",
                (
                    format!("cannot fill the {slot:?} checksum: {e}"),
                    format!("{slot:?}"),
                ),
            )
        })?;
    }
    Ok(())
}

/// Returns a copy of a frame with every checksum recomputed.
#[pyfunction]
pub(crate) fn fill<'py>(py: Python<'py>, data: PyBackedBytes) -> PyResult<Bound<'py, PyBytes>> {
    let layout = parse_with(&data, &ParseConfig::DEFAULT).map_err(|e| parse_error(py, &e))?;
    let mut frame = data.to_vec();
    fill_in_place(py, &mut frame, &layout)?;
    Ok(PyBytes::new(py, &frame))
}

/// The GSO type `sluice pcap gso` infers for a frame: from its innermost L3/L4.
fn infer_type(layout: &Layout, ufo: bool) -> GsoType {
    let h = layout.innermost();
    match (h.l3_kind, h.l4_proto) {
        (Some(L3Kind::Ipv4), Some(ip_proto::TCP)) => GsoType::TcpV4,
        (Some(L3Kind::Ipv6), Some(ip_proto::TCP)) => GsoType::TcpV6,
        (Some(_), Some(ip_proto::UDP)) if ufo => GsoType::Udp,
        (Some(_), Some(ip_proto::UDP)) => GsoType::UdpL4,
        _ => GsoType::None,
    }
}

fn gso_type_arg(s: &str) -> PyResult<GsoType> {
    Ok(match s {
        "tcpv4" => GsoType::TcpV4,
        "tcpv6" => GsoType::TcpV6,
        "udp_l4" => GsoType::UdpL4,
        "udp" => GsoType::Udp,
        "none" => GsoType::None,
        other => {
            return Err(PyValueError::new_err(format!(
                "gso_type must be one of \"tcpv4\", \"tcpv6\", \"udp_l4\", \"udp\", \"none\", not {other:?}"
            )))
        }
    })
}

fn bytes_list<'py, 'a>(
    py: Python<'py>,
    frames: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Bound<'py, PyBytes>> {
    frames.into_iter().map(|f| PyBytes::new(py, f)).collect()
}

/// Segments one frame: in software (every checksum computed), or through transmit preparation
/// for a device with `features`.
#[pyfunction]
#[pyo3(signature = (data, segment_size, gso_type = None, features = None, mtu = 1500, as_handed = false))]
pub(crate) fn gso<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    segment_size: u16,
    gso_type: Option<&str>,
    features: Option<Vec<String>>,
    mtu: u32,
    as_handed: bool,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let requested = gso_type.map(gso_type_arg).transpose()?;
    let layout = parse_with(&data, &ParseConfig::DEFAULT).map_err(|e| parse_error(py, &e))?;
    let ty = requested.unwrap_or_else(|| infer_type(&layout, false));
    if ty != GsoType::None && segment_size == 0 {
        return Err(gso_error(py, &GsoError::ZeroSegmentSize));
    }
    let Some(features) = features else {
        if ty == GsoType::None {
            if requested.is_none() {
                // Neither TCP nor UDP: nothing to segment, copied unchanged (as the CLI does).
                return Ok(vec![PyBytes::new(py, &data)]);
            }
            // As `sluice pcap gso` with gso_type "none": one frame, checksums recomputed.
            let mut frame = data.to_vec();
            fill_in_place(py, &mut frame, &layout)?;
            return Ok(vec![PyBytes::new(py, &frame)]);
        }
        let mut out = GsoOutput::new();
        sw_gso::segment(&data, &layout, &GsoParams::new(ty, segment_size), &mut out)
            .map_err(|e| gso_error(py, &e))?;
        return Ok(bytes_list(py, out.frames()));
    };
    let list = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(",")
    };
    let features = Features::parse_list(&list).map_err(|e| {
        let token = match &e {
            sluice_offload::features::FeatureError::Unknown { token } => token.clone(),
            _ => String::new(),
        };
        raise(py, "FeatureError", (format!("features: {e}"), token))
    })?;
    let dev = Device::new(features).with_mtu(mtu);
    let mut meta = OffloadMeta::from_layout(&layout);
    let size = if ty == GsoType::None { 0 } else { segment_size };
    meta.set_gso(ty, size, false)
        .map_err(|e| PyValueError::new_err(format!("gso_type / segment_size: {e}")))?;
    let mut out = TxOutput::new();
    let handed: Vec<(&[u8], sluice_offload::tx::DeviceWork)> =
        match tx_prepare(&TxPacket::new(&data, meta), &dev, &mut out) {
            TxOutcome::Dropped(DropReason::Gso(e)) => return Err(gso_error(py, &e)),
            TxOutcome::Dropped(d) => {
                let kind = match d {
                    DropReason::Oversize { .. } => "oversize",
                    DropReason::BadChecksumGso => "bad_checksum_gso",
                    DropReason::Malformed(_) => "malformed",
                    _ => "dropped",
                };
                return Err(raise(
                    py,
                    "DropError",
                    (format!("transmit preparation dropped the frame: {d}"), kind),
                ));
            }
            TxOutcome::Unchanged { work, .. } => vec![(&data[..], work)],
            TxOutcome::Prepared { .. } => out.frames().map(|(b, w)| (b, *w)).collect(),
        };
    if as_handed {
        return Ok(bytes_list(py, handed.iter().map(|(b, _)| *b)));
    }
    let mut wire: Vec<Vec<u8>> = Vec::new();
    for (bytes, work) in &handed {
        emulate_device(bytes, work, &ParseConfig::DEFAULT, &mut wire).map_err(|e| match e {
            DeviceError::Gso(g) => gso_error(py, &g),
            other => raise(py, "SluiceError", (format!("device model: {other}"),)),
        })?;
    }
    Ok(bytes_list(py, wire.iter().map(|w| &w[..])))
}

/// Fills every `Partial` checksum of a merged packet in software, innermost first (an outer
/// tunnel checksum covers the inner one), as `sluice pcap gro` does.
fn finalize_checksums(py: Python<'_>, p: &mut GroPacket) -> PyResult<()> {
    for slot in [Slot::InnerL4, Slot::InnerIp, Slot::OuterL4, Slot::OuterIp] {
        if p.meta.status(slot) == CsumStatus::Partial {
            rewrite::recompute_checksum(&mut p.frame, &mut p.meta, slot).map_err(|e| {
                raise(
                    py,
                    "ChecksumError",
                    (
                        format!("cannot fill the {slot:?} checksum of a merged packet: {e}"),
                        format!("{slot:?}"),
                    ),
                )
            })?;
        }
    }
    Ok(())
}

/// Feeds frames to a GRO engine in batches, handing every finished packet to `emit`.
struct Gro {
    engine: GroEngine,
    batch: usize,
    in_batch: usize,
    now: u64,
}

impl Gro {
    fn new(udp: bool, batch: usize) -> PyResult<Self> {
        if batch == 0 {
            return Err(PyValueError::new_err("batch must be at least 1"));
        }
        Ok(Gro {
            engine: GroEngine::new(GroConfig {
                udp,
                ..GroConfig::default()
            }),
            batch,
            in_batch: 0,
            now: 0,
        })
    }

    fn drain(
        &mut self,
        py: Python<'_>,
        emit: &mut impl FnMut(&GroPacket) -> PyResult<()>,
    ) -> PyResult<()> {
        while let Some(mut p) = self.engine.pop_output() {
            finalize_checksums(py, &mut p)?;
            emit(&p)?;
            self.engine.recycle(p.frame);
        }
        Ok(())
    }

    fn receive(
        &mut self,
        py: Python<'_>,
        frame: &[u8],
        emit: &mut impl FnMut(&GroPacket) -> PyResult<()>,
    ) -> PyResult<()> {
        self.engine.receive(frame, OffloadMeta::default(), self.now);
        self.drain(py, emit)?;
        self.in_batch += 1;
        if self.in_batch == self.batch {
            self.engine.end_batch(self.now);
            self.drain(py, emit)?;
            self.in_batch = 0;
            self.now += 1;
        }
        Ok(())
    }

    /// Flushes what is held (before a frame that bypasses the engine).
    fn flush(
        &mut self,
        py: Python<'_>,
        emit: &mut impl FnMut(&GroPacket) -> PyResult<()>,
    ) -> PyResult<()> {
        self.engine.flush(FlushReason::Manual);
        self.drain(py, emit)
    }

    fn finish(
        &mut self,
        py: Python<'_>,
        emit: &mut impl FnMut(&GroPacket) -> PyResult<()>,
    ) -> PyResult<()> {
        self.engine.end_batch(self.now);
        self.drain(py, emit)
    }
}

/// Coalesces frames with Linux's GRO rules; returns the resulting packets.
#[pyfunction]
#[pyo3(signature = (frames, udp = false, batch = 64))]
pub(crate) fn gro<'py>(
    py: Python<'py>,
    frames: Vec<PyBackedBytes>,
    udp: bool,
    batch: usize,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let mut g = Gro::new(udp, batch)?;
    let mut out = Vec::new();
    let mut emit = |p: &GroPacket| -> PyResult<()> {
        out.push(PyBytes::new(py, &p.frame));
        Ok(())
    };
    for f in &frames {
        g.receive(py, f, &mut emit)?;
    }
    g.finish(py, &mut emit)?;
    Ok(out)
}

/// Every frame of a capture as the dict of `sluice pcap inspect --json`.
#[pyfunction]
#[pyo3(signature = (path, vxlan_ports = Vec::new(), geneve_ports = Vec::new()))]
pub(crate) fn pcap_inspect<'py>(
    py: Python<'py>,
    path: PathBuf,
    vxlan_ports: Vec<u16>,
    geneve_ports: Vec<u16>,
) -> PyResult<Bound<'py, PyList>> {
    let cfg = parse_config(&vxlan_ports, &geneve_ports)?;
    let mut reader = CaptureReader::open(&path).map_err(|m| pcap_error(py, m, &path))?;
    let list = PyList::empty(py);
    let mut index = 0u64;
    while let Some(frame) = reader.next_frame() {
        index += 1;
        let frame = frame.map_err(|m| pcap_error(py, m, &path))?;
        let not_ethernet = (frame.linktype != LinkType::Ethernet)
            .then(|| NotEthernet(format!("link type {} is not Ethernet", frame.linktype)));
        let d = report(py, &frame.data, &cfg, not_ethernet)?;
        d.set_item("frame", index)?;
        if frame.orig_len as usize != frame.data.len() {
            d.set_item("orig_len", frame.orig_len)?;
        }
        d.set_item("ts", frame.timestamp.as_secs_f64())?;
        list.append(d)?;
    }
    Ok(list)
}

/// `sluice pcap gso` without `--spec`: segments every TCP/UDP frame of a capture.
#[pyfunction]
#[pyo3(signature = (input, output, segment_size, udp = "uso"))]
pub(crate) fn pcap_gso<'py>(
    py: Python<'py>,
    input: PathBuf,
    output: PathBuf,
    segment_size: u16,
    udp: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let ufo = match udp {
        "uso" => false,
        "ufo" => true,
        other => {
            return Err(PyValueError::new_err(format!(
                "udp must be \"uso\" or \"ufo\", not {other:?}"
            )))
        }
    };
    let mut reader = CaptureReader::open(&input).map_err(|m| pcap_error(py, m, &input))?;
    let mut writer = CaptureWriter::create(&output).map_err(|m| pcap_error(py, m, &output))?;
    let werr = |m: sluice_pcap::Error| pcap_error(py, m, &output);
    let mut out = GsoOutput::new();
    let (mut frames, mut segments, mut passed) = (0u64, 0u64, 0u64);
    let mut errors: BTreeMap<&'static str, u64> = BTreeMap::new();
    while let Some(frame) = reader.next_frame() {
        frames += 1;
        let frame = frame.map_err(|m| pcap_error(py, m, &input))?;
        let data = &frame.data;
        let layout = (frame.linktype == LinkType::Ethernet)
            .then(|| sluice_wire::parse(data).ok())
            .flatten();
        let ty = layout
            .as_ref()
            .map_or(GsoType::None, |l| infer_type(l, ufo));
        let (Some(layout), false) = (layout, ty == GsoType::None) else {
            writer.write(frame.timestamp, data).map_err(werr)?;
            passed += 1;
            continue;
        };
        out.clear();
        match sw_gso::segment(data, &layout, &GsoParams::new(ty, segment_size), &mut out) {
            Ok(n) => {
                segments += n as u64;
                for f in out.frames() {
                    writer.write(frame.timestamp, f).map_err(werr)?;
                }
            }
            Err(e) => *errors.entry(e.kind()).or_default() += 1,
        }
    }
    writer.finish().map_err(werr)?;
    let d = PyDict::new(py);
    d.set_item("frames", frames)?;
    d.set_item("segments", segments)?;
    d.set_item("passed", passed)?;
    let e = PyDict::new(py);
    for (k, v) in errors {
        e.set_item(k, v)?;
    }
    d.set_item("errors", e)?;
    Ok(d)
}

/// `sluice pcap gro`: coalesces the frames of a capture into another.
#[pyfunction]
#[pyo3(signature = (input, output, udp = false, batch = 64))]
pub(crate) fn pcap_gro<'py>(
    py: Python<'py>,
    input: PathBuf,
    output: PathBuf,
    udp: bool,
    batch: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let mut g = Gro::new(udp, batch)?;
    let mut reader = CaptureReader::open(&input).map_err(|m| pcap_error(py, m, &input))?;
    let mut writer = CaptureWriter::create(&output).map_err(|m| pcap_error(py, m, &output))?;
    let (mut frames_in, mut written, mut merged, mut other_link) = (0u64, 0u64, 0u64, 0u64);
    let ts = Cell::new(Duration::ZERO);
    {
        let mut emit = |p: &GroPacket| -> PyResult<()> {
            writer
                .write(ts.get(), &p.frame)
                .map_err(|m| pcap_error(py, m, &output))?;
            written += 1;
            if p.segments > 1 {
                merged += 1;
            }
            Ok(())
        };
        while let Some(frame) = reader.next_frame() {
            frames_in += 1;
            let frame = frame.map_err(|m| pcap_error(py, m, &input))?;
            ts.set(frame.timestamp);
            if frame.linktype != LinkType::Ethernet {
                // Written through unchanged, after what is pending.
                g.flush(py, &mut emit)?;
                let fake = GroPacket {
                    frame: frame.data,
                    meta: OffloadMeta::default(),
                    segments: 1,
                };
                emit(&fake)?;
                other_link += 1;
                continue;
            }
            g.receive(py, &frame.data, &mut emit)?;
        }
        g.finish(py, &mut emit)?;
    }
    writer.finish().map_err(|m| pcap_error(py, m, &output))?;
    let d = PyDict::new(py);
    d.set_item("frames", frames_in)?;
    d.set_item("packets", written)?;
    d.set_item("merged", merged)?;
    d.set_item("other_link", other_link)?;
    Ok(d)
}

/// The device feature names `gso(..., features=...)` accepts, as `ethtool -k` names them.
#[pyfunction]
pub(crate) fn feature_names() -> Vec<&'static str> {
    Feature::ALL.iter().map(|f| f.name()).collect()
}
