//! End to end, as root: real kernel TCP and UDP between two network namespaces through the
//! switch, with TAP ports in the namespaces and, for the hop tests, a veth pair attached with
//! `AF_PACKET` in a third namespace. Every byte that arrives is checked against the sent stream.
//!
//! The tests run one at a time (a lock): they read the process-wide coverage counters, and two
//! 2-core TCP transfers at once would only measure each other.

use sluice_coverage::{deltas, lookup, snapshot, Sample};
use sluice_ports::netns::{unique_suffix, Netns, VethPair};
use sluice_switch::control::ControlServer;
use sluice_switch::{PortKind, PortRequest, Switch, SwitchConfig};
use sluice_testkit::traffic::{tcp_transfer, udp_transfer, TransferReport};
use sluice_testkit::wait_until;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const A_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const B_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

fn counters() -> Vec<Sample> {
    snapshot()
}

/// How much the counter `name` moved since `before`; a name no counter has fails the test.
fn delta(before: &[Sample], name: &str) -> u64 {
    lookup(&deltas(before, &snapshot()), name).unwrap_or_else(|e| panic!("{e}"))
}

/// Two namespaces, each with a TAP port of the switch in it (addressed, up), and optionally a
/// hop namespace with a veth pair whose ends are `AF_PACKET` ports.
struct Topo {
    // Field order is drop order: the switch (and its TAPs) go first.
    sw: Arc<Switch>,
    a: Netns,
    b: Netns,
    hop: Option<(Netns, VethPair)>,
    names: Names,
}

struct Names {
    ta: String,
    tb: String,
    hx: String,
    hy: String,
}

impl Topo {
    fn new(hop_mtu: Option<u32>) -> Topo {
        sluice_testkit::root();
        let u = unique_suffix();
        let names = Names {
            ta: format!("sa{u}"),
            tb: format!("sb{u}"),
            hx: format!("hx{u}"),
            hy: format!("hy{u}"),
        };
        let a = Netns::create("sl-e2e-a").expect("namespace a");
        let b = Netns::create("sl-e2e-b").expect("namespace b");
        let sw = Arc::new(Switch::start(SwitchConfig::default()).expect("switch"));
        for (tap, ns, addr) in [(&names.ta, &a, A_ADDR), (&names.tb, &b, B_ADDR)] {
            sw.add_port(PortRequest::new(tap, PortKind::Tap))
                .expect("TAP port");
            sluice_ports::netns::run_command("ip", &["link", "set", tap, "netns", ns.name()])
                .expect("move the TAP");
            ns.run(&["ip", "addr", "add", &format!("{addr}/24"), "dev", tap])
                .expect("address");
            ns.link_up(tap).expect("up");
            ns.disable_ipv6().expect("no IPv6 chatter");
        }
        let hop = hop_mtu.map(|mtu| {
            let h = Netns::create("sl-e2e-hop").expect("hop namespace");
            h.disable_ipv6().expect("no IPv6 chatter");
            let v = VethPair::create(&h, &names.hx, &h, &names.hy, mtu).expect("veth");
            (h, v)
        });
        Topo {
            sw,
            a,
            b,
            hop,
            names,
        }
    }

    fn hop_port(&self, name: &str, gro: bool) {
        let (h, _) = self.hop.as_ref().expect("a hop");
        let mut r = PortRequest::new(name, PortKind::AfPacket);
        r.netns = Some(h.name().to_string());
        r.gro = gro;
        self.sw.add_port(r).expect("AF_PACKET port");
    }

    fn flows(&self, rules: &[String]) {
        let res = self.sw.add_flows(rules, true).expect("flows");
        let errors: Vec<String> = res
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", rules[r.index])))
            .collect();
        assert!(errors.is_empty(), "rules refused: {errors:#?}");
    }

    fn tcp(&self, secs: u64) -> TransferReport {
        let r = tcp_transfer(
            &self.b,
            IpAddr::V4(B_ADDR),
            5201,
            &self.a,
            Duration::from_secs(secs),
        )
        .expect("TCP transfer");
        assert!(r.verified, "TCP stream corrupted: {r:?}");
        assert!(r.bytes > 1_000_000, "too little went through: {r:?}");
        r
    }

    fn udp(&self) {
        let r = udp_transfer(
            &self.b,
            IpAddr::V4(B_ADDR),
            5202,
            &self.a,
            Duration::from_millis(500),
            1200,
        )
        .expect("UDP transfer");
        assert!(r.verified, "UDP datagrams corrupted: {r:?}");
        // Unpaced UDP overruns the receiver: loss is expected, corruption is not.
        assert!(r.received >= 1000, "datagrams arrive: {r:?}");
    }
}

fn plain_rules(n: &Names) -> Vec<String> {
    vec![
        format!("prio 10 in_port {} action output:{}", n.ta, n.tb),
        format!("prio 10 in_port {} action output:{}", n.tb, n.ta),
    ]
}

#[test]
fn plain_tcp_and_udp_between_two_tap_ports() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t = Topo::new(None);
    t.flows(&plain_rules(&t.names));
    let before = counters();
    let r = t.tcp(1);
    t.udp();
    // Offloads on: the kernel hands TAP super-frames over and takes them back whole.
    assert!(
        delta(&before, "hw_gso") > 0,
        "GSO frames passed to the egress TAP"
    );
    assert_eq!(
        delta(&before, "soft_gso"),
        0,
        "no software segmentation between TAPs"
    );
    eprintln!("plain: {:.2} Gbit/s", r.gbps);
    let st = t.sw.stats().expect("stats");
    assert!(
        st.iter().all(|p| p.rx_invalid == 0 && p.tx_errors == 0),
        "{st:?}"
    );
}

#[test]
fn qinq_pushed_on_one_side_and_popped_on_the_other() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Two tags on a full-size frame: the hop's MTU admits the 8 bytes of tags.
    let t = Topo::new(Some(1508));
    let n = &t.names;
    t.hop_port(&n.hx, false);
    t.hop_port(&n.hy, false);
    t.flows(&[
        format!("prio 10 in_port {} action push_vlan:802.1q:200,push_vlan:802.1ad:100,output:{}", n.ta, n.hx),
        format!("prio 10 in_port {} vlan_ethtype 802.1ad vlan_id 100 cvlan_id 200 action pop_vlan,pop_vlan,output:{}", n.hy, n.tb),
        format!("prio 10 in_port {} action push_vlan:802.1q:200,push_vlan:802.1ad:100,output:{}", n.tb, n.hy),
        format!("prio 10 in_port {} vlan_ethtype 802.1ad vlan_id 100 cvlan_id 200 action pop_vlan,pop_vlan,output:{}", n.hx, n.ta),
    ]);
    let before = counters();
    let r = t.tcp(1);
    t.udp();
    eprintln!("qinq: {:.2} Gbit/s", r.gbps);
    // An AF_PACKET port takes TCP GSO under any number of tags (the kernel finishes what the
    // interface cannot): the double-tagged super-frames cross the hop whole.
    assert!(
        delta(&before, "hw_gso") > 0,
        "QinQ super-frames handed over whole"
    );
    assert_eq!(delta(&before, "soft_gso"), 0, "no software GSO for QinQ");
    let st = t.sw.stats().expect("stats");
    let hy = st.iter().find(|p| p.name == n.hy).expect("hy stats");
    assert!(hy.rx_packets > 0 && hy.rx_no_match == 0, "{hy:?}");
}

#[test]
fn vxlan_encap_and_decap_between_two_switch_ports() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t = Topo::new(Some(1550));
    let n = &t.names;
    t.hop_port(&n.hx, false);
    t.hop_port(&n.hy, false);
    t.flows(&[
        format!("prio 10 in_port {} action encap:vxlan:id=42:src=198.51.100.1:dst=198.51.100.2:csum,output:{}", n.ta, n.hx),
        format!("prio 10 in_port {} enc_key_id 42 action decap,output:{}", n.hy, n.tb),
        format!("prio 10 in_port {} action encap:vxlan:id=42:src=198.51.100.2:dst=198.51.100.1,output:{}", n.tb, n.hy),
        format!("prio 10 in_port {} enc_key_id 42 action decap,output:{}", n.hx, n.ta),
    ]);
    let before = counters();
    let r = t.tcp(1);
    t.udp();
    eprintln!("vxlan: {:.2} Gbit/s", r.gbps);
    // AF_PACKET cannot take tunnel GSO: software segments the VXLAN super-packets.
    assert!(
        delta(&before, "soft_gso") > 0,
        "tunnel GSO done in software and counted"
    );
}

#[test]
fn afpacket_port_without_tso_segments_in_software_and_gro_merges_on_receive() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t = Topo::new(Some(1500));
    let n = &t.names;
    t.hop_port(&n.hx, false);
    t.hop_port(&n.hy, true);
    t.sw.set_features(&n.hx, &[("tso".into(), false)])
        .expect("TSO off on the veth");
    let feats = t.sw.features(&n.hx).expect("features");
    assert!(feats
        .iter()
        .any(|f| f.name == "tx-tcp-segmentation" && !f.on));
    t.flows(&[
        format!("prio 10 in_port {} action output:{}", n.ta, n.hx),
        format!("prio 10 in_port {} action output:{}", n.hy, n.tb),
        format!("prio 10 in_port {} action output:{}", n.tb, n.hy),
        format!("prio 10 in_port {} action output:{}", n.hx, n.ta),
    ]);
    let before = counters();
    let r = t.tcp(1);
    eprintln!("tso-off + gro: {:.2} Gbit/s", r.gbps);
    assert!(
        delta(&before, "soft_gso") > 0,
        "software GSO for the TSO-less veth"
    );
    assert!(delta(&before, "soft_gso_segments") > 0);
    assert!(
        delta(&before, "gro_merged_segments") > 0,
        "GRO merged MTU frames on hy"
    );
    let st = t.sw.stats().expect("stats");
    let hy = st.iter().find(|p| p.name == n.hy).expect("hy");
    assert!(hy.gro_merged_packets > 0, "{hy:?}");
    // Switching GRO off at run time: traffic still flows, nothing more merges.
    t.sw.set_features(&n.hy, &[("rx-gro".into(), false)])
        .expect("GRO off");
    let merged =
        t.sw.stats()
            .expect("stats")
            .iter()
            .find(|p| p.name == n.hy)
            .map(|p| p.gro_merged_segments);
    t.tcp(1);
    let merged_after =
        t.sw.stats()
            .expect("stats")
            .iter()
            .find(|p| p.name == n.hy)
            .map(|p| p.gro_merged_segments);
    assert_eq!(merged, merged_after, "GRO off merges nothing");
}

#[test]
fn garbage_on_the_control_socket_and_malformed_frames_are_counted_and_forwarding_continues() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t = Topo::new(None);
    let n = &t.names;
    // TCP/UDP/ARP between the two; everything else from a is dropped by rule.
    t.flows(&[
        format!(
            "prio 20 in_port {} eth_type arp action output:{}",
            n.ta, n.tb
        ),
        format!(
            "prio 20 in_port {} eth_type ipv4 action output:{}",
            n.ta, n.tb
        ),
        format!("prio 10 in_port {} action drop", n.ta),
        format!("prio 10 in_port {} action output:{}", n.tb, n.ta),
    ]);

    // The control socket of this switch, fed garbage and cut-off requests.
    let path = std::env::temp_dir().join(format!("sluice-e2e-{}.sock", unique_suffix()));
    let server = ControlServer::bind(&path).expect("control socket");
    let stop = Arc::new(AtomicBool::new(false));
    let bad_before = sluice_switch::control::CTL_BAD_REQUESTS.value();
    /// Stops the control server when the scope's body ends, also by a panic: otherwise a
    /// failed assertion would leave the scope waiting for the server thread forever.
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    std::thread::scope(|scope| {
        let (sw, st) = (Arc::clone(&t.sw), Arc::clone(&stop));
        let srv = &server;
        scope.spawn(move || srv.run(&sw, &st).expect("control server"));
        let _stop_server = StopOnDrop(Arc::clone(&stop));
        let garbage: &[&[u8]] = &[
            b"\x00\x01\x02 not json\n",
            b"{\"cmd\": \"port_add\", \"name\": 7}\n",
            b"{\"cmd\": \"features_set\", \"port\": \"x\", \"set\": {\"tso\": \"maybe\"}}\n",
        ];
        let s = UnixStream::connect(&path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut w = s.try_clone().expect("clone");
        let mut r = BufReader::new(s);
        for g in garbage {
            w.write_all(g).expect("write");
            let mut line = String::new();
            r.read_line(&mut line).expect("an answer");
            assert!(line.contains("\"ok\":false"), "{line}");
        }
        // A bad rule is not a bad request: the batch answers with an error for that rule.
        w.write_all(b"{\"cmd\": \"flow_add\", \"rules\": [\"prio\"]}\n")
            .expect("write");
        let mut line = String::new();
        r.read_line(&mut line).expect("an answer");
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON answer");
        assert_eq!(v["ok"], true, "{line}");
        let err = v["result"][0]["error"].as_str().expect("a per-rule error");
        assert!(err.contains("`prio` needs a value"), "{line}");
        assert!(v["result"][0]["handle"].is_null(), "{line}");
        // A request cut off mid-way, then the client disappears.
        let mut cut = UnixStream::connect(&path).expect("connect");
        cut.write_all(b"{\"cmd\": \"port_del\", \"name\": \"")
            .expect("write");
        cut.write_all(n.ta.as_bytes()).expect("write");
        drop(cut);
        // The three garbage lines and the cut-off request; the bad rule is not a bad request.
        // (The tests of this binary run one at a time, so nothing else moves the counter.)
        wait_until(
            "the cut-off request to be counted",
            Duration::from_secs(10),
            || sluice_switch::control::CTL_BAD_REQUESTS.value() >= bad_before + 4,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        stop.store(true, Ordering::SeqCst);
    });
    drop(server);
    assert_eq!(
        sluice_switch::control::CTL_BAD_REQUESTS.value(),
        bad_before + 4,
        "refused requests are counted"
    );
    assert_eq!(
        t.sw.ports().expect("ports").len(),
        2,
        "the cut-off port_del did nothing"
    );

    let st0 = t.sw.stats().expect("stats");
    let a0 = st0.iter().find(|p| p.name == n.ta).expect("a").clone();
    // Inject garbage from inside namespace a through its TAP with a raw packet socket.
    let frames = garbage_frames();
    let count = frames.len() as u64;
    let ta = n.ta.clone();
    t.a.enter(move || {
        let sock = sluice_ports::PacketSocket::bind(&ta, &Default::default()).expect("raw socket");
        for f in &frames {
            let _ = sock.send(None, f);
        }
    })
    .expect("enter a");
    let rx_a = || {
        let st = t.sw.stats().expect("stats");
        st.iter().find(|p| p.name == n.ta).expect("a").rx_packets
    };
    wait_until(
        "the garbage frames to reach the switch",
        Duration::from_secs(10),
        || rx_a() - a0.rx_packets >= count,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let st1 = t.sw.stats().expect("stats");
    let a1 = st1.iter().find(|p| p.name == n.ta).expect("a");
    let rx = a1.rx_packets - a0.rx_packets;
    assert!(
        rx >= count,
        "every frame reached the switch: {rx} < {count}"
    );
    let dropped = a1.rx_dropped_by_rule - a0.rx_dropped_by_rule;
    let forwarded = st1.iter().find(|p| p.name == n.tb).expect("b").tx_packets
        - st0.iter().find(|p| p.name == n.tb).expect("b").tx_packets;
    assert_eq!(
        dropped + forwarded,
        rx,
        "every received frame is forwarded or counted as dropped"
    );
    assert!(dropped >= 3, "the non-IPv4 garbage is dropped by rule");
    // Forwarding still works, byte for byte.
    t.tcp(1);
}

/// Frames a buggy or hostile host might send: runts, wrong lengths, bad IHL, a TCP header cut
/// short, a bad checksum, an unknown EtherType, stacked tags with nothing inside.
fn garbage_frames() -> Vec<Vec<u8>> {
    let mac = [0x02, 0, 0, 0, 0, 0xbb, 0x02, 0, 0, 0, 0, 0xaa];
    let mut out = Vec::new();
    let eth = |et: [u8; 2], rest: &[u8]| {
        let mut f = mac.to_vec();
        f.extend_from_slice(&et);
        f.extend_from_slice(rest);
        if f.len() < 60 {
            f.resize(60, 0);
        }
        f
    };
    // IPv4 with IHL 3.
    out.push(eth(
        [0x08, 0x00],
        &[
            0x43, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ],
    ));
    // IPv4 total length larger than the frame.
    out.push(eth(
        [0x08, 0x00],
        &[
            0x45, 0, 0x05, 0xdc, 0, 0, 0, 0, 64, 6, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ],
    ));
    // TCP header cut short after 8 bytes.
    out.push(eth(
        [0x08, 0x00],
        &[
            0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 6, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2, 0x9c, 0x40,
            0x14, 0x51, 0, 0, 0, 1,
        ],
    ));
    // IPv6 with a payload length past the end.
    let mut v6 = vec![0x60, 0, 0, 0, 0xff, 0xff, 17, 64];
    v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    out.push(eth([0x86, 0xdd], &v6));
    // Three stacked tags and nothing inside.
    out.push(eth(
        [0x88, 0xa8],
        &[0, 100, 0x81, 0x00, 0, 200, 0x81, 0x00, 0, 3],
    ));
    // Unknown EtherType, random bytes.
    out.push(eth([0x12, 0x34], &[0xde, 0xad, 0xbe, 0xef]));
    // A VXLAN-looking UDP datagram whose inner frame is cut off.
    out.push(eth(
        [0x08, 0x00],
        &[
            0x45, 0, 0, 36, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2, 0xc0, 0, 0x12,
            0xb5, 0, 16, 0, 0, 0x08, 0, 0, 0, 0, 0, 42, 0,
        ],
    ));
    out
}
