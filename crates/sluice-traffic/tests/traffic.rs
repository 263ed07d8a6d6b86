//! Root tests of the built-in traffic generator on its own: two namespaces joined by a veth pair
//! (no switch), real kernel TCP and UDP.

use sluice_ports::netns::unique_suffix;
use sluice_ports::{require_root, Netns, VethPair};
use sluice_traffic::{
    tcp_transfer, tcp_transfer_with, udp_transfer, TransferOptions, UDP_MAX_DATAGRAM,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// Two namespaces joined by a veth pair, `A` in the first, `B` in the second. Field order drops
/// the pair before the namespaces.
struct Pair {
    veth: VethPair,
    a: Netns,
    b: Netns,
}

fn pair() -> Pair {
    require_root().unwrap();
    let a = Netns::create("sluice-trafa").unwrap();
    let b = Netns::create("sluice-trafb").unwrap();
    let s = unique_suffix();
    let (va, vb) = (format!("tra{s}"), format!("trb{s}"));
    let veth = VethPair::create(&a, &va, &b, &vb, 1500).unwrap();
    a.run(&["ip", "addr", "add", "192.0.2.1/24", "dev", &va])
        .unwrap();
    b.run(&["ip", "addr", "add", "192.0.2.2/24", "dev", &vb])
        .unwrap();
    a.link_up("lo").unwrap();
    b.link_up("lo").unwrap();
    Pair { veth, a, b }
}

#[test]
fn tcp_over_veth_verifies_every_byte() {
    let p = pair();
    let r = tcp_transfer(&p.b, IpAddr::V4(B), 5201, &p.a, Duration::from_secs(1)).unwrap();
    eprintln!("tcp over veth: {r:?}");
    assert!(r.verified, "{r:?}");
    assert_eq!(r.mismatch_at, None);
    assert_eq!(r.bytes, r.sent);
    // A veth moves far more than 10 MB in a second, even on a busy machine.
    assert!(r.bytes > 10_000_000, "{r:?}");
    assert!(r.seconds > 0.0 && r.gbps > 0.0, "{r:?}");
    // And the other direction, on an ephemeral port.
    let back = tcp_transfer(&p.a, IpAddr::V4(A), 0, &p.b, Duration::from_millis(300)).unwrap();
    assert!(back.verified && back.bytes > 0, "{back:?}");
}

#[test]
fn tcp_to_an_unreachable_address_fails_in_time_naming_the_step() {
    let p = pair();
    let opts = TransferOptions {
        connect_timeout: Duration::from_millis(1500),
        ..TransferOptions::new(Duration::from_secs(1))
    };
    // An address the server namespace does not have: listening fails at once, naming the step.
    let start = Instant::now();
    let err = tcp_transfer_with(
        &p.b,
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)), 5202),
        &p.a,
        &opts,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("listen on 192.0.2.9:5202"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));

    // Take the path down: the connect attempt must give up within its limit.
    p.b.run(&["ip", "link", "set", "dev", p.veth.b(), "down"])
        .unwrap();
    let start = Instant::now();
    let err =
        tcp_transfer_with(&p.b, SocketAddr::new(IpAddr::V4(B), 5203), &p.a, &opts).unwrap_err();
    let took = start.elapsed();
    assert!(
        err.to_string().contains("connect to 192.0.2.2:5203"),
        "{err}"
    );
    assert!(took < Duration::from_secs(6), "took {took:?}");
}

#[test]
fn a_set_stop_flag_interrupts_a_transfer() {
    let p = pair();
    let stop = AtomicBool::new(true);
    let opts = TransferOptions {
        stop: Some(&stop),
        ..TransferOptions::new(Duration::from_secs(30))
    };
    let start = Instant::now();
    let err = tcp_transfer_with(&p.b, SocketAddr::new(IpAddr::V4(B), 0), &p.a, &opts).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::Interrupted, "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn udp_over_veth_verifies_what_arrives() {
    let p = pair();
    let r = udp_transfer(
        &p.b,
        IpAddr::V4(B),
        5301,
        &p.a,
        Duration::from_millis(500),
        1472,
    )
    .unwrap();
    eprintln!("udp over veth: {r:?}");
    assert!(r.verified, "{r:?}");
    assert!(r.received > 100, "{r:?}");
    assert_eq!(r.sent, r.received + r.lost, "{r:?}");
    assert_eq!(r.bytes, r.received * 1472 + r.duplicates * 1472, "{r:?}");
    // Fragmented datagrams (bigger than the MTU) reassemble and verify too.
    let big = udp_transfer(
        &p.b,
        IpAddr::V4(B),
        0,
        &p.a,
        Duration::from_millis(300),
        UDP_MAX_DATAGRAM,
    )
    .unwrap();
    assert!(big.verified && big.received > 0, "{big:?}");
    // Sizes out of range are refused.
    assert!(udp_transfer(&p.b, IpAddr::V4(B), 0, &p.a, Duration::from_millis(10), 8).is_err());
}
