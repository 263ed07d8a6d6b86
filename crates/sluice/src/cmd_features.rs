//! `sluice features …`: the device offload feature names (as `ethtool -k` names them).

use anyhow::Result;
use sluice_offload::features::Feature;
use std::io::Write;

/// `sluice features` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Cmd {
    /// Every device feature name, one per line, with a short description.
    List,
}

/// Runs the command.
pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
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
