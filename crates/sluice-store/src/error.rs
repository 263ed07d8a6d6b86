//! The store's errors.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why the store could not open, commit or compact.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// A system call on one of the store's files failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the store was doing (`open`, `write`, `fdatasync`, `rename`, …).
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// A file holds something the store did not write: a bad magic number, version or
    /// generation, a complete record whose checksum is wrong, or a record that does not decode.
    /// Nothing was loaded.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The byte offset of the record (or header) that is wrong.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// Another process holds the store's lock.
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A change of a commit was refused; nothing of that commit was written.
    InvalidChange {
        /// The change's index in the batch.
        index: usize,
        /// Why.
        reason: String,
    },
    /// A commit's record would exceed the largest record the format frames (4 GiB).
    TooLarge {
        /// The record's size in bytes.
        bytes: usize,
    },
    /// An earlier write, sync or compaction failed in a way that leaves the journal's tail
    /// unknown; no more commits are taken. Reopen the store: [`crate::Store::open`] repairs it.
    Poisoned,
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn corrupt(
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        StoreError::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io { path, op, source } => {
                write!(f, "store: {op} {}: {source}", path.display())
            }
            StoreError::Corrupt {
                path,
                offset,
                reason,
            } => write!(
                f,
                "store: {} is corrupt at byte offset {offset}: {reason}",
                path.display()
            ),
            StoreError::Locked { path } => {
                write!(f, "store: {} is locked by another process", path.display())
            }
            StoreError::InvalidChange { index, reason } => {
                write!(f, "store: change {index} of the commit refused: {reason}")
            }
            StoreError::TooLarge { bytes } => write!(
                f,
                "store: a commit of {bytes} bytes exceeds the 4 GiB record limit; split it"
            ),
            StoreError::Poisoned => write!(
                f,
                "store: an earlier write failed; reopen the store before committing"
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
