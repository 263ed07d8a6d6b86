//! `sluice run --threads N` and the configuration's `threads`, as root: the daemon opens one
//! queue of every TAP per datapath thread (the kernel shows them under
//! `/sys/class/net/TAP/queues`), the flag overrides the file, and an impossible count is refused.

mod daemon_common;

use std::path::PathBuf;
use std::process::{Child, Command};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn unique(tag: &str) -> String {
    format!("{tag}{}", std::process::id() % 100_000)
}

/// A daemon with one TAP port `tap` from its configuration `config` (JSON fields without the
/// braces), with extra `args` after `run`; killed when dropped.
struct Daemon {
    child: Child,
    files: Vec<PathBuf>,
}

impl Daemon {
    fn start(tap: &str, config: &str, args: &[&str]) -> Daemon {
        let dir = std::env::temp_dir();
        let sock = dir.join(format!("{}.sock", unique(&format!("sluice-thr-{tap}-"))));
        let cfg = dir.join(format!("{}.json", unique(&format!("sluice-thr-{tap}-"))));
        std::fs::write(
            &cfg,
            format!(r#"{{{config} "ports": [{{"name": "{tap}", "kind": "tap"}}]}}"#),
        )
        .expect("write config");
        let mut child = daemon_common::run_with_config(&mut sluice(), &sock, &cfg, args)
            .spawn()
            .expect("start the daemon");
        if let Err(said) = daemon_common::wait_listening(&mut child) {
            panic!("the daemon did not start listening: {said}");
        }
        Daemon {
            child,
            files: vec![sock, cfg],
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The receive queues the kernel shows for interface `name`.
fn rx_queues(name: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .expect("the TAP's queues in sysfs")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count()
}

#[test]
fn threads_from_the_flag_or_the_file_open_one_tap_queue_each() {
    sluice_testkit::root();
    let tap = unique("sthr");
    {
        let _d = Daemon::start(&tap, r#""threads": 3,"#, &[]);
        assert_eq!(rx_queues(&tap), 3, "three threads, three queues");
    }
    {
        let _d = Daemon::start(&tap, r#""threads": 3,"#, &["--threads", "1"]);
        assert_eq!(rx_queues(&tap), 1, "--threads 1 overrides the file");
    }
    {
        let _d = Daemon::start(&tap, "", &["--threads", "2"]);
        assert_eq!(rx_queues(&tap), 2);
    }
}

#[test]
fn impossible_thread_counts_are_refused() {
    for n in ["0", "257"] {
        let out = sluice()
            .args([
                "--socket",
                "/nonexistent/sluice.sock",
                "run",
                "--threads",
                n,
            ])
            .output()
            .expect("run sluice");
        assert!(!out.status.success(), "--threads {n} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("threads must be 1 to 256"), "{n}: {err}");
    }
}
