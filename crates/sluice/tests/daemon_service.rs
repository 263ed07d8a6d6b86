//! `sluice run` as a service facing hostile or careless clients (issue 18): each case runs a
//! real daemon process (root: it opens TAPs) and checks that bad input gets a clear error and
//! is counted, and that everything else is survived — out-of-range port numbers, huge rules
//! and lines, strangers on the socket, a socket path that is not a socket, clients that never
//! read, running out of descriptors, a TAP deleted behind the daemon's back, and a port number
//! reused after `port del`.

mod daemon_common;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

fn sluice_bin() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

/// A name unique to this process and call (interface names: at most 15 bytes).
fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{tag}{}{}",
        std::process::id() % 100_000,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A running daemon, killed if the test ends before it stops it.
struct Daemon {
    child: Child,
    sock: PathBuf,
}

/// How to start a daemon: configuration JSON, extra `run` arguments, a command prefix
/// (`prlimit …`, `sh -c 'umask …'`).
struct Start<'a> {
    config: &'a str,
    args: &'a [&'a str],
    prefix: &'a [&'a str],
}

impl Default for Start<'_> {
    fn default() -> Self {
        Start {
            config: r#"{"busy_poll_us": 0}"#,
            args: &[],
            prefix: &[],
        }
    }
}

impl Daemon {
    fn start(s: Start<'_>) -> Daemon {
        let sock = std::env::temp_dir().join(format!("{}.sock", unique("sluice-svc-")));
        Self::start_at(s, &sock).unwrap_or_else(|e| panic!("the daemon did not start: {e}"))
    }

    /// Starts a daemon on `sock`; `Err` holds its stderr if it exits instead of listening.
    fn start_at(s: Start<'_>, sock: &Path) -> Result<Daemon, String> {
        let cfg = std::env::temp_dir().join(format!("{}.json", unique("sluice-svc-")));
        std::fs::write(&cfg, s.config).expect("write config");
        let mut cmd = match s.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(sluice_bin());
                c
            }
            None => Command::new(sluice_bin()),
        };
        let mut child = daemon_common::run_with_config(&mut cmd, sock, &cfg, s.args)
            .spawn()
            .expect("start the daemon");
        let started = daemon_common::wait_listening(&mut child);
        let _ = std::fs::remove_file(&cfg);
        started?;
        Ok(Daemon {
            child,
            sock: sock.to_path_buf(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn connect(&self) -> Conn {
        Conn::new(&self.sock)
    }

    /// One request on a fresh connection: the whole response object.
    fn ask(&self, req: Value) -> Value {
        self.connect().ask(&req)
    }

    /// One request that must succeed: its result.
    fn ok(&self, req: Value) -> Value {
        let v = self.ask(req.clone());
        assert_eq!(v["ok"], true, "{req} failed: {v}");
        v["result"].clone()
    }

    /// One request that must fail: its error message.
    fn err(&self, req: Value) -> String {
        let v = self.ask(req.clone());
        assert_eq!(v["ok"], false, "{req} should fail: {v}");
        v["error"].as_str().expect("an error message").to_string()
    }

    fn counter(&self, name: &str) -> u64 {
        let cov = self.ok(json!({"cmd": "coverage", "all": true}));
        cov[name]
            .as_u64()
            .unwrap_or_else(|| panic!("no counter {name}: {cov}"))
    }

    fn port(&self, name: &str) -> Value {
        let list = self.ok(json!({"cmd": "port_list"}));
        list.as_array()
            .expect("a list")
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no port {name}: {list}"))
    }

    /// Resident memory of the daemon, bytes.
    fn rss(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("status");
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .expect("VmRSS");
        kb * 1024
    }

    /// CPU time (user + system) of the daemon so far, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("stat");
        // Fields after the command name (which may hold spaces) start at ") ".
        let rest = stat.rsplit_once(") ").map(|(_, r)| r).expect("stat format");
        let f: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
        let utime: u64 = f[11].parse().expect("utime");
        let stime: u64 = f[12].parse().expect("stime");
        utime + stime
    }

    fn term(&self) {
        let st = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(st.success());
    }

    /// Waits for the daemon to exit, at most `limit`.
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A killed daemon leaves its socket file.
        let _ = std::fs::remove_file(&self.sock);
    }
}

/// A raw connection speaking the protocol.
struct Conn {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Conn {
    fn new(sock: &Path) -> Conn {
        let s = UnixStream::connect(sock).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        Conn {
            r: BufReader::new(s.try_clone().expect("clone")),
            w: s,
        }
    }

    fn line(&mut self) -> Value {
        let mut line = String::new();
        self.r.read_line(&mut line).expect("read an answer");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }

    fn ask(&mut self, req: &Value) -> Value {
        writeln!(self.w, "{req}").expect("send");
        self.line()
    }
}

fn port_add(name: &str, number: u64) -> Value {
    json!({"cmd": "port_add", "name": name, "kind": "tap", "number": number})
}

#[test]
fn out_of_range_port_numbers_are_refused_without_memory_growth() {
    sluice_ports::require_root().expect("this test needs root");
    let mut d = Daemon::start(Start::default());
    let before = d.rss();
    for n in [4_294_967_295u64, 2_000_000, 65_280, 0] {
        let e = d.err(port_add(&unique("sbig"), n));
        assert!(
            e.contains(&n.to_string()) && e.contains("1 to 65279"),
            "{n}: {e}"
        );
    }
    assert!(d.alive(), "the daemon survived");
    assert_eq!(d.counter("sw_bad_port_number"), 4);
    // The highest number works, and costs no table sized by it.
    let top = unique("stop");
    let p = d.ok(port_add(&top, 65_279));
    assert_eq!(p["number"], 65_279);
    let grown = d.rss().saturating_sub(before);
    assert!(
        grown < 16 << 20,
        "the daemon grew by {grown} bytes for out-of-range numbers and port 65279"
    );
}

#[test]
fn a_rule_with_200000_actions_and_an_oversize_line_are_refused() {
    sluice_ports::require_root().expect("this test needs root");
    let mut d = Daemon::start(Start::default());
    let many = format!("prio 1 action {}", vec!["output:1"; 200_000].join(","));
    let res = d.ok(json!({"cmd": "flow_add", "rules": [many]}));
    let e = res[0]["error"].as_str().expect("refused");
    assert!(e.contains("200000 actions") && e.contains("64"), "{e}");
    let at_limit = format!("prio 1 action {}", vec!["output:1"; 64].join(","));
    let res = d.ok(json!({"cmd": "flow_add", "rules": [at_limit]}));
    assert!(res[0]["handle"].is_u64(), "64 actions are fine: {res}");
    assert_eq!(d.counter("sw_too_many_actions"), 1);

    // A line longer than the limit: an error, then the connection is closed.
    let mut c = d.connect();
    let max_line = 16usize << 20;
    let junk = vec![b'x'; max_line + 1];
    c.w.write_all(&junk).expect("send the long line");
    let v = c.line();
    assert_eq!(v["ok"], false, "{v}");
    let e = v["error"].as_str().expect("message");
    assert!(e.contains(&max_line.to_string()), "{e}");
    let mut rest = Vec::new();
    let n = c.r.read_to_end(&mut rest).expect("read to the end");
    assert_eq!(n, 0, "the connection is closed after an over-long line");
    assert_eq!(d.counter("ctl_line_too_long"), 1);
    // Too many rules in one request.
    let rules = vec!["prio 1 action drop"; 100_001];
    let e = d.err(json!({"cmd": "flow_add", "rules": rules}));
    assert!(e.contains("100001") && e.contains("100000"), "{e}");
    assert!(d.alive());
    assert_eq!(d.ok(json!({"cmd": "ping"})), "pong");
}

#[test]
fn rule_mask_and_byte_quotas_are_refused_with_their_names() {
    sluice_ports::require_root().expect("this test needs root");
    let d = Daemon::start(Start {
        args: &["--max-rules", "3", "--max-masks", "2"],
        ..Start::default()
    });
    let res = d.ok(json!({"cmd": "flow_add", "rules": [
        "prio 1 dst_ip 10.0.0.1 action drop",
        "prio 1 dst_ip 10.0.0.0/24 action drop",
        "prio 1 dst_ip 10.1.0.0/16 action drop",
        "prio 1 dst_ip 10.2.0.0/24 action drop",
        "prio 2 dst_ip 10.3.0.0/24 action drop",
    ]}));
    let errs: Vec<Option<&str>> = res
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| r["error"].as_str())
        .collect();
    assert!(
        errs[0].is_none() && errs[1].is_none() && errs[3].is_none(),
        "{res}"
    );
    assert!(
        errs[2].is_some_and(|e| e.contains("max_masks") && e.contains('2')),
        "a third mask: {res}"
    );
    assert!(
        errs[4].is_some_and(|e| e.contains("max_rules") && e.contains('3')),
        "a fourth rule: {res}"
    );
    assert_eq!(d.counter("sw_quota_masks"), 1);
    assert_eq!(d.counter("sw_quota_rules"), 1);
    drop(d);
    let bytes = Daemon::start(Start {
        args: &["--max-rule-bytes", "1"],
        ..Start::default()
    });
    let res = bytes.ok(json!({"cmd": "flow_add", "rules": ["prio 1 action drop"]}));
    let e = res[0]["error"].as_str().expect("refused");
    assert!(e.contains("max_rule_bytes"), "{e}");
    assert_eq!(bytes.counter("sw_quota_bytes"), 1);
}

#[test]
fn socket_is_0660_whatever_the_umask_and_strangers_are_refused() {
    sluice_ports::require_root().expect("this test needs root");
    let group = "4242";
    let d = Daemon::start(Start {
        args: &["--socket-group", group],
        prefix: &["sh", "-c", "umask 000; exec \"$@\"", "sh"],
        ..Start::default()
    });
    let m = std::fs::metadata(&d.sock).expect("socket");
    assert_eq!(m.mode() & 0o7777, 0o660, "mode {:o}", m.mode());
    assert_eq!(m.gid(), 4242);

    // As `nobody` (no group 4242), with the file mode opened up so that connect() itself
    // succeeds: the peer check refuses.
    std::fs::set_permissions(&d.sock, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
try:
    s.sendall(sys.argv[2].encode() + b'\n')
except OSError:
    pass
print(s.makefile().readline().strip())
"#;
    let as_user = |extra: &[&str], req: &Value| -> String {
        let out = Command::new("setpriv")
            .args(["--reuid", "nobody", "--regid", "nogroup"])
            .args(extra)
            .args(["/usr/bin/python3", "-c", script])
            .arg(&d.sock)
            .arg(req.to_string())
            .output()
            .expect("setpriv");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let evil = unique("sevil");
    let out = as_user(&["--clear-groups"], &port_add(&evil, 9));
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("permission denied") && e.contains("65534")),
        "{v}"
    );
    assert_eq!(d.counter("ctl_peer_refused"), 1);
    assert_eq!(
        d.ok(json!({"cmd": "port_list"})),
        json!([]),
        "the stranger's port was not added"
    );
    // The same user with the socket's group as a supplementary group is admitted.
    assert!(!link_exists(&evil), "no TAP was created for the stranger");
    let out = as_user(&["--groups", group], &json!({"cmd": "ping"}));
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(
        v["result"], "pong",
        "a member of the group is admitted: {v}"
    );
    assert_eq!(d.counter("ctl_peer_refused"), 1, "not refused this time");
    // Root is admitted.
    assert_eq!(d.ok(json!({"cmd": "ping"})), "pong");
}

#[test]
fn socket_path_that_is_a_file_or_a_live_socket_is_refused_and_left_alone() {
    sluice_ports::require_root().expect("this test needs root");
    let path = std::env::temp_dir().join(format!("{}.sock", unique("sluice-file-")));
    std::fs::write(&path, b"precious data\n").expect("write");
    let e = match Daemon::start_at(Start::default(), &path) {
        Ok(_) => panic!("the daemon started on a regular file"),
        Err(e) => e,
    };
    assert!(e.contains("not a socket"), "{e}");
    assert_eq!(
        std::fs::read(&path).expect("the file is still there"),
        b"precious data\n"
    );
    std::fs::remove_file(&path).expect("clean up");

    // A live daemon's socket: the second daemon refuses; the first keeps serving.
    let d = Daemon::start(Start::default());
    let e = match Daemon::start_at(Start::default(), &d.sock) {
        Ok(_) => panic!("a second daemon took a live socket"),
        Err(e) => e,
    };
    assert!(e.contains("another daemon"), "{e}");
    assert_eq!(d.ok(json!({"cmd": "ping"})), "pong");
    drop(d);

    // A stale socket (nobody listening) is replaced.
    let stale = std::env::temp_dir().join(format!("{}.sock", unique("sluice-stale-")));
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
    assert!(stale.exists());
    let d = Daemon::start_at(Start::default(), &stale).expect("a stale socket is replaced");
    assert_eq!(d.ok(json!({"cmd": "ping"})), "pong");
}

#[test]
fn a_client_that_never_reads_does_not_delay_sigterm() {
    sluice_ports::require_root().expect("this test needs root");
    let mut d = Daemon::start(Start::default());
    let s = UnixStream::connect(&d.sock).expect("connect");
    s.set_nonblocking(true).expect("nonblocking");
    let mut w = &s;
    // Requests with long answers, until the daemon's replies fill both socket buffers and its
    // write blocks (our write then blocks too: nothing more is read).
    let req = b"{\"cmd\":\"coverage\",\"all\":true}\n".repeat(64);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stuck_since: Option<Instant> = None;
    loop {
        assert!(Instant::now() < deadline, "the socket never filled");
        match w.write(&req) {
            Ok(_) => stuck_since = None,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let since = *stuck_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(300) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    let t = Instant::now();
    d.term();
    let st = d
        .wait_exit(Duration::from_secs(3))
        .expect("the daemon stops within 3 s of SIGTERM although a client never reads");
    assert!(st.success(), "{st:?}");
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(!d.sock.exists(), "the socket is removed");
    drop(s);
}

#[test]
fn running_out_of_descriptors_is_survived() {
    sluice_ports::require_root().expect("this test needs root");
    let mut d = Daemon::start(Start {
        prefix: &["prlimit", "--nofile=40:40", "--"],
        config: r#"{"busy_poll_us": 0, "max_connections": 1000}"#,
        ..Start::default()
    });
    let mut clients: Vec<UnixStream> = Vec::new();
    for _ in 0..100 {
        clients.push(UnixStream::connect(&d.sock).expect("connect"));
    }
    // The first client was accepted before the descriptors ran out: ask through it until the
    // daemon has counted failed accepts (it backs off and retries; it must not exit).
    let first = clients
        .first()
        .expect("a client")
        .try_clone()
        .expect("clone");
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut c = Conn {
        r: BufReader::new(first.try_clone().expect("clone")),
        w: first,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = c.ask(&json!({"cmd": "coverage", "all": true}));
        if v["result"]["ctl_accept_errors"].as_u64() > Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "no accept failure counted: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(fd_count(d.pid()) >= 30, "the daemon used its descriptors");
    assert!(
        d.alive(),
        "the daemon exited when it ran out of descriptors"
    );
    drop(c);
    drop(clients);
    // Once the clients are gone it answers new ones again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = UnixStream::connect(&d.sock) {
            s.set_read_timeout(Some(Duration::from_secs(2)))
                .expect("timeout");
            let mut c = Conn {
                r: BufReader::new(s.try_clone().expect("clone")),
                w: s,
            };
            writeln!(c.w, "{}", json!({"cmd": "ping"})).expect("send");
            let mut line = String::new();
            if c.r.read_line(&mut line).is_ok() && line.contains("pong") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the daemon never answered again");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.alive());
    d.term();
    assert!(d
        .wait_exit(Duration::from_secs(5))
        .is_some_and(|s| s.success()));
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[test]
fn too_many_connections_are_refused_with_an_error() {
    sluice_ports::require_root().expect("this test needs root");
    let d = Daemon::start(Start {
        config: r#"{"busy_poll_us": 0, "max_connections": 2}"#,
        ..Start::default()
    });
    let mut a = d.connect();
    let mut b = d.connect();
    assert_eq!(a.ask(&json!({"cmd": "ping"}))["result"], "pong");
    assert_eq!(b.ask(&json!({"cmd": "ping"}))["result"], "pong");
    let mut c = d.connect();
    let v = c.line();
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("max_connections")),
        "{v}"
    );
    drop((a, b));
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.ask(json!({"cmd": "coverage", "all": true}))["ok"] != true {
        assert!(Instant::now() < deadline, "a slot never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // At least the one above (the wait for a free slot may have been refused too).
    assert!(d.counter("ctl_connections_refused") >= 1);
}

/// Whether interface `name` exists here.
fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_tap_deleted_behind_the_daemon_takes_its_port_down_without_spinning() {
    sluice_ports::require_root().expect("this test needs root");
    let tap = unique("sgone");
    let d = Daemon::start(Start::default());
    d.ok(port_add(&tap, 3));
    assert_eq!(d.port(&tap)["state"], "up");
    let st = Command::new("ip")
        .args(["link", "del", "dev", &tap])
        .status()
        .expect("ip link del");
    assert!(st.success(), "ip link del {tap}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.port(&tap)["state"] != "down" {
        assert!(
            Instant::now() < deadline,
            "the port never went down: {}",
            d.port(&tap)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = d.ok(json!({"cmd": "stats"}));
    assert_eq!(stats[0]["state"], "down", "{stats}");
    assert_eq!(d.counter("dp_port_down"), 1);
    // No busy loop: over 2 s the daemon uses less than 20% of one CPU.
    let ticks_per_s = 100u64; // USER_HZ on Linux
    let t0 = d.cpu_ticks();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let used = d.cpu_ticks() - t0;
    let limit = start.elapsed().as_secs_f64() * ticks_per_s as f64 * 0.2;
    assert!(
        (used as f64) < limit,
        "the daemon used {used} ticks in {:?} with a port down",
        start.elapsed()
    );
    assert_eq!(
        d.port(&tap)["state"],
        "down",
        "a deleted TAP is not created again by itself"
    );
    // Asked, it comes back: the TAP is created again, the port keeps its number and handle.
    let handle = d.port(&tap)["handle"].clone();
    let p = d.ok(json!({"cmd": "port_up", "name": tap}));
    assert_eq!(p["state"], "up", "{p}");
    assert_eq!(p["number"], 3);
    assert_eq!(p["handle"], handle);
    assert!(link_exists(&tap), "the TAP exists again");
    assert_eq!(d.counter("sw_port_revived"), 1);
    let e = d.err(json!({"cmd": "port_up", "name": tap}));
    assert!(e.contains("is up"), "{e}");

    // Deleted again, then created again by the operator (a persistent TAP): the daemon
    // reattaches by itself.
    let st = Command::new("ip")
        .args(["link", "del", "dev", &tap])
        .status()
        .expect("ip link del");
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.port(&tap)["state"] != "down" {
        assert!(Instant::now() < deadline, "the port never went down again");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _persistent = DelLink(tap.clone());
    let st = Command::new("ip")
        .args(["tuntap", "add", "dev", &tap, "mode", "tap", "vnet_hdr"])
        .status()
        .expect("ip tuntap add");
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    while d.port(&tap)["state"] != "up" {
        assert!(
            Instant::now() < deadline,
            "the port was not reattached to the new TAP"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(d.counter("dp_port_down"), 2);
    assert_eq!(d.counter("sw_port_revived"), 2);
}

/// Deletes an interface when dropped (a persistent TAP outlives the daemon).
struct DelLink(String);

impl Drop for DelLink {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", "dev", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn port_del_refuses_while_rules_name_the_port_and_numbers_never_inherit_rules() {
    sluice_ports::require_root().expect("this test needs root");
    let a = unique("sdela");
    let b = unique("sdelb");
    let c = unique("sdelc");
    let d = Daemon::start(Start::default());
    let pa = d.ok(port_add(&a, 7));
    d.ok(port_add(&b, 8));
    let res = d.ok(json!({"cmd": "flow_add", "rules": [
        format!("prio 10 in_port {a} action output:{b}"),
        format!("prio 10 in_port {b} action output:{a}"),
        format!("prio 5 in_port {b} dst_ip 10.0.0.1 action drop"),
    ]}));
    let h: Vec<u64> = res
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| r["handle"].as_u64().expect("a handle"))
        .collect();
    // Refused, naming the two rules that name the port.
    let e = d.err(json!({"cmd": "port_del", "name": a}));
    assert!(
        e.contains(&format!("(handles {}, {})", h[0], h[1])) && e.contains("force"),
        "{e}"
    );
    assert_eq!(d.counter("sw_port_del_refused"), 1);
    assert_eq!(
        d.ok(json!({"cmd": "flow_dump"})).as_array().map(Vec::len),
        Some(3)
    );
    // Forced: the port goes with its rules; the unrelated rule stays.
    d.ok(json!({"cmd": "port_del", "name": a, "force": true}));
    let dump = d.ok(json!({"cmd": "flow_dump"}));
    assert_eq!(
        dump,
        json!([format!(
            "handle {}: prio 5 in_port {b} eth_type ipv4 dst_ip 10.0.0.1 action drop",
            h[2]
        )])
    );
    // A new port with the old number inherits nothing, and gets a new handle.
    let pc = d.ok(port_add(&c, 7));
    assert_eq!(pc["number"], 7);
    assert!(pc["handle"].as_u64() > pa["handle"].as_u64(), "{pc} {pa}");
    assert_eq!(
        d.ok(json!({"cmd": "flow_dump"})).as_array().map(Vec::len),
        Some(1)
    );
    // Rule handles are never reused: delete one, add one, the new handle is higher.
    d.ok(json!({"cmd": "flow_del", "specs": [format!("handle {}", h[2])]}));
    let res = d.ok(json!({"cmd": "flow_add", "rules": [format!("prio 5 in_port {b} dst_ip 10.0.0.1 action drop")]}));
    let again = res[0]["handle"].as_u64().expect("handle");
    assert!(again > h[2], "handle {again} after {}", h[2]);
    let res = d.ok(json!({"cmd": "flow_del", "specs": [format!("handle {}", h[2])]}));
    assert!(
        res[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("no rule with handle {}", h[2]))),
        "{res}"
    );
}
