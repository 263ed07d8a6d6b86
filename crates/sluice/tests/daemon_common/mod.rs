//! Shared by the tests that run `sluice run` as a process.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Waits (at most 20 s) for a daemon started with its stderr piped to say it listens. `Err`
/// holds what it said instead (it exited, or never got there); the child is then killed.
pub fn wait_listening(child: &mut Child) -> Result<(), String> {
    let stderr = child
        .stderr
        .take()
        .ok_or("the daemon's stderr is not piped")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut said = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("listening on") => return Ok(()),
            Ok(line) => {
                said.push_str(&line);
                said.push('\n');
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(said);
            }
        }
    }
}

/// Adds `--socket SOCK run --no-db --config CFG ARGS…` to `cmd` (a `sluice` command, perhaps
/// behind a wrapper such as `setpriv`), stderr piped: a daemon without a store, as the tests
/// start one.
#[allow(dead_code)] // not every test binary starts its daemon from a configuration file
pub fn run_with_config<'c>(
    cmd: &'c mut Command,
    sock: &Path,
    cfg: &Path,
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
) -> &'c mut Command {
    cmd.arg("--socket")
        .arg(sock)
        .args(["run", "--no-db", "--config"])
        .arg(cfg)
        .args(args)
        .stderr(Stdio::piped())
}
