//! The datapath loop per received packet, for callgrind (`bench/callgrind_counts.sh datapath`):
//! in-memory ports, a source that copies prepared frames into pooled buffers (as a kernel read
//! does) and parses each one as a real port does at receive (`rx_prepare`, whose layout the
//! buffer then carries; since 2026-11-27 — counts from before had no receive parse), and a sink
//! that takes what is sent without copying it, so that what is counted is the datapath's own
//! work: receive bookkeeping and parse, GRO, classification, actions, transmit preparation and
//! software GSO.
//!
//! Scenarios (each one burst of frames on port `a` per poll, forwarded to port `b`):
//! - `small`: 64 UDP/IPv4 datagrams of 64 payload bytes, 64 flows, GRO off, a table of 9 rules
//!   of different masks; `b` has every offload (no transmit work).
//! - `many`: as `small` with 8 192 flows (128 bursts of 64, in turn): twice the exact-match
//!   cache's entries, so most lookups go to the classifier.
//! - `tcp_gso`: 44 TCP/IPv4 segments of 1448 bytes of one flow, GRO on `a`; `b` has no offload,
//!   so the merged packet is segmented and checksummed in software.
//! - `tcp_vlan`: as `tcp_gso` with `push_vlan` before the output, `b` with every offload (TSO),
//!   so the merged packet leaves whole, tagged.
//! - `tso_vlan`: 4 TCP/IPv4 super-frames of 43 × 1448 bytes of one flow (GSO requests, as a
//!   TAP or a veth's packet socket hands them over), GRO on `a` (they pass through it),
//!   `push_vlan`, `b` with every offload: a VLAN hop's receiving side. Per received packet =
//!   per 62 KiB super-frame.
//! - `vxlan_rx`: a VXLAN hop's receiving side: the UDP-GSO frames of VXLAN datagrams that a
//!   sending switch packs two TSO super-frames into (made once, at setup, by a datapath with
//!   an `encap` rule and a port that segments plain UDP only), received on `a` with the
//!   metadata a packet socket's `virtio_net_hdr` gives, GRO on (split, merged by the inner
//!   flow), `decap`, `b` with TSO. Per received packet = per packed frame.
//! - `vxlan_tx`: a VXLAN hop's sending side: 4 TSO super-frames of 43 × 1448 bytes per poll,
//!   `encap`, `b` a device that segments plain UDP but not tunnels (MTU 1600), so each is
//!   segmented in software and packed as UDP-GSO frames. Per super-frame.
//!
//! Usage: `datapath profile SCENARIO POLLS` (untimed; prints the packets received), or
//! `datapath [POLLS]` to time every scenario (wall clock, noisy on a shared machine).

use sluice_datapath::buf::BufPool;
use sluice_datapath::{Datapath, DatapathConfig, PacketBuf, Port, PortError, PortOptions};
use sluice_flow::{parse_rule, BatchMode, FlowTable, PortNames, TableConfig};
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::tx::DeviceWork;
use sluice_packet::verify::verify_frame;
use sluice_packet::OffloadMeta;
use sluice_testkit::segments::{stream, Seg};
use sluice_testkit::tx_frames::uso_rx_meta;
use sluice_wire::ParseConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A port that receives the next of its bursts of frames on every call (round robin).
struct Source {
    bursts: Vec<Vec<(Vec<u8>, OffloadMeta)>>,
    next: usize,
    device: Device,
}

impl Port for Source {
    sluice_datapath::port_identity!("memory", |_s| "src");

    fn changeable(&self) -> Features {
        Features::NONE
    }

    fn set_feature(&mut self, _: Feature, _: bool) -> Result<(), PortError> {
        Ok(())
    }

    fn recv(
        &mut self,
        pool: &mut BufPool,
        out: &mut Vec<PacketBuf>,
        max: usize,
    ) -> sluice_datapath::RecvResult {
        let mut n = 0;
        let burst = self.bursts.get(self.next).map_or(&[][..], Vec::as_slice);
        self.next = (self.next + 1) % self.bursts.len().max(1);
        for (frame, meta) in burst.iter().take(max) {
            let mut b = pool.get();
            b.room_mut()[..frame.len()].copy_from_slice(frame);
            b.set_len(frame.len());
            // The parse a real port makes at receive (`rx_prepare`: the layout is kept with the
            // buffer), then the scenario's own metadata (its checksum statuses).
            let parsed = sluice_datapath::port::rx_prepare(&mut b, None, &ParseConfig::DEFAULT);
            std::hint::black_box(parsed.is_ok());
            b.meta = *meta;
            out.push(b);
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, _: &[u8], _: &DeviceWork) -> Result<(), PortError> {
        Ok(())
    }
}

/// A port that counts the frames and bytes sent to it.
struct Sink {
    device: Device,
    frames: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl Port for Sink {
    sluice_datapath::port_identity!("memory", |_s| "sink");

    fn changeable(&self) -> Features {
        Features::NONE
    }

    fn set_feature(&mut self, _: Feature, _: bool) -> Result<(), PortError> {
        Ok(())
    }

    fn recv(
        &mut self,
        _: &mut BufPool,
        _: &mut Vec<PacketBuf>,
        _: usize,
    ) -> sluice_datapath::RecvResult {
        Ok(0)
    }

    fn send(&mut self, frame: &[u8], _: &DeviceWork) -> Result<(), PortError> {
        self.frames.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

fn verified(frame: Vec<u8>) -> (Vec<u8>, OffloadMeta) {
    let layout = sluice_wire::parse(&frame).expect("the bench frames parse");
    let mut m = OffloadMeta::from_layout(&layout);
    m.apply_verdicts(&verify_frame(&frame, &layout));
    (frame, m)
}

/// `n` TCP/IPv4 super-frames of 43 × 1448 bytes of one flow, in sequence, verified, with a TSO
/// request (as a TAP or a packet socket hands them over).
fn super_frames(n: u32) -> Vec<(Vec<u8>, OffloadMeta)> {
    (0..n)
        .map(|k| {
            let (f, mut m) = verified(Seg::tcp4(1 + k * 1448 * 43, 1448 * 43).build());
            m.set_gso(sluice_packet::GsoType::TcpV4, 1448, false)
                .expect("a GSO request");
            (f, m)
        })
        .collect()
}

/// The UDP-GSO frames of VXLAN datagrams a sending switch makes of two TSO super-frames (an
/// `encap` rule, out of a port that segments plain UDP but not tunnels, MTU 1600), each with
/// the metadata its `virtio_net_hdr` gives a receiving packet socket.
fn packed_vxlan() -> Vec<(Vec<u8>, OffloadMeta)> {
    use sluice_datapath::{MemPort, PortOptions};
    let mut names = PortNames::new();
    names.insert("a", 1);
    names.insert("x", 2);
    let rule =
        "prio 10 in_port a action encap:vxlan:id=42:src=198.51.100.1:dst=198.51.100.2,output:x";
    let mut table = FlowTable::new(TableConfig::default());
    let parsed = vec![parse_rule(rule, &names).expect("the encap rule parses")];
    for r in table.insert_batch(parsed, BatchMode::AllOrNothing) {
        r.expect("the encap rule goes in");
    }
    let mut dp = Datapath::new(table.reader(), DatapathConfig::default());
    let veth = Features::TSO | Features::USO | Features::TX_SG | Features::TX_CSUM_GENERIC;
    let (pa, ha) = MemPort::new("a", Device::new(Features::ALL));
    let (px, hx) = MemPort::new(
        "x",
        Device {
            mtu: 1600,
            ..Device::new(veth)
        },
    );
    dp.add_port(1, Box::new(pa), PortOptions::default())
        .expect("add a");
    dp.add_port(2, Box::new(px), PortOptions::default())
        .expect("add x");
    for (f, m) in super_frames(2) {
        ha.inject(&f, m);
    }
    dp.poll_once();
    hx.take_sent()
        .into_iter()
        .map(|(f, w)| {
            let (_, size, _) = w.gso.expect("packed as UDP-GSO frames");
            let (start, off) = w.l4_csum.expect("the outer UDP checksum left partial");
            let m = uso_rx_meta(&f, start, off, size);
            (f, m)
        })
        .collect()
}

struct Scenario {
    dp: Datapath,
    frames: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    per_poll: usize,
    _table: FlowTable,
}

fn scenario(name: &str) -> Scenario {
    let mut names = PortNames::new();
    names.insert("a", 1);
    names.insert("b", 2);
    type Bursts = Vec<Vec<(Vec<u8>, OffloadMeta)>>;
    let flows: u16 = if name == "many" { 8192 } else { 64 };
    let (rules, bursts, gro, out_dev): (Vec<&str>, Bursts, bool, Device) = match name {
        "small" | "many" => (
            vec![
                "prio 50 in_port a eth_type ipv4 ip_proto tcp dst_port 22 action drop",
                "prio 45 in_port a eth_type ipv4 ip_proto udp dst_port 53 action drop",
                "prio 40 in_port a eth_type ipv6 action drop",
                "prio 35 in_port a eth_type ipv4 src_ip 10.0.0.0/8 action drop",
                "prio 30 in_port a eth_type ipv4 dst_ip 172.16.0.0/12 action drop",
                "prio 25 in_port b action output:a",
                "prio 20 in_port a eth_type ipv4 ip_proto udp dst_port 5201 action output:b",
                "prio 15 in_port a eth_type arp action output:b",
                "prio 10 in_port a action drop",
            ],
            (0..flows)
                .map(|i| {
                    let mut s = Seg::udp4(64, u32::from(i));
                    s.sport = 10000 + i;
                    verified(s.build())
                })
                .collect::<Vec<_>>()
                .chunks(64)
                .map(<[_]>::to_vec)
                .collect(),
            false,
            Device::new(Features::ALL),
        ),
        "tcp_gso" | "tcp_vlan" => (
            if name == "tcp_gso" {
                vec!["prio 10 in_port a action output:b"]
            } else {
                vec!["prio 10 in_port a action push_vlan:802.1q:100,output:b"]
            },
            vec![stream(&Seg::tcp4(1, 1448), 44, 1448)
                .iter()
                .map(|s| verified(s.build()))
                .collect()],
            true,
            if name == "tcp_gso" {
                Device::new(Features::NONE)
            } else {
                Device::new(Features::ALL)
            },
        ),
        "tso_vlan" => (
            vec!["prio 10 in_port a action push_vlan:802.1q:100,output:b"],
            vec![super_frames(4)],
            true,
            Device::new(Features::ALL),
        ),
        "vxlan_rx" => (
            vec!["prio 10 in_port a enc_key_id 42 action decap,output:b"],
            vec![packed_vxlan()],
            true,
            Device::new(Features::TSO | Features::TX_CSUM_GENERIC | Features::TX_SG),
        ),
        "vxlan_tx" => (
            vec![
                "prio 10 in_port a action encap:vxlan:id=42:src=198.51.100.1:dst=198.51.100.2,output:b",
            ],
            vec![super_frames(4)],
            false,
            Device {
                mtu: 1600,
                ..Device::new(
                    Features::TSO | Features::USO | Features::TX_SG | Features::TX_CSUM_GENERIC,
                )
            },
        ),
        other => panic!(
            "no scenario {other}: small, many, tcp_gso, tcp_vlan, tso_vlan, vxlan_rx or vxlan_tx"
        ),
    };
    let mut table = FlowTable::new(TableConfig::default());
    let parsed = rules
        .iter()
        .map(|r| parse_rule(r, &names).expect("the bench rules parse"))
        .collect();
    for r in table.insert_batch(parsed, BatchMode::AllOrNothing) {
        r.expect("the bench rules go in");
    }
    let per_poll = bursts.first().map_or(0, Vec::len);
    let mut dp = Datapath::new(table.reader(), DatapathConfig::default());
    let frames = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let src = Source {
        bursts,
        next: 0,
        device: Device::new(Features::ALL),
    };
    let sink = Sink {
        device: out_dev,
        frames: Arc::clone(&frames),
        bytes: Arc::clone(&bytes),
    };
    dp.add_port(
        1,
        Box::new(src),
        PortOptions {
            gro,
            ..PortOptions::default()
        },
    )
    .expect("add a");
    dp.add_port(2, Box::new(sink), PortOptions::default())
        .expect("add b");
    Scenario {
        dp,
        frames,
        bytes,
        per_poll,
        _table: table,
    }
}

fn run(s: &mut Scenario, polls: usize) -> usize {
    let mut n = 0;
    for _ in 0..polls {
        n += s.dp.poll_once();
    }
    n
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("profile") {
        let name = args.get(1).map_or("small", String::as_str);
        let polls = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
        let mut s = scenario(name);
        let n = run(&mut s, polls);
        println!(
            "{name}: {n} packets received, {} frames / {} bytes sent",
            s.frames.load(Ordering::Relaxed),
            s.bytes.load(Ordering::Relaxed)
        );
        return;
    }
    let polls: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    for name in [
        "small", "many", "tcp_gso", "tcp_vlan", "tso_vlan", "vxlan_rx", "vxlan_tx",
    ] {
        let mut s = scenario(name);
        run(&mut s, polls / 10);
        let t = Instant::now();
        let n = run(&mut s, polls);
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        println!(
            "{name:10} {:3} packets per poll {ns:8.1} ns per packet",
            s.per_poll
        );
    }
}
