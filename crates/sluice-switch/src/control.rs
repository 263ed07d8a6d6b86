//! The control socket: newline-delimited JSON over a Unix stream socket (documented in
//! `docs/control.md`).
//!
//! Each request is one JSON object on one line, `{"cmd": "...", ...}`; each gets exactly one
//! response line, `{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`. A connection
//! may carry any number of requests. A line that is not valid JSON, names an unknown command,
//! lacks a field or exceeds [`MAX_LINE`] bytes gets an error response (the connection stays
//! open, except after an over-long line, whose rest cannot be trusted); every such refusal is
//! counted in `ctl_bad_requests`. Nothing a client sends can stop the daemon except `shutdown`.
//!
//! The server survives its clients: the socket is mode 0660 and each connection's peer
//! credentials (`SO_PEERCRED`) are checked (root and the socket's group are admitted); at most
//! [`ServerConfig::max_connections`] are served at once; a reply that cannot be written within
//! [`ServerConfig::write_timeout`] closes its connection; running out of descriptors on accept
//! backs off instead of failing; and stopping never waits for a client.

mod rule_stream;

pub use rule_stream::{
    chunk_rules, encode_text_request, write_text_request, NotUtf8, RuleChunk, RuleChunker, TextOp,
    CHUNK_BYTES,
};

use crate::switch::{ParseBuffers, PortRequest, PreparedText, Switch};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sluice_coverage::counter;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

counter!(pub CTL_REQUESTS, "ctl_requests", "control requests answered");
counter!(pub CTL_BAD_REQUESTS, "ctl_bad_requests", "control requests refused (bad JSON, unknown command, missing field, too long)");
counter!(pub CTL_ERRORS, "ctl_errors", "control requests that failed (bad port, bad rule, refused feature …)");
counter!(pub CTL_LINE_TOO_LONG, "ctl_line_too_long", "control connections closed: a request line, or the text announced after it, longer than MAX_LINE (or text of unknown length after a refused line)");
counter!(pub CTL_PEER_REFUSED, "ctl_peer_refused", "control connections refused: the peer is neither root nor in the socket's group");
counter!(pub CTL_CONNECTIONS_REFUSED, "ctl_connections_refused", "control connections refused: max_connections already open");
counter!(pub CTL_ACCEPT_ERRORS, "ctl_accept_errors", "accept() failures survived with back-off (EMFILE, ENFILE, ENOMEM …)");
counter!(pub CTL_WRITE_TIMEOUTS, "ctl_write_timeouts", "control connections closed: a reply could not be written in write_timeout (the client does not read)");

/// Every control counter, for listings before they fire.
pub static COUNTERS: [&sluice_coverage::Counter; 8] = [
    &CTL_REQUESTS,
    &CTL_BAD_REQUESTS,
    &CTL_ERRORS,
    &CTL_LINE_TOO_LONG,
    &CTL_PEER_REFUSED,
    &CTL_CONNECTIONS_REFUSED,
    &CTL_ACCEPT_ERRORS,
    &CTL_WRITE_TIMEOUTS,
];

/// Longest request line accepted, newline excluded (rule batches are split by the client below
/// this). A longer line is answered with an error and its connection closed; at most this much
/// is buffered per connection.
pub const MAX_LINE: usize = 16 << 20;

/// The default socket path of `sluice run` and the CLI.
pub const DEFAULT_SOCKET: &str = "/run/sluice/sluice.sock";

/// The control socket's mode: owner and group read/write, nothing for others.
pub const SOCKET_MODE: u32 = 0o660;

/// Settings of the control server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// The group that owns the socket and whose members are admitted besides root (default 0).
    pub group: u32,
    /// Most connections served at once; one more is answered with an error and closed.
    pub max_connections: usize,
    /// Longest wait to write one reply before the connection is closed.
    pub write_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            group: 0,
            max_connections: 64,
            write_timeout: Duration::from_secs(5),
        }
    }
}

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
        /// Delete the rules that name the port with it (otherwise such a port is not removed).
        #[serde(default)]
        force: bool,
    },
    /// Open a port that is down again (a deleted TAP is created again).
    PortUp {
        /// The port name.
        name: String,
    },
    /// List ports.
    PortList {},
    /// One port, with its settings in effect.
    PortShow {
        /// The port name.
        name: String,
    },
    /// Change a port's settings (GRO choices, VLAN depth, envelope, GSO limits): setting name
    /// → value (`true`/`false`, a number, or a string as `sluice port set` takes it), all or
    /// none. Answers the port as `port_show` does.
    PortSet {
        /// The port name.
        name: String,
        /// The changes.
        set: BTreeMap<String, Value>,
    },
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
    /// Insert the rules of a text, one per line (blank lines and `#` comments skipped), parsed
    /// by the daemon on several threads outside its control lock, in one batch. The answer
    /// carries only the failed lines and runs of handles ([`crate::switch::TextBatchReply`]).
    FlowAddText {
        /// The rules, `\n`-separated, in the request line; or `None` with `text_bytes`
        /// set: the text follows the line as raw bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// The text is not in the line but follows it: exactly this many bytes of UTF-8, not
        /// escaped (no JSON string to encode and decode: the fast form the CLI sends; at most
        /// [`MAX_LINE`] bytes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text_bytes: Option<usize>,
        /// All or nothing.
        #[serde(default)]
        atomic: bool,
    },
    /// Delete rules given as text, one spec per line (as in `flow_del`), in one batch.
    FlowDelText {
        /// The specs, `\n`-separated (or `None`: see `flow_add_text`'s `text_bytes`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// The text follows the request line as this many raw bytes (as for `flow_add_text`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text_bytes: Option<usize>,
        /// All or nothing.
        #[serde(default)]
        atomic: bool,
    },
    /// Replace the actions of rules given as text, one rule per line as in `flow_add_text` (the
    /// match and priority name an existing rule, the actions are its new ones), in place and in
    /// one batch; a line whose match and priority no rule has fails alone.
    FlowModText {
        /// The rules, `\n`-separated (or `None`: see `flow_add_text`'s `text_bytes`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// The text follows the request line as this many raw bytes (as for `flow_add_text`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text_bytes: Option<usize>,
        /// All or nothing.
        #[serde(default)]
        atomic: bool,
    },
    /// Every rule.
    FlowDump {
        /// Each rule's packets, bytes and last use after its text.
        #[serde(default)]
        stats: bool,
    },
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
    /// The flow table's quotas and their use.
    QuotaShow {},
    /// Change quotas (those given; at least what is in use), recorded in the store.
    QuotaSet(crate::switch::QuotaChange),
    /// Per-port counters.
    Stats {},
    /// Coverage counters (nonzero ones, or all).
    Coverage {
        /// Include counters still at zero.
        #[serde(default)]
        all: bool,
        /// Rates per second over 5 s, 1 min and 1 h with each total (a list of
        /// [`crate::metrics::RateInfo`]) instead of the object name → total.
        #[serde(default)]
        rates: bool,
    },
    /// What the switch would do with one frame received on a port (nothing is sent).
    Trace {
        /// The ingress port name.
        port: String,
        /// The frame (Ethernet, no FCS) in hex; whitespace and `:` are ignored.
        frame: String,
    },
    /// Stop the daemon.
    Shutdown {},
}

/// Runs one request against the switch. `Err` holds the message for the client.
pub fn handle(switch: &Switch, req: Request, stop: &AtomicBool) -> Result<Value, String> {
    let v = match req {
        Request::Ping {} => json!("pong"),
        Request::PortAdd(r) => to_value(switch.add_port(r).map_err(|e| e.to_string())?)?,
        Request::PortDel { name, force } => {
            switch.del_port(&name, force).map_err(|e| e.to_string())?;
            Value::Null
        }
        Request::PortUp { name } => {
            to_value(switch.reopen_port(&name).map_err(|e| e.to_string())?)?
        }
        Request::PortList {} => to_value(switch.ports().map_err(|e| e.to_string())?)?,
        Request::PortShow { name } => to_value(switch.port(&name).map_err(|e| e.to_string())?)?,
        Request::PortSet { name, set } => {
            let changes: Vec<(String, String)> = set
                .into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::Bool(true) => "on".to_string(),
                        Value::Bool(false) => "off".to_string(),
                        Value::String(s) => s,
                        Value::Null => "default".to_string(),
                        other => other.to_string(),
                    };
                    (k, v)
                })
                .collect();
            to_value(
                switch
                    .set_port(&name, &changes)
                    .map_err(|e| e.to_string())?,
            )?
        }
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
        Request::FlowAddText {
            text,
            text_bytes,
            atomic,
        } => to_value(
            switch
                .add_flows_text(&inline_text(text, text_bytes)?, atomic)
                .map_err(|e| e.to_string())?,
        )?,
        Request::FlowModText {
            text,
            text_bytes,
            atomic,
        } => to_value(
            switch
                .mod_flows_text(&inline_text(text, text_bytes)?, atomic)
                .map_err(|e| e.to_string())?,
        )?,
        Request::FlowDelText {
            text,
            text_bytes,
            atomic,
        } => to_value(
            switch
                .del_flows_text(&inline_text(text, text_bytes)?, atomic)
                .map_err(|e| e.to_string())?,
        )?,
        Request::FlowDump { stats: false } => to_value(switch.dump_flows())?,
        Request::FlowDump { stats: true } => to_value(switch.dump_flows_with_counters())?,
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
        Request::QuotaShow {} => to_value(switch.quotas())?,
        Request::QuotaSet(change) => {
            to_value(switch.set_quotas(&change).map_err(|e| e.to_string())?)?
        }
        Request::Stats {} => to_value(switch.stats().map_err(|e| e.to_string())?)?,
        Request::Coverage { all, rates: true } => {
            to_value(crate::metrics::COVERAGE_RATES.show(&sluice_coverage::snapshot(), all))?
        }
        Request::Coverage { all, rates: false } => {
            let map: BTreeMap<&str, u64> = sluice_coverage::snapshot()
                .into_iter()
                .filter(|s| all || s.value != 0)
                .map(|s| (s.name, s.value))
                .collect();
            to_value(map)?
        }
        Request::Trace { port, frame } => {
            let frame = crate::trace::decode_hex(&frame)?;
            to_value(switch.trace(&port, &frame).map_err(|e| e.to_string())?)?
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

/// Decodes one request line (without its newline) as the server does before it touches the
/// switch: `Err` holds the message for the client (`bad request: ...`). Pure: no state, no
/// counters (the `control_json` fuzz target runs it on arbitrary bytes).
pub fn decode(line: &[u8]) -> Result<Request, String> {
    serde_json::from_slice(line).map_err(|e| format!("bad request: {e}"))
}

/// What the reading half of a connection hands the answering half, in request order.
enum Work {
    /// A decoded request, to run.
    Request(Request),
    /// A rules text parsed already (or why it cannot be), and whether it is all or nothing
    /// (boxed: one allocation per request keeps the hand-over small).
    Text(Result<Box<PreparedText>, String>, bool),
    /// A refused line: its error, already counted.
    Refused(String),
    /// A refused line after which the connection closes: its error, already counted.
    Close(String),
}

/// The refusal of `text_bytes` where no text can follow the request (not on a connection).
const NOT_STREAMED: &str = "`text_bytes`: the text follows the request line, which only a \
     control connection reads; give the rules in `text` instead";

/// The refusal of a rules-text request with both `text` and `text_bytes`.
const TEXT_TWICE: &str =
    "give the rules in `text` or after the request line (`text_bytes`), not both";

/// The text of a rules-text request given in its line (`text`); an error for a request whose
/// text was to follow its line (`text_bytes`), which only a connection's reader takes in, or
/// that has neither or both.
fn inline_text(text: Option<String>, text_bytes: Option<usize>) -> Result<String, String> {
    match (text, text_bytes) {
        (Some(t), None) => Ok(t),
        (Some(_), Some(_)) => Err(TEXT_TWICE.into()),
        (None, Some(_)) => Err(NOT_STREAMED.into()),
        (None, None) => Err("missing the rules: `text` (or `text_bytes`)".into()),
    }
}

/// The text fields (`text`, `text_bytes`) of a rules-text request; `None` for any other.
fn text_fields(req: &mut Request) -> Option<(&mut Option<String>, &mut Option<usize>)> {
    match req {
        Request::FlowAddText {
            text, text_bytes, ..
        }
        | Request::FlowDelText {
            text, text_bytes, ..
        }
        | Request::FlowModText {
            text, text_bytes, ..
        } => Some((text, text_bytes)),
        _ => None,
    }
}

/// How many raw bytes of text follow the line of `req` (a rules-text request with
/// `text_bytes`; they follow it even if the request also has `text`, which is refused after
/// they are read, so the stream stays in step).
fn attached_len(req: &mut Request) -> Option<usize> {
    text_fields(req).and_then(|(_, n)| *n)
}

/// `req` (a rules-text request whose text followed its line) with that text in it; an error
/// if the text was not UTF-8 or the request had a `text` too.
fn with_text(mut req: Request, text: Result<String, String>) -> Result<Request, String> {
    if let Some((t, n)) = text_fields(&mut req) {
        if t.is_some() {
            return Err(TEXT_TWICE.into());
        }
        *t = Some(text?);
        *n = None;
    }
    Ok(req)
}

/// A decoded request to run; a rules text has its rules parsed here (outside the control
/// lock: [`Switch::prepare_text`]), into `bufs`' vectors if given.
fn read_work(switch: &Switch, req: Request, bufs: Option<&Arc<ParseBuffers>>) -> Work {
    let (op, text, text_bytes, atomic) = match req {
        Request::FlowAddText {
            text,
            text_bytes,
            atomic,
        } => (TextOp::Add, text, text_bytes, atomic),
        Request::FlowDelText {
            text,
            text_bytes,
            atomic,
        } => (TextOp::Del, text, text_bytes, atomic),
        Request::FlowModText {
            text,
            text_bytes,
            atomic,
        } => (TextOp::Mod, text, text_bytes, atomic),
        other => return Work::Request(other),
    };
    let prepared = inline_text(text, text_bytes).and_then(|text| {
        switch
            .prepare_text_with(op, text, bufs.cloned())
            .map_err(|e| e.to_string())
    });
    Work::Text(prepared.map(Box::new), atomic)
}

/// Runs `work`: the response object.
fn respond(switch: &Switch, work: Work, stop: &AtomicBool) -> Value {
    let result = match work {
        Work::Refused(error) | Work::Close(error) => return json!({"ok": false, "error": error}),
        Work::Request(req) => {
            CTL_REQUESTS.inc();
            handle(switch, req, stop)
        }
        Work::Text(prepared, atomic) => {
            CTL_REQUESTS.inc();
            prepared
                .and_then(|p| to_value(switch.apply_text(*p, atomic).map_err(|e| e.to_string())?))
        }
    };
    match result {
        Ok(result) => json!({"ok": true, "result": result}),
        Err(error) => {
            CTL_ERRORS.inc();
            tracing::debug!("control request failed: {error}");
            json!({"ok": false, "error": error})
        }
    }
}

/// Answers one request line (without its newline): the response object.
pub fn answer_line(switch: &Switch, line: &[u8], stop: &AtomicBool) -> Value {
    let work = match decode(line).and_then(|r| text_fields_ok(r, false)) {
        Ok(req) => read_work(switch, req, None),
        Err(error) => {
            count_refusal(&error);
            Work::Refused(error)
        }
    };
    respond(switch, work, stop)
}

/// Serves one connection until it closes, `stop` is set, it sends an over-long line, or a
/// reply cannot be written (the socket's write timeout, set by the server, bounds that wait).
///
/// Two threads share the connection: one reads and decodes the next request (and parses a
/// rules text's lines) while this one runs the one before and writes its reply, so a streamed
/// rules file is parsed on one core while the previous chunk is inserted on the other.
/// Requests still run, and are answered, one at a time in the order they came. Without a
/// second thread (none can be started) one thread reads and answers in turn.
pub fn serve_connection(switch: &Switch, stream: &UnixStream, stop: &AtomicBool) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    // A rendezvous: the reader holds at most one parsed request (waiting to hand it over)
    // while another is applied.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Work>(0);
    let bufs = Arc::new(ParseBuffers::default());
    std::thread::scope(|s| {
        let b = &bufs;
        let reader = std::thread::Builder::new()
            .name("sluice-ctl-read".into())
            .spawn_scoped(s, move || {
                read_requests(switch, stream, stop, b, |w| Ok(tx.send(w).is_ok()))
            });
        let Ok(reader) = reader else {
            return read_requests(switch, stream, stop, b, |w| answer(switch, stream, stop, w));
        };
        // However this thread leaves (a panic included): wake the reader if it waits for a
        // line, and let its next hand-over fail, so the scope can end.
        let wake = WakeReader { stream, rx };
        let mut answered = Ok(());
        for w in wake.rx.iter() {
            match answer(switch, stream, stop, w) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    answered = Err(e);
                    break;
                }
            }
        }
        drop(wake);
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the control reader panicked")));
        answered.and(read)
    })
}

/// Ends a connection's reading half when dropped: shuts down the socket's read side (a
/// blocked read returns) and drops the hand-over's receiving end (a blocked hand-over fails).
struct WakeReader<'a> {
    stream: &'a UnixStream,
    rx: std::sync::mpsc::Receiver<Work>,
}

impl Drop for WakeReader<'_> {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Read);
    }
}

/// Runs `work` and writes its reply; `Ok(false)`: the connection is done.
fn answer(switch: &Switch, writer: &UnixStream, stop: &AtomicBool, work: Work) -> io::Result<bool> {
    if stop.load(Ordering::SeqCst) {
        return Ok(false);
    }
    let close = matches!(work, Work::Close(_));
    reply(writer, &respond(switch, work, stop))?;
    Ok(!close)
}

/// Reads requests until the stream ends, `stop` is set, a line is too long or `sink` says no
/// more; hands each request to `sink` (`Ok(false)`: stop reading). Rules texts are read and
/// parsed into `bufs`' buffers.
fn read_requests(
    switch: &Switch,
    stream: &UnixStream,
    stop: &AtomicBool,
    bufs: &Arc<ParseBuffers>,
    mut sink: impl FnMut(Work) -> io::Result<bool>,
) -> io::Result<()> {
    // Big reads: a rule batch is megabytes of text.
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut line = Vec::new();
    loop {
        if line.capacity() == 0 {
            // The last request's text went with it: read into a buffer handed back.
            line = bufs.take_text();
        }
        // An idle connection (a read timeout before any byte of a request) keeps no big
        // buffer: a program may hold its connection open for hours between loads.
        let idle = |line: &mut Vec<u8>| {
            bufs.release();
            switch.release_batch_buffers();
            if line.capacity() > IDLE_LINE_BYTES {
                *line = Vec::new();
            }
        };
        let work = match next_request_idle(&mut reader, &mut line, stop, idle)? {
            Incoming::End => {
                bufs.release();
                switch.release_batch_buffers();
                return Ok(());
            }
            Incoming::Request(req) => read_work(switch, req, Some(bufs)),
            Incoming::Refused(error) => Work::Refused(error),
            Incoming::Close(error) => {
                sink(Work::Close(error))?;
                return Ok(());
            }
        };
        if !sink(work)? {
            return Ok(());
        }
    }
}

/// Most bytes an idle connection's request-line buffer keeps.
const IDLE_LINE_BYTES: usize = 64 << 10;

/// What a connection's reader takes from its stream next ([`next_request`]).
#[derive(Debug)]
pub enum Incoming {
    /// A request, with its text in it if the text followed the line (`text_bytes`).
    Request(Request),
    /// A request refused (bad JSON, unknown command, attached text not UTF-8): its error,
    /// counted; the connection goes on.
    Refused(String),
    /// A refusal after which the connection closes (a line longer than [`MAX_LINE`], or more
    /// attached text than that): its error, counted.
    Close(String),
    /// The stream ended (a request cut off by the end is counted and never run) or `stop` is
    /// set.
    End,
}

/// The next request of a connection, read from `reader` as the server reads it: one line of
/// JSON (blank lines skipped), then, for a rules text sent with `text_bytes`, exactly that
/// many bytes of text. `line` is the reader's buffer, reused across calls. Read timeouts
/// (`WouldBlock` / `TimedOut`) and interruptions are waited through, checking `stop`.
pub fn next_request(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    stop: &AtomicBool,
) -> io::Result<Incoming> {
    next_request_idle(reader, line, stop, |_| {})
}

/// [`next_request`], calling `idle` with the (empty) line buffer at each read timeout that
/// comes before any byte of the request: the connection is idle, and the caller may give
/// memory back.
pub fn next_request_idle(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    stop: &AtomicBool,
    mut idle: impl FnMut(&mut Vec<u8>),
) -> io::Result<Incoming> {
    line.clear();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Incoming::End);
        }
        let room = (MAX_LINE + 1).saturating_sub(line.len()) as u64;
        match (&mut *reader).take(room).read_until(b'\n', line) {
            Ok(0) => {
                if !line.is_empty() {
                    // A request cut off by the end of the stream: never executed.
                    CTL_BAD_REQUESTS.inc();
                }
                return Ok(Incoming::End);
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if line.is_empty() {
                    idle(line);
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if line.last() != Some(&b'\n') {
            if line.len() > MAX_LINE {
                CTL_BAD_REQUESTS.inc();
                CTL_LINE_TOO_LONG.inc();
                return Ok(Incoming::Close(format!(
                    "request line longer than {MAX_LINE} bytes (MAX_LINE); closing the connection"
                )));
            }
            continue; // a timeout mid-line: keep reading
        }
        if trim_line(line).is_empty() {
            line.clear();
            continue;
        }
        break;
    }
    let body = trim_line(line);
    let (req, n) = match decode(body) {
        Ok(mut req) => {
            let n = attached_len(&mut req);
            (Ok(req), n)
        }
        // A refused line may still announce text after it: that text is skipped, never read
        // as requests; when how much cannot be told, the connection closes.
        Err(error) => match announced_len(body) {
            Announced::None => (Err(error), None),
            Announced::Bytes(n) => (Err(error), Some(n)),
            Announced::Unknown => {
                count_refusal(&error);
                CTL_LINE_TOO_LONG.inc();
                return Ok(Incoming::Close(format!(
                    "{error}; the text after it cannot be told apart from requests \
                     (`text_bytes` not a byte count): closing the connection"
                )));
            }
        },
    };
    let Some(n) = n else {
        return Ok(match req.and_then(|r| text_fields_ok(r, true)) {
            Ok(req) => Incoming::Request(req),
            Err(error) => refused_incoming(error),
        });
    };
    if n > MAX_LINE {
        CTL_BAD_REQUESTS.inc();
        CTL_LINE_TOO_LONG.inc();
        return Ok(Incoming::Close(format!(
            "text_bytes {n} is more than {MAX_LINE} (MAX_LINE); closing the connection"
        )));
    }
    line.clear();
    match read_attached(reader, line, n, stop)? {
        Attached::Complete => {}
        // The daemon stops: nothing more is run, nothing is the client's fault.
        Attached::Stopped => return Ok(Incoming::End),
        Attached::Ended => {
            // The stream ended inside the text: never run.
            CTL_BAD_REQUESTS.inc();
            return Ok(Incoming::End);
        }
    }
    let req = match req {
        Ok(req) => req,
        Err(error) => {
            line.clear();
            return Ok(refused_incoming(error));
        }
    };
    let text = attached_text(std::mem::take(line));
    Ok(match with_text(req, text) {
        Ok(req) => Incoming::Request(req),
        Err(error) => refused_incoming(format!("bad request: {error}")),
    })
}

/// What a request line that does not decode says about text after it.
enum Announced {
    /// No `text_bytes` (or not a JSON object): nothing follows.
    None,
    /// `text_bytes` is this byte count.
    Bytes(usize),
    /// It names `text_bytes` but not as a byte count one can trust.
    Unknown,
}

/// How many bytes of text a request line that does not decode as a [`Request`] announces.
fn announced_len(body: &[u8]) -> Announced {
    let named = body.windows(12).any(|w| w == b"\"text_bytes\"");
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => match o.get("text_bytes") {
            None => Announced::None,
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) => Announced::Bytes(n),
                None => Announced::Unknown,
            },
        },
        _ if named => Announced::Unknown,
        _ => Announced::None,
    }
}

/// `req` if its rules-text fields are usable (`streamed`: it came from a connection, where
/// `text_bytes` can be read), else the refusal (`bad request: ...`).
fn text_fields_ok(mut req: Request, streamed: bool) -> Result<Request, String> {
    match text_fields(&mut req).map(|(t, n)| (t.is_some(), n.is_some())) {
        Some((false, false)) => {
            Err("bad request: missing the rules: `text` (or `text_bytes`)".into())
        }
        Some((_, true)) if !streamed => Err(format!("bad request: {NOT_STREAMED}")),
        _ => Ok(req),
    }
}

/// A refused request: counted, its error for the client.
fn refused_incoming(error: String) -> Incoming {
    count_refusal(&error);
    Incoming::Refused(error)
}

/// Counts (and logs at debug level) a refused request.
fn count_refusal(error: &str) {
    CTL_BAD_REQUESTS.inc();
    tracing::debug!("control request refused: {error}");
}

/// Reads the `n` bytes of text that follow a request line into `buf` (empty), through read
/// timeouts.
fn read_attached(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    n: usize,
    stop: &AtomicBool,
) -> io::Result<Attached> {
    // At most a megabyte ahead of what arrived: a header alone reserves no 16 MiB.
    buf.reserve(n.min(1 << 20));
    while buf.len() < n {
        if stop.load(Ordering::SeqCst) {
            return Ok(Attached::Stopped);
        }
        let want = (n - buf.len()) as u64;
        match (&mut *reader).take(want).read_to_end(buf) {
            Ok(0) => return Ok(Attached::Ended),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Attached::Complete)
}

/// How reading a request's attached text ended.
enum Attached {
    /// All of it is in the buffer.
    Complete,
    /// The stream ended first.
    Ended,
    /// The daemon stops.
    Stopped,
}

/// Attached bytes as the text they must be: UTF-8, else which line is not.
fn attached_text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        let bad = e.utf8_error().valid_up_to();
        let before = e.as_bytes().get(..bad).unwrap_or_default();
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        format!("the attached text is not valid UTF-8 (line {line})")
    })
}

/// Writes one response line; a write that times out (the client does not read) is counted.
fn reply(mut writer: &UnixStream, resp: &Value) -> io::Result<()> {
    let mut text = resp.to_string();
    text.push('\n');
    writer.write_all(text.as_bytes()).inspect_err(|e| {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            CTL_WRITE_TIMEOUTS.inc();
        }
    })
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
    config: ServerConfig,
}

/// The connections being served, shared with their threads (one descriptor each), to shut
/// them all down on stop.
#[derive(Debug, Default)]
struct Connections {
    open: Mutex<HashMap<u64, Arc<UnixStream>>>,
    count: AtomicUsize,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<UnixStream>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether an `accept` error means the process (or system) is out of a resource, which passes.
fn out_of_resources(e: &io::Error) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    const ENOBUFS: i32 = 105;
    const ENOMEM: i32 = 12;
    matches!(e.raw_os_error(), Some(ENFILE | EMFILE | ENOBUFS | ENOMEM))
}

/// Answers a refused connection with one error line (without waiting on the client) and
/// closes it.
fn refuse(stream: UnixStream, msg: &str) {
    let _ = stream.set_nonblocking(true);
    let mut s = stream;
    let _ = writeln!(s, "{}", json!({"ok": false, "error": msg}));
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Whether the peer of `stream` may use the socket: root, the daemon's own user, or a process
/// whose primary group or one of whose supplementary groups is `group`. `Err` carries the
/// refusal message.
fn admit(stream: &UnixStream, group: u32) -> Result<(), String> {
    let cred = sluice_ports::cred::peer_credentials(stream)
        .map_err(|e| format!("cannot read the peer's credentials: {e}"))?;
    if cred.uid == 0 || cred.uid == sluice_ports::cred::effective_uid() || cred.gid == group {
        return Ok(());
    }
    let groups = sluice_ports::cred::process_groups(cred.pid).unwrap_or_default();
    if groups.contains(&group) {
        return Ok(());
    }
    Err(format!(
        "permission denied: uid {} (gid {}) is neither root nor in group {group} of the control socket",
        cred.uid, cred.gid
    ))
}

impl ControlServer {
    /// [`ControlServer::bind_with`] with the default [`ServerConfig`].
    pub fn bind(path: &Path) -> io::Result<ControlServer> {
        Self::bind_with(path, ServerConfig::default())
    }

    /// Binds `path` (creating its directory) with mode [`SOCKET_MODE`] and group
    /// `config.group`, whatever the umask. A path that exists must be a socket no daemon
    /// answers on (a stale one, which is replaced): anything else (a regular file, a directory,
    /// a live daemon's socket) is refused and left alone.
    pub fn bind_with(path: &Path, config: ServerConfig) -> io::Result<ControlServer> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))
                })?;
            }
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.file_type().is_socket() => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a socket; refusing to replace it (choose another --socket path)",
                        path.display()
                    ),
                ));
            }
            Ok(_) => match UnixStream::connect(path) {
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{}: another daemon is listening there", path.display()),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    // A stale socket: nobody listens.
                    std::fs::remove_file(path)?;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "{}: cannot tell whether a daemon listens there: {e}",
                            path.display()
                        ),
                    ))
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot inspect {}: {e}", path.display()),
                ))
            }
        }
        let listener = UnixListener::bind(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind {}: {e}", path.display()))
        })?;
        // The mode the umask allowed may be wider for a moment; every connection's peer is
        // checked anyway, so a client that connects in that moment is still refused.
        let server = ControlServer {
            listener,
            path: path.to_path_buf(),
            config,
        };
        if std::fs::metadata(path)?.gid() != config.group {
            std::os::unix::fs::chown(path, None, Some(config.group)).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot give {} to group {} (--socket-group): {e}",
                        path.display(),
                        config.group
                    ),
                )
            })?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE)).map_err(
            |e| io::Error::new(e.kind(), format!("cannot chmod {}: {e}", path.display())),
        )?;
        server.listener.set_nonblocking(true)?;
        Ok(server)
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts connections (one thread each) until `stop` is set, then shuts every open
    /// connection down and returns without waiting for their clients (at most a short grace
    /// for the threads to notice). Errors of `accept` are counted and survived.
    pub fn run(&self, switch: &Arc<Switch>, stop: &Arc<AtomicBool>) -> io::Result<()> {
        let conns = Arc::new(Connections::default());
        let mut next_id = 0u64;
        let mut backoff = Duration::ZERO;
        while !stop.load(Ordering::SeqCst) {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    backoff = Duration::ZERO;
                    self.start_connection(stream, switch, stop, &conns, &mut next_id);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors or memory (or anything else): pass, wait, try again.
                    CTL_ACCEPT_ERRORS.inc();
                    backoff = if out_of_resources(&e) {
                        (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1))
                    } else {
                        Duration::from_millis(100)
                    };
                    std::thread::sleep(backoff);
                }
            }
        }
        for s in conns.lock().values() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_millis(500);
        while conns.count.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    fn start_connection(
        &self,
        stream: UnixStream,
        switch: &Arc<Switch>,
        stop: &Arc<AtomicBool>,
        conns: &Arc<Connections>,
        next_id: &mut u64,
    ) {
        if let Err(msg) = admit(&stream, self.config.group) {
            CTL_PEER_REFUSED.inc();
            tracing::debug!("control connection refused: {msg}");
            refuse(stream, &msg);
            return;
        }
        if conns.count.load(Ordering::SeqCst) >= self.config.max_connections {
            CTL_CONNECTIONS_REFUSED.inc();
            tracing::debug!("control connection refused: max_connections reached");
            refuse(
                stream,
                &format!(
                    "too many control connections ({} open, max_connections); try again later",
                    self.config.max_connections
                ),
            );
            return;
        }
        let setup = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_write_timeout(Some(self.config.write_timeout)));
        if setup.is_err() {
            CTL_ACCEPT_ERRORS.inc();
            return;
        }
        let stream = Arc::new(stream);
        *next_id += 1;
        let id = *next_id;
        conns.lock().insert(id, Arc::clone(&stream));
        conns.count.fetch_add(1, Ordering::SeqCst);
        let (sw, st, cs) = (Arc::clone(switch), Arc::clone(stop), Arc::clone(conns));
        let spawned = std::thread::Builder::new()
            .name("sluice-control".into())
            .spawn(move || {
                let _ = serve_connection(&sw, &stream, &st);
                cs.lock().remove(&id);
                cs.count.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // No thread for it (out of memory or threads): the stream is dropped with the
            // closure; forget it.
            CTL_ACCEPT_ERRORS.inc();
            conns.lock().remove(&id);
            conns.count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A client connection to a daemon's control socket.
///
/// A daemon and a client in one process (no port, so no root needed):
///
/// ```
/// use serde_json::json;
/// use sluice_switch::{Client, ControlServer, Request, Switch, SwitchConfig};
/// use std::sync::{atomic::AtomicBool, atomic::Ordering, Arc};
///
/// let path = std::env::temp_dir().join(format!("sluice-doc-{}.sock", std::process::id()));
/// let server = ControlServer::bind(&path)?;
/// let switch = Arc::new(Switch::start(SwitchConfig::default()).unwrap());
/// let stop = Arc::new(AtomicBool::new(false));
/// let daemon = {
///     let stop = Arc::clone(&stop);
///     std::thread::spawn(move || server.run(&switch, &stop))
/// };
///
/// let mut client = Client::connect(&path)?;
/// assert_eq!(client.request(&Request::Ping {})?, json!("pong"));
/// let added = client.request(&Request::FlowAdd {
///     rules: vec!["prio 10 dst_ip 10.0.0.0/8 action drop".into()],
///     atomic: true,
/// })?;
/// assert!(added[0]["handle"].is_u64());
/// let dump = client.request(&Request::FlowDump { stats: false })?;
/// assert_eq!(dump.as_array().map(Vec::len), Some(1));
/// // Errors come back as io::Error with the daemon's message.
/// let err = client.request(&Request::PortDel { name: "nope0".into(), force: false }).unwrap_err();
/// assert!(err.to_string().contains("nope0"));
///
/// stop.store(true, Ordering::SeqCst);
/// daemon.join().unwrap()?;
/// # Ok::<(), std::io::Error>(())
/// ```
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
        self.read_reply()
    }
}
