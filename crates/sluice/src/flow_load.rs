//! `sluice flow add|del` against the daemon: the rules of the arguments and of `--batch FILE`
//! become one text (the arguments first, one line each), streamed to the daemon in large
//! `flow_add_text` / `flow_del_text` requests ([`sluice_switch::control::Client::stream_rules`]:
//! one thread writes, this one reads the replies). Every failed line is printed with where it
//! came from (`rule N` for an argument, `FILE:LINE` for the file) and the daemon's message (for
//! a parse error: the line with the offending token marked).

use anyhow::{bail, Context, Result};
use sluice_switch::control::{Client, TextOp};
use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

/// The rules to send: the arguments (one line each), then the file's text.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RuleText {
    /// The text sent.
    pub text: String,
    /// Lines that came from the arguments (they come first).
    pub args: usize,
    /// The file, for messages.
    pub file: Option<String>,
}

impl RuleText {
    /// Joins `args` and the text of `file` (already read).
    pub fn new(args: &[String], file: Option<(&Path, String)>) -> Result<RuleText> {
        let mut text = String::new();
        for (i, a) in args.iter().enumerate() {
            if a.contains('\n') {
                bail!("rule {}: a rule argument must be one line", i + 1);
            }
            text.push_str(a);
            text.push('\n');
        }
        let name = file.as_ref().map(|(p, _)| p.display().to_string());
        if let Some((_, body)) = file {
            text.push_str(&body);
        }
        Ok(RuleText {
            text,
            args: args.len(),
            file: name,
        })
    }

    /// Where the 0-based line `index` of the text came from: `rule N` or `FILE:LINE`.
    pub fn origin(&self, index: usize) -> String {
        if index < self.args {
            format!("rule {}", index + 1)
        } else {
            format!(
                "{}:{}",
                self.file.as_deref().unwrap_or("?"),
                index - self.args + 1
            )
        }
    }
}

/// `sluice flow add|del|mod` against the daemon.
pub fn flow_batch_daemon(
    mut client: Client,
    rules: &[String],
    batch: Option<&Path>,
    atomic: bool,
    op: TextOp,
) -> Result<()> {
    let file = match batch {
        Some(p) => Some((
            p,
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?,
        )),
        None => None,
    };
    let text = RuleText::new(rules, file)?;
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let (mut total, mut ok, mut failed) = (0usize, 0usize, 0usize);
    client.stream_rules(&text.text, op, atomic, |chunk, rep| {
        total += rep.rules;
        ok += rep.done;
        failed += rep.errors.len();
        for e in &rep.errors {
            eprintln!(
                "{}: {}",
                text.origin(chunk.first_line + e.line - 1),
                e.error
            );
        }
        if tty {
            eprint!("\r{total} rules sent");
        }
    })?;
    if tty {
        eprintln!();
    }
    if total == 0 {
        bail!("no rules given (arguments or --batch FILE)");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{total} rules, {ok} {}, {failed} errors, {:.0} rules/s",
        op.done(),
        total as f64 / secs.max(1e-9)
    );
    if failed > 0 {
        bail!("{failed} of the rules were rejected");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_come_first_and_lines_map_back() {
        let t = RuleText::new(
            &["prio 1 action drop".into(), "prio 2 action drop".into()],
            Some((Path::new("r.txt"), "# c\nprio 3 action drop\n".into())),
        )
        .unwrap();
        assert_eq!(
            t.text,
            "prio 1 action drop\nprio 2 action drop\n# c\nprio 3 action drop\n"
        );
        assert_eq!(t.origin(0), "rule 1");
        assert_eq!(t.origin(1), "rule 2");
        assert_eq!(t.origin(2), "r.txt:1");
        assert_eq!(t.origin(3), "r.txt:2");
        assert!(RuleText::new(&["a\nb".into()], None).is_err());
        let chunks = sluice_switch::control::chunk_rules(&t.text, 1, usize::MAX);
        // One rule per chunk; the comment line rides with the rule before it. The daemon
        // numbers lines from 1 within a chunk.
        let firsts: Vec<usize> = chunks.iter().map(|c| c.first_line).collect();
        assert_eq!(firsts, vec![0, 1, 3]);
        assert_eq!(t.origin(chunks[2].first_line + 1 - 1), "r.txt:2");
    }
}
