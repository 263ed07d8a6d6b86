//! Device state read straight from the kernel (rtnetlink and the ethtool ioctl) against what
//! `ip` and `ethtool` report (root only): the oracle is the programs, the code under test never
//! runs them.

use sluice_datapath::port::{Port, PortControl, PortError};
use sluice_offload::features::Feature;
use sluice_ports::netdev::NetDev;
use sluice_ports::netns::unique_suffix;
use sluice_ports::port_afpacket::{parse_ethtool_features, AfPacketControl, EthtoolFeature};
use sluice_ports::{AfPacketPort, AfPacketPortConfig, Netns, VethPair};
use sluice_testkit::root;

fn sorted(mut v: Vec<EthtoolFeature>) -> Vec<EthtoolFeature> {
    v.sort_by_key(|e| e.feature);
    v
}

/// What `ethtool -k IF` shows in `ns`, for the features Sluice knows.
fn ethtool_k(ns: &Netns, ifname: &str) -> Vec<EthtoolFeature> {
    sorted(parse_ethtool_features(
        &ns.run(&["ethtool", "-k", ifname]).unwrap(),
    ))
}

fn veth(prefix: &str) -> (Netns, Netns, VethPair) {
    let ns_a = Netns::create(&format!("{prefix}a")).unwrap();
    let ns_b = Netns::create(&format!("{prefix}b")).unwrap();
    let va = format!("va{}", unique_suffix());
    let vb = format!("vb{}", unique_suffix());
    let pair = VethPair::create(&ns_a, &va, &ns_b, &vb, 1500).unwrap();
    (ns_a, ns_b, pair)
}

#[test]
fn features_read_from_the_kernel_equal_ethtool_k() {
    root();
    let (ns_a, _ns_b, pair) = veth("slnd");
    let va = pair.a().to_string();
    let dev = ns_a.enter(|| NetDev::open(&va)).unwrap().unwrap();
    let ours = sorted(dev.features().unwrap());
    let oracle = ethtool_k(&ns_a, &va);
    assert!(oracle.len() > 20, "{oracle:?}");
    assert_eq!(ours, oracle);
    // Fixed and changeable, on and off, are all there.
    assert!(ours.iter().any(|e| e.fixed) && ours.iter().any(|e| !e.fixed));
    assert!(ours.iter().any(|e| e.on) && ours.iter().any(|e| !e.on));

    // Changed behind our back with ethtool -K: read again, still the same as the oracle.
    ns_a.run(&["ethtool", "-K", &va, "tso", "off", "gro", "on"])
        .unwrap();
    let ours = sorted(dev.features().unwrap());
    assert_eq!(ours, ethtool_k(&ns_a, &va));
    assert!(ours.iter().any(|e| e.feature == Feature::Tso && !e.on));
    assert!(ours.iter().any(|e| e.feature == Feature::RxGro && e.on));

    // Changed by us (ETHTOOL_SFEATURES), from this thread in the root namespace: the kernel
    // (ethtool -k) sees it.
    let after = sorted(dev.set_feature(Feature::Tso, true).unwrap());
    assert!(after.iter().any(|e| e.feature == Feature::Tso && e.on));
    assert_eq!(after, ethtool_k(&ns_a, &va));
    let after = sorted(dev.set_feature(Feature::TxCsumGeneric, false).unwrap());
    assert_eq!(after, ethtool_k(&ns_a, &va));
    // The kernel turned the dependent ones off with it (no segmentation without checksums).
    assert!(after.iter().any(|e| e.feature == Feature::Tso && !e.on));
}

#[test]
fn link_state_follows_ip_link_set() {
    root();
    let (ns_a, _ns_b, pair) = veth("slnl");
    let va = pair.a().to_string();
    let mut port = ns_a
        .enter(|| AfPacketPort::open(&va, &AfPacketPortConfig::default()))
        .unwrap()
        .unwrap();
    let d = port.device();
    assert_eq!(
        (d.mtu, d.gso_max_size, d.gso_max_segs),
        (1500, 65536, 65535)
    );

    ns_a.run(&[
        "ip",
        "link",
        "set",
        "dev",
        &va,
        "gso_max_size",
        "32768",
        "gso_max_segs",
        "100",
        "mtu",
        "1400",
    ])
    .unwrap();
    // The port keeps what it read until it reads again.
    assert_eq!(port.device().gso_max_size, 65536);
    port.reread().unwrap();
    let d = port.device();
    assert_eq!((d.mtu, d.gso_max_size, d.gso_max_segs), (1400, 32768, 100));

    // The control side reads the same, from any thread; the state goes to another port.
    let control = port.control().unwrap();
    let state = std::thread::spawn(move || control.read()).join().unwrap();
    let state = state.unwrap();
    assert_eq!(state.device, d);
    let mut dev = ns_a.enter(|| NetDev::open(&va)).unwrap().unwrap();
    let link = dev.link().unwrap();
    assert_eq!(
        (link.mtu, link.gso_max_size, link.gso_max_segs),
        (1400, 32768, 100)
    );
    assert!(link.oper_up);
    ns_a.run(&["ip", "link", "set", "dev", &va, "down"])
        .unwrap();
    assert!(!dev.link().unwrap().oper_up);
}

#[test]
fn errors_name_the_port_the_feature_and_the_errno() {
    root();
    let (ns_a, _ns_b, pair) = veth("slne");
    let va = pair.a().to_string();
    let control = ns_a.enter(|| AfPacketControl::open(&va)).unwrap().unwrap();
    let state = control.read().unwrap();
    // A feature the veth has fixed (as ethtool -k shows it).
    let fixed = ethtool_k(&ns_a, &va)
        .into_iter()
        .find(|e| e.fixed && !e.on)
        .expect("a veth has fixed-off features");
    let err = control.set_feature(fixed.feature, true).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PortError::Feature { feature, .. } if feature == fixed.feature));
    assert!(
        text.contains(fixed.feature.name()) && text.contains("fixed") && text.contains(&va),
        "{text}"
    );
    // Nothing changed.
    assert_eq!(control.read().unwrap(), state);

    // A device that does not exist: the errno and the name.
    let gone = format!("no{}", unique_suffix());
    let err = ns_a.enter(|| NetDev::open(&gone)).unwrap().unwrap_err();
    assert_eq!(err.raw_os_error(), None, "context is added: {err}");
    let text = err.to_string();
    assert!(
        text.contains(&gone) && text.contains("os error 19"),
        "{text}"
    );
}
