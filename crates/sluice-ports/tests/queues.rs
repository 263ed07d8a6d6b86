//! Multi-queue ports against the running kernel (root only): a 2-queue TAP
//! ([`TapPort::open_queues`]) and a 2-socket `PACKET_FANOUT` group on a veth end
//! ([`AfPacketPort::open_queues`]) each receive several UDP flows from the kernel; the flows
//! must be spread over both queues and every frame of one flow must arrive on one queue. And a
//! multi-queue TAP sends a flow's frames to the queue that last wrote frames of that flow (the
//! kernel's automatic steering), so a thread that owns a queue gets the replies to what it wrote.

use sluice_datapath::buf::{BufPool, PacketBuf};
use sluice_datapath::port::Port;
use sluice_offload::features::Feature;
use sluice_offload::tx::DeviceWork;
use sluice_ports::netns::unique_suffix;
use sluice_ports::poll::wait_readable;
use sluice_ports::{AfPacketPort, AfPacketPortConfig, Netns, TapPort, TapPortConfig, VethPair};
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

fn root() {
    if let Err(e) = sluice_ports::require_root() {
        panic!("{e}");
    }
}

/// Flows sent in each test (UDP source ports `SPORT0..SPORT0 + FLOWS`).
const FLOWS: u16 = 32;
/// Datagrams per flow.
const PER_FLOW: usize = 8;
const SPORT0: u16 = 41000;
const DPORT: u16 = 9999;
const PEER_MAC: &str = "02:00:00:00:99:02";

/// Sends `PER_FLOW` datagrams of each of the `FLOWS` flows from `ns` (source 10.77.0.1) to
/// 10.77.0.2:`DPORT`, interleaved.
fn send_flows(ns: &Netns) {
    ns.enter(|| {
        let socks: Vec<UdpSocket> = (0..FLOWS)
            .map(|i| UdpSocket::bind(("10.77.0.1", SPORT0 + i)).unwrap())
            .collect();
        for round in 0..PER_FLOW {
            for s in &socks {
                s.send_to(&[round as u8; 200], ("10.77.0.2", DPORT))
                    .unwrap();
            }
        }
    })
    .unwrap();
}

/// Gives `ifname` in `ns` the sender's address 10.77.0.1/24 and a static neighbour entry for
/// 10.77.0.2 (no ARP: only the test's datagrams leave).
fn address_sender(ns: &Netns, ifname: &str) {
    ns.run(&["ip", "addr", "add", "10.77.0.1/24", "dev", ifname])
        .unwrap();
    let neigh = [
        "ip",
        "neigh",
        "add",
        "10.77.0.2",
        "lladdr",
        PEER_MAC,
        "dev",
        ifname,
    ];
    ns.run(&neigh).unwrap();
}

/// The UDP source port of a frame to `DPORT`, if it is one.
fn flow_of(b: &PacketBuf) -> Option<u16> {
    let f = b.frame();
    let layout = sluice_wire::parse(f).ok()?;
    let l4 = layout.outer.l4?;
    if layout.outer.l4_proto != Some(17) {
        return None;
    }
    let udp = f.get(l4..l4 + 4)?;
    let dport = u16::from_be_bytes([udp[2], udp[3]]);
    (dport == DPORT).then(|| u16::from_be_bytes([udp[0], udp[1]]))
}

/// Receives on every queue until every datagram of every flow arrived (or 10 s passed); returns,
/// per flow, how many datagrams each queue got.
fn collect<P: Port>(queues: &mut [P]) -> BTreeMap<u16, Vec<usize>> {
    let mut pool = BufPool::new(4096, 64);
    let mut per_flow: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    let want = usize::from(FLOWS) * PER_FLOW;
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    let fds: Vec<_> = queues.iter().map(|q| q.fd().unwrap()).collect();
    while got < want && Instant::now() < deadline {
        wait_readable(&fds, Duration::from_millis(50)).unwrap();
        for (qi, q) in queues.iter_mut().enumerate() {
            let mut bufs = Vec::new();
            q.recv(&mut pool, &mut bufs, 64).unwrap();
            for b in bufs {
                if let Some(sport) = flow_of(&b) {
                    per_flow.entry(sport).or_insert_with(|| vec![0; fds.len()])[qi] += 1;
                    got += 1;
                }
                pool.put(b);
            }
        }
    }
    assert_eq!(got, want, "datagrams received: {per_flow:?}");
    per_flow
}

/// Every flow on exactly one queue; every queue with at least one flow.
fn assert_spread_and_pinned(per_flow: &BTreeMap<u16, Vec<usize>>, queues: usize) {
    assert_eq!(per_flow.len(), usize::from(FLOWS));
    let mut flows_per_queue = vec![0; queues];
    for (sport, counts) in per_flow {
        let used: Vec<usize> = (0..queues).filter(|&q| counts[q] > 0).collect();
        assert_eq!(used.len(), 1, "flow {sport} arrived on queues {counts:?}");
        assert_eq!(counts[used[0]], PER_FLOW);
        flows_per_queue[used[0]] += 1;
    }
    // With 32 flows hashed over 2 queues, one queue is empty with probability 2^-31.
    assert!(
        flows_per_queue.iter().all(|&n| n > 0),
        "flows per queue: {flows_per_queue:?}"
    );
}

#[test]
fn two_queue_tap_spreads_flows_and_keeps_each_on_one_queue() {
    root();
    let ns = Netns::create("slpmqt").unwrap();
    let name = format!("smq{}", unique_suffix());
    let cfg = TapPortConfig::default();
    let mut queues = ns
        .enter(|| TapPort::open_queues(&name, &cfg, 2))
        .unwrap()
        .unwrap();
    assert_eq!(queues.len(), 2);
    assert_eq!(queues[0].ifname(), queues[1].ifname());
    assert_ne!(queues[0].fd(), queues[1].fd());
    // Both queues negotiated the same offloads and present the same device.
    assert_eq!(queues[0].offloads(), queues[1].offloads());
    assert_eq!(queues[0].device(), queues[1].device());
    let tap = queues[0].ifname().to_string();
    address_sender(&ns, &tap);
    ns.link_up(&tap).unwrap();
    ns.wait_link_ready(&tap, Duration::from_secs(5)).unwrap();
    send_flows(&ns);
    let per_flow = collect(&mut queues);
    assert_spread_and_pinned(&per_flow, 2);
    // One control side for the interface: a change through the first queue's shows on the
    // second's (offloads belong to the interface).
    let control = queues[0].control().expect("control");
    let state = control.set_feature(Feature::Tso, false).unwrap();
    queues[1].apply_state(&state).unwrap();
    assert!(!queues[1].device().features.has(Feature::Tso));
    assert_eq!(queues[1].offloads() & sluice_ports::tap::TUN_F_TSO4, 0);
}

#[test]
fn one_queue_is_the_plain_port() {
    root();
    let ns = Netns::create("slpmq1").unwrap();
    let name = format!("smo{}", unique_suffix());
    let cfg = TapPortConfig::default();
    let queues = ns
        .enter(|| TapPort::open_queues(&name, &cfg, 1))
        .unwrap()
        .unwrap();
    assert_eq!(queues.len(), 1);
    // Not multi-queue: a second attach to the same name is refused by the kernel.
    let again = ns.enter(|| TapPort::open(&name, &cfg)).unwrap();
    assert!(again.is_err(), "a single-queue TAP took a second queue");
    let veth_ns = Netns::create("slpmq1v").unwrap();
    let (a, b) = (
        format!("qa{}", unique_suffix()),
        format!("qb{}", unique_suffix()),
    );
    let _veth = VethPair::create(&veth_ns, &a, &veth_ns, &b, 1500).unwrap();
    let ports = veth_ns
        .enter(|| AfPacketPort::open_queues(&b, &AfPacketPortConfig::default(), 1))
        .unwrap()
        .unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].fanout_group(), None);
}

#[test]
fn afpacket_fanout_spreads_flows_and_keeps_each_on_one_socket() {
    root();
    let ns_tx = Netns::create("slpfot").unwrap();
    let ns_rx = Netns::create("slpfor").unwrap();
    let (a, b) = (
        format!("fa{}", unique_suffix()),
        format!("fb{}", unique_suffix()),
    );
    let _veth = VethPair::create(&ns_tx, &a, &ns_rx, &b, 1500).unwrap();
    // The receiving end has no address: the frames (to a made-up MAC) reach only the sockets.
    address_sender(&ns_tx, &a);
    let mut ports = ns_rx
        .enter(|| AfPacketPort::open_queues(&b, &AfPacketPortConfig::default(), 2))
        .unwrap()
        .unwrap();
    assert_eq!(ports.len(), 2);
    let group = ports[0].fanout_group();
    assert!(group.is_some());
    assert_eq!(ports[1].fanout_group(), group);
    // A second group on the same interface gets another id.
    let other = ns_rx
        .enter(|| AfPacketPort::open_queues(&b, &AfPacketPortConfig::default(), 2))
        .unwrap()
        .unwrap();
    assert_ne!(other[0].fanout_group(), group);
    drop(other);
    send_flows(&ns_tx);
    let per_flow = collect(&mut ports);
    assert_spread_and_pinned(&per_flow, 2);
}

/// Ethernet / IPv4 10.77.0.2:`sport` → 10.77.0.1:`dport` / TCP SYN, the TCP checksum left partial
/// (pseudo-header sum in the field) for a `NEEDS_CSUM` vnet header.
fn syn_frame(dst_mac: [u8; 6], sport: u16, dport: u16) -> Vec<u8> {
    let (src_ip, dst_ip) = ([10, 77, 0, 2], [10, 77, 0, 1]);
    let mut f = dst_mac.to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0x99, 0x02, 0x08, 0x00]);
    let mut ip = vec![0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&src_ip);
    ip.extend_from_slice(&dst_ip);
    let c = sluice_checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&dport.to_be_bytes());
    tcp[4..8].copy_from_slice(&1000u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x02; // SYN
    tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
    let pseudo = sluice_checksum::pseudo::ipv4(src_ip, dst_ip, 6, 20);
    tcp[16..18].copy_from_slice(&pseudo.to_be_bytes());
    f.extend_from_slice(&tcp);
    f
}

/// The TCP destination port of a frame with the RST flag, if it is one.
fn rst_to(b: &PacketBuf) -> Option<u16> {
    let f = b.frame();
    let layout = sluice_wire::parse(f).ok()?;
    if layout.outer.l4_proto != Some(6) {
        return None;
    }
    let tcp = f.get(layout.outer.l4?..)?;
    let flags = *tcp.get(13)?;
    (flags & 0x04 != 0).then(|| u16::from_be_bytes([tcp[2], tcp[3]]))
}

#[test]
fn multi_queue_tap_answers_a_flow_on_the_queue_that_wrote_it() {
    root();
    let ns = Netns::create("slpmqs").unwrap();
    let name = format!("smr{}", unique_suffix());
    let mut queues = ns
        .enter(|| TapPort::open_queues(&name, &TapPortConfig::default(), 2))
        .unwrap()
        .unwrap();
    let tap = queues[0].ifname().to_string();
    address_sender(&ns, &tap);
    ns.link_up(&tap).unwrap();
    ns.wait_link_ready(&tap, Duration::from_secs(5)).unwrap();
    let mac_text = ns
        .run(&["cat", &format!("/sys/class/net/{tap}/address")])
        .unwrap();
    let mut mac = [0u8; 6];
    for (m, hex) in mac.iter_mut().zip(mac_text.trim().split(':')) {
        *m = u8::from_str_radix(hex, 16).unwrap();
    }
    // Flow i's SYNs (to a closed port: the kernel answers each with a RST of the same flow) are
    // written into queue i % 2, whatever queue the flow's hash would pick. The kernel records
    // the writing queue only after it has processed the frame, so the answer to a flow's first
    // frame goes by the hash; from the second on, to the writing queue.
    let work = DeviceWork {
        l4_csum: Some((34, 16)),
        ..DeviceWork::default()
    };
    let mut rounds = Vec::new();
    for _ in 0..2 {
        for i in 0..FLOWS {
            let q = usize::from(i % 2);
            queues[q]
                .send(&syn_frame(mac, SPORT0 + i, DPORT), &work)
                .unwrap();
        }
        rounds.push(collect_rsts(&mut queues));
    }
    let writer = |port: u16| usize::from((port - SPORT0) % 2);
    let off_writer = |arrived: &BTreeMap<u16, usize>| {
        arrived
            .iter()
            .filter(|&(&port, &q)| q != writer(port))
            .count()
    };
    // First answers by hash: some land on the other queue (all 32 on the writer's by chance:
    // probability 2^-32) …
    assert!(off_writer(&rounds[0]) > 0, "first answers: {:?}", rounds[0]);
    // … the second answers all on the queue that wrote the flow.
    assert_eq!(off_writer(&rounds[1]), 0, "second answers: {:?}", rounds[1]);
}

/// Receives on both queues until a RST of each of the `FLOWS` flows arrived (or 10 s passed);
/// returns the queue each arrived on.
fn collect_rsts(queues: &mut [TapPort]) -> BTreeMap<u16, usize> {
    let mut pool = BufPool::new(4096, 64);
    let mut arrived = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let fds: Vec<_> = queues.iter().map(|q| q.fd().unwrap()).collect();
    while arrived.len() < usize::from(FLOWS) && Instant::now() < deadline {
        wait_readable(&fds, Duration::from_millis(50)).unwrap();
        for (qi, q) in queues.iter_mut().enumerate() {
            let mut bufs = Vec::new();
            q.recv(&mut pool, &mut bufs, 64).unwrap();
            for b in bufs {
                if let Some(port) = rst_to(&b) {
                    assert!(arrived.insert(port, qi).is_none(), "two RSTs for {port}");
                }
                pool.put(b);
            }
        }
    }
    assert_eq!(arrived.len(), usize::from(FLOWS), "RSTs: {arrived:?}");
    arrived
}
