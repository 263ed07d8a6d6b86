//! Wall-clock timing of `sluice_checksum::sum` in the same format as `bench/dpdk/cksum_bench.c`,
//! so the two can be run alternately by `bench/dpdk/checksum-compare.sh`.
//!
//! Usage: `cargo run --release -p sluice-checksum --example cksum_bench [rounds [sizes...]]`
//! (default 15 rounds, sizes 64 1500 65536), or `cksum_bench count SIZE CALLS` to make CALLS
//! calls of the out-of-line `sluice_sum_once` for `callgrind --toggle-collect`.
//!
//! Output, one line per measurement: `<name> <size> <median ns/op> <GB/s>`, where name is
//! `sluice` (the dispatched `sum`), `sluice-<impl>` (pinned implementation) or `memcpy`
//! (`copy_from_slice` of the same size). A line `check <size> <sum>` lets the script
//! cross-check the result against DPDK's.

use sluice_checksum::simd;
use std::hint::black_box;
use std::time::Instant;

const DEFAULT_SIZES: [usize; 3] = [64, 1500, 65536];

/// A 64-byte-aligned slice of `len` bytes inside `storage`, filled with the shared pattern.
fn aligned(storage: &mut Vec<u8>, len: usize) -> &mut [u8] {
    storage.clear();
    storage.resize(len + 64, 0);
    let skip = storage.as_ptr().align_offset(64);
    let buf = &mut storage[skip..skip + len];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i.wrapping_mul(131).wrapping_add(7)) as u8;
    }
    buf
}

/// Iterations per round: about 256 MiB of data per round, at least 1000 calls.
fn iterations(size: usize) -> usize {
    ((256 << 20) / size).max(1000)
}

fn median_ns(rounds: usize, size: usize, mut op: impl FnMut()) -> f64 {
    let iters = iterations(size);
    for _ in 0..iters / 10 {
        op();
    }
    let mut per_op: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                op();
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    per_op.sort_by(f64::total_cmp);
    per_op[per_op.len() / 2]
}

/// The C harness's `CLOBBER(p)`: tells the compiler the memory behind `data` may have changed
/// (so every call really re-reads it) without moving the pointer through memory, as
/// `black_box(data)` would (a store and a reload per call that the C side does not pay).
#[inline(always)]
fn clobber(data: &[u8]) -> &[u8] {
    // SAFETY: an empty asm block: it reads the pointer from a register and does nothing; not
    // marking it `nomem` only makes the compiler assume memory may have been read or written.
    unsafe {
        core::arch::asm!("/* {0} */", in(reg) data.as_ptr(), options(nostack, preserves_flags))
    };
    data
}

/// The C harness's `SINK(v)`: keeps `v` computed, in a register.
#[inline(always)]
fn sink(v: u16) {
    // SAFETY: an empty asm block that reads `v` from a register and touches nothing.
    unsafe { core::arch::asm!("/* {0:x} */", in(reg) v, options(nomem, nostack, preserves_flags)) };
}

fn report(name: &str, size: usize, ns: f64) {
    println!("{name} {size} {ns:.2} {:.2}", size as f64 / ns);
}

/// One out-of-line call of the dispatched `sum`, so callgrind can count exactly its
/// instructions (`--toggle-collect='*sluice_sum_once*'`).
#[inline(never)]
fn sluice_sum_once(data: &[u8]) -> u16 {
    sluice_checksum::sum(data)
}

fn count_mode(size: usize, calls: usize) {
    let mut storage = Vec::new();
    let buf: &[u8] = aligned(&mut storage, size);
    let mut acc = 0u16;
    for _ in 0..calls {
        acc ^= sluice_sum_once(clobber(buf));
    }
    println!("count {size} {calls} {acc:04x} {:?}", simd::detected());
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, size, calls] = raw.as_slice() {
        if mode == "count" {
            count_mode(size.parse().unwrap_or(65536), calls.parse().unwrap_or(1));
            return;
        }
    }
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(15).max(1);
    let sizes = args
        .get(1..)
        .filter(|s| !s.is_empty())
        .unwrap_or(&DEFAULT_SIZES);
    let mut storage = Vec::new();
    let mut dst_storage = Vec::new();
    for &size in sizes {
        let src = aligned(&mut storage, size);
        println!("check {size} {:04x}", sluice_checksum::sum(src));
        let src: &[u8] = src;
        let ns = median_ns(rounds, size, || {
            sink(sluice_checksum::sum(clobber(src)));
        });
        report("sluice", size, ns);
        for imp in simd::available() {
            let ns = median_ns(rounds, size, || {
                black_box(simd::sum_with(black_box(imp), black_box(src)));
            });
            report(&format!("sluice-{}", imp.name()), size, ns);
        }
        let dst = aligned(&mut dst_storage, size);
        let ns = median_ns(rounds, size, || {
            black_box(&mut *dst).copy_from_slice(black_box(src));
        });
        report("memcpy", size, ns);
    }
}
