//! `sluice features …`: the device offload feature names (as `ethtool -k` names them), and a
//! running switch's port features.

use anyhow::Result;
use sluice_offload::features::Feature;
use std::io::Write;

/// `sluice features` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Cmd {
    /// Every device feature name, one per line, with a short description.
    List,
    /// A port's features on the running switch, as `ethtool -k` shows them.
    Show {
        /// The port name.
        port: String,
    },
    /// Turn features of a port on or off, as `ethtool -K` does: `NAME=on|off` (ethtool long
    /// names or `tso`, `gso`, `gro`, `sg`, `tx`, `rx`, `uso`; `rx-gro` is the switch's GRO).
    Set {
        /// The port name.
        port: String,
        /// Changes, e.g. `tso=off rx-gro=on`.
        #[arg(required = true)]
        changes: Vec<String>,
    },
}

/// Runs the command.
pub fn run(socket: &std::path::Path, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Show { port } => crate::cmd_switch::features_show(socket, &port),
        Cmd::Set { port, changes } => crate::cmd_switch::features_set(socket, &port, &changes),
        Cmd::List => {
            let width = Feature::ALL
                .iter()
                .map(|f| f.name().len())
                .max()
                .unwrap_or(0);
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            for f in Feature::ALL {
                writeln!(out, "{:<width$}  {}", f.name(), f.description())?;
            }
            out.flush()?;
            Ok(())
        }
    }
}
