//! Errors of metadata transitions and frame rewrites.

use crate::meta::Slot;
use core::fmt;

/// Why a transition or a rewrite was refused. A refused call changes nothing: neither the
/// metadata nor the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// `encapsulate` on a packet that already has a tunnel (Sluice handles one level).
    AlreadyTunnelled,
    /// `decapsulate` (or an inner-stack rewrite) on a packet without a tunnel.
    NotTunnelled,
    /// An offset would leave the `u16` range or become negative.
    OffsetOutOfRange,
    /// The metadata has no header at the place the operation needs.
    MissingHeader(Slot),
    /// A device asked for a partial checksum at `csum_start`, which is no parsed L4 header.
    PartialNotAtL4 {
        /// The device's checksum start.
        csum_start: u16,
    },
    /// An argument is not allowed for this operation (the text says which).
    InvalidArgument(&'static str),
    /// The frame is shorter than the headers the metadata describes.
    Truncated {
        /// Bytes needed from the start of the frame.
        need: usize,
        /// Length of the frame.
        have: usize,
    },
    /// The header is of a kind this operation does not handle (e.g. ports of ICMP).
    Unsupported(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::AlreadyTunnelled => write!(f, "packet is already tunnelled (one level only)"),
            Error::NotTunnelled => write!(f, "packet is not tunnelled"),
            Error::OffsetOutOfRange => write!(f, "header offset out of range"),
            Error::MissingHeader(slot) => write!(f, "no header for {slot:?}"),
            Error::PartialNotAtL4 { csum_start } => {
                write!(
                    f,
                    "partial checksum start {csum_start} is not at a parsed L4 header"
                )
            }
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Truncated { need, have } => {
                write!(f, "frame truncated: need {need} bytes, have {have}")
            }
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for Error {}
