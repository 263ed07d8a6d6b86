//! `sluice-vpn`: the data path of a point-to-point IP tunnel over UDP, without crypto, the way
//! wireguard-go and Tailscale move packets since they use the kernel's offloads: a TUN device
//! with `virtio_net_hdr` offloads on one side, a UDP socket with `UDP_SEGMENT` / `UDP_GRO` on
//! the other, and Sluice's L3 GSO and GRO in between.
//!
//! - **TUN → wire**: the TUN hands over TCP super-packets (TSO, up to 64 KiB, checksum
//!   partial). [`tx_prepare`] for a device with no offloads ([`Device`] with
//!   [`Features::NONE`] and the tunnel's MTU) segments each one in software and fills every
//!   checksum ([`sluice_offload::gso`]); the segments, all the same size but the last, leave
//!   in one `sendmsg` with `UDP_SEGMENT` (one datagram per inner packet), straight from
//!   Sluice's output buffer (iovecs, no copy).
//! - **wire → TUN**: one `recvmsg` with `UDP_GRO` returns many datagrams of the peer's flow with
//!   their size; each datagram is one inner IP packet. Sluice's [`GroEngine`] (for L3 packets,
//!   checksums verified) merges them back into TCP super-packets, which are written to the TUN
//!   whole, with the L4 checksum left partial as Linux's GRO leaves it (`tx_prepare` for the
//!   TUN's own offloads).
//!
//! With `--no-offloads` it is the naive tunnel: the TUN without offloads (packets of at most
//! the MTU, checksums complete), one `send` and one `recv` per packet, no GSO or GRO.
//!
//! Run one instance in each of two network namespaces (see `bench/vpn/run.sh`, which also runs
//! iperf3 through it next to the kernel's VXLAN):
//!
//! ```text
//! sluice-vpn --tun vpn0 --bind 10.95.1.1:51820 --peer 10.95.1.2:51820
//! ip addr add 10.95.0.1/24 dev vpn0; ip link set vpn0 mtu 1420 up
//! ```
//!
//! On `SIGINT` / `SIGTERM` it passes on what is still in flight (until both sides have been
//! quiet for 200 ms), prints its counters (`name value` lines) on stderr and exits.
//! Nothing is lost silently: every packet it does not pass on is in a counter.

use anyhow::{Context, Result};
use clap::Parser;
use sluice_datapath::port::RX_BURST_BYTES;
use sluice_datapath::{BufPool, PacketBuf, Port};
use sluice_offload::features::{Device, Features};
use sluice_offload::gro::{GroConfig, GroEngine};
use sluice_offload::tx::{tx_prepare, DeviceWork, TxOutcome, TxOutput, TxPacket};
use sluice_packet::rewrite::defer_gso_l4_checksum;
use sluice_packet::{GsoType, OffloadMeta};
use sluice_ports::udp_gso::{UDP_GSO_MAX_PAYLOAD, UDP_MAX_SEGMENTS};
use sluice_ports::{poll, signal, TapPort, TapPortConfig, UdpGsoSocket};
use sluice_wire::ParseConfig;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Command line.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "A point-to-point IP tunnel over UDP (no crypto) with Sluice's L3 GSO/GRO"
)]
struct Args {
    /// The TUN interface to create (`%d`: the kernel picks the number).
    #[arg(long, default_value = "vpn%d")]
    tun: String,
    /// Local UDP address.
    #[arg(long)]
    bind: SocketAddr,
    /// The other end's UDP address.
    #[arg(long)]
    peer: SocketAddr,
    /// The tunnel's MTU: the largest inner IP packet (set the TUN's MTU to it too). Inner
    /// packet + 28 bytes (IPv4 + UDP) must fit the underlay's MTU.
    #[arg(long, default_value_t = 1420)]
    mtu: u32,
    /// No offloads: the TUN without virtio offloads, one datagram per send and per receive.
    #[arg(long)]
    no_offloads: bool,
    /// Socket buffer sizes in bytes (both directions).
    #[arg(long, default_value_t = 4 << 20)]
    socket_buffer: usize,
}

/// What happened to the packets, printed at exit.
#[derive(Debug, Default)]
struct Counters {
    tun_rx_packets: u64,
    tun_rx_super_packets: u64,
    tun_rx_errors: u64,
    segment_drops: u64,
    wire_tx_datagrams: u64,
    wire_tx_sends: u64,
    wire_tx_drops: u64,
    wire_rx_datagrams: u64,
    wire_rx_receives: u64,
    wire_rx_errors: u64,
    wire_rx_not_ip: u64,
    gro_merged_packets: u64,
    tun_tx_packets: u64,
    tun_tx_drops: u64,
}

impl Counters {
    fn print(&self) {
        let c = self;
        for (name, v) in [
            ("tun_rx_packets", c.tun_rx_packets),
            ("tun_rx_super_packets", c.tun_rx_super_packets),
            ("tun_rx_errors", c.tun_rx_errors),
            ("segment_drops", c.segment_drops),
            ("wire_tx_datagrams", c.wire_tx_datagrams),
            ("wire_tx_sends", c.wire_tx_sends),
            ("wire_tx_drops", c.wire_tx_drops),
            ("wire_rx_datagrams", c.wire_rx_datagrams),
            ("wire_rx_receives", c.wire_rx_receives),
            ("wire_rx_errors", c.wire_rx_errors),
            ("wire_rx_not_ip", c.wire_rx_not_ip),
            ("gro_merged_packets", c.gro_merged_packets),
            ("tun_tx_packets", c.tun_tx_packets),
            ("tun_tx_drops", c.tun_tx_drops),
        ] {
            eprintln!("{name} {v}");
        }
    }
}

/// Receives coalesced from the wire per pass at most (each up to 64 KiB); a pass also ends once
/// it holds `RX_BURST_BYTES`, about four full receives.
const RX_BUFFERS: usize = 16;
/// Packets taken from the TUN per pass.
const TUN_BATCH: usize = 64;

/// The tunnel: its two ends and the buffers the loop reuses (nothing is allocated per packet).
struct Tunnel {
    tun: TapPort,
    sock: UdpGsoSocket,
    offloads: bool,
    /// The wire as a transmit device: no offloads, the tunnel's MTU.
    wire: Device,
    pool: BufPool,
    rx: Vec<PacketBuf>,
    tx: TxOutput,
    gro: GroEngine,
    bufs: Vec<Vec<u8>>,
    now: u64,
    c: Counters,
}

impl Tunnel {
    fn new(args: &Args) -> Result<Tunnel> {
        let offloads = !args.no_offloads;
        let cfg = TapPortConfig {
            tun: true,
            offloads,
            ..TapPortConfig::default()
        };
        let mut tun = TapPort::open(&args.tun, &cfg).context("opening the TUN")?;
        tun.set_mtu(args.mtu);
        let sock = UdpGsoSocket::bind(args.bind, offloads)?;
        sock.connect(args.peer)?;
        sock.set_buffers(args.socket_buffer)
            .context("socket buffer sizes")?;
        let mut wire = Device::new(Features::NONE);
        wire.mtu = args.mtu;
        let gro = GroEngine::new(GroConfig {
            parse: ParseConfig::L3,
            ..GroConfig::default()
        });
        Ok(Tunnel {
            tun,
            sock,
            offloads,
            wire,
            pool: BufPool::new(sluice_datapath::buf::DEFAULT_ROOM, 256),
            rx: Vec::with_capacity(TUN_BATCH),
            tx: TxOutput::new(),
            gro,
            bufs: vec![vec![0u8; 65_536]; RX_BUFFERS],
            now: 0,
            c: Counters::default(),
        })
    }

    /// Runs until `SIGINT` / `SIGTERM`.
    fn run(&mut self) -> Result<()> {
        signal::stop_on_signals().context("signal handlers")?;
        let tun_fd = self.tun.fd().context("the TUN has no descriptor")?;
        let fds = [tun_fd, self.sock.fd()];
        // After a stop request, what is still in flight is passed on: the loop ends once both
        // sides have been quiet for DRAIN.
        const DRAIN: Duration = Duration::from_millis(200);
        let mut quiet_since: Option<Instant> = None;
        loop {
            let a = self.tun_to_wire();
            let b = self.wire_to_tun();
            let busy = a > 0 || b > 0;
            if signal::stop_requested() {
                if busy {
                    quiet_since = None;
                } else if quiet_since.get_or_insert_with(Instant::now).elapsed() >= DRAIN {
                    return Ok(());
                }
            }
            if !busy {
                poll::wait_readable(&fds, Duration::from_millis(20))?;
            }
        }
    }

    /// One pass TUN → wire; returns how many packets it took.
    fn tun_to_wire(&mut self) -> usize {
        self.rx.clear();
        if self
            .tun
            .recv(&mut self.pool, &mut self.rx, TUN_BATCH)
            .is_err()
        {
            self.c.tun_rx_errors += 1;
        }
        let n = self.rx.len();
        let mut rx = std::mem::take(&mut self.rx);
        for p in rx.drain(..) {
            self.c.tun_rx_packets += 1;
            if p.meta.gso_type() != GsoType::None {
                self.c.tun_rx_super_packets += 1;
            }
            let pkt = TxPacket::new(p.frame(), p.meta);
            match tx_prepare(&pkt, &self.wire, &mut self.tx) {
                TxOutcome::Unchanged { .. } => {
                    send_run(&self.sock, &[p.frame()], &mut self.c);
                }
                TxOutcome::Prepared { .. } => {
                    let frames = self.tx.frames().map(|(f, _)| f);
                    send_frames(&self.sock, frames, self.offloads, &mut self.c);
                }
                TxOutcome::Dropped(_) => self.c.segment_drops += 1,
            }
            self.pool.put(p);
        }
        self.rx = rx;
        n
    }

    /// One pass wire → TUN; returns how many receives it made.
    fn wire_to_tun(&mut self) -> usize {
        let mut got = [(0usize, 0u16); RX_BUFFERS];
        let mut k = 0;
        // Received bytes: as a switch port's burst, this one ends at RX_BURST_BYTES, so the
        // first receive is still in cache when GRO copies it.
        let mut bytes = 0;
        for (buf, g) in self.bufs.iter_mut().zip(got.iter_mut()) {
            if bytes >= RX_BURST_BYTES {
                break;
            }
            match self.sock.recv_gro(buf) {
                Ok(Some(r)) => {
                    *g = r;
                    k += 1;
                    bytes += r.0;
                }
                Ok(None) => break,
                Err(_) => {
                    self.c.wire_rx_errors += 1;
                    break;
                }
            }
        }
        if k == 0 {
            return 0;
        }
        self.c.wire_rx_receives += k as u64;
        let c = &mut self.c;
        // Each receive: datagrams of `seg` bytes (the last shorter), or one (`seg` 0).
        let datagrams = self
            .bufs
            .iter()
            .zip(&got[..k])
            .flat_map(|(buf, &(n, seg))| {
                let data = buf.get(..n).unwrap_or_default();
                data.chunks(if seg == 0 { n.max(1) } else { usize::from(seg) })
            })
            .filter_map(|d| {
                c.wire_rx_datagrams += 1;
                match sluice_wire::parse_with(d, &ParseConfig::L3) {
                    Ok(layout) => Some((d, OffloadMeta::from_layout(&layout))),
                    Err(_) => {
                        c.wire_rx_not_ip += 1;
                        None
                    }
                }
            });
        if self.offloads {
            self.now += 1;
            self.gro.receive_batch(datagrams, self.now);
            let device = self.tun.device();
            while let Some(mut g) = self.gro.pop_output() {
                // The L4 checksum left partial, as Linux's GRO leaves it: the TUN write takes
                // the packet as it is.
                defer_gso_l4_checksum(&mut g.frame, &mut g.meta);
                let pkt = TxPacket::new(&g.frame, g.meta);
                match tx_prepare(&pkt, &device, &mut self.tx) {
                    TxOutcome::Unchanged { work, .. } => {
                        tun_send(&mut self.tun, &g.frame, &work, &mut self.c);
                    }
                    TxOutcome::Prepared { .. } => {
                        for (f, work) in self.tx.frames() {
                            tun_send(&mut self.tun, f, work, &mut self.c);
                        }
                    }
                    TxOutcome::Dropped(_) => self.c.tun_tx_drops += 1,
                }
                self.gro.recycle(g.frame);
            }
            self.c.gro_merged_packets = self.gro.stats().merged_packets;
        } else {
            let (none, mut sent, mut dropped) = (DeviceWork::default(), 0, 0);
            for (d, _) in datagrams {
                match self.tun.send(d, &none) {
                    Ok(()) => sent += 1,
                    Err(_) => dropped += 1,
                }
            }
            self.c.tun_tx_packets += sent;
            self.c.tun_tx_drops += dropped;
        }
        if self.tun.flush().is_err() {
            self.c.tun_tx_drops += 1;
        }
        k
    }
}

/// Writes one packet to the TUN, counted.
fn tun_send(tun: &mut TapPort, frame: &[u8], work: &DeviceWork, c: &mut Counters) {
    match tun.send(frame, work) {
        Ok(()) => c.tun_tx_packets += 1,
        Err(_) => c.tun_tx_drops += 1,
    }
}

/// Sends the inner packets `frames` to the wire: with offloads, runs of equal-sized packets
/// (the last of a run may be shorter) in one `UDP_SEGMENT` send each; without, one send each.
fn send_frames<'a>(
    sock: &UdpGsoSocket,
    frames: impl Iterator<Item = &'a [u8]>,
    offloads: bool,
    c: &mut Counters,
) {
    let mut run: [&[u8]; UDP_MAX_SEGMENTS] = [&[]; UDP_MAX_SEGMENTS];
    let (mut n, mut seg, mut total, mut last) = (0usize, 0usize, 0usize, 0usize);
    for f in frames {
        if !offloads {
            send_run(sock, &[f], c);
            continue;
        }
        let joins = n > 0
            && last == seg
            && f.len() <= seg
            && n < UDP_MAX_SEGMENTS
            && total + f.len() <= UDP_GSO_MAX_PAYLOAD;
        if !joins && n > 0 {
            send_run(sock, run.get(..n).unwrap_or_default(), c);
            n = 0;
            total = 0;
        }
        if n == 0 {
            seg = f.len();
        }
        if let Some(r) = run.get_mut(n) {
            *r = f;
        }
        n += 1;
        total += f.len();
        last = f.len();
    }
    if n > 0 {
        send_run(sock, run.get(..n).unwrap_or_default(), c);
    }
}

/// One send of `run` (one datagram per part; `UDP_SEGMENT` when more than one). A full send
/// buffer is waited for (back-pressure, up to 100 ms); what still cannot go is counted.
fn send_run(sock: &UdpGsoSocket, run: &[&[u8]], c: &mut Counters) {
    let seg = match run {
        [first, _, ..] => u16::try_from(first.len()).ok(),
        _ => None,
    };
    for _ in 0..2 {
        match sock.send_segments(run, seg) {
            Ok(_) => {
                c.wire_tx_sends += 1;
                c.wire_tx_datagrams += run.len() as u64;
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !matches!(sock.wait_writable(Duration::from_millis(100)), Ok(true)) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    c.wire_tx_drops += run.len() as u64;
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut t = Tunnel::new(&args)?;
    eprintln!(
        "sluice-vpn: {} <-> {} via {} (offloads {})",
        t.tun.name(),
        args.peer,
        args.bind,
        if t.offloads { "on" } else { "off" }
    );
    let r = t.run();
    t.c.print();
    r
}
