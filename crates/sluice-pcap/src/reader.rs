//! The reader: pcap or pcapng by the magic number, one record at a time.
//!
//! The reader frames the records itself — it reads a record's header, checks its length
//! against [`MAX_RECORD_LEN`] and what the file still holds, and only then hands the whole
//! record to `pcap-file`'s parsers — so it knows each record's byte offset, never allocates
//! for a length the file does not back, and reports a torn record as such.

use crate::error::{Error, ErrorKind};
use crate::{Frame, LinkType, MAX_RECORD_LEN};
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::Endianness;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::time::Duration;

/// pcapng's Section Header Block type (the same bytes in either byte order).
const SHB_TYPE: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
/// pcapng's byte-order magic as written by a big-endian writer.
const BOM_BIG: [u8; 4] = [0x1a, 0x2b, 0x3c, 0x4d];
/// ... and by a little-endian one.
const BOM_LITTLE: [u8; 4] = [0x4d, 0x3c, 0x2b, 0x1a];
/// pcap's file header.
const PCAP_HEADER_LEN: usize = 24;
/// pcap's record header.
const PCAP_RECORD_HEADER_LEN: usize = 16;

enum State {
    Pcap {
        parser: PcapParser,
        linktype: LinkType,
        big: bool,
    },
    PcapNg {
        parser: PcapNgParser,
        /// The link type of each interface of the current section, by interface id.
        links: Vec<LinkType>,
        /// The current section's byte order.
        big: bool,
    },
}

/// A pcap or pcapng capture opened for reading; an iterator of [`Frame`]s.
///
/// The format is detected from the magic number (so misnamed files work), pcap in either byte
/// order with micro- or nanosecond timestamps, pcapng with any number of sections and
/// interfaces (enhanced, simple and obsolete packet blocks; other blocks are skipped). Each
/// frame carries the [`LinkType`] of its capture or interface.
///
/// A damaged file gives an [`Error`] naming the file, the frame number and the byte offset of
/// the record; the reader then ends (the records after a torn one cannot be found).
pub struct CaptureReader<R: Read = BufReader<File>> {
    src: R,
    name: String,
    state: State,
    /// Frames returned so far.
    frames: u64,
    /// Byte offset of the next record.
    offset: u64,
    file_len: Option<u64>,
    buf: Vec<u8>,
    done: bool,
}

/// Reads up to `n` more bytes into `buf`; the number read (fewer only at the end of `src`).
fn read_up_to<R: Read>(src: &mut R, buf: &mut Vec<u8>, n: usize) -> std::io::Result<usize> {
    src.by_ref().take(n as u64).read_to_end(buf)
}

fn u32_at(b: &[u8], at: usize, big: bool) -> u32 {
    let Some(bytes) = b
        .get(at..at.saturating_add(4))
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
    else {
        return 0;
    };
    if big {
        u32::from_be_bytes(bytes)
    } else {
        u32::from_le_bytes(bytes)
    }
}

/// Reads one pcapng block into `buf` (which may already hold its first few bytes) in a
/// section of byte order `big`: `Ok(None)` at a clean end of file, else
/// `Ok(Some(byte order of the block))` (a section header block sets its own).
fn read_block<R: Read>(
    src: &mut R,
    buf: &mut Vec<u8>,
    big: bool,
) -> Result<Option<bool>, ErrorKind> {
    let truncated = |what, need: usize, have: usize| ErrorKind::Truncated {
        pcapng: true,
        what,
        need: need as u64,
        have: have as u64,
    };
    let n = read_up_to(src, buf, 8usize.saturating_sub(buf.len())).map_err(ErrorKind::Read)?;
    if n == 0 && buf.is_empty() {
        return Ok(None);
    }
    if buf.len() < 8 {
        return Err(truncated("block header", 8, buf.len()));
    }
    let mut big = big;
    if buf.get(..4) == Some(&SHB_TYPE[..]) {
        let n = read_up_to(src, buf, 4).map_err(ErrorKind::Read)?;
        if n < 4 {
            return Err(truncated("section header", 12, 8 + n));
        }
        big = match buf.get(8..12) {
            Some(b) if b == BOM_BIG => true,
            Some(b) if b == BOM_LITTLE => false,
            _ => {
                return Err(ErrorKind::Corrupt {
                    pcapng: true,
                    reason: format!(
                        "section header with an unknown byte-order magic {:#010x}",
                        u32_at(buf, 8, true)
                    ),
                })
            }
        };
    }
    let len = u32_at(buf, 4, big);
    if len < 12 || !len.is_multiple_of(4) || len > MAX_RECORD_LEN {
        return Err(ErrorKind::BadLength {
            pcapng: true,
            len: u64::from(len),
        });
    }
    let len = len as usize;
    let have = buf.len();
    if len < have {
        // A section header shorter than its own fixed part.
        return Err(ErrorKind::BadLength {
            pcapng: true,
            len: len as u64,
        });
    }
    let n = read_up_to(src, buf, len - have).map_err(ErrorKind::Read)?;
    if have + n < len {
        return Err(truncated("block", len, have + n));
    }
    Ok(Some(big))
}

fn corrupt(pcapng: bool, e: pcap_file::PcapError) -> ErrorKind {
    ErrorKind::Corrupt {
        pcapng,
        reason: e.to_string(),
    }
}

impl CaptureReader {
    /// Opens `path`, detecting pcap or pcapng from its magic number.
    pub fn open(path: &Path) -> Result<CaptureReader, Error> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| Error::new(&name, ErrorKind::Open(e)))?;
        let len = file.metadata().ok().map(|m| m.len());
        let mut r = CaptureReader::from_reader(&name, BufReader::with_capacity(1 << 16, file))?;
        r.file_len = len;
        Ok(r)
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads a capture from `src`; `name` is what errors call it (a path, `"stdin"` …).
    pub fn from_reader(name: &str, mut src: R) -> Result<CaptureReader<R>, Error> {
        let err = |kind| Error::new(name, kind);
        let mut buf = Vec::with_capacity(1 << 12);
        let n = read_up_to(&mut src, &mut buf, 4).map_err(|e| err(ErrorKind::Read(e)))?;
        if n < 4 {
            return Err(err(ErrorKind::TooShort { have: n as u64 }));
        }
        let magic = u32_at(&buf, 0, false);
        let (state, offset) = match magic {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
                let bad = |reason| {
                    err(ErrorKind::BadHeader {
                        pcapng: false,
                        reason,
                    })
                };
                let n = read_up_to(&mut src, &mut buf, PCAP_HEADER_LEN - 4)
                    .map_err(|e| err(ErrorKind::Read(e)))?;
                if n < PCAP_HEADER_LEN - 4 {
                    return Err(bad(format!(
                        "truncated: the header needs {PCAP_HEADER_LEN} bytes, the file has {}",
                        4 + n
                    )));
                }
                let (_, parser) = PcapParser::new(&buf).map_err(|e| bad(e.to_string()))?;
                let header = parser.header();
                let state = State::Pcap {
                    linktype: LinkType::from(header.datalink),
                    big: header.endianness == Endianness::Big,
                    parser,
                };
                (state, PCAP_HEADER_LEN as u64)
            }
            0x0a0d_0d0a => {
                // The magic is the first block's type: frame that block, then parse it.
                let bad = |kind: ErrorKind| {
                    err(ErrorKind::BadHeader {
                        pcapng: true,
                        reason: kind.to_string(),
                    })
                };
                let big = match read_block(&mut src, &mut buf, false) {
                    Ok(Some(big)) => big,
                    Ok(None) => return Err(err(ErrorKind::TooShort { have: 4 })),
                    Err(e) => return Err(bad(e)),
                };
                let (_, parser) = PcapNgParser::new(&buf).map_err(|e| bad(corrupt(true, e)))?;
                let state = State::PcapNg {
                    parser,
                    links: Vec::new(),
                    big,
                };
                (state, buf.len() as u64)
            }
            other => return Err(err(ErrorKind::NotACapture { magic: other })),
        };
        Ok(CaptureReader {
            src,
            name: name.to_string(),
            state,
            frames: 0,
            offset,
            file_len: None,
            buf,
            done: false,
        })
    }
}

impl<R: Read> CaptureReader<R> {
    /// The next frame, `None` at the end of the file (and after an error).
    pub fn next_frame(&mut self) -> Option<Result<Frame, Error>> {
        if self.done {
            return None;
        }
        match self.read_frame() {
            Ok(Some(f)) => {
                self.frames += 1;
                Some(Ok(f))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(kind) => {
                self.done = true;
                Some(Err(Error::at(
                    &self.name,
                    self.frames + 1,
                    self.offset,
                    kind,
                )))
            }
        }
    }

    /// Reads the next record (pcapng: the next packet block, past the others). `self.offset`
    /// moves past each record read whole, so on an error it is the offset of the bad one.
    fn read_frame(&mut self) -> Result<Option<Frame>, ErrorKind> {
        let buf = &mut self.buf;
        match &mut self.state {
            State::Pcap {
                parser,
                linktype,
                big,
            } => {
                buf.clear();
                let n = read_up_to(&mut self.src, buf, PCAP_RECORD_HEADER_LEN)
                    .map_err(ErrorKind::Read)?;
                if n == 0 {
                    return Ok(None);
                }
                let truncated = |what, need: usize, have: usize| ErrorKind::Truncated {
                    pcapng: false,
                    what,
                    need: need as u64,
                    have: have as u64,
                };
                if n < PCAP_RECORD_HEADER_LEN {
                    return Err(truncated("record header", PCAP_RECORD_HEADER_LEN, n));
                }
                let incl_len = u32_at(buf, 8, *big);
                if incl_len > MAX_RECORD_LEN {
                    return Err(ErrorKind::BadLength {
                        pcapng: false,
                        len: u64::from(incl_len),
                    });
                }
                let need = PCAP_RECORD_HEADER_LEN + incl_len as usize;
                let n =
                    read_up_to(&mut self.src, buf, incl_len as usize).map_err(ErrorKind::Read)?;
                if PCAP_RECORD_HEADER_LEN + n < need {
                    return Err(truncated("record", need, PCAP_RECORD_HEADER_LEN + n));
                }
                let (_, p) = parser.next_packet(buf).map_err(|e| corrupt(false, e))?;
                let frame = Frame {
                    timestamp: p.timestamp,
                    orig_len: p.orig_len,
                    linktype: *linktype,
                    data: p.data.into_owned(),
                };
                self.offset += buf.len() as u64;
                Ok(Some(frame))
            }
            State::PcapNg { parser, links, big } => loop {
                buf.clear();
                let Some(block_big) = read_block(&mut self.src, buf, *big)? else {
                    return Ok(None);
                };
                let (_, block) = parser.next_block(buf).map_err(|e| corrupt(true, e))?;
                // The section's byte order changes only with a section header that parsed.
                let link_of = |id: u64| {
                    usize::try_from(id)
                        .ok()
                        .and_then(|i| links.get(i).copied())
                        .unwrap_or(LinkType::Ethernet)
                };
                let frame = match block {
                    Block::SectionHeader(_) => {
                        *big = block_big;
                        links.clear();
                        None
                    }
                    Block::InterfaceDescription(idb) => {
                        links.push(LinkType::from(idb.linktype));
                        None
                    }
                    Block::EnhancedPacket(epb) => Some(Frame {
                        timestamp: epb.timestamp,
                        orig_len: epb.original_len,
                        linktype: link_of(u64::from(epb.interface_id)),
                        data: epb.data.into_owned(),
                    }),
                    Block::SimplePacket(spb) => Some(Frame {
                        timestamp: Duration::ZERO,
                        orig_len: spb.original_len,
                        linktype: link_of(0),
                        data: spb.data.into_owned(),
                    }),
                    Block::Packet(pb) => Some(Frame {
                        // Obsolete Packet Block: a raw count, in microseconds by default.
                        timestamp: Duration::from_micros(pb.timestamp),
                        orig_len: pb.original_len,
                        linktype: link_of(u64::from(pb.interface_id)),
                        data: pb.data.into_owned(),
                    }),
                    _ => None,
                };
                self.offset += buf.len() as u64;
                if frame.is_some() {
                    return Ok(frame);
                }
            },
        }
    }

    /// Frames returned so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// Bytes of the file consumed so far: the byte offset of the next record.
    pub fn bytes_read(&self) -> u64 {
        self.offset
    }

    /// The size of the file, when the reader was opened from a path.
    pub fn file_len(&self) -> Option<u64> {
        self.file_len
    }

    /// The name errors give the capture.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The link type of a pcap file (`None` for pcapng, whose link type is per interface).
    pub fn pcap_linktype(&self) -> Option<LinkType> {
        match &self.state {
            State::Pcap { linktype, .. } => Some(*linktype),
            State::PcapNg { .. } => None,
        }
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<Frame, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame()
    }
}
