//! Rule files through a running daemon (`sluice flow add|del --batch FILE`, and the library's
//! `Client::add_rules`): every good rule goes in, every bad line is reported with its line
//! number and the offending token marked, `flow dump` lists what went in, and deletion by
//! batch takes them out. A file of more than one request's rules checks that line numbers
//! stay right across requests.

mod daemon_common;

use sluice_switch::control::Client;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn run(sock: &Path, args: &[&str]) -> Output {
    sluice()
        .arg("--socket")
        .arg(sock)
        .args(args)
        .output()
        .expect("run sluice")
}

/// The daemon, killed when the test ends.
struct Daemon {
    child: Child,
    sock: PathBuf,
}

impl Daemon {
    fn start(tag: &str) -> Daemon {
        let sock = std::env::temp_dir().join(format!(
            "sluice-flow-batch-{tag}-{}.sock",
            std::process::id()
        ));
        let mut child = sluice()
            .arg("--socket")
            .arg(&sock)
            .args(["run", "--no-db", "--threads", "1"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the daemon");
        if let Err(said) = daemon_common::wait_listening(&mut child) {
            panic!("the daemon did not start listening: {said}");
        }
        Daemon { child, sock }
    }

    fn dump(&self) -> Vec<String> {
        let out = run(&self.sock, &["flow", "dump"]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Killed, the daemon cannot remove its socket.
        let _ = std::fs::remove_file(&self.sock);
    }
}

fn rule(i: usize) -> String {
    format!(
        "prio {} eth_type ipv4 dst_ip 10.{}.{}.0/24 ip_proto tcp dst_port {} action output:1",
        i % 1000,
        (i >> 16) & 255,
        (i >> 8) & 255,
        i & 255
    )
}

/// A file of `n` lines: rules, with a comment and a blank line, and the given bad lines
/// (1-based line → text).
fn rules_file(n: usize, bad: &[(usize, &str)]) -> String {
    let mut s = String::new();
    for line in 1..=n {
        if let Some((_, b)) = bad.iter().find(|(l, _)| *l == line) {
            s.push_str(b);
        } else if line == 2 {
            s.push_str("# a comment");
        } else if line == 3 {
            s.push_str("   ");
        } else {
            s.push_str(&rule(line));
        }
        s.push('\n');
    }
    s
}

#[test]
fn a_file_with_bad_lines_inserts_the_good_ones_and_reports_each_bad_one() {
    let d = Daemon::start("mixed");
    let bad: [(usize, &str, &str); 5] = [
        (17, "prio 5 dst_ipp 10.0.0.1 action drop", "dst_ipp"),
        (250, "prio 5 dst_ip 10.0.0.0/33 action drop", "10.0.0.0/33"),
        (
            500,
            "prio 5 eth_type ipv4 dst_ip 10.0.1.0/24 action output:nowhere",
            "output:nowhere",
        ),
        (999, "prio 70000x action drop", "70000x"),
        // A duplicate of line 10 (same match and priority): refused by the table.
        (1000, &rule(10), ""),
    ];
    let text = rules_file(
        1000,
        &bad.iter().map(|(l, t, _)| (*l, *t)).collect::<Vec<_>>(),
    );
    let file = std::env::temp_dir().join(format!("sluice-flow-batch-{}.rules", std::process::id()));
    std::fs::write(&file, &text).unwrap();
    let out = run(&d.sock, &["flow", "add", "--batch", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "bad lines must fail the command");
    // 1000 lines, two of them not rules; five bad.
    assert!(
        stdout.contains("998 rules, 993 inserted, 5 errors"),
        "{stdout}\n{stderr}"
    );
    let name = file.display().to_string();
    for (line, text, token) in &bad {
        let at = format!("{name}:{line}: ");
        let pos = stderr
            .find(&at)
            .unwrap_or_else(|| panic!("line {line} not reported:\n{stderr}"));
        let report: Vec<&str> = stderr[pos + at.len()..].lines().take(2).collect();
        if token.is_empty() {
            assert!(
                report[0].contains("duplicate of the rule with handle 8"),
                "{report:?}"
            );
            continue;
        }
        // The line, then a caret marker under the offending token.
        assert_eq!(report[0], *text);
        let col = text.find(token).unwrap();
        let marker = report[1];
        assert_eq!(marker.find('^'), Some(col), "{report:?}");
        assert!(
            marker[col..].starts_with(&"^".repeat(token.len())),
            "{report:?}"
        );
    }
    assert_eq!(stderr.matches(&format!("{name}:")).count(), 5, "{stderr}");
    let dump = d.dump();
    assert_eq!(dump.len(), 993);
    // Every good line is there, with handles in file order.
    assert!(
        dump[0].starts_with("handle 1: prio 1 ") && dump[0].contains("dst_port 1 "),
        "{}",
        dump[0]
    );
    assert!(
        dump[1].starts_with("handle 2: prio 4 ") && dump[1].contains("dst_port 4 "),
        "{}",
        dump[1]
    );

    // Deletion by batch: the same file deletes what went in (the bad lines fail again).
    let out = run(&d.sock, &["flow", "del", "--batch", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("993 deleted"), "{stdout}");
    assert!(d.dump().is_empty());
    let _ = std::fs::remove_file(&file);
}

#[test]
fn big_file_line_numbers_span_requests_and_library_api_agrees() {
    let d = Daemon::start("big");
    // More rule lines than one request carries (MAX_BATCH = 100 000).
    let n = 120_000;
    let text = rules_file(n, &[(110_001, "prio 1 dst_ip 10.0.0.0/8 action bogus")]);
    let file = std::env::temp_dir().join(format!("sluice-flow-big-{}.rules", std::process::id()));
    std::fs::write(&file, &text).unwrap();
    let out = run(&d.sock, &["flow", "add", "--batch", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}:110001: ", file.display())),
        "{stderr}"
    );
    assert!(stderr.contains("bogus"), "{stderr}");
    assert_eq!(d.dump().len(), n - 3);

    // Deletion by handle, as a batch.
    let handles: String = (1..=60_000).map(|h| format!("handle {h}\n")).collect();
    std::fs::write(&file, &handles).unwrap();
    let out = run(&d.sock, &["flow", "del", "--batch", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(d.dump().len(), n - 3 - 60_000);

    // The library: one result per rule line, index = 0-based line number.
    let mut c = Client::connect(&d.sock).unwrap();
    let lib = "# lib\nprio 9 dst_ip 192.168.0.0/16 action drop\nprio 9 dst_ip 192.168.0.0/16 action drop\nprio 9 src_ip nope action drop\n";
    let res = c.add_rules(lib).unwrap();
    assert_eq!(res.len(), 3);
    assert_eq!((res[0].index, res[0].error.as_deref()), (1, None));
    let h = res[0].handle.expect("a handle");
    assert_eq!(h, (n - 3) as u64 + 1);
    assert_eq!(res[1].index, 2);
    assert!(res[1]
        .error
        .as_deref()
        .unwrap()
        .contains(&format!("handle {h}")));
    assert_eq!(res[2].index, 3);
    assert!(res[2].error.as_deref().unwrap().contains("^^^^"), "{res:?}");
    let del = c.del_rules(&format!("handle {h}\nhandle 1\n")).unwrap();
    assert_eq!(del[0].error, None);
    assert!(del[1]
        .error
        .as_deref()
        .unwrap()
        .contains("no rule with handle 1"));
    assert_eq!(d.dump().len(), n - 3 - 60_000);
    let _ = std::fs::remove_file(&file);
}

/// `sluice flow mod --batch FILE` replaces actions in place: the rules named by match and
/// priority keep their handles and places in the dump and get the new actions; a line whose
/// match and priority no rule has, and a line that does not parse, are reported with their line
/// numbers while the others are applied; the library's `Client::mod_rules` agrees.
#[test]
fn a_mod_file_replaces_actions_in_place_and_reports_each_bad_line() {
    let d = Daemon::start("mod");
    // Fewer than 256 lines: a rule's dst_port is its line number.
    let n = 250;
    let file = std::env::temp_dir().join(format!("sluice-flow-mod-{}.rules", std::process::id()));
    std::fs::write(&file, rules_file(n, &[])).unwrap();
    let out = run(&d.sock, &["flow", "add", "--batch", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let before = d.dump();
    assert_eq!(before.len(), n - 2);

    // Every even rule line gets output:2; line 7 names no rule; line 9 does not parse.
    let mut text = String::new();
    for line in 1..=n {
        if line == 7 {
            text.push_str("prio 5 eth_type ipv4 dst_ip 10.200.0.0/24 action output:2\n");
        } else if line == 9 {
            text.push_str("prio 5 dst_ip 10.0.0.0/8 action bogus\n");
        } else if line.is_multiple_of(2) && line > 3 {
            text.push_str(&rule(line).replace("output:1", "output:2"));
            text.push('\n');
        } else {
            text.push_str("# unchanged\n");
        }
    }
    std::fs::write(&file, &text).unwrap();
    let out = run(&d.sock, &["flow", "mod", "--batch", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "bad lines must fail the command");
    let even = (4..=n).step_by(2).count();
    assert!(
        stdout.contains(&format!("{} rules, {even} modified, 2 errors", even + 2)),
        "{stdout}\n{stderr}"
    );
    let name = file.display().to_string();
    assert!(
        stderr.contains(&format!("{name}:7: no rule with this match and priority")),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{name}:9: ")), "{stderr}");
    assert!(stderr.contains("bogus"), "{stderr}");
    let after = d.dump();
    assert_eq!(after.len(), before.len());
    for (b, a) in before.iter().zip(&after) {
        // Same handle, same match and priority; the counters stay too.
        let (hb, hb_rest) = b.split_once(": ").unwrap();
        let (ha, ha_rest) = a.split_once(": ").unwrap();
        assert_eq!(hb, ha);
        let port: usize = hb_rest
            .split("dst_port ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap();
        assert_eq!(
            ha_rest.contains("output:2"),
            port.is_multiple_of(2) && port >= 4,
            "{b}\n{a}"
        );
        assert_eq!(
            ha_rest.replace("output:2", "output:1"),
            hb_rest.replace("output:2", "output:1")
        );
    }

    // The library: one result per rule line; the handle is the modified rule's.
    let mut c = Client::connect(&d.sock).unwrap();
    let res = c
        .mod_rules(&format!("{}\n", rule(5).replace("output:1", "drop")))
        .unwrap();
    assert_eq!(res.len(), 1);
    assert_eq!((res[0].index, res[0].error.as_deref()), (0, None));
    let h = res[0].handle.expect("a handle");
    let line = d
        .dump()
        .into_iter()
        .find(|l| l.starts_with(&format!("handle {h}: ")))
        .unwrap();
    assert!(
        line.contains("dst_port 5 ") && line.contains("drop"),
        "{line}"
    );
    let _ = std::fs::remove_file(&file);
}

/// `sluice flow dump | head -1`: the reader goes away after one line; the CLI stops quietly
/// (exit 0, nothing on stderr) instead of panicking on the closed pipe.
#[test]
fn flow_dump_into_a_closed_pipe_stops_quietly() {
    let d = Daemon::start("pipe");
    let file = std::env::temp_dir().join(format!("sluice-flow-pipe-{}.rules", std::process::id()));
    // Far more output than a pipe buffers (64 KiB).
    std::fs::write(&file, rules_file(20_000, &[])).unwrap();
    let out = run(&d.sock, &["flow", "add", "--batch", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let mut child = sluice()
        .arg("--socket")
        .arg(&d.sock)
        .args(["flow", "dump"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flow dump");
    let mut first = [0u8; 16];
    let mut stdout = child.stdout.take().expect("stdout");
    std::io::Read::read_exact(&mut stdout, &mut first).expect("the dump starts");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?} {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let _ = std::fs::remove_file(&file);
}

/// The file is read as it is sent: the rules before a line that is not UTF-8 go in, and the
/// line is named (with the arguments before it counted apart); a missing file is named too.
#[test]
fn a_line_that_is_not_utf8_is_named_and_the_rules_before_it_stay() {
    let d = Daemon::start("utf8");
    let path = std::env::temp_dir().join(format!("sluice-utf8-{}.rules", std::process::id()));
    let mut bytes = rules_file(20_000, &[]).into_bytes();
    bytes.extend_from_slice(b"prio 1 dst_ip 10.0.0.1 action drop # caf\xe9\n");
    bytes.extend_from_slice(rule(20_002).as_bytes());
    std::fs::write(&path, &bytes).expect("write the file");
    let p = path.to_str().expect("utf-8 path");
    let extra = rule(30_000);
    let out = run(&d.sock, &["flow", "add", &extra, "--batch", p]);
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{p}:20001: not valid UTF-8")),
        "stderr: {err}"
    );
    // The argument and the file's 19,998 rules (20,000 lines, a comment and a blank one)
    // went in before it.
    assert_eq!(d.dump().len(), 1 + 19_998);
    let missing = run(&d.sock, &["flow", "add", "--batch", "/nonexistent/rules"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot read /nonexistent/rules"),
        "{missing:?}"
    );
}
