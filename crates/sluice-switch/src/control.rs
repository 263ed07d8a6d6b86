//! The control socket: newline-delimited JSON over a Unix stream socket (documented in
//! `docs/control.md`).
//!
//! Each request is one JSON object on one line, `{"cmd": "...", ...}`; each gets exactly one
//! response line, `{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`. A connection
//! may carry any number of requests. A line that is not valid JSON, names an unknown command,
//! lacks a field or exceeds [`MAX_LINE`] bytes gets an error response (the connection stays
//! open, except after an over-long line, whose rest cannot be trusted); every such refusal is
//! counted in `ctl_bad_requests`. Nothing a client sends can stop the daemon except `shutdown`.

use crate::switch::{PortRequest, Switch};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sluice_coverage::counter;
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

counter!(pub CTL_REQUESTS, "ctl_requests", "control requests answered");
counter!(pub CTL_BAD_REQUESTS, "ctl_bad_requests", "control requests refused (bad JSON, unknown command, missing field, too long)");
counter!(pub CTL_ERRORS, "ctl_errors", "control requests that failed (bad port, bad rule, refused feature …)");

/// Longest request line accepted (rule batches are split by the client below this).
pub const MAX_LINE: usize = 16 << 20;

/// The default socket path of `sluice run` and the CLI.
pub const DEFAULT_SOCKET: &str = "/run/sluice/sluice.sock";

/// A control request. See `docs/control.md` for each message with examples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Liveness check; answers `"pong"`.
    Ping {},
    /// Add a port.
    PortAdd(PortRequest),
    /// Remove a port by name.
    PortDel {
        /// The port name.
        name: String,
    },
    /// List ports.
    PortList {},
    /// Insert rules (text syntax) in one batch.
    FlowAdd {
        /// The rules, one per element.
        rules: Vec<String>,
        /// All or nothing.
        #[serde(default)]
        atomic: bool,
    },
    /// Delete rules by `handle N` or by match and priority.
    FlowDel {
        /// The rules.
        specs: Vec<String>,
        /// All or nothing.
        #[serde(default)]
        atomic: bool,
    },
    /// Every rule.
    FlowDump {},
    /// A port's features.
    FeaturesShow {
        /// The port name.
        port: String,
    },
    /// Change a port's features: feature name → on.
    FeaturesSet {
        /// The port name.
        port: String,
        /// Changes, applied in name order.
        set: BTreeMap<String, bool>,
    },
    /// Per-port counters.
    Stats {},
    /// Coverage counters (nonzero ones, or all).
    Coverage {
        /// Include counters still at zero.
        #[serde(default)]
        all: bool,
    },
    /// Stop the daemon.
    Shutdown {},
}

/// Runs one request against the switch. `Err` holds the message for the client.
pub fn handle(switch: &Switch, req: Request, stop: &AtomicBool) -> Result<Value, String> {
    let v = match req {
        Request::Ping {} => json!("pong"),
        Request::PortAdd(r) => to_value(switch.add_port(r).map_err(|e| e.to_string())?)?,
        Request::PortDel { name } => {
            switch.del_port(&name).map_err(|e| e.to_string())?;
            Value::Null
        }
        Request::PortList {} => to_value(switch.ports().map_err(|e| e.to_string())?)?,
        Request::FlowAdd { rules, atomic } => to_value(
            switch
                .add_flows(&rules, atomic)
                .map_err(|e| e.to_string())?,
        )?,
        Request::FlowDel { specs, atomic } => to_value(
            switch
                .del_flows(&specs, atomic)
                .map_err(|e| e.to_string())?,
        )?,
        Request::FlowDump {} => to_value(switch.dump_flows())?,
        Request::FeaturesShow { port } => {
            to_value(switch.features(&port).map_err(|e| e.to_string())?)?
        }
        Request::FeaturesSet { port, set } => {
            let changes: Vec<(String, bool)> = set.into_iter().collect();
            switch
                .set_features(&port, &changes)
                .map_err(|e| e.to_string())?;
            Value::Null
        }
        Request::Stats {} => to_value(switch.stats().map_err(|e| e.to_string())?)?,
        Request::Coverage { all } => {
            let map: BTreeMap<&str, u64> = sluice_coverage::snapshot()
                .into_iter()
                .filter(|s| all || s.value != 0)
                .map(|s| (s.name, s.value))
                .collect();
            to_value(map)?
        }
        Request::Shutdown {} => {
            stop.store(true, Ordering::SeqCst);
            json!("stopping")
        }
    };
    Ok(v)
}

fn to_value<T: Serialize>(t: T) -> Result<Value, String> {
    serde_json::to_value(t).map_err(|e| format!("cannot encode the result: {e}"))
}

/// Answers one request line (without its newline): the response object.
pub fn answer_line(switch: &Switch, line: &[u8], stop: &AtomicBool) -> Value {
    let req: Request = match serde_json::from_slice(line) {
        Ok(r) => r,
        Err(e) => {
            CTL_BAD_REQUESTS.inc();
            return json!({"ok": false, "error": format!("bad request: {e}")});
        }
    };
    CTL_REQUESTS.inc();
    match handle(switch, req, stop) {
        Ok(result) => json!({"ok": true, "result": result}),
        Err(error) => {
            CTL_ERRORS.inc();
            json!({"ok": false, "error": error})
        }
    }
}

/// Serves one connection until it closes, `stop` is set, or it sends an over-long line.
pub fn serve_connection(switch: &Switch, stream: UnixStream, stop: &AtomicBool) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let room = (MAX_LINE + 1).saturating_sub(line.len()) as u64;
        match (&mut reader).take(room).read_until(b'\n', &mut line) {
            Ok(0) => {
                if !line.is_empty() {
                    // A request cut off by the end of the stream: never executed.
                    CTL_BAD_REQUESTS.inc();
                }
                return Ok(());
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if line.last() != Some(&b'\n') {
            if line.len() > MAX_LINE {
                CTL_BAD_REQUESTS.inc();
                let resp = json!({"ok": false, "error": format!("request longer than {MAX_LINE} bytes; closing")});
                writeln!(writer, "{resp}")?;
                return Ok(());
            }
            continue; // a timeout mid-line: keep reading
        }
        let body = trim_line(&line);
        if !body.is_empty() {
            let resp = answer_line(switch, body, stop);
            writeln!(writer, "{resp}")?;
        }
        line.clear();
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut s = line;
    while let Some((last, rest)) = s.split_last() {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// A listening control socket; removes its path when dropped.
#[derive(Debug)]
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlServer {
    /// Binds `path` (creating its directory; replacing a stale socket no daemon answers on).
    pub fn bind(path: &Path) -> io::Result<ControlServer> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))
                })?;
            }
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: another daemon is listening there", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind {}: {e}", path.display()))
        })?;
        listener.set_nonblocking(true)?;
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts connections (one thread each) until `stop` is set.
    pub fn run(&self, switch: &Arc<Switch>, stop: &Arc<AtomicBool>) -> io::Result<()> {
        std::thread::scope(|scope| {
            while !stop.load(Ordering::SeqCst) {
                match self.listener.accept() {
                    Ok((stream, _)) => {
                        let _ = stream.set_nonblocking(false);
                        let sw = Arc::clone(switch);
                        let st = Arc::clone(stop);
                        scope.spawn(move || {
                            let _ = serve_connection(&sw, stream, &st);
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A client connection to a daemon's control socket.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    /// Connects to the socket at `path`.
    pub fn connect(path: &Path) -> io::Result<Client> {
        let s = UnixStream::connect(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot reach the sluice daemon at {}: {e} (is `sluice run` running? --socket sets the path)",
                    path.display()
                ),
            )
        })?;
        Ok(Client {
            writer: s.try_clone()?,
            reader: BufReader::new(s),
        })
    }

    /// Sends a request and returns its result, or the daemon's error message as an
    /// `io::Error` of kind `Other`.
    pub fn request(&mut self, req: &Request) -> io::Result<Value> {
        let line = serde_json::to_string(req).map_err(io::Error::other)?;
        writeln!(self.writer, "{line}")?;
        let mut resp = String::new();
        if self.reader.read_line(&mut resp)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection without answering",
            ));
        }
        let v: Value = serde_json::from_str(&resp)
            .map_err(|e| io::Error::other(format!("bad response from the daemon: {e}")))?;
        if v.get("ok") == Some(&Value::Bool(true)) {
            Ok(v.get("result").cloned().unwrap_or(Value::Null))
        } else {
            let msg = v
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string();
            Err(io::Error::other(msg))
        }
    }
}
