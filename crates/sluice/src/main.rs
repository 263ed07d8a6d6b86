//! The `sluice` command: offline tools over captures (and, as they land, the switch daemon and its
//! control client).

mod capture;
mod cmd_features;
mod cmd_flow;
mod cmd_gro;
mod cmd_gso;
mod cmd_tx;
mod inspect;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use sluice_wire::ParseConfig;
use std::io::{BufWriter, ErrorKind};
use std::path::PathBuf;
use std::process::ExitCode;

/// Sluice: a userspace packet datapath whose network offloads are done right.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
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
}

#[derive(Subcommand, Debug)]
enum PcapCmd {
    /// Print every frame's layers, VLAN stack, tunnel, offsets and checksum verdicts.
    Inspect {
        /// The capture (pcap or pcapng; Ethernet link type).
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
}

fn parse_config(vxlan: &[u16], geneve: &[u16]) -> Result<ParseConfig> {
    let mut cfg = ParseConfig::DEFAULT;
    for (ports, set, what) in [
        (vxlan, &mut cfg.vxlan_ports, "VXLAN"),
        (geneve, &mut cfg.geneve_ports, "Geneve"),
    ] {
        for &p in ports {
            if !set.insert(p) {
                bail!(
                    "too many {what} ports (at most {})",
                    sluice_wire::PortSet::CAPACITY
                );
            }
        }
    }
    Ok(cfg)
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
        Cmd::Features(cmd) => cmd_features::run(cmd),
        Cmd::Flow(cmd) => cmd_flow::run_flow(cmd),
        Cmd::Bench(cmd) => cmd_flow::run_bench(cmd),
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
