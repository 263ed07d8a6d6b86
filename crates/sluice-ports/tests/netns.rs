//! Namespaces: creation, commands inside, entering, and cleanup on drop and on panic (root
//! only).

use std::path::Path;

use sluice_ports::Netns;
use sluice_testkit::root;

fn exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

#[test]
fn netns_lifecycle() {
    root();
    let ns = Netns::create("slnstest").unwrap();
    let other = Netns::create("slnstest").unwrap();
    assert_ne!(ns.name(), other.name());
    assert!(ns
        .name()
        .starts_with(&format!("slnstest-{}-", std::process::id())));
    assert!(exists(ns.name()));

    // Commands run inside: only a loopback interface there; IPv6 is disabled.
    let links = ns.run(&["ip", "-o", "link"]).unwrap();
    assert_eq!(links.lines().count(), 1, "{links}");
    let v6 = ns
        .run(&["sysctl", "-n", "net.ipv6.conf.default.disable_ipv6"])
        .unwrap();
    assert_eq!(v6.trim(), "1");
    // Failures carry the command's standard error.
    let err = ns.run(&["ip", "link", "show", "nosuchif0"]).unwrap_err();
    assert!(err.to_string().contains("nosuchif0"), "{err}");

    // A link created inside is visible from a thread that entered, not from ours.
    ns.run(&[
        "ip", "link", "add", "nsx0", "type", "veth", "peer", "name", "nsx1",
    ])
    .unwrap();
    let index = ns.ifindex("nsx0").unwrap();
    assert!(index > 1);
    assert!(sluice_ports::netns::if_nametoindex("nsx0").is_err());

    let name = ns.name().to_owned();
    drop(ns);
    assert!(!exists(&name), "namespace removed on drop");
}

#[test]
fn netns_removed_when_a_test_panics() {
    root();
    let name = std::thread::spawn(|| {
        let ns = Netns::create("slnspanic").unwrap();
        let name = ns.name().to_owned();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _keep = ns;
            panic!("test failure while the namespace exists");
        }));
        assert!(result.is_err());
        name
    })
    .join()
    .unwrap();
    assert!(!exists(&name), "namespace removed while unwinding");
}

#[test]
fn enter_propagates_panics() {
    root();
    let ns = Netns::create("slnsenter").unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ns.enter(|| panic!("inside")).unwrap();
    }));
    assert!(r.is_err());
    assert_eq!(ns.enter(|| 7).unwrap(), 7);
}
