//! Root tests of `sluice demo`: the built binary runs the whole demo (namespaces, TAP ports,
//! real kernel TCP through the switch with offloads on and off, a Linux bridge) and its `--json`
//! line must be complete and consistent with what the switch did.

use serde_json::Value;
use std::process::Command;

/// Largest TCP payload of one MTU-sized (1500) IPv4 frame without options; with timestamps the
/// kernel sends 1448, so any count of data frames is at least bytes / 1460.
const MAX_MSS: u64 = 1460;

/// Runs `sluice demo ARGS --json` and returns the parsed last line of stdout.
fn demo(args: &[&str]) -> Value {
    sluice_testkit::root();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("demo")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "sluice demo {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last:?}\n{stdout}"));
    eprintln!("{stdout}");
    v
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{} is not a number in {v}", path.join(".")))
}

/// How much counter `name` moved in `run`; the demo lists every counter, so a name it does not
/// list is a mistake in the test, not a 0.
fn counter(v: &Value, run: &str, name: &str) -> u64 {
    v["counters"][run][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name:?} in the {run} run of {v}"))
}

/// With a hop, both directions across the veth pair add up: every frame one hop port sent was
/// received by the other or is in one of its drop counters.
fn check_hop_accounting(v: &Value) {
    let dirs = v["hop_frames"].as_array().expect("hop_frames");
    assert_eq!(dirs.len(), 2, "{v}");
    for d in dirs {
        let n = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("{k} in {d}"));
        assert!(n("sent") > 0, "{d}");
        assert_eq!(
            n("missing"),
            n("sent") - n("received").min(n("sent")),
            "{d}"
        );
        assert!(
            n("missing") <= n("counted_drops"),
            "frames lost uncounted: {d}"
        );
    }
}

/// What every demo run must show, whatever the hop.
fn check_common(v: &Value, hop: &str) {
    assert_eq!(v["hop"], hop, "{v}");
    if hop == "none" {
        assert_eq!(v["hop_frames"].as_array().map(Vec::len), Some(0), "{v}");
    } else {
        check_hop_accounting(v);
    }
    assert_eq!(v["bytes_verified"], true, "{v}");
    for run in ["offloads_on", "offloads_off"] {
        assert!(num(v, &[&format!("{run}_gbps")]) > 0.0, "{v}");
        assert_eq!(v["runs"][run]["verified"], true, "{v}");
        let bytes = num(v, &["runs", run, "bytes"]) as u64;
        assert_eq!(bytes, num(v, &["runs", run, "sent"]) as u64, "{v}");
        assert!(bytes > 0, "{v}");
        // The switch forwarded the traffic: frames in and out, none dropped for lack of a rule.
        assert!(counter(v, run, "dp_rx_packets") > 0, "{run}: {v}");
        assert!(counter(v, run, "dp_tx_frames") > 0, "{run}: {v}");
    }
    let on_bytes = num(v, &["runs", "offloads_on", "bytes"]) as u64;
    let off_bytes = num(v, &["runs", "offloads_off", "bytes"]) as u64;
    let off_rx = counter(v, "offloads_off", "dp_rx_packets");
    // Offloads on: the kernel hands the switch GSO super-frames and the egress TAP takes them
    // whole (hw_gso), so far fewer packets than MSS-sized segments go through transmit
    // preparation. (A hop whose veth cannot take a tagged or tunnelled GSO frame segments it in
    // software and GRO merges it again on the far side: the packets still leave as super-frames.)
    let on_tx = counter(v, "offloads_on", "tx_prepared");
    assert!(counter(v, "offloads_on", "hw_gso") > 0, "{v}");
    assert!(
        on_tx < on_bytes / MAX_MSS / 2,
        "offloads on: {on_tx} packets for {on_bytes} bytes is not super-frames: {v}"
    );
    // Offloads off: every data frame carries at most one MSS, and nothing is left to a device
    // to segment.
    assert!(
        off_rx >= off_bytes / MAX_MSS,
        "offloads off: {off_rx} frames cannot carry {off_bytes} bytes at MTU 1500: {v}"
    );
    assert_eq!(counter(v, "offloads_off", "hw_gso"), 0, "{v}");
    assert_eq!(counter(v, "offloads_off", "hw_csum"), 0, "{v}");
    // Software GRO was switched off with the rest.
    assert_eq!(counter(v, "offloads_off", "gro_frames_in"), 0, "{v}");
    for run in ["offloads_on", "offloads_off"] {
        for drop in [
            "dp_no_match_drops",
            "dp_action_errors",
            "dp_tx_prepare_drops",
            "dp_tx_errors",
        ] {
            assert_eq!(counter(v, run, drop), 0, "{run}: {drop} in {v}");
        }
    }
}

#[test]
fn demo_plain_with_bridge_comparison() {
    let v = demo(&["--seconds", "1"]);
    check_common(&v, "none");
    // `sluice run`'s default: one datapath thread per CPU, each pinned to its own CPU.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get().min(256));
    assert_eq!(num(&v, &["threads"]) as usize, cpus, "{v}");
    let pinned: Vec<Option<u64>> = v["pinned_cpus"]
        .as_array()
        .expect("pinned_cpus")
        .iter()
        .map(Value::as_u64)
        .collect();
    assert_eq!(pinned.len(), cpus, "{v}");
    let mut on: Vec<u64> = pinned.iter().flatten().copied().collect();
    on.sort_unstable();
    on.dedup();
    assert_eq!(on.len(), cpus, "every thread on a CPU of its own: {v}");
    assert!(num(&v, &["bridge_gbps"]) > 0.0, "{v}");
    assert_eq!(v["runs"]["bridge"]["verified"], true, "{v}");
}

#[test]
fn demo_qinq_hop() {
    let v = demo(&[
        "--seconds",
        "1",
        "--hop",
        "qinq",
        "--no-bridge",
        "--threads",
        "1",
    ]);
    assert_eq!(num(&v, &["threads"]), 1.0, "{v}");
    assert_eq!(v["pinned_cpus"].as_array().map(Vec::len), Some(1), "{v}");
    check_common(&v, "qinq");
    assert!(v["bridge_gbps"].is_null(), "{v}");
}

#[test]
fn demo_vxlan_hop() {
    check_udp_tunnel_hop("vxlan");
}

#[test]
fn demo_geneve_hop() {
    check_udp_tunnel_hop("geneve");
}

/// A UDP tunnel hop (`vxlan`, `geneve`): segmented in software, packed, split, merged.
fn check_udp_tunnel_hop(hop: &str) {
    let v = demo(&["--seconds", "1", "--hop", hop, "--no-bridge"]);
    check_common(&v, hop);
    // The hop's AF_PACKET ports take no tunnel GSO but do take UDP GSO: the segmented tunnel
    // datagrams leave packed as UDP-GSO frames (far fewer frames than segments), and the far
    // port splits every one it receives before GRO; none fails to split.
    let on = |name| counter(&v, "offloads_on", name);
    assert!(on("uso_packed") > 0, "{v}");
    assert!(on("uso_packed_frames") * 8 < on("soft_gso_segments"), "{v}");
    // A packed frame of one datagram is a plain one (nothing to split): every other arrives
    // and is split, and the datagrams add up to the segments.
    let single = on("uso_packed_frames") - on("dp_rx_uso_split");
    assert!(single * 4 < on("uso_packed_frames"), "{v}");
    assert_eq!(
        on("dp_rx_uso_datagrams") + single,
        on("soft_gso_segments"),
        "{v}"
    );
    assert_eq!(on("dp_rx_uso_split_drops"), 0, "{v}");
}

#[test]
fn demo_gre_hop() {
    let v = demo(&["--seconds", "1", "--hop", "gre", "--no-bridge"]);
    check_common(&v, "gre");
    // A packet socket has no GSO type for GRE and GRE is not UDP: the super-frames are
    // segmented in software and each segment crosses the veth on its own (nothing packed), then
    // the far port's GRO merges them again before the decapsulated frame leaves TAP B whole.
    let on = |name| counter(&v, "offloads_on", name);
    assert!(on("soft_gso") > 0, "{v}");
    assert!(on("soft_gso_segments") > on("soft_gso") * 8, "{v}");
    assert_eq!(on("uso_packed"), 0, "{v}");
    assert!(on("gro_merged_packets") > 0, "{v}");
    assert!(
        on("gro_merged_segments") > on("gro_merged_packets") * 8,
        "{v}"
    );
}

#[test]
fn demo_refuses_bad_arguments_cleanly() {
    for option in ["--seconds", "--threads"] {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["demo", option, "0"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{option} 0");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(option), "{err}");
    }
}
