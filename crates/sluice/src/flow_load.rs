//! `sluice flow add|del` against the daemon: the rules of the arguments and of `--batch FILE`
//! become one text (the arguments first, one line each), streamed to the daemon in large
//! `flow_add_text` / `flow_del_text` requests ([`sluice_switch::control::Client::stream_rules`]:
//! one thread writes, this one reads the replies). Every failed line is printed with where it
//! came from (`rule N` for an argument, `FILE:LINE` for the file) and the daemon's message (for
//! a parse error: the line with the offending token marked).

use anyhow::{bail, Context, Result};
use sluice_switch::control::{Client, NotUtf8, TextOp};
use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read};
use std::path::Path;
use std::time::Instant;

/// Where the lines of a streamed rules text come from: the arguments (one line each, first),
/// then the file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RuleOrigin {
    /// Lines that came from the arguments (they come first).
    pub args: usize,
    /// The file, for messages.
    pub file: Option<String>,
}

impl RuleOrigin {
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

/// The text of the rule arguments, one line each.
pub fn args_text(args: &[String]) -> Result<String> {
    let mut text = String::new();
    for (i, a) in args.iter().enumerate() {
        if a.contains('\n') {
            bail!("rule {}: a rule argument must be one line", i + 1);
        }
        text.push_str(a);
        text.push('\n');
    }
    Ok(text)
}

/// `sluice flow add|del|mod` against the daemon.
pub fn flow_batch_daemon(
    mut client: Client,
    rules: &[String],
    batch: Option<&Path>,
    atomic: bool,
    op: TextOp,
) -> Result<()> {
    let head = args_text(rules)?;
    let origin = RuleOrigin {
        args: rules.len(),
        file: batch.map(|p| p.display().to_string()),
    };
    // The file is read as it is sent: the daemon starts on the first chunk at once. The
    // chunker reads a megabyte at a time; a 64 KiB `BufReader` passes its reads of 64 KiB and
    // more straight to the file (only each megabyte's first few smaller reads go through its
    // buffer; a 1 MiB one copied everything through it).
    // Its size, when it is a regular file, lets the last requests be smaller.
    let (file, size): (Box<dyn BufRead + Send>, Option<usize>) = match batch {
        Some(p) => {
            let f = File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            let size = f
                .metadata()
                .ok()
                .filter(|m| m.is_file())
                .and_then(|m| usize::try_from(m.len()).ok());
            (Box::new(BufReader::with_capacity(64 << 10, f)), size)
        }
        None => (Box::new(io::empty()), Some(0)),
    };
    let text_bytes = size.map(|n| n + head.len());
    let src = io::Cursor::new(head).chain(file);
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let (mut total, mut ok, mut failed) = (0usize, 0usize, 0usize);
    let streamed = client.stream_rules_sized(src, text_bytes, op, atomic, |chunk, rep| {
        total += rep.rules;
        ok += rep.done;
        failed += rep.errors.len();
        for e in &rep.errors {
            eprintln!(
                "{}: {}",
                origin.origin(chunk.first_line + e.line - 1),
                e.error
            );
        }
        if tty {
            eprint!("\r{total} rules sent");
        }
    });
    if let Err(e) = streamed {
        if let Some(bad) = e.get_ref().and_then(|x| x.downcast_ref::<NotUtf8>()) {
            bail!(
                "{}: not valid UTF-8 ({ok} rules before it {})",
                origin.origin(bad.line),
                op.done()
            );
        }
        if e.kind() == io::ErrorKind::InvalidInput {
            bail!("{e}");
        }
        return Err(e).context(match &origin.file {
            Some(f) => format!(
                "sending the rules of {f} to the daemon ({ok} {})",
                op.done()
            ),
            None => "sending the rules to the daemon".to_string(),
        });
    }
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
        let head = args_text(&["prio 1 action drop".into(), "prio 2 action drop".into()]).unwrap();
        assert_eq!(head, "prio 1 action drop\nprio 2 action drop\n");
        let o = RuleOrigin {
            args: 2,
            file: Some("r.txt".into()),
        };
        assert_eq!(o.origin(0), "rule 1");
        assert_eq!(o.origin(1), "rule 2");
        assert_eq!(o.origin(2), "r.txt:1");
        assert_eq!(o.origin(3), "r.txt:2");
        assert!(args_text(&["a\nb".into()]).is_err());
        let text = format!("{head}# c\nprio 3 action drop\n");
        let chunks = sluice_switch::control::chunk_rules(&text, 1, usize::MAX);
        // One rule per chunk; the comment line rides with the rule before it. The daemon
        // numbers lines from 1 within a chunk.
        let firsts: Vec<usize> = chunks.iter().map(|c| c.first_line).collect();
        assert_eq!(firsts, vec![0, 1, 3]);
        assert_eq!(o.origin(chunks[2].first_line + 1 - 1), "r.txt:2");
    }
}
