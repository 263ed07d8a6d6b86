//! Per-port settings (issue 16, item 3) through a real daemon with a store (root): `sluice port
//! set` changes a port's VLAN depth, envelope, GSO limits and GRO choices; transmit preparation
//! follows them (a QinQ super-frame leaves an AF_PACKET port whole with depth 8, is segmented
//! in software with depth 1, both counted per port); a restart keeps them.
//!
//! Topology: TAP A (namespace na) → push two tags → X ══veth══ Y (namespace nh) → pop both →
//! TAP B (namespace nb), and back; TCP from na to nb.

mod daemon_common;

use serde_json::{json, Value};
use sluice_ports::netns::{unique_suffix, Netns, VethPair};
use sluice_testkit::wait::wait_until;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Bytes each TCP transfer carries.
const TRANSFER: usize = 4 << 20;

struct Daemon {
    child: Child,
    sock: PathBuf,
}

impl Daemon {
    fn start(sock: &Path, db: &Path) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("--socket")
            .arg(sock)
            .args(["run", "--threads", "1", "--db"])
            .arg(db)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the daemon");
        daemon_common::wait_listening(&mut child).expect("the daemon listens");
        Daemon {
            child,
            sock: sock.to_path_buf(),
        }
    }

    fn ask(&self, req: &Value) -> Value {
        let mut s = UnixStream::connect(&self.sock).expect("connect");
        writeln!(s, "{req}").expect("send");
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).expect("reply");
        serde_json::from_str(&line).expect("JSON reply")
    }

    fn ok(&self, req: Value) -> Value {
        let v = self.ask(&req);
        assert_eq!(v["ok"], true, "{req} failed: {v}");
        v["result"].clone()
    }

    /// `sluice ARGS…` against this daemon: its stdout, or its stderr as the error.
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("--socket")
            .arg(&self.sock)
            .args(args)
            .output()
            .expect("run the CLI");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Port `name`'s counters.
    fn stats(&self, name: &str) -> Value {
        let all = self.ok(json!({"cmd": "stats"}));
        all.as_array()
            .and_then(|a| a.iter().find(|p| p["name"] == name).cloned())
            .unwrap_or_else(|| panic!("no stats for {name}: {all}"))
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let st = self.child.wait().expect("wait");
        assert!(st.success(), "the daemon exited with {st}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends [`TRANSFER`] bytes over TCP from `from` to `to_addr` (listening in `to`) and checks
/// every byte arrived, in order.
fn transfer(from: &Netns, to: &Netns, to_addr: &str) {
    let listener = to
        .enter(|| TcpListener::bind("0.0.0.0:0"))
        .expect("enter")
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let mut got = Vec::with_capacity(TRANSFER);
        s.read_to_end(&mut got).expect("read");
        got
    });
    let addr = format!("{to_addr}:{port}");
    let mut s = from
        .enter(move || {
            TcpStream::connect_timeout(&addr.parse().expect("addr"), Duration::from_secs(10))
        })
        .expect("enter")
        .expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(30))).ok();
    let data: Vec<u8> = (0..TRANSFER).map(|i| (i * 7 + i / 4096) as u8).collect();
    s.write_all(&data).expect("send");
    drop(s);
    let got = reader.join().expect("reader");
    assert_eq!(got.len(), data.len(), "bytes received");
    assert!(got == data, "the bytes arrived changed");
}

fn ns_ip(ns: &Netns, args: &[&str]) {
    let mut all = vec!["ip"];
    all.extend_from_slice(args);
    ns.run(&all).expect("ip");
}

#[test]
fn port_settings_steer_segmentation_and_survive_a_restart() {
    let scratch = std::env::temp_dir().join(format!("sluice-ps-{}", unique_suffix()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    let sock = scratch.join("s.sock");
    let db = scratch.join("db");
    let (na, nb, nh) = (
        Netns::create("sps").expect("netns"),
        Netns::create("sps").expect("netns"),
        Netns::create("sps").expect("netns"),
    );
    let sfx = unique_suffix();
    let (ta, tb, x, y) = (
        format!("psa{sfx}"),
        format!("psb{sfx}"),
        format!("psx{sfx}"),
        format!("psy{sfx}"),
    );
    let _veth = VethPair::create(&nh, &x, &nh, &y, 1500).expect("veth");
    let d = Daemon::start(&sock, &db);
    d.ok(json!({"cmd": "port_add", "name": ta, "kind": "tap", "netns": na.name()}));
    d.ok(json!({"cmd": "port_add", "name": tb, "kind": "tap", "netns": nb.name()}));
    for end in [&x, &y] {
        d.ok(json!({"cmd": "port_add", "name": end, "kind": "afpacket", "netns": nh.name(), "gro": true}));
    }
    let push = "push_vlan:802.1q:200,push_vlan:802.1ad:100";
    let m = "vlan_ethtype 802.1ad vlan_id 100 cvlan_ethtype 802.1q cvlan_id 200";
    let rules = [
        format!("prio 10 in_port {ta} action {push},output:{x}"),
        format!("prio 10 in_port {y} {m} action pop_vlan,pop_vlan,output:{tb}"),
        format!("prio 10 in_port {tb} action {push},output:{y}"),
        format!("prio 10 in_port {x} {m} action pop_vlan,pop_vlan,output:{ta}"),
    ];
    d.ok(json!({"cmd": "flow_add", "rules": rules, "atomic": true}));
    // MTU 1400 on the TAPs: two tags on a full-size frame stay within what the veth (MTU
    // 1500) takes from a packet socket.
    ns_ip(&na, &["addr", "add", "10.212.0.1/24", "dev", &ta]);
    ns_ip(&na, &["link", "set", &ta, "mtu", "1400", "up"]);
    ns_ip(&nb, &["addr", "add", "10.212.0.2/24", "dev", &tb]);
    ns_ip(&nb, &["link", "set", &tb, "mtu", "1400", "up"]);

    // TAPs negotiate UDP-tunnel GSO (24-byte vnet header) by default.
    let has_tnl = |d: &Daemon, name: &str| {
        d.ok(json!({"cmd": "port_show", "name": name}))["features"]
            .as_array()
            .is_some_and(|f| f.iter().any(|n| n == "tx-udp_tnl-segmentation"))
    };
    assert!(has_tnl(&d, &ta) && has_tnl(&d, &tb));
    // The AF_PACKET port's default: any number of tags; the QinQ super-frames go out whole.
    let shown = d.ok(json!({"cmd": "port_show", "name": x}));
    assert_eq!(shown["settings"]["vlan_depth"], 8, "{shown}");
    assert_eq!(shown["settings"]["envelope"], 4, "{shown}");
    transfer(&na, &nb, "10.212.0.2");
    let s = d.stats(&x);
    assert!(
        s["tx_hw_gso"].as_u64() > Some(0),
        "no super-frame whole: {s}"
    );
    assert_eq!(s["tx_soft_gso"], 0, "{s}");

    // Depth 1 (and other settings, through the CLI): the same traffic is segmented in
    // software before X, counted.
    let out = d
        .cli(&[
            "port",
            "set",
            &x,
            "vlan_depth=1",
            "envelope=8",
            "gso_max_segs=200",
            "gro_udp=on",
            "gro_tunnel=off",
        ])
        .expect("port set");
    assert!(
        out.contains("vlan_depth=1") && out.contains("envelope=8"),
        "{out}"
    );
    // A bad value changes nothing and says why.
    let e = d
        .cli(&["port", "set", &x, "vlan_depth=2", "vlan_depth=9"])
        .unwrap_err();
    assert!(e.contains("vlan_depth must be 0 to 8, not 9"), "{e}");
    let e = d.cli(&["port", "set", &x, "bogus=1"]).unwrap_err();
    assert!(e.contains("no port setting \"bogus\""), "{e}");
    let hw_before = d.stats(&x)["tx_hw_gso"].as_u64().unwrap_or(0);
    transfer(&na, &nb, "10.212.0.2");
    let s = d.stats(&x);
    assert!(s["tx_soft_gso"].as_u64() > Some(0), "no software GSO: {s}");
    assert_eq!(s["tx_hw_gso"].as_u64(), Some(hw_before), "{s}");
    let want = json!({
        "gro": true, "gro_tunnel": false, "gro_udp": true, "vlan_depth": 1, "envelope": 8,
        "gso_max_size": d.ok(json!({"cmd": "port_show", "name": x}))["settings"]["gso_max_size"],
        "gso_max_segs": 200
    });
    let shown = d.ok(json!({"cmd": "port_show", "name": x}));
    assert_eq!(shown["settings"], want);
    let text = d.cli(&["port", "show", &x]).expect("port show");
    assert!(
        text.contains("vlan_depth=1 envelope=8") && text.contains("gro_udp=on"),
        "{text}"
    );
    d.stop();

    // The restart opens the ports with their settings; the traffic is steered as before.
    let d = Daemon::start(&sock, &db);
    let shown = d.ok(json!({"cmd": "port_show", "name": x}));
    assert_eq!(shown["settings"], want);
    assert!(has_tnl(&d, &ta), "the restored TAP lost UDP-tunnel GSO");
    wait_until(
        "the restored TAPs carry traffic",
        Duration::from_secs(20),
        || {
            na.run(&["ping", "-c", "1", "-W", "1", "10.212.0.2"])
                .is_ok()
        },
    )
    .expect("ping after the restart");
    transfer(&na, &nb, "10.212.0.2");
    let s = d.stats(&x);
    assert!(
        s["tx_soft_gso"].as_u64() > Some(0),
        "no software GSO after the restart: {s}"
    );
    assert_eq!(s["tx_hw_gso"], 0, "{s}");
    // `default` goes back to the port's own depth: whole super-frames again.
    d.cli(&["port", "set", &x, "vlan_depth=default"])
        .expect("port set default");
    transfer(&na, &nb, "10.212.0.2");
    let s = d.stats(&x);
    assert!(s["tx_hw_gso"].as_u64() > Some(0), "{s}");
    d.stop();
    let _ = std::fs::remove_dir_all(&scratch);
}
