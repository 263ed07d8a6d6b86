//! Would a fused copy-and-sum pay where Sluice copies a payload and sums it (software GSO
//! packing the VXLAN hop's datagrams, GRO's merge)? A probe, not a library function: it times,
//! per 64 KiB super-frame cut into 44 segments of 1 448 bytes, each with a 58-byte header in
//! front (the packing of `sluice_offload`'s `pack_tunnel_uso`),
//!
//! - `sum+copy`: `sluice_checksum::sum` of each segment, then `extend_from_slice` (what the
//!   live path does);
//! - `copy`: the copies alone;
//! - `fused`: one AVX-512 pass that stores each 64-byte vector and adds it to the sum.
//!
//! Usage: `cargo run --release -p sluice-checksum --example copy_sum_probe [ROUNDS]`
//! (default 5). Needs AVX-512 (F and BW) for the fused row; prints one line per round, ns per
//! super-frame. Before timing, the fused pass is checked against `sum` and the source at every
//! length from 0 to 130 bytes and at the segment size.
//! BENCHMARKS.md ("The busy poll yields", tried and not built) has what it measured.

use std::hint::black_box;
use std::time::Instant;

const SEGMENT: usize = 1448;
const SEGMENTS: usize = 44;
const HEADER: [u8; 58] = [0u8; 58];
const ITERS: usize = 20_000;

#[cfg(target_arch = "x86_64")]
mod fused {
    use std::arch::x86_64::*;

    /// Copies `src` into the spare capacity of `out` and returns the folded big-endian sum of
    /// `src` (as `sluice_checksum::sum`). `None` without AVX-512.
    pub fn extend_and_sum(out: &mut Vec<u8>, src: &[u8]) -> Option<u16> {
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")) {
            return None;
        }
        out.reserve(src.len());
        let len = out.len();
        // SAFETY: AVX-512 F and BW were detected just above; `reserve` made room for
        // `src.len()` bytes after `len`, which `copy_sum` writes before `set_len` exposes them.
        unsafe {
            let acc = copy_sum(out.as_mut_ptr().add(len), src);
            out.set_len(len + src.len());
            Some(sluice_checksum::fold(acc).swap_bytes())
        }
    }

    /// Stores each 64-byte vector of `src` at `dst` and adds its little-endian words to the
    /// sum (the `pmaddwd` bias trick of `sluice_checksum`'s vector loops: each word is offset by
    /// -32 768, so each 32-bit lane of a vector is two words minus 65 536, corrected at the end).
    /// The 32-bit lanes are not widened on the way (as `sum`'s loops do per block), so inputs
    /// are limited to 4 MiB; the probe's are 1 448 bytes.
    ///
    /// # Safety
    /// AVX-512 F and BW must be available, and `dst` valid for `src.len()` bytes of writes.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn copy_sum(dst: *mut u8, src: &[u8]) -> u64 {
        assert!(src.len() <= 4 << 20, "the 32-bit lanes would wrap");
        let flip = _mm512_set1_epi16(i16::MIN);
        let ones = _mm512_set1_epi16(1);
        let step = |acc: __m512i, v: __m512i| {
            _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_xor_si512(v, flip), ones))
        };
        let (mut a, mut b) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let mut vectors = 0i64;
        let mut i = 0;
        // Two vectors per iteration, two accumulators.
        while i + 128 <= src.len() {
            // SAFETY: bytes `i..i + 128` are within `src` and within `dst`'s `src.len()`.
            unsafe {
                let v = _mm512_loadu_si512(src.as_ptr().add(i).cast());
                let w = _mm512_loadu_si512(src.as_ptr().add(i + 64).cast());
                _mm512_storeu_si512(dst.add(i).cast(), v);
                _mm512_storeu_si512(dst.add(i + 64).cast(), w);
                a = step(a, v);
                b = step(b, w);
            }
            vectors += 2;
            i += 128;
        }
        while i < src.len() {
            let k = (src.len() - i).min(64);
            let mask: __mmask64 = if k == 64 { !0 } else { (1u64 << k) - 1 };
            // SAFETY: the mask selects `k` bytes from offset `i` of `src` and of `dst`, both
            // within their `src.len()` bytes; masked-off bytes are not accessed.
            let v = unsafe {
                let v = _mm512_maskz_loadu_epi8(mask, src.as_ptr().add(i).cast());
                _mm512_mask_storeu_epi8(dst.add(i).cast(), mask, v);
                v
            };
            a = step(a, v);
            vectors += 1;
            i += 64;
        }
        let widen = |v: __m512i| {
            _mm512_add_epi64(
                _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)),
                _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(v)),
            )
        };
        let wide = _mm512_add_epi64(widen(a), widen(b));
        (_mm512_reduce_add_epi64(wide) + vectors * 16 * 0x1_0000) as u64
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod fused {
    pub fn extend_and_sum(_: &mut Vec<u8>, _: &[u8]) -> Option<u16> {
        None
    }
}

fn time(mut one: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..ITERS {
        one();
    }
    t.elapsed().as_nanos() as f64 / ITERS as f64
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("ROUNDS: a number"))
        .unwrap_or(5);
    let src: Vec<u8> = (0..SEGMENT * SEGMENTS)
        .map(|i| (i.wrapping_mul(131).wrapping_add(7)) as u8)
        .collect();
    let mut out: Vec<u8> = Vec::with_capacity(SEGMENTS * (SEGMENT + HEADER.len()));
    // Correctness first: the fused pass copies exactly and sums as `sum` does, at every
    // length up to two vectors and at the segment size.
    for len in (0..=130).chain([SEGMENT]) {
        let s = &src[1..1 + len];
        out.clear();
        if let Some(f) = fused::extend_and_sum(&mut out, s) {
            assert_eq!(f, sluice_checksum::sum(s), "sum of {len} bytes");
            assert_eq!(&out[..], s, "copy of {len} bytes");
        }
    }
    for round in 1..=rounds {
        let a = time(|| {
            out.clear();
            let mut x = 0u16;
            for c in src.chunks(SEGMENT) {
                x ^= sluice_checksum::sum(c);
                out.extend_from_slice(&HEADER);
                out.extend_from_slice(c);
            }
            black_box((&out, x));
        });
        let b = time(|| {
            out.clear();
            for c in src.chunks(SEGMENT) {
                out.extend_from_slice(&HEADER);
                out.extend_from_slice(c);
            }
            black_box(&out);
        });
        let mut have = true;
        let c = time(|| {
            out.clear();
            let mut x = 0u16;
            for c in src.chunks(SEGMENT) {
                out.extend_from_slice(&HEADER);
                match fused::extend_and_sum(&mut out, c) {
                    Some(s) => x ^= s,
                    None => have = false,
                }
            }
            black_box((&out, x));
        });
        let fused = if have {
            format!("{c:.0}")
        } else {
            "- (no AVX-512)".into()
        };
        println!(
            "round {round}: sum+copy {a:.0} ns, copy {b:.0} ns, fused {fused} ns per super-frame"
        );
    }
}
