//! Hints to the processor and the kernel that change no value: a cache-line prefetch
//! ([`prefetch`]) and huge pages for a big buffer ([`advise_huge_pages`]). They hold all of the
//! crate's `unsafe` blocks but one (stable Rust has no safe prefetch, and `madvise` is a system
//! call on an address range); the other is the call of the AVX2 build of a burst lookup after
//! its runtime check, in `lookup.rs`.

/// Asks the processor to bring the cache line holding `r` into its caches (no effect on other
/// architectures).
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    prefetch_ptr((r as *const T).cast::<u8>());
}

/// [`prefetch`] of every cache line `r` spans (its first and last byte: values up to 128 bytes).
#[inline(always)]
pub(super) fn prefetch_all<T>(r: &T) {
    let p = (r as *const T).cast::<u8>();
    prefetch_ptr(p);
    prefetch_ptr(p.wrapping_add(core::mem::size_of::<T>().saturating_sub(1)));
}

/// A prefetch of the line holding `p`. A load in its place would hold up the processor until the
/// line arrives, which is what the hint avoids.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 processor has; a prefetch is a hint
    // that never faults, whatever the address, and reads or writes no value.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Bytes in a huge page (x86_64, aarch64 with 4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the whole 2 MiB pages inside the spare capacity of `v` (not yet
/// written, so not yet faulted in) with transparent huge pages (`MADV_HUGEPAGE`): a buffer read
/// at random (a per-thread cache of tens of MiB) then costs a few TLB entries instead of
/// thousands. Call it before filling the vector. Best effort: buffers under 2 MiB, kernels
/// without huge pages and errors leave it as it was.
#[allow(unsafe_code)]
pub(super) fn advise_huge_pages<T>(v: &Vec<T>) {
    let start = v.as_ptr() as usize;
    let bytes = v.capacity().saturating_mul(core::mem::size_of::<T>());
    let first = start.next_multiple_of(HUGE_PAGE);
    let end = start.saturating_add(bytes) / HUGE_PAGE * HUGE_PAGE;
    if end <= first {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `[first, end)` lies inside `v`'s allocation, which `v` owns and keeps for as
    // long as it lives; MADV_HUGEPAGE changes how the kernel backs those pages, never their
    // contents or their mapping, so no reference is invalidated. The result is only a hint.
    unsafe {
        let _ = libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}
