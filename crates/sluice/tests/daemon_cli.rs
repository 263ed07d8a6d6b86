//! `sluice run` and its command-line clients, as an operator uses them: a daemon on a private
//! control socket, ports, rules, features, counters, a clean stop on SIGTERM, and clear
//! errors for a bad configuration or a daemon that is not there. Root (the daemon opens TAPs).

mod daemon_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn unique(tag: &str) -> String {
    format!("{tag}{}", std::process::id() % 100_000)
}

/// Runs `sluice --socket SOCK ARGS…` and returns its output.
fn client(sock: &Path, args: &[&str]) -> Output {
    sluice()
        .arg("--socket")
        .arg(sock)
        .args(args)
        .output()
        .expect("run sluice")
}

fn ok(sock: &Path, args: &[&str]) -> String {
    let out = client(sock, args);
    assert!(
        out.status.success(),
        "sluice {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(sock: &Path, args: &[&str]) -> String {
    let out = client(sock, args);
    assert!(!out.status.success(), "sluice {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The daemon, killed if the test fails before it stops it.
struct Daemon {
    child: Child,
    sock: PathBuf,
}

impl Daemon {
    fn start(config: &str) -> Daemon {
        let dir = std::env::temp_dir();
        // Unique per daemon: the tests of this file run at once.
        let tag = sluice_ports::netns::unique_suffix();
        let sock = dir.join(format!("sluice-cli-test-{tag}.sock"));
        let cfg = dir.join(format!("sluice-cli-test-{tag}.json"));
        std::fs::write(&cfg, config).expect("write config");
        let mut child = daemon_common::run_with_config(&mut sluice(), &sock, &cfg, [""; 0])
            .spawn()
            .expect("start the daemon");
        if let Err(said) = daemon_common::wait_listening(&mut child) {
            panic!("the daemon did not start listening: {said}");
        }
        let _ = std::fs::remove_file(&cfg);
        Daemon { child, sock }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A killed daemon leaves its socket file behind.
        let _ = std::fs::remove_file(&self.sock);
    }
}

#[test]
fn daemon_ports_flows_features_counters_and_clean_stop() {
    sluice_testkit::root();
    let t0 = unique("sct0-");
    let t1 = unique("sct1-");
    let d = Daemon::start(&format!(
        r#"{{"batch": 32, "busy_poll_us": 0, "ports": [{{"name": "{t0}", "kind": "tap"}}]}}"#
    ));
    let s = &d.sock;

    // Ports: one from the configuration, one added; the list shows both with their numbers.
    ok(s, &["port", "add", &t1, "--gro"]);
    let list = ok(s, &["port", "list", "--json"]);
    let ports: serde_json::Value = serde_json::from_str(&list).expect("port list JSON");
    let names: Vec<&str> = ports
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, [t0.as_str(), t1.as_str()], "{list}");
    assert_eq!(ports[1]["gro"], true, "{list}");
    let err = fails(s, &["port", "add", &t1]);
    assert!(err.contains(&t1), "a duplicate port names itself: {err}");

    // Rules: a good one goes in; a bad one is reported with its token marked and nothing
    // of an atomic batch goes in.
    ok(
        s,
        &[
            "flow",
            "add",
            &format!("prio 10 in_port {t0} action output:{t1}"),
        ],
    );
    let err = fails(
        s,
        &[
            "flow",
            "add",
            "--atomic",
            &format!("prio 5 in_port {t1} action output:{t0}"),
            "prio 5 dst_ip 10.0.0.0/33 action drop",
        ],
    );
    assert!(err.contains("10.0.0.0/33") && err.contains('^'), "{err}");
    let dump = ok(s, &["flow", "dump"]);
    assert_eq!(dump.lines().count(), 1, "only the good rule: {dump}");
    assert!(dump.contains(&format!("output:{t1}")), "{dump}");
    ok(s, &["flow", "del", &format!("prio 10 in_port {t0}")]);
    assert_eq!(ok(s, &["flow", "dump"]).trim(), "", "deleted");

    // Features: show as ethtool -k does; GRO off and back on at run time.
    let show = ok(s, &["features", "show", &t1]);
    assert!(show.contains("rx-gro"), "{show}");
    ok(s, &["features", "set", &t1, "rx-gro=off", "tso=off"]);
    let list = ok(s, &["port", "list", "--json"]);
    let ports: serde_json::Value = serde_json::from_str(&list).expect("JSON");
    assert_eq!(
        ports[1]["gro"], false,
        "GRO switched off at run time: {list}"
    );
    let err = fails(s, &["features", "set", &t1, "no-such-feature=on"]);
    assert!(err.contains("no-such-feature"), "{err}");
    let err = fails(s, &["features", "set", &t1, "tso=maybe"]);
    assert!(err.contains("maybe"), "{err}");

    // Counters.
    let stats = ok(s, &["stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats JSON");
    assert_eq!(stats.as_array().map(Vec::len), Some(2));
    let cov = ok(s, &["coverage", "--all", "--json"]);
    let cov: serde_json::Value = serde_json::from_str(&cov).expect("coverage JSON");
    assert!(
        cov.get("ctl_requests")
            .is_some_and(|v| v["total"].as_u64() > Some(5)),
        "{cov}"
    );
    assert!(cov.get("soft_gso").is_some(), "every counter listed: {cov}");

    ok(s, &["port", "del", &t0]);
    let err = fails(s, &["port", "del", &t0]);
    assert!(err.contains(&t0), "{err}");

    // SIGTERM: a clean exit, the socket removed, the TAP gone.
    let pid = d.child.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    let mut d = d;
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = d.child.try_wait().expect("wait") {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "clean exit: {status:?}");
    assert!(!d.sock.exists(), "the socket is removed");
    let links = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains(&t1),
        "the TAP is gone with the daemon"
    );
}

#[test]
fn bad_configuration_and_absent_daemon_are_clear_errors() {
    let dir = std::env::temp_dir();
    let sock = dir.join(format!("{}.sock", unique("sluice-absent-")));
    let err = fails(&sock, &["port", "list"]);
    assert!(
        err.contains("cannot reach the sluice daemon") && err.contains(&*sock.to_string_lossy()),
        "{err}"
    );
    for (config, expect) in [
        (r#"{"busy_poll_us": 99999}"#, "busy_poll_us"),
        (r#"{"batch": 0}"#, "batch"),
        (r#"{"batch": 64, "bogus": 1}"#, "bogus"),
        ("{not json", "invalid configuration"),
    ] {
        let cfg = dir.join(format!("{}.json", unique("sluice-badcfg-")));
        std::fs::write(&cfg, config).expect("write");
        let out = daemon_common::run_with_config(&mut sluice(), &sock, &cfg, [""; 0])
            .output()
            .expect("run");
        let _ = std::fs::remove_file(&cfg);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config} accepted");
        assert!(err.contains(expect), "{config}: {err}");
    }
    let out = sluice()
        .args(["run", "--print-default-config"])
        .output()
        .expect("run");
    let cfg: serde_json::Value = serde_json::from_slice(&out.stdout).expect("default is JSON");
    assert_eq!(
        cfg["busy_poll_us"],
        sluice_switch::config::DEFAULT_BUSY_POLL_US
    );
}

/// `tx-tcp-segmentation: on|off` in `ethtool -k IFNAME` inside `ns` (the kernel's view).
fn kernel_feature(ns: &sluice_ports::Netns, ifname: &str, name: &str) -> Option<(bool, bool)> {
    let text = ns.run(&["ethtool", "-k", ifname]).expect("ethtool -k");
    text.lines().find_map(|l| {
        let (n, v) = l.trim().split_once(':')?;
        (n == name).then(|| (v.trim().starts_with("on"), v.contains("[fixed]")))
    })
}

#[test]
fn features_set_on_an_afpacket_port_changes_the_device_in_the_kernel() {
    sluice_testkit::root();
    use sluice_ports::netns::unique_suffix;
    let ns_a = sluice_ports::Netns::create("slfa").expect("netns");
    let ns_b = sluice_ports::Netns::create("slfb").expect("netns");
    let va = format!("va{}", unique_suffix());
    let vb = format!("vb{}", unique_suffix());
    let _pair = sluice_ports::VethPair::create(&ns_a, &va, &ns_b, &vb, 1500).expect("veth");
    let d = Daemon::start(r#"{"batch": 32, "busy_poll_us": 0}"#);
    let s = &d.sock;
    ok(
        s,
        &[
            "port",
            "add",
            &va,
            "--kind",
            "afpacket",
            "--netns",
            ns_a.name(),
        ],
    );
    assert_eq!(
        kernel_feature(&ns_a, &va, "tx-tcp-segmentation"),
        Some((true, false))
    );
    let show = ok(s, &["features", "show", &va]);
    assert!(show.contains("tx-tcp-segmentation: on\n"), "{show}");

    // Off through the daemon: the device in the kernel has it off, the daemon shows it off.
    ok(s, &["features", "set", &va, "tx-tcp-segmentation=off"]);
    assert_eq!(
        kernel_feature(&ns_a, &va, "tx-tcp-segmentation"),
        Some((false, false))
    );
    let show = ok(s, &["features", "show", &va]);
    assert!(show.contains("tx-tcp-segmentation: off\n"), "{show}");
    // A short alias too (ethtool's `tso`), back on.
    ok(s, &["features", "set", &va, "tso=on"]);
    assert_eq!(
        kernel_feature(&ns_a, &va, "tx-tcp-segmentation"),
        Some((true, false))
    );

    // A feature the kernel keeps fixed: a clear error naming the port and the feature, and
    // nothing changed.
    assert_eq!(
        kernel_feature(&ns_a, &va, "tx-checksum-ipv4"),
        Some((false, true)),
        "a veth has tx-checksum-ipv4 off [fixed]"
    );
    let err = fails(s, &["features", "set", &va, "tx-checksum-ipv4=on"]);
    assert!(
        err.contains(&va) && err.contains("tx-checksum-ipv4") && err.contains("fixed"),
        "{err}"
    );
    assert_eq!(
        kernel_feature(&ns_a, &va, "tx-checksum-ipv4"),
        Some((false, true))
    );
    ok(s, &["port", "del", &va]);
}
