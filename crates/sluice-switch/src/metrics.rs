//! Observability off the datapath: the Prometheus text endpoint (`sluice run --metrics ADDR`)
//! and the coverage rates `sluice coverage` shows (documented in `docs/control.md`).
//!
//! # The endpoint
//!
//! [`MetricsServer`] answers `GET /metrics` with the text exposition format (version 0.0.4):
//! per-port counters and the port state, every coverage counter, the rule and mask counts and
//! the number of datapath threads, each metric named `sluice_*` with `HELP` and `TYPE` lines. It
//! runs on its own thread and reads the port counters the way the `stats` request does (a
//! control job on each datapath thread, between two polls): nothing runs on a datapath thread
//! that would not run for `stats`.
//!
//! It is a minimal HTTP/1.1 responder on a std `TcpListener`, not a web framework: one route,
//! `GET` only, one request per connection (`Connection: close`), the request head bounded to
//! [`MAX_REQUEST_HEAD`] bytes and read and written with [`IO_TIMEOUT`], connections served one
//! at a time. That is all a Prometheus scraper needs, and it adds no dependency.
//!
//! # Coverage rates
//!
//! [`spawn_sampler`] records a coverage [`snapshot`](sluice_coverage::snapshot) every
//! [`SAMPLE_PERIOD`] into [`COVERAGE_RATES`] (a [`sluice_coverage::Rates`]); the `coverage`
//! request with `"rates": true` turns the history into rates per second over 5 s, 1 min and
//! 1 h, as `ovs-appctl coverage/show` does.

use crate::switch::{PortStatsInfo, Switch};
use serde::{Deserialize, Serialize};
use sluice_coverage::{counter, Rates, Sample};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

counter!(pub METRICS_SCRAPES, "metrics_scrapes", "GET /metrics requests answered");
counter!(pub METRICS_BAD_REQUESTS, "metrics_bad_requests", "metrics endpoint requests refused (not GET /metrics, malformed, too long, too slow)");

/// Every metrics counter, for listings before they fire.
pub static COUNTERS: [&sluice_coverage::Counter; 2] = [&METRICS_SCRAPES, &METRICS_BAD_REQUESTS];

/// Longest request head (request line and headers) the endpoint reads.
pub const MAX_REQUEST_HEAD: usize = 8 << 10;

/// Longest wait to read a request or write a response on the endpoint.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the daemon samples the coverage counters for rates.
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(5);

/// Escapes a Prometheus label value (backslash, double quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One per-port metric: its name (after `sluice_port_`), help, type and how to read it.
struct PortMetric {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    get: fn(&PortStatsInfo) -> u64,
}

const PORT_METRICS: &[PortMetric] = &[
    PortMetric {
        name: "up",
        help: "1 when the port is up, 0 when it is down (its device vanished)",
        kind: "gauge",
        get: |p| u64::from(p.state == "up"),
    },
    PortMetric {
        name: "rx_packets_total",
        help: "packets received (before GRO)",
        kind: "counter",
        get: |p| p.rx_packets,
    },
    PortMetric {
        name: "rx_bytes_total",
        help: "bytes received",
        kind: "counter",
        get: |p| p.rx_bytes,
    },
    PortMetric {
        name: "tx_packets_total",
        help: "frames sent",
        kind: "counter",
        get: |p| p.tx_packets,
    },
    PortMetric {
        name: "tx_bytes_total",
        help: "bytes sent",
        kind: "counter",
        get: |p| p.tx_bytes,
    },
    PortMetric {
        name: "rx_no_match_total",
        help: "received packets no rule matched (dropped)",
        kind: "counter",
        get: |p| p.rx_no_match,
    },
    PortMetric {
        name: "rx_dropped_by_rule_total",
        help: "received packets dropped by a rule",
        kind: "counter",
        get: |p| p.rx_dropped_by_rule,
    },
    PortMetric {
        name: "rx_action_errors_total",
        help: "received packets an action failed on (dropped)",
        kind: "counter",
        get: |p| p.rx_action_errors,
    },
    PortMetric {
        name: "rx_invalid_total",
        help: "received frames the port refused (inconsistent virtio_net_hdr)",
        kind: "counter",
        get: |p| p.rx_invalid,
    },
    PortMetric {
        name: "rx_truncated_total",
        help: "received frames too big for a buffer (dropped)",
        kind: "counter",
        get: |p| p.rx_truncated,
    },
    PortMetric {
        name: "rx_kernel_drops_total",
        help: "frames the kernel dropped before the port read them (receive queue full)",
        kind: "counter",
        get: |p| p.rx_kernel_drops,
    },
    PortMetric {
        name: "tx_kernel_drops_total",
        help:
            "frames the kernel dropped after the port handed them over (interface transmit drops)",
        kind: "counter",
        get: |p| p.tx_kernel_drops,
    },
    PortMetric {
        name: "rx_errors_total",
        help: "receive calls that failed",
        kind: "counter",
        get: |p| p.rx_errors,
    },
    PortMetric {
        name: "rx_uso_frames_total",
        help: "UDP-GSO frames of tunnel datagrams split on receive",
        kind: "counter",
        get: |p| p.rx_uso_frames,
    },
    PortMetric {
        name: "rx_uso_datagrams_total",
        help: "datagrams those frames were split into (each then a received packet)",
        kind: "counter",
        get: |p| p.rx_uso_datagrams,
    },
    PortMetric {
        name: "rx_uso_drops_total",
        help: "received UDP-GSO tunnel frames that would not split (dropped)",
        kind: "counter",
        get: |p| p.rx_uso_drops,
    },
    PortMetric {
        name: "tx_prepare_drops_total",
        help: "packets transmit preparation dropped for this egress",
        kind: "counter",
        get: |p| p.tx_prepare_drops,
    },
    PortMetric {
        name: "tx_hw_gso_total",
        help: "GSO packets handed to this egress's device whole",
        kind: "counter",
        get: |p| p.tx_hw_gso,
    },
    PortMetric {
        name: "tx_soft_gso_total",
        help: "GSO packets segmented in software for this egress (its device could not)",
        kind: "counter",
        get: |p| p.tx_soft_gso,
    },
    PortMetric {
        name: "tx_partial_gso_total",
        help: "GSO packets split by partial segmentation for this egress",
        kind: "counter",
        get: |p| p.tx_partial_gso,
    },
    PortMetric {
        name: "tx_errors_total",
        help: "frames the port failed to send",
        kind: "counter",
        get: |p| p.tx_errors,
    },
    PortMetric {
        name: "gro_merged_segments_total",
        help: "segments software GRO merged",
        kind: "counter",
        get: |p| p.gro_merged_segments,
    },
    PortMetric {
        name: "gro_merged_packets_total",
        help: "packets software GRO built from two or more segments",
        kind: "counter",
        get: |p| p.gro_merged_packets,
    },
];

/// What the exposition shows besides the coverage counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchFigures {
    /// Every port's counters.
    pub ports: Vec<PortStatsInfo>,
    /// Rules in the flow table.
    pub rules: usize,
    /// Distinct masks in the flow table.
    pub masks: usize,
    /// Datapath threads.
    pub threads: usize,
}

fn gauge(out: &mut String, name: &str, help: &str, v: usize) {
    let _ = writeln!(out, "# HELP sluice_{name} {help}");
    let _ = writeln!(out, "# TYPE sluice_{name} gauge");
    let _ = writeln!(out, "sluice_{name} {v}");
}

/// The Prometheus text exposition of `figures` and the coverage `samples`.
pub fn render(figures: &SwitchFigures, samples: &[Sample]) -> String {
    let mut out = String::new();
    for m in PORT_METRICS {
        let _ = writeln!(out, "# HELP sluice_port_{} {}", m.name, m.help);
        let _ = writeln!(out, "# TYPE sluice_port_{} {}", m.name, m.kind);
        for p in &figures.ports {
            let _ = writeln!(
                out,
                "sluice_port_{}{{port=\"{}\",name=\"{}\"}} {}",
                m.name,
                p.number,
                label(&p.name),
                (m.get)(p)
            );
        }
    }
    gauge(
        &mut out,
        "flow_rules",
        "rules in the flow table",
        figures.rules,
    );
    gauge(
        &mut out,
        "flow_masks",
        "distinct masks in the flow table",
        figures.masks,
    );
    gauge(
        &mut out,
        "datapath_threads",
        "datapath threads",
        figures.threads,
    );
    out.push_str(&sluice_coverage::prometheus(samples));
    out
}

/// Reads the figures of `switch` (the port counters through its datapath threads) and the
/// coverage counters, and renders them.
pub fn scrape(switch: &Switch) -> Result<String, String> {
    let ports = switch.stats().map_err(|e| e.to_string())?;
    let (rules, masks) = switch.flow_counts();
    let figures = SwitchFigures {
        ports,
        rules,
        masks,
        threads: switch.threads(),
    };
    Ok(render(&figures, &sluice_coverage::snapshot()))
}

/// The Prometheus endpoint's listening socket.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
}

impl MetricsServer {
    /// Binds `addr` (`HOST:PORT`; port 0 picks a free one).
    pub fn bind(addr: &str) -> io::Result<MetricsServer> {
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("metrics address {addr:?}: {e} (HOST:PORT)"),
                )
            })?
            .collect();
        let listener = TcpListener::bind(&addrs[..])
            .map_err(|e| io::Error::new(e.kind(), format!("cannot bind metrics {addr}: {e}")))?;
        listener.set_nonblocking(true)?;
        Ok(MetricsServer { listener })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves on a thread of its own until `stop` is set.
    pub fn spawn(self, switch: Arc<Switch>, stop: Arc<AtomicBool>) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("sluice-metrics".into())
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match self.listener.accept() {
                        Ok((stream, _)) => {
                            let _ = serve(&switch, stream);
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // WouldBlock, or out of descriptors: wait and try again.
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    BadMethod,
    Bad,
}

/// Parses the request line of `head` (the bytes before the blank line).
fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::Bad;
    };
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Bad;
    }
    if method != "GET" && method != "HEAD" {
        return Route::BadMethod;
    }
    let path = target.split('?').next().unwrap_or("");
    if path == "/metrics" {
        Route::Metrics
    } else {
        Route::NotFound
    }
}

/// Reads the request head: the bytes before `\r\n\r\n`; `None` when it is too long, cut off
/// or too slow.
fn read_head(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => {
                head.extend_from_slice(buf.get(..n)?);
                if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    head.truncate(end);
                    return Some(head);
                }
                if head.len() > MAX_REQUEST_HEAD {
                    return None;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    None
}

/// Answers one connection.
fn serve(switch: &Switch, mut stream: TcpStream) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let head = read_head(&mut stream);
    let route = head.as_deref().map_or(Route::Bad, route);
    let head_only = head.as_deref().is_some_and(|h| h.starts_with(b"HEAD "));
    let (status, kind, body) = match route {
        Route::Metrics => match scrape(switch) {
            Ok(text) => {
                METRICS_SCRAPES.inc();
                ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text)
            }
            Err(e) => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                format!("cannot read the switch: {e}\n"),
            ),
        },
        Route::NotFound => {
            METRICS_BAD_REQUESTS.inc();
            (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "only /metrics is served here\n".to_string(),
            )
        }
        Route::BadMethod => {
            METRICS_BAD_REQUESTS.inc();
            (
                "405 Method Not Allowed",
                "text/plain; charset=utf-8",
                "only GET is served here\n".to_string(),
            )
        }
        Route::Bad => {
            METRICS_BAD_REQUESTS.inc();
            (
                "400 Bad Request",
                "text/plain; charset=utf-8",
                "bad request\n".to_string(),
            )
        }
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        resp.push_str(&body);
    }
    stream.write_all(resp.as_bytes())?;
    stream.flush()
}

/// The daemon's coverage history: snapshots taken by [`spawn_sampler`], turned into rates on
/// request.
#[derive(Debug)]
pub struct CoverageHistory {
    origin: Instant,
    rates: Mutex<Rates>,
}

/// The process's coverage history (the coverage counters are per process too).
pub static COVERAGE_RATES: LazyLock<CoverageHistory> = LazyLock::new(CoverageHistory::new);

/// One counter's rates, as the `coverage` request with `"rates": true` returns them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateInfo {
    /// Counter name.
    pub name: String,
    /// Events per second over the last 5 s.
    pub per_sec_5s: f64,
    /// Events per second over the last minute.
    pub per_sec_1m: f64,
    /// Events per second over the last hour.
    pub per_sec_1h: f64,
    /// The total now.
    pub total: u64,
}

impl Default for CoverageHistory {
    fn default() -> Self {
        Self::new()
    }
}

impl CoverageHistory {
    /// An empty history whose clock starts now.
    pub fn new() -> CoverageHistory {
        CoverageHistory {
            origin: Instant::now(),
            rates: Mutex::new(Rates::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rates> {
        self.rates.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `samples` taken at `now` (time since any fixed origin: the caller's clock).
    pub fn record_at(&self, now: Duration, samples: Vec<Sample>) {
        self.lock().record(now, samples);
    }

    /// Records a snapshot of the coverage counters now.
    pub fn sample(&self) {
        self.record_at(self.origin.elapsed(), sluice_coverage::snapshot());
    }

    /// Rates from the recorded history, with each total taken from `current` (a fresher
    /// snapshot; a counter absent from the history has rate 0). Counters at zero are left out
    /// unless `all`. In `current`'s order.
    pub fn show(&self, current: &[Sample], all: bool) -> Vec<RateInfo> {
        let rates = self.lock().rates();
        current
            .iter()
            .filter(|s| all || s.value != 0)
            .map(|s| {
                let r = rates.iter().find(|r| r.name == s.name);
                RateInfo {
                    name: s.name.to_string(),
                    per_sec_5s: r.map_or(0.0, |r| r.per_sec_5s),
                    per_sec_1m: r.map_or(0.0, |r| r.per_sec_1m),
                    per_sec_1h: r.map_or(0.0, |r| r.per_sec_1h),
                    total: s.value,
                }
            })
            .collect()
    }
}

/// Samples the coverage counters into [`COVERAGE_RATES`] now and then every
/// [`SAMPLE_PERIOD`] on a thread of its own, until `stop` is set.
pub fn spawn_sampler(stop: Arc<AtomicBool>) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sluice-coverage".into())
        .spawn(move || {
            let mut next = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if Instant::now() >= next {
                    COVERAGE_RATES.sample();
                    next += SAMPLE_PERIOD;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
}

/// The `coverage/show` table of `rates`: one line per counter, rates per second over the last
/// 5 s, minute and hour, and the total.
pub fn rates_table(rates: &[RateInfo]) -> String {
    let mut out = String::from(
        "Event coverage, avg rate over last: 5 seconds, last minute, last hour, total:\n",
    );
    let w = rates
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max(26);
    for r in rates {
        let _ = writeln!(
            out,
            "{:<w$} {:>9.1}/sec {:>11.3}/sec {:>12.4}/sec   total: {}",
            r.name, r.per_sec_5s, r.per_sec_1m, r.per_sec_1h, r.total
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(number: u32, name: &str, up: bool, rx: u64) -> PortStatsInfo {
        PortStatsInfo {
            number,
            name: name.into(),
            state: if up { "up" } else { "down" }.into(),
            rx_packets: rx,
            rx_bytes: rx * 100,
            tx_packets: 3,
            tx_bytes: 300,
            rx_no_match: 4,
            rx_dropped_by_rule: 5,
            rx_action_errors: 6,
            rx_invalid: 7,
            rx_truncated: 8,
            rx_kernel_drops: 9,
            tx_kernel_drops: 4,
            rx_errors: 10,
            rx_uso_frames: 0,
            rx_uso_datagrams: 0,
            rx_uso_drops: 0,
            tx_prepare_drops: 11,
            tx_hw_gso: 15,
            tx_soft_gso: 16,
            tx_partial_gso: 17,
            tx_errors: 12,
            gro_merged_segments: 13,
            gro_merged_packets: 14,
        }
    }

    fn sample(name: &'static str, value: u64) -> Sample {
        Sample {
            name,
            help: "a test counter",
            value,
        }
    }

    #[test]
    fn exposition_has_every_port_column_with_help_and_type() {
        let figures = SwitchFigures {
            ports: vec![port(1, "tap\"a", true, 2), port(7, "b", false, 0)],
            rules: 12,
            masks: 3,
            threads: 2,
        };
        let text = render(&figures, &[sample("ctl_requests", 42)]);
        for line in [
            "# TYPE sluice_port_up gauge",
            "sluice_port_up{port=\"1\",name=\"tap\\\"a\"} 1",
            "sluice_port_up{port=\"7\",name=\"b\"} 0",
            "# TYPE sluice_port_rx_packets_total counter",
            "sluice_port_rx_packets_total{port=\"1\",name=\"tap\\\"a\"} 2",
            "sluice_port_rx_bytes_total{port=\"1\",name=\"tap\\\"a\"} 200",
            "sluice_port_tx_packets_total{port=\"7\",name=\"b\"} 3",
            "sluice_port_tx_bytes_total{port=\"7\",name=\"b\"} 300",
            "sluice_port_rx_no_match_total{port=\"7\",name=\"b\"} 4",
            "sluice_port_rx_dropped_by_rule_total{port=\"7\",name=\"b\"} 5",
            "sluice_port_rx_action_errors_total{port=\"7\",name=\"b\"} 6",
            "sluice_port_rx_invalid_total{port=\"7\",name=\"b\"} 7",
            "sluice_port_rx_truncated_total{port=\"7\",name=\"b\"} 8",
            "sluice_port_rx_kernel_drops_total{port=\"7\",name=\"b\"} 9",
            "sluice_port_tx_kernel_drops_total{port=\"7\",name=\"b\"} 4",
            "sluice_port_rx_errors_total{port=\"7\",name=\"b\"} 10",
            "sluice_port_tx_prepare_drops_total{port=\"7\",name=\"b\"} 11",
            "sluice_port_tx_errors_total{port=\"7\",name=\"b\"} 12",
            "sluice_port_gro_merged_segments_total{port=\"7\",name=\"b\"} 13",
            "sluice_port_gro_merged_packets_total{port=\"7\",name=\"b\"} 14",
            "# TYPE sluice_flow_rules gauge",
            "sluice_flow_rules 12",
            "sluice_flow_masks 3",
            "sluice_datapath_threads 2",
            "# HELP sluice_ctl_requests_total a test counter",
            "# TYPE sluice_ctl_requests_total counter",
            "sluice_ctl_requests_total 42",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing:\n{text}");
        }
        // Every sample line has a HELP and a TYPE line for its family.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let family = l.split(['{', ' ']).next().unwrap_or("");
            assert!(
                text.contains(&format!("# HELP {family} ")),
                "{family}: no HELP"
            );
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family}: no TYPE"
            );
        }
    }

    #[test]
    fn routes() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x"), Route::Metrics);
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0"), Route::Metrics);
        assert_eq!(route(b"HEAD /metrics HTTP/1.1"), Route::Metrics);
        assert_eq!(route(b"GET / HTTP/1.1"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1"), Route::BadMethod);
        assert_eq!(route(b"GET /metrics"), Route::Bad);
        assert_eq!(route(b"GET /metrics SPDY/3"), Route::Bad);
        assert_eq!(route(b"\xff\xfe"), Route::Bad);
        assert_eq!(route(b""), Route::Bad);
    }

    #[test]
    fn rates_follow_a_fake_clock() {
        let h = CoverageHistory::new();
        let s = Duration::from_secs;
        // 10 events per 5 s for a minute, then nothing for 5 s.
        for i in 0..=12u64 {
            h.record_at(s(i * 5), vec![sample("a", i * 10), sample("z", 0)]);
        }
        h.record_at(s(65), vec![sample("a", 120), sample("z", 0)]);
        let cur = [sample("a", 125), sample("z", 0)];
        let shown = h.show(&cur, false);
        assert_eq!(shown.len(), 1, "zeros left out: {shown:?}");
        let a = &shown[0];
        assert_eq!(a.name, "a");
        assert_eq!(a.total, 125, "the total is the current value");
        assert_eq!(a.per_sec_5s, 0.0, "nothing in the last 5 s");
        // Over the last minute (t = 5 … 65): 110 events in 60 s.
        assert!((a.per_sec_1m - 110.0 / 60.0).abs() < 1e-9, "{a:?}");
        // Less than an hour recorded: the average since the first sample, 120 in 65 s.
        assert!((a.per_sec_1h - 120.0 / 65.0).abs() < 1e-9, "{a:?}");
        let all = h.show(&cur, true);
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].per_sec_1m, 0.0);
        let table = rates_table(&all);
        assert!(table.starts_with("Event coverage, avg rate over last: 5 seconds"));
        assert!(table.contains("total: 125"), "{table}");
    }

    #[test]
    fn a_counter_not_yet_sampled_shows_rate_zero() {
        let h = CoverageHistory::new();
        let shown = h.show(&[sample("new", 3)], false);
        assert_eq!(shown[0].per_sec_5s, 0.0);
        assert_eq!(shown[0].total, 3);
    }
}
