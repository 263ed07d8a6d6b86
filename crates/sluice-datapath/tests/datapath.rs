//! The datapath loop with in-memory ports: forwarding by rule, drops counted, software GSO for
//! what the egress device lacks, GRO per port (switchable at run time), features changed at run
//! time, and no buffer allocation in steady state.

use sluice_datapath::{Datapath, DatapathConfig, MemPort, MemPortHandle, PortOptions};
use sluice_flow::{parse_rule, BatchMode, FlowTable, PortNames, TableConfig};
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::tx::emulate_device;
use sluice_packet::verify::{verify_frame, Verdict};
use sluice_packet::{CsumStatus, GsoType, OffloadMeta, Slot};
use sluice_testkit::segments::{stream, Seg};
use sluice_testkit::tx_frames::uso_rx_meta;
use sluice_wire::ParseConfig;

fn names() -> PortNames {
    let mut n = PortNames::new();
    n.insert("a", 1);
    n.insert("b", 2);
    n
}

fn table(rules: &[&str]) -> FlowTable {
    let mut t = FlowTable::new(TableConfig::default());
    let names = names();
    let parsed = rules
        .iter()
        .map(|r| parse_rule(r, &names).expect("rule parses"))
        .collect();
    for r in t.insert_batch(parsed, BatchMode::AllOrNothing) {
        r.expect("rule inserted");
    }
    t
}

fn with_ports(
    t: &FlowTable,
    a: Device,
    b: Device,
    gro_a: bool,
) -> (Datapath, MemPortHandle, MemPortHandle) {
    with_ports_cfg(t, a, b, gro_a, DatapathConfig::default())
}

fn with_ports_cfg(
    t: &FlowTable,
    a: Device,
    b: Device,
    gro_a: bool,
    cfg: DatapathConfig,
) -> (Datapath, MemPortHandle, MemPortHandle) {
    let mut dp = Datapath::new(t.reader(), cfg);
    let (pa, ha) = MemPort::new("a", a);
    let (pb, hb) = MemPort::new("b", b);
    dp.add_port(
        1,
        Box::new(pa),
        PortOptions {
            gro: gro_a,
            ..PortOptions::default()
        },
    )
    .expect("add a");
    dp.add_port(2, Box::new(pb), PortOptions::default())
        .expect("add b");
    (dp, ha, hb)
}

/// Receive metadata as a NIC with rx checksum offload reports it: everything verified.
fn good_meta(frame: &[u8]) -> OffloadMeta {
    let layout = sluice_wire::parse(frame).expect("parses");
    let mut m = OffloadMeta::from_layout(&layout);
    let v = verify_frame(frame, &layout);
    m.apply_verdicts(&v);
    m
}

fn all_verify(frame: &[u8]) {
    let layout = sluice_wire::parse_with(frame, &ParseConfig::DEFAULT).expect("sent frame parses");
    let v = verify_frame(frame, &layout);
    for (what, verdict) in [
        ("ip", v.ip),
        ("l4", v.l4),
        ("inner ip", v.inner_ip),
        ("inner l4", v.inner_l4),
    ] {
        assert_ne!(
            verdict,
            Verdict::Bad,
            "a sent frame's {what} checksum does not verify: {v:?}"
        );
    }
    assert_eq!(v.l4, Verdict::Good, "the L4 checksum is filled: {v:?}");
}

#[test]
fn forwards_by_rule_and_counts_what_no_rule_matches() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let (mut dp, ha, hb) = with_ports(
        &t,
        Device::new(Features::NONE),
        Device::new(Features::NONE),
        false,
    );
    let frames: Vec<Vec<u8>> = stream(&Seg::tcp4(1000, 1448), 5, 1448)
        .iter()
        .map(Seg::build)
        .collect();
    for f in &frames {
        ha.inject_frame(f);
    }
    // Nothing matches traffic from b.
    hb.inject_frame(&frames[0]);
    dp.poll_once();
    let sent = hb.take_sent();
    assert_eq!(sent.len(), 5);
    for ((got, work), want) in sent.iter().zip(&frames) {
        assert_eq!(got, want, "forwarded unchanged");
        assert_eq!(work.gso, None);
    }
    assert!(ha.take_sent().is_empty(), "nothing goes back to a");
    let sa = dp.stats(1).expect("stats a");
    let sb = dp.stats(2).expect("stats b");
    assert_eq!(sa.rx_packets, 5);
    assert_eq!(sb.tx_packets, 5);
    assert_eq!(sb.rx_no_match, 1, "the unmatched frame is counted");
}

#[test]
fn drop_rules_and_bad_outputs_are_counted() {
    let t = table(&[
        "prio 10 in_port a eth_type ipv4 ip_proto tcp action drop",
        "prio 5 in_port a action output:7",
    ]);
    let (mut dp, ha, hb) = with_ports(
        &t,
        Device::new(Features::NONE),
        Device::new(Features::NONE),
        false,
    );
    ha.inject_frame(&Seg::tcp4(1, 100).build());
    ha.inject_frame(&Seg::udp4(100, 1).build());
    // This thread's count: other tests of this binary poll datapaths at the same time.
    let bad_output = || {
        sluice_datapath::datapath::DP_BAD_OUTPUT
            .this_thread()
            .expect("a per-thread counter")
    };
    let before = bad_output();
    dp.poll_once();
    assert!(hb.take_sent().is_empty());
    assert_eq!(
        dp.stats(1).expect("stats").rx_dropped_by_rule,
        1,
        "the TCP frame"
    );
    assert_eq!(
        bad_output() - before,
        1,
        "the UDP frame's output to a missing port"
    );
}

fn super_packet() -> (Vec<u8>, OffloadMeta, Vec<u8>) {
    // One 43-segment TCP GSO packet with a partial checksum, as a TAP hands it over.
    let seg = Seg::tcp4(7, 1448 * 43);
    let frame = seg.build();
    let mut meta = good_meta(&frame);
    meta.set_gso(GsoType::TcpV4, 1448, false).expect("gso");
    (frame, meta, seg.payload.clone())
}

#[test]
fn software_gso_only_for_what_the_egress_device_lacks() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let (frame, meta, payload) = super_packet();

    // b cannot segment: 43 frames, each verifies, payload in order.
    let (mut dp, ha, hb) = with_ports(
        &t,
        Device::new(Features::ALL),
        Device::new(Features::NONE),
        false,
    );
    ha.inject(&frame, meta);
    dp.poll_once();
    let sent = hb.take_sent();
    assert_eq!(sent.len(), 43);
    let mut got = Vec::new();
    for (f, w) in &sent {
        assert!(f.len() <= 1514);
        assert_eq!(w.gso, None);
        all_verify(f);
        let l = sluice_wire::parse(f).expect("parses");
        got.extend_from_slice(&f[l.outer.payload.expect("payload")..]);
    }
    assert_eq!(got, payload);

    // b has TSO: the super-packet goes out whole, the device does the work.
    let tso = Features::TSO | Features::TX_CSUM_GENERIC | Features::TX_SG;
    let (mut dp, ha, hb) = with_ports(&t, Device::new(Features::ALL), Device::new(tso), false);
    ha.inject(&frame, meta);
    dp.poll_once();
    let sent = hb.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].1.gso.map(|g| (g.0, g.1)),
        Some((GsoType::TcpV4, 1448))
    );

    // Turning TSO off at run time moves the work to software from the next packet on.
    dp.set_feature(2, Feature::Tso, false)
        .expect("feature change");
    ha.inject(&frame, meta);
    dp.poll_once();
    assert_eq!(hb.take_sent().len(), 43);
}

#[test]
fn gro_per_port_merges_and_can_be_switched_off() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let tso = Features::TSO | Features::TX_CSUM_GENERIC | Features::TX_SG;
    let (mut dp, ha, hb) = with_ports(&t, Device::new(Features::ALL), Device::new(tso), true);
    let segs = stream(&Seg::tcp4(1000, 1448), 20, 1448);
    for s in &segs {
        let f = s.build();
        ha.inject(&f, good_meta(&f));
    }
    dp.poll_once();
    let sent = hb.take_sent();
    assert_eq!(sent.len(), 1, "20 segments of one flow become one packet");
    let (f, w) = &sent[0];
    assert_eq!(w.gso.map(|g| (g.0, g.1)), Some((GsoType::TcpV4, 1448)));
    let l = sluice_wire::parse(f).expect("parses");
    let want: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(&f[l.outer.payload.expect("payload")..], &want[..]);
    let st = dp.stats(1).expect("stats");
    assert_eq!(st.gro.merged_segments, 19);
    // The merged packet's TCP checksum is left partial for the TSO device (as Linux's GRO
    // leaves it): what the device puts on the wire is the 20 segments, checksums good.
    let csum_start = l.outer.l4.expect("l4") as u16;
    assert_eq!(w.l4_csum, Some((csum_start, 16)), "partial TCP checksum");
    let mut wire = Vec::new();
    emulate_device(f, w, &ParseConfig::DEFAULT, &mut wire).expect("the device takes it");
    assert_eq!(wire.len(), 20);
    let mut got = Vec::new();
    for seg in &wire {
        all_verify(seg);
        let sl = sluice_wire::parse(seg).expect("a wire segment parses");
        got.extend_from_slice(&seg[sl.outer.payload.expect("payload")..]);
    }
    assert_eq!(got, want, "the wire carries the stream");

    dp.set_gro(1, false).expect("gro off");
    for s in &segs {
        let f = s.build();
        ha.inject(&f, good_meta(&f));
    }
    dp.poll_once();
    assert_eq!(hb.take_sent().len(), 20, "GRO off: frames pass one by one");
}

/// A GRO port's burst (the engine's zero-copy burst mode): a super-frame the device merged
/// already and a lone UDP datagram go out as they came, a flow's segments merged, each
/// flow's bytes in order; over many bursts the datapath allocates no more buffers (every
/// received buffer passed on whole goes back to the pool, none is lost or copied anew).
#[test]
fn gro_burst_passes_frames_through_and_merges_flows() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let tso = Features::TSO | Features::TX_CSUM_GENERIC | Features::TX_SG;
    let (mut dp, ha, hb) = with_ports(&t, Device::new(Features::ALL), Device::new(tso), true);
    let (big, big_meta, big_payload) = super_packet();
    let segs = stream(&Seg::tcp4(2000, 1448), 10, 1448);
    let udp = Seg::udp4(300, 1).build();
    let want: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
    let mut allocated = Vec::new();
    for round in 0..40 {
        ha.inject(&big, big_meta);
        for (k, s) in segs.iter().enumerate() {
            let f = s.build();
            ha.inject(&f, good_meta(&f));
            if k == 4 {
                ha.inject(&udp, good_meta(&udp));
            }
        }
        dp.poll_once();
        let sent = hb.take_sent();
        assert_eq!(
            sent.len(),
            3,
            "round {round}: super-frame, datagram, merged flow"
        );
        let find = |len: usize| sent.iter().find(|(f, _)| f.len() == len);
        let (f, w) = find(big.len()).expect("the super-frame");
        // Byte for byte but its TCP checksum, left partial for the TSO device.
        let l = sluice_wire::parse(f).expect("parses");
        let csum = l.outer.l4.expect("l4") + 16;
        assert!(f[..csum] == big[..csum] && f[csum + 2..] == big[csum + 2..]);
        assert_eq!(w.gso.map(|g| (g.0, g.1)), Some((GsoType::TcpV4, 1448)));
        assert!(f[l.outer.payload.expect("payload")..] == big_payload[..]);
        let mut wire = Vec::new();
        emulate_device(f, w, &ParseConfig::DEFAULT, &mut wire).expect("the device takes it");
        assert_eq!(wire.len(), 43);
        wire.iter().for_each(|seg| all_verify(seg));
        let (f, _) = find(udp.len()).expect("the datagram");
        assert!(f == &udp);
        let (f, w) = sent
            .iter()
            .find(|(f, _)| f.len() != big.len() && f.len() != udp.len())
            .expect("the merged flow");
        assert_eq!(w.gso.map(|g| (g.0, g.1)), Some((GsoType::TcpV4, 1448)));
        let l = sluice_wire::parse(f).expect("parses");
        assert!(f[l.outer.payload.expect("payload")..] == want[..]);
        let mut wire = Vec::new();
        emulate_device(f, w, &ParseConfig::DEFAULT, &mut wire).expect("the device takes it");
        assert_eq!(wire.len(), 10);
        wire.iter().for_each(|seg| all_verify(seg));
        allocated.push(dp.buffers_allocated());
    }
    let st = dp.stats(1).expect("stats");
    assert_eq!(st.gro.merged_segments, 40 * 9);
    assert_eq!(
        allocated[5..].iter().max(),
        allocated[5..].iter().min(),
        "no buffer allocated after warm-up: {allocated:?}"
    );
}

/// With GRO holding packets across polls (`max_age` 2: the copying mode), a flow's segments
/// received over two polls leave as one packet once it is old enough, every byte in order;
/// `holds_packets` says so while they are held (a switch thread keeps polling then).
#[test]
fn gro_holding_across_polls_merges_and_flushes_by_age() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let tso = Features::TSO | Features::TX_CSUM_GENERIC | Features::TX_SG;
    let mut cfg = DatapathConfig::default();
    cfg.gro.max_age = 2;
    let (mut dp, ha, hb) =
        with_ports_cfg(&t, Device::new(Features::ALL), Device::new(tso), true, cfg);
    let segs = stream(&Seg::tcp4(5000, 1448), 12, 1448);
    for (k, s) in segs.iter().enumerate() {
        let f = s.build();
        ha.inject(&f, good_meta(&f));
        if k == 5 {
            assert!(!dp.holds_packets());
            dp.poll_once();
            assert!(dp.holds_packets(), "six segments held");
        }
    }
    dp.poll_once();
    let mut sent = hb.take_sent();
    for _ in 0..4 {
        if !sent.is_empty() {
            break;
        }
        dp.poll_once();
        sent = hb.take_sent();
    }
    assert_eq!(sent.len(), 1, "held over two polls, one packet");
    assert!(!dp.holds_packets(), "flushed by age");
    let (f, w) = &sent[0];
    assert_eq!(w.gso.map(|g| (g.0, g.1)), Some((GsoType::TcpV4, 1448)));
    let l = sluice_wire::parse(f).expect("parses");
    let want: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
    assert!(f[l.outer.payload.expect("payload")..] == want[..]);
    assert_eq!(dp.stats(1).expect("stats").gro.merged_segments, 11);
}

/// The per-port GRO choices: VXLAN segments merge by their inner flow only with
/// `gro_tunnel`; plain UDP datagrams merge only with `gro_udp`. Changing them through
/// `set_options` takes effect on the next batch.
#[test]
fn gro_tunnel_and_udp_choices_per_port() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let (mut dp, ha, hb) = with_ports(
        &t,
        Device::new(Features::ALL),
        Device::new(Features::ALL),
        true,
    );
    let vxlan = Seg {
        outer: Some(sluice_testkit::segments::outer_vxlan()),
        ..Seg::tcp4(1000, 1400)
    };
    let tunnelled = stream(&vxlan, 10, 1400);
    let datagrams: Vec<Seg> = (0..10).map(|n| Seg::udp4(1200, n)).collect();
    let run = |dp: &mut Datapath, segs: &[Seg]| {
        for s in segs {
            let f = s.build();
            ha.inject(&f, good_meta(&f));
        }
        dp.poll_once();
        hb.take_sent().len()
    };
    // Defaults: tunnel GRO on, UDP GRO off.
    assert_eq!(run(&mut dp, &tunnelled), 1, "VXLAN segments merge");
    assert_eq!(run(&mut dp, &datagrams), 10, "UDP passes unmerged");
    let mut o = dp.options(1).expect("options");
    assert!(o.gro && o.gro_tunnel && !o.gro_udp);
    o.gro_tunnel = false;
    o.gro_udp = true;
    dp.set_options(1, o).expect("set options");
    assert_eq!(run(&mut dp, &datagrams), 1, "UDP GRO merges the datagrams");
    // Without tunnel GRO a VXLAN frame is plain UDP to the engine: with UDP GRO on it could
    // merge as outer datagrams; turn UDP GRO off to see them pass one by one.
    o.gro_udp = false;
    dp.set_options(1, o).expect("set options");
    assert_eq!(run(&mut dp, &tunnelled), 10, "tunnel GRO off: no merge");
    assert_eq!(dp.options(1), Some(o));
}

/// Device overrides apply to the port's device as the datapath uses it, and survive a
/// feature change (which re-reads the port's own device).
#[test]
fn device_limits_override_the_port_device() {
    use sluice_offload::features::DeviceLimits;
    let t = table(&["prio 10 in_port a action output:b"]);
    let tso = Features::TSO | Features::TX_CSUM_GENERIC | Features::TX_SG;
    let (mut dp, _ha, _hb) = with_ports(&t, Device::new(tso), Device::new(tso), false);
    let mut o = dp.options(2).expect("options");
    o.limits = DeviceLimits {
        vlan_depth: Some(2),
        envelope: Some(8),
        gso_max_size: Some(16384),
        gso_max_segs: Some(10),
    };
    dp.set_options(2, o).expect("set options");
    let d = dp.device(2).expect("device");
    assert_eq!(
        (d.vlan_depth, d.envelope, d.gso_max_size, d.gso_max_segs),
        (2, 8, 16384, 10)
    );
    dp.set_feature(2, Feature::Tso, false).expect("feature");
    let d = dp.device(2).expect("device");
    assert!(!d.features.has(Feature::Tso));
    assert_eq!((d.vlan_depth, d.gso_max_size), (2, 16384));
    o.limits = DeviceLimits::NONE;
    dp.set_options(2, o).expect("set options");
    assert_eq!(dp.device(2).expect("device").gso_max_size, 65536);
}

#[test]
fn a_bad_checksum_is_forwarded_bad_never_fixed() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let (mut dp, ha, hb) = with_ports(
        &t,
        Device::new(Features::ALL),
        Device::new(Features::NONE),
        true,
    );
    let mut f = Seg::tcp4(1, 500).build();
    let last = f.len() - 1;
    f[last] ^= 0xff;
    ha.inject_frame(&f);
    let layout = sluice_wire::parse(&f).expect("parses");
    let mut meta = OffloadMeta::from_layout(&layout);
    meta.apply_verdicts(&verify_frame(&f, &layout));
    assert_eq!(meta.status(Slot::OuterL4), CsumStatus::Bad);
    ha.inject(&f, meta);
    dp.poll_once();
    let sent = hb.take_sent();
    assert_eq!(sent.len(), 2);
    for (g, _) in &sent {
        assert_eq!(g, &f, "the corrupted frame goes out as it came");
    }
}

#[test]
fn buffers_are_recycled_in_steady_state() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let (mut dp, ha, hb) = with_ports(
        &t,
        Device::new(Features::ALL),
        Device::new(Features::NONE),
        false,
    );
    let frames: Vec<Vec<u8>> = stream(&Seg::tcp4(1, 1448), 64, 1448)
        .iter()
        .map(Seg::build)
        .collect();
    let run = |dp: &mut Datapath| {
        for f in &frames {
            ha.inject_frame(f);
        }
        dp.poll_once();
        assert_eq!(hb.take_sent().len(), 64);
    };
    run(&mut dp);
    let warm = dp.buffers_allocated();
    for _ in 0..50 {
        run(&mut dp);
    }
    assert_eq!(dp.buffers_allocated(), warm, "no new buffers once warm");
}

#[test]
fn ports_can_be_removed_and_numbers_reused() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let (mut dp, _ha, _hb) = with_ports(
        &t,
        Device::new(Features::NONE),
        Device::new(Features::NONE),
        false,
    );
    let (p, _h) = MemPort::new("x", Device::new(Features::NONE));
    assert!(dp.add_port(2, Box::new(p), PortOptions::default()).is_err());
    assert!(dp.remove_port(2).is_some());
    let (p, _h) = MemPort::new("x", Device::new(Features::NONE));
    dp.add_port(2, Box::new(p), PortOptions::default())
        .expect("number 2 is free again");
    assert_eq!(dp.port_numbers().collect::<Vec<_>>(), vec![1, 2]);
}

#[test]
fn port_numbers_anywhere_in_u32_cost_no_table_sized_by_them() {
    // Numbers at the top of the range: forwarding works and nothing is sized by them (a table
    // indexed by port number would need 4 billion slots here).
    let mut names = PortNames::new();
    names.insert("a", u32::MAX);
    names.insert("b", 4_000_000_000);
    let mut t = FlowTable::new(TableConfig::default());
    let r = parse_rule("prio 10 in_port a action output:b", &names).expect("rule parses");
    t.insert(r).expect("inserted");
    let mut dp = Datapath::new(t.reader(), DatapathConfig::default());
    let (pa, ha) = MemPort::new("a", Device::new(Features::NONE));
    let (pb, hb) = MemPort::new("b", Device::new(Features::NONE));
    dp.add_port(u32::MAX, Box::new(pa), PortOptions::default())
        .expect("add a");
    dp.add_port(4_000_000_000, Box::new(pb), PortOptions::default())
        .expect("add b");
    let (pc, _hc) = MemPort::new("c", Device::new(Features::NONE));
    dp.add_port(7, Box::new(pc), PortOptions::default())
        .expect("add c");
    assert_eq!(
        dp.port_numbers().collect::<Vec<_>>(),
        vec![7, 4_000_000_000, u32::MAX],
        "ascending"
    );
    let f = Seg::tcp4(1, 100).build();
    ha.inject_frame(&f);
    dp.poll_once();
    assert_eq!(hb.take_sent().len(), 1);
    assert_eq!(dp.stats(u32::MAX).map(|s| s.rx_packets), Some(1));
    assert!(dp.remove_port(4_000_000_000).is_some());
    ha.inject_frame(&f);
    dp.poll_once();
    assert!(hb.take_sent().is_empty(), "a removed port gets nothing");
}

/// A port whose device vanished: every receive fails with `errno`; counts its calls.
struct Vanished {
    errno: i32,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl sluice_datapath::Port for Vanished {
    fn name(&self) -> &str {
        "gone"
    }
    fn kind(&self) -> &'static str {
        "test"
    }
    fn device(&self) -> Device {
        Device::new(Features::NONE)
    }
    fn changeable(&self) -> Features {
        Features::NONE
    }
    fn set_feature(&mut self, _: Feature, _: bool) -> Result<(), sluice_datapath::PortError> {
        Ok(())
    }
    fn recv(
        &mut self,
        _: &mut sluice_datapath::BufPool,
        _: &mut Vec<sluice_datapath::PacketBuf>,
        _: usize,
    ) -> Result<usize, sluice_datapath::PortError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(sluice_datapath::PortError::io(
            "read",
            std::io::Error::from_raw_os_error(self.errno),
        ))
    }
    fn send(
        &mut self,
        _: &[u8],
        _: &sluice_offload::tx::DeviceWork,
    ) -> Result<(), sluice_datapath::PortError> {
        panic!("a down port is never sent to");
    }
}

#[test]
fn a_port_whose_device_vanished_goes_down_is_not_polled_and_comes_back() {
    let t = table(&["prio 10 in_port a action output:b"]);
    let mut dp = Datapath::new(t.reader(), DatapathConfig::default());
    let (pa, ha) = MemPort::new("a", Device::new(Features::NONE));
    dp.add_port(1, Box::new(pa), PortOptions::default())
        .expect("add a");
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gone = Vanished {
        errno: 77, // EBADFD: a TAP whose device was deleted
        calls: std::sync::Arc::clone(&calls),
    };
    dp.add_port(2, Box::new(gone), PortOptions::default())
        .expect("add b");
    assert_eq!(dp.is_down(2), Some(false));
    for _ in 0..10 {
        dp.poll_once();
    }
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "polled once, then not"
    );
    assert_eq!(dp.is_down(2), Some(true));
    assert_eq!(dp.down_ports(), vec![2]);
    let mut fds = Vec::new();
    dp.fds(&mut fds);
    assert!(fds.is_empty(), "a down port's descriptor is not waited on");
    // Frames for it are dropped and counted, not sent.
    ha.inject_frame(&Seg::tcp4(1, 100).build());
    dp.poll_once();
    assert_eq!(dp.stats(2).map(|s| s.tx_errors), Some(1));
    // A new port in its place brings it back.
    let (pb, hb) = MemPort::new("b", Device::new(Features::NONE));
    dp.replace_port(2, Box::new(pb)).expect("replace");
    assert_eq!(dp.is_down(2), Some(false));
    ha.inject_frame(&Seg::tcp4(1, 100).build());
    dp.poll_once();
    assert_eq!(hb.take_sent().len(), 1);
    // Any other receive error is counted but leaves the port up.
    let other = Vanished {
        errno: 5, // EIO
        calls: std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    };
    dp.add_port(3, Box::new(other), PortOptions::default())
        .expect("add");
    dp.poll_once();
    assert_eq!(dp.is_down(3), Some(false));
    assert_eq!(dp.stats(3).map(|s| s.rx_errors), Some(1));
}

#[test]
fn a_malformed_frame_in_a_burst_is_dropped_and_counted_the_rest_goes_on() {
    let t = table(&["prio 10 in_port a eth_type ipv4 ip_proto tcp action output:b"]);
    for gro in [false, true] {
        let (mut dp, ha, hb) = with_ports(
            &t,
            Device::new(Features::ALL),
            Device::new(Features::NONE),
            gro,
        );
        let segs = stream(&Seg::tcp4(1000, 1448), 20, 1448);
        let good: Vec<Vec<u8>> = segs.iter().map(Seg::build).collect();
        // A runt: an Ethernet header saying IPv4 and nothing after it.
        let mut runt = good[0][..14].to_vec();
        runt.extend_from_slice(&[0x45, 0]);
        // A frame cut inside its TCP header (its IPv4 total length past the end), with the
        // metadata of a whole segment that asks for segmentation (as an inconsistent
        // virtio_net_hdr would).
        let cut = good[0][..40].to_vec();
        let mut cut_meta = good_meta(&good[0]);
        cut_meta
            .set_gso(GsoType::TcpV4, 100, false)
            .expect("a GSO request on a TCP/IPv4 meta");
        for (i, f) in good.iter().enumerate() {
            if i == 7 {
                ha.inject(&runt, OffloadMeta::default());
            }
            if i == 13 {
                ha.inject(&cut, cut_meta);
            }
            ha.inject(f, good_meta(f));
        }
        dp.poll_once();
        let sent = hb.take_sent();
        // Every good byte arrives, in order, in frames that verify.
        let mut payload = Vec::new();
        for (f, w) in &sent {
            assert_eq!(w.gso, None, "b has no TSO: segmented in software");
            all_verify(f);
            let l = sluice_wire::parse(f).expect("a sent frame parses");
            payload.extend_from_slice(&f[l.outer.payload.expect("payload")..]);
        }
        let want: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
        assert_eq!(payload, want, "gro {gro}: the good segments all go through");
        assert_eq!(sent.len(), 20, "gro {gro}");
        let sa = dp.stats(1).expect("stats a");
        let sb = dp.stats(2).expect("stats b");
        assert_eq!(sa.rx_packets, 22, "gro {gro}");
        assert_eq!(
            sa.rx_no_match, 2,
            "gro {gro}: neither the runt nor the cut frame parses as the rule's IPv4/TCP"
        );
        assert_eq!(sb.tx_prepare_drops, 0, "gro {gro}");
    }
}

/// The VXLAN hop of `sluice demo --hop vxlan` in memory: `a` (every offload) → `encap` →
/// `x` (a veth's packet socket: segments plain UDP but not tunnels, MTU 1600 for the 50 bytes of
/// VXLAN); `y` (same device, GRO on) → `decap` → `b` (TSO). Returns the table (keep it), the
/// datapath and the handles of `a`, `x`, `y`, `b`.
fn vxlan_hop() -> (FlowTable, Datapath, [MemPortHandle; 4]) {
    tunnel_hop("vxlan")
}

/// [`vxlan_hop`] with the tunnel `kind` (`vxlan` or `geneve`).
fn tunnel_hop(kind: &str) -> (FlowTable, Datapath, [MemPortHandle; 4]) {
    tunnel_hop_with(kind, "decap,output:b")
}

/// [`tunnel_hop`] with the actions of the rule for what `y` receives.
fn tunnel_hop_with(kind: &str, y_actions: &str) -> (FlowTable, Datapath, [MemPortHandle; 4]) {
    let mut names = PortNames::new();
    for (n, p) in [("a", 1), ("x", 2), ("y", 3), ("b", 4)] {
        names.insert(n, p);
    }
    let mut t = FlowTable::new(TableConfig::default());
    let rules = [
        format!("prio 10 in_port a action encap:{kind}:id=42:src=198.51.100.1:dst=198.51.100.2,output:x"),
        format!("prio 10 in_port y enc_key_id 42 action {y_actions}"),
    ]
    .iter()
    .map(|r| parse_rule(r, &names).expect("rule parses"))
    .collect();
    for r in t.insert_batch(rules, BatchMode::AllOrNothing) {
        r.expect("rule goes in");
    }
    let mut dp = Datapath::new(t.reader(), DatapathConfig::default());
    let veth = Features::TSO | Features::USO | Features::TX_SG | Features::TX_CSUM_GENERIC;
    let hop = Device {
        mtu: 1600,
        ..Device::new(veth)
    };
    let tso = Features::TSO | Features::TX_CSUM_GENERIC | Features::TX_SG;
    let gro = PortOptions {
        gro: true,
        ..PortOptions::default()
    };
    let ports = [
        ("a", Device::new(Features::ALL), PortOptions::default()),
        ("x", hop, PortOptions::default()),
        ("y", hop, gro),
        ("b", Device::new(tso), PortOptions::default()),
    ];
    let handles = core::array::from_fn(|i| {
        let (name, dev, opts) = ports[i];
        let (port, handle) = MemPort::new(name, dev);
        dp.add_port(i as u32 + 1, Box::new(port), opts)
            .expect("add port");
        handle
    });
    (t, dp, handles)
}

/// Receives what was injected at a tunnel hop's `y`: one pass, then one more with nothing new,
/// which finishes the packets GRO merged from packed frames (the split keeps them for one more
/// pass, in case a super-frame's next packed frame comes in it).
fn receive_at_hop(dp: &mut Datapath) {
    dp.poll_once();
    dp.poll_once();
}

/// The VXLAN hop of `sluice demo --hop vxlan`, in memory: TSO super-frames from `a` are
/// encapsulated and leave `x` (a device that segments plain UDP but not tunnels, like a veth's
/// packet socket) as UDP-GSO frames of VXLAN datagrams; those frames, received on `y` (GRO
/// on) with the metadata a packet socket's `virtio_net_hdr` gives, are split, merged back by
/// their inner flow and decapsulated to `b` (TSO): the inner stream arrives whole, in order, in
/// super-frames, and the device's segments all verify. Over many rounds no buffer is
/// allocated after warm-up.
#[test]
fn vxlan_hop_packs_splits_merges_and_decaps_in_memory() {
    let (_t, mut dp, [ha, hx, hy, hb]) = vxlan_hop();
    let mut allocated = Vec::new();
    for round in 0..20u32 {
        let seq = 1 + round * 1448 * 43 * 2;
        let supers: Vec<_> = (0..2u32)
            .map(|k| {
                let seg = Seg::tcp4(seq + k * 1448 * 43, 1448 * 43);
                let f = seg.build();
                let mut m = good_meta(&f);
                m.set_gso(GsoType::TcpV4, 1448, false).expect("gso");
                (f, m, seg.payload)
            })
            .collect();
        for (f, m, _) in &supers {
            ha.inject(f, *m);
        }
        dp.poll_once();
        let packed = hx.take_sent();
        assert!(
            !packed.is_empty(),
            "round {round}: x sent the tunnel traffic"
        );
        for (f, w) in &packed {
            let (gso, size, _) = w.gso.expect("a UDP-GSO frame");
            assert_eq!(gso, GsoType::UdpL4);
            let (start, off) = w.l4_csum.expect("outer UDP checksum left to the device");
            let meta = uso_rx_meta(f, start, off, size);
            hy.inject(f, meta);
        }
        receive_at_hop(&mut dp);
        let out = hb.take_sent();
        let got = inner_payload(&out);
        assert!(
            out.len() <= 4,
            "round {round}: {} packets, merged",
            out.len()
        );
        let want: Vec<u8> = supers.iter().flat_map(|s| s.2.clone()).collect();
        assert!(
            got == want,
            "round {round}: the inner stream, whole and in order"
        );
        allocated.push(dp.buffers_allocated());
    }
    assert!(dp.stats(3).expect("y").gro.merged_segments > 0);
    assert_eq!(
        allocated[5..].iter().max(),
        allocated[5..].iter().min(),
        "no buffer allocated after warm-up: {allocated:?}"
    );
}

/// A TCP super-frame of `segments` segments injected at `a`, and the two frames `x` sends for
/// it (its datagrams pass the 64 KiB an IP packet holds: 43 go in the first), each with the
/// metadata a packet socket gives on the far side: the first packed (UDP-GSO), the second
/// packed too, or a lone datagram with its outer UDP checksum left partial (44 segments).
fn two_packed_frames(
    dp: &mut Datapath,
    a: &MemPortHandle,
    x: &MemPortHandle,
    segments: usize,
) -> (Seg, Vec<(Vec<u8>, OffloadMeta)>) {
    use sluice_packet::virtio::{HdrFormat, VirtioNetHdr, F_NEEDS_CSUM};
    let seg = Seg::tcp4(1, 1448 * segments);
    let packed: Vec<_> = send_super(dp, a, x, &seg)
        .into_iter()
        .map(|(f, w)| {
            let (start, off) = w.l4_csum.expect("outer UDP checksum left to the device");
            let m = match w.gso {
                Some((_, size, _)) => uso_rx_meta(&f, start, off, size),
                None => {
                    let hdr = VirtioNetHdr {
                        flags: F_NEEDS_CSUM,
                        csum_start: start,
                        csum_offset: off,
                        ..VirtioNetHdr::default()
                    };
                    let layout = sluice_wire::parse(&f).expect("parses");
                    hdr.to_meta(HdrFormat::V0, &f, &layout)
                        .expect("a valid header")
                }
            };
            (f, m)
        })
        .collect();
    assert_eq!(packed.len(), 2, "two frames");
    assert_eq!(packed[1].1.gso_type() == GsoType::UdpL4, segments > 44);
    (seg, packed)
}

/// The inner payload of what `b` sent, in order, after checking that every segment a device
/// makes of it verifies and that it was decapsulated.
fn inner_payload(out: &[sluice_datapath::port::SentFrame]) -> Vec<u8> {
    let mut got = Vec::new();
    for (f, w) in out {
        let mut wire = Vec::new();
        emulate_device(f, w, &ParseConfig::DEFAULT, &mut wire).expect("the device takes it");
        wire.iter().for_each(|s| all_verify(s));
        let l = sluice_wire::parse(f).expect("parses");
        assert!(l.tunnel.is_none(), "decapsulated");
        got.extend_from_slice(&f[l.outer.payload.expect("payload")..]);
    }
    got
}

/// When a pass receives only the first of a super-frame's two packed frames, what GRO merged
/// from it waits for the next pass instead of leaving as half a super-frame; the second frame
/// joins it there, and the inner stream leaves as one packet. (Before, each half left on its
/// own: ~1.5 writes into the egress TAP per super-frame on the live VXLAN hop.) The wait is
/// bounded: a pass that receives nothing finishes what is held.
#[test]
fn a_super_frame_packed_in_two_frames_leaves_as_one_packet_across_passes() {
    let (_t, mut dp, [ha, hx, hy, hb]) = vxlan_hop();
    // The second frame packed (two datagrams), or a lone datagram.
    for segments in [45, 44] {
        let (seg, packed) = two_packed_frames(&mut dp, &ha, &hx, segments);
        hy.inject(&packed[0].0, packed[0].1);
        dp.poll_once();
        assert!(
            hb.take_sent().is_empty(),
            "the first half waits for the rest"
        );
        assert!(dp.holds_packets());
        hy.inject(&packed[1].0, packed[1].1);
        dp.poll_once();
        let out = hb.take_sent();
        assert_eq!(out.len(), 1, "{segments} segments: one packet");
        assert!(
            inner_payload(&out) == seg.payload,
            "the whole stream, in order"
        );
        assert!(!dp.holds_packets(), "finished by the pass after it began");
    }

    // Half a super-frame and then nothing: the next pass sends it.
    let (seg, packed) = two_packed_frames(&mut dp, &ha, &hx, 45);
    hy.inject(&packed[0].0, packed[0].1);
    dp.poll_once();
    assert!(hb.take_sent().is_empty());
    dp.poll_once();
    let out = hb.take_sent();
    assert_eq!(out.len(), 1);
    let got = inner_payload(&out);
    assert!(
        !got.is_empty() && seg.payload.starts_with(&got),
        "the first half"
    );
    assert!(!dp.holds_packets());
}

/// A frame that cannot join, received on the pass after a packed frame whose merged packet is
/// held (here the next segment of the same inner flow, as a VXLAN datagram of its own with
/// outer UDP checksum 0, which GRO never holds): the held packet leaves first, so the flow is
/// not reordered. Removing the port sends what it holds.
#[test]
fn a_held_packet_leaves_before_the_next_burst_and_when_its_port_is_removed() {
    let (_t, mut dp, [ha, hx, hy, hb]) = vxlan_hop();
    let (seg, packed) = two_packed_frames(&mut dp, &ha, &hx, 45);
    let (second, meta) = &packed[1];
    let (start, size) = (
        usize::from(meta.csum_start()),
        usize::from(meta.segment_size()),
    );
    let hdr = start + 8;
    // The second frame's first datagram as a frame of its own: its lengths and IPv4 header
    // checksum set for one datagram, outer UDP checksum 0 (allowed for VXLAN over IPv4).
    let mut lone = second[..hdr + size].to_vec();
    let ip = 14;
    let ip_len = u16::try_from(20 + 8 + size).expect("fits");
    lone[ip + 2..ip + 4].copy_from_slice(&ip_len.to_be_bytes());
    lone[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
    let sum = !sluice_testkit::tx_frames::ocsum(&[&lone[ip..ip + 20]]);
    lone[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    let udp_len = u16::try_from(8 + size).expect("fits");
    lone[start + 4..start + 6].copy_from_slice(&udp_len.to_be_bytes());
    lone[start + 6..start + 8].copy_from_slice(&[0, 0]);
    let lone_meta = good_meta(&lone);

    hy.inject(&packed[0].0, packed[0].1);
    dp.poll_once();
    assert!(dp.holds_packets());
    hy.inject(&lone, lone_meta);
    dp.poll_once();
    let out = hb.take_sent();
    assert_eq!(out.len(), 2, "the held packet, then the lone segment");
    let got = inner_payload(&out);
    assert!(
        seg.payload.starts_with(&got) && got.len() > 1448 * 20,
        "the stream's first part, in order"
    );

    hy.inject(&packed[0].0, packed[0].1);
    dp.poll_once();
    assert!(dp.holds_packets());
    assert!(dp.remove_port(3).is_some());
    let got = inner_payload(&hb.take_sent());
    assert!(
        !got.is_empty() && seg.payload.starts_with(&got),
        "sent, not dropped"
    );
}

/// What `x` sends for the TCP super-frame `seg` (segments of 1448 bytes) injected at `a`, in one
/// pass.
fn send_super(
    dp: &mut Datapath,
    a: &MemPortHandle,
    x: &MemPortHandle,
    seg: &Seg,
) -> Vec<sluice_datapath::port::SentFrame> {
    let f = seg.build();
    let mut m = good_meta(&f);
    m.set_gso(GsoType::TcpV4, 1448, false).expect("gso");
    a.inject(&f, m);
    dp.poll_once();
    x.take_sent()
}

/// The one packed frame `x` sends for the TCP super-frame `seg` (segments of 1448 bytes)
/// injected at `a`: its bytes, its datagram size (`gso_size`), and where its outer UDP
/// checksum, left to the device, starts and sits.
struct Packed {
    frame: Vec<u8>,
    size: u16,
    start: u16,
    off: u16,
}

fn pack_one(dp: &mut Datapath, a: &MemPortHandle, x: &MemPortHandle, seg: &Seg) -> Packed {
    let mut sent = send_super(dp, a, x, seg);
    assert_eq!(sent.len(), 1, "one packed frame per super-frame");
    let (frame, w) = sent.remove(0);
    let (_, size, _) = w.gso.expect("UDP-GSO");
    let (start, off) = w.l4_csum.expect("outer UDP checksum left to the device");
    Packed {
        frame,
        size,
        start,
        off,
    }
}

/// A hostile packed frame: one VXLAN datagram of a UDP-GSO frame (the first, or one in the
/// middle) carries UDP over IPv4 or IPv6, the rest TCP/IPv4 segments; after the decap a rule
/// rewrites the destination port, which it finds through the packet's metadata. Each packet
/// leaves GRO with its own metadata, so neither GRO nor the rewrite takes the UDP one for TCP,
/// its IPv6 header for IPv4, or the other way round: what leaves is the UDP datagram and the TCP
/// stream (less the replaced segment), each with the new port, in packets whose checksums a
/// device fills at the right place, and every segment it makes verifies.
#[test]
fn a_mixed_packed_tunnel_frame_keeps_each_packets_own_metadata() {
    for (at, v6) in [(0usize, false), (2, false), (2, true)] {
        let (_t, mut dp, [ha, hx, hy, hb]) =
            tunnel_hop_with("vxlan", "decap,set_tp_dst:7777,output:b");
        // One packed frame of a 20-segment TCP super-frame.
        let seg = Seg::tcp4(1, 1448 * 20);
        let Packed {
            mut frame,
            size,
            start,
            off,
        } = pack_one(&mut dp, &ha, &hx, &seg);
        let hdr = usize::from(start) + 8;
        let unit = usize::from(size);
        // Unit `at` (VXLAN header + inner TCP segment) replaced by the VXLAN header + an inner
        // UDP datagram of exactly the same length.
        let ip_len = if v6 { 40 } else { 20 };
        let inner_udp = Seg {
            v6,
            ..Seg::udp4(unit - 8 - 14 - ip_len - 8, 1)
        }
        .build();
        assert_eq!(inner_udp.len(), unit - 8);
        let u = hdr + at * unit;
        frame[u + 8..u + unit].copy_from_slice(&inner_udp);
        let meta = uso_rx_meta(&frame, start, off, size);
        hy.inject(&frame, meta);
        receive_at_hop(&mut dp);
        let out = hb.take_sent();
        assert!(!out.is_empty());
        let mut tcp_payload = Vec::new();
        let mut udp = Vec::new();
        for (f, w) in &out {
            let mut wire = Vec::new();
            emulate_device(f, w, &ParseConfig::DEFAULT, &mut wire).expect("the device takes it");
            wire.iter().for_each(|s| all_verify(s));
            let l = sluice_wire::parse(f).expect("parses");
            assert!(l.tunnel.is_none(), "unit {at}: decapsulated");
            let l4 = l.outer.l4.expect("L4");
            assert_eq!(
                f[l4 + 2..l4 + 4],
                7777u16.to_be_bytes(),
                "unit {at}: port rewritten"
            );
            let payload = &f[l.outer.payload.expect("payload")..];
            match l.outer.l4_proto {
                Some(6) => tcp_payload.extend_from_slice(payload),
                Some(17) => udp.push(payload.to_vec()),
                p => panic!("unit {at}: protocol {p:?}"),
            }
        }
        let l = sluice_wire::parse(&inner_udp).expect("parses");
        let want_udp = inner_udp[l.outer.payload.expect("payload")..].to_vec();
        assert_eq!(
            udp,
            [want_udp],
            "unit {at}: the UDP datagram's payload, once"
        );
        let want = [&seg.payload[..at * 1448], &seg.payload[(at + 1) * 1448..]].concat();
        assert!(
            tcp_payload == want,
            "unit {at}: the TCP stream less its replaced segment, in order"
        );
    }
}

/// A packed frame whose VXLAN datagrams alternate between two inner TCP flows: the receiving
/// port splits it in place, each datagram's outer headers written over the end of the one
/// before once GRO has taken (copied) that one, while GRO holds a packet of each flow (the
/// split numbers the outer IPv4 IDs datagram by datagram, so a flow's outer IDs skip one and,
/// as in Linux, its packets do not merge). Both inner streams arrive whole and in order, so no
/// datagram was read after its last bytes were reused.
#[test]
fn a_packed_frame_of_two_interleaved_flows_is_split_in_place_intact() {
    let (_t, mut dp, [ha, hx, hy, hb]) = vxlan_hop();
    const UNITS: usize = 6;
    let segs = [40000u16, 40001].map(|sport| Seg {
        sport,
        ..Seg::tcp4(1, 1448 * UNITS)
    });
    let [a, b] = [&segs[0], &segs[1]].map(|seg| pack_one(&mut dp, &ha, &hx, seg));
    assert_eq!(b.size, a.size, "same datagram size");
    let (fa, fb, size, start, off) = (&a.frame, &b.frame, a.size, a.start, a.off);
    let hdr = usize::from(start) + 8;
    let unit = usize::from(size);
    assert_eq!(
        (fa.len() - hdr, fb.len() - hdr),
        (UNITS * unit, UNITS * unit)
    );
    // Flow A's outer headers, then A0 B0 A1 B1 …; the outer lengths and IPv4 header checksum
    // fixed for the longer frame.
    let mut frame = fa[..hdr].to_vec();
    for k in 0..UNITS {
        frame.extend_from_slice(&fa[hdr + k * unit..hdr + (k + 1) * unit]);
        frame.extend_from_slice(&fb[hdr + k * unit..hdr + (k + 1) * unit]);
    }
    let (ip, udp) = (14, usize::from(start));
    let ip_len = u16::try_from(frame.len() - ip).expect("under 64 KiB");
    frame[ip + 2..ip + 4].copy_from_slice(&ip_len.to_be_bytes());
    frame[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
    let sum = frame[ip..ip + 20]
        .chunks(2)
        .fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    frame[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    let udp_len = u16::try_from(frame.len() - udp).expect("under 64 KiB");
    frame[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
    let meta = uso_rx_meta(&frame, start, off, size);
    hy.inject(&frame, meta);
    receive_at_hop(&mut dp);
    let out = hb.take_sent();
    let mut got = [Vec::new(), Vec::new()];
    for (f, w) in &out {
        let mut wire = Vec::new();
        emulate_device(f, w, &ParseConfig::DEFAULT, &mut wire).expect("the device takes it");
        wire.iter().for_each(|s| all_verify(s));
        let l = sluice_wire::parse(f).expect("parses");
        assert!(l.tunnel.is_none(), "decapsulated");
        let l4 = l.outer.l4.expect("TCP");
        let flow = usize::from(u16::from_be_bytes([f[l4], f[l4 + 1]]) == 40001);
        got[flow].extend_from_slice(&f[l.outer.payload.expect("payload")..]);
    }
    for (flow, seg) in segs.iter().enumerate() {
        assert!(
            got[flow] == seg.payload,
            "flow {flow}: its stream whole and in order"
        );
    }
    assert_eq!(dp.stats(3).expect("y").gro.frames_in, 2 * UNITS as u64);
}

/// A UDP-GSO frame of tunnel datagrams that cannot be split (a `gso_size` of 4 bytes: more
/// datagrams than USO allows) in the same burst as one that can: the first is dropped and counted
/// (`rx_uso_drops`, and not in `rx_uso_frames`), the other's stream still arrives whole.
#[test]
fn an_unsplittable_packed_frame_is_counted_and_the_burst_goes_on() {
    let (_t, mut dp, [ha, hx, hy, hb]) = vxlan_hop();
    let seg = Seg::tcp4(1, 1448 * 8);
    let Packed {
        frame,
        size,
        start,
        off,
    } = pack_one(&mut dp, &ha, &hx, &seg);
    hy.inject(&frame, uso_rx_meta(&frame, start, off, 4));
    hy.inject(&frame, uso_rx_meta(&frame, start, off, size));
    receive_at_hop(&mut dp);
    let st = dp.stats(3).expect("y");
    assert_eq!((st.rx_packets, st.rx_uso_drops, st.rx_errors), (2, 1, 0));
    assert_eq!((st.rx_uso_frames, st.rx_uso_datagrams), (1, 8));
    let mut got = Vec::new();
    for (f, _) in hb.take_sent() {
        let l = sluice_wire::parse(&f).expect("parses");
        got.extend_from_slice(&f[l.outer.payload.expect("payload")..]);
    }
    assert!(got == seg.payload, "the splittable frame's stream, whole");
}

/// A packed frame of Geneve datagrams in which one datagram (in the middle) carries an 8-byte
/// option and an inner UDP datagram 8 bytes shorter: its inner frame starts 8 bytes later than
/// its neighbours'. Each datagram is parsed for its own metadata, so the decap cuts that one at
/// its own offset: the UDP datagram leaves whole, and the TCP stream (less the replaced
/// segment) in order.
#[test]
fn a_geneve_datagram_with_its_own_options_is_decapsulated_at_its_own_offset() {
    let (_t, mut dp, [ha, hx, hy, hb]) = tunnel_hop("geneve");
    let seg = Seg::tcp4(1, 1448 * 6);
    let Packed {
        mut frame,
        size,
        start,
        off,
    } = pack_one(&mut dp, &ha, &hx, &seg);
    let hdr = usize::from(start) + 8;
    let unit = usize::from(size);
    let at = 2;
    let u = hdr + at * unit;
    assert_eq!(frame[u] & 0x3f, 0, "no Geneve options from the encap");
    // Geneve header with opt_len 2 (words), then one option (class 0x0101, type 1, 4 bytes of
    // data), then an inner UDP datagram that fills the rest of the unit.
    frame[u] = 2;
    frame[u + 8..u + 16].copy_from_slice(&[0x01, 0x01, 0x01, 0x01, 0xde, 0xad, 0xbe, 0xef]);
    let inner_udp = Seg::udp4(unit - 16 - 14 - 20 - 8, 1).build();
    assert_eq!(inner_udp.len(), unit - 16);
    frame[u + 16..u + unit].copy_from_slice(&inner_udp);
    hy.inject(&frame, uso_rx_meta(&frame, start, off, size));
    receive_at_hop(&mut dp);
    let mut tcp_payload = Vec::new();
    let mut udp = Vec::new();
    for (f, w) in hb.take_sent() {
        let mut wire = Vec::new();
        emulate_device(&f, &w, &ParseConfig::DEFAULT, &mut wire).expect("the device takes it");
        let l = sluice_wire::parse(&f).expect("parses");
        assert!(l.tunnel.is_none(), "decapsulated");
        match l.outer.l4_proto {
            Some(6) => tcp_payload.extend_from_slice(&f[l.outer.payload.expect("payload")..]),
            Some(17) => udp.push(wire.concat()),
            p => panic!("protocol {p:?}"),
        }
    }
    assert_eq!(
        udp,
        [inner_udp],
        "the UDP datagram, decapsulated at its own offset"
    );
    let want = [&seg.payload[..at * 1448], &seg.payload[(at + 1) * 1448..]].concat();
    assert!(
        tcp_payload == want,
        "the TCP stream less its replaced segment, in order"
    );
}
