//! What the header views share: the macros that declare a view (`view!`) and its plain field
//! accessors (`fields!` for a getter and its setter, `getters!` and `setters!` for one without the
//! other), the field reads and writes over [`crate::bytes`] (a
//! missing byte reads as zero, so no getter can panic on an unchecked buffer) and their length
//! errors.

/// Declares a zero-copy header view `pub struct $name<T: AsRef<[u8]>> { buffer: T }` with the
/// constructors every view shares: `new_unchecked`, `new_checked` (which calls the view's own
/// `check_len`, written next to it) and `into_inner`. The struct's doc comment is passed through;
/// its braces hold the `fields!` entries of its plain fields.
macro_rules! view {
    ($(#[$attr:meta])* pub struct $name:ident { $($fields:tt)* }) => {
        $(#[$attr])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking it.
            pub const fn new_unchecked(buffer: T) -> $name<T> {
                $name { buffer }
            }

            #[doc = concat!("Wraps a buffer after [`", stringify!($name), "::check_len`].")]
            pub fn new_checked(buffer: T) -> Result<$name<T>, $crate::error::ParseError> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// Unwraps the buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }

        fields! { $name; $($fields)* }
    };
}

/// The getter and setter pairs of a view's plain big-endian fields: after the view's name, one
/// `/// doc` + `name, set_name: Type @ OFFSET;` each gives `pub fn name(&self) -> Type` (0 on a
/// short buffer) with that doc and `pub fn set_name(&mut self, value: Type) -> Result<(),
/// OutOfRange>` ([`OutOfRange`] when the field does not fit), documented as setting the field
/// `name` reads. `Type` is a [`Field`] (`u8`, `u16`, `u32`).
macro_rules! fields {
    ($view:ident; $($(#[$attr:meta])* $get:ident, $set:ident: $ty:ident @ $at:expr;)*) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $(
                $(#[$attr])*
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::view::Field>::read(self.buffer.as_ref(), $at)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!(
                    "Sets the field [`", stringify!($get), "`](Self::", stringify!($get), ") reads:"
                )]
                $(#[$attr])*
                pub fn $set(&mut self, value: $ty) -> Result<(), $crate::bytes::OutOfRange> {
                    <$ty as $crate::view::Field>::write(self.buffer.as_mut(), $at, value)
                }
            )*
        }
    };
}

/// `header_len()` of a fixed-length view: always the constant `$len`. Given the view's layer
/// too, also its `check_len`: `Truncated` for `$layer` unless the buffer holds `$len` bytes.
macro_rules! fixed_view_len {
    ($len:ident) => {
        #[doc = concat!("Length of the header: always [`", stringify!($len), "`].")]
        pub const fn header_len() -> usize {
            $len
        }
    };
    ($len:ident, $layer:expr) => {
        #[doc = concat!(
            "Checks that the buffer holds the [`", stringify!($len), "`] bytes of the header ",
            "(`Truncated` for `", stringify!($layer), "` otherwise)."
        )]
        pub fn check_len(&self) -> Result<(), $crate::error::ParseError> {
            $crate::view::need($layer, $len, self.buffer.as_ref().len())
        }

        fixed_view_len!($len);
    };
}

/// `header_len` and `buffer_len` of a fixed-length `Repr` (it writes only its header): both the
/// constant `$len`.
macro_rules! fixed_repr_len {
    ($len:ident) => {
        #[doc = concat!("Length of the header: [`", stringify!($len), "`].")]
        pub const fn header_len(&self) -> usize {
            $len
        }

        #[doc = concat!(
            "Bytes `emit` writes: [`", stringify!($len), "`] (what follows the header is the caller's)."
        )]
        pub const fn buffer_len(&self) -> usize {
            $len
        }
    };
}

/// Plain field getters of a view, one `/// doc` + `fn name -> Type = reader(OFFSET);` each:
/// `pub fn name(&self) -> Type` reading the field with [`view`](crate::view)'s `reader` (`u8_at`,
/// `u16_at`, `u24_at`, `u32_at`, `array_at`), so a short buffer reads as zero.
macro_rules! getters {
    ($($(#[$attr:meta])* fn $name:ident -> $ty:ty = $read:ident($at:expr);)*) => {
        $(
            $(#[$attr])*
            pub fn $name(&self) -> $ty {
                $crate::view::$read(self.buffer.as_ref(), $at)
            }
        )*
    };
}

/// Plain field setters of a view, one `/// doc` + `fn set_name(value: Type) = writer(OFFSET);`
/// each: `pub fn set_name(&mut self, value: Type) -> Result<(), OutOfRange>` writing the field
/// with [`view`](crate::view)'s `writer` (`set_u8`, `set_u16`, `set_u24`, `set_u32`,
/// `set_bytes`), [`OutOfRange`] when it does not fit the buffer.
macro_rules! setters {
    ($($(#[$attr:meta])* fn $name:ident($v:ident: $ty:ty) = $write:ident($at:expr);)*) => {
        $(
            $(#[$attr])*
            pub fn $name(&mut self, $v: $ty) -> Result<(), $crate::bytes::OutOfRange> {
                $crate::view::$write(self.buffer.as_mut(), $at, $v)
            }
        )*
    };
}
use crate::bytes::{self, OutOfRange};
use crate::error::{ParseError, Reason};
use crate::layout::Layer;
use core::ops::Range;

/// A big-endian field type the `fields!` accessors read (0 on a short buffer) and write
/// ([`OutOfRange`] when it does not fit).
pub(crate) trait Field: Sized {
    /// The field at `at`, or 0.
    fn read(b: &[u8], at: usize) -> Self;
    /// Writes the field at `at`.
    fn write(b: &mut [u8], at: usize, v: Self) -> Result<(), OutOfRange>;
}

impl Field for u8 {
    #[inline]
    fn read(b: &[u8], at: usize) -> u8 {
        u8_at(b, at)
    }
    #[inline]
    fn write(b: &mut [u8], at: usize, v: u8) -> Result<(), OutOfRange> {
        set_u8(b, at, v)
    }
}

impl Field for u16 {
    #[inline]
    fn read(b: &[u8], at: usize) -> u16 {
        u16_at(b, at)
    }
    #[inline]
    fn write(b: &mut [u8], at: usize, v: u16) -> Result<(), OutOfRange> {
        set_u16(b, at, v)
    }
}

impl Field for u32 {
    #[inline]
    fn read(b: &[u8], at: usize) -> u32 {
        u32_at(b, at)
    }
    #[inline]
    fn write(b: &mut [u8], at: usize, v: u32) -> Result<(), OutOfRange> {
        set_u32(b, at, v)
    }
}

/// The byte at `at`, or 0.
#[inline]
pub(crate) fn u8_at(b: &[u8], at: usize) -> u8 {
    bytes::read_u8(b, at).unwrap_or(0)
}

/// The big-endian `u16` at `at`, or 0.
#[inline]
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    bytes::read_u16(b, at).unwrap_or(0)
}

/// The big-endian 24-bit value at `at`, or 0.
#[inline]
pub(crate) fn u24_at(b: &[u8], at: usize) -> u32 {
    bytes::read_u24(b, at).unwrap_or(0)
}

/// The big-endian `u32` at `at`, or 0.
#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    bytes::read_u32(b, at).unwrap_or(0)
}

/// `N` bytes at `at`, or zeros.
#[inline]
pub(crate) fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    bytes::read_array(b, at).unwrap_or([0; N])
}

/// Writes `v` at `at`; [`OutOfRange`] on a short `new_unchecked` buffer (a view from
/// `new_checked` has room for every field its setters write).
#[inline]
pub(crate) fn set_u8(b: &mut [u8], at: usize, v: u8) -> Result<(), OutOfRange> {
    bytes::write_u8(b, at, v)
}

/// Writes `src` at `at`; [`OutOfRange`] when it does not fit.
#[inline]
pub(crate) fn set_bytes(b: &mut [u8], at: usize, src: &[u8]) -> Result<(), OutOfRange> {
    bytes::write_bytes(b, at, src)
}

/// Writes big-endian `v` at `at`; [`OutOfRange`] when it does not fit.
#[inline]
pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) -> Result<(), OutOfRange> {
    bytes::write_u16(b, at, v)
}

/// Writes the low 24 bits of `v`, big-endian, at `at`; [`OutOfRange`] when they do not fit.
#[inline]
pub(crate) fn set_u24(b: &mut [u8], at: usize, v: u32) -> Result<(), OutOfRange> {
    bytes::write_u24(b, at, v)
}

/// Writes big-endian `v` at `at`; [`OutOfRange`] when it does not fit.
#[inline]
pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) -> Result<(), OutOfRange> {
    bytes::write_u32(b, at, v)
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
