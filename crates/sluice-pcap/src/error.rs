//! Errors with their context: the file, the frame number and the byte offset.

use std::fmt;
use std::io;

/// What went wrong with a capture.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file could not be opened.
    Open(io::Error),
    /// The file could not be created.
    Create(io::Error),
    /// Fewer than 4 bytes: no magic number.
    TooShort {
        /// Bytes in the file.
        have: u64,
    },
    /// The magic number is neither pcap's nor pcapng's.
    NotACapture {
        /// The first four bytes, little-endian.
        magic: u32,
    },
    /// The pcap file header or the first pcapng section header is unusable.
    BadHeader {
        /// pcapng (else pcap).
        pcapng: bool,
        /// Why.
        reason: String,
    },
    /// A record (or its header) is cut short by the end of the file.
    Truncated {
        /// pcapng (else pcap).
        pcapng: bool,
        /// What was being read (`record header`, `record`, `block header`, `block`).
        what: &'static str,
        /// Bytes it needs.
        need: u64,
        /// Bytes the file still had.
        have: u64,
    },
    /// A length field larger than [`crate::MAX_RECORD_LEN`] (or, for a pcapng block, smaller
    /// than a block can be).
    BadLength {
        /// pcapng (else pcap).
        pcapng: bool,
        /// The length field.
        len: u64,
    },
    /// A record that `pcap-file` refuses (bad timestamp, lengths that disagree, bad options …).
    Corrupt {
        /// pcapng (else pcap).
        pcapng: bool,
        /// Why.
        reason: String,
    },
    /// Reading failed.
    Read(io::Error),
    /// Writing failed.
    Write {
        /// What was being written.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

/// A capture error: what went wrong ([`Error::kind`]), in which file, at which frame and byte
/// offset. Its message reads like `PATH: frame 3: corrupt pcap record: truncated: record needs
/// 74 bytes, the file has 60 (byte offset 236)`.
#[derive(Debug)]
pub struct Error {
    name: String,
    frame: Option<u64>,
    offset: Option<u64>,
    kind: ErrorKind,
}

impl Error {
    pub(crate) fn new(name: &str, kind: ErrorKind) -> Error {
        Error {
            name: name.to_string(),
            frame: None,
            offset: None,
            kind,
        }
    }

    pub(crate) fn at(name: &str, frame: u64, offset: u64, kind: ErrorKind) -> Error {
        Error {
            name: name.to_string(),
            frame: Some(frame),
            offset: Some(offset),
            kind,
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The file (or the name the reader or writer was given).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The 1-based number of the frame being read, for errors in a record.
    pub fn frame(&self) -> Option<u64> {
        self.frame
    }

    /// The byte offset in the file of the record (or pcapng block) that failed.
    pub fn offset(&self) -> Option<u64> {
        self.offset
    }
}

/// What went wrong, without the file, frame and offset (for record errors, without the
/// `corrupt pcap record:` prefix either).
impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Open(e) | ErrorKind::Create(e) | ErrorKind::Read(e) => write!(f, "{e}"),
            ErrorKind::TooShort { have } => write!(f, "too short to be a capture ({have} bytes)"),
            ErrorKind::NotACapture { magic } => {
                write!(f, "not a pcap or pcapng file (magic number {magic:#010x})")
            }
            ErrorKind::BadHeader { reason, .. } | ErrorKind::Corrupt { reason, .. } => {
                write!(f, "{reason}")
            }
            ErrorKind::Truncated {
                what, need, have, ..
            } => write!(
                f,
                "truncated: {what} needs {need} bytes, the file has {have}"
            ),
            ErrorKind::BadLength { pcapng: false, len } => write!(
                f,
                "captured length {len} is more than {} bytes",
                crate::MAX_RECORD_LEN
            ),
            ErrorKind::BadLength { pcapng: true, len } => write!(
                f,
                "block length {len} is not a multiple of 4 from 12 to {} bytes",
                crate::MAX_RECORD_LEN
            ),
            ErrorKind::Write { what, reason } => write!(f, "cannot write {what}: {reason}"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        let kind = &self.kind;
        let pcapng = match kind {
            ErrorKind::Open(_) => return write!(f, "cannot open capture {name}: {kind}"),
            ErrorKind::Create(_) => return write!(f, "cannot create capture {name}: {kind}"),
            ErrorKind::BadHeader { pcapng: true, .. } => {
                return write!(f, "{name}: bad pcapng section header: {kind}")
            }
            ErrorKind::BadHeader { pcapng: false, .. } => {
                return write!(f, "{name}: bad pcap header: {kind}")
            }
            ErrorKind::TooShort { .. }
            | ErrorKind::NotACapture { .. }
            | ErrorKind::Write { .. } => return write!(f, "{name}: {kind}"),
            ErrorKind::Truncated { pcapng, .. }
            | ErrorKind::BadLength { pcapng, .. }
            | ErrorKind::Corrupt { pcapng, .. } => Some(*pcapng),
            ErrorKind::Read(_) => None,
        };
        write!(f, "{name}: ")?;
        if let Some(n) = self.frame {
            write!(f, "frame {n}: ")?;
        }
        match pcapng {
            Some(true) => write!(f, "corrupt pcapng block: {kind}")?,
            Some(false) => write!(f, "corrupt pcap record: {kind}")?,
            None => write!(f, "cannot read: {kind}")?,
        }
        if let Some(o) = self.offset {
            write!(f, " (byte offset {o})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}
