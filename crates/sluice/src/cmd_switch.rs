//! The daemon (`sluice run`) and the control commands that talk to it (`sluice port|flow|
//! features|stats|coverage`).

use crate::daemon_log::PortStates;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use sluice_switch::config::{
    check_threads, default_pin_threads, default_threads, Config, LogLevel, DEFAULT_CONFIG,
    DEFAULT_DB,
};
use sluice_switch::control::{Client, ControlServer, Request, ServerConfig, DEFAULT_SOCKET};
use sluice_switch::metrics::{self, MetricsServer, RateInfo};
use sluice_switch::{PortKind, PortRequest, Switch, SwitchConfig};
use std::collections::BTreeMap;
use std::io::Write as _;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `sluice run` options.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// A JSON configuration file (see `--print-default-config`); the embedded default otherwise.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the embedded default configuration and exit.
    #[arg(long)]
    print_default_config: bool,
    /// The control socket's group (name or number; default 0, root's): its members may use
    /// the socket besides root. Overrides the configuration's `socket_group`.
    #[arg(long, value_name = "NAME")]
    socket_group: Option<String>,
    /// Datapath threads, each with its own queue of every port (overrides `threads`; default:
    /// one per CPU). 1 runs a single datapath thread.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Leave the datapath threads to the scheduler instead of pinning thread i to the i-th CPU
    /// the daemon may run on (overrides `pin_threads`).
    #[arg(long)]
    no_pin_threads: bool,
    /// Most flow rules (overrides `max_rules`).
    #[arg(long, value_name = "N")]
    max_rules: Option<usize>,
    /// The durable store's directory (overrides `db`; default /var/lib/sluice): ports, their
    /// features and rules with their handles survive a restart.
    #[arg(long, value_name = "DIR", conflicts_with = "no_db")]
    db: Option<PathBuf>,
    /// Run without a durable store (overrides `db`): everything is forgotten on exit.
    #[arg(long)]
    no_db: bool,
    /// Most distinct masks in the flow table (overrides `max_masks`).
    #[arg(long, value_name = "N")]
    max_masks: Option<usize>,
    /// Most bytes of rules, by the table's per-rule estimate (overrides `max_rule_bytes`).
    #[arg(long, value_name = "BYTES")]
    max_rule_bytes: Option<usize>,
    /// Serve Prometheus text metrics on `http://ADDR/metrics` (`HOST:PORT`; overrides
    /// `metrics`).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// How much the daemon says on stderr (overrides `log_level`; default info).
    #[arg(long, value_name = "LEVEL", value_parser = parse_log_level)]
    log_level: Option<LogLevel>,
}

/// `--log-level NAME`.
fn parse_log_level(name: &str) -> Result<LogLevel, String> {
    LogLevel::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = LogLevel::ALL.iter().map(|(n, _)| *n).collect();
        format!("one of {} expected", names.join(", "))
    })
}

/// Runs the daemon until SIGINT/SIGTERM or a `shutdown` request.
pub fn run_daemon(socket_arg: &Path, args: RunArgs) -> Result<()> {
    if args.print_default_config {
        println!("{DEFAULT_CONFIG}");
        return Ok(());
    }
    let text = match &args.config {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("cannot read the configuration {}", p.display()))?,
        None => DEFAULT_CONFIG.to_string(),
    };
    let where_ = args
        .config
        .as_ref()
        .map_or("the default configuration".to_string(), |p| {
            p.display().to_string()
        });
    let config = Config::parse(&text).map_err(|e| anyhow::anyhow!("{where_}: {e}"))?;
    crate::daemon_log::init(args.log_level.or(config.log_level).unwrap_or_default());
    // Big tables grow in place (see `sluice_ports::memory`), unless the operator set it.
    if sluice_ports::memory::mmap_threshold_from_env() {
        tracing::debug!("malloc's mapping threshold: the environment's");
    } else if !sluice_ports::memory::fix_mmap_threshold(sluice_ports::memory::DAEMON_MMAP_THRESHOLD)
    {
        tracing::debug!("malloc's mapping threshold left as it is (not glibc?)");
    }
    let mut sc = SwitchConfig::default();
    if let Some(b) = config.batch {
        sc.datapath.batch = b;
    }
    if let Some(t) = config.poll_timeout_us {
        sc.poll_timeout = Duration::from_micros(t.clamp(10, 1_000_000));
    }
    if let Some(t) = config.busy_poll_us {
        sc.busy_poll = Duration::from_micros(t);
    }
    sc.threads = match args.threads.or(config.threads) {
        Some(n) => check_threads(n).map_err(anyhow::Error::msg)?,
        None => default_threads(),
    };
    sc.pin_threads = !args.no_pin_threads
        && config
            .pin_threads
            .unwrap_or(default_pin_threads(sc.threads));
    if let Some(m) = args.max_rules.or(config.max_rules) {
        sc.max_rules = m;
    }
    if let Some(m) = args.max_masks.or(config.max_masks) {
        sc.max_masks = m;
    }
    if let Some(m) = args.max_rule_bytes.or(config.max_rule_bytes) {
        sc.max_rule_bytes = m;
    }
    let mut server_cfg = ServerConfig::default();
    if let Some(g) = args.socket_group.as_ref().or(config.socket_group.as_ref()) {
        server_cfg.group =
            sluice_ports::cred::group_id(g).with_context(|| format!("socket group {g:?}"))?;
    }
    if let Some(n) = config.max_connections {
        server_cfg.max_connections = n;
    }
    if let Some(ms) = config.write_timeout_ms {
        server_cfg.write_timeout = Duration::from_millis(ms);
    }
    // An explicit --socket wins over the configuration's.
    let socket = if socket_arg != Path::new(DEFAULT_SOCKET) {
        socket_arg.to_path_buf()
    } else {
        config
            .socket
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
    };
    let signal_stop = sluice_ports::signal::stop_on_signals()
        .context("cannot install the SIGINT/SIGTERM handlers")?;
    sluice_switch::register_counters();
    let server = ControlServer::bind_with(&socket, server_cfg)?;
    let metrics = match args.metrics.as_ref().or(config.metrics.as_ref()) {
        Some(addr) => Some(MetricsServer::bind(addr)?),
        None => None,
    };
    let switch = Arc::new(Switch::start(sc)?);
    let db = if args.no_db {
        None
    } else {
        args.db
            .or_else(|| config.db.unwrap_or_else(|| Some(PathBuf::from(DEFAULT_DB))))
    };
    let mut seed = true;
    if let Some(dir) = &db {
        let report = switch
            .open_store(dir)
            .with_context(|| format!("cannot start from the store {}", dir.display()))?;
        for w in &report.warnings {
            tracing::warn!("{w}");
        }
        tracing::info!(
            "store {}: {} ports ({} down), {} rules, {} quotas restored",
            dir.display(),
            report.ports,
            report.ports_down,
            report.rules,
            report.quotas
        );
        // The configuration's ports and rules seed a new store; afterwards the store wins.
        seed = report.fresh;
    }
    let (ports, flows) = if seed {
        (config.ports, config.flows)
    } else {
        (Vec::new(), Vec::new())
    };
    for p in ports {
        let name = p.name.clone();
        let info = switch
            .add_port(p)
            .with_context(|| format!("{where_}: port {name:?}"))?;
        tracing::info!("port {} {} ({})", info.number, info.name, info.kind);
    }
    if !flows.is_empty() {
        let res = switch.add_flows(&flows, true)?;
        let errors: Vec<String> = res
            .iter()
            .filter_map(|r| {
                r.error
                    .as_ref()
                    .map(|e| format!("flow {}: {e}", r.index + 1))
            })
            .collect();
        if !errors.is_empty() {
            bail!("{where_}: rules rejected:\n{}", errors.join("\n"));
        }
    }
    let pinned_cpus = switch.pinned_cpus();
    let pinned = if pinned_cpus.iter().any(Option::is_some) {
        let cpus: Vec<String> = pinned_cpus
            .iter()
            .map(|c| c.map_or_else(|| "-".to_string(), |c| c.to_string()))
            .collect();
        format!(", pinned to CPUs {}", cpus.join(", "))
    } else {
        String::new()
    };
    tracing::info!(
        "listening on {} ({} datapath thread{}{pinned})",
        server.path().display(),
        switch.threads(),
        if switch.threads() == 1 { "" } else { "s" }
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut helpers = vec![metrics::spawn_sampler(Arc::clone(&stop))?];
    if let Some(m) = metrics {
        tracing::info!("metrics on http://{}/metrics", m.local_addr()?);
        helpers.push(m.spawn(Arc::clone(&switch), Arc::clone(&stop))?);
    }
    let watcher = {
        let stop = Arc::clone(&stop);
        let switch = Arc::clone(&switch);
        std::thread::spawn(move || {
            let mut last_revive = Instant::now();
            let mut states = PortStates::default();
            while !stop.load(Ordering::SeqCst) {
                if signal_stop.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                }
                // Ports whose device vanished: reattach them when it is back.
                if last_revive.elapsed() >= Duration::from_secs(1) {
                    last_revive = Instant::now();
                    let _ = switch.revive_down_ports();
                    if let Ok(ports) = switch.stats() {
                        states.observe(&ports);
                    }
                    if let Err(e) = switch.compact_store() {
                        tracing::warn!("compaction failed: {e}");
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let served = server.run(&switch, &stop);
    stop.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    for h in helpers {
        let _ = h.join();
    }
    drop(server);
    // A connection still finishing a request may hold the switch: stop it anyway (its call
    // fails); shutdown never waits for a client.
    match Arc::try_unwrap(switch) {
        Ok(s) => s.stop()?,
        Err(s) => s.halt()?,
    }
    served.context("control socket failed")?;
    tracing::info!("stopped");
    Ok(())
}

fn client(socket: &Path) -> Result<Client> {
    Ok(Client::connect(socket)?)
}

fn request(socket: &Path, req: &Request) -> Result<Value> {
    Ok(client(socket)?.request(req)?)
}

/// `sluice port …`
#[derive(clap::Subcommand, Debug)]
pub enum PortCmd {
    /// Open a port on the running switch.
    Add {
        /// Interface name (a TAP is created with it; AF_PACKET attaches to it).
        name: String,
        /// Port type.
        #[arg(long, value_enum, default_value = "tap")]
        kind: KindArg,
        /// Port number for rules (default: lowest free from 1).
        #[arg(long)]
        number: Option<u32>,
        /// Software GRO on received frames.
        #[arg(long)]
        gro: bool,
        /// Start with every offload off.
        #[arg(long)]
        no_offloads: bool,
        /// TAP: keep the 12-byte virtio_net_hdr (no UDP-tunnel GSO: VXLAN / Geneve
        /// super-frames are segmented before they cross the TAP).
        #[arg(long)]
        no_udp_tunnel_gso: bool,
        /// Open the port inside this network namespace (`ip netns` name).
        #[arg(long)]
        netns: Option<String>,
        /// Settings, as `sluice port set` takes them (`vlan_depth=2 gso_max_size=32768 …`).
        settings: Vec<String>,
    },
    /// Change a port's settings: `KEY=VALUE …`, all or none. Keys: `gro`, `gro_tunnel`,
    /// `gro_udp` (on/off); `vlan_depth` (stacked VLAN tags the device segments and checksums
    /// under, 0-8), `envelope` (bytes of tags beyond MTU, 0-64), `gso_max_size` (bytes),
    /// `gso_max_segs` (a number, or `default` for the port's own).
    Set {
        /// The port name.
        name: String,
        /// Changes, e.g. `vlan_depth=2 gro_udp=on`.
        #[arg(required = true)]
        settings: Vec<String>,
    },
    /// One port: kind, state, MTU, features and its settings in effect.
    Show {
        /// The port name.
        name: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Close a port (refused while rules name it, unless --force).
    Del {
        /// The port name.
        name: String,
        /// Delete the rules that name the port (in_port or output) with it.
        #[arg(long)]
        force: bool,
    },
    /// Open a port that is down (its device vanished) again; a TAP is created again.
    Up {
        /// The port name.
        name: String,
    },
    /// List ports.
    List {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Port types on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum KindArg {
    /// TAP with virtio_net_hdr.
    Tap,
    /// AF_PACKET on an existing interface.
    Afpacket,
    /// TUN with virtio_net_hdr: an L3 port (IP packets, no Ethernet header).
    Tun,
}

/// Runs `sluice port …`.
pub fn run_port(socket: &Path, cmd: PortCmd) -> Result<()> {
    match cmd {
        PortCmd::Add {
            name,
            kind,
            number,
            gro,
            no_offloads,
            no_udp_tunnel_gso,
            netns,
            settings,
        } => {
            let mut r = PortRequest::new(
                &name,
                match kind {
                    KindArg::Tap => PortKind::Tap,
                    KindArg::Afpacket => PortKind::AfPacket,
                    KindArg::Tun => PortKind::Tun,
                },
            );
            r.number = number;
            r.gro = gro;
            r.offloads = !no_offloads;
            r.udp_tunnel_gso = !no_udp_tunnel_gso;
            r.netns = netns;
            for (k, v) in parse_settings(&settings)? {
                r.set(&k, &v).map_err(anyhow::Error::msg)?;
            }
            let v = request(socket, &Request::PortAdd(r))?;
            println!(
                "port {} {} added",
                v.get("number").unwrap_or(&Value::Null),
                name
            );
            Ok(())
        }
        PortCmd::Del { name, force } => {
            request(
                socket,
                &Request::PortDel {
                    name: name.clone(),
                    force,
                },
            )?;
            println!("port {name} removed");
            Ok(())
        }
        PortCmd::Up { name } => {
            request(socket, &Request::PortUp { name: name.clone() })?;
            println!("port {name} up");
            Ok(())
        }
        PortCmd::Set { name, settings } => {
            let set = parse_settings(&settings)?
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            let v = request(
                socket,
                &Request::PortSet {
                    name: name.clone(),
                    set,
                },
            )?;
            println!("{name}: {}", settings_line(&v["settings"]));
            Ok(())
        }
        PortCmd::Show { name, json } => {
            let v = request(socket, &Request::PortShow { name })?;
            if json {
                println!("{v}");
                return Ok(());
            }
            let feats: Vec<&str> = v["features"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            println!(
                "port {} {} ({}, {}), mtu {}",
                v["number"].as_u64().unwrap_or(0),
                v["name"].as_str().unwrap_or("?"),
                v["kind"].as_str().unwrap_or("?"),
                v["state"].as_str().unwrap_or("?"),
                v["mtu"].as_u64().unwrap_or(0)
            );
            println!("settings: {}", settings_line(&v["settings"]));
            println!("features: {}", feats.join(","));
            Ok(())
        }
        PortCmd::List { json } => {
            let v = request(socket, &Request::PortList {})?;
            if json {
                println!("{v}");
                return Ok(());
            }
            println!(
                "{:>4}  {:<16} {:<9} {:<5} {:>6} {:<4} features",
                "port", "name", "kind", "state", "mtu", "gro"
            );
            for p in v.as_array().map(Vec::as_slice).unwrap_or(&[]) {
                let feats: Vec<&str> = p["features"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                println!(
                    "{:>4}  {:<16} {:<9} {:<5} {:>6} {:<4} {}",
                    p["number"].as_u64().unwrap_or(0),
                    p["name"].as_str().unwrap_or("?"),
                    p["kind"].as_str().unwrap_or("?"),
                    p["state"].as_str().unwrap_or("?"),
                    p["mtu"].as_u64().unwrap_or(0),
                    if p["gro"].as_bool().unwrap_or(false) {
                        "on"
                    } else {
                        "off"
                    },
                    feats.join(",")
                );
            }
            Ok(())
        }
    }
}

/// `KEY=VALUE` arguments as pairs.
fn parse_settings(args: &[String]) -> Result<Vec<(String, String)>> {
    args.iter()
        .map(|a| match a.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!(
                "{a:?}: expected KEY=VALUE (keys: {})",
                sluice_switch::PORT_SETTINGS.join(", ")
            ),
        })
        .collect()
}

/// A port's settings (`PortSettingsInfo` as JSON) as `key=value …`, in the order of
/// `PORT_SETTINGS`.
fn settings_line(v: &Value) -> String {
    sluice_switch::PORT_SETTINGS
        .iter()
        .map(|k| match &v[*k] {
            Value::Bool(b) => format!("{k}={}", if *b { "on" } else { "off" }),
            Value::Null => format!("{k}=?"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads a rules file: (line number, rule) for every non-blank, non-comment line.
/// `sluice flow add|del|mod` against the daemon: rules from the arguments and/or a file,
/// streamed in large requests with a progress line; per-line errors on stderr.
pub fn flow_add_daemon(
    socket: &Path,
    rules: &[String],
    batch: Option<&Path>,
    atomic: bool,
    op: sluice_switch::control::TextOp,
) -> Result<()> {
    if rules.is_empty() && batch.is_none() {
        bail!("no rules given (arguments or --batch FILE)");
    }
    crate::flow_load::flow_batch_daemon(client(socket)?, rules, batch, atomic, op)
}

/// `sluice flow dump` (`stats`: with each rule's counters).
pub fn flow_dump(socket: &Path, stats: bool) -> Result<()> {
    let v = request(socket, &Request::FlowDump { stats })?;
    // Buffered (a million rules is a million lines), and a closed pipe (`| head`) is an error
    // that `main` takes as success, not a panic as `println!` makes it.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in v.as_array().map(Vec::as_slice).unwrap_or(&[]) {
        writeln!(out, "{}", line.as_str().unwrap_or(""))?;
    }
    out.flush()?;
    Ok(())
}

/// `sluice features show PORT`.
pub fn features_show(socket: &Path, port: &str) -> Result<()> {
    let v = request(
        socket,
        &Request::FeaturesShow {
            port: port.to_string(),
        },
    )?;
    println!("Features for {port}:");
    for f in v.as_array().map(Vec::as_slice).unwrap_or(&[]) {
        println!(
            "{}: {}{}",
            f["name"].as_str().unwrap_or("?"),
            if f["on"].as_bool().unwrap_or(false) {
                "on"
            } else {
                "off"
            },
            if f["changeable"].as_bool().unwrap_or(false) {
                ""
            } else {
                " [fixed]"
            }
        );
    }
    Ok(())
}

/// `sluice features set PORT name=on|off ...`.
pub fn features_set(socket: &Path, port: &str, changes: &[String]) -> Result<()> {
    if changes.is_empty() {
        bail!("nothing to set: give NAME=on|off (ethtool names, e.g. tso=off rx-gro=on)");
    }
    let mut set = BTreeMap::new();
    for c in changes {
        let Some((name, val)) = c.split_once('=') else {
            bail!("{c:?}: expected NAME=on|off");
        };
        let on = match val {
            "on" | "1" | "true" => true,
            "off" | "0" | "false" => false,
            other => bail!("{c:?}: {other:?} is not on or off"),
        };
        set.insert(name.to_string(), on);
    }
    request(
        socket,
        &Request::FeaturesSet {
            port: port.to_string(),
            set,
        },
    )?;
    println!("{port}: {}", changes.join(" "));
    Ok(())
}

/// `sluice quota …`
#[derive(clap::Subcommand, Debug)]
pub enum QuotaCmd {
    /// Show each quota and its use.
    Show {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Change quotas: `rules=N`, `masks=N`, `rule_bytes=N` (any of them; all or none is
    /// applied). Refused below what is in use. Kept in the store with `--db`.
    Set {
        /// `NAME=VALUE` pairs.
        #[arg(required = true, value_name = "NAME=VALUE")]
        changes: Vec<String>,
    },
}

/// Runs `sluice quota …`.
pub fn run_quota(socket: &Path, cmd: QuotaCmd) -> Result<()> {
    let v = match cmd {
        QuotaCmd::Show { json } => {
            let v = request(socket, &Request::QuotaShow {})?;
            if json {
                println!("{v}");
                return Ok(());
            }
            v
        }
        QuotaCmd::Set { changes } => {
            let mut q = sluice_switch::QuotaChange::default();
            for c in &changes {
                let Some((name, val)) = c.split_once('=') else {
                    bail!("{c:?}: expected NAME=VALUE (rules, masks or rule_bytes)");
                };
                let n: usize = val
                    .parse()
                    .with_context(|| format!("{c:?}: {val:?} is not a count"))?;
                let slot = match name {
                    "rules" => &mut q.rules,
                    "masks" => &mut q.masks,
                    "rule_bytes" => &mut q.rule_bytes,
                    other => bail!("{c:?}: no quota {other:?} (rules, masks or rule_bytes)"),
                };
                *slot = Some(n);
            }
            request(socket, &Request::QuotaSet(q))?
        }
    };
    println!("{:<12} {:>14} {:>14}", "quota", "limit", "used");
    for (name, limit, used) in [
        ("rules", "rules", "rules_used"),
        ("masks", "masks", "masks_used"),
        ("rule_bytes", "rule_bytes", "rule_bytes_used"),
    ] {
        println!(
            "{name:<12} {:>14} {:>14}",
            v[limit].as_u64().unwrap_or(0),
            v[used].as_u64().unwrap_or(0)
        );
    }
    Ok(())
}

/// `sluice stats`.
pub fn stats(socket: &Path, json: bool) -> Result<()> {
    let v = request(socket, &Request::Stats {})?;
    if json {
        println!("{v}");
        return Ok(());
    }
    println!(
        "{:>4} {:<16} {:<5} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10} {:>10} {:>10}",
        "port",
        "name",
        "state",
        "rx_packets",
        "rx_bytes",
        "tx_packets",
        "tx_bytes",
        "rx_drops",
        "tx_drops",
        "hw_gso",
        "sw_gso"
    );
    for p in v.as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let g = |k: &str| p[k].as_u64().unwrap_or(0);
        let rx_drops = g("rx_no_match")
            + g("rx_dropped_by_rule")
            + g("rx_action_errors")
            + g("rx_invalid")
            + g("rx_truncated")
            + g("rx_kernel_drops")
            + g("rx_uso_drops");
        let tx_drops = g("tx_prepare_drops") + g("tx_errors") + g("tx_kernel_drops");
        println!(
            "{:>4} {:<16} {:<5} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10} {:>10} {:>10}",
            g("number"),
            p["name"].as_str().unwrap_or("?"),
            p["state"].as_str().unwrap_or("?"),
            g("rx_packets"),
            g("rx_bytes"),
            g("tx_packets"),
            g("tx_bytes"),
            rx_drops,
            tx_drops,
            g("tx_hw_gso"),
            g("tx_soft_gso") + g("tx_partial_gso")
        );
    }
    Ok(())
}

/// `sluice coverage`: each counter's rate per second over the last 5 s, minute and hour (from
/// the samples the daemon takes every 5 s) and its total, as `ovs-appctl coverage/show` shows
/// them; `--json`: an object counter name → `{"per_sec_5s", "per_sec_1m", "per_sec_1h",
/// "total"}`.
pub fn coverage(socket: &Path, all: bool, json: bool) -> Result<()> {
    let v = request(socket, &Request::Coverage { all, rates: true })?;
    let rates: Vec<RateInfo> =
        serde_json::from_value(v).context("bad coverage rates from the daemon")?;
    if json {
        let map: serde_json::Map<String, Value> = rates
            .into_iter()
            .map(|r| {
                let name = r.name.clone();
                let mut o = serde_json::to_value(r).unwrap_or(Value::Null);
                if let Some(m) = o.as_object_mut() {
                    m.remove("name");
                }
                (name, o)
            })
            .collect();
        println!("{}", Value::Object(map));
        return Ok(());
    }
    print!("{}", metrics::rates_table(&rates));
    Ok(())
}
