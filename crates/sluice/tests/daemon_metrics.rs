//! Observability of `sluice run` as root: the Prometheus endpoint (`--metrics`) answers with
//! the exact counters a test just moved (three pings forwarded between two TAPs in namespaces
//! without IPv6, so nothing else crosses them; a malformed control request; one rule), and
//! `sluice coverage` shows the rate columns.

mod daemon_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn unique(tag: &str) -> String {
    format!("{tag}{}", std::process::id() % 100_000)
}

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}"))
}

fn must(cmd: &str, args: &[&str]) {
    let out = run(cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace without IPv6 (no router solicitations, no MLD: nothing crosses its
/// interfaces unless the test sends it); deleted when dropped.
struct Ns(String);

impl Ns {
    fn new(name: String) -> Ns {
        let _ = run("ip", &["netns", "del", &name]);
        must("ip", &["netns", "add", &name]);
        let ns = Ns(name);
        ns.exec(&[
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
        ns
    }

    fn exec(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.0];
        all.extend_from_slice(args);
        must("ip", &all);
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.0]);
    }
}

/// The daemon, killed when dropped.
struct Daemon {
    child: Child,
    sock: PathBuf,
    cfg: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.cfg);
        // A killed daemon leaves its socket file behind.
        let _ = std::fs::remove_file(&self.sock);
    }
}

impl Daemon {
    /// Starts `sluice run ARGS --config FILE` with `config` on a private socket and waits until
    /// it listens.
    fn start(tag: &str, config: &str, args: &[&str]) -> Daemon {
        let dir = std::env::temp_dir();
        let sock = dir.join(format!("{}.sock", unique(tag)));
        let cfg = dir.join(format!("{}.json", unique(tag)));
        std::fs::write(&cfg, config).expect("write config");
        let mut child = daemon_common::run_with_config(&mut sluice(), &sock, &cfg, args)
            .spawn()
            .expect("start the daemon");
        if let Err(said) = daemon_common::wait_listening(&mut child) {
            panic!("the daemon did not start listening: {said}");
        }
        Daemon { child, sock, cfg }
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// `GET path` on `addr`: (status line, body).
fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

fn has(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

fn client(sock: &Path, args: &[&str]) -> String {
    let out = sluice()
        .arg("--socket")
        .arg(sock)
        .args(args)
        .output()
        .expect("run sluice");
    assert!(
        out.status.success(),
        "sluice {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn metrics_endpoint_shows_the_counters_a_test_moved_and_coverage_shows_rates() {
    sluice_testkit::root();
    let (ta, tb) = (unique("mta"), unique("mtb"));
    let (na, nb) = (
        Ns::new(unique("sluice-met-a-")),
        Ns::new(unique("sluice-met-b-")),
    );
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start(
        "sluice-met-",
        &format!(
            r#"{{"busy_poll_us": 0, "threads": 1,
                "ports": [{{"name": "{ta}", "kind": "tap", "netns": "{}"}},
                          {{"name": "{tb}", "kind": "tap", "netns": "{}"}}],
                "flows": ["in_port {ta} action output:{tb}"]}}"#,
            na.0, nb.0
        ),
        &["--metrics", &addr],
    );

    // Nothing moved yet.
    let (status, before) = get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{before}");
    for line in [
        format!("sluice_port_up{{port=\"1\",name=\"{ta}\"}} 1"),
        format!("sluice_port_up{{port=\"2\",name=\"{tb}\"}} 1"),
        "sluice_flow_rules 1".to_string(),
        "sluice_flow_masks 1".to_string(),
        "sluice_datapath_threads 1".to_string(),
        "sluice_ctl_bad_requests_total 0".to_string(),
        "# TYPE sluice_port_rx_kernel_drops_total counter".to_string(),
        "# TYPE sluice_ctl_bad_requests_total counter".to_string(),
    ] {
        assert!(has(&before, &line), "{line:?} missing:\n{before}");
    }

    // Three pings of 98-byte frames from A, forwarded to B; a static neighbour means no ARP.
    na.exec(&["ip", "link", "set", &ta, "up"]);
    nb.exec(&["ip", "link", "set", &tb, "up"]);
    na.exec(&["ip", "addr", "add", "10.77.0.1/24", "dev", &ta]);
    na.exec(&[
        "ip",
        "neigh",
        "add",
        "10.77.0.2",
        "lladdr",
        "02:00:00:00:77:02",
        "dev",
        &ta,
        "nud",
        "permanent",
    ]);
    // No one answers: ping exits non-zero; only the requests matter.
    let _ = run(
        "ip",
        &[
            "netns",
            "exec",
            &na.0,
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "1",
            "10.77.0.2",
        ],
    );
    // A malformed control request.
    let mut c = UnixStream::connect(&d.sock).expect("connect");
    c.write_all(b"{not json\n").expect("send");
    let mut buf = [0u8; 256];
    let n = c.read(&mut buf).expect("the refusal");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("bad request"));

    let want = [
        format!("sluice_port_rx_packets_total{{port=\"1\",name=\"{ta}\"}} 3"),
        format!("sluice_port_rx_bytes_total{{port=\"1\",name=\"{ta}\"}} 294"),
        format!("sluice_port_tx_packets_total{{port=\"2\",name=\"{tb}\"}} 3"),
        format!("sluice_port_tx_bytes_total{{port=\"2\",name=\"{tb}\"}} 294"),
        format!("sluice_port_rx_packets_total{{port=\"2\",name=\"{tb}\"}} 0"),
        format!("sluice_port_rx_no_match_total{{port=\"1\",name=\"{ta}\"}} 0"),
        format!("sluice_port_tx_errors_total{{port=\"2\",name=\"{tb}\"}} 0"),
        "sluice_ctl_bad_requests_total 1".to_string(),
        "sluice_metrics_scrapes_total 1".to_string(),
    ];
    let mut after = String::new();
    let waited = sluice_testkit::wait_until("the forwarded pings", Duration::from_secs(10), || {
        after = get(&addr, "/metrics").1;
        has(&after, &want[2])
    });
    assert!(waited.is_ok(), "{after}");
    for line in &want[..want.len() - 1] {
        assert!(has(&after, line), "{line:?} missing:\n{after}");
    }
    assert!(
        after
            .lines()
            .any(|l| l.starts_with("sluice_metrics_scrapes_total ")),
        "{after}"
    );

    // The rule's own counters in flow dump: the three pings, 98 bytes each.
    let dump = client(&d.sock, &["flow", "dump"]);
    let line = dump.lines().next().unwrap_or("");
    assert!(
        line.starts_with("handle 1: ") && line.contains(" packets=3 bytes=294 used="),
        "{dump}"
    );
    let used = line.rsplit("used=").next().unwrap_or("");
    let secs: f64 = used.trim_end_matches('s').parse().expect("used=SECONDSs");
    assert!((0.0..60.0).contains(&secs), "{line}");
    assert_eq!(
        client(&d.sock, &["flow", "dump", "--no-stats"]).trim(),
        format!(
            "handle 1: {}",
            line.trim_start_matches("handle 1: ")
                .split(" packets=")
                .next()
                .unwrap_or("")
        ),
    );
    // Deleted and added again (the table reuses its slot): a new handle, counters from zero.
    client(&d.sock, &["flow", "del", "handle 1"]);
    client(
        &d.sock,
        &["flow", "add", &format!("in_port {ta} action output:{tb}")],
    );
    let dump = client(&d.sock, &["flow", "dump"]);
    assert!(
        dump.trim().starts_with("handle 2: ")
            && dump.trim().ends_with("packets=0 bytes=0 used=never"),
        "{dump}"
    );

    // Anything but GET /metrics is refused and counted.
    assert_eq!(get(&addr, "/").0, "HTTP/1.1 404 Not Found");
    let (_, last) = get(&addr, "/metrics");
    assert!(has(&last, "sluice_metrics_bad_requests_total 1"), "{last}");

    // coverage/show columns, and the JSON form.
    let table = client(&d.sock, &["coverage"]);
    assert!(
        table.starts_with(
            "Event coverage, avg rate over last: 5 seconds, last minute, last hour, total:"
        ),
        "{table}"
    );
    let line = table
        .lines()
        .find(|l| l.starts_with("ctl_bad_requests "))
        .unwrap_or_else(|| panic!("no ctl_bad_requests line: {table}"));
    assert_eq!(line.matches("/sec").count(), 3, "{line}");
    assert!(line.ends_with("total: 1"), "{line}");
    let json: serde_json::Value =
        serde_json::from_str(&client(&d.sock, &["coverage", "--json"])).expect("coverage JSON");
    let bad = &json["ctl_bad_requests"];
    assert_eq!(bad["total"], 1, "{json}");
    for k in ["per_sec_5s", "per_sec_1m", "per_sec_1h"] {
        assert!(bad[k].as_f64().is_some_and(|r| r >= 0.0), "{k}: {json}");
    }
    drop(d);
}

/// Starts `sluice run ARGS` with a private socket and one TAP `tap`; returns the daemon and a
/// channel of its stderr lines.
fn start_logging(tap: &str, args: &[&str]) -> (Daemon, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let dir = std::env::temp_dir();
    let sock = dir.join(format!("{}.sock", unique(&format!("sluice-log-{tap}-"))));
    let cfg = dir.join(format!("{}.json", unique(&format!("sluice-log-{tap}-"))));
    std::fs::write(
        &cfg,
        format!(
            r#"{{"busy_poll_us": 0, "threads": 1, "ports": [{{"name": "{tap}", "kind": "tap"}}]}}"#
        ),
    )
    .expect("write config");
    let mut child = daemon_common::run_with_config(&mut sluice(), &sock, &cfg, args)
        .spawn()
        .expect("start the daemon");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let d = Daemon { child, sock, cfg };
    let ready = sluice_testkit::wait_until("the control socket", Duration::from_secs(20), || {
        UnixStream::connect(&d.sock).is_ok()
    });
    assert!(ready.is_ok(), "the daemon did not start");
    (d, rx)
}

/// Lines of `rx` until one contains `what` (`Ok`) or 10 s pass (`Err` with what was said).
fn said(rx: &std::sync::mpsc::Receiver<String>, what: &str) -> Result<String, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut all = String::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(what) => return Ok(l),
            Ok(l) => {
                all.push_str(&l);
                all.push('\n');
            }
            Err(_) => break,
        }
    }
    Err(all)
}

fn bad_request(sock: &Path) {
    let mut c = UnixStream::connect(sock).expect("connect");
    c.write_all(b"{\"cmd\": \"no_such_command\"}\n")
        .expect("send");
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).expect("the refusal");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("\"ok\":false"));
}

#[test]
fn log_levels_choose_what_the_daemon_says() {
    sluice_testkit::root();
    // debug: startup at INFO, refusals at DEBUG, a vanished TAP at WARN.
    let tap = unique("mlg");
    let (d, rx) = start_logging(&tap, &["--log-level", "debug"]);
    let l = said(&rx, "listening on").expect("the startup line");
    assert!(l.contains("INFO"), "{l}");
    bad_request(&d.sock);
    let l = said(&rx, "control request refused").expect("the refusal at debug");
    assert!(l.contains("DEBUG") && l.contains("no_such_command"), "{l}");
    must("ip", &["link", "del", &tap]);
    let l = said(&rx, "is down").expect("the port going down");
    assert!(l.contains("WARN") && l.contains(&tap), "{l}");
    drop(d);

    // error: nothing at all for the same events.
    let tap = unique("mle");
    let (d, rx) = start_logging(&tap, &["--log-level", "error"]);
    bad_request(&d.sock);
    let mut c = UnixStream::connect(&d.sock).expect("connect");
    c.write_all(b"{\"cmd\": \"shutdown\"}\n").expect("send");
    let mut d = d;
    let status = d.child.wait().expect("the daemon stops");
    assert!(status.success());
    let rest: Vec<String> = rx.iter().collect();
    assert!(rest.is_empty(), "said at level error: {rest:?}");
    let _ = run("ip", &["link", "del", &tap]);
}

/// `pin_threads`: with one datapath thread per CPU the daemon may use, each is pinned and the
/// startup line says where; `--no-pin-threads` and fewer threads (the config's 1) leave them to
/// the scheduler.
#[test]
fn datapath_threads_are_pinned_when_there_is_one_per_cpu() {
    sluice_testkit::root();
    let cpus = sluice_ports::sched::allowed_cpus().expect("affinity");
    let n = cpus.len().min(256).to_string();
    let list: Vec<String> = cpus.iter().take(256).map(usize::to_string).collect();
    for (args, pinned) in [
        (vec!["--threads", n.as_str()], true),
        (vec!["--threads", n.as_str(), "--no-pin-threads"], false),
        (vec![], cpus.len() == 1),
    ] {
        let tap = unique("mpn");
        let (d, rx) = start_logging(&tap, &args);
        let l = said(&rx, "listening on").expect("the startup line");
        if pinned {
            let want = format!("pinned to CPUs {})", list.join(", "));
            assert!(l.contains(&want), "{args:?}: {l}");
        } else {
            assert!(!l.contains("pinned"), "{args:?}: {l}");
        }
        drop(d);
        let _ = run("ip", &["link", "del", &tap]);
    }
}

/// An IPv4/UDP frame of `payload` bytes (IP checksum filled, UDP checksum 0: none).
fn udp_frame(payload: usize) -> Vec<u8> {
    let udp_len = 8 + payload;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&u16::try_from(20 + udp_len).expect("size").to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let csum = !(sum as u16);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&1000u16.to_be_bytes());
    f.extend_from_slice(&2000u16.to_be_bytes());
    f.extend_from_slice(&u16::try_from(udp_len).expect("size").to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend(std::iter::repeat_n(0xab, payload));
    f
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn trace_shows_the_rule_each_action_and_the_transmit_decisions() {
    sluice_testkit::root();
    let (t1, t2) = (unique("mtr1"), unique("mtr2"));
    let d = Daemon::start(
        "sluice-trace-",
        &format!(
            r#"{{"busy_poll_us": 0, "threads": 1,
                "ports": [{{"name": "{t1}", "kind": "tap"}}, {{"name": "{t2}", "kind": "tap"}}],
                "flows": ["prio 10 in_port {t1} action push_vlan:802.1q:100:0,output:{t2}",
                          "prio 20 in_port {t1} dst_ip 10.0.0.9 action drop"]}}"#
        ),
        &[],
    );
    let frame = udp_frame(18);
    let before = client(&d.sock, &["stats", "--json"]);

    // The VLAN is pushed in software by the action (the TAP has no tx-vlan-hw-insert), then
    // the tagged frame goes out unchanged.
    let v: serde_json::Value =
        serde_json::from_str(&client(&d.sock, &["trace", &t1, &hex(&frame), "--json"]))
            .expect("trace JSON");
    assert_eq!(v["in_port"], 1, "{v}");
    assert_eq!(v["layout"], "60 bytes: eth ipv4 udp", "{v}");
    assert_eq!(v["rule"]["handle"], 1, "{v}");
    assert_eq!(v["rule"]["priority"], 10, "{v}");
    let steps = v["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 2, "{v}");
    assert_eq!(steps[0]["action"], "push_vlan:802.1q:100:0");
    assert_eq!(steps[0]["layout"], "64 bytes: eth vlan ipv4 udp");
    let mut tagged = frame[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
    tagged.extend_from_slice(&frame[12..]);
    assert_eq!(steps[0]["frame_hex"], hex(&tagged), "{v}");
    assert_eq!(steps[1]["action"], format!("output:{t2}"));
    let tx = &steps[1]["tx"];
    assert_eq!(tx["port"], 2);
    assert_eq!(tx["name"], t2.as_str());
    let feats: Vec<&str> = tx["features"]
        .as_array()
        .expect("features")
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(!feats.contains(&"tx-vlan-hw-insert"), "{tx}");
    assert_eq!(tx["outcome"], "unchanged", "{tx}");
    assert_eq!(tx["frames"], 1);
    assert_eq!(tx["frame_layouts"][0], "64 bytes: eth vlan ipv4 udp");

    // Too big for the egress MTU and not a GSO packet: transmit preparation drops it.
    let big = udp_frame(3000);
    let v: serde_json::Value =
        serde_json::from_str(&client(&d.sock, &["trace", &t1, &hex(&big), "--json"]))
            .expect("trace JSON");
    let tx = &v["steps"][1]["tx"];
    assert_eq!(tx["outcome"], "dropped", "{v}");
    assert!(
        tx["drop_reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{v}"
    );
    assert_eq!(tx["steps"][0], "drop", "{v}");

    // The text form; a drop rule; no rule.
    let text = client(&d.sock, &["trace", &t1, &hex(&frame)]);
    assert!(text.contains("rule: handle 1, priority 10:"), "{text}");
    assert!(
        text.contains("1. push_vlan:802.1q:100:0 -> 64 bytes: eth vlan ipv4 udp"),
        "{text}"
    );
    assert!(
        text.contains(&format!("tx_prepare for port 2 ({t2})")),
        "{text}"
    );
    let mut to9 = frame.clone();
    to9[14 + 19] = 9;
    to9[14 + 10] = 0;
    to9[14 + 11] = 0;
    let v: serde_json::Value =
        serde_json::from_str(&client(&d.sock, &["trace", &t1, &hex(&to9), "--json"]))
            .expect("trace JSON");
    assert_eq!(v["rule"]["handle"], 2, "{v}");
    assert_eq!(v["steps"][0]["action"], "drop", "{v}");
    let v: serde_json::Value =
        serde_json::from_str(&client(&d.sock, &["trace", &t2, &hex(&frame), "--json"]))
            .expect("trace JSON");
    assert!(
        v["rule"].is_null() && v["steps"] == serde_json::json!([]),
        "{v}"
    );

    // Bad input is refused clearly; nothing was sent or counted.
    for (port, f, want) in [
        ("nope", "00", "no port named"),
        (t1.as_str(), "abc", "odd number"),
        (t1.as_str(), "zz", "not a hex digit"),
    ] {
        let out = sluice()
            .arg("--socket")
            .arg(&d.sock)
            .args(["trace", port, f])
            .output()
            .expect("run");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{err}");
    }
    let after = client(&d.sock, &["stats", "--json"]);
    assert_eq!(before, after, "trace sends nothing");
    drop(d);
}
