//! Unit and property tests.

mod frames;
mod props;
mod rewrite;
mod state_table;
mod verify;

#[test]
fn ecn_is_refused_on_udp_gso_as_linux_refuses_it() {
    use crate::meta::{GsoType, OffloadMeta};
    let mut m = OffloadMeta::default();
    for t in [GsoType::UdpL4, GsoType::Udp] {
        assert!(m.set_gso(t, 1400, true).is_err(), "{t:?}");
        assert!(m.set_gso(t, 1400, false).is_ok(), "{t:?}");
    }
    for t in [GsoType::TcpV4, GsoType::TcpV6] {
        assert!(m.set_gso(t, 1448, true).is_ok(), "{t:?}");
        assert!(m.gso_ecn());
    }
}
