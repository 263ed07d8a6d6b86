//! Runtime selection between the scalar, AVX2 and AVX-512 implementations of [`crate::sum`],
//! and its short-input paths.
//!
//! Every implementation returns bit-identical results for every input (including the
//! `0x0000`/`0xffff` choice), so selection only affects speed. Detection runs once, on first
//! use, and is cached in an atomic; after that [`crate::sum`] pays one relaxed load and a
//! predictable branch. [`sum_with`] pins an implementation for tests and benchmarks. Inputs
//! under 256 bytes skip the selection: they take an inline path chosen when the crate is
//! compiled (AVX-512 in a build for a CPU that has it, an `adc` chain in a portable build).
//!
//! This is the only module of the crate allowed to use `unsafe`: unaligned vector loads and
//! calls into `#[target_feature]` functions after the feature was detected.

use core::sync::atomic::{AtomicU8, Ordering};

/// An implementation of the ones'-complement sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Impl {
    /// Portable 64-bit word loop; available everywhere.
    Scalar,
    /// 256-bit AVX2 loop (x86_64 with `avx2`).
    Avx2,
    /// 512-bit AVX-512 loop (x86_64 with `avx512f` and `avx512bw`).
    Avx512,
}

impl Impl {
    /// Every implementation, slowest first.
    pub const ALL: [Impl; 3] = [Impl::Scalar, Impl::Avx2, Impl::Avx512];

    /// Short lowercase name (`"scalar"`, `"avx2"`, `"avx512"`), for bench labels and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Impl::Scalar => "scalar",
            Impl::Avx2 => "avx2",
            Impl::Avx512 => "avx512",
        }
    }

    /// Whether the running CPU supports this implementation.
    pub fn is_available(self) -> bool {
        match self {
            Impl::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Impl::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Impl::Avx512 => {
                std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Impl::Avx2 | Impl::Avx512 => false,
        }
    }
}

const UNKNOWN: u8 = 0;
const SCALAR: u8 = 1;
const AVX2: u8 = 2;
const AVX512: u8 = 3;

/// Cached result of [`detected`]; `UNKNOWN` until the first call.
static SELECTED: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The fastest implementation the running CPU supports (AVX-512, then AVX2, then scalar).
///
/// Used by [`crate::sum`]. Detection runs on the first call and is cached; racing first calls
/// all compute the same answer, so a relaxed store is enough.
///
/// ```
/// use sluice_checksum::simd;
/// let best = simd::detected();
/// assert!(best.is_available());
/// assert_eq!(simd::available().last(), Some(best));
/// ```
#[inline]
pub fn detected() -> Impl {
    match SELECTED.load(Ordering::Relaxed) {
        SCALAR => Impl::Scalar,
        AVX2 => Impl::Avx2,
        AVX512 => Impl::Avx512,
        _ => detect_and_cache(),
    }
}

#[cold]
fn detect_and_cache() -> Impl {
    let best = if Impl::Avx512.is_available() {
        Impl::Avx512
    } else if Impl::Avx2.is_available() {
        Impl::Avx2
    } else {
        Impl::Scalar
    };
    let code = match best {
        Impl::Scalar => SCALAR,
        Impl::Avx2 => AVX2,
        Impl::Avx512 => AVX512,
    };
    SELECTED.store(code, Ordering::Relaxed);
    best
}

/// The implementations the running CPU supports, slowest first (always starts with `Scalar`).
///
/// ```
/// use sluice_checksum::simd::{available, Impl};
/// let imps: Vec<Impl> = available().collect();
/// assert_eq!(imps[0], Impl::Scalar);
/// ```
pub fn available() -> impl Iterator<Item = Impl> {
    Impl::ALL.into_iter().filter(|i| i.is_available())
}

/// [`crate::sum`] computed with implementation `imp`, or `None` if the CPU lacks it.
///
/// Unlike [`crate::sum`] this never takes the small-input scalar shortcut, so tests exercise the
/// vector code (and its tail handling) at every length.
///
/// ```
/// use sluice_checksum::{simd, sum};
/// let data: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
/// // Every implementation the CPU has gives the same bits.
/// for imp in simd::available() {
///     assert_eq!(simd::sum_with(imp, &data), Some(sum(&data)));
/// }
/// ```
pub fn sum_with(imp: Impl, data: &[u8]) -> Option<u16> {
    if !imp.is_available() {
        return None;
    }
    // SAFETY: `imp.is_available()` just confirmed the CPU supports it.
    let acc = unsafe { sum_le_unchecked(imp, data) };
    Some(crate::fold(acc).swap_bytes())
}

/// Little-endian-word sum with the detected implementation (see `scalar::sum_le`).
///
/// Out of line on purpose: [`crate::sum`] inlines its short-input path, and keeping the
/// dispatch and the vector loops out of it leaves that path free of callee-saved register
/// spills (a call costs nothing next to the >= 256 bytes this handles).
#[inline(never)]
pub(crate) fn sum_le_dispatched(data: &[u8]) -> u64 {
    let imp = detected();
    // SAFETY: `detected()` only returns implementations whose features were detected.
    unsafe { sum_le_unchecked(imp, data) }
}

/// The short-input sum (below [`crate::SIMD_MIN_LEN`] bytes) used by [`crate::sum`] on x86_64
/// in a build without AVX-512 (see [`sum_short_folded`]).
///
/// The whole 32-byte blocks go through one `adc` chain: one instruction per 8-byte word, the
/// carry flag carried across iterations (`lea` and `dec` leave it alone). The 0..=3 words after
/// them and the last `len % 8` bytes (one overlapping load of the buffer's end, shifted into
/// place instead of a 4/2/1-byte ladder) are summed in `u128`s alongside, off the chain's
/// critical path. Baseline x86_64 only, so no dispatch and no call. Same result as
/// `scalar::sum_le` after folding for every input, and zero only when every byte is zero (an
/// end-around-carry sum of words that are not all zero is never zero).
///
/// Measured against alternatives (`cksum_bench count 64`, same run): everything in one `adc`
/// chain has fewer instructions (47 vs 54 per 64-byte call) but runs ~9 % slower; a 256-bit
/// AVX2 short path behind the dispatch ran 2x slower.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn sum_le_short(data: &[u8]) -> u64 {
    use crate::scalar::add_carry;
    let Some(last8) = data.last_chunk::<8>() else {
        return crate::scalar::sum_le(data);
    };
    let split = data.len() & !31;
    let mut words: u64 = 0;
    // SAFETY: the loop reads the `split / 32` whole 32-byte blocks from `data.as_ptr()`, i.e.
    // exactly `data[..split]` with `split <= data.len()`; `data` is a live shared borrow for the
    // whole block. No stack use, no memory writes; flags are clobbered (asm! assumes so without
    // `preserves_flags`). The final `adc 0` cannot carry out: an `adc` that sets CF leaves at
    // most 2^64 - 2 unless both inputs were 2^64 - 1 with CF set, a state the chain cannot
    // enter from CF = 0.
    unsafe {
        core::arch::asm!(
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "adc {acc}, qword ptr [{p}]",
            "adc {acc}, qword ptr [{p} + 8]",
            "adc {acc}, qword ptr [{p} + 16]",
            "adc {acc}, qword ptr [{p} + 24]",
            "lea {p}, [{p} + 32]",
            "dec {n}",
            "jnz 2b",
            "3:",
            "adc {acc}, 0",
            acc = inout(reg) words,
            p = inout(reg) data.as_ptr() => _,
            n = inout(reg) split / 32 => _,
            options(pure, readonly, nostack),
        );
    }
    let rest = data.get(split..).unwrap_or(&[]);
    let (mut a, mut b) = (u128::from(words), 0u128);
    let mut chunks = rest.chunks_exact(8);
    if let Some(w) = chunks.next().and_then(|w| w.first_chunk::<8>()) {
        a += u128::from(u64::from_le_bytes(*w));
    }
    if let Some(w) = chunks.next().and_then(|w| w.first_chunk::<8>()) {
        b += u128::from(u64::from_le_bytes(*w));
    }
    if let Some(w) = chunks.next().and_then(|w| w.first_chunk::<8>()) {
        a += u128::from(u64::from_le_bytes(*w));
    }
    // The `r` bytes after the last whole word are the top `r` bytes of the buffer's last 8
    // bytes. They start at an 8-aligned (so even) offset: moving them to bytes 0..r puts every
    // byte at its position in its 16-bit word. Two shifts: r = 0 shifts all out instead of
    // overflowing.
    let r = (rest.len() % 8) as u32;
    let tail = (u64::from_le_bytes(*last8) >> (63 - 8 * r)) >> 1;
    let total = a + b + u128::from(tail);
    add_carry((total >> 64) as u64, total as u64)
}

/// The folded little-endian-word sum of a short input (below [`crate::SIMD_MIN_LEN`] bytes), as
/// [`crate::sum`] uses it on x86_64: inline AVX-512 when the build targets it (`-C
/// target-cpu=native` on such a CPU, like DPDK's `-march=native`), else inline SSE2 for
/// [`SSE2_SHORT`] lengths and the inline `adc` chain of [`sum_le_short`] for the others.
///
/// Without AVX-512 in the build the choice would cost a runtime check and a call into a
/// `#[target_feature]` function, which cannot be inlined: measured (`cksum_bench 9 64`, AMD
/// EPYC), that call to the AVX-512 path took 3.3 ns per 64-byte sum against the inline `adc`
/// chain's 2.8 ns, so a portable build keeps the chain. Inlined, the AVX-512 path takes 1.8 ns
/// (DPDK's inlined `rte_raw_cksum`, built with `-march=native`: 2.0 ns).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn sum_short_folded(data: &[u8]) -> u16 {
    if NATIVE_AVX512 {
        // SAFETY: NATIVE_AVX512 says this build targets avx512f, avx512bw and bmi2, so it only
        // runs on CPUs that have them (in any other build the branch is dead, removed at compile
        // time).
        fold32(unsafe { x86::sum_le_short_avx512(data) })
    } else if let (true, Some(last8)) = (
        // `SSE2_SHORT.contains(..)` in one comparison.
        data.len().wrapping_sub(SSE2_SHORT.start) < SSE2_SHORT.end - SSE2_SHORT.start,
        data.last_chunk::<8>(),
    ) {
        x86::sum_folded_sse2(data, last8)
    } else {
        crate::fold(sum_le_short(data))
    }
}

/// Whether this build targets AVX-512 (with BMI2 for the masked load's `bzhi`), so that
/// [`sum_short_folded`] can inline [`x86::sum_le_short_avx512`]: the one place that condition is
/// written.
/// Lengths the portable build sums with SSE2 ([`x86::sum_folded_sse2`]) rather than the `adc`
/// chain. Measured (`cksum_bench 15 32 48 64 80 96 112 128 160`, both builds alternating, ns per
/// sum on an Intel Xeon with 2 MiB of L2): SSE2 2.8 / 3.4 (64 bytes) / 4.2 (96) against the
/// chain's 4.1 / 5.0 / 5.9 when the input is whole vectors, 3.9 against 4.4 at 40 bytes; level at
/// 20 bytes and at 128; slower from 160 on, where the chain's one instruction per 8 bytes wins.
#[cfg(target_arch = "x86_64")]
const SSE2_SHORT: core::ops::Range<usize> = 32..128;

#[cfg(target_arch = "x86_64")]
const NATIVE_AVX512: bool = cfg!(all(
    target_feature = "avx512f",
    target_feature = "avx512bw",
    target_feature = "bmi2"
));

/// Folds a 32-bit sum of 16-bit words to 16 bits; zero only for zero. The high half of
/// `sum + sum.rotate_left(16)` is the two halves' sum plus the carry out of the low half's
/// (the same sum): their end-around-carry add, in three operations.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
const fn fold32(sum: u32) -> u16 {
    (sum.wrapping_add(sum.rotate_left(16)) >> 16) as u16
}

/// # Safety
/// The CPU must support `imp` (see [`Impl::is_available`]).
#[inline(always)]
unsafe fn sum_le_unchecked(imp: Impl, data: &[u8]) -> u64 {
    match imp {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller guarantees avx512f and avx512bw are present.
        Impl::Avx512 => unsafe { x86::sum_le_avx512(data) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller guarantees avx2 is present.
        Impl::Avx2 => unsafe { x86::sum_le_avx2(data) },
        _ => crate::scalar::sum_le(data),
    }
}

/// AVX2 and AVX-512 loops.
///
/// Method: XOR each 16-bit word with 0x8000 (turning the unsigned word `w` into the signed
/// `w - 0x8000`), then `pmaddwd` against a vector of ones adds adjacent pairs into signed
/// 32-bit lanes (`w0 + w1 - 0x10000`). That is one cheap op plus one multiply-add per vector
/// instead of the two shuffles a zero-extension needs. Lanes are accumulated in i32 for at most
/// `BLOCK` vectors per accumulator (|lane| <= 0x10000 per vector, so no overflow), then widened
/// into i64 lanes. The bias, exactly 0x10000 per 32-bit lane per vector, is added back at the
/// end, so the result is the exact integer sum of the little-endian words.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::scalar::{add_carry, sum_le};

    use core::arch::x86_64::*;

    /// Unrolled iterations per block before the i32 accumulators are widened. Each of the four
    /// accumulators sees one vector per iteration, so their i32 sum stays within
    /// 4 * 4096 * 0x10000 = 2^30 < 2^31.
    const BLOCK: usize = 4096;

    /// Bias added back per 32-bit lane per vector.
    const LANE_BIAS: i64 = 0x1_0000;

    /// The unrolled loop both vector widths share: four accumulators over `4 * V`-byte chunks,
    /// widened into i64 lanes every `BLOCK` iterations, then single `V`-byte vectors into one more
    /// accumulator. Evaluates to `(wide, acc, vectors, rest)`: the widened block sums, the single
    /// vectors' accumulator (not widened yet), how many vectors were summed, and the bytes left.
    macro_rules! vector_loop {
        ($data:expr, $v:expr, $zero:ident, $load:ident, $add32:ident, $add64:ident, $step:ident, $widen:ident) => {{
            let mut wide = $zero();
            let mut vectors: i64 = 0;
            let mut chunks = $data.chunks_exact(4 * $v);
            loop {
                let (mut a0, mut a1, mut a2, mut a3) = ($zero(), $zero(), $zero(), $zero());
                let mut n = 0;
                for c in (&mut chunks).take(BLOCK) {
                    let p = c.as_ptr();
                    // SAFETY: `c` is exactly 4 * V bytes, so the four V-byte unaligned loads at
                    // offsets 0, V, 2V and 3V stay inside it.
                    let (v0, v1, v2, v3) = unsafe {
                        (
                            $load(p.cast()),
                            $load(p.add($v).cast()),
                            $load(p.add(2 * $v).cast()),
                            $load(p.add(3 * $v).cast()),
                        )
                    };
                    a0 = $step(a0, v0);
                    a1 = $step(a1, v1);
                    a2 = $step(a2, v2);
                    a3 = $step(a3, v3);
                    n += 1;
                }
                if n == 0 {
                    break;
                }
                vectors += 4 * n as i64;
                let block = $add32($add32(a0, a1), $add32(a2, a3));
                wide = $add64(wide, $widen(block));
            }
            let mut singles = chunks.remainder().chunks_exact($v);
            let mut acc = $zero();
            for c in &mut singles {
                // SAFETY: `c` is exactly V bytes.
                let v = unsafe { $load(c.as_ptr().cast()) };
                acc = $step(acc, v);
                vectors += 1;
            }
            (wide, acc, vectors, singles.remainder())
        }};
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn sum_le_avx2(data: &[u8]) -> u64 {
        const V: usize = 32;
        let flip = _mm256_set1_epi16(i16::MIN);
        let ones = _mm256_set1_epi16(1);
        let step = |acc: __m256i, v: __m256i| {
            _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_xor_si256(v, flip), ones))
        };
        let widen = |v: __m256i| {
            let lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
            let hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(v));
            _mm256_add_epi64(lo, hi)
        };
        let (wide, acc, vectors, rest) = vector_loop!(
            data,
            V,
            _mm256_setzero_si256,
            _mm256_loadu_si256,
            _mm256_add_epi32,
            _mm256_add_epi64,
            step,
            widen
        );
        let wide = _mm256_add_epi64(wide, widen(acc));
        let lanes = _mm256_extract_epi64::<0>(wide)
            + _mm256_extract_epi64::<1>(wide)
            + _mm256_extract_epi64::<2>(wide)
            + _mm256_extract_epi64::<3>(wide);
        // Exact sum of the vector part's LE words: non-negative by construction.
        let exact = lanes + vectors * (V as i64 / 4) * LANE_BIAS;
        add_carry(exact as u64, sum_le(rest))
    }

    /// SSE2 folded sum of a short input of [`super::SSE2_SHORT`] bytes (`last8`: its last 8
    /// bytes): whole 16-byte vectors, each one's eight 16-bit words zero-extended into 32-bit
    /// lanes (`punpcklwd` / `punpckhwd` against zero) and added; the four lanes added; then the
    /// 0..=15 bytes after the vectors as one 8-byte word and the tail of
    /// [`super::sum_le_short`] (one overlapping load of the last 8 bytes, shifted into place).
    /// When the input is whole vectors (64 bytes, 96), the lanes' sum (below 2^22) folds in
    /// three operations ([`super::fold32`]). SSE2 is part of the x86_64 baseline: no detection,
    /// no call, and it inlines into [`crate::sum`] in every build.
    ///
    /// Zero only for all-zero input, as every other path.
    #[inline(always)]
    pub(super) fn sum_folded_sse2(data: &[u8], last8: &[u8; 8]) -> u16 {
        debug_assert!(super::SSE2_SHORT.contains(&data.len()));
        sum_folded_sse2_unchecked(data, last8)
    }

    /// [`sum_folded_sse2`] for any length below 256 bytes (the tests check it beyond the range
    /// it serves).
    #[inline(always)]
    pub(super) fn sum_folded_sse2_unchecked(data: &[u8], last8: &[u8; 8]) -> u16 {
        let vecs = data.len() / 16;
        debug_assert!(data.len() < 256);
        // SAFETY: SSE2 is in the x86_64 baseline. Vector `i < vecs` is read from
        // `data.as_ptr() + 16 * i`: 16 bytes within `data[..16 * vecs]` (unaligned loads).
        let lanes = unsafe {
            let z = _mm_setzero_si128();
            let p = data.as_ptr();
            let (mut a, mut b) = (z, z);
            for i in 0..vecs {
                let v = _mm_loadu_si128(p.add(16 * i).cast());
                a = _mm_add_epi32(a, _mm_unpacklo_epi16(v, z));
                b = _mm_add_epi32(b, _mm_unpackhi_epi16(v, z));
            }
            let s = _mm_add_epi32(a, b);
            let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
            let s = _mm_add_epi32(s, _mm_srli_epi64::<32>(s));
            // At most 2 * 8 words of at most 0xffff per vector, fewer than 16 vectors.
            _mm_cvtsi128_si32(s) as u32
        };
        let rest = data.get(16 * vecs..).unwrap_or(&[]);
        if rest.is_empty() {
            return super::fold32(lanes);
        }
        let mut more = 0u64;
        if let Some(w) = rest.first_chunk::<8>() {
            more = u64::from_le_bytes(*w);
        }
        let r = (rest.len() % 8) as u32;
        let tail = (u64::from_le_bytes(*last8) >> (63 - 8 * r)) >> 1;
        let total = u128::from(lanes) + u128::from(more) + u128::from(tail);
        crate::fold(add_carry((total >> 64) as u64, total as u64))
    }

    /// AVX-512 sum of a short input (meant for fewer than [`crate::SIMD_MIN_LEN`] bytes):
    /// whole 64-byte vectors while more than 64 bytes are left, each one's 16-bit words added
    /// in 32-bit lanes (low word plus high word, both zero-extended), then one masked load of
    /// the last 0..=64 bytes added through `vpmaddwd` (see the body), and the 16 lanes added at
    /// the end. Inlined into [`crate::sum`] when the build targets AVX-512 (see
    /// [`super::sum_short_folded`]), so 64 bytes are a mask, one masked load, an xor, a
    /// multiply-add (fused with the add where the CPU has VNNI) and the reduction.
    ///
    /// Returns the exact sum of the little-endian words for up to 64 KiB (at most 2^15 words of
    /// at most 0xffff: below 2^31, and every lane stays non-negative).
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    #[inline]
    pub(super) fn sum_le_short_avx512(data: &[u8]) -> u32 {
        debug_assert!(data.len() <= 1 << 16);
        let low = _mm512_set1_epi32(0xffff);
        let step = |acc: __m512i, v: __m512i| {
            let words = _mm512_add_epi32(_mm512_and_si512(v, low), _mm512_srli_epi32::<16>(v));
            _mm512_add_epi32(acc, words)
        };
        // The last vector is added as `(w0 - 0x8000) + (w1 - 0x8000)` per lane (an xor and a
        // `vpmaddwd`, fused with the add into `vpdpwssd` where the CPU has VNNI): one operation
        // fewer than `step`, its bias of -0x10000 per lane cancelled by starting there.
        let flip = _mm512_set1_epi16(i16::MIN);
        let ones = _mm512_set1_epi16(1);
        let mut acc = _mm512_set1_epi32(0x1_0000);
        let mut rest = data;
        while rest.len() > 64 {
            // SAFETY: `rest` has more than 64 bytes, so the 64-byte load stays inside it.
            acc = step(acc, unsafe { _mm512_loadu_si512(rest.as_ptr().cast()) });
            rest = rest.get(64..).unwrap_or_default();
        }
        // 0..=64 bytes left (0 only for empty `data`); `bzhi` keeps the low `len` bits of the
        // all-ones mask (all of them for 64).
        let mask: __mmask64 = _bzhi_u64(u64::MAX, rest.len() as u32);
        // SAFETY: the mask selects exactly the `rest.len()` bytes of `rest`; AVX-512 masked
        // loads neither read nor fault on masked-off bytes, which load as zero (so an odd
        // last byte is the low byte of a zero-padded LE word).
        let last = unsafe { _mm512_maskz_loadu_epi8(mask, rest.as_ptr().cast()) };
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_xor_si512(last, flip), ones));
        // The 16 lanes added in halves: 256-bit, then 128-bit adds (narrower operations than
        // `_mm512_reduce_add_epi32`'s full-width first add).
        let s = _mm256_add_epi32(
            _mm512_castsi512_si256(acc),
            _mm512_extracti64x4_epi64::<1>(acc),
        );
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_srli_epi64::<32>(s));
        _mm_cvtsi128_si32(s) as u32
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn sum_le_avx512(data: &[u8]) -> u64 {
        const V: usize = 64;
        let flip = _mm512_set1_epi16(i16::MIN);
        let ones = _mm512_set1_epi16(1);
        let step = |acc: __m512i, v: __m512i| {
            _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_xor_si512(v, flip), ones))
        };
        let widen = |v: __m512i| {
            let lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
            let hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(v));
            _mm512_add_epi64(lo, hi)
        };
        let (wide, mut acc, mut vectors, tail) = vector_loop!(
            data,
            V,
            _mm512_setzero_si512,
            _mm512_loadu_si512,
            _mm512_add_epi32,
            _mm512_add_epi64,
            step,
            widen
        );
        if !tail.is_empty() {
            // Masked-off bytes load as zero, which the bias correction below turns back into
            // exactly zero; an odd last byte becomes the low byte of a zero-padded LE word.
            let mask: __mmask64 = (1u64 << tail.len()) - 1;
            // SAFETY: `tail.len() < V`, and the mask selects exactly its bytes; AVX-512 masked
            // loads do not access (or fault on) masked-off bytes.
            let v = unsafe { _mm512_maskz_loadu_epi8(mask, tail.as_ptr().cast()) };
            acc = step(acc, v);
            vectors += 1;
        }
        let wide = _mm512_add_epi64(wide, widen(acc));
        let exact = _mm512_reduce_add_epi64(wide) + vectors * (V as i64 / 4) * LANE_BIAS;
        exact as u64
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The exact sum of `d`'s little-endian 16-bit words (an odd last byte zero-padded).
    fn le_words(d: &[u8]) -> u64 {
        d.chunks(2)
            .map(|w| u64::from(w[0]) | u64::from(w.get(1).copied().unwrap_or(0)) << 8)
            .sum()
    }

    fn bytes(len: usize) -> Vec<u8> {
        (0..len as u32).map(|i| (i * 151 + 17) as u8).collect()
    }

    /// The short paths (the portable build's `adc` chain and SSE2, and the AVX-512 one a
    /// native build inlines) against the scalar loop at every length they serve, at even and odd offsets,
    /// for all-zero, all-ones and mixed bytes; whichever one this build's `crate::sum` uses, the
    /// other is tested here too.
    #[test]
    fn short_paths_match_scalar() {
        let avx512 = Impl::Avx512.is_available() && std::is_x86_feature_detected!("bmi2");
        for fill in [None, Some(0x00u8), Some(0xff)] {
            let mut data = bytes(crate::SIMD_MIN_LEN + 2);
            if let Some(f) = fill {
                data.fill(f);
            }
            for start in 0..2 {
                for len in 0..data.len() - start {
                    let d = &data[start..start + len];
                    let want = crate::fold(crate::scalar::sum_le(d));
                    assert_eq!(crate::fold(sum_le_short(d)), want, "adc, len {len}");
                    assert_eq!(sum_le_short(d) == 0, want == 0, "adc zero, len {len}");
                    if let Some(last8) = d.last_chunk::<8>().filter(|_| len < 256) {
                        // Beyond the lengths it serves too (8..256), and all zero only for
                        // all-zero bytes.
                        let got = x86::sum_folded_sse2_unchecked(d, last8);
                        assert_eq!(got, want, "sse2, len {len}");
                        assert_eq!(got == 0, d.iter().all(|&b| b == 0), "sse2 zero, len {len}");
                    }
                    if avx512 {
                        // SAFETY: avx512f, avx512bw and bmi2 were detected just above.
                        let got = unsafe { x86::sum_le_short_avx512(d) };
                        assert_eq!(fold32(got), want, "avx512, len {len}");
                        assert_eq!(u64::from(got), le_words(d), "exact word sum, len {len}");
                    }
                }
            }
        }
        eprintln!("AVX-512 short path tested: {avx512}");
    }

    /// The AVX-512 short path stays exact up to the 64 KiB its documentation promises: all-ones
    /// at the largest lengths (the biggest lane and total sums), and random lengths at odd
    /// offsets.
    #[test]
    fn avx512_short_path_is_exact_to_64_kib() {
        if !(Impl::Avx512.is_available() && std::is_x86_feature_detected!("bmi2")) {
            eprintln!("no AVX-512: skipped");
            return;
        }
        let ones = vec![0xffu8; 1 << 16];
        for len in [65_536, 65_535, 65_534, 4_097, 257] {
            let d = &ones[..len];
            // SAFETY: avx512f, avx512bw and bmi2 were detected above.
            let got = unsafe { x86::sum_le_short_avx512(d) };
            assert_eq!(u64::from(got), le_words(d), "all ones, len {len}");
        }
        // SAFETY: as above.
        assert_eq!(unsafe { x86::sum_le_short_avx512(&ones) }, 0x7fff_8000);
        let data = bytes((1 << 16) + 1);
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let len = (x as usize) % (1 << 16);
            let d = &data[1..=len];
            // SAFETY: as above.
            let got = unsafe { x86::sum_le_short_avx512(d) };
            assert_eq!(u64::from(got), le_words(d), "len {len} at offset 1");
        }
    }

    /// `fold32` equals the general `fold` on every u32 of a dense sample, and at the edges.
    #[test]
    fn fold32_matches_fold() {
        let edges = [
            0,
            1,
            0xffff,
            0x1_0000,
            0xfffe_0001,
            0xffff_0000,
            0xffff_ffff,
            0x8000_8000,
        ];
        for v in edges
            .into_iter()
            .chain((0..=u32::MAX).step_by(65_537 * 3 + 1))
        {
            assert_eq!(fold32(v), crate::fold(u64::from(v)), "{v:#x}");
        }
    }
}
