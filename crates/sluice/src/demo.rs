//! `sluice demo`: real kernel TCP between two network namespaces through an in-process switch,
//! with offloads on, then off, next to a Linux bridge joining the same two namespaces.
//!
//! Layout (names carry the pid and a counter, so several demos can run at once):
//!
//! ```text
//!  netns a: 192.0.2.1 ── TAP A ──┐                       ┌── TAP B ── 192.0.2.2 :netns b
//!                                └── switch (this process)┘
//!        optional hop (--hop vlan|qinq|vxlan|geneve|gre):
//!                      A → push/encap → X ══veth══ Y → pop/decap → B
//!        (X and Y: AF_PACKET ports on a veth pair in netns hop; and the same way back)
//!
//!  netns a: 198.51.100.1 ── veth ── bridge (netns br) ── veth ── 198.51.100.2 :netns b
//! ```
//!
//! Each run sends the built-in pseudo-random stream for `--seconds` and verifies every byte
//! received ([`sluice_traffic`]). The coverage counters that moved during each switch run
//! are printed, since they are what explains the difference between the two (GSO super-frames
//! passed through whole vs. software segmentation and checksums).
//!
//! Everything is created under RAII guards declared in creation order, so it is removed in
//! reverse order on success, on error and on `SIGINT`/`SIGTERM` (the handler only sets a flag,
//! which every step and the transfer loops poll).

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use sluice_coverage::Sample;
use sluice_datapath::datapath::DP_RX_PACKETS;
use sluice_ports::netns::{run_command, unique_suffix};
use sluice_ports::{Netns, VethPair};
use sluice_switch::{PortKind, PortRequest, Switch, SwitchConfig};
use sluice_traffic::{tcp_transfer_with, TransferOptions, TransferReport};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `sluice demo` options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Length of each transfer, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Print one JSON object with the results as the last line of standard output.
    #[arg(long)]
    pub json: bool,
    /// What the switch puts between the two TAP ports: nothing, an 802.1Q tag, an 802.1ad +
    /// 802.1Q (QinQ) tag pair or a VXLAN tunnel, carried over a veth pair between two AF_PACKET
    /// ports.
    #[arg(long, value_enum, default_value_t = Hop::None)]
    pub hop: Hop,
    /// Skip the Linux bridge comparison run.
    #[arg(long)]
    pub no_bridge: bool,
    /// How long the switch's datapath threads keep polling, yielding between passes, after an
    /// empty pass that follows one with frames, before they sleep, in microseconds (0: sleep at
    /// once), as `busy_poll_us` in `sluice run`'s configuration.
    #[arg(long, value_name = "US", default_value_t = sluice_switch::config::DEFAULT_BUSY_POLL_US, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub busy_poll_us: u64,
    /// The switch's datapath threads, each with its own queue of both TAP ports (default: one
    /// per CPU, pinned as `sluice run` pins them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=sluice_switch::config::MAX_THREADS as u64))]
    pub threads: Option<u64>,
}

impl Args {
    /// The datapath threads the demo's switch runs: `--threads`, else `sluice run`'s default.
    fn datapath_threads(&self) -> usize {
        self.threads
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or_else(sluice_switch::config::default_threads)
    }
}

/// The hop between the two TAP ports.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// TAP A ↔ TAP B directly.
    None,
    /// An 802.1Q tag (VID 100) pushed on the way into the veth hop and popped on the way out.
    Vlan,
    /// An 802.1ad tag (VID 100) outside an 802.1Q tag (VID 200), pushed and popped.
    Qinq,
    /// VXLAN (VNI 42, outer IPv4) encapsulation and decapsulation.
    Vxlan,
    /// Geneve (VNI 42, outer IPv4) encapsulation and decapsulation.
    Geneve,
    /// GRE with key 42 (transparent Ethernet bridging, outer IPv4) encapsulation and
    /// decapsulation. A packet socket takes no GSO type for GRE and GRE frames cannot be packed
    /// as UDP-GSO ones, so each segment crosses the veth as a frame of its own.
    Gre,
}

impl Hop {
    fn name(self) -> &'static str {
        match self {
            Hop::None => "none",
            Hop::Vlan => "vlan",
            Hop::Qinq => "qinq",
            Hop::Vxlan => "vxlan",
            Hop::Geneve => "geneve",
            Hop::Gre => "gre",
        }
    }
}

/// TCP port of the transfers (each namespace is fresh, so it is free).
const TCP_PORT: u16 = 5201;
/// MTU of the TAPs and the bridge path; the hop veth has room for tags or a tunnel's headers.
const MTU: u32 = 1500;
const HOP_MTU: u32 = 1600;

/// One transfer's outcome, as printed.
struct Run {
    label: &'static str,
    report: TransferReport,
    /// How much every coverage counter moved (zeros included), in registration order.
    counters: Vec<Sample>,
}

impl Run {
    /// The counters that moved.
    fn moved(&self) -> impl Iterator<Item = &Sample> {
        self.counters.iter().filter(|c| c.value != 0)
    }

    /// How much the counter `name` moved; an error when no counter has that name.
    fn delta(&self, name: &str) -> Result<u64> {
        Ok(sluice_coverage::lookup(&self.counters, name)?)
    }
}

/// Per port, the features still on after turning everything off (fixed, or refused).
type StillOn = Vec<(String, Vec<String>)>;

/// Everything the demo measured.
struct Outcome {
    ns_a: String,
    ns_b: String,
    on: Run,
    off: Run,
    bridge: Option<Run>,
    /// Features each port still had on in the offloads-off run (fixed, or refused).
    still_on: StillOn,
    /// How many features were turned off for the second run.
    turned_off: usize,
    /// With a hop: each direction across the veth pair, over both switch runs.
    hop: Vec<HopCount>,
    /// The switch's datapath threads, as it ran them.
    threads: usize,
    /// The CPU each datapath thread was pinned to (`None`: left to the scheduler).
    pinned: Vec<Option<usize>>,
}

/// Frames one hop port sent and the other received, and how many of the difference a drop
/// counter explains (the sender's transmit errors and the kernel's transmit drops after it, the
/// receiver's refusals and the kernel's drops before it) (issue 16: every lost frame is counted somewhere).
struct HopCount {
    from: String,
    to: String,
    sent: u64,
    received: u64,
    counted_drops: u64,
}

impl HopCount {
    fn missing(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
}

/// [`HopCount`]s for both directions between hop ports `x` and `y`, once the counters have
/// settled (the last frames of a transfer may still be in a socket queue when it ends).
fn hop_counts(switch: &Switch, x: &str, y: &str) -> Result<Vec<HopCount>> {
    let read = || -> Result<Vec<u64>> {
        Ok(switch
            .stats()
            .context("reading the port counters")?
            .iter()
            .flat_map(|p| [p.rx_packets, p.tx_packets])
            .collect())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut last = read()?;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = read()?;
        if now == last || std::time::Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let stats = switch.stats().context("reading the port counters")?;
    let port = |name: &str| {
        stats
            .iter()
            .find(|p| p.name == name)
            .with_context(|| format!("no counters for hop port {name}"))
    };
    let mut out = Vec::new();
    for (from, to) in [(x, y), (y, x)] {
        let (s, d) = (port(from)?, port(to)?);
        out.push(HopCount {
            from: from.to_string(),
            to: to.to_string(),
            sent: s.tx_packets,
            received: d.rx_packets,
            counted_drops: s.tx_errors
                + s.tx_kernel_drops
                + d.rx_invalid
                + d.rx_truncated
                + d.rx_kernel_drops
                + d.rx_errors,
        });
    }
    Ok(out)
}

/// Runs `sluice demo`.
pub fn run(args: Args) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be above 0 and at most 600");
    }
    if sluice_ports::require_root().is_err() {
        bail!(
            "sluice demo needs root: it creates network namespaces, TAP devices, veth pairs and \
             a bridge (run it with sudo)"
        );
    }
    let stop =
        sluice_ports::signal::stop_on_signals().context("installing SIGINT/SIGTERM handlers")?;
    sluice_switch::register_counters();
    let outcome = match demo(&args, stop) {
        Ok(o) => o,
        Err(e) if stop.load(Ordering::SeqCst) => {
            return Err(
                e.context("interrupted by a signal; everything the demo created has been removed")
            )
        }
        Err(e) => {
            return Err(e.context("sluice demo failed; everything it created has been removed"))
        }
    };
    print!("{}", render(&args, &outcome)?);
    if args.json {
        println!("{}", to_json(&args, &outcome));
    }
    if !all_verified(&outcome) {
        bail!("some bytes did not arrive intact (see `verified` above)");
    }
    Ok(())
}

fn all_verified(o: &Outcome) -> bool {
    o.on.report.verified
        && o.off.report.verified
        && o.bridge.as_ref().is_none_or(|b| b.report.verified)
}

fn check(stop: &AtomicBool) -> Result<()> {
    if stop.load(Ordering::SeqCst) {
        bail!("stop requested");
    }
    Ok(())
}

fn progress(msg: &str) {
    eprintln!("sluice demo: {msg}");
}

/// Sets up, measures, and tears down (by dropping the guards, in reverse creation order).
fn demo(args: &Args, stop: &'static AtomicBool) -> Result<Outcome> {
    let sfx = unique_suffix();
    progress("creating namespaces and the switch");
    let ns_a = Netns::create("sluice-demo-a").context("creating namespace a")?;
    let ns_b = Netns::create("sluice-demo-b").context("creating namespace b")?;
    for ns in [&ns_a, &ns_b] {
        ns.link_up("lo")?;
    }
    check(stop)?;
    let hop_ns = match args.hop {
        Hop::None => None,
        _ => Some(Netns::create("sluice-demo-hop").context("creating the hop namespace")?),
    };
    let bridge_ns = if args.no_bridge {
        None
    } else {
        Some(Netns::create("sluice-demo-br").context("creating the bridge namespace")?)
    };
    let hop_link = match &hop_ns {
        Some(ns) => Some(
            VethPair::create(ns, &format!("sdx{sfx}"), ns, &format!("sdy{sfx}"), HOP_MTU)
                .context("creating the hop veth pair")?,
        ),
        None => None,
    };
    check(stop)?;

    // Declared after the namespaces and links: dropped (TAPs closed and gone) before them.
    let threads = args.datapath_threads();
    let switch = Switch::start(SwitchConfig {
        busy_poll: std::time::Duration::from_micros(args.busy_poll_us),
        threads,
        pin_threads: sluice_switch::config::default_pin_threads(threads),
        ..SwitchConfig::default()
    })
    .context("starting the switch")?;
    let tap_a = format!("sda{sfx}");
    let tap_b = format!("sdb{sfx}");
    for (tap, ns, addr) in [
        (&tap_a, &ns_a, "192.0.2.1/24"),
        (&tap_b, &ns_b, "192.0.2.2/24"),
    ] {
        switch
            .add_port(PortRequest::new(tap, PortKind::Tap))
            .with_context(|| format!("adding TAP port {tap}"))?;
        run_command("ip", &["link", "set", "dev", tap, "netns", ns.name()])
            .with_context(|| format!("moving {tap} into {}", ns.name()))?;
        let mtu = MTU.to_string();
        ns.run(&["ip", "link", "set", "dev", tap, "mtu", &mtu, "up"])?;
        ns.run(&["ip", "addr", "add", addr, "dev", tap])?;
    }
    if let (Some(ns), Some(link)) = (&hop_ns, &hop_link) {
        for end in [link.a(), link.b()] {
            switch
                .add_port(PortRequest {
                    gro: true,
                    netns: Some(ns.name().to_string()),
                    ..PortRequest::new(end, PortKind::AfPacket)
                })
                .with_context(|| format!("adding AF_PACKET port {end} (in {})", ns.name()))?;
        }
    }
    let (x, y) = hop_link.as_ref().map_or(("", ""), |l| (l.a(), l.b()));
    let rules = flow_rules(args.hop, &tap_a, &tap_b, x, y);
    let results = switch
        .add_flows(&rules, true)
        .context("installing the flow rules")?;
    if let Some(bad) = results.iter().find_map(|r| r.error.as_ref()) {
        bail!("a flow rule was refused:\n{bad}");
    }
    check(stop)?;

    let opts = TransferOptions {
        stop: Some(stop),
        ..TransferOptions::new(Duration::from_secs_f64(args.seconds))
    };
    let to_b = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), TCP_PORT);

    progress(&format!(
        "run 1/{}: TCP through the switch, offloads on ({} s)",
        runs(args),
        args.seconds
    ));
    let on = measure("sluice, offloads on", || {
        tcp_transfer_with(&ns_b, to_b, &ns_a, &opts)
    })?;
    check(stop)?;

    let (turned_off, still_on) = offloads_off(&switch)?;
    progress(&format!(
        "run 2/{}: TCP through the switch, offloads off ({turned_off} features turned off)",
        runs(args)
    ));
    let off = measure("sluice, offloads off", || {
        tcp_transfer_with(&ns_b, to_b, &ns_a, &opts)
    })?;
    check(stop)?;

    let mut bridge = None;
    let mut bridge_links = Vec::new();
    if let Some(br) = &bridge_ns {
        progress("run 3/3: TCP through a Linux bridge joining the same namespaces");
        br.run(&["ip", "link", "add", "name", "br0", "type", "bridge"])?;
        br.link_up("br0")?;
        for (ns, side, addr) in [
            (&ns_a, "a", "198.51.100.1/24"),
            (&ns_b, "b", "198.51.100.2/24"),
        ] {
            let inner = format!("bv{side}{sfx}");
            let outer = format!("bp{side}{sfx}");
            bridge_links.push(
                VethPair::create(ns, &inner, br, &outer, MTU)
                    .context("creating a bridge veth pair")?,
            );
            br.run(&["ip", "link", "set", "dev", &outer, "master", "br0"])?;
            ns.run(&["ip", "addr", "add", addr, "dev", &inner])?;
        }
        check(stop)?;
        let to_b = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)), TCP_PORT);
        bridge = Some(measure("linux bridge", || {
            tcp_transfer_with(&ns_b, to_b, &ns_a, &opts)
        })?);
    }

    let hop = if hop_link.is_some() {
        hop_counts(&switch, x, y)?
    } else {
        Vec::new()
    };
    let (threads, pinned) = (switch.threads(), switch.pinned_cpus());
    progress("cleaning up");
    switch.stop().context("stopping the switch")?;
    drop(bridge_links);
    Ok(Outcome {
        ns_a: ns_a.name().to_string(),
        ns_b: ns_b.name().to_string(),
        on,
        off,
        bridge,
        still_on,
        turned_off,
        hop,
        threads,
        pinned,
    })
}

fn runs(args: &Args) -> u32 {
    if args.no_bridge {
        2
    } else {
        3
    }
}

/// The rules joining TAP `a` and TAP `b`, directly or through the hop ports `x` (towards `a`)
/// and `y` (towards `b`), both ways.
fn flow_rules(hop: Hop, a: &str, b: &str, x: &str, y: &str) -> Vec<String> {
    match hop {
        Hop::None => vec![
            format!("prio 10 in_port {a} action output:{b}"),
            format!("prio 10 in_port {b} action output:{a}"),
        ],
        Hop::Vlan => {
            let push = "push_vlan:802.1q:100";
            let m = "vlan_ethtype 802.1q vlan_id 100";
            vec![
                format!("prio 10 in_port {a} action {push},output:{x}"),
                format!("prio 10 in_port {y} {m} action pop_vlan,output:{b}"),
                format!("prio 10 in_port {b} action {push},output:{y}"),
                format!("prio 10 in_port {x} {m} action pop_vlan,output:{a}"),
            ]
        }
        Hop::Qinq => {
            let push = "push_vlan:802.1q:200,push_vlan:802.1ad:100";
            let m = "vlan_ethtype 802.1ad vlan_id 100 cvlan_ethtype 802.1q cvlan_id 200";
            vec![
                format!("prio 10 in_port {a} action {push},output:{x}"),
                format!("prio 10 in_port {y} {m} action pop_vlan,pop_vlan,output:{b}"),
                format!("prio 10 in_port {b} action {push},output:{y}"),
                format!("prio 10 in_port {x} {m} action pop_vlan,pop_vlan,output:{a}"),
            ]
        }
        Hop::Vxlan | Hop::Geneve | Hop::Gre => {
            let kind = hop.name();
            let (ea, eb) = ("198.51.100.101", "198.51.100.102");
            vec![
                format!(
                    "prio 10 in_port {a} action encap:{kind}:id=42:src={ea}:dst={eb},output:{x}"
                ),
                format!("prio 10 in_port {y} enc_key_id 42 action decap,output:{b}"),
                format!(
                    "prio 10 in_port {b} action encap:{kind}:id=42:src={eb}:dst={ea},output:{y}"
                ),
                format!("prio 10 in_port {x} enc_key_id 42 action decap,output:{a}"),
            ]
        }
    }
}

/// Turns off, through the switch, every feature of every port that is on and changeable
/// (software GRO included). Features that refuse (because another depends on them) are retried
/// after the others. Returns how many were turned off and, per port, what is still on.
fn offloads_off(switch: &Switch) -> Result<(usize, StillOn)> {
    let mut turned_off = 0;
    let mut still_on = Vec::new();
    for port in switch.ports().context("listing the ports")? {
        let mut pending: Vec<String> = switch
            .features(&port.name)
            .with_context(|| format!("reading the features of {}", port.name))?
            .into_iter()
            .filter(|f| f.on && f.changeable)
            .map(|f| f.name)
            .collect();
        // Dependent features (TSO needs checksum offload, …) go first; retry until no progress.
        loop {
            let before = pending.len();
            pending.retain(|name| {
                let ok = switch
                    .set_features(&port.name, &[(name.clone(), false)])
                    .is_ok();
                if ok {
                    turned_off += 1;
                }
                !ok
            });
            if pending.is_empty() || pending.len() == before {
                break;
            }
        }
        let on: Vec<String> = switch
            .features(&port.name)?
            .into_iter()
            .filter(|f| f.on)
            .map(|f| f.name)
            .collect();
        if !on.is_empty() {
            still_on.push((port.name.clone(), on));
        }
    }
    Ok((turned_off, still_on))
}

/// Runs one transfer and records the coverage counters that moved meanwhile.
fn measure(
    label: &'static str,
    transfer: impl FnOnce() -> std::io::Result<TransferReport>,
) -> Result<Run> {
    let before = sluice_coverage::snapshot();
    let report = transfer().with_context(|| format!("the {label} transfer"))?;
    let after = sluice_coverage::snapshot();
    let counters = sluice_coverage::deltas(&before, &after);
    progress(&format!(
        "  {label}: {:.2} Gbit/s, {} bytes, {}",
        report.gbps,
        report.bytes,
        if report.verified {
            "every byte verified"
        } else {
            "NOT VERIFIED"
        }
    ));
    Ok(Run {
        label,
        report,
        counters,
    })
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// The human-readable table.
fn render(args: &Args, o: &Outcome) -> Result<String> {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Kernel TCP from 192.0.2.1 ({}) to 192.0.2.2 ({}) through the switch's TAP ports, \
         hop: {}, {} s per run, {} datapath thread(s){}.",
        o.ns_a,
        o.ns_b,
        args.hop.name(),
        args.seconds,
        o.threads,
        if o.pinned.iter().any(Option::is_some) {
            ", pinned"
        } else {
            ""
        }
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<22} {:>8} {:>15} {:>9} {:>14}",
        "run", "Gbit/s", "bytes", "verified", "bytes/packet"
    );
    for r in [Some(&o.on), Some(&o.off), o.bridge.as_ref()]
        .into_iter()
        .flatten()
    {
        // Stream bytes per packet the switch received (both directions, ACKs included): how
        // much work one trip through the datapath does.
        let rx = r.delta(DP_RX_PACKETS.name())?;
        let per_packet = r
            .report
            .bytes
            .checked_div(rx)
            .map_or_else(|| "-".to_string(), |b| b.to_string());
        let _ = writeln!(
            s,
            "{:<22} {:>8.2} {:>15} {:>9} {:>14}",
            r.label,
            r.report.gbps,
            r.report.bytes,
            if r.report.verified { "yes" } else { "NO" },
            per_packet
        );
        if let Some(at) = r.report.mismatch_at {
            let _ = writeln!(s, "{:<22} first wrong byte at stream offset {at}", "");
        }
    }
    let _ = writeln!(s);
    if let Some(x) = ratio(o.on.report.gbps, o.off.report.gbps) {
        let _ = writeln!(s, "offloads on / off:           {x:.2}x");
    }
    if let Some(x) = o
        .bridge
        .as_ref()
        .and_then(|b| ratio(o.on.report.gbps, b.report.gbps))
    {
        let _ = writeln!(s, "sluice (on) / linux bridge:  {x:.2}x");
    }
    let _ = writeln!(
        s,
        "features turned off for the second run: {}",
        o.turned_off
    );
    for (port, on) in &o.still_on {
        let _ = writeln!(s, "  still on at {port}: {}", on.join(", "));
    }
    for h in &o.hop {
        let _ = writeln!(
            s,
            "hop {} -> {}: sent {}, received {}, missing {}, in a drop counter {}",
            h.from,
            h.to,
            h.sent,
            h.received,
            h.missing(),
            h.counted_drops
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<32} {:>14} {:>14}",
        "coverage counters that moved", "offloads on", "offloads off"
    );
    let mut names: Vec<&str> = o.on.moved().map(|c| c.name).collect();
    for c in o.off.moved() {
        if !names.contains(&c.name) {
            names.push(c.name);
        }
    }
    for n in names {
        let _ = writeln!(
            s,
            "  {:<30} {:>14} {:>14}",
            n,
            o.on.delta(n)?,
            o.off.delta(n)?
        );
    }
    Ok(s)
}

/// Every counter with how much it moved, zeros included, so that a reader looking up a name
/// that does not exist finds it missing rather than 0.
fn counters_json(r: &Run) -> Value {
    let mut m = Map::new();
    for c in &r.counters {
        m.insert(c.name.to_string(), json!(c.value));
    }
    Value::Object(m)
}

fn run_json(r: &Run) -> Value {
    json!({
        "gbps": r.report.gbps,
        "bytes": r.report.bytes,
        "sent": r.report.sent,
        "seconds": r.report.seconds,
        "verified": r.report.verified,
        "mismatch_at": r.report.mismatch_at,
    })
}

/// The `--json` line.
fn to_json(args: &Args, o: &Outcome) -> Value {
    json!({
        "offloads_on_gbps": o.on.report.gbps,
        "offloads_off_gbps": o.off.report.gbps,
        "bridge_gbps": o.bridge.as_ref().map(|b| b.report.gbps),
        "bytes_verified": all_verified(o),
        "hop": args.hop.name(),
        "hop_frames": o.hop.iter().map(|h| json!({
            "from": h.from,
            "to": h.to,
            "sent": h.sent,
            "received": h.received,
            "missing": h.missing(),
            "counted_drops": h.counted_drops,
        })).collect::<Vec<_>>(),
        "seconds": args.seconds,
        "busy_poll_us": args.busy_poll_us,
        "threads": o.threads,
        "pinned_cpus": o.pinned,
        "runs": {
            "offloads_on": run_json(&o.on),
            "offloads_off": run_json(&o.off),
            "bridge": o.bridge.as_ref().map(run_json),
        },
        "counters": {
            "offloads_on": counters_json(&o.on),
            "offloads_off": counters_json(&o.off),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_flow::{parse_rule, PortNames};

    #[test]
    fn every_hop_has_rules_the_parser_accepts_both_ways() {
        let mut names = PortNames::new();
        for (i, n) in ["ta", "tb", "hx", "hy"].iter().enumerate() {
            names.insert(n, i as u32 + 1);
        }
        for &hop in <Hop as clap::ValueEnum>::value_variants() {
            let rules = flow_rules(hop, "ta", "tb", "hx", "hy");
            assert_eq!(rules.len(), if hop == Hop::None { 2 } else { 4 });
            for r in &rules {
                if let Err(e) = parse_rule(r, &names) {
                    panic!("{hop:?}: {}", e.render(r));
                }
            }
            // Each TAP is an input and an output.
            for t in ["ta", "tb"] {
                assert!(rules.iter().any(|r| r.contains(&format!("in_port {t} "))));
                assert!(rules.iter().any(|r| r.contains(&format!("output:{t}"))));
            }
        }
    }
}
