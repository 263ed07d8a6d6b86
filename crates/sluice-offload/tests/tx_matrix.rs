//! The transmit-preparation matrix, in the spirit of OVS's dpif-netdev offload tests:
//! {plain, 1 tag, 2 tags, VXLAN, Geneve, GRE} × {IPv4, IPv6} × {TCP, UDP} × {GSO or not} ×
//! {Partial, Good, Bad, Unknown} × seven device profiles. For every cell: the exact actions
//! (from an expectation table written independently of `tx_prepare`), the counters bumped, and
//! the bytes — what a device doing its part would put on the wire must verify (and a `Bad`
//! checksum must still be bad).

use sluice_testkit::tx_frames as builder;

use builder::{packet, Csum, Envelope, Ip, L4};
use sluice_coverage::Counter;
use sluice_offload::features::{Device, Features};
use sluice_offload::tx::{
    self, emulate_device, tx_prepare, TxOutcome, TxOutput, TxPacket, TxSteps,
};
use sluice_packet::verify::verify_frame;
use sluice_packet::Verdict;
use sluice_wire::ParseConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Profile {
    None,
    CsumOnly,
    IpCsumOnly,
    FullTso,
    TsoNoTunnel,
    TunnelNoOuterCsum,
    NoSg,
}

impl Profile {
    const ALL: [Profile; 7] = [
        Profile::None,
        Profile::CsumOnly,
        Profile::IpCsumOnly,
        Profile::FullTso,
        Profile::TsoNoTunnel,
        Profile::TunnelNoOuterCsum,
        Profile::NoSg,
    ];

    fn device(self) -> Device {
        let tso = Features::TSO | Features::TSO6 | Features::TSO_ECN | Features::USO;
        let csum = Features::TX_CSUM_GENERIC | Features::TX_SG;
        let f = match self {
            Profile::None => Features::NONE,
            Profile::CsumOnly => csum | Features::TX_CSUM_SCTP,
            Profile::IpCsumOnly => Features::TX_CSUM_IPV4 | Features::TX_SG,
            Profile::FullTso => {
                csum | tso
                    | Features::UDP_TNL
                    | Features::UDP_TNL_CSUM
                    | Features::GRE
                    | Features::GRE_CSUM
                    | Features::GSO_PARTIAL
                    | Features::VLAN_INSERT
            }
            Profile::TsoNoTunnel => csum | tso,
            Profile::TunnelNoOuterCsum => {
                csum | tso | Features::UDP_TNL | Features::GRE | Features::GSO_PARTIAL
            }
            Profile::NoSg => {
                Features::TX_CSUM_GENERIC
                    | tso
                    | Features::UDP_TNL
                    | Features::UDP_TNL_CSUM
                    | Features::GRE
            }
        };
        Device::new(f)
    }
}

/// The expectation table, stated per profile.
fn expect(p: Profile, e: Envelope, ip: Ip, gso: bool, c: Csum) -> TxSteps {
    let two_tags = e == Envelope::Tag2;
    // Can the device fill the innermost L4 checksum of this packet?
    let fills = match p {
        Profile::None => false,
        Profile::IpCsumOnly => ip == Ip::V4 && !two_tags,
        _ => true,
    };
    let csum = |fills: bool| {
        if fills {
            TxSteps::HW_CSUM
        } else {
            TxSteps::NONE
        }
    };
    if !gso {
        return match c {
            Csum::Partial if fills => TxSteps::HW_CSUM,
            Csum::Partial => TxSteps::SW_CSUM,
            _ => TxSteps::NONE,
        };
    }
    if c == Csum::Bad {
        return TxSteps::DROP;
    }
    let soft = TxSteps::SOFT_GSO | csum(fills);
    match p {
        Profile::None | Profile::CsumOnly | Profile::IpCsumOnly | Profile::NoSg => soft,
        Profile::FullTso if two_tags => soft,
        Profile::FullTso => TxSteps::HW_GSO,
        Profile::TsoNoTunnel if two_tags || e.tunnelled() => soft,
        Profile::TsoNoTunnel => TxSteps::HW_GSO,
        Profile::TunnelNoOuterCsum if two_tags => soft,
        // VXLAN carries an outer UDP checksum the device cannot compute: partial GSO.
        Profile::TunnelNoOuterCsum if e == Envelope::Vxlan => {
            TxSteps::PARTIAL_GSO | TxSteps::HW_CSUM
        }
        Profile::TunnelNoOuterCsum => TxSteps::HW_GSO,
    }
}

/// The transmit counters as this test's thread moved them (other tests of this binary run at
/// the same time on other threads).
fn counters() -> Vec<(&'static str, u64)> {
    tx::COUNTERS
        .iter()
        .map(|c: &&Counter| (c.name(), c.this_thread().expect("a per-thread counter")))
        .collect()
}

fn delta(
    before: &[(&'static str, u64)],
    after: &[(&'static str, u64)],
) -> Vec<(&'static str, u64)> {
    before
        .iter()
        .zip(after)
        .filter(|(b, a)| a.1 != b.1)
        .map(|(b, a)| (b.0, a.1 - b.1))
        .collect()
}

#[test]
fn matrix() {
    let mut out = TxOutput::new();
    let cfg = ParseConfig::DEFAULT;
    let mut cells = 0;
    for p in Profile::ALL {
        let dev = p.device();
        for e in Envelope::ALL {
            for ip in [Ip::V4, Ip::V6] {
                for l4 in [L4::Tcp, L4::Udp] {
                    for gso in [false, true] {
                        for c in Csum::ALL {
                            cells += 1;
                            let what = format!("{p:?} {e:?} {ip:?} {l4:?} gso={gso} {c:?}");
                            let (frame, meta, _) = packet(e, ip, l4, gso, c);
                            let before = counters();
                            let r = tx_prepare(&TxPacket::new(&frame, meta), &dev, &mut out);
                            let d = delta(&before, &counters());
                            let want = expect(p, e, ip, gso, c);
                            assert_eq!(r.actions(), want, "{what}: {r:?}");
                            check_counters(&what, r, &d, gso, c);
                            check_bytes(&what, &frame, r, &out, &cfg, gso, c);
                        }
                    }
                }
            }
        }
    }
    assert_eq!(cells, 7 * 6 * 2 * 2 * 2 * 4);
}

fn get(d: &[(&'static str, u64)], name: &str) -> u64 {
    d.iter().find(|x| x.0 == name).map_or(0, |x| x.1)
}

fn check_counters(what: &str, r: TxOutcome, d: &[(&'static str, u64)], gso: bool, c: Csum) {
    let a = r.actions();
    assert_eq!(get(d, "tx_prepared"), 1, "{what}: {d:?}");
    assert_eq!(
        get(d, "sw_csum_completed"),
        u64::from(a.contains(TxSteps::SW_CSUM)),
        "{what}: {d:?}"
    );
    assert_eq!(
        get(d, "hw_gso"),
        u64::from(a.contains(TxSteps::HW_GSO)),
        "{what}: {d:?}"
    );
    assert_eq!(
        get(d, "soft_gso"),
        u64::from(a.contains(TxSteps::SOFT_GSO)),
        "{what}: {d:?}"
    );
    assert_eq!(
        get(d, "soft_gso_segments"),
        if a.contains(TxSteps::SOFT_GSO) { 3 } else { 0 },
        "{what}: {d:?}"
    );
    assert_eq!(
        get(d, "partial_gso"),
        u64::from(a.contains(TxSteps::PARTIAL_GSO)),
        "{what}: {d:?}"
    );
    assert_eq!(
        get(d, "gso_bad_csum_drops"),
        u64::from(a.contains(TxSteps::DROP)),
        "{what}: {d:?}"
    );
    assert_eq!(get(d, "oversize_drops"), 0, "{what}: {d:?}");
    assert_eq!(get(d, "linearized"), 0, "{what}: {d:?}");
    let seeded = a.contains(TxSteps::HW_GSO) && c != Csum::Partial;
    assert_eq!(
        get(d, "gso_csum_seeded"),
        u64::from(seeded),
        "{what}: {d:?}"
    );
    let unchanged = matches!(r, TxOutcome::Unchanged { .. });
    assert_eq!(
        get(d, "tx_unchanged"),
        u64::from(unchanged),
        "{what}: {d:?}"
    );
    if !gso && c != Csum::Partial {
        assert!(unchanged, "{what}: nothing to do must not copy");
    }
}

fn check_bytes(
    what: &str,
    input: &[u8],
    r: TxOutcome,
    out: &TxOutput,
    cfg: &ParseConfig,
    gso: bool,
    c: Csum,
) {
    let mut wire = Vec::new();
    match r {
        TxOutcome::Dropped(_) => return,
        TxOutcome::Unchanged { work, .. } => {
            emulate_device(input, &work, cfg, &mut wire).unwrap_or_else(|e| panic!("{what}: {e}"));
        }
        TxOutcome::Prepared { frames, .. } => {
            assert_eq!(frames, out.len(), "{what}");
            for (bytes, work) in out.frames() {
                emulate_device(bytes, work, cfg, &mut wire)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
    let mut payload = 0;
    for f in &wire {
        let l = sluice_wire::parse(f).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        let v = verify_frame(f, &l);
        let inner = l.inner.is_some();
        let innermost_l4 = if inner { v.inner_l4 } else { v.l4 };
        if c == Csum::Bad {
            assert_eq!(
                innermost_l4,
                Verdict::Bad,
                "{what}: a bad checksum must stay bad"
            );
        } else {
            assert_eq!(innermost_l4, Verdict::Good, "{what}: {v:?}");
            if inner && !v.l4_absent {
                assert_eq!(v.l4, Verdict::Good, "{what}: outer {v:?}");
            }
        }
        assert_ne!(v.ip, Verdict::Bad, "{what}: {v:?}");
        assert_ne!(v.inner_ip, Verdict::Bad, "{what}: {v:?}");
        let h = l.innermost();
        payload += h.l3_end.unwrap() - h.payload.unwrap();
        if gso {
            let l3 = l.outer.l3.unwrap();
            assert!(f.len() - l3 <= 1500, "{what}: segment of {} bytes", f.len());
        }
    }
    assert_eq!(wire.len(), if gso { 3 } else { 1 }, "{what}");
    assert_eq!(payload, if gso { 3000 } else { 200 }, "{what}");
}
