//! `trace`: what the switch would do with one frame received on a port, like
//! `ovs-appctl ofproto/trace` — the frame's layout, the rule that matches, each action in order
//! with the frame after it, and for each output the decisions of `tx_prepare` for that egress
//! device (software segmentation, checksums, VLAN insertion, or the drop reason). Nothing is
//! sent and no counter of the datapath moves: the control thread runs the same functions the
//! datapath runs, on a copy of the frame, with the current flow table snapshot and the ports'
//! devices fetched from datapath thread 0.

use crate::switch::{Switch, SwitchError};
use serde::{Deserialize, Serialize};
use sluice_datapath::{actions, PacketBuf};
use sluice_flow::{Action, FlowKey};
use sluice_offload::features::{Device, Feature};
use sluice_offload::tx::{tx_prepare, TxOutcome, TxOutput, TxPacket};
use sluice_wire::ParseConfig;

/// Longest frame `trace` takes (a 64 KiB GSO packet plus headers).
pub const MAX_TRACE_FRAME: usize = 65_535 + 256;

/// The rule that matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRule {
    /// The switch's handle.
    pub handle: u64,
    /// Its priority (higher wins).
    pub priority: u32,
    /// The rule in the text syntax.
    pub text: String,
}

/// What transmit preparation decided for one output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceTx {
    /// The egress port number.
    pub port: u32,
    /// Its name (empty when no port has the number: the datapath would drop, counted in
    /// `dp_bad_output_drops`).
    pub name: String,
    /// The egress device's offload features (ethtool names) that are on.
    pub features: Vec<String>,
    /// `unchanged` (sent as is, the device does `device_work`), `prepared` (software made
    /// `frames` frames), `dropped` (`drop_reason`), `no_port`.
    pub outcome: String,
    /// What software did, by name (`vlan_sw`, `soft_gso`, `sw_csum`, …; `vlan_hw`, `hw_csum`,
    /// `hw_gso`: left to the device).
    pub steps: Vec<String>,
    /// The work left to the device (`unchanged` only).
    pub device_work: Option<String>,
    /// Frames that would be sent.
    pub frames: usize,
    /// Each frame that would be sent: its length and layers.
    pub frame_layouts: Vec<String>,
    /// Why it would be dropped.
    pub drop_reason: Option<String>,
}

/// One action and its effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStep {
    /// The action in the rule syntax.
    pub action: String,
    /// The frame's length and layers after the action (for an output: as handed to transmit).
    pub layout: String,
    /// The frame's bytes after the action, in hex.
    pub frame_hex: String,
    /// For an output: transmit preparation for that egress.
    pub tx: Option<TraceTx>,
    /// The action failed: the datapath would drop the packet here (`rx_action_errors`).
    pub error: Option<String>,
}

/// A trace of one frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceReport {
    /// The ingress port number.
    pub in_port: u32,
    /// The frame's length and layers as received.
    pub layout: String,
    /// Where parsing stopped early, if it did (the rest is matched as payload).
    pub parse_error: Option<String>,
    /// The matching rule; none: dropped, counted in `rx_no_match`.
    pub rule: Option<TraceRule>,
    /// The actions in order.
    pub steps: Vec<TraceStep>,
}

/// Decodes a hex string (whitespace and `:` ignored).
pub fn decode_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b':')
        .collect();
    if !digits.len().is_multiple_of(2) {
        return Err("the frame has an odd number of hex digits".into());
    }
    if digits.len() / 2 > MAX_TRACE_FRAME {
        return Err(format!("the frame is longer than {MAX_TRACE_FRAME} bytes"));
    }
    let val = |c: u8| -> Result<u8, String> {
        (c as char)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
            .ok_or_else(|| format!("{:?} is not a hex digit", c as char))
    };
    digits
        .chunks(2)
        .map(|p| match p {
            [h, l] => Ok(val(*h)? << 4 | val(*l)?),
            _ => Err("the frame has an odd number of hex digits".into()),
        })
        .collect()
}

fn hex(frame: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(frame.len() * 2);
    for b in frame {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// `LEN bytes: eth vlan ipv4 udp …`.
pub fn layout_summary(frame: &[u8], cfg: &ParseConfig) -> String {
    let (layout, _) = sluice_wire::parse_partial(frame, cfg);
    let names: Vec<&str> = layout
        .layers
        .as_slice()
        .iter()
        .map(|(l, _)| l.name())
        .collect();
    format!("{} bytes: {}", frame.len(), names.join(" "))
}

/// The actions of `text` (a rule in the text syntax), one string each.
fn action_texts(text: &str) -> Vec<String> {
    text.rsplit_once(" action ")
        .map(|(_, a)| a.split(',').map(str::to_string).collect())
        .unwrap_or_default()
}

fn feature_names(d: &Device) -> Vec<String> {
    Feature::ALL
        .iter()
        .filter(|f| d.features.has(**f))
        .map(|f| f.name().to_string())
        .collect()
}

/// What `tx_prepare` decides for `p` on `device`.
fn trace_tx(port: u32, name: String, device: Device, p: &PacketBuf, cfg: &ParseConfig) -> TraceTx {
    let pkt = TxPacket::new(p.frame(), p.meta);
    let mut out = TxOutput::new();
    let outcome = tx_prepare(&pkt, &device, &mut out);
    let steps: Vec<String> = outcome
        .actions()
        .to_string()
        .split('+')
        .filter(|s| !s.is_empty() && *s != "none")
        .map(str::to_string)
        .collect();
    let mut t = TraceTx {
        port,
        name,
        features: feature_names(&device),
        outcome: String::new(),
        steps,
        device_work: None,
        frames: 0,
        frame_layouts: Vec::new(),
        drop_reason: None,
    };
    match outcome {
        TxOutcome::Unchanged { work, .. } => {
            t.outcome = "unchanged".into();
            t.device_work = Some(format!("{work:?}"));
            t.frames = 1;
            t.frame_layouts = vec![layout_summary(p.frame(), cfg)];
        }
        TxOutcome::Prepared { frames, .. } => {
            t.outcome = "prepared".into();
            t.frames = frames;
            t.frame_layouts = out.frames().map(|(f, _)| layout_summary(f, cfg)).collect();
        }
        TxOutcome::Dropped(reason) => {
            t.outcome = "dropped".into();
            t.drop_reason = Some(reason.to_string());
        }
    }
    t
}

impl Switch {
    /// Traces `frame` as received on port `port` (a name): see the [module](self). Nothing is
    /// sent.
    pub fn trace(&self, port: &str, frame: &[u8]) -> Result<TraceReport, SwitchError> {
        if frame.len() > MAX_TRACE_FRAME {
            return Err(SwitchError::Invalid(format!(
                "the frame is longer than {MAX_TRACE_FRAME} bytes"
            )));
        }
        let ports = self.stats()?;
        let in_port = ports
            .iter()
            .find(|p| p.name == port)
            .map(|p| p.number)
            .ok_or_else(|| SwitchError::NotFound(format!("no port named {port:?}")))?;
        let numbers: Vec<u32> = ports.iter().map(|p| p.number).collect();
        let (cfg, devices) = self.call(move |dp| {
            let devices: Vec<(u32, Option<Device>)> =
                numbers.iter().map(|&n| (n, dp.device(n))).collect();
            (dp.config().parse, devices)
        })?;
        let (layout, err) = sluice_wire::parse_partial(frame, &cfg);
        let key = FlowKey::extract(frame, &layout, in_port);
        let mut report = TraceReport {
            in_port,
            layout: layout_summary(frame, &cfg),
            parse_error: err.map(|e| e.to_string()),
            rule: None,
            steps: Vec::new(),
        };
        let Some((rule, list)) = self.trace_lookup(&key) else {
            return Ok(report);
        };
        let texts = action_texts(&rule.text);
        report.rule = Some(rule);
        let meta = sluice_datapath::port::rx_meta(frame, None, &cfg)
            .map_err(|e| SwitchError::Invalid(format!("the frame cannot be received: {e:?}")))?;
        let mut p = PacketBuf::from_vec(frame.to_vec());
        p.meta = meta;
        p.in_port = in_port;
        for (i, a) in list.iter().enumerate() {
            let action = texts.get(i).cloned().unwrap_or_else(|| format!("{a:?}"));
            let mut step = TraceStep {
                action,
                layout: String::new(),
                frame_hex: String::new(),
                tx: None,
                error: None,
            };
            let mut stop = false;
            match a {
                Action::Output(out) => {
                    let name = ports
                        .iter()
                        .find(|p| p.number == *out)
                        .map(|p| p.name.clone());
                    let device = devices.iter().find(|(n, _)| n == out).and_then(|(_, d)| *d);
                    step.tx = Some(match (name, device) {
                        (Some(name), Some(device)) => trace_tx(*out, name, device, &p, &cfg),
                        _ => TraceTx {
                            port: *out,
                            name: String::new(),
                            features: Vec::new(),
                            outcome: "no_port".into(),
                            steps: Vec::new(),
                            device_work: None,
                            frames: 0,
                            frame_layouts: Vec::new(),
                            drop_reason: Some("no port has this number".into()),
                        },
                    });
                }
                Action::Drop => stop = true,
                other => {
                    if let Err(e) = actions::apply(&mut p, other, &cfg) {
                        step.error = Some(format!("{e:?}"));
                        stop = true;
                    }
                }
            }
            step.layout = layout_summary(p.frame(), &cfg);
            step.frame_hex = hex(p.frame());
            report.steps.push(step);
            if stop {
                break;
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_decoding_refuses_bad_input() {
        assert_eq!(decode_hex("00 ff:1A").expect("hex"), vec![0, 0xff, 0x1a]);
        assert!(decode_hex("abc").is_err());
        assert!(decode_hex("zz").is_err());
        assert!(decode_hex(&"00".repeat(MAX_TRACE_FRAME + 1)).is_err());
        assert_eq!(decode_hex("").expect("empty"), Vec::<u8>::new());
    }

    #[test]
    fn actions_split_from_the_rule_text() {
        assert_eq!(
            action_texts("prio 5 in_port a action push_vlan:802.1q:100:0,output:b"),
            vec!["push_vlan:802.1q:100:0", "output:b"]
        );
        assert!(action_texts("no actions").is_empty());
    }
}
