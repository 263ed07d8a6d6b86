//! Unit and property tests.

mod frames;
mod props;
mod rewrite;
mod state_table;
mod verify;

/// As Linux 6.18 (checked through the kernel oracle in sluice-offload's `gso_kernel` test): the
/// GSO ECN bit is refused with USO, accepted with UFO (fragments as without it) and TCP.
#[test]
fn ecn_is_refused_on_uso_as_linux_refuses_it() {
    use crate::meta::{GsoType, OffloadMeta};
    let mut m = OffloadMeta::default();
    assert!(m.set_gso(GsoType::UdpL4, 1400, true).is_err());
    assert!(m.set_gso(GsoType::UdpL4, 1400, false).is_ok());
    for t in [GsoType::Udp, GsoType::TcpV4, GsoType::TcpV6] {
        assert!(m.set_gso(t, 1448, true).is_ok(), "{t:?}");
        assert!(m.gso_ecn(), "{t:?}");
    }
}
