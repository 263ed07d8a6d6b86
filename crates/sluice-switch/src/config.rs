//! The daemon's configuration file (`sluice run --config FILE`, JSON): what it may hold and the
//! checks that need nothing but the file. [`Config::parse`] is the whole reader the daemon runs
//! on the file's text (the `config` fuzz target runs it on arbitrary bytes).

use crate::switch::PortRequest;
use serde::Deserialize;
use std::path::PathBuf;

/// The configuration `sluice run` uses when given no file (`--print-default-config` shows it).
pub const DEFAULT_CONFIG: &str = r#"{
  "socket": "/run/sluice/sluice.sock",
  "db": "/var/lib/sluice",
  "batch": 64,
  "poll_timeout_us": 2000,
  "busy_poll_us": 50,
  "max_rules": 1048576,
  "max_masks": 4096,
  "max_rule_bytes": 1073741824,
  "socket_group": "0",
  "max_connections": 64,
  "write_timeout_ms": 5000,
  "log_level": "info",
  "ports": [],
  "flows": []
}"#;

/// The default store directory of `sluice run` (`--db`).
pub const DEFAULT_DB: &str = "/var/lib/sluice";

/// Most datapath threads: a TAP has at most 256 queues (the kernel's `MAX_TAP_QUEUES`).
pub const MAX_THREADS: usize = 256;

/// Most frames per port per poll (`batch`).
pub const MAX_BATCH_FRAMES: usize = 1024;

/// Longest `busy_poll_us`: 10 ms.
pub const MAX_BUSY_POLL_US: u64 = 10_000;

/// The default `busy_poll_us`: how long a datapath thread keeps polling, yielding between
/// passes, after an empty pass that follows one with frames, before it sleeps (BENCHMARKS.md,
/// "The busy poll yields").
pub const DEFAULT_BUSY_POLL_US: u64 = 50;

/// Longest `write_timeout_ms`: 10 minutes.
pub const MAX_WRITE_TIMEOUT_MS: u64 = 600_000;

/// How much the daemon says (`"log_level"`, `sluice run --log-level`).
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Failures only.
    Error,
    /// And what went wrong but was survived (a port whose device vanished).
    Warn,
    /// And startup, ports, stop (the default).
    #[default]
    Info,
    /// And every refused control request.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// Every level, by its name in the file and on the command line.
    pub const ALL: [(&'static str, LogLevel); 5] = [
        ("error", LogLevel::Error),
        ("warn", LogLevel::Warn),
        ("info", LogLevel::Info),
        ("debug", LogLevel::Debug),
        ("trace", LogLevel::Trace),
    ];

    /// The level named `name` (`error`, `warn`, `info`, `debug`, `trace`).
    pub fn from_name(name: &str) -> Option<LogLevel> {
        LogLevel::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, l)| l)
    }

    /// The `tracing` level: events at it and above are written.
    pub fn level(self) -> tracing::Level {
        match self {
            LogLevel::Error => tracing::Level::ERROR,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Trace => tracing::Level::TRACE,
        }
    }
}

/// `"db": null` (no store) apart from an absent `"db"` (the default).
fn some_db<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<PathBuf>>, D::Error> {
    Option::<PathBuf>::deserialize(d).map(Some)
}

/// The daemon's configuration file (JSON). Every field is optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Control socket path.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// The durable store's directory; `null`: no store (nothing survives a restart). The
    /// default is [`DEFAULT_DB`].
    #[serde(default, deserialize_with = "some_db")]
    pub db: Option<Option<PathBuf>>,
    /// Frames per port per poll (1 to [`MAX_BATCH_FRAMES`]).
    #[serde(default)]
    pub batch: Option<usize>,
    /// Longest idle wait of the datapath thread, in microseconds (clamped to 10 µs – 1 s).
    #[serde(default)]
    pub poll_timeout_us: Option<u64>,
    /// How long the datapath thread keeps polling, yielding between passes, after an empty
    /// pass that follows one with frames, before it sleeps, in microseconds (0: never spin; at
    /// most [`MAX_BUSY_POLL_US`]; default [`DEFAULT_BUSY_POLL_US`]).
    #[serde(default)]
    pub busy_poll_us: Option<u64>,
    /// Datapath threads, each with its own queue of every port (1 to [`MAX_THREADS`]); one
    /// per CPU when absent.
    #[serde(default)]
    pub threads: Option<usize>,
    /// Pin datapath thread `i` to the `i`-th CPU the daemon may run on. Absent (as in the
    /// default): pinned when there is one thread per such CPU (the default thread count, unless
    /// a CPU quota lowers it); `true`: also with fewer threads; `false`: never.
    #[serde(default)]
    pub pin_threads: Option<bool>,
    /// Most flow rules.
    #[serde(default)]
    pub max_rules: Option<usize>,
    /// Most distinct masks in the flow table.
    #[serde(default)]
    pub max_masks: Option<usize>,
    /// Most bytes of rules (the flow table's per-rule estimate).
    #[serde(default)]
    pub max_rule_bytes: Option<usize>,
    /// The control socket's group (a name or a number): its members may use the socket.
    #[serde(default)]
    pub socket_group: Option<String>,
    /// Most control connections served at once (at least 1).
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Longest wait to write one reply to a control client, in milliseconds (1 to
    /// [`MAX_WRITE_TIMEOUT_MS`]).
    #[serde(default)]
    pub write_timeout_ms: Option<u64>,
    /// Address (`HOST:PORT`) of the Prometheus text endpoint (`GET /metrics`); none when absent.
    #[serde(default)]
    pub metrics: Option<String>,
    /// How much the daemon says on stderr: `error`, `warn`, `info` (default), `debug`, `trace`.
    #[serde(default)]
    pub log_level: Option<LogLevel>,
    /// Ports to open at start.
    #[serde(default)]
    pub ports: Vec<PortRequest>,
    /// Rules to insert at start (one batch, all or nothing).
    #[serde(default)]
    pub flows: Vec<String>,
}

/// The number of datapath threads `n` if it is allowed, else the message.
pub fn check_threads(n: usize) -> Result<usize, String> {
    if (1..=MAX_THREADS).contains(&n) {
        Ok(n)
    } else {
        Err(format!("threads must be 1 to {MAX_THREADS}, not {n}"))
    }
}

/// The datapath threads `sluice run` (and `sluice demo`) start when told no number: one per
/// CPU, at most [`MAX_THREADS`].
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
}

/// Whether `threads` datapath threads are pinned when nothing says: only when every CPU the
/// process may run on (`sched_getaffinity`) gets one thread. With fewer, pinning would put
/// every such daemon on the same first CPUs.
pub fn default_pin_threads(threads: usize) -> bool {
    sluice_ports::sched::allowed_cpus().is_ok_and(|c| c.len() == threads)
}

impl Config {
    /// Reads a configuration from the text of its file and checks the values that need
    /// nothing else (ranges of `batch`, `busy_poll_us`, `threads`, `max_connections`,
    /// `write_timeout_ms`). `Err` holds the message (`invalid configuration: ...` for a file
    /// that is not such JSON).
    pub fn parse(text: &str) -> Result<Config, String> {
        let c: Config =
            serde_json::from_str(text).map_err(|e| format!("invalid configuration: {e}"))?;
        if let Some(b) = c.batch {
            if !(1..=MAX_BATCH_FRAMES).contains(&b) {
                return Err(format!("batch must be 1 to {MAX_BATCH_FRAMES}, not {b}"));
            }
        }
        if let Some(t) = c.busy_poll_us {
            if t > MAX_BUSY_POLL_US {
                return Err(format!(
                    "busy_poll_us must be at most {MAX_BUSY_POLL_US} (10 ms), not {t}"
                ));
            }
        }
        if let Some(n) = c.threads {
            check_threads(n)?;
        }
        if c.max_connections == Some(0) {
            return Err("max_connections must be at least 1".into());
        }
        if let Some(ms) = c.write_timeout_ms {
            if !(1..=MAX_WRITE_TIMEOUT_MS).contains(&ms) {
                return Err(format!(
                    "write_timeout_ms must be 1 to {MAX_WRITE_TIMEOUT_MS}, not {ms}"
                ));
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_configuration_parses() {
        let c = Config::parse(DEFAULT_CONFIG).expect("default");
        assert_eq!(c.batch, Some(64));
        assert_eq!(c.db, Some(Some(PathBuf::from(DEFAULT_DB))));
        assert_eq!(c.log_level, Some(LogLevel::Info));
        let c = Config::parse(r#"{"db": null}"#).expect("no db");
        assert_eq!(c.db, Some(None));
        assert_eq!(Config::parse("{}").expect("empty").db, None);
    }

    #[test]
    fn the_default_configuration_says_what_the_switch_does_without_one() {
        let c = Config::parse(DEFAULT_CONFIG).expect("default");
        let s = crate::switch::SwitchConfig::default();
        assert_eq!(c.busy_poll_us, Some(DEFAULT_BUSY_POLL_US));
        assert_eq!(
            s.busy_poll,
            std::time::Duration::from_micros(DEFAULT_BUSY_POLL_US)
        );
        assert_eq!(
            c.poll_timeout_us.map(std::time::Duration::from_micros),
            Some(s.poll_timeout)
        );
    }

    #[test]
    fn out_of_range_values_and_bad_json_are_refused_with_their_message() {
        for (text, want) in [
            ("{not json", "invalid configuration: "),
            (r#"{"batch": 0}"#, "batch must be 1 to 1024, not 0"),
            (r#"{"batch": 1025}"#, "batch must be 1 to 1024, not 1025"),
            (
                r#"{"busy_poll_us": 10001}"#,
                "busy_poll_us must be at most 10000",
            ),
            (r#"{"threads": 0}"#, "threads must be 1 to 256, not 0"),
            (r#"{"threads": 257}"#, "threads must be 1 to 256, not 257"),
            (
                r#"{"max_connections": 0}"#,
                "max_connections must be at least 1",
            ),
            (
                r#"{"write_timeout_ms": 0}"#,
                "write_timeout_ms must be 1 to 600000, not 0",
            ),
            (
                r#"{"colour": "blue"}"#,
                "invalid configuration: unknown field `colour`",
            ),
            (
                r#"{"log_level": "loud"}"#,
                "invalid configuration: unknown variant `loud`",
            ),
        ] {
            let e = Config::parse(text).expect_err(text);
            assert!(e.starts_with(want), "{text}: {e}");
        }
    }

    #[test]
    fn levels_parse_from_the_configuration() {
        for (name, want) in LogLevel::ALL {
            let got: LogLevel = serde_json::from_str(&format!("\"{name}\"")).expect(name);
            assert_eq!(got, want);
            assert_eq!(LogLevel::from_name(name), Some(want));
        }
        assert!(serde_json::from_str::<LogLevel>("\"loud\"").is_err());
        assert_eq!(LogLevel::from_name("loud"), None);
        assert_eq!(LogLevel::default().level(), tracing::Level::INFO);
    }
}
