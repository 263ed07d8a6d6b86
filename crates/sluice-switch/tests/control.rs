//! The control socket as clients use it, including clients that send garbage: every bad
//! request gets an error answer and is counted, and the daemon keeps serving.

use serde_json::{json, Value};
use sluice_switch::control::{Client, ControlServer, Request, CTL_BAD_REQUESTS};
use sluice_switch::{Switch, SwitchConfig};
use sluice_testkit::wait_until;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The control counters are process-wide and every test here moves them: the tests run one at a
/// time so that each can assert exact counts.
static COUNTERS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    COUNTERS.lock().unwrap_or_else(|p| p.into_inner())
}

struct Daemon {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    fn start(tag: &str) -> Daemon {
        let path =
            std::env::temp_dir().join(format!("sluice-ctl-{tag}-{}.sock", std::process::id()));
        let server = ControlServer::bind(&path).expect("bind the control socket");
        let switch = Arc::new(Switch::start(SwitchConfig::default()).expect("switch starts"));
        let stop = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            server.run(&switch, &st).expect("control server runs");
        });
        Daemon {
            path,
            stop,
            thread: Some(thread),
        }
    }

    fn raw(&self) -> (BufReader<UnixStream>, UnixStream) {
        let s = UnixStream::connect(&self.path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        (BufReader::new(s.try_clone().expect("clone")), s)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer(r: &mut BufReader<UnixStream>) -> Value {
    let mut line = String::new();
    r.read_line(&mut line).expect("an answer");
    serde_json::from_str(&line).expect("the answer is JSON")
}

#[test]
fn garbage_gets_errors_and_the_connection_keeps_working() {
    let _serial = one_at_a_time();
    let d = Daemon::start("garbage");
    let (mut r, mut w) = d.raw();
    let bad: &[&[u8]] = &[
        b"hello\n",
        b"{\n",
        b"{\"cmd\": \"no_such_command\"}\n",
        b"{\"cmd\": \"port_del\"}\n",
        b"{\"cmd\": \"flow_add\", \"rules\": \"not a list\"}\n",
        b"[1,2,3]\n",
        b"\xff\xfe\x00\x01\n",
        b"{\"cmd\": \"ping\", \"extra\": 1}\n",
    ];
    let before = CTL_BAD_REQUESTS.value();
    for line in bad {
        w.write_all(line).expect("write");
        let a = answer(&mut r);
        assert_eq!(
            a["ok"],
            json!(false),
            "{:?} → {a}",
            String::from_utf8_lossy(line)
        );
        assert!(a["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    assert_eq!(CTL_BAD_REQUESTS.value(), before + bad.len() as u64);
    // The same connection still answers.
    w.write_all(b"{\"cmd\": \"ping\"}\n").expect("write");
    assert_eq!(answer(&mut r), json!({"ok": true, "result": "pong"}));
}

#[test]
fn truncated_requests_are_never_executed() {
    let _serial = one_at_a_time();
    let d = Daemon::start("trunc");
    let before = CTL_BAD_REQUESTS.value();
    {
        let (_r, mut w) = d.raw();
        // A valid rule cut off before its newline, then the client goes away.
        w.write_all(b"{\"cmd\": \"flow_add\", \"rules\": [\"prio 1 action drop\"]}")
            .expect("write");
    }
    // The server counts the cut-off request as bad when it sees the end of the stream.
    wait_until(
        "the cut-off request to be counted",
        Duration::from_secs(10),
        || CTL_BAD_REQUESTS.value() > before,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(CTL_BAD_REQUESTS.value(), before + 1);
    let mut c = Client::connect(&d.path).expect("connect");
    let dump = c
        .request(&Request::FlowDump { stats: false })
        .expect("dump");
    assert_eq!(dump, json!([]), "the cut-off request was not applied");
}

#[test]
fn errors_name_the_problem() {
    let _serial = one_at_a_time();
    let d = Daemon::start("errors");
    let mut c = Client::connect(&d.path).expect("connect");
    let e = c
        .request(&Request::PortDel {
            name: "nope0".into(),
            force: false,
        })
        .expect_err("no such port");
    assert!(e.to_string().contains("nope0"), "{e}");
    let res = c
        .request(&Request::FlowAdd {
            rules: vec![
                "prio 10 action drop".into(),
                "prio 5 dst_ip 10.0.0.0/33 action drop".into(),
                "prio 10 in_port nosuch action drop".into(),
            ],
            atomic: false,
        })
        .expect("flow_add answers per rule");
    let res = res.as_array().expect("a list");
    assert!(res[0]["handle"].is_u64());
    let e1 = res[1]["error"].as_str().expect("bad prefix");
    assert!(e1.contains("^"), "the offending token is marked: {e1}");
    assert!(res[2]["error"]
        .as_str()
        .is_some_and(|e| e.contains("nosuch")));
    let dump = c
        .request(&Request::FlowDump { stats: false })
        .expect("dump");
    assert_eq!(dump.as_array().map(Vec::len), Some(1));
    let del = c
        .request(&Request::FlowDel {
            specs: vec!["prio 10".into()],
            atomic: false,
        })
        .expect("delete by match");
    assert!(del[0]["error"].is_null(), "{del}");
    assert_eq!(
        c.request(&Request::FlowDump { stats: false })
            .expect("dump"),
        json!([])
    );
}

#[test]
fn an_over_long_line_is_refused_and_the_daemon_survives() {
    let _serial = one_at_a_time();
    let d = Daemon::start("long");
    let (mut r, mut w) = d.raw();
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0;
    while sent <= sluice_switch::control::MAX_LINE {
        if w.write_all(&chunk).is_err() {
            break; // the daemon closed on us: fine
        }
        sent += chunk.len();
    }
    let _ = w.write_all(b"\n");
    let mut line = String::new();
    if r.read_line(&mut line).is_ok() && !line.is_empty() {
        let a: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(a["ok"], json!(false));
    }
    let mut c = Client::connect(&d.path).expect("connect again");
    assert_eq!(c.request(&Request::Ping {}).expect("ping"), json!("pong"));
}

#[test]
fn port_add_refuses_unknown_fields() {
    let _serial = one_at_a_time();
    let d = Daemon::start("portadd");
    let (mut r, mut w) = d.raw();
    w.write_all(b"{\"cmd\": \"port_add\", \"name\": \"x0\", \"kind\": \"tap\", \"gr0\": true}\n")
        .expect("write");
    let a = answer(&mut r);
    assert_eq!(a["ok"], json!(false), "{a}");
    assert!(
        a["error"].as_str().is_some_and(|e| e.contains("gr0")),
        "{a}"
    );
    w.write_all(b"{\"cmd\": \"port_add\", \"name\": \"x0\", \"kind\": \"floppy\"}\n")
        .expect("write");
    let a = answer(&mut r);
    assert_eq!(a["ok"], json!(false), "{a}");
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn handles_are_never_reused_and_errors_name_them() {
    let sw = Switch::start(SwitchConfig::default()).expect("switch starts");
    let r = sw
        .add_flows(&strings(&["prio 1 dst_ip 10.0.0.1 action drop"]), false)
        .expect("add");
    let h1 = r[0].handle.expect("handle");
    let dup = sw
        .add_flows(&strings(&["prio 1 dst_ip 10.0.0.1 action drop"]), false)
        .expect("add");
    let e = dup[0].error.as_deref().expect("a duplicate");
    assert!(e.contains(&format!("handle {h1}")), "{e}");
    // Delete and add again, many times: the handles only grow (the flow table's own handles
    // are reused at once).
    let mut last = h1;
    for _ in 0..5 {
        let d = sw
            .del_flows(&strings(&["prio 1 dst_ip 10.0.0.1"]), false)
            .expect("del");
        assert_eq!(d[0].handle, Some(last), "{d:?}");
        assert!(d[0].error.is_none(), "{d:?}");
        let r = sw
            .add_flows(&strings(&["prio 1 dst_ip 10.0.0.1 action drop"]), false)
            .expect("add");
        let h = r[0].handle.expect("handle");
        assert!(h > last, "{h} after {last}");
        last = h;
    }
    let d = sw.del_flows(&[format!("handle {h1}")], false).expect("del");
    assert_eq!(
        d[0].error.as_deref(),
        Some(format!("no rule with handle {h1}").as_str())
    );
    assert_eq!(sw.dump_flows().len(), 1);
    // A text batch naming one rule twice by its match: the second line finds nothing (the
    // message a rule spec gets, not a handle's); the rule is gone once.
    let rep = sw
        .del_flows_text("prio 1 dst_ip 10.0.0.1\nprio 1 dst_ip 10.0.0.1\n", false)
        .expect("del text");
    assert_eq!(rep.done, 1, "{rep:?}");
    assert_eq!(rep.errors.len(), 1, "{rep:?}");
    assert_eq!(rep.errors[0].line, 2);
    assert_eq!(
        rep.errors[0].error,
        sluice_flow::RuleError::NotFound.to_string(),
        "{rep:?}"
    );
    assert!(sw.dump_flows().is_empty());
}

/// A text deletion (`flow_del_text`) takes its rules off their masks' counts once each: by
/// handle, by match, with a repeated handle and an unknown one refused line by line.
#[test]
fn the_mask_quota_frees_as_text_deletes_go() {
    use sluice_switch::control::TextOp;
    let sw = Switch::start(SwitchConfig {
        max_masks: 2,
        ..SwitchConfig::default()
    })
    .expect("switch starts");
    let a = strings(&[
        "prio 1 dst_ip 10.0.0.0/24 action drop",
        "prio 1 dst_ip 10.0.1.0/24 action drop",
        "prio 1 dst_ip 10.0.2.0/24 action drop",
        "prio 1 dst_ip 10.2.0.0/20 action drop",
        "prio 1 dst_ip 10.2.16.0/20 action drop",
    ]);
    let r = sw.add_flows(&a, false).expect("add");
    assert!(r.iter().all(|x| x.error.is_none()), "two masks: {r:?}");
    let h0 = r[0].handle.expect("a handle");
    let h2 = r[2].handle.expect("a handle");
    let h3 = r[3].handle.expect("a handle");
    let c = strings(&["prio 1 dst_ip 10.1.0.0/16 action drop"]);
    let d = strings(&["prio 1 dst_ip 10.0.0.0/8 action drop"]);
    assert!(sw.add_flows(&c, false).expect("add")[0].error.is_some());
    // The /24 mask loses all three rules; the /20 mask one of its two, named twice (a count
    // that took failed lines off too would free it).
    let text = format!(
        "handle {h0}\nprio 1 dst_ip 10.0.1.0/24\nhandle {h3}\nhandle {h0}\nhandle 999999\nhandle {h2}\nhandle {h3}\n"
    );
    let p = sw.prepare_text(TextOp::Del, text).expect("parse");
    let rep = sw.apply_text(p, false).expect("del");
    assert_eq!((rep.rules, rep.done), (7, 4), "{rep:?}");
    let lines: Vec<usize> = rep.errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, vec![4, 5, 7], "{rep:?}");
    assert_eq!(sw.dump_flows().len(), 1);
    // The /24 mask is free: the /16 fits; the /20 still counts, so the /8 does not.
    assert!(sw.add_flows(&c, false).expect("add")[0].error.is_none());
    let r = sw.add_flows(&d, false).expect("add");
    assert!(
        r[0].error
            .as_deref()
            .is_some_and(|e| e.contains("max_masks")),
        "{r:?}"
    );
}

#[test]
fn the_mask_quota_frees_as_rules_go() {
    let sw = Switch::start(SwitchConfig {
        max_masks: 1,
        ..SwitchConfig::default()
    })
    .expect("switch starts");
    let a = strings(&[
        "prio 1 dst_ip 10.0.0.0/24 action drop",
        "prio 1 dst_ip 10.0.1.0/24 action drop",
    ]);
    let r = sw.add_flows(&a, false).expect("add");
    assert!(
        r.iter().all(|x| x.error.is_none()),
        "one mask, two rules: {r:?}"
    );
    let b = strings(&["prio 1 dst_ip 10.1.0.0/16 action drop"]);
    let r = sw.add_flows(&b, false).expect("add");
    assert!(
        r[0].error
            .as_deref()
            .is_some_and(|e| e.contains("max_masks")),
        "{r:?}"
    );
    // One rule of the /24 mask gone: the mask is still in use.
    sw.del_flows(&strings(&["prio 1 dst_ip 10.0.0.0/24"]), false)
        .expect("del");
    let r = sw.add_flows(&b, false).expect("add");
    assert!(r[0].error.is_some(), "{r:?}");
    // Both gone (one by handle): the /16 fits.
    let h = sw.dump_flows()[0]
        .strip_prefix("handle ")
        .and_then(|s| s.split(':').next())
        .expect("a handle")
        .to_string();
    let d = sw.del_flows(&[h], false).expect("del");
    assert!(d[0].error.is_none(), "{d:?}");
    let r = sw.add_flows(&b, false).expect("add");
    assert!(r[0].error.is_none(), "{r:?}");
    // An atomic batch refused by the quota adds nothing.
    let c = strings(&[
        "prio 2 dst_ip 10.1.0.0/16 action drop",
        "prio 2 dst_ip 10.2.0.0/24 action drop",
    ]);
    let r = sw.add_flows(&c, true).expect("add");
    assert!(r.iter().all(|x| x.error.is_some()), "{r:?}");
    assert_eq!(sw.flow_counts(), (1, 1));
}

#[test]
fn port_numbers_out_of_range_and_too_big_batches_are_refused() {
    let sw = Switch::start(SwitchConfig::default()).expect("switch starts");
    for n in [0, sluice_switch::MAX_PORT_NUMBER + 1, u32::MAX] {
        let mut req = sluice_switch::PortRequest::new("never0", sluice_switch::PortKind::Tap);
        req.number = Some(n);
        let e = sw.add_port(req).expect_err("refused");
        assert!(e.to_string().contains("out of range"), "{e}");
    }
    let many = vec!["prio 1 action drop".to_string(); sluice_switch::MAX_BATCH + 1];
    let e = sw.add_flows(&many, false).expect_err("refused");
    assert!(e.to_string().contains("at most 100000"), "{e}");
    let e = sw.del_flows(&many, false).expect_err("refused");
    assert!(e.to_string().contains("at most 100000"), "{e}");
}

/// The server reads (and parses) a connection's next request while it runs the one before:
/// requests sent back to back without waiting still run in order, and a rules text parsed
/// before a port existed is parsed again once it does.
#[test]
fn back_to_back_requests_run_in_order_with_read_ahead() {
    let _g = one_at_a_time();
    let d = Daemon::start("pipe");
    let (mut r, mut w) = d.raw();
    let tap = format!("slcpipe{}", std::process::id() % 10000);
    let rule = format!("prio 7 in_port {tap} action drop");
    let mut burst = String::new();
    for req in [
        json!({"cmd": "flow_add_text", "text": rule, "atomic": false}),
        json!({"cmd": "port_add", "name": tap, "kind": "tap"}),
        json!({"cmd": "flow_add_text", "text": rule, "atomic": false}),
        json!({"cmd": "flow_dump"}),
        json!({"cmd": "port_del", "name": tap, "force": true}),
    ] {
        burst.push_str(&req.to_string());
        burst.push('\n');
    }
    w.write_all(burst.as_bytes())
        .expect("send all five at once");
    let first = answer(&mut r);
    let errors = &first["result"]["errors"];
    assert_eq!(errors.as_array().map(Vec::len), Some(1), "{first}");
    assert!(
        errors[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("unknown port"),
        "{first}"
    );
    let added = answer(&mut r);
    assert_eq!(added["ok"], json!(true), "{added}");
    let second = answer(&mut r);
    assert_eq!(second["result"]["done"], json!(1), "{second}");
    let dump = answer(&mut r);
    assert_eq!(dump["result"].as_array().map(Vec::len), Some(1), "{dump}");
    let del = answer(&mut r);
    assert_eq!(del["ok"], json!(true), "{del}");
}

/// Big rules texts sent back to back on one connection (parsed on several threads, into
/// vectors the connection reuses from one request to the next): each request's rules go in
/// with its own handles, its bad lines come back by line number with the token marked, and a
/// `flow_mod_text` on the same connection (into the reused vectors too) changes every rule.
#[test]
fn pipelined_big_texts_reuse_their_buffers_correctly() {
    let _serial = one_at_a_time();
    let d = Daemon::start("pipelined");
    let (mut r, mut w) = d.raw();
    const PER: usize = 6000; // above the parallel-parse threshold (4096 lines)
    const REQS: usize = 4;
    let text_of = |req: usize, action: &str| -> String {
        let mut t = String::new();
        for i in 0..PER {
            if i == 1000 + req {
                t.push_str("prio 1 dst_port 80 colour red action drop\n");
            } else {
                let n = req * PER + i;
                t.push_str(&format!(
                    "prio {} eth_type ipv4 ip_proto tcp dst_ip 10.{}.{}.0/24 dst_port {} action {action}\n",
                    n % 7,
                    n >> 16,
                    (n >> 8) & 0xff,
                    n & 0xff
                ));
            }
        }
        t
    };
    let send = |w: &mut UnixStream, cmd: &str, body: &str| {
        let mut bytes = json!({"cmd": cmd, "text_bytes": body.len()})
            .to_string()
            .into_bytes();
        bytes.push(b'\n');
        bytes.extend_from_slice(body.as_bytes());
        w.write_all(&bytes).expect("write");
    };
    // All requests written before any answer is read: the reader parses ahead.
    for req in 0..REQS {
        send(&mut w, "flow_add_text", &text_of(req, "drop"));
    }
    let mut handles = std::collections::HashSet::new();
    for req in 0..REQS {
        let a = answer(&mut r);
        assert_eq!(a["result"]["rules"], json!(PER), "{a}");
        assert_eq!(a["result"]["done"], json!(PER - 1), "{a}");
        let errs = a["result"]["errors"].as_array().expect("errors");
        assert_eq!(errs.len(), 1, "{a}");
        assert_eq!(errs[0]["line"], json!(1000 + req + 1), "{a}");
        let e = errs[0]["error"].as_str().unwrap_or("");
        assert!(e.contains("colour") && e.contains("^^^"), "{e}");
        for run in a["result"]["handles"].as_array().expect("handles") {
            let (first, n) = (run[0].as_u64().unwrap(), run[1].as_u64().unwrap());
            for h in first..first + n {
                assert!(handles.insert(h), "handle {h} given twice");
            }
        }
    }
    assert_eq!(handles.len(), REQS * (PER - 1));
    for req in 0..REQS {
        send(&mut w, "flow_mod_text", &text_of(req, "output:1"));
    }
    for _ in 0..REQS {
        let a = answer(&mut r);
        assert_eq!(a["result"]["done"], json!(PER - 1), "{a}");
    }
    w.write_all(b"{\"cmd\": \"flow_dump\"}\n").expect("write");
    let dump = answer(&mut r);
    let rules = dump["result"].as_array().expect("rules");
    assert_eq!(rules.len(), REQS * (PER - 1));
    assert!(
        rules.iter().all(|x| x.to_string().contains("output")),
        "a rule kept its old actions"
    );
}

/// A rules text sent after its request line (`text_bytes`, what the CLI sends): the exact
/// number of bytes is the text, newlines and all; the connection stays in step after a text
/// that is not UTF-8 or that came with a `text` too (both refused and counted, nothing
/// inserted); a request cut off inside its text is never run; too big a `text_bytes` closes
/// the connection.
#[test]
fn rules_text_after_the_request_line() {
    let _serial = one_at_a_time();
    let d = Daemon::start("attached");
    let (mut r, mut w) = d.raw();
    let text = "prio 1 dst_ip 10.0.0.0/8 action drop\n# c\n\nprio 2 dst_ip 10.1.0.0/16 action drop";
    let send = |w: &mut UnixStream, head: Value, body: &[u8]| {
        let mut bytes = head.to_string().into_bytes();
        bytes.push(b'\n');
        bytes.extend_from_slice(body);
        w.write_all(&bytes).expect("write");
    };
    send(
        &mut w,
        json!({"cmd": "flow_add_text", "text_bytes": text.len()}),
        text.as_bytes(),
    );
    let a = answer(&mut r);
    assert_eq!(a["result"]["rules"], json!(2), "{a}");
    assert_eq!(a["result"]["done"], json!(2), "{a}");
    assert_eq!(a["result"]["lines"], json!(4), "{a}");
    let before = CTL_BAD_REQUESTS.value();
    // Not UTF-8 on its second line: refused whole, naming the line.
    let bad = b"prio 3 action drop\n\xff\xfe\n";
    send(
        &mut w,
        json!({"cmd": "flow_add_text", "text_bytes": bad.len()}),
        bad,
    );
    let a = answer(&mut r);
    assert_eq!(a["ok"], json!(false), "{a}");
    assert!(a["error"].as_str().unwrap_or("").contains("line 2"), "{a}");
    // Both forms at once: refused, the attached bytes read (not taken for the next line).
    send(
        &mut w,
        json!({"cmd": "flow_add_text", "text": "prio 4 action drop", "text_bytes": 18}),
        b"prio 5 action drop",
    );
    let a = answer(&mut r);
    assert!(
        a["error"].as_str().unwrap_or("").contains("not both"),
        "{a}"
    );
    // A line refused for something else still has its text skipped, never read as requests
    // (here a `shutdown` inside it); a text request with no rules at all is refused.
    let inside = b"{\"cmd\":\"shutdown\"}\n";
    send(
        &mut w,
        json!({"cmd": "flow_add_text", "atomic": 1, "text_bytes": inside.len()}),
        inside,
    );
    let a = answer(&mut r);
    assert!(
        a["error"].as_str().unwrap_or("").starts_with("bad request"),
        "{a}"
    );
    send(&mut w, json!({"cmd": "flow_add_text"}), b"");
    let a = answer(&mut r);
    assert!(
        a["error"]
            .as_str()
            .unwrap_or("")
            .contains("missing the rules"),
        "{a}"
    );
    send(&mut w, json!({"cmd": "ping"}), b"");
    assert_eq!(answer(&mut r), json!({"ok": true, "result": "pong"}));
    assert_eq!(CTL_BAD_REQUESTS.value(), before + 4);
    // `text_bytes` where no stream follows (a request handled on its own): refused.
    let sw = Switch::start(SwitchConfig::default()).expect("switch starts");
    let stop = AtomicBool::new(false);
    let a = sluice_switch::control::answer_line(
        &sw,
        br#"{"cmd":"flow_del_text","text_bytes":3}"#,
        &stop,
    );
    assert!(
        a["error"].as_str().unwrap_or("").contains("text_bytes"),
        "{a}"
    );
    // The connection is in step: only the first two rules are in.
    send(&mut w, json!({"cmd": "flow_dump"}), b"");
    let dump = answer(&mut r);
    assert_eq!(dump["result"].as_array().map(Vec::len), Some(2), "{dump}");
    // Cut off inside its text, then the client goes away: counted, never run.
    let before = CTL_BAD_REQUESTS.value();
    {
        let (_r2, mut w2) = d.raw();
        send(
            &mut w2,
            json!({"cmd": "flow_add_text", "text_bytes": 100}),
            b"prio 9 action drop\n",
        );
    }
    wait_until(
        "the cut-off text to be counted",
        Duration::from_secs(10),
        || CTL_BAD_REQUESTS.value() > before,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    send(&mut w, json!({"cmd": "flow_dump"}), b"");
    let dump = answer(&mut r);
    assert_eq!(dump["result"].as_array().map(Vec::len), Some(2), "{dump}");
    // A refused line whose text length cannot be told: the connection closes.
    {
        let (mut r2, mut w2) = d.raw();
        send(&mut w2, json!({"cmd": "ping", "text_bytes": "12"}), b"");
        let a = answer(&mut r2);
        assert!(a["error"].as_str().unwrap_or("").contains("closing"), "{a}");
        let mut rest = String::new();
        assert_eq!(r2.read_line(&mut rest).expect("end of stream"), 0);
    }
    // More than MAX_LINE announced: refused and the connection closed.
    let max = sluice_switch::control::MAX_LINE;
    send(
        &mut w,
        json!({"cmd": "flow_add_text", "text_bytes": max + 1}),
        b"",
    );
    let a = answer(&mut r);
    assert!(
        a["error"].as_str().unwrap_or("").contains("MAX_LINE"),
        "{a}"
    );
    let mut rest = String::new();
    assert_eq!(r.read_line(&mut rest).expect("end of stream"), 0);
}

/// A reader that times out (as the server's socket does every 200 ms) before each byte it has
/// queued at those positions.
struct Stuttering {
    data: Vec<u8>,
    pos: usize,
    timeouts_at: Vec<usize>,
}

impl std::io::Read for Stuttering {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(i) = self.timeouts_at.iter().position(|&p| p == self.pos) {
            self.timeouts_at.remove(i);
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(1).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The idle hook (which lets the server give a quiet connection's buffers back) runs at a
/// read timeout before a request's first byte, and never at one inside a request.
#[test]
fn the_idle_hook_runs_only_between_requests() {
    use sluice_switch::control::{next_request_idle, Incoming};
    let data = b"{\"cmd\": \"flow_dump\"}\n{\"cmd\": \"flow_dump\"}\n".to_vec();
    let second = data.len() / 2;
    let mut r = std::io::BufReader::with_capacity(
        1,
        Stuttering {
            data,
            pos: 0,
            // Two before the first request, one inside it, one before the second.
            timeouts_at: vec![0, 0, 5, second],
        },
    );
    let stop = AtomicBool::new(false);
    let mut line = Vec::with_capacity(1 << 20);
    let mut idle = Vec::new();
    for _ in 0..2 {
        let got = next_request_idle(&mut r, &mut line, &stop, |l: &mut Vec<u8>| {
            idle.push(l.len());
            *l = Vec::new();
        })
        .expect("reads");
        assert!(matches!(got, Incoming::Request(_)), "{got:?}");
    }
    assert_eq!(
        idle,
        vec![0, 0, 0],
        "idle at each timeout between requests only"
    );
}
