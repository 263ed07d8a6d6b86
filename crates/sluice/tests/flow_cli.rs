//! `sluice flow add --batch` and `sluice bench flows` as a user runs them.

use std::process::Command;

fn sluice(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

#[test]
fn flow_add_batch_reports_every_bad_line_with_its_token() {
    let path = std::env::temp_dir().join(format!("sluice-rules-{}.txt", std::process::id()));
    std::fs::write(
        &path,
        "prio 10 in_port tap0 vlan_ethtype 802.1ad vlan_id 100 cvlan_id 200 dst_ip 10.0.0.0/24 \
         ip_proto tcp dst_port 80 action pop_vlan,output:tap1\n\
         # a comment\n\
         \n\
         prio 5 dst_ip 10.0.0.0/33 action drop\n\
         prio 7 eth_type ipv4 ip_proto udp dst_port 53 action output:2\n\
         prio 7 eth_type ipv4 ip_proto udp dst_port 53 action output:2\n",
    )
    .expect("write rules");
    let out = sluice(&[
        "flow",
        "add",
        "--offline",
        "--batch",
        path.to_str().expect("utf-8"),
        "--ports",
        "tap0=1,tap1=2",
    ]);
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a rejected line makes the command fail"
    );
    assert!(
        stdout.contains("6 lines, 2 rules inserted, 2 errors"),
        "{stdout}"
    );
    // The parse error points at the offending token; the duplicate is the table's verdict.
    assert!(stderr.contains("line 4: column 15"), "{stderr}");
    assert!(stderr.contains("^^^^^^^^^^^"), "{stderr}");
    assert!(stderr.contains("line 6:"), "{stderr}");
}

#[test]
fn bench_flows_prints_json_on_the_last_line() {
    let out = sluice(&[
        "bench",
        "flows",
        "--rules",
        "5000",
        "--masks",
        "4",
        "--lookups",
        "20000",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("JSON on the last line");
    assert_eq!(v["rules"], 5000);
    assert_eq!(v["masks"], 4);
    assert!(v["insert_rules_per_sec"].as_f64().expect("rate") > 0.0);
    assert!(v["lookups_per_sec"].as_f64().expect("rate") > 0.0);
    assert_eq!(
        v["hit_rate"], 1.0,
        "every generated packet matches its rule"
    );
    assert!(v["bytes_per_rule"].is_number());
}

#[test]
fn bench_flows_rejects_bad_arguments() {
    let out = sluice(&["bench", "flows", "--masks", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--masks"));
}
