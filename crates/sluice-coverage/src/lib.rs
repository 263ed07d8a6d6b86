//! Coverage counters: statically declared, per-thread, lock-free on the hot path, summed on
//! read; shown the way Open vSwitch shows them (rate per second over the last 5 s, 1 min, 1 h,
//! and the total) and exported as Prometheus text.
//!
//! ```
//! sluice_coverage::counter!(EXAMPLE_DROPS, "example_drops", "frames dropped by the example");
//! EXAMPLE_DROPS.inc();
//! EXAMPLE_DROPS.add(2);
//! assert_eq!(EXAMPLE_DROPS.value(), 3);
//! ```
//!
//! # How it works
//!
//! A [`Counter`] is a `static`. On its first increment it registers itself in the global
//! registry (one mutex acquisition per counter per process) and gets a slot index. Every thread
//! that increments any counter owns a block of [`MAX_COUNTERS`] atomic cells, found through a
//! thread-local; an increment is a relaxed load and store on the thread's own cell (no locked
//! instruction, no sharing of cache lines between threads). A read sums the cells of every live
//! thread plus the counts of threads that have exited, which fold their cells into a global
//! block when their thread-local is destroyed. Folding and summing happen under the same mutex,
//! so a read never counts an exiting thread twice or not at all.
//!
//! Counters beyond [`MAX_COUNTERS`] still count, on a shared atomic in the counter itself.
//! No `unsafe`, no dependencies, no linker sections: modules that want their counters listed
//! before they first fire call [`register`].
#![deny(unsafe_code)]

use std::cell::OnceCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Slots available for per-thread counting.
pub const MAX_COUNTERS: usize = 256;

const UNREGISTERED: usize = usize::MAX;
const OVERFLOW: usize = usize::MAX - 1;

/// A named event counter. Declare with [`counter!`].
///
/// ```
/// use sluice_coverage::counter;
/// counter!(pub RX_RUNTS, "rx_runts", "frames shorter than an Ethernet header");
/// RX_RUNTS.inc();
/// std::thread::spawn(|| RX_RUNTS.add(4)).join().unwrap();
/// assert_eq!(RX_RUNTS.value(), 5); // every thread's count, summed on read
/// assert_eq!(RX_RUNTS.this_thread(), Some(1));
/// ```
#[derive(Debug)]
pub struct Counter {
    name: &'static str,
    help: &'static str,
    slot: AtomicUsize,
    /// Counts of a counter that got no per-thread slot.
    shared: AtomicU64,
}

/// Declares a `static` [`Counter`]: `counter!(NAME, "operator_name", "what it counts");`.
#[macro_export]
macro_rules! counter {
    ($(#[$m:meta])* $vis:vis $ident:ident, $name:literal, $help:literal) => {
        $(#[$m])*
        #[doc = $help]
        $vis static $ident: $crate::Counter = $crate::Counter::new($name, $help);
    };
}

impl Counter {
    /// A counter named `name` (an operator-facing snake_case name) described by `help`.
    pub const fn new(name: &'static str, help: &'static str) -> Counter {
        Counter {
            name,
            help,
            slot: AtomicUsize::new(UNREGISTERED),
            shared: AtomicU64::new(0),
        }
    }

    /// The name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The description.
    pub const fn help(&self) -> &'static str {
        self.help
    }

    /// Adds one.
    #[inline]
    pub fn inc(&'static self) {
        self.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&'static self, n: u64) {
        if n == 0 {
            return;
        }
        let mut slot = self.slot.load(Ordering::Acquire);
        if slot == UNREGISTERED {
            slot = registry_add(self);
        }
        if slot == OVERFLOW {
            self.shared.fetch_add(n, Ordering::Relaxed);
            return;
        }
        let done = LOCAL
            .try_with(|l| {
                let cells = l.get_or_init(ThreadCells::attach);
                if let Some(c) = cells.0.cells.get(slot) {
                    // Only this thread writes its cell: load + store is exact and needs no
                    // locked instruction.
                    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
                }
            })
            .is_ok();
        if !done {
            // The thread-local is being destroyed (an increment from another TLS destructor).
            self.shared.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The current total over every thread, live and exited.
    pub fn value(&'static self) -> u64 {
        let slot = self.slot.load(Ordering::Acquire);
        let shared = self.shared.load(Ordering::Relaxed);
        if slot >= MAX_COUNTERS {
            return shared;
        }
        let st = state();
        shared.wrapping_add(sum_slot(&st, slot))
    }

    /// What the calling thread alone has added (0 for a counter that never fired), or `None`
    /// when the counter has no per-thread count (it got no slot: beyond [`MAX_COUNTERS`]).
    ///
    /// A test that compares a counter before and after a call on its own thread reads this
    /// instead of [`Counter::value`]: other tests running at the same time on other threads
    /// cannot move it.
    pub fn this_thread(&'static self) -> Option<u64> {
        let slot = self.slot.load(Ordering::Acquire);
        if slot == UNREGISTERED {
            return Some(0);
        }
        if slot >= MAX_COUNTERS {
            return None;
        }
        LOCAL
            .try_with(|l| {
                l.get()
                    .and_then(|cells| cells.0.cells.get(slot))
                    .map_or(0, |c| c.load(Ordering::Relaxed))
            })
            .ok()
    }
}

struct Block {
    cells: [AtomicU64; MAX_COUNTERS],
}

impl Block {
    fn new() -> Block {
        Block {
            cells: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

struct State {
    counters: Vec<&'static Counter>,
    threads: Vec<Arc<Block>>,
    retired: Option<Block>,
}

static STATE: Mutex<State> = Mutex::new(State {
    counters: Vec::new(),
    threads: Vec::new(),
    retired: None,
});

fn state() -> MutexGuard<'static, State> {
    // A panic while holding the lock leaves plain counts behind: still usable.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn sum_slot(st: &State, slot: usize) -> u64 {
    let mut total = st
        .retired
        .as_ref()
        .and_then(|b| b.cells.get(slot))
        .map_or(0, |c| c.load(Ordering::Relaxed));
    for t in &st.threads {
        if let Some(c) = t.cells.get(slot) {
            total = total.wrapping_add(c.load(Ordering::Relaxed));
        }
    }
    total
}

fn registry_add(c: &'static Counter) -> usize {
    let mut st = state();
    let slot = c.slot.load(Ordering::Acquire);
    if slot != UNREGISTERED {
        return slot;
    }
    let idx = st.counters.len();
    st.counters.push(c);
    let slot = if idx < MAX_COUNTERS { idx } else { OVERFLOW };
    c.slot.store(slot, Ordering::Release);
    slot
}

/// Registers counters so that listings show them before they first fire. Registering twice is
/// harmless.
///
/// ```
/// sluice_coverage::counter!(QUIET, "quiet_counter", "never fires");
/// assert!(sluice_coverage::lookup(&sluice_coverage::snapshot(), "quiet_counter").is_err());
/// sluice_coverage::register(&[&QUIET]);
/// assert_eq!(sluice_coverage::value_by_name("quiet_counter"), Ok(0));
/// ```
pub fn register(counters: &[&'static Counter]) {
    for &c in counters {
        if c.slot.load(Ordering::Acquire) == UNREGISTERED {
            registry_add(c);
        }
    }
}

struct ThreadCells(Arc<Block>);

impl ThreadCells {
    fn attach() -> ThreadCells {
        let b = Arc::new(Block::new());
        state().threads.push(Arc::clone(&b));
        ThreadCells(b)
    }
}

impl Drop for ThreadCells {
    fn drop(&mut self) {
        let mut st = state();
        let retired = st.retired.get_or_insert_with(Block::new);
        for (r, c) in retired.cells.iter().zip(self.0.cells.iter()) {
            r.fetch_add(c.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        st.threads.retain(|t| !Arc::ptr_eq(t, &self.0));
    }
}

thread_local! {
    static LOCAL: OnceCell<ThreadCells> = const { OnceCell::new() };
}

/// One counter's value at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Counter name.
    pub name: &'static str,
    /// Description.
    pub help: &'static str,
    /// Total.
    pub value: u64,
}

/// The value of every registered counter, in registration order.
///
/// ```
/// use sluice_coverage::{counter, deltas, lookup, snapshot};
/// counter!(TX_OK, "doc_tx_ok", "frames sent");
/// TX_OK.add(10);
/// let before = snapshot();
/// TX_OK.add(3);
/// let after = snapshot();
/// assert_eq!(lookup(&after, "doc_tx_ok"), Ok(13));
/// assert_eq!(lookup(&deltas(&before, &after), "doc_tx_ok"), Ok(3));
/// assert!(lookup(&after, "doc_tx_okk").is_err()); // a misspelt name is an error, not 0
/// ```
pub fn snapshot() -> Vec<Sample> {
    let st = state();
    st.counters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let shared = c.shared.load(Ordering::Relaxed);
            let v = if i < MAX_COUNTERS {
                shared.wrapping_add(sum_slot(&st, i))
            } else {
                shared
            };
            Sample {
                name: c.name,
                help: c.help,
                value: v,
            }
        })
        .collect()
}

/// A counter name that no registered counter has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCounter(pub String);

impl std::fmt::Display for UnknownCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no coverage counter is named {:?}", self.0)
    }
}

impl std::error::Error for UnknownCounter {}

/// The value of the counter named `name` in `samples` (a [`snapshot`] or [`deltas`]); an
/// error, not 0, when none has that name, so a misspelt name cannot read as "did not move".
pub fn lookup(samples: &[Sample], name: &str) -> Result<u64, UnknownCounter> {
    samples
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.value)
        .ok_or_else(|| UnknownCounter(name.to_owned()))
}

/// The current total of the registered counter named `name` (see [`lookup`]).
pub fn value_by_name(name: &str) -> Result<u64, UnknownCounter> {
    lookup(&snapshot(), name)
}

/// How much each counter of `after` moved since `before` (both from [`snapshot`]), in `after`'s
/// order, zeros included; a counter registered in between counts from 0.
pub fn deltas(before: &[Sample], after: &[Sample]) -> Vec<Sample> {
    after
        .iter()
        .map(|a| {
            let old = before
                .iter()
                .find(|b| b.name == a.name)
                .map_or(0, |b| b.value);
            Sample {
                value: a.value.wrapping_sub(old),
                ..*a
            }
        })
        .collect()
}

/// Prometheus text exposition of `samples`: `sluice_<name>_total` counters with `HELP` and
/// `TYPE` lines.
///
/// ```
/// use sluice_coverage::{prometheus, Sample};
/// let text = prometheus(&[Sample { name: "rx_drops", help: "frames dropped", value: 7 }]);
/// assert_eq!(
///     text.lines().collect::<Vec<_>>(),
///     [
///         "# HELP sluice_rx_drops_total frames dropped",
///         "# TYPE sluice_rx_drops_total counter",
///         "sluice_rx_drops_total 7",
///     ]
/// );
/// ```
pub fn prometheus(samples: &[Sample]) -> String {
    let mut out = String::new();
    for s in samples {
        let help = s.help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(out, "# HELP sluice_{}_total {}", s.name, help);
        let _ = writeln!(out, "# TYPE sluice_{}_total counter", s.name);
        let _ = writeln!(out, "sluice_{}_total {}", s.name, s.value);
    }
    out
}

/// The windows of [`Rates`], as Open vSwitch's `coverage/show` uses them.
pub const WINDOWS: [Duration; 3] = [
    Duration::from_secs(5),
    Duration::from_secs(60),
    Duration::from_secs(3600),
];

/// Rates per second of one counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Counter name.
    pub name: &'static str,
    /// Average events per second over the last 5 s.
    pub per_sec_5s: f64,
    /// Average events per second over the last minute.
    pub per_sec_1m: f64,
    /// Average events per second over the last hour.
    pub per_sec_1h: f64,
    /// Total.
    pub total: u64,
}

/// Records snapshots over time and turns them into rates. The clock is the caller's: pass the
/// time since any fixed origin (monotonic), which makes the math testable.
///
/// The rate over a window W at time `now` is `(value(now) − value(t0)) / (now − t0)` where `t0`
/// is the oldest recorded time within the window (`t0 ≥ now − W`); before a full window has been
/// recorded it is the average since the first snapshot; with fewer than two snapshots, 0.
/// Snapshots older than an hour (beyond the one just outside the hour) are discarded.
///
/// ```
/// use sluice_coverage::{Rates, Sample};
/// use std::time::Duration;
/// let at = |secs, value| {
///     (Duration::from_secs(secs), vec![Sample { name: "rx", help: "", value }])
/// };
/// let mut rates = Rates::new();
/// for (now, samples) in [at(0, 0), at(5, 50), at(10, 150)] {
///     rates.record(now, samples);
/// }
/// let r = rates.rates()[0];
/// assert_eq!((r.per_sec_5s, r.per_sec_1m, r.total), (20.0, 15.0, 150));
/// assert!(rates.show(false).contains("rx"));
/// ```
#[derive(Debug, Default)]
pub struct Rates {
    history: std::collections::VecDeque<(Duration, Vec<Sample>)>,
}

impl Rates {
    /// An empty history.
    pub fn new() -> Rates {
        Rates::default()
    }

    /// Records `samples` (from [`snapshot`]) taken at `now`. Times must not go backwards; an
    /// older time is ignored.
    pub fn record(&mut self, now: Duration, samples: Vec<Sample>) {
        if self.history.back().is_some_and(|(t, _)| *t > now) {
            return;
        }
        self.history.push_back((now, samples));
        let horizon = now.saturating_sub(WINDOWS[2]);
        while self.history.len() > 2 && self.history.get(1).is_some_and(|(t, _)| *t <= horizon) {
            self.history.pop_front();
        }
    }

    /// Rates for every counter of the latest snapshot.
    pub fn rates(&self) -> Vec<Rate> {
        let Some((now, latest)) = self.history.back() else {
            return Vec::new();
        };
        latest
            .iter()
            .map(|s| Rate {
                name: s.name,
                per_sec_5s: self.rate(*now, s, WINDOWS[0]),
                per_sec_1m: self.rate(*now, s, WINDOWS[1]),
                per_sec_1h: self.rate(*now, s, WINDOWS[2]),
                total: s.value,
            })
            .collect()
    }

    fn rate(&self, now: Duration, cur: &Sample, window: Duration) -> f64 {
        let start = now.saturating_sub(window);
        let Some((t0, old)) = self.history.iter().find(|(t, _)| *t >= start) else {
            return 0.0;
        };
        let dt = now.saturating_sub(*t0).as_secs_f64();
        if dt <= 0.0 {
            return 0.0;
        }
        let before = old
            .iter()
            .find(|o| o.name == cur.name)
            .map_or(0, |o| o.value);
        cur.value.saturating_sub(before) as f64 / dt
    }

    /// The OVS `coverage/show` table: one line per counter, zeros omitted unless `all`.
    pub fn show(&self, all: bool) -> String {
        let mut out = String::from(
            "Event coverage, avg rate over last: 5 seconds, last minute, last hour, total:\n",
        );
        for r in self.rates() {
            if r.total == 0 && !all {
                continue;
            }
            let _ = writeln!(
                out,
                "{:<26} {:>9.1}/sec {:>11.3}/sec {:>12.4}/sec   total: {}",
                r.name, r.per_sec_5s, r.per_sec_1m, r.per_sec_1h, r.total
            );
        }
        out
    }
}

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
