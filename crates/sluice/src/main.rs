//! The `sluice` command: the switch daemon (`run`), its control client (`port`, `flow`,
//! `features`, `stats`, `coverage`), the demo, and offline tools over captures.

mod cmd_features;
mod cmd_flow;
mod cmd_gro;
mod cmd_gso;
mod cmd_pcap_switch;
mod cmd_switch;
mod cmd_trace;
mod cmd_tx;
mod daemon_log;
mod demo;
mod flow_cli;
mod flow_load;
mod inspect;
mod pcap_link;
mod spec;

use anyhow::Result;
use clap::{Parser, Subcommand};
use sluice_wire::ParseConfig;
use std::io::{BufWriter, ErrorKind};
use std::path::PathBuf;
use std::process::ExitCode;

/// Sluice: a userspace packet datapath whose network offloads are done right.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    /// The daemon's control socket (for `run` and the commands that talk to it).
    #[arg(long, global = true, value_name = "PATH", default_value = sluice_switch::control::DEFAULT_SOCKET)]
    socket: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Demonstrate the switch: real kernel TCP between two network namespaces through it,
    /// offloads on and off (and a Linux bridge for comparison); prints throughput and the
    /// coverage counters that explain the difference.
    Demo(demo::Args),
    /// Run the switch daemon (control socket: `--socket`).
    Run(cmd_switch::RunArgs),
    /// Ports of the running switch.
    #[command(subcommand)]
    Port(cmd_switch::PortCmd),
    /// The flow table's quotas (rules, distinct masks, rule bytes) of the running switch.
    ///
    /// `quota set` changes them at run time (each at least what is in use); with a store
    /// (`sluice run --db`) the new values are kept and win over the configuration and flags on
    /// the next start.
    #[command(subcommand)]
    Quota(cmd_switch::QuotaCmd),
    /// Per-port counters of the running switch.
    Stats {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Coverage counters of the running switch (every software fallback is counted).
    Coverage {
        /// Include counters at zero.
        #[arg(long)]
        all: bool,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Offline tools over pcap / pcapng captures.
    #[command(subcommand)]
    Pcap(PcapCmd),
    /// Device offload features (named as `ethtool -k` names them).
    #[command(subcommand)]
    Features(cmd_features::Cmd),
    /// Flow rules (tc-flower-like syntax).
    #[command(subcommand)]
    Flow(cmd_flow::FlowCmd),
    /// Benchmarks that print their numbers (`--json` for machines).
    #[command(subcommand)]
    Bench(cmd_flow::BenchCmd),
    /// What the running switch would do with one frame received on a port: the rule, each
    /// action's effect, each output's transmit decisions (nothing is sent).
    Trace(cmd_trace::Args),
}

#[derive(Subcommand, Debug)]
enum PcapCmd {
    /// Print every frame's layers, VLAN stack, tunnel, offsets and checksum verdicts.
    Inspect {
        /// The capture (pcap or pcapng; Ethernet, or raw IP: link type RAW, IPv4, IPv6).
        file: PathBuf,
        /// One JSON object per frame per line instead of the human-readable line.
        #[arg(long)]
        json: bool,
        /// Decode UDP to this destination port as VXLAN (repeatable; default 4789).
        #[arg(long = "vxlan-port", value_name = "PORT")]
        vxlan_ports: Vec<u16>,
        /// Decode UDP to this destination port as Geneve (repeatable; default 6081).
        #[arg(long = "geneve-port", value_name = "PORT")]
        geneve_ports: Vec<u16>,
    },
    /// Segment every frame in software (GSO), as for a device with no offloads.
    Gso(cmd_gso::Args),
    /// Coalesce the frames of a capture (GRO) with Linux's merge rules.
    Gro(cmd_gro::Args),
    /// Run every frame through transmit preparation for a device with the given features.
    Tx(cmd_tx::Args),
    /// Run the switch's datapath offline: capture files as ports, rules deciding.
    Switch(cmd_pcap_switch::Args),
}

fn parse_config(vxlan: &[u16], geneve: &[u16]) -> Result<ParseConfig> {
    ParseConfig::with_tunnel_ports(vxlan, geneve).map_err(anyhow::Error::msg)
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Pcap(PcapCmd::Inspect {
            file,
            json,
            vxlan_ports,
            geneve_ports,
        }) => {
            let cfg = parse_config(&vxlan_ports, &geneve_ports)?;
            let format = if json {
                inspect::Format::Json
            } else {
                inspect::Format::Human
            };
            let stdout = std::io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            inspect::run(&file, format, &cfg, &mut out)?;
            Ok(())
        }
        Cmd::Pcap(PcapCmd::Gso(args)) => cmd_gso::run(args),
        Cmd::Pcap(PcapCmd::Gro(args)) => cmd_gro::run(args),
        Cmd::Pcap(PcapCmd::Tx(args)) => cmd_tx::run(args),
        Cmd::Pcap(PcapCmd::Switch(args)) => cmd_pcap_switch::run(args),
        Cmd::Features(cmd) => cmd_features::run(&cli.socket, cmd),
        Cmd::Flow(cmd) => cmd_flow::run_flow(&cli.socket, cmd),
        Cmd::Demo(args) => demo::run(args),
        Cmd::Run(args) => cmd_switch::run_daemon(&cli.socket, args),
        Cmd::Port(cmd) => cmd_switch::run_port(&cli.socket, cmd),
        Cmd::Quota(cmd) => cmd_switch::run_quota(&cli.socket, cmd),
        Cmd::Stats { json } => cmd_switch::stats(&cli.socket, json),
        Cmd::Coverage { all, json } => cmd_switch::coverage(&cli.socket, all, json),
        Cmd::Bench(cmd) => cmd_flow::run_bench(cmd),
        Cmd::Trace(args) => cmd_trace::run(&cli.socket, args),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed pipe (`sluice pcap inspect big.pcap | head`) is not an error.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}
