//! `sluice flow add|del|mod|dump` (against the daemon, or offline) and `sluice bench flows`.

use crate::flow_cli::{bench_flows, load_batch_file, BenchOpts};
use anyhow::{bail, Context, Result};
use sluice_flow::table::{FlowTable, TableConfig};
use sluice_flow::text::PortNames;
use sluice_switch::control::TextOp;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

/// `sluice flow` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum FlowCmd {
    /// Insert rules (tc-flower-like syntax) into the running switch, or with `--offline` into a
    /// throw-away table (checks a rules file and measures the insertion rate).
    ///
    /// Rules come from the arguments (one rule per argument) and/or `--batch FILE` (one per
    /// line; `#` comments and blank lines skipped). Every rejected rule is reported with its
    /// line and the offending token marked.
    Add {
        /// Rules, one per argument.
        rules: Vec<String>,
        /// A file of rules, one per line.
        #[arg(long, value_name = "FILE")]
        batch: Option<PathBuf>,
        /// All or nothing: one bad rule rejects the whole request.
        #[arg(long)]
        atomic: bool,
        /// Insert into an offline table instead of the daemon.
        #[arg(long)]
        offline: bool,
        /// Offline: port names for `in_port NAME` / `output:NAME`: `name=number`, comma-separated.
        #[arg(
            long,
            value_name = "NAME=NUM,...",
            value_delimiter = ',',
            requires = "offline"
        )]
        ports: Vec<String>,
        /// Offline: most rules the table accepts (the rule-count quota).
        #[arg(long, default_value_t = 16 << 20)]
        max_rules: usize,
    },
    /// Delete rules from the running switch: `handle N` (or `N`), or a rule's match and
    /// priority (`prio 10 in_port tap0 ...`).
    Del {
        /// Rules to delete, one per argument.
        specs: Vec<String>,
        /// A file of deletions, one per line.
        #[arg(long, value_name = "FILE")]
        batch: Option<PathBuf>,
        /// All or nothing.
        #[arg(long)]
        atomic: bool,
    },
    /// Replace the actions of rules of the running switch in place: each rule given as `flow add`
    /// takes it (`prio 10 in_port tap0 ... action output:tap1`); the rule with the same match
    /// and priority keeps its handle and counters and gets the new actions. A rule that no rule
    /// matches is reported with its line, like a rejected `flow add`.
    Mod {
        /// Rules, one per argument.
        rules: Vec<String>,
        /// A file of rules, one per line.
        #[arg(long, value_name = "FILE")]
        batch: Option<PathBuf>,
        /// All or nothing.
        #[arg(long)]
        atomic: bool,
    },
    /// Print every rule of the running switch, with its handle and its counters:
    /// `handle N: <rule> packets=P bytes=B used=Ts` (`used=never`: not hit yet).
    Dump {
        /// Only `handle N: <rule>`, without the counters.
        #[arg(long)]
        no_stats: bool,
    },
}

/// `sluice bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// Insert N generated rules in batches, then look up a packet mix; print rules/s,
    /// lookups/s and memory per rule.
    Flows {
        /// Rules to generate and insert.
        #[arg(long, default_value_t = 1_000_000)]
        rules: usize,
        /// Distinct masks the rules use (1..=64).
        #[arg(long, default_value_t = 16)]
        masks: usize,
        /// Threads: lookups run on this many threads, and insert batches of at least 16 384
        /// rules are split over this many (each thread takes whole subtables; the results are
        /// those of inserting in order).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Rules per insert batch.
        #[arg(long, default_value_t = 65_536)]
        batch: usize,
        /// Lookups per thread.
        #[arg(long, default_value_t = 5_000_000)]
        lookups: usize,
        /// Also print one JSON object on the last line of stdout.
        #[arg(long)]
        json: bool,
    },
}

fn port_names(specs: &[String]) -> Result<PortNames> {
    let mut names = PortNames::new();
    for spec in specs {
        let Some((name, num)) = spec.split_once('=') else {
            bail!("--ports: expected NAME=NUMBER, got {spec:?}");
        };
        let num: u32 = num
            .parse()
            .with_context(|| format!("--ports: {num:?} is not a port number"))?;
        names.insert(name, num);
    }
    Ok(names)
}

/// Runs `sluice flow …`.
pub fn run_flow(socket: &std::path::Path, cmd: FlowCmd) -> Result<()> {
    match cmd {
        FlowCmd::Add {
            rules,
            batch,
            atomic,
            offline: false,
            ..
        } => crate::cmd_switch::flow_add_daemon(
            socket,
            &rules,
            batch.as_deref(),
            atomic,
            TextOp::Add,
        ),
        FlowCmd::Del {
            specs,
            batch,
            atomic,
        } => crate::cmd_switch::flow_add_daemon(
            socket,
            &specs,
            batch.as_deref(),
            atomic,
            TextOp::Del,
        ),
        FlowCmd::Mod {
            rules,
            batch,
            atomic,
        } => crate::cmd_switch::flow_add_daemon(
            socket,
            &rules,
            batch.as_deref(),
            atomic,
            TextOp::Mod,
        ),
        FlowCmd::Dump { no_stats } => crate::cmd_switch::flow_dump(socket, !no_stats),
        FlowCmd::Add {
            rules,
            batch,
            ports,
            max_rules,
            ..
        } => {
            if !rules.is_empty() {
                bail!("--offline reads rules from --batch FILE only");
            }
            let Some(batch) = batch else {
                bail!("--offline needs --batch FILE");
            };
            let names = port_names(&ports)?;
            let mut table = FlowTable::new(TableConfig {
                max_rules,
                ..TableConfig::default()
            });
            let total = std::fs::metadata(&batch)
                .with_context(|| format!("cannot read {}", batch.display()))?
                .len();
            let tty = std::io::stderr().is_terminal();
            let start = Instant::now();
            let report = load_batch_file(&batch, &mut table, &names, |lines| {
                if tty {
                    eprint!("\r{lines} lines read ({total} bytes in the file)");
                }
            })
            .with_context(|| format!("cannot read {}", batch.display()))?;
            let secs = start.elapsed().as_secs_f64();
            if tty {
                eprintln!();
            }
            for e in &report.errors {
                eprintln!("{}: {e}", batch.display());
            }
            println!(
                "{} lines, {} rules inserted, {} errors, {:.0} rules/s",
                report.lines,
                report.inserted,
                report.errors.len(),
                report.inserted as f64 / secs.max(1e-9)
            );
            if !report.errors.is_empty() {
                bail!(
                    "{} of the rules in {} were rejected",
                    report.errors.len(),
                    batch.display()
                );
            }
            Ok(())
        }
    }
}

/// Runs `sluice bench …`.
pub fn run_bench(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Flows {
            rules,
            masks,
            threads,
            batch,
            lookups,
            json,
        } => {
            if !(1..=64).contains(&masks) {
                bail!("--masks must be between 1 and 64");
            }
            if threads == 0 || batch == 0 || rules == 0 {
                bail!("--rules, --threads and --batch must be at least 1");
            }
            let opts = BenchOpts {
                rules,
                masks,
                threads,
                insert_threads: threads,
                batch,
                lookups,
                ..BenchOpts::default()
            };
            let report = bench_flows(opts);
            println!("{report}");
            if json {
                println!("{}", report.to_json());
            }
            Ok(())
        }
    }
}
