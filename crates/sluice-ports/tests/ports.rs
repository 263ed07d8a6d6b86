//! The switch's ports against the running kernel (root only): a [`TapPort`] pair forwarding a
//! kernel TCP stream between two namespaces (GSO super-frames in, GSO work out, feature
//! changes), and an [`AfPacketPort`] on a veth end (metadata in, UDP GSO out).

use sluice_datapath::buf::{BufPool, PacketBuf};
use sluice_datapath::port::{Port, PortError, RX_BURST_BYTES};
use sluice_offload::features::Feature;
use sluice_offload::tx::{tx_prepare, DeviceWork, TxOutcome, TxOutput, TxPacket};
use sluice_packet::meta::Slot;
use sluice_packet::{GsoType, Level};
use sluice_ports::netns::unique_suffix;
use sluice_ports::poll::wait_readable;
use sluice_ports::port_afpacket::AFPACKET_RX_BURST_BYTES;
use sluice_ports::tap::{TUN_F_CSUM, TUN_F_TSO4};
use sluice_ports::{
    AfPacketConfig, AfPacketPort, AfPacketPortConfig, Netns, PacketSocket, TapPort, TapPortConfig,
    VethPair,
};
use sluice_testkit::root;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i / 7) as u8)
                .wrapping_mul(31)
                .wrapping_add(seed ^ i as u8)
        })
        .collect()
}

/// What one direction of the forwarder saw.
#[derive(Debug, Default, Clone, Copy)]
struct DirStats {
    /// The server's TCP port: only frames of this connection are counted.
    port: u16,
    /// Where the IPv4 header is: 14 (Ethernet ports), 0 (TUN ports: L3 packets).
    l3: usize,
    frames: usize,
    /// TCPv4 GSO super-frames (segment size set, longer than one MTU).
    tcp4_gso: usize,
    /// Frames with a partial (`NEEDS_CSUM`) L4 checksum.
    partial: usize,
    max_len: usize,
    /// Frames sent with GSO work for the receiving device.
    sent_gso_work: usize,
    /// Frames sent with checksum work for the receiving device.
    sent_csum_work: usize,
    sent: usize,
    dropped: usize,
    /// VXLAN frames carrying an inner TCP GSO super-frame (any connection).
    tunnel_gso: usize,
    /// VXLAN super-frames sent whole (GSO work on a tunnelled frame).
    sent_tunnel_gso_work: usize,
}

/// Receives a batch from `src` and sends it to `dst` the way the datapath does
/// (`tx_prepare` for `dst`'s device). Returns the frames moved.
fn forward(
    src: &mut dyn Port,
    dst: &mut dyn Port,
    pool: &mut BufPool,
    bufs: &mut Vec<PacketBuf>,
    out: &mut TxOutput,
    st: &mut DirStats,
) -> usize {
    bufs.clear();
    let n = src.recv(pool, bufs, 64).expect("recv");
    for b in bufs.drain(..) {
        // Count only this transfer's frames (a previous connection's last ACK may still come).
        let f = b.frame();
        let tunnelled = b.meta.tunnel().is_some();
        if tunnelled && b.meta.gso_type() != GsoType::None && b.len() > 1514 {
            st.tunnel_gso += 1;
        }
        let port = st.port.to_be_bytes();
        let (ip, l4) = (st.l3, st.l3 + 20);
        let ours = f.len() >= l4 + 4
            && f[ip + 9] == 6
            && (f[l4..l4 + 2] == port || f[l4 + 2..l4 + 4] == port);
        if ours {
            st.frames += 1;
            st.max_len = st.max_len.max(b.len());
            // An L3 packet's metadata knows no L2 header.
            assert_eq!(b.meta.offsets().outer_l3, Some(st.l3 as u16));
            if b.meta.gso_type() == GsoType::TcpV4
                && b.meta.segment_size() > 0
                && b.len() > 1500 + st.l3
            {
                st.tcp4_gso += 1;
            }
            if b.meta.partial_slot().is_some() {
                st.partial += 1;
            }
        }
        let dev = dst.device();
        let mut send = |f: &[u8], w: &DeviceWork, st: &mut DirStats| {
            if tunnelled && w.gso.is_some() {
                st.sent_tunnel_gso_work += 1;
            }
            if ours {
                st.sent += 1;
                st.sent_gso_work += usize::from(w.gso.is_some());
                st.sent_csum_work += usize::from(w.l4_csum.is_some());
            }
            dst.send(f, w)
                .unwrap_or_else(|e| panic!("send {} bytes with {w:?}: {e}", f.len()));
        };
        match tx_prepare(&TxPacket::new(b.frame(), b.meta), &dev, out) {
            TxOutcome::Unchanged { work, .. } => send(b.frame(), &work, st),
            TxOutcome::Prepared { .. } => {
                for (f, w) in out.frames() {
                    send(f, w, st);
                }
            }
            TxOutcome::Dropped(_) => st.dropped += 1,
        }
        pool.put(b);
    }
    dst.flush().expect("flush");
    n
}

/// A TCP transfer of `bytes` from `ns_a` (192.0.2.1) to a listener in `ns_b` (192.0.2.2:port)
/// through the forwarder between ports `a` and `b`. Returns what each direction saw.
fn tcp_transfer(
    ns_a: &Netns,
    ns_b: &Netns,
    a: &mut dyn Port,
    b: &mut dyn Port,
    port: u16,
    bytes: usize,
) -> (DirStats, DirStats) {
    let addr: SocketAddr = format!("192.0.2.2:{port}").parse().unwrap();
    let listener = ns_b.enter(|| TcpListener::bind(addr)).unwrap().unwrap();
    listener.set_nonblocking(true).unwrap();
    let data = payload(bytes, port as u8);
    let mut ab = DirStats {
        port,
        l3: if a.kind() == "tun" { 0 } else { 14 },
        ..DirStats::default()
    };
    let mut ba = ab;
    let mut pool = BufPool::new(sluice_datapath::buf::DEFAULT_ROOM, 256);
    let mut bufs = Vec::new();
    let mut out = TxOutput::new();
    let fds = [a.fd().unwrap(), b.fd().unwrap()];
    let started = Instant::now();
    let (got, sent) = std::thread::scope(|s| {
        let server = s.spawn(|| -> io::Result<Vec<u8>> {
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut conn = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            return Err(io::Error::other("no connection within 15 s"));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e),
                }
            };
            conn.set_nonblocking(false)?;
            conn.set_read_timeout(Some(Duration::from_secs(15)))?;
            let mut got = Vec::new();
            conn.read_to_end(&mut got)?;
            Ok(got)
        });
        let client = s.spawn(|| {
            ns_a.enter(|| -> io::Result<()> {
                let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
                c.set_write_timeout(Some(Duration::from_secs(15)))?;
                c.write_all(&data)?;
                c.shutdown(Shutdown::Write)?;
                // Wait for the server's FIN so that every byte was acknowledged.
                c.set_read_timeout(Some(Duration::from_secs(15)))?;
                let mut rest = Vec::new();
                c.read_to_end(&mut rest)?;
                Ok(())
            })
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(server.is_finished() && client.is_finished()) {
            assert!(Instant::now() < deadline, "transfer stalled: {ab:?} {ba:?}");
            let moved = forward(a, b, &mut pool, &mut bufs, &mut out, &mut ab)
                + forward(b, a, &mut pool, &mut bufs, &mut out, &mut ba);
            if moved == 0 {
                wait_readable(&fds, Duration::from_millis(10)).unwrap();
            }
        }
        (server.join().unwrap(), client.join().unwrap())
    });
    sent.unwrap().unwrap();
    let got = got.unwrap();
    assert_eq!(got.len(), data.len(), "bytes received");
    assert!(got == data, "payload corrupted");
    assert_eq!(a.drops().rx_invalid + b.drops().rx_invalid, 0);
    assert_eq!(a.drops().tx_errors + b.drops().tx_errors, 0);
    assert_eq!(
        pool.allocated() as usize,
        pool.idle(),
        "every buffer came back"
    );
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{bytes} bytes A→B in {secs:.3} s ({:.0} Mbit/s): {ab:?}\n  B→A: {ba:?}",
        bytes as f64 * 8.0 / secs / 1e6
    );
    (ab, ba)
}

#[test]
fn tap_ports_forward_kernel_tcp_with_gso_and_follow_feature_changes() {
    root();
    let stage = Netns::create("slpstage").unwrap();
    let ns_a = Netns::create("slpa").unwrap();
    let ns_b = Netns::create("slpb").unwrap();
    let name_a = format!("spa{}", unique_suffix());
    let name_b = format!("spb{}", unique_suffix());
    let cfg = TapPortConfig::default();
    // Opened in a staging namespace, then moved: the descriptors keep working.
    let mut a = stage
        .enter(|| TapPort::open(&name_a, &cfg))
        .unwrap()
        .unwrap();
    let mut b = stage
        .enter(|| TapPort::open(&name_b, &cfg))
        .unwrap()
        .unwrap();
    assert_eq!((a.ifname(), a.kind()), (name_a.as_str(), "tap"));
    assert_eq!(a.device().mtu, 1500);
    for (port, ns, ip) in [(&a, &ns_a, "192.0.2.1/24"), (&b, &ns_b, "192.0.2.2/24")] {
        let n = port.ifname();
        stage
            .run(&["ip", "link", "set", n, "netns", ns.name()])
            .unwrap();
        ns.run(&["ip", "addr", "add", ip, "dev", n]).unwrap();
        ns.link_up(n).unwrap();
    }
    for p in [&a, &b] {
        let f = p.device().features;
        for feat in [
            Feature::TxCsumGeneric,
            Feature::TxSg,
            Feature::Tso,
            Feature::Tso6,
            Feature::Uso,
        ] {
            assert!(f.has(feat), "{} lacks {feat}: {f}", p.name());
        }
        assert!(!f.has(Feature::VlanCtagInsert) && !f.has(Feature::TxCsumIpv4Header));
        assert!(p.changeable().has(Feature::Tso));
        assert!(!p.changeable().has(Feature::TxSg));
    }

    // Transfer sizes: SLUICE_PORTS_TRANSFER_MB (default 1) for phase 1, a quarter of it after.
    let mb: usize = std::env::var("SLUICE_PORTS_TRANSFER_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (big, small) = (mb << 20, (mb << 20) / 4);

    // 1. Offloads on: the kernel hands A TCP super-frames, which B's device takes as they are.
    let (ab, _) = tcp_transfer(&ns_a, &ns_b, &mut a, &mut b, 5001, big);
    assert!(
        ab.tcp4_gso > 0,
        "no TCPv4 GSO frame from the kernel: {ab:?}"
    );
    assert!(ab.max_len > 1514);
    assert!(ab.sent_gso_work > 0, "no GSO work sent: {ab:?}");
    assert_eq!(
        ab.sent_csum_work, ab.sent,
        "B's device fills every checksum"
    );

    // 2. TSO off on A: at most MTU-sized frames, still checksum-partial.
    a.set_feature(Feature::Tso, false).unwrap();
    assert_eq!(a.offloads() & TUN_F_TSO4, 0);
    assert!(!a.device().features.has(Feature::Tso));
    let (ab, _) = tcp_transfer(&ns_a, &ns_b, &mut a, &mut b, 5002, small);
    assert_eq!(ab.tcp4_gso, 0, "{ab:?}");
    assert!(ab.max_len <= 1514, "{ab:?}");
    assert!(ab.partial > 0, "{ab:?}");

    // 3. Checksum offload off on A: every segmentation bit goes with it; the kernel now sends
    //    complete checksums, and what B sends to A is checksummed in software.
    a.set_feature(Feature::TxCsumGeneric, false).unwrap();
    assert_eq!(a.offloads(), 0);
    assert!(a.device().features.is_empty());
    let (ab, ba) = tcp_transfer(&ns_a, &ns_b, &mut a, &mut b, 5003, small);
    assert_eq!((ab.tcp4_gso, ab.partial), (0, 0), "{ab:?}");
    assert!(ab.max_len <= 1514, "{ab:?}");
    assert!(
        ba.partial > 0,
        "B's kernel still hands us partial checksums: {ba:?}"
    );
    assert_eq!(
        ba.sent_csum_work, 0,
        "A's device fills none: software did: {ba:?}"
    );

    // The kernel's rules: no TSO without checksum offload; scatter-gather is fixed.
    assert!(matches!(
        a.set_feature(Feature::Tso, true),
        Err(PortError::Feature { .. })
    ));
    assert!(matches!(
        b.set_feature(Feature::TxSg, false),
        Err(PortError::Feature { .. })
    ));
    a.set_feature(Feature::TxCsumGeneric, true).unwrap();
    a.set_feature(Feature::Tso, true).unwrap();
    assert_eq!(a.offloads(), TUN_F_CSUM | TUN_F_TSO4);
}

/// Two TUN ports (L3 packets) forward kernel TCP with the kernel's TSO super-packets handed over
/// as they are (`csum_start` / `hdr_len` counting from the IP header both ways), then, with TSO
/// off on the receiving side, segmented in software by `tx_prepare` from the L3 metadata.
#[test]
fn tun_ports_forward_kernel_tcp_with_gso() {
    root();
    let ns_a = Netns::create("sltuna").unwrap();
    let ns_b = Netns::create("sltunb").unwrap();
    let cfg = TapPortConfig {
        tun: true,
        ..TapPortConfig::default()
    };
    let mut ports = Vec::new();
    for (ns, ip) in [(&ns_a, "192.0.2.1/24"), (&ns_b, "192.0.2.2/24")] {
        let name = format!("stn{}", unique_suffix());
        let p = ns.enter(|| TapPort::open(&name, &cfg)).unwrap().unwrap();
        assert_eq!((p.kind(), p.link()), ("tun", sluice_wire::LinkType::Ip));
        assert!(
            p.device().features.has(Feature::Tso),
            "{}",
            p.device().features
        );
        ns.run(&["ip", "addr", "add", ip, "dev", &name]).unwrap();
        ns.link_up(&name).unwrap();
        ports.push(p);
    }
    let (mut a, mut b) = (ports.remove(0), ports.remove(0));

    // 1. Offloads on both: A's kernel sends TSO super-packets, B's kernel takes them as they are.
    let (ab, ba) = tcp_transfer(&ns_a, &ns_b, &mut a, &mut b, 5011, 1 << 20);
    assert!(
        ab.tcp4_gso > 0,
        "no TCPv4 GSO packet from the kernel: {ab:?}"
    );
    assert!(ab.max_len > 1500, "{ab:?}");
    assert!(ab.sent_gso_work > 0, "no GSO work sent: {ab:?}");
    assert!(ba.frames > 0, "{ba:?}");

    // 2. TSO off on B: the super-packets from A are segmented in software for B.
    b.set_feature(Feature::Tso, false).unwrap();
    let (ab, _) = tcp_transfer(&ns_a, &ns_b, &mut a, &mut b, 5012, 1 << 18);
    assert!(ab.tcp4_gso > 0, "{ab:?}");
    assert_eq!(ab.sent_gso_work, 0, "{ab:?}");
    assert!(
        ab.sent > ab.frames,
        "software GSO made more packets: {ab:?}"
    );

    // An Ethernet frame sent to an L3 port is refused and counted, not written.
    let errors = b.drops().tx_errors;
    let frame = udp4_frame(&[2; 6], &[4; 6], 1, 2, b"l2");
    assert!(matches!(
        b.send(&frame, &DeviceWork::default()),
        Err(PortError::Unsendable(_))
    ));
    assert_eq!(b.drops().tx_errors, errors + 1);
}

/// Issue 16: TAP ports with `TUN_F_UDP_TUNNEL_GSO` (24-byte `virtio_net_hdr_v1_hash_tunnel`).
/// Each namespace has a kernel VXLAN device (VNI 42, outer UDP checksum off) over its TAP; a
/// TCP stream over the VXLAN devices crosses the forwarder. The kernel hands A whole VXLAN
/// super-frames (tunnel and inner TCP GSO in the metadata), B's device takes them whole (the
/// header carries the tunnel bits and offsets), and B's kernel segments, decapsulates and
/// delivers every byte.
#[test]
fn tap_ports_carry_vxlan_super_frames_whole_both_ways() {
    root();
    let stage = Netns::create("slpstage").unwrap();
    let ns_a = Netns::create("slpa").unwrap();
    let ns_b = Netns::create("slpb").unwrap();
    let name_a = format!("sva{}", unique_suffix());
    let name_b = format!("svb{}", unique_suffix());
    let cfg = TapPortConfig {
        udp_tunnel_gso: true,
        ..TapPortConfig::default()
    };
    let mut a = stage
        .enter(|| TapPort::open(&name_a, &cfg))
        .unwrap()
        .unwrap();
    let mut b = stage
        .enter(|| TapPort::open(&name_b, &cfg))
        .unwrap()
        .unwrap();
    for p in [&a, &b] {
        assert_eq!(
            p.hdr_format(),
            sluice_packet::virtio::HdrFormat::V1HashTunnel,
            "the kernel refused TUN_F_UDP_TUNNEL_GSO: {:#x}",
            p.supported_offloads()
        );
        assert!(p.device().hw_enc_features.has(Feature::UdpTnl));
    }
    for (port, ns, under, local, remote, ip) in [
        (
            &a,
            &ns_a,
            "198.51.100.1/24",
            "198.51.100.1",
            "198.51.100.2",
            "192.0.2.1/24",
        ),
        (
            &b,
            &ns_b,
            "198.51.100.2/24",
            "198.51.100.2",
            "198.51.100.1",
            "192.0.2.2/24",
        ),
    ] {
        let n = port.ifname();
        stage
            .run(&["ip", "link", "set", n, "netns", ns.name()])
            .unwrap();
        ns.run(&["ip", "addr", "add", under, "dev", n]).unwrap();
        ns.link_up(n).unwrap();
        ns.run(&[
            "ip",
            "link",
            "add",
            "vx42",
            "type",
            "vxlan",
            "id",
            "42",
            "local",
            local,
            "remote",
            remote,
            "dstport",
            "4789",
            "dev",
            n,
            "noudpcsum",
        ])
        .unwrap();
        ns.run(&["ip", "addr", "add", ip, "dev", "vx42"]).unwrap();
        ns.link_up("vx42").unwrap();
    }
    let (ab, _) = tcp_transfer(&ns_a, &ns_b, &mut a, &mut b, 5011, 2 << 20);
    assert!(
        ab.tunnel_gso > 0,
        "no VXLAN super-frame from the kernel: {ab:?}"
    );
    assert!(ab.max_len <= 1514 || ab.tunnel_gso > 0);
    assert!(
        ab.sent_tunnel_gso_work > 0,
        "no VXLAN super-frame written whole: {ab:?}"
    );
    assert_eq!(ab.dropped, 0, "{ab:?}");
}

/// Sets `UDP_SEGMENT` (UDP GSO) on a socket.
fn set_udp_segment(sock: &UdpSocket, size: u16) {
    use std::os::fd::AsRawFd;
    let v: libc::c_int = size.into();
    // SAFETY: `v` is a live c_int and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "UDP_SEGMENT: {}", io::Error::last_os_error());
}

/// Receives frames until one is an untagged IPv4/UDP frame to `dport` (or 5 s pass).
fn recv_udp_to(port: &mut AfPacketPort, pool: &mut BufPool, dport: u16) -> PacketBuf {
    recv_udp_at(port, pool, 0, dport)
}

/// Receives frames until one is an IPv4/UDP frame to `dport` whose IPv4 header starts at
/// `14 + tag_len` (or 5 s pass).
fn recv_udp_at(
    port: &mut AfPacketPort,
    pool: &mut BufPool,
    tag_len: usize,
    dport: u16,
) -> PacketBuf {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut bufs = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "no UDP frame to port {dport}");
        wait_readable(&[port.fd().unwrap()], Duration::from_millis(100)).unwrap();
        bufs.clear();
        port.recv(pool, &mut bufs, 16).unwrap();
        for b in bufs.drain(..) {
            let f = b.frame();
            let t = tag_len;
            if f.len() >= 42 + t
                && f[12 + t..14 + t] == [8, 0]
                && f[23 + t] == 17
                && f[36 + t..38 + t] == dport.to_be_bytes()
            {
                return b;
            }
            pool.put(b);
        }
    }
}

#[test]
fn afpacket_port_on_veth_receives_metadata_and_sends_udp_gso() {
    root();
    let ns_a = Netns::create("slpafa").unwrap();
    let ns_b = Netns::create("slpafb").unwrap();
    let va = format!("va{}", unique_suffix());
    let vb = format!("vb{}", unique_suffix());
    let veth = VethPair::create(&ns_a, &va, &ns_b, &vb, 1500).unwrap();
    let mac_a = [0x02, 0, 0, 0, 1, 1];
    let mac_b = [0x02, 0, 0, 0, 1, 2];
    ns_a.run(&["ip", "link", "set", &va, "address", "02:00:00:00:01:01"])
        .unwrap();
    ns_b.run(&["ip", "link", "set", &vb, "address", "02:00:00:00:01:02"])
        .unwrap();
    ns_b.run(&["ip", "addr", "add", "192.0.2.2/24", "dev", &vb])
        .unwrap();
    ns_b.run(&[
        "ip",
        "neigh",
        "add",
        "192.0.2.1",
        "lladdr",
        "02:00:00:00:01:01",
        "dev",
        &vb,
        "nud",
        "permanent",
    ])
    .unwrap();
    let mut port = ns_a
        .enter(|| AfPacketPort::open(&va, &AfPacketPortConfig::default()))
        .unwrap()
        .unwrap();
    assert_eq!((port.name(), port.kind()), (veth.a(), "afpacket"));
    let dev = port.device();
    assert_eq!(dev.mtu, 1500);
    assert!(dev.features.has(Feature::Tso) && dev.features.has(Feature::Uso));
    // The veth inserts VLAN tags and segments tunnels, but a packet socket cannot ask for it.
    assert!(!dev.features.has(Feature::VlanCtagInsert) && !dev.features.has(Feature::UdpTnl));
    assert!(port.changeable().has(Feature::RxGro));

    // set_feature goes through the ethtool ioctl, from this (root-namespace) thread, and is re-read.
    port.set_feature(Feature::Tso, false).unwrap();
    assert!(!port.device().features.has(Feature::Tso));
    port.set_feature(Feature::Tso, true).unwrap();
    assert!(port.device().features.has(Feature::Tso));
    assert!(matches!(
        port.set_feature(Feature::TxCsumIpv4, true),
        Err(PortError::Feature { .. })
    ));

    let mut pool = BufPool::new(sluice_datapath::buf::DEFAULT_ROOM, 64);
    let sock_b = ns_b
        .enter(|| UdpSocket::bind("192.0.2.2:0"))
        .unwrap()
        .unwrap();

    // A datagram from the peer's stack: checksum-partial (veth offload), parsed offsets.
    let data = payload(300, 7);
    sock_b.send_to(&data, "192.0.2.1:7777").unwrap();
    let b = recv_udp_to(&mut port, &mut pool, 7777);
    println!("peer datagram meta: {:?}", b.meta);
    assert_eq!(b.meta.offsets().l4(Level::Outer), Some(34));
    assert_eq!(b.meta.l4_proto(Level::Outer), Some(17));
    assert_eq!(b.meta.partial_slot(), Some(Slot::OuterL4));
    assert_eq!(&b.frame()[42..], &data[..]);
    assert_eq!(&b.frame()[..6], &mac_a);
    pool.put(b);

    // A tagged frame from the peer (no kernel VLAN devices here: a packet socket sends it):
    // the veth carries the tag out of band, the port puts it back.
    let raw_b = ns_b
        .enter(|| PacketSocket::bind(&vb, &AfPacketConfig::default()))
        .unwrap()
        .unwrap();
    let data = payload(200, 8);
    let mut tagged = udp4_frame(&mac_a, &mac_b, 5556, 7780, &data);
    tagged[40..42].fill(0); // UDP checksum: none
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    raw_b.send(None, &tagged).unwrap();
    let b = recv_udp_at(&mut port, &mut pool, 4, 7780);
    assert_eq!(b.frame(), &tagged[..]);
    assert_eq!(b.meta.offsets().l4(Level::Outer), Some(38));
    pool.put(b);
    // A UDP GSO send from the peer: one super-frame arrives, described as UDP GSO.
    set_udp_segment(&sock_b, 500);
    let data = payload(2000, 9);
    sock_b.send_to(&data, "192.0.2.1:7778").unwrap();
    let b = recv_udp_to(&mut port, &mut pool, 7778);
    println!("peer UDP GSO meta: {:?} len {}", b.meta, b.len());
    assert_eq!(b.meta.gso_type(), GsoType::UdpL4);
    assert_eq!(b.meta.segment_size(), 500);
    assert_eq!(&b.frame()[42..], &data[..]);
    pool.put(b);

    // We send one UDP GSO frame (partial checksum): the peer's socket gets the datagrams.
    let sink = ns_b
        .enter(|| UdpSocket::bind("192.0.2.2:7779"))
        .unwrap()
        .unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let data = payload(4000, 11);
    let frame = udp4_frame(&mac_b, &mac_a, 5555, 7779, &data);
    let work = DeviceWork {
        l4_csum: Some((34, 6)),
        gso: Some((GsoType::UdpL4, 1000, false)),
        ..DeviceWork::default()
    };
    port.send(&frame, &work).unwrap();
    port.flush().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    for _ in 0..4 {
        let (n, from) = sink.recv_from(&mut buf).unwrap();
        assert_eq!(n, 1000);
        assert_eq!(from.to_string(), "192.0.2.1:5555");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == data, "UDP GSO payload corrupted");
    // Nothing of our own send came back as received.
    let mut bufs = Vec::new();
    port.recv(&mut pool, &mut bufs, 16).unwrap();
    assert!(
        bufs.iter().all(|b| b.frame()[6..12] != mac_a),
        "own frame received"
    );
    assert_eq!(port.drops().rx_invalid + port.drops().tx_errors, 0);

    // Work a packet socket cannot express is refused before the kernel sees it.
    let ip_csum = DeviceWork {
        ip_csum: true,
        ..DeviceWork::default()
    };
    assert!(matches!(
        port.send(&frame, &ip_csum),
        Err(PortError::Unsendable(_))
    ));
}

/// Ethernet / IPv4 192.0.2.1 → 192.0.2.2 (DF) / UDP with the pseudo-header sum in the checksum
/// field (partial, for `NEEDS_CSUM`).
fn udp4_frame(dst: &[u8; 6], src: &[u8; 6], sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let ulen = 8 + data.len();
    let mut f = Vec::with_capacity(14 + 20 + ulen);
    f.extend_from_slice(dst);
    f.extend_from_slice(src);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + ulen) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2]);
    let c = sluice_checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(ulen as u16).to_be_bytes());
    let pseudo = sluice_checksum::pseudo::ipv4([192, 0, 2, 1], [192, 0, 2, 2], 17, ulen as u16);
    f.extend_from_slice(&pseudo.to_be_bytes());
    f.extend_from_slice(data);
    f
}

#[test]
fn tap_port_multi_queue_and_no_offloads() {
    root();
    let ns = Netns::create("slpmq").unwrap();
    let name = format!("spq{}", unique_suffix());
    let cfg = TapPortConfig {
        offloads: false,
        multi_queue: true,
        ..TapPortConfig::default()
    };
    let (q0, q1) = ns
        .enter(|| {
            let q0 = TapPort::open(&name, &cfg)?;
            let q1 = TapPort::open(&name, &cfg)?;
            Ok::<_, PortError>((q0, q1))
        })
        .unwrap()
        .unwrap();
    assert_eq!(q0.ifname(), q1.ifname());
    assert_ne!(q0.fd(), q1.fd());
    for q in [&q0, &q1] {
        assert_eq!(q.offloads(), 0);
        assert!(q.device().features.is_empty());
        // What the kernel accepted when probed can be turned on later.
        assert!(q.changeable().has(Feature::TxCsumGeneric) && q.changeable().has(Feature::Tso));
    }
    let mut q0 = q0;
    q0.set_feature(Feature::TxCsumGeneric, true).unwrap();
    assert_eq!(q0.offloads(), TUN_F_CSUM);
    assert!(q0.device().features.has(Feature::TxSg));
    // Nothing queued: a receive returns at once with nothing.
    let mut pool = BufPool::new(4096, 4);
    let mut bufs = Vec::new();
    assert_eq!(q0.recv(&mut pool, &mut bufs, 8).unwrap(), 0);

    // The control side (as the switch uses it, from another thread): TSO on through it, the
    // state handed to both queues; a fixed feature refused with the TAP's name.
    let control = q0.control().expect("a TAP has a control side");
    let state = std::thread::spawn(move || control.set_feature(Feature::Tso, true))
        .join()
        .unwrap()
        .unwrap();
    assert!(state.device.features.has(Feature::Tso));
    assert!(state
        .features
        .iter()
        .any(|e| e.feature == Feature::TxSg && e.on && e.fixed));
    let mut q1 = q1;
    for q in [&mut q0, &mut q1] {
        q.apply_state(&state).unwrap();
        assert_eq!(q.device(), state.device);
    }
    assert_eq!(q0.offloads(), TUN_F_CSUM | TUN_F_TSO4);
    let err = q0
        .control()
        .unwrap()
        .set_feature(Feature::VlanCtagInsert, true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("fixed on TAP") && err.contains(q0.ifname()),
        "{err}"
    );
}

#[test]
fn afpacket_ports_forward_kernel_tcp_between_veth_pairs() {
    root();
    let ns_a = Netns::create("slpfa").unwrap();
    let ns_b = Netns::create("slpfb").unwrap();
    let ns_s = Netns::create("slpfs").unwrap();
    let (a0, s0) = (
        format!("a{}", unique_suffix()),
        format!("s{}", unique_suffix()),
    );
    let (b0, s1) = (
        format!("b{}", unique_suffix()),
        format!("s{}", unique_suffix()),
    );
    let _va = VethPair::create(&ns_a, &a0, &ns_s, &s0, 1500).unwrap();
    let _vb = VethPair::create(&ns_b, &b0, &ns_s, &s1, 1500).unwrap();
    ns_a.run(&["ip", "addr", "add", "192.0.2.1/24", "dev", &a0])
        .unwrap();
    ns_b.run(&["ip", "addr", "add", "192.0.2.2/24", "dev", &b0])
        .unwrap();
    let cfg = AfPacketPortConfig::default();
    let (mut p0, mut p1) = ns_s
        .enter(|| {
            Ok::<_, PortError>((
                AfPacketPort::open(&s0, &cfg)?,
                AfPacketPort::open(&s1, &cfg)?,
            ))
        })
        .unwrap()
        .unwrap();
    // The peers' TSO super-frames cross the veth as they are and reach the port as GSO frames;
    // sent on with GSO work, the other veth carries them to the peer stack.
    let mb: usize = std::env::var("SLUICE_PORTS_TRANSFER_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (ab, _) = tcp_transfer(&ns_a, &ns_b, &mut p0, &mut p1, 5011, mb << 20);
    assert!(ab.tcp4_gso > 0, "{ab:?}");
    assert!(ab.sent_gso_work > 0, "{ab:?}");
    // TSO off on the egress port: software segments, the data still arrives intact.
    p1.set_feature(Feature::Tso, false).unwrap();
    let (ab, _) = tcp_transfer(&ns_a, &ns_b, &mut p0, &mut p1, 5012, (mb << 20) / 4);
    assert!(ab.tcp4_gso > 0, "{ab:?}");
    assert_eq!(ab.sent_gso_work, 0, "{ab:?}");
    assert!(ab.sent > ab.frames, "software GSO made more frames: {ab:?}");
}

/// Kernel-side receive drops are counted: a port whose socket queue is tiny and not read while
/// the peer sends a burst loses frames in the kernel, and `drops().rx_kernel` says how many —
/// exactly: every frame the peer sent was either received by the port or counted as dropped.
#[test]
fn afpacket_port_counts_frames_the_kernel_dropped() {
    root();
    let ns_a = Netns::create("slpkda").unwrap();
    let ns_b = Netns::create("slpkdb").unwrap();
    // No IPv6 on the links: no neighbour discovery frames to be dropped among the test's own.
    for ns in [&ns_a, &ns_b] {
        ns.run(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
            .unwrap();
        ns.run(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"])
            .unwrap();
    }
    let va = format!("va{}", unique_suffix());
    let vb = format!("vb{}", unique_suffix());
    let _veth = VethPair::create(&ns_a, &va, &ns_b, &vb, 1500).unwrap();
    let cfg = AfPacketPortConfig {
        // The kernel's floor (SOCK_MIN_RCVBUF) applies: a few frames fit, then it drops.
        rcvbuf: 1,
        ..AfPacketPortConfig::default()
    };
    let mut port = ns_a
        .enter(|| AfPacketPort::open(&va, &cfg))
        .unwrap()
        .unwrap();
    // Frames counted before the burst (router solicitations and the like) do not matter: the
    // test counts only its own frames, by EtherType.
    const ETHERTYPE: [u8; 2] = [0x88, 0xb5]; // local experimental
    let sender = ns_b
        .enter(|| PacketSocket::bind(&vb, &AfPacketConfig::default()))
        .unwrap()
        .unwrap();
    let before = port.drops().rx_kernel;
    let mut frame = vec![0u8; 1400];
    frame[..6].copy_from_slice(&[0xff; 6]);
    frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 9, 9]);
    frame[12..14].copy_from_slice(&ETHERTYPE);
    const SENT: usize = 300;
    for i in 0..SENT {
        frame[14..18].copy_from_slice(&(i as u32).to_be_bytes());
        sender.send(None, &frame).unwrap();
    }
    // Read everything queued; the frames arrive synchronously through the veth, so what is
    // not queued now was dropped.
    let mut pool = BufPool::new(4096, 64);
    let ours = drain_counting(&mut port, &mut pool, |f| {
        f.get(12..14) == Some(&ETHERTYPE[..])
    });
    let dropped = port.drops().rx_kernel - before;
    println!("sent {SENT}, received {ours}, kernel drops {dropped}");
    assert!(dropped > 0, "a tiny receive buffer must overflow");
    assert_eq!(
        ours as u64 + dropped,
        SENT as u64,
        "every frame received or counted"
    );
}

/// Frames the kernel drops after an AF_PACKET port handed them over are counted once. With the
/// veth's peer down, what happens to a frame depends on whether the kernel's link watcher has
/// seen the carrier go yet (asynchronous: tens to hundreds of milliseconds, later under load):
/// - before: the veth refuses every frame (`ENOBUFS`, retried for a while, back-pressure), and
///   the port counts it as a transmit error — and not a second time from the interface's
///   `tx_dropped`, which the veth bumps too;
/// - after: the device's queue is the kernel's no-op one, which drops every frame silently and
///   reports success; the port counts them from `tx_dropped` (`tx_kernel`).
///
/// (Seen by hand: 50 raw sends right after `ip link set PEER down` were refused, 50 sent 0.3 s
/// later were accepted and counted in `tx_dropped`.)
#[test]
fn afpacket_port_counts_frames_the_kernel_dropped_after_sending() {
    root();
    let ns_a = Netns::create("slptka").unwrap();
    let ns_b = Netns::create("slptkb").unwrap();
    let va = format!("va{}", unique_suffix());
    let vb = format!("vb{}", unique_suffix());
    let _veth = VethPair::create(&ns_a, &va, &ns_b, &vb, 1500).unwrap();
    let mut port = ns_a
        .enter(|| AfPacketPort::open(&va, &AfPacketPortConfig::default()))
        .unwrap()
        .unwrap();
    ns_b.run(&["ip", "link", "set", &vb, "down"]).unwrap();
    let before = port.drops().tx_kernel;
    let mut frame = vec![0u8; 200];
    frame[..6].copy_from_slice(&[0xff; 6]);
    frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 9, 8]);
    frame[12..14].copy_from_slice(&[0x88, 0xb5]);
    const SENT: u64 = 50;
    for _ in 0..SENT {
        port.send(&frame, &DeviceWork::default()).unwrap();
    }
    let refused = port.flush().is_err();
    let d = port.drops();
    if refused {
        // The veth reported the drops to the socket (ENOBUFS): transmit errors, each frame
        // once, and not counted again as silent kernel drops.
        assert_eq!(d.tx_errors, SENT, "{d:?}");
        assert_eq!(d.tx_kernel - before, 0, "{d:?}");
    } else {
        // The no-op queue took them and said nothing: each one a silent kernel drop, once.
        assert_eq!(d.tx_errors, 0, "{d:?}");
        assert_eq!(d.tx_kernel - before, SENT, "{d:?}");
    }
}

/// Frames a TAP's kernel side could not queue towards the switch are counted: with a queue of
/// 8 frames and nobody reading, a burst of 200 datagrams from the namespace overflows it, and
/// every datagram is then either read by the port or counted in `drops().rx_kernel`.
#[test]
fn tap_port_counts_frames_the_kernel_could_not_queue() {
    root();
    let ns = Netns::create("slptq").unwrap();
    ns.run(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
        .unwrap();
    ns.run(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"])
        .unwrap();
    let name = format!("stq{}", unique_suffix());
    let mut port = ns
        .enter(|| TapPort::open(&name, &TapPortConfig::default()))
        .unwrap()
        .unwrap();
    ns.run(&["ip", "link", "set", &name, "txqueuelen", "8"])
        .unwrap();
    ns.run(&["ip", "addr", "add", "192.0.2.1/24", "dev", &name])
        .unwrap();
    ns.link_up(&name).unwrap();
    ns.run(&[
        "ip",
        "neigh",
        "add",
        "192.0.2.2",
        "lladdr",
        "02:00:00:00:09:02",
        "dev",
        &name,
        "nud",
        "permanent",
    ])
    .unwrap();
    let before = port.drops().rx_kernel;
    let sock = ns
        .enter(|| UdpSocket::bind("192.0.2.1:0"))
        .unwrap()
        .unwrap();
    const SENT: usize = 200;
    for i in 0..SENT {
        let _ = sock.send_to(&(i as u32).to_be_bytes(), "192.0.2.2:9");
    }
    let mut pool = BufPool::new(4096, 64);
    // Only the test's datagrams: IPv4 UDP to port 9.
    let ours = drain_counting(&mut port, &mut pool, |f| {
        f.get(23) == Some(&17) && f.get(36..38) == Some(&[0, 9])
    });
    let dropped = port.drops().rx_kernel - before;
    println!("sent {SENT}, read {ours}, kernel drops {dropped}");
    assert!(dropped > 0, "a queue of 8 must overflow");
    assert_eq!(
        ours as u64 + dropped,
        SENT as u64,
        "every datagram read or counted"
    );
}

/// Receives everything `port` has queued now; returns how many frames `ours` accepts.
fn drain_counting(port: &mut dyn Port, pool: &mut BufPool, ours: impl Fn(&[u8]) -> bool) -> usize {
    let mut got = Vec::new();
    let mut n_ours = 0;
    loop {
        got.clear();
        let n = port.recv(pool, &mut got, 64).unwrap();
        n_ours += got.iter().filter(|b| ours(b.frame())).count();
        for b in got.drain(..) {
            pool.put(b);
        }
        if n == 0 {
            return n_ours;
        }
    }
}

/// Issue 16 (the VXLAN hop, evaluated): N equal VXLAN datagrams handed to the kernel as ONE
/// UDP-GSO (USO) frame through an `AF_PACKET` port on a veth — outer headers once, the UDP
/// payload the N VXLAN datagrams back to back, `gso_size` one datagram. The veth and the packet
/// socket take it, the kernel cuts it into the N datagrams with their outer UDP checksums, and
/// the peer's kernel VXLAN device decapsulates every one: a UDP socket behind it receives all N
/// inner datagrams, in order.
#[test]
fn afpacket_uso_frame_of_vxlan_datagrams_reaches_a_kernel_vxlan_peer() {
    use sluice_checksum::{checksum, pseudo};
    root();
    let ns_s = Netns::create("slpuso").unwrap();
    let ns_k = Netns::create("slpusok").unwrap();
    let vs = format!("us{}", unique_suffix());
    let vk = format!("uk{}", unique_suffix());
    let _veth = VethPair::create(&ns_s, &vs, &ns_k, &vk, 1500).unwrap();
    ns_k.run(&["ip", "link", "set", &vk, "address", "02:00:00:00:02:02"])
        .unwrap();
    ns_k.run(&["ip", "addr", "add", "198.51.100.2/24", "dev", &vk])
        .unwrap();
    ns_k.run(&[
        "ip",
        "link",
        "add",
        "vx42",
        "address",
        "02:00:00:00:03:03",
        "type",
        "vxlan",
        "id",
        "42",
        "local",
        "198.51.100.2",
        "remote",
        "198.51.100.1",
        "dstport",
        "4789",
        "dev",
        &vk,
    ])
    .unwrap();
    ns_k.run(&["ip", "addr", "add", "192.0.2.2/24", "dev", "vx42"])
        .unwrap();
    ns_k.link_up("vx42").unwrap();
    let sock = ns_k
        .enter(|| UdpSocket::bind("192.0.2.2:5099"))
        .unwrap()
        .unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut port = ns_s
        .enter(|| AfPacketPort::open(&vs, &AfPacketPortConfig::default()))
        .unwrap()
        .unwrap();
    assert!(port.device().features.has(Feature::Uso));

    // N inner Ethernet/IPv4/UDP frames of equal length (the last shorter), each in VXLAN.
    const N: usize = 8;
    let inner_payload = |i: usize| -> Vec<u8> {
        let len = if i == N - 1 { 300 } else { 1000 };
        (0..len).map(|j| (i * 31 + j) as u8).collect()
    };
    let mut body = Vec::new();
    let mut unit = 0;
    for i in 0..N {
        let data = inner_payload(i);
        let mut d = vec![0x08, 0, 0, 0, 0, 0, 42, 0]; // VXLAN, VNI 42
        d.extend_from_slice(&[0x02, 0, 0, 0, 3, 3, 0x02, 0, 0, 0, 9, 9, 0x08, 0x00]);
        let ip_len = 20 + 8 + data.len();
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ];
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&(i as u16).to_be_bytes());
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        d.extend_from_slice(&ip);
        let mut udp = vec![0x9c, 0x40, 0x13, 0xeb, 0, 0, 0, 0]; // 40000 -> 5099
        udp[4..6].copy_from_slice(&((8 + data.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&data);
        let seed = pseudo::ipv4([192, 0, 2, 1], [192, 0, 2, 2], 17, (8 + data.len()) as u16);
        let s = sluice_checksum::combine(seed, sluice_checksum::sum(&udp));
        let c = !s;
        udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        d.extend_from_slice(&udp);
        if i == 0 {
            unit = d.len();
        }
        body.extend_from_slice(&d);
    }
    // One outer Ethernet/IPv4/UDP header in front of all of them.
    let udp_len = 8 + body.len();
    let mut f = vec![0x02, 0, 0, 0, 2, 2, 0x02, 0, 0, 0, 1, 1, 0x08, 0x00];
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 7, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
    ];
    ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let seed = pseudo::ipv4([198, 51, 100, 1], [198, 51, 100, 2], 17, udp_len as u16);
    f.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb5]); // 49152 -> 4789
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&seed.to_be_bytes());
    f.extend_from_slice(&body);
    let work = DeviceWork {
        l4_csum: Some((34, 6)),
        gso: Some((GsoType::UdpL4, unit as u16, false)),
        ..DeviceWork::default()
    };
    port.send(&f, &work)
        .expect("the packet socket takes the USO frame");
    port.flush().expect("flush");
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while got.len() < N {
        match sock.recv(&mut buf) {
            Ok(n) => got.push(buf[..n].to_vec()),
            Err(e) => panic!("{} of {N} inner datagrams arrived: {e}", got.len()),
        }
    }
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g, &inner_payload(i), "datagram {i}");
    }
    assert_eq!(port.drops().tx_errors, 0);
}

/// A receive burst ends once it holds [`RX_BURST_BYTES`] (so the datapath forwards a burst while
/// its frames are still in cache): 60 000-byte frames waiting on a TAP come in bursts of as many
/// as reach the budget, the rest in the next call, every frame whole and in order.
#[test]
fn tap_receive_burst_ends_at_its_byte_budget() {
    root();
    let ns = Netns::create("slpbb").unwrap();
    let name = format!("spb{}", unique_suffix());
    let cfg = TapPortConfig {
        offloads: false,
        ..TapPortConfig::default()
    };
    let mut tap = ns.enter(|| TapPort::open(&name, &cfg)).unwrap().unwrap();
    ns.run(&["ip", "link", "set", "dev", &name, "mtu", "65000"])
        .unwrap();
    ns.run(&["ip", "addr", "add", "10.77.0.1/24", "dev", &name])
        .unwrap();
    ns.link_up(&name).unwrap();
    ns.wait_link_ready(&name, Duration::from_secs(5)).unwrap();
    // A static neighbour: no ARP frame comes before the datagrams.
    let neigh = [
        "ip",
        "neigh",
        "replace",
        "10.77.0.2",
        "lladdr",
        "02:00:00:00:00:02",
    ];
    ns.run(&[&neigh[..], &["dev", &name]].concat()).unwrap();

    const LEN: usize = 60_000;
    const FRAMES: usize = 12;
    // Each datagram is one frame on the TAP (MTU 65 000: no fragments). The kernel queues it
    // on the TAP before `send_to` returns.
    send_datagrams(&ns, "10.77.0.1:0", "10.77.0.2:9", FRAMES, LEN);
    // Every frame through the TAP's qdisc (into its queue) before the first read.
    wait_until("the frames leave the qdisc", || {
        qdisc_sent_packets(&ns, &name) >= FRAMES
    });
    let frame_len = 14 + 20 + 8 + LEN;
    // Frames are read until the burst holds the budget: the last one read crosses it.
    let per_burst = RX_BURST_BYTES.div_ceil(frame_len);
    assert!(per_burst < FRAMES, "the test needs more than one burst");
    let mut pool = BufPool::new(65_536, 16);
    let (got, bursts) = recv_in_bursts(&mut tap, &mut pool, FRAMES);
    let mut want = vec![per_burst; FRAMES / per_burst];
    if !FRAMES.is_multiple_of(per_burst) {
        want.push(FRAMES % per_burst);
    }
    assert_eq!(bursts, want);
    assert_datagrams(&got, LEN);
}

/// The `AF_PACKET` port's own budget (`AFPACKET_RX_BURST_BYTES`, 1 MiB), checked between its
/// system calls (one reads up to `RECV_BATCH` frames, as many as the pool has idle buffers):
/// - 40 frames of 60 000 bytes come as one `recvmmsg` of `RECV_BATCH` (more than the budget),
///   then the rest (without a budget: one burst of 40);
/// - 72 frames of 30 000 bytes: two calls of `RECV_BATCH` (the first, 961 344 bytes, under the
///   budget) up to the datapath's `max` of 64, then the rest (with the TAP's 256 KiB budget:
///   32, 32, 8).
///
/// Whole and in order either way.
#[test]
fn afpacket_receive_burst_ends_at_its_byte_budget() {
    root();
    let batch = sluice_ports::afpacket::RECV_BATCH;
    assert!(batch * (60_000 + 42) >= AFPACKET_RX_BURST_BYTES);
    afpacket_bursts("a", 60_000, 40, &[batch, 40 - batch]);
    assert!(batch * (30_000 + 42) < AFPACKET_RX_BURST_BYTES);
    assert!(batch * (30_000 + 42) >= RX_BURST_BYTES);
    afpacket_bursts("b", 30_000, 72, &[2 * batch, 72 - 2 * batch]);
}

/// Sends `frames` UDP datagrams of `len` bytes through a veth into an `AfPacketPort`, waits until
/// all are queued on its socket, reads them with a warm pool of 64 buffers and checks the burst
/// sizes against `want` and the frames' contents.
fn afpacket_bursts(tag: &str, len: usize, frames: usize, want: &[usize]) {
    let ns_a = Netns::create(&format!("slpbb{tag}a")).unwrap();
    let ns_b = Netns::create(&format!("slpbb{tag}b")).unwrap();
    let va = format!("va{}", unique_suffix());
    let vb = format!("vb{}", unique_suffix());
    let _veth = VethPair::create(&ns_a, &va, &ns_b, &vb, 65_000).unwrap();
    ns_b.run(&["ip", "addr", "add", "192.0.2.2/24", "dev", &vb])
        .unwrap();
    let neigh = [
        "ip",
        "neigh",
        "replace",
        "192.0.2.1",
        "lladdr",
        "02:00:00:00:01:01",
    ];
    ns_b.run(&[&neigh[..], &["dev", &vb]].concat()).unwrap();
    let mut port = ns_a
        .enter(|| AfPacketPort::open(&va, &AfPacketPortConfig::default()))
        .unwrap()
        .unwrap();
    send_datagrams(&ns_b, "192.0.2.2:0", "192.0.2.1:9", frames, len);

    // Every frame queued on the socket before the first read (the veth may hand them over in
    // ksoftirqd, after `send_to` returned): the namespace's only packet socket holds them all.
    let queued = frames * (len + 42);
    wait_until("the frames reach the socket", || {
        packet_socket_rmem(&ns_a) >= queued
    });
    // A warm pool (as the datapath's): the port reads as many frames per call as it has idle
    // buffers, up to RECV_BATCH.
    let mut pool = BufPool::new(65_536, 64);
    let warm: Vec<_> = (0..64).map(|_| pool.get()).collect();
    warm.into_iter().for_each(|b| pool.put(b));
    let (got, bursts) = recv_in_bursts(&mut port, &mut pool, frames);
    assert_eq!(bursts, want, "{frames} frames of {len} bytes");
    assert_datagrams(&got, len);
    assert_eq!(port.drops().rx_kernel, 0);
}

/// The bytes queued on the packet sockets of `ns` (the `Rmem` column of `/proc/net/packet`,
/// summed).
fn packet_socket_rmem(ns: &Netns) -> usize {
    let table = ns.run(&["cat", "/proc/net/packet"]).unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(6)?.parse::<usize>().ok())
        .sum()
}

/// Packets the root qdisc of `ifname` in `ns` has passed to the device (`tc -s qdisc`: the
/// first `Sent … bytes N pkt`).
fn qdisc_sent_packets(ns: &Netns, ifname: &str) -> usize {
    let out = ns
        .run(&["tc", "-s", "qdisc", "show", "dev", ifname])
        .unwrap();
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .windows(5)
        .find(|w| w[0] == "Sent" && w[2] == "bytes" && w[4] == "pkt")
        .and_then(|w| w[3].parse().ok())
        .unwrap_or(0)
}

/// Sends `n` UDP datagrams of `len` bytes (`payload(len, i)` for the i-th) from `from` to `to`
/// inside `ns`.
fn send_datagrams(ns: &Netns, from: &str, to: &str, n: usize, len: usize) {
    ns.enter(|| {
        let s = UdpSocket::bind(from)?;
        for i in 0..n {
            s.send_to(&payload(len, i as u8), to)?;
        }
        Ok::<_, io::Error>(())
    })
    .unwrap()
    .unwrap();
}

/// Waits (5 s at most, checking every 5 ms) until `done`; fails naming `what`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Receives `n` frames from `port` with `recv(…, 64)` calls: the frames, and how many each
/// call that returned some gave.
fn recv_in_bursts(
    port: &mut dyn Port,
    pool: &mut BufPool,
    n: usize,
) -> (Vec<PacketBuf>, Vec<usize>) {
    let mut got = Vec::new();
    let mut bursts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < n {
        assert!(Instant::now() < deadline, "{} of {n} frames", got.len());
        match port.recv(pool, &mut got, 64).unwrap() {
            0 => drop(wait_readable(&[port.fd().unwrap()], Duration::from_millis(100)).unwrap()),
            k => bursts.push(k),
        }
    }
    (got, bursts)
}

/// Every frame of `got` is an untagged IPv4/UDP frame carrying `payload(len, i)`, in order.
fn assert_datagrams(got: &[PacketBuf], len: usize) {
    for (i, b) in got.iter().enumerate() {
        assert_eq!(b.frame().len(), 42 + len);
        assert_eq!(b.frame()[42..], payload(len, i as u8)[..], "frame {i}");
    }
}
