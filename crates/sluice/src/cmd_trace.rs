//! `sluice trace PORT FRAME_HEX`: what the running switch would do with one frame received on
//! a port (like `ovs-appctl ofproto/trace`); nothing is sent.

use anyhow::{Context, Result};
use sluice_switch::control::{Client, Request};
use sluice_switch::trace::TraceReport;
use std::fmt::Write as _;
use std::path::Path;

/// `sluice trace` options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The ingress port name.
    port: String,
    /// The frame (Ethernet, without FCS) in hex; spaces and `:` are ignored.
    frame: String,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The text form of a trace.
pub fn render(port: &str, r: &TraceReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "frame on port {} ({port}): {}", r.in_port, r.layout);
    if let Some(e) = &r.parse_error {
        let _ = writeln!(out, "  parsing stopped early: {e}");
    }
    let Some(rule) = &r.rule else {
        let _ = writeln!(out, "no rule matches: dropped (rx_no_match)");
        return out;
    };
    let _ = writeln!(
        out,
        "rule: handle {}, priority {}: {}",
        rule.handle, rule.priority, rule.text
    );
    for (i, s) in r.steps.iter().enumerate() {
        let _ = writeln!(out, "  {}. {} -> {}", i + 1, s.action, s.layout);
        let _ = writeln!(out, "     {}", s.frame_hex);
        if let Some(e) = &s.error {
            let _ = writeln!(out, "     action failed: {e}; dropped (rx_action_errors)");
        }
        if let Some(tx) = &s.tx {
            let steps = if tx.steps.is_empty() {
                "none".to_string()
            } else {
                tx.steps.join(" ")
            };
            let _ = writeln!(
                out,
                "     tx_prepare for port {} ({}), features [{}]: {}, steps: {steps}",
                tx.port,
                tx.name,
                tx.features.join(","),
                tx.outcome
            );
            if let Some(w) = &tx.device_work {
                let _ = writeln!(out, "       device work: {w}");
            }
            if let Some(d) = &tx.drop_reason {
                let _ = writeln!(out, "       dropped: {d}");
            }
            for f in &tx.frame_layouts {
                let _ = writeln!(out, "       sends {f}");
            }
        }
        if s.action == "drop" {
            let _ = writeln!(out, "     dropped by the rule");
        }
    }
    out
}

/// Runs `sluice trace`.
pub fn run(socket: &Path, a: Args) -> Result<()> {
    let v = Client::connect(socket)?.request(&Request::Trace {
        port: a.port.clone(),
        frame: a.frame,
    })?;
    if a.json {
        println!("{v}");
        return Ok(());
    }
    let r: TraceReport = serde_json::from_value(v).context("bad trace from the daemon")?;
    print!("{}", render(&a.port, &r));
    Ok(())
}
