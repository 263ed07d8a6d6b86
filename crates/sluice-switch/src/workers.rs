//! The switch's datapath threads: `N` of them ([`SwitchConfig::threads`]), each with its own
//! [`Datapath`] and its own queue of every port.
//!
//! # Design
//!
//! Thread `i` owns a whole [`Datapath`]: its ports, GRO engines, exact-match cache, buffer pool
//! and per-port counters (coverage counters count per thread by themselves). Nothing of it is
//! shared, so the packet path takes no lock. The rules are the one shared thing: every
//! `Datapath` holds a reader of the same [`FlowTable`] and sees each published snapshot
//! (lock-free, never half a batch), as with one thread.
//!
//! A port added to an `N`-thread switch is opened as `N` queues under the one port number, queue
//! `i` for thread `i`: a TAP with `IFF_MULTI_QUEUE` ([`TapPort::open_queues`]), an `AF_PACKET`
//! interface as `N` sockets of one `PACKET_FANOUT` hash group
//! ([`AfPacketPort::open_queues`]). A rule's `output:N` on thread `i` sends through thread `i`'s
//! own queue of port `N`. A TAP that cannot have more queues (a persistent one made without
//! `multi_queue`, e.g. `ip tuntap add … mode tap`) is read by thread 0, which spreads its frames
//! over the threads by software RSS ([`crate::spread`]); every thread sends to it through its own
//! handle on the queue ([`TapPort::try_clone`]).
//!
//! Control work stays off the packet path: jobs (closures) go to each thread over its channel and
//! run between two of its polls, as with one thread. `Workers::run` is the one place that sends
//! jobs out and gathers the replies; the port operations below build on it and combine the
//! replies (counters summed per port, a port down if any thread sees it down, the first error
//! reported; a port that could not be added on every thread is removed again from the threads
//! that took it).
//!
//! # Order within a flow
//!
//! Packets of one flow never overtake each other because a flow is only ever handled by one
//! thread, and each thread keeps order (its queues are read in order, its batches are processed
//! in order, its sends are flushed in order):
//!
//! - The kernel hands every frame of a flow to the same queue: a multi-queue TAP picks the queue
//!   by a symmetric hash of the flow (addresses, ports), or the queue that last wrote a frame of
//!   the flow; `PACKET_FANOUT` (hash) picks the socket by the same symmetric flow hash.
//! - The thread that receives a flow writes it out through its own queue of the egress port. A
//!   multi-queue TAP then answers the flow on that queue, so the replies come back to the same
//!   thread (and its writes keep the TAP's choice stable); the thread that writes a flow into a
//!   port is the only one writing that flow there.
//! - Frames of a single-queue port are all read by thread 0, in order, which passes each to the
//!   thread of its flow ([`sluice_datapath::rss::Rss`]: one hash over the innermost flow, past
//!   VLAN tags and tunnels) through a FIFO channel per thread ([`crate::spread`]).
//!
//! The kernel can move a flow to another queue of a multi-queue TAP when the TAP's flow table
//! changes its mind: when it first learns the flow (from the first frame written back, so during
//! the handshake of a TCP connection) or after it forgot an idle flow (a few seconds without a
//! frame). Frames of the flow still in the old thread's batch could then be overtaken; nothing
//! of the flow is in flight at those moments in practice, and the tests count out-of-order
//! segments at the receiver to show it.
//!
//! [`FlowTable`]: sluice_flow::FlowTable

use crate::spread::spread;
use crate::switch::{PortKind, PortRequest, PortStatsInfo, SwitchConfig, SwitchError};
use sluice_datapath::port::{Port, PortError};
use sluice_datapath::{Datapath, DatapathConfig, DatapathError, PortOptions};
use sluice_flow::FlowTable;
use sluice_ports::port_afpacket::{AfPacketPort, AfPacketPortConfig};
use sluice_ports::port_tap::{TapPort, TapPortConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce(&mut Datapath) + Send>;

/// A job for one thread, with its reply.
pub(crate) type ThreadJob<R> = Box<dyn FnOnce(&mut Datapath) -> R + Send>;

/// What one datapath thread has carried, summed over its queues of every port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadStats {
    /// Packets the thread received (before GRO).
    pub rx_packets: u64,
    /// Frames the thread sent.
    pub tx_packets: u64,
    /// Control jobs the thread ran between two polls (port changes, counters, feature changes).
    pub jobs: u64,
    /// Time those jobs held the thread from its packets, in nanoseconds, summed.
    pub job_ns: u64,
    /// The longest one, in nanoseconds.
    pub job_max_ns: u64,
}

/// How long one thread's jobs kept it from its packets (see [`ThreadStats`]).
#[derive(Debug, Default)]
struct JobTimes {
    jobs: AtomicU64,
    ns: AtomicU64,
    max_ns: AtomicU64,
}

impl JobTimes {
    fn record(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.jobs.fetch_add(1, Ordering::Relaxed);
        self.ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }
}

/// The datapath threads and their job channels. See the [module documentation](self).
pub(crate) struct Workers {
    jobs: Vec<mpsc::Sender<Job>>,
    job_times: Vec<Arc<JobTimes>>,
    handles: Mutex<Vec<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
    reply_timeout: Duration,
    /// The CPU each thread pinned itself to, by thread (`usize::MAX`: not pinned); set by the
    /// thread before it takes its first job.
    pinned: Arc<[AtomicUsize]>,
}

impl Workers {
    /// Starts `cfg.threads` datapath threads (at least one), each with a `Datapath` reading
    /// `table`, no ports.
    pub(crate) fn start(table: &FlowTable, cfg: &SwitchConfig) -> Result<Workers, SwitchError> {
        let n = cfg.threads.max(1);
        let mut w = Workers {
            jobs: Vec::with_capacity(n),
            job_times: Vec::with_capacity(n),
            handles: Mutex::new(Vec::with_capacity(n)),
            stop: Arc::new(AtomicBool::new(false)),
            reply_timeout: Duration::from_secs(30) + cfg.poll_timeout,
            pinned: (0..n).map(|_| AtomicUsize::new(usize::MAX)).collect(),
        };
        let plan = if cfg.pin_threads {
            pin_plan(n)
        } else {
            Vec::new()
        };
        for i in 0..n {
            let cpu = plan.get(i).copied();
            let pinned = Arc::clone(&w.pinned);
            let dcfg = DatapathConfig {
                count_port_down: cfg.datapath.count_port_down && i == 0,
                ..cfg.datapath
            };
            let mut dp = Datapath::new(table.reader(), dcfg);
            let (tx, rx) = mpsc::channel::<Job>();
            let stop = Arc::clone(&w.stop);
            let times = Arc::new(JobTimes::default());
            let thread_times = Arc::clone(&times);
            let (timeout, spin) = (cfg.poll_timeout, cfg.busy_poll);
            // Thread names are cut at 15 bytes by the kernel.
            let name = if n == 1 {
                "sluice-datapath".to_string()
            } else {
                format!("sluice-dp{i}")
            };
            // On failure `w` is dropped, which stops the threads already started.
            let h = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        match sluice_ports::sched::pin_to_cpu(0, cpu) {
                            Ok(()) => {
                                if let Some(slot) = pinned.get(i) {
                                    slot.store(cpu, Ordering::Relaxed);
                                }
                            }
                            Err(e) => {
                                tracing::warn!("datapath thread {i} not pinned to CPU {cpu}: {e}")
                            }
                        }
                    }
                    datapath_loop(&mut dp, &rx, &thread_times, &stop, timeout, spin)
                })
                .map_err(|e| SwitchError::Port(format!("cannot start datapath thread {i}: {e}")))?;
            w.jobs.push(tx);
            w.job_times.push(times);
            w.handles
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .push(h);
        }
        Ok(w)
    }

    /// The number of datapath threads.
    pub(crate) fn threads(&self) -> usize {
        self.jobs.len()
    }

    /// The CPU each datapath thread pinned itself to, by thread (`None`: not pinned). Complete
    /// once every thread has answered a job (as [`Switch::start`](crate::Switch::start) waits
    /// for).
    pub(crate) fn pinned(&self) -> Vec<Option<usize>> {
        self.pinned
            .iter()
            .map(|c| Some(c.load(Ordering::Relaxed)).filter(|&c| c != usize::MAX))
            .collect()
    }

    /// The one place jobs go out and replies come back: every `(thread, job)` is sent first (the
    /// threads run theirs at the same time, each between two of its polls), then the replies
    /// are awaited, in the order of `jobs`.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        jobs: Vec<(usize, ThreadJob<R>)>,
    ) -> Result<Vec<R>, SwitchError> {
        let mut replies = Vec::with_capacity(jobs.len());
        for (i, f) in jobs {
            let (tx, rx) = mpsc::sync_channel(1);
            let queue = self.jobs.get(i).ok_or(SwitchError::Stopped)?;
            queue
                .send(Box::new(move |dp: &mut Datapath| {
                    let _ = tx.send(f(dp));
                }))
                .map_err(|_| SwitchError::Stopped)?;
            replies.push(rx);
        }
        replies
            .into_iter()
            .map(|rx| {
                rx.recv_timeout(self.reply_timeout)
                    .map_err(|_| SwitchError::Stopped)
            })
            .collect()
    }

    /// Runs `f` on every thread (with the thread's index); the replies by thread.
    pub(crate) fn call_all<R: Send + 'static>(
        &self,
        f: impl Fn(usize, &mut Datapath) -> R + Send + Sync + 'static,
    ) -> Result<Vec<R>, SwitchError> {
        let f = Arc::new(f);
        let jobs = (0..self.threads())
            .map(|i| {
                let f = Arc::clone(&f);
                (
                    i,
                    Box::new(move |dp: &mut Datapath| f(i, dp)) as ThreadJob<R>,
                )
            })
            .collect();
        self.run(jobs)
    }

    /// Runs `each[i]` on thread `i`.
    fn call_each<R: Send + 'static>(&self, each: Vec<ThreadJob<R>>) -> Result<Vec<R>, SwitchError> {
        self.run(each.into_iter().enumerate().collect())
    }

    /// Adds `queues` (one per thread, from [`open_queues`]) as port `number` on every thread.
    /// If a thread refuses, the port is removed again from the threads that took it and the
    /// first refusal is returned.
    pub(crate) fn add_port(
        &self,
        number: u32,
        queues: Vec<Box<dyn Port>>,
        opts: PortOptions,
    ) -> Result<Result<(), String>, SwitchError> {
        let jobs = queues
            .into_iter()
            .map(|q| {
                Box::new(move |dp: &mut Datapath| dp.add_port(number, q, opts))
                    as ThreadJob<Result<(), DatapathError>>
            })
            .collect();
        let out = self.call_each(jobs)?;
        let Some(first) = out.iter().find_map(|r| r.as_ref().err()) else {
            return Ok(Ok(()));
        };
        let msg = first.to_string();
        let added: Vec<usize> = (0..out.len()).filter(|&i| out[i].is_ok()).collect();
        let undo = added
            .into_iter()
            .map(|i| {
                (
                    i,
                    Box::new(move |dp: &mut Datapath| drop(dp.remove_port(number)))
                        as ThreadJob<()>,
                )
            })
            .collect();
        self.run(undo)?;
        Ok(Err(msg))
    }

    /// Puts `queues` (one per thread) in place of port `number` on every thread and brings it
    /// up. The old queues are closed. The first refusal, if any.
    pub(crate) fn replace_port(
        &self,
        number: u32,
        queues: Vec<Box<dyn Port>>,
    ) -> Result<Result<(), String>, SwitchError> {
        let jobs = queues
            .into_iter()
            .map(|q| {
                Box::new(move |dp: &mut Datapath| dp.replace_port(number, q).map(drop))
                    as ThreadJob<Result<(), DatapathError>>
            })
            .collect();
        let out = self.call_each(jobs)?;
        Ok(match out.into_iter().find_map(Result::err) {
            Some(e) => Err(e.to_string()),
            None => Ok(()),
        })
    }

    /// Removes port `number` from every thread and closes its queues.
    pub(crate) fn remove_port(&self, number: u32) -> Result<(), SwitchError> {
        self.call_all(move |_, dp| drop(dp.remove_port(number)))
            .map(drop)
    }

    /// Whether port `number` is down on any thread; `None`: no thread has it.
    pub(crate) fn is_down(&self, number: u32) -> Result<Option<bool>, SwitchError> {
        let out = self.call_all(move |_, dp| dp.is_down(number))?;
        Ok(out.into_iter().flatten().reduce(|a, b| a || b))
    }

    /// The ports down on any thread, ascending.
    pub(crate) fn down_ports(&self) -> Result<Vec<u32>, SwitchError> {
        let mut all: Vec<u32> = self
            .call_all(|_, dp| dp.down_ports())?
            .into_iter()
            .flatten()
            .collect();
        all.sort_unstable();
        all.dedup();
        Ok(all)
    }

    /// The counters of the ports `names` (number, name), summed over the threads, by number.
    /// A port is down when any thread has it down.
    pub(crate) fn stats(
        &self,
        names: Vec<(u32, String)>,
    ) -> Result<Vec<PortStatsInfo>, SwitchError> {
        let names = Arc::new(names);
        let each = {
            let names = Arc::clone(&names);
            self.call_all(move |_, dp| {
                names
                    .iter()
                    .map(|(num, name)| {
                        let down = dp.is_down(*num)?;
                        dp.stats(*num)
                            .map(|s| PortStatsInfo::new(*num, name.clone(), down, &s))
                    })
                    .collect::<Vec<_>>()
            })?
        };
        let mut out: Vec<PortStatsInfo> = Vec::with_capacity(names.len());
        for (k, _) in names.iter().enumerate() {
            let mut sum: Option<PortStatsInfo> = None;
            for s in each.iter().filter_map(|t| t.get(k).cloned().flatten()) {
                match &mut sum {
                    None => sum = Some(s),
                    Some(acc) => acc.add(&s),
                }
            }
            out.extend(sum);
        }
        out.sort_by_key(|p| p.number);
        Ok(out)
    }

    /// What each thread has carried, by thread.
    pub(crate) fn thread_stats(&self) -> Result<Vec<ThreadStats>, SwitchError> {
        let mut out = self.call_all(|_, dp| {
            let numbers: Vec<u32> = dp.port_numbers().collect();
            let mut t = ThreadStats::default();
            for s in numbers.into_iter().filter_map(|n| dp.stats(n)) {
                t.rx_packets += s.rx_packets;
                t.tx_packets += s.tx_packets;
            }
            t
        })?;
        for (t, times) in out.iter_mut().zip(&self.job_times) {
            t.jobs = times.jobs.load(Ordering::Relaxed);
            t.job_ns = times.ns.load(Ordering::Relaxed);
            t.job_max_ns = times.max_ns.load(Ordering::Relaxed);
        }
        Ok(out)
    }

    /// Stops every thread (each closes its queues) and waits for them.
    pub(crate) fn halt(&self) -> Result<(), SwitchError> {
        self.stop.store(true, Ordering::SeqCst);
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|p| p.into_inner()));
        let mut ok = true;
        for h in handles {
            ok &= h.join().is_ok();
        }
        if ok {
            Ok(())
        } else {
            Err(SwitchError::Stopped)
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

impl PortStatsInfo {
    /// Adds the counters of `o` (the same port on another thread); down if either is.
    fn add(&mut self, o: &PortStatsInfo) {
        if o.state == "down" {
            self.state.clone_from(&o.state);
        }
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.rx_no_match += o.rx_no_match;
        self.rx_dropped_by_rule += o.rx_dropped_by_rule;
        self.rx_action_errors += o.rx_action_errors;
        self.rx_invalid += o.rx_invalid;
        self.rx_truncated += o.rx_truncated;
        self.rx_kernel_drops += o.rx_kernel_drops;
        self.tx_kernel_drops += o.tx_kernel_drops;
        self.rx_errors += o.rx_errors;
        self.rx_uso_frames += o.rx_uso_frames;
        self.rx_uso_datagrams += o.rx_uso_datagrams;
        self.rx_uso_drops += o.rx_uso_drops;
        self.tx_prepare_drops += o.tx_prepare_drops;
        self.tx_hw_gso += o.tx_hw_gso;
        self.tx_soft_gso += o.tx_soft_gso;
        self.tx_partial_gso += o.tx_partial_gso;
        self.tx_errors += o.tx_errors;
        self.gro_merged_segments += o.gro_merged_segments;
        self.gro_merged_packets += o.gro_merged_packets;
    }
}

/// Opens the port `req` asks for as `threads` queues, one per datapath thread (see the
/// [module documentation](self)); in `req.netns` if set.
pub(crate) fn open_queues(
    req: &PortRequest,
    threads: usize,
    persist: bool,
) -> Result<Vec<Box<dyn Port>>, SwitchError> {
    let threads = threads.max(1);
    let open = || -> Result<Vec<Box<dyn Port>>, SwitchError> {
        match req.kind {
            PortKind::Tap => open_tap(req, threads, persist, false),
            // A TUN is not made persistent (`Tap::delete_persistent` attaches as a TAP).
            PortKind::Tun => open_tap(req, threads, false, true),
            PortKind::AfPacket => {
                let cfg = AfPacketPortConfig::default();
                let ports = AfPacketPort::open_queues(&req.name, &cfg, threads)
                    .map_err(|e| SwitchError::Port(format!("afpacket port {:?}: {e}", req.name)))?;
                Ok(ports
                    .into_iter()
                    .map(|mut p| {
                        if !req.offloads {
                            for f in p.device().features.iter() {
                                let _ = p.set_feature(f, false);
                            }
                        }
                        Box::new(p) as Box<dyn Port>
                    })
                    .collect())
            }
        }
    };
    match &req.netns {
        None => open(),
        Some(ns) => sluice_ports::netns::enter_named(ns, open)
            .map_err(|e| SwitchError::Port(format!("network namespace {ns:?}: {e}")))?,
    }
}

/// A TAP as `threads` queues; a TAP that takes one queue only (made without `multi_queue`):
/// spread by thread 0 over every thread ([`crate::spread`]).
fn open_tap(
    req: &PortRequest,
    threads: usize,
    persist: bool,
    tun: bool,
) -> Result<Vec<Box<dyn Port>>, SwitchError> {
    let cfg = TapPortConfig {
        offloads: req.offloads,
        persist,
        tun,
        udp_tunnel_gso: req.udp_tunnel_gso,
        ..TapPortConfig::default()
    };
    let kind = req.kind.name();
    let err = |e: PortError| SwitchError::Port(format!("{kind} port {:?}: {e}", req.name));
    match TapPort::open_queues(&req.name, &cfg, threads) {
        Ok(queues) => Ok(queues
            .into_iter()
            .map(|q| Box::new(q) as Box<dyn Port>)
            .collect()),
        Err(multi) if threads > 1 => {
            // The kernel refuses IFF_MULTI_QUEUE on an existing single-queue TAP.
            let Ok(one) = TapPort::open(&req.name, &cfg) else {
                return Err(err(multi));
            };
            let mut senders: Vec<Box<dyn Port>> = Vec::with_capacity(threads - 1);
            for _ in 1..threads {
                senders.push(Box::new(one.try_clone().map_err(err)?));
            }
            spread(Box::new(one), senders).map_err(err)
        }
        Err(single) => {
            // A kept (persistent) TAP that a switch with more threads made multi-queue.
            let multi = TapPortConfig {
                multi_queue: true,
                ..cfg
            };
            match TapPort::open(&req.name, &multi) {
                Ok(q) => Ok(vec![Box::new(q) as Box<dyn Port>]),
                Err(_) => Err(err(single)),
            }
        }
    }
}

/// Where `n` datapath threads are pinned: thread `i` to the `i`-th CPU the process may run on,
/// or nowhere (empty, with a warning) when there are fewer such CPUs than threads or they
/// cannot be read.
fn pin_plan(n: usize) -> Vec<usize> {
    match sluice_ports::sched::allowed_cpus() {
        Ok(cpus) if cpus.len() >= n => cpus[..n].to_vec(),
        Ok(cpus) => {
            tracing::warn!(
                "{n} datapath threads on {} CPUs: threads not pinned",
                cpus.len()
            );
            Vec::new()
        }
        Err(e) => {
            tracing::warn!("cannot read the CPU affinity ({e}): threads not pinned");
            Vec::new()
        }
    }
}

fn datapath_loop(
    dp: &mut Datapath,
    jobs: &mpsc::Receiver<Job>,
    times: &JobTimes,
    stop: &AtomicBool,
    timeout: Duration,
    busy_poll: Duration,
) {
    let mut fds = Vec::new();
    // Whether the last pass found frames: the spin bridges the gaps of a stream, so a thread
    // woken with nothing to do (the `poll` timeout, for control work) goes back to sleep at
    // once, unless a GRO engine holds packets that age out pass by pass (`max_age` above 0).
    let mut streaming = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        loop {
            match jobs.try_recv() {
                Ok(job) => {
                    let start = Instant::now();
                    job(dp);
                    times.record(start.elapsed());
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        }
        if dp.poll_once() > 0 {
            streaming = true;
            continue;
        }
        if (streaming || dp.holds_packets()) && spin_until_work(dp, busy_poll) {
            continue;
        }
        streaming = false;
        if dp.holds_packets() {
            // Never sleep on held packets (no spin, `busy_poll` 0): the next pass finishes them.
            continue;
        }
        dp.fds(&mut fds);
        if fds.is_empty() {
            std::thread::sleep(timeout);
        } else {
            let _ = sluice_ports::poll::wait_readable(&fds, timeout);
        }
    }
}

/// Polls `dp` again until a pass finds work (true) or `busy_poll` has passed (false),
/// yielding the CPU between passes.
///
/// The spin keeps the thread awake across the gaps of a stream, so a frame queued on a port
/// finds it running instead of paying a wake-up (an IPI and a context switch). The yield lets
/// a task that shares the CPU (on a small machine: the very sender and receiver whose frames
/// the switch carries) run in those gaps instead of waiting for the spin to end; with nothing
/// else runnable it returns at once. BENCHMARKS.md ("The busy poll yields") has the A/B.
fn spin_until_work(dp: &mut Datapath, busy_poll: Duration) -> bool {
    if busy_poll.is_zero() {
        return false;
    }
    let start = Instant::now();
    // The caller's pass found nothing: yield first, and always make a pass after a yield (a
    // yield to another task can outlast `busy_poll`).
    loop {
        std::thread::yield_now();
        if dp.poll_once() > 0 {
            return true;
        }
        if start.elapsed() >= busy_poll {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_datapath::port::{MemPort, MemPortHandle};
    use sluice_flow::TableConfig;
    use sluice_offload::features::{Device, Features};
    use std::time::Instant;

    fn workers(threads: usize) -> (FlowTable, Workers) {
        let table = FlowTable::new(TableConfig::default());
        let cfg = SwitchConfig {
            threads,
            ..SwitchConfig::default()
        };
        let w = Workers::start(&table, &cfg).expect("threads");
        (table, w)
    }

    /// One in-memory queue per thread, and their handles.
    fn queues(name: &str, n: usize) -> (Vec<Box<dyn Port>>, Vec<MemPortHandle>) {
        (0..n)
            .map(|_| {
                let (p, h) = MemPort::new(name, Device::new(Features::NONE));
                (Box::new(p) as Box<dyn Port>, h)
            })
            .unzip()
    }

    fn has_port(w: &Workers, number: u32) -> Vec<bool> {
        w.call_all(move |_, dp| dp.port(number).is_some())
            .expect("threads answer")
    }

    #[test]
    fn a_port_one_thread_refuses_is_removed_from_the_others() {
        let (_table, w) = workers(3);
        assert_eq!(w.threads(), 3);
        // Thread 1 already has a port 5.
        let (mut q, _h) = queues("x", 1);
        let taken = q.pop().expect("a queue");
        let job: ThreadJob<_> = Box::new(move |dp: &mut Datapath| {
            dp.add_port(5, taken, PortOptions::default()).is_ok()
        });
        assert_eq!(w.run(vec![(1, job)]).expect("run"), vec![true]);
        let (q, _h) = queues("y", 3);
        let e = w
            .add_port(5, q, PortOptions::default())
            .expect("threads answer")
            .expect_err("thread 1 refuses");
        assert!(e.contains('5'), "{e}");
        assert_eq!(has_port(&w, 5), vec![false, true, false]);
        let (q, _h) = queues("z", 3);
        w.add_port(6, q, PortOptions::default())
            .expect("threads answer")
            .expect("port 6 on every thread");
        assert_eq!(has_port(&w, 6), vec![true; 3]);
        w.remove_port(6).expect("removed");
        assert_eq!(has_port(&w, 6), vec![false; 3]);
        w.halt().expect("stopped");
        assert_eq!(w.call_all(|_, _| ()), Err(SwitchError::Stopped));
    }

    #[test]
    fn an_idle_thread_does_not_spin() {
        // A spin of a second after an empty pass would make thousands of passes in one; an
        // idle thread makes one pass per poll timeout (1 ms here), whatever `busy_poll` says.
        let table = FlowTable::new(TableConfig::default());
        let cfg = SwitchConfig {
            threads: 1,
            poll_timeout: Duration::from_millis(1),
            busy_poll: Duration::from_secs(1),
            ..SwitchConfig::default()
        };
        let w = Workers::start(&table, &cfg).expect("threads");
        let (q, _h) = queues("idle", 1);
        w.add_port(1, q, PortOptions::default())
            .expect("threads answer")
            .expect("added");
        let polls = || -> u64 {
            let p = w.call_all(|_, dp| dp.polls()).expect("threads answer");
            p.first().copied().unwrap_or(0)
        };
        let (t0, p0) = (Instant::now(), polls());
        let deadline = t0 + Duration::from_secs(10);
        let mut p1 = p0;
        while p1 < p0 + 20 {
            assert!(Instant::now() < deadline, "the thread stopped polling");
            std::thread::sleep(Duration::from_millis(1));
            p1 = polls();
        }
        let timeouts = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        assert!(
            p1 - p0 <= 2 * timeouts + 20,
            "{} passes in {timeouts} ms while idle",
            p1 - p0
        );
        w.halt().expect("stopped");
    }

    #[test]
    fn counters_are_summed_over_threads_and_kept_per_thread() {
        let (_table, w) = workers(2);
        let (q, handles) = queues("a", 2);
        w.add_port(1, q, PortOptions::default())
            .expect("threads answer")
            .expect("added");
        // An ARP frame: no rule matches it, it is counted and dropped.
        let mut frame = vec![0xffu8; 6];
        frame.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        frame.resize(60, 0);
        for (h, n) in handles.iter().zip([3, 5]) {
            for _ in 0..n {
                h.inject_frame(&frame);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while handles.iter().any(|h| h.pending() > 0) {
            assert!(Instant::now() < deadline, "frames never received");
            std::thread::sleep(Duration::from_millis(5));
        }
        let per_thread: Vec<u64> = w
            .thread_stats()
            .expect("thread stats")
            .iter()
            .map(|t| t.rx_packets)
            .collect();
        assert_eq!(per_thread, vec![3, 5]);
        let st = w.stats(vec![(1, "a".into())]).expect("stats");
        assert_eq!(st.len(), 1);
        let a = st.first().expect("port a");
        assert_eq!((a.rx_packets, a.rx_no_match), (8, 8), "{a:?}");
        assert_eq!(a.rx_bytes, 8 * 60);
        assert_eq!(w.is_down(1), Ok(Some(false)));
        assert_eq!(w.is_down(2), Ok(None));
        assert_eq!(w.down_ports(), Ok(vec![]));
    }
}
