//! How long a port feature change keeps a datapath thread from its packets: a switch with one
//! datapath thread and an `AF_PACKET` port on a veth end in a fresh namespace; `tso` is turned
//! off and on N times through [`Switch::set_features`] (what `sluice features set` does). For
//! each change: the request's wall-clock time, and the time the datapath thread spent in jobs
//! during it ([`ThreadStats::job_ns`]). Root only. Run with `bench/control/feature_job.sh [N]`.

use sluice_ports::netns::unique_suffix;
use sluice_ports::{Netns, VethPair};
use sluice_switch::{PortKind, PortRequest, Switch, SwitchConfig, ThreadStats};
use std::time::{Duration, Instant};

fn us(d: u64) -> f64 {
    d as f64 / 1000.0
}

fn summary(name: &str, mut v: Vec<u64>) {
    v.sort_unstable();
    let n = v.len().max(1);
    let at = |q: f64| v.get(((n - 1) as f64 * q) as usize).copied().unwrap_or(0);
    println!(
        "{name:<28} median {:>9.1} us   p90 {:>9.1} us   max {:>9.1} us",
        us(at(0.5)),
        us(at(0.9)),
        us(at(1.0))
    );
}

fn job_ns(sw: &Switch) -> (u64, u64) {
    let t: Vec<ThreadStats> = sw.thread_stats().expect("thread stats");
    t.iter()
        .fold((0, 0), |(j, ns), s| (j + s.jobs, ns + s.job_ns))
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40);
    let ns_a = Netns::create("slfja").expect("netns (root?)");
    let ns_b = Netns::create("slfjb").expect("netns");
    let va = format!("va{}", unique_suffix());
    let vb = format!("vb{}", unique_suffix());
    let _pair = VethPair::create(&ns_a, &va, &ns_b, &vb, 1500).expect("veth");
    let sw = Switch::start(SwitchConfig {
        threads: 1,
        poll_timeout: Duration::from_millis(10),
        ..SwitchConfig::default()
    })
    .expect("switch");
    let mut req = PortRequest::new(&va, PortKind::AfPacket);
    req.netns = Some(ns_a.name().to_string());
    sw.add_port(req).expect("afpacket port");
    let (mut request, mut held, mut jobs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let on = i % 2 == 1;
        let (j0, ns0) = job_ns(&sw);
        let t = Instant::now();
        sw.set_features(&va, &[("tso".to_string(), on)])
            .expect("tso change");
        request.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let (j1, ns1) = job_ns(&sw);
        // Includes the job that read the counters before the change (microseconds).
        held.push(ns1 - ns0);
        jobs.push(j1 - j0);
    }
    println!("{n} tso changes on an AF_PACKET port (veth), one datapath thread");
    summary("set_features request", request);
    summary("datapath thread held by jobs", held);
    jobs.sort_unstable();
    println!(
        "jobs per change (incl. 1 counter read): {}..{}",
        jobs.first().copied().unwrap_or(0),
        jobs.last().copied().unwrap_or(0)
    );
    sw.stop().expect("stop");
}
