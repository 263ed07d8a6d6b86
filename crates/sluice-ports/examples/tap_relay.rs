//! A reference for switches built on TAP ports: frames copied from one port to another with
//! their `virtio_net_hdr` and nothing else — no parsing, no rules, no offload work, one frame
//! read and written at a time. What it measures is mostly the kernel's part of the job, which
//! any switch with TAP ports has too (Sluice, Open vSwitch's userspace datapath with TAP
//! ports): the copy out of one TAP, the copy into the other and the receiver's stack run in
//! the writing thread. `bench/e2e/run.sh` runs it in the same run as the switches (system
//! `relay`), so their figures can be read against it.
//!
//! ```sh
//! tap_relay A B [THREADS]            # as root: creates TAPs A and B, relays until killed
//! tap_relay --hop A X Y B [THREADS]  # TAP A <-> AF_PACKET on X, AF_PACKET on Y <-> TAP B
//! ```
//!
//! TAP to TAP, it is set up as `sluice run` sets up its TAP ports by default: the offloads
//! Sluice's TAP ports negotiate ([`TAP_OFFLOADS`]) and the same 12-byte vnet header, one queue
//! per thread (`IFF_MULTI_QUEUE` with two threads or more), one thread per allowed CPU unless
//! `THREADS` says otherwise, each pinned to its CPU when there is one thread per CPU (as
//! `sluice run` pins). A thread sleeps in `poll` on its queues, then reads each until it is
//! empty or 64 frames were read, writing every frame to the other TAP's queue of the same index
//! as soon as it is read.
//!
//! With `TAP_RELAY_SPIN_US=N` in its environment, a thread polls its queues the way `sluice
//! run`'s datapath threads do (`busy_poll_us`): after a pass that moved frames it keeps passing
//! over them, calling `sched_yield` between passes, until N µs have gone by without a frame, and
//! only then sleeps in `poll`. Without it (or with 0) it sleeps as soon as a pass finds nothing.
//!
//! With `--hop`, the frames go through a veth pair (`X`, `Y`: existing interfaces, `AF_PACKET`
//! sockets with `PACKET_VNET_HDR`, non-blocking) as through a hop of `bench/e2e/run.sh --hop`,
//! but untouched: no tag, no tunnel header, so no segmentation either. Unlike Sluice's
//! `AF_PACKET` ports it reads one frame per `recvmsg` and sends one per `sendmsg` (no
//! `recvmmsg` / `sendmmsg` batches) and does not ask for VLAN tags in aux data. One thread for
//! both pairs by default (unpinned), or one per pair (`A`-`X`, `Y`-`B`) with `THREADS` 2. The
//! vnet headers are passed on as they are (the `AF_PACKET` one is the TAP's first 10 bytes).
//!
//! Frames the kernel refuses on write, and frames that cannot be read whole (a receive error
//! for one frame, a truncated frame), are counted; the counts are printed on exit (SIGINT /
//! SIGTERM). An error that leaves a port unusable stops every thread and the program.
use std::io::{self, ErrorKind};
use std::ops::Range;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// Frames relayed, all threads.
static RELAYED: AtomicU64 = AtomicU64::new(0);
/// Frames the kernel refused on write, all threads.
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Frames that could not be read whole (a receive error for that frame, or truncated).
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// One side of a relay.
enum End {
    Tap(Tap),
    Packet(PacketSocket),
}

/// Whether a receive error leaves the port unusable (the program stops) rather than losing
/// one frame or saying nothing is there (counted, and the relay goes on).
fn fatal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EBADFD | libc::EFAULT | libc::ENODEV | libc::ENXIO)
    )
}

impl End {
    /// A queue of TAP `name` (created if needed), non-blocking, with Sluice's TAP offloads.
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

    /// A non-blocking packet socket on interface `ifname`, with vnet headers.
    fn packet(ifname: &str) -> io::Result<End> {
        let cfg = AfPacketConfig {
            vnet_hdr: true,
            auxdata: false,
            promisc: false,
        };
        let sock = PacketSocket::bind(ifname, &cfg)?;
        sock.set_nonblocking(true)?;
        sock.set_rcvbuf(RCVBUF)?;
        Ok(End::Packet(sock))
    }

    /// The descriptor to poll.
    fn fd(&self) -> RawFd {
        match self {
            End::Tap(t) => t.as_raw_fd(),
            End::Packet(s) => s.as_raw_fd(),
        }
    }

    /// The next frame whole, if one is waiting: its 12-byte vnet header and where it lies in
    /// `buf`. `Ok(None)`: nothing waiting. Frames that cannot be read whole are counted in
    /// [`DROPPED`] and skipped; only an error that leaves the port unusable is returned.
    fn read(&self, buf: &mut [u8]) -> io::Result<Option<([u8; HDR], Range<usize>)>> {
        loop {
            let got = match self {
                End::Tap(t) => t.read(buf).map(|n| {
                    // A frame filling the buffer may have been longer (the kernel truncates
                    // silently).
                    (n >= HDR && n < buf.len()).then(|| {
                        let mut hdr = [0u8; HDR];
                        hdr.copy_from_slice(buf.get(..HDR).unwrap_or(&[0; HDR]));
                        (hdr, HDR..n)
                    })
                }),
                End::Packet(s) => match s.try_recv(buf) {
                    Ok(None) => return Ok(None),
                    Ok(Some(f)) if f.outgoing() => continue,
                    Ok(Some(f)) => Ok((!f.truncated()).then(|| {
                        // Bytes 10..12 (`num_buffers`) stay zero.
                        let mut hdr = [0u8; HDR];
                        if let (Some(h), Some(v)) = (hdr.get_mut(..PACKET_HDR), f.vnet_hdr) {
                            h.copy_from_slice(&v);
                        }
                        (hdr, f.range())
                    })),
                    Err(e) => Err(e),
                },
            };
            match got {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock) => return Ok(None),
                Err(e) if matches!(e.kind(), ErrorKind::Interrupted) => {}
                Err(e) if fatal(&e) => return Err(e),
                Err(_) => {
                    // One frame lost (a header the kernel could not write, a link going down):
                    // counted; poll again rather than spin on a persisting error.
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
            }
        }
    }

    /// Sends one frame with its vnet header (the first 10 bytes of it on a packet socket).
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
            DROPPED.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        match to.write(&hdr, frame) {
            Ok(_) => RELAYED.fetch_add(1, Ordering::Relaxed),
            Err(_) => REFUSED.fetch_add(1, Ordering::Relaxed),
        };
    }
    Ok(any)
}

/// Relays every pair of `pairs` both ways until `stop` is set; a fatal error sets it for the
/// other threads too.
/// `spin`: how long a thread keeps passing over its queues after the last frame before it sleeps
/// in `poll` (see the module documentation).
fn relay(
    pairs: &[(End, End)],
    cpu: Option<usize>,
    spin: Duration,
    stop: &AtomicBool,
) -> io::Result<()> {
    let run = || -> io::Result<()> {
        if let Some(cpu) = cpu {
            sched::pin_to_cpu(0, cpu)?;
        }
        let mut buf = vec![0u8; BUF];
        let fds: Vec<RawFd> = pairs.iter().flat_map(|(a, b)| [a.fd(), b.fd()]).collect();
        let mut last_frames: Option<Instant> = None;
        while !stop.load(Ordering::Relaxed) {
            let mut any = false;
            for (a, b) in pairs {
                any |= drain(a, b, &mut buf)?;
                any |= drain(b, a, &mut buf)?;
            }
            if any {
                if !spin.is_zero() {
                    last_frames = Some(Instant::now());
                }
                continue;
            }
            if last_frames.is_some_and(|t| t.elapsed() < spin) {
                std::thread::yield_now();
                continue;
            }
            last_frames = None;
            poll::wait_readable(&fds, Duration::from_millis(100))?;
        }
        Ok(())
    };
    let res = run();
    if res.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    res
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const USAGE: &str = "usage: tap_relay A B [THREADS] | tap_relay --hop A X Y B [THREADS]";
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let hop = args.first().is_some_and(|a| a == "--hop");
    if hop {
        args.remove(0);
    }
    let names = if hop { 4 } else { 2 };
    if args.len() < names || args.len() > names + 1 {
        return Err(USAGE.into());
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
    // Pinned as `sluice run` pins by default: thread i to the i-th allowed CPU, only with one
    // thread per CPU.
    let pin = threads == cpus.len();
    let spin = match std::env::var("TAP_RELAY_SPIN_US") {
        Ok(v) => Duration::from_micros(
            v.parse::<u64>()
                .map_err(|e| format!("TAP_RELAY_SPIN_US {v:?}: {e}"))?,
        ),
        Err(_) => Duration::ZERO,
    };
    let stop = signal::stop_on_signals()?;
    // The pairs each thread relays.
    let mut work: Vec<Vec<(End, End)>> = (0..threads).map(|_| Vec::new()).collect();
    let offloads;
    match args.as_slice() {
        [a, x, y, b, ..] if hop => {
            let (ta, tb) = (End::tap(a, false)?, End::tap(b, false)?);
            offloads = match &ta {
                End::Tap(t) => t.offloads(),
                End::Packet(_) => 0,
            };
            let pairs = [(ta, End::packet(x)?), (End::packet(y)?, tb)];
            for (i, p) in pairs.into_iter().enumerate() {
                if let Some(w) = work.get_mut(i % threads) {
                    w.push(p);
                }
            }
        }
        [a, b, ..] => {
            let mut first = None;
            for w in work.iter_mut() {
                let (ta, tb) = (End::tap(a, threads > 1)?, End::tap(b, threads > 1)?);
                if let End::Tap(t) = &ta {
                    first.get_or_insert(t.offloads());
                }
                w.push((ta, tb));
            }
            offloads = first.unwrap_or(0);
        }
        _ => return Err(USAGE.into()),
    }
    let mut handles = Vec::with_capacity(threads);
    for (i, pairs) in work.into_iter().enumerate() {
        if pairs.is_empty() {
            continue;
        }
        let cpu = if pin { cpus.get(i).copied() } else { None };
        handles.push(
            std::thread::Builder::new()
                .name(format!("tap-relay{i}"))
                .spawn(move || relay(&pairs, cpu, spin, stop))?,
        );
    }
    // Printed once every port is open (bench/e2e/run.sh waits for this line).
    let ports = match args.as_slice() {
        [a, x, y, b, ..] if hop => format!("{a} <-> {x}, {y} <-> {b}"),
        [a, b, ..] => format!("{a} <-> {b}"),
        _ => String::new(),
    };
    eprintln!(
        "tap_relay: {ports}, {} thread(s){}{}, TAP offloads accepted {offloads:#x}",
        handles.len(),
        if pin { ", pinned" } else { "" },
        if spin.is_zero() {
            String::new()
        } else {
            format!(", busy poll {} us", spin.as_micros())
        }
    );
    let mut first_err: Option<String> = None;
    for h in handles {
        let res = match h.join() {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("a relay thread panicked".to_string()),
        };
        if let Err(e) = res {
            first_err.get_or_insert(e);
        }
    }
    eprintln!(
        "tap_relay: {} frames relayed, {} refused by the kernel, {} not read whole",
        RELAYED.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
        DROPPED.load(Ordering::Relaxed)
    );
    match first_err {
        Some(e) => Err(format!("tap_relay stopped: {e}").into()),
        None => Ok(()),
    }
}
