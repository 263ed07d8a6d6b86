//! The publish protocol: two copies of the classifier, left-right style, in safe Rust.
//!
//! Readers load the *published* copy through an [`arc_swap::ArcSwap`] (lock-free; a reader holds
//! an `Arc`, or an arc-swap debt slot that the writer converts into a real reference when it swaps
//! the pointer out). The writer owns the other, *standby* copy outright. A batch is applied to the
//! standby copy, then the copies are swapped with one pointer store: readers that load after the
//! swap see the whole batch, readers that loaded before see none of it.
//!
//! Before the next batch the writer must bring the old copy (now standby) up to date. It waits
//! until it holds the only reference (`Arc::get_mut` succeeds: every reader that loaded the old
//! copy has dropped it), then replays the previous batch's operation log on it. Waiting at the
//! start of the *next* batch rather than right after the swap gives readers the whole gap between
//! batches to leave. Memory stays bounded: two copies, and one log that is cleared on replay.
//!
//! Why this design (rather than copying the table per batch, or per-rule versions): a batch costs
//! two hash-table updates per rule, whatever the table size, so a million rules insert in one
//! pass; readers never lock and never see a half-applied batch; and no `unsafe` is needed, because
//! exclusivity of the standby copy is what `Arc::get_mut` proves. The cost is twice the classifier
//! memory, and a writer that waits for any reader still holding the old copy — readers must hold
//! snapshots briefly (one packet burst).
//!
//! Under `cfg(loom)` the pointer cell is a loom mutex around a loom `Arc`, so the loom test in
//! `tests/loom.rs` explores every interleaving of the protocol itself.

#[cfg(not(loom))]
mod imp {
    pub use std::sync::Arc;

    /// The published pointer.
    pub(crate) struct Cell<T>(arc_swap::ArcSwap<T>);

    /// What a reader holds while it reads.
    pub type Guard<T> = arc_swap::Guard<Arc<T>>;

    impl<T> Cell<T> {
        pub(crate) fn new(v: Arc<T>) -> Self {
            Cell(arc_swap::ArcSwap::new(v))
        }
        #[inline]
        pub(crate) fn load(&self) -> Guard<T> {
            self.0.load()
        }
        pub(crate) fn load_full(&self) -> Arc<T> {
            self.0.load_full()
        }
        pub(crate) fn swap(&self, v: Arc<T>) -> Arc<T> {
            self.0.swap(v)
        }
    }

    /// Waits a little, more each time, for readers of the old copy to leave.
    pub(crate) fn backoff(spins: u32) {
        if spins < 64 {
            std::hint::spin_loop();
        } else if spins < 2048 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

#[cfg(loom)]
mod imp {
    pub use loom::sync::Arc;

    pub(crate) struct Cell<T>(loom::sync::Mutex<Arc<T>>);

    /// What a reader holds while it reads.
    pub type Guard<T> = Arc<T>;

    #[allow(clippy::unwrap_used)]
    impl<T> Cell<T> {
        pub(crate) fn new(v: Arc<T>) -> Self {
            Cell(loom::sync::Mutex::new(v))
        }
        pub(crate) fn load(&self) -> Guard<T> {
            self.0.lock().unwrap().clone()
        }
        pub(crate) fn load_full(&self) -> Arc<T> {
            self.0.lock().unwrap().clone()
        }
        pub(crate) fn swap(&self, v: Arc<T>) -> Arc<T> {
            core::mem::replace(&mut *self.0.lock().unwrap(), v)
        }
    }

    pub(crate) fn backoff(_spins: u32) {
        loom::thread::yield_now();
    }
}

/// The `Arc` type the protocol uses (loom's under `cfg(loom)`).
pub use imp::Arc;
pub(crate) use imp::Cell;
/// What a reader holds while it reads a copy.
pub use imp::Guard;

/// A state that can replay an operation log.
pub trait Absorb<Op> {
    /// What replaying may read besides the operation (the writer's own records), so a log can
    /// refer to data instead of copying it.
    type Context: ?Sized;
    /// Applies one operation. `published` is the copy readers see, to which the same operation
    /// was applied before it was published (a log can refer to data there instead of copying it).
    fn absorb(&mut self, op: &Op, ctx: &Self::Context, published: &Self);
    /// Applies a whole log, in order: [`Absorb::absorb`] of each operation unless the state
    /// does better with the log at hand (e.g. by reading ahead of the operation it applies).
    fn absorb_log(&mut self, ops: &[Op], ctx: &Self::Context, published: &Self) {
        for op in ops {
            self.absorb(op, ctx, published);
        }
    }
    /// Called after a whole log was applied (e.g. to re-sort).
    fn finish(&mut self);
}

/// The writer side of the two copies.
pub struct Writer<T, Op> {
    cell: Arc<Cell<T>>,
    standby: Arc<T>,
    /// Operations published but not yet applied to `standby`.
    pending: Vec<Op>,
    /// The last replayed log, kept for its capacity.
    spare: Vec<Op>,
    publishes: u64,
}

impl<T: Absorb<Op> + Clone, Op> Writer<T, Op> {
    /// Two copies of `init`; the first is published.
    pub fn new(init: T) -> Self {
        let standby = Arc::new(init.clone());
        Writer {
            cell: Arc::new(Cell::new(Arc::new(init))),
            standby,
            pending: Vec::new(),
            spare: Vec::new(),
            publishes: 0,
        }
    }

    /// A handle readers load snapshots from.
    pub fn reader(&self) -> ReadHandle<T> {
        ReadHandle {
            cell: Arc::clone(&self.cell),
        }
    }

    /// Exclusive access to the standby copy, brought up to date with the published one: waits
    /// for readers of the standby copy to leave, then replays the last published batch on it.
    ///
    /// `ctx` must describe the state as of the last publish (the writer changes its records only
    /// after this call returns).
    pub fn standby_mut(&mut self, ctx: &T::Context) -> &mut T {
        let mut spins = 0u32;
        while Arc::get_mut(&mut self.standby).is_none() {
            imp::backoff(spins);
            spins = spins.saturating_add(1);
        }
        let pending = core::mem::take(&mut self.pending);
        // The loop above proved exclusivity; `get_mut` cannot fail now because only the writer
        // can hand out new references to the standby copy, and it does not.
        let mut pending = pending;
        let published = if pending.is_empty() {
            None
        } else {
            Some(self.cell.load())
        };
        if let Some(t) = Arc::get_mut(&mut self.standby) {
            if let Some(p) = &published {
                t.absorb_log(&pending, ctx, p);
                t.finish();
            }
            pending.clear();
            self.spare = pending;
            return t;
        }
        unreachable_standby()
    }

    /// Replays the last published batch on the standby copy now, if no reader holds that copy
    /// any more (rechecked a few times, spinning, never sleeping): a writer with nothing else to
    /// do between batches takes the replay off the next batch's path. True when nothing is left
    /// to replay. `ctx` as for [`Writer::standby_mut`].
    pub fn catch_up(&mut self, ctx: &T::Context) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        let mut spins = 0u32;
        while Arc::get_mut(&mut self.standby).is_none() {
            if spins >= CATCH_UP_SPINS {
                return false;
            }
            imp::backoff(0);
            spins += 1;
        }
        let _ = self.standby_mut(ctx);
        true
    }

    /// Publishes the standby copy, to which the caller applied `ops` (through
    /// [`Writer::standby_mut`]), and keeps `ops` to replay on the other copy.
    pub fn publish(&mut self, ops: Vec<Op>) {
        let old = self.cell.swap(Arc::clone(&self.standby));
        self.standby = old;
        self.pending = ops;
        self.publishes += 1;
    }

    /// An empty operation log to fill (reusing the last replayed log's memory).
    pub fn take_log_buffer(&mut self) -> Vec<Op> {
        let mut v = core::mem::take(&mut self.spare);
        v.clear();
        v
    }

    /// Number of publishes so far.
    pub fn publishes(&self) -> u64 {
        self.publishes
    }

    /// The published copy (what readers see now), for writer-side reads that must not wait for
    /// readers.
    pub fn published(&self) -> Guard<T> {
        self.cell.load()
    }
}

/// Times [`Writer::catch_up`] checks for readers of the standby copy before leaving the replay
/// to the next batch.
const CATCH_UP_SPINS: u32 = if cfg!(loom) { 2 } else { 64 };

#[cold]
fn unreachable_standby() -> ! {
    // Only reachable if `Arc::get_mut` failed right after succeeding with no other thread able to
    // clone the standby `Arc`: a broken invariant, not a runtime condition.
    panic!("flow table standby copy shared after exclusivity was proven")
}

/// The reader side: cheap to clone, `Send + Sync`.
pub struct ReadHandle<T> {
    cell: Arc<Cell<T>>,
}

impl<T> Clone for ReadHandle<T> {
    fn clone(&self) -> Self {
        ReadHandle {
            cell: Arc::clone(&self.cell),
        }
    }
}

impl<T> ReadHandle<T> {
    /// Loads the published copy (lock-free). Hold the guard briefly: the writer's next batch
    /// waits for it.
    #[inline]
    pub fn load(&self) -> Guard<T> {
        self.cell.load()
    }

    /// Loads the published copy as a full `Arc`.
    pub fn load_full(&self) -> Arc<T> {
        self.cell.load_full()
    }
}
