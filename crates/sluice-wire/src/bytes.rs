//! Bounds-checked big-endian reads and writes shared by the header views: a missing byte
//! reads as zero and a write past the end is dropped, so no accessor can panic.
use crate::error::{ParseError, Reason};
use crate::layout::Layer;
use core::ops::Range;

/// The byte at `at`, or 0.
pub(crate) fn u8_at(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

/// The big-endian `u16` at `at`, or 0.
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    match b.get(at..at.saturating_add(2)) {
        Some(&[x, y]) => u16::from_be_bytes([x, y]),
        _ => 0,
    }
}

/// The big-endian 24-bit value at `at`, or 0.
pub(crate) fn u24_at(b: &[u8], at: usize) -> u32 {
    match b.get(at..at.saturating_add(3)) {
        Some(&[x, y, z]) => u32::from_be_bytes([0, x, y, z]),
        _ => 0,
    }
}

/// The big-endian `u32` at `at`, or 0.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    match b.get(at..at.saturating_add(4)) {
        Some(&[w, x, y, z]) => u32::from_be_bytes([w, x, y, z]),
        _ => 0,
    }
}

/// `N` bytes at `at`, or zeros.
pub(crate) fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    if let Some(src) = b.get(at..at.saturating_add(N)) {
        out.copy_from_slice(src);
    }
    out
}

/// Writes `v` at `at` if it fits.
pub(crate) fn set_u8(b: &mut [u8], at: usize, v: u8) {
    if let Some(slot) = b.get_mut(at) {
        *slot = v;
    }
}

/// Writes `src` at `at` if it fits.
pub(crate) fn set_bytes(b: &mut [u8], at: usize, src: &[u8]) {
    if let Some(dst) = b.get_mut(at..at.saturating_add(src.len())) {
        dst.copy_from_slice(src);
    }
}

/// Writes big-endian `v` at `at` if it fits.
pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) {
    set_bytes(b, at, &v.to_be_bytes());
}

/// Writes the low 24 bits of `v`, big-endian, at `at` if they fit.
pub(crate) fn set_u24(b: &mut [u8], at: usize, v: u32) {
    let [_, x, y, z] = v.to_be_bytes();
    set_bytes(b, at, &[x, y, z]);
}

/// Writes big-endian `v` at `at` if it fits.
pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) {
    set_bytes(b, at, &v.to_be_bytes());
}

/// `b[r]`, clamped to the buffer.
pub(crate) fn range(b: &[u8], r: Range<usize>) -> &[u8] {
    let end = r.end.min(b.len());
    b.get(r.start.min(end)..end).unwrap_or(&[])
}

/// `&mut b[r]`, clamped to the buffer.
pub(crate) fn range_mut(b: &mut [u8], r: Range<usize>) -> &mut [u8] {
    let end = r.end.min(b.len());
    b.get_mut(r.start.min(end)..end).unwrap_or(&mut [])
}

/// A `ParseError` at offset 0 of `layer` (the caller adds its base offset).
pub(crate) const fn err(layer: Layer, reason: Reason) -> ParseError {
    ParseError {
        layer,
        offset: 0,
        reason,
    }
}

/// `Reason::Truncated` unless `have >= need`.
pub(crate) const fn need(layer: Layer, need: usize, have: usize) -> Result<(), ParseError> {
    if have < need {
        Err(err(layer, Reason::Truncated { need, have }))
    } else {
        Ok(())
    }
}
