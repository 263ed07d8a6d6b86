//! The dict of one parsed frame: the keys and values of `sluice pcap inspect --json`'s object
//! (crates/sluice/src/inspect.rs), plus `layer_offsets` (every layer with its offset), which the
//! Python `Frame` keeps out of `to_dict()`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sluice_packet::verify::{verify_frame, Verdict, Verdicts};
use sluice_wire::{ip_proto, parse_partial, Headers, L3Kind, Layout, ParseConfig, VlanStack};

/// The name `inspect` gives a verdict.
pub(crate) fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Good => "good",
        Verdict::Bad => "bad",
        Verdict::None => "none",
    }
}

fn l3_name(h: &Headers) -> Option<&'static str> {
    h.l3_kind.map(|k| match k {
        L3Kind::Ipv4 => "ipv4",
        L3Kind::Ipv6 => "ipv6",
    })
}

/// The L4 name of a stack, as `inspect` gives it: the protocol whose header was parsed.
fn l4_name(h: &Headers) -> Option<&'static str> {
    h.l4?;
    Some(match h.l4_proto? {
        ip_proto::TCP => "tcp",
        ip_proto::UDP => "udp",
        ip_proto::SCTP => "sctp",
        ip_proto::ICMP => "icmp",
        ip_proto::ICMPV6 => "icmpv6",
        ip_proto::GRE => "gre",
        _ => return None,
    })
}

fn vlans<'py>(py: Python<'py>, v: &VlanStack) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for t in v.as_slice() {
        let d = PyDict::new(py);
        d.set_item("tpid", t.tpid)?;
        d.set_item("vid", t.vid)?;
        d.set_item("pcp", t.pcp)?;
        d.set_item("dei", t.dei)?;
        list.append(d)?;
    }
    Ok(list)
}

/// The four checksum verdicts as `inspect` prints them (`csum`).
pub(crate) fn csum_dict<'py>(py: Python<'py>, v: &Verdicts) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("ip", verdict_name(v.ip))?;
    d.set_item("l4", verdict_name(v.l4))?;
    d.set_item("inner_ip", verdict_name(v.inner_ip))?;
    d.set_item("inner_l4", verdict_name(v.inner_l4))?;
    Ok(d)
}

/// What `report` says about the link type of a frame that is not Ethernet.
pub(crate) struct NotEthernet(pub String);

/// The dict of one frame. `not_ethernet` is set for a capture frame of another link type,
/// which is then not parsed (as `inspect` does).
pub(crate) fn report<'py>(
    py: Python<'py>,
    data: &[u8],
    cfg: &ParseConfig,
    not_ethernet: Option<NotEthernet>,
) -> PyResult<Bound<'py, PyDict>> {
    let (layout, error, verdicts) = match &not_ethernet {
        None => {
            let (layout, error) = parse_partial(data, cfg);
            let verdicts = verify_frame(data, &layout);
            (layout, error, verdicts)
        }
        Some(_) => (Layout::default(), None, Verdicts::default()),
    };
    let d = PyDict::new(py);
    d.set_item("len", data.len())?;
    let layers = layout.layers.as_slice();
    d.set_item(
        "layers",
        PyList::new(py, layers.iter().map(|(l, _)| l.name()))?,
    )?;
    d.set_item(
        "layer_offsets",
        PyList::new(py, layers.iter().map(|&(l, off)| (l.name(), off)))?,
    )?;
    let o = &layout.outer;
    d.set_item("vlans", vlans(py, &o.vlans)?)?;
    d.set_item("l3", l3_name(o))?;
    d.set_item("l4", l4_name(o))?;
    let offsets = PyDict::new(py);
    offsets.set_item("l3", o.l3)?;
    offsets.set_item("l4", o.l4)?;
    offsets.set_item("payload", o.payload)?;
    d.set_item("offsets", offsets)?;
    match layout.tunnel {
        None => d.set_item("tunnel", py.None())?,
        Some(t) => {
            let td = PyDict::new(py);
            td.set_item("kind", t.kind.name())?;
            td.set_item("id", t.id)?;
            match &layout.inner {
                None => td.set_item("inner", py.None())?,
                Some(h) => {
                    let inner = PyDict::new(py);
                    inner.set_item("vlans", vlans(py, &h.vlans)?)?;
                    inner.set_item("l3", l3_name(h))?;
                    inner.set_item("l4", l4_name(h))?;
                    let io = PyDict::new(py);
                    io.set_item("l2", h.l2)?;
                    io.set_item("l3", h.l3)?;
                    io.set_item("l4", h.l4)?;
                    io.set_item("payload", h.payload)?;
                    inner.set_item("offsets", io)?;
                    td.set_item("inner", inner)?;
                }
            }
            d.set_item("tunnel", td)?;
        }
    }
    d.set_item("csum", csum_dict(py, &verdicts)?)?;
    let error = match (not_ethernet, error) {
        (Some(NotEthernet(reason)), _) => Some(("link", 0usize, reason)),
        (None, Some(e)) => Some((e.layer.name(), e.offset, e.reason.to_string())),
        (None, None) => None,
    };
    match error {
        None => d.set_item("error", py.None())?,
        Some((layer, offset, reason)) => {
            let e = PyDict::new(py);
            e.set_item("layer", layer)?;
            e.set_item("offset", offset)?;
            e.set_item("reason", reason)?;
            d.set_item("error", e)?;
        }
    }
    Ok(d)
}
