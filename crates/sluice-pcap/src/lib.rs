#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod error;
mod link;
mod reader;
mod writer;

pub use error::{Error, ErrorKind};
pub use link::LinkType;
pub use reader::CaptureReader;
pub use writer::{CaptureWriter, SNAPLEN};

use std::time::Duration;

/// Longest record accepted, in bytes: a pcap record's captured length or a whole pcapng block
/// (16 MiB, as Wireshark's largest block). A longer length field is reported as
/// [`ErrorKind::BadLength`] before anything is allocated for it.
pub const MAX_RECORD_LEN: u32 = 16 << 20;

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Capture timestamp (since the Unix epoch).
    pub timestamp: Duration,
    /// Length on the wire (may exceed `data.len()` when the capture was truncated).
    pub orig_len: u32,
    /// The link type of the interface the frame was captured on.
    pub linktype: LinkType,
    /// The captured bytes.
    pub data: Vec<u8>,
}
