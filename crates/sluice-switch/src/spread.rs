//! Software receive-side scaling for a port the kernel cannot spread (a TAP with one queue):
//! thread 0 reads it and hands each frame to the thread of its flow.
//!
//! Thread 0 gets a `Spreader` around the port: every frame it receives is hashed over its
//! innermost flow ([`Rss`]: addresses, protocol, ports, past VLAN tags and tunnels) and kept, or
//! passed to thread `j` through a bounded channel of its own (one producer, one consumer, never
//! blocking: `try_send` / `try_recv`). Thread `j` gets a `Steered` port under the same number:
//! it receives what thread 0 passed it and sends through its own handle on the port's queue
//! (`dup(2)`: one write per frame, so writes from several threads never mix). A flow's frames
//! are all read by thread 0, in order, and all passed to one thread, in order, so they stay in
//! order; the thread that forwards a flow also writes its answers' way out, so a multi-queue port
//! on the other side answers the flow on that thread's queue.
//!
//! A passed frame keeps its buffer; the receiving thread sends one buffer of its own pool back
//! for each, so neither pool drains. When a thread's channel is full (it is behind by
//! [`HANDOFF_FRAMES`] frames) the frame is dropped and counted (`sw_rss_handoff_drops`, and the
//! port's `rx_kernel_drops`: a full queue in front of the reader, as a full socket queue).
//! A thread that has frames waiting is woken through a socket pair whose descriptor it polls.

use sluice_coverage::counter;
use sluice_datapath::buf::{BufPool, PacketBuf};
use sluice_datapath::port::{Port, PortDrops, PortError, RecvResult};
use sluice_datapath::Rss;
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::tx::DeviceWork;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};

counter!(pub SW_RSS_HANDOFFS, "sw_rss_handoffs", "frames of a single-queue port passed to the thread of their flow (software RSS)");
counter!(pub SW_RSS_HANDOFF_DROPS, "sw_rss_handoff_drops", "frames of a single-queue port dropped: the channel to their flow's thread was full");

/// Every counter of software RSS, for listings before they fire.
pub static COUNTERS: [&sluice_coverage::Counter; 2] = [&SW_RSS_HANDOFFS, &SW_RSS_HANDOFF_DROPS];

/// Frames in flight from thread 0 to one other thread, at most.
pub const HANDOFF_FRAMES: usize = 256;

/// Thread 0's side of a single-queue port: reads it and spreads the frames.
pub(crate) struct Spreader {
    port: Box<dyn Port>,
    rss: Rss,
    /// Per thread `1..`: the channel of frames, its wake-up socket, buffers coming back.
    peers: Vec<Peer>,
    got: Vec<PacketBuf>,
    /// Per peer: a frame was passed to it in this call (reused, no allocation per call).
    woken: Vec<bool>,
    dropped: u64,
}

struct Peer {
    frames: SyncSender<PacketBuf>,
    wake: UnixStream,
    spare: Receiver<PacketBuf>,
}

/// Another thread's side: receives what `Spreader` passed it, sends through its own handle.
pub(crate) struct Steered {
    send: Box<dyn Port>,
    frames: Receiver<PacketBuf>,
    wake: UnixStream,
    spare: SyncSender<PacketBuf>,
}

/// Splits `port` (thread 0's, read there) and `senders` (a handle on the same queue for each
/// other thread) into one port per thread, `Spreader` first.
pub(crate) fn spread(
    port: Box<dyn Port>,
    senders: Vec<Box<dyn Port>>,
) -> Result<Vec<Box<dyn Port>>, PortError> {
    let threads = senders.len() + 1;
    let mut peers = Vec::with_capacity(senders.len());
    let mut steered: Vec<Box<dyn Port>> = Vec::with_capacity(senders.len());
    for send in senders {
        let (frames_tx, frames_rx) = sync_channel(HANDOFF_FRAMES);
        let (spare_tx, spare_rx) = sync_channel(HANDOFF_FRAMES);
        let (wake_tx, wake_rx) =
            UnixStream::pair().map_err(|e| PortError::io("socketpair for a wake-up", e))?;
        for s in [&wake_tx, &wake_rx] {
            s.set_nonblocking(true)
                .map_err(|e| PortError::io("O_NONBLOCK on a wake-up socket", e))?;
        }
        peers.push(Peer {
            frames: frames_tx,
            wake: wake_tx,
            spare: spare_rx,
        });
        steered.push(Box::new(Steered {
            send,
            frames: frames_rx,
            wake: wake_rx,
            spare: spare_tx,
        }));
    }
    let mut out: Vec<Box<dyn Port>> = Vec::with_capacity(threads);
    out.push(Box::new(Spreader {
        port,
        rss: Rss::new(threads),
        peers,
        got: Vec::new(),
        woken: vec![false; threads - 1],
        dropped: 0,
    }));
    out.extend(steered);
    Ok(out)
}

/// The [`Port`] methods about the device that a wrapper answers from the port it wraps (the
/// field named): name, kind, device, changeable features, feature changes and the control
/// side.
macro_rules! forward_device {
    ($inner:ident) => {
        fn name(&self) -> &str {
            self.$inner.name()
        }

        fn kind(&self) -> &'static str {
            self.$inner.kind()
        }

        fn device(&self) -> Device {
            self.$inner.device()
        }

        fn changeable(&self) -> Features {
            self.$inner.changeable()
        }

        fn set_feature(&mut self, feature: Feature, on: bool) -> Result<(), PortError> {
            self.$inner.set_feature(feature, on)
        }

        fn control(&self) -> Option<std::sync::Arc<dyn sluice_datapath::port::PortControl>> {
            self.$inner.control()
        }

        fn apply_state(
            &mut self,
            state: &sluice_datapath::port::PortState,
        ) -> Result<(), PortError> {
            self.$inner.apply_state(state)
        }
    };
}

impl Port for Spreader {
    forward_device!(port);

    fn recv(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> RecvResult {
        // Buffers the other threads sent back for the frames passed to them.
        for p in &self.peers {
            while let Ok(b) = p.spare.try_recv() {
                pool.put(b);
            }
        }
        self.got.clear();
        let n = self.port.recv(pool, &mut self.got, max)?;
        let mut kept = 0;
        self.woken.iter_mut().for_each(|w| *w = false);
        for b in self.got.drain(..) {
            let t = self.rss.thread(b.frame());
            let Some(peer) = t.checked_sub(1).and_then(|i| self.peers.get(i)) else {
                out.push(b);
                kept += 1;
                continue;
            };
            match peer.frames.try_send(b) {
                Ok(()) => {
                    SW_RSS_HANDOFFS.inc();
                    if let Some(w) = self.woken.get_mut(t - 1) {
                        *w = true;
                    }
                }
                Err(TrySendError::Full(b) | TrySendError::Disconnected(b)) => {
                    SW_RSS_HANDOFF_DROPS.inc();
                    self.dropped += 1;
                    pool.put(b);
                }
            }
        }
        for (p, _) in self.peers.iter_mut().zip(&self.woken).filter(|(_, w)| **w) {
            // A full socket means a wake-up is already pending.
            let _ = p.wake.write(&[1]);
        }
        // "Nothing waiting" only when the port had nothing: frames passed on were work.
        Ok(if n == 0 { 0 } else { kept.max(1) })
    }

    fn send(&mut self, frame: &[u8], work: &DeviceWork) -> Result<(), PortError> {
        self.port.send(frame, work)
    }

    fn flush(&mut self) -> Result<(), PortError> {
        self.port.flush()
    }

    fn fd(&self) -> Option<RawFd> {
        self.port.fd()
    }

    fn drops(&self) -> PortDrops {
        let mut d = self.port.drops();
        d.rx_kernel += self.dropped;
        d
    }
}

impl Port for Steered {
    forward_device!(send);

    fn recv(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> RecvResult {
        // Clear the wake-up first: a frame passed after the check below wakes the next poll.
        let mut sink = [0u8; 64];
        while matches!(self.wake.read(&mut sink), Ok(n) if n > 0) {}
        let mut n = 0;
        while n < max {
            let Ok(b) = self.frames.try_recv() else {
                break;
            };
            out.push(b);
            n += 1;
            // One buffer back for the one taken, so thread 0's pool does not drain.
            let _ = self.spare.try_send(pool.get());
        }
        Ok(n)
    }

    fn send(&mut self, frame: &[u8], work: &DeviceWork) -> Result<(), PortError> {
        self.send.send(frame, work)
    }

    fn flush(&mut self) -> Result<(), PortError> {
        self.send.flush()
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.wake.as_raw_fd())
    }

    fn drops(&self) -> PortDrops {
        self.send.drops()
    }
}
