//! Reading and writing captures for the pcap tools: the same format detection and frame
//! handling as the CLI's (crates/sluice/src/capture.rs, a binary-only module), with errors as
//! message strings carrying the same context (the caller raises them as `PcapError`).

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, TsResolution};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

/// One captured frame.
pub(crate) struct Frame {
    /// Capture timestamp (since the Unix epoch).
    pub timestamp: Duration,
    /// Length on the wire.
    pub orig_len: u32,
    /// Link type of the interface it was captured on.
    pub linktype: DataLink,
    /// The captured bytes.
    pub data: Vec<u8>,
}

enum Inner {
    Pcap(PcapReader<BufReader<File>>),
    PcapNg(PcapNgReader<BufReader<File>>),
}

/// A pcap or pcapng file opened for reading.
pub(crate) struct CaptureReader {
    inner: Inner,
    ng_linktypes: Vec<DataLink>,
    /// The path, for error messages.
    path: String,
    /// Frames returned so far.
    frames: u64,
}

impl CaptureReader {
    /// Opens `path`, detecting pcap or pcapng from its magic number.
    pub fn open(path: &Path) -> Result<Self, String> {
        let p = path.display();
        let mut file = File::open(path).map_err(|e| format!("cannot open capture {p}: {e}"))?;
        let mut magic = [0u8; 4];
        file.read_exact(&mut magic)
            .map_err(|e| format!("{p}: too short to be a capture: {e}"))?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| format!("{p}: cannot seek: {e}"))?;
        let reader = BufReader::with_capacity(1 << 16, file);
        let inner = match u32::from_le_bytes(magic) {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => Inner::Pcap(
                PcapReader::new(reader).map_err(|e| format!("{p}: bad pcap header: {e}"))?,
            ),
            0x0a0d_0d0a => Inner::PcapNg(
                PcapNgReader::new(reader)
                    .map_err(|e| format!("{p}: bad pcapng section header: {e}"))?,
            ),
            other => {
                return Err(format!(
                    "{p}: not a pcap or pcapng file (magic number {other:#010x})"
                ))
            }
        };
        Ok(CaptureReader {
            inner,
            ng_linktypes: Vec::new(),
            path: p.to_string(),
            frames: 0,
        })
    }

    /// The next frame, `None` at the end of the file. An error names the file and the frame
    /// number (as the CLI's `PATH: frame N: corrupt pcap record: ...`).
    pub fn next_frame(&mut self) -> Option<Result<Frame, String>> {
        self.frames += 1;
        match self.read() {
            Some(Err(m)) => Some(Err(format!("{}: frame {}: {m}", self.path, self.frames))),
            other => other,
        }
    }

    fn read(&mut self) -> Option<Result<Frame, String>> {
        match &mut self.inner {
            Inner::Pcap(r) => {
                let linktype = r.header().datalink;
                r.next_packet().map(|p| {
                    p.map(|p| Frame {
                        timestamp: p.timestamp,
                        orig_len: p.orig_len,
                        linktype,
                        data: p.data.into_owned(),
                    })
                    .map_err(|e| format!("corrupt pcap record: {e}"))
                })
            }
            Inner::PcapNg(r) => loop {
                let block = match r.next_block() {
                    None => return None,
                    Some(Err(e)) => return Some(Err(format!("corrupt pcapng block: {e}"))),
                    Some(Ok(b)) => b,
                };
                let linktype_of = |id: usize| {
                    self.ng_linktypes
                        .get(id)
                        .copied()
                        .unwrap_or(DataLink::ETHERNET)
                };
                let frame = match block {
                    Block::SectionHeader(_) => {
                        self.ng_linktypes.clear();
                        continue;
                    }
                    Block::InterfaceDescription(idb) => {
                        self.ng_linktypes.push(idb.linktype);
                        continue;
                    }
                    Block::EnhancedPacket(epb) => Frame {
                        timestamp: epb.timestamp,
                        orig_len: epb.original_len,
                        linktype: linktype_of(epb.interface_id as usize),
                        data: epb.data.into_owned(),
                    },
                    Block::SimplePacket(spb) => Frame {
                        timestamp: Duration::ZERO,
                        orig_len: spb.original_len,
                        linktype: linktype_of(0),
                        data: spb.data.into_owned(),
                    },
                    Block::Packet(pb) => Frame {
                        timestamp: Duration::from_micros(pb.timestamp),
                        orig_len: pb.original_len,
                        linktype: linktype_of(usize::from(pb.interface_id)),
                        data: pb.data.into_owned(),
                    },
                    _ => continue,
                };
                return Some(Ok(frame));
            },
        }
    }
}

/// A pcap file (nanosecond timestamps, Ethernet, 256 KiB snap length) opened for writing.
pub(crate) struct CaptureWriter {
    inner: PcapWriter<BufWriter<File>>,
    path: String,
}

impl CaptureWriter {
    /// Creates (or truncates) `path`.
    pub fn create(path: &Path) -> Result<Self, String> {
        let p = path.display().to_string();
        let file = File::create(path).map_err(|e| format!("cannot create capture {p}: {e}"))?;
        let header = PcapHeader {
            snaplen: 262_144,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            ..PcapHeader::default()
        };
        let inner = PcapWriter::with_header(BufWriter::new(file), header)
            .map_err(|e| format!("cannot write a pcap header to {p}: {e}"))?;
        Ok(CaptureWriter { inner, path: p })
    }

    /// Appends one frame.
    pub fn write(&mut self, timestamp: Duration, data: &[u8]) -> Result<(), String> {
        let len = u32::try_from(data.len()).map_err(|_| "frame larger than 4 GiB".to_string())?;
        self.inner
            .write_packet(&PcapPacket::new(timestamp, len, data))
            .map_err(|e| format!("{}: cannot write a frame: {e}", self.path))?;
        Ok(())
    }

    /// Flushes buffered frames to the file.
    pub fn finish(self) -> Result<(), String> {
        let path = self.path;
        self.inner
            .into_writer()
            .flush()
            .map_err(|e| format!("{path}: cannot flush the capture: {e}"))
    }
}
