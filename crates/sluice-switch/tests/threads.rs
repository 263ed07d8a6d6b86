//! Several datapath threads, as root: kernel TCP between two network namespaces through a
//! switch with two threads and two TAP ports (two queues each). Every byte is verified, both
//! threads must carry traffic, and the receiving kernel must queue no segment out of order.
//!
//! The tests run one at a time (a lock): two 2-core TCP transfers at once would only measure
//! each other.

use sluice_ports::netns::{run_command, unique_suffix, Netns, VethPair};
use sluice_switch::{PortKind, PortRequest, Switch, SwitchConfig, ThreadStats};
use sluice_testkit::traffic::{tcp_transfer, TransferReport};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const A_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const B_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// Two namespaces, each with a TAP port of a switch of `threads` threads in it, and rules
/// forwarding between the two.
struct Topo {
    // Field order is drop order: the switch (and its TAPs) go first.
    sw: Switch,
    a: Netns,
    b: Netns,
    ta: String,
    tb: String,
}

impl Topo {
    /// `a_tap`: a TAP the operator made (single queue) for side A, else the switch makes both.
    fn new(threads: usize, a_tap: Option<&str>) -> Topo {
        sluice_testkit::root();
        let u = unique_suffix();
        let (ta, tb) = match a_tap {
            Some(t) => (t.to_string(), format!("tb{u}")),
            None => (format!("ta{u}"), format!("tb{u}")),
        };
        let a = Netns::create("sl-thr-a").expect("namespace a");
        let b = Netns::create("sl-thr-b").expect("namespace b");
        let sw = Switch::start(SwitchConfig {
            threads,
            ..SwitchConfig::default()
        })
        .expect("switch");
        assert_eq!(sw.threads(), threads);
        for (tap, ns, addr) in [(&ta, &a, A_ADDR), (&tb, &b, B_ADDR)] {
            sw.add_port(PortRequest::new(tap, PortKind::Tap))
                .expect("TAP port");
            run_command("ip", &["link", "set", tap, "netns", ns.name()]).expect("move the TAP");
            ns.run(&["ip", "addr", "add", &format!("{addr}/24"), "dev", tap])
                .expect("address");
            ns.link_up(tap).expect("up");
            ns.disable_ipv6().expect("no IPv6 chatter");
        }
        Topo { sw, a, b, ta, tb }
    }

    /// Rules that forward between the two TAPs.
    fn direct(self) -> Topo {
        self.flows(&[
            format!("prio 10 in_port {} action output:{}", self.ta, self.tb),
            format!("prio 10 in_port {} action output:{}", self.tb, self.ta),
        ]);
        self
    }

    fn flows(&self, rules: &[String]) {
        let res = self.sw.add_flows(rules, true).expect("flows");
        assert!(res.iter().all(|r| r.error.is_none()), "{res:?}");
    }

    /// `flows` TCP transfers at once from A to B (ports 5300…), each verified byte by byte.
    fn tcp_flows(&self, flows: u16, secs: u64) -> Vec<TransferReport> {
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..flows)
                .map(|k| {
                    s.spawn(move || {
                        tcp_transfer(
                            &self.b,
                            IpAddr::V4(B_ADDR),
                            5300 + k,
                            &self.a,
                            Duration::from_secs(secs),
                        )
                        .expect("TCP transfer")
                    })
                })
                .collect();
            runs.into_iter()
                .map(|r| {
                    let r = r.join().expect("transfer thread");
                    assert!(r.verified, "TCP stream corrupted: {r:?}");
                    assert!(r.bytes > 100_000, "too little went through: {r:?}");
                    r
                })
                .collect()
        })
    }

    fn thread_stats(&self) -> Vec<ThreadStats> {
        self.sw.thread_stats().expect("thread stats")
    }
}

/// A kernel counter of namespace `ns`: `file` is `netstat` or `snmp` (under `/proc/net`),
/// `group` its line prefix (`TcpExt`, `Tcp`), `name` the column.
fn kernel_counter(ns: &Netns, file: &str, group: &str, name: &str) -> u64 {
    let text = ns
        .run(&["cat", &format!("/proc/net/{file}")])
        .expect("read /proc/net");
    let prefix = format!("{group}:");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&prefix)).collect();
    let (Some(names), Some(values)) = (lines.first(), lines.get(1)) else {
        panic!("no {group} lines in /proc/net/{file}: {text}");
    };
    let col = names
        .split_whitespace()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no {group} counter {name} in /proc/net/{file}"));
    values
        .split_whitespace()
        .nth(col)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{group} {name}: no value in /proc/net/{file}"))
}

fn ofo_queued(ns: &Netns) -> u64 {
    kernel_counter(ns, "netstat", "TcpExt", "TCPOFOQueue")
}

fn retransmitted(ns: &Netns) -> u64 {
    kernel_counter(ns, "snmp", "Tcp", "RetransSegs")
}

/// `after - before`, per thread.
fn moved(before: &[ThreadStats], after: &[ThreadStats]) -> Vec<u64> {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| a.rx_packets - b.rx_packets)
        .collect()
}

#[test]
fn two_threads_carry_four_flows_every_byte_and_in_order() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t = Topo::new(2, None).direct();
    in_order_on_both_threads(&t);
    let st = t.sw.stats().expect("stats");
    assert!(
        st.iter().all(|p| p.rx_invalid == 0 && p.tx_errors == 0),
        "{st:?}"
    );
    let total: u64 = t.thread_stats().iter().map(|s| s.rx_packets).sum();
    let by_port: u64 = st.iter().map(|p| p.rx_packets).sum();
    assert_eq!(total, by_port, "port counters are the threads' sums");
}

/// Rounds of 4 TCP flows from A to B, each verified. A round counts when the sender
/// retransmitted nothing: then every segment the receiver queued out of order was overtaken,
/// not lost. Each counted round must have none; passes once a counted round had both threads
/// carry traffic (the kernel spreads 4 flows over both queues 7 times in 8).
fn in_order_on_both_threads(t: &Topo) {
    let mut spread = false;
    let mut rounds = Vec::new();
    for _ in 0..6 {
        let (ofo, retrans, threads) = (ofo_queued(&t.b), retransmitted(&t.a), t.thread_stats());
        let reports = t.tcp_flows(4, 1);
        let ofo = ofo_queued(&t.b) - ofo;
        let retrans = retransmitted(&t.a) - retrans;
        let per_thread = moved(&threads, &t.thread_stats());
        let gbps: f64 = reports.iter().map(|r| r.gbps).sum();
        eprintln!("4 flows, 2 threads: {gbps:.2} Gbit/s, rx per thread {per_thread:?}, out of order {ofo}, retransmitted {retrans}");
        rounds.push((ofo, retrans, per_thread.clone()));
        if retrans != 0 {
            continue;
        }
        assert_eq!(
            ofo, 0,
            "segments queued out of order with no loss: {rounds:?}"
        );
        if per_thread.iter().all(|&n| n > 1000) {
            spread = true;
            break;
        }
    }
    assert!(
        spread,
        "no round without retransmissions in which both threads carried traffic (segments \
         that overtake others cause retransmissions too); (out of order, retransmitted, rx \
         per thread) by round: {rounds:?}"
    );
}

#[test]
fn two_threads_through_afpacket_fanout_with_software_gso_and_per_thread_gro() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t = Topo::new(2, None);
    let u = unique_suffix();
    let (hx, hy) = (format!("hx{u}"), format!("hy{u}"));
    let h = Netns::create("sl-thr-hop").expect("hop namespace");
    h.disable_ipv6().expect("no IPv6 chatter");
    let _veth = VethPair::create(&h, &hx, &h, &hy, 1500).expect("veth");
    for (name, gro) in [(&hx, false), (&hy, true)] {
        let mut r = PortRequest::new(name, PortKind::AfPacket);
        r.netns = Some(h.name().to_string());
        r.gro = gro;
        t.sw.add_port(r).expect("AF_PACKET port");
    }
    // Applied on both threads' sockets: both segment in software for hx.
    t.sw.set_features(&hx, &[("tso".into(), false)])
        .expect("TSO off on the veth");
    t.flows(&[
        format!("prio 10 in_port {} action output:{hx}", t.ta),
        format!("prio 10 in_port {hy} action output:{}", t.tb),
        format!("prio 10 in_port {} action output:{hy}", t.tb),
        format!("prio 10 in_port {hx} action output:{}", t.ta),
    ]);
    in_order_on_both_threads(&t);
    let st = t.sw.stats().expect("stats");
    let port = |n: &str| st.iter().find(|p| p.name == n).expect("port stats").clone();
    assert!(port(&hy).gro_merged_packets > 0, "GRO merged on hy: {st:?}");
    assert!(
        port(&hx).tx_errors == 0 && port(&hy).rx_invalid == 0,
        "{st:?}"
    );
    assert!(
        t.sw.features(&hx)
            .expect("features")
            .iter()
            .any(|f| f.name == "tx-tcp-segmentation" && !f.on),
        "TSO off"
    );
    // The switch (its sockets on the veth) goes before the veth and its namespace.
    drop(t);
}

#[test]
fn a_single_queue_tap_is_spread_over_the_threads_by_software_rss() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    sluice_testkit::root();
    // A persistent TAP made without multi_queue: the kernel refuses a second queue.
    let tap = format!("to{}", unique_suffix());
    run_command(
        "ip",
        &["tuntap", "add", "dev", &tap, "mode", "tap", "vnet_hdr"],
    )
    .expect("ip tuntap add");
    struct Del(String);
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = run_command("ip", &["link", "del", &self.0]);
        }
    }
    // Dropped after the topology: the TAP is back here if its namespace went first.
    let _del = Del(tap.clone());
    let t = Topo::new(2, Some(&tap)).direct();
    sluice_switch::register_counters();
    let handoffs = || sluice_coverage::value_by_name("sw_rss_handoffs").expect("counter");
    let before = handoffs();
    // Thread 0 reads every frame A sends and passes those of thread 1's flows on, in order.
    in_order_on_both_threads(&t);
    assert!(handoffs() > before, "frames passed to thread 1");
    assert_eq!(
        sluice_coverage::value_by_name("sw_rss_handoff_drops"),
        Ok(0),
        "no frame dropped at the hand-over"
    );
    // Flows started from B too: answers to the single-queue TAP leave from both threads.
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..4u16)
            .map(|k| {
                let t = &t;
                s.spawn(move || {
                    tcp_transfer(
                        &t.a,
                        IpAddr::V4(A_ADDR),
                        5400 + k,
                        &t.b,
                        Duration::from_millis(500),
                    )
                    .expect("TCP transfer B to A")
                })
            })
            .collect();
        for r in runs {
            let r = r.join().expect("transfer thread");
            assert!(r.verified && r.bytes > 100_000, "{r:?}");
        }
    });
    let info = t.sw.ports().expect("ports");
    assert!(info.iter().all(|p| p.state == "up"), "{info:?}");
}

/// The CPUs the kernel lets the thread named `name` of this process run on
/// (`Cpus_allowed_list` of its `/proc/self/task/*/status`), if there is one such thread.
fn cpus_of_thread(name: &str) -> Option<String> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|t| {
        let dir = t.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        (comm.trim_end() == name).then_some(())?;
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_string())
    })
}

/// `pin_threads`: datapath thread `i` runs on the `i`-th CPU the process may use, and only
/// there; with more threads than CPUs, none is pinned. (With one allowed CPU the first half
/// cannot tell a pinned thread from another; CI's machine has two.)
#[test]
fn pinned_datapath_threads_run_on_their_own_cpu_only() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let allowed = sluice_ports::sched::allowed_cpus().expect("affinity");
    let threads = allowed.len().min(2);
    let sw = Switch::start(SwitchConfig {
        threads,
        pin_threads: true,
        ..SwitchConfig::default()
    })
    .expect("switch");
    let want: Vec<Option<usize>> = allowed[..threads].iter().copied().map(Some).collect();
    assert_eq!(sw.pinned_cpus(), want);
    for (i, cpu) in allowed.iter().take(threads).enumerate() {
        let name = if threads == 1 {
            "sluice-datapath".to_string()
        } else {
            format!("sluice-dp{i}")
        };
        // The thread pins itself as it starts.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while cpus_of_thread(&name) != Some(cpu.to_string()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} runs on {:?}, not CPU {cpu}",
                cpus_of_thread(&name)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    drop(sw);

    let sw = Switch::start(SwitchConfig {
        threads: allowed.len() + 1,
        pin_threads: true,
        ..SwitchConfig::default()
    })
    .expect("switch");
    assert!(sw.pinned_cpus().iter().all(Option::is_none));
    // And the threads run wherever the process may: their affinity is the process's.
    let everywhere = cpus_of_thread("sluice-dp0").expect("thread 0");
    let mut own = String::new();
    for l in std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
    {
        if let Some(v) = l.strip_prefix("Cpus_allowed_list:") {
            own = v.trim().to_string();
        }
    }
    assert_eq!(everywhere, own);
}
