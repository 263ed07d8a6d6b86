//! Checked big-endian (network order) reads and writes at byte offsets: the one set of byte
//! helpers the Sluice crates share.
//!
//! A read returns `None` when the field does not fit the buffer; a write returns
//! [`OutOfRange`] and changes nothing. Nothing here panics, and nothing is silently dropped:
//! callers handle or propagate the error. Offsets near `usize::MAX` are out of range, not an
//! overflow. `virtio_net_hdr` is little-endian, hence the `_le` pair.
//!
//! ```
//! use sluice_wire::bytes::{read_u16, write_u16};
//! let mut b = [0u8; 4];
//! write_u16(&mut b, 2, 0x0800)?;
//! assert_eq!(read_u16(&b, 2), Some(0x0800));
//! assert_eq!(read_u16(&b, 3), None);
//! assert!(write_u16(&mut b, 3, 1).is_err());
//! assert_eq!(b, [0, 0, 0x08, 0x00]);
//! # Ok::<(), sluice_wire::bytes::OutOfRange>(())
//! ```

use core::fmt;

/// A write (or a read that must succeed) that does not fit the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OutOfRange {
    /// Offset of the field.
    pub at: usize,
    /// Length of the field in bytes.
    pub len: usize,
    /// Length of the buffer.
    pub buf_len: usize,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-byte field at offset {} does not fit a {}-byte buffer",
            self.len, self.at, self.buf_len
        )
    }
}

impl std::error::Error for OutOfRange {}

/// The `N` bytes at `at`, if they fit.
#[inline]
pub fn read_array<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..)?.first_chunk::<N>().copied()
}

/// The byte at `at`, if it fits.
#[inline]
pub fn read_u8(b: &[u8], at: usize) -> Option<u8> {
    b.get(at).copied()
}

/// The big-endian `u16` at `at`, if it fits.
#[inline]
pub fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    read_array(b, at).map(u16::from_be_bytes)
}

/// The little-endian `u16` at `at`, if it fits.
#[inline]
pub fn read_u16_le(b: &[u8], at: usize) -> Option<u16> {
    read_array(b, at).map(u16::from_le_bytes)
}

/// The big-endian 24-bit value at `at` (VXLAN/Geneve VNI), if it fits.
#[inline]
pub fn read_u24(b: &[u8], at: usize) -> Option<u32> {
    read_array(b, at).map(|[x, y, z]| u32::from_be_bytes([0, x, y, z]))
}

/// The big-endian `u32` at `at`, if it fits.
#[inline]
pub fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    read_array(b, at).map(u32::from_be_bytes)
}

/// Copies `src` to `at`; [`OutOfRange`] (and nothing written) when it does not fit.
#[inline]
pub fn write_bytes(b: &mut [u8], at: usize, src: &[u8]) -> Result<(), OutOfRange> {
    let buf_len = b.len();
    match at.checked_add(src.len()).and_then(|end| b.get_mut(at..end)) {
        Some(dst) => {
            dst.copy_from_slice(src);
            Ok(())
        }
        None => Err(OutOfRange {
            at,
            len: src.len(),
            buf_len,
        }),
    }
}

/// Writes `v` at `at`; [`OutOfRange`] when it does not fit.
#[inline]
pub fn write_u8(b: &mut [u8], at: usize, v: u8) -> Result<(), OutOfRange> {
    write_bytes(b, at, &[v])
}

/// Writes big-endian `v` at `at`; [`OutOfRange`] when it does not fit.
#[inline]
pub fn write_u16(b: &mut [u8], at: usize, v: u16) -> Result<(), OutOfRange> {
    write_bytes(b, at, &v.to_be_bytes())
}

/// Writes little-endian `v` at `at`; [`OutOfRange`] when it does not fit.
#[inline]
pub fn write_u16_le(b: &mut [u8], at: usize, v: u16) -> Result<(), OutOfRange> {
    write_bytes(b, at, &v.to_le_bytes())
}

/// Writes the low 24 bits of `v`, big-endian, at `at`; [`OutOfRange`] when they do not fit.
#[inline]
pub fn write_u24(b: &mut [u8], at: usize, v: u32) -> Result<(), OutOfRange> {
    let [_, x, y, z] = v.to_be_bytes();
    write_bytes(b, at, &[x, y, z])
}

/// Writes big-endian `v` at `at`; [`OutOfRange`] when it does not fit.
#[inline]
pub fn write_u32(b: &mut [u8], at: usize, v: u32) -> Result<(), OutOfRange> {
    write_bytes(b, at, &v.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_range() {
        let b = [0x12, 0x34, 0x56, 0x78, 0x9a];
        assert_eq!(read_u8(&b, 4), Some(0x9a));
        assert_eq!(read_u16(&b, 0), Some(0x1234));
        assert_eq!(read_u16(&b, 3), Some(0x789a));
        assert_eq!(read_u16_le(&b, 0), Some(0x3412));
        assert_eq!(read_u24(&b, 1), Some(0x34_5678));
        assert_eq!(read_u32(&b, 1), Some(0x3456_789a));
        assert_eq!(read_array::<2>(&b, 2), Some([0x56, 0x78]));
        assert_eq!(read_array::<0>(&b, 5), Some([]));
    }

    #[test]
    fn reads_out_of_range_are_none() {
        let b = [1, 2, 3, 4];
        assert_eq!(read_u8(&b, 4), None);
        assert_eq!(read_u16(&b, 3), None);
        assert_eq!(read_u16_le(&b, 3), None);
        assert_eq!(read_u24(&b, 2), None);
        assert_eq!(read_u32(&b, 1), None);
        assert_eq!(read_u32(&b, usize::MAX), None);
        assert_eq!(read_u16(&b, usize::MAX - 1), None);
        assert_eq!(read_array::<1>(&b, 5), None);
    }

    #[test]
    fn writes_in_range() {
        let mut b = [0u8; 8];
        write_u8(&mut b, 0, 0xaa).unwrap();
        write_u16(&mut b, 1, 0x1234).unwrap();
        write_u24(&mut b, 3, 0xff_5678).unwrap();
        write_u16_le(&mut b, 6, 0x9abc).unwrap();
        assert_eq!(b, [0xaa, 0x12, 0x34, 0xff, 0x56, 0x78, 0xbc, 0x9a]);
        write_u32(&mut b, 4, 0x0102_0304).unwrap();
        write_bytes(&mut b, 0, &[9, 9]).unwrap();
        assert_eq!(b, [9, 9, 0x34, 0xff, 1, 2, 3, 4]);
    }

    #[test]
    fn out_of_range_write_is_an_error_and_writes_nothing() {
        let mut b = [7u8; 4];
        let e = write_u16(&mut b, 3, 0xffff).unwrap_err();
        assert_eq!(
            e,
            OutOfRange {
                at: 3,
                len: 2,
                buf_len: 4
            }
        );
        assert_eq!(
            e.to_string(),
            "2-byte field at offset 3 does not fit a 4-byte buffer"
        );
        assert_eq!(write_u8(&mut b, 4, 0).unwrap_err().len, 1);
        assert_eq!(write_u16_le(&mut b, 3, 0).unwrap_err().at, 3);
        assert_eq!(write_u24(&mut b, 2, 0).unwrap_err().len, 3);
        assert_eq!(write_u32(&mut b, 1, 0).unwrap_err().len, 4);
        assert_eq!(write_u32(&mut b, usize::MAX, 0).unwrap_err().at, usize::MAX);
        assert_eq!(write_bytes(&mut b, 2, &[0; 3]).unwrap_err().len, 3);
        assert_eq!(b, [7; 4], "a failed write changes nothing");
    }
}
