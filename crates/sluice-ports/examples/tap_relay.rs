//! The floor of a switch built on TAP ports: frames copied from one TAP to the other with
//! their `virtio_net_hdr`, nothing else — no parsing, no rules, no offload work. Whatever a
//! TAP-based switch (Sluice, Open vSwitch's userspace datapath with TAP ports) does, it pays at
//! least what this pays: the kernel's copy out of one TAP, its copy into the other and the
//! receiver's stack run in the writing thread. `bench/e2e/run.sh --systems …,relay` measures it
//! in the same run as the switches, so their figures can be read against it.
//!
//! ```sh
//! tap_relay A B [THREADS]     # as root; creates TAPs A and B, relays until killed
//! ```
//!
//! Shaped as `sluice run` is by default: the TAPs open with the offloads Sluice's TAP ports
//! negotiate ([`TAP_OFFLOADS`]) and the same 12-byte vnet header, one queue per thread
//! (`IFF_MULTI_QUEUE` from two threads), one thread per allowed CPU unless `THREADS` says
//! otherwise, each pinned to its CPU; a thread sleeps in `poll` on its two queues, then reads
//! each until it is empty and writes every frame to the other TAP's queue of the same index.
//! Frames the kernel refuses on write are counted and printed on exit (SIGINT / SIGTERM).
use std::io::{self, ErrorKind};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_ports::port_tap::TAP_OFFLOADS;
use sluice_ports::{poll, sched, signal, Tap, TapConfig};

/// Vnet header bytes (`virtio_net_hdr_v1`), as Sluice's TAP ports use.
const HDR: usize = 12;
/// Room for the largest super-frame a TAP hands over (64 KiB) and its header.
const BUF: usize = HDR + 65536 + 4096;
/// Frames read from one queue before looking at the other.
const BURST: usize = 64;

/// Frames relayed and frames the kernel refused, all threads.
static RELAYED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

fn open(name: &str, multi_queue: bool) -> io::Result<Tap> {
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
    Ok(tap)
}

/// Reads `from` until it is empty (at most [`BURST`] frames), writing each frame to `to`.
/// Returns whether anything was read.
fn drain(from: &Tap, to: &Tap, buf: &mut [u8]) -> io::Result<bool> {
    let mut any = false;
    for _ in 0..BURST {
        let n = match from.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        any = true;
        let (Some(hdr), Some(frame)) = (buf.get(..HDR), buf.get(HDR..n)) else {
            continue;
        };
        match to.write(hdr, frame) {
            Ok(_) => RELAYED.fetch_add(1, Ordering::Relaxed),
            Err(_) => REFUSED.fetch_add(1, Ordering::Relaxed),
        };
    }
    Ok(any)
}

fn relay(a: Tap, b: Tap, cpu: Option<usize>) -> io::Result<()> {
    if let Some(cpu) = cpu {
        sched::pin_to_cpu(0, cpu)?;
    }
    let mut buf = vec![0u8; BUF];
    let fds = [a.as_raw_fd(), b.as_raw_fd()];
    while !signal::stop_requested() {
        let ab = drain(&a, &b, &mut buf)?;
        let ba = drain(&b, &a, &mut buf)?;
        if !ab && !ba {
            poll::wait_readable(&fds, Duration::from_millis(100))?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(na), Some(nb)) = (args.next(), args.next()) else {
        return Err("usage: tap_relay A B [THREADS]".into());
    };
    let cpus = sched::allowed_cpus()?;
    let threads = match args.next() {
        Some(t) => t
            .parse::<usize>()
            .map_err(|e| format!("THREADS {t:?}: {e}"))?,
        None => cpus.len(),
    }
    .max(1);
    // Pinned as `sluice run` pins: thread i to the i-th allowed CPU, when there is one thread
    // per CPU or fewer.
    let pin = threads <= cpus.len();
    signal::stop_on_signals()?;
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let multi = threads > 1;
        let (a, b) = (open(&na, multi)?, open(&nb, multi)?);
        let cpu = if pin { cpus.get(i).copied() } else { None };
        handles.push(std::thread::spawn(move || relay(a, b, cpu)));
    }
    eprintln!(
        "tap_relay: {na} <-> {nb}, {threads} thread(s), offloads {TAP_OFFLOADS:#x}, \
         {HDR}-byte vnet header"
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
