//! Reading packet captures (pcap and pcapng), for the offline tools.
//!
//! The format is detected from the file's magic number, so `.pcap`, `.pcapng` and misnamed files
//! all work. Only Ethernet link types are decoded as frames; frames of other link types are
//! reported as such so that nothing is skipped silently.

use anyhow::{bail, Context, Result};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

/// One captured frame.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Capture timestamp (since the Unix epoch).
    pub timestamp: Duration,
    /// Length on the wire (may exceed `data.len()` when the capture was truncated).
    pub orig_len: u32,
    /// The link type of the interface the frame was captured on.
    pub linktype: DataLink,
    /// The captured bytes.
    pub data: Vec<u8>,
}

enum Inner {
    Pcap(PcapReader<BufReader<File>>),
    PcapNg(PcapNgReader<BufReader<File>>),
}

/// A capture file opened for reading, pcap or pcapng.
pub struct CaptureReader {
    inner: Inner,
    /// Total size of the file, for progress reports.
    pub file_len: u64,
    /// Frames read so far.
    pub frames_read: u64,
    bytes_read: u64,
    ng_linktypes: Vec<DataLink>,
}

impl CaptureReader {
    /// Opens `path`, detecting pcap or pcapng from its magic number.
    pub fn open(path: &Path) -> Result<Self> {
        let mut file =
            File::open(path).with_context(|| format!("cannot open capture {}", path.display()))?;
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut magic = [0u8; 4];
        file.read_exact(&mut magic)
            .with_context(|| format!("{}: too short to be a capture", path.display()))?;
        file.seek(SeekFrom::Start(0))?;
        let reader = BufReader::with_capacity(1 << 16, file);
        let inner = match u32::from_le_bytes(magic) {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => Inner::Pcap(
                PcapReader::new(reader)
                    .with_context(|| format!("{}: bad pcap header", path.display()))?,
            ),
            0x0a0d_0d0a => Inner::PcapNg(
                PcapNgReader::new(reader)
                    .with_context(|| format!("{}: bad pcapng section header", path.display()))?,
            ),
            other => bail!(
                "{}: not a pcap or pcapng file (magic number {other:#010x})",
                path.display()
            ),
        };
        Ok(CaptureReader {
            inner,
            file_len,
            frames_read: 0,
            bytes_read: 0,
            ng_linktypes: Vec::new(),
        })
    }

    /// Approximate bytes consumed so far (frame data plus record headers), for progress.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The next frame, `None` at the end of the file.
    pub fn next_frame(&mut self) -> Option<Result<Frame>> {
        let frame = match &mut self.inner {
            Inner::Pcap(r) => {
                let linktype = r.header().datalink;
                r.next_packet().map(|p| {
                    p.map(|p| Frame {
                        timestamp: p.timestamp,
                        orig_len: p.orig_len,
                        linktype,
                        data: p.data.into_owned(),
                    })
                    .context("corrupt pcap record")
                })
            }
            Inner::PcapNg(r) => loop {
                // Blocks borrow the reader, so interface link types are tracked here.
                let block = match r.next_block() {
                    None => break None,
                    Some(Err(e)) => break Some(Err(e).context("corrupt pcapng block")),
                    Some(Ok(b)) => b,
                };
                let linktype_of = |id: usize| {
                    self.ng_linktypes
                        .get(id)
                        .copied()
                        .unwrap_or(DataLink::ETHERNET)
                };
                match block {
                    Block::SectionHeader(_) => self.ng_linktypes.clear(),
                    Block::InterfaceDescription(idb) => self.ng_linktypes.push(idb.linktype),
                    Block::EnhancedPacket(epb) => {
                        break Some(Ok(Frame {
                            timestamp: epb.timestamp,
                            orig_len: epb.original_len,
                            linktype: linktype_of(epb.interface_id as usize),
                            data: epb.data.into_owned(),
                        }));
                    }
                    Block::SimplePacket(spb) => {
                        break Some(Ok(Frame {
                            timestamp: Duration::ZERO,
                            orig_len: spb.original_len,
                            linktype: linktype_of(0),
                            data: spb.data.into_owned(),
                        }));
                    }
                    Block::Packet(pb) => {
                        break Some(Ok(Frame {
                            // Obsolete Packet Block: a raw count, in microseconds by default.
                            timestamp: Duration::from_micros(pb.timestamp),
                            orig_len: pb.original_len,
                            linktype: linktype_of(usize::from(pb.interface_id)),
                            data: pb.data.into_owned(),
                        }));
                    }
                    _ => continue,
                }
            },
        };
        if let Some(Ok(f)) = &frame {
            self.frames_read += 1;
            self.bytes_read += f.data.len() as u64 + 16;
        }
        frame
    }
}

/// A pcap file (nanosecond timestamps, Ethernet) opened for writing.
pub struct CaptureWriter {
    inner: pcap_file::pcap::PcapWriter<std::io::BufWriter<File>>,
}

impl CaptureWriter {
    /// Creates (or truncates) `path` as an Ethernet pcap with a 256 KiB snap length, enough for
    /// 64 KiB GSO super-frames.
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path)
            .with_context(|| format!("cannot create capture {}", path.display()))?;
        let header = pcap_file::pcap::PcapHeader {
            snaplen: 262_144,
            datalink: DataLink::ETHERNET,
            ts_resolution: pcap_file::TsResolution::NanoSecond,
            ..pcap_file::pcap::PcapHeader::default()
        };
        let inner = pcap_file::pcap::PcapWriter::with_header(std::io::BufWriter::new(file), header)
            .with_context(|| format!("cannot write a pcap header to {}", path.display()))?;
        Ok(CaptureWriter { inner })
    }

    /// Appends one frame.
    pub fn write(&mut self, timestamp: Duration, data: &[u8]) -> Result<()> {
        let len = u32::try_from(data.len()).context("frame larger than 4 GiB")?;
        self.inner
            .write_packet(&pcap_file::pcap::PcapPacket::new(timestamp, len, data))
            .context("cannot write a frame")?;
        Ok(())
    }

    /// Flushes buffered frames to the file.
    pub fn finish(self) -> Result<()> {
        use std::io::Write;
        self.inner
            .into_writer()
            .flush()
            .context("cannot flush the capture")
    }
}
