//! The allocator setting the daemon runs with (`sluice run`), here because this is the crate
//! allowed `unsafe`.
//!
//! glibc's `malloc` serves a large allocation with a mapping of its own, but raises that
//! "large" threshold (up to 32 MiB) each time it frees such a mapping. A daemon whose tables
//! grow by doubling then gets its big vectors from the heap, and each growth copies the
//! vector into fresh, zeroed pages. With the threshold fixed, every big vector is a mapping
//! and grows by `mremap`: the pages move, nothing is copied. Measured on a 1M-rule load
//! into the daemon (BENCHMARKS.md): `realloc` went from 7 % to 3 % of the daemon's samples,
//! the load ran faster and the daemon's resident growth per rule fell.

/// The threshold `sluice run` fixes: allocations of 1 MiB and more get their own mapping.
pub const DAEMON_MMAP_THRESHOLD: usize = 1 << 20;

/// Whether the environment already tells glibc's `malloc` its mapping threshold
/// (`MALLOC_MMAP_THRESHOLD_`, or `mmap_threshold` in `GLIBC_TUNABLES`): the operator's
/// setting is then left alone.
pub fn mmap_threshold_from_env() -> bool {
    std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some_and(|v| !v.is_empty())
        || std::env::var_os("GLIBC_TUNABLES")
            .is_some_and(|t| t.to_string_lossy().contains("mmap_threshold"))
}

/// Fixes glibc's `malloc` mapping threshold at `bytes` (`mallopt(M_MMAP_THRESHOLD)`): every
/// allocation of that size or more gets a mapping of its own, and the threshold no longer
/// moves. Returns whether it was set: false on another C library, or for a value glibc
/// refuses (too large for its heaps, or for an `int`).
pub fn fix_mmap_threshold(bytes: usize) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let Ok(v) = libc::c_int::try_from(bytes) else {
            return false;
        };
        // SAFETY: mallopt only changes malloc's parameters (under its own lock); it takes
        // two integers and touches no memory of ours.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, v) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = bytes;
        false
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn glibc_takes_the_threshold() {
        assert!(fix_mmap_threshold(DAEMON_MMAP_THRESHOLD));
        // Not an `int`: refused before glibc sees it.
        assert!(!fix_mmap_threshold(usize::MAX));
        // A vector grown past the threshold still holds what was written.
        let mut v = vec![7u8; 3 << 20];
        v.resize(9 << 20, 9);
        assert!(v[..3 << 20].iter().all(|&b| b == 7) && v[3 << 20..].iter().all(|&b| b == 9));
    }
}
