//! TAP: open, offload probing, and a frame round trip in both directions (root only).

use std::time::Duration;

use sluice_ports::afpacket::{AfPacketConfig, PacketSocket};
use sluice_ports::tap::*;
use sluice_ports::Netns;
use sluice_testkit::frames::*;
use sluice_testkit::root;

#[test]
fn tap_open_offload_probe_and_round_trip() {
    root();
    let ns = Netns::create("sltaptest").unwrap();
    let config = TapConfig {
        vnet_hdr_len: 12,
        offloads: TUN_F_ALL,
        ..TapConfig::default()
    };
    let mut tap = ns.enter(|| Tap::open("tt0", &config)).unwrap().unwrap();
    assert_eq!(tap.name(), "tt0");
    assert!(tap.ifindex() > 0);
    assert_eq!(tap.vnet_hdr_len(), 12);
    let base = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN | TUN_F_USO4 | TUN_F_USO6;
    assert_eq!(
        tap.offloads() & base,
        base,
        "accepted {:#x}",
        tap.offloads()
    );
    println!("TUN_F offloads accepted: {:#x}", tap.offloads());

    // An unknown bit is refused; the fallback keeps the rest.
    let accepted = tap
        .set_offloads(TUN_F_CSUM | TUN_F_TSO4 | 0x4000_0000)
        .unwrap();
    assert_eq!(accepted, TUN_F_CSUM | TUN_F_TSO4);
    assert_eq!(tap.offloads(), accepted);
    // USO is only accepted as a pair.
    let accepted = tap
        .set_offloads(TUN_F_CSUM | TUN_F_USO4 | TUN_F_USO6)
        .unwrap();
    assert_eq!(accepted, TUN_F_CSUM | TUN_F_USO4 | TUN_F_USO6);
    assert_eq!(tap.set_offloads(0).unwrap(), 0);
    assert!(
        tap.features().unwrap() & 0x4000 != 0,
        "IFF_VNET_HDR feature"
    );

    // A wrong header size is rejected before the kernel sees it.
    let frame = tcp4_frame(1, 1, &payload(100, 1), false);
    assert!(tap.write(&[0u8; 10], &frame).is_err());

    ns.link_up("tt0").unwrap();
    ns.wait_link_ready("tt0", Duration::from_secs(5)).unwrap();
    let capture = ns
        .enter(|| {
            PacketSocket::bind(
                "tt0",
                &AfPacketConfig {
                    vnet_hdr: false,
                    auxdata: true,
                    promisc: false,
                },
            )
        })
        .unwrap()
        .unwrap();
    capture.drain().unwrap();

    // Userspace → kernel: written to the TAP, seen on its ingress.
    let hdr = VnetHdr {
        flags: F_DATA_VALID,
        ..VnetHdr::default()
    }
    .encode(12);
    assert_eq!(tap.write(&hdr, &frame).unwrap(), 12 + frame.len());
    let mut buf = vec![0u8; 70000];
    let got = loop {
        let rx = capture
            .recv(&mut buf, Duration::from_secs(1))
            .unwrap()
            .expect("the frame written to the TAP is captured");
        if !rx.outgoing() {
            break rx;
        }
    };
    assert_eq!(got.frame(&buf), &frame[..]);

    // Kernel → userspace: sent on the interface, read from the TAP with a vnet header.
    let out = tcp4_frame(7, 2, &payload(200, 2), false);
    capture.send(None, &out).unwrap();
    tap.set_nonblocking(true).unwrap();
    let mut rbuf = vec![0u8; 70000];
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    let n = loop {
        match tap.read(&mut rbuf) {
            Ok(n) if rbuf[12..n] == out[..] => break n,
            Ok(_) => continue, // something else the kernel sent
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "frame never read back"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("read: {e}"),
        }
    };
    assert_eq!(n, 12 + out.len());
    let h = VnetHdr::decode(&rbuf[..12]);
    assert_eq!(h.gso_type, GSO_NONE);
}

#[test]
fn tap_rejects_bad_configs() {
    root();
    let bad = [
        TapConfig {
            vnet_hdr_len: 11,
            ..TapConfig::default()
        },
        TapConfig {
            offloads: TUN_F_CSUM,
            ..TapConfig::default()
        },
        TapConfig {
            napi_frags: true,
            ..TapConfig::default()
        },
    ];
    for config in bad {
        let err = Tap::open("x", &config).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{config:?}");
    }
}
