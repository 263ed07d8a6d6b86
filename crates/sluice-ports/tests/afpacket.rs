//! AF_PACKET on a veth pair: frames sent at one end arrive at the other, and a VLAN tag that
//! the kernel moved to the aux data is reinserted with its TPID (root only).

use std::time::Duration;

use sluice_ports::afpacket::{AfPacketConfig, PacketSocket, RecvFrame, VlanTag};
use sluice_ports::{Netns, VethPair};
use sluice_testkit::frames::*;
use sluice_testkit::root;

/// A packet socket bound to `ifname` in `ns`.
fn bind_in(ns: &Netns, ifname: &str, cfg: &AfPacketConfig) -> PacketSocket {
    ns.enter(|| PacketSocket::bind(ifname, cfg))
        .unwrap()
        .unwrap()
}

fn recv_incoming(sock: &PacketSocket, buf: &mut [u8]) -> RecvFrame {
    loop {
        let rx = sock
            .recv(buf, Duration::from_secs(1))
            .unwrap()
            .expect("frame arrives within 1 s");
        if !rx.outgoing() {
            return rx;
        }
    }
}

#[test]
fn afpacket_veth_frames_and_vlan_reinsertion() {
    root();
    let ns_a = Netns::create("slpkta").unwrap();
    let ns_b = Netns::create("slpktb").unwrap();
    let _veth = VethPair::create(&ns_a, "pa", &ns_b, "pb", 1500).unwrap();
    let plain = AfPacketConfig {
        vnet_hdr: false,
        auxdata: false,
        promisc: false,
    };
    let tx = bind_in(&ns_a, "pa", &plain);
    let rx = bind_in(
        &ns_b,
        "pb",
        &AfPacketConfig {
            vnet_hdr: true,
            auxdata: true,
            promisc: true,
        },
    );
    rx.drain().unwrap();
    let mut buf = vec![0u8; 70000];

    let frame = tcp4_frame(100, 9, &payload(300, 3), false);
    assert_eq!(tx.send(None, &frame).unwrap(), frame.len());
    let got = recv_incoming(&rx, &mut buf);
    assert_eq!(got.frame(&buf), &frame[..]);
    assert_eq!(got.vlan, None);
    assert!(!got.truncated());
    let h = VnetHdr::decode(&got.vnet_hdr.expect("vnet header"));
    assert_eq!(h.gso_type, GSO_NONE);

    for (tpid, tci) in [(0x8100u16, 0x2064u16), (0x88a8, 0xe00a)] {
        let t = tagged(&frame, tpid, tci);
        tx.send(None, &t).unwrap();
        let got = recv_incoming(&rx, &mut buf);
        assert_eq!(got.vlan, Some(VlanTag { tpid, tci }), "TPID {tpid:#x}");
        assert_eq!(got.frame(&buf), &t[..], "tag reinserted, TPID {tpid:#x}");
        assert_eq!(got.offset, 0);
    }

    // Truncation is reported, not hidden.
    let mut small = vec![0u8; 100];
    tx.send(None, &frame).unwrap();
    let got = recv_incoming(&rx, &mut small);
    assert!(got.truncated());
    assert_eq!(got.wire_len, frame.len());
    assert_eq!(got.frame(&small), &frame[..got.len]);

    // Without aux data the tag stays out of the frame (what the kernel does).
    let rx_plain = bind_in(&ns_b, "pb", &plain);
    rx_plain.drain().unwrap();
    tx.send(None, &tagged(&frame, 0x8100, 5)).unwrap();
    let got = recv_incoming(&rx_plain, &mut buf);
    assert_eq!(got.vlan, None);
    assert_eq!(got.frame(&buf), &frame[..]);
}

/// `send_queued`: a queue of frames goes out in `sendmmsg` batches, in order, byte for byte; a
/// frame the kernel refuses (too long for the MTU, no GSO asked) is counted and skipped while
/// the frames after it still go.
#[test]
fn afpacket_send_queue_batches_in_order_and_skips_a_refused_frame() {
    use sluice_ports::afpacket::{SendQueue, PACKET_VNET_HDR_LEN, SEND_BATCH};
    root();
    let ns_a = Netns::create("slsqa").unwrap();
    let ns_b = Netns::create("slsqb").unwrap();
    let _veth = VethPair::create(&ns_a, "qa", &ns_b, "qb", 1500).unwrap();
    let with_hdr = AfPacketConfig {
        vnet_hdr: true,
        auxdata: false,
        promisc: false,
    };
    let tx = bind_in(&ns_a, "qa", &with_hdr);
    let rx = bind_in(
        &ns_b,
        "qb",
        &AfPacketConfig {
            vnet_hdr: false,
            auxdata: false,
            promisc: true,
        },
    );
    rx.drain().unwrap();

    // 150 frames (more than two batches), frame 70 too long for a 1500-byte MTU. Each batch is
    // read back before the next goes, so the receiver's socket buffer never overflows.
    let mut q = SendQueue::new();
    let mut buf = vec![0u8; 70000];
    let mut pending = Vec::new();
    let mut sent_total = 0;
    let mut refused = Vec::new();
    let mut check = |q: &mut SendQueue, pending: &mut Vec<Vec<u8>>| {
        let (sent, err) = tx.send_queued(q);
        assert!(q.is_empty(), "send_queued empties the queue");
        sent_total += sent;
        refused.extend(err);
        for (k, want) in pending.drain(..).enumerate() {
            let got = recv_incoming(&rx, &mut buf);
            assert_eq!(
                got.frame(&buf),
                &want[..],
                "frame {k} differs or is out of order"
            );
        }
    };
    for i in 0..150u32 {
        let len = if i == 70 {
            3000
        } else {
            60 + (i as usize * 7) % 1400
        };
        let frame = tcp4_frame(1000 + i, 9, &payload(len, i as u8), false);
        if !q.has_room(frame.len()) {
            check(&mut q, &mut pending);
        }
        assert!(q.push([0u8; PACKET_VNET_HDR_LEN], &frame));
        assert!(q.len() <= SEND_BATCH);
        if i != 70 {
            pending.push(frame);
        }
    }
    check(&mut q, &mut pending);
    assert_eq!(sent_total, 149);
    assert_eq!(refused.len(), 1, "one batch had a refused frame");
    assert_eq!(refused[0].0, 1, "one frame refused");
    assert!(
        refused[0].1.to_string().contains("sendmmsg"),
        "{}",
        refused[0].1
    );
    assert!(
        rx.recv(&mut buf, Duration::from_millis(100))
            .unwrap()
            .is_none(),
        "nothing more arrives"
    );
}

/// `O_NONBLOCK` on a packet socket as `fcntl` reads it back.
fn nonblocking(sock: &PacketSocket) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFL on a descriptor the socket owns for the duration of the call.
    let flags = unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_GETFL) };
    assert!(flags >= 0, "F_GETFL: {}", std::io::Error::last_os_error());
    flags & libc::O_NONBLOCK != 0
}

#[test]
fn afpacket_set_nonblocking_switches_the_descriptor_flag() {
    root();
    let ns_a = Netns::create("slpkna").unwrap();
    let ns_b = Netns::create("slpknb").unwrap();
    let _veth = VethPair::create(&ns_a, "na", &ns_b, "nb", 1500).unwrap();
    let cfg = AfPacketConfig {
        vnet_hdr: true,
        auxdata: false,
        promisc: false,
    };
    let sock = bind_in(&ns_a, "na", &cfg);
    assert!(!nonblocking(&sock), "a new socket blocks");
    sock.set_nonblocking(true).unwrap();
    assert!(nonblocking(&sock));
    sock.set_nonblocking(false).unwrap();
    assert!(!nonblocking(&sock));
}
