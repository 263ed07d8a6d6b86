//! The floor of a switch built on TAP ports: frames copied from one port to another with their
//! `virtio_net_hdr`, nothing else — no parsing, no rules, no offload work. Whatever a TAP-based
//! switch (Sluice, Open vSwitch's userspace datapath with TAP ports) does, it pays at least what
//! this pays: the kernel's copy out of one TAP, its copy into the other and the receiver's stack
//! run in the writing thread. `bench/e2e/run.sh` measures it in the same run as the switches
//! (system `relay`), so their figures can be read against it.
//!
//! ```sh
//! tap_relay A B [THREADS]            # as root: creates TAPs A and B, relays until killed
//! tap_relay --hop A X Y B [THREADS]  # TAP A <-> AF_PACKET on X, AF_PACKET on Y <-> TAP B
//! ```
//!
//! TAP to TAP, it is shaped as `sluice run` is by default: the TAPs open with the offloads
//! Sluice's TAP ports negotiate ([`TAP_OFFLOADS`]) and the same 12-byte vnet header, one queue
//! per thread (`IFF_MULTI_QUEUE` from two threads), one thread per allowed CPU unless `THREADS`
//! says otherwise, each pinned to its CPU; a thread sleeps in `poll` on its queues, then reads
//! each until it is empty and writes every frame to the other TAP's queue of the same index.
//!
//! With `--hop`, the frames go through a veth pair (`X`, `Y`: existing interfaces, `AF_PACKET`
//! sockets with `PACKET_VNET_HDR`) as through a hop of `bench/e2e/run.sh --hop`, but untouched:
//! no tag, no tunnel header, so no segmentation either — the floor of any hop made of `AF_PACKET`
//! ports, whatever it adds to the frames. One thread for both pairs by default, or one per pair
//! (`A`-`X`, `Y`-`B`, pinned) with `THREADS` 2. The vnet headers are passed on as they are (the
//! `AF_PACKET` one is the TAP's first 10 bytes).
//!
//! Frames the kernel refuses on write are counted and printed on exit (SIGINT / SIGTERM).
use std::io::{self, ErrorKind};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_ports::port_tap::TAP_OFFLOADS;
use sluice_ports::{poll, sched, signal, AfPacketConfig, PacketSocket, Tap, TapConfig};

/// Vnet header bytes of a TAP (`virtio_net_hdr_v1`), as Sluice's TAP ports use.
const HDR: usize = 12;
/// Vnet header bytes of an `AF_PACKET` socket (`virtio_net_hdr`).
const PACKET_HDR: usize = 10;
/// Room for the largest super-frame (64 KiB), its header and the socket's VLAN headroom.
const BUF: usize = HDR + 65536 + 4096;
/// Frames read from one port before looking at the other.
const BURST: usize = 64;
/// Receive buffer of a packet socket, as Sluice's `AF_PACKET` ports ask.
const RCVBUF: usize = 32 << 20;

/// Frames relayed and frames the kernel refused, all threads.
static RELAYED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// One side of a relay.
enum End {
    Tap(Tap),
    Packet(PacketSocket),
}

impl End {
    fn tap(name: &str, multi_queue: bool) -> io::Result<End> {
        let cfg = TapConfig {
            vnet_hdr_len: HDR,
            offloads: 0,
            napi: false,
            napi_frags: false,
            multi_queue,
            tun: false,
        };
        let mut tap = Tap::open(name, &cfg)?;
        tap.set_offloads(TAP_OFFLOADS)?;
        tap.set_nonblocking(true)?;
        Ok(End::Tap(tap))
    }

    fn packet(ifname: &str) -> io::Result<End> {
        let cfg = AfPacketConfig {
            vnet_hdr: true,
            auxdata: false,
            promisc: false,
        };
        let sock = PacketSocket::bind(ifname, &cfg)?;
        sock.set_rcvbuf(RCVBUF)?;
        Ok(End::Packet(sock))
    }

    fn fd(&self) -> RawFd {
        match self {
            End::Tap(t) => t.as_raw_fd(),
            End::Packet(s) => s.as_raw_fd(),
        }
    }

    /// One frame if one is waiting: its 12-byte vnet header and where it lies in `buf`.
    fn read(&self, buf: &mut [u8]) -> io::Result<Option<([u8; HDR], std::ops::Range<usize>)>> {
        match self {
            End::Tap(t) => match t.read(buf) {
                Ok(n) if n >= HDR => {
                    let mut hdr = [0u8; HDR];
                    hdr.copy_from_slice(buf.get(..HDR).unwrap_or(&[0; HDR]));
                    Ok(Some((hdr, HDR..n)))
                }
                Ok(_) => Ok(None),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    Ok(None)
                }
                Err(e) => Err(e),
            },
            End::Packet(s) => loop {
                let Some(f) = s.try_recv(buf)? else {
                    return Ok(None);
                };
                if f.outgoing() || f.truncated() {
                    continue;
                }
                let mut hdr = [0u8; HDR];
                if let (Some(h), Some(v)) = (hdr.get_mut(..PACKET_HDR), f.vnet_hdr.as_ref()) {
                    h.copy_from_slice(v);
                }
                return Ok(Some((hdr, f.range())));
            },
        }
    }

    fn write(&self, hdr: &[u8; HDR], frame: &[u8]) -> io::Result<usize> {
        match self {
            End::Tap(t) => t.write(hdr, frame),
            End::Packet(s) => s.send(hdr.get(..PACKET_HDR), frame),
        }
    }
}

/// Reads `from` until it is empty (at most [`BURST`] frames), writing each frame to `to`.
/// Returns whether anything was read.
fn drain(from: &End, to: &End, buf: &mut [u8]) -> io::Result<bool> {
    let mut any = false;
    for _ in 0..BURST {
        let Some((hdr, range)) = from.read(buf)? else {
            break;
        };
        any = true;
        let Some(frame) = buf.get(range) else {
            continue;
        };
        match to.write(&hdr, frame) {
            Ok(_) => RELAYED.fetch_add(1, Ordering::Relaxed),
            Err(_) => REFUSED.fetch_add(1, Ordering::Relaxed),
        };
    }
    Ok(any)
}

/// Relays every pair of `pairs` both ways until a stop signal.
fn relay(pairs: Vec<(End, End)>, cpu: Option<usize>) -> io::Result<()> {
    if let Some(cpu) = cpu {
        sched::pin_to_cpu(0, cpu)?;
    }
    let mut buf = vec![0u8; BUF];
    let fds: Vec<RawFd> = pairs.iter().flat_map(|(a, b)| [a.fd(), b.fd()]).collect();
    while !signal::stop_requested() {
        let mut any = false;
        for (a, b) in &pairs {
            any |= drain(a, b, &mut buf)?;
            any |= drain(b, a, &mut buf)?;
        }
        if !any {
            poll::wait_readable(&fds, Duration::from_millis(100))?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let hop = args.first().is_some_and(|a| a == "--hop");
    if hop {
        args.remove(0);
    }
    let names = if hop { 4 } else { 2 };
    if args.len() < names || args.len() > names + 1 {
        return Err("usage: tap_relay A B [THREADS] | tap_relay --hop A X Y B [THREADS]".into());
    }
    let cpus = sched::allowed_cpus()?;
    let threads = match args.get(names) {
        Some(t) => t
            .parse::<usize>()
            .map_err(|e| format!("THREADS {t:?}: {e}"))?,
        // One thread for both pairs: a frame stays in one core's caches from TAP A to TAP B
        // (four alternating pairs of runs: 0.061-0.107 CPU seconds per Gbit against 0.111-0.127
        // with a thread per pair).
        None if hop => 1,
        None => cpus.len(),
    }
    .max(1);
    // Pinned as `sluice run` pins: thread i to the i-th allowed CPU, when there is one thread
    // per CPU or fewer.
    let pin = threads <= cpus.len();
    signal::stop_on_signals()?;
    // The pairs each thread relays.
    let mut work: Vec<Vec<(End, End)>> = (0..threads).map(|_| Vec::new()).collect();
    match args.as_slice() {
        [a, x, y, b, ..] if hop => {
            let pairs = [
                (End::tap(a, false)?, End::packet(x)?),
                (End::packet(y)?, End::tap(b, false)?),
            ];
            for (i, p) in pairs.into_iter().enumerate() {
                if let Some(w) = work.get_mut(i % threads) {
                    w.push(p);
                }
            }
        }
        [a, b, ..] => {
            for w in work.iter_mut() {
                w.push((End::tap(a, threads > 1)?, End::tap(b, threads > 1)?));
            }
        }
        _ => unreachable!("argument count checked above"),
    }
    let mut handles = Vec::with_capacity(threads);
    for (i, pairs) in work.into_iter().enumerate() {
        if pairs.is_empty() {
            continue;
        }
        let cpu = if pin { cpus.get(i).copied() } else { None };
        handles.push(std::thread::spawn(move || relay(pairs, cpu)));
    }
    eprintln!(
        "tap_relay: {}, {} thread(s), TAP offloads {TAP_OFFLOADS:#x}",
        args.get(..names).unwrap_or_default().join(" <-> "),
        handles.len()
    );
    for h in handles {
        h.join().map_err(|_| "a relay thread panicked")??;
    }
    eprintln!(
        "tap_relay: {} frames relayed, {} refused by the kernel",
        RELAYED.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed)
    );
    Ok(())
}
