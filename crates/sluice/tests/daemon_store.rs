//! `sluice run --db DIR` (issue 18, durable state): real daemon processes, real TAPs and
//! network namespaces (root). A restart (SIGTERM or `kill -9`) keeps every acknowledged port,
//! feature override and rule with its handle; handles are never reused across restarts; a
//! corrupt store stops the daemon with the file and offset; a torn tail is cut and reported.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{tag}{}{}",
        std::process::id() % 100_000,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A scratch directory for one test: the store and the socket; removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let d = std::env::temp_dir().join(unique("sluice-db-"));
        std::fs::create_dir_all(&d).expect("scratch dir");
        Scratch(d)
    }
    fn db(&self) -> PathBuf {
        self.0.join("db")
    }
    fn journal(&self) -> PathBuf {
        self.db().join("journal")
    }
    fn sock(&self) -> PathBuf {
        self.0.join("s.sock")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running daemon; killed if the test ends first.
struct Daemon {
    child: Child,
    sock: PathBuf,
    /// What it printed before it listened.
    said: String,
}

/// Starts `sluice run --db` on the scratch directory. `Err`: it exited instead of listening,
/// with its exit status and stderr.
fn start(s: &Scratch) -> Result<Daemon, (Option<i32>, String)> {
    let db = s.db();
    start_with(s, &["--db", db.to_str().expect("utf-8")])
}

/// Starts `sluice run --threads 1 ARGS`.
fn start_with(s: &Scratch, args: &[&str]) -> Result<Daemon, (Option<i32>, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--socket")
        .arg(s.sock())
        .args(["run", "--threads", "1"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the daemon");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut said = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("listening on") => {
                return Ok(Daemon {
                    child,
                    sock: s.sock(),
                    said,
                })
            }
            Ok(line) => {
                said.push_str(&line);
                said.push('\n');
            }
            Err(_) => {
                let status = match child.try_wait() {
                    Ok(Some(st)) => st.code(),
                    _ => {
                        let _ = child.kill();
                        child.wait().ok().and_then(|s| s.code())
                    }
                };
                return Err((status, said));
            }
        }
    }
}

impl Daemon {
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

    /// Adds rules; every one must go in. Their handles.
    fn add(&self, rules: &[String]) -> Vec<u64> {
        let res = self.ok(json!({"cmd": "flow_add", "rules": rules}));
        res.as_array()
            .expect("results")
            .iter()
            .map(|r| {
                assert!(r["error"].is_null(), "{r}");
                r["handle"].as_u64().expect("a handle")
            })
            .collect()
    }

    /// SIGTERM and wait: a clean stop.
    fn stop(mut self) {
        run(&["kill", "-TERM", &self.child.id().to_string()]);
        let st = self.child.wait().expect("wait");
        assert!(st.success(), "the daemon exited with {st}");
    }

    /// `kill -9` and reap.
    fn crash(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` rules that name no port, distinct by destination.
fn rules(tag: u8, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "prio {} dst_ip 10.{tag}.{}.{} action drop",
                100 + i % 7,
                i / 250,
                i % 250
            )
        })
        .collect()
}

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run a command");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace, deleted at the end.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = unique("sdb");
        run(&["ip", "netns", "add", &name]);
        Netns(name)
    }
    fn ip(&self, args: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", &self.0, "ip"];
        all.extend_from_slice(args);
        run(&all);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Whether interface `name` exists in namespace `ns`.
fn has_link(ns: &Netns, name: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", &ns.0, "ip", "link", "show", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Pings `addr` from namespace `ns` (three tries of three packets).
fn pings(ns: &Netns, addr: &str) -> bool {
    (0..3).any(|_| {
        Command::new("ip")
            .args([
                "netns", "exec", &ns.0, "ping", "-c", "3", "-i", "0.2", "-W", "1", addr,
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn a_restart_restores_ports_features_rules_and_traffic() {
    let s = Scratch::new();
    let (na, nb) = (Netns::new(), Netns::new());
    let (ta, tb) = (unique("sdba"), unique("sdbb"));
    let d = start(&s).expect("first start");
    assert!(d.said.contains("0 ports"), "{}", d.said);
    d.ok(json!({"cmd": "port_add", "name": ta, "kind": "tap", "number": 7, "netns": na.0}));
    d.ok(json!({"cmd": "port_add", "name": tb, "kind": "tap", "netns": nb.0, "gro": true}));
    d.ok(json!({"cmd": "features_set", "port": ta, "set": {"tso": false, "tx-checksum-ip-generic": false}}));
    d.add(&[
        format!("prio 10 in_port {ta} action output:{tb}"),
        format!("prio 10 in_port {tb} action output:{ta}"),
    ]);
    d.add(&rules(1, 1000));
    na.ip(&["addr", "add", "10.201.0.1/24", "dev", &ta]);
    na.ip(&["link", "set", &ta, "up"]);
    nb.ip(&["addr", "add", "10.201.0.2/24", "dev", &tb]);
    nb.ip(&["link", "set", &tb, "up"]);
    assert!(pings(&na, "10.201.0.2"), "no traffic before the restart");
    let ports = d.ok(json!({"cmd": "port_list"}));
    let features = d.ok(json!({"cmd": "features_show", "port": ta}));
    let dump = d.ok(json!({"cmd": "flow_dump"}));
    assert_eq!(dump.as_array().map(Vec::len), Some(1002));
    d.stop();
    // The TAPs were kept (persistent), with their addresses.
    assert!(
        has_link(&na, &ta) && has_link(&nb, &tb),
        "the TAPs vanished"
    );

    let d = start(&s).expect("second start");
    assert!(
        d.said
            .contains("2 ports (0 down), 1002 rules, 0 quotas restored")
            && !d.said.contains("WARN"),
        "{}",
        d.said
    );
    assert_eq!(d.ok(json!({"cmd": "port_list"})), ports);
    assert_eq!(d.ok(json!({"cmd": "features_show", "port": ta})), features);
    assert_eq!(d.ok(json!({"cmd": "flow_dump"})), dump);
    // Reattached to the kept TAPs: their addresses are still there and traffic flows.
    assert!(
        pings(&na, "10.201.0.2"),
        "no traffic through the restored ports"
    );
    // port_del deletes a kept TAP.
    d.ok(json!({"cmd": "port_del", "name": tb, "force": true}));
    assert!(!has_link(&nb, &tb), "port_del left the TAP");
    d.stop();
    assert!(has_link(&na, &ta), "the TAP vanished at the second stop");
}

#[test]
fn b_kill_9_keeps_every_acknowledged_change() {
    let s = Scratch::new();
    let ns = Netns::new();
    let tap = unique("sdbk");
    let d = start(&s).expect("first start");
    let first = d.add(&rules(2, 20_000));
    d.ok(json!({"cmd": "port_add", "name": tap, "kind": "tap", "netns": ns.0}));
    let second = d.add(&[format!("in_port {tap} action drop")]);
    d.crash();

    let d = start(&s).expect("restart after kill -9");
    let dump = d.ok(json!({"cmd": "flow_dump"}));
    let dump = dump.as_array().expect("a list");
    assert_eq!(dump.len(), first.len() + second.len());
    for (line, h) in dump.iter().zip(first.iter().chain(&second)) {
        let line = line.as_str().expect("text");
        assert!(line.starts_with(&format!("handle {h}: ")), "{line}");
    }
    let ports = d.ok(json!({"cmd": "port_list"}));
    assert_eq!(ports[0]["name"], tap.as_str(), "{ports}");
    d.crash();
}

#[test]
fn c_corruption_refuses_to_start_a_torn_tail_is_cut_and_reported() {
    let s = Scratch::new();
    let d = start(&s).expect("first start");
    d.add(&rules(3, 1000));
    d.add(&rules(4, 10));
    let last = d.add(&["prio 1 dst_ip 10.5.0.1 action drop".to_string()]);
    let before = d.ok(json!({"cmd": "flow_dump"}));
    d.stop();
    let journal = std::fs::read(s.journal()).expect("journal");

    // A flipped byte in the middle (inside the 1,000-rule record, with records after it).
    let mut bad = journal.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    std::fs::write(s.journal(), &bad).expect("write");
    let Err((code, said)) = start(&s) else {
        panic!("a corrupt store was loaded");
    };
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}: {said}");
    let j = s.journal().display().to_string();
    assert!(
        said.contains(&j) && said.contains("corrupt at byte offset"),
        "{said}"
    );

    // The last record cut short: the daemon starts without it and says what it dropped.
    std::fs::write(s.journal(), &journal[..journal.len() - 5]).expect("write");
    let d = start(&s).expect("start after a torn tail");
    assert!(
        d.said.contains("torn tail at byte offset") && d.said.contains(&j),
        "{}",
        d.said
    );
    let after = d.ok(json!({"cmd": "flow_dump"}));
    let mut expect = before.as_array().expect("list").clone();
    let gone = expect.pop().expect("the last rule");
    assert!(gone
        .as_str()
        .is_some_and(|l| l.starts_with(&format!("handle {}: ", last[0]))));
    assert_eq!(after.as_array(), Some(&expect));
    d.stop();
}

#[test]
fn d_handles_are_never_reused_across_restarts() {
    let s = Scratch::new();
    let d = start(&s).expect("first start");
    let h = d.add(&rules(6, 3));
    let p = d.ok(json!({"cmd": "port_add", "name": unique("sdbh"), "kind": "tap"}));
    d.ok(json!({"cmd": "flow_del", "specs": h.iter().map(|h| format!("handle {h}")).collect::<Vec<_>>()}));
    d.ok(json!({"cmd": "port_del", "name": p["name"]}));
    d.stop();
    let d = start(&s).expect("restart");
    assert_eq!(d.ok(json!({"cmd": "flow_dump"})), json!([]));
    let h2 = d.add(&rules(6, 1));
    assert!(h2[0] > h[2], "rule handle {} reused (had {h:?})", h2[0]);
    let p2 = d.ok(json!({"cmd": "port_add", "name": unique("sdbh"), "kind": "tap"}));
    assert!(
        p2["handle"].as_u64() > p["handle"].as_u64(),
        "port handle {} after {}",
        p2["handle"],
        p["handle"]
    );
    // The store keeps TAPs across restarts: delete this one (in this namespace) before leaving.
    d.ok(json!({"cmd": "port_del", "name": p2["name"]}));
    d.stop();
}

#[test]
fn the_config_names_the_store_and_no_db_keeps_none() {
    let s = Scratch::new();
    let cfg = s.0.join("cfg.json");
    let conf_db = s.0.join("conf-db");
    std::fs::write(&cfg, json!({"db": conf_db}).to_string()).expect("config");
    let cfg_s = cfg.to_str().expect("utf-8");
    // --no-db wins over the configuration: no store is created, nothing is kept.
    let d = start_with(&s, &["--no-db", "--config", cfg_s]).expect("start --no-db");
    d.add(&rules(7, 2));
    d.stop();
    assert!(!conf_db.exists(), "--no-db created {}", conf_db.display());
    let d = start_with(&s, &["--no-db", "--config", cfg_s]).expect("restart --no-db");
    assert_eq!(d.ok(json!({"cmd": "flow_dump"})), json!([]));
    d.stop();
    // Without flags the configuration's "db" is the store.
    let d = start_with(&s, &["--config", cfg_s]).expect("start with the config's db");
    let h = d.add(&rules(7, 1));
    d.stop();
    assert!(conf_db.join("journal").exists());
    let d = start_with(&s, &["--config", cfg_s]).expect("restart with the config's db");
    let dump = d.ok(json!({"cmd": "flow_dump"}));
    assert!(dump[0]
        .as_str()
        .is_some_and(|l| l.starts_with(&format!("handle {}: ", h[0]))));
    d.stop();
    // Without a store a TAP is not kept.
    let tap = unique("sdbn");
    let d = start_with(&s, &["--no-db"]).expect("start --no-db");
    d.ok(json!({"cmd": "port_add", "name": tap, "kind": "tap"}));
    d.stop();
    let kept = Command::new("ip")
        .args(["link", "show", &tap])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(!kept, "--no-db kept the TAP {tap}");
    // Both flags: refused.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--socket")
        .arg(s.sock())
        .args(["run", "--no-db", "--db"])
        .arg(s.db())
        .output()
        .expect("run");
    assert!(!out.status.success());
}

/// A small tmpfs mounted for one test; unmounted at the end.
struct SmallFs(PathBuf);

impl SmallFs {
    fn new(at: PathBuf, size: &str) -> SmallFs {
        std::fs::create_dir_all(&at).expect("mount point");
        let opts = format!("size={size}");
        run(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &opts,
            "tmpfs",
            at.to_str().expect("utf-8"),
        ]);
        SmallFs(at)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

#[test]
fn a_failed_commit_is_an_error_and_nothing_stays_applied() {
    let s = Scratch::new();
    let fs = SmallFs::new(s.0.join("small"), "256k");
    let db = fs.0.join("db");
    let db_s = db.to_str().expect("utf-8");
    let d = start_with(&s, &["--db", db_s]).expect("start");
    // Fill the store until a commit fails (ENOSPC): every acknowledged batch is kept, the
    // refused one is not applied.
    let mut acked = 0usize;
    let mut refused = None;
    for batch in 0..200u8 {
        let v = d.ask(&json!({"cmd": "flow_add", "rules": rules(batch, 250)}));
        if v["ok"] == true {
            acked += 250;
            continue;
        }
        refused = Some(v["error"].as_str().unwrap_or_default().to_string());
        break;
    }
    let refused = refused.expect("the 256 KiB store never filled up");
    assert!(refused.contains("not applied"), "{refused}");
    let dump = d.ok(json!({"cmd": "flow_dump"}));
    assert_eq!(
        dump.as_array().map(Vec::len),
        Some(acked),
        "a refused rule stayed"
    );
    // The store is poisoned: later changes are refused and not applied either.
    let tap = unique("sdbf");
    let v = d.ask(&json!({"cmd": "port_add", "name": tap, "kind": "tap"}));
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(d.ok(json!({"cmd": "port_list"})), json!([]));
    let kept = Command::new("ip")
        .args(["link", "show", &tap])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(!kept, "a refused port_add left its TAP");
    let h = dump[0]
        .as_str()
        .and_then(|l| l.split(':').next())
        .unwrap_or("");
    let v = d.ask(&json!({"cmd": "flow_del", "specs": [h]}));
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(
        d.ok(json!({"cmd": "flow_dump"})),
        dump,
        "a refused delete stayed"
    );
    d.stop();
    // A restart repairs the tail and has exactly what was acknowledged.
    let d = start_with(&s, &["--db", db_s]).expect("restart");
    assert_eq!(d.ok(json!({"cmd": "flow_dump"})), dump);
    d.stop();
}

/// Batches big enough that the store's commit runs on a second thread while the flow table
/// replays the batch on its second copy: a big delete, then adds; every acknowledged one is
/// kept, in both copies (each later batch is applied to the other copy, and the dump after it
/// is checked), and the one whose commit fails (ENOSPC) is taken out of the table again.
#[test]
fn big_batches_commit_beside_the_replay_and_a_failed_one_is_undone() {
    let s = Scratch::new();
    let fs = SmallFs::new(s.0.join("small"), "1m");
    let db = fs.0.join("db");
    let db_s = db.to_str().expect("utf-8");
    let d = start_with(&s, &["--db", db_s]).expect("start");
    // A big delete commits beside the replay too.
    d.ok(json!({"cmd": "flow_add", "rules": rules(100, 5000)}));
    let dump = d.ok(json!({"cmd": "flow_dump"}));
    let handles: Vec<&str> = dump
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l.as_str()?.split(':').next())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(handles.len(), 5000, "{dump}");
    d.ok(json!({"cmd": "flow_del", "specs": handles}));
    assert_eq!(d.ok(json!({"cmd": "flow_dump"})), json!([]));
    let mut acked = 0usize;
    let mut refused = None;
    for batch in 0..40u8 {
        let v = d.ask(&json!({"cmd": "flow_add", "rules": rules(batch, 5000)}));
        if v["ok"] != true {
            refused = Some(v["error"].as_str().unwrap_or_default().to_string());
            break;
        }
        acked += 5000;
        let dump = d.ok(json!({"cmd": "flow_dump"}));
        assert_eq!(
            dump.as_array().map(Vec::len),
            Some(acked),
            "after batch {batch}"
        );
    }
    let refused = refused.expect("the 1 MiB store never filled up");
    assert!(refused.contains("not applied"), "{refused}");
    assert!(acked >= 5000, "not even one big batch went in");
    let dump = d.ok(json!({"cmd": "flow_dump"}));
    assert_eq!(
        dump.as_array().map(Vec::len),
        Some(acked),
        "a refused rule stayed"
    );
    d.stop();
    let d = start_with(&s, &["--db", db_s]).expect("restart");
    assert_eq!(d.ok(json!({"cmd": "flow_dump"})), dump);
    d.stop();
}

#[test]
fn a_port_whose_device_is_gone_at_restart_starts_down_and_comes_back() {
    let s = Scratch::new();
    let ns = Netns::new();
    let (va, vb) = (unique("sdbv"), unique("sdbw"));
    let veth = || {
        ns.ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ns.ip(&["link", "set", &va, "up"]);
        ns.ip(&["link", "set", &vb, "up"]);
    };
    veth();
    let d = start(&s).expect("first start");
    d.ok(json!({"cmd": "port_add", "name": va, "kind": "afpacket", "netns": ns.0, "number": 5}));
    let h = d.add(&[format!("in_port {va} action drop")]);
    d.stop();
    ns.ip(&["link", "del", &va]);

    let d = start(&s).expect("start without the device");
    assert!(
        d.said.contains(&format!("port 5 \"{va}\" starts down")),
        "{}",
        d.said
    );
    let state = |d: &Daemon| d.ok(json!({"cmd": "port_list"}))[0]["state"].clone();
    let deadline = Instant::now() + Duration::from_secs(5);
    while state(&d) != "down" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(state(&d), "down");
    let dump = d.ok(json!({"cmd": "flow_dump"}));
    assert!(dump[0]
        .as_str()
        .is_some_and(|l| l.starts_with(&format!("handle {}: ", h[0]))));
    // The interface is back: the recovery of down ports reattaches it.
    veth();
    let deadline = Instant::now() + Duration::from_secs(10);
    while state(&d) != "up" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(state(&d), "up");
    d.stop();
}

/// The text batches the CLI loads files with (`flow_add_text`, `flow_del_text`,
/// `flow_mod_text`) are durable before they are answered, as `flow_add` / `flow_del` are: after
/// `kill -9`, the rules that went in are back under their handles, the bad line's rule is not, a
/// deleted one stays deleted, and a modified one has its new actions (twice modified: the last).
#[test]
fn e_text_batches_are_durable_too() {
    let s = Scratch::new();
    let d = start(&s).expect("first start");
    let text = "prio 1 dst_ip 10.9.0.1 action drop\nprio 2 dst_ipp 10.9.0.2 action drop\n\
                prio 3 dst_ip 10.9.0.3 action drop\nprio 4 dst_ip 10.9.0.4 action drop\n";
    let r = d.ok(json!({"cmd": "flow_add_text", "text": text}));
    assert_eq!(r["done"], 3, "{r}");
    assert_eq!(r["errors"][0]["line"], 2, "{r}");
    let r = d.ok(json!({"cmd": "flow_del_text", "text": "prio 3 dst_ip 10.9.0.3\n"}));
    assert_eq!(r["done"], 1, "{r}");
    for out in ["output:3", "output:5"] {
        let text =
            format!("prio 4 dst_ip 10.9.0.4 action {out}\nprio 5 dst_ip 10.9.0.5 action drop\n");
        let r = d.ok(json!({"cmd": "flow_mod_text", "text": text}));
        assert_eq!(r["done"], 1, "{r}");
        assert_eq!(r["errors"][0]["line"], 2, "{r}");
    }
    let before = d.ok(json!({"cmd": "flow_dump"}));
    assert!(before.to_string().contains("output:5"), "{before}");
    assert!(!before.to_string().contains("output:3"), "{before}");
    assert_eq!(before.as_array().map(Vec::len), Some(2), "{before}");
    d.crash();

    let d = start(&s).expect("restart after kill -9");
    assert_eq!(d.ok(json!({"cmd": "flow_dump"})), before);
    d.crash();
}

/// `sluice --socket SOCK quota ARGS…`: its stdout, or its stderr if it failed.
fn quota_cli(d: &Daemon, args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--socket")
        .arg(&d.sock)
        .arg("quota")
        .args(args)
        .output()
        .expect("run sluice quota");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn quotas_set_at_run_time_survive_restart_and_kill_9_and_never_go_below_use() {
    sluice_testkit::root();
    let s = Scratch::new();
    let db = s.db();
    let db = db.to_str().expect("utf-8");
    let flags = ["--db", db, "--max-rules", "1000", "--max-masks", "100"];
    let d = start_with(&s, &flags).expect("start");
    d.add(&rules(1, 50));
    let q = d.ok(json!({"cmd": "quota_show"}));
    assert_eq!(
        (q["rules"].as_u64(), q["rules_used"].as_u64()),
        (Some(1000), Some(50)),
        "{q}"
    );
    assert_eq!(q["masks"], 100, "{q}");

    // Below what is in use, or zero: refused with the reason, nothing changed (not even the
    // masks given in the same request).
    let v = d.ask(&json!({"cmd": "quota_set", "rules": 49, "masks": 50}));
    let err = v["error"].as_str().unwrap_or_default().to_string();
    assert!(
        err.contains("rules=49") && err.contains("below current usage") && err.contains("50"),
        "{v}"
    );
    let err = quota_cli(&d, &["set", "masks=0"]).expect_err("masks=0 is refused");
    assert!(
        err.contains("masks=0") && err.contains("at least 1"),
        "{err}"
    );
    let err = quota_cli(&d, &["set", "rulez=5"]).expect_err("unknown quota");
    assert!(err.contains("rulez"), "{err}");
    assert_eq!(d.ok(json!({"cmd": "quota_show"})), q, "nothing changed");

    // Through the command line; then enforced: 10 more rules fit, the 11th does not.
    let shown = quota_cli(&d, &["set", "rules=60", "masks=8"]).expect("quota set");
    assert!(shown.contains("rules") && shown.contains("60"), "{shown}");
    d.add(&rules(2, 10));
    let v = d.ask(&json!({"cmd": "flow_add", "rules": rules(3, 1)}));
    let refused = &v["result"][0]["error"];
    assert!(refused.as_str().is_some_and(|e| e.contains("60")), "{v}");

    // A clean restart with the same flags: the stored quotas win.
    d.stop();
    let d = start_with(&s, &flags).expect("restart");
    let q = d.ok(json!({"cmd": "quota_show"}));
    assert_eq!(
        (
            q["rules"].as_u64(),
            q["rules_used"].as_u64(),
            q["masks"].as_u64()
        ),
        (Some(60), Some(60), Some(8)),
        "{q}"
    );
    let table = quota_cli(&d, &["show"]).expect("quota show");
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["masks", "8", "1"]),
        "{table}"
    );

    // kill -9 right after an acknowledged change loses nothing.
    d.ok(json!({"cmd": "quota_set", "rules": 70, "rule_bytes": 1_000_000}));
    d.crash();
    let d = start_with(&s, &flags).expect("restart after kill -9");
    let q = d.ok(json!({"cmd": "quota_show"}));
    assert_eq!(
        (
            q["rules"].as_u64(),
            q["rule_bytes"].as_u64(),
            q["masks"].as_u64()
        ),
        (Some(70), Some(1_000_000), Some(8)),
        "{q}"
    );
    d.stop();
}
