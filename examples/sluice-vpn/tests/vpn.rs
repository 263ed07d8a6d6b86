//! The example end to end (root): two network namespaces joined by a veth pair, a `sluice-vpn`
//! process in each, and kernel TCP through the tunnel between their TUN devices, every byte
//! verified (`sluice_traffic`), offloads on and off. With offloads on, the counters the
//! processes print at exit must show the offload path was taken: super-packets read from the
//! TUN, datagrams sent several per `UDP_SEGMENT` send and received several per `UDP_GRO`
//! receive, GRO merging them back. Nothing may be dropped on the way in either direction.
//!
//! `VPN_SECONDS` (default 2) sets each transfer's length; with `--nocapture` the throughput is
//! printed (`bench/vpn/run.sh` measures it with iperf3 next to the kernel's VXLAN).
//!
//! Needs root; fails (never skips) without it.

use sluice_ports::{Netns, VethPair};
use std::collections::HashMap;
use std::io::Read;
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `sluice-vpn` process in a namespace.
struct Vpn {
    child: Child,
}

impl Vpn {
    fn start(ns: &Netns, local: &str, peer: &str, offloads: bool) -> Vpn {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.name(), env!("CARGO_BIN_EXE_sluice-vpn")])
            .args([
                "--tun", "tv0", "--bind", local, "--peer", peer, "--mtu", "1450",
            ]);
        if !offloads {
            cmd.arg("--no-offloads");
        }
        let child = cmd
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start sluice-vpn");
        Vpn { child }
    }

    /// Asks the process to stop (SIGTERM): it passes on what is in flight first.
    fn signal(&self) {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
    }

    /// Waits for the process to end and returns the counters it printed.
    fn wait(mut self) -> HashMap<String, u64> {
        let status = self.child.wait().expect("wait");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut err).expect("stderr");
        }
        assert!(status.success(), "sluice-vpn exited with {status}:\n{err}");
        err.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }
}

/// Waits until `ifname` exists in `ns` (the process creates it), then gives it `addr` and the
/// tunnel's MTU and brings it up.
fn configure_tun(ns: &Netns, addr: &str) {
    let mut tries = 0;
    while ns.run(&["ip", "link", "show", "tv0"]).is_err() {
        tries += 1;
        assert!(tries < 500, "tv0 never appeared in {}", ns.name());
        std::thread::sleep(Duration::from_millis(10));
    }
    ns.run(&["ip", "addr", "add", addr, "dev", "tv0"])
        .expect("address");
    ns.run(&["ip", "link", "set", "tv0", "mtu", "1450", "up"])
        .expect("up");
}

fn seconds() -> Duration {
    let s = std::env::var("VPN_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(s)
}

/// One transfer a → b through a fresh pair of tunnel ends; returns both ends' counters.
fn transfer(offloads: bool) -> (HashMap<String, u64>, HashMap<String, u64>) {
    sluice_ports::require_root().expect("root");
    let a = Netns::create("vpna").expect("netns a");
    let b = Netns::create("vpnb").expect("netns b");
    let _veth = VethPair::create(&a, "ua", &b, "ub", 1500).expect("veth");
    a.run(&["ip", "addr", "add", "10.99.1.1/24", "dev", "ua"])
        .expect("addr");
    b.run(&["ip", "addr", "add", "10.99.1.2/24", "dev", "ub"])
        .expect("addr");
    let va = Vpn::start(&a, "10.99.1.1:51820", "10.99.1.2:51820", offloads);
    let vb = Vpn::start(&b, "10.99.1.2:51820", "10.99.1.1:51820", offloads);
    configure_tun(&a, "10.99.0.1/24");
    configure_tun(&b, "10.99.0.2/24");
    let dst: IpAddr = "10.99.0.2".parse().expect("ip");
    let report = sluice_traffic::tcp_transfer(&b, dst, 0, &a, seconds());
    // Both at once: each drains what is in flight towards the other before it exits.
    va.signal();
    vb.signal();
    let (ca, cb) = (va.wait(), vb.wait());
    let report = report.expect("transfer through the tunnel");
    println!(
        "offloads {}: {:.2} Gbit/s, {} bytes, verified {}",
        if offloads { "on" } else { "off" },
        report.gbps,
        report.bytes,
        report.verified
    );
    assert!(report.verified, "{report:?}");
    assert!(
        report.bytes > 0 && report.bytes == report.sent,
        "{report:?}"
    );
    for (end, c) in [("a", &ca), ("b", &cb)] {
        for k in [
            "tun_rx_errors",
            "segment_drops",
            "wire_tx_drops",
            "wire_rx_errors",
            "wire_rx_not_ip",
        ] {
            assert_eq!(c.get(k), Some(&0), "{end}: {k} in {c:?}");
        }
        // Every datagram one end sent, the other received (veth loses nothing).
        let other = if end == "a" { &cb } else { &ca };
        assert_eq!(
            c.get("wire_tx_datagrams"),
            other.get("wire_rx_datagrams"),
            "{end} -> other: {c:?} / {other:?}"
        );
    }
    (ca, cb)
}

#[test]
fn tcp_through_the_tunnel_with_offloads() {
    let (a, b) = transfer(true);
    let get = |c: &HashMap<String, u64>, k: &str| c.get(k).copied().unwrap_or(0);
    // The sender read TSO super-packets and sent many datagrams per send.
    assert!(get(&a, "tun_rx_super_packets") > 0, "{a:?}");
    assert!(
        get(&a, "wire_tx_datagrams") > 2 * get(&a, "wire_tx_sends"),
        "{a:?}"
    );
    // The receiver got several datagrams per receive and merged them.
    assert!(
        get(&b, "wire_rx_datagrams") > 2 * get(&b, "wire_rx_receives"),
        "{b:?}"
    );
    assert!(get(&b, "gro_merged_packets") > 0, "{b:?}");
    assert!(
        get(&b, "tun_tx_packets") < get(&b, "wire_rx_datagrams"),
        "{b:?}"
    );
}

#[test]
fn tcp_through_the_tunnel_without_offloads() {
    let (a, b) = transfer(false);
    let get = |c: &HashMap<String, u64>, k: &str| c.get(k).copied().unwrap_or(0);
    assert_eq!(get(&a, "tun_rx_super_packets"), 0, "{a:?}");
    assert_eq!(
        get(&a, "wire_tx_datagrams"),
        get(&a, "wire_tx_sends"),
        "{a:?}"
    );
    assert_eq!(
        get(&b, "wire_rx_datagrams"),
        get(&b, "wire_rx_receives"),
        "{b:?}"
    );
    assert_eq!(get(&b, "gro_merged_packets"), 0, "{b:?}");
}
