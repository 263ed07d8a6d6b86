//! File headers and record framing.
//!
//! A file starts with a 24-byte header: an 8-byte magic (`SLUICEJ\0` for the journal,
//! `SLUICES\0` for a snapshot), the format version (u32 LE), the generation (u64 LE) and the
//! CRC32c of those 20 bytes (u32 LE). Records follow, each a 12-byte header — payload length
//! (u32 LE), CRC32c of the payload (u32 LE), CRC32c of those 8 bytes (u32 LE) — and the
//! payload. The header's own checksum tells a corrupt length (an error) from a torn write (a
//! tail that ends early), so a flipped length bit can never pass for a torn tail and silently
//! drop the records after it.

use std::ops::Range;

/// The format version this crate writes and reads.
pub(crate) const VERSION: u32 = 1;
/// File header length.
pub(crate) const FILE_HEADER: usize = 24;
/// Record header length.
pub(crate) const RECORD_HEADER: usize = 12;

/// Which file a header belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    Journal,
    Snapshot,
}

impl FileKind {
    fn magic(self) -> &'static [u8; 8] {
        match self {
            FileKind::Journal => b"SLUICEJ\0",
            FileKind::Snapshot => b"SLUICES\0",
        }
    }
}

/// The 24-byte header of a file of `kind` at `generation`.
pub(crate) fn file_header(kind: FileKind, generation: u64) -> [u8; FILE_HEADER] {
    let mut h = [0u8; FILE_HEADER];
    h[..8].copy_from_slice(kind.magic());
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32c::crc32c(&h[..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// Checks a file's header and returns its generation; `Err` says what is wrong (at offset 0).
pub(crate) fn parse_file_header(kind: FileKind, bytes: &[u8]) -> Result<u64, String> {
    let Some(h) = bytes.get(..FILE_HEADER) else {
        return Err(format!(
            "file of {} bytes is shorter than its {FILE_HEADER}-byte header",
            bytes.len()
        ));
    };
    if &h[..8] != kind.magic() {
        return Err(format!("bad magic {:02x?}", &h[..8]));
    }
    if crc32c::crc32c(&h[..20]) != le32(&h[20..24]) {
        return Err("file header checksum mismatch".into());
    }
    let version = le32(&h[8..12]);
    if version != VERSION {
        return Err(format!(
            "format version {version}, this build reads version {VERSION}"
        ));
    }
    let mut g = [0u8; 8];
    g.copy_from_slice(&h[12..20]);
    Ok(u64::from_le_bytes(g))
}

/// Writes a record's 12-byte header for `payload` into `header`.
pub(crate) fn record_header(payload: &[u8]) -> Result<[u8; RECORD_HEADER], usize> {
    let len = u32::try_from(payload.len()).map_err(|_| payload.len() + RECORD_HEADER)?;
    let mut h = [0u8; RECORD_HEADER];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4..8].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let hc = crc32c::crc32c(&h[..8]);
    h[8..12].copy_from_slice(&hc.to_le_bytes());
    Ok(h)
}

/// What a scan found after the last good record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tail {
    /// The file ends exactly after a record (or the header).
    Clean,
    /// The bytes from `good_len` to the end are an incomplete last record.
    Torn { good_len: usize, reason: String },
}

/// A record a scan stopped at: its offset and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadRecord {
    pub offset: usize,
    pub reason: String,
}

/// Walks the records after the file header, calling `each(payload_range)` for each good one.
/// A last record that is incomplete, or complete but with a bad payload checksum and nothing
/// after it, is a torn tail (the write that was cut short was never acknowledged). A bad
/// checksum anywhere else is a [`BadRecord`]; so is any error `each` returns.
pub(crate) fn scan(
    bytes: &[u8],
    mut each: impl FnMut(Range<usize>) -> Result<(), BadRecord>,
) -> Result<Tail, BadRecord> {
    let mut pos = FILE_HEADER;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        if rest.len() < RECORD_HEADER {
            return Ok(Tail::Torn {
                good_len: pos,
                reason: format!("{}-byte record header cut short", rest.len()),
            });
        }
        let h = &rest[..RECORD_HEADER];
        if crc32c::crc32c(&h[..8]) != le32(&h[8..12]) {
            // A crash can leave zero-filled space after the last write; anything else here is
            // not something a cut-short write produces.
            if rest.iter().all(|&b| b == 0) {
                return Ok(Tail::Torn {
                    good_len: pos,
                    reason: format!("{} zero bytes after the last record", rest.len()),
                });
            }
            return Err(BadRecord {
                offset: pos,
                reason: "record header checksum mismatch".into(),
            });
        }
        let len = le32(&h[..4]) as usize;
        let body = &rest[RECORD_HEADER..];
        if body.len() < len {
            return Ok(Tail::Torn {
                good_len: pos,
                reason: format!("record of {len} bytes cut short at {} bytes", body.len()),
            });
        }
        if crc32c::crc32c(&body[..len]) != le32(&h[4..8]) {
            if body.len() == len {
                return Ok(Tail::Torn {
                    good_len: pos,
                    reason: "last record's payload checksum mismatch".into(),
                });
            }
            return Err(BadRecord {
                offset: pos,
                reason: "record payload checksum mismatch".into(),
            });
        }
        let start = pos + RECORD_HEADER;
        each(start..start + len)?;
        pos = start + len;
    }
    Ok(Tail::Clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(records: &[&[u8]]) -> Vec<u8> {
        let mut f = file_header(FileKind::Journal, 3).to_vec();
        for r in records {
            f.extend_from_slice(&record_header(r).unwrap());
            f.extend_from_slice(r);
        }
        f
    }

    fn payloads(bytes: &[u8]) -> Result<(Vec<Vec<u8>>, Tail), BadRecord> {
        let mut v = Vec::new();
        let tail = scan(bytes, |r| {
            v.push(bytes[r].to_vec());
            Ok(())
        })?;
        Ok((v, tail))
    }

    #[test]
    fn header_round_trips_and_rejects_the_other_kind() {
        let h = file_header(FileKind::Snapshot, 42);
        assert_eq!(parse_file_header(FileKind::Snapshot, &h), Ok(42));
        assert!(parse_file_header(FileKind::Journal, &h)
            .unwrap_err()
            .contains("magic"));
        assert!(parse_file_header(FileKind::Snapshot, &h[..23])
            .unwrap_err()
            .contains("shorter"));
    }

    #[test]
    fn a_clean_file_scans_whole() {
        let f = file(&[b"one", b"two", b""]);
        let (v, tail) = payloads(&f).unwrap();
        assert_eq!(v, vec![b"one".to_vec(), b"two".to_vec(), Vec::new()]);
        assert_eq!(tail, Tail::Clean);
    }

    #[test]
    fn trailing_zeros_are_a_torn_tail_and_other_garbage_is_not() {
        let mut f = file(&[b"one"]);
        let good = f.len();
        f.extend_from_slice(&[0u8; 40]);
        let (v, tail) = payloads(&f).unwrap();
        assert_eq!(v.len(), 1);
        assert!(matches!(tail, Tail::Torn { good_len, .. } if good_len == good));
        f[good + 20] = 1;
        assert_eq!(payloads(&f).unwrap_err().offset, good);
    }

    #[test]
    fn a_bad_length_is_corruption_not_a_torn_tail() {
        let mut f = file(&[b"one", b"two"]);
        f[FILE_HEADER] ^= 0x40; // the first record's length
        let e = payloads(&f).unwrap_err();
        assert_eq!(e.offset, FILE_HEADER);
        assert!(e.reason.contains("header checksum"));
    }
}
