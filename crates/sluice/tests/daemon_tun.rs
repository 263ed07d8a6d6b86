//! TUN ports in the daemon, as an operator uses them (root): `kind: tun` ports opened in two
//! namespaces forward the kernel's ICMP by rules that match IP fields only (an L3 port has no
//! L2 fields), and an L3 packet sent by rule to a TAP (an Ethernet port) is a counted drop.

mod daemon_common;

use sluice_ports::netns::unique_suffix;
use sluice_ports::Netns;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

fn client(sock: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
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

/// The daemon, killed when the test ends (its socket removed).
struct Daemon {
    child: Child,
    sock: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.sock);
    }
}

fn start(config: &str) -> Daemon {
    let tag = unique_suffix();
    let dir = std::env::temp_dir();
    let sock = dir.join(format!("sluice-tun-test-{tag}.sock"));
    let cfg = dir.join(format!("sluice-tun-test-{tag}.json"));
    std::fs::write(&cfg, config).expect("write config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    let mut child = daemon_common::run_with_config(&mut cmd, &sock, &cfg, [""; 0])
        .spawn()
        .expect("start the daemon");
    if let Err(said) = daemon_common::wait_listening(&mut child) {
        panic!("the daemon did not start listening: {said}");
    }
    let _ = std::fs::remove_file(&cfg);
    Daemon { child, sock }
}

fn coverage(sock: &Path, name: &str) -> u64 {
    let cov = ok(sock, &["coverage", "--all", "--json"]);
    let cov: serde_json::Value = serde_json::from_str(&cov).expect("coverage JSON");
    cov[name]["total"].as_u64().unwrap_or(0)
}

#[test]
fn tun_ports_forward_by_l3_rules_and_l3_to_l2_is_a_counted_drop() {
    sluice_testkit::root();
    let ns_a = Netns::create("sldtuna").expect("netns");
    let ns_b = Netns::create("sldtunb").expect("netns");
    let (ta, tb, tp) = (
        format!("dta{}", unique_suffix()),
        format!("dtb{}", unique_suffix()),
        format!("dtp{}", unique_suffix()),
    );
    let d = start(&format!(
        r#"{{"batch": 32, "busy_poll_us": 0, "ports": [
            {{"name": "{ta}", "kind": "tun", "netns": "{}"}},
            {{"name": "{tb}", "kind": "tun", "netns": "{}"}},
            {{"name": "{tp}", "kind": "tap"}}]}}"#,
        ns_a.name(),
        ns_b.name()
    ));
    let s = &d.sock;
    let list: serde_json::Value =
        serde_json::from_str(&ok(s, &["port", "list", "--json"])).expect("port list JSON");
    let kinds: Vec<&str> = list
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| p["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds, ["tun", "tun", "tap"], "{list}");
    for (ns, dev, ip) in [(&ns_a, &ta, "192.0.2.1/24"), (&ns_b, &tb, "192.0.2.2/24")] {
        ns.run(&["ip", "addr", "add", ip, "dev", dev])
            .expect("address");
        ns.link_up(dev).expect("up");
    }
    ok(
        s,
        &[
            "flow",
            "add",
            &format!("prio 20 in_port {ta} eth_type ipv4 ip_proto icmp action output:{tb}"),
            &format!("prio 20 in_port {tb} eth_type ipv4 ip_proto icmp action output:{ta}"),
            &format!("prio 10 in_port {ta} action output:{tp}"),
        ],
    );

    // ICMP echo both ways through the daemon; ping fails unless every reply came back.
    ns_a.run(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "192.0.2.2"])
        .expect("ping through two TUN ports");

    // A UDP datagram from A matches the low rule, whose output is the TAP: an L3 packet has no
    // MAC addresses to go out of an Ethernet port with, so it is dropped and counted.
    let before = coverage(s, "dp_l3_to_l2_drops");
    ns_a.enter(|| {
        let u = UdpSocket::bind("192.0.2.1:0")?;
        u.send_to(b"to an ethernet port", "192.0.2.2:9")
    })
    .expect("enter")
    .expect("send");
    sluice_testkit::wait_until(
        "the L3-to-L2 drop is counted",
        Duration::from_secs(5),
        || coverage(s, "dp_l3_to_l2_drops") > before,
    )
    .expect("counted");
    let stats: serde_json::Value =
        serde_json::from_str(&ok(s, &["stats", "--json"])).expect("stats JSON");
    let ports = stats.as_array().expect("a list");
    assert_eq!(ports[2]["tx_prepare_drops"], 1, "at the TAP: {stats}");
    assert_eq!(ports[2]["tx_packets"], 0, "{stats}");
    // Three echo requests in, three replies back, every one matched by an L3 rule.
    assert_eq!(ports[1]["tx_packets"], 3, "{stats}");
    assert_eq!(ports[0]["tx_packets"], 3, "{stats}");
    assert_eq!(ports[0]["rx_no_match"], 0, "{stats}");
}
